/* test_ahead.c: run-ahead greedy decoding (gen/generate.c's ahead_loop; the
 * session parameter ahead; backend.h's argmax_ahead / ahead_read and
 * TS_REC_SWAP) on the CPU, the reference the GPU's run is tested against
 * (test_cuda_engine.c: cuda_engine.ahead_exact runs the same comparison).
 *
 * - exactness: against plain decoding (ahead = -1) on tiny-dense, tiny-moe
 *   and the default model, for every way a generation ends (budgets 40, 1
 *   and 2, a stop id late, first and second, the callback's stop, the
 *   context limit), with and without a drafter's buffers: the same ids,
 *   position, last logits and hidden, the raw state byte for byte (KV rows
 *   below the position, the live GDN buffers of each pair) and the same
 *   continuation (gen_oracle.h's ahead_same);
 * - mixed with speculative decoding in one session: n-gram generations and
 *   run-ahead generations in turn, then one after a lazy rollback left rows
 *   pending (its prompt's pass applies them; its loop then runs ahead),
 *   against the same turns with run-ahead off;
 * - the parameter: auto is off on the CPU (nothing allocated), TS_AHEAD=1
 *   turns auto on, 1 is on and -1 off whatever TS_AHEAD says, a bad value
 *   is refused by name; the plan has the run-ahead lines exactly when a
 *   session has the buffers (their sizes: tests/test_plan.c's equality);
 * - a run-ahead step misused (two rows, rows pending, no logits row) is a
 *   clear error, not a corrupted state.
 */
#include <stdlib.h>

#include "gen/spec.h"
#include "ts_test.h"
#include "gen_oracle.h"

/* The raw state of two CPU sessions: the same position, nothing pending,
 * KV rows below the position and the live buffers of each GDN pair equal
 * byte for byte (the parities may differ: run-ahead trades the pairs).
 * Nonzero on a difference. */
static int raw_state_differs(const ts_session *a, const ts_session *b) {
    const ts_model *m = &a->e->model;
    const ts_config *c = &m->cfg;
    if (a->pos != b->pos || a->st.gdn_pend != b->st.gdn_pend) return 1;
    if (a->st.gdn_pend) return 0; /* (a lazy rollback's state is compared by what follows) */
    for (int L = 0; L < c->n_layers; L++) {
        if (c->layer_full[L]) {
            const size_t bytes = sizeof(float) * (size_t)a->pos * m->kvdim;
            if (memcmp(a->st.kv[L].k, b->st.kv[L].k, bytes) || memcmp(a->st.kv[L].v, b->st.kv[L].v, bytes)) return 1;
        } else {
            float *ca, *Sa, *cb, *Sb;
            ts_gdn_live(&a->st, L, &ca, &Sa);
            ts_gdn_live(&b->st, L, &cb, &Sb);
            if (memcmp(ca, cb, sizeof(float) * a->st.gdn_conv_n) || memcmp(Sa, Sb, sizeof(float) * a->st.gdn_S_n)) return 1;
        }
    }
    return 0;
}

TS_TEST(ahead, same_as_plain) {
    static const char *dirs[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe", "models/default"};
    static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
    for (int d = 0; d < 3; d++) {
        ts_engine *e = ts_test_open_cpu(dirs[d]);
        CHECK(e);
        if (!e) continue;
        int32_t p[9];
        for (int i = 0; i < 9; i++) p[i] = pr[i] % ts_engine_info(e)->vocab_size;
        CHECK_MSG(ahead_same(e, p, 9, raw_state_differs) == 0, "%s", dirs[d]);
        /* a run-ahead session traded its pairs: the raw check compared the
         * live buffers, not the same buffers */
        ts_session *s = ahead_session(e, 128, 1, 0);
        CHECK(s && s->ahead_rows && s->st.tape && s->st.tape[e->model.cfg.layer_full[0] ? 1 : 0].snap_S);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 5;
        ts_error err = {0};
        CHECK(s && ts_generate(s, p, 9, &gp, NULL, NULL, NULL, &err) == 0);
        CHECK_MSG(s && s->st.par_S == 0 && s->st.par_conv == 0, "4 steps (even): parities %d %d", s ? s->st.par_S : -1,
                  s ? s->st.par_conv : -1);
        gp.n_predict = 4;
        CHECK(s && ts_generate(s, p, 1, &gp, NULL, NULL, NULL, &err) == 0);
        CHECK_MSG(s && s->st.par_S == 1 && s->st.par_conv == 1, "3 more steps (odd): parities %d %d",
                  s ? s->st.par_S : -1, s ? s->st.par_conv : -1);
        ts_session_free(s);
        ts_engine_close(e);
    }
}

/* n-gram generations (verify blocks, lazy rollbacks that leave rows
 * pending) and plain generations in turn in one session: with run-ahead on
 * for the plain ones (a generation after a pending rollback: its prompt's
 * pass applies the rows, then its loop runs ahead) against the same turns
 * with it off. */
TS_TEST(ahead, mixed_with_speculative) {
    ts_engine *e = ts_test_open_cpu("models/default");
    CHECK(e);
    if (!e) return;
    const int V = e->model.cfg.vocab;
    static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257, 1279, 355, 260};
    ts_session *s[2] = {ahead_session(e, 512, 1, 4), ahead_session(e, 512, -1, 4)};
    CHECK(s[0] && s[1]);
    if (!s[0] || !s[1]) goto done;
    int32_t last[2] = {pr[11], pr[11]};
    int pending_starts = 0;
    for (int turn = 0; turn < 8; turn++)
        for (int r = 0; r < 2; r++) {
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = 9 + 3 * turn;
            if (turn % 2) gp.spec_ngram = 4, gp.ngram_min = 1, gp.spec_draft = 4;
            else if (r == 0) pending_starts += s[r]->st.gdn_pend > 0;
            collect c = {.n = 0};
            ts_error err = {0};
            const int rc = turn ? ts_generate(s[r], &last[r], 1, &gp, on_tok, &c, NULL, &err)
                                : ts_generate(s[r], pr, 12, &gp, on_tok, &c, NULL, &err);
            CHECK_MSG(rc == 0 && c.n > 0, "turn %d: %s", turn, err.msg);
            if (rc || !c.n) goto done;
            last[r] = c.ids[c.n - 1];
            static collect prev;
            if (r == 0) prev = c;
            else
                CHECK_MSG(c.n == prev.n && !memcmp(c.ids, prev.ids, sizeof(int32_t) * (size_t)c.n) &&
                              ts_session_pos(s[0]) == ts_session_pos(s[1]) &&
                              !memcmp(ts_session_logits(s[0]), ts_session_logits(s[1]), sizeof(float) * (size_t)V),
                          "turn %d (%s): %d ids at %d, off: %d at %d", turn, turn % 2 ? "n-gram" : "plain", prev.n,
                          ts_session_pos(s[0]), c.n, ts_session_pos(s[1]));
        }
    /* a lazy rollback left pending by hand (a block of 5, 2 rows kept),
     * then a plain generation: it starts from the pending rows */
    for (int r = 0; r < 2; r++) {
        const int32_t blk[] = {last[r], 9, 31, 4, 200};
        ts_error err = {0};
        CHECK_MSG(ts_spec_verify(s[r], blk, 5, &err) == 0, "%s", err.msg);
        ts_spec_rollback(s[r], 2);
        CHECK(s[r]->st.gdn_pend == 2);
        pending_starts += r == 0;
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 15;
        collect c = {.n = 0};
        CHECK_MSG(ts_generate(s[r], &blk[1], 1, &gp, on_tok, &c, NULL, &err) == 0, "%s", err.msg);
        static collect prev;
        if (r == 0) prev = c;
        else
            CHECK_MSG(c.n == prev.n && !memcmp(c.ids, prev.ids, sizeof(int32_t) * (size_t)c.n) &&
                          !memcmp(ts_session_logits(s[0]), ts_session_logits(s[1]), sizeof(float) * (size_t)V) &&
                          !raw_state_differs(s[0], s[1]),
                      "after a pending rollback: %d ids, off: %d", prev.n, c.n);
    }
    CHECK(pending_starts >= 1);
    fprintf(stderr, "  8 turns and a generation after a pending rollback identical (%d plain generations began "
                    "with rows pending)\n", pending_starts);
done:
    ts_session_free(s[0]);
    ts_session_free(s[1]);
    ts_engine_close(e);
}

/* The parameter's values, TS_AHEAD, the plan's lines. */
TS_TEST(ahead, parameter_and_plan) {
    const char *dir = "tests/fixtures/tiny-moe";
    ts_engine *e = ts_test_open_cpu(dir);
    CHECK(e);
    if (!e) return;
    static const struct { int ahead; const char *env; int on; } C[] = {
        {0, NULL, 0}, {0, "1", 1}, {0, "0", 0}, {1, NULL, 1}, {1, "0", 1}, {-1, "1", 0}, {-1, NULL, 0}};
    char outer[16] = "";
    const char *o = getenv("TS_AHEAD");
    if (o) snprintf(outer, sizeof outer, "%s", o);
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        if (C[i].env) setenv("TS_AHEAD", C[i].env, 1);
        else unsetenv("TS_AHEAD");
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.n_ctx = 64;
        sp.ahead = C[i].ahead;
        ts_session *s = NULL;
        ts_error err = {0};
        CHECK_MSG(ts_session_new(e, &sp, &s, &err) == 0, "%s", err.msg);
        CHECK_MSG(s && !!s->ahead_rows == C[i].on && !!s->st.tape == C[i].on, "ahead %d, TS_AHEAD %s: buffers %d, want %d",
                  C[i].ahead, C[i].env ? C[i].env : "unset", s ? !!s->ahead_rows : -1, C[i].on);
        ts_session_free(s);
        /* the plan: the run-ahead lines, with bytes, exactly then */
        static ts_mem_plan pl;
        ts_engine_params ep;
        ts_engine_params_default(&ep);
        ep.backend = "cpu";
        CHECK_MSG(ts_mem_plan_dir_ex(dir, &ep, &sp, &pl, &err) == 0, "%s", err.msg);
        uint64_t lines = 0;
        for (int k = 0; k < pl.n_items; k++)
            if (!strncmp(pl.items[k].name, "run-ahead", 9)) lines += pl.items[k].bytes;
        CHECK_MSG((lines > 0) == C[i].on && pl.ahead == C[i].on, "ahead %d, TS_AHEAD %s: plan %llu bytes, ahead %d",
                  C[i].ahead, C[i].env ? C[i].env : "unset", (unsigned long long)lines, pl.ahead);
    }
    if (o) setenv("TS_AHEAD", outer, 1); /* (a suite run under TS_AHEAD=1) */
    else unsetenv("TS_AHEAD");
    ts_session_params sp;
    ts_session_params_default(&sp);
    ts_session *s = NULL;
    ts_error err = {0};
    sp.ahead = 2;
    CHECK(ts_session_new(e, &sp, &s, &err) == TS_E_ARG && strstr(err.msg, "ahead 2") && !s);
    ts_engine_close(e);
}

/* The model refuses a run-ahead pass it cannot undo (ts_forward with
 * ahead_on: more than one row, rows pending, no logits row of its own),
 * and the session goes on unharmed. */
TS_TEST(ahead, misuse_refused) {
    ts_engine *e = ts_test_open_cpu("tests/fixtures/tiny-dense");
    CHECK(e);
    if (!e) return;
    ts_session *s = ahead_session(e, 64, 1, 0), *ref = ahead_session(e, 64, -1, 0);
    CHECK(s && ref);
    if (s && ref) {
        const int32_t ids[] = {5, 9, 13};
        ts_error err = {0};
        CHECK(ts_session_feed(s, ids, 3, NULL, NULL, &err) == 0 && ts_session_feed(ref, ids, 3, NULL, NULL, &err) == 0);
        ts_state *st = &s->st;
        st->ahead_on = 1;
        int rc2 = ts_forward(&e->model, st, ids, 2, s->pos, s->ahead_rows, 0);
        int rc0 = ts_forward(&e->model, st, ids, 1, s->pos, NULL, 0);
        st->ahead_on = 0;
        CHECK_MSG(rc2 == TS_E_ARG && rc0 == TS_E_ARG, "two rows: %d, no logits row: %d", rc2, rc0);
        int32_t nx = 7;
        CHECK(ts_session_feed(s, &nx, 1, NULL, NULL, &err) == 0 && ts_session_feed(ref, &nx, 1, NULL, NULL, &err) == 0);
        CHECK_MSG(!memcmp(ts_session_logits(s), ts_session_logits(ref), sizeof(float) * (size_t)e->model.cfg.vocab) &&
                      !raw_state_differs(s, ref),
                  "the refused passes changed the session");
    }
    ts_session_free(s);
    ts_session_free(ref);
    ts_engine_close(e);
}

/* MTP drafts chained on the device (mtp_draft.c's mtp_propose_chain, taken
 * where the session runs ahead): the same drafts as one at a time
 * (gen_oracle.h's mtp_chain_same), on the default model, M = 2..4. */
TS_TEST(ahead, mtp_chain_same_drafts) {
    ts_engine *e = ts_test_open_cpu("models/default");
    CHECK(e);
    if (!e) return;
    CHECK(mtp_chain_same(e) == 0);
    ts_engine_close(e);
}
