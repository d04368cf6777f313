/* gen_oracle.h: what the generation tests share. A token collector for
 * ts_generate's callback (test_spec.c, test_dflash.c, test_cuda_engine.c,
 * test_poison.c, test_determinism.c), and for the speculative-decoding tests
 * (test_spec.c for MTP, test_dflash.c for DFlash) a planted drafter that
 * proposes the plain greedy output with random corruptions, so that every
 * acceptance and rollback length occurs. */
#ifndef TS_GEN_ORACLE_H
#define TS_GEN_ORACLE_H

#include <stdint.h>

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

/* the session's test_drafts hook: m drafts for the rows after position pos */
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

#endif
