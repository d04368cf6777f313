/* schema_fsm.c: the recognizer of documents against a compiled schema
 * (schema_fsm.h).
 *
 * One switch over the lexical state per thread, as json_fsm.c, with the
 * schema read where JSON leaves a choice: at a value's first byte (the
 * node's types, or its enum literals, or each alternative), at a key (the
 * properties that may come next, as literals: their quoted names), after
 * a value (',' only when another property or item may follow, the closer
 * only when nothing required is missing and enough items came), at a
 * string's characters and its closing quote (the length bounds).
 *
 * A wrapped schema (ts_schema_set_wrap) reads its literals around the
 * document at depth 0: S_WLIT byte by byte, the document's start after
 * the prefix, S_AFTER at depth 0 hands the next byte to the suffix, S_WEND
 * after it. The document's top-level whitespace is refused there, so a
 * literal's whitespace is read one way only.
 *
 * Invariants: heads are normalized when emitted (fields their state does
 * not read are zero, counts clamped where only a bound reads them), so
 * equal readings compare equal byte for byte, which both the merging of
 * threads and the mask cache's key (constraint.c) rely on. Frames are
 * written whole (no padding bytes left undefined).
 */
#include "text/schema_fsm.h"

#include <string.h>

#include "text/json_fsm.h"

enum slex {
    S_VALUE,     /* a value of h.node (anyOf: of one of its leaves); whitespace */
    S_ARR_FIRST, /* after '[': ']' or the first item */
    S_OBJ_FIRST, /* after '{': '}' or a key */
    S_OBJ_KEY,   /* after an object's ',': a key */
    S_KEY,       /* a property's quoted name, as a literal (cand, cnt) */
    S_COLON,     /* after a key: ':', then a value of h.node */
    S_AFTER,     /* after a value: ',' or the closer; at depth 0 whitespace only */
    S_STR,       /* inside a string (a value, or a free key: h.key) */
    S_ESC,       /* after a backslash */
    S_HEX,       /* \u: aux hex digits left */
    S_LIT,       /* true/false/null: aux = literal << 4 | bytes matched */
    S_ENUM,      /* an enum literal (cand, cnt) */
    S_MINUS,     /* number: after '-' (aux 1: an integer) */
    S_ZERO,      /* number: a leading 0 (complete) */
    S_INT,       /* number: integer digits (complete) */
    S_DOT,       /* number: after '.' */
    S_FRAC,      /* number: fraction digits (complete) */
    S_E,         /* number: after 'e' */
    S_ESIGN,     /* number: after the exponent's sign */
    S_EXP,       /* number: exponent digits (complete) */
    S_WLIT,      /* a wrapped schema's literal (json_schema.h TS_SW_*): aux which, cnt bytes matched */
    S_WEND,      /* after a wrapped document's suffix: the end, or (repeat) the next separator */
    S_N
};

static const char *const lit_text[3] = {"true", "false", "null"};

static inline int is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
static inline int is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
static inline int hex_val(uint8_t b) {
    if (is_digit(b)) return b - '0';
    b |= 0x20;
    return b >= 'a' && b <= 'f' ? b - 'a' + 10 : -1;
}
static inline int is_string(uint8_t lex) { return lex == S_STR || lex == S_ESC || lex == S_HEX; }
static inline int number_complete(uint8_t lex) { return lex == S_ZERO || lex == S_INT || lex == S_FRAC || lex == S_EXP; }

/* ---- the step's context and a thread's stack ---- */

typedef struct sctx {
    const ts_schema *sc;
    const ts_sstate *base; /* the flat state the threads' bottom frames are in */
    ts_swstate *out;
} sctx;

static inline int depth_of(const ts_swthread *t) { return t->nb + t->no; }

static inline const ts_sframe *top(const sctx *x, const ts_swthread *t) {
    return t->no ? &t->ov[t->no - 1] : &x->base->f[t->base][t->nb - 1];
}

/* The top frame, to change: copied from the base onto the thread's own
 * frames first (the base is shared). */
static inline ts_sframe *top_w(const sctx *x, ts_swthread *t) {
    if (!t->no) {
        t->ov[0] = x->base->f[t->base][--t->nb];
        t->no = 1;
    }
    return &t->ov[t->no - 1];
}

static inline int push(ts_swthread *t, int node, int obj) {
    if (depth_of(t) >= TS_SFSM_DEPTH || t->no >= TS_SFSM_OVERLAY) return 0;
    t->ov[t->no++] = (ts_sframe){(uint16_t)node, (uint8_t)obj, 0, 0};
    return 1;
}

static inline void pop(ts_swthread *t) {
    if (t->no) t->no--;
    else t->nb--;
}

/* Items begun, as the frame keeps them: without maxItems only "at least
 * minItems" is ever read, so the count stops there. */
static inline uint32_t items_inc(const ts_snode *n, uint32_t k) {
    k = k < UINT32_MAX ? k + 1 : k;
    return n->max_items == TS_SCHEMA_UNBOUNDED && k > n->min_items ? n->min_items : k;
}

/* ---- literals: enum values and property keys ---- */

/* The lowest literal in [cand, hi] that shares cand's first len bytes and
 * has b next, or -1. (Those sharing a prefix with cand all lie at or after
 * it: cand is the lowest of them.) */
static int lit_next(const ts_schema *sc, uint32_t cand, uint32_t hi, uint32_t len, uint8_t b) {
    const uint8_t *p = sc->bytes + sc->lits[cand].off;
    for (uint32_t j = cand; j <= hi; j++) {
        const ts_slit *L = &sc->lits[j];
        if (L->len <= len) continue;
        const uint8_t *q = sc->bytes + L->off;
        if (q[len] == b && (j == cand || !memcmp(q, p, len))) return (int)j;
    }
    return -1;
}

/* Whether a literal of [cand, hi] sharing cand's first len bytes ends
 * there (more 0) or goes on (more 1). */
static int lit_has(const ts_schema *sc, uint32_t cand, uint32_t hi, uint32_t len, int more) {
    const uint8_t *p = sc->bytes + sc->lits[cand].off;
    for (uint32_t j = cand; j <= hi; j++) {
        const ts_slit *L = &sc->lits[j];
        if ((more ? L->len > len : L->len == len) && (j == cand || !memcmp(sc->bytes + L->off, p, len))) return 1;
    }
    return 0;
}

static inline uint32_t enum_hi(const ts_snode *n) { return n->lit0 + n->n_lits - 1; }

/* The keys that may come next in object frame f: properties [f->n, hi]
 * (up to the first required one), as literal indices. 0 when none. */
static int key_range(const ts_schema *sc, const ts_sframe *f, uint32_t *lo, uint32_t *hi) {
    const ts_snode *n = &sc->nodes[f->node];
    if (f->n >= n->n_props) return 0;
    const uint32_t r = ts_schema_req_from(sc, n, f->n);
    *lo = n->plit0 + f->n;
    *hi = n->plit0 + (r < n->n_props ? r : n->n_props - 1);
    return 1;
}

/* ---- emitting a thread ---- */

static void norm(const ts_schema *sc, ts_shead *h) {
    const uint8_t lex = h->lex;
    const int str = is_string(lex), vstr = str && !h->key;
    if (!str) h->key = 0;
    if (!str || !h->un) h->un = h->ulo = h->uhi = 0;
    /* aux: a literal's progress, \u's digits, the integer flag (read until
     * a '.' or 'e' could come; an integer never gets past them) */
    if (lex != S_LIT && lex != S_HEX && lex != S_MINUS && lex != S_ZERO && lex != S_INT && lex != S_WLIT) h->aux = 0;
    if (lex != S_VALUE && lex != S_COLON && lex != S_ENUM && !vstr) h->node = 0;
    if (vstr) {
        const ts_snode *n = &sc->nodes[h->node];
        if (lex != S_HEX) h->cand &= 0x80000000u;
        /* without maxLength only "at least minLength" is read: the count
         * (and a surrogate's half, which only changes the count) stop there */
        if (n->max_len == TS_SCHEMA_UNBOUNDED && h->cnt >= n->min_len) h->cnt = n->min_len, h->cand = 0;
    } else if (lex == S_WLIT) h->cand = 0;
    else if (lex != S_KEY && lex != S_ENUM) h->cnt = h->cand = 0;
    h->pad = 0, h->pad2 = 0;
}

static int same_thread(const ts_swthread *a, const ts_swthread *b) {
    return !memcmp(&a->h, &b->h, sizeof a->h) && a->base == b->base && a->nb == b->nb && a->no == b->no &&
           !memcmp(a->ov, b->ov, sizeof(ts_sframe) * a->no);
}

static void emit(sctx *x, ts_swthread *t) {
    norm(x->sc, &t->h);
    ts_swstate *o = x->out;
    for (int i = 0; i < o->n; i++)
        if (same_thread(&o->t[i], t)) return;
    if (o->n == TS_SFSM_THREADS) return; /* the cap (schema_fsm.h) */
    ts_swthread *d = &o->t[o->n++];
    d->h = t->h;
    d->base = t->base, d->nb = t->nb, d->no = t->no;
    memcpy(d->ov, t->ov, sizeof(ts_sframe) * t->no);
}

/* A value ended: the state after it (the container's rules come at the
 * next byte). */
static void finish(sctx *x, ts_swthread *t) {
    t->h.lex = S_AFTER;
    emit(x, t);
}

static void close_container(sctx *x, ts_swthread *t) {
    pop(t);
    finish(x, t);
}

/* ---- value starts ---- */

static void value_start_leaf(sctx *x, const ts_swthread *t0, int leaf, uint8_t b) {
    const ts_schema *sc = x->sc;
    const ts_snode *n = &sc->nodes[leaf];
    ts_swthread t = *t0;
    t.h.node = (uint16_t)leaf;
    t.h.aux = 0, t.h.cnt = 0, t.h.cand = 0, t.h.key = 0;
    if (n->kind == TS_SK_ENUM) {
        const int j = lit_next(sc, n->lit0, enum_hi(n), 0, b);
        if (j < 0) return;
        t.h.lex = S_ENUM, t.h.cand = (uint32_t)j, t.h.cnt = 1;
        if (lit_has(sc, (uint32_t)j, enum_hi(n), 1, 0) && !lit_has(sc, (uint32_t)j, enum_hi(n), 1, 1)) t.h.lex = S_AFTER;
        emit(x, &t);
        return;
    }
    const uint8_t ty = n->types;
    switch (b) {
    case '{':
        if (!(ty & TS_ST_OBJ) || !push(&t, leaf, 1)) return;
        t.h.lex = S_OBJ_FIRST;
        break;
    case '[':
        if (!(ty & TS_ST_ARR) || !push(&t, leaf, 0)) return;
        t.h.lex = S_ARR_FIRST;
        break;
    case '"':
        if (!(ty & TS_ST_STR)) return;
        t.h.lex = S_STR;
        break;
    case 't':
    case 'f':
        if (!(ty & TS_ST_BOOL)) return;
        t.h.lex = S_LIT, t.h.aux = (uint8_t)((b == 'f') << 4 | 1);
        break;
    case 'n':
        if (!(ty & TS_ST_NULL)) return;
        t.h.lex = S_LIT, t.h.aux = 2 << 4 | 1;
        break;
    default:
        if (!(ty & (TS_ST_NUM | TS_ST_INT)) || !(b == '-' || is_digit(b))) return;
        t.h.lex = b == '-' ? S_MINUS : b == '0' ? S_ZERO : S_INT;
        t.h.aux = !(ty & TS_ST_NUM);
    }
    emit(x, &t);
}

static void value_start(sctx *x, const ts_swthread *t, int node, uint8_t b) {
    const ts_snode *n = &x->sc->nodes[node];
    if (n->kind != TS_SK_ANYOF) {
        value_start_leaf(x, t, node, b);
        return;
    }
    for (uint32_t k = 0; k < n->n_alts; k++) value_start_leaf(x, t, x->sc->alts[n->alt0 + k], b);
}

/* ---- containers ---- */

static int obj_can_close(const ts_schema *sc, const ts_sframe *f) {
    const ts_snode *n = &sc->nodes[f->node];
    return !n->n_props || ts_schema_req_from(sc, n, f->n) == n->n_props;
}

static void key_start(sctx *x, ts_swthread *t, uint8_t b) {
    const ts_sframe *f = top(x, t);
    const ts_snode *n = &x->sc->nodes[f->node];
    if (!n->n_props) { /* free keys (or none: extra -1, only {}) */
        if (n->extra < 0 || b != '"') return;
        t->h.lex = S_STR, t->h.key = 1;
        emit(x, t);
        return;
    }
    uint32_t lo, hi;
    if (!key_range(x->sc, f, &lo, &hi)) return;
    const int j = lit_next(x->sc, lo, hi, 0, b);
    if (j < 0) return;
    t->h.lex = S_KEY, t->h.cand = (uint32_t)j, t->h.cnt = 1;
    emit(x, t);
}

static void key_byte(sctx *x, ts_swthread *t, uint8_t b) {
    const ts_sframe *f = top(x, t);
    uint32_t lo, hi;
    if (!key_range(x->sc, f, &lo, &hi)) return;
    const int j = lit_next(x->sc, t->h.cand, hi, t->h.cnt, b);
    if (j < 0) return;
    t->h.cand = (uint32_t)j, t->h.cnt++;
    if (t->h.cnt == x->sc->lits[j].len) { /* the closing quote: one property (names are quoted) */
        const ts_snode *n = &x->sc->nodes[f->node];
        const uint32_t k = (uint32_t)j - n->plit0;
        top_w(x, t)->n = k + 1;
        t->h.lex = S_COLON;
        t->h.node = (uint16_t)x->sc->props[n->prop0 + k].node;
    }
    emit(x, t);
}

/* ---- a wrapped schema's literals ---- */

/* Byte b at position pos of literal k: the literal goes on, or ends (the
 * suffix: S_WEND; a prefix: the document starts). */
static void wrap_byte(sctx *x, ts_swthread *t, int k, uint32_t pos, uint8_t b) {
    const ts_schema *sc = x->sc;
    if (pos >= sc->wrap_len[k] || sc->wrap[sc->wrap_off[k] + pos] != b) return;
    t->h.aux = 0, t->h.cnt = 0, t->h.node = 0;
    if (++pos < sc->wrap_len[k]) {
        t->h.lex = S_WLIT, t->h.aux = (uint8_t)k, t->h.cnt = pos;
    } else if (k == TS_SW_SUFFIX) {
        t->h.lex = S_WEND;
    } else {
        t->h.lex = S_VALUE, t->h.node = (uint16_t)sc->root;
    }
    emit(x, t);
}

/* After the suffix: with repeat, the next document's separator and prefix. */
static void wrap_end_byte(sctx *x, ts_swthread *t, uint8_t b) {
    if (x->sc->wrap_repeat) wrap_byte(x, t, TS_SW_NEXT, 0, b);
}

/* A wrapped document is complete: b starts the suffix (or, without one,
 * what may follow it). */
static void wrap_doc_end(sctx *x, ts_swthread *t, uint8_t b) {
    if (x->sc->wrap_len[TS_SW_SUFFIX]) wrap_byte(x, t, TS_SW_SUFFIX, 0, b);
    else wrap_end_byte(x, t, b);
}

/* After a value (also the byte that ends a number or a literal): run is
 * the whitespace run before b. */
static void after_value(sctx *x, ts_swthread *t, uint8_t b, uint8_t run) {
    t->h.lex = S_AFTER;
    if (x->sc->wrap && !depth_of(t)) {
        wrap_doc_end(x, t, b);
        return;
    }
    if (is_ws(b)) {
        if (run >= TS_JSON_MAX_WS) return;
        t->h.ws = (uint8_t)(run + 1);
        emit(x, t);
        return;
    }
    if (!depth_of(t)) return;
    const ts_sframe *f = top(x, t);
    const ts_snode *n = &x->sc->nodes[f->node];
    if (f->obj) {
        if (b == ',' && (n->n_props ? f->n < n->n_props : n->extra >= 0)) {
            t->h.lex = S_OBJ_KEY;
            emit(x, t);
        } else if (b == '}' && obj_can_close(x->sc, f))
            close_container(x, t);
        return;
    }
    if (b == ',' && f->n < n->max_items) {
        ts_sframe *fw = top_w(x, t);
        fw->n = items_inc(n, fw->n);
        t->h.lex = S_VALUE, t->h.node = (uint16_t)n->items;
        emit(x, t);
    } else if (b == ']' && f->n >= n->min_items)
        close_container(x, t);
}

/* ---- strings ---- */

/* A value string at its maxLength. */
static inline int full(const sctx *x, const ts_swthread *t) { return t->h.cnt >= x->sc->nodes[t->h.node].max_len; }

/* A character of a value string begins (low: a \u escape of a low
 * surrogate): counted against maxLength, except the second half of a
 * surrogate pair (one code point, as Python's len() counts it). */
static int count_char(const sctx *x, ts_swthread *t, int low) {
    if (t->h.key) return 1;
    if (low && (t->h.cand >> 31)) {
        t->h.cand = 0;
        return 1;
    }
    if (t->h.cnt >= x->sc->nodes[t->h.node].max_len) return 0;
    t->h.cnt++;
    t->h.cand = 0;
    return 1;
}

static void string_byte(sctx *x, ts_swthread *t, uint8_t b) {
    if (t->h.un) {
        if (b < t->h.ulo || b > t->h.uhi) return;
        t->h.un--, t->h.ulo = 0x80, t->h.uhi = 0xBF;
        emit(x, t);
        return;
    }
    if (b == '"') {
        if (t->h.key) { /* a free key: its value follows the map's schema */
            t->h.key = 0;
            t->h.lex = S_COLON;
            t->h.node = (uint16_t)x->sc->nodes[top(x, t)->node].extra;
            emit(x, t);
        } else if (t->h.cnt >= x->sc->nodes[t->h.node].min_len)
            finish(x, t);
        return;
    }
    if (b == '\\') {
        /* at maxLength an escape is a code point too many, unless it ends a
         * surrogate pair (then \u and a low half: hex_byte) */
        if (!t->h.key && full(x, t) && !(t->h.cand >> 31)) return;
        t->h.lex = S_ESC;
        emit(x, t);
        return;
    }
    if (b < 0x20) return; /* control characters must be escaped */
    if (b >= 0x80) {
        uint8_t n, lo, hi;
        if (!ts_jfsm_utf8_lead(b, &n, &lo, &hi)) return;
        t->h.un = n, t->h.ulo = lo, t->h.uhi = hi;
    }
    if (count_char(x, t, 0)) emit(x, t);
}

static void escape_byte(sctx *x, ts_swthread *t, uint8_t b) {
    switch (b) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        t->h.lex = S_STR;
        if (count_char(x, t, 0)) emit(x, t);
        return;
    case 'u':
        t->h.lex = S_HEX, t->h.aux = 4;
        t->h.cand &= 0x80000000u;
        emit(x, t);
        return;
    default: return;
    }
}

static void hex_byte(sctx *x, ts_swthread *t, uint8_t b) {
    const int v = hex_val(b);
    if (v < 0) return;
    /* at maxLength only a low surrogate (DC00-DFFF) after a high one fits:
     * refuse at the first digit that rules it out, not at the fourth */
    if (!t->h.key && full(x, t) && ((t->h.aux == 4 && v != 0xD) || (t->h.aux == 3 && v < 0xC))) return;
    if (!t->h.key) t->h.cand = (t->h.cand & 0x80000000u) | ((t->h.cand & 0xFFFu) << 4) | (uint32_t)v;
    if (--t->h.aux) {
        emit(x, t);
        return;
    }
    t->h.lex = S_STR;
    const uint32_t u = t->h.cand & 0xFFFFu;
    if (!count_char(x, t, u >= 0xDC00 && u <= 0xDFFF)) return;
    if (!t->h.key && u >= 0xD800 && u <= 0xDBFF) t->h.cand = 0x80000000u; /* a pair's first half */
    emit(x, t);
}

/* ---- one thread, one byte ---- */

static void step_thread(sctx *x, const ts_swthread *in, uint8_t b) {
    ts_swthread t = *in;
    const uint8_t run = t.h.ws; /* whitespace before b; any byte but more whitespace ends the run */
    t.h.ws = 0;
    const int w = is_ws(b);
    const ts_schema *sc = x->sc;
    switch (t.h.lex) {
    case S_VALUE:
    case S_OBJ_KEY:
    case S_COLON:
    case S_ARR_FIRST:
    case S_OBJ_FIRST:
        if (w) {
            /* a wrapped document starts right after its prefix */
            if (run >= TS_JSON_MAX_WS || (t.h.lex == S_VALUE && sc->wrap && !depth_of(&t))) return;
            t.h.ws = (uint8_t)(run + 1);
            emit(x, &t);
            return;
        }
        break;
    default: break;
    }
    switch (t.h.lex) {
    case S_VALUE: value_start(x, &t, t.h.node, b); return;
    case S_ARR_FIRST: {
        const ts_sframe *f = top(x, &t);
        const ts_snode *n = &sc->nodes[f->node];
        if (b == ']') {
            if (!n->min_items) close_container(x, &t);
            return;
        }
        if (!n->max_items) return;
        ts_sframe *fw = top_w(x, &t);
        fw->n = items_inc(n, 0);
        value_start(x, &t, n->items, b);
        return;
    }
    case S_OBJ_FIRST:
        if (b == '}') {
            if (obj_can_close(sc, top(x, &t))) close_container(x, &t);
            return;
        }
        key_start(x, &t, b);
        return;
    case S_OBJ_KEY: key_start(x, &t, b); return;
    case S_KEY: key_byte(x, &t, b); return;
    case S_COLON:
        if (b != ':') return;
        t.h.lex = S_VALUE;
        emit(x, &t);
        return;
    case S_AFTER: after_value(x, &t, b, run); return;
    case S_STR: string_byte(x, &t, b); return;
    case S_ESC: escape_byte(x, &t, b); return;
    case S_HEX: hex_byte(x, &t, b); return;
    case S_LIT: {
        const char *s = lit_text[t.h.aux >> 4];
        const unsigned k = t.h.aux & 15;
        if ((uint8_t)s[k] != b) return;
        if (s[k + 1]) {
            t.h.aux++;
            emit(x, &t);
        } else finish(x, &t);
        return;
    }
    case S_ENUM: {
        const ts_snode *n = &sc->nodes[t.h.node];
        const int j = lit_next(sc, t.h.cand, enum_hi(n), t.h.cnt, b);
        if (j >= 0) {
            t.h.cand = (uint32_t)j, t.h.cnt++;
            if (lit_has(sc, (uint32_t)j, enum_hi(n), t.h.cnt, 0) && !lit_has(sc, (uint32_t)j, enum_hi(n), t.h.cnt, 1))
                finish(x, &t);
            else emit(x, &t);
        } else if (lit_has(sc, t.h.cand, enum_hi(n), t.h.cnt, 0)) /* "1" of [1, 12], then ',' */
            after_value(x, &t, b, run);
        return;
    }
    case S_MINUS:
        if (b == '0') t.h.lex = S_ZERO;
        else if (b >= '1' && b <= '9') t.h.lex = S_INT;
        else return;
        emit(x, &t);
        return;
    case S_ZERO:
    case S_INT:
        if (is_digit(b) && t.h.lex == S_INT) emit(x, &t);
        else if (b == '.' && !t.h.aux) t.h.lex = S_DOT, emit(x, &t);
        else if ((b | 0x20) == 'e' && !t.h.aux) t.h.lex = S_E, emit(x, &t);
        else if (!is_digit(b) && b != '.' && (b | 0x20) != 'e') after_value(x, &t, b, run);
        return;
    case S_DOT:
        if (!is_digit(b)) return;
        t.h.lex = S_FRAC;
        emit(x, &t);
        return;
    case S_FRAC:
        if (is_digit(b)) emit(x, &t);
        else if ((b | 0x20) == 'e') t.h.lex = S_E, emit(x, &t);
        else after_value(x, &t, b, run);
        return;
    case S_E:
        if (b == '+' || b == '-') {
            t.h.lex = S_ESIGN;
            emit(x, &t);
            return;
        }
        /* fall through */
    case S_ESIGN:
        if (!is_digit(b)) return;
        t.h.lex = S_EXP;
        emit(x, &t);
        return;
    case S_EXP:
        if (is_digit(b)) emit(x, &t);
        else after_value(x, &t, b, run);
        return;
    case S_WLIT: wrap_byte(x, &t, t.h.aux, t.h.cnt, b); return;
    case S_WEND: wrap_end_byte(x, &t, b); return;
    default: return;
    }
}

/* ---- the public side ---- */

void ts_sfsm_init(ts_sstate *s, const ts_schema *sc) {
    s->n = 1;
    memset(&s->t[0], 0, sizeof s->t[0]);
    s->t[0].h.lex = S_VALUE;
    s->t[0].h.node = (uint16_t)sc->root;
    if (sc->wrap && sc->wrap_len[TS_SW_FIRST]) { /* the prefix first */
        s->t[0].h.lex = S_WLIT;
        s->t[0].h.node = 0;
        s->t[0].h.aux = TS_SW_FIRST;
    }
}

void ts_sfsm_lift(const ts_sstate *s, ts_swstate *w) {
    w->n = s->n;
    for (int i = 0; i < s->n; i++) {
        ts_swthread *t = &w->t[i];
        t->h = s->t[i].h;
        t->base = (uint16_t)i, t->nb = s->t[i].depth, t->no = 0;
    }
}

int ts_sfsm_step(const ts_schema *sc, const ts_sstate *base, const ts_swstate *in, uint8_t b, ts_swstate *out) {
    sctx x = {sc, base, out};
    out->n = 0;
    for (int i = 0; i < in->n; i++) step_thread(&x, &in->t[i], b);
    return out->n;
}

/* Only literal bytes leave a thread in S_WLIT or S_WEND, and only a
 * prefix's last byte at a document's start (S_VALUE at depth 0: the
 * document's own whitespace is refused there): the readings in which b was
 * a literal's. */
int ts_sfsm_step_literal(const ts_schema *sc, const ts_sstate *base, const ts_swstate *in, uint8_t b, ts_swstate *out) {
    if (!sc->wrap) return out->n = 0;
    ts_sfsm_step(sc, base, in, b, out);
    int k = 0;
    for (int i = 0; i < out->n; i++) {
        const ts_swthread *t = &out->t[i];
        const uint8_t lex = t->h.lex;
        if (lex == S_WLIT || lex == S_WEND || (lex == S_VALUE && !depth_of(t))) {
            if (k != i) out->t[k] = *t;
            k++;
        }
    }
    return out->n = k;
}

void ts_sfsm_flatten(const ts_sstate *base, const ts_swstate *w, ts_sstate *out) {
    out->n = 0;
    for (int i = 0; i < w->n; i++) {
        const ts_swthread *t = &w->t[i];
        const int k = out->n, d = t->nb + t->no;
        memcpy(out->f[k], base->f[t->base], sizeof(ts_sframe) * t->nb);
        memcpy(out->f[k] + t->nb, t->ov, sizeof(ts_sframe) * t->no);
        memset(&out->t[k], 0, sizeof out->t[k]);
        out->t[k].h = t->h;
        out->t[k].depth = (uint16_t)d;
        int dup = 0;
        for (int j = 0; j < k && !dup; j++)
            dup = out->t[j].depth == d && !memcmp(&out->t[j].h, &t->h, sizeof t->h) &&
                  !memcmp(out->f[j], out->f[k], sizeof(ts_sframe) * (size_t)d);
        if (!dup) out->n++;
    }
}

void ts_sfsm_copy(ts_sstate *dst, const ts_sstate *src) {
    dst->n = src->n;
    for (int i = 0; i < src->n; i++) {
        dst->t[i] = src->t[i];
        memcpy(dst->f[i], src->f[i], sizeof(ts_sframe) * src->t[i].depth);
    }
}

int ts_sfsm_feed_token(const ts_schema *sc, ts_sstate *s, const void *p, size_t n, ts_sfsm_work *w) {
    const uint8_t *b = p;
    ts_swstate *cur = &w->a, *nxt = &w->b;
    ts_sfsm_lift(s, cur);
    for (size_t i = 0; i < n; i++) {
        if (!ts_sfsm_step(sc, s, cur, b[i], nxt)) return 0;
        ts_swstate *t = cur;
        cur = nxt, nxt = t;
    }
    ts_sfsm_flatten(s, cur, &w->tmp);
    ts_sfsm_copy(s, &w->tmp);
    return 1;
}

int ts_sfsm_feed_literal(const ts_schema *sc, ts_sstate *s, const void *p, size_t n, ts_sfsm_work *w) {
    const uint8_t *b = p;
    ts_swstate *cur = &w->a, *nxt = &w->b;
    ts_sfsm_lift(s, cur);
    for (size_t i = 0; i < n; i++) {
        if (!ts_sfsm_step_literal(sc, s, cur, b[i], nxt)) return 0;
        ts_swstate *t = cur;
        cur = nxt, nxt = t;
    }
    ts_sfsm_flatten(s, cur, &w->tmp);
    ts_sfsm_copy(s, &w->tmp);
    return 1;
}

int ts_sfsm_feed_bytes(const ts_schema *sc, ts_sstate *s, const void *p, size_t n, ts_sfsm_work *w) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (!ts_sfsm_feed_token(sc, s, b + i, 1, w)) return 0;
    return 1;
}

/* The document (a wrapped one without its literals) is complete. */
static int doc_complete(const ts_schema *sc, const ts_sthread *t) {
    if (t->depth) return 0;
    const uint8_t lex = t->h.lex;
    if (lex == S_AFTER || number_complete(lex)) return 1;
    if (lex != S_ENUM) return 0;
    const ts_snode *n = &sc->nodes[t->h.node];
    return lit_has(sc, t->h.cand, enum_hi(n), t->h.cnt, 0);
}

/* A wrapped schema is complete after a suffix (a document, without one). */
static int thread_complete(const ts_schema *sc, const ts_sthread *t) {
    if (!sc->wrap) return doc_complete(sc, t);
    return t->h.lex == S_WEND || (!sc->wrap_len[TS_SW_SUFFIX] && doc_complete(sc, t));
}

int ts_sfsm_complete(const ts_schema *sc, const ts_sstate *s) {
    for (int i = 0; i < s->n; i++)
        if (thread_complete(sc, &s->t[i])) return 1;
    return 0;
}

int ts_sfsm_done(const ts_schema *sc, const ts_sstate *s) {
    if (sc->wrap && sc->wrap_repeat) return 0; /* another document may follow */
    for (int i = 0; i < s->n; i++) {
        const ts_sthread *t = &s->t[i];
        const int end = !sc->wrap || !sc->wrap_len[TS_SW_SUFFIX] ? !t->depth && t->h.lex == S_AFTER : t->h.lex == S_WEND;
        if (!end) return 0;
    }
    return s->n > 0;
}

int ts_sfsm_in_string(const ts_schema *sc, const ts_swstate *w, int *cls, uint32_t *room) {
    if (w->n != 1 || w->t[0].h.lex != S_STR) return 0;
    const ts_shead *h = &w->t[0].h;
    *cls = ts_jfsm_utf8_class(h->un, h->ulo, h->uhi);
    const uint32_t max = h->key ? TS_SCHEMA_UNBOUNDED : sc->nodes[h->node].max_len;
    *room = max == TS_SCHEMA_UNBOUNDED ? UINT32_MAX : max - h->cnt;
    return *cls >= 0;
}

size_t ts_sfsm_key(const ts_schema *sc, const ts_sstate *s, int close, int open, uint8_t *buf) {
    uint8_t *p = buf;
    memcpy(p, &s->n, sizeof s->n);
    p += sizeof s->n;
    const int reach = close + 1;
    for (int i = 0; i < s->n; i++) {
        const int d = s->t[i].depth;
        memcpy(p, &s->t[i].h, sizeof(ts_shead));
        p += sizeof(ts_shead);
        /* the depth only where a token could reach the bottom or the cap */
        const uint32_t dk = d <= reach || d + open >= TS_SFSM_DEPTH ? (uint32_t)d : 0xFFFFu;
        memcpy(p, &dk, 4);
        p += 4;
        const int from = d > reach ? d - reach : 0;
        memcpy(p, s->f[i] + from, sizeof(ts_sframe) * (size_t)(d - from));
        p += sizeof(ts_sframe) * (size_t)(d - from);
    }
    return (size_t)(p - buf);
}

const char *ts_sfsm_describe(const ts_sstate *s) {
    static const char *const name[S_N] = {
        "a value", "after '['", "after '{'", "an object key", "a property name", "':' after a key", "after a value",
        "inside a string", "an escape", "a \\u escape", "a literal", "an enum value", "a number after '-'", "a number",
        "a number", "a number's fraction", "a number's fraction", "an exponent", "an exponent", "an exponent",
        "the wrap's literal text", "after the wrap's suffix"};
    if (!s->n) return "no reading left";
    const uint8_t lex = s->t[0].h.lex;
    return lex < S_N ? name[lex] : "an unknown state";
}
