/* dflash_draft.c: the DFlash drafter (drafter.h) over model/dflash.c.
 *
 * Owns: the kept rows of every verify entering the drafter's cache (the
 * rows a DFlash session feeds, prompt chunks and a chat's or a request's
 * history alike, enter in ts_session_feed), the block [last, mask x (B-1)] and the
 * choice of its drafts (argmax on the backend, or the sampler over rows read
 * explicitly) with the confidence cut.
 * Does not own: the drafter's forward (model/dflash.c), the loop (spec.c).
 *
 * Positions: after the target has fed positions [0, pos) (prompt, accepted
 * rows), their taps are in the drafter's cache; the last emitted token sits
 * at position pos (not fed yet); the block covers pos..pos+B-1 and block row
 * i drafts position pos + i. After a verify of the block at pos_blk that
 * keeps `keep` rows, the verify's taps of rows 0..keep-1 (positions
 * pos_blk..pos_blk+keep-1) become context rows, overwriting the block's
 * K/V there; the new last token is out[keep-1].
 *
 * Drafts of one block are drawn independently per position (each row's
 * distribution is a function of the context alone), which is what the
 * acceptance test needs: each draft's q is the distribution it was drawn
 * from. A rejected draft ends the block as for MTP.
 */
#include <math.h>

#include "gen/drafter.h"

static ts_mode draft_mode(const ts_session *s) { return s->draft_lowp ? TS_MODE_DRAFT : TS_MODE_EXACT; }

/* Nothing to do: ts_session_feed has put the chunk's context rows into the
 * drafter's cache (it does so for every row a DFlash session feeds). */
static int df_prompt(ts_drafter *d, const int32_t *toks, int k) {
    (void)d;
    (void)toks;
    (void)k;
    return 0;
}

static void df_start(ts_drafter *d, int32_t last) { ((ts_dflash_drafter *)d)->last = last; }

static int df_propose(ts_drafter *d, int mm, int32_t *out) {
    ts_dflash_drafter *dd = (ts_dflash_drafter *)d;
    ts_session *s = d->s;
    const ts_dflash *df = s->e->dflash;
    ts_stream *bs = s->st.s;
    const int V = s->e->model.cfg.vocab, K = d->K;
    if (dd->err) return dd->err;
    if (mm > dd->B - 1) mm = dd->B - 1;
    int32_t ids[TS_DFLASH_MAX_BLOCK];
    ids[0] = dd->last;
    for (int i = 1; i <= mm; i++) ids[i] = df->cfg.mask_id;
    /* the drafts' logits in the verify logits planes: free until the verify */
    float *lg = s->vlogits;
    int rc = ts_dflash_block(df, &s->df, &s->e->model, bs, ids, mm + 1, s->pos, lg, K, draft_mode(s));
    if (rc) return rc;
    if (!d->smp) {
        float prob[TS_DFLASH_MAX_BLOCK];
        bs->be->ops->argmax(bs, tv_f32(lg, mm, V), K, out, d->p_min > 0 ? prob : NULL);
        /* confidence cut: the first draft the drafter gives less than p_min ends the block there */
        if (d->p_min > 0)
            for (int j = 0; j < mm; j++)
                if (prob[j] < d->p_min) return j;
        return mm;
    }
    for (int j = 0; j < mm; j++) {
        float *row = lg + (size_t)j * V;
        if (K < V) ts_be_fill(bs, row + K, (size_t)(V - K), -INFINITY);
        float *q = s->dprobs + (size_t)j * V; /* host memory: the sampler's */
        ts_sampler_probs(d->smp, ts_be_host(bs, row, (size_t)V), q, NULL);
        out[j] = ts_sampler_draw(d->smp, q);
        if (q[out[j]] < d->p_min) return j;
    }
    return mm;
}

static void df_on_accept(ts_drafter *d, const int32_t *out, int keep, int pos_blk) {
    ts_dflash_drafter *dd = (ts_dflash_drafter *)d;
    ts_session *s = d->s;
    dd->last = out[keep - 1];
    /* an error is returned by the next propose (the stream's message stays) */
    dd->err = ts_dflash_context(s->e->dflash, &s->df, s->st.s, s->df_taps, keep, pos_blk, draft_mode(s));
}

static const ts_drafter_ops dflash_ops = {"dflash", df_prompt, df_start, df_propose, df_on_accept};

ts_drafter *ts_dflash_drafter_init(ts_dflash_drafter *dd, ts_session *s, ts_sampler *smp, int B, int K, float p_min) {
    memset(dd, 0, sizeof *dd);
    dd->base.ops = &dflash_ops;
    dd->base.s = s;
    dd->base.max_draft = B - 1;
    dd->base.n_taps = s->e->dflash->cfg.n_taps;
    dd->base.tap_layers = s->e->dflash->cfg.taps;
    dd->base.smp = smp;
    dd->base.K = K;
    dd->base.p_min = p_min;
    dd->B = B;
    return &dd->base;
}
