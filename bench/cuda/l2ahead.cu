/* l2ahead.cu: can the HBM idle time of a decode step (the GDN, attention and
 * staging kernels between the products: ~300 us of a 9B step, session 26's
 * trace) carry the next product's first bytes into L2, so that the product
 * then streams them from L2? Session 19 asked the products' own blocks to
 * prefetch before their PDL wait and lost: the prefetch traffic queued the
 * staging's loads. This probe asks the question where the memory system is
 * idle instead: the kernel between two products issues the prefetch (one
 * cp.async.bulk.prefetch.L2 a block: the TMA unit fetches, no registers
 * held) after its own first loads, and the question is what the product
 * gains against what the kernel between loses.
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o l2ahead bench/cuda/l2ahead.cu && ./l2ahead [DEVICE]
 *
 * The chain: syncfloor.cu's (the 9B step's 129 products as plain 16-byte
 * reads, U = 4 a thread, 2 blocks of 256 an SM, one launch a product, graph
 * + PDL), with a latency kernel where the step has its kernels between
 * products: after every GDN in_proj (the GDN step, ~5.5 us in the real
 * step), after every attention q+k+v (prep + split + combine, ~15 us), and
 * before every down (the SwiGLU digits, ~1.8 us). The latency kernel: 128
 * blocks of 128 threads; together they read a 2 MB state (one round, 32
 * floats a thread, coalesced), spin a dependent FMA chain (ITERS), read a
 * quarter of it again at addresses made from what they read (a second
 * round, the one a prefetch in flight could delay), spin again, store. With AHEAD > 0 its blocks
 * prefetch the next product's first AHEAD MB (split over the blocks) right
 * after their first loads are consumed.
 * Forms (each a median of 7 timed runs after 2 warm-ups):
 *   products     the products alone (syncfloor's graph+pdl)
 *   gaps         the latency kernels alone (their chain: what they cost)
 *   both         products and latency kernels: the step's shape
 *   both+A       the same, each latency kernel prefetching A MB of the next
 *                product, A = 4, 8, 16, 32
 *   gaps+A       the latency kernels alone, prefetching as in both+A (their
 *                own slowdown, with nothing else in flight)
 *   both+sA      (session 40) A MB striped: each product block's first
 *                A / grid bytes of its share. Why: the product's blocks
 *                stream contiguous shares in one wave, so the first A MB
 *                feed its first few blocks only, and the product ends with
 *                its last block: s30-run1's both+A (-0.027 .. +0.043 ms)
 *                could not show a gain whatever L2 gave. gaps+sA, -r: the
 *                same forms again (the run's noise)
 * Prediction (if the prefetch costs the chain nothing): both+A saves up to
 * A MB / probe - A MB / L2 rate a gap, ~1-2 us a gap at 8-16 MB, 64 gaps: ~100
 * us of both's ~1.6 ms. Nothing is asserted (a benchmark): it prints a table.
 * Measured: no gain in either form. s30-run1 (H100, contiguous): both 1.965
 * ms, both+4..32 1.938..2.008. s40-run2 (H100, both forms in one run): both
 * 2.014 (2.030 repeated), both+4 / +8 1.988 / 1.990, striped both+s4..s16
 * 2.007..2.010, +s32 2.027; the gaps alone 0.320 ms, 0.359-0.392 while
 * prefetching. So the striping was not what the first run missed: the
 * prefetch's traffic costs the kernels between products about what it
 * saves the products (the engine's own form, q4dp's NX, lost 0.4-2.1% the
 * same way: bench/cuda/RESULTS.md, session 40). */
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

/* a kernel between products: two dependent rounds of loads from the state
 * with a compute chain after each (iters FMAs), a store; blocks prefetch
 * [pf, pf + pfn) (bytes, 16-aligned), split over the grid, after the first
 * round's loads are issued */
__global__ void __launch_bounds__(GT) k_gap(float *st, int n, int iters, const char *pf, size_t pfn, size_t sn, int pg) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int t = blockIdx.x * GT + threadIdx.x, nt = GB * GT;
    float x = 0.f; /* round 1: the whole state, coalesced (2 MB over the grid) */
    for (int k = 0; k < n / nt; k++) x += st[t + k * nt];
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
    for (int i = 0; i < iters; i++) x = fmaf(x, 1.0000001f, 1e-7f);
    const int j = t + (int)(x * 0.f); /* round 2 depends on round 1 (x * 0 is not folded: x may be NaN) */
    float y = 0.f;
    for (int k = 0; k < 8; k++) y += st[(j + (k + 16) * nt) % n];
    for (int i = 0; i < iters; i++) y = fmaf(y, 1.0000001f, 1e-7f);
    st[t % n] = x + y;
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

int main(int argc, char **argv) {
    const int dev = argc > 1 ? atoi(argv[1]) : 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, dev));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    /* the 9B step's products (syncfloor.cu's chain) and where its kernels
     * between products stand: after an in_proj (GDN) or q+k+v (attention),
     * before a down (SwiGLU) */
    chain c9;
    const size_t n16 = chain9b(c9);
    step sp;
    memset(&sp, 0, sizeof sp);
    enum { GDN, ATT, SWI };
    int gap_of[512]; /* which latency kernel: its iters are calibrated below against a target time */
    for (int s = 0; s < c9.n; s++) {
        const int l = s / 4, k = s % 4, head = s == c9.n - 1;
        if (!head && k == 3) gap_of[sp.n] = SWI, sp.kind[sp.n++] = -1;
        sp.kind[sp.n++] = s;
        if (!head && k == 0) gap_of[sp.n] = chain9b_att(l) ? ATT : GDN, sp.kind[sp.n++] = -1;
    }

    uint4 *p;
    unsigned *out;
    float *stt;
    const int nst = 512 * 1024; /* a 2 MB state */
    CK(cudaMalloc(&p, n16 * 16));
    CK(cudaMemset(p, 1, n16 * 16));
    CK(cudaMalloc(&out, 4096 * sizeof(unsigned)));
    CK(cudaMalloc(&stt, nst * sizeof(float)));
    CK(cudaMemset(stt, 0, nst * sizeof(float)));

    const double probe = copy_probe_gbs(st);

    /* calibrate the latency kernel's iters to the real step's times (us):
     * 64 of them in a row under PDL, the median's share */
    const double target[3] = {5.5, 15.0, 1.8};
    int iters[3];
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

    const int grid = 2 * pr.multiProcessorCount;
    printf("device: %s, %d SMs; copy probe %.0f GB/s; products: %d streams, %.3f GB (floor %.3f ms)\n", pr.name,
           pr.multiProcessorCount, probe, c9.n, n16 * 16 / 1e9, n16 * 16 / 1e9 / probe * 1e3);
    printf("latency kernels: %d (GDN-like %d iters, attention-like %d, SwiGLU-like %d)\n\n", sp.n - c9.n, iters[0],
           iters[1], iters[2]);
    printf("%-12s %10s %12s\n", "form", "ms", "vs both");
    /* +A: the next product's first A MB; s+A: A MB striped over its blocks'
     * shares (each block's first A / grid) */
    struct form { const char *name; bool prod, gaps; double mb; bool striped; };
    static const form fs[] = {{"products", true, false, 0, false}, {"gaps", false, true, 0, false},
                              {"both", true, true, 0, false},      {"both+4", true, true, 4, false},
                              {"both+8", true, true, 8, false},    {"both+16", true, true, 16, false},
                              {"both+32", true, true, 32, false},  {"both+s4", true, true, 4, true},
                              {"both+s8", true, true, 8, true},    {"both+s16", true, true, 16, true},
                              {"both+s24", true, true, 24, true},  {"both+s32", true, true, 32, true},
                              {"gaps+8", false, true, 8, false},   {"gaps+s8", false, true, 8, true},
                              {"gaps+s16", false, true, 16, true}, {"both-r", true, true, 0, false},
                              {"both+s16-r", true, true, 16, true}};
    float both = 0;
    for (const form &f : fs) {
        cudaGraphExec_t g = capture(st, p, c9, sp, grid, out, stt, nst, f.prod, f.gaps, f.mb, f.striped);
        const float ms = time_ms([&] { CK(cudaGraphLaunch(g, st)); }, st);
        CK(cudaGraphExecDestroy(g));
        if (!strcmp(f.name, "both")) both = ms;
        if (both > 0) printf("%-12s %10.3f %12.3f\n", f.name, ms, ms - both);
        else printf("%-12s %10.3f %12s\n", f.name, ms, "");
        printf("KV %s.ms %.4f\n", f.name, ms);
    }
    CK(cudaFree(p));
    CK(cudaFree(out));
    CK(cudaFree(stt));
    return 0;
}
