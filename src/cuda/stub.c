/* stub.c: the CUDA host API (tsc.h) in a build without CUDA (plain `make`).
 *
 * Owns: definitions of every tsc_* entry point that fail cleanly: tsc_open
 * says "built without CUDA", so no context ever exists and nothing else can
 * be reached with a valid one. Compiled only without CUDA=1 (the Makefile
 * drops it from the source list when the .cu files are built).
 */
#include "backend.h"
#include "cuda/tsc.h"

int tsc_built(void) { return 0; }

int tsc_open(int device, tsc_ctx **out, ts_error *err) {
    (void)device;
    if (out) *out = NULL;
    return ts_fail(err, TS_E_UNSUPPORTED, "built without CUDA (rebuild with make CUDA=1)");
}

void tsc_close(tsc_ctx *c) { (void)c; }
int tsc_info(tsc_ctx *c, char *name, size_t cap, int *n_sm, size_t *free_bytes, size_t *total_bytes) {
    (void)c, (void)name, (void)cap, (void)n_sm, (void)free_bytes, (void)total_bytes;
    return TS_E_UNSUPPORTED;
}
int tsc_sync(tsc_ctx *c, ts_error *err) { (void)c; return ts_fail(err, TS_E_UNSUPPORTED, "built without CUDA"); }
int tsc_error(const tsc_ctx *c) { (void)c; return TS_E_UNSUPPORTED; }
void *tsc_alloc(tsc_ctx *c, size_t bytes) { (void)c, (void)bytes; return NULL; }
void tsc_free(tsc_ctx *c, void *p) { (void)c, (void)p; }
size_t tsc_mem_used(const tsc_ctx *c) { (void)c; return 0; }
void tsc_write(tsc_ctx *c, void *dst, const void *src, size_t bytes) { (void)c, (void)dst, (void)src, (void)bytes; }
void tsc_read(tsc_ctx *c, void *dst, const void *src, size_t bytes) { (void)c, (void)dst, (void)src, (void)bytes; }
void tsc_copy(tsc_ctx *c, void *dst, const void *src, size_t bytes) { (void)c, (void)dst, (void)src, (void)bytes; }
void tsc_fill(tsc_ctx *c, float *dst, float v, size_t n) { (void)c, (void)dst, (void)v, (void)n; }
void tsc_fill_random(tsc_ctx *c, void *dst, size_t n, ts_dtype dt, float lo, float hi, uint32_t seed) {
    (void)c, (void)dst, (void)n, (void)dt, (void)lo, (void)hi, (void)seed;
}
size_t tsc_weight_bytes(const tsc_weight *w) { (void)w; return 0; }
int tsc_weight_check(const tsc_weight *w, ts_error *err) { (void)w; return ts_fail(err, TS_E_UNSUPPORTED, "built without CUDA"); }
int tsc_weight_upload(tsc_ctx *c, const tsc_weight *h, tsc_weight *d, ts_error *err) {
    (void)c, (void)h, (void)d;
    return ts_fail(err, TS_E_UNSUPPORTED, "built without CUDA");
}
void tsc_weight_free(tsc_ctx *c, tsc_weight *d) { (void)c, (void)d; }
void tsc_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    (void)c, (void)w, (void)nw, (void)x, (void)y, (void)n;
}
int tsc_linear_many_takes(const tsc_weight *w) { (void)w; return 0; }
int tsc_linear_addnorm_plain_takes(const tsc_weight *w, const float *x, const float *add, const float *norm_w) {
    (void)w, (void)x, (void)add, (void)norm_w;
    return 0;
}
void tsc_linear_many(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    (void)c, (void)w, (void)nw, (void)x, (void)y, (void)n;
}
void tsc_attn_blas(tsc_ctx *c, const tsc_attn_args *a, int pos, void *ws, size_t ws_bytes) {
    (void)c, (void)a, (void)pos, (void)ws, (void)ws_bytes;
}
size_t tsc_attn_blas_ws_bytes(int rows, int G, int64_t T) { (void)rows, (void)G, (void)T; return 0; }
int tsc_attn_blas_fits(const tsc_attn_args *a, int pos, size_t ws_bytes) { (void)a, (void)pos, (void)ws_bytes; return 0; }
size_t tsc_gdn_wy_bytes(int rows, int Hv) { (void)rows, (void)Hv; return 0; }
int tsc_gdn_wy_rows(size_t bytes, int Hv) { (void)bytes, (void)Hv; return 0; }
int tsc_blas_ready(void) { return 0; }
int tsc_blas_usable(tsc_ctx *c) { (void)c; return 0; }
const char *tsc_blas_what(void) { return "built without CUDA"; }
int tsc_blas_takes(const tsc_weight *w) { (void)w; return 0; }
size_t tsc_blas_ws_bytes(int n, int64_t cols, size_t scratch) { (void)n, (void)cols, (void)scratch; return 0; }
void tsc_linear_blas(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n, void *ws,
                     size_t ws_bytes) {
    (void)c, (void)w, (void)nw, (void)x, (void)y, (void)n, (void)ws, (void)ws_bytes;
}
void tsc_blas_release(tsc_ctx *c) { (void)c; }
size_t tsc_gemm_ws_bytes(int n, int64_t cols) { (void)n, (void)cols; return 0; }
int tsc_gemm_takes(const tsc_weight *w) { (void)w; return 0; }
void tsc_linear_gemm(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n, void *ws) {
    (void)c, (void)w, (void)nw, (void)x, (void)y, (void)n, (void)ws;
}
void tsc_linear_gemm_grouped(tsc_ctx *c, const tsc_weight *const *w0, const int64_t *estride, int nw, const float *x,
                             int n_src, const int32_t *imap, int nq, const int32_t *tiles, int ntiles,
                             const int32_t *omap, float *const *y, void *ws) {
    (void)c, (void)w0, (void)estride, (void)nw, (void)x, (void)n_src, (void)imap, (void)nq, (void)tiles, (void)ntiles;
    (void)omap, (void)y, (void)ws;
}
void tsc_gemm_stage(tsc_ctx *c, const float *x, int n_src, int64_t cols, int nst, void *ws) {
    (void)c, (void)x, (void)n_src, (void)cols, (void)nst, (void)ws;
}
void tsc_gemm_staged(tsc_ctx *c, const tsc_weight *const *w0, const int64_t *estride, int nw, int nst,
                     const int32_t *tiles, int ntiles, const int32_t *gidx, const int32_t *omap, float *const *y,
                     void *ws) {
    (void)c, (void)w0, (void)estride, (void)nw, (void)nst, (void)tiles, (void)ntiles, (void)gidx, (void)omap, (void)y;
    (void)ws;
}
void tsc_embed(tsc_ctx *c, const tsc_weight *w, const int32_t *ids, int n, float *x) { (void)c, (void)w, (void)ids, (void)n, (void)x; }
void tsc_add_rmsnorm(tsc_ctx *c, float *x, const float *add, const float *w, float *y, int n, int dim, float eps) {
    (void)c, (void)x, (void)add, (void)w, (void)y, (void)n, (void)dim, (void)eps;
}
void tsc_silu(tsc_ctx *c, float *y, const float *x, size_t n) { (void)c, (void)y, (void)x, (void)n; }
void tsc_silu_mul(tsc_ctx *c, float *g, const float *u, size_t n) { (void)c, (void)g, (void)u, (void)n; }
size_t tsc_gdn_ws_bytes(int n, int C) { (void)n, (void)C; return 0; }
void tsc_gdn_step(tsc_ctx *c, const tsc_gdn_args *a) { (void)c, (void)a; }
void tsc_gdn_prefill(tsc_ctx *c, const tsc_gdn_args *a) { (void)c, (void)a; }
size_t tsc_attn_ws_bytes(int n, int nq, int D, int max_T) { (void)n, (void)nq, (void)D, (void)max_T; return 0; }
void tsc_attn_decode(tsc_ctx *c, const tsc_attn_args *a) { (void)c, (void)a; }
void tsc_attn_prefill(tsc_ctx *c, const tsc_attn_args *a) { (void)c, (void)a; }
void tsc_moe_route(tsc_ctx *c, const float *logits, int n, int E, int k, int norm, int32_t *ids, float *wts) {
    (void)c, (void)logits, (void)n, (void)E, (void)k, (void)norm, (void)ids, (void)wts;
}
size_t tsc_argmax_ws_bytes(int n) { (void)n; return 0; }
void tsc_argmax(tsc_ctx *c, const float *x, int n, int V, int32_t *ids, void *ws) {
    (void)c, (void)x, (void)n, (void)V, (void)ids, (void)ws;
}
size_t tsc_topn_ws_bytes(int V) { (void)V; return 0; }
size_t tsc_topn_out_bytes(int N) { return 16 + 8 * (size_t)N; }
const void *tsc_topn(tsc_ctx *c, const float *x, int V, int N, float scale, float rep, int n_pen,
                     const int32_t *pen_ids, const float *pen_sub, float *row, void *ws) {
    (void)c, (void)x, (void)V, (void)N, (void)scale, (void)rep, (void)n_pen, (void)pen_ids, (void)pen_sub;
    (void)row, (void)ws;
    return NULL;
}
void tsc_graph_begin(tsc_ctx *c) { (void)c; }
tsc_graph *tsc_graph_end(tsc_ctx *c) { (void)c; return NULL; }
void tsc_graph_launch(tsc_ctx *c, tsc_graph *g) { (void)c, (void)g; }
void tsc_graph_free(tsc_graph *g) { (void)g; }
int tsc_graph_kernels(tsc_graph *g) { (void)g; return 0; }
size_t tsc_attn_ws_bytes_split(int n, int nq, int D, int max_T, int split) {
    (void)n, (void)nq, (void)D, (void)max_T, (void)split;
    return 0;
}
size_t tsc_attn_ws_bytes_np(int n, int nq, int D, int np_max) {
    (void)n, (void)nq, (void)D, (void)np_max;
    return 0;
}

/* the CUDA backend (backend.cu) */
int ts_cuda_backend_new(const ts_backend_params *p, ts_backend **out, ts_error *err) {
    (void)p;
    if (out) *out = NULL;
    return ts_fail(err, TS_E_UNSUPPORTED, "built without CUDA (rebuild with make CUDA=1)");
}
int ts_cuda_built(void) { return 0; }
int ts_cuda_backend_check(ts_backend *be, ts_error *err) { (void)be, (void)err; return 0; }
int ts_cuda_backend_shapes(ts_backend *be, int D, int nq, int nkv, int rot, int dk, int dv, int K, int Hk, int Hv,
                           int E, int topk, ts_error *err) {
    (void)be, (void)D, (void)nq, (void)nkv, (void)rot, (void)dk, (void)dv, (void)K, (void)Hk, (void)Hv, (void)E, (void)topk;
    return ts_fail(err, TS_E_UNSUPPORTED, "built without CUDA");
}
int ts_cuda_backend_info(ts_backend *be, char *name, size_t cap, size_t *ours, size_t *free_b, size_t *total_b) {
    (void)be, (void)name, (void)cap, (void)ours, (void)free_b, (void)total_b;
    return TS_E_UNSUPPORTED;
}
double ts_cuda_copy_probe(ts_backend *be, size_t bytes) { (void)be, (void)bytes; return -1; }
void ts_cuda_stream_stats(ts_stream *s, int *graphs, long *replays, int *kernels, double *launch_us) {
    (void)s;
    if (launch_us) *launch_us = 0;
    if (graphs) *graphs = 0;
    if (replays) *replays = 0;
    if (kernels) *kernels = 0;
}
void tsc_timer_start(tsc_ctx *c) { (void)c; }
double tsc_timer_ms(tsc_ctx *c) { (void)c; return -1; }
size_t tsc_weight_dev_bytes(const tsc_weight *h) { (void)h; return 0; }
int tsc_weight_relayout(tsc_ctx *c, tsc_weight *w, ts_error *err) {
    (void)c, (void)w;
    return ts_fail(err, TS_E_UNSUPPORTED, "built without CUDA");
}
void tsc_linear_swiglu(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *g, const float *u, float *const *y,
                       int n) {
    (void)c, (void)w, (void)nw, (void)g, (void)u, (void)y, (void)n;
}
void tsc_linear_swiglu_out(tsc_ctx *c, const tsc_weight *const *w, int nw, float *g, const float *u, float *g_out,
                           float *const *y, int n) {
    (void)c, (void)w, (void)nw, (void)g, (void)u, (void)g_out, (void)y, (void)n;
}
void tsc_set_barrier(tsc_ctx *c, unsigned *dev_counter) { (void)c, (void)dev_counter; }
size_t tsc_digits_ws_bytes(void) { return 0; }
void tsc_set_digits(tsc_ctx *c, void *dev, size_t bytes) { (void)c, (void)dev, (void)bytes; }
int tsc_digits_group(const tsc_ctx *c, const tsc_weight *w, int n) { (void)c, (void)w, (void)n; return 0; }
void tsc_linear_addnorm(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, const float *add,
                        const float *norm_w, float eps, float *x_out, float *u_out, float *const *y, int n) {
    (void)c, (void)w, (void)nw, (void)x, (void)add, (void)norm_w, (void)eps, (void)x_out, (void)u_out, (void)y, (void)n;
}
void tsc_moe_linear(tsc_ctx *c, const tsc_weight *const *tab, int nt, int E, const int32_t *ids, int n, int k,
                    const float *x, const float *u, int x_per_slot, float *const *y) {
    (void)c, (void)tab, (void)nt, (void)E, (void)ids, (void)n, (void)k, (void)x, (void)u, (void)x_per_slot, (void)y;
}
void tsc_moe_combine(tsc_ctx *c, const float *ye, const float *wts, int n, int k, const float *ys, const float *gs,
                     float *t, int H) {
    (void)c, (void)ye, (void)wts, (void)n, (void)k, (void)ys, (void)gs, (void)t, (void)H;
}
int tsc_graph_nodes(const tsc_graph *g) { (void)g; return -1; }
void tsc_set_pdl(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_set_attn_kv(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_set_attn_early(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_set_attn_r1(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_set_attn_gc(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_set_gdn_fused(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_set_gdn_nb2(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_set_gdn_rowpar(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_set_route_net(tsc_ctx *c, int on) { (void)c, (void)on; }
void tsc_trace_reset(void) {}
int tsc_trace_dump(tsc_ctx *c, const char *path) { (void)c, (void)path; return -1; }

int ts_cuda_comm_nccl(ts_backend *const *be, int n, ts_comm **out, ts_error *err) {
    (void)be, (void)n;
    *out = NULL;
    return ts_fail(err, TS_E_UNSUPPORTED, "built without CUDA (rebuild with make CUDA=1)");
}
