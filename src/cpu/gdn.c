/* gdn.c: the CPU backend's Gated DeltaNet ops (backend.h, ts_gdn_args):
 * the token recurrence (decode, verify with its tape, the pending rows of a
 * lazy rollback) and the chunked delta rule of prompt chunks.
 *
 * Owns: the conv, SiLU, l2 norms, gates, the delta rule per value head, the
 * gated RMSNorm, the snapshot/tape bookkeeping inside one pass, and how the
 * heads are spread over the pool.
 * Does not own: the projections (the model's linear ops), the parities of
 * the state pairs (the caller's step record: ts_gdn_parity_after), the
 * kernels (ts_gdn_step_rows, ts_conv_row, ts_delta_chunk: kernels.h).
 *
 * The token path. A GDN pass over rows has two phases, so that the rows can
 * be grouped by value head: one head's recurrent state (dk*dv floats, 64 KiB
 * at 128x128) stays in cache while every row of the pass advances it, and is
 * read and written once, instead of the layer's whole state (1 MiB)
 * streaming through memory once per row.
 *   gdn_prep:  per row, the causal conv over the input sequence, SiLU, the l2
 *              norms of q and k and the q scale: one prepared row [C];
 *   gdn_heads: per value head, the state comes from its source, every row
 *              advances it (ts_gdn_step_rows: ts_gdn_step's bits, one pass
 *              over the head's state per row), and it is written once.
 * Heads are independent and each element sees the operations of the
 * row-by-row recurrence in the same order, so the grouping changes no bit:
 * a verify block, a decode step and the pending rows of a lazy rollback all
 * compute the same bits as one row at a time.
 *
 * A verify keeps its prepared rows in the tape (ts_gdn_args.tape_prep): a
 * row's prepared values depend only on its conv window, so the rows a
 * rollback keeps never need the conv again (with the scalar SiLU that was
 * ~40% of a replayed row's cost on the 0.8B shape: 6144 SiLUs per row and
 * layer). Only the conv state is rebuilt, from the taped pre-conv rows.
 *
 * The pre-conv input rows of a pass form one sequence: the conv history
 * (K-1 rows, oldest first), then up to two runs, the pending rows of a lazy
 * rollback (from the tape) and the pass's own rows.
 *
 * Prompt chunks (TS_MODE_PREFILL, n > 1, with the chunked scratch) advance
 * the layer in two parallel passes over the pool (one fused pass when Hv ==
 * Hk, as in the 0.8B shape: no head waits for another):
 *   1. per key head (its q and k channels) and per value head (its v
 *      channels): the causal conv + SiLU of those channels for all rows,
 *      the conv state update of those channels, the l2 norms of the key
 *      head's q and k rows, the value head's decay and beta;
 *   2. per value head: chunks of up to TS_DELTA_CHUNK rows through
 *      ts_delta_chunk (the algebra is in src/cpu/prefill.c), the chunks in
 *      order, then the gated RMSNorm of that head's outputs.
 * Work item i of pass 2 has its own slice of pf_chunk (ts_delta_chunk_ws
 * floats) and runs heads i, i + slots, ... Rounding differs from the token
 * recurrence (decays as exp of sums, FMAs, the prefill SiLU): prefill only,
 * within the 1e-3 logits tolerance (tests/test_prefill.c).
 *
 * Layouts: state [Hv, dk, dv]; value head h reads key head h / (Hv / Hk).
 */
#include <math.h>

#include "cpu/cpu.h"

/* sizes derived from the arguments */
typedef struct gdn_dims {
    int C, Kd, Vd, Hk, Hv, dk, dv, K;
} gdn_dims;

static gdn_dims dims_of(const ts_gdn_args *a) {
    gdn_dims d = {2 * a->Hk * a->dk + a->Hv * a->dv, a->Hk * a->dk, a->Hv * a->dv, a->Hk, a->Hv, a->dk, a->dv, a->K};
    return d;
}

/* The state a pass works on: live and snapshot buffers (chosen by the step
 * record's parities; a pass may trade them, as the parities will after it). */
typedef struct gdn_ptrs {
    float *S, *conv, *snap_S, *snap_conv;
} gdn_ptrs;

static gdn_ptrs ptrs_of(const ts_gdn_args *a, const ts_step *st) {
    gdn_ptrs p = {a->S[st->par_S], a->conv[st->par_conv], a->S[st->par_S ^ 1], a->conv[st->par_conv ^ 1]};
    return p;
}

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
static void gdn_prep(const gdn_dims *d, const ts_gdn_args *a, const gdn_seq *q, int skip, float *out) {
    const int C = d->C, K = d->K, dk = d->dk, n = q->n0 + q->n1;
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int i = skip; i < n; i++) {
        const float *x[K]; /* the K inputs of row i's conv window, oldest first; x[K-1] is row i */
        for (int j = 0; j < K; j++) x[j] = seq_row(q, K, C, i + j);
        float *y = out + (size_t)(i - skip) * C;
        ts_conv_row(x, a->conv_w, K, y, C);
        ts_silu(y, y, (size_t)C);
        /* l2-normalise q and k per key head (eps inside the rsqrt), scale q */
        float *qv = y, *kv = y + d->Kd;
        for (int h = 0; h < d->Hk; h++) {
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
static void gdn_conv_tail(const gdn_dims *d, const gdn_seq *q, float *dst) {
    const int C = d->C, K = d->K, n = q->n0 + q->n1;
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
static void gdn_head_rows(const gdn_dims *d, const ts_gdn_args *a, const gdn_rows *R, int h, float *S,
                          const float *S_in, int i0, int i1) {
    const int C = d->C, Hv = d->Hv, dk = d->dk, dv = d->dv, r = d->Hv / d->Hk;
    const float *kk[GDN_ROWS_MAX], *vv[GDN_ROWS_MAX], *qq[GDN_ROWS_MAX];
    float *oo[GDN_ROWS_MAX], dc[GDN_ROWS_MAX], bt[GDN_ROWS_MAX];
    do {
        int cnt = TS_MIN(GDN_ROWS_MAX, i1 - i0);
        for (int t = 0; t < cnt; t++) {
            const int i = i0 + t, ow = i >= R->n_pre, ri = ow ? i - R->n_pre : i;
            const float *ga = (ow ? R->a1 : R->a0) + (size_t)ri * Hv, *gb = (ow ? R->b1 : R->b0) + (size_t)ri * Hv;
            const float *row = (ow ? R->own : R->pre) + (size_t)ri * C;
            qq[t] = row + (size_t)(h / r) * dk;
            kk[t] = row + d->Kd + (size_t)(h / r) * dk;
            vv[t] = row + 2 * (size_t)d->Kd + (size_t)h * dv;
            bt[t] = ts_sigmoid(gb[h]);
            dc[t] = expf(a->neg_A[h] * ts_softplus(ga[h] + a->dt_bias[h]));
            oo[t] = ow && R->o ? R->o + (size_t)ri * d->Vd + (size_t)h * dv : NULL;
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
    const gdn_dims *d;
    const ts_gdn_args *a;
    const float *src;
    float *dst, *mid;
    const gdn_rows *R;
} gdn_heads_job;

static void gdn_head(void *ctx, int h, int nh) {
    const gdn_heads_job *j = ctx;
    const gdn_rows *R = j->R;
    const size_t hs = (size_t)j->d->dk * j->d->dv;
    float *S = j->dst + (size_t)h * hs; /* [dk, dv] */
    const float *S_in = j->src + (size_t)h * hs;
    (void)nh;
    if (j->mid) {
        float *Mh = j->mid + (size_t)h * hs;
        gdn_head_rows(j->d, j->a, R, h, Mh, S_in, 0, R->n_pre);
        gdn_head_rows(j->d, j->a, R, h, S, Mh, R->n_pre, R->n_pre + R->n);
    } else {
        gdn_head_rows(j->d, j->a, R, h, S, S_in, 0, R->n_pre + R->n);
    }
}

static void gdn_heads(const ts_cpu_ctx *cx, const gdn_dims *d, const ts_gdn_args *a, const float *src, float *dst,
                      float *mid, const gdn_rows *R) {
    gdn_heads_job j = {d, a, src, dst, mid, R};
    /* the heads' states are independent: spread them over the pool when the
     * work (state elements times rows) is large enough to pay for the
     * wake-up (per head the arithmetic is the same whichever thread runs it:
     * bit-identical results). Counting rows: the default model's 32K-element
     * state stays on one thread for a decode row, but a verify block goes
     * parallel (verify of 4 rows 1.05-1.10 -> 1.01-1.02 ms, 2 threads,
     * spec_bench interleaved; with the state alone as the measure, the
     * other thread waited through every GDN pass of a verify). */
    if ((size_t)(R->n_pre + R->n) * d->Hv * d->dk * d->dv >= 65536) ts_cpu_parallel_for(cx, d->Hv, gdn_head, &j);
    else
        for (int h = 0; h < d->Hv; h++) gdn_head(&j, h, d->Hv);
}

/* The tape's prepared rows of the last verify block (the half of the
 * tape's prep the last recorded verify wrote), and the half the next one
 * writes. */
static inline float *tape_prep(const gdn_dims *d, const ts_gdn_args *a, const ts_step *st, int next) {
    return a->tape_prep + (size_t)(st->half ^ next) * a->Rv * d->C;
}

/* Eager form of a lazy rollback for one layer: conv and recurrent state
 * become the snapshot advanced by the first P taped rows. The snapshot and
 * the tape stay as they are. */
static void materialize(const ts_cpu_ctx *cx, const gdn_dims *d, const ts_gdn_args *a, const ts_step *st,
                        const gdn_ptrs *g, int P) {
    gdn_seq q = {g->snap_conv, a->tape_qkv, P, NULL, 0};
    gdn_conv_tail(d, &q, g->conv);
    gdn_rows R = {tape_prep(d, a, st, 0), a->tape_a, a->tape_b, P, NULL, NULL, NULL, 0, NULL};
    gdn_heads(cx, d, a, g->snap_S, g->S, NULL, &R);
}

void ts_cpu_gdn_materialize(ts_stream *s, const ts_gdn_args *a) {
    if (!s->step.pend) return;
    const gdn_dims d = dims_of(a);
    const gdn_ptrs g = ptrs_of(a, &s->step);
    materialize(ts_cpu_stream_ctx(s), &d, a, &s->step, &g, s->step.pend);
}

/* One state pass of a GDN layer over n rows (qkv [n, C], aa/bb [n, Hv]),
 * with P pending rows of a lazy rollback first. record TS_REC_TAPE: a
 * verify block (n > 1, n <= Rv): the block-start state becomes the snapshot
 * and the rows' inputs and prepared rows the tape; TS_REC_SWAP: a run-ahead
 * step (one row, P = 0): the trade alone, nothing taped. prep: where the
 * rows' prepared values go when not taped ([n, C]).
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
 *    snapshot (its new block start), so the pending chain is cut at every
 *    verify.
 *  - verify or run-ahead step, nothing pending: live and snapshot buffers
 *    trade places (conv and recurrent): the block-start state becomes the
 *    snapshot without a copy, and the rows are written into the other
 *    buffer.
 *  - otherwise the state advances in place.
 * The trades are made on g (this op's view); the caller's parities follow
 * by ts_gdn_parity_after. */
static void gdn_pass(const ts_cpu_ctx *cx, const gdn_dims *d, const ts_gdn_args *a, const ts_step *st, gdn_ptrs *g,
                     int P, int record, const float *qkv, const float *aa, const float *bb, int n, float *o,
                     float *prep) {
    const int Hv = d->Hv;
    gdn_seq q;
    const float *src;
    float *mid = NULL;
    if (record == TS_REC_TAPE) prep = tape_prep(d, a, st, 1); /* the other half: the pending rows may be in this one */
    float *dst = NULL;
    if (P) {
        q = (gdn_seq){g->snap_conv, a->tape_qkv, P, qkv, n};
        src = g->snap_S;
        if (record) mid = g->snap_S;
        else dst = g->snap_S; /* in place in the snapshot, which then becomes the live buffer */
    } else if (record) {
        float *t = g->S;
        g->S = g->snap_S;
        g->snap_S = t;
        t = g->conv;
        g->conv = g->snap_conv;
        g->snap_conv = t;
        q = (gdn_seq){g->snap_conv, qkv, n, NULL, 0};
        src = g->snap_S;
    } else {
        q = (gdn_seq){g->conv, qkv, n, NULL, 0};
        src = g->S;
    }
    if (!dst) dst = g->S; /* (after the swap above) */
    gdn_prep(d, a, &q, P, prep); /* the pending rows are prepared already (tape) */
    gdn_conv_tail(d, &q, g->conv);
    if (P && record) { /* the new block-start conv state: snapshot + pending rows, in place */
        gdn_seq qp = {g->snap_conv, a->tape_qkv, P, NULL, 0};
        gdn_conv_tail(d, &qp, g->snap_conv);
    }
    gdn_rows R = {P ? tape_prep(d, a, st, 0) : NULL, P ? a->tape_a : NULL, P ? a->tape_b : NULL, P, prep, aa, bb, n, o};
    gdn_heads(cx, d, a, src, dst, mid, &R);
    if (dst != g->S) { /* the old live state is stale: it becomes the snapshot buffer */
        g->snap_S = g->S;
        g->S = dst;
    }
    if (record == TS_REC_TAPE) { /* last: the pending rows above were read from the old tape */
        memcpy(a->tape_qkv, qkv, sizeof(float) * (size_t)n * d->C);
        memcpy(a->tape_a, aa, sizeof(float) * (size_t)n * Hv);
        memcpy(a->tape_b, bb, sizeof(float) * (size_t)n * Hv);
    }
}

/* ---- chunked prefill ---- */

typedef struct chunk_job {
    const gdn_dims *d;
    const ts_gdn_args *a;
    float *S, *conv; /* the live state */
} chunk_job;

/* Causal conv + SiLU of channels [c0, c0 + nc) over n rows, then those
 * channels' conv state takes the last K-1 inputs. */
static void conv_channels(const chunk_job *j, int c0, int nc) {
    const int C = j->d->C, K = j->d->K, n = j->a->n;
    const float *qkv = j->a->qkv;
    ts_conv_silu(qkv + c0, C, j->conv + c0, C, j->a->conv_w + c0, C, K, j->a->pf_conv + c0, C, n, nc);
    if (K > 1) {
        /* new state = last K-1 rows of [old state ; inputs]; increasing t
         * reads increasing rows, so shifting the old state down in place is safe */
        float *sw = j->conv;
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
static void key_head(const chunk_job *j, int h) {
    const int C = j->d->C, dk = j->d->dk;
    float *x = j->a->pf_conv;
    conv_channels(j, h * dk, dk);
    conv_channels(j, j->d->Kd + h * dk, dk);
    l2norm_rows(x + (size_t)h * dk, C, j->a->n, dk, 1.0f / sqrtf((float)dk));
    l2norm_rows(x + j->d->Kd + (size_t)h * dk, C, j->a->n, dk, 1.0f);
}

/* The conv of value head h's v channels, its log decay g and beta. */
static void value_head(const chunk_job *j, int h) {
    const ts_gdn_args *a = j->a;
    const int Hv = j->d->Hv, n = a->n;
    conv_channels(j, 2 * j->d->Kd + h * j->d->dv, j->d->dv);
    float *g = a->pf_gate, *beta = a->pf_gate + (size_t)n * Hv;
    for (int i = 0; i < n; i++) {
        g[(size_t)i * Hv + h] = a->neg_A[h] * ts_softplus(a->a[(size_t)i * Hv + h] + a->dt_bias[h]);
        beta[(size_t)i * Hv + h] = ts_sigmoid(a->b[(size_t)i * Hv + h]);
    }
}

/* The delta rule of value head h over the rows (chunks in order), then its
 * gated RMSNorm (plain weight, norm before the silu(z) gate). */
static void delta_head(const chunk_job *j, int h, float *ws) {
    const gdn_dims *d = j->d;
    const ts_gdn_args *a = j->a;
    const int C = d->C, dk = d->dk, dv = d->dv, Hv = d->Hv, r = Hv / d->Hk, n = a->n;
    const float *x = a->pf_conv, *g = a->pf_gate, *beta = a->pf_gate + (size_t)n * Hv;
    float *S = j->S + (size_t)h * dk * dv;
    const float *q = x + (size_t)(h / r) * dk, *k = x + d->Kd + (size_t)(h / r) * dk, *v = x + 2 * (size_t)d->Kd + (size_t)h * dv;
    for (int c0 = 0; c0 < n; c0 += TS_DELTA_CHUNK) {
        const int L = TS_MIN(TS_DELTA_CHUNK, n - c0);
        const size_t off = (size_t)c0 * C;
        ts_delta_chunk(S, q + off, k + off, v + off, C, g + (size_t)c0 * Hv + h, beta + (size_t)c0 * Hv + h, Hv,
                       a->out + (size_t)c0 * d->Vd + (size_t)h * dv, d->Vd, L, dk, dv, ws);
    }
    for (int i = 0; i < n; i++) {
        float *oh = a->out + (size_t)i * d->Vd + (size_t)h * dv;
        float *zh = a->z + (size_t)i * d->Vd + (size_t)h * dv; /* scratch: overwritten */
        ts_add_rmsnorm(oh, NULL, a->norm, oh, 1, dv, a->eps);
        ts_silu_mul(zh, oh, (size_t)dv);
        memcpy(oh, zh, sizeof(float) * (size_t)dv);
    }
}

static float *slot_ws(const chunk_job *j, int item) {
    return j->a->pf_chunk + (size_t)item * ts_delta_chunk_ws(TS_DELTA_CHUNK, j->d->dk, j->d->dv);
}

/* Two passes (value heads share key heads): item < Hk is key head item,
 * else value head item - Hk; then the delta rule per work item. */
static void pass_conv(void *ctx, int item, int n_items) {
    const chunk_job *j = ctx;
    (void)n_items;
    if (item < j->d->Hk) key_head(j, item);
    else value_head(j, item - j->d->Hk);
}

static void pass_delta(void *ctx, int item, int n_items) {
    const chunk_job *j = ctx;
    for (int h = item; h < j->d->Hv; h += n_items) delta_head(j, h, slot_ws(j, item));
}

/* One pass when every value head has its own key head (Hv == Hk): a head's
 * conv, norms, delta rule and gated norm in one go, its rows still in cache. */
static void pass_fused(void *ctx, int item, int n_items) {
    const chunk_job *j = ctx;
    for (int h = item; h < j->d->Hv; h += n_items) {
        key_head(j, h);
        value_head(j, h);
        delta_head(j, h, slot_ws(j, item));
    }
}

static void chunked(const ts_cpu_ctx *cx, const gdn_dims *d, const ts_gdn_args *a, const gdn_ptrs *g) {
    chunk_job j = {d, a, g->S, g->conv};
    const int slots = TS_MIN(d->Hv, TS_DELTA_SLOTS);
    if (d->Hv == d->Hk) {
        ts_cpu_parallel_for(cx, slots, pass_fused, &j);
        return;
    }
    ts_cpu_parallel_for(cx, d->Hk + d->Hv, pass_conv, &j);
    ts_cpu_parallel_for(cx, slots, pass_delta, &j);
}

/* ---- the op ---- */

void ts_cpu_gdn(ts_stream *s, ts_mode m, const ts_gdn_args *a) {
    const ts_cpu_ctx *cx = ts_cpu_stream_ctx(s);
    const ts_step *st = &s->step;
    const gdn_dims d = dims_of(a);
    const int n = a->n, Hv = d.Hv, dv = d.dv;
    gdn_ptrs g = ptrs_of(a, st);
    const int tape = a->tape_qkv != NULL, pair = a->S[1] && a->conv[1];
    /* verify: snapshot + tape (n <= Rv: one pass); run-ahead: the trade of
     * the pairs alone, one row with nothing pending (generate.c keeps it so) */
    const int record = tape && st->record == TS_REC_TAPE ? TS_REC_TAPE
                       : pair && st->record == TS_REC_SWAP && n == 1 && !(tape && st->pend) ? TS_REC_SWAP
                                                                                            : 0;
    if (st->record == TS_REC_SWAP && record != TS_REC_SWAP) {
        ts_be_fail(s, TS_E_ARG, "GDN: a run-ahead step needs the state pairs, one row and no pending rows");
        return;
    }
    int P = tape ? st->pend : 0;
    if (m == TS_MODE_PREFILL && n > 1 && a->pf_conv) {
        /* prefill: the chunked delta rule and the gated norm, threaded over
         * heads (rounding may differ; never for verify); after a lazy
         * rollback, the pending rows are applied first */
        if (P) materialize(cx, &d, a, st, &g, P);
        chunked(cx, &d, a, &g);
        return;
    }
    for (int off = 0; off < n;) {
        int k = record ? n : TS_MIN(a->cap, n - off); /* (SWAP: n = 1) */
        gdn_pass(cx, &d, a, st, &g, P, record, a->qkv + (size_t)off * d.C, a->a + (size_t)off * Hv,
                 a->b + (size_t)off * Hv, k, a->out + (size_t)off * d.Vd, a->rows);
        off += k;
        P = 0;
    }
    /* gated RMSNorm per (row, head): plain weight, norm before the silu(z) gate */
    ts_silu(a->z, a->z, (size_t)n * d.Vd);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < Hv; h++) {
            float *oh = a->out + (size_t)i * d.Vd + (size_t)h * dv;
            const float *zh = a->z + (size_t)i * d.Vd + (size_t)h * dv;
            double ss = 0;
            for (int j = 0; j < dv; j++) ss += (double)oh[j] * oh[j];
            float rr = 1.0f / sqrtf((float)(ss / dv) + a->eps);
            for (int j = 0; j < dv; j++) oh[j] = oh[j] * rr * a->norm[j] * zh[j];
        }
}
