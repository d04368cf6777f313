/* chunked.c: one GDN layer's state advance over a prompt chunk, with the
 * chunked delta rule, for prefill only (model-spec.md §2.3 step 7 and §6.2).
 *
 * Owns: ts_gdn_chunked, which advances one GDN layer over n rows in two
 * parallel passes over the kernel threads (ts_parallel_for; one fused pass
 * when Hv == Hk, as in the 0.8B shape: no head waits for another):
 *   1. per key head (its q and k channels) and per value head (its v
 *      channels): the causal conv + SiLU of those channels for all rows,
 *      the conv state update of those channels, the l2 norms of the key
 *      head's q and k rows, the value head's decay and beta;
 *   2. per value head: chunks of up to TS_DELTA_CHUNK rows through
 *      ts_delta_chunk (kernels.h; the algebra is in src/cpu/prefill.c), the
 *      chunks in order, then the gated RMSNorm of that head's outputs.
 * Heads are independent in both passes, so the result does not depend on
 * the thread count or on which thread ran which head.
 * Does not own: the projections (qwen35.c), verify and decode (they keep the
 * token recurrence, ts_gdn_advance, which is the reference this file is
 * tested against in tests/test_prefill.c).
 *
 * Workspace: pass 2 gives each of TS_DELTA_SLOTS work items its own slice of
 * sc->pf_chunk (ts_delta_chunk_ws floats); item i runs heads i, i + slots, ...
 * Rounding differs from the token recurrence (decays as exp of sums, FMAs,
 * the prefill SiLU): prefill only, within the 1e-3 logits tolerance.
 *
 * Layouts as in ts_gdn_advance: state [Hv, dk, dv]; value head h reads key
 * head h / (Hv / Hk).
 */
#include <math.h>

#include "model/model.h"
#include "engine/plan.h"

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

typedef struct gdn_job {
    const ts_model *m;
    const ts_gdn_w *w;
    ts_gdn_state *s;
    ts_scratch *sc;
    const float *qkv, *a, *b;
    float *z, *o;
    int n;
} gdn_job;

/* Causal conv + SiLU of channels [c0, c0 + nc) over n rows, then those
 * channels' conv state takes the last K-1 inputs. */
static void conv_channels(const gdn_job *j, int c0, int nc) {
    const ts_model *m = j->m;
    const int C = m->C, K = m->cfg.conv_k, n = j->n;
    const float *qkv = j->qkv;
    ts_conv_silu(qkv + c0, C, j->s->conv + c0, C, j->w->conv + c0, C, K, j->sc->pf_conv + c0, C, n, nc);
    if (K > 1) {
        /* new state = last K-1 rows of [old state ; inputs]; increasing t
         * reads increasing rows, so shifting the old state down in place is safe */
        float *sw = j->s->conv;
        for (int t = 0; t < K - 1; t++) {
            int src = n - (K - 1) + t;
            float *dst = sw + (size_t)t * C + c0;
            if (src < 0) memmove(dst, sw + (size_t)(K - 1 + src) * C + c0, sizeof(float) * nc);
            else memcpy(dst, qkv + (size_t)src * C + c0, sizeof(float) * nc);
        }
    }
}

/* x_i *= scale / sqrt(|x_i|^2 + 1e-6) for n rows of d at stride ld, as the
 * vectorised RMSNorm: 1/sqrt(ss + e) = d^-1/2 / sqrt(ss/d + e/d), so the
 * norm with eps e/d and a constant weight scale/sqrt(d) is the same map. */
static void l2norm_rows(float *x, size_t ld, int n, int d, float scale) {
    float w[1024];
    if (d > 1024) {
        for (int i = 0; i < n; i++) {
            float *xi = x + (size_t)i * ld;
            double ss = 0;
            for (int t = 0; t < d; t++) ss += (double)xi[t] * xi[t];
            float r = 1.0f / sqrtf((float)ss + 1e-6f) * scale;
            for (int t = 0; t < d; t++) xi[t] *= r;
        }
        return;
    }
    for (int t = 0; t < d; t++) w[t] = scale / sqrtf((float)d);
    for (int i = 0; i < n; i++) ts_add_rmsnorm(x + (size_t)i * ld, NULL, w, x + (size_t)i * ld, 1, d, 1e-6f / (float)d);
}

/* The conv, l2 norms of key head h's q and k channels. */
static void key_head(const gdn_job *j, int h) {
    const ts_model *m = j->m;
    const int C = m->C, dk = m->cfg.dk;
    float *x = j->sc->pf_conv;
    conv_channels(j, h * dk, dk);
    conv_channels(j, m->Kd + h * dk, dk);
    l2norm_rows(x + (size_t)h * dk, C, j->n, dk, 1.0f / sqrtf((float)dk));
    l2norm_rows(x + m->Kd + (size_t)h * dk, C, j->n, dk, 1.0f);
}

/* The conv of value head h's v channels, its log decay g and beta. */
static void value_head(const gdn_job *j, int h) {
    const ts_model *m = j->m;
    const int Hv = m->cfg.Hv, n = j->n;
    conv_channels(j, 2 * m->Kd + h * m->cfg.dv, m->cfg.dv);
    float *g = j->sc->pf_gate, *beta = j->sc->pf_gate + (size_t)n * Hv;
    for (int i = 0; i < n; i++) {
        g[(size_t)i * Hv + h] = j->w->neg_A[h] * softplus(j->a[(size_t)i * Hv + h] + j->w->dt_bias[h]);
        beta[(size_t)i * Hv + h] = sigmoid(j->b[(size_t)i * Hv + h]);
    }
}

/* The delta rule of value head h over the rows (chunks in order), then its
 * gated RMSNorm (plain weight, norm before the silu(z) gate). */
static void delta_head(const gdn_job *j, int h, float *ws) {
    const ts_model *m = j->m;
    const ts_config *c = &m->cfg;
    const int C = m->C, dk = c->dk, dv = c->dv, Hv = c->Hv, r = Hv / c->Hk, n = j->n;
    const float *x = j->sc->pf_conv, *g = j->sc->pf_gate, *beta = j->sc->pf_gate + (size_t)n * Hv;
    float *S = j->s->S + (size_t)h * dk * dv;
    const float *q = x + (size_t)(h / r) * dk, *k = x + m->Kd + (size_t)(h / r) * dk, *v = x + 2 * (size_t)m->Kd + (size_t)h * dv;
    for (int c0 = 0; c0 < n; c0 += TS_DELTA_CHUNK) {
        const int L = TS_MIN(TS_DELTA_CHUNK, n - c0);
        const size_t off = (size_t)c0 * C;
        ts_delta_chunk(S, q + off, k + off, v + off, C, g + (size_t)c0 * Hv + h, beta + (size_t)c0 * Hv + h, Hv,
                       j->o + (size_t)c0 * m->Vd + (size_t)h * dv, m->Vd, L, dk, dv, ws);
    }
    for (int i = 0; i < n; i++) {
        float *oh = j->o + (size_t)i * m->Vd + (size_t)h * dv;
        float *zh = j->z + (size_t)i * m->Vd + (size_t)h * dv; /* scratch: overwritten */
        ts_add_rmsnorm(oh, NULL, j->w->norm, oh, 1, dv, c->eps);
        ts_silu_mul(zh, oh, (size_t)dv);
        memcpy(oh, zh, sizeof(float) * (size_t)dv);
    }
}

static float *slot_ws(const gdn_job *j, int item) {
    return j->sc->pf_chunk + (size_t)item * ts_delta_chunk_ws(TS_DELTA_CHUNK, j->m->cfg.dk, j->m->cfg.dv);
}

/* Two passes (value heads share key heads): item < Hk is key head item,
 * else value head item - Hk; then the delta rule per work item. */
static void pass_conv(void *ctx, int item, int n_items) {
    const gdn_job *j = ctx;
    (void)n_items;
    if (item < j->m->cfg.Hk) key_head(j, item);
    else value_head(j, item - j->m->cfg.Hk);
}

static void pass_delta(void *ctx, int item, int n_items) {
    const gdn_job *j = ctx;
    for (int h = item; h < j->m->cfg.Hv; h += n_items) delta_head(j, h, slot_ws(j, item));
}

/* One pass when every value head has its own key head (Hv == Hk): a head's
 * conv, norms, delta rule and gated norm in one go, its rows still in cache. */
static void pass_fused(void *ctx, int item, int n_items) {
    const gdn_job *j = ctx;
    for (int h = item; h < j->m->cfg.Hv; h += n_items) {
        key_head(j, h);
        value_head(j, h);
        delta_head(j, h, slot_ws(j, item));
    }
}

int ts_gdn_chunk_slots(const ts_config *c) { return TS_MIN(c->Hv, TS_DELTA_SLOTS); }

void ts_gdn_chunked(const ts_model *m, const ts_gdn_w *w, ts_gdn_state *gs, ts_scratch *sc, const float *qkv,
                    const float *a, const float *b, float *z, float *o, int n) {
    gdn_job j = {m, w, gs, sc, qkv, a, b, z, o, n};
    if (m->cfg.Hv == m->cfg.Hk) {
        ts_parallel_for(ts_gdn_chunk_slots(&m->cfg), pass_fused, &j);
        return;
    }
    ts_parallel_for(m->cfg.Hk + m->cfg.Hv, pass_conv, &j);
    ts_parallel_for(ts_gdn_chunk_slots(&m->cfg), pass_delta, &j);
}
