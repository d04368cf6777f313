/* config.c: config.json -> ts_config (see config.h). */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loader/config.h"

/* Every integer field is at most 2^24 (real checkpoints: vocab 248320,
 * positions 262144), and the widths the loader multiplies out in int (heads
 * times head size) at most 2^28, so no product in the model code overflows. */
#define CFG_MAX_INT (1 << 24)
#define CFG_MAX_WIDTH (1 << 28)

/* Look a key up in the text config first, then at top level. */
static cJSON *get2(cJSON *tc, cJSON *top, const char *k) {
    cJSON *v = tc ? cJSON_GetObjectItemCaseSensitive(tc, k) : NULL;
    if (!v && top) v = cJSON_GetObjectItemCaseSensitive(top, k);
    return v;
}

static int get_int(cJSON *tc, cJSON *top, const char *k, int def, int required, int *out,
                   const char *what, ts_error *err) {
    cJSON *v = get2(tc, top, k);
    if (!v || cJSON_IsNull(v)) {
        if (required) return ts_fail(err, TS_E_FORMAT, "%s: required field \"%s\" is missing", what, k);
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !(v->valuedouble >= 0) ||
        v->valuedouble > CFG_MAX_INT)
        return ts_fail(err, TS_E_FORMAT, "%s: field \"%s\" must be an integer in [0, %d]", what, k, CFG_MAX_INT);
    *out = (int)v->valuedouble;
    return 0;
}

/* eos_token_id: an id or a flat list of ids (nested lists and non-ids are
 * ignored, as before; the range check comes before the cast). */
static void add_eos(ts_config *c, cJSON *v, int nested) {
    if (!v) return;
    if (cJSON_IsArray(v)) {
        if (nested) return;
        cJSON *it;
        cJSON_ArrayForEach(it, v) add_eos(c, it, 1);
        return;
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= CFG_MAX_INT)) return;
    int id = (int)v->valuedouble;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] == id) return;
    if (c->n_eos < TS_MAX_EOS) c->eos[c->n_eos++] = id;
}

int ts_config_parse(const char *json, const char *gen_json, const char *what, ts_config *c, ts_error *err) {
    memset(c, 0, sizeof *c);
    cJSON *top = cJSON_Parse(json);
    if (!top || !cJSON_IsObject(top)) {
        cJSON_Delete(top);
        return ts_fail(err, TS_E_FORMAT, "%s: not a JSON object (malformed JSON)", what);
    }
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(top, "text_config");
    if (tc && !cJSON_IsObject(tc)) tc = NULL;
    int rc = 0;
#define INT(k, def, req, dst) \
    if (!rc) rc = get_int(tc, top, k, def, req, dst, what, err)

    /* model type: top level names the family; text_config names the text part */
    cJSON *mt = tc ? cJSON_GetObjectItemCaseSensitive(tc, "model_type") : NULL;
    if (!cJSON_IsString(mt)) mt = cJSON_GetObjectItemCaseSensitive(top, "model_type");
    if (!cJSON_IsString(mt)) {
        rc = ts_fail(err, TS_E_FORMAT, "%s: required field \"model_type\" is missing", what);
    } else {
        const char *m = mt->valuestring;
        if (!strcmp(m, "qwen3_5") || !strcmp(m, "qwen3_5_text")) {
            strcpy(c->model_type, "qwen3_5");
        } else if (!strcmp(m, "qwen3_5_moe") || !strcmp(m, "qwen3_5_moe_text")) {
            strcpy(c->model_type, "qwen3_5_moe");
            c->is_moe = 1;
        } else {
            rc = ts_fail(err, TS_E_UNSUPPORTED, "%s: model_type \"%s\" is not supported (qwen3_5, qwen3_5_moe)", what, m);
        }
    }
    int moe = c->is_moe;
    INT("vocab_size", 248320, 1, &c->vocab);
    INT("hidden_size", 0, 1, &c->H);
    INT("num_hidden_layers", 0, 1, &c->n_layers);
    INT("num_attention_heads", 16, 1, &c->nq);
    INT("num_key_value_heads", moe ? 2 : 4, 0, &c->nkv);
    INT("head_dim", 256, 0, &c->head_dim);
    INT("linear_num_key_heads", 16, 0, &c->Hk);
    INT("linear_num_value_heads", 32, 0, &c->Hv);
    INT("linear_key_head_dim", 128, 0, &c->dk);
    INT("linear_value_head_dim", 128, 0, &c->dv);
    INT("linear_conv_kernel_dim", 4, 0, &c->conv_k);
    INT("max_position_embeddings", 32768, 0, &c->max_pos);
    INT("mtp_num_hidden_layers", 0, 0, &c->mtp_layers);
    if (moe) {
        INT("num_experts", 0, 1, &c->E);
        INT("num_experts_per_tok", 0, 1, &c->topk);
        INT("moe_intermediate_size", 0, 1, &c->Im);
        INT("shared_expert_intermediate_size", 0, 1, &c->Is);
        c->norm_topk = 1; /* Qwen3_5MoeTopKRouter always renormalises */
    } else {
        INT("intermediate_size", 0, 1, &c->I);
    }
#undef INT
    if (rc) goto done;
    if (c->n_layers < 1 || c->n_layers > TS_MAX_LAYERS) {
        rc = ts_fail(err, TS_E_FORMAT, "%s: num_hidden_layers %d out of range [1, %d]", what, c->n_layers, TS_MAX_LAYERS);
        goto done;
    }
    if (c->vocab < 1 || c->H < 1 || c->nq < 1 || c->nkv < 1 || c->head_dim < 2 || c->Hk < 1 || c->Hv < 1 ||
        c->dk < 1 || c->dv < 1 || c->conv_k < 1 || c->conv_k > 64) {
        rc = ts_fail(err, TS_E_FORMAT, "%s: a size field is zero or out of range", what);
        goto done;
    }
    if (c->nq % c->nkv) {
        rc = ts_fail(err, TS_E_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", what, c->nq, c->nkv);
        goto done;
    }
    if (c->Hv % c->Hk) {
        rc = ts_fail(err, TS_E_FORMAT, "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d", what, c->Hv, c->Hk);
        goto done;
    }
    {
        const int64_t widths[] = {2 * (int64_t)c->nq * c->head_dim, (int64_t)c->nkv * c->head_dim,
                                  2 * (int64_t)c->Hk * c->dk + (int64_t)c->Hv * c->dv, (int64_t)c->Hv * c->dk,
                                  (int64_t)c->E * c->topk};
        for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
            if (widths[i] > CFG_MAX_WIDTH) {
                rc = ts_fail(err, TS_E_FORMAT, "%s: head counts times head sizes exceed %d", what, CFG_MAX_WIDTH);
                goto done;
            }
    }
    if (moe && (c->E < 1 || c->topk < 1 || c->topk > c->E)) {
        rc = ts_fail(err, TS_E_FORMAT, "%s: num_experts_per_tok %d must be in [1, num_experts %d]", what, c->topk, c->E);
        goto done;
    }

    /* layer types */
    cJSON *lt = get2(tc, top, "layer_types");
    if (lt && cJSON_IsArray(lt)) {
        if (cJSON_GetArraySize(lt) != c->n_layers) {
            rc = ts_fail(err, TS_E_FORMAT, "%s: layer_types has %d entries, num_hidden_layers is %d", what,
                         cJSON_GetArraySize(lt), c->n_layers);
            goto done;
        }
        int i = 0;
        cJSON *it;
        cJSON_ArrayForEach(it, lt) {
            if (cJSON_IsString(it) && !strcmp(it->valuestring, "full_attention")) c->layer_full[i] = 1;
            else if (cJSON_IsString(it) && !strcmp(it->valuestring, "linear_attention")) c->layer_full[i] = 0;
            else {
                rc = ts_fail(err, TS_E_FORMAT, "%s: layer_types[%d] is not \"full_attention\" or \"linear_attention\"", what, i);
                goto done;
            }
            i++;
        }
    } else {
        int interval = 4;
        if ((rc = get_int(tc, top, "full_attention_interval", 4, 0, &interval, what, err))) goto done;
        if (interval < 1) { rc = ts_fail(err, TS_E_FORMAT, "%s: full_attention_interval must be >= 1", what); goto done; }
        for (int i = 0; i < c->n_layers; i++) c->layer_full[i] = ((i + 1) % interval) == 0;
    }
    for (int i = 0; i < c->n_layers; i++) c->n_full += c->layer_full[i];

    /* rope: rope_parameters, else legacy top-level fields */
    double theta = 10000.0, frac = 0.25;
    cJSON *rp = get2(tc, top, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = get2(tc, top, "rope_scaling");
    cJSON *v;
    if ((v = get2(tc, top, "rope_theta")) && cJSON_IsNumber(v)) theta = v->valuedouble;
    if ((v = get2(tc, top, "partial_rotary_factor")) && cJSON_IsNumber(v)) frac = v->valuedouble;
    if (cJSON_IsObject(rp)) {
        if ((v = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta")) && cJSON_IsNumber(v)) theta = v->valuedouble;
        if ((v = cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor")) && cJSON_IsNumber(v)) frac = v->valuedouble;
    }
    if (!(theta > 0) || !(frac > 0 && frac <= 1)) {
        rc = ts_fail(err, TS_E_FORMAT, "%s: rope_theta must be > 0 and partial_rotary_factor in (0, 1]", what);
        goto done;
    }
    c->rope_theta = theta;
    c->rot_dim = (int)(c->head_dim * frac); /* int() as transformers does */
    c->rot_dim &= ~1;

    v = get2(tc, top, "rms_norm_eps");
    c->eps = 1e-6f;
    if (v && cJSON_IsNumber(v)) {
        if (!(v->valuedouble >= FLT_MIN && v->valuedouble < 1)) { /* checked before the cast to float */
            rc = ts_fail(err, TS_E_FORMAT, "%s: rms_norm_eps must be in [%g, 1)", what, FLT_MIN);
            goto done;
        }
        c->eps = (float)v->valuedouble;
    }

    /* tied head: text_config wins over top level; default false */
    v = tc ? cJSON_GetObjectItemCaseSensitive(tc, "tie_word_embeddings") : NULL;
    if (!v) v = cJSON_GetObjectItemCaseSensitive(top, "tie_word_embeddings");
    c->tied = v && cJSON_IsTrue(v);

    add_eos(c, tc ? cJSON_GetObjectItemCaseSensitive(tc, "eos_token_id") : NULL, 0);
    add_eos(c, cJSON_GetObjectItemCaseSensitive(top, "eos_token_id"), 0);
    if (gen_json) {
        cJSON *g = cJSON_Parse(gen_json);
        if (g) add_eos(c, cJSON_GetObjectItemCaseSensitive(g, "eos_token_id"), 0);
        cJSON_Delete(g);
    }

    /* quantized install (MLX convention) */
    cJSON *q = cJSON_GetObjectItemCaseSensitive(top, "quantization");
    if (!cJSON_IsObject(q)) q = cJSON_GetObjectItemCaseSensitive(top, "quantization_config");
    if (cJSON_IsObject(q)) {
        cJSON *b = cJSON_GetObjectItemCaseSensitive(q, "bits");
        cJSON *gs = cJSON_GetObjectItemCaseSensitive(q, "group_size");
        if (!cJSON_IsNumber(b) || !cJSON_IsNumber(gs) || (b->valuedouble != 4 && b->valuedouble != 8) ||
            !(gs->valuedouble >= 8 && gs->valuedouble <= CFG_MAX_INT) || gs->valuedouble != floor(gs->valuedouble)) {
            rc = ts_fail(err, TS_E_FORMAT, "%s: \"quantization\" needs bits 4 or 8 and a group_size >= 8", what);
            goto done;
        }
        c->q_bits = b->valueint;
        c->q_group = gs->valueint;
    }
done:
    cJSON_Delete(top);
    return rc;
}

int ts_config_load(const char *dir, ts_config *c, ts_error *err) {
    char path[4096], gpath[4096];
    char *txt = NULL, *gen = NULL;
    ts_path_join(path, sizeof path, dir, "config.json");
    int rc = ts_read_file(path, &txt, NULL, err);
    if (rc) return rc;
    ts_path_join(gpath, sizeof gpath, dir, "generation_config.json");
    if (ts_file_exists(gpath) && ts_read_file(gpath, &gen, NULL, NULL) != 0) gen = NULL;
    rc = ts_config_parse(txt, gen, path, c, err);
    ts_free(txt);
    ts_free(gen);
    return rc;
}
