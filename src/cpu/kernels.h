/* kernels.h: the CPU kernels (CPU-private: only src/cpu/ and the kernel tests include it).
 *
 * Model code sees backend.h only; the CPU backend (cpu/backend.c) calls these.
 * Weights are described by ts_weight: a logical [rows, cols] matrix (out x in,
 * as PyTorch's nn.Linear stores it) in F32, F16 or BF16, or quantized in the
 * MLX convention (U32-packed values, per-group scales and biases along cols).
 * Activations are f32.
 *
 * The one rule every implementation keeps: ts_linear computes each output row
 * exactly as a one-row call would (same reduction order, bit for bit), for any
 * n. Speculative verification runs M+1 rows through ts_linear and must
 * reproduce one-token decode exactly. ts_linear_prefill may round differently
 * (it is used for prompt chunks only).
 */
#ifndef TS_KERNELS_H
#define TS_KERNELS_H

#include "backend.h"

/* ts_weight, ts_act_digits and the row-exactness rule: backend.h. The
 * functions below are the CPU kernels; called directly (tests, tools) they
 * run in the process default kernel mode (TS_KERNELS, ts_kernels_select)
 * on a default pool and workspace; engines call them through their own
 * CPU backend (cpu/backend.c), which sets its mode on the calling thread. */

/* Activation precision of the packed (AVX-512 VNNI / AMX) products. Those
 * kernels carry x as integer digits of its group's largest value: 3 digits
 * keep f32-class precision (2^-23; within 1e-3 of the f32 reference even on
 * the chaotic random fixtures), 2 digits 2^-15, 1 digit 2^-7 (llama.cpp's
 * Q8 activations). Each digit is a multiply per weight and x row, so fewer
 * digits make prompt chunks and verify blocks cheaper; a one-row decode
 * streaming its weights from memory barely changes. Every product of one
 * engine uses the same precision, and row-exactness holds at each: verify
 * rows still equal decode rows bit for bit. Other kernels (reference,
 * AVX2, unpacked weights) compute in f32 and ignore it. */

/* y[n, rows] = x[n, cols] . W^T  (row-exact: see above) */
int ts_linear(const ts_weight *w, const float *x, float *y, int n);
/* The product for drafting only (speculative decoding's MTP head): may
 * round activations to int8 (~3x less arithmetic on the packed path). A
 * draft never reaches the output unverified, so its precision only moves
 * the acceptance rate, never the generated tokens. */
int ts_linear_draft(const ts_weight *w, const float *x, float *y, int n);
/* ts_linear (flags 0), ts_linear_prefill (TS_LIN_PREFILL = 1) or
 * ts_linear_draft (TS_LIN_DRAFT = 2) of nw weights with the same cols on the
 * same x: y[i] = x . w[i]^T, in one parallel region when the kernels allow it
 * (same results as nw separate calls). */
int ts_linear_many(const ts_weight *const *w, int nw, const float *x, float *const *y, int n, int flags);
/* One row each: y[i] = x[i] . w[i]^T for nw weights (e.g. the selected MoE
 * experts' down projections), in one parallel region when possible; flags as
 * above. */
int ts_linear_batch(const ts_weight *const *w, const float *const *x, float *const *y, int nw, int flags);
/* Same product; may use faster, differently-rounded kernels. */
int ts_linear_prefill(const ts_weight *w, const float *x, float *y, int n);
/* The plain reference every fast kernel is tested against. */
void ts_linear_ref(const ts_weight *w, const float *x, float *y, int n);
/* Row r of W as f32 (embedding gather). */
void ts_weight_row(const ts_weight *w, int64_t r, float *out);
/* Element (r, c) as f32 (slow; tests and tools). */
float ts_weight_get(const ts_weight *w, int64_t r, int64_t c);

/* One gated delta-rule step of one value head (model-spec.md §2, GDN):
 *   S = decay * S;  p = S^T k;  S += k (beta (v - p))^T;  o = S^T q
 * S [dk, dv] f32 in place; k, q [dk]; v [dv]; o [dv] (NULL: not wanted).
 * The reference walks i (dk) outer and j (dv) inner in this order; the SIMD
 * version vectorises over j with FMAs (each element's sum over i keeps its
 * order; only the FMA rounding differs). */
void ts_gdn_step(float *S, const float *k, const float *v, const float *q, float decay, float beta, float *o, int dk,
                 int dv);
void ts_gdn_step_ref(float *S, const float *k, const float *v, const float *q, float decay, float beta, float *o,
                     int dk, int dv);

/* Attention of one query row over T cached rows of one KV head:
 *   att[t] = scale * q . K[t];  p = softmax(att);  o = sum_t p[t] V[t]
 * K[t] = K + t * stride (likewise V), q and o of D floats, att [T] scratch.
 * The reference sums q . K[t] in d order and o in t order; the SIMD version
 * uses 16-wide partial sums and a vector exponential (rounding differs;
 * decode and verify share it, so speculative exactness is unaffected).
 * Softmax sums in double. */
void ts_attn_row(const float *q, const float *K, const float *V, int64_t stride, int T, int D, float scale, float *att,
                 float *o);
void ts_attn_row_ref(const float *q, const float *K, const float *V, int64_t stride, int T, int D, float scale,
                     float *att, float *o);
/* Queries of n rows x g heads over the same KV head (a verify block's rows;
 * the query heads of grouped-query attention): query (i, j) at
 * q + i*q_row + j*q_head, its scores at att + i*att_row + j*att_head (T0 + i
 * of them: row i attends to keys [0, T0 + i)), its output at
 * o + i*o_row + j*o_head. Every query gets exactly ts_attn_row's bits (the
 * same for any n and g); K and V are read once for all of them. */
#define TS_ATTN_MAX_Q 1024 /* n * g per call on the SIMD path (more: one query at a time) */
typedef struct ts_attn_q {
    const float *q;
    size_t q_row, q_head;
    float *att;
    size_t att_row, att_head;
    float *o;
    size_t o_row, o_head;
    int n, g, T0;
} ts_attn_q;
void ts_attn_rows(const ts_attn_q *a, const float *K, const float *V, int64_t stride, int D, float scale);

/* One row of the GDN causal depthwise conv (the token path): y[c] =
 * sum_{t<K} w[t*C + c] * x[t][c] (weights [K, C]), summed from zero in t
 * order with separate multiplies and adds, so every kernel mode gives the
 * same bits. */
void ts_conv_row(const float *const *x, const float *w, int K, float *y, int C);

/* Element-wise SiLU x / (1 + e^-x): y = silu(x) (y may be x), and
 * g = silu(g) * u. The SIMD versions use a polynomial e^x within ~2 ulp of
 * expf (kernels test); decode, verify and replay share them. */
void ts_silu(float *y, const float *x, size_t n);
void ts_silu_mul(float *g, const float *u, size_t n);

/* sum_{i<n} e^(x[i] - m): a softmax's denominator (the MTP drafter's
 * confidence, spec.c). The SIMD version uses the polynomial e^x of ts_silu
 * and 16 partial sums (rounding differs from the scalar loop); -inf terms
 * add 0 in both. */
float ts_sum_exp(const float *x, int n, float m);

/* The first index of the largest of x[0..n) (n >= 1), exactly as the loop
 * `b = 0; for i: if (x[i] > x[b]) b = i` gives it (NaN never wins). */
int ts_argmax(const float *x, int n);

/* ---- GDN: one head over several rows (cpu/gdn_rows.c; added for the lazy
 * speculative rollback, separate from the matrix-product contract) ----
 * The step above for rows t = 0..n-1 in order on one head's state: S [dk, dv]
 * starts as S_in (may be S: in place; else S_in is only read), row t uses
 * k[t], q[t] [dk], v[t] [dv], decay[t], beta[t] and writes o[t] [dv] unless o
 * or o[t] is NULL. Bit-identical to copying S_in into S and calling
 * ts_gdn_step n times in the current kernel mode (n = 0: the copy). */
void ts_gdn_step_rows(float *S, const float *S_in, const float *const *k, const float *const *v,
                      const float *const *q, const float *decay, const float *beta, float *const *o, int n, int dk,
                      int dv);

/* Free the default workspace of direct kernel calls (tests measure
 * allocations from zero with it; engines' streams have their own). */
void ts_kernels_release(void);

/* ---- load-time repacking (cpu/pack.c) ----
 * Bytes ts_weight_pack needs for a quantized [rows, cols] matrix in the
 * current kernel mode; 0 when that mode reads the MLX layout directly (or
 * TS_PACK=0 is set in the environment). The memory plan calls it too. */
size_t ts_weight_pack_size(int64_t rows, int64_t cols, int bits, int group, ts_dtype sdtype);
/* Fill dst (ts_weight_pack_size bytes) and point w->packed into it, on
 * pool p (ts_weight_pack: the default pool). */
void ts_weight_pack(ts_weight *w, void *dst);
struct ts_pool;
void ts_weight_pack_on(struct ts_pool *p, ts_weight *w, void *dst);
/* One group record (16-row block rb, group g) of w's P16 layout at out (64-byte
 * aligned), with AVX-512 (cpu/pack_avx512.c): the bytes pack.c's loop writes. */
void ts_avx512_pack_record(const ts_weight *w, int64_t rb, int64_t g, uint8_t *out);
/* Tests: 1 packs with the scalar loop, 0 back to the default choice. */
void ts_pack_force_scalar(int on);
/* The same on the calling thread alone (p NULL above): for threads that are
 * not the pool's owner and run several packs at once (expert streaming's
 * I/O threads), where sharing the pool would serialise them on its lock. */
/* Element (r, c) read back from the packed layout (tests). */
float ts_packed_get(const ts_weight *w, int64_t r, int64_t c);

/* ---- parallel regions ----
 * fn(ctx, i, n) for every i in [0, n) on the default pool (the caller
 * takes part); returns when all are done. Work items must be independent
 * and their results must not depend on which thread ran them. The CPU
 * backend's ops use their engine's pool (ts_cpu_parallel_for, cpu.h). */
typedef void (*ts_par_fn)(void *ctx, int i, int n);
void ts_parallel_for(int n, ts_par_fn fn, void *ctx);

/* Denormals flushed to zero on the calling thread until ts_fp_end (returns
 * the previous mode). The API's compute entry points (feed, generate, MTP)
 * wrap themselves in it; pool workers always run a region under the
 * caller's mode, so results never depend on which thread ran a chunk. */
unsigned ts_fp_begin(void);
void ts_fp_end(unsigned old);

/* ==== prefill kernels (chunked prefill only; decode and verify never call
 * these, so their rounding is free to differ from the token path) ==== */

/* (The CPU backend spreads these over its pool: cpu/gdn.c, cpu/attn.c.) */

/* One chunk of L rows of the chunked gated delta rule for one
 * value head (model-spec.md §6.2; the algebra is in src/cpu/prefill.c):
 *   S [dk, dv] f32, the state at the chunk start, advanced in place;
 *   q, k rows t at q + t*ld, k + t*ld [dk] (l2-normed, q scaled);
 *   v rows at v + t*ld [dv]; g (log decay, <= 0) and beta of row t at
 *   g[t*ldg], beta[t*ldg]; o row t (before the gated norm) at o + t*ldo.
 * ws: ts_delta_chunk_ws(min(L, 64), dk, dv) floats of workspace. Rows past
 * 64 run as further chunks of 64, in order. */
void ts_delta_chunk(float *S, const float *q, const float *k, const float *v, size_t ld, const float *g,
                    const float *beta, size_t ldg, float *o, size_t ldo, int L, int dk, int dv, float *ws);
/* The reference: one chunk, 1 <= L <= 64 (ts_delta_chunk splits longer runs;
 * its workspace need is ts_delta_chunk_ws(min(L, 64), dk, dv)). */
void ts_delta_chunk_ref(float *S, const float *q, const float *k, const float *v, size_t ld, const float *g,
                        const float *beta, size_t ldg, float *o, size_t ldo, int L, int dk, int dv, float *ws);

/* Causal softmax attention of a prompt chunk, n query rows of one head (the
 * multi-row form of ts_attn_row): row i (query at q + i*ldq [D]; `scale`
 * multiplies the scores) sees keys and values 0..pos+i at k + t*ldkv,
 * v + t*ldkv [D]; writes o + i*ldo [D]. No caller scratch: the softmax is
 * accumulated online (the AVX-512 version keeps ~80 KiB of tiles on the
 * stack for D <= 256). */
void ts_attn_chunk(const float *q, size_t ldq, const float *k, const float *v, size_t ldkv, float *o, size_t ldo, int n,
                   int pos, int D, float scale);
void ts_attn_chunk_ref(const float *q, size_t ldq, const float *k, const float *v, size_t ldkv, float *o, size_t ldo,
                       int n, int pos, int D, float scale);

/* (SiLU: ts_silu, ts_silu_mul above.) */

/* Rows i < n of dim: x_i += add_i (add may be NULL), then
 * y_i = x_i * rsqrt(mean(x_i^2) + eps) * w (w holds 1 + w for the (1+w)
 * norms). y may alias x. */
void ts_add_rmsnorm(float *x, const float *add, const float *w, float *y, int n, int dim, float eps);

/* Causal depthwise conv + SiLU of nc channels over n rows:
 *   out[i*ldo + c] = silu(sum_{t<K} w[t*ldw + c] * in(i - (K-1) + t)[c])
 * where in(r) is x + r*ldx for r >= 0 and state + (K-1+r)*lds for r < 0
 * (the K-1 inputs before the chunk, oldest first); w is tap-major ([K, C]
 * weights, ldw = C, offset to the first channel). Sums in t order. */
void ts_conv_silu(const float *x, size_t ldx, const float *state, size_t lds, const float *w, size_t ldw, int K,
                  float *out, size_t ldo, int n, int nc);

#endif
