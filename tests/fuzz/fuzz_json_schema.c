/* fuzz_json_schema.c: the JSON Schema compiler (src/text/json_schema.c)
 * and the recognizer of documents against it (src/text/schema_fsm.c).
 * Input: a schema's text, then (after the first NUL byte, if any) a
 * candidate document.
 * Properties: the compiler returns 0 or an error whose message names it
 * ("JSON schema: ..."), never crashes or leaks; on a compiled schema the
 * document fed a byte at a time and in pieces of 5 bytes (a token's feed)
 * agree; a complete document parses (cJSON, strict) and validates against
 * the schema (schema_valid.c, the standard reading but for oneOf, read as
 * anyOf as the compiler documents); the longest live
 * prefix completes (fuzz_schema_complete) to a document that validates.
 * Then the same schema wrapped (ts_schema_set_wrap, a forced tool call's
 * shape with printable literals): PREFIX doc SUFFIX is complete exactly when
 * doc is a complete document with no whitespace at its ends, and the
 * longest live prefix of PREFIX doc completes to PREFIX, a document that
 * validates, SUFFIX. */
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "text/schema_fsm.h"

/* Whether a document validates, failing the run when it does not. */
static void check_valid(const char *schema_text, size_t schema_len, const char *doc, size_t n, const char *what) {
    cJSON *s = cJSON_ParseWithLength(schema_text, schema_len);
    if (!s) fuzz_fail("cJSON cannot parse a schema the compiler took");
    char *z = fuzz_strndup((const uint8_t *)doc, n); /* cJSON reads up to a NUL */
    cJSON *v = memmem(doc, n, "\\u0000", 6) ? NULL : cJSON_ParseWithLengthOpts(z, n + 1, NULL, 1);
    free(z);
    if (!v) {
        /* cJSON's strings end at a \u0000: no verdict */
        /* a lone surrogate escape: JSON's grammar allows it, cJSON does not */
        if (!memmem(doc, n, "\\u", 2)) fuzz_fail("%s '%.*s': cJSON refuses it", what, (int)(n > 300 ? 300 : n), doc);
        cJSON_Delete(s);
        return;
    }
    const int r = fuzz_schema_valid_oneof_any(s, s, v);
    if (r == 0) fuzz_fail("%s '%.*s' does not validate against the schema", what, (int)(n > 300 ? 300 : n), doc);
    cJSON_Delete(v);
    cJSON_Delete(s);
}

#define W_PRE "<p>"
#define W_SUF "</s>"

static int ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The wrapped checks (sc wrapped here); plain_complete: the whole document
 * fed and complete in the plain form; capped: the thread cap dropped
 * readings there (no verdict). */
static void check_wrapped(ts_schema *sc, const char *st, size_t sl, const char *doc, size_t dl, int plain_complete,
                          int capped, int repeat, ts_sstate *a, ts_sfsm_work *w) {
    ts_error err = {0};
    if (ts_schema_set_wrap(sc, W_PRE, W_SUF, ",", repeat, &err)) fuzz_fail("set_wrap: %s", err.msg);
    const size_t np = sizeof W_PRE - 1, ns = sizeof W_SUF - 1;
    char *t = malloc(np + dl + ns);
    if (!t) fuzz_fail("out of memory");
    memcpy(t, W_PRE, np), memcpy(t + np, doc, dl), memcpy(t + np + dl, W_SUF, ns);
    ts_sfsm_init(a, sc);
    size_t live = 0;
    while (live < np + dl + ns && ts_sfsm_feed_bytes(sc, a, t + live, 1, w)) live++, capped |= a->n == TS_SFSM_THREADS;
    const int got = live == np + dl + ns && ts_sfsm_complete(sc, a);
    const int want = plain_complete && dl && !ws(doc[0]) && !ws(doc[dl - 1]);
    if (!capped && got != want)
        fuzz_fail("wrapped: complete %d, the plain document %d (live %zu of %zu)", got, want, live, np + dl + ns);
    /* the live prefix of PREFIX doc completes to PREFIX, a valid document, SUFFIX */
    ts_sfsm_init(a, sc);
    live = 0;
    while (live < np + dl && ts_sfsm_feed_bytes(sc, a, t + live, 1, w)) live++;
    const size_t cap = 1 << 14;
    char *z = malloc(live + cap + 1);
    memcpy(z, t, live);
    const size_t k = fuzz_schema_complete(sc, a, (uint8_t *)z + live, cap);
    int deep = 0;
    for (int i = 0; i < a->n; i++) deep |= a->t[i].depth >= TS_SFSM_DEPTH - 2;
    if (k == (size_t)-1 && !deep) fuzz_fail("wrapped: the live prefix of %zu bytes does not complete", live);
    if (k < cap) {
        const size_t n = live + k;
        if (n < np + ns || memcmp(z, W_PRE, np) || memcmp(z + n - ns, W_SUF, ns))
            fuzz_fail("wrapped: completed to '%.*s', not between the literals", (int)(n > 300 ? 300 : n), z);
        z[n - ns] = 0;
        check_valid(st, sl, z + np, n - ns - np, "the completed wrapped document");
    }
    free(z);
    free(t);
}

int fuzz_json_schema(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t sl = nul ? (size_t)(nul - data) : size;
    const char *doc = nul ? (const char *)nul + 1 : "";
    const size_t dl = nul ? size - sl - 1 : 0;
    char *st = fuzz_strndup(data, sl);
    ts_schema *sc = NULL;
    ts_error err = {0};
    const int rc = ts_schema_compile(st, sl, &sc, &err);
    if (rc) {
        if ((rc != TS_E_ARG && rc != TS_E_NOMEM) || strncmp(err.msg, "JSON schema: ", 13) || sc)
            fuzz_fail("compile returned %d, '%s'", rc, err.msg);
        free(st);
        return 0;
    }
    ts_sstate *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    ts_sfsm_work *w = malloc(sizeof *w);
    if (!a || !b || !w) fuzz_fail("out of memory");
    ts_sfsm_init(a, sc);
    ts_sfsm_init(b, sc);
    size_t live = 0;
    int capped = 0;
    while (live < dl && ts_sfsm_feed_bytes(sc, a, doc + live, 1, w)) live++, capped |= a->n == TS_SFSM_THREADS;
    int ok = 1;
    for (size_t i = 0; i < dl && ok; i += 5) ok = ts_sfsm_feed_token(sc, b, doc + i, dl - i < 5 ? dl - i : 5, w);
    /* merging threads at every byte or every 5 can differ only once the
     * thread cap drops readings */
    if (!capped && ok != (live == dl)) fuzz_fail("a byte at a time %d, in pieces %d", live == dl, ok);
    if (live == dl && ts_sfsm_complete(sc, a)) check_valid(st, sl, doc, dl, "the complete document");
    const size_t cap = 1 << 14;
    char *z = malloc(live + cap + 1);
    memcpy(z, doc, live);
    const size_t k = fuzz_schema_complete(sc, a, (uint8_t *)z + live, cap);
    int deep = 0; /* at the depth cap a required container cannot open (schema_fsm.h): no verdict there */
    for (int i = 0; i < a->n; i++) deep |= a->t[i].depth >= TS_SFSM_DEPTH - 2;
    if (k == (size_t)-1 && !deep) fuzz_fail("the live prefix of %zu bytes does not complete", live);
    if (k < cap) { /* -2: a completion longer than cap (a huge minLength): no verdict */
        z[live + k] = 0;
        check_valid(st, sl, z, live + k, "the completed prefix");
    }
    free(z);
    check_wrapped(sc, st, sl, doc, dl, live == dl && ts_sfsm_complete(sc, a), capped, (int)(sl & 1), b, w);
    free(a);
    free(b);
    free(w);
    ts_schema_free(sc);
    free(st);
    return 0;
}
