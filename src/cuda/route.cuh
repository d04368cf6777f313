/* route.cuh: one row's MoE route by one warp (misc.cu's k_moe_route, and
 * the routed experts' gate/up kernel, q4dp.cu, which routes in its prologue):
 * softmax over the E router logits and the top k with the CPU's choices,
 * renormalised. One definition, so both give tsc_moe_route's bits (misc.cu
 * says how it is done and why). */
#ifndef TS_CUDA_ROUTE_CUH
#define TS_CUDA_ROUTE_CUH

#include "cuda/common.cuh"

/* row l of E <= 32 EPL logits -> ids[0..k) and wts[0..k) (global or shared
 * memory; lane 0 writes the picks, lanes < k the renormalised weights) */
template <int EPL>
__device__ __forceinline__ void route_row(const float *l, int E, int k, int norm, int32_t *ids, float *wts) {
    const int lane = threadIdx.x & 31;
    float p[EPL];
#pragma unroll
    for (int q = 0; q < EPL; q++) {
        const int e = lane + 32 * q;
        p[q] = e < E ? l[e] : -INFINITY;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q < E) mx = fmaxf(mx, p[q]);
    mx = warp_max(mx);
    double s = 0;
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q < E) {
            p[q] = expf(__fsub_rn(p[q], mx));
            s += p[q];
        }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q < E) p[q] = (float)((double)p[q] / s);
    uint32_t taken = 0; /* bit q: element lane + 32 q picked (or past E) */
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q >= E) taken |= 1u << q;
    float wsum = 0.f; /* the CPU's float sum of the picked, in pick order */
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bq = -1;
#pragma unroll
        for (int q = 0; q < EPL; q++) /* increasing index: a tie keeps the lower */
            if (!(taken >> q & 1u) && (p[q] > bv || (bq < 0 && p[q] == bv))) bv = p[q], bq = q;
        const unsigned key = bq >= 0 ? __float_as_uint(bv) + 1u : 0u;
        const unsigned mk = __reduce_max_sync(0xffffffffu, key);
        unsigned cand;
        if (mk) {
            cand = key == mk ? (unsigned)(lane + 32 * bq) : 0xffffffffu;
        } else { /* only NaN left: the CPU's scan takes the first not taken */
            cand = 0xffffffffu;
#pragma unroll
            for (int q = EPL - 1; q >= 0; q--)
                if (!(taken >> q & 1u)) cand = (unsigned)(lane + 32 * q);
        }
        const int bi = (int)__reduce_min_sync(0xffffffffu, cand);
        float v = 0.f;
        if ((bi & 31) == lane) {
#pragma unroll
            for (int q = 0; q < EPL; q++)
                if (q == (bi >> 5)) v = p[q];
            taken |= 1u << (bi >> 5);
        }
        v = __shfl_sync(0xffffffffu, v, bi & 31);
        if (lane == 0) ids[j] = bi, wts[j] = v;
        wsum = __fadd_rn(wsum, v);
    }
    __syncwarp();
    if (norm && lane < k) wts[lane] = __fdiv_rn(wts[lane], wsum);
}

#endif
