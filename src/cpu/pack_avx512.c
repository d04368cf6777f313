/* pack_avx512.c: the P16 repacking (cpu/pack.c's layout) of one group record
 * with AVX-512, for expert streaming, which repacks every expert it reads
 * (bench/experts/RESULTS.md: the scalar loop packed ~1 GB/s per core, about
 * the disk's rate, so it doubled the time a miss costs).
 *
 * A record's data chunk j holds word j of the group in each of the 16 rows,
 * lane r = row r: one gather of the 16 rows' word j (stride: a row's words),
 * the nibble spread of pack.c's spread4 done on all 16 lanes, one aligned
 * 64-byte store. Scales and biases: one gather each of the 16 rows' values
 * (4-byte reads of 2-byte values, so the last value of an array, whose read
 * would run 2 bytes past its end, is copied alone). Rows past the matrix's
 * end are masked off and come out zero, as in pack.c. Same bytes as the
 * scalar loop (tests/test_kernels.c compares them).
 */
#include <immintrin.h>

#include "cpu/cpu.h"

static inline __m512i spread4v(__m512i x) {
    const __m512i m1 = _mm512_set1_epi32(0x00FF00FF), m2 = _mm512_set1_epi32(0x0F0F0F0F);
    x = _mm512_and_si512(_mm512_or_si512(x, _mm512_slli_epi32(x, 8)), m1);
    return _mm512_and_si512(_mm512_or_si512(x, _mm512_slli_epi32(x, 4)), m2);
}

void ts_avx512_pack_record(const ts_weight *w, int64_t rb, int64_t g, uint8_t *out) {
    const int64_t rows = w->rows, cols = w->cols, G = w->group, ng = cols / G;
    const int bits = w->bits;
    const int64_t wpr = cols * bits / 32;
    const int64_t r0 = rb * 16, nv = rows - r0 < 16 ? rows - r0 : 16;
    const __mmask16 valid = (__mmask16)((1u << nv) - 1);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    /* word offsets of the 16 rows (valid lanes only are read) */
    const __m512i rowoff = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)wpr));
    const uint32_t *base = (const uint32_t *)w->data + r0 * wpr + g * G * bits / 32;
    const int64_t nchunk = bits == 4 ? G / 8 : G / 4;
    for (int64_t j = 0; j < nchunk; j++) {
        __m512i u = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, rowoff, base + j, 4);
        if (bits == 4) {
            __m512i lo = spread4v(_mm512_and_si512(u, _mm512_set1_epi32(0xFFFF)));
            __m512i hi = spread4v(_mm512_srli_epi32(u, 16));
            u = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 4));
        }
        _mm512_store_si512((void *)(out + 64 * j), u);
    }
    const size_t dbytes = (size_t)16 * (size_t)G * (size_t)bits / 8;
    const int ss = w->sdtype == TS_DTYPE_F32 ? 4 : 2;
    const uint8_t *sc[2] = {w->scales, w->biases};
    /* element (r, g) of a [rows, ng] array: lane offsets in elements */
    const __m512i eoff = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)ng));
    for (int k = 0; k < 2; k++) {
        uint8_t *o = out + dbytes + (size_t)k * 16 * ss;
        const uint8_t *src = sc[k] + ((size_t)r0 * (size_t)ng + (size_t)g) * ss;
        if (ss == 4) {
            __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, eoff, src, 4);
            _mm512_storeu_si512((void *)o, v);
            continue;
        }
        /* 2-byte values read 4 bytes at a time: the matrix's last value alone */
        __mmask16 m = valid;
        const int last = r0 + nv == rows && g == ng - 1;
        if (last) m &= (__mmask16)~(1u << (nv - 1));
        __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, eoff, src, 2);
        _mm256_storeu_si256((__m256i *)(void *)o, _mm512_cvtepi32_epi16(v));
        if (last) memcpy(o + 2 * (nv - 1), src + (size_t)(nv - 1) * (size_t)ng * 2, 2);
    }
}
