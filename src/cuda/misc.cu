/* misc.cu: the small row-wise ops of a decode step: embedding gather,
 * add + RMSNorm, SiLU / SwiGLU, MoE routing, argmax.
 *
 * Owns: tsc_embed, tsc_add_rmsnorm, tsc_silu, tsc_silu_mul, tsc_moe_route,
 * tsc_argmax. Does not own: products (linear.cu), GDN, attention.
 * Invariants: one block per row for the row ops (so a row's arithmetic
 * never depends on n); arithmetic written with rounding intrinsics where the
 * CPU reference's separate multiply and add must be mirrored (embed is
 * bit-exact with ts_weight_row).
 *
 * Floors (H200, 9B, one row): all of these move a few KiB to 1 MB
 * (argmax over the 248,320 logits: 1 MB -> ~0.25 us at 4.3 TB/s) and are
 * launch-bound (~2-3 us a launch without graphs, ~1 us in a graph). The one
 * that could be slow is argmax: one block per row would pull 1 MB through one
 * SM (~10 us), so it runs in two stages (64 blocks a row, then one).
 * Prediction: each op a few microseconds, launch overhead included.
 * Measured (run4, in a graph): add_rmsnorm 3.5 us, silu_mul 1.6 us, embed
 * 6.6 us, argmax 6.6 us, moe_route 6.0 us: launch-bound as predicted; their
 * count (65 norms, 32 SwiGLUs a 9B step) is what costs (~0.3 ms of 4.0):
 * fusing norm and SwiGLU into the next product's x staging is the fix.
 */
#include <float.h>

#include "cuda/common.cuh"
#include "cuda/q4t.cuh"

/* ---- embed ---- */

__global__ void k_embed(const tsc_weight w, const int32_t *ids, float *x) {
    TSC_PDL_ENTRY();
    const int i = blockIdx.x;
    const int64_t id = ids[i], cols = w.cols;
    float *xo = x + (int64_t)i * cols;
    if (id < 0 || id >= w.rows) {
        for (int64_t c = blockIdx.y * blockDim.x + threadIdx.x; c < cols; c += gridDim.y * blockDim.x) xo[c] = 0.f;
        return;
    }
    /* 32-bit index arithmetic inside a row (64-bit division is slow). A
     * block per 256 columns (grid.y): one element a thread, so the row's
     * loads are all in flight at once (one block looping over a 4096-column
     * row waited for ~16 DRAM latencies: 21 us under ncu, 9B step) */
    for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < (int)cols; c += gridDim.y * blockDim.x) {
        float v;
        if (w.layout == TSC_LAYOUT_Q4T) {
            v = q4t_elem(w, id, c);
        } else if (w.dtype == TS_DTYPE_U32) {
            const int bits = w.bits, per = 32 / bits;
            const uint32_t *row = (const uint32_t *)w.data + id * (cols / per);
            const uint32_t q = (row[c / per] >> ((c % per) * bits)) & ((1u << bits) - 1);
            const int64_t gi = id * (cols / w.group) + c / w.group;
            /* s * q + b with separate roundings: ts_weight_row's bits */
            v = __fadd_rn(__fmul_rn(load_s(w.scales, w.sdtype, gi), (float)q), load_s(w.biases, w.sdtype, gi));
        } else {
            v = load_s(w.data, w.dtype, id * cols + c);
        }
        xo[c] = v;
    }
}

extern "C" void tsc_embed(tsc_ctx *c, const tsc_weight *w, const int32_t *ids, int n, float *x) {
    TSC_GUARD(c);
    ts_error e;
    /* rows on grid.x (no limit of its own); 65535, the other row ops' limit
     * (grid.y), so that a prompt chunk the rest can take is not refused here
     * (it was 4096: `bench --prompt 8192` failed on this line, session 17) */
    if (n < 1 || n > 65535) {
        tsc_fail_(c, TS_E_ARG, "tsc_embed: %d rows (1..65535 a pass: feed longer prompts in chunks, --chunk N)", n);
        return;
    }
    if (tsc_weight_check(w, &e)) { tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_embed: %s", e.msg); return; }
    const unsigned gy = (unsigned)((w->cols + 255) / 256 < 65535 ? (w->cols + 255) / 256 : 65535);
    tsc_launch(c, k_embed, dim3(n, gy), dim3(256), 0, *w, ids, x);
    TSC_LAUNCHED(c, "tsc_embed");
}

/* ---- add + RMSNorm ---- */

__global__ void k_add_rmsnorm(float *x, const float *__restrict__ add, const float *__restrict__ w, float *y, int dim,
                              float eps, int vec) {
    TSC_PDL_ENTRY();
    __shared__ double red[32];
    const int64_t o = (int64_t)blockIdx.x * dim;
    double ss = 0;
    if (vec) { /* the fused products' order (row_ss8) */
        ss = row_ss8(x + o, add ? add + o : NULL, add ? x + o : NULL, dim, red);
    } else {
        for (int j = threadIdx.x; j < dim; j += blockDim.x) {
            float v = x[o + j];
            if (add) {
                v = __fadd_rn(v, add[o + j]);
                x[o + j] = v;
            }
            ss += (double)v * v;
        }
        ss = block_sum_d(ss, red);
    }
    const float r = rms_inv(ss, dim, eps);
    for (int j = threadIdx.x; j < dim; j += blockDim.x) y[o + j] = norm_mul(x[o + j], r, w[j]);
}

extern "C" void tsc_add_rmsnorm(tsc_ctx *c, float *x, const float *add, const float *w, float *y, int n, int dim,
                                float eps) {
    TSC_GUARD(c);
    if (n < 1 || n > 65535 || dim < 1) { tsc_fail_(c, TS_E_ARG, "tsc_add_rmsnorm: %d rows of %d", n, dim); return; }
    /* 256 threads, whatever dim, and for rows of 4-float multiples the
     * words' sum (row_ss8, its loads in flight): the fused dp4a products
     * (q4dp.cu) stage the norm with this exact order, so fused and unfused
     * rows agree bit for bit. (The 9B engine step got slower with a first
     * 256-thread version that summed one float a thread a step; the words'
     * sum keeps 16 floats a thread in flight.) */
    const int vec = dim % 4 == 0 && !(((uintptr_t)x | (uintptr_t)(add ? add : x)) & 15);
    tsc_launch(c, k_add_rmsnorm, dim3(n), dim3(256), 0, x, add, w, y, dim, eps, vec);
    TSC_LAUNCHED(c, "tsc_add_rmsnorm");
}

/* ---- SiLU ---- */

__global__ void k_silu(float *y, const float *x, const float *u, size_t n) {
    TSC_PDL_ENTRY();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        y[i] = u ? silu_mul_f(x[i], u[i]) : silu_f(x[i]);
    }
}

static unsigned grid_for(size_t n) { return (unsigned)((n + 255) / 256 < 2048 ? (n + 255) / 256 : 2048); }

extern "C" void tsc_silu(tsc_ctx *c, float *y, const float *x, size_t n) {
    TSC_GUARD(c);
    if (!n) return;
    tsc_launch(c, k_silu, dim3(grid_for(n)), dim3(256), 0, y, x, NULL, n);
    TSC_LAUNCHED(c, "tsc_silu");
}

extern "C" void tsc_silu_mul(tsc_ctx *c, float *g, const float *u, size_t n) {
    TSC_GUARD(c);
    if (!n) return;
    tsc_launch(c, k_silu, dim3(grid_for(n)), dim3(256), 0, g, g, u, n);
    TSC_LAUNCHED(c, "tsc_silu_mul");
}

/* ---- MoE routing ---- */

/* The better of two (value, index) candidates: larger value, then lower
 * index; NaN never better. */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

/* The row's softmax and top k with the CPU's choices (ts_cpu_moe_route_row:
 * f32 exp of x - max, a double sum, p = x / sum rounded to float, picks by
 * larger p then lower index, the normalising sum in pick order). A lane
 * holds its EPL = E / 32 (rounded up to a power of two; more is harmless:
 * the elements past E are skipped everywhere) elements in registers, so the
 * logits' loads are all in flight at once and nothing goes through memory.
 * A pick: each lane's best not-taken element, then the warp's largest key
 * (p's bits + 1: p >= 0, so its bits order as unsigned; 0: nothing left but
 * NaN, which is never better) and the lowest index holding it, two
 * redux.sync; the owner marks it taken. On return lane j < k holds pick j:
 * its expert id and its weight (divided by the picks' sum when norm). Every
 * lane of the warp calls it. */
template <int EPL>
__device__ __forceinline__ void route_probs(const float *l, int E, int lane, float (&p)[EPL]) {
#pragma unroll
    for (int q = 0; q < EPL; q++) {
        const int e = lane + 32 * q;
        p[q] = e < E ? l[e] : -INFINITY;
    }
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q < E) mx = fmaxf(mx, p[q]);
    mx = warp_max(mx);
    double s = 0;
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q < E) {
            p[q] = expf(__fsub_rn(p[q], mx));
            s += p[q];
        }
    s = warp_sum_d(s);
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q < E) p[q] = (float)((double)p[q] / s);
}

template <int EPL>
__device__ __forceinline__ void route_row(const float *l, int E, int k, int norm, int lane, int &rid, float &rwt) {
    float p[EPL];
    route_probs<EPL>(l, E, lane, p);
    uint32_t taken = 0; /* bit q: element lane + 32 q picked (or past E) */
#pragma unroll
    for (int q = 0; q < EPL; q++)
        if (lane + 32 * q >= E) taken |= 1u << q;
    float wsum = 0.f; /* the CPU's float sum of the picked, in pick order */
    rid = 0, rwt = 0.f;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bq = -1;
#pragma unroll
        for (int q = 0; q < EPL; q++) /* increasing index: a tie keeps the lower */
            if (!(taken >> q & 1u) && (p[q] > bv || (bq < 0 && p[q] == bv))) bv = p[q], bq = q;
        const unsigned key = bq >= 0 ? __float_as_uint(bv) + 1u : 0u;
        const unsigned mk = __reduce_max_sync(0xffffffffu, key);
        unsigned cand;
        if (mk) {
            cand = key == mk ? (unsigned)(lane + 32 * bq) : 0xffffffffu;
        } else { /* only NaN left: the CPU's scan takes the first not taken */
            cand = 0xffffffffu;
#pragma unroll
            for (int q = EPL - 1; q >= 0; q--)
                if (!(taken >> q & 1u)) cand = (unsigned)(lane + 32 * q);
        }
        const int bi = (int)__reduce_min_sync(0xffffffffu, cand);
        float v = 0.f;
        if ((bi & 31) == lane) {
#pragma unroll
            for (int q = 0; q < EPL; q++)
                if (q == (bi >> 5)) v = p[q];
            taken |= 1u << (bi >> 5);
        }
        v = __shfl_sync(0xffffffffu, v, bi & 31);
        if (lane == j) rid = bi, rwt = v;
        wsum = __fadd_rn(wsum, v);
    }
    if (norm && lane < k) rwt = __fdiv_rn(rwt, wsum);
}

/* ---- the picks by a sorting network (route_row_net; ctx.route_net, the default) ----
 * Why: route_row's k picks are a chain: each is a scan of the lane's EPL
 * elements, two redux.sync, a shuffle and a select, ~140 dependent
 * instructions, so the 35B-A3B's row (E 256, k 8) issued ~1,100 instructions
 * at ~8 cycles each on one warp (ncu, s38-run2: 8,800 cycles, 4.3 us of a
 * 49 us MoE layer in the graph's trace, s38-run1). Here the same picks come
 * from a network with independent compare-exchanges at every level: each
 * element is a 64-bit key, (p's bits + 1, or 0 for NaN) above (~index), so
 * "larger key" is route_row's order exactly (larger p, then lower index; a
 * NaN below every number, NaNs by index; an element past E is 0, below all);
 * a lane sorts its L keys (a bitonic network), then five butterfly rounds
 * merge the lane's sorted L with its partner's (the half-cleaner
 * max(a_i, b_(L-1-i)) keeps the larger L, a bitonic merge sorts them), after
 * which every lane holds the row's L largest keys in order: picks 0..k-1.
 * The weights are the keys' bits back (NaN: the canonical NaN that route_row's
 * division makes), summed in pick order as route_row does. The same ids and
 * the same bits (cuda.moe_route_exact runs both forms against the CPU and
 * each other). L: EPL or k, whichever is larger, as a power of two, 8 or 16
 * (k <= L); others take route_row. Measured (s38-run3, H100, one binary,
 * two rounds): 35B-A3B-8L decode 1,953-1,955 -> 2,005-2,010 tok/s (+2.7%;
 * predicted +3.5-4%), MTP 3 output identical. */
__device__ __forceinline__ void key_ce(unsigned long long &a, unsigned long long &b) { /* a: the larger */
    const unsigned long long hi = a > b ? a : b, lo = a > b ? b : a;
    a = hi, b = lo;
}
/* a bitonic sequence of L keys into descending order */
template <int L>
__device__ __forceinline__ void key_merge(unsigned long long (&k)[L]) {
#pragma unroll
    for (int s = L / 2; s > 0; s >>= 1)
#pragma unroll
        for (int i = 0; i < L; i++)
            if (!(i & s)) key_ce(k[i], k[i + s]);
}
/* L keys into descending order (a bitonic sorting network) */
template <int L>
__device__ __forceinline__ void key_sort(unsigned long long (&k)[L]) {
#pragma unroll
    for (int w = 2; w <= L; w <<= 1)
#pragma unroll
        for (int s = w / 2; s > 0; s >>= 1)
#pragma unroll
            for (int i = 0; i < L; i++) {
                const int j = i ^ s;
                if (j > i) {
                    if (!(i & w)) key_ce(k[i], k[j]); /* this run descending */
                    else key_ce(k[j], k[i]);          /* the next ascending */
                }
            }
}
__device__ __forceinline__ float key_value(unsigned long long key) {
    const unsigned v = (unsigned)(key >> 32);
    return v ? __uint_as_float(v - 1u) : __uint_as_float(0x7fffffffu);
}

template <int EPL, int L>
__device__ __forceinline__ void route_row_net(const float *l, int E, int k, int norm, int lane, int &rid, float &rwt) {
    static_assert(L >= EPL && (L & (L - 1)) == 0, "L: a power of two, at least EPL");
    float p[EPL];
    route_probs<EPL>(l, E, lane, p);
    unsigned long long key[L];
#pragma unroll
    for (int q = 0; q < L; q++) {
        const int e = lane + 32 * q;
        key[q] = 0ull;
        if (q < EPL && e < E) {
            const float v = p[q < EPL ? q : 0];
            const unsigned hi = v == v ? __float_as_uint(v) + 1u : 0u;
            key[q] = (unsigned long long)hi << 32 | (unsigned)~e;
        }
    }
    key_sort<L>(key);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long b[L];
#pragma unroll
        for (int q = 0; q < L; q++) b[q] = __shfl_xor_sync(0xffffffffu, key[q], o);
#pragma unroll
        for (int q = 0; q < L; q++) key[q] = key[q] > b[L - 1 - q] ? key[q] : b[L - 1 - q];
        key_merge<L>(key);
    }
    float wsum = 0.f; /* route_row's float sum of the picked, in pick order */
    rid = 0, rwt = 0.f;
#pragma unroll
    for (int j = 0; j < L; j++) {
        if (j >= k) break;
        const float v = key_value(key[j]);
        wsum = __fadd_rn(wsum, v);
        if (lane == j) rid = (int)~(unsigned)key[j], rwt = v;
    }
    if (norm && lane < k) rwt = __fdiv_rn(rwt, wsum);
}

/* One row a warp (8 rows a block of 256): route_row (the
 * CPU's choices: ts_cpu_moe_route_row), the picks written by lanes 0..k-1.
 * Measured under ncu (session 22): 6.8 -> 6.1 us a 35B-A3B row, launch
 * included, once the row went into registers (the form before kept it in
 * shared memory and looped over E at run time, each of the k picks a chain
 * of shared-memory reads and a shuffle tree); what is left is one warp's
 * serial chain (expf, the double sum and divisions, k picks), not memory.
 * (The block-per-row kernel before both spent two barriers a pick: ~9 us.
 * Routing inside the routed experts' gate/up launch instead, one launch
 * fewer a layer, measured slower: 35B-A3B-8L decode 1,811 -> 1,799 tok/s,
 * s26-run1; removed.) */
constexpr int ROUTE_WARPS = 8;

/* block blk's rows (a warp a row) */
template <int EPL, int L>
__device__ __forceinline__ void route_rows(const float *logits, int n, int E, int k, int norm, int32_t *ids, float *wts,
                                           int blk) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blk * ROUTE_WARPS + w;
    if (row >= n) return; /* no block barrier below */
    int rid;
    float rwt;
    if constexpr (L > 0) route_row_net<EPL, L>(logits + (int64_t)row * E, E, k, norm, lane, rid, rwt);
    else route_row<EPL>(logits + (int64_t)row * E, E, k, norm, lane, rid, rwt);
    if (lane < k) ids[(int64_t)row * k + lane] = rid, wts[(int64_t)row * k + lane] = rwt;
}

template <int EPL, int L = 0>
__global__ void __launch_bounds__(ROUTE_WARPS * 32) k_moe_route(const float *logits, int n, int E, int k, int norm,
                                                               int32_t *ids, float *wts) {
    TSC_PDL_ENTRY();
    route_rows<EPL, L>(logits, n, E, k, norm, ids, wts, (int)blockIdx.x);
}

/* ---- the gate/up's digits made by the route launch (tsc_moe_route_digits) ----
 * Why: the routed gate/up (q4dp.cu's k_q4dp_moe, ROWS) staged the router's
 * normed rows in each of its 288 blocks (35B-A3B: 39% of its stall samples,
 * 373 of its 1,148 instructions a warp under ncu, s43-run1), while the
 * route launch before it is one warp's serial chain (~3-4 us a row) beside
 * 7 idle warps. Here blocks nrb.. of the route launch stage those rows'
 * 8-bit digits (stage_word's arithmetic: the bytes k_stage_digits and the
 * gate/up's own staging make) into the digits scratch, in parallel with the
 * routing blocks, and the gate/up copies them (q4dp_moe: the "made" mark of
 * tsc_ctx.dg_x). No launch is added; the staging leaves the chain. The
 * default (backend.cu's moe_gudig_on, TSC_MOE_GUDIG=0 turns it off):
 * +2.1% on the 35B-A3B-8L's decode, +2.5% on the 40-layer one (s43-run4,
 * H100). */
struct route_dg {
    const float *x; /* [n][cols]: the rows the gate/up reads */
    int4 *dg;       /* the digits scratch (tsc_set_digits) */
    int cols, group, nrb;
};

template <int EPL, int L>
__global__ void __launch_bounds__(ROUTE_WARPS * 32) k_moe_route_dg(const float *logits, int n, int E, int k, int norm,
                                                                  int32_t *ids, float *wts, const route_dg d) {
    TSC_PDL_ENTRY();
    if ((int)blockIdx.x < d.nrb) {
        route_rows<EPL, L>(logits, n, E, k, norm, ids, wts, (int)blockIdx.x);
        return;
    }
    /* a thread a word of 8 columns, every lane of the block (the shuffles):
     * a group's words are consecutive lanes (cols % group == 0, group <= 128) */
    const int nw8 = d.cols >> 3, nch = d.cols >> 5, tst = 2 * nch;
    const int idx = ((int)blockIdx.x - d.nrb) * (int)blockDim.x + (int)threadIdx.x;
    const bool on = idx < n * nw8;
    const int i = on ? idx / nw8 : 0, w8 = on ? idx - i * nw8 : 0;
    float v[8];
    if (on) {
        load8(d.x + (int64_t)i * d.cols + 8 * w8, v);
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = 0.f;
    }
    stage_word<1, false>(v, on, i, w8, nch, d.group >> 3, d.dg, (float2 *)(d.dg + (size_t)n * tst), tst, 0);
}

extern "C" int tsc_moe_route_digits(tsc_ctx *c, const float *logits, int n, int E, int k, int norm, int32_t *ids,
                                    float *wts, const float *x, int cols, int group) {
    if (!c || c->err_code) return 0;
    const int epl = (E + 31) / 32;
    const size_t bytes = stage_bytes(n, 1, cols);
    if (n < 1 || n > 65535 || E < 1 || E > 1024 || k < 1 || k > 8 || k > E || epl > 8 || !c->route_net || !c->dg ||
        bytes > c->dg_bytes || cols < 32 || cols % 32 || (group != 32 && group != 64 && group != 128) || cols % group ||
        ((uintptr_t)x & 15))
        return 0; /* nothing launched: the caller routes with tsc_moe_route */
    route_dg d;
    d.x = x, d.dg = (int4 *)c->dg, d.cols = cols, d.group = group;
    d.nrb = (n + ROUTE_WARPS - 1) / ROUTE_WARPS;
    const int words = n * (cols / 8), dgb = (words + ROUTE_WARPS * 32 - 1) / (ROUTE_WARPS * 32);
    const dim3 grid((unsigned)(d.nrb + dgb)), block(ROUTE_WARPS * 32);
    if (epl <= 1) tsc_launch(c, k_moe_route_dg<1, 8>, grid, block, 0, logits, n, E, k, norm, ids, wts, d);
    else if (epl <= 2) tsc_launch(c, k_moe_route_dg<2, 8>, grid, block, 0, logits, n, E, k, norm, ids, wts, d);
    else if (epl <= 4) tsc_launch(c, k_moe_route_dg<4, 8>, grid, block, 0, logits, n, E, k, norm, ids, wts, d);
    else tsc_launch(c, k_moe_route_dg<8, 8>, grid, block, 0, logits, n, E, k, norm, ids, wts, d);
    TSC_LAUNCHED(c, "tsc_moe_route_digits");
    /* what dg holds (q4dp's stage_once and q4dp_moe take them while no launch follows) */
    tsc_dg_mark(c, x, n, cols, group);
    return 1;
}

extern "C" void tsc_moe_route(tsc_ctx *c, const float *logits, int n, int E, int k, int norm, int32_t *ids, float *wts) {
    TSC_GUARD(c);
    if (n < 1 || n > 65535 || E < 1 || E > 1024 || k < 1 || k > 32 || k > E) {
        tsc_fail_(c, TS_E_ARG, "tsc_moe_route: %d rows, %d experts, top %d (E <= 1024, k <= 32)", n, E, k);
        return;
    }
    const dim3 grid((unsigned)((n + ROUTE_WARPS - 1) / ROUTE_WARPS)), block(ROUTE_WARPS * 32);
    const int epl = (E + 31) / 32;
    /* the network's list length: EPL or k as a power of two, 8 or 16 */
    const int L = epl <= 8 && k <= 8 ? 8 : epl <= 16 && k <= 16 ? 16 : 0;
    if (c->route_net && L == 8) {
        if (epl <= 1) tsc_launch(c, k_moe_route<1, 8>, grid, block, 0, logits, n, E, k, norm, ids, wts);
        else if (epl <= 2) tsc_launch(c, k_moe_route<2, 8>, grid, block, 0, logits, n, E, k, norm, ids, wts);
        else if (epl <= 4) tsc_launch(c, k_moe_route<4, 8>, grid, block, 0, logits, n, E, k, norm, ids, wts);
        else tsc_launch(c, k_moe_route<8, 8>, grid, block, 0, logits, n, E, k, norm, ids, wts);
    } else if (c->route_net && L == 16) {
        if (epl <= 8) tsc_launch(c, k_moe_route<8, 16>, grid, block, 0, logits, n, E, k, norm, ids, wts);
        else tsc_launch(c, k_moe_route<16, 16>, grid, block, 0, logits, n, E, k, norm, ids, wts);
    } else if (epl <= 1) tsc_launch(c, k_moe_route<1>, grid, block, 0, logits, n, E, k, norm, ids, wts);
    else if (epl <= 2) tsc_launch(c, k_moe_route<2>, grid, block, 0, logits, n, E, k, norm, ids, wts);
    else if (epl <= 4) tsc_launch(c, k_moe_route<4>, grid, block, 0, logits, n, E, k, norm, ids, wts);
    else if (epl <= 8) tsc_launch(c, k_moe_route<8>, grid, block, 0, logits, n, E, k, norm, ids, wts);
    else if (epl <= 16) tsc_launch(c, k_moe_route<16>, grid, block, 0, logits, n, E, k, norm, ids, wts);
    else tsc_launch(c, k_moe_route<32>, grid, block, 0, logits, n, E, k, norm, ids, wts);
    TSC_LAUNCHED(c, "tsc_moe_route");
}

/* ---- argmax ---- */

#define ARGMAX_BLOCKS 64

struct amx_part { float v; int i; };

/* The warp's best (value, index) in every lane, from each lane's (bv, bi) */
__device__ __forceinline__ void warp_best(float &bv, int &bi) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
}

/* The best (value, index) of row x's elements [a, b) by the block's threads
 * (the larger value, then the lower index; NaN never better), returned to
 * thread 0; rv, ri: the warps' candidates */
__device__ __forceinline__ amx_part block_best(const float *xr, int a, int b, float *rv, int *ri) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int e = a + threadIdx.x; e < b; e += blockDim.x) {
        const float v = xr[e];
        if (better(v, e, bv, bi)) bv = v, bi = e;
    }
    warp_best(bv, bi);
    if ((threadIdx.x & 31) == 0) rv[threadIdx.x >> 5] = bv, ri[threadIdx.x >> 5] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        bv = rv[0], bi = ri[0];
        for (int q = 1; q < (int)(blockDim.x >> 5); q++)
            if (better(rv[q], ri[q], bv, bi)) bv = rv[q], bi = ri[q];
    }
    return amx_part{bv, bi};
}

__global__ void k_argmax1(const float *x, int V, amx_part *part) {
    TSC_PDL_ENTRY();
    __shared__ float rv[32];
    __shared__ int ri[32];
    const float *xr = x + (int64_t)blockIdx.y * V;
    const int per = (V + ARGMAX_BLOCKS - 1) / ARGMAX_BLOCKS, a = blockIdx.x * per, b = min(V, a + per);
    const amx_part p = block_best(xr, a, b, rv, ri);
    if (threadIdx.x == 0) part[blockIdx.y * ARGMAX_BLOCKS + blockIdx.x] = p;
}

__global__ void k_argmax2(const amx_part *part, int32_t *ids) {
    TSC_PDL_ENTRY();
    if (threadIdx.x) return;
    const amx_part *p = part + blockIdx.x * ARGMAX_BLOCKS;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int q = 0; q < ARGMAX_BLOCKS; q++)
        if (better(p[q].v, p[q].i, bv, bi)) bv = p[q].v, bi = p[q].i;
    ids[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
}

extern "C" size_t tsc_argmax_ws_bytes(int n) { return (size_t)n * ARGMAX_BLOCKS * sizeof(amx_part); }

extern "C" void tsc_argmax(tsc_ctx *c, const float *x, int n, int V, int32_t *ids, void *ws) {
    TSC_GUARD(c);
    if (n < 1 || n > 65535 || V < 1) { tsc_fail_(c, TS_E_ARG, "tsc_argmax: %d rows of %d", n, V); return; }
    tsc_launch(c, k_argmax1, dim3(dim3(ARGMAX_BLOCKS, n)), dim3(256), 0, x, V, (amx_part *)ws);
    tsc_launch(c, k_argmax2, dim3(n), dim3(32), 0, (const amx_part *)ws, ids);
    TSC_LAUNCHED(c, "tsc_argmax");
}
