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
#include "step9b.cuh" /* k_prod, k_gap, step, step9b, calibrate_gaps, capture; chain9b.cuh */

int main(int argc, char **argv) {
    const int dev = argc > 1 ? atoi(argv[1]) : 0;
    cudaDeviceProp pr;
    cudaStream_t st;
    open_device(dev, pr, st);

    /* the 9B step's products (syncfloor.cu's chain) and where its kernels
     * between products stand: after an in_proj (GDN) or q+k+v (attention),
     * before a down (SwiGLU) */
    chain c9;
    const size_t n16 = chain9b(c9);
    step sp;
    int gap_of[512];
    step9b(c9, sp, gap_of);

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

    int iters[3];
    calibrate_gaps(st, stt, nst, sp, gap_of, iters);

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
