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
 * (ts_session_logits). */
TS_API int ts_session_feed(ts_session *s, const int32_t *ids, int n,
                           float *logits, ts_error *err);
/* Logits of the last row fed: [vocab] f32, borrowed. */
TS_API const float *ts_session_logits(const ts_session *s);
/* Final-normed hidden state of the last row fed: [hidden] f32, borrowed. */
TS_API const float *ts_session_hidden(const ts_session *s);


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

#ifdef __cplusplus
}
#endif
#endif
