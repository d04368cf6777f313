/* cli.h: the subcommands of the turbospark command line.
 *
 * Each subcommand lives in its own tools/cli/cmd_<name>.c (serve: tools/server/) and defines
 * `int cmd_<name>(int argc, char **argv)` (argv[0] is the subcommand name);
 * it returns the process exit status. Frontends include only turbospark.h
 * (and this header); they never reach into src/.
 */
#ifndef TS_CLI_H
#define TS_CLI_H

#include <stdio.h>

#include "turbospark.h"

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);

/* Shared helpers (tools/cli/cli_util.c). */
/* Parse "1,2,3" into ids (caller frees *ids with free()). Returns count or -1. */
int cli_parse_ids(const char *s, int **ids);
/* Read a whole file ('-' = stdin) into a NUL-terminated malloc'd buffer, or NULL. */
char *cli_read_file(const char *path);
/* The same, with the length (the bytes may contain NUL); len may be NULL. */
char *cli_read_file_len(const char *path, size_t *len);
/* Monotonic seconds (for the statistics lines). */
double cli_now(void);
/* The default model directory: $TURBOSPARK_MODEL when set, else the bundled
 * install (models/default under the working directory, then next to the
 * executable: <dir of turbospark>/../models/default), or NULL if absent. */
const char *cli_default_model(void);
/* Print "turbospark CMD: no model: ..." naming every place looked in. */
void cli_no_model(const char *cmd);
/* The median of v[0..n) (sorts v): the middle value, or the mean of the two
 * middle values when n is even. */
double cli_median(double *v, int n);
/* --draft-vocab's value, one rule for run and bench: "all" gives -1 (every
 * id), a count K >= 1 gives K. Returns 1, or 0 for anything else (0 is not
 * a value: leaving the flag out is how the automatic choice is asked for). */
int cli_parse_draft_vocab(const char *s, int *out);
/* A count: a whole decimal number in [0, 2^30]. Returns 1, or 0 for anything else. */
int cli_parse_count(const char *s, int *out);
/* A probability: a number in [0, 1]. Returns 1, or 0 for anything else. */
int cli_parse_prob(const char *s, float *out);
/* --act-bits: 8, 16 or 24 (ts_engine_params.act_bits). Returns 1, or 0 for anything else. */
int cli_parse_act_bits(const char *s, int *out);

/* The UTF-8 sequence at p[0..n) (n >= 1), strict (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), by the rule the
 * detokenizer decodes with (Unicode's maximal subparts): k > 0 a whole
 * character of k bytes, 0 a valid start cut by the end, -k an invalid start
 * of k bytes (one U+FFFD). cli_utf8_valid: 1 when p[0..n) is valid UTF-8. */
int cli_utf8_seq(const void *p, size_t n);
int cli_utf8_valid(const void *p, size_t n);

/* A token's text for JSON output (malloc'd, NUL-terminated; NULL when out
 * of memory): its bytes when they are valid UTF-8, else vLLM's form
 * "bytes:\xe2\x80" (a token may end inside a character); "<id N>" for an
 * id the tokenizer lacks (t NULL: every id). */
char *cli_token_str(const ts_tokenizer *t, int32_t id);
/* What JSON output writes for a log-probability: -9999 for -inf (JSON has
 * no infinities; the OpenAI API's convention). */
static inline double cli_logprob_json(float lp) { return lp > -9999.0f ? (double)lp : -9999.0; }

/* Sampling flags shared by run and chat (--temp, --top-k, --top-p, --min-p,
 * --seed, --repeat-penalty, --presence-penalty, --frequency-penalty,
 * --logit-bias).
 * Returns 1 if argv[*i] was one (and consumes its value), 0 if not, -1 on a
 * bad value (after printing an error). */
int cli_parse_sampling(int argc, char **argv, int *i, ts_gen_params *gp, const char *cmd);
#define CLI_SAMPLING_HELP \
    "  --temp T            temperature (default 0 = greedy)\n" \
    "  --top-k K --top-p P --min-p P --seed S\n" \
    "  --repeat-penalty R --presence-penalty P --frequency-penalty F\n" \
    "  --logit-bias ID=V[,ID=V...]  add V (-100..100) to token ID's logit (repeatable)\n"

/* Speculative decoding flags shared by run, chat, bench and serve: --spec
 * mtp|dflash|ngram, --draft M, --draft-vocab K|all, --draft-p-min P,
 * --block B, --drafter DIR, --ngram-max N, --ngram-min N. */
typedef struct cli_spec {
    int on;          /* --spec mtp, dflash or ngram given */
    int draft;       /* -1: not given (3 once checked; n-gram: CLI_NGRAM_DRAFT) */
    int draft_vocab; /* 0: not given (automatic) */
    float p_min;     /* -1: not given (off) */
    int dflash;      /* --spec dflash */
    int block;       /* --block B: -1 not given (16 once checked) */
    const char *drafter; /* --drafter DIR: NULL = the model's dflash/ */
    int ngram;       /* --spec ngram */
    int ngram_max;   /* --ngram-max N: -1 not given (CLI_NGRAM_MAX once checked) */
    int ngram_min;   /* --ngram-min N: -1 not given (TS_NGRAM_MIN_DEFAULT, at most ngram_max) */
} cli_spec;
#define CLI_SPEC_INIT {0, -1, 0, -1.0f, 0, -1, NULL, 0, -1, -1}
/* --spec ngram's defaults: drafts a block, the longest n-gram matched */
#define CLI_NGRAM_DRAFT 4
#define CLI_NGRAM_MAX 4
/* 1 if argv[*i] was one of them (its value consumed), 0 if not, -1 on a bad
 * value (after printing an error naming cmd). */
int cli_parse_spec(int argc, char **argv, int *i, cli_spec *o, const char *cmd);
/* The combination: --draft and friends need --spec mtp, M in 1..8; --block
 * and --drafter need --spec dflash, B in 2..16; --ngram-max and --ngram-min
 * need --spec ngram (1 <= min <= max <= 16), which takes --draft M but not
 * --draft-vocab or --draft-p-min (no head to act on). Sets the default M or B:
 * without --draft, TURBOSPARK_MTP_DRAFT=M (1..8) drafts M a block and turns
 * MTP drafting on without --spec (0 or unset: off unless --spec mtp, then 3).
 * Returns 0, or -1 after printing an error. */
int cli_spec_check(cli_spec *o, const char *cmd);
/* Into session and/or generation parameters (either may be NULL; nothing
 * when the flags are off). */
void cli_spec_apply(const cli_spec *o, ts_session_params *sp, ts_gen_params *gp);
/* The "[spec ...]" statistics line on stderr (nothing without verify blocks). */
void cli_spec_report(const cli_spec *o, const ts_gen_params *gp, const ts_gen_stats *st);
#define CLI_SPEC_HELP \
    "  --spec mtp          speculative decoding, drafting with the MTP head\n" \
    "  --spec dflash       speculative decoding, drafting blocks with the DFlash drafter\n" \
    "                      (the model's dflash/ folder, or --drafter DIR)\n" \
    "  --spec ngram        speculative decoding, drafting by lookup in the context: the ids\n" \
    "                      that followed the last earlier occurrence of its longest suffix of\n" \
    "                      --ngram-min..--ngram-max ids (any model; --draft M, default 4)\n" \
    "  --ngram-max N       n-gram: the longest suffix matched, 1..16 (default 4)\n" \
    "  --ngram-min N       n-gram: the shortest, 1..--ngram-max (default 3)\n" \
    "  --block B           DFlash: rows per block, the last token + B-1 drafts, 2..16\n" \
    "                      (default 16)\n" \
    "  --drafter DIR       DFlash: the drafter's directory (config.json + safetensors)\n" \
    "  --draft M           tokens drafted per block, 1..8 (default 3, n-gram 4; MTP without\n" \
    "                      --draft: $TURBOSPARK_MTP_DRAFT=M drafts M, with or without --spec)\n" \
    "  --draft-vocab K|all drafts among token ids [0, K) only: a K-row head product\n" \
    "                      (default: all ids up to 32768, else max(32768, vocab/8);\n" \
    "                      output is unchanged)\n" \
    "  --draft-p-min P     stop a block's drafting at the first draft whose\n" \
    "                      probability under the MTP head is below P\n" \
    "                      (default 0: always M drafts; output is unchanged)\n"

/* Exact reuse of a session across requests (tools/cli/cli_reuse.c): chat's
 * turns and the server's jobs resume from a checkpoint saved at a grid point
 * of the prefill, so a reply never depends on what the session served
 * before. The session needs params.checkpoint = 1. */
typedef struct cli_reuse {
    int32_t *ids; /* [cap] the ids before the session's saved state */
    int cap;      /* the session's context */
} cli_reuse;
/* 0, or -1 when out of memory. */
int cli_reuse_init(cli_reuse *r, int n_ctx);
void cli_reuse_free(cli_reuse *r);
/* The saved position when the ids before it start ids[0..n) and leave
 * something to feed, else 0: how much of the prompt a resume skips. */
int cli_reuse_match(const cli_reuse *r, const ts_session *s, const int32_t *ids, int n);
/* Bring the session to a position from which feeding ids[from..n) gives the
 * bits of a cold feed of ids[0..n): restore the checkpoint when it matches
 * (*cached: its position), else reset; then feed up to the last grid point
 * at or before n_keep (the part the next request is expected to share: a
 * chat's history, a completion's prompt; capped at n - 1) and save there
 * (*fed: the ids fed here). Returns from (>= 0), or a negative TS_E_* with
 * err set and the session reset. */
int cli_reuse_prepare(cli_reuse *r, ts_session *s, const int32_t *ids, int n, int n_keep, int *cached, int *fed,
                      ts_error *err);
/* cli_reuse_prepare's two steps for a caller that feeds otherwise (the
 * server's echo scores what it feeds): the next save point of ids[0..n)
 * with n_keep as there (0: none the checkpoint can hold), and, once the
 * session stands there, fed from a restored checkpoint or from position 0,
 * the save with the ids before it. 0, or the error (err set). */
int cli_reuse_point(const cli_reuse *r, const ts_session *s, int n, int n_keep);
int cli_reuse_save(cli_reuse *r, ts_session *s, const int32_t *ids, ts_error *err);

/* The engine and session options the commands share, parsed in one place
 * (tools/cli/cli_util.c): -m/--model, --threads, --ctx, --act-bits, --chunk,
 * --kernels and the speculative decoding flags. A command names the ones it
 * takes (CLI_OPT_*); the others stay unknown to it. */
enum {
    CLI_OPT_MODEL = 1 << 0,    /* -m, --model DIR */
    CLI_OPT_THREADS = 1 << 1,  /* --threads N */
    CLI_OPT_CTX = 1 << 2,      /* --ctx N */
    CLI_OPT_ACT_BITS = 1 << 3, /* --act-bits 8|16|24 */
    CLI_OPT_CHUNK = 1 << 4,    /* --chunk N */
    CLI_OPT_KERNELS = 1 << 5,  /* --kernels NAME */
    CLI_OPT_SPEC = 1 << 6,     /* --spec mtp, --draft, --draft-vocab, --draft-p-min */
    CLI_OPT_BACKEND = 1 << 7,  /* --backend auto|cpu|cuda, --device N */
    CLI_OPT_XCACHE = 1 << 8,   /* --expert-cache SIZE, --expert-policy lfru|lru */
    CLI_OPT_ENGINE = CLI_OPT_MODEL | CLI_OPT_THREADS | CLI_OPT_ACT_BITS | CLI_OPT_KERNELS | CLI_OPT_BACKEND | CLI_OPT_XCACHE,
    CLI_OPT_ALL = (1 << 9) - 1
};
typedef struct cli_engine {
    const char *cmd;      /* for messages: "turbospark CMD: ..." */
    unsigned accept;      /* CLI_OPT_* */
    const char *model;    /* NULL: the default model (cli_engine_check) */
    int threads;          /* 0: all cores */
    int n_ctx;            /* 0: the session default */
    int act_bits;         /* 0: TS_ACT_BITS_DEFAULT */
    int chunk;            /* 0: the session default (64 rows) */
    const char *kernels;  /* NULL: TS_KERNELS or auto */
    const char *backend;  /* --backend: "auto" (default), "cpu", "cuda" */
    int device;           /* --device N (CUDA) */
    int gpus;             /* --gpus N: tensor parallelism over N ranks */
    cli_spec spec;
    uint64_t expert_cache; /* 0: all experts resident */
    uint64_t expert_host_cache; /* --expert-host-cache (device backends), 0: none */
    const char *expert_policy;
} cli_engine;
void cli_engine_init(cli_engine *o, const char *cmd, unsigned accept);
/* 1 if argv[*i] was one of the accepted options (its value consumed), 0 if
 * not, -1 on a missing or bad value (after printing an error). */
int cli_engine_parse(int argc, char **argv, int *i, cli_engine *o);
/* After parsing: the speculative flags' combination, the kernels, and the
 * model (the default when not given; an error naming where it looked when
 * there is none). Returns 0, or -1 after printing an error. */
int cli_engine_check(cli_engine *o);
/* Into engine, session and generation parameters (any may be NULL). */
void cli_engine_apply(const cli_engine *o, ts_engine_params *ep, ts_session_params *sp, ts_gen_params *gp);
/* The help lines of the accepted options. */
void cli_engine_help(FILE *f, unsigned accept);
/* --expert-cache's SIZE ("512M", "8G", bytes): 1 and *out, or 0 after printing an error. */
int cli_parse_size(const char *cmd, const char *s, uint64_t *out);
/* The expert cache's statistics on stderr (nothing without one): hit rate,
 * bytes read per token over n_tokens (0: not printed), per-layer hit rates
 * when per_layer. */
void cli_expert_report(const ts_engine *e, int n_tokens, int per_layer);

/* Chat helpers (tools/cli/cli_chat.c). A conversation is a JSON array of
 * {"role", "content"} messages kept as a cJSON tree (strings only, so
 * cJSON's number printing never matters). */
struct cJSON;
/* Append a message; returns 0 or -1 (out of memory). */
int cli_chat_add(struct cJSON *messages, const char *role, const char *content);
/* Render the conversation, with the generation prompt when gen_prompt;
 * no_think passes enable_thinking=false. *out is freed with
 * ts_chat_text_free. */
int cli_chat_render(const ts_chat_template *t, struct cJSON *messages, int no_think, int gen_prompt, char **out,
                    size_t *len, ts_error *err);
/* Stop ids for a model: config/generation_config eos ids plus the
 * tokenizer's <|im_end|> and <|endoftext|> when present. Returns the count. */
int cli_stop_ids(const ts_engine *e, const ts_tokenizer *tok, int32_t *ids, int cap);

#endif
