/* generate.c: the token loop behind ts_generate: prefill, then decode one
 * token at a time (greedy or sampled), stopping at a stop id, the token
 * budget or the callback's request. Speculative decoding plugs in here.
 * The loop allocates nothing: the session holds every buffer.
 */
#include <math.h>
#include <stdlib.h>

#include "gen/constraint.h"
#include "gen/sample.h"
#include "gen/spec.h"

void ts_gen_params_default(ts_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->n_predict = 128;
    p->top_p = 1.0f;
    p->repeat_penalty = 1.0f;
    p->penalty_last_n = 64;
}

/* A sampler is needed unless decoding is plain greedy. */
static int needs_sampler(const ts_gen_params *p) {
    return p->temperature > 0 || p->repeat_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0 ||
           p->n_bias > 0 || p->constraint; /* a constraint masks the row: the sampler's argmax */
}

static int generate(ts_session *s, const int32_t *prompt, int n_prompt, const ts_gen_params *p, ts_token_cb cb,
                    void *user, ts_gen_stats *stats, ts_error *err);

/* Whether a sampled step asks the backend for candidates (topn) before
 * reading the row: on backends whose memory the host cannot read in place
 * (a device: the row is 1 MB through PCIe, the candidates 2 KB), not on the
 * CPU, where the row is read in place and the full-row sampler is faster.
 * TS_SAMPLE_TOPN=0 turns it off everywhere, =1 on everywhere (tests: the
 * candidate path on the CPU, or a device without it). Either way the
 * tokens are the same: the candidates are used only when they decide the
 * token exactly (gen/sample.c). */
static int use_topn(const ts_stream *bs) {
    if (!bs->be->ops->topn) return 0;
    const char *e = getenv("TS_SAMPLE_TOPN");
    if (e && *e) return atoi(e) != 0;
    return bs->be->dom != TS_DOM_HOST;
}

/* How many sampled steps asked for candidates and how many they decided
 * (process-wide; tests check that the fast path ran). */
static long topn_asked, topn_decided;
void ts_gen_topn_stats(long *asked, long *decided) {
    *asked = __atomic_load_n(&topn_asked, __ATOMIC_RELAXED);
    *decided = __atomic_load_n(&topn_decided, __ATOMIC_RELAXED);
}

int ts_gen_sample(ts_session *s, ts_sampler *smp, const float *logits, int32_t *id, ts_error *err) {
    ts_stream *bs = s->st.s;
    const int V = s->e->model.cfg.vocab;
    if (use_topn(bs)) {
        float vals[TS_TOPN_MAX];
        int32_t ids[TS_TOPN_MAX], n_valid = 0;
        double sum_exp = 0;
        ts_topn_args a;
        if (!ts_sampler_topn_args(smp, &a)) {
            a.vals = vals, a.ids = ids, a.n_valid = &n_valid, a.sum_exp = &sum_exp;
            bs->be->ops->topn(bs, tv_f32((float *)logits, 1, V), V, &a);
            int rc = ts_be_sync(bs, err), decided = 0;
            if (rc) return rc;
            if ((rc = ts_sampler_sample_topn(smp, &a, id, &decided, err))) return rc;
            __atomic_add_fetch(&topn_asked, 1, __ATOMIC_RELAXED);
            if (decided) {
                __atomic_add_fetch(&topn_decided, 1, __ATOMIC_RELAXED);
                return 0;
            }
        }
    }
    const float *row = ts_be_host(bs, logits, (size_t)V);
    if (!row) {
        int rc = ts_be_sync(bs, err);
        return rc ? rc : ts_fail(err, TS_E_IO, "backend %s: could not read the logits row", bs->be->name);
    }
    return ts_sampler_sample(smp, row, id, err);
}

int ts_gen_sample_c(ts_session *s, ts_sampler *smp, ts_cgen *cg, const float *logits, int32_t *id, ts_error *err) {
    int rc = ts_cgen_arm(cg, smp, err);
    if (!rc) rc = ts_gen_sample(s, smp, logits, id, err);
    ts_cgen_disarm(smp);
    return rc;
}

/* Log-probabilities of rows of logits (backend memory, [rows, V]) through
 * the backend's topn with no penalty and scale 1: the N best raw logits,
 * the count of valid entries and sum_exp = sum_i expf(l_i - l_max), so
 * log Z = l_max + log(sum_exp) (src/backend.h: exact on every backend but
 * sum_exp, within a relative 1e-6 on a device, 1e-6 in a log-probability).
 * A chosen id outside the N best has its one logit read back. One topn
 * call for the rows (a verify block's emitted rows at once); a device
 * copies back 16 + 8N bytes a row instead of the row. */
static float lp_of(float l, int finite, double lz) {
    if (!finite) return l == INFINITY ? 0.0f : -INFINITY;
    return l > -INFINITY ? (float)((double)l - lz) : -INFINITY; /* NaN too */
}

/* One row's entry from its topn outputs (N best raw logits v / ids t,
 * n_valid, sum_exp) and the chosen id's logit l. */
static void lp_entry(const float *v, const int32_t *t, int N, int n_valid, double sum_exp, int32_t id, float l,
                     int n_top, ts_gen_lp *o) {
    const int nk = TS_MIN(N, n_valid);
    /* no valid entry, or an infinite maximum: nothing has a finite
     * log-probability; the maximum's ids get 0 only when it is +inf */
    const int finite = nk > 0 && !isinf(v[0]) && sum_exp > 0;
    const double lz = finite ? (double)v[0] + log(sum_exp) : 0;
    o->chosen = (ts_logprob){id, lp_of(l, finite, lz)};
    o->n_top = TS_MIN(n_top, nk);
    for (int k = 0; k < o->n_top; k++) o->top[k] = (ts_logprob){t[k], lp_of(v[k], finite, lz)};
}

/* The chosen id's logit from the N best; NaN when it is not among them
 * (the caller reads it from the row). */
static float lp_find(const float *v, const int32_t *t, int nk, int32_t id) {
    for (int k = 0; k < nk; k++)
        if (t[k] == id) return v[k];
    return NAN;
}

int ts_gen_logprobs(ts_session *s, const float *logits, int rows, const int32_t *ids, int n_top, ts_gen_lp *out,
                    ts_error *err) {
    ts_stream *bs = s->st.s;
    const int V = s->e->model.cfg.vocab, N = TS_MAX(n_top, 1);
    if (rows < 1 || rows > TS_DFLASH_MAX_BLOCK || n_top < 0 || n_top > TS_TOP_LOGPROBS_MAX)
        return ts_fail(err, TS_E_ARG, "log-probabilities of %d rows with %d alternatives (1..%d rows, 0..%d)", rows,
                       n_top, TS_DFLASH_MAX_BLOCK, TS_TOP_LOGPROBS_MAX);
    if (!bs->be->ops->topn)
        return ts_fail(err, TS_E_UNSUPPORTED, "backend %s cannot compute log-probabilities (no topn op)", bs->be->name);
    float vals[TS_DFLASH_MAX_BLOCK * TS_TOP_LOGPROBS_MAX];
    int32_t tid[TS_DFLASH_MAX_BLOCK * TS_TOP_LOGPROBS_MAX], n_valid[TS_DFLASH_MAX_BLOCK];
    double sum_exp[TS_DFLASH_MAX_BLOCK];
    ts_topn_args a = {.N = N, .scale = 1.0f, .rep = 1.0f, .vals = vals, .ids = tid, .n_valid = n_valid,
                      .sum_exp = sum_exp};
    bs->be->ops->topn(bs, tv_f32((float *)logits, rows, V), V, &a);
    int rc = ts_be_sync(bs, err);
    if (rc) return rc;
    for (int r = 0; r < rows; r++) {
        const float *v = vals + (size_t)r * N;
        const int32_t *t = tid + (size_t)r * N;
        float l = lp_find(v, t, TS_MIN(N, n_valid[r]), ids[r]);
        if (isnan(l) && ids[r] >= 0 && ids[r] < V) {
            ts_be_read(bs, &l, logits + (size_t)r * V + ids[r], 1);
            if ((rc = ts_be_sync(bs, err))) return rc;
        }
        lp_entry(v, t, N, n_valid[r], sum_exp[r], ids[r], l, n_top, &out[r]);
    }
    return 0;
}

/* One host row's entry (ts_session_score's, ts_logprobs_row's). */
static void score_row(const float *row, int V, int32_t id, int n_top, ts_logprob *o) {
    const int N = TS_MAX(n_top, 1);
    float v[TS_TOP_LOGPROBS_MAX];
    int32_t t[TS_TOP_LOGPROBS_MAX], n_valid;
    double sum_exp;
    ts_topn_args a = {.N = N, .scale = 1.0f, .rep = 1.0f, .vals = v, .ids = t, .n_valid = &n_valid, .sum_exp = &sum_exp};
    ts_topn_host(row, 1, V, V, &a);
    float l = lp_find(v, t, TS_MIN(N, n_valid), id);
    if (isnan(l)) l = row[id];
    ts_gen_lp e;
    lp_entry(v, t, N, n_valid, sum_exp, id, l, n_top, &e);
    o[0] = e.chosen;
    for (int j = 0; j < n_top; j++) o[1 + j] = j < e.n_top ? e.top[j] : (ts_logprob){-1, -INFINITY};
}

int ts_logprobs_row(const float *logits, int vocab, int32_t id, int n_top, ts_logprob *out, ts_error *err) {
    if (!logits || !out || vocab < 1 || id < 0 || id >= vocab || n_top < 0 || n_top > TS_TOP_LOGPROBS_MAX)
        return ts_fail(err, TS_E_ARG, "log-probabilities of id %d in a row of %d with %d alternatives (0..%d)", id,
                       vocab, n_top, TS_TOP_LOGPROBS_MAX);
    score_row(logits, vocab, id, n_top, out);
    return 0;
}

/* Scoring a text (turbospark.h): the feed's own chunks, each chunk's rows
 * read back to the host by the feed (a device: row by row, the bits of the
 * chunk's pass) and ranked there by the reference topn. Rows read back
 * rather than ranked on the device keep the session's memory plan as it is
 * (no chunk-sized logits buffer on the device); a row through PCIe costs
 * less than its forward pass. */
int ts_session_score(ts_session *s, const int32_t *ids, int n, int n_top, ts_logprob *out, ts_error *err) {
    const int V = s->e->model.cfg.vocab, stride = 1 + n_top;
    if (n_top < 0 || n_top > TS_TOP_LOGPROBS_MAX)
        return ts_fail(err, TS_E_ARG, "%d alternatives asked (0..%d)", n_top, TS_TOP_LOGPROBS_MAX);
    if (n > 1 && !out) return ts_fail(err, TS_E_ARG, "out is NULL");
    /* refused whole: a bad id or a text longer than the room left leaves
     * the session as it was (the feeds below come chunk by chunk) */
    int rc = ts_session_check_feed(s, ids, n, err);
    if (rc) return rc;
    const int rows = TS_MIN(n, ts_session_grid(s));
    float *buf = malloc(sizeof(float) * (size_t)rows * (size_t)V);
    if (!buf) return ts_fail(err, TS_E_NOMEM, "out of memory for %d rows of logits (%d x %d f32)", rows, rows, V);
    for (int off = 0, k; off < n && !rc; off += k) {
        k = ts_session_chunk(s, n - off);
        if ((rc = ts_session_feed(s, ids + off, k, buf, NULL, err))) break;
        for (int r = 0; r < k && off + r + 1 < n; r++)
            score_row(buf + (size_t)r * V, V, ids[off + r + 1], n_top, out + (size_t)(off + r) * stride);
    }
    free(buf);
    return rc;
}

/* The whole generation runs inside the backend (CPU: denormals flushed and
 * the engine's kernel mode on this thread): the speculative path calls the
 * model below ts_session_feed, and one mode for every step keeps plain and
 * drafted output identical. The token callback runs in that mode too. */
int ts_generate(ts_session *s, const int32_t *prompt, int n_prompt, const ts_gen_params *p, ts_token_cb cb,
                void *user, ts_gen_stats *stats, ts_error *err) {
    ts_stream *bs = s->st.s;
    unsigned fp = bs->be->ops->enter(bs);
    int rc = generate(s, prompt, n_prompt, p, cb, user, stats, err);
    bs->be->ops->leave(bs, fp);
    return rc;
}

/* ---- run-ahead greedy decoding (session params ahead) ----
 *
 * Why. A decode step on a GPU is one graph replay, and between two replays
 * the device waits for the host: its wake-up from the wait for the id, the
 * id's read, the callback, the next step's record copy and launch. Session
 * 30 measured that at 62-75 us a 9B token (3% of it), 34-46 us on the
 * 35B-A3B-8L shape (6-8%) and 29-33 us on the default model (11-13%).
 * Here the step fed token i + 1 is queued before token i + 1 is read: the
 * argmax leaves the id on the device (argmax_ahead), the next pass's embed
 * reads it there, and a 4-byte copy to a host ticket tells the host. The
 * device then runs step after step while the host reads each id a step
 * behind.
 *
 * Exactness. A queued step whose input turns out to be a stop (a stop id,
 * the callback's stop, a complete constrained reply) must leave no trace.
 * The budget and the context limit are known before queuing and never
 * queue a step; a stop is not, so each step of this loop is a run-ahead
 * pass (ts_state.ahead_on, TS_REC_SWAP): its GDN rows go from the live
 * buffers of the state pairs into the others, which the parity flip after
 * the pass makes live, so the step is undone by flipping back; its K/V row
 * lies past the position, which moves back, so it is never read; its logits
 * and hidden go to a row of their own (ahead_rows: two, alternating), so
 * the last kept step's survive. The arithmetic is a decode row's (the ops
 * are row-exact and a row's bits do not depend on where its state lives),
 * so the ids, the final logits, hidden and state equal plain decoding's bit
 * for bit (tests/test_ahead.c; cuda_engine.ahead_exact on the GPU).
 *
 * Takes: greedy without a sampler or log-probabilities (both need the row
 * on the host each token), a session with the buffers, and no rows of a
 * lazy rollback still pending once the prompt is fed (its pass applies
 * them; a guard: a run-ahead step may not start from them). */
static int ahead_applies(const ts_session *s, const ts_gen_params *p, const ts_sampler *smp) {
    /* ts_session_ahead: the session resolved it on (so the backend has the
     * ops, and neither expert streaming nor tensor parallelism is in use)
     * and TS_AHEAD is not 0 now (a benchmark's A/B) */
    return ts_session_ahead(s) && !smp && !p->logprob_cb && !(s->df.B && !s->df_quiet);
}

/* a backend error of the stream as the generation's */
static int be_fail(ts_error *err, const ts_stream *bs, int rc) {
    return ts_fail(err, rc, "backend %s: %s", bs->be->name, bs->msg);
}

/* Queue the run-ahead step fed *ids (the device id of the last
 * argmax_ahead) at the session's position; its logits and
 * hidden into row k, its argmax into ticket k (all in the pass: qwen35.c,
 * so that a device backend's graph holds them; a graph is keyed by its
 * logits row and its ids, so each (row, id slot) is a variant of its own).
 * Returns the device id. */
static const int32_t *ahead_step(ts_session *s, const int32_t *ids, int k, int *rc) {
    const ts_model *m = &s->e->model;
    const int V = m->cfg.vocab, H = m->cfg.H;
    ts_state *st = &s->st;
    st->ahead_on = 1;
    st->ahead_k = k;
    st->ahead_hid = s->ahead_rows + 2 * (size_t)V + (size_t)k * H;
    st->defer_sync = 1; /* errors stay sticky on the stream: ahead_read or the last sync reports them */
    *rc = ts_forward(m, st, ids, 1, s->pos, s->ahead_rows + (size_t)k * V, 0);
    st->defer_sync = 0;
    st->ahead_on = 0;
    s->pos++;
    return st->ahead_slot[k & (TS_AHEAD_TICKETS - 1)]; /* (a replayed pass's too: model.h) */
}

/* The token loop of a greedy generation run ahead (the prompt fed, its
 * logits in sc.logits): the same tokens, stops and final state as the
 * plain loop in generate(). */
static int ahead_loop(ts_session *s, const ts_gen_params *p, ts_cgen *cg, ts_token_cb cb, void *user,
                      ts_gen_stats *stats, ts_error *err) {
    const ts_model *m = &s->e->model;
    const int V = m->cfg.vocab, H = m->cfg.H;
    ts_state *st = &s->st;
    ts_stream *bs = st->s;
    const ts_backend_ops *op = bs->be->ops;
    if (p->n_predict <= 0) return 0;
    /* token 0, from the prompt's logits, into ticket 1 and onto the device,
     * where the first step reads it as every later one does */
    int32_t id;
    const int32_t *dev = op->argmax_ahead(bs, tv_f32(st->sc.logits, 1, V), V, 1);
    int rc = op->ahead_read(bs, 1, &id);
    if (rc) return be_fail(err, bs, rc);
    int kept = -1; /* the row of the last step that stays (-1: none, sc.logits is the prompt's) */
    int a = -1;    /* the row of the queued step fed the current token (-1: none yet) */
    for (int i = 0;; i++) {
        /* id is token i, on the host; the step fed it is queued in row a
         * (but for token 0, below), the step fed token i + 1 not yet */
        stats->n_gen++;
        int stop = cb ? cb(user, id) : 0;
        const int done = ts_cgen_advance(cg, id, err);
        if (done < 0) { rc = done; break; }
        if (stop || done || ts_gen_is_stop(p, id) || i + 1 == p->n_predict) {
            if (a >= 0) { /* the step fed this token ran ahead of its read: undo it */
                s->pos--;
                st->par_S ^= 1;
                st->par_conv ^= 1;
            }
            break;
        }
        if (a < 0) { /* token 0: not queued ahead (it was read from the prompt's logits) */
            if (s->pos >= st->n_ctx) break; /* context full: stop cleanly */
            a = 0;
            dev = ahead_step(s, dev, a, &rc);
            if (rc) { rc = be_fail(err, bs, rc); break; }
        }
        kept = a; /* token i is not a stop: the step fed it stays */
        /* the step fed token i + 1, queued before token i + 1 is read,
         * where the budget and the context would let plain decoding feed
         * it (a stop is the one thing not known yet) */
        const int b = a ^ 1;
        const int next = i + 2 < p->n_predict && s->pos < st->n_ctx;
        const int32_t *dev_b = NULL;
        if (next) {
            dev_b = ahead_step(s, dev, b, &rc);
            if (rc) { rc = be_fail(err, bs, rc); break; }
        }
        if ((rc = op->ahead_read(bs, a, &id))) {
            rc = be_fail(err, bs, rc);
            break;
        }
        if (!next) { /* token i + 1 ends it (budget) or the context is full: nothing queued to undo */
            stats->n_gen++;
            if (cb) cb(user, id);
            if ((rc = ts_cgen_advance(cg, id, err)) > 0) rc = 0;
            break;
        }
        a = b, dev = dev_b;
    }
    /* the last kept step's logits and hidden are the session's */
    if (kept >= 0) {
        ts_be_copy(bs, st->sc.logits, s->ahead_rows + (size_t)kept * V, (size_t)V);
        ts_be_copy(bs, s->last_hidden, s->ahead_rows + 2 * (size_t)V + (size_t)kept * H, (size_t)H);
    }
    int rs = ts_be_sync(bs, rc ? NULL : err);
    if (!rc && rs) rc = rs;
    s->have_last = !rc;
    return rc;
}

/* The token loop of a generation step by step (the prompt fed, its logits
 * in sc.logits): sampled, or greedy with one wait a token. */
static int plain_loop(ts_session *s, const ts_gen_params *p, ts_sampler *smp, ts_cgen *cg, ts_token_cb cb, void *user,
                      ts_gen_stats *stats, ts_error *err) {
    const int V = s->e->model.cfg.vocab;
    int rc = 0;
    /* greedy steps after the first feed the token and take the argmax of
     * its logits in one wait (ts_session_step): next holds that id */
    int32_t next = -1;
    int have_next = 0;
    for (int i = 0; i < p->n_predict; i++) {
        int32_t id;
        if (smp) {
            if ((rc = ts_gen_sample_c(s, smp, cg, s->st.sc.logits, &id, err))) break;
            ts_sampler_accept(smp, id);
        } else if (have_next) {
            id = next, have_next = 0;
        } else { /* the backend's argmax, one id read back */
            s->st.s->be->ops->argmax(s->st.s, tv_f32(s->st.sc.logits, 1, V), V, &id, NULL);
        }
        if (p->logprob_cb) {
            ts_gen_lp lp;
            if ((rc = ts_gen_logprobs(s, s->st.sc.logits, 1, &id, p->top_logprobs, &lp, err))) break;
            p->logprob_cb(user, &lp.chosen, lp.top, lp.n_top);
        }
        stats->n_gen++;
        int stop = cb ? cb(user, id) : 0;
        const int done = ts_cgen_advance(cg, id, err); /* 1: a complete reply and no stop ids */
        if (done < 0) { rc = done; break; }
        if (stop || done || ts_gen_is_stop(p, id) || i + 1 == p->n_predict) break;
        if (ts_session_pos(s) >= ts_session_n_ctx(s)) break; /* context full: stop cleanly */
        if (!smp && ts_one_wait_on()) {
            rc = ts_session_step(s, id, &next, err);
            if (rc == 0) { have_next = 1; continue; }
            if (rc != 1) break;
            rc = 0; /* the one-wait step does not apply: feed, then the argmax above */
        }
        if ((rc = ts_session_feed(s, &id, 1, NULL, NULL, err))) break;
    }
    return rc;
}

static int generate(ts_session *s, const int32_t *prompt, int n_prompt, const ts_gen_params *p, ts_token_cb cb,
                    void *user, ts_gen_stats *stats, ts_error *err) {
    ts_gen_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!p) return ts_fail(err, TS_E_ARG, "no generation parameters");
    if (p->top_logprobs < 0 || p->top_logprobs > TS_TOP_LOGPROBS_MAX)
        return ts_fail(err, TS_E_ARG, "%d top log-probabilities asked (0..%d)", p->top_logprobs, TS_TOP_LOGPROBS_MAX);
    const int V = s->e->model.cfg.vocab;
    ts_sampler *smp = NULL;
    int rc = 0;
    if (needs_sampler(p)) {
        ts_sampler_params sp;
        ts_sampler_params_default(&sp);
        sp.temperature = p->temperature;
        sp.top_k = p->top_k;
        sp.top_p = p->top_p;
        sp.min_p = p->min_p;
        sp.repetition_penalty = p->repeat_penalty;
        sp.presence_penalty = p->presence_penalty;
        sp.frequency_penalty = p->frequency_penalty;
        sp.penalty_last_n = p->penalty_last_n;
        sp.seed = p->seed;
        sp.bias_ids = p->bias_ids, sp.bias = p->bias, sp.n_bias = p->n_bias;
        if ((rc = ts_sampler_new(V, &sp, &smp, err))) return rc;
        for (int i = 0; i < n_prompt; i++) ts_sampler_accept(smp, prompt[i]);
    }
    ts_cgen cg;
    if ((rc = ts_cgen_init(&cg, p, V, err))) {
        ts_sampler_free(smp);
        return rc;
    }
    if (p->spec_draft || p->dflash_block || p->spec_ngram) {
        /* drafting + batched verify (spec.c); greedy output is the same ids */
        rc = ts_spec_generate(s, prompt, n_prompt, p, smp, cg.c ? &cg : NULL, cb, user, stats, err);
        ts_cgen_free(&cg);
        ts_sampler_free(smp);
        return rc;
    }
    double t0 = ts_now();
    /* plain generation leaves a DFlash session's drafter context alone
     * (drafts are only ever verified: a missing row costs acceptance, and
     * plain decoding does not pay for a drafter it does not use) */
    s->df_quiet = 1;
    rc = ts_session_feed(s, prompt, n_prompt, NULL, NULL, err);
    if (rc) { s->df_quiet = 0; ts_cgen_free(&cg); ts_sampler_free(smp); return rc; }
    stats->n_prompt = n_prompt;
    stats->t_prefill = ts_now() - t0;
    t0 = ts_now();
    rc = ahead_applies(s, p, smp) && !s->st.gdn_pend ? ahead_loop(s, p, &cg, cb, user, stats, err)
                                                     : plain_loop(s, p, smp, &cg, cb, user, stats, err);
    stats->t_decode = ts_now() - t0;
    s->df_quiet = 0;
    ts_cgen_free(&cg);
    ts_sampler_free(smp);
    return rc;
}
