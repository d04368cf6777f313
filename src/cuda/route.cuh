/* route.cuh: one row's MoE route (softmax over the router logits, the top k,
 * renormalised), shared by misc.cu's k_moe_route and linear.cu's router
 * product that routes in its last block (tsc_linear_route). One definition:
 * both must give the CPU's choices bit for bit (ts_cpu_moe_route_row). */
#ifndef TS_CUDA_ROUTE_CUH
#define TS_CUDA_ROUTE_CUH

#include "cuda/common.cuh"

/* rows a block of k_moe_route (a warp a row), and the warps of the routing
 * block in tsc_linear_route */
constexpr int ROUTE_WARPS = 8;
constexpr int ROUTE_EMAX = 1024; /* experts a row at most (p[] below) */

/* The better of two (value, index) candidates: larger value, then lower
 * index; NaN never better (the routes' picks and misc.cu's argmax). */
__device__ __forceinline__ bool vi_better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

/* One row by one warp: softmax over the E router logits l and the top k
 * with the CPU's choices (f32 exp of x - max, a double sum, p = x / sum
 * rounded to float, picks by larger p then lower index, the normalising sum
 * in pick order), into ids[k] / wts[k]. p: E floats of shared memory, the
 * warp's own. A lane holds E / 32 of the row and a bit mask of what it has
 * picked, so a pick is a lane scan and a 5-step shuffle tree: no block
 * barrier. l is read through L2 (__ldcg): in tsc_linear_route other blocks
 * of the same launch wrote it. */
__device__ __forceinline__ void route_row(const float *l, int E, int k, int norm, float *p, int32_t *ids, float *wts) {
    const int lane = threadIdx.x & 31;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) {
        const float v = __ldcg(l + e);
        p[e] = v;
        mx = fmaxf(mx, v);
    }
    mx = warp_max(mx);
    double s = 0;
    for (int e = lane; e < E; e += 32) {
        const float v = expf(__fsub_rn(p[e], mx));
        p[e] = v;
        s += v;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    for (int e = lane; e < E; e += 32) p[e] = (float)((double)p[e] / s);
    __syncwarp(); /* every lane reads the winners' p below */
    uint32_t taken = 0; /* bit i: element lane + 32 i picked */
    float wsum = 0.f;   /* the CPU's float sum of the picked, in pick order */
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int e = lane, i = 0; e < E; e += 32, i++)
            if (!(taken >> i & 1u) && vi_better(p[e], e, bv, bi)) bv = p[e], bi = e;
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (vi_better(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if (bi == 0x7fffffff) { /* only NaN left: the CPU's scan takes the first not taken */
            for (int e = lane, i = 0; e < E; e += 32, i++)
                if (!(taken >> i & 1u)) { bi = e; break; }
            for (int o = 16; o > 0; o >>= 1) bi = min(bi, __shfl_xor_sync(0xffffffffu, bi, o));
        }
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        if (lane == 0) ids[j] = bi, wts[j] = p[bi];
        wsum = __fadd_rn(wsum, p[bi]);
    }
    __syncwarp();
    if (norm && lane < k) wts[lane] = __fdiv_rn(wts[lane], wsum);
}

#endif
