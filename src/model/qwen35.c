/* qwen35.c: the Qwen3.5 forward pass (model-spec.md §2) as a sequence of
 * backend ops.
 *
 * Owns: the order of the ops of a layer, the main stack and the MTP head,
 * which scratch rows each op reads and writes, the step record of a pass
 * (position, pending rows, parities: backend.h, ts_step) and the keys under
 * which a backend captures passes as graphs (pass_key).
 * Does not own: the arithmetic (the backend's ops: src/cpu/ today), the
 * buffers (session.c allocates them from the plan).
 *
 * Rows are processed in blocks of n <= R: projections are matrix products
 * over all n rows; the GDN recurrence, the conv and attention walk the rows
 * in order, so a block of n rows gives the same result as n one-row calls
 * (bit for bit under TS_MODE_EXACT: every op is row-exact). That property
 * is what speculative verification stands on. With `prefill` the ops may
 * use their prompt-chunk forms (the chunked delta rule for GDN; rounding
 * differs), and a verify pass records the GDN tape (model.h, ts_gdn_tape).
 * After a lazy rollback (spec.c) the GDN op first applies the pending taped
 * rows in the same per-head pass.
 *
 * No dereference of activation, state or logit memory here: addresses are
 * computed, the backend reads and writes them (tests/test_poison.c runs the
 * whole engine on a backend whose addresses fault when dereferenced).
 *
 * Tensor parallelism (m->tp, model/tp.h): the public entry points hand a
 * pass to every rank (each a narrower model with its own state); inside a
 * rank's pass the mixer's and the FFN's outputs are summed over the ranks
 * (tp_sum) and the head's vocabulary rows are gathered into rank 0's logits
 * (head_out_tp); nothing else changes.
 *
 * Precision: weights as stored (bf16/f16/f32, or dequantized), f32
 * everywhere else, f32 recurrent state. Norms accumulate in double on the
 * token path, which keeps them within f32 rounding of transformers' f32
 * reductions.
 */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/tp.h"
#include "model/xstream.h"

static inline const ts_backend_ops *OPS(const ts_state *st) { return st->s->be->ops; }

static void linear(ts_state *st, ts_mode md, const ts_weight *w, const float *x, float *y, int n) {
    OPS(st)->linear(st->s, md, &w, 1, x, &y, n);
}

/* ---- gated attention ---- */

static void attn_block(const ts_model *m, ts_state *st, const ts_attn_w *w, ts_kv *kv, int n, ts_mode md) {
    const ts_config *c = &m->cfg;
    ts_scratch *sc = &st->sc;
    float *qg = sc->big0;  /* [n, nq, 2D]: query | gate per head */
    float *kb = sc->big1;  /* [n, nkv*D] */
    float *vb = sc->big2;  /* [n, nkv*D] */
    OPS(st)->linear(st->s, md, (const ts_weight *[]){&w->q_proj, &w->k_proj, &w->v_proj}, 3, sc->u,
                    (float *[]){qg, kb, vb}, n);
    /* output [n, nq*D] in big2 (the V rows are in the cache by then) */
    const int kv_len = kv == &st->mtp_kv ? st->mtp_ctx : st->n_ctx;
    ts_attn_args a = {qg, kb, vb, w->q_norm, w->k_norm, kv->k, kv->v, sc->att, sc->att_len, sc->att_rows,
                      sc->big2, n, c->nq, c->nkv, m->D, c->rot_dim, 0, c->rope_theta, c->eps, TS_MASK_CAUSAL, 0, 0,
                      kv_len, &w->o_proj};
    OPS(st)->attn(st->s, md, &a);
    linear(st, md, &w->o_proj, sc->big2, sc->t, n);
}

/* ---- Gated DeltaNet ---- */

/* The layer's state, tape and scratch as op arguments (no input rows). */
static ts_gdn_args gdn_args(const ts_model *m, const ts_state *st, const ts_gdn_w *w, int L) {
    const ts_config *c = &m->cfg;
    const ts_scratch *sc = &st->sc;
    const ts_gdn_tape *tp = st->tape ? &st->tape[L] : NULL;
    ts_gdn_args a = {0};
    a.conv_w = w->conv;
    a.neg_A = w->neg_A;
    a.dt_bias = w->dt_bias;
    a.norm = w->norm;
    a.S[0] = st->gdn[L].S;
    a.conv[0] = st->gdn[L].conv;
    if (tp) {
        a.S[1] = tp->snap_S;
        a.conv[1] = tp->snap_conv;
        a.tape_qkv = tp->qkv;
        a.tape_a = tp->a;
        a.tape_b = tp->b;
        a.tape_prep = tp->prep;
    }
    a.Rv = st->tape_rows;
    /* prepared rows: the drafter's buffer (a block's rows), else one row at a time */
    a.rows = st->gdn_rows ? st->gdn_rows : sc->rowtmp;
    a.cap = st->gdn_rows ? st->tape_rows : 1;
    a.pf_conv = sc->pf_conv;
    a.pf_gate = sc->pf_gate;
    a.pf_chunk = sc->pf_chunk;
    a.Hk = c->Hk;
    a.Hv = c->Hv;
    a.dk = c->dk;
    a.dv = c->dv;
    a.K = c->conv_k;
    a.eps = c->eps;
    return a;
}

static void gdn_block(const ts_model *m, ts_state *st, const ts_gdn_w *w, int L, int n, ts_mode md) {
    const int Hv = m->cfg.Hv;
    ts_scratch *sc = &st->sc;
    ts_gdn_args a = gdn_args(m, st, w, L);
    float *qkv = sc->big0; /* [n, C] */
    float *z = sc->big1;   /* [n, Vd] */
    float *o = sc->big2;   /* [n, Vd] */
    float *bb = sc->small, *aa = sc->small + (size_t)sc->R * Hv; /* [n, Hv] each */
    OPS(st)->linear(st->s, md, (const ts_weight *[]){&w->in_qkv, &w->in_z, &w->in_b, &w->in_a}, 4, sc->u,
                    (float *[]){qkv, z, bb, aa}, n);
    a.qkv = qkv;
    a.a = aa;
    a.b = bb;
    a.z = z;
    a.out = o;
    a.out_w = &w->out_proj;
    a.n = n;
    OPS(st)->gdn(st->s, md, &a);
    linear(st, md, &w->out_proj, o, sc->t, n);
}

static void materialize_rank(const ts_model *m, ts_state *st) {
    if (!st->gdn_pend) return;
    ts_step *sp = &st->s->step;
    sp->pend = st->gdn_pend;
    sp->par_S = st->par_S;
    sp->par_conv = st->par_conv;
    sp->half = st->tape_half;
    for (int L = 0; L < m->cfg.n_layers; L++)
        if (!m->layers[L].full) {
            ts_gdn_args a = gdn_args(m, st, &m->layers[L].gdn, L);
            OPS(st)->gdn_materialize(st->s, &a);
        }
    st->gdn_pend = 0;
}

/* ---- FFN ---- */

/* L: the layer (-1: the MTP head's), for the expert cache */
static void ffn_block(const ts_model *m, ts_state *st, const ts_ffn_w *f, int L, int n, ts_mode md) {
    const ts_config *c = &m->cfg;
    ts_scratch *sc = &st->sc;
    if (!f->moe) {
        OPS(st)->linear(st->s, md, (const ts_weight *[]){&f->gate, &f->up}, 2, sc->u, (float *[]){sc->big1, sc->big2}, n);
        OPS(st)->swiglu(st->s, md, sc->big1, sc->big2, (size_t)n * f->gate.rows);
        linear(st, md, &f->down, sc->big1, sc->t, n);
        return;
    }
    ts_moe_args a = {&f->router, f->e_gate, f->e_up, f->e_down, &f->s_gate, &f->s_up, &f->s_down, &f->s_gate_w,
                     sc->u, sc->t, sc->small + (size_t)2 * sc->R * c->Hv, sc->moe_acc, sc->big0, sc->big1, sc->big2,
                     sc->R, sc->F, n, c->E, c->topk, c->norm_topk, c->H, NULL, NULL, NULL, NULL, 0, 0};
    if (m->xs) {
        /* routed experts through the cache: route every row, read the
         * misses at once, then the products (model/xstream.h) */
        a.route_ids = sc->route_ids;
        a.route_w = sc->route_w;
        ts_xstream_moe(m->xs, st->s, md, &a, L < 0 ? c->n_layers : L);
        return;
    }
    OPS(st)->moe(st->s, md, &a);
}

/* Tensor parallelism: a row-parallel product's partial sums [n, H] in t
 * become the whole on every rank (model/tp.h). */
static void tp_sum(const ts_model *m, ts_state *st, int n) {
    if (m->tp) {
        ts_comm *c = ts_tp_comm(m->tp);
        c->allreduce(c, m->tp_rank, st->s, st->sc.t, (size_t)n * m->cfg.H);
    }
}

/* One decoder layer over rows sc.x[0..n). L < 0: the MTP head's layer. */
static void layer_forward(const ts_model *m, ts_state *st, const ts_layer_w *l, ts_kv *kv, int L, int n, ts_mode md) {
    ts_scratch *sc = &st->sc;
    const int H = m->cfg.H;
    const float eps = m->cfg.eps;
    const ts_backend_ops *op = OPS(st);
    op->norm(st->s, md, sc->x, H, NULL, l->in_norm, sc->u, H, n, H, eps);
    if (l->full) attn_block(m, st, &l->attn, kv, n, md);
    else gdn_block(m, st, &l->gdn, L, n, md);
    tp_sum(m, st, n);
    op->norm(st->s, md, sc->x, H, sc->t, l->post_norm, sc->u, H, n, H, eps);
    ffn_block(m, st, &l->ffn, L, n, md);
    tp_sum(m, st, n);
    op->norm(st->s, md, sc->x, H, sc->t, NULL, NULL, H, n, H, 0.f);
}

/* The head on a tensor-parallel rank: its rows [lo, lo + nv) of the
 * vocabulary (those below `rows` when a prefix is asked for) into
 * tp_logits, then gathered into rank 0's rows, as head_out below writes
 * them on one rank. */
static void head_out_tp(const ts_model *m, ts_state *st, const float *hid, int n, float *logits, ts_mode md, int rows) {
    const int V = m->cfg.vocab, H = m->cfg.H;
    const int64_t want = rows > 0 && rows < V ? rows : V;
    const int N = ts_tp_n(m->tp), rk = m->tp_rank;
    int64_t lo[TS_TP_MAX], take[TS_TP_MAX]; /* every rank's piece (the gather places them all) */
    for (int q = 0; q < N; q++) {
        const ts_model *mq = ts_tp_model(m->tp, q);
        lo[q] = mq->cfg.head_lo;
        take[q] = TS_MAX((int64_t)0, TS_MIN(want - lo[q], (int64_t)mq->head.rows));
    }
    ts_weight head = m->head;
    head.rows = take[rk];
    ts_comm *c = ts_tp_comm(m->tp);
    float *loc = st->tp_logits;
    if (logits && st->logits_host) { /* rank 0's host rows: one row at a time through sc.logits */
        for (int r = 0; r < n; r++) {
            if (take[rk]) linear(st, md, &head, hid + (size_t)r * H, loc, 1);
            c->gather_cols(c, rk, st->s, loc, 1, lo, take, st->sc.logits, V);
            if (rk == 0) ts_be_read(st->s, logits + (size_t)r * V, st->sc.logits, (size_t)V);
        }
    } else if (logits) {
        if (take[rk]) linear(st, md, &head, hid, loc, n);
        c->gather_cols(c, rk, st->s, loc, n, lo, take, logits, V);
        if (rk == 0) ts_be_copy(st->s, st->sc.logits, logits + (size_t)(n - 1) * V, (size_t)V);
    } else {
        if (take[rk]) linear(st, md, &head, hid + (size_t)(n - 1) * H, loc, 1);
        c->gather_cols(c, rk, st->s, loc, 1, lo, take, st->sc.logits, V);
    }
}

/* rows > 0: the first `rows` rows of the head only (a view: rows of the
 * MLX layout and 16-row blocks of the packed one are both prefixes). */
static void head_out(const ts_model *m, ts_state *st, const float *hid, int n, float *logits, ts_mode md, int rows) {
    if (m->tp) { head_out_tp(m, st, hid, n, logits, md, rows); return; }
    const int V = m->cfg.vocab, H = m->cfg.H;
    ts_weight head = m->head;
    if (rows > 0 && rows < V) head.rows = rows;
    if (logits && st->logits_host) {
        /* the caller's host rows on a device backend: row by row through
         * sc.logits, each read back (row-exact: the bits of one n-row call);
         * the last row stays in sc.logits */
        for (int r = 0; r < n; r++) {
            linear(st, md, &head, hid + (size_t)r * H, st->sc.logits, 1);
            ts_be_read(st->s, logits + (size_t)r * V, st->sc.logits, (size_t)V);
        }
    } else if (logits) {
        linear(st, md, &head, hid, logits, n);
        if (!st->ahead_on) ts_be_copy(st->s, st->sc.logits, logits + (size_t)(n - 1) * V, (size_t)V);
    } else {
        linear(st, md, &head, hid + (size_t)(n - 1) * H, st->sc.logits, 1);
    }
}

/* The pass's step record: what a captured graph reads per token. */
static void step_begin(ts_state *st, int pos, int n) {
    ts_step *sp = &st->s->step;
    sp->pos = pos;
    sp->n = n;
    sp->pend = st->gdn_pend;
    sp->record = st->tape_on ? TS_REC_TAPE : st->ahead_on ? TS_REC_SWAP : TS_REC_NONE;
    sp->par_S = st->par_S;
    sp->par_conv = st->par_conv;
    sp->half = st->tape_half;
}

/* Graphs (a backend with the hooks: CUDA). A pass after the embedding
 * (the embedding copies the step record and the ids to the device, so it
 * stays outside; a run-ahead step's embedding, whose id is already on the
 * device, is inside, and the backend stages its record at each launch) is
 * captured once per key and replayed; every per-token
 * value is in the step record: the position (attention), the GDN parities
 * and a lazy rollback's pending rows (the backend chooses the GDN buffers
 * and walks the pending rows from it on the device). So the key is the
 * pass's shape only:
 *   decode            one row, no rollback pending;
 *   decode, pending   one row after a lazy rollback: the taped rows first;
 *   verify            M+1 rows that tape the GDN inputs (shorter blocks at
 *                     a context or token limit are other rows of the kind);
 *   verify, pending   the same after a rollback (the kept rows of the last
 *                     block first, folded into the pass);
 *   mtp               the MTP head over n rows: the catch-up over a
 *                     verify's kept rows, a draft step (one row);
 *   ahead             a run-ahead decode step (one row into the other GDN
 *                     buffers, its logits into one of two rows: a variant
 *                     each).
 * Whether rows are pending is structure (a pending run precedes the rows),
 * not a value, hence its own kinds; how many are pending is a value. The
 * buffers a caller passes (logits rows, the MTP head's hiddens) and the
 * mode are baked into a graph, so they pick a variant of the key (the
 * draft chain starts from the catch-up's last row: one variant per row).
 * Passes that read back or tap (host logits rows, debug reads, drafter
 * taps), prompt chunks (prefill) and the MTP head's prompt catch-up run the
 * ops directly. TS_GRAPHS=0 turns graphs off; TSC_VGRAPH=0 only those of
 * the speculative passes (verify, after a rollback, MTP), for comparison:
 * they then run the same ops uncaptured. Both are read at every pass, so
 * a test may flip them. */
enum { GK_DECODE = 1, GK_DECODE_PEND, GK_VERIFY, GK_VERIFY_PEND, GK_MTP, GK_AHEAD };
#define TS_GRAPH_KEY(kind, var, rows) ((uint32_t)(kind) << 24 | (uint32_t)(var) << 16 | (uint32_t)(rows))

static int env_off(const char *name) {
    const char *g = getenv(name);
    return g && !strcmp(g, "0");
}

/* The key of a pass (nonzero), or 0: run it uncaptured. */
static uint32_t pass_key(ts_state *st, int kind, int n, ts_mode md, const void *p0, const void *p1, const void *p2,
                         int head_rows) {
    if (env_off("TS_GRAPHS") || !OPS(st)->graph_launch || n < 1 || n > 0xffff) return 0;
    if (md != TS_MODE_EXACT && md != TS_MODE_DRAFT) return 0;
    const int spec = kind != GK_DECODE || p0; /* plain decode writes sc.logits only */
    if (spec && env_off("TSC_VGRAPH")) return 0;
    int var = 0;
    for (int i = 0; i < st->n_gsig; i++) {
        const ts_gsig *g = &st->gsig[i];
        if (g->kind != kind || g->rows != n) continue;
        if (g->p[0] == p0 && g->p[1] == p1 && g->p[2] == p2 && g->head_rows == head_rows && g->mode == (int)md)
            return TS_GRAPH_KEY(kind, g->var, n);
        var++;
    }
    if (st->n_gsig == TS_GSIG_MAX || var > 0xff) return 0;
    ts_gsig *g = &st->gsig[st->n_gsig++];
    g->kind = (uint8_t)kind, g->var = (uint8_t)var, g->rows = (uint16_t)n;
    g->head_rows = head_rows, g->mode = (int)md;
    g->p[0] = p0, g->p[1] = p1, g->p[2] = p2;
    return TS_GRAPH_KEY(kind, var, n);
}

/* Replay the key's graph (1), or start capturing it (*capture = 1), or
 * neither: the caller runs the ops. */
static int graph_enter(ts_state *st, uint32_t key, int *capture) {
    *capture = 0;
    if (!key) return 0;
    if (OPS(st)->graph_launch(st->s, key) == 0) return 1;
    *capture = OPS(st)->graph_begin(st->s, key) == 0;
    return 0;
}

/* A pass on every rank of a tensor-parallel model (rank 0's state holds
 * the others'); the pointer arguments are rank 0's session buffers, each
 * rank reads its own (ts_tp_xlate). */
typedef struct {
    int kind;                 /* 0 forward, 1 MTP, 2 materialize */
    const ts_model *m;
    ts_state *st;
    const int32_t *ids;
    const float *h;
    float *h_out, *logits;
    int n, pos, prefill, draft, head_rows;
} tp_pass;

static int forward_rank(const ts_model *m, ts_state *st, const int32_t *ids, int n, int pos, float *logits, int prefill);
static int mtp_rank(const ts_model *m, ts_state *st, const int32_t *toks, const float *h, int n, int pos,
                    float *h_out, float *logits, int draft, int head_rows);
static void materialize_rank(const ts_model *m, ts_state *st);

static int tp_pass_run(void *a, int rank) {
    const tp_pass *p = a;
    const ts_model *m = ts_tp_model(p->m->tp, rank);
    ts_state *st = rank ? p->st->tp_peer[rank] : p->st;
    ts_stream *s = st->s;
    unsigned o = rank ? s->be->ops->enter(s) : 0;
    float *lg = ts_tp_xlate(p->st, st, p->logits);
    int rc = 0;
    if (p->kind == 0) rc = forward_rank(m, st, p->ids, p->n, p->pos, lg, p->prefill);
    else if (p->kind == 1)
        rc = mtp_rank(m, st, p->ids, ts_tp_xlate(p->st, st, p->h), p->n, p->pos, ts_tp_xlate(p->st, st, p->h_out), lg,
                      p->draft, p->head_rows);
    else {
        materialize_rank(m, st);
        rc = rank ? ts_be_sync(s, NULL) : 0;
    }
    if (rank) s->be->ops->leave(s, o);
    return rc;
}

static int tp_dispatch(tp_pass *p) {
    ts_tp_sync_control(p->st);
    return ts_tp_run(p->m->tp, tp_pass_run, p);
}

/* graphs hold a pass whose collectives can be captured */
static int tp_uncapturable(const ts_model *m) { return m->tp && !ts_tp_comm(m->tp)->capturable; }

int ts_forward(const ts_model *m, ts_state *st, const int32_t *ids, int n, int pos, float *logits, int prefill) {
    if (m->tp && m->tp_rank == 0) {
        tp_pass p = {0, m, st, ids, NULL, NULL, logits, n, pos, prefill, 0, 0};
        return tp_dispatch(&p);
    }
    return forward_rank(m, st, ids, n, pos, logits, prefill);
}

int ts_mtp_forward(const ts_model *m, ts_state *st, const int32_t *toks, const float *h, int n, int pos,
                   float *h_out, float *logits, int draft, int head_rows) {
    if (m->tp && m->tp_rank == 0) {
        tp_pass p = {1, m, st, toks, h, h_out, logits, n, pos, 0, draft, head_rows};
        return tp_dispatch(&p);
    }
    return mtp_rank(m, st, toks, h, n, pos, h_out, logits, draft, head_rows);
}

void ts_gdn_materialize(const ts_model *m, ts_state *st) {
    if (m->tp && m->tp_rank == 0) {
        if (!st->gdn_pend) return;
        tp_pass p = {2, m, st, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0};
        tp_dispatch(&p);
        return;
    }
    materialize_rank(m, st);
}

static int forward_rank(const ts_model *m, ts_state *st, const int32_t *ids, int n, int pos, float *logits, int prefill) {
    /* prompt-chunk forms only for chunks: one row is the token path */
    const ts_mode md = prefill && n > 1 ? TS_MODE_PREFILL : TS_MODE_EXACT;
    const ts_backend_ops *op = OPS(st);
    ts_scratch *sc = &st->sc;
    const int H = m->cfg.H;
    const size_t nH = (size_t)n * H;
    if (st->ahead_on && (n != 1 || st->gdn_pend || st->tape_on || !logits || !st->ahead_hid || !op->argmax_ahead)) {
        ts_be_fail(st->s, TS_E_ARG, "a run-ahead step is one row with no pending rows, no tape and its own logits row");
        return ts_be_sync(st->s, NULL);
    }
    step_begin(st, pos, n);
    const int kind = st->tape_on ? (st->gdn_pend ? GK_VERIFY_PEND : GK_VERIFY)
                     : st->ahead_on ? GK_AHEAD
                                    : (st->gdn_pend ? GK_DECODE_PEND : GK_DECODE);
    /* streamed experts: each MoE layer waits for its routes on the host
     * (model/xstream.h), which a graph cannot hold. DFlash's taps are
     * copies into the session's tap buffer, captured with the pass: its
     * address is in the key (a pass with taps and one without differ) */
    const int direct = (logits && st->logits_host) || st->dbg_layers || m->xs || tp_uncapturable(m);
    /* (a run-ahead graph embeds its ids' device address too: part of its key) */
    const uint32_t key = direct ? 0
                                : pass_key(st, kind, n, md, logits, st->n_taps ? st->tap_out : NULL,
                                           st->ahead_on ? (const void *)ids : NULL, 0);
    int capture = 0, replay = 0;
    /* a run-ahead step's graph holds its embedding too (its id is the
     * device's, its step record the backend's to stage at each launch), so
     * that the whole step is one launch; any other pass embeds first (its
     * host ids and record go to the device outside the graph) */
    if (st->ahead_on) replay = graph_enter(st, key, &capture);
    if (!replay) op->embed(st->s, md, &m->embed, ids, sc->x, (size_t)H, n);
    if (st->dbg_layers) ts_be_read(st->s, st->dbg_layers, sc->x, nH);
    if (!st->ahead_on) replay = graph_enter(st, key, &capture);
    for (int L = 0; L < m->cfg.n_layers && !replay; L++) {
        layer_forward(m, st, &m->layers[L], &st->kv[L], L, n, md);
        for (int t = 0; t < st->n_taps; t++)
            if (st->tap_layer[t] == L)
                op->copy(st->s, tv_ld(st->tap_out + (size_t)t * H, n, H, (int64_t)st->n_taps * H), tv_f32(sc->x, n, H));
        if (st->dbg_layers) ts_be_read(st->s, st->dbg_layers + (L + 1) * nH, sc->x, nH);
    }
    /* every GDN layer has applied the pending rows of a lazy rollback, and
     * traded its pairs by the same rule */
    ts_step after = st->s->step;
    ts_gdn_parity_after(&after, md == TS_MODE_PREFILL && sc->pf_conv != NULL);
    st->par_S = after.par_S;
    st->par_conv = after.par_conv;
    st->gdn_pend = 0;
    if (st->tape_on) st->tape_half ^= 1; /* the block just verified is the tape now */
    if (!replay) {
        float *hid = st->ahead_on ? st->ahead_hid : sc->hidden;
        op->norm(st->s, md, sc->x, H, NULL, m->final_norm, hid, H, n, H, m->cfg.eps);
        head_out(m, st, hid, n, logits, md, 0);
        /* a run-ahead step's argmax is part of its pass (and of its graph:
         * the device id and the ticket's copy replay with it) */
        if (st->ahead_on)
            st->ahead_slot[st->ahead_k & (TS_AHEAD_TICKETS - 1)] =
                op->argmax_ahead(st->s, tv_f32(logits, 1, m->cfg.vocab), m->cfg.vocab, st->ahead_k);
    }
    if (capture && op->graph_end(st->s, key) == 0) op->graph_launch(st->s, key);
    return st->defer_sync ? 0 : ts_be_sync(st->s, NULL);
}

static int mtp_rank(const ts_model *m, ts_state *st, const int32_t *toks, const float *h, int n, int pos,
                    float *h_out, float *logits, int draft, int head_rows) {
    const ts_mode md = draft ? TS_MODE_DRAFT : TS_MODE_EXACT;
    const ts_backend_ops *op = OPS(st);
    const ts_mtp_w *w = &m->mtp;
    ts_scratch *sc = &st->sc;
    const int H = m->cfg.H;
    const float eps = m->cfg.eps;
    float *cat = sc->big0; /* [n, 2H]: normed embedding | normed hidden */
    ts_step *sp = &st->s->step;
    sp->pos = pos;
    sp->n = n;
    op->embed(st->s, md, &m->embed, toks, cat, (size_t)2 * H, n);
    /* the drafter's passes (head rows, no logits rows) are captured; the
     * prompt catch-up (no head) and the API's ts_session_mtp are not */
    const uint32_t key = !logits && head_rows > 0 && !m->xs && !tp_uncapturable(m) ? pass_key(st, GK_MTP, n, md, h, h_out, NULL, head_rows) : 0;
    int capture;
    if (!graph_enter(st, key, &capture)) {
        op->norm(st->s, md, cat, (size_t)2 * H, NULL, w->pre_norm_emb, cat, (size_t)2 * H, n, H, eps);
        op->norm(st->s, md, (float *)h, (size_t)H, NULL, w->pre_norm_hid, cat + H, (size_t)2 * H, n, H, eps);
        linear(st, md, &w->fc, cat, sc->x, n);
        layer_forward(m, st, &w->layer, &st->mtp_kv, -1, n, md);
        op->norm(st->s, md, sc->x, H, NULL, w->norm, h_out, H, n, H, eps);
        if (logits || head_rows >= 0) head_out(m, st, h_out, n, logits, md, logits ? 0 : head_rows);
        if (capture && op->graph_end(st->s, key) == 0) op->graph_launch(st->s, key);
    }
    return st->defer_sync ? 0 : ts_be_sync(st->s, NULL);
}
