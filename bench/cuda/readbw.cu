/* readbw.cu: how fast can a kernel read device memory on this GPU, and how
 * many bytes must be in flight for it (the product kernels' ceiling).
 *
 *   nvcc -O3 -arch=sm_90 -o readbw bench/cuda/readbw.cu && ./readbw
 *
 * Reads a 4 GiB buffer (60 MB L2: every read goes to HBM) with 16-byte loads
 * (ld.global.nc.L1::no_allocate, as the products do), each thread keeping U
 * independent loads in flight (all issued before the first is used), at
 * T resident threads per SM (blocks of 256, a persistent grid), and reports
 * GB/s of bytes read against a device-to-device copy of 2 GiB (read + write
 * counted, as cuda_bench's probe). Bytes in flight per SM = T * U * 16.
 * Also: the same with cp.async.bulk (TMA 1D) copies of B bytes into a
 * per-block ring of S stages, completing on mbarriers (no registers hold
 * the bytes in flight). Median of 7 timed runs after 2 warm-ups.
 */
#include "standalone.cuh" /* CK, time_ms */

__device__ __forceinline__ uint4 ld_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

template <int U>
__global__ void __launch_bounds__(256) k_read(const uint4 *p, size_t n, unsigned *out) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i + (U - 1) * stride < n; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = ld_stream(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) out[0] = acc; /* keeps the loads */
}

/* TMA 1D bulk copies: one elected thread a block issues chunks of CH bytes
 * into S stages; all threads XOR the landed stage from shared memory. */
template <int S, int CH>
__global__ void __launch_bounds__(256) k_bulk(const uint8_t *p, size_t nchunks, unsigned *out) {
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ __align__(8) uint64_t bar[S];
    const int t = threadIdx.x;
    if (t == 0)
        for (int s = 0; s < S; s++) asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"((unsigned)__cvta_generic_to_shared(&bar[s])));
    asm volatile("fence.proxy.async.shared::cta;");
    __syncthreads();
    const size_t first = blockIdx.x, step = gridDim.x;
    size_t issued = first;
    auto issue = [&](int s) {
        if (issued < nchunks) {
            const unsigned b = (unsigned)__cvta_generic_to_shared(&bar[s]);
            const unsigned d = (unsigned)__cvta_generic_to_shared(ring + (size_t)s * CH);
            asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(CH));
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(d),
                         "l"(p + issued * CH), "r"(CH), "r"(b)
                         : "memory");
        }
        issued += step;
    };
    if (t == 0)
        for (int s = 0; s < S; s++) issue(s);
    unsigned acc = 0;
    int s = 0;
    unsigned phase = 0;
    for (size_t c = first; c < nchunks; c += step) {
        const unsigned b = (unsigned)__cvta_generic_to_shared(&bar[s]);
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done)
                         : "r"(b), "r"(phase));
        const uint4 *q = (const uint4 *)(ring + (size_t)s * CH);
        for (int i = t; i < CH / 16; i += blockDim.x) {
            uint4 v = q[i];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads(); /* everyone has read stage s */
        if (t == 0) issue(s);
        if (++s == S) s = 0, phase ^= 1;
    }
    if (acc == 0x12345678u) out[0] = acc;
}

template <int U>
static void run_read(const uint4 *p, size_t n, unsigned *o, int nsm, double probe) {
    for (int bps = 1; bps <= 8; bps *= 2) {
        int maxb = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&maxb, k_read<U>, 256, 0));
        if (bps > maxb) break;
        const float ms = time_ms([&] { k_read<U><<<nsm * bps, 256>>>(p, n, o); });
        const double gbs = n * 16.0 / (ms * 1e-3) / 1e9;
        printf("regs  U=%-2d threads/SM=%-5d in flight/SM=%4d KB: %6.0f GB/s (%5.1f%% of probe)\n", U, 256 * bps,
               256 * bps * U * 16 / 1024, gbs, 100 * gbs / probe);
    }
}

template <int S, int CH>
static void run_bulk(const uint8_t *p, size_t bytes, unsigned *o, int nsm, double probe) {
    const size_t smem = (size_t)S * CH;
    CK(cudaFuncSetAttribute(k_bulk<S, CH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int maxb = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&maxb, k_bulk<S, CH>, 256, smem));
    if (maxb < 1) return;
    const size_t nch = bytes / CH;
    const float ms = time_ms([&] { k_bulk<S, CH><<<nsm * maxb, 256, smem>>>(p, nch, o); });
    const double gbs = nch * (double)CH / (ms * 1e-3) / 1e9;
    printf("bulk  S=%d x %5d B, %d blocks/SM, in flight/SM=%4zu KB: %6.0f GB/s (%5.1f%% of probe)\n", S, CH, maxb,
           (size_t)maxb * smem / 1024, gbs, 100 * gbs / probe);
}

int main() {
    int nsm;
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    const size_t bytes = (size_t)4 << 30;
    uint8_t *buf, *dst;
    unsigned *o;
    CK(cudaMalloc(&buf, bytes));
    CK(cudaMalloc(&dst, bytes / 2));
    CK(cudaMalloc(&o, 64));
    CK(cudaMemset(buf, 1, bytes));
    const float cms = time_ms([&] { CK(cudaMemcpyAsync(dst, buf, bytes / 2, cudaMemcpyDeviceToDevice)); });
    const double probe = 2.0 * (bytes / 2) / (cms * 1e-3) / 1e9;
    printf("copy probe (2 GiB D2D, read+write): %.0f GB/s\n", probe);
    const uint4 *p = (const uint4 *)buf;
    const size_t n = bytes / 16;
    run_read<1>(p, n, o, nsm, probe);
    run_read<2>(p, n, o, nsm, probe);
    run_read<4>(p, n, o, nsm, probe);
    run_read<8>(p, n, o, nsm, probe);
    run_read<16>(p, n, o, nsm, probe);
    run_bulk<2, 16384>(buf, bytes, o, nsm, probe);
    run_bulk<4, 16384>(buf, bytes, o, nsm, probe);
    run_bulk<4, 32768>(buf, bytes, o, nsm, probe);
    run_bulk<8, 16384>(buf, bytes, o, nsm, probe);
    run_bulk<4, 8192>(buf, bytes, o, nsm, probe);
    return 0;
}
