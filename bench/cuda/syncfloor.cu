/* syncfloor.cu: what a chain of dependent weight streams can reach on this
 * GPU under each way of ordering them, before any arithmetic: the floor a
 * persistent decode kernel would stand on (issue 16's 75%: session 26's
 * question of whether one kernel with grid barriers can beat 209 launches
 * with PDL hand-offs, and whether loads issued across the barrier help).
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -o syncfloor bench/cuda/syncfloor.cu && ./syncfloor [DEVICE [BLOCKS_A_SM]]
 *
 * The chain: the 9B decode step's products as plain reads of their bytes
 * (per layer: GDN in_proj 28.5 MB / out_proj 9.4 / gate+up 56.6 / down 28.3,
 * every 4th layer attention's q+k+v 23.6 instead of in_proj; then the 572 MB
 * head; 129 streams, 4.46 GB), each block of a stream reading its contiguous
 * share with 16-byte loads (ld.global.nc.L1::no_allocate, U = 4 in flight a
 * thread, blocks of 256 at two a SM: k_q4dp's shape) and nothing computed.
 * Forms, each a median of 7 timed runs after 2 warm-ups:
 *   graph     one kernel a stream, captured in a CUDA graph, no PDL
 *   graph+pdl the same with programmatic stream serialization: each kernel
 *             waits (griddepcontrol.wait) then streams (the engine's form)
 *   pdl+pre   the same, each block's first U loads issued before its wait
 *             (session 17's idea in its purest form: no staging behind it)
 *   persist   one persistent kernel, a grid barrier between streams
 *   persist+pre  the same, each block's first U loads of the next stream
 *             issued before it enters the barrier
 * and the same five with 0 bytes a stream (the hand-off alone: us a step).
 * Reports ms, GB/s and % of a device-to-device copy probe of 2 GiB (read +
 * write counted, as cuda_bench's). Prints a table; nothing is asserted (a
 * benchmark). */
#include "chain9b.cuh" /* chain, chain9b, share, ld_stream, launch_ex, copy_probe_gbs; CK, time_ms */

constexpr int U = 4, THREADS = 256;

/* the first U loads of a share (pre), issued early where asked */
__device__ __forceinline__ void first_loads(const uint4 *p, size_t lo, size_t hi, uint4 (&v)[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const size_t i = lo + threadIdx.x + (size_t)u * THREADS;
        v[u] = i < hi ? ld_stream(p + i) : make_uint4(0, 0, 0, 0);
    }
}

/* stream [lo, hi): U loads in flight a thread; pre holds the first round
 * when has_pre */
__device__ __forceinline__ unsigned stream(const uint4 *p, size_t lo, size_t hi, uint4 (&pre)[U], bool has_pre) {
    unsigned acc = 0;
    size_t i = lo + threadIdx.x;
    if (has_pre) {
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= pre[u].x ^ pre[u].y ^ pre[u].z ^ pre[u].w;
        i += (size_t)U * THREADS;
    }
    for (; i < hi; i += (size_t)U * THREADS) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = i + u * THREADS < hi ? ld_stream(p + i + u * THREADS) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    return acc;
}

/* one stream a launch; PDL: wait for the previous grid first (PRE: after
 * the first loads) */
template <bool PDL, bool PRE>
__global__ void __launch_bounds__(THREADS) k_one(const uint4 *p, const __grid_constant__ chain c, int s, unsigned *out) {
    size_t lo, hi;
    share(c, s, lo, hi);
    uint4 pre[U];
    if (PRE) first_loads(p, lo, hi, pre);
    if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned acc = stream(p, lo, hi, pre, PRE);
    if (PDL) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc; /* keeps the loads */
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* every block of the grid past this point before any goes on (a counter
 * and a generation word; the last to arrive resets the counter and moves
 * the generation) */
__device__ __forceinline__ void grid_barrier(unsigned *count, unsigned *gen, unsigned &g) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(count, 1u) == gridDim.x - 1) {
            atomicExch(count, 0u);
            __threadfence();
            atomicAdd(gen, 1u);
        } else {
            while (ld_acquire(gen) == g) {
            }
        }
    }
    g++;
    __syncthreads();
}

/* all streams in one launch (every block resident: the grid is sized by
 * the occupancy query) */
template <bool PRE>
__global__ void __launch_bounds__(THREADS) k_persist(const uint4 *p, const __grid_constant__ chain c, unsigned *bar,
                                                     unsigned *out) {
    /* the generation this launch starts from (it never goes back: each
     * barrier moves it once; no block can pass the first barrier before
     * every block has read it here) */
    unsigned g = threadIdx.x == 0 ? ld_acquire(bar + 1) : 0, acc = 0;
    uint4 pre[U];
    bool has = false;
    for (int s = 0; s < c.n; s++) {
        size_t lo, hi;
        share(c, s, lo, hi);
        acc ^= stream(p, lo, hi, pre, has);
        has = false;
        if (s + 1 < c.n) {
            if (PRE) {
                share(c, s + 1, lo, hi);
                first_loads(p, lo, hi, pre);
                has = true;
            }
            grid_barrier(bar, bar + 1, g);
        }
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
}

/* the chain captured as a graph of one launch a stream */
template <bool PDL, bool PRE>
static cudaGraphExec_t capture(cudaStream_t st, const uint4 *p, const chain &c, int grid, unsigned *out) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int s = 0; s < c.n; s++) launch_ex(st, dim3(grid), dim3(THREADS), PDL, k_one<PDL, PRE>, p, c, s, out);
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphDestroy(g));
    return e;
}

int main(int argc, char **argv) {
    const int dev = argc > 1 ? atoi(argv[1]) : 0, bps = argc > 2 ? atoi(argv[2]) : 2;
    cudaDeviceProp pr;
    cudaStream_t st;
    open_device(dev, pr, st);

    /* the 9B step's products */
    chain c9;
    const size_t n16 = chain9b(c9);
    /* the hand-off alone: 128 empty streams */
    chain c0;
    memset(&c0, 0, sizeof c0);
    c0.n = 128;

    uint4 *p;
    unsigned *out, *bar;
    CK(cudaMalloc(&p, n16 * 16));
    CK(cudaMemset(p, 1, n16 * 16));
    CK(cudaMalloc(&out, 4096 * sizeof(unsigned)));
    CK(cudaMalloc(&bar, 2 * sizeof(unsigned)));
    CK(cudaMemset(bar, 0, 2 * sizeof(unsigned)));

    const double probe = copy_probe_gbs(st); /* 2 GiB device to device, read + write counted */

    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_persist<true>, THREADS, 0));
    const int grid = pr.multiProcessorCount * (per_sm < bps ? per_sm : bps);
    printf("device: %s, %d SMs; copy probe %.0f GB/s; grid %d blocks of %d\n", pr.name,
           pr.multiProcessorCount, probe, grid, THREADS);
    printf("chain: %d streams, %.3f GB (the 9B decode step's products); floor at the probe %.3f ms\n\n", c9.n,
           n16 * 16 / 1e9, n16 * 16 / 1e9 / probe * 1e3);
    printf("%-14s %10s %8s %8s %14s\n", "form", "chain ms", "GB/s", "% probe", "empty us/hop");

    const chain *cs[2] = {&c9, &c0};
    float ms[5][2];
    for (int w = 0; w < 2; w++) {
        const chain &c = *cs[w];
        cudaGraphExec_t g0 = capture<false, false>(st, p, c, grid, out);
        cudaGraphExec_t g1 = capture<true, false>(st, p, c, grid, out);
        cudaGraphExec_t g2 = capture<true, true>(st, p, c, grid, out);
        ms[0][w] = time_ms([&] { CK(cudaGraphLaunch(g0, st)); }, st);
        ms[1][w] = time_ms([&] { CK(cudaGraphLaunch(g1, st)); }, st);
        ms[2][w] = time_ms([&] { CK(cudaGraphLaunch(g2, st)); }, st);
        ms[3][w] = time_ms([&] { k_persist<false><<<grid, THREADS, 0, st>>>(p, c, bar, out); }, st);
        ms[4][w] = time_ms([&] { k_persist<true><<<grid, THREADS, 0, st>>>(p, c, bar, out); }, st);
        CK(cudaGraphExecDestroy(g0));
        CK(cudaGraphExecDestroy(g1));
        CK(cudaGraphExecDestroy(g2));
    }
    static const char *nm[5] = {"graph", "graph+pdl", "pdl+pre", "persist", "persist+pre"};
    for (int f = 0; f < 5; f++) {
        const double gbs = n16 * 16 / (ms[f][0] * 1e-3) / 1e9;
        printf("%-14s %10.3f %8.0f %7.1f%% %14.2f\n", nm[f], ms[f][0], gbs, 100 * gbs / probe, ms[f][1] * 1e3 / c0.n);
        printf("KV %s.ms %.4f\nKV %s.pct %.2f\nKV %s.hop_us %.3f\n", nm[f], ms[f][0], nm[f], 100 * gbs / probe, nm[f],
               ms[f][1] * 1e3 / c0.n);
    }
    CK(cudaFree(p));
    CK(cudaFree(out));
    CK(cudaFree(bar));
    return 0;
}
