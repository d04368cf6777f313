/* engine.c: open a model directory into an immutable engine.
 *
 * Opening reads config.json, maps the safetensors, binds and checks every
 * tensor the config calls for. Tensors the model does not use are allowed
 * (the vision tower, extra heads) and listed in verbose mode.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"

void ts_engine_params_default(ts_engine_params *p) {
    memset(p, 0, sizeof *p);
}

void ts_engine_close(ts_engine *e) {
    if (!e) return;
    ts_dflash_free(e->dflash);
    ts_model_free(&e->model);
    ts_backend_free(e->be);
    ts_st_close(e->st);
    ts_free(e->dir);
    ts_free(e);
}

int ts_engine_open(const char *dir, const ts_engine_params *p, ts_engine **out, ts_error *err) {
    *out = NULL;
    if (!dir || !*dir) return ts_fail(err, TS_E_ARG, "no model directory given");
    ts_engine *e = ts_alloc(sizeof *e, TS_MEM_MISC);
    if (!e) return ts_fail(err, TS_E_NOMEM, "out of memory");
    if (p) e->params = *p;
    else ts_engine_params_default(&e->params);
    const int ab = e->params.act_bits;
    if (ab != 0 && ab != 8 && ab != 16 && ab != 24) {
        ts_free(e);
        return ts_fail(err, TS_E_ARG, "activation precision of %d bits: use 8, 16 or 24", ab);
    }
    e->dir = ts_strdup(dir, TS_MEM_MISC);
    /* before binding: preparing the weights already runs on the backend */
    ts_backend_params bp = {e->params.n_threads, e->params.kernels};
    int rc = ts_cpu_backend_new(&bp, &e->be, err);
    if (rc) { ts_engine_close(e); return rc; }
    ts_config cfg;
    rc = ts_config_load(dir, &cfg, err);
    if (!rc) rc = ts_st_open_dir(dir, &e->st, err);
    if (!rc) {
        rc = ts_model_bind(&e->model, &cfg, e->st, e->be, err);
        if (rc) ts_fail_prefix(err, "%s", dir);
        else if (ts_model_set_act_digits(&e->model, (ab ? ab : TS_ACT_BITS_DEFAULT) / 8))
            rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    /* The DFlash drafter: a released drafter is its own repository (z-lab's
     * Qwen3-8B-DFlash-b16 beside Qwen/Qwen3-8B), hence --drafter DIR; the
     * bundled default model carries its trained one in dflash/, so that
     * `--spec dflash` needs nothing else. */
    if (!rc && e->params.dflash) {
        char ddir[4096];
        if (e->params.drafter_dir && *e->params.drafter_dir) snprintf(ddir, sizeof ddir, "%s", e->params.drafter_dir);
        else ts_path_join(ddir, sizeof ddir, dir, "dflash");
        rc = ts_dflash_open(ddir, &e->model.cfg, e->be, 0, NULL, NULL, &e->dflash, err);
        if (!rc) ts_dflash_set_act_digits(e->dflash, (ab ? ab : TS_ACT_BITS_DEFAULT) / 8);
    }
    if (rc) { ts_engine_close(e); return rc; }
    if (e->params.verbose) {
        int unused = 0;
        for (int i = 0; i < e->st->n_tensors; i++) {
            const ts_st_tensor *t = &e->st->tensors[i];
            if (t->used || !strncmp(t->name, "model.visual.", 13)) continue;
            fprintf(stderr, "turbospark: unused tensor '%s'\n", t->name);
            unused++;
        }
        fprintf(stderr, "turbospark: %s: %d tensors, %d unused (vision tower not counted)\n", dir,
                e->st->n_tensors, unused);
    }
    ts_model_info *in = &e->info;
    const ts_config *c = &e->model.cfg;
    in->model_type = e->model.cfg.model_type;
    in->vocab_size = c->vocab;
    in->hidden_size = c->H;
    in->n_layers = c->n_layers;
    in->n_full_attn_layers = c->n_full;
    in->n_experts = c->E;
    in->n_experts_per_tok = c->topk;
    in->has_mtp = e->model.has_mtp;
    in->tied_embeddings = c->tied;
    in->max_position_embeddings = c->max_pos;
    in->n_eos = c->n_eos;
    for (int i = 0; i < c->n_eos; i++) in->eos_ids[i] = c->eos[i];
    in->quant_bits = c->q_bits;
    in->weight_bytes = e->model.weight_bytes;
    if (e->dflash) {
        in->has_dflash = 1;
        in->dflash_block = e->dflash->cfg.block;
        in->dflash_layers = e->dflash->cfg.n_layers;
        in->dflash_taps = e->dflash->cfg.n_taps;
    }
    *out = e;
    return 0;
}

const ts_model_info *ts_engine_info(const ts_engine *e) { return &e->info; }

/* ---- decode traffic (bench) ---- */

static uint64_t layer_bytes(const ts_layer_w *l, const ts_config *c) {
    uint64_t b = 0;
    if (l->full) {
        b += ts_weight_bytes(&l->attn.q_proj) + ts_weight_bytes(&l->attn.k_proj) + ts_weight_bytes(&l->attn.v_proj) +
             ts_weight_bytes(&l->attn.o_proj);
    } else {
        b += ts_weight_bytes(&l->gdn.in_qkv) + ts_weight_bytes(&l->gdn.in_z) + ts_weight_bytes(&l->gdn.in_b) +
             ts_weight_bytes(&l->gdn.in_a) + ts_weight_bytes(&l->gdn.out_proj);
    }
    const ts_ffn_w *f = &l->ffn;
    if (!f->moe) return b + ts_weight_bytes(&f->gate) + ts_weight_bytes(&f->up) + ts_weight_bytes(&f->down);
    b += ts_weight_bytes(&f->router) + ts_weight_bytes(&f->s_gate) + ts_weight_bytes(&f->s_up) +
         ts_weight_bytes(&f->s_down) + ts_weight_bytes(&f->s_gate_w);
    /* only the top-k routed experts are read (all experts have one shape) */
    uint64_t e = ts_weight_bytes(&f->e_gate[0]) + ts_weight_bytes(&f->e_up[0]) + ts_weight_bytes(&f->e_down[0]);
    return b + (uint64_t)c->topk * e;
}

uint64_t ts_engine_state_bytes(const ts_engine *e) {
    const ts_config *c = &e->model.cfg;
    uint64_t per = (uint64_t)c->Hv * c->dk * c->dv * sizeof(float);
    return 2 * per * (uint64_t)(c->n_layers - c->n_full);
}

uint64_t ts_engine_decode_bytes(const ts_engine *e) {
    const ts_model *m = &e->model;
    const ts_config *c = &m->cfg;
    uint64_t b = ts_weight_bytes(&m->head) + ts_weight_bytes(&m->embed) / (uint64_t)c->vocab;
    for (int i = 0; i < c->n_layers; i++) b += layer_bytes(&m->layers[i], c);
    return b;
}
