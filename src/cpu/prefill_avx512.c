/* prefill_avx512.c: AVX-512 versions of the prefill-only kernels
 * (prefill.c holds the references, the dispatch and the algebra).
 *
 * Owns: a small f32 matrix product (register-blocked 4 rows x 64 columns,
 * masked tails, so every shape works), the chunked delta rule and the
 * multi-row attention written as a few such products, and a vectorised
 * SiLU with its own exp.
 * Does not own: the quantized products (linear_avx512.c, matmul.c).
 *
 * Precision: f32 with FMAs. ts_exp512 (simd_avx512.h) is a degree-7 polynomial after the
 * usual range reduction, within a few ulp of expf over the range used.
 * Nothing here is row-exact with the token path; prefill only.
 */
#include <immintrin.h>
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/simd_avx512.h"

#define AI static inline __attribute__((always_inline))

/* ---- f32 matrix product ---- */

/* One MR x (NV*16) tile of C: the K loop loads NV vectors of a B row and
 * broadcasts MR elements of A; MR*NV accumulators stay in registers (the
 * constants MR, NV make the compiler unroll everything). */
AI void tile(const int MR, const int NV, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
             size_t ldc, __mmask16 mlast, int acc) {
    __m512 c[4][4];
    _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 4") for (int u = 0; u < NV; u++) c[r][u] = _mm512_setzero_ps();
    for (int kk = 0; kk < K; kk++) {
        __m512 b[4];
        const float *Bk = B + (size_t)kk * ldb;
        _Pragma("GCC unroll 4") for (int u = 0; u < NV; u++) b[u] = _mm512_maskz_loadu_ps(u == NV - 1 ? mlast : 0xFFFF, Bk + 16 * u);
        _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++) {
            __m512 a = _mm512_set1_ps(A[(size_t)r * lda + kk]);
            _Pragma("GCC unroll 4") for (int u = 0; u < NV; u++) c[r][u] = _mm512_fmadd_ps(a, b[u], c[r][u]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < MR; r++)
        _Pragma("GCC unroll 4") for (int u = 0; u < NV; u++) {
            __mmask16 mk = u == NV - 1 ? mlast : 0xFFFF;
            float *p = C + (size_t)r * ldc + 16 * u;
            __m512 x = c[r][u];
            if (acc) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, p));
            _mm512_mask_storeu_ps(p, mk, x);
        }
}

#define TILE_CASE(MR, NV)                                                                                              \
    case (MR) * 8 + (NV): tile(MR, NV, K, A + (size_t)i0 * lda, lda, B + j0, ldb, C + (size_t)i0 * ldc + j0, ldc,      \
                               mlast, acc);                                                                            \
        break;

void ts_avx512_sgemm(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C, size_t ldc,
                     int acc) {
    for (int j0 = 0; j0 < N; j0 += 64) {
        const int nn = TS_MIN(64, N - j0), nv = (nn + 15) / 16;
        const __mmask16 mlast = nn % 16 ? (__mmask16)((1u << (nn % 16)) - 1) : (__mmask16)0xFFFF;
        for (int i0 = 0; i0 < M; i0 += 4) {
            const int mr = TS_MIN(4, M - i0);
            switch (mr * 8 + nv) {
                TILE_CASE(4, 4) TILE_CASE(4, 3) TILE_CASE(4, 2) TILE_CASE(4, 1)
                TILE_CASE(3, 4) TILE_CASE(3, 3) TILE_CASE(3, 2) TILE_CASE(3, 1)
                TILE_CASE(2, 4) TILE_CASE(2, 3) TILE_CASE(2, 2) TILE_CASE(2, 1)
                TILE_CASE(1, 4) TILE_CASE(1, 3) TILE_CASE(1, 2) TILE_CASE(1, 1)
            default: break;
            }
        }
    }
}

/* ---- chunked delta rule ---- */

/* y = a * x over n floats (y may alias x) */
static void scale_to(float *y, const float *x, float a, size_t n) {
    const __m512 av = _mm512_set1_ps(a);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 mk = ts_tail16(n - i);
        _mm512_mask_storeu_ps(y + i, mk, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(mk, x + i)));
    }
}

static int all_zero(const float *x, size_t n) {
    __m512i acc = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 16)
        acc = _mm512_or_si512(acc, _mm512_castps_si512(_mm512_maskz_loadu_ps(ts_tail16(n - i), x + i)));
    /* -0.0 counts as non-zero here: only a skipped product is at stake */
    return _mm512_test_epi32_mask(acc, acc) == 0;
}

/* The algebra is in prefill.c. As products (L rows, compact buffers):
 *   KT = K^T [dk, L];  KK = K KT, QK = Q KT [L, L] (lower triangles, in
 *   strips of 4 rows);  Dl = K S0, Tq = Q S0 [L, dv]
 *   E[t,s] = e^{G_t - G_s}: KK *= E (s < t), QK *= E (s <= t, 0 above)
 *   delta rows by forward substitution (vectorised over dv)
 *   O = diag(e^G) Tq + QK Dl;  S = e^{G_last} S0 + KT diag(e^{G_last - G}) Dl */
void ts_avx512_delta_chunk(float *S, const float *q, const float *k, const float *v, size_t ld, const float *g,
                           const float *beta, size_t ldg, float *o, size_t ldo, int L, int dk, int dv, float *ws) {
    float *KT = ws;                    /* [dk, L] */
    float *KK = KT + (size_t)dk * L;   /* [L, L] */
    float *QK = KK + (size_t)L * L;    /* [L, L] */
    float *Dl = QK + (size_t)L * L;    /* [L, dv] */
    float *Tq = Dl + (size_t)L * dv;   /* [L, dv] */
    double G[64];
    float eG[64];
    if (L <= 0 || L > 64) return; /* the caller keeps 1 <= L <= 64 */
    double acc = 0.0;
    for (int t = 0; t < L; t++) {
        acc += g[(size_t)t * ldg];
        G[t] = acc;
        eG[t] = (float)exp(acc);
    }
    for (int s = 0; s < L; s++)
        for (int i = 0; i < dk; i++) KT[(size_t)i * L + s] = k[(size_t)s * ld + i];
    /* lower triangles only: rows i0..i0+3 need columns s <= i0+3 (the
     * entries above are never read; QK's are zeroed below) */
    for (int i0 = 0; i0 < L; i0 += 4) {
        const int mr = TS_MIN(4, L - i0), nc = TS_MIN(L, i0 + 4);
        ts_avx512_sgemm(mr, nc, dk, k + (size_t)i0 * ld, ld, KT, L, KK + (size_t)i0 * L, L, 0);
        ts_avx512_sgemm(mr, nc, dk, q + (size_t)i0 * ld, ld, KT, L, QK + (size_t)i0 * L, L, 0);
    }
    /* a zero start state (the first chunk of a prompt) contributes nothing */
    const int S0_zero = all_zero(S, (size_t)dk * dv);
    if (!S0_zero) { /* else Dl and Tq are zero: not formed, not read */
        ts_avx512_sgemm(L, dv, dk, k, ld, S, dv, Dl, dv, 0);
        ts_avx512_sgemm(L, dv, dk, q, ld, S, dv, Tq, dv, 0);
    }
    float dG[64];
    for (int t = 0; t < L; t++) {
        float *kk = KK + (size_t)t * L, *qk = QK + (size_t)t * L;
        /* E[t, s] = e^{G_t - G_s}: the difference in double, the exp in f32 */
        for (int s = 0; s < t; s++) dG[s] = (float)(G[t] - G[s]);
        for (int s = 0; s < t; s += 16) {
            __mmask16 mk = ts_tail16((size_t)(t - s));
            __m512 e = ts_exp512(_mm512_maskz_loadu_ps(mk, dG + s));
            _mm512_mask_storeu_ps(kk + s, mk, _mm512_mul_ps(e, _mm512_maskz_loadu_ps(mk, kk + s)));
            _mm512_mask_storeu_ps(qk + s, mk, _mm512_mul_ps(e, _mm512_maskz_loadu_ps(mk, qk + s)));
        }
        for (int s = t + 1; s < L; s++) qk[s] = 0.f;
    }
    /* delta_t = beta_t (v_t - e^{G_t} Dl_t - sum_{s<t} KK[t,s] delta_s), in place of Dl_t */
    for (int t = 0; t < L; t++) {
        float *dt = Dl + (size_t)t * dv;
        const float *vt = v + (size_t)t * ld, *kk = KK + (size_t)t * L;
        const __m512 et = _mm512_set1_ps(eG[t]), bt = _mm512_set1_ps(beta[(size_t)t * ldg]);
        for (int j = 0; j < dv; j += 64) {
            const int nn = TS_MIN(64, dv - j);
            __mmask16 mk[4];
            __m512 a[4];
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
                int w = nn - 16 * u;
                mk[u] = w >= 16 ? (__mmask16)0xFFFF : w > 0 ? (__mmask16)((1u << w) - 1) : 0;
                a[u] = _mm512_maskz_loadu_ps(mk[u], vt + j + 16 * u);
                if (!S0_zero) a[u] = _mm512_fnmadd_ps(et, _mm512_maskz_loadu_ps(mk[u], dt + j + 16 * u), a[u]);
            }
            for (int s = 0; s < t; s++) {
                const __m512 c = _mm512_set1_ps(kk[s]);
                const float *ds = Dl + (size_t)s * dv + j;
                _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++)
                    a[u] = _mm512_fnmadd_ps(c, _mm512_maskz_loadu_ps(mk[u], ds + 16 * u), a[u]);
            }
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) _mm512_mask_storeu_ps(dt + j + 16 * u, mk[u], _mm512_mul_ps(a[u], bt));
        }
    }
    /* outputs: o_t = e^{G_t} Tq_t, then += QK Dl */
    if (!S0_zero)
        for (int t = 0; t < L; t++) scale_to(o + (size_t)t * ldo, Tq + (size_t)t * dv, eG[t], (size_t)dv);
    /* QK is lower triangular: rows i0..i0+3 sum over s <= i0+3 only */
    for (int i0 = 0; i0 < L; i0 += 4)
        ts_avx512_sgemm(TS_MIN(4, L - i0), dv, TS_MIN(L, i0 + 4), QK + (size_t)i0 * L, L, Dl, dv, o + (size_t)i0 * ldo, ldo,
                        !S0_zero);
    /* state at the chunk end */
    const float eL = eG[L - 1];
    for (int s = 0; s < L; s++) {
        float w = expf((float)(G[L - 1] - G[s]));
        scale_to(Dl + (size_t)s * dv, Dl + (size_t)s * dv, w, (size_t)dv);
    }
    if (!S0_zero) scale_to(S, S, eL, (size_t)dk * dv);
    ts_avx512_sgemm(dk, dv, L, KT, L, Dl, dv, S, dv, !S0_zero);
}

/* ---- multi-row causal attention ---- */

#define AT_KT 64 /* keys per tile */
#define AT_RB 64 /* query rows per block */

/* Flash-style: per block of query rows, key tiles of AT_KT: scores as a
 * product with the transposed key tile, an online softmax per row (running
 * max and sum, the output rescaled when the max grows), then the output
 * accumulated as a product with the value tile. Keys past a row's position
 * get probability 0. Scratch on the stack: a [D, AT_KT] key tile and the
 * [AT_RB, AT_KT] scores (80 KiB at D = 256). */
void ts_avx512_attn_chunk(const float *q, size_t ldq, const float *k, const float *v, size_t ldkv, float *o, size_t ldo,
                          int n, int pos, int D, float scale) {
    float KT[TS_ATTN_MAX_D * AT_KT];
    float P[AT_RB * AT_KT];
    float mrow[AT_RB], lrow[AT_RB];
    for (int i0 = 0; i0 < n; i0 += AT_RB) {
        const int rb = TS_MIN(AT_RB, n - i0);
        const int Tend = pos + i0 + rb; /* keys [0, Tend) are visible to some row of the block */
        for (int r = 0; r < rb; r++) {
            mrow[r] = -INFINITY;
            lrow[r] = 0.f;
            memset(o + (size_t)(i0 + r) * ldo, 0, sizeof(float) * D);
        }
        for (int t0 = 0; t0 < Tend; t0 += AT_KT) {
            const int kt = TS_MIN(AT_KT, Tend - t0);
            for (int s = 0; s < kt; s++) {
                const float *ks = k + (size_t)(t0 + s) * ldkv;
                for (int d = 0; d < D; d++) KT[(size_t)d * kt + s] = ks[d];
            }
            ts_avx512_sgemm(rb, kt, D, q + (size_t)i0 * ldq, ldq, KT, kt, P, kt, 0);
            for (int r = 0; r < rb; r++) {
                float *pr = P + (size_t)r * kt;
                const int vis = TS_MIN(kt, pos + i0 + r + 1 - t0); /* visible keys of this tile */
                if (vis <= 0) { memset(pr, 0, sizeof(float) * kt); continue; }
                float mx = -INFINITY;
                for (int s = 0; s < vis; s++) { pr[s] *= scale; mx = pr[s] > mx ? pr[s] : mx; }
                const float mnew = mx > mrow[r] ? mx : mrow[r];
                const float alpha = expf(mrow[r] - mnew);
                float sum = 0.f;
                for (int s = 0; s < vis; s++) { pr[s] = expf(pr[s] - mnew); sum += pr[s]; }
                for (int s = vis; s < kt; s++) pr[s] = 0.f;
                if (alpha != 1.0f) {
                    float *orow = o + (size_t)(i0 + r) * ldo;
                    for (int d = 0; d < D; d++) orow[d] *= alpha;
                }
                lrow[r] = lrow[r] * alpha + sum;
                mrow[r] = mnew;
            }
            ts_avx512_sgemm(rb, D, kt, P, kt, v + (size_t)t0 * ldkv, ldkv, o + (size_t)i0 * ldo, ldo, 1);
        }
        for (int r = 0; r < rb; r++) {
            float inv = 1.0f / lrow[r], *orow = o + (size_t)(i0 + r) * ldo;
            for (int d = 0; d < D; d++) orow[d] *= inv;
        }
    }
}

/* ---- residual add + RMSNorm, conv + SiLU ---- */

void ts_avx512_add_rmsnorm(float *x, const float *add, const float *w, float *y, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * dim, *yi = y + (size_t)i * dim;
        const float *ai = add ? add + (size_t)i * dim : NULL;
        __m512 ss = _mm512_setzero_ps();
        for (int j = 0; j < dim; j += 16) {
            __mmask16 mk = ts_tail16((size_t)(dim - j));
            __m512 v = _mm512_maskz_loadu_ps(mk, xi + j);
            if (ai) {
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, ai + j));
                _mm512_mask_storeu_ps(xi + j, mk, v);
            }
            ss = _mm512_fmadd_ps(v, v, ss);
        }
        const __m512 r = _mm512_set1_ps(1.0f / sqrtf(_mm512_reduce_add_ps(ss) / (float)dim + eps));
        for (int j = 0; j < dim; j += 16) {
            __mmask16 mk = ts_tail16((size_t)(dim - j));
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, xi + j), r);
            _mm512_mask_storeu_ps(yi + j, mk, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, w + j)));
        }
    }
}

/* Blocks of up to 128 channels (their K weight rows stay in L1), row by row,
 * 16 channels per vector: K FMAs and a SiLU. Rows outer keeps the reads and
 * writes sequential within a row. */
void ts_avx512_conv_silu(const float *x, size_t ldx, const float *state, size_t lds, const float *w, size_t ldw, int K,
                         float *out, size_t ldo, int n, int nc) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int c0 = 0; c0 < nc; c0 += 128) {
        const int bc = TS_MIN(128, nc - c0);
        for (int i = 0; i < n; i++) {
            const float *src[8];
            for (int t = 0; t < K; t++) {
                int r = i - (K - 1) + t;
                src[t] = (r >= 0 ? x + (size_t)r * ldx : state + (size_t)(K - 1 + r) * lds) + c0;
            }
            float *dst = out + (size_t)i * ldo + c0;
            for (int c = 0; c < bc; c += 16) {
                const __mmask16 mk = ts_tail16((size_t)(bc - c));
                __m512 acc = _mm512_setzero_ps();
                for (int t = 0; t < K; t++)
                    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, w + (size_t)t * ldw + c0 + c), _mm512_maskz_loadu_ps(mk, src[t] + c), acc);
                __m512 s = _mm512_div_ps(acc, _mm512_add_ps(one, ts_exp512(_mm512_sub_ps(_mm512_setzero_ps(), acc))));
                _mm512_mask_storeu_ps(dst + c, mk, s);
            }
        }
    }
}
