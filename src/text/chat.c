/* chat.c: chat requests in, prompt text out.
 *
 * Owns: finding a model's chat template (chat_template.jinja, tokenizer_config.json,
 * chat_template.json), the variables a render gets (the set transformers'
 * apply_chat_template passes: messages, tools or None, documents=None,
 * add_generation_prompt, the special tokens, then the request's extra kwargs),
 * mapping interpreter errors to TS_E_* codes, and the stop ids of
 * generation_config.json / config.json.
 * Does not own: Jinja semantics (jinja.c), tokenization, what a frontend does
 * with a refused request.
 *
 * Requests are validated for shape with cJSON (messages must be a list, ...)
 * but their values reach the template through jinja.c's own JSON reader, which
 * keeps 1 and 1.0 apart as Python does. Tool-call arguments sent as a JSON
 * string (the OpenAI shape) reach it as the object they hold (args_rewrite).
 */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "text/jinja.h"
#include "ts_int.h"

struct ts_chat_template {
    tj_template *tpl;
    char *src;                     /* the text parsed (ts_chat_template_source) */
    char *eos, *pad, *bos, *unk;   /* NULL = None */
};

static int map_err(const tj_error *je, ts_error *err, const char *what) {
    switch (je->kind) {
    case TJ_RAISED: return ts_fail(err, TS_E_ARG, "%s", je->msg);
    case TJ_NOMEM: return ts_fail(err, TS_E_NOMEM, "%s: out of memory", what);
    case TJ_INPUT: return ts_fail(err, TS_E_FORMAT, "%s: %s", what, je->msg);
    case TJ_SYNTAX: return ts_fail(err, TS_E_FORMAT, "%s line %d: %s: %s", what, je->line, tj_kind_name(je->kind), je->msg);
    case TJ_UNSUPPORTED: return ts_fail(err, TS_E_UNSUPPORTED, "%s line %d: not supported: %s", what, je->line, je->msg);
    default: return ts_fail(err, TS_E_ARG, "%s line %d: %s: %s", what, je->line, tj_kind_name(je->kind), je->msg);
    }
}

static char *dup_or_null(const char *s) { return s ? ts_strdup(s, TS_MEM_MISC) : NULL; }

static int chat_new(const char *text, size_t len, ts_chat_template **out, ts_error *err) {
    *out = NULL;
    ts_chat_template *t = ts_alloc(sizeof *t, TS_MEM_MISC);
    if (!t) return ts_fail(err, TS_E_NOMEM, "out of memory");
    tj_error je;
    if (tj_parse(text, len, NULL, &t->tpl, &je) != 0) {
        ts_free(t);
        return map_err(&je, err, "chat template");
    }
    t->eos = dup_or_null("<|im_end|>");
    t->pad = dup_or_null("<|endoftext|>");
    if ((t->src = ts_alloc(len + 1, TS_MEM_MISC))) memcpy(t->src, text, len), t->src[len] = 0;
    if (!t->eos || !t->pad || !t->src) {
        ts_chat_template_free(t);
        return ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    *out = t;
    return TS_OK;
}

int ts_chat_template_parse(const char *text, size_t len, ts_chat_template **out, ts_error *err) {
    if (!text || !out) return ts_fail(err, TS_E_ARG, "ts_chat_template_parse: NULL argument");
    return chat_new(text, len, out, err);
}

void ts_chat_template_free(ts_chat_template *t) {
    if (!t) return;
    tj_template_free(t->tpl);
    ts_free(t->src);
    ts_free(t->eos);
    ts_free(t->pad);
    ts_free(t->bos);
    ts_free(t->unk);
    ts_free(t);
}

const char *ts_chat_template_eos(const ts_chat_template *t) { return t ? t->eos : NULL; }
const char *ts_chat_template_source(const ts_chat_template *t) { return t ? t->src : NULL; }
const char *ts_chat_template_token(const ts_chat_template *t, const char *name) {
    if (!t || !name) return NULL;
    return !strcmp(name, "eos_token") ? t->eos : !strcmp(name, "bos_token") ? t->bos
         : !strcmp(name, "pad_token") ? t->pad : !strcmp(name, "unk_token") ? t->unk : NULL;
}

/* A special token in tokenizer_config.json: a string, {"content": "..."} or null. */
static void set_token(char **slot, const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v) return;
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (cJSON_IsNull(v)) {
        ts_free(*slot);
        *slot = NULL;
    } else if (cJSON_IsString(v)) {
        char *s = ts_strdup(v->valuestring, TS_MEM_MISC);
        if (s) {
            ts_free(*slot);
            *slot = s;
        }
    }
}

/* Read dir/name as JSON; *out NULL when the file does not exist. */
static int read_json(const char *dir, const char *name, cJSON **out, ts_error *err) {
    char path[4096];
    ts_path_join(path, sizeof path, dir, name);
    *out = NULL;
    if (!ts_file_exists(path)) return TS_OK;
    char *text;
    size_t n;
    int rc = ts_read_file(path, &text, &n, err);
    if (rc) return rc;
    *out = cJSON_ParseWithLength(text, n);
    ts_free(text);
    if (!*out) return ts_fail(err, TS_E_FORMAT, "%s: malformed JSON", path);
    return TS_OK;
}

int ts_chat_template_load(const char *model_dir, ts_chat_template **out, ts_error *err) {
    if (!model_dir || !out) return ts_fail(err, TS_E_ARG, "ts_chat_template_load: NULL argument");
    *out = NULL;
    char path[4096];
    cJSON *cfg = NULL;
    int rc = read_json(model_dir, "tokenizer_config.json", &cfg, err);
    if (rc) return rc;
    ts_path_join(path, sizeof path, model_dir, "chat_template.jinja");
    if (ts_file_exists(path)) {
        char *text;
        size_t n;
        rc = ts_read_file(path, &text, &n, err);
        if (rc == 0) {
            rc = chat_new(text, n, out, err);
            if (rc) ts_fail_prefix(err, "%s", path);
            ts_free(text);
        }
    } else {
        const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
        cJSON *proc = NULL;
        const char *src_name = "tokenizer_config.json";
        if (!ct) {
            rc = read_json(model_dir, "chat_template.json", &proc, err);
            if (rc) { cJSON_Delete(cfg); return rc; }
            ct = proc ? cJSON_GetObjectItemCaseSensitive(proc, "chat_template") : NULL;
            src_name = "chat_template.json";
        }
        if (cJSON_IsArray(ct)) {
            /* named templates: "default", else the first */
            const cJSON *pick = NULL, *it;
            cJSON_ArrayForEach(it, ct) {
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
                if (!pick) pick = it;
                if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default")) { pick = it; break; }
            }
            ct = pick ? cJSON_GetObjectItemCaseSensitive(pick, "template") : NULL;
        }
        if (!cJSON_IsString(ct)) {
            rc = ts_fail(err, TS_E_IO, "%s has no chat template (no chat_template.jinja, no \"chat_template\" in tokenizer_config.json or chat_template.json)", model_dir);
        } else {
            rc = chat_new(ct->valuestring, strlen(ct->valuestring), out, err);
            if (rc) ts_fail_prefix(err, "%s/%s", model_dir, src_name);
        }
        cJSON_Delete(proc);
    }
    if (rc == 0 && cfg) {
        set_token(&(*out)->eos, cfg, "eos_token");
        set_token(&(*out)->pad, cfg, "pad_token");
        set_token(&(*out)->bos, cfg, "bos_token");
        set_token(&(*out)->unk, cfg, "unk_token");
    }
    cJSON_Delete(cfg);
    return rc;
}

static int bind_token(tj_vars *v, const char *name, const char *val) {
    return val ? tj_vars_set_string(v, name, val) : tj_vars_set_none(v, name);
}

/* Variables every render gets, before the request's own. */
static int base_vars(const ts_chat_template *t, tj_vars *v) {
    int rc = 0;
    rc |= tj_vars_set_none(v, "tools");
    rc |= tj_vars_set_none(v, "documents");
    rc |= bind_token(v, "eos_token", t->eos);
    rc |= bind_token(v, "pad_token", t->pad);
    rc |= bind_token(v, "bos_token", t->bos);
    rc |= bind_token(v, "unk_token", t->unk);
    return rc;
}

static int do_render(const ts_chat_template *t, tj_vars *v, char **out, size_t *out_len, ts_error *err) {
    tj_error je;
    char *text;
    size_t n;
    if (tj_render(t->tpl, v, &text, &n, &je) != 0) return map_err(&je, err, "chat template");
    *out = text;
    if (out_len) *out_len = n;
    return TS_OK;
}

static int check_json(const char *json, size_t len, int want_type, const char *what, ts_error *err) {
    cJSON *j = cJSON_ParseWithLength(json, len);
    if (!j) return ts_fail(err, TS_E_FORMAT, "%s: malformed JSON", what);
    int ok = (j->type & 0xff) == want_type || (want_type == cJSON_Array && cJSON_IsNull(j) && strcmp(what, "messages"));
    cJSON_Delete(j);
    if (!ok) return ts_fail(err, TS_E_ARG, "%s: expected a JSON %s", what, want_type == cJSON_Array ? "array" : "object");
    return TS_OK;
}

/* ---- tool-call arguments sent as JSON strings ----------------------------
 *
 * The OpenAI API (and every client) sends an assistant turn's
 * tool_calls[].function.arguments as a JSON *string*; the Qwen templates
 * iterate it as a mapping (arguments|items) and fail on a string. As other
 * servers do, a string that holds a JSON object is replaced by that object
 * before rendering, so the prompt is the one the template gives for the
 * object (the golden cases, tests/test_chat.c). A string that is not a JSON
 * object is kept as it was (the template decides: Qwen3's prints it as is,
 * Qwen3.5's refuses it with its own error).
 *
 * Done on the request's text, not on a parsed tree: the object's text is
 * spliced in verbatim, so 1 and 1.0 keep their spelling as everywhere else
 * in the request (jinja.c reads numbers as Python's json.loads does). The
 * scanner runs on text cJSON has already accepted, descends only along
 * messages[i].tool_calls[k](.function).arguments and skips everything else
 * without recursion. */

static const char *js_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* p at '"': the byte after the closing quote. */
static const char *js_str_end(const char *p, const char *e) {
    for (p++; p < e && *p != '"'; p++)
        if (*p == '\\') p++;
    return p < e ? p + 1 : e;
}

/* The byte after the value at p (any value; nesting counted, not recursed). */
static const char *js_skip(const char *p, const char *e) {
    if (p >= e) return e;
    if (*p == '"') return js_str_end(p, e);
    if (*p != '{' && *p != '[') {
        while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            p++;
        return p;
    }
    size_t depth = 0;
    while (p < e) {
        if (*p == '"') { p = js_str_end(p, e); continue; }
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') {
            if (--depth == 0) return p + 1;
        }
        p++;
    }
    return e;
}

/* Is the string literal [p, q) equal to key once unescaped? */
static int js_key_is(const char *p, const char *q, const char *key) {
    size_t k = strlen(key);
    if (!memchr(p, '\\', (size_t)(q - p))) return (size_t)(q - p) == k + 2 && !memcmp(p + 1, key, k);
    cJSON *j = cJSON_ParseWithLength(p, (size_t)(q - p));
    int eq = cJSON_IsString(j) && !strcmp(j->valuestring, key);
    cJSON_Delete(j);
    return eq;
}

/* Walk the members of the object at p: for each, the key and value ranges in *m; returns
 * the next position to pass back in (iterate while it returns non-NULL). */
typedef struct { const char *k, *ke, *v, *ve; } js_member;
static const char *js_next_member(const char *p, const char *e, js_member *m) {
    p = js_ws(p, e);
    if (p < e && (*p == '{' || *p == ',')) p = js_ws(p + 1, e);
    if (p >= e || *p != '"') return NULL;
    m->k = p;
    m->ke = js_str_end(p, e);
    p = js_ws(m->ke, e);
    if (p >= e || *p != ':') return NULL;
    m->v = js_ws(p + 1, e);
    m->ve = js_skip(m->v, e);
    return m->ve;
}

/* Elements of the array at p, the same way. A value of no bytes (a stray
 * '}' or control byte where an element should be: malformed JSON, which
 * cJSON refuses later) ends the walk: without that the next call would
 * start where this one did, forever (found by fuzz_server). */
static const char *js_next_elem(const char *p, const char *e, const char **v, const char **ve) {
    p = js_ws(p, e);
    if (p < e && (*p == '[' || *p == ',')) p = js_ws(p + 1, e);
    if (p >= e || *p == ']') return NULL;
    *v = p;
    *ve = js_skip(p, e);
    return *ve > p ? *ve : NULL;
}

typedef struct {
    const char *from, *to; /* the string literal replaced */
    char *with;            /* its decoded text (malloc'd by cJSON) */
} js_splice;

typedef struct {
    js_splice *v;
    size_t n, cap;
    int nomem;
} js_splices;

/* If the literal [p, q) holds a JSON object, note the splice. */
static void args_string(js_splices *sp, const char *p, const char *q) {
    if (*p != '"') return;
    /* \u0000 would cut cJSON's C string short: keep such a string */
    for (const char *c = p; c + 6 <= q; c++)
        if (c[0] == '\\' && c[1] == 'u' && c[2] == '0' && c[3] == '0' && c[4] == '0' && c[5] == '0') return;
    cJSON *lit = cJSON_ParseWithLength(p, (size_t)(q - p));
    if (!cJSON_IsString(lit)) { cJSON_Delete(lit); return; }
    const char *txt = lit->valuestring, *end = NULL;
    size_t tl = strlen(txt);
    cJSON *obj = cJSON_ParseWithLengthOpts(txt, tl, &end, 0);
    int ok = cJSON_IsObject(obj) && end && js_ws(end, txt + tl) == txt + tl;
    cJSON_Delete(obj);
    if (ok && sp->n == sp->cap) {
        size_t cap = sp->cap ? 2 * sp->cap : 8;
        js_splice *v = realloc(sp->v, cap * sizeof *v);
        if (!v) { sp->nomem = 1; ok = 0; }
        else { sp->v = v; sp->cap = cap; }
    }
    if (ok) {
        sp->v[sp->n].from = p;
        sp->v[sp->n].to = q;
        sp->v[sp->n].with = lit->valuestring;
        lit->valuestring = NULL; /* taken: cJSON_Delete skips a NULL valuestring */
        sp->n++;
    }
    cJSON_Delete(lit);
}

static void args_in_messages(js_splices *sp, const char *p, const char *e) {
    const char *m, *me;
    if (p >= e || *p != '[') return;
    for (const char *it = p; (it = js_next_elem(it, e, &m, &me));) {
        if (*m != '{') continue;
        js_member mm;
        for (const char *jt = m; (jt = js_next_member(jt, e, &mm));) {
            if (!js_key_is(mm.k, mm.ke, "tool_calls") || *mm.v != '[') continue;
            const char *c, *ce;
            for (const char *kt = mm.v; (kt = js_next_elem(kt, e, &c, &ce));) {
                if (*c != '{') continue;
                js_member cm;
                for (const char *lt = c; (lt = js_next_member(lt, e, &cm));) {
                    if (js_key_is(cm.k, cm.ke, "arguments")) args_string(sp, cm.v, cm.ve);
                    if (!js_key_is(cm.k, cm.ke, "function") || *cm.v != '{') continue;
                    js_member fm;
                    for (const char *ft = cm.v; (ft = js_next_member(ft, e, &fm));)
                        if (js_key_is(fm.k, fm.ke, "arguments")) args_string(sp, fm.v, fm.ve);
                }
            }
        }
    }
}

/* json with string arguments replaced: *out is NULL when nothing changes
 * (use json as it is), else a malloc'd text of *out_len bytes. is_request:
 * json is the request object (messages is its member), else the array. */
static int args_rewrite(const char *json, size_t len, int is_request, char **out, size_t *out_len, ts_error *err) {
    *out = NULL;
    const char *e = json + len, *p = js_ws(json, e);
    js_splices sp = {0};
    if (!is_request) args_in_messages(&sp, p, e);
    else if (p < e && *p == '{') {
        js_member mm;
        for (const char *it = p; (it = js_next_member(it, e, &mm));)
            if (js_key_is(mm.k, mm.ke, "messages")) args_in_messages(&sp, mm.v, mm.ve);
    }
    int rc = TS_OK;
    if (sp.nomem) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    else if (sp.n) {
        size_t n = len;
        for (size_t i = 0; i < sp.n; i++) n = n - (size_t)(sp.v[i].to - sp.v[i].from) + strlen(sp.v[i].with);
        char *o = malloc(n + 1);
        if (!o) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
        else {
            const char *at = json;
            size_t w = 0;
            for (size_t i = 0; i < sp.n; i++) {
                memcpy(o + w, at, (size_t)(sp.v[i].from - at));
                w += (size_t)(sp.v[i].from - at);
                size_t k = strlen(sp.v[i].with);
                memcpy(o + w, sp.v[i].with, k);
                w += k;
                at = sp.v[i].to;
            }
            memcpy(o + w, at, (size_t)(e - at));
            w += (size_t)(e - at);
            o[w] = 0;
            *out = o;
            *out_len = w;
        }
    }
    for (size_t i = 0; i < sp.n; i++) cJSON_free(sp.v[i].with);
    free(sp.v);
    return rc;
}

int ts_chat_render(const ts_chat_template *t, const ts_chat_request *req, char **out, size_t *out_len, ts_error *err) {
    if (!t || !req || !out || !req->messages_json) return ts_fail(err, TS_E_ARG, "ts_chat_render: NULL argument");
    *out = NULL;
    int rc = check_json(req->messages_json, strlen(req->messages_json), cJSON_Array, "messages", err);
    if (!rc && req->tools_json) rc = check_json(req->tools_json, strlen(req->tools_json), cJSON_Array, "tools", err);
    if (!rc && req->kwargs_json) rc = check_json(req->kwargs_json, strlen(req->kwargs_json), cJSON_Object, "kwargs", err);
    if (rc) return rc;
    char *msgs = NULL;
    size_t msgs_len = 0;
    if ((rc = args_rewrite(req->messages_json, strlen(req->messages_json), 0, &msgs, &msgs_len, err))) return rc;
    const char *mj = msgs ? msgs : req->messages_json;
    tj_vars *v = tj_vars_new();
    if (!v) { free(msgs); return ts_fail(err, TS_E_NOMEM, "out of memory"); }
    tj_error je;
    if (base_vars(t, v) ||
        tj_vars_set_json(v, "messages", mj, msgs ? msgs_len : strlen(mj), &je) ||
        (req->tools_json && tj_vars_set_json(v, "tools", req->tools_json, strlen(req->tools_json), &je)) ||
        tj_vars_set_bool(v, "add_generation_prompt", req->add_generation_prompt) ||
        (req->kwargs_json && tj_vars_set_json_members(v, req->kwargs_json, strlen(req->kwargs_json), &je))) {
        tj_vars_free(v);
        free(msgs);
        return map_err(&je, err, "chat request");
    }
    free(msgs);
    rc = do_render(t, v, out, out_len, err);
    tj_vars_free(v);
    return rc;
}

int ts_chat_render_json(const ts_chat_template *t, const char *json, size_t len, char **out, size_t *out_len, ts_error *err) {
    if (!t || !json || !out) return ts_fail(err, TS_E_ARG, "ts_chat_render_json: NULL argument");
    *out = NULL;
    cJSON *j = cJSON_ParseWithLength(json, len);
    if (!j) return ts_fail(err, TS_E_FORMAT, "chat request: malformed JSON");
    int rc = TS_OK;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(j, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(j, "tools");
    const cJSON *agp = cJSON_GetObjectItemCaseSensitive(j, "add_generation_prompt");
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(j, "chat_template_kwargs");
    if (!cJSON_IsObject(j)) rc = ts_fail(err, TS_E_ARG, "chat request: expected a JSON object");
    else if (!cJSON_IsArray(msgs)) rc = ts_fail(err, TS_E_ARG, "chat request: \"messages\" must be an array");
    else if (tools && !cJSON_IsArray(tools) && !cJSON_IsNull(tools)) rc = ts_fail(err, TS_E_ARG, "chat request: \"tools\" must be an array or null");
    else if (agp && !cJSON_IsBool(agp)) rc = ts_fail(err, TS_E_ARG, "chat request: \"add_generation_prompt\" must be true or false");
    else if (kw && !cJSON_IsObject(kw) && !cJSON_IsNull(kw)) rc = ts_fail(err, TS_E_ARG, "chat request: \"chat_template_kwargs\" must be an object");
    int add_gen = agp ? cJSON_IsTrue(agp) : 1;
    int has_kw = kw && cJSON_IsObject(kw);
    cJSON_Delete(j);
    if (rc) return rc;

    char *rew = NULL;
    size_t rew_len = 0;
    if ((rc = args_rewrite(json, len, 1, &rew, &rew_len, err))) return rc;
    if (rew) {
        json = rew;
        len = rew_len;
    }
    tj_vars *v = tj_vars_new();
    if (!v) { free(rew); return ts_fail(err, TS_E_NOMEM, "out of memory"); }
    tj_error je;
    if (base_vars(t, v) || tj_vars_set_json_member(v, "messages", json, len, "messages", &je) < 0 ||
        tj_vars_set_json_member(v, "tools", json, len, "tools", &je) < 0 ||
        tj_vars_set_bool(v, "add_generation_prompt", add_gen)) {
        tj_vars_free(v);
        free(rew);
        return map_err(&je, err, "chat request");
    }
    rc = TS_OK;
    if (has_kw && tj_vars_spread_json_member(v, json, len, "chat_template_kwargs", &je) < 0)
        rc = map_err(&je, err, "chat request");
    free(rew);
    if (!rc) rc = do_render(t, v, out, out_len, err);
    tj_vars_free(v);
    return rc;
}

void ts_chat_text_free(char *text) { ts_free(text); }

/* Append eos ids of one JSON node (int or list) without duplicates. */
#define MAX_STOP_IDS 64
static void add_ids(const cJSON *node, int32_t *ids, int *n) {
    const cJSON *it;
    if (!node) return;
    if (cJSON_IsNumber(node)) {
        if (node->valuedouble < 0 || node->valuedouble > 2147483647.0) return;
        int32_t id = (int32_t)node->valuedouble;
        for (int i = 0; i < *n; i++)
            if (ids[i] == id) return;
        if (*n < MAX_STOP_IDS) ids[(*n)++] = id;
        return;
    }
    if (cJSON_IsArray(node)) cJSON_ArrayForEach(it, node) if (cJSON_IsNumber(it)) add_ids(it, ids, n);
}

int ts_chat_stop_ids(const char *model_dir, int32_t *ids, int cap, ts_error *err) {
    if (!model_dir || (cap > 0 && !ids)) return ts_fail(err, TS_E_ARG, "ts_chat_stop_ids: NULL argument");
    int32_t all[MAX_STOP_IDS];
    int n = 0;
    static const char *const files[] = {"generation_config.json", "config.json"};
    for (int f = 0; f < 2; f++) {
        cJSON *j;
        int rc = read_json(model_dir, files[f], &j, err);
        if (rc) return rc;
        if (!j) continue;
        add_ids(cJSON_GetObjectItemCaseSensitive(j, "eos_token_id"), all, &n);
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "text_config");
        if (tc) add_ids(cJSON_GetObjectItemCaseSensitive(tc, "eos_token_id"), all, &n);
        cJSON_Delete(j);
    }
    for (int i = 0; i < n && i < cap; i++) ids[i] = all[i];
    return n;
}
