/* q4t.cu: 4-bit products on the tensor cores over a tiled weight layout
 * (TSC_LAYOUT_Q4T): the relayout made at upload, the dense products behind
 * tsc_linear / tsc_linear_swiglu / tsc_linear_addnorm, and the MoE expert
 * products by device ids (tsc_moe_linear, tsc_moe_combine).
 *
 * Owns: the Q4T layout, its kernels and launch plans. Does not own: the MLX
 * products and the other formats (linear.cu), uploads (ctx.cu calls the
 * relayout here).
 *
 * Layout. Rows are cut in tiles of 16 (the last padded with zeros), columns
 * in chunks of 64. A (tile, chunk) is 512 contiguous bytes: lane l = 4g + t of
 * a warp owns 16 of them, word kk (k-step kk: columns 16kk..16kk+15 of the
 * chunk) holding the 8 nibbles of that lane's mma.m16n8k16 A fragment: bits
 * 4j and 16+4j hold register j's two values (j = 0: row g, columns 2t, 2t+1;
 * 1: row g+8, same columns; 2, 3: the same rows at columns +8). So one
 * 16-byte load per lane feeds 4 mma k-steps (256 values per warp load), a
 * warp's loads are 512 contiguous bytes, and dequantization is one shift,
 * one LOP3 (nibble | 0x4300: the bf16 128 + q, exact) and one bf16x2
 * subtract of 128 per two values. Scales and biases: [tile][group][g] entries
 * of (s_g, b_g, s_g+8, b_g+8) in the stored dtype, so the 4 lanes of a row
 * pair read one 8-byte entry (16 for f32).
 *
 * Arithmetic. x is split at staging into bf16 hi = bf16(x) and lo = bf16(x -
 * hi) (|x - hi - lo| <= 2^-16 |x|), both as B columns: x row i is columns 2i
 * and 2i+1 of an 8-column B (4 x rows per mma), so the mma's f32 sums give
 * D = q . hi + q . lo per (row, group) with exact products; then per group
 * acc = fmaf(s, Dhi + Dlo, fmaf(b, sum(x), acc)), sum(x) in f32 over the
 * group (a fixed 8 x 8 tree). The error is <= 2^-16 sum|s q x| from the split
 * plus f32 sums: inside tests/test_cuda.c's 3e-5 of sum m|x|.
 * Row-exactness: the column split (KS), tile order, k-step order and every
 * f32 operation depend on the weight's shape only; a B column's sums do not
 * depend on the other columns' values, so row i of an n-row call has the
 * bits of a one-row call (tests/test_cuda.c checks by memcmp).
 *
 * Work. A virtual block of 8 warps is 8/KS tiles x KS column slices; blocks
 * are persistent (a grid of what fits, striding over the virtual blocks); KS
 * comes from the shape so that the virtual blocks fill the chip in whole
 * waves. Weights stream through a per-warp ring in shared memory (cp.async,
 * 4 stages of 4 chunks: 3 stages = 6 KiB a warp in flight while one is
 * used, 96 KiB an SM at 2 blocks), which runs ahead across virtual blocks.
 * The first stages are issued before waiting for the previous kernel
 * (programmatic dependent launch: weights never depend on it), then x is
 * staged once per block in shared memory, already split and in B-fragment
 * order (one LDS.128 per lane per two k-steps, arrays padded by 64 bytes:
 * conflict-free).
 *
 * Floors (H200, probe ~4.25 TB/s; INT4 g64 bf16: 0.5625 bytes a value):
 * head 248320 x 4096: 572 MB -> 135 us; 9B step 4.46 GB -> 1.05 ms. Ops:
 * per value ~1.5 issue slots (shift, LOP3, half a HSUB2, 1/8 HMMA, loads)
 * against a budget of ~4.4 slots a value at the copy rate (128 lanes a
 * clock per SM over 29 values a clock per SM): issue is not the limit; the
 * tensor cores run at ~12% of their mma.sync rate at 4 rows.
 * Prediction (before measuring): head >= 85% of the probe; 12288-row and
 * 8192-row products 75-85%; 4096 x 4096 ~60% (9.4 MB: 2 us of bytes against
 * ~1-2 us of start and tail); 4 rows <= 1.1x one row (the same loads, 4x the
 * mma work that is not the limit).
 * Measured (bench/cuda/RESULTS.md, H200, probe ~4.24 TB/s). Run 6, the
 * first version (each warp loaded 8 chunks into registers, then computed
 * them; 114 registers, 2 blocks an SM): head 37% of the probe (the MLX
 * kernel it replaces: 47%), 4096 x 4096 18%, gate+up 30%. Run 7, this
 * version (ring, batched staging; 75 registers): head 36%, 12288/8192-row
 * products 27-31%, 4096 x 4096 24%, far under the prediction (>= 80%).
 * Every size streams at the same ~1.55 TB/s once started (4096 x 4096 ~3.5
 * us fixed + 9.4 MB at 1.56 TB/s; the head 572 MB at 1.54 TB/s), so the
 * limit is a steady rate, not start-up: ~87 SM cycles per 512-byte chunk
 * with 16 warps an SM and 96 KiB of cp.async in flight. No counters were
 * read on this kernel (the one ncu call matched no kernel); the compiled
 * code points at instruction issue: ~142 PTX instructions a chunk in the
 * loop, two integer divisions a chunk (cc / cpg, (cc + 1) % cpg, ~20 SASS
 * instructions each) and ~25 for the producer: ~200 a chunk, 2.3 a cycle of
 * the SM's 4, against the ~48 counted above; the run-time-general paths cost
 * more than the dequantization. Then: the SM's limit on outstanding LSU
 * requests, one warp's in-order chain (LDS -> dequant -> 2 mma -> FMAs).
 * Branch cuda-speed-next: the shift-only loop and a bulk-copy ring, not yet
 * run on a GPU.
 */
#include <cuda_bf16.h>

#include "cuda/common.cuh"
#include "cuda/q4t.cuh"

namespace {

constexpr int WARPS = 8;
constexpr size_t XS_MAX = 144 * 1024; /* staged x per block (beside the 72 KiB weight ring) */
enum { XM_PLAIN, XM_SWIGLU, XM_ADDNORM };

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* nibbles at bits 4j and 16+4j of u as the bf16 pair (q_lo, q_hi), exact */
__device__ __forceinline__ uint32_t nib2(uint32_t u, int j) {
    const uint32_t v = ((u >> (4 * j)) & 0x000F000Fu) | 0x43004300u; /* 128 + q */
    uint32_t r;
    asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(v), "r"(0x43004300u));
    return r;
}

__device__ __forceinline__ float sb_val(uint32_t w, int hi, int sdt) {
    const uint16_t h = (uint16_t)(hi ? w >> 16 : w & 0xFFFF);
    return sdt == TS_DTYPE_F16 ? f16f(h) : bf16f(h);
}

struct q4_w {
    const uint4 *data;
    const uint8_t *sb;
    float *y;
    int tiles, rows, ks, vb0;
};

struct q4_args {
    q4_w w[TSC_LIN_MAX];
    int nw, nvb, cols, nc, ng, gsteps, sdt, sbw; /* sbw: bytes of a scale entry (8 or 16) */
    int n;                                      /* x rows staged (this pass) */
    int xm;
    const float *x0, *x1, *nwt; /* x (or g) rows, add (or u) rows, norm weight */
    float eps;
    float *xo, *uo;
    /* experts */
    int ex, nt, E, k, slot0, nslots, vps, x_per_slot, xrow0;
    const int32_t *ids;
    float *ey[2];
    int erows, etiles, eks;
};

struct q4_exp_tab {
    const uint4 *data[2][TSC_MOE_EMAX];
    const uint8_t *sb[2][TSC_MOE_EMAX];
};
struct q4_no_tab {
    int unused;
};
template <bool EX> struct tab_of { using type = q4_no_tab; };
template <> struct tab_of<true> { using type = q4_exp_tab; };

__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch() { asm volatile("griddepcontrol.launch_dependents;"); }

/* Stage n rows of x: arrays 2r (hi) and 2r+1 (lo) in B-fragment order, and
 * the groups' f32 sums (each group: 8 parts of G/8 consecutive columns, each
 * part summed in column order by one thread, the 8 parts added by a fixed
 * xor tree). XM_ADDNORM first computes the rows' norms (block 0 writes x_out
 * and u_out). Loads are float4 and issued in batches before their use (a
 * loop that waits for each load costs one L2 latency per iteration: run 6
 * spent ~5-8 us a product that way). */
template <int XM>
__device__ void stage(const q4_args &a, uint8_t *sm, float *sx, float *rn) {
    const int astr = a.cols * 2 + 64, nt = blockDim.x, c4 = a.cols / 4;
    if constexpr (XM == XM_ADDNORM) {
        __shared__ double red[32];
        for (int r = 0; r < a.n; r++) {
            const float4 *x0 = (const float4 *)(a.x0 + (int64_t)r * a.cols);
            const float4 *x1 = a.x1 ? (const float4 *)(a.x1 + (int64_t)r * a.cols) : nullptr;
            float4 *xo = a.xo && blockIdx.x == 0 ? (float4 *)(a.xo + (int64_t)r * a.cols) : nullptr;
            double ss = 0;
            for (int f0 = threadIdx.x; f0 < c4; f0 += 4 * nt) {
                float4 va[4], vb[4];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int f = f0 + k * nt;
                    if (f < c4) {
                        va[k] = x0[f];
                        vb[k] = x1 ? x1[f] : make_float4(0.f, 0.f, 0.f, 0.f);
                    }
                }
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int f = f0 + k * nt;
                    if (f < c4) {
                        float4 v = va[k];
                        if (x1) v = make_float4(__fadd_rn(v.x, vb[k].x), __fadd_rn(v.y, vb[k].y), __fadd_rn(v.z, vb[k].z),
                                                __fadd_rn(v.w, vb[k].w));
                        ss += (double)v.x * v.x;
                        ss += (double)v.y * v.y;
                        ss += (double)v.z * v.z;
                        ss += (double)v.w * v.w;
                        if (xo) xo[f] = v;
                    }
                }
            }
            ss = block_sum_d(ss, red);
            if (threadIdx.x == 0) rn[r] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / a.cols), a.eps)));
            __syncthreads();
        }
    }
    const int G = a.cols / a.ng, per = G / 8, prow = a.ng * 8, tot = a.n * prow;
    for (int base = 0; base < tot; base += 2 * nt) {
        float s[2] = {0.f, 0.f};
        for (int j0 = 0; j0 < per; j0 += 8) {
            const int nj = per - j0 < 8 ? per - j0 : 8; /* 4 or 8 */
            float4 A[2][2], B[2][2], W[2][2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int p = base + threadIdx.x + h * nt;
                if (p < tot) {
                    const int r = p / prow, c = (p - r * prow) * per + j0;
                    const int64_t o = (int64_t)r * a.cols + c;
#pragma unroll
                    for (int k = 0; k < 2; k++)
                        if (4 * k < nj) {
                            A[h][k] = *(const float4 *)(a.x0 + o + 4 * k);
                            if (XM != XM_PLAIN && a.x1) B[h][k] = *(const float4 *)(a.x1 + o + 4 * k);
                            if (XM == XM_ADDNORM) W[h][k] = *(const float4 *)(a.nwt + c + 4 * k);
                        }
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int p = base + threadIdx.x + h * nt;
                if (p < tot) {
                    const int r = p / prow, c = (p - r * prow) * per + j0;
                    const float r_n = XM == XM_ADDNORM ? rn[r] : 0.f;
#pragma unroll
                    for (int k = 0; k < 2; k++)
                        if (4 * k < nj) {
                            float v[4] = {A[h][k].x, A[h][k].y, A[h][k].z, A[h][k].w};
                            if constexpr (XM == XM_SWIGLU) {
                                const float u[4] = {B[h][k].x, B[h][k].y, B[h][k].z, B[h][k].w};
#pragma unroll
                                for (int e = 0; e < 4; e++) v[e] = __fmul_rn(silu_f(v[e]), u[e]);
                            } else if constexpr (XM == XM_ADDNORM) {
                                const float ad[4] = {B[h][k].x, B[h][k].y, B[h][k].z, B[h][k].w};
                                const float w[4] = {W[h][k].x, W[h][k].y, W[h][k].z, W[h][k].w};
#pragma unroll
                                for (int e = 0; e < 4; e++) {
                                    const float xv = a.x1 ? __fadd_rn(v[e], ad[e]) : v[e];
                                    v[e] = __fmul_rn(__fmul_rn(xv, r_n), w[e]);
                                }
                            }
#pragma unroll
                            for (int e = 0; e < 4; e++) s[h] = __fadd_rn(s[h], v[e]);
                            const int cc = c + 4 * k;
                            if (XM == XM_ADDNORM && blockIdx.x == 0 && a.uo)
                                *(float4 *)(a.uo + (int64_t)r * a.cols + cc) = make_float4(v[0], v[1], v[2], v[3]);
#pragma unroll
                            for (int e = 0; e < 4; e += 2) {
                                const int col = cc + e;
                                const __nv_bfloat162 hi = __floats2bfloat162_rn(v[e], v[e + 1]);
                                const __nv_bfloat162 lo = __floats2bfloat162_rn(__fsub_rn(v[e], __low2float(hi)),
                                                                                 __fsub_rn(v[e + 1], __high2float(hi)));
                                const int ks = col >> 4, kk = col & 15;
                                const int wi = (((ks >> 1) * 4 + ((kk & 7) >> 1)) * 4 + (ks & 1) * 2 + (kk >> 3));
                                ((uint32_t *)(sm + (2 * r) * astr))[wi] = *(const uint32_t *)&hi;
                                ((uint32_t *)(sm + (2 * r + 1) * astr))[wi] = *(const uint32_t *)&lo;
                            }
                        }
                }
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            /* the 8 parts of a group sit in 8 consecutive lanes (prow and nt
             * are multiples of 8); every lane takes part in the shuffles */
            float v = s[h];
            v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
            v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
            v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
            const int p = base + threadIdx.x + h * nt;
            if (p < tot && (p & 7) == 0) sx[p >> 3] = v;
        }
    }
}

/* Chunks [c0, c1) of slice sl of ks: equal slices rounded up to whole
 * groups (a group's sums are applied inside one slice). */
__device__ __forceinline__ void slice_of(const q4_args &a, int ks, int sl, int &c0, int &c1) {
    const int cpg = a.gsteps >= 4 ? a.gsteps >> 2 : 1;
    const int per = ((a.nc + ks - 1) / ks + cpg - 1) / cpg * cpg;
    c0 = min(a.nc, sl * per), c1 = min(a.nc, c0 + per);
}

/* Scale entry of (tile, group) for lane row-pair g: 2 words (16-bit) or 4 (f32). */
/* GEN = 0: 16-bit scales and groups >= 64 (the released checkpoints: two
 * words an entry, one entry a chunk, 8 chunks in flight); GEN = 1: any
 * (f32 entries of four words, group 32: two entries a chunk; 4 in flight). */
template <bool GEN> struct sbe_t { uint32_t v[GEN ? 4 : 2]; };

template <bool GEN>
__device__ __forceinline__ sbe_t<GEN> ld_sb(const uint8_t *sb, int64_t e, int sdt) {
    sbe_t<GEN> r;
    if (GEN && sdt == TS_DTYPE_F32) {
        const uint4 v = __ldg((const uint4 *)sb + e);
        r.v[0] = v.x, r.v[1] = v.y, r.v[GEN ? 2 : 0] = v.z, r.v[GEN ? 3 : 1] = v.w;
    } else {
        const uint2 v = __ldg((const uint2 *)sb + e);
        r.v[0] = v.x, r.v[1] = v.y;
    }
    return r;
}

template <bool GEN>
__device__ __forceinline__ void sb_dec(const sbe_t<GEN> &e, int sdt, float &s0, float &b0, float &s1, float &b1) {
    if (GEN && sdt == TS_DTYPE_F32)
        s0 = __uint_as_float(e.v[0]), b0 = __uint_as_float(e.v[1]), s1 = __uint_as_float(e.v[GEN ? 2 : 0]),
        b1 = __uint_as_float(e.v[GEN ? 3 : 1]);
    else s0 = sb_val(e.v[0], 0, sdt), b0 = sb_val(e.v[0], 1, sdt), s1 = sb_val(e.v[1], 0, sdt), b1 = sb_val(e.v[1], 1, sdt);
}

/* What virtual block vb asks of warp `warp`: the weight's arrays at the
 * tile, the chunk range, where the rows go. empty: nothing to load. */
struct vbi {
    const uint4 *dp;     /* the tile's data */
    const uint8_t *sbp;  /* the tile's scale entries */
    float *yo;
    int rows, tiles, ks, tile, t0, xr, c0, c1, zero;
};

template <bool EX>
__device__ __forceinline__ vbi decode_vb(const q4_args &a, const typename tab_of<EX>::type &tb, int vb, int warp) {
    vbi v;
    v.zero = 0, v.xr = 0;
    const uint4 *data;
    const uint8_t *sb;
    int tl;
    if constexpr (EX) {
        const int per_tab = a.nslots * a.vps, tbi = vb / per_tab, rem = vb - tbi * per_tab, s = rem / a.vps;
        const int slot = a.slot0 + s, e = a.ids[slot];
        v.zero = e < 0 || e >= a.E;
        const int ee = v.zero ? 0 : e;
        data = tb.data[tbi][ee], sb = tb.sb[tbi][ee];
        v.rows = a.erows, v.tiles = a.etiles, v.ks = a.eks;
        v.t0 = (rem - s * a.vps) * (WARPS / v.ks);
        v.yo = a.ey[tbi] + (int64_t)slot * v.rows;
        v.xr = (a.x_per_slot ? slot : slot / a.k) - a.xrow0;
    } else {
        int wi = 0;
        while (wi + 1 < a.nw && vb >= a.w[wi + 1].vb0) wi++;
        const q4_w &w = a.w[wi];
        data = w.data, sb = w.sb, v.yo = w.y, v.rows = w.rows, v.tiles = w.tiles, v.ks = w.ks;
        v.t0 = (vb - w.vb0) * (WARPS / v.ks);
    }
    tl = warp / v.ks;
    v.tile = v.t0 + tl;
    slice_of(a, v.ks, warp % v.ks, v.c0, v.c1);
    if (v.tile >= v.tiles || v.zero) v.c1 = v.c0;
    v.dp = data + (int64_t)v.tile * a.nc * 32;
    v.sbp = sb + (int64_t)v.tile * a.ng * 8 * a.sbw;
    return v;
}

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* The weight ring: per warp RS stages of RU chunks, each chunk 512 bytes of
 * data (lane l's 16 at 16 l) and the 8 row pairs' scale entries (64 bytes,
 * 16-bit scales; GEN weights read their entries from global memory). Each
 * lane copies its own 16 bytes (cp.async), lane t == 0 of a row pair its
 * entry; a warp barrier after the wait makes the entries visible to the
 * other 3 lanes of the pair. RS - 1 stages are in flight while one is used:
 * 3 x 4 x 512 = 6 KiB a warp, 48-96 KiB an SM. */
constexpr int RU = 4, RS = 4, RCH = 576, RING = WARPS * RS * RU * RCH;

template <bool GEN, bool EX>
struct producer {
    int vb, ch, c1;
    const uint4 *dp;
    const uint8_t *sbp;
    int slot;
    __device__ __forceinline__ void next_item(const q4_args &a, const typename tab_of<EX>::type &tb, int warp) {
        while (vb < a.nvb) {
            const vbi v = decode_vb<EX>(a, tb, vb, warp);
            if (v.c0 < v.c1) {
                ch = v.c0, c1 = v.c1, dp = v.dp, sbp = v.sbp;
                return;
            }
            vb += gridDim.x;
        }
    }
    __device__ __forceinline__ void issue(const q4_args &a, const typename tab_of<EX>::type &tb, uint8_t *ring, int warp) {
        const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        if (vb < a.nvb) {
            const int cpg = a.gsteps >= 4 ? a.gsteps >> 2 : 1;
            uint8_t *st = ring + slot * RU * RCH;
#pragma unroll
            for (int u = 0; u < RU; u++) {
                const int cc = ch + u;
                if (cc < c1) {
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(st + u * RCH + lane * 16)),
                                 "l"(dp + (int64_t)cc * 32 + lane));
                    if (!GEN && t == 0)
                        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_u32(st + u * RCH + 512 + g * 8)),
                                     "l"(sbp + ((int64_t)(cc / cpg) * 8 + g) * 8));
                }
            }
            ch += RU;
            if (ch >= c1) {
                vb += gridDim.x;
                next_item(a, tb, warp);
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        slot = slot + 1 == RS ? 0 : slot + 1;
    }
};

/* Consume one stage: chunks [ch, min(ch + RU, c1)) of the warp's item. NCB
 * column blocks of 4 x rows (EX: one x row, xr, in columns 0-1).
 * acc[cb][0..1]: rows g and g+8 of x row 4cb + t (EX: t == 0 holds it).
 * D[kp]: the two k-step pairs of a chunk sum into separate accumulators
 * (two independent mma chains), added at the group's end. */
template <int NCB, bool GEN, bool EX>
__device__ __forceinline__ void consume(const q4_args &a, const uint8_t *st, const uint8_t *sbg, int ch, int c1,
                                        const uint8_t *sm, const float *sx, int xr, float (&D)[2][NCB][4],
                                        float (&acc)[NCB][2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int astr = a.cols * 2 + 64;
    const bool g32 = GEN && a.gsteps == 2;
    const int cpg = g32 ? 1 : a.gsteps >> 2;
    const uint8_t *bsrc[NCB];
    int sxr[NCB];
#pragma unroll
    for (int cb = 0; cb < NCB; cb++) {
        if constexpr (EX) {
            bsrc[cb] = g < 2 ? sm + (2 * xr + g) * astr + t * 16 : nullptr;
            sxr[cb] = xr;
        } else {
            const int r = 4 * cb + (g >> 1);
            bsrc[cb] = r < a.n ? sm + (8 * cb + g) * astr + t * 16 : nullptr;
            sxr[cb] = 4 * cb + t < a.n ? 4 * cb + t : 0;
        }
    }
    auto apply = [&](const sbe_t<GEN> &e, int grp, int which) { /* which: 0, 1 (one pair), 2 (both) */
        float s0, b0, s1, b1;
        sb_dec<GEN>(e, a.sdt, s0, b0, s1, b1);
#pragma unroll
        for (int cb = 0; cb < NCB; cb++) {
            const float sxv = sx[sxr[cb] * a.ng + grp];
            float d0, d1;
            if (which == 2) {
                d0 = __fadd_rn(__fadd_rn(D[0][cb][0], D[1][cb][0]), __fadd_rn(D[0][cb][1], D[1][cb][1]));
                d1 = __fadd_rn(__fadd_rn(D[0][cb][2], D[1][cb][2]), __fadd_rn(D[0][cb][3], D[1][cb][3]));
            } else {
                d0 = __fadd_rn(D[which][cb][0], D[which][cb][1]);
                d1 = __fadd_rn(D[which][cb][2], D[which][cb][3]);
            }
            acc[cb][0] = __fmaf_rn(s0, d0, __fmaf_rn(b0, sxv, acc[cb][0]));
            acc[cb][1] = __fmaf_rn(s1, d1, __fmaf_rn(b1, sxv, acc[cb][1]));
#pragma unroll
            for (int k = 0; k < 2; k++)
                if (which == 2 || which == k) D[k][cb][0] = D[k][cb][1] = D[k][cb][2] = D[k][cb][3] = 0.f;
        }
    };
#pragma unroll
    for (int u = 0; u < RU; u++) {
        const int cc = ch + u;
        if (cc < c1) {
            const uint4 q = *(const uint4 *)(st + u * RCH + lane * 16);
            const uint32_t wv[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int kp = 0; kp < 2; kp++) {
                uint4 bf[NCB];
#pragma unroll
                for (int cb = 0; cb < NCB; cb++)
                    bf[cb] = bsrc[cb] ? *(const uint4 *)(bsrc[cb] + (cc * 2 + kp) * 64) : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t w = wv[kp * 2 + h];
                    const uint32_t a0 = nib2(w, 0), a1 = nib2(w, 1), a2 = nib2(w, 2), a3 = nib2(w, 3);
#pragma unroll
                    for (int cb = 0; cb < NCB; cb++)
                        mma16816(D[kp][cb], a0, a1, a2, a3, h ? bf[cb].z : bf[cb].x, h ? bf[cb].w : bf[cb].y);
                }
                if (g32) apply(ld_sb<GEN>(sbg, (int64_t)(2 * cc + kp) * 8 + g, a.sdt), 2 * cc + kp, kp);
            }
            if (!g32 && (cc + 1) % cpg == 0) {
                sbe_t<GEN> e;
                if constexpr (GEN) e = ld_sb<GEN>(sbg, (int64_t)(cc / cpg) * 8 + g, a.sdt);
                else {
                    const uint2 v = *(const uint2 *)(st + u * RCH + 512 + g * 8);
                    e.v[0] = v.x, e.v[1] = v.y;
                }
                apply(e, cc / cpg, 2);
            }
        }
    }
}

template <int NCB, int XM, bool GEN, bool EX>
__global__ void __launch_bounds__(WARPS * 32, 2)
    k_q4t(const __grid_constant__ q4_args a, const __grid_constant__ typename tab_of<EX>::type tb) {
    extern __shared__ __align__(16) uint8_t smd[];
    __shared__ float red[WARPS][16][EX ? 1 : 4 * NCB];
    __shared__ float rn[TSC_ROWS_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    uint8_t *ring = smd + warp * (RS * RU * RCH), *sm = smd + RING;
    const int astr = a.cols * 2 + 64;
    float *sx = (float *)(sm + 2 * a.n * astr);
    producer<GEN, EX> pr;
    pr.vb = blockIdx.x, pr.slot = 0, pr.ch = pr.c1 = 0, pr.dp = nullptr, pr.sbp = nullptr;
    /* dense: the first stages of weights before the previous kernel ends
     * (they never depend on it); experts wait for their ids */
    if constexpr (!EX) {
        pr.next_item(a, tb, warp);
        for (int i = 0; i < RS - 1; i++) pr.issue(a, tb, ring, warp);
    }
    griddep_wait();
    griddep_launch();
    if constexpr (EX) {
        pr.next_item(a, tb, warp);
        for (int i = 0; i < RS - 1; i++) pr.issue(a, tb, ring, warp);
    }
    stage<XM>(a, sm, sx, rn);
    __syncthreads();
    int cslot = 0;
    for (int vb = blockIdx.x; vb < a.nvb; vb += gridDim.x) {
        const vbi v = decode_vb<EX>(a, tb, vb, warp);
        const int nxr = EX ? 1 : a.n;
        float acc[NCB][2], D[2][NCB][4];
#pragma unroll
        for (int cb = 0; cb < NCB; cb++) {
            acc[cb][0] = acc[cb][1] = 0.f;
#pragma unroll
            for (int k = 0; k < 4; k++) D[0][cb][k] = D[1][cb][k] = 0.f;
        }
        for (int ch = v.c0; ch < v.c1; ch += RU) {
            pr.issue(a, tb, ring, warp);
            asm volatile("cp.async.wait_group %0;" ::"n"(RS - 1) : "memory");
            __syncwarp();
            consume<NCB, GEN, EX>(a, ring + cslot * RU * RCH, v.sbp, ch, v.c1, sm, sx, v.xr, D, acc);
            __syncwarp();
            cslot = cslot + 1 == RS ? 0 : cslot + 1;
        }
        const int r0 = v.tile * 16 + g;
        if (v.ks == 1) {
            if (v.tile < v.tiles) {
#pragma unroll
                for (int cb = 0; cb < NCB; cb++) {
                    const int xi = EX ? (t == 0 ? 0 : 99) : 4 * cb + t;
                    if (xi < nxr) {
                        if (r0 < v.rows) v.yo[(int64_t)xi * v.rows + r0] = acc[cb][0];
                        if (r0 + 8 < v.rows) v.yo[(int64_t)xi * v.rows + r0 + 8] = acc[cb][1];
                    }
                }
            }
            continue; /* ks is uniform over the block */
        }
        constexpr int NX = EX ? 1 : 4 * NCB;
#pragma unroll
        for (int cb = 0; cb < NCB; cb++) {
            const int xi = EX ? (t == 0 ? 0 : 99) : 4 * cb + t;
            if (xi < NX) red[warp][g][xi] = acc[cb][0], red[warp][g + 8][xi] = acc[cb][1];
        }
        __syncthreads();
        const int ks = v.ks, tpb = WARPS / ks;
        for (int idx = threadIdx.x; idx < tpb * 16 * nxr; idx += blockDim.x) {
            const int tl = idx / (16 * nxr), r = idx / nxr % 16, xi = idx % nxr;
            float s = red[tl * ks][r][xi];
            for (int q = 1; q < ks; q++) s = __fadd_rn(s, red[tl * ks + q][r][xi]);
            const int ti = v.t0 + tl, row = ti * 16 + r;
            if (ti < v.tiles && row < v.rows) v.yo[(int64_t)xi * v.rows + row] = s;
        }
        __syncthreads();
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

/* ---- relayout ---- */

__global__ void k_q4t_data(const uint32_t *__restrict__ src, int64_t rows, int cols, uint4 *dst, int64_t total) {
    const int nc = cols / 64, wpr = cols / 8;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * blockDim.x) {
        const int lane = (int)(idx & 31), g = lane >> 2, t = lane & 3;
        const int64_t tc = idx >> 5, tile = tc / nc;
        const int ch = (int)(tc - tile * nc);
        uint32_t w[4];
        for (int kk = 0; kk < 4; kk++) {
            uint32_t u = 0;
            for (int e = 0; e < 8; e++) {
                const int64_t row = tile * 16 + g + 8 * ((e >> 1) & 1);
                const int col = ch * 64 + kk * 16 + 2 * t + (e & 1) + 8 * (e >> 2);
                uint32_t q = 0;
                if (row < rows) q = (src[row * wpr + col / 8] >> ((col & 7) * 4)) & 15u;
                u |= q << (4 * (e >> 1) + 16 * (e & 1));
            }
            w[kk] = u;
        }
        dst[idx] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

__global__ void k_q4t_sb(const uint8_t *__restrict__ s, const uint8_t *__restrict__ b, int es, int64_t rows, int ng,
                         uint8_t *dst, int64_t total) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * blockDim.x) {
        const int g = (int)(idx & 7);
        const int64_t tg = idx >> 3, tile = tg / ng;
        const int grp = (int)(tg - tile * ng);
        uint8_t *o = dst + idx * 4 * es;
        for (int h = 0; h < 2; h++) {
            const int64_t row = tile * 16 + g + 8 * h;
            for (int k = 0; k < es; k++) {
                o[(2 * h) * es + k] = row < rows ? s[(row * ng + grp) * es + k] : 0;
                o[(2 * h + 1) * es + k] = row < rows ? b[(row * ng + grp) * es + k] : 0;
            }
        }
    }
}

/* ---- plans ---- */

int64_t tiles_of(int64_t rows) { return (rows + 15) / 16; }

/* KS from the weight's shape (and the chip) only: the smallest split whose
 * virtual blocks fill whole waves of 2 blocks per SM to >= 90%, else the
 * best; at least 2 chunks a slice. */
int pick_ks(int64_t tiles, int nc, int n_sm) {
    const int64_t S = 2 * (int64_t)n_sm;
    int best = 1;
    double beff = -1;
    for (int ks = 1; ks <= WARPS; ks *= 2) {
        if (ks > 1 && nc / ks < 2) break;
        const int64_t tpb = WARPS / ks, vbs = (tiles + tpb - 1) / tpb, waves = (vbs + S - 1) / S;
        const double eff = (double)vbs / (double)(waves * S) * ((double)tiles / (double)(vbs * tpb));
        if (eff >= 0.9) return ks;
        if (eff > beff + 1e-9) beff = eff, best = ks;
    }
    return best;
}

size_t xs_for(int rows_staged, int cols, int ng) {
    return (size_t)2 * rows_staged * (cols * 2 + 64) + (size_t)rows_staged * ng * sizeof(float);
}
size_t smem_for(int rows_staged, int cols, int ng) { return RING + xs_for(rows_staged, cols, ng); }

int rows_per_pass(int cols, int ng) {
    int p = TSC_ROWS_MAX;
    while (p > 1 && xs_for(p, cols, ng) > XS_MAX) p--;
    return p;
}

template <int NCB, int XM, bool GEN, bool EX>
void launch(tsc_ctx *c, const q4_args &a, const q4_exp_tab *tb, size_t smem) {
    (void)tb;
    auto k = k_q4t<NCB, XM, GEN, EX>;
    const int per_sm = tsc_blocks_per_sm_dec(c, (const void *)k, WARPS * 32, smem, RING + XS_MAX);
    const int grid = a.nvb < per_sm * c->n_sm ? a.nvb : per_sm * c->n_sm;
    if constexpr (EX) tsc_launch(c, k, dim3(grid), dim3(WARPS * 32), smem, a, *tb);
    else tsc_launch(c, k, dim3(grid), dim3(WARPS * 32), smem, a, q4_no_tab{0});
}

template <int XM, bool GEN>
void launch_ncb(tsc_ctx *c, const q4_args &a, size_t smem) {
    switch ((a.n + 3) / 4) {
    case 1: launch<1, XM, GEN, false>(c, a, NULL, smem); break;
    case 2: launch<2, XM, GEN, false>(c, a, NULL, smem); break;
    case 3: launch<3, XM, GEN, false>(c, a, NULL, smem); break;
    default: launch<4, XM, GEN, false>(c, a, NULL, smem); break;
    }
}

bool gen_of(const tsc_weight *w) { return w->sdtype == TS_DTYPE_F32 || w->group < 64; }

void fill_common(q4_args &a, const tsc_weight *w0) {
    a.cols = (int)w0->cols;
    a.nc = a.cols / 64;
    a.ng = (int)(w0->cols / w0->group);
    a.gsteps = w0->group / 16;
    a.sdt = (int)w0->sdtype;
    a.sbw = 4 * (int)ts_dtype_size(w0->sdtype);
}

} // namespace

/* ---- entry points (q4t.cuh, tsc.h) ---- */

int q4t_shape_ok(const tsc_weight *w) {
    return w->dtype == TS_DTYPE_U32 && w->bits == 4 && w->cols % 64 == 0 && w->cols <= TSC_Q4T_MAX_COLS &&
           w->group >= 32 && (w->group & (w->group - 1)) == 0 && w->cols % w->group == 0 && w->rows < (1 << 30);
}

size_t q4t_data_bytes(const tsc_weight *w) { return (size_t)tiles_of(w->rows) * 16 * (size_t)w->cols / 2; }
size_t q4t_sb_bytes(const tsc_weight *w) {
    return (size_t)tiles_of(w->rows) * 16 * (size_t)(w->cols / w->group) * 2 * ts_dtype_size(w->sdtype);
}

void q4t_relayout(tsc_ctx *c, const tsc_weight *src, void *data, void *sb) {
    const int64_t t = tiles_of(src->rows), nd = t * (src->cols / 64) * 32, ns = t * (src->cols / src->group) * 8;
    k_q4t_data<<<(unsigned)((nd + 255) / 256 < 8192 ? (nd + 255) / 256 : 8192), 256, 0, c->stream>>>(
        (const uint32_t *)src->data, src->rows, (int)src->cols, (uint4 *)data, nd);
    TSC_LAUNCHED(c, "q4t relayout");
    k_q4t_sb<<<(unsigned)((ns + 255) / 256 < 8192 ? (ns + 255) / 256 : 8192), 256, 0, c->stream>>>(
        (const uint8_t *)src->scales, (const uint8_t *)src->biases, (int)ts_dtype_size(src->sdtype), src->rows,
        (int)(src->cols / src->group), (uint8_t *)sb, ns);
    TSC_LAUNCHED(c, "q4t relayout");
}

void q4t_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, int xm, const float *x0, const float *x1,
                const float *nwt, float eps, float *xo, float *uo, float *const *y, int n) {
    const void *ptrs[5] = {x0, x1, nwt, xo, uo};
    for (int i = 0; i < 5; i++)
        if ((uintptr_t)ptrs[i] & 15) {
            tsc_fail_(c, TS_E_ARG, "tsc_linear (q4t): activation pointer %p is not 16-byte aligned", ptrs[i]);
            return;
        }
    q4_args a;
    memset(&a, 0, sizeof a);
    fill_common(a, w[0]);
    a.nw = nw;
    a.xm = xm;
    a.eps = eps;
    a.nwt = nwt;
    int nvb = 0;
    for (int i = 0; i < nw; i++) {
        q4_w &lw = a.w[i];
        lw.data = (const uint4 *)w[i]->data;
        lw.sb = (const uint8_t *)w[i]->scales;
        lw.rows = (int)w[i]->rows;
        lw.tiles = (int)tiles_of(w[i]->rows);
        lw.ks = pick_ks(lw.tiles, a.nc, c->n_sm);
        lw.vb0 = nvb;
        const int tpb = WARPS / lw.ks;
        nvb += (lw.tiles + tpb - 1) / tpb;
    }
    a.nvb = nvb;
    const int P = rows_per_pass(a.cols, a.ng);
    for (int i0 = 0; i0 < n; i0 += P) {
        a.n = n - i0 < P ? n - i0 : P;
        const int64_t xoff = (int64_t)i0 * a.cols;
        a.x0 = x0 + xoff;
        a.x1 = x1 ? x1 + xoff : NULL;
        a.xo = xo ? xo + xoff : NULL;
        a.uo = uo ? uo + xoff : NULL;
        for (int i = 0; i < nw; i++) a.w[i].y = y[i] + (int64_t)i0 * w[i]->rows;
        const size_t smem = smem_for(a.n, a.cols, a.ng);
        switch (xm * 2 + gen_of(w[0])) {
        case 0: launch_ncb<XM_PLAIN, false>(c, a, smem); break;
        case 1: launch_ncb<XM_PLAIN, true>(c, a, smem); break;
        case 2: launch_ncb<XM_SWIGLU, false>(c, a, smem); break;
        case 3: launch_ncb<XM_SWIGLU, true>(c, a, smem); break;
        case 4: launch_ncb<XM_ADDNORM, false>(c, a, smem); break;
        default: launch_ncb<XM_ADDNORM, true>(c, a, smem); break;
        }
        TSC_LAUNCHED(c, "tsc_linear (q4t)");
    }
}

/* ---- entry points: MoE ---- */

extern "C" void tsc_moe_linear(tsc_ctx *c, const tsc_weight *const *tab, int nt, int E, const int32_t *ids, int n, int k,
                               const float *x, const float *u, int x_per_slot, float *const *y) {
    TSC_GUARD(c);
    if (nt < 1 || nt > 2 || E < 1 || E > TSC_MOE_EMAX || n < 1 || n > TSC_ROWS_MAX || k < 1 || k > 32) {
        tsc_fail_(c, TS_E_ARG, "tsc_moe_linear: %d tables of %d experts, %d rows, top %d (1..2, 1..%d, 1..%d, 1..32)",
                  nt, E, n, k, TSC_MOE_EMAX, TSC_ROWS_MAX);
        return;
    }
    const tsc_weight *w0 = &tab[0][0];
    for (int t = 0; t < nt; t++)
        for (int e = 0; e < E; e++) {
            const tsc_weight *w = &tab[t][e];
            if (w->layout != TSC_LAYOUT_Q4T || w->rows != w0->rows || w->cols != w0->cols || w->group != w0->group ||
                w->sdtype != w0->sdtype) {
                tsc_fail_(c, TS_E_UNSUPPORTED,
                          "tsc_moe_linear: expert %d of table %d is not a Q4T weight of table 0's shape (%lld x %lld)", e,
                          t, (long long)w0->rows, (long long)w0->cols);
                return;
            }
        }
    static q4_exp_tab tb; /* copied into the launch's parameters */
    for (int t = 0; t < nt; t++)
        for (int e = 0; e < E; e++) tb.data[t][e] = (const uint4 *)tab[t][e].data, tb.sb[t][e] = (const uint8_t *)tab[t][e].scales;
    if (((uintptr_t)x | (uintptr_t)u) & 15) {
        tsc_fail_(c, TS_E_ARG, "tsc_moe_linear: x or u is not 16-byte aligned");
        return;
    }
    q4_args a;
    memset(&a, 0, sizeof a);
    fill_common(a, w0);
    a.ex = 1, a.nt = nt, a.E = E, a.k = k, a.ids = ids, a.x_per_slot = x_per_slot;
    a.erows = (int)w0->rows;
    a.etiles = (int)tiles_of(w0->rows);
    a.eks = pick_ks((int64_t)a.etiles * 8, a.nc, c->n_sm); /* from the expert's shape only (8: a typical top k) */
    const int tpb = WARPS / a.eks;
    a.vps = (a.etiles + tpb - 1) / tpb;
    a.xm = u ? XM_SWIGLU : XM_PLAIN;
    for (int t = 0; t < nt; t++) a.ey[t] = y[t];
    const int nslots = n * k, P = rows_per_pass(a.cols, a.ng);
    /* passes over the slots so that their x rows fit the staging */
    const int spp = x_per_slot ? P : P * k;
    for (int s0 = 0; s0 < nslots; s0 += spp) {
        a.slot0 = s0;
        a.nslots = nslots - s0 < spp ? nslots - s0 : spp;
        a.xrow0 = x_per_slot ? s0 : s0 / k;
        const int xrow1 = x_per_slot ? s0 + a.nslots : (s0 + a.nslots - 1) / k + 1;
        a.n = xrow1 - a.xrow0;
        a.x0 = x + (int64_t)a.xrow0 * a.cols;
        a.x1 = u ? u + (int64_t)a.xrow0 * a.cols : NULL;
        a.nvb = nt * a.nslots * a.vps;
        const size_t smem = smem_for(a.n, a.cols, a.ng);
        switch ((u ? 2 : 0) + gen_of(w0)) {
        case 0: launch<1, XM_PLAIN, false, true>(c, a, &tb, smem); break;
        case 1: launch<1, XM_PLAIN, true, true>(c, a, &tb, smem); break;
        case 2: launch<1, XM_SWIGLU, false, true>(c, a, &tb, smem); break;
        default: launch<1, XM_SWIGLU, true, true>(c, a, &tb, smem); break;
        }
        TSC_LAUNCHED(c, "tsc_moe_linear");
    }
}

namespace {
__global__ void k_moe_combine(const float *ye, const float *wts, int k, const float *ys, const float *gs, float *t, int H) {
    griddep_wait();
    griddep_launch();
    const int i = blockIdx.y;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < H; c += gridDim.x * blockDim.x) {
        float v = 0.f;
        for (int j = 0; j < k; j++) v = __fmaf_rn(wts[i * k + j], ye[((int64_t)i * k + j) * H + c], v);
        if (ys) v = __fmaf_rn(sigmoid_f(gs[i]), ys[(int64_t)i * H + c], v);
        t[(int64_t)i * H + c] = v;
    }
}
} // namespace

extern "C" void tsc_moe_combine(tsc_ctx *c, const float *ye, const float *wts, int n, int k, const float *ys,
                                const float *gs, float *t, int H) {
    TSC_GUARD(c);
    if (n < 1 || n > 65535 || k < 1 || H < 1) { tsc_fail_(c, TS_E_ARG, "tsc_moe_combine: %d rows, top %d, %d", n, k, H); return; }
    tsc_launch(c, k_moe_combine, dim3((H + 255) / 256 < 32 ? (H + 255) / 256 : 32, n), dim3(256), 0, ye, wts, k, ys, gs, t, H);
    TSC_LAUNCHED(c, "tsc_moe_combine");
}
