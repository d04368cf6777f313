/* schema_valid.c: an independent JSON Schema validator and a greedy
 * completer of live schema-recognizer states, shared by
 * tests/test_schema.c and the fuzz harness fuzz_json_schema.c (fuzz.h).
 *
 * The validator is written from the JSON Schema specification (draft
 * 2020-12 validation vocabulary, the keywords of the compiler's subset)
 * over cJSON trees, and knows nothing of src/text/json_schema.c: it reads
 * the schema the standard way (oneOf means exactly one; no `type` means any
 * type; without additionalProperties any extra key is fine; integer is any
 * number with no fractional part), so a recognizer that accepts a document
 * it refuses is wrong, while the recognizer's narrower readings (properties
 * in order, no extra keys, integers without a fraction, enum literals in one
 * written form) only make it accept fewer.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "text/schema_fsm.h"

static const cJSON *pointer(const cJSON *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *cur = root;
    const char *p = ref + 1;
    char seg[512];
    while (*p == '/') {
        p++;
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            char ch = *p++;
            if (ch == '~') ch = *p == '1' ? '/' : '~', p += *p != 0;
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (cJSON_IsArray(cur)) cur = cJSON_GetArrayItem(cur, atoi(seg));
        else cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
        if (!cur) return NULL;
    }
    return cur;
}

static int deep_equal(const cJSON *a, const cJSON *b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
    if ((a->type & 0xFF) != (b->type & 0xFF)) return 0;
    if (cJSON_IsString(a)) return !strcmp(a->valuestring, b->valuestring);
    if (cJSON_IsArray(a)) {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!deep_equal(x, y)) return 0;
        return !x && !y;
    }
    if (cJSON_IsObject(a)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) return 0;
        for (const cJSON *x = a->child; x; x = x->next) {
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!y || !deep_equal(x, y)) return 0;
        }
        return 1;
    }
    return 1; /* null, true, false: the type said it */
}

static int has_type(const cJSON *v, const char *t) {
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    return 0;
}

static size_t code_points(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((uint8_t)*s & 0xC0) != 0x80;
    return n;
}

static int num(const cJSON *s, const char *k, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    if (!cJSON_IsNumber(v)) return 0;
    *out = v->valuedouble;
    return 1;
}

static int valid(const cJSON *root, const cJSON *s, const cJSON *v, int depth, long *budget, int one_any) {
    if (depth > 200 || --*budget < 0) return 0;
    if (cJSON_IsTrue(s)) return 1;
    if (!cJSON_IsObject(s)) return 0;
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        const cJSON *t = pointer(root, k->valuestring);
        if (!t || !valid(root, t, v, depth + 1, budget, one_any)) return 0;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "allOf")))
        for (const cJSON *x = k->child; x; x = x->next)
            if (!valid(root, x, v, depth + 1, budget, one_any)) return 0;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) {
        int any = 0;
        for (const cJSON *x = k->child; x && !any; x = x->next) any = valid(root, x, v, depth + 1, budget, one_any);
        if (!any) return 0;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        int n = 0;
        for (const cJSON *x = k->child; x; x = x->next) n += valid(root, x, v, depth + 1, budget, one_any);
        if (one_any ? n < 1 : n != 1) return 0;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")) && !deep_equal(k, v)) return 0;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        int any = 0;
        for (const cJSON *x = k->child; x && !any; x = x->next) any = deep_equal(x, v);
        if (!any) return 0;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        int any = 0;
        if (cJSON_IsString(k)) any = has_type(v, k->valuestring);
        for (const cJSON *x = cJSON_IsArray(k) ? k->child : NULL; x && !any; x = x->next) any = has_type(v, x->valuestring);
        if (!any) return 0;
    }
    double d;
    if (cJSON_IsString(v)) {
        const size_t n = code_points(v->valuestring);
        if (num(s, "minLength", &d) && (double)n < d) return 0;
        if (num(s, "maxLength", &d) && (double)n > d) return 0;
    }
    if (cJSON_IsArray(v)) {
        const int n = cJSON_GetArraySize(v);
        if (num(s, "minItems", &d) && n < d) return 0;
        if (num(s, "maxItems", &d) && n > d) return 0;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "items")))
            for (const cJSON *x = v->child; x; x = x->next)
                if (!valid(root, k, x, depth + 1, budget, one_any)) return 0;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "required")))
            for (const cJSON *x = k->child; x; x = x->next)
                if (!cJSON_GetObjectItemCaseSensitive(v, x->valuestring)) return 0;
        for (const cJSON *x = v->child; x; x = x->next) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, x->string) : NULL;
            if (ps) {
                if (!valid(root, ps, x, depth + 1, budget, one_any)) return 0;
            } else if (cJSON_IsFalse(add))
                return 0;
            else if (add && !valid(root, add, x, depth + 1, budget, one_any))
                return 0;
        }
    }
    return 1;
}

int fuzz_schema_valid(const cJSON *root, const cJSON *s, const cJSON *v, int depth) {
    long budget = 2000000; /* alternatives nest: the work can grow as their product */
    const int r = valid(root, s, v, depth, &budget, 0);
    return budget < 0 ? -1 : r;
}

int fuzz_schema_valid_oneof_any(const cJSON *root, const cJSON *s, const cJSON *v) {
    long budget = 2000000;
    const int r = valid(root, s, v, 0, &budget, 1);
    return budget < 0 ? -1 : r;
}

static int max_depth(const ts_sstate *s) {
    int d = 0;
    for (int i = 0; i < s->n; i++) d = s->t[i].depth > d ? s->t[i].depth : d;
    return d;
}

/* Greedy completion: at each step the first byte of a fixed preference
 * order (quotes and closers first, then digits, letters, everything) that
 * keeps some reading alive; below a few levels a closer that closes comes
 * first (else an optional property that recurses would lead the quote
 * into a key, forever). */
size_t fuzz_schema_complete(const void *sc_, const void *st_, uint8_t *out, size_t cap) {
    const ts_schema *sc = sc_;
    /* '<' early: a wrapped schema's suffix ("</s>", fuzz_json_schema.c) must
     * win over a number's next digit */
    static const char pref[] = "\"<}],:0n1tf{[a ";
    ts_sstate *s = malloc(sizeof *s), *probe = malloc(sizeof *probe);
    ts_sfsm_work *w = malloc(sizeof *w);
    if (!s || !w || !probe) fuzz_fail("out of memory");
    ts_sfsm_copy(s, st_);
    size_t n = 0;
    while (!ts_sfsm_complete(sc, s)) {
        if (n == cap) {
            n = (size_t)-2;
            break;
        }
        int ok = 0;
        const int d = max_depth(s);
        for (int i = 0; i < 2 && d >= 4 && !ok; i++) {
            const uint8_t c = (uint8_t)"}]"[i];
            ts_sfsm_copy(probe, s);
            if (ts_sfsm_feed_bytes(sc, probe, &c, 1, w) && max_depth(probe) < d)
                ok = ts_sfsm_feed_bytes(sc, s, &c, 1, w), out[n] = c;
        }
        for (size_t i = 0; i < sizeof pref - 1 && !ok; i++)
            if ((ok = ts_sfsm_feed_bytes(sc, s, pref + i, 1, w))) out[n] = (uint8_t)pref[i];
        for (int b = 0x20; b < 0x80 && !ok; b++) { /* DEL too: a string may hold it raw */
            const uint8_t c = (uint8_t)b;
            if ((ok = ts_sfsm_feed_bytes(sc, s, &c, 1, w))) out[n] = c;
        }
        for (int b = 0x80; b < 0x100 && !ok; b++) {
            const uint8_t c = (uint8_t)b;
            if ((ok = ts_sfsm_feed_bytes(sc, s, &c, 1, w))) out[n] = c;
        }
        if (!ok) {
            n = (size_t)-1;
            break;
        }
        n++;
    }
    free(s);
    free(probe);
    free(w);
    return n;
}
