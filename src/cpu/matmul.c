/* matmul.c: the CPU driver behind the backend's linear op (ts_cpu_linear*).
 *
 * Picks a row kernel for (mode, dtype, group, prefill), prepares the
 * activations once per call (ts_xprep in cpu.h), and splits the output rows
 * over the thread pool in contiguous ranges (multiples of 16 rows, so threads
 * do not share cache lines of y). Small products run on the caller alone:
 * waking a worker costs more than it saves below ~64K weights.
 *
 * Row-exactness: every kernel computes a (weight row, x row) pair with an
 * operation order fixed by that pair alone, and the x preparation is per x
 * row, so ts_linear over n rows equals n one-row calls bit for bit. The
 * prefill kernels (4 x 4 tiles) round differently and are only used when the
 * caller allows it.
 *
 * Workspace: activation buffers and per-thread dequantization rows, one set
 * per stream (a session's: ts_cpu_ws, TS_MEM_SCRATCH). Stream creation
 * reserves them for its largest product (ts_cpu_ws_reserve, which the memory
 * plan asks through the backend too), so the token loop allocates nothing; a
 * product larger than any reservation still grows them, and when that fails
 * the product fails with TS_E_NOMEM (the backend's sticky error), never a
 * quietly different kernel. No lock: a stream is used by one thread at a
 * time, and pool regions take turns inside ts_pool_run.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu.h"

enum { K_GENERIC, K_QDOT, K_FDOT, K_GEMM, K2_QDOT, K2_FDOT, K_Q8DOT, K_PDOT };

typedef struct job {
    const ts_weight *w;
    const float *x;
    const ts_xprep *p;
    float *y;
    int n, kind;
    int64_t per;   /* rows per chunk */
    ts_cpu_ws *ws;
} job;


static int grow(void **p, size_t *cap, size_t need, size_t es) {
    if (need <= *cap) return 0;
    void *np = ts_alloc(need * es, TS_MEM_SCRATCH);
    if (!np) return -1;
    ts_free(*p);
    *p = np;
    *cap = need;
    return 0;
}


void ts_cpu_ws_release(ts_cpu_ws *ws) {
    void *bufs[] = {ws->p.xq, ws->p.sx, ws->p.xs, ws->p.xp, ws->p.x8, ws->p.xd, ws->wbuf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ts_free(bufs[i]);
    ws->p.xq = NULL; ws->p.sx = ws->p.xs = ws->p.xp = NULL; ws->p.x8 = ws->p.xd = NULL; ws->wbuf = NULL;
    ws->cap_xq = ws->cap_xp = ws->cap_sx = ws->cap_xs = ws->cap_x8 = ws->cap_xd = ws->cap_w = 0;
}

size_t ts_cpu_ws_reserve(ts_cpu_ws *ws, int threads, int rows, int64_t cols, int group, int reserve) {
    int mode = ts_kmode();
    if (mode == TS_KMODE_REF || rows <= 0 || cols <= 0) return 0;
    size_t R = (size_t)rows, C = (size_t)cols, ng = group > 0 ? C / (size_t)group : 0;
    size_t need_xq = 0, need_sx = 0, need_xs = 0, need_xp = 0, need_x8 = 0, need_xd = 0;
    /* per thread: 4 dequantized f32 rows, or two unpacked INT4 row blocks (AMX) */
    size_t need_w = (size_t)(threads + 1) * (ts_amx_available() ? 8 : 4) * C;
    if (mode == TS_KMODE_AVX512 && group > 0 && ts_pack_enabled() && ts_pack_supported(4, group, group)) {
        /* quantized weights are packed: digits for them, f32 x for the
         * bf16/f32 matrices' prefill GEMM */
        need_xp = R * C;
        need_xd = 3 * R * C;
        need_sx = need_xs = R * ng;
    } else if (mode == TS_KMODE_AVX512 || mode == TS_KMODE_AVX512Q8) {
        need_xp = R * C; /* the prefill GEMM */
        if (group > 0) { need_xq = 2 * R * C; need_sx = need_xs = R * ng; }
        if (mode == TS_KMODE_AVX512Q8 && group > 0) need_x8 = R * C;
    } else if (mode == TS_KMODE_AVX2 && group > 0) {
        need_xp = R * C;
        need_xs = R * ng;
    }
    struct { void **p; size_t *cap, need, es; } b[] = {
        {(void **)&ws->p.xq, &ws->cap_xq, need_xq, sizeof(int16_t)}, {(void **)&ws->p.sx, &ws->cap_sx, need_sx, sizeof(float)},
        {(void **)&ws->p.xs, &ws->cap_xs, need_xs, sizeof(float)},   {(void **)&ws->p.xp, &ws->cap_xp, need_xp, sizeof(float)},
        {(void **)&ws->p.x8, &ws->cap_x8, need_x8, 1},               {(void **)&ws->wbuf, &ws->cap_w, need_w, sizeof(float)},
        {(void **)&ws->p.xd, &ws->cap_xd, need_xd, 1},
    };
    size_t added = 0;
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        if (b[i].need <= *b[i].cap) continue;
        added += (b[i].need - *b[i].cap) * b[i].es;
        if (reserve && grow(b[i].p, b[i].cap, b[i].need, b[i].es)) { added = (size_t)-1; break; }
    }
    return added;
}

static void run_job(void *ctx, int chunk, int n_chunks) {
    const job *j = ctx;
    (void)n_chunks;
    int64_t r0 = (int64_t)chunk * j->per, r1 = TS_MIN(j->w->rows, r0 + j->per);
    if (r0 >= r1) return;
    float *wb = j->ws->wbuf + (size_t)ts_pool_slot() * 4 * (size_t)j->w->cols;
    switch (j->kind) {
    case K_QDOT: ts_avx512_qdot(j->w, j->p, j->y, r0, r1); break;
    case K_FDOT: ts_avx512_fdot(j->w, j->x, j->n, j->y, r0, r1); break;
    case K_GEMM: ts_avx512_gemm(j->w, j->p->xp, j->n, j->y, r0, r1, wb); break;
    case K2_QDOT: ts_avx2_qdot(j->w, j->p->xp, j->p->xs, j->n, j->y, r0, r1); break;
    case K2_FDOT: ts_avx2_fdot(j->w, j->x, j->n, j->y, r0, r1); break;
    case K_Q8DOT: ts_avx512_q8dot(j->w, j->p->x8, j->p->sx, j->p->xs, j->n, j->y, r0, r1); break;
    default: ts_generic_rows(j->w, j->x, j->n, j->y, r0, r1, wb); break;
    }
}

/* f32 x, permuted for 4-bit (prefill). */
static void prep_f(ts_cpu_ws *ws, const ts_weight *w, const float *x, int n) {
    const int64_t cols = w->cols;
    for (int i = 0; i < n; i++)
        for (int64_t col = 0; col < cols; col++) {
            int64_t pos = col;
            if (w->dtype == TS_DTYPE_U32 && w->bits == 4) { int64_t c0 = col & ~(int64_t)63, k = col - c0; pos = c0 + (k & 1) * 32 + k / 2; }
            ws->p.xp[(int64_t)i * cols + pos] = x[(int64_t)i * cols + col];
        }
}

static int pick_kind(int mode, const ts_weight *w, int n, int flags) {
    const int prefill = flags & TS_LIN_PREFILL;
    int simd = mode == TS_KMODE_AVX512 || mode == TS_KMODE_AVX512Q8;
    int qok = w->dtype == TS_DTYPE_U32 && (w->bits == 4 || w->bits == 8) && w->group % 64 == 0 && w->group <= 1024;
    int fok = w->dtype == TS_DTYPE_BF16 || w->dtype == TS_DTYPE_F32;
    int kind = K_GENERIC;
    if (simd && (qok || fok)) kind = prefill && n >= 4 ? K_GEMM : qok ? K_QDOT : K_FDOT;
    if (mode == TS_KMODE_AVX512Q8 && kind == K_QDOT && w->bits == 4 && w->cols % 128 == 0 && w->cols / w->group <= 4096)
        kind = K_Q8DOT;
    int q2 = w->dtype == TS_DTYPE_U32 && (w->bits == 4 || w->bits == 8) && w->group % 16 == 0;
    if (mode == TS_KMODE_AVX2) kind = q2 ? K2_QDOT : fok ? K2_FDOT : K_GENERIC;
    /* groups of 16 or 32 (not a multiple of the AVX-512 kernels' 64): the
     * AVX2 kernel, which every AVX-512 CPU runs, beats the generic path ~40x */
    else if (simd && kind == K_GENERIC && q2) kind = K2_QDOT;
    /* packed weights: one kernel for decode, verify and prefill */
    if (mode == TS_KMODE_AVX512 && w->packed) kind = K_PDOT;
    return kind;
}

static int run_region(const ts_cpu_ctx *cx, const ts_weight *const *w, int nw, const float *const *x, int xs_distinct,
                      float *const *y, int n, int flags);

int ts_cpu_linear(const ts_cpu_ctx *cx, const ts_weight *w, const float *x, float *y, int n, int flags) {
    const int mode = ts_kmode();
    if (mode == TS_KMODE_REF) {
        ts_linear_ref(w, x, y, n);
        return 0;
    }
    const int kind = pick_kind(mode, w, n, flags);
    if (kind == K_PDOT) /* packed: the region driver below, with one weight */
        return run_region(cx, &w, 1, &x, 0, &y, n, flags);
    ts_cpu_ws *ws = cx->ws;
    int nt = ts_pool_threads(cx->pool);
    const int64_t cols = w->cols;
    size_t ng = (size_t)(w->group ? cols / w->group : 0);
    int bad = 0;
    if (kind == K_QDOT) {
        bad |= grow((void **)&ws->p.xq, &ws->cap_xq, (size_t)2 * n * cols, sizeof(int16_t));
        bad |= grow((void **)&ws->p.sx, &ws->cap_sx, (size_t)n * ng, sizeof(float));
        bad |= grow((void **)&ws->p.xs, &ws->cap_xs, (size_t)n * ng, sizeof(float));
    }
    if (kind == K_GEMM || kind == K2_QDOT) bad |= grow((void **)&ws->p.xp, &ws->cap_xp, (size_t)n * cols, sizeof(float));
    if (kind == K2_QDOT) bad |= grow((void **)&ws->p.xs, &ws->cap_xs, (size_t)n * ng, sizeof(float));
    if (kind == K_Q8DOT) {
        bad |= grow((void **)&ws->p.x8, &ws->cap_x8, (size_t)n * cols, 1);
        bad |= grow((void **)&ws->p.sx, &ws->cap_sx, (size_t)n * ng, sizeof(float));
        bad |= grow((void **)&ws->p.xs, &ws->cap_xs, (size_t)n * ng, sizeof(float));
    }
    bad |= grow((void **)&ws->wbuf, &ws->cap_w, (size_t)(nt + 1) * 4 * cols, sizeof(float));
    if (bad) /* out of memory for workspace: an error, never a quietly different kernel */
        return TS_E_NOMEM;
    ws->p.n = n;
    ws->p.cols = cols;
    ws->p.ng = (int64_t)ng;
    if (kind == K_QDOT)
        for (int i = 0; i < n; i++)
            ts_avx512_prep_q(x + (int64_t)i * cols, cols, w->group, w->bits, ws->p.xq + (int64_t)i * cols,
                             ws->p.xq + (int64_t)(n + i) * cols, ws->p.sx + (int64_t)i * ng, ws->p.xs + (int64_t)i * ng);
    if (kind == K_GEMM) prep_f(ws, w, x, n);
    if (kind == K_Q8DOT)
        for (int i = 0; i < n; i++)
            ts_avx512_prep_q8(x + (int64_t)i * cols, cols, w->group, ws->p.x8 + (int64_t)i * cols, ws->p.sx + (int64_t)i * ng,
                              ws->p.xs + (int64_t)i * ng);
    if (kind == K2_QDOT)
        for (int i = 0; i < n; i++)
            ts_avx2_prep_x(x + (int64_t)i * cols, cols, w->group, w->bits, ws->p.xp + (int64_t)i * cols, ws->p.xs + (int64_t)i * ng);
    /* chunks: ~4 per thread, at least 16 rows (whole cache lines of y): long
     * contiguous ranges keep the hardware prefetchers streaming (16 per thread
     * measured ~15% slower decode than 4 on the 0.8B shape, 8 ~5%), and a few
     * of them still let a thread that was held up hand work to the other */
    job j = {w, x, &ws->p, y, n, kind, w->rows, ws};
    if ((double)w->rows * (double)cols * n < 65536.0 || nt == 1) {
        run_job(&j, 0, 1);
    } else {
        int64_t per = (w->rows + 4 * nt - 1) / (4 * nt);
        j.per = TS_MAX(16, (per + 15) & ~(int64_t)15);
        ts_pool_run(cx->pool, run_job, &j, (int)((w->rows + j.per - 1) / j.per));
    }
    return 0;
}

void ts_cpu_parallel_for(const ts_cpu_ctx *cx, int n, ts_par_fn fn, void *ctx) {
    if (n <= 0) return;
    if (n == 1 || ts_pool_threads(cx->pool) == 1) {
        for (int i = 0; i < n; i++) fn(ctx, i, n);
    } else {
        ts_pool_run(cx->pool, fn, ctx, n);
    }
}

/* ---- several products in one pool region ----
 * The projections that read the same normalised x (q/k/v; GDN qkv/z/b/a;
 * gate/up) run as one region: x is prepared once and the threads split the
 * 16-row blocks of all of them, so a decode step pays one wake-up and one
 * join per group instead of per matrix, and small matrices (GDN b and a:
 * Hv rows) ride along instead of running alone on the caller. MoE decode
 * batches the selected experts the same way, each with its own x
 * (ts_linear_batch). Each output row is computed by the same kernel call as
 * in ts_linear: row-exact. */
typedef struct many_job {
    const ts_weight *w[TS_LINEAR_MANY_MAX + 1];
    float *y[TS_LINEAR_MANY_MAX];
    size_t xo[TS_LINEAR_MANY_MAX], so[TS_LINEAR_MANY_MAX]; /* offsets into xd and sx/xs */
    int n;
    int64_t start[TS_LINEAR_MANY_MAX + 1]; /* first global block of each weight */
    int64_t per;                           /* blocks per chunk */
    int amx;                               /* digits in the AMX layout, AMX kernel */
    size_t ub_stride;                      /* floats of ws->wbuf per pool slot (AMX unpacking) */
    ts_cpu_ws *ws;
} many_job;

/* AMX from this many x rows up at 24-bit activations, one more per digit
 * less (amx_rows). TS_AMX_ROWS, or ts_amx_min_rows in the tests, sets one
 * threshold for every precision. Both kernels give the same bits, so this
 * is a speed choice only. The VNNI kernel's multiplies grow with every x row (three
 * digits each); AMX pays a fixed unpacking of INT4 to bytes through memory
 * instead. Measured on the 2-core Xeon (2 threads, interleaved): 2 rows VNNI
 * wins (0.8B verify of 2 rows 1.17-1.21x a decode step against 1.26-1.28x
 * with AMX; the default model 1.53-1.55x against 1.57-1.60x); from 3 rows AMX
 * wins or ties (0.8B verify of 3 rows 1.33-1.39x against 1.32-1.42x, the
 * default model 1.78-1.93x against 2.09-2.12x; 4 rows: 1.54-1.55x against
 * 1.69-1.86x; kbench: 3 rows on 18 MB 0.52 against 0.62-0.67 ms, even on the
 * 143 MB head). */
static int g_amx_min = -1; /* -1: not read yet, 0: the default rule */

static int amx_rows(int nd) {
    if (g_amx_min < 0) {
        const char *e = getenv("TS_AMX_ROWS");
        g_amx_min = e && *e ? TS_MAX(1, atoi(e)) : 0;
    }
    return g_amx_min ? g_amx_min : 3 + 3 - nd;
}

void ts_amx_min_rows(int rows) { g_amx_min = rows < 0 ? 0 : TS_MAX(1, rows); }

static void run_many(void *ctx, int chunk, int n_chunks) {
    const many_job *j = ctx;
    const ts_cpu_ws *ws = j->ws;
    (void)n_chunks;
    int64_t b0 = (int64_t)chunk * j->per, b1 = b0 + j->per;
    for (int i = 0; j->start[i] < b1 && j->w[i]; i++) {
        int64_t lo = TS_MAX(b0, j->start[i]), hi = TS_MIN(b1, j->start[i + 1]);
        if (lo >= hi) continue;
        const ts_weight *w = j->w[i];
        int64_t r0 = (lo - j->start[i]) * 16, r1 = TS_MIN(w->rows, (hi - j->start[i]) * 16);
        if (j->amx)
            ts_amx_pdot(w, ws->p.xd + j->xo[i], ws->p.sx + j->so[i], ws->p.xs + j->so[i], j->n, ws->p.nd, j->y[i], r0, r1,
                        (uint8_t *)(ws->wbuf + (size_t)ts_pool_slot() * j->ub_stride));
        else
            ts_avx512_pdot(w, ws->p.xd + j->xo[i], ws->p.sx + j->so[i], ws->p.xs + j->so[i], j->n, ws->p.nd, j->y[i], r0, r1);
    }
}

/* Can these run as one region of packed products? */
static int fusable(const ts_weight *const *w, int nw, int n, int flags, int same_cols) {
    int mode = ts_kmode();
    if (nw < 2 || nw > TS_LINEAR_MANY_MAX || mode != TS_KMODE_AVX512) return 0;
    for (int i = 0; i < nw; i++)
        if (pick_kind(mode, w[i], n, flags) != K_PDOT || w[i]->group != w[0]->group ||
            ts_act_digits(w[i]) != ts_act_digits(w[0]) ||
            (same_cols && w[i]->cols != w[0]->cols))
            return 0;
    return 1;
}

static int one_by_one(const ts_cpu_ctx *cx, const ts_weight *const *w, int nw, const float *const *x, float *const *y,
                      int n, int flags) {
    for (int i = 0; i < nw; i++) {
        int rc = ts_cpu_linear(cx, w[i], x[i], y[i], n, flags);
        if (rc) return rc;
    }
    return 0;
}

/* The region itself; xs_distinct: x[i] per weight (else x[0] for all). */
static int run_region(const ts_cpu_ctx *cx, const ts_weight *const *w, int nw, const float *const *x, int xs_distinct,
                      float *const *y, int n, int flags) {
    ts_cpu_ws *ws = cx->ws;
    const int G = w[0]->group;
    /* drafts: one digit whatever the weight asks (a draft's precision only
     * moves the acceptance rate) */
    const int nd = flags & TS_LIN_DRAFT ? 1 : ts_act_digits(w[0]);
    size_t need_d = 0, need_s = 0, maxc = 0;
    for (int i = 0; i < (xs_distinct ? nw : 1); i++) {
        need_d += (size_t)nd * n * (size_t)w[i]->cols;
        need_s += (size_t)n * (size_t)(w[i]->cols / G);
    }
    for (int i = 0; i < nw; i++) maxc = TS_MAX(maxc, (size_t)w[i]->cols);
    /* AMX for the row-exact products of enough rows: a row more per digit
     * less, as VNNI's cost per row falls with the digits and AMX's fixed
     * unpacking does not (default model, 2 threads, products of a step: at 8
     * bits VNNI wins up to 4 rows, 0.84 against 0.88 ms, AMX from 5, 0.98
     * against 1.09; at 16 bits VNNI still wins at 4, 0.97 against 1.02) */
    const int amx = n >= amx_rows(nd) && !(flags & TS_LIN_DRAFT) && ts_amx_available();
    int bad = grow((void **)&ws->p.xd, &ws->cap_xd, need_d, 1);
    bad |= grow((void **)&ws->p.sx, &ws->cap_sx, need_s, sizeof(float));
    bad |= grow((void **)&ws->p.xs, &ws->cap_xs, need_s, sizeof(float));
    /* AMX: 32 * cols bytes per thread to unpack two INT4 row blocks into
     * (the per-thread rows ts_cpu_ws_reserve sets aside) */
    if (amx) bad |= grow((void **)&ws->wbuf, &ws->cap_w, (size_t)(ts_pool_threads(cx->pool) + 1) * 8 * maxc, sizeof(float));
    if (bad) return TS_E_NOMEM; /* never a quietly different kernel */
    ws->p.nd = nd;
    many_job j;
    memset(&j, 0, sizeof j);
    j.n = n;
    j.amx = amx;
    j.ub_stride = 8 * maxc;
    j.ws = ws;
    size_t xo = 0, so = 0;
    double macs = 0;
    for (int i = 0; i < nw; i++) {
        const int64_t cols = w[i]->cols;
        if (i == 0 || xs_distinct) {
            if (amx) ts_amx_prep_rows(x[i], n, cols, G, ws->p.nd, ws->p.xd + xo, ws->p.sx + so, ws->p.xs + so);
            else ts_p16_prep_rows(x[i], n, cols, G, ws->p.nd, ws->p.xd + xo, ws->p.sx + so, ws->p.xs + so);
            j.xo[i] = xo;
            j.so[i] = so;
            xo += (size_t)nd * n * (size_t)cols;
            so += (size_t)n * (size_t)(cols / G);
        } else {
            j.xo[i] = j.xo[0];
            j.so[i] = j.so[0];
        }
        j.w[i] = w[i];
        j.y[i] = y[i];
        j.start[i + 1] = j.start[i] + (w[i]->rows + 15) / 16;
        macs += (double)w[i]->rows * (double)cols * n;
    }
    for (int i = nw + 1; i <= TS_LINEAR_MANY_MAX; i++) j.start[i] = j.start[nw];
    int64_t blocks = j.start[nw];
    int nt = ts_pool_threads(cx->pool);
    if (macs < 65536.0 || nt == 1) {
        j.per = blocks;
        run_many(&j, 0, 1);
    } else {
        j.per = TS_MAX(1, (blocks + 4 * nt - 1) / (4 * nt));
        ts_pool_run(cx->pool, run_many, &j, (int)((blocks + j.per - 1) / j.per));
    }
    return 0;
}

int ts_cpu_linear_many(const ts_cpu_ctx *cx, const ts_weight *const *w, int nw, const float *x, float *const *y, int n,
                       int flags) {
    const float *xs[TS_LINEAR_MANY_MAX];
    if (!fusable(w, nw, n, flags, 1)) {
        for (int i = 0; i < nw; i++) {
            int rc = one_by_one(cx, w + i, 1, &x, y + i, n, flags);
            if (rc) return rc;
        }
        return 0;
    }
    xs[0] = x;
    return run_region(cx, w, nw, xs, 0, y, n, flags);
}

int ts_cpu_linear_batch(const ts_cpu_ctx *cx, const ts_weight *const *w, const float *const *x, float *const *y, int nw,
                        int flags) {
    if (!fusable(w, nw, 1, flags, 0)) return one_by_one(cx, w, nw, x, y, 1, flags);
    return run_region(cx, w, nw, x, 1, y, 1, flags);
}
