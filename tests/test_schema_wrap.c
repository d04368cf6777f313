/* test_schema_wrap.c: schema documents between fixed literals (group
 * `wrap`; ts_constraint_json_schema_wrap, ts_schema_set_wrap, the wrapped
 * form of src/text/schema_fsm.c and its literal tokens in
 * src/gen/constraint.c), the shape of a forced tool call:
 * "<tool_call>\n" {"name": ..., "arguments": {...}} "\n</tool_call>".
 *
 * - exact literals: a valid wrapped text is accepted at every byte and
 *   complete only after a suffix; every other byte at every position is
 *   refused right there unless it is a document byte the plain recognizer
 *   takes (the oracle: the literals are fixed, the document is the plain
 *   schema's minus its top-level whitespace); a second call only with
 *   repeat;
 * - masks (trie walk + literal tokens + cache) against feeding every
 *   token's bytes on the bundled tokenizer, which has "<tool_call>" and
 *   "</tool_call>" as added tokens: allowed where they spell a literal,
 *   never inside the document;
 * - a generation's constraint (ts_cgen): the tokenizer's own encoding of a
 *   call passes mask and advance, the stop ids come only after a suffix,
 *   an added token inside a string is refused;
 * - generation on the bundled model, greedy and sampled, one and repeated
 *   calls, one tool and a choice of two: the reply parses (ts_reply) into
 *   calls whose names are the tools' and whose arguments validate
 *   (tests/fuzz/schema_valid.c); greedy MTP gives plain decoding's ids;
 *   with constraint_after (the server's "</think>"), the text up to the
 *   start id is the unconstrained reply's, then a valid call;
 * - refusals: bad wraps, TS_E_ARG naming the problem.
 */
#include <cjson/cJSON.h>

#include "fuzz/fuzz.h"
#include "gen/constraint.h"
#include "text/json_schema.h"
#include "text/schema_fsm.h"
#include "text/tokenizer.h"
#include "constraint_fx.h"
#include "ts_test.h"

static const char PRE[] = "<tool_call>\n", SUF[] = "\n</tool_call>", SEP[] = "\n";

/* get_weather's parameters, and the call schemas the server builds from
 * tools: one named tool, and a choice (anyOf) of two */
#define P_WEATHER                                                                                              \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},"                       \
    "\"days\":{\"type\":\"integer\"},\"units\":{\"enum\":[\"c\",\"f\"]},\"tags\":{\"type\":\"array\",\"items\":" \
    "{\"type\":\"string\",\"maxLength\":5},\"maxItems\":2}},\"required\":[\"city\"]}"
#define P_TIME "{\"type\":\"object\",\"properties\":{\"zone\":{\"enum\":[\"utc\",\"cet\"]}},\"required\":[\"zone\"]}"
static const char S_NAMED[] = "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":" P_WEATHER
                              "},\"required\":[\"name\",\"arguments\"]}";
static const char S_CHOICE[] =
    "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":" P_WEATHER
    "},\"required\":[\"name\",\"arguments\"]},{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_time\"},"
    "\"arguments\":" P_TIME "},\"required\":[\"name\",\"arguments\"]}]}";

static const char *const DOCS[] = {
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}",
    "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"K\\u00f8ge \\\"n\\\"\",\"units\":\"f\",\"tags\":[\"a\",\"\"]}}",
    "{\"name\": \"get_weather\",\n \"arguments\": { \"city\" : \"<tool_call>\" }}",
};
static const char *const DOCS_CHOICE[] = {
    "{\"name\": \"get_time\", \"arguments\": {\"zone\": \"cet\"}}",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"units\": \"c\"}}",
};

static ts_sfsm_work *WORK;

static ts_schema *compile_wrapped(const char *schema, int repeat) {
    ts_schema *sc = NULL;
    ts_error err = {0};
    if (ts_schema_compile(schema, strlen(schema), &sc, &err) || ts_schema_set_wrap(sc, PRE, SUF, SEP, repeat, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
        ts_schema_free(sc);
        return NULL;
    }
    return sc;
}

/* prefix + doc + suffix into out */
static size_t wrapped_text(const char *doc, char *out, size_t cap) {
    return (size_t)snprintf(out, cap, "%s%s%s", PRE, doc, SUF);
}

/* A small random step (and a fresh r for the caller's other draws). */
static int rng_cut(uint64_t *r) {
    *r = *r * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((*r >> 33) % 4);
}

static int is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

/* ---- exact literals ---- */

TS_TEST(wrap, recognizer_exact_literals) {
    if (!WORK) WORK = malloc(sizeof *WORK);
    ts_sstate *st = malloc(sizeof *st), *probe = malloc(sizeof *probe), *plain = malloc(sizeof *plain),
              *pprobe = malloc(sizeof *pprobe);
    char text[1024];
    long checked = 0;
    for (int repeat = 0; repeat < 2; repeat++) {
        ts_schema *sc = compile_wrapped(S_NAMED, repeat), *pc = NULL;
        ts_error err = {0};
        CHECK(sc && !ts_schema_compile(S_NAMED, strlen(S_NAMED), &pc, &err));
        for (size_t d = 0; d < sizeof DOCS / sizeof DOCS[0]; d++) {
            const size_t n = wrapped_text(DOCS[d], text, sizeof text), P = strlen(PRE), D = strlen(DOCS[d]);
            ts_sfsm_init(st, sc);
            ts_sfsm_init(plain, pc);
            for (size_t i = 0; i <= n; i++) {
                /* every other byte here: refused unless the plain document takes it */
                const int in_doc = i >= P && i < P + D;
                for (int b = 0; b < 256; b++) {
                    if (i < n && b == (uint8_t)text[i]) continue;
                    ts_sfsm_copy(probe, st);
                    const uint8_t c = (uint8_t)b;
                    const int got = ts_sfsm_feed_bytes(sc, probe, &c, 1, WORK);
                    int want = 0;
                    if (in_doc) {
                        ts_sfsm_copy(pprobe, plain);
                        want = ts_sfsm_feed_bytes(pc, pprobe, &c, 1, WORK) && !(i == P && is_ws(c));
                    }
                    if (i == n && repeat && b == SEP[0]) want = 1; /* the next call's separator */
                    CHECK_MSG(got == want, "repeat %d doc %zu: byte 0x%02x at %zu (after '%.*s'): %s, want %s", repeat, d,
                              b, i, (int)i, text, got ? "taken" : "refused", want ? "taken" : "refused");
                    checked++;
                }
                /* complete exactly at the end */
                CHECK_MSG(ts_sfsm_complete(sc, st) == (i == n), "repeat %d doc %zu: complete %d at %zu of %zu", repeat,
                          d, ts_sfsm_complete(sc, st), i, n);
                CHECK_MSG(ts_sfsm_done(sc, st) == (i == n && !repeat), "repeat %d doc %zu: done at %zu", repeat, d, i);
                if (i == n) break;
                CHECK_MSG(ts_sfsm_feed_bytes(sc, st, text + i, 1, WORK), "repeat %d doc %zu: refused at %zu", repeat, d,
                          i);
                if (i >= P && i < P + D) CHECK(ts_sfsm_feed_bytes(pc, plain, text + i, 1, WORK));
            }
            /* a second call: only with repeat, complete again after it */
            ts_sfsm_init(st, sc);
            char two[2100];
            const size_t n2 = (size_t)snprintf(two, sizeof two, "%s%s%s", text, SEP, text);
            long at = -1;
            for (size_t i = 0; i < n2 && at < 0; i++)
                if (!ts_sfsm_feed_bytes(sc, st, two + i, 1, WORK)) at = (long)i;
            CHECK_MSG(repeat ? at < 0 && ts_sfsm_complete(sc, st) : at == (long)n,
                      "repeat %d doc %zu: two calls refused at %ld (of %zu)", repeat, d, at, n2);
        }
        ts_schema_free(sc);
        ts_schema_free(pc);
    }
    /* a choice of two tools: either call, nothing else */
    ts_schema *sc = compile_wrapped(S_CHOICE, 0);
    CHECK(sc);
    for (size_t d = 0; d < sizeof DOCS_CHOICE / sizeof DOCS_CHOICE[0]; d++) {
        const size_t n = wrapped_text(DOCS_CHOICE[d], text, sizeof text);
        ts_sfsm_init(st, sc);
        CHECK_MSG(ts_sfsm_feed_bytes(sc, st, text, n, WORK) && ts_sfsm_complete(sc, st), "choice doc %zu refused", d);
    }
    ts_sfsm_init(st, sc);
    const char *other = "<tool_call>\n{\"name\": \"get_tim\"";
    CHECK(!ts_sfsm_feed_bytes(sc, st, other, strlen(other), WORK));
    ts_schema_free(sc);
    /* no prefix, no suffix: the plain document, complete at its end, no
     * whitespace around it; a number may end only at the suffix */
    ts_schema *num = NULL;
    ts_error err = {0};
    CHECK(!ts_schema_compile("{\"type\":\"integer\"}", 18, &num, &err) && !ts_schema_set_wrap(num, NULL, ";", ",", 1, &err));
    static const struct {
        const char *t;
        long refused;
        int complete;
    } nc[] = {{"12;", -1, 1}, {"12;,3;", -1, 1}, {"12", -1, 0}, {" 12;", 0, 0}, {"12 ;", 2, 0}, {"12;;", 3, 0}, {"1;,", -1, 0}};
    for (size_t k = 0; k < sizeof nc / sizeof nc[0]; k++) {
        ts_sfsm_init(st, num);
        long at = -1;
        for (size_t i = 0; nc[k].t[i] && at < 0; i++)
            if (!ts_sfsm_feed_bytes(num, st, nc[k].t + i, 1, WORK)) at = (long)i;
        CHECK_MSG(at == nc[k].refused && (at >= 0 || ts_sfsm_complete(num, st) == nc[k].complete),
                  "'%s': refused at %ld, complete %d", nc[k].t, at, ts_sfsm_complete(num, st));
    }
    ts_schema_free(num);
    fprintf(stderr, "  %ld single-byte verdicts against the oracle\n", checked);
    free(st), free(probe), free(plain), free(pprobe);
}

/* ---- masks ---- */


static int32_t id_of(const ts_tokenizer *t, const char *text) {
    const size_t n = strlen(text);
    for (int id = 0; id < ts_tokenizer_vocab_size(t); id++) {
        size_t len = 0;
        const char *p = ts_tokenizer_token_bytes(t, id, &len);
        if (p && len == n && !memcmp(p, text, n)) return id;
    }
    return -1;
}

/* Every token fed from st in one piece (a literal token with the literal
 * step); nothing once done. */
static void brute_mask(const ts_tokenizer *t, const ts_constraint *c, const ts_schema *sc, const ts_sstate *st,
                       uint64_t *out, int words, ts_sstate *tmp) {
    memset(out, 0, sizeof(uint64_t) * (size_t)words);
    for (int id = 0; id < ts_tokenizer_vocab_size(t); id++) {
        size_t len = 0;
        const char *p = ts_tokenizer_token_bytes(t, id, &len);
        if (!ts_constraint_token_ok(c, id)) continue;
        ts_sfsm_copy(tmp, st);
        const int ok = ts_constraint_token_literal(c, id) ? ts_sfsm_feed_literal(sc, tmp, p, len, WORK)
                                                          : ts_sfsm_feed_token(sc, tmp, p, len, WORK);
        if (ok) out[id >> 6] |= (uint64_t)1 << (id & 63);
    }
}

static int bit(const uint64_t *m, int32_t id) { return id >= 0 && (int)((m[id >> 6] >> (id & 63)) & 1); }

/* State after feeding text (NULL when refused). */
static int state_at(const ts_schema *sc, ts_sstate *st, const char *text, size_t n) {
    ts_sfsm_init(st, sc);
    return ts_sfsm_feed_bytes(sc, st, text, n, WORK);
}

TS_TEST(wrap, mask_vs_brute_force) {
    ts_tokenizer *t = load_tok("models/default/tokenizer.json");
    CHECK(t);
    if (!WORK) WORK = malloc(sizeof *WORK);
    const int V = ts_tokenizer_vocab_size(t), words = (V + 63) / 64;
    const int32_t call = id_of(t, "<tool_call>"), end_call = id_of(t, "</tool_call>"), lt = id_of(t, "<");
    CHECK_MSG(call >= 0 && end_call >= 0 && lt >= 0, "the bundled tokenizer lacks <tool_call> (%d), </tool_call> (%d)",
              call, end_call);
    uint64_t *a = malloc(8 * (size_t)words), *b = malloc(8 * (size_t)words), *m = malloc(8 * (size_t)words);
    ts_sstate *st = malloc(sizeof *st), *tmp = malloc(sizeof *tmp);
    int bad = 0, checked = 0, lit_allowed = 0;
    double t_walk = 0;
    uint64_t r = 5;
    char text[2200];
    for (int which = 0; which < 4 && !bad; which++) {
        const int repeat = which & 1, choice = which >> 1;
        const ts_constraint_wrap w = {PRE, SUF, SEP, repeat};
        const char *schema = choice ? S_CHOICE : S_NAMED;
        ts_constraint *c = NULL;
        ts_error err = {0};
        CHECK_MSG(!ts_constraint_json_schema_wrap(t, schema, strlen(schema), &w, &c, &err), "%s", err.msg);
        const ts_schema *sc = ts_constraint_schema(c);
        CHECK(ts_constraint_token_literal(c, call) && ts_constraint_token_literal(c, end_call) &&
              !ts_constraint_token_literal(c, lt) && ts_constraint_token_ok(c, lt));
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.constraint = c;
        ts_cgen g;
        CHECK_MSG(!ts_cgen_init(&g, &gp, V, &err), "%s", err.msg);
        const char *const *docs = choice ? DOCS_CHOICE : DOCS;
        const int n_docs = choice ? 2 : 3;
        for (int d = 0; d < n_docs && !bad; d++) {
            size_t n = wrapped_text(docs[d], text, sizeof text);
            if (repeat) n += (size_t)snprintf(text + n, sizeof text - n, "%s%s%s%s", SEP, PRE, docs[(d + 1) % n_docs], SUF);
            for (size_t cut = 0; cut <= n && !bad; cut += 1 + (size_t)(rng_cut(&r))) {
                /* the cut, and now and then a mutated last byte (a live prefix or not at all) */
                char save = text[cut < n ? cut : 0];
                size_t len = cut;
                if (cut < n && (r >> 7) % 4 == 0) text[cut] = (char)(' ' + (r >> 9) % 95), len = cut + 1;
                const int live = state_at(sc, st, text, len);
                text[cut < n ? cut : 0] = save;
                if (!live) continue;
                double t0 = ts_now();
                ts_constraint_schema_mask(&g, st, 0, a);
                t_walk += ts_now() - t0;
                brute_mask(t, c, sc, st, b, words, tmp);
                checked++;
                if (memcmp(a, b, 8 * (size_t)words)) {
                    int first = -1;
                    for (int id = 0; id < V && first < 0; id++)
                        if (bit(a, id) != bit(b, id)) first = id;
                    size_t tl = 0;
                    const char *tp = ts_tokenizer_token_bytes(t, first, &tl);
                    fprintf(stderr, "  which %d doc %d cut %zu (%s): id %d '%.*s' walk %d brute %d\n", which, d, len,
                            ts_sfsm_describe(st), first, (int)tl, tp ? tp : "", bit(a, first), bit(b, first));
                    bad++;
                }
                lit_allowed += bit(a, call) + bit(a, end_call);
                ts_constraint_schema_mask(&g, st, 1, m);
                ts_constraint_schema_mask(&g, st, 1, m);
                CHECK_MSG(!memcmp(a, m, 8 * (size_t)words), "which %d: a cached mask differs from the walk", which);
            }
        }
        /* the literal tokens where they belong, and nowhere else */
        const char *at_start = "", *in_str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P";
        const char *after_doc = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}";
        char after_nl[256];
        snprintf(after_nl, sizeof after_nl, "%s\n", after_doc);
        CHECK(state_at(sc, st, at_start, 0));
        ts_constraint_schema_mask(&g, st, 0, a);
        CHECK_MSG(bit(a, call) && !bit(a, end_call), "start: <tool_call> %d, </tool_call> %d", bit(a, call), bit(a, end_call));
        CHECK(state_at(sc, st, in_str, strlen(in_str)));
        ts_constraint_schema_mask(&g, st, 0, a);
        CHECK_MSG(bit(a, lt) && !bit(a, call) && !bit(a, end_call), "in a string: '<' %d, <tool_call> %d, </tool_call> %d",
                  bit(a, lt), bit(a, call), bit(a, end_call));
        CHECK(state_at(sc, st, after_doc, strlen(after_doc)));
        ts_constraint_schema_mask(&g, st, 0, a);
        CHECK_MSG(!bit(a, end_call) && !bit(a, call), "after the document: </tool_call> %d", bit(a, end_call));
        CHECK(state_at(sc, st, after_nl, strlen(after_nl)));
        ts_constraint_schema_mask(&g, st, 0, a);
        CHECK_MSG(bit(a, end_call) && !bit(a, call), "after the document and its newline: </tool_call> %d",
                  bit(a, end_call));
        ts_cgen_free(&g);
        ts_constraint_free(c);
    }
    fprintf(stderr, "  %d states vs brute force, %.3f ms a mask uncached, literal tokens allowed %d times\n", checked,
            t_walk * 1e3 / (checked ? checked : 1), lit_allowed);
    free(a), free(b), free(m), free(st), free(tmp);
    ts_tokenizer_free(t);
    CHECK_MSG(!bad, "%d masks differ from brute force", bad);
    CHECK(checked > 100 && lit_allowed > 0);
}

/* ---- a generation's constraint ---- */

TS_TEST(wrap, cgen_encoded_call_and_stop_ids) {
    ts_tokenizer *t = load_tok("models/default/tokenizer.json");
    CHECK(t);
    const int V = ts_tokenizer_vocab_size(t);
    const int32_t stop[2] = {id_of(t, "<|im_end|>"), id_of(t, "<|endoftext|>")}, call = id_of(t, "<tool_call>");
    CHECK(stop[0] >= 0 && stop[1] >= 0 && call >= 0);
    for (int repeat = 0; repeat < 2; repeat++) {
        const ts_constraint_wrap w = {PRE, SUF, SEP, repeat};
        ts_constraint *c = NULL;
        ts_error err = {0};
        CHECK_MSG(!ts_constraint_json_schema_wrap(t, S_NAMED, strlen(S_NAMED), &w, &c, &err), "%s", err.msg);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.constraint = c;
        gp.stop_ids = stop, gp.n_stop = 2;
        char text[1024];
        for (size_t d = 0; d < 2; d++) { /* DOCS[2] holds "<tool_call>" in a string: the tokenizer's added token (below) */
            size_t n = wrapped_text(DOCS[d], text, sizeof text);
            if (repeat) n += (size_t)snprintf(text + n, sizeof text - n, "%s%s%s%s", SEP, PRE, DOCS[0], SUF);
            ts_tokens v = {0};
            CHECK(!ts_tokenizer_encode(t, text, n, &v, &err));
            CHECK_MSG(v.n > 2 && v.ids[0] == call, "the tokenizer does not encode <tool_call> as its token");
            ts_cgen g;
            CHECK_MSG(!ts_cgen_init(&g, &gp, V, &err), "%s", err.msg);
            int completes = 0;
            for (int i = 0; i < v.n; i++) {
                CHECK_MSG(!ts_cgen_mask(&g, &err), "%s", err.msg);
                CHECK_MSG(bit(g.mask, v.ids[i]), "repeat %d doc %zu: token %d (id %d) is not in its mask", repeat, d, i,
                          v.ids[i]);
                /* the stop ids: exactly when a call is complete */
                const int complete = ts_sfsm_complete(ts_constraint_schema(c), g.ss);
                CHECK(bit(g.mask, stop[0]) == complete && bit(g.mask, stop[1]) == complete);
                completes += complete;
                CHECK_MSG(ts_cgen_advance(&g, v.ids[i], &err) == 0, "%s", err.msg);
            }
            CHECK(!ts_cgen_mask(&g, &err) && bit(g.mask, stop[0]));
            CHECK_MSG(completes == repeat, "repeat %d: complete %d times before the end", repeat, completes);
            ts_tokens_free(&v);
            ts_cgen_free(&g);
        }
        /* an added token inside a string: refused by advance, named */
        ts_tokens v = {0};
        const char *in_str = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"";
        CHECK(!ts_tokenizer_encode(t, in_str, strlen(in_str), &v, &err));
        ts_cgen g;
        CHECK(!ts_cgen_init(&g, &gp, V, &err));
        for (int i = 0; i < v.n; i++) CHECK(!ts_cgen_advance(&g, v.ids[i], &err));
        CHECK(ts_cgen_advance(&g, call, &err) == TS_E_ARG && strstr(err.msg, "wrapped JSON schema constraint"));
        ts_tokens_free(&v);
        ts_cgen_free(&g);
        ts_constraint_free(c);
    }
    ts_tokenizer_free(t);
}

/* ---- generation ---- */



/* The calls of a reply's text (ts_reply, the server's parser), each
 * checked: a name of the tools, arguments that validate against its
 * parameters. The number of calls, or -1 (and the failure recorded). */
static int check_calls(const char *text, int choice) {
    ts_reply *rp = NULL;
    ts_error err = {0};
    ts_text re = {0}, co = {0};
    char *calls = NULL;
    if (ts_reply_new(0, NULL, &rp, &err) || ts_reply_push(rp, text, strlen(text), &re, &co, &err) ||
        ts_reply_finish(rp, &re, &co, &calls, &err))
        return ts_test_fail(__FILE__, __LINE__, "reply: %s", err.msg), -1;
    ts_reply_free(rp);
    int n = -1;
    cJSON *arr = calls ? cJSON_Parse(calls) : NULL, *it;
    if (!arr || co.len) {
        ts_test_fail(__FILE__, __LINE__, "no calls parsed from '%s' (content '%s')", text, co.s ? co.s : "");
        goto out;
    }
    n = 0;
    cJSON_ArrayForEach(it, arr) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name"));
        const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(it, "arguments"));
        const int weather = name && !strcmp(name, "get_weather"), time = name && choice && !strcmp(name, "get_time");
        cJSON *s = cJSON_Parse(weather ? P_WEATHER : P_TIME), *v = args ? cJSON_Parse(args) : NULL;
        const int ok = (weather || time) && s && v && fuzz_schema_valid(s, s, v, 0) == 1;
        cJSON_Delete(s), cJSON_Delete(v);
        if (!ok) {
            ts_test_fail(__FILE__, __LINE__, "call %d: name %s, arguments %s do not validate", n, name ? name : "-",
                         args ? args : "-");
            n = -1;
            goto out;
        }
        n++;
    }
out:
    cJSON_Delete(arr);
    ts_chat_text_free(calls);
    ts_text_free(&re), ts_text_free(&co);
    return n;
}

TS_TEST(wrap, generate_default_model) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cpu";
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK_MSG(!ts_engine_open("models/default", &ep, &e, &err), "%s", err.msg);
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    int32_t stop[8];
    const int n_stop = ts_chat_stop_ids("models/default", stop, 8, &err);
    CHECK(n_stop > 0);
    const char *pr = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
                     "<think>\n\n</think>\n\n";
    ts_tokens pv = {0};
    CHECK(!ts_tokenizer_encode(t, pr, strlen(pr), &pv, &err));
    static rec ref, got;
    ts_text text = {0};
    int finished = 0, n_calls = 0;
    for (int which = 0; which < 4; which++) {
        const int repeat = which & 1, choice = which >> 1;
        const ts_constraint_wrap w = {PRE, SUF, SEP, repeat};
        const char *schema = choice ? S_CHOICE : S_NAMED;
        ts_constraint *c = NULL;
        CHECK_MSG(!ts_constraint_json_schema_wrap(t, schema, strlen(schema), &w, &c, &err), "%s", err.msg);
        for (int mode = 0; mode < 3; mode++) {
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = 700;
            gp.constraint = c;
            gp.stop_ids = stop, gp.n_stop = n_stop;
            if (mode) gp.temperature = 0.8f, gp.top_p = 0.95f, gp.seed = 11 + (uint64_t)(mode * 7 + which);
            CHECK_MSG(!gen_in(e, 2048, pv.ids, pv.n, &gp, 0, 0, &ref, &err), "%s", err.msg);
            const int stopped = ref.n && (ref.ids[ref.n - 1] == stop[0] || (n_stop > 1 && ref.ids[ref.n - 1] == stop[1]));
            text.len = 0;
            CHECK(!ts_tokenizer_decode(t, ref.ids, ref.n - stopped, &text, &err));
            fprintf(stderr, "  %s%s, %s: %d tokens%s: %.100s%s\n", choice ? "choice" : "named", repeat ? " repeated" : "",
                    mode ? "sampled" : "greedy", ref.n, stopped ? " + stop" : "", text.s, text.len > 100 ? "..." : "");
            if (stopped) { /* a finished reply: well-formed calls */
                const int k = check_calls(text.s, choice);
                CHECK(k >= 1 && (repeat || k == 1));
                finished++, n_calls += k;
            } else { /* cut by the budget: a live prefix */
                ts_sstate *st = malloc(sizeof *st);
                if (!WORK) WORK = malloc(sizeof *WORK);
                const int live = state_at(ts_constraint_schema(c), st, text.s, text.len);
                free(st);
                CHECK_MSG(live && ref.n == gp.n_predict, "cut after %d tokens, live %d", ref.n, live);
            }
            if (mode) continue;
            for (int M = 1; M <= 3; M += 2) { /* greedy MTP: plain decoding's ids */
                CHECK_MSG(!gen_in(e, 2048, pv.ids, pv.n, &gp, M, 0, &got, &err), "%s", err.msg);
                CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n),
                          "which %d: MTP %d gave %d tokens, plain %d, other ids", which, M, got.n, ref.n);
            }
        }
        ts_constraint_free(c);
    }
    fprintf(stderr, "  %d of 12 replies finished, %d calls, all valid\n", finished, n_calls);
    CHECK(finished >= 6);
    ts_text_free(&text);
    ts_tokens_free(&pv);
    ts_tokenizer_free(t);
    ts_engine_close(e);
}

/* constraint_after (what the server sets to "</think>" when the prompt
 * opens a think block): the reply is free up to the start id, then a
 * call. The start id is taken from the unconstrained greedy reply itself
 * (its 13th token), so the check holds whatever the build's rounding: the
 * constrained reply's first tokens must be exactly the free reply's. */
TS_TEST(wrap, constraint_after_free_then_call) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cpu";
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK_MSG(!ts_engine_open("models/default", &ep, &e, &err), "%s", err.msg);
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    int32_t stop[8];
    const int n_stop = ts_chat_stop_ids("models/default", stop, 8, &err);
    CHECK(n_stop > 0);
    const char *pr = "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n";
    ts_tokens pv = {0};
    CHECK(!ts_tokenizer_encode(t, pr, strlen(pr), &pv, &err));
    static rec freer, got, mtp;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 24;
    gp.stop_ids = stop, gp.n_stop = n_stop;
    CHECK_MSG(!gen_in(e, 2048, pv.ids, pv.n, &gp, 0, 0, &freer, &err), "%s", err.msg);
    CHECK_MSG(freer.n == 24, "the free reply stopped after %d tokens", freer.n);
    int p = 0;
    while (p < 12 && freer.ids[p] != freer.ids[12]) p++; /* the start id's first place */
    const int32_t after = freer.ids[p];
    CHECK(after > 0);
    const ts_constraint_wrap w = {PRE, SUF, SEP, 0};
    ts_constraint *c = NULL;
    CHECK_MSG(!ts_constraint_json_schema_wrap(t, S_CHOICE, strlen(S_CHOICE), &w, &c, &err), "%s", err.msg);
    gp.n_predict = 700;
    gp.constraint = c;
    gp.constraint_after = after;
    CHECK_MSG(!gen_in(e, 2048, pv.ids, pv.n, &gp, 0, 0, &got, &err), "%s", err.msg);
    CHECK_MSG(got.n > p + 1 && !memcmp(got.ids, freer.ids, sizeof(int32_t) * (size_t)(p + 1)),
              "the reply before the start id is not the free reply's");
    const int stopped = got.ids[got.n - 1] == stop[0] || (n_stop > 1 && got.ids[got.n - 1] == stop[1]);
    ts_text free_text = {0}, call = {0};
    CHECK(!ts_tokenizer_decode(t, got.ids, p + 1, &free_text, &err));
    CHECK(!ts_tokenizer_decode(t, got.ids + p + 1, got.n - p - 1 - stopped, &call, &err));
    fprintf(stderr, "  free: '%s' (start id %d at %d), then %d tokens%s: %.80s...\n", free_text.s, after, p,
            got.n - p - 1, stopped ? " + stop" : "", call.s);
    CHECK_MSG(stopped && check_calls(call.s, 1) == 1, "no single valid call after the start id");
    for (int M = 1; M <= 3; M += 2) { /* drafting: the same ids */
        CHECK_MSG(!gen_in(e, 2048, pv.ids, pv.n, &gp, M, 0, &mtp, &err), "%s", err.msg);
        CHECK_MSG(mtp.n == got.n && !memcmp(mtp.ids, got.ids, sizeof(int32_t) * (size_t)got.n), "MTP %d: other ids", M);
    }
    ts_text_free(&free_text), ts_text_free(&call);
    ts_constraint_free(c);
    ts_tokens_free(&pv);
    ts_tokenizer_free(t);
    ts_engine_close(e);
}

/* ---- refusals ---- */

TS_TEST(wrap, refusals) {
    ts_tokenizer *t = load_tok("models/default/tokenizer.json");
    CHECK(t);
    ts_constraint *c = NULL;
    ts_error err = {0};
    CHECK(ts_constraint_json_schema_wrap(t, "{}", 2, NULL, &c, &err) == TS_E_ARG && !c && strstr(err.msg, "no wrap"));
    const ts_constraint_wrap none = {NULL, NULL, NULL, 1};
    CHECK(ts_constraint_json_schema_wrap(t, "{}", 2, &none, &c, &err) == TS_E_ARG && !c &&
          strstr(err.msg, "need a separator or a prefix"));
    static char big[TS_SCHEMA_WRAP_MAX + 2];
    memset(big, 'x', TS_SCHEMA_WRAP_MAX + 1);
    const ts_constraint_wrap longer = {PRE, big, NULL, 0};
    CHECK(ts_constraint_json_schema_wrap(t, "{}", 2, &longer, &c, &err) == TS_E_ARG && strstr(err.msg, "suffix has 4097 bytes"));
    const ts_constraint_wrap w = {PRE, SUF, SEP, 0};
    const char *bad = "{\"type\":\"string\",\"format\":\"date\"}";
    CHECK(ts_constraint_json_schema_wrap(t, bad, strlen(bad), &w, &c, &err) == TS_E_ARG && strstr(err.msg, "'format'"));
    /* a wrap's prefix alone, no suffix: works, complete after the document */
    const ts_constraint_wrap pre_only = {"X", NULL, NULL, 0};
    CHECK(!ts_constraint_json_schema_wrap(t, "{\"enum\":[1]}", 12, &pre_only, &c, &err));
    ts_sstate *st = malloc(sizeof *st);
    if (!WORK) WORK = malloc(sizeof *WORK);
    CHECK(state_at(ts_constraint_schema(c), st, "X1", 2) && ts_sfsm_complete(ts_constraint_schema(c), st) &&
          ts_sfsm_done(ts_constraint_schema(c), st));
    free(st);
    ts_constraint_free(c);
    ts_tokenizer_free(t);
}
