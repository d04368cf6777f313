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
} ts_engine_params;

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
    uint64_t weight_bytes;    /* bytes of weights the model reads */
} ts_model_info;

TS_API void ts_engine_params_default(ts_engine_params *p);
TS_API int ts_engine_open(const char *dir, const ts_engine_params *p,
                          ts_engine **out, ts_error *err);
TS_API void ts_engine_close(ts_engine *e);
TS_API const ts_model_info *ts_engine_info(const ts_engine *e);

/* ---- session ----------------------------------------------------------- */

typedef struct ts_session ts_session;

typedef struct ts_session_params {
    int n_ctx;        /* context limit in tokens (0 = min(4096, model max)) */
    int max_rows;     /* rows per forward call (prefill chunk); 0 = 64 */
    int mtp;          /* 1: allocate the MTP head's KV cache and scratch */
    int spec_draft;   /* M > 0: buffers for MTP drafting of M tokens per block
                         (MTP cache, GDN tape and snapshots, verify logits);
                         implies mtp. 0: none of them exist. */
} ts_session_params;

TS_API void ts_session_params_default(ts_session_params *p);
TS_API int ts_session_new(ts_engine *e, const ts_session_params *p,
                          ts_session **out, ts_error *err);
TS_API void ts_session_free(ts_session *s);
/* Forget the timeline: position 0, empty caches, zero recurrent state. */
TS_API void ts_session_reset(ts_session *s);
TS_API int ts_session_pos(const ts_session *s);
TS_API int ts_session_n_ctx(const ts_session *s);

/* Feed n tokens at the current position (any n: split into chunks of
 * max_rows internally). If `logits` is not NULL it receives [n, vocab] f32,
 * the logits of every row; otherwise only the last row's logits are kept
 * (ts_session_logits). If `hidden` is not NULL it receives [n, hidden_size]
 * f32, the final-normed hidden state of every row (the MTP head's input). */
TS_API int ts_session_feed(ts_session *s, const int32_t *ids, int n,
                           float *logits, float *hidden, ts_error *err);
/* Logits of the last row fed: [vocab] f32, borrowed. */
TS_API const float *ts_session_logits(const ts_session *s);
/* Final-normed hidden state of the last row fed: [hidden] f32, borrowed. */
TS_API const float *ts_session_hidden(const ts_session *s);

/* ---- generation ---------------------------------------------------------- */

typedef struct ts_gen_params {
    int n_predict;            /* tokens to generate at most */
    float temperature;        /* 0 = greedy */
    int top_k;                /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repeat_penalty;     /* 1 = off */
    float presence_penalty;   /* 0 = off */
    uint64_t seed;
    int spec_draft;           /* 0: no drafting; M: MTP drafts M tokens per block */
    const int32_t *stop_ids;  /* generation ends after emitting one of these */
    int n_stop;
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
 * a session created with session params spec_draft >= M. Greedy output is
 * bit-identical to ts_generate without drafting; with temperature > 0 the
 * output distribution is the target's (speculative sampling).
 *
 * The memory plan: what the engine and a session will allocate, by
 * category, computed from config.json and the safetensors headers only
 * (no tensor data is read). The engine allocates exactly this. */

#define TS_SPEC_MAX_DRAFT 8

enum { /* memory categories (the allocator's) */
    TS_MEMCAT_MISC = 0, TS_MEMCAT_WEIGHTS, TS_MEMCAT_KV, TS_MEMCAT_GDN, TS_MEMCAT_MTP,
    TS_MEMCAT_SPEC, TS_MEMCAT_SCRATCH, TS_MEMCAT_EXPERT_CACHE, TS_MEMCAT_N
};

typedef struct ts_mem_plan_item {
    char name[64];
    int cat;          /* TS_MEMCAT_* */
    int engine;       /* 1: held by the engine, 0: by the session */
    int drafter;      /* 1: exists only because of spec_draft */
    uint64_t count;   /* buffers of this kind */
    uint64_t bytes;   /* all of them together */
} ts_mem_plan_item;

typedef struct ts_mem_plan {
    uint64_t mapped_bytes;            /* tensor data read in place through mmap (not heap) */
    uint64_t cat_bytes[TS_MEMCAT_N];  /* heap bytes by category, engine + session */
    uint64_t engine_bytes, session_bytes, total_bytes;
    uint64_t drafter_bytes;           /* the part that exists only because of spec_draft */
    int n_ctx, max_rows, spec_draft;  /* the normalised session parameters */
    int n_items;
    ts_mem_plan_item items[64];
} ts_mem_plan;

TS_API int ts_mem_plan_dir(const char *dir, const ts_session_params *sp, ts_mem_plan *plan, ts_error *err);
TS_API const char *ts_mem_cat_label(int cat);

#ifdef __cplusplus
}
#endif
#endif
