/* amx_tiles.c: what the AMX tile operations cost on this CPU, alone, with
 * the shapes the P16 product gives them (linear_p16_amx.c): A = x rows x 3
 * digits (3 to 15 tile rows) by 64 columns, B = 16 weight rows x 64 columns
 * (1 KB), one multiply per 16-row block per 64-column group, the int32
 * results stored and the C tile zeroed every group (the weights' scales
 * change per group, so C cannot accumulate across groups).
 *
 *   cc -O2 -march=native -mamx-tile -mamx-int8 -o build/amx_tiles bench/kernels/amx_tiles.c
 *   build/amx_tiles [A rows]     (3 = one x row, 12 = four)
 *
 * Each line is ns per (16-row block, group) = per 1024 INT4 weights; the
 * data sit in L1/L2 so only the tile unit and the load/store ports count.
 * Compare with the whole kernel: one VNNI x row costs ~33-45 ns per block
 * group (L2 to L3), so the tile work alone (the "per-group flush" line)
 * already takes half of that before any INT4 unpacking or f32 steps.
 * bench/RESULTS.md has the numbers and what follows from them.
 * Lab code: not part of the engine.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tilecfg;

static uint8_t Bm[64][1024] __attribute__((aligned(64)));
static int8_t Am[64][1024] __attribute__((aligned(64)));
static int32_t Cm[4][16][16] __attribute__((aligned(64)));

#define N 1000000L /* block groups per timed loop */
#define REPS 7      /* the machine is shared: the best of 7 timed loops */

/* Best of REPS runs of the statement block, in ns per block group. */
#define TIMED(label, body)                                                  \
    do {                                                                    \
        double best = 1e9;                                                  \
        for (int r_ = 0; r_ < REPS; r_++) {                                 \
            double t0 = now();                                              \
            body;                                                           \
            double dt = now() - t0;                                         \
            if (dt < best) best = dt;                                       \
        }                                                                   \
        printf("  %-41s %5.1f\n", label, best / N * 1e9);                  \
    } while (0)

int main(int argc, char **argv) {
    const int ar = argc > 1 ? atoi(argv[1]) : 3;
    if (ar < 1 || ar > 16) { fprintf(stderr, "A rows: 1..16\n"); return 2; }
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */)) {
        fprintf(stderr, "no AMX tile state from the kernel\n");
        return 1;
    }
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 2; t++) {
        cfg.rows[t] = (uint8_t)ar; cfg.colsb[t] = 64;   /* A */
        cfg.rows[2 + t] = 16; cfg.colsb[2 + t] = 64;     /* B */
    }
    for (int c = 4; c < 8; c++) { cfg.rows[c] = (uint8_t)ar; cfg.colsb[c] = 64; }
    _tile_loadconfig(&cfg);
    memset(Bm, 3, sizeof Bm);
    memset(Am, 1, sizeof Am);
    printf("A tile %d rows; ns per (16-row block, 64-column group)\n", ar);
    TIMED("B tile loads only", for (long i = 0; i < N; i += 2) {
        int k = (int)(i & 63);
        _tile_loadd(2, Bm[k], 64);
        _tile_loadd(3, Bm[k + 1], 64);
    });
    TIMED("multiplies only (two accumulating C)", for (long i = 0; i < N; i += 2) {
        _tile_dpbsud(4, 0, 2);
        _tile_dpbsud(5, 0, 3);
    });
    TIMED("C stores + zeroing only", for (long i = 0; i < N; i += 2) {
        _tile_stored(4, Cm[0], 64);
        _tile_stored(5, Cm[1], 64);
        _tile_zero(4);
        _tile_zero(5);
    });
    TIMED("loads + multiplies, C kept", for (long i = 0; i < N; i += 2) {
        int k = (int)(i & 63);
        _tile_loadd(0, Am[k], 64);
        _tile_loadd(2, Bm[k], 64);
        _tile_loadd(3, Bm[k + 1], 64);
        _tile_dpbsud(4, 0, 2);
        _tile_dpbsud(5, 0, 3);
    });
    /* the kernel's one-x-tile pass: C pairs alternate by group */
    TIMED("loads + multiplies + per-group flush", for (long i = 0; i < N; i += 2) {
        int k = (int)(i & 63);
        _tile_loadd(0, Am[k], 64);
        _tile_loadd(2, Bm[k], 64);
        _tile_loadd(3, Bm[k + 1], 64);
        if ((i >> 1) & 1) {
            _tile_dpbsud(6, 0, 2);
            _tile_dpbsud(7, 0, 3);
            _tile_stored(4, Cm[0], 64);
            _tile_stored(5, Cm[1], 64);
            _tile_zero(4);
            _tile_zero(5);
        } else {
            _tile_dpbsud(4, 0, 2);
            _tile_dpbsud(5, 0, 3);
            _tile_stored(6, Cm[2], 64);
            _tile_stored(7, Cm[3], 64);
            _tile_zero(6);
            _tile_zero(7);
        }
    });
    _tile_release();
    return 0;
}
