/* config.h: the model configuration, read from config.json.
 *
 * Accepts the released multimodal layout (text fields under "text_config")
 * and flat text configs; "layer_types" or "full_attention_interval";
 * "rope_parameters" or legacy top-level "rope_theta"/"partial_rotary_factor";
 * MLX-style "quantization": {"group_size", "bits"}. Missing optional fields
 * take transformers' defaults (Qwen3_5TextConfig / Qwen3_5MoeTextConfig);
 * fields that fix tensor shapes without a sensible default are required.
 * Stop ids are merged from config.json and generation_config.json.
 */
#ifndef TS_CONFIG_H
#define TS_CONFIG_H

#include "ts_int.h"

#define TS_MAX_LAYERS 1024
#define TS_MAX_EOS 8

typedef struct ts_config {
    char model_type[32];       /* "qwen3_5" or "qwen3_5_moe" */
    int is_moe;
    int vocab;                 /* embedding / head rows */
    int H;                     /* hidden_size */
    int n_layers;              /* main stack, MTP excluded */
    unsigned char layer_full[TS_MAX_LAYERS]; /* 1 = full attention, 0 = GDN */
    int n_full;
    /* full attention */
    int nq, nkv, head_dim, rot_dim;
    double rope_theta;
    /* Gated DeltaNet */
    int Hk, Hv, dk, dv, conv_k;
    /* FFN */
    int I;                     /* dense SwiGLU width */
    int E, topk, Im, Is;       /* MoE */
    int norm_topk;             /* renormalise top-k weights (always 1 for qwen3_5_moe) */
    float eps;
    int max_pos;
    int tied;
    int head_lo, head_rows;    /* a tensor-parallel rank's head: rows [head_lo, head_lo + head_rows)
                                  of the vocabulary (head_rows 0: all of them, the whole model) */
    int mtp_layers;            /* declared count (tensors decide whether it exists) */
    int eos[TS_MAX_EOS], n_eos;
    /* quantized install (0 = none) */
    int q_bits, q_group;
} ts_config;

/* Parse `dir`/config.json (+ generation_config.json if present). */
int ts_config_load(const char *dir, ts_config *c, ts_error *err);
/* Parse from a JSON string; `gen_json` may be NULL. `what` names the source in errors. */
int ts_config_parse(const char *json, const char *gen_json, const char *what, ts_config *c, ts_error *err);

#endif
