/* engine.c: open a model directory into an immutable engine.
 *
 * Opening reads config.json, maps the safetensors, binds and checks every
 * tensor the config calls for. Tensors the model does not use are allowed
 * (the vision tower, extra heads) and listed in verbose mode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/shard.h"
#include "model/tp.h"
#include "model/xstream.h"

void ts_engine_params_default(ts_engine_params *p) {
    memset(p, 0, sizeof *p);
}

/* ---- tensor parallelism's switches (engine.h) ---- */

static int env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0");
}
int ts_tp_ranks(const ts_engine_params *ep) {
    const int n = ep ? ep->gpus : 0;
    return n > 1 || (n == 1 && env_on("TS_TP_FORCE")) ? n : 0;
}
int ts_tp_one_device(void) { return env_on("TS_TP_ONE_DEVICE"); }
int ts_tp_nccl(int cuda, int n) {
    const char *cm = getenv("TS_TP_COMM");
    return cuda && !(ts_tp_one_device() && n > 1) && !(cm && !strcmp(cm, "host"));
}
int ts_tp_rank_threads(const ts_engine_params *ep, int n) {
    const int all = ep->n_threads > 0 ? ep->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return TS_MAX(1, all / n);
}

/* ---- backend selection ---- */

static void sum_device(void *user, const char *what, ts_mem_cat cat, ts_mem_domain dom, int backend, uint64_t bytes) {
    (void)what, (void)cat, (void)backend;
    if (dom == TS_DOM_DEVICE) *(uint64_t *)user += bytes;
}

/* The DFlash drafter on a CUDA backend: its attention shape against the
 * kernels' (before anything is uploaded), and its device bytes added to
 * *need (the drafter binder's dry run). A drafter that cannot be read is
 * left to the real open, which names the file (here it would turn into a
 * backend failure, and `auto` into a silent fall back to the CPU). */
static int dflash_on_cuda(ts_engine *e, const ts_config *cfg, uint64_t *need, ts_error *err) {
    char ddir[4096];
    ts_dflash_dir(e->dir, e->params.drafter_dir, ddir, sizeof ddir);
    ts_dflash_cfg dc;
    if (ts_dflash_config_load(ddir, cfg, &dc, NULL)) return 0;
    int rc = ts_cuda_backend_shapes(e->be, dc.D, dc.nq, dc.nkv, dc.rot, 0, 0, 0, 0, 0, 0, 0, err);
    if (rc) return ts_fail_prefix(err, "the DFlash drafter %s", ddir);
    ts_dflash *none = NULL;
    uint64_t dn = 0;
    if (!ts_dflash_open(ddir, cfg, e->be, 1, sum_device, &dn, &none, NULL)) *need += dn;
    return 0;
}

/* need bytes (+ headroom for a session's state and the driver's own)
 * against the free memory of be's device: 0 when they fit or the driver
 * cannot say, else TS_E_NOMEM: "<who> needs X GB of device memory<what>
 * (+ H GB headroom); CUDA device D (name) has F GB free of T GB<tail>". */
static int device_fits(ts_backend *be, int device, uint64_t need, const char *who, const char *what, const char *tail,
                       ts_error *err) {
    char name[128] = "";
    size_t ours = 0, fr = 0, tot = 0;
    const uint64_t slack = (uint64_t)256 << 20;
    if (ts_cuda_backend_info(be, name, sizeof name, &ours, &fr, &tot) || need + slack <= fr) return 0;
    return ts_fail(err, TS_E_NOMEM,
                   "%s needs %.2f GB of device memory%s (+ %.2f GB headroom); CUDA device %d (%s) has %.2f GB free of "
                   "%.2f GB%s", who, (double)need / 1e9, what, (double)slack / 1e9, device, name, (double)fr / 1e9,
                   (double)tot / 1e9, tail);
}

/* A CUDA backend on params.device whose weights fit: the binder's dry run
 * (the plan's own account) against the free device memory, before anything
 * is uploaded. */
static int open_cuda(ts_engine *e, const ts_config *cfg, const ts_xc_params *xp, ts_error *err) {
    ts_backend_params bp = {e->params.n_threads, e->params.kernels, e->params.device, 0, 0};
    int rc = ts_cuda_backend_new(&bp, &e->be, err);
    if (rc) return rc;
    uint64_t need = 0, cache = 0;
    /* attention is always checked: the MTP head is an attention layer too */
    const int has_gdn = cfg->n_layers > cfg->n_full;
    rc = ts_cuda_backend_shapes(e->be, cfg->head_dim, cfg->nq, cfg->nkv, cfg->rot_dim, cfg->dk,
                                cfg->dv, cfg->conv_k, cfg->Hk, has_gdn ? cfg->Hv : 0, cfg->is_moe ? cfg->E : 0,
                                cfg->topk, err);
    /* expert streaming: the routed experts stay in the files; the device
     * slots are what --expert-cache asks for */
    if (!rc) rc = ts_model_size_opts(cfg, e->st, e->be, xp != NULL, sum_device, &need, NULL, NULL, err);
    if (!rc && xp) rc = ts_xstream_plan(cfg, e->st, e->be, xp, &cache, NULL, NULL, NULL, NULL, NULL, err);
    need += cache;
    if (!rc && e->params.dflash) rc = dflash_on_cuda(e, cfg, &need, err);
    if (!rc) rc = ts_cuda_backend_check(e->be, err);
    if (!rc)
        rc = device_fits(e->be, e->params.device, need, "the model",
                         cache ? " for its weights and its --expert-cache slots" : " for its weights", "", err);
    if (rc) {
        ts_backend_free(e->be);
        e->be = NULL;
        return rc;
    }
    /* the real bind reports the upload's progress for large models */
    ts_backend_free(e->be);
    bp.progress = need > ((uint64_t)2 << 30) || e->params.verbose;
    return ts_cuda_backend_new(&bp, &e->be, err);
}

/* xp: the expert cache's parameters, NULL without --expert-cache */
static int open_backend(ts_engine *e, const ts_config *cfg, const ts_xc_params *xp, ts_error *err) {
    const char *want = e->params.backend && *e->params.backend ? e->params.backend : "cpu";
    ts_backend_params bp = {e->params.n_threads, e->params.kernels, 0, 0, 0};
    if (!strcmp(want, "cpu")) return ts_cpu_backend_new(&bp, &e->be, err);
    if (!strcmp(want, "cuda")) {
        int rc = open_cuda(e, cfg, xp, err);
        return rc ? ts_fail_prefix(err, "--backend cuda") : 0;
    }
    if (strcmp(want, "auto")) return ts_fail(err, TS_E_ARG, "backend '%s': use auto, cpu or cuda", want);
    ts_error ce = {0};
    if (!ts_cuda_built()) return ts_cpu_backend_new(&bp, &e->be, err); /* a build without CUDA: the CPU, silently */
    if (!open_cuda(e, cfg, xp, &ce)) return 0;
    fprintf(stderr, "turbospark: --backend auto: %s; running on the CPU\n", ce.msg);
    return ts_cpu_backend_new(&bp, &e->be, err);
}

/* (a thread's buffer: the engine object's size is part of the frozen plans) */
const char *ts_engine_backend(const ts_engine *e) {
    static __thread char label[192];
    const int N = e->model.tp ? ts_tp_n(e->model.tp) : 1;
    const char *ranks = N == 1 ? "rank" : "ranks";
    if (!e->be || strcmp(e->be->name, "cuda")) {
        if (!e->model.tp) return "cpu";
        snprintf(label, sizeof label, "cpu, %d tensor-parallel %s (%s collectives)", N, ranks, ts_tp_comm(e->model.tp)->name);
        return label;
    }
    char name[128] = "?";
    ts_cuda_backend_info(e->be, name, sizeof name, NULL, NULL, NULL);
    snprintf(label, sizeof label, "cuda:%d (%s)", e->params.device, name);
    if (e->model.tp) { /* (TS_TP_FORCE: one rank, through the collectives) */
        const size_t l = strlen(label);
        snprintf(label + l, sizeof label - l, ", %d tensor-parallel %s on %s (%s collectives)", N, ranks,
                 N > 1 && ts_tp_one_device() ? "this one device" : N > 1 ? "consecutive devices" : "it",
                 ts_tp_comm(e->model.tp)->name);
    }
    return label;
}

int ts_engine_device_mem(const ts_engine *e, size_t *ours, size_t *free_bytes, size_t *total_bytes) {
    if (!e->be || strcmp(e->be->name, "cuda")) return TS_E_UNSUPPORTED;
    return ts_cuda_backend_info(e->be, NULL, 0, ours, free_bytes, total_bytes);
}

double ts_engine_copy_probe(ts_engine *e, size_t bytes) {
    if (!e->be || strcmp(e->be->name, "cuda")) return -1;
    return ts_cuda_copy_probe(e->be, bytes);
}

void ts_session_graph_stats(const ts_session *s, int *graphs, long *replays, int *kernels, double *launch_us) {
    ts_cuda_stream_stats(s->st.s, graphs, replays, kernels, launch_us);
}

void ts_session_override_drafts(ts_session *s, ts_draft_override fn, void *user) {
    s->test_drafts = fn;
    s->test_user = user;
}

/* A rank's engine of tensor parallelism (rank 0's is the engine itself). */
static void rank_close(ts_engine *r) {
    ts_model_free(&r->model);
    ts_backend_free(r->be);
    ts_st_close(r->tp_set);
    ts_free(r->tp_img);
    ts_free(r->dir);
    ts_free(r);
}

void ts_engine_close(ts_engine *e) {
    if (!e) return;
    if (e->model.tp) ts_tp_free(e->model.tp); /* its threads first: they run the ranks' passes */
    for (int r = 1; r < TS_TP_MAX; r++)
        if (e->tp_rank_e[r]) rank_close(e->tp_rank_e[r]);
    e->model.tp = NULL;
    ts_dflash_free(e->dflash);
    ts_xstream_close(e->model.xs); /* before the model and the files it reads */
    e->model.xs = NULL;
    ts_model_free(&e->model);
    ts_backend_free(e->be);
    ts_st_close(e->tp_set);
    ts_free(e->tp_img);
    ts_st_close(e->st);
    ts_free(e->dir);
    ts_free(e);
}

/* Tensor parallelism (params.gpus > 1, model/tp.h): the split, then per
 * rank its slices of the install, its backend and its model bound from the
 * slices; rank 0 is e itself, ranks 1.. engines of their own that e's
 * sessions drive. */
static int open_tp(ts_engine *e, const ts_config *cfg, ts_error *err) {
    const int N = e->params.gpus;
    if (e->params.expert_cache || e->params.dflash)
        return ts_fail(err, TS_E_UNSUPPORTED, "--gpus %d with %s is not built", N,
                       e->params.expert_cache ? "--expert-cache" : "DFlash (--spec dflash)");
    const char *want = e->params.backend && *e->params.backend ? e->params.backend : "cpu";
    int cuda = !strcmp(want, "cuda") || (!strcmp(want, "auto") && ts_cuda_built());
    if (strcmp(want, "cpu") && strcmp(want, "cuda") && strcmp(want, "auto"))
        return ts_fail(err, TS_E_ARG, "backend '%s': use auto, cpu or cuda", want);
    if (cuda && !strcmp(want, "auto")) { /* auto: the GPUs when one is usable, else the CPU, saying so */
        ts_backend *probe = NULL;
        ts_backend_params pb = {e->params.n_threads, e->params.kernels, e->params.device, 0, 0};
        ts_error ce = {0};
        if (ts_cuda_backend_new(&pb, &probe, &ce)) {
            fprintf(stderr, "turbospark: --backend auto: %s; running the %d ranks on the CPU\n", ce.msg, N);
            cuda = 0;
        }
        ts_backend_free(probe);
    }
    ts_shard sh;
    int rc = ts_shard_make_opts(cfg, N, 1, &sh, err);
    if (rc) return ts_fail_prefix(err, "--gpus %d", N);
    ts_tp *tp = ts_tp_new(N, NULL);
    if (!tp) return ts_fail(err, TS_E_NOMEM, "--gpus %d: out of memory (or threads) for the ranks", N);
    e->model.tp = tp; /* owned from here: ts_engine_close frees it */
    const int one_device = ts_tp_one_device(), threads = ts_tp_rank_threads(&e->params, N);
    for (int r = 0; r < N && !rc; r++) {
        ts_engine *er = e;
        if (r) {
            if (!(er = e->tp_rank_e[r] = ts_alloc(sizeof *er, TS_MEM_MISC))) return ts_fail(err, TS_E_NOMEM, "out of memory");
            er->params = e->params;
            er->dir = ts_strdup(e->dir, TS_MEM_MISC);
        }
        if ((rc = ts_shard_slice(&sh, r, e->st, &er->tp_img, &er->tp_set, err))) break;
        ts_config lc;
        ts_shard_local_config(&sh, r, &lc);
        ts_backend_params bp = {threads, e->params.kernels, e->params.device + (one_device ? 0 : r), 0,
                                e->params.verbose};
        if (cuda) {
            bp.n_threads = e->params.n_threads;
            rc = ts_cuda_backend_new(&bp, &er->be, err);
            if (!rc)
                rc = ts_cuda_backend_shapes(er->be, lc.head_dim, lc.nq, lc.nkv, lc.rot_dim, lc.dk, lc.dv, lc.conv_k,
                                            lc.Hk, lc.n_layers > lc.n_full ? lc.Hv : 0, lc.is_moe ? lc.E : 0, lc.topk,
                                            err);
        } else {
            rc = ts_cpu_backend_new(&bp, &er->be, err);
        }
        /* the rank's weights against its device's free memory, before
         * anything is uploaded (open_cuda's check, a GPU at a time) */
        if (!rc && cuda) {
            uint64_t need = 0;
            rc = ts_model_size_opts(&lc, er->tp_set, er->be, 0, sum_device, &need, NULL, NULL, err);
            if (!rc)
                rc = device_fits(er->be, bp.device, need, "its share of the weights", "",
                                 " (more GPUs would split it further)", err);
        }
        if (!rc) rc = ts_model_bind(&er->model, &lc, er->tp_set, er->be, err);
        if (!rc && cuda) rc = ts_cuda_backend_check(er->be, err);
        /* on a device the weights are uploaded now: the image goes, as a
         * one-GPU engine's host copy does (nothing reads a bound weight's
         * host bytes on a device backend without expert streaming, which
         * is refused above) */
        if (!rc && cuda) {
            ts_st_close(er->tp_set);
            ts_free(er->tp_img);
            er->tp_set = NULL;
            er->tp_img = NULL;
        }
        if (!rc && ts_model_set_act_digits(&er->model, (e->params.act_bits ? e->params.act_bits : TS_ACT_BITS_DEFAULT) / 8))
            rc = ts_fail(err, TS_E_NOMEM, "out of memory");
        er->model.tp = tp;
        er->model.tp_rank = r;
        ts_tp_set_model(tp, r, &er->model);
        if (rc) ts_fail_prefix(err, "--gpus %d: rank %d (%s device %d)", N, r, cuda ? "CUDA" : "CPU", bp.device);
    }
    /* the collectives: NCCL between GPUs; through host memory on the CPU,
     * for ranks sharing one GPU (NCCL takes one rank a device), or when
     * TS_TP_COMM=host asks */
    const int host = !ts_tp_nccl(cuda, N);
    ts_comm *comm = NULL;
    if (!rc && host && !(comm = ts_comm_host_new(N))) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    if (!rc && !host) {
        ts_backend *bes[TS_TP_MAX];
        for (int r = 0; r < N; r++) bes[r] = r ? e->tp_rank_e[r]->be : e->be;
        if ((rc = ts_cuda_comm_nccl(bes, N, &comm, err))) ts_fail_prefix(err, "--gpus %d", N);
    }
    if (!rc) ts_tp_set_comm(tp, comm);
    return rc;
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
    ts_config cfg;
    int rc = ts_config_load(dir, &cfg, err);
    if (!rc) rc = ts_st_open_dir(dir, &e->st, err);
    const int stream = e->params.expert_cache > 0;
    ts_xc_params xp;
    if (!rc && e->params.expert_host_cache && !stream)
        rc = ts_fail(err, TS_E_ARG, "--expert-host-cache is the tier in front of --expert-cache's device slots: give both");
    if (!rc && stream) rc = ts_engine_xc_params(&e->params, &cfg, &xp, err);
    const int tp = ts_tp_ranks(&e->params) > 0;
    if (!rc && e->params.gpus < 0) rc = ts_fail(err, TS_E_ARG, "--gpus %d: give 1 or more", e->params.gpus);
    if (!rc && tp) rc = open_tp(e, &cfg, err);
    /* before binding: preparing the weights already runs on the backend */
    if (!rc && !tp) rc = open_backend(e, &cfg, stream ? &xp : NULL, err);
    if (!rc && !tp) {
        rc = ts_model_bind_opts(&e->model, &cfg, e->st, e->be, stream, err);
        if (!rc && e->be->dom == TS_DOM_DEVICE) rc = ts_cuda_backend_check(e->be, err);
        if (rc) ts_fail_prefix(err, "%s", dir);
        else if (ts_model_set_act_digits(&e->model, (ab ? ab : TS_ACT_BITS_DEFAULT) / 8))
            rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    /* The DFlash drafter (where it lives: ts_dflash_dir); on CUDA its
     * matrices and vectors go to the device, and a matrix the products
     * cannot read is refused here, naming it */
    if (!rc && e->params.dflash) {
        char ddir[4096];
        ts_dflash_dir(dir, e->params.drafter_dir, ddir, sizeof ddir);
        rc = ts_dflash_open(ddir, &e->model.cfg, e->be, 0, NULL, NULL, &e->dflash, err);
        if (!rc && e->be->dom == TS_DOM_DEVICE && (rc = ts_cuda_backend_check(e->be, err)))
            ts_fail_prefix(err, "the DFlash drafter %s", ddir);
        if (!rc) ts_dflash_set_act_digits(e->dflash, (ab ? ab : TS_ACT_BITS_DEFAULT) / 8);
    }
    /* after the act digits: the streamed views copy the bound descriptors */
    if (!rc && stream) {
        rc = ts_xstream_open(&e->model, e->st, e->be, &xp, &e->model.xs, err);
        /* an expert format the device products cannot read (noted by the
         * slot layout's weight_bytes) */
        if (!rc && e->be->dom == TS_DOM_DEVICE) rc = ts_cuda_backend_check(e->be, err);
        if (rc) ts_fail_prefix(err, "%s", dir);
    }
    if (rc) { ts_engine_close(e); return rc; }
    if (e->params.verbose && !e->model.tp) { /* (the ranks bind their slices, not this set) */
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
    in->tp_ranks = e->model.tp ? ts_tp_n(e->model.tp) : 1;
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

/* ---- expert streaming ---- */

int ts_engine_xc_params(const ts_engine_params *ep, const ts_config *cfg, ts_xc_params *xp, ts_error *err) {
    ts_xc_params_default(xp);
    xp->cache_bytes = ep->expert_cache;
    xp->host_tier_bytes = ep->expert_host_cache;
    if (!cfg->is_moe)
        return ts_fail(err, TS_E_ARG, "--expert-cache: model type '%s' has no routed experts to stream", cfg->model_type);
    if (ep->expert_policy && *ep->expert_policy) {
        xp->policy = ts_xc_policy_parse(ep->expert_policy);
        if (xp->policy == TS_XC_POLICY_N)
            return ts_fail(err, TS_E_ARG, "--expert-policy '%s': use lfru or lru", ep->expert_policy);
    }
    /* environment knobs for measurements (bench/experts), not options */
    const char *v = getenv("TS_XC_IO");
    if (v && *v) xp->n_io = atoi(v);
    v = getenv("TS_XC_DIRECT");
    if (v && *v) xp->direct = atoi(v) != 0;
    v = getenv("TS_XC_HALFLIFE");
    if (v && *v) xp->halflife = atof(v);
    v = getenv("TS_XC_EXCLUSIVE"); /* the host tier exclusive (1) or inclusive (0) whatever its size */
    if (v && *v) xp->host_exclusive = atoi(v) != 0;
    v = getenv("TS_XC_INLINE"); /* host tier: device copies on the session's stream (1) or on the I/O threads (0) */
    if (v && *v) xp->inline_copies = atoi(v) != 0;
    v = getenv("TS_XC_PREFETCH"); /* next-layer prediction (off: bench/experts/RESULTS.md) */
    if (v && *v) xp->prefetch = atoi(v) != 0;
    return 0;
}

int ts_engine_expert_stats(const ts_engine *e, ts_expert_stats *o) {
    memset(o, 0, sizeof *o);
    ts_xc *c = ts_xstream_cache(e->model.xs);
    if (!c) return 0;
    ts_xstream_lock(e->model.xs);
    const ts_xc_stats *s = ts_xc_get_stats(c);
    o->enabled = 1;
    o->n_slots = ts_xc_n_slots(c);
    o->slot_bytes = ts_xstream_slot_bytes(e->model.xs, &o->prepared);
    o->direct_io = s->direct_active;
    o->hits = s->hits;
    o->misses = s->misses;
    o->evictions = s->evictions;
    o->reads = s->reads;
    o->bytes_read = s->bytes_read;
    o->read_errors = s->read_errors;
    o->io_wait_s = s->io_wait_s;
    o->prefetched = s->prefetched;
    o->prefetch_used = s->prefetch_used;
    o->n_layers = s->n_layers;
    ts_xc *h = ts_xstream_host_tier(e->model.xs);
    if (h) {
        const ts_xc_stats *hs = ts_xc_get_stats(h);
        o->host_slots = ts_xc_n_slots(h);
        o->host_hits = hs->hits;
        o->host_misses = hs->misses;
        o->host_bytes_read = hs->bytes_read;
        o->host_io_wait_s = hs->io_wait_s;
        o->host_exclusive = ts_xstream_host_exclusive(e->model.xs);
        o->host_writebacks = s->victims_saved;
    }
    ts_xstream_unlock(e->model.xs);
    return 0;
}

int ts_engine_expert_layer(const ts_engine *e, int L, uint64_t *hits, uint64_t *misses) {
    ts_xc *c = ts_xstream_cache(e->model.xs);
    const ts_xc_stats *s = c ? ts_xc_get_stats(c) : NULL;
    if (!s || L < 0 || L >= s->n_layers) return TS_E_ARG;
    ts_xstream_lock(e->model.xs);
    *hits = s->layer[L].hits;
    *misses = s->layer[L].misses;
    ts_xstream_unlock(e->model.xs);
    return 0;
}

void ts_engine_expert_stats_reset(ts_engine *e) {
    ts_xc *c = ts_xstream_cache(e->model.xs);
    if (!c) return;
    ts_xstream_lock(e->model.xs);
    ts_xc_reset_stats(c);
    if (ts_xstream_host_tier(e->model.xs)) ts_xc_reset_stats(ts_xstream_host_tier(e->model.xs));
    ts_xstream_unlock(e->model.xs);
}

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
