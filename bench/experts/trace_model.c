/* trace_model.c: routing traces of a MoE model, without a hook in the forward.
 *
 *   trace_model MODEL_DIR OUT.trace [sequences 8] [tokens per sequence 256] [seed 1]
 *
 * Each sequence: a prompt of 32 random ids, then tokens sampled at
 * temperature 1 from the model's own logits (greedy decoding of a
 * random-weight model falls into loops that would flatter any cache).
 *
 * The router reads post_attention_layernorm(h), h = the residual stream after
 * the layer's attention, which the engine does not expose (ts_state.dbg_layers
 * holds the stream after whole layers). So, for each layer L, the sequence is
 * run again with L's routed and shared expert down projections replaced by
 * zeros: that layer's FFN then adds exactly 0, and the stream "after layer L"
 * is h. Router logits, softmax, top-k (ties to the lower index) are the CPU
 * backend's own (cpu/moe.c), always renormalised. As a check that this is
 * the engine's routing, the MoE output is recomputed from h with the chosen
 * experts and weights and h + moe(h) compared with the unmodified engine's
 * layer output.
 *
 * Output (text): "# moe-trace layers L experts E topk K tokens T", then one
 * line per (token, layer): "t l e_1 ... e_k". Depends on engine internals
 * (engine.h, model.h): bench code, rebuilt against the library of the day.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "engine/engine.h"

static uint64_t g_rng;
static double urand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static void swiglu(const ts_weight *g, const ts_weight *u, const ts_weight *d, const float *x, float *out) {
    float a[8192], b[8192];
    ts_linear(g, x, a, 1);
    ts_linear(u, x, b, 1);
    for (int64_t i = 0; i < g->rows; i++) a[i] = a[i] / (1.f + expf(-a[i])) * b[i];
    ts_linear(d, a, out, 1);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: trace_model MODEL_DIR OUT.trace [sequences] [tokens] [seed]\n"); return 2; }
    int nseq = argc > 3 ? atoi(argv[3]) : 8, T = argc > 4 ? atoi(argv[4]) : 256;
    g_rng = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
    if (!g_rng) g_rng = 1;
    ts_fp_begin();
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(argv[1], NULL, &e, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    ts_model *m = &e->model;
    const ts_config *c = &m->cfg;
    if (!c->is_moe) { fprintf(stderr, "%s: not a MoE model\n", argv[1]); return 1; }
    const int L = c->n_layers, H = c->H, E = c->E, K = c->topk, V = c->vocab;
    if (E > 1024 || K > 64 || c->Im > 8192 || c->Is > 8192) { fprintf(stderr, "shape too large for this tool\n"); return 1; }
    FILE *out = fopen(argv[2], "w");
    if (!out) { perror(argv[2]); return 1; }
    fprintf(out, "# moe-trace layers %d experts %d topk %d tokens %d model %s\n", L, E, K, nseq * T, argv[1]);
    const int P = 32;
    int32_t *ids = malloc(sizeof(int32_t) * T);
    float *x_true = malloc(sizeof(float) * (size_t)(L + 1) * T * H), *x_mod = malloc(sizeof(float) * (size_t)(L + 1) * T * H);
    float *u = malloc(sizeof(float) * H), *lg = malloc(sizeof(float) * E), *y = malloc(sizeof(float) * H), *eo = malloc(sizeof(float) * H);
    /* zero down projections: [H, Im] and [H, Is] f32 */
    float *zeros = calloc((size_t)H * (c->Im > c->Is ? c->Im : c->Is), sizeof(float));
    ts_weight *zd = calloc(E, sizeof(ts_weight));
    ts_weight zs = {0};
    for (int x = 0; x < E; x++) { zd[x].dtype = TS_DTYPE_F32; zd[x].rows = H; zd[x].cols = c->Im; zd[x].data = zeros; }
    zs.dtype = TS_DTYPE_F32; zs.rows = H; zs.cols = c->Is; zs.data = zeros;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = T + 8;
    sp.max_rows = T;
    double worst = 0;
    for (int q = 0; q < nseq; q++) {
        /* the sequence: random prompt, then sampled continuation */
        ts_session *s = NULL;
        if (ts_session_new(e, &sp, &s, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        for (int i = 0; i < P; i++) ids[i] = (int32_t)(urand() * V) % V;
        if (ts_session_feed(s, ids, P, NULL, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        for (int i = P; i < T; i++) {
            const float *l = ts_session_logits(s);
            float mx = -INFINITY;
            for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
            double z = 0;
            for (int v = 0; v < V; v++) z += exp(l[v] - mx);
            double r = urand() * z, acc = 0;
            int tok = V - 1;
            for (int v = 0; v < V; v++) { acc += exp(l[v] - mx); if (acc >= r) { tok = v; break; } }
            ids[i] = tok;
            if (i + 1 < T && ts_session_feed(s, ids + i, 1, NULL, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        }
        ts_session_free(s);
        /* the unmodified stream, one pass over the whole sequence */
        if (ts_session_new(e, &sp, &s, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        s->st.dbg_layers = x_true;
        if (ts_session_feed(s, ids, T, NULL, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        ts_session_free(s);
        int *sel = malloc(sizeof(int) * (size_t)L * T * K);
        for (int ly = 0; ly < L; ly++) {
            ts_ffn_w *f = &m->layers[ly].ffn, keep = *f;
            f->e_down = zd;
            f->s_down = zs;
            if (ts_session_new(e, &sp, &s, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            s->st.dbg_layers = x_mod;
            int rc = ts_session_feed(s, ids, T, NULL, NULL, &err);
            ts_session_free(s);
            *f = keep;
            if (rc) { fprintf(stderr, "%s\n", err.msg); return 1; }
            for (int t = 0; t < T; t++) {
                const float *h = x_mod + ((size_t)(ly + 1) * T + t) * H;
                ts_rmsnorm1p(h, m->layers[ly].post_norm, u, 1, H, c->eps);
                ts_linear(&f->router, u, lg, 1);
                int *st = sel + ((size_t)t * L + ly) * K;
                float w[64];
                ts_cpu_moe_route_row(lg, E, K, st, w); /* lg: scratch, softmaxed in place */
                ts_cpu_moe_route_norm(w, K);
                /* h + moe(h) against the engine's own layer output */
                for (int i = 0; i < H; i++) y[i] = 0;
                for (int j = 0; j < K; j++) {
                    swiglu(&f->e_gate[st[j]], &f->e_up[st[j]], &f->e_down[st[j]], u, eo);
                    for (int i = 0; i < H; i++) y[i] += w[j] * eo[i];
                }
                float gl;
                swiglu(&f->s_gate, &f->s_up, &f->s_down, u, eo);
                ts_linear(&f->s_gate_w, u, &gl, 1);
                float sg = 1.f / (1.f + expf(-gl));
                const float *xt = x_true + ((size_t)(ly + 1) * T + t) * H;
                double scale = 1e-6, d = 0;
                for (int i = 0; i < H; i++) {
                    double v = h[i] + y[i] + sg * eo[i];
                    scale = fmax(scale, fabs(xt[i]));
                    d = fmax(d, fabs(v - xt[i]));
                }
                worst = fmax(worst, d / scale);
            }
        }
        for (int t = 0; t < T; t++)
            for (int ly = 0; ly < L; ly++) {
                fprintf(out, "%d %d", q * T + t, ly);
                for (int j = 0; j < K; j++) fprintf(out, " %d", sel[((size_t)t * L + ly) * K + j]);
                fputc('\n', out);
            }
        free(sel);
        fprintf(stderr, "sequence %d/%d done\n", q + 1, nseq);
    }
    fclose(out);
    fprintf(stderr, "%s: %d tokens x %d layers; recomputed layer outputs vs the engine's: max relative error %.2e\n", argv[2], nseq * T, L,
            worst);
    ts_engine_close(e);
    return worst < 1e-3 ? 0 : 1;
}
