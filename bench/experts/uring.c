/* uring.c: does io_uring read experts faster than the cache's pread pool?
 *
 *   uring INSTALL [batches 128] [reps 3]
 *
 * Standalone (needs liburing-dev; not linked into the library). Reads the
 * same random experts (8 distinct per batch, main layers, O_DIRECT,
 * page-aligned spans, the page cache dropped first) two ways:
 *   io_uring: one submit of the batch's 8 reads, then wait for all of them
 *             (queue depth QD: at most QD reads outstanding);
 *   pread pool: ts_xc_ensure with n_io = QD threads on a cache of 8 slots
 *             (every batch misses).
 * Prints GB/s per queue depth, median of reps.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "model/experts.h"

static uint64_t g_rng = 777;
static uint64_t rnd(void) { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }

static void drop_pages(const ts_expert_map *m) {
    for (int i = 0; i < m->n_files; i++) {
        int fd = open(m->paths[i], O_RDONLY);
        if (fd >= 0) { posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); close(fd); }
    }
}

static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: uring INSTALL [batches] [reps]\n"); return 2; }
    int NB = argc > 2 ? atoi(argv[2]) : 128, reps = argc > 3 ? atoi(argv[3]) : 3;
    ts_config cfg;
    ts_st_set *st = NULL;
    ts_expert_map *m = NULL;
    ts_error err = {0};
    if (ts_config_load(argv[1], &cfg, &err) || ts_st_open_dir(argv[1], &st, &err) || ts_expert_map_build(st, &cfg, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const int K = m->topk, L = m->n_main, E = m->E;
    int32_t *ids = malloc(sizeof(int32_t) * NB * K);
    for (int b = 0; b < NB; b++)
        for (int k = 0; k < K; k++) {
            int e, dup;
            do { e = (int)(rnd() % E); dup = 0; for (int q = 0; q < k; q++) dup |= ids[b * K + q] == e; } while (dup);
            ids[b * K + k] = e;
        }
    uint64_t stride = ts_xc_slot_stride(m);
    uint8_t *buf;
    if (posix_memalign((void **)&buf, 4096, stride * K)) return 1;
    int *fd = malloc(sizeof(int) * m->n_files);
    for (int i = 0; i < m->n_files; i++) fd[i] = open(m->paths[i], O_RDONLY | O_DIRECT);
    printf("| QD | io_uring GB/s | pread pool GB/s |\n|---|---|---|\n");
    for (int qd = 1; qd <= 8; qd *= 2) {
        double gu[8], gp[8];
        for (int r = 0; r < reps && r < 8; r++) {
            struct io_uring ring;
            if (io_uring_queue_init(8, &ring, 0) < 0) { fprintf(stderr, "io_uring_queue_init failed (io_uring not allowed here?)\n"); return 1; }
            drop_pages(m);
            uint64_t bytes = 0;
            double t0 = ts_now();
            for (int b = 0; b < NB; b++) {
                int l = b % L, sent = 0, done = 0;
                while (done < K) {
                    while (sent < K && sent - done < qd) {
                        size_t ix = ts_xmap_idx(m, l, ids[b * K + sent]);
                        uint64_t a0 = m->off[ix] & ~4095ull, a1 = (m->off[ix] + m->bytes[ix] + 4095) & ~4095ull;
                        struct io_uring_sqe *sq = io_uring_get_sqe(&ring);
                        io_uring_prep_read(sq, fd[m->file[ix]], buf + stride * sent, (unsigned)(a1 - a0), a0);
                        sent++;
                    }
                    io_uring_submit(&ring);
                    struct io_uring_cqe *cq;
                    if (io_uring_wait_cqe(&ring, &cq) < 0 || cq->res < 0) { fprintf(stderr, "read failed: %d\n", cq ? cq->res : -1); return 1; }
                    bytes += (uint64_t)cq->res;
                    io_uring_cqe_seen(&ring, cq);
                    done++;
                }
            }
            gu[r] = bytes / 1e9 / (ts_now() - t0);
            io_uring_queue_exit(&ring);
            /* the cache's pool */
            ts_xc_params p;
            ts_xc_params_default(&p);
            p.n_io = qd;
            p.direct = 1;
            p.cache_bytes = stride * K;
            ts_xc *c = NULL;
            if (ts_xc_open(m, &p, &c, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            drop_pages(m);
            t0 = ts_now();
            for (int b = 0; b < NB; b++) {
                /* the cache holds exactly one batch; alternate layers so that every batch misses */
                if (ts_xc_ensure(c, b % L, ids + b * K, K, NULL, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
                ts_xc_unpin(c, b % L);
            }
            gp[r] = ts_xc_get_stats(c)->bytes_read / 1e9 / (ts_now() - t0);
            ts_xc_close(c);
        }
        int n = reps < 8 ? reps : 8;
        qsort(gu, n, sizeof(double), cmp_d);
        qsort(gp, n, sizeof(double), cmp_d);
        printf("| %d | %.2f [%.2f-%.2f] | %.2f [%.2f-%.2f] |\n", qd, gu[n / 2], gu[0], gu[n - 1], gp[n / 2], gp[0], gp[n - 1]);
        fflush(stdout);
    }
    return 0;
}
