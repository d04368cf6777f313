/* plan.c: the memory plan (design.md "Memory plan").
 *
 * Owns: ts_sess_plan_make (the size of every session buffer, used by
 * session.c to allocate), ts_plan_workspace (the one place that asks the
 * backend for its workspace), and the public plan (ts_mem_plan_dir,
 * ts_mem_plan_shape): engine + session allocations in bytes, by memory
 * domain and category, plus the install's mapped bytes, for `turbospark plan`.
 * Does not own: any allocation of the running engine.
 *
 * Where each part comes from (no part is a tally that mirrors another file):
 * - the tensor index: built by the loader's own code (ts_st_open_dir over
 *   the headers, or ts_st_open_planned over the tensor list `synth` writes
 *   for a shape) and measured with the allocator's counters;
 * - the model's heap (f32 vectors, descriptors, the packed copies of the
 *   quantized matrices): the binder itself, run dry (ts_model_size), which
 *   reports each allocation it keeps;
 * - the session: ts_sess_plan_make, the sizes session.c allocates;
 * - the backend's workspace: ts_plan_workspace, which session.c calls too.
 * The engine object (two allocations in engine.c) is the one item counted by
 * hand here.
 *
 * Invariant checked by tests/test_plan.c: after ts_engine_open +
 * ts_session_new with the same parameters, ts_mem_used_in(dom, cat) grows by
 * bytes[dom][cat] for every domain and category; an option that is off
 * (drafting, the MTP cache, the checkpoint, chunked prefill) adds no byte;
 * the frozen totals of every released shape (tests/plan_shapes.txt) hold.
 */
#include <stdio.h>

#include "engine/engine.h"
#include "loader/safetensors.h"
#include "loader/st_writer.h"
#include "engine/plan.h"
#include "engine/shard.h"
#include "model/xstream.h"
#include "quant/quant.h"
int ts_sess_plan_make(const ts_config *c, int has_mtp, const ts_session_params *p, ts_sess_plan *o, ts_error *err) {
    return ts_sess_plan_make_df(c, has_mtp, NULL, p, o, err);
}

int ts_ahead_resolve(const ts_backend *be, int xs, int tp, ts_session_params *sp, ts_error *err) {
    const int ahead = sp->ahead, ops = be && be->ops->argmax_ahead && be->ops->ahead_read;
    if (ahead < -1 || ahead > 1) return ts_fail(err, TS_E_ARG, "ahead %d: use -1 (off), 0 (auto) or 1 (on)", ahead);
    if (ahead > 0 && !ops)
        return ts_fail(err, TS_E_UNSUPPORTED, "run-ahead decoding: backend %s has no run-ahead ops", be ? be->name : "(none)");
    if (ahead > 0 && (xs || tp))
        return ts_fail(err, TS_E_UNSUPPORTED, "run-ahead decoding with %s is not built (a pass waits on the host)",
                       xs ? "expert streaming" : "tensor parallelism");
    int on = ahead > 0;
    if (ahead == 0) { /* auto: a device backend (the CPU computes at the call), unless TS_AHEAD says */
        const char *e = getenv("TS_AHEAD");
        const int want = e && !strcmp(e, "0") ? 0 : e && !strcmp(e, "1") ? 1 : be && be->dom != TS_DOM_HOST;
        on = want && ops && !xs && !tp;
    }
    sp->ahead = on ? 1 : -1;
    return 0;
}

int ts_sess_plan_make_df(const ts_config *c, int has_mtp, const ts_dflash_cfg *dc, const ts_session_params *p,
                         ts_sess_plan *o, ts_error *err) {
    memset(o, 0, sizeof *o);
    ts_session_params sp;
    if (p) sp = *p;
    else memset(&sp, 0, sizeof sp);
    if (sp.n_ctx <= 0) sp.n_ctx = TS_MIN(4096, c->max_pos);
    if (sp.max_rows <= 0) sp.max_rows = 64;
    if (sp.n_ctx > 1 << 24) return ts_fail(err, TS_E_ARG, "context length %d is too large", sp.n_ctx);
    if (sp.max_rows > 1 << 16) return ts_fail(err, TS_E_ARG, "max_rows %d is too large", sp.max_rows);
    if (sp.spec_draft < 0 || sp.spec_draft > TS_SPEC_MAX_DRAFT)
        return ts_fail(err, TS_E_ARG, "draft length %d is outside 1..%d", sp.spec_draft, TS_SPEC_MAX_DRAFT);
    if (sp.spec_draft) sp.mtp = 1;
    if (sp.ngram_draft < 0 || sp.ngram_draft > TS_SPEC_MAX_DRAFT)
        return ts_fail(err, TS_E_ARG, "n-gram draft length %d is outside 1..%d", sp.ngram_draft, TS_SPEC_MAX_DRAFT);
    if (sp.dflash_block && (sp.dflash_block < 2 || sp.dflash_block > TS_DFLASH_MAX_BLOCK))
        return ts_fail(err, TS_E_ARG, "DFlash block of %d rows is outside 2..%d", sp.dflash_block, TS_DFLASH_MAX_BLOCK);
    if (sp.dflash_block && !dc)
        return ts_fail(err, TS_E_UNSUPPORTED, "DFlash drafting needs the engine's DFlash drafter (engine params dflash)");
    if (sp.ahead < -1 || sp.ahead > 1) return ts_fail(err, TS_E_ARG, "ahead %d: use -1, 0 or 1", sp.ahead);
    if (sp.checkpoint != 0 && sp.checkpoint != 1)
        return ts_fail(err, TS_E_ARG, "checkpoint %d: use 0 or 1", sp.checkpoint);
    if (sp.mtp && !has_mtp)
        return ts_fail(err, TS_E_UNSUPPORTED, "the checkpoint has no MTP head (no mtp.* tensors)%s",
                       sp.spec_draft ? ": MTP drafting is not possible" : "");
    o->p = sp;
    const size_t H = c->H, D = c->head_dim, kvdim = (size_t)c->nkv * D, qdim = (size_t)c->nq * D;
    const size_t Kd = (size_t)c->Hk * c->dk, Vd = (size_t)c->Hv * c->dv, C = 2 * Kd + Vd;
    const size_t max_ffn = c->is_moe ? (size_t)TS_MAX(c->Im, c->Is) : (size_t)c->I;
    /* verify rows: the longest of an MTP, an n-gram and a DFlash block; the
     * drafts whose distributions sampling keeps (dprobs rows): MTP's and
     * DFlash's only, an n-gram draft's is a point mass (spec.c) */
    const int Mq = TS_MAX(sp.spec_draft, sp.dflash_block ? sp.dflash_block - 1 : 0);
    const int M = TS_MAX(Mq, sp.ngram_draft);
    o->Rv = M ? M + 1 : 0;
    o->R = TS_MAX(sp.max_rows, o->Rv);
    const size_t R = o->R;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_full[i]) o->n_full++;
        else o->n_gdn++;
    }
    o->kv_layer = (size_t)sp.n_ctx * kvdim;
    o->gdn_conv = (size_t)(c->conv_k - 1 > 0 ? c->conv_k - 1 : 1) * C;
    o->gdn_S = (size_t)c->Hv * c->dk * c->dv;
    o->ckpt = sp.checkpoint ? (size_t)o->n_gdn * (o->gdn_conv + o->gdn_S) : 0;
    o->mtp = sp.mtp;
    o->mtp_ctx = sp.mtp ? sp.n_ctx + TS_MTP_SLACK : 0;
    o->att_len = sp.mtp ? o->mtp_ctx : sp.n_ctx;
    size_t b0 = TS_MAX(TS_MAX((size_t)2 * qdim, C), 2 * H);
    /* MoE: a token's k routed gate / up rows side by side (the GPU's
     * stacked expert products, cuda/q4dp.cu; the CPU's rows j < k + 1) */
    const size_t moe_k = c->is_moe ? (size_t)c->topk * (size_t)c->Im : 0;
    size_t b1 = TS_MAX(TS_MAX(TS_MAX(Vd, kvdim), max_ffn), moe_k);
    o->x = o->u = o->t = o->hidden = R * H;
    o->big0 = R * b0;
    o->big1 = R * b1;
    o->big2 = R * TS_MAX(b1, qdim);
    o->small = R * (2 * (size_t)c->Hv + (size_t)c->E);
    /* one row of scores per query head (heads run in parallel) and per row of
     * a verify block (its rows share each read of the KV cache) */
    o->att_rows = M ? o->Rv : 1;
    o->att = (size_t)o->att_len * (size_t)c->nq * (size_t)o->att_rows;
    o->rowtmp = C;
    o->moe_acc = 2 * H;
    o->logits = (size_t)c->vocab;
    o->last_hidden = H;
    if (sp.max_rows > 1 && o->n_gdn) {
        const size_t CH = TS_DELTA_CHUNK;
        o->pf_conv = (size_t)sp.max_rows * C;                 /* conv + SiLU outputs of the chunk's rows */
        o->pf_gate = 2 * (size_t)sp.max_rows * c->Hv; /* log-decay g and beta per row and value head */
        /* one delta-rule workspace per work item (cpu/gdn.c) */
        o->pf_chunk = (size_t)TS_MIN(c->Hv, TS_DELTA_SLOTS) * ts_delta_chunk_ws((int)CH, c->dk, c->dv);
    }
    if (sp.mtp) o->mtp_kv = (size_t)o->mtp_ctx * kvdim;
    if (M) {
        o->mtp_hid = sp.spec_draft ? R * H : 0;
        o->tape_qkv = (size_t)o->Rv * C;
        o->tape_ab = (size_t)o->Rv * c->Hv;
        o->snap_conv = o->gdn_conv;
        o->snap_S = o->gdn_S;
        o->tape_prep = 2 * (size_t)o->Rv * C;
        o->gdn_rows = o->n_gdn ? (size_t)o->Rv * C : 0;
        o->vlogits = (size_t)o->Rv * c->vocab;
        /* one more row: the acceptance test's target distribution, host
         * memory (a device backend's staging holds the block's rows then) */
        o->dprobs = (size_t)(Mq + 1) * c->vocab;
    }
    /* run-ahead: the caller resolved p->ahead (ts_ahead_resolve: 1 on,
     * else off) */
    o->ahead = sp.ahead > 0;
    if (o->ahead) {
        o->ahead_rows = 2 * ((size_t)c->vocab + H);
        if (!M) o->pair_conv = o->gdn_conv, o->pair_S = o->gdn_S;
    }
    if (sp.dflash_block) {
        const size_t B = (size_t)sp.dflash_block, dq = (size_t)dc->nq * dc->D, dkv = (size_t)dc->nkv * dc->D;
        o->df_layers = dc->n_layers;
        o->df_ctx = sp.n_ctx + TS_DFLASH_MAX_BLOCK; /* a block's rows may lie past the context */
        o->df_kv = (size_t)o->df_ctx * dkv;
        o->df_taps = R * (size_t)dc->n_taps * H;
        o->df_feat = R * H;
        o->df_x = B * H;
        o->df_q = B * dq;
        o->df_k = R * dkv;
        o->df_ffn = B * (size_t)dc->I;
        o->df_att = (size_t)dc->nq * o->df_ctx;
        o->df_cols = ts_dflash_max_cols(dc);
    }
    return 0;
}

/* ---- the backend's workspace ---- */

/* The widest input (columns) of any matrix product the model runs. */
int64_t ts_plan_max_cols(const ts_config *c, int has_mtp) {
    int64_t m = c->H;
    int64_t cand[] = {c->I, c->Im, c->Is, (int64_t)c->Hv * c->dv, (int64_t)c->nq * c->head_dim,
                      has_mtp ? 2 * (int64_t)c->H : 0};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) m = cand[i] > m ? cand[i] : m;
    return m;
}

size_t ts_plan_workspace(ts_backend *be, const ts_config *c, int has_mtp, int rows) {
    /* the backend's own answer for a stream of `rows` rows (session.c's
     * stream_new reserves exactly this) */
    return be->ops->workspace_bytes(be, rows, ts_plan_max_cols(c, has_mtp), c->q_bits ? c->q_group : 0);
}

int64_t ts_plan_stream_cols(const ts_config *c, int has_mtp, const ts_sess_plan *s) {
    int64_t m = ts_plan_max_cols(c, has_mtp);
    return s->df_cols > m ? s->df_cols : m;
}

/* ---- the public plan ---- */

/* Add bytes to the item (name, cat, dom, owner), creating it on first use. */
static void add(ts_mem_plan *pl, const char *name, ts_mem_cat cat, ts_mem_domain dom, int engine, int drafter,
                int backend, uint64_t count, uint64_t bytes) {
    if (!bytes) return; /* an option that is off has no line */
    pl->bytes[dom][cat] += bytes;
    pl->dom_bytes[dom] += bytes;
    pl->cat_bytes[cat] += bytes;
    if (engine) pl->engine_bytes += bytes;
    else pl->session_bytes += bytes;
    pl->total_bytes += bytes;
    if (drafter) pl->drafter_bytes += bytes;
    ts_mem_plan_item *it = NULL;
    for (int i = 0; i < pl->n_items && !it; i++)
        if (pl->items[i].cat == cat && pl->items[i].dom == dom && pl->items[i].engine == engine &&
            !strcmp(pl->items[i].name, name))
            it = &pl->items[i];
    if (!it) {
        /* the totals above stay exact even if the list were full */
        if (pl->n_items >= (int)(sizeof pl->items / sizeof pl->items[0])) return;
        it = &pl->items[pl->n_items++];
        snprintf(it->name, sizeof it->name, "%s", name);
        it->cat = cat;
        it->dom = dom;
        it->engine = engine;
        it->drafter = drafter;
        it->backend = backend;
    }
    it->count += count;
    it->bytes += bytes;
}

static void from_binder(void *user, const char *what, ts_mem_cat cat, ts_mem_domain dom, int backend, uint64_t bytes) {
    add(user, what, cat, dom, 1, 0, backend, 1, bytes);
}
/* the DFlash drafter's heap: the engine's, and there only for drafting */
static void from_drafter(void *user, const char *what, ts_mem_cat cat, ts_mem_domain dom, int backend, uint64_t bytes) {
    add(user, what, cat, dom, 1, 1, backend, 1, bytes);
}

/* Bytes per category that `open` allocated in the host heap and kept. */
typedef struct heap_mark { size_t at[TS_MEM_N]; } heap_mark;
static void mark(heap_mark *m) {
    for (int k = 0; k < TS_MEM_N; k++) m->at[k] = ts_mem_used_in(TS_DOM_HOST, (ts_mem_cat)k);
}

/* The plan of config c over the tensor set st of install dir; index holds
 * the heap bytes the set itself took (by category). */
/* The backend a plan is made for, sizes only (nothing runs on it). */
static int plan_backend(const char *name, int threads, ts_backend **be, ts_error *err) {
    if (!name || !*name || !strcmp(name, "cpu") || !strcmp(name, "auto")) {
        /* the engine's thread count (the CPU's workspace is per thread) */
        ts_backend_params bp = {threads, NULL, 0, 0, 0};
        return ts_cpu_backend_new(threads > 0 ? &bp : NULL, be, err);
    }
    if (!strcmp(name, "cuda")) {
        ts_backend_params bp = {0, NULL, 0, 1, 0};
        return ts_cuda_backend_new(&bp, be, err);
    }
    return ts_fail(err, TS_E_ARG, "backend '%s': plans are made for cpu or cuda", name);
}

/* ep (NULL: defaults) names the backend (ep->backend; "auto" plans the CPU),
 * the DFlash drafter's directory (ep->drafter_dir, NULL: dir/dflash, read
 * only when sp asks for DFlash) and the expert cache (ep->expert_cache). */
static int plan_over(const char *dir, const ts_config *c, ts_st_set *st, const heap_mark *index, const ts_engine_params *ep,
                     const ts_session_params *sp, ts_mem_plan *pl, ts_error *err) {
    const int stream = ep && ep->expert_cache > 0;
    const char *backend = ep ? ep->backend : NULL, *ddir = ep ? ep->drafter_dir : NULL;
    if (ep && ep->expert_host_cache && !stream)
        return ts_fail(err, TS_E_ARG, "--expert-host-cache is the tier in front of --expert-cache's device slots: give both");
    for (int i = 0; i < st->n_tensors; i++)
        if (strncmp(st->tensors[i].name, "model.visual.", 13)) pl->mapped_bytes += st->tensors[i].nbytes;

    /* engine: its object (engine.c), the tensor index, the binder's heap */
    add(pl, "engine object", TS_MEM_MISC, TS_DOM_HOST, 1, 0, 0, 1, sizeof(ts_engine) + strlen(dir) + 1);
    add(pl, "tensor index (names, shapes, hash)", TS_MEM_MISC, TS_DOM_HOST, 1, 0, 0, 1, index->at[TS_MEM_MISC]);
    add(pl, "misaligned tensors copied off the files", TS_MEM_WEIGHTS, TS_DOM_HOST, 1, 0, 0, 1,
        index->at[TS_MEM_WEIGHTS]);
    uint64_t dropped = 0;
    /* the backend a default engine opens answers its own sizes (prepared
     * weights, stream workspace); nothing runs on it */
    ts_backend *be = NULL;
    int has_mtp = 0, rc = plan_backend(backend, ep ? ep->n_threads : 0, &be, err);
    if (rc) return rc;
    ts_xc_params xp;
    if (stream && (rc = ts_engine_xc_params(ep, c, &xp, err))) {
        ts_backend_free(be);
        return ts_fail_prefix(err, "%s", dir);
    }
    rc = ts_model_size_opts(c, st, be, stream, from_binder, pl, &has_mtp, &dropped, err);
    if (rc) {
        ts_backend_free(be);
        return ts_fail_prefix(err, "%s", dir);
    }
    pl->mapped_kept_bytes = pl->mapped_bytes - dropped;
    if (stream) {
        /* expert streaming (model/xstream.c): the cache as ts_xstream_open
         * allocates it; the routed experts stay in the files, unmapped */
        uint64_t slots = 0, staging = 0, tables = 0, slot_bytes = 0;
        int n_slots = 0;
        ts_xstream_tier tier;
        if ((rc = ts_xstream_plan(c, st, be, &xp, &slots, &staging, &tables, &n_slots, &slot_bytes, &tier, err))) {
            ts_backend_free(be);
            return ts_fail_prefix(err, "%s", dir);
        }
        char what[64];
        snprintf(what, sizeof what, "expert cache: %d slots of %.2f MiB", n_slots, (double)slot_bytes / (1 << 20));
        /* on a device backend the slots are its memory (one block) */
        add(pl, what, TS_MEM_EXPERT_CACHE, be->dom, 1, 0, 1, (uint64_t)n_slots, slots);
        snprintf(what, sizeof what, "expert cache: staging of the %d I/O threads' reads", xp.n_io);
        add(pl, what, TS_MEM_EXPERT_CACHE, TS_DOM_HOST, 1, 0, 1, (uint64_t)xp.n_io, staging);
        add(pl, "expert cache: map, slot table, counts, views", TS_MEM_EXPERT_CACHE, TS_DOM_HOST, 1, 0, 0, 1, tables);
        if (tier.n_slots) { /* --expert-host-cache: the pinned host tier */
            snprintf(what, sizeof what, "expert host tier: %d slots of %.2f MiB (pinned)", tier.n_slots,
                     (double)tier.slot_bytes / (1 << 20));
            add(pl, what, TS_MEM_EXPERT_CACHE, TS_DOM_HOST, 1, 0, 1, (uint64_t)tier.n_slots, tier.slots);
            add(pl, "expert host tier: slot table, counts", TS_MEM_EXPERT_CACHE, TS_DOM_HOST, 1, 0, 0, 1, tier.tables);
            if (tier.swap_bytes) /* exclusive: the exchange's scratch slots */
                add(pl, "expert host tier: exclusive, the I/O threads' device scratch slots", TS_MEM_EXPERT_CACHE, be->dom, 1, 0, 1,
                    (uint64_t)xp.n_io, tier.swap_bytes);
        }
        pl->expert_slots = n_slots;
        pl->expert_slot_bytes = slot_bytes;
        pl->expert_io_threads = xp.n_io;
        for (int i = 0; i < st->n_tensors; i++)
            if (strstr(st->tensors[i].name, ".mlp.experts.")) pl->expert_file_bytes += st->tensors[i].nbytes;
        pl->mapped_kept_bytes -= pl->expert_file_bytes;
    }

    /* the DFlash drafter, when the session drafts with it: its binder run dry */
    ts_dflash_cfg dcfg, *dc = NULL;
    if (sp && sp->dflash_block) {
        char dd[4096];
        ts_dflash_dir(dir, ddir, dd, sizeof dd);
        ts_dflash *none = NULL;
        if ((rc = ts_dflash_config_load(dd, c, &dcfg, err)) ||
            (rc = ts_dflash_open(dd, c, be, 1, from_drafter, pl, &none, err))) {
            ts_backend_free(be);
            return rc;
        }
        dc = &dcfg;
    }
    ts_sess_plan s;
    ts_session_params spa;
    if (sp) spa = *sp;
    else ts_session_params_default(&spa);
    if ((rc = ts_ahead_resolve(be, stream, 0, &spa, err)) || (rc = ts_sess_plan_make_df(c, has_mtp, dc, &spa, &s, err))) {
        ts_backend_free(be);
        return ts_fail_prefix(err, "%s", dir);
    }
    pl->n_ctx = s.p.n_ctx;
    pl->max_rows = s.p.max_rows;
    pl->spec_draft = s.p.spec_draft;
    pl->dflash_block = s.p.dflash_block;
    pl->ngram_draft = s.p.ngram_draft;
    pl->ahead = s.ahead;
    const uint64_t F = sizeof(float), L = (uint64_t)c->n_layers;
    const ts_mem_domain HOST = be->dom; /* the session's buffers live in the backend's domain */

    /* session (session.c allocates each buffer below from s) */
    int spec = s.Rv > 0, mspec = s.p.spec_draft > 0;
    uint64_t nf = s.n_full, ng = s.n_gdn;
#define S(name, cat, drafter, count, bytes) add(pl, name, cat, HOST, 0, drafter, 0, count, bytes)
    /* host objects whatever the backend */
    add(pl, "session object", TS_MEM_MISC, TS_DOM_HOST, 0, 0, 0, 1, sizeof(ts_session));
    add(pl, "per-layer state descriptors", TS_MEM_MISC, TS_DOM_HOST, 0, 0, 0, 2 * L, (sizeof(ts_kv) + sizeof(ts_gdn_state)) * L);
    const int pairs = spec || s.ahead; /* the descriptors hold the pairs' second buffers too */
    add(pl, "GDN tape descriptors", TS_MEM_MISC, TS_DOM_HOST, 0, spec, 0, pairs ? L : 0, pairs ? sizeof(ts_gdn_tape) * L : 0);
    S("KV cache (K and V, full-attention layers)", TS_MEM_KV, 0, 2 * nf, F * 2 * nf * s.kv_layer);
    S("GDN conv state", TS_MEM_GDN, 0, ng, F * ng * s.gdn_conv);
    S("GDN recurrent state", TS_MEM_GDN, 0, ng, F * ng * s.gdn_S);
    S("checkpoint: a saved copy of the GDN states", TS_MEM_GDN, 0, 1, F * s.ckpt);
    /* the MTP cache exists with params.mtp alone (ts_session_mtp); with
     * drafting it is part of the drafter */
    S("MTP KV cache", TS_MEM_MTP, mspec, 2, F * 2 * s.mtp_kv);
    S("MTP input/output hiddens", TS_MEM_MTP, 1, 1, F * s.mtp_hid);
    S("verify: GDN tape (qkv rows)", TS_MEM_SPEC, 1, ng, F * ng * s.tape_qkv);
    S("verify: GDN tape (a, b rows)", TS_MEM_SPEC, 1, 2 * ng, F * ng * 2 * s.tape_ab);
    S("verify: GDN block-start snapshots", TS_MEM_SPEC, 1, 2 * ng, F * ng * (s.snap_conv + s.snap_S));
    S("verify: logits of the block", TS_MEM_SPEC, 1, 1, F * s.vlogits);
    S("verify: GDN tape (prepared rows, two blocks)", TS_MEM_SPEC, 1, ng, F * ng * s.tape_prep);
    S("verify: prepared GDN rows of a pass", TS_MEM_SPEC, 1, 1, F * s.gdn_rows);
    S("run-ahead: the GDN state pairs' second buffers", TS_MEM_GDN, 0, 2 * ng, F * ng * (s.pair_conv + s.pair_S));
    S("run-ahead: two steps' logits and hidden", TS_MEM_SCRATCH, 0, 1, F * s.ahead_rows);
    /* host: the sampler's; MTP's or DFlash's drafts' rows, then the target row (n-gram drafts: that row alone) */
    add(pl, "draft distributions and the target row (sampling)", TS_MEM_SPEC, TS_DOM_HOST, 0, 1, 0, 1, F * s.dprobs);
    /* DFlash (session.c: ts_dflash_state and the taps) */
    const uint64_t dl = (uint64_t)s.df_layers;
    add(pl, "DFlash: per-layer layer descriptors of the context cache", TS_MEM_MISC, TS_DOM_HOST, 0, 1, 0, dl ? 1 : 0,
        dl * sizeof(ts_kv));
    S("DFlash: context K/V cache (every draft layer)", TS_MEM_SPEC, 1, 2 * dl, F * 2 * dl * s.df_kv);
    S("DFlash: target hidden-state taps of a pass", TS_MEM_SPEC, 1, 1, F * s.df_taps);
    S("DFlash: context features, block rows, scores", TS_MEM_SPEC, 1, 11,
      F * (s.df_feat + 3 * s.df_x + 2 * s.df_q + 2 * s.df_k + 2 * s.df_ffn + s.df_att));
    /* activations scale with the rows in flight: max_rows, or the verify
     * block when that is larger (the excess belongs to the drafter) */
    uint64_t rows = F * (s.x + s.u + s.t + s.hidden + s.big0 + s.big1 + s.big2 + s.small);
    uint64_t rows_chunk = rows / (uint64_t)s.R * (uint64_t)s.p.max_rows;
    S("activations (rows in flight)", TS_MEM_SCRATCH, 0, 8, rows_chunk);
    S("activations: verify rows beyond max_rows", TS_MEM_SCRATCH, 1, 8, rows - rows_chunk);
    S("attention scores (one row per query head)", TS_MEM_SCRATCH, 0, 1, F * (uint64_t)s.p.n_ctx * c->nq);
    S("attention scores, MTP rows past the context", TS_MEM_SCRATCH, mspec, 1, F * (uint64_t)(s.att_len - s.p.n_ctx) * c->nq);
    S("attention scores: the verify block's other rows", TS_MEM_SCRATCH, 1, 1,
      F * (uint64_t)s.att_len * c->nq * (uint64_t)(s.att_rows - 1));
    S("one-row buffers (conv row, MoE sums, logits, last hidden)", TS_MEM_SCRATCH, 0, 4,
      F * (s.rowtmp + s.moe_acc + s.logits + s.last_hidden));
    S("chunked prefill (conv rows, gates, delta-rule chunk)", TS_MEM_SCRATCH, 0, 3, F * (s.pf_conv + s.pf_gate + s.pf_chunk));
    if (stream) /* session.c: route_ids, route_w: host memory on every backend (the host reads them) */
        add(pl, "expert streaming: routing of a pass (ids, weights)", TS_MEM_SCRATCH, TS_DOM_HOST, 0, 0, 0, 2,
            2 * 4 * (uint64_t)s.R * c->topk);
#undef S
    /* the session's backend stream reserves its own workspace (sessions never
     * share one, so they never wait for each other's products) */
    size_t ws = be->ops->workspace_bytes(be, s.R, ts_plan_stream_cols(c, has_mtp, &s), c->q_bits ? c->q_group : 0),
           ws_base = ts_plan_workspace(be, c, has_mtp, s.p.max_rows);
    if (ws_base > ws) ws_base = ws;
    add(pl, "backend workspace (activations, dequant rows; per session)", TS_MEM_SCRATCH, HOST, 0, 0, 1, 1, ws_base);
    add(pl, "backend workspace: verify rows beyond max_rows", TS_MEM_SCRATCH, HOST, 0, 1, 1, 1, ws - ws_base);
    ts_backend_free(be);
    return 0;
}

int ts_mem_plan_dir(const char *dir, const ts_session_params *sp, ts_mem_plan *pl, ts_error *err) {
    return ts_mem_plan_dir_ex(dir, NULL, sp, pl, err);
}

int ts_mem_plan_dir_ex(const char *dir, const ts_engine_params *ep, const ts_session_params *sp, ts_mem_plan *pl,
                       ts_error *err) {
    memset(pl, 0, sizeof *pl);
    if (!dir || !*dir) return ts_fail(err, TS_E_ARG, "no model directory given");
    ts_config cfg;
    int rc = ts_config_load(dir, &cfg, err);
    if (rc) return rc;
    /* The tensor index, built exactly as ts_engine_open builds it. */
    heap_mark m0, m1;
    mark(&m0);
    ts_st_set *st = NULL;
    if ((rc = ts_st_open_dir(dir, &st, err))) return rc;
    mark(&m1);
    for (int k = 0; k < TS_MEM_N; k++) m1.at[k] -= m0.at[k];
    rc = plan_over(dir, &cfg, st, &m1, ep, sp, pl, err);
    ts_st_close(st);
    return rc;
}

int ts_mem_plan_shape(const char *shape_path, int bits, int group, const char *install_dir,
                      const ts_session_params *sp, ts_mem_plan *pl, ts_error *err) {
    return ts_mem_plan_shape_ex(shape_path, bits, group, install_dir, NULL, sp, pl, err);
}

/* The tensor set the install of a released size would have (synth's list,
 * opened as the loader opens the files); *index: the heap the set took. */
static int shape_set(const char *shape_path, int bits, int group, const char *dir, ts_config *cfg, ts_st_set **st,
                     heap_mark *index, ts_error *err) {
    *st = NULL;
    if (!shape_path || !*shape_path) return ts_fail(err, TS_E_ARG, "no shape file given");
    ts_stw_tensor *t = NULL;
    int n = 0, ns = 0;
    int rc = ts_synth_plan(shape_path, bits, group, cfg, &t, &n, &ns, err);
    if (rc) return rc;
    heap_mark m0;
    mark(&m0);
    rc = ts_st_open_planned(dir, t, n, ns, st, err);
    if (rc) ts_fail_prefix(err, "%s", shape_path);
    mark(index);
    for (int k = 0; k < TS_MEM_N; k++) index->at[k] -= m0.at[k];
    ts_free(t); /* after the mark: the list is the plan's, not the index's */
    return rc;
}

int ts_mem_plan_shape_ex(const char *shape_path, int bits, int group, const char *install_dir, const ts_engine_params *ep,
                         const ts_session_params *sp, ts_mem_plan *pl, ts_error *err) {
    memset(pl, 0, sizeof *pl);
    const char *dir = install_dir && *install_dir ? install_dir : "model";
    ts_config cfg;
    ts_st_set *st = NULL;
    heap_mark m1;
    int rc = shape_set(shape_path, bits, group, dir, &cfg, &st, &m1, err);
    if (!rc && (rc = plan_over(dir, &cfg, st, &m1, ep, sp, pl, err))) ts_fail_prefix(err, "%s", shape_path);
    ts_st_close(st);
    return rc;
}

/* ---- tensor parallelism: one rank's plan ---- */

/* rank `rank` of ep->gpus over the full tensor set `full` of config cfg */
static int plan_rank_over(const char *dir, const ts_config *cfg, const ts_st_set *full, const ts_engine_params *ep,
                          const ts_session_params *sp, int rank, ts_mem_plan *pl, ts_error *err) {
    const int N = ep->gpus;
    if (rank < 0 || rank >= N) return ts_fail(err, TS_E_ARG, "rank %d of %d GPUs", rank, N);
    if (ep->expert_cache || (sp && sp->dflash_block) || (sp && sp->ahead > 0))
        return ts_fail(err, TS_E_UNSUPPORTED, "--gpus %d with %s is not built", N,
                       ep->expert_cache ? "--expert-cache" : sp->dflash_block ? "DFlash drafting" : "run-ahead decoding");
    ts_st_set *st = NULL;
    ts_shard sh;
    ts_stw_tensor *t = NULL;
    int n = 0;
    uint64_t image = 0;
    int rc = ts_shard_make_opts(cfg, N, 1, &sh, err);
    if (!rc) rc = ts_shard_slice_list(&sh, rank, full, &t, &n, &image, err);
    /* the rank's model: its slices, bound (dry) at its local config, as
     * engine.c's open_tp binds them */
    heap_mark m0, m1;
    mark(&m0);
    if (!rc) rc = ts_st_open_planned(dir, t, n, 1, &st, err);
    mark(&m1);
    for (int k = 0; k < TS_MEM_N; k++) m1.at[k] -= m0.at[k];
    ts_free(t);
    ts_config lc;
    ts_shard_local_config(&sh, rank, &lc);
    /* tensor parallelism never runs ahead (ts_ahead_resolve): the ranks'
     * sessions resolve it off, whatever TS_AHEAD says */
    ts_session_params spr;
    if (sp) spr = *sp;
    else ts_session_params_default(&spr);
    spr.ahead = -1;
    sp = &spr;
    ts_engine_params one = *ep;
    one.gpus = 0;
    one.n_threads = ts_tp_rank_threads(ep, N); /* engine.c open_tp: CPU ranks share the threads */
    if (!rc) rc = plan_over(dir, &lc, st, &m1, &one, sp, pl, err);
    const int has_mtp = st && ts_st_find(st, "mtp.fc.weight") != NULL;
    ts_st_close(st);
    if (rc) return ts_fail_prefix(err, "--gpus %d, rank %d", N, rank);
    pl->mapped_bytes = pl->mapped_kept_bytes = 0; /* a rank reads its image, not the files */
    ts_sess_plan s;
    if ((rc = ts_sess_plan_make(&lc, has_mtp, sp, &s, err))) return rc;
    const int cuda = ep->backend && !strcmp(ep->backend, "cuda");
    const ts_mem_domain dom = cuda ? TS_DOM_DEVICE : TS_DOM_HOST;
    const int nccl = ts_tp_nccl(cuda, N);
    const uint64_t F = sizeof(float);
    /* engine.c open_tp: the image the rank's weights are bound from (kept
     * on the CPU, which reads them in place; freed once uploaded to a GPU) */
    if (!cuda) add(pl, "TP: the rank's slices of the install (host image)", TS_MEM_WEIGHTS, TS_DOM_HOST, 1, 0, 0, 1, image);
    /* session.c: the head's rows of a pass on this rank */
    add(pl, "TP: the rank's head rows of a pass", TS_MEM_SCRATCH, dom, 0, 0, 0, 1,
        F * (uint64_t)s.R * (uint64_t)lc.head_rows);
    /* cuda/comm.cu n_reserve: every rank's partials; rank 0 the head pieces */
    if (nccl) {
        add(pl, "TP collectives (NCCL): every rank's partial sums", TS_MEM_SCRATCH, TS_DOM_DEVICE, 0, 0, 0, 1,
            F * (uint64_t)N * (uint64_t)s.R * (uint64_t)cfg->H);
        if (rank == 0)
            add(pl, "TP collectives (NCCL): the other ranks' head rows", TS_MEM_SCRATCH, TS_DOM_DEVICE, 0, 0, 0, 1,
                F * (uint64_t)s.R * (uint64_t)cfg->vocab);
    }
    return 0;
}

int ts_mem_plan_rank(const char *dir, const ts_engine_params *ep, const ts_session_params *sp, int rank, ts_mem_plan *pl,
                     ts_error *err) {
    if (!ts_tp_ranks(ep)) {
        if (rank) return ts_fail(err, TS_E_ARG, "rank %d of one GPU", rank);
        return ts_mem_plan_dir_ex(dir, ep, sp, pl, err);
    }
    memset(pl, 0, sizeof *pl);
    if (!dir || !*dir) return ts_fail(err, TS_E_ARG, "no model directory given");
    ts_config cfg;
    int rc = ts_config_load(dir, &cfg, err);
    if (rc) return rc;
    ts_st_set *full = NULL;
    if ((rc = ts_st_open_dir(dir, &full, err))) return rc;
    rc = plan_rank_over(dir, &cfg, full, ep, sp, rank, pl, err);
    ts_st_close(full);
    return rc;
}

int ts_mem_plan_shape_rank(const char *shape_path, int bits, int group, const char *install_dir,
                           const ts_engine_params *ep, const ts_session_params *sp, int rank, ts_mem_plan *pl,
                           ts_error *err) {
    if (!ts_tp_ranks(ep)) {
        if (rank) return ts_fail(err, TS_E_ARG, "rank %d of one GPU", rank);
        return ts_mem_plan_shape_ex(shape_path, bits, group, install_dir, ep, sp, pl, err);
    }
    memset(pl, 0, sizeof *pl);
    const char *dir = install_dir && *install_dir ? install_dir : "model";
    ts_config cfg;
    ts_st_set *full = NULL;
    heap_mark m1;
    int rc = shape_set(shape_path, bits, group, dir, &cfg, &full, &m1, err);
    if (!rc && (rc = plan_rank_over(dir, &cfg, full, ep, sp, rank, pl, err))) ts_fail_prefix(err, "%s", shape_path);
    ts_st_close(full);
    return rc;
}
