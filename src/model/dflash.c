/* dflash.c: the DFlash drafter's config, binding and forward (dflash.h).
 *
 * Config (config.json as z-lab releases it): "architectures" holds
 * "DFlashDraftModel"; Qwen3 fields hidden_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
 * vocab_size, rms_norm_eps, rope_theta (or rope_parameters.rope_theta),
 * partial_rotary_factor; block_size (top level or in dflash_config);
 * dflash_config.mask_token_id (required: the block's mask embedding is that
 * row of the target's table); dflash_config.target_layer_ids, else the
 * reference's rule over num_target_layers (one draft layer: the middle
 * layer; n: evenly from layer 1 to L-3, rounded half to even as Python's
 * round); an MLX-style "quantization" for an INT4/INT8 install. Sliding
 * window layers and causal drafters are refused (no released drafter of a
 * Qwen3.5 target uses them).
 *
 * Tensors (no prefix, or "model."): fc.weight [H, n_taps*H],
 * hidden_norm.weight, norm.weight [H], layers.N.{input_layernorm,
 * post_attention_layernorm}.weight [H], layers.N.self_attn.{q,k,v,o}_proj
 * .weight, layers.N.self_attn.{q,k}_norm.weight [D],
 * layers.N.mlp.{gate,up,down}_proj.weight. Bound with load.c's binder (the
 * same shape/dtype checks and errors naming the tensor).
 */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/bind.h"
#include "model/dflash.h"

/* ---- config ---- */

static cJSON *field(cJSON *top, cJSON *dc, const char *k) {
    cJSON *v = dc ? cJSON_GetObjectItemCaseSensitive(dc, k) : NULL;
    return v && !cJSON_IsNull(v) ? v : cJSON_GetObjectItemCaseSensitive(top, k);
}

static int int_field(cJSON *top, cJSON *dc, const char *k, int def, int required, int *out, const char *what,
                     ts_error *err) {
    cJSON *v = field(top, dc, k);
    if (!v || cJSON_IsNull(v)) {
        if (required) return ts_fail(err, TS_E_FORMAT, "%s: required field \"%s\" is missing", what, k);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !(v->valuedouble >= 0) ||
        v->valuedouble > (1 << 24))
        return ts_fail(err, TS_E_FORMAT, "%s: field \"%s\" must be an integer in [0, %d]", what, k, 1 << 24);
    *out = (int)v->valuedouble;
    return 0;
}

static double num_field(cJSON *o, const char *k, double def) {
    cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return v && cJSON_IsNumber(v) ? v->valuedouble : def;
}

static int parse(cJSON *top, const char *what, const ts_config *tg, ts_dflash_cfg *c, ts_error *err) {
    memset(c, 0, sizeof *c);
    cJSON *arch = cJSON_GetObjectItemCaseSensitive(top, "architectures"), *it;
    int is_df = 0;
    cJSON_ArrayForEach(it, arch) if (cJSON_IsString(it) && !strcmp(it->valuestring, "DFlashDraftModel")) is_df = 1;
    if (!is_df)
        return ts_fail(err, TS_E_FORMAT, "%s: not a DFlash drafter (\"architectures\" lacks \"DFlashDraftModel\")", what);
    cJSON *dc = cJSON_GetObjectItemCaseSensitive(top, "dflash_config");
    if (!cJSON_IsObject(dc)) return ts_fail(err, TS_E_FORMAT, "%s: required object \"dflash_config\" is missing", what);
    int rc = 0;
    rc = rc ? rc : int_field(top, NULL, "hidden_size", 0, 1, &c->H, what, err);
    rc = rc ? rc : int_field(top, NULL, "num_hidden_layers", 0, 1, &c->n_layers, what, err);
    rc = rc ? rc : int_field(top, NULL, "num_attention_heads", 0, 1, &c->nq, what, err);
    rc = rc ? rc : int_field(top, NULL, "num_key_value_heads", c->nq, 0, &c->nkv, what, err);
    rc = rc ? rc : int_field(top, NULL, "head_dim", c->nq ? c->H / c->nq : 0, 0, &c->D, what, err);
    rc = rc ? rc : int_field(top, NULL, "intermediate_size", 0, 1, &c->I, what, err);
    rc = rc ? rc : int_field(top, NULL, "vocab_size", 0, 1, &c->vocab, what, err);
    rc = rc ? rc : int_field(top, dc, "block_size", 16, 0, &c->block, what, err);
    rc = rc ? rc : int_field(dc, NULL, "mask_token_id", 0, 1, &c->mask_id, what, err);
    rc = rc ? rc : int_field(top, NULL, "num_target_layers", tg ? tg->n_layers : 0, !tg, &c->n_target_layers, what, err);
    if (rc) return rc;
    if (!c->H || !c->n_layers || !c->nq || !c->nkv || !c->D || !c->I || !c->vocab || c->nq % c->nkv)
        return ts_fail(err, TS_E_FORMAT, "%s: sizes must be positive and num_attention_heads a multiple of num_key_value_heads", what);
    /* the binder's and the forward's int products (nq*D rows, n_taps*H columns) stay far from overflow */
    if ((int64_t)c->nq * c->D > (1 << 28))
        return ts_fail(err, TS_E_FORMAT, "%s: num_attention_heads * head_dim = %lld is more than %d", what,
                       (long long)c->nq * c->D, 1 << 28);
    if (c->block < 2)
        return ts_fail(err, TS_E_FORMAT, "%s: block_size %d: a block drafts at least 2 rows", what, c->block);
    if (c->n_layers > TS_DFLASH_MAX_LAYERS)
        return ts_fail(err, TS_E_FORMAT, "%s: %d layers (at most %d)", what, c->n_layers, TS_DFLASH_MAX_LAYERS);
    cJSON *rp = cJSON_GetObjectItemCaseSensitive(top, "rope_parameters");
    c->theta = num_field(rp, "rope_theta", num_field(top, "rope_theta", 1e6));
    if (!(c->theta > 0) || !isfinite(c->theta))
        return ts_fail(err, TS_E_FORMAT, "%s: rope_theta %g must be a positive number", what, c->theta);
    double prf = num_field(rp, "partial_rotary_factor", num_field(top, "partial_rotary_factor", 1.0));
    if (!(prf > 0 && prf <= 1)) /* before the cast: a huge or NaN factor is an undefined conversion */
        return ts_fail(err, TS_E_FORMAT, "%s: partial_rotary_factor %g must be in (0, 1]", what, prf);
    c->rot = (int)(c->D * prf);
    if (c->rot < 2 || c->rot > c->D || c->rot % 2)
        return ts_fail(err, TS_E_FORMAT, "%s: partial_rotary_factor %g gives %d rotary dims of %d", what, prf, c->rot, c->D);
    double eps = num_field(top, "rms_norm_eps", 1e-6);
    if (!(eps >= FLT_MIN && eps < 1)) /* a float, and a norm's epsilon: 1e300 or 1e-300 would not be */
        return ts_fail(err, TS_E_FORMAT, "%s: rms_norm_eps %g must be in [%g, 1)", what, eps, (double)FLT_MIN);
    c->eps = (float)eps;
    cJSON *lt = cJSON_GetObjectItemCaseSensitive(top, "layer_types");
    cJSON_ArrayForEach(it, lt) if (!cJSON_IsString(it) || strcmp(it->valuestring, "full_attention"))
        return ts_fail(err, TS_E_UNSUPPORTED, "%s: layer type \"%s\": only full_attention draft layers are supported", what,
                       cJSON_IsString(it) ? it->valuestring : "?");
    cJSON *ic = cJSON_GetObjectItemCaseSensitive(top, "is_causal");
    if (cJSON_IsTrue(ic)) return ts_fail(err, TS_E_UNSUPPORTED, "%s: a causal drafter (is_causal true) is not DFlash's block drafting", what);
    /* taps */
    cJSON *tl = cJSON_GetObjectItemCaseSensitive(dc, "target_layer_ids");
    if (!tl) tl = cJSON_GetObjectItemCaseSensitive(top, "target_layer_ids");
    if (tl) {
        if (!cJSON_IsArray(tl) || !cJSON_GetArraySize(tl))
            return ts_fail(err, TS_E_FORMAT, "%s: \"target_layer_ids\" must be a non-empty list of layer indices", what);
        cJSON_ArrayForEach(it, tl) {
            if (c->n_taps == TS_DFLASH_MAX_TAPS)
                return ts_fail(err, TS_E_FORMAT, "%s: more than %d target_layer_ids", what, TS_DFLASH_MAX_TAPS);
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 0 || it->valuedouble > 1e6)
                return ts_fail(err, TS_E_FORMAT, "%s: \"target_layer_ids\" holds a non-index", what);
            c->taps[c->n_taps++] = (int)it->valuedouble;
        }
    } else if (c->n_layers == 1) {
        c->taps[c->n_taps++] = c->n_target_layers / 2;
    } else {
        if (c->n_layers > TS_DFLASH_MAX_TAPS)
            return ts_fail(err, TS_E_FORMAT, "%s: no target_layer_ids and more than %d layers", what, TS_DFLASH_MAX_TAPS);
        if (c->n_target_layers < 4) /* the rule spans layers 1 .. L-3 */
            return ts_fail(err, TS_E_FORMAT, "%s: no target_layer_ids and a target of %d layers: the default taps need at least 4",
                           what, c->n_target_layers);
        const double span = c->n_target_layers - 3 - 1;
        for (int i = 0; i < c->n_layers; i++) c->taps[c->n_taps++] = (int)nearbyint(1 + i * span / (c->n_layers - 1));
    }
    for (int t = 0; t < c->n_taps; t++)
        if (c->taps[t] >= c->n_target_layers)
            return ts_fail(err, TS_E_FORMAT, "%s: target layer %d (target_layer_ids) is past num_target_layers %d", what,
                           c->taps[t], c->n_target_layers);
    if ((int64_t)c->n_taps * c->H > (1 << 28))
        return ts_fail(err, TS_E_FORMAT, "%s: %d taps of hidden size %d: fc's %lld columns are more than %d", what, c->n_taps,
                       c->H, (long long)c->n_taps * c->H, 1 << 28);
    cJSON *q = cJSON_GetObjectItemCaseSensitive(top, "quantization");
    if (!q) q = cJSON_GetObjectItemCaseSensitive(top, "quantization_config");
    if (q) {
        /* compared as numbers before the casts (1e300 bits is an undefined conversion) */
        double bits = num_field(q, "bits", 0), group = num_field(q, "group_size", 64);
        if ((bits != 4 && bits != 8) || !(group >= 8 && group <= (1 << 24)) || group != floor(group))
            return ts_fail(err, TS_E_FORMAT, "%s: quantization of %g bits in groups of %g is not supported", what, bits, group);
        c->q_bits = (int)bits;
        c->q_group = (int)group;
        if (tg && tg->q_bits && c->q_group != tg->q_group)
            return ts_fail(err, TS_E_MODEL, "%s: the drafter's quantization group %d differs from the target's %d", what,
                           c->q_group, tg->q_group);
    }
    if (!tg) { /* convert: the drafter alone (against a target, its vocabulary is checked below) */
        if (c->mask_id >= c->vocab)
            return ts_fail(err, TS_E_FORMAT, "%s: mask_token_id %d is outside the vocabulary [0, %d)", what, c->mask_id, c->vocab);
        return 0;
    }
    /* against the target */
    if (c->H != tg->H)
        return ts_fail(err, TS_E_MODEL, "%s: the drafter's hidden size %d does not match the target's %d", what, c->H, tg->H);
    if (c->vocab != tg->vocab)
        return ts_fail(err, TS_E_MODEL, "%s: the drafter's vocabulary of %d ids does not match the target's %d", what, c->vocab,
                       tg->vocab);
    if (c->n_target_layers != tg->n_layers)
        return ts_fail(err, TS_E_MODEL, "%s: the drafter was made for a target of %d layers, this one has %d", what,
                       c->n_target_layers, tg->n_layers);
    if (c->mask_id >= tg->vocab)
        return ts_fail(err, TS_E_MODEL, "%s: mask_token_id %d is outside the target's vocabulary [0, %d)", what, c->mask_id, tg->vocab);
    for (int t = 0; t < c->n_taps; t++)
        if (c->taps[t] >= tg->n_layers)
            return ts_fail(err, TS_E_MODEL, "%s: target layer %d (target_layer_ids) does not exist: the target has %d layers", what,
                           c->taps[t], tg->n_layers);
    return 0;
}

int ts_dflash_config_parse(const char *txt, const char *what, const ts_config *target, ts_dflash_cfg *c, ts_error *err) {
    cJSON *top = cJSON_Parse(txt);
    if (!top || !cJSON_IsObject(top)) {
        cJSON_Delete(top);
        return ts_fail(err, TS_E_FORMAT, "%s: not a JSON object (malformed JSON)", what);
    }
    int rc = parse(top, what, target, c, err);
    cJSON_Delete(top);
    return rc;
}

int ts_dflash_config_load(const char *dir, const ts_config *target, ts_dflash_cfg *c, ts_error *err) {
    char path[4096];
    char *txt = NULL;
    ts_path_join(path, sizeof path, dir, "config.json");
    if (!ts_file_exists(path))
        return ts_fail(err, TS_E_IO, "no DFlash drafter: %s does not exist (a drafter directory holds its config.json and safetensors)",
                       path);
    int rc = ts_read_file(path, &txt, NULL, err);
    if (rc) return rc;
    rc = ts_dflash_config_parse(txt, path, target, c, err);
    ts_free(txt);
    return rc;
}

void ts_dflash_dir(const char *dir, const char *drafter_dir, char *out, size_t cap) {
    if (drafter_dir && *drafter_dir) snprintf(out, cap, "%s", drafter_dir);
    else ts_path_join(out, cap, dir, "dflash");
}

int ts_dflash_is_dir(const char *dir) {
    char path[4096];
    char *txt = NULL;
    ts_path_join(path, sizeof path, dir, "config.json");
    if (!ts_file_exists(path) || ts_read_file(path, &txt, NULL, NULL)) return 0;
    int is = strstr(txt, "\"DFlashDraftModel\"") != NULL;
    ts_free(txt);
    return is;
}

int64_t ts_dflash_max_cols(const ts_dflash_cfg *c) {
    int64_t m = (int64_t)c->n_taps * c->H;
    if (c->I > m) m = c->I;
    if ((int64_t)c->nq * c->D > m) m = (int64_t)c->nq * c->D;
    return m;
}

/* ---- binding ---- */

#define NAME(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

static int bind_layer(binder *b, const ts_dflash_cfg *c, const char *p, ts_dflash_layer *l) {
    const int64_t H = c->H, qd = (int64_t)c->nq * c->D, kd = (int64_t)c->nkv * c->D;
    char n[512];
    int rc;
    NAME(n, "%sinput_layernorm.weight", p);
    if ((rc = ts_bind_vec(b, n, H, 0, &l->in_norm))) return rc;
    NAME(n, "%spost_attention_layernorm.weight", p);
    if ((rc = ts_bind_vec(b, n, H, 0, &l->post_norm))) return rc;
    NAME(n, "%sself_attn.q_proj.weight", p);
    if ((rc = ts_bind_mat(b, n, qd, H, &l->q_proj))) return rc;
    NAME(n, "%sself_attn.k_proj.weight", p);
    if ((rc = ts_bind_mat(b, n, kd, H, &l->k_proj))) return rc;
    NAME(n, "%sself_attn.v_proj.weight", p);
    if ((rc = ts_bind_mat(b, n, kd, H, &l->v_proj))) return rc;
    NAME(n, "%sself_attn.o_proj.weight", p);
    if ((rc = ts_bind_mat(b, n, H, qd, &l->o_proj))) return rc;
    NAME(n, "%sself_attn.q_norm.weight", p);
    if ((rc = ts_bind_vec(b, n, c->D, 0, &l->q_norm))) return rc;
    NAME(n, "%sself_attn.k_norm.weight", p);
    if ((rc = ts_bind_vec(b, n, c->D, 0, &l->k_norm))) return rc;
    NAME(n, "%smlp.gate_proj.weight", p);
    if ((rc = ts_bind_mat(b, n, c->I, H, &l->gate))) return rc;
    NAME(n, "%smlp.up_proj.weight", p);
    if ((rc = ts_bind_mat(b, n, c->I, H, &l->up))) return rc;
    NAME(n, "%smlp.down_proj.weight", p);
    return ts_bind_mat(b, n, H, c->I, &l->down);
}

/* Every product's matrix, in a fixed order (packing, act digits). */
static int matrices(ts_dflash *d, ts_weight **w) {
    int n = 0;
    w[n++] = &d->fc;
    for (int i = 0; i < d->cfg.n_layers; i++) {
        ts_dflash_layer *l = &d->layers[i];
        ts_weight *ws[] = {&l->q_proj, &l->k_proj, &l->v_proj, &l->o_proj, &l->gate, &l->up, &l->down};
        for (int j = 0; j < 7; j++) w[n++] = ws[j];
    }
    return n;
}
#define MAX_MATS (1 + 7 * TS_DFLASH_MAX_LAYERS)

/* a vector or the arena: the host heap's, or the device backend's */
static void vfree(const ts_dflash *d, void *p) {
    if (d->dev_be && p) d->dev_be->ops->free(d->dev_be, p);
    else ts_free(p);
}

void ts_dflash_free(ts_dflash *d) {
    if (!d) return;
    if (d->layers)
        for (int i = 0; i < d->cfg.n_layers; i++) {
            ts_dflash_layer *l = &d->layers[i];
            vfree(d, l->in_norm);
            vfree(d, l->post_norm);
            vfree(d, l->q_norm);
            vfree(d, l->k_norm);
        }
    ts_free(d->layers);
    vfree(d, d->hidden_norm);
    vfree(d, d->norm);
    vfree(d, d->packed_arena);
    ts_st_close(d->st);
    ts_free(d->dir);
    ts_free(d);
}

int ts_dflash_set_act_digits(ts_dflash *d, int digits) {
    ts_weight *w[MAX_MATS];
    int n = matrices(d, w);
    for (int i = 0; i < n; i++) w[i]->act_digits = digits;
    return 0;
}

int ts_dflash_open(const char *dir, const ts_config *target, ts_backend *be, int dry, ts_bind_sink sink, void *user,
                   ts_dflash **out, ts_error *err) {
    *out = NULL;
    ts_dflash_cfg c;
    int rc = ts_dflash_config_load(dir, target, &c, err);
    if (rc) return rc;
    ts_dflash *d = ts_alloc(sizeof *d, TS_MEM_MISC);
    if (!d) return ts_fail(err, TS_E_NOMEM, "out of memory");
    d->cfg = c;
    d->dir = ts_strdup(dir, TS_MEM_MISC);
    if (sink) sink(user, "DFlash drafter object", TS_MEM_MISC, TS_DOM_HOST, 0, sizeof *d + strlen(dir) + 1);
    /* the tensor index, measured as plan.c measures the target's */
    size_t before[TS_MEM_N];
    for (int k = 0; k < TS_MEM_N; k++) before[k] = ts_mem_used_in(TS_DOM_HOST, (ts_mem_cat)k);
    rc = ts_st_open_dir(dir, &d->st, err);
    if (!rc && sink)
        for (int k = 0; k < TS_MEM_N; k++) {
            size_t got = ts_mem_used_in(TS_DOM_HOST, (ts_mem_cat)k) - before[k];
            if (got) sink(user, "DFlash tensor index", (ts_mem_cat)k, TS_DOM_HOST, 0, got);
        }
    if (rc) goto fail;
    /* load.c's binder over the drafter's set: its quantization, its byte count */
    ts_config qc;
    memset(&qc, 0, sizeof qc);
    qc.q_bits = c.q_bits;
    qc.q_group = c.q_group;
    ts_model acct;
    memset(&acct, 0, sizeof acct);
    /* on a device backend the vectors and the prepared matrices live there,
     * as the target's do (the forward reads them through the ops only) */
    d->dev_be = be && be->dom != TS_DOM_HOST ? be : NULL;
    binder b = {d->st, &qc, err, &acct, dry, 0, sink, user, 0, d->dev_be};
    const char *prefix = ts_st_find(d->st, "model.fc.weight") ? "model." : "";
    char n[512];
    NAME(n, "%sfc.weight", prefix);
    if ((rc = ts_bind_mat(&b, n, c.H, (int64_t)c.n_taps * c.H, &d->fc))) goto fail;
    NAME(n, "%shidden_norm.weight", prefix);
    if ((rc = ts_bind_vec(&b, n, c.H, 0, &d->hidden_norm))) goto fail;
    NAME(n, "%snorm.weight", prefix);
    if ((rc = ts_bind_vec(&b, n, c.H, 0, &d->norm))) goto fail;
    d->layers = ts_bind_keep(&b, sizeof(ts_dflash_layer) * c.n_layers, TS_MEM_MISC, "DFlash layer descriptors", 0);
    if (!d->layers) { rc = ts_fail(err, TS_E_NOMEM, "out of memory"); goto fail; }
    memset(d->layers, 0, sizeof(ts_dflash_layer) * c.n_layers);
    for (int i = 0; i < c.n_layers; i++) {
        char p[128];
        NAME(p, "%slayers.%d.", prefix, i);
        if ((rc = bind_layer(&b, &c, p, &d->layers[i]))) goto fail;
    }
    d->weight_bytes = acct.weight_bytes;
    /* the backend's prepared copies (CPU: the VNNI/AMX layout; CUDA: the
     * device copies), one arena */
    if (be) {
        ts_weight *w[MAX_MATS];
        int nm = matrices(d, w);
        uint64_t total = 0;
        for (int i = 0; i < nm; i++) total += be->ops->weight_bytes(be, w[i]);
        const char *what = d->dev_be ? "DFlash matrices on the device" : "DFlash matrices repacked for the kernels";
        if (total && dry) {
            if (sink) sink(user, what, TS_MEM_WEIGHTS, be->dom, 1, total);
        } else if (total) {
            uint8_t *a = NULL;
            if (!d->dev_be) a = ts_bind_keep(&b, total, TS_MEM_WEIGHTS, what, 1);
            else if ((a = be->ops->alloc(be, total, TS_MEM_WEIGHTS)) && sink)
                sink(user, what, TS_MEM_WEIGHTS, be->dom, 1, total);
            if (!a) {
                if (d->dev_be)
                    rc = ts_fail(err, TS_E_NOMEM, "out of %s memory for the DFlash drafter's %.1f MB of matrices", be->name,
                                 (double)total / 1e6);
                else rc = ts_fail(err, TS_E_NOMEM, "out of memory packing the DFlash drafter");
                goto fail;
            }
            d->packed_arena = a;
            d->packed_bytes = total;
            for (int i = 0; i < nm; i++) {
                size_t sz = be->ops->weight_bytes(be, w[i]);
                if (!sz) continue;
                be->ops->weight_prepare(be, w[i], a);
                a += sz;
            }
        }
    }
    if (dry) {
        ts_dflash_free(d);
        return 0;
    }
    *out = d;
    return 0;
fail:
    ts_fail_prefix(err, "DFlash drafter %s", dir);
    ts_dflash_free(d);
    return rc;
}

/* ---- forward ---- */

static void lin(ts_stream *s, ts_mode md, const ts_weight *w, const float *x, float *y, int n) {
    s->be->ops->linear(s, md, &w, 1, x, &y, n);
}

/* One layer's attention: rows [0, n_kv) context (K/V from k, v already
 * projected), the rest block rows with queries in ds->q. */
static void attn(const ts_dflash *d, ts_dflash_state *ds, ts_stream *s, ts_mode md, int L, int n, int n_kv) {
    const ts_dflash_cfg *c = &d->cfg;
    const ts_dflash_layer *l = &d->layers[L];
    ts_attn_args a = {ds->q, ds->k, ds->v, l->q_norm, l->k_norm, ds->kv[L].k, ds->kv[L].v, ds->att, ds->ctx, 1,
                      ds->o, n, c->nq, c->nkv, c->D, c->rot, 0, c->theta, c->eps, TS_MASK_BLOCK, n_kv, 1, ds->ctx, NULL};
    s->be->ops->attn(s, md, &a);
}

int ts_dflash_context(const ts_dflash *d, ts_dflash_state *ds, ts_stream *s, const float *taps, int n, int pos,
                      ts_mode md) {
    const ts_dflash_cfg *c = &d->cfg;
    const ts_backend_ops *op = s->be->ops;
    if (n < 1 || n > ds->R || pos < 0 || pos + n > ds->ctx) {
        ts_be_fail(s, TS_E_ARG, "DFlash context rows out of range");
        return ts_be_sync(s, NULL);
    }
    s->step.pos = pos;
    s->step.n = n;
    lin(s, md, &d->fc, taps, ds->feat, n);
    op->norm(s, md, ds->feat, c->H, NULL, d->hidden_norm, ds->feat, c->H, n, c->H, c->eps);
    for (int L = 0; L < c->n_layers; L++) {
        const ts_dflash_layer *l = &d->layers[L];
        op->linear(s, md, (const ts_weight *[]){&l->k_proj, &l->v_proj}, 2, ds->feat, (float *[]){ds->k, ds->v}, n);
        attn(d, ds, s, md, L, n, n);
    }
    return ts_be_sync(s, NULL);
}

/* Graphs of the block pass (a backend with the hooks: CUDA), as the
 * target's passes are captured (qwen35.c): everything after the embedding,
 * which copies the step record (the position) and the ids to the device;
 * the attention takes the position from the device record in a capture.
 * One graph per shape (rows, mode, head rows, logits planes), on the
 * session's stream, whose lifetime is this state's. Key kind 0x40 keeps
 * clear of the target's kinds. 0: run uncaptured. */
#define DF_GRAPH_KIND 0x40u
static uint32_t df_key(ts_dflash_state *ds, ts_stream *s, int n, ts_mode md, const float *logits, int head_rows) {
    const char *g = getenv("TS_GRAPHS"), *v = getenv("TSC_DGRAPH");
    if ((g && !strcmp(g, "0")) || (v && !strcmp(v, "0")) || !s->be->ops->graph_launch || n < 2 || n > 0xffff) return 0;
    for (int i = 0; i < ds->n_gsig; i++)
        if (ds->gsig[i].n == n && ds->gsig[i].mode == (int)md && ds->gsig[i].head_rows == head_rows && ds->gsig[i].logits == logits)
            return DF_GRAPH_KIND << 24 | (uint32_t)i << 16 | (uint32_t)n;
    if (ds->n_gsig == (int)(sizeof ds->gsig / sizeof ds->gsig[0])) return 0;
    const int i = ds->n_gsig++;
    ds->gsig[i].n = n, ds->gsig[i].mode = (int)md, ds->gsig[i].head_rows = head_rows, ds->gsig[i].logits = logits;
    return DF_GRAPH_KIND << 24 | (uint32_t)i << 16 | (uint32_t)n;
}

int ts_dflash_block(const ts_dflash *d, ts_dflash_state *ds, const ts_model *m, ts_stream *s, const int32_t *ids,
                    int n, int pos, float *logits, int head_rows, ts_mode md) {
    const ts_dflash_cfg *c = &d->cfg;
    const ts_backend_ops *op = s->be->ops;
    const int H = c->H;
    if (n < 2 || n > ds->B || pos < 0 || pos + n > ds->ctx) {
        ts_be_fail(s, TS_E_ARG, "DFlash block out of range");
        return ts_be_sync(s, NULL);
    }
    s->step.pos = pos;
    s->step.n = n;
    op->embed(s, md, &m->embed, ids, ds->x, (size_t)H, n);
    const uint32_t key = df_key(ds, s, n, md, logits, head_rows);
    int capture = 0;
    if (key) {
        if (op->graph_launch(s, key) == 0) return ts_be_sync(s, NULL);
        capture = op->graph_begin(s, key) == 0;
    }
    for (int L = 0; L < c->n_layers; L++) {
        const ts_dflash_layer *l = &d->layers[L];
        op->norm(s, md, ds->x, H, NULL, l->in_norm, ds->u, H, n, H, c->eps);
        op->linear(s, md, (const ts_weight *[]){&l->q_proj, &l->k_proj, &l->v_proj}, 3, ds->u,
                   (float *[]){ds->q, ds->k, ds->v}, n);
        attn(d, ds, s, md, L, n, 0);
        lin(s, md, &l->o_proj, ds->o, ds->t, n);
        op->norm(s, md, ds->x, H, ds->t, l->post_norm, ds->u, H, n, H, c->eps);
        op->linear(s, md, (const ts_weight *[]){&l->gate, &l->up}, 2, ds->u, (float *[]){ds->g, ds->up}, n);
        op->swiglu(s, md, ds->g, ds->up, (size_t)n * c->I);
        lin(s, md, &l->down, ds->g, ds->t, n);
        op->norm(s, md, ds->x, H, ds->t, NULL, NULL, H, n, H, 0.f);
    }
    op->norm(s, md, ds->x, H, NULL, d->norm, ds->u, H, n, H, c->eps);
    /* block row i >= 1 drafts the token at pos + i; row 0 (the known token) has no draft */
    const int V = m->cfg.vocab;
    if (head_rows > 0 && head_rows < V) {
        /* a drafting vocabulary: K-row products, each row's logits at its
         * place in the [n-1, V] planes (the rest stays stale) */
        ts_weight head = m->head;
        head.rows = head_rows;
        for (int i = 1; i < n; i++) lin(s, md, &head, ds->u + (size_t)i * H, logits + (size_t)(i - 1) * V, 1);
    } else {
        lin(s, md, &m->head, ds->u + H, logits, n - 1);
    }
    if (capture && op->graph_end(s, key) == 0) op->graph_launch(s, key);
    return ts_be_sync(s, NULL);
}
