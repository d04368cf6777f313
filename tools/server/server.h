/* server.h: the pieces of `turbospark serve` shared by its files.
 *
 *   cmd_serve.c      options, startup and the SIGTERM drain, HTTP
 *                    (libmicrohttpd): routing, auth, admission at the headers,
 *                    body limits, the idle-connection limit, errors,
 *                    responses, metrics
 *   server_req.c     OpenAI request JSON -> a job (validation and refusals,
 *                    rendering, tokenizing, the context check)
 *   server_gen.c     the session pool: admission, workers, the bounded
 *                    queue, the drain, the token callback (stop sequences,
 *                    reply parsing, SSE chunks)
 *   server_tools.c   tool_choice: "none", "required", a named function
 *                    (the call schema a forced call is held to)
 *   server_cc.c      the cache of compiled schema constraints
 *
 * Threads: libmicrohttpd runs one thread per connection; each of the
 * --parallel workers owns one session and runs one job at a time. A job is
 * shared by its connection thread and (once queued) its worker: refcounted,
 * its mutable part under job->mu. The connection never touches a session.
 *
 * Invariants: a job is DONE exactly once: by its worker, by the worker that
 * takes a cancelled job from the queue, or by the drain (srv_pool_drain)
 * for the jobs still queued at SIGTERM; a job is RUNNING only once a worker
 * runs it (a streamed response sends its headers only then); a cancelled
 * job produces no more tokens after the next callback; the engine is
 * shared read-only.
 */
#ifndef TS_SERVER_H
#define TS_SERVER_H

#include <pthread.h>
#include <stdint.h>

#include "cli.h"

#define SRV_MAX_STOPS 16
#define SRV_MAX_BODY (8u << 20) /* request bodies beyond this get 413 */

typedef struct srv srv;
typedef struct srv_cc_ent srv_cc_ent; /* a cached compiled constraint (server_cc.c) */

/* tool_choice (server_tools.c) */
enum { SRV_TC_AUTO, SRV_TC_NONE, SRV_TC_REQUIRED, SRV_TC_NAMED };
/* kinds of cached constraints */
enum { SRV_CC_SCHEMA, SRV_CC_TOOLS };
#define SRV_CC_CAP 16 /* compiled constraints the cache keeps */

enum { JOB_CHAT, JOB_COMPLETION };
enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

typedef struct job {
    /* ---- the request (immutable once queued) ---- */
    int kind;                     /* JOB_CHAT or JOB_COMPLETION */
    int stream, include_usage;
    int32_t *prompt;              /* [n_prompt] ids, malloc'd: with several prompts, all of them one
                                     after the other, prompt_at[k] where prompt k starts */
    int n_prompt;                 /* the first prompt's ids (what a slot's reuse is matched on) */
    int n_prompts;                /* completions: prompts in the request (a list of them); 1 */
    int *prompt_at;               /* [n_prompts + 1] offsets into prompt, malloc'd; NULL for one */
    int n_per;                    /* choices a prompt (the request's n): choice c is prompt c / n_per's */
    int prompt_total;             /* every prompt's ids (usage.prompt_tokens) */
    ts_gen_params gp;             /* n_predict = max_tokens; stop ids set by the worker */
    int ignore_eos;               /* extension: generate past the stop ids */
    char *stops[SRV_MAX_STOPS];   /* stop sequences on the decoded text, malloc'd */
    int n_stops;
    int think_open;               /* chat: the prompt opened a <think> block */
    int n_history;                /* chat: prompt ids before the generation prompt (the rendering
                                     without it is a prefix of the prompt), else -1 */
    int pref;                     /* the idle session that holds the longest start of the
                                     prompt when it was queued, else -1 (under srv.mu) */
    char *tools_json;             /* chat: the request's tools (for parameter types), or NULL */
    int32_t *bias_ids;            /* logit_bias: [gp.n_bias] ids and values, malloc'd; gp.bias_ids */
    float *bias;                  /*   and gp.bias point here */
    int logprobs;                 /* 1: log-probabilities asked (gp.top_logprobs alternatives each) */
    int token_ids;                /* return_tokens_as_token_ids (vLLM): logprobs' tokens as "token_id:N" */
    int echo;                     /* completions: each choice's text starts with the prompt (and,
                                     with logprobs, its entries with the prompt's tokens, scored:
                                     ts_session_score); max_tokens 0 then scores the prompt alone */
    char **echo_text;             /* [n_prompts]: a text prompt as the client sent it, malloc'd;
                                     NULL for ids (the worker decodes them) */
    int json;                     /* response_format json_object or json_schema: the reply (content)
                                     is constrained (to one JSON object, or to schema's documents) */
    int tool_choice;              /* chat: SRV_TC_*; REQUIRED and NAMED hold the reply to tool calls */
    srv_cc_ent *cref;             /* the cached constraint the job holds (released with the job), or NULL */
    const ts_constraint *schema;  /* json_schema's or a forced tool call's constraint: cref's, else NULL */
    char id[48];                  /* chatcmpl-... / cmpl-... */
    long created;

    /* ---- shared state (under mu) ---- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs, state, cancelled;
    ts_text out;                  /* stream: SSE bytes not yet sent */
    size_t sent;                  /* bytes of out already handed to the connection */

    /* ---- results (written by the worker, read after DONE) ---- */
    struct choice *ch;            /* [n_choices] (n_prompts x the request's n), one generation each;
                                     cap_choices allocated (srv_job_choices) */
    int cap_choices;
    int n_choices;
    int n_gen, n_cached;          /* generated tokens (all choices), prompt tokens reused (the first) */
    /* several prompts: the next one nobody runs, and the idle slots running
     * one beside the job's own (server_gen.c, run_job / slot_help) */
    int next_prompt, helpers;
    int err_status;               /* non-zero: the generation failed (HTTP status) */
    char err_msg[1024];
} job;

/* One of a job's n generations (OpenAI's choices): choice k samples with
 * seed + k from the same prompt, after choice k - 1 (the session's
 * checkpoint of the prompt makes the later ones' prefill short). */
typedef struct choice {
    ts_text text;                 /* completion text / chat content */
    ts_text reasoning;            /* chat reasoning_content */
    char *tool_calls;             /* chat: [{"name","arguments"}] JSON (ts_chat_text_free), or NULL */
    const char *finish;           /* "stop", "length", "tool_calls" */
    int n_gen;                    /* its generated tokens */
    /* log-probabilities (logprobs on): one entry per generated token but a
     * stop id that ended the generation; entry i is lp[i * (1 +
     * gp.top_logprobs)]: the chosen token, then its alternatives (id -1
     * past the ones the engine gave). Written by the worker only; read by
     * the connection after DONE. */
    ts_logprob *lp;
    int *lp_off;                  /* [n_lp] completions' text_offset: characters decoded before it */
    int n_lp, cap_lp;
    int lp_sent;                  /* stream: entries already sent in a chunk */
} choice;

#define SRV_MAX_N 16        /* choices a request may ask (n) */
#define SRV_MAX_CHOICES 128 /* choices of a completion with several prompts (prompts x n) */
/* The prompt of a job's choice c: its ids and their count. */
static inline const int32_t *srv_choice_prompt(const job *j, int c, int *n) {
    const int k = j->prompt_at ? c / j->n_per : 0;
    *n = j->prompt_at ? j->prompt_at[k + 1] - j->prompt_at[k] : j->n_prompt;
    return j->prompt + (j->prompt_at ? j->prompt_at[k] : 0);
}

struct srv {
    const char *model_dir;
    char model_id[256];           /* the directory's base name */
    ts_engine *e;
    ts_tokenizer *tok;
    ts_chat_template *tpl;        /* NULL: no template, chat completions refused */
    pthread_mutex_t tpl_mu;       /* renders are serialised (the template is shared) */
    int32_t stop_ids[16];
    int n_stop_ids;
    int n_ctx, parallel, queue_cap, max_tokens_limit;
    int chunk;                    /* --chunk: session max_rows, the prefill grid (0 = default) */
    const char *api_key;
    int n_vocab, verbose;
    char *tok_info;               /* GET /tokenizer_info's body (srv_tokenizer_info) */
    cli_spec spec;                /* --spec mtp ...: every generation drafts with the MTP head */
    ts_constraint *json;          /* json_object's constraint, built on first use (srv_json_constraint) */
    pthread_mutex_t json_mu;
    int32_t think_end;            /* the id of "</think>" (a json_object reply starts after it), or -1 */

    /* compiled schema constraints (server_cc.c; under cc_mu) */
    pthread_mutex_t cc_mu;
    srv_cc_ent *cc[SRV_CC_CAP];
    int cc_n;
    uint64_t cc_tick, cc_hits, cc_misses;
    double cc_build_s;            /* time spent building the misses */

    /* the pool (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job **queue;                  /* ring of ring_cap = queue_cap + parallel */
    int ring_cap, q_head, q_len, n_busy, stopping;
    int n_admitted;               /* requests admitted at their headers, not yet queued (srv_admit) */
    int draining;                 /* SIGTERM: no new requests; the queue answered 503; running jobs finish */
    int n_answering;              /* requests holding a job whose reply is not yet fully sent (on_completed) */
    struct slot *slots;
    uint64_t jobs_taken;          /* jobs the workers have taken (the slots' last_used clock) */

    /* metrics (under mu) */
    uint64_t m_requests, m_errors, m_generations, m_rejected;
    uint64_t m_helped;            /* prompts of a list run by a helping slot (slot_help) */
    uint64_t m_prompt_tokens, m_cached_tokens, m_gen_tokens;
    uint64_t m_prefill_tokens, m_decode_tokens;
    double m_prefill_s, m_decode_s;
    uint64_t m_drafted, m_accepted, m_verify_blocks;
    uint64_t m_drafted_at[16], m_accepted_at[16]; /* by draft position */
    double m_draft_s, m_verify_s, m_rollback_s;
};

/* ---- server_gen.c ---- */
int srv_pool_start(srv *s, ts_error *err);
/* Cancel everything, let the workers drain, join them, free the sessions. */
void srv_pool_stop(srv *s);
/* Admission, decided from the headers alone (before the body is parsed,
 * rendered or tokenized): 0 and a place reserved in the queue, or -1 (the
 * queue is full, or the server is draining) and the request is refused
 * with 503 and Retry-After. An admitted request ends in srv_submit or
 * srv_unadmit, exactly once. */
int srv_admit(srv *s);
void srv_unadmit(srv *s);
/* Queue an admitted job (takes a reference for the worker). Returns 0, or
 * -1 when the server started draining since (the reservation is released
 * either way). */
int srv_submit(srv *s, job *j);
/* SIGTERM: refuse new requests, answer every queued job 503 now, and wait
 * up to timeout_s for the running ones to finish (they end normally); the
 * ones still running then are stopped by srv_pool_stop. */
void srv_pool_drain(srv *s, double timeout_s);
job *srv_job_new(int kind);
/* Room for n choices (before the job is queued); 0, or -1 out of memory. */
int srv_job_choices(job *j, int n);
void srv_job_unref(job *j);
/* Mark a job cancelled (its connection went away). */
void srv_job_cancel(job *j);

/* ---- server_req.c ---- */
/* An error for the client: HTTP status and the OpenAI error fields. */
typedef struct srv_err {
    int status;
    const char *type;   /* "invalid_request_error", "server_error", ... */
    const char *param;  /* the offending field, or NULL */
    const char *code;   /* e.g. "context_length_exceeded", or NULL */
    char msg[1024];
    char param_buf[128]; /* param, when it names a field of the (freed) request */
} srv_err;

/* Parse and check a request body into a new job; NULL with *e filled on a
 * bad request. */
job *srv_parse_chat(srv *s, const char *body, size_t len, srv_err *e);
job *srv_parse_completion(srv *s, const char *body, size_t len, srv_err *e);
/* POST /tokenize and /detokenize (server_req.c): the response body
 * (malloc'd), or NULL with *e filled. */
char *srv_tokenize(srv *s, const char *body, size_t len, srv_err *e);
char *srv_detokenize(srv *s, const char *body, size_t len, srv_err *e);
/* GET /tokenizer_info (vLLM's; lm-evaluation-harness's remote tokenizer
 * checks it for "eos_token"): what a client tokenizes and renders with: the
 * eos/bos/pad/unk tokens and the chat template as the server's template
 * holds them, tokenizer_config.json's tokenizer_class and add_bos_token /
 * add_eos_token, model_max_length the server's context. Made once at start;
 * malloc'd, NULL out of memory. */
char *srv_tokenizer_info(srv *s, const char *model_dir);
/* obj[key] = n bytes of UTF-8 as a JSON string (NUL bytes escaped, which a
 * cJSON string would cut; server_gen.c). */
struct cJSON;
void srv_add_str(struct cJSON *obj, const char *key, const char *p, size_t n);

/* A JSON value in the response envelope shape of the job: the full
 * non-streamed response, malloc'd. */
/* The server's json_object constraint (an object, RFC 8259), built at the
 * first request that asks for it (~0.1 s for a 248K vocabulary) and shared
 * by every worker; NULL and err set when it cannot be built. */
const ts_constraint *srv_json_constraint(srv *s, ts_error *err);
char *srv_job_response(srv *s, job *j);

/* ---- server_cc.c ---- */
void srv_cc_init(srv *s);
/* At shutdown (no job holds an entry any more, or it keeps it alive). */
void srv_cc_free(srv *s);
/* The constraint of (kind, schema text, wrap: NULL for a plain schema),
 * from the cache or built (ts_constraint_json_schema[_wrap]) and cached;
 * *out is held by the caller until srv_cc_release. 0, or the build's
 * error (TS_E_ARG naming the schema's problem, TS_E_NOMEM). */
int srv_cc_get(srv *s, int kind, const char *schema, size_t len, const ts_constraint_wrap *w, srv_cc_ent **out,
               ts_error *err);
const ts_constraint *srv_cc_constraint(const srv_cc_ent *e);
void srv_cc_release(srv_cc_ent *e);

/* ---- server_tools.c ---- */
/* tools, tool_choice and parallel_tool_calls of a chat request into j
 * (j->tool_choice; a forced call: its constraint, j->cref / j->schema):
 * 0, or -1 with *e filled (a forced tool whose parameters the constraint
 * cannot enforce: 400 naming the tool and the keyword). */
int srv_parse_tool_choice(srv *s, const struct cJSON *root, job *j, srv_err *e);

#endif
