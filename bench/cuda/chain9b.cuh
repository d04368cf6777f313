/* chain9b.cuh: what syncfloor.cu and l2ahead.cu share (single-file probes,
 * built alone with nvcc): the 9B decode step's 129 products as a chain of
 * streams over one buffer of uint4 (per layer: GDN in_proj 28.5 MB, or
 * every 4th layer attention's q+k+v 23.6; out_proj / o_proj 9.4; gate+up
 * 56.6; down 28.3; then the 572 MB head: 4.46 GB, MLX INT4 g64 at 0.5625
 * bytes a weight), a block's contiguous share of a stream, the 16-byte
 * streaming load the products use (typed uint4: syncfloor's kernels keep
 * their code, text_cmp), a launch with PDL, and the device-copy probe. */
#ifndef TS_BENCH_CUDA_CHAIN9B_CUH
#define TS_BENCH_CUDA_CHAIN9B_CUH

#include <string.h>

#include "standalone.cuh" /* CK, time_ms */

constexpr int MAXS = 256; /* streams a chain at most */

struct chain {
    int n;                /* streams */
    size_t off[MAXS + 1]; /* uint4 offsets: stream s is [off[s], off[s+1]) */
};

/* the 9B step's chain into c; returns its length in uint4. Stream 4 l + k is
 * layer l's product k (0: in_proj, or q+k+v where chain9b_att(l); 1:
 * out_proj / o_proj; 2: gate+up; 3: down), stream 128 the head. */
inline bool chain9b_att(int layer) { return layer % 4 == 3; }

static size_t chain9b(chain &c) {
    memset(&c, 0, sizeof c);
    const double H = 4096, I = 12288, V = 248320, mb = 0.5625;
    size_t o = 0;
    for (int l = 0; l < 32; l++) {
        /* in_proj (qkv + z + b + a) or attention's q (with its gate) + k + v; out_proj / o_proj; gate + up; down */
        const double rows[4] = {chain9b_att(l) ? 16.0 * 256 * 2 + 2.0 * 4 * 256 : 2.0 * 16 * 128 + 32.0 * 128 * 2 + 64,
                                H, 2 * I, H};
        const double cols[4] = {H, H, H, I};
        for (int k = 0; k < 4; k++) {
            c.off[c.n++] = o;
            o += (size_t)(rows[k] * cols[k] * mb / 16);
        }
    }
    c.off[c.n++] = o;
    o += (size_t)(V * H * mb / 16);
    c.off[c.n] = o;
    return o;
}

/* block b's share of stream s: [lo, hi) in uint4 */
__device__ __forceinline__ void share(const chain &c, int s, size_t &lo, size_t &hi) {
    const size_t a = c.off[s], n = c.off[s + 1] - a, per = (n + gridDim.x - 1) / gridDim.x;
    lo = a + per * blockIdx.x;
    hi = lo + per < a + n ? lo + per : a + n;
    if (lo > hi) lo = hi;
}

__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* k on st with smem bytes of dynamic shared memory, with programmatic
 * stream serialization when pdl */
template <typename... KArgs, typename... Args>
static void launch_ex_smem(cudaStream_t st, dim3 g, dim3 b, size_t smem, bool pdl, void (*k)(KArgs...), Args... args) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = g, cfg.blockDim = b, cfg.stream = st, cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    cfg.attrs = at, cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...));
}

/* the same without dynamic shared memory */
template <typename... KArgs, typename... Args>
static void launch_ex(cudaStream_t st, dim3 g, dim3 b, bool pdl, void (*k)(KArgs...), Args... args) {
    launch_ex_smem(st, g, b, 0, pdl, k, args...);
}

/* the copy probe: 2 GiB device to device on st, read + write counted, GB/s */
static double copy_probe_gbs(cudaStream_t st) {
    const size_t pb = (size_t)1 << 31;
    void *pa, *pbuf;
    CK(cudaMalloc(&pa, pb));
    CK(cudaMalloc(&pbuf, pb));
    CK(cudaMemset(pa, 0, pb));
    const float pms = time_ms([&] { CK(cudaMemcpyAsync(pbuf, pa, pb, cudaMemcpyDeviceToDevice, st)); }, st);
    CK(cudaFree(pa));
    CK(cudaFree(pbuf));
    return 2.0 * pb / (pms * 1e-3) / 1e9;
}

#endif
