/* engine.h: the engine and session objects behind the public API.
 * Internal: tools and tests that need more than turbospark.h include it. */
#ifndef TS_ENGINE_H
#define TS_ENGINE_H

#include <stdlib.h>

#include "model/dflash.h"
#include "model/model.h"

struct ts_engine {
    ts_backend *be;     /* the engine's own backend (threads, kernel mode): nothing process-global */
    char *dir;
    ts_st_set *st;
    ts_model model;
    ts_model_info info;
    ts_engine_params params;
    ts_dflash *dflash;  /* the DFlash drafter (params.dflash), else NULL */
    /* tensor parallelism (params.gpus > 1, model/tp.h), else NULL: rank r's
     * engine (r >= 1: its backend, its slices, its model), whose sessions
     * rank 0's sessions create and drive */
    struct ts_engine *tp_rank_e[TS_TP_MAX];
    void *tp_img;       /* rank 0's slices (the image its set reads) */
    ts_st_set *tp_set;
};

struct ts_session {
    ts_engine *e;
    ts_session_params params;
    ts_state st;
    int pos;        /* tokens in the timeline */
    int have_last;  /* logits/hidden of a last row exist */
    float *last_hidden; /* [H] final-normed hidden of the last row fed (with tensor parallelism
                           rank 0's alone: ts_session_hidden is its one reader) */
    /* drafting, else NULL: mtp_hid with params.spec_draft > 0, the others
     * with any verify (spec_draft, ngram_draft or dflash_block > 0) */
    float *mtp_hid;     /* [R, H] MTP input/output hiddens */
    float *vlogits;     /* [M + 1, V] logits of a verify block */
    float *dprobs;      /* [Mq + 1, V] draft distributions (sampling; Mq: MTP's or DFlash's drafts, none
                           for n-gram drafts), then a scratch row (spec.c) */
    int spec_rows;      /* rows of the last verify block (its tape and snapshot) */
    float *ckpt;        /* params.checkpoint: every GDN layer's conv then recurrent state, in layer order */
    float *ahead_rows;  /* run-ahead (params.ahead resolved on): [2, V + H], two steps' logits and
                           hidden (generate.c), else NULL */
    int ckpt_pos;       /* the saved position, -1 when nothing is saved */
    int draft_lowp;     /* 1: the MTP head drafts at int8 activation precision
                           (ts_linear_draft); TS_DRAFT_EXACT=1 turns it off */
    /* tests and benchmarks (ts_session_override_drafts): replace the drafts
     * of a block (greedy) so that long accepted runs and every rollback
     * length get exercised on random-weight fixtures, whose MTP heads rarely
     * agree with their targets, and so that bench can force an acceptance */
    ts_draft_override test_drafts;
    void *test_user;
    /* DFlash drafting (params.dflash_block > 0), else zeroed */
    ts_dflash_state df;
    float *df_taps;     /* [R, n_taps*H]: the target's taps of a pass (st.tap_out while drafting) */
    int df_quiet;       /* 1: ts_session_feed leaves the drafter's context alone (plain generation) */
    struct ts_session *tp_peers[TS_TP_MAX]; /* tensor parallelism: the other ranks' sessions (rank 0's only) */
};

/* Rows of the next prefill chunk for n tokens at the session's position: at
 * most max_rows, and never across a multiple of max_rows (session.c, "The
 * prefill grid"). ts_session_feed and the speculative prefill both cut here. */
int ts_session_chunk(const ts_session *s, int n);
/* What ts_session_feed refuses before feeding anything (no ids, an id
 * outside the vocabulary, more than the context's room), for callers that
 * feed in several calls and must refuse whole (ts_session_score). */
int ts_session_check_feed(const ts_session *s, const int32_t *ids, int n, ts_error *err);

/* One step of plain greedy decoding: feed id at the session's position and
 * write the argmax of its logits to *next, with one wait for the device
 * (ts_session_feed then the backend's argmax wait three times a token on
 * CUDA: the pass, the last hidden's copy, the id). The same state, logits
 * and id as ts_session_feed of one token and the argmax. Returns 1 (nothing
 * done) where the one-wait form does not apply (a drafter context to keep,
 * tensor parallelism, host logits): the caller feeds and argmaxes. */
int ts_session_step(ts_session *s, int32_t id, int32_t *next, ts_error *err);

/* Whether greedy decoding waits once a step (ts_session_step, and the
 * verify and MTP drafting passes with their argmax: ts_state.defer_sync);
 * TS_STEP_ONE_WAIT=0 waits after each pass as before, for an A/B in one
 * binary. Read at every call: a test flips it between generations. */
static inline int ts_one_wait_on(void) {
    const char *e = getenv("TS_STEP_ONE_WAIT");
    return !(e && e[0] == '0' && !e[1]);
}

/* Tensor parallelism's switches, one reading of them for engine.c (which
 * opens the ranks by them) and plan.c (which plans each rank by them, so
 * that the plan is what opening makes):
 *   ts_tp_ranks: the ranks (params gpus > 1, or 1 with TS_TP_FORCE=1: the
 *     path with one rank, for tests), 0 without tensor parallelism;
 *   ts_tp_one_device: TS_TP_ONE_DEVICE=1, every rank on params.device;
 *   ts_tp_nccl: whether n CUDA ranks (cuda 1) talk through NCCL: not when
 *     they share one device (NCCL takes one rank a device) or TS_TP_COMM=host;
 *   ts_tp_rank_threads: a CPU rank's threads (the engine's, shared out). */
int ts_tp_ranks(const ts_engine_params *ep);
int ts_tp_one_device(void);
int ts_tp_nccl(int cuda, int n);
int ts_tp_rank_threads(const ts_engine_params *ep, int n);

/* The expert cache's parameters for engine params ep (expert_cache > 0) and
 * the model's config: engine.c's and the plan's one reading of them. */
struct ts_xc_params;
int ts_engine_xc_params(const ts_engine_params *ep, const ts_config *cfg, struct ts_xc_params *xp, ts_error *err);

#endif
