/* q4grp.cu: the 4-bit products in the group numerics (TSC_Q4G=1): a scale
 * step per quantization group, k_q4g (dp4a) for 1 and 2 rows and k_q4gm
 * (mma) for 3..16 (g_dp_max), the same bits for every row count.
 *
 * Owns: the two kernels, their launch plan, q4g_takes / q4g_linear (called
 * by q4dp.cu's q4dp_linear_staged). Does not own: the staging of x and the
 * other shared pieces (q4dp_impl.cuh), k_q4dp's per-chunk numerics
 * (q4dp.cu).
 *
 * Why. A verify pass of M + 1 rows must give every row a decode row's bits,
 * and k_q4dp's numerics take a scale step per 32-column lane chunk: a
 * kernel with those bits pays ~4 operations per (row, 32 columns, x row)
 * after the integer products, whatever computes them. That is where a
 * verify's time went: the 9B step's products at 4 rows cost 1.43x one row
 * (cuda_bench, s23-run1: 1.635 -> 2.334 ms; the head 142 -> 213 us, every
 * group 1.26-1.50x), 0.70 of the 4-row step's extra 0.93 ms. Here the
 * numerics are chosen so that a tensor-core kernel reproduces them.
 *
 * Numerics (8-bit x, ND = 1, the engine's default; groups of 32, 64, 128).
 * Per (output, x row) and quantization group g: D_g = sum_c q_c X_c over
 * the group (exact integers, in any order), then chunk_acc's step acc =
 * (s_g * sx_g) * D_g + (b_g * (sx_g * sum_g X) + acc), x's scale pair per
 * group (stage_word's MM form). The steps land on 32 slot accumulators in
 * a fixed order: a step is 32 groups, slot l of step st takes group
 * st * 32 + gof(l), a slot its groups in step order; the 32 slots are then
 * summed as warp_sum sums lanes (the xor tree 16, 8, 4, 2, 1). No column
 * split (KS = 1 for every shape): k_q4gm would otherwise keep a slice's
 * accumulators each (its registers set its occupancy), and k_q4g finds its
 * parallelism in rows instead (RG rows a warp, g_rg).
 *
 * k_q4g (dp4a; decode's one-row passes and, since session 24, verify
 * passes of 2 rows, where k_q4gm cost 1.33x one row against k_q4g's 1.22x;
 * g_dp_max): k_q4dp's shape (RG rows a warp,
 * persistent blocks; no KS), a lane's step one group of each
 * of its rows: WPT = G / 32 16-byte loads, load m at bytes 512 m + 16 lane
 * of the step (the warp's loads coalesced: lane l holds part l % WPT of
 * group (32 m + l) / WPT), the parts' integer sums exchanged within teams
 * of WPT lanes (team_sum: exact) so that lane l ends with group gof(l) =
 * (32 / WPT) (l % WPT) + l / WPT whole; then the step on its accumulator.
 *
 * k_q4gm (mma; verify's passes of 2..16 rows): a virtual block is 16 rows
 * (the mma's M) of one weight over all its columns; warp w owns slots w,
 * w + 8, w + 16 and w + 24 of every step (4 groups: 16 NO accumulators a
 * thread); mma.m16n8k32 (u4 nibbles x s8
 * digits, s32, k_q4mm's fragments) makes each group's D for 16 rows x 8 x
 * rows in WPT instructions into one accumulator, and the thread applies
 * the step to its C values. The xor tree's levels 16 and 8 pair a warp's
 * own slots (w + w + 16, w + 8 + w + 24, then the two), levels 4, 2, 1
 * pair warps (through shared memory, in that order): k_q4g's bits for
 * every row.
 *
 * Floors (9B shapes, H200): the bytes are k_q4dp's (head 572 MB: 133 us at
 * 4.3 TB/s). Instructions of k_q4gm a warp a step (16 rows x 4 groups of
 * 64): 8 weight loads, 48 unpacking, 8 B-fragment loads, 8 mma, 16 scale
 * loads and 16 conversions, 4 x-scale loads, 64 step operations: ~170 per
 * 4096 weights, ~42 a 1024 for 1..8 x rows (k_q4dp: ~63 at 4 rows, ~25 at
 * one); the head at 4 rows is then ~41 us of issue under 133 us of bytes.
 * k_q4g a lane a step (4 rows x 64 columns): k_q4dp's work for the same
 * weights, one scale step where there were two, plus a shuffle pair a row.
 * Prediction: the 9B's products at 4 rows ~1.05-1.10x one row (1.43x with
 * k_q4dp), the 4-row step ~1.15-1.2x, 16 rows ~1.6x (4.6x); the one-row
 * step within a few percent of k_q4dp's.
 * Measured (H200, bench/cuda/RESULTS.md, session 23, calls 2-5): exact at
 * every row count (n-row calls equal one-row calls bit for bit; the
 * engine's drafting identical to plain); the products at 2 / 4 / 8 / 16 rows
 * 1.32 / 1.41 / 1.56 / 2.86x one row (k_q4dp 1.10 / 1.43 / 2.30 / 4.59x),
 * the one-row step 2.07 against 2.03 ms. The instruction count above was
 * short by ~2x: the scale handling, the copies and the per-virtual-block
 * work (k_q4gm's comments). */
#include "cuda/q4dp_impl.cuh"

namespace {

__host__ __device__ constexpr int gof(int l, int wpt) { return (32 / wpt) * (l % wpt) + l / wpt; }

/* lane l's v[m]: its part of group (32 m + l) / WPT of the step; the sum of
 * its team's parts of group gof(l) (halving exchanges, exact integers;
 * every lane of the warp calls it) */
template <int WPT>
__device__ __forceinline__ int team_sum(const int (&v)[WPT], int lane) {
    if constexpr (WPT == 1) {
        return v[0];
    } else if constexpr (WPT == 2) {
        const int p = lane & 1;
        return (p ? v[1] : v[0]) + __shfl_xor_sync(0xffffffffu, p ? v[0] : v[1], 1);
    } else {
        const int h = (lane >> 1) & 1, p = lane & 1;
        /* offset 2: keep parts 2h, 2h + 1, hand over the other two */
        const int w0 = (h ? v[2] : v[0]) + __shfl_xor_sync(0xffffffffu, h ? v[0] : v[2], 2);
        const int w1 = (h ? v[3] : v[1]) + __shfl_xor_sync(0xffffffffu, h ? v[1] : v[3], 2);
        /* offset 1: keep part 2h + p */
        return (p ? w1 : w0) + __shfl_xor_sync(0xffffffffu, p ? w0 : w1, 1);
    }
}

/* a virtual block's weight and this warp's first row (k_q4g: RG rows a
 * warp, WARPS warps a block, no column split), the rows' pointers and
 * first groups (clamped: loads stay in bounds) */
template <int RG>
__device__ __forceinline__ const dp_w &g_place(const dp_args &a, int vb, int warp, int pitch, int ng, int64_t &r0,
                                               const uint8_t *(&rp)[RG], int64_t (&gb)[RG]) {
    int wi = 0;
    while (wi + 1 < a.nw && vb >= a.w[wi + 1].blk0) wi++;
    const dp_w &w = a.w[wi];
    r0 = ((int64_t)(vb - w.blk0) * WARPS + warp) * RG;
#pragma unroll
    for (int r = 0; r < RG; r++) {
        const int64_t row = r0 + r < w.rows ? r0 + r : w.rows - 1;
        rp[r] = w.data + row * pitch;
        gb[r] = row * ng;
    }
    return w;
}

/* RG: rows a warp (4, 2 or 1: g_rg's wave rule; a row's bits do not
 * depend on it); U: steps a round (launch_gdp) */
template <int NR, int WPT, int U, int RG>
__global__ void __launch_bounds__(WARPS * 32) k_q4g(const __grid_constant__ dp_args a) {
    __shared__ float red[WARPS][RG][NR];
    extern __shared__ int4 sm[];
    const int nch = a.cols >> 5, tst = mm_tstride(nch), ng = a.cols >> a.lg, nt = g_nt(NR);
    int4 *xd = sm;
    float2 *xsb = (float2 *)(sm + (size_t)NR * tst);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int pitch = a.cols >> 1, sbytes = 512 * WPT; /* a step's bytes of a row */
    const int nsteps = (ng + 31) >> 5, gl = gof(lane, WPT);

    if (blockIdx.x < (unsigned)a.nvb) { /* the first round's lines towards L2 before the wait (k_q4dp's) */
        int64_t r0;
        const uint8_t *rp[RG];
        int64_t gb[RG];
        const dp_w &w = g_place<RG>(a, blockIdx.x, warp, pitch, ng, r0, rp, gb);
        for (int st = 0; st < nsteps && st < U; st++)
#pragma unroll
            for (int m = 0; m < WPT; m++) {
                const int o = st * sbytes + 512 * m + 16 * lane;
                if (o < pitch)
#pragma unroll
                    for (int r = 0; r < RG; r++)
                        if (r0 + r < w.rows) prefetch_l2(rp[r] + o);
            }
    }
    TSC_PDL_ENTRY();
    if (a.dg) {
        copy_staged(a, sm, g_stage_bytes(NR, a.cols, a.group));
    } else {
        __shared__ float rnorm[NR];
        if (a.xm == Q4DP_XM_NORM) row_norms(a, rnorm, NR);
        stage_x<1, 2, true>(a, NR, xd, xsb, rnorm, tst, nt);
        __syncthreads();
        if (a.xm != Q4DP_XM_PLAIN) write_outputs_b0<NR>(a, rnorm);
    }

    for (int vb = blockIdx.x; vb < a.nvb; vb += gridDim.x) {
        int64_t r0;
        const uint8_t *rp[RG];
        int64_t gb[RG];
        const dp_w &w = g_place<RG>(a, vb, warp, pitch, ng, r0, rp, gb);
        float acc[RG][NR];
#pragma unroll
        for (int r = 0; r < RG; r++)
#pragma unroll
            for (int i = 0; i < NR; i++) acc[r][i] = 0.f;
        for (int st0 = 0; st0 < nsteps; st0 += U) {
            uint4 wv[U][RG][WPT];
            uint32_t sr[U][RG], br[U][RG];
            bool ok[U];
#pragma unroll
            for (int u = 0; u < U; u++) { /* every load of the round before the first use */
                const int st = st0 + u, gi = st * 32 + gl;
                ok[u] = st < nsteps && gi < ng; /* this lane's group (the loads below stay in bounds either way) */
                if (st >= nsteps) continue; /* uniform: a round past the row's end loads nothing */
#pragma unroll
                for (int m = 0; m < WPT; m++) {
                    const int o = st * sbytes + 512 * m + 16 * lane, oc = o < pitch ? o : 0;
#pragma unroll
                    for (int r = 0; r < RG; r++) wv[u][r][m] = ld_stream(rp[r] + oc);
                }
                const int gc = ok[u] ? gi : 0;
#pragma unroll
                for (int r = 0; r < RG; r++) {
                    sr[u][r] = ld_sraw(w.scales, a.sdt, gb[r] + gc);
                    br[u][r] = ld_sraw(w.biases, a.sdt, gb[r] + gc);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int st = st0 + u;
                if (st >= nsteps) continue; /* uniform: team_sum's shuffles need every lane */
                const int gi = st * 32 + gl;
                if constexpr (NR > 1) {
                    /* several x rows: each weight word unpacked once and
                     * each x chunk loaded once for all RG x NR products
                     * (the one-row form below keeps its own order and
                     * machine code; the integer parts are exact, so the
                     * order changes no bit) */
                    int part[RG][NR][WPT];
#pragma unroll
                    for (int m = 0; m < WPT; m++) {
                        uint32_t lo[RG][4], hi[RG][4];
#pragma unroll
                        for (int r = 0; r < RG; r++) nibbles(wv[u][r][m], lo[r], hi[r]);
                        const int o = st * sbytes + 512 * m + 16 * lane, ch = (o < pitch ? o : 0) >> 4;
#pragma unroll
                        for (int i = 0; i < NR; i++) {
                            const int4 xe = xd[i * tst + ch], xo = xd[i * tst + nch + ch];
#pragma unroll
                            for (int r = 0; r < RG; r++) {
                                int t = 0;
#pragma unroll
                                for (int k = 0; k < 4; k++) {
                                    t = __dp4a((int)lo[r][k], (int)comp_of(xe, k), t);
                                    t = __dp4a((int)hi[r][k], (int)comp_of(xo, k), t);
                                }
                                part[r][i][m] = t;
                            }
                        }
                    }
#pragma unroll
                    for (int i = 0; i < NR; i++) {
                        const float2 sb = xsb[(ok[u] ? gi : 0) * nt + i];
#pragma unroll
                        for (int r = 0; r < RG; r++) {
                            const int D = team_sum<WPT>(part[r][i], lane);
                            if (ok[u])
                                acc[r][i] = chunk_acc(sraw_f(sr[u][r], a.sdt), sraw_f(br[u][r], a.sdt), sb, (float)D, acc[r][i]);
                        }
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < NR; i++) {
                        int4 xe[WPT], xo[WPT]; /* the digits of the chunk each load m holds: even and odd columns */
#pragma unroll
                        for (int m = 0; m < WPT; m++) {
                            const int o = st * sbytes + 512 * m + 16 * lane, ch = (o < pitch ? o : 0) >> 4;
                            xe[m] = xd[i * tst + ch], xo[m] = xd[i * tst + nch + ch];
                        }
                        const float2 sb = xsb[(ok[u] ? gi : 0) * nt + i];
#pragma unroll
                        for (int r = 0; r < RG; r++) {
                            int part[WPT];
#pragma unroll
                            for (int m = 0; m < WPT; m++) {
                                uint32_t lo[4], hi[4];
                                nibbles(wv[u][r][m], lo, hi);
                                int t = 0;
#pragma unroll
                                for (int k = 0; k < 4; k++) {
                                    t = __dp4a((int)lo[k], (int)comp_of(xe[m], k), t);
                                    t = __dp4a((int)hi[k], (int)comp_of(xo[m], k), t);
                                }
                                part[m] = t;
                            }
                            const int D = team_sum<WPT>(part, lane);
                            if (ok[u])
                                acc[r][i] = chunk_acc(sraw_f(sr[u][r], a.sdt), sraw_f(br[u][r], a.sdt), sb, (float)D, acc[r][i]);
                        }
                    }
                }
            }
        }
        rows_store<RG, NR, WARPS>(acc, red, 1, warp, lane, r0, 0, w.y, w.rows);
    }
}

/* k_q4gm's ring: S slots of one step each, 16 rows of weight bytes (a row
 * 512 WPT bytes, gm_rs apart: 32 mod 128, so that the A fragments' 8 rows
 * x 4 threads read distinct banks), then the rows' scale words and bias
 * words of the step's 32 groups (16-bit elements: 16 words a row, f32: 32) */
__host__ __device__ constexpr int gm_rs(int wpt) { return 512 * wpt + 32; }
__host__ __device__ inline int gm_sw(int sdt) { return sdt == TS_DTYPE_F32 ? 32 : 16; }
__host__ __device__ inline size_t gm_slot(int wpt, int sdt) { return (size_t)MR * (gm_rs(wpt) + 8 * gm_sw(sdt)); }
__host__ __device__ inline size_t gm_ring_off(int nr, int cols, int group) {
    return (g_stage_bytes(nr, cols, group) + 15) & ~(size_t)15;
}
/* dynamic shared memory k_q4gm may take (its static part is at most ~9 KB
 * of the 227 KB an SM offers a block) and the most for two blocks an SM */
constexpr size_t GM_SMEM_MAX = 200 * 1024, GM_SMEM_2 = 104 * 1024;
/* and the most for three blocks an SM (gm_minb's form: 228 KB / 3, less
 * the static part and the 1 KB a block the hardware keeps) */
constexpr size_t GM_SMEM_3 = 70 * 1024;

/* NO: octets of x rows (1: 2..8, 2: 9..16); S: ring slots (gm_depth).
 *
 * The weights go through shared memory (cp.async, 16 bytes a thread, a
 * warp's copies 512 contiguous bytes of one row) and not straight into the
 * fragments: the first form loaded them as k_q4mm does (a thread's 8 bytes
 * of each of its two rows a group: 32-byte pieces of 8 rows an
 * instruction) and streamed at ~40% of the copy rate (s23-run2: the 9B's
 * products 2.0x one row's at 2..8 rows, the head 338 us against 139),
 * as k_q4mm's one-row form was 1.7x slower than k_q4dp's (session 12).
 * The block's items (virtual block, step) run in order through the ring:
 * item k + S - 1 is copied while item k is computed, the first S - 1
 * before the PDL wait (the weights do not depend on the previous kernel),
 * across virtual blocks (the 9B's 4096-column rows are 2 steps);
 * bench/cuda/next/q4grp_emu.py emulates its index math and k_q4g's (every
 * group dot, every scale and bias word, the two kernels' summation trees
 * the same: 0 mismatches; a slot or scale-half mutation is caught).
 * Measured (s23-run3..5): the ring alone changed nothing (the head at 4
 * rows 330 us; ncu: an instruction stream, 6.3 cycles an issued
 * instruction, as many instructions as k_q4dp_as's 4-row form); with the
 * copies' sources set once a virtual block, the scales' type a template
 * and the offsets precomputed, 216 us (k_q4dp: 213), the products at 16
 * rows 2.9x one row's (k_q4dp: 4.6x). What is left: 392 instructions a
 * warp an item, the per-virtual-block work (sources, tree, lookups) paid
 * every 2 items on 4096-column rows: 32-row virtual blocks would halve it. */
/* SF: the scales' and biases' type (0 bf16, 1 f16, 2 f32: gm_sf), fixed so
 * that a scale costs its word's load, a shift and a conversion */
template <int SF> __device__ __forceinline__ float gm_scale(uint32_t w, int sh) {
    if constexpr (SF == 0) return __uint_as_float((w >> sh) << 16);
    else if constexpr (SF == 1) return __half2float(__ushort_as_half((unsigned short)(w >> sh)));
    else return __uint_as_float(w);
}

template <int WPT, int NO, int S, int SF, int MINB = 1>
__global__ void __launch_bounds__(WARPS * 32, MINB) k_q4gm(const __grid_constant__ dp_args a) {
    constexpr int NT = 8 * NO, RS = gm_rs(WPT), CPR = 32 * WPT; /* 16-byte chunks a row a step */
    constexpr bool s16 = SF != 2;
    constexpr int sw = s16 ? 16 : 32, lsw = s16 ? 4 : 5; /* scale words a row a step, its log2 */
    /* a thread's copies an item: NC 16-byte weight chunks (rows RPC apart, one column q), NSC scale or bias words */
    constexpr int NC = MR * CPR / (WARPS * 32), RPC = WARPS * 32 / CPR, NSC = 2 * MR * sw / (WARPS * 32);
    static_assert(MR == 16 && NC * WARPS * 32 == MR * CPR && NSC * WARPS * 32 == 2 * MR * sw, "k_q4gm's copies");
    __shared__ float red[WARPS][MR][NT];
    extern __shared__ int4 sm[];
    const int nch = a.cols >> 5, ng = a.cols >> a.lg, nr = a.nr, tst = mm_tstride(nch);
    int4 *xd = sm;
    float2 *xsb = (float2 *)(sm + (size_t)nr * tst);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int pitch = a.cols >> 1, sbytes = 512 * WPT;
    const int nsteps = (ng + 31) >> 5;
    const int slotb = (int)gm_slot(WPT, a.sdt);
    uint8_t *ring = (uint8_t *)sm + gm_ring_off(nr, a.cols, a.group);
    int gw[4]; /* this warp's groups of a step: slots warp + 8 j */
#pragma unroll
    for (int j = 0; j < 4; j++) gw[j] = gof(warp + 8 * j, WPT);

    /* the block's items in order: (virtual block, step), steps fastest,
     * virtual blocks blockIdx.x, + gridDim.x, ..; the copies' cursor
     * (ivb, ist) runs S - 1 items ahead of the computation's (vb, st) */
    auto weight_of = [&](int vb) -> const dp_w & {
        int wi = 0;
        while (wi + 1 < a.nw && vb >= a.w[wi + 1].blk0) wi++;
        return a.w[wi];
    };
    /* this thread's copies: weight chunk k of an item is row q0 / CPR + RPC k
     * of the tile at column chunk q0 % CPR; scale word k is c = tid + 256 k
     * of [2][MR][sw] (scales, then biases). Their sources are set once a
     * virtual block (place), a step adds its offset. */
    const int q0 = threadIdx.x % CPR, woff = 16 * q0; /* the weight chunk's byte in a row's step */
    const uint8_t *wsrc[NC];
    const uint32_t *ssrc[NSC];
    int sok[NSC]; /* the word's first group within the row's step: copied while it is < ng */
    int ivb = blockIdx.x, ist = 0;
    auto place = [&](int vb) {
        const dp_w &w = weight_of(vb);
        const int64_t r0 = (int64_t)(vb - w.blk0) * MR;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int64_t row = r0 + threadIdx.x / CPR + RPC * k;
            wsrc[k] = w.data + (row < w.rows ? row : w.rows - 1) * pitch + woff; /* rows past the end: never stored */
        }
#pragma unroll
        for (int k = 0; k < NSC; k++) {
            const int c = threadIdx.x + WARPS * 32 * k, arr = c >> (lsw + 4), r = (c >> lsw) & (MR - 1), q = c & (sw - 1);
            const int64_t row = r0 + r < w.rows ? r0 + r : w.rows - 1;
            const int64_t e0 = row * ng; /* the row's first element (even for 16-bit: g_takes) */
            ssrc[k] = (const uint32_t *)(arr ? w.biases : w.scales) + (s16 ? e0 / 2 : e0) + q;
            sok[k] = s16 ? 2 * q : q;
        }
    };
    if (ivb < a.nvb) place(ivb);
    auto issue = [&](int slot) { /* the cursor's item into slot (every thread), one group of copies; the cursor on */
        if (ivb < a.nvb) {
            uint8_t *dst = ring + slot * slotb;
            const int o = ist * sbytes;
            if (o + woff < pitch)
#pragma unroll
                for (int k = 0; k < NC; k++) cp_async16(dst + (threadIdx.x / CPR + RPC * k) * RS + woff, wsrc[k] + o);
            uint32_t *ss = (uint32_t *)(dst + MR * RS);
#pragma unroll
            for (int k = 0; k < NSC; k++)
                if (ist * 32 + sok[k] < ng) cp_async4(ss + threadIdx.x + WARPS * 32 * k, ssrc[k] + ist * sw);
            if (++ist == nsteps) {
                ist = 0, ivb += gridDim.x;
                if (ivb < a.nvb) place(ivb);
            }
        }
        cp_async_commit(); /* (an empty group past the end: the waits count groups) */
    };
#pragma unroll
    for (int k = 0; k < S - 1; k++) issue(k);
    TSC_PDL_ENTRY();
    __shared__ float rnorm[TSC_ROWS_MAX];
    if (a.dg) {
        /* (the scale pairs of x rows past nr are not staged: they meet only
         * C values that are never stored) */
        copy_staged(a, sm, g_stage_bytes(nr, a.cols, a.group));
    } else {
        if (a.xm == Q4DP_XM_NORM) row_norms(a, rnorm, nr);
        mm_stage_block(a, nr, xd, xsb, rnorm, tst, NT);
    }
    const uint32_t *xw = (const uint32_t *)xd; /* a row's digit words: even bytes at [0, cols/8), odd at +nch*4 */
    const float4 *xs4 = (const float4 *)xsb;   /* the scale pairs of x rows 2t, 2t+1 of a group */
    const uint32_t *xr[NO];                    /* the x rows whose digits this thread feeds to B: o 8 + g (clamped) */
#pragma unroll
    for (int o = 0; o < NO; o++) {
        const int row = o * 8 + g < nr ? o * 8 + g : nr - 1;
        xr[o] = xw + (size_t)row * tst * 4 + t * WPT;
    }

    /* per j (this warp's 4 groups of a step): the A words' byte in a slot
     * (row g; row g + 8 is 8 RS further), the B words' word in x's row, the
     * scale word's index in [MR][sw] and the element's half, the x scale
     * pairs' float4 */
    int aoff[4], boff[4], soff[4], ssh[4], xoff[NO][4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        aoff[j] = g * RS + gw[j] * 16 * WPT + t * 4 * WPT;
        boff[j] = gw[j] * 4 * WPT;
        soff[j] = g * sw + (s16 ? gw[j] >> 1 : gw[j]);
        ssh[j] = s16 ? 16 * (gw[j] & 1) : 0;
#pragma unroll
        for (int o = 0; o < NO; o++) xoff[o][j] = (gw[j] * NT + o * 8 + 2 * t) >> 1;
    }

    float acc[4][NO][4];
    for (int k = 0, vb = blockIdx.x, st = 0; vb < a.nvb; k++) {
        __syncthreads(); /* every warp is done with item k - 1's slot, which issue refills */
        issue((k + S - 1) % S);
        cp_async_wait<S - 1>();
        __syncthreads(); /* item k's copies, every thread's, have landed */
        if (st == 0)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int o = 0; o < NO; o++) acc[j][o][0] = acc[j][o][1] = acc[j][o][2] = acc[j][o][3] = 0.f;
        const uint8_t *slot = ring + (k % S) * slotb;
        const uint32_t *ss = (const uint32_t *)(slot + MR * RS); /* scales [MR][sw], then biases */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int gi = st * 32 + gw[j];
            if (gi >= ng) continue; /* uniform over the warp */
            uint32_t wa[WPT], wb[WPT];
            lds_words<WPT>((const uint32_t *)(slot + aoff[j]), wa);
            lds_words<WPT>((const uint32_t *)(slot + aoff[j] + 8 * RS), wb);
            int C[NO][4];
            uint32_t xe[NO][WPT], xo[NO][WPT];
#pragma unroll
            for (int o = 0; o < NO; o++) {
                C[o][0] = C[o][1] = C[o][2] = C[o][3] = 0;
                const uint32_t *xb = xr[o] + st * 128 * WPT + boff[j]; /* group gi's words: gi 4 WPT */
                lds_words<WPT>(xb, xe[o]);
                lds_words<WPT>(xb + nch * 4, xo[o]);
            }
#pragma unroll
            for (int m = 0; m < WPT; m++) {
                const uint32_t a0 = wa[m] & 0x0F0F0F0Fu, a1 = wb[m] & 0x0F0F0F0Fu;
                const uint32_t a2 = (wa[m] >> 4) & 0x0F0F0F0Fu, a3 = (wb[m] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
                for (int o = 0; o < NO; o++) mma_u4s8(C[o], a0, a1, a2, a3, xe[o][m], xo[o][m]);
            }
            /* the rows' scale and bias of the group (rows g and g + 8) */
            const int sh = ssh[j];
            const float s0 = gm_scale<SF>(ss[soff[j]], sh), s1 = gm_scale<SF>(ss[soff[j] + 8 * sw], sh);
            const float b0 = gm_scale<SF>(ss[MR * sw + soff[j]], sh), b1 = gm_scale<SF>(ss[MR * sw + soff[j] + 8 * sw], sh);
#pragma unroll
            for (int o = 0; o < NO; o++) {
                const float4 p = xs4[st * 16 * NT + xoff[o][j]];
                const float2 e = make_float2(p.x, p.y), f = make_float2(p.z, p.w);
                float(&c)[4] = acc[j][o];
                c[0] = chunk_acc(s0, b0, e, (float)C[o][0], c[0]);
                c[1] = chunk_acc(s0, b0, f, (float)C[o][1], c[1]);
                c[2] = chunk_acc(s1, b1, e, (float)C[o][2], c[2]);
                c[3] = chunk_acc(s1, b1, f, (float)C[o][3], c[3]);
            }
        }
        if (st + 1 < nsteps) {
            st++;
            continue;
        }
        /* the virtual block's last step: the xor tree, levels 16 and 8 on
         * this warp's slots (C value q of octet o is row g + 8 (q >> 1), x
         * row o 8 + 2 t + (q & 1)) */
#pragma unroll
        for (int o = 0; o < NO; o++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float p0 = __fadd_rn(acc[0][o][q], acc[2][o][q]); /* slots w, w + 16 */
                const float p1 = __fadd_rn(acc[1][o][q], acc[3][o][q]); /* slots w + 8, w + 24 */
                red[warp][g + 8 * (q >> 1)][o * 8 + 2 * t + (q & 1)] = __fadd_rn(p0, p1);
            }
        __syncthreads();
        /* levels 4, 2, 1 across the warps */
        const dp_w &w = weight_of(vb);
        const int64_t r0 = (int64_t)(vb - w.blk0) * MR;
        for (int q = threadIdx.x; q < MR * nr; q += blockDim.x) {
            const int r = q / nr, i = q % nr;
            float l4[4];
#pragma unroll
            for (int l = 0; l < 4; l++) l4[l] = __fadd_rn(red[l][r][i], red[l + 4][r][i]);
            const float v = __fadd_rn(__fadd_rn(l4[0], l4[2]), __fadd_rn(l4[1], l4[3]));
            if (r0 + r < w.rows) w.y[(int64_t)i * w.rows + r0 + r] = v;
        }
        st = 0, vb += gridDim.x;
        /* (red is next written after the next item's two barriers) */
    }
    cp_async_wait<0>();
    if (a.xm != Q4DP_XM_PLAIN && !a.dg && a.late) write_outputs(a, rnorm, nr);
}

/* ---- the passes ---- */

/* w's products in the group numerics: 8-bit x, a group of 32, 64 or 128,
 * one row's digits within the staging limit, and TSC_Q4G=1. Opt-in, by
 * measurement (bench/cuda/RESULTS.md, session 23, calls 2-5): 8-16-row
 * verifies far cheaper than k_q4dp's (the 9B's products at 16 rows 2.9x
 * one row's against 4.6x; MTP 7 +21%), 2-4-row ones about the same (MTP 3
 * -3%), decode 0.7-2% slower. Read at every launch as TSC_Q4MM is (it
 * changes every row count's bits alike; captured graphs do not repeat it):
 * never to be flipped inside one session. */
bool g_takes(const tsc_weight *const *w, int nw, int nd) {
    const char *e = getenv("TSC_Q4G");
    if (!(e && e[0] == '1')) return false;
    const int g = w[0]->group;
    if (nd != 1 || (g != 32 && g != 64 && g != 128) || g_stage_bytes(1, (int)w[0]->cols, g) > SMEM_MAX) return false;
    /* k_q4gm copies the scales and biases in 4-byte words: a row's 16-bit
     * elements start on a word (an even number of groups a row) */
    if (w[0]->sdtype != TS_DTYPE_F32 && (w[0]->cols / g) % 2) return false;
    for (int i = 0; i < nw; i++)
        if ((uintptr_t)w[i]->scales % 4 || (uintptr_t)w[i]->biases % 4) return false;
    return true;
}

/* rows a warp of k_q4g (a row's bits do not depend on it; no column split
 * in these numerics, so the rows are the parallelism): pick_ks's rule 1,
 * the fewest waves x (a fixed part + a lane's loads), over RG = 4, 2, 1.
 * The 9B: 4 for the head and gate/up, 2 for in_proj (772 warps' blocks
 * in 3 waves against 386 in 2 uneven ones at 4) and the 4096-row ones.
 * TSC_Q4G_RG=1|2|4 forces it (a benchmark switch). */
int g_rg(const dp_args &a, int n_sm) {
    static int forced = -2;
    if (forced == -2) forced = ks_env("TSC_Q4G_RG", 0);
    if (forced == 1 || forced == 2 || forced == 4) return forced;
    const int64_t slots = q4dp_bps() * (int64_t)n_sm;
    const int64_t loads = ((int64_t)(a.cols / a.group) + 31) / 32 * (a.group / 32); /* a lane's 16-byte loads a row */
    int best = 4;
    int64_t best_cost = -1;
    for (int rg = 4; rg >= 1; rg /= 2) {
        int64_t vbs = 0;
        for (int i = 0; i < a.nw; i++) vbs += (a.w[i].rows + (int64_t)rg * WARPS - 1) / ((int64_t)rg * WARPS);
        const int64_t cost = (vbs + slots - 1) / slots * (3 + rg * loads);
        if (best_cost < 0 || cost < best_cost) best = rg, best_cost = cost;
    }
    return best;
}

/* the virtual blocks of a pass: k_q4g's WARPS x rg rows (mm: k_q4gm's 16) */
void g_vbs(dp_args &a, int rg, bool mm) {
    int nblk = 0;
    for (int i = 0; i < a.nw; i++) {
        dp_w &lw = a.w[i];
        lw.ks = 1;
        lw.blk0 = nblk;
        const int64_t rpb = mm ? MR : (int64_t)rg * WARPS;
        nblk += (int)((lw.rows + rpb - 1) / rpb);
    }
    a.nvb = nblk;
}

/* k_q4g for a pass of NR = 1..4 rows. Its steps a round (U): a lane's
 * bytes in flight, RG x U x WPT x 16, about k_q4dp's one-row 128 (4 rows,
 * U = 2 rounds of 16 bytes). RG = 4 only to 2 rows (g_rg_n: each lane holds
 * RG x NR x WPT integer parts and RG rows' unpacked words). */
template <int NR, int WPT>
void launch_gdp(tsc_ctx *c, const dp_args &a, int rg) {
    constexpr int U4 = WPT == 1 ? 2 : 1, U2 = WPT == 4 ? 1 : 2;
    const size_t smem = g_stage_bytes(NR, a.cols, a.group);
    if constexpr (NR <= 2) {
        if (rg == 4) return (void)launch_grid(c, k_q4g<NR, WPT, U4, 4>, a.nvb, smem, a, q4dp_bps());
    }
    if (rg >= 2) launch_grid(c, k_q4g<NR, WPT, U2, 2>, a.nvb, smem, a, q4dp_bps());
    else launch_grid(c, k_q4g<NR, WPT, 2, 1>, a.nvb, smem, a, q4dp_bps());
}

/* k_q4gm's ring depth for a pass of nr rows: 4 slots, or 2, the deepest
 * that keeps two blocks an SM, else the deepest that fits one; 0: none
 * fits (fewer rows a pass) */
int gm_depth(int nr, int cols, int group, int sdt) {
    const size_t off = gm_ring_off(nr, cols, group), sl = gm_slot(group / 32, sdt);
    if (off + 4 * sl <= GM_SMEM_2) return 4;
    if (off + 2 * sl <= GM_SMEM_2) return 2;
    if (off + 4 * sl <= GM_SMEM_MAX) return 4;
    return off + 2 * sl <= GM_SMEM_MAX ? 2 : 0;
}

/* Three blocks an SM where a 2-slot ring fits three (registers capped at 80
 * by the launch bounds: 24 warps against 16 for k_q4gm's latency; call 4's
 * ncu: 6.95 cycles an issued instruction at 15 warps), else the ring of
 * gm_depth. Measured (s23-run5, two runs each): the 9B's products at 2 / 4 /
 * 8 / 16 rows 2.21 / 2.35 / 2.60 / 4.77 ms against 2.31 / 2.40 / 2.61 /
 * 4.77 (the head unchanged: not its limit). TSC_Q4GM_MINB=1 turns it off
 * (a benchmark switch; the same bits either way). */
int gm_minb(void) {
    static int v = -1;
    if (v < 0) v = ks_env("TSC_Q4GM_MINB", 3) == 3 ? 3 : 1;
    return v;
}

template <int WPT, int NO, int SF>
void launch_gm_sf(tsc_ctx *c, const dp_args &a) {
    const size_t off = gm_ring_off(a.nr, a.cols, a.group);
    if constexpr (NO == 1) {
        if (gm_minb() == 3 && off + 2 * gm_slot(WPT, a.sdt) <= GM_SMEM_3) {
            launch_grid(c, k_q4gm<WPT, NO, 2, SF, 3>, a.nvb, off + 2 * gm_slot(WPT, a.sdt), a, 0, GM_SMEM_MAX);
            return;
        }
    }
    const int s = gm_depth(a.nr, a.cols, a.group, a.sdt);
    const size_t smem = off + s * gm_slot(WPT, a.sdt);
    if (s == 4) launch_grid(c, k_q4gm<WPT, NO, 4, SF>, a.nvb, smem, a, 0, GM_SMEM_MAX);
    else launch_grid(c, k_q4gm<WPT, NO, 2, SF>, a.nvb, smem, a, 0, GM_SMEM_MAX);
}

template <int WPT, int NO>
void launch_gm(tsc_ctx *c, const dp_args &a) {
    if (a.sdt == TS_DTYPE_BF16) launch_gm_sf<WPT, NO, 0>(c, a);
    else if (a.sdt == TS_DTYPE_F16) launch_gm_sf<WPT, NO, 1>(c, a);
    else launch_gm_sf<WPT, NO, 2>(c, a);
}

/* rows a warp of k_q4g for a pass of nr rows (launch_gdp) */
int g_rg_n(int rg, int nr) { return nr <= 2 || rg < 2 ? rg : 2; }

/* The most rows a pass k_q4g takes (dp4a; k_q4gm above it): 2 by default,
 * by measurement (s24-run1, the 9B's products of a step, ms): at 2 rows
 * k_q4g 2.01 against k_q4gm 2.20 (k_q4dp 1.78), at 4 rows 2.64 against
 * 2.34 (k_q4gm's cost is flat from 2 to 8 rows; k_q4g's grows with the
 * dp4a per row, and it has no ring to keep bytes in flight); MTP 1 at
 * forced 0.8: 599 against 584 tok/s, MTP 3 at 0.8/0.6/0.5: 685 against 760.
 * TSC_Q4G_DP=1..4 (1: k_q4gm from 2 rows, session 23's form), a benchmark
 * switch: every row's bits are the same on either kernel. */
int g_dp_max(void) {
    static int v = 0;
    if (!v) {
        v = ks_env("TSC_Q4G_DP", 2);
        if (v < 1 || v > 4) v = 2;
    }
    return v;
}

/* a pass on k_q4gm (mm) or on k_q4g at rg rows a warp (g_linear decides,
 * once: its virtual blocks were laid out for that kernel) */
template <int WPT>
void launch_g(tsc_ctx *c, const dp_args &a, bool mm, int rg) {
    if (!mm) { /* a.nr <= g_dp_max() <= 4 */
        if (a.nr == 1) launch_gdp<1, WPT>(c, a, rg);
        else if (a.nr == 2) launch_gdp<2, WPT>(c, a, rg);
        else if (a.nr == 3) launch_gdp<3, WPT>(c, a, rg);
        else launch_gdp<4, WPT>(c, a, rg);
    } else if (a.nr <= 8) launch_gm<WPT, 1>(c, a);
    else launch_gm<WPT, 2>(c, a);
}

/* q4dp_linear_staged in the group numerics: passes of 1..g_dp_max() rows
 * on k_q4g, the larger ones (to 16) on k_q4gm (fewer where the staged
 * digits would not fit; what is left over goes to either: the same bits) */
void g_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, dp_args &a, const float *x, const float *add,
              const float *u, float *x_out, float *y_out, float *const *y, int n) {
    const int rg = g_rg(a, c->n_sm);
    int per = TSC_ROWS_MAX;
    while (per > 1 && (g_stage_bytes(per, a.cols, a.group) > SMEM_MAX || !gm_depth(per, a.cols, a.group, a.sdt))) per--;
    for (int i0 = 0, nr; i0 < n; i0 += nr) {
        nr = n - i0 < per ? n - i0 : per;
        a.nr = nr;
        at_pass(a, w, nw, x, add, u, x_out, y_out, y, i0);
        stage_once(c, a, nr, 1, true);
        const bool mm = nr > g_dp_max();
        const int r = mm ? rg : g_rg_n(rg, nr);
        g_vbs(a, r, mm);
        switch (a.group) {
        case 32: launch_g<1>(c, a, mm, r); break;
        case 64: launch_g<2>(c, a, mm, r); break;
        default: launch_g<4>(c, a, mm, r); break;
        }
        TSC_LAUNCHED(c, mm ? "tsc_linear (4-bit, group numerics, mma)" : "tsc_linear (4-bit, group numerics, dp4a)");
    }
}

} // namespace

bool q4g_takes(const tsc_weight *const *w, int nw, int nd) { return g_takes(w, nw, nd); }

void q4g_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, int xm, const float *x, const float *add,
                const float *norm_w, const float *u, float eps, float *x_out, float *y_out, unsigned *bar,
                float *const *y, int n) {
    dp_args a;
    dp_setup(a, w, nw, xm, norm_w, u, eps, bar);
    g_linear(c, w, nw, a, x, add, u, x_out, y_out, y, n);
}
