/* test_prefill.c: chunked prefill (src/cpu/gdn.c) against the token
 * recurrence.
 *
 * A 150-token prompt is fed one token at a time (the reference: the token
 * recurrence, row-exact kernels) and in chunks of 1, 7, 64, 100 and 128 rows (the
 * chunked delta rule inside each chunk, chunks in sequence); the logits of
 * every row agree within 1e-3 (max absolute difference), and so do the
 * states left behind (checked through the logits of one more token fed one
 * at a time after the prompt).
 */
#include "engine/engine.h"
#include "ts_test.h"

#define NP 150

static int run(ts_engine *e, int chunk, const int32_t *ids, float *lg, float *next) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.max_rows = chunk;
    ts_session *s = NULL;
    ts_error err = {0};
    int rc = ts_session_new(e, &sp, &s, &err);
    if (!rc && chunk == 1) {
        for (int i = 0; i < NP && !rc; i++) rc = ts_session_feed(s, ids + i, 1, lg + (size_t)i * e->model.cfg.vocab, NULL, &err);
    } else if (!rc) {
        rc = ts_session_feed(s, ids, NP, lg, NULL, &err);
    }
    int32_t t = 3;
    if (!rc) rc = ts_session_feed(s, &t, 1, next, NULL, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ts_session_free(s);
    return rc;
}

static void chunked_vs_recurrence(int n_fx, const int *chunks, int n_chunks) {
    static const char *fx[] = {"tiny-dense", "tiny-moe", "alt-dense", "alt-moe-tied"};
    for (int f = 0; f < n_fx; f++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fixtures/%s", fx[f]);
        ts_engine *e = NULL;
        ts_error err = {0};
        CHECK_MSG(ts_engine_open(dir, NULL, &e, &err) == 0, "%s", err.msg);
        const int V = e->model.cfg.vocab;
        int32_t ids[NP];
        for (int i = 0; i < NP; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)V);
        float *ref = malloc(sizeof(float) * NP * V), *lg = malloc(sizeof(float) * NP * V);
        float *rn = malloc(sizeof(float) * V), *nx = malloc(sizeof(float) * V);
        /* reference: one session with max_rows 1 is exactly the recurrence */
        CHECK(run(e, 1, ids, ref, rn) == 0);
        fprintf(stderr, "  %-13s", fx[f]);
        for (int c = 0; c < n_chunks; c++) {
            CHECK(run(e, chunks[c], ids, lg, nx) == 0);
            float d = ts_test_max_abs(lg, ref, (size_t)NP * V), dn = ts_test_max_abs(nx, rn, V);
            fprintf(stderr, " chunk %d: %.1e (next %.1e)", chunks[c], d, dn);
            CHECK_MSG(d < 1e-3f && dn < 1e-3f, "%s chunk %d: max|diff| %g, next token %g", fx[f], chunks[c], d, dn);
            if (chunks[c] == 1) CHECK_MSG(d == 0.0f, "chunk 1 must be the recurrence itself");
            else CHECK_MSG(d > 0.0f, "chunk %d gave the recurrence's bits: is the chunked path used?", chunks[c]);
        }
        fprintf(stderr, "\n");
        free(ref); free(lg); free(rn); free(nx);
        ts_engine_close(e);
    }
}

TS_TEST(prefill, chunked_matches_recurrence) {
    static const int chunks[] = {1, 7, 64, 100, 128};
    chunked_vs_recurrence(4, chunks, 5);
}

/* The plain-C prefill kernels (the chunked delta rule and multi-row
 * attention references, scalar conv, norms and SiLU) as a whole forward:
 * what runs on a machine without AVX-512. */
TS_TEST(prefill, chunked_matches_recurrence_generic) {
    static const int chunks[] = {1, 7, 128};
    const char *orig = ts_kernels_name();
    CHECK(ts_kernels_select("generic") == 0);
    chunked_vs_recurrence(2, chunks, 3);
    ts_kernels_select(orig);
}
