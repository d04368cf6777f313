/* backend.c: the CPU backend behind the contract (backend.h).
 *
 * Owns: the backend object of one engine (its thread pool and kernel mode:
 * nothing process-global, so two engines with different thread counts or
 * modes live side by side), the streams (one per session: the kernel
 * workspace, the sticky error, the step record), host memory, and the small
 * ops (linear, embed, norm, swiglu, argmax, copy/fill/read/write). The fused
 * model ops live beside it: attention (cpu/attn.c), Gated DeltaNet
 * (cpu/gdn.c, chunked prefill included) and MoE (cpu/moe.c).
 * Does not own: the kernels (kernels.h and the per-ISA files), the model.
 *
 * CPU scheduling decisions (which work goes to the pool, how it is grouped)
 * are made here and in the op files, never in model code.
 *
 * Exactness: every op under TS_MODE_EXACT calls the same kernels in the
 * same order as a one-row call; TS_MODE_PREFILL with n > 1 uses the
 * vectorised, threaded prompt-chunk forms (other rounding).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu.h"

typedef struct cpu_be {
    ts_backend base;
    ts_pool *pool;
    int kmode;
} cpu_be;

typedef struct cpu_stream {
    ts_stream base;
    ts_cpu_ws ws;
    ts_cpu_ctx cx;
    int32_t ahead_id[TS_AHEAD_TICKETS];     /* run-ahead: the id slots argmax_ahead writes (embed's ids) */
    int32_t ahead_ticket[TS_AHEAD_TICKETS]; /* and the tickets' copies */
} cpu_stream;

const ts_cpu_ctx *ts_cpu_stream_ctx(ts_stream *s) { return &((cpu_stream *)s)->cx; }

/* ---- memory: host, 64-byte aligned, counted by category ---- */

static void *cpu_alloc(ts_backend *be, size_t bytes, ts_mem_cat cat) {
    (void)be;
    return ts_alloc(bytes, cat);
}
static void cpu_free(ts_backend *be, void *p) {
    (void)be;
    ts_free(p);
}
static size_t view_bytes(ts_view v) { return (size_t)v.cols * ts_dtype_size(v.dt); }
/* one memcpy when both sides are dense, else row by row */
static void copy_rows(void *dst, size_t ldd, const void *src, size_t lds, int64_t rows, size_t row_bytes) {
    if (ldd == lds && ldd == row_bytes) {
        memmove(dst, src, (size_t)rows * row_bytes);
        return;
    }
    for (int64_t r = 0; r < rows; r++) memmove((char *)dst + r * ldd, (const char *)src + r * lds, row_bytes);
}
static void cpu_write(ts_stream *s, ts_view dst, const void *host) {
    (void)s;
    const size_t rb = view_bytes(dst);
    copy_rows(dst.p, (size_t)dst.ld * ts_dtype_size(dst.dt), host, rb, dst.rows, rb);
}
static void cpu_read(ts_stream *s, void *host, ts_view src) {
    (void)s;
    const size_t rb = view_bytes(src);
    copy_rows(host, rb, src.p, (size_t)src.ld * ts_dtype_size(src.dt), src.rows, rb);
}
static void cpu_copy(ts_stream *s, ts_view dst, ts_view src) {
    (void)s;
    const size_t es = ts_dtype_size(src.dt);
    copy_rows(dst.p, (size_t)dst.ld * es, src.p, (size_t)src.ld * es, src.rows, view_bytes(src));
}
static void cpu_fill(ts_stream *s, ts_view dst, float v) {
    (void)s;
    for (int64_t r = 0; r < dst.rows; r++) {
        float *p = (float *)dst.p + r * dst.ld;
        if (v == 0.0f && !signbit(v)) memset(p, 0, sizeof(float) * (size_t)dst.cols);
        else
            for (int64_t c = 0; c < dst.cols; c++) p[c] = v;
    }
}
static const float *cpu_host_rows(ts_stream *s, ts_view v) {
    (void)s;
    return v.p;
}
static int cpu_sync(ts_stream *s) {
    int rc = s->err;
    s->err = 0;
    return rc;
}

/* ---- streams ---- */

static int cpu_stream_new(ts_backend *be, int rows, int64_t cols, int group, ts_stream **out) {
    cpu_be *b = (cpu_be *)be;
    *out = NULL;
    cpu_stream *s = calloc(1, sizeof *s); /* a control block: outside the plan (threads.c) */
    if (!s) return TS_E_NOMEM;
    s->base.be = be;
    s->cx.pool = b->pool;
    s->cx.ws = &s->ws;
    /* the workspace for the stream's largest product, so the token loop
     * never grows it (sized in the engine's kernel mode) */
    int old = ts_kmode_swap(b->kmode);
    size_t r = ts_cpu_ws_reserve(&s->ws, ts_pool_threads_planned(b->pool), rows, cols, group, 1);
    ts_kmode_swap(old);
    if (r == (size_t)-1) {
        ts_cpu_ws_release(&s->ws);
        free(s);
        return TS_E_NOMEM;
    }
    *out = &s->base;
    return 0;
}

static void cpu_stream_free(ts_stream *st) {
    if (!st) return;
    cpu_stream *s = (cpu_stream *)st;
    ts_cpu_ws_release(&s->ws);
    free(s);
}

static size_t cpu_workspace_bytes(ts_backend *be, int rows, int64_t cols, int group) {
    cpu_be *b = (cpu_be *)be;
    ts_cpu_ws ws;
    memset(&ws, 0, sizeof ws);
    int old = ts_kmode_swap(b->kmode);
    size_t r = ts_cpu_ws_reserve(&ws, ts_pool_threads_planned(b->pool), rows, cols, group, 0);
    ts_kmode_swap(old);
    return r;
}

/* Denormals flushed and the engine's kernel mode on this thread; the old
 * MXCSR in the low 16 bits, the old mode + 1 above. */
static unsigned cpu_enter(ts_stream *s) {
    unsigned csr = ts_fp_begin();
    int old = ts_kmode_swap(((cpu_be *)s->be)->kmode);
    return (csr & 0xffffu) | (unsigned)(old + 1) << 16;
}
static void cpu_leave(ts_stream *s, unsigned old) {
    (void)s;
    ts_kmode_swap((int)(old >> 16) - 1);
    ts_fp_end(old & 0xffffu);
}

/* ---- weights ---- */

static size_t cpu_weight_bytes(ts_backend *be, const ts_weight *w) {
    int old = ts_kmode_swap(((cpu_be *)be)->kmode);
    size_t r = w->dtype == TS_DTYPE_U32 ? ts_weight_pack_size(w->rows, w->cols, w->bits, w->group, w->sdtype) : 0;
    ts_kmode_swap(old);
    return r;
}
static void cpu_weight_prepare(ts_backend *be, ts_weight *w, void *dst) {
    cpu_be *b = (cpu_be *)be;
    int old = ts_kmode_swap(b->kmode);
    ts_weight_pack_on(b->pool, w, dst);
    ts_kmode_swap(old);
}
static int cpu_weight_prepare_1(ts_backend *be, ts_weight *w, void *dst) {
    int old = ts_kmode_swap(((cpu_be *)be)->kmode);
    ts_weight_pack_on(NULL, w, dst);
    ts_kmode_swap(old);
    return 0;
}

/* ---- small ops ---- */

static void cpu_linear(ts_stream *s, ts_mode m, const ts_weight *const *w, int nw, const float *x, float *const *y, int n) {
    if (s->err) return;
    int rc = ts_cpu_linear_many(ts_cpu_stream_ctx(s), w, nw, x, y, n, ts_cpu_lin_flags(m));
    if (rc) ts_be_fail(s, rc, "out of memory for the kernel workspace");
}

#define PAR_ITEMS 8 /* items per row-wise region: a few per thread evens out late workers */

typedef struct embed_job {
    const ts_weight *w;
    const int32_t *ids;
    float *x;
    size_t ldx;
    int n;
} embed_job;

static void embed_item(void *ctx, int it, int nit) {
    const embed_job *j = ctx;
    for (int i = (int)((int64_t)j->n * it / nit); i < (int)((int64_t)j->n * (it + 1) / nit); i++)
        ts_weight_row(j->w, j->ids[i], j->x + (size_t)i * j->ldx);
}

/* prompt chunks gather their rows on the pool; the same ts_weight_row per row */
static void cpu_embed(ts_stream *s, ts_mode m, const ts_weight *w, const int32_t *ids, float *x, size_t ldx, int n) {
    embed_job j = {w, ids, x, ldx, n};
    if (m == TS_MODE_PREFILL && n > 1) ts_cpu_parallel_for(ts_cpu_stream_ctx(s), TS_MIN(n, PAR_ITEMS), embed_item, &j);
    else embed_item(&j, 0, 1);
}

/* The token path's RMSNorm: double accumulation, which keeps it within f32
 * rounding of transformers' f32 reductions (w holds 1 + w for the (1+w)
 * norms). */
void ts_rmsnorm1p(const float *x, const float *w1p, float *y, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *yi = y + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        float r = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int j = 0; j < dim; j++) yi[j] = xi[j] * r * w1p[j];
    }
}

typedef struct rows_job {
    float *x;
    const float *add, *w;
    float *y;
    int n, dim;
    float eps;
    size_t N;
    const float *m;
} rows_job;

/* rows of item: x += add, then (w != NULL) y = rmsnorm(x) * w (vectorised) */
static void rows_item(void *ctx, int it, int nit) {
    const rows_job *j = ctx;
    int r0 = (int)((int64_t)j->n * it / nit), r1 = (int)((int64_t)j->n * (it + 1) / nit);
    size_t o = (size_t)r0 * j->dim;
    if (j->w) {
        ts_add_rmsnorm(j->x + o, j->add ? j->add + o : NULL, j->w, j->y + o, r1 - r0, j->dim, j->eps);
    } else {
        for (size_t i = o; i < (size_t)r1 * j->dim; i++) j->x[i] += j->add[i];
    }
}

static void cpu_norm(ts_stream *s, ts_mode m, float *x, size_t ldx, const float *add, const float *w, float *y,
                     size_t ldy, int n, int dim, float eps) {
    if (m == TS_MODE_PREFILL && n > 1 && ldx == (size_t)dim && (!w || ldy == (size_t)dim)) {
        /* prompt chunks: vectorised and threaded (rounding differs) */
        rows_job j = {x, add, w, y, n, dim, eps, 0, NULL};
        ts_cpu_parallel_for(ts_cpu_stream_ctx(s), TS_MIN(n, PAR_ITEMS), rows_item, &j);
        return;
    }
    if (add) {
        if (ldx == (size_t)dim) {
            for (size_t i = 0; i < (size_t)n * dim; i++) x[i] += add[i];
        } else {
            for (int i = 0; i < n; i++)
                for (int c = 0; c < dim; c++) x[(size_t)i * ldx + c] += add[(size_t)i * dim + c];
        }
    }
    if (!w) return;
    if (ldx == (size_t)dim && ldy == (size_t)dim) ts_rmsnorm1p(x, w, y, n, dim, eps);
    else
        for (int i = 0; i < n; i++) ts_rmsnorm1p(x + (size_t)i * ldx, w, y + (size_t)i * ldy, 1, dim, eps);
}

/* y = silu(y) * m over N elements, in 16-aligned pieces */
static void silu_item(void *ctx, int it, int nit) {
    const rows_job *j = ctx;
    size_t per = (j->N + (size_t)nit - 1) / (size_t)nit;
    per = (per + 15) & ~(size_t)15;
    size_t a = per * (size_t)it, b = TS_MIN(j->N, a + per);
    if (a < b) ts_silu_mul(j->y + a, j->m + a, b - a);
}

static void cpu_swiglu(ts_stream *s, ts_mode m, float *g, const float *u, size_t N) {
    if (m == TS_MODE_PREFILL && N > 0) {
        rows_job j = {NULL, NULL, NULL, g, 0, 0, 0.f, N, u};
        ts_cpu_parallel_for(ts_cpu_stream_ctx(s), PAR_ITEMS, silu_item, &j);
    } else {
        ts_silu_mul(g, u, N);
    }
}

static void cpu_argmax(ts_stream *s, ts_view lg, int K, int32_t *ids, float *prob) {
    (void)s;
    for (int64_t r = 0; r < lg.rows; r++) {
        const float *x = (const float *)lg.p + r * lg.ld;
        int d = ts_argmax(x, K);
        ids[r] = d;
        if (prob) prob[r] = 1.0f / ts_sum_exp(x, K, x[d]);
    }
}

/* Run-ahead (backend.h): the CPU computes at the call, so the ticket is
 * ready when argmax_ahead returns; the CPU gains nothing from running ahead
 * (a session enables it only when asked: engine/plan.c), but it is the
 * reference the device's run-ahead is tested against. */
static const int32_t *cpu_argmax_ahead(ts_stream *s, ts_view lg, int K, int t) {
    cpu_stream *q = (cpu_stream *)s;
    t &= TS_AHEAD_TICKETS - 1;
    cpu_argmax(s, tv_rows(lg, 0, 1), K, &q->ahead_id[t], NULL);
    q->ahead_ticket[t] = q->ahead_id[t];
    return &q->ahead_id[t];
}
static int cpu_ahead_read(ts_stream *s, int t, int32_t *id) {
    *id = ((cpu_stream *)s)->ahead_ticket[t & (TS_AHEAD_TICKETS - 1)];
    return s->err;
}

/* topn, the reference (src/backend.h): one walk over the row with the
 * ascending penalty list beside it keeps the N best in a sorted array
 * (insertion: N <= 256, and after the first few hundred entries almost
 * every one fails the comparison with the last kept); a second walk sums
 * the weights in index order, as the full-row sampler sums its z. The CPU
 * sampler reads rows in place, so sampling does not call this (it is the
 * oracle the device ops are tested against); log-probabilities do
 * (gen/generate.c, ts_gen_logprobs: one code path on every backend). */
static inline float topn_v(const float *x, int64_t i, const ts_topn_args *a, int *j) {
    float v = x[i];
    if (*j < a->n_pen && a->pen_ids[*j] == i) {
        if (a->rep != 1.0f) v = v > 0.0f ? v / a->rep : v * a->rep;
        v = v - a->pen_sub[*j];
        ++*j;
    }
    return v * a->scale;
}

static inline int topn_before(float va, int32_t ia, float vb, int32_t ib) {
    return va > vb || (va == vb && ia < ib);
}

void ts_topn_host(const float *rows_p, int64_t rows, int64_t ld, int K, const ts_topn_args *a) {
    const int N = a->N;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = rows_p + r * ld;
        float *vo = a->vals + r * N;
        int32_t *io = a->ids + r * N;
        int cnt = 0, nv = 0, j = 0;
        for (int64_t i = 0; i < K; i++) {
            float v = topn_v(x, i, a, &j);
            if (!(v > -INFINITY)) continue;
            if (v == 0.0f) v = 0.0f; /* -0 as +0: one key per value on every backend */
            nv++;
            if (cnt == N && !topn_before(v, (int32_t)i, vo[N - 1], io[N - 1])) continue;
            int k = cnt < N ? cnt++ : N - 1;
            while (k > 0 && topn_before(v, (int32_t)i, vo[k - 1], io[k - 1])) vo[k] = vo[k - 1], io[k] = io[k - 1], k--;
            vo[k] = v, io[k] = (int32_t)i;
        }
        for (int k = cnt; k < N; k++) vo[k] = -INFINITY, io[k] = -1;
        a->n_valid[r] = nv;
        double z = 0;
        if (cnt && !isinf(vo[0])) {
            const float m = vo[0];
            j = 0;
            for (int64_t i = 0; i < K; i++) {
                float v = topn_v(x, i, a, &j);
                if (v > -INFINITY) z += expf(v - m);
            }
        }
        a->sum_exp[r] = z;
    }
}

static void cpu_topn(ts_stream *s, ts_view lg, int K, const ts_topn_args *a) {
    (void)s;
    ts_topn_host((const float *)lg.p, lg.rows, lg.ld, K, a);
}

static const ts_backend_ops cpu_ops = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .write = cpu_write,
    .read = cpu_read,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .host_rows = cpu_host_rows,
    .sync = cpu_sync,
    .stream_new = cpu_stream_new,
    .stream_free = cpu_stream_free,
    .workspace_bytes = cpu_workspace_bytes,
    .enter = cpu_enter,
    .leave = cpu_leave,
    .weight_bytes = cpu_weight_bytes,
    .weight_prepare = cpu_weight_prepare,
    .weight_prepare_1 = cpu_weight_prepare_1,
    .linear = cpu_linear,
    .embed = cpu_embed,
    .norm = cpu_norm,
    .swiglu = cpu_swiglu,
    .attn = ts_cpu_attn,
    .gdn = ts_cpu_gdn,
    .gdn_materialize = ts_cpu_gdn_materialize,
    .moe = ts_cpu_moe,
    .moe_route = ts_cpu_moe_route,
    .argmax = cpu_argmax,
    .topn = cpu_topn,
    .argmax_ahead = cpu_argmax_ahead,
    .ahead_read = cpu_ahead_read,
};

static void cpu_destroy(ts_backend *be) {
    cpu_be *b = (cpu_be *)be;
    ts_pool_free(b->pool);
    free(b);
}

int ts_cpu_backend_new(const ts_backend_params *p, ts_backend **out, ts_error *err) {
    *out = NULL;
    int mode = ts_kmode();
    if (p && p->kernels && *p->kernels) {
        mode = ts_kmode_parse(p->kernels);
        if (mode < 0) return ts_fail(err, TS_E_ARG, "kernel mode '%s' is unknown or not supported by this CPU", p->kernels);
    }
    cpu_be *b = calloc(1, sizeof *b); /* a control block: outside the plan (threads.c) */
    if (!b) return ts_fail(err, TS_E_NOMEM, "out of memory");
    b->base.ops = &cpu_ops;
    b->base.name = "cpu";
    b->base.dom = TS_DOM_HOST;
    b->base.impl = b;
    b->base.destroy = cpu_destroy;
    b->kmode = mode;
    if (!(b->pool = ts_pool_new(p ? p->n_threads : 0))) {
        free(b);
        return ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    *out = &b->base;
    return 0;
}




