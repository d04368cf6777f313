/* backend.h: the contract between the model and the machines it runs on.
 *
 * Owns: memory domains, views, the execution mode, the step record, the
 * backend and stream handles and the op table every backend implements
 * (src/cpu/backend.c, src/cuda/backend.cu, tests/test_poison.c's poisoned
 * wrapper for the tests). Does not own: the kernels (src/cpu/, CPU-private),
 * the model's layout (src/model/model.h), the memory plan (engine/plan.c).
 *
 * Layering: model, generation and session code compute addresses of
 * activation, state and logit memory (pointer arithmetic on what a backend
 * allocated) but never dereference them: every read, write and computation
 * goes through an op. Weights are host descriptors (ts_weight) the backend
 * prepares once (weight_prepare) and reads on its own terms. A backend
 * includes no model header: the op arguments below carry sizes, not configs.
 *
 * Why streams: the engine owns one backend (kind, threads, kernel mode);
 * every session owns a stream of it (workspace, sticky error, step record),
 * so sessions of one engine never share scratch and need no lock beyond the
 * backend's own (the CPU pool runs one region at a time). A CUDA stream maps
 * onto it one to one.
 *
 * Errors are sticky: an op that fails records its error on the stream and
 * later ops may do nothing; ts_be_sync returns the first error (and clears
 * it). ts_forward and everything above it return it, so an asynchronous
 * device fault has a way out.
 *
 * THE ROW-EXACTNESS RULE (from kernels.h, word for word): ts_linear computes
 * each output row exactly as a one-row call would (same reduction order, bit
 * for bit), for any n. Speculative verification runs M+1 rows through
 * ts_linear and must reproduce one-token decode exactly. ts_linear_prefill
 * may round differently (it is used for prompt chunks only).
 * Here: under TS_MODE_EXACT every op computes each row bit for bit as a
 * one-row call of that op would, whatever n; TS_MODE_PREFILL may round
 * differently (prompt chunks); TS_MODE_DRAFT may round differently too
 * (the MTP head's drafts, always verified, so only acceptance moves).
 *
 * Graphs: a backend that captures (CUDA graphs) keys a capture by (kind,
 * rows); every per-token value a captured op needs (position, attention
 * length, pending rows, parities) is in the step record, which the host
 * writes before each pass (ts_step), never in an op's arguments. That
 * is why the GDN snapshot/live pair is chosen by a parity bit instead of a
 * pointer swap, and why a backend that captures chooses a verify's and a
 * lazy rollback's GDN buffers, and walks the pending rows, from the record
 * on the device: the same graph then replays every verify of a block size
 * (keys: model/qwen35.c, pass_key). The CPU backend leaves the hooks NULL.
 * CUDA (src/cuda/backend.cu): the embedding, the first op of a pass and
 * never captured, copies the record and the token ids to the device;
 * qwen35.c captures the pass after it, one graph per key and stream.
 * graph_begin answers 0 when capturing started, nonzero to run the ops
 * uncaptured; graph_launch 0 when a graph for the key was replayed, 1 when
 * there is none yet.
 */
#ifndef TS_BACKEND_H
#define TS_BACKEND_H

#include <stdio.h>

#include "ts_int.h"

/* ---- weights (host descriptors) ----
 * A logical [rows, cols] matrix (out x in, as PyTorch's nn.Linear stores
 * it) in F32, F16 or BF16, or quantized in the MLX convention (U32-packed
 * values, per-group scales and biases along cols). `prep` and `act_digits`
 * belong to the backend that prepared the weight (weight_prepare): the CPU
 * backend's repacked copy for its VNNI/AMX kernels, and the activation
 * precision of those products. */
typedef struct ts_weight {
    ts_dtype dtype;       /* F32, F16, BF16; U32 = packed quantized */
    int bits, group;      /* quantized: 4 or 8 bits; group size along cols */
    int64_t rows, cols;   /* logical shape [rows (out), cols (in)] */
    const void *data;     /* [rows, cols] elements, or [rows, cols*bits/32] u32 */
    const void *scales;   /* quantized: [rows, cols/group] of sdtype */
    const void *biases;   /* quantized: [rows, cols/group] of sdtype */
    ts_dtype sdtype;      /* F32, F16 or BF16 */
    const uint8_t *packed; /* backend-prepared copy (CPU: cpu/pack.c), or NULL */
    int act_digits;        /* packed products: the activations' precision,
                              in int8 digits (1 = 8 bits, 2 = 16, 3 = 24);
                              0 = TS_ACT_DIGITS_DEFAULT. */
} ts_weight;
#define TS_ACT_DIGITS_DEFAULT 3
static inline int ts_act_digits(const ts_weight *w) { return w->act_digits ? w->act_digits : TS_ACT_DIGITS_DEFAULT; }
/* Bytes the weight occupies in its file (data + scales + biases). */
size_t ts_weight_bytes(const ts_weight *w);
/* The same by part: *data the matrix's, *scales each of scales and biases
 * (0 for an unquantized weight). */
void ts_weight_part_bytes(const ts_weight *w, size_t *data, size_t *scales);

/* ---- memory ---- */
/* Memory domains: ts_mem_domain of the public header (host, device, pinned
 * host), so that the plan and the backends count in the same terms. */
typedef ts_mem_domain ts_domain;

/* A borrowed view of backend memory: f32 (or I32 ids) rows of `cols`
 * elements, `ld` elements apart. Constructing and slicing a view is pointer
 * arithmetic only. */
typedef struct ts_view {
    void *p;
    ts_dtype dt;
    int64_t rows, cols, ld;
} ts_view;

static inline ts_view tv_f32(float *p, int64_t rows, int64_t cols) { return (ts_view){p, TS_DTYPE_F32, rows, cols, cols}; }
static inline ts_view tv_ld(float *p, int64_t rows, int64_t cols, int64_t ld) {
    return (ts_view){p, TS_DTYPE_F32, rows, cols, ld};
}
/* rows [r0, r0 + n) of v */
static inline ts_view tv_rows(ts_view v, int64_t r0, int64_t n) {
    v.p = (char *)v.p + (size_t)r0 * (size_t)v.ld * ts_dtype_size(v.dt);
    v.rows = n;
    return v;
}

/* The execution mode, passed down explicitly (it used to be inferred by
 * comparing function pointers). */
typedef enum { TS_MODE_EXACT = 0, TS_MODE_PREFILL, TS_MODE_DRAFT } ts_mode;

/* How a pass treats the GDN state pairs (ts_step.record). TAPE: a verify
 * block (the block start becomes the snapshot by a trade of the pairs, the
 * rows' inputs are taped). SWAP: a step of run-ahead decoding
 * (gen/generate.c): the one row goes from the live buffers into the others,
 * which the caller's parity flip makes live, so that the step is undone by
 * flipping back (no tape; never with pending rows). */
enum { TS_REC_NONE = 0, TS_REC_TAPE = 1, TS_REC_SWAP = 2 };

/* The per-pass values a captured graph reads (ts_be_step writes them). */
typedef struct ts_step {
    int32_t pos;     /* position of the first row */
    int32_t n;       /* rows of the pass */
    int32_t pend;    /* pending rows of a lazy rollback (GDN) */
    int32_t record;  /* TS_REC_*: a verify block records the GDN tape (TAPE);
                        a run-ahead step only trades the pairs (SWAP) */
    int32_t par_S;   /* parity of the GDN recurrent-state pair: live = S[par_S] */
    int32_t par_conv;/* parity of the GDN conv-state pair */
    int32_t half;    /* the tape half holding the last verify's prepared rows */
} ts_step;

typedef struct ts_backend ts_backend;
typedef struct ts_stream ts_stream;
typedef struct ts_backend_ops ts_backend_ops;

struct ts_backend {
    const ts_backend_ops *ops;
    const char *name;   /* "cpu", "poison", "cuda" */
    ts_domain dom;      /* where its allocations live */
    void *impl;
    void (*destroy)(ts_backend *be);
};

struct ts_stream {
    ts_backend *be;
    int err;            /* sticky: the first error, 0 if none */
    char msg[256];
    ts_step step;       /* the current pass (host copy; a device mirrors it) */
    void *impl;
};

/* ---- fused-op arguments: device addresses computed by the caller ---- */

/* Gated attention after the projections, rows [0, n) at positions pos..:
 * per-head RMSNorm of q and k (1 + w weights), RoPE on the first rot dims,
 * the rows' K/V appended to the cache, causal attention over the cache, the
 * output gate sigmoid(gate) per element; out [n, nq*D]. */
typedef struct ts_attn_args {
    float *qg;                  /* [n, nq, 2D]: query | gate per head (normed and rotated in place) */
    float *k, *v;               /* [n, nkv*D] the rows' projections (k normed and rotated in place) */
    const float *q_norm, *k_norm; /* [D] 1 + w */
    float *kc, *vc;             /* caches [ctx, nkv*D] */
    float *att;                 /* scores scratch [att_rows, nq, att_len] */
    int att_len, att_rows;
    float *out;                 /* [n, nq*D] */
    int n, nq, nkv, D, rot;
    int pos;                    /* the backend's: it takes the position from the step record */
    double theta;
    float eps;
    int mask;                   /* TS_MASK_CAUSAL (0); TS_MASK_BLOCK: a drafted block's rows see
                                   the whole block (DFlash; a backend may answer TS_E_UNSUPPORTED) */
    /* TS_MASK_BLOCK only (DFlash's draft layers): rows [0, n_kv) are context
     * rows: their K/V are normed, rotated and appended at pos.., and they
     * have no query; rows [n_kv, n) are the block: queries qg [n - n_kv, ...]
     * and out [n - n_kv, nq*D] count from the block's first row, and every
     * block row attends to cache rows [0, pos + n) (context and the whole
     * block, no causal mask inside it). n_kv = n: append only. */
    int n_kv;
    int no_gate;                /* 1: no output gate (Qwen3-style layers): qg rows hold queries only,
                                   [rows, nq, D] (the norms multiply by q_norm/k_norm as stored
                                   in either case: 1 + w for Qwen3.5, w for Qwen3) */
    int kv_len;                 /* rows of kc/vc (0: att_len). A backend that splits the keys into
                                   pieces (CUDA) sizes them from this, not from the score buffer, so
                                   that sessions of one context length split alike (a speculative
                                   session's score buffer is larger): the same bits either way */
    /* the product that reads out next (the layer's o_proj), or NULL: a hint,
     * as ts_gdn_args.out_w (CUDA: out's 8-bit digits made by the attention's
     * last kernel); out is written either way */
    const ts_weight *out_w;
} ts_attn_args;
enum { TS_MASK_CAUSAL = 0, TS_MASK_BLOCK = 1 };

/* A Gated DeltaNet layer after its projections (model-spec.md §2): the
 * causal conv over the conv history and the rows, SiLU, l2 norms, gates,
 * the delta rule per value head, then the gated RMSNorm; out [n, Vd].
 * The state pairs are chosen by the step record's parities; a verify
 * (step.record) snapshots the block start and tapes the rows; pending rows
 * of a lazy rollback (step.pend) are applied first from the tape. The
 * backend never changes a parity: the caller flips them after the pass by
 * the rule ts_gdn_parity_after gives. */
typedef struct ts_gdn_args {
    const float *conv_w;   /* [K, C] tap-major */
    const float *neg_A, *dt_bias; /* [Hv] */
    const float *norm;     /* [dv] plain weight */
    float *S[2];           /* [Hv, dk, dv] live/snapshot pair (S[1] NULL without drafting or run-ahead) */
    float *conv[2];        /* [K-1, C] */
    float *tape_qkv, *tape_a, *tape_b; /* [Rv, C], [Rv, Hv] x 2; NULL without a tape */
    float *tape_prep;      /* [2, Rv, C] */
    int Rv;
    float *rows;           /* [cap, C] prepared rows of a pass (cap = Rv with a tape, else 1) */
    int cap;
    float *pf_conv, *pf_gate, *pf_chunk; /* chunked prefill scratch, NULL when rows come one at a time */
    const float *qkv, *a, *b; /* [n, C], [n, Hv] x 2 (a, b at ld Hv) */
    float *z;              /* [n, Vd] (overwritten) */
    float *out;            /* [n, Vd] */
    /* the product that reads out next (the layer's out_proj), or NULL: a
     * hint, so that a backend may make that product's input form with the
     * step (CUDA: out's 8-bit digits, made by the GDN kernel); out is
     * written either way */
    const ts_weight *out_w;
    int n, Hk, Hv, dk, dv, K;
    float eps;
} ts_gdn_args;

/* The parities after a GDN pass of step s (uniform over layers, so one rule
 * for the whole forward): a verify that nothing precedes swaps both pairs
 * (the block-start state becomes the snapshot without a copy), as does a
 * run-ahead step (TS_REC_SWAP, never with pending rows); a token-path
 * pass after a lazy rollback advances the snapshot buffer in place, which
 * then becomes the live one. chunked: the pass ran the chunked prefill. */
static inline void ts_gdn_parity_after(ts_step *s, int chunked) {
    if (chunked) return;
    if (s->record && !s->pend) { s->par_S ^= 1; s->par_conv ^= 1; }
    else if (s->pend && !s->record) s->par_S ^= 1;
}

/* A MoE FFN over rows [0, n): router product, softmax over E experts in
 * f32, top-k, optional renormalisation, the selected experts' SwiGLU
 * through the expert table, the shared expert with its sigmoid gate; the
 * sum into t [n, H].
 *
 * Routing first (expert streaming, model/xstream.c): moe_route runs the
 * router, softmax and top-k of rows [0, n) alone and writes each row's k
 * expert ids and their (not renormalised) probabilities to route_ids and
 * route_w, [n, topk] each, both host memory: the caller reads the ids back
 * (one wait for the whole pass) to fetch just those experts. A moe call with
 * route_ids set then skips the router and takes row i's experts from
 * route_ids + i * topk; it reads only those entries of e_gate/e_up/e_down, so
 * a caller that streams experts hands over a table whose other entries are
 * empty. Why a table rather than slots in the contract: the backend keeps
 * seeing plain ts_weight views (data, or a prepared copy in `packed`),
 * whatever memory holds them, and never learns about files or a cache.
 * The split changes no bit: the same per-row routing code runs either way. */
typedef struct ts_moe_args {
    const ts_weight *router;            /* [E, H] */
    const ts_weight *e_gate, *e_up, *e_down; /* E entries */
    const ts_weight *s_gate, *s_up, *s_down, *s_gate_w;
    const float *u;                     /* [n, H] */
    float *t;                           /* [n, H] */
    float *logits;                      /* [n, E] scratch */
    float *acc;                         /* [2H] scratch */
    float *b0, *b1, *b2;                /* [R, >= 2H], [R, F], [R, F] scratch */
    int R, F;                           /* rows of the scratch, its row length (max FFN) */
    int n, E, topk, norm_topk, H;
    int32_t *route_ids;                 /* [n, topk] host, or NULL: moe routes by itself */
    float *route_w;                     /* [n, topk] host: the routes' weights, in the backend's own
                                           form (moe_route writes them, moe reads them back; the
                                           CPU's are the probabilities before renormalisation) */
    /* The slot pool (expert streaming on a device backend): route i's
     * expert sits in slot route_slots[i] ([n, topk] host) of an evenly
     * spaced pool whose slot 0 holds the views pool_w[0..3) (gate, up,
     * down; `packed` is where each starts) and whose slots are pool_stride
     * bytes apart. A device's kernels index the pool by slot as they index
     * resident experts by id (one binding per layer, every slot in it), so
     * streamed experts run the resident kernels. NULL: not given (the CPU
     * reads the table). */
    const int32_t *route_slots;
    const ts_weight *pool_w;
    int64_t pool_stride;
    /* Rows of the whole pass when this call is one group of its rows
     * (expert streaming cuts a chunk whose experts do not fit the slots at
     * once), else 0 (= n). A backend whose prompt-chunk kernels round
     * differently from its row kernels picks the form by the pass, as
     * moe_route did, so a row's bits never depend on its group. */
    int pass_n;
} ts_moe_args;

/* Arguments of topn: sampling candidates without reading the row back.
 *
 * Per row, every entry x_i (i < K) becomes the value the sampler
 * (gen/sample.c) draws from, with the same float operations:
 *   x = x_i, and for a listed id (pen_ids[j] == i):
 *       x = rep != 1 ? (x > 0 ? x / rep : x * rep) : x;  x = x - pen_sub[j];
 *   v_i = x * scale                      (scale: 1/temperature, or 1)
 * An entry is valid when v_i > -inf (NaN and -inf never are). Outputs, per
 * row r (host memory):
 *   vals[r*N + j], ids[r*N + j], j < N: the N first valid entries in the
 *       sampler's order (larger v first, then lower id), -0 reported as +0;
 *       slots past the valid count hold -inf and id -1;
 *   n_valid[r]: the count of valid entries of the row;
 *   sum_exp[r]: the sum over all valid entries of expf(v_i - vals[r*N])
 *       (0 when there is none or vals[r*N] is +inf), in double.
 * vals, ids and n_valid are exact on every backend. sum_exp is the CPU's
 * sum in index order (the full-row sampler's own z); a device sums in its
 * own order with its own expf, so its sum is within a relative 1e-6 of that
 * (CUDA's expf is within 2 ulp): the candidate sampler allows for that and
 * falls back to the row when a decision is closer than that.
 * The same penalty list applies to every row; its ids are distinct, in
 * [0, K) and ascending (the CPU walks the row and the list together). */
#define TS_TOPN_MAX 256      /* most candidates per row */
#define TS_TOPN_PEN_MAX 8192 /* most penalised ids (longer lists: read the row) */
typedef struct ts_topn_args {
    int N;                   /* 1..TS_TOPN_MAX */
    float scale;
    float rep;               /* repetition penalty, 1: off */
    int n_pen;               /* 0..TS_TOPN_PEN_MAX */
    const int32_t *pen_ids;  /* [n_pen] host, ascending */
    const float *pen_sub;    /* [n_pen] host: presence + frequency * count */
    float *vals;             /* [n, N] host out */
    int32_t *ids;            /* [n, N] host out */
    int32_t *n_valid;        /* [n] host out */
    double *sum_exp;         /* [n] host out */
} ts_topn_args;

/* The reference topn on host rows ([rows] rows of K floats, ld apart): the
 * CPU backend's topn op, and what the engine runs on logits it already holds
 * on the host (ts_session_score: a chunk's rows read back by the feed). */
void ts_topn_host(const float *x, int64_t rows, int64_t ld, int K, const ts_topn_args *a);

#define TS_LINEAR_MANY_MAX 32
/* The chunked prefill's scratch geometry (the session allocates pf_chunk
 * for the backend from these; the plan counts it). */
#define TS_DELTA_CHUNK 64 /* rows per chunk of the chunked delta rule (prefill) */
#define TS_DELTA_SLOTS 16 /* most work items (workspaces) of the chunked delta rule: min(Hv, this) */
/* floats of one work item's workspace for chunks of L rows (cpu/prefill.c) */
size_t ts_delta_chunk_ws(int L, int dk, int dv);

/* One byte run of ts_backend_ops.slot_copy. */
typedef struct ts_copy_run {
    uint64_t src, dst, bytes;
} ts_copy_run;
enum { TS_COPY_D2H = 0, TS_COPY_H2D = 1, TS_COPY_D2D = 2 };

struct ts_backend_ops {
    /* memory (the domain is the backend's); zeroed */
    void *(*alloc)(ts_backend *be, size_t bytes, ts_mem_cat cat);
    void (*free)(ts_backend *be, void *p);
    void (*write)(ts_stream *s, ts_view dst, const void *host);
    void (*read)(ts_stream *s, void *host, ts_view src);
    void (*copy)(ts_stream *s, ts_view dst, ts_view src);
    void (*fill)(ts_stream *s, ts_view dst, float v);
    /* Host-readable rows of v: v's own memory when the host can read it
     * (CPU), else a copy in the stream's staging (valid until the next
     * call). Sampling reads logits rows through it, explicitly. */
    const float *(*host_rows)(ts_stream *s, ts_view v);
    int (*sync)(ts_stream *s);

    /* streams: one per session; rows/cols/group size the workspace */
    int (*stream_new)(ts_backend *be, int rows, int64_t cols, int group, ts_stream **out);
    void (*stream_free)(ts_stream *s);
    /* the workspace bytes a stream of those sizes reserves (the plan) */
    size_t (*workspace_bytes)(ts_backend *be, int rows, int64_t cols, int group);
    /* Enter/leave the backend on the calling thread (CPU: denormals flushed,
     * the engine's kernel mode); API entry points wrap their work in it. */
    unsigned (*enter)(ts_stream *s);
    void (*leave)(ts_stream *s, unsigned old);

    /* weights, once at load: bytes of the prepared copy (0: read in place),
     * and the preparation into dst (that many bytes) */
    size_t (*weight_bytes)(ts_backend *be, const ts_weight *w);
    void (*weight_prepare)(ts_backend *be, ts_weight *w, void *dst);
    /* the same preparation on the calling thread alone, callable from any
     * thread, several at once (expert streaming prepares on its I/O
     * threads, into its host slots); NULL: weight_prepare is used, one at a
     * time. Returns 0, or an errno-like code that fails the read. Host
     * memory only: a device backend's slots are filled by slot_copy. */
    int (*weight_prepare_1)(ts_backend *be, ts_weight *w, void *dst);

    /* compute; rows in x, row-exact under TS_MODE_EXACT */
    /* y[i] = x . w[i]^T for nw weights with the same cols (one region) */
    void (*linear)(ts_stream *s, ts_mode m, const ts_weight *const *w, int nw, const float *x, float *const *y, int n);
    /* x row i (ld ldx) = embedding row ids[i] (ids: device or host-visible) */
    void (*embed)(ts_stream *s, ts_mode m, const ts_weight *w, const int32_t *ids, float *x, size_t ldx, int n);
    /* rows i < n: x_i += add_i (add may be NULL); then (w not NULL)
     * y_i = x_i * rsqrt(mean(x_i^2) + eps) * w; ld* in floats */
    void (*norm)(ts_stream *s, ts_mode m, float *x, size_t ldx, const float *add, const float *w, float *y, size_t ldy,
                 int n, int dim, float eps);
    /* g = silu(g) * u over N elements */
    void (*swiglu)(ts_stream *s, ts_mode m, float *g, const float *u, size_t N);
    void (*attn)(ts_stream *s, ts_mode m, const ts_attn_args *a);
    void (*gdn)(ts_stream *s, ts_mode m, const ts_gdn_args *a);
    /* a lazy rollback's pending rows (step.pend) applied to the live state */
    void (*gdn_materialize)(ts_stream *s, const ts_gdn_args *a);
    void (*moe)(ts_stream *s, ts_mode m, const ts_moe_args *a);
    /* routing only, into a->route_ids / a->route_w (see ts_moe_args), read
     * back to the host; NULL: the backend cannot stream experts */
    void (*moe_route)(ts_stream *s, ts_mode m, const ts_moe_args *a);
    /* For n rows of logits (K of the row's cols considered): ids[i] = the
     * first index of the row's largest value (NaN never wins), read back to
     * the host; prob (if not NULL) = 1 / sum_k e^(x_k - x_max), the
     * winner's softmax probability. */
    void (*argmax)(ts_stream *s, ts_view logits, int K, int32_t *ids, float *prob);
    /* The N best candidates of each of n rows of logits (K of the row's
     * cols considered) after the sampler's penalties and temperature (see
     * ts_topn_args), read back to the host: a sampled step copies back a few
     * KB instead of the row. NULL: not supported (callers read the row). */
    void (*topn)(ts_stream *s, ts_view logits, int K, const ts_topn_args *a);

    /* graph capture (NULL: not supported; callers then just run the ops) */
    int (*graph_begin)(ts_stream *s, uint32_t key);
    int (*graph_end)(ts_stream *s, uint32_t key);
    int (*graph_launch)(ts_stream *s, uint32_t key);

    /* Pin (pin = 1) or unpin (0) host memory the backend copies from (the
     * expert cache's staging), so its copies need no driver staging; 0 or
     * an error code. NULL: nothing to do (the CPU). */
    int (*host_pin)(ts_backend *be, void *p, size_t bytes, int pin);

    /* Device slots for streamed weights (expert streaming on a device
     * backend; NULL on the CPU). Both are about bytes, not models:
     * weight_parts says where weight_prepare puts w's parts in its prepared
     * copy, when preparing is only placing them: 1 and off[0] = the data's
     * offset, off[1] / off[2] = the scales' / biases' (quantized weights),
     * or 0 when preparing transforms the bytes (then slots cannot be
     * filled by copies). slot_copy runs n byte copies between host memory
     * and device memory, runs[i] = (offset in src, offset in dst, bytes),
     * in direction dir (TS_COPY_H2D, _D2H, _D2D); callable from
     * any thread, several at once (the expert cache's I/O threads), each on
     * its own stream, waiting for none of the sessions' work; returns 0
     * once every byte has arrived, or an errno-like code. Why copies and not
     * a per-weight upload: a streamed expert whose file bytes are laid out
     * as its prepared copy (every install this engine writes) moves in one
     * copy, and can move back (a device slot's victim saved to the host
     * tier: model/xstream.c) the same way. */
    int (*weight_parts)(ts_backend *be, const ts_weight *w, uint64_t off[3]);
    int (*slot_copy)(ts_backend *be, void *dst, const void *src, const ts_copy_run *runs, int n, int dir);
    /* The same runs enqueued on stream s, in order with its ops, returning
     * at once: the host side must stay as it is until s is synchronized
     * (a failure is the stream's sticky error). Expert streaming issues a
     * layer's copies from host-resident experts this way, so the MoE
     * kernels that follow on s see them without any wait of the host's. */
    void (*stream_copy)(ts_stream *s, void *dst, const void *src, const ts_copy_run *runs, int n, int dir);

    /* Run-ahead decoding (gen/generate.c; NULL: not supported).
     * argmax_ahead queues the argmax of one row of logits (K of its cols;
     * argmax's rule) into the stream's id slot t, whose address it returns
     * (backend memory: embed takes it as the next pass's ids, so the id
     * never visits the host between two steps), and a copy of it into host
     * ticket t (0..TS_AHEAD_TICKETS-1); it returns at once. ahead_read waits
     * for ticket t's copy and returns the id in *id (0, or the stream's
     * error). A device backend's host then queues step n + 1 before it
     * reads step n's id; the CPU computes at the call (the reference).
     * A run-ahead pass (ts_state.ahead_on) embeds that id and ends with its
     * argmax_ahead inside its graph: its embed may run inside a capture
     * (the backend stages the step record at each launch of that graph).
     * At most TS_AHEAD_TICKETS passes that embed such ids are queued beyond
     * the last ticket read (generate.c's loop: one; an MTP draft chain: its
     * drafts). */
    const int32_t *(*argmax_ahead)(ts_stream *s, ts_view logits, int K, int t);
    int (*ahead_read)(ts_stream *s, int t, int32_t *id);
};
#define TS_AHEAD_TICKETS 16 /* a power of two; at most this many passes queued beyond the last ticket read */

/* ---- collectives (tensor parallelism: model/tp.h) ----
 * Over the ranks of one process, one stream each. Every rank calls each one
 * in the same order (the forward's structure is the same on every rank); a
 * failure is the calling stream's sticky error. Implementations: through
 * host memory (model/tp.c: any backend, not capturable) and NCCL (CUDA:
 * ts_cuda_comm_nccl). */
#define TS_TP_MAX 8 /* ranks of one process (engine/shard.h's TS_SHARD_MAX_GPUS) */
typedef struct ts_comm ts_comm;
struct ts_comm {
    int n;
    const char *name;   /* "host", "nccl" */
    int capturable;     /* 1: the calls can sit inside a captured graph */
    /* x [count] (backend memory of the rank's stream) := the sum over ranks
     * in rank order (x_0 + x_1 + ... elementwise, in f32), identical on
     * every rank, each element's bits independent of count (row-exact) */
    void (*allreduce)(ts_comm *c, int rank, ts_stream *s, float *x, size_t count);
    /* each rank's block src [rows, cols[rank]] (contiguous) lands in rank
     * 0's dst at columns [lo[q], lo[q] + cols[q]) of rows ld_dst apart
     * (lo, cols: every rank's, the same arrays on every rank; dst: rank
     * 0's, ignored elsewhere) */
    void (*gather_cols)(ts_comm *c, int rank, ts_stream *s, const float *src, int64_t rows, const int64_t *lo,
                        const int64_t *cols, float *dst, int64_t ld_dst);
    /* room for passes of up to `rows` rows of width H and a head of V
     * columns (a device comm's buffers; called at session creation, before
     * any capture); 0 or an error code. NULL: nothing to reserve. */
    int (*reserve)(ts_comm *c, int rows, int64_t H, int64_t V);
    /* Stop: collectives waiting now return, and every later one fails at
     * once, as the calling stream's error (the watchdog of a pass calls it
     * from its own thread when a rank has not arrived in time). */
    void (*abort)(ts_comm *c);
    void (*destroy)(ts_comm *c);
    void *impl;
};

/* ---- the backends ---- */
typedef struct ts_backend_params {
    int n_threads;        /* 0 = all cores */
    const char *kernels;  /* CPU kernel mode name (NULL: TS_KERNELS / the process default) */
    int device;           /* CUDA: the device index */
    int plan_only;        /* CUDA: sizes only (the memory plan): no device is opened, nothing runs */
    int progress;         /* CUDA: weight upload progress on stderr */
} ts_backend_params;
int ts_cpu_backend_new(const ts_backend_params *p, ts_backend **out, ts_error *err);
/* The CUDA backend (src/cuda/backend.cu; src/cuda/stub.c without CUDA:
 * "built without CUDA"). Errors: no device, bad index, unsupported
 * architecture, with the driver's words. */
int ts_cuda_backend_new(const ts_backend_params *p, ts_backend **out, ts_error *err);
/* 1 in a CUDA build (make CUDA=1), else 0. */
int ts_cuda_built(void);
/* The first weight the CUDA products cannot read (a layout tsc_weight_check
 * refuses), found while sizing or preparing: 0 or TS_E_UNSUPPORTED naming it. */
int ts_cuda_backend_check(ts_backend *be, ts_error *err);
/* The model shapes the CUDA ops take (a sentence naming the first one they
 * do not, TS_E_UNSUPPORTED): attention heads (D % 32 == 0, D <= 256, nq a
 * multiple of nkv, nq/nkv <= 16, rot even and <= D), GDN heads (dk <= 128,
 * dv <= 1024, K <= 8, Hv a multiple of Hk), MoE (E <= 1024, topk <= 32;
 * E = 0: dense). Checked at open, before anything is uploaded. */
int ts_cuda_backend_shapes(ts_backend *be, int D, int nq, int nkv, int rot, int dk, int dv, int K, int Hk, int Hv,
                           int E, int topk, ts_error *err);
/* NCCL collectives over the CUDA backends be[0..n), one device each
 * (loaded at run time: libnccl.so.2, or $TS_NCCL_LIB): NULL and an error
 * naming what is missing when NCCL cannot be loaded or refuses the devices
 * (NCCL allows one rank a device). NCCL_NVLS_ENABLE=0 is set first (no
 * NVLink multicast). */
int ts_cuda_comm_nccl(ts_backend *const *be, int n, ts_comm **out, ts_error *err);
/* Device name, device memory: ours (the counted allocations), free and
 * total as the driver reports them now. */
int ts_cuda_backend_info(ts_backend *be, char *name, size_t cap, size_t *ours, size_t *free_b, size_t *total_b);
/* The device-copy bandwidth probe: GB/s of a device-to-device copy of
 * `bytes` (read + written counted), best of a few; < 0 on error. */
double ts_cuda_copy_probe(ts_backend *be, size_t bytes);
/* Graph statistics of a stream: graphs captured, replays, kernels in the
 * last captured graph (0 when it has none), mean host microseconds of a
 * replay's launch call. */
void ts_cuda_stream_stats(ts_stream *s, int *graphs, long *replays, int *kernels, double *launch_us);
static inline void ts_backend_free(ts_backend *be) {
    if (be) be->destroy(be);
}

/* ---- thin helpers (no work of their own) ---- */
static inline void ts_be_fail(ts_stream *s, int code, const char *what) {
    if (!s->err) {
        s->err = code;
        snprintf(s->msg, sizeof s->msg, "%s", what);
    }
}
/* The first error since the last sync (0 if none), into err. */
static inline int ts_be_sync(ts_stream *s, ts_error *err) {
    int rc = s->be->ops->sync(s);
    if (rc && err) ts_fail(err, rc, "backend %s: %s", s->be->name, s->msg);
    return rc;
}
static inline void ts_be_copy(ts_stream *s, float *dst, const float *src, size_t n) {
    s->be->ops->copy(s, tv_f32(dst, 1, (int64_t)n), tv_f32((float *)src, 1, (int64_t)n));
}
static inline void ts_be_fill(ts_stream *s, float *dst, size_t n, float v) {
    s->be->ops->fill(s, tv_f32(dst, 1, (int64_t)n), v);
}
static inline void ts_be_read(ts_stream *s, void *host, const float *src, size_t n) {
    s->be->ops->read(s, host, tv_f32((float *)src, 1, (int64_t)n));
}
static inline const float *ts_be_host(ts_stream *s, const float *src, size_t n) {
    return s->be->ops->host_rows(s, tv_f32((float *)src, 1, (int64_t)n));
}

#endif
