/* q4t.cuh: the Q4T layout's internal interface (q4t.cu; used by ctx.cu,
 * linear.cu, misc.cu). See q4t.cu's header for the layout. */
#ifndef TS_CUDA_Q4T_CUH
#define TS_CUDA_Q4T_CUH

#include "cuda/common.cuh"

/* 1 when w (a 4-bit MLX descriptor) can be stored as Q4T */
int q4t_shape_ok(const tsc_weight *w);
size_t q4t_data_bytes(const tsc_weight *w);
size_t q4t_sb_bytes(const tsc_weight *w);
/* src: a device MLX weight; data/sb: q4t_data_bytes/q4t_sb_bytes allocations */
void q4t_relayout(tsc_ctx *c, const tsc_weight *src, void *data, void *sb);
enum { Q4T_XM_PLAIN, Q4T_XM_SWIGLU, Q4T_XM_ADDNORM };
void q4t_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, int xm, const float *x0, const float *x1,
                const float *nwt, float eps, float *xo, float *uo, float *const *y, int n);

/* Element (row, col) of a Q4T weight as ts_weight_row computes it: s * q + b
 * with separate roundings. */
__device__ __forceinline__ float q4t_elem(const tsc_weight &w, int64_t row, int col) {
    const int nc = (int)(w.cols / 64), ng = (int)(w.cols / w.group);
    const int64_t tile = row >> 4;
    const int r = (int)(row & 15), g = r & 7, h = r >> 3;
    const int ch = col >> 6, kk = (col >> 4) & 3, c16 = col & 15, t = (c16 & 7) >> 1;
    const int e = 2 * h + 4 * (c16 >> 3) + (c16 & 1);
    const uint32_t word = ((const uint32_t *)w.data)[((tile * nc + ch) * 32 + 4 * g + t) * 4 + kk];
    const uint32_t q = (word >> (4 * (e >> 1) + 16 * (e & 1))) & 15u;
    const int64_t ent = ((tile * ng + col / w.group) * 8 + g) * 4;
    const float s = load_s(w.scales, w.sdtype, ent + 2 * h), b = load_s(w.scales, w.sdtype, ent + 2 * h + 1);
    return __fadd_rn(__fmul_rn(s, (float)q), b);
}

#endif
