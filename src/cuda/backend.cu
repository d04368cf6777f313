/* backend.cu: the CUDA backend behind the contract (src/backend.h), on the
 * kernels of tsc.h.
 *
 * Owns: the backend object of one engine (a tsc context for its weights and
 * the session buffers it allocates, the device index, the counted
 * allocations by category), the streams (one tsc context, hence one CUDA
 * stream, per session: its workspace, the device copy of the step record,
 * its captured graphs), the weights' device layout (weight_bytes /
 * weight_prepare), and the few kernels the contract needs beyond tsc.h:
 * strided fills and adds, the routed experts' products through device-side
 * expert ids, the MoE combine, the argmax winner's probability.
 * Does not own: the product, GDN, attention, norm and routing kernels
 * (linear.cu, gdn.cu, attn.cu, misc.cu), the model.
 *
 * Memory: every device byte goes through tsc_alloc and is counted in the
 * process's counters (ts_mem_account, domain device) with its category, so
 * `turbospark plan --backend cuda` and the allocator agree. Weights are one
 * arena (load.c allocates it through alloc: the plan's size), the f32
 * vectors one allocation each. The host staging of host_rows (the logits row
 * the sampler reads) is pinned memory, grown on first use to the largest
 * read and counted in the pinned domain: it is the one buffer the plan does
 * not predict (its size is the caller's request, not a plan input).
 *
 * Weights' layout on the device: the MLX layout the products read (data,
 * then scales, then biases, each 256-byte aligned, in one slot of the arena);
 * a host map from a slot's address to its tsc_weight descriptor (control
 * blocks, outside the plan as the CPU backend's are). A relayout for faster
 * products changes place() and the expert kernels here together.
 *
 * Per-token values: the step record (ts_step) and the pass's token ids are
 * copied to the stream's device block by embed, the first op of every pass
 * and the one op a graph never contains; attention reads the position from
 * there, the GDN layers their buffers and pending rows, so a graph captured
 * once per (kind, rows) replays at every position.
 *
 * Rows: the row ops of tsc.h take 1..16 rows, each row exact. Verify
 * blocks stay on them; prompt chunks of more than 16 rows (TS_MODE_PREFILL)
 * take kernels that round differently: products and attention through
 * cuBLAS when the stream has its workspace (blas.cu; blas_ws_of), else
 * q4gemm.cu's tensor-core products and attn.cu's flash kernel; the chunk
 * GDN (gdn.cu, tsc_gdn_prefill); a chunk MoE over a route list (moe_chunk,
 * whose products stay row-invariant: see chunk_linear).
 *
 * Speculative decoding (MTP drafts): a verify is a pass of M+1 rows through
 * the same row-exact ops; attention appends all its K/V rows (a rollback
 * only moves the position back); GDN layers keep the block-start state as
 * the snapshot by a parity flip and tape the rows' inputs on the device, and
 * a lazy rollback's rows are replayed from the tape by the decode kernels
 * (the GDN section below). Verify passes, the replay of a lazy rollback's
 * rows and the MTP head's passes are captured like decode (qwen35.c keys
 * them): the GDN buffers and the pending count they use are read from the
 * device record, never chosen on the host (gdn_sel_of).
 * DFlash drafts: the drafter's layers run through the same ops, its
 * block-masked attention through the attention kernels (attn_block); the
 * target's taps are device copies (the copy op), and the drafted block is
 * verified as MTP drafts are.
 * Sampling: argmax runs on the device (4 bytes come back); a sampled step
 * asks topn (sample.cu) for its candidates (16 + 8N bytes) and reads the row
 * through host_rows only when they do not decide the token (gen/sample.c
 * says when); speculative sampling's acceptance still reads whole rows.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/q4dp.cuh"

extern "C" {
#include "backend.h"
}

namespace {

constexpr int RB = TSC_ROWS_MAX; /* rows per block of the row ops */
constexpr int TOPK_MAX = 32;
/* Floats of a stream's own area for attention partials (cu_attn).
 * A constant, not a multiple of the stream's columns (4 * cols until the
 * DFlash drafter ran here): the area takes part in choosing the split, which
 * sets a row's rounding, and a DFlash session's stream is wider than a plain
 * session's (the drafter's fc reads n_taps * H columns), so with a width-
 * sized area the target's attention of a drafting session split otherwise
 * than plain decode's and drafted greedy output could leave plain greedy's.
 * At least the 4 * cols of every released shape (the 9B's 49152), so no
 * split a plain session chose got coarser.
 * 1M floats (4 MiB), from 64K in session 19: the area bounds the number of
 * pieces (np * nq * (D + 2) floats), and 64K floats left the 9B 15 pieces
 * of a head at most (9 of 64 keys at 512 tokens, 15 of 288 at 4096: 36 and
 * 60 blocks on 132 SMs, each piece's sub-chunks in sequence; ncu had put the
 * split kernel at 72 us at 4096); 1M lets the 9B split in pieces of 32 keys
 * up to 8K tokens of context and ~200 pieces beyond. With 64K, every session
 * of 4096 tokens or more took pieces of 288 keys (the contract's score buffer
 * allows no finer), so a 9B in run's default --ctx 4096 decoded at 400 tok/s
 * against 476 now (H200, s19-run7: bench --ctx 4096; 4096-token prompts
 * 399 -> 434). TSC_ATT_SMALL=floats overrides it (a benchmark switch, read
 * once, so every stream of a process has the same area: see above). */
size_t att_small_floats() {
    static size_t v = 0;
    if (!v) {
        const char *e = getenv("TSC_ATT_SMALL");
        const long long x = e && *e ? atoll(e) : 0;
        v = x >= 4096 && x <= (1LL << 28) ? (size_t)x : (size_t)1 << 20;
    }
    return v;
}

/* ---- the weight map: slot address -> descriptor ---- */

struct wmap {
    const void **key;
    tsc_weight *val;
    size_t cap, n;
};

size_t hptr(const void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 8) * 0x9e3779b97f4a7c15ull) & (cap - 1); }

int wmap_put(wmap *m, const void *k, const tsc_weight *v) {
    if (2 * (m->n + 1) > m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 1024;
        const void **nk = (const void **)calloc(nc, sizeof *nk);
        tsc_weight *nv = (tsc_weight *)calloc(nc, sizeof *nv);
        if (!nk || !nv) { free(nk); free(nv); return -1; }
        for (size_t i = 0; i < m->cap; i++)
            if (m->key[i]) {
                size_t j = hptr(m->key[i], nc);
                while (nk[j]) j = (j + 1) & (nc - 1);
                nk[j] = m->key[i];
                nv[j] = m->val[i];
            }
        free(m->key);
        free(m->val);
        m->key = nk, m->val = nv, m->cap = nc;
    }
    size_t j = hptr(k, m->cap);
    while (m->key[j] && m->key[j] != k) j = (j + 1) & (m->cap - 1);
    if (!m->key[j]) m->n++;
    m->key[j] = k;
    m->val[j] = *v;
    return 0;
}

const tsc_weight *wmap_get(const wmap *m, const void *k) {
    if (!m->cap || !k) return NULL;
    size_t j = hptr(k, m->cap);
    while (m->key[j]) {
        if (m->key[j] == k) return &m->val[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

/* ---- backend and stream objects ---- */

struct ablk {
    void *p;
    size_t bytes;
    int cat;
    ablk *next;
};

struct cu_be {
    ts_backend base;
    tsc_ctx *c; /* NULL for a plan-only backend */
    int device, progress;
    ablk *blocks;
    wmap wm;
    size_t uploaded, next_report;
    int bad;          /* a weight the products cannot read */
    char bad_msg[512];
};

struct dev_step;
struct gent {
    uint32_t key;
    tsc_graph *g;
    int kernels;
    int ahead_t; /* the run-ahead ticket whose copy the graph holds (cu_argmax_ahead), -1: none */
    dev_step *rec; /* the pinned step record its embedding copies (a run-ahead graph), NULL: none */
};

/* graphs per stream: the token path's keys (decode, verify M+1 and the
 * shorter blocks at a context or token limit, each with and without a
 * lazy rollback pending) and the MTP head's (catch-up over 1..M+1 rows, a
 * draft step per row the chain starts from): about 4M + 6 at most for one
 * draft length, 38 at M = 8. Past the table, passes run uncaptured. */
constexpr int GMAXN = 64;

/* The device block of a stream: the step record, the GDN buffer choice
 * derived from it (gdn_sel_of) and the pass's ids, then the small scratch
 * of the ops (routing, argmax, attention partials of short contexts). */
struct dev_step {
    ts_step step;
    int32_t gsel[8]; /* [pending run, own rows] x (conv src, conv dst, S src, S dst): pair indices */
    int32_t ids[1];  /* [rows] */
};
constexpr size_t DSTEP_HEAD = offsetof(dev_step, ids); /* bytes before the ids */
/* run-ahead's pinned block (ahead_init, with the stream): the tickets, then
 * a ring of step records for the run-ahead passes */
constexpr int AHEAD_RECS = 2 * TS_AHEAD_TICKETS;
/* and one record for each captured run-ahead graph (its embedding's copy
 * reads it; cu_graph_launch writes it): two a session's loop, and their
 * variants with a drafter's taps */
constexpr int AHEAD_CAP = 8;
constexpr size_t AHEAD_PINNED = sizeof(int32_t) * TS_AHEAD_TICKETS + sizeof(dev_step) * (AHEAD_RECS + AHEAD_CAP);

/* A norm or SwiGLU the stream has not launched yet: the next product
 * reading its output stages it instead (one kernel instead of two), any
 * other op first launches it as it is (flush). */
enum { PEND_NONE, PEND_NORM, PEND_SWIGLU, PEND_ADD };
struct pend_act {
    int kind;
    float *x, *y;            /* norm: x (+= add), y = RMSNorm(x) * w; swiglu: x = g, in place; add: x += add */
    const float *add, *w, *u;
    int n, dim;
    float eps;
    size_t N; /* swiglu elements */
};

struct cu_stream {
    ts_stream base;
    tsc_ctx *c;
    void *ws;
    size_t ws_bytes;
    int rows;
    int64_t cols;
    dev_step *dstep; /* device */
    int32_t *r_ids;  /* [RB * TOPK_MAX] routed expert ids */
    float *r_wts;    /* [RB * TOPK_MAX] */
    float *gl;       /* [RB] shared expert gate logits */
    void *amx_ws;    /* tsc_argmax_ws_bytes(RB) */
    int32_t *amx_ids; /* [RB] */
    float *amx_prob; /* [RB] */
    float *att_small; /* [att_small_floats()] attention partials when the score buffer is too small */
    size_t att_small_n;
    float *att_multi; /* [RB * att_small_floats()] the partials of a verify's rows at once (NULL: one row a call) */
    size_t att_multi_n;
    dev_step *hstep; /* host copy of the block (step + ids), pageable */
    float *stage;    /* pinned host staging of host_rows */
    size_t stage_bytes;
    /* run-ahead (cu_argmax_ahead): the tickets' pinned host ids and the
     * events their copies record, made with the stream (an argmax_ahead may
     * run inside a capture, where nothing may be allocated), counted as
     * pinned scratch (outside the plan, as stage is: a few hundred bytes) */
    int32_t *ahead_h, *ahead_d; /* the block (host address, mapped: its device address) */
    cudaEvent_t ahead_ev[TS_AHEAD_TICKETS];
    dev_step *ahead_rec; /* [AHEAD_RECS] pinned step records of the run-ahead passes (cu_embed) */
    int ahead_rec_i;
    int cap_ahead_t; /* the ticket an argmax_ahead inside the capture copies to, -1: none */
    dev_step *cap_rec; /* the record an embedding inside the capture copies from, NULL: none */
    int n_cap_rec;     /* captured records handed out (of AHEAD_CAP) */
    uint8_t *topn_ws; /* topn's device scratch, for rows of up to topn_V (cu_topn) */
    size_t topn_bytes;
    int topn_V;
    gent graphs[GMAXN];
    int n_graphs;
    long replays;
    double launch_s; /* host seconds in the replays' launch calls */
    int last_kernels;
    int capturing;
    pend_act pend; /* a norm or SwiGLU not yet launched (see flush) */
    /* prompt chunks (streams of more than RB rows; NULL otherwise): the
     * tensor-core products' staging (gemm_bytes), a chunk MoE's routes and
     * its maps (maps_n ints): see layout_of */
    void *gemm_ws;
    size_t gemm_bytes;
    void *blas_ws; /* the cuBLAS products' workspace (blas_ws_of), NULL: none */
    size_t blas_bytes;
    void *wy_ws; /* the WY prompt GDN's records where there is no blas_ws (wy_ws_of), NULL: none */
    size_t wy_bytes;
    int32_t *route, *maps;
    size_t maps_n;
    double op_ms[8]; /* TSC_OPTIME=1: device time of the uncaptured ops by kind (op_timer) */
    long op_n[8];
};

bool ahead_init(ts_stream *s, cu_stream *q); /* run-ahead's pinned block and events (below) */
cudaError_t ahead_rec_in(cu_stream *q, dev_step *hs, size_t bytes);

/* The GDN buffers of a drafting session's token-path pass (cu_gdn's
 * table below), from its step record: gsel[0..4) for the pending rows of a
 * lazy rollback, gsel[4..8) for the pass's own rows, each (conv source,
 * conv destination, S source, S destination) as an index into the layer's
 * pair (0: ts_gdn_state's buffer, 1: the tape's). Computed on the host as
 * the record goes to the device (embed) and read by the kernels, so a
 * captured verify or rollback replays with the current pass's choice. */
void gdn_sel_of(const ts_step &st, int32_t *g) {
    const int32_t ps = st.par_S & 1, pc = st.par_conv & 1;
    const bool P = st.pend > 0;
    int32_t *pe = g, *ow = g + 4;
    if (!st.record) {
        /* pending: snap conv -> live conv, snap S in place; own rows in
         * place: conv live, S snap after a rollback (it becomes the live one
         * by the caller's flip of par_S), else live */
        pe[0] = pc ^ 1, pe[1] = pc, pe[2] = ps ^ 1, pe[3] = ps ^ 1;
        ow[0] = ow[1] = pc;
        ow[2] = ow[3] = P ? ps ^ 1 : ps;
    } else {
        /* pending: in place on snap (the new block start); own rows snap ->
         * live after a rollback (no flip), else live -> snap (the caller
         * flips both: the block start becomes the snapshot) */
        pe[0] = pe[1] = pc ^ 1;
        pe[2] = pe[3] = ps ^ 1;
        ow[0] = P ? pc ^ 1 : pc, ow[1] = ow[0] ^ 1;
        ow[2] = P ? ps ^ 1 : ps, ow[3] = ow[2] ^ 1;
    }
}

struct ws_layout {
    size_t step, rids, rwts, gl, dg, amx_ws, amx_ids, amx_prob, att_small, att_multi, gemm, route, maps, wy, blas, total;
};

/* A chunk MoE's row tiles of one slot at most (a partial tile per expert
 * plus rows / 64 full ones, bounded by rows + rows / 64 + 2 whatever E),
 * and the ints of its maps area: per slot the rows in expert order and the
 * tiles (moe_chunk; the merged form's need is checked against it). */
size_t tiles_slot_of(int rows) { return (size_t)rows + (size_t)rows / 64 + 2; }
size_t maps_ints_of(int rows) { return TOPK_MAX * ((size_t)rows + 4 * tiles_slot_of(rows)) + 64; }

/* The cuBLAS products' workspace of a prompt-chunk stream (blas.cu: x as
 * bf16, the dequantized pieces, cuBLAS's own 32 MiB): only when cuBLAS was
 * found here and TSC_BLAS is not 0 when the stream is made (or planned: the
 * plan and the engine run on the same host). TSC_BLAS_MB sets the pieces'
 * scratch (default 128 MiB: 16,384 rows of 4,096 columns, enough rows for
 * cuBLAS to fill the GPU with one product). */
bool env_is0(const char *name);
size_t blas_ws_of(int rows, int64_t cols) {
    if (rows <= RB || env_is0("TSC_BLAS") || !tsc_blas_ready()) return 0;
    const char *e = getenv("TSC_BLAS_MB");
    const long mb = e && atol(e) > 0 ? atol(e) : 128;
    return al256(tsc_blas_ws_bytes(rows, cols, (size_t)mb << 20));
}

/* The WY prompt GDN's records (gdn.cu, tsc_gdn_prefill's wy) live in the
 * cuBLAS workspace, free between the products that use it; a stream
 * without one (no libcublas on this host, or TSC_BLAS=0) gets a scratch of
 * their own, so that it keeps the WY form instead of the row scan:
 * TSC_WY_MB (default 32 MiB: 12 chunks of 64 rows of the 9B's 32 heads, a
 * prompt chunk in segments of 768 rows) when the form is on. Read when the
 * stream is made or planned, as TSC_BLAS is. */
bool gdn_wy_on();
size_t wy_ws_of(int rows, int64_t cols) {
    if (rows <= RB || !gdn_wy_on() || blas_ws_of(rows, cols)) return 0;
    const char *e = getenv("TSC_WY_MB");
    const long mb = e && atol(e) > 0 ? atol(e) : 32;
    return al256((size_t)mb << 20);
}

ws_layout layout_of(int rows, int64_t cols) {
    ws_layout l;
    size_t o = 0;
    l.step = o, o += al256(DSTEP_HEAD + sizeof(int32_t) * (size_t)(rows > 0 ? rows : 1));
    l.rids = o, o += al256(sizeof(int32_t) * RB * TOPK_MAX);
    l.rwts = o, o += al256(sizeof(float) * RB * TOPK_MAX);
    l.gl = o, o += al256(sizeof(float) * RB + sizeof(unsigned)); /* + the fused products' counter (tsc_set_barrier) */
    l.dg = o, o += al256(tsc_digits_ws_bytes()); /* the products' staged digits (tsc_set_digits) */
    l.amx_ws = o, o += al256(tsc_argmax_ws_bytes(RB));
    l.amx_ids = o, o += al256(sizeof(int32_t) * RB);
    l.amx_prob = o, o += al256(sizeof(float) * RB);
    l.att_small = o, o += al256(sizeof(float) * att_small_floats());
    /* a verify's rows attend in one launch pair when their partials fit
     * here (cu_attn): RB rows of the small area's size, streams of several
     * rows only */
    l.att_multi = o, o += rows > 1 ? al256(sizeof(float) * att_small_floats() * RB) : 0;
    /* the prompt chunks' tensor-core products stage x as bf16 (q4gemm.cu):
     * only streams whose rows exceed what the row kernels take */
    l.gemm = o, o += rows > RB ? al256(tsc_gemm_ws_bytes(rows + 64, cols)) : 0;
    /* and a chunk's MoE (moe_chunk): its routes (ids, weights, the shared
     * expert's gate logit) and its maps */
    l.route = o, o += rows > RB ? al256(sizeof(int32_t) * (size_t)rows * (2 * TOPK_MAX + 1)) : 0;
    l.maps = o, o += rows > RB ? al256(sizeof(int32_t) * maps_ints_of(rows)) : 0;
    l.wy = o, o += wy_ws_of(rows, cols);
    l.blas = o, o += blas_ws_of(rows, cols);
    l.total = o;
    return l;
}

inline cu_be *BE(ts_backend *b) { return (cu_be *)b; }
inline cu_stream *ST(ts_stream *s) { return (cu_stream *)s; }

/* Where a pass's device time goes (TSC_OPTIME=1, read once): each op of an
 * uncaptured pass is bracketed by two events and waited for, and its time
 * added to its kind; cu_stream_free prints the table to stderr. A
 * measuring aid for the prompt chunks (it serializes the host with the
 * device: never on by default, never inside a capture). A pending norm or
 * SwiGLU launched by an op's flush counts as that op's. */
enum { OPT_LINEAR, OPT_GDN, OPT_ATTN, OPT_MOE, OPT_EMBED, OPT_NORM, OPT_HEADSEL, OPT_GRAPH, OPT_N };
const char *const OPT_NAME[OPT_N] = {"products", "gdn", "attention", "moe", "embed", "norm/swiglu", "argmax/topn",
                                     "graph replays"};
bool optime_on() {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TSC_OPTIME");
        on = e && e[0] == '1';
    }
    return on;
}
struct op_timer {
    cu_stream *q;
    int kind;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    op_timer(ts_stream *s, int k) : q(ST(s)), kind(k) {
        if (!optime_on() || q->capturing || q->c->capturing) { q = nullptr; return; }
        cudaEventCreate(&e0), cudaEventCreate(&e1);
        cudaEventRecord(e0, q->c->stream);
    }
    ~op_timer() {
        if (!q) return;
        cudaEventRecord(e1, q->c->stream);
        float ms = 0.f;
        if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
            q->op_ms[kind] += ms, q->op_n[kind]++;
        cudaEventDestroy(e0), cudaEventDestroy(e1);
    }
};

/* The stream's sticky errors: the contract's (ours) or the context's. */
inline bool dead(ts_stream *s) { return s->err || tsc_error(ST(s)->c); }

/* tsc_sync's error, message too, as the stream's (a first error stays):
 * cu_sync's, and that of a call that returns the context's recorded error
 * without a sync (tsc_sync then returns at once), since its caller reports
 * the stream's message (session.c). (Session 48: the trace build's bench
 * failed in a graph replay with "backend cuda: " and nothing after it.) */
static int sync_into(ts_stream *s) {
    ts_error e;
    const int rc = tsc_sync(ST(s)->c, &e);
    if (rc && !s->err) {
        s->err = rc;
        snprintf(s->msg, sizeof s->msg, "%.250s", e.msg);
    }
    return rc;
}

void fail(ts_stream *s, int code, const char *msg) { ts_be_fail(s, code, msg); }

/* The routed experts through q4dp.cu's dp4a products (TSC_MOE_DP4A=0: the
 * per-output f32 kernels below, a benchmark switch) */
bool moe_dp4a_on() {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TSC_MOE_DP4A");
        on = !(e && e[0] == '0');
    }
    return on;
}

/* A switch of the environment set to 0 (read at every call: a test or a
 * benchmark may flip it between passes). */
bool env_is0(const char *name) {
    const char *e = getenv(name);
    return e && e[0] == '0';
}
/* and an opt-in one set to 1 */
bool env_is1(const char *name) {
    const char *e = getenv(name);
    return e && e[0] == '1';
}

/* Prompt chunks of more than RB rows through the tensor-core products
 * (q4gemm.cu; TSC_GEMM=0: the row kernels, RB rows a launch, for
 * comparison). Read at every product: a test or a benchmark may flip it. */
bool gemm_on() { return !env_is0("TSC_GEMM"); }

/* A prompt chunk's cuBLAS path is open: the stream has its workspace,
 * TSC_GEMM (the row kernels for every chunk product) and TSC_BLAS (our own
 * kernels instead) are not 0, read at every op so a test or a benchmark may
 * flip them, and the context has its cuBLAS handle. */
bool blas_on(cu_stream *q) { return q->blas_ws && gemm_on() && !env_is0("TSC_BLAS") && tsc_blas_usable(q->c); }

/* A prompt chunk's product through cuBLAS (blas.cu) when blas_on, the chunk
 * fits the workspace and every weight is one cuBLAS takes (the whole pass's
 * rows in one call: its bits may depend on the row count, so never for a
 * part of a pass; see chunk_linear). */
bool blas_linear(cu_stream *q, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    if (n <= RB || n > q->rows || w[0]->cols > q->cols) return false;
    for (int i = 0; i < nw; i++)
        if (!tsc_blas_takes(w[i]) || w[i]->cols != w[0]->cols) return false;
    if (!blas_on(q)) return false;
    tsc_linear_blas(q->c, w, nw, x, y, n, q->blas_ws, q->blas_bytes);
    return true;
}

/* Prompt chunks of more than RB rows through the chunk attention kernel
 * (attn.cu, tsc_attn_prefill; TSC_ATTN_PREFILL=0: the row kernels, a row at
 * a time). Read at every op. */
bool attn_prefill_on() { return !env_is0("TSC_ATTN_PREFILL"); }

/* Prompt chunks of more than RB rows through the chunk GDN kernels (gdn.cu,
 * tsc_gdn_prefill; TSC_GDN_PREFILL=0: the step kernels in 16-row calls).
 * Read at every op. */
bool gdn_prefill_on() { return !env_is0("TSC_GDN_PREFILL"); }
/* The prompt GDN in the WY form (gdn.cu), TSC_GDN_WY=0 the row scan. Its
 * first kernels were slower than the row scan (bench/cuda/RESULTS.md,
 * session 21, call 1: 9B pp512 15.5K against 17.4K tok/s); rewritten from
 * ncu's durations they are ahead (call 6: 9B pp512 / pp2048 19,581 /
 * 24,365 against 17,692 / 20,705; 35B-A3B-8L 51,457 / 86,029 against
 * 48,813 / 74,570), the engine's tests passing with it (23/23). */
bool gdn_wy_on() { return !env_is0("TSC_GDN_WY"); }

/* Fusion of a norm or SwiGLU into the next product (TSC_FUSE=0: off). */
bool fuse_on() {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TSC_FUSE");
        on = !(e && e[0] == '0');
    }
    return on;
}

/* Launch the pending norm or SwiGLU as it is: every op but the product that
 * consumes it calls this first, so the stream's order is what the model
 * asked for. */
__global__ void k_add2d(float *x, int64_t ldx, const float *add, int dim, int n); /* below */

void flush(ts_stream *s) {
    pend_act &p = ((cu_stream *)s)->pend;
    if (p.kind == PEND_NONE) return;
    const int k = p.kind;
    p.kind = PEND_NONE;
    tsc_ctx *c = ((cu_stream *)s)->c;
    if (k == PEND_NORM) {
        tsc_add_rmsnorm(c, p.x, p.add, p.w, p.y, p.n, p.dim, p.eps);
    } else if (k == PEND_ADD) {
        unsigned gx = (unsigned)((p.dim + 255) / 256), gy = (unsigned)(p.n < 1024 ? p.n : 1024);
        k_add2d<<<dim3(gx, gy), 256, 0, c->stream>>>(p.x, (int64_t)p.dim, p.add, p.dim, p.n);
        tsc_launched_(c, "add");
    } else {
        tsc_silu_mul(c, p.x, p.u, p.N);
    }
}

/* ---- kernels the contract needs beyond tsc.h ---- */

__global__ void k_fill2d(float *d, int64_t ld, int64_t cols, int64_t rows, float v) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x)
            d[r * ld + c] = v;
}

__global__ void k_add2d(float *x, int64_t ldx, const float *add, int dim, int n) {
    for (int r = blockIdx.y; r < n; r += gridDim.y)
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < dim; c += gridDim.x * blockDim.x)
            x[(int64_t)r * ldx + c] = __fadd_rn(x[(int64_t)r * ldx + c], add[(int64_t)r * dim + c]);
}

/* The dot product of one weight row (device descriptor fields) with x, by
 * one warp: 16-byte loads per lane (32 INT4 / 16 INT8 / 8 BF16 / 4 F32
 * values, inside one quantization group: tsc_weight_check guarantees it),
 * lanes strided over the row, then a shuffle sum. Fixed order for a given
 * shape, so every row of x gets the same operations whatever n. */
__device__ float row_dot(int dtype, int bits, int lg, int sdt, const uint8_t *data, const void *scales,
                         const void *biases, int64_t row, int64_t cols, const float *x) {
    const int lane = threadIdx.x & 31;
    float acc = 0.f;
    if (dtype == TS_DTYPE_U32) {
        const int per = bits == 4 ? 32 : 16;
        const int64_t pitch = cols * bits / 8, ng = cols >> lg;
        const uint8_t *rp = data + row * pitch;
        for (int64_t c0 = (int64_t)lane * per; c0 < cols; c0 += 32 * per) {
            const uint4 q = *(const uint4 *)(rp + c0 * bits / 8);
            const int64_t g = row * ng + (c0 >> lg);
            const float s = load_s(scales, sdt, g), b = load_s(biases, sdt, g);
            const uint32_t w[4] = {q.x, q.y, q.z, q.w};
            float d = 0.f, xs = 0.f;
            if (bits == 4) {
#pragma unroll
                for (int k = 0; k < 32; k++) {
                    const float xv = x[c0 + k];
                    d = __fmaf_rn((float)((w[k >> 3] >> ((k & 7) * 4)) & 15u), xv, d);
                    xs = __fadd_rn(xs, xv);
                }
            } else {
#pragma unroll
                for (int k = 0; k < 16; k++) {
                    const float xv = x[c0 + k];
                    d = __fmaf_rn((float)((w[k >> 2] >> ((k & 3) * 8)) & 255u), xv, d);
                    xs = __fadd_rn(xs, xv);
                }
            }
            acc = __fmaf_rn(s, d, __fmaf_rn(b, xs, acc));
        }
    } else {
        const int es = dtype == TS_DTYPE_F32 ? 4 : 2, per = 16 / es;
        const uint8_t *rp = data + row * cols * es;
        for (int64_t c0 = (int64_t)lane * per; c0 < cols; c0 += 32 * per) {
            const uint4 q = *(const uint4 *)(rp + c0 * es);
            const uint32_t w[4] = {q.x, q.y, q.z, q.w};
            if (es == 4) {
#pragma unroll
                for (int k = 0; k < 4; k++) acc = __fmaf_rn(__uint_as_float(w[k]), x[c0 + k], acc);
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const uint16_t h = (uint16_t)(w[k >> 1] >> ((k & 1) * 16));
                    acc = __fmaf_rn(dtype == TS_DTYPE_BF16 ? bf16f(h) : f16f(h), x[c0 + k], acc);
                }
            }
        }
    }
    return warp_sum(acc);
}

/* The routed experts of one MoE layer as the kernels see them: slot e of
 * expert e's gate (up, down) at base + e * stride, scales and biases at
 * fixed offsets inside a slot (all experts share one shape). */
struct xw {
    const uint8_t *base;
    int64_t stride, soff, boff, rows, cols;
    int dtype, bits, lg, sdt;
};

/* h[r, o] = silu(gate_e . x_r) * (up_e . x_r), e = ids[r * k + j]: one warp
 * per output o, block (8 warps) x rows in y. */
__global__ void __launch_bounds__(256) k_moe_gu(const xw g, const xw u, const int32_t *ids, int k, int j,
                                                const float *x, int ldx, float *h, int ldh) {
    const int r = blockIdx.y, o = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (o >= g.rows) return;
    const int64_t e = ids[r * k + j];
    const float *xr = x + (int64_t)r * ldx;
    const uint8_t *gb = g.base + e * g.stride, *ub = u.base + e * u.stride;
    const float gv = row_dot(g.dtype, g.bits, g.lg, g.sdt, gb, gb + g.soff, gb + g.boff, o, g.cols, xr);
    const float uv = row_dot(u.dtype, u.bits, u.lg, u.sdt, ub, ub + u.soff, ub + u.boff, o, u.cols, xr);
    if ((threadIdx.x & 31) == 0) h[(int64_t)r * ldh + o] = __fmul_rn(silu_f(gv), uv);
}

/* acc[r, o] (+)= wts[r * k + j] * (down_e . h_r): slot j of the routed sum,
 * slots added in order (j = 0 writes). */
__global__ void __launch_bounds__(256) k_moe_down(const xw d, const int32_t *ids, const float *wts, int k, int j,
                                                  const float *h, int ldh, float *acc, int ldacc) {
    const int r = blockIdx.y, o = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (o >= d.rows) return;
    const int64_t e = ids[r * k + j];
    const uint8_t *db = d.base + e * d.stride;
    const float v = row_dot(d.dtype, d.bits, d.lg, d.sdt, db, db + d.soff, db + d.boff, o, d.cols, h + (int64_t)r * ldh);
    if ((threadIdx.x & 31) == 0) {
        float *a = acc + (int64_t)r * ldacc + o;
        const float w = wts[r * k + j];
        *a = j ? __fmaf_rn(w, v, *a) : __fmul_rn(w, v);
    }
}

/* The same two products for all k routed experts of a row in one launch
 * each (a decode step of a 35B-A3B layer otherwise ran 2k tiny grids):
 * gate/up over (outputs, rows, k) into h[(r * k + j) * ldh], then down with
 * each warp summing its output's k slots in slot order, so every value has
 * the per-slot kernels' operations and rounding (j = 0 multiplies, later
 * slots fma), whatever the number of rows. */
__global__ void __launch_bounds__(256) k_moe_gu_all(const xw g, const xw u, const int32_t *ids, int k, const float *x,
                                                    int ldx, float *h, int ldh) {
    const int r = blockIdx.y, j = blockIdx.z, o = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (o >= g.rows) return;
    const int64_t e = ids[r * k + j];
    const float *xr = x + (int64_t)r * ldx;
    const uint8_t *gb = g.base + e * g.stride, *ub = u.base + e * u.stride;
    const float gv = row_dot(g.dtype, g.bits, g.lg, g.sdt, gb, gb + g.soff, gb + g.boff, o, g.cols, xr);
    const float uv = row_dot(u.dtype, u.bits, u.lg, u.sdt, ub, ub + u.soff, ub + u.boff, o, u.cols, xr);
    if ((threadIdx.x & 31) == 0) h[((int64_t)r * k + j) * ldh + o] = __fmul_rn(silu_f(gv), uv);
}

__global__ void __launch_bounds__(256) k_moe_down_all(const xw d, const int32_t *ids, const float *wts, int k,
                                                      const float *h, int ldh, float *acc, int ldacc) {
    const int r = blockIdx.y, o = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (o >= d.rows) return;
    float a = 0.f;
    for (int j = 0; j < k; j++) {
        const int64_t e = ids[r * k + j];
        const uint8_t *db = d.base + e * d.stride;
        const float v =
            row_dot(d.dtype, d.bits, d.lg, d.sdt, db, db + d.soff, db + d.boff, o, d.cols, h + ((int64_t)r * k + j) * ldh);
        const float w = wts[r * k + j];
        a = j ? __fmaf_rn(w, v, a) : __fmul_rn(w, v);
    }
    if ((threadIdx.x & 31) == 0) acc[(int64_t)r * ldacc + o] = a;
}

/* y[r, o] = w_o . x_r for weights the products' kernel does not take yet:
 * linear.cu stages x in shared memory with a swizzle that assumes cols % 32
 * == 0 (cols = 200 read past the staged rows: an illegal address on the
 * H200, alt-dense's down_proj). One warp per output, row_dot's fixed order. */
__global__ void __launch_bounds__(256) k_lin_plain(const tsc_weight w, const float *x, float *y) {
    const int r = blockIdx.y, o = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (o >= w.rows) return;
    int lg = 0;
    while (w.group > 1 && (1 << lg) < w.group) lg++;
    const float v = row_dot(w.dtype, w.bits, lg, w.sdtype, (const uint8_t *)w.data, w.scales, w.biases, o, w.cols,
                            x + (int64_t)r * w.cols);
    if ((threadIdx.x & 31) == 0) y[(int64_t)r * w.rows + o] = v;
}

/* t[r] = routed[r] + sigmoid(gl[r]) * shared[r] */
__global__ void k_moe_combine(float *t, const float *routed, const float *shared, const float *gl, int H) {
    const int r = blockIdx.y;
    const float sg = sigmoid_f(gl[r]);
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < H; c += gridDim.x * blockDim.x)
        t[(int64_t)r * H + c] = __fadd_rn(routed[(int64_t)r * H + c], __fmul_rn(sg, shared[(int64_t)r * H + c]));
}

/* prob[r] = 1 / sum_k exp(x_k - x[id]) (double sum; the winner's softmax) */
__global__ void k_win_prob(const float *x, int64_t ld, int K, const int32_t *ids, float *prob) {
    __shared__ double red[32];
    const float *xr = x + (int64_t)blockIdx.x * ld;
    const float m = xr[ids[blockIdx.x]];
    double s = 0;
    for (int i = threadIdx.x; i < K; i += blockDim.x) s += (double)expf(__fsub_rn(xr[i], m));
    s = block_sum_d(s, red);
    if (threadIdx.x == 0) prob[blockIdx.x] = (float)(1.0 / s);
}

/* ---- the GDN step for head sizes the fused kernels (gdn.cu: 128/128, 4
 * taps) do not take: the small fixtures and the bundled default model ----
 * The reference's order (cpu/gdn.c, linear_ref.c's ts_gdn_step_ref): conv
 * taps oldest first, SiLU, l2 norms per key head in double (q times
 * dk^-1/2), then per value head: decay, prediction with the decayed state,
 * delta, update, output after the update; the gated RMSNorm (double sum).
 * Three small kernels, rows walked in order inside each: row-exact. */
constexpr int GK_MAX = 8, GDK_MAX = 128;

/* (tsc_gdn_args: the state's source and destination as in gdn.cu, the
 * parities, no output when o is NULL) */
__global__ void k_gdn_conv(const tsc_gdn_args a, int C, float *prep) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int K = a.K, n = tsc_gdn_rows(a);
    if (!n) return;
    const float *cin;
    float *cs = tsc_gdn_conv_of(a, &cin);
    float h[GK_MAX], w[GK_MAX];
    for (int j = 0; j < K - 1; j++) h[j] = cin[(int64_t)j * C + c];
    for (int j = 0; j < K; j++) w[j] = a.conv_w[(int64_t)j * C + c];
    for (int t = 0; t < n; t++) {
        const float x = a.qkv[(int64_t)t * C + c];
        float acc = 0.f;
        for (int j = 0; j < K - 1; j++) acc = __fadd_rn(acc, __fmul_rn(w[j], h[j]));
        acc = __fadd_rn(acc, __fmul_rn(w[K - 1], x));
        prep[(int64_t)t * C + c] = silu_f(acc);
        for (int j = 0; j + 1 < K - 1; j++) h[j] = h[j + 1];
        if (K > 1) h[K - 2] = x;
    }
    for (int j = 0; j < K - 1; j++) cs[(int64_t)j * C + c] = h[j];
}

/* block (head of q or k, row): l2 norm in place (rows past the run's
 * count, tsc_gdn_rows, exit) */
__global__ void k_gdn_l2(const tsc_gdn_args a, float *prep, int C) {
    __shared__ double red[32];
    const int hh = blockIdx.x, t = blockIdx.y, Hk = a.Hk, dk = a.dk;
    if (t >= tsc_gdn_rows(a)) return;
    const bool isq = hh < Hk;
    float *x = prep + (int64_t)t * C + (int64_t)hh * dk; /* q heads then k heads: contiguous */
    double ss = 0;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) ss += (double)x[i] * x[i];
    ss = block_sum_d(ss, red);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)ss, 1e-6f)));
    const float qs = __fdiv_rn(1.0f, __fsqrt_rn((float)dk));
    for (int i = threadIdx.x; i < dk; i += blockDim.x) x[i] = isq ? __fmul_rn(__fmul_rn(x[i], r), qs) : __fmul_rn(x[i], r);
}

__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* block = value head h, thread = state column j */
__global__ void k_gdn_scan(const tsc_gdn_args a, const float *prep) {
    __shared__ float qs[GDK_MAX], ks[GDK_MAX];
    __shared__ double red[32];
    const int Hk = a.Hk, Hv = a.Hv, dk = a.dk, dv = a.dv, n = tsc_gdn_rows(a);
    if (!n) return;
    const int h = blockIdx.x, j = threadIdx.x, kh = h / (Hv / Hk);
    const int Kd = Hk * dk, C = 2 * Kd + Hv * dv, Vd = Hv * dv;
    const bool on = j < dv;
    float s[GDK_MAX];
    const float *S0;
    float *Sh = tsc_gdn_state_of(a, &S0) + (int64_t)h * dk * dv;
    const float *Si = S0 + (int64_t)h * dk * dv;
    for (int i = 0; i < dk; i++) s[i] = on ? Si[(int64_t)i * dv + j] : 0.f;
    for (int t = 0; t < n; t++) {
        const float *row = prep + (int64_t)t * C;
        __syncthreads();
        for (int i = threadIdx.x; i < dk; i += blockDim.x) qs[i] = row[(int64_t)kh * dk + i], ks[i] = row[Kd + (int64_t)kh * dk + i];
        __syncthreads();
        const float beta = sigmoid_f(a.b[(int64_t)t * Hv + h]);
        const float decay = expf(__fmul_rn(a.neg_A[h], softplus_f(__fadd_rn(a.a[(int64_t)t * Hv + h], a.dt_bias[h]))));
        float p = 0.f;
        for (int i = 0; i < dk; i++) {
            s[i] = __fmul_rn(s[i], decay);
            p = __fadd_rn(p, __fmul_rn(s[i], ks[i]));
        }
        const float v = on ? row[2 * Kd + (int64_t)h * dv + j] : 0.f;
        const float delta = __fmul_rn(beta, __fsub_rn(v, p));
        float ov = 0.f;
        for (int i = 0; i < dk; i++) {
            s[i] = __fadd_rn(s[i], __fmul_rn(ks[i], delta));
            ov = __fadd_rn(ov, __fmul_rn(s[i], qs[i]));
        }
        const double ss = block_sum_d(on ? (double)ov * ov : 0.0, red);
        const float rr = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn((float)(ss / dv), a.eps)));
        if (on && a.o) {
            const int64_t oi = (int64_t)t * Vd + (int64_t)h * dv + j;
            a.o[oi] = __fmul_rn(__fmul_rn(__fmul_rn(ov, rr), a.norm_w[j]), silu_f(a.z[oi]));
        }
    }
    if (on)
        for (int i = 0; i < dk; i++) Sh[(int64_t)i * dv + j] = s[i];
}

/* ---- memory ---- */

void *cu_alloc(ts_backend *be, size_t bytes, ts_mem_cat cat) {
    cu_be *b = BE(be);
    if (!b->c) return NULL;
    ablk *k = (ablk *)malloc(sizeof *k);
    if (!k) return NULL;
    void *p = tsc_alloc(b->c, bytes);
    if (!p) {
        free(k);
        return NULL;
    }
    /* zeroed before any stream uses it (the streams do not wait for the
     * legacy default stream: cudaStreamNonBlocking) */
    if (cudaMemsetAsync(p, 0, bytes, b->c->stream) != cudaSuccess || cudaStreamSynchronize(b->c->stream) != cudaSuccess) {
        tsc_free(b->c, p);
        free(k);
        return NULL;
    }
    k->p = p, k->bytes = bytes, k->cat = cat, k->next = b->blocks;
    b->blocks = k;
    ts_mem_account(TS_DOM_DEVICE, cat, (int64_t)bytes);
    return p;
}

void cu_free(ts_backend *be, void *p) {
    cu_be *b = BE(be);
    if (!p || !b->c) return;
    for (ablk **q = &b->blocks; *q; q = &(*q)->next)
        if ((*q)->p == p) {
            ablk *k = *q;
            *q = k->next;
            ts_mem_account(TS_DOM_DEVICE, (ts_mem_cat)k->cat, -(int64_t)k->bytes);
            tsc_free(b->c, p);
            free(k);
            return;
        }
}

size_t vbytes(ts_view v) { return (size_t)v.cols * ts_dtype_size(v.dt); }
size_t vld(ts_view v) { return (size_t)v.ld * ts_dtype_size(v.dt); }

void io_err(ts_stream *s, const char *what, cudaError_t e) {
    char m[200];
    snprintf(m, sizeof m, "%s: %s", what, cudaGetErrorString(e));
    fail(s, TS_E_IO, m);
}

void cu_write(ts_stream *s, ts_view dst, const void *host) {
    flush(s);
    if (dead(s)) return;
    cudaStream_t cs = ST(s)->c->stream;
    cudaError_t e = cudaMemcpy2DAsync(dst.p, vld(dst), host, vbytes(dst), vbytes(dst), (size_t)dst.rows,
                                      cudaMemcpyHostToDevice, cs);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs); /* the host buffer is the caller's again on return */
    if (e != cudaSuccess) io_err(s, "write to the device", e);
}

void cu_read(ts_stream *s, void *host, ts_view src) {
    flush(s);
    if (dead(s)) return;
    cudaStream_t cs = ST(s)->c->stream;
    cudaError_t e = cudaMemcpy2DAsync(host, vbytes(src), src.p, vld(src), vbytes(src), (size_t)src.rows,
                                      cudaMemcpyDeviceToHost, cs);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs);
    if (e != cudaSuccess) io_err(s, "read from the device", e);
}

void cu_copy(ts_stream *s, ts_view dst, ts_view src) {
    flush(s);
    if (dead(s)) return;
    cudaError_t e = cudaMemcpy2DAsync(dst.p, vld(dst), src.p, vld(src), vbytes(src), (size_t)src.rows,
                                      cudaMemcpyDeviceToDevice, ST(s)->c->stream);
    if (e != cudaSuccess) io_err(s, "device copy", e);
}

void cu_fill(ts_stream *s, ts_view dst, float v) {
    flush(s);
    if (dead(s) || dst.rows <= 0 || dst.cols <= 0) return;
    tsc_ctx *c = ST(s)->c;
    if (dst.ld == dst.cols) {
        tsc_fill(c, (float *)dst.p, v, (size_t)(dst.rows * dst.cols));
        return;
    }
    unsigned gx = (unsigned)((dst.cols + 255) / 256 < 64 ? (dst.cols + 255) / 256 : 64);
    unsigned gy = (unsigned)(dst.rows < 1024 ? dst.rows : 1024);
    k_fill2d<<<dim3(gx, gy), 256, 0, c->stream>>>((float *)dst.p, dst.ld, dst.cols, dst.rows, v);
    tsc_launched_(c, "fill");
}

const float *cu_host_rows(ts_stream *s, ts_view v) {
    flush(s);
    cu_stream *q = ST(s);
    const size_t need = vbytes(v) * (size_t)v.rows;
    if (dead(s)) return NULL;
    if (need > q->stage_bytes) {
        if (q->stage) {
            cudaFreeHost(q->stage);
            ts_mem_account(TS_DOM_PINNED, TS_MEM_SCRATCH, -(int64_t)q->stage_bytes);
            q->stage = NULL, q->stage_bytes = 0;
        }
        cudaError_t e = cudaMallocHost((void **)&q->stage, need);
        if (e != cudaSuccess) {
            q->stage = NULL;
            io_err(s, "pinned staging for a read", e);
            return NULL;
        }
        q->stage_bytes = need;
        ts_mem_account(TS_DOM_PINNED, TS_MEM_SCRATCH, (int64_t)need);
    }
    cu_read(s, q->stage, v);
    return dead(s) ? NULL : q->stage;
}

int cu_sync(ts_stream *s) {
    flush(s);
    cu_stream *q = ST(s);
    int rc = sync_into(s);
    /* a refused argument leaves the device usable; a device fault does not */
    if (rc && rc != TS_E_IO) q->c->err_code = 0, q->c->err_msg[0] = 0;
    rc = s->err;
    s->err = 0;
    return rc;
}

/* ---- streams ---- */

size_t cu_workspace_bytes(ts_backend *be, int rows, int64_t cols, int group) {
    (void)be, (void)group;
    return layout_of(rows, cols).total;
}

void cu_stream_free(ts_stream *st) {
    if (!st) return;
    cu_stream *q = ST(st);
    for (int i = 0; i < q->n_graphs; i++) tsc_graph_free(q->graphs[i].g);
    if (optime_on()) {
        double tot = 0;
        for (int k = 0; k < OPT_N; k++) tot += q->op_ms[k];
        fprintf(stderr, "turbospark: cuda op time (TSC_OPTIME: uncaptured ops, graph replays): %.2f ms;", tot);
        for (int k = 0; k < OPT_N; k++)
            if (q->op_n[k]) fprintf(stderr, " %s %.2f ms / %ld", OPT_NAME[k], q->op_ms[k], q->op_n[k]);
        fprintf(stderr, "\n");
    }
    if (q->ws) ts_mem_account(TS_DOM_DEVICE, TS_MEM_SCRATCH, -(int64_t)q->ws_bytes);
    if (q->stage) {
        cudaFreeHost(q->stage);
        ts_mem_account(TS_DOM_PINNED, TS_MEM_SCRATCH, -(int64_t)q->stage_bytes);
    }
    if (q->topn_ws) ts_mem_account(TS_DOM_DEVICE, TS_MEM_SCRATCH, -(int64_t)q->topn_bytes);
    if (q->ahead_h) {
        cudaStreamSynchronize(q->c->stream); /* (a ticket's copy may be in flight) */
        for (int t = 0; t < TS_AHEAD_TICKETS; t++) cudaEventDestroy(q->ahead_ev[t]);
        cudaFreeHost(q->ahead_h);
        ts_mem_account(TS_DOM_PINNED, TS_MEM_SCRATCH, -(int64_t)AHEAD_PINNED);
    }
    tsc_close(q->c); /* frees the workspace (and topn's scratch) */
    free(q->hstep);
    free(q);
}

int cu_stream_new(ts_backend *be, int rows, int64_t cols, int group, ts_stream **out) {
    cu_be *b = BE(be);
    *out = NULL;
    if (!b->c) return TS_E_UNSUPPORTED;
    cu_stream *q = (cu_stream *)calloc(1, sizeof *q); /* a control block: outside the plan */
    if (!q) return TS_E_NOMEM;
    q->base.be = be;
    ts_error err;
    if (tsc_open(b->device, &q->c, &err)) {
        free(q);
        return TS_E_NOMEM;
    }
    const ws_layout l = layout_of(rows, cols);
    q->rows = rows, q->cols = cols;
    q->hstep = (dev_step *)calloc(1, DSTEP_HEAD + sizeof(int32_t) * (size_t)(rows > 0 ? rows : 1));
    uint8_t *w = (uint8_t *)tsc_alloc(q->c, l.total);
    if (!w || !q->hstep || cudaMemsetAsync(w, 0, l.total, q->c->stream) != cudaSuccess ||
        cudaStreamSynchronize(q->c->stream) != cudaSuccess) {
        tsc_close(q->c);
        free(q->hstep);
        free(q);
        return TS_E_NOMEM;
    }
    q->ws = w, q->ws_bytes = l.total;
    ts_mem_account(TS_DOM_DEVICE, TS_MEM_SCRATCH, (int64_t)l.total);
    q->cap_ahead_t = -1;
    ts_stream *ps = &q->base;
    if (!ahead_init(ps, q)) { /* (the stream's error names it) */
        cu_stream_free(ps);
        return TS_E_NOMEM;
    }
    q->dstep = (dev_step *)(w + l.step);
    q->r_ids = (int32_t *)(w + l.rids);
    q->r_wts = (float *)(w + l.rwts);
    q->gl = (float *)(w + l.gl);
    tsc_set_barrier(q->c, (unsigned *)(q->gl + RB)); /* zeroed above with the workspace */
    tsc_set_digits(q->c, w + l.dg, tsc_digits_ws_bytes());
    q->amx_ws = w + l.amx_ws;
    q->amx_ids = (int32_t *)(w + l.amx_ids);
    q->amx_prob = (float *)(w + l.amx_prob);
    q->att_small = (float *)(w + l.att_small);
    q->att_small_n = att_small_floats();
    if (l.gemm > l.att_multi) q->att_multi = (float *)(w + l.att_multi), q->att_multi_n = (l.gemm - l.att_multi) / sizeof(float);
    if (rows > RB) {
        q->gemm_ws = w + l.gemm, q->gemm_bytes = l.route - l.gemm;
        q->route = (int32_t *)(w + l.route), q->maps = (int32_t *)(w + l.maps), q->maps_n = maps_ints_of(rows);
        if (l.blas > l.wy) q->wy_ws = w + l.wy, q->wy_bytes = l.blas - l.wy;
        if (l.total > l.blas) q->blas_ws = w + l.blas, q->blas_bytes = l.total - l.blas;
    }
    *out = &q->base;
    return 0;
}

unsigned cu_enter(ts_stream *s) {
    cudaSetDevice(BE(s->be)->device); /* the calling thread's device (the server's workers) */
    return 0;
}
void cu_leave(ts_stream *s, unsigned old) { (void)s, (void)old; }

/* ---- weights ---- */

void wsizes(const ts_weight *w, size_t *db, size_t *sb) { ts_weight_part_bytes(w, db, sb); }

tsc_weight host_desc(const ts_weight *w) {
    tsc_weight t;
    memset(&t, 0, sizeof t);
    t.dtype = w->dtype, t.bits = w->bits, t.group = w->group, t.rows = w->rows, t.cols = w->cols;
    t.data = w->data, t.scales = w->scales, t.biases = w->biases, t.sdtype = w->sdtype;
    t.act_digits = w->act_digits;
    return t;
}

void note_bad(cu_be *b, const ts_weight *w, const char *why) {
    if (b->bad) return;
    b->bad = 1;
    snprintf(b->bad_msg, sizeof b->bad_msg, "a %lld x %lld %s weight: the CUDA products need %.300s", (long long)w->rows,
             (long long)w->cols, w->dtype == TS_DTYPE_U32 ? (w->bits == 4 ? "4-bit" : w->bits == 8 ? "8-bit" : "quantized")
                                                          : ts_dtype_name(w->dtype), why);
}

size_t cu_weight_bytes(ts_backend *be, const ts_weight *w) {
    cu_be *b = BE(be);
    size_t db, sb;
    wsizes(w, &db, &sb);
    /* vectors ([1, n] f32, load.c) have any length; matrices must fit the products */
    if (w->rows > 1 || w->dtype != TS_DTYPE_F32) {
        tsc_weight t = host_desc(w);
        ts_error e;
        if (tsc_weight_check(&t, &e)) note_bad(b, w, e.msg);
    }
    return al256(db) + 2 * al256(sb);
}

void cu_weight_prepare(ts_backend *be, ts_weight *w, void *dst) {
    cu_be *b = BE(be);
    if (!b->c) return;
    size_t db, sb;
    wsizes(w, &db, &sb);
    tsc_weight d = host_desc(w);
    uint8_t *p = (uint8_t *)dst;
    d.data = p;
    cudaError_t e = cudaMemcpy(p, w->data, db, cudaMemcpyHostToDevice);
    if (w->dtype == TS_DTYPE_U32) {
        d.scales = p + al256(db);
        d.biases = p + al256(db) + al256(sb);
        if (e == cudaSuccess) e = cudaMemcpy((void *)d.scales, w->scales, sb, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaMemcpy((void *)d.biases, w->biases, sb, cudaMemcpyHostToDevice);
    }
    if (e != cudaSuccess) {
        if (!b->bad) {
            b->bad = 1;
            snprintf(b->bad_msg, sizeof b->bad_msg, "uploading weights to CUDA device %d: %s", b->device,
                     cudaGetErrorString(e));
        }
        return;
    }
    if (wmap_put(&b->wm, p, &d) && !b->bad) {
        b->bad = 1;
        snprintf(b->bad_msg, sizeof b->bad_msg, "out of memory (weight map)");
    }
    w->packed = p;
    b->uploaded += db + 2 * sb;
    if (b->progress && b->uploaded >= b->next_report) {
        fprintf(stderr, "\rturbospark: weights to cuda:%d: %.2f GB", b->device, (double)b->uploaded / 1e9);
        fflush(stderr);
        b->next_report = b->uploaded + (size_t)1 << 30;
    }
}

/* Where cu_weight_prepare puts a weight's parts (it only places them:
 * data, then scales and biases at 256-byte aligned offsets): expert
 * streaming fills device slots in this layout by copies (cu_slot_copy), and
 * slot_desc reads it back. */
int cu_weight_parts(ts_backend *be, const ts_weight *w, uint64_t off[3]) {
    (void)be;
    size_t db, sb;
    wsizes(w, &db, &sb);
    off[0] = 0;
    off[1] = w->dtype == TS_DTYPE_U32 ? al256(db) : 0;
    off[2] = w->dtype == TS_DTYPE_U32 ? al256(db) + al256(sb) : 0;
    return 1;
}

/* Byte runs between host and device memory for expert streaming (an I/O
 * thread of model/xstream.c filling a device slot, or saving a victim to
 * the host tier; several threads at once): all runs issued on the calling
 * thread's own stream (cudaStreamPerThread: the sessions' streams are
 * non-blocking, so it waits for none of them), then one wait. Nothing is
 * recorded: a slot is reused by other experts, and the MoE op finds its
 * views through the pool (ts_moe_args.pool_w, slot_desc). The host side is
 * pinned memory where xstream could pin it (host_pin), else the driver
 * stages it. */
static cudaMemcpyKind copy_kind(int dir) {
    return dir == TS_COPY_H2D ? cudaMemcpyHostToDevice : dir == TS_COPY_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
}

int cu_slot_copy(ts_backend *be, void *dst, const void *src, const ts_copy_run *runs, int n, int dir) {
    cu_be *b = BE(be);
    if (!b->c) return EINVAL;
    cudaStream_t st = cudaStreamPerThread;
    const cudaMemcpyKind k = copy_kind(dir);
    cudaError_t e = cudaSetDevice(b->device); /* the thread's device is its own */
    for (int i = 0; i < n && e == cudaSuccess; i++)
        e = cudaMemcpyAsync((uint8_t *)dst + runs[i].dst, (const uint8_t *)src + runs[i].src, runs[i].bytes, k, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    return e == cudaSuccess ? 0 : EIO;
}

/* cu_slot_copy's runs on the session's stream, not waited for (expert
 * streaming's copies from the pinned host tier, issued by the caller's
 * thread before the MoE kernels that read the slots). */
void cu_stream_copy(ts_stream *s, void *dst, const void *src, const ts_copy_run *runs, int n, int dir) {
    flush(s);
    cu_stream *q = ST(s);
    if (dead(s)) return;
    if (q->capturing) { fail(s, TS_E_ARG, "slot copies inside a graph capture"); return; }
    const cudaMemcpyKind k = copy_kind(dir);
    for (int i = 0; i < n; i++) {
        cudaError_t e = cudaMemcpyAsync((uint8_t *)dst + runs[i].dst, (const uint8_t *)src + runs[i].src, runs[i].bytes, k,
                                        q->c->stream);
        if (e != cudaSuccess) { io_err(s, "expert slot copy", e); return; }
    }
}

/* Host memory the I/O threads stage streamed experts in, page-locked (the
 * copies into device slots then run at the bus's rate; pageable memory is
 * staged again by the driver). Not counted as the pinned domain: these are
 * the expert cache's own bytes (TS_MEM_EXPERT_CACHE, host), locked. */
int cu_host_pin(ts_backend *be, void *p, size_t bytes, int pin) {
    cu_be *b = BE(be);
    if (!b->c || !p || !bytes) return 0;
    cudaError_t e = pin ? cudaHostRegister(p, bytes, cudaHostRegisterDefault) : cudaHostUnregister(p);
    return e == cudaSuccess ? 0 : TS_E_NOMEM;
}

/* The device descriptor of a view into a slot of the expert pool: the
 * layout cu_weight_prepare(_1) writes at w->packed. */
tsc_weight slot_desc(const ts_weight *w) {
    size_t db, sb;
    wsizes(w, &db, &sb);
    tsc_weight d = host_desc(w);
    const uint8_t *p = (const uint8_t *)w->packed;
    d.data = p;
    d.scales = w->dtype == TS_DTYPE_U32 ? p + al256(db) : NULL;
    d.biases = w->dtype == TS_DTYPE_U32 ? p + al256(db) + al256(sb) : NULL;
    return d;
}

/* The device descriptor of a prepared weight into d; rows may be a prefix
 * (the head's drafting rows). false: w was not prepared here (dev_w fails
 * the stream; the GDN step's hint for out_proj's digits, gdn_rows, only
 * asks). */
bool dev_w_find(ts_backend *be, const ts_weight *w, tsc_weight *d) {
    const tsc_weight *t = wmap_get(&BE(be)->wm, w->packed);
    if (!t) return false;
    *d = *t;
    d->rows = w->rows < t->rows ? w->rows : t->rows;
    /* the activation precision as the engine set it (ts_model_set_act_digits
     * runs after the upload, so the stored descriptor cannot hold it; before
     * this line the GPU products ran at 24 bits whatever --act-bits said) */
    d->act_digits = w->act_digits;
    return true;
}

bool dev_w(ts_stream *s, const ts_weight *w, tsc_weight *d) {
    if (dev_w_find(s->be, w, d)) return true;
    fail(s, TS_E_ARG, "a weight was not prepared for the CUDA backend");
    return false;
}

/* ---- compute ---- */

/* nw weights of one layout on n <= 16 rows: tsc_linear, or k_lin_plain
 * where linear.cu cannot take the columns yet */
void lin_rows(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    if (w[0]->cols % 32 == 0) {
        tsc_linear(c, w, nw, x, y, n);
        return;
    }
    if (tsc_error(c)) return;
    for (int i = 0; i < nw; i++) {
        k_lin_plain<<<dim3((unsigned)((w[i]->rows + 7) / 8), n), 256, 0, c->stream>>>(*w[i], x, y[i]);
        tsc_launched_(c, "linear (cols not a multiple of 32)");
    }
}

/* The pending norm or SwiGLU staged by this product when it reads the
 * pending op's output and its weights take the fused dp4a kernel (one run
 * of one format, up to TSC_LIN_MAX, n <= RB rows); true when launched. The
 * fused kernels give the bits of the two kernels they replace (q4dp.cu).
 * plain: a pending norm also by the plain kernel's formats (bf16 / f32:
 * a MoE router, cu_moe's short form; linear.cu's NORM form, the same bits). */
bool fused_linear(ts_stream *s, const tsc_weight *dw, int nw, const float *x, float *const *y, int n, bool plain = false) {
    pend_act &p = ST(s)->pend;
    if ((p.kind != PEND_NORM && p.kind != PEND_SWIGLU) || nw > TSC_LIN_MAX || n > RB) return false;
    if (!q4dp_takes(&dw[0]) && !(plain && p.kind == PEND_NORM && tsc_linear_addnorm_plain_takes(&dw[0], p.x, p.add, p.w)))
        return false;
    if (p.kind == PEND_NORM ? (x != p.y || n != p.n || dw[0].cols != p.dim)
                            : (x != p.x || (size_t)n * (size_t)dw[0].cols != p.N))
        return false;
    /* the staging reads 16-byte chunks */
    if ((((uintptr_t)p.x | (uintptr_t)p.y | (uintptr_t)(p.add ? p.add : p.x) | (uintptr_t)(p.u ? p.u : p.x)) & 15) != 0)
        return false;
    const tsc_weight *pw[TSC_LIN_MAX];
    for (int i = 0; i < nw; i++) {
        if (!tsc_linear_one_launch(&dw[i], &dw[0])) return false;
        pw[i] = &dw[i];
    }
    tsc_ctx *c = ST(s)->c;
    const int k = p.kind;
    p.kind = PEND_NONE;
    if (k == PEND_NORM) /* x += add in place (when add), y = the normed rows */
        tsc_linear_addnorm(c, pw, nw, p.x, p.add, p.w, p.eps, p.add ? p.x : NULL, p.y, y, n);
    else /* g = silu(g) * u in place */
        tsc_linear_swiglu_out(c, pw, nw, p.x, p.u, p.x, y, n);
    return true;
}

/* nw weights of one format (cu_linear's runs) on n rows of any count: the
 * row kernels, RB rows a launch. */
void rows_linear(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    /* the plain kernel's formats (bf16 routers, 8-bit weights): every 4-row
     * group in one launch, the same bits (a chunk MoE's bf16 router was 128
     * launches a layer at 2048 rows) */
    bool many = n > RB;
    for (int i = 0; i < nw && many; i++) many = tsc_linear_many_takes(w[i]);
    if (many) {
        tsc_linear_many(c, w, nw, x, y, n);
        return;
    }
    float *py[TSC_LIN_MAX];
    for (int r0 = 0; r0 < n; r0 += RB) {
        for (int i = 0; i < nw; i++) py[i] = y[i] + (size_t)r0 * (size_t)w[i]->rows;
        lin_rows(c, w, nw, x + (size_t)r0 * (size_t)w[0]->cols, py, n - r0 < RB ? n - r0 : RB);
    }
}

/* TSC_GEMM_CHECK=1 (a debugging aid, off by default): every prompt-chunk
 * product of the tensor-core kernel is compared at once with the row
 * kernels' on the same x (a transient buffer of the context), and the
 * largest difference against the largest output printed per weight. */
bool gemm_check_on() { return env_is1("TSC_GEMM_CHECK"); }
void gemm_check(tsc_ctx *c, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    for (int i = 0; i < nw; i++) {
        const size_t N = (size_t)n * (size_t)w[i]->rows;
        float *t = (float *)tsc_alloc(c, N * sizeof(float));
        float *ha = (float *)malloc(N * sizeof(float)), *hb = (float *)malloc(N * sizeof(float));
        if (!t || !ha || !hb) { tsc_free(c, t), free(ha), free(hb); return; }
        rows_linear(c, &w[i], 1, x, &t, n);
        tsc_read(c, ha, y[i], N * sizeof(float));
        tsc_read(c, hb, t, N * sizeof(float));
        double dmax = 0, ymax = 0;
        size_t at = 0;
        for (size_t k = 0; k < N; k++) {
            const double d = fabs((double)ha[k] - hb[k]);
            if (!(d <= dmax)) dmax = d, at = k;
            ymax = fmax(ymax, fabs((double)hb[k]));
        }
        fprintf(stderr, "turbospark: gemm check: weight %d of %d, %lld x %lld, %d rows: max |gemm - rows| %.3g at row %zu "
                "output %zu (max |y| %.3g)\n", i, nw, (long long)w[i]->rows, (long long)w[i]->cols, n, dmax,
                at / (size_t)w[i]->rows, at % (size_t)w[i]->rows, ymax);
        tsc_free(c, t), free(ha), free(hb);
    }
}

void cu_linear(ts_stream *s, ts_mode m, const ts_weight *const *w, int nw, const float *x, float *const *y, int n) {
    op_timer opt_(s, OPT_LINEAR);
    if (dead(s) || n <= 0) return;
    tsc_ctx *c = ST(s)->c;
    tsc_weight dw[TS_LINEAR_MANY_MAX];
    if (nw > TS_LINEAR_MANY_MAX) { fail(s, TS_E_ARG, "linear: too many weights"); return; }
    for (int i = 0; i < nw; i++)
        if (!dev_w(s, w[i], &dw[i])) return;
    if (fused_linear(s, dw, nw, x, y, n)) return;
    flush(s);
    /* one launch per run of weights that share the products' format */
    for (int i0 = 0; i0 < nw;) {
        int i1 = i0 + 1;
        while (i1 < nw && i1 - i0 < TSC_LIN_MAX && dw[i1].dtype == dw[i0].dtype && dw[i1].bits == dw[i0].bits &&
               dw[i1].group == dw[i0].group && dw[i1].sdtype == dw[i0].sdtype && dw[i1].cols == dw[i0].cols &&
               dw[i1].act_digits == dw[i0].act_digits)
            i1++;
        const tsc_weight *pw[TSC_LIN_MAX];
        for (int i = i0; i < i1; i++) pw[i - i0] = &dw[i];
        /* a prompt chunk: one pass over the weights for all its rows */
        if (m == TS_MODE_PREFILL && blas_linear(ST(s), pw, i1 - i0, x, y + i0, n)) {
            i0 = i1;
            continue;
        }
        bool gemm = m == TS_MODE_PREFILL && n > RB && n <= ST(s)->rows && dw[i0].cols <= ST(s)->cols && gemm_on();
        for (int i = i0; i < i1 && gemm; i++) gemm = tsc_gemm_takes(&dw[i]);
        if (gemm) {
            tsc_linear_gemm(c, pw, i1 - i0, x, y + i0, n, ST(s)->gemm_ws);
            if (gemm_check_on()) gemm_check(c, pw, i1 - i0, x, y + i0, n);
        } else {
            rows_linear(c, pw, i1 - i0, x, y + i0, n);
        }
        i0 = i1;
    }
}

/* The first op of every pass: the step record and the ids to the device
 * block (outside any graph), then the gather. */
void cu_embed(ts_stream *s, ts_mode m, const ts_weight *w, const int32_t *ids, float *x, size_t ldx, int n) {
    op_timer opt_(s, OPT_EMBED);
    flush(s);
    cu_stream *q = ST(s);
    if (dead(s) || n <= 0) return;
    /* a run-ahead pass: its id is argmax_ahead's, on the device */
    const uintptr_t slot0 = (uintptr_t)q->amx_ids;
    const bool ahead = (uintptr_t)ids - slot0 < sizeof(int32_t) * TS_AHEAD_TICKETS && n == 1;
    if (q->capturing && !ahead) { fail(s, TS_E_ARG, "embed inside a graph capture"); return; }
    if (n > q->rows) { fail(s, TS_E_ARG, "embed: more rows than the stream was made for"); return; }
    tsc_weight dw;
    if (!dev_w(s, w, &dw)) return;
    bool on_dev = ahead;
    if (!ahead) {
        cudaPointerAttributes pa;
        on_dev = cudaPointerGetAttributes(&pa, ids) == cudaSuccess &&
                 (pa.type == cudaMemoryTypeDevice || pa.type == cudaMemoryTypeManaged);
        cudaGetLastError();
    }
    /* a run-ahead pass's record is pinned: inside a capture, a record of
     * the graph's own, which cu_graph_launch writes before each launch;
     * uncaptured, one of the ring (ahead_init says why and when reuse is
     * safe) */
    dev_step *hs = q->hstep;
    if (ahead && q->capturing) {
        if (q->n_cap_rec == AHEAD_CAP) { fail(s, TS_E_ARG, "embed: more captured run-ahead passes than records"); return; }
        hs = q->cap_rec = &q->ahead_rec[AHEAD_RECS + q->n_cap_rec++];
    } else if (ahead) {
        hs = &q->ahead_rec[q->ahead_rec_i++ % AHEAD_RECS];
    }
    hs->step = s->step;
    gdn_sel_of(s->step, hs->gsel);
    size_t bytes = DSTEP_HEAD;
    if (!on_dev) {
        memcpy(hs->ids, ids, sizeof(int32_t) * (size_t)n);
        bytes += sizeof(int32_t) * (size_t)n;
    }
    /* pageable source: the driver has staged it when the call returns */
    cudaError_t e = ahead ? ahead_rec_in(q, hs, bytes)
                          : cudaMemcpyAsync(q->dstep, hs, bytes, cudaMemcpyHostToDevice, q->c->stream);
    if (e != cudaSuccess) { io_err(s, "step record to the device", e); return; }
    const int32_t *dids = on_dev ? ids : q->dstep->ids;
    if (ldx == (size_t)dw.cols) tsc_embed(q->c, &dw, dids, n, x);
    else
        for (int i = 0; i < n; i++) tsc_embed(q->c, &dw, dids + i, 1, x + (size_t)i * ldx);
}

void cu_norm(ts_stream *s, ts_mode m, float *x, size_t ldx, const float *add, const float *w, float *y, size_t ldy,
             int n, int dim, float eps) {
    if (dead(s) || n <= 0) return;
    pend_act &p = ST(s)->pend;
    /* a pending x += add then this norm of x (the layer's residual add, then
     * the next layer's input norm): one norm with that add, which the next
     * product stages (k_add2d's __fadd_rn is the norm's: the same bits) */
    if (p.kind == PEND_ADD && w && !add && x == p.x && ldx == (size_t)dim && ldy == (size_t)dim && n == p.n &&
        dim == p.dim) {
        p.kind = PEND_NORM, p.w = w, p.y = y, p.eps = eps; /* p.add stays: the residual */
        return;
    }
    flush(s);
    tsc_ctx *c = ST(s)->c;
    if (!w) {
        if (!add) return;
        if (fuse_on() && ldx == (size_t)dim && n <= RB) {
            p.kind = PEND_ADD, p.x = x, p.add = add, p.n = n, p.dim = dim;
            return;
        }
        unsigned gx = (unsigned)((dim + 255) / 256), gy = (unsigned)(n < 1024 ? n : 1024);
        k_add2d<<<dim3(gx, gy), 256, 0, c->stream>>>(x, (int64_t)ldx, add, dim, n);
        tsc_launched_(c, "add");
        return;
    }
    if (ldx == (size_t)dim && ldy == (size_t)dim) {
        if (fuse_on() && n <= RB) {
            pend_act &p = ST(s)->pend;
            p.kind = PEND_NORM, p.x = x, p.add = add, p.w = w, p.y = y, p.n = n, p.dim = dim, p.eps = eps;
            return;
        }
        tsc_add_rmsnorm(c, x, add, w, y, n, dim, eps);
        return;
    }
    for (int i = 0; i < n; i++)
        tsc_add_rmsnorm(c, x + (size_t)i * ldx, add ? add + (size_t)i * dim : NULL, w, y + (size_t)i * ldy, 1, dim, eps);
}

void cu_swiglu(ts_stream *s, ts_mode m, float *g, const float *u, size_t N) {
    op_timer opt_(s, OPT_NORM);
    if (dead(s)) return;
    flush(s);
    if (fuse_on()) {
        pend_act &p = ST(s)->pend;
        p.kind = PEND_SWIGLU, p.x = g, p.u = u, p.N = N;
        return;
    }
    tsc_silu_mul(ST(s)->c, g, u, N);
}

/* Pieces a row and head may take for a cache of L rows whose partials must
 * fit cap floats per row (nq heads, D + 2 floats a piece): at most 1024, no
 * more than pieces of TSC_ATTN_SPLIT keys would need; 0 when not one fits.
 * A row of length T then takes pieces of the finest size that keeps them
 * within that count (attn.cu's piece_at: TSC_ATTN_SPLIT keys while T <=
 * TSC_ATTN_SPLIT * np, larger beyond). */
int pick_np(int L, int nq, int D, size_t cap) {
    size_t np = cap / ((size_t)nq * (size_t)(D + 2));
    const size_t need = ((size_t)L + TSC_ATTN_SPLIT - 1) / TSC_ATTN_SPLIT;
    if (np > 1024) np = 1024;
    if (np > need) np = need;
    return (int)np;
}

/* The fixed split of sessions 1-18 (TSC_ATTN_FIXED=1, a benchmark switch
 * read once: every row of a session in pieces of one size, the smallest
 * multiple of TSC_ATTN_SPLIT whose count over the whole cache fits cap), for
 * measuring the pieces by row length against it. */
int pick_split_fixed(int L, int nq, int D, size_t cap) {
    const int top = (L + TSC_ATTN_SPLIT - 1) / TSC_ATTN_SPLIT * TSC_ATTN_SPLIT;
    for (int P = TSC_ATTN_SPLIT; P <= top; P += TSC_ATTN_SPLIT) {
        const size_t np = ((size_t)L + P - 1) / P;
        if (np <= 1024 && np * (size_t)nq * (size_t)(D + 2) <= cap) return P;
    }
    return 0;
}
bool attn_fixed() {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TSC_ATTN_FIXED");
        v = e && e[0] == '1';
    }
    return v;
}

/* The buffer for a row's attention partials and its pieces, for a cache of
 * L rows: the contract's score buffer (one row of att_len per query head) or
 * the stream's own small area, whichever holds more pieces (finer pieces:
 * more blocks in flight). Both counts depend only on L, the shape and the
 * area's constant size, so every session of one context length splits a
 * row of a given length alike (see cu_attn). false, with the stream failed,
 * when neither holds one piece. */
bool attn_ws(ts_stream *s, const ts_attn_args *a, int L, float **ws, int *np) {
    cu_stream *q = ST(s);
    *ws = a->att;
    *np = pick_np(L, a->nq, a->D, (size_t)a->nq * (size_t)L);
    const int np2 = pick_np(L, a->nq, a->D, q->att_small_n);
    if (np2 > *np) *ws = q->att_small, *np = np2;
    if (*np < 1) { fail(s, TS_E_UNSUPPORTED, "attention: no workspace split fits this context and head shape"); return false; }
    return true;
}

/* The kernels' arguments every row of one attention op shares. */
tsc_attn_args attn_common(const ts_attn_args *a, int L, float *ws, int np) {
    tsc_attn_args t;
    memset(&t, 0, sizeof t);
    t.nq = a->nq, t.nkv = a->nkv, t.D = a->D, t.rot = a->rot;
    t.theta = (float)a->theta, t.eps = a->eps;
    t.q_norm = a->q_norm, t.k_norm = a->k_norm, t.Kc = a->kc, t.Vc = a->vc, t.max_T = L;
    t.ws = ws, t.np_max = np;
    if (attn_fixed()) { /* the old rule, over the same buffer (its count of pieces fits it too) */
        const size_t cap = ws == a->att ? (size_t)a->nq * (size_t)L : att_small_floats();
        t.np_max = 0, t.split = pick_split_fixed(L, a->nq, a->D, cap);
    }
    return t;
}

/* rows (2..RB) of one attention op in one launch pair: their partials at
 * the op's pieces (np_max, or the fixed split; the same as one row a call,
 * so the same bits a row) fit the stream's several-row area; TSC_ATTN_ROWS=0
 * (read at every op) keeps one row a call */
bool rows_at_once(const cu_stream *q, const tsc_attn_args &t, int rows) {
    if (rows < 2 || rows > RB || !q->att_multi || env_is0("TSC_ATTN_ROWS")) return false;
    const size_t need = t.np_max > 0 ? tsc_attn_ws_bytes_np(rows, t.nq, t.D, t.np_max)
                                     : tsc_attn_ws_bytes_split(rows, t.nq, t.D, t.max_T, t.split);
    return need <= q->att_multi_n * sizeof(float);
}

/* The block mask (DFlash's draft layers: backend.h, TS_MASK_BLOCK; the
 * reference is the CPU's attn_block_mask in cpu/attn.c). Rows [0, n_kv) are
 * context rows: their keys normed and rotated at pos + i and appended with
 * their values, no query. Rows [n_kv, n) are the block: queries (qg and out
 * count from the block's first row) and keys normed and rotated at their own
 * positions, keys and values appended, then every block row attends to cache
 * rows [0, pos + n), the whole block included. That is the causal kernels'
 * work for the row at pos + n - 1 with this row's query, so each block row
 * goes through them as that row: the same scores, softmax (f32, split in
 * pieces and combined in piece order) and weighted sum as a decode row over
 * pos + n keys; where the CPU sums in one pass, this sums piece by piece (a
 * drafter's rounding moves only acceptance: its drafts are verified). No
 * output gate when no_gate (Qwen3-style draft layers).
 * The position is the host step record's, not the device copy: a DFlash
 * context pass has no embedding (the op that copies the record to the
 * device), so the device record may still hold the last target pass's.
 * Inside a capture (the drafter's block pass, model/dflash.c, which starts
 * with the embedding) it is the device record's: the kernels add it to the
 * rows' offsets, and the pieces are those of the whole cache (a replay's
 * position is not known here), which moves a block row's rounding, hence
 * at most the acceptance, never the verified output. */
void attn_block(ts_stream *s, const ts_attn_args *a) {
    cu_stream *q = ST(s);
    const int cap = q->capturing;
    const int n = a->n, n_kv = a->n_kv, hpos = s->step.pos, pos = cap ? 0 : hpos, D = a->D;
    const int L = a->kv_len > 0 && a->kv_len <= a->att_len ? a->kv_len : a->att_len;
    if (n < 1 || n_kv < 0 || n_kv > n || hpos < 0 || hpos + n > L) {
        fail(s, TS_E_ARG, "block-mask attention: bad context rows, or rows past the cache or the scores scratch");
        return;
    }
    float *ws;
    int np;
    if (!attn_ws(s, a, L, &ws, &np)) return;
    const int qw = a->no_gate ? D : 2 * D, qd = a->nq * qw, kvd = a->nkv * D;
    tsc_attn_args t = attn_common(a, L, ws, np);
    if (cap) t.pos_dev = &q->dstep->step.pos;
    t.no_gate = a->no_gate;
    t.qg = a->qg, t.phase = 1;
    /* context rows: keys and values only */
    t.no_q = 1;
    for (int r0 = 0; r0 < n_kv; r0 += RB) {
        t.n = n_kv - r0 < RB ? n_kv - r0 : RB, t.pos = pos + r0;
        t.k = a->k + (size_t)r0 * kvd, t.v = a->v + (size_t)r0 * kvd;
        tsc_attn_decode(q->c, &t);
    }
    /* block rows: queries too, all appended before any row attends */
    t.no_q = 0;
    for (int r0 = n_kv; r0 < n; r0 += RB) {
        t.n = n - r0 < RB ? n - r0 : RB, t.pos = pos + r0;
        t.qg = a->qg + (size_t)(r0 - n_kv) * qd, t.k = a->k + (size_t)r0 * kvd, t.v = a->v + (size_t)r0 * kvd;
        tsc_attn_decode(q->c, &t);
    }
    /* every block row as the row at pos + n - 1 (keys [0, pos + n)): all in
     * one launch pair when their partials fit the several-row area (the
     * same pieces as one row a call: same_pos), else one row a call */
    const int nb = n - n_kv;
    if (rows_at_once(q, t, nb)) {
        t.n = nb, t.pos = pos + n - 1, t.phase = 2, t.same_pos = 1, t.ws = q->att_multi;
        t.qg = a->qg, t.out = a->out;
        tsc_attn_decode(q->c, &t);
        return;
    }
    for (int j = 0; j < n - n_kv; j++) {
        t.n = 1, t.pos = pos + n - 1, t.phase = 2;
        t.qg = a->qg + (size_t)j * qd, t.out = a->out + (size_t)j * a->nq * D;
        tsc_attn_decode(q->c, &t);
    }
}

/* The attention's combine also makes out's digits for the product that
 * reads out next (a->out_w, o_proj) when that product would take 8-bit
 * digits made once (tsc_digits_group) and the switch is on (tsc_ctx.attn_dig,
 * the default; TSC_ATTN_DIG=0 off): attn.cu's attn_digits, the same bytes as the product's
 * own staging; for the call that writes all of the op's rows (t->n = a->n). */
void attn_digits_for(cu_stream *q, const ts_attn_args *a, tsc_attn_args *t) {
    tsc_weight d;
    if (!q->c->attn_dig || !a->out_w || !dev_w_find(q->base.be, a->out_w, &d) || d.cols != (int64_t)a->nq * a->D) return;
    /* (a group that is not a divisor of the head: tsc_attn_decode makes none,
     * and the product stages as without) */
    const int g = tsc_digits_group(q->c, &d, a->n);
    if (g) t->dg = q->c->dg, t->dg_group = g;
}

/* One row per call: the partials of a row go to the contract's score
 * buffer (one row of att_len per query head), or to the stream's own small
 * area for contexts shorter than a head's partial. The position comes from
 * the device step record plus the row.
 * The piece size changes a row's rounding, so it is a function of the row's
 * own length and of a piece count chosen from what every session of one
 * context length has alike: the cache's rows (kv_len), the shape, one row of
 * scores per query head (a verify session's buffer holds more rows and may
 * be longer: the MTP cache's slack) and the small area (att_small_floats(),
 * the same for every stream). Then a verify row, a decode row and a plain
 * session's row of the same position have the same bits, in MTP and DFlash
 * sessions alike. */
void cu_attn(ts_stream *s, ts_mode m, const ts_attn_args *a) {
    op_timer opt_(s, OPT_ATTN);
    flush(s);
    cu_stream *q = ST(s);
    if (dead(s)) return;
    if (a->mask == TS_MASK_BLOCK) {
        attn_block(s, a);
        return;
    }
    if (a->mask != TS_MASK_CAUSAL || a->no_gate) {
        fail(s, TS_E_UNSUPPORTED, "the CUDA attention knows the causal (gated) and the block masks only");
        return;
    }
    const int L = a->kv_len > 0 && a->kv_len <= a->att_len ? a->kv_len : a->att_len, D = a->D;
    float *ws;
    int np;
    if (!attn_ws(s, a, L, &ws, &np)) return;
    const int qd = a->nq * 2 * D, kvd = a->nkv * D;
    tsc_attn_args t = attn_common(a, L, ws, np);
    t.pos_dev = &q->dstep->step.pos;
    /* every row's q/k norms, RoPE and K/V append first (the output rows
     * below overwrite the v rows of later rows: the model's out is big2),
     * all rows in one launch (a block a row and head, so the same bits as
     * 16 rows a launch, which was 128 launches of ~6 us a 2048-row layer of
     * the 9B under ncu, session 21) */
    t.n = a->n, t.pos = 0, t.phase = 1, t.qg = a->qg, t.k = a->k, t.v = a->v, t.out = a->out;
    tsc_attn_decode(q->c, &t);
    if (m == TS_MODE_PREFILL && a->n > RB && attn_prefill_on()) {
        /* a prompt chunk: all rows at once, each K/V tile read once per
         * block of queries (attn.cu: another summation order than the row
         * kernels; prompt chunks only) */
        t.phase = 0;
        /* on the tensor cores through cuBLAS when blas_on (TSC_ATTN_BLAS=0:
         * the f32 flash kernel for the attention alone) */
        if (!env_is0("TSC_ATTN_BLAS") && tsc_attn_blas_fits(&t, s->step.pos, q->blas_bytes) && blas_on(q))
            tsc_attn_blas(q->c, &t, s->step.pos, q->blas_ws, q->blas_bytes);
        else
            tsc_attn_prefill(q->c, &t);
        return;
    }
    /* a verify's rows in one launch pair when their partials fit the
     * several-row area: the same pieces (np_max, or the fixed split) as one
     * row a call, so the same bits a row (its pieces depend on its own
     * length only); one row a call was 13.8 us a row and layer on the 9B
     * (session 19), a 4-row verify's attention 4 launch pairs a layer */
    const bool once = rows_at_once(q, t, a->n);
    if (once || a->n == 1) attn_digits_for(q, a, &t);
    if (once) {
        t.phase = 2, t.ws = q->att_multi;
        tsc_attn_decode(q->c, &t);
        return;
    }
    for (int i = 0; i < a->n; i++) {
        t.n = 1, t.pos = i, t.phase = 2;
        t.qg = a->qg + (size_t)i * qd, t.k = a->k + (size_t)i * kvd, t.v = a->v + (size_t)i * kvd;
        t.out = a->out + (size_t)i * a->nq * D;
        tsc_attn_decode(q->c, &t);
    }
}

/* ---- GDN: decode, verify, lazy rollback ----
 * The contract (backend.h, ts_gdn_args; cpu/gdn.c is the reference): the
 * state pairs are chosen by the step record's parities; a verify
 * (step.record) makes the block-start state the snapshot and tapes its rows'
 * inputs (pre-conv qkv, a, b); the pending rows of a lazy rollback
 * (step.pend) are replayed from the tape first. Here every one of those is a
 * run of rows through the step kernels (gdn.cu for 128/128 heads with 4
 * taps, the three general kernels above otherwise) from a source state into
 * a destination state, so a replayed or verified row has the bits of a
 * decode row: the kernels are row-exact and a row's arithmetic does not
 * depend on where its state lives. The four ways a pass starts (with P
 * pending rows; live = the parities' buffers, snap = the others):
 *
 *   plain (no record, P = 0)  the rows in place on live;
 *   P, no record              tape rows snap conv -> live conv, snap S in
 *                             place; then the rows, in place; the caller
 *                             flips par_S (snap S is the live one now);
 *   record, P = 0             the rows from live into snap (conv and S): the
 *                             block start stays where it was and becomes the
 *                             snapshot when the caller flips both parities
 *                             (a run-ahead step, TS_REC_SWAP, is this without
 *                             the tape: one row, undone by flipping back);
 *   record, P                 tape rows in place on snap (the new block
 *                             start), then the rows from snap into live;
 *                             no flip;
 *   prefill chunk (TS_MODE_PREFILL, n > 1, with the chunked scratch): the
 *                             caller treats it as chunked (no flip): P rows
 *                             snap -> live first (gdn_materialize), then the
 *                             rows in place. CUDA runs prompt chunks through
 *                             the same row kernels.
 *
 * Unlike the CPU, no prepared rows are kept in the tape (tape_prep is
 * unused): the replay recomputes the conv from the taped inputs and the
 * snapshot's conv state, the very window the verify saw, with the same
 * kernel, so the prepared values are the same bits; the conv is a small part
 * of a GPU row (one thread per channel).
 *
 * Graphs. In a drafting session (a tape) the first four are one code path
 * whose host choices are only the structure: whether a pending run precedes
 * the rows (P > 0: the model keys such passes apart, qwen35.c) and whether
 * the rows are taped (verify: its own key). Everything else is read from
 * the device record at run time: the buffers of both runs (gsel, computed
 * from the record by gdn_sel_of as embed copies it to the device) and the
 * pending count (step.pend: the run is launched for up to Rv rows and its
 * kernels walk that many). So one captured graph per (kind, rows) replays
 * every verify of M+1 rows after any rollback and any number of parity
 * flips, and a pass runs the same kernels captured or not. A session
 * without drafting has one pair and no pending rows: its rows run in place.
 * Uncaptured, by need: the prompt chunks (prefill passes are never
 * captured) and gdn_materialize (it runs outside a forward, where no embed
 * has written the record; a test or a state save calls it, not the token
 * loop). */

/* One run of rows: qkv/a/b rows [0, n) (z and o NULL: no output), state
 * from (conv_in, S_in) into (conv, S), in place where an input is NULL; or,
 * with sel, both ends chosen on the device from the pairs (conv, conv_alt),
 * (S, S_alt), and n_dev a device row count (tsc_gdn_args). */
struct gdn_run {
    const float *qkv, *a, *b, *z;
    float *o;
    int n;
    const float *conv_in, *S_in;
    float *conv, *S, *conv_alt, *S_alt;
    const int32_t *sel, *n_dev;
};

/* The run in blocks of blk rows through the prepared rows' workspace ws:
 * the first block reads the source state, later ones continue in place on
 * the destination. */
void gdn_rows(cu_stream *q, const ts_gdn_args *a, const gdn_run &r, float *ws, int blk, bool fused) {
    const int C = 2 * a->Hk * a->dk + a->Hv * a->dv, Vd = a->Hv * a->dv;
    /* one row with output: the GDN kernel also makes out's digits for the
     * product that reads out next (a->out_w), when that product would take
     * 8-bit digits made once (tsc_digits_group). Measured (H100, s32-run4,
     * TSC_GDN_DIG=0 the A/B): decode 9B +1.2%, 35B-A3B-8L +0.9%, the 0.8B
     * and the default model +0.3%; but with its rows' digits made in turn
     * (a cluster read and a warp sum a row) a 4-row verify's GDN cost more
     * than the k_stage_digits launch it saved: the 9B's MTP verify 3.27
     * against 3.22 ms a block, so several rows keep that launch. */
    int dgg = 0;
    tsc_weight d;
    /* (several rows too with TSC_GDN_DIG=2, tsc_ctx.gdn_dig: with the rows
     * by several warps, the default since s34-run1, still no gain there:
     * 3.215-3.218 ms a 9B MTP 3 block against 3.194-3.215 without) */
    if (fused && r.o && a->out_w && q->c->gdn_dig && (r.n == 1 || (r.n <= blk && q->c->gdn_dig == 2)) && !r.n_dev &&
        dev_w_find(q->base.be, a->out_w, &d) && d.cols == Vd)
        dgg = tsc_digits_group(q->c, &d, r.n);
    for (int r0 = 0; r0 < r.n; r0 += blk) {
        const int nr = r.n - r0 < blk ? r.n - r0 : blk;
        tsc_gdn_args g;
        memset(&g, 0, sizeof g);
        g.n = nr, g.Hk = a->Hk, g.Hv = a->Hv, g.dk = a->dk, g.dv = a->dv, g.K = a->K;
        g.qkv = r.qkv + (size_t)r0 * C;
        g.z = r.o ? r.z + (size_t)r0 * Vd : NULL;
        g.b = r.b + (size_t)r0 * a->Hv, g.a = r.a + (size_t)r0 * a->Hv;
        g.conv_state = r.conv, g.conv_w = a->conv_w, g.S = r.S, g.neg_A = a->neg_A, g.dt_bias = a->dt_bias;
        g.norm_w = a->norm, g.eps = a->eps, g.o = r.o ? r.o + (size_t)r0 * Vd : NULL, g.ws = ws;
        g.conv_in = r0 ? NULL : r.conv_in, g.S_in = r0 ? NULL : r.S_in;
        g.conv_alt = r.conv_alt, g.S_alt = r.S_alt;
        g.sel = r.sel, g.cont = r0 > 0;
        g.n_dev = r.n_dev, g.n_base = r0;
        if (dgg) g.dg = q->c->dg, g.dg_group = dgg;
        if (fused) {
            tsc_gdn_step(q->c, &g);
            continue;
        }
        if (tsc_error(q->c)) return;
        cudaStream_t cs = q->c->stream;
        k_gdn_conv<<<(unsigned)((C + 127) / 128), 128, 0, cs>>>(g, C, ws);
        k_gdn_l2<<<dim3((unsigned)(2 * a->Hk), nr), 128, 0, cs>>>(g, ws, C);
        k_gdn_scan<<<a->Hv, (unsigned)((a->dv + 31) / 32 * 32), 0, cs>>>(g, ws);
        tsc_launched_(q->c, "GDN step (general head sizes)");
    }
}

/* The shape check shared by the op and the materialization; fused: the
 * gdn.cu kernels take it. */
bool gdn_shape(ts_stream *s, const ts_gdn_args *a, bool *fused) {
    *fused = a->dk == 128 && a->dv == 128 && a->K == 4;
    if (!*fused && (a->dk > GDK_MAX || a->dv > 1024 || a->K > GK_MAX || a->K < 1 || a->Hv % a->Hk)) {
        char msg[160];
        snprintf(msg, sizeof msg, "GDN with key/value heads of %d/%d and a conv of %d taps on CUDA: need dk <= %d, "
                 "dv <= 1024, K <= %d", a->dk, a->dv, a->K, GDK_MAX, GK_MAX);
        fail(s, TS_E_UNSUPPORTED, msg);
        return false;
    }
    return true;
}

/* The prepared rows' workspace for runs of up to `need` rows, and its rows:
 * the verify's buffer (a->rows, a->cap rows) when it holds them, else the
 * chunked prefill's conv rows (the session's max_rows: every pass larger
 * than the verify buffer is a prompt chunk of at most max_rows rows), else
 * the one-row buffer. */
float *gdn_ws(const ts_gdn_args *a, int need, int *blk) {
    if (need > RB) need = RB;
    float *ws;
    int cap;
    if (a->rows && a->cap >= need) ws = a->rows, cap = a->cap;
    else if (a->pf_conv) ws = a->pf_conv, cap = need;
    else ws = a->rows, cap = a->cap > 0 ? a->cap : 1;
    *blk = cap < RB ? cap : RB;
    return ws;
}

/* The taped rows a lazy rollback keeps, replayed from the snapshot into the
 * live state (no output): gdn_materialize's work, and the first half of a
 * prompt chunk after a rollback. Host-chosen buffers: never captured. */
void gdn_replay_into_live(cu_stream *q, const ts_gdn_args *a, int P, float *conv, float *S, const float *snC,
                          const float *snS, float *ws, int blk, bool fused) {
    gdn_run t = {a->tape_qkv, a->tape_a, a->tape_b, NULL, NULL, P, snC, snS, conv, S, NULL, NULL, NULL, NULL};
    gdn_rows(q, a, t, ws, blk, fused);
}

void cu_gdn(ts_stream *s, ts_mode m, const ts_gdn_args *a) {
    op_timer opt_(s, OPT_GDN);
    flush(s);
    cu_stream *q = ST(s);
    if (dead(s)) return;
    const ts_step *sp = &s->step;
    bool fused;
    if (!gdn_shape(s, a, &fused)) return;
    /* pair: the second buffers exist (drafting or run-ahead); tape: drafting */
    const bool pair = a->S[1] && a->conv[1];
    const bool tape = pair && a->tape_qkv;
    const bool record = tape && sp->record == TS_REC_TAPE;
    const int P = tape ? sp->pend : 0;
    if (P < 0 || (tape && P > a->Rv) || (record && a->n > a->Rv)) {
        fail(s, TS_E_ARG, "GDN: more pending or verified rows than the tape holds");
        return;
    }
    if (sp->record == TS_REC_SWAP && (!pair || a->n != 1 || P)) {
        fail(s, TS_E_ARG, "GDN: a run-ahead step needs the state pairs, one row and no pending rows");
        return;
    }
    const int ps = sp->par_S & 1, pc = sp->par_conv & 1;
    if ((ps || pc) && !pair) { fail(s, TS_E_ARG, "GDN: a parity of 1 without the second state buffers"); return; }
    float *S = a->S[ps], *conv = a->conv[pc];
    if (!S || !conv) { fail(s, TS_E_ARG, "GDN: no state buffers"); return; }
    const bool chunked = m == TS_MODE_PREFILL && a->n > 1 && a->pf_conv;
    int blk;
    if (!pair || chunked) {
        /* one buffer each (no drafting, no run-ahead), or a prompt chunk:
         * host-chosen buffers */
        if (q->capturing && chunked) { fail(s, TS_E_ARG, "GDN: a prompt chunk inside a graph capture"); return; }
        float *ws = gdn_ws(a, a->n > P ? a->n : P, &blk);
        if (P) gdn_replay_into_live(q, a, P, conv, S, a->conv[pc ^ 1], a->S[ps ^ 1], ws, blk, fused);
        if (chunked && fused && a->n > RB && a->n <= 65535 && a->out && gdn_prefill_on()) { /* (rows: grid.y) */
            /* a prompt chunk in one pass of five kernels (gdn.cu): the
             * prepared rows of the whole chunk in the chunked scratch
             * (max_rows x C floats) */
            tsc_gdn_args g;
            memset(&g, 0, sizeof g);
            g.n = a->n, g.Hk = a->Hk, g.Hv = a->Hv, g.dk = a->dk, g.dv = a->dv, g.K = a->K;
            g.qkv = a->qkv, g.z = a->z, g.b = a->b, g.a = a->a;
            g.conv_state = conv, g.conv_w = a->conv_w, g.S = S, g.neg_A = a->neg_A, g.dt_bias = a->dt_bias;
            g.norm_w = a->norm, g.eps = a->eps, g.o = a->out, g.ws = a->pf_conv;
            /* the WY form's records in the stream's cuBLAS workspace (free
             * between the products that use it), or in their own scratch
             * where the stream has none (wy_ws_of) */
            if (gdn_wy_on()) {
                if (q->blas_ws) g.wy = (float *)q->blas_ws, g.wy_rows = tsc_gdn_wy_rows(q->blas_bytes, a->Hv);
                else if (q->wy_ws) g.wy = (float *)q->wy_ws, g.wy_rows = tsc_gdn_wy_rows(q->wy_bytes, a->Hv);
            }
            tsc_gdn_prefill(q->c, &g);
            return;
        }
        gdn_run own = {a->qkv, a->a, a->b, a->z, a->out, a->n, NULL, NULL, conv, S, NULL, NULL, NULL, NULL};
        gdn_rows(q, a, own, ws, blk, fused);
        return;
    }
    /* the token path of a session with the pairs: the buffers from the
     * device record (gsel; a run-ahead step's are a verify's with nothing
     * pending), the pending run for up to Rv rows (its count from the
     * record), then the pass's rows (the table above) */
    const int need = P ? (a->n > a->Rv ? a->n : a->Rv) : a->n;
    float *ws = gdn_ws(a, need, &blk);
    dev_step *d = q->dstep;
    if (P) {
        gdn_run t = {a->tape_qkv, a->tape_a, a->tape_b, NULL, NULL, a->Rv, NULL, NULL,
                     a->conv[0], a->S[0], a->conv[1], a->S[1], d->gsel, &d->step.pend};
        gdn_rows(q, a, t, ws, blk, fused);
    }
    gdn_run own = {a->qkv, a->a, a->b, a->z, a->out, a->n, NULL, NULL,
                   a->conv[0], a->S[0], a->conv[1], a->S[1], d->gsel + 4, NULL};
    gdn_rows(q, a, own, ws, blk, fused);
    if (record) { /* last: the pending rows above were read from the old tape */
        const int C = 2 * a->Hk * a->dk + a->Hv * a->dv;
        cudaStream_t cs = q->c->stream;
        cudaError_t e = cudaMemcpyAsync(a->tape_qkv, a->qkv, sizeof(float) * (size_t)a->n * C, cudaMemcpyDeviceToDevice, cs);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(a->tape_a, a->a, sizeof(float) * (size_t)a->n * a->Hv, cudaMemcpyDeviceToDevice, cs);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(a->tape_b, a->b, sizeof(float) * (size_t)a->n * a->Hv, cudaMemcpyDeviceToDevice, cs);
        if (e != cudaSuccess) io_err(s, "GDN tape", e);
    }
}

/* A lazy rollback applied eagerly: the live state becomes the snapshot
 * advanced by the first pend taped rows (parities unchanged; the snapshot
 * and the tape stay as they are). */
void cu_gdn_materialize(ts_stream *s, const ts_gdn_args *a) {
    flush(s);
    cu_stream *q = ST(s);
    const int P = s->step.pend;
    if (dead(s) || !P) return;
    bool fused;
    if (!gdn_shape(s, a, &fused)) return;
    if (!a->tape_qkv || !a->S[1] || !a->conv[1] || P < 0 || P > a->Rv) {
        fail(s, TS_E_ARG, "GDN materialize: pending rows without a tape that holds them");
        return;
    }
    if (q->capturing) { fail(s, TS_E_ARG, "GDN materialize inside a graph capture"); return; }
    const int ps = s->step.par_S & 1, pc = s->step.par_conv & 1;
    int blk;
    float *ws = gdn_ws(a, P, &blk);
    gdn_replay_into_live(q, a, P, a->conv[pc], a->S[ps], a->conv[pc ^ 1], a->S[ps ^ 1], ws, blk, fused);
}

/* The kernels' view of evenly spaced experts: d0 the first, `stride`
 * bytes to the next. */
xw xw_of(const tsc_weight &d0, int64_t stride) {
    xw o;
    const uint8_t *b0 = (const uint8_t *)d0.data;
    o.base = b0, o.stride = stride, o.rows = d0.rows, o.cols = d0.cols, o.dtype = d0.dtype, o.bits = d0.bits;
    o.sdt = d0.sdtype;
    o.soff = d0.scales ? (const uint8_t *)d0.scales - b0 : 0;
    o.boff = d0.biases ? (const uint8_t *)d0.biases - b0 : 0;
    int lg = 0;
    while (d0.group > 1 && (1 << lg) < d0.group) lg++;
    o.lg = lg;
    return o;
}

bool experts_of(ts_stream *s, const ts_weight *e, int E, xw *o) {
    tsc_weight d0, d1;
    if (!dev_w(s, &e[0], &d0)) return false;
    const uint8_t *b0 = (const uint8_t *)d0.data;
    int64_t stride = 0;
    if (E > 1) {
        if (!dev_w(s, &e[1], &d1)) return false;
        stride = (const uint8_t *)d1.data - b0;
        tsc_weight dl;
        if (!dev_w(s, &e[E - 1], &dl)) return false;
        if ((const uint8_t *)dl.data != b0 + (int64_t)(E - 1) * stride || stride <= 0) {
            fail(s, TS_E_UNSUPPORTED, "MoE on CUDA: the experts' slots are not evenly spaced in the weight arena");
            return false;
        }
    }
    *o = xw_of(d0, stride);
    return true;
}

/* Prompt chunks of more than RB rows through the grouped tensor-core
 * products (TSC_MOE_CHUNK=0: 16 rows at a time, as decode). Read at every op. */
bool moe_chunk_on() { return !env_is0("TSC_MOE_CHUNK"); }

/* The chunk MoE's slots merged (TSC_MOE_MERGED=0: slot by slot, for
 * comparison). Read at every op. */
bool moe_merged_on() { return !env_is0("TSC_MOE_MERGED"); }

/* One product over a chunk's n rows (the chunk MoE's router and shared
 * expert): the tensor-core kernel when it takes the weights, else the row
 * kernels 16 rows a launch. Never cuBLAS: a streamed MoE layer runs a chunk
 * in groups of its rows (ts_moe_args.pass_n), and the streamed output must
 * equal the resident one bit for bit, so a row's bits here must not depend
 * on how many rows share the call; q4gemm.cu's do not (any tiling gives a
 * row the same sums), cuBLAS's may (it picks its kernel by shape; s20-run2
 * saw the expert-cache tests differ with it). */
void chunk_linear(cu_stream *q, const tsc_weight *const *w, int nw, const float *x, float *const *y, int n) {
    bool g = true;
    for (int i = 0; i < nw; i++) g = g && tsc_gemm_takes(w[i]) && w[i]->cols == w[0]->cols && w[i]->group == w[0]->group &&
                                     w[i]->sdtype == w[0]->sdtype;
    if (g) {
        tsc_linear_gemm(q->c, w, nw, x, y, n, q->gemm_ws);
        return;
    }
    for (int i = 0; i < nw; i++) rows_linear(q->c, &w[i], 1, x, &y[i], n); /* formats may differ */
}

/* A counting sort of m items by expert (item i's expert ex[i * step]; ids
 * out of [0, E) count as 0's) into pos[i], the item's place in expert order,
 * and the row tiles of that order, 64 rows at most: (expert, first, rows, 0)
 * quads in tiles; their count is returned. cnt: E + 1 ints of scratch. */
int by_expert(const int32_t *ex, size_t step, size_t m, int E, int *cnt, int32_t *pos, int32_t *tiles) {
    memset(cnt, 0, sizeof(int) * ((size_t)E + 1));
    auto e_of = [&](size_t i) { const int e = ex[i * step]; return e >= 0 && e < E ? e : 0; };
    for (size_t i = 0; i < m; i++) cnt[e_of(i) + 1]++;
    for (int e = 0; e < E; e++) cnt[e + 1] += cnt[e];
    int nt = 0;
    for (int e = 0; e < E; e++)
        for (int p0 = cnt[e]; p0 < cnt[e + 1]; p0 += 64) {
            tiles[4 * nt] = e, tiles[4 * nt + 1] = p0, tiles[4 * nt + 2] = cnt[e + 1] - p0 < 64 ? cnt[e + 1] - p0 : 64;
            tiles[4 * nt + 3] = 0;
            nt++;
        }
    for (size_t i = 0; i < m; i++) pos[i] = cnt[e_of(i)]++;
    return nt;
}

__global__ void k_moe_slot_acc(float *t, const float *y, const float *wts, int k, int j, int H) {
    const int r = blockIdx.y;
    const float w = wts[(int64_t)r * k + j];
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < H; c += gridDim.x * blockDim.x) {
        const float v = __fmul_rn(w, y[(int64_t)r * H + c]);
        t[(int64_t)r * H + c] = j ? __fadd_rn(t[(int64_t)r * H + c], v) : v;
    }
}

/* t[r, c0 + c] = sum_j w[r, j] y[inv[r, j], c] in slot order (c < cw; y
 * [pairs, cw] the routed experts' down outputs of one column chunk), with
 * k_moe_slot_acc's operations (a product, then an add per slot): the merged
 * slots give the slot-by-slot path's bits (their products are the same per
 * element), which the engine test checks */
__global__ void k_moe_pairs_acc(float *t, const float *y, const int32_t *inv, const float *wts, int k, int c0, int cw,
                                int H) {
    const int r = blockIdx.y;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cw; c += gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < k; j++) {
            const float v = __fmul_rn(wts[(int64_t)r * k + j], y[(int64_t)inv[(int64_t)r * k + j] * cw + c]);
            acc = j ? __fadd_rn(acc, v) : v;
        }
        t[(int64_t)r * H + c0 + c] = acc;
    }
}

/* A prompt chunk's MoE layer (n > RB rows, 4-bit MLX experts the tensor-core
 * products take): the router and the shared expert over all rows at once;
 * the routes read back (prefill is never captured: one host round trip a
 * layer); then, by default, all (row, slot) pairs sorted by expert and each
 * expert's pairs in tiles of 64: gate and up in one grouped launch (x rows
 * gathered at load from the rows staged once), SwiGLU, down in column chunks
 * whose [pairs, chunk] outputs fit b2, each row's k slots summed in slot
 * order (k_moe_pairs_acc): each selected expert's weights read once a chunk.
 * Where the pairs do not fit the scratch (or TSC_MOE_MERGED=0): slot by
 * slot, the rows sorted by their j-th expert, y_j into b0, t += w_j y_j
 * (the same products and sums: the same bits, which the engine test
 * checks). t += sigmoid(gate) * shared last. Rounds as the chunk products do
 * (bf16 x): prompt chunks only. false: not taken (shapes), nothing done. */
/* Whether a MoE layer of this pass takes moe_chunk (the shapes it needs):
 * cu_moe and cu_moe_route ask the same question, so a streamed layer routes
 * with the very products its resident form would. */
bool moe_chunk_takes(const cu_stream *q, ts_mode m, const ts_moe_args *a, const tsc_weight &g0, const tsc_weight &u0,
                     const tsc_weight &d0, const tsc_weight &sg) {
    /* the form by the pass (a streamed group of its rows takes the pass's) */
    const int n = a->n, pn = a->pass_n > 0 ? a->pass_n : n, H = a->H, Im = (int)g0.rows, Is = (int)sg.rows;
    return m == TS_MODE_PREFILL && pn > RB && moe_chunk_on() && gemm_on() && n <= q->rows &&
           n <= 65535 /* grid.y of the sums */ && tsc_gemm_takes(&g0) && tsc_gemm_takes(&u0) && tsc_gemm_takes(&d0) &&
           g0.cols == H && u0.cols == H && d0.cols == Im && u0.rows == Im && d0.rows == H && g0.group == u0.group &&
           g0.sdtype == u0.sdtype && (size_t)Im <= (size_t)a->F && (size_t)Is <= (size_t)a->F && H <= q->cols &&
           Im <= q->cols;
}

/* A chunk's router logits and routes into the stream's route area (ids,
 * then weights): the router as one product, the routes of all the chunk's
 * rows in one launch (a warp a row: a row's route does not depend on the
 * launch; it was 16 rows a launch, 32 launches of ~7 us a 512-row layer of
 * the 35B-A3B under ncu, session 21). */
void chunk_routes(cu_stream *q, const ts_moe_args *a, const tsc_weight &rw, int32_t *ids, float *wts) {
    const tsc_weight *pr[1] = {&rw};
    float *yr[1] = {a->logits};
    chunk_linear(q, pr, 1, a->u, yr, a->n);
    tsc_moe_route(q->c, a->logits, a->n, a->E, a->topk, a->norm_topk, ids, wts);
}

/* nx: the experts' index range (E; the slot count when the routes are a
 * pool's slots, a->route_slots: then the routes come from the host and the
 * router does not run). The caller checked moe_chunk_takes. */
void moe_chunk(ts_stream *s, const ts_moe_args *a, const tsc_weight &g0, const tsc_weight &u0, const tsc_weight &d0,
               const xw &g, const xw &u, const xw &d, const tsc_weight &rw, const tsc_weight &sg, const tsc_weight &su,
               const tsc_weight &sd, const tsc_weight &sgw, int nx) {
    cu_stream *q = ST(s);
    const int n = a->n, H = a->H, E = nx, k = a->topk, Im = (int)g0.rows, Is = (int)sg.rows;
    tsc_ctx *c = q->c;
    flush(s); /* a pending norm of u */
    int32_t *ids = q->route;
    float *wts = (float *)(ids + (size_t)q->rows * TOPK_MAX), *gl = wts + (size_t)q->rows * TOPK_MAX;
    int32_t *maps = q->maps;
    const size_t tiles_slot = tiles_slot_of(q->rows), map_cap = q->maps_n;
    /* router and routes (streamed experts: the routes moe_route gave, as slots) */
    if (a->route_slots) {
        tsc_write(c, ids, a->route_slots, sizeof(int32_t) * (size_t)n * k);
        tsc_write(c, wts, a->route_w, sizeof(float) * (size_t)n * k);
    } else {
        chunk_routes(q, a, rw, ids, wts);
    }
    /* the shared expert: gate, up and its gate logit, SwiGLU, down into b0's second half */
    float *yj = a->b0, *shared = a->b0 + (size_t)a->R * H; /* b0 rows hold >= 2H */
    {
        const tsc_weight *ps[2] = {&sg, &su};
        float *ys[2] = {a->b1, a->b2};
        chunk_linear(q, ps, 2, a->u, ys, n);
        const tsc_weight *pg[1] = {&sgw};
        float *yg[1] = {gl};
        chunk_linear(q, pg, 1, a->u, yg, n);
        tsc_silu_mul(c, a->b1, a->b2, (size_t)n * Is);
        const tsc_weight *pd[1] = {&sd};
        float *yd[1] = {shared};
        chunk_linear(q, pd, 1, a->b1, yd, n);
    }
    /* the routes to the host: per slot, the rows by expert (counting sort) and the tiles */
    const size_t P = (size_t)n * k;
    int32_t *hid = (int32_t *)malloc(sizeof(int32_t) * P), *hpos = (int32_t *)malloc(sizeof(int32_t) * P);
    int32_t *hmap = (int32_t *)malloc(sizeof(int32_t) * map_cap);
    int *cnt = (int *)malloc(sizeof(int) * ((size_t)E + 1));
    if (!hid || !hpos || !hmap || !cnt) {
        free(hid), free(hpos), free(hmap), free(cnt);
        fail(s, TS_E_NOMEM, "MoE chunk: host route tables");
        return;
    }
    if (a->route_slots) memcpy(hid, a->route_slots, sizeof(int32_t) * P);
    else tsc_read(c, hid, ids, sizeof(int32_t) * P);
    void *gws0 = q->gemm_ws;
    const size_t gbytes = q->gemm_bytes;
    /* tiles: a partial one per distinct expert at most (at most a->E of
     * them whatever the index range) */
    const size_t ntmax = P / 64 + ((size_t)a->E < P ? (size_t)a->E : P) + 1;
    /* down's outputs in column chunks of cw (a multiple of 128): [P, cw] in b2 */
    const size_t b2cap = (size_t)a->R * (size_t)a->F;
    int cw = (int)((b2cap / P) / 128 * 128);
    if (cw > H) cw = H;
    if (P * (size_t)Im <= b2cap && cw >= 1 && (size_t)cw * P <= b2cap && tsc_gemm_ws_bytes((int)P + 64, Im) <= gbytes &&
        4 * ntmax + 2 * P <= map_cap && moe_merged_on()) {
        /* all slots at once: the (row, slot) pairs sorted by expert, each
         * expert's pairs in 64-row tiles; gate and up gathered at load from
         * the rows staged once; SwiGLU; the hidden rows staged once; down in
         * column chunks whose [pairs, chunk] outputs fit b2, each summed
         * over the slots in slot order. Each selected expert's weights are
         * read once a chunk. */
        int32_t *tb = hmap, *ordp = hmap + 4 * ntmax, *inv = ordp + P; /* the tiles first: 16-byte aligned */
        const int nt = by_expert(hid, 1, P, E, cnt, inv, tb);
        for (size_t pi = 0; pi < P; pi++) ordp[inv[pi]] = (int32_t)(pi / (size_t)k); /* the pair's row */
        tsc_write(c, maps, hmap, sizeof(int32_t) * (4 * ntmax + 2 * P));
        free(hid), free(hpos), free(hmap), free(cnt);
        const int32_t *dtb = maps, *dord = maps + 4 * ntmax, *dinv = dord + P;
        const tsc_weight *wgu[2] = {&g0, &u0};
        const int64_t sgu[2] = {g.stride, u.stride};
        float *ygu[2] = {a->b1, a->b2};
        tsc_gemm_stage(c, a->u, n, H, n, gws0);
        tsc_gemm_staged(c, wgu, sgu, 2, n, dtb, nt, dord, NULL, ygu, gws0);
        tsc_silu_mul(c, a->b1, a->b2, P * (size_t)Im);
        tsc_gemm_stage(c, a->b1, (int)P, Im, (int)P + 64, gws0);
        const int ssz = d0.sdtype == TS_DTYPE_F32 ? 4 : 2;
        for (int c0 = 0; c0 < H; c0 += cw) {
            const int rws = H - c0 < cw ? H - c0 : cw;
            tsc_weight dv = d0; /* rows c0 .. c0 + rws of each expert's down */
            dv.rows = rws;
            dv.data = (const uint8_t *)d0.data + (size_t)c0 * (size_t)(Im / 2);
            dv.scales = (const uint8_t *)d0.scales + (size_t)c0 * (size_t)(Im / d0.group) * ssz;
            dv.biases = (const uint8_t *)d0.biases + (size_t)c0 * (size_t)(Im / d0.group) * ssz;
            const tsc_weight *wd[1] = {&dv};
            const int64_t sdd[1] = {d.stride};
            float *yd[1] = {a->b2};
            tsc_gemm_staged(c, wd, sdd, 1, (int)P + 64, dtb, nt, NULL, NULL, yd, gws0);
            k_moe_pairs_acc<<<dim3((unsigned)((rws + 255) / 256), n), 256, 0, c->stream>>>(a->t, a->b2, dinv, wts, k, c0,
                                                                                        rws, H);
            tsc_launched_(c, "MoE chunk (slot sums)");
        }
        k_moe_combine<<<dim3((unsigned)((H + 255) / 256), n), 256, 0, c->stream>>>(a->t, a->t, shared, gl, H);
        tsc_launched_(c, "MoE chunk (combine)");
        return;
    }
    int32_t *order = hmap, *tabs = hmap + ((size_t)k * n + 3) / 4 * 4; /* the tile tables 16-byte aligned */
    int ntl[TOPK_MAX];
    for (int j = 0; j < k; j++) {
        int32_t *ord = order + (size_t)j * n;
        ntl[j] = by_expert(hid + j, (size_t)k, (size_t)n, E, cnt, hpos, tabs + (size_t)j * 4 * tiles_slot);
        for (int r = 0; r < n; r++) ord[hpos[r]] = r;
    }
    tsc_write(c, maps, hmap, sizeof(int32_t) * (((size_t)k * n + 3) / 4 * 4 + (size_t)k * 4 * tiles_slot));
    free(hid), free(hpos), free(hmap), free(cnt);
    /* the slots */
    void *gws = q->gemm_ws;
    const tsc_weight *wgu[2] = {&g0, &u0}, *wd[1] = {&d0};
    const int64_t sgu[2] = {g.stride, u.stride}, sdd[1] = {d.stride};
    for (int j = 0; j < k; j++) {
        const int32_t *ord = maps + (size_t)j * n, *tb = maps + ((size_t)k * n + 3) / 4 * 4 + (size_t)j * 4 * tiles_slot;
        float *ygu[2] = {a->b1, a->b2}, *yd[1] = {yj};
        tsc_linear_gemm_grouped(c, wgu, sgu, 2, a->u, n, ord, n, tb, ntl[j], NULL, ygu, gws);
        tsc_silu_mul(c, a->b1, a->b2, (size_t)n * Im);
        tsc_linear_gemm_grouped(c, wd, sdd, 1, a->b1, n, NULL, n, tb, ntl[j], ord, yd, gws);
        k_moe_slot_acc<<<dim3((unsigned)((H + 255) / 256), n), 256, 0, c->stream>>>(a->t, yj, wts, k, j, H);
        tsc_launched_(c, "MoE chunk (slot sum)");
    }
    k_moe_combine<<<dim3((unsigned)((H + 255) / 256), n), 256, 0, c->stream>>>(a->t, a->t, shared, gl, H);
    tsc_launched_(c, "MoE chunk (combine)");
}

/* The shared expert's down as the routed down's last slot (q4dp_moe's
 * COLS form with sw): one launch where there were three (k_stage_digits
 * for its SwiGLU, its product, the routed down with the combine in its
 * store). TSC_MOE_SHARED_SLOT=0: the three, for comparison (other bits:
 * the shared terms are summed inside the product). Read at every op. */
bool shared_slot_on() { return !env_is0("TSC_MOE_SHARED_SLOT"); }

/* One launch fewer a MoE layer (the default; TSC_MOE_SHGU=0: the form
 * before, for comparison, other bits; 1: its gate/up at U = 2). Why: a
 * 35B-A3B decode layer's MoE half was five dependent launches, the
 * shared expert's gate/up first (64 blocks, ~6 us for ~1 MB: it was first
 * only to stage the input norm, which the bf16 router could not), then the
 * router, the route, the routed gate/up, the down (bench/cuda/RESULTS.md,
 * session 26's engine trace: ~31 us of a ~61 us layer on that chain). Here
 * the router stages the norm itself (tsc_linear_addnorm's plain form:
 * fused_linear's plain) and the shared gate/up rows are slot k of the routed
 * gate/up launch (q4dp_moe's srw), whose output the down reads as its
 * shared slot in place: four launches. Measured (35B-A3B-8L decode,
 * bench/cuda/RESULTS.md session 37): 2,048 -> 2,144 tok/s on an H200
 * (+4.7%), 1,883 -> 1,961 on an H100 (+4.1%), 74 -> 66 graph kernels. (The
 * route made by the router launch's last block as well, one launch fewer
 * again, lost: 1,928 on that H100; removed.) Bits: the router's and the norm's
 * are the two kernels' (tests/test_cuda.c); the shared gate/up rows are
 * now the stacked product's (its KS), for every row count alike, so a
 * verify still equals its decode rows and a streamed layer its resident
 * one. Read at every op. */
bool moe_shgu_on() { return !env_is0("TSC_MOE_SHGU"); }
/* The gate/up's digits made by the route launch (tsc_moe_route_digits,
 * misc.cu's k_moe_route_dg), the default; TSC_MOE_GUDIG=0 the gate/up
 * stages them in each of its blocks. Measured (s43-run4, run in session 44
 * on an H100, three rounds interleaved): 35B-A3B-8L decode 2,183 -> 2,229
 * tok/s (+2.1%; predicted +2..3%), the 40-layer 35B-A3B 548.0 -> 561.8
 * (+2.5%), MTP 3 at forced acceptance 2,445 -> 2,495 (verify 0.843 ->
 * 0.823 ms a block), output identical. Taken where one pass holds the
 * block's rows (per == nr below: a pass the scratch splits keeps the
 * in-block staging). 2: as the default, and an error where a pass that
 * holds its rows cannot take it (the engine test's proof that the form
 * ran). Read at every op, as env_is0's other switches. */
static int moe_gudig_on() {
    const char *e = getenv("TSC_MOE_GUDIG"); /* env_is0's reading: a leading '0' is off */
    return !e ? 1 : e[0] == '0' ? 0 : e[0] == '2' ? 2 : 1;
}

/* One block's (nr <= RB rows) router product and routes into r_ids /
 * r_wts: a pending norm of u fused into the product where it can be (the
 * decode path's form). rw[0] is the router, its logits y[0]; rw[1..nw-1]
 * share its launch (cu_moe: the shared expert's gate row), into y[1..]. */
void block_routes(ts_stream *s, const tsc_weight *rw, int nw, const float *u_, float *const *y, int nr, int E, int k,
                  int norm_topk) {
    cu_stream *q = ST(s);
    const tsc_weight *pr[2] = {&rw[0], nw > 1 ? &rw[1] : NULL};
    if (!fused_linear(s, rw, nw, u_, y, nr)) {
        flush(s);
        lin_rows(q->c, pr, nw, u_, y, nr);
    }
    tsc_moe_route(q->c, y[0], nr, E, k, norm_topk, q->r_ids, q->r_wts);
}

/* Routing alone (expert streaming, model/xstream.c): the routes of all n
 * rows read back to the host, computed by the products cu_moe's resident
 * form would use for this pass (the chunk path's tensor-core router for a
 * prompt chunk it takes, else 16-row blocks), so a streamed layer keeps the
 * resident bits. The weights handed back are the renormalised ones the
 * kernels apply (cu_moe takes them back as they are). Waits for the device. */
void cu_moe_route(ts_stream *s, ts_mode m, const ts_moe_args *a) {
    op_timer opt_(s, OPT_MOE);
    cu_stream *q = ST(s);
    if (dead(s)) return;
    if (a->topk > TOPK_MAX || a->topk < 1) { fail(s, TS_E_UNSUPPORTED, "MoE with more than 32 experts a token on CUDA"); return; }
    if (!a->pool_w) { fail(s, TS_E_UNSUPPORTED, "MoE routing on CUDA needs the expert cache's slot pool"); return; }
    tsc_weight rw, sg;
    if (!dev_w(s, a->router, &rw) || !dev_w(s, a->s_gate, &sg)) return;
    const tsc_weight g0 = slot_desc(&a->pool_w[0]), u0 = slot_desc(&a->pool_w[1]), d0 = slot_desc(&a->pool_w[2]);
    tsc_ctx *c = q->c;
    const int n = a->n, E = a->E, k = a->topk;
    if (moe_chunk_takes(q, m, a, g0, u0, d0, sg)) {
        flush(s);
        int32_t *ids = q->route;
        float *wts = (float *)(ids + (size_t)q->rows * TOPK_MAX);
        chunk_routes(q, a, rw, ids, wts);
        tsc_read(c, a->route_ids, ids, sizeof(int32_t) * (size_t)n * k);
        tsc_read(c, a->route_w, wts, sizeof(float) * (size_t)n * k);
        return;
    }
    for (int r0 = 0; r0 < n; r0 += RB) {
        const int nr = n - r0 < RB ? n - r0 : RB;
        float *yr[1] = {a->logits + (size_t)r0 * E};
        block_routes(s, &rw, 1, a->u + (size_t)r0 * a->H, yr, nr, E, k, a->norm_topk);
        tsc_read(c, a->route_ids + (size_t)r0 * k, q->r_ids, sizeof(int32_t) * (size_t)nr * k);
        tsc_read(c, a->route_w + (size_t)r0 * k, q->r_wts, sizeof(float) * (size_t)nr * k);
    }
}

/* Router product, routing on the device (tsc_moe_route), then per selected
 * slot j: gate/up of the expert ids[r, j] (device-side ids: the weights of
 * the chosen experts only are read, no host round trip), down into the
 * routed sum in slot order; the shared expert through tsc_linear; the
 * combine. Rows in blocks of 16. */
void cu_moe(ts_stream *s, ts_mode m, const ts_moe_args *a) {
    op_timer opt_(s, OPT_MOE);
    /* a pending norm of u is staged by the router's product below (or
     * launched by flush before anything else reads it) */
    cu_stream *q = ST(s);
    if (dead(s)) return;
    tsc_ctx *c = q->c;
    if (a->topk > TOPK_MAX || a->topk < 1) { fail(s, TS_E_UNSUPPORTED, "MoE with more than 32 experts a token on CUDA"); return; }
    /* the experts: a layer's resident ones by id, or (streamed) the slot
     * pool by slot; expert 0's / slot 0's descriptors (the dp4a and chunk
     * paths read every expert from them) */
    xw g, u, d;
    tsc_weight g0, u0, d0;
    const bool pool = a->route_ids != NULL;
    int nx = a->E;
    if (pool) {
        if (!a->route_slots || !a->pool_w || a->pool_stride <= 0) {
            fail(s, TS_E_UNSUPPORTED, "MoE over a routed expert table on CUDA needs the expert cache's slot pool");
            return;
        }
        g0 = slot_desc(&a->pool_w[0]), u0 = slot_desc(&a->pool_w[1]), d0 = slot_desc(&a->pool_w[2]);
        g = xw_of(g0, a->pool_stride), u = xw_of(u0, a->pool_stride), d = xw_of(d0, a->pool_stride);
        nx = 0;
        for (size_t i = 0; i < (size_t)a->n * a->topk; i++) nx = a->route_slots[i] >= nx ? a->route_slots[i] + 1 : nx;
    } else {
        if (!experts_of(s, a->e_gate, a->E, &g) || !experts_of(s, a->e_up, a->E, &u) ||
            !experts_of(s, a->e_down, a->E, &d))
            return;
        if (!dev_w(s, &a->e_gate[0], &g0) || !dev_w(s, &a->e_up[0], &u0) || !dev_w(s, &a->e_down[0], &d0)) return;
    }
    tsc_weight rw, sg, su, sd, sgw;
    if (!dev_w(s, a->router, &rw) || !dev_w(s, a->s_gate, &sg) || !dev_w(s, a->s_up, &su) ||
        !dev_w(s, a->s_down, &sd) || !dev_w(s, a->s_gate_w, &sgw))
        return;
    const int H = a->H, E = a->E, k = a->topk, Im = (int)g.rows, Is = (int)sg.rows;
    if (moe_chunk_takes(q, m, a, g0, u0, d0, sg)) {
        moe_chunk(s, a, g0, u0, d0, g, u, d, rw, sg, su, sd, sgw, nx);
        return;
    }
    const bool dpx = q4dp_moe_takes(&g0, k, Q4DP_MOE_ROWS) && q4dp_moe_takes(&u0, k, Q4DP_MOE_ROWS) &&
                     q4dp_moe_takes(&d0, k, Q4DP_MOE_COLS) && g0.cols == H && d0.cols == Im && u0.rows == Im &&
                     g0.group == u0.group && g0.sdtype == u0.sdtype && moe_dp4a_on();
    for (int r0 = 0; r0 < a->n; r0 += RB) {
        const int nr = a->n - r0 < RB ? a->n - r0 : RB;
        const float *u_ = a->u + (size_t)r0 * H;
        float *lg_ = a->logits + (size_t)r0 * E;
        float *routed = a->b0, *shared = a->b0 + (size_t)nr * H; /* b0 rows hold >= 2H */
        /* the shared expert's gate/up first (into b1 / b2, the routed
         * experts' scratch after it, or b0 with the shared slot below), its
         * gate row with them when it has their format, else with the
         * router when it has the router's (a bf16 row beside a bf16 router:
         * one launch, not two), else alone; the
         * pending norm of u staged by these products (the 4-bit ones; a bf16
         * router cannot stage it, so with the router first it ran as a kernel
         * of its own: 6 us alone under ncu, session 21). The products' bits
         * do not depend on the other weights of a launch (linear.cu, q4dp.cu),
         * so a streamed layer (routes from moe_route, gate row alone) keeps
         * the resident bits. */
        const bool g_sh = tsc_linear_one_launch(&sgw, &sg);
        const bool g_rt = !g_sh && !pool && tsc_linear_one_launch(&sgw, &rw);
        const tsc_weight gu[3] = {sg, su, sgw};
        /* the shared expert as the routed down's last slot (shared_slot_on):
         * its gate / up rows then wait in b0 ([nr][Is] each; b0 rows hold
         * 2H) while the routed ones take b1 / b2. Taken or not by the
         * shapes and the scratch's size, never by nr: a row's bits must not
         * depend on how many rows share its pass (a streamed layer runs
         * groups of a pass's rows; s22-run4 caught a first form that did) */
        const size_t hk = (size_t)k * (size_t)Im, room = (size_t)a->R * (size_t)a->F;
        const bool shx = dpx && hk <= room && Is <= H && shared_slot_on() && q4dp_moe_shared_takes(&d0, &sd, k);
        /* moe_shgu_on's form: the router stages the norm, the shared
         * gate/up rows are the routed launch's slot k (with the gate row
         * beside the router or alone, never with them) */
        const size_t hk2 = hk + (size_t)Is;
        if (shx && !g_sh && hk2 <= room && moe_shgu_on() && q4dp_moe_shared_rows_takes(&g0, &sg, k) &&
            q4dp_moe_shared_rows_takes(&u0, &su, k)) {
            if (pool) {
                tsc_write(c, q->r_ids, a->route_slots + (size_t)r0 * k, sizeof(int32_t) * (size_t)nr * k);
                tsc_write(c, q->r_wts, a->route_w + (size_t)r0 * k, sizeof(float) * (size_t)nr * k);
            }
            /* the router (with the gate row where one launch takes both)
             * stages the pending norm; else the gate row alone does, after
             * it or (a pool's routes) in its place */
            auto normed = [&](const tsc_weight *wv, int nwv, float *const *yv) {
                if (fused_linear(s, wv, nwv, u_, yv, nr, true)) return;
                flush(s);
                const tsc_weight *pv[2] = {&wv[0], nwv > 1 ? &wv[1] : NULL};
                lin_rows(c, pv, nwv, u_, yv, nr);
            };
            if (!pool) {
                const tsc_weight rg[2] = {rw, sgw};
                float *yr[2] = {lg_, q->gl};
                normed(rg, g_rt ? 2 : 1, yr);
            }
            if (pool || !g_rt) {
                const tsc_weight g1[1] = {sgw};
                float *y1[1] = {q->gl};
                normed(g1, 1, y1);
            }
            const int per = (int)(room / hk2 < (size_t)nr ? room / hk2 : (size_t)nr);
            /* moe_gudig_on: the gate/up's digits made by the route launch
             * (one gate/up pass over 8-bit x; misc.cu's k_moe_route_dg) */
            const int gd = pool ? 0 : moe_gudig_on();
            const bool made = gd && per == nr && g0.act_digits == 1 &&
                              tsc_moe_route_digits(c, lg_, nr, E, k, a->norm_topk, q->r_ids, q->r_wts, u_, (int)H, g0.group);
            if (!made && gd == 2 && per == nr) /* (a test's way to know the form ran) */
                tsc_fail_(c, TS_E_UNSUPPORTED, "TSC_MOE_GUDIG=2: the route launch could not make the gate/up's digits");
            else if (!made && !pool)
                tsc_moe_route(c, lg_, nr, E, k, a->norm_topk, q->r_ids, q->r_wts);
            for (int r1 = 0; r1 < nr; r1 += per) {
                const int m1 = nr - r1 < per ? nr - r1 : per;
                const int32_t *ids1 = q->r_ids + (size_t)r1 * k;
                const tsc_weight *wgu[2] = {&g0, &u0}, *sgu2[2] = {&sg, &su};
                const int64_t sgu[2] = {g.stride, u.stride}, sd1[1] = {d.stride};
                float *ygu[2] = {a->b1, a->b2}, *yd1[1] = {a->t + (size_t)(r0 + r1) * H};
                q4dp_moe(c, wgu, sgu, 2, Q4DP_MOE_ROWS, ids1, NULL, k, u_ + (size_t)r1 * H, NULL, NULL, NULL, ygu, m1, NULL,
                         NULL, NULL, sgu2);
                const tsc_weight *wd[1] = {&d0};
                q4dp_moe(c, wd, sd1, 1, Q4DP_MOE_COLS, ids1, q->r_wts + (size_t)r1 * k, k, a->b1, a->b2, NULL, q->gl + r1,
                         yd1, m1, &sd, NULL, NULL);
            }
            continue;
        }
        float *sg1 = shx ? a->b0 : a->b1, *sg2 = shx ? a->b0 + (size_t)nr * Is : a->b2;
        float *ys[3] = {sg1, sg2, q->gl};
        const int ngu = g_sh ? 3 : 2;
        if (!fuse_on() || !fused_linear(s, gu, ngu, u_, ys, nr)) {
            flush(s);
            const tsc_weight *ps[3] = {&sg, &su, &sgw};
            lin_rows(c, ps, ngu, u_, ys, nr);
        }
        if (pool) {
            /* the routes moe_route gave, as the pool's slots */
            tsc_write(c, q->r_ids, a->route_slots + (size_t)r0 * k, sizeof(int32_t) * (size_t)nr * k);
            tsc_write(c, q->r_wts, a->route_w + (size_t)r0 * k, sizeof(float) * (size_t)nr * k);
        } else {
            const tsc_weight rg[2] = {rw, sgw};
            float *yr[2] = {lg_, q->gl};
            block_routes(s, rg, g_rt ? 2 : 1, u_, yr, nr, E, k, a->norm_topk);
        }
        if (!g_sh && !g_rt) {
            const tsc_weight *pg[1] = {&sgw};
            float *yg[1] = {q->gl};
            lin_rows(c, pg, 1, u_, yg, nr);
        }
        if (!shx) {
            const tsc_weight *pd[1] = {&sd};
            float *yd[1] = {shared};
            pend_act &pa = q->pend;
            pa.kind = PEND_SWIGLU, pa.x = a->b1, pa.u = a->b2, pa.N = (size_t)nr * Is;
            if (!fuse_on() || !fused_linear(s, &sd, 1, a->b1, yd, nr)) {
                flush(s);
                lin_rows(c, pd, 1, a->b1, yd, nr);
            }
        }
        /* the routed experts: all k slots at once, in sub-blocks of rows
         * whose k hidden rows each fit b1 ([R, F]); slot by slot when not
         * even one row's do (same values either way) */
        if (hk <= room && dpx) {
            /* 4-bit MLX experts: gate and up of the k slots as one stacked
             * dp4a product into b1 / b2 ([m1][k * Im] each), then down over
             * the k hidden rows side by side, SwiGLU staged, the routing
             * weights applied inside, and the shared expert either its last
             * slot (shx) or combined in its store: t directly (q4dp.cu) */
            const int per = (int)(room / hk < (size_t)nr ? room / hk : (size_t)nr);
            for (int r1 = 0; r1 < nr; r1 += per) {
                const int m1 = nr - r1 < per ? nr - r1 : per;
                const int32_t *ids1 = q->r_ids + (size_t)r1 * k;
                const tsc_weight *wgu[2] = {&g0, &u0};
                const int64_t sgu[2] = {g.stride, u.stride}, sd1[1] = {d.stride};
                float *ygu[2] = {a->b1, a->b2}, *yd1[1] = {a->t + (size_t)(r0 + r1) * H};
                q4dp_moe(c, wgu, sgu, 2, Q4DP_MOE_ROWS, ids1, NULL, k, u_ + (size_t)r1 * H, NULL, NULL, NULL, ygu, m1);
                const tsc_weight *wd[1] = {&d0};
                if (shx)
                    q4dp_moe(c, wd, sd1, 1, Q4DP_MOE_COLS, ids1, q->r_wts + (size_t)r1 * k, k, a->b1, a->b2, NULL,
                             q->gl + r1, yd1, m1, &sd, sg1 + (size_t)r1 * Is, sg2 + (size_t)r1 * Is);
                else
                    q4dp_moe(c, wd, sd1, 1, Q4DP_MOE_COLS, ids1, q->r_wts + (size_t)r1 * k, k, a->b1, a->b2,
                             shared + (size_t)r1 * H, q->gl + r1, yd1, m1);
            }
            continue;
        }
        if (hk <= room) {
            const int per = (int)(room / hk < (size_t)nr ? room / hk : (size_t)nr);
            for (int r1 = 0; r1 < nr; r1 += per) {
                const int m1 = nr - r1 < per ? nr - r1 : per;
                const int32_t *ids1 = q->r_ids + (size_t)r1 * k;
                k_moe_gu_all<<<dim3((unsigned)((Im + 7) / 8), m1, k), 256, 0, c->stream>>>(g, u, ids1, k, u_ + (size_t)r1 * H,
                                                                                         H, a->b1, Im);
                tsc_launched_(c, "MoE experts (gate, up; all slots)");
                k_moe_down_all<<<dim3((unsigned)((H + 7) / 8), m1), 256, 0, c->stream>>>(
                    d, ids1, q->r_wts + (size_t)r1 * k, k, a->b1, Im, routed + (size_t)r1 * H, H);
                tsc_launched_(c, "MoE experts (down; all slots)");
            }
        } else
            for (int j = 0; j < k; j++) {
                k_moe_gu<<<dim3((unsigned)((Im + 7) / 8), nr), 256, 0, c->stream>>>(g, u, q->r_ids, k, j, u_, H, a->b1, Im);
                tsc_launched_(c, "MoE experts (gate, up)");
                k_moe_down<<<dim3((unsigned)((H + 7) / 8), nr), 256, 0, c->stream>>>(d, q->r_ids, q->r_wts, k, j, a->b1,
                                                                                     Im, routed, H);
                tsc_launched_(c, "MoE experts (down)");
            }
        k_moe_combine<<<dim3((unsigned)((H + 255) / 256), nr), 256, 0, c->stream>>>(a->t + (size_t)r0 * H, routed, shared,
                                                                                 q->gl, H);
        tsc_launched_(c, "MoE combine");
    }
}

void cu_argmax(ts_stream *s, ts_view lg, int K, int32_t *ids, float *prob) {
    op_timer opt_(s, OPT_HEADSEL);
    flush(s);
    cu_stream *q = ST(s);
    if (dead(s) || lg.rows <= 0) return;
    tsc_ctx *c = q->c;
    for (int64_t r0 = 0; r0 < lg.rows; r0 += RB) {
        const int nr = (int)(lg.rows - r0 < RB ? lg.rows - r0 : RB);
        const float *x = (const float *)lg.p + r0 * lg.ld;
        if (lg.ld == K) tsc_argmax(c, x, nr, K, q->amx_ids, q->amx_ws);
        else
            for (int i = 0; i < nr; i++) tsc_argmax(c, x + i * lg.ld, 1, K, q->amx_ids + i, q->amx_ws);
        if (prob) {
            k_win_prob<<<nr, 256, 0, c->stream>>>(x, lg.ld, K, q->amx_ids, q->amx_prob);
            tsc_launched_(c, "argmax probability");
        }
        tsc_read(c, ids + r0, q->amx_ids, sizeof(int32_t) * (size_t)nr);
        if (prob) tsc_read(c, prob + r0, q->amx_prob, sizeof(float) * (size_t)nr);
    }
    if (tsc_error(c)) memset(ids, 0, sizeof(int32_t) * (size_t)lg.rows);
}

/* ---- run-ahead (backend.h: argmax_ahead, ahead_read) ----
 * Ticket t's id stays on the device (amx_ids[t], which the next pass's
 * embed reads in stream order) and is written to a pinned ticket behind an
 * event, so queuing the argmax never waits: the host launches step n + 1
 * and only then waits for step n's id.
 * What that takes off a token's time is the host's part of the loop (the
 * wake-up, the id's read, the next embed's record copy, the graph launch),
 * which session 30 measured at 62-75 us a 9B token, 29-33 us on the
 * default model (TSC_OPTIME: a token's time less its replay's). */
/* A run-ahead pass's step record is read from pinned memory (cu_embed),
 * not from the pageable hstep: a pageable copy may wait for the stream
 * (the driver stages it), which would hold the host until the queued step
 * is done. Uncaptured passes take a record of a ring: the one of a pass is
 * rewritten AHEAD_RECS passes later, after the host has read a ticket that
 * follows the first one's copy in the stream, since at most
 * TS_AHEAD_TICKETS passes are queued beyond the last ticket read
 * (generate.c's loop: one; an MTP draft chain: its drafts). A captured
 * run-ahead graph has a record of its own (cu_graph_launch writes it).
 *
 * The pinned block is mapped: kernels read the record and write the ids
 * (k_rec_in, k_id_out), one block over PCIe, instead of copy operations
 * (a graph's copy node has a latency of its own; session 31's third call
 * put a one-launch run-ahead step ~40 us above the old graph's replay on
 * an H100, for six small operations). TSC_AHEAD_COPY=1 takes the copies
 * (the A/B). */
__global__ void k_rec_in(int32_t *dst, const volatile int32_t *src, int n) {
    if ((int)threadIdx.x < n) dst[threadIdx.x] = src[threadIdx.x];
}
__global__ void k_id_out(volatile int32_t *dst, const int32_t *src) { *dst = *src; }

bool ahead_copy_on() {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TSC_AHEAD_COPY");
        on = e && !strcmp(e, "1");
    }
    return on;
}

/* the device address of pinned byte p of the block (mapped) */
template <typename T> T *ahead_dev_of(cu_stream *q, T *p) {
    return (T *)((char *)q->ahead_d + ((char *)p - (char *)q->ahead_h));
}

bool ahead_init(ts_stream *s, cu_stream *q) {
    cudaError_t e = cudaHostAlloc((void **)&q->ahead_h, AHEAD_PINNED, cudaHostAllocMapped);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer((void **)&q->ahead_d, q->ahead_h, 0);
    if (e != cudaSuccess) {
        if (q->ahead_h) cudaFreeHost(q->ahead_h);
        q->ahead_h = NULL;
        io_err(s, "pinned run-ahead tickets", e);
        return false;
    }
    q->ahead_rec = (dev_step *)(q->ahead_h + TS_AHEAD_TICKETS);
    q->ahead_rec_i = 0;
    for (int t = 0; t < TS_AHEAD_TICKETS; t++)
        if ((e = cudaEventCreateWithFlags(&q->ahead_ev[t], cudaEventDisableTiming)) != cudaSuccess) {
            while (t-- > 0) cudaEventDestroy(q->ahead_ev[t]);
            cudaFreeHost(q->ahead_h);
            q->ahead_h = NULL, q->ahead_rec = NULL;
            io_err(s, "run-ahead events", e);
            return false;
        }
    ts_mem_account(TS_DOM_PINNED, TS_MEM_SCRATCH, (int64_t)AHEAD_PINNED);
    return true;
}

/* The record of a run-ahead pass into the device block: read by a kernel
 * from the mapped record (or copied: TSC_AHEAD_COPY=1). */
cudaError_t ahead_rec_in(cu_stream *q, dev_step *hs, size_t bytes) {
    if (ahead_copy_on()) return cudaMemcpyAsync(q->dstep, hs, bytes, cudaMemcpyHostToDevice, q->c->stream);
    k_rec_in<<<1, 32, 0, q->c->stream>>>((int32_t *)q->dstep, (const int32_t *)ahead_dev_of(q, hs), (int)(bytes / 4));
    return cudaGetLastError();
}

/* Ticket t's id in the stream's id slot amx_ids[t] (the next pass's
 * embedding reads it there) and in the pinned ticket. Inside a capture (the
 * run-ahead pass's graph: qwen35.c) the argmax and the ticket's write are
 * captured; the ticket's event is recorded after each launch of that graph
 * (cu_graph_launch: gent.ahead_t), since an event recorded inside a capture
 * marks the capture, not the replay. */
const int32_t *cu_argmax_ahead(ts_stream *s, ts_view lg, int K, int t) {
    op_timer opt_(s, OPT_HEADSEL);
    flush(s);
    cu_stream *q = ST(s);
    t &= TS_AHEAD_TICKETS - 1;
    if (dead(s)) return q->amx_ids + t; /* the error is the stream's: the next op sees it */
    tsc_ctx *c = q->c;
    tsc_argmax(c, (const float *)lg.p, 1, K, q->amx_ids + t, q->amx_ws);
    cudaError_t e;
    if (ahead_copy_on()) {
        e = cudaMemcpyAsync(q->ahead_h + t, q->amx_ids + t, sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream);
    } else {
        k_id_out<<<1, 1, 0, c->stream>>>(ahead_dev_of(q, q->ahead_h + t), q->amx_ids + t);
        e = cudaGetLastError();
    }
    if (q->capturing) q->cap_ahead_t = t;
    else if (e == cudaSuccess) e = cudaEventRecord(q->ahead_ev[t], c->stream);
    if (e != cudaSuccess) io_err(s, "run-ahead id copy", e);
    return q->amx_ids + t;
}

int cu_ahead_read(ts_stream *s, int t, int32_t *id) {
    cu_stream *q = ST(s);
    *id = 0;
    if (dead(s)) return s->err ? s->err : TS_E_IO;
    t &= TS_AHEAD_TICKETS - 1;
    cudaError_t e = cudaEventSynchronize(q->ahead_ev[t]);
    if (e != cudaSuccess) {
        io_err(s, "run-ahead id", e);
        return s->err;
    }
    *id = ((volatile int32_t *)q->ahead_h)[t];
    return tsc_error(q->c) ? sync_into(s) : 0;
}

/* ---- sampling candidates ----
 * topn (src/backend.h) one row at a time through tsc_topn (sample.cu), each
 * row's 16 + 8N bytes read back in one copy. The device scratch (the chunk
 * lists, the penalised copy of the row, the penalty list: ~1.4 MB for the
 * 248K vocabulary) is allocated on first use, sized by K, and counted as
 * device scratch; like the host staging of host_rows it is outside the plan
 * (the plan sizes a stream by its activation columns, and a session that
 * never samples never needs it). */
static_assert(TSC_TOPN_MAX == TS_TOPN_MAX, "tsc.h and backend.h agree on the most candidates");

struct topn_at {
    size_t ws, row, ids, sub, total;
};
topn_at topn_layout_of(int K) {
    topn_at l;
    size_t o = 0;
    l.ws = o, o += al256(tsc_topn_ws_bytes(K));
    l.row = o, o += al256(sizeof(float) * (size_t)K);
    l.ids = o, o += al256(sizeof(int32_t) * TS_TOPN_PEN_MAX);
    l.sub = o, o += al256(sizeof(float) * TS_TOPN_PEN_MAX);
    l.total = o;
    return l;
}

void cu_topn(ts_stream *s, ts_view lg, int K, const ts_topn_args *a) {
    op_timer opt_(s, OPT_HEADSEL);
    flush(s);
    cu_stream *q = ST(s);
    /* until a row is read back it has no candidate: a caller that does not
     * sync after an error sees none rather than stale ones */
    for (int64_t r = 0; r < lg.rows; r++) a->n_valid[r] = 0, a->sum_exp[r] = 0;
    if (dead(s) || lg.rows <= 0) return;
    const int N = a->N;
    if (N < 1 || N > TS_TOPN_MAX || a->n_pen < 0 || a->n_pen > TS_TOPN_PEN_MAX || K < 1 || K > lg.cols) {
        fail(s, TS_E_ARG, "topn: candidates, penalties or row length out of range");
        return;
    }
    tsc_ctx *c = q->c;
    if (K > q->topn_V) {
        if (q->topn_ws) {
            tsc_free(c, q->topn_ws);
            ts_mem_account(TS_DOM_DEVICE, TS_MEM_SCRATCH, -(int64_t)q->topn_bytes);
            q->topn_ws = NULL, q->topn_bytes = 0, q->topn_V = 0;
        }
        const size_t need = topn_layout_of(K).total;
        q->topn_ws = (uint8_t *)tsc_alloc(c, need);
        if (!q->topn_ws) return; /* tsc_alloc left TS_E_NOMEM on the context */
        q->topn_bytes = need, q->topn_V = K;
        ts_mem_account(TS_DOM_DEVICE, TS_MEM_SCRATCH, (int64_t)need);
    }
    const topn_at l = topn_layout_of(q->topn_V);
    uint8_t *w = q->topn_ws;
    int32_t *pen_ids = (int32_t *)(w + l.ids);
    float *pen_sub = (float *)(w + l.sub);
    if (a->n_pen) {
        tsc_write(c, pen_ids, a->pen_ids, sizeof(int32_t) * (size_t)a->n_pen);
        tsc_write(c, pen_sub, a->pen_sub, sizeof(float) * (size_t)a->n_pen);
    }
    unsigned char hb[16 + 8 * TS_TOPN_MAX];
    const size_t ob = tsc_topn_out_bytes(N);
    for (int64_t r = 0; r < lg.rows && !tsc_error(c); r++) {
        const float *x = (const float *)lg.p + r * lg.ld;
        const void *o = tsc_topn(c, x, K, N, a->scale, a->rep, a->n_pen, pen_ids, pen_sub, (float *)(w + l.row),
                                 w + l.ws);
        if (!o) break;
        tsc_read(c, hb, o, ob);
        if (tsc_error(c)) break;
        memcpy(&a->sum_exp[r], hb, sizeof(double));
        memcpy(&a->n_valid[r], hb + 8, sizeof(int32_t));
        memcpy(a->vals + r * N, hb + 16, sizeof(float) * (size_t)N);
        memcpy(a->ids + r * N, hb + 16 + 4 * (size_t)N, sizeof(int32_t) * (size_t)N);
    }
    if (tsc_error(c))
        for (int64_t r = 0; r < lg.rows; r++) a->n_valid[r] = 0, a->sum_exp[r] = 0;
}

/* ---- graphs: one per (kind, rows) key, per stream ---- */

gent *gfind(cu_stream *q, uint32_t key) {
    for (int i = 0; i < q->n_graphs; i++)
        if (q->graphs[i].key == key) return &q->graphs[i];
    return NULL;
}

int cu_graph_begin(ts_stream *s, uint32_t key) {
    flush(s);
    cu_stream *q = ST(s);
    if (dead(s) || q->capturing || gfind(q, key) || q->n_graphs == GMAXN) return 1; /* run the ops uncaptured */
    tsc_graph_begin(q->c);
    if (tsc_error(q->c)) return TS_E_IO;
    q->capturing = 1;
    q->cap_ahead_t = -1;
    q->cap_rec = NULL;
    return 0;
}

int cu_graph_end(ts_stream *s, uint32_t key) {
    flush(s);
    cu_stream *q = ST(s);
    if (!q->capturing) return 1;
    q->capturing = 0;
    tsc_graph *g = tsc_graph_end(q->c);
    if (!g || s->err) {
        tsc_graph_free(g);
        if (!s->err && !tsc_error(q->c)) fail(s, TS_E_IO, "graph capture failed");
        return s->err ? s->err : TS_E_IO;
    }
    gent *e = &q->graphs[q->n_graphs++];
    e->key = key, e->g = g;
    e->ahead_t = q->cap_ahead_t;
    e->rec = q->cap_rec;
    q->cap_ahead_t = -1;
    q->cap_rec = NULL;
    /* the kernels of the graph (statistics: bench reports them) */
    e->kernels = tsc_graph_kernels(g);
    q->last_kernels = e->kernels;
    return 0;
}

/* The trace build's timeline of one replay in the engine (common.cuh's
 * TSC_ENTRY ring; bench/cuda/trace_view.py --kernels reads it): with
 * TSC_TRACE_FILE set, the stream's replay number TSC_TRACE_AT (default 40:
 * past the prompt and the first decode steps of a bench run) is run alone
 * (the stream drained before, the rings reset) and its kernels' blocks
 * written to the file. cuda_bench --trace times its own synthetic step; this
 * is the engine's real graph (the MoE layers' routes, the head, the norms).
 * A normal build ignores the variables. */
bool trace_this_replay(cu_stream *q) {
#ifdef TSC_TRACE
    const char *f = getenv("TSC_TRACE_FILE"), *at = getenv("TSC_TRACE_AT");
    if (!f || q->replays + 1 != (at ? atol(at) : 40)) return false;
    tsc_sync(q->c, NULL);
    tsc_trace_reset();
    return true;
#else
    (void)q;
    return false;
#endif
}
void trace_write(cu_stream *q) {
    tsc_sync(q->c, NULL);
    const int n = tsc_trace_dump(q->c, getenv("TSC_TRACE_FILE"));
    fprintf(stderr, "turbospark: trace of replay %ld -> %s (%d)\n", q->replays, getenv("TSC_TRACE_FILE"), n);
}

int cu_graph_launch(ts_stream *s, uint32_t key) {
    flush(s);
    cu_stream *q = ST(s);
    if (dead(s)) return s->err ? s->err : TS_E_IO;
    gent *e = gfind(q, key);
    if (!e) return 1;
    const double t0 = ts_now();
    const bool tr = trace_this_replay(q);
    /* TSC_OPTIME: a replay's device time, so that a decode token's time
     * splits into the graph's and the host's (bench's ms_per_token of a run
     * without the switch, less this) */
    op_timer opt_(s, OPT_GRAPH);
    if (e->rec) { /* a run-ahead graph: its embedding copies this record (pinned) */
        e->rec->step = s->step;
        gdn_sel_of(s->step, e->rec->gsel);
    }
    tsc_graph_launch(q->c, e->g);
    if (e->ahead_t >= 0 && !tsc_error(q->c)) { /* the ticket the graph's copy fills */
        cudaError_t er = cudaEventRecord(q->ahead_ev[e->ahead_t], q->c->stream);
        if (er != cudaSuccess) io_err(s, "run-ahead ticket event", er);
    }
    q->launch_s += ts_now() - t0;
    q->replays++;
    if (tr) trace_write(q);
    return tsc_error(q->c) ? sync_into(s) : 0;
}

const ts_backend_ops cu_ops = {
    cu_alloc,        cu_free,      cu_write,      cu_read,      cu_copy,           cu_fill,
    cu_host_rows,    cu_sync,      cu_stream_new, cu_stream_free, cu_workspace_bytes, cu_enter,
    cu_leave,        cu_weight_bytes, cu_weight_prepare,
    NULL,            /* weight_prepare_1: host slots only; device slots are filled by cu_slot_copy */
    cu_linear,       cu_embed,     cu_norm,
    cu_swiglu,       cu_attn,      cu_gdn,        cu_gdn_materialize, cu_moe,
    cu_moe_route,
    cu_argmax,       cu_topn,
    cu_graph_begin,  cu_graph_end, cu_graph_launch,
    cu_host_pin,
    cu_weight_parts, cu_slot_copy,   cu_stream_copy,
    cu_argmax_ahead, cu_ahead_read,
};

void cu_destroy(ts_backend *be) {
    cu_be *b = BE(be);
    while (b->blocks) {
        ablk *k = b->blocks;
        b->blocks = k->next;
        ts_mem_account(TS_DOM_DEVICE, (ts_mem_cat)k->cat, -(int64_t)k->bytes);
        free(k);
    }
    tsc_close(b->c);
    free(b->wm.key);
    free(b->wm.val);
    free(b);
}

} // namespace

extern "C" int ts_cuda_backend_new(const ts_backend_params *p, ts_backend **out, ts_error *err) {
    *out = NULL;
    cu_be *b = (cu_be *)calloc(1, sizeof *b); /* a control block: outside the plan */
    if (!b) return ts_fail(err, TS_E_NOMEM, "out of memory");
    b->base.ops = &cu_ops;
    b->base.name = "cuda";
    b->base.dom = TS_DOM_DEVICE;
    b->base.impl = b;
    b->base.destroy = cu_destroy;
    b->device = p ? p->device : 0;
    b->progress = p ? p->progress : 0;
    b->next_report = (size_t)1 << 30;
    if (!(p && p->plan_only)) {
        int rc = tsc_open(b->device, &b->c, err);
        if (rc) {
            free(b);
            return rc;
        }
    }
    *out = &b->base;
    return 0;
}

extern "C" int ts_cuda_built(void) { return 1; }

extern "C" int ts_cuda_backend_check(ts_backend *be, ts_error *err) {
    cu_be *b = BE(be);
    if (b->progress && b->uploaded) fprintf(stderr, "\rturbospark: weights to cuda:%d: %.2f GB, done\n", b->device,
                                            (double)b->uploaded / 1e9);
    if (b->bad) return ts_fail(err, TS_E_UNSUPPORTED, "%s", b->bad_msg);
    return 0;
}

extern "C" int ts_cuda_backend_shapes(ts_backend *be, int D, int nq, int nkv, int rot, int dk, int dv, int K, int Hk,
                                      int Hv, int E, int topk, ts_error *err) {
    (void)be;
    if (nq > 0 && (D % 32 || D > 256 || nkv < 1 || nq % nkv || nq / nkv > 16 || rot % 2 || rot > D))
        return ts_fail(err, TS_E_UNSUPPORTED,
                       "attention with head dim %d, %d query / %d KV heads, rot %d on CUDA: the kernels need D %% 32 == 0, "
                       "D <= 256, nq a multiple of nkv with nq/nkv <= 16, rot even and <= D", D, nq, nkv, rot);
    const bool fused = dk == 128 && dv == 128 && K == 4;
    if (Hv > 0 && !fused && (dk > GDK_MAX || dv > 1024 || K > GK_MAX || K < 1 || Hk < 1 || Hv % Hk))
        return ts_fail(err, TS_E_UNSUPPORTED,
                       "GDN with key/value heads of %d/%d (%d/%d heads) and a conv of %d taps on CUDA: need dk <= %d, "
                       "dv <= 1024, K <= %d, Hv a multiple of Hk", dk, dv, Hk, Hv, K, GDK_MAX, GK_MAX);
    if (E > 0 && (E > 1024 || topk < 1 || topk > TOPK_MAX || topk > E))
        return ts_fail(err, TS_E_UNSUPPORTED, "MoE with %d experts, %d a token on CUDA: need E <= 1024, top-k <= %d", E,
                       topk, TOPK_MAX);
    return 0;
}

/* For the collectives (comm.cu): a backend's device, a stream's CUDA stream. */
extern "C" int tsc_backend_device(ts_backend *be) { return BE(be)->device; }
extern "C" cudaStream_t tsc_stream_of(ts_stream *s) { return ST(s)->c->stream; }

extern "C" int ts_cuda_backend_info(ts_backend *be, char *name, size_t cap, size_t *ours, size_t *free_b, size_t *total_b) {
    cu_be *b = BE(be);
    if (!b->c) return TS_E_UNSUPPORTED;
    int rc = tsc_info(b->c, name, cap, NULL, free_b, total_b);
    if (ours) {
        *ours = 0;
        for (int k = 0; k < TS_MEM_N; k++) *ours += ts_mem_used_in(TS_DOM_DEVICE, (ts_mem_cat)k);
    }
    return rc;
}

extern "C" double ts_cuda_copy_probe(ts_backend *be, size_t bytes) {
    cu_be *b = BE(be);
    if (!b->c) return -1;
    void *x = tsc_alloc(b->c, bytes), *y = tsc_alloc(b->c, bytes);
    double best = -1;
    if (x && y) {
        tsc_copy(b->c, y, x, bytes); /* warm */
        for (int i = 0; i < 5; i++) {
            tsc_timer_start(b->c);
            tsc_copy(b->c, y, x, bytes);
            double ms = tsc_timer_ms(b->c);
            if (ms > 0) {
                double gbs = 2.0 * (double)bytes / (ms * 1e6);
                if (gbs > best) best = gbs;
            }
        }
    }
    tsc_free(b->c, x);
    tsc_free(b->c, y);
    ts_error e;
    if (tsc_sync(b->c, &e)) best = -1;
    return best;
}

extern "C" void ts_cuda_stream_stats(ts_stream *s, int *graphs, long *replays, int *kernels, double *launch_us) {
    if (launch_us) *launch_us = 0;
    if (!s || strcmp(s->be->name, "cuda")) {
        if (graphs) *graphs = 0;
        if (replays) *replays = 0;
        if (kernels) *kernels = 0;
        return;
    }
    cu_stream *q = ST(s);
    if (graphs) *graphs = q->n_graphs;
    if (replays) *replays = q->replays;
    if (kernels) *kernels = q->last_kernels;
    if (launch_us && q->replays) *launch_us = q->launch_s * 1e6 / (double)q->replays;
}
