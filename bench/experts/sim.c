/* sim.c: trace-driven simulation of the expert cache's eviction policies.
 *
 *   sim TRACE [--rows R] [--fractions 0.1,0.25,0.5] [--halflife H,...]
 *   sim --zipf [--layers 40 --experts 256 --topk 8 --tokens 4000 --skew 1.0
 *               --reuse 0.3 --drift 1000 --seed 1] [...]
 *
 * Replays routing (layer, token, expert ids) through the real cache code
 * (src/model/experts.c in dry mode: the same table, pins and heap, no
 * reads), one ensure per (layer, block of R tokens), layers in order, so a
 * block is what a verify block or prompt chunk would request at once. For
 * each cache size (a fraction of all n_layers * E experts) it prints the hit
 * rate of LRU, of LFRU (decayed frequency) at each halflife, and of Belady's
 * MIN (evict the expert used farthest in the future, an offline bound no
 * online policy reaches), and the spread of LFRU's per-layer hit rates.
 *
 * --zipf: a synthetic trace. Each layer ranks its experts in a random order
 * with popularity ~ 1/rank^skew; each of a token's top-k picks repeats one of
 * the previous token's experts of that layer with probability `reuse`, else
 * draws from the popularity; every `drift` tokens 10% of each layer's ranks
 * are shuffled (a topic change). The parameters are invented, not measured:
 * they show how the policies react to skew and locality, not what a trained
 * model does. Traces of random-weight models (trace_model) route almost
 * uniformly and say even less about a policy.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/experts.h"

typedef struct trace {
    int L, E, K, T;
    int32_t *ids; /* [T][L][K] */
} trace;

static uint64_t g_rng = 1;
static double urand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static int read_trace(const char *path, trace *tr) {
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); return -1; }
    char line[4096];
    if (!fgets(line, sizeof line, f) || sscanf(line, "# moe-trace layers %d experts %d topk %d tokens %d", &tr->L, &tr->E, &tr->K, &tr->T) != 4) {
        fprintf(stderr, "%s: not a moe-trace file\n", path);
        fclose(f);
        return -1;
    }
    tr->ids = malloc(sizeof(int32_t) * (size_t)tr->T * tr->L * tr->K);
    int t, l, n = 0;
    while (fscanf(f, "%d %d", &t, &l) == 2) {
        if (t < 0 || t >= tr->T || l < 0 || l >= tr->L) { fprintf(stderr, "%s: bad line %d\n", path, n + 2); fclose(f); return -1; }
        for (int k = 0; k < tr->K; k++)
            if (fscanf(f, "%d", &tr->ids[((size_t)t * tr->L + l) * tr->K + k]) != 1) { fprintf(stderr, "%s: short line\n", path); fclose(f); return -1; }
        n++;
    }
    fclose(f);
    if (n != tr->T * tr->L) { fprintf(stderr, "%s: %d lines, expected %d\n", path, n, tr->T * tr->L); return -1; }
    return 0;
}

static void zipf_trace(trace *tr, double skew, double reuse, int drift) {
    int L = tr->L, E = tr->E, K = tr->K;
    tr->ids = malloc(sizeof(int32_t) * (size_t)tr->T * L * K);
    int *perm = malloc(sizeof(int) * L * E);
    double *cdf = malloc(sizeof(double) * E);
    double z = 0;
    for (int r = 0; r < E; r++) { z += pow(r + 1, -skew); cdf[r] = z; }
    for (int r = 0; r < E; r++) cdf[r] /= z;
    for (int l = 0; l < L; l++) {
        int *p = perm + l * E;
        for (int e = 0; e < E; e++) p[e] = e;
        for (int e = E - 1; e > 0; e--) { int j = (int)(urand() * (e + 1)); int x = p[e]; p[e] = p[j]; p[j] = x; }
    }
    for (int t = 0; t < tr->T; t++) {
        if (drift > 0 && t > 0 && t % drift == 0)
            for (int l = 0; l < L; l++)
                for (int s = 0; s < E / 10; s++) {
                    int *p = perm + l * E, a = (int)(urand() * E), b = (int)(urand() * E), x = p[a];
                    p[a] = p[b]; p[b] = x;
                }
        for (int l = 0; l < L; l++) {
            int32_t *cur = tr->ids + ((size_t)t * L + l) * K;
            const int32_t *prev = t ? tr->ids + ((size_t)(t - 1) * L + l) * K : NULL;
            for (int k = 0; k < K; k++) {
                int e;
                for (;;) {
                    if (prev && urand() < reuse) e = prev[(int)(urand() * K)];
                    else {
                        double u = urand();
                        int lo = 0, hi = E - 1;
                        while (lo < hi) { int mid = (lo + hi) / 2; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
                        e = perm[l * E + lo];
                    }
                    int dup = 0;
                    for (int q = 0; q < k; q++) dup |= cur[q] == e;
                    if (!dup) break;
                }
                cur[k] = e;
            }
        }
    }
    free(perm);
    free(cdf);
}

/* ---- the policies under test: the real cache, dry ---- */

static double run_cache(const trace *tr, int rows, ts_xc_policy pol, double halflife, int slots, double *lay_min, double *lay_max) {
    ts_expert_map *m = NULL;
    ts_error err = {0};
    if (ts_expert_map_synthetic(tr->L, tr->E, tr->K, 4096, &m, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    ts_xc_params p;
    ts_xc_params_default(&p);
    p.policy = pol;
    p.halflife = halflife;
    p.dry = 1;
    p.cache_bytes = (uint64_t)slots * ts_xc_slot_stride(m);
    ts_xc *c = NULL;
    if (ts_xc_open(m, &p, &c, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    int32_t *buf = malloc(sizeof(int32_t) * rows * tr->K);
    for (int t0 = 0; t0 < tr->T; t0 += rows) {
        int r = tr->T - t0 < rows ? tr->T - t0 : rows;
        for (int l = 0; l < tr->L; l++) {
            for (int i = 0; i < r; i++) memcpy(buf + i * tr->K, tr->ids + ((size_t)(t0 + i) * tr->L + l) * tr->K, sizeof(int32_t) * tr->K);
            if (ts_xc_ensure(c, l, buf, r * tr->K, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
            ts_xc_unpin(c, l);
        }
    }
    const ts_xc_stats *s = ts_xc_get_stats(c);
    double hr = (double)s->hits / (double)(s->hits + s->misses);
    if (lay_min) {
        *lay_min = 1, *lay_max = 0;
        for (int l = 0; l < tr->L; l++) {
            double h = (double)s->layer[l].hits / (double)(s->layer[l].hits + s->layer[l].misses);
            *lay_min = fmin(*lay_min, h);
            *lay_max = fmax(*lay_max, h);
        }
    }
    free(buf);
    ts_xc_close(c);
    ts_expert_map_free(m);
    return hr;
}

/* ---- Belady's MIN over the same ensures (distinct experts per ensure) ---- */

typedef struct { int64_t *key; int32_t *heap, *pos; int n; } maxheap;
static void mh_swap(maxheap *h, int a, int b) {
    int32_t x = h->heap[a], y = h->heap[b];
    h->heap[a] = y; h->heap[b] = x; h->pos[y] = a; h->pos[x] = b;
}
static void mh_fix(maxheap *h, int i) {
    while (i > 0 && h->key[h->heap[(i - 1) / 2]] < h->key[h->heap[i]]) { mh_swap(h, i, (i - 1) / 2); i = (i - 1) / 2; }
    for (;;) {
        int l = 2 * i + 1, r = l + 1, b = i;
        if (l < h->n && h->key[h->heap[l]] > h->key[h->heap[b]]) b = l;
        if (r < h->n && h->key[h->heap[r]] > h->key[h->heap[b]]) b = r;
        if (b == i) return;
        mh_swap(h, i, b);
        i = b;
    }
}

static double run_belady(const trace *tr, int rows, int slots) {
    int L = tr->L, E = tr->E, K = tr->K;
    size_t NX = (size_t)L * E;
    int nblk = (tr->T + rows - 1) / rows;
    int64_t n_ens = (int64_t)nblk * L;
    /* distinct experts per ensure, then each access's next use (ensure index) */
    int32_t *acc = malloc(sizeof(int32_t) * (size_t)n_ens * rows * K);
    int64_t *start = malloc(sizeof(int64_t) * (n_ens + 1));
    int64_t na = 0;
    char *seen = calloc(E, 1);
    for (int b = 0; b < nblk; b++)
        for (int l = 0; l < L; l++) {
            int64_t en = (int64_t)b * L + l;
            start[en] = na;
            for (int t = b * rows; t < (b + 1) * rows && t < tr->T; t++)
                for (int k = 0; k < K; k++) {
                    int e = tr->ids[((size_t)t * L + l) * K + k];
                    if (!seen[e]) { seen[e] = 1; acc[na++] = (int32_t)(l * E + e); }
                }
            for (int64_t q = start[en]; q < na; q++) seen[acc[q] % E] = 0;
        }
    start[n_ens] = na;
    int64_t *next = malloc(sizeof(int64_t) * na), *last = malloc(sizeof(int64_t) * NX);
    for (size_t i = 0; i < NX; i++) last[i] = INT64_MAX;
    for (int64_t en = n_ens - 1; en >= 0; en--)
        for (int64_t q = start[en]; q < start[en + 1]; q++) { next[q] = last[acc[q]]; last[acc[q]] = en; }
    maxheap h = {calloc(NX, sizeof(int64_t)), malloc(sizeof(int32_t) * NX), malloc(sizeof(int32_t) * NX), 0};
    char *res = calloc(NX, 1);
    int n_res = 0;
    uint64_t hits = 0, tot = 0;
    for (size_t i = 0; i < NX; i++) h.pos[i] = -1;
    int32_t *pinned = malloc(sizeof(int32_t) * rows * K);
    for (int64_t en = 0; en < n_ens; en++) {
        int np = 0;
        /* hits first: take them out of the heap (pinned) with their new next use */
        for (int64_t q = start[en]; q < start[en + 1]; q++) {
            int x = acc[q];
            tot++;
            if (!res[x]) continue;
            hits++;
            int i = h.pos[x], lastp = --h.n;
            if (i != lastp) { mh_swap(&h, i, lastp); h.pos[x] = -1; mh_fix(&h, i); }
            h.pos[x] = -1;
            h.key[x] = next[q];
            pinned[np++] = x;
        }
        for (int64_t q = start[en]; q < start[en + 1]; q++) {
            int x = acc[q];
            if (res[x]) continue;
            if (n_res == slots) {
                int v = h.heap[0];
                mh_swap(&h, 0, --h.n);
                h.pos[v] = -1;
                mh_fix(&h, 0);
                res[v] = 0;
                n_res--;
            }
            res[x] = 1;
            n_res++;
            h.key[x] = next[q];
            pinned[np++] = x;
        }
        for (int i = 0; i < np; i++) {
            int x = pinned[i];
            h.heap[h.n] = x;
            h.pos[x] = h.n++;
            mh_fix(&h, h.n - 1);
        }
    }
    free(acc); free(start); free(seen); free(next); free(last); free(h.key); free(h.heap); free(h.pos); free(res); free(pinned);
    return (double)hits / (double)tot;
}

int main(int argc, char **argv) {
    trace tr = {40, 256, 8, 4000, NULL};
    const char *path = NULL, *fr = "0.1,0.25,0.5", *hl = "8,32,128";
    int rows = 1, zipf = 0, drift = 1000;
    double skew = 1.0, reuse = 0.3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--zipf")) { zipf = 1; continue; }
        if (a[0] != '-') { path = a; continue; }
        if (!v) { fprintf(stderr, "%s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "--rows")) rows = atoi(v);
        else if (!strcmp(a, "--fractions")) fr = v;
        else if (!strcmp(a, "--halflife")) hl = v;
        else if (!strcmp(a, "--layers")) tr.L = atoi(v);
        else if (!strcmp(a, "--experts")) tr.E = atoi(v);
        else if (!strcmp(a, "--topk")) tr.K = atoi(v);
        else if (!strcmp(a, "--tokens")) tr.T = atoi(v);
        else if (!strcmp(a, "--skew")) skew = atof(v);
        else if (!strcmp(a, "--reuse")) reuse = atof(v);
        else if (!strcmp(a, "--drift")) drift = atoi(v);
        else if (!strcmp(a, "--seed")) g_rng = strtoull(v, NULL, 10) | 1;
        else { fprintf(stderr, "unknown option %s\n", a); return 2; }
    }
    if (zipf) zipf_trace(&tr, skew, reuse, drift);
    else if (!path || read_trace(path, &tr)) { fprintf(stderr, "usage: sim TRACE | --zipf [options]\n"); return 2; }
    if (rows < 1) rows = 1;
    double hls[8];
    int nh = 0;
    for (const char *p = hl; *p && nh < 8;) { hls[nh++] = atof(p); p = strchr(p, ','); if (!p) break; p++; }
    if (zipf)
        printf("trace: zipf, %d layers x %d experts, top-%d, %d tokens, skew %.2f, reuse %.2f, drift %d\n", tr.L, tr.E, tr.K, tr.T, skew, reuse, drift);
    else
        printf("trace: %s, %d layers x %d experts, top-%d, %d tokens\n", path, tr.L, tr.E, tr.K, tr.T);
    printf("rows per ensure: %d; hit rate = distinct experts found resident / distinct experts requested\n\n", rows);
    printf("| cache | slots | LRU |");
    for (int h = 0; h < nh; h++) printf(" LFRU h=%g |", hls[h]);
    printf(" LFRU h=%g per layer | Belady MIN |\n|---|---|---|", hls[nh / 2]);
    for (int h = 0; h < nh; h++) printf("---|");
    printf("---|---|\n");
    for (const char *p = fr; *p;) {
        double f = atof(p);
        int slots = (int)(f * tr.L * tr.E + 0.5);
        int need = rows * tr.K < tr.E ? rows * tr.K : tr.E;
        if (slots < need) slots = need;
        printf("| %.0f%% | %d | %.1f%% |", 100 * f, slots, 100 * run_cache(&tr, rows, TS_XC_LRU, 1, slots, NULL, NULL));
        double lmin = 0, lmax = 0;
        for (int h = 0; h < nh; h++)
            printf(" %.1f%% |", 100 * run_cache(&tr, rows, TS_XC_LFRU, hls[h], slots, h == nh / 2 ? &lmin : NULL, h == nh / 2 ? &lmax : NULL));
        printf(" %.0f-%.0f%% | %.1f%% |\n", 100 * lmin, 100 * lmax, 100 * run_belady(&tr, rows, slots));
        fflush(stdout);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    free(tr.ids);
    return 0;
}
