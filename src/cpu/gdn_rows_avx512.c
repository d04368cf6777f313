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
 * its decay in the update pass instead of storing it).
 *
 * Where the state lives between the rows: a column block of the state is
 * independent of the other columns over all the rows (a column's prediction
 * and update read only that column), so each block runs through every row
 * before the next block starts. In the [dk, dv] layout a block is dk rows
 * dv floats apart, and at dv = 128 those lines fall into a quarter of L1's
 * sets: no block of 128 rows fits in L1 whatever its width, and every row's
 * pass went to L2 (~2.7 us per 128x128 head and row, hot, against ~1.1 once
 * L1-resident). So between the first and the last row a block lives in a
 * contiguous scratch on the stack (XV vectors wide: dk x 32 floats, 16 KiB
 * at dk = 128): the first row reads the state from S_in, the last writes
 * it to S, the rows between touch only the scratch. Two vectors per block,
 * not more: 4 measured slower (32 KiB with the source block does not stay
 * in L1), 1 leaves too few independent chains for the FMA latency. The
 * first row's prediction pass goes over 8 vectors at a time (read-only, 8
 * chains in flight), before the narrow blocks of those columns.
 *
 * Where the result goes: from a separate source (a verify block advancing
 * out of its snapshot, a replay), S is written with streaming stores. The
 * state (18 MiB on the 0.8B shape) is out of cache by the time a forward
 * pass comes back to a layer, so a plain store first reads each line of S
 * from memory only to overwrite it: a third of the pass's memory traffic.
 * Streaming cut the verify block's GDN time in the forward by ~35% (perf
 * samples of this function, 4 rows, 0.8B shape, 2 threads). In place (a
 * decode row) the lines were just read, and streaming them out measured
 * slower. The stores are fenced (sfence) before returning, so they are
 * ordered before whatever hands the state to another thread: streaming
 * stores are weakly ordered, and the C11 atomics the pool uses promise
 * nothing about them.
 * Does not own: the dispatch (gdn_rows.c).
 */
#include <immintrin.h>
#include <stdint.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"

#define XV 2          /* vectors per column block between the first and the last row */
#define XDK_MAX 256   /* the stack scratch holds dk <= this; larger dk keeps the rows in S */

/* Row t's update pass over one block of NV vectors: S_t = fma(k, p_t, D)
 * where D is the decayed state S_{t-1} * decay_t: formed here from src when
 * PRE is 0 (the first row: src is the undecayed S_in), read from src when
 * PRE is 1 (an earlier pass stored it decayed already). With NEXT, row t+1's
 * prediction is accumulated from D' = S_t * decay_{t+1} and D' is what gets
 * stored (the next pass reads it as its D); without, S_t itself. src and
 * dst are block rows ss and ds floats apart (the state's dv, or the
 * scratch's width). */
static inline __attribute__((always_inline)) void update_pass(float *dst, size_t ds, const float *src, size_t ss,
                                                               int dk, const int NV, const int PRE, const int NEXT,
                                                               const int OUT, const int NT, __m512 dc, __m512 dn, const float *kt,
                                                               const float *qt, const float *kn, const __m512 *p,
                                                               __m512 *ov, __m512 *pn) {
    for (int i = 0; i < dk; i++) {
        const float *Ri = src + (size_t)i * ss;
        float *Si = dst + (size_t)i * ds;
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
                if (NT) _mm512_stream_ps(Si + 16 * u, sv);
                else _mm512_storeu_ps(Si + 16 * u, sv);
            }
        }
    }
}

/* Row 0's prediction for the NV vectors of columns at j0: a read-only pass
 * over S_in, p = sum_i (S_in * decay_0) * k_i. */
static inline __attribute__((always_inline)) void predict0(const float *S_in, const float *k0, float decay0, int dk,
                                                            int dv, int j0, const int NV, __m512 *p) {
    const __m512 dc = _mm512_set1_ps(decay0);
    for (int u = 0; u < NV; u++) p[u] = _mm512_setzero_ps();
    for (int i = 0; i < dk; i++) {
        const float *Si = S_in + (size_t)i * dv + j0;
        const __m512 ki = _mm512_set1_ps(k0[i]);
        for (int u = 0; u < NV; u++) p[u] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(Si + 16 * u), dc), ki, p[u]);
    }
}

/* Every row over the NV vectors of columns at j0, given row 0's prediction
 * p: row 0 from S_in (strided by dv), the rows between in X (strided by xs:
 * the scratch, or S itself), the last row into S. */
static inline __attribute__((always_inline)) void rows_block(float *S, const float *S_in, float *X, size_t xs,
                                                              const float *const *k, const float *const *v,
                                                              const float *const *q, const float *decay,
                                                              const float *beta, float *const *o, int n, int dk,
                                                              int dv, int j0, const int NV, const int nt, __m512 *p) {
    __m512 pn[8], ov[8]; /* NV <= 8 */
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
        const float *src = t == 0 ? S_in + j0 : X;
        const size_t ss = t == 0 ? (size_t)dv : xs;
        float *dst = t + 1 < n ? X : S + j0;
        const size_t ds = t + 1 < n ? xs : (size_t)dv;
#define UPD(PRE, NEXT, OUT, NT) update_pass(dst, ds, src, ss, dk, NV, PRE, NEXT, OUT, NT, dc, dn, k[t], q[t], kn, p, ov, pn)
        if (t == 0) {
            if (t + 1 < n) { if (out) UPD(0, 1, 1, 0); else UPD(0, 1, 0, 0); }
            else if (nt) { if (out) UPD(0, 0, 1, 1); else UPD(0, 0, 0, 1); }
            else { if (out) UPD(0, 0, 1, 0); else UPD(0, 0, 0, 0); }
        } else {
            if (t + 1 < n) { if (out) UPD(1, 1, 1, 0); else UPD(1, 1, 0, 0); }
            else if (nt) { if (out) UPD(1, 0, 1, 1); else UPD(1, 0, 0, 1); }
            else { if (out) UPD(1, 0, 1, 0); else UPD(1, 0, 0, 0); }
        }
#undef UPD
        if (out)
            for (int u = 0; u < NV; u++) _mm512_storeu_ps(o[t] + j0 + 16 * u, ov[u]);
        for (int u = 0; u < NV; u++) p[u] = pn[u];
    }
}

/* The columns [g0, g0 + 16 * NV) (NV <= 8): row 0's prediction over all of
 * them in one pass, then every row per block of XV vectors through the
 * scratch (one row alone: straight from S_in to S, 8 vectors at a time). */
static inline __attribute__((always_inline)) void rows_group(float *S, const float *S_in, float *scratch,
                                                              const float *const *k, const float *const *v,
                                                              const float *const *q, const float *decay,
                                                              const float *beta, float *const *o, int n, int dk,
                                                              int dv, int g0, const int NV, int nt) {
    __m512 p[8];
    predict0(S_in, k[0], decay[0], dk, dv, g0, NV, p);
    if (n == 1 || !scratch) {
        rows_block(S, S_in, S + g0, (size_t)dv, k, v, q, decay, beta, o, n, dk, dv, g0, NV, nt, p);
        return;
    }
    for (int b = 0; b < NV; b += XV) {
        if (NV - b >= XV) rows_block(S, S_in, scratch, 16 * XV, k, v, q, decay, beta, o, n, dk, dv, g0 + 16 * b, XV, nt, p + b);
        else rows_block(S, S_in, scratch, 16 * XV, k, v, q, decay, beta, o, n, dk, dv, g0 + 16 * b, 1, nt, p + b);
    }
}

void ts_avx512_gdn_step_rows(float *S, const float *S_in, const float *const *k, const float *const *v,
                             const float *const *q, const float *decay, const float *beta, float *const *o, int n,
                             int dk, int dv) {
    /* sized by dk (16 KiB at 128), so a caller's stack pays only what the shape needs */
    const int xs = dk <= XDK_MAX && n > 1 ? dk * 16 * XV : 1;
    float X[xs] __attribute__((aligned(64)));
    float *scratch = xs > 1 ? X : NULL;
    const int nt = S != S_in && ((uintptr_t)S & 63) == 0;
    for (int j0 = 0; j0 < dv; j0 += 128) {
        switch ((dv - j0) / 16 < 8 ? (dv - j0) / 16 : 8) {
        case 8: rows_group(S, S_in, scratch, k, v, q, decay, beta, o, n, dk, dv, j0, 8, nt); break;
        case 7: rows_group(S, S_in, scratch, k, v, q, decay, beta, o, n, dk, dv, j0, 7, nt); break;
        case 6: rows_group(S, S_in, scratch, k, v, q, decay, beta, o, n, dk, dv, j0, 6, nt); break;
        case 5: rows_group(S, S_in, scratch, k, v, q, decay, beta, o, n, dk, dv, j0, 5, nt); break;
        case 4: rows_group(S, S_in, scratch, k, v, q, decay, beta, o, n, dk, dv, j0, 4, nt); break;
        case 3: rows_group(S, S_in, scratch, k, v, q, decay, beta, o, n, dk, dv, j0, 3, nt); break;
        case 2: rows_group(S, S_in, scratch, k, v, q, decay, beta, o, n, dk, dv, j0, 2, nt); break;
        default: rows_group(S, S_in, scratch, k, v, q, decay, beta, o, n, dk, dv, j0, 1, nt); break;
        }
    }
    if (nt) _mm_sfence();
}
