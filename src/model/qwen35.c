/* qwen35.c: the Qwen3.5 forward pass on f32 activations (model-spec.md §2).
 *
 * Rows are processed in blocks of n <= R: projections are matrix products
 * over all n rows; the GDN recurrence, the conv and attention walk the rows
 * in order, so a block of n rows gives the same result as n one-row calls
 * (bit for bit when `prefill` is 0: ts_linear is row-exact). That property
 * is what speculative verification stands on. With `prefill` 1 the GDN
 * layers use the chunked delta rule instead (chunked.c; rounding differs),
 * and a verify pass records the GDN tape (model.h, ts_gdn_tape). After a
 * lazy rollback (spec.c) the GDN layers first apply the pending taped rows
 * in the same per-head pass (see "Gated DeltaNet" below).
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

/* Rotate dims [j0, j0 + nj) (and their partners half further) of nh heads
 * at x + h * hstride by the angles' cosines cs and sines sn. */
static void rope_heads(float *x, int nh, size_t hstride, int j0, int nj, int half, const float *cs, const float *sn) {
    for (int h = 0; h < nh; h++) {
        float *xh = x + (size_t)h * hstride + j0;
        for (int j = 0; j < nj; j++) {
            float x0 = xh[j], x1 = xh[j + half];
            xh[j] = x0 * cs[j] - x1 * sn[j];
            xh[j + half] = x1 * cs[j] + x0 * sn[j];
        }
    }
}

/* NeoX rotate-half RoPE on the first rot dims of one row's heads, in place:
 * nq query heads at q + h * qstride and nk key heads at k + h * kstride,
 * the angles formed once for the row and used by both. For text, the
 * interleaved M-RoPE of Qwen3.5 reduces to this (all three axes carry the
 * token index). inv_freq and the angle are formed in f32 as transformers
 * does. Angles in pieces of 256: any rot. */
static void rope_row(float *q, int nq, size_t qstride, float *k, int nk, size_t kstride, int rot, int pos,
                     double theta) {
    float cs[256], sn[256];
    const int half = rot / 2;
    for (int j0 = 0; j0 < half; j0 += 256) {
        const int nj = TS_MIN(256, half - j0);
        for (int j = 0; j < nj; j++) {
            float inv = 1.0f / powf((float)theta, (float)(2 * (j0 + j)) / (float)rot);
            float a = (float)pos * inv;
            cs[j] = cosf(a);
            sn[j] = sinf(a);
        }
        rope_heads(q, nq, qstride, j0, nj, half, cs, sn);
        rope_heads(k, nk, kstride, j0, nj, half, cs, sn);
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
 * (vectorised) and RoPE row by row (angles once per row for its q and k),
 * the rows' K/V into the cache, then the heads in parallel. Rounding differs from the token path (online
 * softmax, FMAs). */
static void attn_prefill(const ts_model *m, ts_scratch *sc, const ts_attn_w *w, ts_kv *kv, float *qg, float *kb,
                         const float *vb, int n, int pos) {
    const ts_config *c = &m->cfg;
    const int D = m->D, nq = c->nq, nkv = c->nkv;
    for (int i = 0; i < n; i++) {
        float *qi = qg + (size_t)i * nq * 2 * D, *ki = kb + (size_t)i * m->kvdim;
        for (int h = 0; h < nq; h++) ts_add_rmsnorm(qi + (size_t)h * 2 * D, NULL, w->q_norm, qi + (size_t)h * 2 * D, 1, D, c->eps);
        ts_add_rmsnorm(ki, NULL, w->k_norm, ki, nkv, D, c->eps);
        rope_row(qi, nq, (size_t)2 * D, ki, nkv, (size_t)D, c->rot_dim, pos + i, c->rope_theta);
    }
    memcpy(kv->k + (size_t)pos * m->kvdim, kb, sizeof(float) * (size_t)n * m->kvdim);
    memcpy(kv->v + (size_t)pos * m->kvdim, vb, sizeof(float) * (size_t)n * m->kvdim);
    attn_job j = {m, qg, kv, sc->big2, n, pos};
    ts_parallel_for(nq, attn_head, &j);
}

typedef struct attn_rows_job {
    const ts_model *m;
    const float *qg; /* [n, nq, 2D] */
    const ts_kv *kv;
    float *out;      /* [n, nq*D] */
    float *att;      /* [att_rows, nq, att_len] */
    int att_len, n, pos;
    int hg;          /* query heads per work item (of one KV head) */
    int att_rows;    /* rows whose scores att holds at once */
} attn_rows_job;

/* Decode and verify: work item = (KV head, group of its query heads): the
 * group's heads and the block's rows (att_rows at a time: the scratch holds
 * their scores) attend together (ts_attn_rows: the KV cache is read once
 * for all of them; every (row, head) gets the bits of ts_attn_row alone,
 * whatever the grouping), then the output gates. An item owns its heads'
 * score rows, so items never share scratch. */
static void attn_rows_item(void *ctx, int it, int n_items) {
    const attn_rows_job *j = ctx;
    const ts_model *m = j->m;
    const int D = m->D, nq = m->cfg.nq, nkv = m->cfg.nkv, g = nq / nkv;
    const int ng = (g + j->hg - 1) / j->hg; /* head groups per KV head */
    const int kh = it / ng, h0 = kh * g + it % ng * j->hg, nh = TS_MIN(j->hg, kh * g + g - h0);
    const float scale = 1.0f / sqrtf((float)D);
    (void)n_items;
    for (int i0 = 0; i0 < j->n; i0 += j->att_rows) {
        const int nr = TS_MIN(j->att_rows, j->n - i0);
        const ts_attn_q a = {j->qg + ((size_t)i0 * nq + h0) * 2 * D, (size_t)nq * 2 * D, (size_t)2 * D,
                             j->att + (size_t)h0 * j->att_len, (size_t)nq * j->att_len, (size_t)j->att_len,
                             j->out + (size_t)i0 * m->qdim + (size_t)h0 * D, (size_t)m->qdim, (size_t)D,
                             nr, nh, j->pos + i0 + 1};
        ts_attn_rows(&a, j->kv->k + (size_t)kh * D, j->kv->v + (size_t)kh * D, m->kvdim, D, scale);
    }
    for (int i = 0; i < j->n; i++)
        for (int h = 0; h < nh; h++) {
            const float *gate = j->qg + ((size_t)i * nq + h0 + h) * 2 * D + D;
            float *oh = j->out + (size_t)i * m->qdim + (size_t)(h0 + h) * D;
            for (int d = 0; d < D; d++) oh[d] *= sigmoid(gate[d]);
        }
}

static void attn_block(const ts_model *m, ts_state *st, const ts_attn_w *w, ts_kv *kv, int n, int pos,
                       linear_fn lin) {
    const ts_config *c = &m->cfg;
    ts_scratch *sc = &st->sc;
    const int D = m->D, nq = c->nq, nkv = c->nkv;
    float *qg = sc->big0;  /* [n, nq, 2D]: query | gate per head */
    float *kb = sc->big1;  /* [n, nkv*D] */
    float *vb = sc->big2;  /* [n, nkv*D] */
    lin_many(lin, (const ts_weight *[]){&w->q_proj, &w->k_proj, &w->v_proj}, 3, sc->u, (float *[]){qg, kb, vb}, n);
    if (lin == ts_linear_prefill && n > 1) {
        attn_prefill(m, sc, w, kv, qg, kb, vb, n, pos);
        lin(&w->o_proj, sc->big2, sc->t, n);
        return;
    }
    for (int i = 0; i < n; i++) {
        float *qi = qg + (size_t)i * nq * 2 * D, *ki = kb + (size_t)i * nkv * D;
        for (int h = 0; h < nq; h++) ts_rmsnorm1p(qi + (size_t)h * 2 * D, w->q_norm, qi + (size_t)h * 2 * D, 1, D, c->eps);
        ts_rmsnorm1p(ki, w->k_norm, ki, nkv, D, c->eps);
        rope_row(qi, nq, (size_t)2 * D, ki, nkv, (size_t)D, c->rot_dim, pos + i, c->rope_theta);
        memcpy(kv->k + (size_t)(pos + i) * m->kvdim, kb + (size_t)i * m->kvdim, sizeof(float) * m->kvdim);
        memcpy(kv->v + (size_t)(pos + i) * m->kvdim, vb + (size_t)i * m->kvdim, sizeof(float) * m->kvdim);
    }
    /* Causal attention; output [n, nq*D] in big2 (the V rows are in the
     * cache now). Each KV head's query heads go together (the cache is read
     * once per group), in groups small enough to give every thread work when
     * the context makes a pool region worth it. */
    const int g = nq / nkv, par = (double)(pos + n) * D * nq * n >= 262144.0;
    int hg = g;
    while (par && hg > 1 && (long)nkv * ((g + hg - 1) / hg) < ts_kernels_threads()) hg = (hg + 1) / 2;
    attn_rows_job j = {m, qg, kv, sc->big2, sc->att, sc->att_len, n, pos, hg, sc->att_rows};
    const int items = nkv * ((g + hg - 1) / hg);
    if (par) ts_parallel_for(items, attn_rows_item, &j);
    else
        for (int it = 0; it < items; it++) attn_rows_item(&j, it, items);
    lin(&w->o_proj, sc->big2, sc->t, n);
}

/* ---- Gated DeltaNet ----
 *
 * A GDN pass over rows has two phases, so that the rows can be grouped by
 * value head: one head's recurrent state (dk*dv floats, 64 KiB at 128x128)
 * stays in cache while every row of the pass advances it, and is read and
 * written once, instead of the layer's whole state (1 MiB) streaming through
 * memory once per row.
 *   gdn_prep:  per row, the causal conv over the input sequence, SiLU, the l2
 *              norms of q and k and the q scale: one prepared row [C];
 *   gdn_heads: per value head, the state comes from its source, every row
 *              advances it (ts_gdn_step_rows: ts_gdn_step's bits, one pass
 *              over the head's state per row), and it is written once.
 * Heads are independent and each element sees the operations of the
 * row-by-row recurrence in the same order, so the grouping changes no bit:
 * ts_gdn_advance (one row) is the reference, and a verify block, a decode
 * step and the pending rows of a lazy rollback all compute the same bits.
 *
 * A verify keeps its prepared rows in the tape (ts_gdn_tape.prep): a
 * row's prepared values depend only on its conv window, so the rows a
 * rollback keeps never need the conv again (with the scalar SiLU that was
 * ~40% of a replayed row's cost on the 0.8B shape: 6144 SiLUs per row and
 * layer). Only the conv state is rebuilt, from the taped pre-conv rows.
 *
 * The pre-conv input rows of a pass form one sequence: the conv history
 * (K-1 rows, oldest first), then up to two runs, the pending rows of a lazy
 * rollback (from the tape) and the pass's own rows. */

typedef struct gdn_seq {
    const float *hist;   /* [K-1, C] conv state before the first row */
    const float *r0;     /* [n0, C] first run of pre-conv rows */
    int n0;
    const float *r1;     /* [n1, C] second run (may be NULL with n1 = 0) */
    int n1;
} gdn_seq;

/* Row s of the whole sequence: [0, K-1) history, then r0, then r1. */
static inline const float *seq_row(const gdn_seq *q, int K, int C, int s) {
    if (s < K - 1) return q->hist + (size_t)s * C;
    s -= K - 1;
    if (s < q->n0) return q->r0 + (size_t)s * C;
    return q->r1 + (size_t)(s - q->n0) * C;
}

/* Prepared rows out [n0 + n1 - skip, C] for the input rows [skip, n0 + n1):
 * q (Kd, l2-normed and scaled) | k (Kd, l2-normed) | v (Vd), each after the
 * causal depthwise conv and SiLU. */
static void gdn_prep(const ts_model *m, const ts_gdn_w *w, const gdn_seq *q, int skip, float *out) {
    const ts_config *c = &m->cfg;
    const int C = m->C, K = c->conv_k, dk = c->dk, n = q->n0 + q->n1;
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int i = skip; i < n; i++) {
        const float *x[K]; /* the K inputs of row i's conv window, oldest first; x[K-1] is row i */
        for (int j = 0; j < K; j++) x[j] = seq_row(q, K, C, i + j);
        float *y = out + (size_t)(i - skip) * C;
        ts_conv_row(x, w->conv, K, y, C);
        ts_silu(y, y, (size_t)C);
        /* l2-normalise q and k per key head (eps inside the rsqrt), scale q */
        float *qv = y, *kv = y + m->Kd;
        for (int h = 0; h < c->Hk; h++) {
            float *qh = qv + (size_t)h * dk, *kh = kv + (size_t)h * dk;
            double sq = 0, sk = 0;
            for (int t = 0; t < dk; t++) { sq += (double)qh[t] * qh[t]; sk += (double)kh[t] * kh[t]; }
            float rq = 1.0f / sqrtf((float)sq + 1e-6f), rk = 1.0f / sqrtf((float)sk + 1e-6f);
            for (int t = 0; t < dk; t++) { qh[t] = qh[t] * rq * qscale; kh[t] *= rk; }
        }
    }
}

/* dst [K-1, C] = the last K-1 rows of the sequence. dst may be q->hist: row
 * j takes row n+j >= j, so walking j upwards never reads an overwritten row. */
static void gdn_conv_tail(const ts_model *m, const gdn_seq *q, float *dst) {
    const int C = m->C, K = m->cfg.conv_k, n = q->n0 + q->n1;
    for (int j = 0; j < K - 1; j++) {
        const float *src = seq_row(q, K, C, n + j);
        if (src != dst + (size_t)j * C) memmove(dst + (size_t)j * C, src, sizeof(float) * C);
    }
}

/* The rows of one gdn_heads call. */
typedef struct gdn_rows {
    const float *pre, *a0, *b0; /* rows [0, n_pre): prepared [n_pre, C], raw gates [n_pre, Hv] */
    int n_pre;
    const float *own, *a1, *b1; /* rows [n_pre, n_pre + n) */
    int n;
    float *o;                   /* [n, Vd] outputs of the own rows, or NULL */
} gdn_rows;

#define GDN_ROWS_MAX 16 /* rows per ts_gdn_step_rows call (a pass has at most 2 * 9) */

/* Head h's state S over rows [i0, i1), starting from S_in. */
static void gdn_head_rows(const ts_model *m, const ts_gdn_w *w, const gdn_rows *R, int h, float *S, const float *S_in,
                          int i0, int i1) {
    const ts_config *c = &m->cfg;
    const int C = m->C, Hv = c->Hv, dk = c->dk, dv = c->dv, r = c->Hv / c->Hk;
    const float *kk[GDN_ROWS_MAX], *vv[GDN_ROWS_MAX], *qq[GDN_ROWS_MAX];
    float *oo[GDN_ROWS_MAX], dc[GDN_ROWS_MAX], bt[GDN_ROWS_MAX];
    do {
        int cnt = TS_MIN(GDN_ROWS_MAX, i1 - i0);
        for (int t = 0; t < cnt; t++) {
            const int i = i0 + t, ow = i >= R->n_pre, ri = ow ? i - R->n_pre : i;
            const float *a = (ow ? R->a1 : R->a0) + (size_t)ri * Hv, *b = (ow ? R->b1 : R->b0) + (size_t)ri * Hv;
            const float *row = (ow ? R->own : R->pre) + (size_t)ri * C;
            qq[t] = row + (size_t)(h / r) * dk;
            kk[t] = row + m->Kd + (size_t)(h / r) * dk;
            vv[t] = row + 2 * (size_t)m->Kd + (size_t)h * dv;
            bt[t] = sigmoid(b[h]);
            dc[t] = expf(w->neg_A[h] * softplus(a[h] + w->dt_bias[h]));
            oo[t] = ow && R->o ? R->o + (size_t)ri * m->Vd + (size_t)h * dv : NULL;
        }
        ts_gdn_step_rows(S, S_in, kk, vv, qq, dc, bt, oo, cnt, dk, dv);
        S_in = S;
        i0 += cnt;
    } while (i0 < i1);
}

/* The recurrent state over the rows R: per value head the state comes from
 * src (into dst; src may be dst), the n_pre rows advance it without output
 * (a lazy rollback's pending rows), then the n own rows advance it, writing
 * their outputs. The head's state is read once and written once for all
 * rows (ts_gdn_step_rows). With mid (the block-start snapshot of a verify
 * that follows a lazy rollback; mid may be src, then it is updated in
 * place) the pending rows write their state to mid and the own rows start
 * from there: mid is written by the pass itself, no copy. */
typedef struct gdn_heads_job {
    const ts_model *m;
    const ts_gdn_w *w;
    const float *src;
    float *dst, *mid;
    const gdn_rows *R;
} gdn_heads_job;

static void gdn_head(void *ctx, int h, int nh) {
    const gdn_heads_job *j = ctx;
    const gdn_rows *R = j->R;
    const size_t hs = (size_t)j->m->cfg.dk * j->m->cfg.dv;
    float *S = j->dst + (size_t)h * hs; /* [dk, dv] */
    const float *S_in = j->src + (size_t)h * hs;
    (void)nh;
    if (j->mid) {
        /* the pending rows advance the state into mid (in place when mid is
         * src), the own rows from there into dst: the block-start snapshot
         * is written by the pass itself, not copied afterwards */
        float *Mh = j->mid + (size_t)h * hs;
        gdn_head_rows(j->m, j->w, R, h, Mh, S_in, 0, R->n_pre);
        gdn_head_rows(j->m, j->w, R, h, S, Mh, R->n_pre, R->n_pre + R->n);
    } else {
        gdn_head_rows(j->m, j->w, R, h, S, S_in, 0, R->n_pre + R->n);
    }
}

static void gdn_heads(const ts_model *m, const ts_gdn_w *w, const float *src, float *dst, float *mid,
                      const gdn_rows *R) {
    const ts_config *c = &m->cfg;
    gdn_heads_job j = {m, w, src, dst, mid, R};
    /* the heads' states are independent: spread them over the pool when the
     * work (state elements times rows) is large enough to pay for the
     * wake-up (per head the arithmetic is the same whichever thread runs it:
     * bit-identical results). Counting rows: the default model's 32K-element
     * state stays on one thread for a decode row, but a verify block goes
     * parallel (verify of 4 rows 1.05-1.10 -> 1.01-1.02 ms, 2 threads,
     * spec_bench interleaved; with the state alone as the measure, the
     * other thread waited through every GDN pass of a verify). */
    if ((size_t)(R->n_pre + R->n) * c->Hv * c->dk * c->dv >= 65536) ts_parallel_for(c->Hv, gdn_head, &j);
    else
        for (int h = 0; h < c->Hv; h++) gdn_head(&j, h, c->Hv);
}

void ts_gdn_advance(const ts_model *m, const ts_gdn_w *w, ts_gdn_state *s, const float *qkv_in,
                    const float *a, const float *b, float *o, float *tmp) {
    gdn_seq q = {s->conv, qkv_in, 1, NULL, 0};
    gdn_prep(m, w, &q, 0, tmp);
    gdn_conv_tail(m, &q, s->conv);
    gdn_rows R = {NULL, NULL, NULL, 0, tmp, a, b, 1, o};
    gdn_heads(m, w, s->S, s->S, NULL, &R);
}

/* The tape's prepared rows of the last verify block (the half of tp->prep
 * the last recorded verify wrote), and the half the next one writes. */
static inline float *tape_prep(const ts_model *m, const ts_state *st, const ts_gdn_tape *tp, int next) {
    return tp->prep + (size_t)(st->tape_half ^ next) * st->tape_rows * m->C;
}

/* Eager form of a lazy rollback for one layer: conv and recurrent state
 * become the snapshot advanced by the first P taped rows. The snapshot and
 * the tape stay as they are. */
static void gdn_materialize_layer(const ts_model *m, const ts_state *st, const ts_gdn_w *w, ts_gdn_state *gs,
                                  const ts_gdn_tape *tp, int P) {
    gdn_seq q = {tp->snap_conv, tp->qkv, P, NULL, 0};
    gdn_conv_tail(m, &q, gs->conv);
    gdn_rows R = {tape_prep(m, st, tp, 0), tp->a, tp->b, P, NULL, NULL, NULL, 0, NULL};
    gdn_heads(m, w, tp->snap_S, gs->S, NULL, &R);
}

void ts_gdn_materialize(const ts_model *m, ts_state *st) {
    if (!st->gdn_pend) return;
    for (int L = 0; L < m->cfg.n_layers; L++)
        if (!m->layers[L].full) gdn_materialize_layer(m, st, &m->layers[L].gdn, &st->gdn[L], &st->tape[L], st->gdn_pend);
    st->gdn_pend = 0;
}

/* One state pass of a GDN layer over n rows (qkv [n, C], aa/bb [n, Hv]),
 * with P pending rows of a lazy rollback first. record: a verify block
 * (n > 1, n <= Rv): the block-start state becomes the snapshot and the
 * rows' inputs and prepared rows the tape. prep: where the rows' prepared
 * values go when not recorded ([n, C]).
 *
 * The three ways the state can start:
 *  - P > 0 (a lazy rollback is pending): it starts from the snapshot; the
 *    pending rows advance it in cache, then the new rows; written once. A
 *    decode row advances the snapshot buffer in place, which then trades
 *    places with the stale live one (writing into a buffer that is not in
 *    cache would cost a read for ownership of every line: on the 0.8B shape
 *    that doubled the pass's memory traffic). The snapshot is not needed
 *    after a decode: the next rollback refers to the next verify. A verify
 *    writes its rows to the live buffer and the post-pending state over the
 *    snapshot (its own block start: the one extra write a verify after a
 *    rejection pays, instead of an 18-layer restore + replay at rollback
 *    time). The alternative, keeping the old snapshot and prefixing the new
 *    tape with the pending rows, writes nothing but replays the pending rows
 *    again at every later pass of the chain: on the 0.8B shape one replayed
 *    row costs ~0.4-0.5 ms of arithmetic for 18 layers (one thread), while
 *    the snapshot write does not show above the noise (a verify after a
 *    rollback pays about what a decode row after it pays: bench/spec), so
 *    the chain is cut at every verify.
 *  - verify, nothing pending: live and snapshot buffers swap (conv and
 *    recurrent): the block-start state becomes the snapshot without a copy,
 *    and the rows are written into the other buffer.
 *  - otherwise the state advances in place. */
static void gdn_pass(const ts_model *m, const ts_state *st, const ts_gdn_w *w, ts_gdn_state *gs, ts_gdn_tape *tp,
                     int P, int record, const float *qkv, const float *aa, const float *bb, int n, float *o,
                     float *prep) {
    const int Hv = m->cfg.Hv;
    gdn_seq q;
    const float *src;
    float *mid = NULL;
    if (record) prep = tape_prep(m, st, tp, 1); /* the other half: the pending rows may be in this one */
    float *dst = NULL;
    if (P) {
        q = (gdn_seq){tp->snap_conv, tp->qkv, P, qkv, n};
        src = tp->snap_S;
        if (record) mid = tp->snap_S;
        else dst = tp->snap_S; /* in place in the snapshot, which then becomes the live buffer */
    } else if (record) {
        float *t = gs->S;
        gs->S = tp->snap_S;
        tp->snap_S = t;
        t = gs->conv;
        gs->conv = tp->snap_conv;
        tp->snap_conv = t;
        q = (gdn_seq){tp->snap_conv, qkv, n, NULL, 0};
        src = tp->snap_S;
    } else {
        q = (gdn_seq){gs->conv, qkv, n, NULL, 0};
        src = gs->S;
    }
    if (!dst) dst = gs->S; /* (after the swap above) */
    gdn_prep(m, w, &q, P, prep); /* the pending rows are prepared already (tape) */
    gdn_conv_tail(m, &q, gs->conv);
    if (P && record) { /* the new block-start conv state: snapshot + pending rows, in place */
        gdn_seq qp = {tp->snap_conv, tp->qkv, P, NULL, 0};
        gdn_conv_tail(m, &qp, tp->snap_conv);
    }
    gdn_rows R = {P ? tape_prep(m, st, tp, 0) : NULL, P ? tp->a : NULL, P ? tp->b : NULL, P, prep, aa, bb, n, o};
    gdn_heads(m, w, src, dst, mid, &R);
    if (dst != gs->S) { /* the old live state is stale: it becomes the snapshot buffer */
        tp->snap_S = gs->S;
        gs->S = dst;
    }
    if (record) { /* last: the pending rows above were read from the old tape */
        memcpy(tp->qkv, qkv, sizeof(float) * (size_t)n * m->C);
        memcpy(tp->a, aa, sizeof(float) * (size_t)n * Hv);
        memcpy(tp->b, bb, sizeof(float) * (size_t)n * Hv);
    }
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
    /* prepared rows: the drafter's buffer (a block's rows), else one row at a time */
    float *prep = st->gdn_rows ? st->gdn_rows : sc->rowtmp;
    const int cap = st->gdn_rows ? st->tape_rows : 1;
    const int record = tp && st->tape_on; /* verify: snapshot + tape (n <= Rv: one pass) */
    int P = tp ? st->gdn_pend : 0;
    if (lin == ts_linear_prefill && n > 1 && sc->pf_conv) {
        /* prefill: the chunked delta rule and the gated norm, threaded over
         * heads (rounding may differ; never for verify); after a lazy
         * rollback, the pending rows are applied first */
        if (P) gdn_materialize_layer(m, st, w, gs, tp, P);
        ts_gdn_chunked(m, w, gs, sc, qkv, aa, bb, z, o, n);
        lin(&w->out_proj, o, sc->t, n);
        return;
    }
    for (int off = 0; off < n;) {
        int k = record ? n : TS_MIN(cap, n - off);
        gdn_pass(m, st, w, gs, tp, P, record, qkv + (size_t)off * m->C, aa + (size_t)off * Hv, bb + (size_t)off * Hv,
                 k, o + (size_t)off * m->Vd, prep);
        off += k;
        P = 0;
    }
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

/* rows > 0: the first `rows` rows of the head only (a view: rows of the
 * MLX layout and 16-row blocks of the packed one are both prefixes). */
static void head_out(const ts_model *m, ts_state *st, const float *hid, int n, float *logits, linear_fn lin, int rows) {
    const int V = m->cfg.vocab, H = m->cfg.H;
    ts_weight head = m->head;
    if (rows > 0 && rows < V) head.rows = rows;
    if (logits) {
        lin(&head, hid, logits, n);
        memcpy(st->sc.logits, logits + (size_t)(n - 1) * V, sizeof(float) * V);
    } else {
        lin(&head, hid + (size_t)(n - 1) * H, st->sc.logits, 1);
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
        ts_gdn_tape *tp = st->tape && !m->layers[L].full ? &st->tape[L] : NULL;
        layer_forward(m, st, &m->layers[L], &st->kv[L], &st->gdn[L], tp, n, pos, lin);
        if (st->dbg_layers) memcpy(st->dbg_layers + (L + 1) * nH, sc->x, sizeof(float) * nH);
    }
    st->gdn_pend = 0; /* every GDN layer has applied the pending rows of a lazy rollback */
    if (st->tape_on) st->tape_half ^= 1; /* the block just verified is the tape now */
    if (pf) par_rows(sc->x, NULL, m->final_norm, sc->hidden, n, H, m->cfg.eps);
    else ts_rmsnorm1p(sc->x, m->final_norm, sc->hidden, n, H, m->cfg.eps);
    head_out(m, st, sc->hidden, n, logits, lin, 0);
}

void ts_mtp_forward(const ts_model *m, ts_state *st, const int32_t *toks, const float *h, int n, int pos,
                    float *h_out, float *logits, int draft, int head_rows) {
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
    if (logits || head_rows >= 0) head_out(m, st, h_out, n, logits, lin, logits ? 0 : head_rows);
}
