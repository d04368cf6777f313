/* mtp_draft.c: the MTP drafter (drafter.h) over the model's own head
 * (model-spec.md §4).
 *
 * Owns: which MTP rows run when (prompt catch-up, the real rows after a
 * verify, the chain of speculative rows), the choice of a draft from the
 * head's logits (argmax on the backend, or the sampler over rows read
 * explicitly) and the confidence cut.
 * Does not own: the head's forward (model/qwen35.c), the loop (spec.c).
 *
 * Row pairing (model-spec §4.2): MTP row i is (token x_{i+1}, target hidden
 * h_i, position i). After a verify that keeps rows pos..pos+keep-1, their
 * next tokens are known (the accepted drafts and the correction/bonus
 * token), so the head runs over exactly those rows, which also fills its KV
 * cache for them; the last row's logits give draft 1, and drafts 2..M feed
 * back the head's own normed output hidden at the following positions.
 * Those speculative MTP rows are overwritten by the real ones after the
 * next verify.
 */
#include <math.h>

#include "gen/drafter.h"
#include "model/tp.h"

/* Pick a draft from the MTP logits in sc.logits, of which the first K (the
 * drafting vocabulary) were computed; with sampling, keep its distribution in
 * dprobs row j for the acceptance test. *prob (if prob is not NULL): the
 * draft's probability under the drafter (greedy: the softmax over the K
 * logits, one more pass over them). */
static int32_t pick_draft(ts_drafter *d, int j, float *prob) {
    ts_session *s = d->s;
    const int V = s->e->model.cfg.vocab, K = d->K;
    ts_stream *bs = s->st.s;
    float *lg = s->st.sc.logits;
    if (!d->smp) { /* the backend's argmax: one id (and its probability) read back */
        int32_t id;
        bs->be->ops->argmax(bs, tv_f32(lg, 1, V), K, &id, prob);
        return id;
    }
    /* any q is correct as long as the acceptance test sees the q that was
     * drawn from: the sampler's pipeline over the MTP logits (its penalty
     * history lacks the earlier drafts of this block; that only costs
     * acceptance), with probability 0 outside the drafting vocabulary */
    if (K < V) ts_be_fill(bs, lg + K, (size_t)(V - K), -INFINITY);
    float *q = s->dprobs + (size_t)j * V; /* host memory: the sampler's */
    ts_sampler_probs(d->smp, ts_be_host(bs, lg, (size_t)V), q, NULL);
    int32_t id = ts_sampler_draw(d->smp, q);
    if (prob) *prob = q[id];
    return id;
}

/* Prefill in the same chunks as ts_session_feed runs the MTP head over every
 * row whose next token is known. The row whose next token is not known yet
 * waits in mtp_hid[0]. */
static int mtp_prompt(ts_drafter *d, const int32_t *chunk, int k) {
    ts_mtp_drafter *md = (ts_mtp_drafter *)d;
    ts_session *s = d->s;
    const ts_model *m = &s->e->model;
    ts_state *st = &s->st;
    const int H = m->cfg.H;
    int32_t toks[2 * TS_SPEC_MAX_DRAFT + 2];
    int nr = 0, p0 = s->pos - k - md->have_pend, rc;
    const int piece = TS_MIN((int)(sizeof toks / sizeof toks[0]), st->sc.R);
    /* rows in pieces of at most R (toks is small: the head runs per piece) */
    if (md->have_pend) toks[nr++] = chunk[0];
    /* each piece's hidden rows [i0, i] land in mtp_hid from row nr0 on: one
     * copy a piece (on every rank with tensor parallelism) */
    for (int i = 0, i0 = 0, nr0 = nr; i + 1 < k; i++) {
        toks[nr++] = chunk[i + 1];
        if (nr == piece || i + 2 == k) {
            ts_state_copy(m, st, s->mtp_hid + (size_t)nr0 * H, st->sc.hidden + (size_t)i0 * H, (size_t)(i - i0 + 1) * H);
            if ((rc = ts_mtp_forward(m, st, toks, s->mtp_hid, nr, p0, s->mtp_hid, NULL, s->draft_lowp, -1))) return rc;
            p0 += nr;
            nr = nr0 = 0;
            i0 = i + 1;
        }
    }
    if (nr && (rc = ts_mtp_forward(m, st, toks, s->mtp_hid, nr, p0, s->mtp_hid, NULL, s->draft_lowp, -1))) return rc;
    ts_state_copy(m, st, s->mtp_hid, st->sc.hidden + (size_t)(k - 1) * H, (size_t)H);
    md->have_pend = 1;
    return 0;
}

static void mtp_start(ts_drafter *d, int32_t last) {
    ts_mtp_drafter *md = (ts_mtp_drafter *)d;
    md->rtok[0] = last;
    md->nr = 1;
    md->rpos = d->s->pos - 1;
    md->rhid = d->s->mtp_hid;
}

/* A drafting pass of the head (n rows from toks and the hiddens h at pos,
 * out to h_out, the drafting vocabulary's head rows). Greedy drafting
 * leaves the stream unsynchronised (ts_state.defer_sync): pick_draft's
 * argmax reads the id, the one wait of the draft, and pass_error then
 * collects an error of either. Not with tensor parallelism (its ranks
 * meet inside the pass). */
static int mtp_pass(ts_drafter *d, const int32_t *toks, const float *h, int n, int pos, float *h_out) {
    ts_session *s = d->s;
    const ts_model *m = &s->e->model;
    ts_state *st = &s->st;
    st->defer_sync = !d->smp && !m->tp && ts_one_wait_on();
    int rc = ts_mtp_forward(m, st, toks, h, n, pos, h_out, NULL, s->draft_lowp, d->K);
    st->defer_sync = 0;
    return rc;
}
static int pass_error(ts_drafter *d) {
    ts_session *s = d->s;
    return !d->smp && !s->e->model.tp ? ts_be_sync(s->st.s, NULL) : 0;
}

/* Greedy drafts chained on the device (issue 17: no host round trip per
 * draft), where the session runs ahead (ts_session_ahead: a device backend)
 * and no confidence cut asks for each draft's probability: each head pass
 * ends with argmax_ahead into id slot j, which the next pass's embedding
 * reads on the device; the host waits once, for the last draft's ticket,
 * then reads the M ids (their copies precede it in the stream). The same
 * passes and argmaxes as the loop below, so the same drafts. */
static int mtp_propose_chain(ts_drafter *d, int mm, int32_t *out) {
    ts_mtp_drafter *md = (ts_mtp_drafter *)d;
    ts_session *s = d->s;
    const ts_model *m = &s->e->model;
    ts_state *st = &s->st;
    ts_stream *bs = st->s;
    const ts_backend_ops *op = bs->be->ops;
    const int H = m->cfg.H, V = m->cfg.vocab, nr = md->nr, rpos = md->rpos;
    float *h = s->mtp_hid + (size_t)(nr - 1) * H;
    st->defer_sync = 1;
    int rc = ts_mtp_forward(m, st, md->rtok, md->rhid, nr, rpos, s->mtp_hid, NULL, s->draft_lowp, d->K);
    const int32_t *dv = rc ? NULL : op->argmax_ahead(bs, tv_f32(st->sc.logits, 1, V), d->K, 0);
    for (int j = 1; j < mm && !rc; j++)
        if (!(rc = ts_mtp_forward(m, st, dv, h, 1, rpos + nr - 1 + j, h, NULL, s->draft_lowp, d->K)))
            dv = op->argmax_ahead(bs, tv_f32(st->sc.logits, 1, V), d->K, j);
    st->defer_sync = 0;
    if (!rc) rc = op->ahead_read(bs, mm - 1, &out[mm - 1]);
    for (int j = 0; j + 1 < mm && !rc; j++) rc = op->ahead_read(bs, j, &out[j]);
    int rs = ts_be_sync(bs, NULL);
    return rc ? rc : rs ? rs : mm;
}

static int mtp_propose(ts_drafter *d, int mm, int32_t *out) {
    ts_mtp_drafter *md = (ts_mtp_drafter *)d;
    ts_session *s = d->s;
    /* (ts_session_ahead: resolved on, so the backend has the ops and there
     * is no tensor parallelism) */
    if (!d->smp && d->p_min <= 0 && mm > 1 && mm <= TS_AHEAD_TICKETS && ts_session_ahead(s) && ts_one_wait_on())
        return mtp_propose_chain(d, mm, out);
    const int H = s->e->model.cfg.H, nr = md->nr, rpos = md->rpos;
    /* greedy: each pass of the head queues its argmax behind it and waits
     * once, for the id (mtp_pass); sampling reads the row, which waits */
    int rc = mtp_pass(d, md->rtok, md->rhid, nr, rpos, s->mtp_hid);
    if (rc) return rc;
    float *h = s->mtp_hid + (size_t)(nr - 1) * H;
    /* confidence cut (draft_p_min): a draft the drafter itself thinks
     * unlikely is not worth a verify row, nor are the drafts that would
     * follow it. Which rows get verified never changes the output, only the
     * work. */
    float pd = 1.0f, *pp = d->p_min > 0 ? &pd : NULL;
    out[0] = pick_draft(d, 0, pp);
    if ((rc = pass_error(d))) return rc;
    if (pd < d->p_min) return 0;
    for (int j = 1; j < mm; j++) {
        if ((rc = mtp_pass(d, &out[j - 1], h, 1, rpos + nr - 1 + j, h))) return rc;
        out[j] = pick_draft(d, j, pp);
        if ((rc = pass_error(d))) return rc;
        if (pd < d->p_min) return j;
    }
    return mm;
}

static void mtp_on_accept(ts_drafter *d, const int32_t *out, int keep, int pos_blk) {
    ts_mtp_drafter *md = (ts_mtp_drafter *)d;
    memcpy(md->rtok, out, sizeof(int32_t) * (size_t)keep);
    md->nr = keep;
    md->rpos = pos_blk;
    md->rhid = d->s->st.sc.hidden; /* the verify's final hiddens of the kept rows */
}

static const ts_drafter_ops mtp_ops = {"mtp", mtp_prompt, mtp_start, mtp_propose, mtp_on_accept};

ts_drafter *ts_mtp_drafter_init(ts_mtp_drafter *md, ts_session *s, ts_sampler *smp, int K, float p_min) {
    memset(md, 0, sizeof *md);
    md->base.ops = &mtp_ops;
    md->base.s = s;
    md->base.max_draft = s->params.spec_draft;
    md->base.smp = smp;
    md->base.K = K;
    md->base.p_min = p_min;
    return &md->base;
}
