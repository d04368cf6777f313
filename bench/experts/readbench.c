/* readbench.c: the expert cache's read path on this machine.
 *
 *   readbench INSTALL [tokens 64] [rows 1]
 *
 * INSTALL: a MoE install with per-expert ranges (e.g. a synth of
 * shape-35B-A3B-4layers.json). Before every run the install's shards are
 * dropped from the page cache (posix_fadvise DONTNEED, checked with
 * mincore-free fincore by run.sh), so "cold" reads come from the disk.
 *
 * 1. Reads in flight: uniform random routing (top-k distinct per token and
 *    layer, the main layers), a cache of 10% of the experts (almost every
 *    access misses), n_io = 1, 2, 4, 8, buffered and O_DIRECT: experts/s,
 *    GB/s over the time spent waiting, and per-ensure latency (mean, p50,
 *    p99 over ensures that read something).
 * 2. Cache sizes: a Zipf routing with temporal locality (as sim --zipf) at
 *    10%, 25%, 50%, n_io 8, buffered and direct: hit rate, MB read per
 *    token, I/O ms per token.
 * 3. The same random expert sequence copied out of a cold mmap (one thread,
 *    what the page-fault path gives) for comparison.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/experts.h"

static uint64_t g_rng = 12345;
static double urand(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static void drop_pages(const ts_expert_map *m) {
    for (int i = 0; i < m->n_files; i++) {
        int fd = open(m->paths[i], O_RDONLY);
        if (fd < 0) continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* routing [T][Lm][K] */
static void route_uniform(int32_t *r, int T, int L, int E, int K) {
    for (int t = 0; t < T; t++)
        for (int l = 0; l < L; l++) {
            int32_t *c = r + ((size_t)t * L + l) * K;
            for (int k = 0; k < K; k++) {
                int e, dup;
                do {
                    e = (int)(urand() * E);
                    dup = 0;
                    for (int q = 0; q < k; q++) dup |= c[q] == e;
                } while (dup);
                c[k] = e;
            }
        }
}

static void route_zipf(int32_t *r, int T, int L, int E, int K, double skew, double reuse) {
    double *cdf = malloc(sizeof(double) * E), z = 0;
    int *perm = malloc(sizeof(int) * L * E);
    for (int i = 0; i < E; i++) { z += pow(i + 1, -skew); cdf[i] = z; }
    for (int i = 0; i < E; i++) cdf[i] /= z;
    for (int l = 0; l < L; l++) {
        int *p = perm + l * E;
        for (int e = 0; e < E; e++) p[e] = e;
        for (int e = E - 1; e > 0; e--) { int j = (int)(urand() * (e + 1)), x = p[e]; p[e] = p[j]; p[j] = x; }
    }
    for (int t = 0; t < T; t++)
        for (int l = 0; l < L; l++) {
            int32_t *c = r + ((size_t)t * L + l) * K;
            const int32_t *pv = t ? c - (size_t)L * K : NULL;
            for (int k = 0; k < K; k++) {
                int e, dup;
                do {
                    if (pv && urand() < reuse) e = pv[(int)(urand() * K)];
                    else {
                        double u = urand();
                        int lo = 0, hi = E - 1;
                        while (lo < hi) { int mid = (lo + hi) / 2; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
                        e = perm[l * E + lo];
                    }
                    dup = 0;
                    for (int q = 0; q < k; q++) dup |= c[q] == e;
                } while (dup);
                c[k] = e;
            }
        }
    free(cdf);
    free(perm);
}

typedef struct result {
    double hit, mb_per_tok, io_ms_per_tok, exp_per_s, gbps, lat_mean, lat_p50, lat_p99, wall;
    int direct;
} result;

/* modes: buffered pread, buffered after fadvise(WILLNEED), O_DIRECT, buffered from a warm page cache */
enum { M_BUF, M_WILL, M_DIRECT, M_WARM, M_N };
static const char *MODE[M_N] = {"pread", "pread+WILLNEED", "O_DIRECT", "page cache (warm)"};

static void warm_pages(const ts_expert_map *m) {
    static char buf[1 << 20];
    for (int i = 0; i < m->n_files; i++) {
        int fd = open(m->paths[i], O_RDONLY);
        if (fd < 0) continue;
        while (read(fd, buf, sizeof buf) > 0) {}
        close(fd);
    }
}

static result run(const ts_expert_map *m, const int32_t *route, int T, int rows, double frac, int n_io, int mode, ts_xc_policy pol) {
    int direct = mode == M_DIRECT;
    result R = {0};
    const int L = m->n_main, K = m->topk;
    ts_xc_params p;
    ts_xc_params_default(&p);
    p.policy = pol;
    p.n_io = n_io;
    p.direct = direct;
    p.willneed = mode == M_WILL;
    uint64_t slots = (uint64_t)(frac * m->n_main * m->E); /* of the routed (main-stack) experts */
    if (slots < (uint64_t)rows * K) slots = (uint64_t)rows * K;
    p.cache_bytes = slots * ts_xc_slot_stride(m);
    ts_xc *c = NULL;
    ts_error err = {0};
    if (mode == M_WARM) warm_pages(m);
    else drop_pages(m);
    if (ts_xc_open(m, &p, &c, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    int nb = (T + rows - 1) / rows;
    double *lat = malloc(sizeof(double) * (size_t)nb * L);
    int nl = 0;
    int32_t *buf = malloc(sizeof(int32_t) * rows * K);
    double t0 = ts_now();
    for (int b = 0; b < nb; b++)
        for (int l = 0; l < L; l++) {
            int r = T - b * rows < rows ? T - b * rows : rows;
            for (int i = 0; i < r; i++) memcpy(buf + i * K, route + ((size_t)(b * rows + i) * L + l) * K, sizeof(int32_t) * K);
            uint64_t mis0 = ts_xc_get_stats(c)->misses;
            double a = ts_now();
            if (ts_xc_ensure(c, l, buf, r * K, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
            double d = ts_now() - a;
            if (ts_xc_get_stats(c)->misses > mis0) lat[nl++] = d;
            ts_xc_unpin(c, l);
        }
    R.wall = ts_now() - t0;
    const ts_xc_stats *s = ts_xc_get_stats(c);
    R.direct = s->direct_active;
    R.hit = (double)s->hits / (double)(s->hits + s->misses);
    R.mb_per_tok = (double)s->bytes_read / 1e6 / T;
    R.io_ms_per_tok = s->io_wait_s * 1e3 / T;
    R.exp_per_s = s->io_wait_s > 0 ? (double)s->misses / s->io_wait_s : 0;
    R.gbps = s->io_wait_s > 0 ? (double)s->bytes_read / 1e9 / s->io_wait_s : 0;
    if (nl) {
        double sum = 0;
        for (int i = 0; i < nl; i++) sum += lat[i];
        qsort(lat, nl, sizeof(double), cmp_d);
        R.lat_mean = sum / nl * 1e3;
        R.lat_p50 = lat[nl / 2] * 1e3;
        R.lat_p99 = lat[(int)(nl * 0.99) < nl ? (int)(nl * 0.99) : nl - 1] * 1e3;
    }
    free(lat);
    free(buf);
    ts_xc_close(c);
    return R;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: readbench INSTALL [tokens 32] [tokens for cache sizes 256] [reps 3] [rows 1]\n"); return 2; }
    int T1 = argc > 2 ? atoi(argv[2]) : 32, T2 = argc > 3 ? atoi(argv[3]) : 256, reps = argc > 4 ? atoi(argv[4]) : 3;
    int rows = argc > 5 ? atoi(argv[5]) : 1, T = T1 > T2 ? T1 : T2;
    if (reps < 1) reps = 1;
    ts_config cfg;
    ts_st_set *st = NULL;
    ts_expert_map *m = NULL;
    ts_error err = {0};
    if (ts_config_load(argv[1], &cfg, &err) || ts_st_open_dir(argv[1], &st, &err) || ts_expert_map_build(st, &cfg, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const int L = m->n_main, E = m->E, K = m->topk;
    printf("install %s: %d main layers (+%d MTP) x %d experts, top-%d, %.2f MB per expert (slot %.2f MB), %d shards\n\n", argv[1], L,
           m->n_layers - L, E, K, m->expert_bytes / 1e6, ts_xc_slot_stride(m) / 1e6, m->n_files);
    int32_t *route = malloc(sizeof(int32_t) * (size_t)T * L * K);

    printf("## reads in flight: uniform routing, %d tokens x %d layers, cache 10%% of the routed experts, rows %d; median of %d runs "
           "(GB/s range in brackets)\n\n", T1, L, rows, reps);
    printf("| read | n_io | hit | experts/s | GB/s [min-max] | ensure ms mean | p50 | p99 |\n|---|---|---|---|---|---|---|---|\n");
    route_uniform(route, T1, L, E, K);
    for (int mode = 0; mode < M_N; mode++)
        for (int n_io = 1; n_io <= 8; n_io *= 2) {
            result rr[16];
            int nr = reps < 16 ? reps : 16;
            for (int q = 0; q < nr; q++) rr[q] = run(m, route, T1, rows, 0.10, n_io, mode, TS_XC_LFRU);
            /* median by GB/s */
            for (int a = 1; a < nr; a++)
                for (int b = a; b > 0 && rr[b].gbps < rr[b - 1].gbps; b--) { result x = rr[b]; rr[b] = rr[b - 1]; rr[b - 1] = x; }
            result r = rr[nr / 2];
            printf("| %s%s | %d | %.1f%% | %.0f | %.2f [%.2f-%.2f] | %.2f | %.2f | %.2f |\n", MODE[mode],
                   mode == M_DIRECT && !r.direct ? " (refused)" : "", n_io, 100 * r.hit, r.exp_per_s, r.gbps, rr[0].gbps, rr[nr - 1].gbps,
                   r.lat_mean, r.lat_p50, r.lat_p99);
            fflush(stdout);
        }

    printf("\n## cache sizes: Zipf routing (skew 1.0, reuse 0.3), %d tokens, n_io 4, rows %d\n\n", T2, rows);
    printf("| cache | policy | read | hit | MB read/token | I/O ms/token | GB/s while waiting |\n|---|---|---|---|---|---|---|\n");
    route_zipf(route, T2, L, E, K, 1.0, 0.3);
    const double fr[3] = {0.10, 0.25, 0.50};
    for (int f = 0; f < 3; f++)
        for (int pol = 0; pol < 2; pol++)
            for (int mode = M_WILL; mode <= M_DIRECT; mode++) {
                result r = run(m, route, T2, rows, fr[f], 4, mode, pol);
                printf("| %.0f%% | %s | %s | %.1f%% | %.1f | %.2f | %.2f |\n", 100 * fr[f], ts_xc_policy_name(pol), MODE[mode],
                       100 * r.hit, r.mb_per_tok, r.io_ms_per_tok, r.gbps);
                fflush(stdout);
            }

    /* cold mmap copy of the same number of experts as the uniform run's misses */
    route_uniform(route, T1, L, E, K);
    drop_pages(m);
    uint8_t *dst = malloc(m->expert_bytes);
    size_t nexp = (size_t)T1 * L * K;
    volatile uint8_t sink = 0;
    double t0 = ts_now();
    for (size_t i = 0; i < nexp; i++) {
        int l = (int)(i / K) % L, e = route[i];
        size_t ix = ts_xmap_idx(m, l, e);
        memcpy(dst, (const uint8_t *)st->files[m->file[ix]].map + m->off[ix], m->bytes[ix]);
        sink ^= dst[i % m->bytes[ix]];
    }
    (void)sink;
    double dt = ts_now() - t0;
    printf("\n## cold mmap copy (page faults + readahead, one thread): %zu experts in %.2f s: %.0f experts/s, %.2f GB/s\n", nexp, dt, nexp / dt,
           nexp * (double)m->expert_bytes / 1e9 / dt);
    free(dst);
    free(route);
    ts_expert_map_free(m);
    ts_st_close(st);
    return 0;
}
