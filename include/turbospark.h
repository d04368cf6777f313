/* turbospark.h: the only public header.
 *
 * turbospark runs the Qwen3.5 family (Gated DeltaNet linear attention
 * interleaved with gated full attention, dense and MoE, with a built-in MTP
 * head) from a Hugging Face checkpoint directory or a quantized install.
 *
 * Two objects:
 *   ts_engine   the model: config and weights (mmap'd). Immutable once open;
 *               any number of sessions may share one engine.
 *   ts_session  one timeline: KV cache of the full-attention layers, conv and
 *               recurrent state of the GDN layers, the MTP head's KV cache,
 *               scratch. All of it is allocated when the session is created
 *               (the token loop allocates nothing).
 *
 * Errors: every call that can fail returns 0 on success or a negative
 * TS_E_* code, and, when `err` is not NULL, fills err->msg with a sentence
 * that names the file, tensor or argument at fault. Library code never exits
 * and never aborts on bad input.
 *
 * Ownership: pointers returned by ts_*_new/open are owned by the caller and
 * freed by the matching ts_*_free/close (NULL is accepted). Pointers returned
 * by accessors (ts_session_logits, ts_engine_info) are borrowed: valid until
 * the next call on that object.
 */
#ifndef TURBOSPARK_H
#define TURBOSPARK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TS_API __attribute__((visibility("default")))
#else
#define TS_API
#endif

/* ---- errors ------------------------------------------------------------ */

enum {
    TS_OK = 0,
    TS_E_IO = -1,        /* a file is missing, unreadable or truncated */
    TS_E_FORMAT = -2,    /* a file is malformed (JSON, safetensors header) */
    TS_E_MODEL = -3,     /* a tensor is missing, mis-shaped or of a bad dtype */
    TS_E_ARG = -4,       /* a bad argument: token id, length, option */
    TS_E_NOMEM = -5,     /* an allocation failed */
    TS_E_CONTEXT = -6,   /* the session's context limit would be exceeded */
    TS_E_UNSUPPORTED = -7
};

typedef struct ts_error {
    int code;
    char msg[1024];
} ts_error;

/* ---- engine ------------------------------------------------------------ */

typedef struct ts_engine ts_engine;

typedef struct ts_engine_params {
    int n_threads;  /* 0 = all cores */
    int verbose;    /* 1: report unused tensors and load details on stderr */
    int act_bits;   /* quantized installs on the AVX-512 path: activation
                       precision of the products, 8, 16 or 24 bits; 0 =
                       TS_ACT_BITS_DEFAULT. Fewer bits: cheaper prompt
                       chunks and verify blocks, logits rounded a little
                       more (README, "Activation precision"). */
    const char *kernels; /* CPU kernel mode of this engine ("auto", "avx512",
                            "avx2", "generic", "ref"); NULL = the process
                            default (TS_KERNELS, ts_kernels_select) */
    int dflash;     /* 1: also load the DFlash block drafter (issue 19):
                       from drafter_dir, else the checkpoint's dflash/
                       subfolder; an error when there is none */
    const char *drafter_dir; /* the drafter's directory (its config.json and
                                safetensors); NULL: DIR/dflash */
    const char *backend; /* "cpu", "cuda" or "auto" (CUDA when a usable GPU is
                            present and the model fits, else the CPU with one
                            line on stderr saying why; a build without CUDA:
                            the CPU silently); NULL or "" = "cpu" */
    int device;          /* CUDA device index (0-based) */
    /* MoE expert streaming (README, "Expert streaming"): bytes of memory for
     * the routed experts, which are then read on demand from the install
     * into a fixed pool of slots (at least one layer's top-k of them);
     * everything else stays resident. 0 = all resident, no cache. */
    uint64_t expert_cache;
    const char *expert_policy; /* eviction: "lfru" (NULL: default, decayed frequency) or "lru" */
    /* With expert_cache on a device backend: bytes of pinned host memory
     * for a second tier between the install and the device slots (a device
     * miss is then a copy from host memory; a host miss a read of the
     * file). At least as many experts as the device slots (or one layer's
     * experts). 0 = none; refused on the CPU backend. */
    uint64_t expert_host_cache;
    /* Tensor parallelism over `gpus` ranks (0 or 1: none): attention and GDN
     * split by heads, the FFN and every routed expert by columns, the head by
     * vocabulary rows, two sums a layer. CUDA: devices device .. device +
     * gpus - 1 (TS_TP_ONE_DEVICE=1 puts every rank on `device`, to test the
     * split on one GPU); the CPU: gpus ranks of n_threads / gpus threads in
     * one process (the split, tested without a GPU). */
    int gpus;
} ts_engine_params;
#define TS_ACT_BITS_DEFAULT 8

/* What a caller may want to know about the opened model. */
typedef struct ts_model_info {
    const char *model_type;   /* "qwen3_5" or "qwen3_5_moe" */
    int vocab_size;
    int hidden_size;
    int n_layers;             /* main stack */
    int n_full_attn_layers;
    int n_experts, n_experts_per_tok; /* 0 for dense */
    int has_mtp;              /* checkpoint carries mtp.* */
    int tied_embeddings;
    int max_position_embeddings;
    int eos_ids[8];           /* stop ids from config / generation_config */
    int n_eos;
    int quant_bits;           /* 0 = bf16/f16/f32 weights, else 4 or 8 */
    uint64_t weight_bytes;    /* bytes of weights the model reads (with tensor parallelism: rank 0's) */
    int tp_ranks;             /* tensor-parallel ranks (engine params gpus), 1 without */
    int has_dflash;           /* a DFlash drafter is loaded (engine params dflash) */
    int dflash_block;         /* its trained block size (config block_size) */
    int dflash_layers;        /* its decoder layers */
    int dflash_taps;          /* target layers whose hidden states it reads */
} ts_model_info;

TS_API void ts_engine_params_default(ts_engine_params *p);
TS_API int ts_engine_open(const char *dir, const ts_engine_params *p,
                          ts_engine **out, ts_error *err);
TS_API void ts_engine_close(ts_engine *e);
TS_API const ts_model_info *ts_engine_info(const ts_engine *e);

/* Expert streaming statistics since the engine opened or the last reset
 * (zeros and enabled = 0 without --expert-cache). Hits and misses count
 * distinct experts per MoE layer pass (a verify block or prompt chunk asks
 * for each routed expert once). */
typedef struct ts_expert_stats {
    int enabled;
    int n_slots;              /* experts the cache holds */
    uint64_t slot_bytes;      /* bytes of one slot */
    int prepared;             /* slots hold the backend's prepared copies */
    int direct_io;            /* reads bypass the page cache (O_DIRECT) */
    uint64_t hits, misses, evictions;
    uint64_t reads, bytes_read, read_errors;
    double io_wait_s;         /* time the forward waited for reads (and their preparation) */
    uint64_t prefetched, prefetch_used; /* next-layer prediction (TS_XC_PREFETCH=1): reads started,
                                           and of them experts asked for before eviction */
    int n_layers;             /* MoE layers of the cache: the main stack, then the MTP layer if any */
    /* the pinned host tier (expert_host_cache on a device backend), else 0:
     * the device slots' misses served from it, its own misses read from
     * the install (bytes_read above is then 0: the device tier reads none) */
    int host_slots;
    uint64_t host_hits, host_misses, host_bytes_read;
    double host_io_wait_s;
    /* exclusive (1) when the host tier cannot hold every expert: it then
     * keeps what the device slots lack, each device victim copied back into
     * it (host_writebacks) and each expert the device takes dropped from it */
    int host_exclusive;
    uint64_t host_writebacks;
} ts_expert_stats;
TS_API int ts_engine_expert_stats(const ts_engine *e, ts_expert_stats *out);
/* A size as --expert-cache takes it: bytes with an optional K, M, G or T
 * suffix (powers of 1024) and optional B / iB, e.g. "512M", "1.5G" (a
 * fraction needs a suffix; its first 9 digits count; rounded to the nearest
 * byte); the result must be at least 1 byte and below 2^64; TS_E_ARG naming
 * the text otherwise (*out then unchanged). */
TS_API int ts_parse_size(const char *s, uint64_t *out, ts_error *err);
/* Layer L's hits and misses (0 <= L < n_layers); 0 or TS_E_ARG. */
TS_API int ts_engine_expert_layer(const ts_engine *e, int L, uint64_t *hits, uint64_t *misses);
TS_API void ts_engine_expert_stats_reset(ts_engine *e);

/* ---- session ----------------------------------------------------------- */

typedef struct ts_session ts_session;

typedef struct ts_session_params {
    int n_ctx;        /* context limit in tokens (0 = min(4096, model max)) */
    int max_rows;     /* rows per forward call (prefill chunk), which is
                         also the prefill grid (ts_session_feed); 0 = 64 */
    int mtp;          /* 1: allocate the MTP head's KV cache and scratch */
    int spec_draft;   /* M > 0: buffers for MTP drafting of M tokens per block
                         (MTP cache, GDN tape and snapshots, verify logits);
                         implies mtp. 0: none of them exist. */
    int checkpoint;   /* 1: room to save the timeline's state once
                         (ts_session_save / ts_session_restore): a copy of
                         every GDN layer's conv and recurrent state. */
    int dflash_block; /* B in 2..TS_DFLASH_MAX_BLOCK: buffers for DFlash
                         drafting of blocks of B rows (B-1 drafts; the
                         engine must have its drafter): the verify buffers
                         of B rows, the drafter's context K/V cache, the
                         hidden-state taps and its scratch. 0: none. */
    int ngram_draft;  /* M in 1..TS_SPEC_MAX_DRAFT: buffers for n-gram (prompt
                         lookup) drafting of M tokens per block: what
                         verification needs and nothing else (GDN tape and
                         snapshots, verify logits of M+1 rows, one host row
                         for speculative sampling); no MTP head needed. 0:
                         none. A session with spec_draft >= M drafts
                         n-grams too (its verify buffers are the same). */
    int ahead;        /* run-ahead greedy decoding (ts_generate with neither
                         a sampler nor log-probabilities): the next token's
                         step is queued on the device before this token's id
                         is read, and takes that id on the device; a step
                         queued past a stop is undone by flipping the GDN
                         state pairs back. Allocates the pairs' second
                         buffers (a conv and a recurrent state per GDN layer,
                         unless drafting has them) and two rows of logits
                         and hidden. Output, logits and state are plain
                         decoding's, bit for bit. 0: auto (on for a device
                         backend, whose host otherwise idles the device
                         between tokens: CUDA; off with expert streaming or
                         several GPUs; TS_AHEAD=0 or 1 overrides it), 1: on,
                         -1: off. */
} ts_session_params;

TS_API void ts_session_params_default(ts_session_params *p);
TS_API int ts_session_new(ts_engine *e, const ts_session_params *p,
                          ts_session **out, ts_error *err);
TS_API void ts_session_free(ts_session *s);
/* Forget the timeline: position 0, empty caches, zero recurrent state. */
TS_API void ts_session_reset(ts_session *s);
TS_API int ts_session_pos(const ts_session *s);
TS_API int ts_session_n_ctx(const ts_session *s);
/* 1: the session's plain greedy generations run ahead (session params
 * ahead, resolved; TS_AHEAD=0 in the environment turns them off) */
TS_API int ts_session_ahead(const ts_session *s);
/* Checkpoint (session params checkpoint = 1). The GDN state cannot be cut
 * back to an earlier position the way a KV cache can, so a caller that will
 * want to return to this point (a chat's history before the generation
 * prompt, which the template renders differently afterwards) saves it:
 * ts_session_save keeps the state at the current position (one slot: a new
 * save replaces the old); ts_session_restore returns the timeline to it (the
 * KV rows before it were never overwritten). Continuing from a restored
 * state gives the same bits as continuing from the saved moment. After a
 * restore the last row's logits are gone: feed tokens next.
 * ts_session_reset forgets the saved state. Errors: TS_E_ARG without the
 * checkpoint buffers, or with nothing saved. */
TS_API int ts_session_save(ts_session *s, ts_error *err);
TS_API int ts_session_restore(ts_session *s, ts_error *err);
/* The saved position, or -1 when nothing is saved. */
TS_API int ts_session_saved_pos(const ts_session *s);

/* Feed n tokens at the current position (any n: split into chunks of
 * max_rows internally). If `logits` is not NULL it receives [n, vocab] f32,
 * the logits of every row; otherwise only the last row's logits are kept
 * (ts_session_logits). If `hidden` is not NULL it receives [n, hidden_size]
 * f32, the final-normed hidden state of every row (the MTP head's input).
 *
 * Chunks lie on a grid of absolute positions: none crosses a multiple of
 * ts_session_grid(s). A row's bits depend on the chunk it was computed in
 * (prefill and one-row decode kernels round differently), so the timeline
 * equals a cold feed of the same ids from position 0 bit for bit exactly
 * when every earlier cut between calls (feeds, decode steps, restores) fell
 * on a grid point. To make output independent of a session's history,
 * resume only from a state saved at a grid point (ts_session_save) and feed
 * the rest from there. */
TS_API int ts_session_feed(ts_session *s, const int32_t *ids, int n,
                           float *logits, float *hidden, ts_error *err);
/* The prefill grid: max_rows of the session parameters (after defaults). */
TS_API int ts_session_grid(const ts_session *s);
/* Logits of the last row fed: [vocab] f32, borrowed. */
TS_API const float *ts_session_logits(const ts_session *s);
/* Final-normed hidden state of the last row fed: [hidden] f32, borrowed. */
TS_API const float *ts_session_hidden(const ts_session *s);

/* ---- generation ---------------------------------------------------------- */

/* One token's log-probability: the natural log of its probability under
 * the model's own distribution at that step, softmax(logits) over the whole
 * vocabulary, before penalties, logit bias, temperature and truncation (the
 * "raw" log-probabilities, vLLM's default; what a client compares across
 * sampling settings). -INFINITY for a token of probability 0. */
typedef struct ts_logprob {
    int32_t id;
    float logprob;
} ts_logprob;
#define TS_TOP_LOGPROBS_MAX 20
/* chosen: the generated token; top[0..n_top): the most likely tokens, most
 * likely first (ties: lower id first). Borrowed for the call. */
typedef void (*ts_logprob_cb)(void *user, const ts_logprob *chosen, const ts_logprob *top, int n_top);

/* Feed n ids at the current position as ts_session_feed does (the same
 * chunks on the same grid, so the session ends in the state a plain feed
 * reaches) and score them: for i = 1..n-1, out[(i - 1) * (1 + n_top)] is
 * ids[i] with its log-probability given everything before it (ts_logprob's
 * raw log-probability), followed by the n_top most likely tokens of that row,
 * most likely first ({-1, -INFINITY} past the ones with a probability).
 * ids[0] is not scored. out holds (n - 1) * (1 + n_top) entries (NULL when
 * n = 1); n_top in 0..TS_TOP_LOGPROBS_MAX. Ids and the context's room are
 * checked before anything is fed; after another error the session holds the
 * chunks fed before it.
 * Host memory while it runs: one chunk's logits (min(n, grid) x vocab f32).
 * The server's echo with logprobs, a harness's log-likelihoods. */
TS_API int ts_session_score(ts_session *s, const int32_t *ids, int n, int n_top, ts_logprob *out, ts_error *err);
/* One row of logits on the host ([vocab] f32, e.g. ts_session_logits):
 * out[0] = {id, its log-probability}, then the n_top most likely tokens as
 * ts_session_score gives them (a scorer that resumes from a saved state
 * keeps the row before it to score the first id it feeds). 0, or TS_E_ARG. */
TS_API int ts_logprobs_row(const float *logits, int vocab, int32_t id, int n_top, ts_logprob *out, ts_error *err);

/* A constraint on generated tokens (ts_constraint_json,
 * ts_constraint_json_schema, declared with the tokenizer below); gen params
 * `constraint`. */
typedef struct ts_constraint ts_constraint;

typedef struct ts_gen_params {
    int n_predict;            /* tokens to generate at most */
    float temperature;        /* 0 = greedy */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repeat_penalty;     /* 1 = off */
    float presence_penalty;   /* 0 = off */
    float frequency_penalty;  /* 0 = off */
    int penalty_last_n;       /* window of ids the penalties see (-1 = all) */
    uint64_t seed;
    int spec_draft;           /* 0: no drafting; M: MTP drafts M tokens per block
                                 (n-gram drafts with spec_ngram: up to M) */
    int draft_vocab;          /* K > 0: MTP drafts are chosen among token ids [0, K)
                                 only, so the head's product has K rows instead
                                 of vocab (BPE ids are in merge order, roughly
                                 by frequency). Output unchanged (every draft is
                                 verified); only acceptance may drop.
                                 0: automatic, the whole vocabulary up
                                 to 32768 ids, else max(32768, vocab / 8);
                                 -1: the whole vocabulary. */
    float draft_p_min;        /* drafting stops at the first draft whose
                                 probability under the MTP head is below this
                                 (that draft is not verified); 0 = off, always
                                 M drafts. Output unchanged: only how many
                                 rows each verify has. */
    const int32_t *stop_ids;  /* generation ends after emitting one of these */
    int n_stop;
    int dflash_block;         /* B > 0: DFlash drafting instead of MTP, blocks of
                                 B rows ([last token, B-1 masks] drafted in one
                                 pass, verified at once; 2..16, at most the
                                 session's dflash_block); spec_draft is then
                                 ignored. draft_vocab applies as for MTP. */
    int spec_ngram;           /* N > 0: n-gram (prompt lookup) drafting instead of
                                 MTP: each block drafts up to spec_draft tokens
                                 copied from the context, those that followed
                                 the most recent earlier occurrence of the
                                 longest suffix of ngram_min..N tokens (none
                                 found: a one-row step). N in 1..TS_NGRAM_MAX;
                                 the session needs ngram_draft or spec_draft
                                 >= spec_draft. No model pass drafts, so any
                                 checkpoint can (no MTP head needed).
                                 draft_vocab and draft_p_min do not apply. */
    int ngram_min;            /* the shortest suffix matched, 1..spec_ngram;
                                 0: TS_NGRAM_MIN_DEFAULT (capped at spec_ngram) */
    /* The ids before the prompt in the session's timeline (borrowed for the
     * call; NULL: none): the n-gram drafter looks them up too, as if they
     * were the prompt's start. A caller that resumes a session (a chat's
     * history, a reused prefix) passes what it fed earlier. Only which
     * drafts are proposed depends on them, never the output. */
    const int32_t *ngram_ctx;
    int n_ngram_ctx;
    /* logit bias (OpenAI's logit_bias): bias[i] is added to the logit of
     * bias_ids[i] after the penalties, before the temperature (sampler
     * pipeline below); distinct ids in [0, vocab), finite values. A bias of
     * -100 all but bans a token, +100 all but forces it. Greedy decoding
     * with a bias takes the biased argmax; drafting stays exact. */
    const int32_t *bias_ids;
    const float *bias;
    int n_bias;
    /* log-probabilities (OpenAI's logprobs / top_logprobs): when logprob_cb
     * is set it is called for every generated token, just before the token
     * callback, with ts_generate's user pointer, the token's log-probability
     * and the top_logprobs (0..TS_TOP_LOGPROBS_MAX) most likely tokens. */
    ts_logprob_cb logprob_cb;
    int top_logprobs;
    /* Constrained output (the server's response_format json_object and
     * json_schema): when `constraint` is set, each token is drawn with every
     * token it forbids masked out (after penalties and bias, before
     * temperature and truncation), in plain and speculative generation
     * alike (drafts are verified against the masked distribution: output
     * unchanged). Greedy decoding then takes the sampler's argmax over the
     * allowed ids. The stop ids are allowed exactly when the reply is
     * complete, and then only they; without stop ids generation ends after
     * the completing token. An error (TS_E_ARG) if no token can continue the reply.
     * constraint_after: > 0: the constraint starts after this id has been
     * generated (a reasoning block's end, "</think>"), every token up to
     * and including it is free but the stop ids (the reply cannot end
     * before its constrained part); <= 0: from the first generated token (so
     * zeroed parameters mean "from the start": id 0 is an ordinary
     * byte-level token, never a block's end, in the vocabularies this
     * engine loads). A prompt that already closed its think block (chat
     * kwargs enable_thinking false) wants 0. */
    const ts_constraint *constraint;
    int32_t constraint_after;
} ts_gen_params;

typedef struct ts_gen_stats {
    int n_prompt, n_gen;
    double t_prefill, t_decode;   /* seconds */
    /* speculative decoding */
    int n_blocks;                 /* verify passes */
    int n_drafted, n_accepted;
    int accepted_at[16];          /* per draft position: times accepted */
    int drafted_at[16];           /* per draft position: times drafted */
    double t_draft, t_verify, t_rollback;
    int draft_vocab;              /* the drafting vocabulary used: ids [0, draft_vocab) */
} ts_gen_stats;

/* Called for every generated token, in order. Return non-zero to stop. */
typedef int (*ts_token_cb)(void *user, int32_t id);

TS_API void ts_gen_params_default(ts_gen_params *p);
/* Feed the prompt at the session's current position, then generate. The
 * session keeps the timeline (prompt + generated tokens) afterwards. */
TS_API int ts_generate(ts_session *s, const int32_t *prompt, int n_prompt, const ts_gen_params *p,
                       ts_token_cb cb, void *user, ts_gen_stats *stats, ts_error *err);

/* The MTP head over rows r = 0..n-1: (token toks[r], main final-normed
 * hidden hidden[r] [hidden_size], position pos + r). Its K/V rows land in the
 * session's MTP cache at those positions (rows after them are forgotten).
 * Writes the head's output hiddens [n, hidden_size] to h_out (may alias
 * hidden; NULL to skip) and logits [n, vocab] (NULL to skip). The session
 * must have been created with params.mtp = 1. */
TS_API int ts_session_mtp(ts_session *s, const int32_t *toks, const float *hidden, int n, int pos,
                          float *h_out, float *logits, ts_error *err);

/* ---- speculative decoding, chunked prefill, memory plan (issue 5) ------
 *
 * Speculative decoding: ts_generate with gen params spec_draft = M (1..8) on
 * a session created with session params spec_draft >= M (MTP drafts), or
 * gen params dflash_block = B (2..16) on a session with dflash_block >= B
 * of an engine opened with engine params dflash = 1 (DFlash blocks), or
 * gen params spec_ngram = N with spec_draft = M on a session with
 * ngram_draft or spec_draft >= M (n-gram drafts from the context). Greedy
 * output is bit-identical to ts_generate without drafting; with temperature
 * > 0 the output distribution is the target's (speculative sampling).
 *
 * The memory plan: what the engine and a session will allocate, in bytes
 * by memory domain and category, computed from config.json and the
 * safetensors headers only (no tensor data is read), or from a shape file
 * alone (a released size, before downloading it). The engine allocates
 * exactly this. */

#define TS_SPEC_MAX_DRAFT 8
#define TS_DFLASH_MAX_BLOCK 16 /* DFlash: rows of a drafted block, the verify block's too */
#define TS_NGRAM_MAX 16          /* n-gram drafting: the longest suffix matched (gen params spec_ngram) */
#define TS_NGRAM_MIN_DEFAULT 3   /* ... the shortest, when gen params ngram_min is 0 (bench/spec/RESULTS.md) */

/* Memory categories: the one definition, used by the counted allocator
 * (src/util/util.c), the plan and its callers. */
typedef enum ts_mem_cat {
    TS_MEM_MISC = 0,     /* objects, descriptors, the tensor index */
    TS_MEM_WEIGHTS,      /* weights converted or copied off the files (f32 vectors, packed matrices) */
    TS_MEM_KV,           /* full-attention KV cache */
    TS_MEM_GDN,          /* GDN conv + recurrent state (and its checkpoint copy) */
    TS_MEM_MTP,          /* MTP head KV cache and hiddens */
    TS_MEM_SPEC,         /* verify: tape, snapshots, block logits, draft distributions */
    TS_MEM_SCRATCH,      /* per-session activations, backend workspace */
    TS_MEM_EXPERT_CACHE, /* streamed expert slots, their staging and tables (--expert-cache) */
    TS_MEM_N
} ts_mem_cat;

/* Memory domains: where a buffer lives. The CPU backend allocates host
 * memory only; a device backend adds device buffers and pinned host staging,
 * counted through the same allocator counters (ts_mem_used_in). */
typedef enum ts_mem_domain { TS_DOM_HOST = 0, TS_DOM_DEVICE, TS_DOM_PINNED, TS_DOM_N } ts_mem_domain;

TS_API const char *ts_mem_cat_name(ts_mem_cat cat);       /* "kv_cache", ... */
TS_API const char *ts_mem_domain_name(ts_mem_domain dom); /* "host", "device", "pinned" */

typedef struct ts_mem_plan_item {
    char name[64];
    ts_mem_cat cat;
    ts_mem_domain dom;
    int engine;       /* 1: held by the engine, 0: by the session */
    int drafter;      /* 1: exists only because of drafting (spec_draft, ngram_draft, dflash_block) */
    int backend;      /* 1: sized by the backend (packed weight copies, kernel workspace): depends on the
                         machine's kernel mode and thread count, not on the model alone */
    uint64_t count;   /* buffers of this kind */
    uint64_t bytes;   /* all of them together */
} ts_mem_plan_item;

typedef struct ts_mem_plan {
    uint64_t mapped_bytes;            /* tensor data read in place through mmap (not heap): the install's size */
    uint64_t mapped_kept_bytes;       /* of it, what stays mapped once the packed copies are made (their
                                         file pages are let go): host memory in use = this + dom_bytes[host] */
    uint64_t bytes[TS_DOM_N][TS_MEM_N]; /* allocated bytes by domain and category, engine + session */
    uint64_t dom_bytes[TS_DOM_N];     /* by domain, all categories */
    uint64_t cat_bytes[TS_MEM_N];     /* by category, all domains */
    uint64_t engine_bytes, session_bytes, total_bytes;
    uint64_t drafter_bytes;           /* the part that exists only because of drafting */
    /* expert streaming (engine params expert_cache), else 0 */
    int expert_slots;                 /* experts the cache holds */
    uint64_t expert_slot_bytes;       /* one slot (the backend's prepared copy, or the file span) */
    int expert_io_threads;            /* the io queue: reads in flight */
    uint64_t expert_file_bytes;       /* routed experts in the files: read on demand, never mapped in
                                         (so not in mapped_kept_bytes) */
    int n_ctx, max_rows, spec_draft;  /* the normalised session parameters */
    int dflash_block;                 /* DFlash block rows (0: none) */
    int ngram_draft;                  /* n-gram drafts a block (0: none) */
    int ahead;                        /* 1: run-ahead decoding's buffers are planned (session params ahead) */
    int n_items;
    ts_mem_plan_item items[64];
} ts_mem_plan;

/* The plan of the install in dir: config.json and the safetensors headers
 * only (no tensor data is read). */
TS_API int ts_mem_plan_dir(const char *dir, const ts_session_params *sp, ts_mem_plan *plan, ts_error *err);
/* The plan of a released size without any checkpoint: the install that
 * `turbospark synth --shape SHAPE --bits BITS --group GROUP` (or `convert`
 * of the real checkpoint) writes, opened from install_dir (the directory
 * name is part of the tensor index; NULL: "model"). bits 4, 8 or 16 (bf16);
 * group 0: 64. Equal, byte for byte, to ts_mem_plan_dir of that install. */
TS_API int ts_mem_plan_shape(const char *shape_path, int bits, int group, const char *install_dir,
                             const ts_session_params *sp, ts_mem_plan *plan, ts_error *err);
/* The same plans for an engine opened with ep (NULL: defaults):
 *  - ep->backend ("cpu", "cuda"; NULL or "auto": the CPU): that backend's
 *    buffers in its memory domain, its prepared weights and workspace.
 *    Sizes only: no device is opened (CUDA sizes need a CUDA build);
 *  - ep->drafter_dir: the DFlash drafter that session params dflash_block
 *    > 0 needs (NULL: dir/dflash): its weights join the engine part, its
 *    buffers the session's;
 *  - ep->expert_cache: the expert cache's slots, staging and tables, and the
 *    routed experts left out of the packed weights (they are read from the
 *    files on demand, so mapped_kept_bytes excludes them too). */
TS_API int ts_mem_plan_dir_ex(const char *dir, const ts_engine_params *ep, const ts_session_params *sp,
                              ts_mem_plan *plan, ts_error *err);
TS_API int ts_mem_plan_shape_ex(const char *shape_path, int bits, int group, const char *install_dir,
                                const ts_engine_params *ep, const ts_session_params *sp, ts_mem_plan *plan,
                                ts_error *err);
/* The plan of one rank of tensor parallelism (ep->gpus ranks, rank 0 ..
 * gpus - 1): the rank's slices of the install (its weights, and the host
 * image that holds them), its session's buffers at its narrower shapes,
 * the head rows and the collectives' buffers it keeps. The device bytes of
 * a rank are what that GPU holds, to the byte; the host bookkeeping of the
 * ranks (tensor indexes, the rank threads) is not itemized (category misc).
 * ep->gpus <= 1: ts_mem_plan_dir_ex. */
TS_API int ts_mem_plan_rank(const char *dir, const ts_engine_params *ep, const ts_session_params *sp, int rank,
                            ts_mem_plan *plan, ts_error *err);
/* The same for a released size (ts_mem_plan_shape's install): whether a
 * model fits N GPUs before anything is downloaded. */
TS_API int ts_mem_plan_shape_rank(const char *shape_path, int bits, int group, const char *install_dir,
                                  const ts_engine_params *ep, const ts_session_params *sp, int rank, ts_mem_plan *plan,
                                  ts_error *err);

/* ==== tokenizer (src/text/tokenizer.c) ================================== *
 * A Hugging Face `tokenizer.json` with a byte-level BPE model (GPT-2 / Qwen
 * style): added tokens matched in the raw text, NFC, the file's Split regex,
 * ByteLevel mapping, BPE by merge rank. encode(text) equals HF's
 * `encode(text, add_special_tokens=False)`; nothing (no BOS/EOS) is added.
 * A tokenizer may be shared by threads: encode serialises on an internal
 * lock (it updates a piece cache); everything else is read-only. */

typedef struct ts_tokenizer ts_tokenizer;

/* A growable id vector. Zero-initialise it; encode appends; free with
 * ts_tokens_free. */
typedef struct ts_tokens {
    int32_t *ids;
    int n, cap;
} ts_tokens;

/* A growable byte string, always NUL-terminated when s != NULL (the bytes
 * themselves may contain NUL). Zero-initialise; free with ts_text_free. */
typedef struct ts_text {
    char *s;
    size_t len, cap;
} ts_text;

TS_API void ts_tokens_free(ts_tokens *v);
TS_API void ts_text_free(ts_text *s);

/* path: a tokenizer.json, or a directory that holds one. */
TS_API int ts_tokenizer_load(const char *path, ts_tokenizer **out, ts_error *err);
TS_API void ts_tokenizer_free(ts_tokenizer *t);
/* Number of ids: 1 + the largest id of the vocab and the added tokens. */
TS_API int ts_tokenizer_vocab_size(const ts_tokenizer *t);
/* The id of a token given its string as written in tokenizer.json (an added
 * token's content such as "<|im_end|>", or a vocab entry in the byte-level
 * alphabet such as "Ġthe"); -1 when there is none. */
TS_API int ts_tokenizer_token_id(const ts_tokenizer *t, const char *token);
/* The bytes an id decodes to (borrowed; not NUL-terminated), NULL when the
 * id has no token. */
TS_API const char *ts_tokenizer_token_bytes(const ts_tokenizer *t, int32_t id, size_t *len);
/* 1 when id is an added token marked "special" (e.g. <|im_end|>), else 0. */
TS_API int ts_tokenizer_is_special(const ts_tokenizer *t, int32_t id);

/* Encode len bytes of UTF-8 and append the ids to out. Invalid UTF-8 is a
 * TS_E_ARG error naming the byte offset; out is unchanged on error. */
TS_API int ts_tokenizer_encode(ts_tokenizer *t, const char *text, size_t len,
                               ts_tokens *out, ts_error *err);
/* Append the bytes of ids to out (added tokens give their content). The
 * result is the raw byte concatenation: it may end inside a UTF-8 character.
 * An id with no token is a TS_E_ARG error; out is unchanged on error. */
TS_API int ts_tokenizer_decode(const ts_tokenizer *t, const int32_t *ids, int n,
                               ts_text *out, ts_error *err);

/* Streaming decoder: push ids one at a time, get back only complete UTF-8
 * characters; bytes of a character split across tokens are held until it
 * completes. Bytes that can never form a valid character come out as U+FFFD
 * (one per maximal invalid subpart, as Rust's from_utf8_lossy does). */
typedef struct ts_detok ts_detok;
TS_API int ts_detok_new(const ts_tokenizer *t, ts_detok **out, ts_error *err);
TS_API void ts_detok_free(ts_detok *d);
TS_API void ts_detok_reset(ts_detok *d);
/* *text (borrowed, valid until the next call on d) and *len receive the
 * text completed by this id; often empty. */
TS_API int ts_detok_push(ts_detok *d, int32_t id, const char **text, size_t *len,
                         ts_error *err);
/* End of stream: held bytes (an incomplete character) come out as U+FFFD. */
TS_API void ts_detok_flush(ts_detok *d, const char **text, size_t *len);

/* JSON-constrained generation (gen params `constraint`; src/gen/constraint.c).
 * The reply must be one JSON text (RFC 8259: optional whitespace, a value,
 * optional whitespace), an object when object_only. A token is allowed when
 * its bytes extend the reply so far to a prefix of such a text (strings:
 * every escape rule, no raw control characters, valid UTF-8 across token
 * boundaries; nesting at most 1024 deep); added tokens (<|im_end|>,
 * <think>, ...) and tokens of no bytes never are, except the generation's
 * stop ids once the text is complete. Once complete, only a top-level
 * number may go on (its digits), no trailing whitespace token.
 * Built once per tokenizer (it indexes every token's bytes, tens of ms for
 * a 150K vocabulary); shareable by threads and generations afterwards. It
 * keeps a bounded cache of masks by recognizer state (at most
 * TS_CONSTRAINT_CACHE_BYTES of them), under its own lock. */
#define TS_CONSTRAINT_CACHE_BYTES ((size_t)64 << 20)
TS_API int ts_constraint_json(const ts_tokenizer *t, int object_only, ts_constraint **out, ts_error *err);
/* Schema-constrained generation: the reply must be one JSON text that
 * validates against the JSON Schema `schema` (len bytes of JSON text), with
 * the same token rules as ts_constraint_json. The supported subset
 * (src/text/json_schema.h has it in full): type (a name or a list;
 * integer: no fraction or exponent), properties (written in the schema's
 * order; those not required may be skipped; only the listed keys, as
 * OpenAI's strict mode, additionalProperties false whether written or
 * not), required, additionalProperties (without properties: the values'
 * schema), items, minItems, maxItems, minLength, maxLength (code points),
 * enum and const (matched in one compact written form), anyOf and oneOf
 * (as alternatives), allOf of one subschema, $ref into the document
 * ("#/$defs/x", "#/definitions/x", recursion allowed). Descriptive keywords
 * (title, description, examples, default, $schema, $id, ...) are skipped;
 * any other keyword (pattern, format, minimum, ...) is refused, as is a
 * schema that is not JSON, nests deeper than 64 levels, is over 1 MiB, or
 * that no value satisfies: TS_E_ARG, err naming the keyword and its JSON
 * path ("JSON schema: 'pattern' at #/properties/zip is not supported ...").
 * Documents nest at most 128 containers. Built as ts_constraint_json (it
 * indexes the tokenizer: tens of ms for a 150K vocabulary), freed with
 * ts_constraint_free; shareable by threads and generations. */
TS_API int ts_constraint_json_schema(const ts_tokenizer *t, const char *schema, size_t len, ts_constraint **out,
                                     ts_error *err);
/* Whether ts_constraint_json_schema would take `schema` (its subset, its
 * bounds), without a tokenizer: microseconds, no index is built. 0, or the
 * same TS_E_ARG and message ("JSON schema: 'pattern' at #/properties/zip
 * is not supported ..."), TS_E_NOMEM. */
TS_API int ts_json_schema_check(const char *schema, size_t len, ts_error *err);
/* Schema-constrained documents between fixed texts (a forced tool call:
 * "<tool_call>\n" DOCUMENT "\n</tool_call>"): the reply must be prefix,
 * one document of `schema` (ts_constraint_json_schema's rules), suffix and,
 * with repeat, any number of sep, prefix, a document, suffix more. It is
 * complete (the stop ids allowed) after each suffix. The document's own
 * top-level whitespace is refused (the literals carry the layout); a
 * suffix should not start with a byte that could continue the document (a
 * digit after a number: the document takes it). Literal bytes may come
 * from any tokens whose bytes fit, and from the added tokens (not special)
 * whose text lies inside a literal, which may spell only their literal
 * ("<tool_call>" is one token in Qwen's vocabulary). Each literal at most
 * 4096 bytes; NULL is empty; repeat needs sep or prefix. */
typedef struct ts_constraint_wrap {
    const char *prefix;  /* before each document */
    const char *suffix;  /* after each document */
    const char *sep;     /* between one suffix and the next prefix (repeat) */
    int repeat;          /* 0: exactly one document; 1: one or more */
} ts_constraint_wrap;
TS_API int ts_constraint_json_schema_wrap(const ts_tokenizer *t, const char *schema, size_t len,
                                          const ts_constraint_wrap *w, ts_constraint **out, ts_error *err);
TS_API void ts_constraint_free(ts_constraint *c);

/* ==== sampling (src/model/sample.c) ===================================== *
 * One sampler per sequence. All buffers are allocated by ts_sampler_new
 * (sized by the vocabulary); sampling a token allocates nothing.
 *
 * Pipeline, in this order (the order of Hugging Face transformers' logits
 * processors; penalties as llama.cpp and vLLM define them):
 *   1. penalties over the distinct ids among the last `penalty_last_n`
 *      accepted ids: repetition (logit > 0 ? logit / r : logit * r), then
 *      presence (logit -= presence if seen) and frequency
 *      (logit -= frequency * count);
 *   1b. logit bias: logit += bias (for an id also penalised, the penalty
 *      and the bias combine first: logit -= (presence + frequency * count
 *      - bias), one rounding fewer, the form a backend's topn applies);
 *   2. temperature <= 0: greedy argmax (ties to the lowest id), stop here;
 *   3. logits / temperature, softmax;
 *   4. top-k (keep the k most likely; 0 = off);
 *   5. top-p (keep the smallest most-likely prefix whose mass reaches p;
 *      1 = off);
 *   6. min-p (drop tokens with prob < min_p * max prob; 0 = off);
 *   7. renormalise and draw with the seeded RNG (xoshiro256**).
 * Ties in probability are ordered by lower id first, so results do not
 * depend on sort internals: same seed, same logits, same ids. */

typedef struct ts_sampler ts_sampler;

typedef struct ts_sampler_params {
    float temperature;        /* <= 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* 1: off */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    int penalty_last_n;       /* window of accepted ids the penalties see */
    uint64_t seed;
    const int32_t *bias_ids;  /* logit bias (ts_gen_params'), copied by */
    const float *bias;        /* ts_sampler_new: distinct ids, finite values */
    int n_bias;
} ts_sampler_params;

/* temperature 1, top_k 0, top_p 1, min_p 0, penalties off, last_n 64, seed 0 */
TS_API void ts_sampler_params_default(ts_sampler_params *p);
TS_API int ts_sampler_new(int n_vocab, const ts_sampler_params *p, ts_sampler **out,
                          ts_error *err);
TS_API void ts_sampler_free(ts_sampler *s);
/* Forget the accepted ids and reseed the RNG with params.seed. */
TS_API void ts_sampler_reset(ts_sampler *s);
/* Record an id as part of the sequence (prompt or generated): the penalties
 * look at these. ts_sampler_sample does not accept by itself. */
TS_API void ts_sampler_accept(ts_sampler *s, int32_t id);
/* Draw one id from logits [n_vocab] f32. */
TS_API int ts_sampler_sample(ts_sampler *s, const float *logits, int32_t *id, ts_error *err);
/* The full distribution sample would draw from, after all transforms:
 * probs [n_vocab], zero outside the kept set, summing to 1 (one-hot at the
 * argmax when greedy). Consumes no randomness. */
TS_API int ts_sampler_probs(ts_sampler *s, const float *logits, float *probs, ts_error *err);
/* Draw an id from an arbitrary distribution probs [n_vocab] with this
 * sampler's RNG (speculative sampling draws from residual distributions). */
TS_API int32_t ts_sampler_draw(ts_sampler *s, const float *probs);
/* A uniform double in [0, 1) from the sampler's RNG. */
TS_API double ts_sampler_uniform(ts_sampler *s);

/* ==== chat template (src/text/chat.c, src/text/jinja.c) ==================
 * The checkpoint's own Jinja chat template, rendered as Hugging Face
 * transformers' apply_chat_template(tokenize=False) would: same bytes, Python
 * quirks included (tojson is json.dumps, |string of true is "True", ...).
 * Requests are JSON text, not cJSON trees: Python tells 1 from 1.0 and so
 * must we, which cJSON cannot. */

typedef struct ts_chat_template ts_chat_template;

/* Load from a model directory: chat_template.jinja, else "chat_template" of
 * tokenizer_config.json (a string, or a list of {"name","template"}: the one
 * named "default", else the first), else chat_template.json. Special tokens
 * (eos_token, pad_token, bos_token, unk_token) come from tokenizer_config.json
 * where present. */
TS_API int ts_chat_template_load(const char *model_dir, ts_chat_template **out, ts_error *err);
/* Parse a template text. Special tokens: eos "<|im_end|>", pad
 * "<|endoftext|>", bos and unk none (the Qwen ones). */
TS_API int ts_chat_template_parse(const char *text, size_t len, ts_chat_template **out, ts_error *err);
TS_API void ts_chat_template_free(ts_chat_template *t);
/* The eos token text the template is given ("<|im_end|>"): a stop string.
 * Borrowed. */
TS_API const char *ts_chat_template_eos(const ts_chat_template *t);
/* The template's text as loaded (chat_template.jinja, tokenizer_config.json's
 * or chat_template.json's, the named list's pick), and the special token
 * `name` ("eos_token", "bos_token", "pad_token" or "unk_token") as renders
 * are given it: NULL for None or another name. Borrowed (the server's
 * /tokenizer_info reports them). */
TS_API const char *ts_chat_template_source(const ts_chat_template *t);
TS_API const char *ts_chat_template_token(const ts_chat_template *t, const char *name);

typedef struct ts_chat_request {
    const char *messages_json;   /* JSON array of messages (required) */
    const char *tools_json;      /* JSON array of tool schemas, or NULL */
    int add_generation_prompt;
    const char *kwargs_json;     /* JSON object of extra template variables
                                    (enable_thinking, preserve_thinking, ...), or NULL */
} ts_chat_request;

/* Render a request. *out (NUL-terminated, *out_len bytes) is freed with
 * ts_chat_text_free. Errors: TS_E_ARG when the template refuses the request
 * (raise_exception: err->msg is exactly the template's message) or fails on
 * it (err->msg names the line and the Python error, e.g. UndefinedError);
 * TS_E_FORMAT for malformed JSON; TS_E_UNSUPPORTED for a construct this
 * interpreter does not implement; TS_E_NOMEM. */
TS_API int ts_chat_render(const ts_chat_template *t, const ts_chat_request *req,
                          char **out, size_t *out_len, ts_error *err);
/* The same from one JSON object: {"messages": [...], "tools": [...],
 * "add_generation_prompt": true (the default), "chat_template_kwargs": {...}}. */
TS_API int ts_chat_render_json(const ts_chat_template *t, const char *request_json, size_t len,
                               char **out, size_t *out_len, ts_error *err);
TS_API void ts_chat_text_free(char *text);

/* Stop token ids of a model directory: eos_token_id of generation_config.json,
 * then of config.json (and its text_config), each an int or a list; in that
 * order, without duplicates. Writes at most cap ids; returns how many there
 * are (may exceed cap), 0 when none is given, or a negative TS_E_*. */
TS_API int ts_chat_stop_ids(const char *model_dir, int32_t *ids, int cap, ts_error *err);
/* ==== end chat template ================================================== */

/* ==== reply parsing (src/text/reply.c) ====================================
 * A Qwen reply as the model generated it -> reasoning (the <think> block),
 * content and tool calls (<tool_call> blocks, in the JSON form of Qwen3's
 * template or the <function=...><parameter=...> form of Qwen3.5's).
 * Incremental: push text as it is generated; each push appends to
 * `reasoning` and `content` only what is certain (text that may begin a tag,
 * layout whitespace around tags and tool-call blocks are held), so the split
 * is the same however the text was cut. Stop sequences and stop tokens are
 * the caller's: push only the text that belongs to the reply. */

typedef struct ts_reply ts_reply;

/* 1 when a rendered prompt ends inside an opened think block ("<think>\n"):
 * the reply then starts with reasoning. */
TS_API int ts_reply_think_open(const char *prompt, size_t len);
/* tools_json: the request's tool schemas (a JSON array, or NULL): typed
 * parameters of the XML form become JSON numbers, booleans, objects. */
TS_API int ts_reply_new(int think_open, const char *tools_json, ts_reply **out, ts_error *err);
TS_API void ts_reply_free(ts_reply *r);
/* Parse no tool calls: "<tool_call>" blocks stay in the content as text
 * (a request whose tool_choice is "none"). Before the first push. */
TS_API void ts_reply_no_tool_calls(ts_reply *r);
/* Append the newly certain text to reasoning / content (either may be NULL to
 * discard that channel). */
TS_API int ts_reply_push(ts_reply *r, const char *text, size_t len, ts_text *reasoning, ts_text *content,
                         ts_error *err);
/* End of the reply: flush what is held. *tool_calls (owned, freed with
 * ts_chat_text_free) receives a JSON array [{"name": N, "arguments": "JSON
 * text"}, ...] when the reply ends in well-formed tool calls, else NULL (a
 * malformed block is returned as content). */
TS_API int ts_reply_finish(ts_reply *r, ts_text *reasoning, ts_text *content, char **tool_calls,
                           ts_error *err);
/* ==== end reply parsing =================================================== */

/* ==== quantized installs, synthetic checkpoints, kernels, benchmarking ====
 * (owned by src/quant/ and src/cpu/; see src/quant/quant.h for the format) */

typedef struct ts_convert_params {
    int bits;        /* 4 or 8 (synth also takes 16: plain bf16, no quantization) */
    int group;       /* group size along a row; 0 = auto: 64, halved until it divides every row */
    int quiet;       /* 1: no progress bar or summary on stderr */
    uint64_t seed;   /* synth: random seed (0 = fixed default) */
} ts_convert_params;

TS_API void ts_convert_params_default(ts_convert_params *p);
/* Quantize the checkpoint directory src into a new install dst (which must not
 * exist). Written under a temporary name and renamed at the end: on any
 * failure nothing is left at dst. */
TS_API int ts_convert(const char *src, const char *dst, const ts_convert_params *p, ts_error *err);
/* Write a random-weight checkpoint for the shape file (a config.json-like
 * object of text-config fields) into the new directory dst. */
TS_API int ts_synth(const char *shape_path, const char *dst, const ts_convert_params *p, ts_error *err);

/* Weight bytes one decoded token reads: every matrix once, one embedding row,
 * and for MoE only the top-k routed experts of each layer (MTP head excluded).
 * With tensor parallelism, those of rank 0's GPU (each GPU reads about as
 * many, in parallel: the per-GPU roofline's numerator). The state bytes
 * below likewise. */
TS_API uint64_t ts_engine_decode_bytes(const ts_engine *e);
/* Recurrent-state bytes one decoded token reads and writes: every GDN layer's
 * state once each way (f32). Part of the memory traffic of a step. */
TS_API uint64_t ts_engine_state_bytes(const ts_engine *e);
/* The backend the engine runs on, for messages and statistics: "cpu", or
 * "cuda:N (device name)". */
TS_API const char *ts_engine_backend(const ts_engine *e);
/* Device memory (CUDA engines; else TS_E_UNSUPPORTED): ours (every device
 * allocation, counted), free and total as the driver reports them now;
 * total - free - ours is what the driver and other processes hold. */
TS_API int ts_engine_device_mem(const ts_engine *e, size_t *ours, size_t *free_bytes, size_t *total_bytes);
/* The device-copy bandwidth probe (CUDA engines): GB/s (read + write) of a
 * device-to-device copy of `bytes`, best of five; < 0 when not available. */
TS_API double ts_engine_copy_probe(ts_engine *e, size_t bytes);
/* Graphs of a session's stream (CUDA): captured graphs, replays, kernel
 * nodes of the last captured graph, the mean host time of one replay's
 * launch call in microseconds (all 0 on the CPU). */
TS_API void ts_session_graph_stats(const ts_session *s, int *graphs, long *replays, int *kernels, double *launch_us);
/* Benchmarks and tests: fn replaces the drafts of every greedy verify block
 * after the drafter proposed them (so the drafter's cost is still paid):
 * d[0..m-1] are the drafts for the rows after position pos (the tokens fed
 * so far). Output is unchanged whatever fn writes (every draft is
 * verified); only acceptance moves, which is what it is for: measuring a
 * speculative decoder at a chosen acceptance on a random-weight model.
 * NULL removes it. Sampling (temperature > 0) ignores it. */
typedef void (*ts_draft_override)(void *user, int pos, int m, int32_t *d);
TS_API void ts_session_override_drafts(ts_session *s, ts_draft_override fn, void *user);
/* Kernel selection: "auto" (best for this CPU), "avx512", "avx2", "generic",
 * "ref" (the plain reference). Returns 0, or TS_E_ARG for an unknown or
 * unsupported name. The environment variable TS_KERNELS sets the initial choice. */
TS_API int ts_kernels_select(const char *name);
TS_API const char *ts_kernels_name(void);
/* ==== end quantized installs ============================================== */

#ifdef __cplusplus
}
#endif
#endif
