/* cuda_bench.c: the CUDA kernels' benchmark (build/cuda_bench, make CUDA=1).
 *
 *   cuda_bench [--device N] [--shape 9b] [--pos P] [--quick]
 *
 * Owns: the device-copy bandwidth probe, the matrix-vector products on the
 * Qwen3.5-9B decode shapes (shapes/qwen3.5-9B.json: every projection of a GDN
 * and an attention layer, the FFN, the 248,320-row head; INT4 group 64, bf16
 * scales and biases, random weights), a whole decode step of that shape built
 * from the kernels (embed, per layer add+RMSNorm, projections, the GDN step or
 * attention over a cache of P positions, SwiGLU; final norm, head, argmax) run
 * eagerly and as one CUDA graph, and the step's products at 1..16 rows (the
 * verify cost). Does not own: the engine (the step here is the op sequence of
 * qwen35.c's decode path on random weights, not the model code), parity
 * (tests/test_cuda.c).
 *
 * Method (METHOD.md): device events around each region, warm-up first,
 * medians of several repetitions; every timed region reads several times the
 * 60 MB L2 (products are timed over all layers' distinct weights; the probe
 * copies 2 GiB). The probe counts bytes read plus bytes written. Prints one
 * table (stdout) and "key value" lines for scripts/gpu_check.sh.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/tsc.h"

#define NL 32       /* 9B: layers */
#define H 4096
#define FF 12288
#define V 248320
#define NQ 16
#define NKV 4
#define HD 256
#define HK 16
#define HV 32
#define DK 128
#define CONV (2 * HK * DK + HV * DK) /* 8192 */
#define VD (HV * DK)                 /* 4096 */

static tsc_ctx *C;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die_if_err(const char *where) {
    ts_error e;
    if (tsc_sync(C, &e)) {
        fprintf(stderr, "cuda_bench: %s: %s\n", where, e.msg);
        exit(1);
    }
}

static tsc_weight qweight(int64_t rows, int64_t cols, uint32_t seed) {
    tsc_weight w = {TS_DTYPE_U32, 4, 64, rows, cols, NULL, NULL, NULL, TS_DTYPE_BF16};
    const size_t words = (size_t)rows * cols / 8, ng = (size_t)rows * (cols / 64);
    void *d = tsc_alloc(C, words * 4), *s = tsc_alloc(C, ng * 2), *b = tsc_alloc(C, ng * 2);
    tsc_fill_random(C, d, words, TS_DTYPE_U32, 0, 0, seed);
    tsc_fill_random(C, s, ng, TS_DTYPE_BF16, 0.001f, 0.004f, seed + 1);
    tsc_fill_random(C, b, ng, TS_DTYPE_BF16, -0.03f, -0.01f, seed + 2);
    w.data = d, w.scales = s, w.biases = b;
    return w;
}

static float *vec(size_t n, float lo, float hi, uint32_t seed) {
    float *p = tsc_alloc(C, n * sizeof(float));
    tsc_fill_random(C, p, n, TS_DTYPE_F32, lo, hi, seed);
    return p;
}

typedef struct {
    int full;
    tsc_weight qkv, z, b, a, out;       /* GDN */
    tsc_weight q, k, v, o;              /* attention */
    tsc_weight gate, up, down;
    float *in_norm, *post_norm, *conv_w, *conv_state, *S, *neg_A, *dt_bias, *gnorm, *q_norm, *k_norm, *Kc, *Vc;
} layer;

static layer L[NL];
static tsc_weight EMB, HEAD;
static float *FNORM;
static int POS = 512, MAXT;

/* activations / scratch, sized for 16 rows */
static float *X, *U, *T, *QKV, *Z, *BB, *AA, *O, *G, *UP, *QG, *KB, *VB, *AO, *LOG, *GWS, *AWS;
static int32_t *IDS, *OUT_ID;
static void *AMWS;

static void build(void) {
    uint32_t seed = 1;
    for (int l = 0; l < NL; l++) {
        layer *y = &L[l];
        y->full = (l + 1) % 4 == 0;
        if (y->full) {
            y->q = qweight(2 * NQ * HD, H, seed += 8), y->k = qweight(NKV * HD, H, seed += 8);
            y->v = qweight(NKV * HD, H, seed += 8), y->o = qweight(H, NQ * HD, seed += 8);
            y->q_norm = vec(HD, 0.5f, 1.5f, seed += 8), y->k_norm = vec(HD, 0.5f, 1.5f, seed += 8);
            y->Kc = vec((size_t)MAXT * NKV * HD, -1, 1, seed += 8), y->Vc = vec((size_t)MAXT * NKV * HD, -1, 1, seed += 8);
        } else {
            y->qkv = qweight(CONV, H, seed += 8), y->z = qweight(VD, H, seed += 8), y->b = qweight(HV, H, seed += 8);
            y->a = qweight(HV, H, seed += 8), y->out = qweight(H, VD, seed += 8);
            y->conv_w = vec(4 * CONV, -0.5f, 0.5f, seed += 8), y->conv_state = vec(3 * CONV, -1, 1, seed += 8);
            y->S = vec((size_t)HV * DK * DK, -0.05f, 0.05f, seed += 8), y->neg_A = vec(HV, -2, -0.1f, seed += 8);
            y->dt_bias = vec(HV, -1, 1, seed += 8), y->gnorm = vec(DK, 0.5f, 1.5f, seed += 8);
        }
        y->gate = qweight(FF, H, seed += 8), y->up = qweight(FF, H, seed += 8), y->down = qweight(H, FF, seed += 8);
        y->in_norm = vec(H, 0.5f, 1.5f, seed += 8), y->post_norm = vec(H, 0.5f, 1.5f, seed += 8);
    }
    EMB = qweight(V, H, seed += 8), HEAD = qweight(V, H, seed += 8), FNORM = vec(H, 0.5f, 1.5f, seed += 8);
    const int R = TSC_ROWS_MAX;
    X = vec((size_t)R * H, -1, 1, 90), U = vec((size_t)R * H, -1, 1, 91), T = vec((size_t)R * H, -1, 1, 92);
    QKV = vec((size_t)R * CONV, -1, 1, 93), Z = vec((size_t)R * VD, -1, 1, 94), BB = vec(R * HV, -1, 1, 95);
    AA = vec(R * HV, -1, 1, 96), O = vec((size_t)R * VD, -1, 1, 97), G = vec((size_t)R * FF, -1, 1, 98);
    UP = vec((size_t)R * FF, -1, 1, 99), QG = vec((size_t)R * NQ * 2 * HD, -1, 1, 100);
    KB = vec((size_t)R * NKV * HD, -1, 1, 101), VB = vec((size_t)R * NKV * HD, -1, 1, 102);
    AO = vec((size_t)R * NQ * HD, -1, 1, 103), LOG = vec((size_t)R * V, -1, 1, 104);
    GWS = tsc_alloc(C, tsc_gdn_ws_bytes(R, CONV)), AWS = tsc_alloc(C, tsc_attn_ws_bytes(R, NQ, HD, MAXT));
    AMWS = tsc_alloc(C, tsc_argmax_ws_bytes(R));
    IDS = tsc_alloc(C, R * sizeof(int32_t)), OUT_ID = tsc_alloc(C, R * sizeof(int32_t));
    int32_t ids[TSC_ROWS_MAX];
    for (int i = 0; i < R; i++) ids[i] = 1000 + 37 * i;
    tsc_write(C, IDS, ids, sizeof ids);
    die_if_err("building the 9B-shape weights");
}

static void lin1(const tsc_weight *w, const float *x, float *y, int n) { tsc_linear(C, (const tsc_weight *[]){w}, 1, x, &y, n); }

/* ---- the product groups of a decode step (as qwen35.c issues them) ---- */
enum { P_GDN_IN, P_GDN_OUT, P_ATT_QKV, P_ATT_O, P_FFN_GU, P_FFN_DOWN, P_HEAD, P_N };
static const char *PNAME[P_N] = {"gdn in_proj qkv+z+b+a [8192|4096|32|32 x 4096]", "gdn out_proj [4096 x 4096]",
                                 "attn q+k+v [8192|1024|1024 x 4096]", "attn o_proj [4096 x 4096]",
                                 "ffn gate+up [2 x 12288 x 4096]", "ffn down [4096 x 12288]",
                                 "head [248320 x 4096]"};

static size_t group_call(int p, int l, int n) {
    layer *y = &L[l];
    switch (p) {
    case P_GDN_IN:
        tsc_linear(C, (const tsc_weight *[]){&y->qkv, &y->z, &y->b, &y->a}, 4, U, (float *[]){QKV, Z, BB, AA}, n);
        return tsc_weight_bytes(&y->qkv) + tsc_weight_bytes(&y->z) + tsc_weight_bytes(&y->b) + tsc_weight_bytes(&y->a);
    case P_GDN_OUT: lin1(&y->out, O, T, n); return tsc_weight_bytes(&y->out);
    case P_ATT_QKV:
        tsc_linear(C, (const tsc_weight *[]){&y->q, &y->k, &y->v}, 3, U, (float *[]){QG, KB, VB}, n);
        return tsc_weight_bytes(&y->q) + tsc_weight_bytes(&y->k) + tsc_weight_bytes(&y->v);
    case P_ATT_O: lin1(&y->o, AO, T, n); return tsc_weight_bytes(&y->o);
    case P_FFN_GU:
        tsc_linear(C, (const tsc_weight *[]){&y->gate, &y->up}, 2, U, (float *[]){G, UP}, n);
        return tsc_weight_bytes(&y->gate) + tsc_weight_bytes(&y->up);
    case P_FFN_DOWN: lin1(&y->down, G, T, n); return tsc_weight_bytes(&y->down);
    default: lin1(&HEAD, U, LOG, n); return tsc_weight_bytes(&HEAD);
    }
}

static int group_applies(int p, int l) {
    if (p == P_HEAD) return l == 0;
    if (p == P_GDN_IN || p == P_GDN_OUT) return !L[l].full;
    if (p == P_ATT_QKV || p == P_ATT_O) return L[l].full;
    return 1;
}

/* One pass of group p over every layer it applies to (distinct weights, so
 * the pass reads far more than L2); median ms over reps. */
static double time_group(int p, int n, int reps, size_t *bytes) {
    double t[64];
    for (int r = -1; r < reps; r++) {
        size_t b = 0;
        tsc_timer_start(C);
        for (int l = 0; l < NL; l++)
            if (group_applies(p, l)) b += group_call(p, l, n);
        double ms = tsc_timer_ms(C);
        if (r >= 0) t[r] = ms;
        *bytes = b;
    }
    die_if_err(PNAME[p]);
    return median(t, reps);
}

/* ---- a whole decode step of the 9B shape ---- */
static size_t STEP_BYTES;

static void step(int n, int products_only) {
    size_t b = 0;
    if (!products_only) tsc_embed(C, &EMB, IDS, n, X);
    for (int l = 0; l < NL; l++) {
        layer *y = &L[l];
        /* x += the previous layer's FFN output, u = norm(x) */
        if (!products_only) tsc_add_rmsnorm(C, X, l ? T : NULL, y->in_norm, U, n, H, 1e-6f);
        if (y->full) {
            b += group_call(P_ATT_QKV, l, n);
            if (!products_only) {
                tsc_attn_args a = {n, POS, NQ, NKV, HD, 64, 1e7f, 1e-6f, QG, KB, VB, y->q_norm, y->k_norm,
                                   y->Kc, y->Vc, MAXT, AO, AWS, NULL, 0, 0};
                tsc_attn_decode(C, &a);
            }
            b += group_call(P_ATT_O, l, n);
        } else {
            b += group_call(P_GDN_IN, l, n);
            if (!products_only) {
                tsc_gdn_args g = {n, HK, HV, DK, DK, 4, QKV, Z, BB, AA, y->conv_state, y->conv_w, y->S,
                                  y->neg_A, y->dt_bias, y->gnorm, 1e-6f, O, GWS};
                tsc_gdn_step(C, &g);
            }
            b += group_call(P_GDN_OUT, l, n);
        }
        if (!products_only) tsc_add_rmsnorm(C, X, T, y->post_norm, U, n, H, 1e-6f);
        b += group_call(P_FFN_GU, l, n);
        if (!products_only) tsc_silu_mul(C, G, UP, (size_t)n * FF);
        b += group_call(P_FFN_DOWN, l, n);
    }
    if (!products_only) tsc_add_rmsnorm(C, X, T, FNORM, U, n, H, 1e-6f);
    b += group_call(P_HEAD, 0, n);
    if (!products_only) tsc_argmax(C, LOG, n, V, OUT_ID, AMWS);
    STEP_BYTES = b;
}

/* median ms of one step: eager (launches from the host) or replayed graph */
static double time_step(int n, int products_only, int graph, int reps) {
    double t[64];
    tsc_graph *g = NULL;
    if (graph) {
        tsc_graph_begin(C);
        step(n, products_only);
        g = tsc_graph_end(C);
        die_if_err("capturing the step");
    }
    for (int r = -2; r < reps; r++) {
        tsc_timer_start(C);
        if (graph) tsc_graph_launch(C, g);
        else step(n, products_only);
        double ms = tsc_timer_ms(C);
        if (r >= 0) t[r] = ms;
    }
    die_if_err("the step");
    tsc_graph_free(g);
    return median(t, reps);
}

/* median ms of `reps` launches of one small op in a graph of 50 copies */
#define OPT(name, call)                                                       \
    do {                                                                      \
        tsc_graph_begin(C);                                                   \
        for (int k_ = 0; k_ < 50; k_++) { call; }                             \
        tsc_graph *g_ = tsc_graph_end(C);                                     \
        double t_[9];                                                         \
        for (int r_ = -1; r_ < 9; r_++) {                                     \
            tsc_timer_start(C);                                               \
            tsc_graph_launch(C, g_);                                          \
            double ms_ = tsc_timer_ms(C);                                     \
            if (r_ >= 0) t_[r_] = ms_;                                        \
        }                                                                     \
        tsc_graph_free(g_);                                                   \
        die_if_err(name);                                                     \
        printf("%-44s %9.2f us\n", name, median(t_, 9) / 50 * 1000);          \
        printf("KV op_us.%s %.3f\n", name, median(t_, 9) / 50 * 1000);        \
    } while (0)

int main(int argc, char **argv) {
    int dev = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pos") && i + 1 < argc) POS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (strcmp(argv[++i], "9b")) { fprintf(stderr, "cuda_bench: --shape: only 9b\n"); return 2; }
        } else {
            fprintf(stderr, "usage: cuda_bench [--device N] [--shape 9b] [--pos P] [--quick]\n");
            return 2;
        }
    }
    ts_error e;
    if (tsc_open(dev, &C, &e)) {
        fprintf(stderr, "cuda_bench: %s\n", e.msg);
        return 1;
    }
    char name[128];
    int n_sm;
    size_t fb, tb;
    tsc_info(C, name, sizeof name, &n_sm, &fb, &tb);
    printf("device: %s, %d SMs, %.1f GiB\n", name, n_sm, tb / 1073741824.0);
    MAXT = POS + TSC_ROWS_MAX + 1;
    const int reps = quick ? 5 : 15;

    /* 1. the copy probe: 2 GiB device to device, read + write counted */
    const size_t cb = (size_t)2 << 30;
    void *s = tsc_alloc(C, cb), *d = tsc_alloc(C, cb);
    tsc_fill_random(C, s, cb / 4, TS_DTYPE_U32, 0, 0, 7);
    double tc[64];
    for (int r = -2; r < reps; r++) {
        tsc_timer_start(C);
        tsc_copy(C, d, s, cb);
        double ms = tsc_timer_ms(C);
        if (r >= 0) tc[r] = ms;
    }
    die_if_err("copy probe");
    const double probe = 2.0 * cb / (median(tc, reps) * 1e-3) / 1e9;
    tsc_free(C, s), tsc_free(C, d);
    printf("\ncopy probe (2 GiB D2D, read+write): %.0f GB/s\n", probe);
    printf("KV probe_gbs %.1f\n", probe);

    build();

    /* 2. products, one row, per group over all layers */
    printf("\n%-52s %8s %9s %8s %7s\n", "9B products, INT4 g64, 1 row (all layers)", "MB", "us", "GB/s", "% probe");
    double sum_ms = 0;
    size_t sum_b = 0;
    for (int p = 0; p < P_N; p++) {
        size_t b;
        double ms = time_group(p, 1, reps, &b);
        int calls = 0;
        for (int l = 0; l < NL; l++) calls += group_applies(p, l);
        sum_ms += ms, sum_b += b;
        const double gbs = b / (ms * 1e-3) / 1e9;
        printf("%-52s %8.1f %9.1f %8.0f %6.1f%%   (%d calls, %.2f us each)\n", PNAME[p], b / 1e6, ms * 1000, gbs,
               100 * gbs / probe, calls, ms * 1000 / calls);
        printf("KV prod_gbs.%d %.1f\nKV prod_pct.%d %.2f\n", p, gbs, p, 100 * gbs / probe);
    }
    printf("%-52s %8.1f %9.1f %8.0f %6.1f%%\n", "sum of the groups (eager launches)", sum_b / 1e6, sum_ms * 1000,
           sum_b / (sum_ms * 1e-3) / 1e9, 100 * sum_b / (sum_ms * 1e-3) / 1e9 / probe);

    /* 3. whole step */
    const double pe = time_step(1, 1, 0, reps), pg = time_step(1, 1, 1, reps);
    const double se = time_step(1, 0, 0, reps), sg = time_step(1, 0, 1, reps);
    const double bytes = (double)STEP_BYTES;
    const double tgt = bytes / (0.75 * probe * 1e9) * 1e3;
    printf("\n9B decode step (pos %d), weight bytes per token %.2f GB\n", POS, bytes / 1e9);
    printf("%-44s %9.3f ms %8.1f tok/s %6.1f%% of probe\n", "products only, eager", pe, 1e3 / pe, 100 * bytes / (pe * 1e-3) / 1e9 / probe);
    printf("%-44s %9.3f ms %8.1f tok/s %6.1f%% of probe\n", "products only, one graph", pg, 1e3 / pg, 100 * bytes / (pg * 1e-3) / 1e9 / probe);
    printf("%-44s %9.3f ms %8.1f tok/s %6.1f%% of probe\n", "whole step (all ops), eager", se, 1e3 / se, 100 * bytes / (se * 1e-3) / 1e9 / probe);
    printf("%-44s %9.3f ms %8.1f tok/s %6.1f%% of probe\n", "whole step (all ops), one graph", sg, 1e3 / sg, 100 * bytes / (sg * 1e-3) / 1e9 / probe);
    printf("%-44s %9.3f ms %8.1f tok/s\n", "llama.cpp Q4_K_M (anchors.md)", 1e3 / 213.6, 213.6);
    printf("%-44s %9.3f ms %8.1f tok/s (x%.2f llama.cpp)\n", "target: 75% of this probe", tgt, 1e3 / tgt, 1e3 / tgt / 213.6);
    printf("KV step_bytes %.0f\nKV step_products_graph_ms %.4f\nKV step_graph_ms %.4f\nKV step_eager_ms %.4f\n", bytes, pg, sg, se);
    printf("KV step_graph_pct %.2f\nKV step_graph_tok_s %.1f\nKV step_vs_llama %.2f\n", 100 * bytes / (sg * 1e-3) / 1e9 / probe,
           1e3 / sg, 1e3 / sg / 213.6);

    /* 4. verify cost: the whole step at n rows */
    printf("\n%-20s %9s %9s\n", "rows (whole step)", "ms", "x 1 row");
    static const int ns[] = {1, 2, 3, 4, 5, 8, 16};
    for (int k = 0; k < (quick ? 4 : 7); k++) {
        const double ms = time_step(ns[k], 0, 1, quick ? 3 : 7);
        printf("%-20d %9.3f %9.2f\n", ns[k], ms, ms / sg);
        printf("KV rows_ratio.%d %.3f\n", ns[k], ms / sg);
    }

    /* 5. the other ops, one row, launch overhead excluded (50 in a graph) */
    printf("\n%-44s %12s\n", "other ops (1 row, in a graph)", "per call");
    {
        layer *y = &L[0], *f = &L[3];
        tsc_gdn_args g = {1, HK, HV, DK, DK, 4, QKV, Z, BB, AA, y->conv_state, y->conv_w, y->S, y->neg_A, y->dt_bias, y->gnorm, 1e-6f, O, GWS};
        OPT("gdn_step (Hv 32, 1 row)", tsc_gdn_step(C, &g));
        g.n = 4;
        OPT("gdn_step (Hv 32, 4 rows)", tsc_gdn_step(C, &g));
        tsc_attn_args a = {1, POS, NQ, NKV, HD, 64, 1e7f, 1e-6f, QG, KB, VB, f->q_norm, f->k_norm, f->Kc, f->Vc, MAXT, AO, AWS, NULL, 0, 0};
        OPT("attn_decode (T = pos + 1)", tsc_attn_decode(C, &a));
        OPT("add_rmsnorm (4096)", tsc_add_rmsnorm(C, X, T, y->in_norm, U, 1, H, 1e-6f));
        OPT("silu_mul (12288)", tsc_silu_mul(C, G, UP, FF));
        OPT("embed (int4 row)", tsc_embed(C, &EMB, IDS, 1, X));
        OPT("argmax (248320)", tsc_argmax(C, LOG, 1, V, OUT_ID, AMWS));
        OPT("moe_route (E 256, top 8)", tsc_moe_route(C, LOG, 1, 256, 8, 1, OUT_ID, (float *)T));
        OPT("linear in_b alone [32 x 4096]", lin1(&y->b, U, BB, 1));
    }
    if (!quick) {
        /* attention at a long context: a fresh cache of 8192 rows */
        const int T2 = 8192;
        float *K2 = vec((size_t)(T2 + 1) * NKV * HD, -1, 1, 500), *V2 = vec((size_t)(T2 + 1) * NKV * HD, -1, 1, 501);
        float *W2 = tsc_alloc(C, tsc_attn_ws_bytes(1, NQ, HD, T2 + 1));
        tsc_attn_args a = {1, T2 - 1, NQ, NKV, HD, 64, 1e7f, 1e-6f, QG, KB, VB, L[3].q_norm, L[3].k_norm, K2, V2, T2 + 1, AO, W2, NULL, 0, 0};
        OPT("attn_decode (T = 8192)", tsc_attn_decode(C, &a));
        printf("   (K+V read at T = 8192: %.1f MB)\n", 2.0 * T2 * NKV * HD * 4 / 1e6);
    }
    tsc_close(C);
    return 0;
}
