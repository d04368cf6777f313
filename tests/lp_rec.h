/* lp_rec.h: a recorder of what ts_generate reports with log-probabilities
 * on (tests/test_logprobs.c defines it; test_cuda_engine.c uses it too). */
#ifndef TS_TEST_LP_REC_H
#define TS_TEST_LP_REC_H

#include "gen_oracle.h"

#define LP_MAX 512

/* What a generation reported: ids, and per token the chosen and top lists. */
typedef struct {
    collect ids;
    int n;
    ts_logprob chosen[LP_MAX];
    ts_logprob top[LP_MAX][TS_TOP_LOGPROBS_MAX];
    int n_top[LP_MAX];
    int order_bad; /* a logprob callback not followed by its token's callback */
    int pending;
} lp_rec;

/* gen params' logprob_cb and the token callback, both with the record as
 * their user pointer; they count a log-probability not followed by its
 * token (order_bad). */
void lp_cb(void *user, const ts_logprob *chosen, const ts_logprob *top, int n_top);
int lp_tok(void *user, int32_t id);
/* Generate on a fresh session of e (n_ctx 1024) with the record's callbacks
 * (draft M: MTP, B: DFlash); 0 or the error code (reported). */
int lp_gen(ts_engine *e, const int32_t *pr, int T, const ts_gen_params *gp, int M, int B, lp_rec *r);
/* r's entries against log_softmax (in double) of the logits a fresh session
 * of e computes feeding pr then r's ids one at a time: the largest error;
 * *top_bad counts top lists that are not the best n_top ids in order. */
double lp_check(ts_engine *e, const int32_t *pr, int T, const lp_rec *r, int n_top, int *top_bad);
/* ts_session_score on e (test_logprobs.c, logprobs.score_matches_feed): a
 * random text of LP_SCORE_N ids (seed) scored from position pre on a grid
 * of 7 against log_softmax of the plain feed's rows (the largest error
 * returned; *bad counts wrong top lists, states unlike the plain feed's and
 * failed calls); the scores copied to out when not NULL ([LP_SCORE_N - 1]
 * entries of 1 + LP_SCORE_TOP). */
#define LP_SCORE_N 30
#define LP_SCORE_TOP 4
double lp_score_check(ts_engine *e, int pre, uint64_t seed, ts_logprob *out, int *bad);
/* The same ids, chosen and top entries, bit for bit. */
int lp_same(const lp_rec *a, const lp_rec *b);

#endif
