/* attn.c: the CPU backend's gated-attention op (backend.h, ts_attn_args).
 *
 * Owns: the per-head q/k RMSNorm, RoPE, the KV append, causal attention
 * over the cache and the output gate, for decode, verify and prompt chunks,
 * and how that work is spread over the pool.
 * Does not own: the projections (the model's linear ops), the attention
 * kernels (ts_attn_rows, ts_attn_chunk: kernels.h).
 *
 * Exactness: the token path (TS_MODE_EXACT / DRAFT) norms every row with
 * the double-accumulating RMSNorm and scores every (row, query head) with
 * ts_attn_row's bits, whatever the grouping; prompt chunks (TS_MODE_PREFILL)
 * use the vectorised norms and the online-softmax chunk kernel (rounding
 * differs).
 */
#include <math.h>

#include "cpu/cpu.h"

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

/* Prefill: one query head over all n rows (multi-row causal attention),
 * then its output gate. */
static void attn_head(void *ctx, int h, int nh) {
    const ts_attn_args *a = ctx;
    const int D = a->D, grp = a->nq / a->nkv, kh = h / grp, qdim = a->nq * D, kvdim = a->nkv * D;
    (void)nh;
    const size_t ldq = (size_t)2 * qdim;
    ts_attn_chunk(a->qg + (size_t)h * 2 * D, ldq, a->kc + (size_t)kh * D, a->vc + (size_t)kh * D, kvdim,
                  a->out + (size_t)h * D, qdim, a->n, a->pos, D, 1.0f / sqrtf((float)D));
    for (int i = 0; i < a->n; i++) {
        const float *gate = a->qg + (size_t)i * ldq + (size_t)h * 2 * D + D;
        float *o = a->out + (size_t)i * qdim + (size_t)h * D;
        for (int d = 0; d < D; d++) o[d] *= ts_sigmoid(gate[d]);
    }
}

/* The prefill form: norms (vectorised) and RoPE row by row (angles once
 * per row for its q and k), the rows' K/V into the cache, then the heads in
 * parallel. Rounding differs from the token path (online softmax, FMAs). */
static void attn_prefill(const ts_cpu_ctx *cx, const ts_attn_args *a) {
    const int D = a->D, nq = a->nq, nkv = a->nkv, kvdim = nkv * D, n = a->n, pos = a->pos;
    for (int i = 0; i < n; i++) {
        float *qi = a->qg + (size_t)i * nq * 2 * D, *ki = a->k + (size_t)i * kvdim;
        for (int h = 0; h < nq; h++) ts_add_rmsnorm(qi + (size_t)h * 2 * D, NULL, a->q_norm, qi + (size_t)h * 2 * D, 1, D, a->eps);
        ts_add_rmsnorm(ki, NULL, a->k_norm, ki, nkv, D, a->eps);
        rope_row(qi, nq, (size_t)2 * D, ki, nkv, (size_t)D, a->rot, pos + i, a->theta);
    }
    memcpy(a->kc + (size_t)pos * kvdim, a->k, sizeof(float) * (size_t)n * kvdim);
    memcpy(a->vc + (size_t)pos * kvdim, a->v, sizeof(float) * (size_t)n * kvdim);
    ts_cpu_parallel_for(cx, nq, attn_head, (void *)a);
}

typedef struct attn_rows_job {
    const ts_attn_args *a;
    int hg;          /* query heads per work item (of one KV head) */
} attn_rows_job;

/* Decode and verify: work item = (KV head, group of its query heads): the
 * group's heads and the block's rows (att_rows at a time: the scratch holds
 * their scores) attend together (ts_attn_rows: the KV cache is read once
 * for all of them; every (row, head) gets the bits of ts_attn_row alone,
 * whatever the grouping), then the output gates. An item owns its heads'
 * score rows, so items never share scratch. */
static void attn_rows_item(void *ctx, int it, int n_items) {
    const attn_rows_job *j = ctx;
    const ts_attn_args *a = j->a;
    const int D = a->D, nq = a->nq, nkv = a->nkv, g = nq / nkv, qdim = nq * D, kvdim = nkv * D;
    const int ng = (g + j->hg - 1) / j->hg; /* head groups per KV head */
    const int kh = it / ng, h0 = kh * g + it % ng * j->hg, nh = TS_MIN(j->hg, kh * g + g - h0);
    const float scale = 1.0f / sqrtf((float)D);
    (void)n_items;
    for (int i0 = 0; i0 < a->n; i0 += a->att_rows) {
        const int nr = TS_MIN(a->att_rows, a->n - i0);
        const ts_attn_q q = {a->qg + ((size_t)i0 * nq + h0) * 2 * D, (size_t)nq * 2 * D, (size_t)2 * D,
                             a->att + (size_t)h0 * a->att_len, (size_t)nq * a->att_len, (size_t)a->att_len,
                             a->out + (size_t)i0 * qdim + (size_t)h0 * D, (size_t)qdim, (size_t)D,
                             nr, nh, a->pos + i0 + 1};
        ts_attn_rows(&q, a->kc + (size_t)kh * D, a->vc + (size_t)kh * D, kvdim, D, scale);
    }
    for (int i = 0; i < a->n; i++)
        for (int h = 0; h < nh; h++) {
            const float *gate = a->qg + ((size_t)i * nq + h0 + h) * 2 * D + D;
            float *oh = a->out + (size_t)i * qdim + (size_t)(h0 + h) * D;
            for (int d = 0; d < D; d++) oh[d] *= ts_sigmoid(gate[d]);
        }
}

/* The block mask (DFlash's draft layers, backend.h): one query head over
 * every row of the block; each row sees the same T = pos + n cache rows. */
static void attn_block_head(void *ctx, int h, int nh) {
    const ts_attn_args *a = ctx;
    const int D = a->D, grp = a->nq / a->nkv, kh = h / grp, qdim = a->nq * D, kvdim = a->nkv * D;
    const int qw = a->no_gate ? D : 2 * D, T = a->pos + a->n;
    (void)nh;
    float *att = a->att + (size_t)h * a->att_len;
    for (int j = 0; j < a->n - a->n_kv; j++) {
        const float *q = a->qg + ((size_t)j * a->nq + h) * qw;
        float *o = a->out + (size_t)j * qdim + (size_t)h * D;
        ts_attn_row(q, a->kc + (size_t)kh * D, a->vc + (size_t)kh * D, kvdim, T, D, 1.0f / sqrtf((float)D), att, o);
        if (!a->no_gate)
            for (int d = 0; d < D; d++) o[d] *= ts_sigmoid(q[D + d]);
    }
}

/* Context rows [0, n_kv): K normed and rotated, K/V appended; block rows
 * [n_kv, n): also the query normed and rotated at its own position, then
 * attention without a causal mask inside the block. Token-path norms
 * (the drafts are verified: any rounding is correct, this one is the
 * decode path's). Scores: a->att holds one row of att_len per query head. */
static void attn_block_mask(const ts_cpu_ctx *cx, const ts_attn_args *a) {
    const int D = a->D, nq = a->nq, nkv = a->nkv, kvdim = nkv * D, n = a->n, pos = a->pos;
    const int qw = a->no_gate ? D : 2 * D;
    for (int i = 0; i < n; i++) {
        float *ki = a->k + (size_t)i * kvdim;
        float *qi = i >= a->n_kv ? a->qg + (size_t)(i - a->n_kv) * nq * qw : NULL;
        if (qi)
            for (int h = 0; h < nq; h++) ts_rmsnorm1p(qi + (size_t)h * qw, a->q_norm, qi + (size_t)h * qw, 1, D, a->eps);
        ts_rmsnorm1p(ki, a->k_norm, ki, nkv, D, a->eps);
        rope_row(qi ? qi : ki, qi ? nq : 0, (size_t)qw, ki, nkv, (size_t)D, a->rot, pos + i, a->theta);
        memcpy(a->kc + (size_t)(pos + i) * kvdim, ki, sizeof(float) * kvdim);
        memcpy(a->vc + (size_t)(pos + i) * kvdim, a->v + (size_t)i * kvdim, sizeof(float) * kvdim);
    }
    if (a->n_kv >= n) return;
    if ((double)(pos + n) * D * nq * (n - a->n_kv) >= 262144.0) ts_cpu_parallel_for(cx, nq, attn_block_head, (void *)a);
    else
        for (int h = 0; h < nq; h++) attn_block_head((void *)a, h, nq);
}

void ts_cpu_attn(ts_stream *s, ts_mode m, const ts_attn_args *args) {
    const ts_cpu_ctx *cx = ts_cpu_stream_ctx(s);
    ts_attn_args a_pos = *args;
    a_pos.pos = s->step.pos; /* per-token values come from the step record */
    const ts_attn_args *a = &a_pos;
    if (args->mask == TS_MASK_BLOCK) {
        if (a->n_kv < 0 || a->n_kv > a->n || a->pos + a->n > a->att_len) {
            ts_be_fail(s, TS_E_ARG, "block-mask attention: bad context rows or scores scratch too short");
            return;
        }
        attn_block_mask(cx, a);
        return;
    }
    if (args->mask != TS_MASK_CAUSAL || args->no_gate) {
        ts_be_fail(s, TS_E_UNSUPPORTED, "the CPU attention knows the causal (gated) and the block masks only");
        return;
    }
    const int D = a->D, nq = a->nq, nkv = a->nkv, kvdim = nkv * D, n = a->n, pos = a->pos;
    if (m == TS_MODE_PREFILL && n > 1) {
        attn_prefill(cx, a);
        return;
    }
    for (int i = 0; i < n; i++) {
        float *qi = a->qg + (size_t)i * nq * 2 * D, *ki = a->k + (size_t)i * kvdim;
        for (int h = 0; h < nq; h++) ts_rmsnorm1p(qi + (size_t)h * 2 * D, a->q_norm, qi + (size_t)h * 2 * D, 1, D, a->eps);
        ts_rmsnorm1p(ki, a->k_norm, ki, nkv, D, a->eps);
        rope_row(qi, nq, (size_t)2 * D, ki, nkv, (size_t)D, a->rot, pos + i, a->theta);
        memcpy(a->kc + (size_t)(pos + i) * kvdim, a->k + (size_t)i * kvdim, sizeof(float) * kvdim);
        memcpy(a->vc + (size_t)(pos + i) * kvdim, a->v + (size_t)i * kvdim, sizeof(float) * kvdim);
    }
    /* Causal attention; output [n, nq*D] (the V rows are in the cache now).
     * Each KV head's query heads go together (the cache is read once per
     * group), in groups small enough to give every thread work when the
     * context makes a pool region worth it. */
    const int g = nq / nkv, par = (double)(pos + n) * D * nq * n >= 262144.0;
    int hg = g;
    while (par && hg > 1 && (long)nkv * ((g + hg - 1) / hg) < ts_pool_threads(cx->pool)) hg = (hg + 1) / 2;
    attn_rows_job j = {a, hg};
    const int items = nkv * ((g + hg - 1) / hg);
    if (par) ts_cpu_parallel_for(cx, items, attn_rows_item, &j);
    else
        for (int it = 0; it < items; it++) attn_rows_item(&j, it, items);
}
