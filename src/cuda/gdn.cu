/* gdn.cu: the Gated DeltaNet decode step of one layer, n rows (tsc_gdn_step).
 *
 * Owns: the kernels of the step and their launch: prep + scan (below), and
 * k_gdn_fused, the two in one kernel with the same bits (the default since
 * session 19: see there), and a prompt chunk's five (tsc_gdn_prefill). Does
 * not own: the projections before it (in_qkv/z/b/a) and out_proj after it
 * (linear.cu).
 *
 * Kernel 1, prep: one block per 128-channel head slice of the C pre-conv
 * channels (q heads, k heads, v heads), one thread per channel: the causal
 * conv over [conv_state, rows] (separate multiplies and adds in tap order:
 * ts_conv_row's bits), SiLU, and for q/k slices the l2 norm over the head
 * (double sum; q also times dk^-1/2); the prepared rows go to ws, and the
 * conv state takes the last K-1 inputs (each channel owned by one thread, so
 * no ordering between blocks is needed).
 * Kernel 2, scan: a cluster of 4 blocks per value head, each block 32 of
 * the head's 128 state columns (column j of S is independent of the others
 * given k, q and v_j); 8 warps x 16 state rows, lane = column, so each warp
 * reads 128 contiguous bytes of a state row. Per row: decay, prediction
 * p = S^T k (warps' partial sums added in warp order through shared
 * memory), delta, update, o = S^T q, then the gated RMSNorm: the head's sum of
 * squares is the four blocks' partials added in rank order through
 * distributed shared memory (one cluster barrier per row). The state lives
 * in registers for all n rows and is written once.
 * Rows are walked in order inside each kernel, with the arithmetic of a
 * one-row call, so n rows equal n one-row calls bit for bit.
 * Speculative decoding (src/cuda/backend.cu) changes where the state comes
 * from and goes to, never the arithmetic: a separate source (conv_in, S_in:
 * a verify writes its rows' state into the other buffer of the pair), the
 * pair's buffer chosen by the device step record's parity (a captured decode
 * graph), or both ends chosen by the record (sel: a captured verify or
 * rollback), a device row count (n_dev: a lazy rollback's pending rows,
 * any number up to n replayed by one captured graph), no output for a lazy
 * rollback's replayed rows (the norm's cluster barriers still run in every
 * block).
 *
 * Floors (H200, 9B layer: Hv = 32, C = 8192, one row): state 2 MiB read +
 * 2 MiB written = 4.2 MB -> ~1.0 us at 4.3 TB/s; ~0.03 Mflop of conv and
 * ~4 flop per state element per row (~0.3 Mflop) -> nothing. The state is
 * spread over 128 blocks (32 KiB each), so per-SM bandwidth (~30-60 GB/s
 * when all SMs pull) is not the limit; launch and the per-row barriers are.
 * Prediction: ~4-6 us per layer for both kernels at n = 1 (launch-bound),
 * ~+1 us per extra row. Measured (run4): 5.7 us at 1 row, 13.0 us at 4
 * rows (~2.4 us a row: the per-row barriers, a cluster barrier included,
 * cost more than predicted).
 */
#include <cooperative_groups.h>

#include "cuda/common.cuh"

namespace cg = cooperative_groups;

namespace {

constexpr int DK = 128, DV = 128, KW = 4, CL = 4, CB = DV / CL, NW = 8, IPW = DK / NW;

/* A channel's causal conv over [its K - 1 previous inputs h, x] (separate
 * multiplies and adds in tap order: ts_conv_row's bits), then SiLU; h moves
 * on by x. k_gdn_prep's and k_gdn_fused's. */
__device__ __forceinline__ float conv_silu(const float (&w)[KW], float (&h)[KW - 1], float x) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < KW - 1; j++) acc = __fadd_rn(acc, __fmul_rn(w[j], h[j]));
    acc = __fadd_rn(acc, __fmul_rn(w[KW - 1], x));
#pragma unroll
    for (int j = 0; j < KW - 2; j++) h[j] = h[j + 1];
    h[KW - 2] = x;
    return silu_f(acc);
}

template <bool E>
__global__ void __launch_bounds__(DK) k_gdn_prep(const tsc_gdn_args a, float *prep) {
    TSC_ENTRY(E);
    __shared__ double red[32];
    const int Kd = a.Hk * DK, C = 2 * Kd + a.Hv * DV;
    const int c = blockIdx.x * DK + threadIdx.x;
    const bool qk = blockIdx.x < 2 * a.Hk, isq = blockIdx.x < a.Hk;
    const float qscale = __fdiv_rn(1.0f, __fsqrt_rn((float)DK));
    const int n = tsc_gdn_rows(a);
    if (!n) return;
    const float *cin;
    float *cout = tsc_gdn_conv_of(a, &cin);
    float h[KW - 1], w[KW];
#pragma unroll
    for (int j = 0; j < KW - 1; j++) h[j] = cin[(int64_t)j * C + c];
#pragma unroll
    for (int j = 0; j < KW; j++) w[j] = a.conv_w[(int64_t)j * C + c];
    for (int t = 0; t < n; t++) {
        float y = conv_silu(w, h, a.qkv[(int64_t)t * C + c]);
        if (qk) {
            const double ss = block_sum_d((double)y * y, red);
            const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)ss, 1e-6f)));
            y = isq ? __fmul_rn(__fmul_rn(y, r), qscale) : __fmul_rn(y, r);
            __syncthreads(); /* red is reused by the next row */
        }
        prep[(int64_t)t * C + c] = y;
    }
#pragma unroll
    for (int j = 0; j < KW - 1; j++) cout[(int64_t)j * C + c] = h[j];
}

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Column lane's sum of the block's NW warp partials v, in warp order
 * through red (one block barrier): the scan's two reductions over the state
 * rows. */
__device__ __forceinline__ float warps_sum(float v, float (&red)[NW][32], int warp, int lane) {
    red[warp][lane] = v;
    __syncthreads();
    float s = red[0][lane];
#pragma unroll
    for (int w = 1; w < NW; w++) s = __fadd_rn(s, red[w][lane]);
    return s;
}

/* Row t's gates of value head h: (beta, decay) = (sigmoid(b), exp(-A *
 * softplus(a + dt_bias))), nA = -A */
__device__ __forceinline__ float2 gdn_gates(const tsc_gdn_args &a, int t, int h, float nA, float dtb) {
    return make_float2(sigmoid_f(a.b[t * a.Hv + h]), expf(__fmul_rn(nA, softplus_f(__fadd_rn(a.a[t * a.Hv + h], dtb)))));
}

/* One row of the scan, k_gdn_scan's and k_gdn_fused's arithmetic: decay, the
 * prediction p = S^T k (the warps' partials added in warp order through
 * shared memory), delta, the update, o = S^T q (the same); warp 0 keeps the
 * row's o of column j and the block's sum of squares of o (ojs[t], ssq[t])
 * for gdn_rows_out. q and k: this warp's IPW rows of the key head's q and k;
 * vp: the value of the block's column j. No cluster barrier: the state's
 * chain needs none (session 20: the gated norm's barrier used to sit in
 * every row, n - 1 of them in a verify's GDN layer); the caller's state S
 * advances. bd: the rows' gates, gdn_gates made before (k_gdn_fused's H), or
 * NULL: made here. */
__device__ __forceinline__ void gdn_scan_row(const tsc_gdn_args &a, float (&S)[IPW], const float *q, const float *k,
                                             const float *vp, int t, int h, int warp, int lane, float nA, float dtb,
                                             float (&redp)[NW][32], float (&redo)[NW][32],
                                             float (&ojs)[TSC_ROWS_MAX][32], double (&ssq)[TSC_ROWS_MAX],
                                             const float2 *bd = nullptr) {
    const float2 g = bd ? bd[t] : gdn_gates(a, t, h, nA, dtb);
    const float beta = g.x, decay = g.y;
    float p = 0.f;
#pragma unroll
    for (int ii = 0; ii < IPW; ii++) {
        S[ii] = __fmul_rn(S[ii], decay);
        p = __fmaf_rn(S[ii], k[ii], p);
    }
    const float pj = warps_sum(p, redp, warp, lane);
    const float delta = __fmul_rn(beta, __fsub_rn(*vp, pj));
    float o = 0.f;
#pragma unroll
    for (int ii = 0; ii < IPW; ii++) {
        S[ii] = __fmaf_rn(k[ii], delta, S[ii]);
        o = __fmaf_rn(S[ii], q[ii], o);
    }
    const float oj = warps_sum(o, redo, warp, lane);
    if (warp == 0) {
        const double d = warp_sum_d((double)oj * oj);
        if (lane == 0) ssq[t] = d;
        ojs[t][lane] = oj;
    }
}

/* The gated RMSNorm of rows 0 .. n-1, after a cluster barrier that follows
 * the rows' scan: each value head's sum of squares the partials of its CL
 * blocks (cluster ranks base .. base + CL - 1) in rank order through
 * distributed shared memory, then warp 0 writes column j of each row. The
 * caller keeps the cluster together until every block has read (its final
 * barrier). gmx (o's digits, gdn_digits): each row's output also goes
 * back to ojs and the block's largest |output| of the row to gmx[t].
 * rows_par: row t by warp t % NW (a verify's rows at once; ojs and ssq are
 * the block's after the cluster barrier), else every row by warp 0. zs: the
 * rows' silu(z) of the block's 32 columns, [t][32], made before (k_gdn_fused's
 * H), or NULL: made here. keep_o (with gmx): o only into ojs, its caller
 * stores it (k_gdn_fused's B). */
__device__ __forceinline__ void gdn_rows_out(const tsc_gdn_args &a, cg::cluster_group &cl, int n, int h, int j, int warp,
                                             int lane, int base, float nw, float (&ojs)[TSC_ROWS_MAX][32],
                                             double (&ssq)[TSC_ROWS_MAX], float *gmx, const float *zs = nullptr,
                                             bool keep_o = false) {
    if (!a.o) return;
    const int Vd = a.Hv * DV;
    for (int t = a.rows_par ? warp : warp ? n : 0; t < n; t += a.rows_par ? NW : 1) {
        double tot = 0;
#pragma unroll
        for (int r = 0; r < CL; r++) tot += *cl.map_shared_rank(&ssq[t], base + r);
        const float rr = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(tot / DV), a.eps)));
        const float zj = zs ? zs[t * 32 + lane] : silu_f(a.z[(int64_t)t * Vd + h * DV + j]);
        const float ov = __fmul_rn(__fmul_rn(__fmul_rn(ojs[t][lane], rr), nw), zj);
        if (!keep_o) a.o[(int64_t)t * Vd + h * DV + j] = ov;
        if (gmx) {
            ojs[t][lane] = ov;
            float m = fabsf(ov);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (lane == 0) gmx[t] = m;
        }
    }
}

/* o's 8-bit digits (tsc_gdn_args.dg), after a cluster barrier that
 * follows gdn_rows_out: the block's 32 columns are
 * one 32-column chunk of the staged layout (q4dp_impl.cuh: stage_bytes(n,
 * 1, Vd), the even columns' bytes of each 8-column word at 2d and the odd
 * ones' at 2d + 1, then (sx, sx * sum X) a chunk); a quantization group of
 * dg_group columns is dg_group / 32 blocks of the value head (ranks first
 * .. first + gb - 1), its max the largest of their gmx. stage_word's
 * arithmetic for one digit (L = 127; common.cuh's dig_scale, dig_round):
 * the same max, sx, inverse and rounding, the chunk's sum of X exact, so
 * the same bytes as the product's own staging of o. Rows as gdn_rows_out shares them among the
 * warps. The caller keeps the cluster together until every block has read
 * (a barrier after this). */
__device__ __forceinline__ void gdn_digits(const tsc_gdn_args &a, cg::cluster_group &cl, int n, int h, int cb, int warp,
                                           int lane, int base, const float (&ojs)[TSC_ROWS_MAX][32], float *gmx) {
    const int nch = a.Hv * DV / 32, ch = (h * DV + cb * CB) / 32;
    const int gb = a.dg_group / 32, first = base + cb / gb * gb;
    const float L = 127.0f;
    uint8_t *dg = (uint8_t *)a.dg;
    float2 *xsb = (float2 *)(dg + (size_t)n * 2 * nch * 16);
    for (int t = a.rows_par ? warp : warp ? n : 0; t < n; t += a.rows_par ? NW : 1) {
        float m = 0.f;
        for (int r = 0; r < gb; r++) m = fmaxf(m, *cl.map_shared_rank(&gmx[t], first + r));
        float sx, inv;
        dig_scale(m, L, sx, inv);
        const int X = dig_round(ojs[t][lane], inv, L);
        int sum = X;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        /* column lane: word lane / 8 of the chunk, byte (lane % 8) / 2 of
         * that word in the even or the odd columns' int4 */
        dg[((size_t)t * 2 * nch + (size_t)(lane & 1) * nch + ch) * 16 + (lane >> 3) * 4 + ((lane & 7) >> 1)] = (uint8_t)(X & 0xFF);
        if (lane == 0) xsb[(size_t)t * nch + ch] = make_float2(sx, __fmul_rn(sx, (float)sum));
    }
}

/* k_gdn_fused's N (ctx.gdn_nb2, the default since session 48; TSC_GDN_NB2=0
 * off; with H, B and digits only; its shared arrays D's, below):
 * gdn_rows_out and gdn_digits after one cluster barrier instead of two.
 * Why: the second barrier exists so that a block can read the other blocks'
 * largest |output| of its quantization group (gmx); but after the first,
 * every block already holds what that needs: the head's sums of squares
 * (ssq) and every block's raw o of the rows (ojs, the scan's), and nothing
 * writes either after it. So a block makes its group's outputs itself: for
 * each of the gb = dg_group / 32 blocks of its group, the same operations on
 * the same values as that block's own gdn_rows_out (o read through
 * distributed shared memory, times the head's 1 / rms, norm_w and silu(z)
 * of that block's columns: zsg, the group's silu(z), made in H's loads;
 * nwg, the group's norm_w, loaded with the state), so the same bits, and
 * the group's max over them, which is the max of the same set as
 * gdn_digits' (max ignores order). Its own columns' outputs go to ovs (ojs
 * keeps the raw o the others read), its digits as gdn_digits writes them.
 * What it saves (s44-run2's trace of the 9B, H100): the phase "o + barrier
 * 2" took 1.12 us a block and "digits + barrier 3" 1.12, of the step's
 * ~5.6 us; a cluster barrier waits for the slowest of the cluster's blocks.
 * Prediction: -0.5..-1 us a GDN layer, the 9B +0.5..1%, the 35B-A3B-8L
 * +0.3..0.8%. Costs: gb - 1 more remote loads a row, (gb - 1) x 32 more
 * silu(z) per row in H's loads. Measured with static arrays (s48-run1, H100):
 * 9B +0.8%, 35B-A3B-8L -0.4% (its 8 KB more shared memory: see D). */
__device__ __forceinline__ void gdn_out_nb(const tsc_gdn_args &a, cg::cluster_group &cl, int n, int h, int cb, int rank,
                                           int warp, int lane, int base, const float (&ojs)[TSC_ROWS_MAX][32],
                                           const double (&ssq)[TSC_ROWS_MAX], const float (*zsg)[4 * 32],
                                           const float (&nwg)[4], float (*ovs)[32]) {
    const int Vd = a.Hv * DV, nch = Vd / 32, ch = (h * DV + cb * CB) / 32;
    const int gb = a.dg_group / 32, first = base + cb / gb * gb;
    const float L = 127.0f;
    uint8_t *dg = (uint8_t *)a.dg;
    float2 *xsb = (float2 *)(dg + (size_t)n * 2 * nch * 16);
    for (int t = a.rows_par ? warp : warp ? n : 0; t < n; t += a.rows_par ? NW : 1) {
        double tot = 0; /* gdn_rows_out's sum, in rank order */
#pragma unroll
        for (int r = 0; r < CL; r++) tot += *cl.map_shared_rank(const_cast<double *>(&ssq[t]), base + r);
        const float rr = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(tot / DV), a.eps)));
        float m = 0.f, own = 0.f;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            if (r >= gb) break;
            const int br = first + r;
            const float o = br == rank ? ojs[t][lane] : *cl.map_shared_rank(const_cast<float *>(&ojs[t][lane]), br);
            const float ov = __fmul_rn(__fmul_rn(__fmul_rn(o, rr), nwg[r]), zsg[t][r * 32 + lane]);
            if (br == rank) own = ov;
            m = fmaxf(m, fabsf(ov));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        ovs[t][lane] = own;
        float sx, inv; /* gdn_digits' arithmetic from here, its lines repeated: a helper shared by both changes
                          * the measured kernels' machine code (text_cmp: 30 of 41 differ) */
        dig_scale(m, L, sx, inv);
        const int X = dig_round(own, inv, L);
        int sum = X;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        dg[((size_t)t * 2 * nch + (size_t)(lane & 1) * nch + ch) * 16 + (lane >> 3) * 4 + ((lane & 7) >> 1)] = (uint8_t)(X & 0xFF);
        if (lane == 0) xsb[(size_t)t * nch + ch] = make_float2(sx, __fmul_rn(sx, (float)sum));
    }
}

template <bool E>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(NW * 32) k_gdn_scan(const tsc_gdn_args a, const float *prep) {
    TSC_ENTRY(E);
    __shared__ float redp[NW][32], redo[NW][32], ojs[TSC_ROWS_MAX][32];
    __shared__ double ssq[TSC_ROWS_MAX];
    cg::cluster_group cl = cg::this_cluster();
    const int h = blockIdx.x / CL, cb = (int)cl.block_rank();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, j = cb * CB + lane;
    const int Kd = a.Hk * DK, Vd = a.Hv * DV, C = 2 * Kd + Vd, g = h / (a.Hv / a.Hk);
    const int n = tsc_gdn_rows(a);
    if (!n) return; /* every block of every cluster: no cluster barrier waits */
    const float *S0;
    float *Sh = tsc_gdn_state_of(a, &S0) + (int64_t)h * DK * DV;
    const float *Si = S0 + (int64_t)h * DK * DV;
    float S[IPW];
#pragma unroll
    for (int ii = 0; ii < IPW; ii++) S[ii] = Si[(warp * IPW + ii) * DV + j];
    const float nA = a.neg_A[h], dtb = a.dt_bias[h], nw = a.norm_w[j];
    for (int t = 0; t < n; t++) {
        const float *row = prep + (int64_t)t * C;
        const float *q = row + g * DK + warp * IPW, *k = row + Kd + g * DK + warp * IPW;
        gdn_scan_row(a, S, q, k, row + 2 * Kd + h * DV + j, t, h, warp, lane, nA, dtb, redp, redo, ojs, ssq);
    }
    cl.sync(); /* every block's sums of squares of every row are in */
    gdn_rows_out(a, cl, n, h, j, warp, lane, 0, nw, ojs, ssq, nullptr);
#pragma unroll
    for (int ii = 0; ii < IPW; ii++) Sh[(warp * IPW + ii) * DV + j] = S[ii];
    cl.sync(); /* no block leaves while another may still read its ssq */
}

/* The trace build's phases of k_gdn_fused (session 38: its blocks ran 6-8.6 us
 * for one row in the graph, ~4 MB of state): thread 0 of each block takes the
 * global timer at its PDL release, after the conv and norms, after the scan,
 * after each cluster barrier and at its end, written as "G block t0 .. t5"
 * lines after the K lines (bench/cuda/trace_view.py --gdn). Nothing in a
 * normal build. */
#ifdef TSC_TRACE
struct gdn_ph_rec {
    unsigned blk, n;
    unsigned long long t[6];
};
constexpr unsigned GDN_PH_N = 1u << 15;
static __device__ gdn_ph_rec gdn_ph_ring[GDN_PH_N];
static __device__ unsigned gdn_ph_count;
static void gdn_ph_reset(void) { tsc_tr_zero(gdn_ph_count); }
static int gdn_ph_dump(FILE *f) {
    int n;
    gdn_ph_rec *r = tsc_tr_fetch(gdn_ph_count, gdn_ph_ring, &n);
    for (int i = 0; i < n; i++)
        fprintf(f, "G %u %u %llu %llu %llu %llu %llu %llu\n", r[i].blk, r[i].n, r[i].t[0], r[i].t[1], r[i].t[2], r[i].t[3],
                r[i].t[4], r[i].t[5]);
    free(r);
    return n;
}
__attribute__((unused)) static const int gdn_ph_registered_ = tsc_tr_register(gdn_ph_reset, gdn_ph_dump, "gdn phases");
#define GDN_PH(i) (ph[i] = tsc_tr_now())
#define GDN_PH_PUT(n_)                                                            \
    do {                                                                         \
        if (threadIdx.x == 0) {                                                  \
            GDN_PH(5);                                                           \
            const unsigned i_ = atomicAdd(&gdn_ph_count, 1u);                    \
            if (i_ < GDN_PH_N) {                                                 \
                gdn_ph_ring[i_].blk = blockIdx.x, gdn_ph_ring[i_].n = (unsigned)(n_); \
                for (int q_ = 0; q_ < 6; q_++) gdn_ph_ring[i_].t[q_] = ph[q_];   \
            }                                                                    \
        }                                                                        \
    } while (0)
#else
#define GDN_PH(i) ((void)0)
#define GDN_PH_PUT(n_) ((void)0)
#endif

/* ---- one kernel for the step (ctx.gdn_fused; TSC_GDN_FUSED=0: the two above) ----
 * Why: inside the 9B's decode graph the GDN step costs 6.9 us a layer
 * (cuda_bench CB_GDN=1, session 19: 166 us of the 2.04 ms step over 24
 * layers), about a third of it the prep launch and its PDL hand-off to the
 * scan for ~1 us of arithmetic. Here each scan block makes what it reads:
 * the cluster is the RR value heads of one key head (4 blocks each, so 4 x
 * RR blocks), and every block convolves, SiLUs and l2-normalises that key
 * head's q and k channels (threads 0-127 q, 128-255 k) and its own 32 v
 * channels (threads 0-31), all rows first into shared memory, then runs
 * the scan's rows from there. The q/k work is repeated by the cluster's
 * blocks (4 x RR times 256 channels: nothing against a launch). Conv state:
 * the q/k channels of the key head are read only by this cluster, so its
 * rank 0 writes them after the scan's last cluster barrier (every block has
 * read them by then, so the in-place step is safe); each block writes its
 * own v channels. The arithmetic of k_gdn_prep element for element (the
 * conv in tap order, SiLU, the double sum of squares as block_sum_d adds a
 * 128-thread block's warps, in warp order), then k_gdn_scan's: the same
 * bits as the two kernels (the tests compare them). RR = Hv / Hk of 1 or 2
 * (clusters of 4 or 8: the portable limit); others take the two kernels.
 * Measured (H200, cuda_bench 9B): with the state loaded after the prep
 * (s19-run4) a 4-row pass 3.08 -> 2.98 ms and 16 rows 9.58 -> 9.32, but the
 * 1-row step 2.039 -> 2.050 ms; with the state's loads first (s19-run5) the
 * 1-row step 2.026 -> 2.019 against the two kernels (the attention's
 * lane-a-key scores in both). So every row count takes it by default. */
/* k_gdn_fused's D, which is N's (gdn_out_nb): its per-row shared arrays
 * (q, k, v, o, the sums of squares, the gates, the group's silu(z), the
 * digits' maxima, the block's outputs) in dynamic shared memory sized by the
 * launch's rows (a.n, the bound of a device row count too) instead of static
 * arrays sized for TSC_ROWS_MAX: N's 33,088 bytes a block become ~4.3 KB for
 * one row. Why: s48-run2 (H100) padded the default's launch with unused
 * dynamic shared memory: +8 KB (N's own growth) cost the 35B-A3B-8L 1.2%
 * (2,263 -> 2,235 tok/s) and +16 KB 1.6%, the 9B 0.1% and 1.0%, which is
 * why N alone lost on the 35B-A3B-8L. Same addresses relative to each array,
 * same arithmetic: the same bits (cuda.gdn_nb2_same_bits). Measured
 * (s48-run3, H100, interleaved, three and two rounds), tok/s:
 *                 default  D alone  N alone  N with D
 *   35B-A3B-8L    2,264.3  2,255.3  2,255.6  2,280.8  (+0.7%)
 *   9B              469.5    467.8    472.9    472.2  (+0.6%)
 *   40-layer 35B-A3B 573.0     -        -      579.8  (+1.2%)
 * D alone (the two-barrier form, ~3.6 KB) lost, and so did its 4-row verify
 * (9B 3.059 -> 3.088 ms): smaller is not simply faster (its 64-register
 * bound spills 8 bytes, N's 4), so only N takes it. The layout, 16-byte
 * aligned, in this order (gdn_nb_smem): ssq (double), bds (float2), qs, ks,
 * vs, ojs, gmx, zsg, ovs. */
template <typename T> __device__ __forceinline__ T *dsm_take(unsigned char *&p, int count) {
    T *r = (T *)p;
    p += ((size_t)count * sizeof(T) + 15) & ~(size_t)15;
    return r;
}
constexpr size_t dsm_round(size_t b) { return (b + 15) & ~(size_t)15; }
/* the launch's bytes of D's arrays: the kernel's dsm_take calls, in their
 * order (they stay where the kernel uses them: taking all of them up front
 * in one shared function raised the bounded instances' spill from 4 to 12
 * bytes, ptxas, session 48) */
size_t gdn_nb_smem(int n) {
    const size_t r = (size_t)n;
    return dsm_round(r * 8) * 2 + dsm_round(r * DK * 4) * 2 + dsm_round(r * CB * 4) * 2 + dsm_round(r * 4) +
           dsm_round(r * 4 * 32 * 4) + dsm_round(r * 32 * 4);
}

/* N's instances carry no register bound. Session 48 gave them one of 64
 * registers a thread (4 blocks an SM), which cost N 4 bytes of spill
 * (ptxas; 76 registers without it). Without the bound (then U,
 * TSC_GDN_NBU=1; the default since s50-run1): s49-run1 (H100, two rounds)
 * +0.2% on the 9B and +0.4% on the 35B-A3B-8L against the neutral forms,
 * s50-run1 (H100, three rounds in both orders) +0.3% and +0.4%, its bits
 * the bounded form's (the cuda.gdn_* tests, the engine's parity and
 * drafting tests). */
template <bool E, int RR, bool P, bool H = false, bool B = false, bool N = false>
__global__ void __cluster_dims__(CL * RR, 1, 1) __launch_bounds__(NW * 32) k_gdn_fused(const tsc_gdn_args a) {
    static_assert(!N || (H && B), "k_gdn_fused's N takes H's silu(z) and B's stores");
    constexpr bool D = N; /* N's shared arrays sized by the launch (gdn_nb_smem) */
    /* (N is launched only with out_proj's digits and an output: tsc_gdn_step) */
    /* Which buffers of the pairs (the step record's choice: a verify, a
     * run-ahead step, a drafting session's decode) before the PDL wait: the
     * record was written before the pass began (its copy, or the run-ahead
     * graph's first kernel, complete before any kernel after it starts), so
     * its loads' latency passes during the wait instead of preceding the
     * state's loads (session 31: ~1 us a GDN layer on the 9B's run-ahead
     * steps). Nothing returns before the wait (ordering: tsc_pdl_entry). */
    const float *S0, *cin;
    float *Sd = tsc_gdn_state_of(a, &S0);
    float *cout = tsc_gdn_conv_of(a, &cin);
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank(), g = blockIdx.x / (CL * RR), h = g * RR + rank / CL, cb = rank % CL;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, j = cb * CB + lane, tid = threadIdx.x;
    const int Kd = a.Hk * DK, Vd = a.Hv * DV, C = 2 * Kd + Vd;
    /* prep: q (tid < 128) or k (tid >= 128) channel of key head g; v channel j for tid < 32 */
    const bool isq = tid < DK;
    const int cqk = (isq ? 0 : Kd) + g * DK + (tid & (DK - 1)), cv = 2 * Kd + h * DV + cb * CB + lane;
    /* The state, the weights and the conv state, the state's loads first
     * (they depend on nothing the prep makes, so their latency passes while
     * it runs: after it, they cost the 1-row step ~0.5 us a layer,
     * s19-run4); with P all of them before the PDL wait. Why P is safe: the
     * weights depend on no kernel, and the last kernel to write the state
     * and the conv state is this layer's step of the previous pass (or a
     * prompt chunk's, or a copy: stream order), with other layers' kernels
     * in between that trigger their dependents only after their own wait
     * (tsc_pdl_entry<false>); this kernel starts only once the previous one
     * has triggered, i.e. once the one before that has completed, and with
     * it every kernel before it. Not under ctx.pdl_early (kernels that
     * trigger before their wait), and not right after another GDN launch
     * (tsc_gdn_step's rule: ctx.gdn_seq). Why: the conv state, its taps and the
     * state come from DRAM after the wait, ~1-1.5 us on the step's chain
     * where the prep's own input (the in_proj rows, in L2) takes ~0.6.
     * Measured (bench/cuda/RESULTS.md, session 35): 9B decode +0.8% on an
     * H200; the default (ctx.gdn_pre; TSC_GDN_PRE=0: after the wait). */
    float *Sh = Sd + (int64_t)h * DK * DV;
    const float *Si = S0 + (int64_t)h * DK * DV;
    float S[IPW], hq[KW - 1], wq[KW], hv[KW - 1], wv[KW], nA, dtb, nw, nwg[4];
    /* N: the group's norm_w (its gb blocks' columns; gdn_out_nb) */
    const int gbn = N ? a.dg_group / 32 : 1, g0 = cb / gbn * gbn;
    auto load_inputs = [&]() {
#pragma unroll
        for (int ii = 0; ii < IPW; ii++) S[ii] = Si[(warp * IPW + ii) * DV + j];
        nA = a.neg_A[h], dtb = a.dt_bias[h], nw = a.norm_w[j];
        if constexpr (N)
#pragma unroll
            for (int r = 0; r < 4; r++) nwg[r] = r < gbn ? a.norm_w[(g0 + r) * CB + lane] : 0.f;
#pragma unroll
        for (int q = 0; q < KW - 1; q++) hq[q] = cin[(int64_t)q * C + cqk];
#pragma unroll
        for (int q = 0; q < KW; q++) wq[q] = a.conv_w[(int64_t)q * C + cqk];
        if (tid < CB) {
#pragma unroll
            for (int q = 0; q < KW - 1; q++) hv[q] = cin[(int64_t)q * C + cv];
#pragma unroll
            for (int q = 0; q < KW; q++) wv[q] = a.conv_w[(int64_t)q * C + cv];
        }
    };
    if constexpr (P) load_inputs();
    TSC_ENTRY(E);
#ifdef TSC_TRACE
    unsigned long long ph[6] = {0, 0, 0, 0, 0, 0};
#endif
    GDN_PH(0);
    if constexpr (!P) load_inputs();
    /* (D: the static arrays of one row, unused, which the compiler drops; the
     * references below name the dynamic ones under the same types, of which
     * rows t < a.n are touched) */
    constexpr int RS = D ? 1 : TSC_ROWS_MAX;
    __shared__ float qs_[RS][DK], ks_[RS][DK], vs_[RS][CB];
    __shared__ float redp[NW][32], redo[NW][32], ojs_[RS][32];
    __shared__ double red[NW];
    __shared__ double ssq_[RS];
    __shared__ float gmx_[RS];
    extern __shared__ __align__(16) unsigned char gdn_dsm[];
    unsigned char *dp = gdn_dsm;
    typedef float rows_dk[TSC_ROWS_MAX][DK];
    typedef float rows_32[TSC_ROWS_MAX][32];
    double(&ssq)[TSC_ROWS_MAX] = D ? *(double(*)[TSC_ROWS_MAX])dsm_take<double>(dp, a.n) : *(double(*)[TSC_ROWS_MAX])ssq_;
    float2 *bdd = D ? dsm_take<float2>(dp, a.n) : nullptr;
    rows_dk &qs = D ? *(rows_dk *)dsm_take<float>(dp, a.n * DK) : *(rows_dk *)qs_;
    rows_dk &ks = D ? *(rows_dk *)dsm_take<float>(dp, a.n * DK) : *(rows_dk *)ks_;
    rows_32 &vs = D ? *(rows_32 *)dsm_take<float>(dp, a.n * CB) : *(rows_32 *)vs_;
    rows_32 &ojs = D ? *(rows_32 *)dsm_take<float>(dp, a.n * 32) : *(rows_32 *)ojs_;
    float *gmx = D ? dsm_take<float>(dp, a.n) : gmx_;
    const int n = tsc_gdn_rows(a);
    if (!n) return;
    /* H (ctx.gdn_hoist, the default): the rows' gates (a, b) and z, the
     * in_proj's other outputs, loaded with the rows' q, k and v instead of
     * after the conv's barriers and the scan's cluster barrier (two L2
     * latencies on the step's chain); the same values through the same
     * operations. Visible to every thread after the conv loop's first
     * barrier. Measured (s38-run3, H100): 9B decode 445.1-445.4 -> 446.9-447.2
     * tok/s (+0.4%; predicted +0.6-1.2%), 35B-A3B-8L unchanged. (Their
     * loads and row 0's q/k/v channels issued together before any of the
     * math, session 39's Q, were mixed: 9B +0.3%, 35B-A3B-8L -0.4%,
     * s39-run4; removed.) */
    __shared__ float2 bds_[H && !D ? TSC_ROWS_MAX : 1];
    __shared__ float zsl_[H && !N ? TSC_ROWS_MAX : 1][32]; /* (N reads zsg instead) */
    float2 *bds = D ? bdd : bds_;
    typedef float zsl_t[H ? TSC_ROWS_MAX : 1][32];
    zsl_t &zsl = *(zsl_t *)zsl_;
    /* N: silu(z) of the group's columns (gb blocks of 32, this block's among them) and this block's outputs, D's
     * (one-element stand-ins elsewhere, unused, which the compiler drops) */
    __shared__ float zsg_[1][1], ovs_[1][1];
    typedef float zsg_t[N ? TSC_ROWS_MAX : 1][N ? 4 * 32 : 1];
    typedef float ovs_t[N ? TSC_ROWS_MAX : 1][N ? 32 : 1];
    zsg_t &zsg = *(N ? (zsg_t *)dsm_take<float>(dp, a.n * 4 * 32) : (zsg_t *)zsg_);
    ovs_t &ovs = *(N ? (ovs_t *)dsm_take<float>(dp, a.n * 32) : (ovs_t *)ovs_);
    if constexpr (H) {
        if (tid < n) bds[tid] = gdn_gates(a, tid, h, nA, dtb);
        if constexpr (N) {
            const int w = gbn * 32;
            for (int e = tid; e < n * w; e += NW * 32)
                zsg[e / w][e % w] = silu_f(a.z[(int64_t)(e / w) * Vd + h * DV + g0 * CB + e % w]);
        } else if (a.o)
            for (int e = tid; e < n * 32; e += NW * 32)
                zsl[e >> 5][e & 31] = silu_f(a.z[(int64_t)(e >> 5) * Vd + h * DV + cb * CB + (e & 31)]);
    }
    const float qscale = __fdiv_rn(1.0f, __fsqrt_rn((float)DK));
    for (int t = 0; t < n; t++) {
        const float y = conv_silu(wq, hq, a.qkv[(int64_t)t * C + cqk]);
        const double sw = warp_sum_d((double)y * y);
        if (lane == 0) red[warp] = sw;
        if (tid < CB) vs[t][lane] = conv_silu(wv, hv, a.qkv[(int64_t)t * C + cv]);
        __syncthreads();
        double ss = 0; /* block_sum_d's order over the four warps of a 128-thread block */
        const int w0 = isq ? 0 : NW / 2;
        for (int w = 0; w < NW / 2; w++) ss += red[w0 + w];
        const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)ss, 1e-6f)));
        if (isq) qs[t][tid] = __fmul_rn(__fmul_rn(y, r), qscale);
        else ks[t][tid - DK] = __fmul_rn(y, r);
        __syncthreads(); /* red is reused by the next row; qs, ks, vs complete */
    }
    GDN_PH(1);
    /* the scan (k_gdn_scan's arithmetic, its q, k and v from shared memory) */
    const int base = rank / CL * CL; /* this value head's first block in the cluster */
    for (int t = 0; t < n; t++) {
        const float *q = qs[t] + warp * IPW, *k = ks[t] + warp * IPW;
        gdn_scan_row(a, S, q, k, &vs[t][lane], t, h, warp, lane, nA, dtb, redp, redo, ojs, ssq, H ? bds : nullptr);
    }
    GDN_PH(2);
    cl.sync(); /* every block's sums of squares of every row are in */
    GDN_PH(3);
    if constexpr (B) {
        /* B (ctx.gdn_bar): the global stores after the cluster barriers.
         * cl.sync's arrive has release semantics, so every store issued
         * before it (the state's 16 a thread, o) is waited for inside the
         * barrier; the trace's phases put ~1.5 us between the first barrier
         * and the second and ~1.2 us in the digits' (s38-run4). Here the
         * second barrier follows shared-memory writes only (o stays in ojs,
         * gdn_rows_out's gmx form), the third is split: a relaxed arrive once
         * this block's reads of the others' gmx are done, then o, the state
         * and the conv state stored, then the wait before leaving (nobody
         * reads this block's shared memory after it has gone). The same
         * values to the same places. The default (ctx.gdn_bar; TSC_GDN_BAR=0
         * off). Measured (s38-run5, H200, interleaved): 9B decode 532.6-534.2
         * -> 535.4-535.8 tok/s (+0.3%; predicted +1-1.3%), 35B-A3B-8L
         * 2,200-2,202 -> 2,213-2,214 (+0.6%), 9B MTP 3 at forced acceptance
         * 805.7 -> 820.0 (verify 3.097 -> 3.057 ms a block). */
        const bool dg = a.dg != nullptr;
        if constexpr (N) { /* no second barrier: gdn_out_nb */
            gdn_out_nb(a, cl, n, h, cb, rank, warp, lane, base, ojs, ssq, zsg, nwg, ovs);
            GDN_PH(4);
        } else {
            gdn_rows_out(a, cl, n, h, j, warp, lane, base, nw, ojs, ssq, dg ? gmx : nullptr, H ? &zsl[0][0] : nullptr, dg);
            if (dg) {
                cl.sync(); /* every block's gmx are in; its reads of the others' ssq done */
                GDN_PH(4);
                gdn_digits(a, cl, n, h, cb, warp, lane, base, ojs, gmx);
            } else {
                GDN_PH(4);
            }
        }
        asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
        if (dg && a.o) /* gdn_rows_out's rows and lanes: o of column j */
            for (int t = a.rows_par ? warp : warp ? n : 0; t < n; t += a.rows_par ? NW : 1) {
                float ov = ojs[t][lane];
                if constexpr (N) ov = ovs[t][lane];
                a.o[(int64_t)t * a.Hv * DV + h * DV + j] = ov;
            }
#pragma unroll
        for (int ii = 0; ii < IPW; ii++) Sh[(warp * IPW + ii) * DV + j] = S[ii];
    } else {
        gdn_rows_out(a, cl, n, h, j, warp, lane, base, nw, ojs, ssq, a.dg ? gmx : nullptr, H ? &zsl[0][0] : nullptr);
#pragma unroll
        for (int ii = 0; ii < IPW; ii++) Sh[(warp * IPW + ii) * DV + j] = S[ii];
        cl.sync(); /* no block leaves while another may still read its ssq; every block has read the conv state */
        GDN_PH(4);
        if (a.dg) { /* (uniform: an argument) */
            gdn_digits(a, cl, n, h, cb, warp, lane, base, ojs, gmx);
            cl.sync(); /* no block leaves while another may still read its gmx */
        }
    }
    if (tid < CB)
#pragma unroll
        for (int q = 0; q < KW - 1; q++) cout[(int64_t)q * C + cv] = hv[q];
    if (rank == 0)
#pragma unroll
        for (int q = 0; q < KW - 1; q++) cout[(int64_t)q * C + cqk] = hq[q];
    if constexpr (B) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    GDN_PH_PUT(n);
}

/* ---- prompt chunks (tsc_gdn_prefill) ----
 * The step kernels walk a chunk's rows in 16-row calls with a cluster
 * barrier per row (the gated norm's sum) and a block barrier per reduction:
 * ~2.4 us a row, 1.2 ms a layer for a 512-row chunk. Here the parallel
 * parts leave the row loop: (1) the conv and SiLU of every (row, channel) at
 * once, (2) the q/k l2 norms per (row, head), (3) the recurrence, one warp
 * per (value head, 4 state columns): lane l holds rows 4l..4l+3 of those
 * columns (16 floats), so both reductions over the 128 state rows are
 * warp shuffles and the row loop has no barrier at all, the next row's k, q
 * and v loads issued before this row's arithmetic; the raw o goes out, (4)
 * the gated RMSNorm per (row, value head), (5) the conv state's last K - 1
 * inputs. The same arithmetic per element as the step, summed in another
 * order (shuffle trees instead of the warps' order): prompt chunks only.
 * Floors (9B layer, 512 rows: Hv 32, 128 x 128 heads): ~4 flop per state
 * element per row, 2.1 Gflop -> nothing; the per-row chain: 2 x 5 shuffle
 * levels (~30 cycles each) plus ~40 dependent FMAs, ~0.3 us a row, rows in
 * sequence: ~0.15 ms a layer. Prediction: 0.2-0.3 ms a layer with the other
 * four kernels, against ~1.5 ms. */

__global__ void __launch_bounds__(DK) k_gdnp_conv(const tsc_gdn_args a, float *prep) {
    TSC_PDL_ENTRY();
    const int Kd = a.Hk * DK, C = 2 * Kd + a.Hv * DV, c = blockIdx.x * DK + threadIdx.x, t = blockIdx.y;
    const float *cin;
    tsc_gdn_conv_of(a, &cin);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < KW; j++) { /* tap j multiplies the input at row t - (K - 1) + j */
        const int r = t - (KW - 1) + j;
        const float x = r >= 0 ? a.qkv[(int64_t)r * C + c] : cin[(int64_t)(r + KW - 1) * C + c];
        acc = __fadd_rn(acc, __fmul_rn(a.conv_w[(int64_t)j * C + c], x)); /* the step's order: taps 0 .. K - 1 */
    }
    prep[(int64_t)t * C + c] = silu_f(acc);
}

/* q and k heads of every row: y * 1 / sqrt(sum y^2 + 1e-6) (q also times dk^-1/2), in place */
__global__ void __launch_bounds__(DK) k_gdnp_l2(const tsc_gdn_args a, float *prep) {
    TSC_PDL_ENTRY();
    __shared__ double red[32];
    const int Kd = a.Hk * DK, C = 2 * Kd + a.Hv * DV, hd = blockIdx.x, t = blockIdx.y;
    float *p = prep + (int64_t)t * C + hd * DK + threadIdx.x;
    const float y = *p;
    const double ss = block_sum_d((double)y * y, red);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)ss, 1e-6f)));
    const float qscale = __fdiv_rn(1.0f, __fsqrt_rn((float)DK));
    *p = hd < a.Hk ? __fmul_rn(__fmul_rn(y, r), qscale) : __fmul_rn(y, r);
}

/* one warp per (value head, 4 columns); 4 warps a block */
__global__ void __launch_bounds__(128) k_gdnp_scan(const tsc_gdn_args a, const float *prep) {
    TSC_PDL_ENTRY();
    const int Kd = a.Hk * DK, Vd = a.Hv * DV, C = 2 * Kd + Vd;
    const int gw = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const int h = gw / (DV / 4), j0 = (gw % (DV / 4)) * 4, g = h / (a.Hv / a.Hk);
    if (h >= a.Hv) return;
    const float *S0;
    float *Sh = tsc_gdn_state_of(a, &S0) + (int64_t)h * DK * DV;
    const float *Si = S0 + (int64_t)h * DK * DV;
    float S[4][4]; /* [row 4 lane + i][column j0 + c] */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float4 v = *(const float4 *)(Si + (int64_t)(4 * lane + i) * DV + j0);
        S[i][0] = v.x, S[i][1] = v.y, S[i][2] = v.z, S[i][3] = v.w;
    }
    const float nA = a.neg_A[h], dtb = a.dt_bias[h];
    const int n = a.n;
    auto ld_row = [&](int t, float4 &q, float4 &k, float4 &v, float &bb, float &aa) {
        const float *row = prep + (int64_t)t * C;
        q = *(const float4 *)(row + g * DK + 4 * lane);
        k = *(const float4 *)(row + Kd + g * DK + 4 * lane);
        v = *(const float4 *)(row + 2 * Kd + h * DV + j0);
        bb = a.b[(int64_t)t * a.Hv + h], aa = a.a[(int64_t)t * a.Hv + h];
    };
    float4 q, k, v;
    float bb, aa;
    ld_row(0, q, k, v, bb, aa);
    for (int t = 0; t < n; t++) {
        const float4 qc = q, kc = k, vc = v;
        const float bc = bb, ac = aa;
        if (t + 1 < n) ld_row(t + 1, q, k, v, bb, aa); /* in flight during this row */
        const float beta = sigmoid_f(bc);
        const float decay = expf(__fmul_rn(nA, softplus_f(__fadd_rn(ac, dtb))));
        const float kk[4] = {kc.x, kc.y, kc.z, kc.w}, qq[4] = {qc.x, qc.y, qc.z, qc.w}, vv[4] = {vc.x, vc.y, vc.z, vc.w};
        float p[4];
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                S[i][c] = __fmul_rn(S[i][c], decay);
                s = __fmaf_rn(S[i][c], kk[i], s);
            }
            p[c] = s;
        }
#pragma unroll
        for (int c = 0; c < 4; c++) p[c] = warp_sum(p[c]);
        float o[4];
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float delta = __fmul_rn(beta, __fsub_rn(vv[c], p[c]));
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                S[i][c] = __fmaf_rn(kk[i], delta, S[i][c]);
                s = __fmaf_rn(S[i][c], qq[i], s);
            }
            o[c] = s;
        }
#pragma unroll
        for (int c = 0; c < 4; c++) o[c] = warp_sum(o[c]);
        if (lane == 0) *(float4 *)(a.o + (int64_t)t * Vd + h * DV + j0) = make_float4(o[0], o[1], o[2], o[3]);
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
        *(float4 *)(Sh + (int64_t)(4 * lane + i) * DV + j0) = make_float4(S[i][0], S[i][1], S[i][2], S[i][3]);
}

/* the gated RMSNorm of every (row, value head), in place on o */
__global__ void __launch_bounds__(DV) k_gdnp_norm(const tsc_gdn_args a) {
    TSC_PDL_ENTRY();
    __shared__ double red[32];
    const int Vd = a.Hv * DV, h = blockIdx.x, t = blockIdx.y, j = threadIdx.x;
    float *op = a.o + (int64_t)t * Vd + h * DV + j;
    const float oj = *op;
    const double tot = block_sum_d((double)oj * oj, red);
    const float rr = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(tot / DV), a.eps)));
    const float zj = silu_f(a.z[(int64_t)t * Vd + h * DV + j]);
    *op = __fmul_rn(__fmul_rn(__fmul_rn(oj, rr), a.norm_w[j]), zj);
}

/* the conv state after the chunk: its last K - 1 inputs (n >= K - 1 rows) */
__global__ void k_gdnp_convstate(const tsc_gdn_args a) {
    TSC_PDL_ENTRY();
    const int C = 2 * a.Hk * DK + a.Hv * DV, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const float *cin;
    float *cout = tsc_gdn_conv_of(a, &cin);
#pragma unroll
    for (int j = 0; j < KW - 1; j++) cout[(int64_t)j * C + c] = a.qkv[(int64_t)(a.n - (KW - 1) + j) * C + c];
}

/* ---- prompt chunks in the WY form (tsc_gdn_prefill with a.wy) ----
 * The chunked delta rule of src/cpu/prefill.c (its top comment has the
 * algebra) split so that the row-by-row chain leaves the GPU's critical
 * path: within a chunk of WL rows starting from state S0, with G_t the
 * cumulative log decay and A[t,s] = beta_t e^{G_t - G_s} k_t.k_s (s < t),
 *   (I + A) Delta = B V - B E K S0,   so   Delta = U - W S0   with
 *   U = (I + A)^-1 B V,  W = (I + A)^-1 B E K   (B = diag beta, E = diag e^G);
 *   O = E Q S0 + M Delta,  M[t,s] = e^{G_t - G_s} q_t.k_s (s <= t);
 *   S_end = e^{G_last} S0 + (K~)^T Delta,  K~_s = e^{G_last - G_s} k_s.
 * U, W and M do not depend on S0: k_gdnw_prep makes them for every (chunk,
 * head) at once (the forward substitution runs down a chunk's 64 rows, a
 * thread a column). k_gdnw_scan then walks the chunks in order, a block per
 * (head, 32 state columns) holding its slice of S in shared memory: three
 * small products a chunk (Delta, O, the new S), no cross-row chain inside.
 * Floors (9B layer, 2048 rows: Hv 32, 128 x 128 heads): the prep's
 * substitution ~2k dependent FMAs a thread a chunk (~4 us), all chunks in
 * parallel; the scan ~3.5k FMAs a thread a chunk from shared memory (~5 us),
 * 32 chunks in sequence: ~0.2 ms a layer against k_gdnp_scan's row chain
 * (measured below). G in double (as on the CPU): over a chunk it
 * reaches hundreds. Another summation order than the step: prompt chunks
 * only.
 * Measured (ncu, H200, bench/cuda/RESULTS.md session 21): the row scan
 * 1,336 us a 9B layer of 2048 rows; the first WY kernels (an element a
 * thread, two shared loads an FMA) scan 1,235 + prep 593, slower; register
 * tiles and unrolled loads: scan 470, prep 358 -> (35B-A3B, 512 rows) 149.5
 * -> 57.6 us with the prep's pairs in tiles too. The scan stays ~3.7x its
 * floor (470 us against ~4 us a chunk x 32 chunks): one block an SM, each
 * chunk's records loaded between its products (143 KB of shared memory
 * leaves no room to double-buffer them). */
constexpr int WL = 64;            /* rows a chunk */
constexpr int WJ = 32;            /* state columns a scan block */
constexpr int WP = DK + 4;        /* padded row of a q/k/W tile in shared memory */
/* a (chunk, head) record: U [WL][DV], W [WL][DK], M [WL][WL], eq [WL], ek [WL], eL (+ pad) */
constexpr int R_U = 0, R_W = WL * DV, R_M = R_W + WL * DK, R_EQ = R_M + WL * WL, R_EK = R_EQ + WL, R_EL = R_EK + WL;
constexpr int REC = R_EL + WL;

constexpr int AP = WL + 4;        /* padded row of A in the prep's shared memory (float4 rows) */
/* the prep's shared memory: K, Q tiles, A, the per-row scalars: ~86 KB, two blocks an SM (with a
 * [64][257] tile for the substitution's columns it was 150 KB, one block an SM) */
constexpr size_t wy_prep_smem() { return sizeof(float) * (2 * WL * WP + WL * AP + 3 * WL) + sizeof(double) * WL; }
constexpr int MP = WL + 4;        /* padded row of M in the scan's shared memory (float4 rows) */
/* k_gdnw_scan's 256 threads tile its products: 16 x 2 columns, 16 x 4 chunk rows, 16 x 8 state rows */
static_assert(WJ == 32 && WL == 64 && DK == 128, "k_gdnw_scan's register tiles");
static_assert((WL * (WL / 4)) % 256 == 0 && (WL * (DK / 4)) % 256 == 0, "k_gdnw_scan's loads");
constexpr size_t wy_scan_smem() { return sizeof(float) * (DK * WJ + 3 * WL * WP + WL * MP + WL * WJ + 2 * WL + 4); }

/* k_gdnw_scan's register tile, one step of four: acc[r][c] += sum_{k<4}
 * X[4 tr + r][i + k] Y[i + k][jc + c], k in order (X rows of ldx floats read
 * as float4, Y rows of WJ floats as float2 pairs) */
__device__ __forceinline__ void tile_step(const float *X, int ldx, const float *Y, int i, int tr, int jc, float (&acc)[4][2]) {
    float2 yv[4];
#pragma unroll
    for (int c = 0; c < 4; c++) yv[c] = *(const float2 *)(Y + (i + c) * WJ + jc);
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const float4 x = *(const float4 *)(X + (4 * tr + r) * ldx + i);
        acc[r][0] = __fmaf_rn(x.x, yv[0].x, acc[r][0]), acc[r][1] = __fmaf_rn(x.x, yv[0].y, acc[r][1]);
        acc[r][0] = __fmaf_rn(x.y, yv[1].x, acc[r][0]), acc[r][1] = __fmaf_rn(x.y, yv[1].y, acc[r][1]);
        acc[r][0] = __fmaf_rn(x.z, yv[2].x, acc[r][0]), acc[r][1] = __fmaf_rn(x.z, yv[2].y, acc[r][1]);
        acc[r][0] = __fmaf_rn(x.w, yv[3].x, acc[r][0]), acc[r][1] = __fmaf_rn(x.w, yv[3].y, acc[r][1]);
    }
}
/* acc[r][c] = sum_i X[4 tr + r][i] S[i][jc + c] over the DK state rows, i in
 * order: X a [WL][WP] tile, S the block's [DK][WJ] slice */
__device__ __forceinline__ void tile_rows_s0(const float *X, const float *S, int tr, int jc, float (&acc)[4][2]) {
#pragma unroll
    for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = 0.f;
#pragma unroll 4
    for (int i = 0; i < DK; i += 4) tile_step(X, WP, S, i, tr, jc, acc);
}

/* rows [r0, r0 + nr) of the chunk's prepared rows (k_gdnp_conv / k_gdnp_l2) -> records */
__global__ void __launch_bounds__(256) k_gdnw_prep(const tsc_gdn_args a, const float *prep, int r0, int nr) {
    TSC_PDL_ENTRY();
    extern __shared__ __align__(16) float wsm[];
    float *Ks = wsm, *Qs = Ks + WL * WP, *As = Qs + WL * WP;
    float *bs = As + WL * AP, *lgs = bs + WL, *eqs = lgs + WL;
    double *Gd = (double *)(eqs + WL);
    const int Kd = a.Hk * DK, C = 2 * Kd + a.Hv * DV, ch = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int g = h / (a.Hv / a.Hk), t0 = ch * WL, Lc = min(WL, nr - t0);
    float *rec = a.wy + ((int64_t)ch * a.Hv + h) * REC;
#pragma unroll
    for (int it = 0; it < WL * (DK / 4) / 256; it++) {
        const int e = tid + 256 * it, t = e / (DK / 4), d4 = e % (DK / 4);
        float4 q = make_float4(0.f, 0.f, 0.f, 0.f), k = q;
        if (t < Lc) {
            const float *row = prep + (int64_t)(r0 + t0 + t) * C;
            q = *(const float4 *)(row + g * DK + 4 * d4), k = *(const float4 *)(row + Kd + g * DK + 4 * d4);
        }
        *(float4 *)(Qs + t * WP + 4 * d4) = q, *(float4 *)(Ks + t * WP + 4 * d4) = k;
    }
    if (tid < WL) {
        float beta = 0.f, lg = 0.f;
        if (tid < Lc) {
            const int64_t i = (int64_t)(r0 + t0 + tid) * a.Hv + h;
            beta = sigmoid_f(a.b[i]);
            lg = __fmul_rn(a.neg_A[h], softplus_f(__fadd_rn(a.a[i], a.dt_bias[h]))); /* log of the step's decay */
        }
        bs[tid] = beta, lgs[tid] = lg;
    }
    __syncthreads();
    if (tid == 0) {
        double acc = 0.0;
        for (int t = 0; t < WL; t++) acc += t < Lc ? (double)lgs[t] : 0.0, Gd[t] = acc;
    }
    __syncthreads();
    /* A (shared) and M (the record): a thread a 4 x 4 tile of (t, s) pairs, t = tb + 16 r and
     * s = sb + 16 c (rows 16 apart, so a warp's 16 s rows fall in distinct banks), both dot products
     * over the key dims from float4 rows: 12 shared loads for 128 FMAs. A pair a thread was 3 loads for
     * 8 FMAs and left the prep bound by shared-memory bandwidth (358 us a 9B layer of 2048 rows under
     * ncu, session 21, with the substitution's loads). */
    {
        const int tb = tid >> 4, sb = tid & 15;
        float kk[4][4], qk[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) kk[r][c] = qk[r][c] = 0.f;
#pragma unroll 2
        for (int i = 0; i < DK; i += 4) {
            float4 kt[4], qt[4], ks[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                kt[r] = *(const float4 *)(Ks + (tb + 16 * r) * WP + i), qt[r] = *(const float4 *)(Qs + (tb + 16 * r) * WP + i);
                ks[r] = *(const float4 *)(Ks + (sb + 16 * r) * WP + i);
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float k1 = kk[r][c], q1 = qk[r][c];
                    k1 = __fmaf_rn(kt[r].x, ks[c].x, k1), k1 = __fmaf_rn(kt[r].y, ks[c].y, k1);
                    k1 = __fmaf_rn(kt[r].z, ks[c].z, k1), k1 = __fmaf_rn(kt[r].w, ks[c].w, k1);
                    q1 = __fmaf_rn(qt[r].x, ks[c].x, q1), q1 = __fmaf_rn(qt[r].y, ks[c].y, q1);
                    q1 = __fmaf_rn(qt[r].z, ks[c].z, q1), q1 = __fmaf_rn(qt[r].w, ks[c].w, q1);
                    kk[r][c] = k1, qk[r][c] = q1;
                }
        }
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int t = tb + 16 * r, sx = sb + 16 * c;
                float av = 0.f, mv = 0.f;
                if (sx <= t && t < Lc) {
                    const float ed = (float)exp(Gd[t] - Gd[sx]);
                    if (sx < t) av = __fmul_rn(__fmul_rn(bs[t], ed), kk[r][c]);
                    mv = __fmul_rn(ed, qk[r][c]);
                }
                As[t * AP + sx] = av;
                rec[R_M + t * WL + sx] = mv;
            }
    }
    if (tid < WL) {
        const float eq = tid < Lc ? (float)exp(Gd[tid]) : 0.f;
        eqs[tid] = eq;
        rec[R_EQ + tid] = eq;
        rec[R_EK + tid] = tid < Lc ? (float)exp(Gd[Lc - 1] - Gd[tid]) : 0.f;
        if (tid == 0) rec[R_EL] = (float)exp(Gd[Lc - 1]);
    }
    __syncthreads();
    /* the forward substitution, a thread a column (0..DV-1 make U, right side beta_t v_t; DV.. make
     * W, beta_t e^{G_t} k_t), the column's 64 values in registers (the right sides' loads all in flight)
     * and A's rows read as broadcast float4s: one shared load for 4 FMAs, four partial sums. A's rows
     * past Lc are zero, so those x stay 0. Then the records, coalesced by column. */
    const int col = tid;
    float x[WL];
#pragma unroll
    for (int t = 0; t < WL; t++)
        x[t] = t >= Lc ? 0.f
               : col < DV ? __fmul_rn(bs[t], prep[(int64_t)(r0 + t0 + t) * C + 2 * Kd + h * DV + col])
                          : __fmul_rn(__fmul_rn(bs[t], eqs[t]), Ks[t * WP + col - DV]);
#pragma unroll
    for (int t = 1; t < WL; t++) {
        float p0 = 0.f, p1 = 0.f, p2 = 0.f, p3 = 0.f;
#pragma unroll
        for (int sx = 0; sx + 4 <= t; sx += 4) {
            const float4 av = *(const float4 *)(As + t * AP + sx);
            p0 = __fmaf_rn(av.x, x[sx], p0), p1 = __fmaf_rn(av.y, x[sx + 1], p1);
            p2 = __fmaf_rn(av.z, x[sx + 2], p2), p3 = __fmaf_rn(av.w, x[sx + 3], p3);
        }
#pragma unroll
        for (int sx = t & ~3; sx < t; sx++) p0 = __fmaf_rn(As[t * AP + sx], x[sx], p0);
        x[t] = __fsub_rn(x[t], __fadd_rn(__fadd_rn(p0, p1), __fadd_rn(p2, p3)));
    }
#pragma unroll
    for (int t = 0; t < WL; t++) rec[(col < DV ? R_U + t * DV + col : R_W + t * DK + col - DV)] = x[t];
}

/* the chunks of rows [r0, r0 + nr) in order, a block per (head, WJ state
 * columns): S0's slice in shared memory, then per chunk Delta = U - W S0,
 * O = (E Q) S0 + M Delta (the raw output, normed after by k_gdnp_norm),
 * S = e^{G_last} S0 + K~^T Delta. Each thread computes a register tile of
 * each product (4 rows x 2 columns of Delta and O, 8 state rows x 2 columns
 * of S), reading float4 rows of W / Q~ / M / K~ and float2 pairs of S0 /
 * Delta: ~4 FMAs a shared load and 8-16 independent sums a thread. The
 * first version computed an element a thread, two shared loads an FMA on
 * one dependent chain: 1,235 us a 9B layer of 2048 rows under ncu (session
 * 21), slower than the row scan it was to replace. Floor: ~0.92 M FMAs a
 * chunk and block, 3.6 k a thread: ~4 us a chunk at one block an SM. */
__global__ void __launch_bounds__(256) k_gdnw_scan(const tsc_gdn_args a, const float *prep, int r0, int nr) {
    TSC_PDL_ENTRY();
    extern __shared__ __align__(16) float wsm[];
    float *Ss = wsm, *Ws = Ss + DK * WJ, *Qt = Ws + WL * WP, *Kt = Qt + WL * WP, *Ms = Kt + WL * WP;
    float *Ds = Ms + WL * MP, *eqs = Ds + WL * WJ, *eks = eqs + WL, *eLs = eks + WL;
    const int Kd = a.Hk * DK, Vd = a.Hv * DV, C = 2 * Kd + Vd, tid = threadIdx.x;
    const int h = blockIdx.x / (DV / WJ), j0 = (blockIdx.x % (DV / WJ)) * WJ, g = h / (a.Hv / a.Hk);
    const float *S0;
    float *Sh = tsc_gdn_state_of(a, &S0) + (int64_t)h * DK * DV;
    const float *Si = S0 + (int64_t)h * DK * DV;
    for (int e = tid; e < DK * WJ; e += 256) Ss[e] = Si[(int64_t)(e / WJ) * DV + j0 + e % WJ];
    /* the thread's tiles: columns jc, jc + 1; chunk rows 4 tr ..; state rows 8 tr .. */
    const int tc = tid & 15, tr = tid >> 4, jc = 2 * tc;
    const int nch = (nr + WL - 1) / WL;
    for (int ch = 0; ch < nch; ch++) {
        const float *rec = a.wy + ((int64_t)ch * a.Hv + h) * REC;
        const int t0 = ch * WL, Lc = min(WL, nr - t0);
        __syncthreads(); /* the last chunk's readers of Ws .. Ds are done */
        if (tid < WL) eqs[tid] = rec[R_EQ + tid], eks[tid] = rec[R_EK + tid];
        if (tid == 0) eLs[0] = rec[R_EL];
        /* the chunk's records and rows, every load of a thread issued before its stores (unrolled: a
         * loop of L2 round trips otherwise, ~5 us of a chunk's ~18 in s21-run3's ncu) */
#pragma unroll
        for (int it = 0; it < WL * (WL / 4) / 256; it++) {
            const int e = tid + 256 * it;
            *(float4 *)(Ms + (e / (WL / 4)) * MP + 4 * (e % (WL / 4))) = *(const float4 *)(rec + R_M + 4 * e);
        }
        for (int e = tid; e < WL * (WJ / 4); e += 256)
            *(float4 *)(Ds + 4 * e) = *(const float4 *)(rec + R_U + (e / (WJ / 4)) * DV + j0 + 4 * (e % (WJ / 4)));
        __syncthreads(); /* eqs, eks for the tiles below */
#pragma unroll
        for (int it = 0; it < WL * (DK / 4) / 256; it++) {
            const int e = tid + 256 * it, t = e / (DK / 4), d4 = e % (DK / 4);
            float4 w = *(const float4 *)(rec + R_W + t * DK + 4 * d4), q = make_float4(0.f, 0.f, 0.f, 0.f), k = q;
            if (t < Lc) {
                const float *row = prep + (int64_t)(r0 + t0 + t) * C;
                q = *(const float4 *)(row + g * DK + 4 * d4), k = *(const float4 *)(row + Kd + g * DK + 4 * d4);
                const float fq = eqs[t], fk = eks[t];
                q.x = __fmul_rn(q.x, fq), q.y = __fmul_rn(q.y, fq), q.z = __fmul_rn(q.z, fq), q.w = __fmul_rn(q.w, fq);
                k.x = __fmul_rn(k.x, fk), k.y = __fmul_rn(k.y, fk), k.z = __fmul_rn(k.z, fk), k.w = __fmul_rn(k.w, fk);
            }
            *(float4 *)(Ws + t * WP + 4 * d4) = w, *(float4 *)(Qt + t * WP + 4 * d4) = q, *(float4 *)(Kt + t * WP + 4 * d4) = k;
        }
        __syncthreads();
        float acc[4][2];
        /* Delta = U - W S0: rows 4 tr + r */
        tile_rows_s0(Ws, Ss, tr, jc, acc);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            float2 *d = (float2 *)(Ds + (4 * tr + r) * WJ + jc);
            const float2 u = *d;
            *d = make_float2(__fsub_rn(u.x, acc[r][0]), __fsub_rn(u.y, acc[r][1]));
        }
        __syncthreads();
        /* O = (E Q) S0 + M Delta (M[t][s] = 0 for s > t: the sum stops at the tile's last row) */
        tile_rows_s0(Qt, Ss, tr, jc, acc);
        for (int sx = 0; sx < 4 * tr + 4; sx += 4) tile_step(Ms, MP, Ds, sx, tr, jc, acc);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int t = 4 * tr + r;
            if (t < Lc) *(float2 *)(a.o + (int64_t)(r0 + t0 + t) * Vd + h * DV + j0 + jc) = make_float2(acc[r][0], acc[r][1]);
        }
        __syncthreads(); /* O read S0 */
        /* S = e^{G_last} S0 + K~^T Delta: state rows 8 tr + r, each thread its own elements */
        const float eL = eLs[0];
        float sa[8][2];
#pragma unroll
        for (int r = 0; r < 8; r++) {
            const float2 v = *(const float2 *)(Ss + (8 * tr + r) * WJ + jc);
            sa[r][0] = __fmul_rn(eL, v.x), sa[r][1] = __fmul_rn(eL, v.y);
        }
        for (int sx = 0; sx < Lc; sx++) {
            const float4 k0 = *(const float4 *)(Kt + sx * WP + 8 * tr), k1 = *(const float4 *)(Kt + sx * WP + 8 * tr + 4);
            const float2 d = *(const float2 *)(Ds + sx * WJ + jc);
            const float kk[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
            for (int r = 0; r < 8; r++) sa[r][0] = __fmaf_rn(kk[r], d.x, sa[r][0]), sa[r][1] = __fmaf_rn(kk[r], d.y, sa[r][1]);
        }
#pragma unroll
        for (int r = 0; r < 8; r++) *(float2 *)(Ss + (8 * tr + r) * WJ + jc) = make_float2(sa[r][0], sa[r][1]);
    }
    __syncthreads();
    for (int e = tid; e < DK * WJ; e += 256) Sh[(int64_t)(e / WJ) * DV + j0 + e % WJ] = Ss[e];
}

/* k_gdn_fused's instance for RR: E (early trigger) never with P (its loads
 * before the wait are safe only where kernels trigger after theirs) */
template <int RR, bool H, bool B, bool N = false>
void (*fused_pick(bool e, bool pre))(const tsc_gdn_args) {
    return e ? k_gdn_fused<true, RR, false, H, B, N>
             : pre ? k_gdn_fused<false, RR, true, H, B, N> : k_gdn_fused<false, RR, false, H, B, N>;
}
/* nb: N (with H and B; tsc_gdn_step decides, and sizes its shared memory) */
template <int RR>
void (*fused_kernel(bool e, bool pre, bool hoist, bool bar, bool nb))(const tsc_gdn_args) {
    if (nb) return fused_pick<RR, true, true, true>(e, pre);
    if (hoist) return bar ? fused_pick<RR, true, true>(e, pre) : fused_pick<RR, true, false>(e, pre);
    return bar ? fused_pick<RR, false, true>(e, pre) : fused_pick<RR, false, false>(e, pre);
}

} // namespace

extern "C" size_t tsc_gdn_ws_bytes(int n, int C) { return (size_t)n * (size_t)C * sizeof(float); }

extern "C" size_t tsc_gdn_wy_bytes(int rows, int Hv) { return (size_t)((rows + WL - 1) / WL) * (size_t)Hv * REC * sizeof(float); }

extern "C" int tsc_gdn_wy_rows(size_t bytes, int Hv) {
    const size_t per = (size_t)Hv * REC * sizeof(float), k = Hv > 0 ? bytes / per : 0;
    return k > (size_t)(1 << 20) / WL ? (1 << 20) : (int)k * WL;
}

extern "C" void tsc_gdn_step(tsc_ctx *c, const tsc_gdn_args *a) {
    TSC_GUARD(c);
    if (a->n < 1 || a->n > TSC_ROWS_MAX) { tsc_fail_(c, TS_E_ARG, "tsc_gdn_step: %d rows (1..%d)", a->n, TSC_ROWS_MAX); return; }
    if (a->dk != DK || a->dv != DV || a->K != KW || a->Hk < 1 || a->Hv < a->Hk || a->Hv % a->Hk) {
        tsc_fail_(c, TS_E_UNSUPPORTED,
                  "tsc_gdn_step: dk %d, dv %d, conv %d, Hk %d, Hv %d (the kernels need dk = dv = 128, conv 4, Hv a "
                  "multiple of Hk)", a->dk, a->dv, a->K, a->Hk, a->Hv);
        return;
    }
    const int C = 2 * a->Hk * DK + a->Hv * DV, rr = a->Hv / a->Hk;
    if (c->gdn_fused && rr <= 2) {
        const bool e = c->pdl_early;
        tsc_gdn_args g = *a;
        g.rows_par = c->gdn_rowpar;
        const bool dig = g.dg && g.o && !g.n_dev && (g.dg_group == 32 || g.dg_group == 64 || g.dg_group == 128);
        const bool ws = dig && g.dg == c->dg; /* into the ctx's digits: the next product may take them */
        if (!dig) g.dg = NULL;
        /* k_gdn_fused's P: not where kernels trigger before their wait, nor
         * right after another GDN launch (a lazy rollback's pending rows, then
         * the pass's own: the previous kernel writes this state; s35-run1
         * found the verify chains' logits differ without this rule). Other
         * writers of a state need no such rule while they are not PDL
         * launches: the fills (tsc_fill, cu_fill's k_fill2d) and copies go
         * through <<<>>> or the copy engine, never trigger early, so a PDL
         * kernel after one starts only once it has completed. A state
         * writer moved to tsc_launch would have to set gdn_seq too. */
        const bool pre = c->gdn_pre && !e && c->nlaunch != c->gdn_seq;
        const bool ho = c->gdn_hoist, bar = c->gdn_bar;
        const bool nb = c->gdn_nb2 && g.dg && ho && bar; /* N: only where it saves a barrier, and with H and B */
        void (*k)(const tsc_gdn_args) = rr == 1 ? fused_kernel<1>(e, pre, ho, bar, nb) : fused_kernel<2>(e, pre, ho, bar, nb);
        size_t smem = nb ? gdn_nb_smem(a->n) : 0; /* (N's D) */
        if (c->gdn_pad) { /* (the measurement's pad only where the block stays within the 48 KB that need no opt-in) */
            cudaFuncAttributes fa;
            if (cudaFuncGetAttributes(&fa, (const void *)k) == cudaSuccess && fa.sharedSizeBytes + smem + c->gdn_pad <= 48 * 1024)
                smem += (size_t)c->gdn_pad;
        }
        tsc_launch(c, k, dim3(a->Hv * CL), dim3(NW * 32), smem, g);
        TSC_LAUNCHED(c, "tsc_gdn_step (fused)");
        c->gdn_seq = c->nlaunch;
        if (ws) { /* what the ctx's digits now hold (q4dp's stage_once takes them while no launch follows) */
            tsc_dg_mark(c, g.o, g.n, g.Hv * DV, g.dg_group);
        }
        return;
    }
    tsc_launch(c, c->pdl_early ? k_gdn_prep<true> : k_gdn_prep<false>, dim3(C / DK), dim3(DK), 0, *a, a->ws);
    TSC_LAUNCHED(c, "tsc_gdn_step (prep)");
    tsc_launch(c, c->pdl_early ? k_gdn_scan<true> : k_gdn_scan<false>, dim3(a->Hv * CL), dim3(NW * 32), 0, *a, a->ws);
    TSC_LAUNCHED(c, "tsc_gdn_step (scan)");
    c->gdn_seq = c->nlaunch;
}

extern "C" void tsc_gdn_prefill(tsc_ctx *c, const tsc_gdn_args *a) {
    TSC_GUARD(c);
    if (a->n < KW - 1 || a->dk != DK || a->dv != DV || a->K != KW || a->Hk < 1 || a->Hv < a->Hk || a->Hv % a->Hk ||
        !a->o || a->sel || a->n_dev || a->conv_in || a->S_in) {
        tsc_fail_(c, TS_E_ARG, "tsc_gdn_prefill: %d rows, dk %d, dv %d, conv %d, Hk %d, Hv %d (need at least %d rows, "
                  "dk = dv = 128, conv 4, an output, the state in place)", a->n, a->dk, a->dv, a->K, a->Hk, a->Hv, KW - 1);
        return;
    }
    const int C = 2 * a->Hk * DK + a->Hv * DV;
    tsc_launch(c, k_gdnp_conv, dim3(C / DK, a->n), dim3(DK), 0, *a, a->ws);
    TSC_LAUNCHED(c, "tsc_gdn_prefill (conv)");
    tsc_launch(c, k_gdnp_l2, dim3(2 * a->Hk, a->n), dim3(DK), 0, *a, a->ws);
    TSC_LAUNCHED(c, "tsc_gdn_prefill (l2)");
    if (a->wy && a->wy_rows >= WL) {
        /* the WY form in segments of rows that fit the records' buffer */
        tsc_blocks_per_sm(c, (const void *)k_gdnw_prep, 256, wy_prep_smem(), wy_prep_smem());
        tsc_blocks_per_sm(c, (const void *)k_gdnw_scan, 256, wy_scan_smem(), wy_scan_smem());
        const int seg = a->wy_rows / WL * WL;
        for (int r0 = 0; r0 < a->n; r0 += seg) {
            const int nr = a->n - r0 < seg ? a->n - r0 : seg;
            tsc_launch(c, k_gdnw_prep, dim3((unsigned)((nr + WL - 1) / WL), (unsigned)a->Hv), dim3(256), wy_prep_smem(), *a,
                       (const float *)a->ws, r0, nr);
            TSC_LAUNCHED(c, "tsc_gdn_prefill (WY records)");
            tsc_launch(c, k_gdnw_scan, dim3((unsigned)(a->Hv * (DV / WJ))), dim3(256), wy_scan_smem(), *a,
                       (const float *)a->ws, r0, nr);
            TSC_LAUNCHED(c, "tsc_gdn_prefill (WY chunks)");
        }
    } else {
        tsc_launch(c, k_gdnp_scan, dim3(a->Hv * (DV / 4) / 4), dim3(128), 0, *a, (const float *)a->ws);
        TSC_LAUNCHED(c, "tsc_gdn_prefill (scan)");
    }
    tsc_launch(c, k_gdnp_norm, dim3(a->Hv, a->n), dim3(DV), 0, *a);
    TSC_LAUNCHED(c, "tsc_gdn_prefill (norm)");
    tsc_launch(c, k_gdnp_convstate, dim3((C + 255) / 256), dim3(256), 0, *a);
    TSC_LAUNCHED(c, "tsc_gdn_prefill (conv state)");
    c->gdn_seq = c->nlaunch;
}
