/* sample.c: turning logits into the next token id.
 *
 * Owns: penalties over recent ids, the logit bias, greedy, temperature, top-k, top-p, min-p,
 * the seeded RNG, the transformed distribution (ts_sampler_probs) that
 * speculative sampling needs, and sampling from a backend's candidates
 * (ts_sampler_sample_topn, gen/sample.h: the same token as the full row,
 * decided only where the candidates decide it exactly). The order of the transforms is documented in
 * include/turbospark.h (HF transformers' order; penalties as llama.cpp
 * defines them: repetition divides positive and multiplies negative logits,
 * presence and frequency subtract).
 * Does not own: logits (the session's), stop conditions, speculative
 * acceptance (spec.c uses ts_sampler_probs/draw/uniform).
 *
 * Invariants:
 *  - Nothing is allocated after ts_sampler_new: every buffer is sized by the
 *    vocabulary there, and sorting is our own in-place quicksort (glibc's
 *    qsort may call malloc).
 *  - Determinism: candidates are totally ordered by (value desc, id asc), so
 *    every selection and sort has one answer whatever the algorithm does
 *    internally, and draws walk candidates in a defined order. Same seed,
 *    same logits, same accepted ids -> same output, on every run.
 *  - count[id] is the number of occurrences of id in the penalty window;
 *    distinct[0..n_distinct) lists exactly the ids with count > 0, and
 *    dpos[id] is the index of id in that list.
 *
 * References: llama.cpp src/llama-sampling.cpp (penalties),
 * transformers generation/logits_process.py (TopK, TopP, MinP warpers),
 * Blackman & Vigna, "Scrambled linear pseudorandom number generators"
 * (xoshiro256**, splitmix64 seeding).
 */
#include <math.h>

#include "gen/sample.h"
#include "ts_int.h"

typedef struct {
    float v;      /* scaled logit, then weight exp(v - max) */
    int32_t id;
} cand;

struct ts_sampler {
    int n_vocab;
    ts_sampler_params p;
    uint64_t rng[4];

    float *work;          /* [n_vocab] penalized logits */
    cand *cand;           /* [n_vocab] */
    int n_cand;
    double z;             /* sum of cand weights */

    int32_t *count;       /* [n_vocab] */
    int32_t *dpos;        /* [n_vocab] */
    int32_t *distinct;    /* [n_vocab] */
    int n_distinct;
    int32_t *ring;        /* [penalty_last_n] */
    int ring_n, ring_pos;

    int32_t *pen_ids;     /* [pen_cap] the penalty list of topn, ascending */
    float *pen_sub;       /* [pen_cap] */
    int pen_cap;

    float *bias;          /* [n_vocab] the logit bias (0 elsewhere); NULL without one */
    int32_t *bias_ids;    /* [n_bias] the biased ids, ascending */
    int n_bias;

    const uint64_t *mask; /* [n_vocab bits] allowed ids (borrowed); NULL: all */
    const int32_t *ban;   /* [n_ban] ids at -inf (borrowed; ts_sampler_set_ban) */
    int n_ban;
};

/* ---- RNG: xoshiro256**, seeded through splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

double ts_sampler_uniform(ts_sampler *s) { return (double)(rng_next(s->rng) >> 11) * 0x1.0p-53; }

/* ---- lifecycle ---- */

void ts_sampler_params_default(ts_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->penalty_last_n = 64;
}

void ts_sampler_reset(ts_sampler *s) {
    if (!s) return;
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    for (int i = 0; i < s->n_distinct; i++) s->count[s->distinct[i]] = 0;
    s->n_distinct = 0;
    s->ring_n = s->ring_pos = 0;
}

void ts_sampler_free(ts_sampler *s) {
    if (!s) return;
    ts_free(s->work);
    ts_free(s->cand);
    ts_free(s->count);
    ts_free(s->dpos);
    ts_free(s->distinct);
    ts_free(s->ring);
    ts_free(s->pen_ids);
    ts_free(s->pen_sub);
    ts_free(s->bias);
    ts_free(s->bias_ids);
    ts_free(s);
}

int ts_sampler_new(int n_vocab, const ts_sampler_params *pp, ts_sampler **out, ts_error *err) {
    *out = NULL;
    ts_sampler_params p;
    if (pp) p = *pp;
    else ts_sampler_params_default(&p);
    if (n_vocab <= 0) return ts_fail(err, TS_E_ARG, "sampler: vocabulary size %d must be positive", n_vocab);
    if (isnan(p.temperature) || isinf(p.temperature))
        return ts_fail(err, TS_E_ARG, "sampler: temperature %g is not a finite number", (double)p.temperature);
    if (p.top_k < 0) return ts_fail(err, TS_E_ARG, "sampler: top_k %d must be >= 0", p.top_k);
    if (!(p.top_p > 0.0f)) return ts_fail(err, TS_E_ARG, "sampler: top_p %g must be in (0, 1]", (double)p.top_p);
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
        return ts_fail(err, TS_E_ARG, "sampler: min_p %g must be in [0, 1]", (double)p.min_p);
    if (!(p.repetition_penalty > 0.0f) || isinf(p.repetition_penalty))
        return ts_fail(err, TS_E_ARG, "sampler: repetition_penalty %g must be > 0", (double)p.repetition_penalty);
    if (isnan(p.presence_penalty) || isnan(p.frequency_penalty) || isinf(p.presence_penalty) ||
        isinf(p.frequency_penalty))
        return ts_fail(err, TS_E_ARG, "sampler: presence/frequency penalties must be finite");
    if (p.penalty_last_n < -1)
        return ts_fail(err, TS_E_ARG, "sampler: penalty_last_n %d must be >= -1 (-1 = whole sequence)",
                       p.penalty_last_n);
    if (p.n_bias < 0 || (p.n_bias && (!p.bias_ids || !p.bias)))
        return ts_fail(err, TS_E_ARG, "sampler: logit bias of %d entries without its ids or values", p.n_bias);
    for (int i = 0; i < p.n_bias; i++) {
        if (p.bias_ids[i] < 0 || p.bias_ids[i] >= n_vocab)
            return ts_fail(err, TS_E_ARG, "sampler: logit bias for token id %d, outside the vocabulary [0, %d)",
                           p.bias_ids[i], n_vocab);
        if (!isfinite(p.bias[i]))
            return ts_fail(err, TS_E_ARG, "sampler: logit bias %g for token id %d is not a finite number",
                           (double)p.bias[i], p.bias_ids[i]);
    }
    ts_sampler *s = ts_alloc(sizeof *s, TS_MEM_SCRATCH);
    if (!s) return ts_fail(err, TS_E_NOMEM, "sampler: out of memory");
    size_t v = (size_t)n_vocab;
    s->n_vocab = n_vocab;
    s->p = p;
    s->work = ts_alloc(sizeof(float) * v, TS_MEM_SCRATCH);
    s->cand = ts_alloc(sizeof(cand) * v, TS_MEM_SCRATCH);
    s->count = ts_alloc(sizeof(int32_t) * v, TS_MEM_SCRATCH);
    s->dpos = ts_alloc(sizeof(int32_t) * v, TS_MEM_SCRATCH);
    s->distinct = ts_alloc(sizeof(int32_t) * v, TS_MEM_SCRATCH);
    if (p.penalty_last_n > 0) s->ring = ts_alloc(sizeof(int32_t) * (size_t)p.penalty_last_n, TS_MEM_SCRATCH);
    /* the topn penalty list: at most as many ids as the window (or the
     * vocabulary) holds distinct ones, and no more than a backend takes */
    int cap = p.penalty_last_n > 0 && p.penalty_last_n < n_vocab ? p.penalty_last_n : n_vocab;
    cap = (int)TS_MIN((int64_t)cap + p.n_bias + TS_SAMPLER_BAN_MAX, (int64_t)n_vocab); /* the biased and banned ids */
    s->pen_cap = cap < TS_TOPN_PEN_MAX ? cap : TS_TOPN_PEN_MAX;
    s->pen_ids = ts_alloc(sizeof(int32_t) * (size_t)s->pen_cap, TS_MEM_SCRATCH);
    s->pen_sub = ts_alloc(sizeof(float) * (size_t)s->pen_cap, TS_MEM_SCRATCH);
    if (!s->work || !s->cand || !s->count || !s->dpos || !s->distinct || (p.penalty_last_n > 0 && !s->ring) ||
        !s->pen_ids || !s->pen_sub) {
        ts_sampler_free(s);
        return ts_fail(err, TS_E_NOMEM, "sampler: out of memory for a vocabulary of %d", n_vocab);
    }
    if (p.n_bias) {
        s->bias = ts_alloc(sizeof(float) * v, TS_MEM_SCRATCH);
        s->bias_ids = ts_alloc(sizeof(int32_t) * (size_t)p.n_bias, TS_MEM_SCRATCH);
        if (!s->bias || !s->bias_ids) {
            ts_sampler_free(s);
            return ts_fail(err, TS_E_NOMEM, "sampler: out of memory for a logit bias");
        }
        memset(s->bias, 0, sizeof(float) * v);
        /* ascending ids, each once: the bias array marks the ones seen */
        memset(s->count, 0, sizeof(int32_t) * v);
        for (int i = 0; i < p.n_bias; i++) {
            if (s->count[p.bias_ids[i]]++) {
                int dup = p.bias_ids[i];
                ts_sampler_free(s);
                return ts_fail(err, TS_E_ARG, "sampler: logit bias lists token id %d twice", dup);
            }
            s->bias[p.bias_ids[i]] = p.bias[i];
        }
        for (int id = 0; id < n_vocab; id++)
            if (s->count[id]) s->bias_ids[s->n_bias++] = id, s->count[id] = 0;
        s->p.bias_ids = NULL, s->p.bias = NULL; /* the caller's arrays are not kept */
    }
    ts_sampler_reset(s);
    *out = s;
    return 0;
}

/* ---- penalty window ---- */

static void count_add(ts_sampler *s, int32_t id) {
    if (s->count[id]++ == 0) {
        s->dpos[id] = s->n_distinct;
        s->distinct[s->n_distinct++] = id;
    }
}

static void count_sub(ts_sampler *s, int32_t id) {
    if (--s->count[id] == 0) {
        int32_t last = s->distinct[--s->n_distinct];
        s->distinct[s->dpos[id]] = last;
        s->dpos[last] = s->dpos[id];
    }
}

void ts_sampler_accept(ts_sampler *s, int32_t id) {
    if (!s || id < 0 || id >= s->n_vocab || s->p.penalty_last_n == 0) return;
    if (s->p.penalty_last_n < 0) {
        count_add(s, id);
        return;
    }
    if (s->ring_n == s->p.penalty_last_n) count_sub(s, s->ring[s->ring_pos]);
    else s->ring_n++;
    s->ring[s->ring_pos] = id;
    s->ring_pos = (s->ring_pos + 1) % s->p.penalty_last_n;
    count_add(s, id);
}

static int penalties_on(const ts_sampler *s) {
    return s->n_distinct &&
           (s->p.repetition_penalty != 1.0f || s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f);
}

/* What presence and frequency subtract from id's logit; one expression for
 * the row here and for the list a backend's topn applies (same bits). */
static float pen_sub_of(const ts_sampler *s, int32_t id) {
    return (float)s->count[id] * s->p.frequency_penalty + s->p.presence_penalty;
}

/* What is subtracted from id's logit after the repetition penalty, with the
 * bias folded in (windowed: id is in the penalty window and penalties are
 * on). Without a bias it is pen_sub_of itself (x - 0 = x), so a sampler
 * without one keeps its bits; a biased id outside the window gets
 * x - (-b), which is x + b exactly. The same expression fills topn's list. */
static float sub_of(const ts_sampler *s, int32_t id, int windowed) {
    const float b = s->bias ? s->bias[id] : 0.0f;
    return windowed ? pen_sub_of(s, id) - b : -b;
}

/* Whether prepare must adjust the row: penalties or a bias. */
static int adjust_on(const ts_sampler *s) { return penalties_on(s) || s->n_bias; }

static void apply_adjust(ts_sampler *s) {
    float r = s->p.repetition_penalty;
    const int pen = penalties_on(s);
    if (pen)
        for (int i = 0; i < s->n_distinct; i++) {
            int32_t id = s->distinct[i];
            float x = s->work[id];
            if (r != 1.0f) x = x > 0.0f ? x / r : x * r;
            x = x - sub_of(s, id, 1);
            s->work[id] = x;
        }
    for (int i = 0; i < s->n_bias; i++) {
        int32_t id = s->bias_ids[i];
        if (!(pen && s->count[id] > 0)) s->work[id] = s->work[id] - sub_of(s, id, 0);
    }
}

/* ---- ordering, selection, sorting (no allocation) ---- */

/* a before b: larger value first, then lower id */
static inline int before(const cand *a, const cand *b) { return a->v > b->v || (a->v == b->v && a->id < b->id); }

static inline void swap_c(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Partition c[lo..hi] (hi - lo > 2) around a median-of-three pivot;
 * returns the pivot's final index: c[lo..p) come before it, c(p..hi] after. */
static int partition(cand *c, int lo, int hi) {
    int mid = lo + (hi - lo) / 2;
    if (before(&c[mid], &c[lo])) swap_c(&c[mid], &c[lo]);
    if (before(&c[hi], &c[lo])) swap_c(&c[hi], &c[lo]);
    if (before(&c[hi], &c[mid])) swap_c(&c[hi], &c[mid]);
    /* c[lo], c[mid], c[hi] are in order; park the median at hi - 1 */
    int pi = hi - 1;
    swap_c(&c[mid], &c[pi]);
    cand pv = c[pi];
    int i = lo;
    for (int j = lo; j < pi; j++)
        if (before(&c[j], &pv)) swap_c(&c[i++], &c[j]);
    swap_c(&c[i], &c[pi]);
    return i;
}

static void insertion_sort(cand *c, int lo, int hi) {
    for (int i = lo + 1; i <= hi; i++) {
        cand x = c[i];
        int j = i - 1;
        while (j >= lo && before(&x, &c[j])) c[j + 1] = c[j], j--;
        c[j + 1] = x;
    }
}

/* Sort c[0..n) in `before` order: quicksort, recursing on the smaller side
 * (stack depth O(log n)). */
static void sort_cands(cand *c, int lo, int hi) {
    while (hi - lo > 16) {
        int p = partition(c, lo, hi);
        if (p - lo < hi - p) {
            sort_cands(c, lo, p - 1);
            lo = p + 1;
        } else {
            sort_cands(c, p + 1, hi);
            hi = p - 1;
        }
    }
    insertion_sort(c, lo, hi);
}

/* Rearrange c[0..n) so that c[0..k) are the k first in `before` order. */
static void select_top(cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (hi - lo > 16) {
        int p = partition(c, lo, hi);
        if (p == k || p == k - 1) return;
        if (p < k) lo = p + 1;
        else hi = p - 1;
    }
    insertion_sort(c, lo, hi);
}

/* Top-p without a full sort. Returns K, the length of the shortest prefix of
 * c[0..n) in `before` order whose mass reaches target (the first rank whose
 * mass-before is >= target), and leaves those K candidates in c[0..K) (in a
 * deterministic, not necessarily sorted, order). A quickselect on mass:
 * partition around a pivot; if the mass before the pivot already reaches the
 * target, K is at or before the pivot, otherwise after it. Expected O(n),
 * against O(n log n) for sorting a flat 150k-token tail. `.v` holds weights. */
static int select_mass(cand *c, int n, double target, int sorted) {
    int lo = 0, hi = n - 1;
    double before_lo = 0; /* mass of c[0..lo), all ranked before c[lo..hi] */
    if (!sorted) {
        while (hi - lo > 16) {
            int p = partition(c, lo, hi);
            double m = before_lo;
            for (int i = lo; i < p; i++) m += c[i].v;
            if (m >= target) {
                hi = p - 1; /* K <= p: the answer is in [lo, p] */
                if (hi < lo) return p;
                if (hi - lo <= 16) break;
            } else {
                before_lo = m + c[p].v;
                lo = p + 1;
                if (lo > hi) return lo > n ? n : lo;
            }
        }
        /* the answer lies in [lo, hi + 1]; sort the small range and scan */
        insertion_sort(c, lo, hi);
    }
    double acc = before_lo;
    for (int i = lo; i <= hi; i++) {
        if (acc >= target) return i > 0 ? i : 1;
        acc += c[i].v;
    }
    return hi + 1 < n ? hi + 1 : n;
}

/* ---- the pipeline ---- */

/* From the kept candidates' scaled logits c[0..n) (top-k already applied;
 * sorted: they are in `before` order) and the row's max m: weights, top-p,
 * min-p. Leaves weights in .v, the kept count in s->n_cand, their sum in
 * s->z. */
static void finish(ts_sampler *s, cand *c, int n, float m, int sorted) {
    double z = 0;
    for (int i = 0; i < n; i++) {
        c[i].v = expf(c[i].v - m);
        z += c[i].v;
    }
    if (s->p.top_p < 1.0f) n = select_mass(c, n, (double)s->p.top_p * z, sorted);
    if (s->p.min_p > 0.0f) {
        /* weights are relative to the max (which has weight 1) */
        float thr = s->p.min_p;
        int k = 0;
        for (int i = 0; i < n; i++)
            if (c[i].v >= thr) c[k++] = c[i];
        n = k; /* the max always survives: its weight is 1 >= min_p */
    }
    z = 0;
    for (int i = 0; i < n; i++) z += c[i].v;
    s->n_cand = n;
    s->z = z;
}

/* The valid entries c[0..n) of a row, in index order, scaled, and their
 * max m: top-k, then finish. */
static void prepare_cands(ts_sampler *s, cand *c, int n, float m) {
    int sorted = 0;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        select_top(c, n, s->p.top_k);
        n = s->p.top_k;
        sort_cands(c, 0, n - 1);
        sorted = 1;
    }
    finish(s, c, n, m, sorted);
}

void ts_sampler_set_mask(ts_sampler *s, const uint64_t *allowed) {
    if (s) s->mask = allowed;
}

void ts_sampler_set_ban(ts_sampler *s, const int32_t *ids, int n) {
    if (!s) return;
    s->ban = n > 0 ? ids : NULL;
    s->n_ban = n > 0 ? n : 0;
}

/* -inf for every id the mask forbids; whole words of allowed ids are
 * skipped (a string's mask is mostly ones, an object's mostly zeros). */
static void apply_mask(ts_sampler *s) {
    const int V = s->n_vocab;
    for (int w = 0; w * 64 < V; w++) {
        const uint64_t m = s->mask[w];
        if (m == ~(uint64_t)0) continue;
        const int hi = TS_MIN(64, V - w * 64);
        for (int b = 0; b < hi; b++)
            if (!((m >> b) & 1)) s->work[w * 64 + b] = -INFINITY;
    }
}

/* Leaves the kept candidates in s->cand[0..n_cand) with weights (not
 * normalised) in .v and their sum in s->z. */
static int prepare(ts_sampler *s, const float *logits, ts_error *err) {
    int V = s->n_vocab;
    const float *x = logits;
    if (adjust_on(s) || s->mask || s->n_ban) {
        memcpy(s->work, logits, sizeof(float) * (size_t)V);
        if (adjust_on(s)) apply_adjust(s);
        if (s->mask) apply_mask(s);
        for (int i = 0; i < s->n_ban; i++)
            if (s->ban[i] >= 0 && s->ban[i] < V) s->work[s->ban[i]] = -INFINITY;
        x = s->work;
    }
    if (s->p.temperature <= 0.0f || s->p.top_k == 1) {
        int best = -1;
        float bv = -INFINITY;
        for (int i = 0; i < V; i++)
            if (x[i] > bv) bv = x[i], best = i;
        if (best < 0) return ts_fail(err, TS_E_ARG, "sampler: every logit is -inf or NaN");
        s->cand[0] = (cand){1.0f, best};
        s->n_cand = 1;
        s->z = 1.0;
        return 0;
    }
    float inv_t = 1.0f / s->p.temperature;
    cand *c = s->cand;
    int n = 0;
    float m = -INFINITY;
    for (int i = 0; i < V; i++) {
        float v = x[i] * inv_t;
        if (!(v > -INFINITY)) continue; /* -inf and NaN are never drawn */
        c[n++] = (cand){v, i};
        if (v > m) m = v;
    }
    if (!n || isinf(m)) return ts_fail(err, TS_E_ARG, "sampler: no finite logit to sample from");
    prepare_cands(s, c, n, m);
    return 0;
}

/* The draw over what prepare (or the candidate path) kept: one uniform,
 * none when a single candidate is left. */
static int32_t draw_kept(ts_sampler *s) {
    if (s->n_cand == 1) return s->cand[0].id;
    double u = ts_sampler_uniform(s) * s->z, acc = 0;
    for (int i = 0; i < s->n_cand; i++) {
        acc += s->cand[i].v;
        if (u < acc) return s->cand[i].id;
    }
    return s->cand[s->n_cand - 1].id; /* u landed on the rounding slack */
}

int ts_sampler_sample(ts_sampler *s, const float *logits, int32_t *id, ts_error *err) {
    if (!s || !logits || !id) return ts_fail(err, TS_E_ARG, "sampler: NULL argument");
    int rc = prepare(s, logits, err);
    if (rc) return rc;
    *id = draw_kept(s);
    return 0;
}

int ts_sampler_probs(ts_sampler *s, const float *logits, float *probs, ts_error *err) {
    if (!s || !logits || !probs) return ts_fail(err, TS_E_ARG, "sampler: NULL argument");
    int rc = prepare(s, logits, err);
    if (rc) return rc;
    memset(probs, 0, sizeof(float) * (size_t)s->n_vocab);
    double inv = 1.0 / s->z;
    for (int i = 0; i < s->n_cand; i++) probs[s->cand[i].id] = (float)(s->cand[i].v * inv);
    return 0;
}

int32_t ts_sampler_draw(ts_sampler *s, const float *probs) {
    double z = 0;
    int32_t last = -1;
    for (int i = 0; i < s->n_vocab; i++)
        if (probs[i] > 0.0f) z += probs[i], last = i;
    if (last < 0) return -1;
    double u = ts_sampler_uniform(s) * z, acc = 0;
    for (int i = 0; i <= last; i++) {
        if (!(probs[i] > 0.0f)) continue;
        acc += probs[i];
        if (u < acc) return i;
    }
    return last;
}

/* ---- sampling from a backend's candidates (topn) ----
 *
 * The device reduces the row to its N best entries in `before` order (after
 * the penalties and the temperature, with the same float operations), the
 * count of valid entries and sum_exp; the host decides from those. When is
 * that the full-row sampler's token, bit for bit, for the same RNG state?
 * Exactly when the candidates hold every entry the full sampler keeps AND
 * every number the draw depends on (the kept weights, their order, their
 * sum) can be recomputed from them. That holds in these cases, and the code
 * takes no other:
 *  - greedy (temperature <= 0 or top_k 1): the first candidate is the row's
 *    first maximum; no RNG either way.
 *  - n_valid <= N: the candidates ARE the row's valid entries; put in index
 *    order they are the very array the full sampler builds, and the same
 *    code (prepare_cands) runs on it.
 *  - 1 < top_k <= N < n_valid: the full sampler's select_top + sort leave
 *    exactly candidates[0..top_k) in order; finish runs on them.
 *  - otherwise (top_k 0 or above N, n_valid > N), two cases:
 *    - top-p keeps the max alone, for certain: top_p * sum_exp * (1 + 1e-5)
 *      <= 1. The full sampler's z (over the whole row, or over its top_k,
 *      which is less) is within a relative 1e-6 of sum_exp (src/backend.h),
 *      so 1 (the max's weight) >= top_p * z: every prefix of its ranking,
 *      however the quickselect sums it, reaches the target at the first
 *      entry (adding weights >= 0 to 1 never rounds below 1). One kept
 *      entry, no draw: the first candidate. This is the confident step of a
 *      trained model under top-p, common enough to matter;
 *    - top-p is off and min-p drops the last candidate: every entry past it
 *      has a value <= its value, so (float subtraction and expf being
 *      monotone) a weight <= its weight < min_p, and is dropped too; the
 *      kept ones are then a prefix of the candidates, in rank order (top_k
 *      < n_valid: the full sampler sorted) or index order (it did not).
 * Not exact, so left to the row: any other top-p over a distribution longer
 * than the candidates. Its cut compares prefix masses against top_p * z,
 * which a margin test on sum_exp could settle, but without top-k the full
 * sampler then draws in the order its quickselect on mass left the kept
 * entries, which only the whole row determines. (A canonical draw order in
 * the full sampler, rank or id order, would make those steps exact too: a
 * change of the CPU's draws for top-p without top-k, so not done here.) */

static void sort_by_id(cand *c, int n) {
    for (int i = 1; i < n; i++) {
        cand x = c[i];
        int j = i - 1;
        while (j >= 0 && c[j].id > x.id) c[j + 1] = c[j], j--;
        c[j + 1] = x;
    }
}

int ts_sampler_topn_args(ts_sampler *s, ts_topn_args *a) {
    if (s->mask) return 1; /* the mask is applied to the row only */
    const int greedy = s->p.temperature <= 0.0f || s->p.top_k == 1;
    a->N = greedy ? 1 : s->p.top_k > 0 && s->p.top_k <= TS_TOPN_MAX ? s->p.top_k : TS_TOPN_MAX;
    a->scale = greedy ? 1.0f : 1.0f / s->p.temperature; /* prepare's inv_t, same expression */
    a->rep = 1.0f;
    a->n_pen = 0;
    a->pen_ids = s->pen_ids;
    a->pen_sub = s->pen_sub;
    if (!adjust_on(s) && !s->n_ban) return 0;
    if (s->n_ban > TS_SAMPLER_BAN_MAX) return 1;
    const int pen = penalties_on(s);
    const float rep = pen ? s->p.repetition_penalty : 1.0f;
    /* the list: the window's ids (penalties on) and the biased ones. topn
     * applies its repetition penalty to every listed id, so a biased id
     * outside the window under a repetition penalty cannot be listed: the
     * row then (a rare pairing of settings) */
    int n = pen ? s->n_distinct : 0, extra = 0;
    for (int i = 0; i < s->n_bias; i++)
        if (!(pen && s->count[s->bias_ids[i]] > 0)) extra++;
    if (extra && rep != 1.0f) return 1;
    if (n + extra + s->n_ban > s->pen_cap || s->n_vocab > (1 << 24)) return 1;
    /* ascending ids through the candidate sort (key -id: ids < 2^24 are
     * exact in a float), in the candidate scratch the step overwrites anyway */
    cand *c = s->cand;
    for (int i = 0; i < n; i++) c[i] = (cand){-(float)s->distinct[i], s->distinct[i]};
    for (int i = 0; i < s->n_bias; i++) {
        const int32_t id = s->bias_ids[i];
        if (!(pen && s->count[id] > 0)) c[n++] = (cand){-(float)id, id};
    }
    /* banned ids: subtracting +inf takes any value to -inf (or NaN from
     * +inf): never valid, as the row's -inf; listed once, over an entry of
     * the same id (value +1 marks them: ids sort by -id alone) */
    for (int i = 0; i < s->n_ban; i++)
        if (s->ban[i] >= 0 && s->ban[i] < s->n_vocab) c[n++] = (cand){-(float)s->ban[i], s->ban[i]};
    sort_cands(c, 0, n - 1);
    int m = 0;
    for (int i = 0; i < n; i++) {
        const int32_t id = c[i].id;
        if (m && s->pen_ids[m - 1] == id) continue; /* the same id twice: one entry, its sub decided below */
        s->pen_ids[m] = id;
        s->pen_sub[m] = sub_of(s, id, pen && s->count[id] > 0);
        for (int k = 0; k < s->n_ban; k++)
            if (s->ban[k] == id) s->pen_sub[m] = INFINITY;
        m++;
    }
    n = m;
    a->rep = rep;
    a->n_pen = n;
    return 0;
}

int ts_sampler_sample_topn(ts_sampler *s, const ts_topn_args *a, int32_t *id, int *decided, ts_error *err) {
    if (!s || !a || !id || !decided || !a->vals || !a->ids || !a->n_valid || !a->sum_exp)
        return ts_fail(err, TS_E_ARG, "sampler: NULL argument");
    *decided = 0;
    if (s->mask) return 0;
    const int N = a->N, nv = a->n_valid[0], nc = nv < N ? nv : N;
    if (nc < 1) return 0; /* nothing to draw: the full sampler names the error */
    if (s->p.temperature <= 0.0f || s->p.top_k == 1) {
        *id = a->ids[0];
        *decided = 1;
        return 0;
    }
    const float m = a->vals[0];
    if (isinf(m)) return 0; /* +inf: the full sampler refuses the row */
    cand *c = s->cand;
    for (int i = 0; i < nc; i++) c[i] = (cand){a->vals[i], a->ids[i]};
    const int top_k = s->p.top_k;
    if (nv <= N) {
        sort_by_id(c, nc);
        prepare_cands(s, c, nc, m);
    } else if (top_k > 0 && top_k <= nc) {
        finish(s, c, top_k, m, 1);
    } else if (s->p.top_p < 1.0f) {
        if (!((double)s->p.top_p * a->sum_exp[0] * (1.0 + 1e-5) <= 1.0)) return 0;
        c[0] = (cand){1.0f, a->ids[0]};
        s->n_cand = 1;
        s->z = 1.0;
    } else {
        const float thr = s->p.min_p;
        if (!(thr > 0.0f) || !(expf(c[nc - 1].v - m) < thr)) return 0;
        int k = 0;
        for (int i = 0; i < nc; i++) {
            float w = expf(c[i].v - m);
            if (w >= thr) c[k++] = (cand){w, c[i].id};
        }
        if (!(top_k > 0 && top_k < nv)) sort_by_id(c, k);
        double z = 0;
        for (int i = 0; i < k; i++) z += c[i].v;
        s->n_cand = k;
        s->z = z;
    }
    *id = draw_kept(s);
    *decided = 1;
    return 0;
}
