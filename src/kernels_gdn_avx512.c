/* kernels_gdn_avx512.c: ts_gdn_step_rows with AVX-512 (dv % 16 == 0).
 *
 * Owns: ts_avx512_gdn_step_rows. The reference for its bits is
 * ts_avx512_gdn_step (src/cpu/linear_avx512.c), applied row after row; per
 * element and row this performs the same operations in the same order:
 *   sv = S * decay                      (mul)
 *   p  = fma(sv, k_i, p)  over i = 0..dk-1 in order, from 0
 *   p  = beta * (v - p)                 (sub, mul)
 *   S  = fma(k_i, p, sv)                (sv recomputed: the same mul, so the
 *                                        same bits as the stored decayed value)
 *   o  = fma(S, q_i, o)   over i in order, from 0
 * What differs is only when things happen: the decayed state is not stored
 * (it is recomputed in the update pass), and row t+1's prediction p is
 * accumulated in row t's update pass from the freshly updated S (the same
 * values, the same i order). Each row thus costs one pass over the state
 * (one load, one store per element) instead of two; the first row adds one
 * read-only pass. Columns are taken 128 at a time (8 vectors: 8 prediction
 * chains and 8 output chains in flight hide the FMA latency).
 * Does not own: the dispatch (kernels_gdn.c).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "kernels_gdn.h"

static inline __attribute__((always_inline)) void rows_block(float *S, const float *S_in, const float *const *k,
                                                              const float *const *v, const float *const *q,
                                                              const float *decay, const float *beta,
                                                              float *const *o, int n, int dk, int dv, int j0,
                                                              const int NV) {
    __m512 p[8], pn[8], ov[8];
    /* row 0's prediction: a read-only pass over S_in */
    {
        const __m512 dc = _mm512_set1_ps(decay[0]);
        for (int u = 0; u < NV; u++) p[u] = _mm512_setzero_ps();
        for (int i = 0; i < dk; i++) {
            const float *Si = S_in + (size_t)i * dv + j0;
            const __m512 ki = _mm512_set1_ps(k[0][i]);
            for (int u = 0; u < NV; u++) p[u] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(Si + 16 * u), dc), ki, p[u]);
        }
    }
    for (int t = 0; t < n; t++) {
        const float *src = t == 0 ? S_in : S;
        const __m512 dc = _mm512_set1_ps(decay[t]), bt = _mm512_set1_ps(beta[t]);
        for (int u = 0; u < NV; u++) {
            p[u] = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(v[t] + j0 + 16 * u), p[u]));
            ov[u] = _mm512_setzero_ps();
            pn[u] = _mm512_setzero_ps();
        }
        const float *kt = k[t], *qt = q[t];
        if (t + 1 < n) { /* update row t and predict row t+1 in one pass */
            const __m512 dn = _mm512_set1_ps(decay[t + 1]);
            const float *kn = k[t + 1];
            for (int i = 0; i < dk; i++) {
                const float *Ri = src + (size_t)i * dv + j0;
                float *Si = S + (size_t)i * dv + j0;
                const __m512 ki = _mm512_set1_ps(kt[i]), qi = _mm512_set1_ps(qt[i]), kni = _mm512_set1_ps(kn[i]);
                for (int u = 0; u < NV; u++) {
                    __m512 sv = _mm512_fmadd_ps(ki, p[u], _mm512_mul_ps(_mm512_loadu_ps(Ri + 16 * u), dc));
                    _mm512_storeu_ps(Si + 16 * u, sv);
                    ov[u] = _mm512_fmadd_ps(sv, qi, ov[u]);
                    pn[u] = _mm512_fmadd_ps(_mm512_mul_ps(sv, dn), kni, pn[u]);
                }
            }
        } else {
            for (int i = 0; i < dk; i++) {
                const float *Ri = src + (size_t)i * dv + j0;
                float *Si = S + (size_t)i * dv + j0;
                const __m512 ki = _mm512_set1_ps(kt[i]), qi = _mm512_set1_ps(qt[i]);
                for (int u = 0; u < NV; u++) {
                    __m512 sv = _mm512_fmadd_ps(ki, p[u], _mm512_mul_ps(_mm512_loadu_ps(Ri + 16 * u), dc));
                    _mm512_storeu_ps(Si + 16 * u, sv);
                    ov[u] = _mm512_fmadd_ps(sv, qi, ov[u]);
                }
            }
        }
        if (o && o[t])
            for (int u = 0; u < NV; u++) _mm512_storeu_ps(o[t] + j0 + 16 * u, ov[u]);
        for (int u = 0; u < NV; u++) p[u] = pn[u];
    }
}

void ts_avx512_gdn_step_rows(float *S, const float *S_in, const float *const *k, const float *const *v,
                             const float *const *q, const float *decay, const float *beta, float *const *o, int n,
                             int dk, int dv) {
    for (int j0 = 0; j0 < dv; j0 += 128) {
        switch ((dv - j0) / 16 < 8 ? (dv - j0) / 16 : 8) {
        case 8: rows_block(S, S_in, k, v, q, decay, beta, o, n, dk, dv, j0, 8); break;
        case 7: rows_block(S, S_in, k, v, q, decay, beta, o, n, dk, dv, j0, 7); break;
        case 6: rows_block(S, S_in, k, v, q, decay, beta, o, n, dk, dv, j0, 6); break;
        case 5: rows_block(S, S_in, k, v, q, decay, beta, o, n, dk, dv, j0, 5); break;
        case 4: rows_block(S, S_in, k, v, q, decay, beta, o, n, dk, dv, j0, 4); break;
        case 3: rows_block(S, S_in, k, v, q, decay, beta, o, n, dk, dv, j0, 3); break;
        case 2: rows_block(S, S_in, k, v, q, decay, beta, o, n, dk, dv, j0, 2); break;
        default: rows_block(S, S_in, k, v, q, decay, beta, o, n, dk, dv, j0, 1); break;
        }
    }
}
