/* session.c: one timeline over an engine.
 *
 * All state is allocated here, at creation, from sizes known up front (the
 * memory plan, plan.h: every size below comes from ts_sess_plan_make, which
 * `turbospark plan` also calls): KV caches for the full-attention layers,
 * conv and recurrent state for the GDN layers, the MTP head's KV cache when
 * asked for, the drafter's buffers (GDN tape and snapshots, verify logits,
 * draft distributions) only with drafting (spec_draft, ngram_draft or
 * dflash_block > 0; n-gram drafting alone: no MTP buffer), and scratch for max_rows
 * rows (the verify block when larger), and the session's backend stream
 * (its kernel workspace: sessions never share one, so they never wait for
 * each other but for the engine's thread pool). Feeding tokens allocates
 * nothing. Buffers are backend memory: this file reads and writes them
 * through ops only (copy, fill, read), never directly.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "engine/plan.h"
#include "model/tp.h"

void ts_session_params_default(ts_session_params *p) {
    memset(p, 0, sizeof *p);
}

/* Backend memory back to the backend (NULL: nothing). */
static void bfree(ts_backend *be, void *p) {
    if (p) be->ops->free(be, p);
}

static void state_free(ts_backend *be, ts_state *st, int n_layers) {
    if (st->kv)
        for (int i = 0; i < n_layers; i++) { bfree(be, st->kv[i].k); bfree(be, st->kv[i].v); }
    if (st->gdn)
        for (int i = 0; i < n_layers; i++) { bfree(be, st->gdn[i].conv); bfree(be, st->gdn[i].S); }
    if (st->tape)
        for (int i = 0; i < n_layers; i++) {
            ts_gdn_tape *t = &st->tape[i];
            bfree(be, t->qkv); bfree(be, t->a); bfree(be, t->b); bfree(be, t->snap_conv); bfree(be, t->snap_S);
            bfree(be, t->prep);
        }
    ts_free(st->kv);
    ts_free(st->gdn);
    ts_free(st->tape);
    bfree(be, st->gdn_rows);
    bfree(be, st->mtp_kv.k);
    bfree(be, st->mtp_kv.v);
    bfree(be, st->tp_logits);
    ts_free(st->xb);
    ts_scratch *s = &st->sc;
    float *bufs[] = {s->x, s->u, s->t, s->big0, s->big1, s->big2, s->small, s->att, s->rowtmp,
                     s->moe_acc, s->hidden, s->logits, s->pf_conv, s->pf_gate, s->pf_chunk};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) bfree(be, bufs[i]);
    ts_free(s->route_ids); /* host memory: the expert cache reads the routing */
    ts_free(s->route_w);
    memset(st, 0, sizeof *st);
}

void ts_session_free(ts_session *s) {
    if (!s) return;
    for (int r = 1; r < TS_TP_MAX; r++) ts_session_free(s->tp_peers[r]); /* tensor parallelism's other ranks */
    ts_backend *be = s->e->be;
    ts_stream *stream = s->st.s;
    state_free(be, &s->st, s->e->model.cfg.n_layers);
    if (stream) be->ops->stream_free(stream);
    bfree(be, s->last_hidden);
    bfree(be, s->mtp_hid);
    bfree(be, s->vlogits);
    ts_free(s->dprobs); /* host memory: the sampler's draft distributions */
    ts_dflash_state *df = &s->df;
    if (df->kv)
        for (int i = 0; i < s->e->dflash->cfg.n_layers; i++) { bfree(be, df->kv[i].k); bfree(be, df->kv[i].v); }
    ts_free(df->kv);
    float *dbufs[] = {s->df_taps, df->feat, df->x, df->u, df->t, df->q, df->o, df->k, df->v, df->g, df->up, df->att};
    for (size_t i = 0; i < sizeof dbufs / sizeof dbufs[0]; i++) bfree(be, dbufs[i]);
    bfree(be, s->ckpt);
    bfree(be, s->ahead_rows);
    ts_free(s);
}

/* Allocate `count` floats of backend memory (none when count is 0: features
 * that are off allocate nothing, and the plan counts nothing for them);
 * HALLOC: host memory (what host code reads and writes: the sampler's). */
#define ALLOC(dst, count, cat) \
    do { \
        if ((count) && !((dst) = e->be->ops->alloc(e->be, sizeof(float) * (size_t)(count), cat))) goto oom; \
        if (m->tp) ts_state_register(st, (dst), sizeof(float) * (size_t)(count)); /* model/tp.h */ \
    } while (0)
#define HALLOC(dst, count, cat) \
    do { if ((count) && !((dst) = ts_alloc(sizeof(float) * (size_t)(count), cat))) goto oom; } while (0)

/* A device backend: the session's device bytes (the plan's own account, as
 * `plan --backend cuda` prints it) against the free device memory, before
 * anything is allocated, so that a context too large for the device gets a
 * sentence naming both. 0 when it fits or when either is unknown. */
static int device_room(ts_engine *e, const ts_session_params *sp, ts_error *err) {
    ts_mem_plan *pl = ts_alloc(sizeof *pl, TS_MEM_MISC);
    size_t fr = 0, tot = 0;
    int rc = 0;
    ts_error pe = {0};
    ts_engine_params ep = e->params;
    ep.backend = "cuda";
    if (pl && !ts_mem_plan_dir_ex(e->dir, &ep, sp, pl, &pe) &&
        !ts_cuda_backend_info(e->be, NULL, 0, NULL, &fr, &tot)) {
        uint64_t need = 0;
        for (int i = 0; i < pl->n_items; i++)
            if (!pl->items[i].engine && pl->items[i].dom == TS_DOM_DEVICE) need += pl->items[i].bytes;
        if (need > fr)
            rc = ts_fail(err, TS_E_NOMEM,
                         "a session of %d tokens of context (%d rows a pass) needs %.2f GB of device memory; the CUDA "
                         "device has %.2f GB free of %.2f GB (a smaller --ctx fits)", pl->n_ctx, pl->max_rows,
                         (double)need / 1e9, (double)fr / 1e9, (double)tot / 1e9);
    }
    ts_free(pl);
    return rc;
}

int ts_session_new(ts_engine *e, const ts_session_params *p, ts_session **out, ts_error *err) {
    *out = NULL;
    const ts_model *m = &e->model;
    const ts_config *c = &m->cfg;
    /* Every size below comes from the plan (plan.h): `turbospark plan`
     * predicts this function's allocations by calling the same code. */
    ts_sess_plan pl;
    ts_session_params pa;
    if (p) pa = *p;
    else ts_session_params_default(&pa);
    int rc = ts_ahead_resolve(e->be, m->xs != NULL, m->tp != NULL, &pa, err);
    if (!rc) rc = ts_sess_plan_make_df(c, m->has_mtp, e->dflash ? &e->dflash->cfg : NULL, &pa, &pl, err);
    if (rc) return ts_fail_prefix(err, "%s", e->dir);
    const ts_session_params sp = pl.p;
    /* (a tensor-parallel rank's state is a piece of the plan's: its own
     * allocation failure names the device) */
    if (!strcmp(e->be->name, "cuda") && !m->tp && (rc = device_room(e, &sp, err))) return rc;
    if (m->tp && (sp.dflash_block > 0 || m->xs))
        return ts_fail(err, TS_E_UNSUPPORTED, "tensor parallelism (--gpus) with %s is not built",
                       m->xs ? "expert streaming" : "DFlash drafting");
    ts_session *s = ts_alloc(sizeof *s, TS_MEM_MISC);
    if (!s) return ts_fail(err, TS_E_NOMEM, "out of memory");
    s->e = e;
    s->params = sp;
    ts_state *st = &s->st;
    {
        const char *de = getenv("TS_DRAFT_EXACT");
        s->draft_lowp = !(de && *de && strcmp(de, "0"));
    }
    st->n_ctx = sp.n_ctx;
    if (!(st->kv = ts_alloc(sizeof(ts_kv) * c->n_layers, TS_MEM_MISC))) goto oom;
    if (!(st->gdn = ts_alloc(sizeof(ts_gdn_state) * c->n_layers, TS_MEM_MISC))) goto oom;
    st->gdn_conv_n = pl.gdn_conv;
    st->gdn_S_n = pl.gdn_S;
    /* the tape's descriptors hold the pairs' second buffers: a drafter's
     * snapshots, or run-ahead's alone (no tape rows) */
    if ((pl.Rv || pl.ahead) && !(st->tape = ts_alloc(sizeof(ts_gdn_tape) * c->n_layers, TS_MEM_MISC))) goto oom;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_full[i]) {
            ALLOC(st->kv[i].k, pl.kv_layer, TS_MEM_KV);
            ALLOC(st->kv[i].v, pl.kv_layer, TS_MEM_KV);
        } else {
            ALLOC(st->gdn[i].conv, pl.gdn_conv, TS_MEM_GDN);
            ALLOC(st->gdn[i].S, pl.gdn_S, TS_MEM_GDN);
            if (st->tape && !pl.Rv) { /* run-ahead without drafting */
                ALLOC(st->tape[i].snap_conv, pl.pair_conv, TS_MEM_GDN);
                ALLOC(st->tape[i].snap_S, pl.pair_S, TS_MEM_GDN);
            } else if (st->tape) {
                ts_gdn_tape *t = &st->tape[i];
                ALLOC(t->qkv, pl.tape_qkv, TS_MEM_SPEC);
                ALLOC(t->a, pl.tape_ab, TS_MEM_SPEC);
                ALLOC(t->b, pl.tape_ab, TS_MEM_SPEC);
                ALLOC(t->snap_conv, pl.snap_conv, TS_MEM_SPEC);
                ALLOC(t->snap_S, pl.snap_S, TS_MEM_SPEC);
                ALLOC(t->prep, pl.tape_prep, TS_MEM_SPEC);
            }
        }
    }
    st->tape_rows = pl.Rv;
    ALLOC(st->gdn_rows, pl.gdn_rows, TS_MEM_SPEC);
    st->mtp_ctx = pl.mtp_ctx;
    ALLOC(st->mtp_kv.k, pl.mtp_kv, TS_MEM_MTP);
    ALLOC(st->mtp_kv.v, pl.mtp_kv, TS_MEM_MTP);
    ALLOC(s->mtp_hid, pl.mtp_hid, TS_MEM_MTP);
    ALLOC(s->vlogits, pl.vlogits, TS_MEM_SPEC);
    HALLOC(s->dprobs, pl.dprobs, TS_MEM_SPEC);
    ts_scratch *sc = &st->sc;
    sc->R = pl.R;
    sc->F = pl.R ? (int)(pl.big1 / pl.R) : 0;
    ALLOC(sc->x, pl.x, TS_MEM_SCRATCH);
    ALLOC(sc->u, pl.u, TS_MEM_SCRATCH);
    ALLOC(sc->t, pl.t, TS_MEM_SCRATCH);
    ALLOC(sc->big0, pl.big0, TS_MEM_SCRATCH);
    ALLOC(sc->big1, pl.big1, TS_MEM_SCRATCH);
    ALLOC(sc->big2, pl.big2, TS_MEM_SCRATCH);
    ALLOC(sc->small, pl.small, TS_MEM_SCRATCH);
    ALLOC(sc->att, pl.att, TS_MEM_SCRATCH);
    sc->att_len = pl.att_len;
    sc->att_rows = pl.att_rows;
    ALLOC(sc->rowtmp, pl.rowtmp, TS_MEM_SCRATCH);
    ALLOC(sc->moe_acc, pl.moe_acc, TS_MEM_SCRATCH);
    ALLOC(sc->hidden, pl.hidden, TS_MEM_SCRATCH);
    ALLOC(sc->logits, pl.logits, TS_MEM_SCRATCH);
    ALLOC(sc->pf_conv, pl.pf_conv, TS_MEM_SCRATCH);
    ALLOC(sc->pf_gate, pl.pf_gate, TS_MEM_SCRATCH);
    ALLOC(sc->pf_chunk, pl.pf_chunk, TS_MEM_SCRATCH);
    if (m->xs) { /* expert streaming: a pass's routing, read by the host (plan.c counts it) */
        const size_t nroute = (size_t)pl.R * (size_t)c->topk;
        HALLOC(sc->route_ids, nroute, TS_MEM_SCRATCH);
        HALLOC(sc->route_w, nroute, TS_MEM_SCRATCH);
    }
    ALLOC(s->last_hidden, pl.last_hidden, TS_MEM_SCRATCH);
    ALLOC(s->ahead_rows, pl.ahead_rows, TS_MEM_SCRATCH);
    ALLOC(s->ckpt, pl.ckpt, TS_MEM_GDN);
    /* DFlash: the drafter's context cache, the target's taps, its scratch */
    if (pl.df_layers) {
        ts_dflash_state *df = &s->df;
        df->B = sp.dflash_block;
        df->ctx = pl.df_ctx;
        df->R = pl.R;
        if (!(df->kv = ts_alloc(sizeof(ts_kv) * pl.df_layers, TS_MEM_MISC))) goto oom;
        for (int i = 0; i < pl.df_layers; i++) {
            ALLOC(df->kv[i].k, pl.df_kv, TS_MEM_SPEC);
            ALLOC(df->kv[i].v, pl.df_kv, TS_MEM_SPEC);
        }
        ALLOC(s->df_taps, pl.df_taps, TS_MEM_SPEC);
        ALLOC(df->feat, pl.df_feat, TS_MEM_SPEC);
        ALLOC(df->x, pl.df_x, TS_MEM_SPEC);
        ALLOC(df->u, pl.df_x, TS_MEM_SPEC);
        ALLOC(df->t, pl.df_x, TS_MEM_SPEC);
        ALLOC(df->q, pl.df_q, TS_MEM_SPEC);
        ALLOC(df->o, pl.df_q, TS_MEM_SPEC);
        ALLOC(df->k, pl.df_k, TS_MEM_SPEC);
        ALLOC(df->v, pl.df_k, TS_MEM_SPEC);
        ALLOC(df->g, pl.df_ffn, TS_MEM_SPEC);
        ALLOC(df->up, pl.df_ffn, TS_MEM_SPEC);
        ALLOC(df->att, pl.df_att, TS_MEM_SPEC);
    }
    /* tensor parallelism: the rank's head rows of a pass */
    if (m->tp) {
        const size_t nlog = (size_t)pl.R * (size_t)m->head.rows;
        ALLOC(st->tp_logits, nlog, TS_MEM_SCRATCH);
    }
    s->ckpt_pos = -1;
    /* the stream and its workspace, reserved for the largest product so the
     * token loop never grows it */
    if (e->be->ops->stream_new(e->be, pl.R, ts_plan_stream_cols(c, m->has_mtp, &pl), c->q_bits ? c->q_group : 0, &st->s))
        goto oom;
    /* tensor parallelism: the same session on every other rank (model/tp.h),
     * and room in the collectives' buffers for its passes */
    if (m->tp && m->tp_rank == 0) {
        ts_comm *cm = ts_tp_comm(m->tp);
        if (cm->reserve && (rc = cm->reserve(cm, pl.R, c->H, c->vocab))) {
            ts_session_free(s);
            return ts_fail(err, rc, "tensor parallelism: no room for the collectives' buffers (%d rows)", pl.R);
        }
        for (int r = 1; r < ts_tp_n(m->tp); r++) {
            if ((rc = ts_session_new(e->tp_rank_e[r], p, &s->tp_peers[r], err))) {
                ts_session_free(s);
                return ts_fail_prefix(err, "GPU %d of %d", r, ts_tp_n(m->tp));
            }
            st->tp_peer[r] = &s->tp_peers[r]->st;
            if (st->n_xb < 0 || st->n_xb != st->tp_peer[r]->n_xb) {
                ts_session_free(s);
                return ts_fail(err, TS_E_NOMEM, "tensor parallelism: the ranks' sessions differ (out of memory?)");
            }
        }
    }
    *out = s;
    return 0;
oom:
    ts_session_free(s);
    return ts_fail(err, TS_E_NOMEM, "out of memory creating a session (context %d, %d rows)", sp.n_ctx, sp.max_rows);
}

void ts_session_reset(ts_session *s) {
    const ts_config *c = &s->e->model.cfg;
    s->st.gdn_pend = 0; /* a pending lazy rollback is moot: the state restarts from zero */
    for (int i = 0; i < c->n_layers; i++)
        if (!c->layer_full[i]) {
            float *conv, *S;
            ts_gdn_live(&s->st, i, &conv, &S);
            ts_state_fill(&s->e->model, &s->st, conv, s->st.gdn_conv_n, 0.0f);
            ts_state_fill(&s->e->model, &s->st, S, s->st.gdn_S_n, 0.0f);
        }
    /* KV rows past pos are never read, so they need no clearing. */
    s->pos = 0;
    s->ckpt_pos = -1; /* the saved state belonged to the forgotten timeline */
    s->have_last = 0;
}

int ts_session_pos(const ts_session *s) { return s->pos; }

/* Copy every GDN layer's conv and recurrent state to (save) or from the
 * checkpoint block, in layer order. */
static void ckpt_copy(ts_session *s, int save) {
    const ts_config *c = &s->e->model.cfg;
    const size_t nconv = s->st.gdn_conv_n, nS = s->st.gdn_S_n;
    float *p = s->ckpt;
    const ts_model *m = &s->e->model;
    ts_state *st = &s->st;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_full[i]) continue;
        float *conv, *S;
        ts_gdn_live(&s->st, i, &conv, &S);
        if (save) { ts_state_copy(m, st, p, conv, nconv); ts_state_copy(m, st, p + nconv, S, nS); }
        else { ts_state_copy(m, st, conv, p, nconv); ts_state_copy(m, st, S, p + nconv, nS); }
        p += nconv + nS;
    }
}

int ts_session_save(ts_session *s, ts_error *err) {
    if (!s->params.checkpoint)
        return ts_fail(err, TS_E_ARG, "the session has no checkpoint buffers (session params checkpoint = 1)");
    /* a lazy rollback's pending rows belong to the state being saved */
    unsigned fp = s->e->be->ops->enter(s->st.s);
    ts_gdn_materialize(&s->e->model, &s->st);
    ckpt_copy(s, 1);
    s->e->be->ops->leave(s->st.s, fp);
    int rc = ts_be_sync(s->st.s, err);
    if (rc) return rc;
    s->ckpt_pos = s->pos;
    return 0;
}

int ts_session_restore(ts_session *s, ts_error *err) {
    if (!s->params.checkpoint)
        return ts_fail(err, TS_E_ARG, "the session has no checkpoint buffers (session params checkpoint = 1)");
    if (s->ckpt_pos < 0) return ts_fail(err, TS_E_ARG, "no saved state to restore (ts_session_save first)");
    ckpt_copy(s, 0);
    s->st.gdn_pend = 0; /* the saved state had none: save materialized them */
    int rc = ts_be_sync(s->st.s, err);
    if (rc) return rc;
    s->spec_rows = 0;
    s->pos = s->ckpt_pos;
    s->have_last = 0;
    return 0;
}

int ts_session_saved_pos(const ts_session *s) { return s->ckpt_pos; }
int ts_session_n_ctx(const ts_session *s) { return s->st.n_ctx; }
int ts_session_ahead(const ts_session *s) {
    const char *e = getenv("TS_AHEAD");
    return s->ahead_rows && !(e && !strcmp(e, "0"));
}

static int check_ids(const ts_model *m, const int32_t *ids, int n, ts_error *err) {
    if (n <= 0) return ts_fail(err, TS_E_ARG, "no tokens to feed");
    if (!ids) return ts_fail(err, TS_E_ARG, "ids is NULL");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab)
            return ts_fail(err, TS_E_ARG, "token id %d (at index %d) is outside the vocabulary [0, %d)", ids[i], i,
                           m->cfg.vocab);
    return 0;
}

/* The prefill grid. Prefill kernels (chunked GDN, multi-row products) round
 * differently from the one-row decode kernels and from each other for other
 * chunk extents, so a row's bits depend on the chunk it was fed in. Chunks
 * are cut at multiples of max_rows in absolute positions (a chunk never
 * crosses a grid point): the chunks covering [0, n) are a function of n
 * alone, and any sequence of feeds whose cuts all fall on grid points
 * computes every row exactly as one feed from position 0 would. A cut
 * elsewhere (a decode step, a feed that ends mid-chunk and is continued)
 * gives other bits from there on, whatever the chunking; so callers that
 * want output independent of their cache state resume only from states
 * saved at grid points (ts_session_grid; tools/cli/cli_reuse.c for chat and
 * the server). Chunks counted from each call's start would give the same
 * bits for such resumes; the grid makes exactness a property of positions
 * that a caller can state without knowing how earlier calls were cut, and
 * the speculative prefill, which reads each forward's hidden rows, takes
 * the very same cuts through ts_session_chunk. */
int ts_session_chunk(const ts_session *s, int n) {
    const int G = s->params.max_rows;
    return TS_MIN(n, G - s->pos % G);
}

int ts_session_grid(const ts_session *s) { return s->params.max_rows; }

int ts_session_check_feed(const ts_session *s, const int32_t *ids, int n, ts_error *err) {
    int rc = check_ids(&s->e->model, ids, n, err);
    if (rc) return rc;
    if ((long)s->pos + n > s->st.n_ctx)
        return ts_fail(err, TS_E_CONTEXT, "%d tokens at position %d exceed the context limit of %d tokens", n, s->pos,
                       s->st.n_ctx);
    return 0;
}

int ts_session_feed(ts_session *s, const int32_t *ids, int n, float *logits, float *hidden, ts_error *err) {
    const ts_model *m = &s->e->model;
    int rc = ts_session_check_feed(s, ids, n, err);
    if (rc) return rc;
    const int V = m->cfg.vocab, H = m->cfg.H;
    ts_stream *bs = s->st.s;
    unsigned fp = bs->be->ops->enter(bs);
    /* A DFlash session keeps its drafter's context for every row fed, not
     * only for the prompts of drafted generations: chat and the server feed
     * a request's history here before ts_generate drafts the rest. The
     * target's taps are on for the feed (and as they were afterwards). */
    const ts_dflash *df = s->df.B && !s->df_quiet ? s->e->dflash : NULL;
    const int taps0 = s->st.n_taps;
    const int *tl0 = s->st.tap_layer;
    float *to0 = s->st.tap_out;
    if (df) {
        s->st.n_taps = df->cfg.n_taps;
        s->st.tap_layer = df->cfg.taps;
        s->st.tap_out = s->df_taps;
    }
    int k = 0;
    for (int off = 0; off < n && !rc; off += k) {
        k = ts_session_chunk(s, n - off);
        /* logits: the caller's host rows (a backend the host cannot address
         * would need a staging copy here; the CPU writes them in place) */
        s->st.logits_host = logits && bs->be->dom != TS_DOM_HOST; /* read back row by row (qwen35.c) */
        rc = ts_forward(m, &s->st, ids + off, k, s->pos, logits ? logits + (size_t)off * V : NULL, k > 1);
        s->st.logits_host = 0;
        if (hidden) ts_be_read(bs, hidden + (size_t)off * H, s->st.sc.hidden, (size_t)k * H);
        if (!rc && df)
            rc = ts_dflash_context(df, &s->df, bs, s->df_taps, k, s->pos, s->draft_lowp ? TS_MODE_DRAFT : TS_MODE_EXACT);
        s->pos += k;
    }
    s->st.n_taps = taps0;
    s->st.tap_layer = tl0;
    s->st.tap_out = to0;
    if (!rc) ts_be_copy(bs, s->last_hidden, s->st.sc.hidden + (size_t)(k - 1) * H, (size_t)H);
    bs->be->ops->leave(bs, fp);
    if (rc || (rc = ts_be_sync(bs, NULL))) {
        s->have_last = 0;
        return ts_fail(err, rc, "backend %s: %s", bs->be->name, bs->msg);
    }
    s->have_last = 1;
    return 0;
}

int ts_session_step(ts_session *s, int32_t id, int32_t *next, ts_error *err) {
    const ts_model *m = &s->e->model;
    if ((s->df.B && !s->df_quiet) || m->tp) return 1;
    int rc = check_ids(m, &id, 1, err);
    if (rc) return rc;
    if (s->pos + 1 > s->st.n_ctx)
        return ts_fail(err, TS_E_CONTEXT, "a token at position %d exceeds the context limit of %d tokens", s->pos,
                       s->st.n_ctx);
    const int V = m->cfg.vocab, H = m->cfg.H;
    ts_stream *bs = s->st.s;
    unsigned fp = bs->be->ops->enter(bs);
    /* the pass, the last hidden's copy and the argmax queue behind each
     * other; the argmax's read of the id is the one wait, and the sync after
     * it (the stream is idle then) collects any error of the three */
    s->st.defer_sync = 1;
    rc = ts_forward(m, &s->st, &id, 1, s->pos, NULL, 0);
    s->st.defer_sync = 0;
    if (!rc) {
        ts_be_copy(bs, s->last_hidden, s->st.sc.hidden, (size_t)H);
        bs->be->ops->argmax(bs, tv_f32(s->st.sc.logits, 1, V), V, next, NULL);
    }
    bs->be->ops->leave(bs, fp);
    s->pos++;
    if (rc || (rc = ts_be_sync(bs, NULL))) {
        s->have_last = 0;
        return ts_fail(err, rc, "backend %s: %s", bs->be->name, bs->msg);
    }
    s->have_last = 1;
    return 0;
}

/* Host-readable rows (the CPU's own memory; another backend's staging copy). */
const float *ts_session_logits(const ts_session *s) {
    return s->have_last ? ts_be_host(s->st.s, s->st.sc.logits, (size_t)s->e->model.cfg.vocab) : NULL;
}
const float *ts_session_hidden(const ts_session *s) {
    return s->have_last ? ts_be_host(s->st.s, s->last_hidden, (size_t)s->e->model.cfg.H) : NULL;
}

int ts_session_mtp(ts_session *s, const int32_t *toks, const float *hidden, int n, int pos, float *h_out,
                   float *logits, ts_error *err) {
    const ts_model *m = &s->e->model;
    if (!s->params.mtp) return ts_fail(err, TS_E_ARG, "the session was created without the MTP head (params.mtp = 0)");
    int rc = check_ids(m, toks, n, err);
    if (rc) return rc;
    if (pos < 0 || (long)pos + n > s->st.mtp_ctx)
        return ts_fail(err, TS_E_CONTEXT, "MTP rows [%d, %d) exceed the MTP cache of %d rows", pos, pos + n, s->st.mtp_ctx);
    const int R = s->st.sc.R, V = m->cfg.vocab, H = m->cfg.H;
    ts_stream *bs = s->st.s;
    unsigned fp = bs->be->ops->enter(bs);
    for (int off = 0; off < n && !rc; off += R) {
        int k = TS_MIN(R, n - off);
        /* h_out may alias hidden: ts_mtp_forward reads a row's hidden before writing it */
        float *ho = h_out ? h_out + (size_t)off * H : s->st.sc.hidden;
        rc = ts_mtp_forward(m, &s->st, toks + off, hidden + (size_t)off * H, k, pos + off, ho,
                            logits ? logits + (size_t)off * V : NULL, 0, 0);
    }
    bs->be->ops->leave(bs, fp);
    if (rc) return ts_fail(err, rc, "backend %s: %s", bs->be->name, bs->msg);
    return 0;
}
