/* convert.c: `turbospark convert`: a checkpoint directory -> a quantized install.
 *
 * Owns: which tensors are quantized, the output order, the config rewrite,
 * the copy of tokenizer/template files. Does not own: the bit layout
 * (quant.c), the safetensors output (st_writer.c).
 *
 * Quantized (per-group affine, MLX layout): every 2-D linear weight, i.e.
 * every 2-D float "*.weight" except norms, the routers (mlp.gate.weight) and
 * the shared-expert gates, plus routed experts (fused or per expert in the
 * source). Kept as stored: norms, conv1d, A_log, dt_bias, routers, shared
 * expert gates. Dropped: the vision tower (model.visual.*).
 *
 * Routed experts are written per expert, "P.mlp.experts.{e}.{gate,up,down}_proj
 * .{weight,scales,biases}", those nine tensors adjacent and in one shard: one
 * expert of one layer is one contiguous byte range (expert streaming reads it
 * with one request). Other tensors follow in source order.
 *
 * The source is validated first by binding it exactly as the engine would
 * (so a missing or mis-shaped tensor is reported before anything is written),
 * and refused if it is already quantized.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "loader/st_writer.h"
#include "model/dflash.h"
#include "model/model.h"
#include "quant/quant.h"

#define SHARD_MAX ((size_t)2000 * 1000 * 1000)

enum { K_COPY, K_QW, K_QS, K_QB };

typedef struct item {
    int kind;
    const ts_st_tensor *src;
    int64_t row0, rows, cols;  /* quantized: rows [row0, row0+rows) of the 2-D view of src */
} item;

typedef struct conv_ctx {
    item *items;
    int bits, group;
    int quiet;
    /* scales/biases of the matrix quantized by the last K_QW fill */
    void *sb_s, *sb_b;
    size_t sb_cap;
    float *rowbuf;
    int last_pct;
} conv_ctx;

void ts_convert_params_default(ts_convert_params *p) {
    memset(p, 0, sizeof *p);
    p->bits = 4;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int is_float(ts_dtype t) { return t == TS_DTYPE_F32 || t == TS_DTYPE_F16 || t == TS_DTYPE_BF16; }

/* Is this 2-D tensor a linear weight to quantize? */
static int quantizable(const ts_st_tensor *t) {
    if (t->n_dims != 2 || !is_float(t->dtype) || !ends_with(t->name, ".weight")) return 0;
    if (strstr(t->name, "norm")) return 0;
    if (ends_with(t->name, "mlp.gate.weight") || ends_with(t->name, "shared_expert_gate.weight")) return 0;
    return 1;
}

/* ---- building the output list ---- */

typedef struct olist {
    ts_stw_tensor *t;
    item *it;
    int n, cap;
    int64_t unit;
} olist;

static int push(olist *o, const char *name, ts_dtype dt, int nd, int64_t d0, int64_t d1, int64_t d2, item it, ts_error *err) {
    if (o->n == o->cap) {
        int nc = o->cap ? o->cap * 2 : 256;
        ts_stw_tensor *nt = ts_alloc(sizeof *nt * nc, TS_MEM_MISC);
        item *ni = ts_alloc(sizeof *ni * nc, TS_MEM_MISC);
        if (!nt || !ni) { ts_free(nt); ts_free(ni); return ts_fail(err, TS_E_NOMEM, "out of memory"); }
        if (o->n) { memcpy(nt, o->t, sizeof *nt * o->n); memcpy(ni, o->it, sizeof *ni * o->n); }
        ts_free(o->t); ts_free(o->it);
        o->t = nt; o->it = ni; o->cap = nc;
    }
    ts_stw_tensor *t = &o->t[o->n];
    memset(t, 0, sizeof *t);
    if (strlen(name) >= sizeof t->name) return ts_fail(err, TS_E_MODEL, "tensor name too long: '%s'", name);
    strcpy(t->name, name);
    t->dtype = dt;
    t->n_dims = nd;
    t->shape[0] = d0; t->shape[1] = d1; t->shape[2] = d2;
    t->unit = o->unit;
    o->it[o->n++] = it;
    return 0;
}

/* The three tensors of one quantized matrix `base` (name without .weight). */
static int push_q(olist *o, const char *base, const ts_st_tensor *src, int64_t row0, int64_t rows, int64_t cols,
                  int bits, int group, ts_error *err) {
    char n[256];
    item it = {K_QW, src, row0, rows, cols};
    int rc;
    snprintf(n, sizeof n, "%s.weight", base);
    if ((rc = push(o, n, TS_DTYPE_U32, 2, rows, cols * bits / 32, 0, it, err))) return rc;
    it.kind = K_QS;
    snprintf(n, sizeof n, "%s.scales", base);
    if ((rc = push(o, n, src->dtype, 2, rows, cols / group, 0, it, err))) return rc;
    it.kind = K_QB;
    snprintf(n, sizeof n, "%s.biases", base);
    return push(o, n, src->dtype, 2, rows, cols / group, 0, it, err);
}

/* If name is "P mlp.experts.<e>.<rest>", return the length of P (prefix up to
 * and including "mlp.experts.") and the expert index; else -1. */
static int expert_name(const char *name, int *e) {
    const char *p = strstr(name, "mlp.experts.");
    if (!p) return -1;
    const char *d = p + 12;
    if (*d < '0' || *d > '9') return -1;
    *e = atoi(d);
    return (int)(d - name);
}

static int build(ts_st_set *st, const ts_config *c, int bits, int group, olist *o, ts_error *err) {
    int rc;
    for (int i = 0; i < st->n_tensors; i++) st->tensors[i].used = 0;
    for (int i = 0; i < st->n_tensors; i++) {
        ts_st_tensor *t = &st->tensors[i];
        if (t->used) continue;
        t->used = 1;
        if (!strncmp(t->name, "model.visual.", 13) || !strncmp(t->name, "visual.", 7)) continue;
        char base[256];
        int e;
        o->unit++;
        if (ends_with(t->name, "mlp.experts.gate_up_proj") || ends_with(t->name, "mlp.experts.down_proj")) {
            /* fused experts: emit every expert of this layer, gate, up, down adjacent */
            size_t pl = strlen(t->name) - (ends_with(t->name, "down_proj") ? strlen("down_proj") : strlen("gate_up_proj"));
            char gu[256], dn[256];
            snprintf(gu, sizeof gu, "%.*sgate_up_proj", (int)pl, t->name);
            snprintf(dn, sizeof dn, "%.*sdown_proj", (int)pl, t->name);
            ts_st_tensor *tg = ts_st_find_mut(st, gu), *td = ts_st_find_mut(st, dn);
            if (!tg || !td) return ts_fail(err, TS_E_MODEL, "missing tensor '%s'", tg ? dn : gu);
            tg->used = td->used = 1;
            if (tg->n_dims != 3 || td->n_dims != 3 || tg->shape[0] != td->shape[0] || tg->shape[1] % 2 || !is_float(tg->dtype) || !is_float(td->dtype))
                return ts_fail(err, TS_E_MODEL, "tensors '%s' / '%s': not a fused [E, 2*Im, H] / [E, H, Im] pair", gu, dn);
            int64_t E = tg->shape[0], Im = tg->shape[1] / 2, H = tg->shape[2];
            for (int64_t x = 0; x < E; x++) {
                o->unit++;
                snprintf(base, sizeof base, "%.*s%lld.gate_proj", (int)pl, t->name, (long long)x);
                if ((rc = push_q(o, base, tg, x * 2 * Im, Im, H, bits, group, err))) return rc;
                snprintf(base, sizeof base, "%.*s%lld.up_proj", (int)pl, t->name, (long long)x);
                if ((rc = push_q(o, base, tg, x * 2 * Im + Im, Im, H, bits, group, err))) return rc;
                snprintf(base, sizeof base, "%.*s%lld.down_proj", (int)pl, t->name, (long long)x);
                if ((rc = push_q(o, base, td, x * td->shape[1], td->shape[1], td->shape[2], bits, group, err))) return rc;
            }
            continue;
        }
        int pl = expert_name(t->name, &e);
        if (pl > 0 && quantizable(t)) {
            /* per-expert source: emit all of this layer's experts in index order */
            for (int x = 0; x < c->E; x++) {
                o->unit++;
                static const char *parts[3] = {"gate_proj", "up_proj", "down_proj"};
                for (int q = 0; q < 3; q++) {
                    char n[300];
                    snprintf(base, sizeof base, "%.*s%d.%s", pl, t->name, x, parts[q]);
                    snprintf(n, sizeof n, "%s.weight", base);
                    ts_st_tensor *s = ts_st_find_mut(st, n);
                    if (!s) return ts_fail(err, TS_E_MODEL, "missing tensor '%s'", n);
                    if (!quantizable(s)) return ts_fail(err, TS_E_MODEL, "tensor '%s': not a 2-D float matrix", n);
                    s->used = 1;
                    if ((rc = push_q(o, base, s, 0, s->shape[0], s->shape[1], bits, group, err))) return rc;
                }
            }
            continue;
        }
        if (quantizable(t)) {
            snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - 7), t->name);
            if ((rc = push_q(o, base, t, 0, t->shape[0], t->shape[1], bits, group, err))) return rc;
            continue;
        }
        item it = {K_COPY, t, 0, 0, 0};
        if ((rc = push(o, t->name, t->dtype, t->n_dims, 0, 0, 0, it, err))) return rc;
        ts_stw_tensor *w = &o->t[o->n - 1];
        if (t->n_dims > 4) return ts_fail(err, TS_E_MODEL, "tensor '%s': more than 4 dimensions", t->name);
        for (int d = 0; d < t->n_dims; d++) w->shape[d] = t->shape[d];
    }
    return 0;
}

/* ---- filling ---- */

static void src_row(const ts_st_tensor *t, int64_t r, int64_t cols, float *out) {
    for (int64_t c = 0; c < cols; c++) out[c] = ts_quant_sget(t->dtype, t->data, r * cols + c);
}

static int fill(void *vctx, const ts_stw_tensor *t, int idx, void *buf, ts_error *err) {
    conv_ctx *x = vctx;
    const item *it = &x->items[idx];
    if (it->kind == K_COPY) { memcpy(buf, it->src->data, t->nbytes); return 0; }
    size_t es = ts_dtype_size(it->src->dtype), ng = (size_t)(it->cols / x->group);
    if (it->kind == K_QS || it->kind == K_QB) {
        memcpy(buf, it->kind == K_QS ? x->sb_s : x->sb_b, (size_t)it->rows * ng * es);
        return 0;
    }
    size_t need = (size_t)it->rows * ng * es;
    if (need > x->sb_cap) {
        ts_free(x->sb_s); ts_free(x->sb_b);
        x->sb_s = ts_alloc(need, TS_MEM_MISC);
        x->sb_b = ts_alloc(need, TS_MEM_MISC);
        x->sb_cap = need;
        if (!x->sb_s || !x->sb_b) { x->sb_cap = 0; return ts_fail(err, TS_E_NOMEM, "out of memory"); }
    }
    int64_t wpr = it->cols * x->bits / 32;
    for (int64_t r = 0; r < it->rows; r++) {
        src_row(it->src, it->row0 + r, it->cols, x->rowbuf);
        ts_quant_row(x->rowbuf, it->cols, x->bits, x->group, it->src->dtype, (uint32_t *)buf + r * wpr,
                     (char *)x->sb_s + r * ng * es, (char *)x->sb_b + r * ng * es);
    }
    return 0;
}

static void progress(void *vctx, size_t done, size_t total) {
    conv_ctx *x = vctx;
    int pct = total ? (int)(100.0 * done / total) : 100;
    if (x->quiet || pct == x->last_pct) return;
    x->last_pct = pct;
    ts_install_progress("convert", done, total);
}

/* ---- files around the weights ---- */

static int copy_file(const char *from, const char *to, ts_error *err) {
    char *data = NULL;
    size_t len = 0;
    int rc = ts_read_file(from, &data, &len, err);
    if (rc) return rc;
    errno = 0;
    FILE *f = fopen(to, "wb");
    if (!f) rc = ts_fail(err, TS_E_IO, "%s: cannot create: %s", to, strerror(errno));
    else {
        if (fwrite(data, 1, len, f) != len) rc = ts_fail(err, TS_E_IO, "%s: write failed: %s", to, strerror(errno));
        if (fclose(f) != 0 && !rc) rc = ts_fail(err, TS_E_IO, "%s: write failed: %s", to, strerror(errno));
    }
    ts_free(data);
    return rc;
}

/* Copy every regular file of src that is not a weight shard, index or config. */
static int copy_aux(const char *src, const char *dst, ts_error *err) {
    DIR *d = opendir(src);
    if (!d) return ts_fail(err, TS_E_IO, "%s: cannot list: %s", src, strerror(errno));
    struct dirent *de;
    int rc = 0;
    char a[4096], b[4096];
    while (!rc && (de = readdir(d))) {
        const char *n = de->d_name;
        if (n[0] == '.' || ends_with(n, ".safetensors") || !strcmp(n, "model.safetensors.index.json") ||
            !strcmp(n, "config.json"))
            continue;
        struct stat sb;
        ts_path_join(a, sizeof a, src, n);
        if (stat(a, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        rc = copy_file(a, ts_path_join(b, sizeof b, dst, n), err);
    }
    closedir(d);
    return rc;
}

int ts_write_config_quant(const char *src_json, const char *dst_dir, int bits, int group, ts_error *err) {
    cJSON *j = cJSON_Parse(src_json);
    if (!j) return ts_fail(err, TS_E_FORMAT, "config.json: not valid JSON");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "quantization");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "quantization_config");
    if (bits) {
        cJSON *q = cJSON_AddObjectToObject(j, "quantization");
        cJSON_AddNumberToObject(q, "group_size", group);
        cJSON_AddNumberToObject(q, "bits", bits);
        cJSON *q2 = cJSON_AddObjectToObject(j, "quantization_config");
        cJSON_AddNumberToObject(q2, "group_size", group);
        cJSON_AddNumberToObject(q2, "bits", bits);
    }
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    if (!s) return ts_fail(err, TS_E_NOMEM, "out of memory");
    char p[4096];
    ts_path_join(p, sizeof p, dst_dir, "config.json");
    int rc = 0;
    errno = 0;
    FILE *f = fopen(p, "wb");
    if (!f) rc = ts_fail(err, TS_E_IO, "%s: cannot create: %s", p, strerror(errno));
    else {
        size_t l = strlen(s);
        if (fwrite(s, 1, l, f) != l || fputc('\n', f) == EOF) rc = ts_fail(err, TS_E_IO, "%s: write failed: %s", p, strerror(errno));
        if (fclose(f) != 0 && !rc) rc = ts_fail(err, TS_E_IO, "%s: write failed: %s", p, strerror(errno));
    }
    free(s);
    return rc;
}

/* ---- the command ---- */

int ts_convert(const char *src, const char *dst, const ts_convert_params *pp, ts_error *err) {
    ts_convert_params p;
    if (pp) p = *pp;
    else ts_convert_params_default(&p);
    if (p.bits != 4 && p.bits != 8) return ts_fail(err, TS_E_ARG, "--bits %d: must be 4 or 8", p.bits);
    if (p.group && (p.group < 8 || p.group > 1024 || (p.group & (p.group - 1))))
        return ts_fail(err, TS_E_ARG, "--group %d: must be a power of two from 8 to 1024 (32, 64 or 128 usual)", p.group);
    if (!src || !dst) return ts_fail(err, TS_E_ARG, "convert needs a source and a destination directory");
    ts_config cfg;
    /* a DFlash drafter (its own directory: model/dflash.h) converts alone:
     * its config, its matrices by the same rule */
    const int drafter = ts_dflash_is_dir(src);
    ts_dflash_cfg dcfg;
    int rc = drafter ? ts_dflash_config_load(src, NULL, &dcfg, err) : ts_config_load(src, &cfg, err);
    if (rc) return rc;
    if (drafter) {
        memset(&cfg, 0, sizeof cfg);
        cfg.q_bits = dcfg.q_bits;
        cfg.q_group = dcfg.q_group;
    }
    if (cfg.q_bits)
        return ts_fail(err, TS_E_ARG, "%s: already quantized (%d-bit, group %d): convert needs a bf16/f16/f32 checkpoint",
                       src, cfg.q_bits, cfg.q_group);
    ts_st_set *st = NULL;
    if ((rc = ts_st_open_dir(src, &st, err))) return rc;
    for (int i = 0; i < st->n_tensors; i++)
        if (st->tensors[i].dtype == TS_DTYPE_U32) {
            rc = ts_fail(err, TS_E_ARG, "%s: tensor '%s' is already quantized (U32): convert needs a bf16/f16/f32 checkpoint",
                         src, st->tensors[i].name);
            ts_st_close(st);
            return rc;
        }
    /* validate the source as the engine will read it (no backend: nothing
     * is prepared for kernels) */
    if (drafter) {
        ts_dflash *none = NULL;
        rc = ts_dflash_open(src, NULL, NULL, 1, NULL, NULL, &none, err);
    } else {
        ts_model m;
        rc = ts_model_bind(&m, &cfg, st, NULL, err);
        ts_model_free(&m);
    }
    if (rc) { ts_fail_prefix(err, "%s", src); ts_st_close(st); return rc; }

    olist o = {0};
    int group = p.group ? p.group : 64;
    conv_ctx x = {0};
    char tmp[4096];
    int tmp_made = 0;
    /* choose the group: explicit must divide every quantized row; auto halves until it does */
    for (;;) {
        o.n = 0;
        if ((rc = build(st, &cfg, p.bits, group, &o, err))) goto out;
        const item *bad = NULL;
        for (int i = 0; i < o.n && !bad; i++)
            if (o.it[i].kind == K_QW && (o.it[i].cols % group || (o.it[i].cols * p.bits) % 32)) bad = &o.it[i];
        if (!bad) break;
        if (p.group || group <= 8) {
            rc = ts_fail(err, TS_E_ARG, "%s: tensor '%s' has rows of %lld values, not a multiple of group %d: choose a group that divides every row%s",
                         src, bad->src->name, (long long)bad->cols, group, p.group ? " (or leave --group out to pick one)" : "");
            goto out;
        }
        group /= 2;
    }
    if (!p.quiet && !p.group && group != 64)
        fprintf(stderr, "convert: group 64 does not divide every row; using group %d\n", group);
    int n_shards = ts_stw_plan(o.t, o.n, SHARD_MAX);
    int64_t maxcols = 1;
    for (int i = 0; i < o.n; i++) maxcols = TS_MAX(maxcols, o.it[i].cols);
    x.items = o.it;
    x.bits = p.bits;
    x.group = group;
    x.quiet = p.quiet;
    x.last_pct = -1;
    x.rowbuf = ts_alloc(sizeof(float) * maxcols, TS_MEM_MISC);
    if (!x.rowbuf) { rc = ts_fail(err, TS_E_NOMEM, "out of memory"); goto out; }
    if ((rc = ts_install_begin(dst, tmp, sizeof tmp, err))) goto out;
    tmp_made = 1;
    if ((rc = ts_stw_write(tmp, o.t, o.n, n_shards, fill, progress, &x, err))) goto out;
    if ((rc = copy_aux(src, tmp, err))) goto out;
    {
        char cp[4096], *cj = NULL;
        if ((rc = ts_read_file(ts_path_join(cp, sizeof cp, src, "config.json"), &cj, NULL, err))) goto out;
        rc = ts_write_config_quant(cj, tmp, p.bits, group, err);
        ts_free(cj);
        if (rc) goto out;
    }
    if ((rc = ts_install_commit(tmp, dst, err))) { tmp_made = 0; goto out; }
    tmp_made = 0;
    if (!p.quiet) {
        size_t in_b = 0, out_q = 0, out_k = 0, in_q = 0, n_par = 0;
        int nq = 0, nk = 0, nd = 0;
        for (int i = 0; i < st->n_tensors; i++) {
            const ts_st_tensor *t = &st->tensors[i];
            if (!strncmp(t->name, "model.visual.", 13) || !strncmp(t->name, "visual.", 7)) { nd++; continue; }
            in_b += t->nbytes;
        }
        for (int i = 0; i < o.n; i++) {
            if (o.it[i].kind == K_COPY) { out_k += o.t[i].nbytes; nk++; }
            else { out_q += o.t[i].nbytes; if (o.it[i].kind == K_QW) { nq++; n_par += (size_t)(o.it[i].rows * o.it[i].cols); in_q += (size_t)(o.it[i].rows * o.it[i].cols) * ts_dtype_size(o.it[i].src->dtype); } }
        }
        fprintf(stderr, "convert: %s -> %s: INT%d, group %d, %d shard%s\n", src, dst, p.bits, group, n_shards, n_shards > 1 ? "s" : "");
        fprintf(stderr, "  quantized %d matrices: %.1f MB -> %.1f MB (%.2f bits per weight incl. scales and biases)\n", nq,
                in_q / 1e6, out_q / 1e6, n_par ? 8.0 * out_q / n_par : 0.0);
        fprintf(stderr, "  kept %d tensors at source precision: %.1f MB; dropped %d vision tensors\n", nk, out_k / 1e6, nd);
        fprintf(stderr, "  total %.1f MB -> %.1f MB (%.1f%%)\n", in_b / 1e6, (out_q + out_k) / 1e6, in_b ? 100.0 * (out_q + out_k) / in_b : 0.0);
    }
out:
    if (tmp_made) ts_install_abort(tmp);
    ts_free(x.rowbuf);
    ts_free(x.sb_s);
    ts_free(x.sb_b);
    ts_free(o.t);
    ts_free(o.it);
    ts_st_close(st);
    return rc;
}
