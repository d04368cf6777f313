/* q4gemm.cu: prompt-chunk products on tensor cores: y[i] = x . w[i]^T for
 * many rows of x (a prefill chunk), 4-bit MLX weights, bf16 mma with f32
 * accumulation (tsc_linear_gemm).
 *
 * Owns: the staging of x as bf16 (k_gemm_xprep), the product kernel
 * (k_q4gemm), its workspace size and its eligibility rule. Does not own:
 * which products come here (backend.cu: prompt chunks of more than 16 rows,
 * TSC_GEMM=0 turns it off), the row-exact products of decode and verify
 * (q4dp.cu, linear.cu): this kernel rounds x to bf16 and sums in the tensor
 * cores' order, so it is never used where a row's bits must equal a
 * one-row step's (issue 17: prefill may round differently, verify may not).
 *
 * Why these numerics. The weights stay exact: a nibble q becomes the bf16
 * value 128 + q (0x4300 | q: exponent 2^7, q in the low mantissa bits, one
 * LOP3 for two values), and the affine part is applied per 64 columns in
 * f32: for a 64-column block of weight row o and x row t,
 *   y += s_o * D + (b_o - 128 s_o) * X_t,
 *   D = sum_c (128 + q_oc) x~_tc (the mma, f32), X_t = sum_c x~_tc,
 * x~ = bf16(x). So the only rounding beyond f32 is x's to bf16 (2^-9
 * relative per element): against the exact product the error is at most
 * ~2^-9 sum_c |x_c| |w_c| and typically ~2^-9 / sqrt(cols) of it; against
 * the product of x~ it is f32 rounding. (Dequantizing to bf16 weights
 * instead would round every weight too, and cost an FMA per weight.)
 *
 * The k order. The mma's k index runs through a 64-column block in an order
 * chosen so that each thread's A fragment comes from two consecutive u32
 * words of its weight row: register i (0..7: k16 step s = i / 2, half
 * r = i % 2) of thread t holds nibbles j and j + 4 of word 2t + s / 2, j =
 * 2 (s % 2) + r, i.e. mma k = 16 s + 8 r + 2 t + e <-> column
 * 8 (2 t + s / 2) + 2 (s % 2) + r + 4 e. k_gemm_xprep writes x~ in that
 * order, so the B fragments are plain ldmatrix loads of consecutive bytes.
 *
 * Shape of the work. A block computes 128 outputs x 64 x rows (8 warps:
 * 4 along the outputs, 32 each = two m16 tiles; 2 along the rows, 32 each =
 * four n8 tiles), walking the columns 64 at a time through a 4-stage
 * cp.async pipeline in shared memory (the weight tile 128 x 32 bytes, the
 * x~ tile 64 x 128 bytes, the row sums X_t, the scales s and b - 128 s in
 * f32); the row tiles of one output tile are consecutive blocks, so a
 * weight tile comes from DRAM once and from L2 for the other row tiles.
 *
 * The grouped form (MoE experts over a route list, backend.cu's
 * moe_chunk): row tiles come from a table (expert, first staged row, rows),
 * the expert's weights at a fixed stride from expert 0's, tile rows
 * optionally gathered at load (gidx) and outputs scattered (omap); staging
 * and products can be launched apart, so rows staged once serve several
 * products. A row's outputs depend on its own x only, so any tiling gives
 * the plain product's bits (tested).
 *
 * Floors (H200, 9B shapes, a 512-row chunk): 2 * 6.9e9 * 512 = 7.1 TFLOP
 * of products outside the head; at the mma.sync bf16 rate (~660 TFLOP/s
 * dense) 10.8 ms; the weights once from DRAM, 3.9 GB, 0.9 ms: compute-
 * bound. Instructions per warp and 64 columns: 32 mma, 56 shift/LOP3 for the
 * A fragments, 8 ldmatrix, 64 FFMA for the per-block scale step, ~12 other
 * shared loads: the integer and FP32 pipes carry about as much as the
 * tensor pipe. Prediction: 30-45% of the mma rate, 25-35 ms for the
 * chunk's products (the decode kernels at 16 rows a pass: ~420 ms).
 */
#include <cuda_bf16.h>
#include <string.h>

#include "cuda/common.cuh"

namespace {

constexpr int BO = 128;   /* outputs a block */
constexpr int BT = 64;    /* x rows a block */
constexpr int KB = 64;    /* columns a stage */
constexpr int STAGES = 4;
constexpr int NT = 256;   /* threads */
constexpr int XP = KB + 8; /* x~ tile pitch in bf16 (144 bytes: ldmatrix rows hit distinct banks) */
constexpr int XS_BYTES = BT * XP * 2, WS_BYTES = BO * KB / 2, RS_BYTES = BT * 4, SS_BYTES = BO * 8;
constexpr int STAGE_BYTES = XS_BYTES + WS_BYTES + RS_BYTES + SS_BYTES;
constexpr int SMEM = STAGES * STAGE_BYTES;

struct gm_w {
    const uint8_t *data;
    const void *scales, *biases;
    float *y;
    int rows;
    int tile0;       /* first output tile of this weight */
    int64_t estride; /* grouped (MoE experts): bytes from one expert's slot to the next (data, scales, biases) */
};

struct gm_args {
    gm_w w[TSC_LIN_MAX];
    int nw, sdt, lg;
    int K, nkb; /* columns, 64-column blocks */
    int n, npad; /* x rows, rounded up to BT */
    const uint16_t *xb; /* [npad][K] bf16 in the mma's k order per 64-column block */
    const float *xs;    /* [nkb][npad] the blocks' row sums of x~ */
    /* grouped (tsc_linear_gemm_grouped; NULL otherwise): row tile i is
     * (expert, first staged row, rows) = tiles[i], and staged row r's output
     * row is omap[r] (< 0: none) */
    const int4 *tiles;
    const int32_t *omap;
    const int32_t *gidx; /* grouped: staged row r of a tile is gidx[r] (a gather at load; NULL: row r) */
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp4(uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

/* two nibbles of w (at bits sh and sh + 16) as the bf16 pair (128 + q) */
__device__ __forceinline__ uint32_t nib2(uint32_t w, int sh) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w >> sh), "r"(0x000F000Fu), "r"(0x43004300u)); /* (a & b) | c */
    return r;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                         const float (&c)[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                   "f"(c[3]));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* x [n][K] f32 -> x~ (bf16, round to nearest) in the k order of the top
 * comment, rows n..npad zero, and the 64-column blocks' row sums; one warp
 * per (row, block), lane l makes mma k = 2l, 2l + 1. */
__global__ void __launch_bounds__(256) k_gemm_xprep(const float *x, int n, int npad, int K, uint16_t *xb, float *xs,
                                                    const int32_t *imap, int nmap) {
    TSC_PDL_ENTRY();
    const int nkb = K / KB;
    const int64_t item = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (item >= (int64_t)npad * nkb) return;
    const int row = (int)(item / nkb), kb = (int)(item % nkb), lane = threadIdx.x & 31;
    /* staged row `row` is x's row imap[row] when gathered (< 0 or past the
     * map: zeros), else x's row `row` */
    const int src = imap ? (row < nmap ? imap[row] : -1) : row;
    float v[2] = {0.f, 0.f};
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int k = 2 * lane + e, s = k >> 4, r = (k >> 3) & 1, t = (k >> 1) & 3;
        const int col = 8 * (2 * t + (s >> 1)) + 2 * (s & 1) + r + 4 * e;
        if (src >= 0 && src < n) v[e] = __bfloat162float(__float2bfloat16_rn(x[(int64_t)src * K + kb * KB + col]));
    }
    const __nv_bfloat162 p = __floats2bfloat162_rn(v[0], v[1]); /* exact: v already bf16 */
    ((__nv_bfloat162 *)(xb + (int64_t)row * K + kb * KB))[lane] = p;
    const float sum = warp_sum(__fadd_rn(v[0], v[1]));
    if (lane == 0) xs[(int64_t)kb * npad + row] = sum;
}

__global__ void __launch_bounds__(NT, 2) k_q4gemm(const __grid_constant__ gm_args a) {
    extern __shared__ __align__(16) uint8_t sm[];
    TSC_PDL_ENTRY();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wo = warp & 3, wt = warp >> 2;
    int wi = 0;
    while (wi + 1 < a.nw && (int)blockIdx.y >= a.w[wi + 1].tile0) wi++;
    const gm_w &w = a.w[wi];
    const int o0 = ((int)blockIdx.y - w.tile0) * BO;
    int t0 = (int)blockIdx.x * BT, tend = a.n;
    int64_t eoff = 0;
    if (a.tiles) { /* grouped: this row tile's expert and staged rows */
        const int4 tl = a.tiles[blockIdx.x];
        eoff = (int64_t)tl.x * w.estride, t0 = tl.y, tend = tl.y + tl.z;
    }
    const uint8_t *wdata = w.data + eoff;
    const void *wsc = (const uint8_t *)w.scales + eoff, *wbi = (const uint8_t *)w.biases + eoff;
    const int pitch = a.K / 2, ng = a.K >> a.lg;

    /* this thread's copies: x~ chunks q = tid, tid + 256 (row q / 8, 16 bytes
     * q % 8); the weight row tid / 2's half tid % 2 (rows past the weight
     * clamped: their outputs are not stored); the row sums by threads 0..15;
     * the scales by threads 0..127 (plain loads: 2-byte elements) */
    /* the staged rows this thread copies: x~ rows of chunks tid and tid + 256,
     * the row sum of row tid (gathered through gidx; rows past the tile:
     * any staged row, their outputs are not stored) */
    int xsrc[2], xssrc = 0;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int p = t0 + ((tid + j * NT) >> 3);
        xsrc[j] = a.gidx ? (p < tend ? a.gidx[p] : a.gidx[t0]) : p;
    }
    if (tid < BT) xssrc = a.gidx ? (t0 + tid < tend ? a.gidx[t0 + tid] : a.gidx[t0]) : t0 + tid;
    const int wrow = min(o0 + (tid >> 1), w.rows - 1);
    const uint8_t *wsrc = wdata + (int64_t)wrow * pitch + (tid & 1) * 16;
    const int srow = min(o0 + tid, w.rows - 1);
    auto stage_ptr = [&](int st) { return sm + st * STAGE_BYTES; };
    auto issue = [&](int kb, int st) {
        uint8_t *S = stage_ptr(st);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int q = tid + j * NT, r = q >> 3, ch = q & 7;
            cp16(smem_u32(S + r * (XP * 2) + ch * 16), a.xb + (int64_t)xsrc[j] * a.K + kb * KB + ch * 8);
        }
        cp16(smem_u32(S + XS_BYTES + (tid >> 1) * 32 + (tid & 1) * 16), wsrc + kb * (KB / 2));
        if (tid < BT) cp4(smem_u32(S + XS_BYTES + WS_BYTES + tid * 4), a.xs + (int64_t)kb * a.npad + xssrc); /* any row */
    };
    auto scale_put = [&](int st, float s, float b) {
        if (tid < BO) ((float2 *)(stage_ptr(st) + XS_BYTES + WS_BYTES + RS_BYTES))[tid] = make_float2(s, __fsub_rn(b, __fmul_rn(128.f, s)));
    };
    auto scale_ld = [&](int kb, float *s, float *b) {
        const int64_t gi = (int64_t)srow * ng + ((kb * KB) >> a.lg);
        *s = load_s(wsc, a.sdt, gi);
        *b = load_s(wbi, a.sdt, gi);
    };

#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < a.nkb) {
            issue(st, st);
            if (tid < BO) {
                float s, b;
                scale_ld(st, &s, &b);
                scale_put(st, s, b);
            }
        }
        cp_commit();
    }

    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
    const float zero[4] = {0.f, 0.f, 0.f, 0.f};

    for (int kb = 0; kb < a.nkb; kb++) {
        cp_wait<STAGES - 2>();
        __syncthreads(); /* stage kb has landed for every thread; stage kb - 1 is free */
        const int nk = kb + STAGES - 1, nst = nk % STAGES;
        float ns = 0.f, nb = 0.f;
        if (nk < a.nkb) {
            issue(nk, nst);
            if (tid < BO) scale_ld(nk, &ns, &nb); /* stored after this stage's products: the load's wait is hidden */
        }
        cp_commit();

        const uint8_t *S = stage_ptr(kb % STAGES);
        const uint8_t *Ws = S + XS_BYTES;
        const float *RS = (const float *)(S + XS_BYTES + WS_BYTES);
        const float2 *SS = (const float2 *)(S + XS_BYTES + WS_BYTES + RS_BYTES);
        /* A: rows g and g + 8 of each m16 tile, words 2t and 2t + 1 */
        uint2 wlo[2], whi[2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            const int ro = wo * 32 + mi * 16 + g;
            wlo[mi] = *(const uint2 *)(Ws + ro * 32 + t * 8);
            whi[mi] = *(const uint2 *)(Ws + (ro + 8) * 32 + t * 8);
        }
        /* B: ldmatrix rows = x rows, lane L gives row L % 8 of matrix L / 8:
         * (n8 tile jp + L / 16, k half (L / 8) % 2) */
        const uint32_t xbase = smem_u32(S) + (uint32_t)((wt * 32 + ((lane >> 4) * 8) + (lane & 7)) * (XP * 2) +
                                                        ((lane >> 3) & 1) * 16);
        float D[2][4][4];
#pragma unroll
        for (int s = 0; s < 4; s++) {
            uint32_t A[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const uint32_t lo = (s >> 1) ? wlo[mi].y : wlo[mi].x, hi = (s >> 1) ? whi[mi].y : whi[mi].x;
                const int sh0 = 4 * (2 * (s & 1)), sh1 = sh0 + 4;
                A[mi][0] = nib2(lo, sh0), A[mi][1] = nib2(hi, sh0);
                A[mi][2] = nib2(lo, sh1), A[mi][3] = nib2(hi, sh1);
            }
#pragma unroll
            for (int jp = 0; jp < 2; jp++) {
                uint32_t B[4];
                ldsm_x4(B, xbase + jp * 16 * (XP * 2) + s * 32);
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    if (s == 0) { /* a fresh block sum: C = 0 */
                        mma_bf16(D[mi][2 * jp], A[mi], B[0], B[1], zero);
                        mma_bf16(D[mi][2 * jp + 1], A[mi], B[2], B[3], zero);
                    } else {
                        mma_bf16(D[mi][2 * jp], A[mi], B[0], B[1], D[mi][2 * jp]);
                        mma_bf16(D[mi][2 * jp + 1], A[mi], B[2], B[3], D[mi][2 * jp + 1]);
                    }
                }
            }
        }
        /* the block's scale step: acc += s_o D + (b_o - 128 s_o) X_t */
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            const int ro = wo * 32 + mi * 16 + g;
            const float2 sl = SS[ro], sh = SS[ro + 8];
#pragma unroll
            for (int nj = 0; nj < 4; nj++) {
                const float2 xr = *(const float2 *)(RS + wt * 32 + nj * 8 + 2 * t);
                float *c = acc[mi][nj];
                const float *d = D[mi][nj];
                c[0] = __fmaf_rn(sl.x, d[0], __fmaf_rn(sl.y, xr.x, c[0]));
                c[1] = __fmaf_rn(sl.x, d[1], __fmaf_rn(sl.y, xr.y, c[1]));
                c[2] = __fmaf_rn(sh.x, d[2], __fmaf_rn(sh.y, xr.x, c[2]));
                c[3] = __fmaf_rn(sh.x, d[3], __fmaf_rn(sh.y, xr.y, c[3]));
            }
        }
        if (nk < a.nkb) scale_put(nst, ns, nb);
    }
    cp_wait<0>();

    /* rows (g, g + 8) x columns (2t, 2t + 1) of each tile: outputs x x rows */
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nj = 0; nj < 4; nj++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int o = o0 + wo * 32 + mi * 16 + g + (e >> 1) * 8, r = t0 + wt * 32 + nj * 8 + 2 * t + (e & 1);
                const int ro = a.omap && r < tend ? a.omap[r] : r;
                if (o < w.rows && r < tend && ro >= 0) w.y[(int64_t)ro * w.rows + o] = acc[mi][nj][e];
            }
}

int npad_of(int n) { return (n + BT - 1) / BT * BT; }
/* the staged rows' block sums follow their bf16 values in ws */
size_t xs_off(int npad, int K) { return al256((size_t)npad * (size_t)K * 2); }

} // namespace

extern "C" size_t tsc_gemm_ws_bytes(int n, int64_t cols) {
    if (n < 1 || cols < KB) return 0;
    const size_t np = (size_t)npad_of(n);
    return xs_off((int)np, (int)cols) + al256((size_t)(cols / KB) * np * sizeof(float));
}

extern "C" int tsc_gemm_takes(const tsc_weight *w) {
    return w->dtype == TS_DTYPE_U32 && w->bits == 4 && w->layout == TSC_LAYOUT_MLX && w->group >= KB &&
           w->group % KB == 0 && w->cols % KB == 0 && w->rows >= 1 && w->cols <= (1 << 24) &&
           (w->group & (w->group - 1)) == 0;
}

namespace {

/* x's rows staged into nst rows of ws (gathered through imap when given:
 * nmap entries, the rest zeros; else x's rows, zeros past n_src). */
void gemm_stage(tsc_ctx *c, const float *x, int n_src, int K, const int32_t *imap, int nmap, int nst, void *ws) {
    const int npad = npad_of(nst), nkb = K / KB;
    uint16_t *xb = (uint16_t *)ws;
    float *xs = (float *)((uint8_t *)ws + xs_off(npad, K));
    const int64_t items = (int64_t)npad * nkb;
    tsc_launch(c, k_gemm_xprep, dim3((unsigned)((items + 7) / 8)), dim3(256), 0, x, n_src, npad, K, xb, xs, imap, nmap);
    TSC_LAUNCHED(c, "tsc_linear_gemm (x to bf16)");
}

/* The product over nst staged rows: ntiles grouped tiles from the device
 * table (gidx: a gather at load), or nst / BT plain ones. */
void gemm_product(tsc_ctx *c, const tsc_weight *const *w, const int64_t *estride, int nw, int nst, const int4 *tiles,
                  int ntiles, const int32_t *gidx, const int32_t *omap, float *const *y, void *ws) {
    if (nw < 1 || nw > TSC_LIN_MAX || nst < 1 || !ws) {
        tsc_fail_(c, TS_E_ARG, "tsc_linear_gemm: %d weights, %d rows", nw, nst);
        return;
    }
    gm_args a;
    memset(&a, 0, sizeof a);
    int otiles = 0;
    for (int i = 0; i < nw; i++) {
        if (!tsc_gemm_takes(w[i]) || w[i]->cols != w[0]->cols || w[i]->group != w[0]->group ||
            w[i]->sdtype != w[0]->sdtype || w[i]->rows > (1 << 30)) {
            tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_linear_gemm: weight %d (%lld x %lld, %d-bit, group %d) does not fit the "
                      "kernel (4-bit MLX, group a multiple of 64, one shape of columns)", i, (long long)w[i]->rows,
                      (long long)w[i]->cols, w[i]->bits, w[i]->group);
            return;
        }
        a.w[i].data = (const uint8_t *)w[i]->data;
        a.w[i].scales = w[i]->scales, a.w[i].biases = w[i]->biases;
        a.w[i].y = y[i];
        a.w[i].rows = (int)w[i]->rows;
        a.w[i].tile0 = otiles;
        a.w[i].estride = estride ? estride[i] : 0;
        otiles += (int)((w[i]->rows + BO - 1) / BO);
    }
    a.nw = nw, a.sdt = w[0]->sdtype;
    int lg = 0;
    while ((1 << lg) < w[0]->group) lg++;
    a.lg = lg;
    a.K = (int)w[0]->cols, a.nkb = a.K / KB;
    a.n = nst, a.npad = npad_of(nst);
    a.tiles = tiles, a.omap = omap, a.gidx = gidx;
    a.xb = (const uint16_t *)ws;
    a.xs = (const float *)((const uint8_t *)ws + xs_off(a.npad, a.K));
    /* above the default 48 KB of dynamic shared memory: raised once per
     * device (tsc_blocks_per_sm remembers it), not a driver call a product */
    tsc_blocks_per_sm(c, (const void *)k_q4gemm, NT, SMEM, SMEM);
    const unsigned gx = tiles ? (unsigned)ntiles : (unsigned)(a.npad / BT);
    if (gx == 0) return;
    tsc_launch(c, k_q4gemm, dim3(gx, (unsigned)otiles), dim3(NT), (size_t)SMEM, a);
    TSC_LAUNCHED(c, "tsc_linear_gemm");
}

} // namespace

extern "C" void tsc_linear_gemm(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n,
                                void *ws) {
    TSC_GUARD(c);
    if (nw < 1 || n < 1) { tsc_fail_(c, TS_E_ARG, "tsc_linear_gemm: %d weights, %d rows", nw, n); return; }
    gemm_stage(c, x, n, (int)w[0]->cols, NULL, 0, n, ws);
    gemm_product(c, w, NULL, nw, n, NULL, 0, NULL, NULL, y, ws);
}

extern "C" void tsc_linear_gemm_grouped(tsc_ctx *c, const tsc_weight *const *w0, const int64_t *estride, int nw,
                                        const float *x, int n_src, const int32_t *imap, int nq, const int32_t *tiles,
                                        int ntiles, const int32_t *omap, float *const *y, void *ws) {
    TSC_GUARD(c);
    if (((uintptr_t)tiles & 15) != 0 || nq < 1) {
        tsc_fail_(c, TS_E_ARG, "tsc_linear_gemm_grouped: %d rows, the tile table 16-byte aligned", nq);
        return;
    }
    /* a tile reads 64 staged rows from its first: BT zero rows past the last */
    gemm_stage(c, x, n_src, (int)w0[0]->cols, imap, imap ? nq : 0, nq + BT, ws);
    gemm_product(c, w0, estride, nw, nq + BT, (const int4 *)tiles, ntiles, NULL, omap, y, ws);
}

extern "C" void tsc_gemm_stage(tsc_ctx *c, const float *x, int n_src, int64_t cols, int nst, void *ws) {
    TSC_GUARD(c);
    if (n_src < 1 || nst < 1 || cols % KB) { tsc_fail_(c, TS_E_ARG, "tsc_gemm_stage: %d rows of %lld", n_src, (long long)cols); return; }
    gemm_stage(c, x, n_src, (int)cols, NULL, 0, nst, ws);
}

extern "C" void tsc_gemm_staged(tsc_ctx *c, const tsc_weight *const *w0, const int64_t *estride, int nw, int nst,
                                const int32_t *tiles, int ntiles, const int32_t *gidx, const int32_t *omap,
                                float *const *y, void *ws) {
    TSC_GUARD(c);
    if (((uintptr_t)tiles & 15) != 0 || !tiles) { tsc_fail_(c, TS_E_ARG, "tsc_gemm_staged: a 16-byte aligned tile table"); return; }
    gemm_product(c, w0, estride, nw, nst, (const int4 *)tiles, ntiles, gidx, omap, y, ws);
}
