/* test_schema.c: schema-constrained generation (group `schema`;
 * ts_constraint_json_schema, src/text/json_schema.c, src/text/schema_fsm.c).
 *
 * The judge is an independent validator (tests/fuzz/schema_valid.c, written
 * from the JSON Schema specification over cJSON trees, the standard
 * reading) and tables written by hand, never the recognizer itself:
 * - hand cases: for each schema, documents with the byte where the
 *   recognizer must refuse them (the first byte no valid document has
 *   there) or the verdict that they are complete, each also judged by the
 *   validator (a refused document the standard reading accepts is one of
 *   the documented narrowings: properties in order, one written form of
 *   an enum value);
 * - random documents: valid documents generated from the schema (by this
 *   file, from the cJSON tree) are accepted at every byte and complete, fed
 *   a byte at a time and in token-sized pieces; their mutants, when
 *   accepted, validate; the live prefix of every mutant completes
 *   (fuzz_schema_complete) to a document that validates: no dead end;
 * - refusals: unsupported keywords, bad $ref, cycles, too deep, too large,
 *   malformed, unsatisfiable: TS_E_ARG naming the keyword and its path;
 * - masks (gen/constraint.c's schema walk and cache) against feeding every
 *   token's bytes, on the bundled tokenizer and Qwen3's (151,669 ids), with
 *   the cost per mask printed;
 * - generation on the bundled model and on the tiny fixtures (with a
 *   byte-level tokenizer written here), greedy and sampled, several
 *   schemas: the reply validates; greedy MTP gives plain decoding's ids.
 */
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <sys/stat.h>

#include "fuzz/fuzz.h"
#include "gen/constraint.h"
#include "text/json_schema.h"
#include "text/schema_fsm.h"
#include "text/tokenizer.h"
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

static ts_schema *compile(const char *text, ts_error *err) {
    ts_schema *sc = NULL;
    if (ts_schema_compile(text, strlen(text), &sc, err)) return NULL;
    return sc;
}

static ts_sfsm_work *WORK;
static ts_sstate *state_new(void) { return malloc(sizeof(ts_sstate)); }

/* The first refused byte (-1: all accepted); *complete the verdict at the end. */
static long refused_at(const ts_schema *sc, const char *d, size_t n, int *complete) {
    if (!WORK) WORK = malloc(sizeof *WORK);
    ts_sstate *s = state_new();
    ts_sfsm_init(s, sc);
    long at = -1;
    for (size_t i = 0; i < n && at < 0; i++)
        if (!ts_sfsm_feed_bytes(sc, s, d + i, 1, WORK)) at = (long)i;
    *complete = at < 0 && ts_sfsm_complete(sc, s);
    free(s);
    return at;
}

/* The validator's verdict on a document text: 1, 0, -1 when cJSON cannot
 * read it (not JSON, a lone surrogate, a \u0000). */
static int std_valid(const char *schema, const char *doc, size_t n) {
    if (memmem(doc, n, "\\u0000", 6)) return -1; /* cJSON's strings end at a NUL */
    cJSON *s = cJSON_Parse(schema);
    char *z = malloc(n + 1);
    memcpy(z, doc, n);
    z[n] = 0;
    cJSON *v = cJSON_ParseWithLengthOpts(z, n + 1, NULL, 1);
    free(z);
    int r = -1;
    if (s && v) r = fuzz_schema_valid(s, s, v, 0);
    cJSON_Delete(s);
    cJSON_Delete(v);
    return r;
}

/* ---- the schemas ---- */

static const char S_PERSON[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},"
    "\"email\":{\"type\":[\"string\",\"null\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},\"minItems\":1,\"maxItems\":3},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\",\"minLength\":5,\"maxLength\":5}},\"required\":[\"city\"]}},"
    "\"required\":[\"name\",\"tags\"],\"additionalProperties\":false,\"title\":\"a person\"}";

static const char S_TREE[] =
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
    "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":3}},"
    "\"required\":[\"value\"]}},\"$ref\":\"#/$defs/node\"}";

static const char S_ENUM[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
    "\"size\":{\"enum\":[1,2,12,2.5]},"
    "\"mixed\":{\"enum\":[\"a\",null,true,{\"k\":[1,\"x\"]},[]]},"
    "\"kind\":{\"const\":\"fixed\",\"description\":\"always\"},"
    "\"lvl\":{\"type\":\"integer\",\"enum\":[1,\"one\",2.5,3]}},"
    "\"required\":[\"color\",\"size\"]}";

static const char S_ANYOF[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"shape\":{\"anyOf\":["
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"}},\"required\":[\"kind\",\"r\"]},"
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"rect\"},\"w\":{\"type\":\"number\"},\"h\":{\"type\":\"number\"}},"
    "\"required\":[\"kind\",\"w\",\"h\"]}]},"
    "\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":4},"
    "\"id\":{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"minLength\":2}]},"
    "\"val\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"boolean\"}]}},"
    "\"required\":[\"shape\"]}";

static const char S_STRARR[] =
    "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":3},\"minItems\":2}";

/* more for the random tests: free keys, any values, a linked list through
 * anyOf, a top-level enum of numbers that prefix each other, type lists */
static const char S_MAP[] =
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"array\",\"items\":{\"type\":[\"integer\",\"null\"]},"
    "\"maxItems\":2}}";
static const char S_ANY[] = "{\"description\":\"anything\"}";
static const char S_LIST[] =
    "{\"definitions\":{\"cell\":{\"type\":\"object\",\"properties\":{\"head\":{\"type\":\"string\",\"maxLength\":2},"
    "\"tail\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/definitions/cell\"}]}},\"required\":[\"head\",\"tail\"]}},"
    "\"allOf\":[{\"$ref\":\"#/definitions/cell\"}]}";
static const char S_NUMS[] = "{\"enum\":[1,12,123,-4.5e-3,true]}";
static const char S_TYPES[] =
    "{\"type\":\"array\",\"items\":{\"type\":[\"object\",\"array\",\"number\",\"boolean\",\"null\",\"string\"],"
    "\"maxLength\":1,\"maxItems\":1,\"items\":{\"type\":\"integer\"},\"properties\":{\"z\":{\"type\":\"boolean\"}}}}";

static const char *const SCHEMAS[] = {S_PERSON, S_TREE, S_ENUM, S_ANYOF, S_STRARR, S_MAP, S_ANY, S_LIST, S_NUMS, S_TYPES};
#define N_SCHEMAS ((int)(sizeof SCHEMAS / sizeof SCHEMAS[0]))

/* ---- hand cases ---- */

enum { VALID, LIVE, BAD };
typedef struct {
    const char *schema;
    const char *ok, *rest; /* BAD: refused at rest[0], after ok */
    int kind;
    int std;               /* the validator on ok + rest: 1, 0, -1 not JSON */
} hcase;

static const hcase HAND[] = {
    {S_PERSON, "{\"name\":\"Ann\",\"age\":30,\"email\":null,\"tags\":[\"a\"],\"address\":{\"city\":\"Oslo\",\"zip\":\"12345\"}}", "", VALID, 1},
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"a\",\"bc\",\"def\"]}", "", VALID, 1},
    {S_PERSON, " { \"name\" : \"Ann\" ,\n \"tags\" : [ \"x\" ] } ", "", VALID, 1},
    {S_PERSON, "{\"name\":\"Ann\",\"age\":-0,\"tags\":[\"\\u00e9\\ud83d\\ude00x\"]}", "", VALID, 1},
    {S_PERSON, "{\"name\":\"Ann\",\"email\":\"x\",\"tags\":[\"a\"]}", "", VALID, 1},
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"a\"", "", LIVE, -1},
    {S_PERSON, "{\"name\":\"", "\",\"tags\":[\"a\"]}", BAD, 0},                  /* minLength 1 */
    {S_PERSON, "{\"name\":\"Annabell", "e\",\"tags\":[\"a\"]}", BAD, 0},         /* maxLength 8 */
    {S_PERSON, "{\"", "tags\":[\"a\"],\"name\":\"Ann\"}", BAD, 1},             /* order: a narrowing */
    {S_PERSON, "{\"name\":\"Ann\",\"age\":1", ".5,\"tags\":[\"a\"]}", BAD, 0},   /* integer */
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[", "]}", BAD, 0},                   /* minItems */
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"a\",\"b\",\"c\"", ",\"d\"]}", BAD, 0}, /* maxItems */
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"abc", "d\"]}", BAD, 0},
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"ab\\u00e9", "\\n\"]}", BAD, 0},  /* an escape past maxLength */
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"a\"],\"", "extra\":1}", BAD, 0},  /* additionalProperties */
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"a\"],\"address\":{\"", "zip\":\"12345\"}}", BAD, 0}, /* city first */
    {S_PERSON, "{\"name\":\"Ann\",\"age\":-", "x,\"tags\":[\"a\"]}", BAD, -1},
    {S_PERSON, "{\"name\":\"Ann\",\"email\":", "1,\"tags\":[\"a\"]}", BAD, 0},
    {S_PERSON, "{\"name\":\"Ann\"", "}", BAD, 0},                                /* tags required */
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"a\"],\"address\":{\"city\":\"x\",\"zip\":\"1234", "\"}}", BAD, 0},
    {S_PERSON, "{\"name\":\"Ann\",\"tags\":[\"a\"]} ", "x", BAD, -1},
    {S_PERSON, "", "[]", BAD, 0},
    {S_TREE, "{\"value\":1,\"children\":[{\"value\":2},{\"value\":3,\"children\":[{\"value\":4,\"children\":[]}]}]}", "", VALID, 1},
    {S_TREE, "{\"value\":1,\"children\":[{\"value\":2,\"children\":[{\"value\":3,\"children\":[{\"value\":-4}]}]}]}", "", VALID, 1},
    {S_TREE, "{\"value\":1,\"children\":[{\"value\":2}", "", LIVE, -1},
    {S_TREE, "{\"value\":1,\"children\":[{", "}]}", BAD, 0},
    {S_TREE, "{\"value\":1,\"children\":[{\"value\":1},{\"value\":2},{\"value\":3}", ",{\"value\":4}]}", BAD, 0},
    {S_TREE, "{\"value\":1,\"children\":[{\"value\":", "\"x\"}]}", BAD, 0},
    {S_TREE, "{\"", "children\":[]}", BAD, 0},
    {S_ENUM, "{\"color\":\"green\",\"size\":12}", "", VALID, 1},
    {S_ENUM, "{\"color\":\"green\",\"size\":1}", "", VALID, 1},
    {S_ENUM, "{\"color\":\"blue\",\"size\":2.5,\"mixed\":{\"k\":[1,\"x\"]},\"kind\":\"fixed\",\"lvl\":3}", "", VALID, 1},
    {S_ENUM, "{\"color\":\"red\",\"size\":2,\"mixed\":[],\"lvl\":1}", "", VALID, 1},
    {S_ENUM, "{\"color\":\"red\",\"size\":2,\"mixed\":null}", "", VALID, 1},
    {S_ENUM, "{\"color\":\"gr", "a\",\"size\":1}", BAD, 0},
    {S_ENUM, "{\"color\":\"green\",\"size\":12", "3}", BAD, 0},
    {S_ENUM, "{\"color\":\"green\",\"size\":2.", "0}", BAD, 1},                 /* one written form: a narrowing */
    {S_ENUM, "{\"color\":\"green\",\"size\":1,\"mixed\":{\"k\":[1,", " \"x\"]}}", BAD, 1}, /* compact: a narrowing */
    {S_ENUM, "{\"color\":\"green\",\"size\":1,\"lvl\":", "\"one\"}", BAD, 0},  /* filtered by type */
    {S_ENUM, "{\"color\":\"green\",\"size\":1,\"lvl\":", "2.5}", BAD, 0},
    {S_ENUM, "{\"color\":\"green\",\"size\":1,\"kind\":\"fix", "x\"}", BAD, 0},
    {S_ANYOF, "{\"shape\":{\"kind\":\"circle\",\"r\":1.5}}", "", VALID, 1},
    {S_ANYOF, "{\"shape\":{\"kind\":\"rect\",\"w\":1,\"h\":2e3},\"note\":null,\"id\":\"ab\",\"val\":true}", "", VALID, 1},
    {S_ANYOF, "{\"shape\":{\"kind\":\"rect\",\"w\":1,\"h\":2},\"note\":\"abcd\",\"id\":7,\"val\":-0.5}", "", VALID, 1},
    {S_ANYOF, "{\"shape\":{\"kind\":\"circle\",\"", "w\":1}}", BAD, 0},
    {S_ANYOF, "{\"shape\":{\"kind\":\"rect\",\"w\":1", "}}", BAD, 0},
    {S_ANYOF, "{\"shape\":{\"kind\":\"", "square\"}}", BAD, 0},
    {S_ANYOF, "{\"shape\":{\"kind\":\"circle\",\"r\":1},\"note\":\"abcd", "e\"}", BAD, 0},
    {S_ANYOF, "{\"shape\":{\"kind\":\"circle\",\"r\":1},\"id\":\"a", "\"}", BAD, 0},
    {S_ANYOF, "{\"shape\":{\"kind\":\"circle\",\"r\":1},\"id\":1", ".5}", BAD, 0},
    {S_ANYOF, "{\"shape\":{\"kind\":\"circle\",\"r\":1},\"val\":", "\"x\"}", BAD, 0},
    {S_ANYOF, "{\"shape\":{\"kind\":\"circle\",\"r\":1", "", LIVE, -1},
    {S_STRARR, "[\"ab\",\"\\u00e9\\u00e9\\u00e9\"]", "", VALID, 1},
    {S_STRARR, "[\"ab\",\"\\ud83d\\ude00x\"]", "", VALID, 1},
    {S_STRARR, "[\"ab\",\"\xc3\xa9\xf0\x9f\x98\x80\"]", "", VALID, 1},
    {S_STRARR, "[\"ab\",\"\\ud83d\\ude00\\ud83d\\ude00\\ud83d\\ude00\"]", "", VALID, 1},
    {S_STRARR, "[\"ab\"", "]", BAD, 0},
    {S_STRARR, "[\"a", "\"]", BAD, 0},
    {S_STRARR, "[\"abc\",\"abc", "d\"]", BAD, 0},
    {S_STRARR, "[\"ab\",\"\\ud83d\\ude00\\ud83d\\ude00\\ud83d\\ude00", "\\ud83d\\ude00\"]", BAD, 0},
    {S_STRARR, "[\"ab\",\"xy\\ud83d", "x\"]", BAD, -1},     /* a lone high half counts, then x is the 4th */
    {S_STRARR, "[\"ab\",\"xy\\ud83d\\", "n\"]", BAD, -1},   /* only a low half may follow */
    {S_STRARR, "[\"ab\",\"xy\\ud83d\\u", "0041\"]", BAD, -1},
    {S_STRARR, "[\"ab\",\"xy\\ud83d\\uD", "800\"]", BAD, -1}, /* a second high half: cJSON refuses the pair */
    {S_STRARR, "[\"ab\",\"xy\\ud83d\\uDF00\"]", "", VALID, 1},
    {S_STRARR, "[\"ab\",\"\xc3\xa9\xc3\xa9\xc3\xa9", "\xc3\xa9\"]", BAD, 0},
    {S_STRARR, "[\"ab\",\"\xc3", "\"]", BAD, 0}, /* cJSON takes the broken byte */
    {S_NUMS, "1", "", VALID, 1},
    {S_NUMS, "12", "", VALID, 1},
    {S_NUMS, "123", "", VALID, 1},
    {S_NUMS, "123", "4", BAD, 0},
    {S_NUMS, "-0.0045", "", VALID, 1},  /* -4.5e-3 in its shortest round-trip form */
    {S_NUMS, "-0.004", "4", BAD, 0},
    {S_NUMS, "-", "4.5e-3", BAD, 1},     /* another form of the same number: a narrowing */
    {S_NUMS, " true ", "", VALID, 1},
    {S_NUMS, "", "2", BAD, 0},
    {S_LIST, "{\"head\":\"a\",\"tail\":{\"head\":\"bc\",\"tail\":null}}", "", VALID, 1},
    {S_LIST, "{\"head\":\"a\",\"tail\":{\"head\":\"bc\",\"tail\":{", "}}}", BAD, 0},
    {S_MAP, "{\"x\":[1,null],\"\":[],\"x y\":[-0]}", "", VALID, 1},
    {S_MAP, "{\"x\":[1,null", ",2]}", BAD, 0},
    {S_MAP, "{\"x\":[1", ".0]}", BAD, 1}, /* integer: digits only, a narrowing */
    {S_ANY, "[{\"a\":[1,{\"b\":null}]},\"x\",-1.5e3,true]", "", VALID, 1},
    {S_TYPES, "[{\"z\":true},[5],1.5,false,null,\"a\",{}]", "", VALID, 1},
    {S_TYPES, "[[5", ",6]]", BAD, 0},
    {S_TYPES, "[{\"", "y\":1}]", BAD, 1},  /* no extra keys beside properties: a narrowing */
    {S_TYPES, "[\"a", "b\"]", BAD, 0},
};

TS_TEST(schema, recognizer_hand_cases) {
    int n = 0, narrow = 0;
    for (size_t i = 0; i < sizeof HAND / sizeof HAND[0]; i++) {
        const hcase *h = &HAND[i];
        ts_error err = {0};
        ts_schema *sc = compile(h->schema, &err);
        CHECK_MSG(sc, "case %zu: the schema does not compile: %s", i, err.msg);
        sbuf d = {0};
        puts_(&d, h->ok);
        puts_(&d, h->rest);
        int complete;
        const long at = refused_at(sc, d.p, d.n, &complete);
        const long want = h->kind == BAD ? (long)strlen(h->ok) : -1;
        CHECK_MSG(at == want, "case %zu '%s': refused at %ld, expected %ld", i, d.p, at, want);
        CHECK_MSG(h->kind == BAD || complete == (h->kind == VALID), "case %zu '%s': complete %d", i, d.p, complete);
        const int sv = std_valid(h->schema, d.p, d.n);
        CHECK_MSG(sv == h->std, "case %zu '%s': the validator says %d, the table %d", i, d.p, sv, h->std);
        /* the invariant behind the tables: what the recognizer completes validates */
        CHECK(!(complete && sv != 1));
        narrow += h->kind == BAD && sv == 1;
        /* the table's prefix before a refusal is a prefix of a valid document */
        if (h->kind == BAD) {
            ts_sstate *s = state_new();
            ts_sfsm_init(s, sc);
            CHECK(ts_sfsm_feed_bytes(sc, s, h->ok, strlen(h->ok), WORK));
            static uint8_t tail[4096];
            const size_t k = fuzz_schema_complete(sc, s, tail, sizeof tail);
            free(s);
            CHECK_MSG(k < sizeof tail, "case %zu: the prefix '%s' does not complete", i, h->ok);
            sbuf c = {0};
            puts_(&c, h->ok);
            put(&c, tail, k);
            const int cv = std_valid(h->schema, c.p, c.n);
            CHECK_MSG(cv == 1 || (cv == -1 && memmem(c.p, c.n, "\\u", 2)),
                      "case %zu: the prefix completed as '%s' does not validate", i, c.p);
            free(c.p);
        }
        free(d.p);
        ts_schema_free(sc);
        n++;
    }
    fprintf(stderr, "  %d hand-written cases, %d of them refusals the standard reading accepts (narrowings)\n", n, narrow);
}

/* ---- random valid documents, written from the schema's cJSON tree ---- */

typedef struct gctx {
    const cJSON *root;
    uint64_t r;
    sbuf *b;
} gctx;

static const cJSON *deref(const cJSON *root, const cJSON *s) {
    for (int hops = 0; hops < 64 && cJSON_IsObject(s); hops++) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref"), *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
        if (ref) {
            const char *p = ref->valuestring + 1;
            const cJSON *cur = root;
            char seg[256];
            while (*p == '/') {
                size_t n = 0;
                for (p++; *p && *p != '/';) seg[n++] = *p++;
                seg[n] = 0;
                cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
            }
            s = cur;
        } else if (all) s = all->child;
        else break;
    }
    return s;
}

static void g_ws(gctx *g) {
    static const char *const w[] = {"", "", "", "", "", " ", "\n", "\n  ", "\t"};
    puts_(g->b, w[rnd(&g->r, 9)]);
}

/* One written form of a value: the compiler's documented one (compact,
 * minimal escapes, shortest round-trip numbers). */
static void canon(sbuf *b, const cJSON *v) {
    char t[40];
    if (cJSON_IsNull(v)) puts_(b, "null");
    else if (cJSON_IsTrue(v)) puts_(b, "true");
    else if (cJSON_IsFalse(v)) puts_(b, "false");
    else if (cJSON_IsNumber(v)) {
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*g", p, v->valuedouble);
            if (strtod(t, NULL) == v->valuedouble) break;
        }
        puts_(b, t);
    } else if (cJSON_IsString(v)) {
        puts_(b, "\"");
        for (const unsigned char *p = (const unsigned char *)v->valuestring; *p; p++) {
            if (*p == '"' || *p == '\\') put(b, "\\", 1), put(b, p, 1);
            else if (*p == '\n') puts_(b, "\\n");
            else if (*p < 0x20) snprintf(t, sizeof t, "\\u%04x", *p), puts_(b, t);
            else put(b, p, 1);
        }
        puts_(b, "\"");
    } else {
        const int obj = cJSON_IsObject(v);
        puts_(b, obj ? "{" : "[");
        for (const cJSON *x = v->child; x; x = x->next) {
            if (x != v->child) puts_(b, ",");
            if (obj) {
                cJSON *k = cJSON_CreateString(x->string);
                canon(b, k);
                cJSON_Delete(k);
                puts_(b, ":");
            }
            canon(b, x);
        }
        puts_(b, obj ? "}" : "]");
    }
}

static void g_string(gctx *g, int lo, int hi) {
    static const char *const ch[] = {"a", "b", "Z", " ", "0", "\\n", "\\\"", "\\\\", "\\/", "\\u00e9", "\xc3\xa9",
                                     "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\\ud83d\\ude00", "\\t", "'"};
    const int n = lo + rnd(&g->r, hi - lo + 1);
    puts_(g->b, "\"");
    for (int i = 0; i < n; i++) puts_(g->b, ch[rnd(&g->r, 16)]);
    puts_(g->b, "\"");
}

static void g_number(gctx *g, int integer) {
    static const char *const ints[] = {"0", "-0", "7", "-12", "123456", "99"};
    static const char *const nums[] = {"0.5", "-2.25", "1e5", "1E+2", "-3.5e-3", "0.0"};
    puts_(g->b, integer || rnd(&g->r, 2) ? ints[rnd(&g->r, 6)] : nums[rnd(&g->r, 6)]);
}

static int type_bits(const cJSON *s) {
    static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int bits = 0;
    for (const cJSON *x = cJSON_IsArray(t) ? t->child : t; x; x = cJSON_IsArray(t) ? x->next : NULL)
        for (int i = 0; i < 7; i++)
            if (!strcmp(x->valuestring, names[i])) bits |= 1 << i;
    if (t) return bits;
    /* the compiler's documented reading of a schema without `type` */
    static const struct { const char *k; int b; } imp[] = {
        {"properties", 64}, {"required", 64}, {"additionalProperties", 64}, {"items", 32}, {"minItems", 32},
        {"maxItems", 32}, {"minLength", 16}, {"maxLength", 16}};
    for (size_t i = 0; i < sizeof imp / sizeof imp[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, imp[i].k)) bits |= imp[i].b;
    return bits ? bits : 127;
}

static int num_kw(const cJSON *s, const char *k, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : dflt;
}

static void g_value(gctx *g, const cJSON *s, int depth);

static void g_any(gctx *g, int depth) {
    const int k = rnd(&g->r, depth > 2 ? 4 : 6);
    if (k == 0) g_string(g, 0, 3);
    else if (k == 1) g_number(g, 0);
    else if (k == 2) puts_(g->b, (const char *[]){"true", "false", "null"}[rnd(&g->r, 3)]);
    else if (k == 3) g_number(g, 1);
    else {
        puts_(g->b, k == 4 ? "[" : "{");
        for (int i = 0, n = rnd(&g->r, 3); i < n; i++) {
            if (i) puts_(g->b, ","), g_ws(g);
            if (k == 5) g_string(g, 0, 2), g_ws(g), puts_(g->b, ":"), g_ws(g);
            g_any(g, depth + 1);
        }
        puts_(g->b, k == 4 ? "]" : "}");
    }
}

static void g_value(gctx *g, const cJSON *s, int depth) {
    s = deref(g->root, s);
    if (cJSON_IsTrue(s)) {
        g_any(g, depth);
        return;
    }
    const cJSON *alts = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!alts) alts = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (alts) {
        const int n = cJSON_GetArraySize(alts);
        g_value(g, cJSON_GetArrayItem(alts, depth > 5 ? 0 : rnd(&g->r, n)), depth + 1);
        return;
    }
    const int tb = type_bits(s);
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *co = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (en || co) {
        const cJSON *pick[64];
        int n = 0;
        for (const cJSON *v = en ? en->child : co; v && n < 64; v = en ? v->next : NULL) {
            int vb = cJSON_IsNull(v) ? 1 : cJSON_IsBool(v) ? 2 : cJSON_IsString(v) ? 16 : cJSON_IsArray(v) ? 32
                     : cJSON_IsObject(v) ? 64 : 8 | (v->valuedouble == (double)(long long)v->valuedouble ? 4 : 0);
            if (vb & (tb & 8 ? tb | 4 : tb)) pick[n++] = v;
        }
        canon(g->b, pick[rnd(&g->r, n)]);
        return;
    }
    int types[7], nt = 0;
    for (int i = 0; i < 7; i++)
        if (tb >> i & 1) types[nt++] = 1 << i;
    const int t = types[rnd(&g->r, nt)];
    switch (t) {
    case 1: puts_(g->b, "null"); break;
    case 2: puts_(g->b, rnd(&g->r, 2) ? "true" : "false"); break;
    case 4: g_number(g, 1); break;
    case 8: g_number(g, 0); break;
    case 16: {
        const int lo = num_kw(s, "minLength", 0), hi = num_kw(s, "maxLength", lo + 5);
        g_string(g, lo, TS_MIN(hi, lo + 5));
        break;
    }
    case 32: {
        const int lo = num_kw(s, "minItems", 0), hi = num_kw(s, "maxItems", lo + 3);
        const int n = depth > 5 ? lo : lo + rnd(&g->r, TS_MIN(hi, lo + 3) - lo + 1);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        puts_(g->b, "[");
        g_ws(g);
        for (int i = 0; i < n; i++) {
            if (i) puts_(g->b, ","), g_ws(g);
            if (items) g_value(g, items, depth + 1);
            else g_any(g, depth + 1);
            g_ws(g);
        }
        puts_(g->b, "]");
        break;
    }
    default: {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        puts_(g->b, "{");
        g_ws(g);
        int n = 0;
        if (props) {
            for (const cJSON *p = props->child; p; p = p->next) {
                int required = 0;
                for (const cJSON *r = req ? req->child : NULL; r; r = r->next) required |= !strcmp(r->valuestring, p->string);
                if (!required && (depth > 5 || rnd(&g->r, 2))) continue;
                if (n++) puts_(g->b, ","), g_ws(g);
                cJSON *k = cJSON_CreateString(p->string);
                canon(g->b, k);
                cJSON_Delete(k);
                g_ws(g), puts_(g->b, ":"), g_ws(g);
                g_value(g, p, depth + 1);
                g_ws(g);
            }
        } else if (!cJSON_IsFalse(add)) {
            for (int i = 0, m = depth > 5 ? 0 : rnd(&g->r, 3); i < m; i++) {
                if (i) puts_(g->b, ","), g_ws(g);
                g_string(g, 0, 2);
                g_ws(g), puts_(g->b, ":"), g_ws(g);
                if (add && !cJSON_IsTrue(add)) g_value(g, add, depth + 1);
                else g_any(g, depth + 1);
            }
        }
        puts_(g->b, "}");
    }
    }
}

static void gen_doc(gctx *g, const cJSON *s) {
    g->b->n = 0;
    put(g->b, "", 0);
    g_ws(g);
    g_value(g, s, 0);
    g_ws(g);
}

/* One random mutation of b (no NUL bytes). */
static void mutate(sbuf *b, uint64_t *r) {
    static const char alpha[] = "{}[]\",:\\ 0123456789-+.eEtrufalsn\x01\x1f\x80\xc3\xed\xf0\xa9\tuabxyz";
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
    } else if (n) {
        size_t a = (size_t)rnd(r, (int)n), l = (size_t)rnd(r, (int)TS_MIN(n - a, 12) + 1);
        char t[16];
        memcpy(t, b->p + a, l);
        put(b, t, l);
    }
    b->p[b->n] = 0;
}

TS_TEST(schema, recognizer_random_documents) {
    long n_docs = 0, n_mut = 0, n_acc = 0, n_live = 0, n_narrow = 0;
    ts_sstate *s = state_new(), *t = state_new();
    if (!WORK) WORK = malloc(sizeof *WORK);
    static uint8_t tail[1 << 14];
    sbuf b = {0}, c = {0};
    for (int k = 0; k < N_SCHEMAS; k++) {
        ts_error err = {0};
        ts_schema *sc = compile(SCHEMAS[k], &err);
        CHECK_MSG(sc, "schema %d: %s", k, err.msg);
        cJSON *js = cJSON_Parse(SCHEMAS[k]);
        gctx g = {js, 1000 + (uint64_t)k, &b};
        for (int it = 0; it < 400; it++) {
            gen_doc(&g, js);
            /* valid by construction: the validator agrees, the recognizer
             * takes every byte and calls it complete */
            CHECK_MSG(std_valid(SCHEMAS[k], b.p, b.n) == 1, "schema %d: the generator wrote an invalid '%s'", k, b.p);
            int complete;
            const long at = refused_at(sc, b.p, b.n, &complete);
            CHECK_MSG(at < 0 && complete, "schema %d: valid '%s' refused at %ld (complete %d)", k, b.p, at, complete);
            /* the same in token-sized pieces (a token's feed) */
            ts_sfsm_init(t, sc);
            int ok = 1;
            size_t i = 0, m = 0;
            while (i < b.n && ok) {
                const size_t want = (size_t)(1 + rnd(&g.r, 6)); /* TS_MIN reads its arguments twice */
                m = TS_MIN(want, b.n - i);
                ok = ts_sfsm_feed_token(sc, t, b.p + i, m, WORK);
                i += m;
            }
            CHECK_MSG(ok && ts_sfsm_complete(sc, t), "schema %d: %zu bytes %s in pieces: %d at bytes [%zu, %zu)", k, b.n, b.p, ok,
                      i - m, i);
            n_docs++;
            for (int mu = 0; mu < 3; mu++) {
                mutate(&b, &g.r);
                ts_sfsm_init(s, sc);
                size_t live = 0;
                while (live < b.n && ts_sfsm_feed_bytes(sc, s, b.p + live, 1, WORK)) live++;
                n_mut++;
                if (live == b.n && ts_sfsm_complete(sc, s)) {
                    const int sv = std_valid(SCHEMAS[k], b.p, b.n);
                    CHECK_MSG(sv != 0, "schema %d: the recognizer completes '%s', which does not validate", k, b.p);
                    n_acc++;
                } else if (std_valid(SCHEMAS[k], b.p, b.n) == 1) {
                    /* TS_SCHEMA_SHOW=1 lists them, to check each is a documented narrowing or a cJSON laxity */
                    if (getenv("TS_SCHEMA_SHOW") && n_narrow < 400) fprintf(stderr, "  narrow %d at %zu: %s\n", k, live, b.p);
                    n_narrow++;
                }
                /* no dead end: the live prefix completes to a valid document */
                const size_t kk = fuzz_schema_complete(sc, s, tail, sizeof tail);
                CHECK_MSG(kk < sizeof tail, "schema %d: the live prefix '%.*s' does not complete", k, (int)live, b.p);
                c.n = 0;
                put(&c, b.p, live);
                put(&c, tail, kk);
                const int sv = std_valid(SCHEMAS[k], c.p, c.n);
                CHECK_MSG(sv == 1 || (sv == -1 && memmem(c.p, c.n, "\\u", 2)),
                          "schema %d: the live prefix '%.*s' completed as '%s': validator %d", k, (int)live, b.p, c.p, sv);
                n_live++;
            }
        }
        cJSON_Delete(js);
        ts_schema_free(sc);
    }
    free(s), free(t), free(b.p), free(c.p);
    fprintf(stderr,
            "  %d schemas: %ld valid documents accepted (a byte at a time and in pieces), %ld mutants (%ld complete, "
            "all valid; %ld valid ones refused: narrowings), %ld live prefixes completed and valid\n",
            N_SCHEMAS, n_docs, n_mut, n_acc, n_narrow, n_live);
}

/* ---- refusals ---- */

typedef struct {
    const char *schema;
    const char *want[3]; /* substrings of the message */
} rcase;

static const rcase REFUSE[] = {
    {"{\"type\":\"string\",\"pattern\":\"a+\"}", {"'pattern' at #", "not supported"}},
    {"{\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":3}}}", {"'minimum' at #/properties/a", "numeric bounds"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"null\"},"
     "{\"type\":\"object\",\"properties\":{\"b/c\":{\"type\":\"string\",\"format\":\"date\"}}}]}}}}",
     {"'format' at #/properties/a/items/anyOf/1/properties/b~1c"}},
    {"{\"type\":\"string\",\"nullable\":true}", {"'nullable' at #", "OpenAPI"}},
    {"{\"$ref\":\"#/$defs/missing\",\"$defs\":{}}", {"$ref '#/$defs/missing'", "points to nothing"}},
    {"{\"$ref\":\"#/definitions/a/b\",\"definitions\":{\"a\":{}}}", {"points to nothing", "'b'"}},
    {"{\"$ref\":\"https://example.com/s.json\"}", {"not a local reference"}},
    {"{\"$ref\":\"#node\"}", {"anchors are not supported"}},
    {"{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}}}", {"refers to itself"}},
    {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", {"include themselves"}},
    {"{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", {"'$ref' at # alongside 'type'"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", {"no finite value satisfies the schema at #", "'a' recurses"}},
    {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", {"minLength 5 above maxLength 2 at #"}},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", {"minItems 3 above maxItems 1"}},
    {"{\"type\":\"integer\",\"enum\":[\"a\",\"b\"]}", {"'enum' at # has no value of its 'type'"}},
    {"{\"enum\":[]}", {"non-empty array"}},
    {"{\"enum\":[1],\"const\":1}", {"both 'enum' and 'const'"}},
    {"{\"enum\":[1],\"maxLength\":3}", {"'maxLength' at # alongside 'enum'"}},
    {"{\"enum\":[12345678901234567890]}", {"beyond 2^53"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":true}", {"'additionalProperties' at #", "must be false"}},
    {"{\"required\":[\"x\"]}", {"names 'x', which is not in its 'properties'"}},
    {"{\"properties\":{\"x\":{}},\"required\":[\"x\",\"x\"]}", {"names 'x' twice"}},
    {"{\"type\":\"strin\"}", {"type 'strin' at #"}},
    {"{\"type\":[]}", {"non-empty list"}},
    {"{\"items\":[{\"type\":\"string\"}]}", {"tuples are not supported"}},
    {"{\"prefixItems\":[{\"type\":\"string\"}]}", {"'prefixItems' at #", "tuples"}},
    {"false", {"no value is valid"}},
    {"{\"properties\":{\"a\":false}}", {"false at #/properties/a"}},
    {"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", {"allOf at #", "only allOf of one"}},
    {"{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}", {"'anyOf' at # alongside 'type'"}},
    {"{\"anyOf\":[]}", {"non-empty array of subschemas"}},
    {"{\"minLength\":-1}", {"'minLength' at # must be an integer"}},
    {"{\"maxItems\":1.5}", {"'maxItems' at # must be an integer"}},
    {"{\"uniqueItems\":true}", {"'uniqueItems'"}},
    {"{\"properties\":{\"a\\u0000b\":{}}}", {"\\u0000"}},
    {"{\"type\":\"string\",\"type\":\"integer\"}", {"'type' twice at #"}},
    {"{\"type\":\"string\"", {"not valid JSON", "ends early"}},
    {"{\"type\":\"string\",}", {"not valid JSON: byte 17"}},
    {"{\"enum\":[\"\\ud800\"]}", {"cannot be decoded"}},
    {"", {"empty"}},
    {"[1]", {"must be an object or a boolean"}},
    {"{\"items\":3}", {"#/items must be an object or a boolean"}},
};

TS_TEST(schema, refusals) {
    int n = 0;
    for (size_t i = 0; i < sizeof REFUSE / sizeof REFUSE[0]; i++) {
        const rcase *c = &REFUSE[i];
        ts_schema *sc = (ts_schema *)1;
        ts_error err = {0};
        const int rc = ts_schema_compile(c->schema, strlen(c->schema), &sc, &err);
        CHECK_MSG(rc == TS_E_ARG && sc == NULL, "case %zu '%s': rc %d", i, c->schema, rc);
        CHECK_MSG(!strncmp(err.msg, "JSON schema: ", 13), "case %zu: '%s'", i, err.msg);
        for (int k = 0; k < 3 && c->want[k]; k++)
            CHECK_MSG(strstr(err.msg, c->want[k]), "case %zu '%s': '%s' lacks '%s'", i, c->schema, err.msg, c->want[k]);
        n++;
    }
    /* too deep: arrays of arrays of ... 70 schemas deep (140 levels of JSON) */
    sbuf b = {0};
    for (int i = 0; i < 70; i++) puts_(&b, "{\"items\":");
    puts_(&b, "{}");
    for (int i = 0; i < 70; i++) puts_(&b, "}");
    ts_schema *sc = NULL;
    ts_error err = {0};
    CHECK(ts_schema_compile(b.p, b.n, &sc, &err) == TS_E_ARG && strstr(err.msg, "nests deeper than 64 levels"));
    /* ... and 30 deep compiles */
    b.n = 0;
    for (int i = 0; i < 30; i++) puts_(&b, "{\"items\":");
    puts_(&b, "{}");
    for (int i = 0; i < 30; i++) puts_(&b, "}");
    CHECK_MSG(ts_schema_compile(b.p, b.n, &sc, &err) == 0, "%s", err.msg);
    ts_schema_free(sc);
    /* too large */
    b.n = 0;
    puts_(&b, "{\"description\":\"");
    while (b.n <= TS_SCHEMA_MAX_BYTES) puts_(&b, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    puts_(&b, "\"}");
    CHECK(ts_schema_compile(b.p, b.n, &sc, &err) == TS_E_ARG && strstr(err.msg, "more than 1048576"));
    /* too many alternatives */
    b.n = 0;
    puts_(&b, "{\"anyOf\":[");
    for (int i = 0; i < 17; i++) {
        char t[80];
        snprintf(t, sizeof t, "%s{\"type\":\"string\",\"maxLength\":%d}", i ? "," : "", i);
        puts_(&b, t);
    }
    puts_(&b, "]}");
    CHECK(ts_schema_compile(b.p, b.n, &sc, &err) == TS_E_ARG && strstr(err.msg, "more than 16"));
    free(b.p);
    /* the public call: the compiler's message, nothing built */
    ts_tokenizer *t = NULL;
    CHECK(ts_tokenizer_load("models/default", &t, &err) == 0);
    ts_constraint *c = (ts_constraint *)1;
    CHECK(ts_constraint_json_schema(t, "{\"pattern\":\"x\"}", 15, &c, &err) == TS_E_ARG && c == NULL &&
          strstr(err.msg, "'pattern' at #"));
    CHECK(ts_constraint_json_schema(NULL, "{}", 2, &c, &err) == TS_E_ARG && strstr(err.msg, "no tokenizer"));
    CHECK(ts_constraint_json_schema(t, "{}", 2, NULL, &err) == TS_E_ARG);
    CHECK(ts_constraint_json_schema(t, NULL, 0, &c, &err) == TS_E_ARG && strstr(err.msg, "empty"));
    ts_tokenizer_free(t);
    fprintf(stderr, "  %d refused schemas named with their keyword and path; depth, size and alternatives bounded\n", n + 3);
}

/* Documents nest at most TS_SFSM_DEPTH containers; the compiler's
 * descriptive keywords change nothing; oneOf reads as anyOf. */
TS_TEST(schema, bounds_and_readings) {
    ts_error err = {0};
    ts_schema *sc = compile(S_ANY, &err);
    CHECK(sc);
    static char deep[2 * TS_SFSM_DEPTH + 4];
    for (int d = TS_SFSM_DEPTH; d <= TS_SFSM_DEPTH + 1; d++) {
        for (int i = 0; i < d; i++) deep[i] = '[', deep[d + i] = ']';
        int complete;
        const long at = refused_at(sc, deep, 2 * (size_t)d, &complete);
        CHECK_MSG((at < 0 && complete) == (d <= TS_SFSM_DEPTH), "depth %d: refused at %ld", d, at);
    }
    ts_schema_free(sc);
    /* whitespace runs: 32 bytes between tokens, not 33 */
    sc = compile(S_PERSON, &err);
    CHECK(sc);
    char doc[256];
    for (int w = TS_JSON_MAX_WS; w <= TS_JSON_MAX_WS + 1; w++) {
        snprintf(doc, sizeof doc, "{\"name\":\"a\",%*s\"tags\":[\"b\"]}", w, "");
        int complete;
        const long at = refused_at(sc, doc, strlen(doc), &complete);
        CHECK_MSG((at < 0) == (w <= TS_JSON_MAX_WS), "a run of %d: refused at %ld", w, at);
    }
    ts_schema_free(sc);
    /* the root `true` and {} are any value */
    sc = compile("true", &err);
    CHECK(sc);
    int complete;
    CHECK(refused_at(sc, "[{\"x\":null}]", 12, &complete) < 0 && complete);
    ts_schema_free(sc);
}

/* ---- masks ---- */



static int is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

/* The rule token by token: its bytes fed from st in one piece; never a
 * token the constraint does not index; once complete, no leading
 * whitespace, nothing at all when no reading can go on. */
static void brute_mask(const ts_tokenizer *t, const ts_constraint *c, const ts_schema *sc, const ts_sstate *st,
                       uint64_t *out, int words, ts_sstate *tmp) {
    memset(out, 0, sizeof(uint64_t) * (size_t)words);
    const int V = ts_tokenizer_vocab_size(t), complete = ts_sfsm_complete(sc, st), done = ts_sfsm_done(sc, st);
    for (int id = 0; id < V; id++) {
        size_t len = 0;
        const char *p = ts_tokenizer_token_bytes(t, id, &len);
        if (!ts_constraint_token_ok(c, id)) continue;
        if (complete && (done || is_ws((uint8_t)p[0]))) continue;
        ts_sfsm_copy(tmp, st);
        if (ts_sfsm_feed_token(sc, tmp, p, len, WORK)) out[id >> 6] |= (uint64_t)1 << (id & 63);
    }
}

/* States cut from random valid documents and their mutants (the live
 * prefix), under every schema of the set. */
static int make_states(const ts_schema *sc, const char *schema_text, ts_sstate *states, int cap, uint64_t seed) {
    cJSON *js = cJSON_Parse(schema_text);
    sbuf b = {0};
    gctx g = {js, seed, &b};
    int n = 0;
    while (n < cap) {
        gen_doc(&g, js);
        if (rnd(&g.r, 3) == 0) mutate(&b, &g.r);
        ts_sstate *s = &states[n];
        ts_sfsm_init(s, sc);
        const size_t cut = (size_t)rnd(&g.r, (int)b.n + 1);
        for (size_t i = 0; i < cut && ts_sfsm_feed_bytes(sc, s, b.p + i, 1, WORK); i++) {
        }
        n++;
    }
    free(b.p);
    cJSON_Delete(js);
    return n;
}

static void check_masks(const char *path, int n_per_schema, int brute_every) {
    ts_tokenizer *t = load_tok(path);
    if (!t) return;
    if (!WORK) WORK = malloc(sizeof *WORK);
    const int V = ts_tokenizer_vocab_size(t), words = (V + 63) / 64;
    uint64_t *a = malloc(8 * (size_t)words), *b = malloc(8 * (size_t)words), *m = malloc(8 * (size_t)words);
    ts_sstate *st = malloc(sizeof(ts_sstate) * (size_t)n_per_schema), *tmp = state_new();
    int bad = 0, cache_bad = 0, checked = 0, n_total = 0;
    double t_walk = 0, t_hit = 0, t_max = 0, t_build = 0;
    long allowed = 0;
    for (int k = 0; k < N_SCHEMAS && bad < 3; k++) {
        ts_constraint *c = NULL;
        ts_error err = {0};
        double t0 = ts_now();
        if (ts_constraint_json_schema(t, SCHEMAS[k], strlen(SCHEMAS[k]), &c, &err)) {
            ts_test_fail(__FILE__, __LINE__, "schema %d: %s", k, err.msg);
            break;
        }
        t_build += ts_now() - t0;
        const ts_schema *sc = ts_constraint_schema(c);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.constraint = c;
        ts_cgen g;
        if (ts_cgen_init(&g, &gp, V, &err)) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
        const int n = make_states(sc, SCHEMAS[k], st, n_per_schema, 77 + (uint64_t)k);
        for (int i = 0; i < n && bad < 3; i++) {
            t0 = ts_now();
            ts_constraint_schema_mask(&g, &st[i], 0, a);
            const double dt = ts_now() - t0;
            t_walk += dt;
            t_max = TS_MAX(t_max, dt);
            if (i % brute_every == 0) {
                brute_mask(t, c, sc, &st[i], b, words, tmp);
                checked++;
                if (memcmp(a, b, 8 * (size_t)words)) {
                    int first = -1, nd = 0;
                    for (int id = 0; id < V; id++)
                        if (((a[id >> 6] ^ b[id >> 6]) >> (id & 63)) & 1) nd++, first = first < 0 ? id : first;
                    size_t len = 0;
                    const char *p = ts_tokenizer_token_bytes(t, first, &len);
                    fprintf(stderr, "  schema %d state %d (%s): %d ids differ, first %d '%.*s' (walk %d)\n", k, i,
                            ts_sfsm_describe(&st[i]), nd, first, (int)len, p ? p : "",
                            (int)((a[first >> 6] >> (first & 63)) & 1));
                    bad++;
                }
            }
            for (int w = 0; w < words; w++) allowed += __builtin_popcountll(a[w]);
            ts_constraint_schema_mask(&g, &st[i], 1, m);
            t0 = ts_now();
            ts_constraint_schema_mask(&g, &st[i], 1, m);
            t_hit += ts_now() - t0;
            cache_bad += memcmp(a, m, 8 * (size_t)words) != 0;
            n_total++;
        }
        ts_cgen_free(&g);
        ts_constraint_free(c);
    }
    fprintf(stderr,
            "  %s: %d ids; %d schemas built in %.0f ms each on average; %d states: walk %.3f ms/mask uncached (worst "
            "%.3f ms), %.4f ms cached (a hit), %.0f ids allowed on average; %d vs brute force\n",
            path, V, N_SCHEMAS, t_build * 1e3 / N_SCHEMAS, n_total, t_walk * 1e3 / TS_MAX(n_total, 1), t_max * 1e3,
            t_hit * 1e3 / TS_MAX(n_total, 1), (double)allowed / TS_MAX(n_total, 1), checked);
    free(a), free(b), free(m), free(st), free(tmp);
    ts_tokenizer_free(t);
    CHECK_MSG(bad == 0, "%s: %d masks differ from brute force", path, bad);
    CHECK_MSG(cache_bad == 0, "%s: %d cached masks differ from the walk", path, cache_bad);
}

TS_TEST(schema, mask_vs_brute_force) { check_masks("models/default/tokenizer.json", 60, 1); }

TS_TEST(schema, mask_vs_brute_force_qwen3) {
    const char *p = qwen3_tokenizer();
    if (!p) SKIP("cannot unpack the Qwen3 tokenizer fixture");
    check_masks(p, 30, 6);
}

/* ---- generation ---- */



/* The reply's verdict: 1 complete and valid (the validator), 2 a live
 * prefix cut by the budget, 0 neither. *text receives the decoded bytes. */
static int verdict(const ts_tokenizer *t, const char *schema, const ts_schema *sc, const rec *r, const int32_t *stop,
                   int n_stop, ts_text *text, int *stopped) {
    int n = r->n;
    *stopped = 0;
    for (int i = 0; n > 0 && i < n_stop; i++)
        if (r->ids[n - 1] == stop[i]) *stopped = 1;
    n -= *stopped;
    text->len = 0;
    ts_error err = {0};
    if (ts_tokenizer_decode(t, r->ids, n, text, &err)) return 0;
    int complete;
    if (refused_at(sc, text->s, text->len, &complete) >= 0) return 0;
    if (!complete) return 2;
    return std_valid(schema, text->s, text->len) == 1 ? 1 : 0;
}

static int32_t PR[64];
static int prompt(const ts_tokenizer *t, const char *text) {
    ts_tokens v = {0};
    ts_error err = {0};
    if (ts_tokenizer_encode((ts_tokenizer *)t, text, strlen(text), &v, &err)) return 0;
    int n = (int)TS_MIN(v.n, 64);
    memcpy(PR, v.ids, sizeof(int32_t) * (size_t)n);
    ts_tokens_free(&v);
    return n;
}

/* Schemas for generation: most bound their documents (bounded strings and
 * arrays, enums), so even a random model must finish them in the budget. */
static const char G_TICKET[] =
    "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\",\"maxLength\":12},"
    "\"priority\":{\"enum\":[\"low\",\"high\"]},\"open\":{\"type\":\"boolean\"},"
    "\"labels\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4},\"maxItems\":2},"
    "\"owner\":{\"type\":[\"string\",\"null\"],\"maxLength\":6}},"
    "\"required\":[\"title\",\"priority\",\"open\",\"labels\"]}";
static const char G_UNION[] =
    "{\"type\":\"array\",\"minItems\":1,\"maxItems\":3,\"items\":{\"anyOf\":["
    "{\"type\":\"object\",\"properties\":{\"cat\":{\"const\":\"a\"},\"n\":{\"enum\":[1,2,3]}},\"required\":[\"cat\",\"n\"]},"
    "{\"type\":\"object\",\"properties\":{\"cat\":{\"const\":\"b\"},\"s\":{\"type\":\"string\",\"maxLength\":5}},"
    "\"required\":[\"cat\",\"s\"]},{\"type\":\"null\"}]}}";
static const char G_TREE[] =
    "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"enum\":[0,1]},"
    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},\"required\":[\"v\",\"kids\"]}},"
    "\"$ref\":\"#/$defs/n\"}";
static const char G_NUM[] = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"integer\"}},"
                            "\"required\":[\"x\",\"y\"]}";
static const char *const GSCHEMAS[] = {G_TICKET, G_UNION, G_TREE, G_NUM};
/* whether the schema bounds a document's length (a recursion or a free
 * number does not: such a reply may be cut by the budget, a live prefix) */
static const int GBOUNDED[] = {1, 1, 0, 0};

/* Generation under each schema: greedy and sampled (plain), greedy MTP
 * 1..3 (plain's ids), sampled MTP 2 (valid). Under a bounded schema every
 * reply must be complete within the budget. */
static void run_generation(ts_engine *e, ts_tokenizer *t, const int32_t *pr, int T, const int32_t *stop, int n_stop,
                           int n_predict, int *n_complete, int *n_cut) {
    static rec ref, got;
    ts_text text = {0};
    ts_error err = {0};
    for (size_t k = 0; k < sizeof GSCHEMAS / sizeof GSCHEMAS[0]; k++) {
        ts_constraint *c = NULL;
        if (ts_constraint_json_schema(t, GSCHEMAS[k], strlen(GSCHEMAS[k]), &c, &err)) {
            ts_test_fail(__FILE__, __LINE__, "schema %zu: %s", k, err.msg);
            break;
        }
        const ts_schema *sc = ts_constraint_schema(c);
        for (int mode = 0; mode < 4; mode++) {
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = n_predict;
            gp.constraint = c;
            gp.stop_ids = stop, gp.n_stop = mode == 3 ? 0 : n_stop; /* without stop ids: ends on the completing token */
            if (mode) gp.temperature = 0.6f + 0.3f * (float)mode, gp.top_p = 0.95f, gp.seed = 17 + (uint64_t)mode * 101;
            if (gen_in(e, 2048, pr, T, &gp, 0, 0, &ref, &err)) {
                ts_test_fail(__FILE__, __LINE__, "schema %zu mode %d: %s", k, mode, err.msg);
                goto next;
            }
            int stopped;
            int v = verdict(t, GSCHEMAS[k], sc, &ref, stop, gp.n_stop, &text, &stopped);
            fprintf(stderr, "  schema %zu, %s: %d tokens%s: %.*s%s\n", k, mode ? "sampled" : "greedy", ref.n,
                    stopped ? " + stop" : "", (int)TS_MIN(text.len, 90), text.s, text.len > 90 ? "..." : "");
            if (!(v == 1 || (v == 2 && ref.n == n_predict && !stopped && !GBOUNDED[k]))) {
                ts_test_fail(__FILE__, __LINE__, "schema %zu mode %d: verdict %d for '%.*s'", k, mode, v, (int)text.len,
                             text.s);
                goto next;
            }
            *n_complete += v == 1, *n_cut += v == 2;
            /* drafting: greedy gives plain's ids; sampled stays valid */
            for (int M = 1; M <= 3; M++) {
                if (mode && M != 2) continue;
                if (gen_in(e, 2048, pr, T, &gp, M, 0, &got, &err)) {
                    ts_test_fail(__FILE__, __LINE__, "schema %zu mode %d MTP %d: %s", k, mode, M, err.msg);
                    goto next;
                }
                if (!mode && (got.n != ref.n || memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n))) {
                    ts_test_fail(__FILE__, __LINE__, "schema %zu: greedy MTP %d gave %d tokens, plain %d, other ids", k, M,
                                 got.n, ref.n);
                    goto next;
                }
                v = verdict(t, GSCHEMAS[k], sc, &got, stop, gp.n_stop, &text, &stopped);
                if (!(v == 1 || (v == 2 && got.n == n_predict && !GBOUNDED[k]))) {
                    ts_test_fail(__FILE__, __LINE__, "schema %zu mode %d MTP %d: verdict %d after %d tokens%s for '%.*s'", k,
                                 mode, M, v, got.n, stopped ? " (a stop id)" : "", (int)text.len, text.s);
                    goto next;
                }
            }
        }
    next:
        ts_constraint_free(c);
    }
    ts_text_free(&text);
}

TS_TEST(schema, generate_default_model) {
    ts_engine *e = ts_test_open_cpu("models/default");
    CHECK(e);
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    int32_t stop[8];
    ts_error err = {0};
    const int n_stop = ts_chat_stop_ids("models/default", stop, 8, &err);
    CHECK_MSG(n_stop > 0, "no stop ids: %s", err.msg);
    const int T = prompt(t, "<|im_start|>user\nA support ticket as JSON.<|im_end|>\n<|im_start|>assistant\n");
    CHECK(T > 0);
    int complete = 0, cut = 0;
    /* the budget: the longest document the bounded schemas allow, whitespace
     * runs of 32 bytes in every gap (this model writes them) */
    run_generation(e, t, PR, T, stop, n_stop, 1200, &complete, &cut);
    fprintf(stderr, "  %d complete and valid replies, %d cut by the budget (live prefixes, unbounded schemas only)\n",
            complete, cut);
    ts_tokenizer_free(t);
    ts_engine_close(e);
    CHECK(complete >= 12);
}

/* A byte-level BPE tokenizer of the fixtures' 2048 ids: the 256 bytes
 * (GPT-2's byte-to-character map) and some JSON pieces, so a random model
 * writes random but schema-valid documents. */
static const char *byte_tokenizer(void) {
    static char path[600];
    if (path[0]) return path;
    snprintf(path, sizeof path, "%s/schema-bytes-tokenizer.json", ts_test_tmpdir());
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    int cp[256], k = 0;
    for (int b = 0; b < 256; b++) {
        const int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        cp[b] = keep ? b : 256 + k++;
    }
    static const char *const pieces[] = {"{\"", "\":", "\",", "\"}", "true", "false", "null", "[]", "{}", ", ",
                                         ": ", "\n  ", "\"a", "ab", "},{", "\":\"", "]}", "}}", "[[", "\"x\"",
                                         "low", "high", "\"cat\":", "kids", "[{", "\"v\":0", "  ", "12"};
    fprintf(f, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    const int n_pieces = (int)(sizeof pieces / sizeof pieces[0]);
    for (int id = 0; id < 256 + n_pieces; id++) {
        const char *s = NULL;
        char one[2] = {0, 0};
        if (id < 256) one[0] = (char)id, s = one;
        else s = pieces[id - 256];
        fprintf(f, "%s\"", id ? "," : "");
        const size_t len = id < 256 ? 1 : strlen(s);
        for (size_t i = 0; i < len; i++) {
            const int c = cp[(uint8_t)s[i]];
            if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
            else if (c < 0x80) fputc(c, f);
            else if (c < 0x800) fputc(0xC0 | c >> 6, f), fputc(0x80 | (c & 63), f);
        }
        fprintf(f, "\":%d", id);
    }
    fprintf(f, "},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false},"
               "\"decoder\":{\"type\":\"ByteLevel\"}}");
    fclose(f);
    return path;
}

TS_TEST(schema, generate_tiny_fixtures) {
    const char *tp = byte_tokenizer();
    CHECK(tp);
    ts_tokenizer *t = load_tok(tp);
    CHECK(t);
    CHECK(ts_tokenizer_vocab_size(t) <= 2048);
    /* the bytes come back as bytes */
    size_t len = 0;
    const char *p = ts_tokenizer_token_bytes(t, '{', &len);
    CHECK(p && len == 1 && p[0] == '{');
    p = ts_tokenizer_token_bytes(t, 256, &len);
    CHECK(p && len == 2 && !memcmp(p, "{\"", 2));
    const char *fx[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe"};
    const int32_t stop[1] = {2047}; /* beyond the tokenizer's ids: allowed only once complete */
    int complete = 0, cut = 0;
    for (int f = 0; f < 2; f++) {
        ts_engine *e = ts_test_open_cpu(fx[f]);
        CHECK(e);
        static const int32_t pr[8] = {5, 300, 77, 1024, 9, 2000, 13, 42};
        int c0 = complete;
        run_generation(e, t, pr, 8, stop, 1, 1200, &complete, &cut);
        fprintf(stderr, "  %s: %d complete and valid replies\n", fx[f], complete - c0);
        ts_engine_close(e);
    }
    fprintf(stderr, "  %d complete and valid replies, %d cut by the budget\n", complete, cut);
    ts_tokenizer_free(t);
    CHECK(complete >= 24);
}
