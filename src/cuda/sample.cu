/* sample.cu: sampling candidates on the device (tsc_topn), so that a sampled
 * step reads back a few KB instead of the logits row.
 *
 * Owns: tsc_topn and its workspace size. Does not own: the sampler (the host
 * decides the token from the candidates: gen/sample.c), argmax (misc.cu).
 *
 * What it computes (the topn op of src/backend.h, for one row): the
 * penalised, scaled values v_i, the N first valid ones in the sampler's
 * order (larger v, then lower id), the count of valid entries and the sum of
 * expf(v_i - max) in double.
 *
 * How: every entry becomes one 64-bit key, (the value's bits made
 * order-preserving as an unsigned integer) << 32 | (2^32 - 1 - id), so the
 * sampler's total order is plain descending key order and keys are unique
 * (0, below every valid key, stands for an invalid entry or padding). Then
 *   1. (penalties only) the row is copied to a scratch row and the few
 *      listed ids are penalised there, one thread each;
 *   2. k_topn_chunk: one block of 1024 threads per 4096 entries sorts its
 *      keys in shared memory (bitonic, 32 KB) and keeps the first N, and
 *      counts its valid entries;
 *   3. k_topn_merge, as often as needed: one block per 4096/N lists sorts
 *      their keys together and keeps the first N (61 chunk lists of the
 *      248,320-entry vocabulary: one round for N <= 64, two for N = 256);
 *   4. k_topn_sum: the chunks again, expf(v - max) summed in double per
 *      block (max: the merged first key);
 *   5. k_topn_final: one block sums the blocks' sums and counts in block
 *      order and writes the row's result, decoded, into one small buffer
 *      that the host reads in one copy (16 + 8N bytes).
 * Why sorting and not a radix select: a full bitonic sort of 4096 keys is
 * 78 barrier steps, a few microseconds, and it is obviously right for ties
 * and for any N <= 256 (the index and merge logic was also checked by a
 * sequential emulation against a plain sort before any GPU ran it); the
 * five to seven launches (~2-3 us each uncaptured) cost about as much as
 * the sorts. Prediction for the 248K row: ~15-25 us a step against
 * ~100 us to copy the 1 MB row through PCIe and ~1 ms for the host to sample
 * it. Measured end to end only (bench/cuda/RESULTS.md): sampled 9B decode at
 * 328.5 tok/s with the candidates against 183.5 reading the row back, the
 * same ids; the kernels' own times are not measured.
 *
 * Exactness: keys and counts are exact (the value is x * scale after the
 * penalty, written with rounding intrinsics, as the host's float code does);
 * the sum is within CUDA expf's 2 ulp per term of the CPU's, in another
 * order: the host allows a relative 1e-6 (src/backend.h). Deterministic:
 * every reduction has a fixed shape.
 */
#include "cuda/common.cuh"

namespace {

constexpr int CHUNK = 4096;   /* entries per block of the chunk pass */
constexpr int SORT_T = 1024;  /* threads of the sorting blocks */

__device__ __forceinline__ unsigned long long topn_key(float v, int id) {
    if (!(v > -INFINITY)) return 0ull;  /* NaN, -inf */
    v = __fadd_rn(v, 0.0f);             /* -0 -> +0: one key per value */
    uint32_t u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned long long)(0xFFFFFFFFu - (uint32_t)id);
}

__device__ __forceinline__ float key_val(unsigned long long k) {
    const uint32_t u = (uint32_t)(k >> 32);
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u);
}
__device__ __forceinline__ int key_id(unsigned long long k) { return (int)(0xFFFFFFFFu - (uint32_t)k); }

/* Sort s[0..P) descending (P a power of two, <= CHUNK) by the block's
 * threads; called by every thread, returns after a barrier. */
__device__ void bitonic_desc(unsigned long long *s, int P) {
    __syncthreads();
    for (int k = 2; k <= P; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < P / 2; t += blockDim.x) {
                /* the pair (i, i + j), i with bit j clear */
                const int i = ((t & ~(j - 1)) << 1) | (t & (j - 1)), l = i + j;
                const unsigned long long a = s[i], b = s[l];
                /* descending where bit k of i is clear, ascending elsewhere:
                 * the last stage (k = P) is descending throughout */
                if ((i & k) == 0 ? a < b : a > b) s[i] = b, s[l] = a;
            }
            __syncthreads();
        }
}

__device__ __forceinline__ int pow2_at_least(int n) {
    int p = 2;
    while (p < n) p <<= 1;
    return p;
}

/* y = x, then y[pen_ids[j]] penalised (two launches: the copy must land
 * before the penalties). */
__global__ void k_topn_copy(const float *x, float *y, int V) {
    TSC_PDL_ENTRY();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < V; i += gridDim.x * blockDim.x) y[i] = x[i];
}

__global__ void k_topn_pen(const float *x, float *y, int V, float rep, int n_pen, const int32_t *ids, const float *sub) {
    TSC_PDL_ENTRY();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_pen) return;
    const int id = ids[j];
    if (id < 0 || id >= V) return;
    float v = x[id];
    /* sample.c's apply_penalties: x / r or x * r, then x - sub */
    if (rep != 1.0f) v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
    y[id] = __fsub_rn(v, sub[j]);
}

__global__ void __launch_bounds__(SORT_T) k_topn_chunk(const float *x, int V, float scale, int N,
                                                       unsigned long long *lists, int *counts) {
    TSC_PDL_ENTRY();
    __shared__ unsigned long long s[CHUNK];
    __shared__ int cnt[SORT_T / 32];
    const int a = blockIdx.x * CHUNK, n = min(CHUNK, V - a), P = pow2_at_least(n);
    int c = 0;
    for (int t = threadIdx.x; t < P; t += blockDim.x) {
        unsigned long long k = 0ull;
        if (t < n) {
            k = topn_key(__fmul_rn(x[a + t], scale), a + t);
            c += k != 0ull;
        }
        s[t] = k;
    }
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0) cnt[threadIdx.x >> 5] = c;
    bitonic_desc(s, P); /* its first barrier also publishes cnt */
    unsigned long long *out = lists + (size_t)blockIdx.x * N;
    for (int j = threadIdx.x; j < N; j += blockDim.x) out[j] = j < P ? s[j] : 0ull;
    if (threadIdx.x == 0) {
        int tot = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += cnt[w];
        counts[blockIdx.x] = tot;
    }
}

/* Lists [b*F, b*F + F) of N keys each (of L) -> list b of the output. */
__global__ void __launch_bounds__(SORT_T) k_topn_merge(const unsigned long long *in, int L, int N, int F,
                                                       unsigned long long *out) {
    TSC_PDL_ENTRY();
    __shared__ unsigned long long s[CHUNK];
    const int l0 = blockIdx.x * F, nl = min(F, L - l0), n = nl * N, P = pow2_at_least(n);
    const unsigned long long *src = in + (size_t)l0 * N;
    for (int t = threadIdx.x; t < P; t += blockDim.x) s[t] = t < n ? src[t] : 0ull;
    bitonic_desc(s, P);
    for (int j = threadIdx.x; j < N; j += blockDim.x) out[(size_t)blockIdx.x * N + j] = j < P ? s[j] : 0ull;
}

/* Per chunk: the sum of expf(v - m) over its valid entries, m the row's max
 * (the merged first key); 0 when the row has no valid entry or m is +inf. */
__global__ void k_topn_sum(const float *x, int V, float scale, const unsigned long long *best, double *sums) {
    TSC_PDL_ENTRY();
    __shared__ double red[32];
    const unsigned long long k0 = best[0];
    const float m = key_val(k0);
    const bool none = k0 == 0ull || isinf(m);
    const int a = blockIdx.x * CHUNK, n = min(CHUNK, V - a);
    double acc = 0;
    if (!none)
        for (int t = threadIdx.x; t < n; t += blockDim.x) {
            const float v = __fmul_rn(x[a + t], scale);
            if (v > -INFINITY) acc += (double)expf(__fsub_rn(v, m));
        }
    acc = block_sum_d(acc, red);
    if (threadIdx.x == 0) sums[blockIdx.x] = none ? 0.0 : acc;
}

/* The row's result: [sum_exp (double), n_valid (int), pad][vals N][ids N]. */
__global__ void k_topn_final(const unsigned long long *best, int N, int NB, const double *sums, const int *counts,
                             unsigned char *out) {
    TSC_PDL_ENTRY();
    float *vals = (float *)(out + 16);
    int32_t *ids = (int32_t *)(out + 16 + 4 * (size_t)N);
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        const unsigned long long k = best[j];
        vals[j] = k ? key_val(k) : -INFINITY;
        ids[j] = k ? key_id(k) : -1;
    }
    if (threadIdx.x == 0) {
        double z = 0;
        int c = 0;
        for (int b = 0; b < NB; b++) z += sums[b], c += counts[b];
        *(double *)out = z;
        *(int32_t *)(out + 8) = c;
        *(int32_t *)(out + 12) = 0;
    }
}

struct topn_ws {
    size_t lists_a, lists_b, sums, counts, out, total;
};

topn_ws topn_layout(int V) {
    const size_t NB = (size_t)(V + CHUNK - 1) / CHUNK;
    topn_ws l;
    size_t o = 0;
    auto al = [](size_t x) { return (x + 255) & ~(size_t)255; };
    l.lists_a = o, o += al(NB * TSC_TOPN_MAX * 8);
    l.lists_b = o, o += al(NB * TSC_TOPN_MAX * 8); /* the first round's output is at most this; simply as big */
    l.sums = o, o += al(NB * sizeof(double));
    l.counts = o, o += al(NB * sizeof(int));
    l.out = o, o += al(tsc_topn_out_bytes(TSC_TOPN_MAX));
    l.total = o;
    return l;
}

} // namespace

extern "C" size_t tsc_topn_out_bytes(int N) { return 16 + 8 * (size_t)N; }

extern "C" size_t tsc_topn_ws_bytes(int V) { return V < 1 ? 0 : topn_layout(V).total; }

extern "C" const void *tsc_topn(tsc_ctx *c, const float *x, int V, int N, float scale, float rep, int n_pen,
                                const int32_t *pen_ids, const float *pen_sub, float *row, void *ws) {
    if (!c || c->err_code) return NULL;
    if (V < 1 || N < 1 || N > TSC_TOPN_MAX || n_pen < 0 || (n_pen && (!pen_ids || !pen_sub || !row))) {
        tsc_fail_(c, TS_E_ARG, "tsc_topn: a row of %d, %d candidates, %d penalties", V, N, n_pen);
        return NULL;
    }
    const topn_ws l = topn_layout(V);
    unsigned char *w = (unsigned char *)ws;
    unsigned long long *A = (unsigned long long *)(w + l.lists_a), *B = (unsigned long long *)(w + l.lists_b);
    double *sums = (double *)(w + l.sums);
    int *counts = (int *)(w + l.counts);
    const int NB = (V + CHUNK - 1) / CHUNK;
    if (n_pen) {
        const unsigned g = (unsigned)((V + 255) / 256 < 1024 ? (V + 255) / 256 : 1024);
        tsc_launch(c, k_topn_copy, dim3(g), dim3(256), 0, x, row, V);
        tsc_launch(c, k_topn_pen, dim3((unsigned)((n_pen + 255) / 256)), dim3(256), 0, x, row, V, rep, n_pen, pen_ids,
                   pen_sub);
        x = row;
    }
    tsc_launch(c, k_topn_chunk, dim3((unsigned)NB), dim3(SORT_T), 0, x, V, scale, N, A, counts);
    /* merge rounds, ping-pong between A and B: L lists -> ceil(L / F) */
    const int F = CHUNK / N;
    unsigned long long *cur = A, *nxt = B;
    for (int L = NB; L > 1;) {
        const int nb = (L + F - 1) / F;
        tsc_launch(c, k_topn_merge, dim3((unsigned)nb), dim3(SORT_T), 0, (const unsigned long long *)cur, L, N, F, nxt);
        unsigned long long *t = cur;
        cur = nxt, nxt = t, L = nb;
    }
    tsc_launch(c, k_topn_sum, dim3((unsigned)NB), dim3(256), 0, x, V, scale, (const unsigned long long *)cur, sums);
    tsc_launch(c, k_topn_final, dim3(1), dim3(256), 0, (const unsigned long long *)cur, N, NB, (const double *)sums,
               (const int *)counts, w + l.out);
    TSC_LAUNCHED(c, "tsc_topn");
    return w + l.out;
}
