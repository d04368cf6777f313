/* test_logprobs.c: log-probabilities and the logit bias through ts_generate
 * (group `logprobs`; gen params logprob_cb / top_logprobs, bias_ids / bias).
 *
 * - the values: every generated token's log-probability and its top list
 *   equal log_softmax of the logits a separate session computes for the same
 *   ids (in double here), greedy and sampled, on the bundled model (12,288
 *   ids) and a fixture;
 * - speculative decoding: with MTP drafts (1..4) and DFlash blocks the
 *   tokens and every log-probability are plain decoding's, bit for bit
 *   (verify rows are decode rows), with and without a bias;
 * - the bias: +100 forces a token at every greedy step, -100 on plain
 *   greedy's first token gives the next best one (the unbiased row's
 *   second), a bias of 0 changes nothing;
 * - ts_session_score: a text's log-probabilities in one feed equal
 *   log_softmax of the plain feed's rows, and leave the plain feed's state;
 * - bad input: top_logprobs out of range, a bias id outside the vocabulary,
 *   twice, or not finite: TS_E_ARG naming it, nothing generated.
 */
#include <math.h>
#include <sys/stat.h>

#include "gen_oracle.h"
#include "lp_rec.h"
#include "ts_test.h"

void lp_cb(void *user, const ts_logprob *chosen, const ts_logprob *top, int n_top) {
    lp_rec *r = user;
    if (r->pending) r->order_bad++;
    r->pending = 1;
    if (r->n >= LP_MAX) return;
    r->chosen[r->n] = *chosen;
    memcpy(r->top[r->n], top, sizeof(ts_logprob) * (size_t)n_top);
    r->n_top[r->n] = n_top;
    r->n++;
}

int lp_tok(void *user, int32_t id) {
    lp_rec *r = user;
    if (!r->pending || r->chosen[r->n - 1].id != id) r->order_bad++;
    r->pending = 0;
    return on_tok(&r->ids, id);
}

static ts_engine *open_dir(const char *dir, int dflash) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cpu";
    ep.dflash = dflash;
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(dir, &ep, &e, &err)) ts_test_fail(__FILE__, __LINE__, "%s: %s", dir, err.msg);
    return e;
}

/* Generate with the record's callbacks on a fresh session (draft M: MTP,
 * B: DFlash). */
int lp_gen(ts_engine *e, const int32_t *pr, int T, const ts_gen_params *gp0, int M, int B, lp_rec *r) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 1024;
    sp.spec_draft = M;
    sp.dflash_block = B;
    ts_session *s = NULL;
    ts_error err = {0};
    memset(r, 0, sizeof *r);
    if (ts_session_new(e, &sp, &s, &err)) {
        fprintf(stderr, "  session: %s\n", err.msg);
        return -1;
    }
    ts_gen_params gp = *gp0;
    gp.logprob_cb = lp_cb;
    gp.spec_draft = M;
    gp.dflash_block = B;
    int rc = ts_generate(s, pr, T, &gp, lp_tok, r, NULL, &err);
    if (rc) fprintf(stderr, "  generate (M %d, B %d): %s\n", M, B, err.msg);
    ts_session_free(s);
    return rc;
}

/* The reference: log_softmax of a row of logits in double. */
static void log_softmax_d(const float *l, int V, double *lp) {
    double m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++) z += exp((double)l[i] - m);
    for (int i = 0; i < V; i++) lp[i] = (double)l[i] - m - log(z);
}

/* id's place in its row's order (larger first, then the lower id): the ids
 * that rank before it */
static int rank_of(const float *l, int V, int32_t id) {
    int better = 0;
    for (int i = 0; i < V; i++) better += l[i] > l[id] || (l[i] == l[id] && i < id);
    return better;
}

/* log_softmax of the logits after pr + r's first k ids, fed to a fresh
 * session one token at a time after the prompt (the rows plain decoding
 * computed), compared with r's entries: returns the largest error, counts
 * top lists that are not the reference's. */
double lp_check(ts_engine *e, const int32_t *pr, int T, const lp_rec *r, int n_top, int *top_bad) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 1024;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err) || ts_session_feed(s, pr, T, NULL, NULL, &err)) {
        fprintf(stderr, "  reference: %s\n", err.msg);
        ts_session_free(s);
        return INFINITY;
    }
    const int V = ts_engine_info(e)->vocab_size;
    double *lp = malloc(sizeof(double) * (size_t)V), worst = 0;
    for (int k = 0; k < r->n; k++) {
        const float *l = ts_session_logits(s);
        log_softmax_d(l, V, lp);
        worst = fmax(worst, fabs(r->chosen[k].logprob - lp[r->chosen[k].id]));
        /* the reference top list: larger first, then the lower id */
        int bad = r->n_top[k] != n_top;
        for (int j = 0; j < r->n_top[k] && !bad; j++) {
            const int32_t id = r->top[k][j].id;
            bad = rank_of(l, V, id) != j;
            worst = fmax(worst, fabs(r->top[k][j].logprob - lp[id]));
        }
        *top_bad += bad;
        if (ts_session_feed(s, &r->ids.ids[k], 1, NULL, NULL, &err)) {
            worst = INFINITY;
            break;
        }
    }
    free(lp);
    ts_session_free(s);
    return worst;
}

static const int32_t PR[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
#define T_PR ((int)(sizeof PR / sizeof PR[0]))

TS_TEST(logprobs, match_log_softmax) {
    static const char *dirs[] = {"models/default", "tests/fixtures/tiny-dense"};
    for (int d = 0; d < 2; d++) {
        ts_engine *e = open_dir(dirs[d], 0);
        CHECK(e);
        const int V = ts_engine_info(e)->vocab_size;
        int32_t pr[T_PR];
        for (int i = 0; i < T_PR; i++) pr[i] = PR[i] % V;
        static lp_rec r;
        for (int mode = 0; mode < 3; mode++) {
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = 24;
            gp.top_logprobs = mode == 0 ? 5 : mode == 1 ? TS_TOP_LOGPROBS_MAX : 0;
            if (mode == 1) gp.temperature = 0.9f, gp.top_k = 40, gp.seed = 3; /* sampled: raw values all the same */
            if (mode == 2) gp.temperature = 1.3f, gp.repeat_penalty = 1.3f, gp.seed = 9;
            CHECK(lp_gen(e, pr, T_PR, &gp, 0, 0, &r) == 0);
            CHECK_MSG(r.n == 24 && r.ids.n == 24 && !r.order_bad, "%s mode %d: %d entries for %d tokens, %d out of order",
                      dirs[d], mode, r.n, r.ids.n, r.order_bad);
            int top_bad = 0, greedy_bad = 0;
            const double worst = lp_check(e, pr, T_PR, &r, gp.top_logprobs, &top_bad);
            for (int k = 0; k < r.n; k++) {
                CHECK(r.chosen[k].logprob <= 0.0f);
                if (mode == 0) greedy_bad += r.chosen[k].id != r.top[k][0].id || r.chosen[k].logprob != r.top[k][0].logprob;
            }
            fprintf(stderr, "  %-26s %s: 24 tokens, largest error %.2g, top lists %d wrong\n", dirs[d],
                    mode == 0 ? "greedy, top 5" : mode == 1 ? "sampled, top 20" : "sampled + penalty", worst, top_bad);
            CHECK_MSG(worst < 2e-5, "%s mode %d: log-probabilities off log_softmax by %.3g", dirs[d], mode, worst);
            CHECK_MSG(top_bad == 0, "%s mode %d: %d top lists are not the best ids in order", dirs[d], mode, top_bad);
            CHECK_MSG(greedy_bad == 0, "%s: %d greedy tokens are not their top entry", dirs[d], greedy_bad);
        }
        ts_engine_close(e);
    }
}

int lp_same(const lp_rec *a, const lp_rec *b) {
    if (a->n != b->n || a->ids.n != b->ids.n || memcmp(a->ids.ids, b->ids.ids, sizeof(int32_t) * (size_t)a->ids.n))
        return 0;
    for (int k = 0; k < a->n; k++) {
        if (memcmp(&a->chosen[k], &b->chosen[k], sizeof(ts_logprob)) || a->n_top[k] != b->n_top[k] ||
            memcmp(a->top[k], b->top[k], sizeof(ts_logprob) * (size_t)a->n_top[k]))
            return 0;
    }
    return 1;
}

TS_TEST(logprobs, speculative_same_as_plain) {
    struct stat sb;
    const int dfl = !stat("models/default/dflash/config.json", &sb);
    ts_engine *e = open_dir("models/default", dfl);
    CHECK(e);
    static lp_rec ref, got;
    const int32_t bid[2] = {11, 257};
    const float bv[2] = {2.5f, -1.5f};
    for (int biased = 0; biased < 2; biased++) {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 160;
        gp.top_logprobs = 4;
        if (biased) gp.bias_ids = bid, gp.bias = bv, gp.n_bias = 2;
        CHECK(lp_gen(e, PR, T_PR, &gp, 0, 0, &ref) == 0);
        CHECK(ref.n == 160);
        for (int M = 1; M <= 4; M++) {
            CHECK(lp_gen(e, PR, T_PR, &gp, M, 0, &got) == 0);
            CHECK_MSG(lp_same(&ref, &got) && !got.order_bad, "MTP %d%s: tokens or log-probabilities differ from plain", M,
                      biased ? " with a bias" : "");
        }
        if (dfl) {
            CHECK(lp_gen(e, PR, T_PR, &gp, 0, 4, &got) == 0);
            CHECK_MSG(lp_same(&ref, &got) && !got.order_bad, "DFlash 4%s: tokens or log-probabilities differ from plain",
                      biased ? " with a bias" : "");
        }
        fprintf(stderr, "  %s: MTP 1..4%s identical to plain (160 tokens, top 4)\n", biased ? "biased" : "unbiased",
                dfl ? " and DFlash 4" : "");
    }
    ts_engine_close(e);
}

TS_TEST(logprobs, bias_forces_and_bans) {
    ts_engine *e = open_dir("models/default", 0);
    CHECK(e);
    static lp_rec ref, got;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 8;
    gp.top_logprobs = 2;
    CHECK(lp_gen(e, PR, T_PR, &gp, 0, 0, &ref) == 0);
    /* +100 on a token plain greedy never picks: every step picks it */
    int32_t forced = 4321;
    for (int k = 0; k < ref.ids.n; k++) CHECK(ref.ids.ids[k] != forced);
    float up = 100.0f;
    gp.bias_ids = &forced, gp.bias = &up, gp.n_bias = 1;
    CHECK(lp_gen(e, PR, T_PR, &gp, 0, 0, &got) == 0);
    int all = got.ids.n == 8;
    for (int k = 0; k < got.ids.n; k++) all = all && got.ids.ids[k] == forced;
    CHECK_MSG(all, "a +100 bias did not force token %d at every step", forced);
    /* its log-probability is the raw one: far below 0 (the bias is not in it) */
    CHECK_MSG(got.chosen[0].logprob < -1.0f, "the forced token's log-probability %g includes the bias",
              (double)got.chosen[0].logprob);
    /* -100 on plain greedy's first token: the first token is the unbiased
     * row's second best */
    int32_t banned = ref.ids.ids[0];
    float down = -100.0f;
    gp.bias_ids = &banned, gp.bias = &down;
    CHECK(lp_gen(e, PR, T_PR, &gp, 0, 0, &got) == 0);
    CHECK_MSG(got.ids.n == 8 && got.ids.ids[0] == ref.top[0][1].id, "with %d banned the first token is %d, not %d",
              banned, got.ids.ids[0], ref.top[0][1].id);
    for (int k = 0; k < got.ids.n; k++) CHECK(got.ids.ids[k] != banned);
    /* a bias of 0: plain greedy's tokens and values */
    float zero = 0.0f;
    gp.bias = &zero;
    CHECK(lp_gen(e, PR, T_PR, &gp, 0, 0, &got) == 0);
    gp.n_bias = 0;
    CHECK(lp_same(&ref, &got));
    ts_engine_close(e);
}

TS_TEST(logprobs, bad_input) {
    ts_engine *e = open_dir("models/default", 0);
    CHECK(e);
    const int V = ts_engine_info(e)->vocab_size;
    static lp_rec r;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 4;
    ts_session *s = oracle_session(e, 256, 0);
    ts_error err = {0};
    gp.top_logprobs = TS_TOP_LOGPROBS_MAX + 1;
    gp.logprob_cb = lp_cb;
    memset(&r, 0, sizeof r);
    CHECK(ts_generate(s, PR, T_PR, &gp, lp_tok, &r, NULL, &err) == TS_E_ARG && strstr(err.msg, "top log-prob"));
    gp.top_logprobs = -1;
    CHECK(ts_generate(s, PR, T_PR, &gp, lp_tok, &r, NULL, &err) == TS_E_ARG);
    gp.top_logprobs = 1;
    int32_t ids[2] = {5, V};
    float vals[2] = {1.0f, 1.0f};
    gp.bias_ids = ids, gp.bias = vals, gp.n_bias = 2;
    char want[32];
    snprintf(want, sizeof want, "%d", V);
    CHECK(ts_generate(s, PR, T_PR, &gp, lp_tok, &r, NULL, &err) == TS_E_ARG && strstr(err.msg, want));
    ids[1] = -3;
    CHECK(ts_generate(s, PR, T_PR, &gp, lp_tok, &r, NULL, &err) == TS_E_ARG && strstr(err.msg, "-3"));
    ids[1] = 5;
    CHECK(ts_generate(s, PR, T_PR, &gp, lp_tok, &r, NULL, &err) == TS_E_ARG && strstr(err.msg, "twice"));
    ids[1] = 6, vals[1] = INFINITY;
    CHECK(ts_generate(s, PR, T_PR, &gp, lp_tok, &r, NULL, &err) == TS_E_ARG && strstr(err.msg, "finite"));
    CHECK_MSG(r.n == 0 && r.ids.n == 0, "a refused request generated %d tokens", r.ids.n);
    /* the session is still usable */
    vals[1] = 1.0f;
    CHECK(ts_generate(s, PR, T_PR, &gp, lp_tok, &r, NULL, &err) == 0 && r.ids.n == 4 && r.n == 4);
    ts_session_free(s);
    ts_engine_close(e);
}

/* ts_session_score: a text's log-probabilities in one feed. Against
 * log_softmax (in double) of the rows ts_session_feed gives for the same ids
 * on a session of the same grid: every scored id's value and the top lists'
 * ids in order; and the session after it is the one the plain feed leaves
 * (position, last row's logits bit for bit, the greedy continuation); and
 * ts_logprobs_row on each plain row gives the scorer's entry bit for bit. A grid
 * of 7 with 30 ids from position 0 and from position 5 puts chunk cuts
 * inside the text and at its ends. */
static ts_session *grid_session(ts_engine *e, int grid) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.max_rows = grid;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err)) ts_test_fail(__FILE__, __LINE__, "session: %s", err.msg);
    return s;
}

static int greedy_ids(ts_session *s, const int32_t *last, int n, int32_t *out) {
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = n;
    gp.temperature = 0;
    static collect o;
    o.n = 0;
    ts_error err = {0};
    int rc = ts_generate(s, last, 1, &gp, on_tok, &o, NULL, &err);
    memcpy(out, o.ids, sizeof(int32_t) * (size_t)o.n);
    return rc ? -1 : o.n;
}

/* Score N ids of a fixed random text (seed) from position pre on a session
 * of e (grid 7) against the plain feed's rows on another (test comment
 * above); the scores into out when not NULL ([N - 1] entries of 1 + TOP).
 * Returns the largest error against log_softmax; *bad counts wrong top
 * lists, differing states and failed calls. */
double lp_score_check(ts_engine *e, int pre, uint64_t seed, ts_logprob *out_copy, int *bad) {
    enum { N = LP_SCORE_N, PRE = 5, TOP = LP_SCORE_TOP };
    const int V = ts_engine_info(e)->vocab_size;
    int32_t ids[N + PRE], next = 3 % V;
    uint64_t x = 0x9E3779B97F4A7C15ull * seed;
    for (int i = 0; i < N + PRE; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, ids[i] = (int32_t)(x % (uint64_t)V);
    float *ref = malloc(sizeof(float) * (size_t)N * (size_t)V);
    double *lp = malloc(sizeof(double) * (size_t)V), worst = 0;
    static ts_logprob out[(N - 1) * (1 + TOP)];
    ts_session *a = grid_session(e, 7), *b = grid_session(e, 7);
    ts_error err = {0};
    if (pre && (ts_session_feed(a, ids, pre, NULL, NULL, &err) || ts_session_feed(b, ids, pre, NULL, NULL, &err))) ++*bad;
    if (ts_session_score(a, ids + pre, N, TOP, out, &err)) fprintf(stderr, "  score: %s\n", err.msg), ++*bad;
    if (ts_session_feed(b, ids + pre, N, ref, NULL, &err)) ++*bad;
    for (int i = 0; i + 1 < N && !*bad; i++) {
        const float *l = ref + (size_t)i * V;
        log_softmax_d(l, V, lp);
        const ts_logprob *o = out + (size_t)i * (1 + TOP);
        if (o[0].id != ids[pre + i + 1]) { ++*bad; break; }
        ts_logprob one[1 + TOP]; /* the one-row form on the plain feed's row: the same entry, bit for bit */
        if (ts_logprobs_row(l, V, ids[pre + i + 1], TOP, one, &err) || memcmp(one, o, sizeof one)) ++*bad;
        worst = fmax(worst, fabs(o[0].logprob - lp[o[0].id]));
        for (int j = 0; j < TOP; j++) {
            const int32_t id = o[1 + j].id;
            if (id < 0 || id >= V) { ++*bad; break; }
            *bad += rank_of(l, V, id) != j;
            worst = fmax(worst, fabs(o[1 + j].logprob - lp[id]));
        }
    }
    /* the session the plain feed leaves: position, last row, greedy continuation */
    const float *la = ts_session_logits(a), *lb = ts_session_logits(b);
    if (ts_session_pos(a) != pre + N || ts_session_pos(b) != pre + N || !la || !lb ||
        memcmp(la, lb, sizeof(float) * (size_t)V)) {
        fprintf(stderr, "  the scored session is not the plain feed's\n");
        ++*bad;
    }
    int32_t ga[12], gb[12];
    if (greedy_ids(a, &next, 12, ga) != 12 || greedy_ids(b, &next, 12, gb) != 12 || memcmp(ga, gb, sizeof ga)) {
        fprintf(stderr, "  the greedy continuations differ\n");
        ++*bad;
    }
    if (out_copy) memcpy(out_copy, out, sizeof out);
    ts_session_free(a);
    ts_session_free(b);
    free(ref);
    free(lp);
    return worst;
}

TS_TEST(logprobs, score_matches_feed) {
    static const char *dirs[] = {"models/default", "tests/fixtures/tiny-dense"};
    for (int d = 0; d < 2; d++) {
        ts_engine *e = open_dir(dirs[d], 0);
        CHECK(e);
        const int V = ts_engine_info(e)->vocab_size;
        for (int pre = 0; pre <= 5; pre += 5) {
            int bad = 0;
            const double worst = lp_score_check(e, pre, (uint64_t)d + 1, NULL, &bad);
            fprintf(stderr, "  %-26s from position %d: %d ids scored, largest error %.2g, %d wrong\n", dirs[d], pre,
                    LP_SCORE_N - 1, worst, bad);
            CHECK_MSG(worst < 2e-5 && bad == 0, "%s: scores off log_softmax by %.3g, %d top lists, states or calls wrong",
                      dirs[d], worst, bad);
        }
        /* one id: nothing scored, the id fed; bad input: nothing fed */
        static ts_logprob out[8];
        const int32_t ids[3] = {1, 2, 3};
        ts_session *s = grid_session(e, 7);
        ts_error err = {0};
        CHECK(ts_session_score(s, ids, 1, 0, NULL, &err) == 0 && ts_session_pos(s) == 1);
        int32_t bad[3] = {ids[0], V, ids[1]};
        CHECK(ts_session_score(s, bad, 3, 0, out, &err) == TS_E_ARG && strstr(err.msg, "vocabulary") &&
              ts_session_pos(s) == 1);
        CHECK(ts_session_score(s, ids, 3, TS_TOP_LOGPROBS_MAX + 1, out, &err) == TS_E_ARG && ts_session_pos(s) == 1);
        CHECK(ts_session_score(s, ids, 3, 0, NULL, &err) == TS_E_ARG && ts_session_pos(s) == 1);
        CHECK(ts_session_score(s, ids, 0, 0, out, &err) == TS_E_ARG && ts_session_pos(s) == 1);
        static int32_t many[300]; /* more than the 255 ids of room left: refused whole */
        static ts_logprob many_out[300];
        for (int i = 0; i < 300; i++) many[i] = i % V;
        CHECK(ts_session_score(s, many, 300, 0, many_out, &err) == TS_E_CONTEXT && strstr(err.msg, "context") &&
              ts_session_pos(s) == 1);
        CHECK(ts_logprobs_row(ts_session_logits(s), V, V, 0, out, &err) == TS_E_ARG && strstr(err.msg, "id"));
        CHECK(ts_logprobs_row(ts_session_logits(s), V, 0, TS_TOP_LOGPROBS_MAX + 1, out, &err) == TS_E_ARG);
        ts_session_free(s);
        ts_engine_close(e);
    }
}
