/* spec.c: speculative decoding: the model's own MTP head, a DFlash block
 * drafter, or n-gram lookup in the context (design.md "Speculative
 * decoding", model-spec.md §4).
 *
 * Owns: batched verification with a GDN tape, rollback by tape replay, the
 * generation loop over a drafter, greedy acceptance and speculative sampling, and the
 * statistics of ts_gen_stats' spec fields.
 * Does not own: the forward (qwen35.c), the buffers (session.c allocates them
 * from the plan: plan.c), the plain decode loop (generate.c).
 *
 * Exactness. A verify block of M+1 rows goes through ts_forward with the
 * row-exact kernels (prefill = 0): every row is computed with the same
 * kernels and reduction order as a one-row decode step, so its logits are
 * bit-identical to the ones plain decoding would see. Greedy acceptance
 * therefore reproduces plain greedy output exactly. Rollback never recomputes
 * a projection: each GDN layer's state is the block-start snapshot advanced
 * over the kept rows with the state-advance arithmetic on the taped inputs
 * (pre-conv qkv, a, b), the very operations the verify pass did, so it is
 * the same bits as decoding the kept rows one at a time.
 * KV caches (main and MTP) need no undo: rows past the position are never
 * read and are overwritten by the next block.
 *
 * Lazy rollback. Replaying at rollback time costs a read of the snapshot and
 * a write of the live state for all GDN layers (18 x 1 MiB each way on the
 * 0.8B shape) on top of the replay arithmetic, and the next pass reads and
 * writes that state again. So ts_spec_rollback only truncates (position)
 * and records the kept row count (ts_state.gdn_pend): O(1). The next
 * forward (a decode row, the next verify block, a prompt chunk) starts each
 * head of each GDN layer from the snapshot, advances the pending rows while
 * the head's state is in cache, then its own rows, and writes the state
 * once (qwen35.c, gdn_pass): the replay's memory traffic disappears, its
 * arithmetic moves into the next pass. A verify after a rollback also
 * writes its block-start state (snapshot + pending rows) over the snapshot,
 * so pending rows never chain across blocks. Readers of the raw state
 * (tests, anything outside ts_forward) call ts_spec_materialize first;
 * ts_session_reset drops the pending rows. The MTP head has no GDN layer,
 * so drafting between a rollback and the next verify never needs the state.
 *
 * No state copies on the happy path: verify swaps the live and snapshot
 * buffers (recurrent and conv) and advances from the block-start state into
 * the other buffer; nothing is copied when every draft is accepted.
 *
 * Drafting is behind the drafter interface (drafter.h; the MTP head,
 * gen/mtp_draft.c, or the DFlash block drafter, gen/dflash_draft.c, when gen
 * params dflash_block > 0: blocks of B rows verified the same way; or the
 * n-gram drafter, gen/ngram_draft.c, when gen params spec_ngram > 0: drafts
 * copied from the context, which may find none: a one-row step). This loop
 * asks the drafter to catch up on the prompt, to propose
 * a block, and tells it which rows a verify kept. Verification reads back
 * the argmax ids of the block's rows (greedy) or the rows themselves
 * (sampling), never logit planes it does not need.
 *
 * Context limit: a block never writes past n_ctx: the drafts of a block are
 * clipped to n_ctx - pos - 1 (and to the token budget), down to a plain
 * one-row step.
 */
#include <math.h>

#include "gen/constraint.h"
#include "gen/drafter.h"
#include "gen/sample.h"
#include "gen/spec.h"

/* ---- verify and rollback ---- */

int ts_spec_verify(ts_session *s, const int32_t *ids, int n, ts_error *err) {
    const ts_model *m = &s->e->model;
    const ts_config *c = &m->cfg;
    ts_state *st = &s->st;
    if (n < 1 || n > st->tape_rows)
        return ts_fail(err, TS_E_ARG, "a verify block of %d rows (the session allows 1..%d)", n, st->tape_rows);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return ts_fail(err, TS_E_ARG, "token id %d is outside the vocabulary [0, %d)", ids[i], c->vocab);
    if ((long)s->pos + n > st->n_ctx)
        return ts_fail(err, TS_E_CONTEXT, "%d rows at position %d exceed the context limit of %d tokens", n, s->pos,
                       st->n_ctx);
    st->tape_on = n > 1;
    unsigned fp = st->s->be->ops->enter(st->s); /* (nests inside ts_generate's) */
    int rc = ts_forward(m, st, ids, n, s->pos, s->vlogits, 0);
    st->s->be->ops->leave(st->s, fp);
    st->tape_on = 0;
    if (rc) {
        s->have_last = 0;
        return ts_fail(err, rc, "backend %s: %s", st->s->be->name, st->s->msg);
    }
    s->spec_rows = n;
    s->pos += n;
    s->have_last = 1;
    ts_be_copy(st->s, s->last_hidden, st->sc.hidden + (size_t)(n - 1) * c->H, (size_t)c->H);
    return 0;
}

void ts_spec_rollback(ts_session *s, int keep) {
    const ts_config *c = &s->e->model.cfg;
    ts_state *st = &s->st;
    const int n = s->spec_rows;
    if (keep < 1) keep = 1;
    if (keep < n) {
        /* Lazy: the GDN state is now "snapshot + the first keep taped rows"
         * (model.h, gdn_pend); the next forward applies them in its own pass
         * over the state. A second rollback of the same block just moves the
         * mark (both count from the same snapshot). */
        st->gdn_pend = keep;
        s->pos -= n - keep;
        s->spec_rows = keep;
    }
    ts_be_copy(st->s, st->sc.logits, s->vlogits + (size_t)(keep - 1) * c->vocab, (size_t)c->vocab);
    ts_be_copy(st->s, s->last_hidden, st->sc.hidden + (size_t)(keep - 1) * c->H, (size_t)c->H);
    s->have_last = 1;
}

void ts_spec_materialize(ts_session *s) {
    unsigned fp = s->st.s->be->ops->enter(s->st.s);
    ts_gdn_materialize(&s->e->model, &s->st);
    s->st.s->be->ops->leave(s->st.s, fp);
}

int ts_spec_accept_greedy(const int32_t *targ, const int32_t *d, int m, int32_t *out) {
    /* row a's target token: the draft while they agree, then the target's
     * own token */
    int a = 0;
    for (;; a++) {
        out[a] = targ[a];
        if (a == m || out[a] != d[a]) return a;
    }
}

/* Row j's target distribution into ptmp: the sampler's full pipeline with
 * the drafts accepted so far in its history (penalties), under the mask of
 * the constraint state g (before its start id: every id but the stop ids). */
static int target_probs(ts_sampler *smp, ts_cgen *g, const float *row, float *ptmp, ts_error *err) {
    int rc = ts_cgen_arm(g, smp, err);
    if (!rc) rc = ts_sampler_probs(smp, row, ptmp, err);
    ts_cgen_disarm(smp);
    return rc;
}

int ts_spec_accept(const float *vlogits, const float *dprobs, const int32_t *d, int m, int V, ts_sampler *smp,
                   float *ptmp, int32_t *out) {
    return ts_spec_accept_c(vlogits, dprobs, d, m, V, smp, ptmp, out, NULL, NULL);
}

int ts_spec_accept_c(const float *vlogits, const float *dprobs, const int32_t *d, int m, int V, ts_sampler *smp,
                     float *ptmp, int32_t *out, const ts_cgen *cg, ts_error *err) {
    /* the constraint's state along the accepted drafts: a copy (the real one
     * moves as the loop emits) */
    ts_cgen g, *gp = NULL;
    if (cg && cg->c) ts_cgen_lookahead(&g, cg), gp = &g;
    int rc;
    for (int j = 0; j < m; j++) {
        /* dprobs NULL: q is a point mass at d[j] (q(d) = 1, 0 elsewhere),
         * read through the same expressions as a row would be, so a one-hot
         * row and NULL give the same bits (tests/test_ngram.c) */
        const float *q = dprobs ? dprobs + (size_t)j * V : NULL;
        if ((rc = target_probs(smp, gp, vlogits + (size_t)j * V, ptmp, err))) return rc;
        float pd = ptmp[d[j]], qd = q ? q[d[j]] : 1.0f;
        /* accept with probability min(1, p/q); q(d) > 0 since d was drawn from q */
        if (qd <= 0.0f || ts_sampler_uniform(smp) * qd < pd) {
            out[j] = d[j];
            ts_sampler_accept(smp, d[j]);
            /* accepted, so allowed (p(d) > 0): the state takes it */
            if (gp && (rc = ts_cgen_advance(gp, d[j], err))) {
                if (rc < 0) return rc;
                return j; /* the reply is complete and there are no stop ids: d[j] ends it */
            }
            continue;
        }
        /* rejected: draw from the normalised residual max(0, p - q) */
        double sum = 0;
        /* q one-hot at d[j] (q NULL): the residual is p itself elsewhere (p - 0
         * is exactly p) and 0 at d[j] (rejected, so p(d) <= u < 1 = q(d)):
         * the bits of a one-hot row */
        if (!q) ptmp[d[j]] = 0.0f;
        for (int i = 0; i < V; i++) {
            if (q) ptmp[i] = ptmp[i] > q[i] ? ptmp[i] - q[i] : 0.0f;
            sum += ptmp[i];
        }
        if (sum > 0) {
            float inv = (float)(1.0 / sum);
            for (int i = 0; i < V; i++) ptmp[i] *= inv;
            out[j] = ts_sampler_draw(smp, ptmp);
        } else { /* p == q up to rounding: the rejection had probability ~0 */
            out[j] = d[j];
        }
        ts_sampler_accept(smp, out[j]);
        return j;
    }
    if ((rc = target_probs(smp, gp, vlogits + (size_t)m * V, ptmp, err))) return rc;
    out[m] = ts_sampler_draw(smp, ptmp);
    ts_sampler_accept(smp, out[m]);
    return m;
}

/* The drafting vocabulary: ids [0, K). A BPE vocabulary lists its tokens in
 * merge order, which follows their frequency in the tokenizer's training
 * text, so a prefix holds the tokens a draft is likely to be right about.
 * Automatic: the whole vocabulary up to 32,768 ids, else an eighth of it
 * (at least 32,768). Why that split: on the released models' 248,320 ids the
 * head is the bulk of a draft step (0.8B shape: a draft 0.29x of a decode
 * step with every id, 0.06x with 31,040), while on a small vocabulary the
 * head costs little and a prefix costs acceptance (the default model, 12,288
 * ids, 16 held-out windows, --draft 2: 0.657 of the drafts accepted with
 * every id, 0.595 with 4,096, 0.555 with 2,048; bench/spec/RESULTS.md). */
int ts_spec_draft_vocab(int want, int V) {
    if (want < 0) return V;
    int K = want > 0 ? want : V <= 32768 ? V : TS_MAX(32768, V / 8);
    return TS_MIN(K, V);
}

/* ---- the generation loop ---- */

/* rows of a verify block at most: MTP's M + 1 or a DFlash block */
#define SPEC_ROWS TS_DFLASH_MAX_BLOCK
_Static_assert(SPEC_ROWS >= TS_SPEC_MAX_DRAFT + 1, "a verify block holds an MTP block");

static int spec_loop(ts_session *s, ts_drafter *dr, int M, const int32_t *prompt, int n_prompt, const ts_gen_params *p,
                     ts_sampler *smp, ts_cgen *cg, ts_token_cb cb, void *user, ts_gen_stats *stats, ts_error *err);

/* The n-gram drafter's generation: its checks, its index sized for every id
 * the generation can push, and a DFlash session's drafter context left
 * alone (as plain generation leaves it: ts_session_feed would otherwise run
 * the DFlash context pass over the prompt for nothing). */
static int ngram_generate(ts_session *s, const int32_t *prompt, int n_prompt, const ts_gen_params *p, ts_sampler *smp,
                          ts_cgen *cg, ts_token_cb cb, void *user, ts_gen_stats *stats, ts_error *err) {
    const int M = p->spec_draft, N = p->spec_ngram, Nmin = p->ngram_min ? p->ngram_min : TS_MIN(TS_NGRAM_MIN_DEFAULT, N);
    if (M < 1 || M > TS_SPEC_MAX_DRAFT)
        return ts_fail(err, TS_E_ARG, "n-gram drafting: draft length %d is outside 1..%d (gen params spec_draft)", M,
                       TS_SPEC_MAX_DRAFT);
    if (N < 1 || N > TS_NGRAM_MAX)
        return ts_fail(err, TS_E_ARG, "n-gram drafting: the longest n-gram, %d, is outside 1..%d (gen params spec_ngram)", N,
                       TS_NGRAM_MAX);
    if (Nmin < 1 || Nmin > N)
        return ts_fail(err, TS_E_ARG, "n-gram drafting: the shortest n-gram, %d, is outside 1..%d (gen params ngram_min, "
                       "at most spec_ngram)", Nmin, N);
    if (p->n_ngram_ctx < 0 || (p->n_ngram_ctx > 0 && !p->ngram_ctx))
        return ts_fail(err, TS_E_ARG, "n-gram drafting: %d context ids given without ids (gen params ngram_ctx)",
                       p->n_ngram_ctx);
    if (s->st.tape_rows < M + 1)
        return ts_fail(err, TS_E_ARG, "the session was created for drafts of %d tokens, %d asked (session params "
                       "ngram_draft or spec_draft)", TS_MAX(s->st.tape_rows - 1, 0), M);
    /* the history: the context before the prompt, the prompt, the emitted
     * tokens; none of the three can exceed the session's context (a longer
     * prompt fails to feed; of a longer context the last n_ctx ids count) */
    const int n_ctx = s->st.n_ctx, nh = TS_MIN(p->n_ngram_ctx, n_ctx);
    const int cap = nh + TS_MIN(n_prompt, n_ctx) + TS_MIN(TS_MAX(p->n_predict, 0), n_ctx) + 1;
    ts_ngram_drafter nd;
    int rc = ts_ngram_drafter_init(&nd, s, Nmin, N, M, cap, err);
    if (!rc) {
        if (nh) ts_ngram_index_push(&nd.ix, p->ngram_ctx + (p->n_ngram_ctx - nh), nh);
        const int quiet = s->df_quiet;
        s->df_quiet = 1;
        rc = spec_loop(s, &nd.base, M, prompt, n_prompt, p, smp, cg, cb, user, stats, err);
        s->df_quiet = quiet;
    }
    ts_ngram_drafter_free(&nd);
    return rc;
}

/* Which drafter, and the checks of its parameters; DFlash turns the
 * target's hidden-state taps on for the generation (and only then). */
int ts_spec_generate(ts_session *s, const int32_t *prompt, int n_prompt, const ts_gen_params *p, ts_sampler *smp,
                     ts_cgen *cg, ts_token_cb cb, void *user, ts_gen_stats *stats, ts_error *err) {
    const ts_model *m = &s->e->model;
    const int V = m->cfg.vocab, B = p->dflash_block;
    if (n_prompt < 1) return ts_fail(err, TS_E_ARG, "no prompt tokens");
    if (p->draft_vocab < -1) return ts_fail(err, TS_E_ARG, "drafting vocabulary %d: use K > 0, 0 (automatic) or -1 (all)",
                                            p->draft_vocab);
    if (!(p->draft_p_min >= 0.0f && p->draft_p_min <= 1.0f))
        return ts_fail(err, TS_E_ARG, "draft probability floor %g is outside [0, 1]", (double)p->draft_p_min);
    const int K = ts_spec_draft_vocab(p->draft_vocab, V);
    if (B && p->spec_ngram)
        return ts_fail(err, TS_E_ARG, "gen params dflash_block and spec_ngram both ask for a drafter: choose one");
    if (p->spec_ngram) return ngram_generate(s, prompt, n_prompt, p, smp, cg, cb, user, stats, err);
    if (B) {
        if (B < 2 || B > TS_DFLASH_MAX_BLOCK)
            return ts_fail(err, TS_E_ARG, "DFlash block of %d rows is outside 2..%d", B, TS_DFLASH_MAX_BLOCK);
        if (!s->e->dflash)
            return ts_fail(err, TS_E_UNSUPPORTED, "%s: the engine has no DFlash drafter (open it with engine params dflash = 1)",
                           s->e->dir);
        if (s->params.dflash_block < B)
            return ts_fail(err, TS_E_ARG, "the session was created for DFlash blocks of %d rows, %d asked (session params dflash_block)",
                           s->params.dflash_block, B);
        ts_state *st = &s->st;
        st->n_taps = s->e->dflash->cfg.n_taps;
        st->tap_layer = s->e->dflash->cfg.taps;
        st->tap_out = s->df_taps;
        ts_dflash_drafter dfd;
        ts_drafter *dr = ts_dflash_drafter_init(&dfd, s, smp, B, K, p->draft_p_min);
        int rc = spec_loop(s, dr, B - 1, prompt, n_prompt, p, smp, cg, cb, user, stats, err);
        st->n_taps = 0;
        st->tap_layer = NULL;
        st->tap_out = NULL;
        return rc;
    }
    const int M = p->spec_draft;
    if (M < 1 || M > TS_SPEC_MAX_DRAFT)
        return ts_fail(err, TS_E_ARG, "draft length %d is outside 1..%d", M, TS_SPEC_MAX_DRAFT);
    if (!m->has_mtp)
        return ts_fail(err, TS_E_UNSUPPORTED, "%s: the checkpoint has no MTP head (no mtp.* tensors): MTP drafting is not possible",
                       s->e->dir);
    if (s->params.spec_draft < M)
        return ts_fail(err, TS_E_ARG, "the session was created for drafts of %d tokens, %d asked (session params spec_draft)",
                       s->params.spec_draft, M);
    ts_mtp_drafter mtp;
    ts_drafter *dr = ts_mtp_drafter_init(&mtp, s, smp, K, p->draft_p_min);
    return spec_loop(s, dr, M, prompt, n_prompt, p, smp, cg, cb, user, stats, err);
}

/* dr: the drafter, initialised; M: the most drafts a block. Prefill in the
 * same chunks as ts_session_feed (its grid of absolute positions,
 * ts_session_chunk: identical rounding to plain generation); the drafter
 * catches up on every chunk. */
static int spec_loop(ts_session *s, ts_drafter *dr, int M, const int32_t *prompt, int n_prompt, const ts_gen_params *p,
                     ts_sampler *smp, ts_cgen *cg, ts_token_cb cb, void *user, ts_gen_stats *stats, ts_error *err) {
    const ts_model *m = &s->e->model;
    const int V = m->cfg.vocab;
    ts_state *st = &s->st;
    ts_stream *bs = st->s;
    const ts_backend_ops *op = bs->be->ops;
    stats->draft_vocab = dr->K;
    double t0 = ts_now();
    int rc;
    for (int off = 0, k; off < n_prompt; off += k) {
        k = ts_session_chunk(s, n_prompt - off);
        if ((rc = ts_session_feed(s, prompt + off, k, NULL, NULL, err))) return rc;
        if (off + k == n_prompt) ts_be_copy(bs, s->vlogits, st->sc.logits, (size_t)V);
        if ((rc = dr->ops->prompt(dr, prompt + off, k))) goto backend;
    }
    stats->n_prompt = n_prompt;
    stats->t_prefill = ts_now() - t0;
    t0 = ts_now();
    rc = 0;
    if (p->n_predict <= 0) goto done;

    /* The first token comes from the prompt's logits. */
    int32_t last;
    if (smp) {
        if ((rc = ts_gen_sample_c(s, smp, cg, s->vlogits, &last, err))) goto done; /* candidates or the row */
        ts_sampler_accept(smp, last);
    } else {
        op->argmax(bs, tv_f32(s->vlogits, 1, V), V, &last, NULL);
    }
    if (p->logprob_cb) {
        ts_gen_lp lp;
        if ((rc = ts_gen_logprobs(s, s->vlogits, 1, &last, p->top_logprobs, &lp, err))) goto done;
        p->logprob_cb(user, &lp.chosen, lp.top, lp.n_top);
    }
    ts_be_copy(bs, st->sc.logits, s->vlogits, (size_t)V);
    stats->n_gen++;
    int cdone = 0; /* the constraint's reply is complete, no stop ids */
    if ((cb && cb(user, last)) || (cg && (cdone = ts_cgen_advance(cg, last, err))) || ts_gen_is_stop(p, last) ||
        p->n_predict == 1 || s->pos >= st->n_ctx) {
        if (cdone < 0) rc = cdone;
        goto done;
    }

    dr->ops->start(dr, last);
    for (;;) {
        int mm = TS_MIN(M, st->n_ctx - s->pos - 1);
        mm = TS_MIN(mm, p->n_predict - stats->n_gen - 1);
        if (mm < 0) mm = 0;
        int32_t blk[SPEC_ROWS], out[SPEC_ROWS];
        blk[0] = last;
        if (mm > 0) {
            double td = ts_now();
            if ((mm = dr->ops->propose(dr, mm, blk + 1)) < 0) {
                rc = mm;
                goto backend;
            }
            if (s->test_drafts && !smp) s->test_drafts(s->test_user, s->pos, mm, blk + 1);
            stats->t_draft += ts_now() - td;
        }
        double tv = ts_now();
        int pos_blk = s->pos;
        /* greedy: the verify pass and the argmax of its rows queue behind
         * each other and the ids' read is the one wait (ts_state.defer_sync;
         * the sync after it collects an error of either) */
        st->defer_sync = !smp && !m->tp && ts_one_wait_on();
        rc = ts_spec_verify(s, blk, mm + 1, err);
        st->defer_sync = 0;
        if (rc) break;
        /* greedy: the backend's argmax of the block's mm + 1 rows, read back
         * as ids (not logit planes); sampling reads the rows explicitly */
        int a;
        if (!smp) {
            int32_t targ[SPEC_ROWS];
            op->argmax(bs, tv_f32(s->vlogits, mm + 1, V), V, targ, NULL);
            if ((rc = ts_be_sync(bs, NULL))) goto backend;
            stats->t_verify += ts_now() - tv;
            a = ts_spec_accept_greedy(targ, blk + 1, mm, out);
        } else {
            stats->t_verify += ts_now() - tv;
            /* host rows: the block's logits (a device backend's staging), and
             * the scratch row of dprobs for the target distribution (not the
             * staging: that holds vl) */
            const float *vl = ts_be_host(bs, s->vlogits, (size_t)(mm + 1) * V);
            /* the scratch row follows the distribution rows (plan.c: Mq) */
            const int Mq = TS_MAX(s->params.spec_draft, s->params.dflash_block ? s->params.dflash_block - 1 : 0);
            float *ptmp = s->dprobs + (size_t)Mq * V;
            if ((a = ts_spec_accept_c(vl, dr->point_mass ? NULL : s->dprobs, blk + 1, mm, V, smp, ptmp, out, cg, err)) < 0) {
                rc = a;
                break;
            }
        }
        stats->n_blocks++;
        stats->n_drafted += mm;
        stats->n_accepted += a;
        for (int j = 0; j < mm && j < 16; j++) {
            stats->drafted_at[j]++;
            if (j < a) stats->accepted_at[j]++;
        }
        /* Emit in order; a stop after token j keeps rows 0..j (the stopping
         * token itself is not fed, as in plain decoding). Row j's logits are
         * the ones a plain step would have drawn out[j] from (bit for bit),
         * so its log-probabilities are plain decoding's too. */
        ts_gen_lp lps[SPEC_ROWS];
        if (p->logprob_cb && (rc = ts_gen_logprobs(s, s->vlogits, a + 1, out, p->top_logprobs, lps, err))) break;
        int keep = a + 1, stop = 0;
        for (int j = 0; j <= a; j++) {
            if (p->logprob_cb) p->logprob_cb(user, &lps[j].chosen, lps[j].top, lps[j].n_top);
            stats->n_gen++;
            if ((cb && cb(user, out[j])) || (cg && (cdone = ts_cgen_advance(cg, out[j], err))) ||
                ts_gen_is_stop(p, out[j]) || stats->n_gen >= p->n_predict) {
                keep = j + 1;
                stop = 1;
                break;
            }
        }
        if (cdone < 0) {
            rc = cdone;
            break;
        }
        double tr = ts_now();
        ts_spec_rollback(s, keep);
        stats->t_rollback += ts_now() - tr;
        if (stop || s->pos >= st->n_ctx) break;
        last = out[a];
        dr->ops->on_accept(dr, out, keep, pos_blk);
    }
done:
    stats->t_decode = ts_now() - t0;
    return rc;
backend:
    return ts_fail(err, rc, "backend %s: %s", bs->be->name, bs->msg);
}
