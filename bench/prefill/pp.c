/* pp.c: prefill alone, timed: feeds a PROMPT-token prompt (one block of
 * max_rows = PROMPT rows) RUNS times into one session (reset in between,
 * not timed) and prints the best wall and process-CPU time.
 *
 * Why next to `turbospark bench`: bench also decodes and probes the read
 * bandwidth, which pollutes a profile of prefill; this driver is what
 * bench/prefill/run.sh puts under perf. Uses only include/turbospark.h.
 * usage: pp MODEL_DIR [RUNS=5] [PROMPT=128] [THREADS=2]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "turbospark.h"

static double now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: pp MODEL_DIR [RUNS] [PROMPT] [THREADS]\n"); return 2; }
    const int runs = argc > 2 ? atoi(argv[2]) : 5, n = argc > 3 ? atoi(argv[3]) : 128;
    if (runs < 1 || n < 1 || n > 4096) { fprintf(stderr, "bad RUNS or PROMPT\n"); return 2; }
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.n_threads = argc > 4 ? atoi(argv[4]) : 2;
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(argv[1], &ep, &e, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n + 16;
    sp.max_rows = n;
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    const int V = ts_engine_info(e)->vocab_size;
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)V);
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < runs; r++) {
        ts_session_reset(s);
        double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        if (ts_session_feed(s, ids, n, NULL, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        double t1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_PROCESS_CPUTIME_ID);
        if (t1 - t0 < best) best = t1 - t0;
        if (c1 - c0 < best_cpu) best_cpu = c1 - c0;
    }
    printf("pp%d: best wall %.1f ms = %.1f tok/s; best process CPU %.1f ms\n", n, best * 1e3, n / best, best_cpu * 1e3);
    free(ids);
    ts_session_free(s);
    ts_engine_close(e);
    return 0;
}
