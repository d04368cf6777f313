/* reply.c: a model's generated text -> reasoning, content and tool calls.
 *
 * Owns: splitting a Qwen reply into its `<think>` block (reasoning_content),
 * the answer (content) and `<tool_call>` blocks, incrementally (text arrives
 * a token at a time and the split must come out the same however it was cut);
 * parsing tool calls in both forms the Qwen templates teach:
 *   Qwen3:    <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
 *   Qwen3.5+: <tool_call>\n<function=N>\n<parameter=P>\nVALUE\n</parameter>\n
 *             </function>\n</tool_call>
 * Does not own: stop sequences and special tokens (the caller removes them
 * before pushing), ids and JSON envelopes of an API (the server).
 *
 * States: START (nothing seen but whitespace; a leading "<think>" may still
 * come), REASONING (until "</think>"), CONTENT, TOOL (from the first
 * "<tool_call>" to the end: held, parsed at finish). Text that could be the
 * beginning of the tag that ends the state is held back, and so is trailing
 * whitespace that the template's layout puts around tags ("<think>\n" R
 * "\n</think>\n\n" C "\n\n<tool_call>"), so that it can be dropped when the
 * tag arrives. Everything held comes out at finish, so no text is lost: a
 * reply with a malformed tool call keeps the raw block as content.
 *
 * Parameter values of the XML form are text; they become JSON typed by the
 * request's tool schema (integer, number, boolean, object, array; anything
 * else or no schema: a string), as the template printed them (booleans as
 * Python's True/False are accepted).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "ts_int.h"

enum { R_START, R_REASONING, R_CONTENT, R_TOOL };

struct ts_reply {
    int state;
    int strip_lead;      /* drop leading newlines of the next text in this state */
    ts_text hold;        /* bytes not yet given to a channel */
    ts_text ws_before;   /* whitespace dropped before "<tool_call>" (restored if parsing fails) */
    size_t ws_held;      /* the first ws_held bytes of hold are whitespace, already scanned. Every
                            tag starts with '<', so no tag starts there and the scans of the next
                            push resume past them: a long whitespace run (held until the next other
                            byte decides where it belongs) then costs O(1) per push, not O(run). */
    cJSON *tools;        /* the request's tool schemas, or NULL */
    int no_calls;        /* ts_reply_no_tool_calls: "<tool_call>" is content like any text */
};

static const char T_THINK[] = "<think>", T_END_THINK[] = "</think>";
static const char T_CALL[] = "<tool_call>", T_END_CALL[] = "</tool_call>";

static int text_add(ts_text *s, const char *p, size_t n) {
    if (!s || !n) return 0;
    size_t need = s->len + n + 1;
    if (need > s->cap) {
        size_t cap = s->cap ? s->cap : 128;
        while (cap < need) cap *= 2;
        char *q = ts_alloc(cap, TS_MEM_MISC);
        if (!q) return TS_E_NOMEM;
        if (s->len) memcpy(q, s->s, s->len);
        ts_free(s->s);
        s->s = q;
        s->cap = cap;
    }
    memcpy(s->s + s->len, p, n);
    s->len += n;
    s->s[s->len] = 0;
    return 0;
}

/* Drop the first n bytes of the hold buffer. The buffer is NULL until the
 * first non-empty push (an empty reply: a stop string at its start, a
 * first token that is a stop id), so n == 0 must not touch it. */
static void hold_drop(ts_reply *r, size_t n) {
    if (!n || !r->hold.s) return;
    r->ws_held = r->ws_held > n ? r->ws_held - n : 0;
    memmove(r->hold.s, r->hold.s + n, r->hold.len - n);
    r->hold.len -= n;
    r->hold.s[r->hold.len] = 0;
}

static const char *find(const char *s, size_t n, const char *tag) {
    if (!s) return NULL;
    size_t k = strlen(tag);
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == tag[0] && !memcmp(s + i, tag, k)) return s + i;
    return NULL;
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of tag. */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t k = strlen(tag);
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (!memcmp(s + n - m, tag, m)) return m;
    return 0;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

int ts_reply_think_open(const char *prompt, size_t len) {
    while (len && is_ws(prompt[len - 1])) len--;
    size_t k = sizeof T_THINK - 1;
    return len >= k && !memcmp(prompt + len - k, T_THINK, k);
}

int ts_reply_new(int think_open, const char *tools_json, ts_reply **out, ts_error *err) {
    *out = NULL;
    ts_reply *r = ts_alloc(sizeof *r, TS_MEM_MISC);
    if (!r) return ts_fail(err, TS_E_NOMEM, "out of memory");
    r->state = think_open ? R_REASONING : R_START;
    r->strip_lead = think_open;
    if (tools_json) {
        r->tools = cJSON_Parse(tools_json);
        if (r->tools && !cJSON_IsArray(r->tools)) {
            cJSON_Delete(r->tools);
            r->tools = NULL;
        }
    }
    *out = r;
    return 0;
}

void ts_reply_no_tool_calls(ts_reply *r) {
    if (r) r->no_calls = 1;
}

void ts_reply_free(ts_reply *r) {
    if (!r) return;
    ts_text_free(&r->hold);
    ts_text_free(&r->ws_before);
    cJSON_Delete(r->tools);
    ts_free(r);
}

/* Move as much of the hold buffer to the channels as is certain now. With
 * final set, everything goes (except TOOL text, which finish parses). */
static int advance(ts_reply *r, ts_text *reasoning, ts_text *content, int final) {
    for (;;) {
        /* (the hold buffer is NULL until something is held: "" then, so that
         * s + 0 and zero-length compares below are defined) */
        const char *s = r->hold.s ? r->hold.s : "";
        size_t n = r->hold.len;
        if (r->state == R_START) {
            size_t w = r->ws_held;
            while (w < n && is_ws(s[w])) w++;
            size_t k = sizeof T_THINK - 1;
            if (n - w >= k && !memcmp(s + w, T_THINK, k)) {
                hold_drop(r, w + k);
                r->state = R_REASONING;
                r->strip_lead = 1;
                continue;
            }
            if (!final && (n - w < k && !memcmp(s + w, T_THINK, n - w))) { /* maybe "<think>" */
                r->ws_held = w;
                return 0;
            }
            r->state = R_CONTENT;
            continue;
        }
        if (r->state == R_TOOL) return 0;
        int reasoning_state = r->state == R_REASONING;
        ts_text *ch = reasoning_state ? reasoning : content;
        if (r->strip_lead) {
            size_t w = 0;
            while (w < n && s[w] == '\n') w++;
            hold_drop(r, w);
            n = r->hold.len;
            if (!n && !final) return 0;
            r->strip_lead = 0;
        }
        /* without tool calls the content has no tag to wait for (a partial
         * "<tool_call>" is not held) */
        const char *tag = reasoning_state ? T_END_THINK : r->no_calls ? NULL : T_CALL;
        const size_t lo = r->ws_held; /* [0, lo) is whitespace: no tag starts there */
        const char *at = tag ? find(s + lo, n - lo, tag) : NULL;
        if (at) {
            size_t m = (size_t)(at - s), e = m;
            while (e > lo && is_ws(s[e - 1])) e--; /* layout whitespace before the tag */
            if (e == lo) e = 0;
            if (text_add(ch, s, e)) return TS_E_NOMEM;
            if (reasoning_state) {
                hold_drop(r, m + sizeof T_END_THINK - 1);
                r->state = R_CONTENT;
                r->strip_lead = 1;
            } else {
                r->ws_before.len = 0;
                if (text_add(&r->ws_before, s + e, m - e)) return TS_E_NOMEM;
                hold_drop(r, m);
                r->state = R_TOOL;
            }
            continue;
        }
        size_t keep = final || !tag ? 0 : partial_tag(s, n, tag);
        size_t e = n - keep;
        if (!final) {
            while (e > lo && is_ws(s[e - 1])) e--;
            if (e == lo) e = 0;
        }
        if (text_add(ch, s, e)) return TS_E_NOMEM;
        hold_drop(r, e);
        r->ws_held = n - keep - e; /* what stays before the partial tag is whitespace */
        return 0;
    }
}

int ts_reply_push(ts_reply *r, const char *text, size_t len, ts_text *reasoning, ts_text *content,
                  ts_error *err) {
    if (!r || (!text && len)) return ts_fail(err, TS_E_ARG, "ts_reply_push: NULL argument");
    if (!len) return 0; /* nothing new: nothing can become certain */
    if (text_add(&r->hold, text, len)) return ts_fail(err, TS_E_NOMEM, "out of memory");
    if (advance(r, reasoning, content, 0)) return ts_fail(err, TS_E_NOMEM, "out of memory");
    return 0;
}

/* ---- tool calls ------------------------------------------------------------ */

/* The schema type of parameter `param` of function `name`, or NULL. */
static const char *param_type(const cJSON *tools, const char *name, const char *param) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!f) f = t;
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(fn) || strcmp(fn->valuestring, name)) continue;
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "parameters"), "properties");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(props, param);
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (cJSON_IsString(ty)) return ty->valuestring;
        if (cJSON_IsArray(ty)) { /* ["integer", "null"]: the first non-null */
            const cJSON *it;
            cJSON_ArrayForEach(it, ty) if (cJSON_IsString(it) && strcmp(it->valuestring, "null")) return it->valuestring;
        }
        return NULL;
    }
    return NULL;
}

/* A parameter's text as a JSON value of the schema's type. */
static cJSON *typed_value(const char *v, const char *type) {
    if (type) {
        if (!strcmp(type, "integer") || !strcmp(type, "number")) {
            char *end;
            double d = strtod(v, &end);
            if (end != v && !*end) return cJSON_CreateNumber(d);
        } else if (!strcmp(type, "boolean")) {
            if (!strcasecmp(v, "true")) return cJSON_CreateTrue();
            if (!strcasecmp(v, "false")) return cJSON_CreateFalse();
        } else if (!strcmp(type, "object") || !strcmp(type, "array")) {
            cJSON *j = cJSON_Parse(v);
            if (j) return j;
        } else if (!strcmp(type, "null") && !strcmp(v, "null")) {
            return cJSON_CreateNull();
        }
    }
    return cJSON_CreateString(v);
}

static char *dup_range(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* Body of one <function=...> call: arguments into args. 0 or -1. */
static int parse_xml_call(const char *s, size_t n, const cJSON *tools, cJSON *call) {
    static const char F[] = "<function=", P[] = "<parameter=", EP[] = "</parameter>", EF[] = "</function>";
    if (n < sizeof F - 1 || memcmp(s, F, sizeof F - 1)) return -1;
    const char *p = s + sizeof F - 1, *end = s + n;
    const char *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt || gt == p) return -1;
    char *name = dup_range(p, (size_t)(gt - p));
    if (!name) return -1;
    cJSON_AddStringToObject(call, "name", name);
    cJSON *args = cJSON_CreateObject();
    p = gt + 1;
    int rc = -1;
    for (;;) {
        while (p < end && is_ws(*p)) p++;
        if ((size_t)(end - p) >= sizeof EF - 1 && !memcmp(p, EF, sizeof EF - 1)) {
            p += sizeof EF - 1;
            while (p < end && is_ws(*p)) p++;
            rc = p == end ? 0 : -1;
            break;
        }
        if ((size_t)(end - p) < sizeof P - 1 || memcmp(p, P, sizeof P - 1)) break;
        p += sizeof P - 1;
        gt = memchr(p, '>', (size_t)(end - p));
        if (!gt || gt == p) break;
        const char *ve = find(gt + 1, (size_t)(end - gt - 1), EP);
        if (!ve) break;
        const char *v = gt + 1;
        if (v < ve && *v == '\n') v++; /* the template writes "\n" VALUE "\n" */
        const char *vend = ve;
        if (vend > v && vend[-1] == '\n') vend--;
        char *pname = dup_range(p, (size_t)(gt - p)), *val = dup_range(v, (size_t)(vend - v));
        if (!pname || !val) { free(pname), free(val); break; }
        cJSON *jv = typed_value(val, tools ? param_type(tools, name, pname) : NULL);
        cJSON_DeleteItemFromObjectCaseSensitive(args, pname); /* a repeated parameter: last wins */
        cJSON_AddItemToObject(args, pname, jv);
        free(pname), free(val);
        p = ve + sizeof EP - 1;
    }
    free(name);
    char *a = rc ? NULL : cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    if (!a) return -1;
    cJSON_AddStringToObject(call, "arguments", a);
    free(a);
    return 0;
}

/* Body {"name": ..., "arguments": {...} or "..."}: the JSON value at s
 * (the text past it is the caller's), whose end goes to *end. 0 or -1. */
static int parse_json_call(const char *s, size_t n, cJSON *call, const char **end) {
    const char *e = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(s, n, &e, 0);
    *end = j ? e : NULL;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    int rc = -1;
    if (cJSON_IsObject(j) && cJSON_IsString(name)) {
        char *a = NULL;
        if (!args) a = strdup("{}");
        else if (cJSON_IsString(args)) a = strdup(args->valuestring);
        else a = cJSON_PrintUnformatted(args);
        if (a) {
            cJSON_AddStringToObject(call, "name", name->valuestring);
            cJSON_AddStringToObject(call, "arguments", a);
            free(a);
            rc = 0;
        }
    }
    cJSON_Delete(j);
    return rc;
}

/* The held tail "<tool_call>...": a JSON array of {"name","arguments"}, or
 * NULL when any block does not parse. */
static cJSON *parse_calls(const char *s, size_t n, const cJSON *tools) {
    cJSON *calls = cJSON_CreateArray();
    const char *p = s, *end = s + n;
    size_t kc = sizeof T_CALL - 1, ke = sizeof T_END_CALL - 1;
    for (;;) {
        while (p < end && is_ws(*p)) p++;
        if (p == end) break;
        if ((size_t)(end - p) < kc || memcmp(p, T_CALL, kc)) goto bad;
        p += kc;
        const char *b = p;
        while (b < end && is_ws(*b)) b++;
        cJSON *call = cJSON_CreateObject();
        const char *e;
        int rc;
        if (b < end && *b == '{') {
            /* the JSON form ends where its value does: a "</tool_call>"
             * inside one of its strings is text, not the block's end */
            const char *je = NULL;
            rc = parse_json_call(b, (size_t)(end - b), call, &je);
            while (!rc && je < end && is_ws(*je)) je++;
            /* NULL: an unclosed last block (generation ended); text between
             * the value and the tag is ignored, as it always was */
            e = rc || je == end ? NULL : find(je, (size_t)(end - je), T_END_CALL);
        } else {
            e = find(p, (size_t)(end - p), T_END_CALL);
            const char *be = e ? e : end; /* an unclosed last block (generation ended) */
            while (be > b && is_ws(be[-1])) be--;
            rc = parse_xml_call(b, (size_t)(be - b), tools, call);
        }
        if (rc) { cJSON_Delete(call); goto bad; }
        cJSON_AddItemToArray(calls, call);
        if (!e) break;
        p = e + ke;
    }
    if (cJSON_GetArraySize(calls) > 0) return calls;
bad:
    cJSON_Delete(calls);
    return NULL;
}

int ts_reply_finish(ts_reply *r, ts_text *reasoning, ts_text *content, char **tool_calls, ts_error *err) {
    if (tool_calls) *tool_calls = NULL;
    if (!r) return ts_fail(err, TS_E_ARG, "ts_reply_finish: NULL argument");
    if (advance(r, reasoning, content, 1)) return ts_fail(err, TS_E_NOMEM, "out of memory");
    if (r->state != R_TOOL) return 0;
    cJSON *calls = parse_calls(r->hold.s, r->hold.len, r->tools);
    char *json = calls ? cJSON_PrintUnformatted(calls) : NULL;
    cJSON_Delete(calls);
    if (json && tool_calls) {
        *tool_calls = ts_strdup(json, TS_MEM_MISC);
        free(json);
        if (!*tool_calls) return ts_fail(err, TS_E_NOMEM, "out of memory");
    } else {
        free(json);
        /* Not a well-formed call: the raw text is the answer. */
        if (text_add(content, r->ws_before.s, r->ws_before.len) || text_add(content, r->hold.s, r->hold.len))
            return ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    r->hold.len = 0;
    r->ws_held = 0;
    r->state = R_CONTENT;
    return 0;
}
