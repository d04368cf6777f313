/* test_spec.c: speculative decoding with the MTP head (src/gen/spec.c).
 *
 * - exactness: greedy output with drafting (M = 1..8) is the same ids as plain
 *   greedy, 520 generated tokens, on tiny-dense, tiny-moe and alt-dense, with
 *   the model's own MTP drafts and with an oracle drafter (the plain output,
 *   an eighth of the drafts corrupted) so that long accepted runs and every
 *   rollback length occur: the random-weight MTP heads almost never agree
 *   with their targets;
 * - the context limit hit in the middle of a block;
 * - rollback: after verify + rollback to C rows, every GDN conv/recurrent
 *   state and KV row is bit-identical (memcmp) to decoding the C tokens one
 *   at a time;
 * - lazy rollback (the GDN state is applied by the next pass): a decode row,
 *   a chain of verify blocks with rollbacks (double rollbacks, one-row
 *   blocks), a prompt chunk and a session reset after a lazy rollback give
 *   the same logits and state bits as the eager rollback
 *   (ts_spec_materialize right away) and as one-at-a-time decoding;
 * - the multi-row GDN step (ts_gdn_step_rows) equals ts_gdn_step row after
 *   row, bit for bit, in every kernel mode;
 * - speculative sampling: the first emitted token of a block follows the
 *   target distribution (chi-square), with a deliberately bad draft
 *   distribution so that most drafts are rejected;
 * - every activation precision of the packed kernels (24, 16, 8 bits) on
 *   the bundled INT4 model: drafted greedy equals plain greedy at each;
 * - bad input: draft lengths out of range, a checkpoint without mtp.*.
 */
#include <math.h>
#include <sys/stat.h>

#include "gen/spec.h"
#include "cpu/kernels.h"
#include "ts_test.h"
#include "gen_oracle.h"

static const int32_t PROMPT[] = {11, 5, 301, 42, 7, 99, 250, 3, 18, 64, 120, 9};
#define T_PROMPT ((int)(sizeof PROMPT / sizeof PROMPT[0]))

static ts_engine *open_fx(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", name);
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(dir, NULL, &e, &err)) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return e;
}

TS_TEST(spec, greedy_exact) {
    static const char *fx[] = {"tiny-dense", "tiny-moe", "alt-dense"};
    const int N = 520;
    for (int f = 0; f < 3; f++) {
        ts_engine *e = open_fx(fx[f]);
        CHECK(e);
        static collect ref, got;
        ts_gen_stats st;
        CHECK(oracle_generate(e, PROMPT, T_PROMPT, 1024, N, 0, NULL, &ref, &st) == 0);
        CHECK_MSG(ref.n == N, "%s: plain run gave %d tokens", fx[f], ref.n);
        int acc_total = 0, blocks = 0, keep_seen[TS_SPEC_MAX_DRAFT + 2] = {0};
        for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
            /* oracle drafts over the whole run */
            oracle o = {ref.ids, ref.n, T_PROMPT, 12345u + M, 0};
            CHECK(oracle_generate(e, PROMPT, T_PROMPT, 1024, N, M, &o, &got, &st) == 0);
            CHECK_MSG(got.n == N && !memcmp(got.ids, ref.ids, sizeof(int32_t) * N),
                      "%s M=%d (oracle drafts): output differs from plain greedy (%d tokens)", fx[f], M, got.n);
            CHECK_MSG(st.n_accepted > 0 && st.n_accepted < st.n_drafted, "%s M=%d: accepted %d of %d", fx[f], M,
                      st.n_accepted, st.n_drafted);
            acc_total += st.n_accepted;
            blocks += st.n_blocks;
            for (int j = 0; j < M; j++) keep_seen[j] += st.accepted_at[j];
            /* the model's own MTP drafts (shorter: nearly all rejected, so slow) */
            int n2 = M == 1 ? N : 40;
            CHECK(oracle_generate(e, PROMPT, T_PROMPT, 1024, n2, M, NULL, &got, &st) == 0);
            CHECK_MSG(got.n == n2 && !memcmp(got.ids, ref.ids, sizeof(int32_t) * n2),
                      "%s M=%d (MTP drafts): output differs from plain greedy", fx[f], M);
            CHECK(st.n_drafted > 0);
        }
        fprintf(stderr, "  %-10s 16 runs identical to plain greedy; oracle: %d drafts accepted over %d blocks\n", fx[f],
                acc_total, blocks);
        for (int j = 0; j < TS_SPEC_MAX_DRAFT; j++) CHECK_MSG(keep_seen[j] > 0, "draft position %d never accepted", j + 1);
        ts_engine_close(e);
    }
}

/* The context ends inside a block: output identical to plain greedy, which
 * stops when the context is full; nothing is written past n_ctx. */
TS_TEST(spec, context_limit_mid_block) {
    ts_engine *e = open_fx("tiny-moe");
    CHECK(e);
    static collect ref, got;
    ts_gen_stats st;
    for (int extra = 29; extra <= 31; extra++) {
        int n_ctx = T_PROMPT + extra;
        CHECK(oracle_generate(e, PROMPT, T_PROMPT, n_ctx, 1000, 0, NULL, &ref, &st) == 0);
        CHECK_MSG(ref.n == extra + 1, "plain: %d tokens in a context of %d", ref.n, n_ctx);
        for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
            oracle o = {ref.ids, ref.n, T_PROMPT, 777u + M, 0};
            CHECK(oracle_generate(e, PROMPT, T_PROMPT, n_ctx, 1000, M, &o, &got, &st) == 0);
            CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * ref.n),
                      "ctx %d M=%d: %d tokens, plain %d", n_ctx, M, got.n, ref.n);
        }
    }
    /* the token budget ends inside a block too */
    CHECK(oracle_generate(e, PROMPT, T_PROMPT, 512, 23, 0, NULL, &ref, &st) == 0);
    for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
        oracle o = {ref.ids, ref.n, T_PROMPT, 99u + M, 0};
        CHECK(oracle_generate(e, PROMPT, T_PROMPT, 512, 23, M, &o, &got, &st) == 0);
        CHECK_MSG(got.n == 23 && !memcmp(got.ids, ref.ids, sizeof(int32_t) * 23), "budget 23, M=%d", M);
    }
    ts_engine_close(e);
}

/* The first layer whose state differs between a and b (KV rows below pos
 * for attention layers, conv and recurrent state for GDN layers, byte for
 * byte: the raw buffers, so a pending lazy rollback must have been applied),
 * n_layers if the positions or the pending rows differ, -1 if all equal. */
static int state_diff(const ts_session *a, const ts_session *b) {
    const ts_model *m = &a->e->model;
    const ts_config *c = &m->cfg;
    if (a->pos != b->pos || a->st.gdn_pend || b->st.gdn_pend) return c->n_layers;
    for (int L = 0; L < c->n_layers; L++) {
        if (c->layer_full[L]) {
            size_t bytes = sizeof(float) * (size_t)a->pos * m->kvdim;
            if (memcmp(a->st.kv[L].k, b->st.kv[L].k, bytes) || memcmp(a->st.kv[L].v, b->st.kv[L].v, bytes)) return L;
        } else {
            float *ca, *Sa, *cb, *Sb; /* the live buffers of each pair (parities may differ) */
            ts_gdn_live(&a->st, L, &ca, &Sa);
            ts_gdn_live(&b->st, L, &cb, &Sb);
            if (memcmp(ca, cb, sizeof(float) * (size_t)(c->conv_k - 1) * m->C)) return L;
            if (memcmp(Sa, Sb, sizeof(float) * (size_t)c->Hv * c->dk * c->dv)) return L;
        }
    }
    return -1;
}

static int states_equal(const ts_session *a, const ts_session *b) { return state_diff(a, b) < 0; }

/* After verify + rollback to C rows, the whole state equals that of feeding
 * the C tokens one at a time, to the bit. */
TS_TEST(spec, rollback_bit_exact) {
    static const char *fx[] = {"tiny-dense", "alt-moe"};
    for (int f = 0; f < 2; f++) {
        ts_engine *e = open_fx(fx[f]);
        CHECK(e);
        const ts_model *m = &e->model;
        const ts_config *c = &m->cfg;
        const int M = 6;
        const int32_t blk[] = {17, 4, 250, 33, 8, 101, 2};
        for (int C = 1; C <= M + 1; C++) {
            ts_session *a = oracle_session(e, 256, M), *b = oracle_session(e, 256, 0);
            CHECK(a && b);
            ts_error err = {0};
            CHECK(ts_session_feed(a, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
            CHECK(ts_session_feed(b, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
            CHECK_MSG(ts_spec_verify(a, blk, M + 1, &err) == 0, "%s", err.msg);
            ts_spec_rollback(a, C);
            ts_spec_materialize(a); /* the rollback is lazy: apply it to read the raw state */
            for (int i = 0; i < C; i++) CHECK(ts_session_feed(b, &blk[i], 1, NULL, NULL, &err) == 0);
            CHECK_MSG(a->pos == b->pos, "pos %d vs %d", a->pos, b->pos);
            const int L = state_diff(a, b);
            CHECK_MSG(L < 0, "%s C=%d: layer %d state differs after rollback", fx[f], C, L);
            CHECK_MSG(!memcmp(ts_session_logits(a), ts_session_logits(b), sizeof(float) * c->vocab),
                      "%s C=%d: last logits differ", fx[f], C);
            CHECK_MSG(!memcmp(ts_session_hidden(a), ts_session_hidden(b), sizeof(float) * c->H),
                      "%s C=%d: last hidden differs", fx[f], C);
            /* and the timelines continue identically */
            int32_t nx = 5;
            CHECK(ts_session_feed(a, &nx, 1, NULL, NULL, &err) == 0);
            CHECK(ts_session_feed(b, &nx, 1, NULL, NULL, &err) == 0);
            CHECK(!memcmp(ts_session_logits(a), ts_session_logits(b), sizeof(float) * c->vocab));
            ts_session_free(a);
            ts_session_free(b);
        }
        ts_engine_close(e);
    }
}

/* Rollback to C rows, then two decode rows through ts_session_feed: the
 * first row's pass applies the pending rows (lazy), against the eager
 * rollback and against one-at-a-time decoding. */
TS_TEST(spec, lazy_rollback_then_decode) {
    static const char *fx[] = {"tiny-dense", "alt-moe"};
    for (int f = 0; f < 2; f++) {
        ts_engine *e = open_fx(fx[f]);
        CHECK(e);
        const int V = e->model.cfg.vocab, M = 6;
        const int32_t blk[] = {17, 4, 250, 33, 8, 101, 2}, nx[] = {5, 77};
        for (int C = 1; C <= M + 1; C++) {
            ts_session *a = oracle_session(e, 256, M), *ea = oracle_session(e, 256, M), *b = oracle_session(e, 256, 0);
            CHECK(a && ea && b);
            ts_error err = {0};
            CHECK(ts_session_feed(a, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
            CHECK(ts_session_feed(ea, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
            CHECK(ts_session_feed(b, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
            CHECK(ts_spec_verify(a, blk, M + 1, &err) == 0 && ts_spec_verify(ea, blk, M + 1, &err) == 0);
            ts_spec_rollback(a, C);
            ts_spec_rollback(ea, C);
            /* lazy: nothing applied yet when rows were dropped */
            CHECK_MSG(a->st.gdn_pend == (C <= M ? C : 0), "C=%d: %d rows pending", C, a->st.gdn_pend);
            ts_spec_materialize(ea);
            for (int i = 0; i < C; i++) CHECK(ts_session_feed(b, &blk[i], 1, NULL, NULL, &err) == 0);
            for (int i = 0; i < 2; i++) {
                CHECK(ts_session_feed(a, &nx[i], 1, NULL, NULL, &err) == 0);
                CHECK(ts_session_feed(ea, &nx[i], 1, NULL, NULL, &err) == 0);
                CHECK(ts_session_feed(b, &nx[i], 1, NULL, NULL, &err) == 0);
                CHECK_MSG(!memcmp(ts_session_logits(a), ts_session_logits(b), sizeof(float) * V) &&
                              !memcmp(ts_session_logits(ea), ts_session_logits(b), sizeof(float) * V),
                          "%s C=%d: logits of decode row %d differ", fx[f], C, i);
            }
            CHECK_MSG(a->st.gdn_pend == 0, "the decode row left %d rows pending", a->st.gdn_pend);
            CHECK_MSG(states_equal(a, b) && states_equal(ea, b), "%s C=%d: state differs after decoding", fx[f], C);
            ts_session_free(a);
            ts_session_free(ea);
            ts_session_free(b);
        }
        ts_engine_close(e);
    }
}

/* A chain of verify blocks, each rolled back (lazily) before the next: the
 * next verify starts from the pending rows and must also produce the right
 * block-start snapshot for its own rollback. Block sizes and kept rows
 * vary (one-row blocks and fully accepted blocks included; sometimes a
 * second, shorter rollback of the same block). Every verified row's logits
 * are compared with one-at-a-time decoding; the lazy session, an eager one
 * (materialized after every rollback) and the reference end in the same
 * state. */
TS_TEST(spec, lazy_rollback_chain) {
    static const char *fx[] = {"tiny-dense", "alt-moe"};
    for (int f = 0; f < 2; f++) {
        ts_engine *e = open_fx(fx[f]);
        CHECK(e);
        const int V = e->model.cfg.vocab, M = 5;
        ts_session *a = oracle_session(e, 512, M), *ea = oracle_session(e, 512, M), *b = oracle_session(e, 512, 0);
        CHECK(a && ea && b);
        ts_error err = {0};
        CHECK(ts_session_feed(a, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(ea, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(b, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
        uint64_t lcg = 2024;
        int lazy_verifies = 0, bad = 0;
        for (int blkno = 0; blkno < 40 && !bad; blkno++) {
            int32_t blk[TS_SPEC_MAX_DRAFT + 1];
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            int n = 1 + (int)((lcg >> 33) % (M + 1)); /* 1..M+1 rows */
            for (int j = 0; j < n; j++) {
                lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
                blk[j] = (int32_t)((lcg >> 33) % (uint64_t)V);
            }
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            int keep = 1 + (int)((lcg >> 33) % (uint64_t)n);
            lazy_verifies += a->st.gdn_pend > 0 && n > 1;
            CHECK(ts_spec_verify(a, blk, n, &err) == 0 && ts_spec_verify(ea, blk, n, &err) == 0);
            CHECK(a->st.gdn_pend == 0);
            for (int j = 0; j < keep; j++) {
                CHECK(ts_session_feed(b, &blk[j], 1, NULL, NULL, &err) == 0);
                if (memcmp(a->vlogits + (size_t)j * V, ts_session_logits(b), sizeof(float) * V) ||
                    memcmp(ea->vlogits + (size_t)j * V, ts_session_logits(b), sizeof(float) * V)) {
                    ts_test_fail(__FILE__, __LINE__, "%s block %d (%d rows): logits of row %d differ", fx[f], blkno, n, j);
                    bad = 1;
                }
            }
            if (keep > 1 && (lcg >> 40) % 4 == 0) { /* roll back further first, then to keep */
                ts_spec_rollback(a, keep + (n > keep)); /* n > keep: one more row than kept */
            }
            ts_spec_rollback(a, keep);
            ts_spec_rollback(ea, keep);
            ts_spec_materialize(ea);
            CHECK(!memcmp(ts_session_logits(a), ts_session_logits(b), sizeof(float) * V));
        }
        CHECK_MSG(lazy_verifies >= 10, "only %d verify blocks started from a pending rollback", lazy_verifies);
        ts_spec_materialize(a);
        CHECK_MSG(states_equal(a, b) && states_equal(ea, b), "%s: state differs at the end of the chain", fx[f]);
        fprintf(stderr, "  %-10s 40 blocks, %d verified from a pending rollback: logits and state identical\n", fx[f],
                lazy_verifies);
        ts_session_free(a);
        ts_session_free(ea);
        ts_session_free(b);
        ts_engine_close(e);
    }
}

/* After a lazy rollback: a prompt chunk (chunked delta rule: it applies the
 * pending rows eagerly first) equals the same chunk after an eager
 * rollback; a session reset drops the pending rows (the next prompt gives a
 * fresh session's bits). */
TS_TEST(spec, lazy_rollback_then_prefill_reset) {
    ts_engine *e = open_fx("tiny-moe");
    CHECK(e);
    const int V = e->model.cfg.vocab, M = 4;
    const int32_t blk[] = {9, 31, 4, 200, 6}, chunk[] = {3, 14, 15, 92, 65, 35, 89};
    ts_error err = {0};
    for (int C = 1; C <= M; C++) {
        ts_session *a = oracle_session(e, 256, M), *ea = oracle_session(e, 256, M);
        CHECK(a && ea);
        CHECK(ts_session_feed(a, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(ea, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
        CHECK(ts_spec_verify(a, blk, M + 1, &err) == 0 && ts_spec_verify(ea, blk, M + 1, &err) == 0);
        ts_spec_rollback(a, C);
        ts_spec_rollback(ea, C);
        ts_spec_materialize(ea);
        CHECK(a->st.gdn_pend == C);
        CHECK(ts_session_feed(a, chunk, 7, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(ea, chunk, 7, NULL, NULL, &err) == 0);
        CHECK_MSG(!memcmp(ts_session_logits(a), ts_session_logits(ea), sizeof(float) * V),
                  "C=%d: logits after a prompt chunk differ", C);
        CHECK_MSG(states_equal(a, ea), "C=%d: state after a prompt chunk differs", C);
        /* reset with a rollback pending */
        CHECK(ts_spec_verify(a, blk, M + 1, &err) == 0);
        ts_spec_rollback(a, C);
        CHECK(a->st.gdn_pend == C);
        ts_session_reset(a);
        ts_session *fresh = oracle_session(e, 256, M);
        CHECK(fresh);
        CHECK(ts_session_feed(a, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(fresh, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
        int32_t one = 7;
        CHECK(ts_session_feed(a, &one, 1, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(fresh, &one, 1, NULL, NULL, &err) == 0);
        CHECK_MSG(!memcmp(ts_session_logits(a), ts_session_logits(fresh), sizeof(float) * V) && states_equal(a, fresh),
                  "C=%d: a reset with a pending rollback differs from a fresh session", C);
        ts_session_free(fresh);
        ts_session_free(a);
        ts_session_free(ea);
    }
    ts_engine_close(e);
}

/* ts_gdn_step_rows (the multi-row GDN step behind every GDN pass) against
 * ts_gdn_step applied row after row, memcmp, in every kernel mode this
 * machine has: shapes with one and several 128-column blocks and a partial
 * block, a key dimension past the AVX-512 scratch, in place and from a
 * separate source, with and without outputs, 1..18 rows. If the one-row kernel changes without this one, this fails. */
TS_TEST(spec, gdn_step_rows) {
    static const char *modes[] = {"ref", "generic", "avx2", "avx512"};
    /* {300, 32}: dk beyond the AVX-512 kernel's stack scratch (its rows stay in S) */
    static const int shapes[][2] = {{128, 128}, {16, 48}, {32, 272}, {8, 20}, {300, 32}};
    const char *orig = ts_kernels_name();
    int tested = 0;
    enum { NR = 18, MAXS = 128 * 272 };
    static float S0[MAXS], S1[MAXS], S2[MAXS], K[NR][300], Q[NR][300], Vv[NR][272], O1[NR][272], O2[NR][272];
    uint64_t lcg = 99;
#define RND() (lcg = lcg * 6364136223846793005ull + 1442695040888963407ull, (float)((lcg >> 40) % 2001) / 1000.0f - 1.0f)
    for (int mi = 0; mi < 4; mi++) {
        if (ts_kernels_select(modes[mi]) != 0) continue;
        tested++;
        for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
            const int dk = shapes[si][0], dv = shapes[si][1];
            for (int n = 1; n <= NR; n += (n < 4 ? 1 : 7)) {
                for (int i = 0; i < dk * dv; i++) S0[i] = RND();
                const float *kp[NR], *vp[NR], *qp[NR];
                float *op[NR], dc[NR], bt[NR];
                for (int t = 0; t < n; t++) {
                    for (int i = 0; i < dk; i++) { K[t][i] = RND() * 0.2f; Q[t][i] = RND() * 0.1f; }
                    for (int j = 0; j < dv; j++) Vv[t][j] = RND();
                    dc[t] = 0.8f + 0.19f * (RND() + 1.0f) / 2.0f;
                    bt[t] = 0.5f + 0.4f * RND();
                    kp[t] = K[t]; vp[t] = Vv[t]; qp[t] = Q[t];
                    op[t] = t % 3 == 1 ? NULL : O2[t];
                }
                memcpy(S1, S0, sizeof(float) * dk * dv);
                for (int t = 0; t < n; t++) ts_gdn_step(S1, K[t], Vv[t], Q[t], dc[t], bt[t], op[t] ? O1[t] : NULL, dk, dv);
                for (int inplace = 0; inplace < 2; inplace++) {
                    memset(S2, 0, sizeof S2);
                    if (inplace) memcpy(S2, S0, sizeof(float) * dk * dv);
                    ts_gdn_step_rows(S2, inplace ? S2 : S0, kp, vp, qp, dc, bt, op, n, dk, dv);
                    int same = !memcmp(S1, S2, sizeof(float) * dk * dv);
                    for (int t = 0; t < n; t++) same &= !op[t] || !memcmp(O1[t], O2[t], sizeof(float) * dv);
                    CHECK_MSG(same, "mode %s dk %d dv %d rows %d %s: differs from ts_gdn_step", modes[mi], dk, dv, n,
                              inplace ? "in place" : "from a source");
                }
            }
        }
    }
#undef RND
    ts_kernels_select(orig);
    CHECK(tested >= 2);
}

/* Speculative sampling leaves the target distribution. Target p over 12
 * tokens (softmax of fixed logits at temperature 0.8), draft q concentrated
 * on tokens the target finds unlikely. Over 40000 seeded trials the first
 * emitted token is tallied and compared with p by Pearson's chi-square with
 * 11 degrees of freedom; the threshold 31.26 is the 0.999 quantile (the
 * test is deterministic: fixed seeds). The tally is also checked against q
 * (it must be rejected), so the test has power. */
static void softmax(const float *x, int V, float *p) {
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp(x[i]);
    for (int i = 0; i < V; i++) p[i] = (float)(exp(x[i]) / sum);
}

/* K < V: the draft distribution is zero outside ids [0, K), as drafting
 * with a limited vocabulary (gen params draft_vocab) makes it. */
static void chi_square_run(int K) {
    enum { V = 12, M = 3, N = 40000 };
    float vl[(M + 1) * V], q[M * V], p[V], tmp[V];
    for (int r = 0; r <= M; r++)
        for (int i = 0; i < V; i++) vl[r * V + i] = 0.35f * (float)((i * 7 + r * 3) % V) - 1.0f;
    ts_sampler_params sp;
    ts_sampler_params_default(&sp);
    sp.temperature = 0.8f;
    sp.seed = 42;
    ts_sampler *smp = NULL;
    ts_error err = {0};
    CHECK(ts_sampler_new(V, &sp, &smp, &err) == 0);
    CHECK(ts_sampler_probs(smp, vl, p, &err) == 0);
    for (int r = 0; r < M; r++) {
        /* bad draft: mass on the target's least likely tokens */
        float ql[V];
        for (int i = 0; i < V; i++) ql[i] = i < K ? -2.0f * vl[r * V + i] : -INFINITY;
        softmax(ql, V, q + r * V);
    }
    long cnt[V] = {0};
    int rejected = 0;
    for (int t = 0; t < N; t++) {
        int32_t d[M], out[M + 1];
        for (int j = 0; j < M; j++) d[j] = ts_sampler_draw(smp, q + j * V);
        int a = ts_spec_accept(vl, q, d, M, V, smp, tmp, out);
        rejected += a == 0;
        cnt[out[0]]++;
    }
    ts_sampler_free(smp);
    double chi = 0, chi_q = 0;
    for (int i = 0; i < V; i++) {
        double ex = p[i] * N, exq = q[i] * N;
        chi += (cnt[i] - ex) * (cnt[i] - ex) / ex;
        chi_q += (cnt[i] - exq) * (cnt[i] - exq) / exq;
    }
    fprintf(stderr, "  drafts among %d of %d ids: first token vs target: chi2 = %.2f (11 dof, threshold 31.26); vs draft: %.0f;"
            " first draft rejected in %d/%d\n", K, V, chi, chi_q, rejected, N);
    CHECK_MSG(chi < 31.26, "chi-square %.2f over the 0.999 quantile", chi);
    CHECK_MSG(chi_q > 1000, "the draft distribution is not distinguishable (chi2 %.1f)", chi_q);
    CHECK_MSG(rejected > N / 2, "the bad draft was rejected only %d times", rejected);
}

TS_TEST(spec, sampling_matches_target) {
    chi_square_run(12);
    chi_square_run(5);
}

/* A drafting vocabulary (ids [0, K)): every draft lies in it, greedy output
 * stays identical to plain decoding, and the automatic size follows its
 * rule. */
typedef struct { int K, n, bad; } dv_check;
static void dv_drafts(void *user, int pos, int m, int32_t *d) {
    dv_check *c = user;
    for (int j = 0; j < m; j++) { c->n++; if (d[j] < 0 || d[j] >= c->K) c->bad++; }
}

TS_TEST(spec, draft_vocab) {
    CHECK(ts_spec_draft_vocab(0, 248320) == 32768 && ts_spec_draft_vocab(0, 12288) == 12288);
    CHECK(ts_spec_draft_vocab(0, 524288) == 65536 && ts_spec_draft_vocab(0, 32769) == 32768);
    CHECK(ts_spec_draft_vocab(0, 1000) == 1000 && ts_spec_draft_vocab(-1, 248320) == 248320);
    CHECK(ts_spec_draft_vocab(100, 1000) == 100 && ts_spec_draft_vocab(5000, 1000) == 1000);
    ts_engine *e = open_fx("tiny-dense");
    CHECK(e);
    static collect ref, got;
    ts_gen_stats st;
    CHECK(oracle_generate(e, PROMPT, T_PROMPT, 512, 200, 0, NULL, &ref, &st) == 0);
    for (int K = 16; K <= 4096; K *= 16) {
        ts_session *s = oracle_session(e, 512, 3);
        CHECK(s);
        dv_check c = {K, 0, 0};
        ts_session_override_drafts(s, dv_drafts, &c);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 200;
        gp.spec_draft = 3;
        gp.draft_vocab = K;
        got.n = 0;
        ts_error err = {0};
        CHECK_MSG(ts_generate(s, PROMPT, T_PROMPT, &gp, on_tok, &got, &st, &err) == 0, "%s", err.msg);
        CHECK_MSG(got.n == 200 && !memcmp(got.ids, ref.ids, sizeof(int32_t) * 200), "K=%d: output differs", K);
        const int Kv = ts_spec_draft_vocab(K, ts_engine_info(e)->vocab_size);
        CHECK_MSG(c.n > 0 && c.bad == 0 && st.draft_vocab == Kv, "K=%d: %d of %d drafts outside, stats %d", K, c.bad, c.n,
                  st.draft_vocab);
        gp.draft_vocab = -2;
        CHECK(ts_generate(s, PROMPT, T_PROMPT, &gp, on_tok, &got, &st, &err) == TS_E_ARG);
        ts_session_free(s);
    }
    ts_engine_close(e);
    char out[4096];
    int rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --draft-vocab 64", ts_test_bin());
    CHECK_MSG(rc != 0 && strstr(out, "need --spec mtp"), "draft-vocab without spec: %s", out);
    rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --spec mtp --draft-vocab 0", ts_test_bin());
    CHECK_MSG(rc != 0 && strstr(out, "bad value"), "draft-vocab 0: %s", out);
    /* bench follows the same rule (one parser, cli_parse_draft_vocab) */
    rc = ts_test_sh(out, sizeof out, "%s bench -m tests/fixtures/tiny-dense --spec mtp --draft 2 --draft-vocab 0", ts_test_bin());
    CHECK_MSG(rc != 0 && strstr(out, "bad value '0' for --draft-vocab"), "bench draft-vocab 0: %s", out);
}

/* draft_p_min: the output never changes; 1 leaves no draft standing (every
 * verify is one row); on the trained default model (whose drafter's
 * probabilities spread) a floor of 0.5 cuts some drafts, keeps others, and
 * the kept ones are accepted more often than drafts taken blindly. Out of
 * [0, 1] (or NaN) is refused. */
TS_TEST(spec, draft_p_min) {
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK_MSG(ts_engine_open("models/default", NULL, &e, &err) == 0, "%s", err.msg);
    static const int32_t P[] = {464, 1236, 286, 262, 1110, 11, 290, 262, 995, 373, 257, 3797, 13, 383, 1110, 286};
    const int TP = (int)(sizeof P / sizeof P[0]), N = 160, M = 4;
    static collect ref, got;
    ts_gen_stats st;
    CHECK(oracle_generate(e, P, TP, 512, N, 0, NULL, &ref, &st) == 0);
    const float floors[] = {0.0f, 0.5f, 1.0f};
    int drafted[3] = {0}, accepted[3] = {0}, blocks[3] = {0};
    for (int f = 0; f < 3; f++) {
        ts_session *s = oracle_session(e, 512, M);
        CHECK(s);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = N;
        gp.spec_draft = M;
        gp.draft_p_min = floors[f];
        got.n = 0;
        CHECK_MSG(ts_generate(s, P, TP, &gp, on_tok, &got, &st, &err) == 0, "%s", err.msg);
        CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n), "floor %g: output differs",
                  (double)floors[f]);
        drafted[f] = st.n_drafted;
        accepted[f] = st.n_accepted;
        blocks[f] = st.n_blocks;
        const float bad[] = {-0.1f, 1.5f, NAN};
        for (int b = 0; b < 3 && f == 0; b++) {
            gp.draft_p_min = bad[b];
            CHECK(ts_generate(s, P, TP, &gp, on_tok, &got, &st, &err) == TS_E_ARG && strstr(err.msg, "probability floor"));
        }
        ts_session_free(s);
    }
    CHECK_MSG(drafted[2] == 0 && blocks[2] == ref.n - 1, "floor 1: %d drafts, %d blocks for %d tokens", drafted[2], blocks[2],
              ref.n);
    CHECK_MSG(drafted[0] >= M * (blocks[0] - 1), "floor 0: %d drafts in %d blocks", drafted[0], blocks[0]);
    CHECK_MSG(drafted[1] > 0 && drafted[1] < M * blocks[1], "floor 0.5: %d drafts in %d blocks", drafted[1], blocks[1]);
    CHECK_MSG((double)accepted[1] / drafted[1] > (double)accepted[0] / drafted[0],
              "floor 0.5 accepted %d/%d, no floor %d/%d", accepted[1], drafted[1], accepted[0], drafted[0]);
    ts_engine_close(e);
}

/* Every activation precision (--act-bits 24, 16, 8) keeps verify rows equal
 * to decode rows, so drafted greedy output is plain greedy output at that
 * precision: the bundled INT4 model (the packed kernels; the bf16 fixtures
 * above never reach them), M = 1..4 (up to 5 verify rows: VNNI and AMX
 * both, where the CPU has AMX), MTP and oracle drafts. The precisions give
 * different outputs (otherwise the option would not reach the kernels), and
 * an unknown one is refused by name. */
TS_TEST(spec, greedy_exact_every_precision) {
    static const int32_t P[] = {464, 1236, 286, 262, 1110, 11, 290, 262, 995, 373, 257, 3797, 13, 383, 1110, 286};
    const int TP = (int)(sizeof P / sizeof P[0]), N = 200;
    static collect ref[3], got;
    const int bits[] = {24, 16, 8};
    for (int b = 0; b < 3; b++) {
        ts_engine_params ep;
        ts_engine_params_default(&ep);
        ep.act_bits = bits[b];
        ts_engine *e = NULL;
        ts_error err = {0};
        CHECK_MSG(ts_engine_open("models/default", &ep, &e, &err) == 0, "%s", err.msg);
        ts_gen_stats st;
        CHECK(oracle_generate(e, P, TP, 512, N, 0, NULL, &ref[b], &st) == 0);
        /* a trained model's argmax hides small differences, so first the
         * bits: each row of a verify block of 5 (VNNI below the AMX
         * threshold, AMX at or above it) against one-at-a-time decoding,
         * then rolled back to 2 rows, the whole state */
        const int V = ts_engine_info(e)->vocab_size;
        ts_session *va = oracle_session(e, 512, 4), *vb = oracle_session(e, 512, 0);
        CHECK(va && vb);
        CHECK(ts_session_feed(va, P, TP, NULL, NULL, &err) == 0 && ts_session_feed(vb, P, TP, NULL, NULL, &err) == 0);
        CHECK_MSG(ts_spec_verify(va, ref[b].ids, 5, &err) == 0, "%s", err.msg);
        for (int i = 0; i < 5; i++) {
            CHECK(ts_session_feed(vb, &ref[b].ids[i], 1, NULL, NULL, &err) == 0);
            CHECK_MSG(!memcmp(va->vlogits + (size_t)i * V, ts_session_logits(vb), sizeof(float) * V),
                      "%d-bit activations: verify row %d differs from its decode step", bits[b], i);
        }
        ts_session_free(vb);
        vb = oracle_session(e, 512, 0);
        CHECK(ts_session_feed(vb, P, TP, NULL, NULL, &err) == 0 && ts_session_feed(vb, ref[b].ids, 1, NULL, NULL, &err) == 0 &&
              ts_session_feed(vb, ref[b].ids + 1, 1, NULL, NULL, &err) == 0);
        ts_spec_rollback(va, 2);
        ts_spec_materialize(va);
        CHECK_MSG(state_diff(va, vb) < 0, "%d-bit activations: state after rollback differs", bits[b]);
        ts_session_free(va);
        ts_session_free(vb);
        for (int M = 1; M <= 4; M++) {
            oracle o = {ref[b].ids, ref[b].n, TP, 777u + M, 0};
            for (int k = 0; k < 2; k++) {
                CHECK(oracle_generate(e, P, TP, 512, N, M, k ? &o : NULL, &got, &st) == 0);
                CHECK_MSG(got.n == ref[b].n && !memcmp(got.ids, ref[b].ids, sizeof(int32_t) * (size_t)got.n),
                          "%d-bit activations, M=%d (%s drafts): output differs from plain greedy", bits[b], M,
                          k ? "oracle" : "MTP");
                CHECK(st.n_accepted > 0 && st.n_accepted < st.n_drafted);
            }
        }
        ts_engine_close(e);
    }
    /* the logits differ between precisions; 200 tokens of a trained model
     * may still agree, so compare the last prompt row's logits instead */
    float *lg[2];
    for (int b = 0; b < 2; b++) {
        ts_engine_params ep;
        ts_engine_params_default(&ep);
        ep.act_bits = b ? 8 : 24;
        ts_engine *e = NULL;
        ts_error err = {0};
        CHECK_MSG(ts_engine_open("models/default", &ep, &e, &err) == 0, "%s", err.msg);
        int V = ts_engine_info(e)->vocab_size;
        lg[b] = malloc(sizeof(float) * (size_t)V * TP);
        ts_session *s = oracle_session(e, 512, 0);
        CHECK(s && ts_session_feed(s, P, TP, lg[b], NULL, &err) == 0);
        ts_session_free(s);
        if (b) {
            float d = ts_test_max_abs(lg[0], lg[1], (size_t)V * TP);
            fprintf(stderr, "  prompt logits, 8-bit against 24-bit activations: max |diff| %.3g\n", (double)d);
            CHECK_MSG(d > 0 && d < 0.5f, "8-bit vs 24-bit logits differ by %g", (double)d);
        }
        ts_engine_close(e);
    }
    free(lg[0]);
    free(lg[1]);
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.act_bits = 12;
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK(ts_engine_open("models/default", &ep, &e, &err) == TS_E_ARG && e == NULL && strstr(err.msg, "12 bits"));
}

/* A session that continues (a chat's next turn, a server's reused prefix):
 * generating with drafting after earlier generations on the same session,
 * plain or drafted, gives the plain continuation's ids. The drafter's cache
 * has gaps there (rows never run through the MTP head); that may cost
 * acceptance, never output. */
TS_TEST(spec, continued_session) {
    ts_engine *e = open_fx("tiny-dense");
    CHECK(e);
    static const int32_t P2[] = {7, 300, 12, 5};
    const int T2 = (int)(sizeof P2 / sizeof P2[0]);
    static collect ref[3], got;
    ts_error err = {0};
    ts_gen_stats st;
    /* plain: three turns on one session */
    ts_session *s = oracle_session(e, 512, 0);
    CHECK(s);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    for (int t = 0; t < 3; t++) {
        gp.n_predict = 30 + 10 * t;
        ref[t].n = 0;
        CHECK_MSG(ts_generate(s, t ? P2 : PROMPT, t ? T2 : T_PROMPT, &gp, on_tok, &ref[t], &st, &err) == 0, "%s", err.msg);
    }
    ts_session_free(s);
    /* drafted turns, and a plain turn in the middle */
    for (int M = 1; M <= 4; M += 3) {
        s = oracle_session(e, 512, M);
        CHECK(s);
        for (int t = 0; t < 3; t++) {
            gp.n_predict = 30 + 10 * t;
            gp.spec_draft = t == 1 ? 0 : M;
            got.n = 0;
            CHECK_MSG(ts_generate(s, t ? P2 : PROMPT, t ? T2 : T_PROMPT, &gp, on_tok, &got, &st, &err) == 0, "%s", err.msg);
            CHECK_MSG(got.n == ref[t].n && !memcmp(got.ids, ref[t].ids, sizeof(int32_t) * (size_t)got.n),
                      "M=%d turn %d: output differs from the plain continuation", M, t);
        }
        ts_session_free(s);
    }
    ts_engine_close(e);
}

/* Session checkpoints: continuing from a restored state gives the bits of
 * continuing from the moment of the save, whether the save came after a
 * plain prefill, a drafted generation, or a rollback whose rows are still
 * pending (the save must apply them); and a checkpoint can be restored more
 * than once.
 * Without the buffers, with nothing saved, or after a reset: refused. */
TS_TEST(spec, checkpoint_restore) {
    ts_engine *e = open_fx("tiny-dense");
    CHECK(e);
    const int V = ts_engine_info(e)->vocab_size;
    static const int32_t Q[] = {9, 100, 3, 47, 250};
    static const int32_t JUNK[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    float *la = malloc(sizeof(float) * 5 * V), *lb = malloc(sizeof(float) * 5 * V);
    ts_error err = {0};
    ts_gen_stats st;
    static collect out;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 23;
    gp.spec_draft = 3;
    static const int32_t BLK[] = {5, 6, 7, 8};
    for (int after_gen = 0; after_gen < 3; after_gen++) {
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.n_ctx = 256;
        sp.spec_draft = 3;
        sp.checkpoint = 1;
        ts_session *a = NULL, *b = NULL;
        CHECK(ts_session_new(e, &sp, &a, &err) == 0 && ts_session_new(e, &sp, &b, &err) == 0);
        ts_session *both[2] = {a, b};
        for (int k = 0; k < 2; k++) { /* the same history in both */
            CHECK(ts_session_feed(both[k], PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
            out.n = 0;
            if (after_gen == 1) CHECK(ts_generate(both[k], Q, 2, &gp, on_tok, &out, &st, &err) == 0);
            if (after_gen == 2) { /* a verify block rolled back to 2 rows: a lazy rollback pending */
                CHECK(ts_spec_verify(both[k], BLK, 4, &err) == 0);
                ts_spec_rollback(both[k], 2);
                CHECK(both[k]->st.gdn_pend == 2);
            }
        }
        CHECK(ts_session_saved_pos(a) == -1 && ts_session_restore(a, &err) == TS_E_ARG);
        CHECK(ts_session_save(a, &err) == 0 && ts_session_saved_pos(a) == ts_session_pos(a));
        const int saved = ts_session_pos(a);
        CHECK(ts_session_feed(b, Q, 5, lb, NULL, &err) == 0);
        for (int round = 0; round < 2; round++) {
            CHECK(ts_session_feed(a, JUNK, 11, NULL, NULL, &err) == 0); /* moves on: KV rows and GDN state change */
            out.n = 0;
            CHECK(ts_generate(a, JUNK, 3, &gp, on_tok, &out, &st, &err) == 0);
            CHECK(ts_session_restore(a, &err) == 0 && ts_session_pos(a) == saved);
            CHECK(ts_session_feed(a, Q, 5, la, NULL, &err) == 0);
            CHECK_MSG(!memcmp(la, lb, sizeof(float) * 5 * V), "after %s, restore round %d: logits differ",
                      after_gen == 2 ? "a rollback" : after_gen ? "a drafted generation" : "a prefill", round);
        }
        ts_session_reset(a);
        CHECK(ts_session_saved_pos(a) == -1 && ts_session_restore(a, &err) == TS_E_ARG);
        ts_session_free(a);
        ts_session_free(b);
    }
    ts_session *p = oracle_session(e, 256, 0); /* no checkpoint buffers */
    CHECK(ts_session_save(p, &err) == TS_E_ARG && strstr(err.msg, "checkpoint"));
    CHECK(ts_session_restore(p, &err) == TS_E_ARG);
    ts_session_free(p);
    free(la);
    free(lb);
    ts_engine_close(e);
}

/* End to end with temperature: runs, is deterministic for a seed, and with
 * a seed different outputs appear. */
TS_TEST(spec, sampling_generate) {
    ts_engine *e = open_fx("tiny-dense");
    CHECK(e);
    collect a, b;
    int differ = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        ts_session *s = oracle_session(e, 256, 4);
        CHECK(s);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 40;
        gp.spec_draft = 4;
        gp.temperature = 1.5f;
        gp.seed = seed;
        ts_error err = {0};
        a.n = 0;
        ts_gen_stats st;
        CHECK_MSG(ts_generate(s, PROMPT, T_PROMPT, &gp, on_tok, &a, &st, &err) == 0, "%s", err.msg);
        ts_session_reset(s);
        collect a2 = {{0}, 0};
        CHECK(ts_generate(s, PROMPT, T_PROMPT, &gp, on_tok, &a2, &st, &err) == 0);
        CHECK(a.n == 40 && a2.n == 40 && !memcmp(a.ids, a2.ids, sizeof(int32_t) * 40));
        if (seed > 1 && memcmp(a.ids, b.ids, sizeof(int32_t) * 40)) differ = 1;
        b = a;
        ts_session_free(s);
    }
    CHECK(differ);
    ts_engine_close(e);
}

TS_TEST(spec, bad_input) {
    char out[8192];
    const char *bin = ts_test_bin();
    int rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --spec mtp --draft 0", bin);
    CHECK_MSG(rc != 0 && strstr(out, "--draft 0 is outside 1..8"), "draft 0: rc %d, %s", rc, out);
    rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --spec mtp --draft 9", bin);
    CHECK_MSG(rc != 0 && strstr(out, "--draft 9 is outside 1..8"), "draft 9: rc %d, %s", rc, out);
    rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --spec eagle", bin);
    CHECK_MSG(rc != 0 && strstr(out, "--spec 'eagle'"), "spec eagle: rc %d, %s", rc, out);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/nomtp", ts_test_tmpdir());
    CHECK(fx_copy_without_mtp("tests/fixtures/tiny-dense", dir) == 0);
    rc = ts_test_sh(out, sizeof out, "%s run -m %s --ids 1,2 -n 4 --print-ids", bin, dir);
    CHECK_MSG(rc == 0, "plain run without mtp.*: %s", out);
    rc = ts_test_sh(out, sizeof out, "%s run -m %s --ids 1,2 -n 4 --spec mtp --draft 2", bin, dir);
    CHECK_MSG(rc != 0 && strstr(out, "no MTP head (no mtp.* tensors)"), "no mtp: rc %d, %s", rc, out);
    /* and through the API */
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK(ts_engine_open(dir, NULL, &e, &err) == 0);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.spec_draft = 2;
    ts_session *s = NULL;
    CHECK(ts_session_new(e, &sp, &s, &err) == TS_E_UNSUPPORTED && strstr(err.msg, "mtp.*"));
    ts_engine_close(e);
    /* a session without drafting buffers refuses drafting; draft 9 refused */
    e = open_fx("tiny-dense");
    s = oracle_session(e, 128, 0);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.spec_draft = 2;
    CHECK(ts_generate(s, PROMPT, T_PROMPT, &gp, NULL, NULL, NULL, &err) == TS_E_ARG && strstr(err.msg, "spec_draft"));
    gp.spec_draft = 9;
    CHECK(ts_generate(s, PROMPT, T_PROMPT, &gp, NULL, NULL, NULL, &err) == TS_E_ARG);
    ts_session_free(s);
    sp.spec_draft = 9;
    CHECK(ts_session_new(e, &sp, &s, &err) == TS_E_ARG);
    /* the CLI prints the statistics */
    rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2,3 -n 20 --spec mtp --draft 3", bin);
    CHECK_MSG(rc == 0 && strstr(out, "mean accepted length") && strstr(out, "rollback"), "stats: %s", out);
    ts_engine_close(e);
}
