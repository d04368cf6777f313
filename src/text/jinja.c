/* jinja.c: the chat-template interpreter (see jinja.h for the contract).
 *
 * Layout, top to bottom:
 *   arena          every value, AST node and string of one parse or render
 *                  lives in an arena freed at once: values are immutable (the
 *                  sandbox forbids mutating lists and dicts; only namespace()
 *                  objects change), so sharing without reference counts is safe.
 *   values         none/undefined/bool/int/float/str/list/tuple/dict/namespace,
 *                  plus macros, bound methods, builtins and the loop object.
 *   JSON           a small JSON reader (cJSON cannot tell 1 from 1.0, Python
 *                  can, and tojson/str output depends on it) and Python's
 *                  json.dumps writer; Python str()/repr().
 *   lexer          Jinja2's lexer rules, including trim_blocks, lstrip_blocks,
 *                  the -/+ markers and the balancing of brackets inside tags.
 *   parser         recursive descent following jinja2/parser.py's grammar and
 *                  precedence, into one generic node type.
 *   evaluator      tree walking; errors unwind with longjmp to the entry point
 *                  (everything allocated lives in the arena, so nothing leaks).
 *   library        filters, tests, methods of str/dict/list, globals.
 *
 * Invariants: strings are UTF-8 with explicit lengths (may hold NUL); str
 * lengths, indexing and slicing count code points as Python does. Nothing is
 * read past a string's length. Every recursion is bounded (parse depth, macro
 * depth), every loop is counted (max_steps).
 *
 * References: jinja2 3.1 (lexer.py, parser.py, runtime.py, filters.py,
 * tests.py, sandbox.py), CPython's float_repr_style 'short' and json encoder.
 * Written from those descriptions; no code copied.
 */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <utf8proc.h>

#include "text/jinja.h"

#define TJ_MAX_PARSE_DEPTH 200
#define TJ_MAX_CALL_DEPTH 100
/* Frames of the tree walk (expressions, statements, filter chains) on the C
 * stack at once, across macro calls. The parser bounds nesting, but not a
 * left-associative chain ("1 + 1 + ... + 1", "x|f|f|...", "x.a.a.a"): it
 * builds a tree as deep as the chain is long, and the walk recursed on it
 * until the stack overflowed (20,000 terms did). Real templates stay under
 * 100. An expression level takes about 3.3 KiB of stack under gcc's ASan
 * (2,500 levels overflowed 8 MiB there), so 1000 leaves room to spare. */
#define TJ_MAX_EVAL_DEPTH 1000
#define TJ_MAX_VALUE_DEPTH 1000 /* comparisons of nested values (JSON input nests at most 500) */
#define TJ_MAX_RANGE 100000

const char *tj_kind_name(tj_kind k) {
    switch (k) {
    case TJ_OK: return "ok";
    case TJ_SYNTAX: return "TemplateSyntaxError";
    case TJ_RAISED: return "TemplateError";
    case TJ_UNDEFINED: return "UndefinedError";
    case TJ_TYPE: return "TypeError";
    case TJ_RUNTIME: return "TemplateRuntimeError";
    case TJ_UNSUPPORTED: return "Unsupported";
    case TJ_LIMIT: return "LimitExceeded";
    case TJ_INPUT: return "InputError";
    case TJ_NOMEM: return "MemoryError";
    }
    return "Error";
}

void tj_options_default(tj_options *o) {
    o->trim_blocks = 1;
    o->lstrip_blocks = 1;
    o->keep_trailing_newline = 0;
    o->max_bytes = (size_t)256 << 20;
    o->max_steps = 10000000;
}

/* ======================================================================
 * arena
 * ==================================================================== */

typedef struct achunk {
    struct achunk *next;
    size_t used, cap;
    /* payload follows, 16-byte aligned */
} achunk;

typedef struct arena {
    achunk *head;
    size_t total, limit;
    jmp_buf *jb;          /* where to unwind when the limit is hit */
    tj_error *err;
} arena;

static void arena_fail(arena *a, tj_kind k, const char *msg) {
    if (a->err) {
        a->err->kind = k;
        snprintf(a->err->msg, sizeof a->err->msg, "%s", msg);
    }
    longjmp(*a->jb, 1);
}

static void *aalloc(arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    achunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 32768 ? n : 32768;
        if (a->total + cap > a->limit)
            arena_fail(a, TJ_LIMIT, "template used more memory than allowed (max_bytes)");
        c = ts_alloc(sizeof(achunk) + 16 + cap, TS_MEM_MISC);
        if (!c) arena_fail(a, TJ_NOMEM, "out of memory");
        c->cap = cap;
        c->used = 0;
        a->total += cap;
        if (a->head && n > 32768) { /* big block: keep the current chunk on top */
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    char *base = (char *)c + ((sizeof(achunk) + 15) & ~(size_t)15);
    void *p = base + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static void arena_free(arena *a) {
    achunk *c = a->head;
    while (c) {
        achunk *n = c->next;
        ts_free(c);
        c = n;
    }
    a->head = NULL;
    a->total = 0;
}

static char *astrndup(arena *a, const char *s, size_t n) {
    char *p = aalloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* A growable byte buffer in the arena (old blocks are abandoned: at most 2x). */
typedef struct sbuf {
    arena *a;
    char *p;
    size_t n, cap;
} sbuf;

static void sb_init(sbuf *b, arena *a) { b->a = a; b->p = NULL; b->n = b->cap = 0; }

static void sb_reserve(sbuf *b, size_t add) {
    if (b->n + add + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + add + 1) cap *= 2;
    char *np = aalloc(b->a, cap);
    if (b->n) memcpy(np, b->p, b->n);
    b->p = np;
    b->cap = cap;
}
static void sb_put(sbuf *b, const char *s, size_t n) {
    if (!n) return;
    sb_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_putc(sbuf *b, char c) { sb_put(b, &c, 1); }
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}
static const char *sb_str(sbuf *b) {
    if (!b->p) { sb_reserve(b, 0); b->p[0] = 0; }
    return b->p;
}

/* ======================================================================
 * UTF-8 and Python's notion of whitespace
 * ==================================================================== */

/* Decode one code point at s[*i] (i < n); invalid bytes decode as themselves
 * (inputs are validated on entry, this only keeps the walk safe). */
static uint32_t u8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s;
    size_t k = *i;
    uint32_t c = u[k];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (k + (size_t)len > n) len = 1;
    if (len == 1) { *i = k + 1; return c; }
    c &= 0x3f >> (len - 1);
    for (int j = 1; j < len; j++) c = (c << 6) | (u[k + j] & 0x3f);
    *i = k + (size_t)len;
    return c;
}

static int u8_encode(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xc0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3f)); o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* Strict UTF-8 validation (no overlongs, no surrogates). */
static int u8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c < 0x80) { i++; continue; }
        int len;
        uint32_t cp, min;
        if ((c >> 5) == 6) { len = 2; cp = c & 0x1f; min = 0x80; }
        else if ((c >> 4) == 14) { len = 3; cp = c & 0x0f; min = 0x800; }
        else if ((c >> 3) == 30) { len = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (i + (size_t)len > n) return 0;
        for (int j = 1; j < len; j++) {
            if ((u[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (u[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += (size_t)len;
    }
    return 1;
}

static size_t u8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

/* Byte offset of code point index ci (ci <= count). */
static size_t u8_offset(const char *s, size_t n, size_t ci) {
    size_t i = 0;
    while (i < n && ci > 0) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80) i++;
        ci--;
    }
    return i;
}

/* Python str.isspace(): bidi class WS/B/S or category Zs. */
static int py_isspace(uint32_t c) {
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c < 0x85) return 0;
    return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Length in bytes of the prefix of s made of whitespace (Python's \s). */
static size_t ws_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        uint32_t c = u8_next(s, n, &j);
        if (!py_isspace(c)) break;
        i = j;
    }
    return i;
}

/* Length of s once trailing whitespace is removed. */
static size_t ws_rstrip_len(const char *s, size_t n) {
    size_t end = 0, i = 0;
    while (i < n) {
        uint32_t c = u8_next(s, n, &i);
        if (!py_isspace(c)) end = i;
    }
    return end;
}

/* Python str.isprintable() for one code point (repr escapes the others). */
static int py_isprintable(uint32_t c) {
    if (c < 0x20 || c == 0x7f) return 0;
    if (c < 0x7f) return 1;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

/* ======================================================================
 * values
 * ==================================================================== */

typedef enum {
    V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT,
    V_NS,       /* namespace(): the one mutable object */
    V_MACRO,    /* u.node: the macro definition */
    V_FUNC,     /* builtin global: u.i = F_* */
    V_METHOD,   /* bound method: u.bm */
    V_LOOP      /* the `loop` variable: u.loop */
} vtype;

struct jlist;
struct jdict;
struct jnode;
struct bmethod;
struct loopst;
struct macro;

typedef struct jv {
    uint8_t t;
    uint8_t flag;   /* V_STR: Markup (|safe); V_LIST: tuple */
    size_t n;       /* V_STR: byte length */
    union {
        int64_t i;
        double f;
        const char *s;          /* V_STR bytes; V_UNDEF: the message it raises */
        struct jlist *l;
        struct jdict *d;
        struct jnode *node;
        struct bmethod *bm;
        struct loopst *loop;
        struct macro *mac;
    } u;
} jv;

typedef struct jlist {
    size_t n, cap;
    jv *v;
} jlist;

typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
    uint32_t *idx;      /* open-addressing index over k (slots hold i+1), built when n grows */
    size_t idx_cap;
} jdict;

static jv mk_undef(const char *msg) { jv v = {V_UNDEF, 0, 0, {.s = msg}}; return v; }
static jv mk_none(void) { jv v = {V_NONE, 0, 0, {.i = 0}}; return v; }
static jv mk_bool(int b) { jv v = {V_BOOL, 0, 0, {.i = b ? 1 : 0}}; return v; }
static jv mk_int(int64_t i) { jv v = {V_INT, 0, 0, {.i = i}}; return v; }
static jv mk_float(double f) { jv v = {V_FLOAT, 0, 0, {.f = f}}; return v; }
static jv mk_str(const char *s, size_t n) { jv v = {V_STR, 0, n, {.s = s}}; return v; }

static jv mk_astr(arena *a, const char *s, size_t n) { return mk_str(astrndup(a, s, n), n); }
static jv mk_cstr(arena *a, const char *s) { return mk_astr(a, s, strlen(s)); }

static jlist *list_new(arena *a, size_t cap) {
    jlist *l = aalloc(a, sizeof *l);
    l->cap = cap ? cap : 4;
    l->v = aalloc(a, l->cap * sizeof(jv));
    return l;
}
static void list_push(arena *a, jlist *l, jv x) {
    if (l->n == l->cap) {
        jv *nv = aalloc(a, l->cap * 2 * sizeof(jv));
        memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = x;
}
static jv mk_list(jlist *l, int tuple) { jv v = {V_LIST, (uint8_t)tuple, 0, {.l = l}}; return v; }

static jdict *dict_new(arena *a) {
    jdict *d = aalloc(a, sizeof *d);
    d->cap = 4;
    d->k = aalloc(a, d->cap * sizeof(jv));
    d->v = aalloc(a, d->cap * sizeof(jv));
    return d;
}
static jv mk_dict(jdict *d) { jv v = {V_DICT, 0, 0, {.d = d}}; return v; }

static int v_eq(jv a, jv b);

/* Hash consistent with v_eq for hashable keys (1 == 1.0 == True hash alike). */
static uint64_t v_hash(jv k) {
    uint64_t h = 1469598103934665603ull;
    switch (k.t) {
    case V_STR:
        for (size_t i = 0; i < k.n; i++) { h ^= (unsigned char)k.u.s[i]; h *= 1099511628211ull; }
        return h;
    case V_BOOL: case V_INT: return (uint64_t)k.u.i * 0x9e3779b97f4a7c15ull;
    case V_FLOAT:
        if (k.u.f == floor(k.u.f) && fabs(k.u.f) < 9e18) return (uint64_t)(int64_t)k.u.f * 0x9e3779b97f4a7c15ull;
        { uint64_t b; memcpy(&b, &k.u.f, 8); return b * 0x9e3779b97f4a7c15ull; }
    default: return (uint64_t)k.t;
    }
}

static void dict_reindex(arena *a, jdict *d) {
    size_t cap = 64;
    while (cap < d->n * 2 + 2) cap *= 2;
    d->idx = aalloc(a, cap * sizeof(uint32_t));
    d->idx_cap = cap;
    for (size_t i = 0; i < d->n; i++) {
        size_t s = (size_t)(v_hash(d->k[i]) & (cap - 1));
        while (d->idx[s]) s = (s + 1) & (cap - 1);
        d->idx[s] = (uint32_t)(i + 1);
    }
}

static long dict_find(const jdict *d, jv k) {
    if (d->idx) {
        size_t s = (size_t)(v_hash(k) & (d->idx_cap - 1));
        while (d->idx[s]) {
            size_t i = d->idx[s] - 1;
            if (v_eq(d->k[i], k)) return (long)i;
            s = (s + 1) & (d->idx_cap - 1);
        }
        return -1;
    }
    for (size_t i = 0; i < d->n; i++)
        if (v_eq(d->k[i], k)) return (long)i;
    return -1;
}

/* Python d[k] = v: a new key goes last, an existing key keeps its place. */
static void dict_set(arena *a, jdict *d, jv k, jv v) {
    long i = dict_find(d, k);
    if (i >= 0) { d->v[i] = v; return; }
    if (d->n == d->cap) {
        jv *nk = aalloc(a, d->cap * 2 * sizeof(jv)), *nv = aalloc(a, d->cap * 2 * sizeof(jv));
        memcpy(nk, d->k, d->n * sizeof(jv));
        memcpy(nv, d->v, d->n * sizeof(jv));
        d->k = nk;
        d->v = nv;
        d->cap *= 2;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    if (d->n > 8 && (!d->idx || d->n * 2 + 2 > d->idx_cap)) dict_reindex(a, d);
    else if (d->idx) {
        size_t s = (size_t)(v_hash(k) & (d->idx_cap - 1));
        while (d->idx[s]) s = (s + 1) & (d->idx_cap - 1);
        d->idx[s] = (uint32_t)d->n;
    }
}

static int dict_get_cstr(const jdict *d, const char *key, jv *out) {
    jv k = mk_str(key, strlen(key));
    long i = dict_find(d, k);
    if (i < 0) return 0;
    *out = d->v[i];
    return 1;
}

static int is_num(jv v) { return v.t == V_INT || v.t == V_BOOL || v.t == V_FLOAT; }
static double num_f(jv v) { return v.t == V_FLOAT ? v.u.f : (double)v.u.i; }

/* Equality recurses into lists and dicts, and a template can build a value
 * nested as deep as its step budget allows (`{% set x = [x] %}` in a loop):
 * past TJ_MAX_VALUE_DEPTH levels the answer is -1 (too deep), which v_eqr
 * raises as a LimitError. v_eq (hash lookups) reads it as "not equal". */
static int v_eq_d(jv a, jv b, int depth) {
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT) return a.u.i == b.u.i;
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return 0;
    if (depth > TJ_MAX_VALUE_DEPTH && (a.t == V_LIST || a.t == V_DICT)) return -1;
    switch (a.t) {
    case V_UNDEF: case V_NONE: return 1;
    case V_STR: return a.n == b.n && (a.n == 0 || memcmp(a.u.s, b.u.s, a.n) == 0);
    case V_LIST:
        if (a.flag != b.flag || a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++) {
            int e = v_eq_d(a.u.l->v[i], b.u.l->v[i], depth + 1);
            if (e != 1) return e;
        }
        return 1;
    case V_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            long j = dict_find(b.u.d, a.u.d->k[i]);
            if (j < 0) return 0;
            int e = v_eq_d(a.u.d->v[i], b.u.d->v[j], depth + 1);
            if (e != 1) return e;
        }
        return 1;
    case V_FUNC: return a.u.i == b.u.i;
    default: return a.u.s == b.u.s; /* identity */
    }
}

static int v_eq(jv a, jv b) { return v_eq_d(a, b, 0) == 1; }

static int v_truthy(jv v) {
    switch (v.t) {
    case V_UNDEF: case V_NONE: return 0;
    case V_BOOL: case V_INT: return v.u.i != 0;
    case V_FLOAT: return v.u.f != 0.0;
    case V_STR: return v.n != 0;
    case V_LIST: return v.u.l->n != 0;
    case V_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

/* Python's type(x).__name__, for error messages. */
static const char *v_typename(jv v) {
    switch (v.t) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return v.flag ? "Markup" : "str";
    case V_LIST: return v.flag ? "tuple" : "list";
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_MACRO: return "Macro";
    case V_FUNC: return "function";
    case V_METHOD: return "builtin_function_or_method";
    case V_LOOP: return "LoopContext";
    }
    return "object";
}

/* jinja2's object_type_repr: "dict object", "None", "jinja2.utils.Namespace object". */
static const char *v_objrepr(jv v) {
    switch (v.t) {
    case V_NONE: return "None";
    case V_BOOL: return "bool object";
    case V_INT: return "int object";
    case V_FLOAT: return "float object";
    case V_STR: return v.flag ? "markupsafe.Markup object" : "str object";
    case V_LIST: return v.flag ? "tuple object" : "list object";
    case V_DICT: return "dict object";
    case V_NS: return "jinja2.utils.Namespace object";
    case V_MACRO: return "jinja2.runtime.Macro object";
    case V_LOOP: return "jinja2.runtime.LoopContext object";
    default: return "builtin_function_or_method object";
    }
}

/* ======================================================================
 * Python float repr and JSON
 * ==================================================================== */

/* repr(float): the shortest digits that round-trip, in fixed notation when
 * the decimal exponent is in [-4, 16), else d.ddde+XX. */
static void fmt_pyfloat(double f, char *o, size_t cap, int json) {
    if (isnan(f)) { snprintf(o, cap, "%s", json ? "NaN" : "nan"); return; }
    if (isinf(f)) { snprintf(o, cap, "%s", f < 0 ? (json ? "-Infinity" : "-inf") : (json ? "Infinity" : "inf")); return; }
    char buf[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf = [-]d[.ddd]e[+-]XX */
    char digits[32];
    int nd = 0, neg = 0;
    const char *p = buf;
    if (*p == '-') { neg = 1; p++; }
    for (; *p && *p != 'e'; p++)
        if (isdigit((unsigned char)*p)) digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *w = o;
    size_t left = cap;
#define PUT(...) do { int k_ = snprintf(w, left, __VA_ARGS__); if (k_ < 0 || (size_t)k_ >= left) return; w += k_; left -= (size_t)k_; } while (0)
    if (neg) PUT("-");
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            PUT("0.");
            for (int i = 0; i < -exp - 1; i++) PUT("0");
            PUT("%s", digits);
        } else {
            for (int i = 0; i <= exp; i++) PUT("%c", i < nd ? digits[i] : '0');
            PUT(".");
            if (nd > exp + 1) PUT("%s", digits + exp + 1);
            else PUT("0");
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
#undef PUT
}

typedef struct jparse {
    arena *a;
    const char *s;
    size_t n, i;
    int depth;
    const char *err;
} jparse;

static void jp_ws(jparse *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}

static int jp_hex4(jparse *p, uint32_t *out) {
    if (p->i + 4 > p->n) return 0;
    uint32_t c = 0;
    for (int k = 0; k < 4; k++) {
        char h = p->s[p->i + (size_t)k];
        c <<= 4;
        if (h >= '0' && h <= '9') c |= (uint32_t)(h - '0');
        else if (h >= 'a' && h <= 'f') c |= (uint32_t)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') c |= (uint32_t)(h - 'A' + 10);
        else return 0;
    }
    p->i += 4;
    *out = c;
    return 1;
}

static int jp_string(jparse *p, jv *out) {
    p->i++; /* opening quote */
    sbuf b;
    sb_init(&b, p->a);
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c == '"') {
            p->i++;
            *out = mk_str(sb_str(&b), b.n);
            return 1;
        }
        if (c < 0x20) { p->err = "control character in string"; return 0; }
        if (c != '\\') {
            size_t st = p->i;
            while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' && (unsigned char)p->s[p->i] >= 0x20) p->i++;
            sb_put(&b, p->s + st, p->i - st);
            continue;
        }
        if (++p->i >= p->n) break;
        char e = p->s[p->i++];
        switch (e) {
        case '"': sb_putc(&b, '"'); break;
        case '\\': sb_putc(&b, '\\'); break;
        case '/': sb_putc(&b, '/'); break;
        case 'b': sb_putc(&b, '\b'); break;
        case 'f': sb_putc(&b, '\f'); break;
        case 'n': sb_putc(&b, '\n'); break;
        case 'r': sb_putc(&b, '\r'); break;
        case 't': sb_putc(&b, '\t'); break;
        case 'u': {
            uint32_t c1;
            if (!jp_hex4(p, &c1)) { p->err = "bad \\u escape"; return 0; }
            if (c1 >= 0xd800 && c1 < 0xdc00 && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                size_t save = p->i;
                uint32_t c2;
                p->i += 2;
                if (jp_hex4(p, &c2) && c2 >= 0xdc00 && c2 < 0xe000) c1 = 0x10000 + ((c1 - 0xd800) << 10) + (c2 - 0xdc00);
                else p->i = save;
            }
            if (c1 >= 0xd800 && c1 < 0xe000) c1 = 0xfffd; /* lone surrogate: not representable in UTF-8 */
            char u8[4];
            sb_put(&b, u8, (size_t)u8_encode(c1, u8));
            break;
        }
        default: p->err = "bad escape"; return 0;
        }
    }
    p->err = "unterminated string";
    return 0;
}

static int jp_value(jparse *p, jv *out);

static int jp_number(jparse *p, jv *out) {
    size_t st = p->i;
    int is_float = 0;
    if (p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i])) { p->err = "bad number"; return 0; }
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        is_float = 1;
        p->i++;
        if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i])) { p->err = "bad number"; return 0; }
        while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        is_float = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i])) { p->err = "bad number"; return 0; }
        while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) p->i++;
    }
    char tmp[64];
    size_t len = p->i - st;
    char *num = len < sizeof tmp ? tmp : astrndup(p->a, p->s + st, len);
    if (num == tmp) { memcpy(tmp, p->s + st, len); tmp[len] = 0; }
    if (!is_float) {
        errno = 0;
        long long v = strtoll(num, NULL, 10);
        if (errno == 0) { *out = mk_int(v); return 1; }
        /* beyond 64 bits: Python keeps an exact int; we keep the nearest float
         * (documented deviation) */
    }
    *out = mk_float(strtod(num, NULL));
    return 1;
}

static int jp_value(jparse *p, jv *out) {
    jp_ws(p);
    if (p->i >= p->n) { p->err = "unexpected end of JSON"; return 0; }
    if (++p->depth > 500) { p->err = "JSON nested too deeply"; return 0; }
    char c = p->s[p->i];
    int ok = 1;
    if (c == '{') {
        jdict *d = dict_new(p->a);
        p->i++;
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == '}') p->i++;
        else for (;;) {
            jp_ws(p);
            jv k, v;
            if (p->i >= p->n || p->s[p->i] != '"') { p->err = "expected a key string"; ok = 0; break; }
            if (!jp_string(p, &k)) { ok = 0; break; }
            jp_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') { p->err = "expected ':'"; ok = 0; break; }
            p->i++;
            if (!jp_value(p, &v)) { ok = 0; break; }
            dict_set(p->a, d, k, v);
            jp_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == '}') { p->i++; break; }
            p->err = "expected ',' or '}'";
            ok = 0;
            break;
        }
        *out = mk_dict(d);
    } else if (c == '[') {
        jlist *l = list_new(p->a, 4);
        p->i++;
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == ']') p->i++;
        else for (;;) {
            jv v;
            if (!jp_value(p, &v)) { ok = 0; break; }
            list_push(p->a, l, v);
            jp_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == ']') { p->i++; break; }
            p->err = "expected ',' or ']'";
            ok = 0;
            break;
        }
        *out = mk_list(l, 0);
    } else if (c == '"') {
        ok = jp_string(p, out);
    } else if (c == '-' || isdigit((unsigned char)c)) {
        ok = jp_number(p, out);
    } else if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "true", 4)) { p->i += 4; *out = mk_bool(1); }
    else if (p->n - p->i >= 5 && !memcmp(p->s + p->i, "false", 5)) { p->i += 5; *out = mk_bool(0); }
    else if (p->n - p->i >= 4 && !memcmp(p->s + p->i, "null", 4)) { p->i += 4; *out = mk_none(); }
    else { p->err = "unexpected character"; ok = 0; }
    p->depth--;
    return ok;
}

/* Parse a whole JSON text into *out (values in arena a). Returns 1, or 0 with
 * a message in msg. */
static int json_parse(arena *a, const char *s, size_t n, jv *out, char *msg, size_t cap) {
    if (!u8_valid(s, n)) { snprintf(msg, cap, "JSON is not valid UTF-8"); return 0; }
    jparse p = {a, s, n, 0, 0, NULL};
    if (n >= 3 && !memcmp(s, "\xef\xbb\xbf", 3)) p.i = 3;
    if (!jp_value(&p, out)) {
        snprintf(msg, cap, "invalid JSON at byte %zu: %s", p.i, p.err ? p.err : "?");
        return 0;
    }
    jp_ws(&p);
    if (p.i != p.n) { snprintf(msg, cap, "invalid JSON at byte %zu: trailing data", p.i); return 0; }
    return 1;
}

/* ======================================================================
 * lexer
 *
 * Mirrors jinja2/lexer.py. Outside tags the source is data up to the next
 * "{{", "{%" or "{#". A tag opened with "-" strips all whitespace before it;
 * with lstrip_blocks, a block or comment tag ("{%", "{#", not "{{") that is
 * preceded on its line by spaces and tabs only drops them, unless opened with
 * "+". Inside a tag the end marker is recognised only while brackets are
 * balanced; "-%}" eats all following whitespace, and with trim_blocks "%}"
 * and "#}" eat one following newline. Before lexing, newlines are normalised
 * to "\n" and one trailing newline is dropped (keep_trailing_newline=False).
 * ==================================================================== */

typedef enum {
    K_DATA, K_VAR_BEGIN, K_VAR_END, K_BLOCK_BEGIN, K_BLOCK_END,
    K_NAME, K_STRING, K_INT, K_FLOAT, K_OP, K_EOF
} tkind;

typedef struct token {
    uint8_t kind;
    int line;
    const char *s;   /* DATA/NAME/STRING (decoded)/OP text */
    size_t n;
    int64_t i;
    double f;
} token;

typedef struct parser {
    arena *a;
    jmp_buf jb;
    tj_error *err;
    const tj_options *o;
    const char *src;
    size_t n;
    token *tk;
    size_t ntk, captk, pos;
    int depth;
} parser;

static void perr(parser *p, int line, tj_kind k, const char *fmt, ...) __attribute__((format(printf, 4, 5), noreturn));
static void perr(parser *p, int line, tj_kind k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    p->err->kind = k;
    p->err->line = line;
    char m[900];
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(p->err->msg, sizeof p->err->msg, "%s", m);
    longjmp(p->jb, 1);
}

static token *push_tok(parser *p, tkind k, int line, const char *s, size_t n) {
    if (p->ntk == p->captk) {
        size_t cap = p->captk ? p->captk * 2 : 256;
        token *nt = aalloc(p->a, cap * sizeof(token));
        if (p->ntk) memcpy(nt, p->tk, p->ntk * sizeof(token));
        p->tk = nt;
        p->captk = cap;
    }
    token *t = &p->tk[p->ntk++];
    t->kind = (uint8_t)k;
    t->line = line;
    t->s = s;
    t->n = n;
    return t;
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Decode a string literal body with Python's unicode-escape rules (what
 * jinja2 applies to literals); unknown escapes keep their backslash. */
static void lex_string_value(parser *p, const char *s, size_t n, int line, token *t) {
    sbuf b;
    sb_init(&b, p->a);
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\' || i + 1 >= n) { sb_putc(&b, s[i++]); continue; }
        char e = s[i + 1];
        i += 2;
        uint32_t c;
        int nhex = 0;
        switch (e) {
        case '\n': continue;
        case '\\': sb_putc(&b, '\\'); continue;
        case '\'': sb_putc(&b, '\''); continue;
        case '"': sb_putc(&b, '"'); continue;
        case 'a': sb_putc(&b, '\a'); continue;
        case 'b': sb_putc(&b, '\b'); continue;
        case 'f': sb_putc(&b, '\f'); continue;
        case 'n': sb_putc(&b, '\n'); continue;
        case 'r': sb_putc(&b, '\r'); continue;
        case 't': sb_putc(&b, '\t'); continue;
        case 'v': sb_putc(&b, '\v'); continue;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 'N': perr(p, line, TJ_UNSUPPORTED, "\\N{...} escapes in string literals are not supported");
        default:
            if (e >= '0' && e <= '7') {
                c = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++) c = c * 8 + (uint32_t)(s[i++] - '0');
                char u8[4];
                sb_put(&b, u8, (size_t)u8_encode(c, u8));
                continue;
            }
            sb_putc(&b, '\\');
            sb_putc(&b, e);
            continue;
        }
        c = 0;
        for (int k = 0; k < nhex; k++) {
            if (i >= n || !isxdigit((unsigned char)s[i]))
                perr(p, line, TJ_SYNTAX, "truncated \\%c escape in string literal", e);
            char h = s[i++];
            c = c * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
        }
        if (c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            perr(p, line, TJ_UNSUPPORTED, "escape \\%c%0*X in a string literal is not a Unicode scalar value", e, nhex, c);
        char u8[4];
        sb_put(&b, u8, (size_t)u8_encode(c, u8));
    }
    t->s = sb_str(&b);
    t->n = b.n;
}

static const char *const OPS3[] = {"//", "**", "==", "!=", ">=", "<=", NULL};

/* Lex tokens inside a {{ }} or {% %} tag starting at *pos; returns after the
 * end marker. */
static void lex_tag(parser *p, size_t *pos, int *line, int is_block, int *line_starting) {
    const char *s = p->src;
    size_t n = p->n, i = *pos;
    char stack[TJ_MAX_PARSE_DEPTH];
    int sp = 0;
    int start_line = *line;
    for (;;) {
        if (i >= n)
            perr(p, start_line, TJ_SYNTAX, "unexpected end of template, expected '%s'", is_block ? "end of statement block" : "end of print statement");
        if (sp == 0) {
            char e = is_block ? '%' : '}';
            if (is_block && s[i] == '+' && n - i >= 3 && s[i + 1] == '%' && s[i + 2] == '}') {
                push_tok(p, K_BLOCK_END, *line, NULL, 0);
                i += 3;
                *line_starting = 0;
                break;
            }
            if (s[i] == '-' && n - i >= 3 && s[i + 1] == e && s[i + 2] == '}') {
                push_tok(p, is_block ? K_BLOCK_END : K_VAR_END, *line, NULL, 0);
                i += 3;
                size_t w = ws_prefix(s + i, n - i);
                *line += count_nl(s + i, w);
                *line_starting = w > 0 && s[i + w - 1] == '\n';
                i += w;
                break;
            }
            if (s[i] == e && n - i >= 2 && s[i + 1] == '}') {
                push_tok(p, is_block ? K_BLOCK_END : K_VAR_END, *line, NULL, 0);
                i += 2;
                *line_starting = 0;
                if (is_block && p->o->trim_blocks && i < n && s[i] == '\n') {
                    i++;
                    (*line)++;
                    *line_starting = 1;
                }
                break;
            }
        }
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
            if (c == '\n') (*line)++;
            i++;
            continue;
        }
        if (c >= 0x80) { /* Unicode whitespace is whitespace here too (\s) */
            size_t w = ws_prefix(s + i, n - i);
            if (w) { i += w; continue; }
            perr(p, *line, TJ_SYNTAX, "unexpected character in tag");
        }
        if (isdigit(c)) {
            size_t st = i;
            while (i < n && (isdigit((unsigned char)s[i]) || (s[i] == '_' && i + 1 < n && isdigit((unsigned char)s[i + 1])))) i++;
            int is_float = 0;
            /* a float needs digits after the dot ("1." is int then dot) and
             * may not follow a dot itself ("x.0.1" is two subscripts) */
            int after_dot = st > 0 && s[st - 1] == '.';
            if (!after_dot && i + 1 < n && s[i] == '.' && isdigit((unsigned char)s[i + 1])) {
                is_float = 1;
                i++;
                while (i < n && (isdigit((unsigned char)s[i]) || (s[i] == '_' && i + 1 < n && isdigit((unsigned char)s[i + 1])))) i++;
            }
            if (!after_dot && i < n && (s[i] == 'e' || s[i] == 'E')) {
                size_t j = i + 1;
                if (j < n && (s[j] == '+' || s[j] == '-')) j++;
                if (j < n && isdigit((unsigned char)s[j])) {
                    is_float = 1;
                    i = j;
                    while (i < n && (isdigit((unsigned char)s[i]) || (s[i] == '_' && i + 1 < n && isdigit((unsigned char)s[i + 1])))) i++;
                }
            }
            char tmp[128];
            size_t k = 0;
            for (size_t j = st; j < i && k < sizeof tmp - 1; j++)
                if (s[j] != '_') tmp[k++] = s[j];
            tmp[k] = 0;
            token *t = push_tok(p, is_float ? K_FLOAT : K_INT, *line, s + st, i - st);
            if (is_float) t->f = strtod(tmp, NULL);
            else {
                errno = 0;
                t->i = strtoll(tmp, NULL, 10);
                if (errno) perr(p, *line, TJ_UNSUPPORTED, "integer literal %s does not fit in 64 bits", tmp);
            }
            continue;
        }
        if (isalpha(c) || c == '_') {
            size_t st = i;
            while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) i++;
            push_tok(p, K_NAME, *line, astrndup(p->a, s + st, i - st), i - st);
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t st = ++i;
            int l0 = *line;
            while (i < n && s[i] != (char)c) {
                if (s[i] == '\\' && i + 1 < n) i++;
                if (s[i] == '\n') (*line)++;
                i++;
            }
            if (i >= n) perr(p, l0, TJ_SYNTAX, "unexpected end of string literal");
            token *t = push_tok(p, K_STRING, l0, NULL, 0);
            lex_string_value(p, s + st, i - st, l0, t);
            i++;
            continue;
        }
        /* operators: longest match */
        size_t len = 0;
        for (int k = 0; OPS3[k]; k++)
            if (n - i >= 2 && s[i] == OPS3[k][0] && s[i + 1] == OPS3[k][1]) { len = 2; break; }
        if (!len) {
            if (strchr("+-/*%~[](){}<>=.:|,;", c) && c) len = 1;
            else perr(p, *line, TJ_SYNTAX, "unexpected char '%c' at %zu", c >= 0x20 && c < 0x7f ? c : '?', i);
        }
        if (c == '(' || c == '[' || c == '{') {
            if (sp >= TJ_MAX_PARSE_DEPTH) perr(p, *line, TJ_LIMIT, "brackets nested too deeply");
            stack[sp++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (c == ')' || c == ']' || c == '}') {
            if (sp == 0) perr(p, *line, TJ_SYNTAX, "unexpected '%c'", c);
            if (stack[sp - 1] != (char)c) perr(p, *line, TJ_SYNTAX, "unexpected '%c', expected '%c'", c, stack[sp - 1]);
            sp--;
        }
        push_tok(p, K_OP, *line, s + i, len);
        i += len;
    }
    *pos = i;
}

static void lex(parser *p) {
    const char *s = p->src;
    size_t n = p->n, pos = 0;
    int line = 1, line_starting = 1;
    while (pos < n) {
        /* find the next tag opener */
        size_t i = pos;
        const char *hit = NULL;
        while (i + 1 < n) {
            const char *q = memchr(s + i, '{', n - i - 1);
            if (!q) break;
            i = (size_t)(q - s);
            if (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#') { hit = q; break; }
            i++;
        }
        if (!hit) {
            push_tok(p, K_DATA, line, s + pos, n - pos);
            break;
        }
        char kind = s[i + 1];
        char sign = i + 2 < n && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
        size_t tlen = i - pos;
        /* {% raw %}: data up to {% endraw %} */
        int is_raw = 0;
        size_t raw_after = 0;
        if (kind == '%') {
            size_t j = i + 2 + (sign ? 1 : 0);
            j += ws_prefix(s + j, n - j);
            if (n - j >= 3 && !memcmp(s + j, "raw", 3)) {
                size_t k = j + 3;
                k += ws_prefix(s + k, n - k);
                if (n - k >= 3 && s[k] == '-' && s[k + 1] == '%' && s[k + 2] == '}') {
                    is_raw = 1;
                    raw_after = k + 3;
                    raw_after += ws_prefix(s + raw_after, n - raw_after);
                } else if (n - k >= 2 && s[k] == '%' && s[k + 1] == '}') {
                    is_raw = 1;
                    raw_after = k + 2;
                }
            }
        }
        if (sign == '-') {
            tlen = ws_rstrip_len(s + pos, tlen);
        } else if (sign != '+' && p->o->lstrip_blocks && kind != '{') {
            size_t lpos = 0;
            for (size_t k = tlen; k > 0; k--)
                if (s[pos + k - 1] == '\n') { lpos = k; break; }
            if (lpos > 0 || line_starting) {
                int only_ws = 1;
                for (size_t k = lpos; k < tlen; k++)
                    if (s[pos + k] != ' ' && s[pos + k] != '\t') { only_ws = 0; break; }
                if (only_ws) tlen = lpos;
            }
        }
        if (tlen) push_tok(p, K_DATA, line, s + pos, tlen);
        line += count_nl(s + pos, i - pos);
        if (is_raw) {
            /* find {%[-+]? endraw [-+]?%} */
            size_t j = raw_after;
            int found = 0;
            while (j + 1 < n) {
                const char *q = memchr(s + j, '{', n - j - 1);
                if (!q) break;
                j = (size_t)(q - s);
                if (s[j + 1] == '%') {
                    size_t k = j + 2;
                    char esign = k < n && (s[k] == '-' || s[k] == '+') ? s[k] : 0;
                    if (esign) k++;
                    k += ws_prefix(s + k, n - k);
                    if (n - k >= 6 && !memcmp(s + k, "endraw", 6)) {
                        k += 6;
                        k += ws_prefix(s + k, n - k);
                        size_t end = 0;
                        int ls = 0;
                        if (n - k >= 3 && s[k] == '-' && s[k + 1] == '%' && s[k + 2] == '}') {
                            end = k + 3;
                            size_t w = ws_prefix(s + end, n - end);
                            ls = w > 0 && s[end + w - 1] == '\n';
                            end += w;
                        } else if (n - k >= 3 && s[k] == '+' && s[k + 1] == '%' && s[k + 2] == '}') {
                            end = k + 3;
                        } else if (n - k >= 2 && s[k] == '%' && s[k + 1] == '}') {
                            end = k + 2;
                            if (p->o->trim_blocks && end < n && s[end] == '\n') { end++; ls = 1; }
                        }
                        if (end) {
                            size_t rlen = j - raw_after;
                            if (esign == '-') rlen = ws_rstrip_len(s + raw_after, rlen);
                            else if (esign != '+' && p->o->lstrip_blocks) {
                                size_t lpos = 0;
                                for (size_t m = rlen; m > 0; m--)
                                    if (s[raw_after + m - 1] == '\n') { lpos = m; break; }
                                if (lpos > 0) {
                                    int only_ws = 1;
                                    for (size_t m = lpos; m < rlen; m++)
                                        if (s[raw_after + m] != ' ' && s[raw_after + m] != '\t') { only_ws = 0; break; }
                                    if (only_ws) rlen = lpos;
                                }
                            }
                            if (rlen) push_tok(p, K_DATA, line, s + raw_after, rlen);
                            line += count_nl(s + i, end - i);
                            pos = end;
                            line_starting = ls;
                            found = 1;
                            break;
                        }
                    }
                }
                j++;
            }
            if (!found) perr(p, line, TJ_SYNTAX, "missing end of raw directive");
            continue;
        }
        pos = i + 2 + (sign ? 1 : 0);
        line_starting = 0;
        if (kind == '#') {
            size_t j = pos;
            int found = 0;
            while (j + 1 < n) {
                if (s[j] == '+' && n - j >= 3 && s[j + 1] == '#' && s[j + 2] == '}') { j += 3; found = 1; break; }
                if (s[j] == '-' && n - j >= 3 && s[j + 1] == '#' && s[j + 2] == '}') {
                    j += 3;
                    size_t w = ws_prefix(s + j, n - j);
                    j += w;
                    line_starting = w > 0 && s[j - 1] == '\n';
                    found = 1;
                    break;
                }
                if (s[j] == '#' && s[j + 1] == '}') {
                    j += 2;
                    if (p->o->trim_blocks && j < n && s[j] == '\n') { j++; line_starting = 1; }
                    found = 1;
                    break;
                }
                j++;
            }
            if (!found) perr(p, line, TJ_SYNTAX, "missing end of comment tag");
            line += count_nl(s + pos, j - pos);
            pos = j;
            continue;
        }
        push_tok(p, kind == '%' ? K_BLOCK_BEGIN : K_VAR_BEGIN, line, NULL, 0);
        lex_tag(p, &pos, &line, kind == '%', &line_starting);
    }
    push_tok(p, K_EOF, line, NULL, 0);
}

/* ======================================================================
 * parser (grammar and precedence of jinja2/parser.py)
 *
 *   condexpr  := or ('if' or ('else' condexpr)?)*
 *   or        := and ('or' and)*          and := not ('and' not)*
 *   not       := 'not' not | compare
 *   compare   := math1 (('=='|'!='|'<'|...|'in'|'not' 'in') math1)*
 *   math1     := concat (('+'|'-') concat)*
 *   concat    := math2 ('~' math2)*
 *   math2     := pow (('*'|'/'|'//'|'%') pow)*
 *   pow       := unary ('**' unary)*
 *   unary     := ('-'|'+') unary-without-filters | primary postfix* filters/tests
 * ==================================================================== */

typedef enum {
    /* statements */
    S_DATA, S_OUTPUT, S_IF, S_FOR, S_SET, S_SET_ATTR, S_SET_BLOCK, S_MACRO,
    S_BREAK, S_CONTINUE, S_FILTER_BLOCK, S_WITH, S_SCOPE,
    /* expressions */
    E_CONST, E_NAME, E_GETATTR, E_GETITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NOT, E_NEG, E_POS, E_BIN, E_AND, E_OR, E_CMP, E_CONCAT, E_COND,
    E_LIST, E_TUPLE, E_DICT
} ntype;

enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct jnode {
    uint8_t type;
    int line;
    int op;
    const char *name;
    jv val;
    struct jnode *a, *b, *c;
    struct jnode **list;   /* body / args / items / operands / slice parts */
    int n;
    struct jnode **list2;  /* else body / kwarg values / dict values / defaults */
    int n2;
    const char **names;    /* targets / kwarg names / params */
    int nn;
    int *ops;              /* E_CMP operators */
} jnode;

struct tj_template {
    arena a;
    jnode *root; /* S_SCOPE holding the top-level body */
    tj_options o;
};

typedef struct nvec {
    jnode **v;
    int n, cap;
} nvec;

static void nv_push(arena *a, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        jnode **nv = aalloc(a, (size_t)cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

typedef struct svec {
    const char **v;
    int n, cap;
} svec;

static void sv_push(arena *a, svec *v, const char *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        const char **nv = aalloc(a, (size_t)cap * sizeof *nv);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static jnode *mk_node(parser *p, ntype t, int line) {
    jnode *n = aalloc(p->a, sizeof *n);
    n->type = (uint8_t)t;
    n->line = line;
    return n;
}

static token *cur(parser *p) { return &p->tk[p->pos]; }
static token *peek(parser *p, int k) {
    size_t i = p->pos + (size_t)k;
    return i < p->ntk ? &p->tk[i] : &p->tk[p->ntk - 1];
}
static int is_op(token *t, const char *op) { return t->kind == K_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n); }
static int is_name(token *t, const char *nm) { return t->kind == K_NAME && !strcmp(t->s, nm); }

static const char *describe(token *t, char *buf, size_t cap) {
    switch (t->kind) {
    case K_EOF: return "end of template";
    case K_BLOCK_END: return "end of statement block";
    case K_VAR_END: return "end of print statement";
    case K_BLOCK_BEGIN: return "begin of statement block";
    case K_VAR_BEGIN: return "begin of print statement";
    case K_DATA: return "template data";
    case K_STRING: return "string";
    case K_INT: return "integer";
    case K_FLOAT: return "float";
    default:
        snprintf(buf, cap, "%.*s", (int)(t->n > 40 ? 40 : t->n), t->s);
        return buf;
    }
}

static void expect_op(parser *p, const char *op) {
    if (!is_op(cur(p), op)) {
        char b[64];
        perr(p, cur(p)->line, TJ_SYNTAX, "expected token '%s', got '%s'", op, describe(cur(p), b, sizeof b));
    }
    p->pos++;
}

static const char *expect_name(parser *p) {
    if (cur(p)->kind != K_NAME) {
        char b[64];
        perr(p, cur(p)->line, TJ_SYNTAX, "expected a name, got '%s'", describe(cur(p), b, sizeof b));
    }
    return p->tk[p->pos++].s;
}

static void expect_block_end(parser *p) {
    if (cur(p)->kind != K_BLOCK_END) {
        char b[64];
        perr(p, cur(p)->line, TJ_SYNTAX, "expected end of statement block, got '%s'", describe(cur(p), b, sizeof b));
    }
    p->pos++;
}

static void enter(parser *p) {
    if (++p->depth > TJ_MAX_PARSE_DEPTH) perr(p, cur(p)->line, TJ_LIMIT, "template nested too deeply (more than %d levels)", TJ_MAX_PARSE_DEPTH);
}
static void leave(parser *p) { p->depth--; }

static const char *const FILTER_NAMES[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr", NULL};
static const char *const TEST_NAMES[] = {
    "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean",
    "false", "true", "integer", "float", "lower", "upper", "string", "mapping", "number",
    "sequence", "iterable", "callable", "sameas", "escaped", "in", "==", "eq", "equalto", "!=",
    "ne", ">", "gt", "greaterthan", "ge", ">=", "<", "lt", "lessthan", "<=", "le", NULL};

static int in_names(const char *const *tab, const char *s) {
    for (int i = 0; tab[i]; i++)
        if (!strcmp(tab[i], s)) return 1;
    return 0;
}

static jnode *parse_expression(parser *p, int with_condexpr);
static jnode *parse_tuple(parser *p, int simplified, int with_condexpr, const char *extra_end, int explicit_parens);
static jnode *parse_unary(parser *p, int with_filter);
static jnode *parse_primary(parser *p);
static jnode *parse_postfix(parser *p, jnode *node);

static void parse_call_args(parser *p, jnode *n) {
    expect_op(p, "(");
    nvec args = {0}, kwv = {0};
    svec kwn = {0};
    int first = 1;
    while (!is_op(cur(p), ")")) {
        if (!first) {
            expect_op(p, ",");
            if (is_op(cur(p), ")")) break;
        }
        first = 0;
        if (is_op(cur(p), "*") || is_op(cur(p), "**"))
            perr(p, cur(p)->line, TJ_UNSUPPORTED, "*args / **kwargs in calls are not supported");
        if (cur(p)->kind == K_NAME && is_op(peek(p, 1), "=")) {
            const char *k = cur(p)->s;
            p->pos += 2;
            sv_push(p->a, &kwn, k);
            nv_push(p->a, &kwv, parse_expression(p, 1));
        } else {
            if (kwn.n) perr(p, cur(p)->line, TJ_SYNTAX, "invalid syntax for function call expression (positional argument after keyword)");
            nv_push(p->a, &args, parse_expression(p, 1));
        }
    }
    expect_op(p, ")");
    n->list = args.v;
    n->n = args.n;
    n->list2 = kwv.v;
    n->n2 = kwv.n;
    n->names = kwn.v;
    n->nn = kwn.n;
}

static jnode *parse_filter(parser *p, jnode *node, int start_inline) {
    while (is_op(cur(p), "|") || start_inline) {
        if (!start_inline) p->pos++;
        start_inline = 0;
        int line = cur(p)->line;
        const char *name = expect_name(p);
        if (is_op(cur(p), ".")) perr(p, line, TJ_UNSUPPORTED, "dotted filter names are not supported");
        if (!in_names(FILTER_NAMES, name)) perr(p, line, TJ_SYNTAX, "No filter named '%s'.", name);
        jnode *f = mk_node(p, E_FILTER, line);
        f->a = node;
        f->name = name;
        if (is_op(cur(p), "(")) parse_call_args(p, f);
        node = f;
    }
    return node;
}

static jnode *parse_test(parser *p, jnode *node) {
    int line = cur(p)->line;
    p->pos++; /* 'is' */
    int negated = 0;
    if (is_name(cur(p), "not")) { p->pos++; negated = 1; }
    const char *name;
    if (cur(p)->kind == K_NAME) name = expect_name(p);
    else if (cur(p)->kind == K_OP && (is_op(cur(p), "==") || is_op(cur(p), "!=") || is_op(cur(p), "<") || is_op(cur(p), "<=") || is_op(cur(p), ">") || is_op(cur(p), ">="))) {
        perr(p, line, TJ_SYNTAX, "expected a test name after 'is'");
    } else {
        char b[64];
        perr(p, line, TJ_SYNTAX, "expected a test name after 'is', got '%s'", describe(cur(p), b, sizeof b));
    }
    if (!in_names(TEST_NAMES, name)) perr(p, line, TJ_SYNTAX, "No test named '%s'.", name);
    jnode *t = mk_node(p, E_TEST, line);
    t->a = node;
    t->name = name;
    token *c = cur(p);
    if (is_op(c, "(")) {
        parse_call_args(p, t);
    } else if ((c->kind == K_NAME || c->kind == K_STRING || c->kind == K_INT || c->kind == K_FLOAT ||
                is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) perr(p, line, TJ_SYNTAX, "You cannot chain multiple tests with is");
        jnode *arg = parse_postfix(p, parse_primary(p));
        t->list = aalloc(p->a, sizeof(jnode *));
        t->list[0] = arg;
        t->n = 1;
    }
    if (negated) {
        jnode *n = mk_node(p, E_NOT, line);
        n->a = t;
        return n;
    }
    return t;
}

static jnode *parse_subscribed(parser *p) {
    jnode *parts[3] = {NULL, NULL, NULL};
    int line = cur(p)->line;
    if (is_op(cur(p), ":")) {
        p->pos++;
    } else {
        jnode *e = parse_expression(p, 1);
        if (!is_op(cur(p), ":")) return e;
        p->pos++;
        parts[0] = e;
    }
    if (!is_op(cur(p), ":") && !is_op(cur(p), "]") && !is_op(cur(p), ",")) parts[1] = parse_expression(p, 1);
    if (is_op(cur(p), ":")) {
        p->pos++;
        if (!is_op(cur(p), "]") && !is_op(cur(p), ",")) parts[2] = parse_expression(p, 1);
    }
    jnode *s = mk_node(p, E_SLICE, line);
    s->list = aalloc(p->a, 3 * sizeof(jnode *));
    memcpy(s->list, parts, sizeof parts);
    s->n = 3;
    return s;
}

static jnode *parse_postfix(parser *p, jnode *node) {
    for (;;) {
        token *t = cur(p);
        if (is_op(t, ".")) {
            p->pos++;
            token *a = cur(p);
            if (a->kind == K_NAME) {
                jnode *g = mk_node(p, E_GETATTR, a->line);
                g->a = node;
                g->name = a->s;
                p->pos++;
                node = g;
            } else if (a->kind == K_INT) {
                jnode *g = mk_node(p, E_GETITEM, a->line);
                g->a = node;
                g->b = mk_node(p, E_CONST, a->line);
                g->b->val = mk_int(a->i);
                p->pos++;
                node = g;
            } else {
                perr(p, a->line, TJ_SYNTAX, "expected name or number");
            }
        } else if (is_op(t, "[")) {
            p->pos++;
            nvec args = {0};
            while (!is_op(cur(p), "]")) {
                if (args.n) expect_op(p, ",");
                if (is_op(cur(p), "]")) break;
                nv_push(p->a, &args, parse_subscribed(p));
            }
            expect_op(p, "]");
            if (args.n == 0) perr(p, t->line, TJ_SYNTAX, "expected an expression inside []");
            jnode *g;
            if (args.n == 1 && args.v[0]->type == E_SLICE) {
                g = args.v[0];
                g->a = node;
            } else {
                g = mk_node(p, E_GETITEM, t->line);
                g->a = node;
                if (args.n == 1) g->b = args.v[0];
                else {
                    for (int i = 0; i < args.n; i++)
                        if (args.v[i]->type == E_SLICE) perr(p, t->line, TJ_UNSUPPORTED, "multi-dimensional slicing is not supported");
                    g->b = mk_node(p, E_TUPLE, t->line);
                    g->b->list = args.v;
                    g->b->n = args.n;
                }
            }
            node = g;
        } else if (is_op(t, "(")) {
            jnode *c = mk_node(p, E_CALL, t->line);
            c->a = node;
            parse_call_args(p, c);
            node = c;
        } else {
            break;
        }
    }
    return node;
}

static jnode *parse_primary(parser *p) {
    enter(p);
    token *t = cur(p);
    jnode *node;
    if (t->kind == K_NAME) {
        node = mk_node(p, E_CONST, t->line);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) node->val = mk_bool(1);
        else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) node->val = mk_bool(0);
        else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) node->val = mk_none();
        else {
            node->type = E_NAME;
            node->name = t->s;
        }
        p->pos++;
    } else if (t->kind == K_STRING) {
        sbuf b;
        sb_init(&b, p->a);
        while (cur(p)->kind == K_STRING) { /* adjacent literals concatenate */
            sb_put(&b, cur(p)->s, cur(p)->n);
            p->pos++;
        }
        node = mk_node(p, E_CONST, t->line);
        node->val = mk_str(sb_str(&b), b.n);
    } else if (t->kind == K_INT) {
        node = mk_node(p, E_CONST, t->line);
        node->val = mk_int(t->i);
        p->pos++;
    } else if (t->kind == K_FLOAT) {
        node = mk_node(p, E_CONST, t->line);
        node->val = mk_float(t->f);
        p->pos++;
    } else if (is_op(t, "(")) {
        p->pos++;
        node = parse_tuple(p, 0, 1, NULL, 1);
        expect_op(p, ")");
    } else if (is_op(t, "[")) {
        p->pos++;
        nvec items = {0};
        while (!is_op(cur(p), "]")) {
            if (items.n) expect_op(p, ",");
            if (is_op(cur(p), "]")) break;
            nv_push(p->a, &items, parse_expression(p, 1));
        }
        expect_op(p, "]");
        node = mk_node(p, E_LIST, t->line);
        node->list = items.v;
        node->n = items.n;
    } else if (is_op(t, "{")) {
        p->pos++;
        nvec ks = {0}, vs = {0};
        while (!is_op(cur(p), "}")) {
            if (ks.n) expect_op(p, ",");
            if (is_op(cur(p), "}")) break;
            nv_push(p->a, &ks, parse_expression(p, 1));
            expect_op(p, ":");
            nv_push(p->a, &vs, parse_expression(p, 1));
        }
        expect_op(p, "}");
        node = mk_node(p, E_DICT, t->line);
        node->list = ks.v;
        node->n = ks.n;
        node->list2 = vs.v;
        node->n2 = vs.n;
    } else {
        char b[64];
        perr(p, t->line, TJ_SYNTAX, "unexpected '%s'", describe(t, b, sizeof b));
    }
    leave(p);
    return node;
}

static jnode *parse_unary(parser *p, int with_filter) {
    enter(p);
    token *t = cur(p);
    jnode *node;
    if (is_op(t, "-") || is_op(t, "+")) {
        p->pos++;
        node = mk_node(p, is_op(t, "-") ? E_NEG : E_POS, t->line);
        node->a = parse_unary(p, 0);
    } else {
        node = parse_primary(p);
    }
    node = parse_postfix(p, node);
    if (with_filter) {
        for (;;) {
            if (is_op(cur(p), "|")) node = parse_filter(p, node, 0);
            else if (is_name(cur(p), "is")) node = parse_test(p, node);
            else if (is_op(cur(p), "(")) {
                jnode *c = mk_node(p, E_CALL, cur(p)->line);
                c->a = node;
                parse_call_args(p, c);
                node = c;
            } else break;
        }
    }
    leave(p);
    return node;
}

static jnode *mk_bin(parser *p, int op, jnode *a, jnode *b, int line) {
    jnode *n = mk_node(p, E_BIN, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *p) {
    jnode *l = parse_unary(p, 1);
    while (is_op(cur(p), "**")) {
        int line = cur(p)->line;
        p->pos++;
        l = mk_bin(p, OP_POW, l, parse_unary(p, 1), line);
    }
    return l;
}

static jnode *parse_math2(parser *p) {
    jnode *l = parse_pow(p);
    for (;;) {
        token *t = cur(p);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : 0;
        if (!op) break;
        p->pos++;
        l = mk_bin(p, op, l, parse_pow(p), t->line);
    }
    return l;
}

static jnode *parse_concat(parser *p) {
    jnode *first = parse_math2(p);
    if (!is_op(cur(p), "~")) return first;
    nvec args = {0};
    nv_push(p->a, &args, first);
    int line = cur(p)->line;
    while (is_op(cur(p), "~")) {
        p->pos++;
        nv_push(p->a, &args, parse_math2(p));
    }
    jnode *n = mk_node(p, E_CONCAT, line);
    n->list = args.v;
    n->n = args.n;
    return n;
}

static jnode *parse_math1(parser *p) {
    jnode *l = parse_concat(p);
    for (;;) {
        token *t = cur(p);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!op) break;
        p->pos++;
        l = mk_bin(p, op, l, parse_concat(p), t->line);
    }
    return l;
}

static jnode *parse_compare(parser *p) {
    int line = cur(p)->line;
    jnode *e = parse_math1(p);
    nvec operands = {0};
    int ops[64], nops = 0;
    for (;;) {
        token *t = cur(p);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE :
                 is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : 0;
        if (op) p->pos++;
        else if (is_name(t, "not") && is_name(peek(p, 1), "in")) { p->pos += 2; op = OP_NOTIN; }
        else break;
        if (nops == 64) perr(p, t->line, TJ_LIMIT, "comparison chain too long");
        ops[nops++] = op;
        nv_push(p->a, &operands, parse_math1(p));
    }
    if (!nops) return e;
    jnode *n = mk_node(p, E_CMP, line);
    n->a = e;
    n->list = operands.v;
    n->n = operands.n;
    n->ops = aalloc(p->a, (size_t)nops * sizeof(int));
    memcpy(n->ops, ops, (size_t)nops * sizeof(int));
    return n;
}

static jnode *parse_not(parser *p) {
    if (is_name(cur(p), "not")) {
        int line = cur(p)->line;
        p->pos++;
        enter(p);
        jnode *n = mk_node(p, E_NOT, line);
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

static jnode *parse_and(parser *p) {
    jnode *l = parse_not(p);
    while (is_name(cur(p), "and")) {
        int line = cur(p)->line;
        p->pos++;
        jnode *n = mk_node(p, E_AND, line);
        n->a = l;
        n->b = parse_not(p);
        l = n;
    }
    return l;
}

static jnode *parse_or(parser *p) {
    jnode *l = parse_and(p);
    while (is_name(cur(p), "or")) {
        int line = cur(p)->line;
        p->pos++;
        jnode *n = mk_node(p, E_OR, line);
        n->a = l;
        n->b = parse_and(p);
        l = n;
    }
    return l;
}

static jnode *parse_condexpr(parser *p) {
    int line = cur(p)->line;
    jnode *e1 = parse_or(p);
    while (is_name(cur(p), "if")) {
        p->pos++;
        enter(p);
        jnode *n = mk_node(p, E_COND, line);
        n->b = e1;
        n->a = parse_or(p);
        if (is_name(cur(p), "else")) {
            p->pos++;
            n->c = parse_condexpr(p);
        }
        leave(p);
        e1 = n;
        line = cur(p)->line;
    }
    return e1;
}

static jnode *parse_expression(parser *p, int with_condexpr) {
    enter(p);
    jnode *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    leave(p);
    return n;
}

static int is_tuple_end(parser *p, const char *extra_end) {
    token *t = cur(p);
    if (t->kind == K_VAR_END || t->kind == K_BLOCK_END || t->kind == K_EOF || is_op(t, ")")) return 1;
    return extra_end && is_name(t, extra_end);
}

static jnode *parse_tuple(parser *p, int simplified, int with_condexpr, const char *extra_end, int explicit_parens) {
    int line = cur(p)->line;
    nvec args = {0};
    int is_tuple = 0;
    for (;;) {
        if (args.n) expect_op(p, ",");
        if (is_tuple_end(p, extra_end)) break;
        jnode *e = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        nv_push(p->a, &args, e);
        if (is_op(cur(p), ",")) is_tuple = 1;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char b[64];
            perr(p, line, TJ_SYNTAX, "Expected an expression, got '%s'", describe(cur(p), b, sizeof b));
        }
    }
    jnode *t = mk_node(p, E_TUPLE, line);
    t->list = args.v;
    t->n = args.n;
    return t;
}

/* Names to assign: "x", "a, b" or "(a, b)". */
static void parse_targets(parser *p, const char *extra_end, svec *out) {
    jnode *t = parse_tuple(p, 1, 0, extra_end, 0);
    if (t->type == E_NAME) { sv_push(p->a, out, t->name); return; }
    if (t->type == E_TUPLE) {
        for (int i = 0; i < t->n; i++) {
            if (t->list[i]->type != E_NAME)
                perr(p, t->line, t->list[i]->type == E_TUPLE ? TJ_UNSUPPORTED : TJ_SYNTAX, "can't assign to this target (nested tuples are not supported)");
            sv_push(p->a, out, t->list[i]->name);
        }
        if (t->n == 0) perr(p, t->line, TJ_SYNTAX, "can't assign to an empty tuple");
        return;
    }
    perr(p, t->line, TJ_SYNTAX, "can't assign to this target");
}

static jnode **parse_body(parser *p, const char *const *ends, int *n_out, const char **which, int loop_depth);

static jnode *parse_statement(parser *p, int loop_depth) {
    token *t = cur(p);
    int line = t->line;
    if (t->kind != K_NAME) perr(p, line, TJ_SYNTAX, "tag name expected");
    const char *nm = t->s;
    p->pos++;
    enter(p);
    jnode *n = NULL;
    const char *which = NULL;
    if (!strcmp(nm, "if")) {
        n = mk_node(p, S_IF, line);
        n->a = parse_tuple(p, 0, 0, NULL, 0);
        expect_block_end(p);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        n->list = parse_body(p, ends, &n->n, &which, loop_depth);
        jnode *last = n;
        while (!strcmp(which, "elif")) {
            int l2 = cur(p)->line;
            p->pos++;
            jnode *e = mk_node(p, S_IF, l2);
            e->a = parse_tuple(p, 0, 0, NULL, 0);
            expect_block_end(p);
            e->list = parse_body(p, ends, &e->n, &which, loop_depth);
            last->list2 = aalloc(p->a, sizeof(jnode *));
            last->list2[0] = e;
            last->n2 = 1;
            last = e;
        }
        if (!strcmp(which, "else")) {
            p->pos++;
            expect_block_end(p);
            static const char *const ends2[] = {"endif", NULL};
            last->list2 = parse_body(p, ends2, &last->n2, &which, loop_depth);
        }
        p->pos++; /* endif */
        expect_block_end(p);
    } else if (!strcmp(nm, "for")) {
        n = mk_node(p, S_FOR, line);
        svec tg = {0};
        parse_targets(p, "in", &tg);
        n->names = tg.v;
        n->nn = tg.n;
        if (!is_name(cur(p), "in")) perr(p, cur(p)->line, TJ_SYNTAX, "expected 'in' in for loop");
        p->pos++;
        n->a = parse_tuple(p, 0, 0, "recursive", 0);
        if (is_name(cur(p), "if")) {
            p->pos++;
            n->b = parse_expression(p, 1);
        }
        if (is_name(cur(p), "recursive")) perr(p, cur(p)->line, TJ_UNSUPPORTED, "recursive for loops are not supported");
        expect_block_end(p);
        static const char *const ends[] = {"endfor", "else", NULL};
        n->list = parse_body(p, ends, &n->n, &which, loop_depth + 1);
        if (!strcmp(which, "else")) {
            p->pos++;
            expect_block_end(p);
            static const char *const ends2[] = {"endfor", NULL};
            n->list2 = parse_body(p, ends2, &n->n2, &which, loop_depth);
        }
        p->pos++;
        expect_block_end(p);
    } else if (!strcmp(nm, "set")) {
        if (cur(p)->kind == K_NAME && is_op(peek(p, 1), ".") && peek(p, 2)->kind == K_NAME) {
            n = mk_node(p, S_SET_ATTR, line);
            n->name = cur(p)->s;
            p->pos += 2;
            n->names = aalloc(p->a, sizeof(char *));
            n->names[0] = cur(p)->s;
            n->nn = 1;
            p->pos++;
            expect_op(p, "=");
            n->a = parse_tuple(p, 0, 1, NULL, 0);
            expect_block_end(p);
        } else {
            svec tg = {0};
            parse_targets(p, NULL, &tg);
            if (is_op(cur(p), "=")) {
                p->pos++;
                n = mk_node(p, S_SET, line);
                n->names = tg.v;
                n->nn = tg.n;
                n->a = parse_tuple(p, 0, 1, NULL, 0);
                expect_block_end(p);
            } else {
                if (tg.n != 1) perr(p, line, TJ_SYNTAX, "a block set needs a single name");
                n = mk_node(p, S_SET_BLOCK, line);
                n->names = tg.v;
                n->nn = 1;
                if (is_op(cur(p), "|")) n->a = parse_filter(p, NULL, 0);
                expect_block_end(p);
                static const char *const ends[] = {"endset", NULL};
                n->list = parse_body(p, ends, &n->n, &which, 0);
                p->pos++;
                expect_block_end(p);
            }
        }
    } else if (!strcmp(nm, "macro")) {
        n = mk_node(p, S_MACRO, line);
        n->name = expect_name(p);
        expect_op(p, "(");
        svec params = {0};
        nvec defs = {0};
        while (!is_op(cur(p), ")")) {
            if (params.n) expect_op(p, ",");
            if (is_op(cur(p), ")")) break;
            sv_push(p->a, &params, expect_name(p));
            if (is_op(cur(p), "=")) {
                p->pos++;
                nv_push(p->a, &defs, parse_expression(p, 1));
            } else {
                if (defs.n && defs.v[defs.n - 1]) perr(p, line, TJ_SYNTAX, "non-default argument follows default argument");
                nv_push(p->a, &defs, NULL);
            }
        }
        expect_op(p, ")");
        expect_block_end(p);
        n->names = params.v;
        n->nn = params.n;
        n->list2 = defs.v;
        n->n2 = defs.n;
        static const char *const ends[] = {"endmacro", NULL};
        n->list = parse_body(p, ends, &n->n, &which, 0);
        p->pos++;
        if (cur(p)->kind == K_NAME) p->pos++; /* {% endmacro name %} */
        expect_block_end(p);
    } else if (!strcmp(nm, "break") || !strcmp(nm, "continue")) {
        if (loop_depth == 0) perr(p, line, TJ_SYNTAX, "'%s' outside of a loop", nm);
        n = mk_node(p, nm[0] == 'b' ? S_BREAK : S_CONTINUE, line);
        expect_block_end(p);
    } else if (!strcmp(nm, "filter")) {
        n = mk_node(p, S_FILTER_BLOCK, line);
        n->a = parse_filter(p, NULL, 1);
        expect_block_end(p);
        static const char *const ends[] = {"endfilter", NULL};
        n->list = parse_body(p, ends, &n->n, &which, loop_depth);
        p->pos++;
        expect_block_end(p);
    } else if (!strcmp(nm, "with")) {
        n = mk_node(p, S_WITH, line);
        svec names = {0};
        nvec vals = {0};
        while (cur(p)->kind != K_BLOCK_END) {
            if (names.n) expect_op(p, ",");
            sv_push(p->a, &names, expect_name(p));
            expect_op(p, "=");
            nv_push(p->a, &vals, parse_expression(p, 1));
        }
        expect_block_end(p);
        n->names = names.v;
        n->nn = names.n;
        n->list2 = vals.v;
        n->n2 = vals.n;
        static const char *const ends[] = {"endwith", NULL};
        n->list = parse_body(p, ends, &n->n, &which, loop_depth);
        p->pos++;
        expect_block_end(p);
    } else if (!strcmp(nm, "generation") || !strcmp(nm, "block")) {
        /* {% generation %}: transformers' AssistantTracker marks assistant
         * spans, rendering is unaffected. {% block %} without inheritance
         * renders in place. */
        n = mk_node(p, S_SCOPE, line);
        if (nm[0] == 'b') {
            expect_name(p);
            if (is_name(cur(p), "scoped") || is_name(cur(p), "required")) perr(p, line, TJ_UNSUPPORTED, "scoped/required blocks are not supported");
        }
        expect_block_end(p);
        static const char *const ends_g[] = {"endgeneration", NULL}, *const ends_b[] = {"endblock", NULL};
        n->list = parse_body(p, nm[0] == 'b' ? ends_b : ends_g, &n->n, &which, loop_depth);
        p->pos++;
        if (nm[0] == 'b' && cur(p)->kind == K_NAME) p->pos++;
        expect_block_end(p);
    } else if (!strcmp(nm, "extends") || !strcmp(nm, "include") || !strcmp(nm, "import") ||
               !strcmp(nm, "from") || !strcmp(nm, "call") || !strcmp(nm, "autoescape")) {
        perr(p, line, TJ_UNSUPPORTED, "the '%s' tag is not supported", nm);
    } else {
        perr(p, line, TJ_SYNTAX, "Encountered unknown tag '%s'.", nm);
    }
    leave(p);
    return n;
}

static jnode **parse_body(parser *p, const char *const *ends, int *n_out, const char **which, int loop_depth) {
    nvec body = {0};
    int start_line = cur(p)->line;
    enter(p);
    for (;;) {
        token *t = cur(p);
        if (t->kind == K_EOF) {
            if (ends && ends[0]) {
                char want[200] = "";
                for (int i = 0; ends[i]; i++) {
                    size_t l = strlen(want);
                    snprintf(want + l, sizeof want - l, "%s'%s'", i ? " or " : "", ends[i]);
                }
                perr(p, start_line, TJ_SYNTAX, "Unexpected end of template. Jinja was looking for the following tags: %s.", want);
            }
            break;
        }
        if (t->kind == K_DATA) {
            jnode *d = mk_node(p, S_DATA, t->line);
            d->val = mk_str(t->s, t->n);
            nv_push(p->a, &body, d);
            p->pos++;
        } else if (t->kind == K_VAR_BEGIN) {
            p->pos++;
            jnode *o = mk_node(p, S_OUTPUT, t->line);
            o->a = parse_tuple(p, 0, 1, NULL, 0);
            if (cur(p)->kind != K_VAR_END) {
                char b[64];
                perr(p, cur(p)->line, TJ_SYNTAX, "expected token 'end of print statement', got '%s'", describe(cur(p), b, sizeof b));
            }
            p->pos++;
            nv_push(p->a, &body, o);
        } else if (t->kind == K_BLOCK_BEGIN) {
            p->pos++;
            token *nt = cur(p);
            if (nt->kind == K_NAME && ends) {
                int hit = 0;
                for (int i = 0; ends[i]; i++)
                    if (!strcmp(ends[i], nt->s)) { *which = ends[i]; hit = 1; }
                if (hit) break;
            }
            if (nt->kind == K_NAME && (!strncmp(nt->s, "end", 3) || !strcmp(nt->s, "else") || !strcmp(nt->s, "elif")))
                perr(p, nt->line, TJ_SYNTAX, "Encountered unknown tag '%s'.", nt->s);
            nv_push(p->a, &body, parse_statement(p, loop_depth));
        } else {
            perr(p, t->line, TJ_SYNTAX, "unexpected token");
        }
    }
    leave(p);
    *n_out = body.n;
    return body.v;
}

/* ======================================================================
 * runtime
 * ==================================================================== */

typedef struct frame {
    struct frame *parent;
    const char **names;
    jv *vals;
    int n, cap;
} frame;

typedef struct loopst {
    jlist *items;
    size_t idx;
} loopst;

typedef struct bmethod {
    jv self;
    const char *name;
} bmethod;

typedef struct macro {
    jnode *def;
    frame *closure;
} macro;

enum { F_RANGE = 1, F_NAMESPACE, F_DICT, F_RAISE, F_STRFTIME, F_LIPSUM, F_CYCLER, F_JOINER };

typedef struct rt {
    arena *a;
    jmp_buf jb;
    tj_error *err;
    sbuf *out;
    int line;
    int call_depth;
    int depth;          /* eval / exec / filter-chain frames on the C stack now */
    long steps, max_steps;
} rt;

static void rerr(rt *r, tj_kind k, const char *fmt, ...) __attribute__((format(printf, 3, 4), noreturn));
static void rerr(rt *r, tj_kind k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    r->err->kind = k;
    r->err->line = r->line;
    vsnprintf(r->err->msg, sizeof r->err->msg, fmt, ap);
    va_end(ap);
    longjmp(r->jb, 1);
}

static void raise_undef(rt *r, jv u) __attribute__((noreturn));
static void raise_undef(rt *r, jv u) { rerr(r, TJ_UNDEFINED, "%s", u.u.s ? u.u.s : "undefined value"); }

static void step(rt *r) {
    if (++r->steps > r->max_steps) rerr(r, TJ_LIMIT, "template ran too long (more than %ld loop iterations and calls)", r->max_steps);
}

static jv undef_fmt(rt *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static jv undef_fmt(rt *r, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return mk_undef(astrndup(r->a, tmp, strlen(tmp)));
}

/* Python repr of a str key/name, short (for messages). */
static void repr_str(sbuf *b, const char *s, size_t n);

static jv undef_attr(rt *r, jv obj, const char *name, size_t nlen) {
    sbuf b;
    sb_init(&b, r->a);
    sb_putc(&b, '\'');
    sb_puts(&b, v_objrepr(obj));
    sb_puts(&b, "' has no attribute ");
    repr_str(&b, name, nlen);
    return mk_undef(sb_str(&b));
}

/* ---- str() and repr() ---- */

static void repr_str(sbuf *b, const char *s, size_t n) {
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sb_putc(b, q);
    for (size_t i = 0; i < n;) {
        size_t st = i;
        uint32_t c = u8_next(s, n, &i);
        if (c == (uint32_t)q || c == '\\') { sb_putc(b, '\\'); sb_putc(b, (char)c); }
        else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\r') sb_puts(b, "\\r");
        else if (c == '\t') sb_puts(b, "\\t");
        else if (py_isprintable(c)) sb_put(b, s + st, i - st);
        else if (c <= 0xff) sb_printf(b, "\\x%02x", c);
        else if (c <= 0xffff) sb_printf(b, "\\u%04x", c);
        else sb_printf(b, "\\U%08x", c);
    }
    sb_putc(b, q);
}

static void put_repr(rt *r, sbuf *b, jv v, int depth);

static void put_str(rt *r, sbuf *b, jv v, int depth) {
    char tmp[64];
    switch (v.t) {
    case V_UNDEF: return;
    case V_NONE: sb_puts(b, "None"); return;
    case V_BOOL: sb_puts(b, v.u.i ? "True" : "False"); return;
    case V_INT: sb_printf(b, "%lld", (long long)v.u.i); return;
    case V_FLOAT: fmt_pyfloat(v.u.f, tmp, sizeof tmp, 0); sb_puts(b, tmp); return;
    case V_STR: sb_put(b, v.u.s, v.n); return;
    default: put_repr(r, b, v, depth); return;
    }
}

static void put_repr(rt *r, sbuf *b, jv v, int depth) {
    if (depth > 200) rerr(r, TJ_LIMIT, "value nested too deeply to print");
    switch (v.t) {
    case V_STR:
        if (v.flag) { sb_puts(b, "Markup("); repr_str(b, v.u.s, v.n); sb_putc(b, ')'); }
        else repr_str(b, v.u.s, v.n);
        return;
    case V_UNDEF: sb_puts(b, "Undefined"); return;
    case V_LIST: {
        sb_putc(b, v.flag ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_puts(b, ", ");
            put_repr(r, b, v.u.l->v[i], depth + 1);
        }
        if (v.flag && v.u.l->n == 1) sb_putc(b, ',');
        sb_putc(b, v.flag ? ')' : ']');
        return;
    }
    case V_DICT: case V_NS: {
        if (v.t == V_NS) sb_puts(b, "<Namespace ");
        sb_putc(b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) sb_puts(b, ", ");
            put_repr(r, b, v.u.d->k[i], depth + 1);
            sb_puts(b, ": ");
            put_repr(r, b, v.u.d->v[i], depth + 1);
        }
        sb_putc(b, '}');
        if (v.t == V_NS) sb_putc(b, '>');
        return;
    }
    case V_MACRO: sb_printf(b, "<Macro '%s'>", v.u.mac->def->name); return;
    case V_FUNC: sb_puts(b, "<function>"); return;
    case V_METHOD: sb_printf(b, "<built-in method %s of %s>", v.u.bm->name, v_objrepr(v.u.bm->self)); return;
    case V_LOOP: sb_puts(b, "<LoopContext>"); return;
    default: put_str(r, b, v, depth); return;
    }
}

static jv to_str(rt *r, jv v) {
    if (v.t == V_STR) { v.flag = 0; return v; }
    sbuf b;
    sb_init(&b, r->a);
    put_str(r, &b, v, 0);
    return mk_str(sb_str(&b), b.n);
}

/* ---- json.dumps ---- */

typedef struct jsonopt {
    int ensure_ascii;
    int indent;           /* -1: none */
    const char *indent_s; /* indent given as a string */
    size_t indent_n;
    const char *item_sep, *key_sep;
    size_t item_n, key_n;
    int sort_keys;
} jsonopt;

static void json_str(sbuf *b, const char *s, size_t n, int ensure_ascii) {
    sb_putc(b, '"');
    for (size_t i = 0; i < n;) {
        size_t st = i;
        uint32_t c = u8_next(s, n, &i);
        switch (c) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (c < 0x20) sb_printf(b, "\\u%04x", c);
            else if (c >= 0x7f && ensure_ascii) {
                if (c >= 0x10000) {
                    uint32_t v = c - 0x10000;
                    sb_printf(b, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
                } else sb_printf(b, "\\u%04x", c);
            } else sb_put(b, s + st, i - st);
        }
    }
    sb_putc(b, '"');
}

static void json_newline(sbuf *b, const jsonopt *o, int level) {
    sb_putc(b, '\n');
    for (int i = 0; i < level; i++) {
        if (o->indent_s) sb_put(b, o->indent_s, o->indent_n);
        else for (int k = 0; k < o->indent; k++) sb_putc(b, ' ');
    }
}

static void merge_sort(rt *r, jv *v, size_t n, jv *keys, int (*cmp)(rt *, jv, jv, void *), void *ctx);
static int cmp_sort_keys(rt *r, jv a, jv b, void *ctx);

static void json_dump(rt *r, sbuf *b, jv v, const jsonopt *o, int level) {
    char tmp[64];
    if (level > 200) rerr(r, TJ_TYPE, "value nested too deeply for tojson");
    switch (v.t) {
    case V_NONE: sb_puts(b, "null"); return;
    case V_BOOL: sb_puts(b, v.u.i ? "true" : "false"); return;
    case V_INT: sb_printf(b, "%lld", (long long)v.u.i); return;
    case V_FLOAT: fmt_pyfloat(v.u.f, tmp, sizeof tmp, 1); sb_puts(b, tmp); return;
    case V_STR: json_str(b, v.u.s, v.n, o->ensure_ascii); return;
    case V_LIST: {
        if (v.u.l->n == 0) { sb_puts(b, "[]"); return; }
        sb_putc(b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) sb_put(b, o->item_sep, o->item_n);
            if (o->indent >= 0) json_newline(b, o, level + 1);
            json_dump(r, b, v.u.l->v[i], o, level + 1);
        }
        if (o->indent >= 0) json_newline(b, o, level);
        sb_putc(b, ']');
        return;
    }
    case V_DICT: {
        jdict *d = v.u.d;
        if (d->n == 0) { sb_puts(b, "{}"); return; }
        size_t *order = aalloc(r->a, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            jv *ks = aalloc(r->a, d->n * sizeof(jv)), *idx = aalloc(r->a, d->n * sizeof(jv));
            for (size_t i = 0; i < d->n; i++) {
                ks[i] = d->k[i];
                if (ks[i].t != V_STR) rerr(r, TJ_TYPE, "'<' not supported between instances of '%s' and 'str'", v_typename(ks[i]));
                idx[i] = mk_int((int64_t)i);
            }
            merge_sort(r, idx, d->n, ks, cmp_sort_keys, NULL);
            for (size_t i = 0; i < d->n; i++) order[i] = (size_t)idx[i].u.i;
        }
        sb_putc(b, '{');
        for (size_t j = 0; j < d->n; j++) {
            size_t i = order[j];
            if (j) sb_put(b, o->item_sep, o->item_n);
            if (o->indent >= 0) json_newline(b, o, level + 1);
            jv k = d->k[i];
            switch (k.t) {
            case V_STR: json_str(b, k.u.s, k.n, o->ensure_ascii); break;
            case V_NONE: sb_puts(b, "\"null\""); break;
            case V_BOOL: sb_puts(b, k.u.i ? "\"true\"" : "\"false\""); break;
            case V_INT: sb_printf(b, "\"%lld\"", (long long)k.u.i); break;
            case V_FLOAT: fmt_pyfloat(k.u.f, tmp, sizeof tmp, 1); sb_printf(b, "\"%s\"", tmp); break;
            default: rerr(r, TJ_TYPE, "keys must be str, int, float, bool or None, not %s", v_typename(k));
            }
            sb_put(b, o->key_sep, o->key_n);
            json_dump(r, b, d->v[i], o, level + 1);
        }
        if (o->indent >= 0) json_newline(b, o, level);
        sb_putc(b, '}');
        return;
    }
    default:
        rerr(r, TJ_TYPE, "Object of type %s is not JSON serializable", v_typename(v));
    }
}

/* ---- frames ---- */

static frame *frame_new(rt *r, frame *parent) {
    frame *f = aalloc(r->a, sizeof *f);
    f->parent = parent;
    return f;
}

static void frame_set(rt *r, frame *f, const char *name, jv v) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->names[i], name)) { f->vals[i] = v; return; }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 8;
        const char **nn = aalloc(r->a, (size_t)cap * sizeof *nn);
        jv *nv = aalloc(r->a, (size_t)cap * sizeof *nv);
        if (f->n) {
            memcpy(nn, f->names, (size_t)f->n * sizeof *nn);
            memcpy(nv, f->vals, (size_t)f->n * sizeof *nv);
        }
        f->names = nn;
        f->vals = nv;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n] = v;
    f->n++;
}

static int frame_get(frame *f, const char *name, jv *out) {
    for (; f; f = f->parent)
        for (int i = f->n - 1; i >= 0; i--)
            if (!strcmp(f->names[i], name)) { *out = f->vals[i]; return 1; }
    return 0;
}

/* ---- comparisons and arithmetic (Python semantics) ---- */

static const char *OPNAME[] = {"", "+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=", ">", ">=", "in", "not in"};

/* v_eq for the evaluator: a comparison too deep to finish is a LimitError. */
static int v_eqr(rt *r, jv a, jv b) {
    int e = v_eq_d(a, b, 0);
    if (e < 0) rerr(r, TJ_LIMIT, "values nested too deeply to compare (more than %d levels)", TJ_MAX_VALUE_DEPTH);
    return e;
}

/* -1/0/1 for a < b; raises TypeError where Python would. */
static int v_cmp_d(rt *r, jv a, jv b, int op, int depth) {
    if (depth > TJ_MAX_VALUE_DEPTH) rerr(r, TJ_LIMIT, "values nested too deeply to compare (more than %d levels)", TJ_MAX_VALUE_DEPTH);
    if (a.t == V_UNDEF) raise_undef(r, a);
    if (b.t == V_UNDEF) raise_undef(r, b);
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT) return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        double x = num_f(a), y = num_f(b);
        return x < y ? -1 : x > y ? 1 : 0; /* NaN compares as equal here: rare */
    }
    if (a.t == V_STR && b.t == V_STR) {
        size_t m = a.n < b.n ? a.n : b.n;
        int c = m ? memcmp(a.u.s, b.u.s, m) : 0; /* UTF-8 byte order is code point order */
        if (c) return c < 0 ? -1 : 1;
        return a.n < b.n ? -1 : a.n > b.n;
    }
    if (a.t == V_LIST && b.t == V_LIST && a.flag == b.flag) {
        size_t m = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < m; i++) {
            if (v_eqr(r, a.u.l->v[i], b.u.l->v[i])) continue;
            return v_cmp_d(r, a.u.l->v[i], b.u.l->v[i], op, depth + 1);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    rerr(r, TJ_TYPE, "'%s' not supported between instances of '%s' and '%s'", OPNAME[op], v_typename(a), v_typename(b));
}

static int v_cmp(rt *r, jv a, jv b, int op) { return v_cmp_d(r, a, b, op, 0); }

static int str_contains(jv hay, jv needle) {
    if (needle.n == 0) return 1;
    if (needle.n > hay.n) return 0;
    return memmem(hay.u.s, hay.n, needle.u.s, needle.n) != NULL;
}

static int v_in(rt *r, jv item, jv container) {
    switch (container.t) {
    case V_STR:
        if (item.t != V_STR) rerr(r, TJ_TYPE, "'in <string>' requires string as left operand, not %s", v_typename(item));
        return str_contains(container, item);
    case V_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (v_eqr(r, container.u.l->v[i], item)) return 1;
        return 0;
    case V_DICT:
        return dict_find(container.u.d, item) >= 0;
    case V_UNDEF:
        return 0; /* iterating an Undefined yields nothing */
    default:
        rerr(r, TJ_TYPE, "argument of type '%s' is not iterable", v_typename(container));
    }
}

static int64_t floordiv_i(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static jv html_escape(rt *r, jv s);

static jv binop(rt *r, int op, jv a, jv b) {
    if (a.t == V_UNDEF) raise_undef(r, a);
    if (b.t == V_UNDEF) raise_undef(r, b);
    if (op == OP_ADD && a.t == V_STR && b.t == V_STR) {
        /* Markup + str escapes the str (markupsafe); plain str + str joins */
        int safe = a.flag || b.flag;
        if (safe && !a.flag) a = html_escape(r, a);
        if (safe && !b.flag) b = html_escape(r, b);
        if (a.n + b.n < a.n) rerr(r, TJ_LIMIT, "string too long");
        char *p = aalloc(r->a, a.n + b.n + 1);
        if (a.n) memcpy(p, a.u.s, a.n);
        if (b.n) memcpy(p + a.n, b.u.s, b.n);
        jv v = mk_str(p, a.n + b.n);
        v.flag = (uint8_t)safe;
        return v;
    }
    if (op == OP_ADD && a.t == V_LIST && b.t == V_LIST) {
        if (a.flag != b.flag) rerr(r, TJ_TYPE, "can only concatenate %s (not \"%s\") to %s", v_typename(a), v_typename(b), v_typename(a));
        jlist *l = list_new(r->a, a.u.l->n + b.u.l->n);
        for (size_t i = 0; i < a.u.l->n; i++) list_push(r->a, l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) list_push(r->a, l, b.u.l->v[i]);
        return mk_list(l, a.flag);
    }
    if (op == OP_MUL && (((a.t == V_STR || a.t == V_LIST) && (b.t == V_INT || b.t == V_BOOL)) ||
                         ((b.t == V_STR || b.t == V_LIST) && (a.t == V_INT || a.t == V_BOOL)))) {
        jv seq = a.t == V_STR || a.t == V_LIST ? a : b;
        int64_t k = (a.t == V_STR || a.t == V_LIST ? b : a).u.i;
        /* an empty sequence repeated is empty whatever the count: without this,
         * '' * 92 ** 9 looped 4.7e17 times (found by the fuzzer, a timeout) */
        if (k < 0 || (seq.t == V_STR ? seq.n == 0 : seq.u.l->n == 0)) k = 0;
        if (seq.t == V_STR) {
            if (seq.n && (uint64_t)k > (r->a->limit / seq.n)) rerr(r, TJ_LIMIT, "string repetition too large");
            sbuf sb;
            sb_init(&sb, r->a);
            for (int64_t i = 0; i < k; i++) sb_put(&sb, seq.u.s, seq.n);
            return mk_str(sb_str(&sb), sb.n);
        }
        if (seq.u.l->n && (uint64_t)k > (r->a->limit / (seq.u.l->n * sizeof(jv)))) rerr(r, TJ_LIMIT, "list repetition too large");
        jlist *l = list_new(r->a, seq.u.l->n * (size_t)k + 1);
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < seq.u.l->n; j++) list_push(r->a, l, seq.u.l->v[j]);
        return mk_list(l, seq.flag);
    }
    if (op == OP_MOD && a.t == V_STR) rerr(r, TJ_UNSUPPORTED, "printf-style '%%' string formatting is not supported");
    if (!is_num(a) || !is_num(b)) {
        if (op == OP_ADD && a.t == V_STR) rerr(r, TJ_TYPE, "can only concatenate str (not \"%s\") to str", v_typename(b));
        if (op == OP_ADD && a.t == V_LIST && !a.flag) rerr(r, TJ_TYPE, "can only concatenate list (not \"%s\") to list", v_typename(b));
        rerr(r, TJ_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", OPNAME[op], v_typename(a), v_typename(b));
    }
    if (a.t != V_FLOAT && b.t != V_FLOAT && op != OP_DIV) {
        int64_t x = a.u.i, y = b.u.i, z;
        switch (op) {
        case OP_ADD: if (__builtin_add_overflow(x, y, &z)) goto ovf; return mk_int(z);
        case OP_SUB: if (__builtin_sub_overflow(x, y, &z)) goto ovf; return mk_int(z);
        case OP_MUL: if (__builtin_mul_overflow(x, y, &z)) goto ovf; return mk_int(z);
        case OP_FLOORDIV:
            if (y == 0) rerr(r, TJ_TYPE, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) goto ovf;
            return mk_int(floordiv_i(x, y));
        case OP_MOD:
            if (y == 0) rerr(r, TJ_TYPE, "integer division or modulo by zero");
            if (y == -1) return mk_int(0);
            z = x % y;
            if (z != 0 && ((z < 0) != (y < 0))) z += y;
            return mk_int(z);
        case OP_POW: {
            if (y < 0) return mk_float(pow((double)x, (double)y));
            int64_t acc = 1;
            for (int64_t i = 0; i < y; i++) {
                if (__builtin_mul_overflow(acc, x, &acc)) goto ovf;
                if (acc == 0 || acc == 1) break;
                if (acc == -1) { acc = (y - i - 1) % 2 ? -acc : acc; break; }
            }
            return mk_int(acc);
        }
        }
    ovf:
        rerr(r, TJ_UNSUPPORTED, "integer overflow: integers beyond 64 bits are not supported");
    }
    double x = num_f(a), y = num_f(b);
    switch (op) {
    case OP_ADD: return mk_float(x + y);
    case OP_SUB: return mk_float(x - y);
    case OP_MUL: return mk_float(x * y);
    case OP_DIV:
        if (y == 0) rerr(r, TJ_TYPE, "division by zero");
        return mk_float(x / y);
    case OP_FLOORDIV:
        if (y == 0) rerr(r, TJ_TYPE, "float floor division by zero");
        return mk_float(floor(x / y));
    case OP_MOD: {
        if (y == 0) rerr(r, TJ_TYPE, "float modulo");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return mk_float(m);
    }
    case OP_POW: return mk_float(pow(x, y));
    }
    rerr(r, TJ_RUNTIME, "bad operator");
}

/* ---- iteration ---- */

/* Materialise what `for` iterates over: list items, dict keys, characters. */
static jlist *iter_list(rt *r, jv v) {
    switch (v.t) {
    case V_LIST: return v.u.l;
    case V_UNDEF: return list_new(r->a, 1);
    case V_DICT: {
        jlist *l = list_new(r->a, v.u.d->n + 1);
        for (size_t i = 0; i < v.u.d->n; i++) list_push(r->a, l, v.u.d->k[i]);
        return l;
    }
    case V_STR: {
        jlist *l = list_new(r->a, v.n + 1);
        for (size_t i = 0; i < v.n;) {
            size_t st = i;
            u8_next(v.u.s, v.n, &i);
            list_push(r->a, l, mk_str(v.u.s + st, i - st));
        }
        return l;
    }
    default:
        rerr(r, TJ_TYPE, "'%s' object is not iterable", v_typename(v));
    }
}

static size_t v_len(rt *r, jv v) {
    switch (v.t) {
    case V_STR: return u8_count(v.u.s, v.n);
    case V_LIST: return v.u.l->n;
    case V_DICT: return v.u.d->n;
    case V_UNDEF: return 0;
    default: rerr(r, TJ_TYPE, "object of type '%s' has no len()", v_typename(v));
    }
}

/* ---- attribute and item access (sandboxed getattr/getitem) ---- */

static const char *const STR_METHODS[] = {
    "startswith", "endswith", "split", "rsplit", "strip", "lstrip", "rstrip", "replace", "upper",
    "lower", "title", "capitalize", "find", "rfind", "count", "join", "splitlines", "isdigit",
    "isalpha", "isalnum", "isspace", "islower", "isupper", "removeprefix", "removesuffix",
    "format", "index", "rindex", "center", "ljust", "rjust", "zfill", "casefold", "swapcase",
    "partition", "rpartition", "expandtabs", "encode", "isnumeric", "isdecimal", "istitle", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const DICT_UNSAFE[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};
static const char *const LIST_METHODS[] = {"index", "count", "copy", NULL};
static const char *const LIST_UNSAFE[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", NULL};

static jv mk_method(rt *r, jv self, const char *name) {
    bmethod *m = aalloc(r->a, sizeof *m);
    m->self = self;
    m->name = name;
    jv v = {V_METHOD, 0, 0, {.bm = m}};
    return v;
}

static jv loop_attr(rt *r, loopst *L, const char *name, int *found) {
    size_t n = L->items->n, i = L->idx;
    *found = 1;
    if (!strcmp(name, "index")) return mk_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return mk_int((int64_t)i);
    if (!strcmp(name, "revindex")) return mk_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return mk_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return mk_bool(i == 0);
    if (!strcmp(name, "last")) return mk_bool(i + 1 == n);
    if (!strcmp(name, "length")) return mk_int((int64_t)n);
    if (!strcmp(name, "depth")) return mk_int(1);
    if (!strcmp(name, "depth0")) return mk_int(0);
    if (!strcmp(name, "previtem")) return i > 0 ? L->items->v[i - 1] : mk_undef("there is no previous item");
    if (!strcmp(name, "nextitem")) return i + 1 < n ? L->items->v[i + 1] : mk_undef("there is no next item");
    *found = 0;
    return mk_none();
}

static jv getattr_v(rt *r, jv obj, const char *name) {
    size_t nlen = strlen(name);
    if (obj.t == V_UNDEF) raise_undef(r, obj);
    if (name[0] == '_') { /* the sandbox refuses private attributes */
        if (obj.t == V_DICT) {
            jv v;
            if (dict_get_cstr(obj.u.d, name, &v)) return v;
        }
        return undef_fmt(r, "access to attribute '%s' of '%s' object is unsafe.", name, v_typename(obj));
    }
    switch (obj.t) {
    case V_DICT: {
        if (in_names(DICT_METHODS, name)) return mk_method(r, obj, name);
        if (in_names(DICT_UNSAFE, name)) return mk_method(r, obj, name); /* refused when called */
        jv v;
        if (dict_get_cstr(obj.u.d, name, &v)) return v;
        break;
    }
    case V_NS: {
        jv v;
        if (dict_get_cstr(obj.u.d, name, &v)) return v;
        break;
    }
    case V_STR:
        if (in_names(STR_METHODS, name)) return mk_method(r, obj, name);
        break;
    case V_LIST:
        if (in_names(LIST_METHODS, name) || (!obj.flag && in_names(LIST_UNSAFE, name))) return mk_method(r, obj, name);
        break;
    case V_LOOP: {
        int found;
        jv v = loop_attr(r, obj.u.loop, name, &found);
        if (found) return v;
        if (!strcmp(name, "cycle") || !strcmp(name, "changed")) return mk_method(r, obj, name);
        break;
    }
    default: break;
    }
    return undef_attr(r, obj, name, nlen);
}

static jv getitem_v(rt *r, jv obj, jv key) {
    if (obj.t == V_UNDEF) raise_undef(r, obj);
    if (key.t == V_UNDEF && obj.t != V_DICT) return key;
    switch (obj.t) {
    case V_LIST: case V_STR:
        if (key.t == V_INT || key.t == V_BOOL) {
            int64_t n = (int64_t)(obj.t == V_LIST ? obj.u.l->n : u8_count(obj.u.s, obj.n));
            int64_t i = key.u.i < 0 ? key.u.i + n : key.u.i;
            if (i >= 0 && i < n) {
                if (obj.t == V_LIST) return obj.u.l->v[i];
                size_t off = u8_offset(obj.u.s, obj.n, (size_t)i), end = off;
                u8_next(obj.u.s, obj.n, &end);
                return mk_str(obj.u.s + off, end - off);
            }
            return undef_fmt(r, "%s has no element %lld", v_objrepr(obj), (long long)key.u.i);
        }
        break;
    case V_DICT: {
        long i = dict_find(obj.u.d, key);
        if (i >= 0) return obj.u.d->v[i];
        break;
    }
    default: break;
    }
    if (key.t == V_STR) {
        /* jinja2 falls back to getattr with a string key */
        char *nm = astrndup(r->a, key.u.s, key.n);
        if (obj.t == V_DICT) {
            if (in_names(DICT_METHODS, nm)) return mk_method(r, obj, nm);
            return undef_attr(r, obj, key.u.s, key.n);
        }
        return getattr_v(r, obj, nm);
    }
    sbuf b;
    sb_init(&b, r->a);
    sb_printf(&b, "%s has no element ", v_objrepr(obj));
    put_repr(r, &b, key, 0);
    return mk_undef(sb_str(&b));
}

static int64_t slice_index(rt *r, jv v, int *is_none) {
    *is_none = 0;
    if (v.t == V_NONE) { *is_none = 1; return 0; }
    if (v.t == V_INT || v.t == V_BOOL) return v.u.i;
    if (v.t == V_UNDEF) raise_undef(r, v);
    rerr(r, TJ_TYPE, "slice indices must be integers or None");
}

static jv slice_v(rt *r, jv obj, jv start, jv stop, jv stepv) {
    if (obj.t == V_UNDEF) raise_undef(r, obj);
    if (obj.t != V_LIST && obj.t != V_STR) return undef_fmt(r, "%s has no element slice", v_objrepr(obj));
    int sn, en, tn;
    int64_t st = slice_index(r, start, &sn), en_ = slice_index(r, stop, &en), stp = slice_index(r, stepv, &tn);
    if (tn) stp = 1;
    if (stp == 0) rerr(r, TJ_TYPE, "slice step cannot be zero");
    int64_t len = obj.t == V_LIST ? (int64_t)obj.u.l->n : (int64_t)u8_count(obj.u.s, obj.n);
    if (sn) st = stp < 0 ? len - 1 : 0;
    else {
        if (st < 0) { st += len; if (st < 0) st = stp < 0 ? -1 : 0; }
        else if (st >= len) st = stp < 0 ? len - 1 : len;
    }
    if (en) en_ = stp < 0 ? -1 : len;
    else {
        if (en_ < 0) { en_ += len; if (en_ < 0) en_ = stp < 0 ? -1 : 0; }
        else if (en_ >= len) en_ = stp < 0 ? len - 1 : len;
    }
    if (obj.t == V_LIST) {
        jlist *l = list_new(r->a, 4);
        for (int64_t i = st; stp > 0 ? i < en_ : i > en_; i += stp) list_push(r->a, l, obj.u.l->v[i]);
        return mk_list(l, obj.flag);
    }
    /* strings: index code points once */
    size_t *offs = aalloc(r->a, ((size_t)len + 1) * sizeof(size_t));
    size_t bi = 0;
    for (int64_t k = 0; k < len; k++) { offs[k] = bi; u8_next(obj.u.s, obj.n, &bi); }
    offs[len] = obj.n;
    sbuf b;
    sb_init(&b, r->a);
    if (stp == 1 && st < en_) return mk_str(obj.u.s + offs[st], offs[en_] - offs[st]);
    for (int64_t i = st; stp > 0 ? i < en_ : i > en_; i += stp) sb_put(&b, obj.u.s + offs[i], offs[i + 1] - offs[i]);
    return mk_str(sb_str(&b), b.n);
}

/* ======================================================================
 * library: arguments, string helpers, methods, filters, tests, globals
 * ==================================================================== */

typedef struct cargs {
    jv *pos;
    int np;
    const char **kn;
    jv *kv;
    int nk;
} cargs;

/* Positional i or keyword `name`; 0 when absent. */
static int arg(const cargs *a, int i, const char *name, jv *out) {
    if (i >= 0 && i < a->np) { *out = a->pos[i]; return 1; }
    for (int k = 0; name && k < a->nk; k++)
        if (!strcmp(a->kn[k], name)) { *out = a->kv[k]; return 1; }
    return 0;
}

/* Python's signature check: at most maxpos positionals, keywords from the list. */
static void check_args(rt *r, const cargs *a, const char *what, int maxpos, const char *const *kw) {
    if (a->np > maxpos) rerr(r, TJ_TYPE, "%s() takes at most %d positional argument(s) (%d given)", what, maxpos, a->np);
    for (int k = 0; k < a->nk; k++) {
        int ok = 0;
        for (int j = 0; kw && kw[j]; j++)
            if (!strcmp(kw[j], a->kn[k])) { ok = 1; break; }
        if (!ok) rerr(r, TJ_TYPE, "%s() got an unexpected keyword argument '%s'", what, a->kn[k]);
    }
}

static jv need_str(rt *r, jv v, const char *what) {
    if (v.t == V_UNDEF) raise_undef(r, v);
    if (v.t != V_STR) rerr(r, TJ_TYPE, "%s must be str, not %s", what, v_typename(v));
    return v;
}

static int64_t need_int(rt *r, jv v, const char *what) {
    if (v.t == V_UNDEF) raise_undef(r, v);
    if (v.t != V_INT && v.t != V_BOOL) rerr(r, TJ_TYPE, "%s must be an integer, not %s", what, v_typename(v));
    return v.u.i;
}

static jv html_escape(rt *r, jv s) {
    sbuf b;
    sb_init(&b, r->a);
    for (size_t i = 0; i < s.n; i++) {
        char c = s.u.s[i];
        switch (c) {
        case '&': sb_puts(&b, "&amp;"); break;
        case '<': sb_puts(&b, "&lt;"); break;
        case '>': sb_puts(&b, "&gt;"); break;
        case '"': sb_puts(&b, "&#34;"); break;
        case '\'': sb_puts(&b, "&#39;"); break;
        default: sb_putc(&b, c);
        }
    }
    jv v = mk_str(sb_str(&b), b.n);
    v.flag = 1;
    return v;
}

/* Is code point c in the character set `chars` (a str)? */
static int in_charset(jv chars, uint32_t c) {
    for (size_t i = 0; i < chars.n;)
        if (u8_next(chars.u.s, chars.n, &i) == c) return 1;
    return 0;
}

/* Python str.strip/lstrip/rstrip; chars NULL = whitespace. which: 1 left, 2 right, 3 both. */
static jv str_strip(jv s, const jv *chars, int which) {
    size_t b = 0, e = s.n;
    if (which & 1) {
        while (b < e) {
            size_t j = b;
            uint32_t c = u8_next(s.u.s, s.n, &j);
            if (chars ? !in_charset(*chars, c) : !py_isspace(c)) break;
            b = j;
        }
    }
    if (which & 2) {
        size_t i = b, keep = b;
        while (i < e) {
            uint32_t c = u8_next(s.u.s, e, &i);
            if (chars ? !in_charset(*chars, c) : !py_isspace(c)) keep = i;
        }
        e = keep;
    }
    return mk_str(s.u.s + b, e - b);
}

typedef uint32_t (*cpmap)(uint32_t);
static uint32_t cp_upper(uint32_t c) { return c < 0x80 ? (uint32_t)toupper((int)c) : (uint32_t)utf8proc_toupper((utf8proc_int32_t)c); }
static uint32_t cp_lower(uint32_t c) { return c < 0x80 ? (uint32_t)tolower((int)c) : (uint32_t)utf8proc_tolower((utf8proc_int32_t)c); }
static uint32_t cp_title(uint32_t c) { return c < 0x80 ? (uint32_t)toupper((int)c) : (uint32_t)utf8proc_totitle((utf8proc_int32_t)c); }

static jv str_map(rt *r, jv s, cpmap first, cpmap rest, int title_words) {
    sbuf b;
    sb_init(&b, r->a);
    int at_start = 1;
    for (size_t i = 0; i < s.n;) {
        uint32_t c = u8_next(s.u.s, s.n, &i);
        uint32_t m;
        if (title_words) {
            /* jinja's title: words begin after runs of [-\s({\[<] */
            int sep = c == '-' || py_isspace(c) || c == '(' || c == '{' || c == '[' || c == '<';
            m = sep ? c : at_start ? first(c) : rest(c);
            at_start = sep;
        } else {
            m = at_start ? first(c) : rest(c);
            at_start = 0;
        }
        char u8[4];
        sb_put(&b, u8, (size_t)u8_encode(m, u8));
    }
    return mk_str(sb_str(&b), b.n);
}

static jv str_replace(rt *r, jv s, jv old, jv nw, int64_t count) {
    sbuf b;
    sb_init(&b, r->a);
    if (count < 0) count = INT64_MAX;
    if (old.n == 0) {
        int64_t k = 0;
        size_t i = 0;
        if (k < count) { sb_put(&b, nw.u.s, nw.n); k++; }
        while (i < s.n) {
            size_t st = i;
            u8_next(s.u.s, s.n, &i);
            sb_put(&b, s.u.s + st, i - st);
            if (k < count) { sb_put(&b, nw.u.s, nw.n); k++; }
        }
        return mk_str(sb_str(&b), b.n);
    }
    size_t i = 0;
    int64_t k = 0;
    while (i < s.n) {
        const char *hit = k < count && s.n - i >= old.n ? memmem(s.u.s + i, s.n - i, old.u.s, old.n) : NULL;
        if (!hit) { sb_put(&b, s.u.s + i, s.n - i); break; }
        sb_put(&b, s.u.s + i, (size_t)(hit - (s.u.s + i)));
        sb_put(&b, nw.u.s, nw.n);
        i = (size_t)(hit - s.u.s) + old.n;
        k++;
    }
    return mk_str(sb_str(&b), b.n);
}

/* Python str.split(sep=None, maxsplit=-1) (and rsplit when from_right). */
static jv str_split(rt *r, jv s, const jv *sep, int64_t maxsplit, int from_right) {
    jlist *l = list_new(r->a, 8);
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (!sep) {
        /* runs of whitespace separate; no empty strings */
        size_t *st = aalloc(r->a, (s.n + 1) * sizeof(size_t)), *en = aalloc(r->a, (s.n + 1) * sizeof(size_t));
        size_t nw = 0, i = 0;
        while (i < s.n) {
            size_t j = i;
            uint32_t c = u8_next(s.u.s, s.n, &j);
            if (py_isspace(c)) { i = j; continue; }
            st[nw] = i;
            while (i < s.n) {
                j = i;
                c = u8_next(s.u.s, s.n, &j);
                if (py_isspace(c)) break;
                i = j;
            }
            en[nw++] = i;
        }
        if (nw == 0) return mk_list(l, 0);
        if ((uint64_t)maxsplit >= nw - 1) {
            for (size_t k = 0; k < nw; k++) list_push(r->a, l, mk_str(s.u.s + st[k], en[k] - st[k]));
        } else if (!from_right) {
            /* the remainder keeps its trailing whitespace, as in Python */
            for (int64_t k = 0; k < maxsplit; k++) list_push(r->a, l, mk_str(s.u.s + st[k], en[k] - st[k]));
            list_push(r->a, l, mk_str(s.u.s + st[maxsplit], s.n - st[maxsplit]));
        } else {
            size_t first = nw - (size_t)maxsplit;
            list_push(r->a, l, mk_str(s.u.s, en[first - 1]));
            for (size_t k = first; k < nw; k++) list_push(r->a, l, mk_str(s.u.s + st[k], en[k] - st[k]));
        }
        return mk_list(l, 0);
    }
    if (sep->n == 0) rerr(r, TJ_TYPE, "empty separator");
    if (!from_right) {
        size_t i = 0;
        int64_t k = 0;
        for (;;) {
            const char *hit = k < maxsplit && s.n - i >= sep->n ? memmem(s.u.s + i, s.n - i, sep->u.s, sep->n) : NULL;
            if (!hit) { list_push(r->a, l, mk_str(s.u.s + i, s.n - i)); break; }
            list_push(r->a, l, mk_str(s.u.s + i, (size_t)(hit - s.u.s) - i));
            i = (size_t)(hit - s.u.s) + sep->n;
            k++;
        }
        return mk_list(l, 0);
    }
    /* rsplit with a separator: collect from the right, then reverse */
    size_t e = s.n;
    int64_t k = 0;
    jlist *tmp = list_new(r->a, 8);
    for (;;) {
        size_t found = SIZE_MAX;
        if (k < maxsplit && e >= sep->n)
            for (size_t j = e - sep->n + 1; j-- > 0;)
                if (!memcmp(s.u.s + j, sep->u.s, sep->n)) { found = j; break; }
        if (found == SIZE_MAX) { list_push(r->a, tmp, mk_str(s.u.s, e)); break; }
        list_push(r->a, tmp, mk_str(s.u.s + found + sep->n, e - found - sep->n));
        e = found;
        k++;
    }
    for (size_t j = tmp->n; j-- > 0;) list_push(r->a, l, tmp->v[j]);
    return mk_list(l, 0);
}

static int is_linebreak(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
           c == 0x85 || c == 0x2028 || c == 0x2029;
}

static jv str_splitlines(rt *r, jv s, int keepends) {
    jlist *l = list_new(r->a, 8);
    size_t i = 0, st = 0;
    while (i < s.n) {
        size_t j = i;
        uint32_t c = u8_next(s.u.s, s.n, &j);
        if (is_linebreak(c)) {
            size_t end = j;
            if (c == '\r' && end < s.n && s.u.s[end] == '\n') end++;
            list_push(r->a, l, mk_str(s.u.s + st, (keepends ? end : i) - st));
            st = i = end;
        } else i = j;
    }
    if (st < s.n) list_push(r->a, l, mk_str(s.u.s + st, s.n - st));
    return mk_list(l, 0);
}

static int starts_with(jv s, jv p) { return p.n <= s.n && (p.n == 0 || !memcmp(s.u.s, p.u.s, p.n)); }
static int ends_with(jv s, jv p) { return p.n <= s.n && (p.n == 0 || !memcmp(s.u.s + s.n - p.n, p.u.s, p.n)); }

/* Substring of s by code point range [start, end) with Python's clamping. */
static jv str_cp_range(jv s, const cargs *a, int first_arg, size_t *base_cp) {
    int64_t len = (int64_t)u8_count(s.u.s, s.n), st = 0, en = len;
    jv v;
    if (arg(a, first_arg, NULL, &v) && v.t != V_NONE) st = v.u.i;
    if (arg(a, first_arg + 1, NULL, &v) && v.t != V_NONE) en = v.u.i;
    if (st < 0) { st += len; if (st < 0) st = 0; }
    if (en < 0) { en += len; if (en < 0) en = 0; }
    if (st > len) st = len;
    if (en > len) en = len;
    if (en < st) en = st;
    size_t b0 = u8_offset(s.u.s, s.n, (size_t)st), b1 = u8_offset(s.u.s, s.n, (size_t)en);
    *base_cp = (size_t)st;
    return mk_str(s.u.s + b0, b1 - b0);
}

static int cat_is(uint32_t c, int what) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    switch (what) {
    case 'a': return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
    case 'd': return k == UTF8PROC_CATEGORY_ND;
    case 'n': return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
    default: return 0;
    }
}

static jv call_str_method(rt *r, jv s, const char *m, const cargs *a) {
    jv x, y;
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "%s() takes at least 1 argument (0 given)", m);
        size_t base;
        jv sub = a->np > 1 ? str_cp_range(s, a, 1, &base) : s;
        int (*fn)(jv, jv) = m[0] == 's' ? starts_with : ends_with;
        if (x.t == V_LIST && x.flag) {
            for (size_t i = 0; i < x.u.l->n; i++)
                if (fn(sub, need_str(r, x.u.l->v[i], "tuple for startswith/endswith"))) return mk_bool(1);
            return mk_bool(0);
        }
        if (x.t != V_STR) rerr(r, TJ_TYPE, "%s first arg must be str or a tuple of str, not %s", m, v_typename(x));
        return mk_bool(fn(sub, x));
    }
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        int which = m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3;
        if (arg(a, 0, NULL, &x) && x.t != V_NONE) {
            need_str(r, x, "strip arg");
            return str_strip(s, &x, which);
        }
        return str_strip(s, NULL, which);
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        int has_sep = arg(a, 0, "sep", &x) && x.t != V_NONE;
        if (has_sep) need_str(r, x, "separator");
        int64_t maxs = arg(a, 1, "maxsplit", &y) ? need_int(r, y, "maxsplit") : -1;
        return str_split(r, s, has_sep ? &x : NULL, maxs, m[0] == 'r');
    }
    if (!strcmp(m, "replace")) {
        if (!arg(a, 0, NULL, &x) || !arg(a, 1, NULL, &y)) rerr(r, TJ_TYPE, "replace expected at least 2 arguments");
        jv c;
        int64_t count = arg(a, 2, "count", &c) ? need_int(r, c, "count") : -1;
        return str_replace(r, s, need_str(r, x, "replace() argument 1"), need_str(r, y, "replace() argument 2"), count);
    }
    if (!strcmp(m, "upper")) return str_map(r, s, cp_upper, cp_upper, 0);
    if (!strcmp(m, "lower") || !strcmp(m, "casefold")) return str_map(r, s, cp_lower, cp_lower, 0);
    if (!strcmp(m, "capitalize")) return str_map(r, s, cp_title, cp_lower, 0);
    if (!strcmp(m, "title")) {
        /* Python's str.title: a letter after a non-letter starts a word */
        sbuf b;
        sb_init(&b, r->a);
        int prev_cased = 0;
        for (size_t i = 0; i < s.n;) {
            uint32_t c = u8_next(s.u.s, s.n, &i);
            uint32_t o = prev_cased ? cp_lower(c) : cp_title(c);
            prev_cased = cat_is(c, 'a');
            char u8[4];
            sb_put(&b, u8, (size_t)u8_encode(o, u8));
        }
        return mk_str(sb_str(&b), b.n);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex") || !strcmp(m, "count")) {
        if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "%s() takes at least 1 argument (0 given)", m);
        need_str(r, x, "substring");
        size_t base;
        jv sub = str_cp_range(s, a, 1, &base);
        if (!strcmp(m, "count")) {
            if (x.n == 0) return mk_int((int64_t)u8_count(sub.u.s, sub.n) + 1);
            int64_t k = 0;
            size_t i = 0;
            while (i + x.n <= sub.n) {
                const char *h = memmem(sub.u.s + i, sub.n - i, x.u.s, x.n);
                if (!h) break;
                k++;
                i = (size_t)(h - sub.u.s) + x.n;
            }
            return mk_int(k);
        }
        long found = -1;
        if (m[0] != 'r') {
            const char *h = x.n == 0 ? sub.u.s : (x.n <= sub.n ? memmem(sub.u.s, sub.n, x.u.s, x.n) : NULL);
            if (h) found = (long)(h - sub.u.s);
        } else if (x.n <= sub.n) {
            for (size_t j = sub.n - x.n + 1; j-- > 0;)
                if (x.n == 0 || !memcmp(sub.u.s + j, x.u.s, x.n)) { found = (long)j; break; }
        }
        if (found < 0) {
            if (strstr(m, "index")) rerr(r, TJ_TYPE, "substring not found");
            return mk_int(-1);
        }
        return mk_int((int64_t)(base + u8_count(sub.u.s, (size_t)found)));
    }
    if (!strcmp(m, "join")) {
        if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "join() takes exactly one argument (0 given)");
        jlist *l = iter_list(r, x);
        sbuf b;
        sb_init(&b, r->a);
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].t != V_STR) rerr(r, TJ_TYPE, "sequence item %zu: expected str instance, %s found", i, v_typename(l->v[i]));
            if (i) sb_put(&b, s.u.s, s.n);
            sb_put(&b, l->v[i].u.s, l->v[i].n);
        }
        return mk_str(sb_str(&b), b.n);
    }
    if (!strcmp(m, "splitlines")) return str_splitlines(r, s, arg(a, 0, "keepends", &x) && v_truthy(x));
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "%s() takes exactly one argument (0 given)", m);
        need_str(r, x, m);
        if (m[6] == 'p') return starts_with(s, x) ? mk_str(s.u.s + x.n, s.n - x.n) : s;
        return ends_with(s, x) ? mk_str(s.u.s, s.n - x.n) : s;
    }
    if (!strncmp(m, "is", 2) && strcmp(m, "istitle")) {
        int any = 0, ok = 1, cased = 0;
        for (size_t i = 0; i < s.n;) {
            uint32_t c = u8_next(s.u.s, s.n, &i);
            any = 1;
            if (!strcmp(m, "isdigit") || !strcmp(m, "isdecimal")) ok &= cat_is(c, 'd');
            else if (!strcmp(m, "isnumeric")) ok &= cat_is(c, 'n');
            else if (!strcmp(m, "isalpha")) ok &= cat_is(c, 'a');
            else if (!strcmp(m, "isalnum")) ok &= cat_is(c, 'a') || cat_is(c, 'n');
            else if (!strcmp(m, "isspace")) ok &= py_isspace(c);
            else if (!strcmp(m, "islower") || !strcmp(m, "isupper")) {
                uint32_t lo = cp_lower(c), up = cp_upper(c);
                if (lo != up) {
                    cased = 1;
                    if (m[2] == 'l' ? c != lo : c != up) ok = 0;
                }
            }
        }
        if (!strcmp(m, "islower") || !strcmp(m, "isupper")) return mk_bool(ok && cased);
        return mk_bool(any && ok);
    }
    if (!strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust") || !strcmp(m, "zfill")) {
        if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "%s() takes at least 1 argument", m);
        int64_t w = need_int(r, x, "width");
        jv fill = mk_str(m[0] == 'z' ? "0" : " ", 1);
        if (arg(a, 1, NULL, &y)) fill = need_str(r, y, "fill character");
        int64_t len = (int64_t)u8_count(s.u.s, s.n);
        if (w <= len) return s;
        if (w > 1 << 24) rerr(r, TJ_LIMIT, "width too large");
        int64_t pad = w - len, left;
        if (m[0] == 'c') left = pad / 2 + (pad & w & 1);
        else if (m[0] == 'l') left = 0;
        else left = pad;
        sbuf b;
        sb_init(&b, r->a);
        size_t skip = 0;
        if (m[0] == 'z' && s.n && (s.u.s[0] == '+' || s.u.s[0] == '-')) { sb_putc(&b, s.u.s[0]); skip = 1; }
        for (int64_t i = 0; i < left; i++) sb_put(&b, fill.u.s, fill.n);
        sb_put(&b, s.u.s + skip, s.n - skip);
        for (int64_t i = 0; i < pad - left; i++) sb_put(&b, fill.u.s, fill.n);
        return mk_str(sb_str(&b), b.n);
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "%s() takes exactly one argument", m);
        need_str(r, x, "separator");
        if (x.n == 0) rerr(r, TJ_TYPE, "empty separator");
        jlist *l = list_new(r->a, 3);
        const char *h = NULL;
        if (m[0] == 'p') h = x.n <= s.n ? memmem(s.u.s, s.n, x.u.s, x.n) : NULL;
        else if (x.n <= s.n)
            for (size_t j = s.n - x.n + 1; j-- > 0;)
                if (!memcmp(s.u.s + j, x.u.s, x.n)) { h = s.u.s + j; break; }
        if (!h) {
            jv e = mk_str("", 0);
            if (m[0] == 'p') { list_push(r->a, l, s); list_push(r->a, l, e); list_push(r->a, l, e); }
            else { list_push(r->a, l, e); list_push(r->a, l, e); list_push(r->a, l, s); }
        } else {
            list_push(r->a, l, mk_str(s.u.s, (size_t)(h - s.u.s)));
            list_push(r->a, l, x);
            size_t after = (size_t)(h - s.u.s) + x.n;
            list_push(r->a, l, mk_str(s.u.s + after, s.n - after));
        }
        return mk_list(l, 1);
    }
    rerr(r, TJ_UNSUPPORTED, "the str method '%s' is not supported", m);
}

static jv call_method(rt *r, bmethod *bm, const cargs *a) {
    jv self = bm->self, x, y;
    const char *m = bm->name;
    if (self.t == V_STR) return call_str_method(r, self, m, a);
    if (self.t == V_DICT) {
        jdict *d = self.u.d;
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            jlist *l = list_new(r->a, d->n + 1);
            for (size_t i = 0; i < d->n; i++) {
                if (m[0] == 'k') list_push(r->a, l, d->k[i]);
                else if (m[0] == 'v') list_push(r->a, l, d->v[i]);
                else {
                    jlist *t = list_new(r->a, 2);
                    list_push(r->a, t, d->k[i]);
                    list_push(r->a, t, d->v[i]);
                    list_push(r->a, l, mk_list(t, 1));
                }
            }
            return mk_list(l, 0);
        }
        if (!strcmp(m, "get")) {
            if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "get expected at least 1 argument, got 0");
            long i = dict_find(d, x);
            if (i >= 0) return d->v[i];
            return arg(a, 1, NULL, &y) ? y : mk_none();
        }
        if (!strcmp(m, "copy")) {
            jdict *nd = dict_new(r->a);
            for (size_t i = 0; i < d->n; i++) dict_set(r->a, nd, d->k[i], d->v[i]);
            return mk_dict(nd);
        }
        rerr(r, TJ_RUNTIME, "access to attribute '%s' of 'dict' object is unsafe.", m);
    }
    if (self.t == V_LIST) {
        jlist *l = self.u.l;
        if (!strcmp(m, "index") || !strcmp(m, "count")) {
            if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "%s() takes exactly one argument (0 given)", m);
            int64_t k = 0;
            for (size_t i = 0; i < l->n; i++)
                if (v_eqr(r, l->v[i], x)) {
                    if (m[0] == 'i') return mk_int((int64_t)i);
                    k++;
                }
            if (m[0] == 'i') rerr(r, TJ_TYPE, "value is not in list");
            return mk_int(k);
        }
        if (!strcmp(m, "copy")) {
            jlist *c = list_new(r->a, l->n + 1);
            for (size_t i = 0; i < l->n; i++) list_push(r->a, c, l->v[i]);
            return mk_list(c, 0);
        }
        rerr(r, TJ_RUNTIME, "access to attribute '%s' of 'list' object is unsafe.", m);
    }
    if (self.t == V_LOOP) {
        if (!strcmp(m, "cycle")) {
            if (a->np == 0) rerr(r, TJ_TYPE, "no items for cycling given");
            return a->pos[self.u.loop->idx % (size_t)a->np];
        }
        rerr(r, TJ_UNSUPPORTED, "loop.%s() is not supported", m);
    }
    rerr(r, TJ_TYPE, "'%s' object is not callable", v_typename(self));
}

/* ---- sorting (stable merge sort; comparisons may raise) ---- */

static int cmp_sort_keys(rt *r, jv a, jv b, void *ctx) {
    (void)ctx;
    return v_cmp(r, a, b, OP_LT);
}

/* Sort v[0..n) by keys[i] (parallel arrays permuted together). */
static void merge_sort(rt *r, jv *v, size_t n, jv *keys, int (*cmp)(rt *, jv, jv, void *), void *ctx) {
    if (n < 2) return;
    jv *tv = aalloc(r->a, n * sizeof(jv)), *tk = aalloc(r->a, n * sizeof(jv));
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (cmp(r, keys[j], keys[i], ctx) < 0) { tv[k] = v[j]; tk[k++] = keys[j++]; }
                else { tv[k] = v[i]; tk[k++] = keys[i++]; }
            }
            while (i < mid) { tv[k] = v[i]; tk[k++] = keys[i++]; }
            while (j < hi) { tv[k] = v[j]; tk[k++] = keys[j++]; }
        }
        memcpy(v, tv, n * sizeof(jv));
        memcpy(keys, tk, n * sizeof(jv));
    }
}

/* jinja's make_attrgetter: "a.b.0" walks items/attributes. */
static jv attr_path(rt *r, jv v, jv attribute) {
    if (attribute.t == V_INT) return getitem_v(r, v, attribute);
    need_str(r, attribute, "attribute");
    size_t i = 0;
    while (i <= attribute.n) {
        const char *dot = memchr(attribute.u.s + i, '.', attribute.n - i);
        size_t e = dot ? (size_t)(dot - attribute.u.s) : attribute.n;
        jv part = mk_str(attribute.u.s + i, e - i);
        int digits = e > i;
        for (size_t k = i; k < e; k++) digits &= isdigit((unsigned char)attribute.u.s[k]) != 0;
        if (digits) part = mk_int(strtoll(astrndup(r->a, part.u.s, part.n), NULL, 10));
        if (v.t == V_UNDEF) raise_undef(r, v);
        v = getitem_v(r, v, part);
        if (!dot) break;
        i = e + 1;
    }
    return v;
}

static jv lower_if_str(rt *r, jv v) { return v.t == V_STR ? str_map(r, v, cp_lower, cp_lower, 0) : v; }

static jv apply_filter(rt *r, const char *name, jv v, const cargs *a);
static int apply_test(rt *r, const char *name, jv v, const cargs *a);

/* select/reject/selectattr/rejectattr/map share argument shapes. */
static jv filter_select(rt *r, jv seq, const cargs *a, int with_attr, int want) {
    jlist *in = iter_list(r, seq), *out = list_new(r->a, in->n + 1);
    int off = with_attr ? 1 : 0;
    jv attribute = mk_none(), tname;
    if (with_attr && !arg(a, 0, NULL, &attribute)) rerr(r, TJ_TYPE, "selectattr/rejectattr need an attribute");
    int has_test = arg(a, off, NULL, &tname);
    /* the test's own arguments follow its name; none: no pointer arithmetic on
     * a call without positionals (pos is NULL there: `x | select`) */
    cargs ta = {a->np > off + 1 ? a->pos + off + 1 : NULL, a->np > off + 1 ? a->np - off - 1 : 0, NULL, NULL, 0};
    for (size_t i = 0; i < in->n; i++) {
        jv item = with_attr ? attr_path(r, in->v[i], attribute) : in->v[i];
        int ok;
        if (has_test) {
            jv tn = need_str(r, tname, "test name");
            char *nm = astrndup(r->a, tn.u.s, tn.n);
            if (!in_names(TEST_NAMES, nm)) rerr(r, TJ_RUNTIME, "No test named '%s'.", nm);
            ok = apply_test(r, nm, item, &ta);
        } else ok = v_truthy(item);
        if (ok == want) list_push(r->a, out, in->v[i]);
    }
    return mk_list(out, 0);
}

static jv apply_filter(rt *r, const char *f, jv v, const cargs *a) {
    jv x, y;
    if (!strcmp(f, "tojson")) {
        /* transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
        static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
        check_args(r, a, "tojson", 4, kw);
        jsonopt o = {0, -1, NULL, 0, ", ", ": ", 2, 2, 0};
        if (arg(a, 0, "ensure_ascii", &x)) o.ensure_ascii = v_truthy(x);
        if (arg(a, 1, "indent", &x) && x.t != V_NONE) {
            if (x.t == V_STR) { o.indent = 0; o.indent_s = x.u.s; o.indent_n = x.n; }
            else o.indent = (int)TS_MAX(0, TS_MIN(need_int(r, x, "indent"), 64));
            o.item_sep = ",";
            o.item_n = 1;
        }
        if (arg(a, 2, "separators", &x) && x.t != V_NONE) {
            if (x.t != V_LIST || x.u.l->n != 2) rerr(r, TJ_TYPE, "separators must be a pair of strings");
            jv s1 = need_str(r, x.u.l->v[0], "item separator"), s2 = need_str(r, x.u.l->v[1], "key separator");
            o.item_sep = s1.u.s; o.item_n = s1.n;
            o.key_sep = s2.u.s; o.key_n = s2.n;
        }
        if (arg(a, 3, "sort_keys", &x)) o.sort_keys = v_truthy(x);
        sbuf b;
        sb_init(&b, r->a);
        json_dump(r, &b, v, &o, 0);
        return mk_str(sb_str(&b), b.n);
    }
    if (!strcmp(f, "trim")) {
        jv s = to_str(r, v);
        if (arg(a, 0, "chars", &x) && x.t != V_NONE) return str_strip(s, &x, 3);
        return str_strip(s, NULL, 3);
    }
    if (!strcmp(f, "string")) {
        if (v.t == V_STR) return v;
        return to_str(r, v);
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) return mk_int((int64_t)v_len(r, v));
    if (!strcmp(f, "items")) {
        if (v.t == V_UNDEF) return mk_list(list_new(r->a, 1), 0);
        if (v.t != V_DICT) rerr(r, TJ_TYPE, "Can only get item pairs from a mapping.");
        bmethod bm = {v, "items"};
        cargs none = {0};
        return call_method(r, &bm, &none);
    }
    if (!strcmp(f, "safe")) {
        jv s = to_str(r, v);
        s.flag = 1;
        return s;
    }
    if (!strcmp(f, "escape") || !strcmp(f, "e") || !strcmp(f, "forceescape")) {
        if (v.t == V_STR && v.flag && f[0] != 'f') return v;
        return html_escape(r, to_str(r, v));
    }
    if (!strcmp(f, "upper")) return str_map(r, to_str(r, v), cp_upper, cp_upper, 0);
    if (!strcmp(f, "lower")) return str_map(r, to_str(r, v), cp_lower, cp_lower, 0);
    if (!strcmp(f, "capitalize")) return str_map(r, to_str(r, v), cp_title, cp_lower, 0);
    if (!strcmp(f, "title")) return str_map(r, to_str(r, v), cp_title, cp_lower, 1);
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        jv dv = mk_str("", 0);
        arg(a, 0, "default_value", &dv);
        int boolean = arg(a, 1, "boolean", &y) && v_truthy(y);
        if (v.t == V_UNDEF || (boolean && !v_truthy(v))) return dv;
        return v;
    }
    if (!strcmp(f, "list")) {
        jlist *src = iter_list(r, v), *l = list_new(r->a, src->n + 1);
        for (size_t i = 0; i < src->n; i++) list_push(r->a, l, src->v[i]);
        return mk_list(l, 0);
    }
    if (!strcmp(f, "join")) {
        jv sep = mk_str("", 0);
        if (arg(a, 0, "d", &x)) sep = to_str(r, x);
        int has_attr = arg(a, 1, "attribute", &y) && y.t != V_NONE;
        jlist *l = iter_list(r, v);
        sbuf b;
        sb_init(&b, r->a);
        for (size_t i = 0; i < l->n; i++) {
            if (i) sb_put(&b, sep.u.s, sep.n);
            jv it = has_attr ? attr_path(r, l->v[i], y) : l->v[i];
            put_str(r, &b, it, 0);
        }
        return mk_str(sb_str(&b), b.n);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        jlist *l = iter_list(r, v);
        if (!l->n) return mk_undef(f[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.");
        return f[0] == 'f' ? l->v[0] : l->v[l->n - 1];
    }
    if (!strcmp(f, "reverse")) {
        if (v.t == V_STR) {
            sbuf b;
            sb_init(&b, r->a);
            size_t n = u8_count(v.u.s, v.n);
            for (size_t k = n; k-- > 0;) {
                size_t o = u8_offset(v.u.s, v.n, k), e = o;
                u8_next(v.u.s, v.n, &e);
                sb_put(&b, v.u.s + o, e - o);
            }
            return mk_str(sb_str(&b), b.n);
        }
        jlist *src = iter_list(r, v), *l = list_new(r->a, src->n + 1);
        for (size_t i = src->n; i-- > 0;) list_push(r->a, l, src->v[i]);
        return mk_list(l, 0);
    }
    if (!strcmp(f, "replace")) {
        if (!arg(a, 0, "old", &x) || !arg(a, 1, "new", &y)) rerr(r, TJ_TYPE, "replace filter needs old and new");
        jv c;
        int64_t count = arg(a, 2, "count", &c) && c.t != V_NONE ? need_int(r, c, "count") : -1;
        return str_replace(r, to_str(r, v), to_str(r, x), to_str(r, y), count);
    }
    if (!strcmp(f, "int")) {
        jv dv = mk_int(0);
        arg(a, 0, "default", &dv);
        int64_t base = arg(a, 1, "base", &y) ? need_int(r, y, "base") : 10;
        if (v.t == V_INT) return v;
        if (v.t == V_BOOL) return mk_int(v.u.i);
        if (v.t == V_FLOAT) {
            if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return dv;
            return mk_int((int64_t)v.u.f);
        }
        if (v.t == V_STR) {
            jv s = str_strip(v, NULL, 3);
            char *t = astrndup(r->a, s.u.s, s.n), *endp;
            errno = 0;
            long long k = strtoll(t, &endp, (int)base);
            if (s.n && !*endp && !errno) return mk_int(k);
            double d = strtod(t, &endp);
            if (s.n && !*endp && isfinite(d) && fabs(d) < 9.2e18) return mk_int((int64_t)d);
        }
        return dv;
    }
    if (!strcmp(f, "float")) {
        jv dv = mk_float(0.0);
        arg(a, 0, "default", &dv);
        if (v.t == V_FLOAT) return v;
        if (v.t == V_INT || v.t == V_BOOL) return mk_float((double)v.u.i);
        if (v.t == V_STR) {
            jv s = str_strip(v, NULL, 3);
            char *t = astrndup(r->a, s.u.s, s.n), *endp;
            double d = strtod(t, &endp);
            if (s.n && !*endp) return mk_float(d);
        }
        return dv;
    }
    if (!strcmp(f, "abs")) {
        if (v.t == V_INT || v.t == V_BOOL) {
            if (v.u.i == INT64_MIN) rerr(r, TJ_UNSUPPORTED, "integer overflow");
            return mk_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.t == V_FLOAT) return mk_float(fabs(v.u.f));
        if (v.t == V_UNDEF) raise_undef(r, v);
        rerr(r, TJ_TYPE, "bad operand type for abs(): '%s'", v_typename(v));
    }
    if (!strcmp(f, "round")) {
        int64_t prec = arg(a, 0, "precision", &x) ? need_int(r, x, "precision") : 0;
        const char *method = "common";
        if (arg(a, 1, "method", &y)) method = astrndup(r->a, need_str(r, y, "method").u.s, y.n);
        if (!is_num(v)) {
            if (v.t == V_UNDEF) raise_undef(r, v);
            rerr(r, TJ_TYPE, "type %s doesn't define __round__ method", v_typename(v));
        }
        double d = num_f(v), m = pow(10.0, (double)prec);
        if (!strcmp(method, "common")) d = nearbyint(d * m) / m;
        else if (!strcmp(method, "ceil")) d = ceil(d * m) / m;
        else if (!strcmp(method, "floor")) d = floor(d * m) / m;
        else rerr(r, TJ_TYPE, "method must be common, ceil or floor");
        return v.t == V_FLOAT || strcmp(method, "common") ? mk_float(d) : mk_int((int64_t)d);
    }
    if (!strcmp(f, "indent")) {
        jv s = to_str(r, v), ind = mk_str("    ", 4);
        if (arg(a, 0, "width", &x)) {
            if (x.t == V_STR) ind = x;
            else {
                int64_t w = need_int(r, x, "width");
                if (w > 4096) rerr(r, TJ_LIMIT, "indent width too large");
                char *sp = aalloc(r->a, (size_t)(w > 0 ? w : 0) + 1);
                memset(sp, ' ', (size_t)(w > 0 ? w : 0));
                ind = mk_str(sp, (size_t)(w > 0 ? w : 0));
            }
        }
        int first = arg(a, 1, "first", &x) && v_truthy(x);
        int blank = arg(a, 2, "blank", &x) && v_truthy(x);
        sbuf t;
        sb_init(&t, r->a);
        sb_put(&t, s.u.s, s.n);
        sb_putc(&t, '\n');
        jlist *lines = str_splitlines(r, mk_str(t.p, t.n), 0).u.l;
        sbuf b;
        sb_init(&b, r->a);
        if (first) sb_put(&b, ind.u.s, ind.n);
        for (size_t i = 0; i < lines->n; i++) {
            jv ln = lines->v[i];
            if (i) {
                sb_putc(&b, '\n');
                if (blank || ln.n) sb_put(&b, ind.u.s, ind.n);
            }
            sb_put(&b, ln.u.s, ln.n);
        }
        return mk_str(sb_str(&b), b.n);
    }
    if (!strcmp(f, "center")) {
        cargs ca = {a->pos, a->np, a->kn, a->kv, a->nk};
        jv w = mk_int(80);
        if (!arg(a, 0, "width", &w)) { ca.pos = &w; ca.np = 1; }
        return call_str_method(r, to_str(r, v), "center", &ca);
    }
    if (!strcmp(f, "attr")) {
        if (!arg(a, 0, "name", &x)) rerr(r, TJ_TYPE, "attr filter needs a name");
        return getattr_v(r, v, astrndup(r->a, need_str(r, x, "attribute name").u.s, x.n));
    }
    if (!strcmp(f, "map")) {
        jlist *in = iter_list(r, v), *out = list_new(r->a, in->n + 1);
        if (arg(a, -1, "attribute", &x)) {
            jv dflt;
            int has_d = arg(a, -1, "default", &dflt);
            for (size_t i = 0; i < in->n; i++) {
                jv it = attr_path(r, in->v[i], x);
                if (it.t == V_UNDEF && has_d) it = dflt;
                list_push(r->a, out, it);
            }
            return mk_list(out, 0);
        }
        if (!arg(a, 0, NULL, &x)) return mk_list(out, 0);
        jv fn = need_str(r, x, "filter name");
        char *nm = astrndup(r->a, fn.u.s, fn.n);
        if (!in_names(FILTER_NAMES, nm)) rerr(r, TJ_RUNTIME, "No filter named '%s'.", nm);
        cargs fa = {a->pos + 1, a->np - 1, a->kn, a->kv, a->nk};
        for (size_t i = 0; i < in->n; i++) list_push(r->a, out, apply_filter(r, nm, in->v[i], &fa));
        return mk_list(out, 0);
    }
    if (!strcmp(f, "select")) return filter_select(r, v, a, 0, 1);
    if (!strcmp(f, "reject")) return filter_select(r, v, a, 0, 0);
    if (!strcmp(f, "selectattr")) return filter_select(r, v, a, 1, 1);
    if (!strcmp(f, "rejectattr")) return filter_select(r, v, a, 1, 0);
    if (!strcmp(f, "sort") || !strcmp(f, "unique") || !strcmp(f, "min") || !strcmp(f, "max") || !strcmp(f, "dictsort")) {
        int is_sort = f[0] == 's', is_dsort = f[0] == 'd';
        int reverse = 0, case_sensitive = 0;
        jv attribute = mk_none();
        if (is_sort) {
            if (arg(a, 0, "reverse", &x)) reverse = v_truthy(x);
            if (arg(a, 1, "case_sensitive", &x)) case_sensitive = v_truthy(x);
            arg(a, 2, "attribute", &attribute);
        } else if (is_dsort) {
            if (arg(a, 0, "case_sensitive", &x)) case_sensitive = v_truthy(x);
            if (arg(a, 1, "by", &x)) attribute = x;
            if (arg(a, 2, "reverse", &x)) reverse = v_truthy(x);
        } else {
            if (arg(a, 0, "case_sensitive", &x)) case_sensitive = v_truthy(x);
            arg(a, 1, "attribute", &attribute);
        }
        jlist *src;
        if (is_dsort) {
            if (v.t != V_DICT) rerr(r, TJ_TYPE, "You can only sort by either \"key\" or \"value\" of a dict");
            bmethod bm = {v, "items"};
            cargs none = {0};
            src = call_method(r, &bm, &none).u.l;
        } else src = iter_list(r, v);
        size_t n = src->n;
        jv *vals = aalloc(r->a, (n + 1) * sizeof(jv)), *keys = aalloc(r->a, (n + 1) * sizeof(jv));
        for (size_t i = 0; i < n; i++) {
            vals[i] = src->v[i];
            jv k = src->v[i];
            if (is_dsort) {
                int by_value = attribute.t == V_STR && attribute.n == 5 && !memcmp(attribute.u.s, "value", 5);
                k = k.u.l->v[by_value ? 1 : 0];
            } else if (attribute.t != V_NONE) k = attr_path(r, k, attribute);
            keys[i] = case_sensitive ? k : lower_if_str(r, k);
        }
        if (!strcmp(f, "unique")) {
            jlist *out = list_new(r->a, n + 1);
            jlist *seen = list_new(r->a, n + 1);
            for (size_t i = 0; i < n; i++) {
                int dup = 0;
                for (size_t j = 0; j < seen->n && !dup; j++) dup = v_eqr(r, seen->v[j], keys[i]);
                if (!dup) { list_push(r->a, seen, keys[i]); list_push(r->a, out, vals[i]); }
            }
            return mk_list(out, 0);
        }
        if (f[0] == 'm') {
            if (!n) return mk_undef(f[1] == 'i' ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
            size_t best = 0;
            for (size_t i = 1; i < n; i++) {
                int c = v_cmp(r, keys[i], keys[best], OP_LT);
                if (f[1] == 'i' ? c < 0 : c > 0) best = i;
            }
            return vals[best];
        }
        merge_sort(r, vals, n, keys, cmp_sort_keys, NULL);
        jlist *out = list_new(r->a, n + 1);
        for (size_t i = 0; i < n; i++) list_push(r->a, out, vals[reverse ? n - 1 - i : i]);
        /* Python's reverse=True keeps equal items in input order; close enough
         * for keys that differ, which is what templates sort by */
        return mk_list(out, 0);
    }
    if (!strcmp(f, "sum")) {
        jv acc = mk_int(0);
        int has_attr = arg(a, 0, "attribute", &x) && x.t != V_NONE;
        arg(a, 1, "start", &acc);
        jlist *l = iter_list(r, v);
        for (size_t i = 0; i < l->n; i++) acc = binop(r, OP_ADD, acc, has_attr ? attr_path(r, l->v[i], x) : l->v[i]);
        return acc;
    }
    if (!strcmp(f, "wordcount")) {
        jv s = to_str(r, v);
        int64_t k = 0;
        int in_word = 0;
        for (size_t i = 0; i < s.n;) {
            uint32_t c = u8_next(s.u.s, s.n, &i);
            int w = c == '_' || cat_is(c, 'a') || cat_is(c, 'n');
            if (w && !in_word) k++;
            in_word = w;
        }
        return mk_int(k);
    }
    rerr(r, TJ_UNSUPPORTED, "the '%s' filter is not supported", f);
}

static int apply_test(rt *r, const char *t, jv v, const cargs *a) {
    jv x;
    if (!strcmp(t, "defined")) return v.t != V_UNDEF;
    if (!strcmp(t, "undefined")) return v.t == V_UNDEF;
    if (!strcmp(t, "none")) return v.t == V_NONE;
    if (!strcmp(t, "boolean")) return v.t == V_BOOL;
    if (!strcmp(t, "true")) return v.t == V_BOOL && v.u.i;
    if (!strcmp(t, "false")) return v.t == V_BOOL && !v.u.i;
    if (!strcmp(t, "integer")) return v.t == V_INT;
    if (!strcmp(t, "float")) return v.t == V_FLOAT;
    if (!strcmp(t, "number")) return is_num(v);
    if (!strcmp(t, "string")) return v.t == V_STR;
    if (!strcmp(t, "mapping")) return v.t == V_DICT;
    if (!strcmp(t, "sequence")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF;
    if (!strcmp(t, "iterable")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF || v.t == V_LOOP;
    if (!strcmp(t, "callable")) return v.t == V_MACRO || v.t == V_FUNC || v.t == V_METHOD || v.t == V_LOOP;
    if (!strcmp(t, "escaped")) return v.t == V_STR && v.flag;
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        bmethod bm = {to_str(r, v), t[0] == 'l' ? "islower" : "isupper"};
        cargs none = {0};
        return (int)call_method(r, &bm, &none).u.i;
    }
    if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        jv d = mk_int(2);
        if (t[0] == 'd' && !arg(a, 0, "num", &d)) rerr(r, TJ_TYPE, "divisibleby needs a number");
        jv m = binop(r, OP_MOD, v, d);
        if (t[0] == 'o') return v_eq(m, mk_int(1));
        return v_eq(m, mk_int(0));
    }
    if (!strcmp(t, "filter") || !strcmp(t, "test")) {
        if (v.t != V_STR) return 0;
        char *nm = astrndup(r->a, v.u.s, v.n);
        return in_names(t[0] == 'f' ? FILTER_NAMES : TEST_NAMES, nm);
    }
    if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "test '%s' needs an argument", t);
    if (!strcmp(t, "sameas")) {
        if (v.t != x.t) return 0;
        if (v.t == V_NONE || v.t == V_UNDEF) return v.t == V_NONE;
        if (v.t == V_BOOL || v.t == V_INT) return v.u.i == x.u.i;
        return v_eqr(r, v, x) && (v.t == V_STR ? v.u.s == x.u.s : v.t == V_FLOAT ? 1 : v.u.l == x.u.l);
    }
    if (!strcmp(t, "in")) return v_in(r, v, x);
    if (!strcmp(t, "==") || !strcmp(t, "eq") || !strcmp(t, "equalto")) return v_eqr(r, v, x);
    if (!strcmp(t, "!=") || !strcmp(t, "ne")) return !v_eqr(r, v, x);
    int c = v_cmp(r, v, x, OP_LT);
    if (!strcmp(t, "<") || !strcmp(t, "lt") || !strcmp(t, "lessthan")) return c < 0;
    if (!strcmp(t, "<=") || !strcmp(t, "le")) return c <= 0;
    if (!strcmp(t, ">") || !strcmp(t, "gt") || !strcmp(t, "greaterthan")) return c > 0;
    if (!strcmp(t, ">=") || !strcmp(t, "ge")) return c >= 0;
    rerr(r, TJ_UNSUPPORTED, "the '%s' test is not supported", t);
}

/* ======================================================================
 * evaluator
 * ==================================================================== */

static jv eval(rt *r, jnode *n, frame *f);
static int exec_body(rt *r, jnode **body, int n, frame *f);

static void eval_args(rt *r, jnode *n, frame *f, cargs *a) {
    a->np = n->n;
    a->pos = n->n ? aalloc(r->a, (size_t)n->n * sizeof(jv)) : NULL;
    for (int i = 0; i < n->n; i++) a->pos[i] = eval(r, n->list[i], f);
    a->nk = n->n2;
    a->kn = n->names;
    a->kv = n->n2 ? aalloc(r->a, (size_t)n->n2 * sizeof(jv)) : NULL;
    for (int i = 0; i < n->n2; i++) a->kv[i] = eval(r, n->list2[i], f);
}

/* Render body into a fresh buffer and return it as a string. */
static jv capture(rt *r, jnode **body, int n, frame *f) {
    sbuf b, *saved = r->out;
    sb_init(&b, r->a);
    r->out = &b;
    exec_body(r, body, n, f);
    r->out = saved;
    return mk_str(sb_str(&b), b.n);
}

static jv call_macro(rt *r, macro *m, const cargs *a) {
    jnode *def = m->def;
    if (a->np > def->nn && !(def->op & 1))
        rerr(r, TJ_TYPE, "macro '%s' takes not more than %d argument(s)", def->name, def->nn);
    frame *f = frame_new(r, m->closure);
    jdict *extra_kw = dict_new(r->a);
    for (int k = 0; k < a->nk; k++) {
        int ok = 0;
        for (int i = 0; i < def->nn; i++)
            if (!strcmp(def->names[i], a->kn[k])) { ok = 1; break; }
        if (!ok) {
            if (!(def->op & 2)) rerr(r, TJ_TYPE, "macro '%s' takes no keyword argument '%s'", def->name, a->kn[k]);
            dict_set(r->a, extra_kw, mk_cstr(r->a, a->kn[k]), a->kv[k]);
        }
    }
    for (int i = 0; i < def->nn; i++) {
        jv v;
        int have = 0;
        if (i < a->np) { v = a->pos[i]; have = 1; }
        for (int k = 0; k < a->nk; k++)
            if (!strcmp(def->names[i], a->kn[k])) {
                if (have) rerr(r, TJ_TYPE, "macro '%s' got multiple values for argument '%s'", def->name, def->names[i]);
                v = a->kv[k];
                have = 1;
            }
        if (!have) {
            if (def->list2 && def->list2[i]) v = eval(r, def->list2[i], f);
            else v = undef_fmt(r, "parameter '%s' was not provided", def->names[i]);
        }
        frame_set(r, f, def->names[i], v);
    }
    if (def->op & 1) {
        jlist *va = list_new(r->a, 4);
        for (int i = def->nn; i < a->np; i++) list_push(r->a, va, a->pos[i]);
        frame_set(r, f, "varargs", mk_list(va, 1));
    }
    if (def->op & 2) frame_set(r, f, "kwargs", mk_dict(extra_kw));
    if (++r->call_depth > TJ_MAX_CALL_DEPTH) rerr(r, TJ_LIMIT, "macro calls nested too deeply (more than %d)", TJ_MAX_CALL_DEPTH);
    step(r);
    int saved_line = r->line;
    jv out = capture(r, def->list, def->n, f);
    r->line = saved_line;
    r->call_depth--;
    return out;
}

static jv call_builtin(rt *r, int fn, const cargs *a) {
    jv x;
    switch (fn) {
    case F_RAISE: {
        jv msg;
        if (!arg(a, 0, "message", &msg)) rerr(r, TJ_TYPE, "raise_exception() missing 1 required positional argument: 'message'");
        jv s = to_str(r, msg);
        r->err->kind = TJ_RAISED;
        r->err->line = r->line;
        snprintf(r->err->msg, sizeof r->err->msg, "%.*s", (int)TS_MIN(s.n, sizeof r->err->msg - 1), s.u.s);
        longjmp(r->jb, 1);
    }
    case F_RANGE: {
        if (a->nk) rerr(r, TJ_TYPE, "range() takes no keyword arguments");
        int64_t st = 0, en, sp = 1;
        if (a->np == 1) en = need_int(r, a->pos[0], "range() argument");
        else if (a->np == 2 || a->np == 3) {
            st = need_int(r, a->pos[0], "range() argument");
            en = need_int(r, a->pos[1], "range() argument");
            if (a->np == 3) sp = need_int(r, a->pos[2], "range() argument");
        } else rerr(r, TJ_TYPE, "range expected 1 to 3 arguments, got %d", a->np);
        if (sp == 0) rerr(r, TJ_TYPE, "range() arg 3 must not be zero");
        double cnt = sp > 0 ? ceil(((double)en - (double)st) / (double)sp) : ceil(((double)st - (double)en) / (double)-sp);
        if (cnt > TJ_MAX_RANGE) rerr(r, TJ_LIMIT, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", TJ_MAX_RANGE);
        jlist *l = list_new(r->a, cnt > 0 ? (size_t)cnt + 1 : 1);
        for (int64_t i = st; sp > 0 ? i < en : i > en; i += sp) list_push(r->a, l, mk_int(i));
        return mk_list(l, 0);
    }
    case F_NAMESPACE: case F_DICT: {
        jdict *d = dict_new(r->a);
        if (a->np > 1) rerr(r, TJ_TYPE, "%s expected at most 1 positional argument", fn == F_DICT ? "dict" : "namespace");
        if (a->np == 1) {
            x = a->pos[0];
            if (x.t == V_DICT || x.t == V_NS) {
                for (size_t i = 0; i < x.u.d->n; i++) dict_set(r->a, d, x.u.d->k[i], x.u.d->v[i]);
            } else {
                jlist *l = iter_list(r, x);
                for (size_t i = 0; i < l->n; i++) {
                    jv p = l->v[i];
                    if (p.t != V_LIST || p.u.l->n != 2) rerr(r, TJ_TYPE, "dictionary update sequence element #%zu has wrong length", i);
                    dict_set(r->a, d, p.u.l->v[0], p.u.l->v[1]);
                }
            }
        }
        for (int k = 0; k < a->nk; k++) dict_set(r->a, d, mk_cstr(r->a, a->kn[k]), a->kv[k]);
        jv v = mk_dict(d);
        if (fn == F_NAMESPACE) v.t = V_NS;
        return v;
    }
    case F_STRFTIME: {
        if (!arg(a, 0, NULL, &x)) rerr(r, TJ_TYPE, "strftime_now() needs a format");
        jv fmt = need_str(r, x, "format");
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        char out[512];
        size_t k = strftime(out, sizeof out, astrndup(r->a, fmt.u.s, fmt.n), &tmv);
        return mk_astr(r->a, out, k);
    }
    case F_LIPSUM: rerr(r, TJ_UNSUPPORTED, "lipsum() is not supported");
    case F_CYCLER: rerr(r, TJ_UNSUPPORTED, "cycler() is not supported");
    case F_JOINER: rerr(r, TJ_UNSUPPORTED, "joiner() is not supported");
    }
    rerr(r, TJ_RUNTIME, "bad builtin");
}

static jv lookup(rt *r, frame *f, const char *name) {
    jv v;
    if (frame_get(f, name, &v)) return v;
    static const struct { const char *n; int id; } B[] = {
        {"range", F_RANGE}, {"namespace", F_NAMESPACE}, {"dict", F_DICT}, {"raise_exception", F_RAISE},
        {"strftime_now", F_STRFTIME}, {"lipsum", F_LIPSUM}, {"cycler", F_CYCLER}, {"joiner", F_JOINER}};
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++)
        if (!strcmp(B[i].n, name)) {
            jv fv = {V_FUNC, 0, 0, {.i = B[i].id}};
            return fv;
        }
    return undef_fmt(r, "'%s' is undefined", name);
}

static jv eval_node(rt *r, jnode *n, frame *f);

static void depth_enter(rt *r) {
    if (++r->depth > TJ_MAX_EVAL_DEPTH)
        rerr(r, TJ_LIMIT, "expression or statement nested too deeply (more than %d levels)", TJ_MAX_EVAL_DEPTH);
}

/* Errors unwind the whole render (longjmp), so the count needs no repair. */
static jv eval(rt *r, jnode *n, frame *f) {
    depth_enter(r);
    jv v = eval_node(r, n, f);
    r->depth--;
    return v;
}

static jv eval_node(rt *r, jnode *n, frame *f) {
    r->line = n->line;
    switch ((ntype)n->type) {
    case E_CONST: return n->val;
    case E_NAME: return lookup(r, f, n->name);
    case E_GETATTR: return getattr_v(r, eval(r, n->a, f), n->name);
    case E_GETITEM: {
        jv o = eval(r, n->a, f);
        jv k = eval(r, n->b, f);
        r->line = n->line;
        return getitem_v(r, o, k);
    }
    case E_SLICE: {
        jv o = eval(r, n->a, f);
        jv p[3];
        for (int i = 0; i < 3; i++) p[i] = n->list[i] ? eval(r, n->list[i], f) : mk_none();
        r->line = n->line;
        return slice_v(r, o, p[0], p[1], p[2]);
    }
    case E_CALL: {
        jv fn = eval(r, n->a, f);
        cargs a;
        eval_args(r, n, f, &a);
        r->line = n->line;
        switch (fn.t) {
        case V_MACRO: return call_macro(r, fn.u.mac, &a);
        case V_FUNC: return call_builtin(r, (int)fn.u.i, &a);
        case V_METHOD: return call_method(r, fn.u.bm, &a);
        case V_UNDEF: raise_undef(r, fn);
        default: rerr(r, TJ_TYPE, "'%s' object is not callable", v_typename(fn));
        }
    }
    case E_FILTER: {
        jv v = eval(r, n->a, f);
        cargs a;
        eval_args(r, n, f, &a);
        r->line = n->line;
        return apply_filter(r, n->name, v, &a);
    }
    case E_TEST: {
        jv v = eval(r, n->a, f);
        cargs a;
        eval_args(r, n, f, &a);
        r->line = n->line;
        return mk_bool(apply_test(r, n->name, v, &a));
    }
    case E_NOT: return mk_bool(!v_truthy(eval(r, n->a, f)));
    case E_NEG: case E_POS: {
        jv v = eval(r, n->a, f);
        r->line = n->line;
        if (v.t == V_UNDEF) raise_undef(r, v);
        if (v.t == V_INT || v.t == V_BOOL) {
            if (n->type == E_POS) return mk_int(v.u.i);
            if (v.u.i == INT64_MIN) rerr(r, TJ_UNSUPPORTED, "integer overflow");
            return mk_int(-v.u.i);
        }
        if (v.t == V_FLOAT) return mk_float(n->type == E_NEG ? -v.u.f : v.u.f);
        rerr(r, TJ_TYPE, "bad operand type for unary %c: '%s'", n->type == E_NEG ? '-' : '+', v_typename(v));
    }
    case E_BIN: {
        jv a = eval(r, n->a, f);
        jv b = eval(r, n->b, f);
        r->line = n->line;
        return binop(r, n->op, a, b);
    }
    case E_AND: {
        jv a = eval(r, n->a, f);
        return v_truthy(a) ? eval(r, n->b, f) : a;
    }
    case E_OR: {
        jv a = eval(r, n->a, f);
        return v_truthy(a) ? a : eval(r, n->b, f);
    }
    case E_CMP: {
        jv left = eval(r, n->a, f);
        for (int i = 0; i < n->n; i++) {
            jv right = eval(r, n->list[i], f);
            r->line = n->line;
            int ok;
            switch (n->ops[i]) {
            case OP_EQ: ok = v_eqr(r, left, right); break;
            case OP_NE: ok = !v_eqr(r, left, right); break;
            case OP_IN: ok = v_in(r, left, right); break;
            case OP_NOTIN: ok = !v_in(r, left, right); break;
            case OP_LT: ok = v_cmp(r, left, right, OP_LT) < 0; break;
            case OP_LE: ok = v_cmp(r, left, right, OP_LE) <= 0; break;
            case OP_GT: ok = v_cmp(r, left, right, OP_GT) > 0; break;
            default: ok = v_cmp(r, left, right, OP_GE) >= 0; break;
            }
            if (!ok) return mk_bool(0);
            left = right;
        }
        return mk_bool(1);
    }
    case E_CONCAT: {
        sbuf b;
        sb_init(&b, r->a);
        for (int i = 0; i < n->n; i++) put_str(r, &b, eval(r, n->list[i], f), 0);
        return mk_str(sb_str(&b), b.n);
    }
    case E_COND:
        if (v_truthy(eval(r, n->a, f))) return eval(r, n->b, f);
        if (n->c) return eval(r, n->c, f);
        return undef_fmt(r, "the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
    case E_LIST: case E_TUPLE: {
        jlist *l = list_new(r->a, (size_t)n->n + 1);
        for (int i = 0; i < n->n; i++) list_push(r->a, l, eval(r, n->list[i], f));
        return mk_list(l, n->type == E_TUPLE);
    }
    case E_DICT: {
        jdict *d = dict_new(r->a);
        for (int i = 0; i < n->n; i++) {
            jv k = eval(r, n->list[i], f);
            if (k.t == V_LIST && !k.flag) rerr(r, TJ_TYPE, "unhashable type: 'list'");
            if (k.t == V_DICT || k.t == V_NS) rerr(r, TJ_TYPE, "unhashable type: '%s'", v_typename(k));
            dict_set(r->a, d, k, eval(r, n->list2[i], f));
        }
        return mk_dict(d);
    }
    default:
        rerr(r, TJ_RUNTIME, "internal: statement used as expression");
    }
}

/* Bind targets (one name, or several unpacked from a sequence). */
static void assign(rt *r, frame *f, const char **names, int nn, jv v) {
    if (nn == 1) { frame_set(r, f, names[0], v); return; }
    if (v.t == V_UNDEF) raise_undef(r, v);
    jlist *l = iter_list(r, v);
    if ((int)l->n < nn) rerr(r, TJ_TYPE, "not enough values to unpack (expected %d, got %zu)", nn, l->n);
    if ((int)l->n > nn) rerr(r, TJ_TYPE, "too many values to unpack (expected %d)", nn);
    for (int i = 0; i < nn; i++) frame_set(r, f, names[i], l->v[i]);
}

enum { CTL_NONE = 0, CTL_BREAK, CTL_CONTINUE };

/* Apply a filter chain parsed with a NULL innermost operand to v. */
static jv apply_chain(rt *r, jnode *chain, jv v, frame *f) {
    if (!chain) return v;
    if (chain->type != E_FILTER) rerr(r, TJ_RUNTIME, "internal: bad filter chain");
    depth_enter(r);
    v = apply_chain(r, chain->a, v, f);
    cargs a;
    eval_args(r, chain, f, &a);
    r->line = chain->line;
    v = apply_filter(r, chain->name, v, &a);
    r->depth--;
    return v;
}

static int exec_node(rt *r, jnode *n, frame *f);

static int exec_stmt(rt *r, jnode *n, frame *f) {
    depth_enter(r);
    int c = exec_node(r, n, f);
    r->depth--;
    return c;
}

static int exec_node(rt *r, jnode *n, frame *f) {
    r->line = n->line;
    switch ((ntype)n->type) {
    case S_DATA: sb_put(r->out, n->val.u.s, n->val.n); return CTL_NONE;
    case S_OUTPUT: put_str(r, r->out, eval(r, n->a, f), 0); return CTL_NONE;
    case S_IF:
        if (v_truthy(eval(r, n->a, f))) return exec_body(r, n->list, n->n, f);
        return exec_body(r, n->list2, n->n2, f);
    case S_FOR: {
        jv it = eval(r, n->a, f);
        r->line = n->line;
        jlist *items = iter_list(r, it);
        if (n->b) { /* for x in xs if cond: filter first, so loop.* counts what remains */
            jlist *kept = list_new(r->a, items->n + 1);
            for (size_t i = 0; i < items->n; i++) {
                step(r);
                frame *tf = frame_new(r, f);
                assign(r, tf, n->names, n->nn, items->v[i]);
                if (v_truthy(eval(r, n->b, tf))) list_push(r->a, kept, items->v[i]);
            }
            items = kept;
        }
        if (items->n == 0) return exec_body(r, n->list2, n->n2, f);
        loopst *L = aalloc(r->a, sizeof *L);
        L->items = items;
        jv lv = {V_LOOP, 0, 0, {.loop = L}};
        for (size_t i = 0; i < items->n; i++) {
            step(r);
            L->idx = i;
            frame *lf = frame_new(r, f); /* a fresh scope per iteration, as in Jinja */
            frame_set(r, lf, "loop", lv);
            assign(r, lf, n->names, n->nn, items->v[i]);
            int c = exec_body(r, n->list, n->n, lf);
            if (c == CTL_BREAK) break;
        }
        return CTL_NONE;
    }
    case S_SET: assign(r, f, n->names, n->nn, eval(r, n->a, f)); return CTL_NONE;
    case S_SET_ATTR: {
        jv ns = lookup(r, f, n->name);
        jv v = eval(r, n->a, f);
        r->line = n->line;
        if (ns.t != V_NS) rerr(r, TJ_RUNTIME, "cannot assign attribute on non-namespace object");
        dict_set(r->a, ns.u.d, mk_cstr(r->a, n->names[0]), v);
        return CTL_NONE;
    }
    case S_SET_BLOCK: {
        jv v = capture(r, n->list, n->n, f);
        frame_set(r, f, n->names[0], apply_chain(r, n->a, v, f));
        return CTL_NONE;
    }
    case S_MACRO: {
        macro *m = aalloc(r->a, sizeof *m);
        m->def = n;
        m->closure = f;
        jv v = {V_MACRO, 0, 0, {.mac = m}};
        frame_set(r, f, n->name, v);
        return CTL_NONE;
    }
    case S_BREAK: return CTL_BREAK;
    case S_CONTINUE: return CTL_CONTINUE;
    case S_FILTER_BLOCK: {
        jv v = capture(r, n->list, n->n, f);
        put_str(r, r->out, apply_chain(r, n->a, v, f), 0);
        return CTL_NONE;
    }
    case S_WITH: {
        frame *wf = frame_new(r, f);
        for (int i = 0; i < n->n2; i++) {
            jv v = eval(r, n->list2[i], f);
            frame_set(r, wf, n->names[i], v);
        }
        return exec_body(r, n->list, n->n, wf);
    }
    case S_SCOPE: return exec_body(r, n->list, n->n, f);
    default: rerr(r, TJ_RUNTIME, "internal: expression used as statement");
    }
}

static int exec_body(rt *r, jnode **body, int n, frame *f) {
    for (int i = 0; i < n; i++) {
        int c = exec_stmt(r, body[i], f);
        if (c != CTL_NONE) return c;
    }
    return CTL_NONE;
}

/* ======================================================================
 * entry points
 * ==================================================================== */

/* Mark macros whose bodies reference varargs (1), kwargs (2). */
static int scan_names(jnode *n, int depth) {
    if (!n || depth > TJ_MAX_PARSE_DEPTH * 4) return 0;
    int m = 0;
    if (n->type == E_NAME) {
        if (!strcmp(n->name, "varargs")) m |= 1;
        if (!strcmp(n->name, "kwargs")) m |= 2;
    }
    if (n->type == S_MACRO) {
        int inner = 0;
        for (int i = 0; i < n->n; i++) inner |= scan_names(n->list[i], depth + 1);
        n->op = inner;
        for (int i = 0; i < n->n2; i++) m |= scan_names(n->list2[i], depth + 1);
        return m;
    }
    m |= scan_names(n->a, depth + 1) | scan_names(n->b, depth + 1) | scan_names(n->c, depth + 1);
    for (int i = 0; i < n->n; i++) m |= scan_names(n->list[i], depth + 1);
    for (int i = 0; i < n->n2; i++) m |= scan_names(n->list2[i], depth + 1);
    return m;
}

int tj_parse(const char *src, size_t len, const tj_options *o, tj_template **out, tj_error *err) {
    tj_error dummy;
    if (!err) err = &dummy;
    memset(err, 0, sizeof *err);
    *out = NULL;
    tj_template *t = ts_alloc(sizeof *t, TS_MEM_MISC);
    if (!t) { err->kind = TJ_NOMEM; snprintf(err->msg, sizeof err->msg, "out of memory"); return -1; }
    if (o) t->o = *o;
    else tj_options_default(&t->o);
    t->a.limit = t->o.max_bytes;
    t->a.err = err;
    parser *p = ts_alloc(sizeof *p, TS_MEM_MISC);
    if (!p) { ts_free(t); err->kind = TJ_NOMEM; snprintf(err->msg, sizeof err->msg, "out of memory"); return -1; }
    p->a = &t->a;
    p->err = err;
    p->o = &t->o;
    t->a.jb = &p->jb;
    if (setjmp(p->jb)) {
        ts_free(p);
        arena_free(&t->a);
        ts_free(t);
        return -1;
    }
    if (!u8_valid(src, len)) perr(p, 0, TJ_SYNTAX, "template is not valid UTF-8");
    /* normalise newlines; drop one trailing newline */
    char *s = aalloc(&t->a, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else s[n++] = src[i];
    }
    if (!t->o.keep_trailing_newline && n && s[n - 1] == '\n') n--;
    s[n] = 0;
    p->src = s;
    p->n = n;
    lex(p);
    jnode *root = mk_node(p, S_SCOPE, 1);
    root->list = parse_body(p, NULL, &root->n, NULL, 0);
    scan_names(root, 0);
    t->root = root;
    t->a.jb = NULL;
    t->a.err = NULL;
    ts_free(p);
    *out = t;
    return 0;
}

void tj_template_free(tj_template *t) {
    if (!t) return;
    arena_free(&t->a);
    ts_free(t);
}

/* Variables: their values live in the vars' own arena (shared read-only by
 * renders: nothing a template does can mutate them, namespaces excepted,
 * and those are created by the template). */
struct tj_vars {
    arena a;
    const char **names;
    jv *vals;
    int n, cap;
};

tj_vars *tj_vars_new(void) {
    tj_vars *v = ts_alloc(sizeof *v, TS_MEM_MISC);
    if (v) v->a.limit = (size_t)1 << 30;
    return v;
}

void tj_vars_free(tj_vars *v) {
    if (!v) return;
    arena_free(&v->a);
    ts_free(v);
}

static void vars_put(tj_vars *v, const char *name, jv x) {
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->names[i], name)) { v->vals[i] = x; return; }
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 16;
        const char **nn = aalloc(&v->a, (size_t)cap * sizeof *nn);
        jv *nv = aalloc(&v->a, (size_t)cap * sizeof *nv);
        if (v->n) {
            memcpy(nn, v->names, (size_t)v->n * sizeof *nn);
            memcpy(nv, v->vals, (size_t)v->n * sizeof *nv);
        }
        v->names = nn;
        v->vals = nv;
        v->cap = cap;
    }
    v->names[v->n] = astrndup(&v->a, name, strlen(name));
    v->vals[v->n] = x;
    v->n++;
}

/* Run fn with the vars arena's allocation failures trapped. */
typedef struct vset {
    const char *name;
    const char *json;
    size_t len;
    jv val;
    int members;
    const char *member; /* bind only this member of the object */
    int found;
} vset;

static int vars_do(tj_vars *v, vset *c, tj_error *e) {
    if (c->json) {
        jv x;
        char msg[256];
        if (!json_parse(&v->a, c->json, c->len, &x, msg, sizeof msg)) {
            e->kind = TJ_INPUT;
            snprintf(e->msg, sizeof e->msg, "%s%s%s: %s", c->members ? "template variables" : "variable '",
                     c->members ? "" : c->name, c->members ? "" : "'", msg);
            return -1;
        }
        if (c->member) {
            jv m;
            if (x.t != V_DICT) {
                e->kind = TJ_INPUT;
                snprintf(e->msg, sizeof e->msg, "expected a JSON object");
                return -1;
            }
            c->found = dict_get_cstr(x.u.d, c->member, &m);
            if (!c->found || (c->members && m.t == V_NONE)) return 0;
            x = m;
        }
        if (!c->members) {
            vars_put(v, c->name, x);
            return 0;
        }
        if (x.t != V_DICT) {
            e->kind = TJ_INPUT;
            snprintf(e->msg, sizeof e->msg, "template variables: expected a JSON object");
            return -1;
        }
        for (size_t i = 0; i < x.u.d->n; i++) {
            jv k = x.u.d->k[i];
            vars_put(v, astrndup(&v->a, k.u.s, k.n), x.u.d->v[i]);
        }
        return 0;
    }
    if (c->val.t == V_STR) {
        if (!u8_valid(c->val.u.s, c->val.n)) {
            e->kind = TJ_INPUT;
            snprintf(e->msg, sizeof e->msg, "variable '%s' is not valid UTF-8", c->name);
            return -1;
        }
        c->val = mk_astr(&v->a, c->val.u.s, c->val.n);
    }
    vars_put(v, c->name, c->val);
    return 0;
}

static int vars_trap_run(tj_vars *v, vset *c, tj_error *e) {
    jmp_buf jb;
    v->a.jb = &jb;
    v->a.err = e;
    if (setjmp(jb)) return -1;
    return vars_do(v, c, e);
}

static int vars_trap(tj_vars *v, vset *c, tj_error *err) {
    tj_error dummy;
    tj_error *e = err ? err : &dummy;
    memset(e, 0, sizeof *e);
    int rc = vars_trap_run(v, c, e);
    v->a.jb = NULL;
    return rc;
}

int tj_vars_set_json(tj_vars *v, const char *name, const char *json, size_t len, tj_error *err) {
    vset c = {name, json, len, mk_none(), 0, NULL, 0};
    return vars_trap(v, &c, err);
}

int tj_vars_set_json_member(tj_vars *v, const char *name, const char *json, size_t len, const char *member, tj_error *err) {
    vset c = {name, json, len, mk_none(), 0, member, 0};
    int rc = vars_trap(v, &c, err);
    return rc < 0 ? rc : c.found;
}

int tj_vars_spread_json_member(tj_vars *v, const char *json, size_t len, const char *member, tj_error *err) {
    vset c = {"", json, len, mk_none(), 1, member, 0};
    int rc = vars_trap(v, &c, err);
    return rc < 0 ? rc : c.found;
}

int tj_vars_set_json_members(tj_vars *v, const char *json, size_t len, tj_error *err) {
    vset c = {"", json, len, mk_none(), 1, NULL, 0};
    return vars_trap(v, &c, err);
}

int tj_vars_set_string(tj_vars *v, const char *name, const char *s) {
    vset c = {name, NULL, 0, mk_str(s, strlen(s)), 0, NULL, 0};
    return vars_trap(v, &c, NULL);
}

int tj_vars_set_bool(tj_vars *v, const char *name, int b) {
    vset c = {name, NULL, 0, mk_bool(b), 0, NULL, 0};
    return vars_trap(v, &c, NULL);
}

int tj_vars_set_none(tj_vars *v, const char *name) {
    vset c = {name, NULL, 0, mk_none(), 0, NULL, 0};
    return vars_trap(v, &c, NULL);
}

/* The part of a render that may unwind: nothing read after longjmp but r. */
static int render_run(rt *r, const tj_template *t, const tj_vars *v, sbuf *b) {
    if (setjmp(r->jb)) return -1;
    frame *globals = frame_new(r, NULL);
    if (v)
        for (int i = 0; i < v->n; i++) frame_set(r, globals, v->names[i], v->vals[i]);
    frame *top = frame_new(r, globals);
    sb_init(b, r->a);
    r->out = b;
    exec_body(r, t->root->list, t->root->n, top);
    return 0;
}

int tj_render(const tj_template *t, const tj_vars *v, char **out, size_t *out_len, tj_error *err) {
    tj_error dummy;
    tj_error *e = err ? err : &dummy;
    memset(e, 0, sizeof *e);
    *out = NULL;
    if (out_len) *out_len = 0;
    rt *r = ts_alloc(sizeof *r, TS_MEM_MISC);
    arena *a = ts_alloc(sizeof *a, TS_MEM_MISC);
    sbuf b;
    int rc = -1;
    if (!r || !a) {
        e->kind = TJ_NOMEM;
        snprintf(e->msg, sizeof e->msg, "out of memory");
        goto done;
    }
    a->limit = t->o.max_bytes;
    a->err = e;
    a->jb = &r->jb;
    r->a = a;
    r->err = e;
    r->max_steps = t->o.max_steps;
    if (render_run(r, t, v, &b) != 0) goto done;
    char *res = ts_alloc(b.n + 1, TS_MEM_MISC);
    if (!res) {
        e->kind = TJ_NOMEM;
        snprintf(e->msg, sizeof e->msg, "out of memory");
        goto done;
    }
    if (b.n) memcpy(res, b.p, b.n);
    res[b.n] = 0;
    *out = res;
    if (out_len) *out_len = b.n;
    rc = 0;
done:
    if (a) arena_free(a);
    ts_free(a);
    ts_free(r);
    return rc;
}

int tj_json_pydumps(const char *json, size_t len, char **out, tj_error *err) {
    tj_vars *v = tj_vars_new();
    if (!v) return -1;
    int rc = tj_vars_set_json(v, "x", json, len, err);
    if (rc == 0) {
        tj_template *t;
        static const char src[] = "{{ x|tojson }}";
        rc = tj_parse(src, sizeof src - 1, NULL, &t, err);
        if (rc == 0) {
            rc = tj_render(t, v, out, NULL, err);
            tj_template_free(t);
        }
    }
    tj_vars_free(v);
    return rc;
}
