/* prefill.c: the prefill-only kernels behind kernels.h's "prefill kernels"
 * block: one chunk of the chunked delta rule, multi-row causal attention,
 * residual + RMSNorm, conv + SiLU; plain C references and the
 * dispatch to the AVX-512 versions (prefill_avx512.c).
 *
 * Does not own: the projections (matmul.c), the token recurrence
 * (ts_gdn_step), the model-level loops that call these (cpu/gdn.c,
 * model/qwen35.c).
 *
 * Decode and verify never reach this file, so nothing here has to match the
 * token path bit for bit; tests/test_prefill.c bounds the difference in the
 * logits (1e-3) and tests/test_kernels.c checks each AVX-512 kernel against
 * the reference here.
 *
 * The chunked delta rule. Within a chunk with start state S0 [dk, dv], let
 * G_t be the cumulative log decay (G_t = g_0 + ... + g_t, all g <= 0).
 * Unrolling the recurrence S_t = e^{g_t} S_{t-1} + k_t delta_t^T gives
 *   delta_t = beta_t (v_t - e^{G_t} S0^T k_t - sum_{s<t} e^{G_t-G_s} (k_s.k_t) delta_s)
 *   o_t     = e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t-G_s} (q_t.k_s) delta_s
 *   S_end   = e^{G_last} S0 + sum_s e^{G_last-G_s} k_s delta_s^T
 * The first line is the forward substitution that the UT/WY transform
 * writes as (I + A)^{-1} with A[t,s] = beta_t e^{G_t-G_s} k_t.k_s (s < t):
 * solved row by row instead of forming the inverse (same result, fewer
 * operations at these chunk sizes). S0 is read once per chunk for all rows
 * (S0^T K, S0^T Q as matrix products) and written once. G is summed in
 * double: over a chunk it reaches hundreds, where f32 would lose the small
 * differences G_t - G_s the decays need.
 */
#include <math.h>

#include "cpu/cpu.h"

static int use_avx512(void) { return ts_kmode() >= TS_KMODE_AVX512; }

/* ---- chunked delta rule ---- */

size_t ts_delta_chunk_ws(int L, int dk, int dv) {
    return (size_t)dk * L + 2 * (size_t)L * L + 2 * (size_t)L * dv;
}

void ts_delta_chunk_ref(float *S, const float *q, const float *k, const float *v, size_t ld, const float *g,
                        const float *beta, size_t ldg, float *o, size_t ldo, int L, int dk, int dv, float *ws) {
    float *KK = ws;                   /* [L, L] k_t . k_s */
    float *QK = KK + (size_t)L * L;   /* [L, L] q_t . k_s */
    float *Dl = QK + (size_t)L * L;   /* [L, dv] S0^T k_t, then delta_t */
    float *Tq = Dl + (size_t)L * dv;  /* [L, dv] S0^T q_t */
    double G[64];
    float eG[64];
    if (L <= 0 || L > 64) return; /* ts_delta_chunk splits longer runs */
    double acc = 0.0;
    for (int t = 0; t < L; t++) {
        acc += g[(size_t)t * ldg];
        G[t] = acc;
        eG[t] = (float)exp(acc);
    }
    for (int t = 0; t < L; t++) {
        const float *kt = k + (size_t)t * ld, *qt = q + (size_t)t * ld;
        for (int s = 0; s <= t; s++) {
            const float *ks = k + (size_t)s * ld;
            float kk = 0.f, qk = 0.f;
            for (int i = 0; i < dk; i++) { kk += kt[i] * ks[i]; qk += qt[i] * ks[i]; }
            KK[(size_t)t * L + s] = kk;
            QK[(size_t)t * L + s] = qk;
        }
    }
    memset(Dl, 0, sizeof(float) * (size_t)L * dv);
    memset(Tq, 0, sizeof(float) * (size_t)L * dv);
    for (int i = 0; i < dk; i++) {
        const float *Si = S + (size_t)i * dv;
        for (int t = 0; t < L; t++) {
            float kti = k[(size_t)t * ld + i], qti = q[(size_t)t * ld + i];
            float *dt = Dl + (size_t)t * dv, *tt = Tq + (size_t)t * dv;
            for (int j = 0; j < dv; j++) { dt[j] += Si[j] * kti; tt[j] += Si[j] * qti; }
        }
    }
    for (int t = 0; t < L; t++) {
        float *dt = Dl + (size_t)t * dv;
        const float *vt = v + (size_t)t * ld;
        const float bt = beta[(size_t)t * ldg];
        for (int j = 0; j < dv; j++) dt[j] = vt[j] - eG[t] * dt[j];
        for (int s = 0; s < t; s++) {
            float coef = (float)exp(G[t] - G[s]) * KK[(size_t)t * L + s];
            const float *ds = Dl + (size_t)s * dv;
            for (int j = 0; j < dv; j++) dt[j] -= coef * ds[j];
        }
        for (int j = 0; j < dv; j++) dt[j] *= bt;
        float *ot = o + (size_t)t * ldo;
        const float *tq = Tq + (size_t)t * dv;
        for (int j = 0; j < dv; j++) ot[j] = eG[t] * tq[j];
        for (int s = 0; s <= t; s++) {
            float coef = (float)exp(G[t] - G[s]) * QK[(size_t)t * L + s];
            const float *ds = Dl + (size_t)s * dv;
            for (int j = 0; j < dv; j++) ot[j] += coef * ds[j];
        }
    }
    const float eL = eG[L - 1];
    for (int s = 0; s < L; s++) {
        float ws_ = (float)exp(G[L - 1] - G[s]);
        float *ds = Dl + (size_t)s * dv;
        for (int j = 0; j < dv; j++) ds[j] *= ws_;
    }
    for (int i = 0; i < dk; i++) {
        float *Si = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) Si[j] *= eL;
        for (int s = 0; s < L; s++) {
            float ksi = k[(size_t)s * ld + i];
            const float *ds = Dl + (size_t)s * dv;
            for (int j = 0; j < dv; j++) Si[j] += ksi * ds[j];
        }
    }
}

void ts_delta_chunk(float *S, const float *q, const float *k, const float *v, size_t ld, const float *g,
                    const float *beta, size_t ldg, float *o, size_t ldo, int L, int dk, int dv, float *ws) {
    /* more than 64 rows: consecutive chunks of 64 (the kernels' G arrays and
     * the workspace are sized for that) */
    for (int t0 = 0; t0 < L; t0 += 64) {
        const int l = TS_MIN(64, L - t0);
        const size_t r = (size_t)t0;
        if (use_avx512())
            ts_avx512_delta_chunk(S, q + r * ld, k + r * ld, v + r * ld, ld, g + r * ldg, beta + r * ldg, ldg, o + r * ldo,
                                  ldo, l, dk, dv, ws);
        else
            ts_delta_chunk_ref(S, q + r * ld, k + r * ld, v + r * ld, ld, g + r * ldg, beta + r * ldg, ldg, o + r * ldo, ldo,
                               l, dk, dv, ws);
    }
}

/* ---- multi-row causal attention ---- */

/* One row at a time with the online softmax: running max m, running sum l,
 * output rescaled by e^{m_old - m_new} when the max grows. */
void ts_attn_chunk_ref(const float *q, size_t ldq, const float *k, const float *v, size_t ldkv, float *o, size_t ldo,
                       int n, int pos, int D, float scale) {
    for (int i = 0; i < n; i++) {
        const float *qi = q + (size_t)i * ldq;
        float *oi = o + (size_t)i * ldo;
        float m = -INFINITY, l = 0.f;
        for (int d = 0; d < D; d++) oi[d] = 0.f;
        for (int t = 0; t <= pos + i; t++) {
            const float *kt = k + (size_t)t * ldkv, *vt = v + (size_t)t * ldkv;
            float s = 0.f;
            for (int d = 0; d < D; d++) s += qi[d] * kt[d];
            s *= scale;
            if (s > m) {
                float a = expf(m - s);
                for (int d = 0; d < D; d++) oi[d] *= a;
                l *= a;
                m = s;
            }
            float p = expf(s - m);
            l += p;
            for (int d = 0; d < D; d++) oi[d] += p * vt[d];
        }
        float inv = 1.0f / l;
        for (int d = 0; d < D; d++) oi[d] *= inv;
    }
}

void ts_attn_chunk(const float *q, size_t ldq, const float *k, const float *v, size_t ldkv, float *o, size_t ldo, int n,
                   int pos, int D, float scale) {
    if (use_avx512() && D <= TS_ATTN_MAX_D) ts_avx512_attn_chunk(q, ldq, k, v, ldkv, o, ldo, n, pos, D, scale);
    else ts_attn_chunk_ref(q, ldq, k, v, ldkv, o, ldo, n, pos, D, scale);
}

/* ---- residual add + RMSNorm, conv + SiLU ---- */

void ts_add_rmsnorm(float *x, const float *add, const float *w, float *y, int n, int dim, float eps) {
    if (use_avx512()) { ts_avx512_add_rmsnorm(x, add, w, y, n, dim, eps); return; }
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * dim, *yi = y + (size_t)i * dim;
        if (add)
            for (int j = 0; j < dim; j++) xi[j] += add[(size_t)i * dim + j];
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        float r = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int j = 0; j < dim; j++) yi[j] = xi[j] * r * w[j];
    }
}

void ts_conv_silu(const float *x, size_t ldx, const float *state, size_t lds, const float *w, size_t ldw, int K,
                  float *out, size_t ldo, int n, int nc) {
    if (use_avx512() && K <= 8) { ts_avx512_conv_silu(x, ldx, state, lds, w, ldw, K, out, ldo, n, nc); return; }
    for (int i = 0; i < n; i++) {
        float *oi = out + (size_t)i * ldo;
        for (int c = 0; c < nc; c++) {
            float acc = 0.f;
            for (int t = 0; t < K; t++) {
                int r = i - (K - 1) + t;
                float v = r >= 0 ? x[(size_t)r * ldx + c] : state[(size_t)(K - 1 + r) * lds + c];
                acc += w[(size_t)t * ldw + c] * v;
            }
            oi[c] = acc / (1.0f + expf(-acc));
        }
    }
}
