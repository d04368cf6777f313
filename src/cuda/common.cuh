/* common.cuh: what every .cu file of src/cuda/ shares: the context's layout,
 * the sticky-error helpers, small device math.
 *
 * Owns: struct tsc_ctx, tsc_fail_ (first error wins), TSC_LAUNCHED (a launch
 * error check after each kernel), warp reductions. Does not own: any op.
 * Invariant: an op returns at once when the context has an error (TSC_GUARD),
 * so a broken context never queues more work.
 */
#ifndef TS_CUDA_COMMON_CUH
#define TS_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "cuda/tsc.h"

struct tsc_ctx {
    int device, n_sm, cc_major, cc_minor;
    cudaStream_t stream;
    cudaEvent_t ev0, ev1;
    int err_code;
    char err_msg[512];
    size_t used;        /* bytes of live tsc_alloc */
    struct tsc_blk *blocks; /* live allocations (sizes for the count; freed at close) */
    int capturing;
    int pdl; /* launch with programmatic stream serialization (TSC_PDL=0 turns it off) */
    int pdl_early; /* the kernels between products trigger their dependents first (tsc_pdl_entry) */
    int attn_kv;   /* attention decode's split: 2 K/V in shared memory, scores a lane a key (the default); 1 K/V in shared memory; 0 read where used (attn.cu; TSC_ATTN_KV) */
    int gdn_fused; /* the GDN step in one kernel (gdn.cu, k_gdn_fused; TSC_GDN_FUSED=0: prep + scan) */
    int gdn_pre;    /* the GDN step's state, conv state and weights loaded before its PDL wait (k_gdn_fused's P;
                       the default, TSC_GDN_PRE=0 off) */
    int gdn_hoist;  /* k_gdn_fused's H: the rows' gates and z loaded with q, k, v (the default, TSC_GDN_HOIST=0
                       off; the same bits) */
    int gdn_bar;    /* k_gdn_fused's B: its global stores after the cluster barriers (the default, TSC_GDN_BAR=0
                       off; the same bits) */
    int gdn_rowpar; /* its rows' outputs by several warps (tsc_gdn_args.rows_par; the default, TSC_GDN_ROWPAR=0 off) */
    int gdn_nb2;    /* k_gdn_fused's N: with out_proj's digits, no second cluster barrier and its per-row arrays sized
                       by the launch (the default, TSC_GDN_NB2=0 off; the same bits; with H and B only) */
    int gdn_pad;    /* bytes of dynamic shared memory added to k_gdn_fused's launches, unused by it (TSC_GDN_PAD; 0):
                       a measurement of how its footprint weighs on the launches beside it (session 48) */
    int attn_pad;   /* the same for the attention's combine (TSC_ATTN_PAD; 0), a measurement (session 48) */
    int gdn_dig;    /* the GDN step makes out_proj's digits (TSC_GDN_DIG): 0 never, 1 for one-row passes (the
                       default), 2 for several rows too (opt-in: no gain measured, s34-run1) */
    int attn_dig;   /* the attention's combine makes o_proj's digits, every row count (the default, TSC_ATTN_DIG=0 off) */
    int attn_early; /* the attention's RoPE angles and gate before its PDL waits (attn.cu's EA; the default,
                       TSC_ATTN_EARLY=0 off; the same bits) */
    int attn_r1;    /* the attention's combine with its loads in one round (attn.cu's R1; the default,
                       TSC_ATTN_R1=0 off; the same bits) */
    int attn_gc;    /* the attention split's accumulators sized for its query heads a KV head, its staging's
                       indices stepped (attn.cu's GC; the default, TSC_ATTN_GC=0 off; the same bits) */
    int route_net;  /* MoE routing's picks by a sorting network (misc.cu, route_row_net; the default, TSC_ROUTE_NET=0:
                       route_row's k picks one after another); the same ids and bits */
    int carve;      /* the decode path's preferred shared-memory carveout, percent (tsc_blocks_per_sm_dec; TSC_CARVE=P,
                       50 by default), -1: the driver's choice */
    int attn_kv_smem; /* the K/V form's dynamic shared-memory limit raised on this device (attn.cu) */
    unsigned *bar; /* device counter of the fused dp4a products (tsc_set_barrier), NULL: none */
    void *dg;      /* the dp4a products' staged digits (tsc_set_digits), NULL: none */
    size_t dg_bytes;
    /* launches so far (tsc_launch), and what dg holds when a GDN step or an
     * attention made them (tsc_gdn_step, tsc_attn_decode): the digits of dg_x's dg_n rows of dg_cols
     * columns in groups of dg_group, valid while nlaunch == dg_seq (no
     * launch since, so nothing has written dg or x; q4dp's stage_once) */
    unsigned long long nlaunch, dg_seq;
    /* nlaunch after the last GDN launch (tsc_gdn_step, tsc_gdn_prefill): a
     * step right after it may not load the state before its PDL wait */
    unsigned long long gdn_seq;
    const float *dg_x;
    int dg_n, dg_cols, dg_group;
    void *blas; /* the cuBLAS handle of the prompt products (blas.cu), made on first use */
};

/* dg's "made" mark (tsc_ctx.dg_x): a kernel just launched wrote the
 * digits of x's n rows of cols columns in groups of group into dg; a
 * product launched next over the same rows copies them instead of staging
 * (tsc_dg_made: no launch since). */
static inline void tsc_dg_mark(tsc_ctx *c, const float *x, int n, int cols, int group) {
    c->dg_seq = c->nlaunch, c->dg_x = x, c->dg_n = n, c->dg_cols = cols, c->dg_group = group;
}
static inline bool tsc_dg_made(const tsc_ctx *c, const float *x, int n, int cols, int group) {
    return x && c->dg_x == x && c->dg_seq == c->nlaunch && c->dg_n == n && c->dg_cols == cols && c->dg_group == group;
}

struct tsc_blk {
    void *p;
    size_t bytes;
    struct tsc_blk *next;
};

/* Record the first error (later ones are consequences). */
void tsc_fail_(tsc_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A launch just queued: check its configuration error. */
void tsc_launched_(tsc_ctx *c, const char *op);

/* Programmatic dependent launch (PDL). Every kernel of src/cuda launched
 * through tsc_launch starts with TSC_PDL_ENTRY: wait until the previous
 * kernel in the stream has finished and its writes are visible (a no-op when
 * launched without the attribute), then let the next one be scheduled. So a
 * kernel's launch and its weight-only prologue overlap the previous kernel's
 * tail, inside graphs too, with the order of a plain stream. */
#ifdef TSC_TRACE
#define TSC_PDL_ENTRY() TSC_ENTRY(false)
#else
#define TSC_PDL_ENTRY() tsc_pdl_entry<false>()
#endif

/* The same with the order chosen: EARLY lets the next kernel be scheduled
 * before this one's wait (its blocks then become resident as soon as room
 * allows, and a product among them starts its weights, which depend on
 * nothing, while this kernel and the ones before it run). Safe for any
 * kernel: a dependent's griddepcontrol.wait waits for this grid to complete,
 * which is after this grid's own wait, so the order of a plain stream holds
 * transitively; and the next kernel is launched only once every block of
 * this one has triggered, so all of them are resident: no block of this
 * kernel waits for room that a waiting dependent holds. The kernels between
 * the products take it when ctx.pdl_early is set (session
 * 17, bench/cuda/RESULTS.md: TSC_PDL_EARLY=1 turns it on; off by default). */
template <bool EARLY>
__device__ __forceinline__ void tsc_pdl_entry() {
    if (EARLY) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!EARLY) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

template <typename... KArgs, typename... Args>
static inline void tsc_launch(tsc_ctx *c, void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = c->pdl ? 1 : 0;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    c->nlaunch++;
    cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}

/* The persistent-grid kernels' launch plan (linear.cu, q4dp.cu, q4t.cu):
 * resident blocks an SM of kernel k (at least 1) with `threads` threads and
 * `smem` dynamic bytes, its dynamic shared-memory limit raised to smem_max
 * first (when above the default 48 KB). The runtime is asked once per
 * (device, kernel, threads, smem) and the answer remembered: uncaptured
 * passes (prompt chunks, verify blocks) launch every product anew, and the
 * occupancy query is a host call each time. Thread-safe (server workers). */
int tsc_blocks_per_sm(const tsc_ctx *c, const void *k, int threads, size_t smem, size_t smem_max);
/* The same for a kernel of the decode path (the one- and few-row products,
 * the MoE experts', the bf16 products): ctx.carve set on it first, once, where
 * that keeps its occupancy. Why one carveout: an SM runs blocks of one
 * shared-memory / L1 split at a time, so a kernel whose split differs from the
 * one its neighbour left waits for the SM to drain; the driver's choice
 * differed from kernel to kernel. Measured (s38-run7, s38-run8, H100, the
 * products at 50%: 132 KB of shared memory): 9B decode +1.9-2.0%, 35B-A3B-8L
 * +1.8-2.0%; 25% +0.9 / +0.1%, 65% +1.8 / -1.7%, 80% -0.2 / -2.5%, 0% -7 /
 * -5%; every kernel at 50% +1.0 / +1.8%. The prompt chunks' kernels (cuBLAS,
 * k_q4gemm, the chunk attention and GDN) keep the driver's choice: at 50%
 * the 9B's pp512 lost 2.6%. */
int tsc_blocks_per_sm_dec(const tsc_ctx *c, const void *k, int threads, size_t smem, size_t smem_max);

/* bytes rounded up to the 256-byte alignment every workspace area keeps */
inline size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

#define TSC_GUARD(c) do { if (!(c) || (c)->err_code) return; } while (0)
#define TSC_LAUNCHED(c, op) tsc_launched_((c), (op))

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide double sum of one value per thread (blockDim.x a multiple of 32,
 * <= 1024), in a fixed order: warp butterflies, then the warps' sums in warp
 * order by every thread. red holds 32 doubles. The result is returned to all
 * threads; the caller syncs before reusing red. */
__device__ __forceinline__ double block_sum_d(double v, double *red) {
    v = warp_sum_d(v);
    const int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) red[w] = v;
    __syncthreads();
    double s = 0;
    for (int i = 0; i < nw; i++) s += red[i];
    return s;
}

/* The sum of squares of a row v = x (+ add) of dim floats in double, for a
 * block of threads, when dim % 4 == 0 and the rows are 16-byte aligned, in
 * the order of the dp4a products' staging (q4dp_impl.cuh): the row as words
 * of 8 floats (the last one 4 when dim % 8 == 4), thread t adding words t,
 * t + blockDim.x, ... in order, each word's floats in order (explicit FMAs),
 * two words' loads in flight; then block_sum_d (returned to all threads). xo
 * (may be x) receives v when given. So a staging thread that holds its words
 * for the digits can sum them itself and get these bits (stage_norm_words):
 * one pass over x instead of two (session 27; the order was 4-float chunks
 * t, t + blockDim.x, ... before, which no staging thread holds). One
 * definition for tsc_add_rmsnorm and the fused products' staging, so that
 * their rows agree bit for bit. The caller syncs before reusing red. */
__device__ __forceinline__ void ss_word(const float (&v)[8], int cnt, double &ss) {
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (j < cnt) ss = __fma_rn((double)v[j], (double)v[j], ss);
}

__device__ __forceinline__ double row_ss8(const float *x, const float *add, float *xo, int dim, double *red) {
    const int nw = (dim + 7) >> 3, B = blockDim.x;
    double ss = 0;
    for (int w0 = threadIdx.x; w0 < nw; w0 += 2 * B) {
        float v[2][8], a[2][8];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int w = w0 + k * B, cnt = w < nw ? min(8, dim - 8 * w) : 0;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const bool on = 4 * h < cnt;
                const float4 p = on ? ((const float4 *)x)[2 * w + h] : make_float4(0.f, 0.f, 0.f, 0.f);
                const float4 q = on && add ? ((const float4 *)add)[2 * w + h] : make_float4(0.f, 0.f, 0.f, 0.f);
                v[k][4 * h] = p.x, v[k][4 * h + 1] = p.y, v[k][4 * h + 2] = p.z, v[k][4 * h + 3] = p.w;
                a[k][4 * h] = q.x, a[k][4 * h + 1] = q.y, a[k][4 * h + 2] = q.z, a[k][4 * h + 3] = q.w;
            }
        }
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int w = w0 + k * B, cnt = w < nw ? min(8, dim - 8 * w) : 0;
            if (!cnt) continue;
            if (add)
#pragma unroll
                for (int j = 0; j < 8; j++) v[k][j] = __fadd_rn(v[k][j], a[k][j]);
            if (xo)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    if (4 * h < cnt)
                        ((float4 *)xo)[2 * w + h] = make_float4(v[k][4 * h], v[k][4 * h + 1], v[k][4 * h + 2], v[k][4 * h + 3]);
            ss_word(v[k], cnt, ss);
        }
    }
    return block_sum_d(ss, red);
}

/* x / (1 + e^-x), the CPU reference's form (expf, IEEE division). */
__device__ __forceinline__ float silu_f(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float sigmoid_f(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

/* The element arithmetic the fused products (q4dp.cu) must share with the
 * kernels they replace, so that fused and unfused rows agree bit for bit:
 * 1 / rms of a row from its double sum of squares, a normed element, a
 * SwiGLU element (tsc_add_rmsnorm, tsc_silu_mul and the fused staging all
 * use these). */
__device__ __forceinline__ float rms_inv(double ss, int dim, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / dim), eps)));
}
__device__ __forceinline__ float norm_mul(float v, float r, float w) { return __fmul_rn(__fmul_rn(v, r), w); }
__device__ __forceinline__ float silu_mul_f(float g, float u) { return __fmul_rn(silu_f(g), u); }

/* x's digits for the dp4a products (q4dp_impl.cuh's stage_word, and the GDN
 * step's out_proj digits, gdn.cu's gdn_digits, which must give the same
 * bytes): a group's scale sx = m / L from its largest |x| m, and each x as
 * round(x * L / m) clamped to [-L, L] (0 for an all-zero group). */
__device__ __forceinline__ void dig_scale(float m, float L, float &sx, float &inv) {
    sx = __fdiv_rn(m, L);
    inv = m > 0.f ? __fdiv_rn(L, m) : 0.f;
}
__device__ __forceinline__ int dig_round(float x, float inv, float L) {
    return __float2int_rn(fminf(fmaxf(__fmul_rn(x, inv), -L), L));
}

/* The digits' limit for ND digit bytes, their bytes for nr rows (the
 * digits, then a float2 a 32-column chunk), a word's 8 floats, and
 * stage_word (q4dp_impl.cuh's staging, k_stage_digits, and the MoE route's
 * digits: misc.cu) */
template <int ND> struct lim_t;
template <> struct lim_t<1> { static constexpr float L = 127.0f; };
template <> struct lim_t<2> { static constexpr float L = 32639.0f; };
template <> struct lim_t<3> { static constexpr float L = 8290000.0f; };

__host__ __device__ inline size_t stage_bytes(int nr, int nd, int cols) {
    return (size_t)nr * ((size_t)nd * (size_t)cols + (size_t)(cols / 32) * sizeof(float2));
}

__device__ __forceinline__ void load8(const float *p, float (&v)[8]) {
    const float4 a = __ldg((const float4 *)p), b = __ldg((const float4 *)p + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

/* One 8-column word of x row i (v, on: a real word) -> its digits in shared
 * memory (the layout: q4dp.cu's top comment). A group's words are consecutive threads of one
 * warp (group / 8 <= 32 of them, aligned), so its max is a shuffle tree;
 * every lane of the warp calls this (the shuffles). */
template <int ND, bool MM>
__device__ __forceinline__ void stage_word(const float (&v)[8], bool on, int i, int w, int nch, int gw, int4 *xd,
                                           float2 *xsb, int tst, int nt) {
    constexpr float L = lim_t<ND>::L;
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < 8; j++) m = fmaxf(m, fabsf(v[j]));
    for (int o = 1; o < gw; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sx, inv;
    dig_scale(m, L, sx, inv);
    int X[8], sum = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        X[j] = dig_round(v[j], inv, L);
        sum += X[j];
    }
    uint32_t dg[ND][8]; /* digit bytes, balanced: X = sum_d dg[d] * 256^d */
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int t = X[j];
#pragma unroll
        for (int d = 0; d < ND; d++) {
            const int dd = d == ND - 1 ? t : ((t + 128) & 255) - 128;
            dg[d][j] = (uint32_t)dd & 0xFFu;
            t = (t - dd) >> 8;
        }
    }
    /* the 4 words of a 32-column chunk are 4 consecutive, aligned threads
     * (MM: the sum over the whole group, its gw words) */
    if constexpr (MM) {
        for (int o = 1; o < gw; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    } else {
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    }
    if (on) {
        const int ch = w >> 2, comp = w & 3;
#pragma unroll
        for (int d = 0; d < ND; d++) {
            const uint32_t ev = dg[d][0] | dg[d][2] << 8 | dg[d][4] << 16 | dg[d][6] << 24;
            const uint32_t od = dg[d][1] | dg[d][3] << 8 | dg[d][5] << 16 | dg[d][7] << 24;
            ((uint32_t *)&xd[i * tst + 2 * d * nch + ch])[comp] = ev;
            ((uint32_t *)&xd[i * tst + (2 * d + 1) * nch + ch])[comp] = od;
        }
        if constexpr (MM) {
            if (w % gw == 0) xsb[(w / gw) * nt + i] = make_float2(sx, __fmul_rn(sx, (float)sum));
        } else if (comp == 0) {
            xsb[i * nch + ch] = make_float2(sx, __fmul_rn(sx, (float)sum));
        }
    }
}


__device__ __forceinline__ float bf16f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ float f16f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* A scale or bias element of dtype dt (F32, F16, BF16). */
__device__ __forceinline__ float load_s(const void *p, int dt, int64_t i) {
    if (dt == TS_DTYPE_BF16) return bf16f(((const uint16_t *)p)[i]);
    if (dt == TS_DTYPE_F16) return f16f(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* The GDN state a step kernel reads (*in) and writes (returned): conv_in ->
 * conv_state (S_in -> S), or, with the device parities, the selected buffer
 * of the pair in place (tsc.h, tsc_gdn_args: the engine's form). Kernels
 * call these after TSC_PDL_ENTRY: the parities are device memory. */
__device__ __forceinline__ float *tsc_gdn_conv_of(const tsc_gdn_args &a, const float **in) {
    if (a.sel) { /* the record's choice of both ends */
        float *d = a.sel[1] ? a.conv_alt : a.conv_state;
        *in = a.cont ? d : a.sel[0] ? a.conv_alt : a.conv_state;
        return d;
    }
    float *cs = a.par_conv && *a.par_conv ? a.conv_alt : a.conv_state;
    *in = a.conv_in ? a.conv_in : cs;
    return cs;
}
__device__ __forceinline__ float *tsc_gdn_state_of(const tsc_gdn_args &a, const float **in) {
    if (a.sel) {
        float *d = a.sel[3] ? a.S_alt : a.S;
        *in = a.cont ? d : a.sel[2] ? a.S_alt : a.S;
        return d;
    }
    float *S = a.par_S && *a.par_S ? a.S_alt : a.S;
    *in = a.S_in ? a.S_in : S;
    return S;
}
/* The rows a step kernel runs: n, or the device count's share of them
 * (tsc_gdn_args.n_dev). Uniform over the grid: a kernel that gets 0
 * returns at once in every block (no barrier is left waiting). */
__device__ __forceinline__ int tsc_gdn_rows(const tsc_gdn_args &a) {
    if (!a.n_dev) return a.n;
    const int r = *a.n_dev - a.n_base;
    return r < 0 ? 0 : r < a.n ? r : a.n;
}


/* ---- the trace build's timeline of every kernel (EXTRA_NVCC_FLAGS=-DTSC_TRACE) ----
 * Every kernel starts with TSC_ENTRY(E) (TSC_PDL_ENTRY is the same with E
 * false): in a normal build that is tsc_pdl_entry<E>(); in the trace build
 * it also records, for each block, the global timer at its entry, when its
 * PDL wait returns and when its thread 0 leaves the kernel (the scope's
 * destructor: early returns included), with the block, its SM and the
 * source line of the entry, into a ring of this translation unit's own (a
 * static device array: no relocatable device code needed). tsc_trace_reset
 * and tsc_trace_dump (q4dp.cu) reset and write every unit's ring through the
 * functions each registers at load (tsc_tr_register, ctx.cu), after the
 * products' own trace, as "K file line block sm t_entry t_release t_end"
 * lines (bench/cuda/trace_view.py --kernels reads them). Why: session 19
 * could time the kernels between the products inside the graph only by
 * leaving them out of the step (cuda_bench CB_ATTN / CB_GDN). */
#ifdef TSC_TRACE
#include <stdlib.h>
struct tsc_tr_rec {
    unsigned line, blk, sm, pad;
    unsigned long long t0, t1, t2;
};
constexpr unsigned TSC_TR_N = 1u << 19;
static __device__ tsc_tr_rec tsc_tr_ring[TSC_TR_N];
static __device__ unsigned tsc_tr_count;
__device__ __forceinline__ unsigned long long tsc_tr_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
struct tsc_tr_scope {
    unsigned long long t0, t1;
    unsigned line;
    __device__ explicit tsc_tr_scope(unsigned l) : t1(0), line(l) { t0 = tsc_tr_now(); }
    __device__ void released() { t1 = tsc_tr_now(); }
    __device__ ~tsc_tr_scope() {
        if (threadIdx.x | threadIdx.y | threadIdx.z) return;
        const unsigned long long t2 = tsc_tr_now();
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        const unsigned i = atomicAdd(&tsc_tr_count, 1u);
        if (i < TSC_TR_N) {
            tsc_tr_rec &r = tsc_tr_ring[i];
            r.line = line, r.blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), r.sm = sm, r.pad = 0;
            r.t0 = t0, r.t1 = t1, r.t2 = t2;
        }
    }
};
#define TSC_ENTRY(E)                    \
    tsc_tr_scope tsc_tr_scope_(__LINE__); \
    tsc_pdl_entry<E>();                 \
    tsc_tr_scope_.released()
/* each unit's reset and dump, registered at load (ctx.cu keeps the list) */
typedef void (*tsc_tr_reset_fn)(void);
typedef int (*tsc_tr_dump_fn)(FILE *f);
int tsc_tr_register(tsc_tr_reset_fn r, tsc_tr_dump_fn d, const char *file);
void tsc_tr_reset_all(void);
int tsc_tr_dump_all(FILE *f);
/* A device ring's count put back to 0, and its records read back: *n of
 * them (at most the ring's size) in a malloc'd array the caller frees; NULL
 * with *n 0 when empty, -1 on an error. The kernel timeline's ring below
 * and gdn.cu's phases share them. */
static inline void tsc_tr_zero(const unsigned &count) {
    const unsigned z = 0;
    cudaMemcpyToSymbol(count, &z, sizeof z);
}
template <typename R, unsigned N>
static R *tsc_tr_fetch(const unsigned &count, const R (&ring)[N], int *n) {
    unsigned c = 0;
    *n = -1;
    if (cudaMemcpyFromSymbol(&c, count, sizeof c) != cudaSuccess) return NULL;
    if (c > N) c = N;
    *n = 0;
    if (!c) return NULL;
    R *r = (R *)malloc(sizeof(R) * c);
    if (!r || cudaMemcpyFromSymbol(r, ring, sizeof(R) * c) != cudaSuccess) {
        free(r);
        *n = -1;
        return NULL;
    }
    *n = (int)c;
    return r;
}
static void tsc_tr_reset_here(void) { tsc_tr_zero(tsc_tr_count); }
static int tsc_tr_dump_here(FILE *f) {
    int n;
    tsc_tr_rec *r = tsc_tr_fetch(tsc_tr_count, tsc_tr_ring, &n);
    for (int i = 0; i < n; i++)
        fprintf(f, "K %s %u %u %u %llu %llu %llu\n", __BASE_FILE__, r[i].line, r[i].blk, r[i].sm, r[i].t0, r[i].t1, r[i].t2);
    free(r);
    return n;
}
__attribute__((unused)) static const int tsc_tr_registered_ = tsc_tr_register(tsc_tr_reset_here, tsc_tr_dump_here, __BASE_FILE__);
#else
#define TSC_ENTRY(E) tsc_pdl_entry<E>()
#endif
#endif
