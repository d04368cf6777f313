/* test_sample.c: the sampler (group `sample`).
 *
 * Exact checks where the answer is exact (greedy, the kept set of top-k /
 * top-p / min-p, penalties, probs), statistical checks for draws. Statistical
 * tests use fixed seeds, so they are deterministic; their thresholds are
 * stated at each: a frequency f over N draws of a token with probability p
 * must satisfy |f - p| <= 5 sigma, sigma = sqrt(p (1 - p) / N) (a correct
 * sampler fails one such check with probability ~6e-7), and a token outside
 * the kept set must never be drawn.
 */
#include <stdint.h>

#include "backend.h"
#include "gen/sample.h"
#include "gen/spec.h"
#include "ts_int.h"
#include "ts_test.h"

static ts_sampler *mk(int V, float temp, int top_k, float top_p, float min_p, uint64_t seed) {
    ts_sampler_params p;
    ts_sampler_params_default(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    ts_sampler *s = NULL;
    ts_error err;
    if (ts_sampler_new(V, &p, &s, &err)) fprintf(stderr, "  sampler_new: %s\n", err.msg);
    return s;
}

/* logits whose softmax at T=1 is exactly probs */
static void logits_of(const double *probs, int V, float *l) {
    for (int i = 0; i < V; i++) l[i] = probs[i] > 0 ? (float)log(probs[i]) : -INFINITY;
}

/* Draw N ids; check frequencies against expected probabilities (5 sigma)
 * and that zero-probability ids never appear. */
static int check_freq(ts_sampler *s, const float *logits, const double *expect, int V, int N) {
    int *cnt = calloc((size_t)V, sizeof(int));
    ts_error err;
    for (int i = 0; i < N; i++) {
        int32_t id;
        if (ts_sampler_sample(s, logits, &id, &err) || id < 0 || id >= V) {
            free(cnt);
            return -1;
        }
        cnt[id]++;
    }
    int bad = 0;
    for (int i = 0; i < V; i++) {
        double f = (double)cnt[i] / N, p = expect[i];
        double sig = sqrt(p * (1 - p) / N);
        if (p == 0 ? cnt[i] != 0 : fabs(f - p) > 5 * sig) {
            fprintf(stderr, "  id %d: frequency %.5f, expected %.5f (5 sigma = %.5f)\n", i, f, p, 5 * sig);
            bad++;
        }
    }
    free(cnt);
    return bad;
}

static void softmax_d(const float *l, int V, double T, double *out) {
    double m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++)
        if (l[i] / T > m) m = l[i] / T;
    for (int i = 0; i < V; i++) z += out[i] = exp(l[i] / T - m);
    for (int i = 0; i < V; i++) out[i] /= z;
}

TS_TEST(sample, greedy) {
    float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, NAN, 2.9f};
    ts_sampler *s = mk(6, 0.0f, 0, 1.0f, 0.0f, 1);
    CHECK(s != NULL);
    ts_error err;
    int32_t id = -1;
    for (int r = 0; r < 5; r++) {
        CHECK(ts_sampler_sample(s, l, &id, &err) == 0);
        CHECK_MSG(id == 1, "greedy picked %d (ties go to the lowest id)", id);
    }
    float probs[6];
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    CHECK(probs[1] == 1.0f && probs[3] == 0.0f && probs[0] == 0.0f);
    /* top_k = 1 is greedy too, whatever the temperature */
    ts_sampler *s1 = mk(6, 5.0f, 1, 1.0f, 0.0f, 7);
    CHECK(ts_sampler_sample(s1, l, &id, &err) == 0 && id == 1);
    float dead[6] = {-INFINITY, NAN, -INFINITY, -INFINITY, NAN, -INFINITY};
    CHECK(ts_sampler_sample(s, dead, &id, &err) == TS_E_ARG);
    ts_sampler_free(s);
    ts_sampler_free(s1);
}

TS_TEST(sample, deterministic_seed) {
    enum { V = 1000, N = 2000 };
    float *l = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) l[i] = (float)((i * 7919) % 101) / 20.0f;
    int32_t a[N], b[N], c[N];
    ts_error err;
    for (int run = 0; run < 3; run++) {
        ts_sampler *s = mk(V, 0.8f, 50, 0.9f, 0.02f, run == 2 ? 43 : 42);
        CHECK(s != NULL);
        int32_t *dst = run == 0 ? a : run == 1 ? b : c;
        for (int i = 0; i < N; i++) CHECK(ts_sampler_sample(s, l, &dst[i], &err) == 0);
        /* reset reseeds: the first draws repeat */
        ts_sampler_reset(s);
        int32_t again;
        CHECK(ts_sampler_sample(s, l, &again, &err) == 0 && again == dst[0]);
        ts_sampler_free(s);
    }
    CHECK(!memcmp(a, b, sizeof a));
    int diff = 0;
    for (int i = 0; i < N; i++) diff += a[i] != c[i];
    CHECK_MSG(diff > N / 2, "seeds 42 and 43 agree on %d of %d draws", N - diff, N);
    free(l);
}

TS_TEST(sample, temperature_stats) {
    float l[5] = {1.0f, 2.0f, 0.0f, -1.0f, 1.5f};
    double e[5];
    double temps[] = {1.0, 0.5, 2.0};
    for (int k = 0; k < 3; k++) {
        ts_sampler *s = mk(5, (float)temps[k], 0, 1.0f, 0.0f, 100 + (uint64_t)k);
        CHECK(s != NULL);
        softmax_d(l, 5, temps[k], e);
        int bad = check_freq(s, l, e, 5, 200000);
        CHECK_MSG(bad == 0, "T=%.1f: %d ids off by more than 5 sigma", temps[k], bad);
        ts_sampler_free(s);
    }
}

/* probs = [0.4, 0.25, 0.15, 0.1, 0.06, 0.04] in a shuffled id order */
static const int PERM[6] = {3, 0, 5, 1, 4, 2};
static const double P6[6] = {0.4, 0.25, 0.15, 0.1, 0.06, 0.04};

static void shuffled(float *l, double *p) {
    for (int i = 0; i < 6; i++) p[PERM[i]] = P6[i];
    logits_of(p, 6, l);
}

TS_TEST(sample, top_k) {
    float l[6];
    double p[6], e[6] = {0};
    shuffled(l, p);
    ts_sampler *s = mk(6, 1.0f, 3, 1.0f, 0.0f, 5);
    CHECK(s != NULL);
    double z = 0.4 + 0.25 + 0.15;
    for (int i = 0; i < 3; i++) e[PERM[i]] = P6[i] / z;
    CHECK(check_freq(s, l, e, 6, 100000) == 0);
    float probs[6];
    ts_error err;
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    for (int i = 0; i < 6; i++) CHECK_MSG(fabs(probs[i] - e[i]) < 1e-5, "id %d: %g vs %g", i, probs[i], e[i]);
    ts_sampler_free(s);
}

TS_TEST(sample, top_p) {
    float l[6];
    double p[6];
    shuffled(l, p);
    /* keep a token while the mass before it is below top_p:
     * 0.6 -> {0.4, 0.25}; 0.66 -> {0.4, 0.25, 0.15}; 0.95 -> all but the last */
    struct { float top_p; int keep; } cases[] = {{0.3f, 1}, {0.6f, 2}, {0.66f, 3}, {0.85f, 4}, {0.95f, 5}, {1.0f, 6}};
    for (unsigned c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ts_sampler *s = mk(6, 1.0f, 0, cases[c].top_p, 0.0f, 9 + c);
        CHECK(s != NULL);
        double e[6] = {0}, z = 0;
        for (int i = 0; i < cases[c].keep; i++) z += P6[i];
        for (int i = 0; i < cases[c].keep; i++) e[PERM[i]] = P6[i] / z;
        float probs[6];
        ts_error err;
        CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
        for (int i = 0; i < 6; i++)
            CHECK_MSG(fabs(probs[i] - e[i]) < 1e-5, "top_p %.2f id %d: %g vs %g", cases[c].top_p, i, probs[i], e[i]);
        CHECK(check_freq(s, l, e, 6, 50000) == 0);
        ts_sampler_free(s);
    }
}

TS_TEST(sample, min_p) {
    float l[6];
    double p[6];
    shuffled(l, p);
    /* min_p 0.3: threshold 0.12 keeps {0.4, 0.25, 0.15} */
    ts_sampler *s = mk(6, 1.0f, 0, 1.0f, 0.3f, 11);
    CHECK(s != NULL);
    double e[6] = {0}, z = 0.8;
    for (int i = 0; i < 3; i++) e[PERM[i]] = P6[i] / z;
    float probs[6];
    ts_error err;
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    for (int i = 0; i < 6; i++) CHECK_MSG(fabs(probs[i] - e[i]) < 1e-5, "id %d: %g vs %g", i, probs[i], e[i]);
    CHECK(check_freq(s, l, e, 6, 50000) == 0);
    ts_sampler_free(s);
    /* combined: top_k 5, top_p 0.7 (over the renormalised top 5: 0.4/0.96 ...)
     * then min_p 0.5 (keeps p >= 0.2 of the max): {0.4, 0.25} */
    s = mk(6, 1.0f, 5, 0.7f, 0.5f, 12);
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    CHECK(fabs(probs[PERM[0]] - 0.4 / 0.65) < 1e-5 && fabs(probs[PERM[1]] - 0.25 / 0.65) < 1e-5);
    ts_sampler_free(s);
}

/* Top-p on a large vocabulary, where only a head of the candidates is
 * sorted: the kept set must equal a brute-force full sort's. */
static int cmp_desc(const void *a, const void *b) {
    const double *x = a, *y = b;
    return x[0] < y[0] ? 1 : x[0] > y[0] ? -1 : (x[1] > y[1]) - (x[1] < y[1]);
}

TS_TEST(sample, top_p_large_vocab) {
    enum { V = 151936 };
    float *l = malloc(sizeof(float) * V), *probs = malloc(sizeof(float) * V);
    double *pairs = malloc(sizeof(double) * 2 * V);
    uint64_t x = 12345;
    float temps[] = {0.7f, 1.0f, 3.0f};
    float tps[] = {0.5f, 0.9f, 0.99f};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < V; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            l[i] = (float)((x >> 40) % 100000) / 10000.0f; /* [0, 10): a long flat tail */
        }
        ts_sampler *s = mk(V, temps[k], 0, tps[k], 0.0f, 3);
        CHECK(s != NULL);
        ts_error err;
        CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
        double m = -1e30, z = 0;
        for (int i = 0; i < V; i++) m = fmax(m, l[i] / temps[k]);
        for (int i = 0; i < V; i++) {
            pairs[2 * i] = exp((double)l[i] / temps[k] - m);
            pairs[2 * i + 1] = i;
            z += pairs[2 * i];
        }
        qsort(pairs, V, 2 * sizeof(double), cmp_desc);
        int keep = 0;
        double acc = 0;
        while (keep < V && acc < tps[k] * z) acc += pairs[2 * keep++];
        int n_pos = 0, bad = 0;
        double sum = 0;
        for (int i = 0; i < V; i++) n_pos += probs[i] > 0, sum += probs[i];
        for (int i = 0; i < keep; i++) bad += probs[(int)pairs[2 * i + 1]] == 0;
        /* the sampler computes in float: allow the boundary token to differ */
        CHECK_MSG(abs(n_pos - keep) <= 1 && bad <= 1, "T %.1f top_p %.2f: kept %d, expected %d (%d missing)",
                  temps[k], tps[k], n_pos, keep, bad);
        CHECK(fabs(sum - 1.0) < 1e-3);
        ts_sampler_free(s);
    }
    free(l), free(probs), free(pairs);
}

TS_TEST(sample, penalties) {
    float l[4] = {2.0f, -1.0f, 0.5f, 1.0f};
    ts_sampler_params p;
    ts_sampler_params_default(&p);
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.25f;
    p.frequency_penalty = 0.5f;
    ts_sampler *s;
    ts_error err;
    CHECK(ts_sampler_new(4, &p, &s, &err) == 0);
    ts_sampler_accept(s, 0);
    ts_sampler_accept(s, 0);
    ts_sampler_accept(s, 1);
    /* id 0: 2/2 - 2*0.5 - 0.25 = -0.25; id 1: -1*2 - 0.5 - 0.25 = -2.75 */
    float want[4] = {-0.25f, -2.75f, 0.5f, 1.0f}, probs[4];
    double e[4];
    softmax_d(want, 4, 1.0, e);
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    for (int i = 0; i < 4; i++) CHECK_MSG(fabs(probs[i] - e[i]) < 1e-6, "id %d: %g vs %g", i, probs[i], e[i]);
    /* the caller's logits are untouched */
    CHECK(l[0] == 2.0f && l[1] == -1.0f);
    /* greedy sees the penalties: id 0 (2.0) loses to id 3 (1.0) */
    ts_sampler_free(s);
    p.temperature = 0;
    CHECK(ts_sampler_new(4, &p, &s, &err) == 0);
    ts_sampler_accept(s, 0);
    int32_t id;
    CHECK(ts_sampler_sample(s, l, &id, &err) == 0 && id == 3);
    /* reset forgets the history */
    ts_sampler_reset(s);
    CHECK(ts_sampler_sample(s, l, &id, &err) == 0 && id == 0);
    ts_sampler_free(s);
}

TS_TEST(sample, penalty_window) {
    float l[4] = {1.0f, 1.0f, 1.0f, 1.0f}, probs[4];
    ts_sampler_params p;
    ts_sampler_params_default(&p);
    p.presence_penalty = 1.0f;
    p.penalty_last_n = 2;
    ts_sampler *s;
    ts_error err;
    CHECK(ts_sampler_new(4, &p, &s, &err) == 0);
    ts_sampler_accept(s, 0);
    ts_sampler_accept(s, 1);
    ts_sampler_accept(s, 2); /* pushes 0 out of the window */
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    CHECK(probs[0] == probs[3] && probs[1] == probs[2] && probs[1] < probs[0]);
    CHECK(fabs(probs[0] / probs[1] - exp(1.0)) < 1e-4);
    ts_sampler_accept(s, 1); /* window {2, 1} */
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    CHECK(probs[0] == probs[3] && probs[1] == probs[2] && probs[1] < probs[0]);
    ts_sampler_accept(s, 1); /* window {1, 1}: id 2 is free again */
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    CHECK(probs[2] == probs[0] && probs[1] < probs[0]);
    /* out-of-range ids are ignored, not a crash */
    ts_sampler_accept(s, -3);
    ts_sampler_accept(s, 4);
    ts_sampler_free(s);
    /* -1 = the whole sequence */
    p.penalty_last_n = -1;
    CHECK(ts_sampler_new(4, &p, &s, &err) == 0);
    for (int i = 0; i < 100; i++) ts_sampler_accept(s, 3);
    ts_sampler_accept(s, 0);
    for (int i = 0; i < 100; i++) ts_sampler_accept(s, 1);
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    CHECK(probs[0] == probs[1] && probs[0] == probs[3] && probs[2] > probs[0]);
    ts_sampler_free(s);
}

/* probs() is the distribution sample() draws from. */
TS_TEST(sample, probs_match_draws) {
    enum { V = 50 };
    float l[V], probs[V];
    for (int i = 0; i < V; i++) l[i] = (float)sin(i * 1.3) * 3.0f;
    ts_sampler *s = mk(V, 0.9f, 20, 0.9f, 0.05f, 77);
    CHECK(s != NULL);
    ts_error err;
    CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
    double e[V], sum = 0;
    int nz = 0;
    for (int i = 0; i < V; i++) e[i] = probs[i], sum += probs[i], nz += probs[i] > 0;
    CHECK(fabs(sum - 1.0) < 1e-5);
    CHECK(nz > 2 && nz < 20);
    CHECK(check_freq(s, l, e, V, 100000) == 0);
    ts_sampler_free(s);
}

TS_TEST(sample, draw_and_uniform) {
    ts_sampler *s = mk(4, 1.0f, 0, 1.0f, 0.0f, 2024);
    CHECK(s != NULL);
    float probs[4] = {0.1f, 0.0f, 0.6f, 0.3f};
    int cnt[4] = {0};
    enum { N = 100000 };
    for (int i = 0; i < N; i++) {
        int32_t id = ts_sampler_draw(s, probs);
        CHECK(id >= 0 && id < 4);
        cnt[id]++;
    }
    CHECK(cnt[1] == 0);
    for (int i = 0; i < 4; i++) {
        double p = probs[i], f = (double)cnt[i] / N;
        CHECK_MSG(fabs(f - p) <= 5 * sqrt(p * (1 - p) / N), "id %d: %.4f vs %.4f", i, f, p);
    }
    float none[4] = {0};
    CHECK(ts_sampler_draw(s, none) == -1);
    /* uniform: in [0, 1), mean 1/2 within 5 sigma (sigma = sqrt(1/12/N)) */
    double m = 0;
    for (int i = 0; i < N; i++) {
        double u = ts_sampler_uniform(s);
        CHECK(u >= 0.0 && u < 1.0);
        m += u;
    }
    m /= N;
    CHECK_MSG(fabs(m - 0.5) < 5 * sqrt(1.0 / 12 / N), "mean %.5f", m);
    ts_sampler_free(s);
}

/* Sampling allocates nothing: with every allocation failing, it still works
 * and the allocator's counters do not move. */
TS_TEST(sample, no_allocation_per_token) {
    enum { V = 151936 };
    float *l = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) l[i] = (float)((i * 2654435761u) % 1000) / 100.0f;
    ts_sampler_params p;
    ts_sampler_params_default(&p);
    p.temperature = 0.7f;
    p.top_p = 0.95f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.1f;
    p.presence_penalty = 0.5f;
    ts_sampler *s;
    ts_error err;
    CHECK(ts_sampler_new(V, &p, &s, &err) == 0);
    float *probs = malloc(sizeof(float) * V);
    size_t before = ts_mem_total();
    ts_mem_fail_after(1);
    int ok = 1;
    double t0 = ts_now();
    for (int i = 0; i < 50 && ok; i++) {
        int32_t id;
        ok = ts_sampler_sample(s, l, &id, &err) == 0;
        ts_sampler_accept(s, id);
        ok = ok && ts_sampler_probs(s, l, probs, &err) == 0;
    }
    double dt = (ts_now() - t0) / 100;
    ts_mem_fail_after(0);
    CHECK(ok);
    CHECK(ts_mem_total() == before);
    fprintf(stderr, "  %.2f ms per sample/probs call at vocab %d (top_p 0.95 over a flat tail)\n", dt * 1e3, V);
    ts_sampler_free(s);
    free(l);
    free(probs);
}

TS_TEST(sample, bad_params) {
    ts_sampler_params p;
    ts_sampler *s;
    ts_error err;
    ts_sampler_params_default(&p);
    CHECK(ts_sampler_new(0, &p, &s, &err) == TS_E_ARG);
    p.top_p = 0.0f;
    CHECK(ts_sampler_new(10, &p, &s, &err) == TS_E_ARG && strstr(err.msg, "top_p"));
    ts_sampler_params_default(&p);
    p.min_p = 1.5f;
    CHECK(ts_sampler_new(10, &p, &s, &err) == TS_E_ARG && strstr(err.msg, "min_p"));
    ts_sampler_params_default(&p);
    p.top_k = -2;
    CHECK(ts_sampler_new(10, &p, &s, &err) == TS_E_ARG && strstr(err.msg, "top_k"));
    ts_sampler_params_default(&p);
    p.temperature = NAN;
    CHECK(ts_sampler_new(10, &p, &s, &err) == TS_E_ARG && strstr(err.msg, "temperature"));
    ts_sampler_params_default(&p);
    p.repetition_penalty = 0.0f;
    CHECK(ts_sampler_new(10, &p, &s, &err) == TS_E_ARG && strstr(err.msg, "repetition_penalty"));
    ts_sampler_params_default(&p);
    CHECK(ts_sampler_new(10, NULL, &s, &err) == 0);
    ts_sampler_free(s);
    ts_sampler_free(NULL);
}

/* Top-p's selection (a quickselect on mass) against a brute-force sort, on
 * 300 random vocabularies of 1..3000 tokens with heavy ties (small integer
 * logits), random temperatures and top_p. Both order by (scaled logit desc,
 * id asc) and use the same float weights, so the kept sets must be equal. */
typedef struct { float v, w; int id; } bf_c;
static int cmp_bf(const void *a, const void *b) {
    const bf_c *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id - y->id;
}

TS_TEST(sample, top_p_exact_random) {
    uint64_t x = 99;
#define RND() (x = x * 6364136223846793005ull + 1442695040888963407ull, (uint32_t)(x >> 33))
    float *l = malloc(sizeof(float) * 3000), *probs = malloc(sizeof(float) * 3000);
    bf_c *bf = malloc(sizeof(bf_c) * 3000);
    int bad = 0;
    for (int trial = 0; trial < 300; trial++) {
        int V = 1 + (int)(RND() % 3000);
        float T = 0.3f + (float)(RND() % 1000) / 500.0f;
        float tp = 0.05f + (float)(RND() % 1000) / 1060.0f;
        for (int i = 0; i < V; i++) l[i] = (float)(RND() % 12) - 6.0f;
        ts_sampler *s = mk(V, T, 0, tp, 0.0f, 1);
        CHECK(s != NULL);
        ts_error err;
        CHECK(ts_sampler_probs(s, l, probs, &err) == 0);
        ts_sampler_free(s);
        float inv_t = 1.0f / T, m = -INFINITY;
        for (int i = 0; i < V; i++) m = fmaxf(m, l[i] * inv_t);
        double z = 0;
        for (int i = 0; i < V; i++) {
            bf[i].v = l[i] * inv_t;
            bf[i].w = expf(bf[i].v - m);
            bf[i].id = i;
            z += bf[i].w;
        }
        qsort(bf, (size_t)V, sizeof *bf, cmp_bf);
        double target = (double)tp * z, acc = 0;
        int keep = 0;
        while (keep < V && acc < target) acc += bf[keep++].w;
        int mismatch = 0, n_pos = 0;
        for (int i = 0; i < V; i++) n_pos += probs[i] > 0;
        for (int i = 0; i < keep; i++) mismatch += probs[bf[i].id] == 0;
        if (mismatch || n_pos != keep) {
            if (++bad <= 3) fprintf(stderr, "  trial %d V %d T %.2f top_p %.3f: kept %d, expected %d\n", trial, V, T, tp, n_pos, keep);
        }
    }
#undef RND
    free(l), free(probs), free(bf);
    CHECK_MSG(bad == 0, "%d of 300 trials differ", bad);
}

/* ---- topn: the backend op (CPU, the reference) and the candidate sampler ----
 * The CPU op against a plain reference (penalise a copy, scale, sort every
 * valid entry with qsort, sum in index order): every output bit for bit.
 * Then the candidate sampler against the full-row sampler: two samplers,
 * same seed, same accepted ids; one samples the row, the other the op's
 * candidates (the row only when they do not decide); the tokens must agree
 * at every step, and the candidates must decide exactly the steps the rule
 * in sample.c says they decide (so the fast path cannot silently vanish). */

static uint64_t tn_s = 0x243F6A8885A308D3ull;
static double tn_u(void) {
    tn_s ^= tn_s << 13, tn_s ^= tn_s >> 7, tn_s ^= tn_s << 17;
    return (double)(tn_s >> 11) * 0x1.0p-53;
}

/* A row of kind 0: flat, uniform in [-3, 3]; 1: peaked, a few hot entries
 * in [4, 9] over a [-6, 1] floor; 2: ties, values on a 0.5 grid with some
 * NaN, -inf, +-0 and a hot block; 3: confident, one entry at 16 over a
 * [-5, 1] floor (at T = 1 it holds all but ~1e-3 of the mass); 4: on the
 * edge of top_p 0.9, one entry holding a share drawn from [0.88, 0.92] at
 * T = 1 (plus a case at 0.9 within float rounding). */
static void tn_row(float *x, int V, int kind) {
    if (kind >= 3) {
        double S = 0;
        for (int i = 0; i < V; i++) x[i] = (float)(tn_u() * 6 - 5), S += exp((double)x[i]);
        const int top = (int)(tn_u() * V);
        S -= exp((double)x[top]);
        double p = tn_u() < 0.2 ? 0.9 : 0.88 + 0.04 * tn_u();
        x[top] = kind == 3 ? 16.0f : (float)log(p * S / (1 - p));
        return;
    }
    for (int i = 0; i < V; i++) {
        double u = tn_u();
        if (kind == 0) x[i] = (float)(u * 6 - 3);
        else if (kind == 1) x[i] = tn_u() < 8.0 / V ? (float)(4 + 5 * u) : (float)(u * 7 - 6);
        else {
            x[i] = (float)floor(u * 12 - 6) * 0.5f;
            double w = tn_u();
            if (w < 0.02) x[i] = NAN;
            else if (w < 0.04) x[i] = -INFINITY;
            else if (w < 0.08) x[i] = w < 0.06 ? -0.0f : 0.0f;
            else if (w < 0.08 + 6.0 / V) x[i] = 4.0f;
        }
    }
}

typedef struct { float v; int32_t id; } tn_c;
static int tn_cmp(const void *a, const void *b) {
    const tn_c *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void tn_ref(const float *x, int V, const ts_topn_args *a, float *vals, int32_t *ids, int *nv, double *z) {
    float *y = malloc(sizeof(float) * (size_t)V);
    tn_c *c = malloc(sizeof(tn_c) * (size_t)V);
    memcpy(y, x, sizeof(float) * (size_t)V);
    for (int j = 0; j < a->n_pen; j++) {
        float v = y[a->pen_ids[j]];
        if (a->rep != 1.0f) v = v > 0.0f ? v / a->rep : v * a->rep;
        y[a->pen_ids[j]] = v - a->pen_sub[j];
    }
    int n = 0;
    for (int i = 0; i < V; i++) {
        float v = y[i] * a->scale;
        if (v > -INFINITY) c[n++] = (tn_c){v == 0.0f ? 0.0f : v, i};
    }
    qsort(c, (size_t)n, sizeof *c, tn_cmp);
    for (int j = 0; j < a->N; j++) {
        vals[j] = j < n ? c[j].v : -INFINITY;
        ids[j] = j < n ? c[j].id : -1;
    }
    *nv = n;
    *z = 0;
    if (n && !isinf(c[0].v))
        for (int i = 0; i < V; i++) {
            float v = y[i] * a->scale;
            if (v > -INFINITY) *z += expf(v - c[0].v);
        }
    free(y), free(c);
}

static int tn_open_cpu(ts_backend **be, ts_stream **st) {
    ts_backend_params p = {0};
    ts_error err = {0};
    *be = NULL, *st = NULL;
    if (ts_cpu_backend_new(&p, be, &err)) return -1;
    return (*be)->ops->stream_new(*be, 4, 1024, 64, st);
}

/* n_pen distinct ascending ids below V with subtrahends, into ids/sub */
static int tn_pens(int V, int want, int32_t *ids, float *sub) {
    int n = 0;
    for (int i = 0; i < V && n < want; i++)
        if (tn_u() < (double)(want - n) / (V - i)) ids[n] = i, sub[n] = (float)(tn_u() * 3 - 1), n++;
    return n;
}

TS_TEST(sample, topn_cpu_op_matches_reference) {
    ts_backend *be;
    ts_stream *st;
    CHECK(!tn_open_cpu(&be, &st));
    const int Vs[] = {1, 7, 300, 4097, 20000}, Ns[] = {1, 3, 64, 256};
    float *x = malloc(sizeof(float) * 2 * 20010), rv[256], ov[2 * 256];
    int32_t pid[64], ri[256], oi[2 * 256], onv[2];
    float psub[64];
    double oz[2];
    int bad = 0, cases = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof *Vs; vi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (int kind = 0; kind < 3; kind++)
                for (int pen = 0; pen < 2; pen++) {
                    const int V = Vs[vi], ld = V + 3;
                    ts_topn_args a = {.N = Ns[ni], .scale = kind == 1 ? 1.0f / 0.7f : 1.0f, .rep = pen ? 1.5f : 1.0f};
                    a.n_pen = pen ? tn_pens(V, 40, pid, psub) : 0;
                    a.pen_ids = pid, a.pen_sub = psub;
                    a.vals = ov, a.ids = oi, a.n_valid = onv, a.sum_exp = oz;
                    tn_row(x, V, kind);
                    tn_row(x + ld, V, (kind + 1) % 3);
                    /* two rows at a stride: each row on its own */
                    be->ops->topn(st, (ts_view){x, TS_DTYPE_F32, 2, V, ld}, V, &a);
                    for (int r = 0; r < 2; r++) {
                        int nv;
                        double z;
                        tn_ref(x + r * ld, V, &a, rv, ri, &nv, &z);
                        cases++;
                        if (memcmp(rv, ov + r * a.N, sizeof(float) * a.N) || memcmp(ri, oi + r * a.N, 4 * (size_t)a.N) ||
                            nv != onv[r] || z != oz[r]) {
                            if (++bad <= 3)
                                fprintf(stderr, "  V %d N %d kind %d pen %d row %d: n_valid %d/%d sum %.17g/%.17g\n", V,
                                        a.N, kind, pen, r, onv[r], nv, oz[r], z);
                        }
                    }
                }
    free(x);
    be->ops->stream_free(st);
    ts_backend_free(be);
    CHECK_MSG(bad == 0, "%d of %d rows differ from the reference", bad, cases);
}

typedef struct {
    float temp, top_p, min_p, rep, pres, freq;
    int top_k;
    int expect; /* 1: every step decided by the candidates; 0: none; -1: some or none (min-p) */
} tn_cfg;

/* A logit bias over the row (tn_run): its ids and values; and a ban list
 * (ts_sampler_set_ban). */
typedef struct {
    const int32_t *ids;
    const float *v;
    int n;
    const int32_t *ban;
    int n_ban;
} tn_bias;

/* Steps of one configuration over rows of kind (with a logit bias when b is
 * not NULL); returns mismatches, adds decided steps to *dec. */
static int tn_run_b(ts_backend *be, ts_stream *st, int V, int kind, const tn_cfg *c, const tn_bias *b, uint64_t seed,
                    int steps, int *dec) {
    ts_sampler_params p;
    ts_sampler_params_default(&p);
    if (b) p.bias_ids = b->ids, p.bias = b->v, p.n_bias = b->n;
    p.temperature = c->temp, p.top_k = c->top_k, p.top_p = c->top_p, p.min_p = c->min_p;
    p.repetition_penalty = c->rep, p.presence_penalty = c->pres, p.frequency_penalty = c->freq;
    p.penalty_last_n = 24;
    p.seed = seed;
    ts_sampler *full = NULL, *cand = NULL;
    ts_error err = {0};
    if (ts_sampler_new(V, &p, &full, &err) || ts_sampler_new(V, &p, &cand, &err)) {
        fprintf(stderr, "  sampler_new: %s\n", err.msg);
        ts_sampler_free(full);
        return 1;
    }
    if (b && b->n_ban) ts_sampler_set_ban(full, b->ban, b->n_ban), ts_sampler_set_ban(cand, b->ban, b->n_ban);
    float *x = malloc(sizeof(float) * (size_t)V), vals[TS_TOPN_MAX];
    int32_t ids[TS_TOPN_MAX], nv;
    double z;
    int bad = 0;
    for (int t = 0; t < 8; t++) { /* a prompt: penalties from the first step */
        int32_t id = (int32_t)(tn_u() * V);
        ts_sampler_accept(full, id), ts_sampler_accept(cand, id);
    }
    for (int t = 0; t < steps; t++) {
        tn_row(x, V, kind);
        int32_t a_id = -1, b_id = -1;
        int ra = ts_sampler_sample(full, x, &a_id, &err), decided = 0, rb = 0;
        ts_topn_args a;
        if (!ts_sampler_topn_args(cand, &a)) {
            a.vals = vals, a.ids = ids, a.n_valid = &nv, a.sum_exp = &z;
            be->ops->topn(st, tv_f32(x, 1, V), V, &a);
            rb = ts_sampler_sample_topn(cand, &a, &b_id, &decided, &err);
        }
        if (!rb && !decided) rb = ts_sampler_sample(cand, x, &b_id, &err);
        *dec += decided;
        if (ra != rb || a_id != b_id) {
            if (bad++ < 3)
                fprintf(stderr, "  step %d: full %d (rc %d), candidates %d (rc %d, decided %d)\n", t, a_id, ra, b_id, rb,
                        decided);
        }
        if (ra) break;
        ts_sampler_accept(full, a_id), ts_sampler_accept(cand, a_id);
    }
    free(x);
    ts_sampler_free(full), ts_sampler_free(cand);
    return bad;
}

static int tn_run(ts_backend *be, ts_stream *st, int V, int kind, const tn_cfg *c, uint64_t seed, int steps, int *dec) {
    return tn_run_b(be, st, V, kind, c, NULL, seed, steps, dec);
}

TS_TEST(sample, topn_candidates_give_the_full_row_token) {
    ts_backend *be;
    ts_stream *st;
    CHECK(!tn_open_cpu(&be, &st));
    const tn_cfg cfgs[] = {
        {0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 1},     /* greedy (no sampler in generate; here the rule) */
        {0.0f, 1.0f, 0.0f, 1.3f, 0.5f, 0.2f, 0, 1},     /* greedy with penalties */
        {0.8f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1, 1},     /* top_k 1 */
        {0.8f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 2, 1},
        {0.7f, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 20, 1},   /* Qwen's recommended shape */
        {1.3f, 0.5f, 0.05f, 1.2f, 0.3f, 0.1f, 40, 1},
        {0.6f, 1.0f, 0.0f, 0.8f, -0.5f, 0.0f, 256, 1},  /* top_k = TS_TOPN_MAX, penalties that raise */
        {1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},     /* the full distribution: the row */
        {1.0f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0, -1},    /* top-p alone: the row unless the max is kept alone */
        {1.0f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 300, -1},  /* top_k > N with top-p: likewise */
        {0.9f, 1.0f, 0.1f, 1.0f, 0.0f, 0.0f, 0, -1},    /* min-p: decided when it cuts inside */
        {0.9f, 1.0f, 0.3f, 1.1f, 0.2f, 0.0f, 1000, -1}, /* min-p under a top_k > N */
    };
    const int Vs[] = {200, 5000}, steps = 60;
    int bad = 0, wrong_path = 0, decided_minp = 0;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++)
        for (size_t vi = 0; vi < 2; vi++)
            for (int kind = 0; kind < 3; kind++) {
                int dec = 0;
                const int b = tn_run(be, st, Vs[vi], kind, &cfgs[ci], 1000 + ci * 7 + vi * 3 + kind, steps, &dec);
                bad += b;
                /* V = 200 <= N: the candidates are the whole row, always decided */
                const int want = cfgs[ci].expect == 1 || Vs[vi] <= TS_TOPN_MAX ? 1 : cfgs[ci].expect;
                if (cfgs[ci].expect == -1 && Vs[vi] > TS_TOPN_MAX) decided_minp += dec;
                if ((want == 1 && dec != steps) || (want == 0 && dec != 0)) {
                    if (wrong_path++ < 3)
                        fprintf(stderr, "  config %zu V %d kind %d: %d of %d steps decided by the candidates\n", ci,
                                Vs[vi], kind, dec, steps);
                }
                if (b) fprintf(stderr, "  config %zu V %d kind %d: %d tokens differ\n", ci, Vs[vi], kind, b);
            }
    be->ops->stream_free(st);
    ts_backend_free(be);
    CHECK_MSG(bad == 0, "%d sampled tokens differ between the candidates and the full row", bad);
    CHECK_MSG(wrong_path == 0, "%d runs took another path than the rule says", wrong_path);
    fprintf(stderr, "  min-p configurations over 5000 entries: %d of %d steps decided by the candidates\n", decided_minp,
            2 * 3 * steps);
    CHECK_MSG(decided_minp > 0, "min-p never cut inside the candidates on peaked rows");
}

/* Top-p without top-k over 5000 entries: the candidates decide a step only
 * when top-p certainly keeps the max alone. Confident rows: every step;
 * flat rows: none; rows whose max holds 0.88..0.92 of the mass (a fifth of
 * them 0.9 itself): some, and the tokens agree on every one of them. */
TS_TEST(sample, topn_top_p_keeps_the_max_alone) {
    ts_backend *be;
    ts_stream *st;
    CHECK(!tn_open_cpu(&be, &st));
    const tn_cfg tp = {1.0f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0, -1}, tp_minp = {1.0f, 0.9f, 0.05f, 1.0f, 0.0f, 0.0f, 0, -1};
    const int steps = 200;
    int dec_conf = 0, dec_flat = 0, dec_edge = 0, dec_minp = 0, bad = 0;
    bad += tn_run(be, st, 5000, 3, &tp, 11, steps, &dec_conf);
    bad += tn_run(be, st, 5000, 0, &tp, 12, steps, &dec_flat);
    bad += tn_run(be, st, 5000, 4, &tp, 13, steps, &dec_edge);
    bad += tn_run(be, st, 5000, 4, &tp_minp, 14, steps, &dec_minp);
    fprintf(stderr, "  decided: confident %d, flat %d, edge %d, edge with min-p %d (of %d each)\n", dec_conf, dec_flat,
            dec_edge, dec_minp, steps);
    be->ops->stream_free(st);
    ts_backend_free(be);
    CHECK_MSG(bad == 0, "%d tokens differ between the candidates and the full row", bad);
    CHECK(dec_conf == steps && dec_flat == 0);
    CHECK_MSG(dec_edge > steps / 4 && dec_edge < steps, "the edge rows were decided %d times of %d", dec_edge, steps);
}

typedef struct { int32_t *ids; int n; } collect_t;
static int tn_collect(void *u, int32_t id) {
    collect_t *c = u;
    if (c->n < 64) c->ids[c->n++] = id;
    return 0;
}

/* The generation loop with the candidate path forced on the CPU
 * (TS_SAMPLE_TOPN=1) against the row path (=0), on the bundled model
 * (12,288 tokens, so the candidates are a real subset): the same tokens
 * for every configuration, and the candidates decided every step where the
 * rule says they must (top_k <= TS_TOPN_MAX) and none where they cannot
 * (the full distribution). */
static int tn_gen(ts_engine *e, const char *mode, const ts_gen_params *gp, int32_t *out, long *asked, long *dec) {
    setenv("TS_SAMPLE_TOPN", mode, 1);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 128;
    ts_session *s = NULL;
    ts_error err = {0};
    long a0, d0;
    ts_gen_topn_stats(&a0, &d0);
    int n = -1;
    if (!ts_session_new(e, &sp, &s, &err)) {
        const int32_t prompt[] = {1, 20, 300, 4000, 55, 6, 777, 8};
        collect_t c = {out, 0};
        if (!ts_generate(s, prompt, 8, gp, tn_collect, &c, NULL, &err)) n = c.n;
        else fprintf(stderr, "  generate: %s\n", err.msg);
    }
    ts_session_free(s);
    unsetenv("TS_SAMPLE_TOPN");
    ts_gen_topn_stats(asked, dec);
    *asked -= a0, *dec -= d0;
    return n;
}

TS_TEST(sample, topn_generation_same_tokens_cpu) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cpu";
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK_MSG(!ts_engine_open("models/default", &ep, &e, &err), "%s", err.msg);
    struct { float temp, top_p, min_p, rep, pres; int top_k, expect; } cf[] = {
        {0.8f, 1.0f, 0.0f, 1.0f, 0.0f, 40, 1},   {0.7f, 0.95f, 0.0f, 1.3f, 0.4f, 20, 1},
        {0.0f, 1.0f, 0.0f, 1.2f, 0.0f, 0, 1},    /* greedy with a repetition penalty: a sampler, N = 1 */
        {1.0f, 0.9f, 0.0f, 1.0f, 0.0f, 0, -1},   {1.0f, 1.0f, 0.2f, 1.0f, 0.0f, 0, -1},
        {1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0, 0}, /* the full distribution: the row every step */
    };
    const int K = 24;
    for (size_t i = 0; i < sizeof cf / sizeof *cf; i++) {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = K;
        gp.temperature = cf[i].temp, gp.top_p = cf[i].top_p, gp.min_p = cf[i].min_p, gp.top_k = cf[i].top_k;
        gp.repeat_penalty = cf[i].rep, gp.presence_penalty = cf[i].pres;
        gp.seed = 77 + i;
        int32_t a[64], b[64];
        long asked, dec, asked0, dec0;
        int na = tn_gen(e, "1", &gp, a, &asked, &dec), nb = tn_gen(e, "0", &gp, b, &asked0, &dec0);
        CHECK_MSG(na > 0 && na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na),
                  "config %zu: %d tokens with candidates, %d from the row, or they differ", i, na, nb);
        CHECK_MSG(asked0 == 0, "config %zu: TS_SAMPLE_TOPN=0 still asked for candidates", i);
        CHECK_MSG(asked == na, "config %zu: %ld of %d steps asked for candidates", i, asked, na);
        if (cf[i].expect == 1) CHECK_MSG(dec == na, "config %zu: %ld of %d steps decided", i, dec, na);
        if (cf[i].expect == 0) CHECK_MSG(dec == 0, "config %zu: %ld of %d steps decided", i, dec, na);
        fprintf(stderr, "  config %zu: %d tokens equal, %ld decided by the candidates\n", i, na, dec);
    }
    ts_engine_close(e);
}

/* The logit bias (ts_sampler_params bias_ids / bias): (1) what it means:
 * without penalties a biased sampler draws what an unbiased one draws from
 * the row with the biases added (same seed, same tokens, every step), at
 * +100 the biased token wins every greedy step and at -100 a banned one
 * never appears; (2) the candidate path (the bias folded into topn's
 * penalty list) gives the row's tokens with penalties on as well, decided
 * by the candidates where the rule says (greedy, top_k <= N), and left to
 * the row where it cannot express the pair (a repetition penalty and a
 * biased id outside the window). */
TS_TEST(sample, logit_bias) {
    const int V = 5000, steps = 60;
    int32_t bid[64];
    float bv[64];
    float *x = malloc(sizeof(float) * V), *y = malloc(sizeof(float) * V);
    int nb = 0;
    for (int i = 0; i < V && nb < 48; i++) /* distinct, unsorted on purpose: reversed pairs */
        if (tn_u() < (48.0 - nb) / (V - i)) bid[nb] = i, bv[nb] = (float)(tn_u() * 12 - 6), nb++;
    for (int i = 0; i + 1 < nb; i += 2) {
        int32_t t = bid[i];
        bid[i] = bid[i + 1], bid[i + 1] = t;
    }
    bv[0] = 100.0f, bv[1] = -100.0f, bv[2] = 0.0f;
    const tn_bias B = {.ids = bid, .v = bv, .n = nb};
    /* (1) semantics, no penalties */
    const float temps[] = {0.0f, 0.8f, 1.0f};
    int same = 0, total = 0;
    for (int ti = 0; ti < 3; ti++) {
        ts_sampler_params p;
        ts_sampler_params_default(&p);
        p.temperature = temps[ti], p.top_k = ti == 1 ? 40 : 0, p.top_p = ti == 2 ? 0.9f : 1.0f, p.seed = 5 + ti;
        ts_sampler *plain = NULL, *biased = NULL;
        ts_error err = {0};
        CHECK(!ts_sampler_new(V, &p, &plain, &err));
        p.bias_ids = bid, p.bias = bv, p.n_bias = nb;
        CHECK_MSG(!ts_sampler_new(V, &p, &biased, &err), "%s", err.msg);
        for (int t = 0; t < steps; t++) {
            tn_row(x, V, t % 3);
            memcpy(y, x, sizeof(float) * V);
            for (int i = 0; i < nb; i++) y[bid[i]] += bv[i];
            int32_t a = -1, b = -2;
            CHECK(!ts_sampler_sample(biased, x, &a, &err) && !ts_sampler_sample(plain, y, &b, &err));
            same += a == b, total++;
            CHECK_MSG(a != bid[1], "temperature %g step %d: the id biased -100 was drawn", (double)temps[ti], t);
            if (temps[ti] == 0.0f && isfinite(x[bid[0]])) /* (a NaN or -inf logit stays out, biased or not) */
                CHECK_MSG(a == bid[0], "greedy step %d: %d, not the id biased +100 (%d)", t, a, bid[0]);
        }
        ts_sampler_free(plain), ts_sampler_free(biased);
    }
    CHECK_MSG(same == total, "%d of %d steps drew another token than the row with the biases added", total - same, total);
    /* (1b) with penalties: the distribution is softmax(penalised + bias), in
     * double here, over a window that holds biased ids and others */
    {
        ts_sampler_params p;
        ts_sampler_params_default(&p);
        p.repetition_penalty = 1.2f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.3f, p.penalty_last_n = 16;
        p.bias_ids = bid + 3, p.bias = bv + 3, p.n_bias = nb - 3; /* the moderate ones: every id keeps some mass */
        ts_sampler *sm = NULL;
        ts_error err = {0};
        CHECK(!ts_sampler_new(V, &p, &sm, &err));
        int cnt[5000] = {0};
        for (int t = 0; t < 16; t++) { /* a biased id in every other slot, some twice */
            int32_t id = t % 2 ? bid[3 + (t % 6)] : (int32_t)(tn_u() * V);
            ts_sampler_accept(sm, id);
            cnt[id]++;
        }
        tn_row(x, V, 0);
        float *pr = malloc(sizeof(float) * V);
        double *ref = malloc(sizeof(double) * V), z = 0, worst = 0;
        CHECK(!ts_sampler_probs(sm, x, pr, &err));
        for (int i = 0; i < V; i++) ref[i] = x[i];
        for (int i = 0; i < V; i++)
            if (cnt[i]) ref[i] = (ref[i] > 0 ? ref[i] / 1.2 : ref[i] * 1.2) - 0.5 - 0.3 * cnt[i];
        for (int i = 3; i < nb; i++) ref[bid[i]] += bv[i];
        double m = -INFINITY;
        for (int i = 0; i < V; i++) m = ref[i] > m ? ref[i] : m;
        for (int i = 0; i < V; i++) z += exp(ref[i] - m);
        for (int i = 0; i < V; i++) worst = fmax(worst, fabs(pr[i] - exp(ref[i] - m) / z));
        CHECK_MSG(worst < 1e-7, "penalised + biased probabilities off the reference by %.3g", worst);
        free(pr), free(ref);
        ts_sampler_free(sm);
    }
    /* (2) candidates against the row, penalties on */
    ts_backend *be;
    ts_stream *st;
    CHECK(!tn_open_cpu(&be, &st));
    const tn_cfg cfgs[] = {
        {0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 1},    /* greedy, the bias alone */
        {0.0f, 1.0f, 0.0f, 1.0f, 0.4f, 0.3f, 0, 1},    /* greedy, presence / frequency on biased ids too */
        {0.7f, 0.95f, 0.0f, 1.0f, 0.3f, 0.1f, 20, 1},
        {0.7f, 0.95f, 0.0f, 1.3f, 0.3f, 0.1f, 20, 0},  /* repetition penalty + biased ids outside the window: the row */
        {1.0f, 1.0f, 0.1f, 1.0f, 0.2f, 0.0f, 0, -1},
    };
    int bad = 0, wrong_path = 0;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++)
        for (int kind = 0; kind < 3; kind++) {
            int dec = 0;
            bad += tn_run_b(be, st, V, kind, &cfgs[ci], &B, 300 + ci * 5 + kind, steps, &dec);
            if ((cfgs[ci].expect == 1 && dec != steps) || (cfgs[ci].expect == 0 && dec != 0))
                if (wrong_path++ < 3)
                    fprintf(stderr, "  config %zu kind %d: %d of %d steps decided by the candidates\n", ci, kind, dec,
                            steps);
        }
    be->ops->stream_free(st);
    ts_backend_free(be);
    CHECK_MSG(bad == 0, "%d biased tokens differ between the candidates and the full row", bad);
    CHECK_MSG(wrong_path == 0, "%d runs took another path than the rule says", wrong_path);
    /* (3) bad lists are refused with the id named */
    ts_sampler_params p;
    ts_sampler_params_default(&p);
    ts_sampler *sm = NULL;
    ts_error err = {0};
    int32_t ids[2] = {7, V};
    float vals[2] = {1.0f, 2.0f};
    p.bias_ids = ids, p.bias = vals, p.n_bias = 2;
    CHECK(ts_sampler_new(V, &p, &sm, &err) == TS_E_ARG && strstr(err.msg, "5000") && !sm);
    ids[1] = 7;
    CHECK(ts_sampler_new(V, &p, &sm, &err) == TS_E_ARG && strstr(err.msg, "twice") && !sm);
    ids[1] = 8, vals[1] = NAN;
    CHECK(ts_sampler_new(V, &p, &sm, &err) == TS_E_ARG && strstr(err.msg, "finite") && !sm);
    free(x), free(y);
}

/* The ban list (a constraint's phase before its start id: the stop ids at
 * -inf through topn's penalty list): a banned id is never drawn, the
 * candidates give the row's tokens and decide every greedy / top-k step
 * (with penalties and a bias on some of the same ids too), and more than
 * TS_SAMPLER_BAN_MAX ids leave the step to the row. */
TS_TEST(sample, ban_list) {
    const int V = 3000, steps = 60;
    ts_backend *be;
    ts_stream *st;
    CHECK(!tn_open_cpu(&be, &st));
    int32_t ban[TS_SAMPLER_BAN_MAX + 1], bid[8];
    float bv[8];
    for (int i = 0; i <= TS_SAMPLER_BAN_MAX; i++) ban[i] = (int32_t)((i * 7919 + 11) % V);
    for (int i = 0; i < 8; i++) bid[i] = ban[2 * i], bv[i] = 3.0f; /* biased and banned: the ban wins */
    const tn_cfg cfgs[] = {
        {0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 1},
        {0.8f, 1.0f, 0.0f, 1.0f, 0.5f, 0.2f, 40, 1},
        {0.7f, 0.9f, 0.0f, 1.2f, 0.3f, 0.0f, 20, 1}, /* a repetition penalty: banned ids need no exemption */
    };
    int bad = 0, wrong = 0;
    for (int withbias = 0; withbias < 2; withbias++)
        for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++)
            for (int kind = 1; kind < 3; kind++) {
                tn_bias b = {.ban = ban, .n_ban = 16};
                if (withbias) b.ids = bid, b.v = bv, b.n = 8;
                int dec = 0;
                if (withbias && cfgs[ci].rep != 1.0f) b.n = 0; /* (a bias off the window under rep: the row, tested above) */
                bad += tn_run_b(be, st, V, kind, &cfgs[ci], &b, 700 + ci * 3 + kind, steps, &dec);
                wrong += dec != steps;
            }
    /* a banned id is never drawn, even the row's certain winner */
    ts_sampler_params p;
    ts_sampler_params_default(&p);
    p.temperature = 0.0f;
    ts_sampler *sm = NULL;
    ts_error err = {0};
    CHECK(!ts_sampler_new(V, &p, &sm, &err));
    float *x = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) x[i] = 0.0f;
    x[ban[3]] = 50.0f, x[ban[5]] = 40.0f, x[17] = 1.0f;
    ts_sampler_set_ban(sm, ban, 16);
    int32_t id = -1;
    CHECK(!ts_sampler_sample(sm, x, &id, &err));
    CHECK_MSG(id == 17, "greedy with the two best ids banned drew %d", id);
    /* the candidate path on the same row: decided, the same id */
    {
        float vals[TS_TOPN_MAX];
        int32_t ids[TS_TOPN_MAX], nv;
        double z;
        ts_topn_args ta;
        CHECK(ts_sampler_topn_args(sm, &ta) == 0);
        ta.vals = vals, ta.ids = ids, ta.n_valid = &nv, ta.sum_exp = &z;
        be->ops->topn(st, tv_f32(x, 1, V), V, &ta);
        int dec = 0;
        int32_t cid = -1;
        CHECK(!ts_sampler_sample_topn(sm, &ta, &cid, &dec, &err));
        CHECK_MSG(dec && cid == 17, "the candidates with the two best ids banned: decided %d, id %d", dec, cid);
    }
    /* too many to list: the row decides (candidates none), the same token */
    ts_topn_args a;
    ts_sampler_set_ban(sm, ban, TS_SAMPLER_BAN_MAX + 1);
    CHECK(ts_sampler_topn_args(sm, &a) == 1);
    ts_sampler_set_ban(sm, ban, 16);
    CHECK(ts_sampler_topn_args(sm, &a) == 0 && a.n_pen == 16);
    ts_sampler_set_ban(sm, NULL, 0);
    CHECK(ts_sampler_topn_args(sm, &a) == 0 && a.n_pen == 0);
    ts_sampler_free(sm);
    free(x);
    be->ops->stream_free(st);
    ts_backend_free(be);
    CHECK_MSG(bad == 0, "%d tokens differ between the candidates and the row under a ban", bad);
    CHECK_MSG(wrong == 0, "%d runs were not decided by the candidates at every step", wrong);
}
