/* cpu.h: internals of the CPU backend shared by its files.
 *
 * Owns: the kernel modes (per thread: set by the engine's backend), the
 * thread pools (threads.c), the streams' kernel workspace, the per-ISA row
 * kernels (linear_{generic,avx2,avx512}.c), the driver that splits a product
 * into row ranges over a pool (matmul.c), and the backend's op entry points
 * (backend.c, attn.c, gdn.c, moe.c).
 * Does not own: the contract (backend.h), the kernel list (kernels.h), the
 * reference (linear_ref.c).
 */
#ifndef TS_CPU_H
#define TS_CPU_H

#include <math.h>

#include "cpu/kernels.h"

enum { TS_KMODE_REF = 0, TS_KMODE_GENERIC, TS_KMODE_AVX2, TS_KMODE_AVX512, TS_KMODE_AVX512Q8 };
/* The calling thread's kernel mode: the one its engine's backend set on
 * entry (ts_kmode_swap, cpu/backend.c), else the process default that
 * TS_KERNELS / ts_kernels_select choose (for direct kernel calls: tests).
 * Pool workers run a region under its caller's mode. */
int ts_kmode(void);
int ts_kmode_thread(void);     /* -1 when the thread has none set */
int ts_kmode_swap(int mode);   /* set the thread's mode (-1: none); returns the old one */
int ts_kmode_parse(const char *name); /* -1: unknown or not supported by this CPU */

/* ---- thread pools (threads.c) ----
 * Run fn(ctx, i, n) for every chunk i in [0, n) on the pool's threads (the
 * caller takes part) and wait for all. Chunks are claimed dynamically, so
 * which thread runs a chunk varies; results must not depend on it. One
 * region at a time per pool (callers from several sessions take turns). */
typedef struct ts_pool ts_pool;
typedef void (*ts_pool_fn)(void *ctx, int chunk, int n_chunks);
ts_pool *ts_pool_new(int n_threads); /* 0 = all cores; threads start on first use */
void ts_pool_free(ts_pool *p);
ts_pool *ts_pool_default(void);      /* for kernel calls outside any engine */
void ts_pool_run(ts_pool *p, ts_pool_fn fn, void *ctx, int n_chunks);
int ts_pool_threads(ts_pool *p);
/* The thread count the pool has, or will have when it starts (no side effect). */
int ts_pool_threads_planned(const ts_pool *p);
/* 0 for the calling thread, 1..n-1 for the pool's workers: an index for
 * per-thread scratch (a stream's workspace is used by one caller at a time,
 * so callers share slot 0). */
int ts_pool_slot(void);

/* ---- prepared activations ---- (see below) */
typedef struct ts_xprep ts_xprep;

/* y = x W^T in the thread's kernel mode. flags: TS_LIN_PREFILL may use
 * differently-rounded multi-row kernels; TS_LIN_DRAFT may round activations
 * to int8 (drafting only). The context names the pool and the workspace
 * (one per session: sessions never share one, so they need no lock).
 * Returns 0, or TS_E_NOMEM when the workspace cannot grow (never a quietly
 * different kernel: that would change the rounding). */
enum { TS_LIN_PREFILL = 1, TS_LIN_DRAFT = 2 };
/* the contract's mode as product flags */
static inline int ts_cpu_lin_flags(ts_mode m) {
    return m == TS_MODE_PREFILL ? TS_LIN_PREFILL : m == TS_MODE_DRAFT ? TS_LIN_DRAFT : 0;
}
typedef struct ts_cpu_ws ts_cpu_ws;
typedef struct ts_cpu_ctx {
    ts_pool *pool;
    ts_cpu_ws *ws;
} ts_cpu_ctx;
int ts_cpu_linear(const ts_cpu_ctx *cx, const ts_weight *w, const float *x, float *y, int n, int flags);
int ts_cpu_linear_many(const ts_cpu_ctx *cx, const ts_weight *const *w, int nw, const float *x, float *const *y, int n,
                       int flags);
int ts_cpu_linear_batch(const ts_cpu_ctx *cx, const ts_weight *const *w, const float *const *x, float *const *y, int nw,
                        int flags);
void ts_cpu_parallel_for(const ts_cpu_ctx *cx, int n, ts_par_fn fn, void *ctx);
/* The workspace for products of up to `rows` rows and `cols` columns
 * (quantized with groups of at least `group`; 0 = none) on `threads`
 * threads, in the thread's kernel mode: the bytes that are (reserve = 0) or
 * were (reserve = 1) added to what ws holds already (ws may be a zeroed
 * struct: the whole need); (size_t)-1 when a reservation fails. */
size_t ts_cpu_ws_reserve(ts_cpu_ws *ws, int threads, int rows, int64_t cols, int group, int reserve);
void ts_cpu_ws_release(ts_cpu_ws *ws);

/* ---- prepared activations ----
 * The VNNI path multiplies integer q by x in fixed point with one scale per
 * (row, group), sx = max|x_g| / 32767: x/sx = hi + lo/65536 with hi and lo
 * int16, so x keeps about 2^-32 of its group's largest value, finer than f32
 * rounding of the sum (one int16 part alone, 2^-16, visibly moved the chaotic
 * fixture models' logits). For 4-bit weights each 64-column block
 * of x is stored permuted, even columns then odd ones, matching the low and
 * high nibbles of the packed bytes; the bias term uses the exact f32 group
 * sums xs. The prefill path uses f32 x, permuted the same way for 4-bit. */
struct ts_xprep {
    int n;
    int64_t cols, ng;   /* ng = cols / group */
    int16_t *xq;        /* [2, n, cols]: hi parts, then lo parts */
    float *sx, *xs;     /* [n, ng] */
    float *xp;          /* [n, cols] f32, permuted for 4-bit */
    int8_t *x8;         /* [n, cols] int8 ("avx512-q8" mode), 128-blocks evens | odds */
    int8_t *xd;         /* [n, 3, cols]: the three int8 digits of the P16 kernel */
    int nd;             /* digits in xd: 3, or 1 when drafting */
};

/* A stream's kernel workspace: activation buffers and per-thread
 * dequantization rows, grown only by reservation or (rarely) by a product
 * larger than any reservation. */
struct ts_cpu_ws {
    ts_xprep p;
    size_t cap_xq, cap_xp, cap_sx, cap_xs, cap_x8, cap_xd; /* elements allocated */
    float *wbuf;  /* [threads, 4 * cols], [threads, 8 * cols] with AMX */
    size_t cap_w;
};

/* ---- row kernels: rows [r0, r1) of y[n, rows] ---- */
void ts_generic_rows(const ts_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1, float *wbuf);
void ts_avx512_qdot(const ts_weight *w, const ts_xprep *p, float *y, int64_t r0, int64_t r1);
void ts_avx512_prep_q(const float *x, int64_t cols, int group, int bits, int16_t *hi, int16_t *lo, float *sx, float *xs);
void ts_avx512_gdn_step(float *S, const float *k, const float *v, const float *q, float decay, float beta, float *o,
                        int dk, int dv);
int ts_avx512_conv_row(const float *const *x, const float *w, int K, float *y, int C);
void ts_avx512_attn_rows(const ts_attn_q *a, const float *K, const float *V, int64_t stride, int D, float scale);
void ts_avx512_attn_row(const float *q, const float *K, const float *V, int64_t stride, int T, int D, float scale,
                        float *att, float *o);
int ts_avx512_argmax(const float *x, int n);
/* ts_gdn_step_rows (kernels.h) with AVX-512, dv % 16 == 0 (gdn_rows_avx512.c) */
void ts_avx512_gdn_step_rows(float *S, const float *S_in, const float *const *k, const float *const *v,
                             const float *const *q, const float *decay, const float *beta, float *const *o, int n,
                             int dk, int dv);
float ts_avx512_sum_exp(const float *x, int n, float m);
/* y = silu(x) (* u when u is not NULL) */
void ts_avx512_silu(float *y, const float *x, const float *u, size_t n);
void ts_avx512_prep_q8(const float *x, int64_t cols, int group, int8_t *x8, float *sx, float *xs);
void ts_avx512_q8dot(const ts_weight *w, const int8_t *x8, const float *sx, const float *xs, int n, float *y,
                     int64_t r0, int64_t r1);
void ts_avx512_fdot(const ts_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1);
void ts_avx2_prep_x(const float *x, int64_t cols, int group, int bits, float *xp, float *xs);
void ts_avx2_qdot(const ts_weight *w, const float *xp, const float *xs, int n, float *y, int64_t r0, int64_t r1);
void ts_avx2_fdot(const ts_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1);
/* P16-packed weights (pack.c, linear_p16_avx512.c) */
int ts_pack_enabled(void);
int ts_pack_supported(int bits, int group, int64_t cols);
size_t ts_pack_record_bytes(int bits, int group, ts_dtype sdtype);
/* One x row's digits: column quad q's digit k (4 bytes) at d + q * qstride + k * kstride. */
void ts_avx512_prep_d(const float *x, int64_t cols, int group, int nd, int8_t *d, int64_t qstride, int64_t kstride,
                      float *sx, float *xs);
void ts_p16_prep_rows(const float *x, int n, int64_t cols, int group, int nd, int8_t *xd, float *sx, float *xs);
void ts_avx512_pdot(const ts_weight *w, const int8_t *xd, const float *sx, const float *xs, int n, int nd, float *y,
                    int64_t r0, int64_t r1);
/* The same product on AMX tiles, bit-identical (linear_p16_amx.c), for nd
 * = 1, 2 or 3 digits: digits laid out [row][digit][cols] (ts_amx_prep_rows);
 * ubuf: 32 * cols bytes of per-thread scratch for INT4 unpacking.
 * ts_amx_available: CPU, kernel permission and TS_AMX != 0. */
int ts_amx_available(void);
void ts_amx_min_rows(int rows); /* AMX for products of >= rows x rows, every precision; < 0: the default rule (matmul.c) */
void ts_amx_prep_rows(const float *x, int n, int64_t cols, int group, int nd, int8_t *xa, float *sx, float *xs);
void ts_amx_pdot(const ts_weight *w, const int8_t *xa, const float *sx, const float *xs, int n, int nd, float *y,
                 int64_t r0, int64_t r1, uint8_t *ubuf);
/* Prefill: dequantize 4 rows at a time into wbuf [4, cols] f32 (column order
 * of xp), then a 4x4 register-blocked f32 product. */
void ts_avx512_gemm(const ts_weight *w, const float *xp, int n, float *y, int64_t r0, int64_t r1, float *wbuf);

/* ---- the CPU backend's ops (cpu/backend.c, attn.c, gdn.c, moe.c) ---- */
const ts_cpu_ctx *ts_cpu_stream_ctx(ts_stream *s);
void ts_cpu_attn(ts_stream *s, ts_mode m, const ts_attn_args *a);
void ts_cpu_gdn(ts_stream *s, ts_mode m, const ts_gdn_args *a);
void ts_cpu_gdn_materialize(ts_stream *s, const ts_gdn_args *a);
void ts_cpu_moe(ts_stream *s, ts_mode m, const ts_moe_args *a);
void ts_cpu_moe_route(ts_stream *s, ts_mode m, const ts_moe_args *a);
/* MoE routing of one row, the reference for every backend (moe.c): softmax
 * of li [E] in f32 (in place, double sum), the top k (ties to the lower id)
 * into sel [k] and their probabilities into wsel [k]; k <= E. */
void ts_cpu_moe_route_row(float *li, int E, int k, int *sel, float *wsel);
/* norm_topk: w [k] = w / sum(w), the f32 sum in pick order */
void ts_cpu_moe_route_norm(float *w, int k);
/* the token path's RMSNorm: rows of dim, double accumulation, w = 1 + w */
void ts_rmsnorm1p(const float *x, const float *w1p, float *y, int n, int dim, float eps);
/* The gates of the GDN and the attention output, one definition each. */
static inline float ts_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus with its default threshold 20 */
static inline float ts_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ---- prefill kernels (prefill.c dispatches; prefill_avx512.c) ---- */
#define TS_ATTN_MAX_D 256 /* the AVX-512 attention keeps a [D, 64] key tile on the stack */
/* C[M, N] = A[M, K] B[K, N] (acc = 0) or C += A B (acc = 1); row-major with
 * leading dimensions lda, ldb, ldc; any M, N, K. */
void ts_avx512_sgemm(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C, size_t ldc,
                     int acc);
void ts_avx512_delta_chunk(float *S, const float *q, const float *k, const float *v, size_t ld, const float *g,
                           const float *beta, size_t ldg, float *o, size_t ldo, int L, int dk, int dv, float *ws);
void ts_avx512_attn_chunk(const float *q, size_t ldq, const float *k, const float *v, size_t ldkv, float *o, size_t ldo,
                          int n, int pos, int D, float scale);
void ts_avx512_add_rmsnorm(float *x, const float *add, const float *w, float *y, int n, int dim, float eps);
void ts_avx512_conv_silu(const float *x, size_t ldx, const float *state, size_t lds, const float *w, size_t ldw, int K, float *out,
                         size_t ldo, int n, int nc);

#endif
