/* linear_p16_amx.c: the P16 product on Intel AMX tiles (Sapphire Rapids and
 * later), bit-identical to the AVX-512 VNNI kernel (linear_p16_avx512.c).
 *
 * Why. The VNNI kernel multiplies one x row's three int8 digits by 16 weight
 * rows with three VPDPBUSD per 4 columns, so every x row adds its own
 * multiplies. One AMX TDPBSUD multiplies up to 16 "virtual rows" (x row,
 * digit) by 16 weight rows over 64 columns at once, whatever the number of
 * rows used: x rows go in tiles of 5 (15 digit rows at three digits; 10 or 5
 * at the lower activation precisions, where the accumulators, 4 x 5 zmm,
 * rather than the tile rows set the tile size). What limits it is the
 * traffic through memory around each multiply (tile loads, the int32 results
 * stored and read back every group, INT4 unpacked to bytes), a fixed cost per
 * weight byte: it pays from about 4 x rows (matmul.c picks by row count), and
 * on prompt chunks runs the prefill GEMM at 1.6x the VNNI kernel per core on
 * the Xeon.
 *
 * Exactness. Per group the tile computes A_k = sum_c q_c d_k,c exactly in
 * int32, the same integers the VNNI kernel accumulates; the f32 steps that
 * follow (joining the digits, scale, bias) are the same operations in the same
 * order (one definition, p16_step in p16_avx512.h). So y is bit-identical to the VNNI
 * kernel's, and the two may be mixed (decode on one, verify on the other)
 * without breaking the row-exactness speculative decoding depends on; the
 * tests compare them bit for bit.
 *
 * Layouts. The B tile (weights) is 16 weight rows x 4 columns per 64-byte
 * tile row: exactly one P16 chunk of INT8, and one nibble half of an INT4
 * chunk. So INT8 tiles load straight from the packed weights; INT4 groups
 * are unpacked group by group, one group ahead of the multiplies, into a
 * per-thread buffer (& 15 and >> 4, as the VNNI kernel does in registers):
 * the whole block when later x tiles reuse the bytes, else a ring of 4
 * groups. The A
 * tile wants each (x row, digit) as a contiguous run of columns: the digits
 * are laid out [row][digit][cols] (ts_amx_prep_rows), so one x tile is one
 * strided tile load.
 *
 * The tile registers are configured per call (row counts depend on the number
 * of x rows and the group size) and released at its end, so a thread holds
 * no AMX state between products.
 */
#include <immintrin.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu/p16_avx512.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tilecfg;

int ts_amx_available(void) {
    static int ok = -1;
    if (ok >= 0) return ok;
    ok = 0;
    const char *e = getenv("TS_AMX");
    if (e && !strcmp(e, "0")) return ok;
    unsigned a, b, c, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return ok; /* AMX-TILE, AMX-INT8 */
    /* Linux hands out the 8 KB tile state only on request (per process) */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return ok;
    ok = 1;
    return ok;
}

/* Digits of n x rows as the A tiles read them: row i, digit k, column c at
 * xa[(i * nd + k) * cols + c] (same values as ts_p16_prep_rows). */
void ts_amx_prep_rows(const float *x, int n, int64_t cols, int group, int nd, int8_t *xa, float *sx, float *xs) {
    const int64_t ng = cols / group;
    for (int i = 0; i < n; i++)
        ts_avx512_prep_d(x + (int64_t)i * cols, cols, group, nd, xa + (int64_t)i * nd * cols, 4, cols,
                         sx + (int64_t)i * ng, xs + (int64_t)i * ng);
}

#define UNPACK_AHEAD 1 /* groups unpacked ahead of the multiplies (2 and 4 measured no better) */
#define XT 5 /* x rows per tile: 5 x 3 digits = 15 of the 16 tile rows */

/* INT4: group g of a block's nibbles as bytes, [column quad][16 rows x 4],
 * at o; rp is the group's record. */
static inline __attribute__((always_inline)) void unpack_group(const uint8_t *rp, size_t rec, int64_t G, uint8_t *o) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    p16_prefetch(rp, rec);
    for (int64_t j = 0; j < G / 8; j++) {
        __m512i v = _mm512_load_si512(rp + 64 * j);
        _mm512_store_si512(o + 128 * j, _mm512_and_si512(v, m4));
        _mm512_store_si512(o + 128 * j + 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    }
}

/* ---- one pass: up to 2 x tiles by 2 row blocks ----
 * Tiles 0-1: the x tiles (X rows x ND digits), 2-3: the weight blocks, 4-7:
 * the four C = A B. Four products per group share two A and two B tile loads,
 * and the four multiplies are independent, so the tile unit is not left
 * waiting on one chain. The C tiles go through memory (there is no
 * tile-to-register move): a group's f32 steps run while the next group's
 * tiles are computed (cbuf double-buffered). Per (x row, row block) the f32
 * arithmetic is p16_step, as in the VNNI kernel, so every row equals the
 * VNNI kernel's whatever the pairing of tiles and blocks. */
static inline __attribute__((always_inline)) void pass_post(const int32_t (*C)[16][16], const uint8_t *const *blkp,
                                                            size_t rec, size_t dbytes, size_t ss, ts_dtype sdt,
                                                            const float *sx, const float *xs, int64_t ng, int64_t g,
                                                            const int *st, __m512 (*acc)[2][XT], const int X,
                                                            const int NT, const int NB, const int ND) {
    _Pragma("GCC unroll 2") for (int b = 0; b < NB; b++) {
        const uint8_t *rp = blkp[b] + (size_t)g * rec;
        const __m512 sc = p16_load16(rp + dbytes, sdt), bi = p16_load16(rp + dbytes + 16 * ss, sdt);
        _Pragma("GCC unroll 2") for (int t = 0; t < NT; t++) {
            const int32_t *c = C[2 * t + b][0];
            _Pragma("GCC unroll 5") for (int u = 0; u < X; u++) {
                const int32_t *cu = c + u * ND * 16; /* C row ND u + k: digit k of x row u */
                int64_t o = (int64_t)(st[t] + u) * ng + g;
                const __m512i z = _mm512_setzero_si512();
                acc[t][b][u] = p16_step(acc[t][b][u], _mm512_load_si512(cu), ND > 1 ? _mm512_load_si512(cu + 16) : z,
                                        ND > 2 ? _mm512_load_si512(cu + 32) : z, sc, bi, sx[o], xs[o], ND);
            }
        }
    }
}

/* Store the C tiles of pair p (p = 0: tiles 4-5, 1: tiles 6-7; NB of them)
 * to dst[0..NB) and zero them for their next group. Tile numbers must be
 * immediates, hence the two branches. */
static inline __attribute__((always_inline)) void store_pair(int p, int32_t (*dst)[16][16], const int NB) {
    if (p) {
        _tile_stored(6, dst[0], 64);
        _tile_zero(6);
        if (NB == 2) { _tile_stored(7, dst[1], 64); _tile_zero(7); }
    } else {
        _tile_stored(4, dst[0], 64);
        _tile_zero(4);
        if (NB == 2) { _tile_stored(5, dst[1], 64); _tile_zero(5); }
    }
}

static inline __attribute__((always_inline)) void pass(const ts_weight *w, const int8_t *xa, const float *sx,
                                                       const float *xs, float *y, int64_t rb, const int *st,
                                                       const int *sk, uint8_t *ub, const int X, const int NT,
                                                       const int NB, const int UNPACK, const int ND) {
    const int64_t cols = w->cols, G = w->group, ng = cols / G;
    const int KS = G < 64 ? (int)G : 64, nsl = (int)(G / KS);
    const p16_geom pg = p16_geometry(w);
    const size_t ss = pg.ss, dbytes = pg.dbytes, rec = pg.rec;
    const uint8_t *blkp[2] = {w->packed + (size_t)rb * (size_t)ng * rec, w->packed + (size_t)(rb + 1) * (size_t)ng * rec};
    uint8_t *ubp[2] = {ub, ub + (size_t)16 * (size_t)cols};
    const int8_t *ap[2] = {xa + (size_t)st[0] * ND * (size_t)cols, xa + (size_t)st[NT - 1] * ND * (size_t)cols};
    /* INT8 tiles load straight from the weights: the first x tiles of a
     * block stream them, so they prefetch */
    const int pf8 = w->bits == 8 && st[0] == 0;
    int32_t cbuf[2][4][16][16] __attribute__((aligned(64)));
    __m512 acc[2][2][XT];
#define SLOT(g) (UNPACK == 2 ? ((g) & 3) : (g)) /* a ring of 4 groups when no later x tile reads the bytes */
    _Pragma("GCC unroll 2") for (int t = 0; t < NT; t++)
        _Pragma("GCC unroll 2") for (int b = 0; b < NB; b++)
            _Pragma("GCC unroll 5") for (int u = 0; u < X; u++) acc[t][b][u] = _mm512_setzero_ps();
    /* The first x tile of a block pair unpacks its INT4 groups one ahead of
     * the multiplies, so the weight stream from memory overlaps the tile
     * work (unpacking the blocks whole first left memory idle during it:
     * one row took 1.9x the VNNI kernel from DRAM). GCC's tile loads are asm
     * statements without memory operands: the barrier keeps the unpacking
     * stores before them. */
#define UNPACK_GROUP(gu)                                                                                            \
    do {                                                                                                            \
        _Pragma("GCC unroll 2") for (int b = 0; b < NB; b++)                                                        \
            unpack_group(blkp[b] + (size_t)(gu) * rec, rec, G, ubp[b] + (size_t)SLOT(gu) * (size_t)G * 16);         \
        __asm__ volatile("" ::: "memory");                                                                          \
    } while (0)
    if (UNPACK)
        for (int64_t g = 0; g < UNPACK_AHEAD && g < ng; g++) UNPACK_GROUP(g);
    for (int64_t g = 0; g < ng; g++) {
        if (pf8)
            _Pragma("GCC unroll 2") for (int b = 0; b < NB; b++) p16_prefetch(blkp[b] + (size_t)g * rec, rec);
        /* one x tile: the C tiles alternate between pairs 4-5 and 6-7 by
         * group, so a group's multiplies never wait for the previous
         * group's results to be stored and the tiles zeroed */
        const int odd = NT == 1 && (g & 1);
        for (int s = 0; s < nsl; s++) {
            const size_t ko = (size_t)g * (size_t)G + (size_t)s * (size_t)KS;
            const size_t bo = (size_t)SLOT(g) * (size_t)(G / 4) + (size_t)s * (size_t)(KS / 4); /* column quad */
            _tile_loadd(0, ap[0] + ko, cols);
            if (NT == 2) _tile_loadd(1, ap[1] + ko, cols);
            if (w->bits == 4) _tile_loadd(2, ubp[0] + bo * 64, 64);
            else _tile_loadd(2, blkp[0] + (size_t)g * rec + (size_t)s * (KS / 4) * 64, 64);
            if (NB == 2) {
                if (w->bits == 4) _tile_loadd(3, ubp[1] + bo * 64, 64);
                else _tile_loadd(3, blkp[1] + (size_t)g * rec + (size_t)s * (KS / 4) * 64, 64);
            }
            if (odd) {
                _tile_dpbsud(6, 0, 2);
                if (NB == 2) _tile_dpbsud(7, 0, 3);
            } else {
                _tile_dpbsud(4, 0, 2);
                if (NB == 2) _tile_dpbsud(5, 0, 3);
            }
            if (NT == 2) _tile_dpbsud(6, 1, 2);
            if (NT == 2 && NB == 2) _tile_dpbsud(7, 1, 3);
        }
        if (UNPACK && g + UNPACK_AHEAD < ng) UNPACK_GROUP(g + UNPACK_AHEAD);
        if (NT == 2) {
            store_pair(0, cbuf[g & 1], NB);     /* tiles 4-5: x tile 0 */
            store_pair(1, cbuf[g & 1] + 2, NB); /* tiles 6-7: x tile 1 */
            if (g >= 1) pass_post(cbuf[(g - 1) & 1], blkp, rec, dbytes, ss, w->sdtype, sx, xs, ng, g - 1, st, acc, X, NT, NB, ND);
        } else if (g >= 1) {
            /* store the previous group's pair (its multiplies had this
             * group's to overlap), then the f32 steps of the one before */
            store_pair(!odd, cbuf[(g - 1) & 1], NB);
            if (g >= 2) pass_post(cbuf[g & 1], blkp, rec, dbytes, ss, w->sdtype, sx, xs, ng, g - 2, st, acc, X, NT, NB, ND);
        }
    }
    if (NT == 1) {
        store_pair((int)((ng - 1) & 1), cbuf[(ng - 1) & 1], NB);
        if (ng >= 2) pass_post(cbuf[(ng - 2) & 1], blkp, rec, dbytes, ss, w->sdtype, sx, xs, ng, ng - 2, st, acc, X, NT, NB, ND);
    }
    pass_post(cbuf[(ng - 1) & 1], blkp, rec, dbytes, ss, w->sdtype, sx, xs, ng, ng - 1, st, acc, X, NT, NB, ND);
    _Pragma("GCC unroll 2") for (int b = 0; b < NB; b++) {
        const int64_t r = (rb + b) * 16, left = w->rows - r;
        const __mmask16 m = ts_tail16((size_t)left);
        _Pragma("GCC unroll 2") for (int t = 0; t < NT; t++)
            _Pragma("GCC unroll 5") for (int u = 0; u < X; u++)
                if (u >= sk[t]) _mm512_mask_storeu_ps(y + (int64_t)(st[t] + u) * w->rows + r, m, acc[t][b][u]);
    }
#undef UNPACK_GROUP
#undef SLOT
}

/* The passes over a pair of row blocks (or the last single one): one x tile
 * of X <= 5 rows, or a pair of 5-row tiles. */
#define PASS_ND(X, NT, NB, U)                                                                                       \
    do {                                                                                                            \
        if (nd == 1) pass(w, xa, sx, xs, y, rb, st, sk, ub, X, NT, NB, U, 1);                                      \
        else if (nd == 2) pass(w, xa, sx, xs, y, rb, st, sk, ub, X, NT, NB, U, 2);                                 \
        else pass(w, xa, sx, xs, y, rb, st, sk, ub, X, NT, NB, U, 3);                                              \
    } while (0)
#define PASS_NB(X, NT)                                                                                              \
    do {                                                                                                            \
        if (nb == 2 && unpack == 2) PASS_ND(X, NT, 2, 2);                                                           \
        else if (nb == 2 && unpack) PASS_ND(X, NT, 2, 1);                                                           \
        else if (nb == 2) PASS_ND(X, NT, 2, 0);                                                                     \
        else if (unpack == 2) PASS_ND(X, NT, 1, 2);                                                                 \
        else if (unpack) PASS_ND(X, NT, 1, 1);                                                                      \
        else PASS_ND(X, NT, 1, 0);                                                                                  \
    } while (0)

void ts_amx_pdot(const ts_weight *w, const int8_t *xa, const float *sx, const float *xs, int n, int nd, float *y,
                 int64_t r0, int64_t r1, uint8_t *ub) {
    const int64_t G = w->group, blocks_end = (r1 + 15) / 16;
    const int KS = G < 64 ? (int)G : 64;
    const int X = n < XT ? n : XT;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 2; t++) {
        cfg.rows[t] = (uint8_t)(nd * X); /* A: digit rows x KS columns */
        cfg.colsb[t] = (uint16_t)KS;
        cfg.rows[2 + t] = (uint8_t)(KS / 4); /* B: column quads x (16 rows x 4) */
        cfg.colsb[2 + t] = 64;
    }
    for (int c = 4; c < 8; c++) {
        cfg.rows[c] = (uint8_t)(nd * X); /* C: digit rows x 16 int32 */
        cfg.colsb[c] = 64;
    }
    _tile_loadconfig(&cfg);
    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    const int T = (n + X - 1) / X; /* x tiles; the last one shifted back to end at n */
    for (int64_t rb = r0 / 16; rb < blocks_end; rb += 2) {
        const int nb = rb + 1 < blocks_end ? 2 : 1;
        for (int t0 = 0; t0 < T; t0 += 2) {
            /* INT4: the first x tiles unpack; later ones reuse the bytes */
            const int unpack = w->bits != 4 || t0 > 0 ? 0 : T > 2 ? 1 : 2;
            int st[2], sk[2];
            const int nt = t0 + 1 < T ? 2 : 1;
            for (int t = 0; t < nt; t++) {
                int i0 = (t0 + t) * X;
                st[t] = i0 + X <= n ? i0 : n - X;
                sk[t] = i0 - st[t];
            }
            if (nt == 2) PASS_NB(XT, 2); /* two tiles: n > 5, so X = 5 */
            else switch (X) {
                case 5: PASS_NB(5, 1); break;
                case 4: PASS_NB(4, 1); break;
                case 3: PASS_NB(3, 1); break;
                case 2: PASS_NB(2, 1); break;
                default: PASS_NB(1, 1); break;
                }
        }
    }
    _tile_release();
}
