/* drafter.h: what the speculative loop (spec.c) asks of a drafter.
 *
 * Owns: the interface (sizes, prompt catch-up, propose, on_accept) and the
 * drafters' state (mtp_draft.c, dflash_draft.c, ngram_draft.c). Does not own: verification,
 * acceptance and rollback (spec.c), the forward passes (model/).
 *
 * The loop: after each prompt chunk the target fed, `prompt` lets the
 * drafter catch up on those rows (MTP: runs its head over every row whose
 * next token is known); `start` gives it the first generated token;
 * `propose` drafts up to m tokens after the last emitted one; after the
 * verify block at position pos_blk keeps tokens out[0..keep), `on_accept`
 * tells it which rows became real. A drafter never changes the output: its
 * drafts are verified; it only moves how many rows a verify has.
 *
 * A drafter declares the target layers whose hidden states it reads (taps:
 * the target's forward copies those layers' outputs for it; MTP taps only
 * the final hidden, which every forward leaves in sc.hidden). DFlash drafts
 * a whole block in one pass of its own (its attention over its context K/V
 * and the block, TS_MASK_BLOCK). The n-gram drafter (ngram_draft.c) runs
 * no pass at all: it copies from the context, on the host.
 *
 * Speculative sampling needs each draft's distribution q. MTP and DFlash
 * write theirs into dprobs rows; a drafter whose drafts are certain (the
 * n-gram drafter: q is a point mass at the draft) sets point_mass and
 * writes none (spec.c's acceptance takes dprobs NULL for that).
 */
#ifndef TS_DRAFTER_H
#define TS_DRAFTER_H

#include "engine/engine.h"

typedef struct ts_drafter ts_drafter;

typedef struct ts_drafter_ops {
    const char *name;
    /* the target just fed prompt rows toks[0..k) (hiddens in sc.hidden) */
    int (*prompt)(ts_drafter *d, const int32_t *toks, int k);
    /* the first generated token, from the prompt's logits */
    void (*start)(ts_drafter *d, int32_t last);
    /* up to m drafts following the last emitted token into out[0..);
     * returns how many (0..m), or a negative error (the stream's) */
    int (*propose)(ts_drafter *d, int m, int32_t *out);
    /* the verify block at pos_blk kept tokens out[0..keep) */
    void (*on_accept)(ts_drafter *d, const int32_t *out, int keep, int pos_blk);
} ts_drafter_ops;

struct ts_drafter {
    const ts_drafter_ops *ops;
    ts_session *s;
    int max_draft;          /* sizes: the most drafts per block */
    int n_taps;             /* target layers it reads (MTP: 0, the final hidden only) */
    const int *tap_layers;
    /* this generation's drafting parameters */
    ts_sampler *smp;        /* NULL: greedy drafts */
    int K;                  /* drafting vocabulary: ids [0, K) */
    float p_min;            /* confidence floor (gen params draft_p_min) */
    int point_mass;         /* 1: each draft's q is a point mass at it (no dprobs rows) */
};

/* The MTP drafter: the model's own multi-token-prediction head. */
typedef struct ts_mtp_drafter {
    ts_drafter base;
    /* real MTP rows waiting: tokens rtok[0..nr), hiddens rhid, from position rpos */
    int32_t rtok[TS_SPEC_MAX_DRAFT + 1];
    int nr, rpos;
    const float *rhid;
    int have_pend;          /* prompt: the last row, whose next token is not known yet, waits in mtp_hid[0] */
    int p0;                 /* prompt: the MTP position of the next catch-up row */
} ts_mtp_drafter;

ts_drafter *ts_mtp_drafter_init(ts_mtp_drafter *md, ts_session *s, ts_sampler *smp, int K, float p_min);

/* The DFlash drafter (gen/dflash_draft.c over model/dflash.c): blocks of B
 * rows, [last emitted token, mask x (B-1)], drafted in one pass over the
 * context K/V of every accepted position (taps: the engine drafter's
 * target_layer_ids, which the target's forward copies to s->df_taps). */
typedef struct ts_dflash_drafter {
    ts_drafter base;
    int B;          /* block rows (gen params dflash_block) */
    int32_t last;   /* the last emitted token: row 0 of the next block */
    int err;        /* an error of on_accept's context pass, returned by the next propose */
} ts_dflash_drafter;

ts_drafter *ts_dflash_drafter_init(ts_dflash_drafter *dd, ts_session *s, ts_sampler *smp, int B, int K, float p_min);

/* The n-gram index (ngram_draft.c): a history of ids h[0..len) and, per
 * n-gram size n in [n_min, n_max], a hash table from an n-gram to the end
 * position of its most recent occurrence among those that end before the
 * last id (the suffix looked up must find an *earlier* occurrence). The
 * tables hold positions only; a probe compares the ids in the history, so a
 * hash collision never proposes a wrong match. A push of k ids costs
 * k * (n_max - n_min + 1) inserts, a proposal n_max - n_min + 1 lookups,
 * whatever the history's length. */
typedef struct ts_ngram_index {
    int n_min, n_max;
    int32_t *h;     /* [cap] the ids: context, prompt, emitted tokens (owned) */
    int len, cap;
    int32_t *tab;   /* [n_max - n_min + 1][mask + 1]: 1 + an end position, 0 empty (owned) */
    uint32_t mask;  /* slots per table - 1 (a power of two, at least 2 * cap) */
} ts_ngram_index;

/* Room for cap ids, sizes 1 <= n_min <= n_max <= TS_NGRAM_MAX. 0, or
 * TS_E_ARG / TS_E_NOMEM (err). */
int ts_ngram_index_init(ts_ngram_index *x, int n_min, int n_max, int cap, ts_error *err);
void ts_ngram_index_free(ts_ngram_index *x);
/* Append ids[0..k) (those past cap are dropped: drafts are verified, so a
 * full history costs acceptance only). */
void ts_ngram_index_push(ts_ngram_index *x, const int32_t *ids, int k);
/* Up to m ids that followed the most recent earlier occurrence of the
 * longest suffix of n_min..n_max ids, into out; stops at the history's
 * end. Returns how many (0: no such suffix occurred before). */
int ts_ngram_index_propose(const ts_ngram_index *x, int m, int32_t *out);

/* The n-gram (prompt lookup) drafter over the index: its history is gen
 * params ngram_ctx, then the prompt, then every emitted token. */
typedef struct ts_ngram_drafter {
    ts_drafter base;
    ts_ngram_index ix;
} ts_ngram_drafter;

/* cap: the most ids the generation can push. 0, or an error (err); free
 * with ts_ngram_drafter_free either way. */
int ts_ngram_drafter_init(ts_ngram_drafter *nd, ts_session *s, int n_min, int n_max, int M, int cap, ts_error *err);
void ts_ngram_drafter_free(ts_ngram_drafter *nd);

#endif
