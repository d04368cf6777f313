/* experts.h: MoE expert streaming, the engine-independent core (issue 18).
 *
 * Owns three things:
 *
 *   1. The expert map: for an opened install, where every (layer, expert)'s
 *      routed weights live on disk. An install written by `turbospark convert`
 *      or `synth` stores one expert of one layer as nine adjacent tensors
 *      (bf16 checkpoints: three) in one shard:
 *
 *        | P.mlp.experts.{e}.gate_proj.weight | .scales | .biases |
 *        | P.mlp.experts.{e}.up_proj.weight   | .scales | .biases |
 *        | P.mlp.experts.{e}.down_proj.weight | .scales | .biases |
 *
 *      P = "model.language_model.layers.{l}." / "model.layers.{l}." for the
 *      main stack, "mtp.layers.0." for the MTP layer (map layer n_main). A
 *      tensor's file offset is 8 + N + data_offsets[0] (N: the shard's header
 *      length, safetensors.h), so the expert is the byte range [min, max) of
 *      its tensors' ranges, which must sum to max - min (no gap: the writer
 *      pads nothing between tensors). Fused ("experts.gate_up_proj") and MLX
 *      stacked ("switch_mlp") layouts spread one expert over several ranges
 *      and are refused with the tensor's name: convert them first.
 *      Where each tensor sits inside the expert's bytes (part offsets) is
 *      checked to be the same for every expert of a layer, so one table of
 *      views serves every slot.
 *
 *   2. The slot cache (ts_xc): a fixed pool of equal slots, each holding one
 *      expert's bytes, allocated once (TS_MEM_EXPERT_CACHE) at open; a
 *      (layer, expert) -> slot table; ts_xc_ensure takes the routed ids of a
 *      whole batch of rows for one layer, deduplicates them, pins them, reads
 *      every missing expert at once with several preads in flight (a small
 *      pool of I/O threads), and returns each id's slot.
 *
 *   3. Eviction: plain LRU or decayed frequency (LRFU-style, see experts.c),
 *      one min-heap over the unpinned-or-pinned resident slots keyed so that
 *      a key changes only when its expert is accessed.
 *
 * Does not own: the forward that consumes the slots (model/xstream.c, through
 * the backend contract), the CLI option (it calls ts_parse_size), device slots.
 *
 * Wiring (the forward's: model/xstream.c): per MoE layer L of a batch of n
 * rows, after the router's top-k of every row is known (one wait for the
 * whole batch):
 *   ts_xc_ensure(c, L, sel, n * topk, slot, err);   reads all misses at once
 *   for each (row, j): ts_expert_views(map, cfg, L, ts_xc_slot_data(c, slot[..]), w, err)
 *                      (or a per-slot view table built once per slot fill)
 *   ... the expert products ...
 *   ts_xc_unpin(c, L);
 * The MTP layer's experts are map layer map->n_main. A device backend keeps
 * its slots elsewhere but can reuse the table and policy with dry = 1 and
 * do its own copies for the slots ts_xc_last_filled reports.
 *
 * Invariants: a slot in the table holds exactly the file's bytes of its
 * (layer, expert); a failed ensure leaves no half-read slot in the table and
 * no pins of its own; after ts_xc_close (and ts_expert_map_free) the
 * TS_MEM_EXPERT_CACHE counter is back where it was.
 * Threads: one caller thread; the I/O threads touch only their jobs.
 */
#ifndef TS_EXPERTS_H
#define TS_EXPERTS_H

#include "backend.h" /* ts_weight */
#include "loader/config.h"
#include "loader/safetensors.h"

/* ---- sizes ---- */

/* "SIZE" as --expert-cache takes it: a positive number of bytes, optionally
 * with a fraction and one suffix K, M, G, T (powers of 1024, either case),
 * optionally followed by "B" or "iB" ("512M", "1.5G", "64KiB", "4096").
 * Errors (TS_E_ARG, message names the text): empty, negative, zero, a bad
 * character, overflow of 64 bits. *out unchanged on error. */
int ts_parse_size(const char *s, uint64_t *out, ts_error *err);

/* ---- the expert map ---- */

#define TS_XMAP_MAX_PARTS 9

typedef struct ts_xmap_part {
    char suffix[32];     /* "gate_proj.weight", "down_proj.biases", ... */
    uint64_t off;        /* byte offset inside the expert's range */
    uint64_t nbytes;
    ts_dtype dtype;
} ts_xmap_part;

typedef struct ts_expert_map {
    int n_layers;        /* main layers + 1 when the MTP layer has routed experts */
    int n_main;          /* main-stack layers (map layer n_main = the MTP layer) */
    int E, topk;
    uint64_t expert_bytes;  /* bytes of one expert (the largest, all are equal in practice) */
    int n_parts;            /* tensors per expert: 9 quantized, 3 float */
    ts_xmap_part *parts;    /* [n_layers][n_parts], sorted by offset */
    int n_files;
    char **paths;           /* [n_files] owned copies: the map outlives the set */
    int32_t *file;          /* [n_layers * E] index into paths */
    uint64_t *off;          /* [n_layers * E] absolute offset of the expert in its file */
    uint64_t *bytes;        /* [n_layers * E] its length */
} ts_expert_map;

/* Build from an opened install. TS_E_MODEL naming the tensor for a
 * non-MoE config, a missing expert tensor, fused/stacked experts, an expert
 * split over two files, a gap inside an expert, or a layer whose experts are
 * laid out differently. TS_E_NOMEM on allocation failure. */
int ts_expert_map_build(const ts_st_set *st, const ts_config *cfg, ts_expert_map **out, ts_error *err);
/* A map without files (the trace simulator): n_layers x E experts of
 * `bytes` each; no part table. */
int ts_expert_map_synthetic(int n_layers, int E, int topk, uint64_t bytes, ts_expert_map **out, ts_error *err);
void ts_expert_map_free(ts_expert_map *m); /* NULL ok */
/* Bytes the map holds from the counted allocator (TS_MEM_EXPERT_CACHE): with
 * ts_xc_plan_bytes, what --expert-cache adds to the memory plan. */
uint64_t ts_expert_map_bytes(const ts_expert_map *m);

/* Views of one expert of `layer` onto its bytes `data` (a pinned slot's
 * ts_xc_slot_data, or the mapping at map->off): w[0] gate [Im, H], w[1] up
 * [Im, H], w[2] down [H, Im], as the binder (load.c) would make them from the
 * tensors, packed = NULL. TS_E_MODEL if the layer's parts do not have the
 * sizes cfg implies. */
int ts_expert_views(const ts_expert_map *m, const ts_config *cfg, int layer, const uint8_t *data, ts_weight w[3], ts_error *err);

static inline size_t ts_xmap_idx(const ts_expert_map *m, int layer, int e) { return (size_t)layer * m->E + e; }

/* ---- the slot cache ---- */

typedef enum {
    TS_XC_LRU = 0,   /* evict the least recently used unpinned slot */
    TS_XC_LFRU,      /* evict the lowest decayed access count (halflife below) */
    TS_XC_POLICY_N
} ts_xc_policy;

const char *ts_xc_policy_name(ts_xc_policy p);
/* "lru" / "lfru" (also "freq"); TS_XC_POLICY_N if unknown. */
ts_xc_policy ts_xc_policy_parse(const char *s);

typedef struct ts_xc_params {
    uint64_t cache_bytes;   /* the budget: slots = cache_bytes / ts_xc_slot_stride() */
    ts_xc_policy policy;
    int n_io;               /* I/O threads = reads in flight (default 4, 1..64) */
    int direct;             /* 1 (default): O_DIRECT reads of the page-aligned span (falls back
                               to buffered, stats.direct_active = 0, where the file system
                               refuses). Measured 1.4-2.4x buffered preads from a cold page
                               cache here (bench/experts/RESULTS.md), and streamed experts do
                               not also fill RAM with page cache */
    double halflife;        /* TS_XC_LFRU: tokens after which an access counts half
                               (default 32; time advances one token per n_layers ensures) */
    int willneed;           /* buffered reads: posix_fadvise(WILLNEED) the expert's range first
                               (default 0: measured no gain) */
    int dry;                /* 1: bookkeeping only, no pool, no reads (the simulator) */
    /* Prepared slots (0 / NULL: a slot holds the file's bytes). With
     * `prepare` set, each I/O thread reads an expert into its own staging
     * buffer (one file-span stride, page aligned) and then calls
     * prepare(user, layer, expert, bytes, slot) to write the slot's content
     * (the CPU backend's repacked layout: model/xstream.c); slots are then
     * slot_bytes each (rounded up to 64). Nonzero return: the read fails with
     * that errno-like code. Runs on the I/O threads, several at once. */
    uint64_t slot_bytes;
    int (*prepare)(void *user, int layer, int expert, const uint8_t *src, uint8_t *dst);
    void *prepare_user;
    int prefetch;           /* 1: ts_xc_prefetch starts reads that run while the caller computes
                               (off by default: measured in bench/experts/RESULTS.md) */
    /* Slots in memory the caller owns (a device backend's: model/xstream.c
     * allocates them with the backend's alloc). Needs `prepare`, which is
     * then the only thing that writes a slot: the cache never reads, zeroes
     * or faults in that memory, and its own allocation (the plan's `slots`)
     * is 0. The budget is the slots' alone: cache_bytes / stride slots (the
     * staging buffers and tables are host memory, counted apart). `pool`,
     * given to ts_xc_open, is n_slots * slot stride bytes (ts_xc_plan_parts
     * says how many slots); ts_xc_slot_data returns addresses inside it. */
    int caller_slots;
    uint8_t *pool;
    /* Called (user: prepare_user) with each host buffer a device copies
     * from, once it exists (on = 1, at open; nonzero return fails the
     * open) and before it is freed, after the threads are joined (on = 0,
     * at close): the I/O threads' staging (prepared slots), and the pool
     * of a cache that owns it (a host tier). A device backend pins them,
     * so that its copies run at the bus's speed. NULL: nothing. */
    int (*pin_hook)(void *user, void *p, uint64_t bytes, int on);
    /* Where a miss's bytes come from instead of the files (a second tier
     * in front of them: model/xstream.c's pinned host tier): *bytes = the
     * expert's file bytes, readable until the ensure returns; 0, or an
     * errno-like code (the read then fails as a pread would). Needs
     * `prepare`, which is then called with those bytes; no staging. */
    int (*source)(void *user, int layer, int expert, const uint8_t **bytes);
    /* model/xstream.c on a device backend: a second cache of this many
     * bytes of pinned host memory between the files and the device slots
     * (--expert-host-cache; 0: none). The cache itself ignores it. */
    uint64_t host_tier_bytes;
    /* model/xstream.c: the host tier exclusive of the device slots (1),
     * inclusive (0), or exclusive when it cannot hold every expert (-1,
     * the default). The cache itself ignores it. */
    int host_exclusive;
    /* model/xstream.c with a host tier: 1 to enqueue the device copies on
     * the session's stream from the caller's thread, 0 to run them on the
     * I/O threads, -1 (the default): 1 for an inclusive tier, 0 for an
     * exclusive one (measured: xstream.c). The cache ignores it. */
    int inline_copies;
    /* Victims kept by a tier in front (model/xstream.c's exclusive host
     * tier), by exchange: when an ensure evicts (old_layer, old_expert) to
     * refill its slot with a miss (layer, expert) that `source` serves,
     * victim(user, old_layer, old_expert, layer, expert, &src) is called on
     * the caller's thread. It returns where the victim's bytes go (NULL:
     * they are dropped, and the miss is read as usual), and then sets *src
     * to the miss's bytes (source is not called for it): normally the front
     * tier's slot that held the miss now holds the victim (ts_xc_rename), so
     * dst and src are the same slot. The I/O job then calls exchange(user,
     * worker, old_layer, layer, slot, src, dst) instead of prepare: the
     * slot's old content to dst and the miss from src into the slot, in an
     * order that lets dst and src overlap (worker: the I/O thread's index,
     * 0 .. n_io - 1, for a scratch buffer of its own). Nonzero return: the
     * read fails with that code. */
    uint8_t *(*victim)(void *user, int old_layer, int old_expert, int layer, int expert, const uint8_t **src);
    /* With `source`: an ensure's jobs run on the caller's thread, one after
     * another (worker 0), not on the I/O threads: for a prepare (and
     * exchange) that only enqueues copies (model/xstream.c's device slots
     * on the session's stream), where a thread's wake-up and wait would cost
     * more than the job. */
    int inline_source;
    int (*exchange)(void *user, int worker, int old_layer, int layer, uint8_t *slot, const uint8_t *src, uint8_t *dst);
} ts_xc_params;

void ts_xc_params_default(ts_xc_params *p);

typedef struct ts_xc_layer_stats {
    uint64_t hits, misses;  /* counted per distinct expert of an ensure */
} ts_xc_layer_stats;

typedef struct ts_xc_stats {
    uint64_t ensures;       /* ensure calls that succeeded */
    uint64_t hits, misses;  /* distinct experts found resident / read */
    uint64_t evictions;
    uint64_t reads;         /* pread calls issued (a short read retried counts again) */
    uint64_t bytes_read;    /* bytes the reads returned (O_DIRECT: whole aligned spans) */
    uint64_t read_errors;   /* ensures that failed on I/O */
    double io_wait_s;       /* caller time spent waiting for reads */
    int direct_active;      /* O_DIRECT actually in use */
    uint64_t prefetched;    /* experts ts_xc_prefetch started reading */
    uint64_t prefetch_used; /* of them, asked for by an ensure before being evicted */
    uint64_t prefetch_errors;
    uint64_t renames;       /* slots ts_xc_rename handed over (victims of a tier behind, kept here) */
    uint64_t victims_saved; /* evicted experts a front tier kept (params.victim, exchange) */
    int n_layers;
    ts_xc_layer_stats *layer; /* [n_layers], owned by the cache */
} ts_xc_stats;

typedef struct ts_xc ts_xc;

/* Bytes one slot takes from the budget: the expert rounded up to pages, plus
 * one page, so that the page-aligned span around any expert fits (O_DIRECT
 * reads whole pages; a buffered read lands at the same in-page offset, which
 * keeps every tensor's alignment what it was in the mmap'd file). */
uint64_t ts_xc_slot_stride(const ts_expert_map *m);
/* Every byte ts_xc_open will allocate for these params (pool + tables): the
 * memory plan's number. 0 when params->cache_bytes holds too few slots.
 * The whole of it fits in cache_bytes: staging and tables come out of the
 * budget before it is cut into slots. */
uint64_t ts_xc_plan_bytes(const ts_expert_map *m, const ts_xc_params *p);
/* The same, by part: slots (the pool), staging (prepared slots' read
 * buffers), tables (everything else); *n_slots the slot count (any may be
 * NULL). Returns the total as ts_xc_plan_bytes. */
uint64_t ts_xc_plan_parts(const ts_expert_map *m, const ts_xc_params *p, uint64_t *slots, uint64_t *staging, uint64_t *tables,
                          int *n_slots);

/* Open a cache over `map` (borrowed: must outlive the cache). TS_E_ARG when
 * the budget holds fewer slots than one layer's top-k; TS_E_IO naming the
 * file when a shard cannot be opened; TS_E_NOMEM. */
int ts_xc_open(const ts_expert_map *map, const ts_xc_params *p, ts_xc **out, ts_error *err);
void ts_xc_close(ts_xc *c); /* NULL ok; joins the I/O threads */

/* Make ids[0..n) of `layer` resident and pinned: `ids` are the routed experts
 * of every row of a batch (n = rows * topk, duplicates expected). slots[i]
 * (may be NULL) receives the slot of ids[i]. Every missing expert is read at
 * once. Pins add up across calls until ts_xc_unpin(layer).
 * Errors: TS_E_ARG for a bad layer/expert id, or more distinct experts (plus
 * those already pinned) than there are slots; TS_E_IO naming the file and
 * (layer, expert) for a failed or short read. On error nothing of this call
 * stays pinned and no slot of the table holds a partial read. */
int ts_xc_ensure(ts_xc *c, int layer, const int32_t *ids, int n, int32_t *slots, ts_error *err);
/* Start reading ids[0..n) of `layer` (a prediction: the next layer's experts
 * while this one computes) without waiting: each one neither resident nor
 * pinned-full gets a free or evictable slot (never a pinned one, so the
 * running layer's experts stay) and a job on the I/O threads. A prefetch
 * is not an access (the policy's counts do not move). The next ensure (or
 * close) first waits for every read in flight; a failed prefetch just
 * leaves its slot empty (the ensure reads the expert itself). Only with
 * params.prefetch; otherwise (and for bad ids) nothing happens. Returns the
 * reads started. */
int ts_xc_prefetch(ts_xc *c, int layer, const int32_t *ids, int n);
/* The slot holding (layer, expert), or -1: no access counted, nothing
 * pinned (a tier in front asks whether a read is needed at all). */
int ts_xc_lookup(const ts_xc *c, int layer, int expert);
/* The slots the last successful ensure filled (its misses), borrowed until
 * the next ensure; returns their count. */
int ts_xc_last_filled(const ts_xc *c, const int32_t **slots);
/* Drop the pins that ensures of `layer` took (the layer's compute is done). */
void ts_xc_unpin(ts_xc *c, int layer);
/* Drop every pin (of any layer). */
void ts_xc_unpin_all(ts_xc *c);
/* The slot holding (layer, expert) handed to (new_layer, new_expert), which
 * must not be resident: the table forgets the first and points the second
 * at the slot, whose pins and data address (the new expert's in-page
 * offset: ts_xc_slot_data) are the slot's from now on; the caller writes
 * the new expert's bytes there before anything reads them, or forgets it.
 * Ranked by the new expert's decayed count (not an access). Returns the
 * new data address, or NULL (nothing changed) when the first is not
 * resident, the second is, or the cache has no pool. An exclusive tier
 * takes a device victim into the slot of the miss it served. */
uint8_t *ts_xc_rename(ts_xc *c, int layer, int expert, int new_layer, int new_expert);
/* Drop (layer, expert) from the cache, its slot free again: 0, or -1 when it
 * is not resident or is pinned (nothing changed). An exclusive tier drops
 * what the tier behind it took. */
int ts_xc_forget(ts_xc *c, int layer, int expert);
/* The expert bytes held by `slot` (borrowed; NULL in dry mode): valid while
 * the slot is pinned. Tensor views: add map->parts[layer * n_parts + i].off. */
const uint8_t *ts_xc_slot_data(const ts_xc *c, int slot);
/* (layer, expert) resident in `slot`, or -1 (layer) when empty. */
void ts_xc_slot_owner(const ts_xc *c, int slot, int *layer, int *expert);
int ts_xc_n_slots(const ts_xc *c);
int ts_xc_pinned(const ts_xc *c); /* slots pinned now */
const ts_xc_stats *ts_xc_get_stats(const ts_xc *c);
void ts_xc_reset_stats(ts_xc *c);

/* Tests only: make the n-th pread from now fail with EIO (0 = off). */
void ts_xc_fail_read_after(ts_xc *c, long n);
/* Tests only: open every shard's path again (a file replaced under a running
 * engine, whose mapping keeps the old one). 0 or TS_E_IO. Between ensures. */
int ts_xc_reopen_files(ts_xc *c, ts_error *err);

#endif
