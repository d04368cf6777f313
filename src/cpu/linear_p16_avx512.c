/* linear_p16_avx512.c: the AVX-512 VNNI product over P16-packed weights
 * (cpu/pack.c describes the layout), for decode, verify and prefill alike.
 *
 * Activations in three int8 digits. Per x row and group, sx = max|x_g| / L
 * and X = round(x / sx), an integer of 24 bits (|X| <= L = 8,290,000), written
 * in balanced base 256: X = d2 * 65536 + d1 * 256 + d0 with every digit in
 * [-128, 127]. VPDPBUSD multiplies the unsigned weight bytes (q in 0..15 or
 * 0..255) by signed digit bytes exactly, so per group
 *     sum_c q x = sx * (A2 * 65536 + (A1 * 256 + A0)),  A_k = sum_c q d_k,
 * where A1 * 256 + A0 is formed in int32 (no overflow for G <= 1024) and one
 * FMA joins the two halves in f32. x keeps 2^-23 of its group's largest value:
 * f32 precision, so the quantized engine stays within 1e-3 of the f32
 * reference even on the chaotic random fixture models, where one int8 digit
 * (llama.cpp's Q8 activations) moves logits by units.
 * The bias term takes sx * sum_c X_c (the rounded x, exact in integers), not
 * the f32 sum of x: both s*q and bias terms must see the same rounded x, or
 * their cancellation to w amplifies the rounding (10x larger fixture errors).
 * Cost per 16 rows x 64 columns of INT4: 8 chunk loads, 24 nibble
 * extractions, 48 VPDPBUSD (each with its digit broadcast from memory in the
 * same instruction), ~12 per-group operations: ~5.5 vector instructions per
 * 64 weights, against ~15 for the row-major int16 kernel. One row streams
 * INT4 at ~55 GB/s per core from cache; prefill tiles run at ~80% of the
 * VPDPBUSD peak (bench/RESULTS.md).
 * Fewer digits (the engine's act_bits; kernels.h ts_act_digits): nd = 2
 * keeps X in 16 bits (|X| <= 32639, two balanced digits), nd = 1 in plain
 * int8 (|X| <= 127, llama.cpp's Q8 activations); the same kernel with a
 * digit loop of that length, so two thirds or one third of the multiplies.
 * Drafting (ts_linear_draft) always uses one digit.
 *
 * Row-exactness (kernels.h): integer sums are exact, and the f32 operations
 * per (16-row block, x row) run in the same order whatever the number of x
 * rows processed together or the split of blocks over threads; so n rows give
 * the bits of n one-row calls, and prefill equals decode.
 *
 * Several x rows (verify, prefill): each chunk's nibbles are extracted once
 * and feed up to 4 x rows (12 int32 accumulators in registers). The x rows
 * come in tiles of 4 (the last one shorter) whose digits are interleaved
 * (ts_p16_prep_rows), so the broadcasts need one address register.
 */
#include <immintrin.h>

#include "cpu/p16_avx512.h"

#define P16_LIMIT 8290000.0f /* |X| bound keeping the top digit in [-128, 127] */
#define P16_LIMIT2 32639.0f  /* two digits: 127 * 256 + 127 */

void ts_avx512_prep_d(const float *x, int64_t cols, int group, int nd, int8_t *d, int64_t qstride, int64_t kstride,
                      float *sx, float *xs) {
    const int64_t ng = cols / group;
    const __m512i c128 = _mm512_set1_epi32(128), c255 = _mm512_set1_epi32(255);
    /* one digit (int8 activations, drafting): plain int8, X in [-127, 127] */
    const float L = nd == 1 ? 127.0f : nd == 2 ? P16_LIMIT2 : P16_LIMIT;
    const __m512 lim = _mm512_set1_ps(L), nlim = _mm512_set1_ps(-L);
    /* one digit, VNNI layout: where each quad's dword goes (see the store below) */
    const int qd = (int)(qstride / 4);
    __m512i p1_idx = _mm512_setzero_si512();
    __mmask16 p1_mask = 0;
    if (nd == 1 && kstride == 4 && qstride <= 16 && qstride % 4 == 0) {
        int32_t idx[16] = {0};
        for (int q = 0; q < 4; q++) { idx[q * qd] = q; p1_mask |= (__mmask16)(1u << (q * qd)); }
        p1_idx = _mm512_loadu_si512(idx);
    }
    for (int64_t g = 0; g < ng; g++) {
        const float *xg = x + g * group;
        __m512 mx = _mm512_setzero_ps();
        for (int c = 0; c < group; c += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(xg + c)));
        float m = _mm512_reduce_max_ps(mx);
        sx[g] = m / L;
        __m512 inv = _mm512_set1_ps(m > 0.f ? L / m : 0.f);
        __m512i xsum = _mm512_setzero_si512(); /* |lane| <= 64 * L for G <= 1024 */
        for (int c = 0; c < group; c += 16) {
            __m512 f = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(xg + c), inv), nlim), lim);
            __m512i X = _mm512_cvtps_epi32(f); /* round to nearest even */
            xsum = _mm512_add_epi32(xsum, X);
            __m128i dg[3];
            if (nd == 1) {
                dg[0] = _mm512_cvtepi32_epi8(X);
            } else if (nd == 2) {
                __m512i d0 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(X, c128), c255), c128);
                dg[0] = _mm512_cvtepi32_epi8(d0);
                dg[1] = _mm512_cvtepi32_epi8(_mm512_srai_epi32(_mm512_sub_epi32(X, d0), 8));
            } else {
                __m512i d0 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(X, c128), c255), c128);
                X = _mm512_srai_epi32(_mm512_sub_epi32(X, d0), 8);
                __m512i d1 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(X, c128), c255), c128);
                __m512i d2 = _mm512_srai_epi32(_mm512_sub_epi32(X, d1), 8);
                dg[0] = _mm512_cvtepi32_epi8(d0);
                dg[1] = _mm512_cvtepi32_epi8(d1);
                dg[2] = _mm512_cvtepi32_epi8(d2);
            }
            /* 16 columns = 4 quads; quad q's digit k at d + q * qstride + k * kstride */
            int8_t *o = d + (g * group + c) / 4 * qstride;
            if (qstride == 4) { /* AMX layout: each digit's 16 bytes are contiguous */
                for (int k = 0; k < nd; k++) _mm_storeu_si128((__m128i *)(o + k * kstride), dg[k]);
            } else if (nd == 3 && kstride == 4) {
                /* VNNI layout: quad q's three digit dwords are 12 contiguous
                 * bytes; gather them into 128-bit lane q and store 3 dwords
                 * per quad (this was ~3/4 of the preparation's time as 12
                 * scalar stores) */
                __m512i z = _mm512_inserti32x4(_mm512_castsi128_si512(dg[0]), dg[1], 1);
                z = _mm512_inserti32x4(z, dg[2], 2);
                const __m512i lanes = _mm512_setr_epi32(0, 4, 8, 0, 1, 5, 9, 0, 2, 6, 10, 0, 3, 7, 11, 0);
                z = _mm512_permutexvar_epi32(lanes, z);
                _mm_mask_storeu_epi32(o, 0x7, _mm512_extracti32x4_epi32(z, 0));
                _mm_mask_storeu_epi32(o + qstride, 0x7, _mm512_extracti32x4_epi32(z, 1));
                _mm_mask_storeu_epi32(o + 2 * qstride, 0x7, _mm512_extracti32x4_epi32(z, 2));
                _mm_mask_storeu_epi32(o + 3 * qstride, 0x7, _mm512_extracti32x4_epi32(z, 3));
            } else if (nd == 2 && kstride == 4) {
                /* quad q's two digit dwords: 8 contiguous bytes */
                __m128i lo = _mm_unpacklo_epi32(dg[0], dg[1]), hi = _mm_unpackhi_epi32(dg[0], dg[1]);
                _mm_storel_epi64((__m128i *)o, lo);
                _mm_storeh_pd((double *)(o + qstride), _mm_castsi128_pd(lo));
                _mm_storel_epi64((__m128i *)(o + 2 * qstride), hi);
                _mm_storeh_pd((double *)(o + 3 * qstride), _mm_castsi128_pd(hi));
            } else if (p1_mask) {
                /* quad q's dword to dword q * qstride / 4: one permute and
                 * one masked store (qstride 8, 12 or 16: a tile of 2-4 rows;
                 * one row is the contiguous case above) */
                _mm512_mask_storeu_epi32(o, p1_mask, _mm512_permutexvar_epi32(p1_idx, _mm512_castsi128_si512(dg[0])));
            } else {
                for (int k = 0; k < nd; k++) {
                    int32_t q4[4];
                    _mm_storeu_si128((__m128i *)q4, dg[k]);
                    for (int q = 0; q < 4; q++) memcpy(o + q * qstride + k * kstride, &q4[q], 4);
                }
            }
        }
        /* The bias term uses the sum of the ROUNDED x (exact integer), not of
         * x: then the group's result is exactly sx * sum_c (s q_c + b) X_c up
         * to the final f32 roundings, and the rounding error of x enters only
         * through w_c, never through the much larger s q_c or b alone (their
         * terms cancel to w; with the exact sum of x here, the fixtures'
         * logits moved 10x more). */
        int64_t tot = (int64_t)_mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(xsum))) +
                      (int64_t)_mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(xsum, 1)));
        xs[g] = (float)((double)tot * (double)sx[g]);
    }
}

/* acc += w (u8) . the 4 signed bytes at p broadcast to every lane: one
 * instruction with an embedded broadcast ({1to16}) instead of a broadcast
 * load plus the product (GCC does not fold _mm512_set1_epi32 of a load into
 * VPDPBUSD's memory operand): fewer micro-ops in the inner loops. */
static inline __m512i dpb_bcast(__m512i acc, __m512i w, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

/* One 16-row block against the x rows of one tile: rows [i0, i0 + X) (X a
 * constant at each call), whose digits are interleaved per column quad
 * (matmul.c): quad q, row u, digit k at xt + (q * X + u) * ND * 4 + 4k, so one
 * pointer with constant offsets addresses all of them. */
static inline __attribute__((always_inline)) void pdot_x(const ts_weight *w, const int8_t *xt, const float *sx,
                                                         const float *xs, float *y, int64_t rb, int i0, const int X,
                                                         const int ND) {
    const int64_t cols = w->cols, G = w->group, ng = cols / G;
    const p16_geom pg = p16_geometry(w);
    const size_t ss = pg.ss, dbytes = pg.dbytes, rec = pg.rec;
    const uint8_t *blk = w->packed + (size_t)rb * (size_t)ng * rec;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int QS = X * ND * 4; /* bytes per column quad */
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) acc[u] = _mm512_setzero_ps();
    const int8_t *xq = xt;
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *rp = blk + (size_t)g * rec;
        if (i0 == 0) p16_prefetch(rp, rec); /* the first x tile streams the block; later ones find it in cache */
        /* up to 3 x rows: separate accumulators for the low and high
         * nibbles, so each chain takes one VPDPBUSD per chunk and the
         * multiplier, not its latency, sets the pace (4 rows have enough
         * chains already, and no registers to spare) */
        const int SPLIT = X <= 3;
        __m512i a[4][3], b[4][3];
        _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) {
            a[u][0] = a[u][1] = a[u][2] = _mm512_setzero_si512();
            b[u][0] = b[u][1] = b[u][2] = _mm512_setzero_si512();
        }
        if (w->bits == 4) {
            for (int64_t j = 0; j < G / 8; j++, xq += 2 * QS) {
                __m512i v = _mm512_load_si512(rp + 64 * j);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) {
                    _Pragma("GCC unroll 3") for (int k = 0; k < ND; k++) {
                        a[u][k] = dpb_bcast(a[u][k], lo, xq + u * ND * 4 + 4 * k);
                        if (SPLIT) b[u][k] = dpb_bcast(b[u][k], hi, xq + QS + u * ND * 4 + 4 * k);
                        else a[u][k] = dpb_bcast(a[u][k], hi, xq + QS + u * ND * 4 + 4 * k);
                    }
                }
            }
        } else {
            for (int64_t j = 0; j < G / 4; j++, xq += QS) {
                __m512i v = _mm512_load_si512(rp + 64 * j);
                _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) {
                    _Pragma("GCC unroll 3") for (int k = 0; k < ND; k++) a[u][k] = dpb_bcast(a[u][k], v, xq + u * ND * 4 + 4 * k);
                }
            }
        }
        if (SPLIT && w->bits == 4)
            _Pragma("GCC unroll 4") for (int u = 0; u < X; u++)
                _Pragma("GCC unroll 3") for (int k = 0; k < ND; k++) a[u][k] = _mm512_add_epi32(a[u][k], b[u][k]);
        const __m512 sc = p16_load16(rp + dbytes, w->sdtype), bi = p16_load16(rp + dbytes + 16 * ss, w->sdtype);
        _Pragma("GCC unroll 4") for (int u = 0; u < X; u++) {
            int64_t o = (int64_t)(i0 + u) * ng + g;
            acc[u] = p16_step(acc[u], a[u][0], a[u][ND > 1], a[u][ND > 1 ? 2 : 0], sc, bi, sx[o], xs[o], ND);
        }
    }
    const int64_t r = rb * 16, left = w->rows - r;
    const __mmask16 m = ts_tail16((size_t)left);
    _Pragma("GCC unroll 4") for (int u = 0; u < X; u++)
        _mm512_mask_storeu_ps(y + (int64_t)(i0 + u) * w->rows + r, m, acc[u]);
}

/* Rows [r0, r1) of y [n, rows]; r0 is a multiple of 16 (the driver splits
 * in whole blocks). x rows go in chunks of 4, the rest as 3, 2 or 1. nd: the
 * digits prep_d wrote (1, 2 or 3). */
static inline __attribute__((always_inline)) void pdot_nd(const ts_weight *w, const int8_t *xd, const float *sx,
                                                          const float *xs, int n, float *y, int64_t r0, int64_t r1,
                                                          const int ND) {
    const int64_t tile = 4 * w->cols * ND; /* bytes of a full tile of 4 rows */
    for (int64_t rb = r0 / 16; rb * 16 < r1; rb++) {
        int i = 0;
        for (; i + 4 <= n; i += 4) pdot_x(w, xd + i / 4 * tile, sx, xs, y, rb, i, 4, ND);
        switch (n - i) {
        case 3: pdot_x(w, xd + i / 4 * tile, sx, xs, y, rb, i, 3, ND); break;
        case 2: pdot_x(w, xd + i / 4 * tile, sx, xs, y, rb, i, 2, ND); break;
        case 1: pdot_x(w, xd + i / 4 * tile, sx, xs, y, rb, i, 1, ND); break;
        default: break;
        }
    }
}

void ts_avx512_pdot(const ts_weight *w, const int8_t *xd, const float *sx, const float *xs, int n, int nd, float *y,
                    int64_t r0, int64_t r1) {
    if (nd == 1) pdot_nd(w, xd, sx, xs, n, y, r0, r1, 1);
    else if (nd == 2) pdot_nd(w, xd, sx, xs, n, y, r0, r1, 2);
    else pdot_nd(w, xd, sx, xs, n, y, r0, r1, 3);
}

/* Digits of n x rows in the tiled layout pdot_x reads. */
void ts_p16_prep_rows(const float *x, int n, int64_t cols, int group, int nd, int8_t *xd, float *sx, float *xs) {
    const int64_t ng = cols / group;
    for (int i = 0; i < n; i++) {
        int t = i / 4, X = TS_MIN(4, n - 4 * t), u = i % 4;
        int8_t *base = xd + (int64_t)t * 4 * cols * nd + (int64_t)u * nd * 4;
        ts_avx512_prep_d(x + (int64_t)i * cols, cols, group, nd, base, (int64_t)X * nd * 4, 4, sx + (int64_t)i * ng,
                         xs + (int64_t)i * ng);
    }
}
