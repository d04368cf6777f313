/* server_tools.c: OpenAI tool_choice for chat requests.
 *
 * Owns: reading tools / tool_choice / parallel_tool_calls, and for a forced
 * call ("required", or {"type": "function", "function": {"name": X}}) the
 * JSON Schema of the call the reply is held to, and its constraint (from
 * the server's cache, server_cc.c). Does not own: rendering the tools into
 * the prompt (the chat template), parsing calls out of the reply
 * (src/text/reply.c), applying the constraint (server_gen.c).
 *
 * tool_choice:
 *   "auto"      the model may call tools; calls are parsed from its reply.
 *   "none"      the tools are still rendered into the prompt, but the reply
 *               is not parsed for calls: its text is content, and no
 *               tool_calls come back. This is what OpenAI does and vLLM's
 *               default (its --exclude-tools-when-tool-choice-none renders
 *               without them); rendering them keeps the prompt, and so a
 *               session's reusable prefix, the same whatever the choice, a
 *               conversation that forces and then forbids calls keeps its
 *               cache.
 *   "required"  the reply is one (parallel_tool_calls true: one or more)
 *               call of any of the tools; a named function: of that one.
 *
 * A forced call's form. The reply is held to Qwen3's JSON form, the one the
 * reply parser reads as well as the XML form of Qwen3.5's template:
 *   <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>
 * (calls separated by "\n"), the document being
 *   {"type": "object", "properties": {"name": {"const": NAME},
 *    "arguments": PARAMETERS}, "required": ["name", "arguments"],
 *    "additionalProperties": false}
 * for one tool, an anyOf of those for several. The JSON form because its
 * arguments are one JSON document that the schema constraint checks
 * against the tool's parameters, types and all; the XML form's values are
 * untyped text a JSON Schema cannot hold. vLLM forces the JSON shape too
 * (its guided decoding of a call list), whatever format the model was
 * taught. The literals come as the tokenizer's added tokens where it has
 * them (ts_constraint_json_schema_wrap), the way the model writes them.
 * With a think block open the constraint starts after "</think>"
 * (server_gen.c), as response_format's does: the reasoning stays free.
 *
 * A forced tool's parameters must be a schema the constraint can enforce:
 * each is checked on its own (ts_json_schema_check), and a keyword outside
 * the subset is a 400 naming the tool and the keyword with its path inside
 * the parameters. With "auto" nothing is checked or constrained. "$ref"
 * pointers in the parameters ("#/$defs/x") point into the parameters;
 * embedded in the call schema they are rebased onto the embedding path.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define SRV_MAX_FORCED_TOOLS 16 /* alternatives one anyOf may have (src/text/json_schema.h) */

static const char CALL_PREFIX[] = "<tool_call>\n", CALL_SUFFIX[] = "\n</tool_call>", CALL_SEP[] = "\n";

static int tc_fail(srv_err *e, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int tc_fail(srv_err *e, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    e->status = 400;
    e->type = "invalid_request_error";
    e->param = param;
    e->code = code;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static int tc_nomem(srv_err *e) {
    e->status = 500;
    e->type = "server_error";
    e->param = NULL;
    e->code = NULL;
    snprintf(e->msg, sizeof e->msg, "out of memory building the tool call's schema");
    return -1;
}

/* A member, with JSON null read as absent. */
static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* ---- tool_choice ---- */

/* tool_choice into *out (SRV_TC_*) and, named, *name (borrowed). */
static int read_choice(const cJSON *tc, int *out, const char **name, srv_err *e) {
    static const char forms[] = "'tool_choice' may be \"auto\", \"none\", \"required\" or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}";
    *out = SRV_TC_AUTO;
    *name = NULL;
    if (!tc) return 0;
    if (cJSON_IsString(tc)) {
        if (!strcmp(tc->valuestring, "auto")) *out = SRV_TC_AUTO;
        else if (!strcmp(tc->valuestring, "none")) *out = SRV_TC_NONE;
        else if (!strcmp(tc->valuestring, "required")) *out = SRV_TC_REQUIRED;
        else return tc_fail(e, "tool_choice", "unsupported_tool_choice", "%s; got \"%.64s\"", forms, tc->valuestring);
        return 0;
    }
    const cJSON *ty = cJSON_IsObject(tc) ? get(tc, "type") : NULL, *fn = ty ? get(tc, "function") : NULL, *it;
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
        return tc_fail(e, "tool_choice", "unsupported_tool_choice", "%s", forms);
    cJSON_ArrayForEach(it, tc) {
        if (strcmp(it->string, "type") && strcmp(it->string, "function"))
            return tc_fail(e, "tool_choice", "unsupported_tool_choice",
                           "'tool_choice' has '%.64s' (a named function is {\"type\": \"function\", \"function\": "
                           "{\"name\": ...}})",
                           it->string);
    }
    const cJSON *nm = cJSON_IsObject(fn) ? get(fn, "name") : NULL;
    if (!cJSON_IsString(nm) || !nm->valuestring[0])
        return tc_fail(e, "tool_choice", "invalid_value", "'tool_choice.function' needs a 'name' (a non-empty string)");
    cJSON_ArrayForEach(it, fn) {
        if (strcmp(it->string, "name"))
            return tc_fail(e, "tool_choice", "unsupported_tool_choice", "'tool_choice.function' has '%.64s' (only 'name')",
                           it->string);
    }
    *out = SRV_TC_NAMED;
    *name = nm->valuestring;
    return 0;
}

/* ---- the call schema ---- */

/* Rebase the "$ref" pointers of schema s (the parameters, now at base in
 * the call schema): "#/$defs/x" -> "#" base "/$defs/x". Schema-aware: only
 * where the keyword holds a schema (a "$ref" property name or an enum
 * value that looks like one is data, left alone). */
static int rebase(cJSON *s, const char *base);

static int rebase_map(cJSON *m, const char *base) {
    cJSON *it;
    if (!cJSON_IsObject(m)) return 0;
    cJSON_ArrayForEach(it, m) if (rebase(it, base)) return -1;
    return 0;
}

static int rebase_list(cJSON *l, const char *base) {
    cJSON *it;
    if (!cJSON_IsArray(l)) return 0;
    cJSON_ArrayForEach(it, l) if (rebase(it, base)) return -1;
    return 0;
}

static int rebase(cJSON *s, const char *base) {
    cJSON *it;
    if (!cJSON_IsObject(s)) return 0;
    cJSON_ArrayForEach(it, s) {
        const char *k = it->string;
        if (!strcmp(k, "$ref") && cJSON_IsString(it) && it->valuestring[0] == '#') {
            const size_t n = strlen(base) + strlen(it->valuestring) + 1;
            char *r = malloc(n);
            if (!r) return -1;
            snprintf(r, n, "#%s%s", base, it->valuestring + 1);
            const int ok = cJSON_SetValuestring(it, r) != NULL;
            free(r);
            if (!ok) return -1;
        } else if (!strcmp(k, "properties") || !strcmp(k, "$defs") || !strcmp(k, "definitions")) {
            if (rebase_map(it, base)) return -1;
        } else if (!strcmp(k, "items") || !strcmp(k, "additionalProperties") || !strcmp(k, "not")) {
            if (rebase(it, base)) return -1;
        } else if (!strcmp(k, "anyOf") || !strcmp(k, "oneOf") || !strcmp(k, "allOf") || !strcmp(k, "prefixItems")) {
            if (rebase_list(it, base)) return -1;
        }
    }
    return 0;
}

/* One tool's call document (see the file's comment): params borrowed
 * (NULL: no parameters, so only {}), base its path in the whole schema. */
static cJSON *call_schema(const char *name, const cJSON *params, const char *base) {
    cJSON *s = cJSON_CreateObject(), *props = NULL, *nm = NULL, *req = NULL;
    cJSON *args = params ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
    if (!s || !args) goto bad;
    if (!params) {
        if (!cJSON_AddStringToObject(args, "type", "object") || !cJSON_AddFalseToObject(args, "additionalProperties"))
            goto bad;
    } else if (rebase(args, base)) {
        goto bad;
    }
    if (!cJSON_AddStringToObject(s, "type", "object") || !(props = cJSON_AddObjectToObject(s, "properties")) ||
        !(nm = cJSON_AddObjectToObject(props, "name")) || !cJSON_AddStringToObject(nm, "const", name))
        goto bad;
    cJSON_AddItemToObject(props, "arguments", args);
    args = NULL;
    if (!(req = cJSON_AddArrayToObject(s, "required"))) goto bad;
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString("arguments"));
    if (cJSON_GetArraySize(req) != 2 || !cJSON_AddFalseToObject(s, "additionalProperties")) goto bad;
    return s;
bad:
    cJSON_Delete(args);
    cJSON_Delete(s);
    return NULL;
}

/* The tools' checks for a forced call: each an object {"type": "function",
 * "function": {"name", "parameters"?}}, names distinct; the named one
 * found; every tool the reply may call with parameters the constraint can
 * enforce. *which: the named tool's index, or -1 (every tool). */
static int check_tools(const cJSON *tools, const char *named, const char *what, int *which, srv_err *e) {
    const int n = cJSON_GetArraySize(tools);
    *which = -1;
    for (int i = 0; i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(tools, i), *ty = get(t, "type"), *fn = get(t, "function");
        const cJSON *nm = cJSON_IsObject(fn) ? get(fn, "name") : NULL, *pa = cJSON_IsObject(fn) ? get(fn, "parameters") : NULL;
        if (!cJSON_IsObject(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(nm) ||
            !nm->valuestring[0])
            return tc_fail(e, "tools", "invalid_value",
                           "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": "
                           "{...}}} (tool_choice %s needs its tools' names and parameters)",
                           i, what);
        if (pa && !cJSON_IsObject(pa))
            return tc_fail(e, "tools", "invalid_type", "tools[%d] ('%.64s'): 'parameters' must be a JSON Schema object", i,
                           nm->valuestring);
        for (int k = 0; k < i; k++) {
            const cJSON *o = get(get(cJSON_GetArrayItem(tools, k), "function"), "name");
            if (!strcmp(o->valuestring, nm->valuestring))
                return tc_fail(e, "tools", "invalid_value", "tools[%d] and tools[%d] are both named '%.64s'", k, i,
                               nm->valuestring);
        }
        if (named && !strcmp(named, nm->valuestring)) *which = i;
    }
    if (named && *which < 0)
        return tc_fail(e, "tool_choice", "invalid_value", "'tool_choice' names the function '%.64s', which is not in 'tools'",
                       named);
    if (!named && n > SRV_MAX_FORCED_TOOLS)
        return tc_fail(e, "tool_choice", "unsupported_tool_choice",
                       "tool_choice \"required\" with %d tools: a forced call can choose among at most %d (name one "
                       "with {\"type\": \"function\", \"function\": {\"name\": ...}}, or pass fewer tools)",
                       n, SRV_MAX_FORCED_TOOLS);
    for (int i = 0; i < n; i++) {
        if (named && i != *which) continue;
        const cJSON *fn = get(cJSON_GetArrayItem(tools, i), "function"), *pa = get(fn, "parameters"), *ty;
        if (!pa) continue;
        if ((ty = get(pa, "type")) && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "object")))
            return tc_fail(e, "tools", "unsupported_tool_schema",
                           "tools[%d] ('%.64s'): its parameters must describe an object (\"type\": \"object\") for "
                           "tool_choice %s",
                           i, get(fn, "name")->valuestring, what);
        char *text = cJSON_PrintUnformatted(pa);
        if (!text) return tc_nomem(e);
        ts_error err = {0};
        const int rc = ts_json_schema_check(text, strlen(text), &err);
        free(text);
        if (rc == TS_E_NOMEM) return tc_nomem(e);
        if (rc)
            return tc_fail(e, "tools", "unsupported_tool_schema",
                           "tools[%d] ('%.64s'): tool_choice %s cannot enforce its parameters: %s", i,
                           get(fn, "name")->valuestring, what, err.msg);
    }
    return 0;
}

/* The call schema's text (malloc'd) for the named tool (which >= 0) or
 * every tool. */
static char *build_schema(const cJSON *tools, int which) {
    cJSON *root = NULL, *any = NULL;
    const int n = cJSON_GetArraySize(tools), several = which < 0 && n > 1;
    if (several && (!(root = cJSON_CreateObject()) || !(any = cJSON_AddArrayToObject(root, "anyOf")))) goto bad;
    for (int i = 0, k = 0; i < n; i++) {
        if (which >= 0 && i != which) continue;
        const cJSON *fn = get(cJSON_GetArrayItem(tools, i), "function");
        char base[64];
        if (several) snprintf(base, sizeof base, "/anyOf/%d/properties/arguments", k++);
        else snprintf(base, sizeof base, "/properties/arguments");
        cJSON *cs = call_schema(get(fn, "name")->valuestring, get(fn, "parameters"), base);
        if (!cs) goto bad;
        if (several) cJSON_AddItemToArray(any, cs);
        else root = cs;
    }
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
bad:
    cJSON_Delete(root);
    return NULL;
}

int srv_parse_tool_choice(srv *s, const cJSON *root, job *j, srv_err *e) {
    const cJSON *tools = get(root, "tools"), *v;
    const int has_tools = cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
    const char *named = NULL;
    if (read_choice(get(root, "tool_choice"), &j->tool_choice, &named, e)) return -1;
    const int forced = j->tool_choice == SRV_TC_REQUIRED || j->tool_choice == SRV_TC_NAMED;
    const char *what = j->tool_choice == SRV_TC_NAMED ? "{\"type\": \"function\", ...}" : "\"required\"";
    int parallel = 1;
    if ((v = get(root, "parallel_tool_calls"))) {
        if (!cJSON_IsBool(v)) return tc_fail(e, "parallel_tool_calls", "invalid_type", "'parallel_tool_calls' must be true or false");
        parallel = cJSON_IsTrue(v);
    }
    /* with "auto" the model decides how many calls it writes; a forced call
     * can be held to one */
    if (!parallel && j->tool_choice == SRV_TC_AUTO)
        return tc_fail(e, "parallel_tool_calls", "unsupported_parameter",
                       "'parallel_tool_calls' false needs a forced tool_choice (\"required\" or a named function): with "
                       "\"auto\" a reply may hold several calls");
    if (!forced) return 0;
    if (!has_tools)
        return tc_fail(e, "tool_choice", "invalid_value", "tool_choice %s needs 'tools' (a non-empty list)", what);
    int which;
    if (check_tools(tools, named, what, &which, e)) return -1;
    char *text = build_schema(tools, which);
    if (!text) return tc_nomem(e);
    const ts_constraint_wrap w = {CALL_PREFIX, CALL_SUFFIX, CALL_SEP, parallel};
    ts_error err = {0};
    const int rc = srv_cc_get(s, SRV_CC_TOOLS, text, strlen(text), &w, &j->cref, &err);
    free(text);
    if (rc == TS_E_NOMEM) return tc_nomem(e);
    if (rc) /* the tools passed one by one, not together (a bound of the whole) */
        return tc_fail(e, "tools", "unsupported_tool_schema", "tool_choice %s cannot enforce the tools' calls: %s", what,
                       err.msg);
    j->schema = srv_cc_constraint(j->cref);
    return 0;
}
