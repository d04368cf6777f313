/* load.c: bind checkpoint tensors to the model (model.h).
 *
 * Every tensor is checked for presence, shape and dtype before use; errors
 * name the tensor, the expected and the found shape. Matrices stay in the
 * mmap'd files (ts_weight points into them); small vectors (norms, conv,
 * gates) are converted to f32 on the heap, with the (1 + w) of the
 * zero-centred RMSNorms folded in (the sum is exact in f32 for bf16 w, and
 * transformers forms it in f32 too).
 *
 * Names: the language model lives under "model.language_model." (released
 * multimodal checkpoints) or "model." (text-only); the MTP head under "mtp.".
 * Routed experts come fused ("mlp.experts.gate_up_proj" [E, 2*Im, H], gate
 * rows first; "mlp.experts.down_proj" [E, H, Im]) or per expert
 * ("mlp.experts.{e}.{gate,up,down}_proj.weight"), or stacked as MLX writes
 * them ("mlp.switch_mlp.{gate,up,down}_proj.weight" [E, rows, cols], float or
 * quantized); all forms are accepted in both places. Quantized matrices (MLX convention) are "X.weight" U32
 * [rows, cols*bits/32] with "X.scales" and "X.biases" [rows, cols/group].
 *
 * Sizing: everything the model keeps on the heap is allocated through
 * keep(), which reports it to an optional sink. ts_model_size runs the same
 * binding dry (no tensor data read, no packing; the packed arena reported,
 * not made) so that the memory plan (engine/plan.c) is this code's own
 * account of what it allocates, not a second description of it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"

#include "model/bind.h"

/* The one way the binder allocates what the model keeps: the memory plan
 * is the sum of what passes through here (tests/test_plan.c checks it
 * against the allocator's counters). */
static void *keep(binder *b, size_t bytes, ts_mem_cat cat, const char *what, int backend) {
    void *p = ts_alloc(bytes, cat);
    if (p && b->sink) b->sink(b->user, what, cat, TS_DOM_HOST, backend, bytes);
    return p;
}

static int is_float(ts_dtype t) { return t == TS_DTYPE_F32 || t == TS_DTYPE_F16 || t == TS_DTYPE_BF16; }

static int shape_fail(binder *b, const char *name, const ts_st_tensor *t, const char *expect) {
    char got[128];
    return ts_fail(b->err, TS_E_MODEL, "tensor '%s': expected shape %s, found %s (%s)", name, expect,
                   ts_st_shape_str(t, got, sizeof got), ts_dtype_name(t->dtype));
}

static ts_st_tensor *need(binder *b, const char *name) {
    ts_st_tensor *t = ts_st_find_mut(b->st, name);
    if (!t) ts_fail(b->err, TS_E_MODEL, "missing tensor '%s'", name);
    return t;
}

/* Bind a [rows, cols] matrix `name` (a full tensor name). */
static int bind_mat(binder *b, const char *name, int64_t rows, int64_t cols, ts_weight *w) {
    memset(w, 0, sizeof *w);
    char expect[96];
    snprintf(expect, sizeof expect, "[%lld, %lld]", (long long)rows, (long long)cols);
    ts_st_tensor *t = ts_st_find_mut(b->st, name);
    if (!t) return ts_fail(b->err, TS_E_MODEL, "missing tensor '%s' (expected %s)", name, expect);
    w->rows = rows;
    w->cols = cols;
    if (t->dtype == TS_DTYPE_U32) {
        /* quantized: find scales and biases next to it */
        char base[512], sn[560], bn[560];
        size_t l = strlen(name);
        if (l < 7 || strcmp(name + l - 7, ".weight") || l - 7 >= sizeof base)
            return ts_fail(b->err, TS_E_MODEL, "tensor '%s': U32 data but not a quantized .weight", name);
        memcpy(base, name, l - 7);
        base[l - 7] = 0;
        snprintf(sn, sizeof sn, "%s.scales", base);
        snprintf(bn, sizeof bn, "%s.biases", base);
        ts_st_tensor *s = ts_st_find_mut(b->st, sn), *bi = ts_st_find_mut(b->st, bn);
        if (!s || !bi) return ts_fail(b->err, TS_E_MODEL, "quantized tensor '%s' lacks '%s' or '%s'", name, sn, bn);
        int bits = b->cfg->q_bits, group = b->cfg->q_group;
        if (!bits) return ts_fail(b->err, TS_E_MODEL, "tensor '%s' is quantized (U32) but config.json has no \"quantization\"", name);
        if (cols % group || (cols * bits) % 32)
            return ts_fail(b->err, TS_E_MODEL, "tensor '%s': %lld columns do not split into groups of %d", name, (long long)cols, group);
        char qe[96], se[96];
        snprintf(qe, sizeof qe, "[%lld, %lld]", (long long)rows, (long long)(cols * bits / 32));
        snprintf(se, sizeof se, "[%lld, %lld]", (long long)rows, (long long)(cols / group));
        if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols * bits / 32) return shape_fail(b, name, t, qe);
        if (s->n_dims != 2 || s->shape[0] != rows || s->shape[1] != cols / group || !is_float(s->dtype)) return shape_fail(b, sn, s, se);
        if (bi->n_dims != 2 || bi->shape[0] != rows || bi->shape[1] != cols / group || bi->dtype != s->dtype) return shape_fail(b, bn, bi, se);
        w->dtype = TS_DTYPE_U32;
        w->bits = bits;
        w->group = group;
        w->data = t->data;
        w->scales = s->data;
        w->biases = bi->data;
        w->sdtype = s->dtype;
        t->used = s->used = bi->used = 1;
        b->m->weight_bytes += ts_weight_bytes(w);
        return 0;
    }
    if (!is_float(t->dtype))
        return ts_fail(b->err, TS_E_MODEL, "tensor '%s': dtype %s is not F32, F16 or BF16", name, ts_dtype_name(t->dtype));
    /* nn.Linear weights are [out, in]; a [1, H] gate may come as [H] */
    int ok = (t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols) ||
             (rows == 1 && t->n_dims == 1 && t->shape[0] == cols);
    if (!ok) return shape_fail(b, name, t, expect);
    w->dtype = t->dtype;
    w->data = t->data;
    t->used = 1;
    b->m->weight_bytes += ts_weight_bytes(w);
    return 0;
}

/* Bind a vector of n values (shape [n], or [n, 1, K] flattened when k > 1) as
 * f32; transpose (k > 1): stored [k, n] (v[t*n + i]) instead of the file's
 * [n, k]. add_one: 1 stores 1 + w, VEC_NEG_EXP stores -exp(w) (A_log).
 * On a device backend the vector is formed on the host and copied into its
 * own device allocation (through the backend's weight_prepare, as an f32
 * [1, n*k] weight); the host copy is freed. */
#define VEC_NEG_EXP 2
static int bind_vec(binder *b, const char *name, int64_t n, int64_t k, int add_one, int transpose, float **out) {
    *out = NULL;
    ts_st_tensor *t = need(b, name);
    if (!t) return TS_E_MODEL;
    if (!is_float(t->dtype))
        return ts_fail(b->err, TS_E_MODEL, "tensor '%s': dtype %s is not F32, F16 or BF16", name, ts_dtype_name(t->dtype));
    char expect[96];
    int ok;
    if (k == 1) {
        snprintf(expect, sizeof expect, "[%lld]", (long long)n);
        ok = t->n_dims == 1 && t->shape[0] == n;
    } else {
        snprintf(expect, sizeof expect, "[%lld, 1, %lld]", (long long)n, (long long)k);
        ok = (t->n_dims == 3 && t->shape[0] == n && t->shape[1] == 1 && t->shape[2] == k) ||
             (t->n_dims == 2 && t->shape[0] == n && t->shape[1] == k);
    }
    if (!ok) return shape_fail(b, name, t, expect);
    const char *what = strstr(name, "norm") ? "norms (f32; 1 + w where zero-centred)" : "GDN conv, A, dt_bias (f32)";
    const size_t bytes = sizeof(float) * (size_t)(n * k);
    if (b->dev && b->dry) {
        /* the plan: the device allocation below, not made */
        if (b->sink) b->sink(b->user, what, TS_MEM_WEIGHTS, b->dev->dom, 0, bytes);
        t->used = 1;
        return 0;
    }
    float *v = b->dev ? ts_alloc(bytes, TS_MEM_WEIGHTS) : keep(b, bytes, TS_MEM_WEIGHTS, what, 0);
    if (!v) return ts_fail(b->err, TS_E_NOMEM, "out of memory binding '%s'", name);
    for (int64_t i = 0; !b->dry && i < n * k; i++) {
        float x = t->dtype == TS_DTYPE_F32 ? ((const float *)t->data)[i]
                : t->dtype == TS_DTYPE_BF16 ? ts_bf16_to_f32(((const uint16_t *)t->data)[i])
                : ts_f16_to_f32(((const uint16_t *)t->data)[i]);
        v[transpose ? (i % k) * n + i / k : i] = add_one == VEC_NEG_EXP ? -expf(x) : add_one ? 1.0f + x : x;
    }
    t->used = 1;
    if (b->dev) {
        ts_backend *be = b->dev;
        float *d = be->ops->alloc(be, bytes, TS_MEM_WEIGHTS);
        if (!d) {
            ts_free(v);
            return ts_fail(b->err, TS_E_NOMEM, "out of %s memory binding '%s'", be->name, name);
        }
        if (b->sink) b->sink(b->user, what, TS_MEM_WEIGHTS, be->dom, 0, bytes);
        ts_weight w = {.dtype = TS_DTYPE_F32, .rows = 1, .cols = n * k, .data = v};
        be->ops->weight_prepare(be, &w, d);
        ts_free(v);
        v = d;
    }
    *out = v;
    return 0;
}

#define NAME(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

static int bind_attn(binder *b, const char *p, ts_attn_w *a) {
    const ts_config *c = b->cfg;
    int64_t H = c->H, D = c->head_dim;
    char n[512];
    int rc;
    NAME(n, "%sself_attn.q_proj.weight", p);
    if ((rc = bind_mat(b, n, 2 * c->nq * D, H, &a->q_proj))) return rc;
    NAME(n, "%sself_attn.k_proj.weight", p);
    if ((rc = bind_mat(b, n, c->nkv * D, H, &a->k_proj))) return rc;
    NAME(n, "%sself_attn.v_proj.weight", p);
    if ((rc = bind_mat(b, n, c->nkv * D, H, &a->v_proj))) return rc;
    NAME(n, "%sself_attn.o_proj.weight", p);
    if ((rc = bind_mat(b, n, H, c->nq * D, &a->o_proj))) return rc;
    NAME(n, "%sself_attn.q_norm.weight", p);
    if ((rc = bind_vec(b, n, D, 1, 1, 0, &a->q_norm))) return rc;
    NAME(n, "%sself_attn.k_norm.weight", p);
    return bind_vec(b, n, D, 1, 1, 0, &a->k_norm);
}

static int bind_gdn(binder *b, const char *p, ts_gdn_w *g) {
    const ts_config *c = b->cfg;
    const ts_model *m = b->m;
    int64_t H = c->H;
    char n[512];
    int rc;
    NAME(n, "%slinear_attn.in_proj_qkv.weight", p);
    if ((rc = bind_mat(b, n, m->C, H, &g->in_qkv))) return rc;
    NAME(n, "%slinear_attn.in_proj_z.weight", p);
    if ((rc = bind_mat(b, n, m->Vd, H, &g->in_z))) return rc;
    NAME(n, "%slinear_attn.in_proj_b.weight", p);
    if ((rc = bind_mat(b, n, c->Hv, H, &g->in_b))) return rc;
    NAME(n, "%slinear_attn.in_proj_a.weight", p);
    if ((rc = bind_mat(b, n, c->Hv, H, &g->in_a))) return rc;
    NAME(n, "%slinear_attn.out_proj.weight", p);
    if ((rc = bind_mat(b, n, H, m->Vd, &g->out_proj))) return rc;
    NAME(n, "%slinear_attn.conv1d.weight", p);
    /* [C, K] in the file, [K, C] here: the token path's conv reads each tap
     * as one contiguous row of channels (no gathers) and prefill reads its
     * channel blocks in place */
    if ((rc = bind_vec(b, n, m->C, c->conv_k, 0, 1, &g->conv))) return rc;
    NAME(n, "%slinear_attn.A_log", p);
    if ((rc = bind_vec(b, n, c->Hv, 1, VEC_NEG_EXP, 0, &g->neg_A))) return rc;
    NAME(n, "%slinear_attn.dt_bias", p);
    if ((rc = bind_vec(b, n, c->Hv, 1, 0, 0, &g->dt_bias))) return rc;
    NAME(n, "%slinear_attn.norm.weight", p);
    return bind_vec(b, n, c->dv, 1, 0, 0, &g->norm);
}

/* Per-expert views into a fused [E, rows_per_e * k, cols] tensor. */
static int bind_fused(binder *b, const char *name, int64_t E, int64_t rows, int64_t cols, int parts,
                      ts_weight **outs) {
    ts_st_tensor *t = ts_st_find_mut(b->st, name);
    if (!t) return 1; /* not fused: caller tries per-expert names */
    char expect[96];
    snprintf(expect, sizeof expect, "[%lld, %lld, %lld]", (long long)E, (long long)(rows * parts), (long long)cols);
    if (!is_float(t->dtype))
        return ts_fail(b->err, TS_E_MODEL, "tensor '%s': dtype %s is not F32, F16 or BF16", name, ts_dtype_name(t->dtype));
    if (t->n_dims != 3 || t->shape[0] != E || t->shape[1] != rows * parts || t->shape[2] != cols)
        return shape_fail(b, name, t, expect);
    size_t es = ts_dtype_size(t->dtype);
    for (int64_t e = 0; e < E; e++)
        for (int pi = 0; pi < parts; pi++) {
            ts_weight *w = &outs[pi][e];
            memset(w, 0, sizeof *w);
            w->dtype = t->dtype;
            w->rows = rows;
            w->cols = cols;
            w->data = (const char *)t->data + ((size_t)e * parts * rows + (size_t)pi * rows) * cols * es;
            b->m->weight_bytes += ts_weight_bytes(w);
        }
    t->used = 1;
    return 0;
}

/* MLX's stacked experts: "P.mlp.switch_mlp.{gate,up,down}_proj.weight" as
 * [E, rows, cols] floats, or quantized U32 [E, rows, cols*bits/32] with
 * .scales/.biases [E, rows, cols/group]. Per-expert views into them. */
static int bind_switch(binder *b, const char *base, int64_t E, int64_t rows, int64_t cols, ts_weight *outs) {
    char n[560], sn[560], bn[560];
    snprintf(n, sizeof n, "%s.weight", base);
    ts_st_tensor *t = ts_st_find_mut(b->st, n);
    if (!t) return ts_fail(b->err, TS_E_MODEL, "missing tensor '%s'", n);
    char expect[96];
    int quant = t->dtype == TS_DTYPE_U32, bits = b->cfg->q_bits, group = b->cfg->q_group;
    if (quant && (!bits || cols % group || (cols * bits) % 32))
        return ts_fail(b->err, TS_E_MODEL, "tensor '%s': quantized, but config.json's \"quantization\" does not fit %lld columns", n, (long long)cols);
    int64_t wc = quant ? cols * bits / 32 : cols;
    snprintf(expect, sizeof expect, "[%lld, %lld, %lld]", (long long)E, (long long)rows, (long long)wc);
    if (!(quant || is_float(t->dtype)) || t->n_dims != 3 || t->shape[0] != E || t->shape[1] != rows || t->shape[2] != wc)
        return shape_fail(b, n, t, expect);
    ts_st_tensor *s = NULL, *bi = NULL;
    if (quant) {
        snprintf(sn, sizeof sn, "%s.scales", base);
        snprintf(bn, sizeof bn, "%s.biases", base);
        s = ts_st_find_mut(b->st, sn);
        bi = ts_st_find_mut(b->st, bn);
        if (!s || !bi) return ts_fail(b->err, TS_E_MODEL, "quantized tensor '%s' lacks '%s' or '%s'", n, sn, bn);
        snprintf(expect, sizeof expect, "[%lld, %lld, %lld]", (long long)E, (long long)rows, (long long)(cols / group));
        if (s->n_dims != 3 || s->shape[0] != E || s->shape[1] != rows || s->shape[2] != cols / group || !is_float(s->dtype)) return shape_fail(b, sn, s, expect);
        if (bi->n_dims != 3 || bi->shape[0] != E || bi->shape[1] != rows || bi->shape[2] != cols / group || bi->dtype != s->dtype) return shape_fail(b, bn, bi, expect);
        s->used = bi->used = 1;
    }
    t->used = 1;
    for (int64_t e = 0; e < E; e++) {
        ts_weight *w = &outs[e];
        memset(w, 0, sizeof *w);
        w->rows = rows;
        w->cols = cols;
        w->dtype = t->dtype;
        w->data = (const char *)t->data + (size_t)e * rows * wc * ts_dtype_size(t->dtype);
        if (quant) {
            size_t ss = (size_t)e * rows * (cols / group) * ts_dtype_size(s->dtype);
            w->bits = bits;
            w->group = group;
            w->sdtype = s->dtype;
            w->scales = (const char *)s->data + ss;
            w->biases = (const char *)bi->data + ss;
        }
        b->m->weight_bytes += ts_weight_bytes(w);
    }
    return 0;
}

static int bind_ffn(binder *b, const char *p, ts_ffn_w *f) {
    const ts_config *c = b->cfg;
    int64_t H = c->H;
    char n[512];
    int rc;
    f->moe = c->is_moe;
    if (!c->is_moe) {
        NAME(n, "%smlp.gate_proj.weight", p);
        if ((rc = bind_mat(b, n, c->I, H, &f->gate))) return rc;
        NAME(n, "%smlp.up_proj.weight", p);
        if ((rc = bind_mat(b, n, c->I, H, &f->up))) return rc;
        NAME(n, "%smlp.down_proj.weight", p);
        return bind_mat(b, n, H, c->I, &f->down);
    }
    int64_t E = c->E, Im = c->Im, Is = c->Is;
    NAME(n, "%smlp.gate.weight", p);
    if ((rc = bind_mat(b, n, E, H, &f->router))) return rc;
    f->e_gate = keep(b, sizeof(ts_weight) * E * 3, TS_MEM_MISC, "expert views (descriptors)", 0);
    if (!f->e_gate) return ts_fail(b->err, TS_E_NOMEM, "out of memory");
    f->e_up = f->e_gate + E;
    f->e_down = f->e_up + E;
    ts_weight *gu[2] = {f->e_gate, f->e_up};
    NAME(n, "%smlp.switch_mlp.gate_proj.weight", p);
    if (ts_st_find(b->st, n)) {
        NAME(n, "%smlp.switch_mlp.gate_proj", p);
        if ((rc = bind_switch(b, n, E, Im, H, f->e_gate))) return rc;
        NAME(n, "%smlp.switch_mlp.up_proj", p);
        if ((rc = bind_switch(b, n, E, Im, H, f->e_up))) return rc;
        NAME(n, "%smlp.switch_mlp.down_proj", p);
        if ((rc = bind_switch(b, n, E, H, Im, f->e_down))) return rc;
        rc = 0;
        goto shared;
    }
    NAME(n, "%smlp.experts.gate_up_proj", p);
    rc = bind_fused(b, n, E, Im, H, 2, gu);
    if (rc == 0) {
        NAME(n, "%smlp.experts.down_proj", p);
        rc = bind_fused(b, n, E, H, Im, 1, &f->e_down);
        if (rc == 1) return ts_fail(b->err, TS_E_MODEL, "missing tensor '%s' (the fused gate_up_proj is present)", n);
        if (rc) return rc;
    } else if (rc == 1) {
        for (int64_t e = 0; e < E; e++) {
            NAME(n, "%smlp.experts.%lld.gate_proj.weight", p, (long long)e);
            if ((rc = bind_mat(b, n, Im, H, &f->e_gate[e]))) return rc;
            NAME(n, "%smlp.experts.%lld.up_proj.weight", p, (long long)e);
            if ((rc = bind_mat(b, n, Im, H, &f->e_up[e]))) return rc;
            NAME(n, "%smlp.experts.%lld.down_proj.weight", p, (long long)e);
            if ((rc = bind_mat(b, n, H, Im, &f->e_down[e]))) return rc;
        }
    } else {
        return rc;
    }
shared:
    NAME(n, "%smlp.shared_expert.gate_proj.weight", p);
    if ((rc = bind_mat(b, n, Is, H, &f->s_gate))) return rc;
    NAME(n, "%smlp.shared_expert.up_proj.weight", p);
    if ((rc = bind_mat(b, n, Is, H, &f->s_up))) return rc;
    NAME(n, "%smlp.shared_expert.down_proj.weight", p);
    if ((rc = bind_mat(b, n, H, Is, &f->s_down))) return rc;
    NAME(n, "%smlp.shared_expert_gate.weight", p);
    return bind_mat(b, n, 1, H, &f->s_gate_w);
}

static int bind_layer(binder *b, const char *p, int full, ts_layer_w *l) {
    char n[512];
    int rc;
    l->full = full;
    NAME(n, "%sinput_layernorm.weight", p);
    if ((rc = bind_vec(b, n, b->cfg->H, 1, 1, 0, &l->in_norm))) return rc;
    NAME(n, "%spost_attention_layernorm.weight", p);
    if ((rc = bind_vec(b, n, b->cfg->H, 1, 1, 0, &l->post_norm))) return rc;
    if (full) { if ((rc = bind_attn(b, p, &l->attn))) return rc; }
    else if ((rc = bind_gdn(b, p, &l->gdn))) return rc;
    return bind_ffn(b, p, &l->ffn);
}

/* ---- load-time repacking ----
 * Every quantized matrix the forward reads is copied once into the layout of
 * the current kernel mode (cpu/pack.c) when that mode has one: one arena,
 * counted as weights and predicted by the memory plan. The untied embedding is
 * only gathered row by row, so it stays in the file; the tied one is the head
 * and is packed once (embed and head share the view). */
typedef struct wlist {
    ts_weight **w;
    int n, cap;
} wlist;

static int wl_add(wlist *l, ts_weight *w) {
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 256;
        ts_weight **nw = ts_alloc(sizeof *nw * (size_t)nc, TS_MEM_MISC);
        if (!nw) return -1;
        if (l->n) memcpy(nw, l->w, sizeof *nw * (size_t)l->n);
        ts_free(l->w);
        l->w = nw;
        l->cap = nc;
    }
    l->w[l->n++] = w;
    return 0;
}

static int wl_layer(wlist *l, ts_layer_w *ly, const ts_config *c, int experts) {
    int rc = 0;
    if (ly->full) {
        ts_weight *a[] = {&ly->attn.q_proj, &ly->attn.k_proj, &ly->attn.v_proj, &ly->attn.o_proj};
        for (int i = 0; i < 4; i++) rc |= wl_add(l, a[i]);
    } else {
        ts_weight *g[] = {&ly->gdn.in_qkv, &ly->gdn.in_z, &ly->gdn.in_b, &ly->gdn.in_a, &ly->gdn.out_proj};
        for (int i = 0; i < 5; i++) rc |= wl_add(l, g[i]);
    }
    ts_ffn_w *f = &ly->ffn;
    if (!f->moe) {
        rc |= wl_add(l, &f->gate) | wl_add(l, &f->up) | wl_add(l, &f->down);
        return rc;
    }
    rc |= wl_add(l, &f->router);
    for (int e = 0; experts && e < c->E; e++) rc |= wl_add(l, &f->e_gate[e]) | wl_add(l, &f->e_up[e]) | wl_add(l, &f->e_down[e]);
    rc |= wl_add(l, &f->s_gate) | wl_add(l, &f->s_up) | wl_add(l, &f->s_down) | wl_add(l, &f->s_gate_w);
    return rc;
}

/* Every matrix the forward multiplies by (the untied embedding is only
 * gathered); experts 0: without the routed experts. */
static int wl_products(wlist *l, ts_model *m, int experts) {
    const ts_config *c = &m->cfg;
    int rc = wl_add(l, &m->head);
    for (int i = 0; i < c->n_layers; i++) rc |= wl_layer(l, &m->layers[i], c, experts);
    if (m->has_mtp) rc |= wl_add(l, &m->mtp.fc) | wl_layer(l, &m->mtp.layer, c, experts);
    return rc;
}

int ts_model_set_act_digits(ts_model *m, int digits) {
    wlist l = {0};
    int rc = wl_products(&l, m, 1);
    for (int i = 0; !rc && i < l.n; i++) l.w[i]->act_digits = digits;
    ts_free(l.w);
    return rc;
}

/* The file bytes (data, scales, biases) of a packed matrix that the process
 * lets go once its copy is made: all of them, except for the tied head,
 * which is also the embedding whose rows are gathered from the file. */
static size_t file_dropped(const ts_model *m, const ts_weight *w, int dev) {
    if (m->cfg.tied && w == &m->head && !dev) return 0; /* on a device backend the embedding is on the device too */
    if (w->dtype != TS_DTYPE_U32) return (size_t)w->rows * (size_t)w->cols * ts_dtype_size(w->dtype);
    const size_t ng = (size_t)(w->cols / w->group), ss = ts_dtype_size(w->sdtype);
    return (size_t)w->rows * (size_t)w->cols * (size_t)w->bits / 8 + 2 * (size_t)w->rows * ng * ss;
}

/* Let the file's pages of a prepared matrix go (its bytes are counted by
 * file_dropped). */
static void release_file(ts_st_set *st, const ts_weight *w) {
    if (w->dtype != TS_DTYPE_U32) {
        ts_st_release(st, w->data, (size_t)w->rows * (size_t)w->cols * ts_dtype_size(w->dtype));
        return;
    }
    const size_t ng = (size_t)(w->cols / w->group), ss = ts_dtype_size(w->sdtype);
    ts_st_release(st, w->data, (size_t)w->rows * (size_t)w->cols * (size_t)w->bits / 8);
    ts_st_release(st, w->scales, (size_t)w->rows * ng * ss);
    ts_st_release(st, w->biases, (size_t)w->rows * ng * ss);
}

/* Every product's backend-prepared copy (the CPU backend: the repacked
 * layout of its VNNI/AMX kernels; 0 bytes: read in place), in one arena. */
static int pack_all(binder *b, ts_model *m, ts_st_set *st, ts_backend *be, ts_error *err) {
    const ts_config *c = &m->cfg;
    const int dev = be->dom != TS_DOM_HOST;
    wlist l = {0};
    int rc = wl_products(&l, m, !b->stream);
    /* a device backend gathers the untied embedding's rows on the device too */
    if (!rc && dev && !c->tied) rc = wl_add(&l, &m->embed);
    if (rc) {
        ts_free(l.w);
        return ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    uint64_t total = 0;
    for (int i = 0; i < l.n; i++) {
        ts_weight *w = l.w[i];
        size_t sz = be->ops->weight_bytes(be, w);
        total += sz;
        if (sz) b->dropped += file_dropped(m, w, dev);
    }
    const char *what = dev ? "matrices on the device (the weight arena)" : "quantized matrices repacked for the kernels";
    if (total && b->dry) {
        /* the arena's size is the plan's; a dry run makes no copy */
        if (b->sink) b->sink(b->user, what, TS_MEM_WEIGHTS, be->dom, 1, total);
    } else if (total) {
        uint8_t *arena = dev ? be->ops->alloc(be, total, TS_MEM_WEIGHTS) : keep(b, total, TS_MEM_WEIGHTS, what, 1);
        if (!arena) {
            ts_free(l.w);
            if (dev)
                return ts_fail(err, TS_E_NOMEM, "%s: cannot allocate %.2f GB of device memory for the weights", be->name,
                               (double)total / 1e9);
            return ts_fail(err, TS_E_NOMEM, "out of memory packing %.1f MB of quantized weights (TS_PACK=0 reads them in place)",
                           (double)total / 1e6);
        }
        if (dev && b->sink) b->sink(b->user, what, TS_MEM_WEIGHTS, be->dom, 1, total);
        m->packed_arena = arena;
        m->packed_bytes = total;
        for (int i = 0; i < l.n; i++) {
            ts_weight *w = l.w[i];
            size_t sz = be->ops->weight_bytes(be, w);
            if (!sz) continue;
            be->ops->weight_prepare(be, w, arena);
            arena += sz;
            /* the kernels read the packed copy from now on: let the file's
             * pages go (the tied head is also the embedding, whose rows are
             * gathered from the file) */
            if (file_dropped(m, w, dev)) release_file(st, w);
        }
    }
    if (c->tied) m->embed.packed = m->head.packed;
    ts_free(l.w);
    return 0;
}

static int bind_all(ts_model *m, const ts_config *cfg, ts_st_set *st, ts_backend *be, int dry, int stream, ts_bind_sink sink,
                    void *user, uint64_t *dropped, ts_error *err) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    const ts_config *c = &m->cfg;
    m->D = c->head_dim;
    m->Kd = c->Hk * c->dk;
    m->Vd = c->Hv * c->dv;
    m->C = 2 * m->Kd + m->Vd;
    m->qdim = c->nq * c->head_dim;
    m->kvdim = c->nkv * c->head_dim;
    m->max_ffn = c->is_moe ? TS_MAX(c->Im, c->Is) : c->I;
    binder b = {st, c, err, m, dry, stream && c->is_moe, sink, user, 0, be && be->dom != TS_DOM_HOST ? be : NULL};
    m->dev_be = b.dev;
    int rc;
    const char *prefix = NULL;
    static const char *prefixes[] = {"model.language_model.", "model.", ""};
    char n[512];
    for (int i = 0; i < 3 && !prefix; i++) {
        NAME(n, "%sembed_tokens.weight", prefixes[i]);
        if (ts_st_find(st, n)) prefix = prefixes[i];
    }
    if (!prefix) return ts_fail(err, TS_E_MODEL, "missing tensor 'model.language_model.embed_tokens.weight' (nor 'model.embed_tokens.weight')");
    NAME(n, "%sembed_tokens.weight", prefix);
    if ((rc = bind_mat(&b, n, c->vocab, c->H, &m->embed))) return rc;
    if (c->tied) {
        m->head = m->embed;
    } else {
        if ((rc = bind_mat(&b, "lm_head.weight", c->head_rows ? c->head_rows : c->vocab, c->H, &m->head))) {
            if (!ts_st_find(st, "lm_head.weight"))
                ts_fail(err, TS_E_MODEL, "missing tensor 'lm_head.weight' (tie_word_embeddings is false)");
            return rc;
        }
    }
    NAME(n, "%snorm.weight", prefix);
    if ((rc = bind_vec(&b, n, c->H, 1, 1, 0, &m->final_norm))) return rc;
    m->layers = keep(&b, sizeof(ts_layer_w) * c->n_layers, TS_MEM_MISC, "layer descriptors", 0);
    if (!m->layers) return ts_fail(err, TS_E_NOMEM, "out of memory");
    for (int i = 0; i < c->n_layers; i++) {
        char p[256];
        NAME(p, "%slayers.%d.", prefix, i);
        if ((rc = bind_layer(&b, p, c->layer_full[i], &m->layers[i]))) return rc;
    }
    /* MTP head: present when its tensors are (a checkpoint without mtp.* runs,
     * drafting is refused). A partial head is an error. */
    if (ts_st_find(st, "mtp.fc.weight")) {
        ts_mtp_w *t = &m->mtp;
        if ((rc = bind_vec(&b, "mtp.pre_fc_norm_embedding.weight", c->H, 1, 1, 0, &t->pre_norm_emb))) return rc;
        if ((rc = bind_vec(&b, "mtp.pre_fc_norm_hidden.weight", c->H, 1, 1, 0, &t->pre_norm_hid))) return rc;
        if ((rc = bind_mat(&b, "mtp.fc.weight", c->H, 2 * (int64_t)c->H, &t->fc))) return rc;
        if ((rc = bind_layer(&b, "mtp.layers.0.", 1, &t->layer))) return rc;
        if ((rc = bind_vec(&b, "mtp.norm.weight", c->H, 1, 1, 0, &t->norm))) return rc;
        m->has_mtp = 1;
    }
    rc = be ? pack_all(&b, m, st, be, err) : 0;
    if (dropped) *dropped = b.dropped;
    return rc;
}

int ts_model_bind(ts_model *m, const ts_config *cfg, ts_st_set *st, ts_backend *be, ts_error *err) {
    return bind_all(m, cfg, st, be, 0, 0, NULL, NULL, NULL, err);
}

int ts_model_bind_opts(ts_model *m, const ts_config *cfg, ts_st_set *st, ts_backend *be, int stream_experts, ts_error *err) {
    return bind_all(m, cfg, st, be, 0, stream_experts, NULL, NULL, NULL, err);
}

int ts_model_size(const ts_config *cfg, ts_st_set *st, ts_backend *be, ts_bind_sink sink, void *user, int *has_mtp,
                  uint64_t *dropped, ts_error *err) {
    return ts_model_size_opts(cfg, st, be, 0, sink, user, has_mtp, dropped, err);
}

int ts_model_size_opts(const ts_config *cfg, ts_st_set *st, ts_backend *be, int stream_experts, ts_bind_sink sink, void *user,
                       int *has_mtp, uint64_t *dropped, ts_error *err) {
    ts_model m;
    int rc = bind_all(&m, cfg, st, be, 1, stream_experts, sink, user, dropped, err);
    if (has_mtp) *has_mtp = m.has_mtp;
    ts_model_free(&m);
    for (int i = 0; i < st->n_tensors; i++) st->tensors[i].used = 0; /* a dry run leaves the set as it found it */
    return rc;
}

/* a vector or the arena: the host heap's, or the device backend's */
static void vfree(const ts_model *m, void *p) {
    if (m->dev_be && p) m->dev_be->ops->free(m->dev_be, p);
    else ts_free(p);
}

static void free_layer(const ts_model *m, ts_layer_w *l) {
    vfree(m, l->in_norm);
    vfree(m, l->post_norm);
    vfree(m, l->attn.q_norm);
    vfree(m, l->attn.k_norm);
    vfree(m, l->gdn.conv);
    vfree(m, l->gdn.neg_A);
    vfree(m, l->gdn.dt_bias);
    vfree(m, l->gdn.norm);
    ts_free(l->ffn.e_gate);
}

void ts_model_free(ts_model *m) {
    if (!m) return;
    if (m->layers)
        for (int i = 0; i < m->cfg.n_layers; i++) free_layer(m, &m->layers[i]);
    ts_free(m->layers);
    free_layer(m, &m->mtp.layer);
    vfree(m, m->mtp.pre_norm_emb);
    vfree(m, m->mtp.pre_norm_hid);
    vfree(m, m->mtp.norm);
    vfree(m, m->final_norm);
    vfree(m, m->packed_arena);
    memset(m, 0, sizeof *m);
}

/* ---- for the other binders of model/ (bind.h) ---- */

void *ts_bind_keep(binder *b, size_t bytes, ts_mem_cat cat, const char *what, int backend) {
    return keep(b, bytes, cat, what, backend);
}
int ts_bind_mat(binder *b, const char *name, int64_t rows, int64_t cols, ts_weight *w) {
    return bind_mat(b, name, rows, cols, w);
}
int ts_bind_vec(binder *b, const char *name, int64_t n, int add_one, float **out) {
    return bind_vec(b, name, n, 1, add_one, 0, out);
}
