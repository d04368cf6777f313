/* step9b.cuh: the 9B decode step as l2ahead.cu models it, shared with
 * ringfloor.cu: chain9b.cuh's 129 products (one PDL launch a product,
 * blocks of THREADS streaming their shares) with a latency kernel where the
 * real step has its kernels between products (after every GDN in_proj, the
 * GDN step; after every attention q+k+v, prep + split + combine; before
 * every down, the SwiGLU digits), the step as a list of launches, its
 * capture as a graph, and the latency kernels' calibration against the
 * real step's times. */
#ifndef TS_BENCH_CUDA_STEP9B_CUH
#define TS_BENCH_CUDA_STEP9B_CUH

#include "chain9b.cuh" /* chain, chain9b, chain9b_att, share, ld_stream, launch_ex, copy_probe_gbs; CK, time_ms */

constexpr int U = 4, THREADS = 256, GB = 128, GT = 128;

/* one product: block b streams its contiguous share of stream s (PDL: the
 * previous kernel's grid completes first) */
__global__ void __launch_bounds__(THREADS) k_prod(const uint4 *p, const __grid_constant__ chain c, int s, unsigned *out) {
    size_t lo, hi;
    share(c, s, lo, hi);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    unsigned acc = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += (size_t)U * THREADS) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = i + u * THREADS < hi ? ld_stream(p + i + u * THREADS) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc; /* keeps the loads */
}

/* a latency kernel's work as thread t of nt: round 1 reads the whole state
 * (n floats, coalesced over the nt threads) */
__device__ __forceinline__ float gap_round1(const float *st, int n, int t, int nt) {
    float x = 0.f;
    for (int k = 0; k < n / nt; k++) x += st[t + k * nt];
    return x;
}

/* then a compute chain (iters FMAs), a second round of loads at addresses
 * made from the first's sum, another chain, a store */
__device__ __forceinline__ void gap_rest(float *st, int n, int iters, int t, int nt, float x) {
    for (int i = 0; i < iters; i++) x = fmaf(x, 1.0000001f, 1e-7f);
    const int j = t + (int)(x * 0.f); /* round 2 depends on round 1 (x * 0 is not folded: x may be NaN) */
    float y = 0.f;
    for (int k = 0; k < 8; k++) y += st[(j + (k + 16) * nt) % n];
    for (int i = 0; i < iters; i++) y = fmaf(y, 1.0000001f, 1e-7f);
    st[t % n] = x + y;
}

/* a kernel between products: two dependent rounds of loads from the state
 * with a compute chain after each (iters FMAs), a store; blocks prefetch
 * [pf, pf + pfn) (bytes, 16-aligned), split over the grid, after the first
 * round's loads are issued */
__global__ void __launch_bounds__(GT) k_gap(float *st, int n, int iters, const char *pf, size_t pfn, size_t sn, int pg) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int t = blockIdx.x * GT + threadIdx.x, nt = GB * GT;
    const float x = gap_round1(st, n, t, nt);
    if (pfn && pg > 0 && threadIdx.x == 0) {
        /* striped (session 40): the first pfn / pg bytes of each of the
         * product's pg blocks' shares (share()'s split of its sn bytes), so
         * that every block of the product starts with lines in L2, not the
         * first few blocks alone (whose early end the product's last block
         * does not wait for) */
        const size_t per = (sn / 16 + pg - 1) / pg * 16, take = (pfn / pg) & ~(size_t)15;
        for (int b = blockIdx.x; b < pg; b += gridDim.x) {
            const size_t lo = per * b, m = lo < sn ? (sn - lo < take ? sn - lo : take) : 0;
            if (m) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pf + lo), "r"((unsigned)m) : "memory");
        }
    } else if (pfn && threadIdx.x == 0) {
        const size_t per = (pfn / gridDim.x + 15) & ~(size_t)15;
        const size_t lo = per * blockIdx.x, m = lo < pfn ? (pfn - lo < per ? pfn - lo : per) : 0;
        for (size_t o = 0; o < m; o += (size_t)1 << 20) { /* a bulk request of at most 1 MB */
            const unsigned sz = (unsigned)(m - o < ((size_t)1 << 20) ? m - o : ((size_t)1 << 20));
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pf + lo + o), "r"(sz) : "memory");
        }
    }
    gap_rest(st, n, iters, t, nt, x);
}

struct step {
    int n;        /* launches */
    int kind[512]; /* -1: a latency kernel of iters[i]; else the stream index */
    int iters[512];
};

static void launch_gap(cudaStream_t st, float *stt, int n, int iters, const char *pf, size_t pfn, size_t sn = 0,
                       int pg = 0) {
    launch_ex(st, dim3(GB), dim3(GT), true, k_gap, stt, n, iters, pf, pfn, sn, pg);
}

/* the step captured: products (when prod), latency kernels (when gaps),
 * each latency kernel prefetching ahead_mb of the next product */
static cudaGraphExec_t capture(cudaStream_t st, const uint4 *p, const chain &c, const step &sp, int grid, unsigned *out,
                               float *stt, int n, bool prod, bool gaps, double ahead_mb, bool striped) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < sp.n; i++) {
        if (sp.kind[i] >= 0) {
            if (prod) launch_ex(st, dim3(grid), dim3(THREADS), true, k_prod, p, c, sp.kind[i], out);
            continue;
        }
        if (!gaps) continue;
        const char *pf = NULL;
        size_t pfn = 0, sn = 0;
        if (ahead_mb > 0 && i + 1 < sp.n && sp.kind[i + 1] >= 0) {
            const int s = sp.kind[i + 1];
            const size_t bytes = (c.off[s + 1] - c.off[s]) * 16, want = (size_t)(ahead_mb * 1e6) & ~(size_t)15;
            pf = (const char *)(p + c.off[s]);
            pfn = want < bytes ? want : bytes;
            sn = bytes;
        }
        launch_gap(st, stt, n, sp.iters[i], pf, pfn, sn, striped ? grid : 0);
    }
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphDestroy(g));
    return e;
}

enum { GAP_GDN, GAP_ATT, GAP_SWI };

/* the step's launches in order: a SwiGLU latency kernel before every down,
 * a GDN or attention one after every in_proj / q+k+v; gap_of[i] names
 * launch i's latency kind */
static void step9b(const chain &c9, step &sp, int *gap_of) {
    memset(&sp, 0, sizeof sp);
    for (int s = 0; s < c9.n; s++) {
        const int l = s / 4, k = s % 4, head = s == c9.n - 1;
        if (!head && k == 3) gap_of[sp.n] = GAP_SWI, sp.kind[sp.n++] = -1;
        sp.kind[sp.n++] = s;
        if (!head && k == 0) gap_of[sp.n] = chain9b_att(l) ? GAP_ATT : GAP_GDN, sp.kind[sp.n++] = -1;
    }
}

/* the latency kernel's iters for each kind, calibrated to the real step's
 * times (us: GDN 5.5, attention 15, SwiGLU 1.8): 64 of them in a row under
 * PDL, the median's share; then set on sp's latency launches by their kind
 * (gap_of, step9b's) */
static void calibrate_gaps(cudaStream_t st, float *stt, int nst, step &sp, const int *gap_of, int iters[3]) {
    const double target[3] = {5.5, 15.0, 1.8};
    for (int k = 0; k < 3; k++) {
        int lo = 0, hi = 200000;
        for (int it = 0; it < 16 && lo < hi; it++) {
            const int mid = (lo + hi) / 2;
            const float ms = time_ms([&] { for (int j = 0; j < 64; j++) launch_gap(st, stt, nst, mid, NULL, 0); }, st);
            if (ms * 1e3 / 64 < target[k]) lo = mid + 1;
            else hi = mid;
        }
        iters[k] = lo;
    }
    for (int i = 0; i < sp.n; i++)
        if (sp.kind[i] < 0) sp.iters[i] = iters[gap_of[i]];
}

#endif
