/* simd_avx512.h: small AVX-512 helpers shared by the *_avx512.c kernels
 * (include only from files compiled with the AVX-512 flags).
 *
 * ts_exp512: e^x, x = n ln2 + r with |r| <= ln2/2 (ln2 split in two parts
 * so n ln2 is exact), e^r by a degree-7 Taylor polynomial (error below 2^-26
 * relative on that interval), times 2^n by scalef (which also handles
 * underflow to 0 and overflow to inf); within a few ulp of expf (the SiLU
 * test in tests/test_kernels.c holds it to 4e-7 relative).
 * ts_tail16: the lane mask of the first min(left, 16) lanes.
 * TS_PREFETCH_AHEAD: how far ahead the kernels software-prefetch the weight
 * stream they read (below).
 */
#ifndef TS_SIMD_AVX512_H
#define TS_SIMD_AVX512_H

#include <immintrin.h>
#include <stddef.h>

static inline __attribute__((always_inline)) __m512 ts_exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(89.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Software prefetch distance in bytes along a thread's stream of weights.
 * The hardware prefetchers stop at every 4 KiB page and ramp up again;
 * prefetching 4-8 KiB ahead keeps enough misses in flight for one core to
 * pull its share of the bus. On the 2-core Xeon (Emerald Rapids) it took
 * 0.8B INT4 decode from 37 to 57-62 tok/s (2 KiB: 48-52, 16 KiB: 58-60,
 * 32 KiB: 54-56; bench/RESULTS.md). Prefetches past a buffer's end never
 * fault and touch nothing. */
#define TS_PREFETCH_AHEAD 6144

static inline __attribute__((always_inline)) __mmask16 ts_tail16(size_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

#endif
