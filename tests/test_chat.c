/* test_chat.c: the chat template interpreter and the chat layer (group `chat`).
 *
 * Goldens: tests/fixtures/chat/cases.jsonl (27 requests x 4 Qwen templates,
 * rendered by Python jinja2 as transformers does; see templates/SOURCES.md)
 * and jinja_cases.jsonl (interpreter edge cases rendered by the same Python
 * setup: gen_jinja_cases.py). Plus constructs we refuse on purpose, limits
 * against hostile templates, model-directory loading, the CLI, and a
 * mutation fuzz of the real templates (no crash, always an answer).
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "text/jinja.h"
#include "ts_int.h"
#include "ts_test.h"

#define FIX "tests/fixtures/chat/"

static const char *const TEMPLATES[] = {"qwen3.5", "qwen3.5-small", "qwen3.6", "qwen3"};

static char *load(const char *path, size_t *n) {
    char *s = NULL;
    size_t len = 0;
    if (ts_read_file(path, &s, &len, NULL) != 0) return NULL;
    if (n) *n = len;
    return s;
}

/* Next line of a buffer: [*pos, end) without the newline; 0 at the end. */
static int next_line(const char *s, size_t n, size_t *pos, const char **line, size_t *len) {
    if (*pos >= n) return 0;
    const char *nl = memchr(s + *pos, '\n', n - *pos);
    size_t e = nl ? (size_t)(nl - s) : n;
    *line = s + *pos;
    *len = e - *pos;
    *pos = e + 1;
    return 1;
}

/* Skip one JSON value starting at s[i]; returns the index after it. */
static size_t skip_value(const char *s, size_t n, size_t i) {
    int depth = 0;
    while (i < n) {
        char c = s[i];
        if (c == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
            i++;
            if (depth == 0) return i;
            continue;
        }
        if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') {
            if (depth == 0) return i;
            if (--depth == 0) return i + 1;
        } else if (depth == 0 && (c == ',')) return i;
        i++;
    }
    return i;
}

/* The raw text of member `key` of a JSON object (values keep their exact
 * spelling, so 1.0 stays a float). Returns a NUL-terminated copy or NULL. */
static char *member_text(const char *s, size_t n, const char *key) {
    size_t i = 0, kl = strlen(key);
    while (i < n && s[i] != '{') i++;
    i++;
    while (i < n) {
        while (i < n && (s[i] == ' ' || s[i] == ',' || s[i] == '\n')) i++;
        if (i >= n || s[i] != '"') return NULL;
        size_t ks = i + 1;
        i = skip_value(s, n, i);
        size_t ke = i - 1;
        while (i < n && (s[i] == ' ' || s[i] == ':')) i++;
        size_t vs = i;
        i = skip_value(s, n, i);
        if (ke - ks == kl && !memcmp(s + ks, key, kl)) {
            size_t ve = i;
            while (ve > vs && s[ve - 1] == ' ') ve--;
            char *o = malloc(ve - vs + 1);
            memcpy(o, s + vs, ve - vs);
            o[ve - vs] = 0;
            return o;
        }
    }
    return NULL;
}

/* ---- the golden requests ---------------------------------------------- */

typedef struct {
    int n_ok[4], n_total[4];
} tally;

/* msgs with every tool call's "arguments": {...} turned into the JSON string
 * of that object's exact text (what OpenAI clients send), or NULL when it has
 * none. */
static char *stringify_arguments(const char *msgs) {
    static const char key[] = "\"arguments\": ";
    size_t n = strlen(msgs), cap = 2 * n + 64, w = 0;
    char *o = malloc(cap);
    const char *p = msgs, *at;
    int changed = 0;
    while ((at = strstr(p, key))) {
        const char *v = at + sizeof key - 1;
        memcpy(o + w, p, (size_t)(v - p));
        w += (size_t)(v - p);
        p = v;
        if (*v != '{') continue;
        size_t e = skip_value(msgs, n, (size_t)(v - msgs));
        char *raw = malloc(e - (size_t)(v - msgs) + 1);
        memcpy(raw, v, e - (size_t)(v - msgs));
        raw[e - (size_t)(v - msgs)] = 0;
        cJSON *str = cJSON_CreateString(raw);
        char *lit = cJSON_PrintUnformatted(str);
        size_t ll = strlen(lit);
        if (w + ll + n + 1 > cap) o = realloc(o, cap = w + ll + n + 64);
        memcpy(o + w, lit, ll);
        w += ll;
        p = msgs + e;
        changed = 1;
        free(lit);
        cJSON_Delete(str);
        free(raw);
    }
    size_t rest = strlen(p);
    if (w + rest + 1 > cap) o = realloc(o, w + rest + 1);
    memcpy(o + w, p, rest + 1);
    if (!changed) { free(o); return NULL; }
    return o;
}

/* use_struct: 0 the request as one JSON object, 1 as ts_chat_request, 2 and
 * 3 the same with string arguments (cases without tool calls skipped). */
static void check_case(const char *line, size_t len, ts_chat_template **tpl, tally *t, int use_struct) {
    cJSON *c = cJSON_ParseWithLength(line, len);
    if (!c) { ts_test_fail(__FILE__, __LINE__, "cases.jsonl: bad line"); return; }
    const char *id = cJSON_GetObjectItem(c, "id")->valuestring;
    char *msgs = member_text(line, len, "messages"), *tools = member_text(line, len, "tools");
    if (use_struct >= 2) {
        char *sa = stringify_arguments(msgs);
        free(msgs);
        msgs = sa;
        use_struct -= 2;
        if (!msgs) { free(tools); cJSON_Delete(c); return; }
        if (!strstr(msgs, "\"arguments\": \"{")) ts_test_fail(__FILE__, __LINE__, "%s: no string arguments", id);
    }
    char *kw = member_text(line, len, "kwargs"), *agp = member_text(line, len, "add_generation_prompt");
    const cJSON *exp = cJSON_GetObjectItem(c, "expected");
    for (int k = 0; k < 4; k++) {
        const cJSON *e = cJSON_GetObjectItem(exp, TEMPLATES[k]);
        char *out = NULL;
        size_t on = 0;
        ts_error err = {0};
        int rc;
        if (use_struct) {
            ts_chat_request rq = {msgs, strcmp(tools, "null") ? tools : NULL, !strcmp(agp, "true"), kw};
            rc = ts_chat_render(tpl[k], &rq, &out, &on, &err);
        } else {
            size_t cap = strlen(msgs) + strlen(tools) + strlen(kw) + 200;
            char *req = malloc(cap);
            snprintf(req, cap, "{\"messages\": %s, \"tools\": %s, \"add_generation_prompt\": %s, \"chat_template_kwargs\": %s}",
                     msgs, tools, agp, kw);
            rc = ts_chat_render_json(tpl[k], req, strlen(req), &out, &on, &err);
            free(req);
        }
        t->n_total[k]++;
        if (cJSON_IsString(e)) {
            if (rc == 0 && on == strlen(e->valuestring) && !memcmp(out, e->valuestring, on)) t->n_ok[k]++;
            else ts_test_fail(__FILE__, __LINE__, "%s/%s: rc=%d (%s)\n  got: %.300s\n  exp: %.300s", id, TEMPLATES[k], rc,
                              rc ? err.msg : "", out ? out : "", e->valuestring);
        } else {
            const char *kind = cJSON_GetObjectItem(e, "kind")->valuestring;
            const char *msg = cJSON_GetObjectItem(e, "error")->valuestring;
            int ok = rc != 0 && out == NULL;
            if (ok && !strcmp(kind, "TemplateError")) ok = rc == TS_E_ARG && !strcmp(err.msg, msg);
            if (ok) t->n_ok[k]++;
            else ts_test_fail(__FILE__, __LINE__, "%s/%s: expected %s '%s', got rc=%d '%s'", id, TEMPLATES[k], kind, msg, rc, err.msg);
        }
        ts_chat_text_free(out);
    }
    free(msgs);
    free(tools);
    free(kw);
    free(agp);
    cJSON_Delete(c);
}

static void run_cases(int use_struct) {
    ts_chat_template *tpl[4] = {0};
    for (int k = 0; k < 4; k++) {
        char path[256];
        size_t n;
        snprintf(path, sizeof path, FIX "templates/%s.jinja", TEMPLATES[k]);
        char *src = load(path, &n);
        CHECK_MSG(src != NULL, "missing %s", path);
        ts_error err;
        int rc = ts_chat_template_parse(src, n, &tpl[k], &err);
        ts_free(src);
        CHECK_MSG(rc == 0, "%s: %s", path, err.msg);
    }
    size_t n, pos = 0, len;
    const char *line;
    char *all = load(FIX "cases.jsonl", &n);
    CHECK(all != NULL);
    tally t = {{0}, {0}};
    while (next_line(all, n, &pos, &line, &len))
        if (len) check_case(line, len, tpl, &t, use_struct);
    ts_free(all);
    int fails = 0;
    for (int k = 0; k < 4; k++) {
        if (!use_struct) printf("  chat golden: %-14s %d/%d identical\n", TEMPLATES[k], t.n_ok[k], t.n_total[k]);
        fails += t.n_total[k] - t.n_ok[k];
        ts_chat_template_free(tpl[k]);
    }
    if (use_struct < 2) CHECK(t.n_total[0] == 27);
    else CHECK_MSG(t.n_total[0] >= 7, "%d cases with tool calls", t.n_total[0]);
    CHECK_MSG(fails == 0, "%d renderings differ", fails);
}

TS_TEST(chat, golden_cases_request_json) { run_cases(0); }
TS_TEST(chat, golden_cases_request_struct) { run_cases(1); }
/* Tool-call arguments as JSON strings (the OpenAI shape; issue 20, item 2):
 * the same prompt as the object, for every template. Before the fix the
 * Qwen3.5/3.6 templates refused them ("Can only get item pairs from a
 * mapping"). */
TS_TEST(chat, golden_cases_string_arguments) {
    run_cases(2);
    run_cases(3);
}
/* A string that is not a JSON object stays a string: Qwen3's template
 * prints it as it is, Qwen3.5's refuses it with its own error. */
TS_TEST(chat, string_arguments_not_json_kept) {
    char *src = NULL;
    size_t n;
    ts_error err = {0};
    ts_chat_template *q3 = NULL, *q35 = NULL;
    src = load(FIX "templates/qwen3.jinja", &n);
    CHECK(src && ts_chat_template_parse(src, n, &q3, &err) == 0);
    ts_free(src);
    src = load(FIX "templates/qwen3.5.jinja", &n);
    CHECK(src && ts_chat_template_parse(src, n, &q35, &err) == 0);
    ts_free(src);
    static const char *const args[] = {"\"not json {\"", "\"[1, 2]\"", "\"{\\\"a\\\": 1} trailing\"",
                                       "\"{\\\"a\\\": \\u0000}\""};
    for (int i = 0; i < 4; i++) {
        char req[1024];
        snprintf(req, sizeof req,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"\", "
                 "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": %s}}]}]}",
                 args[i]);
        char *out = NULL;
        cJSON *lit = cJSON_Parse(args[i]);
        CHECK(ts_chat_render_json(q3, req, strlen(req), &out, NULL, &err) == 0);
        CHECK_MSG(out && lit && strstr(out, lit->valuestring), "arguments %s: %s", args[i], out ? out : err.msg);
        ts_chat_text_free(out);
        out = NULL;
        CHECK_MSG(ts_chat_render_json(q35, req, strlen(req), &out, NULL, &err) != 0 && !out, "qwen3.5 accepted %s", args[i]);
        cJSON_Delete(lit);
    }
    ts_chat_template_free(q3);
    ts_chat_template_free(q35);
}

/* ---- interpreter edge cases against Python jinja2 ----------------------- */

TS_TEST(chat, jinja_golden) {
    size_t n, pos = 0, len;
    const char *line;
    char *all = load(FIX "jinja_cases.jsonl", &n);
    CHECK(all != NULL);
    CHECK(next_line(all, n, &pos, &line, &len));
    tj_vars *v = tj_vars_new();
    tj_error je;
    CHECK(tj_vars_spread_json_member(v, line, len, "vars", &je) == 1);
    int total = 0, fails = 0;
    while (next_line(all, n, &pos, &line, &len)) {
        if (!len) continue;
        cJSON *c = cJSON_ParseWithLength(line, len);
        CHECK(c != NULL);
        const char *src = cJSON_GetObjectItem(c, "t")->valuestring;
        const cJSON *out = cJSON_GetObjectItem(c, "out");
        tj_template *t = NULL;
        char *res = NULL;
        size_t rn = 0;
        int rc = tj_parse(src, strlen(src), NULL, &t, &je);
        if (rc == 0) rc = tj_render(t, v, &res, &rn, &je);
        total++;
        if (out) {
            if (rc != 0 || rn != strlen(out->valuestring) || memcmp(res, out->valuestring, rn)) {
                fails++;
                ts_test_fail(__FILE__, __LINE__, "template %s\n  got: %s%s\n  exp: %s", src, rc ? "ERROR " : "", rc ? je.msg : res, out->valuestring);
            }
        } else {
            const char *kind = cJSON_GetObjectItem(c, "kind")->valuestring;
            const char *msg = cJSON_GetObjectItem(c, "msg")->valuestring;
            /* messages must match Python's, except syntax errors where only
             * the kind is compared (jinja2 words some of them differently) */
            if (rc == 0 || strcmp(tj_kind_name(je.kind), kind) ||
                (strcmp(kind, "TemplateSyntaxError") && strcmp(je.msg, msg))) {
                fails++;
                ts_test_fail(__FILE__, __LINE__, "template %s\n  got: rc=%d %s: %s\n  exp: %s: %s", src, rc,
                             tj_kind_name(je.kind), je.msg, kind, msg);
            }
        }
        ts_free(res);
        tj_template_free(t);
        cJSON_Delete(c);
    }
    tj_vars_free(v);
    ts_free(all);
    printf("  jinja golden: %d/%d as Python jinja2\n", total - fails, total);
    CHECK(total > 150);
    CHECK(fails == 0);
}

/* Render src with vars (a JSON object text or NULL); returns rc, fills out/je. */
static int render1(const char *src, const char *vars, char **out, tj_error *je) {
    tj_template *t = NULL;
    tj_vars *v = tj_vars_new();
    *out = NULL;
    int rc = vars ? tj_vars_set_json_members(v, vars, strlen(vars), je) : 0;
    if (rc == 0) rc = tj_parse(src, strlen(src), NULL, &t, je);
    if (rc == 0) rc = tj_render(t, v, out, NULL, je);
    tj_template_free(t);
    tj_vars_free(v);
    return rc;
}

static int renders_to(const char *src, const char *vars, const char *want) {
    char *out;
    tj_error je;
    int rc = render1(src, vars, &out, &je);
    int ok = rc == 0 && !strcmp(out, want);
    if (!ok) fprintf(stderr, "  %s -> %s%s (want %s)\n", src, rc ? "ERROR " : "", rc ? je.msg : out, want);
    ts_free(out);
    return ok;
}

static int fails_with(const char *src, const char *vars, tj_kind kind, const char *needle, int line) {
    char *out;
    tj_error je;
    int rc = render1(src, vars, &out, &je);
    int ok = rc != 0 && out == NULL && je.kind == kind && strstr(je.msg, needle) && (line == 0 || je.line == line);
    if (!ok) fprintf(stderr, "  %s -> rc=%d %s line %d: %s\n", src, rc, tj_kind_name(je.kind), je.line, je.msg);
    ts_free(out);
    return ok;
}

TS_TEST(chat, jinja_python_values) {
    /* str() and json.dumps of the values a request carries */
    CHECK(renders_to("{{ x|string }} {{ x|tojson }}", "{\"x\": 1.0}", "1.0 1.0"));
    CHECK(renders_to("{{ x|string }} {{ x|tojson }}", "{\"x\": 1}", "1 1"));
    CHECK(renders_to("{{ x }}|{{ x|tojson }}", "{\"x\": [true, null, 0.75, \"a'b\"]}", "[True, None, 0.75, \"a'b\"]|[true, null, 0.75, \"a'b\"]"));
    CHECK(renders_to("{{ x|tojson }}", "{\"x\": {\"z\": 1, \"a\": {\"k\": []}}}", "{\"z\": 1, \"a\": {\"k\": []}}"));
    CHECK(renders_to("{{ x|tojson }}", "{\"x\": \"\\u00e9\\u2028/\\\\\\\"\\u0001\\n\"}", "\"\xc3\xa9\xe2\x80\xa8/\\\\\\\"\\u0001\\n\""));
    CHECK(renders_to("{{ x }} {{ y }} {{ z }}", "{\"x\": 1e16, \"y\": 1e-05, \"z\": 123456789.125}", "1e+16 1e-05 123456789.125"));
    CHECK(renders_to("{{ x|tojson }}", "{\"x\": \"\\ud83d\\ude00\"}", "\"\xf0\x9f\x98\x80\""));
    CHECK(renders_to("{{ x|length }}", "{\"x\": \"\\ud83d\\ude00a\"}", "2"));
    /* duplicate keys: first position, last value (Python's json.loads) */
    CHECK(renders_to("{{ x }}", "{\"x\": {\"a\": 1, \"b\": 2, \"a\": 3}}", "{'a': 3, 'b': 2}"));
    /* trim is Python str.strip over Unicode whitespace, lstrip('\n') only newlines */
    CHECK(renders_to("[{{ x|trim }}][{{ x.lstrip('\\n') }}]", "{\"x\": \"\\n\\u3000 a \\u00a0\"}", "[a][\xe3\x80\x80 a \xc2\xa0]"));
    /* the same writer, from JSON text to Python's json.dumps text */
    char *pj = NULL;
    tj_error je;
    CHECK(tj_json_pydumps("{\"a\":1.0,\"b\":[1,2e3,\"\\u00e9\"],\"c\":{}}", 37, &pj, &je) == 0);
    CHECK_MSG(!strcmp(pj, "{\"a\": 1.0, \"b\": [1, 2000.0, \"\xc3\xa9\"], \"c\": {}}"), "%s", pj);
    ts_free(pj);
    CHECK(tj_json_pydumps("[1,", 3, &pj, &je) != 0 && je.kind == TJ_INPUT);
    /* undefined vs false vs none */
    CHECK(renders_to("{{ a is defined }}{{ a is true }}{{ b is false }}{{ c is none }}", "{\"b\": false, \"c\": null}", "FalseFalseTrueTrue"));
}

TS_TEST(chat, jinja_whitespace_control) {
    CHECK(renders_to("{% if true %}\n  a\n{% endif %}\nb", NULL, "  a\nb"));
    CHECK(renders_to("  {% if true %}x{% endif %}  \n", NULL, "x  "));
    CHECK(renders_to("a  {{- 'b' -}}  c", NULL, "abc"));
    CHECK(renders_to("a\n  {%- if true %}b{% endif %}", NULL, "ab"));
    CHECK(renders_to("{%+ if true %}x{% endif %}", NULL, "x"));
    CHECK(renders_to("  {%+ if true %}x{% endif %}", NULL, "  x"));
    CHECK(renders_to("{{ 'a' }}\n{{ 'b' }}\n", NULL, "a\nb"));   /* trailing newline dropped */
    CHECK(renders_to("a{# c #}\nb", NULL, "ab"));
    CHECK(renders_to("x\r\ny", NULL, "x\ny"));
    CHECK(renders_to("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}"));
}

TS_TEST(chat, jinja_loops_and_scopes) {
    const char *msgs = "{\"m\": [{\"role\": \"user\"}, {\"role\": \"assistant\"}, {\"role\": \"tool\"}]}";
    CHECK(renders_to("{% for x in m %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", msgs,
                     "01TrueFalse3;12FalseFalse3;23FalseTrue3;"));
    CHECK(renders_to("{% for x in m %}{{ loop.previtem.role if loop.previtem }}>{{ loop.nextitem.role if loop.nextitem }};{% endfor %}", msgs,
                     ">assistant;user>tool;assistant>;"));
    CHECK(renders_to("{% for x in m[::-1] %}{{ x.role[0] }}{% endfor %}", msgs, "tau"));
    CHECK(renders_to("{% for x in m if x.role != 'user' %}{{ loop.index }}{% endfor %}", msgs, "12"));
    CHECK(renders_to("{% set ns = namespace(n=0) %}{% for x in m %}{% set ns.n = ns.n + 1 %}{% set y = 1 %}{% endfor %}{{ ns.n }}{{ y is defined }}", msgs, "3False"));
    CHECK(renders_to("{% macro f(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ f(1) }}{{ f(3, b=4) }}", NULL, "1234"));
    CHECK(renders_to("{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}", "{\"d\": {\"b\": 1, \"a\": 2}}", "b1a2"));
}

TS_TEST(chat, jinja_unsupported_and_malformed) {
    /* unsupported constructs: kind, the construct named, the line */
    CHECK(fails_with("x\n{% include 'a' %}", NULL, TJ_UNSUPPORTED, "'include'", 2));
    CHECK(fails_with("{% extends 'a' %}", NULL, TJ_UNSUPPORTED, "'extends'", 1));
    CHECK(fails_with("\n\n{% call m() %}{% endcall %}", NULL, TJ_UNSUPPORTED, "'call'", 3));
    CHECK(fails_with("{% for x in y recursive %}{% endfor %}", NULL, TJ_UNSUPPORTED, "recursive", 1));
    CHECK(fails_with("{{ f(*a) }}", NULL, TJ_UNSUPPORTED, "args", 1));
    CHECK(fails_with("\n{{ '%s' % 1 }}", NULL, TJ_UNSUPPORTED, "formatting", 2));
    CHECK(fails_with("{{ [1]|batch(2) }}", NULL, TJ_UNSUPPORTED, "'batch' filter", 1));
    CHECK(fails_with("{{ 'a'.format(1) }}", NULL, TJ_UNSUPPORTED, "'format'", 1));
    CHECK(fails_with("{{ 99999999999999999999 }}", NULL, TJ_UNSUPPORTED, "64 bits", 1));
    /* malformed */
    CHECK(fails_with("{% if true %}", NULL, TJ_SYNTAX, "endif", 0));
    CHECK(fails_with("{% for %}", NULL, TJ_SYNTAX, "Expected an expression", 1));
    CHECK(fails_with("{{ x | nope }}", NULL, TJ_SYNTAX, "No filter named 'nope'", 1));
    CHECK(fails_with("{{ x is nope }}", NULL, TJ_SYNTAX, "No test named 'nope'", 1));
    CHECK(fails_with("{% frob %}", NULL, TJ_SYNTAX, "unknown tag 'frob'", 1));
    CHECK(fails_with("a\nb\n{{ (1 }}", NULL, TJ_SYNTAX, "", 3));
    CHECK(fails_with("{# open", NULL, TJ_SYNTAX, "comment", 1));
    CHECK(fails_with("{{ 'x }}", NULL, TJ_SYNTAX, "string", 1));
    CHECK(fails_with("{% break %}", NULL, TJ_SYNTAX, "outside", 1));
    CHECK(fails_with("\xff{{ x }}", NULL, TJ_SYNTAX, "UTF-8", 0));
    /* runtime errors as Python raises them */
    CHECK(fails_with("{{ raise_exception('No way.') }}", NULL, TJ_RAISED, "No way.", 1));
    CHECK(fails_with("{{ raise_exception() }}", NULL, TJ_TYPE, "missing 1 required positional argument", 1));
    CHECK(fails_with("{{ x.y }}", NULL, TJ_UNDEFINED, "'x' is undefined", 1));
    CHECK(fails_with("{{ m.content.startswith('a') }}", "{\"m\": {\"content\": [1]}}", TJ_UNDEFINED, "'list object' has no attribute 'startswith'", 1));
    CHECK(fails_with("{{ 'a' in n }}", "{\"n\": null}", TJ_TYPE, "argument of type 'NoneType' is not iterable", 1));
    CHECK(fails_with("{{ u|tojson }}", NULL, TJ_TYPE, "not JSON serializable", 1));
    CHECK(fails_with("{% set d = {} %}{% set d.a = 1 %}", NULL, TJ_RUNTIME, "non-namespace", 1));
    CHECK(fails_with("{{ [].append(1) }}", NULL, TJ_RUNTIME, "unsafe", 1));
    /* bad input JSON for a variable */
    char *out;
    tj_error je;
    CHECK(render1("x", "{\"a\": [1,}", &out, &je) != 0 && je.kind == TJ_INPUT);
    CHECK(render1("x", "{\"a\": \"\xff\"}", &out, &je) != 0 && je.kind == TJ_INPUT);
}

TS_TEST(chat, jinja_limits) {
    /* hostile templates end in an error, quickly, without exhausting the machine */
    CHECK(fails_with("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, TJ_LIMIT, "nested too deeply", 0));
    CHECK(fails_with("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL, TJ_LIMIT, "", 0));
    CHECK(fails_with("{% set ns = namespace(x='aaaaaaaaaaaaaaaa') %}{% for i in range(64) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}{{ ns.x|length }}", NULL, TJ_LIMIT, "", 0));
    CHECK(fails_with("{{ 'a' * 1000000000000 }}", NULL, TJ_LIMIT, "", 0));
    CHECK(fails_with("{{ range(1000000)|length }}", NULL, TJ_LIMIT, "MAX_RANGE", 1));
    /* deep nesting while parsing: an error, not a stack overflow */
    char deep[20000];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 5000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 5000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    CHECK(fails_with(deep, NULL, TJ_LIMIT, "", 1));
    k = 0;
    for (int i = 0; i < 1000; i++) k += (size_t)snprintf(deep + k, sizeof deep - k, "{%% if 1 %%}");
    CHECK(fails_with(deep, NULL, TJ_LIMIT, "", 0));
    k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 3000; i++) k += (size_t)snprintf(deep + k, sizeof deep - k, "not ");
    snprintf(deep + k, sizeof deep - k, "1 }}");
    CHECK(fails_with(deep, NULL, TJ_LIMIT, "", 1));
}

/* ---- roles the templates do not know ------------------------------------- */

TS_TEST(chat, unknown_roles) {
    ts_chat_template *q35 = NULL, *q3 = NULL;
    size_t n;
    ts_error err;
    char *s = load(FIX "templates/qwen3.5.jinja", &n);
    CHECK(s && ts_chat_template_parse(s, n, &q35, &err) == 0);
    ts_free(s);
    s = load(FIX "templates/qwen3.jinja", &n);
    CHECK(s && ts_chat_template_parse(s, n, &q3, &err) == 0);
    ts_free(s);
    const char *req = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"narrator\", \"content\": \"x\"}]}";
    char *out = NULL;
    /* Qwen3.5 refuses with its own message; Qwen3 silently skips the turn */
    CHECK(ts_chat_render_json(q35, req, strlen(req), &out, NULL, &err) == TS_E_ARG);
    CHECK(!strcmp(err.msg, "Unexpected message role."));
    CHECK(out == NULL);
    CHECK(ts_chat_render_json(q3, req, strlen(req), &out, NULL, &err) == 0);
    CHECK(!strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
    ts_chat_text_free(out);
    /* malformed requests */
    CHECK(ts_chat_render_json(q3, "{\"messages\": 3}", 15, &out, NULL, &err) == TS_E_ARG);
    CHECK(ts_chat_render_json(q3, "{\"messages\": [", 14, &out, NULL, &err) == TS_E_FORMAT);
    CHECK(ts_chat_render_json(q3, "{\"messages\": [], \"add_generation_prompt\": 1}", 44, &out, NULL, &err) == TS_E_ARG);
    ts_chat_template_free(q35);
    ts_chat_template_free(q3);
}

/* ---- model directories and stop ids --------------------------------------- */

static void write_file(const char *dir, const char *name, const char *text) {
    char path[1024];
    ts_path_join(path, sizeof path, dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TS_TEST(chat, load_model_dir) {
    char dir[512], out_buf[256];
    snprintf(dir, sizeof dir, "%s/chatdir1", ts_test_tmpdir());
    CHECK(ts_test_sh(out_buf, sizeof out_buf, "rm -rf '%s' && mkdir -p '%s'", dir, dir) == 0);
    ts_chat_template *t = NULL;
    ts_error err;
    CHECK(ts_chat_template_load(dir, &t, &err) == TS_E_IO); /* nothing there */
    /* tokenizer_config.json: a list of named templates, special tokens */
    write_file(dir, "tokenizer_config.json",
               "{\"eos_token\": {\"content\": \"<|eot|>\"}, \"bos_token\": \"<s>\", \"chat_template\": ["
               "{\"name\": \"tool_use\", \"template\": \"T\"},"
               "{\"name\": \"default\", \"template\": \"{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ pad_token }}\"}]}");
    CHECK(ts_chat_template_load(dir, &t, &err) == 0);
    CHECK(!strcmp(ts_chat_template_eos(t), "<|eot|>"));
    /* what it holds, as /tokenizer_info reports it: the list's pick, the tokens (pad the default, unk None) */
    CHECK(!strcmp(ts_chat_template_source(t), "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}{{ pad_token }}"));
    CHECK(!strcmp(ts_chat_template_token(t, "eos_token"), "<|eot|>") && !strcmp(ts_chat_template_token(t, "bos_token"), "<s>") &&
          !strcmp(ts_chat_template_token(t, "pad_token"), "<|endoftext|>") && !ts_chat_template_token(t, "unk_token") &&
          !ts_chat_template_token(t, "sep_token"));
    char *out = NULL;
    const char *req = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    CHECK(ts_chat_render_json(t, req, strlen(req), &out, NULL, &err) == 0);
    CHECK_MSG(!strcmp(out, "<s>hi<|eot|><|endoftext|>"), "%s", out);
    ts_chat_text_free(out);
    ts_chat_template_free(t);
    /* a plain string template */
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": \"S{{ messages|length }}\", \"bos_token\": null}");
    CHECK(ts_chat_template_load(dir, &t, &err) == 0);
    CHECK(ts_chat_render_json(t, req, strlen(req), &out, NULL, &err) == 0);
    CHECK(!strcmp(out, "S1"));
    ts_chat_text_free(out);
    ts_chat_template_free(t);
    /* chat_template.jinja wins over tokenizer_config.json */
    write_file(dir, "chat_template.jinja", "J{{ add_generation_prompt }}\n");
    CHECK(ts_chat_template_load(dir, &t, &err) == 0);
    CHECK(ts_chat_render_json(t, req, strlen(req), &out, NULL, &err) == 0);
    CHECK(!strcmp(out, "JTrue"));
    ts_chat_text_free(out);
    ts_chat_template_free(t);
    /* a broken template names the file and the line */
    write_file(dir, "chat_template.jinja", "ok\n{% if %}");
    CHECK(ts_chat_template_load(dir, &t, &err) == TS_E_FORMAT);
    CHECK_MSG(strstr(err.msg, "chat_template.jinja") && strstr(err.msg, "line 2"), "%s", err.msg);
    /* stop ids: generation_config (list) then config (int, and text_config), deduplicated */
    int32_t ids[8];
    CHECK(ts_chat_stop_ids(dir, ids, 8, &err) == 0);
    write_file(dir, "generation_config.json", "{\"eos_token_id\": [248046, 248044]}");
    write_file(dir, "config.json", "{\"eos_token_id\": 248044, \"text_config\": {\"eos_token_id\": 7}}");
    CHECK(ts_chat_stop_ids(dir, ids, 8, &err) == 3);
    CHECK(ids[0] == 248046 && ids[1] == 248044 && ids[2] == 7);
    CHECK(ts_chat_stop_ids(dir, ids, 1, &err) == 3 && ids[0] == 248046);
    write_file(dir, "config.json", "{\"eos_token_id\": ");
    CHECK(ts_chat_stop_ids(dir, ids, 8, &err) == TS_E_FORMAT);
}

/* ---- the CLI ------------------------------------------------------------- */

TS_TEST(chat, cli_template) {
    char out[4096], path[512], outp[512];
    snprintf(path, sizeof path, "%s/req.json", ts_test_tmpdir());
    snprintf(outp, sizeof outp, "%s/prompt.txt", ts_test_tmpdir());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("{\"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of France?\"}], "
          "\"chat_template_kwargs\": {\"enable_thinking\": false}}", f);
    fclose(f);
    int rc = ts_test_sh(out, sizeof out, "%s template --template " FIX "templates/qwen3.5.jinja --request %s > %s",
                        ts_test_bin(), path, outp);
    CHECK_MSG(rc == 0, "rc=%d %s", rc, out);
    size_t n;
    char *got = load(outp, &n);
    CHECK(got != NULL);
    const char *want = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK_MSG(n == strlen(want) && !memcmp(got, want, n), "got %s", got);
    ts_free(got);
    /* a template that raises: non-zero exit, its message on stderr, nothing on stdout */
    f = fopen(path, "w");
    fputs("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}", f);
    fclose(f);
    rc = ts_test_sh(out, sizeof out, "%s template --template " FIX "templates/qwen3.6.jinja --request %s 2>&1 >%s",
                    ts_test_bin(), path, outp);
    CHECK(rc == 1);
    CHECK_MSG(strstr(out, "No user query found in messages.") != NULL, "%s", out);
    got = load(outp, &n);
    CHECK(got && n == 0);
    ts_free(got);
    /* usage errors */
    CHECK(ts_test_sh(out, sizeof out, "%s template --request %s", ts_test_bin(), path) == 2);
    CHECK(ts_test_sh(out, sizeof out, "%s template -m /nonexistent --request %s", ts_test_bin(), path) == 1);
}

/* ---- fuzz: mutated real templates never crash ------------------------------ */

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

TS_TEST(chat, fuzz_template_mutations) {
    static const char pieces[][8] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|", "\n",
                                     " if ", "endif", "for", "\xc3", "\xa9", "~", ".", ",", "=", "\\", "loop", "ns."};
    size_t n, vn, pos = 0, len;
    char *cases = load(FIX "cases.jsonl", &vn);
    CHECK(cases != NULL);
    const char *line;
    /* the variables of case c14 (tools, tool calls, several messages) */
    for (int i = 0; i < 15; i++) CHECK(next_line(cases, vn, &pos, &line, &len));
    tj_vars *v = tj_vars_new();
    tj_error je;
    CHECK(tj_vars_set_json_member(v, "messages", line, len, "messages", &je) == 1);
    CHECK(tj_vars_set_json_member(v, "tools", line, len, "tools", &je) == 1);
    tj_vars_set_bool(v, "add_generation_prompt", 1);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int parsed = 0, rendered = 0, total = 0;
    int iters = getenv("TS_FUZZ_ITERS") ? atoi(getenv("TS_FUZZ_ITERS")) : 150; /* more for a long soak */
    if (getenv("TS_FUZZ_SEED")) seed ^= (uint64_t)strtoull(getenv("TS_FUZZ_SEED"), NULL, 10) * 0x2545f4914f6cdd1dull;
    for (int k = 0; k < 4; k++) {
        char path[256];
        snprintf(path, sizeof path, FIX "templates/%s.jinja", TEMPLATES[k]);
        char *src = load(path, &n);
        CHECK(src != NULL);
        char *buf = malloc(n + 64 * 8 + 1);
        for (int it = 0; it < iters; it++) {
            memcpy(buf, src, n);
            size_t m = n;
            int edits = 1 + (int)(rng_next(&seed) % 4);
            for (int e = 0; e < edits; e++) {
                size_t at = (size_t)(rng_next(&seed) % (m + 1));
                switch (rng_next(&seed) % 3) {
                case 0: if (at < m) buf[at] = (char)(rng_next(&seed) & 0xff); break;
                case 1: if (at < m) { memmove(buf + at, buf + at + 1, m - at - 1); m--; } break;
                default: {
                    const char *p = pieces[rng_next(&seed) % (sizeof pieces / sizeof pieces[0])];
                    size_t pl = strlen(p);
                    memmove(buf + at + pl, buf + at, m - at);
                    memcpy(buf + at, p, pl);
                    m += pl;
                }
                }
            }
            tj_template *t = NULL;
            total++;
            if (tj_parse(buf, m, NULL, &t, &je) == 0) {
                parsed++;
                char *out = NULL;
                if (tj_render(t, v, &out, NULL, &je) == 0) rendered++;
                else CHECK(je.msg[0] != 0 && out == NULL);
                ts_free(out);
                tj_template_free(t);
            } else {
                CHECK(je.msg[0] != 0 && t == NULL);
            }
        }
        free(buf);
        ts_free(src);
    }
    tj_vars_free(v);
    ts_free(cases);
    printf("  fuzz: %d mutants, %d parsed, %d rendered\n", total, parsed, rendered);
    CHECK(parsed > 0 && parsed < total);
}

/* Malformed message arrays end: the tool-call pre-scan once looped forever
 * on an element of no bytes (a stray control byte, or a '}' where an element
 * should be; found by fuzz_server). Rendered in a child with an alarm, so a
 * regression fails this test instead of hanging the suite. Each request is
 * refused (cJSON rejects it), none crashes. */
TS_TEST(chat, malformed_arrays_end) {
    ts_chat_template *q35 = NULL;
    size_t n;
    ts_error err;
    char *s = load(FIX "templates/qwen3.5.jinja", &n);
    CHECK(s && ts_chat_template_parse(s, n, &q35, &err) == 0);
    ts_free(s);
    if (!q35) return;
    static const char *const reqs[] = {
        "{\"messages\":[\x05{\"role\":\"x\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[\x01}]}]}",
        "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":[}]}}]}]}",
    };
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        int bad = 0;
        for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
            char *out = NULL;
            ts_error e;
            if (ts_chat_render_json(q35, reqs[i], strlen(reqs[i]), &out, NULL, &e) == 0) bad |= 1 << i;
            ts_chat_text_free(out);
        }
        _exit(bad ? 100 + bad : 0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %s %d (signal 14: a request did not end in 10 s; 100 + mask: accepted)",
              WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    ts_chat_template_free(q35);
}
