/* json_schema.h: a JSON Schema compiled for constrained generation
 * (ts_constraint_json_schema; text/json_schema.c compiles, text/schema_fsm.c
 * recognizes documents against the result).
 *
 * Owns: the compiled form (nodes, properties, literals) and the rules of
 * the supported subset. Does not own: recognizing documents
 * (schema_fsm.c), tokens and masks (gen/constraint.c).
 *
 * The subset (what llama.cpp's json-schema-to-grammar and outlines users
 * rely on):
 *   type              a name or a list of names (object, array, string,
 *                     number, integer, boolean, null); integer is digits
 *                     only, no fraction or exponent
 *   properties        emitted in the schema's order; a property that is not
 *                     required may be skipped; required names must be
 *                     properties
 *   additionalProperties
 *                     with properties: false (or absent: only the listed
 *                     properties, OpenAI's strict mode) - a schema or true
 *                     beside properties is refused; without properties: the
 *                     schema of every value (true or absent: any value,
 *                     false: only {})
 *   items, minItems, maxItems     (items absent: any values)
 *   minLength, maxLength          code points, as Python's len() counts them
 *                                 (a \u surrogate pair is one)
 *   enum, const       matched byte for byte in one written form: compact,
 *                     object members in the schema's order, strings with
 *                     only the escapes JSON requires (\" \\ \b \f \n \r \t,
 *                     \u00XX for other control characters), numbers in
 *                     their shortest round-trip form; filtered by `type`
 *                     when both are given
 *   anyOf, oneOf      alternatives (oneOf is read as anyOf: alternatives
 *                     that overlap can give a document more than one of
 *                     them validates)
 *   allOf             of exactly one subschema
 *   $ref              a JSON pointer into the document ("#", "#/$defs/x",
 *                     "#/definitions/x", any "#/..."); recursion allowed
 *   true, {}          any value
 * Without `type`, a schema takes the types its keywords describe
 * (properties: an object, items: an array, minLength: a string, ...), any
 * value when it has none of them: a narrower reading than JSON Schema's
 * (whose {"properties": ...} also lets a number through), chosen because
 * that is what the schema's writer meant; every document it gives is
 * valid either way.
 * Descriptive keywords are skipped (title, description, examples, default,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly, strict, $defs
 * and definitions as containers). Every other keyword is refused with its
 * JSON path, as is a schema no value satisfies (false, minLength above
 * maxLength, a required property that recurses without end, an enum left
 * empty by its type): the recognizer then never reaches a dead end, every
 * live prefix completes to a valid document.
 *
 * Bounds (each refused with a message naming it): TS_SCHEMA_MAX_BYTES of
 * text, TS_SCHEMA_MAX_NEST levels of JSON nesting in the schema,
 * TS_SCHEMA_MAX_NODES subschemas, TS_SCHEMA_MAX_ALTS alternatives of one
 * anyOf (after merging its enums), enum numbers within 2^53 (beyond, the
 * written form cannot be known exactly).
 */
#ifndef TS_TEXT_JSON_SCHEMA_H
#define TS_TEXT_JSON_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "ts_int.h"

#define TS_SCHEMA_MAX_BYTES ((size_t)1 << 20)
#define TS_SCHEMA_MAX_NEST 64
#define TS_SCHEMA_MAX_NODES 4096
#define TS_SCHEMA_MAX_ALTS 16
#define TS_SCHEMA_UNBOUNDED UINT32_MAX

/* type bits; TS_ST_NUM admits integers too */
enum {
    TS_ST_NULL = 1,
    TS_ST_BOOL = 2,
    TS_ST_INT = 4,
    TS_ST_NUM = 8,
    TS_ST_STR = 16,
    TS_ST_ARR = 32,
    TS_ST_OBJ = 64,
    TS_ST_ALL = 127
};

typedef enum {
    TS_SK_TYPES = 0, /* values of the type bits, each with its keywords below */
    TS_SK_ENUM = 1,  /* one of the literals lits[lit0, lit0 + n_lits) */
    TS_SK_ANYOF = 2  /* one of the leaves alts[alt0, alt0 + n_alts) (never TS_SK_ANYOF) */
} ts_snode_kind;

typedef struct ts_snode {
    uint8_t kind;                /* ts_snode_kind */
    uint8_t types;               /* TS_SK_TYPES: TS_ST_* bits */
    uint32_t min_len, max_len;   /* strings, code points (max TS_SCHEMA_UNBOUNDED: none) */
    uint32_t min_items, max_items;
    int32_t items;               /* node of array items */
    uint32_t prop0, n_props;     /* props[prop0, prop0 + n_props), the schema's order */
    uint32_t plit0;              /* property j's key is literal plit0 + j (its quoted name) */
    int32_t extra;               /* node of the values of free keys (no properties); -1: none */
    uint32_t lit0, n_lits;       /* TS_SK_ENUM */
    uint32_t alt0, n_alts;       /* TS_SK_ANYOF */
} ts_snode;

typedef struct ts_sprop {
    int32_t node;                /* the value's node */
    uint32_t req_from;           /* the first required property at or after this one (n_props: none) */
} ts_sprop;

typedef struct ts_slit {
    uint32_t off, len;           /* bytes[off, off + len) */
} ts_slit;

/* The literals of a wrapped schema (ts_schema_set_wrap). */
enum {
    TS_SW_FIRST = 0,  /* before the first document: the prefix */
    TS_SW_SUFFIX = 1, /* after each document */
    TS_SW_NEXT = 2,   /* before each later document: the separator, then the prefix */
    TS_SW_N = 3
};
#define TS_SCHEMA_WRAP_MAX 4096 /* bytes of one literal */

typedef struct ts_schema {
    ts_snode *nodes;             /* [n_nodes] */
    int n_nodes;
    ts_sprop *props;             /* [n_props] */
    int n_props;
    ts_slit *lits;               /* [n_lits] */
    int n_lits;
    uint8_t *bytes;              /* the literals' bytes */
    size_t n_bytes;
    int32_t *alts;               /* [n_alts] */
    int n_alts;
    int32_t root;
    int32_t any;                 /* the node of any JSON value */
    /* Wrapped documents (ts_schema_set_wrap): fixed text around each
     * document; wrap NULL for a plain one. */
    uint8_t *wrap;               /* the literals' bytes */
    uint32_t wrap_off[TS_SW_N], wrap_len[TS_SW_N];
    int wrap_repeat;             /* 1: one or more documents, 0: exactly one */
} ts_schema;

/* Compile a schema (JSON text of len bytes). 0, or TS_E_ARG with err naming
 * the problem and its JSON path ("JSON schema: ..."), TS_E_NOMEM. *out is
 * owned by the caller (ts_schema_free). */
int ts_schema_compile(const char *text, size_t len, ts_schema **out, ts_error *err);
void ts_schema_free(ts_schema *s);

/* Wrap s's documents between fixed texts: the recognizer (schema_fsm.h)
 * then reads prefix, a document, suffix and, with repeat, any number of
 * sep, prefix, a document, suffix more; the end is complete after a
 * suffix. The document's own leading and trailing whitespace is refused
 * there (the literals carry the layout, and a suffix that starts with
 * "\n" is then read one way). A byte that could continue the document
 * (a digit after a top-level number) goes to the document, not to the
 * suffix: a suffix should not start with one. Each literal at most
 * TS_SCHEMA_WRAP_MAX bytes (NULL: empty); repeat needs sep or prefix.
 * 0, TS_E_ARG naming the problem, TS_E_NOMEM. */
int ts_schema_set_wrap(ts_schema *s, const char *prefix, const char *suffix, const char *sep, int repeat,
                       ts_error *err);

/* The first required property of node n at or after index i (n_props: none). */
static inline uint32_t ts_schema_req_from(const ts_schema *s, const ts_snode *n, uint32_t i) {
    return i < n->n_props ? s->props[n->prop0 + i].req_from : n->n_props;
}

#endif
