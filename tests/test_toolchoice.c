/* test_toolchoice.c: OpenAI tool_choice in `turbospark serve` (group
 * `toolchoice`; tools/server/server_tools.c, server_cc.c), black-box over
 * loopback HTTP on the bundled model (models/default), plus the
 * constraint cache in process.
 *
 * - a named function: one call, of that function, arguments that validate
 *   against its parameters (the independent validator,
 *   tests/fuzz/schema_valid.c), finish_reason "tool_calls", content null;
 *   with the think block open the reasoning stays free;
 * - "required" with two tools: a call of one of them, valid; with
 *   parallel_tool_calls true one or more (or, cut by max_tokens, none);
 * - "none": the tools are rendered (the prompt counts them) but no call
 *   comes back;
 * - streamed = not streamed; greedy with --spec mtp = plain;
 * - refusals: a forced tool whose parameters the constraint cannot enforce
 *   (400 naming the tool and the keyword; "auto" takes it), unknown
 *   function, no tools, too many tools;
 * - the cache: a repeated request hits (the /metrics counters), another
 *   tool set misses; in process, build time vs hit time on the Qwen3
 *   tokenizer (151,669 ids), LRU eviction, entries held past eviction,
 *   concurrent gets.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <unistd.h>

#include "fuzz/fuzz.h"
#include "gen/constraint.h"
#include "server.h"
#include "server_harness.h"
#include "ts_test.h"

/* ---- helpers ---- */

static int start_default(server *s, const char *const *extra) {
    char cwd[1024], mdir[1200];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    snprintf(mdir, sizeof mdir, "%s/models/default", cwd);
    return server_spawn(s, mdir, extra);
}

static void print_log(const server *s) {
    static char out[4096];
    ts_test_sh(out, sizeof out, "tail -c 3000 %s", s->log);
    fprintf(stderr, "---- server log ----\n%s\n--------------------\n", out);
}

/* the tools: get_weather and get_time, as a client sends them */
#define P_WEATHER                                                                                             \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12,\"description\":\"a city\"}," \
    "\"days\":{\"type\":\"integer\"},\"units\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}"
#define P_TIME                                                                                           \
    "{\"type\":\"object\",\"$defs\":{\"zone\":{\"enum\":[\"utc\",\"cet\",\"pst\"]}},\"properties\":{\"zone\":" \
    "{\"$ref\":\"#/$defs/zone\"}},\"required\":[\"zone\"]}"
#define TOOLS                                                                                                      \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather of a city\"," \
    "\"parameters\":" P_WEATHER "}},{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":" P_TIME  \
    "}}]"

/* The id of "</think>": with thinking on, a logit bias on it closes this
 * random model's think block (it would reason past any budget). */
static int g_think_end = -1;

/* A chat request about the weather: tool_choice (JSON), parallel (-1: not
 * sent), thinking (then a bias of `think` on "</think>"), temperature /
 * seed, max_tokens. */
static void body_of(char *out, size_t cap, const char *tool_choice, int parallel, int think, int seed, int max_tokens) {
    char par[48] = "", bias[64] = "";
    if (parallel >= 0) snprintf(par, sizeof par, ",\"parallel_tool_calls\":%s", parallel ? "true" : "false");
    if (think) snprintf(bias, sizeof bias, ",\"logit_bias\":{\"%d\":%d}", g_think_end, think);
    snprintf(out, cap,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris, and the time?\"}],"
             "\"max_tokens\":%d,\"temperature\":%s,\"seed\":%d," TOOLS ",\"tool_choice\":%s%s%s,"
             "\"chat_template_kwargs\":{\"enable_thinking\":%s}}",
             max_tokens, seed ? "0.8" : "0", seed, tool_choice, par, bias, think ? "true" : "false");
}

/* Whether one call is of an allowed name and its arguments validate. */
static int call_valid(const cJSON *call, const char *allowed1, const char *allowed2, char *why, size_t cap) {
    const char *name = str_at(call, "function.name"), *args = str_at(call, "function.arguments");
    const char *id = str_at(call, "id"), *type = str_at(call, "type");
    if (!name || !args || !id || !type || strcmp(type, "function")) return snprintf(why, cap, "a call without its fields"), 0;
    const int w = !strcmp(name, "get_weather"), t = !strcmp(name, "get_time");
    if (!((allowed1 && !strcmp(name, allowed1)) || (allowed2 && !strcmp(name, allowed2))))
        return snprintf(why, cap, "a call of '%s'", name), 0;
    cJSON *s = cJSON_Parse(w ? P_WEATHER : t ? P_TIME : "false"), *v = cJSON_Parse(args);
    const int ok = s && v && fuzz_schema_valid(s, s, v, 0) == 1;
    cJSON_Delete(s), cJSON_Delete(v);
    if (!ok) snprintf(why, cap, "'%s' arguments %s do not validate", name, args);
    return ok;
}

/* The streamed reply's parts: content, reasoning, the tool_calls deltas
 * (this server sends each call whole, in one chunk), the finish. */
typedef struct {
    char content[16384], reasoning[16384], finish[32];
    cJSON *calls; /* [{"id","type","function":{"name","arguments"}}] */
    int done, bad;
} sse;

static void parse_sse(const char *body, sse *o) {
    memset(o, 0, sizeof *o);
    o->calls = cJSON_CreateArray();
    const char *p = body;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e) { o->bad = 1; break; }
        if (!strncmp(p, "[DONE]", 6)) { o->done = 1; p = e; continue; }
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(e - p));
        if (!j) { o->bad = 1; break; }
        const char *t;
        if ((t = str_at(j, "choices.0.delta.content"))) strncat(o->content, t, sizeof o->content - strlen(o->content) - 1);
        if ((t = str_at(j, "choices.0.delta.reasoning_content")))
            strncat(o->reasoning, t, sizeof o->reasoning - strlen(o->reasoning) - 1);
        if ((t = str_at(j, "choices.0.finish_reason"))) snprintf(o->finish, sizeof o->finish, "%s", t);
        const cJSON *tc = path_get(j, "choices.0.delta.tool_calls"), *it;
        cJSON_ArrayForEach(it, tc) {
            if (int_at(it, "index") != cJSON_GetArraySize(o->calls)) o->bad = 1;
            cJSON *c = cJSON_Duplicate(it, 1);
            cJSON_DeleteItemFromObject(c, "index");
            cJSON_AddItemToArray(o->calls, c);
        }
        cJSON_Delete(j);
        p = e;
    }
}

/* Calls without their ids (a request's id differs from the next one's). */
static char *calls_text(const cJSON *calls) {
    cJSON *c = calls ? cJSON_Duplicate(calls, 1) : cJSON_CreateArray(), *it;
    cJSON_ArrayForEach(it, c) cJSON_DeleteItemFromObject(it, "id");
    char *s = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return s;
}

static double metric(int port, const char *name) {
    resp r;
    double v = -1;
    if (!http_request(port, "GET", "/metrics", NULL, NULL, &r) && r.body) {
        char key[128];
        snprintf(key, sizeof key, "\n%s ", name);
        const char *p = strstr(r.body, key);
        if (p) v = atof(p + strlen(key));
    }
    resp_free(&r);
    return v;
}

/* ---- the forced choices, "none", streaming, drafting ---- */

static const char NAMED_TIME[] = "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}";
static const char NAMED_WEATHER[] = "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}";

/* One request and its verdict; the response for more checks (owned). */
static cJSON *ask(int port, const char *body, int *st) {
    cJSON *j = http_post(port, "/v1/chat/completions", body, st);
    if (*st != 200) fprintf(stderr, "  status %d: %s\n", *st, j ? str_at(j, "error.message") : "(no body)");
    return j;
}

TS_TEST(toolchoice, forced_calls_and_none) {
    server s, d;
    const char *const mtp[] = {"--spec", "mtp", "--draft", "3", NULL};
    int started = start_default(&s, NULL), started_d = start_default(&d, mtp);
    CHECK_MSG(started == 0 && started_d == 0, "the servers did not start on models/default");
    ts_tokenizer *tok = NULL;
    ts_error terr = {0};
    CHECK(!ts_tokenizer_load("models/default", &tok, &terr));
    g_think_end = ts_tokenizer_token_id(tok, "</think>");
    ts_tokenizer_free(tok);
    CHECK(g_think_end >= 0);
    static char body[8192];
    char why[512];
    int st, n_calls = 0, n_length = 0, n_reasoned = 0;
    /* one call of the named function or of either tool: greedy and sampled,
     * thinking off and on (greedy: the bias closes the block at once;
     * sampled: after some reasoning) */
    static const struct {
        const char *choice, *a1, *a2;
    } forced[] = {{NAMED_TIME, "get_time", NULL}, {NAMED_WEATHER, "get_weather", NULL}, {"\"required\"", "get_weather", "get_time"}};
    static const struct {
        int think, seed; /* think: the bias on "</think>" */
    } modes[] = {{0, 0}, {0, 1}, {0, 2}, {11, 0}, {10, 5}};
    for (size_t f = 0; f < 3; f++)
        for (size_t md = 0; md < 5; md++) {
                const int think = modes[md].think, seed = modes[md].seed;
                body_of(body, sizeof body, forced[f].choice, 0, think, seed, think ? 900 : 500);
                cJSON *j = ask(s.port, body, &st);
                CHECK(st == 200 && j);
                const char *fin = str_at(j, "choices.0.finish_reason");
                const cJSON *calls = path_get(j, "choices.0.message.tool_calls");
                const char *reasoning = str_at(j, "choices.0.message.reasoning_content");
                char *pc = calls ? cJSON_PrintUnformatted(calls) : NULL;
                fprintf(stderr, "  %s think %d seed %d: %s, %zu bytes of reasoning, %s\n",
                        forced[f].a2 ? "required" : forced[f].a1, think, seed, fin ? fin : "-",
                        reasoning ? strlen(reasoning) : 0, pc ? pc : "no calls");
                free(pc);
                n_reasoned += reasoning && *reasoning && calls;
                if (fin && !strcmp(fin, "tool_calls")) {
                    CHECK_MSG(cJSON_GetArraySize(calls) == 1, "%d calls with parallel_tool_calls false",
                              cJSON_GetArraySize(calls));
                    CHECK_MSG(call_valid(cJSON_GetArrayItem(calls, 0), forced[f].a1, forced[f].a2, why, sizeof why), "%s", why);
                    CHECK_MSG(cJSON_IsNull(path_get(j, "choices.0.message.content")), "content beside a forced call");
                    n_calls++;
                } else {
                    /* only a sampled think block that never closed within the
                     * budget: free reasoning, nothing constrained yet */
                    const char *content = str_at(j, "choices.0.message.content");
                    CHECK_MSG(think && seed && fin && !strcmp(fin, "length") && reasoning && *reasoning && !calls &&
                                  (!content || !*content),
                              "finish %s, %zu bytes of reasoning, content '%s'", fin ? fin : "-",
                              reasoning ? strlen(reasoning) : 0, content ? content : "-");
                    n_length++;
                }
                if (!seed) { /* greedy: drafting gives the same reply, streaming the same parts */
                    cJSON *k = ask(d.port, body, &st);
                    char *a = calls_text(calls), *b = calls_text(path_get(k, "choices.0.message.tool_calls"));
                    CHECK_MSG(st == 200 && !strcmp(a, b) &&
                                  int_at(k, "usage.completion_tokens") == int_at(j, "usage.completion_tokens"),
                              "--spec mtp: %s, plain %s", b, a);
                    free(b);
                    cJSON_Delete(k);
                    char req[8300];
                    snprintf(req, sizeof req, "%.*s,\"stream\":true}", (int)strlen(body) - 1, body);
                    resp r;
                    CHECK(http_request(s.port, "POST", "/v1/chat/completions", NULL, req, &r) == 0 && r.status == 200);
                    sse ev;
                    parse_sse(r.body, &ev);
                    resp_free(&r);
                    b = calls_text(ev.calls);
                    const char *rc = str_at(j, "choices.0.message.reasoning_content");
                    CHECK_MSG(!ev.bad && ev.done && !strcmp(a, b) && fin && !strcmp(ev.finish, fin) &&
                                  !strcmp(ev.reasoning, rc ? rc : ""),
                              "streamed %s (%s), whole %s (%s)", b, ev.finish, a, fin);
                    free(a), free(b);
                    cJSON_Delete(ev.calls);
                }
                cJSON_Delete(j);
            }
    /* whether a sampled think block closes within the budget depends on the
     * build's rounding (it did here at -O2, not under ASan's -O1): the
     * library test wrap.constraint_after_free_then_call pins free text then
     * a call down deterministically */
    fprintf(stderr, "  %d of 15 forced replies were calls, %d of them after reasoning; %d think blocks cut by the budget\n",
            n_calls, n_reasoned, n_length);
    CHECK_MSG(n_calls >= 12, "only %d of 15 forced replies were calls", n_calls);
    /* required, parallel: one or more valid calls, or cut by the budget
     * (a random model may not stop calling) with the raw text as content */
    body_of(body, sizeof body, "\"required\"", -1, 0, 0, 400);
    cJSON *j = ask(s.port, body, &st);
    const char *fin = str_at(j, "choices.0.finish_reason");
    CHECK(st == 200 && fin);
    if (!strcmp(fin, "tool_calls")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, path_get(j, "choices.0.message.tool_calls"))
            CHECK_MSG(call_valid(it, "get_weather", "get_time", why, sizeof why), "%s", why);
    } else {
        const char *c = str_at(j, "choices.0.message.content");
        CHECK_MSG(!strcmp(fin, "length") && c && !strncmp(c, "<tool_call>\n{", 13), "parallel: finish %s, content %s", fin,
                  c ? c : "-");
    }
    fprintf(stderr, "  required, parallel: %s\n", fin);
    cJSON_Delete(j);
    /* none: the tools are rendered (as "auto" renders them), no call */
    body_of(body, sizeof body, "\"none\"", -1, 0, 0, 60);
    j = ask(s.port, body, &st);
    body_of(body, sizeof body, "\"auto\"", -1, 0, 0, 60);
    cJSON *a = ask(s.port, body, &st);
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris, and the time?\"}],"
             "\"max_tokens\":60,\"temperature\":0,\"chat_template_kwargs\":{\"enable_thinking\":false}}");
    cJSON *plain = ask(s.port, body, &st);
    CHECK(j && a && plain);
    CHECK_MSG(!path_get(j, "choices.0.message.tool_calls") && str_at(j, "choices.0.message.content") &&
                  strcmp(str_at(j, "choices.0.finish_reason"), "tool_calls"),
              "none: a call came back");
    CHECK_MSG(int_at(j, "usage.prompt_tokens") == int_at(a, "usage.prompt_tokens") &&
                  int_at(j, "usage.prompt_tokens") > int_at(plain, "usage.prompt_tokens") + 50,
              "none: prompt %d tokens, auto %d, no tools %d", int_at(j, "usage.prompt_tokens"),
              int_at(a, "usage.prompt_tokens"), int_at(plain, "usage.prompt_tokens"));
    cJSON_Delete(j), cJSON_Delete(a), cJSON_Delete(plain);
    if (ts_test_failed()) print_log(&s);
    CHECK_MSG(server_stop(&s) == 0 && server_stop(&d) == 0, "the servers did not exit cleanly");
}

/* ---- refusals and the cache, over HTTP ---- */

TS_TEST(toolchoice, refusals_and_cache_metrics) {
    server s;
    CHECK_MSG(start_default(&s, NULL) == 0, "the server did not start");
    static char body[16384];
    int st;
    /* a forced tool whose parameters use a keyword outside the subset */
    const char *bad_tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":" P_TIME
                            "}},{\"type\":\"function\",\"function\":{\"name\":\"book\",\"parameters\":{\"type\":\"object\","
                            "\"properties\":{\"seats\":{\"type\":\"integer\",\"minimum\":1}}}}}]";
    static const struct {
        const char *choice;
        int status;
        const char *code, *param, *want;
    } cases[] = {
        {"\"required\"", 400, "unsupported_tool_schema", "tools", "tools[1] ('book')"},
        {"{\"type\":\"function\",\"function\":{\"name\":\"book\"}}", 400, "unsupported_tool_schema", "tools", "'minimum' at #/properties/seats"},
        {"{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}", 200, NULL, NULL, NULL}, /* book is not called */
        {"\"auto\"", 200, NULL, NULL, NULL},
        {"{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}", 400, "invalid_value", "tool_choice", "'nope', which is not in 'tools'"},
        {"{\"type\":\"function\",\"function\":{}}", 400, "invalid_value", "tool_choice", "needs a 'name'"},
        {"\"sometimes\"", 400, "unsupported_tool_choice", "tool_choice", "\"required\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4,%s,\"tool_choice\":%s}",
                 bad_tools, cases[i].choice);
        cJSON *j = http_post(s.port, "/v1/chat/completions", body, &st);
        const char *code = str_at(j, "error.code"), *param = str_at(j, "error.param"), *msg = str_at(j, "error.message");
        CHECK_MSG(st == cases[i].status && (!cases[i].code || (code && !strcmp(code, cases[i].code) && param &&
                                                                !strcmp(param, cases[i].param) && msg && strstr(msg, cases[i].want))),
                  "case %zu: status %d, code %s, message '%s'", i, st, code ? code : "-", msg ? msg : "-");
        if (msg) fprintf(stderr, "  %d: %s\n", st, msg);
        cJSON_Delete(j);
    }
    /* too many tools to choose among; no tools at all */
    int o = snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":\"required\",\"tools\":[");
    for (int k = 0; k < 17; k++)
        o += snprintf(body + o, sizeof body - (size_t)o, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}", k ? "," : "", k);
    snprintf(body + o, sizeof body - (size_t)o, "]}");
    cJSON *j = http_post(s.port, "/v1/chat/completions", body, &st);
    CHECK_MSG(st == 400 && str_at(j, "error.message") && strstr(str_at(j, "error.message"), "17 tools"), "17 tools: %d", st);
    cJSON_Delete(j);
    /* the cache: the same tools and choice again hit; another choice misses */
    const double h0 = metric(s.port, "turbospark_constraint_cache_hits_total"),
                 m0 = metric(s.port, "turbospark_constraint_cache_misses_total");
    body_of(body, sizeof body, NAMED_WEATHER, 0, 0, 0, 8);
    for (int k = 0; k < 3; k++) cJSON_Delete(http_post(s.port, "/v1/chat/completions", body, &st));
    const double h1 = metric(s.port, "turbospark_constraint_cache_hits_total"),
                 m1 = metric(s.port, "turbospark_constraint_cache_misses_total");
    body_of(body, sizeof body, NAMED_WEATHER, 1, 0, 0, 8); /* parallel: another wrap, another constraint */
    cJSON_Delete(http_post(s.port, "/v1/chat/completions", body, &st));
    const double m2 = metric(s.port, "turbospark_constraint_cache_misses_total"),
                 bs = metric(s.port, "turbospark_constraint_build_seconds_total");
    fprintf(stderr, "  cache: hits %g -> %g, misses %g -> %g -> %g, %.1f ms a build on average\n", h0, h1, m0, m1, m2,
            bs * 1e3 / (m2 > 0 ? m2 : 1));
    CHECK_MSG(m1 - m0 == 1 && h1 - h0 == 2 && m2 - m1 == 1, "hits %g -> %g, misses %g -> %g -> %g", h0, h1, m0, m1, m2);
    CHECK(metric(s.port, "turbospark_constraint_cache_entries") >= 2);
    if (ts_test_failed()) print_log(&s);
    CHECK_MSG(server_stop(&s) == 0, "the server did not exit cleanly");
}

/* ---- the cache, in process ---- */

static ts_tokenizer *qwen3_tokenizer(void) {
    char path[600], out[1024];
    snprintf(path, sizeof path, "%s/toolchoice-qwen3.json", ts_test_tmpdir());
    if (access(path, R_OK) &&
        ts_test_sh(out, sizeof out, "xz -dc tests/fixtures/tokenizer/qwen3.tokenizer.json.xz > %s", path))
        return NULL;
    ts_tokenizer *t = NULL;
    ts_error err = {0};
    return ts_tokenizer_load(path, &t, &err) ? NULL : t;
}

static const char CALL_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":" P_WEATHER
    "},\"required\":[\"name\",\"arguments\"],\"additionalProperties\":false}";

typedef struct {
    srv *s;
    int k, rounds, bad;
} getter;

static void *get_many(void *u) {
    getter *g = u;
    const ts_constraint_wrap w = {"<tool_call>\n", "\n</tool_call>", "\n", 0};
    for (int r = 0; r < g->rounds; r++) {
        char schema[64];
        snprintf(schema, sizeof schema, "{\"enum\":[%d]}", (g->k + r) % 20);
        srv_cc_ent *e = NULL;
        ts_error err = {0};
        if (srv_cc_get(g->s, SRV_CC_TOOLS, schema, strlen(schema), &w, &e, &err) || !srv_cc_constraint(e)) g->bad++;
        srv_cc_release(e);
    }
    return NULL;
}

TS_TEST(toolchoice, constraint_cache) {
    ts_tokenizer *t = qwen3_tokenizer();
    if (!t) SKIP("cannot unpack the Qwen3 tokenizer fixture");
    srv S;
    memset(&S, 0, sizeof S);
    srv *s = &S;
    s->tok = t;
    srv_cc_init(s);
    const ts_constraint_wrap w = {"<tool_call>\n", "\n</tool_call>", "\n", 1};
    srv_cc_ent *a = NULL, *b = NULL;
    ts_error err = {0};
    /* a miss builds (the tokenizer's index), a hit finds */
    double t0 = ts_now();
    CHECK_MSG(!srv_cc_get(s, SRV_CC_TOOLS, CALL_SCHEMA, strlen(CALL_SCHEMA), &w, &a, &err), "%s", err.msg);
    const double t_miss = ts_now() - t0;
    t0 = ts_now();
    const int hits = 100;
    for (int k = 0; k < hits; k++) {
        CHECK(!srv_cc_get(s, SRV_CC_TOOLS, CALL_SCHEMA, strlen(CALL_SCHEMA), &w, &b, &err) && b == a);
        srv_cc_release(b);
    }
    const double t_hit = (ts_now() - t0) / hits;
    fprintf(stderr, "  Qwen3 tokenizer (151,669 ids): a tool call's constraint built in %.1f ms, found in %.2f us\n",
            t_miss * 1e3, t_hit * 1e6);
    CHECK(S.cc_hits == (uint64_t)hits && S.cc_misses == 1 && t_hit * 50 < t_miss);
    /* the same schema, plain or another wrap: other entries */
    CHECK(!srv_cc_get(s, SRV_CC_SCHEMA, CALL_SCHEMA, strlen(CALL_SCHEMA), NULL, &b, &err) && b != a);
    srv_cc_release(b);
    const ts_constraint_wrap w1 = {"<tool_call>\n", "\n</tool_call>", "\n", 0};
    CHECK(!srv_cc_get(s, SRV_CC_TOOLS, CALL_SCHEMA, strlen(CALL_SCHEMA), &w1, &b, &err) && b != a);
    srv_cc_release(b);
    CHECK(S.cc_misses == 3 && S.cc_n == 3);
    /* a bad schema: its error, nothing cached */
    CHECK(srv_cc_get(s, SRV_CC_SCHEMA, "{\"pattern\":\"x\"}", 15, NULL, &b, &err) == TS_E_ARG && !b &&
          strstr(err.msg, "pattern") && S.cc_n == 3);
    /* LRU: SRV_CC_CAP more entries push a (least recently used) out, but
     * its holder keeps it usable; getting it again builds anew */
    for (int k = 0; k < SRV_CC_CAP; k++) {
        char schema[64];
        snprintf(schema, sizeof schema, "{\"enum\":[%d]}", 1000 + k);
        CHECK(!srv_cc_get(s, SRV_CC_SCHEMA, schema, strlen(schema), NULL, &b, &err));
        srv_cc_release(b);
    }
    CHECK(S.cc_n == SRV_CC_CAP);
    { /* the evicted entry still works for its holder */
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.constraint = srv_cc_constraint(a);
        ts_cgen g;
        CHECK(!ts_cgen_init(&g, &gp, ts_tokenizer_vocab_size(t), &err) && !ts_cgen_mask(&g, &err));
        const int32_t call = ts_tokenizer_token_id(t, "<tool_call>");
        CHECK(call >= 0 && ((g.mask[call >> 6] >> (call & 63)) & 1));
        ts_cgen_free(&g);
    }
    const uint64_t m = S.cc_misses;
    CHECK(!srv_cc_get(s, SRV_CC_TOOLS, CALL_SCHEMA, strlen(CALL_SCHEMA), &w, &b, &err) && b != a && S.cc_misses == m + 1);
    srv_cc_release(b);
    srv_cc_release(a); /* the last holder of the evicted one frees it (LeakSanitizer under make asan) */
    /* threads getting overlapping keys at once (20 schemas for 16 places) */
    pthread_t th[4];
    getter g[4];
    for (int k = 0; k < 4; k++) {
        g[k] = (getter){s, k * 5, 12, 0};
        pthread_create(&th[k], NULL, get_many, &g[k]);
    }
    for (int k = 0; k < 4; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 4; k++) CHECK(!g[k].bad);
    CHECK(S.cc_n <= SRV_CC_CAP);
    srv_cc_free(s);
    ts_tokenizer_free(t);
}
