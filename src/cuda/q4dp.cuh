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

/* The same products with the activation made while staging x (one kernel
 * instead of two; tsc_linear_addnorm / tsc_linear_swiglu for MLX weights):
 * NORM: v = x (+ add), products of RMSNorm(v) * norm_w (tsc_add_rmsnorm's
 * bits), then x_out = v when add is given and y_out = the normed rows (each
 * may be NULL or alias x); SWIGLU: products of silu(x) * u (tsc_silu_mul's
 * bits), y_out = that (may alias x). bar: a device counter at 0, returned
 * to 0 (block 0 writes the outputs once every block has read x). */
enum { Q4DP_XM_PLAIN = 0, Q4DP_XM_NORM = 1, Q4DP_XM_SWIGLU = 2 };
void q4dp_linear_staged(tsc_ctx *c, const tsc_weight *const *w, int nw, int xm, const float *x, const float *add,
                        const float *norm_w, const float *u, float eps, float *x_out, float *y_out, unsigned *bar,
                        float *const *y, int n);

/* The routed experts of a MoE layer, ids on the device (q4dp.cu, "the
 * routed experts"): w[i] is expert 0's descriptor of table i (every expert
 * of a table at data + id * stride[i], scales and biases at the same offsets
 * from its data), ids/wts [ntok][k] the routed experts and their weights.
 * ROWS (gate and up, nw <= 2): y[i] = [ntok][k * rows], slot j's rows at
 * j * rows. COLS (down, nw = 1): x = [ntok][k * cols], the k hidden rows of
 * a token side by side (silu(x) * u when u is given: tsc_silu_mul's bits),
 * y[0] = [ntok][rows] = sum_j wts_j * down_j . h_j, or, with add (COLS),
 * that + sigmoid(gate[t]) * add[t] (MoE's combine with the shared expert:
 * k_moe_combine's operations). */
enum { Q4DP_MOE_ROWS = 1, Q4DP_MOE_COLS = 2 };
bool q4dp_moe_takes(const tsc_weight *w, int k, int em);
/* The shared expert as the down launch's last slot (COLS; sw, its down,
 * given): its hidden rows silu(x2) * u2 ([ntok][slot]) after the k routed
 * ones, its terms scaled by sigmoid(gate[t]), so that y[0] = sum_j wts_j *
 * down_j . h_j + sigmoid(gate[t]) * down_s . h_s in one product (the
 * combine's value, summed in another order; add must then be NULL).
 * q4dp_moe_shared_takes: sw fits (d is the routed down's slot 0). */
bool q4dp_moe_shared_takes(const tsc_weight *d, const tsc_weight *sw, int k);
/* The shared expert's gate and up as slot k of the routed gate/up launch
 * (ROWS; srw[i], its matrix for w[i], given): y[i] = [ntok][k * rows +
 * srw[i]->rows], its rows after the routed ones (rows a multiple of 4, the
 * routed slots' format). A down then takes those hidden rows as its shared
 * slot with x2 = NULL: x and u = [ntok][k * cols + sw->cols]. */
bool q4dp_moe_shared_rows_takes(const tsc_weight *g, const tsc_weight *sg, int k);
void q4dp_moe(tsc_ctx *c, const tsc_weight *const *w, const int64_t *stride, int nw, int em, const int32_t *ids,
              const float *wts, int k, const float *x, const float *u, const float *add, const float *gate,
              float *const *y, int ntok, const tsc_weight *sw = NULL, const float *x2 = NULL, const float *u2 = NULL,
              const tsc_weight *const *srw = NULL);

#endif
