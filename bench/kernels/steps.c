/* steps.c: per-token decode time, robust to a shared machine.
 *
 *   build/steps MODEL_DIR [threads] [tokens] [prompt]   (built by bench/kernels/run.sh)
 *
 * Decodes `tokens` tokens one at a time after a 16-token prompt and prints
 * the minimum and median wall time of one step (the verify/decode ratio is
 * bench/spec/run.sh's). On a box where other jobs come and go the minimum over
 * many steps is the least disturbed estimate; the median shows the spread.
 * Frontend API only (turbospark.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "turbospark.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: steps MODEL_DIR [threads] [tokens]\n"); return 2; }
    int nt = argc > 2 ? atoi(argv[2]) : 2, N = argc > 3 ? atoi(argv[3]) : 64;
    if (N < 1 || N > 4096) N = 64;
    ts_error err = {0};
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.n_threads = nt;
    ts_engine *e = NULL;
    if (ts_engine_open(argv[1], &ep, &e, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    ts_session_params sp;
    ts_session_params_default(&sp);
    int P = argc > 4 ? atoi(argv[4]) : 16; /* prompt length (and chunk rows) */
    if (P < 1 || P > 4096) P = 16;
    sp.n_ctx = P + N + 8;
    sp.max_rows = P;
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P);
    for (int i = 0; i < P; i++) ids[i] = (int32_t)(i * 7919 % 1000 + 10);
    if (ts_session_feed(s, ids, P, NULL, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    free(ids);
    double *d1 = malloc(sizeof(double) * N);
    for (int g = 0; g < N; g++) {
        int32_t t = (int32_t)((g * 2654435761u) % (uint32_t)ts_engine_info(e)->vocab_size); /* all over the vocabulary */
        double t0 = now();
        ts_session_feed(s, &t, 1, NULL, NULL, &err);
        d1[g] = now() - t0;
    }
    double sum = 0;
    for (int g = 0; g < N; g++) sum += d1[g];
    qsort(d1, N, sizeof(double), cmp_d);
    printf("threads %d, %d steps: min %.2f ms (%.1f tok/s), median %.2f ms (%.1f tok/s), mean %.2f ms (%.1f tok/s)\n", nt,
           N, d1[0] * 1e3, 1.0 / d1[0], d1[N / 2] * 1e3, 1.0 / d1[N / 2], sum / N * 1e3, N / sum);
    free(d1);
    ts_session_free(s);
    ts_engine_close(e);
    return 0;
}
