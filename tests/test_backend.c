/* test_backend.c: the backend contract, op by op (group `backend`), in the
 * style of llama.cpp's test-backend-ops.
 *
 * Owns: for every op of backend.h in every mode (exact, prefill, draft):
 *  - the backend under test against the reference backend (the CPU backend
 *    in the "ref" kernel mode) on the same fresh random inputs, within a
 *    tolerance per op and mode (what each mode is allowed to round);
 *  - under TS_MODE_EXACT, n rows equal to n one-row calls bit for bit on the
 *    backend under test (the row-exactness rule of backend.h);
 *  - the layering of the sources (which directory may include which).
 * Inputs are drawn fresh for every case (a new seed per case). The backends
 * are reached only through their op tables, with host data moved by write
 * and read, so a CUDA backend can be put in the list `under_test` and run
 * against the CPU reference unchanged.
 * Does not own: the kernels' own parity tests (test_kernels.c), the whole
 * engine on a backend (test_poison.c, test_spec.c).
 */
#include <dirent.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "ts_test.h"

/* ---- backends under test ---- */

typedef struct bk {
    const char *name;
    ts_backend *be;
    ts_stream *s;
} bk;

static int bk_open(bk *b, const char *kernels) {
    ts_backend_params p = {.n_threads = 0, .kernels = kernels};
    ts_error err = {0};
    memset(b, 0, sizeof *b);
    b->name = kernels;
    if (ts_cpu_backend_new(&p, &b->be, &err)) return -1;
    if (b->be->ops->stream_new(b->be, 16, 1024, 64, &b->s)) return -1;
    return 0;
}
static void bk_close(bk *b) {
    if (b->s) b->be->ops->stream_free(b->s);
    ts_backend_free(b->be);
}
static float *dalloc(bk *b, size_t n) { return b->be->ops->alloc(b->be, sizeof(float) * (n ? n : 1), TS_MEM_SCRATCH); }
static void dfree(bk *b, void *p) { b->be->ops->free(b->be, p); }
static float *up(bk *b, const float *h, size_t n) {
    float *d = dalloc(b, n);
    if (d && n) b->be->ops->write(b->s, tv_f32(d, 1, (int64_t)n), h);
    return d;
}
static void down(bk *b, float *h, const float *d, size_t n) {
    if (n) b->be->ops->read(b->s, h, tv_f32((float *)d, 1, (int64_t)n));
}
static unsigned enter(bk *b) { return b->be->ops->enter(b->s); }
static void leave(bk *b, unsigned o) { b->be->ops->leave(b->s, o); }

/* ---- inputs ---- */

static uint64_t g_seed = 1;
static uint64_t lcg;
static void fresh(void) { lcg = 0x9e3779b97f4a7c15ull * ++g_seed; }
static float rnd(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((lcg >> 40) % 20001) / 10000.0f - 1.0f;
}
static float *hrand(size_t n, float scale) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = rnd() * scale;
    return p;
}
static float max_rel(const float *a, const float *b, size_t n) {
    float e = 0, s = 1e-6f;
    for (size_t i = 0; i < n; i++) {
        e = fmaxf(e, fabsf(a[i] - b[i]));
        s = fmaxf(s, fabsf(b[i]));
    }
    return e / s;
}

static const ts_mode MODES[] = {TS_MODE_EXACT, TS_MODE_PREFILL, TS_MODE_DRAFT};
static const char *MODE_NAME[] = {"exact", "prefill", "draft"};
/* what each mode may round, relative to the output's scale (draft: int8 activations) */
static const float TOL[] = {2e-3f, 2e-3f, 6e-2f};

/* ---- weights: random, in every stored form, prepared by each backend ---- */

typedef struct hw {
    ts_weight w;        /* host descriptor (data owned here) */
    void *data, *scales, *biases;
} hw;

/* A [rows, cols] weight of kind 0 = f32, 1 = bf16, 2 = INT4 g64, 3 = INT8 g64. */
static void hw_make(hw *h, int kind, int64_t rows, int64_t cols) {
    memset(h, 0, sizeof *h);
    const size_t N = (size_t)rows * (size_t)cols;
    float *f = hrand(N, 0.1f);
    h->w.rows = rows;
    h->w.cols = cols;
    if (kind == 0) {
        h->w.dtype = TS_DTYPE_F32;
        h->data = f;
        h->w.data = f;
        return;
    }
    if (kind == 1) {
        uint16_t *b = malloc(2 * N);
        for (size_t i = 0; i < N; i++) {
            uint32_t u;
            memcpy(&u, &f[i], 4);
            b[i] = (uint16_t)(u >> 16);
        }
        free(f);
        h->w.dtype = TS_DTYPE_BF16;
        h->data = b;
        h->w.data = b;
        return;
    }
    const int bits = kind == 2 ? 4 : 8, G = 64;
    const size_t ng = (size_t)(cols / G);
    uint32_t *q = calloc((size_t)rows * (size_t)cols * bits / 32, 4);
    uint16_t *sc = malloc(2 * (size_t)rows * ng), *bi = malloc(2 * (size_t)rows * ng);
    for (size_t i = 0; i < (size_t)rows * ng; i++) {
        float s = 0.002f + 0.001f * (rnd() + 1.0f), b0 = -0.05f * (rnd() + 1.0f);
        uint32_t u;
        memcpy(&u, &s, 4);
        sc[i] = (uint16_t)(u >> 16);
        memcpy(&u, &b0, 4);
        bi[i] = (uint16_t)(u >> 16);
    }
    const uint32_t mx = (1u << bits) - 1;
    for (size_t i = 0; i < N; i++) {
        uint32_t v = (uint32_t)((rnd() + 1.0f) * 0.5f * mx + 0.5f) & mx;
        q[i * bits / 32] |= v << (i * bits % 32);
    }
    free(f);
    h->w.dtype = TS_DTYPE_U32;
    h->w.bits = bits;
    h->w.group = G;
    h->w.sdtype = TS_DTYPE_BF16;
    h->data = q, h->scales = sc, h->biases = bi;
    h->w.data = q, h->w.scales = sc, h->w.biases = bi;
}
static void hw_free(hw *h) {
    free(h->data);
    free(h->scales);
    free(h->biases);
}
/* the backend's own copy of the descriptor, prepared by it (its arena in *arena) */
static ts_weight prep_for(bk *b, const hw *h, void **arena) {
    ts_weight w = h->w;
    size_t n = b->be->ops->weight_bytes(b->be, &w);
    *arena = NULL;
    if (n) {
        *arena = b->be->ops->alloc(b->be, n, TS_MEM_WEIGHTS);
        b->be->ops->weight_prepare(b->be, &w, *arena);
    }
    return w;
}

/* ---- the cases ---- */

static bk g_ref, g_fast; /* reference and the backend under test */
static int g_ok;

static void open_backends(void) {
    g_ok = bk_open(&g_ref, "ref") == 0 && bk_open(&g_fast, "auto") == 0;
    CHECK_MSG(g_ok, "could not open the CPU backends");
}
static void close_backends(void) {
    bk_close(&g_ref);
    bk_close(&g_fast);
}

/* linear of nw weights of one kind over n rows: y on backend b */
static void run_linear(bk *b, ts_mode m, const hw *hs, int nw, const float *x, int n, float *y /* [nw][n*rows] */) {
    ts_weight w[4];
    const ts_weight *wp[4];
    void *ar[4];
    float *yd[4];
    const int64_t rows = hs[0].w.rows, cols = hs[0].w.cols;
    for (int i = 0; i < nw; i++) {
        w[i] = prep_for(b, &hs[i], &ar[i]);
        wp[i] = &w[i];
        yd[i] = dalloc(b, (size_t)n * rows);
    }
    float *xd = up(b, x, (size_t)n * cols);
    unsigned o = enter(b);
    b->be->ops->linear(b->s, m, wp, nw, xd, yd, n);
    leave(b, o);
    for (int i = 0; i < nw; i++) {
        down(b, y + (size_t)i * n * rows, yd[i], (size_t)n * rows);
        dfree(b, yd[i]);
        if (ar[i]) dfree(b, ar[i]);
    }
    dfree(b, xd);
}

TS_TEST(backend, linear_every_weight_kind_and_mode) {
    open_backends();
    static const char *KIND[] = {"f32", "bf16", "int4", "int8"};
    for (int kind = 0; kind < 4 && g_ok; kind++)
        for (int mi = 0; mi < 3; mi++)
            for (int nw = 1; nw <= 3; nw += 2)
                for (int n = 1; n <= 9; n += 4) {
                    fresh();
                    const int64_t rows = 48, cols = 256;
                    hw hs[3];
                    for (int i = 0; i < nw; i++) hw_make(&hs[i], kind, rows, cols);
                    float *x = hrand((size_t)n * cols, 1.0f);
                    const size_t ny = (size_t)nw * n * rows;
                    float *yr = malloc(4 * ny), *yf = malloc(4 * ny), *y1 = malloc(4 * ny);
                    run_linear(&g_ref, MODES[mi], hs, nw, x, n, yr);
                    run_linear(&g_fast, MODES[mi], hs, nw, x, n, yf);
                    float e = max_rel(yf, yr, ny);
                    CHECK_MSG(e < TOL[mi], "linear %s %s nw=%d n=%d: fast vs ref %g", KIND[kind], MODE_NAME[mi], nw, n, e);
                    if (MODES[mi] == TS_MODE_EXACT) {
                        /* n rows == n one-row calls, bit for bit */
                        for (int r = 0; r < n; r++) {
                            float *yo = malloc(4 * (size_t)nw * rows);
                            run_linear(&g_fast, TS_MODE_EXACT, hs, nw, x + (size_t)r * cols, 1, yo);
                            for (int i = 0; i < nw; i++)
                                memcpy(y1 + (size_t)i * n * rows + (size_t)r * rows, yo + (size_t)i * rows, 4 * rows);
                            free(yo);
                        }
                        CHECK_MSG(!memcmp(y1, yf, 4 * ny), "linear %s nw=%d n=%d: rows differ from one-row calls", KIND[kind],
                                  nw, n);
                    }
                    free(x), free(yr), free(yf), free(y1);
                    for (int i = 0; i < nw; i++) hw_free(&hs[i]);
                }
    close_backends();
}

/* norm (with and without the residual add), swiglu, embed, argmax, memory ops */
static void run_norm(bk *b, ts_mode m, const float *x, const float *add, const float *w, int n, int dim, float *xo,
                     float *yo) {
    float *xd = up(b, x, (size_t)n * dim), *ad = add ? up(b, add, (size_t)n * dim) : NULL, *wd = up(b, w, (size_t)dim);
    float *yd = dalloc(b, (size_t)n * dim);
    unsigned o = enter(b);
    b->be->ops->norm(b->s, m, xd, (size_t)dim, ad, wd, yd, (size_t)dim, n, dim, 1e-6f);
    leave(b, o);
    down(b, xo, xd, (size_t)n * dim);
    down(b, yo, yd, (size_t)n * dim);
    dfree(b, xd), dfree(b, wd), dfree(b, yd);
    if (ad) dfree(b, ad);
}

TS_TEST(backend, small_ops_every_mode) {
    open_backends();
    for (int mi = 0; mi < 3 && g_ok; mi++)
        for (int n = 1; n <= 7; n += 3) {
            fresh();
            const int dim = 160;
            const size_t N = (size_t)n * dim;
            float *x = hrand(N, 2.0f), *add = hrand(N, 1.0f), *w = hrand(dim, 1.0f);
            float *xr = malloc(4 * N), *yr = malloc(4 * N), *xf = malloc(4 * N), *yf = malloc(4 * N), *x1 = malloc(4 * N),
                  *y1 = malloc(4 * N);
            for (int wa = 0; wa < 2; wa++) {
                run_norm(&g_ref, MODES[mi], x, wa ? add : NULL, w, n, dim, xr, yr);
                run_norm(&g_fast, MODES[mi], x, wa ? add : NULL, w, n, dim, xf, yf);
                CHECK_MSG(max_rel(xf, xr, N) < 1e-6f && max_rel(yf, yr, N) < TOL[mi], "norm %s n=%d add=%d: %g",
                          MODE_NAME[mi], n, wa, max_rel(yf, yr, N));
                if (MODES[mi] == TS_MODE_EXACT) {
                    for (int r = 0; r < n; r++)
                        run_norm(&g_fast, TS_MODE_EXACT, x + (size_t)r * dim, wa ? add + (size_t)r * dim : NULL, w, 1, dim,
                                 x1 + (size_t)r * dim, y1 + (size_t)r * dim);
                    CHECK_MSG(!memcmp(x1, xf, 4 * N) && !memcmp(y1, yf, 4 * N), "norm n=%d: rows differ from one-row calls", n);
                }
            }
            /* swiglu: g = silu(g) * u */
            for (int bi = 0; bi < 2; bi++) {
                bk *b = bi ? &g_fast : &g_ref;
                float *gd = up(b, x, N), *ud = up(b, add, N);
                unsigned o = enter(b);
                b->be->ops->swiglu(b->s, MODES[mi], gd, ud, N);
                leave(b, o);
                down(b, bi ? yf : yr, gd, N);
                dfree(b, gd), dfree(b, ud);
            }
            CHECK_MSG(max_rel(yf, yr, N) < 1e-5f, "swiglu %s n=%d: %g", MODE_NAME[mi], n, max_rel(yf, yr, N));
            /* embed: rows of a bf16 table by ids, into a strided destination */
            hw tab;
            hw_make(&tab, 1, 37, dim);
            int32_t ids[7];
            for (int i = 0; i < n; i++) ids[i] = (int32_t)((lcg >> 20) % 37), lcg = lcg * 6364136223846793005ull + 1;
            for (int bi = 0; bi < 2; bi++) {
                bk *b = bi ? &g_fast : &g_ref;
                float *xd = dalloc(b, (size_t)n * 2 * dim);
                unsigned o = enter(b);
                b->be->ops->embed(b->s, MODES[mi], &tab.w, ids, xd, (size_t)2 * dim, n);
                leave(b, o);
                for (int i = 0; i < n; i++) down(b, (bi ? yf : yr) + (size_t)i * dim, xd + (size_t)i * 2 * dim, dim);
                dfree(b, xd);
            }
            CHECK_MSG(!memcmp(yf, yr, 4 * N), "embed %s n=%d differs", MODE_NAME[mi], n);
            hw_free(&tab);
            /* argmax with the winner's probability over the first K of each row */
            int32_t ir[7], iff[7];
            float pr[7], pf[7];
            const int K = dim - 17;
            for (int bi = 0; bi < 2; bi++) {
                bk *b = bi ? &g_fast : &g_ref;
                float *ld = up(b, x, N);
                b->be->ops->argmax(b->s, tv_f32(ld, n, dim), K, bi ? iff : ir, bi ? pf : pr);
                dfree(b, ld);
            }
            for (int i = 0; i < n; i++) {
                int best = 0;
                for (int k = 1; k < K; k++)
                    if (x[(size_t)i * dim + k] > x[(size_t)i * dim + best]) best = k;
                CHECK_MSG(ir[i] == best && iff[i] == best && fabsf(pf[i] - pr[i]) < 1e-5f * pr[i] + 1e-7f,
                          "argmax row %d: %d %d (want %d), p %g %g", i, ir[i], iff[i], best, pr[i], pf[i]);
            }
            free(x), free(add), free(w), free(xr), free(yr), free(xf), free(yf), free(x1), free(y1);
        }
    /* memory: write, copy into a strided view, fill, read back */
    if (g_ok) {
        fresh();
        float *h = hrand(64, 1.0f), back[128];
        float *a = up(&g_fast, h, 64), *b = dalloc(&g_fast, 128);
        g_fast.be->ops->fill(g_fast.s, tv_f32(b, 1, 128), -INFINITY);
        g_fast.be->ops->copy(g_fast.s, tv_ld(b, 4, 16, 32), tv_f32(a, 4, 16));
        down(&g_fast, back, b, 128);
        int ok = 1;
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 32; c++) ok &= c < 16 ? back[r * 32 + c] == h[r * 16 + c] : isinf(back[r * 32 + c]);
        CHECK_MSG(ok, "copy into a strided view / fill");
        const float *hr = g_fast.be->ops->host_rows(g_fast.s, tv_f32(a, 1, 64));
        CHECK(hr && !memcmp(hr, h, 4 * 64));
        CHECK(ts_be_sync(g_fast.s, NULL) == 0);
        dfree(&g_fast, a), dfree(&g_fast, b), free(h);
    }
    close_backends();
}

/* attention: q/k norms, RoPE, KV append, causal attention, gate */
typedef struct attn_case {
    int n, nq, nkv, D, rot, pos;
} attn_case;

static void run_attn(bk *b, ts_mode m, const attn_case *c, const float *qg, const float *k, const float *v,
                     const float *qn, const float *kn, const float *kc, const float *vc, int ctx, float *out, float *kco) {
    const size_t kvd = (size_t)c->nkv * c->D;
    float *qd = up(b, qg, (size_t)c->n * c->nq * 2 * c->D), *kd = up(b, k, c->n * kvd), *vd = up(b, v, c->n * kvd);
    float *qnd = up(b, qn, c->D), *knd = up(b, kn, c->D), *kcd = up(b, kc, ctx * kvd), *vcd = up(b, vc, ctx * kvd);
    float *att = dalloc(b, (size_t)c->n * c->nq * ctx), *od = dalloc(b, (size_t)c->n * c->nq * c->D);
    ts_attn_args a = {qd, kd, vd, qnd, knd, kcd, vcd, att, ctx, c->n, od, c->n, c->nq, c->nkv, c->D, c->rot, 0, 1e6, 1e-6f, TS_MASK_CAUSAL, 0, 0, 0, NULL};
    b->s->step.pos = c->pos;
    unsigned o = enter(b);
    b->be->ops->attn(b->s, m, &a);
    leave(b, o);
    down(b, out, od, (size_t)c->n * c->nq * c->D);
    down(b, kco, kcd, ctx * kvd);
    float *bufs[] = {qd, kd, vd, qnd, knd, kcd, vcd, att, od};
    for (int i = 0; i < 9; i++) dfree(b, bufs[i]);
}

TS_TEST(backend, attention_every_mode) {
    open_backends();
    static const attn_case cases[] = {{1, 4, 2, 32, 16, 0}, {4, 4, 2, 32, 32, 5}, {3, 8, 1, 64, 64, 11}, {9, 2, 2, 16, 8, 40}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0] && g_ok; ci++)
        for (int mi = 0; mi < 3; mi++) {
            fresh();
            const attn_case *c = &cases[ci];
            const int ctx = c->pos + c->n + 3;
            const size_t kvd = (size_t)c->nkv * c->D, no = (size_t)c->n * c->nq * c->D;
            float *qg = hrand((size_t)c->n * c->nq * 2 * c->D, 1.0f), *k = hrand(c->n * kvd, 1.0f), *v = hrand(c->n * kvd, 1.0f);
            float *qn = hrand(c->D, 1.0f), *kn = hrand(c->D, 1.0f), *kc = hrand(ctx * kvd, 1.0f), *vc = hrand(ctx * kvd, 1.0f);
            float *orf = malloc(4 * no), *of = malloc(4 * no), *o1 = malloc(4 * no);
            float *kr = malloc(4 * ctx * kvd), *kf = malloc(4 * ctx * kvd), *k1 = malloc(4 * ctx * kvd);
            run_attn(&g_ref, MODES[mi], c, qg, k, v, qn, kn, kc, vc, ctx, orf, kr);
            run_attn(&g_fast, MODES[mi], c, qg, k, v, qn, kn, kc, vc, ctx, of, kf);
            CHECK_MSG(max_rel(of, orf, no) < TOL[mi] && max_rel(kf, kr, ctx * kvd) < TOL[mi], "attn case %zu %s: %g",
                      ci, MODE_NAME[mi], max_rel(of, orf, no));
            if (MODES[mi] == TS_MODE_EXACT) {
                /* one row at a time, the cache carrying the earlier rows */
                memcpy(k1, kc, 4 * ctx * kvd);
                float *vc1 = malloc(4 * ctx * kvd);
                memcpy(vc1, vc, 4 * ctx * kvd);
                for (int r = 0; r < c->n; r++) {
                    attn_case c1 = *c;
                    c1.n = 1;
                    c1.pos = c->pos + r;
                    float *kk = malloc(4 * ctx * kvd);
                    run_attn(&g_fast, TS_MODE_EXACT, &c1, qg + (size_t)r * c->nq * 2 * c->D, k + r * kvd, v + r * kvd, qn, kn,
                             k1, vc1, ctx, o1 + (size_t)r * c->nq * c->D, kk);
                    memcpy(k1, kk, 4 * ctx * kvd);
                    memcpy(vc1 + (c->pos + r) * kvd, v + r * kvd, 4 * kvd);
                    free(kk);
                }
                CHECK_MSG(!memcmp(o1, of, 4 * no) && !memcmp(k1, kf, 4 * ctx * kvd),
                          "attn case %zu: rows differ from one-row calls", ci);
                free(vc1);
            }
            free(qg), free(k), free(v), free(qn), free(kn), free(kc), free(vc), free(orf), free(of), free(o1), free(kr), free(kf),
                free(k1);
        }
    close_backends();
}

/* Gated DeltaNet without a tape: token path and chunked prefill */
typedef struct gdn_case {
    int n, Hk, Hv, dk, dv, K;
} gdn_case;

static void run_gdn(bk *b, ts_mode m, const gdn_case *c, const float *const *in, float *const *out) {
    /* in: conv_w, neg_A, dt_bias, norm, S, conv, qkv, a, b, z; out: S, conv, o */
    const size_t C = 2 * (size_t)c->Hk * c->dk + (size_t)c->Hv * c->dv, Vd = (size_t)c->Hv * c->dv;
    const size_t sz[] = {c->K * C, c->Hv, c->Hv, c->dv, (size_t)c->Hv * c->dk * c->dv, (c->K - 1) * C, c->n * C,
                         (size_t)c->n * c->Hv, (size_t)c->n * c->Hv, c->n * Vd};
    float *d[10];
    for (int i = 0; i < 10; i++) d[i] = up(b, in[i], sz[i]);
    float *o = dalloc(b, c->n * Vd), *rows = dalloc(b, C);
    const int slots = TS_MIN(c->Hv, TS_DELTA_SLOTS);
    float *pfc = dalloc(b, c->n * C), *pfg = dalloc(b, 2 * (size_t)c->n * c->Hv);
    float *pfk = dalloc(b, (size_t)slots * ((size_t)c->dk * 64 + 2 * 64 * 64 + 2 * 64 * (size_t)c->dv));
    ts_gdn_args a = {0};
    a.conv_w = d[0], a.neg_A = d[1], a.dt_bias = d[2], a.norm = d[3];
    a.S[0] = d[4], a.conv[0] = d[5];
    a.rows = rows, a.cap = 1;
    a.pf_conv = pfc, a.pf_gate = pfg, a.pf_chunk = pfk;
    a.qkv = d[6], a.a = d[7], a.b = d[8], a.z = d[9], a.out = o;
    a.n = c->n, a.Hk = c->Hk, a.Hv = c->Hv, a.dk = c->dk, a.dv = c->dv, a.K = c->K, a.eps = 1e-6f;
    memset(&b->s->step, 0, sizeof b->s->step);
    unsigned ou = enter(b);
    b->be->ops->gdn(b->s, m, &a);
    leave(b, ou);
    down(b, out[0], d[4], sz[4]);
    down(b, out[1], d[5], sz[5]);
    down(b, out[2], o, c->n * Vd);
    for (int i = 0; i < 10; i++) dfree(b, d[i]);
    dfree(b, o), dfree(b, rows), dfree(b, pfc), dfree(b, pfg), dfree(b, pfk);
}

TS_TEST(backend, gdn_every_mode) {
    open_backends();
    static const gdn_case cases[] = {{1, 2, 4, 16, 32, 4}, {5, 2, 2, 32, 32, 4}, {9, 1, 2, 16, 48, 3}, {70, 2, 4, 16, 32, 4}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0] && g_ok; ci++)
        for (int mi = 0; mi < 3; mi++) {
            fresh();
            const gdn_case *c = &cases[ci];
            const size_t C = 2 * (size_t)c->Hk * c->dk + (size_t)c->Hv * c->dv, Vd = (size_t)c->Hv * c->dv;
            const size_t nS = (size_t)c->Hv * c->dk * c->dv, nc = (c->K - 1) * C;
            float *in[10] = {hrand(c->K * C, 0.5f), hrand(c->Hv, 1.0f), hrand(c->Hv, 1.0f), hrand(c->dv, 1.0f),
                             hrand(nS, 0.1f),       hrand(nc, 1.0f),   hrand(c->n * C, 1.0f), hrand((size_t)c->n * c->Hv, 2.0f),
                             hrand((size_t)c->n * c->Hv, 2.0f), hrand(c->n * Vd, 1.0f)};
            for (int h = 0; h < c->Hv; h++) in[1][h] = -fabsf(in[1][h]) - 0.1f; /* -exp(A_log) < 0 */
            float *r[3] = {malloc(4 * nS), malloc(4 * nc), malloc(4 * c->n * Vd)};
            float *f[3] = {malloc(4 * nS), malloc(4 * nc), malloc(4 * c->n * Vd)};
            run_gdn(&g_ref, MODES[mi], c, (const float *const *)in, r);
            run_gdn(&g_fast, MODES[mi], c, (const float *const *)in, f);
            /* the chunked prefill rounds differently (decays as exp of sums) */
            const float tol = MODES[mi] == TS_MODE_PREFILL && c->n > 1 ? 2e-2f : TOL[mi];
            CHECK_MSG(max_rel(f[0], r[0], nS) < tol && max_rel(f[2], r[2], c->n * Vd) < tol && !memcmp(f[1], r[1], 4 * nc),
                      "gdn case %zu %s: S %g out %g", ci, MODE_NAME[mi], max_rel(f[0], r[0], nS), max_rel(f[2], r[2], c->n * Vd));
            if (MODES[mi] == TS_MODE_EXACT) {
                /* one row at a time, carrying the state */
                float *S = malloc(4 * nS), *cv = malloc(4 * nc), *o1 = malloc(4 * c->n * Vd);
                memcpy(S, in[4], 4 * nS);
                memcpy(cv, in[5], 4 * nc);
                for (int t = 0; t < c->n; t++) {
                    gdn_case c1 = *c;
                    c1.n = 1;
                    const float *in1[10] = {in[0], in[1], in[2], in[3], S, cv, in[6] + t * C, in[7] + (size_t)t * c->Hv,
                                            in[8] + (size_t)t * c->Hv, in[9] + t * Vd};
                    float *S2 = malloc(4 * nS), *cv2 = malloc(4 * nc);
                    float *o[3] = {S2, cv2, o1 + t * Vd};
                    run_gdn(&g_fast, TS_MODE_EXACT, &c1, in1, o);
                    memcpy(S, S2, 4 * nS);
                    memcpy(cv, cv2, 4 * nc);
                    free(S2), free(cv2);
                }
                CHECK_MSG(!memcmp(S, f[0], 4 * nS) && !memcmp(cv, f[1], 4 * nc) && !memcmp(o1, f[2], 4 * c->n * Vd),
                          "gdn case %zu: rows differ from one-row calls", ci);
                free(S), free(cv), free(o1);
            }
            for (int i = 0; i < 10; i++) free(in[i]);
            for (int i = 0; i < 3; i++) free(r[i]), free(f[i]);
        }
    close_backends();
}

/* MoE: routing, experts through the table, the shared expert */
/* routed 1: routing first (moe_route), then moe over a table whose entries
 * for experts no row selected are zeroed (an expert cache fills only those) */
static void run_moe_r(bk *b, ts_mode m, const hw *ws, int E, int topk, int n, int H, int F, const float *u, float *t, int routed) {
    /* ws: router, E gates, E ups, E downs, s_gate, s_up, s_down, s_gate_w */
    const int nw = 1 + 3 * E + 4;
    ts_weight w[64];
    void *ar[64];
    for (int i = 0; i < nw; i++) w[i] = prep_for(b, &ws[i], &ar[i]);
    const int R = 16;
    float *ud = up(b, u, (size_t)n * H), *td = dalloc(b, (size_t)n * H), *lg = dalloc(b, (size_t)n * E);
    float *acc = dalloc(b, 2 * (size_t)H), *b0 = dalloc(b, (size_t)R * 2 * H), *b1 = dalloc(b, (size_t)R * F),
          *b2 = dalloc(b, (size_t)R * F);
    ts_moe_args a = {&w[0], &w[1], &w[1 + E], &w[1 + 2 * E], &w[1 + 3 * E], &w[2 + 3 * E], &w[3 + 3 * E], &w[4 + 3 * E],
                     ud, td, lg, acc, b0, b1, b2, R, F, n, E, topk, 1, H, NULL, NULL, NULL, NULL, 0, 0};
    int32_t ids[64];
    float rw[64];
    ts_weight tab[3 * 8];
    unsigned o = enter(b);
    if (routed) {
        a.route_ids = ids;
        a.route_w = rw;
        b->be->ops->moe_route(b->s, m, &a);
        memset(tab, 0, sizeof tab);
        for (int i = 0; i < n * topk; i++)
            for (int j = 0; j < 3; j++) tab[j * E + ids[i]] = w[1 + j * E + ids[i]];
        a.e_gate = tab;
        a.e_up = tab + E;
        a.e_down = tab + 2 * E;
    }
    b->be->ops->moe(b->s, m, &a);
    leave(b, o);
    down(b, t, td, (size_t)n * H);
    float *bufs[] = {ud, td, lg, acc, b0, b1, b2};
    for (int i = 0; i < 7; i++) dfree(b, bufs[i]);
    for (int i = 0; i < nw; i++)
        if (ar[i]) dfree(b, ar[i]);
}

static void run_moe(bk *b, ts_mode m, const hw *ws, int E, int topk, int n, int H, int F, const float *u, float *t) {
    run_moe_r(b, m, ws, E, topk, n, H, F, u, t, 0);
}

TS_TEST(backend, moe_every_mode) {
    open_backends();
    const int E = 8, topk = 2, H = 128, F = 64;
    for (int kind = 1; kind <= 2 && g_ok; kind++)
        for (int mi = 0; mi < 3; mi++)
            for (int n = 1; n <= 4; n += 3) {
                fresh();
                hw ws[1 + 3 * 8 + 4];
                hw_make(&ws[0], kind, E, H);
                for (int e = 0; e < E; e++) {
                    hw_make(&ws[1 + e], kind, F, H);
                    hw_make(&ws[1 + E + e], kind, F, H);
                    hw_make(&ws[1 + 2 * E + e], kind, H, F);
                }
                hw_make(&ws[1 + 3 * E], kind, F, H);
                hw_make(&ws[2 + 3 * E], kind, F, H);
                hw_make(&ws[3 + 3 * E], kind, H, F);
                hw_make(&ws[4 + 3 * E], 1, 1, H);
                float *u = hrand((size_t)n * H, 1.0f), *tr = malloc(4 * (size_t)n * H), *tf = malloc(4 * (size_t)n * H),
                      *t1 = malloc(4 * (size_t)n * H);
                run_moe(&g_ref, MODES[mi], ws, E, topk, n, H, F, u, tr);
                run_moe(&g_fast, MODES[mi], ws, E, topk, n, H, F, u, tf);
                float e = max_rel(tf, tr, (size_t)n * H);
                CHECK_MSG(e < TOL[mi] * 2, "moe kind %d %s n=%d: %g", kind, MODE_NAME[mi], n, e);
                if (MODES[mi] == TS_MODE_EXACT) {
                    for (int r = 0; r < n; r++) run_moe(&g_fast, TS_MODE_EXACT, ws, E, topk, 1, H, F, u + (size_t)r * H, t1 + (size_t)r * H);
                    CHECK_MSG(!memcmp(t1, tf, 4 * (size_t)n * H), "moe kind %d n=%d: rows differ from one-row calls", kind, n);
                }
                /* routing first (expert streaming) changes no bit, in every mode */
                if (g_fast.be->ops->moe_route) {
                    run_moe_r(&g_fast, MODES[mi], ws, E, topk, n, H, F, u, t1, 1);
                    CHECK_MSG(!memcmp(t1, tf, 4 * (size_t)n * H), "moe kind %d %s n=%d: routed first differs", kind, MODE_NAME[mi], n);
                }
                free(u), free(tr), free(tf), free(t1);
                for (int i = 0; i < 1 + 3 * E + 4; i++) hw_free(&ws[i]);
            }
    close_backends();
}

/* ---- layering: which directory may include which ---- */

typedef struct rule {
    const char *dir;       /* sources under this directory */
    const char *banned[6]; /* may not include headers under these */
} rule;

/* The first violation in dir (a message in out), or 0. */
static int scan_dir(const rule *r, char *out, size_t cap) {
    DIR *d = opendir(r->dir);
    if (!d) {
        snprintf(out, cap, "cannot read %s", r->dir);
        return 1;
    }
    struct dirent *de;
    int bad = 0;
    while (!bad && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 3 || (strcmp(de->d_name + l - 2, ".c") && strcmp(de->d_name + l - 2, ".h"))) continue;
        char path[512], line[1024];
        snprintf(path, sizeof path, "%s/%s", r->dir, de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        while (!bad && fgets(line, sizeof line, f)) {
            const char *p = line;
            while (*p == ' ' || *p == '\t') p++;
            if (strncmp(p, "#include", 8)) continue;
            p += 8;
            while (*p == ' ') p++;
            if (*p != '"') continue;
            p++;
            for (int i = 0; i < 6 && r->banned[i]; i++)
                if (!strncmp(p, r->banned[i], strlen(r->banned[i]))) {
                    snprintf(out, cap, "%s includes \"%.*s", path, (int)strcspn(p, "\"\n"), p);
                    bad = 1;
                    break;
                }
        }
        fclose(f);
    }
    closedir(d);
    return bad;
}

TS_TEST(backend, layering_of_includes) {
    /* model code stands on backend.h, never on a backend; backends include
     * no model, generation or API header; generation and the API layer
     * reach the machine through the model and backend.h only; frontends see
     * include/ only (the Makefile also compiles them without -Isrc) */
    static const rule rules[] = {
        {"src/model", {"cpu/", "cuda/", "kernels.h", "engine/", "gen/", NULL}},
        {"src/gen", {"cpu/", "cuda/", "kernels.h", NULL}},
        {"src/engine", {"cpu/", "cuda/", "kernels.h", NULL}},
        {"src/cpu", {"model/", "engine/", "gen/", "text/"}},
        {"tools/cli", {"model/", "engine/", "gen/", "cpu/"}},
        {"tools/server", {"model/", "engine/", "gen/", "cpu/"}},
    };
    char msg[600];
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) CHECK_MSG(!scan_dir(&rules[i], msg, sizeof msg), "%s", msg);
    /* the checker itself finds a violation where there is one */
    static const rule self = {"tests", {"ts_test.h", NULL}};
    CHECK_MSG(scan_dir(&self, msg, sizeof msg) && strstr(msg, "ts_test.h"), "the include scanner missed tests/ including ts_test.h");
}

/* ---- engines own their backends ---- */

typedef struct side_job {
    ts_engine *e;
    int32_t ids[64];
    int n, rc;
} side_job;

static int side_tok(void *u, int32_t id) {
    side_job *j = u;
    if (j->n < 64) j->ids[j->n++] = id;
    return 0;
}

static void *side_run(void *arg) {
    side_job *j = arg;
    ts_session *s = NULL;
    ts_error err = {0};
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.spec_draft = 2;
    j->rc = ts_session_new(j->e, &sp, &s, &err);
    static const int32_t prompt[] = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 48;
    gp.spec_draft = 2;
    j->n = 0;
    if (!j->rc) j->rc = ts_generate(s, prompt, 10, &gp, side_tok, j, NULL, &err);
    ts_session_free(s);
    return NULL;
}

/* Two engines of one process with different thread counts and kernel modes,
 * and two sessions of one engine, generating at the same time on their own
 * threads: each gives the ids it gives alone (thread counts never change
 * bits; a kernel mode is the engine's, not the process's). */
TS_TEST(backend, engines_and_sessions_side_by_side) {
    ts_engine *e[3] = {NULL, NULL, NULL};
    ts_engine_params p[3];
    for (int i = 0; i < 3; i++) ts_engine_params_default(&p[i]);
    p[0].n_threads = 1;
    p[1].n_threads = 2;
    p[2].n_threads = 2;
    p[2].kernels = "generic";
    ts_error err = {0};
    for (int i = 0; i < 3; i++) CHECK_MSG(ts_engine_open("tests/fixtures/tiny-moe", &p[i], &e[i], &err) == 0, "%s", err.msg);
    if (!e[0] || !e[1] || !e[2]) return;
    side_job alone[3], both[4];
    for (int i = 0; i < 3; i++) {
        alone[i].e = e[i];
        side_run(&alone[i]);
        CHECK(alone[i].rc == 0 && alone[i].n == 48);
    }
    /* concurrently: engine 0, engine 1, engine 2, and a second session of engine 1 */
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        both[i].e = e[i < 3 ? i : 1];
        pthread_create(&th[i], NULL, side_run, &both[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        const side_job *a = &alone[i < 3 ? i : 1];
        CHECK_MSG(both[i].rc == 0 && both[i].n == a->n && !memcmp(both[i].ids, a->ids, sizeof(int32_t) * (size_t)a->n),
                  "job %d: concurrent ids differ from alone", i);
    }
    CHECK_MSG(alone[0].n == alone[1].n && !memcmp(alone[0].ids, alone[1].ids, sizeof(int32_t) * (size_t)alone[0].n),
              "1 and 2 threads give different ids");
    ts_engine_close(e[0]);
    ts_engine_close(e[1]);
    ts_engine_close(e[2]);
}
