/* fuzz.h: the fuzz harnesses of tests/fuzz/, one per parser a user's bytes reach.
 *
 * Each harness is a function fuzz_NAME(data, size) that feeds the bytes to one
 * parser and checks what must hold of any input: no crash, no leak, no
 * undefined behaviour (the sanitizers' part) and the parser's own contract
 * (an error with a message, or a result whose invariants hold; for the
 * incremental parsers, the same result however the input was cut). A broken
 * property calls fuzz_fail, which aborts: libFuzzer records the input.
 *
 * The same functions serve two drivers:
 *   make fuzz          build-fuzz/fuzz/NAME, libFuzzer binaries (clang,
 *                      ASan + UBSan + LeakSanitizer; tests/fuzz/libfuzzer.c)
 *   build/ts_test fuzz the test suite replays every file of
 *                      tests/fuzz/corpus/NAME/ through fuzz_NAME (tests/test_fuzz.c)
 *
 * Harnesses read their fixed inputs (a tokenizer, templates) from
 * tests/fixtures relative to the current directory: run from the repo root.
 * They allocate those once and keep them for the process (not a leak:
 * reachable through a static).
 */
#ifndef TS_FUZZ_H
#define TS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

typedef int (*fuzz_fn)(const uint8_t *data, size_t size);

int fuzz_server(const uint8_t *data, size_t size);       /* server_req.c: request bodies -> jobs */
int fuzz_chat(const uint8_t *data, size_t size);         /* chat.c + jinja.c: request JSON, shipped templates */
int fuzz_template(const uint8_t *data, size_t size);     /* jinja.c: template text (and a request) */
int fuzz_tokenizer(const uint8_t *data, size_t size);    /* tokenizer.c: encode, decode, streaming decode */
int fuzz_tokenizer_json(const uint8_t *data, size_t size); /* tokenizer.c: tokenizer.json loading */
int fuzz_safetensors(const uint8_t *data, size_t size);  /* safetensors.c: the header */
int fuzz_config(const uint8_t *data, size_t size);       /* config.c: config.json (+ generation_config.json) */
int fuzz_reply(const uint8_t *data, size_t size);        /* reply.c: think blocks, tool calls */
int fuzz_dflash_config(const uint8_t *data, size_t size); /* dflash.c: a DFlash drafter's config.json vs a target */
int fuzz_size(const uint8_t *data, size_t size);         /* experts.c: ts_parse_size (--expert-cache SIZE) */

int fuzz_json_fsm(const uint8_t *data, size_t size);     /* json_fsm.c: the JSON recognizer of constrained generation */
int fuzz_json_schema(const uint8_t *data, size_t size);  /* json_schema.c + schema_fsm.c: a schema, then a document */

/* Shared with tests/test_constraint.c (fuzz_json_fsm.c): where cJSON departs
 * from RFC 8259, as flags of the constructs a lax scan finds in a text */
enum {
    D_CTRL_WS = 1,      /* cJSON skips every byte <= 0x20 as whitespace; the RFC only space, \t, \n, \r */
    D_CTRL_STR = 2,     /* cJSON takes raw control characters in strings; the RFC wants them escaped */
    D_UTF8 = 4,         /* cJSON does not check UTF-8; the RFC requires it (section 8.1) */
    D_NUMBER = 8,       /* cJSON reads numbers with strtod: 01, 1., -.5, 1.e5 pass */
    D_SURROGATE = 16,   /* cJSON refuses \u escapes of unpaired surrogates; the RFC grammar takes any 4 hex digits */
    D_DEPTH = 32,       /* cJSON nests at most 1000 deep; the recognizer 1024 */
    D_BOM = 64,         /* cJSON skips a leading UTF-8 byte order mark; the RFC's text has none */
    D_HEX = 128,        /* cJSON reads a \u escape whose 4 characters are not all hex digits (as 0) */
    D_WS_RUN = 256,     /* the recognizer bounds whitespace runs between tokens (TS_JSON_MAX_WS); the RFC does not */
};
int fuzz_json_rfc_diff(const char *d, size_t n);
/* Bytes that complete the live recognizer state *st (a ts_jfsm, text/json_fsm.h)
 * into a complete text, written to out (at most cap); the count, or
 * (size_t)-1 when the greedy completion gets stuck or out is too small. */
size_t fuzz_json_complete(const void *st, uint8_t *out, size_t cap);

/* Shared with tests/test_schema.c (schema_valid.c): an independent JSON
 * Schema validator over cJSON trees (root: the whole schema, for $ref; s:
 * the subschema; v: the instance): 1 valid, 0 not, -1 when it gave up (two
 * million steps: nested alternatives multiply the work). The standard reading
 * (oneOf is exactly one, no `type` is any type, extra keys are allowed
 * unless additionalProperties says otherwise). */
struct cJSON;
int fuzz_schema_valid(const struct cJSON *root, const struct cJSON *s, const struct cJSON *v, int depth);
/* The same with oneOf read as anyOf, as the compiler documents it does
 * (json_schema.h): what the fuzz harness holds the recognizer to, since a
 * schema whose oneOf alternatives overlap has documents both accept. */
int fuzz_schema_valid_oneof_any(const struct cJSON *root, const struct cJSON *s, const struct cJSON *v);
/* Bytes that complete the live schema-recognizer state *st (a ts_sstate of
 * schema *sc, text/schema_fsm.h), greedily, into out (at most cap); the
 * count, or (size_t)-1 when the greedy completion gets stuck, (size_t)-2
 * when out is too small (minLength 10000000 takes that many bytes). */
size_t fuzz_schema_complete(const void *sc, const void *st, uint8_t *out, size_t cap);

typedef struct fuzz_target {
    const char *name; /* also the corpus directory tests/fuzz/corpus/NAME */
    fuzz_fn fn;
} fuzz_target;
extern const fuzz_target fuzz_targets[];
extern const int fuzz_n_targets;

/* A property failed: print it (with fuzz_current, the input's name when the
 * driver knows it) and abort. */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
extern const char *fuzz_current;

/* A fixture file's whole contents (NUL-terminated, *len bytes), or abort. */
char *fuzz_read_fixture(const char *path, size_t *len);

/* A malloc'd copy of n bytes plus a terminating NUL. */
char *fuzz_strndup(const uint8_t *p, size_t n);

#endif
