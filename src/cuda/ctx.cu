/* ctx.cu: the CUDA context: device, stream, sticky errors, counted device
 * memory, transfers, fills, graphs, timers.
 *
 * Owns: tsc_open/close/info/sync/error, tsc_alloc/free/write/read/copy/fill,
 * tsc_fill_random, weights' upload and checks, graphs, timers.
 * Does not own: the compute ops (linear.cu, gdn.cu, attn.cu, misc.cu).
 * Invariants: every device allocation is on the context's list (tsc_mem_used
 * is exact; tsc_close frees what is left); the first error is kept.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "cuda/common.cuh"
#include "cuda/q4t.cuh"

extern "C" int tsc_built(void) { return 1; }

void tsc_fail_(tsc_ctx *c, int code, const char *fmt, ...) {
    if (!c || c->err_code) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err_msg, sizeof c->err_msg, fmt, ap);
    va_end(ap);
    c->err_code = code;
}

namespace {
struct occ_memo {
    int dev, threads, per;
    const void *k;
    size_t smem;
};
constexpr int OCC_MAX = 512; /* (kernel, shape) pairs of a process: a few dozen in practice */
occ_memo occ[OCC_MAX];
int n_occ;
std::mutex occ_mu;
} // namespace

/* The occupancy memo of tsc_blocks_per_sm and tsc_blocks_per_sm_dec. carve
 * (ctx.carve for the decode path's kernels, else -1): at a kernel's first
 * launch on a device, its preferred shared-memory carveout, kept where it
 * leaves the kernel's occupancy at that launch's shared memory as it was,
 * else the driver's choice again. (A later launch with more shared memory
 * than the carveout holds still runs: the preference is a hint the driver
 * overrides where a block needs more; a question of speed only, never of
 * results.) One lock and one search a launch either way. */
static int occupancy(const tsc_ctx *c, const void *k, int threads, size_t smem, size_t smem_max, int carve) {
    std::lock_guard<std::mutex> g(occ_mu);
    bool seen = false; /* the kernel's limit (and carveout) already set on this device */
    for (int i = 0; i < n_occ; i++)
        if (occ[i].dev == c->device && occ[i].k == k) {
            if (occ[i].threads == threads && occ[i].smem == smem) return occ[i].per;
            seen = true;
        }
    if (!seen && smem_max > 48 * 1024) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max);
    int per = 1;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, threads, smem);
    if (!seen && carve >= 0) {
        int with = 0;
        cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, carve);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&with, k, threads, smem);
        if (with < per) cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, -1);
        else per = with;
    }
    if (per < 1) per = 1;
    if (n_occ < OCC_MAX) occ[n_occ++] = {c->device, threads, per, k, smem};
    return per;
}

int tsc_blocks_per_sm(const tsc_ctx *c, const void *k, int threads, size_t smem, size_t smem_max) {
    return occupancy(c, k, threads, smem, smem_max, -1);
}

int tsc_blocks_per_sm_dec(const tsc_ctx *c, const void *k, int threads, size_t smem, size_t smem_max) {
    return occupancy(c, k, threads, smem, smem_max, c->carve);
}

#ifdef TSC_TRACE
/* the trace build's list of every unit's kernel ring (common.cuh: TSC_ENTRY);
 * filled during static initialisation, so a plain array (zero before it) */
namespace {
constexpr int TR_UNITS = 32;
tsc_tr_reset_fn tr_reset[TR_UNITS];
tsc_tr_dump_fn tr_dump[TR_UNITS];
int tr_n;
} // namespace
int tsc_tr_register(tsc_tr_reset_fn r, tsc_tr_dump_fn d, const char *file) {
    (void)file;
    if (tr_n < TR_UNITS) tr_reset[tr_n] = r, tr_dump[tr_n++] = d;
    return tr_n;
}
void tsc_tr_reset_all(void) {
    for (int i = 0; i < tr_n; i++) tr_reset[i]();
}
int tsc_tr_dump_all(FILE *f) {
    int n = 0;
    for (int i = 0; i < tr_n; i++) {
        const int k = tr_dump[i](f);
        if (k < 0) return -1;
        n += k;
    }
    return n;
}
#endif

void tsc_launched_(tsc_ctx *c, const char *op) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) tsc_fail_(c, TS_E_IO, "%s: kernel launch failed: %s", op, cudaGetErrorString(e));
}

/* a default-on switch of tsc_open: off only when the variable starts with '0' */
static int on_unless0(const char *name) {
    const char *v = getenv(name);
    return !(v && v[0] == '0');
}
/* an opt-in switch: on only when the variable starts with 1 */
static int on_if1(const char *name) {
    const char *v = getenv(name);
    return v && v[0] == '1';
}

/* a measurement's padding of a launch's shared memory (TSC_GDN_PAD,
 * TSC_ATTN_PAD): bytes 0..16384, anything else 0 */
static int pad_bytes(const char *name) {
    const char *v = getenv(name);
    const int b = v ? atoi(v) : 0;
    return b < 0 || b > 16384 ? 0 : b;
}

extern "C" int tsc_open(int device, tsc_ctx **out, ts_error *err) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return ts_fail(err, TS_E_UNSUPPORTED, "no CUDA device (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees none");
    if (device < 0 || device >= n)
        return ts_fail(err, TS_E_ARG, "--device %d: there %s %d CUDA device%s (0..%d)", device, n == 1 ? "is" : "are", n,
                       n == 1 ? "" : "s", n - 1);
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, device)) != cudaSuccess)
        return ts_fail(err, TS_E_UNSUPPORTED, "CUDA device %d: %s", device, cudaGetErrorString(e));
    if (p.major < 9)
        return ts_fail(err, TS_E_UNSUPPORTED,
                       "CUDA device %d (%s) has compute capability %d.%d; these kernels need 9.0 (Hopper) or newer",
                       device, p.name, p.major, p.minor);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return ts_fail(err, TS_E_UNSUPPORTED, "CUDA device %d: %s", device, cudaGetErrorString(e));
    tsc_ctx *c = (tsc_ctx *)calloc(1, sizeof *c);
    if (!c) return ts_fail(err, TS_E_NOMEM, "out of memory (CUDA context)");
    c->device = device;
    c->n_sm = p.multiProcessorCount;
    c->cc_major = p.major;
    c->cc_minor = p.minor;
    c->pdl = on_unless0("TSC_PDL");
    c->pdl_early = on_if1("TSC_PDL_EARLY");
    const char *ak = getenv("TSC_ATTN_KV");
    c->attn_kv = ak && ak[0] == '0' ? 0 : ak && ak[0] == '1' ? 1 : 2;
    c->gdn_fused = on_unless0("TSC_GDN_FUSED");
    /* the default since s34-run1 (H100: the 9B's MTP 3 verify 3.195-3.215
     * ms a block against 3.250, decode unchanged); TSC_GDN_ROWPAR=0: warp 0
     * makes every row's outputs in turn (the same bits) */
    c->gdn_rowpar = on_unless0("TSC_GDN_ROWPAR");
    /* the GDN step's loads before its PDL wait (gdn.cu, k_gdn_fused's P): the
     * default since s35-run2 (H100: the engine's GPU suite 30/30 under it, 9B
     * decode +1.7% with TSC_ATTN_DIG; H200, s35-run1: +0.8% alone);
     * TSC_GDN_PRE=0: after the wait */
    c->gdn_pre = on_unless0("TSC_GDN_PRE");
    /* read here once: tsc_digits_group and the backend's gdn_rows; =2 (several
     * rows too) measured no gain with ROWPAR (s34-run1), so it stays opt-in */
    const char *gd = getenv("TSC_GDN_DIG");
    c->gdn_dig = !(gd && *gd) ? 1 : atoi(gd) == 0 ? 0 : gd[0] == '2' ? 2 : 1;
    /* the attention's combine makes o_proj's digits (attn.cu's attn_digits):
     * the default since session 35 (its byte-equality test's 12 cases,
     * memcheck and racecheck on an H200 in s35-run1; decode +0.04% 9B, +0.5-0.8%
     * on the smaller shapes there, +0.3-0.5% on an H100 in s34-run2; the
     * engine's GPU suite 30/30 under it in s35-run2); TSC_ATTN_DIG=0: o_proj
     * makes them itself */
    c->attn_dig = on_unless0("TSC_ATTN_DIG");
    c->route_net = on_unless0("TSC_ROUTE_NET");
    c->gdn_hoist = on_unless0("TSC_GDN_HOIST");
    c->gdn_bar = on_unless0("TSC_GDN_BAR");
    /* k_gdn_fused's N with its per-row arrays sized by the launch (gdn.cu):
     * the default since s48-run3 (H100: 35B-A3B-8L +0.7%, 9B +0.6%, the
     * 40-layer 35B-A3B +1.2%); TSC_GDN_NB2=0: two cluster barriers, static
     * arrays */
    c->gdn_nb2 = on_unless0("TSC_GDN_NB2");
    /* a measurement switch: N's 8 KB more shared memory (33 against 25 KB a
     * block) cost the 35B-A3B-8L 0.4% while the 9B gained 0.8% (s48-run1);
     * the same padding on the default form tells whether the footprint is
     * the cause (it decides how many of the next launch's blocks are
     * resident early). tsc_gdn_step drops it where the block would pass the
     * 48 KB that need no opt-in. Measured (s48-run2, H100): +8 KB cost the
     * 35B-A3B-8L 1.2%, hence N's dynamic arrays (gdn.cu's D). */
    c->gdn_pad = pad_bytes("TSC_GDN_PAD");
    /* and the attention's combine (8,336 bytes of static shared memory: its
     * arrays sized for the most splits and the widest head), whose blocks
     * (nq x rows of them) sit on a few SMs just before o_proj's persistent
     * grid: whether shrinking them could pay, before doing it. Measured
     * (s49-run1, H100): +8 KB within 0.1% on both shapes, and so were the
     * split's and the combine's arrays shrunk (attn.cu's SZ and CS, removed
     * again: no gain) */
    c->attn_pad = pad_bytes("TSC_ATTN_PAD");
    /* the attention's pre-wait work (attn.cu's EA): the default since
     * s39-run2 (H100: 9B decode +0.7%, 35B-A3B-8L +0.9%) */
    c->attn_early = on_unless0("TSC_ATTN_EARLY");
    /* the attention combine's loads in one round (attn.cu's R1): the default
     * since s39-run3 (H100: 9B decode +0.6%, at 4,096 tokens +3.4%,
     * 35B-A3B-8L +0.8%) */
    c->attn_r1 = on_unless0("TSC_ATTN_R1");
    /* the split's accumulators for its heads and its staging's indices
     * stepped (attn.cu's GC): the default since s40-run4 (H100: 9B decode
     * +1.2%, MTP 3 +2.2%, 35B-A3B-8L +0.9%) */
    c->attn_gc = on_unless0("TSC_ATTN_GC");
    {
        /* the decode path's carveout (tsc_blocks_per_sm_dec): TSC_CARVE=P
         * percent, -1 the driver's choice; 50 by default */
        const char *cv = getenv("TSC_CARVE");
        c->carve = cv && *cv ? atoi(cv) : 50;
        if (c->carve > 100) c->carve = -1;
    }
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreate(&c->ev0)) != cudaSuccess || (e = cudaEventCreate(&c->ev1)) != cudaSuccess) {
        free(c);
        return ts_fail(err, TS_E_UNSUPPORTED, "CUDA device %d: cannot create a stream: %s", device,
                       cudaGetErrorString(e));
    }
    *out = c;
    return 0;
}

extern "C" void tsc_close(tsc_ctx *c) {
    if (!c) return;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    tsc_blas_release(c);
    while (c->blocks) {
        tsc_blk *b = c->blocks;
        c->blocks = b->next;
        cudaFree(b->p);
        free(b);
    }
    cudaEventDestroy(c->ev0);
    cudaEventDestroy(c->ev1);
    cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" int tsc_info(tsc_ctx *c, char *name, size_t cap, int *n_sm, size_t *free_bytes, size_t *total_bytes) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, c->device) != cudaSuccess) return TS_E_IO;
    if (name && cap) snprintf(name, cap, "%s (cc %d.%d)", p.name, p.major, p.minor);
    if (n_sm) *n_sm = c->n_sm;
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
    return 0;
}

extern "C" int tsc_sync(tsc_ctx *c, ts_error *err) {
    if (!c) return ts_fail(err, TS_E_ARG, "tsc_sync: no context");
    if (!c->err_code) {
        cudaError_t e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) tsc_fail_(c, TS_E_IO, "CUDA device %d: %s", c->device, cudaGetErrorString(e));
    }
    if (c->err_code) return ts_fail(err, c->err_code, "%s", c->err_msg);
    return 0;
}

extern "C" int tsc_error(const tsc_ctx *c) { return c ? c->err_code : TS_E_ARG; }

extern "C" void *tsc_alloc(tsc_ctx *c, size_t bytes) {
    if (!c || c->err_code) return NULL;
    cudaSetDevice(c->device); /* the context's device, whichever the thread's is (several GPUs: --gpus) */
    tsc_blk *b = (tsc_blk *)malloc(sizeof *b);
    void *p = NULL;
    cudaError_t e = b ? cudaMalloc(&p, bytes ? bytes : 1) : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        free(b);
        size_t f = 0, t = 0;
        cudaGetLastError();
        cudaMemGetInfo(&f, &t);
        tsc_fail_(c, TS_E_NOMEM, "CUDA device %d: cannot allocate %zu bytes (%zu of %zu free): %s", c->device, bytes, f,
                  t, cudaGetErrorString(e));
        return NULL;
    }
    b->p = p;
    b->bytes = bytes;
    b->next = c->blocks;
    c->blocks = b;
    c->used += bytes;
    return p;
}

extern "C" void tsc_free(tsc_ctx *c, void *p) {
    if (!c || !p) return;
    for (tsc_blk **q = &c->blocks; *q; q = &(*q)->next)
        if ((*q)->p == p) {
            tsc_blk *b = *q;
            *q = b->next;
            c->used -= b->bytes;
            cudaFree(p);
            free(b);
            return;
        }
    tsc_fail_(c, TS_E_ARG, "tsc_free: %p is not a live allocation of this context", p);
}

extern "C" size_t tsc_mem_used(const tsc_ctx *c) { return c ? c->used : 0; }

extern "C" void tsc_write(tsc_ctx *c, void *dst, const void *src, size_t bytes) {
    TSC_GUARD(c);
    /* synchronous with respect to the host buffer: pageable memory is staged
     * by the driver before cudaMemcpyAsync returns only for small sizes, so
     * wait for this copy to keep "host_src read before return" true */
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess && !c->capturing) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) tsc_fail_(c, TS_E_IO, "tsc_write of %zu bytes: %s", bytes, cudaGetErrorString(e));
}

extern "C" void tsc_read(tsc_ctx *c, void *dst, const void *src, size_t bytes) {
    TSC_GUARD(c);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) tsc_fail_(c, TS_E_IO, "tsc_read of %zu bytes: %s", bytes, cudaGetErrorString(e));
}

extern "C" void tsc_copy(tsc_ctx *c, void *dst, const void *src, size_t bytes) {
    TSC_GUARD(c);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream);
    if (e != cudaSuccess) tsc_fail_(c, TS_E_IO, "tsc_copy of %zu bytes: %s", bytes, cudaGetErrorString(e));
}

__global__ void k_fill(float *d, float v, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) d[i] = v;
}

extern "C" void tsc_fill(tsc_ctx *c, float *dst, float v, size_t n) {
    TSC_GUARD(c);
    if (!n) return;
    unsigned g = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
    k_fill<<<g, 256, 0, c->stream>>>(dst, v, n);
    TSC_LAUNCHED(c, "tsc_fill");
}

__device__ __forceinline__ uint32_t hash32(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

__global__ void k_fill_random(void *d, size_t n, int dt, float lo, float hi, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = hash32(((uint64_t)seed << 40) ^ i);
        float u = lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f);
        switch (dt) {
        case TS_DTYPE_U32: ((uint32_t *)d)[i] = h; break;
        case TS_DTYPE_F32: ((float *)d)[i] = u; break;
        case TS_DTYPE_F16: ((uint16_t *)d)[i] = __half_as_ushort(__float2half_rn(u)); break;
        default: ((uint16_t *)d)[i] = (uint16_t)(__float_as_uint(u) >> 16); break;
        }
    }
}

extern "C" void tsc_fill_random(tsc_ctx *c, void *dst, size_t n, ts_dtype dt, float lo, float hi, uint32_t seed) {
    TSC_GUARD(c);
    if (dt != TS_DTYPE_U32 && dt != TS_DTYPE_F32 && dt != TS_DTYPE_F16 && dt != TS_DTYPE_BF16) {
        tsc_fail_(c, TS_E_ARG, "tsc_fill_random: dtype %s not supported", ts_dtype_name(dt));
        return;
    }
    if (!n) return;
    k_fill_random<<<4096, 256, 0, c->stream>>>(dst, n, (int)dt, lo, hi, seed);
    TSC_LAUNCHED(c, "tsc_fill_random");
}

/* ---- weights ---- */

extern "C" size_t tsc_weight_bytes(const tsc_weight *w) {
    if (w->layout == TSC_LAYOUT_Q4T) return q4t_data_bytes(w) + q4t_sb_bytes(w);
    if (w->dtype != TS_DTYPE_U32) return (size_t)(w->rows * w->cols) * ts_dtype_size(w->dtype);
    size_t q = (size_t)(w->rows * w->cols) * (size_t)w->bits / 8;
    size_t s = (size_t)(w->rows * (w->cols / w->group)) * ts_dtype_size(w->sdtype);
    return q + 2 * s;
}

extern "C" int tsc_weight_check(const tsc_weight *w, ts_error *err) {
    if (w->rows < 1 || w->cols < 1) return ts_fail(err, TS_E_UNSUPPORTED, "weight of %lld x %lld", (long long)w->rows,
                                                   (long long)w->cols);
    switch (w->dtype) {
    case TS_DTYPE_U32: {
        const int per = w->bits == 4 ? 32 : 16; /* values per 16-byte load */
        if (w->bits != 4 && w->bits != 8)
            return ts_fail(err, TS_E_UNSUPPORTED, "quantized weight of %d bits (4 or 8 supported)", w->bits);
        if (w->group <= 0 || w->group % per || (w->group & (w->group - 1)) || w->cols % w->group)
            return ts_fail(err, TS_E_UNSUPPORTED,
                           "%d-bit weight with group %d over %lld cols: need a power-of-two group, group %% %d == 0 "
                           "and cols %% group == 0", w->bits, w->group, (long long)w->cols, per);
        if (w->sdtype != TS_DTYPE_F32 && w->sdtype != TS_DTYPE_F16 && w->sdtype != TS_DTYPE_BF16)
            return ts_fail(err, TS_E_UNSUPPORTED, "scales of dtype %s", ts_dtype_name(w->sdtype));
        return 0;
    }
    case TS_DTYPE_BF16:
    case TS_DTYPE_F16:
        if (w->cols % 8) return ts_fail(err, TS_E_UNSUPPORTED, "%s weight with %lld cols (need a multiple of 8)",
                                        ts_dtype_name(w->dtype), (long long)w->cols);
        return 0;
    case TS_DTYPE_F32:
        if (w->cols % 4) return ts_fail(err, TS_E_UNSUPPORTED, "F32 weight with %lld cols (need a multiple of 4)",
                                        (long long)w->cols);
        return 0;
    default: return ts_fail(err, TS_E_UNSUPPORTED, "weight of dtype %s", ts_dtype_name(w->dtype));
    }
}

/* TSC_Q4T=0 in the environment keeps 4-bit uploads in the MLX layout (the
 * MLX-layout kernel of linear.cu; no fused products, no MoE products): a
 * switch to compare the two paths. */
static int q4t_on(void) {
    const char *e = getenv("TSC_Q4T");
    return !(e && e[0] == '0');
}

extern "C" size_t tsc_weight_dev_bytes(const tsc_weight *h) {
    if (h->layout == TSC_LAYOUT_MLX && q4t_on() && q4t_shape_ok(h)) return q4t_data_bytes(h) + q4t_sb_bytes(h);
    return tsc_weight_bytes(h);
}

extern "C" int tsc_weight_relayout(tsc_ctx *c, tsc_weight *w, ts_error *err) {
    if (!c || c->err_code) return ts_fail(err, c ? c->err_code : TS_E_ARG, "%s", c ? c->err_msg : "no context");
    if (w->layout != TSC_LAYOUT_MLX || !q4t_shape_ok(w)) return 0;
    void *d = tsc_alloc(c, q4t_data_bytes(w)), *s = d ? tsc_alloc(c, q4t_sb_bytes(w)) : NULL;
    if (s) q4t_relayout(c, w, d, s);
    if (!c->err_code) {
        /* the old blocks are freed once the relayout has read them */
        cudaError_t e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) tsc_fail_(c, TS_E_IO, "tsc_weight_relayout: %s", cudaGetErrorString(e));
    }
    if (c->err_code) {
        tsc_free(c, d);
        tsc_free(c, s);
        return ts_fail(err, c->err_code, "%s", c->err_msg);
    }
    tsc_free(c, (void *)w->data);
    tsc_free(c, (void *)w->scales);
    tsc_free(c, (void *)w->biases);
    w->data = d, w->scales = s, w->biases = NULL;
    w->layout = TSC_LAYOUT_Q4T;
    return 0;
}

extern "C" int tsc_weight_upload(tsc_ctx *c, const tsc_weight *h, tsc_weight *d, ts_error *err) {
    int rc = tsc_weight_check(h, err);
    if (rc) return rc;
    if (h->layout != TSC_LAYOUT_MLX) return ts_fail(err, TS_E_ARG, "tsc_weight_upload: a host weight is in the MLX layout");
    *d = *h;
    d->data = d->scales = d->biases = NULL;
    size_t db = h->dtype == TS_DTYPE_U32 ? (size_t)(h->rows * h->cols) * (size_t)h->bits / 8
                                         : (size_t)(h->rows * h->cols) * ts_dtype_size(h->dtype);
    void *p = tsc_alloc(c, db);
    if (p) tsc_write(c, p, h->data, db);
    d->data = p;
    if (h->dtype == TS_DTYPE_U32) {
        size_t sb = (size_t)(h->rows * (h->cols / h->group)) * ts_dtype_size(h->sdtype);
        void *s = tsc_alloc(c, sb), *b = tsc_alloc(c, sb);
        if (s) tsc_write(c, s, h->scales, sb);
        if (b) tsc_write(c, b, h->biases, sb);
        d->scales = s;
        d->biases = b;
    }
    if (c->err_code) {
        tsc_weight_free(c, d);
        return ts_fail(err, c->err_code, "%s", c->err_msg);
    }
    /* 4-bit weights go to the tensor-core layout (q4t.cu); the MLX copy is
     * transient */
    if (q4t_on() && (rc = tsc_weight_relayout(c, d, err))) {
        tsc_weight_free(c, d);
        return rc;
    }
    return 0;
}

extern "C" void tsc_weight_free(tsc_ctx *c, tsc_weight *d) {
    tsc_free(c, (void *)d->data);
    tsc_free(c, (void *)d->scales);
    tsc_free(c, (void *)d->biases);
    d->data = d->scales = d->biases = NULL;
}

/* ---- graphs and timers ---- */

struct tsc_graph {
    cudaGraph_t g;
    cudaGraphExec_t x;
};

extern "C" void tsc_graph_begin(tsc_ctx *c) {
    TSC_GUARD(c);
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) tsc_fail_(c, TS_E_IO, "graph capture: %s", cudaGetErrorString(e));
    else c->capturing = 1;
}

extern "C" tsc_graph *tsc_graph_end(tsc_ctx *c) {
    if (!c || !c->capturing) return NULL;
    c->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess || c->err_code) {
        if (g) cudaGraphDestroy(g);
        tsc_fail_(c, TS_E_IO, "graph capture: %s", cudaGetErrorString(e));
        return NULL;
    }
    tsc_graph *r = (tsc_graph *)calloc(1, sizeof *r);
    r->g = g;
    if ((e = cudaGraphInstantiate(&r->x, g, 0)) != cudaSuccess) {
        cudaGraphDestroy(g);
        free(r);
        tsc_fail_(c, TS_E_IO, "graph instantiate: %s", cudaGetErrorString(e));
        return NULL;
    }
    return r;
}

extern "C" void tsc_graph_launch(tsc_ctx *c, tsc_graph *g) {
    TSC_GUARD(c);
    if (!g) { tsc_fail_(c, TS_E_ARG, "tsc_graph_launch: no graph"); return; }
    cudaError_t e = cudaGraphLaunch(g->x, c->stream);
    if (e != cudaSuccess) tsc_fail_(c, TS_E_IO, "graph launch: %s", cudaGetErrorString(e));
}

extern "C" int tsc_graph_kernels(tsc_graph *g) {
    if (!g) return 0;
    size_t n = 0;
    if (cudaGraphGetNodes(g->g, NULL, &n) != cudaSuccess || !n) return 0;
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)malloc(sizeof *nodes * n);
    int k = 0;
    if (nodes && cudaGraphGetNodes(g->g, nodes, &n) == cudaSuccess)
        for (size_t i = 0; i < n; i++) {
            cudaGraphNodeType t;
            if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel) k++;
        }
    free(nodes);
    return k;
}

extern "C" int tsc_graph_nodes(const tsc_graph *g) {
    size_t n = 0;
    if (!g || cudaGraphGetNodes(g->g, NULL, &n) != cudaSuccess) return -1;
    return (int)n;
}

extern "C" void tsc_set_pdl(tsc_ctx *c, int on) {
    if (c) c->pdl = on != 0;
}

extern "C" void tsc_set_gdn_fused(tsc_ctx *c, int on) {
    if (c) c->gdn_fused = on != 0;
}

extern "C" void tsc_set_gdn_nb2(tsc_ctx *c, int on) {
    if (c) c->gdn_nb2 = on != 0;
}

extern "C" void tsc_set_gdn_rowpar(tsc_ctx *c, int on) {
    if (c) c->gdn_rowpar = on != 0;
}

extern "C" void tsc_set_route_net(tsc_ctx *c, int on) {
    if (c) c->route_net = on != 0;
}

extern "C" void tsc_set_attn_kv(tsc_ctx *c, int on) {
    if (c) c->attn_kv = on == 2 ? 2 : on != 0;
}

extern "C" void tsc_set_attn_early(tsc_ctx *c, int on) {
    if (c) c->attn_early = on != 0;
}

extern "C" void tsc_set_attn_r1(tsc_ctx *c, int on) {
    if (c) c->attn_r1 = on != 0;
}

extern "C" void tsc_set_attn_gc(tsc_ctx *c, int on) {
    if (c) c->attn_gc = on != 0;
}

extern "C" void tsc_graph_free(tsc_graph *g) {
    if (!g) return;
    cudaGraphExecDestroy(g->x);
    cudaGraphDestroy(g->g);
    free(g);
}

extern "C" void tsc_timer_start(tsc_ctx *c) {
    TSC_GUARD(c);
    cudaEventRecord(c->ev0, c->stream);
}

extern "C" double tsc_timer_ms(tsc_ctx *c) {
    if (!c || c->err_code) return -1;
    cudaEventRecord(c->ev1, c->stream);
    cudaEventSynchronize(c->ev1);
    float ms = 0;
    cudaEventElapsedTime(&ms, c->ev0, c->ev1);
    return ms;
}
