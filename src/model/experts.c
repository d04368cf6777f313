/* experts.c: the expert map, the slot cache and its eviction (experts.h).
 *
 * Owns: finding every (layer, expert)'s byte range from the safetensors
 * headers, the slot pool and its table, the pread pool, the eviction heap.
 * Does not own: the model's use of the slots (the forward binds views into
 * them through the backend contract), the memory plan's printing.
 *
 * Eviction. Both policies keep the evictable (resident, unpinned) slots in
 * one binary min-heap on a key that changes only when its expert is accessed,
 * which is what makes a heap valid while time passes:
 *   LRU:  key = the clock at the last access.
 *   LFRU: a decayed access count c (each routed row adds 1; c halves every
 *         `halflife` forward passes). Comparing c at a common time T is
 *         comparing log2 c(t) - (T - t)/h, so key = t/h + log2 c(t) orders the
 *         slots the same way at every T. This is the LRFU family (Lee et al.,
 *         2001): h -> 0 is LRU, h -> infinity is LFU. It is chosen over LRU-K
 *         because routing is skewed and slowly drifting: a few experts of each
 *         layer are hot over thousands of tokens (frequency matters, LRU keeps
 *         whatever the last token touched), yet the hot set moves with the
 *         topic (pure LFU would pin yesterday's). LRU-K needs K timestamps per
 *         expert and says nothing about how often between them. The counts
 *         are kept for every (layer, expert), resident or not, so an expert
 *         evicted and routed again comes back with its history.
 * The clock advances once per ensure; a forward pass is n_layers ensures.
 *
 * Reads. Every miss of one ensure becomes one job; n_io threads pread jobs
 * in parallel (each job one expert: 1-2 MB on real shapes, large enough that
 * one pread per expert streams well). A job reads the expert to the slot at
 * the expert's own in-page offset; with O_DIRECT it reads the whole
 * page-aligned span around it (the slot stride leaves room), bypassing the
 * page cache so that a streamed model does not also fill RAM with pages.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "model/experts.h"

#define XC_PAGE 4096u

/* ---------------------------------------------------------------- sizes */

int ts_parse_size(const char *s, uint64_t *out, ts_error *err) {
    if (!s || !*s) return ts_fail(err, TS_E_ARG, "size '': empty (expected bytes with an optional K, M, G or T suffix)");
    const char *p = s;
    if (*p < '0' || *p > '9')
        return ts_fail(err, TS_E_ARG, "size '%s': expected a positive number of bytes with an optional K, M, G or T suffix", s);
    uint64_t whole = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10) return ts_fail(err, TS_E_ARG, "size '%s': too large", s);
        whole = whole * 10 + d;
    }
    /* the fraction as an exact integer numerator / 10^digits (up to 9 digits) */
    uint64_t fnum = 0, fden = 1;
    int nfrac = 0;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9') return ts_fail(err, TS_E_ARG, "size '%s': a digit must follow '.'", s);
        for (; *p >= '0' && *p <= '9'; p++, nfrac++)
            if (nfrac < 9) { fnum = fnum * 10 + (uint64_t)(*p - '0'); fden *= 10; }
    }
    uint64_t mult = 1;
    switch (*p) {
    case 'k': case 'K': mult = 1ull << 10; p++; break;
    case 'm': case 'M': mult = 1ull << 20; p++; break;
    case 'g': case 'G': mult = 1ull << 30; p++; break;
    case 't': case 'T': mult = 1ull << 40; p++; break;
    default: break;
    }
    if (mult > 1 && p[0] == 'i' && p[1] == 'B') p += 2;
    else if (p[0] == 'B') p++;
    if (*p) return ts_fail(err, TS_E_ARG, "size '%s': unexpected '%s' (suffixes: K, M, G, T, optionally followed by B or iB)", s, p);
    if (nfrac && mult == 1) return ts_fail(err, TS_E_ARG, "size '%s': a fraction of a byte", s);
    if (whole > UINT64_MAX / mult) return ts_fail(err, TS_E_ARG, "size '%s': too large", s);
    uint64_t v = whole * mult;
    /* round(fnum * mult / fden). fnum < fden <= 10^9 < 2^30 but mult goes to 2^40, so
     * fnum * mult need not fit in 64 bits (".999999999T" wrapped): with mult = 2^20 * m2,
     * fnum * 2^20 = q1 * fden + r1 (both sides < 2^50), and the rounded quotient is
     * q1 * m2 + round(r1 * m2 / fden), r1 * m2 < 2^50. */
    uint64_t fr;
    if (mult <= 1ull << 20) {
        fr = (fnum * mult + fden / 2) / fden;
    } else {
        const uint64_t m2 = mult >> 20, x = fnum << 20, q1 = x / fden, r1 = x % fden;
        fr = q1 * m2 + (r1 * m2 + fden / 2) / fden;
    }
    if (v > UINT64_MAX - fr) return ts_fail(err, TS_E_ARG, "size '%s': too large", s);
    v += fr;
    if (v == 0) return ts_fail(err, TS_E_ARG, "size '%s': must be more than zero bytes", s);
    *out = v;
    return 0;
}

/* ------------------------------------------------------------- the map */

static const char *PROJ[3] = {"gate_proj", "up_proj", "down_proj"};
static const char *QPART[3] = {"weight", "scales", "biases"};

/* A planned set (ts_st_open_planned: the memory plan of a shape) has no
 * mapping: offsets are then relative to the data section, which changes no
 * size the plan needs. */
static uint64_t header_len(const ts_st_file *f) {
    const unsigned char *b = f->map;
    if (!b) return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
    return n;
}

void ts_expert_map_free(ts_expert_map *m) {
    if (!m) return;
    if (m->paths)
        for (int i = 0; i < m->n_files; i++) ts_free(m->paths[i]);
    ts_free(m->paths);
    ts_free(m->parts);
    ts_free(m->file);
    ts_free(m->off);
    ts_free(m->bytes);
    ts_free(m);
}

uint64_t ts_expert_map_bytes(const ts_expert_map *m) {
    size_t n = (size_t)m->n_layers * m->E;
    uint64_t b = sizeof *m + n * (sizeof *m->file + sizeof *m->off + sizeof *m->bytes);
    if (m->parts) b += sizeof *m->parts * TS_XMAP_MAX_PARTS * m->n_layers;
    if (m->paths) {
        b += sizeof *m->paths * m->n_files;
        for (int i = 0; i < m->n_files; i++) b += strlen(m->paths[i]) + 1;
    }
    return b;
}

static int map_alloc(ts_expert_map *m, int n_layers, int E, int n_files, ts_error *err) {
    size_t n = (size_t)n_layers * E;
    m->n_layers = n_layers;
    m->E = E;
    m->file = ts_alloc(sizeof *m->file * n, TS_MEM_EXPERT_CACHE);
    m->off = ts_alloc(sizeof *m->off * n, TS_MEM_EXPERT_CACHE);
    m->bytes = ts_alloc(sizeof *m->bytes * n, TS_MEM_EXPERT_CACHE);
    if (n_files) m->paths = ts_alloc(sizeof *m->paths * n_files, TS_MEM_EXPERT_CACHE);
    if (!m->file || !m->off || !m->bytes || (n_files && !m->paths)) return ts_fail(err, TS_E_NOMEM, "out of memory for the expert map");
    m->n_files = n_files;
    return 0;
}

int ts_expert_map_synthetic(int n_layers, int E, int topk, uint64_t bytes, ts_expert_map **out, ts_error *err) {
    *out = NULL;
    if (n_layers <= 0 || E <= 0 || topk <= 0 || topk > E || bytes == 0)
        return ts_fail(err, TS_E_ARG, "synthetic expert map: bad shape (layers %d, experts %d, top-k %d, %llu bytes)", n_layers, E, topk,
                       (unsigned long long)bytes);
    ts_expert_map *m = ts_alloc(sizeof *m, TS_MEM_EXPERT_CACHE);
    if (!m) return ts_fail(err, TS_E_NOMEM, "out of memory for the expert map");
    int rc = map_alloc(m, n_layers, E, 0, err);
    if (rc) { ts_expert_map_free(m); return rc; }
    m->n_main = n_layers;
    m->topk = topk;
    m->expert_bytes = bytes;
    for (size_t i = 0; i < (size_t)n_layers * E; i++) { m->file[i] = -1; m->off[i] = (uint64_t)i * bytes; m->bytes[i] = bytes; }
    *out = m;
    return 0;
}

typedef struct xpart_loc {
    const ts_st_tensor *t;
    uint64_t off;
    int q; /* index into the layer's expected part list, for the suffix */
} xpart_loc;

/* Explain why `P mlp.experts.0.gate_proj.weight` is absent: another expert
 * layout (fused or stacked), or simply missing. */
static int layout_fail(const ts_st_set *st, const char *p, ts_error *err) {
    char n[512];
    snprintf(n, sizeof n, "%smlp.experts.gate_up_proj", p);
    if (ts_st_find(st, n))
        return ts_fail(err, TS_E_MODEL,
                       "tensor '%s': fused experts (one expert's gate, up and down are not one contiguous range); expert streaming "
                       "needs an install with per-expert ranges: run `turbospark convert` on this checkpoint",
                       n);
    snprintf(n, sizeof n, "%smlp.switch_mlp.gate_proj.weight", p);
    if (ts_st_find(st, n))
        return ts_fail(err, TS_E_MODEL,
                       "tensor '%s': stacked experts (one expert's weights, scales and biases lie in separate tensors, not one "
                       "contiguous range); expert streaming needs an install with per-expert ranges: run `turbospark convert`",
                       n);
    snprintf(n, sizeof n, "%smlp.experts.0.gate_proj.weight", p);
    return ts_fail(err, TS_E_MODEL, "missing tensor '%s' (expert streaming reads routed experts per expert)", n);
}

/* One layer's E experts under prefix p into map layer ml. */
static int map_layer(ts_expert_map *m, const ts_st_set *st, const char *p, int ml, ts_error *err) {
    char n[512];
    snprintf(n, sizeof n, "%smlp.experts.0.gate_proj.weight", p);
    const ts_st_tensor *t0 = ts_st_find(st, n);
    if (!t0) return layout_fail(st, p, err);
    int nq = t0->dtype == TS_DTYPE_U32 ? 3 : 1, np = 3 * nq;
    if (m->n_parts && m->n_parts != np)
        return ts_fail(err, TS_E_MODEL, "tensor '%s': %s, but earlier layers' experts are %s", n, nq == 3 ? "quantized" : "not quantized",
                       nq == 3 ? "not" : "quantized");
    m->n_parts = np;
    ts_xmap_part *lp = m->parts + (size_t)ml * TS_XMAP_MAX_PARTS;
    for (int e = 0; e < m->E; e++) {
        xpart_loc loc[TS_XMAP_MAX_PARTS];
        int f = -1;
        for (int j = 0; j < np; j++) {
            snprintf(n, sizeof n, "%smlp.experts.%d.%s.%s", p, e, PROJ[j / nq], QPART[j % nq]);
            const ts_st_tensor *t = ts_st_find(st, n);
            if (!t) return ts_fail(err, TS_E_MODEL, "missing tensor '%s' (expert streaming reads routed experts per expert)", n);
            if (f < 0) f = t->file;
            if (t->file != f) {
                char a[512];
                snprintf(a, sizeof a, "%smlp.experts.%d.%s.%s", p, e, PROJ[0], QPART[0]);
                return ts_fail(err, TS_E_MODEL,
                               "tensor '%s' lies in %s but '%s' in %s: one expert must be one contiguous range of one file "
                               "(re-run `turbospark convert`)",
                               n, st->files[t->file].path, a, st->files[f].path);
            }
            loc[j].t = t;
            loc[j].q = j;
            loc[j].off = 8 + header_len(&st->files[f]) + t->off;
        }
        /* sort by file offset (np <= 9: insertion sort), then demand adjacency */
        for (int a = 1; a < np; a++)
            for (int b = a; b > 0 && loc[b].off < loc[b - 1].off; b--) { xpart_loc x = loc[b]; loc[b] = loc[b - 1]; loc[b - 1] = x; }
        for (int a = 1; a < np; a++) {
            uint64_t end = loc[a - 1].off + loc[a - 1].t->nbytes;
            if (loc[a].off != end)
                return ts_fail(err, TS_E_MODEL,
                               "tensor '%s' starts at byte %llu of %s, but '%s' ends at byte %llu: layer %d expert %d is not one "
                               "contiguous range (re-run `turbospark convert`)",
                               loc[a].t->name, (unsigned long long)loc[a].off, st->files[f].path, loc[a - 1].t->name,
                               (unsigned long long)end, ml, e);
        }
        uint64_t base = loc[0].off, len = loc[np - 1].off + loc[np - 1].t->nbytes - base;
        size_t ix = ts_xmap_idx(m, ml, e);
        m->file[ix] = f;
        m->off[ix] = base;
        m->bytes[ix] = len;
        if (len > m->expert_bytes) m->expert_bytes = len;
        for (int a = 0; a < np; a++) {
            char suf[32];
            snprintf(suf, sizeof suf, "%s.%s", PROJ[loc[a].q / nq], QPART[loc[a].q % nq]);
            if (e == 0) {
                snprintf(lp[a].suffix, sizeof lp[a].suffix, "%s", suf);
                lp[a].off = loc[a].off - base;
                lp[a].nbytes = loc[a].t->nbytes;
                lp[a].dtype = loc[a].t->dtype;
            } else if (strcmp(lp[a].suffix, suf) || lp[a].off != loc[a].off - base || lp[a].nbytes != loc[a].t->nbytes ||
                       lp[a].dtype != loc[a].t->dtype) {
                return ts_fail(err, TS_E_MODEL,
                               "tensor '%s': laid out differently from expert 0 of its layer (offset %llu, %llu bytes inside the "
                               "expert; expert 0 has %s at %llu, %llu bytes)",
                               loc[a].t->name, (unsigned long long)(loc[a].off - base), (unsigned long long)loc[a].t->nbytes,
                               lp[a].suffix, (unsigned long long)lp[a].off, (unsigned long long)lp[a].nbytes);
            }
        }
    }
    return 0;
}

int ts_expert_map_build(const ts_st_set *st, const ts_config *cfg, ts_expert_map **out, ts_error *err) {
    *out = NULL;
    if (!cfg->is_moe || cfg->E <= 0 || cfg->topk <= 0)
        return ts_fail(err, TS_E_MODEL, "expert streaming: model type '%s' has no routed experts", cfg->model_type);
    char n[512];
    const char *pre = "model.language_model.";
    snprintf(n, sizeof n, "%slayers.0.post_attention_layernorm.weight", pre);
    if (!ts_st_find(st, n)) pre = "model.";
    snprintf(n, sizeof n, "mtp.layers.0.mlp.experts.0.gate_proj.weight");
    int mtp = ts_st_find(st, n) != NULL;
    if (!mtp) {
        /* an MTP layer in another expert layout cannot be streamed either */
        snprintf(n, sizeof n, "mtp.layers.0.mlp.experts.gate_up_proj");
        int other = ts_st_find(st, n) != NULL;
        snprintf(n, sizeof n, "mtp.layers.0.mlp.switch_mlp.gate_proj.weight");
        other |= ts_st_find(st, n) != NULL;
        if (other) return layout_fail(st, "mtp.layers.0.", err);
    }
    ts_expert_map *m = ts_alloc(sizeof *m, TS_MEM_EXPERT_CACHE);
    if (!m) return ts_fail(err, TS_E_NOMEM, "out of memory for the expert map");
    int rc = map_alloc(m, cfg->n_layers + mtp, cfg->E, st->n_files, err);
    if (!rc) {
        m->n_main = cfg->n_layers;
        m->topk = cfg->topk;
        m->parts = ts_alloc(sizeof *m->parts * TS_XMAP_MAX_PARTS * m->n_layers, TS_MEM_EXPERT_CACHE);
        if (!m->parts) rc = ts_fail(err, TS_E_NOMEM, "out of memory for the expert map");
    }
    for (int i = 0; !rc && i < st->n_files; i++) {
        m->paths[i] = ts_strdup(st->files[i].path, TS_MEM_EXPERT_CACHE);
        if (!m->paths[i]) rc = ts_fail(err, TS_E_NOMEM, "out of memory for the expert map");
    }
    for (int l = 0; !rc && l < m->n_layers; l++) {
        char p[256];
        if (l < cfg->n_layers) snprintf(p, sizeof p, "%slayers.%d.", pre, l);
        else snprintf(p, sizeof p, "mtp.layers.0.");
        rc = map_layer(m, st, p, l, err);
    }
    if (rc) { ts_expert_map_free(m); return rc; }
    *out = m;
    return 0;
}

static const ts_xmap_part *find_part(const ts_xmap_part *lp, int np, const char *suffix) {
    for (int i = 0; i < np; i++)
        if (!strcmp(lp[i].suffix, suffix)) return &lp[i];
    return NULL;
}

int ts_expert_views(const ts_expert_map *m, const ts_config *cfg, int layer, const uint8_t *data, ts_weight w[3], ts_error *err) {
    if (layer < 0 || layer >= m->n_layers || !m->parts) return ts_fail(err, TS_E_ARG, "expert views: layer %d out of range", layer);
    const ts_xmap_part *lp = m->parts + (size_t)layer * TS_XMAP_MAX_PARTS;
    for (int j = 0; j < 3; j++) {
        ts_weight *v = &w[j];
        memset(v, 0, sizeof *v);
        v->rows = j < 2 ? cfg->Im : cfg->H;
        v->cols = j < 2 ? cfg->H : cfg->Im;
        char suf[32];
        snprintf(suf, sizeof suf, "%s.weight", PROJ[j]);
        const ts_xmap_part *pw = find_part(lp, m->n_parts, suf);
        if (!pw) return ts_fail(err, TS_E_MODEL, "expert views: layer %d has no %s", layer, suf);
        v->dtype = pw->dtype;
        v->data = data + pw->off;
        uint64_t want;
        if (pw->dtype == TS_DTYPE_U32) {
            if (!cfg->q_bits || !cfg->q_group || v->cols % cfg->q_group)
                return ts_fail(err, TS_E_MODEL, "expert views: layer %d %s is quantized but the config's quantization does not fit", layer, suf);
            v->bits = cfg->q_bits;
            v->group = cfg->q_group;
            snprintf(suf, sizeof suf, "%s.scales", PROJ[j]);
            const ts_xmap_part *ps = find_part(lp, m->n_parts, suf);
            snprintf(suf, sizeof suf, "%s.biases", PROJ[j]);
            const ts_xmap_part *pb = find_part(lp, m->n_parts, suf);
            if (!ps || !pb) return ts_fail(err, TS_E_MODEL, "expert views: layer %d lacks %s scales or biases", layer, PROJ[j]);
            v->sdtype = ps->dtype;
            v->scales = data + ps->off;
            v->biases = data + pb->off;
            uint64_t sb = (uint64_t)v->rows * (v->cols / v->group) * ts_dtype_size(ps->dtype);
            if (ps->nbytes != sb || pb->nbytes != sb || pb->dtype != ps->dtype)
                return ts_fail(err, TS_E_MODEL, "expert views: layer %d %s scales/biases are %llu bytes, expected %llu", layer, PROJ[j],
                               (unsigned long long)ps->nbytes, (unsigned long long)sb);
            want = (uint64_t)v->rows * v->cols * v->bits / 8;
        } else {
            want = (uint64_t)v->rows * v->cols * ts_dtype_size(pw->dtype);
        }
        if (pw->nbytes != want)
            return ts_fail(err, TS_E_MODEL, "expert views: layer %d %s.weight is %llu bytes, [%lld, %lld] needs %llu", layer, PROJ[j],
                           (unsigned long long)pw->nbytes, (long long)v->rows, (long long)v->cols, (unsigned long long)want);
    }
    return 0;
}

/* ------------------------------------------------------------ the cache */

const char *ts_xc_policy_name(ts_xc_policy p) {
    return p == TS_XC_LRU ? "lru" : p == TS_XC_LFRU ? "lfru" : "?";
}

ts_xc_policy ts_xc_policy_parse(const char *s) {
    if (!s) return TS_XC_POLICY_N;
    if (!strcmp(s, "lru")) return TS_XC_LRU;
    if (!strcmp(s, "lfru") || !strcmp(s, "freq")) return TS_XC_LFRU;
    return TS_XC_POLICY_N;
}

void ts_xc_params_default(ts_xc_params *p) {
    memset(p, 0, sizeof *p);
    p->policy = TS_XC_LFRU;
    p->n_io = 4;
    p->halflife = 32;
    p->direct = 1;
    p->host_exclusive = -1;
    p->inline_copies = -1;
}

typedef struct xc_job {
    int slot;
    size_t ix;          /* map index */
    int err_no;         /* errno of a failed pread */
    uint64_t got;       /* bytes read of the needed span */
    int short_read;     /* the file ended before the expert did */
    size_t old_ix;      /* the evicted expert whose bytes go to save_dst (exchange) */
    uint8_t *save_dst;  /* NULL: nothing to save (params.victim) */
    const uint8_t *src; /* with save_dst: the miss's bytes */
} xc_job;

struct ts_xc {
    const ts_expert_map *m;
    ts_xc_params p;
    int n_slots;
    uint64_t stride;
    uint8_t *pool_raw, *pool;  /* [n_slots * stride], pool page-aligned */
    int32_t *table;            /* [n_layers * E] slot of each expert, -1 absent */
    int32_t *owner;            /* [n_slots] map index held, -1 empty */
    uint32_t *data_off;        /* [n_slots] where the expert starts in its slot */
    int32_t *pins;             /* [n_slots] */
    int32_t *pinned;           /* [n_slots] slots with pins > 0, unordered */
    int32_t *pinned_pos;       /* [n_slots] index in pinned, -1 */
    int n_pinned;
    int32_t *freel;            /* [n_slots] empty slots */
    int n_free;
    int32_t *heap;             /* [n_slots] evictable slots, min key at 0 */
    int32_t *heap_pos;         /* [n_slots] index in heap, -1 */
    int n_heap;
    double *key;               /* [n_slots] */
    float *cnt;                /* [n_layers * E] LFRU decayed count at t_last */
    uint64_t *t_last;          /* [n_layers * E] */
    uint64_t clock;
    double h;                  /* halflife in clock ticks */
    /* one ensure's scratch */
    int32_t *mark;             /* [E] stamp of the ensure that saw the expert */
    int32_t *uniq;             /* [E] distinct ids in first-seen order */
    int32_t *mult;             /* [E] by expert id: rows routed to it */
    int32_t *took;             /* [E] slots this ensure pinned */
    xc_job *jobs;              /* [E] */
    int32_t stamp;
    int last_hits, last_filled;  /* took[last_hits .. + last_filled) = the last ensure's misses */
    /* files */
    int *fd, *dfd;             /* [n_files] buffered / O_DIRECT (-1) */
    /* I/O threads */
    pthread_t *thr;
    int n_thr, n_started;      /* n_started: staging buffers handed out */
    uint8_t *staging_raw, *staging; /* [n_io * file stride] read buffers of prepared slots */
    uint64_t staging_bytes, pool_bytes;
    int staging_hooked, pool_hooked; /* pin_hook(on = 1) succeeded: call it with 0 before the free */
    uint64_t fstride;          /* a file span's stride (ts_xc_slot_stride) */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int sync_init;
    int n_jobs, next_job, remaining, quit;
    /* prefetch (params.prefetch): one job per slot, a queue the I/O threads
     * take after the waiting caller's jobs, and the slots to settle on the
     * caller's thread once their reads are done (workers touch only jobs
     * and the done flags, under mu) */
    pthread_cond_t adone;
    xc_job *ajobs;             /* [n_slots] */
    int32_t *aq, *infl;        /* [n_slots] queue of slots to read; slots read or being read */
    uint8_t *adone_f, *pref;   /* [n_slots] read finished; holds a prefetched expert not yet asked for */
    int aq_head, aq_n, n_infl, n_running;
    long fail_after;
    ts_xc_stats st;
};

/* ---- heap of evictable slots ---- */

static void heap_swap(ts_xc *c, int a, int b) {
    int32_t sa = c->heap[a], sb = c->heap[b];
    c->heap[a] = sb; c->heap[b] = sa;
    c->heap_pos[sb] = a; c->heap_pos[sa] = b;
}

/* Ties (experts of one LRU ensure share a clock value) go to the lower map
 * index, so the order is deterministic and a reference can replay it. */
static int heap_less(const ts_xc *c, int a, int b) {
    int32_t sa = c->heap[a], sb = c->heap[b];
    return c->key[sa] < c->key[sb] || (c->key[sa] == c->key[sb] && c->owner[sa] < c->owner[sb]);
}

static void heap_up(ts_xc *c, int i) {
    while (i > 0) {
        int pa = (i - 1) / 2;
        if (!heap_less(c, i, pa)) break;
        heap_swap(c, i, pa);
        i = pa;
    }
}

static void heap_down(ts_xc *c, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, b = i;
        if (l < c->n_heap && heap_less(c, l, b)) b = l;
        if (r < c->n_heap && heap_less(c, r, b)) b = r;
        if (b == i) return;
        heap_swap(c, i, b);
        i = b;
    }
}

static void heap_push(ts_xc *c, int s) {
    int i = c->n_heap++;
    c->heap[i] = s;
    c->heap_pos[s] = i;
    heap_up(c, i);
}

static void heap_remove(ts_xc *c, int s) {
    int i = c->heap_pos[s];
    if (i < 0) return;
    int last = --c->n_heap;
    if (i != last) {
        heap_swap(c, i, last);
        c->heap_pos[s] = -1;
        heap_down(c, i);
        heap_up(c, i);
    }
    c->heap_pos[s] = -1;
}

/* ---- pins ---- */

static void pin(ts_xc *c, int s) {
    if (c->pins[s]++ == 0) {
        heap_remove(c, s);
        c->pinned_pos[s] = c->n_pinned;
        c->pinned[c->n_pinned++] = s;
    }
}

/* Drop every pin of slot s; an occupied slot becomes evictable, an empty one free. */
static void unpin_all(ts_xc *c, int s) {
    if (c->pins[s] == 0) return;
    c->pins[s] = 0;
    int i = c->pinned_pos[s], last = --c->n_pinned;
    c->pinned[i] = c->pinned[last];
    c->pinned_pos[c->pinned[i]] = i;
    c->pinned_pos[s] = -1;
    if (c->owner[s] >= 0) heap_push(c, s);
    else c->freel[c->n_free++] = s;
}

static void unpin_one(ts_xc *c, int s) {
    if (c->pins[s] > 1) c->pins[s]--;
    else unpin_all(c, s);
}

/* The policy key of expert ix from its decayed count now, without counting
 * an access (a prefetch, a slot handed over by ts_xc_rename). */
static double xc_rank_now(const ts_xc *c, size_t ix) {
    if (c->p.policy == TS_XC_LRU) return (double)c->clock;
    double cn = (double)c->cnt[ix] * exp2(-(double)(c->clock - c->t_last[ix]) / c->h);
    return (double)c->clock / c->h + log2(cn > 1e-30 ? cn : 1e-30);
}

void ts_xc_unpin_all(ts_xc *c) {
    if (!c) return;
    while (c->n_pinned > 0) unpin_all(c, c->pinned[c->n_pinned - 1]);
}

uint8_t *ts_xc_rename(ts_xc *c, int layer, int expert, int new_layer, int new_expert) {
    const ts_expert_map *m = c ? c->m : NULL;
    if (!c || !c->pool || layer < 0 || layer >= m->n_layers || expert < 0 || expert >= m->E || new_layer < 0 ||
        new_layer >= m->n_layers || new_expert < 0 || new_expert >= m->E)
        return NULL;
    size_t ix = ts_xmap_idx(m, layer, expert), nx = ts_xmap_idx(m, new_layer, new_expert);
    int s = c->table[ix];
    if (s < 0 || c->table[nx] >= 0) return NULL;
    c->table[ix] = -1;
    c->table[nx] = s;
    c->owner[s] = (int32_t)nx;
    c->data_off[s] = c->p.prepare ? 0 : (uint32_t)(m->off[nx] & (XC_PAGE - 1));
    c->key[s] = xc_rank_now(c, nx); /* ranked as a prefetch is */
    if (c->heap_pos[s] >= 0) { /* unpinned: its place in the heap moves with the key */
        heap_remove(c, s);
        heap_push(c, s);
    }
    c->st.renames++;
    return c->pool + (size_t)s * c->stride + c->data_off[s];
}

int ts_xc_forget(ts_xc *c, int layer, int expert) {
    const ts_expert_map *m = c ? c->m : NULL;
    if (!c || layer < 0 || layer >= m->n_layers || expert < 0 || expert >= m->E) return -1;
    size_t ix = ts_xmap_idx(m, layer, expert);
    int s = c->table[ix];
    if (s < 0 || c->pins[s]) return -1;
    heap_remove(c, s);
    if (c->pref) c->pref[s] = 0;
    c->table[ix] = -1;
    c->owner[s] = -1;
    c->freel[c->n_free++] = s;
    return 0;
}

void ts_xc_unpin(ts_xc *c, int layer) {
    if (!c) return;
    for (int i = c->n_pinned - 1; i >= 0; i--) {
        int s = c->pinned[i];
        if (c->owner[s] >= 0 && (int)(c->owner[s] / c->m->E) == layer) unpin_all(c, s);
    }
}

/* ---- I/O ---- */

static void xc_read(ts_xc *c, xc_job *j, int worker) {
    const ts_expert_map *m = c->m;
    uint64_t off = m->off[j->ix], len = m->bytes[j->ix];
    uint64_t a0 = off & ~(uint64_t)(XC_PAGE - 1);
    int f = m->file[j->ix];
    if (j->save_dst) { /* the slot's victim to a tier in front, the miss from it */
        const int L = (int)(j->ix / m->E), Lo = (int)(j->old_ix / m->E);
        int rc = c->p.exchange(c->p.prepare_user, worker, Lo, L, c->pool + (size_t)j->slot * c->stride, j->src, j->save_dst);
        j->err_no = rc;
        j->got = rc ? 0 : len;
        if (!rc) __atomic_add_fetch(&c->st.victims_saved, 1, __ATOMIC_RELAXED);
        return;
    }
    if (c->p.source) { /* a tier in front of the files holds the bytes */
        const int e = (int)(j->ix % m->E), L = (int)(j->ix / m->E);
        const uint8_t *src = NULL;
        int rc = c->p.source(c->p.prepare_user, L, e, &src);
        if (!rc) rc = c->p.prepare(c->p.prepare_user, L, e, src, c->pool + (size_t)j->slot * c->stride);
        j->err_no = rc;
        j->got = rc ? 0 : len;
        return;
    }
    /* prepared slots: read into this thread's staging, then prepare */
    uint8_t *slot = c->p.prepare ? c->staging + (size_t)worker * c->fstride : c->pool + (size_t)j->slot * c->stride;
    /* O_DIRECT: the page-aligned span [a0, align_up(off + len)); it may run
     * past the end of the file (the last expert of a shard), which is why
     * completeness is judged on the expert's own bytes below. */
    int direct = c->dfd[f] >= 0;
    uint64_t r0 = direct ? a0 : off;
    uint64_t r1 = direct ? (off + len + XC_PAGE - 1) & ~(uint64_t)(XC_PAGE - 1) : off + len;
    uint8_t *dst = slot + (r0 - a0);
    uint64_t done = 0, want = r1 - r0, need = off + len - r0;
    /* buffered: optionally ask for the whole range at once (the kernel's
     * readahead otherwise grows its window step by step); measured no gain
     * here (bench/experts/RESULTS.md), so off by default */
    if (!direct && c->p.willneed) posix_fadvise(c->fd[f], (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
    while (done < want) {
        ssize_t r;
        long fa = __atomic_load_n(&c->fail_after, __ATOMIC_RELAXED);
        if (fa > 0 && __atomic_sub_fetch(&c->fail_after, 1, __ATOMIC_RELAXED) == 0) {
            r = -1;
            errno = EIO;
        } else {
            r = pread(direct ? c->dfd[f] : c->fd[f], dst + done, (size_t)(want - done), (off_t)(r0 + done));
        }
        __atomic_add_fetch(&c->st.reads, 1, __ATOMIC_RELAXED);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EINVAL && direct) {
            /* the file system refused this direct read: finish buffered */
            direct = 0;
            continue;
        }
        if (r < 0) { j->err_no = errno; break; }
        if (r == 0) break;
        done += (uint64_t)r;
        __atomic_add_fetch(&c->st.bytes_read, (uint64_t)r, __ATOMIC_RELAXED);
        /* a direct read that stops short at EOF after the expert's bytes is complete */
        if (direct && (r & (XC_PAGE - 1)) && done >= need) break;
    }
    j->got = done;
    if (!j->err_no && done < need) j->short_read = 1;
    if (c->p.prepare && !j->err_no && !j->short_read) {
        int e = (int)(j->ix % m->E), L = (int)(j->ix / m->E);
        int rc = c->p.prepare(c->p.prepare_user, L, e, slot + (off - a0), c->pool + (size_t)j->slot * c->stride);
        if (rc) j->err_no = rc;
    }
}

static void *xc_worker(void *arg) {
    ts_xc *c = arg;
    pthread_mutex_lock(&c->mu);
    const int me = c->n_started++; /* this thread's staging buffer */
    for (;;) {
        while (!c->quit && c->next_job >= c->n_jobs && c->aq_n == 0) pthread_cond_wait(&c->work, &c->mu);
        if (c->quit) break;
        if (c->next_job < c->n_jobs) { /* the waiting caller's reads first */
            xc_job *j = &c->jobs[c->next_job++];
            pthread_mutex_unlock(&c->mu);
            xc_read(c, j, me);
            pthread_mutex_lock(&c->mu);
            if (--c->remaining == 0) pthread_cond_signal(&c->done);
            continue;
        }
        int s = c->aq[c->aq_head];
        c->aq_head = (c->aq_head + 1) % c->n_slots;
        c->aq_n--;
        pthread_mutex_unlock(&c->mu);
        xc_read(c, &c->ajobs[s], me);
        pthread_mutex_lock(&c->mu);
        c->adone_f[s] = 1;
        if (--c->n_running == 0) pthread_cond_broadcast(&c->adone);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Run jobs[0..n) on the I/O threads and wait for all of them. */
static void xc_run_jobs(ts_xc *c, int n) {
    double t0 = ts_now();
    if (c->p.inline_source && c->p.source) {
        /* the bytes are in memory already and prepare only enqueues copies:
         * waking I/O threads would cost more than the jobs */
        for (int i = 0; i < n; i++) xc_read(c, &c->jobs[i], 0);
        c->st.io_wait_s += ts_now() - t0;
        return;
    }
    pthread_mutex_lock(&c->mu);
    c->n_jobs = n;
    c->next_job = 0;
    c->remaining = n;
    pthread_cond_broadcast(&c->work);
    while (c->remaining > 0) pthread_cond_wait(&c->done, &c->mu);
    c->n_jobs = c->next_job = 0;
    pthread_mutex_unlock(&c->mu);
    c->st.io_wait_s += ts_now() - t0;
}

/* ---- open / close ---- */

uint64_t ts_xc_slot_stride(const ts_expert_map *m) {
    return ((m->expert_bytes + XC_PAGE - 1) & ~(uint64_t)(XC_PAGE - 1)) + XC_PAGE;
}

/* Sizes of everything ts_xc_open allocates, in one place so the plan and the
 * allocation cannot drift apart. */
typedef struct xc_sizes { uint64_t pool, per_slot, per_expert, per_e, struct_b, files, threads, layers, staging, prefetch; } xc_sizes;

/* A slot's bytes: the file span, or the prepared size rounded up to 64. */
static uint64_t xc_stride(const ts_expert_map *m, const ts_xc_params *p) {
    return p->prepare ? (p->slot_bytes + 63) & ~(uint64_t)63 : ts_xc_slot_stride(m);
}

static uint64_t xc_staging_bytes(const ts_expert_map *m, const ts_xc_params *p) {
    if (p->dry || !p->prepare || p->source) return 0;
    return (uint64_t)(p->n_io > 0 ? p->n_io : 4) * ts_xc_slot_stride(m) + XC_PAGE;
}

static xc_sizes xc_sizes_of(const ts_expert_map *m, const ts_xc_params *p, int n_slots) {
    xc_sizes z;
    size_t nx = (size_t)m->n_layers * m->E;
    z.pool = p->dry || p->caller_slots ? 0 : (uint64_t)n_slots * xc_stride(m, p) + XC_PAGE;
    z.staging = xc_staging_bytes(m, p);
    z.per_slot = (uint64_t)n_slots * (7 * sizeof(int32_t) + sizeof(uint32_t) + sizeof(double));
    z.per_expert = nx * (sizeof(int32_t) + sizeof(float) + sizeof(uint64_t));
    z.per_e = (uint64_t)m->E * (4 * sizeof(int32_t) + sizeof(xc_job));
    z.struct_b = sizeof(ts_xc);
    z.files = p->dry ? 0 : (uint64_t)m->n_files * 2 * sizeof(int);
    z.threads = p->dry ? 0 : (uint64_t)(p->n_io > 0 ? p->n_io : 4) * sizeof(pthread_t);
    z.layers = (uint64_t)m->n_layers * sizeof(ts_xc_layer_stats);
    z.prefetch = p->prefetch ? (uint64_t)n_slots * (sizeof(xc_job) + 2 * sizeof(int32_t) + 2) : 0;
    return z;
}

static int xc_slots_for(const ts_expert_map *m, const ts_xc_params *p) {
    /* staging comes out of the budget: --expert-cache bounds what streaming
     * holds (caller slots: the budget is the caller's memory, the staging
     * host memory) */
    uint64_t sb = p->caller_slots ? 0 : xc_staging_bytes(m, p), st = xc_stride(m, p);
    if (!st || p->cache_bytes <= sb) return 0;
    uint64_t n = (p->cache_bytes - sb) / st;
    uint64_t cap = (uint64_t)m->n_layers * m->E;
    return (int)(n < cap ? n : cap); /* more slots than experts would never be used */
}

uint64_t ts_xc_plan_parts(const ts_expert_map *m, const ts_xc_params *p, uint64_t *slots, uint64_t *staging, uint64_t *tables,
                          int *n_slots) {
    int n = xc_slots_for(m, p);
    if (n_slots) *n_slots = n;
    if (n < m->topk) {
        if (slots) *slots = 0;
        if (staging) *staging = 0;
        if (tables) *tables = 0;
        return 0;
    }
    xc_sizes z = xc_sizes_of(m, p, n);
    /* ts_alloc rounds nothing: the sum of the requests is the counter's rise */
    uint64_t tb = z.per_slot + z.per_expert + z.per_e + z.struct_b + z.files + z.threads + z.layers + z.prefetch;
    if (slots) *slots = z.pool;
    if (staging) *staging = z.staging;
    if (tables) *tables = tb;
    return z.pool + z.staging + tb;
}

uint64_t ts_xc_plan_bytes(const ts_expert_map *m, const ts_xc_params *p) { return ts_xc_plan_parts(m, p, NULL, NULL, NULL, NULL); }

void ts_xc_close(ts_xc *c) {
    if (!c) return;
    if (c->sync_init) {
        pthread_mutex_lock(&c->mu);
        while (c->n_running > 0) pthread_cond_wait(&c->adone, &c->mu); /* reads in flight write the pool */
        c->quit = 1;
        pthread_cond_broadcast(&c->work);
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < c->n_thr; i++) pthread_join(c->thr[i], NULL);
        pthread_cond_destroy(&c->work);
        pthread_cond_destroy(&c->done);
        pthread_cond_destroy(&c->adone);
        pthread_mutex_destroy(&c->mu);
    }
    if (c->fd)
        for (int i = 0; i < c->m->n_files; i++) {
            if (c->fd[i] >= 0) close(c->fd[i]);
            if (c->dfd[i] >= 0) close(c->dfd[i]);
        }
    ts_free(c->fd);
    ts_free(c->thr);
    if (c->staging_hooked) c->p.pin_hook(c->p.prepare_user, c->staging_raw, c->staging_bytes, 0);
    if (c->pool_hooked) c->p.pin_hook(c->p.prepare_user, c->pool_raw, c->pool_bytes, 0);
    ts_free(c->pool_raw);
    ts_free(c->staging_raw);
    ts_free(c->table);
    ts_free(c->owner); /* the block pins, pinned, ..., data_off and key are carved from */
    ts_free(c->cnt);
    ts_free(c->t_last);
    ts_free(c->mark);
    ts_free(c->jobs);
    ts_free(c->ajobs); /* the block aq, infl, adone_f and pref are carved from */
    ts_free(c->st.layer);
    ts_free(c);
}

int ts_xc_open(const ts_expert_map *m, const ts_xc_params *pp, ts_xc **out, ts_error *err) {
    *out = NULL;
    ts_xc_params p = *pp;
    if (p.n_io <= 0) p.n_io = 4;
    if (p.n_io > 64) return ts_fail(err, TS_E_ARG, "expert cache: %d I/O threads (at most 64)", p.n_io);
    if (p.policy < 0 || p.policy >= TS_XC_POLICY_N) return ts_fail(err, TS_E_ARG, "expert cache: unknown eviction policy %d", (int)p.policy);
    if (p.policy == TS_XC_LFRU && !(p.halflife > 0)) return ts_fail(err, TS_E_ARG, "expert cache: halflife %g must be positive", p.halflife);
    if (!p.dry && m->n_files == 0) return ts_fail(err, TS_E_ARG, "expert cache: the expert map has no files (synthetic): open it dry");
    if (p.prepare && !p.slot_bytes) return ts_fail(err, TS_E_ARG, "expert cache: prepared slots of 0 bytes");
    if (p.caller_slots && !p.dry && (!p.prepare || !p.pool))
        return ts_fail(err, TS_E_ARG, "expert cache: caller-owned slots need a pool and a prepare callback");
    if (p.source && !p.prepare) return ts_fail(err, TS_E_ARG, "expert cache: a source tier needs a prepare callback");
    if (p.victim && (!p.exchange || !p.source)) return ts_fail(err, TS_E_ARG, "expert cache: a victim hook needs exchange and source");
    uint64_t stride = xc_stride(m, &p);
    int n_slots = xc_slots_for(m, &p);
    if (n_slots < m->topk)
        return ts_fail(err, TS_E_ARG,
                       "--expert-cache %llu bytes holds %d expert slot%s of %llu bytes; one layer's top-%d needs at least %d "
                       "(%llu bytes%s)",
                       (unsigned long long)p.cache_bytes, n_slots, n_slots == 1 ? "" : "s", (unsigned long long)stride, m->topk,
                       m->topk, (unsigned long long)(stride * m->topk + (p.caller_slots ? 0 : xc_staging_bytes(m, &p))),
                       xc_staging_bytes(m, &p) && !p.caller_slots ? " with the I/O threads' staging buffers" : "");
    ts_xc *c = ts_alloc(sizeof *c, TS_MEM_EXPERT_CACHE);
    if (!c) return ts_fail(err, TS_E_NOMEM, "out of memory for the expert cache");
    c->m = m;
    c->p = p;
    c->n_slots = n_slots;
    c->stride = stride;
    c->fstride = ts_xc_slot_stride(m);
    c->h = p.halflife * m->n_layers;
    size_t nx = (size_t)m->n_layers * m->E, ns = (size_t)n_slots;
    xc_sizes z = xc_sizes_of(m, &p, n_slots);
    int rc = 0;
    /* one block per element size class, carved up (fewer allocations to fail) */
    c->owner = ts_alloc(z.per_slot, TS_MEM_EXPERT_CACHE);
    c->table = ts_alloc(sizeof(int32_t) * nx, TS_MEM_EXPERT_CACHE);
    c->cnt = ts_alloc(sizeof(float) * nx, TS_MEM_EXPERT_CACHE);
    c->t_last = ts_alloc(sizeof(uint64_t) * nx, TS_MEM_EXPERT_CACHE);
    c->mark = ts_alloc(sizeof(int32_t) * 4 * m->E, TS_MEM_EXPERT_CACHE);
    c->jobs = ts_alloc(sizeof(xc_job) * m->E, TS_MEM_EXPERT_CACHE);
    c->st.layer = ts_alloc(sizeof(ts_xc_layer_stats) * m->n_layers, TS_MEM_EXPERT_CACHE);
    if (z.prefetch) {
        c->ajobs = ts_alloc(z.prefetch, TS_MEM_EXPERT_CACHE);
        if (c->ajobs) {
            c->aq = (int32_t *)(void *)(c->ajobs + ns);
            c->infl = c->aq + ns;
            c->adone_f = (uint8_t *)(c->infl + ns);
            c->pref = c->adone_f + ns;
        }
    }
    if (!c->owner || !c->table || !c->cnt || !c->t_last || !c->mark || !c->jobs || !c->st.layer || (z.prefetch && !c->ajobs)) {
        rc = ts_fail(err, TS_E_NOMEM, "out of memory for the expert cache tables");
        goto fail;
    }
    c->pins = c->owner + ns;
    c->pinned = c->pins + ns;
    c->pinned_pos = c->pinned + ns;
    c->freel = c->pinned_pos + ns;
    c->heap = c->freel + ns;
    c->heap_pos = c->heap + ns;
    c->data_off = (uint32_t *)(c->heap_pos + ns);
    /* 32 bytes per slot precede it, and the block is 64-byte aligned: 8-aligned */
    c->key = (double *)(void *)(c->data_off + ns);
    c->uniq = c->mark + m->E;
    c->mult = c->uniq + m->E;
    c->took = c->mult + m->E;
    c->st.n_layers = m->n_layers;
    for (size_t i = 0; i < nx; i++) c->table[i] = -1;
    for (int s = 0; s < n_slots; s++) {
        c->owner[s] = -1;
        c->pinned_pos[s] = c->heap_pos[s] = -1;
        c->freel[s] = n_slots - 1 - s; /* slot 0 first */
    }
    c->n_free = n_slots;
    if (!p.dry) {
        if (!p.caller_slots) c->pool_raw = ts_alloc(z.pool, TS_MEM_EXPERT_CACHE);
        c->fd = ts_alloc(sizeof(int) * 2 * m->n_files, TS_MEM_EXPERT_CACHE);
        c->thr = ts_alloc(sizeof(pthread_t) * p.n_io, TS_MEM_EXPERT_CACHE);
        if (c->fd) {
            c->dfd = c->fd + m->n_files;
            for (int i = 0; i < m->n_files; i++) c->fd[i] = c->dfd[i] = -1;
        }
        if (z.staging) {
            c->staging_raw = ts_alloc(z.staging, TS_MEM_EXPERT_CACHE);
            if (c->staging_raw) c->staging = (uint8_t *)(((uintptr_t)c->staging_raw + XC_PAGE - 1) & ~(uintptr_t)(XC_PAGE - 1));
            c->staging_bytes = z.staging;
            if (c->staging_raw && p.pin_hook) {
                if (p.pin_hook(p.prepare_user, c->staging_raw, z.staging, 1)) {
                    rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot pin the %llu bytes of the I/O threads' staging",
                                 (unsigned long long)z.staging);
                    goto fail;
                }
                c->staging_hooked = 1;
            }
        }
        if ((!p.caller_slots && !c->pool_raw) || !c->fd || !c->thr || (z.staging && !c->staging_raw)) {
            rc = ts_fail(err, TS_E_NOMEM, "out of memory for the expert cache: %d slots of %llu bytes", n_slots, (unsigned long long)stride);
            goto fail;
        }
        if (p.caller_slots) {
            c->pool = p.pool; /* never touched here: prepare writes it */
        } else {
            c->pool = (uint8_t *)(((uintptr_t)c->pool_raw + XC_PAGE - 1) & ~(uintptr_t)(XC_PAGE - 1));
            /* fault the pool in now: a first touch in the token loop costs a
             * page fault (and, under memory pressure, the kernel's compaction
             * for a huge page) per page; measured ~25 s of system time over
             * the first 8 GB of slots filled on this machine. The cache is
             * the process's from the start, as the plan says. */
            for (uint64_t o = 0; o < z.pool; o += XC_PAGE) ((volatile uint8_t *)c->pool_raw)[o] = 0;
            c->pool_bytes = z.pool;
            if (p.pin_hook) {
                if (p.pin_hook(p.prepare_user, c->pool_raw, z.pool, 1)) {
                    rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot pin its %llu bytes of slots", (unsigned long long)z.pool);
                    goto fail;
                }
                c->pool_hooked = 1;
            }
        }
        for (int i = 0; i < m->n_files; i++) {
            c->fd[i] = open(m->paths[i], O_RDONLY | O_CLOEXEC);
            if (c->fd[i] < 0) {
                rc = ts_fail(err, TS_E_IO, "expert cache: cannot open %s: %s", m->paths[i], strerror(errno));
                goto fail;
            }
            if (p.direct) c->dfd[i] = open(m->paths[i], O_RDONLY | O_CLOEXEC | O_DIRECT);
        }
        c->st.direct_active = p.direct && m->n_files > 0 && c->dfd[0] >= 0;
        if (pthread_mutex_init(&c->mu, NULL)) { rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot create a mutex"); goto fail; }
        if (pthread_cond_init(&c->work, NULL)) { pthread_mutex_destroy(&c->mu); rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot create a condition"); goto fail; }
        if (pthread_cond_init(&c->done, NULL)) {
            pthread_cond_destroy(&c->work);
            pthread_mutex_destroy(&c->mu);
            rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot create a condition");
            goto fail;
        }
        if (pthread_cond_init(&c->adone, NULL)) {
            pthread_cond_destroy(&c->work);
            pthread_cond_destroy(&c->done);
            pthread_mutex_destroy(&c->mu);
            rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot create a condition");
            goto fail;
        }
        c->sync_init = 1;
        for (int i = 0; i < p.n_io; i++) {
            if (pthread_create(&c->thr[i], NULL, xc_worker, c)) {
                rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot start I/O thread %d of %d", i + 1, p.n_io);
                goto fail;
            }
            c->n_thr++;
        }
    }
    *out = c;
    return 0;
fail:
    ts_xc_close(c);
    return rc;
}

/* ---- ensure ---- */

static double xc_touch(ts_xc *c, size_t ix, int w) {
    if (c->p.policy == TS_XC_LRU) return (double)c->clock;
    double dt = (double)(c->clock - c->t_last[ix]);
    double n = (double)c->cnt[ix] * exp2(-dt / c->h) + w;
    c->cnt[ix] = (float)n;
    c->t_last[ix] = c->clock;
    return (double)c->clock / c->h + log2(n);
}

/* Wait for every prefetch read in flight, then settle them on this thread:
 * drop the prefetch's pin (the slot becomes evictable like any other), and
 * empty the slot of a read that failed. */
static void xc_settle(ts_xc *c) {
    if (!c->n_infl) return;
    if (!c->p.dry) {
        double t0 = ts_now();
        pthread_mutex_lock(&c->mu);
        while (c->n_running > 0) pthread_cond_wait(&c->adone, &c->mu);
        pthread_mutex_unlock(&c->mu);
        c->st.io_wait_s += ts_now() - t0;
    }
    for (int i = 0; i < c->n_infl; i++) {
        int s = c->infl[i];
        const xc_job *j = &c->ajobs[s];
        if (!c->p.dry && (j->err_no || j->short_read)) {
            c->table[c->owner[s]] = -1;
            c->owner[s] = -1;
            c->pref[s] = 0;
            c->st.prefetch_errors++;
        }
        c->adone_f[s] = 0;
        unpin_one(c, s);
    }
    c->n_infl = 0;
}

int ts_xc_prefetch(ts_xc *c, int layer, const int32_t *ids, int n) {
    const ts_expert_map *m = c->m;
    if (!c->p.prefetch || layer < 0 || layer >= m->n_layers || n <= 0) return 0;
    xc_settle(c); /* one prefetch in flight at a time: the earlier one's slots are settled first */
    if (++c->stamp == INT32_MAX) { memset(c->mark, 0, sizeof(int32_t) * m->E); c->stamp = 1; }
    int started = 0;
    for (int i = 0; i < n; i++) {
        int e = ids[i];
        if (e < 0 || e >= m->E || c->mark[e] == c->stamp) continue;
        c->mark[e] = c->stamp;
        size_t ix = ts_xmap_idx(m, layer, e);
        if (c->table[ix] >= 0) continue;  /* resident (or already being read) */
        int s;
        if (c->n_free > 0) s = c->freel[--c->n_free];
        else if (c->n_heap > 0) {
            s = c->heap[0]; /* the policy's victim: never a pinned slot */
            heap_remove(c, s);
            if (c->pref[s]) c->pref[s] = 0;
            c->table[c->owner[s]] = -1;
            c->owner[s] = -1;
            c->st.evictions++;
        } else break;
        c->owner[s] = (int32_t)ix;
        c->table[ix] = s;
        c->data_off[s] = c->p.prepare ? 0 : (uint32_t)(m->off[ix] & (XC_PAGE - 1));
        c->key[s] = xc_rank_now(c, ix);
        pin(c, s);
        c->pref[s] = 1;
        c->ajobs[s] = (xc_job){.slot = s, .ix = ix};
        c->infl[c->n_infl++] = s;
        started++;
        if (!c->p.dry) {
            pthread_mutex_lock(&c->mu);
            c->aq[(c->aq_head + c->aq_n) % c->n_slots] = s;
            c->aq_n++;
            c->n_running++;
            pthread_cond_signal(&c->work);
            pthread_mutex_unlock(&c->mu);
        }
    }
    c->st.prefetched += (uint64_t)started;
    return started;
}

int ts_xc_ensure(ts_xc *c, int layer, const int32_t *ids, int n, int32_t *slots, ts_error *err) {
    const ts_expert_map *m = c->m;
    if (c->p.prefetch) xc_settle(c);
    if (layer < 0 || layer >= m->n_layers) return ts_fail(err, TS_E_ARG, "expert cache: layer %d out of range [0, %d)", layer, m->n_layers);
    if (n < 0) return ts_fail(err, TS_E_ARG, "expert cache: %d ids", n);
    /* deduplicate: mark[e] == stamp means e is already in uniq */
    if (++c->stamp == INT32_MAX) { memset(c->mark, 0, sizeof(int32_t) * m->E); c->stamp = 1; }
    int nu = 0, fresh = 0;
    for (int i = 0; i < n; i++) {
        int e = ids[i];
        if (e < 0 || e >= m->E) return ts_fail(err, TS_E_ARG, "expert cache: layer %d: expert id %d out of range [0, %d)", layer, e, m->E);
        if (c->mark[e] != c->stamp) {
            c->mark[e] = c->stamp;
            c->mult[e] = 0;
            c->uniq[nu++] = e;
            int s = c->table[ts_xmap_idx(m, layer, e)];
            fresh += s < 0 || c->pins[s] == 0;
        }
        c->mult[e]++;
    }
    if (c->n_pinned + fresh > c->n_slots)
        return ts_fail(err, TS_E_ARG,
                       "expert cache of %d slots cannot hold layer %d's %d distinct routed experts with %d slots already pinned: "
                       "give --expert-cache at least %llu bytes for batches like this",
                       c->n_slots, layer, nu, c->n_pinned, (unsigned long long)((uint64_t)(c->n_pinned + fresh) * c->stride));
    c->clock++;
    /* hits first, so that no miss of this batch evicts one of its hits */
    int nt = 0, nj = 0;
    for (int u = 0; u < nu; u++) {
        size_t ix = ts_xmap_idx(m, layer, c->uniq[u]);
        double k = xc_touch(c, ix, c->mult[c->uniq[u]]);
        int s = c->table[ix];
        if (s < 0) continue;
        if (c->pref && c->pref[s]) { c->pref[s] = 0; c->st.prefetch_used++; }
        pin(c, s);
        c->key[s] = k;
        c->took[nt++] = s;
    }
    int hits = nt;
    for (int u = 0; u < nu; u++) {
        size_t ix = ts_xmap_idx(m, layer, c->uniq[u]);
        if (c->table[ix] >= 0) continue;
        int s;
        uint8_t *save = NULL;
        const uint8_t *src = NULL;
        size_t old_ix = 0;
        if (c->n_free > 0) {
            s = c->freel[--c->n_free];
        } else {
            /* the capacity check above guarantees an evictable slot */
            s = c->heap[0];
            heap_remove(c, s);
            if (c->pref) c->pref[s] = 0;
            const size_t old = (size_t)c->owner[s];
            c->table[old] = -1;
            c->owner[s] = -1;
            c->st.evictions++;
            if (c->p.victim && !c->p.dry) {
                save = c->p.victim(c->p.prepare_user, (int)(old / m->E), (int)(old % m->E), layer, c->uniq[u], &src);
                old_ix = old;
            }
        }
        c->owner[s] = (int32_t)ix;
        c->data_off[s] = c->p.prepare ? 0 : (uint32_t)(m->off[ix] & (XC_PAGE - 1));
        /* the key xc_touch computed above, from the count it left */
        c->key[s] = c->p.policy == TS_XC_LRU ? (double)c->clock : (double)c->clock / c->h + log2((double)c->cnt[ix]);
        pin(c, s);
        c->took[nt++] = s;
        c->jobs[nj++] = (xc_job){.slot = s, .ix = ix, .old_ix = old_ix, .save_dst = save, .src = src};
    }
    if (nj && !c->p.dry) xc_run_jobs(c, nj);
    int bad = -1;
    for (int j = 0; j < nj && bad < 0; j++)
        if (!c->p.dry && (c->jobs[j].err_no || c->jobs[j].short_read)) bad = j;
    if (bad >= 0) {
        const xc_job *j = &c->jobs[bad];
        size_t ix = j->ix;
        const char *path = m->paths[m->file[ix]];
        int e = (int)(ix % m->E);
        if (j->err_no)
            ts_fail(err, TS_E_IO, "expert cache: reading layer %d expert %d (%llu bytes at offset %llu of %s): %s", layer, e,
                    (unsigned long long)m->bytes[ix], (unsigned long long)m->off[ix], path, strerror(j->err_no));
        else
            ts_fail(err, TS_E_IO,
                    "expert cache: %s ends before layer %d expert %d does (needs bytes up to %llu): the file was truncated", path,
                    layer, e, (unsigned long long)(m->off[ix] + m->bytes[ix]));
        /* undo: every slot read by this call goes back empty (none is in the
         * table yet), every hit loses the pin this call gave it */
        for (int q = 0; q < nj; q++) {
            int s = c->jobs[q].slot;
            c->owner[s] = -1;
            unpin_all(c, s);
        }
        for (int q = 0; q < hits; q++) unpin_one(c, c->took[q]);
        c->st.read_errors++;
        c->last_hits = c->last_filled = 0;
        return TS_E_IO;
    }
    for (int j = 0; j < nj; j++) c->table[c->jobs[j].ix] = c->jobs[j].slot;
    c->last_hits = hits;
    c->last_filled = nj;
    c->st.ensures++;
    c->st.hits += (uint64_t)hits;
    c->st.misses += (uint64_t)nj;
    c->st.layer[layer].hits += (uint64_t)hits;
    c->st.layer[layer].misses += (uint64_t)nj;
    if (slots)
        for (int i = 0; i < n; i++) slots[i] = c->table[ts_xmap_idx(m, layer, ids[i])];
    return 0;
}

const uint8_t *ts_xc_slot_data(const ts_xc *c, int slot) {
    if (!c->pool || slot < 0 || slot >= c->n_slots) return NULL;
    return c->pool + (size_t)slot * c->stride + c->data_off[slot];
}

void ts_xc_slot_owner(const ts_xc *c, int slot, int *layer, int *expert) {
    int o = slot >= 0 && slot < c->n_slots ? c->owner[slot] : -1;
    *layer = o < 0 ? -1 : o / c->m->E;
    *expert = o < 0 ? -1 : o % c->m->E;
}

int ts_xc_last_filled(const ts_xc *c, const int32_t **slots) {
    *slots = c->took + c->last_hits;
    return c->last_filled;
}

int ts_xc_lookup(const ts_xc *c, int layer, int expert) {
    if (!c || layer < 0 || layer >= c->m->n_layers || expert < 0 || expert >= c->m->E) return -1;
    return c->table[ts_xmap_idx(c->m, layer, expert)];
}

int ts_xc_n_slots(const ts_xc *c) { return c->n_slots; }
int ts_xc_pinned(const ts_xc *c) { return c->n_pinned; }
const ts_xc_stats *ts_xc_get_stats(const ts_xc *c) { return &c->st; }

void ts_xc_reset_stats(ts_xc *c) {
    ts_xc_layer_stats *l = c->st.layer;
    int nl = c->st.n_layers, d = c->st.direct_active;
    memset(l, 0, sizeof *l * nl);
    memset(&c->st, 0, sizeof c->st);
    c->st.layer = l;
    c->st.n_layers = nl;
    c->st.direct_active = d;
}

void ts_xc_fail_read_after(ts_xc *c, long n) { __atomic_store_n(&c->fail_after, n, __ATOMIC_RELAXED); }

int ts_xc_reopen_files(ts_xc *c, ts_error *err) {
    if (!c->fd) return 0;
    for (int i = 0; i < c->m->n_files; i++) {
        int fd = open(c->m->paths[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0) return ts_fail(err, TS_E_IO, "expert cache: cannot open %s: %s", c->m->paths[i], strerror(errno));
        close(c->fd[i]);
        c->fd[i] = fd;
        if (c->dfd[i] >= 0) {
            close(c->dfd[i]);
            c->dfd[i] = open(c->m->paths[i], O_RDONLY | O_CLOEXEC | O_DIRECT);
        }
    }
    return 0;
}
