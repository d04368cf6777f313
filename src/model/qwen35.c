/* qwen35.c: the Qwen3.5 forward pass on f32 activations (model-spec.md §2).
 *
 * Rows are processed in blocks of n <= R: projections are matrix products
 * over all n rows; the GDN recurrence, the conv and attention walk the rows
 * in order, so a block of n rows gives the same result as n one-row calls
 * (bit for bit when `prefill` is 0: ts_linear is row-exact). That property
 * is what speculative verification stands on. With `prefill` 1 the GDN
 * layers use the chunked delta rule instead (chunked.c; rounding differs),
 * and a verify pass records the GDN tape (model.h, ts_gdn_tape).
 *
 * Precision: weights as stored (bf16/f16/f32, or dequantized), f32
 * everywhere else, f32 recurrent state. Norms accumulate in double, which
 * keeps them within f32 rounding of transformers' f32 reductions.
 */
#include <math.h>

#include "model/model.h"

typedef void (*linear_fn)(const ts_weight *, const float *, float *, int);

static int lin_flags(linear_fn lin) { return lin == ts_linear_prefill ? 1 : lin == ts_linear_draft ? 2 : 0; }

/* Products of one x by several weights (one parallel region; same bits). */
static void lin_many(linear_fn lin, const ts_weight *const *w, int nw, const float *x, float *const *y, int n) {
    ts_linear_many(w, nw, x, y, n, lin_flags(lin));
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus with its default threshold 20 */
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void ts_rmsnorm1p(const float *x, const float *w1p, float *y, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *yi = y + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        float r = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int j = 0; j < dim; j++) yi[j] = xi[j] * r * w1p[j];
    }
}

/* NeoX rotate-half RoPE on the first rot dims of one head, in place. For
 * text, the interleaved M-RoPE of Qwen3.5 reduces to this (all three axes
 * carry the token index). inv_freq and the angle are formed in f32 as
 * transformers does. */
static void rope_head(float *x, int rot, int pos, double theta) {
    int half = rot / 2;
    for (int j = 0; j < half; j++) {
        float inv = 1.0f / powf((float)theta, (float)(2 * j) / (float)rot);
        float a = (float)pos * inv;
        float c = cosf(a), s = sinf(a);
        float x0 = x[j], x1 = x[j + half];
        x[j] = x0 * c - x1 * s;
        x[j + half] = x1 * c + x0 * s;
    }
}

/* RoPE of one row's heads: nh heads of D at x + h * hstride, with the
 * angles formed once for the row (the same expressions as rope_head). */
static void rope_row(float *x, int nh, size_t hstride, int rot, int pos, double theta) {
    float cs[512], sn[512];
    const int half = rot / 2;
    for (int j = 0; j < half; j++) {
        float inv = 1.0f / powf((float)theta, (float)(2 * j) / (float)rot);
        float a = (float)pos * inv;
        cs[j] = cosf(a);
        sn[j] = sinf(a);
    }
    for (int h = 0; h < nh; h++) {
        float *xh = x + (size_t)h * hstride;
        for (int j = 0; j < half; j++) {
            float x0 = xh[j], x1 = xh[j + half];
            xh[j] = x0 * cs[j] - x1 * sn[j];
            xh[j + half] = x1 * cs[j] + x0 * sn[j];
        }
    }
}

/* ---- gated attention ---- */

typedef struct attn_job {
    const ts_model *m;
    const float *qg; /* [n, nq, 2D] */
    const ts_kv *kv;
    float *out;      /* [n, nq*D] */
    int n, pos;
} attn_job;

/* Prefill: one query head over all n rows (multi-row causal attention),
 * then its output gate. */
static void attn_head(void *ctx, int h, int nh) {
    const attn_job *j = ctx;
    const ts_model *m = j->m;
    const int D = m->D, grp = m->cfg.nq / m->cfg.nkv, kh = h / grp;
    (void)nh;
    const size_t ldq = (size_t)2 * m->qdim;
    ts_attn_chunk(j->qg + (size_t)h * 2 * D, ldq, j->kv->k + (size_t)kh * D, j->kv->v + (size_t)kh * D, m->kvdim,
                 j->out + (size_t)h * D, m->qdim, j->n, j->pos, D, 1.0f / sqrtf((float)D));
    for (int i = 0; i < j->n; i++) {
        const float *gate = j->qg + (size_t)i * ldq + (size_t)h * 2 * D + D;
        float *o = j->out + (size_t)i * m->qdim + (size_t)h * D;
        for (int d = 0; d < D; d++) o[d] *= sigmoid(gate[d]);
    }
}

/* The prefill form of the attention block after the projections: norms
 * (vectorised) and RoPE row by row (angles once per row), the rows' K/V into the cache, then
 * the heads in parallel. Rounding differs from the token path (online
 * softmax, FMAs). */
static void attn_prefill(const ts_model *m, ts_scratch *sc, const ts_attn_w *w, ts_kv *kv, float *qg, float *kb,
                         const float *vb, int n, int pos) {
    const ts_config *c = &m->cfg;
    const int D = m->D, nq = c->nq, nkv = c->nkv;
    for (int i = 0; i < n; i++) {
        float *qi = qg + (size_t)i * nq * 2 * D, *ki = kb + (size_t)i * m->kvdim;
        for (int h = 0; h < nq; h++) ts_add_rmsnorm(qi + (size_t)h * 2 * D, NULL, w->q_norm, qi + (size_t)h * 2 * D, 1, D, c->eps);
        ts_add_rmsnorm(ki, NULL, w->k_norm, ki, nkv, D, c->eps);
        rope_row(qi, nq, (size_t)2 * D, c->rot_dim, pos + i, c->rope_theta);
        rope_row(ki, nkv, (size_t)D, c->rot_dim, pos + i, c->rope_theta);
    }
    memcpy(kv->k + (size_t)pos * m->kvdim, kb, sizeof(float) * (size_t)n * m->kvdim);
    memcpy(kv->v + (size_t)pos * m->kvdim, vb, sizeof(float) * (size_t)n * m->kvdim);
    attn_job j = {m, qg, kv, sc->big2, n, pos};
    ts_parallel_for(nq, attn_head, &j);
}

static void attn_block(const ts_model *m, ts_state *st, const ts_attn_w *w, ts_kv *kv, int n, int pos,
                       linear_fn lin) {
    const ts_config *c = &m->cfg;
    ts_scratch *sc = &st->sc;
    const int D = m->D, nq = c->nq, nkv = c->nkv, grp = nq / nkv;
    float *qg = sc->big0;  /* [n, nq, 2D]: query | gate per head */
    float *kb = sc->big1;  /* [n, nkv*D] */
    float *vb = sc->big2;  /* [n, nkv*D] */
    lin_many(lin, (const ts_weight *[]){&w->q_proj, &w->k_proj, &w->v_proj}, 3, sc->u, (float *[]){qg, kb, vb}, n);
    if (lin == ts_linear_prefill && n > 1 && c->rot_dim <= 1024) {
        attn_prefill(m, sc, w, kv, qg, kb, vb, n, pos);
        lin(&w->o_proj, sc->big2, sc->t, n);
        return;
    }
    for (int i = 0; i < n; i++) {
        for (int h = 0; h < nq; h++) {
            float *q = qg + ((size_t)i * nq + h) * 2 * D;
            ts_rmsnorm1p(q, w->q_norm, q, 1, D, c->eps);
            rope_head(q, c->rot_dim, pos + i, c->rope_theta);
        }
        for (int h = 0; h < nkv; h++) {
            float *k = kb + ((size_t)i * nkv + h) * D;
            ts_rmsnorm1p(k, w->k_norm, k, 1, D, c->eps);
            rope_head(k, c->rot_dim, pos + i, c->rope_theta);
        }
        memcpy(kv->k + (size_t)(pos + i) * m->kvdim, kb + (size_t)i * m->kvdim, sizeof(float) * m->kvdim);
        memcpy(kv->v + (size_t)(pos + i) * m->kvdim, vb + (size_t)i * m->kvdim, sizeof(float) * m->kvdim);
    }
    /* Causal attention, one row and head at a time; output [n, nq*D] in big2
     * (the V rows are in the cache now). */
    float *out = sc->big2;
    const float scale = 1.0f / sqrtf((float)D);
    for (int i = 0; i < n; i++) {
        int T = pos + i + 1;
        for (int h = 0; h < nq; h++) {
            const float *q = qg + ((size_t)i * nq + h) * 2 * D;
            const float *gate = q + D;
            int kh = h / grp;
            float *o = out + (size_t)i * m->qdim + (size_t)h * D;
            ts_attn_row(q, kv->k + (size_t)kh * D, kv->v + (size_t)kh * D, m->kvdim, T, D, scale, sc->att, o);
            for (int d = 0; d < D; d++) o[d] *= sigmoid(gate[d]);
        }
    }
    lin(&w->o_proj, out, sc->t, n);
}

/* ---- Gated DeltaNet ---- */

void ts_gdn_advance(const ts_model *m, const ts_gdn_w *w, ts_gdn_state *s, const float *qkv_in,
                    const float *a, const float *b, float *o, float *tmp) {
    ts_gdn_advance_from(m, w, s, s->S, qkv_in, a, b, o, tmp);
}

typedef struct gdn_heads_job {
    const ts_model *m;
    const ts_gdn_w *w;
    ts_gdn_state *s;
    const float *S_src, *q, *k, *v, *a, *b;
    float *o;
} gdn_heads_job;

/* One value head's step of ts_gdn_advance_from. */
static void gdn_head(void *ctx, int h, int nh) {
    const gdn_heads_job *j = ctx;
    const ts_config *c = &j->m->cfg;
    const int dk = c->dk, dv = c->dv, r = c->Hv / c->Hk;
    (void)nh;
    const float *qh = j->q + (size_t)(h / r) * dk, *kh = j->k + (size_t)(h / r) * dk;
    const float *vh = j->v + (size_t)h * dv;
    float beta = sigmoid(j->b[h]);
    float decay = expf(j->w->neg_A[h] * softplus(j->a[h] + j->w->dt_bias[h]));
    float *S = j->s->S + (size_t)h * dk * dv; /* [dk, dv] */
    /* one head's state (dk*dv floats) at a time: it stays in cache for the step */
    if (j->S_src != j->s->S) memcpy(S, j->S_src + (size_t)h * dk * dv, sizeof(float) * (size_t)dk * dv);
    ts_gdn_step(S, kh, vh, qh, decay, beta, j->o ? j->o + (size_t)h * dv : NULL, dk, dv);
}

/* The state advance with the recurrent state read from S_src (== s->S for
 * the in-place step) and written to s->S. Each head's slice is brought over
 * just before its step, so it is still in cache when the step runs: one
 * pass over memory instead of a whole-state memcpy followed by the step.
 * The arithmetic is the in-place step's, so the result is the same bits.
 * Speculative verify and rollback use it to start from the block-start
 * snapshot without copying the state back first. */
void ts_gdn_advance_from(const ts_model *m, const ts_gdn_w *w, ts_gdn_state *s, const float *S_src,
                         const float *qkv_in, const float *a, const float *b, float *o, float *tmp) {
    const ts_config *c = &m->cfg;
    const int C = m->C, K = c->conv_k, dk = c->dk, dv = c->dv, Hv = c->Hv;
    /* causal depthwise conv over [last K-1 inputs, this input], then SiLU */
    for (int ch = 0; ch < C; ch++) {
        const float *cw = w->conv + (size_t)ch * K;
        float acc = 0.f;
        for (int j = 0; j < K - 1; j++) acc += cw[j] * s->conv[(size_t)j * C + ch];
        acc += cw[K - 1] * qkv_in[ch];
        tmp[ch] = acc;
    }
    ts_silu(tmp, tmp, (size_t)C);
    if (K > 1) {
        memmove(s->conv, s->conv + C, sizeof(float) * (size_t)(K - 2) * C);
        memcpy(s->conv + (size_t)(K - 2) * C, qkv_in, sizeof(float) * C);
    }
    float *q = tmp, *k = tmp + m->Kd, *v = tmp + 2 * m->Kd;
    /* l2-normalise q and k per key head (eps inside the rsqrt), scale q */
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int h = 0; h < c->Hk; h++) {
        float *qh = q + (size_t)h * dk, *kh = k + (size_t)h * dk;
        double sq = 0, sk = 0;
        for (int i = 0; i < dk; i++) { sq += (double)qh[i] * qh[i]; sk += (double)kh[i] * kh[i]; }
        float rq = 1.0f / sqrtf((float)sq + 1e-6f), rk = 1.0f / sqrtf((float)sk + 1e-6f);
        for (int i = 0; i < dk; i++) { qh[i] = qh[i] * rq * qscale; kh[i] *= rk; }
    }
    gdn_heads_job j = {m, w, s, S_src, q, k, v, a, b, o};
    /* the heads' states are independent: spread them over the pool when the
     * state is large enough to pay for the wake-up (per head the arithmetic
     * is the same whichever thread runs it: bit-identical results) */
    if ((size_t)Hv * dk * dv >= 65536) ts_parallel_for(Hv, gdn_head, &j);
    else
        for (int h = 0; h < Hv; h++) gdn_head(&j, h, Hv);
}

static void gdn_block(const ts_model *m, ts_state *st, const ts_gdn_w *w, ts_gdn_state *gs, ts_gdn_tape *tp,
                      int n, linear_fn lin) {
    const ts_config *c = &m->cfg;
    ts_scratch *sc = &st->sc;
    const int Hv = c->Hv, dv = c->dv;
    float *qkv = sc->big0; /* [n, C] */
    float *z = sc->big1;   /* [n, Vd] */
    float *o = sc->big2;   /* [n, Vd] */
    float *bb = sc->small, *aa = sc->small + (size_t)sc->R * Hv; /* [n, Hv] each */
    lin_many(lin, (const ts_weight *[]){&w->in_qkv, &w->in_z, &w->in_b, &w->in_a}, 4, sc->u, (float *[]){qkv, z, bb, aa}, n);
    if (tp) { /* verify: record what the state advance consumes (not z: the state never reads it) */
        memcpy(tp->qkv, qkv, sizeof(float) * (size_t)n * m->C);
        memcpy(tp->a, aa, sizeof(float) * (size_t)n * Hv);
        memcpy(tp->b, bb, sizeof(float) * (size_t)n * Hv);
    }
    if (lin == ts_linear_prefill && n > 1 && sc->pf_conv) {
        /* prefill: the chunked delta rule and the gated norm, threaded over
         * heads (rounding may differ; never for verify) */
        ts_gdn_chunked(m, w, gs, sc, qkv, aa, bb, z, o, n);
        lin(&w->out_proj, o, sc->t, n);
        return;
    }
    for (int i = 0; i < n; i++)
        ts_gdn_advance_from(m, w, gs, i == 0 && tp && tp->S_from ? tp->S_from : gs->S, qkv + (size_t)i * m->C,
                            aa + (size_t)i * Hv, bb + (size_t)i * Hv, o + (size_t)i * m->Vd, sc->rowtmp);
    /* gated RMSNorm per (row, head): plain weight, norm before the silu(z) gate */
    ts_silu(z, z, (size_t)n * m->Vd);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < Hv; h++) {
            float *oh = o + (size_t)i * m->Vd + (size_t)h * dv;
            const float *zh = z + (size_t)i * m->Vd + (size_t)h * dv;
            double ss = 0;
            for (int j = 0; j < dv; j++) ss += (double)oh[j] * oh[j];
            float rr = 1.0f / sqrtf((float)(ss / dv) + c->eps);
            for (int j = 0; j < dv; j++) oh[j] = oh[j] * rr * w->norm[j] * zh[j];
        }
    lin(&w->out_proj, o, sc->t, n);
}

/* ---- prefill: row-wise work spread over the kernel threads ---- */

#define PAR_ITEMS 8 /* items per row-wise region: a few per thread evens out late workers */

typedef struct rows_job {
    float *x;
    const float *add, *w, *m;
    float *y;
    int n, dim;
    float eps;
    size_t N;
} rows_job;

/* rows of item: x += add, then (w != NULL) y = rmsnorm1p(x) * w */
static void rows_item(void *ctx, int it, int nit) {
    const rows_job *j = ctx;
    int r0 = (int)((int64_t)j->n * it / nit), r1 = (int)((int64_t)j->n * (it + 1) / nit);
    size_t o = (size_t)r0 * j->dim;
    if (j->w) {
        ts_add_rmsnorm(j->x + o, j->add ? j->add + o : NULL, j->w, j->y + o, r1 - r0, j->dim, j->eps);
    } else {
        for (size_t i = o; i < (size_t)r1 * j->dim; i++) j->x[i] += j->add[i];
    }
}

static void par_rows(float *x, const float *add, const float *w, float *y, int n, int dim, float eps) {
    rows_job j = {x, add, w, NULL, y, n, dim, eps, 0};
    ts_parallel_for(TS_MIN(n, PAR_ITEMS), rows_item, &j);
}

/* y = silu(y) * m over N elements, in 16-aligned pieces */
static void silu_item(void *ctx, int it, int nit) {
    const rows_job *j = ctx;
    size_t per = (j->N + (size_t)nit - 1) / (size_t)nit;
    per = (per + 15) & ~(size_t)15;
    size_t a = per * (size_t)it, b = TS_MIN(j->N, a + per);
    if (a < b) ts_silu_mul(j->y + a, j->m + a, b - a);
}

/* embedding rows of a prompt chunk (the same ts_weight_row per row) */
typedef struct embed_job {
    const ts_model *m;
    const int32_t *ids;
    float *x;
    int n;
} embed_job;

static void embed_item(void *ctx, int it, int nit) {
    const embed_job *j = ctx;
    const int H = j->m->cfg.H;
    for (int i = (int)((int64_t)j->n * it / nit); i < (int)((int64_t)j->n * (it + 1) / nit); i++)
        ts_weight_row(&j->m->embed, j->ids[i], j->x + (size_t)i * H);
}

/* ---- FFN ---- */

static void swiglu(const ts_weight *g, const ts_weight *u, const ts_weight *d, const float *x, float *gb,
                   float *ub, float *out, int n, linear_fn lin) {
    lin_many(lin, (const ts_weight *[]){g, u}, 2, x, (float *[]){gb, ub}, n);
    size_t N = (size_t)n * g->rows;
    if (lin == ts_linear_prefill && n > 1) {
        rows_job j = {NULL, NULL, NULL, ub, gb, 0, 0, 0.f, N};
        ts_parallel_for(PAR_ITEMS, silu_item, &j);
    } else {
        ts_silu_mul(gb, ub, N);
    }
    lin(d, gb, out, n);
}

static void ffn_block(const ts_model *m, ts_state *st, const ts_ffn_w *f, int n, linear_fn lin) {
    const ts_config *c = &m->cfg;
    ts_scratch *sc = &st->sc;
    if (!f->moe) {
        swiglu(&f->gate, &f->up, &f->down, sc->u, sc->big1, sc->big2, sc->t, n, lin);
        return;
    }
    const int E = c->E, H = c->H;
    float *logits = sc->small + (size_t)2 * sc->R * c->Hv; /* [n, E] */
    lin(&f->router, sc->u, logits, n);
    float *acc = sc->moe_acc, *eo = sc->moe_acc + H;
    for (int i = 0; i < n; i++) {
        const float *ui = sc->u + (size_t)i * H;
        float *li = logits + (size_t)i * E;
        /* softmax in f32 over all experts, top-k of the probabilities, renormalise */
        float mx = -INFINITY;
        for (int e = 0; e < E; e++) mx = li[e] > mx ? li[e] : mx;
        double sum = 0;
        for (int e = 0; e < E; e++) { li[e] = expf(li[e] - mx); sum += li[e]; }
        for (int e = 0; e < E; e++) li[e] = (float)(li[e] / sum);
        int sel[64];
        float wsel[64];
        int k = c->topk;
        float wsum = 0.f;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int q = 0; q < j; q++) taken |= sel[q] == e;
                if (!taken && (best < 0 || li[e] > li[best])) best = e;
            }
            sel[j] = best;
            wsel[j] = li[best];
            wsum += li[best];
        }
        for (int j = 0; j < H; j++) acc[j] = 0.f;
        float *ti = sc->t + (size_t)i * H;
        if (k + 1 <= sc->R && 2 * k + 3 <= TS_LINEAR_MANY_MAX) {
            /* all selected experts and the shared one in two parallel regions
             * (gate/up of all, then the downs), each product computed as in
             * the one-by-one path below: the same bits. Row j of big1/big2
             * holds expert j's gate/up, row j of big0 its output. */
            const size_t F = (size_t)m->max_ffn, B0 = (size_t)H; /* big0 rows hold >= 2H */
            const ts_weight *wv[TS_LINEAR_MANY_MAX], *dv[TS_LINEAR_MANY_MAX];
            float *yv[TS_LINEAR_MANY_MAX], *ov[TS_LINEAR_MANY_MAX];
            const float *xv[TS_LINEAR_MANY_MAX];
            float gl;
            int nw = 0;
            for (int j = 0; j <= k; j++) {
                const ts_weight *g = j < k ? &f->e_gate[sel[j]] : &f->s_gate, *u = j < k ? &f->e_up[sel[j]] : &f->s_up;
                wv[nw] = g, yv[nw++] = sc->big1 + j * F;
                wv[nw] = u, yv[nw++] = sc->big2 + j * F;
                dv[j] = j < k ? &f->e_down[sel[j]] : &f->s_down;
                xv[j] = sc->big1 + j * F;
                ov[j] = sc->big0 + j * B0;
            }
            wv[nw] = &f->s_gate_w, yv[nw++] = &gl;
            lin_many(lin, wv, nw, ui, yv, 1);
            for (int j = 0; j <= k; j++) ts_silu_mul(sc->big1 + j * F, sc->big2 + j * F, (size_t)dv[j]->cols);
            ts_linear_batch(dv, xv, ov, k + 1, lin_flags(lin));
            for (int j = 0; j < k; j++) {
                float wt = c->norm_topk ? wsel[j] / wsum : wsel[j];
                for (int q = 0; q < H; q++) acc[q] += wt * ov[j][q];
            }
            float sg = sigmoid(gl);
            for (int q = 0; q < H; q++) ti[q] = acc[q] + sg * ov[k][q];
            continue;
        }
        for (int j = 0; j < k; j++) {
            int e = sel[j];
            float wt = c->norm_topk ? wsel[j] / wsum : wsel[j];
            swiglu(&f->e_gate[e], &f->e_up[e], &f->e_down[e], ui, sc->big1, sc->big2, eo, 1, lin);
            for (int q = 0; q < H; q++) acc[q] += wt * eo[q];
        }
        /* shared expert with its scalar sigmoid gate */
        swiglu(&f->s_gate, &f->s_up, &f->s_down, ui, sc->big1, sc->big2, eo, 1, lin);
        float gl;
        lin(&f->s_gate_w, ui, &gl, 1);
        float sg = sigmoid(gl);
        for (int q = 0; q < H; q++) ti[q] = acc[q] + sg * eo[q];
    }
}

/* One decoder layer over rows sc.x[0..n). */
static void layer_forward(const ts_model *m, ts_state *st, const ts_layer_w *l, ts_kv *kv, ts_gdn_state *gs,
                          ts_gdn_tape *tp, int n, int pos, linear_fn lin) {
    ts_scratch *sc = &st->sc;
    const int H = m->cfg.H;
    if (lin == ts_linear_prefill && n > 1) {
        /* prefill: the same steps with the row-wise parts vectorised and threaded */
        par_rows(sc->x, NULL, l->in_norm, sc->u, n, H, m->cfg.eps);
        if (l->full) attn_block(m, st, &l->attn, kv, n, pos, lin);
        else gdn_block(m, st, &l->gdn, gs, tp, n, lin);
        par_rows(sc->x, sc->t, l->post_norm, sc->u, n, H, m->cfg.eps);
        ffn_block(m, st, &l->ffn, n, lin);
        par_rows(sc->x, sc->t, NULL, NULL, n, H, 0.f);
        return;
    }
    ts_rmsnorm1p(sc->x, l->in_norm, sc->u, n, H, m->cfg.eps);
    if (l->full) attn_block(m, st, &l->attn, kv, n, pos, lin);
    else gdn_block(m, st, &l->gdn, gs, tp, n, lin);
    for (size_t i = 0; i < (size_t)n * H; i++) sc->x[i] += sc->t[i];
    ts_rmsnorm1p(sc->x, l->post_norm, sc->u, n, H, m->cfg.eps);
    ffn_block(m, st, &l->ffn, n, lin);
    for (size_t i = 0; i < (size_t)n * H; i++) sc->x[i] += sc->t[i];
}

static void head_out(const ts_model *m, ts_state *st, const float *hid, int n, float *logits, linear_fn lin) {
    const int V = m->cfg.vocab, H = m->cfg.H;
    if (logits) {
        lin(&m->head, hid, logits, n);
        memcpy(st->sc.logits, logits + (size_t)(n - 1) * V, sizeof(float) * V);
    } else {
        lin(&m->head, hid + (size_t)(n - 1) * H, st->sc.logits, 1);
    }
}

void ts_forward(const ts_model *m, ts_state *st, const int32_t *ids, int n, int pos, float *logits, int prefill) {
    linear_fn lin = prefill ? ts_linear_prefill : ts_linear;
    ts_scratch *sc = &st->sc;
    const int H = m->cfg.H;
    const size_t nH = (size_t)n * H;
    const int pf = prefill && n > 1;
    if (pf) {
        embed_job j = {m, ids, sc->x, n};
        ts_parallel_for(TS_MIN(n, PAR_ITEMS), embed_item, &j);
    } else {
        for (int i = 0; i < n; i++) ts_weight_row(&m->embed, ids[i], sc->x + (size_t)i * H);
    }
    if (st->dbg_layers) memcpy(st->dbg_layers, sc->x, sizeof(float) * nH);
    for (int L = 0; L < m->cfg.n_layers; L++) {
        ts_gdn_tape *tp = st->tape_on && !m->layers[L].full ? &st->tape[L] : NULL;
        layer_forward(m, st, &m->layers[L], &st->kv[L], &st->gdn[L], tp, n, pos, lin);
        if (st->dbg_layers) memcpy(st->dbg_layers + (L + 1) * nH, sc->x, sizeof(float) * nH);
    }
    if (pf) par_rows(sc->x, NULL, m->final_norm, sc->hidden, n, H, m->cfg.eps);
    else ts_rmsnorm1p(sc->x, m->final_norm, sc->hidden, n, H, m->cfg.eps);
    head_out(m, st, sc->hidden, n, logits, lin);
}

void ts_mtp_forward(const ts_model *m, ts_state *st, const int32_t *toks, const float *h, int n, int pos,
                    float *h_out, float *logits, int draft) {
    linear_fn lin = draft ? ts_linear_draft : ts_linear;
    const ts_mtp_w *w = &m->mtp;
    ts_scratch *sc = &st->sc;
    const int H = m->cfg.H;
    float *cat = sc->big0; /* [n, 2H]: normed embedding | normed hidden */
    for (int i = 0; i < n; i++) {
        float *ci = cat + (size_t)i * 2 * H;
        ts_weight_row(&m->embed, toks[i], ci);
        ts_rmsnorm1p(ci, w->pre_norm_emb, ci, 1, H, m->cfg.eps);
        ts_rmsnorm1p(h + (size_t)i * H, w->pre_norm_hid, ci + H, 1, H, m->cfg.eps);
    }
    lin(&w->fc, cat, sc->x, n);
    layer_forward(m, st, &w->layer, &st->mtp_kv, NULL, NULL, n, pos, lin);
    ts_rmsnorm1p(sc->x, w->norm, h_out, n, H, m->cfg.eps);
    head_out(m, st, h_out, n, logits, lin);
}
