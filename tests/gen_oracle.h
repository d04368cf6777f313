/* gen_oracle.h: what the generation tests share. A token collector for
 * ts_generate's callback (test_spec.c, test_dflash.c, test_cuda_engine.c,
 * test_poison.c, test_determinism.c), and for the speculative-decoding tests
 * (test_spec.c for MTP on the CPU, test_cuda_engine.c on the GPU,
 * test_dflash.c for DFlash) a planted drafter that proposes the plain greedy
 * output with random corruptions, so that every acceptance and rollback
 * length occurs, and the MTP session and generation they run it in. */
#ifndef TS_GEN_ORACLE_H
#define TS_GEN_ORACLE_H

#include <stdint.h>
#include <string.h>

#include "engine/engine.h"
#include "ts_test.h"

typedef struct {
    int32_t ids[4096];
    int n;
} collect;

static inline int on_tok(void *u, int32_t id) {
    collect *c = u;
    if (c->n < 4096) c->ids[c->n++] = id;
    return 0;
}

typedef struct {
    const int32_t *ref; /* plain greedy output */
    int n_ref, T;       /* its length, the prompt length */
    uint64_t lcg;
    int n_calls;
} oracle;

/* the session's draft override (ts_session_override_drafts): m drafts for
 * the rows after position pos */
static inline void oracle_drafts(void *user, int pos, int m, int32_t *d) {
    oracle *o = user;
    o->n_calls++;
    for (int j = 0; j < m; j++) {
        int i = pos - o->T + 1 + j; /* generated index of draft j */
        int32_t t = i < o->n_ref ? o->ref[i] : 0;
        o->lcg = o->lcg * 6364136223846793005ull + 1442695040888963407ull;
        if ((o->lcg >> 33) % 8 == 0) t = (t + 1) % 7; /* corrupt: small ids exist in every vocab */
        d[j] = t;
    }
}

/* A session of n_ctx tokens drafting `draft` MTP tokens a block (0: none);
 * a failure fails the test (NULL). */
static inline ts_session *oracle_session(ts_engine *e, int n_ctx, int draft) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.spec_draft = draft;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err)) ts_test_fail(__FILE__, __LINE__, "session (draft %d): %s", draft, err.msg);
    return s;
}

/* Greedy generation of n_pred tokens after the prompt, drafting M (0:
 * plain), into c; the oracle's drafts when orc is given; st filled. 0 or the
 * error, which fails the test. */
static inline int oracle_generate(ts_engine *e, const int32_t *prompt, int T, int n_ctx, int n_pred, int M, oracle *orc,
                                  collect *c, ts_gen_stats *st) {
    ts_session *s = oracle_session(e, n_ctx, M);
    if (!s) return -1;
    if (orc) ts_session_override_drafts(s, oracle_drafts, orc);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = n_pred;
    gp.spec_draft = M;
    c->n = 0;
    ts_error err = {0};
    int rc = ts_generate(s, prompt, T, &gp, on_tok, c, st, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "generate (draft %d): %s", M, err.msg);
    ts_session_free(s);
    return rc;
}

#endif
