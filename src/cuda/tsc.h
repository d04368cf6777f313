/* tsc.h: the CUDA kernels' internal host API (src/cuda/).
 *
 * Owns: one device context (a device, a stream, a sticky error, counted
 * device allocations), device weight descriptors, and one entry point per
 * op of a decode step: matrix-vector products over 1..16 rows, embedding
 * gather, add+RMSNorm, SiLU / SwiGLU, the fused GDN step, gated attention
 * decode over the KV cache, MoE routing, argmax, sampling candidates (topn);
 * CUDA graph capture; timing.
 * Does not own: models, the backend contract (src/backend.h maps its ops onto
 * these one to one: linear, embed, add_norm, swiglu, gdn (prep + scan),
 * attn, moe_route, argmax, topn, alloc/free/write/read/copy/fill/sync, graph
 * begin/end/launch), the memory plan, engine selection.
 *
 * Conventions (every entry point):
 *  - Pointers named in the argument lists are device pointers unless the
 *    name says host. Work is queued on the context's stream; nothing waits
 *    except tsc_sync, tsc_read_sync and the timers.
 *  - Errors are sticky: the first failure (a bad argument found on the host,
 *    a failed allocation, a launch or kernel error) is kept with a sentence
 *    naming the op and the cause; every later call becomes a no-op, and
 *    tsc_sync returns it (TS_E_ARG, TS_E_NOMEM, TS_E_UNSUPPORTED or TS_E_IO
 *    for a device fault). A context that failed is closed and reopened.
 *  - Without CUDA (plain `make`), src/cuda/stub.c defines these: tsc_open
 *    fails with "built without CUDA" and nothing else is reachable.
 *
 * Activations are f32 (x, y, norms, GDN rows, attention q/k/v and the KV
 * cache). Why f32 and not bf16: at batch 1 an activation row is H*4 bytes
 * (16 KiB at H = 4096) against ~140 MB of weights per 9B layer, so bf16
 * activations would save under 0.1% of the bytes a step reads; f32 keeps
 * every op within f32 rounding of the CPU reference (the tests' tolerances
 * are f32 reduction-order bounds, not bf16 ones) and lets the same parity
 * checks cover both backends. The one place the choice costs bandwidth is
 * the KV cache at long contexts (the 9B reads 64 KiB of f32 K+V per cached
 * token, ~5% of a step at 4K tokens, ~40% at 32K): a bf16 cache is the
 * first thing to add there. Accumulation f32 everywhere; norms accumulate in
 * double; GDN state and softmax f32.
 *
 * The verify rule (design.md): every op here computes each row exactly as a
 * one-row call does, bit for bit, for any number of rows n in a call. Ops
 * keep it by fixing every reduction's shape from the weight or model shape
 * alone (never from n) and by writing the arithmetic with explicit
 * rounding intrinsics where the compiler could contract differently.
 */
#ifndef TS_CUDA_TSC_H
#define TS_CUDA_TSC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ts_int.h" /* ts_error, ts_dtype, ts_fail: C linkage from C++ too */

typedef struct tsc_ctx tsc_ctx;
typedef struct tsc_graph tsc_graph;

/* ---- context ---- */

/* 1 when this build has CUDA; 0 for the stub. */
int tsc_built(void);
/* Open device `device` (0-based) with its own stream. Errors:
 * TS_E_UNSUPPORTED "built without CUDA" (stub), "no CUDA device" (none
 * visible, with the driver's reason), "device N has compute capability X.Y;
 * these kernels need 9.0" (older than the build's target); TS_E_ARG for a
 * device index out of range. */
int tsc_open(int device, tsc_ctx **out, ts_error *err);
void tsc_close(tsc_ctx *c); /* NULL ok; frees every allocation still live */
/* Device name, multiprocessor count, free and total device memory. */
int tsc_info(tsc_ctx *c, char *name, size_t cap, int *n_sm, size_t *free_bytes, size_t *total_bytes);
/* Wait for the stream; 0 or the sticky error (err filled). */
int tsc_sync(tsc_ctx *c, ts_error *err);
/* The sticky error's code without waiting (0: none yet). */
int tsc_error(const tsc_ctx *c);

/* ---- memory (counted: tsc_mem_used is the sum of live tsc_alloc) ---- */
void *tsc_alloc(tsc_ctx *c, size_t bytes); /* 256-byte aligned; NULL + sticky TS_E_NOMEM */
void tsc_free(tsc_ctx *c, void *p);        /* NULL ok */
size_t tsc_mem_used(const tsc_ctx *c);
void tsc_write(tsc_ctx *c, void *dst, const void *host_src, size_t bytes); /* host_src read before return */
void tsc_read(tsc_ctx *c, void *host_dst, const void *src, size_t bytes);  /* complete on return */
void tsc_copy(tsc_ctx *c, void *dst, const void *src, size_t bytes);
void tsc_fill(tsc_ctx *c, float *dst, float v, size_t n);
/* n elements of dtype dt (F32, F16, BF16: uniform in [lo, hi); U32: random
 * bits) from a counter hash of seed: benchmark weights without a host copy. */
void tsc_fill_random(tsc_ctx *c, void *dst, size_t n, ts_dtype dt, float lo, float hi, uint32_t seed);

/* ---- weights ----
 * A logical [rows, cols] matrix (out x in) in F32, F16 or BF16, or quantized
 * in the MLX layout: dtype U32, value j of a row in u32 word j*bits/32 at bit
 * (j*bits)%32, w = scale * q + bias per group of `group` columns, scales and
 * biases [rows, cols/group] in sdtype (F32, F16, BF16). The same fields as
 * the CPU's ts_weight (kernels.h), with device pointers. */
typedef struct tsc_weight {
    ts_dtype dtype;
    int bits, group;
    int64_t rows, cols;
    const void *data;   /* [rows, cols] elements, or [rows, cols*bits/32] u32 */
    const void *scales; /* [rows, cols/group] sdtype, quantized only */
    const void *biases; /* [rows, cols/group] sdtype, quantized only */
    ts_dtype sdtype;
    int layout;         /* TSC_LAYOUT_*: 0 (MLX, as above) for every host descriptor */
    int act_digits;     /* 4-bit MLX products: x as 1..3 int8 digits (8/16/24 bits, q4dp.cu); 0 = 3 */
} tsc_weight;

/* Device layouts. tsc_weight_upload stores a 4-bit weight with cols % 64 == 0
 * and cols <= TSC_Q4T_MAX_COLS as TSC_LAYOUT_Q4T (unless TSC_Q4T=0 is in the
 * environment) (q4t.cu: 16-row x 64-column
 * tiles in the tensor cores' fragment order, rows padded to a multiple of 16;
 * `scales` then holds scales and biases interleaved per tile and group and
 * `biases` is NULL). Everything that takes a tsc_weight reads both layouts;
 * the fused products (tsc_linear_swiglu, tsc_linear_addnorm, tsc_moe_linear)
 * need Q4T. */
#define TSC_LAYOUT_MLX 0
#define TSC_LAYOUT_Q4T 1
#define TSC_Q4T_MAX_COLS 32768

/* Bytes of data + scales + biases as stored (Q4T: rows padded to 16). */
size_t tsc_weight_bytes(const tsc_weight *w);
/* Bytes tsc_weight_upload allocates for host descriptor w (the plan's figure). */
size_t tsc_weight_dev_bytes(const tsc_weight *host);
/* 0 when the products support w's layout, else TS_E_UNSUPPORTED with the
 * reason (err may be NULL): 4- or 8-bit with a power-of-two group, group %
 * 32 == 0 (4-bit) or % 16 == 0 (8-bit), cols a multiple of the group (of 8 for F16/BF16, 4 for
 * F32), rows >= 1. */
int tsc_weight_check(const tsc_weight *w, ts_error *err);
/* Copy a host-pointer descriptor's arrays to one device allocation each
 * (dev gets the device pointers); tsc_weight_free releases them. */
int tsc_weight_upload(tsc_ctx *c, const tsc_weight *host, tsc_weight *dev, ts_error *err);
void tsc_weight_free(tsc_ctx *c, tsc_weight *dev);
/* A device weight in the MLX layout whose three arrays are separate
 * tsc_alloc blocks: convert it to Q4T in place when its shape allows (new
 * blocks; the old ones are freed); 0 and no change otherwise. The upload
 * uses it (a transient second copy of one weight). */
int tsc_weight_relayout(tsc_ctx *c, tsc_weight *w, ts_error *err);

/* ---- compute ---- */

#define TSC_LIN_MAX 8   /* weights per tsc_linear call */
#define TSC_ROWS_MAX 16 /* rows per call of the row-wise ops */

/* y[i][r, rows_i] = x[r, cols] . w[i]^T for r < n rows (1..16), nw weights of
 * the same cols and dtype sharing x (one launch). Row-exact: each (x row,
 * output) is computed by the same operations whatever n and whatever other
 * weights share the call. x [n, cols] f32, y[i] [n, w[i]->rows] f32. */
void tsc_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n);
/* Whether weights a and b may share one launch of tsc_linear and the fused
 * products (one layout and format, the same columns): the rule tsc_linear
 * checks, for callers that group weights before calling it. */
static inline int tsc_linear_one_launch(const tsc_weight *a, const tsc_weight *b) {
    return a->cols == b->cols && a->dtype == b->dtype && a->bits == b->bits && a->layout == b->layout &&
           a->act_digits == b->act_digits && (a->dtype != TS_DTYPE_U32 || (a->group == b->group && a->sdtype == b->sdtype));
}
/* tsc_linear over n >= 1 rows of any count, the rows' 4-row groups in one
 * launch: each row's bits are tsc_linear's (the same block arithmetic,
 * row-exact), for weights tsc_linear_many_takes (the plain kernel's: bf16,
 * f16, f32 and 8-bit MLX, not 4-bit MLX, which takes the dp4a kernel, nor
 * Q4T; cols % 32 == 0). Prompt chunks' products that must not depend on the
 * rows sharing a call (a chunk MoE's router: backend.cu, rows_linear). */
int tsc_linear_many_takes(const tsc_weight *w);
void tsc_linear_many(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n);
/* Prompt-chunk products on tensor cores (q4gemm.cu): y[i] = x . w[i]^T for
 * n >= 1 rows (any count), nw weights tsc_gemm_takes with one shape of
 * columns (4-bit MLX layout, group a multiple of 64, cols % 64 == 0). x is
 * rounded to bf16 (the weights are exact), so the rows are not those of
 * tsc_linear: prefill only, never decode or verify. ws: tsc_gemm_ws_bytes(n,
 * cols) device bytes, 256-byte aligned (x as bf16 and its block sums). */
size_t tsc_gemm_ws_bytes(int n, int64_t cols);
int tsc_gemm_takes(const tsc_weight *w);
void tsc_linear_gemm(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n, void *ws);
/* Prompt-chunk products through cuBLAS (blas.cu), loaded at run time:
 * y[i] = x . w[i]^T for n >= 1 rows, nw weights with one count of columns,
 * each bf16 or 4/8-bit MLX (tsc_blas_takes); quantized weights are
 * dequantized to bf16 in pieces of whole rows, x rounded to bf16, f32
 * accumulation. Prefill only (not row-exact, and never inside a capture).
 * tsc_blas_ready: 1 when the library was found (TSC_CUBLAS=PATH names it),
 * tsc_blas_what the sentence saying which, or why not. ws:
 * tsc_blas_ws_bytes(n, cols, scratch) device bytes, 256-byte aligned, whose
 * scratch part (at least 128 rows of the widest weight) sets the pieces. */
int tsc_blas_ready(void);
/* 1 when this context can run them (its cuBLAS handle made, or made now); 0
 * leaves the caller on its other kernels (the failure said once on stderr). */
int tsc_blas_usable(tsc_ctx *c);
const char *tsc_blas_what(void);
int tsc_blas_takes(const tsc_weight *w);
size_t tsc_blas_ws_bytes(int n, int64_t cols, size_t scratch);
void tsc_linear_blas(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n, void *ws,
                     size_t ws_bytes);
void tsc_blas_release(tsc_ctx *c); /* the context's handle (tsc_close calls it) */
/* The grouped form (MoE experts over a route list): w0[i] describes expert
 * 0 of table i, expert e at byte offset e * estride[i] (data, scales and
 * biases alike); nq staged rows, row r gathered from x's row imap[r] (NULL:
 * row r; < 0: zeros; x has n_src rows); tiles: ntiles x (expert, first
 * staged row, rows <= 64, unused) int32 quads in device memory (16-byte
 * aligned); staged row r's output goes to row omap[r] of y[i] (NULL: row r;
 * < 0: none). ws: tsc_gemm_ws_bytes(nq + 64, cols). */
void tsc_linear_gemm_grouped(tsc_ctx *c, const tsc_weight *const *w0, const int64_t *estride, int nw, const float *x,
                             int n_src, const int32_t *imap, int nq, const int32_t *tiles, int ntiles,
                             const int32_t *omap, float *const *y, void *ws);
/* The two halves, for a staging that serves several products: x's first
 * n_src rows staged into nst rows of ws (zeros past n_src; ws:
 * tsc_gemm_ws_bytes(nst, cols)); then a grouped product over those staged
 * rows, tile rows gathered at load through gidx (staged row gidx[r] for
 * tile row r; NULL: row r), outputs through omap as above. */
void tsc_gemm_stage(tsc_ctx *c, const float *x, int n_src, int64_t cols, int nst, void *ws);
void tsc_gemm_staged(tsc_ctx *c, const tsc_weight *const *w0, const int64_t *estride, int nw, int nst,
                     const int32_t *tiles, int ntiles, const int32_t *gidx, const int32_t *omap, float *const *y,
                     void *ws);
/* The same products with the activation made while staging x (one kernel
 * instead of two; Q4T weights, or 4-bit MLX weights through the dp4a
 * kernel (see below), else TS_E_UNSUPPORTED):
 *  swiglu: x = silu(g) * u elementwise (tsc_silu_mul's bits), g, u [n, cols];
 *  addnorm: v = x + add (add may be NULL: v = x), x_out = v (must not alias x
 *  when add is given; may be NULL when add is NULL), u_out = RMSNorm(v) * w
 *  (may be NULL), and the products of RMSNorm(v) * w. The norm's double sum
 *  runs over 256 threads, so it may differ from tsc_add_rmsnorm in the last
 *  bit of the f32 row (both within the norm test's tolerance). */
void tsc_linear_swiglu(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *g, const float *u, float *const *y,
                       int n);
/* The fused products on 4-bit MLX weights (q4dp.cu: products of the dp4a
 * kernel) take the same arguments with two differences: x_out and u_out may
 * alias x, and tsc_linear_swiglu_out also writes silu(g) * u to g_out (may
 * alias g); the activations have the bits of tsc_add_rmsnorm / tsc_silu_mul,
 * and so do the products (those of the plain product of the activation).
 * They need a device counter set once with tsc_set_barrier: 4 bytes at 0,
 * which each launch leaves at 0 (block 0 writes the outputs after every
 * block has read x). */
void tsc_linear_swiglu_out(tsc_ctx *c, const tsc_weight *const *w, int nw, float *g, const float *u, float *g_out,
                           float *const *y, int n);
void tsc_set_barrier(tsc_ctx *c, unsigned *dev_counter);
/* Optional device scratch of tsc_digits_ws_bytes() bytes where the 4-bit
 * dp4a products stage x's digits once per pass (q4dp.cu, "Digits once")
 * instead of in every block; without it (NULL) every block makes them.
 * One per context: the passes of a stream use it in turn. */
size_t tsc_digits_ws_bytes(void);
void tsc_set_digits(tsc_ctx *c, void *dev, size_t bytes);
/* The quantization group (32, 64 or 128) when a plain product of w over n
 * rows would take its x's 8-bit digits made once in that scratch (the dp4a
 * products, every switch as they read it), so that a GDN step or an
 * attention may make them for it (tsc_gdn_args.dg, tsc_attn_args.dg); 0
 * otherwise. */
int tsc_digits_group(const tsc_ctx *c, const tsc_weight *w, int n);
void tsc_linear_addnorm(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, const float *add,
                        const float *norm_w, float eps, float *x_out, float *u_out, float *const *y, int n);
/* Whether tsc_linear_addnorm takes w through the plain kernel (bf16, f16,
 * f32 or 8-bit MLX weights of at most 4096 columns, the rows 16-byte
 * aligned): every block stages the normed rows itself and the last one
 * writes the outputs (x_out may be x), the bits of tsc_add_rmsnorm then
 * tsc_linear. A MoE layer's router takes its input norm so (backend.cu). */
int tsc_linear_addnorm_plain_takes(const tsc_weight *w, const float *x, const float *add, const float *norm_w);

/* MoE expert products by device ids (q4t.cu): for the n*k slots s = i*k + j
 * (ids [n, k] on the device), y[t][s, rows] = tab[t][ids[s]] . x(s) with
 * x(s) = x row i (x_per_slot 0) or x row s (1), or silu(x row) * u row when u
 * is given (the down product over the gate/up outputs). tab[t] is a host
 * array of E device descriptors (E <= TSC_MOE_EMAX, all one Q4T shape), nt
 * tables (1 or 2: gate and up) share x. Only the selected experts' bytes are
 * read. An id outside [0, E) gives a zero row. Row-exact like tsc_linear. */
#define TSC_MOE_EMAX 512
void tsc_moe_linear(tsc_ctx *c, const tsc_weight *const *tab, int nt, int E, const int32_t *ids, int n, int k,
                    const float *x, const float *u, int x_per_slot, float *const *y);
/* t[i, H] = sum_j wts[i, j] * ye[i*k + j, H] in j order, then + sigmoid(gs[i]) *
 * ys[i, H] when ys is given (gs [n] the shared expert's gate logit). */
void tsc_moe_combine(tsc_ctx *c, const float *ye, const float *wts, int n, int k, const float *ys, const float *gs,
                     float *t, int H);

/* x[i, cols] = row ids[i] of w as f32, i < n (ids on the device; an id out of
 * range gives a zero row and the sticky error is not raised: the host cannot
 * see it without a sync). Exactly ts_weight_row's bits. */
void tsc_embed(tsc_ctx *c, const tsc_weight *w, const int32_t *ids, int n, float *x);

/* Rows i < n of dim: x_i += add_i (add may be NULL; then x is only read),
 * y_i = x_i * rsqrt(mean(x_i^2) + eps) * w (w holds 1 + w for the (1+w)
 * norms). y may alias x. The sum of squares in double, as on the CPU. */
void tsc_add_rmsnorm(tsc_ctx *c, float *x, const float *add, const float *w, float *y, int n, int dim, float eps);

/* y = silu(x) (y may be x); g = silu(g) * u. n elements. */
void tsc_silu(tsc_ctx *c, float *y, const float *x, size_t n);
void tsc_silu_mul(tsc_ctx *c, float *g, const float *u, size_t n);

/* The GDN decode step of one layer over n rows (1..16) in order (model-spec.md
 * §2.3): causal depthwise conv over [conv_state, qkv rows] + SiLU, l2 norms of
 * q and k per key head (q scaled by dk^-1/2), beta = sigmoid(b), decay =
 * exp(neg_A * softplus(a + dt_bias)), the delta rule on the f32 state
 * (value head h uses key head h / (Hv/Hk)), the gated RMSNorm (plain w,
 * silu(z)). conv_state and S advance in place: after the call they hold the
 * state after the n rows, so n one-row calls equal one n-row call bit for
 * bit. Two kernels: prep (conv, SiLU, l2 norms, conv tail; into ws) and
 * scan (gates, state, output, gated norm). Needs dk == dv == 128, K == 4. */
typedef struct tsc_gdn_args {
    int n, Hk, Hv, dk, dv, K;
    const float *qkv;     /* [n, C] pre-conv, C = 2*Hk*dk + Hv*dv: q | k | v */
    const float *z;       /* [n, Hv*dv] */
    const float *b, *a;   /* [n, Hv] raw beta and decay inputs */
    float *conv_state;    /* [K-1, C] the previous inputs, oldest first */
    const float *conv_w;  /* [K, C]: conv_w[(K-1)*C + c] multiplies the current row */
    float *S;             /* [Hv, dk, dv] f32 recurrent state */
    const float *neg_A;   /* [Hv] -exp(A_log) */
    const float *dt_bias; /* [Hv] */
    const float *norm_w;  /* [dv] plain gated-norm weight */
    float eps;
    float *o;             /* [n, Hv*dv] out: the gated norm's output (out_proj's input); NULL: none */
    float *ws;            /* tsc_gdn_ws_bytes(n, C) */
    /* The engine's form (src/cuda/backend.cu, speculative verify and its
     * rollback; all NULL in the kernel tests, which is the plain in-place step):
     *  - conv_in / S_in: the state the rows start from when it is not
     *    conv_state / S; the state after the rows is written to conv_state / S
     *    (a verify advances the block-start state into the other buffer of its
     *    pair: no copy). In place when NULL.
     *  - par_conv / par_S: device ints (the step record's parities, so that a
     *    captured graph replays with the current ones); 1 selects conv_alt /
     *    S_alt instead of conv_state / S, in place (conv_in / S_in NULL then).
     *  - o NULL (and z unread): the rows advance the state without output (a
     *    lazy rollback's replayed rows).
     *  - sel: device ints [4] (the step record's, so that a captured verify
     *    or rollback replays with the current choice): the pair buffer (0:
     *    conv_state / S, 1: conv_alt / S_alt) of the conv source, the conv
     *    destination, the S source and the S destination; cont = 1 makes
     *    the sources the destinations (a run's later blocks continue in
     *    place). Overrides conv_in, S_in and the parities.
     *  - n_dev: a device row count (a lazy rollback's pending rows): the
     *    call runs rows [0, min(n, *n_dev - n_base)) of its n; with none it
     *    does nothing at all (no state is read or written, not even copied
     *    from a source to a destination).
     * None of this changes a row's arithmetic. */
    const float *conv_in, *S_in;
    float *conv_alt, *S_alt;
    const int32_t *par_conv, *par_S;
    const int32_t *sel;
    int cont;
    const int32_t *n_dev;
    int n_base;
    /* tsc_gdn_prefill's WY form (gdn.cu; NULL: the row scan): a buffer of
     * tsc_gdn_wy_bytes(wy_rows, Hv) bytes for the chunks' records, the rows
     * done in segments of wy_rows (a multiple of 64, at least 64);
     * the backend gives it unless TSC_GDN_WY=0 (bench/cuda/RESULTS.md,
     * session 21, call 6: the 9B's pp512 / pp2048 19,581 / 24,365 tok/s
     * against 17,692 / 20,705 with the row scan). */
    float *wy;
    int wy_rows;
    /* tsc_gdn_step (fused kernel, o set, no n_dev): also o's 8-bit digits
     * in the dp4a products' staged layout for n rows (q4dp_impl.cuh's
     * stage_word: per group of dg_group = 32, 64 or 128 columns), written
     * to dg, so that the next product of o need not make them (the ctx's
     * digits workspace: tsc_digits_group gives the group); NULL: none */
    void *dg;
    int dg_group;
    /* the fused kernel's rows' outputs (and digits) by warp t % 8 of each
     * block rather than by warp 0 in turn: the same arithmetic a row, so the
     * same bits (tsc_gdn_step sets it from the ctx: on unless
     * TSC_GDN_ROWPAR=0; bench/cuda/RESULTS.md, session 34) */
    int rows_par;
} tsc_gdn_args;
size_t tsc_gdn_ws_bytes(int n, int C);
size_t tsc_gdn_wy_bytes(int rows, int Hv);
int tsc_gdn_wy_rows(size_t bytes, int Hv); /* the rows (a multiple of 64) a buffer of `bytes` takes; 0: none */
void tsc_gdn_step(tsc_ctx *c, const tsc_gdn_args *a);
/* A prompt chunk's n >= 3 rows at once (gdn.cu: five kernels, the
 * recurrence one warp per value head and 4 state columns, no barrier per
 * row): the plain in-place form only (no conv_in / S_in, sel, n_dev; o
 * given), dk = dv = 128, conv 4. ws: tsc_gdn_ws_bytes(n, C). The same
 * element arithmetic as tsc_gdn_step summed in another order: not
 * row-exact with it, prompt chunks only. */
void tsc_gdn_prefill(tsc_ctx *c, const tsc_gdn_args *a);

/* Gated attention decode over the KV cache for n rows (1..16): row i sits at
 * position pos + i. In place: q heads (first D of each [q | gate] pair) and
 * k get the (1+w) RMSNorm per head and NeoX RoPE on their first rot dims
 * (theta); k and v rows go into the cache at pos + i; then row i attends to
 * cache rows [0, pos + i] (GQA: query head h uses KV head h / (nq/nkv),
 * scale 1/sqrt(D), softmax in f32), the output is multiplied by
 * sigmoid(gate). The sequence is split in pieces of TSC_ATTN_SPLIT keys, each
 * a block, combined per row in piece order: the split depends on the row's
 * length only, so rows stay exact. Needs D % 32 == 0, D <= 256, nq/nkv <= 16. */
#define TSC_ATTN_SPLIT 32
typedef struct tsc_attn_args {
    int n, pos, nq, nkv, D, rot;
    float theta, eps;
    float *qg;            /* [n, nq, 2D]: per head query D | gate D */
    float *k;             /* [n, nkv*D] */
    const float *v;       /* [n, nkv*D] */
    const float *q_norm;  /* [D] 1 + w */
    const float *k_norm;  /* [D] 1 + w */
    float *Kc, *Vc;       /* [max_T, nkv*D] the cache */
    int max_T;
    float *out;           /* [n, nq*D] */
    float *ws;            /* tsc_attn_ws_bytes(n, nq, D, max_T) (tsc_attn_ws_bytes_split with split) */
    /* The engine's form (src/cuda/backend.cu), both 0/NULL in the kernel
     * tests: pos_dev, a device int added to pos (the step record's position,
     * so that a captured graph replays at every position; the split grid then
     * covers the whole cache and pieces past a row's length exit); split,
     * keys per piece (a multiple of TSC_ATTN_SPLIT; 0 = TSC_ATTN_SPLIT), a
     * piece processed in sub-chunks of TSC_ATTN_SPLIT keys with online
     * rescaling, so fewer partials need less workspace. */
    const int32_t *pos_dev;
    int split;
    /* 0: the whole op; 1: prep only (norms, RoPE, K/V appended; any number
     * of rows, not only TSC_ROWS_MAX: a block a row and head); 2: the
     * attention only, over q already prepared (the engine appends a block's
     * rows first, then attends row by row: the output may overwrite later
     * rows' v inputs, as the model's buffers do) */
    int phase;
    /* DFlash's draft layers (backend.cu's block mask; 0 in every other use):
     * no_gate, queries without a gate: qg is [n, nq, D] (q_norm and k_norm
     * multiply as given) and the output is not multiplied by a sigmoid;
     * no_q (phase 1 only), rows without a query: only their keys are normed,
     * rotated and appended with their values (the drafter's context rows).
     * The block mask itself needs no field: the engine attends a block row
     * as the row at pos + n - 1 would, over cache rows [0, pos + n). */
    int no_gate, no_q;
    /* np_max > 0 (the engine's form since session 19; split then 0): a row
     * of length T takes pieces of P(T) = TSC_ATTN_SPLIT * ceil(T / (TSC_ATTN_
     * SPLIT * np_max)) keys, so at most np_max of them and the finest that
     * fits (the split of a fixed P chosen from the cache's length gave a
     * 32K-token session pieces of 160 keys at every position: 432 against
     * 476 tok/s at 600 tokens on the 9B). A row's P depends on its own
     * length only, so rows stay exact across n; the workspace holds np_max
     * pieces a row and head (tsc_attn_ws_bytes_np). */
    int np_max;
    /* same_pos (phase 2 only; 0 everywhere but the block mask): every row
     * attends as the row at pos (keys [0, pos + 1)), not row i at pos + i:
     * a DFlash block's rows in one call (backend.cu, attn_block) */
    int same_pos;
    /* The combine (phase 0 or 2) also writes out's 8-bit digits in the dp4a
     * products' staged layout for the call's n rows (q4dp_impl.cuh's
     * stage_word, groups of dg_group = 32, 64 or 128 columns, a divisor of
     * D), as tsc_gdn_args.dg does for the GDN step, so that the product of
     * out next (o_proj) need not make them; NULL: none */
    void *dg;
    int dg_group;
} tsc_attn_args;
size_t tsc_attn_ws_bytes_np(int n, int nq, int D, int np_max);
size_t tsc_attn_ws_bytes(int n, int nq, int D, int max_T);
size_t tsc_attn_ws_bytes_split(int n, int nq, int D, int max_T, int split);
void tsc_attn_decode(tsc_ctx *c, const tsc_attn_args *a);
/* The attention of a prompt chunk's n rows (any n) over q already prepared
 * (phase 1 of tsc_attn_decode done for all rows): per KV head, up to 32 query
 * vectors a block, the cache read in tiles of 32 keys once per block
 * (flash attention, f32). Not row-exact with tsc_attn_decode (another
 * summation order): prompt chunks only. ws unused; D % 32 == 0, D <= 256,
 * nq / nkv <= 32. */
void tsc_attn_prefill(tsc_ctx *c, const tsc_attn_args *a);
/* The same attention through cuBLAS (blas.cu): rows [0, n) at positions
 * pos.. (the host's; pos_dev and phase are not read), K/V already in the
 * cache; TF32 products (q, k, p, v rounded to 2^-11), so prompt chunks only.
 * ws: a tsc_linear_blas workspace, or tsc_attn_blas_ws_bytes(rows, G, T)
 * bytes for tiles of `rows` query rows over T = pos + n keys (G = nq / nkv);
 * tsc_attn_blas_fits: the workspace holds a tile of one row. */
void tsc_attn_blas(tsc_ctx *c, const tsc_attn_args *a, int pos, void *ws, size_t ws_bytes);
size_t tsc_attn_blas_ws_bytes(int rows, int G, int64_t T);
int tsc_attn_blas_fits(const tsc_attn_args *a, int pos, size_t ws_bytes);

/* MoE routing of n rows (1..16): p = softmax(logits[i, E]) in f32 (sum in
 * double), the top k of p (ties: the lower expert index, as the CPU's scan),
 * weights p_j / sum_j p_j when norm, else p_j. ids [n, k], wts [n, k].
 * E <= 1024, k <= 32. */
void tsc_moe_route(tsc_ctx *c, const float *logits, int n, int E, int k, int norm, int32_t *ids, float *wts);
/* tsc_moe_route, and in the same launch the 8-bit digits of x's n rows of
 * cols columns in groups of group (the dp4a products' staging: the digits
 * scratch, tsc_set_digits), which a MoE gate/up over x launched next copies
 * instead of staging x in every block. 1 when it routed and made them; 0
 * when the shapes or the scratch do not allow it (then nothing is
 * launched: route with tsc_moe_route). The same ids, weights and product
 * bits either way. */
int tsc_moe_route_digits(tsc_ctx *c, const float *logits, int n, int E, int k, int norm, int32_t *ids, float *wts,
                         const float *x, int cols, int group);

/* ids[i] = the first index of the largest of x[i, V] for i < n rows; NaN
 * never wins (an all-NaN row gives 0). ws: tsc_argmax_ws_bytes(n). */
size_t tsc_argmax_ws_bytes(int n);
void tsc_argmax(tsc_ctx *c, const float *x, int n, int V, int32_t *ids, void *ws);

/* Sampling candidates of one row x[V] (sample.cu; the topn op of
 * src/backend.h): v_i = (x_i, penalised when listed: x / rep or x * rep
 * when rep != 1, then minus pen_sub) * scale; the first N (1..TSC_TOPN_MAX)
 * valid entries (v > -inf) by larger v then lower id, the valid count and
 * the sum of expf(v - max) in double. With penalties (n_pen > 0; pen_ids
 * distinct, device memory like pen_sub) row [V] is scratch for the
 * penalised copy. ws: tsc_topn_ws_bytes(V). Returns the device address of
 * the result, tsc_topn_out_bytes(N) bytes: [sum (double), valid count
 * (int32), 0 (int32)][vals, N floats: -inf past the valid ones][ids, N
 * int32: -1 past the valid ones]; NULL after an error. */
#define TSC_TOPN_MAX 256
size_t tsc_topn_ws_bytes(int V);
size_t tsc_topn_out_bytes(int N);
const void *tsc_topn(tsc_ctx *c, const float *x, int V, int N, float scale, float rep, int n_pen,
                     const int32_t *pen_ids, const float *pen_sub, float *row, void *ws);

/* ---- graphs and timing ---- */
/* Capture everything queued between begin and end into a graph (no work
 * runs while capturing); launch replays it on the stream. */
void tsc_graph_begin(tsc_ctx *c);
tsc_graph *tsc_graph_end(tsc_ctx *c);
void tsc_graph_launch(tsc_ctx *c, tsc_graph *g);
void tsc_graph_free(tsc_graph *g);
/* The kernel nodes of a captured graph. */
int tsc_graph_kernels(tsc_graph *g);
/* Kernels (and other nodes) in a captured graph. */
int tsc_graph_nodes(const tsc_graph *g);
/* Programmatic dependent launch on (1, the default; TSC_PDL=0 in the
 * environment starts it off) or off for the launches queued from now on
 * (a graph keeps what it was captured with). */
void tsc_set_pdl(tsc_ctx *c, int on);
/* Attention decode's split kernel: 2 (the default), keys and values through
 * shared memory with the scores a lane a key (k_attn_split_lk); 1, through
 * shared memory with a warp a key; 0, read from the cache where used. 1 and
 * 0 have the same bits (the tests compare them); 2 sums a score in another
 * order (tested against the CPU reference). TSC_ATTN_KV=0|1|2 starts it. */
void tsc_set_attn_kv(tsc_ctx *c, int on);
/* The attention's work that depends on no earlier kernel's output done
 * before its PDL waits (attn.cu's EA: the prep's RoPE angles, the
 * combine's gate; the same bits): on by default, TSC_ATTN_EARLY=0 off when
 * the context opens. */
void tsc_set_attn_early(tsc_ctx *c, int on);
/* The attention's combine with all of its loads in one round (attn.cu's R1;
 * the same bits): on by default, TSC_ATTN_R1=0 off when the context opens. */
void tsc_set_attn_r1(tsc_ctx *c, int on);
/* The attention split's accumulators sized for its query heads a KV head
 * and its staging's indices stepped, not divided (attn.cu's GC; the same
 * bits): on by default, TSC_ATTN_GC=0 off when the context opens. */
void tsc_set_attn_gc(tsc_ctx *c, int on);
/* The GDN step in one kernel (1, the default; TSC_GDN_FUSED=0 starts it off)
 * or prep + scan (0): the same bits either way (gdn.cu, k_gdn_fused; the
 * tests compare them). Hv / Hk above 2 always takes the two kernels. */
void tsc_set_gdn_fused(tsc_ctx *c, int on);
/* k_gdn_fused's N (on by default, TSC_GDN_NB2=0 starts it off) and its
 * rows' outputs by several warps (TSC_GDN_ROWPAR), for the tests that
 * compare forms in one process */
void tsc_set_gdn_nb2(tsc_ctx *c, int on);
void tsc_set_gdn_rowpar(tsc_ctx *c, int on);
/* MoE routing's picks (tsc_moe_route): by a sorting network (1, the
 * default; TSC_ROUTE_NET=0 starts it off) or one after another (0): the same
 * ids and weights, bit for bit (misc.cu; the tests compare them). */
void tsc_set_route_net(tsc_ctx *c, int on);
/* Events on the stream: mark, then elapsed milliseconds since the mark
 * (waits for the work queued in between). */
void tsc_timer_start(tsc_ctx *c);
double tsc_timer_ms(tsc_ctx *c);
/* The dp4a products' timeline in a build with -DTSC_TRACE (q4dp.cu,
 * trace_at): reset the launch slots (before a capture), then write each
 * launch's shape and its blocks' timer readings to path. Returns the
 * launches written, -1 in other builds or on an I/O error. */
void tsc_trace_reset(void);
int tsc_trace_dump(tsc_ctx *c, const char *path);

#ifdef __cplusplus
}
#endif

#endif
