/* linear_avx512.c: AVX-512 row kernels (compiled with -mavx512{f,bw,vl,dq,vnni,bf16}).
 *
 * Decode (ts_avx512_qdot): per weight row and group, the packed q are
 * widened to int16 (4-bit: bytes -> words, low and high nibbles as two
 * vectors) and multiplied with x by VPDPWSSD into int32 lanes, exactly. x is
 * carried as two int16 parts (hi + lo/65536, scaled per group: cpu.h), so
 * the product keeps ~31 bits of x: as accurate as f32. Per group the lanes
 * are converted once and scaled by scale_g * sx_g; the bias term is
 * sum_g bias_g * xs_g. The order of operations depends only on the row and
 * x row, never on n or the row split: row-exact. Measured (bench/kernels):
 * ~15 vector uops per 64 weights, so one core runs ~17 GB/s of INT4 weights
 * from L1/L2 and ~14 GB/s streaming from DRAM: compute, not the memory bus,
 * bounds decode. Several x rows (verify) share the unpacking of each weight
 * row (qdot_x), so 4 rows cost ~2.8x one row instead of ~4.2x.
 *
 * Decode for bf16/f32 weights (ts_avx512_fdot): widen to f32, FMA, 4
 * accumulators; masked tail for any cols.
 *
 * Prefill (ts_avx512_gemm): 4 rows dequantized to f32 (in the permuted
 * column order of xp for 4-bit), then 4 x 4 tiles of (weight row, x row)
 * with 16 accumulators: each loaded vector feeds 4 FMAs.
 */
#include <immintrin.h>
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/simd_avx512.h"

static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

/* 16 scales/biases of groups [g, g+k) as f32 (k <= 16, rest zero). */
static inline __m512 load_s16(const void *p, ts_dtype t, int64_t g, int k) {
    __mmask16 m = (__mmask16)((1u << k) - 1);
    if (t == TS_DTYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + g);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + g);
    if (t == TS_DTYPE_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Weight row r against x rows [i0, i0+X) (X <= 4, a constant at each call
 * site): the row's q are unpacked once per 64 columns and feed all X rows.
 * Per (weight row, x row) pair the operations do not depend on X, so the
 * result is the same bits as a one-row call (row-exact). */
static inline __attribute__((always_inline)) void qdot_x(const ts_weight *w, const ts_xprep *p, float *y, int64_t r,
                                                         int i0, const int X) {
    const int64_t cols = w->cols, ng = p->ng, G = w->group, bpr = cols * w->bits / 8;
    const int nb = (int)(G / 64);
    const __m512i m4 = _mm512_set1_epi16(0x0f);
    const uint8_t *row = (const uint8_t *)w->data + r * bpr;
    const int16_t *xq[4], *xl[4];
    const float *sx[4], *xs[4];
    __m512 acc[4], accb[4];
    _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) {
        xq[u] = p->xq + (int64_t)(i0 + u) * cols;
        xl[u] = xq[u] + (int64_t)p->n * cols;
        sx[u] = p->sx + (int64_t)(i0 + u) * ng;
        xs[u] = p->xs + (int64_t)(i0 + u) * ng;
        acc[u] = accb[u] = _mm512_setzero_ps();
    }
    for (int64_t g0 = 0; g0 < ng; g0 += 16) {
        int k = (int)TS_MIN(16, ng - g0);
        __mmask16 m = (__mmask16)((1u << k) - 1);
        __m512 sc = load_s16(w->scales, w->sdtype, r * ng + g0, k), bi = load_s16(w->biases, w->sdtype, r * ng + g0, k);
        __m512 S[4];
        _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) {
            S[u] = _mm512_mul_ps(sc, _mm512_maskz_loadu_ps(m, sx[u] + g0));
            accb[u] = _mm512_fmadd_ps(bi, _mm512_maskz_loadu_ps(m, xs[u] + g0), accb[u]);
        }
        for (int gi = 0; gi < k; gi++) {
            int64_t g = g0 + gi;
            __m512i t[4], tl[4];
            _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) t[u] = tl[u] = _mm512_setzero_si512();
            for (int b = 0; b < nb; b++) {
                int64_t c = g * G + (int64_t)b * 64;
                __m512i q0, q1;
                if (w->bits == 4) {
                    __m512i q = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(row + c / 2)));
                    q0 = _mm512_and_si512(q, m4);
                    q1 = _mm512_srli_epi16(q, 4);
                } else {
                    q0 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(row + c)));
                    q1 = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(row + c + 32)));
                }
                _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) {
                    t[u] = _mm512_dpwssd_epi32(t[u], q0, _mm512_loadu_si512(xq[u] + c));
                    t[u] = _mm512_dpwssd_epi32(t[u], q1, _mm512_loadu_si512(xq[u] + c + 32));
                    tl[u] = _mm512_dpwssd_epi32(tl[u], q0, _mm512_loadu_si512(xl[u] + c));
                    tl[u] = _mm512_dpwssd_epi32(tl[u], q1, _mm512_loadu_si512(xl[u] + c + 32));
                }
            }
            _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) {
                __m512 sg = _mm512_permutexvar_ps(_mm512_set1_epi32(gi), S[u]);
                __m512 tf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tl[u]), _mm512_set1_ps(1.0f / 65536.0f), _mm512_cvtepi32_ps(t[u]));
                acc[u] = _mm512_fmadd_ps(tf, sg, acc[u]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) y[(int64_t)(i0 + u) * w->rows + r] = hsum(acc[u]) + hsum(accb[u]);
}

/* One x row: weight rows one after the other (qdot_x with X = 1), each
 * streamed once, in order, which is what the hardware prefetchers like best
 * (interleaving four weight rows was faster in cache but 15% slower
 * end-to-end). Several x rows (verify, MTP): each weight row is unpacked
 * once for up to 4 of them. */
void ts_avx512_qdot(const ts_weight *w, const ts_xprep *p, float *y, int64_t r0, int64_t r1) {
    if (p->n == 1) {
        for (int64_t r = r0; r < r1; r++) qdot_x(w, p, y, r, 0, 1);
        return;
    }
    /* x rows in chunks of 3, a remainder of 4 as 2 + 2: with 4 at once the
     * accumulators no longer fit the registers (measured: 4 rows cost 2.8x one
     * row as one chunk, 2.7x as 2 + 2) */
    for (int64_t r = r0; r < r1; r++) {
        int i = 0, left = p->n;
        while (left > 0) {
            int x = left == 4 || left == 2 ? 2 : left == 1 ? 1 : 3;
            if (x == 3) qdot_x(w, p, y, r, i, 3);
            else if (x == 2) qdot_x(w, p, y, r, i, 2);
            else qdot_x(w, p, y, r, i, 1);
            i += x;
            left -= x;
        }
    }
}

/* max |x| and the sum of one group of x (group % 16 == 0), shared by the
 * int16 and int8 activation preparations. */
static inline void group_absmax_sum(const float *xg, int group, float *m, float *sum) {
    __m512 mx = _mm512_setzero_ps(), sm = _mm512_setzero_ps();
    for (int c = 0; c < group; c += 16) {
        __m512 v = _mm512_loadu_ps(xg + c);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
        sm = _mm512_add_ps(sm, v);
    }
    *m = _mm512_reduce_max_ps(mx);
    *sum = _mm512_reduce_add_ps(sm);
}

/* x -> fixed point per group (cpu.h), vectorised; group % 64 == 0. For 4-bit
 * each 64-block is stored evens then odds. Rounding by VCVTPS2DQ (nearest
 * even), which is what nearbyintf gives. */
void ts_avx512_prep_q(const float *x, int64_t cols, int group, int bits, int16_t *hi, int16_t *lo, float *sx, float *xs) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 lim = _mm512_set1_ps(32767.0f), k64 = _mm512_set1_ps(65536.0f);
    for (int64_t g = 0; g < cols / group; g++) {
        const float *xg = x + g * group;
        float m, sum;
        group_absmax_sum(xg, group, &m, &sum);
        sx[g] = m / 32767.0f;
        xs[g] = sum;
        __m512 inv = _mm512_set1_ps(m > 0.f ? 32767.0f / m : 0.f);
        for (int c = 0; c < group; c += 64) {
            __m512 v[4];
            const float *xb = xg + c;
            if (bits == 4) {
                __m512 a = _mm512_loadu_ps(xb), b = _mm512_loadu_ps(xb + 16), cc = _mm512_loadu_ps(xb + 32), d = _mm512_loadu_ps(xb + 48);
                v[0] = _mm512_permutex2var_ps(a, ev, b);
                v[1] = _mm512_permutex2var_ps(cc, ev, d);
                v[2] = _mm512_permutex2var_ps(a, od, b);
                v[3] = _mm512_permutex2var_ps(cc, od, d);
            } else {
                for (int k = 0; k < 4; k++) v[k] = _mm512_loadu_ps(xb + 16 * k);
            }
            for (int k = 0; k < 4; k++) {
                __m512 f = _mm512_mul_ps(v[k], inv);
                __m512 h = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
                __m512 l = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_sub_ps(f, h), k64), _mm512_set1_ps(-32768.0f)), lim);
                _mm256_storeu_si256((__m256i *)(hi + g * group + c + 16 * k), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(h)));
                _mm256_storeu_si256((__m256i *)(lo + g * group + c + 16 * k), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(l)));
            }
        }
    }
}

/* 16 weights of row p at column c as f32 (mask for the tail). */
static inline __m512 wload(const void *p, ts_dtype t, int64_t c, __mmask16 m) {
    if (t == TS_DTYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + c);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + c);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

void ts_avx512_fdot(const ts_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    const int64_t cols = w->cols;
    const size_t es = ts_dtype_size(w->dtype);
    const int64_t c64 = cols & ~(int64_t)63;
    for (int64_t r = r0; r < r1; r++) {
        const char *row = (const char *)w->data + r * cols * es;
        for (int i = 0; i < n; i++) {
            const float *xi = x + (int64_t)i * cols;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int64_t c = 0;
            for (; c < c64; c += 64) {
                /* the weight stream ahead, past row ends (rows are
                 * consecutive): TS_PREFETCH_AHEAD in simd_avx512.h */
                if (i == 0) {
                    const char *pf = row + (size_t)c * es + TS_PREFETCH_AHEAD;
                    _mm_prefetch(pf, _MM_HINT_T0);
                    if (es > 1) _mm_prefetch(pf + 64, _MM_HINT_T0);
                    if (es > 2) { _mm_prefetch(pf + 128, _MM_HINT_T0); _mm_prefetch(pf + 192, _MM_HINT_T0); }
                }
                a0 = _mm512_fmadd_ps(wload(row, w->dtype, c, 0xffff), _mm512_loadu_ps(xi + c), a0);
                a1 = _mm512_fmadd_ps(wload(row, w->dtype, c + 16, 0xffff), _mm512_loadu_ps(xi + c + 16), a1);
                a2 = _mm512_fmadd_ps(wload(row, w->dtype, c + 32, 0xffff), _mm512_loadu_ps(xi + c + 32), a2);
                a3 = _mm512_fmadd_ps(wload(row, w->dtype, c + 48, 0xffff), _mm512_loadu_ps(xi + c + 48), a3);
            }
            for (; c < cols; c += 16) {
                __mmask16 m = ts_tail16((size_t)(cols - c));
                a0 = _mm512_fmadd_ps(wload(row, w->dtype, c, m), _mm512_maskz_loadu_ps(m, xi + c), a0);
            }
            y[(int64_t)i * w->rows + r] = hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
        }
    }
}

/* Row r dequantized to f32 into out, columns in xp's order. */
static void deq_row(const ts_weight *w, int64_t r, float *out) {
    const int64_t cols = w->cols;
    if (w->dtype != TS_DTYPE_U32) {
        for (int64_t c = 0; c < cols; c += 16) {
            __mmask16 m = ts_tail16((size_t)(cols - c));
            _mm512_mask_storeu_ps(out + c, m, wload((const char *)w->data + r * cols * ts_dtype_size(w->dtype), w->dtype, c, m));
        }
        return;
    }
    const int64_t ng = cols / w->group, bpr = cols * w->bits / 8;
    const uint8_t *row = (const uint8_t *)w->data + r * bpr;
    for (int64_t c = 0; c < cols; c += 32) {
        int64_t g = c / w->group;
        float sc, bi;
        if (w->sdtype == TS_DTYPE_BF16) {
            sc = ts_bf16_to_f32(((const uint16_t *)w->scales)[r * ng + g]);
            bi = ts_bf16_to_f32(((const uint16_t *)w->biases)[r * ng + g]);
        } else if (w->sdtype == TS_DTYPE_F32) {
            sc = ((const float *)w->scales)[r * ng + g];
            bi = ((const float *)w->biases)[r * ng + g];
        } else {
            sc = ts_f16_to_f32(((const uint16_t *)w->scales)[r * ng + g]);
            bi = ts_f16_to_f32(((const uint16_t *)w->biases)[r * ng + g]);
        }
        __m512 S = _mm512_set1_ps(sc), B = _mm512_set1_ps(bi);
        if (w->bits == 4) {
            /* 16 bytes = 32 columns: within the 64-block at c0 (stored as its
             * 32 even columns, then its 32 odd ones), bytes [half*16, half*16+16)
             * give even slots half*16.. and odd slots 32 + half*16.. */
            int64_t c0 = c & ~(int64_t)63, half = (c - c0) / 32; /* which 16 bytes of the 32 */
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + c0 / 2 + half * 16)));
            __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
            __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
            _mm512_storeu_ps(out + c0 + half * 16, _mm512_fmadd_ps(lo, S, B));
            _mm512_storeu_ps(out + c0 + 32 + half * 16, _mm512_fmadd_ps(hi, S, B));
        } else {
            __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + c)));
            __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + c + 16)));
            _mm512_storeu_ps(out + c, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v0), S, B));
            _mm512_storeu_ps(out + c + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(v1), S, B));
        }
    }
}

void ts_avx512_gemm(const ts_weight *w, const float *xp, int n, float *y, int64_t r0, int64_t r1, float *wbuf) {
    const int64_t cols = w->cols, rows = w->rows;
    for (int64_t r = r0; r < r1; r += 4) {
        int nr = (int)TS_MIN(4, r1 - r);
        for (int k = 0; k < 4; k++) {
            if (k < nr) deq_row(w, r + k, wbuf + k * cols);
            else memset(wbuf + k * cols, 0, sizeof(float) * cols);
        }
        const float *w0 = wbuf, *w1 = wbuf + cols, *w2 = wbuf + 2 * cols, *w3 = wbuf + 3 * cols;
        for (int i = 0; i < n; i += 4) {
            int ni = TS_MIN(4, n - i);
            const float *x0 = xp + (int64_t)i * cols;
            const float *x1 = xp + (int64_t)(i + (ni > 1 ? 1 : 0)) * cols;
            const float *x2 = xp + (int64_t)(i + (ni > 2 ? 2 : 0)) * cols;
            const float *x3 = xp + (int64_t)(i + (ni > 3 ? 3 : 0)) * cols;
            __m512 a[16];
            for (int k = 0; k < 16; k++) a[k] = _mm512_setzero_ps();
            for (int64_t c = 0; c < cols; c += 16) {
                __mmask16 m = ts_tail16((size_t)(cols - c));
                __m512 v0 = _mm512_maskz_loadu_ps(m, w0 + c), v1 = _mm512_maskz_loadu_ps(m, w1 + c);
                __m512 v2 = _mm512_maskz_loadu_ps(m, w2 + c), v3 = _mm512_maskz_loadu_ps(m, w3 + c);
                __m512 u;
                u = _mm512_maskz_loadu_ps(m, x0 + c);
                a[0] = _mm512_fmadd_ps(v0, u, a[0]); a[1] = _mm512_fmadd_ps(v1, u, a[1]);
                a[2] = _mm512_fmadd_ps(v2, u, a[2]); a[3] = _mm512_fmadd_ps(v3, u, a[3]);
                u = _mm512_maskz_loadu_ps(m, x1 + c);
                a[4] = _mm512_fmadd_ps(v0, u, a[4]); a[5] = _mm512_fmadd_ps(v1, u, a[5]);
                a[6] = _mm512_fmadd_ps(v2, u, a[6]); a[7] = _mm512_fmadd_ps(v3, u, a[7]);
                u = _mm512_maskz_loadu_ps(m, x2 + c);
                a[8] = _mm512_fmadd_ps(v0, u, a[8]); a[9] = _mm512_fmadd_ps(v1, u, a[9]);
                a[10] = _mm512_fmadd_ps(v2, u, a[10]); a[11] = _mm512_fmadd_ps(v3, u, a[11]);
                u = _mm512_maskz_loadu_ps(m, x3 + c);
                a[12] = _mm512_fmadd_ps(v0, u, a[12]); a[13] = _mm512_fmadd_ps(v1, u, a[13]);
                a[14] = _mm512_fmadd_ps(v2, u, a[14]); a[15] = _mm512_fmadd_ps(v3, u, a[15]);
            }
            for (int xi = 0; xi < ni; xi++)
                for (int k = 0; k < nr; k++) y[(int64_t)(i + xi) * rows + r + k] = hsum(a[xi * 4 + k]);
        }
    }
}

/* The delta-rule step (kernels.h), 16 value columns at a time; dv % 16 == 0. */
void ts_avx512_gdn_step(float *S, const float *k, const float *v, const float *q, float decay, float beta, float *o,
                        int dk, int dv) {
    const __m512 dc = _mm512_set1_ps(decay), bt = _mm512_set1_ps(beta);
    for (int j0 = 0; j0 < dv; j0 += 64) {
        int nj = TS_MIN(4, (dv - j0) / 16);
        __m512 p[4], ov[4];
        for (int u = 0; u < 4; u++) p[u] = ov[u] = _mm512_setzero_ps();
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t)i * dv + j0;
            __m512 ki = _mm512_set1_ps(k[i]);
            for (int u = 0; u < nj; u++) {
                __m512 sv = _mm512_mul_ps(_mm512_loadu_ps(Si + 16 * u), dc);
                _mm512_storeu_ps(Si + 16 * u, sv);
                p[u] = _mm512_fmadd_ps(sv, ki, p[u]);
            }
        }
        for (int u = 0; u < nj; u++) p[u] = _mm512_mul_ps(bt, _mm512_sub_ps(_mm512_loadu_ps(v + j0 + 16 * u), p[u]));
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t)i * dv + j0;
            __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
            for (int u = 0; u < nj; u++) {
                __m512 sv = _mm512_fmadd_ps(ki, p[u], _mm512_loadu_ps(Si + 16 * u));
                _mm512_storeu_ps(Si + 16 * u, sv);
                ov[u] = _mm512_fmadd_ps(sv, qi, ov[u]);
            }
        }
        if (o)
            for (int u = 0; u < nj; u++) _mm512_storeu_ps(o + j0 + 16 * u, ov[u]);
    }
}

/* att[t] = e^(att[t] - mx), returning 1 / sum (summed in double, 8 lanes
 * per half): the reference's softmax step (linear_ref.c) with the vector
 * exponential; the token path's own (decode and verify share it; at a 4K
 * context the scalar expf took ~5% of a 0.8B decode step). */
static float softmax_exp512(float *att, int T, float mx) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    const __m512 m = _mm512_set1_ps(mx);
    for (int t = 0; t < T; t += 16) {
        const __mmask16 k = ts_tail16((size_t)(T - t));
        __m512 e = _mm512_maskz_mov_ps(k, ts_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, att + t), m)));
        _mm512_mask_storeu_ps(att + t, k, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return (float)(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(s0, s1)));
}

/* ---- attention of the token path (decode and verify) ----
 *
 * Each query (row, head) gets exactly the arithmetic of one query alone:
 * per key one accumulator chain over d in order, then hsum * scale; the
 * softmax over its own causal length; the output accumulated over t in
 * order with p = att[t] * inv (one chain per vector of 16 outputs). Only the
 * loop order differs with the number of queries: the keys go in blocks of
 * ATT_KBLK whose K (then V) rows every row and head of the call uses while
 * they are in L2, so the cache is read once per call instead of once per
 * query (the query heads of a KV head, and a verify block's rows), and up
 * to 4 heads x KB keys of independent score chains hide the FMA latency one
 * chain waits on. An output's partial sums pass through memory between key
 * blocks: exact, so the bits do not depend on the blocking either. */
#define ATT_KBLK 128

/* Scores of G heads (of one row) for keys [t0, t1), their maxima raised. */
static inline __attribute__((always_inline)) void att_scores(const float *q, size_t qs, const float *K,
                                                             int64_t stride, int t0, int t1, int D, float scale,
                                                             float *att, size_t as, float *mx, const int G) {
    const int KB = G == 1 ? 4 : G == 2 ? 2 : 1; /* keys per step */
    int t = t0;
    for (; t + KB <= t1; t += KB) {
        __m512 a[4][4];
        _Pragma("GCC unroll 4") for (int b = 0; b < KB; b++) {
            const __m512 kv = _mm512_loadu_ps(K + (int64_t)(t + b) * stride);
            _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) a[j][b] = _mm512_mul_ps(_mm512_loadu_ps(q + j * qs), kv);
        }
        for (int d = 16; d < D; d += 16)
            _Pragma("GCC unroll 4") for (int b = 0; b < KB; b++) {
                const __m512 kv = _mm512_loadu_ps(K + (int64_t)(t + b) * stride + d);
                _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)
                    a[j][b] = _mm512_fmadd_ps(_mm512_loadu_ps(q + j * qs + d), kv, a[j][b]);
            }
        _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)
            _Pragma("GCC unroll 4") for (int b = 0; b < KB; b++) {
                float sc = hsum(a[j][b]) * scale;
                att[j * as + t + b] = sc;
                if (sc > mx[j]) mx[j] = sc;
            }
    }
    for (; t < t1; t++) { /* the last keys one at a time: the same chains */
        const float *k = K + (int64_t)t * stride;
        _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {
            __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q + j * qs), _mm512_loadu_ps(k));
            for (int d = 16; d < D; d += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + j * qs + d), _mm512_loadu_ps(k + d), a);
            float sc = hsum(a) * scale;
            att[j * as + t] = sc;
            if (sc > mx[j]) mx[j] = sc;
        }
    }
}

/* o_j[0, 16 NV) += sum over t in [t0, t1) of (att_j[t] * inv_j) V[t][0, 16 NV)
 * for G heads, t in order (from zero when t0 == 0). */
static inline __attribute__((always_inline)) void att_out(const float *V, int64_t stride, int t0, int t1,
                                                          const float *att, size_t as, const float *inv, float *o,
                                                          size_t os, const int G, const int NV) {
    __m512 acc[4][4];
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)
        _Pragma("GCC unroll 4") for (int u = 0; u < NV; u++)
            acc[j][u] = t0 ? _mm512_loadu_ps(o + j * os + 16 * u) : _mm512_setzero_ps();
    for (int t = t0; t < t1; t++) {
        const float *v = V + (int64_t)t * stride;
        __m512 vv[4];
        _Pragma("GCC unroll 4") for (int u = 0; u < NV; u++) vv[u] = _mm512_loadu_ps(v + 16 * u);
        _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {
            const __m512 p = _mm512_set1_ps(att[j * as + t] * inv[j]);
            _Pragma("GCC unroll 4") for (int u = 0; u < NV; u++) acc[j][u] = _mm512_fmadd_ps(p, vv[u], acc[j][u]);
        }
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)
        _Pragma("GCC unroll 4") for (int u = 0; u < NV; u++) _mm512_storeu_ps(o + j * os + 16 * u, acc[j][u]);
}

static void att_scores_g(const float *q, size_t qs, int G, const float *K, int64_t stride, int t0, int t1, int D,
                         float scale, float *att, size_t as, float *mx) {
    switch (G) {
    case 4: att_scores(q, qs, K, stride, t0, t1, D, scale, att, as, mx, 4); break;
    case 3: att_scores(q, qs, K, stride, t0, t1, D, scale, att, as, mx, 3); break;
    case 2: att_scores(q, qs, K, stride, t0, t1, D, scale, att, as, mx, 2); break;
    default: att_scores(q, qs, K, stride, t0, t1, D, scale, att, as, mx, 1); break;
    }
}

#define ATT_OUT_NV(G)                                                                                               \
    switch (NV) {                                                                                                   \
    case 4: att_out(V, stride, t0, t1, att, as, inv, o, os, G, 4); break;                                          \
    case 3: att_out(V, stride, t0, t1, att, as, inv, o, os, G, 3); break;                                          \
    case 2: att_out(V, stride, t0, t1, att, as, inv, o, os, G, 2); break;                                          \
    default: att_out(V, stride, t0, t1, att, as, inv, o, os, G, 1); break;                                         \
    }

static void att_out_g(const float *V, int64_t stride, int t0, int t1, const float *att, size_t as, const float *inv,
                      float *o, size_t os, int G, int NV) {
    switch (G) {
    case 4: ATT_OUT_NV(4) break;
    case 3: ATT_OUT_NV(3) break;
    case 2: ATT_OUT_NV(2) break;
    default: ATT_OUT_NV(1) break;
    }
}

void ts_avx512_attn_rows(const ts_attn_q *a, const float *K, const float *V, int64_t stride, int D, float scale) {
    const int n = a->n, g = a->g, Tn = a->T0 + n - 1; /* the last row's length: the longest */
    float mx[TS_ATTN_MAX_Q], inv[TS_ATTN_MAX_Q];         /* per query: row i, head j at i * g + j */
    for (int k = 0; k < n * g; k++) mx[k] = -INFINITY;
    for (int t0 = 0; t0 < Tn; t0 += ATT_KBLK)
        for (int i = 0; i < n; i++) {
            const int t1 = TS_MIN(t0 + ATT_KBLK, a->T0 + i);
            for (int j = 0; j < g && t0 < t1; j += 4)
                att_scores_g(a->q + i * a->q_row + j * a->q_head, a->q_head, TS_MIN(4, g - j), K, stride, t0, t1, D,
                             scale, a->att + i * a->att_row + j * a->att_head, a->att_head, mx + i * g + j);
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g; j++)
            inv[i * g + j] = softmax_exp512(a->att + i * a->att_row + j * a->att_head, a->T0 + i, mx[i * g + j]);
    for (int d0 = 0; d0 < D; d0 += 64) {
        const int NV = TS_MIN(4, (D - d0) / 16);
        for (int t0 = 0; t0 < Tn; t0 += ATT_KBLK)
            for (int i = 0; i < n; i++) {
                const int t1 = TS_MIN(t0 + ATT_KBLK, a->T0 + i);
                for (int j = 0; j < g && t0 < t1; j += 4)
                    att_out_g(V + d0, stride, t0, t1, a->att + i * a->att_row + j * a->att_head, a->att_head,
                              inv + i * g + j, a->o + i * a->o_row + j * a->o_head + d0, a->o_head, TS_MIN(4, g - j), NV);
            }
    }
}

/* One query row's attention (kernels.h, ts_attn_row); D % 16 == 0: the
 * single-query case of the above. */
void ts_avx512_attn_row(const float *q, const float *K, const float *V, int64_t stride, int T, int D, float scale,
                        float *att, float *o) {
    const ts_attn_q a = {q, 0, 0, att, 0, 0, o, 0, 0, 1, 1, T};
    ts_avx512_attn_rows(&a, K, V, stride, D, scale);
}

/* ts_conv_row, 16 channels at a time (each tap a contiguous row of the
 * [K, C] weights); returns the channels done (a multiple of 16; the caller
 * finishes the rest). The same multiplies and adds, in the same order, as
 * the scalar loop (GCC would otherwise fuse the intrinsics' multiply and add
 * into one FMA: contraction is off for this function). */
__attribute__((optimize("fp-contract=off"))) int ts_avx512_conv_row(const float *const *x, const float *w, int K, float *y, int C) {
    int c = 0;
    for (; c + 16 <= C; c += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int t = 0; t < K; t++)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(w + (size_t)t * C + c), _mm512_loadu_ps(x[t] + c)));
        _mm512_storeu_ps(y + c, acc);
    }
    return c;
}

float ts_avx512_sum_exp(const float *x, int n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = ts_tail16((size_t)(n - i));
        /* masked-off lanes add exactly 0; a -inf input is clamped to
         * e^-104, which rounds to 0 in f32 */
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, ts_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv))));
    }
    return _mm512_reduce_add_ps(acc);
}

void ts_avx512_silu(float *y, const float *x, const float *u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = ts_tail16(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 s = _mm512_div_ps(v, _mm512_add_ps(one, ts_exp512(_mm512_sub_ps(_mm512_setzero_ps(), v))));
        if (u) s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i));
        _mm512_mask_storeu_ps(y + i, m, s);
    }
}

/* ts_argmax: 16 at a time, a block is rescanned in order only when one of
 * its lanes beats the best so far (so ties and NaNs go as in the scalar loop). */
int ts_avx512_argmax(const float *x, int n) {
    int b = 0;
    float bv = x[0];
    int i = 1;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        if (!_mm512_cmp_ps_mask(v, _mm512_set1_ps(bv), _CMP_GT_OQ)) continue;
        for (int k = i; k < i + 16; k++)
            if (x[k] > bv) bv = x[b = k];
    }
    for (; i < n; i++)
        if (x[i] > bv) bv = x[b = i];
    return b;
}

/* ---- opt-in "avx512-q8": int8 activations (llama.cpp-class numerics) ----
 *
 * x is rounded to int8 per 64-column group (sx = max|x_g| / 127), so each x
 * carries up to 2^-8 of its group's largest value: about 100x coarser than
 * the default path, the same class as llama.cpp's Q8 activations. In return
 * a 128-column block of 4-bit weights costs 2 VPDPBUSD (u8 q x s8 x, 64
 * products each) and ~6 other instructions, against ~24 in the default path.
 * Not chosen by "auto": the chaotic fixture models move by ~1e-2 under it. */

void ts_avx512_prep_q8(const float *x, int64_t cols, int group, int8_t *x8, float *sx, float *xs) {
    const int64_t ng = cols / group;
    for (int64_t g = 0; g < ng; g++) {
        const float *xg = x + g * group;
        float m, sum;
        group_absmax_sum(xg, group, &m, &sum);
        sx[g] = m / 127.0f;
        xs[g] = sum;
    }
    /* each 128-column block: its 64 even columns, then its 64 odd ones */
    for (int64_t c = 0; c < cols; c += 128)
        for (int k = 0; k < 64; k++) {
            int64_t ce = c + 2 * k, co = ce + 1;
            float se = sx[ce / group], so = sx[co / group];
            float fe = se > 0.f ? x[ce] / se : 0.f, fo = so > 0.f ? x[co] / so : 0.f;
            int ie = _mm_cvtss_si32(_mm_set_ss(fe)), io = _mm_cvtss_si32(_mm_set_ss(fo));
            x8[c + k] = (int8_t)(ie > 127 ? 127 : ie < -127 ? -127 : ie);
            x8[c + 64 + k] = (int8_t)(io > 127 ? 127 : io < -127 ? -127 : io);
        }
}

/* 4-bit only; group % 64 == 0, cols % 128 == 0, cols / group <= 4096. */
void ts_avx512_q8dot(const ts_weight *w, const int8_t *x8, const float *sx, const float *xs, int n, float *y,
                     int64_t r0, int64_t r1) {
    const int64_t cols = w->cols, G = w->group, ng = cols / G, bpr = cols / 2;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    float comb[4096 + 16];
    for (int i = 0; i < n; i++) {
        const int8_t *xi = x8 + (int64_t)i * cols;
        const float *sxi = sx + (int64_t)i * ng, *xsi = xs + (int64_t)i * ng;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *row = (const uint8_t *)w->data + r * bpr;
            __m512 accb = _mm512_setzero_ps();
            for (int64_t g0 = 0; g0 < ng; g0 += 16) {
                int kk = (int)TS_MIN(16, ng - g0);
                __mmask16 m = (__mmask16)((1u << kk) - 1);
                _mm512_mask_storeu_ps(comb + g0, m, _mm512_mul_ps(load_s16(w->scales, w->sdtype, r * ng + g0, kk), _mm512_maskz_loadu_ps(m, sxi + g0)));
                accb = _mm512_fmadd_ps(load_s16(w->biases, w->sdtype, r * ng + g0, kk), _mm512_maskz_loadu_ps(m, xsi + g0), accb);
            }
            __m512 a0 = _mm512_setzero_ps(), a1 = a0;
            int64_t c = 0;
            for (; c < cols; c += 256) {
                __m512i v0 = _mm512_loadu_si512(row + c / 2);
                __m512i t0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v0, m4), _mm512_loadu_si512(xi + c));
                t0 = _mm512_dpbusd_epi32(t0, _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4), _mm512_loadu_si512(xi + c + 64));
                __m512 s0 = _mm512_insertf32x8(_mm512_set1_ps(comb[c / G]), _mm256_set1_ps(comb[(c + 64) / G]), 1);
                a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t0), s0, a0);
                if (c + 128 >= cols) { c += 128; break; }
                __m512i v1 = _mm512_loadu_si512(row + c / 2 + 64);
                __m512i t1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v1, m4), _mm512_loadu_si512(xi + c + 128));
                t1 = _mm512_dpbusd_epi32(t1, _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4), _mm512_loadu_si512(xi + c + 192));
                __m512 s1 = _mm512_insertf32x8(_mm512_set1_ps(comb[(c + 128) / G]), _mm256_set1_ps(comb[(c + 192) / G]), 1);
                a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t1), s1, a1);
            }
            y[(int64_t)i * w->rows + r] = hsum(_mm512_add_ps(a0, a1)) + hsum(accb);
        }
    }
}
