/* gdn.cu: the Gated DeltaNet decode step of one layer, n rows (tsc_gdn_step).
 *
 * Owns: the two kernels of the step and their launch. Does not own: the
 * projections before it (in_qkv/z/b/a) and out_proj after it (linear.cu).
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

__global__ void __launch_bounds__(DK) k_gdn_prep(const tsc_gdn_args a, float *prep) {
    TSC_PDL_ENTRY();
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
        const float x = a.qkv[(int64_t)t * C + c];
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < KW - 1; j++) acc = __fadd_rn(acc, __fmul_rn(w[j], h[j]));
        acc = __fadd_rn(acc, __fmul_rn(w[KW - 1], x));
        float y = silu_f(acc);
        if (qk) {
            const double ss = block_sum_d((double)y * y, red);
            const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)ss, 1e-6f)));
            y = isq ? __fmul_rn(__fmul_rn(y, r), qscale) : __fmul_rn(y, r);
            __syncthreads(); /* red is reused by the next row */
        }
        prep[(int64_t)t * C + c] = y;
#pragma unroll
        for (int j = 0; j < KW - 2; j++) h[j] = h[j + 1];
        h[KW - 2] = x;
    }
#pragma unroll
    for (int j = 0; j < KW - 1; j++) cout[(int64_t)j * C + c] = h[j];
}

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(NW * 32) k_gdn_scan(const tsc_gdn_args a, const float *prep) {
    TSC_PDL_ENTRY();
    __shared__ float redp[NW][32], redo[NW][32];
    __shared__ double ssq[2];
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
        const float beta = sigmoid_f(a.b[t * a.Hv + h]);
        const float decay = expf(__fmul_rn(nA, softplus_f(__fadd_rn(a.a[t * a.Hv + h], dtb))));
        float p = 0.f;
#pragma unroll
        for (int ii = 0; ii < IPW; ii++) {
            S[ii] = __fmul_rn(S[ii], decay);
            p = __fmaf_rn(S[ii], k[ii], p);
        }
        redp[warp][lane] = p;
        __syncthreads();
        float pj = redp[0][lane];
#pragma unroll
        for (int w = 1; w < NW; w++) pj = __fadd_rn(pj, redp[w][lane]);
        const float delta = __fmul_rn(beta, __fsub_rn(row[2 * Kd + h * DV + j], pj));
        float o = 0.f;
#pragma unroll
        for (int ii = 0; ii < IPW; ii++) {
            S[ii] = __fmaf_rn(k[ii], delta, S[ii]);
            o = __fmaf_rn(S[ii], q[ii], o);
        }
        redo[warp][lane] = o;
        __syncthreads();
        float oj = redo[0][lane];
#pragma unroll
        for (int w = 1; w < NW; w++) oj = __fadd_rn(oj, redo[w][lane]);
        if (warp == 0) {
            const double d = warp_sum_d((double)oj * oj);
            if (lane == 0) ssq[t & 1] = d;
        }
        cl.sync();
        if (warp == 0 && a.o) { /* (no output: the cluster barriers above still run) */
            double tot = 0;
#pragma unroll
            for (int r = 0; r < CL; r++) tot += *cl.map_shared_rank(&ssq[t & 1], r);
            const float rr = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(tot / DV), a.eps)));
            const float zj = silu_f(a.z[(int64_t)t * Vd + h * DV + j]);
            a.o[(int64_t)t * Vd + h * DV + j] = __fmul_rn(__fmul_rn(__fmul_rn(oj, rr), nw), zj);
        }
    }
#pragma unroll
    for (int ii = 0; ii < IPW; ii++) Sh[(warp * IPW + ii) * DV + j] = S[ii];
    cl.sync(); /* no block leaves while another may still read its ssq */
}

} // namespace

extern "C" size_t tsc_gdn_ws_bytes(int n, int C) { return (size_t)n * (size_t)C * sizeof(float); }

extern "C" void tsc_gdn_step(tsc_ctx *c, const tsc_gdn_args *a) {
    TSC_GUARD(c);
    if (a->n < 1 || a->n > TSC_ROWS_MAX) { tsc_fail_(c, TS_E_ARG, "tsc_gdn_step: %d rows (1..%d)", a->n, TSC_ROWS_MAX); return; }
    if (a->dk != DK || a->dv != DV || a->K != KW || a->Hk < 1 || a->Hv < a->Hk || a->Hv % a->Hk) {
        tsc_fail_(c, TS_E_UNSUPPORTED,
                  "tsc_gdn_step: dk %d, dv %d, conv %d, Hk %d, Hv %d (the kernels need dk = dv = 128, conv 4, Hv a "
                  "multiple of Hk)", a->dk, a->dv, a->K, a->Hk, a->Hv);
        return;
    }
    const int C = 2 * a->Hk * DK + a->Hv * DV;
    tsc_launch(c, k_gdn_prep, dim3(C / DK), dim3(DK), 0, *a, a->ws);
    TSC_LAUNCHED(c, "tsc_gdn_step (prep)");
    tsc_launch(c, k_gdn_scan, dim3(a->Hv * CL), dim3(NW * 32), 0, *a, a->ws);
    TSC_LAUNCHED(c, "tsc_gdn_step (scan)");
}
