/* p16_avx512.h: the f32 steps every P16 kernel shares (the VNNI kernel,
 * linear_p16_avx512.c, and the AMX one, linear_p16_amx.c). Include only from
 * files compiled with the AVX-512 flags.
 *
 * Both kernels form the same exact int32 sums per (16 weight rows, group,
 * x row, digit); what makes their outputs bit-identical is that the f32
 * arithmetic after them is this one code, not two copies kept in step.
 */
#ifndef TS_P16_AVX512_H
#define TS_P16_AVX512_H

#include "cpu/cpu.h"
#include "cpu/simd_avx512.h"

/* Where things are in a weight's group records (the layout of cpu/pack.c). */
typedef struct p16_geom {
    size_t rec;    /* bytes of one group record */
    size_t dbytes; /* its data: 16 rows x G columns */
    size_t ss;     /* bytes of one scale (or bias) */
} p16_geom;

static inline p16_geom p16_geometry(const ts_weight *w) {
    p16_geom g = {ts_pack_record_bytes(w->bits, w->group, w->sdtype), (size_t)16 * (size_t)w->group * (size_t)w->bits / 8,
                  w->sdtype == TS_DTYPE_F32 ? 4u : 2u};
    return g;
}

/* The record TS_PREFETCH_AHEAD bytes ahead of rp, one line at a time. */
static inline __attribute__((always_inline)) void p16_prefetch(const uint8_t *rp, size_t rec) {
    for (size_t l = 0; l < rec; l += 64) _mm_prefetch((const char *)rp + TS_PREFETCH_AHEAD + l, _MM_HINT_T0);
}

/* The 16 scales (or biases) of a group record (cpu/pack.c) as f32. */
static inline __attribute__((always_inline)) __m512 p16_load16(const uint8_t *p, ts_dtype t) {
    if (t == TS_DTYPE_F32) return _mm512_load_ps((const float *)p);
    __m256i h = _mm256_load_si256((const __m256i *)p);
    if (t == TS_DTYPE_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* One group of one x row into its accumulator: the digit sums A_k joined as
 * A2 * 65536 + (A1 * 256 + A0) (the low pair in int32, no overflow for
 * G <= 1024; one FMA for the top digit), times the weight scales and the
 * row's group scale sx, then the bias term (biases times sx * sum of the
 * rounded x, xs). One accumulator for both terms. nd = 2: A1 * 256 + A0;
 * nd = 1 (int8 activations, and drafting): A0 is the whole sum. */
static inline __attribute__((always_inline)) __m512 p16_step(__m512 acc, __m512i a0, __m512i a1, __m512i a2,
                                                             __m512 sc, __m512 bi, float sx, float xs,
                                                             const int nd) {
    __m512 t;
    if (nd == 1) {
        t = _mm512_cvtepi32_ps(a0);
    } else if (nd == 2) {
        (void)a2;
        t = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(a1, 8), a0));
    } else {
        __m512i low = _mm512_add_epi32(_mm512_slli_epi32(a1, 8), a0);
        t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a2), _mm512_set1_ps(65536.0f), _mm512_cvtepi32_ps(low));
    }
    acc = _mm512_fmadd_ps(t, _mm512_mul_ps(sc, _mm512_set1_ps(sx)), acc);
    return _mm512_fmadd_ps(bi, _mm512_set1_ps(xs), acc);
}

#endif
