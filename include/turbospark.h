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

/* The MTP head over rows r = 0..n-1: (token toks[r], main final-normed
 * hidden hidden[r] [hidden_size], position pos + r). Its K/V rows land in the
 * session's MTP cache at those positions (rows after them are forgotten).
 * Writes the head's output hiddens [n, hidden_size] to h_out (may alias
 * hidden; NULL to skip) and logits [n, vocab] (NULL to skip). The session
 * must have been created with params.mtp = 1. */
TS_API int ts_session_mtp(ts_session *s, const int32_t *toks, const float *hidden, int n, int pos,
                          float *h_out, float *logits, ts_error *err);

/* ---- quantized installs, synthetic checkpoints, kernels, benchmarking ----
 * (owned by src/quant/ and src/cpu/; see quant.h for the format) */

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
 * and for MoE only the top-k routed experts of each layer (MTP head excluded). */
TS_API uint64_t ts_engine_decode_bytes(const ts_engine *e);
/* Kernel selection: "auto" (best for this CPU), "avx512", "avx2", "generic",
 * "ref" (the plain reference). Returns 0, or TS_E_ARG for an unknown or
 * unsupported name. The environment variable TS_KERNELS sets the initial choice. */
TS_API int ts_kernels_select(const char *name);
TS_API const char *ts_kernels_name(void);

#ifdef __cplusplus
}
#endif
#endif
