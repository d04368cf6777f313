/* schema_fsm.h: a byte-level recognizer of JSON documents that validate
 * against a compiled JSON Schema (text/json_schema.h), for constrained
 * generation (gen/constraint.c).
 *
 * Owns: the grammar of one document fed a byte at a time: the lexical rules
 * of json_fsm.h (strings with every escape rule and strict UTF-8, numbers
 * by the RFC grammar, whitespace runs between tokens bounded at
 * TS_JSON_MAX_WS) plus the schema's: types, properties in the schema's
 * order, string lengths, item counts, enum literals, alternatives.
 * Does not own: the schema's compilation, tokens, masks.
 *
 * Alternatives (anyOf, oneOf) make the reading ambiguous for a while ('{'
 * may start either of two objects), so a state is a set of threads, each a
 * deterministic reading: a head (lexical state, the node of the value being
 * read, string length or literal progress) and a stack of open containers
 * (a frame: the container's node and how far it got: the next property,
 * the items so far). A byte maps each thread to 0, 1 or (at a value's
 * first byte, one per alternative) more threads; equal threads merge; the
 * document is live while some thread is. At most TS_SFSM_THREADS threads
 * are kept (the first ones, in alternative order): only a schema whose
 * alternatives stay ambiguous across many nested values reaches it, and
 * then the later readings are dropped (every document the recognizer
 * accepts is still valid; some valid ones are then refused).
 *
 * Two forms of a state. The flat form (ts_sstate) holds every thread's
 * whole stack; it is what a generation keeps between tokens. The step
 * form (ts_swstate) holds threads over a flat base: each thread keeps the
 * bottom nb frames of a base thread by reference and at most
 * TS_SFSM_OVERLAY frames of its own on top (pushed, or copied from the
 * base when changed), so a step copies a few hundred bytes however deep
 * the document is: what makes the mask walk over a tokenizer's trie cheap
 * (constraint.c). Feeding a token's bytes in the step form and flattening
 * once at the end is a token's advance; a token that would need more than
 * TS_SFSM_OVERLAY frames of its own (one that opens 8 containers) is
 * refused, which no tokenizer this engine loads has (at most 3 '{' or '['
 * in a token).
 *
 * A wrapped schema (json_schema.h ts_schema_set_wrap) reads fixed literal
 * text around its documents at depth 0 (lexical states of their own, so
 * the cache key tells a literal's position apart); ts_sfsm_step_literal
 * keeps only the readings in which a byte is a literal's.
 *
 * Documents nest at most TS_SFSM_DEPTH containers (a recursive schema's
 * deeper documents are refused; the plain JSON constraint allows 1024).
 * That cap is the one place a live prefix can be a dead end: a schema that
 * requires a container below the cap (a required object property inside
 * 127 open containers) can go no further there.
 */
#ifndef TS_TEXT_SCHEMA_FSM_H
#define TS_TEXT_SCHEMA_FSM_H

#include <stddef.h>
#include <stdint.h>

#include "text/json_schema.h"

#define TS_SFSM_THREADS 16
#define TS_SFSM_DEPTH 128
#define TS_SFSM_OVERLAY 8

typedef struct ts_shead {
    uint8_t lex;        /* lexical state (schema_fsm.c, enum slex) */
    uint8_t ws;         /* whitespace bytes in a row between tokens */
    uint8_t aux;        /* literal true/false/null: which << 4 | matched; \u: digits
                           left; numbers: 1 integer only */
    uint8_t key;        /* a string that is a free key (not a value) */
    uint8_t un, ulo, uhi; /* UTF-8 continuation bytes due, the next one's range */
    uint8_t pad;
    uint16_t node;      /* the schema node of the value being read (or to read) */
    uint16_t pad2;
    uint32_t cnt;       /* value string: code points so far; literal: bytes matched */
    uint32_t cand;      /* literal: its lowest candidate; value string: bit 31 a
                           \u high surrogate just read, bits 0..15 a \u's value */
} ts_shead;

typedef struct ts_sframe {
    uint16_t node;      /* the container's schema node */
    uint8_t obj;        /* 1 object, 0 array */
    uint8_t pad;
    uint32_t n;         /* object: the next property that may come (those before
                           are written or skipped); array: items begun */
} ts_sframe;

typedef struct ts_sthread {
    ts_shead h;
    uint16_t depth;     /* open containers */
} ts_sthread;

typedef struct ts_sstate {
    int n;                                      /* live threads */
    ts_sthread t[TS_SFSM_THREADS];
    ts_sframe f[TS_SFSM_THREADS][TS_SFSM_DEPTH]; /* thread i's frames, bottom first */
} ts_sstate;

typedef struct ts_swthread {
    ts_shead h;
    uint16_t base;      /* the base's thread whose bottom frames this one keeps */
    uint16_t nb;        /* how many: base->f[base][0, nb) */
    uint16_t no;        /* its own frames on top of them: ov[0, no) */
    ts_sframe ov[TS_SFSM_OVERLAY];
} ts_swthread;

typedef struct ts_swstate {
    int n;
    ts_swthread t[TS_SFSM_THREADS];
} ts_swstate;

/* Scratch of ts_sfsm_feed_token (step buffers and the flatten target). */
typedef struct ts_sfsm_work {
    ts_swstate a, b;
    ts_sstate tmp;
} ts_sfsm_work;

/* The start state: one thread before the root value. */
void ts_sfsm_init(ts_sstate *s, const ts_schema *sc);
/* The step form of flat state s (every thread keeps all its frames by
 * reference). */
void ts_sfsm_lift(const ts_sstate *s, ts_swstate *w);
/* One byte from in (over base) into out (!= in): out->n threads, 0 when
 * the byte is refused. */
int ts_sfsm_step(const ts_schema *sc, const ts_sstate *base, const ts_swstate *in, uint8_t b, ts_swstate *out);
/* ts_sfsm_step restricted to the readings in which b is a wrapped schema's
 * literal byte (json_schema.h ts_schema_set_wrap): how an added token
 * ("<tool_call>") is allowed to spell a literal and nothing else. 0 for a
 * plain schema. */
int ts_sfsm_step_literal(const ts_schema *sc, const ts_sstate *base, const ts_swstate *in, uint8_t b, ts_swstate *out);
/* w (over base) as a flat state into out (!= base); equal threads merge. */
void ts_sfsm_flatten(const ts_sstate *base, const ts_swstate *w, ts_sstate *out);
/* A token's bytes: 1 and s advanced, or 0 and s unchanged. */
int ts_sfsm_feed_token(const ts_schema *sc, ts_sstate *s, const void *p, size_t n, ts_sfsm_work *w);
/* ts_sfsm_feed_token with ts_sfsm_step_literal: every byte a literal's. */
int ts_sfsm_feed_literal(const ts_schema *sc, ts_sstate *s, const void *p, size_t n, ts_sfsm_work *w);
/* One byte at a time (each flattened): 1 while live; 0 at the first
 * refused byte (s is then the state before it). */
int ts_sfsm_feed_bytes(const ts_schema *sc, ts_sstate *s, const void *p, size_t n, ts_sfsm_work *w);
/* Copy a flat state (its used part). */
void ts_sfsm_copy(ts_sstate *dst, const ts_sstate *src);

/* 1 when the document so far is complete (some thread has read the whole
 * root value; a number or literal may still go on: "1" of enum [1, 12]). */
int ts_sfsm_complete(const ts_schema *sc, const ts_sstate *s);
/* 1 when complete and no thread can take another byte but whitespace. */
int ts_sfsm_done(const ts_schema *sc, const ts_sstate *s);

/* Inside a value or key string (one thread, not an escape): the UTF-8
 * class of json_fsm.h (ts_jfsm_string_class) into *cls and the code points
 * the string may still take into *room (UINT32_MAX: unbounded); 0 when
 * not. Bytes that stay inside such a string touch nothing but the count. */
int ts_sfsm_in_string(const ts_schema *sc, const ts_swstate *w, int *cls, uint32_t *room);

/* The cache key of s for masks of tokens with at most `close` closing and
 * `open` opening brackets: each thread's head, its depth when a token could
 * reach the bottom or the cap, and its top close + 1 frames. The bytes into
 * buf (cap at least TS_SFSM_KEY_MAX); their count. */
#define TS_SFSM_KEY_MAX (sizeof(int) + TS_SFSM_THREADS * (sizeof(ts_shead) + 4 + sizeof(ts_sframe) * TS_SFSM_DEPTH))
size_t ts_sfsm_key(const ts_schema *sc, const ts_sstate *s, int close, int open, uint8_t *buf);

/* A name of the first thread's lexical state, for error messages. */
const char *ts_sfsm_describe(const ts_sstate *s);

#endif
