/* q4dp.cu: 4-bit products over the MLX layout with the activations as int8
 * digits and the weights' nibbles multiplied by dp4a (four byte products and
 * their sum in one instruction), for 1..16 rows of x.
 *
 * Owns: the dp4a product kernels (k_q4dp, k_q4dp_as), the opt-in
 * tensor-core k_q4mm, the MoE experts' products (k_q4dp_moe), their launch
 * plans, the entry points of q4dp.cuh. Shares with q4grp.cu (the opt-in
 * group numerics, TSC_Q4G=1) what q4dp_impl.cuh holds: the launch's
 * arguments, the digit staging of x described below ("Digits once"
 * there), the building blocks. Does not own: the entry point and its checks (linear.cu's tsc_linear,
 * which calls q4dp_linear first for 4-bit MLX weights and falls back to its
 * f32 kernel when this one declines), the Q4T layout (q4t.cu).
 *
 * Why. linear.cu's kernel turns every nibble into an exact float (PRMT +
 * FSUB) and multiplies in f32: ~3.5 instructions per weight per x row. Its
 * counters on the H200 (bench/cuda/RESULTS.md, run 5): issue slots 59% busy
 * at 43% of the DRAM peak on the head, register spills, so it could not
 * reach the roofline even with perfect latency hiding. Here a 16-byte load of
 * 32 nibbles costs 12 integer operations (mask / shift+mask per word) and
 * 8 * ND dp4a per x row, ~1.5 instructions per weight at ND = 3.
 *
 * Numerics: the CPU's (cpu/linear_p16_avx512.c). Per x row and quantization
 * group, sx = max|x_g| / L and X = round(x / sx) with |X| <= L, written in ND
 * balanced base-256 digits (ND = the weight's act_digits: 3 -> 24-bit X, the
 * engine's default, L = 8,290,000; 2 -> 16 bits, L = 32639; 1 -> int8, L =
 * 127). Per lane chunk of 32 columns, A_d = sum_c q_c d_c (exact integers),
 * D = 65536 A_2 + (256 A_1 + A_0) (the inner sum exact in int32, one f32
 * FMA joins the top digit), and acc = (s * sx) * D + (b * (sx * sum_c X_c) +
 * acc): the bias term takes the rounded x, as on the CPU, so that s*q and b
 * see the same x. With 24-bit digits x keeps 2^-23 of its group's largest
 * value: f32 precision.
 *
 * Shape of the work (as linear.cu's): a warp computes R = 4 output rows over
 * a slice of the columns, KS warps of a block split the columns (KS from the
 * weight's shape only), partial sums added in warp order in shared memory;
 * a lane's step is 16 bytes (32 nibbles) of each of its R rows, two steps
 * unrolled; persistent blocks walk a fixed map of virtual blocks. Each block
 * stages x as digits in shared memory once: [NR][2 ND][cols/32] int4 (for
 * digit d, the even columns' bytes (0, 2, 4, 6 of each 8-column word) at
 * 2d and the odd ones at 2d + 1, so that a word's low nibbles, u & 0x0F0F0F0F,
 * meet their x bytes in one dp4a; a lane reads 16 consecutive bytes, lanes
 * consecutive: no bank conflicts), then [NR][cols/32] float2 (sx, sx * sum X)
 * per 32-column chunk. Before its PDL wait a block prefetches its first
 * virtual block's weight lines into L2: the weights do not depend on the
 * previous kernel, so their first DRAM latency overlaps that kernel's tail.
 * (Prefetching whole virtual blocks to L2, the current one's later rounds
 * and the next one, was measured and dropped: every product slower, the
 * head 184 us against 168 at a 64 KB cap, the short ones unchanged;
 * bench/cuda/RESULTS.md, session 11.)
 *
 * Row-exactness (the verify rule): the digits of a row depend on that row
 * only; per (output, x row) the integer sums are exact and the f32
 * operations (D, the two FMAs per chunk, the shuffle tree, the KS sum) run
 * in the same order whatever NR, n and the other weights of the launch. The
 * products of the 16-row tests equal 16 one-row calls bit for bit.
 *
 * Staging: one thread per 8-column word, two words' loads a thread in
 * flight before the first is used (x comes from L2).
 *
 * Floors (H200, 9B shapes, one row): bytes rows * cols * 0.5625 (bf16 scales
 * and biases per 64): the head's 572 MB is 133 us at the 4.3 TB/s copy rate;
 * instructions ~1.5 per weight -> 248320 * 4096 * 1.5 / 32 lanes = 48 M warp
 * instructions over 132 SMs x 4 schedulers at 1.98 GHz: 46 us, 3x under the
 * bandwidth floor (linear.cu's kernel was within 1.3x of it). Staging costs
 * each block ~cols / 256 words per thread (16 KB of x read from L2), once.
 * Prediction: the large products (head, gate/up, down, in_proj) at 70-85% of
 * the copy probe; the 4096-row ones lower (one wave of blocks, launch and
 * staging latency exposed); 4 rows at ~1.2x one row (issue: 8 ND dp4a per
 * 32 weights per row).
 * Measured (bench/cuda/RESULTS.md, "dp4a products" and "Merged main at the
 * end of session 10"; H200, cuda_bench --mlx, probe ~4.25 TB/s): 24-bit x:
 * head 89% (U = 2), gate+up 72%, in_proj and q+k+v 47-49%, down 44%, the
 * 4096 x 4096 ones 30-33%, against the f32 kernel's 48 / 31 / 25-30 / 29 /
 * 21%; 8-bit x (the engine's default): head 96.5%, gate+up 78%, down 46%;
 * the 9B step (fused staging + PDL) 2.40 ms at 8 bits, 2.60 at 24, against
 * 3.93 with the f32 kernel. What the first version
 * taught: with the loads under the per-step guard only one step (2 KB a
 * warp) was in flight and it ran exactly as fast as the f32 kernel, whatever
 * its instruction count: the products were latency-bound, not issue-bound
 * (readbw.cu: plain 16-byte loads reach 4.5 TB/s with 32 KB in flight an
 * SM). What is left: the short products' fixed cost (launch, staging, one
 * DRAM latency, the reduction: ~4-5 us of a 4096 x 4096's 6.8 us), and rows:
 * 4 rows cost 2.1x one row (8 ND dp4a per 32 weights a row: issue-bound past
 * 2 rows; tensor cores are the way there).
 * Session 16's trace (cuda_bench --trace) corrected that reading: most of
 * the rows' cost was the staging, made by every block for every row; with
 * the digits made once a pass (k_stage_digits, "Digits once") a 9B verify
 * step of 4 rows costs 1.58x one row (was 2.41x), 16 rows 4.8x (9.4x).
 */
#include "cuda/q4dp_impl.cuh"

namespace {

/* The trace build (EXTRA_NVCC_FLAGS=-DTSC_TRACE, cuda_bench --trace): each
 * block of a k_q4dp launch records the global timer at its entry, when its
 * PDL wait returns, once x is staged, and at its end, so that a captured
 * step's timeline (the gaps between dependent launches, staging, streaming,
 * the tail) can be read off one replay. Not in the shipped build: the
 * timer reads and the extra argument would change the kernel's registers. */
#ifdef TSC_TRACE
constexpr int TRACE_L = 512, TRACE_B = 272;
__device__ unsigned long long q4dp_trace_t[TRACE_L * TRACE_B * 4];
__device__ unsigned q4dp_trace_sm[TRACE_L * TRACE_B];
__device__ __forceinline__ void trace_at(const dp_args &a, int e) {
    if (threadIdx.x != 0 || blockIdx.x >= (unsigned)TRACE_B) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    q4dp_trace_t[((size_t)a.tid * TRACE_B + blockIdx.x) * 4 + e] = t;
    if (e == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        q4dp_trace_sm[(size_t)a.tid * TRACE_B + blockIdx.x] = sm;
    }
}
#define Q4DP_TRACE(e) trace_at(a, (e))
#else
#define Q4DP_TRACE(e) ((void)0)
#endif

/* One round's loads (U steps of R rows of a lane: 16 weight bytes, a scale
 * and a bias each), every one issued before any is used; ok[u]: step u is a
 * real one (its loads are clamped in bounds either way). */
template <int U>
__device__ __forceinline__ void load_round(const dp_args &a, const dp_w &w, const uint8_t *const (&rp)[R],
                                           const int64_t (&gb)[R], int st0, int ks, int nsteps, int lane,
                                           uint4 (&wv)[U][R], uint32_t (&sr)[U][R], uint32_t (&br)[U][R],
                                           bool (&ok)[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = (st0 + u * ks) * 1024 + lane * 32;
        ok[u] = st0 + u * ks < nsteps && c < a.cols;
        const int cc = ok[u] ? c : 0; /* in bounds either way */
#pragma unroll
        for (int r = 0; r < R; r++) {
            wv[u][r] = ld_stream(rp[r] + cc / 2);
            sr[u][r] = ld_sraw(w.scales, a.sdt, gb[r] + (cc >> a.lg));
            br[u][r] = ld_sraw(w.biases, a.sdt, gb[r] + (cc >> a.lg));
        }
    }
}

/* A virtual block's weight, the warp's column slice (sl of ks) and its
 * first row r0 */
__device__ __forceinline__ const dp_w &vb_rows(const dp_args &a, int vb, int warp, int &ks, int &sl, int64_t &r0) {
    int wi = 0;
    while (wi + 1 < a.nw && vb >= a.w[wi + 1].blk0) wi++;
    const dp_w &w = a.w[wi];
    ks = w.ks;
    const int rg = warp / ks;
    sl = warp % ks;
    r0 = ((int64_t)(vb - w.blk0) * (WARPS / ks) + rg) * R;
    return w;
}

/* vb_rows and the rows' weight and group pointers (clamped so that loads
 * stay in bounds) */
__device__ __forceinline__ const dp_w &vb_place(const dp_args &a, int vb, int warp, int pitch, int ng, int &ks, int &sl,
                                                int64_t &r0, const uint8_t *(&rp)[R], int64_t (&gb)[R]) {
    const dp_w &w = vb_rows(a, vb, warp, ks, sl, r0);
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = r0 + r < w.rows ? r0 + r : w.rows - 1; /* clamp: loads stay in bounds */
        rp[r] = w.data + row * pitch;
        gb[r] = row * ng;
    }
    return w;
}

/* PRE (decode's one-row launches, TSC_Q4DP_PRE=1): a block's first round
 * of weights is loaded into registers before its PDL wait, not just
 * started towards L2. It pays only where the block is resident before the
 * previous launch ends, so with one block an SM (TSC_Q4DP_BPS=1), which
 * leaves room for the neighbour's block; a 4096-row product's warps then
 * hold their whole slice before x exists. The same operations in the same
 * order either way (the loop below only skips a round's loads it has). */
template <int NR, int ND, int U, bool PRE = false, bool N1 = false, bool DX = false>
__global__ void __launch_bounds__(WARPS * 32) k_q4dp(const __grid_constant__ dp_args a) {
    __shared__ float red[WARPS][R][NR];
    extern __shared__ int4 sm[];
    Q4DP_TRACE(0);
    const int nch = a.cols >> 5;
    static_assert(!DX || NR == 1, "DX: one-row launches");
    /* DX: the digits are read where k_stage_digits wrote them (a.dg) */
    const int4 *xd = DX ? a.dg : sm;
    const float2 *xsb = (const float2 *)(xd + NR * 2 * ND * nch);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int pitch = a.cols >> 1, ng = a.cols >> a.lg;
    const int nsteps = (a.cols + 1023) >> 10; /* a step: 32 lanes x 32 columns */

    uint4 wv[U][R];
    uint32_t sr[U][R], br[U][R];
    bool ok[U];
    /* N1 (a one-row normed launch that stages in its blocks, in one pass:
     * stage_norm_words; block 0 writes the outputs once every block has
     * staged): the norm weights' words before the wait */
    float f[2][8];
    if constexpr (N1) load_norm_words(a.normw, a.cols, f);
    if (blockIdx.x < (unsigned)a.nvb) {
        int ks, sl;
        int64_t r0;
        const uint8_t *rp[R];
        int64_t gb[R];
        const dp_w &w = vb_place(a, blockIdx.x, warp, pitch, ng, ks, sl, r0, rp, gb);
        if constexpr (PRE) {
            /* the first round's loads themselves (the loop skips them) */
            if (sl < nsteps) load_round<U>(a, w, rp, gb, sl, ks, nsteps, lane, wv, sr, br, ok);
        } else {
            /* weights do not depend on the previous kernel: start their
             * first lines towards L2 before waiting for it (without: the 9B
             * 4.6% slower, TSC_Q4DP_NPF=2 in s38-run3) */
            for (int st = sl; st < nsteps && st < sl + U * ks; st += ks) {
                const int c = st * 1024 + lane * 32;
                if (c < a.cols)
#pragma unroll
                    for (int r = 0; r < R; r++)
                        if (r0 + r < w.rows) prefetch_l2(w.data + (r0 + r) * pitch + c / 2);
            }
        }
    }
    TSC_PDL_ENTRY();
    Q4DP_TRACE(1);
    if constexpr (N1) {
        __shared__ double red1[32];
        float v[2][8], u[2][8];
        stage_norm_words<ND, false>(a.x, a.add, f, a.cols, a.eps, 0, a.group >> 3, sm, (float2 *)(sm + NR * 2 * ND * nch),
                                    2 * ND * nch, 0, red1, v, u);
        __syncthreads();
        if (arrive_b0(a)) write_norm_words(a.cols, a.add, a.x_out, a.y_out, v, u);
    } else if constexpr (DX) {
        /* nothing to stage: the loop reads the digits */
    } else if (a.dg) {
        copy_staged(a, sm, stage_bytes(NR, ND, a.cols)); /* the digits and the mode's outputs are made */
    } else {
        __shared__ float rnorm[NR];
        if (a.xm == Q4DP_XM_NORM) row_norms(a, rnorm, NR);
        stage_x<ND, 2>(a, NR, sm, (float2 *)(sm + NR * 2 * ND * nch), rnorm);
        __syncthreads();
        if (a.xm != Q4DP_XM_PLAIN) write_outputs_b0<NR>(a, rnorm);
    }
    Q4DP_TRACE(2);

    for (int vb = blockIdx.x; vb < a.nvb; vb += gridDim.x) {
        int ks, sl;
        int64_t r0;
        const uint8_t *rp[R];
        int64_t gb[R];
        const dp_w &w = vb_place(a, vb, warp, pitch, ng, ks, sl, r0, rp, gb);
        float acc[R][NR];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < NR; i++) acc[r][i] = 0.f;
        /* rounds of U steps: every load of a round (U x R chunks and their
         * scales and biases) is issued before the first is used, so a warp
         * keeps U x R x 512 bytes in flight (a loop with the loads under
         * its per-step guard could not be hoisted past the previous step's
         * arithmetic: one step, 2 KB a warp, in flight) */
        for (int st0 = sl; st0 < nsteps; st0 += U * ks) {
            if (!PRE || vb != (int)blockIdx.x || st0 != sl) load_round<U>(a, w, rp, gb, st0, ks, nsteps, lane, wv, sr, br, ok);
            /* DX: the round's digits from L1 / L2, issued with its weights
             * (read in the arithmetic, their latency would follow the
             * weights' every round: session 32's first DX form, the 9B step
             * +16-27 us) */
            int4 xq[DX ? U : 1][2 * ND];
            float2 xs[DX ? U : 1];
            if constexpr (DX) {
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const int ch = ok[u] ? ((st0 + u * ks) * 1024 + lane * 32) >> 5 : 0;
#pragma unroll
                    for (int q = 0; q < 2 * ND; q++) xq[u][q] = __ldg(xd + q * nch + ch);
                    xs[u] = __ldg(xsb + ch);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (!ok[u]) continue;
                const int ch = ((st0 + u * ks) * 1024 + lane * 32) >> 5;
                uint32_t lo[R][4], hi[R][4];
#pragma unroll
                for (int r = 0; r < R; r++) nibbles(wv[u][r], lo[r], hi[r]);
                if constexpr (DX) row_terms<NR, ND>(lo, hi, sr[u], br[u], a.sdt, xq[u], xs[u], acc, 0);
                else rows_dot<NR, ND>(lo, hi, sr[u], br[u], a.sdt, xd, xsb, nch, ch, acc);
            }
        }
        rows_store<R, NR, WARPS>(acc, red, ks, warp, lane, r0, vb - w.blk0, w.y, w.rows);
    }
    Q4DP_TRACE(3);
}

/* ---- the weights through a cp.async ring (k_q4dp_as) ----
 *
 * Why. At NR > 1 a warp's step is ~256 instructions for its 2 KB of weights
 * (8 dp4a and a scale pair a row chunk per x row), and with U = 1 its next
 * loads wait for that arithmetic: bytes in flight drop while the warps
 * compute (U = 2 needs 154-164 registers: one block an SM, measured no
 * better; session 16). Here each warp keeps a ring of S steps in shared
 * memory filled by cp.async (no registers held by loads in flight): the
 * next S - 1 steps' weights, scales and biases, possibly of the warp's next
 * virtual blocks, are on their way while the current one is computed, and
 * the first S - 1 are issued before the PDL wait (the weights do not depend
 * on the previous kernel). Each lane reads back only what it copied, so no
 * barrier is needed beyond cp.async.wait_group.
 * One row (session 17). The 9B step's trace (session 16) put ~1 ms of its
 * ~2.05 outside the weights' streaming: a product's blocks, resident early,
 * waited at the PDL barrier with one round of lines started towards L2,
 * then staged x (1.5-3.6 us a launch) with nothing in flight. With S = 4
 * slots (96 KB a block, still two blocks an SM) the S - 1 steps issued
 * before the wait are 6 KB of weights a warp, 12.7 MB over the grid: they
 * arrive while the previous kernels finish and while the block stages x
 * (in-block staging, as k_q4dp's, for the one-row normed and plain passes
 * that make no digits once). Floors as k_q4dp's (top of the file); the
 * prediction: the 4096-column products' staging and first DRAM latency
 * hidden, ~2-4 us a launch, the 9B step 2.05 -> ~1.7 ms. Measured (H200,
 * session 17, s17-run1..3): slower (2.54 ms with every one-row pass on it,
 * 2.20 with the plain ones), because the early copies delay the staging
 * (as_takes says how); so one row stays on k_q4dp by default.
 * Numerics: the same steps in the same order per lane with the same
 * operations as k_q4dp (U changes no operation), so the same bits as
 * k_q4dp for every row count (the row-exactness rule). Takes: 8-bit x, the
 * scales and biases 4-byte aligned with an even number of groups a row (a
 * 16-bit scale is read as the aligned 32-bit word holding it and its half
 * chosen by the group's parity). Which passes take it: as_takes. */
constexpr int AS_SLOT_I4 = R * 48; /* a warp's slot in int4: [R][32] uint4 weights, [R][32] u32 scales, biases */
/* dynamic shared memory a block may take: the H100/H200 opt-in limit is
 * 227 KB for dynamic and static together (the static part here is red, at
 * most 1 KB), so 224 KB (227 KB itself made cudaFuncSetAttribute fail:
 * session 16, call 4) */
constexpr size_t AS_SMEM_MAX = 224 * 1024;
/* at most this a block for two blocks an SM (228 KB an SM, 1 KB reserved a
 * block, the static part) */
constexpr size_t AS_SMEM_2 = 110 * 1024;

__host__ __device__ inline size_t as_ring_off(int nr, int nd, int cols) { return (stage_bytes(nr, nd, cols) + 15) / 16; }
size_t as_smem(int nr, int nd, int cols, int s) {
    return (as_ring_off(nr, nd, cols) + (size_t)WARPS * s * AS_SLOT_I4) * 16;
}

template <int NR, int ND, int S>
__global__ void __launch_bounds__(WARPS * 32) k_q4dp_as(const __grid_constant__ dp_args a) {
    __shared__ float red[WARPS][R][NR];
    extern __shared__ int4 sm[];
    Q4DP_TRACE(0);
    if (blockIdx.x >= (unsigned)a.nvb) { /* the whole block (a persistent grid has none) */
        TSC_PDL_ENTRY();
        if (!a.dg && a.xm != Q4DP_XM_PLAIN && threadIdx.x == 0) atomicAdd(a.bar, 1u); /* block 0 counts every block */
        return;
    }
    const int nch = a.cols >> 5;
    int4 *xd = sm;
    float2 *xsb = (float2 *)(sm + NR * 2 * ND * nch);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int pitch = a.cols >> 1, ng = a.cols >> a.lg;
    const int nsteps = (a.cols + 1023) >> 10;
    const bool s16 = a.sdt != TS_DTYPE_F32;
    int4 *ring = sm + as_ring_off(NR, ND, a.cols) + warp * S * AS_SLOT_I4;
    uint4 *rw = (uint4 *)ring;
    uint32_t *rs = (uint32_t *)(ring + S * R * 32), *rb = rs + S * R * 32;

    /* the issue cursor: the next (virtual block, step) of this warp */
    int ivb = blockIdx.x, iks, isl, ist;
    int64_t ir0;
    const uint8_t *rp[R];
    int64_t gb[R];
    const dp_w *iw = &vb_place(a, ivb, warp, pitch, ng, iks, isl, ir0, rp, gb);
    ist = isl;
    auto skip = [&]() { /* to the next virtual block where the warp has a step, or past the end */
        while (ist >= nsteps) {
            ivb += gridDim.x;
            if (ivb >= a.nvb) { ist = nsteps; return; }
            iw = &vb_place(a, ivb, warp, pitch, ng, iks, isl, ir0, rp, gb);
            ist = isl;
        }
    };
    auto issue = [&](int slot) { /* the cursor's step into slot, and the cursor on */
        if (ivb < a.nvb && ist < nsteps) {
            const int c = ist * 1024 + lane * 32, cc = c < a.cols ? c : 0; /* in bounds either way */
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t gi = gb[r] + (cc >> a.lg), wi = s16 ? gi >> 1 : gi;
                cp_async16(rw + (slot * R + r) * 32 + lane, rp[r] + cc / 2);
                cp_async4(rs + (slot * R + r) * 32 + lane, (const uint32_t *)iw->scales + wi);
                cp_async4(rb + (slot * R + r) * 32 + lane, (const uint32_t *)iw->biases + wi);
            }
            ist += iks;
            skip();
        }
        cp_async_commit(); /* an empty group past the end: the waits count groups */
    };
    skip();
#pragma unroll
    for (int s = 0; s < S - 1; s++) issue(s);
    TSC_PDL_ENTRY();
    Q4DP_TRACE(1);
    if (NR > 1 || a.dg) { /* (several rows always have their digits made once: as_takes) */
        copy_staged(a, sm, stage_bytes(NR, ND, a.cols)); /* the digits and the mode's outputs are made */
    } else if constexpr (NR == 1) {
        /* k_q4dp's staging (the same digits); the ring's copies fly meanwhile */
        __shared__ float rnorm[NR];
        if (a.xm == Q4DP_XM_NORM) row_norms(a, rnorm, NR);
        stage_x<ND, 2>(a, NR, xd, xsb, rnorm);
        __syncthreads();
        if (a.xm != Q4DP_XM_PLAIN) write_outputs_b0<NR>(a, rnorm);
    }
    Q4DP_TRACE(2);

    int slot = 0;
    for (int vb = blockIdx.x; vb < a.nvb; vb += gridDim.x) {
        int ks, sl;
        int64_t r0;
        const dp_w &w = vb_rows(a, vb, warp, ks, sl, r0);
        float acc[R][NR];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < NR; i++) acc[r][i] = 0.f;
        for (int st = sl; st < nsteps; st += ks) {
            /* the step S - 1 ahead on its way (into the slot read last),
             * then this one's arrived */
            issue(slot == 0 ? S - 1 : slot - 1);
            cp_async_wait<S - 1>();
            const int c = st * 1024 + lane * 32;
            if (c < a.cols) {
                const int ch = c >> 5, hs = (c >> a.lg) & 1;
                uint32_t lo[R][4], hi[R][4], sw[R], bw[R];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    nibbles(rw[(slot * R + r) * 32 + lane], lo[r], hi[r]);
                    sw[r] = rs[(slot * R + r) * 32 + lane], bw[r] = rb[(slot * R + r) * 32 + lane];
                    if (s16) sw[r] = hs ? sw[r] >> 16 : sw[r] & 0xFFFFu, bw[r] = hs ? bw[r] >> 16 : bw[r] & 0xFFFFu;
                }
                rows_dot<NR, ND>(lo, hi, sw, bw, a.sdt, xd, xsb, nch, ch, acc);
            }
            slot = slot + 1 == S ? 0 : slot + 1;
        }
        rows_store<R, NR, WARPS>(acc, red, ks, warp, lane, r0, vb - w.blk0, w.y, w.rows);
    }
    Q4DP_TRACE(3);
}

/* ---- tensor cores: the same products for 1..16 rows (k_q4mm) ----
 *
 * Why. k_q4dp's dp4a work grows with the rows (8 dp4a and a scale FMA pair
 * per 32 weights per row): 4 rows cost 2.1-2.4x one row on the 9B shape,
 * so a verify block cost what sequential decode did. mma.m16n8k32 (u8
 * nibbles x s8 digits, s32 accumulation, exact) does 16 output rows x 8 x
 * rows x 32 columns in one instruction, so the rows come almost free.
 *
 * Numerics (8-bit x, ND = 1, the engine's default). The integer sum of a
 * whole quantization group, D_g = sum q_c X_c, exact in s32 whatever the
 * order of its products, then one scale step per group and (output, x row):
 * acc = (s * sx) * D_g + (b * (sx * sum_g X) + acc), the groups of a warp's
 * slice in increasing order, the KS warps' sums added in warp order. Every
 * operation of a row depends on that row, its weight's shape (KS) and
 * nothing else: decode (1 row) and verify (M rows) run this one kernel, so
 * their bits are equal by construction. The bits differ from k_q4dp's (a
 * scale step per group here, per 32-column lane chunk there), so a weight
 * is computed by one of the two for every row count (mm_takes).
 *
 * Fragments (PTX ISA, mma.m16n8k32 for 8-bit types): lane = 4 g + t; A
 * (weights, 16 x 32) a0 = (row g, k 4t..4t+3), a1 = (row g+8, same k), a2,
 * a3 = the same rows at k + 16; B (x, 32 x 8) b0 = (k 4t..4t+3, x row g),
 * b1 = k + 16; C c0, c1 = (row g, x rows 2t, 2t+1), c2, c3 = row g+8. The k
 * order inside one mma is free (the sum does not depend on it), so a
 * thread's k slots are the columns of one 8-column word it loaded itself:
 * lo nibbles (u & 0x0F0F0F0F, columns 0, 2, 4, 6 of the word) are k 4t..,
 * hi nibbles (columns 1, 3, 5, 7) k 16 + 4t.., and the staged digits of x
 * already sit in that order (stage_word: the even columns' bytes of a word,
 * then the odd ones'). A group of G columns is G / 32 mmas; thread t owns
 * the G / 4 columns at t G / 4 of it (G / 8 contiguous bytes of each of its
 * two rows: the 4 threads of g read 32 B of a row, one sector, at G = 64).
 *
 * Shape of the work: a warp computes 16 rows (two of 8) x the launch's x
 * rows over a contiguous range of groups (KS warps split a row's groups in
 * KS ranges, mm_per); UG groups a round, every load of a round issued
 * before the first is used (UG x 16 rows x G / 2 bytes: 4 KB a warp in
 * flight at G = 64, as k_q4dp's one-row U = 2 rounds), a round's scales
 * and biases one vector load a row (its UG groups are consecutive).
 *
 * Floors and prediction (9B shapes, H200): the bytes are k_q4dp's. Per 16
 * rows x 64 columns a warp issues 2 loads, 12 unpacking operations, 2 mma
 * (4 at 9..16 rows), 4 B-fragment loads, 4 scale loads and their
 * conversions and 2 (one x row) or 4 scale steps of 3 operations: ~35
 * instructions per 1024 weights at one row against k_q4dp's ~30, so decode
 * about as fast as k_q4dp (within 10%), and ~40 at 2..8 rows against
 * k_q4dp's ~73 at 4 rows (which also reads the weights again past 4):
 * a 4-row verify at ~1.1-1.3x one row, 16 rows at ~1.5x. */
/* The raw scale (or bias) elements of groups g0 .. g0 + UG - 1 of the row
 * whose first group is at index rbase: vec, one or two vector loads (2-byte
 * elements: UG * 2 bytes; f32: UG * 4), else one load a group, the groups
 * past gend reading group gbeg's (in bounds; never used). */
template <int UG>
__device__ __forceinline__ void ld_scales(const void *base, int dt, int64_t rbase, int g0, int gend, int gbeg, bool vec,
                                          uint32_t (&o)[UG]) {
    if (vec) {
        if (dt == TS_DTYPE_F32) {
            const uint4 *p = (const uint4 *)((const uint32_t *)base + rbase + g0);
#pragma unroll
            for (int q = 0; q < UG / 4; q++) {
                const uint4 v = __ldg(p + q);
                o[4 * q] = v.x, o[4 * q + 1] = v.y, o[4 * q + 2] = v.z, o[4 * q + 3] = v.w;
            }
        } else if constexpr (UG == 8) {
            const uint4 v = __ldg((const uint4 *)((const unsigned short *)base + rbase + g0));
            const uint32_t q[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; k++) o[2 * k] = q[k] & 0xFFFFu, o[2 * k + 1] = q[k] >> 16;
        } else {
            const uint2 v = __ldg((const uint2 *)((const unsigned short *)base + rbase + g0));
            const uint32_t q[2] = {v.x, v.y};
#pragma unroll
            for (int k = 0; k < UG / 2; k++) o[2 * k] = q[k] & 0xFFFFu, o[2 * k + 1] = q[k] >> 16;
        }
        return;
    }
#pragma unroll
    for (int u = 0; u < UG; u++) o[u] = ld_sraw(base, dt, rbase + (g0 + u < gend ? g0 + u : gbeg));
}

/* a warp's groups of a row (KS warps split them): the contiguous range
 * [sl * per, (sl + 1) * per), per a whole number of rounds, so that every
 * round but a range's last starts aligned to UG groups (the scales' vector
 * loads) */
/* groups a round of k_q4mm (UG): 8, or 4 at G = 128 (WPT = 4 words a group) */
__host__ __device__ constexpr int mm_ug(int group) { return group == 128 ? 4 : 8; }

__host__ __device__ inline int mm_per(int ng, int ks, int ug) {
    const int per = (ng + ks - 1) / ks;
    return (per + ug - 1) / ug * ug;
}

size_t mm_stage_bytes(int nr, int cols, int group) {
    return (size_t)nr * mm_tstride(cols / 32) * 16 + (size_t)(cols / group) * mm_nt(nr) * sizeof(float2);
}

/* NO: octets of x rows (1: 1..8, 2: 9..16); ONE: exactly one x row (only
 * the c0, c2 scale steps) */
template <int WPT, int NO, bool ONE>
__global__ void __launch_bounds__(WARPS * 32) k_q4mm(const __grid_constant__ dp_args a) {
    constexpr int NT = 8 * NO, UG = mm_ug(32 * WPT);
    __shared__ float red[WARPS][MR][NT];
    extern __shared__ int4 sm[];
    const int nch = a.cols >> 5, ng = a.cols >> a.lg, nr = ONE ? 1 : a.nr;
    const int tst = mm_tstride(nch);
    int4 *xd = sm;
    float2 *xsb = (float2 *)(sm + (size_t)nr * tst);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int pitch = a.cols >> 1, gbytes = a.group >> 1;

    /* the first round's weights towards L2 before the PDL wait (k_q4dp's) */
    if (blockIdx.x < (unsigned)a.nvb) {
        const int vb = blockIdx.x;
        int wi = 0;
        while (wi + 1 < a.nw && vb >= a.w[wi + 1].blk0) wi++;
        const dp_w &w = a.w[wi];
        const int ks = w.ks, rg = warp / ks, sl = warp % ks;
        const int64_t r0 = ((int64_t)(vb - w.blk0) * (WARPS / ks) + rg) * MR;
        const int64_t ra = r0 + g < w.rows ? r0 + g : w.rows - 1, rb = r0 + g + 8 < w.rows ? r0 + g + 8 : w.rows - 1;
        const int gbeg = sl * mm_per(ng, ks, UG);
        for (int gi = gbeg; gi < ng && gi < gbeg + UG; gi++) {
            prefetch_l2(w.data + ra * pitch + (int64_t)gi * gbytes + t * WPT * 4);
            prefetch_l2(w.data + rb * pitch + (int64_t)gi * gbytes + t * WPT * 4);
        }
    }
    TSC_PDL_ENTRY();
    __shared__ float rnorm[TSC_ROWS_MAX];
    if (a.xm == Q4DP_XM_NORM) row_norms(a, rnorm, nr);
    /* the scale pairs of the x rows past nr: read by the scale steps of
     * the C values that are never stored; zero, so that they are defined */
    for (int q = threadIdx.x; q < ng * NT; q += blockDim.x)
        if (q % NT >= nr) xsb[q] = make_float2(0.f, 0.f);
    mm_stage_block(a, nr, xd, xsb, rnorm, tst, NT);
    const uint32_t *xw = (const uint32_t *)xd; /* a row's digit words: even bytes at [0, cols/8), odd at +nch*4 */
    const float4 *xs4 = (const float4 *)xsb;   /* the scale pairs of x rows 2t, 2t+1 of a group */

    for (int vb = blockIdx.x; vb < a.nvb; vb += gridDim.x) {
        int wi = 0;
        while (wi + 1 < a.nw && vb >= a.w[wi + 1].blk0) wi++;
        const dp_w &w = a.w[wi];
        const int ks = w.ks, rg = warp / ks, sl = warp % ks;
        const int64_t r0 = ((int64_t)(vb - w.blk0) * (WARPS / ks) + rg) * MR;
        /* clamped: the loads stay in bounds, the rows past the end are not stored */
        const int64_t ra = r0 + g < w.rows ? r0 + g : w.rows - 1, rb = r0 + g + 8 < w.rows ? r0 + g + 8 : w.rows - 1;
        const uint8_t *pa = w.data + ra * pitch + t * WPT * 4, *pb = w.data + rb * pitch + t * WPT * 4;
        const int64_t ga = ra * ng, gb = rb * ng;
        /* the x rows whose digits this thread feeds to B: g (and g + 8) */
        const uint32_t *xr[NO];
#pragma unroll
        for (int o = 0; o < NO; o++) {
            const int row = o * 8 + g < nr ? o * 8 + g : nr - 1;
            xr[o] = xw + (size_t)row * tst * 4 + t * WPT;
        }
        float acc[NO][4];
#pragma unroll
        for (int o = 0; o < NO; o++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[o][q] = 0.f;
        /* this warp's groups: a contiguous range (mm_range) */
        const int per = mm_per(ng, ks, UG), gbeg = sl * per, gend = gbeg + per < ng ? gbeg + per : ng;
        for (int g0 = gbeg; g0 < gend; g0 += UG) {
            uint32_t wa[UG][WPT], wb[UG][WPT], sr[2][UG], br[2][UG];
            bool ok[UG];
#pragma unroll
            for (int u = 0; u < UG; u++) {
                const int gi = g0 + u;
                ok[u] = gi < gend;
                const int gg = ok[u] ? gi : gbeg; /* in bounds either way */
                ld_words<WPT>(pa + (int64_t)gg * gbytes, wa[u]);
                ld_words<WPT>(pb + (int64_t)gg * gbytes, wb[u]);
            }
            /* the round's scales and biases: one vector load a row where the
             * round is whole and aligned (w.sv), else one load a group */
            const bool vec = w.sv && g0 + UG <= gend;
            ld_scales<UG>(w.scales, a.sdt, ga, g0, gend, gbeg, vec, sr[0]);
            ld_scales<UG>(w.scales, a.sdt, gb, g0, gend, gbeg, vec, sr[1]);
            ld_scales<UG>(w.biases, a.sdt, ga, g0, gend, gbeg, vec, br[0]);
            ld_scales<UG>(w.biases, a.sdt, gb, g0, gend, gbeg, vec, br[1]);
#pragma unroll
            for (int u = 0; u < UG; u++) {
                if (!ok[u]) continue; /* uniform over the warp */
                const int gi = g0 + u, w0 = gi * (a.group >> 3); /* the group's first word */
                int C[NO][4];
#pragma unroll
                for (int o = 0; o < NO; o++) C[o][0] = C[o][1] = C[o][2] = C[o][3] = 0;
                uint32_t xe[NO][WPT], xo[NO][WPT]; /* B: this thread's digit words, even and odd bytes */
#pragma unroll
                for (int o = 0; o < NO; o++) {
                    lds_words<WPT>(xr[o] + w0, xe[o]);
                    lds_words<WPT>(xr[o] + nch * 4 + w0, xo[o]);
                }
#pragma unroll
                for (int m = 0; m < WPT; m++) {
                    const uint32_t a0 = wa[u][m] & 0x0F0F0F0Fu, a1 = wb[u][m] & 0x0F0F0F0Fu;
                    const uint32_t a2 = (wa[u][m] >> 4) & 0x0F0F0F0Fu, a3 = (wb[u][m] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
                    for (int o = 0; o < NO; o++) mma_u4s8(C[o], a0, a1, a2, a3, xe[o][m], xo[o][m]);
                }
                const float s0 = sraw_f(sr[0][u], a.sdt), s1 = sraw_f(sr[1][u], a.sdt);
                const float b0 = sraw_f(br[0][u], a.sdt), b1 = sraw_f(br[1][u], a.sdt);
#pragma unroll
                for (int o = 0; o < NO; o++) {
                    const float4 sb = xs4[(gi * NT + o * 8 + 2 * t) >> 1];
                    const float2 e = make_float2(sb.x, sb.y), f = make_float2(sb.z, sb.w);
                    acc[o][0] = chunk_acc(s0, b0, e, (float)C[o][0], acc[o][0]);
                    acc[o][2] = chunk_acc(s1, b1, e, (float)C[o][2], acc[o][2]);
                    if (!ONE) {
                        acc[o][1] = chunk_acc(s0, b0, f, (float)C[o][1], acc[o][1]);
                        acc[o][3] = chunk_acc(s1, b1, f, (float)C[o][3], acc[o][3]);
                    }
                }
            }
        }
        /* the store: C value q of octet o is (row g + 8 (q >> 1), x row o 8 + 2 t + (q & 1)) */
        if (ks == 1) {
#pragma unroll
            for (int o = 0; o < NO; o++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int64_t row = r0 + g + 8 * (q >> 1);
                    const int i = o * 8 + 2 * t + (q & 1);
                    if (row < w.rows && i < nr) w.y[(int64_t)i * w.rows + row] = acc[o][q];
                }
            continue;
        }
#pragma unroll
        for (int o = 0; o < NO; o++)
#pragma unroll
            for (int q = 0; q < 4; q++) red[warp][g + 8 * (q >> 1)][o * 8 + 2 * t + (q & 1)] = acc[o][q];
        __syncthreads();
        const int ngrp = WARPS / ks;
        for (int q = threadIdx.x; q < ngrp * MR * NT; q += blockDim.x) {
            const int gr = q / (MR * NT), r = q / NT % MR, i = q % NT;
            if (i >= nr) continue;
            float v = red[gr * ks][r][i];
            for (int k = 1; k < ks; k++) v = __fadd_rn(v, red[gr * ks + k][r][i]);
            const int64_t row = ((int64_t)(vb - w.blk0) * ngrp + gr) * MR + r;
            if (row < w.rows) w.y[(int64_t)i * w.rows + row] = v;
        }
        __syncthreads(); /* red is reused by the next virtual block */
    }
    if (a.xm != Q4DP_XM_PLAIN && a.late) write_outputs(a, rnorm, nr);
}

/* ---- the routed experts of a MoE layer (q4dp_moe) ----
 *
 * The same products for the k experts a token routed to, their ids read on
 * the device (the router's top k, written by the kernel before): every slot
 * is a 4-bit MLX matrix at base + id * stride (scales and biases at fixed
 * offsets inside the slot). Two shapes, both one long product per token:
 *   Q4DP_MOE_ROWS (gate, up: [Im, H] a slot): the k slots stacked as k * Im
 *     rows over x's H columns, y = [ntok][k * Im];
 *   Q4DP_MOE_COLS (down: [H, Im] a slot): the k slots side by side as H rows
 *     over k * Im columns (x = the k hidden rows of the token, concatenated),
 *     each slot's terms scaled by its routing weight, so that the routed
 *     sum is the product itself: y = [ntok][H], sum_j w_j down_j . h_j.
 * A token's digits are staged once per block (all the pass's tokens; a
 * virtual block belongs to one token), so each token's values do not depend
 * on the other tokens of the pass (the verify rule), and KS comes from the
 * stacked shape only. Why one product: the per-slot kernels (backend.cu's
 * k_moe_*: a warp per output, f32) were 73% of a 35B-A3B step, at a few
 * percent of the bandwidth each (bench/cuda/final-run/ncu_step_summary.txt). */
struct dx_w {
    const uint8_t *base;
    int64_t stride, soff, boff;
    float *y;
};

struct dx_args {
    dx_w w[2];
    int nw;
    int64_t rows; /* stacked rows (ROWS: k * Im; COLS: H) */
    int cols;     /* stacked columns (ROWS: H; COLS: k * Im) */
    int slot;     /* Im: a slot's rows (ROWS) or columns (COLS) */
    int k, ks, vpw, vpt, nvb, ntok;
    int sdt, group, lg;
    const int32_t *ids; /* [ntok][k] */
    const float *wts;   /* [ntok][k] routing weights (COLS) */
    /* COLS, optional: y = routed + sigmoid(gate[t]) * add[t] (the shared
     * expert's output and gate logit: the combine in the store) */
    const float *sadd, *sgate;
    /* staging (stage_x's fields): x [ntok][cols], silu(x) * u when xm is SWIGLU */
    const float *x, *add, *normw, *u;
    int xm;
    /* COLS, the shared expert as slot k (sdata given; q4dp.cuh): its down's
     * bytes, its scales and biases at sdata + ssoff / sboff; x's columns from
     * c2 = k * slot on are x2 / u2 ([ntok][slot]); c2 = cols without it */
    const uint8_t *sdata;
    int64_t ssoff, sboff;
    const float *x2, *u2;
    int c2;
    /* ROWS, the shared expert as slot k (SHR): weight i's shared matrix
     * (its scales and biases at sbase[i] + sso[i] / sbo[i]), rows k * slot
     * on (last here: the other kernels' argument offsets stay) */
    const uint8_t *sbase[2];
    int64_t sso[2], sbo[2];
    /* COLS with SwiGLU x: the pass's digits made once by k_stage_digits
     * (moe_dig_on: q4dp_moe launches it), which every block copies instead
     * of staging silu(x) * u itself; NULL: each block stages */
    const int4 *dg;
};

__device__ __forceinline__ const float *x_at(const dx_args &a, int i, int col) {
    return col < a.c2 ? a.x + (int64_t)i * a.c2 + col : a.x2 + (int64_t)i * (a.cols - a.c2) + (col - a.c2);
}
__device__ __forceinline__ const float *u_at(const dx_args &a, int i, int col) {
    return col < a.c2 ? a.u + (int64_t)i * a.c2 + col : a.u2 + (int64_t)i * (a.cols - a.c2) + (col - a.c2);
}

/* tokens a k_q4dp_moe pass at most (q4dp_moe's passes), and the routes a
 * block keeps in shared memory (ntok * k <= 16 * 32) */
constexpr int MOE_TOK = 16, MOE_ROUTES = MOE_TOK * 32;

/* Index arithmetic in 32 bits (q4dp_moe checks that the stacked rows and
 * columns fit): a 64-bit division per row was ~100 instructions a virtual
 * block, on a kernel that is a latency-bound instruction stream (ncu,
 * session 22: ~1,850 instructions a warp for ~2 x 4 rows x 1024 columns).
 * SHR (ROWS only): the shared expert's gate / up rows are slot k of the
 * stack (dx_args.sbase: rows k * slot .. rows - 1), so that a MoE layer's
 * shared gate/up is not a launch of its own (backend.cu's cu_moe, "one
 * launch fewer": why there). A row's operations are the routed rows' own,
 * only the matrix it reads differs. */
template <int ND, int U, int EM, bool SHR = false>
__global__ void __launch_bounds__(WARPS * 32) k_q4dp_moe(const __grid_constant__ dx_args a) {
    __shared__ float red[WARPS][R][1];
    __shared__ int32_t sid[MOE_ROUTES]; /* the pass's routes: expert ids (swt: their weights, COLS) */
    __shared__ float swt[EM == Q4DP_MOE_COLS ? MOE_ROUTES : 1];
    __shared__ float ssg[EM == Q4DP_MOE_COLS ? MOE_TOK : 1]; /* the shared slot's weight a token */
    extern __shared__ int4 sm[];
    const int nch = a.cols >> 5;
    int4 *xd = sm;
    float2 *xsb = (float2 *)(sm + a.ntok * 2 * ND * nch);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nsteps = (a.cols + 1023) >> 10;
    /* a slot's row: bytes and groups */
    const int ecols = EM == Q4DP_MOE_ROWS ? a.cols : a.slot;
    const int pitch = ecols >> 1, ng = ecols >> a.lg;
    TSC_PDL_ENTRY(); /* the ids come from the previous kernel: nothing to prefetch before it (a down after its
                      * digits launch could: measured no clear gain, moe_dig_on) */
    /* the routes' loads in flight with x's (they were loaded from global
     * memory right before each row's weights: an L2 round trip on the chain) */
    const int nroute = a.ntok * a.k;
    int32_t rid[2] = {0, 0};
    float rwt[2] = {0.f, 0.f};
#pragma unroll
    for (int q = 0; q < 2; q++) {
        const int t = threadIdx.x + q * WARPS * 32;
        if (t < nroute) {
            rid[q] = __ldg(a.ids + t);
            if constexpr (EM == Q4DP_MOE_COLS) rwt[q] = __ldg(a.wts + t);
        }
    }
    float sg = 0.f;
    if (EM == Q4DP_MOE_COLS && a.sdata && threadIdx.x < a.ntok) sg = __ldg(a.sgate + threadIdx.x);
    if (a.dg) copy_digits(a.dg, sm, stage_bytes(a.ntok, ND, a.cols)); /* the barrier below */
    else stage_x<ND, 2>(a, a.ntok, xd, xsb, NULL); /* ptxas keeps the words in a 64-byte local frame here (L1; staging only) */
#pragma unroll
    for (int q = 0; q < 2; q++) {
        const int t = threadIdx.x + q * WARPS * 32;
        if (t < nroute) {
            sid[t] = rid[q];
            if constexpr (EM == Q4DP_MOE_COLS) swt[t] = rwt[q];
        }
    }
    if constexpr (EM == Q4DP_MOE_COLS)
        if (a.sdata && threadIdx.x < a.ntok) ssg[threadIdx.x] = sigmoid_f(sg);
    __syncthreads();

    const int rows = (int)a.rows;
    for (int vb = blockIdx.x; vb < a.nvb; vb += gridDim.x) {
        const int tok = vb / a.vpt, vt = vb - tok * a.vpt, wi = vt / a.vpw, vbl = vt - wi * a.vpw;
        const dx_w &w = a.w[wi];
        const int ks = a.ks, rg = warp / ks, sl = warp % ks;
        const int r0 = (vbl * (WARPS / ks) + rg) * R;
        const int32_t *ids = sid + tok * a.k;
        const int4 *xdt = xd + (int64_t)tok * 2 * ND * nch;
        const float2 *xst = xsb + (int64_t)tok * nch;
        /* the warp's R rows, clamped into the weight (a warp past the end
         * loads the last rows; its stores are masked); ROWS: one slot for
         * all R (q4dp_moe_takes asks slot % R == 0), its byte offset so, and
         * each row's place within the slot */
        int64_t so = 0;
        int er0 = r0; /* COLS: rows of the weight, each clamped below */
        const uint8_t *sh = nullptr; /* SHR: the shared expert's rows (slot k) */
        if constexpr (EM == Q4DP_MOE_ROWS) {
            const int rc = r0 < rows ? r0 : rows - R;
            int j = rc / a.slot;
            if constexpr (SHR) {
                if (j >= a.k) j = a.k, sh = a.sbase[wi]; /* its rows may be more than a slot's */
            }
            er0 = rc - j * a.slot;
            if (!SHR || !sh) so = (int64_t)ids[j] * w.stride;
        }
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.f;
        for (int st0 = sl; st0 < nsteps; st0 += U * ks) {
            uint4 wv[U][R];
            uint32_t sr[U][R], br[U][R];
            float wt[U];
            bool ok[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = (st0 + u * ks) * 1024 + lane * 32;
                ok[u] = st0 + u * ks < nsteps && c < a.cols;
                const int cc = ok[u] ? c : 0; /* in bounds either way */
                int ec = cc; /* COLS: the slot of this chunk and the column within it */
                const uint8_t *e = w.base + so;
                int64_t soff = w.soff, boff = w.boff;
                if constexpr (SHR)
                    if (sh) e = sh, soff = a.sso[wi], boff = a.sbo[wi];
                wt[u] = 1.f;
                if constexpr (EM == Q4DP_MOE_COLS) {
                    const int j = cc / a.slot;
                    ec = cc - j * a.slot;
                    if (j < a.k) {
                        e = w.base + (int64_t)ids[j] * w.stride;
                        wt[u] = swt[tok * a.k + j];
                    } else { /* the shared expert (a.sdata) */
                        e = a.sdata, soff = a.ssoff, boff = a.sboff;
                        wt[u] = ssg[tok];
                    }
                }
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int er = EM == Q4DP_MOE_ROWS ? er0 + r : min(er0 + r, rows - 1);
                    wv[u][r] = ld_stream(e + (int64_t)er * pitch + ec / 2);
                    sr[u][r] = ld_sraw(e + soff, a.sdt, er * ng + (ec >> a.lg));
                    br[u][r] = ld_sraw(e + boff, a.sdt, er * ng + (ec >> a.lg));
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (!ok[u]) continue;
                const int ch = ((st0 + u * ks) * 1024 + lane * 32) >> 5;
                int4 xq[2 * ND];
#pragma unroll
                for (int q = 0; q < 2 * ND; q++) xq[q] = xdt[q * nch + ch];
                const float2 sb = xst[ch];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t q[4] = {wv[u][r].x, wv[u][r].y, wv[u][r].z, wv[u][r].w};
                    uint32_t lo[4], hi[4];
#pragma unroll
                    for (int k = 0; k < 4; k++) lo[k] = q[k] & 0x0F0F0F0Fu, hi[k] = (q[k] >> 4) & 0x0F0F0F0Fu;
                    const float D = chunk_dot<ND>(lo, hi, xq);
                    float sc = sraw_f(sr[u][r], a.sdt), bc = sraw_f(br[u][r], a.sdt);
                    if constexpr (EM == Q4DP_MOE_COLS) sc = __fmul_rn(sc, wt[u]), bc = __fmul_rn(bc, wt[u]);
                    acc[r] = chunk_acc(sc, bc, sb, D, acc[r]);
                }
            }
        }
        float acc1[R][1];
#pragma unroll
        for (int r = 0; r < R; r++) acc1[r][0] = acc[r];
        float *yt = w.y + (int64_t)tok * a.rows;
        if (EM == Q4DP_MOE_COLS && a.sadd) {
            const float sg[1] = {sigmoid_f(a.sgate[tok])};
            rows_store<R, 1, WARPS, true>(acc1, red, ks, warp, lane, r0, vbl, yt, a.rows, a.sadd + (int64_t)tok * a.rows, sg);
        } else {
            rows_store<R, 1, WARPS>(acc1, red, ks, warp, lane, r0, vbl, yt, a.rows);
        }
    }
}

/* The routed down's digits made once (the default; TSC_MOE_DIG=0: every
 * block stages silu(g) * u of all the pass's columns itself, as before).
 * Why: under ncu (s43-run1, H200, 35B-A3B-8L decode) the down's 256 blocks
 * each spent 1,090 of their 1,920 instructions a warp and 55% of the stall
 * samples on that staging (4608 columns: 576 silu words, an expf and an
 * IEEE division an element, 36 KB from L2 a block), 13.4 us a launch at
 * ncu's clocks for ~5.3 MB, where the GDN out_proj (2048 x 4096, digits
 * made by the GDN step) took 5.6. Session 16 found the same for the dense
 * SwiGLU downs (stage_once's "Digits once"). Here k_stage_digits makes the
 * pass's digits (3 blocks a token; the same stage_word arithmetic, so the
 * same bytes) and every down block copies them (one L2 round trip): the
 * down 1,142 instructions a warp and 9.25 us under ncu. Measured (s43-run2,
 * H200, three rounds interleaved): 35B-A3B-8L decode 2,290-2,293 -> 2,423-
 * 2,425 tok/s (+5.8%; predicted +6-7%), the 40-layer 35B-A3B 548.8 ->
 * 587.7 (+7.1%), MTP 3 at forced acceptance 2,351 -> 2,525 (verify 0.886
 * -> 0.813 ms a block), output identical. Two more forms measured with it
 * and removed: the down's first weights asked into L2 before its PDL wait
 * (2,430-2,434: +0.4% in the three rounds, -0.4% and -0.3% in the single
 * MTP and 40-layer runs, so no clear gain) and the gate/up's right after
 * its wait, ahead of its staging (+262 instructions a warp: 2,415-2,421).
 * Read each pass (a benchmark switch, as TSC_MOE_SHGU; the bits are the
 * same either way). */
static bool moe_dig_on() { return ks_env("TSC_MOE_DIG", 1) != 0; }

/* U = 2 steps a round where some warp has two or more (U = 1 otherwise:
 * the second step's loads and address arithmetic were issued and thrown
 * away); the order of a lane's steps, and so the bits, are the same either
 * way */
template <int ND, int EM, bool SHR = false>
void launch_moe(tsc_ctx *c, const dx_args &a) {
    const int nsteps = (a.cols + 1023) >> 10;
    /* SHR at U = 1: ~80 registers against ~118, three blocks an SM, so
     * that the shared rows' extra virtual blocks (35B-A3B: 288 for 264
     * two-a-SM slots) still run in one round. Measured (s37-run1, H200,
     * 35B-A3B-8L decode): 2,144 tok/s against 2,109 at U = 2, which
     * TSC_MOE_SHGU=1 keeps for comparison (the same bits). */
    const bool u2 = nsteps > a.ks && !(SHR && ks_env("TSC_MOE_SHGU", 2) != 1);
    const size_t sb = stage_bytes(a.ntok, ND, a.cols);
    if (u2) launch_grid(c, k_q4dp_moe<ND, 2, EM, SHR>, a.nvb, sb, a);
    else launch_grid(c, k_q4dp_moe<ND, 1, EM, SHR>, a.nvb, sb, a);
}

/* TSC_Q4DP_PRE=1: k_q4dp's one-row launches load their first round before
 * the PDL wait (see k_q4dp; with TSC_Q4DP_BPS=1) */
int q4dp_pre(void) {
    static int v = -1;
    if (v < 0) v = ks_env("TSC_Q4DP_PRE", 0) == 1;
    return v;
}

/* DX (session 32): a one-row pass whose digits k_stage_digits made (the
 * SwiGLU downs: 32 of a 9B step's 129 products) reads them in its dot loop
 * from global memory (L1 after the first warp's touch) instead of copying
 * them into each block's shared memory behind a barrier first. The copy
 * (15 KB a 9B down, from L2) was ~1.1 us on the critical path after the PDL
 * release (sessions 16 and 19's traces); now each round's digits load with
 * its weights. (The first form read them in the arithmetic, an L2 latency
 * after the weights' every round: H200, s32-run1, the 9B step 1.955-1.966
 * ms against 1.939 copied; the default model's decode +1.9% and the 0.8B's
 * +3.7% even so.) DX = 2 also loads the first round of weights into
 * registers before the PDL wait (PRE): a down follows k_stage_digits, a
 * launch of a few blocks, so its blocks are resident while that kernel runs
 * (PRE lost as the default for every one-row launch: a product's
 * successor is not resident before the product ends). The same values in
 * the same operations: the same bits in every form. Measured (H200,
 * s32-run2, engine decode, medians of three): the 9B 509.5 tok/s copied,
 * 512.9 with DX = 2 (and 521.0 with the one-row plain passes' digits made
 * once too: dig_takes); the 0.8B 1,374 -> 1,427, the default model 4,224
 * -> 4,306. DX = 2 is the default; TSC_Q4DP_DX=0|1|2 picks the form (a
 * benchmark switch, read once). */
int q4dp_dx(void) {
    static int v = -1;
    if (v < 0) {
        v = ks_env("TSC_Q4DP_DX", 2);
        if (v < 0 || v > 2) v = 2;
    }
    return v;
}

/* k_q4dp_as for a pass of nr rows: its ring's depth S (see there), or 0
 * for k_q4dp. Several rows: 2 slots (session 16's measurement; 3 measured
 * no better in session 17), the digits made once (session 36 staged a
 * several-row normed pass in the ring's own blocks instead, as one row
 * is: exact, but a 9B 4-row step 2.85 -> 3.42 ms on an H100; the floor
 * its prediction missed: each of the 264 blocks reads every row's x and
 * add from L2, ~34 MB a 4-row product against ~5 MB of copied digits;
 * and reading the copied digits where they lie in the dot loop, as
 * k_q4dp's one-row DX form does, took it to 4.42 ms (not profiled; likely
 * each step waiting on those loads); both removed, bench/cuda/RESULTS.md).
 * One row: k_q4dp, by
 * measurement (session 17, bench/cuda/RESULTS.md): every one-row pass on
 * the ring (TSC_Q4DP_AS1=2) took the 9B step from 2.05 to 2.54 ms, the
 * plain passes alone (TSC_Q4DP_AS1=1: out_proj, o_proj) to 2.20. The copies
 * a block issues before its PDL wait are in the memory pipeline when the
 * block stages x (its sums of squares and x itself from L2): the staging,
 * on the step's critical path, waits behind them (normed 3.6 -> 4.2 us, plain
 * 1.6 -> 3.0 us a launch), the PDL releases spread over ~4 us and block 0's
 * output barrier waits for the last block. The ring wins a plain launch only
 * when its blocks are resident long before the release (with TSC_PDL_EARLY=1:
 * 5.3 -> 3.9 us), and the early trigger loses more elsewhere. S is the
 * deepest (at most 4 slots) that keeps two blocks an SM. TSC_Q4DP_AS=0 keeps
 * k_q4dp for several rows; TSC_Q4DP_AS_S=2|3|4 forces the depth where it
 * fits. (Session 24 tried the ring for the one-row passes whose digits are
 * made once, the SwiGLU downs, whose 2-row pass on the ring took 12.3 us
 * against 13.1 for one row on k_q4dp: the 9B step 2.02 -> 2.16 ms, decode
 * 476 -> 428 tok/s, s24-run1; removed.) Benchmark switches: a row's bits
 * are the same either way. */
int as_takes(const dp_args &a, const tsc_weight *const *w, int nw, int nd, int nr) {
    static int on = -1, on1 = -1, forced = -1;
    if (on < 0) {
        on = ks_env("TSC_Q4DP_AS", 1) != 0, on1 = ks_env("TSC_Q4DP_AS1", 0);
        forced = ks_env("TSC_Q4DP_AS_S", 0);
        if (forced < 2 || forced > 4) forced = 0;
    }
    if (!(nr == 1 ? on1 == 2 || (on1 == 1 && a.xm == Q4DP_XM_PLAIN) : on) || nd != 1 || (nr > 1 && !a.dg) ||
        (a.cols >> a.lg) % 2)
        return 0;
    if (!a.dg && a.xm != Q4DP_XM_PLAIN && !a.bar) return 0; /* in-block staging writes its outputs through bar */
    for (int i = 0; i < nw; i++)
        if ((uintptr_t)w[i]->scales % 4 || (uintptr_t)w[i]->biases % 4) return 0;
    if (forced) {
        for (int s = forced; s >= 2; s--)
            if (as_smem(nr, nd, a.cols, s) <= AS_SMEM_MAX) return s;
        return 0;
    }
    if (nr > 1) return as_smem(nr, nd, a.cols, 2) <= AS_SMEM_MAX ? 2 : 0;
    for (int s = 4; s >= 2; s--)
        if (as_smem(nr, nd, a.cols, s) <= AS_SMEM_2) return s;
    return 0;
}

/* a KS forced by a benchmark switch (1, 2, 4 or 8: halved while it would
 * leave warps without a unit of columns to stream), or 0 */
int forced_ks(int forced, int64_t units) {
    if (forced != 1 && forced != 2 && forced != 4 && forced != 8) return 0;
    int ks = 1;
    while (ks < forced && 2 * ks <= units) ks *= 2;
    return ks;
}

/* KS: warps of a block splitting a weight's columns (a step is 32 lanes x
 * 32 columns), from the weight's shape only (the verify rule).
 * Rule 0 (rows.cuh, linear.cu's): split until the weight alone has 2 blocks
 * an SM. It rounds badly where the count lands just under that: 4096 rows
 * (the 9B's out_proj, o_proj and down) have 256 blocks at KS = 2 against
 * 264 slots on 132 SMs, so the rule goes on to KS = 4 and two waves of one
 * step each, a DRAM latency apiece. Rule 1: the fewest rounds, a round
 * costing a fixed part (latency and reduction, ~3 steps, a guess the sweep
 * in bench/cuda/RESULTS.md measures) plus the steps a warp streams:
 * cost(KS) = waves * (3 + ceil(steps / KS)), waves over 2 blocks an SM.
 * TSC_Q4DP_KS=1|2|4|8 forces KS and TSC_Q4DP_KSRULE=0|1 picks the rule:
 * benchmark switches (a row's bits depend on KS, not on the row count). */
int pick_ks(int64_t rows, int cols, int n_sm) {
    static int forced = -2, rule = -1;
    if (forced == -2) forced = ks_env("TSC_Q4DP_KS", 0), rule = ks_env("TSC_Q4DP_KSRULE", 1);
    const int64_t steps = (cols + 1023) / 1024;
    if (const int f = forced_ks(forced, steps)) return f;
    if (rule != 1) return rows_pick_ks(rows, steps, R, WARPS, n_sm);
    const int64_t slots = q4dp_bps() * (int64_t)n_sm;
    int best = 1;
    int64_t best_cost = -1;
    for (int ks = 1; ks <= WARPS && ks <= steps; ks *= 2) {
        const int64_t rpb = (int64_t)R * (WARPS / ks), vbs = (rows + rpb - 1) / rpb;
        const int64_t cost = (vbs + slots - 1) / slots * (3 + (steps + ks - 1) / ks);
        if (best_cost < 0 || cost < best_cost) best = ks, best_cost = cost;
    }
    return best;
}

/* k_q4dp_as at the ring depth a.as (2, 3 or 4; as_takes) */
template <int NR, int ND>
int launch_as(tsc_ctx *c, const dp_args &a) {
    const size_t smem = as_smem(NR, ND, a.cols, a.as);
    /* 5..7 rows (the verify of 4..6 drafts) at the several-row depth only
     * (TSC_Q4DP_AS_S forces 3 and 4 for 1..4 and 8 rows) */
    if constexpr (NR >= 5 && NR <= 7) {
        return launch_grid(c, k_q4dp_as<NR, ND, 2>, a.nvb, as_smem(NR, ND, a.cols, 2), a, 0, AS_SMEM_MAX);
    } else {
        if (a.as == 4) return launch_grid(c, k_q4dp_as<NR, ND, 4>, a.nvb, smem, a, 0, AS_SMEM_MAX);
        if (a.as == 3) return launch_grid(c, k_q4dp_as<NR, ND, 3>, a.nvb, smem, a, 0, AS_SMEM_MAX);
        return launch_grid(c, k_q4dp_as<NR, ND, 2>, a.nvb, smem, a, 0, AS_SMEM_MAX);
    }
}

#ifdef TSC_TRACE
struct trace_meta {
    int nr, cols, xm, nw, nvb, grid;
    int64_t rows;
};
trace_meta trace_launch[TRACE_L];
int trace_next;
#endif

template <int NR, int ND, int U>
void launch(tsc_ctx *c, const dp_args &a0) {
    const dp_args *ap = &a0;
#ifdef TSC_TRACE
    dp_args at = a0;
    at.tid = trace_next % TRACE_L;
    trace_meta &m = trace_launch[at.tid];
    m.nr = NR, m.cols = at.cols, m.xm = at.xm, m.nw = at.nw, m.nvb = at.nvb, m.rows = 0;
    for (int i = 0; i < at.nw; i++) m.rows += at.w[i].rows;
    trace_next++;
    ap = &at;
#endif
    const dp_args &a = *ap;
    int grid = 0; /* a launch's grid is at least 1 block */
    const size_t smem = stage_bytes(NR, ND, a.cols);
    if constexpr (ND == 1) {
        if (a.as) grid = launch_as<NR, ND>(c, a);
    }
    if constexpr (NR == 1) {
        if (!grid && q4dp_pre()) grid = launch_grid(c, k_q4dp<NR, ND, U, true>, a.nvb, smem, a, q4dp_bps());
        /* digits made once, read where they lie (q4dp_dx) */
        if (!grid && a.dg && q4dp_dx() == 1)
            grid = launch_grid(c, k_q4dp<NR, ND, U, false, false, true>, a.nvb, 0, a, q4dp_bps());
        if (!grid && a.dg && q4dp_dx() == 2)
            grid = launch_grid(c, k_q4dp<NR, ND, U, true, false, true>, a.nvb, 0, a, q4dp_bps());
    }
    if constexpr (NR == 1 && U <= 2) {
        /* a normed row staged in the blocks, in one pass (stage_norm_words) */
        if (!grid && a.xm == Q4DP_XM_NORM && !a.dg && norm1_fits(a.cols) && q4dp_n1())
            grid = launch_grid(c, k_q4dp<NR, ND, U, false, true>, a.nvb, smem, a, q4dp_bps());
    }
    if (!grid) grid = launch_grid(c, k_q4dp<NR, ND, U>, a.nvb, smem, a, q4dp_bps());
#ifdef TSC_TRACE
    m.grid = grid; /* the launch's own */
#else
    (void)grid;
#endif
}

/* Steps a round (U): 1 or 2, from the launch's shape and the digits
 * (bench/cuda/RESULTS.md, dp4a runs). 24-bit x (3 digits, 24 dp4a a row
 * chunk): U = 2 streams the large products faster (head 89% of the probe
 * against 81% at U = 1), U = 1 the short ones (4096 x 4096 at 33% against
 * 30%), so U = 2 when each resident warp has 8 or more steps to stream.
 * (The 9B engine, whose products ran at 24 bits then: 340.6 tok/s with this
 * choice, 330.9 with U = 1 everywhere.) 8- and 16-bit x (the engine's
 * default is 8: TS_ACT_BITS_DEFAULT), a third or two thirds of the
 * arithmetic: U = 2 for every shape (cuda_bench --mlx --digits 1, the 9B
 * step: 2.402 ms at U = 2, 2.465 at U = 1).
 * U = 3, 4 (1 block an SM: more registers) and 8 (spills) were slower
 * everywhere. TSC_Q4DP_U=1|2 (and 3|4|8 for 24-bit) overrides it, a
 * benchmark switch. A row's bits do not depend on U (the same operations in
 * the same order). */
int pick_u(int warp_steps, int nd) {
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("TSC_Q4DP_U");
        forced = e ? atoi(e) : 0;
        if (forced != 1 && forced != 2 && forced != 3 && forced != 4 && forced != 8) forced = 0;
    }
    if (forced) return nd < 3 && forced > 2 ? 2 : forced;
    return nd < 3 || warp_steps >= 8 ? 2 : 1;
}

template <int NR, int ND>
void launch_u(tsc_ctx *c, const dp_args &a, int u) {
    if constexpr (NR >= 5 && NR <= 7) {
        (void)u; /* U = 2 (TSC_Q4DP_UROWS=2): 4 and 8 rows only */
        launch<NR, ND, 1>(c, a);
    } else {
        if constexpr (ND == 3) {
            if (u == 3) return launch<NR, ND, 3>(c, a);
            if (u == 4) return launch<NR, ND, 4>(c, a);
            if (u == 8) return launch<NR, ND, 8>(c, a);
        }
        if (u == 2) return launch<NR, ND, 2>(c, a);
        launch<NR, ND, 1>(c, a);
    }
}

template <int ND>
void launch_nr(tsc_ctx *c, const dp_args &a, int nr, int u) {
    switch (nr) {
    case 1: launch_u<1, ND>(c, a, u); break;
    case 2: launch_u<2, ND>(c, a, u); break;
    case 3: launch_u<3, ND>(c, a, u); break;
    case 4: launch_u<4, ND>(c, a, u); break;
    default:
        if constexpr (ND == 1) {
            if (nr == 5) launch_u<5, ND>(c, a, u);
            else if (nr == 6) launch_u<6, ND>(c, a, u);
            else if (nr == 7) launch_u<7, ND>(c, a, u);
            else launch_u<8, ND>(c, a, u);
        }
        break;
    }
}

/* Rows a pass and U for several rows (a row's bits depend on neither):
 * 8 x rows a launch for 8-bit x (the default; 4 with TSC_Q4DP_ROWS=4, and
 * for 16- and 24-bit x, which have no 8-row kernel): each pass reads the
 * weights again, and with the digits made once 16 rows cost 10.1 ms in two
 * passes of 8 against 12.4 in four of 4 on the 9B (session 16);
 * TSC_Q4DP_UROWS=2 gives them U = 2 rounds (more registers: one block an
 * SM; no gain measured: a benchmark switch). */
int rows_per_pass(int nd) {
    static int v = 0;
    if (!v) v = ks_env("TSC_Q4DP_ROWS", 8) == 4 ? 4 : 8;
    return nd == 1 ? v : 4;
}
/* the x rows a pass of q4dp_linear_staged takes: rows_per_pass, fewer
 * where the staged digits would not fit (tsc_digits_group asks the same) */
int pass_rows(int nd, int cols) {
    int per = rows_per_pass(nd);
    while (per > 1 && stage_bytes(per, nd, cols) > SMEM_MAX) per--;
    return per;
}
int u_rows(void) {
    static int v = 0;
    if (!v) v = ks_env("TSC_Q4DP_UROWS", 1) == 2 ? 2 : 1;
    return v;
}

int enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TSC_Q4DP");
        on = !(e && e[0] == '0');
    }
    return on;
}

/* k_q4mm for w (8-bit x, a group of 32, 64 or 128) when TSC_Q4MM=1:
 * off by default, because at one row it is 1.7x slower than k_q4dp on the
 * 9B step (2.214 against 3.775 ms; it wins only at 8-16 rows: 20.5 against
 * 17.7 ms at 16; bench/cuda/RESULTS.md, session 12), and decode and verify
 * must run one kernel. The switch changes the bits, for all row counts alike, so it is
 * read at every launch (the tests turn it on and off; its host cost was not
 * measured, and captured graphs do not repeat it): never flip it inside one
 * session. */
bool mm_takes(const tsc_weight *w) {
    const char *e = getenv("TSC_Q4MM");
    const bool on = e && e[0] == '1';
    const int nd = w->act_digits ? w->act_digits : 3;
    return on && nd == 1 && (w->group == 32 || w->group == 64 || w->group == 128) &&
           mm_stage_bytes(1, (int)w->cols, w->group) <= SMEM_MAX;
}

/* KS for k_q4mm, from the shape only (the verify rule): k_q4dp's rule 1
 * in its units (a round: UG groups of 16 rows, 4 KB a warp at G = 64; the
 * fixed part of a wave ~2 rounds). TSC_Q4MM_KS=1|2|4|8 forces it. */
int pick_ks_mm(int64_t rows, int cols, int group, int n_sm) {
    static int forced = -2;
    if (forced == -2) forced = ks_env("TSC_Q4MM_KS", 0);
    const int ng = cols / group, ug = mm_ug(group);
    if (const int f = forced_ks(forced, ng)) return f;
    const int64_t slots = 2 * (int64_t)n_sm;
    int best = 1;
    int64_t best_cost = -1;
    for (int ks = 1; ks <= WARPS && (ks == 1 || (int64_t)(ks - 1) * mm_per(ng, ks, ug) < ng); ks *= 2) {
        /* (every warp of the split gets groups: an empty range would be
         * harmless, but it is a warp that streams nothing) */
        const int64_t rpb = (int64_t)MR * (WARPS / ks), vbs = (rows + rpb - 1) / rpb;
        const int64_t rounds = mm_per(ng, ks, ug) / ug;
        const int64_t cost = (vbs + slots - 1) / slots * (2 + rounds);
        if (best_cost < 0 || cost < best_cost) best = ks, best_cost = cost;
    }
    return best;
}

template <int WPT, int NO, bool ONE>
void launch_mm(tsc_ctx *c, const dp_args &a) {
    launch_grid(c, k_q4mm<WPT, NO, ONE>, a.nvb, mm_stage_bytes(a.nr, a.cols, a.group), a);
}

template <int WPT>
void launch_mm_n(tsc_ctx *c, const dp_args &a) {
    if (a.nr == 1) return launch_mm<WPT, 1, true>(c, a);
    if (a.nr <= 8) return launch_mm<WPT, 1, false>(c, a);
    launch_mm<WPT, 2, false>(c, a);
}

/* q4dp_linear_staged through k_q4mm: passes of up to 16 rows (fewer where
 * the staged digits would not fit; each row's bits do not change) */
void mm_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, dp_args &a, const float *x, const float *add,
               const float *u, float *x_out, float *y_out, float *const *y, int n) {
    const int cols = a.cols;
    int nblk = 0;
    for (int i = 0; i < nw; i++) {
        dp_w &lw = a.w[i];
        lw.ks = pick_ks_mm(lw.rows, cols, a.group, c->n_sm);
        lw.blk0 = nblk;
        /* a round's UG elements of a row start at a multiple of UG (ng and
         * every range start are), on 16-byte aligned arrays */
        const int ng = cols / a.group, ug = mm_ug(a.group);
        lw.sv = ng % ug == 0 && (uintptr_t)lw.scales % 16 == 0 && (uintptr_t)lw.biases % 16 == 0;
        const int64_t rpb = (int64_t)MR * (WARPS / lw.ks);
        nblk += (int)((lw.rows + rpb - 1) / rpb);
    }
    a.nvb = nblk;
    int per = TSC_ROWS_MAX;
    while (per > 1 && mm_stage_bytes(per, cols, a.group) > SMEM_MAX) per--;
    for (int i0 = 0; i0 < n; i0 += per) {
        a.nr = n - i0 < per ? n - i0 : per;
        at_pass(a, w, nw, x, add, u, x_out, y_out, y, i0);
        switch (a.group) {
        case 32: launch_mm_n<1>(c, a); break;
        case 64: launch_mm_n<2>(c, a); break;
        default: launch_mm_n<4>(c, a); break;
        }
        TSC_LAUNCHED(c, "tsc_linear (4-bit, mma)");
    }
}

} // namespace

extern "C" size_t tsc_digits_ws_bytes(void) { return SMEM_MAX; }

/* q4dp_linear_staged's choices for a plain pass of n rows of w (one pass:
 * pass_rows) that lead to stage_once's k_stage_digits for 8-bit x. (Whether
 * a kernel before the product makes them is its caller's switch:
 * tsc_ctx.gdn_dig, tsc_ctx.attn_dig.) */
extern "C" int tsc_digits_group(const tsc_ctx *c, const tsc_weight *w, int n) {
    if (!c || !c->dg || !q4dp_takes(w) || w->act_digits != 1) return 0;
    if (w->group != 32 && w->group != 64 && w->group != 128) return 0;
    if (mm_takes(w) || q4g_takes(&w, 1, 1) || !dig_takes(Q4DP_XM_PLAIN, n)) return 0;
    const int cols = (int)w->cols;
    if (n < 1 || n > pass_rows(1, cols) || stage_bytes(n, 1, cols) > c->dg_bytes) return 0;
    return w->group;
}

bool q4dp_takes(const tsc_weight *w) {
    if (!enabled() || w->dtype != TS_DTYPE_U32 || w->bits != 4 || w->layout != TSC_LAYOUT_MLX) return false;
    if (w->group < 32 || w->group > 256 || (w->group & (w->group - 1)) || w->cols % w->group || w->cols > (1 << 24))
        return false;
    const int nd = w->act_digits ? w->act_digits : 3;
    if (nd < 1 || nd > 3) return false;
    return stage_bytes(1, nd, (int)w->cols) <= SMEM_MAX;
}

void q4dp_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    q4dp_linear_staged(c, w, nw, Q4DP_XM_PLAIN, x, NULL, NULL, NULL, 0.f, NULL, NULL, NULL, y, n);
}

void q4dp_linear_staged(tsc_ctx *c, const tsc_weight *const *w, int nw, int xm, const float *x, const float *add,
                        const float *norm_w, const float *u, float eps, float *x_out, float *y_out, unsigned *bar,
                        float *const *y, int n) {
    const int nd = w[0]->act_digits ? w[0]->act_digits : 3;
    const int cols = (int)w[0]->cols;
    /* (k_q4mm first when both are asked for; q4g_linear makes its own dp_args) */
    if (!mm_takes(w[0]) && q4g_takes(w, nw, nd))
        return q4g_linear(c, w, nw, xm, x, add, norm_w, u, eps, x_out, y_out, bar, y, n); /* q4grp.cu */
    dp_args a;
    dp_setup(a, w, nw, xm, norm_w, u, eps, bar);
    if (mm_takes(w[0])) return mm_linear(c, w, nw, a, x, add, u, x_out, y_out, y, n);
    int nblk = 0;
    int64_t steps = 0; /* warp steps of the launch */
    for (int i = 0; i < nw; i++) {
        dp_w &lw = a.w[i];
        lw.ks = pick_ks(w[i]->rows, cols, c->n_sm);
        lw.blk0 = nblk;
        const int64_t rpb = (int64_t)R * (WARPS / lw.ks);
        const int64_t vbs = (lw.rows + rpb - 1) / rpb;
        nblk += (int)vbs;
        steps += vbs * WARPS * ((((int64_t)cols + 1023) / 1024 + lw.ks - 1) / lw.ks);
    }
    a.nvb = nblk;
    /* resident warps at 2 blocks an SM (the 1-row kernels' occupancy) */
    const int ur = pick_u((int)(steps / ((int64_t)q4dp_bps() * WARPS * c->n_sm)), nd);
    /* rows per pass: up to 4 (8: rows_per_pass), fewer where the staged
     * digits would not fit (the passes read the weights again; each row's
     * bits do not change) */
    const int per = pass_rows(nd, cols);
    for (int i0 = 0, nr; i0 < n; i0 += nr) {
        nr = n - i0 < per ? n - i0 : per;
        /* 8-bit x has kernels of 1..8 rows; 16- and 24-bit x of 1..4 (per
         * is 4 there). 5..7 rows went as a pass of 4 and another, which read
         * every weight twice: a 5-row verify of the 9B cost 2.29x a step
         * against 1.46x for 4 rows (cuda_bench, session 22) */
        at_pass(a, w, nw, x, add, u, x_out, y_out, y, i0);
        const int u1 = nr == 1 ? ur : u_rows(); /* several rows: U = 2 needs 154-164 registers (1 block an SM) */
        stage_once(c, a, nr, nd);
        a.as = as_takes(a, w, nw, nd, nr);
        switch (nd) {
        case 1: launch_nr<1>(c, a, nr, u1); break;
        case 2: launch_nr<2>(c, a, nr, u1); break;
        default: launch_nr<3>(c, a, nr, u1); break;
        }
        TSC_LAUNCHED(c, "tsc_linear (4-bit, dp4a)");
    }
}

bool q4dp_moe_takes(const tsc_weight *w, int k, int em) {
    if (!q4dp_takes(w) || k < 1) return false;
    const int nd = w->act_digits ? w->act_digits : 3;
    /* 32-bit index arithmetic: the stacked rows, a slot's bytes and groups */
    if (k > MOE_ROUTES / MOE_TOK || (int64_t)k * w->rows >= (1ll << 30) || w->rows * (w->cols / 2) >= (1ll << 31))
        return false;
    if (em == Q4DP_MOE_ROWS) return w->rows % R == 0; /* a warp's R rows in one slot */
    const int64_t cols = (int64_t)k * w->cols;
    return cols <= (1 << 24) && stage_bytes(1, nd, (int)cols) <= SMEM_MAX;
}

bool q4dp_moe_shared_takes(const tsc_weight *d, const tsc_weight *sw, int k) {
    /* one launch's rule (tsc.h) makes sw a weight the same kernel reads as d */
    return q4dp_moe_takes(d, k + 1, Q4DP_MOE_COLS) && sw->rows == d->rows && tsc_linear_one_launch(sw, d);
}

bool q4dp_moe_shared_rows_takes(const tsc_weight *g, const tsc_weight *sg, int k) {
    return q4dp_moe_takes(g, k, Q4DP_MOE_ROWS) && tsc_linear_one_launch(sg, g) && sg->rows % R == 0 &&
           (int64_t)k * g->rows + sg->rows < (1ll << 30) && sg->rows * (sg->cols / 2) < (1ll << 31);
}

void q4dp_moe(tsc_ctx *c, const tsc_weight *const *w, const int64_t *stride, int nw, int em, const int32_t *ids,
              const float *wts, int k, const float *x, const float *u, const float *add, const float *gate,
              float *const *y, int ntok, const tsc_weight *sw, const float *x2, const float *u2,
              const tsc_weight *const *srw) {
    const int nd = w[0]->act_digits ? w[0]->act_digits : 3;
    dx_args a;
    memset(&a, 0, sizeof a);
    a.nw = nw;
    a.k = k;
    a.slot = (int)(em == Q4DP_MOE_ROWS ? w[0]->rows : w[0]->cols);
    a.rows = em == Q4DP_MOE_ROWS ? (int64_t)k * w[0]->rows : w[0]->rows;
    a.cols = (int)(em == Q4DP_MOE_ROWS ? w[0]->cols : (int64_t)k * w[0]->cols);
    a.c2 = a.cols;
    if (sw && em == Q4DP_MOE_COLS) { /* the shared expert: slot k */
        a.sdata = (const uint8_t *)sw->data;
        a.ssoff = (const uint8_t *)sw->scales - a.sdata, a.sboff = (const uint8_t *)sw->biases - a.sdata;
        a.cols += (int)w[0]->cols;
        if (!x2) a.c2 = a.cols; /* its hidden rows after the routed ones in x and u (a SHR gate/up's output) */
    }
    const bool shr = srw && em == Q4DP_MOE_ROWS;
    if (shr) a.rows += srw[0]->rows; /* the shared expert's rows: slot k of the stack */
    a.group = w[0]->group;
    a.lg = 0;
    while ((1 << (a.lg + 1)) <= a.group) a.lg++;
    a.sdt = (int)w[0]->sdtype;
    a.xm = u ? Q4DP_XM_SWIGLU : Q4DP_XM_PLAIN;
    for (int i = 0; i < nw; i++) {
        const uint8_t *b = (const uint8_t *)w[i]->data;
        a.w[i].base = b, a.w[i].stride = stride[i];
        a.w[i].soff = (const uint8_t *)w[i]->scales - b, a.w[i].boff = (const uint8_t *)w[i]->biases - b;
        if (shr) {
            const uint8_t *sb = (const uint8_t *)srw[i]->data;
            a.sbase[i] = sb;
            a.sso[i] = (const uint8_t *)srw[i]->scales - sb, a.sbo[i] = (const uint8_t *)srw[i]->biases - sb;
        }
    }
    /* KS from all the launch's rows (every weight of it: gate and up are
     * one launch; one weight's rows gave the 35B-A3B's gate/up KS = 2 and
     * two virtual blocks a block, one after the other), still the shape's
     * alone: the same for every token count (the verify rule) */
    a.ks = pick_ks(a.rows * nw, a.cols, c->n_sm);
    const int64_t rpb = (int64_t)R * (WARPS / a.ks);
    a.vpw = (int)((a.rows + rpb - 1) / rpb);
    a.vpt = nw * a.vpw;
    /* tokens a pass: as many as their staged digits fit, at most MOE_TOK
     * (the routes a block keeps; q4dp_moe_takes asks k <= 32) */
    int per = MOE_TOK;
    while (per > 1 && stage_bytes(per, nd, a.cols) > SMEM_MAX) per--;
    for (int t0 = 0; t0 < ntok; t0 += per) {
        a.ntok = ntok - t0 < per ? ntok - t0 : per;
        a.nvb = a.ntok * a.vpt;
        a.ids = ids + (int64_t)t0 * k;
        a.wts = wts ? wts + (int64_t)t0 * k : NULL;
        a.x = x + (int64_t)t0 * a.c2;
        a.u = u ? u + (int64_t)t0 * a.c2 : NULL;
        a.sadd = add && em == Q4DP_MOE_COLS ? add + (int64_t)t0 * a.rows : NULL;
        a.sgate = a.sadd || a.sdata ? gate + t0 : NULL;
        a.x2 = a.sdata && x2 ? x2 + (int64_t)t0 * w[0]->cols : NULL;
        a.u2 = a.sdata && x2 && u2 ? u2 + (int64_t)t0 * w[0]->cols : NULL;
        for (int i = 0; i < nw; i++) a.w[i].y = y[i] + (int64_t)t0 * a.rows;
        const bool rows = em == Q4DP_MOE_ROWS;
        a.dg = NULL;
        /* the gate/up's digits made by the route launch just before
         * (tsc_moe_route_digits: no launch since, the same x, rows, columns
         * and group) */
        if (rows && !a.u && nd == 1 && c->dg && tsc_dg_made(c, a.x, a.ntok, a.cols, a.group)) a.dg = (const int4 *)c->dg;
        /* moe_dig_on: the pass's x and u one [ntok][cols] array each (a
         * down whose shared hidden rows lie elsewhere, x2, stages itself) */
        if (!rows && a.u && a.c2 == a.cols && moe_dig_on() && c->dg && stage_bytes(a.ntok, nd, a.cols) <= c->dg_bytes) {
            sd_args s;
            memset(&s, 0, sizeof s);
            s.xm = Q4DP_XM_SWIGLU, s.cols = a.cols, s.group = a.group;
            s.x = a.x, s.u = a.u;
            s.dg = (int4 *)c->dg;
            launch_stage_digits(c, s, a.ntok, nd);
            TSC_LAUNCHED(c, "MoE experts (down: digits)");
            c->dg_x = NULL; /* the scratch no longer holds what a GDN step made */
            a.dg = (const int4 *)c->dg;
        }
        switch (nd) {
        case 1:
            shr ? launch_moe<1, Q4DP_MOE_ROWS, true>(c, a)
            : rows ? launch_moe<1, Q4DP_MOE_ROWS>(c, a) : launch_moe<1, Q4DP_MOE_COLS>(c, a);
            break;
        case 2:
            shr ? launch_moe<2, Q4DP_MOE_ROWS, true>(c, a)
            : rows ? launch_moe<2, Q4DP_MOE_ROWS>(c, a) : launch_moe<2, Q4DP_MOE_COLS>(c, a);
            break;
        default:
            shr ? launch_moe<3, Q4DP_MOE_ROWS, true>(c, a)
            : rows ? launch_moe<3, Q4DP_MOE_ROWS>(c, a) : launch_moe<3, Q4DP_MOE_COLS>(c, a);
            break;
        }
        TSC_LAUNCHED(c, rows ? "MoE experts (gate, up; dp4a)" : "MoE experts (down; dp4a)");
    }
}

/* The trace build's timeline (see trace_at): reset before capturing, dump
 * after the replays. Without TSC_TRACE both say so and do nothing. */
extern "C" void tsc_trace_reset(void) {
#ifdef TSC_TRACE
    trace_next = 0;
    tsc_tr_reset_all(); /* every kernel's ring (common.cuh, TSC_ENTRY) */
#endif
}

extern "C" int tsc_trace_dump(tsc_ctx *c, const char *path) {
#ifdef TSC_TRACE
    const int nl = trace_next < TRACE_L ? trace_next : TRACE_L;
    const size_t nt = (size_t)TRACE_L * TRACE_B * 4, ns = (size_t)TRACE_L * TRACE_B;
    unsigned long long *t = (unsigned long long *)malloc(nt * sizeof *t);
    unsigned *smv = (unsigned *)malloc(ns * sizeof *smv);
    FILE *f = fopen(path, "w");
    if (!t || !smv || !f || cudaMemcpyFromSymbol(t, q4dp_trace_t, nt * sizeof *t) != cudaSuccess ||
        cudaMemcpyFromSymbol(smv, q4dp_trace_sm, ns * sizeof *smv) != cudaSuccess) {
        free(t), free(smv);
        if (f) fclose(f);
        return -1;
    }
    fprintf(f, "# n_sm %d bps %d pre %d launches %d\n", c->n_sm, q4dp_bps(), q4dp_pre(), nl);
    for (int l = 0; l < nl; l++) {
        const trace_meta &m = trace_launch[l];
        fprintf(f, "L %d nr %d cols %d xm %d nw %d rows %lld nvb %d grid %d\n", l, m.nr, m.cols, m.xm, m.nw,
                (long long)m.rows, m.nvb, m.grid);
        for (int b = 0; b < m.grid && b < TRACE_B; b++) {
            const unsigned long long *e = t + ((size_t)l * TRACE_B + b) * 4;
            fprintf(f, "B %d %d %u %llu %llu %llu %llu\n", l, b, smv[(size_t)l * TRACE_B + b], e[0], e[1], e[2], e[3]);
        }
    }
    tsc_tr_dump_all(f); /* then every kernel's blocks since the reset (K lines) */
    fclose(f);
    free(t), free(smv);
    return nl;
#else
    (void)c, (void)path;
    return -1;
#endif
}
