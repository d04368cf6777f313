/* route.cuh: a MoE row's routing (softmax, top k, renormalisation) by one
 * warp with the CPU reference's choices, for tsc_moe_route's kernel
 * (misc.cu) and the router product's route tail (linear.cu), so that both
 * give the same picks and weights bit for bit. */
#ifndef TS_CUDA_ROUTE_CUH
#define TS_CUDA_ROUTE_CUH

#include "cuda/common.cuh"

/* The row's softmax and top k with the CPU's choices (ts_cpu_moe_route_row:
 * f32 exp of x - max, a double sum, p = x / sum rounded to float, picks by
 * larger p then lower index, the normalising sum in pick order). A lane
 * holds its EPL = E / 32 (rounded up to a power of two; more is harmless:
 * the elements past E are skipped everywhere) elements in registers, so the
 * logits' loads are all in flight at once and nothing goes through memory.
 * A pick: each lane's best not-taken element, then the warp's largest key
 * (p's bits + 1: p >= 0, so its bits order as unsigned; 0: nothing left but
 * NaN, which is never better) and the lowest index holding it, two
 * redux.sync; the owner marks it taken. On return lane j < k holds pick j:
 * its expert id and its weight (divided by the picks' sum when norm). Every
 * lane of the warp calls it. CG: the logits through L2 only (__ldcg: a
 * block that routes what other blocks of its launch wrote, linear.cu's
 * route tail). */
template <int EPL, bool CG = false>
__device__ __forceinline__ void route_row(const float *l, int E, int k, int norm, int lane, int &rid, float &rwt) {
    float p[EPL];
#pragma unroll
    for (int q = 0; q < EPL; q++) {
        const int e = lane + 32 * q;
        p[q] = e < E ? (CG ? __ldcg(l + e) : l[e]) : -INFINITY;
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
    s = warp_sum_d(s);
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q < E) p[q] = (float)((double)p[q] / s);
    uint32_t taken = 0; /* bit q: element lane + 32 q picked (or past E) */
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q >= E) taken |= 1u << q;
    float wsum = 0.f; /* the CPU's float sum of the picked, in pick order */
    rid = 0, rwt = 0.f;
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
        if (lane == j) rid = bi, rwt = v;
        wsum = __fadd_rn(wsum, v);
    }
    if (norm && lane < k) rwt = __fdiv_rn(rwt, wsum);
}

#endif
