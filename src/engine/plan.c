/* plan.c: the memory plan (design.md "Memory plan").
 *
 * Owns: ts_sess_plan_make (the size of every session buffer, used by
 * session.c to allocate) and ts_mem_plan_dir (the public plan: engine heap +
 * session buffers + mapped weights, by category, for `turbospark plan`).
 * Does not own: any allocation of the running engine.
 *
 * Inputs are config.json and the safetensors headers, nothing else: the
 * headers decide whether the checkpoint carries mtp.* (config.json's
 * mtp_num_hidden_layers is a declaration, the tensors are the fact) and
 * size the tensor index the loader keeps. The index is the one engine
 * allocation that depends on the file contents rather than the config (the
 * names of the tensors), so the plan measures it by building the index
 * itself (headers only, no tensor data is touched) instead of guessing.
 *
 * Invariant checked by tests/test_plan.c: after ts_engine_open +
 * ts_session_new with the same parameters, ts_mem_used(cat) equals
 * cat_bytes[cat] for every category, and spec_draft > 0 adds exactly
 * drafter_bytes.
 */
#include <stdio.h>

#include "engine/engine.h"
#include "loader/safetensors.h"
#include "engine/plan.h"

int ts_sess_plan_make(const ts_config *c, int has_mtp, const ts_session_params *p, ts_sess_plan *o, ts_error *err) {
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
    if (sp.checkpoint != 0 && sp.checkpoint != 1)
        return ts_fail(err, TS_E_ARG, "checkpoint %d: use 0 or 1", sp.checkpoint);
    if (sp.mtp && !has_mtp)
        return ts_fail(err, TS_E_UNSUPPORTED, "the checkpoint has no MTP head (no mtp.* tensors)%s",
                       sp.spec_draft ? ": MTP drafting is not possible" : "");
    o->p = sp;
    const size_t H = c->H, D = c->head_dim, kvdim = (size_t)c->nkv * D, qdim = (size_t)c->nq * D;
    const size_t Kd = (size_t)c->Hk * c->dk, Vd = (size_t)c->Hv * c->dv, C = 2 * Kd + Vd;
    const size_t max_ffn = c->is_moe ? (size_t)TS_MAX(c->Im, c->Is) : (size_t)c->I;
    o->Rv = sp.spec_draft ? sp.spec_draft + 1 : 0;
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
    size_t b1 = TS_MAX(TS_MAX(Vd, kvdim), max_ffn);
    o->x = o->u = o->t = o->hidden = R * H;
    o->big0 = R * b0;
    o->big1 = R * b1;
    o->big2 = R * TS_MAX(b1, qdim);
    o->small = R * (2 * (size_t)c->Hv + (size_t)c->E);
    /* one row of scores per query head (heads run in parallel) and per row of
     * a verify block (its rows share each read of the KV cache) */
    o->att_rows = sp.spec_draft ? o->Rv : 1;
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
    if (sp.spec_draft) {
        o->mtp_hid = R * H;
        o->tape_qkv = (size_t)o->Rv * C;
        o->tape_ab = (size_t)o->Rv * c->Hv;
        o->snap_conv = o->gdn_conv;
        o->snap_S = o->gdn_S;
        o->tape_prep = 2 * (size_t)o->Rv * C;
        o->gdn_rows = o->n_gdn ? (size_t)o->Rv * C : 0;
        o->vlogits = (size_t)o->Rv * c->vocab;
        o->dprobs = (size_t)sp.spec_draft * c->vocab;
    }
    return 0;
}

/* ---- the public plan ---- */

static void add(ts_mem_plan *pl, const char *name, int cat, int engine, int drafter, uint64_t count, uint64_t bytes) {
    if (!bytes) return;
    pl->cat_bytes[cat] += bytes;
    if (engine) pl->engine_bytes += bytes;
    else pl->session_bytes += bytes;
    pl->total_bytes += bytes;
    if (drafter) pl->drafter_bytes += bytes;
    if (pl->n_items >= (int)(sizeof pl->items / sizeof pl->items[0])) return;
    ts_mem_plan_item *it = &pl->items[pl->n_items++];
    snprintf(it->name, sizeof it->name, "%s", name);
    it->cat = cat;
    it->engine = engine;
    it->drafter = drafter;
    it->count = count;
    it->bytes = bytes;
}

int64_t ts_plan_max_cols(const ts_config *c, int has_mtp) {
    int64_t m = c->H;
    int64_t cand[] = {c->I, c->Im, c->Is, (int64_t)c->Hv * c->dv, (int64_t)c->nq * c->head_dim,
                      has_mtp ? 2 * (int64_t)c->H : 0};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) m = cand[i] > m ? cand[i] : m;
    return m;
}

const char *ts_mem_cat_label(int cat) { return ts_mem_cat_name((ts_mem_cat)cat); }

int ts_mem_plan_dir(const char *dir, const ts_session_params *sp, ts_mem_plan *pl, ts_error *err) {
    memset(pl, 0, sizeof *pl);
    if (!dir || !*dir) return ts_fail(err, TS_E_ARG, "no model directory given");
    ts_config cfg;
    int rc = ts_config_load(dir, &cfg, err);
    if (rc) return rc;
    const ts_config *c = &cfg;
    /* The tensor index, built exactly as ts_engine_open builds it. */
    size_t misc0 = ts_mem_used(TS_MEM_MISC);
    ts_st_set *st = NULL;
    if ((rc = ts_st_open_dir(dir, &st, err))) return rc;
    size_t index_bytes = ts_mem_used(TS_MEM_MISC) - misc0;
    /* the backend a default engine opens answers its own sizes (prepared
     * weights, stream workspace); nothing runs on it */
    ts_backend *be = NULL;
    if ((rc = ts_cpu_backend_new(NULL, &be, err))) { ts_st_close(st); return rc; }
    int has_mtp = ts_st_find(st, "mtp.fc.weight") != NULL;
    uint64_t packed = 0; /* load-time repacking of quantized matrices (model/load.c pack_all) */
    for (int i = 0; i < st->n_tensors; i++) {
        const ts_st_tensor *t = &st->tensors[i];
        if (!strncmp(t->name, "model.visual.", 13)) continue;
        pl->mapped_bytes += t->nbytes;
        size_t l = strlen(t->name);
        if (t->dtype != TS_DTYPE_U32 || !c->q_bits || l < 7 || strcmp(t->name + l - 7, ".weight") || t->n_dims < 2) continue;
        if (!c->tied && l >= 19 && !strcmp(t->name + l - 19, "embed_tokens.weight")) continue; /* gathered in place */
        char sn[600];
        snprintf(sn, sizeof sn, "%.*s.scales", (int)(l - 7), t->name);
        const ts_st_tensor *sc = ts_st_find(st, sn);
        if (!sc) continue;
        int64_t nmat = t->n_dims == 3 ? t->shape[0] : 1, rows = t->shape[t->n_dims - 2];
        int64_t cols = t->shape[t->n_dims - 1] * 32 / c->q_bits;
        ts_weight w = {TS_DTYPE_U32, c->q_bits, c->q_group, rows, cols, NULL, NULL, NULL, sc->dtype, NULL, 0};
        packed += (uint64_t)nmat * be->ops->weight_bytes(be, &w);
    }
    ts_st_close(st);

    ts_sess_plan s;
    if ((rc = ts_sess_plan_make(c, has_mtp, sp, &s, err))) { ts_backend_free(be); return ts_fail_prefix(err, "%s", dir); }
    pl->n_ctx = s.p.n_ctx;
    pl->max_rows = s.p.max_rows;
    pl->spec_draft = s.p.spec_draft;
    const uint64_t F = sizeof(float), L = (uint64_t)c->n_layers, H = c->H, D = c->head_dim;
    const uint64_t C = 2 * (uint64_t)c->Hk * c->dk + (uint64_t)c->Hv * c->dv;

    /* engine: objects and the index (misc), f32 vectors converted at bind time (weights) */
    add(pl, "engine object", TS_MEM_MISC, 1, 0, 1, sizeof(ts_engine) + strlen(dir) + 1);
    add(pl, "tensor index (names, shapes, hash)", TS_MEM_MISC, 1, 0, 1, index_bytes);
    add(pl, "layer descriptors", TS_MEM_MISC, 1, 0, L, sizeof(ts_layer_w) * L);
    if (c->is_moe) {
        uint64_t n = L + (has_mtp ? 1 : 0);
        add(pl, "expert views", TS_MEM_MISC, 1, 0, n, n * sizeof(ts_weight) * 3 * (uint64_t)c->E);
    }
    uint64_t nf = s.n_full, ng = s.n_gdn;
    add(pl, "norms (f32, 1 + w)", TS_MEM_WEIGHTS, 1, 0, 2 * L + 1, F * (2 * L + 1) * H);
    add(pl, "q/k norms (f32)", TS_MEM_WEIGHTS, 1, 0, 2 * nf, F * 2 * nf * D);
    add(pl, "GDN conv, A, dt_bias, norm (f32)", TS_MEM_WEIGHTS, 1, 0, 4 * ng,
        F * ng * (C * (uint64_t)c->conv_k + 2 * (uint64_t)c->Hv + (uint64_t)c->dv));
    if (has_mtp) add(pl, "MTP norms (f32)", TS_MEM_WEIGHTS, 1, 0, 7, F * (5 * H + 2 * D));
    if (packed) add(pl, "quantized matrices repacked for the kernels", TS_MEM_WEIGHTS, 1, 0, 1, packed);

    /* session */
    int spec = s.p.spec_draft > 0;
    add(pl, "session object", TS_MEM_MISC, 0, 0, 1, sizeof(ts_session));
    add(pl, "per-layer state descriptors", TS_MEM_MISC, 0, 0, 2 * L, (sizeof(ts_kv) + sizeof(ts_gdn_state)) * L);
    add(pl, "GDN tape descriptors", TS_MEM_MISC, 0, 1, spec ? L : 0, spec ? sizeof(ts_gdn_tape) * L : 0);
    add(pl, "KV cache (K and V, full-attention layers)", TS_MEM_KV, 0, 0, 2 * nf, F * 2 * nf * s.kv_layer);
    add(pl, "GDN conv state", TS_MEM_GDN, 0, 0, ng, F * ng * s.gdn_conv);
    add(pl, "GDN recurrent state", TS_MEM_GDN, 0, 0, ng, F * ng * s.gdn_S);
    add(pl, "checkpoint: a saved copy of the GDN states", TS_MEM_GDN, 0, 0, 1, F * s.ckpt);
    /* the MTP cache exists with params.mtp alone (ts_session_mtp); with
     * drafting it is part of the drafter */
    add(pl, "MTP KV cache", TS_MEM_MTP, 0, spec, 2, F * 2 * s.mtp_kv);
    add(pl, "MTP input/output hiddens", TS_MEM_MTP, 0, 1, 1, F * s.mtp_hid);
    add(pl, "verify: GDN tape (qkv rows)", TS_MEM_SPEC, 0, 1, ng, F * ng * s.tape_qkv);
    add(pl, "verify: GDN tape (a, b rows)", TS_MEM_SPEC, 0, 1, 2 * ng, F * ng * 2 * s.tape_ab);
    add(pl, "verify: GDN block-start snapshots", TS_MEM_SPEC, 0, 1, 2 * ng, F * ng * (s.snap_conv + s.snap_S));
    add(pl, "verify: logits of the block", TS_MEM_SPEC, 0, 1, 1, F * s.vlogits);
    add(pl, "verify: GDN tape (prepared rows, two blocks)", TS_MEM_SPEC, 0, 1, ng, F * ng * s.tape_prep);
    add(pl, "verify: prepared GDN rows of a pass", TS_MEM_SPEC, 0, 1, 1, F * s.gdn_rows);
    add(pl, "draft distributions", TS_MEM_SPEC, 0, 1, 1, F * s.dprobs);
    /* activations scale with the rows in flight: max_rows, or the verify
     * block when that is larger (the excess belongs to the drafter) */
    uint64_t rows = F * (s.x + s.u + s.t + s.hidden + s.big0 + s.big1 + s.big2 + s.small);
    uint64_t rows_chunk = rows / (uint64_t)s.R * (uint64_t)s.p.max_rows;
    add(pl, "activations (rows in flight)", TS_MEM_SCRATCH, 0, 0, 8, rows_chunk);
    add(pl, "activations: verify rows beyond max_rows", TS_MEM_SCRATCH, 0, 1, 8, rows - rows_chunk);
    add(pl, "attention scores (one row per query head)", TS_MEM_SCRATCH, 0, 0, 1, F * (uint64_t)s.p.n_ctx * c->nq);
    add(pl, "attention scores, MTP rows past the context", TS_MEM_SCRATCH, 0, spec, 1,
        F * (uint64_t)(s.att_len - s.p.n_ctx) * c->nq);
    add(pl, "attention scores: the verify block's other rows", TS_MEM_SCRATCH, 0, 1, 1,
        F * (uint64_t)s.att_len * c->nq * (uint64_t)(s.att_rows - 1));
    add(pl, "one-row buffers (conv row, MoE sums, logits, last hidden)", TS_MEM_SCRATCH, 0, 0, 4,
        F * (s.rowtmp + s.moe_acc + s.logits + s.last_hidden));
    add(pl, "chunked prefill (conv rows, gates, delta-rule chunk)", TS_MEM_SCRATCH, 0, 0, 3,
        F * (s.pf_conv + s.pf_gate + s.pf_chunk));
    /* the session's backend stream reserves its own workspace (the backend's
     * answer, for a stream of R rows) */
    {
        int64_t mc = ts_plan_max_cols(c, has_mtp);
        int grp = c->q_bits ? c->q_group : 0;
        size_t ws = be->ops->workspace_bytes(be, s.R, mc, grp), ws_base = be->ops->workspace_bytes(be, s.p.max_rows, mc, grp);
        if (ws_base > ws) ws_base = ws;
        add(pl, "kernel workspace (activations, dequant rows; per session)", TS_MEM_SCRATCH, 0, 0, 1, ws_base);
        add(pl, "kernel workspace: verify rows beyond max_rows", TS_MEM_SCRATCH, 0, 1, 1, ws - ws_base);
    }
    ts_backend_free(be);
    return 0;
}
