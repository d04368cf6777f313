/* linear.cu: matrix-vector products y = x . W^T for 1..16 rows of x, weights
 * INT4/INT8 (MLX layout) or BF16/F16/F32 (tsc_linear); the entry points of
 * the fused products (tsc_linear_swiglu, tsc_linear_addnorm).
 *
 * Owns: the MLX-layout product kernel and its launch plan (with its NORM
 * form: tsc_linear_addnorm on these formats, a MoE router staging its input
 * norm), the entry points' checks. Does not own: weight upload (ctx.cu), 4-bit weights stored as Q4T
 * (tsc_weight_upload's choice for cols % 64 == 0: their products are the
 * tensor-core kernels of q4t.cu, which tsc_linear dispatches to), 4-bit
 * weights in the MLX layout with power-of-two groups of 32..256 (the dp4a
 * kernel of q4dp.cu, tsc_linear's first choice for them; TSC_Q4DP=0 keeps
 * them here). This kernel serves INT8, BF16/F16/F32 and the rest.
 *
 * Shape of the work. A warp computes R = 4 output rows of one weight over a
 * slice of the columns; a block is 8 warps; the columns of a row group are
 * split over KS warps of the block (KS in 1, 2, 4, 8, chosen from the
 * weight's rows and cols only, so that small-row weights still spread over
 * the chip) and the KS partial sums are added in warp order in shared
 * memory. Each lane loads 16 bytes of each of its R rows per step (32 INT4
 * values, 16 INT8, 8 BF16/F16, 4 F32): a warp's load is 512 contiguous bytes
 * of a row, and all steps of a slice are unrolled by 2 so that 2 x R x 16
 * bytes per lane are in flight. x is read through L1 (it is tiny and shared by
 * every warp); one x load serves R rows. Rows of x are taken NR <= 4 at a time
 * (templates 1..4); more rows run as further passes over the weight (a
 * verify block of 5..16 rows reads the weight ceil(n/4) times; M+1 <= 4 is the
 * one-pass case).
 *
 * Quantized arithmetic, per lane chunk (32 or 16 values inside one group):
 * d_i = sum_c q_c x_ic (q exact in f32 through the 2^23 trick: no int-to-float
 * conversion), xs_i = sum_c x_ic, then acc_i = s * d_i + b * xs_i + acc_i (as
 * fmaf(s, d, fmaf(b, xs, acc))). Same value as sum_c (s q_c + b) x_ic up to
 * rounding; one FMA per weight per x row instead of two.
 *
 * Row-exactness (the verify rule): for a given weight the KS, the lane
 * slices, the step order, every fmaf and the shuffle tree are the same for
 * every NR and every n, so row i of an n-row call has the bits of a one-row
 * call. tests/test_cuda.c checks it bit for bit.
 *
 * Floors (H200, INT4 g64 bf16 scales, 9B shapes, one row): bytes = rows *
 * cols * 0.5625; e.g. the head 248320 x 4096 = 572 MB -> 133 us at the 4.3
 * TB/s copy rate; compute ~2 flop per weight -> 2 Gflop -> ~30 us at the
 * ~67 TFLOP/s f32 rate: bandwidth-bound by ~4x. Instruction issue is the
 * closer limit: per INT4 value ~1.4 int ops (mask/shift/permute) + 1 FADD +
 * NR FFMA, i.e. ~3.4 issue slots per value at NR=1 -> ~5.6 TB/s of INT4
 * equivalent, 1.3x above the copy rate; NR=2 reaches it, NR=4 is issue-bound
 * at ~65% of it.
 * Prediction before measuring: 80-85% of the copy probe on the large
 * projections (gate/up/down, qkv, head) at NR=1; 50-70% on the 4096-row
 * ones (fewer blocks in flight); the 32-row in_a/in_b are launch-bound.
 * Measured (H200, bench/cuda/run4, probe 4262 GB/s): far below the
 * prediction: head 2015 GB/s (47%), gate+up 33%, qkv/in_proj 25-28%, down 27%,
 * the 4096-row out/o projections 18%; 16 KiB x from L1 with lane-strided
 * addresses was the first limit (run1: 12-35%; staging x in shared memory
 * and persistent blocks gave run2's 1.3-1.5x). What still limits is not
 * established (no counters read yet): the candidates are issue rate (each
 * INT4 value costs ~3.4 instructions plus indexing at NR = 1, so the kernel
 * sits within ~2x of its issue ceiling) and too few bytes in flight per SM
 * between virtual blocks. Rows: 4 rows cost 2.8x one row (issue-bound: NR
 * FFMAs per value). Next: a relayout at upload so that one 16-byte load
 * feeds fewer instructions, and tensor-core (mma) products for rows > 1.
 */
#include "cuda/common.cuh"
#include "cuda/q4dp.cuh"
#include "cuda/rows.cuh"
#include "cuda/q4t.cuh"

namespace {

enum { FMT_Q4, FMT_Q8, FMT_BF16, FMT_F16, FMT_F32 };
constexpr int R = 4;      /* output rows per warp */
constexpr int WARPS = 8;  /* warps per block */

struct lin_w {
    const uint8_t *data;
    const void *scales, *biases;
    float *y;
    int64_t rows;
    int ks;   /* warps splitting the columns */
    int blk0; /* first block of this weight in the launch */
};

struct lin_args {
    lin_w w[TSC_LIN_MAX];
    int nw, sdt, group, lg; /* lg: log2(group) */
    int64_t cols, pitch; /* row pitch in bytes */
    const float *x;
    int n;   /* x rows of this pass (== NR) */
    int nvb; /* virtual blocks over all weights */
    /* NORM (tsc_linear_addnorm on these formats): x staged as RMSNorm(x +
     * add) * normw; the last block writes x_out = x + add (when add) and
     * y_out = the normed rows once every block has staged (bar) */
    const float *add, *normw;
    float eps;
    float *x_out, *y_out;
    unsigned *bar;
    int rows1; /* NORM: norm_stage_rows1 where it takes the rows (TSC_NORM_ROWS1=0: norm_stage_row a row at a time) */
    int pre;   /* NORM: each warp's first step of weights loaded before the PDL wait (k_linear; TSC_LIN_PRE=0 off) */
};

template <int FMT> struct fmt_t;
template <> struct fmt_t<FMT_Q4> { static constexpr int V = 32; };
template <> struct fmt_t<FMT_Q8> { static constexpr int V = 16; };
template <> struct fmt_t<FMT_BF16> { static constexpr int V = 8; };
template <> struct fmt_t<FMT_F16> { static constexpr int V = 8; };
template <> struct fmt_t<FMT_F32> { static constexpr int V = 4; };

/* byte j of u as an exact float (0..255): PRMT builds 0x4B0000bb = 2^23 + b */
__device__ __forceinline__ float byte_f(uint32_t u, int j) {
    return __fsub_rn(__uint_as_float(__byte_perm(u, 0x4B000000u, (unsigned)j | 0x7540u)), 8388608.0f);
}

/* Accumulate one 16-byte chunk of each of the R rows (wv[r]) against the NR x
 * rows at column c. acc[r][i] is the running sum. */
/* float4 f of x row i: from the block's swizzled shared copy (XS) or through L1 */
template <bool XS>
__device__ __forceinline__ float4 ldx(const float4 *__restrict__ xg, const float4 *xsm, int64_t c4, int i, int64_t f) {
    if constexpr (XS) return xsm[i * c4 + (f ^ ((f >> 3) & 7))];
    else return __ldg(xg + i * c4 + f);
}

template <int FMT, int NR, bool XS>
__device__ __forceinline__ void chunk(const uint4 (&wv)[R], const float4 *__restrict__ xg, const float4 *xsm, int64_t cols,
                                      int64_t c, const float (&s)[R], const float (&b)[R], float (&acc)[R][NR]) {
    const int64_t c4 = cols / 4;
    constexpr int V = fmt_t<FMT>::V;
    if constexpr (FMT == FMT_Q4 || FMT == FMT_Q8) {
        float d[R][NR], xs[NR];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < NR; i++) d[r][i] = 0.f;
#pragma unroll
        for (int i = 0; i < NR; i++) xs[i] = 0.f;
#pragma unroll
        for (int wi = 0; wi < 4; wi++) {
            /* the word's values: 8 (INT4) or 4 (INT8) consecutive columns */
            constexpr int PW = FMT == FMT_Q4 ? 8 : 4;
            float xv[NR][PW];
#pragma unroll
            for (int i = 0; i < NR; i++) {
                const int64_t f = (c + wi * PW) / 4;
                float4 a = ldx<XS>(xg, xsm, c4, i, f);
                xv[i][0] = a.x, xv[i][1] = a.y, xv[i][2] = a.z, xv[i][3] = a.w;
                if constexpr (PW == 8) {
                    float4 e = ldx<XS>(xg, xsm, c4, i, f + 1);
                    xv[i][4] = e.x, xv[i][5] = e.y, xv[i][6] = e.z, xv[i][7] = e.w;
                }
#pragma unroll
                for (int j = 0; j < PW; j++) xs[i] = __fadd_rn(xs[i], xv[i][j]);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t u = wi == 0 ? wv[r].x : wi == 1 ? wv[r].y : wi == 2 ? wv[r].z : wv[r].w;
                float q[PW];
                if constexpr (FMT == FMT_Q4) {
                    const uint32_t lo = u & 0x0F0F0F0Fu, hi = (u >> 4) & 0x0F0F0F0Fu;
#pragma unroll
                    for (int j = 0; j < 4; j++) q[2 * j] = byte_f(lo, j), q[2 * j + 1] = byte_f(hi, j);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; j++) q[j] = byte_f(u, j);
                }
#pragma unroll
                for (int i = 0; i < NR; i++)
#pragma unroll
                    for (int j = 0; j < PW; j++) d[r][i] = __fmaf_rn(q[j], xv[i][j], d[r][i]);
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < NR; i++) acc[r][i] = __fmaf_rn(s[r], d[r][i], __fmaf_rn(b[r], xs[i], acc[r][i]));
        (void)V;
    } else {
        float xv[NR][V];
#pragma unroll
        for (int i = 0; i < NR; i++) {
#pragma unroll
            for (int k = 0; k < V / 4; k++) {
                float4 a = ldx<XS>(xg, xsm, c4, i, c / 4 + k);
                xv[i][4 * k] = a.x, xv[i][4 * k + 1] = a.y, xv[i][4 * k + 2] = a.z, xv[i][4 * k + 3] = a.w;
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            float wf[V];
            const uint32_t u[4] = {wv[r].x, wv[r].y, wv[r].z, wv[r].w};
            if constexpr (FMT == FMT_BF16) {
#pragma unroll
                for (int k = 0; k < 4; k++) wf[2 * k] = __uint_as_float(u[k] << 16), wf[2 * k + 1] = __uint_as_float(u[k] & 0xFFFF0000u);
            } else if constexpr (FMT == FMT_F16) {
#pragma unroll
                for (int k = 0; k < 4; k++) wf[2 * k] = f16f((uint16_t)(u[k] & 0xFFFF)), wf[2 * k + 1] = f16f((uint16_t)(u[k] >> 16));
            } else {
#pragma unroll
                for (int k = 0; k < 4; k++) wf[k] = __uint_as_float(u[k]);
            }
#pragma unroll
            for (int i = 0; i < NR; i++)
#pragma unroll
                for (int j = 0; j < V; j++) acc[r][i] = __fmaf_rn(wf[j], xv[i][j], acc[r][i]);
        }
    }
}

/* word w (8 floats) of a row through the read-only path, two 16-byte loads:
 * the NORM stagings' loads of x and add */
__device__ __forceinline__ void row_words(const float *row, int w, float (&v)[8]) {
    const float4 p = __ldg((const float4 *)row + 2 * w), q = __ldg((const float4 *)row + 2 * w + 1);
    v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w, v[4] = q.x, v[5] = q.y, v[6] = q.z, v[7] = q.w;
}

/* NORM's staging of row i into xsm (XS's swizzled layout): the normed row
 * RMSNorm(x + add) * w, thread t its words t and t + 256 (cols <= 4096),
 * with stage_norm_words' arithmetic (q4dp_impl.cuh: row_ss8's order of the
 * sum of squares, rms_inv, norm_mul), so the staged values have the bits
 * of tsc_add_rmsnorm's rows and this product those of tsc_linear on them.
 * f: the norm weights' words, loaded before the PDL wait. */
__device__ __forceinline__ void norm_stage_row(const lin_args &a, int i, const float (&f)[2][8], float4 *xsm, double *red) {
    const int cols = (int)a.cols, nw8 = cols >> 3;
    const int64_t c4 = a.cols / 4, o = (int64_t)i * a.cols;
    float v[2][8], e[2][8];
#pragma unroll
    for (int k = 0; k < 2; k++) { /* every load in flight before any is used */
        const int w = (int)threadIdx.x + k * (int)blockDim.x;
#pragma unroll
        for (int j = 0; j < 8; j++) v[k][j] = e[k][j] = 0.f;
        if (w < nw8) {
            row_words(a.x + o, w, v[k]);
            if (a.add) row_words(a.add + o, w, e[k]);
        }
    }
    double ss = 0;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int w = (int)threadIdx.x + k * (int)blockDim.x;
        if (w >= nw8) continue;
        if (a.add)
#pragma unroll
            for (int j = 0; j < 8; j++) v[k][j] = __fadd_rn(v[k][j], e[k][j]);
        ss_word(v[k], 8, ss);
    }
    const float r = rms_inv(block_sum_d(ss, red), cols, a.eps);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int w = (int)threadIdx.x + k * (int)blockDim.x;
        if (w >= nw8) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t fq = 2 * w + h;
            xsm[i * c4 + (fq ^ ((fq >> 3) & 7))] =
                make_float4(norm_mul(v[k][4 * h], r, f[k][4 * h]), norm_mul(v[k][4 * h + 1], r, f[k][4 * h + 1]),
                            norm_mul(v[k][4 * h + 2], r, f[k][4 * h + 2]), norm_mul(v[k][4 * h + 3], r, f[k][4 * h + 3]));
        }
    }
    __syncthreads(); /* red is reused by the next row */
}

/* norm_stage_row for all NR rows at once where a row is one word a thread
 * (cols <= 8 * blockDim.x: 2048 at 256 threads, the 35B-A3B's hidden):
 * every row's loads in flight together and the NR sums of squares reduced
 * through one barrier, where norm_stage_row takes a load latency and a
 * block sum a row in turn (a verify pass's router staged 4 rows so). Each
 * row's operations are norm_stage_row's (thread t's word t, ss_word, the
 * warps' sums added in warp order as block_sum_d does, rms_inv, norm_mul):
 * the same bits. Measured (bench/cuda/RESULTS.md, session 37, H100):
 * 35B-A3B-8L MTP 3 verify 0.955-0.957 -> 0.946 ms a block. */
template <int NR>
__device__ __forceinline__ void norm_stage_rows1(const lin_args &a, const float (&f)[2][8], float4 *xsm,
                                                 double (*red)[WARPS]) {
    const int cols = (int)a.cols, nw8 = cols >> 3, w = (int)threadIdx.x, warp = w >> 5;
    const int64_t c4 = a.cols / 4;
    const bool on = w < nw8;
    float v[NR][8], e[NR][8];
#pragma unroll
    for (int i = 0; i < NR; i++) {
#pragma unroll
        for (int j = 0; j < 8; j++) v[i][j] = e[i][j] = 0.f;
        if (on) {
            const int64_t o = (int64_t)i * a.cols;
            row_words(a.x + o, w, v[i]);
            if (a.add) row_words(a.add + o, w, e[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < NR; i++) {
        double ss = 0;
        if (on) {
            if (a.add)
#pragma unroll
                for (int j = 0; j < 8; j++) v[i][j] = __fadd_rn(v[i][j], e[i][j]);
            ss_word(v[i], 8, ss);
        }
        ss = warp_sum_d(ss);
        if ((threadIdx.x & 31) == 0) red[i][warp] = ss;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NR; i++) {
        double s = 0;
        for (int k = 0; k < WARPS; k++) s += red[i][k];
        const float r = rms_inv(s, cols, a.eps);
        if (!on) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t fq = 2 * w + h;
            xsm[i * c4 + (fq ^ ((fq >> 3) & 7))] =
                make_float4(norm_mul(v[i][4 * h], r, f[0][4 * h]), norm_mul(v[i][4 * h + 1], r, f[0][4 * h + 1]),
                            norm_mul(v[i][4 * h + 2], r, f[0][4 * h + 2]), norm_mul(v[i][4 * h + 3], r, f[0][4 * h + 3]));
        }
    }
    __syncthreads();
}

/* NORM's outputs, by the last block once every block has staged: x_out =
 * x + add (the staging's __fadd_rn: the same bits; x_out may be x, which
 * nobody reads any more), y_out = the normed rows from its shared copy. */
template <int NR>
__device__ __forceinline__ void norm_outputs(const lin_args &a, const float4 *xsm) {
    if (blockIdx.x != gridDim.x - 1) return;
    if (threadIdx.x == 0) {
        while (atomicOr(a.bar, 0u) < gridDim.x) __nanosleep(64);
        atomicExch(a.bar, 0u); /* every block has arrived: ready for the next launch */
    }
    __syncthreads();
    const int64_t c4 = a.cols / 4;
    for (int64_t idx = threadIdx.x; idx < NR * c4; idx += blockDim.x) {
        const int i = (int)(idx / c4);
        const int64_t fq = idx - i * c4;
        if (a.add && a.x_out) {
            const float4 p = ((const float4 *)a.x)[idx], q = ((const float4 *)a.add)[idx];
            ((float4 *)a.x_out)[idx] = make_float4(__fadd_rn(p.x, q.x), __fadd_rn(p.y, q.y), __fadd_rn(p.z, q.z), __fadd_rn(p.w, q.w));
        }
        if (a.y_out) ((float4 *)a.y_out)[idx] = xsm[i * c4 + (fq ^ ((fq >> 3) & 7))];
    }
}

template <int FMT, int NR, bool XS, bool NORM = false>
__global__ void __launch_bounds__(WARPS * 32) k_linear(const __grid_constant__ lin_args a) {
    constexpr int V = fmt_t<FMT>::V;
    static_assert(!NORM || XS, "NORM stages x in shared memory");
    __shared__ float red[WARPS][R][NR];
    extern __shared__ float4 xsm[]; /* XS: [NR][cols/4], float4 f of a row at f ^ ((f >> 3) & 7) */
    const int64_t c4 = a.cols / 4;
    /* blockIdx.y: a group of NR rows of x and y (tsc_linear_many; 0 else) */
    const float4 *xg = (const float4 *)(a.x + (int64_t)blockIdx.y * NR * a.cols);
    float f[2][8]; /* NORM: the norm weights' words (they depend on no kernel: before the wait) */
    if constexpr (NORM) {
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int w = (int)threadIdx.x + k * (int)blockDim.x;
            if (w < (int)(a.cols >> 3)) {
                const float4 p = __ldg((const float4 *)a.normw + 2 * w), q = __ldg((const float4 *)a.normw + 2 * w + 1);
                f[k][0] = p.x, f[k][1] = p.y, f[k][2] = p.z, f[k][3] = p.w, f[k][4] = q.x, f[k][5] = q.y, f[k][6] = q.z, f[k][7] = q.w;
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++) f[k][j] = 0.f;
            }
        }
    }
    /* NORM with a.pre: each warp's first step of weights (its first virtual
     * block's rows, its first column slice: R x 16 bytes a lane) loaded
     * before the wait, as the norm weights are. Why: this form is the MoE
     * router's (a bf16 router staging the layer's norm, one step a warp at
     * the 35B-A3B's 256 x 2048: ks 8, 65 blocks), whose weights were read
     * only after the wait, the staging and its two barriers, so each block
     * paid an HBM round trip after its x's L2 round trip: ~3.2 us a block
     * for 16 KB (s38-run1's engine trace, H100). The same words, the same
     * arithmetic: the same bits. Predicted +1..2% on the 35B-A3B-8L;
     * measured (s44-run1, H100, two rounds each, interleaved) 2,244-2,251
     * -> 2,256 tok/s (+0.4%), MTP 3's verify 0.826 -> 0.823 ms: a third of
     * the prediction (the trace of s44-run2: the router's median block
     * 3.1-3.4 -> 2.5-2.8 us, its span less so: the launch's last blocks
     * wait on the norm's staging either way). The default since session 45
     * (TSC_LIN_PRE=0: after the wait, as before; addnorm_plain). */
    uint4 pw[R];
    bool pre = false;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t step_cols = 32 * V, nsteps = (a.cols + step_cols - 1) / step_cols;
    const int64_t bpc = FMT == FMT_Q4 ? 2 : FMT == FMT_Q8 ? 1 : FMT == FMT_F32 ? -4 : -2; /* >0: cols per byte */
    if constexpr (NORM) {
        if (a.pre && (int)blockIdx.x < a.nvb) {
            const int vb = blockIdx.x;
            int wi = 0;
            while (wi + 1 < a.nw && vb >= a.w[wi + 1].blk0) wi++;
            const lin_w &w = a.w[wi];
            const int ks = w.ks, rg = warp / ks, sl = warp % ks;
            const int64_t r0 = ((int64_t)(vb - w.blk0) * (WARPS / ks) + rg) * R;
            const int c = sl * (int)step_cols + lane * V;
            if (sl < (int)nsteps && c < (int)a.cols) {
                const int cb = bpc > 0 ? c / (int)bpc : c * (int)-bpc;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int64_t rr = r0 + r < w.rows ? r0 + r : w.rows - 1;
                    pw[r] = __ldg((const uint4 *)(w.data + rr * a.pitch + cb));
                }
                pre = true;
            }
        }
    }
    TSC_PDL_ENTRY();
    if constexpr (NORM) {
        if (NR > 1 && a.rows1 && a.cols <= 8 * WARPS * 32) { /* (uniform: the shape) */
            __shared__ double nred4[NR][WARPS];
            norm_stage_rows1<NR>(a, f, xsm, nred4);
        } else {
            __shared__ double nred[32];
            for (int i = 0; i < NR; i++) norm_stage_row(a, i, f, xsm, nred);
        }
        if (threadIdx.x == 0) atomicAdd(a.bar, 1u); /* staged: x may be overwritten once all have */
    } else if constexpr (XS) {
        /* the swizzle keeps the lanes' strided reads (one 16-32-value chunk per
         * lane) free of bank conflicts: 8 lanes of a phase hit 8 bank quads */
        for (int64_t idx = threadIdx.x; idx < NR * c4; idx += blockDim.x) {
            const int i = (int)(idx / c4);
            const int64_t f = idx - i * c4;
            xsm[i * c4 + (f ^ ((f >> 3) & 7))] = __ldg(xg + idx);
        }
        __syncthreads();
    }
    const int64_t ng = (FMT == FMT_Q4 || FMT == FMT_Q8) ? a.cols / a.group : 0;
    /* virtual blocks (a fixed map from rows to work, whatever block runs it) */
    for (int vb = blockIdx.x; vb < a.nvb; vb += gridDim.x) {
        int wi = 0;
        while (wi + 1 < a.nw && vb >= a.w[wi + 1].blk0) wi++;
        const lin_w &w = a.w[wi];
        const int ks = w.ks, rg = warp / ks, sl = warp % ks; /* row group in the block, column slice */
        const int64_t r0 = ((int64_t)(vb - w.blk0) * (WARPS / ks) + rg) * R;
        int64_t rr[R];
#pragma unroll
        for (int r = 0; r < R; r++) rr[r] = r0 + r < w.rows ? r0 + r : w.rows - 1; /* clamp: loads stay in bounds */
        float acc[R][NR];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < NR; i++) acc[r][i] = 0.f;
        /* in-row indices in 32 bits, the group by a shift (power-of-two
         * groups: tsc_weight_check); two steps unrolled: 2 x R x 16 bytes in
         * flight per lane (4 steps made the loop body ~2x larger and the
         * products 2x slower on the H200: bench/cuda/run3; a software-pipelined
         * one-step body with a prefetch of the next step was 1.35x slower:
         * bench/cuda/run4-prefetch) */
#pragma unroll 2
        for (int st = sl; st < (int)nsteps; st += ks) {
            const int c = st * (int)step_cols + lane * V;
            if (c < (int)a.cols) {
                uint4 wv[R];
                float sc[R], bi[R];
                const int cb = bpc > 0 ? c / (int)bpc : c * (int)-bpc;
                if (NORM && pre) { /* this warp's first step (vb == blockIdx.x, st == sl): loaded before the wait */
#pragma unroll
                    for (int r = 0; r < R; r++) wv[r] = pw[r];
                    pre = false;
                } else {
#pragma unroll
                    for (int r = 0; r < R; r++) wv[r] = __ldg((const uint4 *)(w.data + rr[r] * a.pitch + cb));
                }
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if constexpr (FMT == FMT_Q4 || FMT == FMT_Q8) {
                        const int64_t gi = rr[r] * ng + (c >> a.lg);
                        sc[r] = load_s(w.scales, a.sdt, gi);
                        bi[r] = load_s(w.biases, a.sdt, gi);
                    } else {
                        sc[r] = bi[r] = 0.f;
                    }
                }
                chunk<FMT, NR, XS>(wv, xg, xsm, a.cols, c, sc, bi, acc);
            }
        }
        rows_store<R, NR, WARPS>(acc, red, ks, warp, lane, r0, vb - w.blk0, w.y + (int64_t)blockIdx.y * NR * w.rows, w.rows);
    }
    if constexpr (NORM) norm_outputs<NR>(a, xsm);
}

int fmt_of(const tsc_weight *w) {
    switch (w->dtype) {
    case TS_DTYPE_U32: return w->bits == 4 ? FMT_Q4 : FMT_Q8;
    case TS_DTYPE_BF16: return FMT_BF16;
    case TS_DTYPE_F16: return FMT_F16;
    default: return FMT_F32;
    }
}

int vals_per_load(int fmt) { return fmt == FMT_Q4 ? 32 : fmt == FMT_Q8 ? 16 : fmt == FMT_F32 ? 4 : 8; }

/* KS (rows.cuh): the weight's steps are its columns over 32 lanes' loads */
int pick_ks(int64_t rows, int64_t cols, int fmt, int n_sm) {
    const int64_t steps = (cols + 32 * vals_per_load(fmt) - 1) / (32 * vals_per_load(fmt));
    return rows_pick_ks(rows, steps, R, WARPS, n_sm);
}

/* x in shared memory when it fits (up to XS_MAX bytes: two blocks of 8 warps
 * still fit a multiprocessor), else through L1. */
constexpr size_t XS_MAX = 100 * 1024;

/* groups: gridDim.y, the count of NR-row groups one launch takes (1 but for
 * tsc_linear_many); a block's work and arithmetic do not depend on it */
template <int FMT, int NR, bool XS, bool NORM = false>
void launch1(tsc_ctx *c, lin_args &a, int groups) {
    const size_t smem = XS ? (size_t)NR * a.cols * sizeof(float) : 0;
    const int per_sm = tsc_blocks_per_sm_dec(c, (const void *)k_linear<FMT, NR, XS, NORM>, WARPS * 32, smem, XS ? XS_MAX : 0);
    const int grid = a.nvb < per_sm * c->n_sm ? a.nvb : per_sm * c->n_sm;
    tsc_launch(c, k_linear<FMT, NR, XS, NORM>, dim3(grid, (unsigned)groups), dim3(WARPS * 32), smem, a);
}

template <int FMT, int NR>
void launch_nr(tsc_ctx *c, lin_args &a, int groups) {
    if (a.normw) launch1<FMT, NR, true, true>(c, a, groups); /* (tsc_linear_addnorm_plain_takes: x fits) */
    else if ((size_t)NR * a.cols * sizeof(float) <= XS_MAX) launch1<FMT, NR, true>(c, a, groups);
    else launch1<FMT, NR, false>(c, a, groups);
}

template <int FMT>
void launch_fmt(tsc_ctx *c, lin_args &a, int nr, int groups = 1) {
    switch (nr) {
    case 1: launch_nr<FMT, 1>(c, a, groups); break;
    case 2: launch_nr<FMT, 2>(c, a, groups); break;
    case 3: launch_nr<FMT, 3>(c, a, groups); break;
    default: launch_nr<FMT, 4>(c, a, groups); break;
    }
}

} // namespace

/* The checks every product entry point makes: 0 or the sticky error set. */
static int lin_check(tsc_ctx *c, const char *op, const tsc_weight *const *w, int nw, int n) {
    if (nw < 1 || nw > TSC_LIN_MAX || n < 1 || n > TSC_ROWS_MAX) {
        tsc_fail_(c, TS_E_ARG, "%s: %d weights and %d rows (1..%d and 1..%d)", op, nw, n, TSC_LIN_MAX, TSC_ROWS_MAX);
        return 1;
    }
    ts_error e;
    for (int i = 0; i < nw; i++) {
        if (tsc_weight_check(w[i], &e)) { tsc_fail_(c, TS_E_UNSUPPORTED, "%s: %s", op, e.msg); return 1; }
        if (!tsc_linear_one_launch(w[i], w[0])) {
            tsc_fail_(c, TS_E_ARG, "%s: weight %d's layout differs from weight 0's (one launch needs one layout)", op, i);
            return 1;
        }
    }
    return 0;
}

extern "C" void tsc_set_barrier(tsc_ctx *c, unsigned *dev_counter) {
    if (c) c->bar = dev_counter;
}

extern "C" void tsc_set_digits(tsc_ctx *c, void *dev, size_t bytes) {
    if (c) c->dg = dev, c->dg_bytes = dev ? bytes : 0;
}

/* the fused dp4a path: 0 when it took the call (or failed it) */
static int staged_dp4a(tsc_ctx *c, const char *op, const tsc_weight *const *w, int nw, int xm, const float *x,
                       const float *add, const float *norm_w, const float *u, float eps, float *x_out, float *y_out,
                       float *const *y, int n) {
    if (!q4dp_takes(w[0])) return 1;
    if (!c->bar) {
        tsc_fail_(c, TS_E_ARG, "%s: the fused 4-bit products need a device counter (tsc_set_barrier)", op);
        return 0;
    }
    q4dp_linear_staged(c, w, nw, xm, x, add, norm_w, u, eps, x_out, y_out, c->bar, y, n);
    return 0;
}

extern "C" void tsc_linear_swiglu_out(tsc_ctx *c, const tsc_weight *const *w, int nw, float *g, const float *u,
                                      float *g_out, float *const *y, int n) {
    TSC_GUARD(c);
    if (lin_check(c, "tsc_linear_swiglu_out", w, nw, n)) return;
    if (staged_dp4a(c, "tsc_linear_swiglu_out", w, nw, Q4DP_XM_SWIGLU, g, NULL, NULL, u, 0.f, NULL, g_out, y, n))
        tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_linear_swiglu_out: needs 4-bit weights the dp4a products take");
}

extern "C" void tsc_linear_swiglu(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *g, const float *u,
                                  float *const *y, int n) {
    TSC_GUARD(c);
    if (lin_check(c, "tsc_linear_swiglu", w, nw, n)) return;
    if (!staged_dp4a(c, "tsc_linear_swiglu", w, nw, Q4DP_XM_SWIGLU, g, NULL, NULL, u, 0.f, NULL, NULL, y, n)) return;
    if (w[0]->layout != TSC_LAYOUT_Q4T) {
        tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_linear_swiglu: needs Q4T weights (4-bit, cols %% 64 == 0, uploaded)");
        return;
    }
    q4t_linear(c, w, nw, Q4T_XM_SWIGLU, g, u, NULL, 0.f, NULL, NULL, y, n);
}


/* The plain kernel's arguments for nw weights (x, n and the outputs are set per launch). */
static lin_args plain_args(tsc_ctx *c, const tsc_weight *const *w, int nw, int fmt) {
    lin_args a;
    memset(&a, 0, sizeof a);
    a.nw = nw;
    a.cols = w[0]->cols;
    a.group = w[0]->group;
    a.lg = 0;
    while (a.group > 0 && (1 << (a.lg + 1)) <= a.group) a.lg++;
    a.sdt = (int)w[0]->sdtype;
    a.pitch = fmt == FMT_Q4 ? a.cols / 2 : fmt == FMT_Q8 ? a.cols : a.cols * (int64_t)ts_dtype_size(w[0]->dtype);
    int nblk = 0;
    for (int i = 0; i < nw; i++) {
        lin_w &lw = a.w[i];
        lw.data = (const uint8_t *)w[i]->data;
        lw.scales = w[i]->scales;
        lw.biases = w[i]->biases;
        lw.rows = w[i]->rows;
        lw.ks = pick_ks(w[i]->rows, a.cols, fmt, c->n_sm);
        lw.blk0 = nblk;
        const int64_t rpb = (int64_t)R * (WARPS / lw.ks);
        nblk += (int)((lw.rows + rpb - 1) / rpb);
    }
    a.nvb = nblk;
    return a;
}

/* Rows i0 .. i0 + groups * nr of x through the plain kernel, nr (1..4) rows
 * a group, the groups in one launch (gridDim.y). */
static void plain_launch(tsc_ctx *c, lin_args &a, int fmt, const float *x, float *const *y, const tsc_weight *const *w,
                         int i0, int nr, int groups) {
    a.x = x + (int64_t)i0 * a.cols;
    a.n = nr;
    for (int i = 0; i < a.nw; i++) a.w[i].y = y[i] + (int64_t)i0 * w[i]->rows;
    switch (fmt) {
    case FMT_Q4: launch_fmt<FMT_Q4>(c, a, nr, groups); break;
    case FMT_Q8: launch_fmt<FMT_Q8>(c, a, nr, groups); break;
    case FMT_BF16: launch_fmt<FMT_BF16>(c, a, nr, groups); break;
    case FMT_F16: launch_fmt<FMT_F16>(c, a, nr, groups); break;
    default: launch_fmt<FMT_F32>(c, a, nr, groups); break;
    }
    TSC_LAUNCHED(c, "tsc_linear");
}

/* The plain kernel's NORM form takes w (its formats: bf16 / f16 / f32 / 8-bit
 * MLX, cols <= 4096, a multiple of 32) on these rows (16-byte aligned) */
extern "C" int tsc_linear_addnorm_plain_takes(const tsc_weight *w, const float *x, const float *add, const float *norm_w) {
    if (w->layout == TSC_LAYOUT_Q4T || q4dp_takes(w) || w->cols % 32 || w->cols > 16 * WARPS * 32) return 0;
    return (((uintptr_t)x | (uintptr_t)(add ? add : x) | (uintptr_t)norm_w) & 15) == 0;
}

/* Passes of up to 4 rows, each staging its rows in every block (k_linear's
 * NORM: norm_stage_row) and writing its rows' outputs (norm_outputs) */
static void addnorm_plain(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, const float *add,
                          const float *norm_w, float eps, float *x_out, float *u_out, float *const *y, int n) {
    const int fmt = fmt_of(w[0]);
    lin_args a = plain_args(c, w, nw, fmt);
    a.normw = norm_w, a.eps = eps, a.bar = c->bar;
    const char *r1 = getenv("TSC_NORM_ROWS1"); /* a benchmark switch: the same bits either way */
    a.rows1 = !(r1 && !strcmp(r1, "0"));
    const char *pr = getenv("TSC_LIN_PRE"); /* k_linear's early weights (0: off), the same bits either way */
    a.pre = !(pr && !strcmp(pr, "0"));
    for (int i0 = 0; i0 < n; i0 += 4) {
        const int64_t o = (int64_t)i0 * a.cols;
        a.add = add ? add + o : NULL;
        a.x_out = add && x_out ? x_out + o : NULL;
        a.y_out = u_out ? u_out + o : NULL;
        plain_launch(c, a, fmt, x, y, w, i0, n - i0 < 4 ? n - i0 : 4, 1);
    }
}

extern "C" void tsc_linear_addnorm(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, const float *add,
                                   const float *norm_w, float eps, float *x_out, float *u_out, float *const *y, int n) {
    TSC_GUARD(c);
    if (lin_check(c, "tsc_linear_addnorm", w, nw, n)) return;
    if (!staged_dp4a(c, "tsc_linear_addnorm", w, nw, Q4DP_XM_NORM, x, add, norm_w, NULL, eps, add ? x_out : NULL, u_out, y,
                     n))
        return;
    if (tsc_linear_addnorm_plain_takes(w[0], x, add, norm_w)) {
        if (!c->bar) {
            tsc_fail_(c, TS_E_ARG, "tsc_linear_addnorm: the normed products need a device counter (tsc_set_barrier)");
            return;
        }
        addnorm_plain(c, w, nw, x, add, norm_w, eps, x_out, u_out, y, n);
        return;
    }
    if (w[0]->layout != TSC_LAYOUT_Q4T) {
        tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_linear_addnorm: needs Q4T weights (4-bit, cols %% 64 == 0, uploaded)");
        return;
    }
    if (add && (!x_out || x_out == x)) {
        tsc_fail_(c, TS_E_ARG, "tsc_linear_addnorm: with add, x_out must be given and must not be x");
        return;
    }
    q4t_linear(c, w, nw, Q4T_XM_ADDNORM, x, add, norm_w, eps, x_out, u_out, y, n);
}

extern "C" void tsc_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    TSC_GUARD(c);
    if (lin_check(c, "tsc_linear", w, nw, n)) return;
    if (w[0]->layout == TSC_LAYOUT_Q4T) {
        q4t_linear(c, w, nw, Q4T_XM_PLAIN, x, NULL, NULL, 0.f, NULL, NULL, y, n);
        return;
    }
    if (q4dp_takes(w[0])) { /* 4-bit MLX weights: the dp4a kernel (q4dp.cu) */
        q4dp_linear(c, w, nw, x, y, n);
        return;
    }
    const int fmt = fmt_of(w[0]);
    lin_args a = plain_args(c, w, nw, fmt);
    for (int i0 = 0; i0 < n; i0 += 4) plain_launch(c, a, fmt, x, y, w, i0, n - i0 < 4 ? n - i0 : 4, 1);
}

extern "C" int tsc_linear_many_takes(const tsc_weight *w) {
    return w->layout == TSC_LAYOUT_MLX && !q4dp_takes(w) && w->cols % 32 == 0;
}

extern "C" void tsc_linear_many(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    TSC_GUARD(c);
    if (n < 1 || lin_check(c, "tsc_linear_many", w, nw, 1)) return;
    for (int i = 0; i < nw; i++)
        if (!tsc_linear_many_takes(w[i])) {
            tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_linear_many: weight %d takes tsc_linear's other kernels", i);
            return;
        }
    const int fmt = fmt_of(w[0]);
    lin_args a = plain_args(c, w, nw, fmt);
    /* the 4-row groups in launches of at most 65535 (gridDim.y), then the rest */
    int i0 = 0;
    for (int g = n / 4; g > 0;) {
        const int take = g < 65535 ? g : 65535;
        plain_launch(c, a, fmt, x, y, w, i0, 4, take);
        i0 += 4 * take, g -= take;
    }
    if (i0 < n) plain_launch(c, a, fmt, x, y, w, i0, n - i0, 1);
}
