/* attn.cu: gated attention decode over the KV cache, n rows (tsc_attn_decode).
 *
 * Owns: the three kernels of the attention block between its projections:
 * prep (q/k (1+w) RMSNorm per head, NeoX RoPE on the first rot dims, K/V
 * append), split (one block per (row, KV head, piece of TSC_ATTN_SPLIT keys):
 * the scores of the KV head's nq/nkv query heads, their piece-local softmax
 * max and sum, the piece's weighted V sum), combine (per row and query head:
 * the pieces in order, rescaled to the common max, divided by the total, times
 * sigmoid(gate)). The same kernels serve DFlash's draft layers (backend.cu's
 * block mask): ungated queries (no_gate) and rows that only append their
 * keys (no_q); a block row attends like the causal row at the block's end.
 * Does not own: q/k/v/o projections (linear.cu), the cache's allocation, the
 * choice of rows and lengths of a mask (backend.cu).
 *
 * Why this shape: at decode a row reads the whole cache once; one block per
 * KV head would pull it through nkv SMs (4 for the 9B), so the sequence is
 * split. The piece size is a constant: the split depends only on the row's
 * own length, so rows are exact across n. K/V are read once per KV head for
 * all of its query heads (GQA).
 *
 * Floors (H200, 9B attention layer: nq 16, nkv 4, D 256, f32 cache, one row,
 * T cached rows): K+V = T * 8 KiB -> at T = 4096, 32 MiB -> ~8 us at 4.3 TB/s;
 * 4 flop per cached element per query head -> ~0.5 Gflop at T = 4096 -> ~8 us
 * at 67 TFLOP/s f32: both floors meet around there (GQA 4: each K/V element
 * feeds 4 query heads). At T = 512: ~1 us of bytes; launch-bound.
 * Prediction: ~6-8 us for the three kernels at T = 512; ~2x the byte floor
 * at T = 4096 (scores go through shared memory). Measured (run4): 19 us at
 * T = 513 (run1 with pieces of 64 and a serial combine: 34 us), 118 us at
 * T = 8192 (67 MB of K+V: 570 GB/s, 13% of the probe: each piece is a
 * block with little in flight; far from the floor). Session 17: the split
 * kernel 22 us at T = 518 alone (ncu); with each sub-chunk's K/V staged in
 * shared memory at once (KV, below) the 9B engine at 4096 tokens of context
 * 371 -> 387 tok/s, unchanged at 512 (bench/cuda/RESULTS.md).
 */
#include "cuda/common.cuh"

namespace {

constexpr int SPL = TSC_ATTN_SPLIT, GMAX = 16, DMAX = 256;

/* The position of row 0: a.pos, plus the device step record's position when
 * a.pos_dev is set (a captured graph replays with the record's value). */
__device__ __forceinline__ int row_pos(const tsc_attn_args &a) { return a.pos + (a.pos_dev ? *a.pos_dev : 0); }
/* the position of the call's row i: row 0's plus i, or row 0's for every row
 * (same_pos: DFlash's block rows all attend as the row at pos) */
__device__ __forceinline__ int row_pos_of(const tsc_attn_args &a, int i) { return row_pos(a) + (a.same_pos ? 0 : i); }
/* floats from one query head to the next: [q | gate] pairs, or queries alone */
__device__ __forceinline__ int q_width(const tsc_attn_args &a) { return a.no_gate ? a.D : 2 * a.D; }
/* keys per piece of a row of length T: with np_max, the finest multiple of
 * SPL that keeps the pieces at np_max or fewer; else a.split (a multiple of
 * SPL), else SPL */
__host__ __device__ __forceinline__ int piece_at(const tsc_attn_args &a, int T) {
    if (a.np_max > 0) {
        const int64_t span = (int64_t)SPL * a.np_max;
        return SPL * (int)((T + span - 1) / span);
    }
    return a.split ? a.split : SPL;
}
/* the workspace's pieces a row and head */
__host__ __device__ __forceinline__ int slots_of(const tsc_attn_args &a) {
    const int P = a.split ? a.split : SPL;
    return a.np_max > 0 ? a.np_max : (a.max_T + P - 1) / P;
}

/* k_attn_prep's arithmetic: the (1 + w) RMSNorm's factor from a head's sum
 * of squares, and dim d's RoPE (the CPU's f32 angle: inv = 1 /
 * theta^(2j/rot), a = pos * inv; the power and the cosine in double,
 * rounded once) */
__device__ __forceinline__ float prep_factor(double ss, int D, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / D), eps)));
}
__device__ __forceinline__ float rope_inv(const tsc_attn_args &a, int d, int half) {
    const int jj = d < half ? d : d - half;
    const float e = __fdiv_rn((float)(2 * jj), (float)a.rot);
    return __fdiv_rn(1.0f, (float)pow((double)a.theta, (double)e));
}
__device__ __forceinline__ void rope_cs(float inv, int p, float &cs, float &sn) {
    const float ang = __fmul_rn((float)p, inv);
    cs = (float)cos((double)ang), sn = (float)sin((double)ang);
}
__device__ __forceinline__ float rope_out(const float *ys, int d, int half, float cs, float sn) {
    return d < half ? __fsub_rn(__fmul_rn(ys[d], cs), __fmul_rn(ys[d + half], sn))
                    : __fadd_rn(__fmul_rn(ys[d], cs), __fmul_rn(ys[d - half], sn));
}

/* EA (ctx.attn_early, the default; TSC_ATTN_EARLY=0 off): dim d's RoPE (a
 * double power and two double cosines, a chain of dependent double-precision
 * arithmetic on the prep's path) made before the PDL wait: it depends only
 * on the row's position, whose step record was written before the pass
 * began (gdn.cu's P). The same operations: the same bits. With the
 * combine's gate loaded before its wait (k_attn_combine's EA), measured
 * (s39-run2, H100, interleaved): 9B decode 457.6 -> 460.7 tok/s (+0.7%;
 * predicted +0.4-0.7%), 35B-A3B-8L 2,055 -> 2,074 (+0.9%), 9B MTP 3 verify
 * 3.137 -> 3.123 ms a block. (Session 39 also put the prep's work in the
 * split's blocks, one launch fewer, and the combine in the split's tail,
 * the block completing a row's pieces combining its KV head's query heads:
 * both exact, both losses, removed: the first -1.5% on the 9B with its
 * angles after the wait and even with them before, -0.9% on 35B-A3B-8L;
 * the second -10% on the 9B, 35B-A3B-8L -15%: bench/cuda/RESULTS.md.) */
template <bool E, bool EA = false>
__global__ void k_attn_prep(const tsc_attn_args a) {
    float ecs = 0.f, esn = 0.f;
    if constexpr (EA)
        if ((int)threadIdx.x < a.rot) rope_cs(rope_inv(a, threadIdx.x, a.rot / 2), row_pos(a) + (int)blockIdx.y, ecs, esn);
    TSC_ENTRY(E);
    __shared__ double red[32];
    __shared__ float ys[DMAX];
    const int i = blockIdx.y, hd = blockIdx.x, d = threadIdx.x, D = a.D, kvdim = a.nkv * a.D;
    const int pos = row_pos(a);
    if (pos + i >= a.max_T) return; /* a device position past the cache: nothing written */
    const int nqh = a.no_q ? 0 : a.nq; /* query heads of the row (blocks [0, nqh)), then its key heads */
    const bool isq = hd < nqh;
    const int kh = hd - nqh;
    float *x = isq ? a.qg + ((int64_t)i * a.nq + hd) * q_width(a) : a.k + (int64_t)i * kvdim + (int64_t)kh * D;
    const float *w = isq ? a.q_norm : a.k_norm;
    const float v = x[d];
    const double ss = block_sum_d((double)v * v, red);
    const float y = __fmul_rn(__fmul_rn(v, prep_factor(ss, D, a.eps)), w[d]);
    ys[d] = y;
    __syncthreads();
    float out = y;
    const int half = a.rot / 2;
    if (d < a.rot) {
        float cs = ecs, sn = esn;
        if constexpr (!EA) rope_cs(rope_inv(a, d, half), pos + i, cs, sn);
        out = rope_out(ys, d, half, cs, sn);
    }
    x[d] = out;
    if (!isq) {
        const int64_t o = (int64_t)(pos + i) * kvdim + (int64_t)kh * D + d;
        a.Kc[o] = out;
        a.Vc[o] = a.v[(int64_t)i * kvdim + (int64_t)kh * D + d];
    }
}

/* The online softmax of one sub-chunk of nt scores per query head (warps
 * over heads, lanes over keys): the chunk's max against the running one, the
 * scores replaced by their exponentials, the running sum rescaled (frow: the
 * factor the running o takes). k_attn_split's and k_attn_split_lk's. */
__device__ __forceinline__ void chunk_softmax(float (*sc)[SPL], float *mrow, float *lrow, float *frow, int G, int nt,
                                              int c0, int warp, int lane) {
    for (int hh = warp; hh < G; hh += 8) {
        float mx = -INFINITY;
        for (int tt = lane; tt < nt; tt += 32) mx = fmaxf(mx, sc[hh][tt]);
        mx = warp_max(mx);
        const float mo = c0 ? mrow[hh] : -INFINITY, mn = fmaxf(mo, mx);
        float l = 0.f;
        for (int tt = lane; tt < nt; tt += 32) {
            const float e = expf(__fsub_rn(sc[hh][tt], mn));
            sc[hh][tt] = e;
            l = __fadd_rn(l, e);
        }
        l = warp_sum(l);
        __syncwarp(); /* every lane has read mrow[hh] (mo) before lane 0 rewrites it */
        if (lane == 0) {
            const float f = c0 ? expf(__fsub_rn(mo, mn)) : 1.0f;
            frow[hh] = f;
            mrow[hh] = mn;
            lrow[hh] = c0 ? __fmaf_rn(lrow[hh], f, l) : l;
        }
    }
}

/* The splits' staging loads: a thread's u-th float4 of the sub-chunk's nt
 * key and value rows (e = t + 256 u: key e / d4, column e % d4, tot = nt *
 * d4), every load issued before any is used. Each kernel stores them in
 * its own shared-memory layout. */
template <int PT>
__device__ __forceinline__ void load_kv4(const tsc_attn_args &a, int t0, int kvdim, int kh, int D, int d4, int tot,
                                         float4 (&kr4)[PT], float4 (&vr4)[PT]) {
#pragma unroll
    for (int u = 0; u < PT; u++) {
        const int e = threadIdx.x + u * 256;
        if (e < tot) {
            const int64_t o = ((int64_t)(t0 + e / d4) * kvdim + (int64_t)kh * D) / 4 + e % d4;
            kr4[u] = __ldg((const float4 *)a.Kc + o), vr4[u] = __ldg((const float4 *)a.Vc + o);
        }
    }
}

/* One output dim's running weighted V sum of every query head over a
 * sub-chunk: o rescaled by frow after the first chunk, then the nt values
 * (vc, vstride floats apart) times their weights, in key order. */
template <int GM = GMAX>
__device__ __forceinline__ void chunk_pv(float (&o)[GM], float (*sc)[SPL], const float *frow, const float *vc,
                                         int vstride, int nt, int G, int c0) {
    if (c0) {
#pragma unroll
        for (int hh = 0; hh < GM; hh++)
            if (hh < G) o[hh] = __fmul_rn(o[hh], frow[hh]);
    }
    /* unrolled: the V loads of several keys in flight, not one at a time */
#pragma unroll 8
    for (int tt = 0; tt < nt; tt++) {
        const float v = vc[(int64_t)tt * vstride];
#pragma unroll
        for (int hh = 0; hh < GM; hh++)
            if (hh < G) o[hh] = __fmaf_rn(sc[hh][tt], v, o[hh]);
    }
}

/* A piece's partials of output dim d: o per query head, then its max and sum */
template <int GM = GMAX>
__device__ __forceinline__ void store_partials(const tsc_attn_args &a, const float (&o)[GM], const float *mrow,
                                               const float *lrow, int i, int kh, int G, int s, int nsplit, int d) {
    const int D = a.D;
#pragma unroll
    for (int hh = 0; hh < GM; hh++)
        if (hh < G) {
            float *p = a.ws + (((int64_t)i * a.nq + kh * G + hh) * nsplit + s) * (D + 2);
            p[d] = o[hh];
            if (d == 0) p[D] = mrow[hh], p[D + 1] = lrow[hh];
        }
}

/* KV: each sub-chunk's keys and values are first copied into shared memory
 * by the whole block, every load in flight at once (16 float4 a thread at
 * 32 keys of D = 256), then read from there; without it a warp's key loads
 * and a thread's value loads came in ~6 dependent rounds a sub-chunk (ncu,
 * session 17: 22 us for this kernel at T = 518 on the 9B shape). The same
 * values in the same operations and order either way: the same bits
 * (cuda.attn_* compare the two forms). ctx.attn_kv (TSC_ATTN_KV=0: off). */
template <bool E, bool KV>
__global__ void __launch_bounds__(256) k_attn_split(const tsc_attn_args a, int nsplit) {
    TSC_ENTRY(E);
    extern __shared__ float4 kvs[]; /* KV: [SPL][D] keys, then [SPL][D] values */
    __shared__ float qs[GMAX][DMAX];
    __shared__ float sc[GMAX][SPL];
    __shared__ float mrow[GMAX], lrow[GMAX], frow[GMAX];
    const int kh = blockIdx.y, i = blockIdx.z;
    const int pos = row_pos_of(a, i);
    const int T = min(pos + 1, a.max_T), P = piece_at(a, T);
    if ((int)blockIdx.x * P >= T) return; /* no piece of this row for this block */
    const int D = a.D, G = a.nq / a.nkv, kvdim = a.nkv * D, M = D / 32;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)D));
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
        const int hh = e / D, d = e % D;
        qs[hh][d] = a.qg[((int64_t)i * a.nq + kh * G + hh) * q_width(a) + d];
    }
    /* The piece in sub-chunks of SPL keys (one when split == SPL: then the
     * arithmetic is exactly the one-chunk form): scores, the chunk's max and
     * sum, the weighted V sum; a later chunk rescales the running o and l by
     * exp(m_old - m_new) (flash-decoding). */
    const int d = threadIdx.x; /* D <= 256 = blockDim.x: one output dim a thread */
    /* pieces s, s + gridDim.x, ...: a grid smaller than the row's pieces
     * walks them (each piece's arithmetic and slot as with a block of its
     * own: the same bits); the next piece's first sub-chunk starts with a
     * barrier, so its shared memory is free of this one's */
    for (int s = blockIdx.x; s * P < T; s += gridDim.x) {
        const int p0 = s * P, pn = min(P, T - p0);
        float o[GMAX];
#pragma unroll
        for (int hh = 0; hh < GMAX; hh++) o[hh] = 0.f;
        for (int c0 = 0; c0 < pn; c0 += SPL) {
            const int t0 = p0 + c0, nt = min(SPL, pn - c0);
            __syncthreads();
            if constexpr (KV) {
                /* the sub-chunk's nt key and value rows (D / 4 float4 each):
                 * all of a thread's loads issued, then stored */
                constexpr int PT = SPL * DMAX / 4 / 256; /* float4 a thread and tensor, at most */
                const int d4 = D >> 2, tot = nt * d4;
                float4 kr4[PT], vr4[PT];
                load_kv4<PT>(a, t0, kvdim, kh, D, d4, tot, kr4, vr4);
#pragma unroll
                for (int u = 0; u < PT; u++) {
                    const int e = threadIdx.x + u * 256;
                    if (e < tot) kvs[e] = kr4[u], kvs[SPL * d4 + e] = vr4[u];
                }
                __syncthreads();
            }
        /* unrolled so that several keys' loads are in flight per warp */
#pragma unroll 2
            for (int tt = warp; tt < nt; tt += 8) {
                const float *kr = KV ? (const float *)kvs + tt * D : a.Kc + (int64_t)(t0 + tt) * kvdim + (int64_t)kh * D;
                float kv[DMAX / 32];
#pragma unroll
                for (int m = 0; m < DMAX / 32; m++) kv[m] = m < M ? kr[lane + 32 * m] : 0.f;
                for (int hh = 0; hh < G; hh++) {
                    float dot = 0.f;
#pragma unroll
                    for (int m = 0; m < DMAX / 32; m++)
                        if (m < M) dot = __fmaf_rn(qs[hh][lane + 32 * m], kv[m], dot);
                    dot = warp_sum(dot);
                    if (lane == 0) sc[hh][tt] = __fmul_rn(dot, scale);
                }
            }
            __syncthreads();
            chunk_softmax(sc, mrow, lrow, frow, G, nt, c0, warp, lane);
            __syncthreads();
            if (d < D) {
                const float *vc = KV ? (const float *)(kvs + SPL * (D >> 2)) + d : a.Vc + (int64_t)t0 * kvdim + (int64_t)kh * D + d;
                chunk_pv(o, sc, frow, vc, KV ? D : kvdim, nt, G, c0);
            }
        }
        if (d < D) store_partials(a, o, mrow, lrow, i, kh, G, s, nsplit, d);
    }
}

/* LK (ctx.attn_kv == 2, TSC_ATTN_KV=2): the same piece, sub-chunks, online
 * softmax and weighted V sum as k_attn_split<KV>, with the scores mapped a
 * lane a key. Why: there a warp took a key and summed its dot product over
 * the lanes with a shuffle tree, G times a key (4 heads x 4 keys a warp, a
 * ~150-cycle chain each: ~1.6 us a sub-chunk with 8 warps an SM to hide it),
 * and ncu put the split kernel at ~8 us a 32-key sub-chunk (session 17).
 * Here warp w takes query head w (w + 8, ...) and lane l key l of the
 * sub-chunk: a dot product is 256 FMAs in one thread (four accumulators over
 * d mod 4, added (0 + 1) + (2 + 3)), no shuffle; the keys sit in shared
 * memory with rows padded to D + 4 floats, so the 8 lanes of a 16-byte load
 * phase hit 8 different 4-bank groups, and the query row is one broadcast.
 * Another summation order than k_attn_split (a lane's sum instead of a
 * tree): tested against the CPU reference with the same tolerance, and its
 * n rows against n one-row calls bit for bit (the order depends on nothing
 * but the piece). Shared memory: 32 x 260 + 32 x 256 floats (66 KB) + qs.
 * Measured (H200, bench/cuda/RESULTS.md session 19): the 9B step's
 * attention (17.6 us a layer in the graph at 512 tokens: 13.8 of them split
 * and combine) 1.5-1.8 us a layer less, the step 2.039 -> 2.025 ms; not the
 * predicted ~1.3 us a sub-chunk: the split's scores were not its cost either.
 * The default (ctx.attn_kv 2).
 *
 * GC (session 40; ctx.attn_gc, the default; TSC_ATTN_GC=0: GC = 0, the form
 * above): the accumulators sized for the call's query heads a KV head (GC,
 * the power of two at or above G, not GMAX = 16), and the staging's
 * (key, column) of a thread's u-th float4 stepped from its first instead
 * of divided out each time. Why (ncu, s40-run3, the 9B at 512 tokens):
 * ~2,650 instructions a warp for one 32-key piece at ~6 cycles each, the
 * chain of the whole block: 1,180 of them the weighted V sum, where each
 * key took 16 predicated shared loads and FMAs for G = 4 heads, and ~600 the
 * staging's divisions by the runtime D / 4. The same loads, operations and
 * orders: the same bits (cuda.attn_* compare GC on and off). Floors: as
 * above (the bytes ~1 us); prediction: the split 8.7 -> ~5-6 us a layer
 * (the 9B +1-1.5%, more at long contexts). Measured (s40-run4, H100,
 * interleaved): 9B decode 465.4 -> 470.9 tok/s (+1.2%), after a 4,096-token
 * prompt 426.5 -> 430.5, MTP 3 at forced acceptance 793.8 -> 811.3 (verify
 * 3.114 -> 3.065 ms a block), 35B-A3B-8L 2,086.6 -> 2,105.6 (+0.9%). */
template <bool E, int GC = 0>
__global__ void __launch_bounds__(256) k_attn_split_lk(const tsc_attn_args a, int nsplit) {
    constexpr int GM = GC ? GC : GMAX; /* accumulators a thread */
    TSC_ENTRY(E);
    extern __shared__ float4 kvs[]; /* [SPL][D / 4 + 1] keys (padded), then [SPL][D / 4] values */
    __shared__ float4 qs4[GMAX][DMAX / 4];
    __shared__ float sc[GMAX][SPL];
    __shared__ float mrow[GMAX], lrow[GMAX], frow[GMAX];
    const int kh = blockIdx.y, i = blockIdx.z;
    const int pos = row_pos_of(a, i);
    const int T = min(pos + 1, a.max_T), P = piece_at(a, T);
    if ((int)blockIdx.x * P >= T) return; /* no piece of this row for this block */
    const int D = a.D, G = a.nq / a.nkv, kvdim = a.nkv * D, d4 = D >> 2, kst = d4 + 1;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)D));
    for (int e = threadIdx.x; e < G * d4; e += blockDim.x) {
        const int hh = e / d4, j = e % d4;
        qs4[hh][j] = *((const float4 *)(a.qg + ((int64_t)i * a.nq + kh * G + hh) * q_width(a)) + j);
    }
    float4 *vs = kvs + SPL * (DMAX / 4 + 1);
    const int d = threadIdx.x;
    /* GC: thread t's u-th float4 of the staging, e = t + 256 u, is key
     * e / d4, column e % d4: the first made once, the next ones by a step
     * of 256 / d4 keys and 256 % d4 columns, carried */
    const int k0 = (int)threadIdx.x / d4, col0 = (int)threadIdx.x % d4, kstep = 256 / d4, cstep = 256 % d4;
    for (int s = blockIdx.x; s * P < T; s += gridDim.x) { /* k_attn_split's walk over the pieces */
        const int p0 = s * P, pn = min(P, T - p0);
        float o[GM];
#pragma unroll
        for (int hh = 0; hh < GM; hh++) o[hh] = 0.f;
        for (int c0 = 0; c0 < pn; c0 += SPL) {
            const int t0 = p0 + c0, nt = min(SPL, pn - c0);
            __syncthreads();
            {
                constexpr int PT = SPL * DMAX / 4 / 256;
                const int tot = nt * d4;
                float4 kr4[PT], vr4[PT];
                if constexpr (GC) {
                    int key = k0, col = col0;
#pragma unroll
                    for (int u = 0; u < PT; u++) {
                        if (key < nt) { /* (e < tot) */
                            const int64_t off = ((int64_t)(t0 + key) * kvdim + (int64_t)kh * D) / 4 + col;
                            kr4[u] = __ldg((const float4 *)a.Kc + off), vr4[u] = __ldg((const float4 *)a.Vc + off);
                        }
                        key += kstep, col += cstep;
                        if (col >= d4) col -= d4, key++;
                    }
                    key = k0, col = col0;
#pragma unroll
                    for (int u = 0; u < PT; u++) {
                        if (key < nt) kvs[key * kst + col] = kr4[u], vs[key * d4 + col] = vr4[u];
                        key += kstep, col += cstep;
                        if (col >= d4) col -= d4, key++;
                    }
                } else {
                    load_kv4<PT>(a, t0, kvdim, kh, D, d4, tot, kr4, vr4);
#pragma unroll
                    for (int u = 0; u < PT; u++) {
                        const int e = threadIdx.x + u * 256;
                        if (e < tot) kvs[(e / d4) * kst + e % d4] = kr4[u], vs[e] = vr4[u];
                    }
                }
            }
            __syncthreads();
            for (int hh = warp; hh < G; hh += 8) {
                if (lane < nt) {
                    const float4 *kr = kvs + lane * kst, *qr = qs4[hh];
                    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll 8
                    for (int j = 0; j < d4; j++) {
                        const float4 k4 = kr[j], q4 = qr[j];
                        s0 = __fmaf_rn(q4.x, k4.x, s0), s1 = __fmaf_rn(q4.y, k4.y, s1);
                        s2 = __fmaf_rn(q4.z, k4.z, s2), s3 = __fmaf_rn(q4.w, k4.w, s3);
                    }
                    sc[hh][lane] = __fmul_rn(__fadd_rn(__fadd_rn(s0, s1), __fadd_rn(s2, s3)), scale);
                }
            }
            __syncthreads();
            chunk_softmax(sc, mrow, lrow, frow, G, nt, c0, warp, lane);
            __syncthreads();
            if (d < D) chunk_pv<GM>(o, sc, frow, (const float *)vs + d, D, nt, G, c0);
        }
        if (d < D) store_partials<GM>(a, o, mrow, lrow, i, kh, G, s, nsplit, d);
    }
}

/* k_attn_split_lk for the call: GC off (ctx.attn_gc 0) or the accumulators
 * for G query heads a KV head (G <= GMAX) */
template <bool E>
void (*split_lk_for(int gc_on, int G))(const tsc_attn_args, int) {
    if (!gc_on) return k_attn_split_lk<E, 0>;
    return G <= 1 ? k_attn_split_lk<E, 1> : G <= 2 ? k_attn_split_lk<E, 2> : G <= 4 ? k_attn_split_lk<E, 4>
         : G <= 8 ? k_attn_split_lk<E, 8> : k_attn_split_lk<E, 16>;
}

/* o_proj's 8-bit digits (tsc_attn_args.dg) from the combine's output ov of
 * column t of head h, row i: warp w of the block is one 32-column chunk of
 * the staged layout (the head's D columns are whole chunks and whole
 * groups), a group's max the largest of its dg_group / 32 warps' maxima
 * (through gm, one barrier), then stage_word's arithmetic for one digit
 * (L = 127; common.cuh's dig_scale, dig_round): the same max, sx, inverse
 * and rounding, the chunk's sum of X exact, so the same bytes as the
 * product's own staging of out (gdn.cu's gdn_digits writes the same layout
 * from a cluster's blocks; the two share no helper because moving that code
 * into one changed both kernels' machine code, which session 34 had no
 * device time left to measure). Why: o_proj's k_stage_digits launch (a launch,
 * its PDL hop and ~1 us of staging, 8 a 9B step and 8 a verify pass) cost
 * more than a barrier and a few shuffles in a kernel that runs anyway; the
 * rows are blocks of their own, so a verify's rows make theirs at once. */
__device__ __forceinline__ void attn_digits(const tsc_attn_args &a, int i, int h, int t, float ov, float *gm) {
    const int w = t >> 5, lane = t & 31, nch = a.nq * a.D / 32, ch = h * a.D / 32 + w;
    float m = fabsf(ov);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) gm[w] = m;
    __syncthreads();
    const int gb = a.dg_group / 32, first = w / gb * gb;
    float M = 0.f;
    for (int r = 0; r < gb; r++) M = fmaxf(M, gm[first + r]);
    const float L = 127.0f;
    float sx, inv;
    dig_scale(M, L, sx, inv);
    const int X = dig_round(ov, inv, L);
    int sum = X;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    uint8_t *dg = (uint8_t *)a.dg;
    float2 *xsb = (float2 *)(dg + (size_t)a.n * 2 * nch * 16);
    /* column lane: word lane / 8 of the chunk, byte (lane % 8) / 2 of that
     * word in the even or the odd columns' int4 */
    dg[((size_t)i * 2 * nch + (size_t)(lane & 1) * nch + ch) * 16 + (lane >> 3) * 4 + ((lane & 7) >> 1)] = (uint8_t)(X & 0xFF);
    if (lane == 0) xsb[(size_t)i * nch + ch] = make_float2(sx, __fmul_rn(sx, (float)sum));
}

/* R1 (ctx.attn_r1, the default; TSC_ATTN_R1=0 off): k_attn_combine's row
 * and head with all of its loads in one round when the row has at most
 * blockDim.x pieces: piece t's max and sum by thread t, the first 16
 * pieces' column values by every thread, all issued together, where the
 * loop form waits for three rounds (the maxima, then the maxima again with
 * the sums, then the columns). The same operations in the same orders: the
 * same bits. Measured (s39-run3, H100, interleaved): 9B decode 461.7 ->
 * 464.5 tok/s (+0.6%; predicted +0.3-0.5%), at 4,096 tokens of context
 * 411.8 -> 425.9 (+3.4%: more pieces, more rounds), 35B-A3B-8L 2,073 ->
 * 2,090 (+0.8%). */
template <bool EA>
__device__ __forceinline__ void combine_r1(const tsc_attn_args &a, const float *p, int ns, int i, int h, int t,
                                           float eg, float *es, float *ls, float *red, float *Ls) {
    constexpr int PF = 16;
    const int D = a.D;
    float mv = -INFINITY, lv = 0.f, pv[PF];
    if (t < ns) mv = fmaxf(mv, p[(int64_t)t * (D + 2) + D]), lv = p[(int64_t)t * (D + 2) + D + 1];
#pragma unroll
    for (int u = 0; u < PF; u++) pv[u] = u < ns ? p[(int64_t)u * (D + 2) + t] : 0.f;
    const float gate = EA ? eg : a.no_gate ? 0.f : a.qg[((int64_t)i * a.nq + h) * 2 * D + D + t];
    float M = warp_max(mv);
    if ((t & 31) == 0) red[t >> 5] = M;
    __syncthreads();
    M = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) M = fmaxf(M, red[w]);
    if (t < ns) es[t] = expf(__fsub_rn(mv, M)), ls[t] = lv;
    __syncthreads();
    float o = 0.f;
    if (t == 0) {
        float L = 0.f;
        for (int s = 0; s < ns; s++) L = __fmaf_rn(ls[s], es[s], L);
        *Ls = L;
    }
#pragma unroll
    for (int u = 0; u < PF; u++)
        if (u < ns) o = __fmaf_rn(pv[u], es[u], o);
#pragma unroll 16
    for (int s = PF; s < ns; s++) o = __fmaf_rn(p[(int64_t)s * (D + 2) + t], es[s], o);
    __syncthreads();
    const float y = __fdiv_rn(o, *Ls);
    const float ov = a.no_gate ? y : __fmul_rn(y, sigmoid_f(gate));
    a.out[(int64_t)i * a.nq * D + (int64_t)h * D + t] = ov;
    if (a.dg) attn_digits(a, i, h, t, ov, red); /* (red's last reads were before the barrier above) */
}

/* Per row and query head: M = max of the pieces' maxima, each piece's factor
 * e_s = exp(m_s - M) (in shared memory, CNK pieces at a time), L = sum of
 * l_s e_s in piece order (one thread: a fixed order), o = sum of o_s e_s / L.
 * Block: D threads. With a.dg, also out's digits (attn_digits). */
constexpr int CNK = 1024; /* k_attn_combine's pieces a chunk (its factor arrays) */
template <bool E, bool EA = false, bool R1 = false>
__global__ void k_attn_combine(const tsc_attn_args a, int nsplit) {
    /* EA: the gate (the q projection's, two launches back: complete once the
     * split, which triggers after its own wait, lets this kernel start;
     * never with E) loaded before the PDL wait */
    float eg = 0.f;
    if constexpr (EA)
        if (!a.no_gate) eg = a.qg[((int64_t)blockIdx.y * a.nq + blockIdx.x) * 2 * a.D + a.D + threadIdx.x];
    TSC_ENTRY(E);
    __shared__ float es[CNK], ls[CNK];
    __shared__ float red[32];
    __shared__ float Ls;
    const int h = blockIdx.x, i = blockIdx.y, D = a.D, t = threadIdx.x;
    const int pos = row_pos_of(a, i);
    if (pos >= a.max_T) { /* a row past the cache writes nothing; its digits are those of out as it is */
        if (a.dg) attn_digits(a, i, h, t, a.out[(int64_t)i * a.nq * D + (int64_t)h * D + t], red);
        return;
    }
    const int T = pos + 1, P = piece_at(a, T), ns = (T + P - 1) / P;
    const float *p = a.ws + ((int64_t)i * a.nq + h) * nsplit * (D + 2);
    if constexpr (R1) {
        if (ns <= (int)blockDim.x) { /* (uniform) */
            combine_r1<EA>(a, p, ns, i, h, t, eg, es, ls, red, &Ls);
            return;
        }
    }
    float M = -INFINITY;
    for (int s = t; s < ns; s += blockDim.x) M = fmaxf(M, p[(int64_t)s * (D + 2) + D]);
    M = warp_max(M);
    if ((t & 31) == 0) red[t >> 5] = M;
    __syncthreads();
    M = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) M = fmaxf(M, red[w]);
    float o = 0.f, L = 0.f;
    for (int s0 = 0; s0 < ns; s0 += CNK) {
        const int nc = min(CNK, ns - s0);
        __syncthreads();
        for (int s = t; s < nc; s += blockDim.x) {
            const float *ps = p + (int64_t)(s0 + s) * (D + 2);
            es[s] = expf(__fsub_rn(ps[D], M));
            ls[s] = ps[D + 1];
        }
        __syncthreads();
        /* L in piece order by one thread, from shared memory (the pieces'
         * sums were loaded by every thread at once above: a chain of global
         * loads here cost ~0.3 us a piece); o with 16 pieces' loads in flight */
        if (t == 0)
            for (int s = 0; s < nc; s++) L = __fmaf_rn(ls[s], es[s], L);
        if (t < D) {
#pragma unroll 16
            for (int s = 0; s < nc; s++) o = __fmaf_rn(p[(int64_t)(s0 + s) * (D + 2) + t], es[s], o);
        }
    }
    if (t == 0) Ls = L;
    __syncthreads();
    /* (blockDim.x is D: every thread has a column, and reaches attn_digits' barrier) */
    const float y = __fdiv_rn(o, Ls);
    const float gate = EA ? eg : a.no_gate ? 0.f : a.qg[((int64_t)i * a.nq + h) * 2 * D + D + t];
    const float ov = a.no_gate ? y : __fmul_rn(y, sigmoid_f(gate));
    a.out[(int64_t)i * a.nq * D + (int64_t)h * D + t] = ov;
    /* (red is free: its last reads were before the barriers above) */
    if (a.dg) attn_digits(a, i, h, t, ov, red);
}

/* ---- prompt chunks (tsc_attn_prefill) ----
 * A block takes one KV head and the G query heads of QR consecutive rows
 * (QV = QR * G <= 32 query vectors, G = nq / nkv), walks the cache's keys in
 * tiles of 32 up to its last row's position, and keeps each query's running
 * max, sum and output in registers (flash attention, f32): every K/V tile
 * is read once for all of the block's queries, where the row kernels read
 * the cache once per row (the prompt's attention was one pair of launches
 * per row, 512 a layer for a 512-token chunk). Threads: 8 per query vector
 * (its row of scores, 4 keys each; then D / 32 float4 of its output each),
 * so the softmax's reductions stay within 8 lanes of a warp. Causal: key t
 * counts for the query at position p when t <= p. Rounds differently from
 * the decode kernels (another summation order): prompt chunks only.
 * Floors (9B layer, a 512-row chunk: nq 16, nkv 4, D 256): ~4.3 Gflop (QK
 * and PV, causal half) -> ~0.1 ms at the f32 rate; K/V re-read per block
 * from L2 (n / QR blocks a head). Shared-memory bound in practice: each
 * FMA of QK takes 5/16 of a 16-byte load, PV 9/32. Prediction: ~1 ms a
 * layer at 512 rows (against ~10 ms for the row kernels). */
constexpr int PKT = 32;              /* keys a tile */
constexpr int PQV = 32;              /* query vectors a block */
constexpr int PTH = PQV * 8;         /* threads */

size_t prefill_smem(int D) { return (size_t)(PQV * (D + 4) + PKT * (D + 4) + PKT * D + PQV * (PKT + 1)) * sizeof(float); }

__global__ void __launch_bounds__(PTH) k_attn_prefill(const tsc_attn_args a, int QR) {
    TSC_PDL_ENTRY();
    extern __shared__ __align__(16) float psm[];
    const int D = a.D, DP = D + 4, G = a.nq / a.nkv, kvdim = a.nkv * D;
    float *Qs = psm, *Ks = Qs + PQV * DP, *Vs = Ks + PKT * DP, *Ps = Vs + PKT * D;
    const int kh = blockIdx.y, r0 = blockIdx.x * QR, tid = threadIdx.x, qv = tid >> 3, sub = tid & 7;
    const int pos0 = row_pos(a), nrow = min(QR, a.n - r0), nqv = nrow * G;
    /* query vector qv: row r0 + qv / G, head kh * G + qv % G */
    const int qrow = r0 + qv / G, qh = kh * G + qv % G;
    const bool qon = qv < nqv;
    const int qpos = pos0 + qrow; /* its keys: [0, qpos] */
    for (int e = tid; e < PQV * (D / 4); e += PTH) {
        const int v = e / (D / 4), d4 = e % (D / 4);
        float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
        if (v < nqv)
            q = *(const float4 *)(a.qg + ((int64_t)(r0 + v / G) * a.nq + kh * G + v % G) * q_width(a) + 4 * d4);
        *(float4 *)(Qs + v * DP + 4 * d4) = q;
    }
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)D));
    const int nd4 = D / 32; /* this thread's float4 of the output: d = 4 sub + 32 j */
    float4 o[DMAX / 32];
#pragma unroll
    for (int j = 0; j < DMAX / 32; j++) o[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    float m = -INFINITY, l = 0.f;
    const int kend = min(pos0 + r0 + nrow, a.max_T); /* keys of the block's last row, exclusive */
    for (int t0 = 0; t0 < kend; t0 += PKT) {
        const int nt = min(PKT, kend - t0);
        __syncthreads(); /* the previous tile's K, V and P are consumed */
        for (int e = tid; e < PKT * (D / 4); e += PTH) {
            const int t = e / (D / 4), d4 = e % (D / 4);
            float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
            if (t < nt) {
                const int64_t off = (int64_t)(t0 + t) * kvdim + (int64_t)kh * D + 4 * d4;
                kv = *(const float4 *)(a.Kc + off), vv = *(const float4 *)(a.Vc + off);
            }
            *(float4 *)(Ks + t * DP + 4 * d4) = kv;
            *(float4 *)(Vs + t * D + 4 * d4) = vv;
        }
        __syncthreads();
        /* scores of keys sub + 8 j (j < 4) */
        float sc[4] = {0.f, 0.f, 0.f, 0.f};
        const float *qr = Qs + qv * DP;
        for (int d = 0; d < D; d += 4) {
            const float4 q = *(const float4 *)(qr + d);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float4 k = *(const float4 *)(Ks + (sub + 8 * j) * DP + d);
                sc[j] = __fmaf_rn(q.x, k.x, sc[j]), sc[j] = __fmaf_rn(q.y, k.y, sc[j]);
                sc[j] = __fmaf_rn(q.z, k.z, sc[j]), sc[j] = __fmaf_rn(q.w, k.w, sc[j]);
            }
        }
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int t = t0 + sub + 8 * j;
            sc[j] = qon && sub + 8 * j < nt && t <= qpos ? __fmul_rn(sc[j], scale) : -INFINITY;
            mx = fmaxf(mx, sc[j]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        const float mn = fmaxf(m, mx);
        /* every query has key 0 in the first tile: mn is finite from there on
         * (queries past the chunk's rows keep -inf and are never written) */
        const float f = mn == -INFINITY ? 1.f : expf(__fsub_rn(m, mn));
        float ps = 0.f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float e = sc[j] == -INFINITY ? 0.f : expf(__fsub_rn(sc[j], mn));
            Ps[qv * (PKT + 1) + sub + 8 * j] = e;
            ps = __fadd_rn(ps, e);
        }
        ps = __fadd_rn(ps, __shfl_xor_sync(0xffffffffu, ps, 1));
        ps = __fadd_rn(ps, __shfl_xor_sync(0xffffffffu, ps, 2));
        ps = __fadd_rn(ps, __shfl_xor_sync(0xffffffffu, ps, 4));
        l = __fmaf_rn(l, f, ps);
        m = mn;
        __syncwarp(); /* the 8 lanes of this query wrote its P row */
#pragma unroll
        for (int j = 0; j < DMAX / 32; j++)
            if (j < nd4) o[j].x = __fmul_rn(o[j].x, f), o[j].y = __fmul_rn(o[j].y, f), o[j].z = __fmul_rn(o[j].z, f), o[j].w = __fmul_rn(o[j].w, f);
        for (int t = 0; t < nt; t++) {
            const float p = Ps[qv * (PKT + 1) + t];
            const float *vr = Vs + t * D + 4 * sub;
#pragma unroll
            for (int j = 0; j < DMAX / 32; j++)
                if (j < nd4) {
                    const float4 v = *(const float4 *)(vr + 32 * j);
                    o[j].x = __fmaf_rn(p, v.x, o[j].x), o[j].y = __fmaf_rn(p, v.y, o[j].y);
                    o[j].z = __fmaf_rn(p, v.z, o[j].z), o[j].w = __fmaf_rn(p, v.w, o[j].w);
                }
        }
    }
    if (!qon) return;
    const float inv = __fdiv_rn(1.0f, l);
    const float *gate = a.qg + ((int64_t)qrow * a.nq + qh) * q_width(a) + D;
    float *out = a.out + (int64_t)qrow * a.nq * D + (int64_t)qh * D;
#pragma unroll
    for (int j = 0; j < DMAX / 32; j++)
        if (j < nd4) {
            const int d = 4 * sub + 32 * j;
            float y[4] = {__fmul_rn(o[j].x, inv), __fmul_rn(o[j].y, inv), __fmul_rn(o[j].z, inv), __fmul_rn(o[j].w, inv)};
            if (!a.no_gate)
#pragma unroll
                for (int c = 0; c < 4; c++) y[c] = __fmul_rn(y[c], sigmoid_f(gate[d + c]));
            *(float4 *)(out + d) = make_float4(y[0], y[1], y[2], y[3]);
        }
}

/* k_attn_split_lk's dynamic shared memory: padded keys and values at DMAX */
size_t lk_smem() { return (size_t)SPL * (2 * DMAX + 4) * sizeof(float); }

} // namespace

extern "C" size_t tsc_attn_ws_bytes_split(int n, int nq, int D, int max_T, int split) {
    const size_t P = split ? (size_t)split : SPL, ns = ((size_t)max_T + P - 1) / P;
    return (size_t)n * nq * ns * (D + 2) * sizeof(float);
}

extern "C" size_t tsc_attn_ws_bytes_np(int n, int nq, int D, int np_max) {
    return (size_t)n * nq * (size_t)np_max * (D + 2) * sizeof(float);
}

extern "C" size_t tsc_attn_ws_bytes(int n, int nq, int D, int max_T) {
    const size_t ns = ((size_t)max_T + SPL - 1) / SPL;
    return (size_t)n * nq * ns * (D + 2) * sizeof(float);
}

extern "C" void tsc_attn_decode(tsc_ctx *c, const tsc_attn_args *a) {
    TSC_GUARD(c);
    if (a->n < 1 || (a->n > TSC_ROWS_MAX && a->phase != 1) || a->pos < 0 || (!a->pos_dev && a->pos + (a->same_pos ? 1 : a->n) > a->max_T) ||
        a->split < 0 || a->split % SPL || a->np_max < 0 || a->np_max > 1024 || (a->no_q && a->phase != 1) ||
        (a->same_pos && a->phase != 2)) {
        tsc_fail_(c, TS_E_ARG, "tsc_attn_decode: %d rows at position %d with a cache of %d rows (split %d%s)", a->n,
                  a->pos, a->max_T, a->split, a->no_q && a->phase != 1 ? "; rows without queries attend to nothing" : "");
        return;
    }
    if (a->D % 32 || a->D > DMAX || a->nkv < 1 || a->nq % a->nkv || a->nq / a->nkv > GMAX || a->rot > a->D ||
        a->rot % 2) {
        tsc_fail_(c, TS_E_UNSUPPORTED,
                  "tsc_attn_decode: head dim %d, %d query / %d KV heads, rot %d (need D %% 32 == 0, D <= %d, nq/nkv <= %d)",
                  a->D, a->nq, a->nkv, a->rot, DMAX, GMAX);
        return;
    }
    /* with the position on the device the grid covers the whole cache (the
     * pieces past a row's length return at once), so a graph replays as is */
    const int nsplit = slots_of(*a);
    int used = nsplit;
    if (!a->pos_dev) { /* the most pieces a row of the call has (with np_max, not always the last row's) */
        used = 0;
        for (int i = 0; i < a->n; i++) {
            const int pi = a->pos + (a->same_pos ? 0 : i) + 1, T = pi < a->max_T ? pi : a->max_T, P = piece_at(*a, T);
            used = (T + P - 1) / P > used ? (T + P - 1) / P : used;
        }
    }
    const bool ea = c->attn_early && !c->pdl_early; /* (EA's gate needs the split to trigger after its wait) */
    if (a->phase != 2) {
        tsc_launch(c, c->pdl_early ? k_attn_prep<true> : ea ? k_attn_prep<false, true> : k_attn_prep<false>,
                   dim3(dim3((a->no_q ? 0 : a->nq) + a->nkv, a->n)), dim3(a->D), 0, *a);
        TSC_LAUNCHED(c, "tsc_attn_decode (prep)");
    }
    if (a->phase == 1) return;
    const bool e = c->pdl_early;
    if (c->attn_kv && !c->attn_kv_smem) { /* the K/V forms' dynamic shared memory (over 48 KB), allowed once */
        const int most = 2 * SPL * DMAX * (int)sizeof(float);
        cudaFuncSetAttribute(k_attn_split<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
        cudaFuncSetAttribute(k_attn_split<false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
        const int lk = (int)lk_smem();
        cudaFuncSetAttribute(k_attn_split_lk<true, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, lk); /* GC off */
        cudaFuncSetAttribute(k_attn_split_lk<false, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, lk);
        for (int g = 1; g <= GMAX; g *= 2) { /* each GC instance */
            cudaFuncSetAttribute(split_lk_for<true>(1, g), cudaFuncAttributeMaxDynamicSharedMemorySize, lk);
            cudaFuncSetAttribute(split_lk_for<false>(1, g), cudaFuncAttributeMaxDynamicSharedMemorySize, lk);
        }
        c->attn_kv_smem = 1;
    }
    /* at most ~2 blocks an SM for a row's KV heads (they walk the rest): a
     * long context's graph covers np_max pieces a row and head, most of them
     * empty at short positions, and every block launched costs even if it
     * returns (per row, so a verify's rows keep their parallelism) */
    int cap = 2 * c->n_sm / a->nkv;
    if (cap < 1) cap = 1;
    const dim3 sg(used < cap ? used : cap, a->nkv, a->n);
    const int G = a->nq / a->nkv; /* query heads a KV head */
    if (c->attn_kv == 2)
        tsc_launch(c, e ? split_lk_for<true>(c->attn_gc, G) : split_lk_for<false>(c->attn_gc, G), sg, dim3(256), lk_smem(), *a,
                   nsplit);
    else
        tsc_launch(c, c->attn_kv ? (e ? k_attn_split<true, true> : k_attn_split<false, true>)
                                 : (e ? k_attn_split<true, false> : k_attn_split<false, false>),
                   sg, dim3(256), c->attn_kv ? 2 * (size_t)SPL * a->D * sizeof(float) : 0, *a, nsplit);
    TSC_LAUNCHED(c, "tsc_attn_decode (split)");
    /* out's digits where asked for and the head holds whole groups (the ctx's
     * digits: the next product may take them, q4dp's stage_once) */
    tsc_attn_args g = *a;
    const bool dig = a->dg && (a->dg_group == 32 || a->dg_group == 64 || a->dg_group == 128) && a->D % a->dg_group == 0;
    if (!dig) g.dg = NULL;
    const bool r1 = c->attn_r1;
    tsc_launch(c, c->pdl_early ? (r1 ? k_attn_combine<true, false, true> : k_attn_combine<true>)
                  : ea ? (r1 ? k_attn_combine<false, true, true> : k_attn_combine<false, true>)
                       : (r1 ? k_attn_combine<false, false, true> : k_attn_combine<false>),
               dim3(dim3(a->nq, a->n)), dim3(a->D), (size_t)c->attn_pad, g, nsplit);
    TSC_LAUNCHED(c, "tsc_attn_decode (combine)");
    if (dig && g.dg == c->dg)
        tsc_dg_mark(c, g.out, g.n, g.nq * g.D, g.dg_group);
}

extern "C" void tsc_attn_prefill(tsc_ctx *c, const tsc_attn_args *a) {
    TSC_GUARD(c);
    if (a->n < 1 || a->pos < 0 || (!a->pos_dev && a->pos + a->n > a->max_T) || a->D % 32 || a->D > DMAX ||
        a->nkv < 1 || a->nq % a->nkv || a->nq / a->nkv > PQV) {
        tsc_fail_(c, TS_E_ARG, "tsc_attn_prefill: %d rows at %d, cache %d, head dim %d, %d / %d heads", a->n, a->pos,
                  a->max_T, a->D, a->nq, a->nkv);
        return;
    }
    const int G = a->nq / a->nkv, QR = PQV / G;
    const size_t smem = prefill_smem(a->D);
    /* the shared-memory limit raised once per device (tsc_blocks_per_sm
     * remembers it), to what the largest head needs */
    tsc_blocks_per_sm(c, (const void *)k_attn_prefill, PTH, smem, prefill_smem(DMAX));
    tsc_launch(c, k_attn_prefill, dim3((unsigned)((a->n + QR - 1) / QR), (unsigned)a->nkv), dim3(PTH), smem, *a, QR);
    TSC_LAUNCHED(c, "tsc_attn_prefill");
}
