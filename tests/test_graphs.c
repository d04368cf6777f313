/* test_graphs.c: a test backend that captures and replays graphs as a device
 * backend does, over the CPU backend, and the engine on it.
 *
 * Owns: the graph-recording backend (backend.h's graph_begin / graph_end /
 * graph_launch and the run-ahead ops argmax_ahead / ahead_read). Why: the
 * CPU backend has no graphs, so the model's host-side state around a
 * replayed pass (which runs no host code of its ops) was tested only on a
 * GPU; session 32 found main broken there (a replayed run-ahead pass handed
 * the next step a stale id slot) by a GPU call. Here the same bug fails on
 * every machine.
 *
 * Semantics, as CUDA's (src/cuda/backend.cu): between graph_begin and
 * graph_end the ops are recorded, not run, their arguments kept by value
 * (pointers as pointers: the memory is read when the graph runs, as a
 * kernel reads device memory; a weight's descriptor by value, as CUDA's
 * kernel arguments hold it); graph_launch runs the recorded ops, each
 * with the stream's step record of the launch (the device record a graph's
 * kernels read); an op a capture cannot hold (a host read, a write from host
 * memory, a sync, an embedding of host ids) fails the stream, as CUDA's
 * capture does. The run-ahead ops keep the ids in slots of their own: the
 * argmax into slot t (recorded like any op inside a capture), the ticket
 * read back from it.
 *
 * The tests: run-ahead greedy decoding equals plain decoding on the graph
 * backend (gen_oracle.h's ahead_same: every way a generation ends, the
 * continuation), chained MTP drafts equal one-at-a-time drafts, and a whole
 * timeline (prompt chunks, decode, verify with forced rejections, rollback,
 * checkpoint restore, sampled drafting, plain greedy run ahead) gives the
 * plain CPU engine's outputs bit for bit, with graphs captured and replayed
 * (counted), and so does DFlash drafting (its context and block passes). Mutation-checked: with qwen35.c's replayed pass handing on the
 * last host-run pass's slot (session 32's bug), ahead_same fails.
 */
#include <stdlib.h>

#include "engine/engine.h"
#include "dflash_fx.h"
#include "gen_oracle.h"
#include "ts_test.h"
#include "wrap_be.h"

enum { OP_COPY, OP_FILL, OP_LINEAR, OP_EMBED, OP_NORM, OP_SWIGLU, OP_ATTN, OP_GDN, OP_GDN_MAT, OP_MOE, OP_ARGMAX,
       OP_AHEAD };

/* one recorded op: its arguments by value */
typedef struct {
    int op;
    ts_mode m;
    ts_view d, v;
    float f, eps;
    const ts_weight *w[TS_LINEAR_MANY_MAX];
    ts_weight *wv; /* recorded: the descriptors w point to, by value (a caller's may be a local: a head's rows) */
    float *y[TS_LINEAR_MANY_MAX];
    int nw, n, dim, K, t;
    const float *cx, *add, *nwt;
    float *px, *py;
    size_t ld0, ld1, N;
    const int32_t *ids;
    int32_t *oid;
    float *prob;
    ts_attn_args attn;
    ts_gdn_args gdn;
    ts_moe_args moe;
} gr_call;

typedef struct {
    uint32_t key;
    gr_call *calls;
    int n;
} gr_graph;

typedef struct gr_be {
    wrap_be w;              /* first: wrap_be.h's */
    long captures, replays; /* over all its streams */
} gr_be;

typedef struct gr_stream {
    wrap_stream w; /* first */
    int capturing;
    gr_call *rec; /* the capture's ops */
    int n_rec, cap_rec;
    gr_graph *g;
    int n_g;
    int32_t slot[TS_AHEAD_TICKETS]; /* run-ahead ids: argmax_ahead's slots (host memory is the CPU's device memory) */
} gr_stream;

#define GS(s) ((gr_stream *)(s))
static void gr_fail(ts_stream *s, const char *msg) {
    if (s->err) return;
    s->err = TS_E_ARG;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

/* record c when capturing (1), else 0: the caller runs it */
static int rec(ts_stream *s, const gr_call *c) {
    gr_stream *g = GS(s);
    if (!g->capturing) return 0;
    if (g->n_rec == g->cap_rec) {
        const int cap = g->cap_rec ? 2 * g->cap_rec : 256;
        gr_call *r = realloc(g->rec, sizeof *r * (size_t)cap);
        if (!r) { gr_fail(s, "graph: out of memory"); return 1; }
        g->rec = r, g->cap_rec = cap;
    }
    gr_call *r = &g->rec[g->n_rec];
    *r = *c;
    const int nw = c->op == OP_LINEAR ? c->nw : c->op == OP_EMBED ? 1 : 0;
    if (nw) {
        r->wv = malloc(sizeof *r->wv * (size_t)nw);
        if (!r->wv) { gr_fail(s, "graph: out of memory"); return 1; }
        for (int i = 0; i < nw; i++) r->wv[i] = *c->w[i], r->w[i] = &r->wv[i];
    }
    g->n_rec++;
    return 1;
}

static void free_calls(gr_call *c, int n) {
    for (int i = 0; i < n; i++) free(c[i].wv);
}

static void run(ts_stream *s, const gr_call *c) {
    const ts_backend_ops *o = WRAP_INOPS(s);
    ts_stream *in = wrap_enter_op(s);
    switch (c->op) {
    case OP_COPY: o->copy(in, c->d, c->v); break;
    case OP_FILL: o->fill(in, c->d, c->f); break;
    case OP_LINEAR: o->linear(in, c->m, c->w, c->nw, c->cx, c->y, c->n); break;
    case OP_EMBED: o->embed(in, c->m, c->w[0], c->ids, c->px, c->ld0, c->n); break;
    case OP_NORM: o->norm(in, c->m, c->px, c->ld0, c->add, c->nwt, c->py, c->ld1, c->n, c->dim, c->eps); break;
    case OP_SWIGLU: o->swiglu(in, c->m, c->px, c->cx, c->N); break;
    case OP_ATTN: o->attn(in, c->m, &c->attn); break;
    case OP_GDN: o->gdn(in, c->m, &c->gdn); break;
    case OP_GDN_MAT: o->gdn_materialize(in, &c->gdn); break;
    case OP_MOE: o->moe(in, c->m, &c->moe); break;
    case OP_ARGMAX: o->argmax(in, c->v, c->K, c->oid, c->prob); break;
    case OP_AHEAD: o->argmax(in, c->v, c->K, &GS(s)->slot[c->t], NULL); break;
    }
    wrap_leave_op(s);
}

/* record or run */
static void op(ts_stream *s, const gr_call *c) {
    if (s->err) return;
    if (!rec(s, c)) run(s, c);
}

/* ops a capture cannot hold fail the stream inside one, as CUDA's do */
static int uncapturable(ts_stream *s, const char *what) {
    if (!GS(s)->capturing) return 0;
    char m[96];
    snprintf(m, sizeof m, "%s inside a graph capture", what);
    gr_fail(s, m);
    return 1;
}

static void *gr_alloc(ts_backend *be, size_t bytes, ts_mem_cat cat) {
    return wrap_inner(be)->ops->alloc(wrap_inner(be), bytes, cat);
}
static void gr_free(ts_backend *be, void *p) { wrap_inner(be)->ops->free(wrap_inner(be), p); }
static void gr_write(ts_stream *s, ts_view d, const void *h) {
    if (uncapturable(s, "a write from host memory")) return;
    WRAP_INOPS(s)->write(wrap_enter_op(s), d, h);
    wrap_leave_op(s);
}
static void gr_read(ts_stream *s, void *h, ts_view v) {
    if (uncapturable(s, "a read to host memory")) return;
    WRAP_INOPS(s)->read(wrap_enter_op(s), h, v);
    wrap_leave_op(s);
}
static void gr_copy(ts_stream *s, ts_view d, ts_view v) { op(s, &(gr_call){.op = OP_COPY, .d = d, .v = v}); }
static void gr_fill(ts_stream *s, ts_view d, float x) { op(s, &(gr_call){.op = OP_FILL, .d = d, .f = x}); }
static const float *gr_host_rows(ts_stream *s, ts_view v) {
    if (uncapturable(s, "host rows")) return NULL;
    const float *r = WRAP_INOPS(s)->host_rows(wrap_enter_op(s), v);
    wrap_leave_op(s);
    return r;
}
static int gr_sync(ts_stream *s) {
    if (uncapturable(s, "a sync")) return s->err;
    wrap_leave_op(s);
    int rc = s->err;
    s->err = 0;
    return rc;
}
static int gr_stream_new(ts_backend *be, int rows, int64_t cols, int group, ts_stream **out) {
    return wrap_stream_new(be, sizeof(gr_stream), rows, cols, group, out);
}
static void gr_stream_free(ts_stream *s) {
    if (!s) return;
    gr_stream *p = GS(s);
    wrap_stream_free_inner(s);
    for (int i = 0; i < p->n_g; i++) free_calls(p->g[i].calls, p->g[i].n), free(p->g[i].calls);
    if (p->capturing) free_calls(p->rec, p->n_rec);
    free(p->g), free(p->rec), free(p);
}

static void gr_linear(ts_stream *s, ts_mode m, const ts_weight *const *w, int nw, const float *x, float *const *y, int n) {
    gr_call c = {.op = OP_LINEAR, .m = m, .nw = nw, .cx = x, .n = n};
    for (int i = 0; i < nw && i < TS_LINEAR_MANY_MAX; i++) c.w[i] = w[i], c.y[i] = y[i];
    op(s, &c);
}
static void gr_embed(ts_stream *s, ts_mode m, const ts_weight *w, const int32_t *ids, float *x, size_t ldx, int n) {
    /* inside a capture only a run-ahead pass's device id (CUDA's rule: host
     * ids go to the device outside any graph) */
    const int32_t *s0 = GS(s)->slot;
    if (GS(s)->capturing && !(ids >= s0 && ids < s0 + TS_AHEAD_TICKETS && n == 1)) {
        gr_fail(s, "embed of host ids inside a graph capture");
        return;
    }
    gr_call c = {.op = OP_EMBED, .m = m, .ids = ids, .px = x, .ld0 = ldx, .n = n};
    c.w[0] = w;
    op(s, &c);
}
static void gr_norm(ts_stream *s, ts_mode m, float *x, size_t ldx, const float *add, const float *w, float *y,
                    size_t ldy, int n, int dim, float eps) {
    op(s, &(gr_call){.op = OP_NORM, .m = m, .px = x, .ld0 = ldx, .add = add, .nwt = w, .py = y, .ld1 = ldy, .n = n,
                     .dim = dim, .eps = eps});
}
static void gr_swiglu(ts_stream *s, ts_mode m, float *g, const float *u, size_t N) {
    op(s, &(gr_call){.op = OP_SWIGLU, .m = m, .px = g, .cx = u, .N = N});
}
static void gr_attn(ts_stream *s, ts_mode m, const ts_attn_args *a) { op(s, &(gr_call){.op = OP_ATTN, .m = m, .attn = *a}); }
static void gr_gdn(ts_stream *s, ts_mode m, const ts_gdn_args *a) { op(s, &(gr_call){.op = OP_GDN, .m = m, .gdn = *a}); }
static void gr_gdn_mat(ts_stream *s, const ts_gdn_args *a) { op(s, &(gr_call){.op = OP_GDN_MAT, .gdn = *a}); }
static void gr_moe(ts_stream *s, ts_mode m, const ts_moe_args *a) { op(s, &(gr_call){.op = OP_MOE, .m = m, .moe = *a}); }
static void gr_argmax(ts_stream *s, ts_view lg, int K, int32_t *ids, float *prob) {
    op(s, &(gr_call){.op = OP_ARGMAX, .v = lg, .K = K, .oid = ids, .prob = prob});
}
static void gr_topn(ts_stream *s, ts_view lg, int K, const ts_topn_args *a) {
    if (uncapturable(s, "topn (host outputs)")) return;
    WRAP_INOPS(s)->topn(wrap_enter_op(s), lg, K, a);
    wrap_leave_op(s);
}
static const int32_t *gr_argmax_ahead(ts_stream *s, ts_view lg, int K, int t) {
    t &= TS_AHEAD_TICKETS - 1;
    op(s, &(gr_call){.op = OP_AHEAD, .v = lg, .K = K, .t = t});
    return &GS(s)->slot[t];
}
static int gr_ahead_read(ts_stream *s, int t, int32_t *id) {
    *id = 0;
    if (uncapturable(s, "a ticket read")) return s->err;
    if (s->err) return s->err;
    *id = GS(s)->slot[t & (TS_AHEAD_TICKETS - 1)];
    return 0;
}

static gr_graph *gfind(gr_stream *g, uint32_t key) {
    for (int i = 0; i < g->n_g; i++)
        if (g->g[i].key == key) return &g->g[i];
    return NULL;
}
static int gr_graph_begin(ts_stream *s, uint32_t key) {
    gr_stream *g = GS(s);
    if (s->err || g->capturing || gfind(g, key)) return 1;
    g->capturing = 1;
    g->n_rec = 0;
    return 0;
}
static int gr_graph_end(ts_stream *s, uint32_t key) {
    gr_stream *g = GS(s);
    if (!g->capturing) return 1;
    g->capturing = 0;
    if (s->err) {
        free_calls(g->rec, g->n_rec);
        return s->err;
    }
    gr_graph *n = realloc(g->g, sizeof *n * (size_t)(g->n_g + 1));
    gr_call *calls = malloc(sizeof *calls * (size_t)(g->n_rec ? g->n_rec : 1));
    if (!n || !calls) {
        if (n) g->g = n;
        free(calls);
        free_calls(g->rec, g->n_rec);
        gr_fail(s, "graph: out of memory");
        return s->err;
    }
    g->g = n;
    memcpy(calls, g->rec, sizeof *calls * (size_t)g->n_rec);
    g->g[g->n_g++] = (gr_graph){key, calls, g->n_rec};
    ((gr_be *)s->be)->captures++;
    return 0;
}
static int gr_graph_launch(ts_stream *s, uint32_t key) {
    gr_stream *g = GS(s);
    if (s->err) return s->err;
    const gr_graph *gg = gfind(g, key);
    if (!gg) return 1;
    for (int i = 0; i < gg->n && !s->err; i++) run(s, &gg->calls[i]);
    ((gr_be *)s->be)->replays++;
    return s->err;
}

/* Wrap the engine's backend: sessions created afterwards capture and replay
 * graphs, and run ahead by default (a device domain, as CUDA's). */
static gr_be *graph_engine(ts_engine *e) {
    gr_be *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->w.ops = (ts_backend_ops){
        .alloc = gr_alloc, .free = gr_free, .write = gr_write, .read = gr_read, .copy = gr_copy, .fill = gr_fill,
        .host_rows = gr_host_rows, .sync = gr_sync, .stream_new = gr_stream_new, .stream_free = gr_stream_free,
        .linear = gr_linear, .embed = gr_embed, .norm = gr_norm, .swiglu = gr_swiglu, .attn = gr_attn, .gdn = gr_gdn,
        .gdn_materialize = gr_gdn_mat, .moe = gr_moe, .argmax = gr_argmax, .topn = gr_topn,
        .graph_begin = gr_graph_begin, .graph_end = gr_graph_end, .graph_launch = gr_graph_launch,
        .argmax_ahead = gr_argmax_ahead, .ahead_read = gr_ahead_read,
    };
    wrap_install(e, &p->w, "graphs");
    return p;
}

/* ---- the engine on it ---- */

/* dir's engine on the graph backend (*e), and with a, a plain CPU engine
 * of dir beside it (*a); NULL (the test failed, naming why) when one does
 * not open */
static gr_be *open_graphs(const char *dir, const ts_engine_params *ep, ts_engine **e, ts_engine **a) {
    ts_error err = {0};
    *e = NULL;
    if (a) *a = NULL;
    if ((a && ts_engine_open(dir, ep, a, &err)) || ts_engine_open(dir, ep, e, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s: %s", dir, err.msg);
        return NULL;
    }
    gr_be *g = graph_engine(*e);
    if (!g) ts_test_fail(__FILE__, __LINE__, "%s: the graph backend: out of memory", dir);
    return g;
}

TS_TEST(graphs, run_ahead_same_as_plain) {
    static const char *dirs[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe", "models/default"};
    for (int d = 0; d < 3; d++) {
        ts_engine *e;
        gr_be *g = open_graphs(dirs[d], NULL, &e, NULL);
        CHECK(g != NULL);
        const int32_t p[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
        const int V = ts_engine_info(e)->vocab_size;
        int32_t pp[9];
        for (int i = 0; i < 9; i++) pp[i] = p[i] % V;
        CHECK_MSG(ahead_same(e, pp, 9, NULL) == 0, "%s", dirs[d]);
        fprintf(stderr, "  %-28s run ahead = plain on the graph backend: %ld graphs captured, %ld replays\n", dirs[d],
                g->captures, g->replays);
        CHECK(g->captures >= 2 && g->replays > 100);
        ts_engine_close(e);
    }
}

TS_TEST(graphs, mtp_chain_same_drafts) {
    ts_engine *e;
    gr_be *g = open_graphs("models/default", NULL, &e, NULL);
    CHECK(g != NULL);
    CHECK(mtp_chain_same(e) == 0);
    CHECK(g->replays > 0);
    ts_engine_close(e);
}

/* a prompt in chunks, decode steps, a checkpoint, greedy drafting with
 * forced rejections, restore, sampled drafting, plain greedy (run ahead
 * where the backend runs ahead); the ids and the final logits */
static int timeline(ts_engine *e, collect *c, float *lg) {
    ts_error err = {0};
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.max_rows = 7;
    sp.spec_draft = 4;
    sp.checkpoint = 1;
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return -1; }
    const int V = ts_engine_info(e)->vocab_size;
    int32_t prompt[30];
    for (int i = 0; i < 30; i++) prompt[i] = (i * 37 + 5) % V;
    int rc = ts_session_feed(s, prompt, 20, NULL, NULL, &err);
    for (int i = 20; i < 24 && !rc; i++) rc = ts_session_feed(s, prompt + i, 1, NULL, NULL, &err);
    if (!rc) rc = ts_session_save(s, &err);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 40;
    gp.spec_draft = 4;
    ts_session_override_drafts(s, bad_drafts, NULL);
    c->n = 0;
    if (!rc) rc = ts_generate(s, prompt + 24, 3, &gp, on_tok, c, NULL, &err);
    if (!rc) rc = ts_session_restore(s, &err);
    gp.temperature = 0.9f;
    gp.seed = 3;
    ts_session_override_drafts(s, NULL, NULL);
    if (!rc) rc = ts_generate(s, prompt + 24, 3, &gp, on_tok, c, NULL, &err);
    gp.temperature = 0.0f;
    gp.spec_draft = 0;
    if (!rc) rc = ts_generate(s, prompt + 27, 3, &gp, on_tok, c, NULL, &err);
    if (!rc) memcpy(lg, ts_session_logits(s), sizeof(float) * (size_t)V);
    if (rc) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ts_session_free(s);
    return rc;
}

TS_TEST(graphs, timeline_same_as_cpu) {
    static const char *fx[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe", "models/default"};
    for (int f = 0; f < 3; f++) {
        ts_engine *a, *b;
        gr_be *g = open_graphs(fx[f], NULL, &b, &a);
        CHECK(g != NULL);
        static collect ca, cb;
        static float la[1 << 16], lb[1 << 16];
        CHECK(ts_engine_info(a)->vocab_size <= (1 << 16));
        CHECK(timeline(a, &ca, la) == 0 && timeline(b, &cb, lb) == 0);
        const int V = ts_engine_info(a)->vocab_size;
        CHECK_MSG(ca.n == cb.n && ca.n > 80 && !memcmp(ca.ids, cb.ids, sizeof(int32_t) * (size_t)ca.n),
                  "%s: ids differ on the graph backend (%d, %d)", fx[f], ca.n, cb.n);
        CHECK_MSG(!memcmp(la, lb, sizeof(float) * (size_t)V), "%s: the last logits differ", fx[f]);
        fprintf(stderr, "  %-28s %d ids identical with graphs (%ld captured, %ld replays)\n", fx[f], ca.n, g->captures,
                g->replays);
        CHECK(g->captures > 2 && g->replays > 40);
        ts_engine_close(a);
        ts_engine_close(b);
    }
}

/* DFlash drafting on the graph backend: its context and block passes are
 * captured too (model/dflash.c); greedy with forced rejections and sampled
 * generation give the plain CPU engine's ids (gen_oracle.h's
 * dflash_timeline). */
TS_TEST(graphs, dflash_same_as_cpu) {
    const char *dd = ts_test_dflash_drafter("tiny-dense", "df-graphs");
    CHECK(dd);
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.dflash = 1;
    ep.drafter_dir = dd;
    ts_engine *a, *b;
    gr_be *g = open_graphs("tests/fixtures/tiny-dense", &ep, &b, &a);
    CHECK(g != NULL);
    static collect ca, cb;
    CHECK(dflash_timeline(a, &ca) == 0 && dflash_timeline(b, &cb) == 0);
    CHECK_MSG(ca.n == cb.n && ca.n == 80 && !memcmp(ca.ids, cb.ids, sizeof(int32_t) * (size_t)ca.n), "ids differ (%d, %d)",
              ca.n, cb.n);
    fprintf(stderr, "  DFlash: %d ids identical with graphs (%ld captured, %ld replays)\n", ca.n, g->captures, g->replays);
    CHECK(g->replays > 10);
    ts_engine_close(a);
    ts_engine_close(b);
}

/* N-gram drafting on the graph backend (verify passes of every length the
 * lookup finds, lazy rollbacks, no model pass drafting): a repetitive prompt
 * so that drafts are found and accepted; the plain CPU engine's ids. */
static int ngram_run(ts_engine *e, collect *c, ts_gen_stats *st) {
    ts_error err = {0};
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.ngram_draft = 4;
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return -1; }
    const int V = ts_engine_info(e)->vocab_size;
    int32_t prompt[48];
    for (int i = 0; i < 48; i++) prompt[i] = (i % 12 * 37 + 5) % V; /* three times the same 12 ids, and more */
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 60;
    gp.spec_draft = 4;
    gp.spec_ngram = 3;
    c->n = 0;
    int rc = ts_generate(s, prompt, 48, &gp, on_tok, c, st, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ts_session_free(s);
    return rc;
}

TS_TEST(graphs, ngram_same_as_cpu) {
    static const char *fx[] = {"tests/fixtures/tiny-dense", "models/default"};
    for (int f = 0; f < 2; f++) {
        ts_engine *a, *b;
        gr_be *g = open_graphs(fx[f], NULL, &b, &a);
        CHECK(g != NULL);
        static collect ca, cb;
        ts_gen_stats sa, sb;
        CHECK(ngram_run(a, &ca, &sa) == 0 && ngram_run(b, &cb, &sb) == 0);
        CHECK_MSG(ca.n == cb.n && ca.n == 60 && !memcmp(ca.ids, cb.ids, sizeof(int32_t) * (size_t)ca.n),
                  "%s: ids differ on the graph backend (%d, %d)", fx[f], ca.n, cb.n);
        fprintf(stderr, "  %-28s n-gram drafting: %d ids identical with graphs (%d verify blocks, %d of %d drafts accepted; "
                "%ld captured, %ld replays)\n", fx[f], ca.n, sb.n_blocks, sb.n_accepted, sb.n_drafted, g->captures, g->replays);
        CHECK(g->replays > 10 && sb.n_accepted == sa.n_accepted);
        if (f == 1) CHECK(sb.n_accepted > 0); /* (the trained model repeats: drafts were verified and kept) */
        ts_engine_close(a);
        ts_engine_close(b);
    }
}
