/* constraint_fx.h: what the constrained-generation tests share
 * (test_constraint.c, test_schema.c, test_schema_wrap.c): a tokenizer
 * loaded or the test fails, the Qwen3 tokenizer fixture unpacked once a run,
 * a recorder of generated ids and one generation in a fresh session. */
#ifndef TS_CONSTRAINT_FX_H
#define TS_CONSTRAINT_FX_H

#include <stdio.h>
#include <string.h>

#include "ts_test.h"
#include "turbospark.h"

static inline ts_tokenizer *load_tok(const char *path) {
    ts_tokenizer *t = NULL;
    ts_error err = {0};
    if (ts_tokenizer_load(path, &t, &err)) ts_test_fail(__FILE__, __LINE__, "%s: %s", path, err.msg);
    return t;
}

/* The Qwen3 tokenizer fixture (151,669 ids; the closest to Qwen3.5's 248K
 * this repository carries), unpacked once into the run's scratch dir; NULL
 * when it cannot be. */
static inline const char *qwen3_tokenizer(void) {
    static char path[512];
    static int done;
    if (!done) {
        done = 1;
        snprintf(path, sizeof path, "%s/qwen3.tokenizer.json", ts_test_tmpdir());
        char out[1024];
        if (ts_test_sh(out, sizeof out, "xz -dc tests/fixtures/tokenizer/qwen3.tokenizer.json.xz > %s", path)) path[0] = 0;
    }
    return path[0] ? path : NULL;
}

typedef struct {
    int32_t ids[4096];
    int n;
} rec;

static inline int rec_tok(void *u, int32_t id) {
    rec *r = u;
    if (r->n < 4096) r->ids[r->n++] = id;
    return 0;
}

/* ts_generate in a fresh session of n_ctx tokens drafting M MTP tokens or
 * DFlash blocks of B rows (0 and 0: plain); the ids into r. */
static inline int gen_in(ts_engine *e, int n_ctx, const int32_t *pr, int T, const ts_gen_params *gp, int M, int B,
                         rec *r, ts_error *err) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.spec_draft = M;
    sp.dflash_block = B;
    ts_session *s = NULL;
    memset(r, 0, sizeof *r);
    int rc = ts_session_new(e, &sp, &s, err);
    if (rc) return rc;
    ts_gen_params p = *gp;
    p.spec_draft = M;
    p.dflash_block = B;
    rc = ts_generate(s, pr, T, &p, rec_tok, r, NULL, err);
    ts_session_free(s);
    return rc;
}

#endif
