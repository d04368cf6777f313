/* ringfloor.cu: can a decode step whose weights stream independently of its
 * dependencies reach issue 16's 75% of the copy probe on the 9B, where the
 * launch chain cannot? (session 42's question, before any engine code.)
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o ringfloor bench/cuda/ringfloor.cu && ./ringfloor [DEVICE]
 *
 * Why: l2ahead.cu's model of the 9B step (the 129 products as plain reads,
 * one PDL launch each, with latency kernels where the real step has its GDN,
 * attention and SwiGLU kernels) costs its products plus its latency kernels,
 * nearly to the microsecond (s40-run2, H100: 1.682 + 0.320 -> 2.014 ms, 73%
 * of the probe; the engine itself 69%): nothing overlaps the ~300 us of
 * latency work with streaming, because every weight load of a product waits
 * for the previous kernel's grid. Session 26's persistent kernel with grid
 * barriers was slower still, since its loads waited at the barriers too.
 * But a product's weights depend on nothing: only its arithmetic waits for
 * its input. So here one block an SM runs the whole step, split by warps:
 *   - warp 0's lane 0, the producer, walks the step's products in order and
 *     asks the TMA unit (cp.async.bulk, global -> shared) for the block's
 *     share of each, in chunks, into a ring of S slots, waiting only for a
 *     free slot (an mbarrier the consumers arrive on): never for a
 *     dependency, so it runs up to S chunks (the whole ring, ~25 MB over
 *     the GPU) ahead of the arithmetic;
 *   - warps 1..8, the consumers, wait for their input (a counter in global
 *     memory that every block of the previous item adds to, acquire /
 *     release), then consume the ring's chunks of their share, freeing each
 *     slot, and add to their item's counter; the latency work (the same as
 *     l2ahead's latency kernels, calibrated the same way) runs on 128 of the
 *     consumer threads of 128 blocks, between the products as in the step.
 * Forms (each the median of 7 timed runs after 2 warm-ups, in one run):
 *   pdl-products / pdl-gaps / pdl-both   l2ahead's chain of launches (the
 *                              products alone, its latency kernels alone,
 *                              both: the step's shape as launched today)
 *   ring-products-x            the ring, products only, words XORed (checks
 *                              that every byte of the chain was consumed
 *                              once: the XOR of all blocks' words against
 *                              the buffer's, computed apart)
 *   ring-products-nodep        the ring's streaming alone: consumers never
 *                              wait for the previous item
 *   ring-products-nobytes / ring-both-nobytes   the hand-offs alone: every
 *                              item waits for the previous one, nothing
 *                              streams
 *   ring-gaps                  the latency work alone in one kernel, with
 *                              its counter hand-offs (no bytes)
 *   ring-both-x S x C          products and latency work, XOR, ring of S
 *                              slots of C KB (4 x 16, 12 x 16, 6 x 32, 24 x 8);
 *                              2/SM: two blocks an SM, 6 x 16 each
 *   ring-both-dp               the consumers do dp4a arithmetic as k_q4dp's
 *                              one-row passes do (nibbles to two int8x4
 *                              words, 8 dp4a against digits in shared
 *                              memory, a float scale a 64-weight group)
 *   ring-both-dps              and each product stages its input first:
 *                              the normed ones read the 4,096-float row
 *                              from L2, sum its squares across the block and
 *                              make int8 digits in shared memory; the plain
 *                              ones copy their digits (4 or 12 KB) there
 *   seg-both-x / -dps (10x16) the step as launches again (PDL): the products
 *                              between two mixers one ring launch (its
 *                              producer streams while the mixer before it
 *                              runs), the GDN- and attention-like latency
 *                              kernels between them: the form an engine can
 *                              reach a launch at a time
 * Prediction (H100, probe ~3.0 TB/s, floor 1.478 ms): ring-products-x within
 * ~5% of the floor; ring-both-x ~1.70 ms (the ring holds ~8 us of streaming,
 * so a GDN-like gap of 5.5 us and a SwiGLU-like 1.8 hide whole and an
 * attention-like 15 us half): ~87% against pdl-both's 73%; dp and dps a few
 * per cent over it; seg a few per cent over ring (a hop at each mixer, and
 * the ring refilled there from empty). If that holds, a persistent decode kernel in this form is
 * the road to 75% on the H200; if the counters' hand-offs or the consumers'
 * catch-up eat the gain, it is not. Nothing is asserted but the XOR check
 * (a benchmark): it prints a table, and for each one-launch ring form the
 * last run's time by item kind as block 0 saw it (from an item's input
 * ready to the next item's).
 * Measured (s42-run1..3, one H100, probe 3,030-3,035 GB/s, floor 1.471 ms;
 * three runs within 0.3%): the prediction failed. pdl-products 1.629 ms
 * (90%), pdl-gaps 0.321, pdl-both 1.964 (75%); ring-products-x 1.711 (86%:
 * the ring streams 5% slower than the launches), ring-gaps 0.293 (the
 * counters' hand-offs a little cheaper than PDL's), ring-both-x 2.02-2.08
 * at every ring size (71-73%), dp 2.17, dps 2.26, seg-both 2.15 / 2.42. By
 * kind (call 3), the products take the same time with the latency work as
 * without it (in_proj / q+k+v 339 vs 330 us, out_proj / o_proj 172 vs 170,
 * gate+up 666 vs 661, down 353 vs 351): the latency work bought the
 * streaming nothing, and itself ran longer beside it (GDN-like 128 vs 109 us
 * alone, SwiGLU-like 90 vs 64, attention-like 117 vs 111). So the ring does
 * not overlap the mixers with streaming, and a persistent step in this form
 * is not the road to 75%. Not run (no device time was left): nodep and
 * nobytes, which split the ring's pace into its streaming alone and its
 * hand-offs alone, to say which of the two kept the ring full at a gap. */
#include "step9b.cuh" /* k_prod, k_gap, gap_round1, gap_rest, step, step9b, calibrate_gaps, capture; chain9b.cuh */

constexpr int NCW = 8, CT = 32 * NCW, RT = CT + 32; /* consumer warps, consumer threads, block */
constexpr int DIG = 12288;                              /* digits in shared memory: the widest input (down) */

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* a wait that never ends is a bug in this probe: name it and stop the
 * kernel (the host reports the launch's error) instead of hanging the call */
__device__ __noinline__ void stuck(unsigned *err, unsigned what) {
    atomicExch(err, what);
    __threadfence_system();
    __trap();
}

__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}

__device__ __forceinline__ bool mbar_try(uint64_t *b, unsigned parity) {
    unsigned ok;
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok)
                 : "r"(smem_u32(b)), "r"(parity)
                 : "memory");
    return ok != 0;
}

/* until ready() holds; half a second without it is stuck(what) */
template <typename F>
__device__ __forceinline__ void spin_until(F ready, unsigned *err, unsigned what) {
    if (ready()) return;
    const unsigned long long t0 = now_ns();
    while (!ready())
        if (now_ns() - t0 > 500000000ull) stuck(err, what);
}

/* until the phase of parity `parity` of b has completed */
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity, unsigned *err, unsigned what) {
    spin_until([&] { return mbar_try(b, parity); }, err, what);
}

__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}

/* bytes (a multiple of 16, both ends 16-aligned) from global to shared by
 * the TMA unit; their arrival completes tx on bar */
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

__device__ __forceinline__ unsigned ld_acq(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* the consumer warps only (the producer never joins a barrier) */
__device__ __forceinline__ void cbar() { asm volatile("bar.sync 1, %0;" ::"n"(CT) : "memory"); }

/* item i's input is ready once its predecessor's counter reaches want */
__device__ __forceinline__ void wait_count(const unsigned *c, unsigned want, unsigned *err) {
    spin_until([&] { return ld_acq(c) >= want; }, err, 3);
}

/* this block's part of item i is done (its consumers' writes before the
 * count, which other blocks acquire) */
__device__ __forceinline__ void signal_done(unsigned *done, int i, int ct) {
    cbar();
    if (ct == 0) {
        __threadfence();
        atomicAdd(done + i, 1u);
    }
}

/* the block's share of product s as the ring carries it: its first uint4
 * (lo) and its bytes (none under the nobytes flag); the producer and the
 * consumers walk the same chunks of it, chunk k of the launch in slot
 * k % slots */
__device__ __forceinline__ size_t share_bytes(const chain &c, int s, int flags, size_t &lo) {
    size_t hi;
    share(c, s, lo, hi);
    return (flags & 2) ? 0 : (hi - lo) * 16;
}
__device__ __forceinline__ unsigned chunk_bytes(size_t bytes, size_t o, int chunk) {
    return (unsigned)(bytes - o < (size_t)chunk ? bytes - o : chunk);
}

/* what a product reads as its input's width: the down's 12,288 columns,
 * every other product's 4,096 */
__device__ __host__ __forceinline__ int cols_of(const chain &c, int s) { return s < c.n - 1 && s % 4 == 3 ? 12288 : 4096; }
/* the products whose input is normed in the real step: in_proj / q+k+v,
 * gate+up, the head */
__device__ __host__ __forceinline__ bool normed(const chain &c, int s) { return s == c.n - 1 || s % 4 == 0 || s % 4 == 2; }

/* the input of a product staged into dig (MODE 2): a normed one from the
 * 4,096-float row (its sum of squares across the consumers, then int8
 * digits), a plain one copied from its digits in global memory */
__device__ __forceinline__ void stage(const chain &c, int s, const float *act, const int8_t *dsrc, int8_t *dig,
                                      float *red, int ct) {
    if (normed(c, s)) {
        float x[4096 / CT], ss = 0.f;
#pragma unroll
        for (int m = 0; m < 4096 / CT; m++) x[m] = act[ct + m * CT], ss = fmaf(x[m], x[m], ss);
#pragma unroll
        for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if ((ct & 31) == 0) red[ct >> 5] = ss;
        cbar();
        float t = 0.f;
#pragma unroll
        for (int w = 0; w < NCW; w++) t += red[w];
        const float r = rsqrtf(t / 4096.f + 1e-6f) * 16.f;
#pragma unroll
        for (int m = 0; m < 4096 / CT; m++) dig[ct + m * CT] = (int8_t)max(-127, min(127, __float2int_rn(x[m] * r)));
    } else {
        const int n = cols_of(c, s) / 16;
        for (int j = ct; j < n; j += CT) ((int4 *)dig)[j] = ((const int4 *)dsrc)[j];
    }
    cbar();
}

/* one chunk of n uint4 (at uint4 cw0 of its rows: column word cw0 % cpr)
 * consumed: MODE 0 XORs the words; else each uint4's 32 nibbles as two
 * int8x4 words against the digits of their 32 columns (8 dp4a), a float
 * scale every 64 weights */
template <int MODE>
__device__ __forceinline__ void consume(const uint4 *r, int n, size_t cw0, int cpr, const int8_t *dig, int ct,
                                        unsigned &acc, float &facc) {
    if (MODE == 0) {
        for (int j = ct; j < n; j += CT) {
            const uint4 v = r[j];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        return;
    }
    int cw = (int)((cw0 + ct) % cpr);
    const int step = CT % cpr;
    for (int j = ct; j < n; j += CT) {
        const uint4 v = r[j];
        const int4 a0 = ((const int4 *)dig)[2 * cw], a1 = ((const int4 *)dig)[2 * cw + 1];
        int s = 0;
        s = __dp4a((int)(v.x & 0x0f0f0f0fu), a0.x, s), s = __dp4a((int)((v.x >> 4) & 0x0f0f0f0fu), a0.y, s);
        s = __dp4a((int)(v.y & 0x0f0f0f0fu), a0.z, s), s = __dp4a((int)((v.y >> 4) & 0x0f0f0f0fu), a0.w, s);
        s = __dp4a((int)(v.z & 0x0f0f0f0fu), a1.x, s), s = __dp4a((int)((v.z >> 4) & 0x0f0f0f0fu), a1.y, s);
        s = __dp4a((int)(v.w & 0x0f0f0f0fu), a1.z, s), s = __dp4a((int)((v.w >> 4) & 0x0f0f0f0fu), a1.w, s);
        facc = fmaf((float)s, (cw & 1) ? 0.75f : 1.25f, facc);
        cw += step;
        if (cw >= cpr) cw -= cpr;
    }
}

/* the step's items i0..i1-1 in one launch, in order (kind >= 0: a
 * product's stream; -1: latency work of iters[i]); done[i] counts the
 * blocks that finished item i (gridDim.x for a product, GB for latency
 * work), want = that times gen + 1 (counters are not reset between runs).
 * PDL (a segment of the step among other launches): item i0's input is the
 * previous launch's output (griddepcontrol.wait, the consumers only: the
 * producer streams from the start), and the next launch may start at once
 * (its own wait holds it until this grid has ended) */
template <int MODE>
__global__ void __launch_bounds__(RT, 1)
    k_ring(const uint4 *p, const __grid_constant__ chain c, const int *kind, const int *iters, int i0, int i1, bool pdl,
           unsigned *done, unsigned gen, float *stt, int nst, const float *act, const int8_t *dsrc, int chunk,
           int slots, unsigned *out, unsigned *err, unsigned long long *tl, int flags) {
    extern __shared__ __align__(128) unsigned char sm[];
    uint64_t *full = (uint64_t *)sm, *empty = full + slots;
    unsigned char *ring = sm + ((16 * slots + 127) & ~127);
    int8_t *dig = (int8_t *)(ring + (size_t)slots * chunk);
    float *red = (float *)(dig + DIG);
    if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x == 0) {
        for (int i = 0; i < slots; i++) mbar_init(full + i, 1), mbar_init(empty + i, NCW);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    for (int j = threadIdx.x; j < DIG; j += RT) dig[j] = (int8_t)(j * 37);
    __syncthreads();

    if (threadIdx.x < 32) { /* the producer: lane 0 */
        if (threadIdx.x) return;
        unsigned k = 0;
        for (int i = i0; i < i1; i++) {
            const int s = kind[i];
            if (s < 0) continue;
            size_t lo;
            const size_t bytes = share_bytes(c, s, flags, lo);
            const char *src = (const char *)(p + lo);
            for (size_t o = 0; o < bytes; o += chunk, k++) {
                const unsigned sz = chunk_bytes(bytes, o, chunk), slot = k % slots;
                mbar_wait(empty + slot, ((k / slots) & 1) ^ 1, err, 1);
                mbar_expect_tx(full + slot, sz);
                bulk_g2s(ring + (size_t)slot * chunk, src + o, sz, full + slot);
            }
        }
        return;
    }

    const int ct = threadIdx.x - 32, lane = threadIdx.x & 31;
    unsigned k = 0, acc = 0;
    float facc = 0.f;
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = i0; i < i1; i++) {
        if (i > i0 && !(flags & 1)) {
            if (ct == 0) wait_count(done + i - 1, (kind[i - 1] >= 0 ? gridDim.x : GB) * (gen + 1), err);
            cbar();
        }
        if (blockIdx.x == 0 && ct == 0) tl[i] = now_ns(); /* block 0's view: item i's input ready */
        const int s = kind[i];
        if (s < 0) { /* latency work: 128 threads of each of GB blocks, as k_gap's grid */
            if (blockIdx.x < GB) {
                if (ct < GT) {
                    const int t = blockIdx.x * GT + ct;
                    gap_rest(stt, nst, iters[i], t, GB * GT, gap_round1(stt, nst, t, GB * GT));
                }
                signal_done(done, i, ct);
            }
            continue;
        }
        if (MODE == 2) stage(c, s, act, dsrc, dig, red, ct);
        size_t lo;
        const size_t bytes = share_bytes(c, s, flags, lo);
        const int cpr = cols_of(c, s) / 32; /* uint4 a row */
        for (size_t o = 0; o < bytes; o += chunk, k++) {
            const unsigned sz = chunk_bytes(bytes, o, chunk), slot = k % slots;
            mbar_wait(full + slot, (k / slots) & 1, err, 2);
            consume<MODE>((const uint4 *)(ring + (size_t)slot * chunk), (int)(sz / 16), lo - c.off[s] + o / 16, cpr,
                          dig, ct, acc, facc);
            __syncwarp();
            if (lane == 0) mbar_arrive(empty + slot);
        }
        signal_done(done, i, ct);
    }
    if (blockIdx.x == 0 && ct == 0) tl[i1] = now_ns();
    /* every consumer's words into one per block (MODE 0's check) */
#pragma unroll
    for (int o = 16; o; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) atomicXor(out + blockIdx.x, acc);
    if (facc == 1.2345e-30f) out[gridDim.x + blockIdx.x] = 1; /* keeps the arithmetic */
}

/* the XOR of every word of p[0, n) */
__global__ void k_xor_all(const uint4 *p, size_t n, unsigned *x) {
    unsigned a = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        a ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    atomicXor(x, a);
}

__global__ void k_fill(uint4 *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const unsigned h = (unsigned)(i * 2654435761u) ^ (unsigned)(i >> 32);
        p[i] = make_uint4(h, h * 31u + 7u, h ^ 0x5bd1e995u, ~h);
    }
}

int main(int argc, char **argv) {
    const int dev = argc > 1 ? atoi(argv[1]) : 0;
    cudaDeviceProp pr;
    cudaStream_t st;
    open_device(dev, pr, st);

    chain c9;
    const size_t n16 = chain9b(c9);
    step sp;
    int gap_of[512];
    step9b(c9, sp, gap_of);

    uint4 *p;
    unsigned *out, *done, *err, *xall;
    float *stt, *act;
    int8_t *dsrc;
    int *dkind, *diters;
    unsigned long long *tl;
    const int nst = 512 * 1024; /* a 2 MB state, as l2ahead's */
    CK(cudaMalloc(&p, n16 * 16));
    k_fill<<<4 * pr.multiProcessorCount, 256, 0, st>>>(p, n16);
    CK(cudaMalloc(&out, 8192 * sizeof(unsigned)));
    CK(cudaMalloc(&done, 1024 * sizeof(unsigned)));
    CK(cudaMalloc(&err, sizeof(unsigned)));
    CK(cudaMalloc(&xall, sizeof(unsigned)));
    CK(cudaMalloc(&stt, nst * sizeof(float)));
    CK(cudaMalloc(&act, 4096 * sizeof(float)));
    CK(cudaMalloc(&dsrc, DIG));
    CK(cudaMalloc(&dkind, 512 * sizeof(int)));
    CK(cudaMalloc(&diters, 512 * sizeof(int)));
    CK(cudaMalloc(&tl, 513 * sizeof(unsigned long long)));
    CK(cudaMemset(stt, 0, nst * sizeof(float)));
    CK(cudaMemset(act, 0x3c, 4096 * sizeof(float))); /* ~0.011 */
    CK(cudaMemset(dsrc, 3, DIG));
    CK(cudaMemset(err, 0, sizeof(unsigned)));
    CK(cudaMemset(xall, 0, sizeof(unsigned)));
    k_xor_all<<<4 * pr.multiProcessorCount, 256, 0, st>>>(p, n16, xall);
    unsigned want_x;
    CK(cudaMemcpyAsync(&want_x, xall, sizeof want_x, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));

    const double probe = copy_probe_gbs(st);
    int iters[3];
    calibrate_gaps(st, stt, nst, sp, gap_of, iters);
    const double floor_ms = n16 * 16 / 1e9 / probe * 1e3;
    printf("device: %s, %d SMs; copy probe %.0f GB/s; products: %d streams, %.3f GB (floor %.3f ms)\n", pr.name,
           pr.multiProcessorCount, probe, c9.n, n16 * 16 / 1e9, floor_ms);
    printf("latency work: %d items (GDN-like %d iters, attention-like %d, SwiGLU-like %d)\n\n", sp.n - c9.n, iters[0],
           iters[1], iters[2]);
    printf("%-20s %9s %8s %10s  %s\n", "form", "ms", "% probe", "vs pdl-both", "check");

    float pdl_both = 0;
    auto row = [&](const char *name, float ms, const char *check) {
        printf("%-20s %9.3f %7.1f%% %10.3f  %s\n", name, ms, floor_ms / ms * 100, pdl_both > 0 ? ms - pdl_both : 0.f,
               check);
        printf("KV %s.ms %.4f\n", name, ms);
        fflush(stdout);
    };

    /* the launch chain, as l2ahead launches it */
    const int grid2 = 2 * pr.multiProcessorCount;
    struct pform { const char *name; bool prod, gaps; };
    static const pform pf[] = {{"pdl-products", true, false}, {"pdl-gaps", false, true}, {"pdl-both", true, true}};
    for (const pform &f : pf) {
        cudaGraphExec_t g = capture(st, p, c9, sp, grid2, out, stt, nst, f.prod, f.gaps, 0, false);
        const float ms = time_ms([&] { CK(cudaGraphLaunch(g, st)); }, st);
        CK(cudaGraphExecDestroy(g));
        if (f.prod && f.gaps) pdl_both = ms;
        row(f.name, ms, "");
    }

    /* the ring: one block an SM, every block resident (checked) */
    if (pr.multiProcessorCount < GB) {
        printf("ring forms need at least %d SMs (the latency work's blocks); this GPU has %d\n", GB,
               pr.multiProcessorCount);
        return 0;
    }
    /* seg: the step as launches again, the products between two mixers
     * (and the SwiGLU work among them) one ring launch, the GDN- and
     * attention-like latency kernels launches of their own between them,
     * all with PDL: a ring launch's producer streams while the mixer before
     * it runs, once the ring launch before has ended */
    struct rform { const char *name; int mode; bool prod, gaps; int slots, kb, bps; bool seg; int flags; };
    static const rform rf[] = {
        {"ring-products-nodep", 0, true, false, 12, 16, 1, false, 1},
        {"ring-products-nobytes", 0, true, false, 12, 16, 1, false, 2},
        {"ring-both-nobytes", 0, true, true, 12, 16, 1, false, 2},
        {"ring-products-x", 0, true, false, 12, 16, 1, false},  {"ring-gaps", 0, false, true, 12, 16, 1, false},
        {"ring-both-x 12x16", 0, true, true, 12, 16, 1, false}, {"ring-both-x 4x16", 0, true, true, 4, 16, 1, false},
        {"ring-both-x 6x32", 0, true, true, 6, 32, 1, false},   {"ring-both-x 24x8", 0, true, true, 24, 8, 1, false},
        {"ring-both-x 2/SM", 0, true, true, 6, 16, 2, false},   {"ring-both-dp", 1, true, true, 12, 16, 1, false},
        {"ring-both-dps", 2, true, true, 12, 16, 1, false},     {"ring-products-dps", 2, true, false, 12, 16, 1, false},
        {"ring-both-dps 2/SM", 2, true, true, 6, 16, 2, false}, {"seg-both-x", 0, true, true, 12, 16, 1, true},
        {"seg-both-dps", 2, true, true, 12, 16, 1, true},       {"seg-both-dps 10x16", 2, true, true, 10, 16, 1, true},
        {"ring-both-x again", 0, true, true, 12, 16, 1, false},
    };
    for (const rform &f : rf) {
        int kind[512], its[512], gk[512], n = 0;
        for (int i = 0; i < sp.n; i++)
            if ((sp.kind[i] >= 0 && f.prod) || (sp.kind[i] < 0 && f.gaps))
                kind[n] = sp.kind[i], its[n] = sp.iters[i], gk[n++] = sp.kind[i] < 0 ? gap_of[i] : -1;
        CK(cudaMemcpyAsync(dkind, kind, n * sizeof(int), cudaMemcpyHostToDevice, st));
        CK(cudaMemcpyAsync(diters, its, n * sizeof(int), cudaMemcpyHostToDevice, st));
        CK(cudaMemsetAsync(done, 0, 1024 * sizeof(unsigned), st));
        CK(cudaMemsetAsync(out, 0, 8192 * sizeof(unsigned), st));
        const int chunk = f.kb * 1024;
        const size_t smem = ((16 * f.slots + 127) & ~127) + (size_t)f.slots * chunk + DIG + 64;
        void (*kern)(const uint4 *, chain, const int *, const int *, int, int, bool, unsigned *, unsigned, float *,
                     int, const float *, const int8_t *, int, int, unsigned *, unsigned *, unsigned long long *, int) =
            f.mode == 0 ? k_ring<0> : f.mode == 1 ? k_ring<1> : k_ring<2>;
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, RT, smem));
        if (occ < f.bps) {
            printf("%-20s does not fit (%zu bytes of shared memory)\n", f.name, smem);
            continue;
        }
        const int grid = f.bps * pr.multiProcessorCount;
        unsigned gen = 0;
        float ms;
        if (!f.seg) {
            ms = time_ms(
                [&] {
                    kern<<<grid, RT, smem, st>>>(p, c9, dkind, diters, 0, n, false, done, gen++, stt, nst, act, dsrc,
                                                 chunk, f.slots, out, err, tl, f.flags);
                },
                st);
        } else {
            /* the counters from 0 at each replay (a memset node), gen 0 */
            cudaGraph_t g;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            CK(cudaMemsetAsync(done, 0, 1024 * sizeof(unsigned), st));
            bool first = true;
            for (int i = 0; i < n;) {
                if (gk[i] == GAP_GDN || gk[i] == GAP_ATT) {
                    launch_gap(st, stt, nst, its[i], NULL, 0);
                    i++;
                    continue;
                }
                int j = i;
                while (j < n && gk[j] != GAP_GDN && gk[j] != GAP_ATT) j++;
                /* every segment waits on griddepcontrol (the first has no
                 * programmatic edge, so its wait returns at once) */
                launch_ex_smem(st, dim3(grid), dim3(RT), smem, !first, kern, p, c9, dkind, diters, i, j, true, done,
                               0u, stt, nst, act, dsrc, chunk, f.slots, out, err, tl, f.flags);
                first = false, i = j;
            }
            CK(cudaStreamEndCapture(st, &g));
            cudaGraphExec_t e;
            CK(cudaGraphInstantiate(&e, g, 0));
            CK(cudaGraphDestroy(g));
            ms = time_ms([&] { CK(cudaGraphLaunch(e, st)); gen++; }, st);
            CK(cudaGraphExecDestroy(e));
        }
        unsigned e = 0, got[1024], x = 0;
        CK(cudaMemcpy(&e, err, sizeof e, cudaMemcpyDeviceToHost));
        if (e) {
            printf("%-20s stuck (wait %u)\n", f.name, e);
            return 1;
        }
        char check[96] = "";
        if (f.mode == 0 && f.prod && !(f.flags & 2)) {
            /* each of gen runs XORed every word once into out: an even count
             * of runs leaves 0, an odd one the buffer's XOR */
            CK(cudaMemcpy(got, out, grid * sizeof(unsigned), cudaMemcpyDeviceToHost));
            for (int b = 0; b < grid; b++) x ^= got[b];
            const unsigned want = (gen & 1) ? want_x : 0;
            snprintf(check, sizeof check, "XOR of %u runs %s", gen, x == want ? "ok" : "WRONG");
        }
        row(f.name, ms, check);
        if (!f.seg) {
            /* where the last run's time went, by item kind, as block 0 saw
             * it: from item i's input ready to item i + 1's (us, summed) */
            unsigned long long t[513];
            CK(cudaMemcpy(t, tl, (n + 1) * sizeof t[0], cudaMemcpyDeviceToHost));
            double by[8] = {0};
            static const char *nm[8] = {"gdn", "att", "swi", "in/qkv", "out/o", "gate/up", "down", "head"};
            for (int i = 0; i < n; i++) {
                const int s = kind[i], k = s < 0 ? gk[i] : s == c9.n - 1 ? 7 : 3 + s % 4;
                by[k] += (t[i + 1] - t[i]) / 1e3;
            }
            printf("   by kind (us):");
            for (int k = 0; k < 8; k++) printf(" %s %.0f", nm[k], by[k]);
            printf("\n");
        }
    }
    return 0;
}
