/* xstream.h: the forward's routed experts read on demand (issue 18,
 * --expert-cache), over the slot cache of model/experts.h.
 *
 * Owns: the engine's expert cache (map + slots), what a slot holds (the
 * file's bytes, or the backend's prepared copy of the three matrices when
 * the backend prepares weights: the CPU backend's repacked layout, so that a
 * streamed expert runs the very kernel a resident one runs and the output
 * is the same bits), the table of ts_weight views the backend's moe op reads,
 * and the order of a MoE layer with streamed experts:
 *
 *   1. moe_route over every row of the pass (a verify block, a prompt chunk):
 *      the ids come back to the host in one wait;
 *   2. the rows' routed experts, deduplicated, made resident by one
 *      ts_xc_ensure: every miss is read at once, several in flight (the
 *      cache's I/O threads, which also prepare the copies);
 *   3. the moe op over those rows with the table, then the pins dropped.
 *   Rows whose distinct experts would not fit the slots at once are cut into
 *   consecutive groups (a long prompt chunk through a small cache); a row's
 *   bits do not depend on its group (the moe op is row-exact and routing was
 *   done for the whole pass in step 1).
 *
 * Does not own: routing and the products (the backend), eviction and reads
 * (experts.c), the option (engine.c), the route buffers (the session's
 * scratch: route_ids / route_w, sized [R, topk]).
 *
 * Threads: sessions of one engine share the cache; one MoE layer at a time
 * holds it (a mutex around steps 2-3). On a backend whose ops run
 * asynchronously, step 3 would need a sync before the pins are dropped; the
 * CPU backend's ops are synchronous.
 * Errors: a failed read (EIO, a truncated file) becomes the stream's sticky
 * TS_E_IO error naming the file, layer and expert; the cache is left
 * consistent (no half-read slot, no pins), so the session's next call works
 * if the file is readable again.
 */
#ifndef TS_XSTREAM_H
#define TS_XSTREAM_H

#include "model/experts.h"
#include "model/model.h"

typedef struct ts_xstream ts_xstream;

/* Open the cache for bound model m (bound with stream_experts = 1) over its
 * install st (borrowed, as m is: both must outlive it) on backend be.
 * p: the cache parameters (cache_bytes, policy, n_io, direct); slot_bytes and
 * prepare are this module's. TS_E_MODEL for an install without per-expert
 * contiguous ranges (the message names the tensor), TS_E_ARG for a cache
 * smaller than one layer's top-k, TS_E_UNSUPPORTED for a backend without
 * moe_route. */
int ts_xstream_open(const ts_model *m, const ts_st_set *st, ts_backend *be, const ts_xc_params *p, ts_xstream **out,
                    ts_error *err);
void ts_xstream_close(ts_xstream *x); /* NULL ok */

/* What ts_xstream_open allocates for these parameters (the memory plan), by
 * part: the slots, the I/O threads' staging, the tables (cache, map and
 * views); *n_slots and *slot_bytes: the slot count and size; *tier (may be
 * NULL) the host tier's (p->host_tier_bytes on a device backend: the files'
 * bytes in pinned host slots between the files and the device slots; a
 * device miss is copied from there, a host miss read from the file first).
 * Runs the same checks as open and reads no tensor data. */
typedef struct ts_xstream_tier {
    uint64_t slots, tables, slot_bytes; /* the host tier's pool and tables (host memory) */
    int n_slots;
    int exclusive;                      /* exclusive of the device slots (xstream.c) */
    uint64_t swap_bytes;                /* exclusive: the I/O threads' device scratch slots (device memory) */
} ts_xstream_tier;
int ts_xstream_plan(const ts_config *cfg, const ts_st_set *st, ts_backend *be, const ts_xc_params *p, uint64_t *slots,
                    uint64_t *staging, uint64_t *tables, int *n_slots, uint64_t *slot_bytes, ts_xstream_tier *tier,
                    ts_error *err);
/* The host tier (NULL without one), for its statistics, as ts_xstream_cache. */
ts_xc *ts_xstream_host_tier(ts_xstream *x);
/* 1 when the host tier is exclusive of the device slots (device victims
 * saved into it, the experts the device takes dropped from it). */
int ts_xstream_host_exclusive(const ts_xstream *x);

/* One MoE FFN of a forward pass through the cache (the steps above); a is
 * the resident call's arguments, layer the map layer (main layers, then the
 * MTP layer at cfg.n_layers). Errors go to s (sticky). */
void ts_xstream_moe(ts_xstream *x, ts_stream *s, ts_mode md, const ts_moe_args *a, int layer);

/* The cache, for its statistics (ts_xc_get_stats, ts_xc_reset_stats):
 * between ts_xstream_lock and _unlock, as forwards of other sessions may be
 * updating them. */
ts_xc *ts_xstream_cache(ts_xstream *x);
void ts_xstream_lock(ts_xstream *x);
void ts_xstream_unlock(ts_xstream *x);
/* Bytes of one slot and whether slots hold prepared copies. */
uint64_t ts_xstream_slot_bytes(const ts_xstream *x, int *prepared);

#endif
