/* linear_avx2.c: AVX2 + FMA row kernels (the fallback for CPUs without
 * AVX-512; compiled with -mavx2 -mfma -mf16c).
 *
 * Quantized decode (ts_avx2_qdot) works in f32: 8 packed bytes are widened
 * to 8 int32 lanes, split into low nibbles (even columns) and high nibbles
 * (odd columns) for 4-bit, dequantized (scale * q + bias, one FMA) and FMA'd
 * against x, which ts_avx2_prep_x stores permuted per 16 columns (8 evens,
 * then 8 odds). Dequantizing per element rather than factoring the bias out
 * (scale * sum(q x) + bias * sum(x)) matters in f32: the two factored terms
 * are large and cancel, and the rounding of the big terms moved the chaotic
 * fixture models' logits by 2e-3. Requires group % 16 == 0.
 * BF16/F32 decode (ts_avx2_fdot): widen and FMA. Operation order depends only
 * on the (weight row, x row) pair: row-exact.
 */
#include <immintrin.h>

#include "cpu/cpu.h"

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float sget(ts_dtype t, const void *p, int64_t i) {
    if (t == TS_DTYPE_F32) return ((const float *)p)[i];
    if (t == TS_DTYPE_BF16) return ts_bf16_to_f32(((const uint16_t *)p)[i]);
    return _cvtsh_ss(((const uint16_t *)p)[i]);
}

void ts_avx2_prep_x(const float *x, int64_t cols, int group, int bits, float *xp, float *xs) {
    for (int64_t g = 0; g < cols / group; g++) {
        float s = 0.f;
        for (int c = 0; c < group; c++) s += x[g * group + c];
        xs[g] = s;
    }
    for (int64_t c = 0; c < cols; c++) {
        int64_t pos = c;
        if (bits == 4) { int64_t c0 = c & ~(int64_t)15, k = c - c0; pos = c0 + (k & 1) * 8 + k / 2; }
        xp[pos] = x[c];
    }
}

void ts_avx2_qdot(const ts_weight *w, const float *xp, const float *xs, int n, float *y, int64_t r0, int64_t r1) {
    const int64_t cols = w->cols, G = w->group, ng = cols / G, bpr = cols * w->bits / 8;
    const __m256i m4 = _mm256_set1_epi32(15);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + r * bpr;
        for (int i = 0; i < n; i++) {
            const float *xi = xp + (int64_t)i * cols, *xsi = xs + (int64_t)i * ng;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0;
            for (int64_t g = 0; g < ng; g++) {
                __m256 S = _mm256_set1_ps(sget(w->sdtype, w->scales, r * ng + g));
                __m256 B = _mm256_set1_ps(sget(w->sdtype, w->biases, r * ng + g));
                for (int64_t c = g * G; c < (g + 1) * G; c += 16) {
                    __m256 q0, q1;
                    if (w->bits == 4) {
                        __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + c / 2)));
                        q0 = _mm256_cvtepi32_ps(_mm256_and_si256(v, m4));
                        q1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
                    } else {
                        q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + c))));
                        q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + c + 8))));
                    }
                    a0 = _mm256_fmadd_ps(_mm256_fmadd_ps(q0, S, B), _mm256_loadu_ps(xi + c), a0);
                    a1 = _mm256_fmadd_ps(_mm256_fmadd_ps(q1, S, B), _mm256_loadu_ps(xi + c + 8), a1);
                }
            }
            (void)xsi;
            y[(int64_t)i * w->rows + r] = hsum8(_mm256_add_ps(a0, a1));
        }
    }
}

static inline __m256 wload8(const void *p, ts_dtype t, int64_t c) {
    if (t == TS_DTYPE_F32) return _mm256_loadu_ps((const float *)p + c);
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + c)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

void ts_avx2_fdot(const ts_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1) {
    const int64_t cols = w->cols, c32 = cols & ~(int64_t)31, c8 = cols & ~(int64_t)7;
    const size_t es = ts_dtype_size(w->dtype);
    for (int64_t r = r0; r < r1; r++) {
        const char *row = (const char *)w->data + r * cols * es;
        for (int i = 0; i < n; i++) {
            const float *xi = x + (int64_t)i * cols;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            int64_t c = 0;
            for (; c < c32; c += 32) {
                a0 = _mm256_fmadd_ps(wload8(row, w->dtype, c), _mm256_loadu_ps(xi + c), a0);
                a1 = _mm256_fmadd_ps(wload8(row, w->dtype, c + 8), _mm256_loadu_ps(xi + c + 8), a1);
                a2 = _mm256_fmadd_ps(wload8(row, w->dtype, c + 16), _mm256_loadu_ps(xi + c + 16), a2);
                a3 = _mm256_fmadd_ps(wload8(row, w->dtype, c + 24), _mm256_loadu_ps(xi + c + 24), a3);
            }
            for (; c < c8; c += 8) a0 = _mm256_fmadd_ps(wload8(row, w->dtype, c), _mm256_loadu_ps(xi + c), a0);
            float acc = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            for (; c < cols; c++) acc += sget(w->dtype, row, c) * xi[c];
            y[(int64_t)i * w->rows + r] = acc;
        }
    }
}
