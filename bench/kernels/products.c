/* products.c: every matrix product of one decode step of a real install
 * (each layer's projections and MLP, then the head, in model order), for
 * n = 1..NMAX rows, on the VNNI kernel and on AMX (where the CPU has it),
 * each relative to one VNNI row: what a verify block of n rows costs in
 * products compared with a decode step, on the model's own shapes and
 * working set (the default model's 17 MB stream from L3; a 0.8B install's
 * from DRAM).
 *
 *   cc -O2 -std=gnu11 -Iinclude -Isrc -o build/products bench/kernels/products.c build/libturbospark.a \
 *      -lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lreadline -lm -lpthread
 *   build/products MODEL_DIR [threads] [reps] [nmax] [per-matrix: a 5th argument other than -] [act bits]
 *
 * Each product is one ts_linear call (the step fuses some of them into one
 * pool region; this does not). Minimum over reps of the whole pass.
 * Internal API (src/): a lab driver, not a frontend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "gen/spec.h"

#define MAXW 4096

static const ts_weight *W[MAXW];
static int nw;

static void add(const ts_weight *w) {
    if (w->rows && nw < MAXW) W[nw++] = w;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: products MODEL_DIR [threads] [reps] [nmax] [per-matrix]\n"); return 2; }
    ts_fp_begin();
    const int nt = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 100;
    const int nmax = argc > 4 ? atoi(argv[4]) : 4, per_matrix = argc > 5 && strcmp(argv[5], "-");
    const int act_bits = argc > 6 ? atoi(argv[6]) : 0; /* --act-bits */
    if (reps < 1 || nmax < 1 || nmax > 9) { fprintf(stderr, "bad reps or nmax (1..9)\n"); return 2; }
    ts_engine *e = NULL;
    ts_error err;
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.n_threads = nt;
    ep.act_bits = act_bits;
    if (ts_engine_open(argv[1], &ep, &e, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    const ts_model *m = &e->model;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const ts_layer_w *L = &m->layers[l];
        if (L->full) {
            add(&L->attn.q_proj); add(&L->attn.k_proj); add(&L->attn.v_proj); add(&L->attn.o_proj);
        } else {
            add(&L->gdn.in_qkv); add(&L->gdn.in_z); add(&L->gdn.in_b); add(&L->gdn.in_a); add(&L->gdn.out_proj);
        }
        if (!L->ffn.moe) { add(&L->ffn.gate); add(&L->ffn.up); add(&L->ffn.down); }
    }
    add(&m->head);
    int64_t maxr = 0, maxc = 0;
    for (int k = 0; k < nw; k++) {
        maxr = W[k]->rows > maxr ? W[k]->rows : maxr;
        maxc = W[k]->cols > maxc ? W[k]->cols : maxc;
    }
    float *x = malloc(sizeof(float) * (size_t)(nmax * maxc)), *y = malloc(sizeof(float) * (size_t)(nmax * maxr));
    double(*per)[10] = malloc(sizeof(double[10]) * (size_t)nw * 2);
    if (!x || !y || !per) { fprintf(stderr, "out of memory\n"); return 1; }
    for (int64_t i = 0; i < nmax * maxc; i++) x[i] = (float)((i * 37 % 101) - 50) / 50.0f;
    double best[2][10];
    for (int a = 0; a < 2; a++)
        for (int n = 0; n < 10; n++) {
            best[a][n] = 1e9;
            for (int k = 0; k < nw; k++) per[2 * k + a][n] = 1e9;
        }
    const int has_amx = ts_amx_available();
    for (int r = 0; r < reps; r++)
        for (int a = 0; a <= has_amx; a++)
            for (int n = 1; n <= nmax; n++) {
                ts_amx_min_rows(a ? 1 : 100);
                double t0 = ts_now();
                for (int k = 0; k < nw; k++) {
                    double t1 = ts_now();
                    ts_linear(W[k], x, y, n);
                    double d = ts_now() - t1;
                    if (d < per[2 * k + a][n]) per[2 * k + a][n] = d;
                }
                double dt = ts_now() - t0;
                if (dt < best[a][n]) best[a][n] = dt;
            }
    ts_amx_min_rows(-1);
    printf("%s: %d products per step, threads %d, minimum of %d passes\n", argv[1], nw, nt, reps);
    for (int a = 0; a <= has_amx; a++) {
        printf("%s:", a ? "amx " : "vnni");
        for (int n = 1; n <= nmax; n++) printf("  n=%d %.4f ms (%.2fx)", n, best[a][n] * 1e3, best[a][n] / best[0][1]);
        printf("\n");
    }
    if (per_matrix)
        for (int k = 0; k < nw; k++) {
            printf("%6lld x %6lld us:", (long long)W[k]->rows, (long long)W[k]->cols);
            for (int a = 0; a <= has_amx; a++)
                for (int n = 1; n <= nmax; n++) printf(" %s%d %.1f", a ? "amx" : "vnni", n, per[2 * k + a][n] * 1e6);
            printf("\n");
        }
    free(x); free(y); free(per);
    ts_engine_close(e);
    return 0;
}
