/* spec_bench.c: cost of the speculative path relative to one decode step.
 *
 *   bench/spec/run.sh MODEL_DIR [reps]      (builds this against build/libturbospark.a)
 *
 * Measures, after a short prefill:
 *   decode   one-row ts_session_feed (what plain greedy decoding pays per token)
 *   verify   ts_spec_verify of M+1 rows (snapshot + tape + forward; M = 3 -> 4 rows)
 *   rollback ts_spec_rollback to keep = 1 and to keep = M (restore + replay of
 *            the kept rows from the tape; keep = M+1 costs nothing)
 *   draft    one MTP head step
 * and prints the ratios the issue sets targets for: verify(4 rows) / decode
 * (target <= 1.3) and rollback / decode (target < 2%).
 * Internal API (src/): this is a lab driver, not a frontend.
 */
#include <stdio.h>
#include <stdlib.h>

#include "model/spec.h"

/* The minimum over the repetitions: the machine is shared, and the least
 * disturbed run is the best estimate of the cost itself. */
static double med(double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: spec_bench MODEL_DIR [reps] [draft M]\n"); return 2; }
    const char *dir = argv[1];
    int reps = argc > 2 ? atoi(argv[2]) : 5, M = argc > 3 ? atoi(argv[3]) : 3;
    if (reps < 1 || reps > 64 || M < 1 || M > TS_SPEC_MAX_DRAFT) { fprintf(stderr, "bad reps or M\n"); return 2; }
    ts_error err = {0};
    ts_engine *e = NULL;
    if (ts_engine_open(dir, NULL, &e, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 1024;
    sp.spec_draft = M;
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const int V = e->model.cfg.vocab, H = e->model.cfg.H;
    int32_t prompt[32];
    for (int i = 0; i < 32; i++) prompt[i] = (int32_t)((i * 7919 + 11) % V);
    if (ts_session_feed(s, prompt, 32, NULL, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double dec[64], ver[64], rb1[64], rbm[64], dr[64];
    int32_t blk[TS_SPEC_MAX_DRAFT + 1];
    for (int r = 0; r < reps; r++) {
        int32_t t = (int32_t)((r * 131 + 5) % V);
        double t0 = ts_now();
        ts_session_feed(s, &t, 1, NULL, NULL, &err);
        dec[r] = ts_now() - t0;
        for (int j = 0; j <= M; j++) blk[j] = (int32_t)((r * 31 + j * 17 + 3) % V);
        t0 = ts_now();
        ts_spec_verify(s, blk, M + 1, &err);
        ver[r] = ts_now() - t0;
        t0 = ts_now();
        ts_spec_rollback(s, M); /* replays M rows: the most a rejecting block replays */
        rbm[r] = ts_now() - t0;
        ts_spec_verify(s, blk, M + 1, &err);
        t0 = ts_now();
        ts_spec_rollback(s, 1);
        rb1[r] = ts_now() - t0;
        t0 = ts_now();
        ts_mtp_forward(&e->model, &s->st, &t, s->last_hidden, 1, s->pos - 1, s->mtp_hid, NULL, s->draft_lowp);
        dr[r] = ts_now() - t0;
        (void)H;
    }
    double d = med(dec, reps), v = med(ver, reps), r1 = med(rb1, reps), rm = med(rbm, reps), m = med(dr, reps);
    printf("model %s, %d reps (minimum of each), draft M = %d, verify %d rows\n", dir, reps, M, M + 1);
    printf("decode step        %9.2f ms\n", d * 1e3);
    printf("verify %d rows      %9.2f ms   = %.2f x decode (target <= 1.3 for 4 rows)\n", M + 1, v * 1e3, v / d);
    printf("rollback keep 1    %9.3f ms   = %.2f%% of decode (target < 2%%)\n", r1 * 1e3, 100 * r1 / d);
    printf("rollback keep %d    %9.3f ms   = %.2f%% of decode\n", M, rm * 1e3, 100 * rm / d);
    printf("MTP draft step     %9.2f ms   = %.2f x decode\n", m * 1e3, m / d);
    ts_session_free(s);
    ts_engine_close(e);
    return 0;
}
