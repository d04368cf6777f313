/* chunked.c: the chunked form of the gated delta rule, for prefill only
 * (model-spec.md §2.3 step 7 and §6.2).
 *
 * Owns: ts_gdn_chunked, which advances one GDN layer over n rows: the causal
 * conv + SiLU and l2 norms for all rows, then, per value head, chunks of up
 * to TS_DELTA_CHUNK rows solved with matrix products, the chunks in order.
 * Does not own: the projections and the gated norm (qwen35.c), verify and
 * decode (they keep the token recurrence, ts_gdn_advance, which is the
 * reference this file is tested against in tests/test_prefill.c).
 *
 * The algebra. Within a chunk with start state S0 [dk, dv], let G_t be the
 * cumulative log decay (G_t = g_0 + ... + g_t, all g <= 0). Unrolling the
 * recurrence S_t = e^{g_t} S_{t-1} + k_t delta_t^T gives
 *   delta_t = beta_t (v_t - e^{G_t} S0^T k_t - sum_{s<t} e^{G_t-G_s} (k_s.k_t) delta_s)
 *   o_t     = e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t-G_s} (q_t.k_s) delta_s
 *   S_end   = e^{G_last} S0 + sum_s e^{G_last-G_s} k_s delta_s^T
 * The first line is the forward substitution that the UT/WY transform
 * writes as (I + A)^{-1} with A[t,s] = beta_t e^{G_t-G_s} k_t.k_s (s < t):
 * solved row by row here instead of forming the inverse (same result, fewer
 * operations at these chunk sizes). S0 is read once per chunk for all rows
 * (S0^T K, S0^T Q as matrix products) instead of once per row, and written
 * once. Rounding differs from the token recurrence (products of decays are
 * formed as exp of sums): prefill only, within the 1e-3 logits tolerance.
 *
 * Layouts as in ts_gdn_advance: state [Hv, dk, dv]; value head h reads key
 * head h / (Hv / Hk).
 */
#include <math.h>

#include "model/model.h"
#include "plan.h"

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* Conv + SiLU over n rows, in the order and with the sums of
 * ts_gdn_advance, then the conv state takes the last K-1 inputs. */
static void conv_rows(const ts_model *m, const ts_gdn_w *w, ts_gdn_state *s, const float *qkv, float *out, int n) {
    const int C = m->C, K = m->cfg.conv_k;
    for (int i = 0; i < n; i++) {
        float *oi = out + (size_t)i * C;
        const float *xi = qkv + (size_t)i * C;
        for (int ch = 0; ch < C; ch++) {
            const float *cw = w->conv + (size_t)ch * K;
            float acc = 0.f;
            for (int j = 0; j < K - 1; j++) {
                int src = i - (K - 1) + j; /* row index; < 0 reads the conv state */
                float x = src >= 0 ? qkv[(size_t)src * C + ch] : s->conv[(size_t)(K - 1 + src) * C + ch];
                acc += cw[j] * x;
            }
            acc += cw[K - 1] * xi[ch];
            oi[ch] = silu(acc);
        }
    }
    if (K > 1) {
        /* new state = last K-1 rows of [old state ; inputs] */
        for (int j = 0; j < K - 1; j++) {
            int src = n - (K - 1) + j;
            if (src >= 0) continue;
            /* still from the old state: shift it down first (increasing j reads increasing rows) */
            memmove(s->conv + (size_t)j * C, s->conv + (size_t)(K - 1 + src) * C, sizeof(float) * C);
        }
        for (int j = 0; j < K - 1; j++) {
            int src = n - (K - 1) + j;
            if (src >= 0) memcpy(s->conv + (size_t)j * C, qkv + (size_t)src * C, sizeof(float) * C);
        }
    }
}

void ts_gdn_chunked(const ts_model *m, const ts_gdn_w *w, ts_gdn_state *gs, ts_scratch *sc, const float *qkv,
                    const float *a, const float *b, float *o, int n) {
    const ts_config *c = &m->cfg;
    const int C = m->C, dk = c->dk, dv = c->dv, Hv = c->Hv, Hk = c->Hk, r = Hv / Hk;
    float *x = sc->pf_conv;                         /* [n, C] conv outputs: q | k | v */
    float *g = sc->pf_gate, *beta = sc->pf_gate + (size_t)n * Hv; /* [n, Hv] each */
    const int CH = TS_DELTA_CHUNK;
    float *KK = sc->pf_chunk;                       /* [CH, CH] k_t . k_s */
    float *QK = KK + (size_t)CH * CH;               /* [CH, CH] q_t . k_s */
    float *Dl = QK + (size_t)CH * CH;               /* [CH, dv] S0^T k_t, then delta_t */
    float *Tq = Dl + (size_t)CH * dv;               /* [CH, dv] S0^T q_t */
    /* cumulative log decays in double: over a chunk they reach hundreds, where
     * f32 would lose the small differences G_t - G_s that the decays need */
    double G[TS_DELTA_CHUNK];
    float eG[TS_DELTA_CHUNK];

    conv_rows(m, w, gs, qkv, x, n);
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * C;
        for (int h = 0; h < Hk; h++) {
            float *qh = xi + (size_t)h * dk, *kh = xi + m->Kd + (size_t)h * dk;
            double sq = 0, sk = 0;
            for (int t = 0; t < dk; t++) { sq += (double)qh[t] * qh[t]; sk += (double)kh[t] * kh[t]; }
            float rq = 1.0f / sqrtf((float)sq + 1e-6f), rk = 1.0f / sqrtf((float)sk + 1e-6f);
            for (int t = 0; t < dk; t++) { qh[t] = qh[t] * rq * qscale; kh[t] *= rk; }
        }
        for (int h = 0; h < Hv; h++) {
            g[(size_t)i * Hv + h] = w->neg_A[h] * softplus(a[(size_t)i * Hv + h] + w->dt_bias[h]);
            beta[(size_t)i * Hv + h] = sigmoid(b[(size_t)i * Hv + h]);
        }
    }
#define QROW(t) (x + (size_t)(c0 + (t)) * C + (size_t)(h / r) * dk)
#define KROW(t) (x + (size_t)(c0 + (t)) * C + m->Kd + (size_t)(h / r) * dk)
#define VROW(t) (x + (size_t)(c0 + (t)) * C + 2 * (size_t)m->Kd + (size_t)h * dv)
    for (int h = 0; h < Hv; h++) {
        float *S = gs->S + (size_t)h * dk * dv;
        for (int c0 = 0; c0 < n; c0 += CH) {
            const int L = TS_MIN(CH, n - c0);
            double acc = 0.0;
            for (int t = 0; t < L; t++) {
                acc += g[(size_t)(c0 + t) * Hv + h];
                G[t] = acc;
                eG[t] = (float)exp(acc);
            }
            /* inner products within the chunk */
            for (int t = 0; t < L; t++) {
                const float *kt = KROW(t), *qt = QROW(t);
                for (int s = 0; s <= t; s++) {
                    const float *ks = KROW(s);
                    float kk = 0.f, qk = 0.f;
                    for (int i = 0; i < dk; i++) { kk += kt[i] * ks[i]; qk += qt[i] * ks[i]; }
                    KK[(size_t)t * CH + s] = kk;
                    QK[(size_t)t * CH + s] = qk;
                }
            }
            /* S0^T k_t and S0^T q_t for all rows: one pass over S0 */
            memset(Dl, 0, sizeof(float) * (size_t)L * dv);
            memset(Tq, 0, sizeof(float) * (size_t)L * dv);
            for (int i = 0; i < dk; i++) {
                const float *Si = S + (size_t)i * dv;
                for (int t = 0; t < L; t++) {
                    float kti = KROW(t)[i], qti = QROW(t)[i];
                    float *dt = Dl + (size_t)t * dv, *tt = Tq + (size_t)t * dv;
                    for (int j = 0; j < dv; j++) { dt[j] += Si[j] * kti; tt[j] += Si[j] * qti; }
                }
            }
            /* forward substitution for delta, then the outputs */
            for (int t = 0; t < L; t++) {
                float *dt = Dl + (size_t)t * dv;
                const float *vt = VROW(t);
                const float bt = beta[(size_t)(c0 + t) * Hv + h];
                for (int j = 0; j < dv; j++) dt[j] = vt[j] - eG[t] * dt[j];
                for (int s = 0; s < t; s++) {
                    float coef = (float)exp(G[t] - G[s]) * KK[(size_t)t * CH + s];
                    const float *ds = Dl + (size_t)s * dv;
                    for (int j = 0; j < dv; j++) dt[j] -= coef * ds[j];
                }
                for (int j = 0; j < dv; j++) dt[j] *= bt;
                float *ot = o + (size_t)(c0 + t) * m->Vd + (size_t)h * dv;
                const float *tq = Tq + (size_t)t * dv;
                for (int j = 0; j < dv; j++) ot[j] = eG[t] * tq[j];
                for (int s = 0; s <= t; s++) {
                    float coef = (float)exp(G[t] - G[s]) * QK[(size_t)t * CH + s];
                    const float *ds = Dl + (size_t)s * dv;
                    for (int j = 0; j < dv; j++) ot[j] += coef * ds[j];
                }
            }
            /* state at the chunk end */
            const float eL = eG[L - 1];
            for (int s = 0; s < L; s++) {
                float ws = (float)exp(G[L - 1] - G[s]);
                float *ds = Dl + (size_t)s * dv;
                for (int j = 0; j < dv; j++) ds[j] *= ws;
            }
            for (int i = 0; i < dk; i++) {
                float *Si = S + (size_t)i * dv;
                for (int j = 0; j < dv; j++) Si[j] *= eL;
                for (int s = 0; s < L; s++) {
                    float ksi = KROW(s)[i];
                    const float *ds = Dl + (size_t)s * dv;
                    for (int j = 0; j < dv; j++) Si[j] += ksi * ds[j];
                }
            }
        }
    }
#undef QROW
#undef KROW
#undef VROW
}
