/* test_constraint.c: JSON-constrained generation (group `constraint`;
 * ts_constraint_json, gen params constraint / constraint_after).
 *
 * - the recognizer (text/json_fsm.c) against RFC 8259 verdicts written by
 *   hand (escapes, surrogates, numbers, literals, nesting, UTF-8, control
 *   characters), and against cJSON on random JSON texts and random
 *   mutations of them: the same verdict, except where cJSON departs from
 *   the RFC, each such case named (rfc_diff) and counted; every live
 *   prefix completes to a text cJSON accepts;
 * - the mask (gen/constraint.c, trie walk and cache) against feeding every
 *   token's bytes one by one, for states cut from random texts, on the
 *   bundled model's tokenizer (12,288 ids) and on the Qwen3 tokenizer
 *   fixture (151,669 ids), with the walk's cost printed, uncached and
 *   cached;
 * - generation on the bundled model (CPU): greedy and sampled, object and
 *   any value, the reply parses (or, cut by the budget, is a live prefix);
 *   constraint_after leaves the tokens before its id free; MTP 1..4 and
 *   DFlash drafting give plain decoding's ids under the constraint;
 * - bad input: TS_E_ARG naming it.
 */
#include <cjson/cJSON.h>
#include <sys/stat.h>

#include "gen/constraint.h"
#include "gen/sample.h"
#include "text/json_fsm.h"
#include "text/tokenizer.h"
#include "gen/spec.h"
#include "constraint_fx.h"
#include "ts_test.h"

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t z = *s;
    z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
    return z ^ (z >> 33);
}
static int rnd(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }

/* The recognizer's verdict on a whole text: 1 complete, 0 not. */
static int fsm_accepts(const char *d, size_t n, int object_only) {
    ts_jfsm st;
    ts_jfsm_init(&st, object_only);
    return ts_jfsm_feed_bytes(&st, d, n) && ts_jfsm_complete(&st);
}

/* cJSON's verdict (the buffer must hold a NUL after n bytes). */
static int cjson_accepts(const char *d, size_t n) {
    cJSON *j = cJSON_ParseWithLengthOpts(d, n + 1, NULL, 1);
    cJSON_Delete(j);
    return j != NULL;
}

/* where cJSON departs from RFC 8259: fuzz_json_rfc_diff (tests/fuzz/fuzz_json_fsm.c) */
#include "fuzz/fuzz.h"
#define rfc_diff fuzz_json_rfc_diff

/* ---- hand-written cases: the RFC's verdict ---- */

typedef struct {
    const char *doc;
    int len; /* 0: strlen */
    int ok;  /* RFC 8259 */
} hcase;

static const hcase HAND[] = {
    {"{}", 0, 1}, {"[]", 0, 1}, {" \t\n\r{ } \n", 0, 1}, {"0", 0, 1}, {"-0", 0, 1}, {"-0.0e-0", 0, 1},
    {"1e5", 0, 1}, {"1E+5", 0, 1}, {"1.5e-10", 0, 1}, {"123456789012345678901234567890", 0, 1},
    {"01", 0, 0}, {"-01", 0, 0}, {"1.", 0, 0}, {".5", 0, 0}, {"-.5", 0, 0}, {"+1", 0, 0}, {"1e", 0, 0},
    {"1e+", 0, 0}, {"1.e5", 0, 0}, {"-", 0, 0}, {"0x10", 0, 0}, {"1 2", 0, 0}, {"Infinity", 0, 0}, {"NaN", 0, 0},
    {"true", 0, 1}, {"false", 0, 1}, {"null", 0, 1}, {"tru", 0, 0}, {"True", 0, 0}, {"nulll", 0, 0},
    {"\"\"", 0, 1}, {"\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", 0, 1}, {"\"\\u0041\\u00e9\\uFFFF\"", 0, 1},
    {"\"\\uD83D\\uDE00\"", 0, 1}, /* a surrogate pair */
    {"\"\\uD83D\"", 0, 1},        /* a lone high surrogate: the RFC grammar accepts it */
    {"\"\\uDE00x\"", 0, 1},       /* a lone low surrogate */
    {"\"\\u12\"", 0, 0}, {"\"\\u12G4\"", 0, 0}, {"\"\\x41\"", 0, 0}, {"\"\\'\"", 0, 0}, {"\"abc", 0, 0},
    {"\"a\nb\"", 0, 0}, {"\"a\tb\"", 0, 0}, {"\"a\x1f\"", 0, 0}, {"\"a\x7f\"", 0, 1},
    {"\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", 0, 1}, /* é € 😀 */
    {"\"\xc3\"", 0, 0}, {"\"\xc0\xaf\"", 0, 0},          /* truncated; overlong '/' */
    {"\"\xe0\x80\xaf\"", 0, 0}, {"\"\xed\xa0\x80\"", 0, 0}, /* overlong; a surrogate encoded */
    {"\"\xf4\x90\x80\x80\"", 0, 0}, {"\"\xf5\x80\x80\x80\"", 0, 0}, {"\"\x80\"", 0, 0}, {"\"\xff\"", 0, 0},
    {"\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"", 0, 1}, /* U+FFFF, U+10FFFF */
    {"{\"a\":1,\"b\":[true,false,null,{\"c\":\"d\"}]}", 0, 1}, {"{\"a\" : 1 , \"b\" : 2 }", 0, 1},
    {"{\"a\":1,}", 0, 0}, {"[1,]", 0, 0}, {"[,1]", 0, 0}, {"{a:1}", 0, 0}, {"{\"a\"}", 0, 0}, {"{\"a\":}", 0, 0},
    {"{1:2}", 0, 0}, {"[1}", 0, 0}, {"{\"a\":1]", 0, 0}, {"[", 0, 0}, {"]", 0, 0}, {"", 0, 0}, {"  ", 0, 0},
    {"{}}", 0, 0}, {"[][]", 0, 0}, {"\xef\xbb\xbf{}", 0, 0}, {"\x0c{}", 0, 0}, {"{}\x0b", 0, 0},
    {"[1,2", 0, 0}, {"{\"a\":[1,{\"b\":null}]}", 0, 1}, {"[\"\\u0000\"]", 0, 1}, {"[\"a\" \"b\"]", 0, 0},
    {"[1 2]", 0, 0}, {"[-]", 0, 0}, {"[00]", 0, 0}, {"[0.]", 0, 0}, {"[1e1.5]", 0, 0},
};

TS_TEST(constraint, recognizer_rfc_cases) {
    int n = 0, diffs = 0;
    for (size_t i = 0; i < sizeof HAND / sizeof HAND[0]; i++) {
        const hcase *h = &HAND[i];
        const size_t len = h->len ? (size_t)h->len : strlen(h->doc);
        CHECK_MSG(fsm_accepts(h->doc, len, 0) == h->ok, "case %zu '%s': the recognizer says %d, the RFC %d", i, h->doc,
                  !h->ok, h->ok);
        /* cJSON agrees unless one of the named differences explains it */
        const int cj = cjson_accepts(h->doc, len), f = rfc_diff(h->doc, len);
        if (cj != h->ok) {
            diffs++;
            CHECK_MSG(f, "case %zu '%s': cJSON says %d, the RFC %d, and no known difference explains it", i, h->doc, cj,
                      h->ok);
        }
        n++;
    }
    /* object_only: the top level must be an object */
    CHECK(fsm_accepts("{}", 2, 1) && fsm_accepts(" {\"a\":[]} ", 10, 1));
    CHECK(!fsm_accepts("[]", 2, 1) && !fsm_accepts("1", 1, 1) && !fsm_accepts("\"x\"", 3, 1) && !fsm_accepts("null", 4, 1));
    /* depth: 1024 containers nest, 1025 do not */
    static char deep[2 * 1025 + 1];
    for (int d = 1024; d <= 1025; d++) {
        for (int i = 0; i < d; i++) deep[i] = '[', deep[d + i] = ']';
        CHECK_MSG(fsm_accepts(deep, 2 * (size_t)d, 0) == (d <= TS_JSON_MAX_DEPTH), "depth %d", d);
    }
    /* whitespace runs between tokens: at most TS_JSON_MAX_WS bytes, anywhere
     * between tokens (after a literal, a number, in an array, before a key);
     * inside a string any number; a run ends at any other byte */
    static const char *const wsdoc[] = {"[true%s]", "{%s\"a\":1}", "{\"a\"%s:[1%s,2]}", "%s0%s"};
    char sp[TS_JSON_MAX_WS + 2], doc[512];
    for (int w = TS_JSON_MAX_WS; w <= TS_JSON_MAX_WS + 1; w++) {
        memset(sp, '\n', (size_t)w), sp[w] = 0;
        for (int d = 0; d < 4; d++) {
            snprintf(doc, sizeof doc, wsdoc[d], sp, sp);
            CHECK_MSG(fsm_accepts(doc, strlen(doc), 0) == (w <= TS_JSON_MAX_WS), "a run of %d whitespace bytes in '%s'", w,
                      wsdoc[d]);
        }
    }
    snprintf(doc, sizeof doc, "[\"%0200d\"]", 0);
    memset(doc + 2, ' ', 200);
    CHECK(fsm_accepts(doc, strlen(doc), 0));
    memset(sp, ' ', TS_JSON_MAX_WS), sp[TS_JSON_MAX_WS] = 0;
    snprintf(doc, sizeof doc, "[%s1,%s2,%s3]", sp, sp, sp); /* runs apart, each at the bound */
    CHECK(fsm_accepts(doc, strlen(doc), 0));
    /* complete but continuable: a top-level number */
    ts_jfsm st;
    ts_jfsm_init(&st, 0);
    CHECK(ts_jfsm_feed_bytes(&st, "12", 2) && ts_jfsm_complete(&st) && ts_jfsm_in_number(&st));
    CHECK(ts_jfsm_feed_bytes(&st, "3 ", 2) && ts_jfsm_complete(&st) && !ts_jfsm_in_number(&st) && !ts_jfsm_feed(&st, '4'));
    fprintf(stderr, "  %d hand-written cases; cJSON differs from the RFC on %d of them (named)\n", n, diffs);
}

/* ---- random JSON ---- */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void ws(sbuf *b, uint64_t *r) {
    static const char *const w[] = {"", "", "", " ", "\n", "\t", "\r\n  ", "  "};
    puts_(b, w[rnd(r, 8)]);
}

static void utf8_put(sbuf *b, uint32_t u) {
    char s[4];
    int n;
    if (u < 0x80) s[0] = (char)u, n = 1;
    else if (u < 0x800) s[0] = (char)(0xC0 | u >> 6), s[1] = (char)(0x80 | (u & 63)), n = 2;
    else if (u < 0x10000)
        s[0] = (char)(0xE0 | u >> 12), s[1] = (char)(0x80 | ((u >> 6) & 63)), s[2] = (char)(0x80 | (u & 63)), n = 3;
    else
        s[0] = (char)(0xF0 | u >> 18), s[1] = (char)(0x80 | ((u >> 12) & 63)), s[2] = (char)(0x80 | ((u >> 6) & 63)),
        s[3] = (char)(0x80 | (u & 63)), n = 4;
    put(b, s, (size_t)n);
}

static void gen_string(sbuf *b, uint64_t *r) {
    puts_(b, "\"");
    for (int i = 0, n = rnd(r, 12); i < n; i++) {
        char t[16];
        switch (rnd(r, 8)) {
        case 0: puts_(b, (const char *[]){"\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"}[rnd(r, 8)]); break;
        case 1: snprintf(t, sizeof t, "\\u%04X", (unsigned)rnd(r, 0xD800)); puts_(b, t); break;
        case 2: snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xD800u + (unsigned)rnd(r, 0x400), 0xDC00u + (unsigned)rnd(r, 0x400)); puts_(b, t); break;
        case 3: {
            uint32_t u = 0x80 + (uint32_t)rnd(r, 0x10FFFF - 0x80);
            if (u >= 0xD800 && u <= 0xDFFF) u = 0xE9;
            utf8_put(b, u);
            break;
        }
        default: {
            char c = (char)(0x20 + rnd(r, 0x5F));
            if (c == '"' || c == '\\') c = 'x';
            put(b, &c, 1);
        }
        }
    }
    puts_(b, "\"");
}

static void gen_number(sbuf *b, uint64_t *r) {
    char t[64];
    int n = 0;
    if (rnd(r, 3) == 0) t[n++] = '-';
    if (rnd(r, 4) == 0) t[n++] = '0';
    else
        for (int i = 0, k = 1 + rnd(r, 6); i < k; i++) t[n++] = (char)((i ? '0' : '1') + rnd(r, i ? 10 : 9));
    if (rnd(r, 3) == 0) {
        t[n++] = '.';
        for (int i = 0, k = 1 + rnd(r, 4); i < k; i++) t[n++] = (char)('0' + rnd(r, 10));
    }
    if (rnd(r, 4) == 0) {
        t[n++] = rnd(r, 2) ? 'e' : 'E';
        if (rnd(r, 2)) t[n++] = rnd(r, 2) ? '+' : '-';
        for (int i = 0, k = 1 + rnd(r, 3); i < k; i++) t[n++] = (char)('0' + rnd(r, 10));
    }
    put(b, t, (size_t)n);
}

static void gen_value(sbuf *b, uint64_t *r, int depth, int object) {
    const int k = object ? 6 : depth > 6 ? rnd(r, 4) : rnd(r, 7);
    switch (k) {
    case 0: gen_string(b, r); break;
    case 1: gen_number(b, r); break;
    case 2: puts_(b, (const char *[]){"true", "false", "null"}[rnd(r, 3)]); break;
    case 3: gen_number(b, r); break;
    case 4:
    case 5: {
        puts_(b, "[");
        ws(b, r);
        for (int i = 0, n = rnd(r, 5); i < n; i++) {
            if (i) puts_(b, ","), ws(b, r);
            gen_value(b, r, depth + 1, 0);
            ws(b, r);
        }
        puts_(b, "]");
        break;
    }
    default: {
        puts_(b, "{");
        ws(b, r);
        for (int i = 0, n = rnd(r, 5); i < n; i++) {
            if (i) puts_(b, ","), ws(b, r);
            gen_string(b, r);
            ws(b, r);
            puts_(b, ":");
            ws(b, r);
            gen_value(b, r, depth + 1, 0);
            ws(b, r);
        }
        puts_(b, "}");
    }
    }
}

static void gen_doc(sbuf *b, uint64_t *r, int object) {
    b->n = 0;
    put(b, "", 0);
    ws(b, r);
    gen_value(b, r, 0, object);
    ws(b, r);
}

/* One random mutation of b (no NUL bytes: cJSON would stop there). */
static void mutate(sbuf *b, uint64_t *r) {
    static const char alpha[] = "{}[]\",:\\ 0123456789-+.eEtrufalsn\x01\x1f\x7f\x80\xbf\xc3\xe2\xed\xf0\xf4\xff\t\nu";
    const int op = rnd(r, 5);
    const size_t n = b->n;
    if (op == 0 && n) b->p[rnd(r, (int)n)] = alpha[rnd(r, (int)sizeof alpha - 1)];
    else if (op == 1) {
        size_t at = (size_t)rnd(r, (int)n + 1);
        put(b, " ", 1);
        memmove(b->p + at + 1, b->p + at, n - at);
        b->p[at] = alpha[rnd(r, (int)sizeof alpha - 1)];
    } else if (op == 2 && n) {
        size_t at = (size_t)rnd(r, (int)n);
        memmove(b->p + at, b->p + at + 1, n - at - 1);
        b->n--;
    } else if (op == 3 && n) {
        b->n = (size_t)rnd(r, (int)n);
    } else if (n) { /* duplicate a range */
        size_t a = (size_t)rnd(r, (int)n), l = (size_t)rnd(r, (int)TS_MIN(n - a, 16) + 1);
        char t[16];
        memcpy(t, b->p + a, l);
        put(b, t, l);
    }
    b->p[b->n] = 0;
}

TS_TEST(constraint, recognizer_vs_cjson) {
    uint64_t r = 20261205;
    sbuf b = {0}, c = {0};
    int n_valid = 0, n_mut = 0, agree = 0, n_live = 0;
    int diff_count[9] = {0};
    for (int it = 0; it < 3000; it++) {
        const int object = rnd(&r, 2);
        gen_doc(&b, &r, object);
        /* a generated text: valid for both (it has no construct they differ on) */
        CHECK_MSG(!rfc_diff(b.p, b.n), "generator made a text cJSON reads differently: %s", b.p);
        CHECK_MSG(fsm_accepts(b.p, b.n, 0), "recognizer refuses generated text %s", b.p);
        CHECK_MSG(cjson_accepts(b.p, b.n), "cJSON refuses generated text %s", b.p);
        CHECK_MSG(fsm_accepts(b.p, b.n, 1) == (strchr(" \t\r\n", b.p[0]) ? (int)(strspn(b.p, " \t\r\n") < b.n && b.p[strspn(b.p, " \t\r\n")] == '{') : b.p[0] == '{'),
                  "object_only verdict on %s", b.p);
        n_valid++;
        /* mutants: the same verdict, or a named difference */
        for (int m = 0; m < 4; m++) {
            mutate(&b, &r);
            const int ours = fsm_accepts(b.p, b.n, 0), cj = cjson_accepts(b.p, b.n), f = rfc_diff(b.p, b.n);
            n_mut++;
            if (ours == cj) {
                agree++;
            } else {
                /* we refuse and cJSON accepts: one of its laxities; we accept
                 * and cJSON refuses: a lone surrogate or its depth limit */
                const int allowed =
                    ours ? (D_SURROGATE | D_DEPTH) : (D_CTRL_WS | D_CTRL_STR | D_UTF8 | D_NUMBER | D_BOM | D_HEX | D_WS_RUN);
                if (!(f & allowed)) {
                    FILE *df = fopen("/tmp/constraint-fail.json", "wb");
                    if (df) fwrite(b.p, 1, b.n, df), fclose(df);
                }
                CHECK_MSG(f & allowed, "'%s' (%zu bytes): recognizer %d, cJSON %d, no named difference (flags %d)", b.p,
                          b.n, ours, cj, f);
                for (int k = 0; k < 9; k++) diff_count[k] += (f >> k) & 1;
            }
            /* the longest live prefix completes to a text both accept */
            ts_jfsm st;
            ts_jfsm_init(&st, 0);
            size_t live = 0;
            while (live < b.n) {
                ts_jfsm t = st;
                if (!ts_jfsm_feed(&t, (uint8_t)b.p[live])) break;
                st = t;
                live++;
            }
            c.n = 0;
            put(&c, b.p, live);
            static uint8_t tail[8 * TS_JSON_MAX_DEPTH + 64];
            const size_t k = fuzz_json_complete(&st, tail, sizeof tail);
            CHECK_MSG(k != (size_t)-1, "live prefix '%.*s' does not complete", (int)live, b.p);
            put(&c, tail, k);
            CHECK_MSG(fsm_accepts(c.p, c.n, 0), "completion '%s' refused", c.p);
            if (!rfc_diff(c.p, c.n)) {
                CHECK_MSG(cjson_accepts(c.p, c.n), "live prefix '%.*s' completed as '%s': cJSON refuses it", (int)live, b.p,
                          c.p);
                n_live++;
            }
        }
    }
    fprintf(stderr, "  %d random texts, %d mutants (%d same verdict as cJSON; differences: ctrl-ws %d, ctrl-in-string %d, "
                    "utf-8 %d, number %d, surrogate %d, depth %d, bom %d, bad \\u %d, whitespace run %d), %d live prefixes completed\n",
            n_valid, n_mut, agree, diff_count[0], diff_count[1], diff_count[2], diff_count[3], diff_count[4],
            diff_count[5], diff_count[6], diff_count[7], diff_count[8], n_live);
    CHECK(agree > n_mut / 2);
    free(b.p);
    free(c.p);
}

/* ---- masks ---- */

static int is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

/* The rule, one token at a time: its bytes from st must stay live; never
 * an added token or one of no bytes; after a complete text only a
 * top-level number's continuation (no leading whitespace). */
static void brute_mask(const ts_tokenizer *t, const uint8_t *added, const ts_jfsm *st, uint64_t *out, int words) {
    memset(out, 0, sizeof(uint64_t) * (size_t)words);
    const int V = ts_tokenizer_vocab_size(t), complete = ts_jfsm_complete(st), num = ts_jfsm_in_number(st);
    for (int id = 0; id < V; id++) {
        size_t len = 0;
        const char *p = ts_tokenizer_token_bytes(t, id, &len);
        if (!p || !len || added[id] || ts_tokenizer_is_special(t, id)) continue;
        if (complete && (!num || is_ws((uint8_t)p[0]))) continue;
        ts_jfsm s = *st;
        if (ts_jfsm_feed_bytes(&s, p, len)) out[id >> 6] |= (uint64_t)1 << (id & 63);
    }
}

/* States cut from random texts: live prefixes of generated texts (any
 * value and objects) and of their mutants, plus deep nesting near the cap. */
static int make_states(ts_jfsm *states, int cap, uint64_t seed) {
    uint64_t r = seed;
    sbuf b = {0};
    int n = 0;
    const char *fixed[] = {"", "{", "{\"a\"", "{\"a\":", "{\"a\": \"x", "{\"a\": \"\xc3", "{\"a\": \"\xf0\x9f", "[1, 2",
                           "12", "-", "0", "1.5e", "{\"a\":[", "[{\"b\":{\"c\":[[[", "\"\\u00", "tr", "[]", " \n"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < cap; i++) {
        ts_jfsm_init(&states[n], 0);
        if (ts_jfsm_feed_bytes(&states[n], fixed[i], strlen(fixed[i]))) n++;
    }
    /* at the depth cap and just below it, in arrays and objects */
    static char deep[2 * TS_JSON_MAX_DEPTH];
    for (int d = TS_JSON_MAX_DEPTH - 2; d <= TS_JSON_MAX_DEPTH && n + 2 <= cap; d++) {
        for (int i = 0; i < d; i++) deep[i] = '[';
        ts_jfsm_init(&states[n], 0);
        if (ts_jfsm_feed_bytes(&states[n], deep, (size_t)d)) n++;
        ts_jfsm_init(&states[n], 0);
        if (ts_jfsm_feed_bytes(&states[n], deep, (size_t)d - 1) && ts_jfsm_feed_bytes(&states[n], "{\"k\":", 5)) n++;
    }
    while (n < cap) {
        gen_doc(&b, &r, rnd(&r, 2));
        if (rnd(&r, 3) == 0) mutate(&b, &r);
        ts_jfsm st;
        ts_jfsm_init(&st, 0);
        const size_t cut = (size_t)rnd(&r, (int)b.n + 1);
        size_t i = 0;
        for (; i < cut; i++) {
            ts_jfsm t = st;
            if (!ts_jfsm_feed(&t, (uint8_t)b.p[i])) break;
            st = t;
        }
        states[n++] = st;
    }
    free(b.p);
    return n;
}



/* Masks for n_states states: trie walk == brute force; cached == walked;
 * prints the walk's and the cache's cost per mask. */
static void check_masks(const char *path, int n_states, int brute_every) {
    ts_tokenizer *t = load_tok(path);
    if (!t) return;
    const int V = ts_tokenizer_vocab_size(t), words = (V + 63) / 64;
    ts_constraint *c = NULL;
    ts_error err = {0};
    double t0 = ts_now();
    if (ts_constraint_json(t, 0, &c, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s: %s", path, err.msg);
        ts_tokenizer_free(t);
        return;
    }
    const double t_build = ts_now() - t0;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.constraint = c;
    ts_cgen g;
    if (ts_cgen_init(&g, &gp, V, &err)) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    uint8_t *added = calloc((size_t)V, 1);
    ts_tok_mark_added(t, added);
    uint64_t *a = malloc(8 * (size_t)words), *b = malloc(8 * (size_t)words), *m = malloc(8 * (size_t)words);
    ts_jfsm *st = malloc(sizeof(ts_jfsm) * (size_t)n_states);
    const int n = make_states(st, n_states, 7);
    int bad = 0, cache_bad = 0, checked = 0;
    double t_walk = 0, t_hit = 0, t_max = 0;
    int i_max = 0;
    long allowed = 0;
    for (int i = 0; i < n && bad < 3; i++) {
        t0 = ts_now();
        ts_constraint_byte_mask(&g, &st[i], 0, a);
        const double dt = ts_now() - t0;
        t_walk += dt;
        if (dt > t_max) t_max = dt, i_max = i;
        if (i % brute_every == 0 || i < 40) {
            brute_mask(t, added, &st[i], b, words);
            checked++;
            if (memcmp(a, b, 8 * (size_t)words)) {
                int first = -1, nd = 0;
                for (int id = 0; id < V; id++)
                    if (((a[id >> 6] ^ b[id >> 6]) >> (id & 63)) & 1) nd++, first = first < 0 ? id : first;
                size_t len = 0;
                const char *p = ts_tokenizer_token_bytes(t, first, &len);
                fprintf(stderr, "  state %d (%s, depth %d): %d ids differ, first %d '%.*s' (walk %d)\n", i,
                        ts_jfsm_describe(&st[i]), st[i].h.depth, nd, first, (int)len, p ? p : "",
                        (int)((a[first >> 6] >> (first & 63)) & 1));
                bad++;
            }
        }
        for (int w = 0; w < words; w++) allowed += __builtin_popcountll(a[w]);
        ts_constraint_byte_mask(&g, &st[i], 1, m); /* a miss (or a hit of an equal key) */
        t0 = ts_now();
        ts_constraint_byte_mask(&g, &st[i], 1, m); /* a hit */
        t_hit += ts_now() - t0;
        cache_bad += memcmp(a, m, 8 * (size_t)words) != 0;
    }
    ts_constraint_info info;
    ts_constraint_get_info(c, &info);
    fprintf(stderr,
            "  %s: %d ids, %d in the trie (%d nodes, longest %d bytes, <= %d closers), built in %.0f ms; %d states: "
            "walk %.3f ms/mask uncached (worst %.3f ms, %s), %.4f ms cached (a hit), %.0f ids allowed on average; %d "
            "vs brute force, cache %d entries of %d, %ld hits %ld misses\n",
            path, V, info.n_tokens, info.n_nodes, info.max_len, info.max_close, t_build * 1e3, n, t_walk * 1e3 / n,
            t_max * 1e3, ts_jfsm_describe(&st[i_max]), t_hit * 1e3 / n, (double)allowed / n, checked, info.cache_n,
            info.cache_cap, info.hits, info.misses);
    free(a), free(b), free(m), free(st), free(added);
    ts_cgen_free(&g);
    ts_constraint_free(c);
    ts_tokenizer_free(t);
    CHECK_MSG(bad == 0, "%s: %d masks differ from brute force", path, bad);
    CHECK_MSG(cache_bad == 0, "%s: %d cached masks differ from the walk", path, cache_bad);
}

TS_TEST(constraint, mask_vs_brute_force) { check_masks("models/default/tokenizer.json", 600, 1); }

TS_TEST(constraint, mask_vs_brute_force_qwen3) {
    const char *p = qwen3_tokenizer();
    if (!p) SKIP("cannot unpack the Qwen3 tokenizer fixture");
    check_masks(p, 200, 4);
}

/* One index a tokenizer: constraints over it share the trie (one build,
 * reference counted), a wrap's literal tokens stay the constraint's own,
 * and a constraint outlives the tokenizer with the same masks. */
static void index_shared(const char *path) {
    ts_tokenizer *t = load_tok(path);
    if (!t) return;
    const int V = ts_tokenizer_vocab_size(t), words = (V + 63) / 64;
    ts_error err = {0};
    ts_constraint *c[3] = {NULL, NULL, NULL};
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}";
    const ts_constraint_wrap w = {"<tool_call>\n", "\n</tool_call>", "\n", 1};
    double dt[3];
    for (int k = 0; k < 3; k++) {
        const double t0 = ts_now();
        const int rc = k == 0   ? ts_constraint_json(t, 0, &c[k], &err)
                       : k == 1 ? ts_constraint_json_schema(t, schema, strlen(schema), &c[k], &err)
                                : ts_constraint_json_schema_wrap(t, schema, strlen(schema), &w, &c[k], &err);
        dt[k] = ts_now() - t0;
        CHECK_MSG(rc == 0, "%s: constraint %d: %s", path, k, err.msg);
    }
    if (!c[0] || !c[1] || !c[2]) goto out;
    ts_constraint_info in[3];
    for (int k = 0; k < 3; k++) ts_constraint_get_info(c[k], &in[k]);
    CHECK_MSG(in[0].index && in[0].index == in[1].index && in[1].index == in[2].index, "three indexes for one tokenizer");
    CHECK_MSG(in[2].index_refs == 4, "index held %d times (the tokenizer and three constraints)", in[2].index_refs);
    /* the literal tokens are the wrapped constraint's alone */
    int lit_w = 0, lit_plain = 0;
    for (int id = 0; id < V; id++) {
        lit_w += ts_constraint_token_literal(c[2], id);
        lit_plain += ts_constraint_token_literal(c[1], id) + ts_constraint_token_literal(c[0], id);
    }
    CHECK_MSG(lit_plain == 0, "%d literal tokens in constraints without a wrap", lit_plain);
    CHECK_MSG(lit_w > 0, "no literal token in the wrapped constraint (<tool_call> is one token in Qwen vocabularies)");
    fprintf(stderr, "  %s: first constraint %.1f ms (the index), then %.2f / %.2f ms; %d literal tokens in the wrap\n",
            path, dt[0] * 1e3, dt[1] * 1e3, dt[2] * 1e3, lit_w);
    /* masks before and after the tokenizer is freed */
    {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.constraint = c[0];
        ts_cgen g;
        CHECK(ts_cgen_init(&g, &gp, V, &err) == 0);
        enum { K = 60 };
        ts_jfsm *st = malloc(sizeof(ts_jfsm) * K);
        uint64_t *a = malloc(8 * (size_t)words * K), *b = malloc(8 * (size_t)words);
        const int n = make_states(st, K, 5);
        for (int i = 0; i < n; i++) ts_constraint_byte_mask(&g, &st[i], 0, a + (size_t)i * words);
        ts_tokenizer_free(t);
        t = NULL;
        ts_constraint_get_info(c[0], &in[0]);
        CHECK_MSG(in[0].index_refs == 3, "index held %d times after the tokenizer's free", in[0].index_refs);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            ts_constraint_byte_mask(&g, &st[i], 0, b);
            bad += memcmp(a + (size_t)i * words, b, 8 * (size_t)words) != 0;
        }
        CHECK_MSG(bad == 0, "%d masks changed once the tokenizer was freed", bad);
        ts_cgen_free(&g);
        free(st), free(a), free(b);
    }
out:
    for (int k = 0; k < 3; k++) ts_constraint_free(c[k]);
    ts_tokenizer_free(t);
}

TS_TEST(constraint, index_shared) { index_shared("models/default/tokenizer.json"); }

TS_TEST(constraint, index_shared_qwen3) {
    const char *p = qwen3_tokenizer();
    if (!p) SKIP("cannot unpack the Qwen3 tokenizer fixture");
    index_shared(p);
}

/* A cache far smaller than the states: evictions, and masks still right. */
TS_TEST(constraint, mask_cache_eviction) {
    ts_tokenizer *t = load_tok("models/default/tokenizer.json");
    CHECK(t);
    ts_constraint *c = NULL;
    ts_error err = {0};
    CHECK(ts_constraint_json(t, 1, &c, &err) == 0);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.constraint = c;
    const int V = ts_tokenizer_vocab_size(t), words = (V + 63) / 64;
    ts_cgen g;
    CHECK(ts_cgen_init(&g, &gp, V, &err) == 0);
    ts_constraint_cache_limit(c, 8);
    ts_constraint_info info;
    /* states of many keys (cut from random texts), more than 8 */
    const int k = 300;
    ts_jfsm *st = malloc(sizeof(ts_jfsm) * (size_t)k);
    make_states(st, k, 99);
    uint64_t *a = malloc(8 * (size_t)words), *m = malloc(8 * (size_t)words);
    int bad = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < k; i++) {
            ts_constraint_byte_mask(&g, &st[i], 0, a);
            ts_constraint_byte_mask(&g, &st[i], 1, m);
            bad += memcmp(a, m, 8 * (size_t)words) != 0;
        }
    ts_constraint_get_info(c, &info);
    free(a), free(m), free(st);
    ts_cgen_free(&g);
    ts_constraint_free(c);
    ts_tokenizer_free(t);
    CHECK_MSG(bad == 0, "%d cached masks differ", bad);
    CHECK_MSG(info.cache_n == 8 && info.cache_cap == 8, "cache holds %d of %d", info.cache_n, info.cache_cap);
    CHECK_MSG(info.misses > 16 && info.hits > 0, "%ld misses, %ld hits", info.misses, info.hits);
}

/* ---- generation ---- */


static ts_engine *open_default(int dflash) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cpu";
    ep.dflash = dflash;
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open("models/default", &ep, &e, &err)) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return e;
}


/* The reply's verdict: ids from `from` on (a final stop id removed) decoded;
 * 1 when it parses (as an object when object_only) and the recognizer
 * calls it complete, 2 when it is a live prefix (cut by the budget), 0 when
 * neither. *text receives the decoded bytes. */
static int verdict(const ts_tokenizer *t, const rec *r, int from, const int32_t *stop, int n_stop, int object_only,
                   ts_text *text, int *stopped) {
    int n = r->n;
    *stopped = 0;
    for (int i = 0; n > from && i < n_stop; i++)
        if (r->ids[n - 1] == stop[i]) *stopped = 1;
    n -= *stopped;
    text->len = 0;
    ts_error err = {0};
    if (ts_tokenizer_decode(t, r->ids + from, n - from, text, &err)) return 0;
    ts_jfsm st;
    ts_jfsm_init(&st, object_only);
    if (!ts_jfsm_feed_bytes(&st, text->s, text->len)) return 0;
    if (!ts_jfsm_complete(&st)) return 2;
    char *z = malloc(text->len + 1);
    memcpy(z, text->s, text->len);
    z[text->len] = 0;
    cJSON *j = cJSON_ParseWithLengthOpts(z, text->len + 1, NULL, 1);
    const int ok = j && (!object_only || cJSON_IsObject(j));
    cJSON_Delete(j);
    free(z);
    return ok ? 1 : 0;
}

static int32_t PR_IDS[64];
static int prompt(const ts_tokenizer *t, const char *text) {
    ts_tokens v = {0};
    ts_error err = {0};
    if (ts_tokenizer_encode((ts_tokenizer *)t, text, strlen(text), &v, &err)) return 0;
    int n = (int)TS_MIN(v.n, 64);
    memcpy(PR_IDS, v.ids, sizeof(int32_t) * (size_t)n);
    ts_tokens_free(&v);
    return n;
}

TS_TEST(constraint, generate_json) {
    ts_engine *e = open_default(0);
    CHECK(e);
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    int32_t stop[8];
    ts_error err = {0};
    const int n_stop = ts_chat_stop_ids("models/default", stop, 8, &err);
    CHECK_MSG(n_stop > 0, "no stop ids: %s", err.msg);
    const int T = prompt(t, "<|im_start|>user\nDescribe a cat as JSON.<|im_end|>\n<|im_start|>assistant\n");
    CHECK(T > 0);
    static rec r;
    ts_text text = {0};
    int complete = 0, cut = 0;
    for (int object_only = 0; object_only < 2; object_only++) {
        ts_constraint *c = NULL;
        CHECK(ts_constraint_json(t, object_only, &c, &err) == 0);
        for (int mode = 0; mode < 5; mode++) {
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = 400;
            gp.constraint = c;
            gp.stop_ids = stop, gp.n_stop = n_stop;
            if (mode) gp.temperature = 0.7f + 0.2f * (float)mode, gp.top_p = 0.95f, gp.seed = (uint64_t)mode * 7919;
            if (mode == 4) gp.n_stop = 0; /* no stop ids: ends on the completing token */
            if (gen_in(e, 1024, PR_IDS, T, &gp, 0, 0, &r, &err)) {
                ts_test_fail(__FILE__, __LINE__, "object_only %d mode %d: %s", object_only, mode, err.msg);
                ts_constraint_free(c);
                goto out;
            }
            int stopped;
            const int v = verdict(t, &r, 0, stop, gp.n_stop, object_only, &text, &stopped);
            fprintf(stderr, "  %s, %s: %d tokens%s: %.*s%s\n", object_only ? "object" : "any value",
                    mode ? "sampled" : "greedy", r.n, stopped ? " + stop" : "", (int)TS_MIN(text.len, 100), text.s,
                    text.len > 100 ? "..." : "");
            if (!(v == 1 || (v == 2 && r.n == gp.n_predict && !stopped))) {
                ts_test_fail(__FILE__, __LINE__, "object_only %d mode %d: reply is not %s: '%.*s'", object_only, mode,
                             v == 2 ? "complete but stopped early" : "JSON", (int)text.len, text.s);
                ts_constraint_free(c);
                goto out;
            }
            /* a complete reply ends on a stop id, or without stop ids on its last token */
            if (v == 1 && gp.n_stop && !stopped && r.n < gp.n_predict) {
                ts_test_fail(__FILE__, __LINE__, "complete reply ended without a stop id");
                ts_constraint_free(c);
                goto out;
            }
            complete += v == 1, cut += v == 2;
        }
        ts_constraint_free(c);
    }
    fprintf(stderr, "  %d complete replies, %d cut by the budget (live prefixes)\n", complete, cut);
    CHECK(complete > 0);
out:
    ts_text_free(&text);
    ts_tokenizer_free(t);
    ts_engine_close(e);
}

/* constraint_after: free until the id is generated, constrained after. The
 * id is one plain greedy decoding emits unconstrained (its 5th token), so
 * the first 5 tokens must be plain's, then the reply JSON. */
TS_TEST(constraint, constraint_after) {
    ts_engine *e = open_default(0);
    CHECK(e);
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    int32_t stop[8];
    ts_error err = {0};
    const int n_stop = ts_chat_stop_ids("models/default", stop, 8, &err);
    const int T = prompt(t, "Once upon a time");
    static rec plain, got;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 300;
    gp.stop_ids = stop, gp.n_stop = n_stop;
    CHECK(gen_in(e, 1024, PR_IDS, T, &gp, 0, 0, &plain, &err) == 0);
    CHECK(plain.n > 5);
    /* the first occurrence of plain's 5th token */
    int k = 4;
    for (int i = 0; i < 4; i++)
        if (plain.ids[i] == plain.ids[4]) k = i;
    ts_constraint *c = NULL;
    CHECK(ts_constraint_json(t, 1, &c, &err) == 0);
    gp.constraint = c;
    gp.constraint_after = plain.ids[k];
    int rc = gen_in(e, 1024, PR_IDS, T, &gp, 0, 0, &got, &err);
    ts_text text = {0};
    int stopped = 0, v = rc ? -1 : verdict(t, &got, k + 1, stop, n_stop, 1, &text, &stopped);
    fprintf(stderr, "  after id %d (token %d): %d tokens, JSON part '%.*s'\n", plain.ids[k], k, got.n,
            (int)TS_MIN(text.len, 80), text.s ? text.s : "");
    ts_text_free(&text);
    ts_constraint_free(c);
    ts_tokenizer_free(t);
    ts_engine_close(e);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK_MSG(got.n > k + 1 && !memcmp(got.ids, plain.ids, sizeof(int32_t) * (size_t)(k + 1)),
              "the tokens up to the start id are not plain decoding's");
    CHECK_MSG(v == 1 || (v == 2 && !stopped), "the reply after the start id is not JSON (verdict %d)", v);
}

/* Before its start id a reply cannot end: with a stop id that plain
 * decoding emits as its 6th token and a start id it never emits, the
 * constrained run emits no stop id at all, and its first 5 ids are plain
 * decoding's. */
TS_TEST(constraint, no_stop_before_the_start_id) {
    ts_engine *e = open_default(0);
    CHECK(e);
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    ts_error err = {0};
    const int T = prompt(t, "Once upon a time");
    static rec plain, got;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 120;
    CHECK(gen_in(e, 1024, PR_IDS, T, &gp, 0, 0, &plain, &err) == 0);
    int k = 5; /* the first occurrence of plain's 6th id */
    for (int i = 0; i < 5; i++)
        if (plain.ids[i] == plain.ids[5]) { k = i; break; }
    int32_t stop = plain.ids[k];
    ts_constraint *c = NULL;
    CHECK(ts_constraint_json(t, 1, &c, &err) == 0);
    int32_t never = 0; /* an id plain decoding never emitted: the constraint never starts */
    for (int32_t id = 300; !never; id++) {
        int seen = 0;
        for (int i = 0; i < plain.n; i++) seen |= plain.ids[i] == id;
        if (!seen && ts_constraint_token_ok(c, id)) never = id;
    }
    gp.stop_ids = &stop, gp.n_stop = 1;
    gp.constraint = c, gp.constraint_after = never;
    const int rc = gen_in(e, 1024, PR_IDS, T, &gp, 0, 0, &got, &err);
    int stops = 0;
    for (int i = 0; i < got.n; i++) stops += got.ids[i] == stop;
    /* the same through the candidate path (what a device takes: the stop
     * ids banned through topn's list, no row read), every step decided */
    static rec cand;
    long a0, d0, a1, d1;
    setenv("TS_SAMPLE_TOPN", "1", 1);
    ts_gen_topn_stats(&a0, &d0);
    const int rc2 = gen_in(e, 1024, PR_IDS, T, &gp, 0, 0, &cand, &err);
    ts_gen_topn_stats(&a1, &d1);
    unsetenv("TS_SAMPLE_TOPN");
    ts_constraint_free(c);
    ts_tokenizer_free(t);
    ts_engine_close(e);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK_MSG(got.n == 120 && stops == 0, "%d tokens, the stop id %d emitted %d times before the start id", got.n, stop,
              stops);
    CHECK_MSG(!memcmp(got.ids, plain.ids, sizeof(int32_t) * (size_t)k), "the ids before the stop differ from plain's");
    CHECK_MSG(rc2 == 0 && cand.n == got.n && !memcmp(cand.ids, got.ids, sizeof(int32_t) * (size_t)got.n),
              "the candidate path gave other ids");
    CHECK_MSG(a1 - a0 == got.n && d1 - d0 == got.n, "candidates asked %ld, decided %ld of %d steps", a1 - a0, d1 - d0,
              got.n);
}

/* Speculative decoding under the constraint: greedy MTP 1..4 and DFlash
 * give plain decoding's ids (the verify rows are decode rows; each row's
 * mask is the state after the accepted drafts before it). Sampled: the
 * reply is still JSON. */
TS_TEST(constraint, speculative_same_as_plain) {
    struct stat sb;
    const int dfl = !stat("models/default/dflash/config.json", &sb);
    ts_engine *e = open_default(dfl);
    CHECK(e);
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    int32_t stop[8];
    ts_error err = {0};
    const int n_stop = ts_chat_stop_ids("models/default", stop, 8, &err);
    const int T = prompt(t, "<|im_start|>user\nList three colors in JSON.<|im_end|>\n<|im_start|>assistant\n");
    static rec ref, got;
    ts_text text = {0};
    int fails = 0;
    for (int object_only = 0; object_only < 2 && !fails; object_only++)
        for (int with_stop = 0; with_stop < 2 && !fails; with_stop++) {
            ts_constraint *c = NULL;
            CHECK(ts_constraint_json(t, object_only, &c, &err) == 0);
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = 200;
            gp.constraint = c;
            if (with_stop) gp.stop_ids = stop, gp.n_stop = n_stop;
            if (gen_in(e, 1024, PR_IDS, T, &gp, 0, 0, &ref, &err)) {
                fprintf(stderr, "  plain: %s\n", err.msg);
                fails++;
            }
            for (int M = 1; M <= 5 && !fails; M++) {
                const int B = M == 5 ? (dfl ? 4 : 0) : 0, MM = M == 5 ? 0 : M;
                if (M == 5 && !B) break;
                if (gen_in(e, 1024, PR_IDS, T, &gp, MM, B, &got, &err)) {
                    fprintf(stderr, "  MTP %d / DFlash %d: %s\n", MM, B, err.msg);
                    fails++;
                } else if (got.n != ref.n || memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n)) {
                    fprintf(stderr, "  object_only %d, stop ids %d: %s %d: %d tokens, plain %d, differ\n", object_only,
                            with_stop, B ? "DFlash" : "MTP", B ? B : MM, got.n, ref.n);
                    fails++;
                }
            }
            /* sampled with MTP: still JSON */
            gp.temperature = 0.9f, gp.seed = 11;
            int stopped = 0, v = 0;
            if (!fails && !gen_in(e, 1024, PR_IDS, T, &gp, 3, 0, &got, &err))
                v = verdict(t, &got, 0, stop, gp.n_stop, object_only, &text, &stopped);
            if (!fails && !(v == 1 || (v == 2 && got.n == gp.n_predict))) {
                fprintf(stderr, "  sampled MTP 3: not JSON: '%.*s' (%s)\n", (int)text.len, text.s, err.msg);
                fails++;
            }
            ts_constraint_free(c);
            fprintf(stderr, "  object_only %d, stop ids %d: plain %d tokens; MTP 1..4%s identical\n", object_only,
                    with_stop, ref.n, dfl ? " and DFlash 4" : "");
        }
    ts_text_free(&text);
    ts_tokenizer_free(t);
    ts_engine_close(e);
    CHECK(fails == 0);
}

/* The sampler's mask: ids outside it are never drawn, greedy or sampled,
 * and ts_sampler_probs puts no mass on them; clearing restores the bits. */
TS_TEST(constraint, sampler_mask) {
    enum { V = 300 };
    float logits[V];
    uint64_t s = 5;
    for (int i = 0; i < V; i++) logits[i] = (float)rnd(&s, 1000) / 100.0f;
    uint64_t mask[(V + 63) / 64] = {0};
    for (int i = 7; i < V; i += 37) mask[i >> 6] |= (uint64_t)1 << (i & 63);
    ts_sampler_params sp;
    ts_sampler_params_default(&sp);
    sp.temperature = 1.0f, sp.seed = 3;
    ts_sampler *smp = NULL;
    ts_error err = {0};
    CHECK(ts_sampler_new(V, &sp, &smp, &err) == 0);
    float probs[V];
    int32_t id;
    ts_sampler_set_mask(smp, mask);
    CHECK(ts_sampler_probs(smp, logits, probs, &err) == 0);
    double mass = 0;
    for (int i = 0; i < V; i++) {
        const int allowed = (mask[i >> 6] >> (i & 63)) & 1;
        CHECK_MSG(allowed || probs[i] == 0.0f, "id %d outside the mask has probability %g", i, (double)probs[i]);
        mass += probs[i];
    }
    CHECK(fabs(mass - 1.0) < 1e-5);
    for (int k = 0; k < 200; k++) {
        CHECK(ts_sampler_sample(smp, logits, &id, &err) == 0);
        CHECK_MSG((mask[id >> 6] >> (id & 63)) & 1, "drew id %d outside the mask", id);
    }
    ts_topn_args a;
    CHECK(ts_sampler_topn_args(smp, &a) == 1); /* the row, not a backend's candidates */
    ts_sampler_set_mask(smp, NULL);
    CHECK(ts_sampler_topn_args(smp, &a) == 0);
    ts_sampler_free(smp);
    /* what the mask adds to a greedy step of the released models' 248,320
     * ids: a mask of every other word (a string's is mostly ones, an
     * object's mostly zeros) */
    enum { BV = 248320 };
    float *row = malloc(sizeof(float) * BV);
    uint64_t *bm = malloc(sizeof(uint64_t) * (BV / 64));
    for (int i = 0; i < BV; i++) row[i] = (float)rnd(&s, 1000) / 100.0f;
    for (int w = 0; w < BV / 64; w++) bm[w] = w & 1 ? ~(uint64_t)0 : 0x0101010101010101ull;
    sp.temperature = 0;
    CHECK(ts_sampler_new(BV, &sp, &smp, &err) == 0);
    double t[2] = {0, 0};
    for (int k = 0; k < 40; k++) {
        ts_sampler_set_mask(smp, k & 1 ? bm : NULL);
        double t0 = ts_now();
        CHECK(ts_sampler_sample(smp, row, &id, &err) == 0);
        t[k & 1] += ts_now() - t0;
        CHECK(!(k & 1) || ((bm[id >> 6] >> (id & 63)) & 1));
    }
    fprintf(stderr, "  greedy step over 248,320 ids: %.3f ms, %.3f ms with a mask\n", t[0] * 1e3 / 20, t[1] * 1e3 / 20);
    ts_sampler_free(smp);
    free(row);
    free(bm);
}

TS_TEST(constraint, bad_input) {
    ts_constraint *c = (ts_constraint *)1;
    ts_error err = {0};
    CHECK(ts_constraint_json(NULL, 0, &c, &err) == TS_E_ARG && c == NULL && strstr(err.msg, "tokenizer"));
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    CHECK(ts_constraint_json(t, 2, &c, &err) == TS_E_ARG && strstr(err.msg, "object_only"));
    CHECK(ts_constraint_json(t, 0, NULL, &err) == TS_E_ARG);
    ts_constraint_free(NULL);
    CHECK(ts_constraint_json(t, 1, &c, &err) == 0);
    ts_engine *e = open_default(0);
    CHECK(e);
    static rec r;
    const int32_t pr[3] = {1, 2, 3};
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 8;
    gp.constraint = c;
    const int32_t bad_stop[1] = {1 << 24};
    gp.stop_ids = bad_stop, gp.n_stop = 1;
    int rc = gen_in(e, 1024, pr, 3, &gp, 0, 0, &r, &err);
    CHECK_MSG(rc == TS_E_ARG && strstr(err.msg, "stop id") && r.n == 0, "bad stop id: %d %s", rc, err.msg);
    gp.n_stop = 0;
    gp.constraint_after = 1 << 24;
    rc = gen_in(e, 1024, pr, 3, &gp, 0, 0, &r, &err);
    CHECK_MSG(rc == TS_E_ARG && strstr(err.msg, "constraint_after") && r.n == 0, "bad start id: %d %s", rc, err.msg);
    ts_constraint_free(c);
    /* a constraint of another model's tokenizer: more ids than the model */
    const char *q3 = qwen3_tokenizer();
    if (q3) {
        ts_tokenizer *big = load_tok(q3);
        CHECK(big && ts_constraint_json(big, 0, &c, &err) == 0);
        gp.constraint = c;
        gp.constraint_after = 0;
        rc = gen_in(e, 1024, pr, 3, &gp, 0, 0, &r, &err);
        ts_constraint_free(c);
        ts_tokenizer_free(big);
        CHECK_MSG(rc == TS_E_ARG && strstr(err.msg, "more than the model") && r.n == 0, "tokenizer too big: %d %s", rc,
                  err.msg);
    }
    /* a vocabulary lacking what the grammar needs: a tokenizer of letters
     * only cannot even start an object. The generation fails naming it. */
    char path[600];
    snprintf(path, sizeof path, "%s/constraint-letters.json", ts_test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f);
    fprintf(f, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2},\"merges\":[]},"
               "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false},"
               "\"decoder\":{\"type\":\"ByteLevel\"}}");
    fclose(f);
    ts_tokenizer *lt = load_tok(path);
    CHECK(lt);
    CHECK(ts_constraint_json(lt, 1, &c, &err) == 0);
    gp.constraint = c;
    gp.constraint_after = 0;
    rc = gen_in(e, 1024, pr, 3, &gp, 0, 0, &r, &err);
    CHECK_MSG(rc == TS_E_ARG && strstr(err.msg, "no token") && r.n == 0, "letters only: %d %s", rc, err.msg);
    fprintf(stderr, "  %s\n", err.msg);
    ts_constraint_free(c);
    ts_tokenizer_free(lt);
    ts_tokenizer_free(t);
    ts_engine_close(e);
}
