/* rows.cuh: what linear.cu's f32 kernel and q4dp.cu's dp4a kernel share:
 * the same shape of work (a warp computes R output rows over a slice of the
 * columns, KS warps of a block split the columns, persistent blocks walk
 * virtual blocks), so the same column split and the same reduction of the
 * warps' partial sums. One definition keeps their row-exactness argument
 * (the split and the sum order depend on the weight's shape only) in one
 * place. */
#ifndef TS_CUDA_ROWS_CUH
#define TS_CUDA_ROWS_CUH

#include "cuda/common.cuh"

/* KS from the weight's shape alone (the verify rule): split the columns
 * until the weight alone has ~2 blocks of `warps` warps per multiprocessor,
 * never past one step (steps: the row's steps of 32 lanes) per warp. */
static inline int rows_pick_ks(int64_t rows, int64_t steps, int R, int warps, int n_sm) {
    int ks = 1;
    while (ks < warps && 2 * ks <= steps) {
        const int64_t blocks = (rows + (int64_t)R * (warps / ks) - 1) / ((int64_t)R * (warps / ks));
        if (blocks >= 2 * n_sm) break;
        ks *= 2;
    }
    return ks;
}

/* The end of a virtual block: each warp's R x NR partial sums reduced over
 * its lanes (a fixed shuffle tree), then, when KS warps split the columns,
 * added in warp order through red; row r0 + r of x row i goes to
 * y[i * rows + r0 + r]. vbl: the virtual block's index within its weight.
 * ks is uniform over the block, so every thread takes the same path (the
 * KS > 1 path syncs the block twice; red is free again on return).
 * ADD: y = v + sc[i] * add[i * rows + row] instead (one rounding each, the
 * MoE combine's: routed + sigmoid(gate) * shared, cu_moe). */
template <int R, int NR, int WARPS, bool ADD = false>
__device__ __forceinline__ void rows_store(float (&acc)[R][NR], float (&red)[WARPS][R][NR], int ks, int warp, int lane,
                                           int64_t r0, int64_t vbl, float *y, int64_t rows, const float *add = nullptr,
                                           const float *sc = nullptr) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int i = 0; i < NR; i++) acc[r][i] = warp_sum(acc[r][i]);
    if (ks == 1) {
        if (lane < R * NR) {
            const int r = lane / NR, i = lane % NR;
            float v = 0.f;
#pragma unroll
            for (int q = 0; q < R * NR; q++)
                if (q == lane) v = acc[q / NR][q % NR];
            if constexpr (ADD)
                if (r0 + r < rows) v = __fadd_rn(v, __fmul_rn(sc[i], add[(int64_t)i * rows + r0 + r]));
            if (r0 + r < rows) y[(int64_t)i * rows + r0 + r] = v;
        }
        return;
    }
    if (lane == 0)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < NR; i++) red[warp][r][i] = acc[r][i];
    __syncthreads();
    const int t = threadIdx.x, ngrp = WARPS / ks;
    if (t < ngrp * R * NR) {
        const int g = t / (R * NR), r = t / NR % R, i = t % NR;
        float v = red[g * ks][r][i];
        for (int q = 1; q < ks; q++) v = __fadd_rn(v, red[g * ks + q][r][i]);
        const int64_t row = (vbl * ngrp + g) * R + r;
        if constexpr (ADD)
            if (row < rows) v = __fadd_rn(v, __fmul_rn(sc[i], add[(int64_t)i * rows + row]));
        if (row < rows) y[(int64_t)i * rows + row] = v;
    }
    __syncthreads(); /* red is reused by the next virtual block */
}

#endif
