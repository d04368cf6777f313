/* ngram_draft.c: the n-gram (prompt lookup) drafter (drafter.h): drafts
 * copied from the context itself (vLLM's "ngram" speculative decoding,
 * llama.cpp's lookup decoding, transformers' prompt_lookup_num_tokens).
 *
 * Owns: the history of the generation's ids (gen params ngram_ctx, the
 * prompt, every emitted token), its n-gram index, and the choice of a
 * block's drafts. Does not own: verification, acceptance, rollback (spec.c).
 *
 * The rule: find the longest suffix of the history, between n_min and n_max
 * ids, that occurred earlier in it; propose the ids that followed its most
 * recent earlier occurrence, up to m, stopping at the history's end. None
 * found: no drafts (spec.c then runs a one-row step). Why longest first: a
 * longer match has more evidence that the context is being repeated, and
 * where it exists the shorter suffixes match too (at that same place or
 * later, with less evidence). Why the most recent: in text that edits or
 * repeats a passage, the nearest copy is the one being followed.
 *
 * Why an index: a scan of the history per block costs O(len * n_max) and a
 * long prompt makes every block pay it. Here each size n has a hash table
 * from an n-gram to the end of its last occurrence; appending an id
 * indexes the n-grams that end at the id before it (the last id's own
 * n-grams are the suffix being looked up: they must find an earlier
 * occurrence, never themselves). The tables store positions; the n-gram's
 * ids are read back from the history to compare, so a collision costs a
 * probe, never a false match. Open addressing with linear probing, at most
 * half full (slots >= 2 * cap), so probes stay short and always end.
 *
 * No model pass drafts, so this drafter works on every checkpoint (no MTP
 * head or DFlash drafter needed) and every backend; drafts are certain (a
 * point mass: spec.c's acceptance needs no dprobs rows from it). The
 * drafting vocabulary and the confidence floor (draft_vocab, draft_p_min)
 * have nothing to act on here.
 */
#include "gen/drafter.h"

/* ---- the index ---- */

static int32_t *slots_of(const ts_ngram_index *x, int n) {
    return x->tab + (size_t)(n - x->n_min) * ((size_t)x->mask + 1);
}

/* the n ids g[0..n) (a 64-bit multiply-xorshift per id; the size mixed in
 * so that tables never share a probe sequence by accident) */
static uint32_t gram_hash(const int32_t *g, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)g[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* The slot of the n-gram g (ids in the history or not): the one holding it,
 * or the empty one where it would go. */
static int32_t *find(const ts_ngram_index *x, int n, const int32_t *g) {
    int32_t *t = slots_of(x, n);
    for (uint32_t i = gram_hash(g, n) & x->mask;; i = (i + 1) & x->mask) {
        const int32_t v = t[i];
        if (!v || !memcmp(x->h + (v - 1) - (n - 1), g, sizeof(int32_t) * (size_t)n)) return &t[i];
    }
}

int ts_ngram_index_init(ts_ngram_index *x, int n_min, int n_max, int cap, ts_error *err) {
    memset(x, 0, sizeof *x);
    if (n_min < 1 || n_max < n_min || n_max > TS_NGRAM_MAX)
        return ts_fail(err, TS_E_ARG, "n-gram sizes %d..%d: use 1 <= min <= max <= %d", n_min, n_max, TS_NGRAM_MAX);
    if (cap < 1 || cap > (1 << 28)) return ts_fail(err, TS_E_ARG, "an n-gram history of %d ids", cap);
    uint32_t slots = 16;
    while (slots < 2u * (uint32_t)cap) slots *= 2;
    x->n_min = n_min;
    x->n_max = n_max;
    x->cap = cap;
    x->mask = slots - 1;
    x->h = ts_alloc(sizeof(int32_t) * (size_t)cap, TS_MEM_SPEC);
    x->tab = ts_alloc(sizeof(int32_t) * (size_t)slots * (size_t)(n_max - n_min + 1), TS_MEM_SPEC); /* zeroed: empty */
    if (!x->h || !x->tab) {
        ts_ngram_index_free(x);
        return ts_fail(err, TS_E_NOMEM, "out of memory for an n-gram index of %d ids", cap);
    }
    return 0;
}

void ts_ngram_index_free(ts_ngram_index *x) {
    ts_free(x->h);
    ts_free(x->tab);
    memset(x, 0, sizeof *x);
}

void ts_ngram_index_push(ts_ngram_index *x, const int32_t *ids, int k) {
    for (int j = 0; j < k && x->len < x->cap; j++) {
        x->h[x->len++] = ids[j];
        /* the id before the new one stops being the last: its n-grams become
         * earlier occurrences (the newest, so they replace older ones) */
        const int e = x->len - 2;
        for (int n = x->n_min; n <= x->n_max && n <= e + 1; n++) *find(x, n, x->h + e - n + 1) = e + 1;
    }
}

int ts_ngram_index_propose(const ts_ngram_index *x, int m, int32_t *out) {
    const int len = x->len;
    for (int n = TS_MIN(x->n_max, len - 1); n >= x->n_min; n--) {
        const int32_t v = *find(x, n, x->h + len - n);
        if (!v) continue;
        const int e = v - 1; /* the earlier occurrence ends at e < len - 1 */
        const int k = TS_MIN(m, len - 1 - e);
        memcpy(out, x->h + e + 1, sizeof(int32_t) * (size_t)k);
        return k;
    }
    return 0;
}

/* ---- the drafter ---- */

static int ng_prompt(ts_drafter *d, const int32_t *toks, int k) {
    ts_ngram_index_push(&((ts_ngram_drafter *)d)->ix, toks, k);
    return 0;
}

static void ng_start(ts_drafter *d, int32_t last) { ts_ngram_index_push(&((ts_ngram_drafter *)d)->ix, &last, 1); }

static int ng_propose(ts_drafter *d, int mm, int32_t *out) {
    return ts_ngram_index_propose(&((ts_ngram_drafter *)d)->ix, mm, out);
}

/* the emitted tokens of the block: out[0..keep) (out[keep-1] is the last
 * emitted one, not fed yet: it is the history's end, as start's was) */
static void ng_on_accept(ts_drafter *d, const int32_t *out, int keep, int pos_blk) {
    (void)pos_blk;
    ts_ngram_index_push(&((ts_ngram_drafter *)d)->ix, out, keep);
}

static const ts_drafter_ops ngram_ops = {"ngram", ng_prompt, ng_start, ng_propose, ng_on_accept};

int ts_ngram_drafter_init(ts_ngram_drafter *nd, ts_session *s, int n_min, int n_max, int M, int cap, ts_error *err) {
    memset(nd, 0, sizeof *nd);
    nd->base.ops = &ngram_ops;
    nd->base.s = s;
    nd->base.max_draft = M;
    nd->base.K = s->e->model.cfg.vocab; /* any id can be copied */
    nd->base.point_mass = 1;
    return ts_ngram_index_init(&nd->ix, n_min, n_max, cap, err);
}

void ts_ngram_drafter_free(ts_ngram_drafter *nd) { ts_ngram_index_free(&nd->ix); }
