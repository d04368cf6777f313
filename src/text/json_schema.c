/* json_schema.c: compiling a JSON Schema (json_schema.h).
 *
 * The text is checked first by the RFC 8259 recognizer (json_fsm.c: strict
 * JSON, valid UTF-8, its nesting bounded) and only then parsed by cJSON.
 * Subschemas are compiled from a worklist, not by recursion: a node id is
 * handed out the first time a subschema is seen (memoized by its cJSON
 * object, after following $ref and one-element allOf), so recursion
 * through $ref is a cycle in the node graph and the C stack never depends
 * on the schema. Then the anyOf nodes get their flattened leaves (nested
 * anyOf opened, enums merged into one), and a least fixpoint checks that
 * every node can be completed by some finite value (so the recognizer has
 * no dead ends).
 */
#include "text/json_schema.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "text/json_fsm.h"

#define PATH_MAX_CHARS 400

typedef struct comp {
    ts_schema *s;
    ts_error *err;
    const cJSON *root;
    int cap_nodes, cap_props, cap_lits, cap_alts;
    size_t cap_bytes;
    char **paths;            /* [cap_nodes] each node's JSON path (errors) */
    const cJSON **memo_obj;  /* [cap_nodes] the (resolved) subschema of node i */
    int32_t *raw_alt;        /* anyOf children before flattening */
    int n_raw, cap_raw;
    int32_t *raw_alt0, *raw_n; /* [cap_nodes] */
    int queue_head;          /* nodes [queue_head, n_nodes) wait to be compiled */
} comp;

/* ---- growing arrays (through the counted allocator) ---- */

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *q = ts_alloc(elem * (size_t)nc, TS_MEM_MISC);
    if (!q) return TS_E_NOMEM;
    if (*p) memcpy(q, *p, elem * (size_t)*cap);
    ts_free(*p);
    *p = q;
    *cap = nc;
    return 0;
}

static int nomem(comp *c) { return ts_fail(c->err, TS_E_NOMEM, "JSON schema: out of memory compiling the schema"); }

/* ---- paths: JSON pointers, "#/properties/a~1b" ---- */

static void path_join(char *out, const char *base, const char *seg, int index) {
    char tmp[64];
    if (!seg) snprintf(tmp, sizeof tmp, "%d", index), seg = tmp;
    size_t n = strlen(base);
    if (n >= PATH_MAX_CHARS) { /* keep the front, mark the cut */
        memcpy(out, base, PATH_MAX_CHARS + 1);
        return;
    }
    memcpy(out, base, n);
    out[n++] = '/';
    for (const char *p = seg; *p && n + 2 < PATH_MAX_CHARS; p++) {
        if (*p == '~' || *p == '/') out[n++] = '~', out[n++] = *p == '~' ? '0' : '1';
        else out[n++] = *p;
    }
    if (n + 2 >= PATH_MAX_CHARS) memcpy(out + n - 3, "...", 3);
    out[n] = 0;
}

/* ---- keyword tables ---- */

static const char *const DESCRIPTIVE[] = {"title",      "description", "examples", "default",  "$schema", "$id",
                                          "$comment",   "deprecated",  "readOnly", "writeOnly", "strict",  "$defs",
                                          "definitions", NULL};
static const char *const SUPPORTED[] = {"type",     "properties", "required",  "additionalProperties",
                                        "items",    "minItems",   "maxItems",  "minLength",
                                        "maxLength", "enum",      "const",     "anyOf",
                                        "oneOf",    "allOf",      "$ref",      "uniqueItems",
                                        NULL};

static int in_list(const char *k, const char *const *l) {
    for (; *l; l++)
        if (!strcmp(k, *l)) return 1;
    return 0;
}

/* Why a known JSON Schema keyword is refused, for the message. */
static const char *why_not(const char *k) {
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};
    if (in_list(k, num)) return "numeric bounds are not enforced";
    if (!strcmp(k, "pattern") || !strcmp(k, "patternProperties")) return "regular expressions are not enforced";
    if (!strcmp(k, "format")) return "formats are not enforced";
    if (!strcmp(k, "nullable")) return "not JSON Schema (OpenAPI); write \"type\": [\"...\", \"null\"]";
    if (!strcmp(k, "prefixItems") || !strcmp(k, "additionalItems")) return "tuples are not supported";
    if (!strcmp(k, "not") || !strcmp(k, "if") || !strcmp(k, "then") || !strcmp(k, "else"))
        return "negation and conditionals are not supported";
    return "the constraint cannot enforce it";
}

/* ---- literals: one written form of a value ---- */

typedef struct sb {
    comp *c;
    uint8_t *p;
    size_t n, cap;
    int bad;
} sb;

static void sb_put(sb *b, const void *s, size_t n) {
    if (b->bad) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n) nc *= 2;
        uint8_t *q = ts_alloc(nc, TS_MEM_MISC);
        if (!q) { b->bad = 1; return; }
        if (b->n) memcpy(q, b->p, b->n);
        ts_free(b->p);
        b->p = q, b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

/* A string with the escapes JSON requires and no other (what a model is most
 * likely to write, and one form: the literal is matched byte for byte). */
static void sb_string(sb *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const uint8_t *p = (const uint8_t *)s; *p; p++) {
        char e[8];
        switch (*p) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        default:
            if (*p < 0x20) snprintf(e, sizeof e, "\\u%04x", *p), sb_put(b, e, 6);
            else sb_put(b, p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* The shortest %g form that reads back as the same double. */
static void fmt_number(double v, char *out, size_t cap) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

static int ser(comp *c, const cJSON *v, sb *b, const char *path) {
    if (cJSON_IsNull(v)) sb_put(b, "null", 4);
    else if (cJSON_IsTrue(v)) sb_put(b, "true", 4);
    else if (cJSON_IsFalse(v)) sb_put(b, "false", 5);
    else if (cJSON_IsNumber(v)) {
        const double d = v->valuedouble;
        if (d == floor(d) && fabs(d) >= 9007199254740992.0)
            return ts_fail(c->err, TS_E_ARG,
                           "JSON schema: the number %.17g at %s is beyond 2^53: its written form cannot be matched exactly",
                           d, path);
        char t[40];
        fmt_number(d, t, sizeof t);
        sb_put(b, t, strlen(t));
    } else if (cJSON_IsString(v)) sb_string(b, v->valuestring);
    else if (cJSON_IsArray(v)) {
        sb_put(b, "[", 1);
        int i = 0;
        for (const cJSON *x = v->child; x; x = x->next, i++) {
            if (i) sb_put(b, ",", 1);
            if (ser(c, x, b, path)) return TS_E_ARG;
        }
        sb_put(b, "]", 1);
    } else if (cJSON_IsObject(v)) {
        sb_put(b, "{", 1);
        int i = 0;
        for (const cJSON *x = v->child; x; x = x->next, i++) {
            if (i) sb_put(b, ",", 1);
            sb_string(b, x->string);
            sb_put(b, ":", 1);
            if (ser(c, x, b, path)) return TS_E_ARG;
        }
        sb_put(b, "}", 1);
    }
    return 0;
}

/* Append a literal; its index, or -1 (out of memory: the error is set). */
static int add_lit(comp *c, const uint8_t *p, size_t n) {
    ts_schema *s = c->s;
    if (grow((void **)&s->lits, &c->cap_lits, s->n_lits + 1, sizeof(ts_slit))) return nomem(c), -1;
    if (s->n_bytes + n > c->cap_bytes) {
        size_t nc = c->cap_bytes ? c->cap_bytes * 2 : 1024;
        while (nc < s->n_bytes + n) nc *= 2;
        uint8_t *q = ts_alloc(nc, TS_MEM_MISC);
        if (!q) return nomem(c), -1;
        if (s->n_bytes) memcpy(q, s->bytes, s->n_bytes);
        ts_free(s->bytes);
        s->bytes = q, c->cap_bytes = nc;
    }
    memcpy(s->bytes + s->n_bytes, p, n);
    s->lits[s->n_lits] = (ts_slit){(uint32_t)s->n_bytes, (uint32_t)n};
    s->n_bytes += n;
    return s->n_lits++;
}

static int lit_eq(const ts_schema *s, int a, int b) {
    return s->lits[a].len == s->lits[b].len &&
           !memcmp(s->bytes + s->lits[a].off, s->bytes + s->lits[b].off, s->lits[a].len);
}

/* ---- nodes ---- */

static int new_node(comp *c, const cJSON *obj, const char *path) {
    ts_schema *s = c->s;
    if (s->n_nodes >= TS_SCHEMA_MAX_NODES)
        return ts_fail(c->err, TS_E_ARG, "JSON schema: more than %d subschemas (at %s)", TS_SCHEMA_MAX_NODES, path), -1;
    if (s->n_nodes == c->cap_nodes) { /* the node arrays grow together */
        int cap = c->cap_nodes, k = cap;
        if (grow((void **)&s->nodes, &k, cap + 1, sizeof(ts_snode))) return nomem(c), -1;
        k = cap;
        if (grow((void **)&c->paths, &k, cap + 1, sizeof(char *))) return nomem(c), -1;
        k = cap;
        if (grow((void **)&c->memo_obj, &k, cap + 1, sizeof(cJSON *))) return nomem(c), -1;
        k = cap;
        if (grow((void **)&c->raw_alt0, &k, cap + 1, sizeof(int32_t))) return nomem(c), -1;
        k = cap;
        if (grow((void **)&c->raw_n, &k, cap + 1, sizeof(int32_t))) return nomem(c), -1;
        c->cap_nodes = k;
    }
    const int id = s->n_nodes++;
    ts_snode *n = &s->nodes[id];
    memset(n, 0, sizeof *n);
    n->max_len = n->max_items = TS_SCHEMA_UNBOUNDED;
    n->items = n->extra = -1;
    c->memo_obj[id] = obj;
    c->raw_n[id] = 0;
    if (!(c->paths[id] = ts_strdup(path, TS_MEM_MISC))) return nomem(c), -1;
    return id;
}

/* The node of any value: every type, any items, any values of free keys. */
static int any_node(comp *c) {
    if (c->s->any >= 0) return c->s->any;
    const int id = new_node(c, NULL, "#");
    if (id < 0) return -1;
    ts_snode *n = &c->s->nodes[id];
    n->types = TS_ST_ALL;
    n->items = n->extra = id;
    c->s->any = id;
    return id;
}

/* A JSON pointer inside the document ("#", "#/a/b~1c"). */
static const cJSON *resolve_ref(comp *c, const char *ref, const char *path) {
    if (ref[0] != '#') {
        ts_fail(c->err, TS_E_ARG, "JSON schema: $ref '%.200s' at %s is not a local reference (only \"#...\" into the schema)",
                ref, path);
        return NULL;
    }
    if (strchr(ref, '%')) {
        ts_fail(c->err, TS_E_ARG, "JSON schema: $ref '%.200s' at %s is percent-encoded, which is not supported", ref, path);
        return NULL;
    }
    const cJSON *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        ts_fail(c->err, TS_E_ARG, "JSON schema: $ref '%.200s' at %s is not a JSON pointer (anchors are not supported)", ref,
                path);
        return NULL;
    }
    char seg[512];
    while (*p == '/') {
        p++;
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~') {
                if (*p == '0') ch = '~';
                else if (*p == '1') ch = '/';
                else {
                    ts_fail(c->err, TS_E_ARG, "JSON schema: $ref '%.200s' at %s has a bad escape ('~' not followed by 0 or 1)",
                            ref, path);
                    return NULL;
                }
                p++;
            }
            if (n + 1 >= sizeof seg) {
                ts_fail(c->err, TS_E_ARG, "JSON schema: $ref '%.200s' at %s has a segment over %zu bytes", ref, path,
                        sizeof seg - 1);
                return NULL;
            }
            seg[n++] = ch;
        }
        seg[n] = 0;
        const cJSON *next = NULL;
        if (cJSON_IsObject(cur)) next = cJSON_GetObjectItemCaseSensitive(cur, seg);
        else if (cJSON_IsArray(cur)) {
            char *end;
            long i = strtol(seg, &end, 10);
            if (n && !*end && i >= 0 && (seg[0] != '0' || n == 1)) next = cJSON_GetArrayItem(cur, (int)i);
        }
        if (!next) {
            ts_fail(c->err, TS_E_ARG, "JSON schema: $ref '%.200s' at %s points to nothing (no '%.100s')", ref, path, seg);
            return NULL;
        }
        cur = next;
    }
    return cur;
}

static int only_descriptive_besides(comp *c, const cJSON *obj, const char *kw, const char *path) {
    for (const cJSON *k = obj->child; k; k = k->next)
        if (strcmp(k->string, kw) && !in_list(k->string, DESCRIPTIVE)) {
            if (!in_list(k->string, SUPPORTED))
                return ts_fail(c->err, TS_E_ARG, "JSON schema: '%.100s' at %s is not supported (%s)", k->string, path,
                               why_not(k->string));
            return ts_fail(c->err, TS_E_ARG,
                           "JSON schema: '%s' at %s alongside '%.100s' is not supported (move '%.100s' into the %s)", kw,
                           path, k->string, k->string,
                           !strcmp(kw, "$ref") ? "referenced schema" : "alternatives");
        }
    return 0;
}

/* Follow $ref and one-element allOf to the subschema they stand for; *path
 * becomes that subschema's. NULL with the error set. */
static const cJSON *resolve_alias(comp *c, const cJSON *obj, char *path) {
    for (int hops = 0;; hops++) {
        if (hops > TS_SCHEMA_MAX_NODES) {
            ts_fail(c->err, TS_E_ARG, "JSON schema: $ref at %s refers to itself without a schema in between", path);
            return NULL;
        }
        if (!cJSON_IsObject(obj)) return obj;
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(obj, "$ref");
        const cJSON *all = cJSON_GetObjectItemCaseSensitive(obj, "allOf");
        if (ref) {
            if (!cJSON_IsString(ref)) {
                ts_fail(c->err, TS_E_ARG, "JSON schema: $ref at %s must be a string", path);
                return NULL;
            }
            if (only_descriptive_besides(c, obj, "$ref", path)) return NULL;
            const cJSON *t = resolve_ref(c, ref->valuestring, path);
            if (!t) return NULL;
            snprintf(path, PATH_MAX_CHARS + 1, "%s", ref->valuestring);
            obj = t;
        } else if (all) {
            if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) != 1) {
                ts_fail(c->err, TS_E_ARG, "JSON schema: allOf at %s %s", path,
                        cJSON_IsArray(all) ? "of more than one subschema is not supported (only allOf of one)"
                                           : "must be an array of subschemas");
                return NULL;
            }
            if (only_descriptive_besides(c, obj, "allOf", path)) return NULL;
            char tmp[PATH_MAX_CHARS + 1];
            path_join(tmp, path, "allOf", 0);
            path_join(path, tmp, NULL, 0);
            obj = all->child;
        } else return obj;
    }
}

/* The node of a subschema: memoized; a new one waits on the worklist. */
static int get_node(comp *c, const cJSON *obj, const char *path_in) {
    char path[PATH_MAX_CHARS + 1];
    snprintf(path, sizeof path, "%s", path_in);
    if (!(obj = resolve_alias(c, obj, path))) return -1;
    if (cJSON_IsTrue(obj)) return any_node(c);
    for (int i = 0; i < c->s->n_nodes; i++)
        if (c->memo_obj[i] == obj) return i;
    if (cJSON_IsFalse(obj))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: false at %s: no value is valid there", path), -1;
    if (!cJSON_IsObject(obj))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: the subschema at %s must be an object or a boolean", path), -1;
    return new_node(c, obj, path);
}

static int get_count(comp *c, const cJSON *obj, const char *kw, const char *path, uint32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, kw);
    if (!v) return 0;
    const double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(d >= 0 && d == floor(d) && d < (double)TS_SCHEMA_UNBOUNDED))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: '%s' at %s must be an integer from 0 to %u", kw, path,
                       TS_SCHEMA_UNBOUNDED - 1);
    *out = (uint32_t)d;
    return 0;
}

static int type_bit(const char *t) {
    static const char *const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

static int parse_type(comp *c, const cJSON *t, const char *path, uint8_t *out) {
    *out = 0;
    if (cJSON_IsString(t)) {
        if (!(*out = (uint8_t)type_bit(t->valuestring)))
            return ts_fail(c->err, TS_E_ARG, "JSON schema: type '%.100s' at %s is not a JSON Schema type", t->valuestring,
                           path);
        return 0;
    }
    if (!cJSON_IsArray(t) || !t->child)
        return ts_fail(c->err, TS_E_ARG, "JSON schema: 'type' at %s must be a type name or a non-empty list of them", path);
    for (const cJSON *x = t->child; x; x = x->next) {
        const int b = cJSON_IsString(x) ? type_bit(x->valuestring) : 0;
        if (!b)
            return ts_fail(c->err, TS_E_ARG, "JSON schema: 'type' at %s lists %s, not a JSON Schema type", path,
                           cJSON_IsString(x) ? x->valuestring : "a non-string");
        *out |= (uint8_t)b;
    }
    return 0;
}

/* The type bits a value has (an integral number is also an integer). */
static int value_types(const cJSON *v) {
    if (cJSON_IsNull(v)) return TS_ST_NULL;
    if (cJSON_IsBool(v)) return TS_ST_BOOL;
    if (cJSON_IsNumber(v)) return TS_ST_NUM | (v->valuedouble == floor(v->valuedouble) ? TS_ST_INT : 0);
    if (cJSON_IsString(v)) return TS_ST_STR;
    if (cJSON_IsArray(v)) return TS_ST_ARR;
    return TS_ST_OBJ;
}

static int compile_enum(comp *c, int id, const cJSON *obj, const char *path) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(obj, "enum"), *co = cJSON_GetObjectItemCaseSensitive(obj, "const");
    if (en && co) return ts_fail(c->err, TS_E_ARG, "JSON schema: both 'enum' and 'const' at %s (keep one)", path);
    if (en && (!cJSON_IsArray(en) || !en->child))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: 'enum' at %s must be a non-empty array", path);
    uint8_t types = TS_ST_ALL;
    for (const cJSON *k = obj->child; k; k = k->next) {
        if (!strcmp(k->string, "enum") || !strcmp(k->string, "const") || in_list(k->string, DESCRIPTIVE)) continue;
        if (!strcmp(k->string, "type")) {
            if (parse_type(c, k, path, &types)) return TS_E_ARG;
            continue;
        }
        return ts_fail(c->err, TS_E_ARG, "JSON schema: '%.100s' at %s alongside '%s' is not supported (%s)", k->string, path,
                       en ? "enum" : "const", in_list(k->string, SUPPORTED) ? "an enum lists its values" : why_not(k->string));
    }
    /* integer in `type` admits integral numbers; number admits all */
    const int want = types & TS_ST_NUM ? types | TS_ST_INT : types;
    ts_snode *n = &c->s->nodes[id];
    n->kind = TS_SK_ENUM;
    n->lit0 = (uint32_t)c->s->n_lits;
    sb b = {c, NULL, 0, 0, 0};
    int rc = 0;
    for (const cJSON *v = en ? en->child : co; v && !rc; v = en ? v->next : NULL) {
        if (!(value_types(v) & want)) continue;
        b.n = 0;
        if ((rc = ser(c, v, &b, path))) break;
        if (b.bad) { rc = nomem(c); break; }
        const int l = add_lit(c, b.p, b.n);
        if (l < 0) { rc = TS_E_NOMEM; break; }
        for (uint32_t j = n->lit0; j < (uint32_t)l; j++)
            if (lit_eq(c->s, (int)j, l)) { c->s->n_lits--, c->s->n_bytes -= b.n; break; } /* a repeat */
    }
    ts_free(b.p);
    if (rc) return rc;
    n = &c->s->nodes[id];
    n->n_lits = (uint32_t)c->s->n_lits - n->lit0;
    if (!n->n_lits)
        return ts_fail(c->err, TS_E_ARG, "JSON schema: '%s' at %s has no value of its 'type'", en ? "enum" : "const", path);
    return 0;
}

static int compile_anyof(comp *c, int id, const cJSON *obj, const char *path) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, "anyOf"), *o = cJSON_GetObjectItemCaseSensitive(obj, "oneOf");
    if (a && o) return ts_fail(c->err, TS_E_ARG, "JSON schema: both 'anyOf' and 'oneOf' at %s (keep one)", path);
    const char *kw = a ? "anyOf" : "oneOf";
    const cJSON *l = a ? a : o;
    if (!cJSON_IsArray(l) || !l->child)
        return ts_fail(c->err, TS_E_ARG, "JSON schema: '%s' at %s must be a non-empty array of subschemas", kw, path);
    if (only_descriptive_besides(c, obj, kw, path)) return TS_E_ARG;
    char kp[PATH_MAX_CHARS + 1], cp[PATH_MAX_CHARS + 1];
    path_join(kp, path, kw, 0);
    const int k0 = c->n_raw;
    int i = 0;
    for (const cJSON *x = l->child; x; x = x->next, i++) {
        path_join(cp, kp, NULL, i);
        const int child = get_node(c, x, cp);
        if (child < 0) return TS_E_ARG;
        if (grow((void **)&c->raw_alt, &c->cap_raw, c->n_raw + 1, sizeof(int32_t))) return nomem(c);
        c->raw_alt[c->n_raw++] = child;
    }
    c->s->nodes[id].kind = TS_SK_ANYOF;
    c->raw_alt0[id] = k0;
    c->raw_n[id] = c->n_raw - k0;
    return 0;
}

static int compile_object(comp *c, int id, const cJSON *obj, const char *path) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(obj, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(obj, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(obj, "additionalProperties");
    ts_schema *s = c->s;
    char pp[PATH_MAX_CHARS + 1], cp[PATH_MAX_CHARS + 1];
    if (props && !cJSON_IsObject(props))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: 'properties' at %s must be an object", path);
    const int n_props = props ? cJSON_GetArraySize(props) : 0;
    if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: 'additionalProperties' at %s must be a boolean or a schema", path);
    if (n_props && add && !cJSON_IsFalse(add))
        return ts_fail(c->err, TS_E_ARG,
                       "JSON schema: 'additionalProperties' at %s beside 'properties' must be false (keys other than the "
                       "listed properties are not supported; without it only they are allowed)",
                       path);
    if (req && (!cJSON_IsArray(req)))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: 'required' at %s must be an array of property names", path);
    /* the properties, contiguous, with their keys as literals */
    const uint32_t prop0 = (uint32_t)s->n_props, plit0 = (uint32_t)s->n_lits;
    if (grow((void **)&s->props, &c->cap_props, s->n_props + n_props, sizeof(ts_sprop))) return nomem(c);
    path_join(pp, path, "properties", 0);
    sb b = {c, NULL, 0, 0, 0};
    int i = 0, rc = 0;
    for (const cJSON *x = props ? props->child : NULL; x; x = x->next, i++) {
        for (const cJSON *y = props->child; y != x; y = y->next)
            if (!strcmp(y->string, x->string)) {
                ts_free(b.p);
                return ts_fail(c->err, TS_E_ARG, "JSON schema: property '%.100s' twice in 'properties' at %s", x->string,
                               path);
            }
        b.n = 0;
        sb_string(&b, x->string);
        if (b.bad || add_lit(c, b.p, b.n) < 0) { rc = b.bad ? nomem(c) : TS_E_NOMEM; break; }
        path_join(cp, pp, x->string, 0);
        const int child = get_node(c, x, cp);
        if (child < 0) { rc = TS_E_ARG; break; }
        s->props[prop0 + i] = (ts_sprop){child, (uint32_t)n_props};
    }
    ts_free(b.p);
    if (rc) return rc;
    s->n_props += n_props;
    /* required: names of properties, each once */
    uint8_t *is_req = n_props ? ts_alloc((size_t)n_props, TS_MEM_MISC) : NULL;
    if (n_props && !is_req) return nomem(c);
    for (const cJSON *r = req ? req->child : NULL; r && !rc; r = r->next) {
        if (!cJSON_IsString(r)) {
            rc = ts_fail(c->err, TS_E_ARG, "JSON schema: 'required' at %s must list property names (strings)", path);
            break;
        }
        int k = 0;
        const cJSON *x = props ? props->child : NULL;
        for (; x && strcmp(x->string, r->valuestring); x = x->next) k++;
        if (!x)
            rc = ts_fail(c->err, TS_E_ARG,
                         "JSON schema: 'required' at %s names '%.100s', which is not in its 'properties' (keys other "
                         "than the listed properties are not supported)",
                         path, r->valuestring);
        else if (is_req[k])
            rc = ts_fail(c->err, TS_E_ARG, "JSON schema: 'required' at %s names '%.100s' twice", path, r->valuestring);
        else is_req[k] = 1;
    }
    if (!rc)
        for (int k = n_props - 1, next = n_props; k >= 0; k--) {
            if (is_req[k]) next = k;
            s->props[prop0 + k].req_from = (uint32_t)next;
        }
    ts_free(is_req);
    if (rc) return rc;
    int extra = -1;
    if (!n_props && !cJSON_IsFalse(add)) {
        path_join(cp, path, "additionalProperties", 0);
        extra = add && !cJSON_IsTrue(add) ? get_node(c, add, cp) : any_node(c);
        if (extra < 0) return TS_E_ARG;
    }
    ts_snode *n = &s->nodes[id];
    n->prop0 = prop0, n->n_props = (uint32_t)n_props, n->plit0 = plit0, n->extra = extra;
    return 0;
}

/* The keywords that imply a type when `type` is absent. */
static uint8_t implied_types(const cJSON *obj) {
    static const struct { const char *kw; uint8_t t; } imp[] = {
        {"properties", TS_ST_OBJ}, {"required", TS_ST_OBJ}, {"additionalProperties", TS_ST_OBJ},
        {"items", TS_ST_ARR},      {"minItems", TS_ST_ARR}, {"maxItems", TS_ST_ARR},
        {"uniqueItems", TS_ST_ARR}, {"minLength", TS_ST_STR}, {"maxLength", TS_ST_STR}};
    uint8_t t = 0;
    for (size_t i = 0; i < sizeof imp / sizeof imp[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(obj, imp[i].kw)) t |= imp[i].t;
    return t ? t : TS_ST_ALL;
}

static int compile_node(comp *c, int id) {
    const cJSON *obj = c->memo_obj[id];
    const char *path = c->paths[id];
    for (const cJSON *k = obj->child; k; k = k->next) {
        for (const cJSON *y = obj->child; y != k; y = y->next)
            if (!strcmp(y->string, k->string))
                return ts_fail(c->err, TS_E_ARG, "JSON schema: '%.100s' twice at %s", k->string, path);
        if (!in_list(k->string, SUPPORTED) && !in_list(k->string, DESCRIPTIVE))
            return ts_fail(c->err, TS_E_ARG, "JSON schema: '%.100s' at %s is not supported (%s)", k->string, path,
                           why_not(k->string));
    }
    if (cJSON_GetObjectItemCaseSensitive(obj, "anyOf") || cJSON_GetObjectItemCaseSensitive(obj, "oneOf"))
        return compile_anyof(c, id, obj, path);
    if (cJSON_GetObjectItemCaseSensitive(obj, "enum") || cJSON_GetObjectItemCaseSensitive(obj, "const"))
        return compile_enum(c, id, obj, path);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type"), *u = cJSON_GetObjectItemCaseSensitive(obj, "uniqueItems");
    uint8_t types;
    if (t) {
        if (parse_type(c, t, path, &types)) return TS_E_ARG;
    } else types = implied_types(obj);
    if (u && !cJSON_IsFalse(u))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: 'uniqueItems' at %s is not supported unless false", path);
    ts_snode *n = &c->s->nodes[id];
    n->kind = TS_SK_TYPES;
    n->types = types;
    uint32_t v[4] = {0, TS_SCHEMA_UNBOUNDED, 0, TS_SCHEMA_UNBOUNDED};
    if (get_count(c, obj, "minLength", path, &v[0]) || get_count(c, obj, "maxLength", path, &v[1]) ||
        get_count(c, obj, "minItems", path, &v[2]) || get_count(c, obj, "maxItems", path, &v[3]))
        return TS_E_ARG;
    if (v[0] > v[1])
        return ts_fail(c->err, TS_E_ARG, "JSON schema: minLength %u above maxLength %u at %s: no string satisfies it", v[0],
                       v[1], path);
    if (v[2] > v[3])
        return ts_fail(c->err, TS_E_ARG, "JSON schema: minItems %u above maxItems %u at %s: no array satisfies it", v[2],
                       v[3], path);
    n->min_len = v[0], n->max_len = v[1], n->min_items = v[2], n->max_items = v[3];
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(obj, "items");
    if (items && cJSON_IsArray(items))
        return ts_fail(c->err, TS_E_ARG, "JSON schema: 'items' at %s is an array (tuples are not supported)", path);
    char cp[PATH_MAX_CHARS + 1];
    path_join(cp, path, "items", 0);
    const int it = items ? get_node(c, items, cp) : any_node(c);
    if (it < 0) return TS_E_ARG;
    c->s->nodes[id].items = it;
    return compile_object(c, id, obj, path);
}

/* ---- after the worklist ---- */

/* The leaves of anyOf node id into alts (alt0, n_alts): nested anyOf
 * opened (each once: state 0 new, 1 on the way, 2 done), repeats dropped,
 * the enums merged into one node (their literals would otherwise be
 * followed as separate threads). */
#define LEAF_CAP (4 * TS_SCHEMA_MAX_ALTS)
static int leaves_of(comp *c, int id, uint8_t *state, int depth) {
    ts_schema *s = c->s;
    if (state[id] == 2) return 0;
    if (state[id] == 1)
        return ts_fail(c->err, TS_E_ARG,
                       "JSON schema: the alternatives at %s include themselves (through $ref) before any value is read",
                       c->paths[id]);
    if (depth > TS_SCHEMA_MAX_NEST)
        return ts_fail(c->err, TS_E_ARG, "JSON schema: alternatives nest in alternatives more than %d deep (at %s)",
                       TS_SCHEMA_MAX_NEST, c->paths[id]);
    state[id] = 1;
    int32_t leaf[LEAF_CAP];
    int n = 0;
    for (int k = 0; k < c->raw_n[id]; k++) {
        const int ch = c->raw_alt[c->raw_alt0[id] + k];
        const int sub = s->nodes[ch].kind == TS_SK_ANYOF;
        if (sub && leaves_of(c, ch, state, depth + 1)) return TS_E_ARG;
        const int m = sub ? (int)s->nodes[ch].n_alts : 1;
        for (int j = 0; j < m; j++) {
            const int x = sub ? s->alts[s->nodes[ch].alt0 + j] : ch;
            int seen = 0;
            for (int q = 0; q < n; q++) seen |= leaf[q] == x;
            if (seen) continue;
            if (n == LEAF_CAP)
                return ts_fail(c->err, TS_E_ARG, "JSON schema: the alternatives at %s are more than %d", c->paths[id],
                               TS_SCHEMA_MAX_ALTS);
            leaf[n++] = x;
        }
    }
    int n_enum = 0, first_enum = -1;
    for (int j = 0; j < n; j++)
        if (s->nodes[leaf[j]].kind == TS_SK_ENUM) n_enum++, first_enum = first_enum < 0 ? j : first_enum;
    if (n_enum > 1) {
        const uint32_t l0 = (uint32_t)s->n_lits;
        for (int j = 0; j < n; j++) {
            const ts_snode e = s->nodes[leaf[j]];
            if (e.kind != TS_SK_ENUM) continue;
            for (uint32_t k = e.lit0; k < e.lit0 + e.n_lits; k++) {
                int dup = 0;
                for (uint32_t q = l0; q < (uint32_t)s->n_lits; q++) dup |= lit_eq(s, (int)q, (int)k);
                if (dup) continue;
                if (grow((void **)&s->lits, &c->cap_lits, s->n_lits + 1, sizeof(ts_slit))) return nomem(c);
                s->lits[s->n_lits++] = s->lits[k]; /* the same bytes */
            }
        }
        const int m = new_node(c, NULL, c->paths[id]);
        if (m < 0) return TS_E_ARG;
        s->nodes[m].kind = TS_SK_ENUM;
        s->nodes[m].lit0 = l0, s->nodes[m].n_lits = (uint32_t)s->n_lits - l0;
        int w = 0;
        for (int j = 0; j < n; j++)
            if (s->nodes[leaf[j]].kind != TS_SK_ENUM) leaf[w++] = leaf[j];
            else if (j == first_enum) leaf[w++] = m;
        n = w;
    }
    if (n > TS_SCHEMA_MAX_ALTS)
        return ts_fail(c->err, TS_E_ARG, "JSON schema: the alternatives at %s are %d, more than %d", c->paths[id], n,
                       TS_SCHEMA_MAX_ALTS);
    if (grow((void **)&s->alts, &c->cap_alts, s->n_alts + n, sizeof(int32_t))) return nomem(c);
    s->nodes[id].alt0 = (uint32_t)s->n_alts, s->nodes[id].n_alts = (uint32_t)n;
    memcpy(s->alts + s->n_alts, leaf, sizeof(int32_t) * (size_t)n);
    s->n_alts += n;
    state[id] = 2;
    return 0;
}

static int flatten_anyof(comp *c) {
    const int n0 = c->s->n_nodes; /* merged enums are added past it */
    uint8_t *state = ts_alloc((size_t)n0, TS_MEM_MISC);
    if (!state) return nomem(c);
    int rc = 0;
    for (int id = 0; id < n0 && !rc; id++)
        if (c->s->nodes[id].kind == TS_SK_ANYOF) rc = leaves_of(c, id, state, 0);
    ts_free(state);
    return rc;
}

/* Satisfiability. sat[] is the least fixpoint of "some finite value
 * satisfies the node" (an enum with values; an anyOf with a satisfiable
 * leaf; a type part: a scalar, an array that may be empty or whose items
 * are satisfiable, an object whose required properties are), so a
 * recursion counts only through a base case. Then no dead end is left
 * when every node is satisfiable and so is every part a document may
 * enter: each type of a node, each leaf of an anyOf. */
static int arr_ok(const ts_snode *n, const uint8_t *sat) { return !n->min_items || sat[n->items]; }

static int obj_ok(const ts_schema *s, const ts_snode *n, const uint8_t *sat, uint32_t *bad) {
    for (uint32_t k = 0; k < n->n_props; k++)
        if (s->props[n->prop0 + k].req_from == k && !sat[s->props[n->prop0 + k].node]) return *bad = k, 0;
    return 1;
}

static int node_sat(const ts_schema *s, int id, const uint8_t *sat) {
    const ts_snode *n = &s->nodes[id];
    uint32_t bad;
    if (n->kind == TS_SK_ENUM) return n->n_lits > 0;
    if (n->kind == TS_SK_ANYOF) {
        for (uint32_t k = 0; k < n->n_alts; k++)
            if (sat[s->alts[n->alt0 + k]]) return 1;
        return 0;
    }
    return (n->types & (TS_ST_NULL | TS_ST_BOOL | TS_ST_INT | TS_ST_NUM | TS_ST_STR)) ||
           ((n->types & TS_ST_ARR) && arr_ok(n, sat)) || ((n->types & TS_ST_OBJ) && obj_ok(s, n, sat, &bad));
}

static int check_satisfiable(comp *c) {
    ts_schema *s = c->s;
    uint8_t *sat = ts_alloc((size_t)s->n_nodes, TS_MEM_MISC);
    if (!sat) return nomem(c);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int id = 0; id < s->n_nodes; id++)
            if (!sat[id] && node_sat(s, id, sat)) sat[id] = 1, changed = 1;
    }
    int rc = 0;
    for (int id = 0; id < s->n_nodes && !rc; id++) {
        const ts_snode *n = &s->nodes[id];
        const char *why = NULL;
        uint32_t bad = 0;
        if (!sat[id]) why = "no finite value satisfies it";
        else if (n->kind == TS_SK_ANYOF) {
            for (uint32_t k = 0; k < n->n_alts && !why; k++)
                if (!sat[s->alts[n->alt0 + k]]) why = "one of its alternatives no finite value satisfies";
        } else if (n->kind == TS_SK_TYPES) {
            if ((n->types & TS_ST_ARR) && !arr_ok(n, sat)) why = "no finite array satisfies it (its items)";
            else if ((n->types & TS_ST_OBJ) && !obj_ok(s, n, sat, &bad)) why = "no finite object satisfies it";
        }
        if (why && n->kind == TS_SK_TYPES && (n->types & TS_ST_OBJ) && !obj_ok(s, n, sat, &bad))
            rc = ts_fail(c->err, TS_E_ARG,
                         "JSON schema: no finite value satisfies the schema at %s: its required property '%.*s' "
                         "recurses without end",
                         c->paths[id], (int)s->lits[n->plit0 + bad].len - 2, s->bytes + s->lits[n->plit0 + bad].off + 1);
        else if (why)
            rc = ts_fail(c->err, TS_E_ARG, "JSON schema: the schema at %s cannot be completed: %s (a recursion without end?)",
                         c->paths[id], why);
    }
    ts_free(sat);
    return rc;
}

/* ---- the text ---- */

/* A \u0000 escape in a string of the (valid JSON) text: cJSON's strings end
 * at it, so a key or literal would silently lose its tail. */
static long find_nul_escape(const char *t, size_t n) {
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in_str) {
            in_str = t[i] == '"';
            continue;
        }
        if (t[i] == '"') in_str = 0;
        else if (t[i] == '\\') {
            if (i + 5 < n && t[i + 1] == 'u' && !memcmp(t + i + 2, "0000", 4)) return (long)i;
            i++;
        }
    }
    return -1;
}

static int check_text(const char *text, size_t len, ts_error *err) {
    if (!text || !len) return ts_fail(err, TS_E_ARG, "JSON schema: the schema is empty");
    if (len > TS_SCHEMA_MAX_BYTES)
        return ts_fail(err, TS_E_ARG, "JSON schema: the schema has %zu bytes, more than %zu", len, TS_SCHEMA_MAX_BYTES);
    ts_jfsm st;
    ts_jfsm_init(&st, 0);
    for (size_t i = 0; i < len; i++) {
        if (!ts_jfsm_feed(&st, (uint8_t)text[i]))
            return ts_fail(err, TS_E_ARG, "JSON schema: the schema is not valid JSON: byte %zu (%s)", i,
                           ts_jfsm_describe(&st));
        if (st.h.depth > TS_SCHEMA_MAX_NEST)
            return ts_fail(err, TS_E_ARG, "JSON schema: the schema nests deeper than %d levels (at byte %zu)",
                           TS_SCHEMA_MAX_NEST, i);
    }
    if (!ts_jfsm_complete(&st))
        return ts_fail(err, TS_E_ARG, "JSON schema: the schema is not valid JSON: it ends early (%s)",
                       ts_jfsm_describe(&st));
    const long z = find_nul_escape(text, len);
    if (z >= 0)
        return ts_fail(err, TS_E_ARG, "JSON schema: a \\u0000 escape at byte %ld (strings holding NUL are not supported)", z);
    return 0;
}

void ts_schema_free(ts_schema *s) {
    if (!s) return;
    ts_free(s->nodes);
    ts_free(s->props);
    ts_free(s->lits);
    ts_free(s->bytes);
    ts_free(s->alts);
    ts_free(s->wrap);
    ts_free(s);
}

int ts_schema_set_wrap(ts_schema *s, const char *prefix, const char *suffix, const char *sep, int repeat,
                       ts_error *err) {
    const char *part[TS_SW_N + 1] = {prefix, suffix, sep, prefix}; /* NEXT is sep then prefix */
    size_t n[TS_SW_N + 1], total = 0;
    static const char *const name[TS_SW_N] = {"prefix", "suffix", "separator"};
    for (int k = 0; k <= TS_SW_N; k++) {
        n[k] = part[k] ? strlen(part[k]) : 0;
        if (k < TS_SW_N && n[k] > TS_SCHEMA_WRAP_MAX)
            return ts_fail(err, TS_E_ARG, "JSON schema: the wrap's %s has %zu bytes, more than %d", name[k], n[k],
                           TS_SCHEMA_WRAP_MAX);
        total += n[k];
    }
    if (repeat != 0 && repeat != 1) return ts_fail(err, TS_E_ARG, "JSON schema: the wrap's repeat is %d (0 or 1)", repeat);
    if (repeat && !n[2] && !n[3])
        return ts_fail(err, TS_E_ARG,
                       "JSON schema: repeated wrapped documents need a separator or a prefix between them");
    uint8_t *b = ts_alloc(total + 1, TS_MEM_MISC);
    if (!b) return ts_fail(err, TS_E_NOMEM, "JSON schema: out of memory");
    ts_free(s->wrap);
    s->wrap = b;
    size_t o = 0;
    for (int k = 0; k <= TS_SW_N; k++) {
        if (n[k]) memcpy(b + o, part[k], n[k]);
        if (k < TS_SW_N) s->wrap_off[k] = (uint32_t)o, s->wrap_len[k] = (uint32_t)n[k];
        else s->wrap_len[TS_SW_NEXT] += (uint32_t)n[k]; /* the prefix right after the separator */
        o += n[k];
    }
    s->wrap_repeat = repeat;
    return 0;
}

int ts_schema_compile(const char *text, size_t len, ts_schema **out, ts_error *err) {
    if (!out) return ts_fail(err, TS_E_ARG, "JSON schema: no output pointer");
    *out = NULL;
    int rc = check_text(text, len, err);
    if (rc) return rc;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root)
        return ts_fail(err, TS_E_ARG, "JSON schema: the schema cannot be decoded (a \\u escape of a lone surrogate?)");
    comp c = {0};
    c.err = err;
    c.root = root;
    c.s = ts_alloc(sizeof(ts_schema), TS_MEM_MISC);
    if (!c.s) {
        cJSON_Delete(root);
        return ts_fail(err, TS_E_NOMEM, "JSON schema: out of memory");
    }
    c.s->any = -1;
    if (cJSON_IsFalse(root)) rc = ts_fail(err, TS_E_ARG, "JSON schema: the schema is false: no value is valid");
    else if (!cJSON_IsObject(root) && !cJSON_IsTrue(root))
        rc = ts_fail(err, TS_E_ARG, "JSON schema: the schema must be an object or a boolean");
    if (!rc && (c.s->root = get_node(&c, root, "#")) < 0) rc = TS_E_ARG;
    /* the worklist: new nodes append themselves; any_node's is complete */
    for (int id = 0; !rc && id < c.s->n_nodes; id++)
        if (c.memo_obj[id] && (rc = compile_node(&c, id))) break;
    if (!rc) rc = flatten_anyof(&c);
    if (!rc) rc = check_satisfiable(&c);
    for (int i = 0; i < c.s->n_nodes; i++) ts_free(c.paths[i]);
    ts_free(c.paths);
    ts_free(c.memo_obj);
    ts_free(c.raw_alt);
    ts_free(c.raw_alt0);
    ts_free(c.raw_n);
    cJSON_Delete(root);
    if (rc) {
        ts_schema_free(c.s);
        return rc;
    }
    *out = c.s;
    return 0;
}

int ts_json_schema_check(const char *schema, size_t len, ts_error *err) {
    ts_schema *s = NULL;
    const int rc = ts_schema_compile(schema, len, &s, err);
    ts_schema_free(s);
    return rc;
}
