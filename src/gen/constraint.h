/* constraint.h: token masks from a recognizer (internal side of
 * ts_constraint_json and ts_constraint_json_schema; gen/constraint.c).
 *
 * A ts_constraint is the tokenizer's tokens in a trie (built once), the
 * grammar (any JSON text: text/json_fsm.h; or the documents of a compiled
 * schema: text/schema_fsm.h) and a bounded cache of masks keyed by
 * recognizer state. A generation holds a ts_cgen: the recognizer state of
 * its reply, whether the constraint is active yet (gen params
 * constraint_after), its stop ids, and the buffers of its mask and the
 * trie walk. To look ahead along drafts (spec.c) a ts_cgen is copied with
 * ts_cgen_lookahead: the copy shares the buffers (used one at a time) and
 * has its own recognizer state.
 */
#ifndef TS_GEN_CONSTRAINT_H
#define TS_GEN_CONSTRAINT_H

#include "text/json_fsm.h"
#include "text/schema_fsm.h"
#include "ts_int.h"

typedef struct ts_cframe {
    ts_jhead h;      /* the state after this trie level's byte */
    uint32_t widx;   /* the stack word the byte's feed could write, */
    uint64_t wsave;  /* and its value before */
} ts_cframe;

typedef struct ts_cgen {
    const ts_constraint *c;
    int V;                  /* mask bits: the model's vocabulary */
    int words;              /* (V + 63) / 64 */
    int32_t after;          /* the id that starts the constraint; -1: from the start */
    int active;
    ts_jfsm st;             /* the reply since the constraint started (JSON) */
    long n_bytes;           /* bytes fed to st (messages) */
    const int32_t *stop;    /* the generation's stop ids (borrowed) */
    int n_stop;
    uint64_t *mask;         /* [words] the current step's allowed ids */
    ts_cframe *frames;      /* [longest token + 1] the trie walk's levels */
    uint64_t *stk;          /* [TS_JSON_MAX_DEPTH / 64] the walk's stack */
    /* a schema's constraint (NULL otherwise) */
    ts_sstate *ss;          /* the reply since the constraint started */
    ts_sstate *ss_look;     /* the state of a look-ahead copy (ts_cgen_lookahead) */
    ts_sfsm_work *sw;       /* a token's feed */
    ts_swstate *lv;         /* [longest token + 1] the walk's levels */
    int16_t *lcls;          /* [longest token + 1] a level's string class, -1 none */
    uint32_t *lroom;        /* [longest token + 1] the code points its string may take */
    uint8_t *key;           /* [TS_SFSM_KEY_MAX] the cache key */
    int owner;              /* frees the buffers (not a look-ahead copy) */
} ts_cgen;

/* Check p's constraint against a model of V ids and set g up; g->c NULL
 * (and nothing allocated) when p has no constraint. */
int ts_cgen_init(ts_cgen *g, const ts_gen_params *p, int V, ts_error *err);
void ts_cgen_free(ts_cgen *g);
/* dst: src's state, to advance along drafts without moving src (shares
 * src's buffers; never freed). */
void ts_cgen_lookahead(ts_cgen *dst, const ts_cgen *src);
/* The mask of g's state into g->mask: 0, or TS_E_ARG when no id is allowed
 * (naming the state). Only while g->active. */
int ts_cgen_mask(ts_cgen *g, ts_error *err);
/* Put g's rule for the next token on the sampler (g NULL or without a
 * constraint: nothing): while active its mask, before the start id a ban of
 * the stop ids (the reply cannot end before its constrained part; a ban a
 * device's candidates take, sample.h). 0 or ts_cgen_mask's error. Lifted by
 * ts_cgen_disarm right after the draw, so drafting never sees it. */
int ts_cgen_arm(ts_cgen *g, ts_sampler *smp, ts_error *err);
void ts_cgen_disarm(ts_sampler *smp);
/* The generation emitted id: advance the state (or activate on the start
 * id). 1 when the reply is complete and there are no stop ids (the
 * generation ends here), 0 to go on, TS_E_ARG for an id the mask did not
 * allow (a broken invariant, named). */
int ts_cgen_advance(ts_cgen *g, int32_t id, ts_error *err);

/* The byte rule's mask of state st (no stop ids) into out [words] (bits
 * past the tokenizer's ids are 0), from the cache when use_cache (and
 * stored there), else by a walk of the trie. g supplies the walk's
 * buffers. The JSON form and the schema form (g's constraint decides). */
void ts_constraint_byte_mask(ts_cgen *g, const ts_jfsm *st, int use_cache, uint64_t *out);
void ts_constraint_schema_mask(ts_cgen *g, const ts_sstate *st, int use_cache, uint64_t *out);
/* The schema of a schema's constraint (borrowed), NULL for plain JSON. */
const ts_schema *ts_constraint_schema(const ts_constraint *c);

/* Facts for tests and measurements. */
typedef struct ts_constraint_info {
    int n_ids;          /* the tokenizer's ids */
    int n_tokens;       /* ids in the trie (with bytes, not added) */
    int n_nodes;        /* trie nodes */
    int max_len;        /* longest token, bytes */
    int max_close;      /* most ']' / '}' bytes in one token */
    int max_open;       /* most '[' / '{' bytes in one token */
    int cache_cap;      /* masks the cache may hold */
    int cache_n;        /* masks it holds */
    long hits, misses;  /* lookups since creation */
    const void *index;  /* the tokenizer's shared index (identity only: equal for
                           constraints over one tokenizer) */
    int index_refs;     /* its holders: the tokenizer (until freed) and each constraint */
} ts_constraint_info;
void ts_constraint_get_info(const ts_constraint *c, ts_constraint_info *out);
/* Tests: let the cache hold at most n masks (n >= 1, at most its size);
 * empties it. */
void ts_constraint_cache_limit(ts_constraint *c, int n);
/* 1 when id is a candidate of the byte rule at all (has bytes, not added;
 * or a wrapped schema's literal token). */
int ts_constraint_token_ok(const ts_constraint *c, int32_t id);
/* 1 when id is a literal token of a wrapped schema (an added token that
 * may only spell its literal: ts_sfsm_feed_literal). */
int ts_constraint_token_literal(const ts_constraint *c, int32_t id);

#endif
