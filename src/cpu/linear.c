/* linear.c: dispatch of the kernels to the best implementation available,
 * and the default context of direct kernel calls.
 *
 * The mode is the calling thread's (ts_kmode: set by the engine's backend on
 * entry, cpu/backend.c) or, outside any engine, the process default.
 * Modes: "ref" (linear_ref.c, the oracle), "generic" (portable C, threaded),
 * "avx2", "avx512"; "auto" picks the best the CPU supports (cpuid through
 * __builtin_cpu_supports). "avx512-q8" (opt-in, never auto) rounds
 * activations to int8 for 4-bit products, trading precision for speed. TS_KERNELS in the environment sets the first
 * choice; ts_kernels_select changes it (tests use it to run both sides of a
 * parity check in one process).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"

static int g_mode = -1; /* the process default: what engines start from, and direct calls use */

static int cpu_has(int mode) {
    switch (mode) {
    case TS_KMODE_AVX512:
    case TS_KMODE_AVX512Q8:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512vnni");
    case TS_KMODE_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    default: return 1;
    }
}

static int best_mode(void) {
    if (cpu_has(TS_KMODE_AVX512)) return TS_KMODE_AVX512;
    if (cpu_has(TS_KMODE_AVX2)) return TS_KMODE_AVX2;
    return TS_KMODE_GENERIC;
}

static const char *names[] = {"ref", "generic", "avx2", "avx512", "avx512-q8"};

int ts_kmode_parse(const char *name) {
    if (!name || !*name || !strcmp(name, "auto")) return best_mode();
    for (int i = 0; i < 5; i++)
        if (!strcmp(name, names[i])) return cpu_has(i) ? i : -1;
    return -1;
}

int ts_kmode(void) {
    int t = ts_kmode_thread();
    if (t >= 0) return t;
    if (g_mode < 0) {
        int m = ts_kmode_parse(getenv("TS_KERNELS"));
        g_mode = m < 0 ? best_mode() : m;
    }
    return g_mode;
}

int ts_kernels_select(const char *name) {
    int m = ts_kmode_parse(name);
    if (m < 0) return TS_E_ARG;
    g_mode = m;
    return 0;
}

const char *ts_kernels_name(void) { return names[ts_kmode()]; }

/* ---- direct calls: the default pool and one workspace, under a lock ---- */
static ts_cpu_ws g_ws;
static pthread_mutex_t g_ws_mu = PTHREAD_MUTEX_INITIALIZER;

void ts_kernels_release(void) {
    pthread_mutex_lock(&g_ws_mu);
    ts_cpu_ws_release(&g_ws);
    pthread_mutex_unlock(&g_ws_mu);
}

static int direct(const ts_weight *const *w, int nw, const float *const *x, int batch, float *const *y, int n,
                  int flags) {
    ts_cpu_ctx cx = {ts_pool_default(), &g_ws};
    pthread_mutex_lock(&g_ws_mu);
    int rc = batch ? ts_cpu_linear_batch(&cx, w, x, y, nw, flags) : ts_cpu_linear_many(&cx, w, nw, x[0], y, n, flags);
    pthread_mutex_unlock(&g_ws_mu);
    return rc;
}

int ts_linear(const ts_weight *w, const float *x, float *y, int n) { return direct(&w, 1, &x, 0, &y, n, 0); }
int ts_linear_prefill(const ts_weight *w, const float *x, float *y, int n) {
    return direct(&w, 1, &x, 0, &y, n, TS_LIN_PREFILL);
}
int ts_linear_draft(const ts_weight *w, const float *x, float *y, int n) { return direct(&w, 1, &x, 0, &y, n, TS_LIN_DRAFT); }
int ts_linear_many(const ts_weight *const *w, int nw, const float *x, float *const *y, int n, int flags) {
    return direct(w, nw, &x, 0, y, n, flags);
}
int ts_linear_batch(const ts_weight *const *w, const float *const *x, float *const *y, int nw, int flags) {
    return direct(w, nw, x, 1, y, 1, flags);
}
void ts_parallel_for(int n, ts_par_fn fn, void *ctx) {
    ts_cpu_ctx cx = {ts_pool_default(), &g_ws};
    ts_cpu_parallel_for(&cx, n, fn, ctx);
}

void ts_gdn_step(float *S, const float *k, const float *v, const float *q, float decay, float beta, float *o, int dk,
                 int dv) {
    if (ts_kmode() >= TS_KMODE_AVX512 && dv % 16 == 0) ts_avx512_gdn_step(S, k, v, q, decay, beta, o, dk, dv);
    else ts_gdn_step_ref(S, k, v, q, decay, beta, o, dk, dv);
}

void ts_attn_row(const float *q, const float *K, const float *V, int64_t stride, int T, int D, float scale, float *att,
                 float *o) {
    if (ts_kmode() >= TS_KMODE_AVX512 && D % 16 == 0) ts_avx512_attn_row(q, K, V, stride, T, D, scale, att, o);
    else ts_attn_row_ref(q, K, V, stride, T, D, scale, att, o);
}

void ts_attn_rows(const ts_attn_q *a, const float *K, const float *V, int64_t stride, int D, float scale) {
    if (ts_kmode() >= TS_KMODE_AVX512 && D % 16 == 0 && a->n * a->g <= TS_ATTN_MAX_Q) {
        ts_avx512_attn_rows(a, K, V, stride, D, scale);
        return;
    }
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < a->g; j++)
            ts_attn_row(a->q + i * a->q_row + j * a->q_head, K, V, stride, a->T0 + i, D, scale,
                        a->att + i * a->att_row + j * a->att_head, a->o + i * a->o_row + j * a->o_head);
}

void ts_conv_row(const float *const *x, const float *w, int K, float *y, int C) {
    int c0 = 0;
    if (ts_kmode() >= TS_KMODE_AVX512) c0 = ts_avx512_conv_row(x, w, K, y, C);
    for (int c = c0; c < C; c++) {
        float acc = 0.f;
        for (int t = 0; t < K; t++) {
            float p = w[(size_t)t * C + c] * x[t][c];
            acc = acc + p;
        }
        y[c] = acc;
    }
}

int ts_argmax(const float *x, int n) {
    if (ts_kmode() >= TS_KMODE_AVX512) return ts_avx512_argmax(x, n);
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

float ts_sum_exp(const float *x, int n, float m) {
    if (ts_kmode() >= TS_KMODE_AVX512) return ts_avx512_sum_exp(x, n, m);
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += expf(x[i] - m);
    return s;
}

void ts_silu(float *y, const float *x, size_t n) {
    if (ts_kmode() >= TS_KMODE_AVX512) { ts_avx512_silu(y, x, NULL, n); return; }
    for (size_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

void ts_silu_mul(float *g, const float *u, size_t n) {
    if (ts_kmode() >= TS_KMODE_AVX512) { ts_avx512_silu(g, g, u, n); return; }
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}
