/* blas.cu: prompt-chunk products through cuBLAS, loaded at run time
 * (tsc_linear_blas): y[i] = x . w[i]^T for the many rows of a prefill chunk,
 * 4- and 8-bit MLX weights dequantized to bf16 in pieces, bf16 weights
 * as they are, x rounded to bf16, f32 accumulation on the tensor cores.
 *
 * Owns: finding and loading cuBLAS (dlopen: libcublas is not linked, so
 * the build and a GPU host without it still work, and the binary carries
 * none of its 600 MB), one handle per context, the dequantizing and staging
 * kernels, the workspace layout, the eligibility rule. Does not own: which
 * products come here (backend.cu: prompt chunks of more than 16 rows, when
 * the stream was given the workspace; TSC_BLAS=0 keeps q4gemm.cu's kernel),
 * decode and verify (row-exact kernels only: these products round x and the
 * weights to bf16 and sum in cuBLAS's order, so they are never used where a
 * row's bits must equal a one-row step's).
 *
 * Why dequantize and call cuBLAS rather than only dequantizing tiles inside
 * our own kernel (q4gemm.cu, which stays the path without cuBLAS). The
 * prompt products are compute-bound (the 9B: 7.1 TFLOP a 512-row chunk
 * against 3.9 GB of 4-bit weights) and q4gemm.cu's mma.sync kernel reaches
 * about a quarter of what cuBLAS gets on these shapes (session 13). The
 * price: each weight written as bf16 and read back, 0.56 + 2 + 2 bytes, 31 GB
 * a 9B pass, ~8 ms at ~4 TB/s, against ~12 ms of products at ~600 TFLOP/s
 * (the 512-row chunk's 36 ms in q4gemm.cu now): a chunk's products ~20 ms
 * instead of ~36, and the larger the chunk, the smaller the dequantizing's
 * share. vLLM takes the same road for AWQ weights once a
 * batch has 256 or more tokens (dequantize, then a dense matmul).
 *
 * Numerics. w~ = bf16(s q + b) (the affine part in f32, one rounding to bf16:
 * 2^-9 relative), x~ = bf16(x) (2^-9), products and sums in f32 by the
 * tensor cores: against the exact product the error is at most ~2^-8
 * sum |x| |w| and typically ~2^-8 / sqrt(cols) of it (q4gemm.cu's kernel:
 * ~2^-9, it keeps the weights exact). Prefill only, within the stated
 * bf16 tolerance of the engine test (tests/test_cuda_engine.c).
 *
 * Shape. cuBLAS is column-major: Y^T [rows, n] = W [rows, cols] . X^T, i.e.
 * gemm(op A = T, op B = N, m = rows, n = n, k = cols, A = W (its row-major
 * [rows, cols] is column-major [cols, rows], lda = cols), B = X~ (lda = cols),
 * C = y (ldc = rows)): the "TN" form, the one every cuBLAS kernel family
 * serves best. A weight larger than the scratch is done in pieces of whole
 * output rows (C at y + r0, ldc = rows), each dequantized right before its
 * product (the stream orders the two).
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "cuda/common.cuh"

namespace {

/* cuBLAS's entry points, looked up once per process */
struct blas_lib {
    std::once_flag once;
    int ok;
    char what[384]; /* the library loaded and its version, or why none */
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_ws)(cublasHandle_t, void *, size_t);
    cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                           const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                           cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*gemm_sb)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, long long, const void *, cudaDataType, int, long long,
                              const void *, void *, cudaDataType, int, long long, int, cublasComputeType_t,
                              cublasGemmAlgo_t);
};
blas_lib L;

template <class F> bool sym(void *h, const char *name, F *f) {
    *f = (F)dlsym(h, name);
    return *f != nullptr;
}

/* TSC_CUBLAS=PATH names the library; else the dynamic loader's search
 * (LD_LIBRARY_PATH, ldconfig) for this build's major version, then the
 * toolkit's own lib64 ($CUDA_HOME, /usr/local/cuda), then any version. */
void load_once() {
    char mine[64], home[512] = "", std_[128];
    snprintf(mine, sizeof mine, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    const char *ch = getenv("CUDA_HOME");
    if (ch && *ch) snprintf(home, sizeof home, "%s/lib64/%s", ch, mine);
    snprintf(std_, sizeof std_, "/usr/local/cuda/lib64/%s", mine);
    const char *env = getenv("TSC_CUBLAS");
    const char *names[6] = {mine, home, std_, "libcublas.so", nullptr, nullptr};
    if (env && *env) names[0] = env, names[1] = nullptr;
    void *h = nullptr;
    const char *got = nullptr;
    for (int i = 0; names[i] && !h; i++)
        if (*names[i] && (h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) got = names[i];
    if (!h) {
        snprintf(L.what, sizeof L.what, "cuBLAS not found (%s%s): prompt products on the tensor-core kernel",
                 env && *env ? env : mine, env && *env ? "" : ", also in $CUDA_HOME/lib64 and /usr/local/cuda/lib64");
        return;
    }
    if (!sym(h, "cublasCreate_v2", &L.create) || !sym(h, "cublasDestroy_v2", &L.destroy) ||
        !sym(h, "cublasSetStream_v2", &L.set_stream) || !sym(h, "cublasSetWorkspace_v2", &L.set_ws) ||
        !sym(h, "cublasGemmEx", &L.gemm) || !sym(h, "cublasGemmStridedBatchedEx", &L.gemm_sb)) {
        snprintf(L.what, sizeof L.what, "%s lacks an entry point this build calls: prompt products on the tensor-core kernel", got);
        dlclose(h);
        return;
    }
    snprintf(L.what, sizeof L.what, "cuBLAS (%s)", got);
    L.ok = 1;
}

bool loaded() {
    std::call_once(L.once, load_once);
    return L.ok != 0;
}

constexpr size_t BLAS_WS = (size_t)32 << 20; /* cuBLAS's own workspace: 32 MiB, what its guide asks for on Hopper */

size_t xstage_bytes(int n, int64_t cols) { return al256((size_t)n * (size_t)cols * 2); }

/* x [n, K] f32 -> bf16 row-major, round to nearest */
__global__ void k_blas_xstage(const float *x, int64_t count, __nv_bfloat16 *xb) {
    TSC_PDL_ENTRY();
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 2;
    if (i + 1 < count) {
        const float2 v = *(const float2 *)(x + i);
        *(__nv_bfloat162 *)(xb + i) = __floats2bfloat162_rn(v.x, v.y);
    } else if (i < count) {
        xb[i] = __float2bfloat16_rn(x[i]);
    }
}

/* rows [r0, r0 + nr) of an MLX weight (bits 4 or 8) -> bf16 [nr, K], one
 * u32 word (8 or 4 values) a thread: w = bf16(s q + b) */
template <int BITS>
__global__ void k_blas_dequant(const uint32_t *data, const void *scales, const void *biases, int sdt, int lg,
                               int64_t K, int64_t r0, int64_t nr, __nv_bfloat16 *out) {
    TSC_PDL_ENTRY();
    constexpr int PER = 32 / BITS;
    const int64_t wpr = K / PER; /* words a row */
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nr * wpr) return;
    const int64_t r = i / wpr, j = i % wpr, col = j * PER;
    const uint32_t w = data[(r0 + r) * wpr + j];
    const int64_t gi = (r0 + r) * (K >> lg) + (col >> lg); /* a word never straddles a group (group % PER == 0) */
    const float s = load_s(scales, sdt, gi), b = load_s(biases, sdt, gi);
    __align__(16) __nv_bfloat16 v[PER];
#pragma unroll
    for (int e = 0; e < PER; e++) v[e] = __float2bfloat16_rn(__fmaf_rn(s, (float)((w >> (BITS * e)) & ((1u << BITS) - 1)), b));
    __nv_bfloat16 *o = out + r * K + col;
    if (BITS == 4)
        *(uint4 *)o = *(const uint4 *)v;
    else
        *(uint2 *)o = *(const uint2 *)v;
}

/* Attention's softmax over one tile's score columns, in place: column c =
 * (head j of the group, row i) holds T scores (already scaled); keys past
 * the row's own position (causal: t < lim = first + i + 1) become 0, the
 * rest exp(s - max) / sum. One block a column. */
__global__ void __launch_bounds__(256) k_blas_softmax(float *S, int T, int r, int first) {
    TSC_PDL_ENTRY();
    __shared__ float red[32];
    const int col = blockIdx.x, i = col % r;
    float *s = S + (int64_t)col * T;
    const int lim = min(T, first + i + 1);
    float m = -INFINITY;
    for (int t = threadIdx.x; t < lim; t += blockDim.x) m = fmaxf(m, s[t]);
    m = warp_max(m);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++) m = fmaxf(m, red[w]);
    __syncthreads();
    float sum = 0.f;
    for (int t = threadIdx.x; t < lim; t += blockDim.x) {
        const float e = expf(__fsub_rn(s[t], m));
        s[t] = e;
        sum = __fadd_rn(sum, e);
    }
    sum = warp_sum(sum);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
    __syncthreads();
    sum = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) sum = __fadd_rn(sum, red[w]);
    const float inv = __fdiv_rn(1.0f, sum);
    for (int t = threadIdx.x; t < T; t += blockDim.x) s[t] = t < lim ? __fmul_rn(s[t], inv) : 0.f;
}

/* out [n, nq, D] *= sigmoid(gate), the gate the second half of each query's 2D */
__global__ void k_blas_gate(float *out, const float *qg, int64_t count, int D) {
    TSC_PDL_ENTRY();
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= count) return;
    const int64_t hv = e / D;
    const int d = (int)(e - hv * D);
    out[e] = __fmul_rn(out[e], sigmoid_f(qg[hv * 2 * D + D + d]));
}

bool takes(const tsc_weight *w) {
    if (w->layout != TSC_LAYOUT_MLX || w->rows < 1 || w->cols < 1 || w->rows > INT32_MAX || w->cols > INT32_MAX) return false;
    if (w->dtype == TS_DTYPE_BF16) return w->cols % 8 == 0; /* cuBLAS's 16-byte alignment of the columns */
    return w->dtype == TS_DTYPE_U32 && (w->bits == 4 || w->bits == 8) && w->group >= 32 / w->bits &&
           (w->group & (w->group - 1)) == 0 && w->cols % w->group == 0 && w->cols % 8 == 0;
}

const char *status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
    }
}

/* The context's handle, made on first use (tsc_close destroys it); NULL
 * when it cannot be made (a library that does not match the driver, no
 * memory for its own state), said once on stderr. */
cublasHandle_t handle_of(tsc_ctx *c) {
    if (!c->blas) {
        cublasHandle_t h = nullptr;
        const cublasStatus_t st = L.create(&h);
        if (st != CUBLAS_STATUS_SUCCESS) {
            static std::once_flag said;
            std::call_once(said, [st] {
                fprintf(stderr, "turbospark: cuBLAS loaded but cublasCreate failed (%s): prompt products on our own kernels\n",
                        status_name(st));
            });
            return nullptr;
        }
        c->blas = h;
    }
    return (cublasHandle_t)c->blas;
}

/* The handle bound to the context's stream and to the BLAS_WS bytes at bws
 * (cuBLAS's own workspace); NULL and the context's error (naming op) when
 * it cannot be. */
cublasHandle_t bind(tsc_ctx *c, const char *op, void *bws) {
    cublasHandle_t h = handle_of(c);
    if (!h) {
        tsc_fail_(c, TS_E_NOMEM, "%s: cublasCreate failed", op);
        return nullptr;
    }
    cublasStatus_t st = L.set_stream(h, c->stream);
    if (st == CUBLAS_STATUS_SUCCESS) st = L.set_ws(h, bws, BLAS_WS);
    if (st != CUBLAS_STATUS_SUCCESS) {
        tsc_fail_(c, TS_E_IO, "%s: cuBLAS setup: %s", op, status_name(st));
        return nullptr;
    }
    return h;
}

} // namespace

extern "C" int tsc_blas_ready(void) { return loaded() ? 1 : 0; }

/* not the context's error when the handle cannot be made: the caller keeps
 * its prompt products on our kernels */
extern "C" int tsc_blas_usable(tsc_ctx *c) { return c && !c->err_code && loaded() && handle_of(c) ? 1 : 0; }

extern "C" const char *tsc_blas_what(void) {
    loaded();
    return L.what;
}

extern "C" int tsc_blas_takes(const tsc_weight *w) { return takes(w) ? 1 : 0; }

extern "C" size_t tsc_blas_ws_bytes(int n, int64_t cols, size_t scratch) {
    if (n < 1 || cols < 1) return 0;
    /* at least one 128-row piece of the widest weight */
    const size_t piece = al256((size_t)128 * (size_t)cols * 2);
    return xstage_bytes(n, cols) + al256(scratch > piece ? scratch : piece) + BLAS_WS;
}

extern "C" void tsc_blas_release(tsc_ctx *c) {
    if (c && c->blas) {
        L.destroy((cublasHandle_t)c->blas);
        c->blas = nullptr;
    }
}

extern "C" void tsc_linear_blas(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n,
                                void *ws, size_t ws_bytes) {
    TSC_GUARD(c);
    if (!loaded()) { tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_linear_blas: %s", L.what); return; }
    if (nw < 1 || n < 1 || !ws) { tsc_fail_(c, TS_E_ARG, "tsc_linear_blas: %d weights, %d rows", nw, n); return; }
    if (c->capturing) { tsc_fail_(c, TS_E_ARG, "tsc_linear_blas: inside a graph capture (prompt chunks only)"); return; }
    const int64_t K = w[0]->cols;
    for (int i = 0; i < nw; i++)
        if (!takes(w[i]) || w[i]->cols != K) {
            tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_linear_blas: weight %d (%lld x %lld, dtype %d, %d-bit, group %d) is not a "
                      "bf16 or 4/8-bit MLX weight of the call's %lld columns", i, (long long)w[i]->rows,
                      (long long)w[i]->cols, (int)w[i]->dtype, w[i]->bits, w[i]->group, (long long)K);
            return;
        }
    const size_t xs = xstage_bytes(n, K);
    if (ws_bytes < xs + BLAS_WS + al256((size_t)128 * (size_t)K * 2)) {
        tsc_fail_(c, TS_E_ARG, "tsc_linear_blas: a workspace of %zu bytes for %d rows of %lld (tsc_blas_ws_bytes)", ws_bytes,
                  n, (long long)K);
        return;
    }
    uint8_t *base = (uint8_t *)ws;
    __nv_bfloat16 *xb = (__nv_bfloat16 *)base, *wb = (__nv_bfloat16 *)(base + xs);
    const size_t scratch = ws_bytes - xs - BLAS_WS;
    /* cuBLAS's workspace last (256-aligned: ws_bytes is a sum of al256 sizes) */
    cublasHandle_t h = bind(c, "tsc_linear_blas", base + ws_bytes - BLAS_WS);
    if (!h) return;
    cublasStatus_t st;

    const int64_t count = (int64_t)n * K;
    tsc_launch(c, k_blas_xstage, dim3((unsigned)((count / 2 + 255) / 256 + 1)), dim3(256), 0, x, count, xb);
    TSC_LAUNCHED(c, "tsc_linear_blas (x to bf16)");
    const float one = 1.f, zero = 0.f;
    /* rows a piece: whole output rows that fit the scratch, a multiple of 128 */
    const int64_t prows = (int64_t)(scratch / ((size_t)K * 2)) / 128 * 128;
    for (int i = 0; i < nw && !c->err_code; i++) {
        const tsc_weight *wi = w[i];
        const int64_t R = wi->rows;
        const bool dense = wi->dtype == TS_DTYPE_BF16;
        int lg = 0; /* log2 of the group (a power of two: takes) */
        while (!dense && (1 << lg) < wi->group) lg++;
        for (int64_t r0 = 0; r0 < R && !c->err_code; r0 += dense ? R : prows) {
            const int64_t nr = dense ? R : (R - r0 < prows ? R - r0 : prows);
            const void *A = wi->data;
            if (!dense) {
                const int per = 32 / wi->bits;
                const int64_t words = nr * (K / per);
                const dim3 g((unsigned)((words + 255) / 256));
                if (wi->bits == 4)
                    tsc_launch(c, k_blas_dequant<4>, g, dim3(256), 0, (const uint32_t *)wi->data, wi->scales, wi->biases,
                               (int)wi->sdtype, lg, K, r0, nr, wb);
                else
                    tsc_launch(c, k_blas_dequant<8>, g, dim3(256), 0, (const uint32_t *)wi->data, wi->scales, wi->biases,
                               (int)wi->sdtype, lg, K, r0, nr, wb);
                TSC_LAUNCHED(c, "tsc_linear_blas (weights to bf16)");
                A = wb;
            }
            st = L.gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, n, (int)K, &one, A, CUDA_R_16BF, (int)K, xb, CUDA_R_16BF,
                        (int)K, &zero, y[i] + r0, CUDA_R_32F, (int)R, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            if (st != CUBLAS_STATUS_SUCCESS)
                tsc_fail_(c, TS_E_IO, "tsc_linear_blas: cublasGemmEx (%lld x %d x %lld): %s", (long long)nr, n,
                          (long long)K, status_name(st));
        }
    }
}

/* Prompt-chunk attention through cuBLAS (tsc_attn_blas): per KV head and
 * tile of query rows, S = scale Q K^T for the group's G query heads (one
 * strided-batched product over the heads, TF32 tensor cores on the f32
 * cache), the causal softmax in place (k_blas_softmax), O = P V (one more
 * batched product) straight into the output rows, then the gate. Why: the
 * flash kernel of attn.cu runs on the f32 FMA pipes (~18 TFLOP/s at 2048
 * rows, 3.75 ms a 9B layer, 18% of a 2048-row pass in session 20); the two
 * products here run on the tensor cores, and S's round trip through memory
 * (4 G r T bytes a tile, from the scratch) costs less than what they save.
 * Rounding: q, k, p and v to TF32 (2^-11) inside the products; prompt
 * chunks only. A tile computes every key up to its last row (the masked
 * half of the square is computed and zeroed: at most 2x the causal work). */
extern "C" void tsc_attn_blas(tsc_ctx *c, const tsc_attn_args *a, int pos, void *ws, size_t ws_bytes) {
    TSC_GUARD(c);
    if (!loaded()) { tsc_fail_(c, TS_E_UNSUPPORTED, "tsc_attn_blas: %s", L.what); return; }
    const int n = a->n, D = a->D, nq = a->nq, nkv = a->nkv;
    if (n < 1 || pos < 0 || pos + n > a->max_T || D < 1 || D % 4 || nkv < 1 || nq % nkv || !ws || ws_bytes <= BLAS_WS) {
        tsc_fail_(c, TS_E_ARG, "tsc_attn_blas: %d rows at %d, cache %d, head dim %d, %d / %d heads", n, pos, a->max_T, D,
                  nq, nkv);
        return;
    }
    if (c->capturing) { tsc_fail_(c, TS_E_ARG, "tsc_attn_blas: inside a graph capture (prompt chunks only)"); return; }
    const int G = nq / nkv, qw = a->no_gate ? D : 2 * D, kvdim = nkv * D;
    const int64_t Tall = (int64_t)pos + n;
    const size_t scratch = ws_bytes - BLAS_WS;
    /* query rows a tile: the group's scores of the tile's rows over the keys
     * of the chunk's last row fit the scratch */
    int64_t r = (int64_t)(scratch / (sizeof(float) * (size_t)G * (size_t)Tall));
    if (r < 1) {
        tsc_fail_(c, TS_E_ARG, "tsc_attn_blas: a scratch of %zu bytes holds no row of %d heads x %lld keys", scratch, G,
                  (long long)Tall);
        return;
    }
    if (r > n) r = n;
    float *S = (float *)ws;
    cublasHandle_t h = bind(c, "tsc_attn_blas", (uint8_t *)ws + ws_bytes - BLAS_WS);
    if (!h) return;
    cublasStatus_t st;
    const float scale = 1.0f / sqrtf((float)D), one = 1.f, zero = 0.f;
    for (int kh = 0; kh < nkv && !c->err_code; kh++)
        for (int64_t i0 = 0; i0 < n && !c->err_code; i0 += r) {
            const int rr = (int)(n - i0 < r ? n - i0 : r), T = (int)(pos + i0 + rr);
            const float *K = a->Kc + (int64_t)kh * D, *V = a->Vc + (int64_t)kh * D;
            const float *Q = a->qg + (i0 * nq + (int64_t)kh * G) * qw;
            float *O = a->out + i0 * nq * D + (int64_t)kh * G * D;
            /* S_j (T x rr, column-major: row i's scores contiguous) = K (T x D) . Q_j^T */
            st = L.gemm_sb(h, CUBLAS_OP_T, CUBLAS_OP_N, T, rr, D, &scale, K, CUDA_R_32F, kvdim, 0, Q, CUDA_R_32F,
                           nq * qw, qw, &zero, S, CUDA_R_32F, T, (long long)rr * T, G, CUBLAS_COMPUTE_32F_FAST_TF32,
                           CUBLAS_GEMM_DEFAULT);
            if (st == CUBLAS_STATUS_SUCCESS) {
                tsc_launch(c, k_blas_softmax, dim3((unsigned)(G * rr)), dim3(256), 0, S, T, rr, (int)(pos + i0));
                TSC_LAUNCHED(c, "tsc_attn_blas (softmax)");
                /* O_j (D x rr, column-major = the rows' head j outputs) = V (D x T) . P_j (T x rr) */
                st = L.gemm_sb(h, CUBLAS_OP_N, CUBLAS_OP_N, D, rr, T, &one, V, CUDA_R_32F, kvdim, 0, S, CUDA_R_32F, T,
                               (long long)rr * T, &zero, O, CUDA_R_32F, nq * D, D, G, CUBLAS_COMPUTE_32F_FAST_TF32,
                               CUBLAS_GEMM_DEFAULT);
            }
            if (st != CUBLAS_STATUS_SUCCESS)
                tsc_fail_(c, TS_E_IO, "tsc_attn_blas: cublasGemmStridedBatchedEx (%d keys, %d rows): %s", T, rr,
                          status_name(st));
        }
    if (!a->no_gate && !c->err_code) {
        const int64_t count = (int64_t)n * nq * D;
        tsc_launch(c, k_blas_gate, dim3((unsigned)((count + 255) / 256)), dim3(256), 0, a->out, (const float *)a->qg, count, D);
        TSC_LAUNCHED(c, "tsc_attn_blas (gate)");
    }
}

extern "C" size_t tsc_attn_blas_ws_bytes(int rows, int G, int64_t T) {
    return al256(sizeof(float) * (size_t)rows * (size_t)G * (size_t)T) + BLAS_WS;
}

extern "C" int tsc_attn_blas_fits(const tsc_attn_args *a, int pos, size_t ws_bytes) {
    return a->nkv > 0 && a->nq % a->nkv == 0 && ws_bytes >= tsc_attn_blas_ws_bytes(1, a->nq / a->nkv, (int64_t)pos + a->n);
}
