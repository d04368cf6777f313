/* pack.c: the load-time repacking of quantized weights for the AVX-512 VNNI
 * kernels (the "P16" layout), and its inverse for tests.
 *
 * Why repack. In the MLX layout each weight row is contiguous, so a SIMD dot
 * product runs along the columns of one row: every (row, group) then ends
 * with its own conversion to f32, a scale and a horizontal reduction, and
 * that per-group work, not the memory bus, bounded INT4 decode (bench/).
 * P16 puts 16 consecutive rows in the 16 int32 lanes of a zmm register:
 * lane r of a 64-byte chunk holds 4 bytes of row r, so one VPDPBUSD multiplies
 * 16 rows x 4 columns by the same 4 activation bytes (broadcast), and the
 * per-group work (convert, scale, bias) is done once per 16 rows x group with
 * the 16 rows' scales as one vector. No horizontal sums at all.
 *
 * Layout of one weight [rows, cols], group G (G % 16 == 0, G <= 1024), bits
 * 4 or 8, rows padded to a multiple of 16 with zero rows:
 *   for each block of 16 rows (rb), for each group g: a "group record" of
 *     data:  4-bit: G/8 chunks of 64 bytes; chunk j, lane r, byte k holds
 *            q[r][gG + 8j + k] in its low nibble and q[r][gG + 8j + 4 + k] in
 *            its high nibble (so `& 15` gives columns 8j..8j+3 of 16 rows and
 *            `>> 4` columns 8j+4..8j+7);
 *            8-bit: G/4 chunks; chunk j, lane r, byte k = q[r][gG + 4j + k].
 *     then the 16 rows' scales, then their 16 biases, in the source dtype
 *     (2 bytes each for BF16/F16, 4 for F32), zero for padding rows.
 * Every record is a multiple of 64 bytes, so with a 64-byte aligned base all
 * chunk loads are aligned, and a block's records are one sequential stream.
 *
 * The original (MLX) view stays in ts_weight: the reference kernels, the
 * embedding gather and the other modes read it; only the AVX-512 kernels read
 * `packed`. Packing is a pure permutation of the bits: tests check it with
 * ts_packed_get against ts_weight_get for every element of random matrices.
 */
#include <stdlib.h>

#include "cpu/cpu.h"

int ts_pack_enabled(void) {
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("TS_PACK");
        env = !(e && !strcmp(e, "0"));
    }
    return env && ts_kmode() == TS_KMODE_AVX512;
}

static size_t sbytes(ts_dtype t) { return t == TS_DTYPE_F32 ? 4 : 2; }

size_t ts_pack_record_bytes(int bits, int group, ts_dtype sdtype) {
    return (size_t)16 * (size_t)group * (size_t)bits / 8 + 32 * sbytes(sdtype);
}

int ts_pack_supported(int bits, int group, int64_t cols) {
    return (bits == 4 || bits == 8) && group >= 16 && group % 16 == 0 && group <= 1024 && cols % group == 0;
}

size_t ts_weight_pack_size(int64_t rows, int64_t cols, int bits, int group, ts_dtype sdtype) {
    if (!ts_pack_enabled() || !ts_pack_supported(bits, group, cols) || rows <= 0) return 0;
    size_t blocks = (size_t)((rows + 15) / 16), ng = (size_t)(cols / group);
    /* + 64: the packed base is aligned up to a cache line inside the buffer */
    return blocks * ng * ts_pack_record_bytes(bits, group, sdtype) + 64;
}

/* Nibbles 0..3 of x (16 bits) into the low nibbles of bytes 0..3. */
static inline uint32_t spread4(uint32_t x) {
    x = (x | (x << 8)) & 0x00FF00FFu;
    return (x | (x << 4)) & 0x0F0F0F0Fu;
}

static int g_pack_vec = -1;

static int pack_vector(void) {
    int v = __atomic_load_n(&g_pack_vec, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("TS_PACK_SCALAR");
        v = !(e && !strcmp(e, "1")) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
        __atomic_store_n(&g_pack_vec, v, __ATOMIC_RELAXED);
    }
    return v;
}

void ts_pack_force_scalar(int on) { __atomic_store_n(&g_pack_vec, on ? 0 : -1, __ATOMIC_RELAXED); }

typedef struct pack_job {
    ts_weight *w;
    uint8_t *base;
} pack_job;

/* Row blocks [chunk * per, ...): each record is written whole (padding
 * lanes and scales zero), so no memset of the arena is needed. */
static void pack_blocks(void *ctx, int chunk, int n_chunks) {
    const pack_job *pj = ctx;
    const ts_weight *w = pj->w;
    const int64_t rows = w->rows, cols = w->cols, G = w->group, ng = cols / G, blocks = (rows + 15) / 16;
    const int bits = w->bits;
    const size_t ss = sbytes(w->sdtype), rec = ts_pack_record_bytes(bits, (int)G, w->sdtype);
    const size_t dbytes = (size_t)16 * (size_t)G * (size_t)bits / 8;
    const int64_t wpr = cols * bits / 32; /* u32 words per row */
    int64_t per = (blocks + n_chunks - 1) / n_chunks, b0 = chunk * per, b1 = TS_MIN(blocks, b0 + per);
    /* the vector form when the CPU has it (the packed layout is only used
     * on AVX-512 CPUs anyway), unless TS_PACK_SCALAR=1 (tests compare) */
    const int vec = pack_vector();
    for (int64_t rb = b0; rb < b1; rb++)
        for (int64_t g = 0; g < ng; g++) {
            uint8_t *out = pj->base + ((size_t)rb * (size_t)ng + (size_t)g) * rec;
            if (vec) {
                ts_avx512_pack_record(w, rb, g, out);
                continue;
            }
            for (int l = 0; l < 16; l++) {
                int64_t r = rb * 16 + l;
                const uint32_t *row = (const uint32_t *)w->data + r * wpr + g * G * bits / 32;
                if (bits == 4)
                    for (int64_t j = 0; j < G / 8; j++) {
                        uint32_t u = 0, o;
                        if (r < rows) memcpy(&u, row + j, 4);
                        o = spread4(u & 0xFFFFu) | (spread4(u >> 16) << 4);
                        memcpy(out + 64 * j + 4 * l, &o, 4);
                    }
                else
                    for (int64_t j = 0; j < G / 4; j++) {
                        uint32_t u = 0;
                        if (r < rows) memcpy(&u, row + j, 4);
                        memcpy(out + 64 * j + 4 * l, &u, 4);
                    }
                uint8_t *so = out + dbytes + (size_t)l * ss, *bo = out + dbytes + 16 * ss + (size_t)l * ss;
                if (r < rows) {
                    size_t gi = ((size_t)r * (size_t)ng + (size_t)g) * ss;
                    memcpy(so, (const uint8_t *)w->scales + gi, ss);
                    memcpy(bo, (const uint8_t *)w->biases + gi, ss);
                } else {
                    memset(so, 0, ss);
                    memset(bo, 0, ss);
                }
            }
        }
}

void ts_weight_pack(ts_weight *w, void *dst) { ts_weight_pack_on(ts_pool_default(), w, dst); }

void ts_weight_pack_on(ts_pool *p, ts_weight *w, void *dst) {
    uint8_t *base = (uint8_t *)(((uintptr_t)dst + 63) & ~(uintptr_t)63);
    pack_job pj = {w, base};
    int64_t blocks = (w->rows + 15) / 16;
    int nt = p ? ts_pool_threads(p) : 1;
    if (nt > 1 && blocks >= 64) ts_pool_run(p, pack_blocks, &pj, (int)TS_MIN(blocks, 8 * nt));
    else pack_blocks(&pj, 0, 1);
    w->packed = base;
}

float ts_packed_get(const ts_weight *w, int64_t r, int64_t c) {
    const int64_t G = w->group, ng = w->cols / G, g = c / G, k = c % G;
    const size_t ss = sbytes(w->sdtype), rec = ts_pack_record_bytes(w->bits, (int)G, w->sdtype);
    const size_t dbytes = (size_t)16 * (size_t)G * (size_t)w->bits / 8;
    const uint8_t *recp = w->packed + ((size_t)(r / 16) * (size_t)ng + (size_t)g) * rec;
    int l = (int)(r % 16);
    unsigned q;
    if (w->bits == 4) {
        int64_t j = k / 8, within = k % 8;
        uint8_t b = recp[64 * j + 4 * l + (within & 3)];
        q = within < 4 ? (b & 15u) : (b >> 4);
    } else {
        q = recp[64 * (k / 4) + 4 * l + k % 4];
    }
    const uint8_t *sp = recp + dbytes + (size_t)l * ss, *bp = recp + dbytes + 16 * ss + (size_t)l * ss;
    float s, b;
    if (w->sdtype == TS_DTYPE_F32) {
        memcpy(&s, sp, 4);
        memcpy(&b, bp, 4);
    } else {
        uint16_t hs, hb;
        memcpy(&hs, sp, 2);
        memcpy(&hb, bp, 2);
        s = w->sdtype == TS_DTYPE_BF16 ? ts_bf16_to_f32(hs) : ts_f16_to_f32(hs);
        b = w->sdtype == TS_DTYPE_BF16 ? ts_bf16_to_f32(hb) : ts_f16_to_f32(hb);
    }
    return s * (float)q + b;
}
