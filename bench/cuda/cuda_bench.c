/* cuda_bench.c: the CUDA kernels' benchmark (build/cuda_bench, make CUDA=1).
 *
 *   cuda_bench [--device N] [--shape 9b|35b8|0.8b|all] [--pos P] [--quick] [--prof [--prof-rows N]] [--mlx] [--digits 1|2|3]
 *
 * Owns: the device-copy bandwidth probe, the matrix-vector products of a
 * decode step per group (INT4 group 64, bf16 scales and biases, random
 * weights, stored as tsc_weight_upload stores them: Q4T), and whole decode
 * steps built from the kernels for three shapes (shapes/qwen3.5-*.json):
 * the 9B (32 layers), the 35B-A3B cut to 8 layers (6 GDN + 2 attention, MoE
 * FFN with 256 experts, top 8, read by device ids) and the 0.8B (tied
 * head). A step is timed as one CUDA graph in two forms: "fused" (add+RMSNorm
 * staged by the next product, SwiGLU by the down product, programmatic
 * dependent launch) and "plain" (one kernel per op, no PDL: the op sequence
 * of the groundwork); kernels per step are the graph's nodes; the fused 9B
 * step at 1..16 rows gives the verify cost. Does not own: the engine (the
 * step is qwen35.c's op sequence on random weights), parity
 * (tests/test_cuda.c).
 *
 * Method (METHOD.md): device events around each region, warm-up first,
 * medians; every timed region reads several times the 60 MB L2 (groups are
 * timed over all layers' distinct weights; the probe copies 2 GiB). The probe
 * counts bytes read plus bytes written. Bytes per token: the weights a step
 * reads (for MoE the 8 selected experts of each layer). Prints tables and
 * "KV key value" lines for scripts/gpu_check.sh. --prof: each product group
 * of the 9B and the 35B-A3B once after a warm-up, for ncu (at --prof-rows N
 * rows, 1..16, default 1; N > 1: a verify pass's kernels).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/tsc.h"

typedef struct {
    const char *name, *key;
    int NL, H, FF, V, NQ, NKV, HD, HK, HV, DK, tied;
    int E, TOPK, FE, FS; /* MoE: experts, top k, expert and shared FFN widths (E = 0: dense) */
    double llama_tok_s;  /* llama.cpp Q4_K_M on an H200 (anchors.md), 0: none */
} shape;

static const shape SHAPES[] = {
    {"Qwen3.5-9B", "9b", 32, 4096, 12288, 248320, 16, 4, 256, 16, 32, 128, 0, 0, 0, 0, 0, 213.6},
    {"Qwen3.5-35B-A3B, 8 layers", "35b8", 8, 2048, 0, 248320, 16, 2, 256, 16, 32, 128, 0, 256, 8, 512, 512, 848.6},
    {"Qwen3.5-0.8B", "0.8b", 24, 1024, 3584, 248320, 8, 2, 256, 16, 16, 128, 1, 0, 0, 0, 0, 0},
};

static tsc_ctx *C;
static const shape *S;
/* --mlx: 4-bit weights stay in the MLX layout (products: q4dp.cu's dp4a
 * kernel, fused ones too; linear.cu's f32 kernel with TSC_Q4DP=0, whose
 * steps then run their plain form only); the MoE expert products need Q4T,
 * so MoE shapes are skipped */
static int MLX;
/* --digits D: x as D int8 digits in the dp4a products (1: 8 bits, the engine's default; 3: 24 bits) */
static int DIGITS;

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

/* random INT4 g64 weight, made in the MLX layout on the device and stored as
 * the upload stores it */
static tsc_weight qweight(int64_t rows, int64_t cols, uint32_t seed) {
    tsc_weight w = {TS_DTYPE_U32, 4, 64, rows, cols, NULL, NULL, NULL, TS_DTYPE_BF16, 0, 0};
    const size_t words = (size_t)rows * cols / 8, ng = (size_t)rows * (cols / 64);
    void *d = tsc_alloc(C, words * 4), *s = tsc_alloc(C, ng * 2), *b = tsc_alloc(C, ng * 2);
    tsc_fill_random(C, d, words, TS_DTYPE_U32, 0, 0, seed);
    tsc_fill_random(C, s, ng, TS_DTYPE_BF16, 0.001f, 0.004f, seed + 1);
    tsc_fill_random(C, b, ng, TS_DTYPE_BF16, -0.03f, -0.01f, seed + 2);
    w.data = d, w.scales = s, w.biases = b;
    w.act_digits = DIGITS;
    ts_error e;
    if (!MLX && tsc_weight_relayout(C, &w, &e)) {
        fprintf(stderr, "cuda_bench: relayout: %s\n", e.msg);
        exit(1);
    }
    return w;
}

static float *vec(size_t n, float lo, float hi, uint32_t seed) {
    float *p = tsc_alloc(C, n * sizeof(float));
    tsc_fill_random(C, p, n, TS_DTYPE_F32, lo, hi, seed);
    return p;
}

typedef struct {
    int full;
    tsc_weight qkv, z, b, a, out; /* GDN */
    tsc_weight q, k, v, o;        /* attention */
    tsc_weight gate, up, down;    /* dense FFN */
    tsc_weight router, sg, su, sd, sgw; /* MoE: router, shared expert, its gate */
    tsc_weight *eg, *eu, *ed;           /* E experts each */
    float *in_norm, *post_norm, *conv_w, *conv_state, *S, *neg_A, *dt_bias, *gnorm, *q_norm, *k_norm, *Kc, *Vc;
} layer;

#define NLMAX 40
static layer L[NLMAX];
static tsc_weight EMB, HEADW;
static const tsc_weight *HEAD;
static float *FNORM;
static int POS = 512, MAXT, CONV, VD;

/* activations / scratch, sized for 16 rows */
static float *X[2], *U, *T, *QKV, *Z, *BB, *AA, *O, *G, *UP, *QG, *KB, *VB, *AO, *LOG, *GWS, *AWS;
static float *LOGE, *SG, *SU, *SY, *GW, *EG, *EU, *ED, *WTS;
static int32_t *IDS, *OUT_ID, *EIDS;
static void *AMWS;

static void build(void) {
    uint32_t seed = 1;
    const int H = S->H;
    CONV = 2 * S->HK * S->DK + S->HV * S->DK, VD = S->HV * S->DK;
    for (int l = 0; l < S->NL; l++) {
        layer *y = &L[l];
        memset(y, 0, sizeof *y);
        y->full = (l + 1) % 4 == 0;
        if (y->full) {
            y->q = qweight(2 * S->NQ * S->HD, H, seed += 8), y->k = qweight(S->NKV * S->HD, H, seed += 8);
            y->v = qweight(S->NKV * S->HD, H, seed += 8), y->o = qweight(H, S->NQ * S->HD, seed += 8);
            y->q_norm = vec(S->HD, 0.5f, 1.5f, seed += 8), y->k_norm = vec(S->HD, 0.5f, 1.5f, seed += 8);
            y->Kc = vec((size_t)MAXT * S->NKV * S->HD, -1, 1, seed += 8);
            y->Vc = vec((size_t)MAXT * S->NKV * S->HD, -1, 1, seed += 8);
        } else {
            y->qkv = qweight(CONV, H, seed += 8), y->z = qweight(VD, H, seed += 8), y->b = qweight(S->HV, H, seed += 8);
            y->a = qweight(S->HV, H, seed += 8), y->out = qweight(H, VD, seed += 8);
            y->conv_w = vec(4 * CONV, -0.5f, 0.5f, seed += 8), y->conv_state = vec(3 * CONV, -1, 1, seed += 8);
            y->S = vec((size_t)S->HV * S->DK * S->DK, -0.05f, 0.05f, seed += 8), y->neg_A = vec(S->HV, -2, -0.1f, seed += 8);
            y->dt_bias = vec(S->HV, -1, 1, seed += 8), y->gnorm = vec(S->DK, 0.5f, 1.5f, seed += 8);
        }
        if (S->E) {
            y->router = qweight(S->E, H, seed += 8);
            y->sg = qweight(S->FS, H, seed += 8), y->su = qweight(S->FS, H, seed += 8), y->sd = qweight(H, S->FS, seed += 8);
            y->sgw = qweight(1, H, seed += 8);
            y->eg = malloc(sizeof(tsc_weight) * S->E), y->eu = malloc(sizeof(tsc_weight) * S->E);
            y->ed = malloc(sizeof(tsc_weight) * S->E);
            for (int e = 0; e < S->E; e++) {
                y->eg[e] = qweight(S->FE, H, seed += 8), y->eu[e] = qweight(S->FE, H, seed += 8);
                y->ed[e] = qweight(H, S->FE, seed += 8);
            }
        } else {
            y->gate = qweight(S->FF, H, seed += 8), y->up = qweight(S->FF, H, seed += 8), y->down = qweight(H, S->FF, seed += 8);
        }
        y->in_norm = vec(H, 0.5f, 1.5f, seed += 8), y->post_norm = vec(H, 0.5f, 1.5f, seed += 8);
    }
    EMB = qweight(S->V, H, seed += 8);
    if (S->tied) HEAD = &EMB;
    else HEADW = qweight(S->V, H, seed += 8), HEAD = &HEADW;
    FNORM = vec(H, 0.5f, 1.5f, seed += 8);
    const int R = TSC_ROWS_MAX, FF = S->E ? S->FE : S->FF, K8 = S->E ? S->TOPK : 1;
    X[0] = vec((size_t)R * H, -1, 1, 90), X[1] = vec((size_t)R * H, -1, 1, 89);
    U = vec((size_t)R * H, -1, 1, 91), T = vec((size_t)R * H, -1, 1, 92);
    QKV = vec((size_t)R * CONV, -1, 1, 93), Z = vec((size_t)R * VD, -1, 1, 94), BB = vec(R * S->HV, -1, 1, 95);
    AA = vec(R * S->HV, -1, 1, 96), O = vec((size_t)R * VD, -1, 1, 97), G = vec((size_t)R * FF, -1, 1, 98);
    UP = vec((size_t)R * FF, -1, 1, 99), QG = vec((size_t)R * S->NQ * 2 * S->HD, -1, 1, 100);
    KB = vec((size_t)R * S->NKV * S->HD, -1, 1, 101), VB = vec((size_t)R * S->NKV * S->HD, -1, 1, 102);
    AO = vec((size_t)R * S->NQ * S->HD, -1, 1, 103), LOG = vec((size_t)R * S->V, -1, 1, 104);
    if (S->E) {
        LOGE = vec((size_t)R * S->E, -1, 1, 105), SG = vec((size_t)R * S->FS, -1, 1, 106), SU = vec((size_t)R * S->FS, -1, 1, 107);
        SY = vec((size_t)R * H, -1, 1, 108), GW = vec(R, -1, 1, 109), WTS = vec((size_t)R * K8, 0, 1, 110);
        EG = vec((size_t)R * K8 * S->FE, -1, 1, 111), EU = vec((size_t)R * K8 * S->FE, -1, 1, 112);
        ED = vec((size_t)R * K8 * H, -1, 1, 113);
        EIDS = tsc_alloc(C, (size_t)R * K8 * sizeof(int32_t));
    }
    GWS = tsc_alloc(C, tsc_gdn_ws_bytes(R, CONV)), AWS = tsc_alloc(C, tsc_attn_ws_bytes(R, S->NQ, S->HD, MAXT));
    AMWS = tsc_alloc(C, tsc_argmax_ws_bytes(R));
    IDS = tsc_alloc(C, R * sizeof(int32_t)), OUT_ID = tsc_alloc(C, R * sizeof(int32_t));
    int32_t ids[TSC_ROWS_MAX];
    for (int i = 0; i < R; i++) ids[i] = 1000 + 37 * i;
    tsc_write(C, IDS, ids, sizeof ids);
    die_if_err("building the weights");
    if (S->E) {
        /* routing of the benchmark's rows: real ids from the router, so the
         * experts read are the ones a step selects (distinct per row) */
        tsc_linear(C, (const tsc_weight *[]){&L[0].router}, 1, U, &LOGE, R);
        tsc_moe_route(C, LOGE, R, S->E, S->TOPK, 1, EIDS, WTS);
        die_if_err("routing");
    }
}

static size_t wb(const tsc_weight *w) { return tsc_weight_bytes(w); }
static void lin(const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) { tsc_linear(C, w, nw, x, y, n); }

/* ---- product groups (as the decode step issues them; 1..n rows) ---- */
enum { P_GDN_IN, P_GDN_OUT, P_ATT_QKV, P_ATT_O, P_FFN_GU, P_FFN_DOWN, P_MOE_RS, P_MOE_GU, P_MOE_DOWN, P_MOE_SDOWN, P_HEAD, P_N };
static const char *PNAME[P_N] = {"gdn in_proj qkv+z+b+a", "gdn out_proj", "attn q+k+v", "attn o_proj",
                                 "ffn gate+up", "ffn down", "moe router+shared gate/up+gate", "moe experts gate+up (top k)",
                                 "moe experts down (top k)", "moe shared down", "head"};

static int group_applies(int p, int l) {
    if (p == P_HEAD) return l == 0;
    if (p == P_GDN_IN || p == P_GDN_OUT) return !L[l].full;
    if (p == P_ATT_QKV || p == P_ATT_O) return L[l].full;
    if (p == P_FFN_GU || p == P_FFN_DOWN) return !S->E;
    return S->E != 0;
}

/* the weights of dense product group p of layer y (as group_call issues
 * them), their count; 0 for the MoE groups and the head */
static int group_weights(int p, layer *y, const tsc_weight **w) {
    switch (p) {
    case P_GDN_IN: w[0] = &y->qkv, w[1] = &y->z, w[2] = &y->b, w[3] = &y->a; return 4;
    case P_GDN_OUT: w[0] = &y->out; return 1;
    case P_ATT_QKV: w[0] = &y->q, w[1] = &y->k, w[2] = &y->v; return 3;
    case P_ATT_O: w[0] = &y->o; return 1;
    case P_FFN_GU: w[0] = &y->gate, w[1] = &y->up; return 2;
    case P_FFN_DOWN: w[0] = &y->down; return 1;
    default: return 0;
    }
}

static size_t group_call(int p, int l, int n) {
    layer *y = &L[l];
    const int k = S->TOPK;
    const tsc_weight *w[4];
    const int nw = group_weights(p, y, w);
    if (nw) { /* the dense groups: input and outputs */
        float *ys[4];
        const float *x = p == P_GDN_OUT ? O : p == P_ATT_O ? AO : p == P_FFN_DOWN ? G : U;
        if (p == P_GDN_IN) ys[0] = QKV, ys[1] = Z, ys[2] = BB, ys[3] = AA;
        else if (p == P_ATT_QKV) ys[0] = QG, ys[1] = KB, ys[2] = VB;
        else if (p == P_FFN_GU) ys[0] = G, ys[1] = UP;
        else ys[0] = T;
        lin(w, nw, x, ys, n);
        size_t b = 0;
        for (int i = 0; i < nw; i++) b += wb(w[i]);
        return b;
    }
    switch (p) {
    case P_MOE_RS:
        lin((const tsc_weight *[]){&y->router, &y->sg, &y->su, &y->sgw}, 4, U, (float *[]){LOGE, SG, SU, GW}, n);
        return wb(&y->router) + wb(&y->sg) + wb(&y->su) + wb(&y->sgw);
    case P_MOE_GU:
        tsc_moe_linear(C, (const tsc_weight *[]){y->eg, y->eu}, 2, S->E, EIDS, n, k, U, NULL, 0, (float *[]){EG, EU});
        return (size_t)n * k * (wb(&y->eg[0]) + wb(&y->eu[0]));
    case P_MOE_DOWN:
        tsc_moe_linear(C, (const tsc_weight *[]){y->ed}, 1, S->E, EIDS, n, k, EG, EU, 1, (float *[]){ED});
        return (size_t)n * k * wb(&y->ed[0]);
    case P_MOE_SDOWN: tsc_linear_swiglu(C, (const tsc_weight *[]){&y->sd}, 1, SG, SU, &SY, n); return wb(&y->sd);
    default: lin((const tsc_weight *[]){HEAD}, 1, U, &LOG, n); return wb(HEAD);
    }
}

/* One pass of group p over every layer it applies to, captured as one graph
 * (launch gaps of a graph, as in the step); median ms over reps. */
static double time_group(int p, int n, int reps, size_t *bytes, int *calls) {
    double t[64];
    *calls = 0;
    for (int l = 0; l < S->NL; l++) *calls += group_applies(p, l);
    size_t b = 0;
    tsc_graph_begin(C);
    for (int l = 0; l < S->NL; l++)
        if (group_applies(p, l)) b += group_call(p, l, n);
    tsc_graph *g = tsc_graph_end(C);
    *bytes = b;
    die_if_err(PNAME[p]);
    for (int r = -1; r < reps; r++) {
        tsc_timer_start(C);
        tsc_graph_launch(C, g);
        double ms = tsc_timer_ms(C);
        if (r >= 0) t[r] = ms;
    }
    tsc_graph_free(g);
    die_if_err(PNAME[p]);
    return median(t, reps);
}

/* ---- a whole decode step ---- */
static size_t STEP_BYTES;

/* CB_ATTN=1|2|3 (a measuring aid: the step then computes garbage, its time
 * does not depend on values): the attention layers run only their prep
 * kernel (1), only split + combine (2), nothing (3); CB_GDN=1: the GDN
 * layers skip their step. The step's time against the whole one is what
 * the left-out kernels cost inside the graph, PDL overlap included. */
static int cb_env(const char *name) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : 0;
}

static void mixer(layer *y, int n) {
    if (y->full) {
        /* designated: a field added to the args later starts zero/NULL */
        tsc_attn_args a = {.n = n, .pos = POS, .nq = S->NQ, .nkv = S->NKV, .D = S->HD, .rot = 64,
                           .theta = 1e7f, .eps = 1e-6f, .qg = QG, .k = KB, .v = VB, .q_norm = y->q_norm,
                           .k_norm = y->k_norm, .Kc = y->Kc, .Vc = y->Vc, .max_T = MAXT, .out = AO, .ws = AWS};
        const int skip = cb_env("CB_ATTN");
        if (skip == 3) return;
        a.phase = skip == 1 ? 1 : skip == 2 ? 2 : 0;
        tsc_attn_decode(C, &a);
    } else {
        if (cb_env("CB_GDN") == 1) return;
        tsc_gdn_args g = {.n = n, .Hk = S->HK, .Hv = S->HV, .dk = S->DK, .dv = S->DK, .K = 4, .qkv = QKV, .z = Z,
                          .b = BB, .a = AA, .conv_state = y->conv_state, .conv_w = y->conv_w, .S = y->S,
                          .neg_A = y->neg_A, .dt_bias = y->dt_bias, .norm_w = y->gnorm, .eps = 1e-6f, .o = O,
                          .ws = GWS};
        tsc_gdn_step(C, &g);
    }
}

/* fused: products stage add+RMSNorm and SwiGLU (x ping-pongs between X[0]
 * and X[1]); plain: one kernel per op, in place, the groundwork's sequence */
static void step(int n, int fused) {
    size_t b = 0;
    if (MLX && getenv("TSC_Q4DP") && getenv("TSC_Q4DP")[0] == '0') fused = 0; /* the f32 kernel has no fused form */
    const int H = S->H, k = S->TOPK;
    int cur = 0;
    tsc_embed(C, &EMB, IDS, n, X[0]);
    for (int l = 0; l < S->NL; l++) {
        layer *y = &L[l];
        const float *add = l ? T : NULL;
        /* mixer input: x (+ the previous FFN's output), normed */
        const tsc_weight *wm[4];
        float *ym[4];
        int nm;
        if (y->full) wm[0] = &y->q, wm[1] = &y->k, wm[2] = &y->v, ym[0] = QG, ym[1] = KB, ym[2] = VB, nm = 3;
        else wm[0] = &y->qkv, wm[1] = &y->z, wm[2] = &y->b, wm[3] = &y->a, ym[0] = QKV, ym[1] = Z, ym[2] = BB, ym[3] = AA, nm = 4;
        for (int i = 0; i < nm; i++) b += wb(wm[i]);
        if (fused) {
            tsc_linear_addnorm(C, wm, nm, X[cur], add, y->in_norm, 1e-6f, add ? X[cur ^ 1] : NULL, NULL, ym, n);
            if (add) cur ^= 1;
        } else {
            tsc_add_rmsnorm(C, X[0], add, y->in_norm, U, n, H, 1e-6f);
            lin(wm, nm, U, ym, n);
        }
        mixer(y, n);
        b += group_call(y->full ? P_ATT_O : P_GDN_OUT, l, n);
        /* FFN input: x + the mixer's output, normed */
        if (!S->E) {
            const tsc_weight *wf[2] = {&y->gate, &y->up};
            b += wb(&y->gate) + wb(&y->up) + wb(&y->down);
            if (fused) {
                tsc_linear_addnorm(C, wf, 2, X[cur], T, y->post_norm, 1e-6f, X[cur ^ 1], NULL, (float *[]){G, UP}, n);
                cur ^= 1;
                tsc_linear_swiglu(C, (const tsc_weight *[]){&y->down}, 1, G, UP, &T, n);
            } else {
                tsc_add_rmsnorm(C, X[0], T, y->post_norm, U, n, H, 1e-6f);
                lin(wf, 2, U, (float *[]){G, UP}, n);
                tsc_silu_mul(C, G, UP, (size_t)n * S->FF);
                lin((const tsc_weight *[]){&y->down}, 1, G, &T, n);
            }
        } else {
            const tsc_weight *wr[4] = {&y->router, &y->sg, &y->su, &y->sgw};
            float *yr[4] = {LOGE, SG, SU, GW};
            b += wb(&y->router) + wb(&y->sg) + wb(&y->su) + wb(&y->sgw) + wb(&y->sd);
            if (fused) {
                tsc_linear_addnorm(C, wr, 4, X[cur], T, y->post_norm, 1e-6f, X[cur ^ 1], U, yr, n);
                cur ^= 1;
            } else {
                tsc_add_rmsnorm(C, X[0], T, y->post_norm, U, n, H, 1e-6f);
                lin(wr, 4, U, yr, n);
            }
            tsc_moe_route(C, LOGE, n, S->E, k, 1, EIDS, WTS);
            b += group_call(P_MOE_GU, l, n);
            b += group_call(P_MOE_DOWN, l, n);
            if (fused) tsc_linear_swiglu(C, (const tsc_weight *[]){&y->sd}, 1, SG, SU, &SY, n);
            else {
                tsc_silu_mul(C, SG, SU, (size_t)n * S->FS);
                lin((const tsc_weight *[]){&y->sd}, 1, SG, &SY, n);
            }
            tsc_moe_combine(C, ED, WTS, n, k, SY, GW, T, H);
        }
    }
    if (fused) tsc_linear_addnorm(C, (const tsc_weight *[]){HEAD}, 1, X[cur], T, FNORM, 1e-6f, X[cur ^ 1], NULL, &LOG, n);
    else {
        tsc_add_rmsnorm(C, X[0], T, FNORM, U, n, H, 1e-6f);
        lin((const tsc_weight *[]){HEAD}, 1, U, &LOG, n);
    }
    b += wb(HEAD);
    tsc_argmax(C, LOG, n, S->V, OUT_ID, AMWS);
    STEP_BYTES = b;
}

static int NODES;

/* median ms of one replay of the step's graph */
static double time_step_pdl(int n, int fused, int pdl, int reps) {
    double t[64];
    tsc_set_pdl(C, pdl);
    tsc_graph_begin(C);
    step(n, fused);
    tsc_graph *g = tsc_graph_end(C);
    tsc_set_pdl(C, 1);
    die_if_err("capturing the step");
    NODES = tsc_graph_nodes(g);
    for (int r = -2; r < reps; r++) {
        tsc_timer_start(C);
        tsc_graph_launch(C, g);
        double ms = tsc_timer_ms(C);
        if (r >= 0) t[r] = ms;
    }
    die_if_err("the step");
    tsc_graph_free(g);
    return median(t, reps);
}

static double time_step(int n, int fused, int reps) { return time_step_pdl(n, fused, fused, reps); }

static void free_all(void) {
    for (int l = 0; l < S->NL; l++) free(L[l].eg), free(L[l].eu), free(L[l].ed);
    tsc_close(C);
}

/* ---- prompt-chunk products (--gemm N): the tensor-core kernel of
 * q4gemm.cu against the row kernels in 16-row passes (what prefill ran
 * before it), N rows of x, the layer products of the shape, uncaptured
 * launches (as prefill issues them); TFLOP/s = 2 N rows cols / time ---- */
static void run_gemm(int N, int reps) {
    const int pl[] = {P_GDN_IN, P_GDN_OUT, P_ATT_QKV, P_ATT_O, P_FFN_GU, P_FFN_DOWN};
    printf("\n%-26s %6s %10s %9s %12s %9s %8s\n", "prompt-chunk products", "rows", "gemm ms", "TFLOP/s", "16-row ms", "speedup", "GB/s");
    for (size_t k = 0; k < sizeof pl / sizeof pl[0]; k++) {
        const int p = pl[k], l = p == P_ATT_QKV || p == P_ATT_O ? 3 : 0;
        if (!group_applies(p, l)) continue;
        const tsc_weight *w[4];
        const int nw = group_weights(p, &L[l], w);
        int64_t rows = 0;
        for (int i = 0; i < nw; i++) rows += w[i]->rows;
        const int64_t cols = w[0]->cols;
        float *x = vec((size_t)N * cols, -1, 1, 500 + (uint32_t)k), *yv[4];
        size_t wbytes = 0;
        for (int i = 0; i < nw; i++) yv[i] = vec((size_t)N * w[i]->rows, 0, 0, 600), wbytes += wb(w[i]);
        void *ws = tsc_alloc(C, tsc_gemm_ws_bytes(N, cols));
        double t[64], t16[64];
        for (int r = -1; r < reps; r++) {
            tsc_timer_start(C);
            tsc_linear_gemm(C, w, nw, x, yv, N, ws);
            const double ms = tsc_timer_ms(C);
            if (r >= 0) t[r] = ms;
        }
        const int r16 = reps < 3 ? reps : 3;
        for (int r = -1; r < r16; r++) {
            tsc_timer_start(C);
            for (int r0 = 0; r0 < N; r0 += TSC_ROWS_MAX) {
                float *yo[4];
                for (int i = 0; i < nw; i++) yo[i] = yv[i] + (size_t)r0 * w[i]->rows;
                tsc_linear(C, w, nw, x + (size_t)r0 * cols, yo, N - r0 < TSC_ROWS_MAX ? N - r0 : TSC_ROWS_MAX);
            }
            const double ms = tsc_timer_ms(C);
            if (r >= 0) t16[r] = ms;
        }
        die_if_err("gemm");
        const double ms = median(t, reps), ms16 = median(t16, r16), tf = 2.0 * N * rows * cols / (ms * 1e-3) / 1e12;
        printf("%-26s %6d %10.3f %9.1f %12.3f %8.1fx %8.0f\n", PNAME[p], N, ms, tf, ms16, ms16 / ms, wbytes / (ms * 1e-3) / 1e9);
        printf("KV %s.gemm_tflops.%d.%d %.1f\nKV %s.gemm_speedup.%d.%d %.2f\n", S->key, p, N, tf, S->key, p, N, ms16 / ms);
        tsc_free(C, x), tsc_free(C, ws);
        for (int i = 0; i < nw; i++) tsc_free(C, yv[i]);
    }
}

static double PROBE;

static int GEMM_N; /* --gemm N: the prompt-chunk products only */
static const char *TRACE; /* --trace FILE: the fused step's product timeline (a -DTSC_TRACE build) */

static int PROF_ROWS = 1; /* --prof-rows N */

static void run_shape(int quick, int prof) {
    const int reps = quick ? 5 : 15;
    build();
    if (GEMM_N) {
        printf("\n== %s (%s): %d layers, H %d, INT4 g64 bf16\n", S->name, S->key, S->NL, S->H);
        run_gemm(GEMM_N, quick ? 3 : 7);
        return;
    }
    if (prof) {
        for (int r = 0; r < 2; r++)
            for (int p = 0; p < P_N; p++) {
                int l = 0;
                while (l < S->NL && !group_applies(p, l)) l++;
                if (l < S->NL) group_call(p, l, PROF_ROWS);
            }
        die_if_err("prof");
        return;
    }
    printf("\n== %s (%s): %d layers, H %d, INT4 g64 bf16 (%s), pos %d\n", S->name, S->key, S->NL, S->H,
           !MLX ? "Q4T" : getenv("TSC_Q4DP") && getenv("TSC_Q4DP")[0] == '0' ? "MLX, f32 kernel" : "MLX, dp4a kernel", POS);
    printf("%-40s %8s %9s %8s %8s\n", "products, 1 row (all layers, one graph)", "MB", "us/call", "GB/s", "% probe");
    for (int p = 0; p < P_N; p++) {
        if (!group_applies(p, 0) && !group_applies(p, 3) && p != P_HEAD) continue;
        size_t b;
        int calls;
        double ms = time_group(p, 1, reps, &b, &calls);
        const double gbs = b / (ms * 1e-3) / 1e9;
        printf("%-40s %8.1f %9.2f %8.0f %7.1f%%\n", PNAME[p], b / 1e6 / calls, ms * 1000 / calls, gbs, 100 * gbs / PROBE);
        printf("KV %s.prod_pct.%d %.2f\n", S->key, p, 100 * gbs / PROBE);
    }
    const double sp = time_step(1, 0, reps);
    const int np = NODES;
    const double snp = time_step_pdl(1, 1, 0, reps);
    const double sf = time_step(1, 1, reps);
    const int nf = NODES;
    const double bytes = (double)STEP_BYTES, pct = 100 * bytes / (sf * 1e-3) / 1e9 / PROBE;
    printf("\n%s decode step, one graph: %.3f GB of weights per token\n", S->name, bytes / 1e9);
    printf("%-34s %9.3f ms %8.1f tok/s %6.1f%% of probe, %d kernels\n", "plain (op per kernel, no PDL)", sp, 1e3 / sp,
           100 * bytes / (sp * 1e-3) / 1e9 / PROBE, np);
    printf("%-34s %9.3f ms %8.1f tok/s %6.1f%% of probe, %d kernels\n", "fused, no PDL", snp, 1e3 / snp,
           100 * bytes / (snp * 1e-3) / 1e9 / PROBE, nf);
    printf("%-34s %9.3f ms %8.1f tok/s %6.1f%% of probe, %d kernels\n", "fused + PDL", sf, 1e3 / sf, pct, nf);
    if (S->llama_tok_s > 0)
        printf("%-34s %9.3f ms %8.1f tok/s  -> x%.2f (target x3)\n", "llama.cpp Q4_K_M (anchors.md)", 1e3 / S->llama_tok_s,
               S->llama_tok_s, 1e3 / sf / S->llama_tok_s);
    printf("KV %s.step_ms %.4f\nKV %s.tok_s %.1f\nKV %s.pct %.2f\nKV %s.kernels %d\nKV %s.plain_ms %.4f\nKV %s.bytes %.0f\nKV %s.nopdl_ms %.4f\n",
           S->key, sf, S->key, 1e3 / sf, S->key, pct, S->key, nf, S->key, sp, S->key, bytes, S->key, snp);
    if (S->llama_tok_s > 0) printf("KV %s.vs_llama %.2f\n", S->key, 1e3 / sf / S->llama_tok_s);
    if (TRACE) { /* one more capture of the fused step, its last replay's timeline (CB_TRACE_ROWS=n: the
                  * n-row step's, a verify pass's) */
        const int tr = cb_env("CB_TRACE_ROWS"), tn = tr > 1 ? tr : 1;
        tsc_trace_reset();
        const double ms = time_step(tn, 1, 3);
        const int nl = tsc_trace_dump(C, TRACE);
        /* the file's name only: this output is kept in bench/, the host's paths are not */
        const char *base = strrchr(TRACE, '/') ? strrchr(TRACE, '/') + 1 : TRACE;
        printf("trace: %d product launches of a %.3f ms %d-row step -> %s%s\n", nl, ms, tn, base,
               nl < 0 ? " (not written: a build without -DTSC_TRACE)" : "");
    }
    if (!strcmp(S->key, "9b")) {
        /* each product group at n rows against one row: where a verify
         * pass's extra time goes (products here, the mixers and the rest
         * in the step table below; CB_GDN / CB_ATTN take the mixers out) */
        static const int pn[] = {1, 2, 4, 8, 16};
        printf("\n%-40s", "products by rows, us/call (x 1 row)");
        for (size_t k = 0; k < sizeof pn / sizeof pn[0]; k++) printf(" %14d", pn[k]);
        printf("\n");
        double tot[sizeof pn / sizeof pn[0]] = {0};
        for (int p = 0; p < P_N; p++) {
            if (!group_applies(p, 0) && !group_applies(p, 3) && p != P_HEAD) continue;
            printf("%-40s", PNAME[p]);
            double one = 0;
            for (size_t k = 0; k < sizeof pn / sizeof pn[0]; k++) {
                size_t b;
                int calls;
                const double ms = time_group(p, pn[k], quick ? 3 : 7, &b, &calls);
                if (!k) one = ms;
                tot[k] += ms;
                printf(" %7.2f (%4.2f)", ms * 1000 / calls, ms / one);
            }
            printf("\n");
        }
        printf("%-40s", "all products of a step, ms");
        for (size_t k = 0; k < sizeof pn / sizeof pn[0]; k++) {
            printf(" %7.3f (%4.2f)", tot[k], tot[k] / tot[0]);
        }
        printf("\n");
        for (size_t k = 0; k < sizeof pn / sizeof pn[0]; k++) printf("KV prod_rows_ms.%d %.4f\n", pn[k], tot[k]);
        printf("\n%-20s %9s %9s\n", "rows (fused step)", "ms", "x 1 row");
        static const int ns[] = {1, 2, 3, 4, 5, 6, 8, 16};
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            const double ms = time_step(ns[k], 1, quick ? 3 : 7);
            printf("%-20d %9.3f %9.2f\n", ns[k], ms, ms / sf);
            printf("KV rows_ratio.%d %.3f\n", ns[k], ms / sf);
        }
    }
}

int main(int argc, char **argv) {
    int dev = 0, quick = 0, prof = 0;
    const char *which = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pos") && i + 1 < argc) POS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--prof")) prof = 1;
        else if (!strcmp(argv[i], "--prof-rows") && i + 1 < argc) PROF_ROWS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mlx")) MLX = 1;
        else if (!strcmp(argv[i], "--digits") && i + 1 < argc) DIGITS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--gemm") && i + 1 < argc) GEMM_N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) TRACE = argv[++i];
        else {
            fprintf(stderr, "usage: cuda_bench [--device N] [--shape 9b|35b8|0.8b|all] [--pos P] [--quick] [--prof [--prof-rows N]] [--mlx] [--digits 1|2|3] [--gemm N] [--trace FILE]\n");
            return 2;
        }
    }
    int any = 0;
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) any |= !strcmp(which, "all") || !strcmp(which, SHAPES[si].key);
    if (!any) {
        fprintf(stderr, "cuda_bench: --shape %s: one of 9b, 35b8, 0.8b, all\n", which);
        return 2;
    }
    if (PROF_ROWS < 1 || PROF_ROWS > TSC_ROWS_MAX) {
        fprintf(stderr, "cuda_bench: --prof-rows %d: 1..%d\n", PROF_ROWS, TSC_ROWS_MAX);
        return 2;
    }
    MAXT = POS + TSC_ROWS_MAX + 1;
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        if (strcmp(which, "all") && strcmp(which, SHAPES[si].key)) continue;
        if (prof && !strcmp(SHAPES[si].key, "0.8b")) continue;
        if (MLX && SHAPES[si].E) {
            printf("\n== %s: skipped under --mlx (the expert products need Q4T)\n", SHAPES[si].name);
            continue;
        }
        S = &SHAPES[si];
        ts_error e;
        if (tsc_open(dev, &C, &e)) {
            fprintf(stderr, "cuda_bench: %s\n", e.msg);
            return 1;
        }
        { /* the fused dp4a products' counter */
            static const unsigned zero[64];
            unsigned *bar = tsc_alloc(C, sizeof zero);
            tsc_write(C, bar, zero, sizeof zero);
            tsc_set_barrier(C, bar);
            tsc_set_digits(C, tsc_alloc(C, tsc_digits_ws_bytes()), tsc_digits_ws_bytes()); /* as the engine's streams */
        }
        if (!PROBE) {
            char name[128];
            int n_sm;
            size_t fb, tb;
            tsc_info(C, name, sizeof name, &n_sm, &fb, &tb);
            printf("device: %s, %d SMs, %.1f GiB\n", name, n_sm, tb / 1073741824.0);
            /* the copy probe: 2 GiB device to device, read + write counted */
            const size_t cb = (size_t)2 << 30;
            void *s = tsc_alloc(C, cb), *d = tsc_alloc(C, cb);
            tsc_fill_random(C, s, cb / 4, TS_DTYPE_U32, 0, 0, 7);
            double tc[64];
            const int reps = quick ? 5 : 15;
            for (int r = -2; r < reps; r++) {
                tsc_timer_start(C);
                tsc_copy(C, d, s, cb);
                double ms = tsc_timer_ms(C);
                if (r >= 0) tc[r] = ms;
            }
            die_if_err("copy probe");
            PROBE = 2.0 * cb / (median(tc, reps) * 1e-3) / 1e9;
            tsc_free(C, s), tsc_free(C, d);
            printf("copy probe (2 GiB D2D, read+write): %.0f GB/s\n", PROBE);
            printf("KV probe_gbs %.1f\n", PROBE);
        }
        run_shape(quick, prof);
        free_all();
    }
    return 0;
}
