/* test_poison.c: the poisoned-address backend, and the whole engine on it.
 *
 * Owns: a test backend (backend.h) that wraps an engine's CPU backend and
 * hands out tagged addresses: bit 62 set, which makes them non-canonical on
 * x86-64, so any dereference outside the backend faults (SIGSEGV). Only its
 * own ops untag them before passing to the CPU ops; pointers that are not
 * tagged (weights, the caller's host buffers) pass through untouched. The
 * host reads backend memory only through host_rows, which copies into a
 * ring of host staging buffers, as a device backend would.
 *
 * The test: prefill (chunks), decode, verify, rollback (the test drafts
 * hook forces rejections at every depth), MTP drafting, sampling with
 * drafts, checkpoint save/restore, all on the poisoned backend, with
 * outputs equal to a plain CPU engine's bit for bit. A dereference of
 * activation, state or logit memory left in model, generation or session
 * code would crash this test (mutation-checked: a memset of a state buffer
 * in ts_session_reset, or a read of sc.logits in generate.c, faults).
 */
#include <stdlib.h>

#include "engine/engine.h"
#include "dflash_fx.h"
#include "gen_oracle.h" /* collect, on_tok */
#include "ts_test.h"
#include "wrap_be.h"

#define TAG (1ull << 62)

static inline void *U(const void *p) {
    uintptr_t v = (uintptr_t)p;
    return (void *)(v & TAG ? v & ~TAG : v);
}
static inline void *T(void *p) { return p ? (void *)((uintptr_t)p | TAG) : NULL; }
#define UF(p) ((float *)U(p))

typedef struct pz_stream {
    wrap_stream w; /* first: wrap_be.h's */
    float *stage[4];
    size_t cap[4];
    int next;
} pz_stream;


static ts_view UV(ts_view v) {
    v.p = U(v.p);
    return v;
}

static void *pz_alloc(ts_backend *be, size_t bytes, ts_mem_cat cat) {
    return T(wrap_inner(be)->ops->alloc(wrap_inner(be), bytes, cat));
}
static void pz_free(ts_backend *be, void *p) { wrap_inner(be)->ops->free(wrap_inner(be), U(p)); }
static void pz_write(ts_stream *s, ts_view d, const void *h) {
    WRAP_INOPS(s)->write(wrap_enter_op(s), UV(d), h);
    wrap_leave_op(s);
}
static void pz_read(ts_stream *s, void *h, ts_view v) {
    WRAP_INOPS(s)->read(wrap_enter_op(s), U(h), UV(v));
    wrap_leave_op(s);
}
static void pz_copy(ts_stream *s, ts_view d, ts_view v) {
    WRAP_INOPS(s)->copy(wrap_enter_op(s), UV(d), UV(v));
    wrap_leave_op(s);
}
static void pz_fill(ts_stream *s, ts_view d, float x) {
    WRAP_INOPS(s)->fill(wrap_enter_op(s), UV(d), x);
    wrap_leave_op(s);
}

/* a copy in host staging (a ring of 4: the spec loop holds two at once) */
static const float *pz_host_rows(ts_stream *s, ts_view v) {
    pz_stream *p = (pz_stream *)s;
    if (!((uintptr_t)v.p & TAG)) return v.p; /* host memory already */
    const int k = p->next;
    p->next = (k + 1) % 4;
    size_t need = (size_t)v.rows * (size_t)v.cols;
    if (need > p->cap[k]) {
        free(p->stage[k]);
        p->stage[k] = malloc(sizeof(float) * need);
        p->cap[k] = p->stage[k] ? need : 0;
        if (!p->stage[k]) return NULL;
    }
    WRAP_INOPS(s)->read(wrap_enter_op(s), p->stage[k], UV(v));
    wrap_leave_op(s);
    return p->stage[k];
}
static int pz_sync(ts_stream *s) {
    wrap_leave_op(s);
    int rc = s->err;
    s->err = 0;
    return rc;
}
static int pz_stream_new(ts_backend *be, int rows, int64_t cols, int group, ts_stream **out) {
    return wrap_stream_new(be, sizeof(pz_stream), rows, cols, group, out);
}
static void pz_stream_free(ts_stream *s) {
    if (!s) return;
    pz_stream *p = (pz_stream *)s;
    wrap_stream_free_inner(s);
    for (int i = 0; i < 4; i++) free(p->stage[i]);
    free(p);
}

static void pz_linear(ts_stream *s, ts_mode m, const ts_weight *const *w, int nw, const float *x, float *const *y, int n) {
    float *yy[TS_LINEAR_MANY_MAX];
    for (int i = 0; i < nw; i++) yy[i] = UF(y[i]);
    WRAP_INOPS(s)->linear(wrap_enter_op(s), m, w, nw, UF(x), yy, n);
    wrap_leave_op(s);
}
static void pz_embed(ts_stream *s, ts_mode m, const ts_weight *w, const int32_t *ids, float *x, size_t ldx, int n) {
    WRAP_INOPS(s)->embed(wrap_enter_op(s), m, w, U(ids), UF(x), ldx, n);
    wrap_leave_op(s);
}
static void pz_norm(ts_stream *s, ts_mode m, float *x, size_t ldx, const float *add, const float *w, float *y,
                    size_t ldy, int n, int dim, float eps) {
    WRAP_INOPS(s)->norm(wrap_enter_op(s), m, UF(x), ldx, UF(add), UF(w), UF(y), ldy, n, dim, eps);
    wrap_leave_op(s);
}
static void pz_swiglu(ts_stream *s, ts_mode m, float *g, const float *u, size_t N) {
    WRAP_INOPS(s)->swiglu(wrap_enter_op(s), m, UF(g), UF(u), N);
    wrap_leave_op(s);
}
static void pz_attn(ts_stream *s, ts_mode m, const ts_attn_args *a) {
    ts_attn_args b = *a;
    b.qg = UF(b.qg), b.k = UF(b.k), b.v = UF(b.v), b.q_norm = UF(b.q_norm), b.k_norm = UF(b.k_norm);
    b.kc = UF(b.kc), b.vc = UF(b.vc), b.att = UF(b.att), b.out = UF(b.out);
    WRAP_INOPS(s)->attn(wrap_enter_op(s), m, &b);
    wrap_leave_op(s);
}
static ts_gdn_args untag_gdn(const ts_gdn_args *a) {
    ts_gdn_args b = *a;
    b.conv_w = UF(b.conv_w), b.neg_A = UF(b.neg_A), b.dt_bias = UF(b.dt_bias), b.norm = UF(b.norm);
    for (int i = 0; i < 2; i++) b.S[i] = UF(b.S[i]), b.conv[i] = UF(b.conv[i]);
    b.tape_qkv = UF(b.tape_qkv), b.tape_a = UF(b.tape_a), b.tape_b = UF(b.tape_b), b.tape_prep = UF(b.tape_prep);
    b.rows = UF(b.rows), b.pf_conv = UF(b.pf_conv), b.pf_gate = UF(b.pf_gate), b.pf_chunk = UF(b.pf_chunk);
    b.qkv = UF(b.qkv), b.a = UF(b.a), b.b = UF(b.b), b.z = UF(b.z), b.out = UF(b.out);
    return b;
}
static void pz_gdn(ts_stream *s, ts_mode m, const ts_gdn_args *a) {
    ts_gdn_args b = untag_gdn(a);
    WRAP_INOPS(s)->gdn(wrap_enter_op(s), m, &b);
    wrap_leave_op(s);
}
static void pz_gdn_mat(ts_stream *s, const ts_gdn_args *a) {
    ts_gdn_args b = untag_gdn(a);
    WRAP_INOPS(s)->gdn_materialize(wrap_enter_op(s), &b);
    wrap_leave_op(s);
}
static void pz_moe(ts_stream *s, ts_mode m, const ts_moe_args *a) {
    ts_moe_args b = *a;
    b.u = UF(b.u), b.t = UF(b.t), b.logits = UF(b.logits), b.acc = UF(b.acc);
    b.b0 = UF(b.b0), b.b1 = UF(b.b1), b.b2 = UF(b.b2);
    WRAP_INOPS(s)->moe(wrap_enter_op(s), m, &b);
    wrap_leave_op(s);
}
static void pz_argmax(ts_stream *s, ts_view lg, int K, int32_t *ids, float *prob) {
    WRAP_INOPS(s)->argmax(wrap_enter_op(s), UV(lg), K, U(ids), U(prob));
    wrap_leave_op(s);
}
static void pz_topn(ts_stream *s, ts_view lg, int K, const ts_topn_args *a) {
    WRAP_INOPS(s)->topn(wrap_enter_op(s), UV(lg), K, a); /* a's arrays are host memory */
    wrap_leave_op(s);
}
/* Wrap the engine's backend: sessions created afterwards run poisoned. */
static int poison_engine(ts_engine *e) {
    wrap_be *p = calloc(1, sizeof *p);
    if (!p) return -1;
    p->ops = (ts_backend_ops){
        .alloc = pz_alloc, .free = pz_free, .write = pz_write, .read = pz_read, .copy = pz_copy, .fill = pz_fill,
        .host_rows = pz_host_rows, .sync = pz_sync, .stream_new = pz_stream_new, .stream_free = pz_stream_free,
        .linear = pz_linear, .embed = pz_embed, .norm = pz_norm, .swiglu = pz_swiglu, .attn = pz_attn,
        .gdn = pz_gdn, .gdn_materialize = pz_gdn_mat, .moe = pz_moe, .argmax = pz_argmax, .topn = pz_topn,
    };
    wrap_install(e, p, "poison");
    return 0;
}

/* ---- the engine on it ---- */


/* A whole timeline on engine e: a prompt in chunks, decode steps, a
 * checkpoint, greedy generation with drafts (rejections forced), restore,
 * sampled generation with drafts, MTP head logits; everything the host
 * reads goes into out. */
static int timeline(ts_engine *e, float *out, int *n_out, collect *c) {
    ts_error err = {0};
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.max_rows = 7;
    sp.spec_draft = 4;
    sp.checkpoint = 1;
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return -1; }
    const int V = ts_engine_info(e)->vocab_size, H = ts_engine_info(e)->hidden_size;
    int32_t prompt[30];
    for (int i = 0; i < 30; i++) prompt[i] = (i * 37 + 5) % V;
    int k = 0;
    static float hid[30 * 1024];
    if (H > 1024) return -1;
    int rc = ts_session_feed(s, prompt, 20, NULL, hid, &err); /* prefill: chunks of 7 */
    for (int i = 20; i < 24 && !rc; i++) rc = ts_session_feed(s, prompt + i, 1, NULL, NULL, &err); /* decode */
    if (!rc) {
        memcpy(out + k, ts_session_logits(s), sizeof(float) * V), k += V;
        memcpy(out + k, ts_session_hidden(s), sizeof(float) * H), k += H;
        memcpy(out + k, hid, sizeof(float) * 20 * H), k += 20 * H;
        rc = ts_session_save(s, &err);
    }
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 40;
    gp.spec_draft = 4;
    ts_session_override_drafts(s, bad_drafts, NULL);
    c->n = 0;
    if (!rc) rc = ts_generate(s, prompt + 24, 3, &gp, on_tok, c, NULL, &err); /* verify, rollback, MTP drafting */
    if (!rc) rc = ts_session_restore(s, &err);
    gp.temperature = 0.9f;
    gp.seed = 3;
    ts_session_override_drafts(s, NULL, NULL);
    if (!rc) rc = ts_generate(s, prompt + 24, 3, &gp, on_tok, c, NULL, &err); /* sampled, drafted */
    float mlg[2 * 4096];
    if (!rc && V <= 4096) { /* the MTP head through the API */
        rc = ts_session_mtp(s, prompt + 1, hid, 2, 0, NULL, mlg, &err);
        if (!rc) memcpy(out + k, mlg, sizeof(float) * 2 * V), k += 2 * V;
    }
    if (rc) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ts_session_free(s);
    *n_out = k;
    return rc;
}

TS_TEST(backend, poisoned_addresses_run_the_engine) {
    static const char *fx[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe", "tests/fixtures/alt-moe"};
    for (int f = 0; f < 3; f++) {
        ts_engine *a = NULL, *b = NULL;
        ts_error err = {0};
        CHECK_MSG(ts_engine_open(fx[f], NULL, &a, &err) == 0 && ts_engine_open(fx[f], NULL, &b, &err) == 0, "%s", err.msg);
        if (!a || !b) return;
        CHECK(poison_engine(b) == 0);
        static float oa[64 * 4096], ob[64 * 4096];
        static collect ca, cb;
        int na = 0, nb = 0;
        int ra = timeline(a, oa, &na, &ca), rb = timeline(b, ob, &nb, &cb);
        CHECK(ra == 0 && rb == 0);
        CHECK_MSG(na == nb && na > 0 && !memcmp(oa, ob, sizeof(float) * (size_t)na), "%s: poisoned outputs differ", fx[f]);
        CHECK_MSG(ca.n == cb.n && ca.n > 40 && !memcmp(ca.ids, cb.ids, sizeof(int32_t) * (size_t)ca.n), "%s: ids differ (%d, %d)",
                  fx[f], ca.n, cb.n);
        fprintf(stderr, "  %-28s %d floats, %d ids identical on the poisoned backend\n", fx[f], na, ca.n);
        ts_engine_close(a);
        ts_engine_close(b);
    }
}


/* The DFlash drafter on the poisoned backend: its context and block passes
 * (block-mask attention, taps, its own KV cache) dereference nothing either;
 * greedy with forced rejections and sampled generation give the same ids
 * (gen_oracle.h's dflash_timeline). */
TS_TEST(backend, poisoned_addresses_run_dflash) {
    const char *dd = ts_test_dflash_drafter("tiny-dense", "df-poison");
    CHECK(dd);
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.dflash = 1;
    ep.drafter_dir = dd;
    ts_engine *a = NULL, *b = NULL;
    ts_error err = {0};
    CHECK_MSG(ts_engine_open("tests/fixtures/tiny-dense", &ep, &a, &err) == 0 &&
              ts_engine_open("tests/fixtures/tiny-dense", &ep, &b, &err) == 0, "%s", err.msg);
    if (!a || !b) return;
    CHECK(poison_engine(b) == 0);
    static collect ca, cb;
    CHECK(dflash_timeline(a, &ca) == 0 && dflash_timeline(b, &cb) == 0);
    CHECK_MSG(ca.n == cb.n && ca.n == 80 && !memcmp(ca.ids, cb.ids, sizeof(int32_t) * (size_t)ca.n), "ids differ (%d, %d)",
              ca.n, cb.n);
    fprintf(stderr, "  DFlash: %d ids identical on the poisoned backend\n", ca.n);
    ts_engine_close(a);
    ts_engine_close(b);
}
