/* kbench.c: lab driver for the decode matrix-vector kernel (ts_linear) alone.
 *
 *   bench/kernels/run.sh            (builds this against build/libturbospark.a)
 *
 * For a 4-bit group-64 weight of a given shape (random bits; the kernel's cost
 * does not depend on the values) it times ts_linear over n = 1..9 rows and
 * prints ms per call, the weight GB/s that implies, and the cost of n rows
 * relative to one. Two working sets: one that stays in L2 (kernel compute
 * bound: what the arithmetic costs) and one the size of the 0.8B lm_head
 * (streams from DRAM).
 *   build/kbench THREADS gemm     prefill-shaped products (GMAC/s)
 *   build/kbench THREADS stream   the 0.8B layer shapes streamed from memory,
 *                                 VNNI against AMX for 1-4 rows
 *   build/kbench THREADS small    the same for the default model's shapes
 *                                 from ~16 MB of copies (L3-resident)
 * Internal API (src/): a lab driver, not a frontend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "kernels.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fill(void *p, size_t bytes, uint64_t *s) {
    uint8_t *b = p;
    for (size_t i = 0; i < bytes; i++) { *s = *s * 6364136223846793005ull + 1442695040888963407ull; b[i] = (uint8_t)(*s >> 56); }
}

/* A random INT4 group-64 weight (bf16 scales and biases) in the layout the
 * engine uses in this mode (P16 repacking on AVX-512); q4_free frees it. */
typedef struct q4 { ts_weight w; void *d, *pk; uint16_t *sc, *bi; } q4;

static void q4_make(q4 *o, int64_t rows, int64_t cols, uint64_t seed) {
    ts_weight w = {TS_DTYPE_U32, 4, 64, rows, cols, NULL, NULL, NULL, TS_DTYPE_BF16, NULL};
    size_t qb = (size_t)(rows * cols / 2), sb = (size_t)(rows * cols / 64) * 2;
    o->d = malloc(qb);
    o->sc = malloc(sb);
    o->bi = malloc(sb);
    fill(o->d, qb, &seed);
    for (size_t i = 0; i < sb / 2; i++) { o->sc[i] = 0x3b80; o->bi[i] = 0xbc00; } /* bf16 0.0039, -0.0078 */
    w.data = o->d; w.scales = o->sc; w.biases = o->bi;
    size_t psz = ts_weight_pack_size(rows, cols, 4, 64, TS_DTYPE_BF16);
    o->pk = psz ? malloc(psz) : NULL;
    if (o->pk) ts_weight_pack(&w, o->pk);
    o->w = w;
}

static void q4_free(q4 *o) { free(o->d); free(o->sc); free(o->bi); free(o->pk); }

/* Best of reps timed calls of f after a warm-up call, in seconds. */
static double best_of(void (*f)(const ts_weight *, const float *, float *, int), const ts_weight *w, const float *x,
                      float *y, int n, int reps) {
    f(w, x, y, n); /* warm */
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        f(w, x, y, n);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static void one(int64_t rows, int64_t cols, int reps, const char *what) {
    q4 q;
    q4_make(&q, rows, cols, 7);
    const ts_weight w = q.w;
    const void *pk = q.pk;
    float *x = malloc(sizeof(float) * cols * 9), *y = malloc(sizeof(float) * rows * 9);
    for (int64_t i = 0; i < cols * 9; i++) x[i] = (float)((i * 37 % 101) - 50) / 50.0f;
    double t1 = 0;
    printf("%s: [%lld x %lld] int4 g64%s, %.1f MB\n", what, (long long)rows, (long long)cols, pk ? " packed" : "",
           ts_weight_bytes(&w) / 1e6);
    for (int n = 1; n <= 9; n++) {
        double best = best_of(ts_linear, &w, x, y, n, reps);
        if (n == 1) t1 = best;
        printf("  n=%d  %8.3f ms  %6.1f GB/s  %.2fx one row\n", n, best * 1e3, ts_weight_bytes(&w) / best / 1e9, best / t1);
    }
    free(x); free(y);
    q4_free(&q);
}

/* The model's own matrix shapes as a decode or verify step meets them:
 * streamed from memory (copies filling ~400 MB, past the L3), one product
 * per copy; n = 1..4 rows on the VNNI kernel and on AMX (where the CPU has
 * it), each relative to one VNNI row. Best of 5 passes, the kernels
 * alternating within each pass. */
static void stream(int64_t rows, int64_t cols, const char *what, double bytes) {
    int K = (int)(bytes / (rows * cols / 2 * 1.07)); /* copies filling about that many bytes */
    if (K < 1) K = 1;
    q4 *q = malloc(sizeof(q4) * K);
    for (int k = 0; k < K; k++) q4_make(&q[k], rows, cols, 7 + k);
    float *x = malloc(sizeof(float) * cols * 9), *y = malloc(sizeof(float) * rows * 9);
    for (int64_t i = 0; i < cols * 9; i++) x[i] = (float)((i * 37 % 101) - 50) / 50.0f;
    double best[2][5] = {{1e9, 1e9, 1e9, 1e9, 1e9}, {1e9, 1e9, 1e9, 1e9, 1e9}};
    for (int rep = 0; rep < 5; rep++)
        for (int amx = 0; amx < 2; amx++)
            for (int n = 1; n <= 4; n++) {
                ts_amx_min_rows(amx ? 1 : 100);
                double t0 = now();
                for (int k = 0; k < K; k++) ts_linear(&q[k].w, x, y, n);
                double dt = (now() - t0) / K;
                if (dt < best[amx][n]) best[amx][n] = dt;
            }
    printf("%s [%lld x %lld] x%d copies: vnni n1 %.4f ms | n=1..4 vs vnni n1: vnni", what, (long long)rows, (long long)cols, K, best[0][1] * 1e3);
    for (int n = 1; n <= 4; n++) printf(" %.2f", best[0][n] / best[0][1]);
    printf(" | amx");
    for (int n = 1; n <= 4; n++) printf(" %.2f", best[1][n] / best[0][1]);
    printf("\n");
    for (int k = 0; k < K; k++) q4_free(&q[k]);
    free(q); free(x); free(y);
}

/* Prefill-shaped: n = 128 rows through ts_linear_prefill, in GMAC/s. */
static void gemm(int64_t rows, int64_t cols, int n, int reps) {
    q4 q;
    q4_make(&q, rows, cols, 11);
    const ts_weight w = q.w;
    const void *pk = q.pk;
    float *x = malloc(sizeof(float) * cols * n), *y = malloc(sizeof(float) * rows * n);
    for (int64_t i = 0; i < cols * n; i++) x[i] = (float)((i * 37 % 101) - 50) / 50.0f;
    double best = best_of(ts_linear_prefill, &w, x, y, n, reps);
    printf("prefill GEMM [%lld x %lld] x %d rows%s: %.3f ms, %.1f GMAC/s\n", (long long)rows, (long long)cols, n,
           pk ? " packed" : "", best * 1e3, (double)rows * cols * n / best / 1e9);
    free(x); free(y);
    q4_free(&q);
}

int main(int argc, char **argv) {
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    ts_kernels_set_threads(nt);
    ts_fp_begin(); /* the engine's floating-point mode */
    printf("threads %d\n", nt);
    if (argc > 2 && !strcmp(argv[2], "stream")) {
        stream(6144, 1024, "GDN in-proj (qkv)", 400e6); /* ~400 MB: past the L3 */
        stream(3584, 1024, "MLP gate or up", 400e6);
        stream(1024, 3584, "MLP down", 400e6);
        stream(1024, 2048, "GDN out-proj", 400e6);
        return 0;
    }
    if (argc > 2 && !strcmp(argv[2], "small")) {
        /* the bundled default model's shapes (hidden 512), ~16 MB of copies:
         * the L3-resident regime its decode and verify run in */
        stream(1024, 512, "GDN in-proj / MLP gate, up / attn q", 16e6);
        stream(512, 1024, "MLP down", 16e6);
        stream(512, 512, "GDN z / out-proj", 16e6);
        stream(12288, 512, "head", 16e6);
        return 0;
    }
    if (argc > 2 && !strcmp(argv[2], "gemm")) {
        gemm(3584, 1024, 128, 10);
        gemm(1024, 3584, 128, 10);
        return 0;
    }
    one(1024, 1024, 200, "in cache");
    one(32768, 1024, 40, "18 MB (L3-sized, like the default model)");
    one(248320, 1024, 10, "lm_head (DRAM)");
    return 0;
}
