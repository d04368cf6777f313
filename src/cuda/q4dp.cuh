/* q4dp.cuh: the dp4a products of q4dp.cu, for linear.cu's tsc_linear. */
#ifndef TS_CUDA_Q4DP_CUH
#define TS_CUDA_Q4DP_CUH

#include "cuda/tsc.h"

/* 1 when q4dp_linear computes products of w: 4-bit MLX layout, a
 * power-of-two group of 32..256, x's digits of one row within the staging
 * limit, TSC_Q4DP not 0 in the environment. */
bool q4dp_takes(const tsc_weight *w);
/* y[i] = x . w[i]^T for nw weights q4dp_takes (one layout, checked by the
 * caller), n >= 1 rows. */
void q4dp_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n);

#endif
