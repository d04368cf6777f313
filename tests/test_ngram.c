/* test_ngram.c: n-gram (prompt lookup) drafting (src/gen/ngram_draft.c,
 * the loop in src/gen/spec.c).
 *
 * - the index: on random id streams (small alphabets, so that n-grams
 *   repeat; a large one, so that the tables fill with distinct n-grams) its
 *   proposals equal a brute-force scan of the history after every push, for
 *   many (n_min, n_max, m), and a full history drops ids without harm;
 * - exactness: greedy output with n-gram drafts (M = 1..8, several n-gram
 *   ranges) is the same ids as plain greedy on tiny-dense, tiny-moe and
 *   the bundled default model, from prompts built with repeats so that drafts
 *   are proposed and accepted (asserted); on a session with n-gram buffers
 *   alone and on one with MTP buffers; ended by the token budget, by a stop
 *   id and by the context limit inside a block;
 * - a checkpoint without an MTP head drafts n-grams (and refuses MTP);
 * - history before the prompt (gen params ngram_ctx): looked up (a history
 *   holding the continuation is nearly all accepted), output unchanged on a
 *   continued session, and a resumed session's sampled draws are a cold
 *   run's when the fed ids are handed over;
 * - constraints and log-probabilities: the same ids and entries as plain;
 * - speculative sampling: dprobs NULL (a point mass) gives the bits of
 *   one-hot rows; the first emitted token follows the target (chi-square at
 *   the acceptance level), and through the whole path the first two tokens
 *   follow the target's joint, with drafts planted by ngram_ctx;
 * - the CLI (run, chat, bench) and bad input.
 */
#include <math.h>
#include <sys/stat.h>

#include "gen/drafter.h"
#include "gen/spec.h"
#include "ts_test.h"
#include "gen_oracle.h"
#include "lp_rec.h"
#include "constraint_fx.h"

static char g_out[1 << 16];

/* ---- the index against a scan ---- */

/* The rule, by brute force: the longest suffix of n_min..n_max ids with an
 * earlier occurrence, its most recent one, up to m ids after it. */
static int scan_propose(const int32_t *h, int len, int n_min, int n_max, int m, int32_t *out) {
    for (int n = n_max < len - 1 ? n_max : len - 1; n >= n_min; n--)
        for (int e = len - 2; e >= n - 1; e--) {
            if (memcmp(h + e - n + 1, h + len - n, sizeof(int32_t) * (size_t)n)) continue;
            int k = len - 1 - e < m ? len - 1 - e : m;
            memcpy(out, h + e + 1, sizeof(int32_t) * (size_t)k);
            return k;
        }
    return 0;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

TS_TEST(ngram, index_vs_scan) {
    static const int alphabet[] = {2, 3, 5, 40, 100000};
    static const int sizes[][2] = {{1, 1}, {1, 4}, {2, 4}, {3, 3}, {2, 16}, {1, 16}};
    long checks = 0, proposed = 0, full = 0;
    for (size_t a = 0; a < sizeof alphabet / sizeof alphabet[0]; a++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            const int n_min = sizes[z][0], n_max = sizes[z][1], cap = 600;
            ts_ngram_index x;
            ts_error err = {0};
            CHECK_MSG(ts_ngram_index_init(&x, n_min, n_max, cap, &err) == 0, "%s", err.msg);
            static int32_t h[700];
            int len = 0, pushed = 0;
            uint64_t s = 1000u * a + z + 1;
            /* random chunks (a prompt's, a block's), the last ones past cap */
            while (pushed < cap + 50) {
                int32_t chunk[9];
                const int k = 1 + (int)(lcg(&s) % 9);
                for (int i = 0; i < k; i++) {
                    /* repeat an earlier stretch now and then, as text does */
                    if (len > 20 && lcg(&s) % 4 == 0) chunk[i] = h[lcg(&s) % (uint64_t)(len < cap ? len : cap)];
                    else chunk[i] = (int32_t)(lcg(&s) % (uint64_t)alphabet[a]);
                }
                ts_ngram_index_push(&x, chunk, k);
                for (int i = 0; i < k && len < cap; i++) h[len++] = chunk[i];
                pushed += k;
                full += pushed > cap;
                CHECK(x.len == len);
                for (int m = 1; m <= 8; m += 3) {
                    int32_t o1[8], o2[8];
                    const int k1 = ts_ngram_index_propose(&x, m, o1), k2 = scan_propose(h, len, n_min, n_max, m, o2);
                    CHECK_MSG(k1 == k2 && !memcmp(o1, o2, sizeof(int32_t) * (size_t)k1),
                              "alphabet %d, n %d..%d, len %d, m %d: index proposes %d ids, the scan %d", alphabet[a], n_min,
                              n_max, len, m, k1, k2);
                    checks++;
                    proposed += k1 > 0;
                }
            }
            ts_ngram_index_free(&x);
        }
    fprintf(stderr, "  %ld proposals equal to the scan's (%ld non-empty; %ld with a full history)\n", checks, proposed, full);
    /* the test has power: most proposals were not empty, some were */
    CHECK(proposed > checks / 2 && proposed < checks && full > 0);
    /* sizes outside 1 <= min <= max <= TS_NGRAM_MAX are refused */
    ts_ngram_index x;
    ts_error err = {0};
    CHECK(ts_ngram_index_init(&x, 0, 3, 10, &err) == TS_E_ARG && strstr(err.msg, "n-gram sizes 0..3"));
    CHECK(ts_ngram_index_init(&x, 3, 2, 10, &err) == TS_E_ARG);
    CHECK(ts_ngram_index_init(&x, 1, TS_NGRAM_MAX + 1, 10, &err) == TS_E_ARG);
}

/* ---- generation helpers ---- */

typedef struct {
    int M, nmax, nmin;   /* M = 0: plain */
    int mtp_session;     /* 1: a session with MTP buffers (spec_draft = M), else n-gram buffers alone */
    int n_ctx, n_pred;
    const int32_t *stop; /* one stop id, or NULL */
    const int32_t *ctx;  /* gen params ngram_ctx */
    int n_hctx;
} ng_run;

static int ng_gen(ts_engine *e, const int32_t *prompt, int T, const ng_run *r, collect *c, ts_gen_stats *st) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = r->n_ctx;
    if (r->mtp_session) sp.spec_draft = r->M;
    else sp.ngram_draft = r->M;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err)) { ts_test_fail(__FILE__, __LINE__, "session: %s", err.msg); return -1; }
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = r->n_pred;
    gp.spec_draft = r->M;
    gp.spec_ngram = r->M ? r->nmax : 0;
    gp.ngram_min = r->nmin;
    gp.ngram_ctx = r->ctx, gp.n_ngram_ctx = r->n_hctx;
    if (r->stop) gp.stop_ids = r->stop, gp.n_stop = 1;
    c->n = 0;
    int rc = ts_generate(s, prompt, T, &gp, on_tok, c, st, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "generate (M %d, n %d..%d): %s", r->M, r->nmin, r->nmax, err.msg);
    ts_session_free(s);
    return rc;
}

static ts_engine *open_dir(const char *dir) {
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(dir, NULL, &e, &err)) ts_test_fail(__FILE__, __LINE__, "%s: %s", dir, err.msg);
    return e;
}

/* ids of text in the default model's tokenizer (into out, at most cap) */
static int encode(const char *text, int32_t *out, int cap) {
    ts_tokenizer *t = NULL;
    ts_error err = {0};
    if (ts_tokenizer_load("models/default", &t, &err)) return -1;
    ts_tokens v = {0};
    int n = -1;
    if (!ts_tokenizer_encode(t, text, strlen(text), &v, &err) && v.n <= cap) {
        memcpy(out, v.ids, sizeof(int32_t) * (size_t)v.n);
        n = v.n;
    }
    ts_tokens_free(&v);
    ts_tokenizer_free(t);
    return n;
}

/* A prompt with repeats: a passage twice and the start of a third copy, so
 * the model's continuation copies it (text) or follows its own loop. */
static const char *PASSAGE =
    "The old mill stood by the river, and every morning the miller opened the gate to let the water turn the wheel. "
    "The children of the village came to watch the stones grind the grain into flour. ";

static int passage_prompt(int32_t *ids, int cap) {
    char text[1024];
    snprintf(text, sizeof text, "%s%sThe old mill stood", PASSAGE, PASSAGE);
    return encode(text, ids, cap);
}

/* a fixture's prompt with repeats: 12 ids twice, then 5 of them again */
static int fixture_prompt(int32_t *ids) {
    static const int32_t P[] = {11, 5, 301, 42, 7, 99, 250, 3, 18, 64, 120, 9};
    int n = 0;
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 12; i++) ids[n++] = P[i];
    for (int i = 0; i < 5; i++) ids[n++] = P[i];
    return n;
}

/* A planted history (gen params ngram_ctx) for the random-weight fixtures,
 * whose outputs rarely repeat: the plain continuation ref[0..n) with about
 * one id in 8 corrupted, so lookups find the true continuation most of the
 * time and a wrong id now and then: every acceptance length and every
 * rollback length occurs, from the n-gram drafter's own proposals. */
static void plant(const int32_t *ref, int n, int32_t *out, uint64_t seed) {
    for (int i = 0; i < n; i++) out[i] = lcg(&seed) % 8 == 0 ? (ref[i] + 1) % 7 : ref[i];
}

/* ---- exactness ---- */

TS_TEST(ngram, greedy_exact) {
    static const char *dirs[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe", "models/default"};
    static const int ranges[][2] = {{2, 4}, {1, 1}, {1, 16}};
    for (int d = 0; d < 3; d++) {
        const int fixture = d < 2;
        ts_engine *e = open_dir(dirs[d]);
        CHECK(e);
        int32_t pr[256];
        const int T = fixture ? fixture_prompt(pr) : passage_prompt(pr, 256);
        CHECK(T > 20);
        const int N = fixture ? 300 : 200;
        static collect ref, got;
        static int32_t hist[300];
        ts_gen_stats st;
        ng_run r = {0, 4, 2, 0, 1024, N, NULL, NULL, 0};
        CHECK(ng_gen(e, pr, T, &r, &ref, &st) == 0 && ref.n == N);
        long acc[2] = {0}, drafted[2] = {0};
        int acc_at[TS_SPEC_MAX_DRAFT] = {0};
        for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++)
            for (int g = 0; g < 3; g++)
                for (int planted = 0; planted <= fixture; planted++) {
                    r.M = M, r.nmin = ranges[g][0], r.nmax = ranges[g][1];
                    r.mtp_session = g == 2; /* n-gram drafts in an MTP session's verify buffers too */
                    plant(ref.ids, N, hist, 31u * M + g);
                    r.ctx = planted ? hist : NULL, r.n_hctx = planted ? N : 0;
                    CHECK(ng_gen(e, pr, T, &r, &got, &st) == 0);
                    CHECK_MSG(got.n == N && !memcmp(got.ids, ref.ids, sizeof(int32_t) * N),
                              "%s M=%d n-grams %d..%d%s: output differs from plain greedy", dirs[d], M, r.nmin, r.nmax,
                              planted ? " (planted history)" : "");
                    /* the default model copies its repetitive prompt (and loops): drafts accepted in every run */
                    CHECK_MSG(fixture || st.n_accepted > 0, "%s M=%d n-grams %d..%d: %d of %d accepted", dirs[d], M, r.nmin,
                              r.nmax, st.n_accepted, st.n_drafted);
                    CHECK_MSG(!planted || (st.n_accepted > 0 && st.n_accepted < st.n_drafted),
                              "%s M=%d n-grams %d..%d (planted): %d of %d accepted", dirs[d], M, r.nmin, r.nmax, st.n_accepted,
                              st.n_drafted);
                    acc[planted] += st.n_accepted, drafted[planted] += st.n_drafted;
                    for (int j = 0; j < M; j++) acc_at[j] += st.accepted_at[j];
                }
        fprintf(stderr, "  %-26s %d runs identical to plain greedy (%d tokens); drafts accepted %ld of %ld from the "
                        "prompt%s", dirs[d], fixture ? 48 : 24, N, acc[0], drafted[0], fixture ? "" : "\n");
        if (fixture) fprintf(stderr, ", %ld of %ld with a planted history\n", acc[1], drafted[1]);
        /* every acceptance length (the default model's loops are shorter than
         * 8 ids, and a proposal stops at the history's end: its positions
         * past a loop's period are never drafted) */
        for (int j = 0; j < TS_SPEC_MAX_DRAFT && fixture; j++)
            CHECK_MSG(acc_at[j] > 0, "%s: draft position %d never accepted", dirs[d], j + 1);
        ts_engine_close(e);
    }
}

/* Ended inside a block by the token budget, by a stop id and by the context
 * limit: the same ids as plain greedy, which ends there too. */
TS_TEST(ngram, ends_mid_block) {
    ts_engine *e = open_dir("models/default");
    CHECK(e);
    int32_t pr[256];
    const int T = passage_prompt(pr, 256);
    CHECK(T > 20);
    static collect ref, got;
    ts_gen_stats st;
    int acc = 0;
    for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
        /* the budget: every remainder of a block */
        for (int n = 17; n <= 25; n++) {
            ng_run r = {0, 4, 2, 0, 512, n, NULL, NULL, 0};
            CHECK(ng_gen(e, pr, T, &r, &ref, &st) == 0 && ref.n == n);
            r.M = M;
            CHECK(ng_gen(e, pr, T, &r, &got, &st) == 0);
            CHECK_MSG(got.n == n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)n), "budget %d, M=%d", n, M);
            acc += st.n_accepted;
        }
        /* a stop id: the first new id from the 12th generated on */
        ng_run r = {0, 4, 2, 0, 512, 120, NULL, NULL, 0};
        CHECK(ng_gen(e, pr, T, &r, &ref, &st) == 0);
        int32_t stop = -1;
        int k_stop = -1;
        for (int k = 11; k < ref.n && stop < 0; k++) {
            int seen = 0;
            for (int j = 0; j < k; j++) seen |= ref.ids[j] == ref.ids[k];
            if (!seen) stop = ref.ids[k], k_stop = k;
        }
        CHECK_MSG(stop >= 0, "no new id in the plain output to stop at");
        r.stop = &stop;
        CHECK(ng_gen(e, pr, T, &r, &ref, &st) == 0 && ref.n == k_stop + 1);
        r.M = M;
        CHECK(ng_gen(e, pr, T, &r, &got, &st) == 0);
        CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n), "stop id, M=%d: %d ids, plain %d",
                  M, got.n, ref.n);
        acc += st.n_accepted;
        /* the context limit at every offset of a block */
        for (int extra = 21; extra <= 29; extra++) {
            ng_run c = {0, 4, 2, 0, T + extra, 1000, NULL, NULL, 0};
            CHECK(ng_gen(e, pr, T, &c, &ref, &st) == 0);
            CHECK_MSG(ref.n == extra + 1, "plain: %d ids in a context of %d", ref.n, T + extra);
            c.M = M;
            CHECK(ng_gen(e, pr, T, &c, &got, &st) == 0);
            CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n), "ctx %d, M=%d: %d ids, plain %d",
                      T + extra, M, got.n, ref.n);
            acc += st.n_accepted;
        }
    }
    CHECK_MSG(acc > 0, "no draft was accepted: the ends were never inside a drafted block");
    ts_engine_close(e);
}

/* A checkpoint without an MTP head: n-gram drafting works (output equals
 * plain greedy, drafts accepted) with n-gram buffers alone, MTP drafting is
 * refused, and the plan counts no MTP byte. */
TS_TEST(ngram, no_mtp_head) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ngram-nomtp", ts_test_tmpdir());
    CHECK(fx_copy_without_mtp("tests/fixtures/tiny-moe", dir) == 0);
    ts_engine *e = open_dir(dir);
    CHECK(e);
    CHECK(!ts_engine_info(e)->has_mtp);
    int32_t pr[64];
    const int T = fixture_prompt(pr);
    static collect ref, got;
    ts_gen_stats st;
    ng_run r = {0, 4, 2, 0, 512, 200, NULL, NULL, 0};
    CHECK(ng_gen(e, pr, T, &r, &ref, &st) == 0 && ref.n == 200);
    static int32_t hist[200];
    plant(ref.ids, 200, hist, 5);
    r.M = 5, r.ctx = hist, r.n_hctx = 200;
    CHECK(ng_gen(e, pr, T, &r, &got, &st) == 0);
    CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n) && st.n_accepted > 0,
              "no MTP head: %d ids (plain %d), %d accepted", got.n, ref.n, st.n_accepted);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.spec_draft = 3;
    ts_session *s = NULL;
    ts_error err = {0};
    CHECK(ts_session_new(e, &sp, &s, &err) == TS_E_UNSUPPORTED && strstr(err.msg, "no MTP head"));
    ts_engine_close(e);
    /* the plan: verify buffers, no MTP cache or hiddens */
    sp.spec_draft = 0;
    sp.ngram_draft = 5;
    ts_mem_plan pl;
    CHECK_MSG(ts_mem_plan_dir(dir, &sp, &pl, &err) == 0, "%s", err.msg);
    CHECK(pl.cat_bytes[TS_MEM_MTP] == 0 && pl.cat_bytes[TS_MEM_SPEC] > 0 && pl.drafter_bytes > 0 && pl.ngram_draft == 5);
    /* and the CLI */
    int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m %s --ids 11,5,301,42,11,5,301 -n 30 --spec ngram --draft 3 --print-ids",
                        ts_test_bin(), dir);
    CHECK_MSG(rc == 0 && strstr(g_out, "[spec ngram --draft 3"), "rc %d: %s", rc, g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "%s run -m %s --ids 1,2 -n 4 --spec mtp --draft 2", ts_test_bin(), dir);
    CHECK_MSG(rc != 0 && strstr(g_out, "no MTP head"), "rc %d: %s", rc, g_out);
}

/* The history before the prompt (gen params ngram_ctx). On a continued
 * session (a chat's next turn) handing the drafter what the session holds
 * leaves the output the plain continuation's; and a history that holds the
 * continuation itself (as a chat's earlier turn would when the model
 * repeats itself) is looked up: nearly every draft accepted, where the
 * prompt alone gives few. Output identical in every case. */
TS_TEST(ngram, history_before_the_prompt) {
    ts_engine *e = open_dir("models/default");
    CHECK(e);
    int32_t first[256], second[64];
    const int T1 = encode(PASSAGE, first, 256), T2 = encode("The old mill stood", second, 64);
    CHECK(T1 > 10 && T2 > 2);
    static collect ref, got;
    static int32_t hist[300];
    for (int mode = 0; mode < 2; mode++) { /* plain, drafted with the session's history */
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.n_ctx = 512;
        sp.ngram_draft = 4;
        ts_session *s = NULL;
        ts_error err = {0};
        CHECK(ts_session_new(e, &sp, &s, &err) == 0);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 8;
        collect c1 = {{0}, 0};
        CHECK(ts_generate(s, first, T1, &gp, on_tok, &c1, NULL, &err) == 0); /* turn 1, plain */
        /* what the session holds now: the passage and 7 of the 8 ids (the last is not fed) */
        memcpy(hist, first, sizeof(int32_t) * (size_t)T1);
        memcpy(hist + T1, c1.ids, sizeof(int32_t) * 7);
        gp.n_predict = 60;
        gp.spec_draft = gp.spec_ngram = mode ? 4 : 0;
        if (mode) gp.ngram_ctx = hist, gp.n_ngram_ctx = T1 + 7;
        collect *c = mode ? &got : &ref;
        c->n = 0;
        /* turn 2 starts with the last id of turn 1, the session's next one */
        int32_t p2[65];
        p2[0] = c1.ids[7];
        memcpy(p2 + 1, second, sizeof(int32_t) * (size_t)T2);
        CHECK_MSG(ts_generate(s, p2, T2 + 1, &gp, on_tok, c, NULL, &err) == 0, "%s", err.msg);
        ts_session_free(s);
    }
    CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n),
              "a continued session with its history: the output differs from plain");
    ts_engine_close(e);
    /* a history holding the continuation: looked up (a random-weight
     * fixture, whose output the prompt alone hardly predicts; a history
     * entry older than the prompt loses to a match in the prompt, so the
     * default model's text prompt would hide it) */
    e = open_dir("tests/fixtures/tiny-dense");
    CHECK(e);
    static const int32_t P[] = {11, 5, 301, 42, 7, 99, 250, 3, 18, 64, 120, 9};
    ng_run r = {0, 4, 2, 0, 512, 120, NULL, NULL, 0};
    ts_gen_stats st;
    CHECK(ng_gen(e, P, 12, &r, &ref, &st) == 0 && ref.n == 120);
    int acc[2];
    for (int with = 0; with < 2; with++) {
        r.M = 4, r.ctx = with ? ref.ids : NULL, r.n_hctx = with ? 120 : 0;
        CHECK(ng_gen(e, P, 12, &r, &got, &st) == 0);
        CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n), "history %d: output differs", with);
        acc[with] = st.n_accepted;
    }
    fprintf(stderr, "  drafts accepted over 120 tokens: %d from the prompt alone, %d with the continuation in the history\n",
            acc[0], acc[1]);
    CHECK_MSG(acc[1] >= 72 && acc[0] < 24, "the history was not looked up: %d vs %d accepted", acc[1], acc[0]);
    ts_engine_close(e);
}

/* A resumed session (a chat's or a server's reused prefix: the first ids
 * fed before, the rest given to ts_generate) with the fed ids handed over
 * as ngram_ctx has a cold run's history, hence its drafts: a sampled
 * generation draws exactly what the cold one draws (the prefix ends on the
 * prefill grid, so the rows are the same bits too). Without the ids the
 * drafts differ and so do the draws (the test's power). The prompt holds
 * every id of the vocabulary once and n-grams of one id are matched, so a
 * draft follows every emitted id. */
TS_TEST(ngram, resumed_history_same_draws) {
    ts_engine *e = open_dir("tests/fixtures/tiny-dense");
    CHECK(e);
    const int V = ts_engine_info(e)->vocab_size, H = 1024;
    int32_t *P = malloc(sizeof(int32_t) * (size_t)V);
    uint64_t seed = 3;
    for (int i = 0; i < V; i++) P[i] = i;
    for (int i = V - 1; i > 0; i--) { /* a shuffle */
        const int j = (int)(lcg(&seed) % (uint64_t)(i + 1));
        const int32_t t = P[i];
        P[i] = P[j], P[j] = t;
    }
    static collect out[3];
    int drafted[3] = {0};
    for (int mode = 0; mode < 3; mode++) { /* cold, resumed with the history, resumed without */
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.n_ctx = V + 64;
        sp.ngram_draft = 4;
        ts_session *s = NULL;
        ts_error err = {0};
        CHECK(ts_session_new(e, &sp, &s, &err) == 0);
        CHECK(H % ts_session_grid(s) == 0);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 24;
        gp.temperature = 1.0f;
        gp.seed = 11;
        gp.spec_draft = 4, gp.spec_ngram = 1, gp.ngram_min = 1;
        const int from = mode ? H : 0;
        if (from) CHECK(ts_session_feed(s, P, H, NULL, NULL, &err) == 0);
        if (mode == 1) gp.ngram_ctx = P, gp.n_ngram_ctx = H;
        ts_gen_stats st;
        out[mode].n = 0;
        CHECK_MSG(ts_generate(s, P + from, V - from, &gp, on_tok, &out[mode], &st, &err) == 0, "%s", err.msg);
        drafted[mode] = st.n_drafted;
        ts_session_free(s);
    }
    fprintf(stderr, "  sampled, 24 tokens: drafts %d cold, %d resumed with the history, %d without\n", drafted[0], drafted[1],
            drafted[2]);
    CHECK_MSG(out[1].n == out[0].n && !memcmp(out[1].ids, out[0].ids, sizeof(int32_t) * (size_t)out[0].n) &&
                  drafted[1] == drafted[0] && drafted[0] > 0,
              "resumed with the history: not the cold run's draws");
    CHECK_MSG(drafted[2] != drafted[0] || memcmp(out[2].ids, out[0].ids, sizeof(int32_t) * (size_t)out[0].n),
              "without the history the same drafts and draws: the test cannot tell");
    free(P);
    ts_engine_close(e);
}

/* Under a JSON constraint (with and without stop ids) and with
 * log-probabilities and a logit bias: the ids and entries of plain decoding. */
TS_TEST(ngram, constraint_and_logprobs) {
    ts_engine *e = open_dir("models/default");
    CHECK(e);
    ts_tokenizer *t = load_tok("models/default");
    CHECK(t);
    int32_t stop[8];
    ts_error err = {0};
    const int n_stop = ts_chat_stop_ids("models/default", stop, 8, &err);
    /* the think block is open: free reasoning first (the model loops there:
     * drafts accepted), then the JSON under the constraint */
    static int32_t pr[256];
    const int T = encode("<|im_start|>user\nList three colors in JSON, then the same three again.<|im_end|>\n"
                         "<|im_start|>assistant\n<think>\n", pr, 256);
    CHECK(T > 5);
    const int32_t think_end = ts_tokenizer_token_id(t, "</think>");
    CHECK(think_end > 0);
    static rec ref, got;
    long acc = 0;
    for (int with_stop = 0; with_stop < 2; with_stop++) {
        ts_constraint *c = NULL;
        CHECK(ts_constraint_json(t, 0, &c, &err) == 0);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 200;
        gp.constraint = c;
        gp.constraint_after = think_end;
        if (with_stop) gp.stop_ids = stop, gp.n_stop = n_stop;
        CHECK_MSG(gen_in(e, 1024, pr, T, &gp, 0, 0, &ref, &err) == 0, "%s", err.msg);
        gp.spec_ngram = 3, gp.ngram_min = 1;
        for (int M = 1; M <= 8; M += 3) {
            ts_session_params sp;
            ts_session_params_default(&sp);
            sp.n_ctx = 1024;
            sp.ngram_draft = M;
            ts_session *s = NULL;
            CHECK(ts_session_new(e, &sp, &s, &err) == 0);
            gp.spec_draft = M;
            memset(&got, 0, sizeof got);
            ts_gen_stats st;
            const int rc = ts_generate(s, pr, T, &gp, rec_tok, &got, &st, &err);
            ts_session_free(s);
            CHECK_MSG(rc == 0, "%s", err.msg);
            CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n),
                      "constrained, stop ids %d, M=%d: %d ids, plain %d", with_stop, M, got.n, ref.n);
            acc += st.n_accepted;
        }
        ts_constraint_free(c);
    }
    static lp_rec lref, lgot;
    const int32_t bid[2] = {11, 257};
    const float bv[2] = {2.5f, -1.5f};
    for (int biased = 0; biased < 2; biased++) {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 160;
        gp.top_logprobs = 4;
        if (biased) gp.bias_ids = bid, gp.bias = bv, gp.n_bias = 2;
        CHECK(lp_gen(e, pr, T, &gp, 0, 0, &lref) == 0);
        gp.spec_ngram = 4;
        for (int M = 2; M <= 8; M += 3) {
            CHECK(lp_gen(e, pr, T, &gp, M, 0, &lgot) == 0);
            CHECK_MSG(lp_same(&lref, &lgot) && !lgot.order_bad, "n-gram M=%d%s: tokens or log-probabilities differ", M,
                      biased ? " with a bias" : "");
        }
    }
    /* the log-probability runs had drafts to verify: the same run without
     * the callback (which changes no id, so no draft) accepts some */
    ng_run r = {5, 4, 2, 0, 1024, 160, NULL, NULL, 0};
    collect c;
    ts_gen_stats st;
    CHECK(ng_gen(e, pr, T, &r, &c, &st) == 0);
    fprintf(stderr, "  constrained and log-probability runs identical to plain; drafts accepted: %ld constrained, %d "
                    "unconstrained (M=5)\n", acc, st.n_accepted);
    CHECK(acc > 0 && st.n_accepted > 0);
    ts_tokenizer_free(t);
    ts_engine_close(e);
}

/* ---- speculative sampling ---- */

/* ts_spec_accept with dprobs NULL (n-gram drafts: q a point mass) against
 * explicit one-hot rows, on the same seeds: the same emitted tokens and
 * acceptance counts, and the samplers' streams stay in step. */
TS_TEST(ngram, point_mass_equals_one_hot) {
    enum { V = 12, M = 4, N = 20000 };
    float vl[(M + 1) * V], q[M * V], tmp1[V], tmp2[V];
    for (int r = 0; r <= M; r++)
        for (int i = 0; i < V; i++) vl[r * V + i] = 0.4f * (float)((i * 5 + r * 7) % V) - 1.5f;
    ts_sampler_params sp;
    ts_sampler_params_default(&sp);
    sp.temperature = 0.9f;
    sp.seed = 7;
    ts_sampler *a = NULL, *b = NULL;
    ts_error err = {0};
    CHECK(ts_sampler_new(V, &sp, &a, &err) == 0 && ts_sampler_new(V, &sp, &b, &err) == 0);
    uint64_t s = 5;
    long rejected = 0;
    for (int t = 0; t < N; t++) {
        int32_t d[M], o1[M + 1], o2[M + 1];
        memset(q, 0, sizeof q);
        for (int j = 0; j < M; j++) d[j] = (int32_t)(lcg(&s) % V), q[j * V + d[j]] = 1.0f;
        const int a1 = ts_spec_accept(vl, q, d, M, V, a, tmp1, o1), a2 = ts_spec_accept(vl, NULL, d, M, V, b, tmp2, o2);
        CHECK_MSG(a1 == a2 && !memcmp(o1, o2, sizeof(int32_t) * (size_t)(a1 + 1)), "trial %d: %d vs %d accepted", t, a1, a2);
        rejected += a1 < M;
    }
    CHECK(ts_sampler_uniform(a) == ts_sampler_uniform(b));
    CHECK(rejected > N / 4); /* the residual path ran */
    ts_sampler_free(a);
    ts_sampler_free(b);
}

/* The first emitted token of a block with point-mass drafts follows the
 * target p: 40000 seeded trials, Pearson's chi-square with 11 dof against
 * the 0.999 quantile 31.26, for a draft the target finds likely, one it
 * finds unlikely and one it excludes (top-k). The tally is also checked
 * against the rule's usual bug, forgetting to take the draft's mass out of
 * the residual (which over-weights the draft), so the test has power. */
TS_TEST(ngram, sampling_matches_target) {
    enum { V = 12, M = 3, N = 40000 };
    float vl[(M + 1) * V], p[V], tmp[V];
    for (int r = 0; r <= M; r++)
        for (int i = 0; i < V; i++) vl[r * V + i] = 0.35f * (float)((i * 7 + r * 3) % V) - 1.0f;
    for (int topk = 0; topk <= 10; topk += 10) {
        ts_sampler_params sp;
        ts_sampler_params_default(&sp);
        sp.temperature = 0.8f;
        sp.top_k = topk;
        sp.seed = 42;
        ts_sampler *smp = NULL;
        ts_error err = {0};
        CHECK(ts_sampler_new(V, &sp, &smp, &err) == 0);
        CHECK(ts_sampler_probs(smp, vl, p, &err) == 0);
        int best = 0, worst = -1;
        for (int i = 0; i < V; i++) {
            if (p[i] > p[best]) best = i;
            if (worst < 0 || p[i] < p[worst]) worst = i;
        }
        const int32_t drafts[2] = {best, worst};
        for (int w = 0; w < 2; w++) {
            long cnt[V] = {0};
            int rejected = 0;
            for (int t = 0; t < N; t++) {
                int32_t d[M] = {drafts[w], drafts[w], drafts[w]}, out[M + 1];
                const int a = ts_spec_accept(vl, NULL, d, M, V, smp, tmp, out);
                rejected += a == 0;
                cnt[out[0]]++;
            }
            /* the bug's distribution: p(d) + (1 - p(d)) p(d) at d, (1 - p(d)) p(i) elsewhere */
            double chi = 0, chi_bug = 0;
            const double pd = p[drafts[w]];
            for (int i = 0; i < V; i++) {
                if (p[i] == 0) {
                    CHECK_MSG(cnt[i] == 0, "id %d has probability 0 and was emitted %ld times", i, cnt[i]);
                    continue;
                }
                const double ex = p[i] * N, bug = (i == drafts[w] ? pd + (1 - pd) * pd : (1 - pd) * p[i]) * N;
                chi += (cnt[i] - ex) * (cnt[i] - ex) / ex;
                chi_bug += (cnt[i] - bug) * (cnt[i] - bug) / bug;
            }
            fprintf(stderr, "  top-k %d, draft p = %.3f: first token vs target chi2 = %.2f (threshold 31.26); vs the "
                            "residual bug %.0f; first draft rejected %d/%d\n", topk, pd, chi, chi_bug, rejected, N);
            CHECK_MSG(chi < 31.26, "chi-square %.2f over the 0.999 quantile", chi);
            /* (p(d) = 0: the bug changes nothing there) */
            CHECK_MSG(pd == 0 || chi_bug > 31.26, "the residual bug would pass (chi2 %.1f)", chi_bug);
            CHECK(rejected > 0);
        }
        ts_sampler_free(smp);
    }
}

/* Through the whole path: the first two emitted tokens (t1 from the
 * prompt's logits, t2 from the first verify block) over 3000 seeded runs
 * against p(t1) p(t2 | t1) from the target's logits (top-k 3: 9 cells),
 * chi-square with 8 dof (threshold 26.12, the 0.999 quantile). The drafts
 * are planted through ngram_ctx: after each likely t1 the history holds
 * either t2's likeliest value (mostly accepted) or an id outside the top-k
 * (always rejected: the residual path), with n-grams of one id. */
TS_TEST(ngram, sampling_generate_matches_target) {
    ts_engine *e = open_dir("tests/fixtures/tiny-dense");
    CHECK(e);
    static const int32_t PROMPT[] = {11, 5, 301, 42, 7, 99, 250, 3, 18, 64, 120, 9};
    const int T = 12, V = ts_engine_info(e)->vocab_size, N = 3000, TOPK = 3;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 128;
    sp.ngram_draft = 3;
    ts_session *s = NULL;
    ts_error err = {0};
    CHECK(ts_session_new(e, &sp, &s, &err) == 0);
    ts_sampler_params smp_p;
    ts_sampler_params_default(&smp_p);
    smp_p.temperature = 1.0f;
    smp_p.top_k = TOPK;
    ts_sampler *smp = NULL;
    CHECK(ts_sampler_new(V, &smp_p, &smp, &err) == 0);
    float *p = malloc(sizeof(float) * V), *p2 = malloc(sizeof(float) * V);
    CHECK(ts_session_feed(s, PROMPT, T, NULL, NULL, &err) == 0);
    CHECK(ts_sampler_probs(smp, ts_session_logits(s), p, &err) == 0);
    int32_t c1[3], hist[6];
    int n1 = 0;
    for (int i = 0; i < V && n1 < TOPK; i++)
        if (p[i] > 0) c1[n1++] = i;
    CHECK(n1 == TOPK);
    double expect[3][3];
    int32_t c2[3][3];
    for (int a = 0; a < n1; a++) {
        ts_session_reset(s);
        int32_t pr[13];
        memcpy(pr, PROMPT, sizeof PROMPT);
        pr[T] = c1[a];
        CHECK(ts_session_feed(s, pr, T + 1, NULL, NULL, &err) == 0);
        CHECK(ts_sampler_probs(smp, ts_session_logits(s), p2, &err) == 0);
        int k = 0, top = -1, out = -1;
        for (int i = 0; i < V; i++) {
            if (p2[i] > 0 && k < TOPK) { c2[a][k] = i; expect[a][k] = (double)p[c1[a]] * p2[i]; k++; }
            if (p2[i] > 0 && (top < 0 || p2[i] > p2[top])) top = i;
            if (p2[i] == 0 && out < 0) out = i;
        }
        hist[2 * a] = c1[a];
        hist[2 * a + 1] = a == 1 ? out : top; /* the draft after c1[a] */
    }
    long cnt[3][3] = {{0}}, other = 0, drafted = 0, accepted = 0;
    for (int t = 0; t < N; t++) {
        ts_session_reset(s);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 4;
        gp.temperature = 1.0f;
        gp.top_k = TOPK;
        gp.seed = 1000 + (uint64_t)t;
        gp.spec_draft = 3;
        gp.spec_ngram = 1;
        gp.ngram_min = 1;
        gp.ngram_ctx = hist, gp.n_ngram_ctx = 6;
        collect c = {{0}, 0};
        ts_gen_stats st;
        CHECK(ts_generate(s, PROMPT, T, &gp, on_tok, &c, &st, &err) == 0);
        drafted += st.drafted_at[0];
        accepted += st.accepted_at[0];
        int hit = 0;
        for (int a = 0; a < n1 && !hit; a++)
            for (int k = 0; k < TOPK && !hit; k++)
                if (c.ids[0] == c1[a] && c.ids[1] == c2[a][k]) { cnt[a][k]++; hit = 1; }
        other += !hit;
    }
    double chi = 0;
    for (int a = 0; a < n1; a++)
        for (int k = 0; k < TOPK; k++) {
            double ex = expect[a][k] * N;
            chi += (cnt[a][k] - ex) * (cnt[a][k] - ex) / ex;
        }
    fprintf(stderr, "  n-gram sampling: (t1, t2) vs the target's joint: chi2 = %.2f (8 dof, threshold 26.12); "
                    "first drafts accepted %ld of %ld\n", chi, accepted, drafted);
    CHECK_MSG(other == 0, "%ld runs emitted a pair outside the top-k cells", other);
    CHECK_MSG(chi < 26.12, "chi-square %.2f over the 0.999 quantile", chi);
    CHECK_MSG(drafted > N / 2 && accepted > 0 && accepted < drafted, "first drafts: %ld accepted of %ld", accepted, drafted);
    free(p);
    free(p2);
    ts_sampler_free(smp);
    ts_session_free(s);
    ts_engine_close(e);
}

/* ---- the CLI and bad input ---- */

TS_TEST(ngram, cli) {
    char plain[8192], spec[8192];
    const char *bin = ts_test_bin();
    const char *run = "run -m models/default -p 'The old mill stood by the river. The old mill stood by the river. The old' "
                      "-n 48 --print-ids";
    CHECK(ts_test_sh(plain, sizeof plain, "%s %s 2>/dev/null", bin, run) == 0);
    static const char *flags[] = {"--spec ngram", "--spec ngram --draft 8 --ngram-max 6 --ngram-min 1",
                                  "--spec ngram --draft 1 --ngram-max 1"};
    for (int i = 0; i < 3; i++) {
        CHECK(ts_test_sh(spec, sizeof spec, "%s %s %s 2>/dev/null", bin, run, flags[i]) == 0);
        CHECK_MSG(strlen(plain) > 20 && !strcmp(plain, spec), "%s: output differs:\n%s\n%s", flags[i], plain, spec);
    }
    int rc = ts_test_sh(spec, sizeof spec, "%s %s --spec ngram 2>&1 >/dev/null", bin, run);
    CHECK_MSG(rc == 0 && strstr(spec, "[spec ngram --draft 4 --ngram-max 4 --ngram-min 3:") &&
                  strstr(spec, "mean accepted length") && !strstr(spec, " 0/"),
              "stats: %s", spec);
    /* chat: the same conversation as plain chat, a drafting line a turn */
    const char *in = "printf 'Say: the cat, the cat, the cat\\nAgain\\n'";
    CHECK(ts_test_sh(plain, sizeof plain, "%s | %s chat -m models/default -n 24 2>/dev/null", in, bin) == 0);
    CHECK(ts_test_sh(spec, sizeof spec, "%s | %s chat -m models/default -n 24 --spec ngram --draft 3 2>/dev/null", in, bin) == 0);
    CHECK_MSG(strlen(plain) > 20 && !strcmp(plain, spec), "chat:\n%s\ndrafted:\n%s", plain, spec);
    /* bench: drafted vs plain, identical, acceptance printed */
    rc = ts_test_sh(g_out, sizeof g_out, "%s bench -m models/default --prompt 32 --gen 48 --runs 1 --bw-mib 1 --spec ngram "
                    "--draft 4 --json 2>&1", bin);
    CHECK_MSG(rc == 0 && strstr(g_out, "\"spec\": \"ngram\"") && strstr(g_out, "\"identical\": true") &&
                  strstr(g_out, "\"ngram_max\": 4, \"ngram_min\": 3"), "bench: %s", g_out);
    rc = ts_test_sh(g_out, sizeof g_out, "%s bench -m models/default --prompt 32 --gen 24 --runs 1 --bw-mib 1 --spec ngram", bin);
    CHECK_MSG(rc == 0 && strstr(g_out, "spec       ngram --draft 4 --ngram-max 4 --ngram-min 3: ") &&
                  strstr(g_out, "output identical"), "bench: %s", g_out);
    /* errors name the problem */
    static const struct { const char *flags, *msg; } bad[] = {
        {"--spec ngram --draft 0", "--draft 0 is outside 1..8"},
        {"--spec ngram --draft 9", "--draft 9 is outside 1..8"},
        {"--spec ngram --ngram-max 17", "--ngram-max 17 is outside 1..16"},
        {"--spec ngram --ngram-max 0", "--ngram-max 0 is outside 1..16"},
        {"--spec ngram --ngram-min 0", "--ngram-min 0 is outside"},
        {"--spec ngram --ngram-max 3 --ngram-min 4", "--ngram-min 4 is outside 1..3"},
        {"--ngram-max 3", "need --spec ngram"},
        {"--spec mtp --ngram-min 2", "need --spec ngram"},
        {"--spec ngram --draft-vocab 100", "do not apply"},
        {"--spec ngram --draft-p-min 0.5", "do not apply"},
        {"--spec ngram --ngram-max x", "bad value 'x' for --ngram-max"},
        {"--spec lookahead", "use 'mtp', 'dflash' or 'ngram'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = ts_test_sh(g_out, sizeof g_out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 %s", bin, bad[i].flags);
        CHECK_MSG(rc != 0 && strstr(g_out, bad[i].msg), "%s: rc %d: %s", bad[i].flags, rc, g_out);
    }
    /* --help of every command that drafts lists the flags */
    static const char *cmds[] = {"run", "chat", "bench", "serve"};
    for (int i = 0; i < 4; i++) {
        rc = ts_test_sh(g_out, sizeof g_out, "%s %s --help", bin, cmds[i]);
        CHECK_MSG(rc == 0 && strstr(g_out, "--spec ngram") && strstr(g_out, "--ngram-max N") && strstr(g_out, "--ngram-min N"),
                  "%s --help: %s", cmds[i], g_out);
    }
}

TS_TEST(ngram, bad_input) {
    ts_engine *e = open_dir("tests/fixtures/tiny-dense");
    CHECK(e);
    static const int32_t P[] = {1, 2, 3, 1, 2};
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 128;
    sp.ngram_draft = 3;
    ts_session *s = NULL, *plain = NULL;
    ts_error err = {0};
    CHECK(ts_session_new(e, &sp, &s, &err) == 0);
    static const struct { int M, nmax, nmin, n_hctx, B; const char *msg; } bad[] = {
        {0, 4, 0, 0, 0, "draft length 0 is outside 1..8 (gen params spec_draft)"},
        {9, 4, 0, 0, 0, "draft length 9"},
        {4, 4, 0, 0, 0, "created for drafts of 3 tokens, 4 asked (session params ngram_draft or spec_draft)"},
        {3, 17, 0, 0, 0, "the longest n-gram, 17, is outside 1..16"},
        {3, 3, 4, 0, 0, "the shortest n-gram, 4, is outside 1..3"},
        {3, 3, -1, 0, 0, "the shortest n-gram, -1"},
        {3, 3, 1, 5, 0, "5 context ids given without ids"},
        {3, 3, 1, 0, 4, "dflash_block and spec_ngram both"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 8;
        gp.spec_draft = bad[i].M;
        gp.spec_ngram = bad[i].nmax;
        gp.ngram_min = bad[i].nmin;
        gp.n_ngram_ctx = bad[i].n_hctx;
        gp.dflash_block = bad[i].B;
        err.msg[0] = 0;
        CHECK_MSG(ts_generate(s, P, 5, &gp, NULL, NULL, NULL, &err) == TS_E_ARG && strstr(err.msg, bad[i].msg),
                  "case %zu: %s", i, err.msg);
        ts_session_reset(s);
    }
    /* a session without verify buffers */
    sp.ngram_draft = 0;
    CHECK(ts_session_new(e, &sp, &plain, &err) == 0);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.spec_draft = 2, gp.spec_ngram = 3;
    CHECK(ts_generate(plain, P, 5, &gp, NULL, NULL, NULL, &err) == TS_E_ARG && strstr(err.msg, "drafts of 0 tokens"));
    /* session params out of range */
    ts_session_free(plain);
    plain = NULL;
    sp.ngram_draft = 9;
    CHECK(ts_session_new(e, &sp, &plain, &err) == TS_E_ARG && strstr(err.msg, "n-gram draft length 9 is outside 1..8"));
    sp.ngram_draft = -1;
    CHECK(ts_session_new(e, &sp, &plain, &err) == TS_E_ARG);
    ts_session_free(s);
    ts_engine_close(e);
}
