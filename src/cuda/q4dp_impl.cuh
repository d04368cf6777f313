/* q4dp_impl.cuh: what the 4-bit dp4a / mma product files share, private
 * to each file that includes it (everything here is in an anonymous
 * namespace: every including file compiles its own copy, so no device
 * symbol crosses files): the launch's arguments (dp_args), x's digit
 * staging (stage_word, stage_x; k_stage_digits and stage_once, "Digits
 * once"), the fused modes' outputs, the dp4a and mma building blocks, the
 * cp.async helpers, the persistent launch (launch_grid).
 *
 * q4dp.cu: k_q4dp, k_q4dp_as, k_q4mm, the MoE experts, the entry points
 * (q4dp.cuh); q4grp.cu: the group numerics (k_q4g, k_q4gm), called from
 * q4dp_linear_staged through q4g_takes / q4g_linear below. The numerics
 * and the measurements are described where the kernels are. */
#ifndef TS_CUDA_Q4DP_IMPL_CUH
#define TS_CUDA_Q4DP_IMPL_CUH

#include "cuda/common.cuh"
#include "cuda/q4dp.cuh"
#include "cuda/rows.cuh"

#include <stdlib.h>
#include <string.h>

/* The group numerics (q4grp.cu): whether they take the launch's weights
 * (TSC_Q4G=1 and the shapes; nd: x's digits), and q4dp_linear_staged's
 * products through them. */
bool q4g_takes(const tsc_weight *const *w, int nw, int nd);
void q4g_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, int xm, const float *x, const float *add,
                const float *norm_w, const float *u, float eps, float *x_out, float *y_out, unsigned *bar,
                float *const *y, int n);

namespace {
constexpr int R = 4;     /* output rows per warp */
constexpr int WARPS = 8; /* warps per block */
constexpr size_t SMEM_MAX = 160 * 1024; /* dynamic shared memory a block may stage */

struct dp_w {
    const uint8_t *data;
    const void *scales, *biases;
    float *y;
    int64_t rows;
    int ks;   /* warps splitting the columns */
    int blk0; /* first virtual block of this weight */
    int sv;   /* k_q4mm: the scales and biases may be read UG groups a load (aligned) */
};

struct dp_args {
    dp_w w[TSC_LIN_MAX];
    int nw, sdt, group, lg;
    int cols;
    const float *x;
    int nvb; /* virtual blocks over all weights */
    /* the activation made while staging (Q4DP_XM_*): norm: v = x (+ add),
     * staged RMSNorm(v) * normw, then x_out = v (when add), y_out = the normed
     * rows; swiglu: staged silu(x) * u, y_out = that. x_out / y_out may
     * alias x: block 0 writes them once every block has staged (bar). */
    int xm;
    const float *add, *normw, *u;
    float eps;
    float *x_out, *y_out;
    unsigned *bar;
    int late; /* write_outputs after the products (1) or before (0) */
    int nr;   /* x rows of the launch (k_q4mm; k_q4dp has them as NR) */
    /* k_q4dp: x's digits staged once by k_stage_digits in this layout (the
     * shared memory's, stage_bytes(NR, ND, cols)), copied in instead of
     * made; NULL: each block makes them (see "Digits once") */
    const int4 *dg;
    int as; /* k_q4dp_as's ring depth (weights through a cp.async ring; q4dp.cu), 0: k_q4dp */
#ifdef TSC_TRACE
    int tid; /* the launch's slot in the trace (q4dp_trace_*) */
#endif
};

/* 16 bytes of weights, streamed once: not kept in L1 */
__device__ __forceinline__ uint4 ld_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
/* a scale or bias element's bits, converted where it is used (so that the
 * load is not waited for at the load) */
__device__ __forceinline__ uint32_t ld_sraw(const void *p, int dt, int64_t i) {
    if (dt == TS_DTYPE_F32) return __ldg((const unsigned int *)p + i);
    return __ldg((const unsigned short *)p + i);
}
__device__ __forceinline__ float sraw_f(uint32_t v, int dt) {
    if (dt == TS_DTYPE_BF16) return __uint_as_float(v << 16);
    if (dt == TS_DTYPE_F16) return __half2float(__ushort_as_half((unsigned short)v));
    return __uint_as_float(v);
}
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }


/* Norm mode: each row's 1 / rms into rnorm[NR], with tsc_add_rmsnorm's
 * arithmetic (v = x + add; row_ss8's sum of squares over the 256 threads),
 * so that the staged rows and the rows written have its bits. */
__device__ __forceinline__ void row_norms(const dp_args &a, float *rnorm, int nr) {
    __shared__ double red[32];
    for (int i = 0; i < nr; i++) {
        const double ss = row_ss8(a.x + (int64_t)i * a.cols, a.add ? a.add + (int64_t)i * a.cols : NULL, NULL, a.cols, red);
        if (threadIdx.x == 0) rnorm[i] = rms_inv(ss, a.cols, a.eps);
        __syncthreads(); /* red is reused by the next row */
    }
}

/* The mode's outputs of nr rows, by the threads of one block: x_out = v
 * (when add), y_out = the normed rows (NORM) or silu(x) * u (SWIGLU). */
__device__ __forceinline__ void write_rows(const dp_args &a, const float *rnorm, int nr) {
    for (int i = 0; i < nr; i++)
        for (int j = threadIdx.x; j < a.cols; j += blockDim.x) {
            const int64_t o = (int64_t)i * a.cols + j;
            if (a.xm == Q4DP_XM_NORM) {
                float v = a.x[o];
                if (a.add) v = __fadd_rn(v, a.add[o]);
                if (a.add && a.x_out) a.x_out[o] = v;
                if (a.y_out) a.y_out[o] = norm_mul(v, rnorm[i], a.normw[j]);
            } else if (a.y_out) {
                a.y_out[o] = silu_mul_f(a.x[o], a.u[o]);
            }
        }
}

/* ---- Norm mode's staging in one pass (session 27) ----
 *
 * Why. A normed one-row product's 264 blocks each staged x in two passes:
 * row_norms (x and add from L2, the block's sum of squares), then stage_x
 * (x and add again, the norm weights, the digits), and block 0 wrote the
 * outputs reading all three once more: ~80 KB from L2 a block, 21 MB a 9B
 * in_proj launch, with two L2 round trips and the reduction in sequence on
 * the step's critical path (the trace of session 26: normed staging 3.5-3.7
 * us a launch, plain 1.6; 64 normed launches a 9B step). Here a thread
 * loads its two words of x and add once, sums their squares in row_ss8's
 * order (the staging's words: thread t holds words t and t + blockDim.x,
 * which row_ss8 sums in that order, so the bits are the two-pass form's),
 * and makes the digits of the normed words from its registers; the norm
 * weights' words (f) are loaded by the caller before its PDL wait (they
 * depend on no kernel); the outputs are written from the registers too.
 * Rows of at most 2 words a thread (cols <= 16 * blockDim.x: 4096 at 256
 * threads; the fused products' cols are multiples of 32); wider rows keep
 * the two passes. Every lane of the block calls it (the shuffles, the
 * block sum); red: 32 doubles of shared memory. v (x + add) and u (the
 * normed row) stay in the caller's registers for the outputs.
 * Measured (s27-run1, H200, against the two passes in the same binary,
 * TSC_Q4DP_N1=0): cuda_bench's 9B one-row step 2.032-2.036 -> 1.952-1.958
 * ms (64 normed launches: ~1.25 us each), its 4-row verify 2.940-2.947 ->
 * 2.848-2.856 (k_stage_digits' norm passes), 16 rows 9.22 -> 9.07-9.08. */
__host__ __device__ inline bool norm1_fits(int cols) { return cols <= 16 * WARPS * 32; }

__device__ __forceinline__ void load_norm_words(const float *normw, int cols, float (&f)[2][8]) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int w = (int)threadIdx.x + k * (int)blockDim.x;
        if (w < (cols >> 3)) load8(normw + 8 * w, f[k]);
        else
#pragma unroll
            for (int j = 0; j < 8; j++) f[k][j] = 0.f;
    }
}

template <int ND, bool G>
__device__ __forceinline__ void stage_norm_words(const float *x, const float *add, const float (&f)[2][8], int cols,
                                                 float eps, int i, int gw, int4 *xd, float2 *xsb, int tst, int nt,
                                                 double *red, float (&v)[2][8], float (&u)[2][8]) {
    const int nw8 = cols >> 3, nch = cols >> 5;
    float e[2][8];
#pragma unroll
    for (int k = 0; k < 2; k++) { /* every load in flight before any is used */
        const int w = (int)threadIdx.x + k * (int)blockDim.x;
#pragma unroll
        for (int j = 0; j < 8; j++) v[k][j] = e[k][j] = 0.f;
        if (w < nw8) {
            load8(x + 8 * w, v[k]);
            if (add) load8(add + 8 * w, e[k]);
        }
    }
    double ss = 0;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int w = (int)threadIdx.x + k * (int)blockDim.x;
        if (w >= nw8) continue;
        if (add)
#pragma unroll
            for (int j = 0; j < 8; j++) v[k][j] = __fadd_rn(v[k][j], e[k][j]);
        ss_word(v[k], 8, ss);
    }
    const float r = rms_inv(block_sum_d(ss, red), cols, eps);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int w = (int)threadIdx.x + k * (int)blockDim.x;
        const bool on = w < nw8;
#pragma unroll
        for (int j = 0; j < 8; j++) u[k][j] = on ? norm_mul(v[k][j], r, f[k][j]) : 0.f;
        stage_word<ND, G>(u[k], on, i, on ? w : 0, nch, gw, xd, xsb, tst, nt);
    }
}

/* The outputs of stage_norm_words' row by the threads that hold them:
 * x_out = v (when add), y_out = u. */
__device__ __forceinline__ void write_norm_words(int cols, const float *add, float *x_out, float *y_out,
                                                 const float (&v)[2][8], const float (&u)[2][8]) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int w = (int)threadIdx.x + k * (int)blockDim.x;
        if (w >= (cols >> 3)) continue;
        if (add && x_out) {
            *(float4 *)(x_out + 8 * w) = make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
            *(float4 *)(x_out + 8 * w + 4) = make_float4(v[k][4], v[k][5], v[k][6], v[k][7]);
        }
        if (y_out) {
            *(float4 *)(y_out + 8 * w) = make_float4(u[k][0], u[k][1], u[k][2], u[k][3]);
            *(float4 *)(y_out + 8 * w + 4) = make_float4(u[k][4], u[k][5], u[k][6], u[k][7]);
        }
    }
}

/* The mode's outputs (x_out, y_out may alias x): every block arrives on
 * bar once it has staged x (arrive_outputs); one block, once all have
 * arrived, writes them (write_outputs). Which block and when: the last
 * block (it has the fewest virtual blocks when they do not divide evenly),
 * after its products (a.late, the default: by then every block has long
 * staged, so nobody waits), or block 0 before its products (TSC_Q4DP_LATEW=0:
 * block 0 then starts its products only after the slowest block's staging
 * and the writes, and the launch ends when block 0 does). */
__device__ __forceinline__ void arrive_outputs(const dp_args &a) {
    if (threadIdx.x == 0) atomicAdd(a.bar, 1u);
}

__device__ __forceinline__ void write_outputs(const dp_args &a, const float *rnorm, int nr) {
    if (blockIdx.x != (a.late ? gridDim.x - 1 : 0)) return;
    if (threadIdx.x == 0) {
        while (atomicOr(a.bar, 0u) < gridDim.x) __nanosleep(64);
        atomicExch(a.bar, 0u); /* every block has arrived: ready for the next launch */
    }
    __syncthreads();
    write_rows(a, rnorm, nr);
}

/* Where stage_x reads x row i's (and u's) columns col..col + 7: one array
 * here; q4dp_moe's down with the shared expert reads two (x_at(dx_args)) */
__device__ __forceinline__ const float *x_at(const dp_args &a, int i, int col) { return a.x + (int64_t)i * a.cols + col; }
__device__ __forceinline__ const float *u_at(const dp_args &a, int i, int col) { return a.u + (int64_t)i * a.cols + col; }

/* x rows [NR][cols] f32 -> digits in shared memory, one thread per 8-column
 * word; the loads of SB words a thread are issued before the first is
 * used (x comes from L2: one latency a batch, not one a word). */
template <int ND, int SB, bool MM = false, typename A>
__device__ __forceinline__ void stage_x(const A &a, int nrows, int4 *xd, float2 *xsb, const float *rnorm, int tst = 0,
                                        int nt = 0) {
    if (!MM) tst = 2 * ND * (a.cols >> 5);
    const int nch = a.cols >> 5, nw8 = a.cols >> 3, gw = a.group >> 3;
    const int total = nrows * nw8;
    for (int base = 0; base < total; base += SB * blockDim.x) { /* uniform trip count: every lane shuffles */
        float v[SB][8];
        bool on[SB];
        int iw[SB], ww[SB];
#pragma unroll
        for (int k = 0; k < SB; k++) {
            const int idx = base + k * (int)blockDim.x + (int)threadIdx.x;
            on[k] = idx < total;
            iw[k] = on[k] ? idx / nw8 : 0, ww[k] = on[k] ? idx - iw[k] * nw8 : 0;
            if (on[k]) {
                load8(x_at(a, iw[k], 8 * ww[k]), v[k]);
                if (a.xm != Q4DP_XM_PLAIN) {
                    const int64_t o = (int64_t)iw[k] * a.cols + 8 * ww[k];
                    float e[8], f[8];
                    if (a.xm == Q4DP_XM_NORM) {
                        if (a.add) {
                            load8(a.add + o, e);
#pragma unroll
                            for (int j = 0; j < 8; j++) v[k][j] = __fadd_rn(v[k][j], e[j]);
                        }
                        load8(a.normw + 8 * ww[k], f);
                        const float r = rnorm[iw[k]];
#pragma unroll
                        for (int j = 0; j < 8; j++) v[k][j] = norm_mul(v[k][j], r, f[j]);
                    } else {
                        load8(u_at(a, iw[k], 8 * ww[k]), e);
#pragma unroll
                        for (int j = 0; j < 8; j++) v[k][j] = silu_mul_f(v[k][j], e[j]);
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++) v[k][j] = 0.f;
            }
        }
#pragma unroll
        for (int k = 0; k < SB; k++) stage_word<ND, MM>(v[k], on[k], iw[k], ww[k], nch, gw, xd, xsb, tst, nt);
    }
}

__device__ __forceinline__ uint32_t comp_of(const int4 &v, int k) {
    return (uint32_t)(k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w);
}

/* One lane chunk of 32 columns: D = sum_c q_c X_c from the nibbles (lo: the
 * even columns', hi: the odd ones') and the staged digits xq, exact in
 * int32 per digit, the top digit joined by one FMA (q4dp.cu's top comment). */
template <int ND>
__device__ __forceinline__ float chunk_dot(const uint32_t (&lo)[4], const uint32_t (&hi)[4], const int4 (&xq)[2 * ND]) {
    int A[ND];
#pragma unroll
    for (int d = 0; d < ND; d++) {
        int t = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            t = __dp4a((int)lo[k], (int)comp_of(xq[2 * d], k), t);
            t = __dp4a((int)hi[k], (int)comp_of(xq[2 * d + 1], k), t);
        }
        A[d] = t;
    }
    if constexpr (ND == 3) return __fmaf_rn((float)A[2], 65536.0f, (float)(A[1] * 256 + A[0]));
    else if constexpr (ND == 2) return (float)(A[1] * 256 + A[0]);
    else return (float)A[0];
}

/* acc += s * sx * D + b * sx * sum X, in the order of q4dp.cu's top comment */
__device__ __forceinline__ float chunk_acc(float sc, float bc, float2 sb, float D, float acc) {
    return __fmaf_rn(__fmul_rn(sc, sb.x), D, __fmaf_rn(bc, sb.y, acc));
}

/* A lane's 16 weight bytes (32 nibbles) as the even columns' nibbles (lo)
 * and the odd ones' (hi), a byte each, for chunk_dot */
__device__ __forceinline__ void nibbles(const uint4 &v, uint32_t (&lo)[4], uint32_t (&hi)[4]) {
    const uint32_t q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) lo[k] = q[k] & 0x0F0F0F0Fu, hi[k] = (q[k] >> 4) & 0x0F0F0F0Fu;
}

/* One lane chunk of R weight rows (nibbles, raw scale and bias bits)
 * against x row i's digits of that chunk (xq) and its (sx, sx * sum X):
 * acc[r][i] += the chunk's terms (chunk_dot, chunk_acc). */
template <int NR, int ND>
__device__ __forceinline__ void row_terms(const uint32_t (&lo)[R][4], const uint32_t (&hi)[R][4], const uint32_t (&sr)[R],
                                          const uint32_t (&br)[R], int sdt, const int4 (&xq)[2 * ND], float2 sb,
                                          float (&acc)[R][NR], int i) {
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float D = chunk_dot<ND>(lo[r], hi[r], xq);
        const float sc = sraw_f(sr[r], sdt), bc = sraw_f(br[r], sdt);
        acc[r][i] = chunk_acc(sc, bc, sb, D, acc[r][i]);
    }
}

/* One lane chunk (ch) of R weight rows against the NR staged x rows, x row
 * by x row (row_terms).
 * k_q4dp and k_q4dp_as share it, and k_q4dp's DX form calls row_terms with
 * the digits it loaded with the weights: the same operations in the same
 * order, so the same bits. */
template <int NR, int ND>
__device__ __forceinline__ void rows_dot(const uint32_t (&lo)[R][4], const uint32_t (&hi)[R][4], const uint32_t (&sr)[R],
                                         const uint32_t (&br)[R], int sdt, const int4 *xd, const float2 *xsb, int nch,
                                         int ch, float (&acc)[R][NR]) {
#pragma unroll
    for (int i = 0; i < NR; i++) {
        int4 xq[2 * ND];
#pragma unroll
        for (int q = 0; q < 2 * ND; q++) xq[q] = xd[(i * 2 * ND + q) * nch + ch];
        row_terms<NR, ND>(lo, hi, sr, br, sdt, xq, xsb[i * nch + ch], acc, i);
    }
}

/* k_q4dp's form of write_outputs (NR a constant; block 0 writes the
 * outputs before its products, its wait and the arrival in one place). Why
 * two forms: with write_outputs above and the late writes, ptxas gave k_q4dp<1, 1, 2>
 * 104 registers against these forms' 116, and the 9B products ran 10-17%
 * slower (cuda_bench, session 12: head 166 against 142 us, step 2.443
 * against 2.226 ms), while the late writes gained nothing in the engine
 * (364.8 tok/s against 367.4 with TSC_Q4DP_LATEW=0). k_q4mm keeps the
 * late form. */
__device__ __forceinline__ bool arrive_b0(const dp_args &a) {
    if (threadIdx.x == 0) {
        atomicAdd(a.bar, 1u);
        if (blockIdx.x == 0) {
            while (atomicOr(a.bar, 0u) < gridDim.x) __nanosleep(64);
            atomicExch(a.bar, 0u); /* every block has arrived: ready for the next launch */
        }
    }
    if (blockIdx.x != 0) return false;
    __syncthreads();
    return true; /* block 0, every block staged: the outputs may be written */
}

template <int NR>
__device__ __forceinline__ void write_outputs_b0(const dp_args &a, const float *rnorm) {
    if (arrive_b0(a)) write_rows(a, rnorm, NR);
}

/* The digits k_stage_digits made (dg, bytes of them) into a block's
 * shared memory: 16-byte words, the float2 tail when bytes is not a
 * multiple of 16 (copy_digits; the caller's barrier follows), or with the
 * barrier (copy_staged, a.dg's). */
__device__ __forceinline__ void copy_digits(const int4 *dg, int4 *sm, size_t bytes) {
    const int n8 = (int)(bytes >> 3);
    for (int j = threadIdx.x; j < (n8 >> 1); j += blockDim.x) sm[j] = __ldcg(dg + j);
    if ((n8 & 1) && threadIdx.x == 0) ((float2 *)sm)[n8 - 1] = __ldcg((const float2 *)dg + n8 - 1);
}
__device__ __forceinline__ void copy_staged(const dp_args &a, int4 *sm, size_t bytes) {
    /* copy_digits' loop written out: through it, ptxas scheduled one k_q4dp
     * instance (16-bit x, 8 rows) differently (text_cmp), so it stays so */
    const int n8 = (int)(bytes >> 3);
    for (int j = threadIdx.x; j < (n8 >> 1); j += blockDim.x) sm[j] = __ldcg(a.dg + j);
    if ((n8 & 1) && threadIdx.x == 0) ((float2 *)sm)[n8 - 1] = __ldcg((const float2 *)a.dg + n8 - 1);
    __syncthreads();
}

__device__ __forceinline__ void cp_async16(void *s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async4(void *s, const void *g) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"((unsigned)__cvta_generic_to_shared(s)), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* every group but the newest N complete */
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }


constexpr int MR = 16; /* output rows per warp: the mma's M */

template <int WPT>
__device__ __forceinline__ void ld_words(const uint8_t *p, uint32_t (&v)[WPT]) {
    if constexpr (WPT == 1) {
        asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v[0]) : "l"(p));
    } else if constexpr (WPT == 2) {
        asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v[0]), "=r"(v[1]) : "l"(p));
    } else {
        const uint4 q = ld_stream(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
}

__device__ __forceinline__ void mma_u4s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* WPT consecutive digit words from shared memory in one load (aligned:
 * a thread's words start at a multiple of WPT) */
template <int WPT>
__device__ __forceinline__ void lds_words(const uint32_t *p, uint32_t (&v)[WPT]) {
    if constexpr (WPT == 1) {
        v[0] = *p;
    } else if constexpr (WPT == 2) {
        const uint2 q = *(const uint2 *)p;
        v[0] = q.x, v[1] = q.y;
    } else {
        const uint4 q = *(const uint4 *)p;
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    }
}

/* the staged digits' per-row stride in int4 (k_q4mm): the digit planes of a
 * row (2 ND nch int4, ND = 1) padded so that consecutive rows start 8 words
 * apart in the banks (the B loads of 8 rows x 4 threads: at most 2-way) */
__host__ __device__ inline int mm_tstride(int nch) {
    const int base = 2 * nch; /* int4 */
    return base + (((8 - (base * 4) % 32) + 32) % 32) / 4;
}
/* x rows a launch's scale pairs are laid out for: 8 or 16 */
__host__ __device__ inline int mm_nt(int nr) { return nr > 8 ? 16 : 8; }
__host__ __device__ inline int g_nt(int nr) { return nr == 1 ? 1 : mm_nt(nr); }
__host__ __device__ inline size_t g_stage_bytes(int nr, int cols, int group) {
    return (size_t)nr * mm_tstride(cols / 32) * 16 + (size_t)(cols / group) * g_nt(nr) * sizeof(float2);
}
/* The mma kernels' staging in their blocks (k_q4mm, k_q4gm: no digits made
 * once): x rows [0, nr) as digits in the mma layout (rows tst int4 apart,
 * the scale pairs [group][nt]), then, in the fused modes, the block's
 * arrival and (unless a.late) the outputs before the products. */
__device__ __forceinline__ void mm_stage_block(const dp_args &a, int nr, int4 *xd, float2 *xsb, const float *rnorm,
                                               int tst, int nt) {
    stage_x<1, 2, true>(a, nr, xd, xsb, rnorm, tst, nt);
    __syncthreads();
    if (a.xm != Q4DP_XM_PLAIN) {
        arrive_outputs(a);
        if (!a.late) write_outputs(a, rnorm, nr);
    }
}

/* ---- Digits once (TSC_Q4DP_DIG) ----
 *
 * Without it every block of a product makes x's digits itself: k_q4dp's
 * 264 blocks each read all of x and, in SwiGLU mode, evaluate silu (expf
 * and an IEEE division) on every element. Traced on the 9B step (cuda_bench
 * --trace, bench/cuda/RESULTS.md, session 16): from a block's PDL release
 * to its staged digits 8.1 us for the 12288-column down product (SwiGLU;
 * compute-bound: ~40 instructions an element, 264 times over), 3.6 us for
 * the normed 4096-column inputs, 1.5 us plain; 544 of the step's 2200 us,
 * and four times that for a 4-row verify pass. k_stage_digits makes them
 * once, before the product: a block per (256 words of a row) (one per row
 * in norm mode, whose sum of squares needs the whole row and whose outputs
 * may alias x), each word's digits by stage_word as the product's blocks
 * would (the same bits), the mode's outputs (x_out, y_out) written by the
 * thread that read the word; the product's blocks then copy the staged
 * bytes (one L2 round trip) and skip the output barrier. The cost moves to
 * one small launch (its gap ~0.5 us: PDL) whose few blocks leave the SMs to
 * the product's blocks, which become resident and start their weights
 * meanwhile. */
struct sd_args {
    int xm, cols, group;
    const float *x, *add, *normw, *u;
    float eps;
    float *x_out, *y_out;
    int4 *dg; /* stage_bytes(nr, ND, cols); G: g_stage_bytes(nr, cols, group) */
    int one;  /* norm mode in one pass where the row fits (q4dp_n1) */
};

/* G: the group numerics' layout (stage_word's MM form, 8-bit x only) */
template <int ND, bool E, bool G = false>
__global__ void __launch_bounds__(WARPS * 32) k_stage_digits(const __grid_constant__ sd_args a) {
    /* norm mode in one pass (stage_norm_words; one block a row): the norm
     * weights' words before the wait, they depend on no kernel */
    const bool one = a.one && a.xm == Q4DP_XM_NORM && norm1_fits(a.cols);
    float f[2][8];
    if (one) load_norm_words(a.normw, a.cols, f);
    TSC_ENTRY(E);
    const int i = blockIdx.y, nr = gridDim.y;
    const int nch = a.cols >> 5, nw8 = a.cols >> 3, gw = a.group >> 3, tst = G ? mm_tstride(nch) : 2 * ND * nch;
    const int64_t ro = (int64_t)i * a.cols;
    int4 *xd = a.dg;
    float2 *xsb = (float2 *)(a.dg + (size_t)nr * tst);
    __shared__ double red[32];
    if (one) {
        /* each thread writes only the words it read: x_out may alias x */
        float v[2][8], u[2][8];
        stage_norm_words<ND, G>(a.x + ro, a.add ? a.add + ro : NULL, f, a.cols, a.eps, i, gw, xd, xsb, tst,
                                G ? g_nt(nr) : 0, red, v, u);
        write_norm_words(a.cols, a.add, a.x_out ? a.x_out + ro : NULL, a.y_out ? a.y_out + ro : NULL, v, u);
        return;
    }
    float r = 0.f;
    if (a.xm == Q4DP_XM_NORM) {
        __shared__ float rn;
        /* row_norms' arithmetic (256 threads: the same sum order) */
        const double ss = row_ss8(a.x + ro, a.add ? a.add + ro : NULL, NULL, a.cols, red);
        if (threadIdx.x == 0) rn = rms_inv(ss, a.cols, a.eps);
        __syncthreads(); /* also: every thread has read x before any writes x_out */
        r = rn;
    }
    for (int base = blockIdx.x * blockDim.x; base < nw8; base += gridDim.x * blockDim.x) { /* uniform */
        const int w = base + (int)threadIdx.x;
        const bool on = w < nw8;
        float v[8];
        if (on) {
            const int64_t o = ro + 8 * w;
            load8(a.x + o, v);
            if (a.xm == Q4DP_XM_NORM) {
                float e[8], f[8];
                if (a.add) {
                    load8(a.add + o, e);
#pragma unroll
                    for (int j = 0; j < 8; j++) v[j] = __fadd_rn(v[j], e[j]);
                    if (a.x_out) {
                        *(float4 *)(a.x_out + o) = make_float4(v[0], v[1], v[2], v[3]);
                        *(float4 *)(a.x_out + o + 4) = make_float4(v[4], v[5], v[6], v[7]);
                    }
                }
                load8(a.normw + 8 * w, f);
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = norm_mul(v[j], r, f[j]);
            } else if (a.xm == Q4DP_XM_SWIGLU) {
                float e[8];
                load8(a.u + o, e);
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = silu_mul_f(v[j], e[j]);
            }
            if (a.xm != Q4DP_XM_PLAIN && a.y_out) {
                *(float4 *)(a.y_out + o) = make_float4(v[0], v[1], v[2], v[3]);
                *(float4 *)(a.y_out + o + 4) = make_float4(v[4], v[5], v[6], v[7]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = 0.f;
        }
        stage_word<ND, G>(v, on, i, on ? w : 0, nch, gw, xd, xsb, tst, G ? g_nt(nr) : 0);
    }
}

/* a persistent grid of kernel k over nvb virtual blocks: as many blocks as
 * are resident at smem bytes of staging, at most nvb */
template <typename A>
int launch_grid(tsc_ctx *c, void (*k)(A), int nvb, size_t smem, const A &a, int cap = 0, size_t smem_max = SMEM_MAX) {
    int per_sm = tsc_blocks_per_sm_dec(c, (const void *)k, WARPS * 32, smem, smem_max);
    if (cap > 0 && per_sm > cap) per_sm = cap;
    const int grid = nvb < per_sm * c->n_sm ? nvb : per_sm * c->n_sm;
    tsc_launch(c, k, dim3(grid), dim3(WARPS * 32), smem, a);
    return grid;
}

/* KS and the other benchmark switches: an integer from the environment, or dflt */
inline int ks_env(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

/* k_q4dp's blocks an SM: 2 (its occupancy; the default) or 1
 * (TSC_Q4DP_BPS=1: room on every SM for the next launch's block, which
 * TSC_Q4DP_PRE=1 lets load its first weights before its wait). A
 * benchmark switch, read once: KS, and so a row's bits, depend on it (the
 * rule counts the slots), the same for every row count of a process. */
inline int q4dp_bps(void) {
    static int v = 0;
    if (!v) v = ks_env("TSC_Q4DP_BPS", 2) == 1 ? 1 : 2;
    return v;
}
/* Whether k_stage_digits makes a pass's digits once (see "Digits once"):
 * SwiGLU passes always (per block that staging was compute-bound: the 9B
 * step 2.20 -> 2.05 ms, bench/cuda/RESULTS.md session 16), normed and plain
 * passes of several rows (each block staged every row: 4 rows 4.28 -> 3.25
 * ms), and the one-row plain ones since the product reads the digits where
 * they lie (k_q4dp's DX form, session 32: the launch and DX's first weights
 * before the wait beat 1.5 us of staging in every block; H200, s32-run2,
 * with DX: the 9B 512.9 -> 521.0 tok/s, the 0.8B 1,427 -> 1,457, the
 * default model 4,306 -> 4,449; TSC_Q4DP_P1=0 stages them in the blocks
 * again), not the one-row normed ones (their per-block staging is latency,
 * ~2.3 us, which the extra launch does not beat: one-row norm once cost the
 * step 0.14 ms in session 16, 0.09 ms with DX's first form in s32-run1). Also for narrow SwiGLU passes: staging the
 * 35B-A3B's shared-expert down (512 columns) in its blocks instead saved
 * its k_stage_digits launch (85 -> 77 kernels a step) but cost decode 0.6-2.7%
 * (35B-A3B-8L 1,636 against 1,646 tok/s, the default model 3,367 against
 * 3,461; bench/cuda/RESULTS.md, session 21, call 5): the silu, exp and
 * division of every element in each of 64 blocks outweigh the launch.
 * (Since session 22 that down is the routed down's last slot, q4dp_moe's
 * shared form; TSC_MOE_SHARED_SLOT=0 brings the pass back.)
 * TSC_Q4DP_DIG=mask forces the modes for every row count (bit 1 << xm: 1
 * plain, 2 norm, 4 SwiGLU; 0 none), a benchmark switch. A row's bits are
 * the same either way. */
inline bool dig_takes(int xm, int nr) {
    static int v = -2, p1 = -1;
    if (v == -2) v = ks_env("TSC_Q4DP_DIG", -1), p1 = ks_env("TSC_Q4DP_P1", 1) != 0;
    if (v >= 0) return v >> xm & 1;
    return xm == Q4DP_XM_SWIGLU || nr > 1 || (xm == Q4DP_XM_PLAIN && p1);
}

/* The one-pass normed staging (stage_norm_words) where the row fits, or
 * TSC_Q4DP_N1=0: the two passes everywhere (k_q4dp's row_norms then
 * stage_x, k_stage_digits' row_ss8 then its loop), the reference form for
 * an A/B in one binary (the bits are the same); read once. Measured
 * (s27-run1, cuda_bench 9B): the one-row step 2.032-2.036 ms with the two
 * passes, 1.952-1.958 with one (block 0 writing the outputs once every
 * block has staged, as k_q4dp's other forms do), 1.976-1.984 with the last
 * block to stage writing them instead (no block waits, but every block
 * pays a barrier to learn whether it is the last: removed). */
inline bool q4dp_n1(void) {
    static int v = -1;
    if (v < 0) v = ks_env("TSC_Q4DP_N1", 1) != 0;
    return v;
}

/* k_stage_digits over nr rows of s (a block per row in norm mode, else per
 * 256 words of a row), ND = nd (0: the group numerics' layout, 8-bit x) */
inline void launch_stage_digits(tsc_ctx *c, const sd_args &s, int nr, int nd) {
    const int per_row = s.xm == Q4DP_XM_NORM ? 1 : (s.cols / 8 + WARPS * 32 - 1) / (WARPS * 32);
    const dim3 grid(per_row, nr);
    const bool e = c->pdl_early;
    switch (nd) {
    case 0: tsc_launch(c, e ? k_stage_digits<1, true, true> : k_stage_digits<1, false, true>, grid, dim3(WARPS * 32), 0, s); break;
    case 1: tsc_launch(c, e ? k_stage_digits<1, true> : k_stage_digits<1, false>, grid, dim3(WARPS * 32), 0, s); break;
    case 2: tsc_launch(c, e ? k_stage_digits<2, true> : k_stage_digits<2, false>, grid, dim3(WARPS * 32), 0, s); break;
    default: tsc_launch(c, e ? k_stage_digits<3, true> : k_stage_digits<3, false>, grid, dim3(WARPS * 32), 0, s); break;
    }
}

/* k_stage_digits for a pass of nr rows (at_pass's pointers in a), a.dg set
 * to the scratch; a.dg NULL when this mode's digits are made per block or
 * the scratch is missing or too small */
inline void stage_once(tsc_ctx *c, dp_args &a, int nr, int nd, bool grp = false) {
    a.dg = NULL;
    const size_t bytes = grp ? g_stage_bytes(nr, a.cols, a.group) : stage_bytes(nr, nd, a.cols);
    if (!dig_takes(a.xm, nr) || !c->dg || bytes > c->dg_bytes) {
        c->dg_x = NULL;
        return;
    }
    /* made by the GDN step just before (tsc_gdn_step: no launch since, the
     * same x, rows, columns and group): the same bytes k_stage_digits would
     * write, so none is launched */
    const bool made = !grp && nd == 1 && a.xm == Q4DP_XM_PLAIN && tsc_dg_made(c, a.x, nr, a.cols, a.group);
    c->dg_x = NULL; /* consumed, or stale */
    if (made) {
        a.dg = (const int4 *)c->dg;
        return;
    }
    sd_args s;
    s.xm = a.xm, s.cols = a.cols, s.group = a.group;
    s.x = a.x, s.add = a.add, s.normw = a.normw, s.u = a.u, s.eps = a.eps;
    s.x_out = a.x_out, s.y_out = a.y_out;
    s.dg = (int4 *)c->dg;
    s.one = q4dp_n1();
    launch_stage_digits(c, s, nr, grp ? 0 : nd);
    TSC_LAUNCHED(c, "tsc_linear (4-bit, dp4a: digits)");
    a.dg = (const int4 *)c->dg;
}

/* TSC_Q4DP_LATEW=0: k_q4mm's fused outputs written before its products
 * (k_q4dp's always are), a benchmark switch; the bits are the same */
inline int late_writes(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TSC_Q4DP_LATEW");
        v = !(e && e[0] == '0');
    }
    return v;
}

/* a pass over rows i0.. of q4dp_linear_staged's arrays: its pointers in a */
inline void at_pass(dp_args &a, const tsc_weight *const *w, int nw, const float *x, const float *add, const float *u,
             float *x_out, float *y_out, float *const *y, int i0) {
    const int64_t o = (int64_t)i0 * a.cols;
    a.x = x + o;
    a.add = add ? add + o : NULL, a.u = u ? u + o : NULL;
    a.x_out = x_out ? x_out + o : NULL, a.y_out = y_out ? y_out + o : NULL;
    for (int i = 0; i < nw; i++) a.w[i].y = y[i] + (int64_t)i0 * w[i]->rows;
}

/* the launch's arguments common to every kernel family: the weights, the
 * staging mode and its inputs (q4dp_linear_staged's), the layout of w[0] */
inline void dp_setup(dp_args &a, const tsc_weight *const *w, int nw, int xm, const float *norm_w, const float *u, float eps,
                     unsigned *bar) {
    memset(&a, 0, sizeof a);
    a.xm = xm, a.normw = norm_w, a.u = u, a.eps = eps, a.bar = bar;
    a.late = late_writes();
    a.nw = nw;
    a.cols = (int)w[0]->cols;
    a.group = w[0]->group;
    a.lg = 0;
    while ((1 << (a.lg + 1)) <= a.group) a.lg++;
    a.sdt = (int)w[0]->sdtype;
    for (int i = 0; i < nw; i++) {
        a.w[i].data = (const uint8_t *)w[i]->data;
        a.w[i].scales = w[i]->scales, a.w[i].biases = w[i]->biases;
        a.w[i].rows = w[i]->rows;
    }
}

} // namespace

#endif
