/* json_fsm.h: a byte-level recognizer of JSON texts (RFC 8259), for
 * constrained generation (gen/constraint.c).
 *
 * Owns: the grammar of one JSON text fed a byte at a time: optional
 * whitespace, a value, optional whitespace; strings with the full escape
 * rules, no raw control characters and valid UTF-8 (RFC 3629: no overlongs,
 * no surrogates, nothing above U+10FFFF) across any cut of the bytes;
 * numbers by the RFC grammar; nesting up to TS_JSON_MAX_DEPTH containers;
 * at most TS_JSON_MAX_WS whitespace bytes in a row between tokens (the one
 * bound beyond the RFC, against whitespace loops: json_fsm.c).
 * Does not own: tokens, masks (gen/constraint.c), parsing into values.
 *
 * The state is a small head (lexical state, literal or \u progress, UTF-8
 * expectation, depth) and a bit stack of container kinds (1 = object,
 * 0 = array; bit i is the container at depth i + 1). A feed changes at most
 * the head and the one stack bit at the depth it pushes to, which is what
 * lets the mask walk (constraint.c) save and restore a state in 16 bytes.
 * Copyable by value (ts_jfsm is plain data).
 *
 * Lone surrogate escapes (\uD800 alone) are accepted: the RFC grammar
 * allows any four hex digits (its section 8.2 only warns about them).
 */
#ifndef TS_TEXT_JSON_FSM_H
#define TS_TEXT_JSON_FSM_H

#include <stddef.h>
#include <stdint.h>

#define TS_JSON_MAX_DEPTH 1024
#define TS_JSON_MAX_WS 32

typedef struct ts_jhead {
    uint8_t lex;       /* lexical state (json_fsm.c, enum jlex) */
    uint8_t aux;       /* literal: which and how far; \u: hex digits left; between
                          tokens: the whitespace bytes in a row */
    uint8_t key;       /* 1: the string being read is an object key */
    uint8_t un;        /* UTF-8 continuation bytes still expected */
    uint8_t ulo, uhi;  /* the range of the next continuation byte */
    uint16_t depth;    /* open containers */
} ts_jhead;

typedef struct ts_jfsm {
    ts_jhead h;
    uint64_t stack[TS_JSON_MAX_DEPTH / 64];
} ts_jfsm;

/* The start state: any value (object_only 0) or an object only (1). */
void ts_jfsm_init(ts_jfsm *s, int object_only);
/* Feed one byte: 1 when the text so far is still a prefix of some JSON text
 * (the state advanced), 0 when not (the state is then unspecified). */
int ts_jfsm_feed(ts_jfsm *s, uint8_t b);
/* Feed n bytes; 0 at the first refused byte. */
int ts_jfsm_feed_bytes(ts_jfsm *s, const void *p, size_t n);
/* 1 when the text so far is a complete JSON text (the bytes may still
 * continue it: a top-level number, trailing whitespace). */
int ts_jfsm_complete(const ts_jfsm *s);
/* 1 when a byte that is not whitespace can still extend a complete text
 * (a top-level number: "12" -> "123", "12.5", "12e3"). */
int ts_jfsm_in_number(const ts_jfsm *s);

/* The feed on a head and a separate stack (the mask walk's form). */
int ts_jfsm_step(ts_jhead *h, uint64_t *stack, uint8_t b);

/* h with the fields its lexical state does not read cleared (a stale \u
 * count after the string went on, ...): equal normalized heads behave the
 * same on every byte string (given the same stack). */
ts_jhead ts_jfsm_norm_head(const ts_jhead *h);

/* Inside a string (not an escape), the UTF-8 expectation as one of
 * TS_JFSM_STR_CLASSES classes: 0 at a character boundary, 1..7 the
 * continuation bytes still due and their allowed range; -1 elsewhere.
 * Bytes inside a string never read or write the stack, so a string state
 * is its class (and key flag, which only the closing quote reads). */
#define TS_JFSM_STR_CLASSES 8
int ts_jfsm_string_class(const ts_jhead *h);
/* A head inside a value string of class cls (depth 0). */
ts_jhead ts_jfsm_string_head(int cls);
/* The class of a UTF-8 expectation (un continuation bytes due, the next
 * one in [ulo, uhi]); shared with the schema recognizer (schema_fsm.c),
 * whose strings follow the same byte rules. */
int ts_jfsm_utf8_class(uint8_t un, uint8_t ulo, uint8_t uhi);
/* A string's byte b >= 0x80 at a character boundary: 1 and the
 * continuation bytes it needs (*n, the first one's range [*lo, *hi]), or
 * 0 when no well-formed UTF-8 sequence starts with it (RFC 3629 section 4). */
int ts_jfsm_utf8_lead(uint8_t b, uint8_t *n, uint8_t *lo, uint8_t *hi);

/* A name of the head's lexical state, for error messages. */
const char *ts_jfsm_describe(const ts_jfsm *s);

#endif
