/* gdn_rows_avx512.c: ts_gdn_step_rows with AVX-512 (dv % 16 == 0).
 *
 * Owns: ts_avx512_gdn_step_rows. The reference for its bits is
 * ts_avx512_gdn_step (linear_avx512.c), applied row after row; per
 * element and row this performs the same operations in the same order:
 *   sv = S * decay                      (mul)
 *   p  = fma(sv, k_i, p)  over i = 0..dk-1 in order, from 0
 *   p  = beta * (v - p)                 (sub, mul)
 *   S  = fma(k_i, p, sv)                (sv recomputed: the same mul, so the
 *                                        same bits as the stored decayed value)
 *   o  = fma(S, q_i, o)   over i in order, from 0
 * What differs is only when things happen: row t+1's decay and prediction
 * are formed in row t's update pass from the freshly updated S (the same
 * values, the same i order), and between the rows of a call the state is
 * stored already decayed for the next row (exactly the value the one-row
 * kernel stores in its first pass); the last row stores S itself. Each row
 * thus costs one pass over the state (one load, one store per element)
 * instead of two; the first row adds one read-only pass (and recomputes
 * its decay in the update pass instead of storing it). Columns are taken 128 at a time (8 vectors: 8 prediction
 * chains and 8 output chains in flight hide the FMA latency).
 * Does not own: the dispatch (gdn_rows.c).
 */
#include <immintrin.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kernels.h"

/* Row t's update pass over one block of NV vectors: S_t = fma(k, p_t, D)
 * where D is the decayed state S_{t-1} * decay_t: formed here from src when
 * PRE is 0 (the first row: src is the undecayed S_in), read from S when PRE
 * is 1 (an earlier pass stored it decayed already). With NEXT, row t+1's
 * prediction is accumulated from D' = S_t * decay_{t+1} and D' is what gets
 * stored (the next pass reads it as its D); without, S_t itself. */
static inline __attribute__((always_inline)) void update_pass(float *S, const float *src, int dk, int dv, int j0,
                                                               const int NV, const int PRE, const int NEXT, const int OUT,
                                                               __m512 dc, __m512 dn, const float *kt, const float *qt,
                                                               const float *kn, const __m512 *p, __m512 *ov,
                                                               __m512 *pn) {
    for (int i = 0; i < dk; i++) {
        const float *Ri = src + (size_t)i * dv + j0;
        float *Si = S + (size_t)i * dv + j0;
        const __m512 ki = _mm512_set1_ps(kt[i]), qi = _mm512_set1_ps(qt[i]);
        const __m512 kni = NEXT ? _mm512_set1_ps(kn[i]) : ki;
        for (int u = 0; u < NV; u++) {
            __m512 d = PRE ? _mm512_loadu_ps(Ri + 16 * u) : _mm512_mul_ps(_mm512_loadu_ps(Ri + 16 * u), dc);
            __m512 sv = _mm512_fmadd_ps(ki, p[u], d);
            if (OUT) ov[u] = _mm512_fmadd_ps(sv, qi, ov[u]);
            if (NEXT) {
                __m512 dd = _mm512_mul_ps(sv, dn);
                pn[u] = _mm512_fmadd_ps(dd, kni, pn[u]);
                _mm512_storeu_ps(Si + 16 * u, dd);
            } else {
                _mm512_storeu_ps(Si + 16 * u, sv);
            }
        }
    }
}

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
        const __m512 dc = _mm512_set1_ps(decay[t]), bt = _mm512_set1_ps(beta[t]);
        const __m512 dn = _mm512_set1_ps(t + 1 < n ? decay[t + 1] : 0.f);
        for (int u = 0; u < NV; u++) {
            p[u] = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(v[t] + j0 + 16 * u), p[u]));
            ov[u] = _mm512_setzero_ps();
            pn[u] = _mm512_setzero_ps();
        }
        const float *kn = t + 1 < n ? k[t + 1] : NULL;
        const int out = o && o[t]; /* pending rows of a rollback have no output: no o chain */
#define UPD(PRE, NEXT, OUT) update_pass(S, PRE ? S : S_in, dk, dv, j0, NV, PRE, NEXT, OUT, dc, dn, k[t], q[t], kn, p, ov, pn)
        if (t == 0) {
            if (t + 1 < n) { if (out) UPD(0, 1, 1); else UPD(0, 1, 0); }
            else { if (out) UPD(0, 0, 1); else UPD(0, 0, 0); }
        } else {
            if (t + 1 < n) { if (out) UPD(1, 1, 1); else UPD(1, 1, 0); }
            else { if (out) UPD(1, 0, 1); else UPD(1, 0, 0); }
        }
#undef UPD
        if (out)
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
