/* sample.h: the sampler's internal side for backends that choose sampling
 * candidates on their own memory (the topn op of src/backend.h).
 *
 * A sampled step on a device reads back the N best candidates of the row,
 * the row's count of valid entries and its sum of weights instead of the
 * row (248K floats for the real vocabulary). ts_sampler_sample_topn then
 * decides the token from them when they decide it exactly as
 * ts_sampler_sample would over the full row, for the same RNG state, and
 * says so; otherwise it consumes nothing and the caller samples the row.
 * The exactness rule is at ts_sampler_sample_topn (sample.c).
 */
#ifndef TS_GEN_SAMPLE_H
#define TS_GEN_SAMPLE_H

#include "backend.h"

/* Fill a's N, scale, rep and penalty list for the sampler's next step (the
 * list points into the sampler, valid until its next accept). 0, or 1 when
 * the penalty list is longer than TS_TOPN_PEN_MAX (sample the row). */
int ts_sampler_topn_args(ts_sampler *s, ts_topn_args *a);
/* One row's topn output (a->vals, a->ids, a->n_valid[0], a->sum_exp[0]) for
 * arguments ts_sampler_topn_args filled for this step (its N and scale):
 * *decided = 1 and *id the token when the candidates decide it exactly,
 * else *decided = 0 and nothing is consumed. Errors only for NULL
 * arguments; a row the full sampler would refuse is left to it. */
int ts_sampler_sample_topn(ts_sampler *s, const ts_topn_args *a, int32_t *id, int *decided, ts_error *err);

/* Constrained generation (gen/constraint.c): allowed is a bitset of
 * n_vocab bits (bit id of word id / 64); every id whose bit is 0 gets logit
 * -inf after the penalties and the bias, before the temperature and the
 * truncations, in ts_sampler_sample and ts_sampler_probs alike. Borrowed
 * until cleared (NULL: no mask). While a mask is set ts_sampler_topn_args
 * returns 1 (the row is read: a backend's candidates know nothing of it).
 * The generation sets it around each constrained draw and clears it right
 * after, so drafting never sees a stale mask. */
void ts_sampler_set_mask(ts_sampler *s, const uint64_t *allowed);
/* A short ban list (a constraint's phase before it starts: the stop ids):
 * those ids get logit -inf like a mask's zeros, but through the penalty
 * list topn applies (subtracting +inf), so a device still decides the step
 * from its candidates instead of copying the row back. Borrowed until
 * cleared (n 0); at most TS_SAMPLER_BAN_MAX ids take the candidate path,
 * more read the row. */
#define TS_SAMPLER_BAN_MAX 64
void ts_sampler_set_ban(ts_sampler *s, const int32_t *ids, int n);

#endif
