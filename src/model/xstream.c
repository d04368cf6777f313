/* xstream.c: routed experts read on demand for the forward (xstream.h).
 *
 * Slot contents. A resident quantized expert is repacked at load on
 * backends that prepare weights (weight_bytes > 0: the CPU backend's P16
 * layout for its AVX-512 kernels), and the packed kernel rounds differently
 * from the plain one, so a streamed expert must be prepared the same way to
 * give the same bits. The slot then holds the three prepared matrices (each
 * at a 64-byte aligned offset, as the load-time arena lays them out); the
 * file's bytes pass through an I/O thread's staging buffer and the
 * preparation runs on that thread, overlapping the other reads. On a
 * backend that reads weights in place (weight_bytes 0: other kernel modes,
 * TS_PACK=0) the slot holds the file's bytes at their in-page offset and the
 * views point into it.
 *
 * The views (ts_weight) handed to the backend copy the bound expert's
 * descriptor (shape, quantization, activation precision: everything the
 * load-time setup gave it) and only swap where the bytes are.
 *
 * A device backend (be->dom TS_DOM_DEVICE: CUDA). The slots are device
 * memory from the backend's own alloc (one block, counted in its domain),
 * handed to the cache as caller-owned slots; an I/O thread reads an expert
 * into its host staging buffer and copies it into the slot with the
 * backend's slot_copy, in the layout its upload at open gives a resident
 * expert (weight_parts says where each part goes; xs_runs merges the parts
 * into byte runs: one run for the installs this engine writes), several
 * threads at once.
 *
 * The host tier (--expert-host-cache, device backends): a second cache of
 * the files' bytes in pinned host memory; a device miss is first made
 * resident there (read from the install if it misses too), then copied to
 * the device from it. When it cannot hold every expert it is exclusive: a
 * device miss Y served from host slot h that evicts X from device slot d
 * exchanges them (X's bytes go into h, through a device scratch slot per
 * I/O thread: xs_exchange), and a miss that took a free device slot is
 * dropped from the host, so the two tiers together hold device + host
 * slots of distinct experts and, once both are warm and large enough
 * together, nothing is read from the install. A failed group drops the
 * host slots it renamed (their copies may be partial): those experts are
 * read again when asked for. With a host tier every device miss is in host
 * memory once the host ensure returns, so the device copies (and
 * exchanges) are enqueued on the session's stream by the caller's thread
 * (stream_copy, params.inline_source), ordered before the MoE kernels and
 * waited for by nobody; the stream is synchronized before the host tier
 * may refill a slot they read (the next layer's routes, or the group's
 * end). That is the default for an inclusive tier; an exclusive tier's
 * exchanges run on the I/O threads (slot_copy, one wait each), where the
 * copies back and in of several experts overlap (TS_XC_INLINE=0|1 forces
 * either). The moe call gets the slot of every route and
 * the pool's geometry (ts_moe_args.route_slots / pool_w / pool_stride): the
 * device kernels index the pool by slot exactly as they index a layer's
 * resident experts by id, so a streamed expert runs the resident kernels
 * and the output keeps its bits. Ordering: the device runs the products
 * after the call returns, so before the pins are dropped the stream is
 * synchronized (a later ensure, of this session or another, may refill
 * those slots). Measured cost: bench/experts/RESULTS.md (GPU).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "model/xstream.h"

#define XS_MAX_RUNS 9 /* three matrices of data, scales and biases */

struct ts_xstream {
    const ts_model *m;
    ts_backend *be;
    ts_expert_map *map;
    ts_xc *xc;
    int prepared;
    int device;             /* slots in the backend's (device) memory: `pool` */
    uint8_t *pool;          /* device: n_slots * slot_bytes, from be->ops->alloc */
    void *pinned[2];        /* device: host buffers the backend page-locked (staging, host tier) */
    ts_xc *hxc;             /* device with --expert-host-cache: the pinned host tier (file bytes) */
    int32_t *hids;          /* [E * topk] a group's experts the device tier lacks */
    uint64_t poff[3];       /* prepared: offset of gate, up, down in a slot */
    /* device: a layer's file bytes of one expert -> its slot, as byte runs
     * (slot_copy), and back (a victim saved to the host tier); one run when
     * the file lays the parts out as the slot does */
    ts_copy_run *up_runs, *down_runs; /* [n_layers * XS_MAX_RUNS] */
    int *n_runs;                      /* [n_layers] */
    int exclusive;          /* the host tier keeps what the device lacks (victims saved, promotions dropped) */
    int32_t *claims;        /* [E]: victims one device ensure renamed into host slots (map indices) */
    uint8_t *swap;          /* exclusive: a device scratch slot per I/O thread (xs_exchange) */
    int inline_copies;      /* host tier on a backend with stream_copy: a layer's copies enqueued on
                               the session's stream by the caller's thread (params.inline_source) */
    ts_stream *cur;         /* inline copies: the stream of the MoE call being served (under mu) */
    int n_claims;
    uint64_t slot_bytes;
    int n_slots;
    ts_weight *tab;         /* [3 * E]: gate, up, down views of one group's experts */
    int32_t *mark;          /* [E]: stamp of the group that counted the expert */
    int32_t *slots;         /* [E * topk]: each id's slot, for a group of at most E rows */
    int prefetch;           /* predict the next layer's experts and start their reads */
    int32_t *pred_ids;      /* [E * topk] the prediction (rows of a pass of at most E rows) */
    float *pred_w;          /* [E * topk] */
    int32_t stamp;
    pthread_mutex_t mu, prep_mu;
    int mu_init;
};

/* ---- sizes ---- */

/* The prepared size of one expert on be (0: read in place) and the offset
 * of each matrix in a slot. */
static uint64_t prep_layout(const ts_expert_map *map, const ts_config *cfg, ts_backend *be, uint64_t poff[3], ts_error *err,
                            int *rc) {
    ts_weight w[3];
    static const uint8_t dummy[64];
    *rc = ts_expert_views(map, cfg, 0, dummy, w, err);
    if (*rc || !be->ops->weight_bytes || !be->ops->weight_prepare) return 0;
    uint64_t total = 0;
    for (int j = 0; j < 3; j++) {
        size_t sz = be->ops->weight_bytes(be, &w[j]);
        if (!sz) return 0; /* one matrix read in place: keep the file's bytes for all */
        poff[j] = total;
        total += ((uint64_t)sz + 63) & ~(uint64_t)63;
    }
    return total;
}

/* Host bytes ts_xstream_open allocates itself: device slots add the byte
 * runs, an exclusive host tier its victim list. */
static uint64_t own_bytes(const ts_config *cfg, int n_layers, int device, int exclusive) {
    return sizeof(ts_xstream) + sizeof(ts_weight) * 3 * (size_t)cfg->E + sizeof(int32_t) * (size_t)cfg->E +
           4 * sizeof(int32_t) * (size_t)cfg->E * (size_t)cfg->topk +
           (device ? (sizeof(ts_copy_run) * 2 * XS_MAX_RUNS + sizeof(int)) * (size_t)n_layers : 0) +
           (exclusive ? sizeof(int32_t) * (size_t)cfg->E : 0);
}

/* The host tier's form: exclusive when it cannot hold every expert (or as
 * params.host_exclusive forces). */
static int xs_exclusive(const ts_expert_map *map, const ts_xc_params *p, int host_slots) {
    const int all = (int64_t)host_slots >= (int64_t)map->n_layers * map->E;
    return p->host_exclusive < 0 ? !all : p->host_exclusive != 0;
}

static int xs_prepare(void *user, int layer, int expert, const uint8_t *src, uint8_t *dst);
static int xs_pin(void *user, void *p, uint64_t bytes, int on);
static int xs_source(void *user, int layer, int expert, const uint8_t **bytes);

/* The cache parameters for map on be: the caller's, with this module's
 * preparation. A device backend's slots are its own memory, written by its
 * weight_prepare_1 (the host cannot write them). */
static int xs_params(const ts_expert_map *map, const ts_config *cfg, ts_backend *be, const ts_xc_params *p, void *user,
                     ts_xc_params *q, uint64_t poff[3], ts_error *err) {
    *q = *p;
    int rc;
    uint64_t pb = prep_layout(map, cfg, be, poff, err, &rc);
    if (rc) return rc;
    q->slot_bytes = pb;
    q->prepare = pb ? xs_prepare : NULL;
    q->prepare_user = user;
    if (be->dom == TS_DOM_DEVICE) {
        if (!pb || !be->ops->slot_copy || !be->ops->weight_parts)
            return ts_fail(err, TS_E_UNSUPPORTED, "--expert-cache: the %s backend cannot fill device slots", be->name);
        q->caller_slots = 1;
        if (be->ops->host_pin) q->pin_hook = xs_pin;
        if (p->host_tier_bytes) {
            q->source = xs_source;
            /* a prediction's copies would read host slots while the next
             * layer's host ensure may refill them: off with a host tier */
            q->prefetch = 0;
        }
    } else if (p->host_tier_bytes) {
        return ts_fail(err, TS_E_ARG, "--expert-host-cache: the %s backend's --expert-cache is host memory already (make it larger)",
                       be->name);
    }
    return 0;
}

/* The host tier's parameters (a device backend with host_tier_bytes): the
 * files' bytes in pinned host slots, read as a CPU cache reads them. */
static void xs_tier_params(ts_backend *be, const ts_xc_params *p, void *user, ts_xc_params *h) {
    *h = *p;
    h->cache_bytes = p->host_tier_bytes;
    h->slot_bytes = 0;
    h->prepare = NULL;
    h->source = NULL;
    h->caller_slots = 0;
    h->pool = NULL;
    h->prefetch = 0;
    h->pin_hook = be->ops->host_pin ? xs_pin : NULL;
    h->prepare_user = user;
}

/* The host tier must take any group's device misses at once: a group
 * holds at most the device's slots, and at most E experts of its layer. */
static int xs_tier_check(const ts_config *cfg, const ts_xc_params *p, int dev_slots, int host_slots, uint64_t host_stride,
                         ts_error *err) {
    const int need = dev_slots < cfg->E ? dev_slots : cfg->E;
    if (host_slots >= need) return 0;
    return ts_fail(err, TS_E_ARG, "--expert-host-cache %llu bytes holds %d expert%s of %llu bytes; it needs at least %d (%s)",
                   (unsigned long long)p->host_tier_bytes, host_slots, host_slots == 1 ? "" : "s",
                   (unsigned long long)host_stride, need, need == cfg->E ? "one layer's experts" : "the device slots");
}

/* The host tier as open makes it and the plan counts it: its parameters
 * (*h), sizes, form and the exclusive form's device scratch (*t), checked
 * against the device's dev_slots slots of dev_slot_bytes. */
static int xs_tier(const ts_expert_map *map, const ts_config *cfg, ts_backend *be, const ts_xc_params *p, void *user,
                   int dev_slots, uint64_t dev_slot_bytes, ts_xc_params *h, ts_xstream_tier *t, ts_error *err) {
    memset(t, 0, sizeof *t);
    xs_tier_params(be, p, user, h);
    ts_xc_plan_parts(map, h, &t->slots, NULL, &t->tables, &t->n_slots);
    t->slot_bytes = ts_xc_slot_stride(map);
    t->exclusive = xs_exclusive(map, p, t->n_slots);
    t->swap_bytes = t->exclusive ? (uint64_t)(p->n_io > 0 ? p->n_io : 4) * dev_slot_bytes : 0;
    return xs_tier_check(cfg, p, dev_slots, t->n_slots, t->slot_bytes, err);
}

int ts_xstream_plan(const ts_config *cfg, const ts_st_set *st, ts_backend *be, const ts_xc_params *p, uint64_t *slots,
                    uint64_t *staging, uint64_t *tables, int *n_slots, uint64_t *slot_bytes, ts_xstream_tier *tier,
                    ts_error *err) {
    if (tier) memset(tier, 0, sizeof *tier);
    if (!be->ops->moe_route)
        return ts_fail(err, TS_E_UNSUPPORTED, "--expert-cache: the %s backend does not stream experts", be->name);
    ts_expert_map *map = NULL;
    int rc = ts_expert_map_build(st, cfg, &map, err);
    if (rc) return rc;
    ts_xc_params q;
    uint64_t poff[3];
    if ((rc = xs_params(map, cfg, be, p, NULL, &q, poff, err))) {
        ts_expert_map_free(map);
        return rc;
    }
    /* prepare must be non-NULL for the sizes to count staging; its user is
     * never called here */
    int ns = 0;
    uint64_t total = ts_xc_plan_parts(map, &q, slots, staging, tables, &ns);
    if (n_slots) *n_slots = ns;
    /* device slots: one block of the backend's, exactly what open allocates */
    if (q.caller_slots && slots && total) *slots = (uint64_t)ns * ((q.slot_bytes + 63) & ~(uint64_t)63);
    if (slot_bytes) *slot_bytes = q.prepare ? (q.slot_bytes + 63) & ~(uint64_t)63 : ts_xc_slot_stride(map);
    if (!total) {
        uint64_t stride = q.prepare ? (q.slot_bytes + 63) & ~(uint64_t)63 : ts_xc_slot_stride(map);
        rc = ts_fail(err, TS_E_ARG,
                     "--expert-cache %llu bytes holds %d expert slot%s of %llu bytes; one layer's top-%d needs at least %d", 
                     (unsigned long long)p->cache_bytes, ns, ns == 1 ? "" : "s", (unsigned long long)stride, cfg->topk, cfg->topk);
    }
    int excl = 0;
    if (!rc && q.source) { /* the host tier */
        ts_xc_params h;
        ts_xstream_tier t;
        rc = xs_tier(map, cfg, be, p, NULL, ns, (q.slot_bytes + 63) & ~(uint64_t)63, &h, &t, err);
        excl = t.exclusive;
        if (!rc && tier) *tier = t;
    }
    if (!rc && total && tables) *tables += ts_expert_map_bytes(map) + own_bytes(cfg, map->n_layers, q.caller_slots, excl);
    ts_expert_map_free(map);
    return rc;
}

/* ---- open / close ---- */

/* Byte runs to or from a device slot: enqueued on the session's stream
 * (inline copies) or copied and waited for on this I/O thread. */
static int xs_copy(ts_xstream *x, void *dst, const void *src, const ts_copy_run *r, int n, int dir) {
    if (!x->inline_copies) return x->be->ops->slot_copy(x->be, dst, src, r, n, dir);
    x->be->ops->stream_copy(x->cur, dst, src, r, n, dir);
    return x->cur->err ? EIO : 0;
}

static int xs_prepare(void *user, int layer, int expert, const uint8_t *src, uint8_t *dst) {
    ts_xstream *x = user;
    ts_weight w[3];
    ts_error e;
    (void)expert;
    /* the slot is device memory: the layer's byte runs (xs_runs checked its views at open) */
    if (x->device) return xs_copy(x, dst, src, x->up_runs + (size_t)layer * XS_MAX_RUNS, x->n_runs[layer], TS_COPY_H2D);
    if (ts_expert_views(x->map, &x->m->cfg, layer, src, w, &e)) return EINVAL;
    /* on this I/O thread alone when the backend can (several prepare at
     * once, next to the reads in flight), else one at a time */
    if (x->be->ops->weight_prepare_1) {
        for (int j = 0; j < 3; j++) {
            int rc = x->be->ops->weight_prepare_1(x->be, &w[j], dst + x->poff[j]);
            if (rc) return rc;
        }
        return 0;
    }
    pthread_mutex_lock(&x->prep_mu);
    for (int j = 0; j < 3; j++) x->be->ops->weight_prepare(x->be, &w[j], dst + x->poff[j]);
    pthread_mutex_unlock(&x->prep_mu);
    return 0;
}

/* Host buffers a device copies from (the staging, the host tier's slots)
 * pinned by the backend: its copies then need no driver staging of their
 * own. A refusal (a locked-memory limit) is not an error: the copies then
 * run from pageable memory, slower. At most two buffers: remembered by
 * address. */
static int xs_pin(void *user, void *p, uint64_t bytes, int on) {
    ts_xstream *x = user;
    if (on) {
        if (x->be->ops->host_pin(x->be, p, (size_t)bytes, 1) == 0)
            for (int i = 0; i < 2; i++)
                if (!x->pinned[i]) { x->pinned[i] = p; break; }
        return 0;
    }
    for (int i = 0; i < 2; i++)
        if (x->pinned[i] == p) {
            x->be->ops->host_pin(x->be, p, (size_t)bytes, 0);
            x->pinned[i] = NULL;
        }
    return 0;
}

/* Exclusive host tier, by exchange: a device miss Y served by host slot h
 * evicts X from device slot d; h is renamed X's (on the caller's thread,
 * inside the device ensure) ... */
static uint8_t *xs_victim(void *user, int ol, int oe, int layer, int e, const uint8_t **src) {
    ts_xstream *x = user;
    const int h = ts_xc_lookup(x->hxc, layer, e);
    if (h < 0 || ts_xc_lookup(x->hxc, ol, oe) >= 0) return NULL; /* nothing to exchange with, or X is there already */
    *src = ts_xc_slot_data(x->hxc, h);
    uint8_t *d = ts_xc_rename(x->hxc, layer, e, ol, oe);
    if (!d) return NULL;
    x->claims[x->n_claims++] = (int32_t)ts_xmap_idx(x->map, ol, oe);
    return d;
}

/* ... and the I/O job swaps the bytes through its own device scratch slot:
 * X from d to the scratch (device to device: ~2 us for 7 MB), Y from h into
 * d, X from the scratch into h, in order on the thread's stream. A victim
 * costs one copy back over the bus (its other direction) and no host slot
 * of its own, so the two tiers hold device + host slots of distinct experts. */
static int xs_exchange(void *user, int worker, int old_layer, int layer, uint8_t *slot, const uint8_t *src, uint8_t *dst) {
    ts_xstream *x = user;
    /* inline, the three are in order on the session's stream and worker is
     * 0: one scratch serves every exchange */
    uint8_t *t = x->swap + (size_t)worker * x->slot_bytes;
    const ts_copy_run all = {0, 0, x->slot_bytes};
    int rc = xs_copy(x, t, slot, &all, 1, TS_COPY_D2D);
    if (!rc) rc = xs_copy(x, slot, src, x->up_runs + (size_t)layer * XS_MAX_RUNS, x->n_runs[layer], TS_COPY_H2D);
    if (!rc) rc = xs_copy(x, dst, t, x->down_runs + (size_t)old_layer * XS_MAX_RUNS, x->n_runs[old_layer], TS_COPY_D2H);
    return rc;
}

/* The byte runs of each layer: every part of the three matrices, from its
 * offset in the expert's file bytes to where weight_prepare places it in
 * the slot (poff + weight_parts), sorted by file offset and merged where
 * both sides are contiguous. The installs this engine writes lay an
 * expert out as [gate: data, scales, biases][up][down], so where the
 * parts' sizes keep the backend's alignment (every released shape) an
 * expert is one run: one copy per miss, one per saved victim. */
static int xs_runs(ts_xstream *x, ts_error *err) {
    static const uint8_t base[64];
    const ts_config *c = &x->m->cfg;
    const int nl = x->map->n_layers;
    x->up_runs = ts_alloc(sizeof(ts_copy_run) * 2 * XS_MAX_RUNS * (size_t)nl, TS_MEM_EXPERT_CACHE);
    x->n_runs = ts_alloc(sizeof(int) * (size_t)nl, TS_MEM_EXPERT_CACHE);
    if (!x->up_runs || !x->n_runs) return ts_fail(err, TS_E_NOMEM, "out of memory for the expert cache");
    x->down_runs = x->up_runs + XS_MAX_RUNS * (size_t)nl;
    for (int L = 0; L < nl; L++) {
        ts_weight w[3];
        int rc = ts_expert_views(x->map, c, L, base, w, err);
        if (rc) return rc;
        ts_copy_run r[XS_MAX_RUNS];
        int n = 0;
        for (int j = 0; j < 3; j++) {
            uint64_t po[3];
            if (!x->be->ops->weight_parts(x->be, &w[j], po))
                return ts_fail(err, TS_E_UNSUPPORTED, "--expert-cache: the %s backend transforms expert weights when it prepares them, so its device slots cannot be filled by copies", x->be->name);
            const int q = w[j].dtype == TS_DTYPE_U32;
            size_t db, sb;
            ts_weight_part_bytes(&w[j], &db, &sb);
            r[n++] = (ts_copy_run){(uint64_t)((const uint8_t *)w[j].data - base), x->poff[j] + po[0], db};
            if (q) {
                r[n++] = (ts_copy_run){(uint64_t)((const uint8_t *)w[j].scales - base), x->poff[j] + po[1], sb};
                r[n++] = (ts_copy_run){(uint64_t)((const uint8_t *)w[j].biases - base), x->poff[j] + po[2], sb};
            }
        }
        for (int i = 1; i < n; i++) /* insertion sort by file offset: nine at most */
            for (int k = i; k > 0 && r[k].src < r[k - 1].src; k--) {
                ts_copy_run t = r[k];
                r[k] = r[k - 1];
                r[k - 1] = t;
            }
        ts_copy_run *u = x->up_runs + (size_t)L * XS_MAX_RUNS, *d = x->down_runs + (size_t)L * XS_MAX_RUNS;
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (m && u[m - 1].src + u[m - 1].bytes == r[i].src && u[m - 1].dst + u[m - 1].bytes == r[i].dst) u[m - 1].bytes += r[i].bytes;
            else u[m++] = r[i];
        }
        for (int i = 0; i < m; i++) d[i] = (ts_copy_run){u[i].dst, u[i].src, u[i].bytes};
        x->n_runs[L] = m;
    }
    return 0;
}

/* The device tier's misses come from the host tier's slots (ts_xstream_moe
 * made them resident and pinned before the device ensure). */
static int xs_source(void *user, int layer, int expert, const uint8_t **bytes) {
    ts_xstream *x = user;
    int slot = ts_xc_lookup(x->hxc, layer, expert);
    if (slot < 0) return ENOENT; /* a prediction's read of an expert the host tier lacks: skipped */
    *bytes = ts_xc_slot_data(x->hxc, slot);
    return 0;
}

void ts_xstream_close(ts_xstream *x) {
    if (!x) return;
    ts_xc_close(x->xc); /* joins the I/O threads: nothing writes the pool after this */
    ts_xc_close(x->hxc);
    ts_free(x->hids);
    ts_free(x->up_runs);
    ts_free(x->n_runs);
    ts_free(x->claims);
    if (x->pool) x->be->ops->free(x->be, x->pool);
    if (x->swap) x->be->ops->free(x->be, x->swap);
    ts_expert_map_free(x->map);
    if (x->mu_init) { pthread_mutex_destroy(&x->mu); pthread_mutex_destroy(&x->prep_mu); }
    ts_free(x->tab);
    ts_free(x->mark);
    ts_free(x->slots);
    ts_free(x->pred_ids);
    ts_free(x->pred_w);
    ts_free(x);
}

int ts_xstream_open(const ts_model *m, const ts_st_set *st, ts_backend *be, const ts_xc_params *p, ts_xstream **out,
                    ts_error *err) {
    *out = NULL;
    const ts_config *c = &m->cfg;
    if (!be->ops->moe_route)
        return ts_fail(err, TS_E_UNSUPPORTED, "--expert-cache: the %s backend does not stream experts", be->name);
    ts_xstream *x = ts_alloc(sizeof *x, TS_MEM_EXPERT_CACHE);
    if (!x) return ts_fail(err, TS_E_NOMEM, "out of memory for the expert cache");
    x->m = m;
    x->be = be;
    int rc = ts_expert_map_build(st, c, &x->map, err);
    ts_xc_params q;
    if (!rc) rc = xs_params(x->map, c, be, p, x, &q, x->poff, err);
    if (!rc) {
        x->prepared = q.prepare != NULL;
        x->slot_bytes = x->prepared ? (q.slot_bytes + 63) & ~(uint64_t)63 : ts_xc_slot_stride(x->map);
        if (q.caller_slots) {
            /* the device slots: as many as the budget holds (the plan's count) */
            int ns = 0;
            ts_xc_plan_parts(x->map, &q, NULL, NULL, NULL, &ns);
            x->device = 1;
            if (ns >= c->topk) {
                x->pool = be->ops->alloc(be, (size_t)ns * x->slot_bytes, TS_MEM_EXPERT_CACHE);
                if (!x->pool)
                    rc = ts_fail(err, TS_E_NOMEM, "--expert-cache: cannot allocate %d device slots of %.2f MiB (%.2f GB) on %s",
                                 ns, (double)x->slot_bytes / (1 << 20), (double)ns * (double)x->slot_bytes / 1e9, be->name);
                q.pool = x->pool;
            }
        }
        if (!rc && x->device) rc = xs_runs(x, err);
        ts_xc_params h;
        ts_xstream_tier t;
        if (!rc && q.source) { /* the pinned host tier in front of the files */
            int dn = 0;
            ts_xc_plan_parts(x->map, &q, NULL, NULL, NULL, &dn);
            rc = xs_tier(x->map, c, be, p, x, dn, x->slot_bytes, &h, &t, err);
            /* Exclusive when the host tier cannot hold every expert: then
             * what it holds should be what the device lacks, so that the
             * two tiers together cover device + host slots of experts (a
             * model of 217 GB of experts on a 141 GB GPU with 128 GB of RAM
             * reads nothing from disk once both are warm). The price is a
             * copy back over the bus for each device victim, which the
             * bus's other direction carries. Inclusive when the host holds
             * all: a victim is still there. */
            x->exclusive = t.exclusive;
            if (!rc && x->exclusive) {
                q.victim = xs_victim;
                q.exchange = xs_exchange;
                x->claims = ts_alloc(sizeof(int32_t) * (size_t)c->E, TS_MEM_EXPERT_CACHE);
                if (!x->claims) rc = ts_fail(err, TS_E_NOMEM, "out of memory for the expert cache");
                if (!rc && !(x->swap = be->ops->alloc(be, (size_t)t.swap_bytes, TS_MEM_EXPERT_CACHE)))
                    rc = ts_fail(err, TS_E_NOMEM, "--expert-host-cache: cannot allocate the I/O threads' device scratch slots (%.2f MiB) on %s",
                                 (double)t.swap_bytes / (1 << 20), be->name);
            }
        }
        /* Inline copies by default for an inclusive tier only: measured
         * (bench/experts/RESULTS.md) +14-16% decode on the 35B-A3B shapes
         * with the tier holding every expert, but -19-20% with the exchanges
         * of an exclusive tier, whose copy back and copy in then share one
         * stream instead of overlapping across the I/O threads */
        const int inl = p->inline_copies < 0 ? !x->exclusive : p->inline_copies != 0;
        if (!rc && q.source && be->ops->stream_copy && inl) {
            /* every device miss is in host memory by then: enqueue its copies
             * on the session's stream from the caller's thread, ordered
             * before the MoE kernels (the stream is synchronized before the
             * host tier may refill a slot: the next layer's routes, or the
             * group's end) */
            q.inline_source = 1;
            x->inline_copies = 1;
        }
        if (!rc) rc = ts_xc_open(x->map, &q, &x->xc, err);
        if (!rc && q.source) rc = ts_xc_open(x->map, &h, &x->hxc, err);
    }
    if (!rc) {
        x->n_slots = ts_xc_n_slots(x->xc);
        x->tab = ts_alloc(sizeof(ts_weight) * 3 * (size_t)c->E, TS_MEM_EXPERT_CACHE);
        x->mark = ts_alloc(sizeof(int32_t) * (size_t)c->E, TS_MEM_EXPERT_CACHE);
        x->slots = ts_alloc(sizeof(int32_t) * (size_t)c->E * (size_t)c->topk, TS_MEM_EXPERT_CACHE);
        x->pred_ids = ts_alloc(sizeof(int32_t) * (size_t)c->E * (size_t)c->topk, TS_MEM_EXPERT_CACHE);
        x->pred_w = ts_alloc(sizeof(float) * (size_t)c->E * (size_t)c->topk, TS_MEM_EXPERT_CACHE);
        x->hids = ts_alloc(sizeof(int32_t) * (size_t)c->E * (size_t)c->topk, TS_MEM_EXPERT_CACHE);
        x->prefetch = q.prefetch;
        if (!x->tab || !x->mark || !x->slots || !x->pred_ids || !x->pred_w || !x->hids)
            rc = ts_fail(err, TS_E_NOMEM, "out of memory for the expert cache");
    }
    if (!rc) {
        if (pthread_mutex_init(&x->mu, NULL)) rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot create a mutex");
        else if (pthread_mutex_init(&x->prep_mu, NULL)) {
            pthread_mutex_destroy(&x->mu);
            rc = ts_fail(err, TS_E_NOMEM, "expert cache: cannot create a mutex");
        } else x->mu_init = 1;
    }
    if (rc) {
        ts_xstream_close(x);
        return rc;
    }
    *out = x;
    return 0;
}

ts_xc *ts_xstream_cache(ts_xstream *x) { return x ? x->xc : NULL; }
ts_xc *ts_xstream_host_tier(ts_xstream *x) { return x ? x->hxc : NULL; }
int ts_xstream_host_exclusive(const ts_xstream *x) { return x && x->hxc && x->exclusive; }
void ts_xstream_lock(ts_xstream *x) { pthread_mutex_lock(&x->mu); }
void ts_xstream_unlock(ts_xstream *x) { pthread_mutex_unlock(&x->mu); }

uint64_t ts_xstream_slot_bytes(const ts_xstream *x, int *prepared) {
    if (prepared) *prepared = x->prepared;
    return x->slot_bytes;
}

/* ---- the MoE layer ---- */

/* The bound expert e of map layer `layer` (its descriptor: shape, quantization,
 * activation precision). */
static const ts_ffn_w *ffn_of(const ts_model *m, int layer) {
    return layer < m->cfg.n_layers ? &m->layers[layer].ffn : &m->mtp.layer.ffn;
}

/* Views of expert e (in `slot`) into the table. */
static int fill_views(ts_xstream *x, int layer, int e, int slot, ts_error *err) {
    const ts_ffn_w *f = ffn_of(x->m, layer);
    const ts_weight *tw[3] = {&f->e_gate[e], &f->e_up[e], &f->e_down[e]};
    const int E = x->m->cfg.E;
    const uint8_t *d = ts_xc_slot_data(x->xc, slot);
    if (x->prepared) {
        for (int j = 0; j < 3; j++) {
            ts_weight *v = &x->tab[(size_t)j * E + e];
            *v = *tw[j];
            /* only the prepared copy exists: the kernels of a backend that
             * prepares read nothing else */
            v->data = v->scales = v->biases = NULL;
            v->packed = d + x->poff[j];
        }
        return 0;
    }
    ts_weight w[3];
    int rc = ts_expert_views(x->map, &x->m->cfg, layer, d, w, err);
    if (rc) return rc;
    for (int j = 0; j < 3; j++) {
        ts_weight *v = &x->tab[(size_t)j * E + e];
        *v = *tw[j];
        v->data = w[j].data;
        v->scales = w[j].scales;
        v->biases = w[j].biases;
        v->packed = NULL;
    }
    return 0;
}

/* The stream keeps 256 bytes of message; an ensure's error is longer at most
 * by a long path. */
static void fail_on(ts_stream *s, int rc, const char *msg) {
    char b[sizeof s->msg - 1];
    size_t n = strlen(msg);
    if (n >= sizeof b) n = sizeof b - 1;
    memcpy(b, msg, n);
    b[n] = 0;
    ts_be_fail(s, rc, b);
}

static int32_t next_stamp(ts_xstream *x) {
    if (++x->stamp == INT32_MAX) {
        memset(x->mark, 0, sizeof(int32_t) * (size_t)x->m->cfg.E);
        x->stamp = 1;
    }
    return x->stamp;
}

void ts_xstream_moe(ts_xstream *x, ts_stream *s, ts_mode md, const ts_moe_args *a0, int layer) {
    const ts_backend_ops *op = s->be->ops;
    ts_moe_args a_ = *a0, *a = &a_;
    ts_weight pw[3];
    if (x->device) {
        /* the pool's slot 0 in the layer's descriptors: the kernels index
         * it by each route's slot (route_slots, set per group below); the
         * router reads the geometry to pick the products the resident
         * layer would */
        const ts_ffn_w *f = ffn_of(x->m, layer);
        const ts_weight *tw[3] = {&f->e_gate[0], &f->e_up[0], &f->e_down[0]};
        for (int j = 0; j < 3; j++) {
            pw[j] = *tw[j];
            pw[j].data = pw[j].scales = pw[j].biases = NULL;
            pw[j].packed = x->pool + x->poff[j];
        }
        a->pool_w = pw;
        a->pool_stride = (int64_t)x->slot_bytes;
    }
    op->moe_route(s, md, a);
    if (s->err) return;
    const int k = a->topk, n = a->n, E = a->E;
    pthread_mutex_lock(&x->mu);
    ts_error err = {0};
    for (int r0 = 0; r0 < n && !s->err;) {
        /* the longest run of rows whose distinct experts fit the slots (at
         * least one row: one row's top-k always fits, open checked that) */
        int32_t st = next_stamp(x);
        int distinct = 0, r1 = r0;
        while (r1 < n) {
            int add = 0;
            for (int j = 0; j < k; j++) {
                int e = a->route_ids[(size_t)r1 * k + j];
                if (e >= 0 && e < E && x->mark[e] != st) add++;
            }
            /* at most E rows a group: the slot-id scratch holds E * topk ids */
            if (r1 > r0 && (distinct + add > x->n_slots || r1 - r0 >= E)) break;
            for (int j = 0; j < k; j++) {
                int e = a->route_ids[(size_t)r1 * k + j];
                if (e >= 0 && e < E) x->mark[e] = st;
            }
            distinct += add;
            r1++;
        }
        const int cnt = (r1 - r0) * k;
        const int32_t *ids = a->route_ids + (size_t)r0 * k;
        int rc = 0;
        if (x->hxc) {
            /* the device tier's misses made resident (and pinned) in the
             * host tier first: the device ensure copies them from there */
            int nh = 0;
            for (int i = 0; i < cnt; i++)
                if (ids[i] >= 0 && ids[i] < E && ts_xc_lookup(x->xc, layer, ids[i]) < 0) x->hids[nh++] = ids[i];
            if (nh) rc = ts_xc_ensure(x->hxc, layer, x->hids, nh, NULL, &err);
        }
        x->n_claims = 0;
        x->cur = s;
        if (!rc) rc = ts_xc_ensure(x->xc, layer, ids, cnt, x->slots, &err);
        if (x->hxc) {
            ts_xc_unpin_all(x->hxc); /* copied to the device (and the victims saved) */
            if (rc) /* a claimed slot may hold a partial copy */
                for (int i = 0; i < x->n_claims; i++) ts_xc_forget(x->hxc, x->claims[i] / E, x->claims[i] % E);
            else if (x->exclusive) {
                /* the device has the experts it just took: their host slots
                 * are free for the ones it lacks */
                const int32_t *fs;
                const int nf = ts_xc_last_filled(x->xc, &fs);
                for (int i = 0; i < nf; i++) {
                    int lf, ef;
                    ts_xc_slot_owner(x->xc, fs[i], &lf, &ef);
                    ts_xc_forget(x->hxc, lf, ef);
                }
            }
        }
        if (rc) {
            fail_on(s, rc, err.msg);
            break;
        }
        st = next_stamp(x);
        for (int i = 0; i < cnt && !rc; i++) {
            int e = ids[i];
            if (x->mark[e] == st) continue;
            x->mark[e] = st;
            rc = fill_views(x, layer, e, x->slots[i], &err);
        }
        if (rc) {
            ts_xc_unpin(x->xc, layer);
            fail_on(s, rc, err.msg);
            break;
        }
        /* Prediction (params.prefetch, a pass that is one group): the next
         * layer's router on this layer's input, whose top-k start reading
         * while this layer computes; the next ensure waits for them. It
         * only moves what the cache holds, never a product. */
        if (x->prefetch && r0 == 0 && r1 == n && layer + 1 < x->m->cfg.n_layers) {
            ts_moe_args pa = *a;
            pa.router = &ffn_of(x->m, layer + 1)->router;
            pa.route_ids = x->pred_ids;
            pa.route_w = x->pred_w;
            op->moe_route(s, md, &pa); /* the logits scratch is free again: this layer's ids are copied */
            if (!s->err) ts_xc_prefetch(x->xc, layer + 1, x->pred_ids, n * k);
        }
        ts_moe_args b = *a;
        b.e_gate = x->tab;
        b.e_up = x->tab + E;
        b.e_down = x->tab + 2 * (size_t)E;
        b.u = a->u + (size_t)r0 * a->H;
        b.t = a->t + (size_t)r0 * a->H;
        b.route_ids = (int32_t *)ids;
        b.route_w = a->route_w + (size_t)r0 * k;
        b.n = r1 - r0;
        b.pass_n = n;
        if (x->device) b.route_slots = x->slots;
        op->moe(s, md, &b);
        /* the CPU's ops are synchronous: the products are done. A device's
         * run after the call: wait for them before the slots may be
         * refilled (by this pass's next group, or another session) */
        if (x->device) op->sync(s); /* a failure is the stream's sticky error */
        ts_xc_unpin(x->xc, layer);
        r0 = r1;
    }
    pthread_mutex_unlock(&x->mu);
}
