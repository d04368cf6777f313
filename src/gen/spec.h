/* spec.h: speculative decoding (internal; spec.c): MTP, DFlash or n-gram drafts.
 *
 * Verify runs a block of rows through the target with the one-row kernels
 * (bit-identical to decoding them one at a time) while recording the GDN
 * tape; rollback keeps a prefix of the block: the block-start GDN snapshot
 * advanced by the kept rows of the tape, applied lazily by the next pass. The generation
 * loop (drafting, acceptance, statistics) is ts_spec_generate, called by
 * ts_generate when gen params ask for drafting.
 */
#ifndef TS_SPEC_H
#define TS_SPEC_H

#include "engine/engine.h"

/* Rows ids[0..n) (1 <= n <= spec_draft + 1) at the session's position:
 * logits of every row land in s->vlogits [n, V], final-normed hiddens in
 * s->st.sc.hidden [n, H]; the position advances by n. With n > 1 the GDN
 * block-start state is snapshotted and the tape recorded. */
int ts_spec_verify(ts_session *s, const int32_t *ids, int n, ts_error *err);
/* Keep the first `keep` rows (1..n) of the last verify block: KV caches are
 * truncated by position; the GDN states are rolled back lazily (model.h,
 * gdn_pend: the next forward replays the kept rows from the snapshot in its
 * own pass). Afterwards the session's last logits/hidden are those of row
 * keep-1. */
void ts_spec_rollback(ts_session *s, int keep);
/* Apply a pending lazy rollback to the GDN states now (st->gdn then holds
 * the same bits an eager rollback would have left). For code that reads the
 * raw state; the forward never needs it. */
void ts_spec_materialize(ts_session *s);

/* The sampling acceptance rule over one block (smp not NULL; greedy:
 * ts_spec_accept_greedy). vlogits [m+1, V] target logits (host rows),
 * drafts d[0..m) drawn from dprobs [m, V] (NULL: each draft is certain, q
 * a point mass at it, as for n-gram drafts; the same bits as one-hot rows).
 * Writes the emitted tokens
 * out[0..a] (a accepted drafts, then the correction or bonus token) and
 * returns a; ptmp is host scratch [V]. The target distribution of each row is the
 * sampler's (ts_sampler_probs); accept d with probability min(1, p/q), else
 * draw from the normalised max(0, p - q) and stop. The emitted tokens are
 * then distributed exactly as sampling from the target one token at a time.
 * Emitted tokens are accepted into the sampler's history. */
int ts_spec_accept(const float *vlogits, const float *dprobs, const int32_t *d, int m, int V, ts_sampler *smp,
                   float *ptmp, int32_t *out);
/* The same under a constraint (cg, may be NULL: ts_spec_accept): row j's
 * target distribution is masked by the constraint's state after the
 * block's accepted drafts 0..j-1 (a copy of cg advanced along them; cg
 * itself is not moved), so a draft the constraint forbids has p = 0 and is
 * rejected. A draft that completes the reply with no stop ids ends the
 * block there (returns its index: it is the last token emitted). Returns
 * a >= 0, or a negative error (no token allowed: err). */
typedef struct ts_cgen ts_cgen;
int ts_spec_accept_c(const float *vlogits, const float *dprobs, const int32_t *d, int m, int V, ts_sampler *smp,
                     float *ptmp, int32_t *out, const ts_cgen *cg, ts_error *err);
/* Greedy acceptance over the target's ids targ[0..m] (the backend's argmax
 * of the block's rows, read back): the longest prefix where d equals targ,
 * then targ's token. Writes out[0..a], returns a. */
int ts_spec_accept_greedy(const int32_t *targ, const int32_t *d, int m, int32_t *out);

/* Generation ends after emitting one of the gen params' stop ids. */
static inline int ts_gen_is_stop(const ts_gen_params *p, int32_t id) {
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop_ids[i] == id) return 1;
    return 0;
}

/* smp: NULL for plain greedy, else the sampler (prompt already accepted). */
/* Rows of the MTP head a draft computes: gen params draft_vocab `want`
 * (K > 0, 0 automatic, -1 all) for a vocabulary of V ids. */
int ts_spec_draft_vocab(int want, int V);
/* cg: the generation's constraint (NULL: none; then smp is not NULL). */
int ts_spec_generate(ts_session *s, const int32_t *prompt, int n_prompt, const ts_gen_params *p, ts_sampler *smp,
                     ts_cgen *cg, ts_token_cb cb, void *user, ts_gen_stats *stats, ts_error *err);

/* One sampled token from a logits row in backend memory (generate.c): the
 * backend's candidates when they decide it exactly (topn), else the row
 * read back; the same token either way. */
int ts_gen_sample(ts_session *s, ts_sampler *smp, const float *logits, int32_t *id, ts_error *err);
/* The same under cg's mask while it is active (cg NULL: none). */
int ts_gen_sample_c(ts_session *s, ts_sampler *smp, ts_cgen *cg, const float *logits, int32_t *id, ts_error *err);
/* One emitted token's log-probabilities (gen params logprob_cb). */
typedef struct ts_gen_lp {
    ts_logprob chosen;
    ts_logprob top[TS_TOP_LOGPROBS_MAX];
    int n_top;
} ts_gen_lp;
/* Rows [0, rows) of logits in backend memory ([rows, vocab], rows <=
 * TS_DFLASH_MAX_BLOCK) and the tokens chosen from them: out[r] the chosen
 * token's log-probability and the n_top best (generate.c). */
int ts_gen_logprobs(ts_session *s, const float *logits, int rows, const int32_t *ids, int n_top, ts_gen_lp *out,
                    ts_error *err);
/* Sampled steps that asked a backend for candidates, and those the
 * candidates decided, since the process started. */
void ts_gen_topn_stats(long *asked, long *decided);

#endif
