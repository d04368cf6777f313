/* json_fsm.c: the byte-level JSON recognizer (json_fsm.h).
 *
 * A pushdown automaton written as one switch over the lexical state. Numbers
 * have no closing byte, so a number state that is complete hands the byte
 * that ends it to the after-value state (which is also how a top-level
 * number may end with whitespace). Every transition is from RFC 8259's
 * grammar (sections 2-7) and RFC 3629's table of well-formed UTF-8 byte
 * sequences (section 4).
 */
#include "text/json_fsm.h"

#include <string.h>

enum jlex {
    J_START,     /* before the text: any value, whitespace */
    J_START_OBJ, /* before the text: an object only */
    J_VALUE,     /* a value (after ':' or an array's ',') */
    J_ARR_FIRST, /* after '[': a value or ']' */
    J_OBJ_FIRST, /* after '{': a key or '}' */
    J_OBJ_KEY,   /* after an object's ',': a key */
    J_COLON,     /* after a key: ':' */
    J_AFTER,     /* after a value: ',' or the closer; at depth 0 whitespace only */
    J_STR,       /* inside a string (key: h.key) */
    J_ESC,       /* after a backslash */
    J_HEX,       /* \u: aux hex digits left */
    J_LIT,       /* true/false/null: aux = literal << 4 | bytes matched */
    J_MINUS,     /* number: after '-' */
    J_ZERO,      /* number: a leading 0 (complete) */
    J_INT,       /* number: integer digits (complete) */
    J_DOT,       /* number: after '.' */
    J_FRAC,      /* number: fraction digits (complete) */
    J_E,         /* number: after 'e' */
    J_ESIGN,     /* number: after the exponent's sign */
    J_EXP,       /* number: exponent digits (complete) */
    J_N
};

static const char *const lit_text[3] = {"true", "false", "null"};

static inline int is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
static inline int is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
static inline int is_hex(uint8_t b) { return is_digit(b) || ((b | 0x20) >= 'a' && (b | 0x20) <= 'f'); }

static inline int top_is_object(const ts_jhead *h, const uint64_t *st) {
    const unsigned i = (unsigned)h->depth - 1;
    return (int)((st[i >> 6] >> (i & 63)) & 1);
}

static inline int push(ts_jhead *h, uint64_t *st, int object) {
    if (h->depth >= TS_JSON_MAX_DEPTH) return 0;
    const unsigned i = h->depth;
    const uint64_t bit = (uint64_t)1 << (i & 63);
    st[i >> 6] = object ? st[i >> 6] | bit : st[i >> 6] & ~bit;
    h->depth++;
    h->lex = object ? J_OBJ_FIRST : J_ARR_FIRST;
    return 1;
}

static inline int pop(ts_jhead *h, const uint64_t *st, int object) {
    if (!h->depth || top_is_object(h, st) != object) return 0;
    h->depth--;
    h->lex = J_AFTER;
    return 1;
}

/* The first byte of a value. */
static inline int value_start(ts_jhead *h, uint64_t *st, uint8_t b) {
    switch (b) {
    case '{': return push(h, st, 1);
    case '[': return push(h, st, 0);
    case '"': h->lex = J_STR, h->key = 0; return 1;
    case '-': h->lex = J_MINUS; return 1;
    case '0': h->lex = J_ZERO; return 1;
    case 't': h->lex = J_LIT, h->aux = 0 << 4 | 1; return 1;
    case 'f': h->lex = J_LIT, h->aux = 1 << 4 | 1; return 1;
    case 'n': h->lex = J_LIT, h->aux = 2 << 4 | 1; return 1;
    default:
        if (b >= '1' && b <= '9') { h->lex = J_INT; return 1; }
        return 0;
    }
}

static inline int after_value(ts_jhead *h, const uint64_t *st, uint8_t b) {
    h->lex = J_AFTER;
    if (is_ws(b)) return 1;
    if (!h->depth) return 0;
    if (b == ',') {
        h->lex = top_is_object(h, st) ? J_OBJ_KEY : J_VALUE;
        return 1;
    }
    if (b == ']') return pop(h, st, 0);
    if (b == '}') return pop(h, st, 1);
    return 0;
}

int ts_jfsm_utf8_lead(uint8_t b, uint8_t *n, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) *n = 1;
    else if (b >= 0xE0 && b <= 0xEF) {
        *n = 2;
        if (b == 0xE0) *lo = 0xA0;      /* no overlong 3-byte forms */
        else if (b == 0xED) *hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        *n = 3;
        if (b == 0xF0) *lo = 0x90;      /* no overlong 4-byte forms */
        else if (b == 0xF4) *hi = 0x8F; /* nothing above U+10FFFF */
    } else return 0;
    return 1;
}

/* A byte inside a string: UTF-8 (RFC 3629 section 4), escapes, the end. */
static inline int string_byte(ts_jhead *h, uint8_t b) {
    if (h->un) {
        if (b < h->ulo || b > h->uhi) return 0;
        h->un--, h->ulo = 0x80, h->uhi = 0xBF;
        return 1;
    }
    if (b == '"') {
        h->lex = h->key ? J_COLON : J_AFTER;
        h->key = 0;
        return 1;
    }
    if (b == '\\') { h->lex = J_ESC; return 1; }
    if (b < 0x20) return 0; /* control characters must be escaped */
    if (b < 0x80) return 1;
    uint8_t n, lo, hi;
    if (!ts_jfsm_utf8_lead(b, &n, &lo, &hi)) return 0;
    h->un = n, h->ulo = lo, h->uhi = hi;
    return 1;
}

static int step(ts_jhead *h, uint64_t *st, uint8_t b) {
    switch (h->lex) {
    case J_STR: return string_byte(h, b);
    case J_START:
    case J_VALUE: return is_ws(b) || value_start(h, st, b);
    case J_START_OBJ: return is_ws(b) || (b == '{' && push(h, st, 1));
    case J_ARR_FIRST:
        if (is_ws(b)) return 1;
        return b == ']' ? pop(h, st, 0) : value_start(h, st, b);
    case J_OBJ_FIRST:
        if (b == '}') return pop(h, st, 1);
        /* fall through */
    case J_OBJ_KEY:
        if (is_ws(b)) return 1;
        if (b != '"') return 0;
        h->lex = J_STR, h->key = 1;
        return 1;
    case J_COLON:
        if (is_ws(b)) return 1;
        if (b != ':') return 0;
        h->lex = J_VALUE;
        return 1;
    case J_AFTER: return after_value(h, st, b);
    case J_ESC:
        switch (b) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            h->lex = J_STR;
            return 1;
        case 'u': h->lex = J_HEX, h->aux = 4; return 1;
        default: return 0;
        }
    case J_HEX:
        if (!is_hex(b)) return 0;
        if (--h->aux == 0) h->lex = J_STR;
        return 1;
    case J_LIT: {
        const char *t = lit_text[h->aux >> 4];
        const unsigned k = h->aux & 15;
        if ((uint8_t)t[k] != b) return 0;
        if (t[k + 1]) h->aux++;
        else h->lex = J_AFTER;
        return 1;
    }
    case J_MINUS:
        if (b == '0') { h->lex = J_ZERO; return 1; }
        if (b >= '1' && b <= '9') { h->lex = J_INT; return 1; }
        return 0;
    case J_ZERO:
        if (b == '.') { h->lex = J_DOT; return 1; }
        if ((b | 0x20) == 'e') { h->lex = J_E; return 1; }
        return after_value(h, st, b);
    case J_INT:
        if (is_digit(b)) return 1;
        if (b == '.') { h->lex = J_DOT; return 1; }
        if ((b | 0x20) == 'e') { h->lex = J_E; return 1; }
        return after_value(h, st, b);
    case J_DOT:
        if (!is_digit(b)) return 0;
        h->lex = J_FRAC;
        return 1;
    case J_FRAC:
        if (is_digit(b)) return 1;
        if ((b | 0x20) == 'e') { h->lex = J_E; return 1; }
        return after_value(h, st, b);
    case J_E:
        if (b == '+' || b == '-') { h->lex = J_ESIGN; return 1; }
        /* fall through */
    case J_ESIGN:
        if (!is_digit(b)) return 0;
        h->lex = J_EXP;
        return 1;
    case J_EXP:
        if (is_digit(b)) return 1;
        return after_value(h, st, b);
    default: return 0;
    }
}

/* Whether whitespace there is the text's (between tokens), not a string's
 * content or an error. */
static inline int ws_between(uint8_t lex) { return lex != J_STR && lex != J_ESC && lex != J_HEX && lex != J_LIT; }

/* The whitespace bound. Between tokens aux (unused there: only literals and
 * \u escapes read it) counts the whitespace bytes since the last other
 * byte, and a run longer than TS_JSON_MAX_WS is refused. Why: RFC 8259 puts
 * no bound on it, and a model can fill its whole budget with newlines
 * inside an object (the bundled model does, greedy); llama.cpp's JSON
 * grammar bounds it the same way. 32 bytes keeps pretty-printing (a newline
 * and 7 levels of 4-space indentation) possible. */
int ts_jfsm_step(ts_jhead *h, uint64_t *st, uint8_t b) {
    if (is_ws(b) && ws_between(h->lex)) {
        const uint8_t run = h->aux;
        if (run >= TS_JSON_MAX_WS || !step(h, st, b)) return 0;
        h->aux = (uint8_t)(run + 1);
        return 1;
    }
    if (!step(h, st, b)) return 0;
    if (h->lex != J_LIT && h->lex != J_HEX) h->aux = 0;
    return 1;
}

void ts_jfsm_init(ts_jfsm *s, int object_only) {
    memset(s, 0, sizeof *s);
    s->h.lex = object_only ? J_START_OBJ : J_START;
}

int ts_jfsm_feed(ts_jfsm *s, uint8_t b) { return ts_jfsm_step(&s->h, s->stack, b); }

int ts_jfsm_feed_bytes(ts_jfsm *s, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (!ts_jfsm_step(&s->h, s->stack, b[i])) return 0;
    return 1;
}

static int number_complete(uint8_t lex) { return lex == J_ZERO || lex == J_INT || lex == J_FRAC || lex == J_EXP; }

int ts_jfsm_complete(const ts_jfsm *s) {
    return s->h.depth == 0 && (s->h.lex == J_AFTER || number_complete(s->h.lex));
}

int ts_jfsm_in_number(const ts_jfsm *s) { return s->h.depth == 0 && number_complete(s->h.lex); }

ts_jhead ts_jfsm_norm_head(const ts_jhead *h) {
    ts_jhead n = *h;
    if (n.lex == J_STR || n.lex == J_ESC) n.aux = 0; /* elsewhere: a literal's, \u's or the whitespace run */
    if (n.lex != J_STR && n.lex != J_ESC && n.lex != J_HEX) n.key = 0;
    if (!n.un) n.ulo = n.uhi = 0;
    return n;
}

int ts_jfsm_utf8_class(uint8_t un, uint8_t ulo, uint8_t uhi) {
    switch (un) {
    case 0: return 0;
    case 1: return 1;
    case 2: return ulo == 0xA0 ? 2 : uhi == 0x9F ? 3 : 4;
    case 3: return ulo == 0x90 ? 5 : uhi == 0x8F ? 6 : 7;
    default: return -1;
    }
}

int ts_jfsm_string_class(const ts_jhead *h) {
    if (h->lex != J_STR) return -1;
    return ts_jfsm_utf8_class(h->un, h->ulo, h->uhi);
}

ts_jhead ts_jfsm_string_head(int cls) {
    static const uint8_t un[8] = {0, 1, 2, 2, 2, 3, 3, 3}, lo[8] = {0, 0x80, 0xA0, 0x80, 0x80, 0x90, 0x80, 0x80},
                         hi[8] = {0, 0xBF, 0xBF, 0x9F, 0xBF, 0xBF, 0x8F, 0xBF};
    ts_jhead h = {0};
    h.lex = J_STR;
    h.un = un[cls], h.ulo = lo[cls], h.uhi = hi[cls];
    return h;
}

const char *ts_jfsm_describe(const ts_jfsm *s) {
    static const char *const name[J_N] = {
        "before the text", "before the text (an object)", "a value", "after '['", "after '{'",
        "an object key", "':' after a key", "after a value", "inside a string", "an escape",
        "a \\u escape", "a literal", "a number after '-'", "a number", "a number", "a number's fraction",
        "a number's fraction", "an exponent", "an exponent", "an exponent"};
    if (s->h.lex == J_STR && s->h.un) return "inside a UTF-8 character of a string";
    return s->h.lex < J_N ? name[s->h.lex] : "an unknown state";
}
