/* synth.c: `turbospark synth`: a random-weight checkpoint of a given shape.
 *
 * Owns: the tensor list of a release checkpoint for a config (language model
 * under "model.language_model.", lm_head when untied, the MTP head, routed
 * experts per expert and contiguous as convert writes them), and random
 * values of realistic scale: weights ~ uniform with std 0.02 (HF's
 * initializer_range), norms near their identity, A_log = log(U(1, 16)),
 * dt_bias ~ U(0, 1). Quantized tensors are written directly as random codes,
 * scales and biases (w = s*q + b centred on 0), with no bf16 intermediate, so
 * a 397B-shaped install costs only its own size. Speed does not depend on the
 * values; finiteness does, which these scales keep.
 * ts_synth_plan gives the same tensor list without writing anything, for
 * the memory plan of a released size (`turbospark plan --shape`).
 * Does not own: the shape validation (config.c parses the shape file like a
 * config.json, plus the group checks here), the output files (st_writer.c).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loader/config.h"
#include "loader/st_writer.h"
#include "quant/quant.h"

#define SHARD_MAX ((size_t)2000 * 1000 * 1000)

enum { S_QW, S_QS, S_QB, S_W, S_NORM, S_NORM1, S_ALOG, S_DT, S_CONV, S_ROUTER };

typedef struct sitem { int kind; int64_t cols; } sitem;

typedef struct sctx {
    ts_stw_tensor *t;
    sitem *it;
    int n, cap;
    int64_t unit;
    int bits, group;
    uint64_t seed;
    int last_pct, quiet;
    ts_error *err;
    int rc;
} sctx;

static void add(sctx *s, const char *name, ts_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2, int kind, int64_t cols) {
    if (s->rc) return;
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 1024;
        ts_stw_tensor *nt = ts_alloc(sizeof *nt * nc, TS_MEM_MISC);
        sitem *ni = ts_alloc(sizeof *ni * nc, TS_MEM_MISC);
        if (!nt || !ni) { ts_free(nt); ts_free(ni); s->rc = ts_fail(s->err, TS_E_NOMEM, "out of memory"); return; }
        if (s->n) { memcpy(nt, s->t, sizeof *nt * s->n); memcpy(ni, s->it, sizeof *ni * s->n); }
        ts_free(s->t); ts_free(s->it);
        s->t = nt; s->it = ni; s->cap = nc;
    }
    ts_stw_tensor *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->n_dims = nd;
    t->shape[0] = d0; t->shape[1] = d1; t->shape[2] = d2;
    t->unit = s->unit;
    s->it[s->n].kind = kind;
    s->it[s->n].cols = cols;
    s->n++;
}

/* A [rows, cols] linear weight, quantized or bf16. */
static void mat(sctx *s, const char *base, int64_t rows, int64_t cols) {
    char n[256];
    if (s->rc) return;
    if (!s->bits) {
        snprintf(n, sizeof n, "%s.weight", base);
        add(s, n, TS_DTYPE_BF16, 2, rows, cols, 0, S_W, cols);
        return;
    }
    if (cols % s->group) {
        s->rc = ts_fail(s->err, TS_E_ARG, "'%s' has rows of %lld values, not a multiple of group %d", base, (long long)cols, s->group);
        return;
    }
    snprintf(n, sizeof n, "%s.weight", base);
    add(s, n, TS_DTYPE_U32, 2, rows, cols * s->bits / 32, 0, S_QW, cols);
    snprintf(n, sizeof n, "%s.scales", base);
    add(s, n, TS_DTYPE_BF16, 2, rows, cols / s->group, 0, S_QS, cols);
    snprintf(n, sizeof n, "%s.biases", base);
    add(s, n, TS_DTYPE_BF16, 2, rows, cols / s->group, 0, S_QB, cols);
}

static void vec(sctx *s, const char *name, ts_dtype dt, int64_t n, int kind) { add(s, name, dt, 1, n, 0, 0, kind, n); }

static void layer(sctx *s, const ts_config *c, const char *p, int full) {
    char n[256];
    const int64_t H = c->H, D = c->head_dim, Kd = (int64_t)c->Hk * c->dk, Vd = (int64_t)c->Hv * c->dv, C = 2 * Kd + Vd;
    s->unit++;
    snprintf(n, sizeof n, "%sinput_layernorm.weight", p); vec(s, n, TS_DTYPE_BF16, H, S_NORM);
    snprintf(n, sizeof n, "%spost_attention_layernorm.weight", p); vec(s, n, TS_DTYPE_BF16, H, S_NORM);
    if (full) {
        snprintf(n, sizeof n, "%sself_attn.q_proj", p); mat(s, n, 2 * c->nq * D, H);
        snprintf(n, sizeof n, "%sself_attn.k_proj", p); mat(s, n, c->nkv * D, H);
        snprintf(n, sizeof n, "%sself_attn.v_proj", p); mat(s, n, c->nkv * D, H);
        snprintf(n, sizeof n, "%sself_attn.o_proj", p); mat(s, n, H, c->nq * D);
        snprintf(n, sizeof n, "%sself_attn.q_norm.weight", p); vec(s, n, TS_DTYPE_BF16, D, S_NORM);
        snprintf(n, sizeof n, "%sself_attn.k_norm.weight", p); vec(s, n, TS_DTYPE_BF16, D, S_NORM);
    } else {
        snprintf(n, sizeof n, "%slinear_attn.in_proj_qkv", p); mat(s, n, C, H);
        snprintf(n, sizeof n, "%slinear_attn.in_proj_z", p); mat(s, n, Vd, H);
        snprintf(n, sizeof n, "%slinear_attn.in_proj_b", p); mat(s, n, c->Hv, H);
        snprintf(n, sizeof n, "%slinear_attn.in_proj_a", p); mat(s, n, c->Hv, H);
        snprintf(n, sizeof n, "%slinear_attn.out_proj", p); mat(s, n, H, Vd);
        snprintf(n, sizeof n, "%slinear_attn.conv1d.weight", p); add(s, n, TS_DTYPE_BF16, 3, C, 1, c->conv_k, S_CONV, c->conv_k);
        snprintf(n, sizeof n, "%slinear_attn.A_log", p); vec(s, n, TS_DTYPE_F32, c->Hv, S_ALOG);
        snprintf(n, sizeof n, "%slinear_attn.dt_bias", p); vec(s, n, TS_DTYPE_BF16, c->Hv, S_DT);
        snprintf(n, sizeof n, "%slinear_attn.norm.weight", p); vec(s, n, TS_DTYPE_F32, c->dv, S_NORM1);
    }
    if (!c->is_moe) {
        snprintf(n, sizeof n, "%smlp.gate_proj", p); mat(s, n, c->I, H);
        snprintf(n, sizeof n, "%smlp.up_proj", p); mat(s, n, c->I, H);
        snprintf(n, sizeof n, "%smlp.down_proj", p); mat(s, n, H, c->I);
        return;
    }
    snprintf(n, sizeof n, "%smlp.gate.weight", p); add(s, n, TS_DTYPE_BF16, 2, c->E, H, 0, S_ROUTER, H);
    snprintf(n, sizeof n, "%smlp.shared_expert.gate_proj", p); mat(s, n, c->Is, H);
    snprintf(n, sizeof n, "%smlp.shared_expert.up_proj", p); mat(s, n, c->Is, H);
    snprintf(n, sizeof n, "%smlp.shared_expert.down_proj", p); mat(s, n, H, c->Is);
    snprintf(n, sizeof n, "%smlp.shared_expert_gate.weight", p); add(s, n, TS_DTYPE_BF16, 2, 1, H, 0, S_ROUTER, H);
    for (int e = 0; e < c->E; e++) {
        s->unit++; /* one expert = one contiguous unit */
        snprintf(n, sizeof n, "%smlp.experts.%d.gate_proj", p, e); mat(s, n, c->Im, H);
        snprintf(n, sizeof n, "%smlp.experts.%d.up_proj", p, e); mat(s, n, c->Im, H);
        snprintf(n, sizeof n, "%smlp.experts.%d.down_proj", p, e); mat(s, n, H, c->Im);
    }
}

static inline uint64_t xs64(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}
static inline float u01(uint64_t *s) { return (float)((xs64(s) >> 40) * (1.0 / 16777216.0)); }

static int fill(void *vctx, const ts_stw_tensor *t, int idx, void *buf, ts_error *err) {
    sctx *s = vctx;
    const sitem *it = &s->it[idx];
    uint64_t st = s->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(idx + 1));
    for (int k = 0; k < 4; k++) xs64(&st);
    size_t n = t->nbytes / ts_dtype_size(t->dtype);
    const float amp = 0.02f * sqrtf(3.0f); /* uniform(-amp, amp) has std 0.02 */
    const int qmax = (1 << s->bits) - 1;
    uint16_t *h = buf;
    float *f = buf;
    switch (it->kind) {
    case S_QW: {
        uint64_t *w = buf;
        for (size_t i = 0; i < t->nbytes / 8; i++) w[i] = xs64(&st);
        break;
    }
    case S_QS: /* step so that q spans [-amp, amp], per-group jitter */
        for (size_t i = 0; i < n; i++) h[i] = ts_f32_to_bf16(2 * amp / qmax * (0.75f + 0.5f * u01(&st)));
        break;
    case S_QB:
        for (size_t i = 0; i < n; i++) h[i] = ts_f32_to_bf16(-amp * (0.75f + 0.5f * u01(&st)));
        break;
    case S_W: case S_ROUTER:
        for (size_t i = 0; i < n; i++) h[i] = ts_f32_to_bf16(amp * (2 * u01(&st) - 1));
        break;
    case S_CONV:
        for (size_t i = 0; i < n; i++) h[i] = ts_f32_to_bf16(0.3f * (2 * u01(&st) - 1));
        break;
    case S_NORM: /* zero-centred (1 + w) norms */
        for (size_t i = 0; i < n; i++) h[i] = ts_f32_to_bf16(0.1f * (2 * u01(&st) - 1));
        break;
    case S_NORM1:
        for (size_t i = 0; i < n; i++) f[i] = 0.9f + 0.2f * u01(&st);
        break;
    case S_ALOG:
        for (size_t i = 0; i < n; i++) f[i] = logf(1.0f + 15.0f * u01(&st));
        break;
    case S_DT:
        for (size_t i = 0; i < n; i++) h[i] = ts_f32_to_bf16(u01(&st));
        break;
    }
    (void)err;
    return 0;
}

static void progress(void *vctx, size_t done, size_t total) {
    sctx *s = vctx;
    int pct = total ? (int)(100.0 * done / total) : 100;
    if (s->quiet || pct == s->last_pct) return;
    s->last_pct = pct;
    ts_install_progress("synth", done, total);
}

/* Parse and check a shape file; bits 4/8/16 and the group validated. */
static int shape_load(const char *shape_path, int bits, int group, char **txt, ts_config *c, ts_error *err) {
    *txt = NULL;
    if (bits != 4 && bits != 8 && bits != 16) return ts_fail(err, TS_E_ARG, "--bits %d: must be 4, 8 or 16 (bf16)", bits);
    if (bits != 16 && (group < 64 || group > 1024 || (group & (group - 1))))
        return ts_fail(err, TS_E_ARG, "--group %d: must be a power of two from 64 to 1024", group);
    int rc = ts_read_file(shape_path, txt, NULL, err);
    if (rc) return rc;
    rc = ts_config_parse(*txt, NULL, shape_path, c, err);
    if (!rc && c->q_bits) rc = ts_fail(err, TS_E_FORMAT, "%s: a shape file must not carry \"quantization\" (use --bits)", shape_path);
    if (!rc && (c->rot_dim > c->head_dim || c->vocab <= 0))
        rc = ts_fail(err, TS_E_FORMAT, "%s: inconsistent shape (rotary dims %d > head_dim %d, or no vocab)", shape_path, c->rot_dim, c->head_dim);
    if (rc) { ts_free(*txt); *txt = NULL; }
    return rc;
}

/* The tensor list of the install, in write order. */
static void build(sctx *s, const ts_config *c) {
    const char *pre = "model.language_model.";
    char n[256];
    snprintf(n, sizeof n, "%sembed_tokens", pre);
    s->unit++;
    mat(s, n, c->vocab, c->H);
    for (int i = 0; i < c->n_layers && !s->rc; i++) {
        snprintf(n, sizeof n, "%slayers.%d.", pre, i);
        layer(s, c, n, c->layer_full[i]);
    }
    s->unit++;
    snprintf(n, sizeof n, "%snorm.weight", pre);
    vec(s, n, TS_DTYPE_BF16, c->H, S_NORM);
    if (!c->tied) mat(s, "lm_head", c->vocab, c->H);
    if (c->mtp_layers > 0) {
        s->unit++;
        vec(s, "mtp.pre_fc_norm_embedding.weight", TS_DTYPE_BF16, c->H, S_NORM);
        vec(s, "mtp.pre_fc_norm_hidden.weight", TS_DTYPE_BF16, c->H, S_NORM);
        mat(s, "mtp.fc", c->H, 2 * (int64_t)c->H);
        vec(s, "mtp.norm.weight", TS_DTYPE_BF16, c->H, S_NORM);
        layer(s, c, "mtp.layers.0.", 1);
    }
}

int ts_synth_plan(const char *shape_path, int bits, int group, ts_config *cfg, ts_stw_tensor **t, int *n, int *n_shards,
                  ts_error *err) {
    *t = NULL;
    *n = *n_shards = 0;
    char *txt = NULL;
    if (!group) group = 64;
    int rc = shape_load(shape_path, bits, group, &txt, cfg, err);
    ts_free(txt);
    if (rc) return rc;
    sctx s = {0};
    s.bits = bits == 16 ? 0 : bits;
    s.group = group;
    s.err = err;
    build(&s, cfg);
    ts_free(s.it);
    if (s.rc) { ts_free(s.t); return s.rc; }
    /* what the install's config.json says (ts_write_config_quant) */
    cfg->q_bits = s.bits;
    cfg->q_group = s.bits ? group : 0;
    *n_shards = ts_stw_plan(s.t, s.n, SHARD_MAX);
    *t = s.t;
    *n = s.n;
    return 0;
}

int ts_synth(const char *shape_path, const char *dst, const ts_convert_params *pp, ts_error *err) {
    ts_convert_params p;
    if (pp) p = *pp;
    else ts_convert_params_default(&p);
    int group = p.group ? p.group : 64;
    char *txt = NULL;
    ts_config c;
    int rc = shape_load(shape_path, p.bits, group, &txt, &c, err);
    if (rc) return rc;
    sctx s = {0};
    s.bits = p.bits == 16 ? 0 : p.bits;
    s.group = group;
    s.seed = p.seed ? p.seed : 0x5eed5eed5eedull;
    s.err = err;
    s.quiet = p.quiet;
    s.last_pct = -1;
    build(&s, &c);
    char tmp[4096];
    int made = 0;
    rc = s.rc;
    if (!rc) rc = ts_install_begin(dst, tmp, sizeof tmp, err);
    if (!rc) {
        made = 1;
        int ns = ts_stw_plan(s.t, s.n, SHARD_MAX);
        rc = ts_stw_write(tmp, s.t, s.n, ns, fill, progress, &s, err);
    }
    if (!rc) {
        /* config.json: the shape as text_config, in the released layout */
        cJSON *shape = cJSON_Parse(txt), *top = cJSON_CreateObject();
        cJSON_AddStringToObject(top, "model_type", c.is_moe ? "qwen3_5_moe" : "qwen3_5");
        cJSON_AddBoolToObject(top, "tie_word_embeddings", c.tied);
        cJSON_DeleteItemFromObjectCaseSensitive(shape, "model_type");
        cJSON_AddStringToObject(shape, "model_type", c.is_moe ? "qwen3_5_moe_text" : "qwen3_5_text");
        cJSON_AddItemToObject(top, "text_config", shape);
        char *js = cJSON_Print(top);
        cJSON_Delete(top);
        rc = js ? ts_write_config_quant(js, tmp, s.bits, group, err) : ts_fail(err, TS_E_NOMEM, "out of memory");
        free(js);
    }
    if (!rc) { rc = ts_install_commit(tmp, dst, err); made = 0; }
    if (made && rc) ts_install_abort(tmp);
    if (!rc && !p.quiet) {
        size_t tot = 0;
        for (int i = 0; i < s.n; i++) tot += s.t[i].nbytes;
        fprintf(stderr, "synth: %s -> %s: %s, %d tensors, %.1f MB\n", shape_path, dst,
                s.bits ? (s.bits == 4 ? "INT4" : "INT8") : "BF16", s.n, tot / 1e6);
    }
    ts_free(s.t);
    ts_free(s.it);
    ts_free(txt);
    return rc;
}
