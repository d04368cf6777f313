/* test_cuda.c: the CUDA kernels (src/cuda/, tsc.h) against the CPU reference.
 *
 * Every test opens device TS_CUDA_DEVICE (default 0); without a CUDA build or
 * without a device it is skipped (the runner prints "[ SKIP ]" with the
 * reason and counts it neither passed nor failed), so the group is honest on
 * the CI machine and only means something on a GPU (scripts/gpu_check.sh
 * fails when any of them skips).
 *
 * Inputs are fresh random values on every run (seeded from the clock; the
 * seed is printed so a failure can be replayed with TS_TEST_SEED). Two kinds
 * of checks:
 *  - parity with the CPU reference (linear_ref.c and mirrors of qwen35.c's
 *    row math), with tolerances stated per op: f32 reduction-order bounds
 *    (the GPU sums in other orders, with FMAs), never bf16 ones;
 *  - the verify rule: an n-row call equals n one-row calls bit for bit
 *    (memcmp), and a product's rows do not depend on the other weights
 *    sharing its launch;
 *  - one op through the contract (src/backend.h), the CUDA backend against
 *    the CPU backend: DFlash's block-masked attention (backend.cu's
 *    attn_block), which has no tsc.h entry point of its own.
 */
#include <math.h>
#include <time.h>

#include "backend.h"
#include "cuda/tsc.h"
#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "quant/quant.h"
#include "ts_test.h"

static uint64_t rs;
static void seed_once(void) {
    if (rs) return;
    const char *e = getenv("TS_TEST_SEED");
    rs = e && *e ? strtoull(e, NULL, 0) : ((uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull) | 1;
    fprintf(stderr, "  cuda tests: TS_TEST_SEED=%llu\n", (unsigned long long)rs);
}
static float fr(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static void frand(float *p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = fr() * scale;
}

static int dev_index(void) {
    const char *e = getenv("TS_CUDA_DEVICE");
    return e && *e ? atoi(e) : 0;
}

/* Open the device or skip the test with the reason. */
#define OPEN(c)                                                                  \
    tsc_ctx *c = NULL;                                                           \
    do {                                                                         \
        ts_error e_;                                                             \
        seed_once();                                                             \
        if (tsc_open(dev_index(), &c, &e_)) SKIP("no CUDA: %s", e_.msg);         \
    } while (0)

#define SYNC_OK(c)                                                               \
    do {                                                                         \
        ts_error e_;                                                             \
        if (tsc_sync((c), &e_)) {                                                \
            ts_test_fail(__FILE__, __LINE__, "device error: %s", e_.msg);        \
            tsc_close(c);                                                        \
            return;                                                              \
        }                                                                        \
    } while (0)

static void *up(tsc_ctx *c, const void *h, size_t bytes) {
    void *d = tsc_alloc(c, bytes);
    if (d) tsc_write(c, d, h, bytes);
    return d;
}

static float *down(tsc_ctx *c, const void *d, size_t n) {
    float *h = malloc(n * sizeof(float));
    tsc_read(c, h, d, n * sizeof(float));
    return h;
}

/* ---- host weights ---- */

typedef struct { ts_weight w; void *d, *s, *b; } hw;

static void make_w(hw *o, ts_dtype dt, int bits, int group, ts_dtype sdt, int64_t rows, int64_t cols) {
    memset(o, 0, sizeof *o);
    o->w.rows = rows, o->w.cols = cols;
    float *row = malloc(sizeof(float) * cols);
    if (dt == TS_DTYPE_U32) {
        const size_t es = ts_dtype_size(sdt);
        o->d = malloc((size_t)rows * cols * bits / 8);
        o->s = malloc((size_t)rows * (cols / group) * es);
        o->b = malloc((size_t)rows * (cols / group) * es);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < cols; c++) row[c] = fr() * 0.05f;
            ts_quant_row(row, cols, bits, group, sdt, (uint32_t *)o->d + r * (cols * bits / 32),
                         (char *)o->s + r * (cols / group) * es, (char *)o->b + r * (cols / group) * es);
        }
        o->w.dtype = TS_DTYPE_U32, o->w.bits = bits, o->w.group = group, o->w.sdtype = sdt;
        o->w.scales = o->s, o->w.biases = o->b;
    } else {
        o->d = malloc((size_t)rows * cols * ts_dtype_size(dt));
        for (int64_t i = 0; i < rows * cols; i++) ts_quant_sset(dt, o->d, i, fr() * 0.05f);
        o->w.dtype = dt;
    }
    o->w.data = o->d;
    free(row);
}

static void free_hw(hw *o) { free(o->d), free(o->s), free(o->b); }

static tsc_weight desc(const ts_weight *w) {
    tsc_weight t = {w->dtype, w->bits, w->group, w->rows, w->cols, w->data, w->scales, w->biases, w->sdtype, 0, 0};
    return t;
}

/* ---- context, memory, errors ---- */

TS_TEST(cuda, context_errors_memory) {
    OPEN(c);
    char name[128];
    int n_sm = 0;
    size_t fr_b = 0, tot = 0;
    CHECK(tsc_info(c, name, sizeof name, &n_sm, &fr_b, &tot) == 0);
    fprintf(stderr, "  device: %s, %d SMs, %.1f of %.1f GiB free\n", name, n_sm, fr_b / 1073741824.0, tot / 1073741824.0);
    CHECK(n_sm > 0 && tot > 0);
    /* counted allocations */
    CHECK(tsc_mem_used(c) == 0);
    void *a = tsc_alloc(c, 1000), *b = tsc_alloc(c, 24);
    CHECK(a && b && tsc_mem_used(c) == 1024);
    tsc_free(c, a);
    CHECK(tsc_mem_used(c) == 24);
    tsc_free(c, b);
    CHECK(tsc_mem_used(c) == 0);
    SYNC_OK(c);
    /* a bad argument is sticky and named by sync; later calls do nothing */
    float *x = tsc_alloc(c, 64);
    tsc_weight w = {TS_DTYPE_F32, 0, 0, 4, 4, x, NULL, NULL, TS_DTYPE_F32, 0, 0};
    const tsc_weight *wl[1] = {&w};
    float *yl[1] = {x};
    tsc_linear(c, wl, 1, x, yl, 17);
    ts_error e;
    CHECK(tsc_sync(c, &e) == TS_E_ARG);
    CHECK_MSG(strstr(e.msg, "tsc_linear") != NULL, "message: %s", e.msg);
    CHECK(tsc_alloc(c, 16) == NULL);
    CHECK(tsc_error(c) == TS_E_ARG);
    tsc_close(c);
    /* an unsupported layout is refused with its reason */
    tsc_weight q = {TS_DTYPE_U32, 4, 48, 4, 96, NULL, NULL, NULL, TS_DTYPE_BF16, 0, 0};
    CHECK(tsc_weight_check(&q, &e) == TS_E_UNSUPPORTED && strstr(e.msg, "group"));
    /* a device index out of range */
    tsc_ctx *c2 = NULL;
    CHECK(tsc_open(999, &c2, &e) == TS_E_ARG && c2 == NULL);
    CHECK_MSG(strstr(e.msg, "999") != NULL, "message: %s", e.msg);
}

/* ---- products ---- */

/* mlx: keep a 4-bit weight in the MLX layout at upload (TSC_Q4T=0 around
 * it), so that its products run q4dp.cu's kernels with nd digits of x (0:
 * 3): the dp4a k_q4dp, or at nd = 1 and groups of 32..128 the opt-in group
 * numerics ("grp", TSC_Q4G=1: k_q4g for 1 and 2 rows, the tensor-core
 * k_q4gm for 3..16) or the opt-in k_q4mm ("mma", TSC_Q4MM=1); other 4-bit
 * weights with cols % 64 == 0 go to Q4T */
typedef struct { ts_dtype dt; int bits, group; ts_dtype sdt; const char *name; int mlx, nd; } lin_cfg;

static const lin_cfg LIN_CFG[] = {
    {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, "dp4a g64 bf16", 1, 3}, {TS_DTYPE_U32, 4, 32, TS_DTYPE_F16, "dp4a g32 f16", 1, 3},
    {TS_DTYPE_U32, 4, 128, TS_DTYPE_F32, "dp4a g128 x16", 1, 2}, {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, "mma g64 x8", 1, 1},
    {TS_DTYPE_U32, 4, 32, TS_DTYPE_F16, "mma g32 x8", 1, 1},     {TS_DTYPE_U32, 4, 128, TS_DTYPE_F32, "mma g128 x8", 1, 1},
    {TS_DTYPE_U32, 4, 256, TS_DTYPE_BF16, "dp4a g256 x8", 1, 1}, {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, "grp g64 x8", 1, 1},
    {TS_DTYPE_U32, 4, 32, TS_DTYPE_F16, "grp g32 x8", 1, 1},      {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, "grp g64 x8 nodig", 1, 1},
    {TS_DTYPE_U32, 4, 128, TS_DTYPE_F32, "grp g128 x8", 1, 1},    {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, "dp4a g64 x8", 1, 1},
    {TS_DTYPE_U32, 4, 32, TS_DTYPE_F16, "dp4a g32 x8 nodig", 1, 1},
    {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, "int4 g64 bf16", 0, 0}, {TS_DTYPE_U32, 4, 32, TS_DTYPE_F16, "int4 g32 f16", 0, 0},
    {TS_DTYPE_U32, 4, 128, TS_DTYPE_F32, "int4 g128 f32", 0, 0}, {TS_DTYPE_U32, 8, 64, TS_DTYPE_BF16, "int8 g64 bf16", 0, 0},
    {TS_DTYPE_U32, 8, 32, TS_DTYPE_F32, "int8 g32 f32", 0, 0},   {TS_DTYPE_BF16, 0, 0, TS_DTYPE_F32, "bf16", 0, 0},
    {TS_DTYPE_F16, 0, 0, TS_DTYPE_F32, "f16", 0, 0},             {TS_DTYPE_F32, 0, 0, TS_DTYPE_F32, "f32", 0, 0},
};

static double sval(ts_dtype t, const void *p, int64_t i) {
    if (t == TS_DTYPE_BF16) return ts_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == TS_DTYPE_F16) return ts_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* The magnitude a product term's rounding scales with: |w| for plain
 * weights, |s q| + |b| for quantized ones (the GPU sums s q x and b x apart,
 * so a weight near zero from s q ~ -b still carries the rounding of each). */
static double wmag(const ts_weight *w, int64_t r, int64_t c) {
    if (w->dtype != TS_DTYPE_U32) return fabs((double)ts_weight_get(w, r, c));
    const int64_t gi = r * (w->cols / w->group) + c / w->group;
    const double b = sval(w->sdtype, w->biases, gi);
    return fabs((double)ts_weight_get(w, r, c) - b) + fabs(b);
}

/* Tolerance of the products: |y - y_ref| <= 3e-5 * sum_c m_rc |x_c| (m: wmag). The GPU
 * sums a row in another order (32-value lane chunks, a 5-level shuffle tree,
 * KS slices) with FMAs, and the quantized path sums s * (q . x) + b * sum(x)
 * per chunk instead of (s q + b) x per element: each term's rounding is
 * ~eps * (|s q x| + |b x|), over chunks of 32 and a tree of 32 lanes:
 * ~100-200 eps of the bound in the worst case, about 1e-5. */
#define LIN_TOL 3e-5f

TS_TEST(cuda, linear_parity_and_row_exact) {
    OPEN(c);
    /* the digits scratch of the engine's streams (q4dp.cu, "Digits once":
     * several-row passes stage once and, with 8-bit x, stream through
     * k_q4dp_as); "nodig": without it (every block stages, k_q4dp) */
    void *dgs = tsc_alloc(c, tsc_digits_ws_bytes());
    /* the last: many virtual blocks a persistent block (the Q4T ring runs across them) */
    static const int64_t shapes[][2] = {{77, 1024}, {260, 2560}, {3, 4096}, {1100, 512}, {33, 12288}, {9600, 1024}};
    const int N = TSC_ROWS_MAX;
    for (size_t ci = 0; ci < sizeof LIN_CFG / sizeof LIN_CFG[0]; ci++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const lin_cfg *cf = &LIN_CFG[ci];
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            if (cf->dt == TS_DTYPE_U32 && cols % cf->group) continue;
            tsc_set_digits(c, strstr(cf->name, "nodig") ? NULL : dgs, tsc_digits_ws_bytes());
            hw h, h2;
            make_w(&h, cf->dt, cf->bits, cf->group, cf->sdt, rows, cols);
            make_w(&h2, cf->dt, cf->bits, cf->group, cf->sdt, 40, cols);
            float *x = malloc(sizeof(float) * N * cols), *ref = malloc(sizeof(float) * N * rows);
            frand(x, (size_t)N * cols, 1.0f);
            for (int k = 0; k < 8; k++) x[(size_t)((fr() * 0.5f + 0.5f) * (float)(N * cols - 1))] *= 8.0f; /* outliers */
            ts_linear_ref(&h.w, x, ref, N);
            tsc_weight hd = desc(&h.w), dw, hd2 = desc(&h2.w), dw2;
            hd.act_digits = hd2.act_digits = cf->nd;
            ts_error e;
            if (cf->mlx) setenv("TSC_Q4T", "0", 1);
            if (!strncmp(cf->name, "mma", 3)) setenv("TSC_Q4MM", "1", 1); /* k_q4mm is opt-in (q4dp.cu) */
            if (!strncmp(cf->name, "grp", 3)) setenv("TSC_Q4G", "1", 1); /* the group numerics are opt-in (q4grp.cu) */
            CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0 && tsc_weight_upload(c, &hd2, &dw2, &e) == 0, "%s", e.msg);
            if (cf->mlx) {
                unsetenv("TSC_Q4T");
                CHECK(dw.layout == TSC_LAYOUT_MLX);
            }
            float *dx = up(c, x, sizeof(float) * N * cols), *dy = tsc_alloc(c, sizeof(float) * N * rows);
            float *dy1 = tsc_alloc(c, sizeof(float) * N * rows), *dz = tsc_alloc(c, sizeof(float) * N * 40);
            const tsc_weight *wl[3] = {&dw2, &dw, &dw2};
            float *yl[3] = {dz, dy, dz};
            /* all 16 rows at once, between two other weights in the launch */
            tsc_linear(c, wl, 3, dx, yl, N);
            /* each row alone, and rows in calls of 2 to 7 (one pass with
             * 8-bit x, passes of 4 and the rest with 16- and 24-bit x; the
             * group numerics: k_q4g to 2 rows, k_q4gm from 3) */
            for (int i = 0; i < N; i++) {
                float *y1 = dy1 + (size_t)i * rows;
                tsc_linear(c, (const tsc_weight *[]){&dw}, 1, dx + (size_t)i * cols, &y1, 1);
            }
            SYNC_OK(c);
            float *y = down(c, dy, (size_t)N * rows), *y1 = down(c, dy1, (size_t)N * rows);
            float worst = 0;
            int bad = -1;
            double *wa = malloc(sizeof(double) * cols);
            /* fewer than 3 digits: x rounded to 1/L of its group's largest
             * value, half a unit per element, on top of the f32 tolerance */
            const double L = cf->nd == 1 ? 127.0 : cf->nd == 2 ? 32639.0 : 0;
            for (int64_t r = 0; r < rows && bad < 0; r++) {
                for (int64_t k = 0; k < cols; k++) wa[k] = wmag(&h.w, r, k);
                for (int i = 0; i < N; i++) {
                    double bound = 0, qb = 0;
                    for (int64_t k = 0; k < cols; k++) bound += wa[k] * fabs((double)x[(size_t)i * cols + k]);
                    if (L > 0)
                        for (int64_t g0 = 0; g0 < cols; g0 += cf->group) {
                            double m = 0, sw = 0;
                            for (int64_t k = g0; k < g0 + cf->group; k++) {
                                m = fmax(m, fabs((double)x[(size_t)i * cols + k]));
                                sw += wa[k];
                            }
                            qb += sw * 0.5 * m / L;
                        }
                    const float d = fabsf(y[(size_t)i * rows + r] - ref[(size_t)i * rows + r]) - (float)(1.01 * qb);
                    const float rel = d <= 0 ? 0.f : d / (float)(bound + 1e-30);
                    if (!(rel <= LIN_TOL)) { bad = (int)r; worst = rel; break; }
                    if (rel > worst) worst = rel;
                }
            }
            free(wa);
            CHECK_MSG(bad < 0, "%s %lldx%lld: row %d off by %.3g of sum m|x| (tol %.0e)", cf->name, (long long)rows,
                      (long long)cols, bad, worst, LIN_TOL);
            CHECK_MSG(!memcmp(y, y1, sizeof(float) * N * rows), "%s %lldx%lld: 16-row call != 16 one-row calls",
                      cf->name, (long long)rows, (long long)cols);
            static const int NS[] = {2, 3, 4, 5, 6, 7};
            for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++) {
                const int n = NS[ni];
                tsc_fill(c, dy1, NAN, (size_t)N * rows);
                float *yy = dy1;
                tsc_linear(c, (const tsc_weight *[]){&dw}, 1, dx, &yy, n);
                SYNC_OK(c);
                float *yn = down(c, dy1, (size_t)n * rows);
                CHECK_MSG(!memcmp(yn, y, sizeof(float) * n * rows), "%s: %d-row call differs", cf->name, n);
                free(yn);
            }
            if (si == 0) fprintf(stderr, "  %-18s worst %.2g of sum m|x| (tol %.0e)\n", cf->name, worst, LIN_TOL);
            unsetenv("TSC_Q4MM");
            unsetenv("TSC_Q4G");
            free(y), free(y1), free(x), free(ref);
            tsc_free(c, dx), tsc_free(c, dy), tsc_free(c, dy1), tsc_free(c, dz);
            tsc_weight_free(c, &dw), tsc_weight_free(c, &dw2);
            free_hw(&h), free_hw(&h2);
        }
    tsc_set_digits(c, NULL, 0);
    tsc_free(c, dgs);
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}

/* tsc_linear_many (a chunk's rows in one launch of the plain kernel): each
 * row's bits equal a one-row tsc_linear's, for the plain kernel's formats,
 * two weights a call, row counts with and without a partial 4-row group;
 * 4-bit MLX weights are refused (they take the dp4a kernel). */
TS_TEST(cuda, linear_many_same_bits) {
    OPEN(c);
    static const struct { ts_dtype dt; int bits; int64_t cols; } fm[] = {
        {TS_DTYPE_BF16, 0, 1024}, {TS_DTYPE_F16, 0, 512}, {TS_DTYPE_F32, 0, 768}, {TS_DTYPE_U32, 8, 2048}};
    static const int NS[] = {37, 130, 17};
    for (size_t f = 0; f < sizeof fm / sizeof fm[0]; f++) {
        const int64_t cols = fm[f].cols, rows[2] = {77, 300};
        hw h[2];
        tsc_weight dw[2];
        setenv("TSC_Q4T", "0", 1);
        for (int i = 0; i < 2; i++) {
            make_w(&h[i], fm[f].dt, fm[f].bits, 64, TS_DTYPE_BF16, rows[i], cols);
            tsc_weight hd = desc(&h[i].w);
            ts_error e;
            CHECK_MSG(tsc_weight_upload(c, &hd, &dw[i], &e) == 0, "%s", e.msg);
            CHECK(tsc_linear_many_takes(&dw[i]));
        }
        unsetenv("TSC_Q4T");
        for (size_t k = 0; k < sizeof NS / sizeof NS[0]; k++) {
            const int n = NS[k];
            float *x = malloc(sizeof(float) * n * cols);
            frand(x, (size_t)n * cols, 1.0f);
            float *dx = up(c, x, sizeof(float) * n * cols);
            float *dm[2], *d1[2];
            for (int i = 0; i < 2; i++) {
                dm[i] = tsc_alloc(c, sizeof(float) * n * rows[i]), d1[i] = tsc_alloc(c, sizeof(float) * n * rows[i]);
                tsc_fill(c, dm[i], NAN, (size_t)n * rows[i]);
            }
            const tsc_weight *pw[2] = {&dw[0], &dw[1]};
            tsc_linear_many(c, pw, 2, dx, dm, n);
            for (int r = 0; r < n; r++)
                for (int i = 0; i < 2; i++) {
                    float *y1 = d1[i] + (size_t)r * rows[i];
                    tsc_linear(c, &pw[i], 1, dx + (size_t)r * cols, &y1, 1);
                }
            SYNC_OK(c);
            for (int i = 0; i < 2; i++) {
                float *a = down(c, dm[i], (size_t)n * rows[i]), *b = down(c, d1[i], (size_t)n * rows[i]);
                CHECK_MSG(!memcmp(a, b, sizeof(float) * n * rows[i]), "linear_many format %zu, %d rows, weight %d: "
                          "differs from one-row tsc_linear", f, n, i);
                free(a), free(b);
                tsc_free(c, dm[i]), tsc_free(c, d1[i]);
            }
            free(x);
            tsc_free(c, dx);
        }
        for (int i = 0; i < 2; i++) tsc_weight_free(c, &dw[i]), free_hw(&h[i]);
    }
    hw h4;
    make_w(&h4, TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, 16, 256);
    tsc_weight d4 = desc(&h4.w);
    CHECK(!tsc_linear_many_takes(&d4));
    free_hw(&h4);
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}

/* x's rows rounded to bf16 (the prompt products' staging) */
static void bf16_rows(const float *x, float *xb, size_t n) {
    for (size_t i = 0; i < n; i++) xb[i] = ts_bf16_to_f32(ts_f32_to_bf16(x[i]));
}

/* The prompt-product tests' inputs: nw host weights of one format uploaded
 * in the engine's layout (MLX), each one `takes` must accept, with their
 * outputs for n rows filled with NaN; 0, or 1 after a recorded failure. */
static int upload_prompt_weights(tsc_ctx *c, hw *h, tsc_weight *dw, const tsc_weight **pw, float **dy, int nw, ts_dtype dt,
                                 int bits, int group, ts_dtype sdt, const int64_t *rows, int64_t cols, int n,
                                 int (*takes)(const tsc_weight *)) {
    int bad = 0;
    setenv("TSC_Q4T", "0", 1); /* the engine's layout: MLX */
    for (int i = 0; i < nw; i++) {
        make_w(&h[i], dt, bits, group, sdt, rows[i], cols);
        tsc_weight hd = desc(&h[i].w);
        ts_error e;
        if (tsc_weight_upload(c, &hd, &dw[i], &e)) {
            ts_test_fail(__FILE__, __LINE__, "%s", e.msg);
            bad = 1;
        } else if (!takes(&dw[i])) {
            ts_test_fail(__FILE__, __LINE__, "weight %d (%lld x %lld) not taken", i, (long long)rows[i], (long long)cols);
            bad = 1;
        }
        pw[i] = &dw[i];
        dy[i] = tsc_alloc(c, sizeof(float) * (size_t)n * (size_t)rows[i]);
        tsc_fill(c, dy[i], NAN, (size_t)n * (size_t)rows[i]);
    }
    unsetenv("TSC_Q4T");
    return bad;
}

/* One output row r of a prompt product y [n, rows] against two double
 * references: x~ (xb) times the weights the kernel multiplies (wt; bound
 * sum wtb |x~|, within tol) and x times the exact weights (wr; bound sum wa |x|,
 * within tolx). The worst ratios so far in *worst, *worst_x; 1 at the
 * first output past a bound (its ratios then in *worst, *worst_x). */
static int prompt_row_check(const float *y, int64_t rows, int64_t r, int n, int64_t cols, const float *x, const float *xb,
                            const double *wt, const double *wtb, const double *wr, const double *wa, float tol, float tolx,
                            float *worst, float *worst_x) {
    for (int t = 0; t < n; t++) {
        const float *xr = xb + (size_t)t * cols, *xo = x + (size_t)t * cols;
        double ref = 0, refx = 0, bound = 0, boundx = 0;
        for (int64_t k = 0; k < cols; k++) {
            ref += wt[k] * xr[k], refx += wr[k] * xo[k];
            bound += wtb[k] * fabs((double)xr[k]), boundx += wa[k] * fabs((double)xo[k]);
        }
        const double got = y[(size_t)t * rows + r];
        const float rel = (float)(fabs(got - ref) / (bound + 1e-30)), relx = (float)(fabs(got - refx) / (boundx + 1e-30));
        if (!(rel <= tol) || !(relx <= tolx)) {
            *worst = rel, *worst_x = relx;
            return 1;
        }
        *worst = fmaxf(*worst, rel), *worst_x = fmaxf(*worst_x, relx);
    }
    return 0;
}

/* x [n, cols] uniform in +-1 with 8 outliers of x30, and its rows rounded to bf16 */
static void prompt_x(int n, int64_t cols, float **x, float **xb) {
    *x = malloc(sizeof(float) * (size_t)n * cols), *xb = malloc(sizeof(float) * (size_t)n * cols);
    frand(*x, (size_t)n * cols, 1.0f);
    for (int k = 0; k < 8; k++) (*x)[(size_t)((fr() * 0.5f + 0.5f) * (float)(n * cols - 1))] *= 30.0f;
    bf16_rows(*x, *xb, (size_t)n * cols);
}

/* The cuBLAS prompt products (blas.cu): 4- and 8-bit MLX weights (several
 * groups and scale types) and bf16 weights, several weights a call, a weight
 * done in pieces of 128 rows (the smallest workspace), against a double
 * reference of the bf16-rounded operands (the only roundings beyond f32:
 * tol 3e-5 of sum |w~| |x~|) and against the exact weights and unrounded x
 * (2^-7: two roundings of 2^-9 a product); what it refuses. */
TS_TEST(cuda, blas_prefill_products) {
    OPEN(c);
    if (!tsc_blas_ready()) {
        tsc_close(c);
        SKIP("%s", tsc_blas_what());
    }
    fprintf(stderr, "  %s\n", tsc_blas_what());
    static const struct { ts_dtype dt; int bits, group; ts_dtype sdt; int64_t cols; int n; int64_t rows[3]; int small; } cs[] = {
        {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, 1024, 100, {300, 77, 129}, 0},
        {TS_DTYPE_U32, 4, 128, TS_DTYPE_F16, 2048, 64, {256, 40, 0}, 0},
        {TS_DTYPE_U32, 4, 32, TS_DTYPE_F32, 4160, 17, {200, 0, 0}, 0},
        {TS_DTYPE_U32, 8, 64, TS_DTYPE_BF16, 512, 33, {130, 64, 0}, 0},
        {TS_DTYPE_U32, 8, 32, TS_DTYPE_F16, 1536, 20, {70, 0, 0}, 0},
        {TS_DTYPE_BF16, 0, 0, TS_DTYPE_BF16, 768, 40, {100, 36, 0}, 0},
        {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, 256, 50, {1000, 0, 0}, 1}, /* 8 pieces, the last of 104 rows */
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int n = cs[ci].n;
        const int64_t cols = cs[ci].cols;
        int nw = 0;
        while (nw < 3 && cs[ci].rows[nw]) nw++;
        hw h[3];
        tsc_weight dw[3];
        const tsc_weight *pw[3];
        float *dy[3];
        if (upload_prompt_weights(c, h, dw, pw, dy, nw, cs[ci].dt, cs[ci].bits, cs[ci].group, cs[ci].sdt, cs[ci].rows,
                                  cols, n, tsc_blas_takes))
            return;
        float *x, *xb;
        prompt_x(n, cols, &x, &xb);
        float *dx = up(c, x, sizeof(float) * (size_t)n * cols);
        const size_t wsb = tsc_blas_ws_bytes(n, cols, cs[ci].small ? 0 : (size_t)1 << 20);
        void *ws = tsc_alloc(c, wsb);
        tsc_linear_blas(c, pw, nw, dx, dy, n, ws, wsb);
        SYNC_OK(c);
        double *wr = malloc(sizeof(double) * cols), *wq = malloc(sizeof(double) * cols), *wa = malloc(sizeof(double) * cols);
        double *wqa = malloc(sizeof(double) * cols);
        for (int i = 0; i < nw; i++) {
            const int64_t rows = cs[ci].rows[i];
            float *y = down(c, dy[i], (size_t)n * rows);
            float worst = 0, worst_x = 0;
            int bad = -1;
            for (int64_t r = 0; r < rows && bad < 0; r++) {
                for (int64_t k = 0; k < cols; k++) {
                    const float v = ts_weight_get(&h[i].w, r, k);
                    wr[k] = v, wq[k] = ts_bf16_to_f32(ts_f32_to_bf16(v)), wqa[k] = fabs(wq[k]), wa[k] = wmag(&h[i].w, r, k);
                }
                if (prompt_row_check(y, rows, r, n, cols, x, xb, wq, wqa, wr, wa, 3e-5f, 1.0f / 128, &worst, &worst_x))
                    bad = (int)r;
            }
            CHECK_MSG(bad < 0, "blas case %zu weight %d (%lldx%lld, %d-bit, %d rows of x, group %d): output %d off by %.3g "
                      "of sum |w~||x~| (tol 3e-5), %.3g against the exact weights and x (tol 2^-7)", ci, i, (long long)rows,
                      (long long)cols, cs[ci].bits, n, cs[ci].group, bad, worst, worst_x);
            if (i == 0)
                fprintf(stderr, "  blas %s%d g%d %lldx%lld n %d%s: worst %.2g of sum |w~||x~|, %.2g vs exact\n",
                        cs[ci].bits ? "q" : "bf", cs[ci].bits ? cs[ci].bits : 16, cs[ci].group, (long long)rows,
                        (long long)cols, n, cs[ci].small ? " (128-row pieces)" : "", worst, worst_x);
            free(y);
        }
        free(wr), free(wq), free(wqa), free(wa), free(x), free(xb);
        tsc_free(c, dx), tsc_free(c, ws);
        for (int i = 0; i < nw; i++) tsc_free(c, dy[i]), tsc_weight_free(c, &dw[i]), free_hw(&h[i]);
    }
    /* what it does not take: f32 and f16 weights, a 4-bit group of 4, columns not a multiple of 8 */
    hw hf;
    make_w(&hf, TS_DTYPE_F32, 0, 0, TS_DTYPE_BF16, 16, 256);
    tsc_weight df = desc(&hf.w);
    CHECK(!tsc_blas_takes(&df));
    df.dtype = TS_DTYPE_F16;
    CHECK(!tsc_blas_takes(&df));
    df.dtype = TS_DTYPE_U32, df.bits = 4, df.group = 4;
    CHECK(!tsc_blas_takes(&df));
    df.group = 64, df.cols = 100;
    CHECK(!tsc_blas_takes(&df));
    free_hw(&hf);
    CHECK(tsc_mem_used(c) == 0);
    /* a workspace too small for the rows: refused with the reason, nothing run */
    {
        hw h4;
        make_w(&h4, TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, 64, 256);
        tsc_weight hd = desc(&h4.w), d4;
        ts_error e;
        setenv("TSC_Q4T", "0", 1);
        CHECK_MSG(tsc_weight_upload(c, &hd, &d4, &e) == 0, "%s", e.msg);
        unsetenv("TSC_Q4T");
        const tsc_weight *p4[1] = {&d4};
        float *dx = tsc_alloc(c, sizeof(float) * 32 * 256), *dyy = tsc_alloc(c, sizeof(float) * 32 * 64);
        const size_t wsb = tsc_blas_ws_bytes(16, 256, 0);
        void *ws = tsc_alloc(c, wsb);
        tsc_linear_blas(c, p4, 1, dx, &dyy, 32, ws, wsb);
        CHECK(tsc_sync(c, &e) == TS_E_ARG && strstr(e.msg, "workspace"));
        free_hw(&h4);
    }
    tsc_close(c);
}

/* The prompt chunks' tensor-core products (q4gemm.cu) against a double
 * reference of x rounded to bf16 (x~) times the exact weights: what the
 * kernel promises is f32-class sums of x~ w, so the bound is 2e-5 of
 * sum_c m|x~| (m: wmag; the mma sums (128 + q) x~ per 64 columns and the
 * scale step takes 128 s back out, a cancellation of ~143/16 on the s q
 * term's magnitude: 2e-5 is ~150x f32 rounding of that); a wrong k order,
 * a lost tile, a scale of the wrong group are O(1) of it. Against the
 * unrounded x the difference is x's bf16 rounding, at most 2^-8 of the
 * bound (checked too). Row counts that are and are not multiples of the
 * 64-row tile, several weights in one launch (rows not multiples of the
 * 128-output tile), groups 64 and 128, the three scale types. */
TS_TEST(cuda, gemm_prefill_products) {
    OPEN(c);
    static const struct { int group; ts_dtype sdt; int64_t cols; int n; int64_t rows[3]; } cs[] = {
        {64, TS_DTYPE_BF16, 1024, 100, {300, 77, 129}}, {128, TS_DTYPE_F16, 2048, 64, {256, 40, 0}},
        {64, TS_DTYPE_F32, 4160, 17, {200, 0, 0}},      {64, TS_DTYPE_BF16, 64, 130, {33, 128, 0}},
        {256, TS_DTYPE_BF16, 12288, 40, {96, 0, 0}},     {64, TS_DTYPE_BF16, 128, 64, {384, 256, 4}},
        {64, TS_DTYPE_BF16, 384, 150, {128, 0, 0}},     {64, TS_DTYPE_BF16, 256, 22, {128, 4, 0}},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int n = cs[ci].n;
        const int64_t cols = cs[ci].cols;
        int nw = 0;
        while (nw < 3 && cs[ci].rows[nw]) nw++;
        hw h[3];
        tsc_weight dw[3];
        const tsc_weight *pw[3];
        float *dy[3];
        if (upload_prompt_weights(c, h, dw, pw, dy, nw, TS_DTYPE_U32, 4, cs[ci].group, cs[ci].sdt, cs[ci].rows, cols, n,
                                  tsc_gemm_takes))
            return;
        float *x, *xb;
        prompt_x(n, cols, &x, &xb);
        float *dx = up(c, x, sizeof(float) * (size_t)n * cols);
        void *ws = tsc_alloc(c, tsc_gemm_ws_bytes(n, cols));
        tsc_linear_gemm(c, pw, nw, dx, dy, n, ws);
        SYNC_OK(c);
        double *wr = malloc(sizeof(double) * cols), *wa = malloc(sizeof(double) * cols);
        for (int i = 0; i < nw; i++) {
            const int64_t rows = cs[ci].rows[i];
            float *y = down(c, dy[i], (size_t)n * rows);
            float worst = 0, worst_x = 0;
            int bad = -1;
            for (int64_t r = 0; r < rows && bad < 0; r++) {
                for (int64_t k = 0; k < cols; k++) wr[k] = ts_weight_get(&h[i].w, r, k), wa[k] = wmag(&h[i].w, r, k);
                if (prompt_row_check(y, rows, r, n, cols, x, xb, wr, wa, wr, wa, 2e-5f, 1.0f / 256, &worst, &worst_x))
                    bad = (int)r;
            }
            CHECK_MSG(bad < 0, "gemm case %zu weight %d (%lldx%lld, %d rows of x, group %d): output %d off by %.3g of "
                      "sum m|x~| (tol 2e-5), %.3g against unrounded x (tol 2^-8)", ci, i, (long long)rows,
                      (long long)cols, n, cs[ci].group, bad, worst, worst_x);
            if (i == 0)
                fprintf(stderr, "  gemm g%d %lldx%lld n %d: worst %.2g of sum m|x~|, %.2g vs unrounded x\n", cs[ci].group,
                        (long long)rows, (long long)cols, n, worst, worst_x);
            free(y);
        }
        free(wr), free(wa), free(x), free(xb);
        tsc_free(c, dx), tsc_free(c, ws);
        for (int i = 0; i < nw; i++) tsc_free(c, dy[i]), tsc_weight_free(c, &dw[i]), free_hw(&h[i]);
    }
    /* the grouped form (MoE experts over a route list): 5 experts in one
     * table of evenly spaced slots, 90 rows routed at random, the rows of
     * each expert in tiles of up to 64 that start anywhere, outputs
     * scattered back to their rows: bit for bit what the plain product of
     * each expert's weight gives on its rows (a row's outputs depend on its
     * own x only, whatever the tiling) */
    {
        const int E = 5, n = 90, rows = 200;
        const int64_t cols = 512;
        hw he[5];
        size_t db = (size_t)rows * cols / 2, sb = (size_t)rows * (cols / 64) * 2;
        const size_t al = 256, dpad = (db + al - 1) / al * al, spad = (sb + al - 1) / al * al, slot = dpad + 2 * spad;
        uint8_t *tab = tsc_alloc(c, slot * E);
        tsc_weight dwe[5];
        setenv("TSC_Q4T", "0", 1);
        for (int e = 0; e < E; e++) {
            make_w(&he[e], TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, rows, cols);
            tsc_write(c, tab + e * slot, he[e].d, db);
            tsc_write(c, tab + e * slot + dpad, he[e].s, sb);
            tsc_write(c, tab + e * slot + dpad + spad, he[e].b, sb);
            tsc_weight hd = desc(&he[e].w);
            ts_error e_;
            CHECK_MSG(tsc_weight_upload(c, &hd, &dwe[e], &e_) == 0, "%s", e_.msg);
        }
        unsetenv("TSC_Q4T");
        tsc_weight w0 = dwe[0];
        w0.data = tab, w0.scales = tab + dpad, w0.biases = tab + dpad + spad;
        float *x = malloc(sizeof(float) * n * cols);
        frand(x, (size_t)n * cols, 1.0f);
        int32_t ex[90], ord[90], cnt[6] = {0}, tabh[4 * 40], ntl = 0;
        for (int r = 0; r < n; r++) ex[r] = (int)((fr() * 0.5f + 0.5f) * 4.999f), cnt[ex[r] + 1]++;
        for (int e = 0; e < E; e++) cnt[e + 1] += cnt[e];
        for (int e = 0; e < E; e++)
            for (int p0 = cnt[e]; p0 < cnt[e + 1]; p0 += 64)
                tabh[4 * ntl] = e, tabh[4 * ntl + 1] = p0, tabh[4 * ntl + 2] = cnt[e + 1] - p0 < 64 ? cnt[e + 1] - p0 : 64,
                tabh[4 * ntl + 3] = 0, ntl++;
        int pos[6];
        memcpy(pos, cnt, sizeof pos);
        for (int r = 0; r < n; r++) ord[pos[ex[r]]++] = r;
        float *dx = up(c, x, sizeof(float) * n * cols), *dy = tsc_alloc(c, sizeof(float) * n * rows);
        int32_t *dord = up(c, ord, sizeof ord), *dtab = up(c, tabh, sizeof(int32_t) * 4 * ntl);
        void *ws = tsc_alloc(c, tsc_gemm_ws_bytes(n + 64, cols));
        const tsc_weight *pw0[1] = {&w0};
        const int64_t es[1] = {(int64_t)slot};
        tsc_linear_gemm_grouped(c, pw0, es, 1, dx, n, dord, n, dtab, ntl, dord, &dy, ws);
        /* the reference: each expert's rows gathered on the host, the plain product */
        float *yref = malloc(sizeof(float) * n * rows);
        for (int e = 0; e < E; e++) {
            const int m = cnt[e + 1] - cnt[e];
            if (!m) continue;
            float *xe = malloc(sizeof(float) * m * cols);
            for (int i = 0; i < m; i++) memcpy(xe + (size_t)i * cols, x + (size_t)ord[cnt[e] + i] * cols, sizeof(float) * cols);
            float *dxe = up(c, xe, sizeof(float) * m * cols), *dye = tsc_alloc(c, sizeof(float) * m * rows);
            const tsc_weight *pe[1] = {&dwe[e]};
            tsc_linear_gemm(c, pe, 1, dxe, &dye, m, ws);
            float *ye = down(c, dye, (size_t)m * rows);
            for (int i = 0; i < m; i++) memcpy(yref + (size_t)ord[cnt[e] + i] * rows, ye + (size_t)i * rows, sizeof(float) * rows);
            free(xe), free(ye);
            tsc_free(c, dxe), tsc_free(c, dye);
        }
        SYNC_OK(c);
        float *y = down(c, dy, (size_t)n * rows);
        CHECK_MSG(!memcmp(y, yref, sizeof(float) * n * rows), "grouped gemm: differs from the plain product per expert");
        fprintf(stderr, "  gemm grouped: %d experts, %d rows, %d tiles: %s\n", E, n, ntl,
                memcmp(y, yref, sizeof(float) * n * rows) ? "DIFFERS" : "bit-identical to the plain products");
        free(x), free(y), free(yref);
        tsc_free(c, dx), tsc_free(c, dy), tsc_free(c, dord), tsc_free(c, dtab), tsc_free(c, ws), tsc_free(c, tab);
        for (int e = 0; e < E; e++) tsc_weight_free(c, &dwe[e]), free_hw(&he[e]);
    }
    /* what it does not take: 8-bit, group 32, columns not a multiple of 64 */
    hw h8;
    make_w(&h8, TS_DTYPE_U32, 8, 64, TS_DTYPE_BF16, 16, 256);
    tsc_weight d8 = desc(&h8.w);
    CHECK(!tsc_gemm_takes(&d8));
    d8.bits = 4, d8.group = 32;
    CHECK(!tsc_gemm_takes(&d8));
    d8.group = 64, d8.cols = 96;
    CHECK(!tsc_gemm_takes(&d8));
    free_hw(&h8);
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}

/* worst |y - ref| / sum_c m|x| over n rows of w (the products' tolerance) */
static float prod_err(const ts_weight *w, const float *x, const float *y, const float *ref, int n) {
    float worst = 0;
    for (int64_t r = 0; r < w->rows; r++)
        for (int i = 0; i < n; i++) {
            double bound = 0;
            for (int64_t k = 0; k < w->cols; k++) bound += wmag(w, r, k) * fabs((double)x[(size_t)i * w->cols + k]);
            const float rel = fabsf(y[(size_t)i * w->rows + r] - ref[(size_t)i * w->rows + r]) / (float)(bound + 1e-30);
            if (!(rel <= worst)) worst = rel;
        }
    return worst;
}

/* ---- embed: exactly ts_weight_row's bits ---- */

TS_TEST(cuda, embed_exact) {
    OPEN(c);
    for (int q = 0; q < 3; q++) {
        hw h;
        const int64_t V = 500, H = 1024;
        if (q == 0) make_w(&h, TS_DTYPE_BF16, 0, 0, TS_DTYPE_F32, V, H);
        else make_w(&h, TS_DTYPE_U32, q == 1 ? 4 : 8, 64, q == 1 ? TS_DTYPE_BF16 : TS_DTYPE_F16, V, H);
        tsc_weight hd = desc(&h.w), dw;
        ts_error e;
        CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0, "%s", e.msg);
        int32_t ids[5] = {0, 499, 17, (int32_t)(fr() * 200 + 250), 600 /* out of range: zeros */};
        int32_t *did = up(c, ids, sizeof ids);
        float *dx = tsc_alloc(c, sizeof(float) * 5 * H);
        tsc_embed(c, &dw, did, 5, dx);
        SYNC_OK(c);
        float *x = down(c, dx, 5 * H), *ref = malloc(sizeof(float) * H);
        for (int i = 0; i < 4; i++) {
            ts_weight_row(&h.w, ids[i], ref);
            CHECK_MSG(!memcmp(ref, x + i * H, sizeof(float) * H), "embed row %d (format %d) differs", ids[i], q);
        }
        for (int k = 0; k < H; k++) CHECK(x[4 * H + k] == 0.f);
        free(x), free(ref);
        tsc_free(c, did), tsc_free(c, dx);
        tsc_weight_free(c, &dw);
        free_hw(&h);
    }
    tsc_close(c);
}

/* A prompt chunk of more rows than the old 4096-row limit (an 8192-token
 * prompt in one chunk was refused): every row right, and past 65535 rows a
 * clear refusal (the context's sticky error), nothing written. */
TS_TEST(cuda, embed_long_chunk) {
    OPEN(c);
    hw h;
    const int64_t V = 300, H = 256;
    const int n = 10007;
    make_w(&h, TS_DTYPE_BF16, 0, 0, TS_DTYPE_F32, V, H);
    tsc_weight hd = desc(&h.w), dw;
    ts_error e;
    CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0, "%s", e.msg);
    int32_t *ids = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((fr() * 0.5f + 0.5f) * (V - 1)); /* in [0, V - 1] */
    int32_t *did = up(c, ids, sizeof(int32_t) * n);
    float *dx = tsc_alloc(c, sizeof(float) * n * H);
    tsc_embed(c, &dw, did, n, dx);
    SYNC_OK(c);
    float *x = down(c, dx, (size_t)n * H), *ref = malloc(sizeof(float) * H);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        ts_weight_row(&h.w, ids[i], ref);
        bad += memcmp(ref, x + (size_t)i * H, sizeof(float) * H) != 0;
    }
    CHECK_MSG(bad == 0, "%d of %d embedded rows differ", bad, n);
    tsc_embed(c, &dw, did, 65536, dx);
    CHECK(tsc_error(c) == TS_E_ARG);
    free(x), free(ref), free(ids);
    tsc_close(c);
    free_hw(&h);
}

/* ---- add + RMSNorm, SiLU ---- */

static void ref_add_rmsnorm(float *x, const float *add, const float *w, float *y, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * dim;
        if (add) for (int j = 0; j < dim; j++) xi[j] += add[(size_t)i * dim + j];
    }
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        float r = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int j = 0; j < dim; j++) y[(size_t)i * dim + j] = xi[j] * r * w[j];
    }
}

static float silu_ref(float x) { return x / (1.0f + expf(-x)); }

/* max |a - b| / max(|b|, floor) over n */
static float max_rel(const float *a, const float *b, size_t n, float floor) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]) / fmaxf(fabsf(b[i]), floor);
        if (!(d <= m)) m = d;
    }
    return m;
}

TS_TEST(cuda, norm_silu_parity) {
    OPEN(c);
    /* 1004: the words' sum's last word of 4 floats (row_ss8) */
    static const int dims[] = {4096, 1000, 1004};
    for (int di = 0; di < 3; di++) {
        const int n = 5, dim = dims[di];
        float *x = malloc(sizeof(float) * n * dim), *add = malloc(sizeof(float) * n * dim);
        float *w = malloc(sizeof(float) * dim), *y = malloc(sizeof(float) * n * dim);
        frand(x, (size_t)n * dim, 3.0f), frand(add, (size_t)n * dim, 1.0f), frand(w, dim, 1.0f);
        float *dx = up(c, x, sizeof(float) * n * dim), *da = up(c, add, sizeof(float) * n * dim);
        float *dw = up(c, w, sizeof(float) * dim), *dy = tsc_alloc(c, sizeof(float) * n * dim);
        tsc_add_rmsnorm(c, dx, da, dw, dy, n, dim, 1e-6f);
        SYNC_OK(c);
        ref_add_rmsnorm(x, add, w, y, n, dim, 1e-6f);
        float *gx = down(c, dx, (size_t)n * dim), *gy = down(c, dy, (size_t)n * dim);
        CHECK_MSG(!memcmp(gx, x, sizeof(float) * n * dim), "residual add differs");
        /* same operations; only the order of the double sum differs, which
         * almost never moves the rounded f32 rsqrt: 2 ulp */
        const float ry = max_rel(gy, y, (size_t)n * dim, 1e-6f);
        CHECK_MSG(ry <= 3e-7f, "rmsnorm dim %d: rel %.3g", dim, ry);
        /* SiLU and SwiGLU: CUDA's expf within 2 ulp of glibc's */
        tsc_silu(c, dy, dx, (size_t)n * dim);
        tsc_silu_mul(c, dx, da, (size_t)n * dim);
        SYNC_OK(c);
        float *s1 = down(c, dy, (size_t)n * dim), *s2 = down(c, dx, (size_t)n * dim);
        float m1 = 0, m2 = 0;
        for (size_t i = 0; i < (size_t)n * dim; i++) {
            const float r1 = silu_ref(x[i]), r2 = silu_ref(x[i]) * add[i];
            m1 = fmaxf(m1, fabsf(s1[i] - r1) / fmaxf(fabsf(r1), 1e-30f));
            m2 = fmaxf(m2, fabsf(s2[i] - r2) / fmaxf(fabsf(r2), 1e-30f));
        }
        CHECK_MSG(m1 <= 5e-7f && m2 <= 5e-7f, "silu rel %.3g, silu_mul rel %.3g", m1, m2);
        free(x), free(add), free(w), free(y), free(gx), free(gy), free(s1), free(s2);
        tsc_free(c, dx), tsc_free(c, da), tsc_free(c, dw), tsc_free(c, dy);
    }
    tsc_close(c);
}

/* ---- GDN step ---- */

static float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }
static float softp(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* A GDN step's fresh random inputs (dk = dv = 128, conv 4): the host's
 * copies, kept (a reference takes them, and a test starts each form it
 * compares from the same conv state cs and state S), and the device's. */
typedef struct {
    int n, Hk, Hv, C, Vd;
    size_t nS, nc;
    float *qkv, *z, *b, *a, *cs, *cw, *S, *nA, *dtb, *nw; /* host */
    float *dq, *dz, *db, *da, *dcw, *dnA, *ddt, *dnw;     /* device */
} gdn_in;

static void gdn_in_make(tsc_ctx *c, gdn_in *g, int Hk, int Hv, int n) {
    const int dk = 128, dv = 128, K = 4, Vd = Hv * dv, C = 2 * Hk * dk + Vd;
    const size_t nS = (size_t)Hv * dk * dv, nc = (size_t)(K - 1) * C;
    *g = (gdn_in){.n = n, .Hk = Hk, .Hv = Hv, .C = C, .Vd = Vd, .nS = nS, .nc = nc};
    const size_t nq = (size_t)n * C, nz = (size_t)n * Vd, nh = (size_t)n * Hv, ncw = (size_t)K * C;
#define GA(f, cnt, sc) g->f = malloc(sizeof(float) * (cnt)), frand(g->f, (cnt), sc)
    GA(qkv, nq, 1.0f); GA(z, nz, 2.0f); GA(b, nh, 2.0f); GA(a, nh, 2.0f); GA(cs, nc, 1.0f); GA(cw, ncw, 0.5f);
    GA(S, nS, 0.05f); GA(nA, Hv, 1.0f); GA(dtb, Hv, 1.0f); GA(nw, dv, 1.0f);
#undef GA
    for (int h = 0; h < Hv; h++) g->nA[h] = -expf(g->nA[h]);
    g->dq = up(c, g->qkv, sizeof(float) * nq), g->dz = up(c, g->z, sizeof(float) * nz);
    g->db = up(c, g->b, sizeof(float) * nh), g->da = up(c, g->a, sizeof(float) * nh);
    g->dcw = up(c, g->cw, sizeof(float) * ncw), g->dnA = up(c, g->nA, sizeof(float) * Hv);
    g->ddt = up(c, g->dtb, sizeof(float) * Hv), g->dnw = up(c, g->nw, sizeof(float) * dv);
}

/* the step's arguments over a conv state dcs, a state dS, an output and a workspace */
static tsc_gdn_args gdn_in_args(const gdn_in *g, float *dcs, float *dS, float *dout, float *ws) {
    return (tsc_gdn_args){.n = g->n, .Hk = g->Hk, .Hv = g->Hv, .dk = 128, .dv = 128, .K = 4, .qkv = g->dq,
                          .z = g->dz, .b = g->db, .a = g->da, .conv_state = dcs, .conv_w = g->dcw, .S = dS,
                          .neg_A = g->dnA, .dt_bias = g->ddt, .norm_w = g->dnw, .eps = 1e-6f, .o = dout, .ws = ws};
}

/* the host's copies; with c, the device's too (NULL: left to tsc_close) */
static void gdn_in_free(tsc_ctx *c, gdn_in *g) {
    free(g->qkv), free(g->z), free(g->b), free(g->a), free(g->cs), free(g->cw), free(g->S), free(g->nA),
        free(g->dtb), free(g->nw);
    if (c) tsc_free(c, g->dq), tsc_free(c, g->dz), tsc_free(c, g->db), tsc_free(c, g->da), tsc_free(c, g->dcw),
        tsc_free(c, g->dnA), tsc_free(c, g->ddt), tsc_free(c, g->dnw);
}

/* qwen35.c's gdn_prep + gdn heads + gated norm on one layer, reference
 * kernels (ts_conv_row is mode-independent; the delta step is
 * ts_gdn_step_ref), over g's host inputs from the conv state cs and the
 * state S, which it advances; writes o (n x Vd). */
static void gdn_ref(const gdn_in *g, float *cs, float *S, float *o) {
    const int C = g->C, K = 4, dk = 128, dv = 128, r = g->Hv / g->Hk, Kd = g->Hk * dk;
    float *seq = malloc(sizeof(float) * (size_t)(K - 1 + g->n) * C), *y = malloc(sizeof(float) * C);
    memcpy(seq, cs, sizeof(float) * (K - 1) * C);
    memcpy(seq + (size_t)(K - 1) * C, g->qkv, sizeof(float) * g->n * C);
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < g->n; t++) {
        const float *x[8];
        for (int j = 0; j < K; j++) x[j] = seq + (size_t)(t + j) * C;
        ts_conv_row(x, g->cw, K, y, C);
        for (int k = 0; k < C; k++) y[k] = silu_ref(y[k]);
        for (int h = 0; h < g->Hk; h++) {
            float *qh = y + h * dk, *kh = y + Kd + h * dk;
            double sq = 0, sk = 0;
            for (int i = 0; i < dk; i++) sq += (double)qh[i] * qh[i], sk += (double)kh[i] * kh[i];
            float rq = 1.0f / sqrtf((float)sq + 1e-6f), rk = 1.0f / sqrtf((float)sk + 1e-6f);
            for (int i = 0; i < dk; i++) qh[i] = qh[i] * rq * qscale, kh[i] *= rk;
        }
        for (int h = 0; h < g->Hv; h++) {
            const float beta = sigm(g->b[t * g->Hv + h]), dc = expf(g->nA[h] * softp(g->a[t * g->Hv + h] + g->dtb[h]));
            float *oh = o + (size_t)t * g->Vd + h * dv;
            ts_gdn_step_ref(S + (size_t)h * dk * dv, y + Kd + (h / r) * dk, y + 2 * Kd + h * dv, y + (h / r) * dk,
                            dc, beta, oh, dk, dv);
            double ss = 0;
            for (int j = 0; j < dv; j++) ss += (double)oh[j] * oh[j];
            float rr = 1.0f / sqrtf((float)(ss / dv) + 1e-6f);
            for (int j = 0; j < dv; j++) oh[j] = oh[j] * rr * g->nw[j] * silu_ref(g->z[(size_t)t * g->Vd + h * dv + j]);
        }
    }
    memcpy(cs, seq + (size_t)g->n * C, sizeof(float) * (K - 1) * C);
    free(seq), free(y);
}

TS_TEST(cuda, gdn_step_parity_and_row_exact) {
    OPEN(c);
    const int n = 5, K = 4;
    gdn_in in;
    gdn_in_make(c, &in, 2, 4, n);
    const int C = in.C, Hv = in.Hv, Vd = in.Vd;
    const size_t nS = in.nS;
    /* the reference's conv state and state (gdn_ref advances them: copies) and output */
    float *rcs = malloc(sizeof(float) * in.nc), *rS = malloc(sizeof(float) * nS), *ro = malloc(sizeof(float) * n * Vd);
    memcpy(rcs, in.cs, sizeof(float) * in.nc), memcpy(rS, in.S, sizeof(float) * nS);
    /* device copies: state and conv state twice (one n-row call, n one-row calls) */
    float *dq = in.dq, *dz = in.dz, *db = in.db, *da = in.da;
    float *dcs = up(c, in.cs, sizeof(float) * in.nc), *dcs1 = up(c, in.cs, sizeof(float) * in.nc);
    float *dS = up(c, in.S, sizeof(float) * nS), *dS1 = up(c, in.S, sizeof(float) * nS);
    float *dout = tsc_alloc(c, sizeof(float) * n * Vd), *dout1 = tsc_alloc(c, sizeof(float) * n * Vd);
    float *ws = tsc_alloc(c, tsc_gdn_ws_bytes(n, C));
    tsc_gdn_args A = gdn_in_args(&in, dcs, dS, dout, ws);
    tsc_gdn_step(c, &A);
    tsc_set_gdn_fused(c, 0); /* the one-row calls through prep + scan: the n-row call took the one kernel */
    for (int t = 0; t < n; t++) {
        tsc_gdn_args B = A;
        B.n = 1, B.qkv = dq + (size_t)t * C, B.z = dz + (size_t)t * Vd, B.b = db + t * Hv, B.a = da + t * Hv;
        B.conv_state = dcs1, B.S = dS1, B.o = dout1 + (size_t)t * Vd;
        tsc_gdn_step(c, &B);
    }
    SYNC_OK(c);
    gdn_ref(&in, rcs, rS, ro);
    float *o = down(c, dout, (size_t)n * Vd), *o1 = down(c, dout1, (size_t)n * Vd);
    float *S = down(c, dS, nS), *S1 = down(c, dS1, nS), *cs = down(c, dcs, (size_t)(K - 1) * C);
    float *cs1 = down(c, dcs1, (size_t)(K - 1) * C);
    /* tolerance: 128-term dot products summed as 8 partials of 16 with FMAs
     * (the reference: one sequential sum, separate roundings), over 5 rows of
     * the recurrence, then a norm (gains up to ~1/rms): 1e-4 of the output's
     * scale, 1e-5 of the state's */
    float mo = 0, ms = 0, maxo = 0, maxs = 0;
    for (size_t i = 0; i < (size_t)n * Vd; i++) mo = fmaxf(mo, fabsf(o[i] - ro[i])), maxo = fmaxf(maxo, fabsf(ro[i]));
    for (size_t i = 0; i < nS; i++) ms = fmaxf(ms, fabsf(S[i] - rS[i])), maxs = fmaxf(maxs, fabsf(rS[i]));
    fprintf(stderr, "  gdn: max |o - ref| %.3g (max |o| %.3g), max |S - ref| %.3g (max |S| %.3g)\n", mo, maxo, ms, maxs);
    CHECK_MSG(mo <= 1e-4f * maxo, "gdn output off by %.3g", mo);
    CHECK_MSG(ms <= 1e-5f * maxs, "gdn state off by %.3g", ms);
    CHECK_MSG(!memcmp(cs, rcs, sizeof(float) * (K - 1) * C), "conv state differs from the reference");
    CHECK_MSG(!memcmp(o, o1, sizeof(float) * n * Vd), "gdn: %d-row call != %d one-row calls (output)", n, n);
    CHECK_MSG(!memcmp(S, S1, sizeof(float) * nS), "gdn: %d-row call != %d one-row calls (state)", n, n);
    CHECK_MSG(!memcmp(cs, cs1, sizeof(float) * (K - 1) * C), "gdn: conv state differs between the two");
    free(o), free(o1), free(S), free(S1), free(cs), free(cs1);
    free(rcs), free(rS), free(ro);
    gdn_in_free(NULL, &in);
    tsc_close(c);
}

/* ---- digits made before the product (gdn.cu's gdn_digits, attn.cu's attn_digits) ----
 * What the two tests below check of a kernel `make` that also writes x's
 * 8-bit digits (n rows of cols columns, the dp4a products' staged layout)
 * into the ctx's digits scratch dgs, for the 4-bit product of x after it (a
 * weight of 40 rows, group G): (1) the bytes equal the product's own staging
 * of x, and the product that took them equals one that staged; (2) digits
 * zeroed behind the kernel's back are taken (the product differs); (3) with
 * a launch in between (a product of other_x) the product stages again. make
 * runs before each; *ok is set when every check passed (on a device error
 * the failure is reported here and the caller closes the context). */
typedef void (*digits_maker)(tsc_ctx *c, const void *args);
static void digits_taken_by_product(tsc_ctx *c, void *dgs, int G, int n, int cols, float *x, float *other_x,
                                    digits_maker make, const void *args, const char *what, int *ok) {
    *ok = 0;
    ts_error e;
#define SYNC_OR_FAIL()                                                                        \
    do {                                                                                      \
        if (tsc_sync(c, &e)) {                                                                \
            ts_test_fail(__FILE__, __LINE__, "%s: device error: %s", what, e.msg);            \
            return;                                                                           \
        }                                                                                     \
    } while (0)
    hw h;
    make_w(&h, TS_DTYPE_U32, 4, G, TS_DTYPE_BF16, 40, cols);
    tsc_weight hd = desc(&h.w), dw;
    hd.act_digits = 1;
    setenv("TSC_Q4T", "0", 1);
    CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0, "%s", e.msg);
    unsetenv("TSC_Q4T");
    dw.act_digits = 1;
    CHECK_MSG(tsc_digits_group(c, &dw, n) == G, "tsc_digits_group: %d for a group of %d, %d rows",
              tsc_digits_group(c, &dw, n), G, n);
    float *y1 = tsc_alloc(c, sizeof(float) * n * 40), *y2 = tsc_alloc(c, sizeof(float) * n * 40);
    float *y3 = tsc_alloc(c, sizeof(float) * n * 40), *y4 = tsc_alloc(c, sizeof(float) * n * 40);
    const tsc_weight *wl[1] = {&dw};
    const size_t nb = (size_t)n * ((size_t)cols + (size_t)cols / 32 * 8); /* stage_bytes(n, 1, cols) */
    /* 1: the kernel's digits, the product that takes them, one that stages */
    make(c, args);
    SYNC_OR_FAIL();
    uint8_t *gd = malloc(nb), *rd = malloc(nb);
    tsc_read(c, gd, dgs, nb); /* (a copy, not a launch: the digits stay the next product's) */
    tsc_linear(c, wl, 1, x, &y1, n);
    tsc_linear(c, wl, 1, x, &y2, n); /* taken once: this one stages */
    SYNC_OR_FAIL();
    tsc_read(c, rd, dgs, nb);
    size_t bad = 0;
    for (size_t i = 0; i < nb; i++) bad += gd[i] != rd[i];
    CHECK_MSG(bad == 0, "%s: %zu of %zu digit bytes differ from the product's staging", what, bad, nb);
    float *h1 = down(c, y1, (size_t)n * 40), *h2 = down(c, y2, (size_t)n * 40);
    CHECK_MSG(!memcmp(h1, h2, sizeof(float) * n * 40), "%s: the product on the kernel's digits differs from the "
              "staged one", what);
    /* 2: digits zeroed behind the kernel's back: the product took them (it differs) */
    make(c, args);
    memset(gd, 0, nb);
    tsc_write(c, dgs, gd, nb);
    tsc_linear(c, wl, 1, x, &y3, n);
    tsc_linear(c, wl, 1, x, &y4, n);
    SYNC_OR_FAIL();
    float *h3 = down(c, y3, (size_t)n * 40), *h4 = down(c, y4, (size_t)n * 40);
    CHECK_MSG(memcmp(h3, h4, sizeof(float) * n * 40) != 0, "%s: the product after the kernel did not take its "
              "digits", what);
    /* 3: a launch between the kernel and the product: it stages */
    make(c, args);
    tsc_linear(c, wl, 1, other_x, &y3, n); /* (another x: stages, over the kernel's digits) */
    tsc_linear(c, wl, 1, x, &y3, n);
    tsc_linear(c, wl, 1, x, &y4, n);
    SYNC_OR_FAIL();
    free(h3), free(h4);
    h3 = down(c, y3, (size_t)n * 40), h4 = down(c, y4, (size_t)n * 40);
    CHECK_MSG(!memcmp(h3, h4, sizeof(float) * n * 40), "%s: a product after another launch took stale digits", what);
#undef SYNC_OR_FAIL
    free(h1), free(h2), free(h3), free(h4), free(gd), free(rd);
    tsc_free(c, y1), tsc_free(c, y2), tsc_free(c, y3), tsc_free(c, y4);
    tsc_weight_free(c, &dw);
    free_hw(&h);
    *ok = 1;
}

static void gdn_step_maker(tsc_ctx *c, const void *args) { tsc_gdn_step(c, (const tsc_gdn_args *)args); }
static void attn_decode_maker(tsc_ctx *c, const void *args) { tsc_attn_decode(c, (const tsc_attn_args *)args); }

/* With tsc_gdn_args.dg the fused GDN kernel also writes o's 8-bit digits,
 * so that the next product of o takes them (stage_once: no launch in
 * between) instead of launching k_stage_digits: digits_taken_by_product's
 * checks for 1 and 3 rows, groups 32, 64 and 128, clusters of 4 and 8
 * blocks (each case runs the step three times: the state moves on, so o is
 * another each time, which the checks allow). */
TS_TEST(cuda, gdn_digits_same_as_staging) {
    OPEN(c);
    void *dgs = tsc_alloc(c, tsc_digits_ws_bytes());
    tsc_set_digits(c, dgs, tsc_digits_ws_bytes());
    int cases = 0;
    for (int hv = 0; hv < 2; hv++)
        for (int gi = 0; gi < 3; gi++)
            for (int ni = 0; ni < 2; ni++) {
                const int Hv = hv ? 4 : 2, n = ni ? 3 : 1, G = 32 << gi;
                gdn_in g;
                gdn_in_make(c, &g, 2, Hv, n);
                const int Vd = g.Vd;
                float *dcs = up(c, g.cs, sizeof(float) * g.nc), *dS = up(c, g.S, sizeof(float) * g.nS);
                float *dout = tsc_alloc(c, sizeof(float) * n * Vd), *ws = tsc_alloc(c, tsc_gdn_ws_bytes(n, g.C));
                tsc_gdn_args A = gdn_in_args(&g, dcs, dS, dout, ws);
                A.dg = dgs, A.dg_group = G;
                char what[80];
                int ok;
                /* and without the second cluster barrier (tsc_set_gdn_nb2, k_gdn_fused's N) */
                for (int nb = 0; nb < 2; nb++) {
                    tsc_set_gdn_nb2(c, nb);
                    snprintf(what, sizeof what, "Hv %d group %d, %d rows%s", Hv, G, n, nb ? " (nb2)" : "");
                    digits_taken_by_product(c, dgs, G, n, Vd, dout, g.dq, gdn_step_maker, &A, what, &ok);
                    if (!ok) { gdn_in_free(NULL, &g), tsc_close(c); return; }
                }
                tsc_set_gdn_nb2(c, 1); /* (the default) */
                cases++;
                tsc_free(c, dcs), tsc_free(c, dS), tsc_free(c, dout), tsc_free(c, ws);
                gdn_in_free(c, &g);
            }
    fprintf(stderr, "  %d cases: the step's digits are the staging's bytes, taken by the next product only\n", cases);
    tsc_set_digits(c, NULL, 0);
    tsc_free(c, dgs);
    tsc_close(c);
}

/* With tsc_attn_args.dg the attention's combine also writes out's digits
 * (attn.cu's attn_digits): digits_taken_by_product's checks for head dims
 * 128 and 256, groups 32, 64 and 128, 1 and 3 rows; the 3-row case at a
 * device position (the engine's form; a host position past the cache is
 * refused before any launch) with its last row past the cache, whose out
 * the combine leaves as it is (checked): its digits are those of out as it
 * was. */
TS_TEST(cuda, attn_digits_same_as_staging) {
    OPEN(c);
    void *dgs = tsc_alloc(c, tsc_digits_ws_bytes());
    tsc_set_digits(c, dgs, tsc_digits_ws_bytes());
    int cases = 0;
    for (int di = 0; di < 2; di++)
        for (int gi = 0; gi < 3; gi++)
            for (int ni = 0; ni < 2; ni++) {
                const int nq = 8, nkv = 2, D = di ? 256 : 128, n = ni ? 3 : 1, G = 32 << gi, max_T = 300, np_max = 8;
                const int kvdim = nkv * D, cols = nq * D, pos = ni ? max_T - 2 : 211;
                float *qg = malloc(sizeof(float) * n * nq * 2 * D), *Kc = malloc(sizeof(float) * max_T * kvdim);
                float *Vc = malloc(sizeof(float) * max_T * kvdim), *o0 = malloc(sizeof(float) * n * cols);
                frand(qg, (size_t)n * nq * 2 * D, 1.0f), frand(Kc, (size_t)max_T * kvdim, 1.0f);
                frand(Vc, (size_t)max_T * kvdim, 1.0f), frand(o0, (size_t)n * cols, 1.0f);
                float *dqg = up(c, qg, sizeof(float) * n * nq * 2 * D), *dK = up(c, Kc, sizeof(float) * max_T * kvdim);
                float *dV = up(c, Vc, sizeof(float) * max_T * kvdim), *dout = up(c, o0, sizeof(float) * n * cols);
                float *ws = tsc_alloc(c, tsc_attn_ws_bytes_np(n, nq, D, np_max));
                int32_t *dpos = tsc_alloc(c, sizeof(int32_t));
                tsc_write(c, dpos, &pos, sizeof(int32_t));
                tsc_attn_args A = {.n = n, .pos = ni ? 0 : pos, .nq = nq, .nkv = nkv, .D = D, .rot = 64,
                                   .theta = 1e7f, .eps = 1e-6f, .qg = dqg, .Kc = dK, .Vc = dV, .max_T = max_T,
                                   .out = dout, .ws = ws, .pos_dev = ni ? dpos : NULL, .phase = 2, .np_max = np_max,
                                   .dg = dgs, .dg_group = G};
                char what[80];
                int ok;
                /* and with the gate loaded before the PDL wait (tsc_set_attn_early),
                 * the loads in one round (tsc_set_attn_r1) */
                for (int ea = 0; ea < 4; ea++) {
                    tsc_set_attn_early(c, ea & 1), tsc_set_attn_r1(c, ea & 2);
                    snprintf(what, sizeof what, "D %d group %d, %d rows%s%s", D, G, n, ea & 1 ? " (early)" : "",
                             ea & 2 ? " (r1)" : "");
                    digits_taken_by_product(c, dgs, G, n, cols, dout, dqg, attn_decode_maker, &A, what, &ok);
                    if (!ok) { tsc_close(c); return; }
                }
                tsc_set_attn_early(c, 1), tsc_set_attn_r1(c, 1);
                if (ni) { /* the row past the cache kept its out (the combine ran three times) */
                    float *ho = down(c, dout, (size_t)n * cols);
                    CHECK_MSG(!memcmp(ho + (size_t)2 * cols, o0 + (size_t)2 * cols, sizeof(float) * cols),
                              "D %d group %d: the combine wrote the row past the cache", D, G);
                    free(ho);
                }
                cases++;
                tsc_free(c, dqg), tsc_free(c, dK), tsc_free(c, dV), tsc_free(c, dout), tsc_free(c, ws);
                tsc_free(c, dpos);
                free(qg), free(Kc), free(Vc), free(o0);
            }
    fprintf(stderr, "  %d cases: the combine's digits are the staging's bytes, taken by the next product only\n", cases);
    tsc_set_digits(c, NULL, 0);
    tsc_free(c, dgs);
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}

/* A prompt chunk's GDN (tsc_gdn_prefill: five kernels over all rows, the
 * recurrence a warp per head and 4 columns) against the step kernels in
 * 16-row calls (checked against the reference above) on the same inputs:
 * the same element arithmetic summed in another order (shuffle trees), so
 * the output within 2e-4 of its scale and the state within 5e-5 over 100
 * rows of the recurrence (the decay keeps differences from growing); the
 * conv state, a copy of the last inputs, bit for bit. Hk 2 / Hv 4 and a
 * GQA-style Hk 1 / Hv 4; 100 rows and 37. */
TS_TEST(cuda, gdn_prefill_vs_step) {
    OPEN(c);
    static const struct { int n, Hk, Hv; } cs_[] = {{100, 2, 4}, {37, 1, 4}, {150, 2, 2}};
    for (size_t ci = 0; ci < 3; ci++) {
        const int n = cs_[ci].n, Hk = cs_[ci].Hk, Hv = cs_[ci].Hv, K = 4;
        gdn_in g;
        gdn_in_make(c, &g, Hk, Hv, n);
        const int Vd = g.Vd, C = g.C;
        const size_t nS = g.nS;
        const float *S = g.S, *cs = g.cs;
        float *dq = g.dq, *dz = g.dz, *db = g.db, *da = g.da;
        float *dcs = up(c, cs, sizeof(float) * (K - 1) * C), *dcs1 = up(c, cs, sizeof(float) * (K - 1) * C);
        float *dS = up(c, S, sizeof(float) * nS), *dS1 = up(c, S, sizeof(float) * nS);
        float *dout = tsc_alloc(c, sizeof(float) * n * Vd), *dout1 = tsc_alloc(c, sizeof(float) * n * Vd);
        float *ws = tsc_alloc(c, tsc_gdn_ws_bytes(n, C));
        tsc_gdn_args A = gdn_in_args(&g, dcs, dS, dout, ws);
        tsc_gdn_prefill(c, &A);
        for (int t0 = 0; t0 < n; t0 += TSC_ROWS_MAX) {
            tsc_gdn_args B = A;
            B.n = n - t0 < TSC_ROWS_MAX ? n - t0 : TSC_ROWS_MAX;
            B.qkv = dq + (size_t)t0 * C, B.z = dz + (size_t)t0 * Vd, B.b = db + t0 * Hv, B.a = da + t0 * Hv;
            B.conv_state = dcs1, B.S = dS1, B.o = dout1 + (size_t)t0 * Vd;
            tsc_gdn_step(c, &B);
        }
        SYNC_OK(c);
        float *o = down(c, dout, (size_t)n * Vd), *o1 = down(c, dout1, (size_t)n * Vd);
        float *gS = down(c, dS, nS), *gS1 = down(c, dS1, nS), *gc = down(c, dcs, (size_t)(K - 1) * C);
        float *gc1 = down(c, dcs1, (size_t)(K - 1) * C);
        float mo = 0, ms = 0, maxo = 0, maxs = 0;
        for (size_t i = 0; i < (size_t)n * Vd; i++) mo = fmaxf(mo, fabsf(o[i] - o1[i])), maxo = fmaxf(maxo, fabsf(o1[i]));
        for (size_t i = 0; i < nS; i++) ms = fmaxf(ms, fabsf(gS[i] - gS1[i])), maxs = fmaxf(maxs, fabsf(gS1[i]));
        fprintf(stderr, "  gdn prefill %d rows, Hk %d Hv %d: max |o - step| %.3g (max |o| %.3g), max |S - step| %.3g (max |S| %.3g)\n",
                n, Hk, Hv, mo, maxo, ms, maxs);
        CHECK_MSG(mo <= 2e-4f * maxo, "gdn prefill output off by %.3g", mo);
        CHECK_MSG(ms <= 5e-5f * maxs, "gdn prefill state off by %.3g", ms);
        CHECK_MSG(!memcmp(gc, gc1, sizeof(float) * (K - 1) * C), "gdn prefill: conv state differs from the step's");
        /* the WY form (gdn.cu: records per 64-row chunk, then the chunks in
         * order), in one segment and in segments of one chunk, from the same
         * start states: against the step like the row scan, with 5x its
         * bounds (the chunk products sum in another order, with decays
         * e^{G_t - G_s} folded into them) */
        for (int seg = 0; seg < 2; seg++) {
            const int wr = seg ? 64 : (n + 63) / 64 * 64;
            float *wy = tsc_alloc(c, tsc_gdn_wy_bytes(wr, Hv));
            tsc_write(c, dS, S, sizeof(float) * nS);
            tsc_write(c, dcs, cs, sizeof(float) * (K - 1) * C);
            tsc_fill(c, dout, NAN, (size_t)n * Vd);
            tsc_gdn_args W = A;
            W.wy = wy, W.wy_rows = wr;
            tsc_gdn_prefill(c, &W);
            SYNC_OK(c);
            float *ow = down(c, dout, (size_t)n * Vd), *Sw = down(c, dS, nS);
            float mw = 0, msw = 0;
            for (size_t i = 0; i < (size_t)n * Vd; i++) mw = isnan(ow[i]) ? INFINITY : fmaxf(mw, fabsf(ow[i] - o1[i]));
            for (size_t i = 0; i < nS; i++) msw = isnan(Sw[i]) ? INFINITY : fmaxf(msw, fabsf(Sw[i] - gS1[i]));
            fprintf(stderr, "  gdn prefill WY%s %d rows: max |o - step| %.3g, max |S - step| %.3g\n",
                    seg ? " (64-row segments)" : "", n, mw, msw);
            CHECK_MSG(mw <= 1e-3f * maxo, "gdn prefill WY%s: output off by %.3g (max |o| %.3g)", seg ? " segments" : "", mw, maxo);
            CHECK_MSG(msw <= 2.5e-4f * maxs, "gdn prefill WY%s: state off by %.3g (max |S| %.3g)", seg ? " segments" : "", msw, maxs);
            free(ow), free(Sw);
            tsc_free(c, wy);
        }
        free(o), free(o1), free(gS), free(gS1), free(gc), free(gc1);
        tsc_free(c, dcs), tsc_free(c, dcs1), tsc_free(c, dS), tsc_free(c, dS1);
        tsc_free(c, dout), tsc_free(c, dout1), tsc_free(c, ws);
        gdn_in_free(c, &g);
    }
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}

/* The engine's forms of the GDN step (backend.cu: a verify, a lazy
 * rollback's replay, a captured decode step) against the plain in-place
 * step, bit for bit: a separate source state (the destination's old
 * contents ignored, the source untouched); the pair's buffer chosen by
 * device parities (1: the alternate buffers, in place, the others
 * untouched; 0: the plain ones); no output (o and z NULL: the same state).
 * 9 rows: a verify block of 8 drafts. */
static void gdn_engine_forms_on(int fused) {
    OPEN(c);
    tsc_set_gdn_fused(c, fused);
    const int n = 9;
    gdn_in g;
    gdn_in_make(c, &g, 2, 4, n);
    const int Vd = g.Vd;
    const size_t nS = g.nS, nc = g.nc, nj = nS > nc ? nS : nc;
    const float *cs = g.cs, *S = g.S;
    float *junk = malloc(sizeof(float) * nj);
    frand(junk, nj, 3.0f);
    float *ws = tsc_alloc(c, tsc_gdn_ws_bytes(n, g.C));
    const size_t ob = sizeof(float) * (size_t)n * Vd;
    const int32_t par1[2] = {1, 1}, par0[2] = {0, 0};
    int32_t *dp1 = up(c, par1, sizeof par1), *dp0 = up(c, par0, sizeof par0);
    /* the reference: in place */
    float *rcs = up(c, cs, sizeof(float) * nc), *rS = up(c, S, sizeof(float) * nS), *ro = tsc_alloc(c, ob);
    tsc_gdn_args A = gdn_in_args(&g, rcs, rS, ro, ws);
    tsc_gdn_step(c, &A);
    /* 1: from a separate source */
    float *scs = up(c, cs, sizeof(float) * nc), *sS = up(c, S, sizeof(float) * nS);
    float *dcs1 = up(c, junk, sizeof(float) * nc), *dS1 = up(c, junk, sizeof(float) * nS), *o1 = tsc_alloc(c, ob);
    tsc_gdn_args B = A;
    B.conv_in = scs, B.S_in = sS, B.conv_state = dcs1, B.S = dS1, B.o = o1;
    tsc_gdn_step(c, &B);
    /* 2: parities 1: the alternate buffers */
    float *pcs = up(c, junk, sizeof(float) * nc), *pS = up(c, junk, sizeof(float) * nS);
    float *acs = up(c, cs, sizeof(float) * nc), *aS = up(c, S, sizeof(float) * nS), *o2 = tsc_alloc(c, ob);
    tsc_gdn_args P = A;
    P.conv_state = pcs, P.S = pS, P.conv_alt = acs, P.S_alt = aS, P.par_conv = dp1, P.par_S = dp1 + 1, P.o = o2;
    tsc_gdn_step(c, &P);
    /* 3: parities 0: the plain buffers */
    float *qcs = up(c, cs, sizeof(float) * nc), *qS = up(c, S, sizeof(float) * nS);
    float *xcs = up(c, junk, sizeof(float) * nc), *xS = up(c, junk, sizeof(float) * nS), *o3 = tsc_alloc(c, ob);
    tsc_gdn_args Q = A;
    Q.conv_state = qcs, Q.S = qS, Q.conv_alt = xcs, Q.S_alt = xS, Q.par_conv = dp0, Q.par_S = dp0 + 1, Q.o = o3;
    tsc_gdn_step(c, &Q);
    /* 4: no output */
    float *ncs = up(c, cs, sizeof(float) * nc), *nS4 = up(c, S, sizeof(float) * nS);
    tsc_gdn_args N = A;
    N.conv_state = ncs, N.S = nS4, N.o = NULL, N.z = NULL;
    tsc_gdn_step(c, &N);
    /* 5: both ends chosen on the device (a captured verify: buffer 0 of
     * each pair -> buffer 1) */
    const int32_t sel01[4] = {0, 1, 0, 1}, sel00[4] = {0, 0, 0, 0}, cnt[2] = {5, 0};
    int32_t *dsel01 = up(c, sel01, sizeof sel01), *dsel00 = up(c, sel00, sizeof sel00), *dcnt = up(c, cnt, sizeof cnt);
    float *vcs = up(c, cs, sizeof(float) * nc), *vS = up(c, S, sizeof(float) * nS);
    float *vcs1 = up(c, junk, sizeof(float) * nc), *vS1 = up(c, junk, sizeof(float) * nS), *o5 = tsc_alloc(c, ob);
    tsc_gdn_args V = A;
    V.conv_state = vcs, V.S = vS, V.conv_alt = vcs1, V.S_alt = vS1, V.sel = dsel01, V.o = o5;
    tsc_gdn_step(c, &V);
    /* 6: a device row count (a lazy rollback's pending rows): 5 of 9, in
     * place, against a plain 5-row step */
    float *fcs = up(c, cs, sizeof(float) * nc), *fS = up(c, S, sizeof(float) * nS), *fo = tsc_alloc(c, ob);
    tsc_gdn_args F = A;
    F.n = 5, F.conv_state = fcs, F.S = fS, F.o = fo;
    tsc_gdn_step(c, &F);
    float *ccs = up(c, cs, sizeof(float) * nc), *cS = up(c, S, sizeof(float) * nS), *o6 = up(c, junk, ob);
    tsc_gdn_args D6 = A;
    D6.conv_state = ccs, D6.S = cS, D6.conv_alt = ccs, D6.S_alt = cS, D6.sel = dsel00, D6.n_dev = dcnt, D6.o = o6;
    tsc_gdn_step(c, &D6);
    /* 7: a count of 0: nothing read or written, not even the source copied
     * to the destination */
    float *zcs = up(c, cs, sizeof(float) * nc), *zS = up(c, S, sizeof(float) * nS);
    float *zcs1 = up(c, junk, sizeof(float) * nc), *zS1 = up(c, junk, sizeof(float) * nS), *o7 = up(c, junk, ob);
    tsc_gdn_args Z = A;
    Z.conv_state = zcs, Z.S = zS, Z.conv_alt = zcs1, Z.S_alt = zS1, Z.sel = dsel01, Z.n_dev = dcnt + 1, Z.o = o7;
    tsc_gdn_step(c, &Z);
    SYNC_OK(c);
    float *h_fcs = down(c, fcs, nc), *h_fS = down(c, fS, nS), *h_fo = down(c, fo, (size_t)5 * Vd);
    float *h_rcs = down(c, rcs, nc), *h_rS = down(c, rS, nS), *h_ro = down(c, ro, (size_t)n * Vd);
    const struct { const char *what; const float *d; const float *want; size_t cnt; } ck[] = {
        {"source: conv", dcs1, h_rcs, nc}, {"source: state", dS1, h_rS, nS}, {"source: output", o1, h_ro, (size_t)n * Vd},
        {"source: conv source untouched", scs, cs, nc}, {"source: state source untouched", sS, S, nS},
        {"parity 1: conv", acs, h_rcs, nc}, {"parity 1: state", aS, h_rS, nS}, {"parity 1: output", o2, h_ro, (size_t)n * Vd},
        {"parity 1: the other conv untouched", pcs, junk, nc}, {"parity 1: the other state untouched", pS, junk, nS},
        {"parity 0: conv", qcs, h_rcs, nc}, {"parity 0: state", qS, h_rS, nS}, {"parity 0: output", o3, h_ro, (size_t)n * Vd},
        {"parity 0: the alternate conv untouched", xcs, junk, nc}, {"parity 0: the alternate state untouched", xS, junk, nS},
        {"no output: conv", ncs, h_rcs, nc}, {"no output: state", nS4, h_rS, nS},
        {"device choice: conv", vcs1, h_rcs, nc}, {"device choice: state", vS1, h_rS, nS},
        {"device choice: output", o5, h_ro, (size_t)n * Vd}, {"device choice: conv source untouched", vcs, cs, nc},
        {"device choice: state source untouched", vS, S, nS},
        {"device count 5: conv", ccs, h_fcs, nc}, {"device count 5: state", cS, h_fS, nS},
        {"device count 5: output", o6, h_fo, (size_t)5 * Vd}, {"device count 5: rows past it untouched",
                                                               o6 + (size_t)5 * Vd, junk + (size_t)5 * Vd, (size_t)4 * Vd},
        {"device count 0: conv source", zcs, cs, nc}, {"device count 0: state source", zS, S, nS},
        {"device count 0: conv destination", zcs1, junk, nc}, {"device count 0: state destination", zS1, junk, nS},
        {"device count 0: output", o7, junk, (size_t)n * Vd},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof ck / sizeof ck[0]; i++) {
        float *h = down(c, ck[i].d, ck[i].cnt);
        if (memcmp(h, ck[i].want, sizeof(float) * ck[i].cnt)) {
            ts_test_fail(__FILE__, __LINE__, "gdn engine forms: %s differs from the plain step", ck[i].what);
            bad++;
        }
        free(h);
    }
    fprintf(stderr, "  gdn step, 9 rows: separate source, parities 1 and 0, no output, device choice and counts "
            "(5, 0): %s\n", bad ? "DIFFER" : "bit-identical to the plain step");
    free(h_rcs), free(h_rS), free(h_ro), free(h_fcs), free(h_fS), free(h_fo);
    free(junk);
    gdn_in_free(NULL, &g);
    tsc_close(c);
}

/* the same forms through the step's one-kernel form (k_gdn_fused) */
TS_TEST(cuda, gdn_step_engine_forms) {
    gdn_engine_forms_on(0);
    gdn_engine_forms_on(1);
}

/* The step in one kernel (tsc_set_gdn_fused) against prep + scan on the same
 * fresh inputs, in place: output, state and conv state bit for bit (the same
 * arithmetic by construction: gdn.cu). Clusters of 4 (Hv = Hk) and 8 (Hv =
 * 2 Hk); Hv = 4 Hk takes the two kernels with the switch on (the same call
 * must work). 1, 3, 5 and 16 rows. */
TS_TEST(cuda, gdn_fused_same_bits) {
    static const int cfg[][3] = {{2, 2, 3}, {2, 4, 1}, {2, 4, 16}, {3, 6, 5}, {1, 4, 5}, {4, 4, 1}};
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        OPEN(c);
        const int Hk = cfg[ci][0], Hv = cfg[ci][1], n = cfg[ci][2];
        gdn_in g;
        gdn_in_make(c, &g, Hk, Hv, n);
        const int Vd = g.Vd;
        const size_t nS = g.nS, nc = g.nc;
        float *got[2][3];
        for (int f = 0; f < 2; f++) {
            float *dcs = up(c, g.cs, sizeof(float) * nc), *dS = up(c, g.S, sizeof(float) * nS);
            float *dout = tsc_alloc(c, sizeof(float) * (size_t)n * Vd), *ws = tsc_alloc(c, tsc_gdn_ws_bytes(n, g.C));
            tsc_gdn_args A = gdn_in_args(&g, dcs, dS, dout, ws);
            tsc_set_gdn_fused(c, f);
            tsc_gdn_step(c, &A);
            SYNC_OK(c);
            got[f][0] = down(c, dout, (size_t)n * Vd), got[f][1] = down(c, dS, nS), got[f][2] = down(c, dcs, nc);
        }
        fprintf(stderr, "  gdn fused Hk %d Hv %d rows %d: output %s, state %s, conv state %s\n", Hk, Hv, n,
                memcmp(got[0][0], got[1][0], sizeof(float) * (size_t)n * Vd) ? "DIFFER" : "same",
                memcmp(got[0][1], got[1][1], sizeof(float) * nS) ? "DIFFER" : "same",
                memcmp(got[0][2], got[1][2], sizeof(float) * nc) ? "DIFFER" : "same");
        CHECK_MSG(!memcmp(got[0][0], got[1][0], sizeof(float) * (size_t)n * Vd), "case %zu: fused output differs", ci);
        CHECK_MSG(!memcmp(got[0][1], got[1][1], sizeof(float) * nS), "case %zu: fused state differs", ci);
        CHECK_MSG(!memcmp(got[0][2], got[1][2], sizeof(float) * nc), "case %zu: fused conv state differs", ci);
        for (int f = 0; f < 2; f++) free(got[f][0]), free(got[f][1]), free(got[f][2]);
        CHECK(tsc_mem_used(c) > 0);
        gdn_in_free(NULL, &g);
        tsc_close(c);
    }
}

/* k_gdn_fused's N (tsc_set_gdn_nb2: the step's outputs and out_proj's
 * digits after one cluster barrier, each block making its quantization
 * group's outputs itself, its per-row arrays in dynamic shared memory sized
 * by the launch) against two barriers and static arrays on the same fresh
 * inputs: the output, the digits (the whole digits buffer, filled with a
 * pattern first), the state and the conv state bit for bit. Clusters of 4
 * and 8 blocks, groups of 1, 2 and 4 blocks (32, 64, 128 columns), 1, 3 and
 * 16 rows, the rows' outputs by several warps and by warp 0. */
TS_TEST(cuda, gdn_nb2_same_bits) {
    OPEN(c);
    const size_t ndg = tsc_digits_ws_bytes() / sizeof(float);
    int cases = 0;
    for (int hv = 0; hv < 2; hv++)
        for (int gi = 0; gi < 3; gi++)
            for (int ni = 0; ni < 3; ni++)
                for (int rp = 0; rp < 2; rp++) {
                    const int Hv = hv ? 4 : 2, n = ni == 0 ? 1 : ni == 1 ? 3 : 16, G = 32 << gi;
                    gdn_in g;
                    gdn_in_make(c, &g, 2, Hv, n);
                    const int Vd = g.Vd;
                    const size_t nS = g.nS, nc = g.nc;
                    float *got[2][4];
                    tsc_set_gdn_rowpar(c, rp);
                    for (int f = 0; f < 2; f++) {
                        float *dcs = up(c, g.cs, sizeof(float) * nc), *dS = up(c, g.S, sizeof(float) * nS);
                        float *dout = tsc_alloc(c, sizeof(float) * (size_t)n * Vd), *ws = tsc_alloc(c, tsc_gdn_ws_bytes(n, g.C));
                        float *dgs = tsc_alloc(c, ndg * sizeof(float));
                        tsc_fill(c, dgs, 3.0f, ndg);
                        tsc_gdn_args A = gdn_in_args(&g, dcs, dS, dout, ws);
                        A.dg = dgs, A.dg_group = G;
                        tsc_set_gdn_nb2(c, f);
                        tsc_gdn_step(c, &A);
                        SYNC_OK(c);
                        got[f][0] = down(c, dout, (size_t)n * Vd), got[f][1] = down(c, dS, nS);
                        got[f][2] = down(c, dcs, nc), got[f][3] = down(c, dgs, ndg);
                        tsc_free(c, dcs), tsc_free(c, dS), tsc_free(c, dout), tsc_free(c, ws), tsc_free(c, dgs);
                    }
                    tsc_set_gdn_nb2(c, 1), tsc_set_gdn_rowpar(c, 1);
                    const size_t sz[4] = {(size_t)n * Vd, nS, nc, ndg};
                    static const char *const nm[4] = {"output", "state", "conv state", "digits"};
                    for (int k = 0; k < 4; k++)
                        CHECK_MSG(!memcmp(got[0][k], got[1][k], sizeof(float) * sz[k]),
                                  "Hv %d group %d, %d rows, rows_par %d: the %s differs without the second barrier", Hv,
                                  G, n, rp, nm[k]);
                    /* the digits were written (the form took the digits path: not the pattern as it was) */
                    size_t changed = 0;
                    for (size_t e = 0; e < ndg; e++) changed += got[1][3][e] != 3.0f;
                    CHECK_MSG(changed > 0, "Hv %d group %d, %d rows: no digits written", Hv, G, n);
                    for (int f = 0; f < 2; f++)
                        for (int k = 0; k < 4; k++) free(got[f][k]);
                    gdn_in_free(c, &g);
                    cases++;
                }
    fprintf(stderr, "  gdn nb2: %d cases, output, digits, state and conv state the same bits as two barriers\n", cases);
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}

/* ---- attention ---- */

static void rope_ref(float *x, int rot, int pos, float theta) {
    const int half = rot / 2;
    for (int j = 0; j < half; j++) {
        float inv = 1.0f / powf(theta, (float)(2 * j) / (float)rot);
        float a = (float)pos * inv, cs = cosf(a), sn = sinf(a);
        float x0 = x[j], x1 = x[j + half];
        x[j] = x0 * cs - x1 * sn;
        x[j + half] = x1 * cs + x0 * sn;
    }
}

/* A prompt chunk's attention (tsc_attn_prefill: all rows at once, the
 * cache in tiles) against the row kernels (tsc_attn_decode's phase 2 row by
 * row, themselves checked against the reference below) on the same prepared
 * queries and cache (phase 1 in 16-row calls, as backend.cu runs a chunk):
 * the output is a convex combination of V rows (|v| <= 1) times a gate in
 * (0, 1) summed in another order, so 5e-6 absolute; rows past the chunk
 * untouched. Cases: GQA 4 and 3 (rows a block not a power of two), no GQA,
 * chunks at position 0 and later, head dims 256 and 128. */
TS_TEST(cuda, attn_prefill_vs_row_kernels) {
    OPEN(c);
    static const struct { int nq, nkv, D, pos0, n; } cs[] = {
        {16, 4, 256, 0, 100}, {8, 2, 256, 37, 70}, {6, 2, 128, 5, 33}, {4, 4, 128, 0, 17}, {16, 4, 256, 300, 150},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const int nq = cs[ci].nq, nkv = cs[ci].nkv, D = cs[ci].D, pos0 = cs[ci].pos0, n = cs[ci].n, kvdim = nkv * D;
        const int max_T = pos0 + n + 40;
        const size_t nqg = (size_t)n * nq * 2 * D;
        float *qg = malloc(sizeof(float) * nqg), *k = malloc(sizeof(float) * n * kvdim), *v = malloc(sizeof(float) * n * kvdim);
        float *qn = malloc(sizeof(float) * D), *kn = malloc(sizeof(float) * D);
        float *Kc = calloc((size_t)max_T * kvdim, sizeof(float)), *Vc = calloc((size_t)max_T * kvdim, sizeof(float));
        frand(qg, nqg, 2.0f), frand(k, (size_t)n * kvdim, 2.0f), frand(v, (size_t)n * kvdim, 1.0f);
        frand(qn, D, 1.0f), frand(kn, D, 1.0f);
        frand(Kc, (size_t)pos0 * kvdim, 1.0f), frand(Vc, (size_t)pos0 * kvdim, 1.0f);
        float *dqg = up(c, qg, sizeof(float) * nqg), *dk = up(c, k, sizeof(float) * n * kvdim), *dv = up(c, v, sizeof(float) * n * kvdim);
        float *dqn = up(c, qn, sizeof(float) * D), *dkn = up(c, kn, sizeof(float) * D);
        float *dK = up(c, Kc, sizeof(float) * max_T * kvdim), *dV = up(c, Vc, sizeof(float) * max_T * kvdim);
        float *dout = tsc_alloc(c, sizeof(float) * n * nq * D), *dout1 = tsc_alloc(c, sizeof(float) * (n + 1) * nq * D);
        tsc_fill(c, dout1, 7.0f, (size_t)(n + 1) * nq * D);
        float *ws = tsc_alloc(c, tsc_attn_ws_bytes(1, nq, D, max_T));
        tsc_attn_args A = {.n = n, .pos = pos0, .nq = nq, .nkv = nkv, .D = D, .rot = 64, .theta = 1e7f, .eps = 1e-6f,
                           .qg = dqg, .k = dk, .v = dv, .q_norm = dqn, .k_norm = dkn, .Kc = dK, .Vc = dV,
                           .max_T = max_T, .out = dout, .ws = ws, .phase = 1};
        for (int r0 = 0; r0 < n; r0 += TSC_ROWS_MAX) { /* phase 1: norms, RoPE, K/V appended */
            tsc_attn_args B = A;
            B.n = n - r0 < TSC_ROWS_MAX ? n - r0 : TSC_ROWS_MAX, B.pos = pos0 + r0;
            B.qg = dqg + (size_t)r0 * nq * 2 * D, B.k = dk + (size_t)r0 * kvdim, B.v = dv + (size_t)r0 * kvdim;
            tsc_attn_decode(c, &B);
        }
        for (int i = 0; i < n; i++) { /* the row kernels */
            tsc_attn_args B = A;
            B.n = 1, B.pos = pos0 + i, B.phase = 2, B.qg = dqg + (size_t)i * nq * 2 * D, B.out = dout + (size_t)i * nq * D;
            tsc_attn_decode(c, &B);
        }
        tsc_attn_args P = A;
        P.phase = 0, P.ws = NULL, P.out = dout1;
        tsc_attn_prefill(c, &P);
        SYNC_OK(c);
        float *ga = down(c, dout, (size_t)n * nq * D), *gb = down(c, dout1, (size_t)(n + 1) * nq * D);
        const float e = ts_test_max_abs(ga, gb, (size_t)n * nq * D);
        int tail = 1;
        for (int d = 0; d < nq * D; d++) tail &= gb[(size_t)n * nq * D + d] == 7.0f;
        fprintf(stderr, "  attn prefill nq %d nkv %d D %d rows %d at %d: max |prefill - rows| %.2g\n", nq, nkv, D, n, pos0, e);
        CHECK_MSG(e <= 5e-6f, "attn prefill case %zu: off by %.3g from the row kernels", ci, e);
        CHECK_MSG(tail, "attn prefill case %zu: wrote past the chunk's rows", ci);
        if (tsc_blas_ready()) { /* through cuBLAS (blas.cu): TF32 products, tiles of all rows and of 7 */
            const int G = nq / nkv;
            for (int tiny = 0; tiny < 2; tiny++) {
                const size_t wsb = tsc_attn_blas_ws_bytes(tiny ? 7 : n, G, (int64_t)pos0 + n);
                void *bws = tsc_alloc(c, wsb);
                tsc_fill(c, dout1, 7.0f, (size_t)(n + 1) * nq * D);
                tsc_attn_blas(c, &P, pos0, bws, wsb);
                SYNC_OK(c);
                float *gc = down(c, dout1, (size_t)(n + 1) * nq * D);
                const float eb = ts_test_max_abs(ga, gc, (size_t)n * nq * D);
                int tb = 1;
                for (int d = 0; d < nq * D; d++) tb &= gc[(size_t)n * nq * D + d] == 7.0f;
                fprintf(stderr, "  attn cuBLAS (TF32)%s: max |blas - rows| %.2g\n", tiny ? ", 7-row tiles" : "", eb);
                /* TF32 keeps 10 bits of q and k (the conversion may truncate): a score of these normed rows
                 * (sum |q k| / sqrt(D) up to ~30) moves by up to ~1e-2, its weight by ~1%, the output (|v| <= 1)
                 * by well under 1e-2; a wrong mask or tile moves early rows (1-10 keys, outputs O(0.3)) by far more */
                CHECK_MSG(eb <= 1e-2f, "attn cuBLAS case %zu%s: off by %.3g from the row kernels (tol 1e-2)", ci,
                          tiny ? " (7-row tiles)" : "", eb);
                CHECK_MSG(tb, "attn cuBLAS case %zu: wrote past the chunk's rows", ci);
                free(gc);
                tsc_free(c, bws);
            }
        }
        free(ga), free(gb), free(qg), free(k), free(v), free(qn), free(kn), free(Kc), free(Vc);
        tsc_free(c, dqg), tsc_free(c, dk), tsc_free(c, dv), tsc_free(c, dqn), tsc_free(c, dkn), tsc_free(c, dK);
        tsc_free(c, dV), tsc_free(c, dout), tsc_free(c, dout1), tsc_free(c, ws);
    }
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}

/* D: the head dim; split: keys per piece (0: TSC_ATTN_SPLIT); devpos: the
 * position from a device int (the engine's form: backend.cu, graphs replay
 * at any position) */
static void attn_case_d(int nq, int nkv, int D, int pos0, int n, int max_T, int split, int devpos, int np_max) {
    OPEN(c);
    tsc_set_attn_kv(c, 1); /* the warp-a-key form first (the default, 2, below) */
    const int rot = 64, kvdim = nkv * D, G = nq / nkv;
    const float theta = 1e7f, eps = 1e-6f;
    float *qg = malloc(sizeof(float) * n * nq * 2 * D), *k = malloc(sizeof(float) * n * kvdim);
    float *v = malloc(sizeof(float) * n * kvdim), *qn = malloc(sizeof(float) * D), *kn = malloc(sizeof(float) * D);
    float *Kc = calloc((size_t)max_T * kvdim, sizeof(float)), *Vc = calloc((size_t)max_T * kvdim, sizeof(float));
    frand(qg, (size_t)n * nq * 2 * D, 2.0f), frand(k, (size_t)n * kvdim, 2.0f), frand(v, (size_t)n * kvdim, 1.0f);
    frand(qn, D, 1.0f), frand(kn, D, 1.0f);
    frand(Kc, (size_t)pos0 * kvdim, 1.0f), frand(Vc, (size_t)pos0 * kvdim, 1.0f);
    /* (the inputs as made: the reference below works on qg, k and the cache in place) */
    float *qg0 = malloc(sizeof(float) * n * nq * 2 * D), *k0 = malloc(sizeof(float) * n * kvdim);
    float *Kc0 = malloc(sizeof(float) * max_T * kvdim), *Vc0 = malloc(sizeof(float) * max_T * kvdim);
    memcpy(qg0, qg, sizeof(float) * n * nq * 2 * D), memcpy(k0, k, sizeof(float) * n * kvdim);
    memcpy(Kc0, Kc, sizeof(float) * max_T * kvdim), memcpy(Vc0, Vc, sizeof(float) * max_T * kvdim);
    float *dqg = up(c, qg, sizeof(float) * n * nq * 2 * D), *dk = up(c, k, sizeof(float) * n * kvdim);
    float *dqg1 = up(c, qg, sizeof(float) * n * nq * 2 * D), *dk1 = up(c, k, sizeof(float) * n * kvdim);
    float *dv = up(c, v, sizeof(float) * n * kvdim), *dqn = up(c, qn, sizeof(float) * D), *dkn = up(c, kn, sizeof(float) * D);
    float *dK = up(c, Kc, sizeof(float) * max_T * kvdim), *dV = up(c, Vc, sizeof(float) * max_T * kvdim);
    float *dK1 = up(c, Kc, sizeof(float) * max_T * kvdim), *dV1 = up(c, Vc, sizeof(float) * max_T * kvdim);
    float *dout = tsc_alloc(c, sizeof(float) * n * nq * D), *dout1 = tsc_alloc(c, sizeof(float) * n * nq * D);
    float *ws = tsc_alloc(c, np_max ? tsc_attn_ws_bytes_np(n, nq, D, np_max) : tsc_attn_ws_bytes_split(n, nq, D, max_T, split));
    int32_t *dpos = tsc_alloc(c, sizeof(int32_t));
    tsc_write(c, dpos, &pos0, sizeof(int32_t));
    tsc_attn_args A = {.n = n, .pos = devpos ? 0 : pos0, .nq = nq, .nkv = nkv, .D = D, .rot = rot, .theta = theta,
                       .eps = eps, .qg = dqg, .k = dk, .v = dv, .q_norm = dqn, .k_norm = dkn, .Kc = dK, .Vc = dV,
                       .max_T = max_T, .out = dout, .ws = ws, .pos_dev = devpos ? dpos : NULL, .split = split,
                       .np_max = np_max};
    tsc_attn_decode(c, &A);
    /* the same call with the keys and values read from the cache where used
     * (tsc_set_attn_kv(c, 0)) instead of through shared memory: the same bits */
    float *dqg2 = up(c, qg, sizeof(float) * n * nq * 2 * D), *dk2 = up(c, k, sizeof(float) * n * kvdim);
    float *dK2 = up(c, Kc, sizeof(float) * max_T * kvdim), *dV2 = up(c, Vc, sizeof(float) * max_T * kvdim);
    float *dout2 = tsc_alloc(c, sizeof(float) * n * nq * D);
    tsc_attn_args A2 = A;
    A2.qg = dqg2, A2.k = dk2, A2.Kc = dK2, A2.Vc = dV2, A2.out = dout2;
    tsc_set_attn_kv(c, 0);
    tsc_attn_decode(c, &A2);
    /* the scores a lane a key (tsc_set_attn_kv(c, 2)): another summation
     * order, so against the reference below, and its n rows against n
     * one-row calls bit for bit */
    float *dout3 = tsc_alloc(c, sizeof(float) * n * nq * D), *dout4 = tsc_alloc(c, sizeof(float) * n * nq * D);
    tsc_set_attn_kv(c, 2);
    for (int f = 0; f < 2; f++) {
        float *fq = up(c, qg, sizeof(float) * n * nq * 2 * D), *fk = up(c, k, sizeof(float) * n * kvdim);
        float *fK = up(c, Kc, sizeof(float) * max_T * kvdim), *fV = up(c, Vc, sizeof(float) * max_T * kvdim);
        tsc_attn_args A3 = A;
        A3.qg = fq, A3.k = fk, A3.Kc = fK, A3.Vc = fV, A3.out = f ? dout4 : dout3;
        if (!f) tsc_attn_decode(c, &A3);
        for (int i = 0; f && i < n; i++) {
            tsc_attn_args B = A3;
            B.n = 1, B.pos = (devpos ? 0 : pos0) + i, B.qg = fq + (size_t)i * nq * 2 * D, B.k = fk + (size_t)i * kvdim;
            B.v = dv + (size_t)i * kvdim, B.out = dout4 + (size_t)i * nq * D;
            tsc_attn_decode(c, &B);
        }
        SYNC_OK(c);
        tsc_free(c, fq), tsc_free(c, fk), tsc_free(c, fK), tsc_free(c, fV);
    }
    tsc_set_attn_kv(c, 1);
    for (int i = 0; i < n; i++) {
        tsc_attn_args B = A;
        B.n = 1, B.pos = (devpos ? 0 : pos0) + i, B.qg = dqg1 + (size_t)i * nq * 2 * D, B.k = dk1 + (size_t)i * kvdim;
        B.v = dv + (size_t)i * kvdim, B.Kc = dK1, B.Vc = dV1, B.out = dout1 + (size_t)i * nq * D;
        tsc_attn_decode(c, &B);
    }
    SYNC_OK(c);
    /* reference: qwen35.c's attn_block row path with the reference kernels */
    float *out = malloc(sizeof(float) * n * nq * D), *att = malloc(sizeof(float) * max_T);
    for (int i = 0; i < n; i++) {
        float *qi = qg + (size_t)i * nq * 2 * D, *ki = k + (size_t)i * kvdim;
        for (int h = 0; h < nq; h++) ref_add_rmsnorm(qi + h * 2 * D, NULL, qn, qi + h * 2 * D, 1, D, eps);
        ref_add_rmsnorm(ki, NULL, kn, ki, nkv, D, eps);
        for (int h = 0; h < nq; h++) rope_ref(qi + h * 2 * D, rot, pos0 + i, theta);
        for (int h = 0; h < nkv; h++) rope_ref(ki + h * D, rot, pos0 + i, theta);
        memcpy(Kc + (size_t)(pos0 + i) * kvdim, ki, sizeof(float) * kvdim);
        memcpy(Vc + (size_t)(pos0 + i) * kvdim, v + (size_t)i * kvdim, sizeof(float) * kvdim);
        for (int h = 0; h < nq; h++) {
            float *oh = out + (size_t)i * nq * D + h * D;
            ts_attn_row_ref(qi + h * 2 * D, Kc + (h / G) * D, Vc + (h / G) * D, kvdim, pos0 + i + 1, D,
                            1.0f / sqrtf((float)D), att, oh);
            for (int d = 0; d < D; d++) oh[d] *= sigm(qi[h * 2 * D + D + d]);
        }
    }
    float *go = down(c, dout, (size_t)n * nq * D), *go1 = down(c, dout1, (size_t)n * nq * D);
    float *gK = down(c, dK, (size_t)max_T * kvdim), *gK1 = down(c, dK1, (size_t)max_T * kvdim);
    float *gV = down(c, dV, (size_t)max_T * kvdim), *gq = down(c, dqg, (size_t)n * nq * 2 * D);
    /* tolerances: normed + rotated q/k within 4 ulp-ish (cos/sin and pow in
     * double vs glibc's f32: 1e-6 of the row's scale); the output is a convex
     * combination of V rows (|v| <= 1) computed in another order (split
     * softmax, FMAs): 2e-6 absolute */
    const float dk_ = ts_test_max_abs(gK + (size_t)pos0 * kvdim, Kc + (size_t)pos0 * kvdim, (size_t)n * kvdim);
    const float dq_ = ts_test_max_abs(gq, qg, (size_t)n * nq * 2 * D);
    const float do_ = ts_test_max_abs(go, out, (size_t)n * nq * D);
    fprintf(stderr, "  attn nq %d nkv %d T %d..%d: |q| %.2g |k| %.2g |out| %.2g\n", nq, nkv, pos0 + 1, pos0 + n, dq_, dk_, do_);
    CHECK_MSG(dq_ <= 1e-5f && dk_ <= 1e-5f, "q/k after norm + RoPE off by %.3g / %.3g", dq_, dk_);
    CHECK_MSG(do_ <= 2e-6f, "attention output off by %.3g", do_);
    CHECK_MSG(!memcmp(gV + (size_t)pos0 * kvdim, v, sizeof(float) * n * kvdim), "V rows not appended as given");
    CHECK_MSG(!memcmp(go, go1, sizeof(float) * n * nq * D), "attn: %d-row call != %d one-row calls", n, n);
    CHECK_MSG(!memcmp(gK, gK1, sizeof(float) * max_T * kvdim), "attn: K cache differs between the two");
    float *go2 = down(c, dout2, (size_t)n * nq * D);
    CHECK_MSG(!memcmp(go, go2, sizeof(float) * n * nq * D), "attn: K/V through shared memory != read where used");
    float *go3 = down(c, dout3, (size_t)n * nq * D), *go4 = down(c, dout4, (size_t)n * nq * D);
    const float do3 = ts_test_max_abs(go3, out, (size_t)n * nq * D);
    fprintf(stderr, "  attn scores a lane a key: |out| %.2g\n", do3);
    CHECK_MSG(do3 <= 2e-6f, "attention output (scores a lane a key) off by %.3g", do3);
    CHECK_MSG(!memcmp(go3, go4, sizeof(float) * n * nq * D), "attn (lane a key): %d-row call != %d one-row calls", n, n);
    /* the work before the PDL waits (tsc_set_attn_early, the default) on and
     * off, the combine's loads in one round (tsc_set_attn_r1) on and off, the
     * split's accumulators for G heads (tsc_set_attn_gc) off and on: the
     * same bits for n rows in one call (w 0), a row a call (w 1)
     * and one call whose out is over v (w 2: the engine's buffers, out is
     * big2); the cache appended alike */
    tsc_set_attn_kv(c, 2);
    float *vb = calloc((size_t)n * nq * D, sizeof(float));
    memcpy(vb, v, sizeof(float) * n * kvdim);
    for (int ea = 0; ea < 8; ea++) /* bit 0: tsc_set_attn_early, bit 1: tsc_set_attn_r1, bit 2: GC off */
        for (int w = 0; w < 3; w++) {
            tsc_set_attn_early(c, ea & 1), tsc_set_attn_r1(c, ea & 2), tsc_set_attn_gc(c, !(ea & 4));
            float *fq = up(c, qg0, sizeof(float) * n * nq * 2 * D), *fk = up(c, k0, sizeof(float) * n * kvdim);
            float *fK = up(c, Kc0, sizeof(float) * max_T * kvdim), *fV = up(c, Vc0, sizeof(float) * max_T * kvdim);
            float *fo = w == 2 ? up(c, vb, sizeof(float) * n * nq * D) : tsc_alloc(c, sizeof(float) * n * nq * D);
            tsc_attn_args F = A;
            F.qg = fq, F.k = fk, F.Kc = fK, F.Vc = fV, F.out = fo, F.v = w == 2 ? fo : dv;
            if (w != 1) tsc_attn_decode(c, &F);
            for (int i = 0; w == 1 && i < n; i++) {
                tsc_attn_args B = F;
                B.n = 1, B.pos = (devpos ? 0 : pos0) + i, B.qg = fq + (size_t)i * nq * 2 * D, B.k = fk + (size_t)i * kvdim;
                B.v = dv + (size_t)i * kvdim, B.out = fo + (size_t)i * nq * D;
                tsc_attn_decode(c, &B);
            }
            SYNC_OK(c);
            float *ho = down(c, fo, (size_t)n * nq * D), *hK = down(c, fK, (size_t)max_T * kvdim);
            float *hV = down(c, fV, (size_t)max_T * kvdim);
            CHECK_MSG(!memcmp(ho, go3, sizeof(float) * n * nq * D), "attn early %d (%s): out differs (max %.3g)", ea,
                      w == 0 ? "rows at once" : w == 1 ? "a row a call" : "out over v",
                      ts_test_max_abs(ho, go3, (size_t)n * nq * D));
            CHECK_MSG(!memcmp(hK, gK, sizeof(float) * max_T * kvdim) && !memcmp(hV, gV, sizeof(float) * max_T * kvdim),
                      "attn early %d (w %d): the cache differs", ea, w);
            free(ho), free(hK), free(hV);
            tsc_free(c, fq), tsc_free(c, fk), tsc_free(c, fK), tsc_free(c, fV), tsc_free(c, fo);
        }
    fprintf(stderr, "  attn early, r1 and gc on and off: the same bits (rows at once, a row a call, out over v)\n");
    tsc_set_attn_early(c, 1), tsc_set_attn_r1(c, 1), tsc_set_attn_gc(c, 1);
    free(vb), free(qg0), free(k0), free(Kc0), free(Vc0);
    free(qg), free(k), free(v), free(qn), free(kn), free(Kc), free(Vc), free(out), free(att);
    free(go), free(go1), free(go2), free(go3), free(go4), free(gK), free(gK1), free(gV), free(gq);
    tsc_close(c);
}

static void attn_case_on(int nq, int nkv, int pos0, int n, int max_T, int split, int devpos, int np_max) {
    attn_case_d(nq, nkv, 256, pos0, n, max_T, split, devpos, np_max);
}
static void attn_case(int nq, int nkv, int pos0, int n, int max_T) { attn_case_on(nq, nkv, pos0, n, max_T, 0, 0, 0); }

TS_TEST(cuda, attn_short_parity_and_row_exact) {
    attn_case(8, 2, 37, 3, 64);
    attn_case(8, 2, 30, 4, 64); /* the rows' keys over a sub-chunk's end */
    /* other query heads a KV head (the split's accumulators sized for them:
     * 1, 2, 3 of 4, 8, 16) */
    attn_case(4, 4, 21, 2, 64);
    attn_case(4, 2, 33, 2, 64);
    attn_case(6, 2, 40, 3, 64);
    attn_case(16, 2, 35, 2, 64);
    attn_case(16, 1, 29, 2, 64);
    /* head dims whose float4 columns do not divide 256 (the GC staging's
     * carried column) */
    attn_case_d(6, 2, 96, 40, 3, 64, 0, 0, 0);
    attn_case_d(8, 2, 160, 37, 3, 64, 0, 0, 0);
}
/* the engine's form: position on the device, pieces of several sub-chunks */
TS_TEST(cuda, attn_device_pos_big_pieces) {
    attn_case_on(16, 4, 1000, 4, 1100, 288, 1, 0);
    attn_case_on(8, 2, 37, 3, 64, 64, 1, 0);
}

/* same_pos (the DFlash block's rows in one call, backend.cu attn_block):
 * n rows attending as the row at pos, each row's output bit for bit that of
 * a one-row call at pos with its query; the pieces by row length (np_max),
 * a device position too. */
TS_TEST(cuda, attn_same_pos_rows) {
    OPEN(c);
    const int nq = 8, nkv = 2, D = 128, n = 6, max_T = 700, np_max = 12;
    const int kvdim = nkv * D;
    for (int devpos = 0; devpos < 2; devpos++) {
        const int pos = devpos ? 411 : 64;
        float *qg = malloc(sizeof(float) * n * nq * 2 * D), *Kc = malloc(sizeof(float) * max_T * kvdim),
              *Vc = malloc(sizeof(float) * max_T * kvdim);
        frand(qg, (size_t)n * nq * 2 * D, 1.0f), frand(Kc, (size_t)max_T * kvdim, 1.0f), frand(Vc, (size_t)max_T * kvdim, 1.0f);
        float *dqg = up(c, qg, sizeof(float) * n * nq * 2 * D), *dK = up(c, Kc, sizeof(float) * max_T * kvdim),
              *dV = up(c, Vc, sizeof(float) * max_T * kvdim);
        float *dout = tsc_alloc(c, sizeof(float) * n * nq * D), *dout1 = tsc_alloc(c, sizeof(float) * n * nq * D);
        float *ws = tsc_alloc(c, tsc_attn_ws_bytes_np(n, nq, D, np_max));
        int32_t *dpos = tsc_alloc(c, sizeof(int32_t));
        tsc_write(c, dpos, &pos, sizeof(int32_t));
        tsc_attn_args A = {.n = n, .pos = devpos ? 0 : pos, .nq = nq, .nkv = nkv, .D = D, .rot = 64, .theta = 1e7f,
                           .eps = 1e-6f, .qg = dqg, .k = NULL, .v = NULL, .q_norm = NULL, .k_norm = NULL, .Kc = dK,
                           .Vc = dV, .max_T = max_T, .out = dout, .ws = ws, .pos_dev = devpos ? dpos : NULL,
                           .phase = 2, .np_max = np_max, .same_pos = 1};
        tsc_attn_decode(c, &A);
        for (int i = 0; i < n; i++) {
            tsc_attn_args B = A;
            B.n = 1, B.same_pos = 0, B.qg = dqg + (size_t)i * nq * 2 * D, B.out = dout1 + (size_t)i * nq * D;
            tsc_attn_decode(c, &B);
        }
        SYNC_OK(c);
        float *ga = down(c, dout, (size_t)n * nq * D), *gb = down(c, dout1, (size_t)n * nq * D);
        CHECK_MSG(!memcmp(ga, gb, sizeof(float) * n * nq * D), "same_pos rows at %d%s: differ from one-row calls (max %.3g)",
                  pos, devpos ? " (device position)" : "", ts_test_max_abs(ga, gb, (size_t)n * nq * D));
        fprintf(stderr, "  attn same_pos: %d rows at %d%s equal %d one-row calls bit for bit\n", n, pos,
                devpos ? " (device position)" : "", n);
        free(ga), free(gb), free(qg), free(Kc), free(Vc);
        tsc_free(c, dqg), tsc_free(c, dK), tsc_free(c, dV), tsc_free(c, dout), tsc_free(c, dout1), tsc_free(c, ws);
        tsc_free(c, dpos);
    }
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}

/* pieces sized by each row's length (np_max, the engine's form since session
 * 19): 8 pieces at most, so rows of 1001..1004 keys take pieces of 128 (4
 * sub-chunks); rows 255..258 straddle the step from 32 to 64 keys inside one
 * call (row-exact still: each row's pieces depend on its own length); a
 * device position; rows far below a long cache's end (the case the fixed
 * split made slow) */
TS_TEST(cuda, attn_pieces_by_row_length) {
    attn_case_on(16, 4, 1000, 4, 1100, 0, 0, 8);
    attn_case_on(8, 2, 254, 4, 4000, 0, 1, 8);
    attn_case_on(16, 4, 600, 3, 16384, 0, 1, 254);
    /* 157 pieces of 64 keys a row: more than the split's grid (2 blocks an SM
     * for the row's KV heads), so blocks walk several pieces */
    attn_case_on(16, 4, 10000, 2, 16384, 0, 1, 254);
    /* 282 pieces of 32 keys a row: more than the combine's R1 takes
     * (blockDim.x = D = 256), so its loop form walks them (s49-run1: passed) */
    attn_case_on(16, 4, 9000, 2, 16384, 0, 1, 1024);
}
TS_TEST(cuda, attn_long_split_parity_and_row_exact) { attn_case(16, 4, 1000, 4, 1100); }

/* ---- the block mask through the contract (DFlash's draft layers) ----
 * The attention op of backend.h with TS_MASK_BLOCK on the CUDA backend
 * (backend.cu's attn_block over attn.cu's kernels) against the same op of the
 * CPU backend (cpu/attn.c's attn_block_mask, the reference), both reached
 * only through their op tables, on the same fresh inputs: context rows that
 * only append their keys and values, block rows whose queries see the cached
 * context and the whole block (no causal mask inside it), ungated (the
 * drafter's Qwen3 layers) and gated. Tolerances: the cached keys and the
 * normed, rotated queries within 1e-5 of the CPU's (inputs of |x| <= 2,
 * norm weights around 1: RMSNorm in double on both, the RoPE angles in f32 on
 * the CPU and in double rounded once on the GPU; a few ulp); the values
 * appended bit for bit; the output, a convex combination of value rows with
 * |v| <= 1, within 2e-5 absolute (f32 softmax and sums in other orders: the
 * GPU's pieces against the CPU's one pass, ~1e-6 seen in the kernels' own
 * test). A wrong mask is far outside that: dropping the block's later rows,
 * or a causal mask inside the block, moves an output by ~1/T of the block's
 * weight, >= 1e-3 here. The cache rows before the context and after the
 * block stay as they were. */
typedef struct blk_case {
    int nq, nkv, D, rot, pos, n_kv, n, ctx, no_gate;
} blk_case;

static float *be_put(ts_backend *be, ts_stream *s, const float *h, size_t n) {
    float *d = be->ops->alloc(be, sizeof(float) * (n ? n : 1), TS_MEM_SCRATCH);
    if (d && n && h) be->ops->write(s, tv_f32(d, 1, (int64_t)n), h); /* h NULL: zeroed (alloc's) */
    return d;
}

/* Runs the case on one backend: copies of the host inputs in, the op, the
 * queries, caches and output back (caller frees). 0 or the stream's error. */
static int blk_run(ts_backend *be, ts_stream *s, const blk_case *c, const float *q, const float *k, const float *v,
                   const float *qn, const float *kn, const float *kc, const float *vc, float *q_out, float *kc_out,
                   float *vc_out, float *out, char *msg, size_t cap) {
    const int qw = c->no_gate ? c->D : 2 * c->D, kvd = c->nkv * c->D, nb = c->n - c->n_kv;
    const size_t nqv = (size_t)(nb > 0 ? nb : 1) * c->nq * qw, nkvv = (size_t)c->n * kvd, ncv = (size_t)c->ctx * kvd;
    float *dq = be_put(be, s, q, nqv), *dk = be_put(be, s, k, nkvv), *dv = be_put(be, s, v, nkvv);
    float *dqn = be_put(be, s, qn, (size_t)c->D), *dkn = be_put(be, s, kn, (size_t)c->D);
    float *dkc = be_put(be, s, kc, ncv), *dvc = be_put(be, s, vc, ncv);
    float *datt = be_put(be, s, NULL, (size_t)c->nq * c->ctx), *dout = be_put(be, s, NULL, (size_t)(nb > 0 ? nb : 1) * c->nq * c->D);
    int rc = TS_E_NOMEM;
    if (dq && dk && dv && dqn && dkn && dkc && dvc && datt && dout) {
        s->step.pos = c->pos; /* the op takes the position from the step record */
        ts_attn_args a = {dq, dk, dv, dqn, dkn, dkc, dvc, datt, c->ctx, 1, dout, c->n, c->nq, c->nkv, c->D, c->rot, 0,
                          1e6, 1e-6f, TS_MASK_BLOCK, c->n_kv, c->no_gate, c->ctx, NULL};
        be->ops->attn(s, TS_MODE_EXACT, &a);
        be->ops->read(s, q_out, tv_f32(dq, 1, (int64_t)nqv));
        be->ops->read(s, kc_out, tv_f32(dkc, 1, (int64_t)ncv));
        be->ops->read(s, vc_out, tv_f32(dvc, 1, (int64_t)ncv));
        if (nb > 0) be->ops->read(s, out, tv_f32(dout, 1, (int64_t)nb * c->nq * c->D));
        ts_error e = {0};
        rc = ts_be_sync(s, &e);
        if (rc) snprintf(msg, cap, "%.250s", e.msg);
    }
    float *all[] = {dq, dk, dv, dqn, dkn, dkc, dvc, datt, dout};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) be->ops->free(be, all[i]);
    return rc;
}

static void blk_check(ts_backend *gb, ts_stream *gs, ts_backend *cb, ts_stream *cs, const blk_case *c) {
    const int qw = c->no_gate ? c->D : 2 * c->D, kvd = c->nkv * c->D, nb = c->n - c->n_kv;
    const size_t nqv = (size_t)(nb > 0 ? nb : 1) * c->nq * qw, nkvv = (size_t)c->n * kvd, ncv = (size_t)c->ctx * kvd;
    const size_t nov = (size_t)(nb > 0 ? nb : 1) * c->nq * c->D;
    float *q = malloc(sizeof(float) * nqv), *k = malloc(sizeof(float) * nkvv), *v = malloc(sizeof(float) * nkvv);
    float *kc = calloc(ncv, sizeof(float)), *vc = calloc(ncv, sizeof(float)), qn[256], kn[256];
    frand(q, nqv, 2.0f), frand(k, nkvv, 2.0f), frand(v, nkvv, 1.0f);
    frand(kc, (size_t)c->pos * kvd, 1.0f), frand(vc, (size_t)c->pos * kvd, 1.0f); /* the context cached before */
    for (int d = 0; d < c->D; d++) qn[d] = 1.0f + 0.2f * fr(), kn[d] = 1.0f + 0.2f * fr();
    float *r[2][4];
    for (int b = 0; b < 2; b++) {
        r[b][0] = malloc(sizeof(float) * nqv), r[b][1] = malloc(sizeof(float) * ncv);
        r[b][2] = malloc(sizeof(float) * ncv), r[b][3] = calloc(nov, sizeof(float));
    }
    char msg[300] = "";
    const int rg = blk_run(gb, gs, c, q, k, v, qn, kn, kc, vc, r[0][0], r[0][1], r[0][2], r[0][3], msg, sizeof msg);
    CHECK_MSG(rg == 0, "CUDA block-mask attention: %s", msg);
    const int rcpu = blk_run(cb, cs, c, q, k, v, qn, kn, kc, vc, r[1][0], r[1][1], r[1][2], r[1][3], msg, sizeof msg);
    CHECK_MSG(rcpu == 0, "CPU block-mask attention: %s", msg);
    if (!rg && !rcpu) {
        const size_t p0 = (size_t)c->pos * kvd;
        const float dq_ = nb > 0 ? ts_test_max_abs(r[0][0], r[1][0], nqv) : 0;
        const float dk_ = ts_test_max_abs(r[0][1] + p0, r[1][1] + p0, nkvv);
        const float do_ = nb > 0 ? ts_test_max_abs(r[0][3], r[1][3], nov) : 0;
        fprintf(stderr, "  block mask nq %d nkv %d D %d %s: pos %d, %d context + %d block rows, cache %d: |q| %.2g |k| %.2g "
                "|out| %.2g\n", c->nq, c->nkv, c->D, c->no_gate ? "ungated" : "gated", c->pos, c->n_kv, nb, c->ctx, dq_,
                dk_, do_);
        CHECK_MSG(dq_ <= 1e-5f && dk_ <= 1e-5f, "queries / cached keys off by %.3g / %.3g", dq_, dk_);
        CHECK_MSG(do_ <= 2e-5f, "block attention output off by %.3g", do_);
        CHECK_MSG(!memcmp(r[0][2] + p0, v, sizeof(float) * nkvv), "values not appended as given");
        CHECK_MSG(!memcmp(r[0][1], kc, sizeof(float) * p0) && !memcmp(r[0][2], vc, sizeof(float) * p0),
                  "cache rows before the op's changed");
        const size_t end = (size_t)(c->pos + c->n) * kvd;
        CHECK_MSG(!memcmp(r[0][1] + end, kc + end, sizeof(float) * (ncv - end)), "cache rows past the block written");
    }
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 4; j++) free(r[b][j]);
    free(q), free(k), free(v), free(kc), free(vc);
}

TS_TEST(cuda, block_mask_attention_vs_cpu_backend) {
    seed_once();
    ts_backend_params bp = {0};
    bp.device = dev_index();
    ts_backend *gb = NULL, *cb = NULL;
    ts_stream *gs = NULL, *cs = NULL;
    ts_error err = {0};
    if (ts_cuda_backend_new(&bp, &gb, &err)) SKIP("no CUDA: %s", err.msg);
    CHECK_MSG(!ts_cpu_backend_new(NULL, &cb, &err), "%s", err.msg);
    CHECK(gb->ops->stream_new(gb, 16, 1024, 0, &gs) == 0 && cb->ops->stream_new(cb, 16, 1024, 0, &cs) == 0);
    /* the bundled drafter's heads (4/2 of 128, full RoPE), the fixtures'
     * random drafter's (4/2 of 32), a wide GQA shape (32/8 of 128, half
     * RoPE); blocks of 2..16 rows at the start, after a short and after a
     * long context (a cache of 1100 rows splits into many pieces; 64 rows
     * uses the stream's small area); context passes of 1 and 37 rows (more
     * than a block of the row ops); a mixed pass; gated */
    static const blk_case cases[] = {
        {4, 2, 128, 128, 0, 0, 2, 64, 1},     {4, 2, 128, 128, 5, 0, 4, 64, 1},    {4, 2, 128, 128, 40, 0, 16, 64, 1},
        {4, 2, 128, 128, 300, 0, 8, 1100, 1}, {4, 2, 128, 128, 1000, 0, 16, 1100, 1}, {4, 2, 32, 32, 17, 0, 16, 1100, 1},
        {4, 2, 32, 32, 700, 0, 2, 1100, 1},   {32, 8, 128, 64, 513, 0, 16, 1100, 1}, {4, 2, 128, 128, 100, 37, 37, 1100, 1},
        {4, 2, 128, 128, 63, 1, 1, 64, 1},    {4, 2, 128, 128, 200, 3, 11, 1100, 1}, {8, 2, 256, 64, 77, 0, 8, 300, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) blk_check(gb, gs, cb, cs, &cases[i]);
    gb->ops->stream_free(gs);
    cb->ops->stream_free(cs);
    ts_backend_free(gb);
    ts_backend_free(cb);
}

/* ---- MoE routing, argmax ---- */

TS_TEST(cuda, moe_route_exact) {
    OPEN(c);
    /* E, k, norm, rows, coarse: a warp per row, 8 rows a block, so row counts
     * that leave a block part empty, and the largest E and k the kernel
     * takes; E of every register width (1, 2, 4, 8, 16, 32 elements a lane;
     * 33: a partial second); coarse: logits on a grid of 0.5, so most rows
     * are full of ties. Both forms of the picks (tsc_set_route_net: the
     * sorting network where k and E / 32 are 16 or less, else the chain),
     * each against the CPU, and the two against each other bit for bit. */
    static const int cfg[][5] = {{256, 8, 1, 5, 0}, {64, 4, 0, 13, 0}, {512, 10, 1, 9, 0}, {1024, 32, 1, 17, 0},
                                 {33, 32, 0, 5, 0},  {20, 6, 1, 7, 0},  {128, 8, 1, 6, 0},  {256, 8, 1, 11, 1},
                                 {512, 16, 0, 9, 1}, {96, 1, 1, 9, 1},  {256, 16, 1, 6, 0}, {8, 8, 1, 9, 1}};
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        const int n = cfg[ci][3], E = cfg[ci][0], k = cfg[ci][1], norm = cfg[ci][2];
        float *l = malloc(sizeof(float) * n * E);
        frand(l, (size_t)n * E, 4.0f);
        if (cfg[ci][4])
            for (int e = 0; e < n * E; e++) l[e] = floorf(l[e] * 2.0f) * 0.5f;
        /* ties: the lower index must win, as in the CPU's scan */
        l[3 * E + 5 % E] = l[3 * E + 9 % E] = l[3 * E + 2 % E] = 9.0f;
        /* a NaN logit: every p is NaN, the picks the first indices not taken */
        l[4 * E + E / 2] = NAN;
        float *dl = up(c, l, sizeof(float) * n * E), *dw = tsc_alloc(c, sizeof(float) * n * k);
        int32_t *di = tsc_alloc(c, sizeof(int32_t) * n * k);
        /* the CPU backend's routing (moe.c), the reference, once for both
         * forms (it works on its row in place: after the upload) */
        int *sel = malloc(sizeof(int) * n * k);
        float *ws = malloc(sizeof(float) * n * k);
        for (int i = 0; i < n; i++) {
            ts_cpu_moe_route_row(l + (size_t)i * E, E, k, sel + (size_t)i * k, ws + (size_t)i * k);
            if (norm) ts_cpu_moe_route_norm(ws + (size_t)i * k, k);
        }
        int32_t *ids[2];
        float *w[2];
        for (int form = 0; form < 2; form++) {
            tsc_set_route_net(c, form);
            tsc_moe_route(c, dl, n, E, k, norm, di, dw);
            SYNC_OK(c);
            ids[form] = malloc(sizeof(int32_t) * n * k);
            tsc_read(c, ids[form], di, sizeof(int32_t) * n * k);
            w[form] = down(c, dw, (size_t)n * k);
            for (int i = 0; i < n; i++) {
                for (int j = 0; j < k; j++) {
                    const int32_t id = ids[form][i * k + j], sj = sel[i * k + j];
                    const float wj = w[form][i * k + j], ref = ws[i * k + j];
                    CHECK_MSG(id == sj, "E %d k %d form %d row %d pick %d: %d, CPU %d", E, k, form, i, j, id, sj);
                    /* expf differs from glibc's by <= 2 ulp; the double sum's order */
                    if (isnan(ref)) CHECK_MSG(isnan(wj), "form %d row %d weight %d: %.9g vs NaN", form, i, j, wj);
                    else CHECK_MSG(fabsf(wj - ref) <= 1e-6f * ref, "form %d row %d weight %d: %.9g vs %.9g", form, i, j, wj, ref);
                }
            }
        }
        for (int e = 0; e < n * k; e++) {
            uint32_t b0, b1;
            memcpy(&b0, &w[0][e], 4), memcpy(&b1, &w[1][e], 4);
            CHECK_MSG(ids[0][e] == ids[1][e] && (b0 == b1 || (isnan(w[0][e]) && isnan(w[1][e]))),
                      "E %d k %d pick %d: network %d %.9g, chain %d %.9g", E, k, e, ids[1][e], w[1][e], ids[0][e], w[0][e]);
        }
        tsc_set_route_net(c, 1);
        free(l), free(sel), free(ws), free(ids[0]), free(ids[1]), free(w[0]), free(w[1]);
        tsc_free(c, dl), tsc_free(c, dw), tsc_free(c, di);
    }
    tsc_close(c);
}

TS_TEST(cuda, argmax_exact) {
    OPEN(c);
    const int n = 4, V = 248320;
    float *x = malloc(sizeof(float) * n * V);
    frand(x, (size_t)n * V, 10.0f);
    x[0 * V + 12345] = 50.0f;                                /* one clear max */
    x[1 * V + 200000] = x[1 * V + 7] = x[1 * V + 100] = 60.0f; /* ties: the first */
    x[2 * V + V - 1] = 70.0f;                                /* the last element */
    for (int i = 1; i < V; i += 977) x[3 * V + i] = NAN;     /* NaN never wins */
    x[3 * V + 3] = 20.0f;
    float *dx = up(c, x, sizeof(float) * n * V);
    int32_t *di = tsc_alloc(c, sizeof(int32_t) * n);
    void *ws = tsc_alloc(c, tsc_argmax_ws_bytes(n));
    tsc_argmax(c, dx, n, V, di, ws);
    int32_t ids[4];
    tsc_read(c, ids, di, sizeof ids);
    SYNC_OK(c);
    for (int i = 0; i < n; i++) {
        int b = 0;
        for (int e = 1; e < V; e++)
            if (x[(size_t)i * V + e] > x[(size_t)i * V + b]) b = e;
        CHECK_MSG(ids[i] == b, "row %d: %d, CPU %d", i, ids[i], b);
    }
    CHECK(ids[1] == 7 && ids[2] == V - 1);
    free(x);
    tsc_close(c);
}

/* ---- sampling candidates: the backend's topn against the CPU's ----
 * Through the backend contract (cu_topn over tsc_topn), fresh random rows:
 * the N best (vals bit for bit, ids), the valid count exactly, the sum of
 * weights within a relative 1e-6 (CUDA's expf is within 2 ulp, summed in
 * another order). Rows: the real vocabulary (248,320), chunk edges (4095,
 * 4096, 4097), odd sizes (1, 7, 100003); values: wide random, heavy ties (a
 * grid of 16 values: most of the N best tie), NaN / -inf / +-0 sprinkled;
 * N from 1 to 256; penalties: none, 50 ids, the most a list holds. Two rows
 * at a stride per call (each row on its own). */
static void topn_row_fill(float *x, int V, int kind) {
    for (int i = 0; i < V; i++) {
        float u = fr();
        if (kind == 0) x[i] = u * 12.0f;
        else if (kind == 1) x[i] = floorf((u + 1.0f) * 8.0f) * 0.75f - 3.0f;
        else {
            x[i] = u * 5.0f;
            float w = fr();
            if (w < -0.96f) x[i] = NAN;
            else if (w < -0.92f) x[i] = -INFINITY;
            else if (w < -0.88f) x[i] = w < -0.9f ? -0.0f : 0.0f;
        }
    }
}

TS_TEST(cuda, topn_matches_cpu_op) {
    seed_once();
    ts_backend_params bp = {0};
    bp.device = dev_index();
    ts_backend *gb = NULL, *cb = NULL;
    ts_stream *gs = NULL, *cs = NULL;
    ts_error err = {0};
    if (ts_cuda_backend_new(&bp, &gb, &err)) SKIP("no CUDA: %s", err.msg);
    ts_backend_params cp = {0};
    CHECK(!ts_cpu_backend_new(&cp, &cb, &err));
    CHECK(!gb->ops->stream_new(gb, 16, 4096, 64, &gs) && !cb->ops->stream_new(cb, 16, 4096, 64, &cs));
    const int Vs[] = {248320, 1, 7, 4095, 4096, 4097, 100003}, Ns[] = {1, 20, 64, 100, 256}, pens[] = {0, 50, TS_TOPN_PEN_MAX};
    const int VMAX = 248320, LD = VMAX + 5;
    float *x = malloc(sizeof(float) * 2 * LD), *sub = malloc(sizeof(float) * TS_TOPN_PEN_MAX);
    int32_t *pid = malloc(sizeof(int32_t) * TS_TOPN_PEN_MAX);
    float *dx = gb->ops->alloc(gb, sizeof(float) * 2 * LD, TS_MEM_SCRATCH);
    CHECK(x && sub && pid && dx);
    float gv[2 * 256], cv[2 * 256];
    int32_t gi[2 * 256], ci[2 * 256], gn[2], cn[2];
    double gz[2], cz[2];
    int bad = 0, cases = 0, ties = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof *Vs; vi++)
        for (int kind = 0; kind < 3; kind++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
                for (size_t pi = 0; pi < 3; pi++) {
                    const int V = Vs[vi], N = Ns[ni];
                    if (V != VMAX && (ni % 2 || pi == 2)) continue; /* the odd sizes: fewer combinations */
                    int np = 0;
                    const int want = pens[pi] < V ? pens[pi] : V;
                    for (int i = 0; i < V && np < want; i++) /* distinct ascending ids, ~evenly spread */
                        if ((int64_t)(i + 1) * want / V > np) pid[np] = i, sub[np] = fr() * 4.0f, np++;
                    topn_row_fill(x, V, kind);
                    topn_row_fill(x + LD, V, (kind + 1) % 3);
                    gb->ops->write(gs, (ts_view){dx, TS_DTYPE_F32, 2, LD, LD}, x);
                    ts_topn_args a = {.N = N, .scale = kind ? 1.0f / 0.7f : 1.0f, .rep = np ? 1.3f : 1.0f, .n_pen = np,
                                      .pen_ids = pid, .pen_sub = sub};
                    a.vals = gv, a.ids = gi, a.n_valid = gn, a.sum_exp = gz;
                    gb->ops->topn(gs, (ts_view){dx, TS_DTYPE_F32, 2, V, LD}, V, &a);
                    int rc = ts_be_sync(gs, &err);
                    CHECK_MSG(!rc, "V %d N %d: %s", V, N, err.msg);
                    a.vals = cv, a.ids = ci, a.n_valid = cn, a.sum_exp = cz;
                    cb->ops->topn(cs, (ts_view){x, TS_DTYPE_F32, 2, V, LD}, V, &a);
                    for (int r = 0; r < 2; r++) {
                        cases++;
                        for (int j = 1; j < N; j++) ties += cv[r * N + j] == cv[r * N + j - 1];
                        const double tol = 1e-6 * cz[r];
                        if (memcmp(gv + r * N, cv + r * N, sizeof(float) * N) ||
                            memcmp(gi + r * N, ci + r * N, sizeof(int32_t) * N) || gn[r] != cn[r] ||
                            !(fabs(gz[r] - cz[r]) <= tol)) {
                            int j = 0;
                            while (j < N && gi[r * N + j] == ci[r * N + j] && gv[r * N + j] == cv[r * N + j]) j++;
                            if (++bad <= 4)
                                fprintf(stderr,
                                        "  V %d N %d kind %d pen %d row %d: first difference at %d (gpu %d %.9g, cpu %d "
                                        "%.9g), n_valid %d/%d, sum %.17g/%.17g\n",
                                        V, N, kind, np, r, j, j < N ? gi[r * N + j] : -2, j < N ? gv[r * N + j] : 0.0,
                                        j < N ? ci[r * N + j] : -2, j < N ? cv[r * N + j] : 0.0, gn[r], cn[r], gz[r], cz[r]);
                        }
                    }
                }
    fprintf(stderr, "  topn: %d rows, %d tied neighbours among the candidates\n", cases, ties);
    CHECK_MSG(bad == 0, "%d of %d rows differ from the CPU op", bad, cases);
    CHECK(ties > 1000); /* the tie order was exercised */
    gb->ops->free(gb, dx);
    free(x), free(sub), free(pid);
    gb->ops->stream_free(gs), cb->ops->stream_free(cs);
    ts_backend_free(gb), ts_backend_free(cb);
}

/* ---- a captured graph replays the same work ---- */

TS_TEST(cuda, graph_replay_same_bits) {
    OPEN(c);
    hw h;
    make_w(&h, TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, 300, 1024);
    tsc_weight hd = desc(&h.w), dw;
    ts_error e;
    CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0, "%s", e.msg);
    float x[1024];
    frand(x, 1024, 1.0f);
    float *dx = up(c, x, sizeof x), *dy = tsc_alloc(c, sizeof(float) * 300), *dy2 = tsc_alloc(c, sizeof(float) * 300);
    int32_t *di = tsc_alloc(c, 4);
    void *ws = tsc_alloc(c, tsc_argmax_ws_bytes(1));
    tsc_linear(c, (const tsc_weight *[]){&dw}, 1, dx, &dy, 1);
    tsc_graph_begin(c);
    tsc_linear(c, (const tsc_weight *[]){&dw}, 1, dx, &dy2, 1);
    tsc_argmax(c, dy2, 1, 300, di, ws);
    tsc_graph *g = tsc_graph_end(c);
    CHECK(g != NULL);
    tsc_graph_launch(c, g);
    tsc_graph_launch(c, g);
    SYNC_OK(c);
    float *y = down(c, dy, 300), *y2 = down(c, dy2, 300);
    int32_t id;
    tsc_read(c, &id, di, 4);
    CHECK(!memcmp(y, y2, sizeof(float) * 300));
    CHECK(id == ts_argmax(y, 300) || y[id] == y[ts_argmax(y, 300)]);
    tsc_graph_free(g);
    free(y), free(y2), free_hw(&h);
    tsc_close(c);
}

/* What the fused-staging tests (addnorm_plain_same_bits, fused_products_dp4a)
 * share: TSC_ROWS_MAX rows of fresh random inputs g, u and norm weights on
 * the device, x and the reference's copy, the normed rows (fused and
 * reference) and both weights' products (fused and reference). */
typedef struct {
    int64_t cols;
    float *g, *u, *nw, *x, *r, *n, *n2, *y, *z, *ry, *rz;
} fz_bufs;

static void fz_new(tsc_ctx *c, fz_bufs *d, int64_t rows0, int64_t rows1, int64_t cols) {
    const int N = TSC_ROWS_MAX;
    const size_t nx = (size_t)N * cols;
    float *g = malloc(sizeof(float) * nx), *u = malloc(sizeof(float) * nx), *nw = malloc(sizeof(float) * cols);
    frand(g, nx, 3.0f), frand(u, nx, 1.0f), frand(nw, cols, 1.0f);
    d->cols = cols;
    d->g = up(c, g, sizeof(float) * nx), d->u = up(c, u, sizeof(float) * nx), d->nw = up(c, nw, sizeof(float) * cols);
    d->x = tsc_alloc(c, sizeof(float) * nx), d->r = tsc_alloc(c, sizeof(float) * nx);
    d->n = tsc_alloc(c, sizeof(float) * nx), d->n2 = tsc_alloc(c, sizeof(float) * nx);
    d->y = tsc_alloc(c, sizeof(float) * N * rows0), d->z = tsc_alloc(c, sizeof(float) * N * rows1);
    d->ry = tsc_alloc(c, sizeof(float) * N * rows0), d->rz = tsc_alloc(c, sizeof(float) * N * rows1);
    free(g), free(u), free(nw);
}

static void fz_free(tsc_ctx *c, fz_bufs *d) {
    tsc_free(c, d->g), tsc_free(c, d->u), tsc_free(c, d->nw), tsc_free(c, d->x), tsc_free(c, d->r), tsc_free(c, d->n);
    tsc_free(c, d->n2), tsc_free(c, d->y), tsc_free(c, d->z), tsc_free(c, d->ry), tsc_free(c, d->rz);
}

/* One fused call of n rows through the two weights wl against the two
 * kernels it replaces, bit for bit: x (in place), both products, the
 * normed rows written beside (mode 0); the counter back at 0. Modes 0:
 * norm, x += add in place, the normed rows beside; 1: norm without add,
 * the normed rows over x; 2: norm with add, the normed rows over x; 3:
 * SwiGLU in place. what: the case, for the messages. A failure fails the
 * test (on a device error the context is closed): the caller returns
 * when ts_test_failed(). */
static void fz_case(tsc_ctx *c, const tsc_weight *const *wl, int n, int mode, const fz_bufs *d, unsigned *bar,
                    const char *what) {
    const int64_t cols = d->cols, rows = wl[0]->rows, rows1 = wl[1]->rows;
    const size_t m = (size_t)n * cols;
    const int add = mode != 1;
    float *yl[2] = {d->y, d->z}, *rl[2] = {d->ry, d->rz};
    /* the reference: the two kernels */
    tsc_copy(c, d->r, d->g, sizeof(float) * m);
    if (mode == 3) {
        tsc_silu_mul(c, d->r, d->u, m);
        tsc_linear(c, wl, 2, d->r, rl, n);
    } else {
        float *ny = mode == 0 ? d->n2 : d->r;
        tsc_add_rmsnorm(c, d->r, add ? d->u : NULL, d->nw, ny, n, (int)cols, 1e-6f);
        tsc_linear(c, wl, 2, ny, rl, n);
    }
    /* fused */
    tsc_copy(c, d->x, d->g, sizeof(float) * m);
    tsc_fill(c, d->n, NAN, m);
    tsc_set_barrier(c, bar);
    if (mode == 3) tsc_linear_swiglu_out(c, wl, 2, d->x, d->u, d->x, yl, n);
    else
        tsc_linear_addnorm(c, wl, 2, d->x, add ? d->u : NULL, d->nw, 1e-6f, add ? d->x : NULL, mode == 0 ? d->n : d->x, yl,
                           n);
    ts_error e_;
    if (tsc_sync(c, &e_)) {
        ts_test_fail(__FILE__, __LINE__, "device error: %s", e_.msg);
        tsc_close(c);
        return;
    }
    float *a = down(c, d->x, m), *b = down(c, d->r, m), *ya = down(c, d->y, (size_t)n * rows),
          *yb = down(c, d->ry, (size_t)n * rows), *za = down(c, d->z, (size_t)n * rows1), *zb = down(c, d->rz, (size_t)n * rows1);
    CHECK_MSG(!memcmp(a, b, sizeof(float) * m), "%s mode %d, %d rows: x (in place) differs", what, mode, n);
    CHECK_MSG(!memcmp(ya, yb, sizeof(float) * n * rows) && !memcmp(za, zb, sizeof(float) * n * rows1),
              "%s mode %d, %d rows: fused products != the two kernels'", what, mode, n);
    if (mode == 0) {
        float *na = down(c, d->n, m), *nb = down(c, d->n2, m);
        CHECK_MSG(!memcmp(na, nb, sizeof(float) * m), "%s, %d rows: the normed rows differ", what, n);
        free(na), free(nb);
    }
    unsigned cnt = 1;
    tsc_read(c, &cnt, bar, sizeof cnt);
    CHECK_MSG(cnt == 0, "the counter is %u after a fused launch", cnt);
    free(a), free(b), free(ya), free(yb), free(za), free(zb);
}

/* tsc_linear_addnorm through the plain kernel (a MoE layer's router stages
 * its input norm: backend.cu's fused_linear with plain): the products, x + add
 * written in place or beside, and the normed rows equal tsc_add_rmsnorm
 * then tsc_linear bit for bit, for bf16 / f32 / 8-bit weights (two in one
 * launch, as the router and the shared expert's gate row), the 35B-A3B's
 * 2048 columns and others up to the form's 4096, 1..16 rows (passes of 4,
 * each staging and writing its own rows), fresh random inputs each. The
 * counter is back at 0 after each call; 4128 columns are refused by the
 * form (tsc_linear_addnorm_plain_takes). Each case with the first step of
 * weights loaded before the PDL wait (the default) and after it (TSC_LIN_PRE=0). */
TS_TEST(cuda, addnorm_plain_same_bits) {
    OPEN(c);
    unsigned *bar = tsc_alloc(c, 256);
    const unsigned zero[64] = {0};
    tsc_write(c, bar, zero, sizeof zero);
    tsc_set_barrier(c, bar);
    static const struct { ts_dtype dt; int bits; int64_t rows, cols; } V[] = {
        {TS_DTYPE_BF16, 0, 256, 2048}, {TS_DTYPE_F32, 0, 130, 4096}, {TS_DTYPE_U32, 8, 77, 1056}, {TS_DTYPE_BF16, 0, 512, 64}};
    for (size_t v = 0; v < sizeof V / sizeof V[0]; v++) {
        const int64_t rows = V[v].rows, cols = V[v].cols;
        hw h, h2;
        make_w(&h, V[v].dt, V[v].bits, 32, TS_DTYPE_F32, rows, cols);
        make_w(&h2, V[v].dt, V[v].bits, 32, TS_DTYPE_F32, 1, cols);
        tsc_weight hd = desc(&h.w), dw, hd2 = desc(&h2.w), dw2;
        ts_error e;
        CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0 && tsc_weight_upload(c, &hd2, &dw2, &e) == 0, "%s", e.msg);
        if (ts_test_failed()) return;
        const tsc_weight *wl[2] = {&dw, &dw2};
        fz_bufs d;
        fz_new(c, &d, rows, 1, cols);
        CHECK(tsc_linear_addnorm_plain_takes(&dw, d.g, d.u, d.nw));
        CHECK(!tsc_linear_addnorm_plain_takes(&dw, d.g + 1, d.u, d.nw)); /* a row not 16-byte aligned */
        static const int ns[] = {1, 3, 4, 5, 16};
        char what[48];
        char *keep_pre = ts_env_push("TSC_LIN_PRE", NULL);
        for (int pre = 0; pre < 2 && !ts_test_failed(); pre++) {
            setenv("TSC_LIN_PRE", pre ? "1" : "0", 1);
            snprintf(what, sizeof what, "weights %zu%s", v, pre ? ", TSC_LIN_PRE=1" : "");
            for (int k = 0; k < 5 && !ts_test_failed(); k++)
                for (int mode = 0; mode < 3 && !ts_test_failed(); mode++) fz_case(c, wl, ns[k], mode, &d, bar, what);
        }
        ts_env_pop("TSC_LIN_PRE", keep_pre);
        if (ts_test_failed()) return;
        fz_free(c, &d);
        tsc_weight_free(c, &dw), tsc_weight_free(c, &dw2);
        free_hw(&h), free_hw(&h2);
    }
    /* past the form's columns: not taken (the router then keeps the norm kernel) */
    hw h;
    make_w(&h, TS_DTYPE_BF16, 0, 32, TS_DTYPE_F32, 8, 4128);
    tsc_weight hd = desc(&h.w), dw;
    ts_error e;
    CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0, "%s", e.msg);
    float *dx = tsc_alloc(c, sizeof(float) * 4128);
    CHECK(!tsc_linear_addnorm_plain_takes(&dw, dx, dx, dx));
    tsc_free(c, dx);
    tsc_weight_free(c, &dw);
    free_hw(&h);
    tsc_free(c, bar);
    tsc_close(c);
}

/* ---- dp4a: the fused norm and SwiGLU products (q4dp.cu) ----
 * The products of a 4-bit MLX weight with the activation staged: bit for bit
 * the two kernels they replace (tsc_add_rmsnorm or tsc_silu_mul, then
 * tsc_linear) in every output, with the outputs aliasing x as the engine
 * uses them (x += add in place, the normed row written over x or beside it,
 * g = silu(g) * u in place); 1, 3, 5 and 16 rows; two weights a launch; the
 * counter back at 0 after every launch; no counter: a clear error. Each
 * case with x's digits made in every block and made once (tsc_set_digits;
 * which passes take them: SwiGLU ones and those of several rows, or the
 * modes TSC_Q4DP_DIG forces, so the GPU script runs this test again with
 * TSC_Q4DP_DIG=7: the one-row norm and plain passes too). */
TS_TEST(cuda, fused_products_dp4a) {
    OPEN(c);
    unsigned *bar = tsc_alloc(c, 256);
    const unsigned zero[64] = {0};
    tsc_write(c, bar, zero, sizeof zero);
    void *dgs = tsc_alloc(c, tsc_digits_ws_bytes());
    for (int vv = 0; vv < 16; vv++) {
        /* v: the shape; kind 0: 24-bit x (k_q4dp), 1: 8-bit x on k_q4mm, 2:
         * 8-bit x in the group numerics (k_q4g, k_q4gm), 3: 8-bit x on
         * k_q4dp (the engine's default); vv >= 8: digits once */
        tsc_set_digits(c, vv >= 8 ? dgs : NULL, tsc_digits_ws_bytes());
        const int v = vv & 1, kind = (vv >> 1) % 4;
        const int64_t rows = v ? 130 : 300, cols = v ? 12288 : 4096;
        hw h, h2;
        make_w(&h, TS_DTYPE_U32, 4, v ? 32 : 64, v ? TS_DTYPE_F16 : TS_DTYPE_BF16, rows, cols);
        make_w(&h2, TS_DTYPE_U32, 4, v ? 32 : 64, v ? TS_DTYPE_F16 : TS_DTYPE_BF16, 40, cols);
        tsc_weight hd = desc(&h.w), dw, hd2 = desc(&h2.w), dw2;
        hd.act_digits = hd2.act_digits = kind ? 1 : 0;
        if (kind == 1) setenv("TSC_Q4MM", "1", 1); /* k_q4mm is opt-in (q4dp.cu) */
        if (kind == 2) setenv("TSC_Q4G", "1", 1);  /* and the group numerics */
        ts_error e;
        setenv("TSC_Q4T", "0", 1);
        CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0 && tsc_weight_upload(c, &hd2, &dw2, &e) == 0, "%s", e.msg);
        unsetenv("TSC_Q4T");
        CHECK(dw.layout == TSC_LAYOUT_MLX);
        const tsc_weight *wl[2] = {&dw, &dw2};
        fz_bufs d;
        fz_new(c, &d, rows, 40, cols);
        static const int ns[] = {1, 3, 5, 16};
        char what[32];
        snprintf(what, sizeof what, "variant %d", vv);
        for (int k = 0; k < 4; k++)
            for (int mode = 0; mode < 4; mode++) {
                fz_case(c, wl, ns[k], mode, &d, bar, what);
                if (ts_test_failed()) return;
            }
        fz_free(c, &d);
        unsetenv("TSC_Q4MM");
        unsetenv("TSC_Q4G");
        tsc_weight_free(c, &dw), tsc_weight_free(c, &dw2);
        free_hw(&h), free_hw(&h2);
    }
    /* no counter set: the fused call is refused, naming what is missing */
    tsc_free(c, bar), tsc_free(c, dgs);
    tsc_close(c);
    ts_error e;
    CHECK(tsc_open(dev_index(), &c, &e) == 0);
    hw h;
    make_w(&h, TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, 16, 1024);
    tsc_weight hd = desc(&h.w), dw;
    setenv("TSC_Q4T", "0", 1);
    CHECK(tsc_weight_upload(c, &hd, &dw, &e) == 0);
    unsetenv("TSC_Q4T");
    float *d = tsc_alloc(c, sizeof(float) * 1024), *y = tsc_alloc(c, sizeof(float) * 16);
    tsc_fill(c, d, 1.0f, 1024);
    tsc_linear_swiglu_out(c, (const tsc_weight *[]){&dw}, 1, d, d, d, &y, 1);
    CHECK(tsc_sync(c, &e) == TS_E_ARG && strstr(e.msg, "tsc_set_barrier"));
    tsc_close(c);
    free_hw(&h);
}

/* ---- Q4T: fused products, MoE expert products ---- */

/* The fused products (Q4T only): SwiGLU staged = silu_mul then the product,
 * bit for bit; add+RMSNorm staged = the product of u_out, bit for bit, with
 * x_out = x + add exactly and u_out within the norm's tolerance; each row of
 * a 16-row call = a one-row call. Two Q4T variants (g64 bf16, g32 f16). */
TS_TEST(cuda, fused_products_q4t) {
    OPEN(c);
    const int N = TSC_ROWS_MAX;
    for (int v = 0; v < 2; v++) {
        const int64_t rows = v ? 130 : 200, cols = v ? 2560 : 1024;
        hw h;
        make_w(&h, TS_DTYPE_U32, 4, v ? 32 : 64, v ? TS_DTYPE_F16 : TS_DTYPE_BF16, rows, cols);
        tsc_weight hd = desc(&h.w), dw;
        ts_error e;
        CHECK_MSG(tsc_weight_upload(c, &hd, &dw, &e) == 0, "%s", e.msg);
        CHECK(dw.layout == TSC_LAYOUT_Q4T && tsc_weight_bytes(&dw) == tsc_weight_dev_bytes(&hd));
        const size_t nx = (size_t)N * cols, ny = (size_t)N * rows;
        float *g = malloc(sizeof(float) * nx), *u = malloc(sizeof(float) * nx), *nw = malloc(sizeof(float) * cols);
        frand(g, nx, 3.0f), frand(u, nx, 1.0f), frand(nw, cols, 1.0f);
        float *dg = up(c, g, sizeof(float) * nx), *du = up(c, u, sizeof(float) * nx), *dnw = up(c, nw, sizeof(float) * cols);
        float *dt = tsc_alloc(c, sizeof(float) * nx), *dxo = tsc_alloc(c, sizeof(float) * nx), *duo = tsc_alloc(c, sizeof(float) * nx);
        float *dy = tsc_alloc(c, sizeof(float) * ny), *dy1 = tsc_alloc(c, sizeof(float) * ny), *dy2 = tsc_alloc(c, sizeof(float) * ny);
        const tsc_weight *wl[1] = {&dw};
        /* swiglu: fused 16 rows, fused one row at a time, unfused */
        tsc_linear_swiglu(c, wl, 1, dg, du, &dy, N);
        for (int i = 0; i < N; i++) {
            float *yi = dy1 + (size_t)i * rows;
            tsc_linear_swiglu(c, wl, 1, dg + (size_t)i * cols, du + (size_t)i * cols, &yi, 1);
        }
        tsc_copy(c, dt, dg, sizeof(float) * nx);
        tsc_silu_mul(c, dt, du, nx);
        tsc_linear(c, wl, 1, dt, &dy2, N);
        SYNC_OK(c);
        float *y = down(c, dy, ny), *y1 = down(c, dy1, ny), *y2 = down(c, dy2, ny);
        CHECK_MSG(!memcmp(y, y1, sizeof(float) * ny), "swiglu: 16-row call != 16 one-row calls (variant %d)", v);
        CHECK_MSG(!memcmp(y, y2, sizeof(float) * ny), "swiglu: fused != silu_mul + product (variant %d)", v);
        free(y), free(y1), free(y2);
        /* addnorm: x = g, add = u */
        tsc_fill(c, dxo, NAN, nx), tsc_fill(c, duo, NAN, nx);
        tsc_linear_addnorm(c, wl, 1, dg, du, dnw, 1e-6f, dxo, duo, &dy, N);
        for (int i = 0; i < N; i++) {
            float *yi = dy1 + (size_t)i * rows;
            tsc_linear_addnorm(c, wl, 1, dg + (size_t)i * cols, du + (size_t)i * cols, dnw, 1e-6f, dt + (size_t)i * cols,
                               NULL, &yi, 1);
        }
        tsc_linear(c, wl, 1, duo, &dy2, N);
        SYNC_OK(c);
        y = down(c, dy, ny), y1 = down(c, dy1, ny), y2 = down(c, dy2, ny);
        float *xo = down(c, dxo, nx), *uo = down(c, duo, nx), *xr = malloc(sizeof(float) * nx), *ur = malloc(sizeof(float) * nx);
        memcpy(xr, g, sizeof(float) * nx);
        ref_add_rmsnorm(xr, u, nw, ur, N, (int)cols, 1e-6f);
        CHECK_MSG(!memcmp(xo, xr, sizeof(float) * nx), "addnorm: x_out != x + add (variant %d)", v);
        const float ru = max_rel(uo, ur, nx, 1e-6f);
        CHECK_MSG(ru <= 3e-7f, "addnorm: u_out rel %.3g (variant %d)", ru, v);
        CHECK_MSG(!memcmp(y, y1, sizeof(float) * ny), "addnorm: 16-row call != 16 one-row calls (variant %d)", v);
        CHECK_MSG(!memcmp(y, y2, sizeof(float) * ny), "addnorm: fused != product of u_out (variant %d)", v);
        float *ref = malloc(sizeof(float) * ny);
        ts_linear_ref(&h.w, ur, ref, N);
        const float err = prod_err(&h.w, ur, y, ref, N);
        CHECK_MSG(err <= LIN_TOL, "addnorm product off by %.3g of sum m|x| (variant %d)", err, v);
        fprintf(stderr, "  fused q4t v%d  addnorm product worst %.2g of sum m|x|\n", v, err);
        /* a bad call: add given, x_out aliasing x */
        tsc_linear_addnorm(c, wl, 1, dg, du, dnw, 1e-6f, dg, NULL, &dy, 1);
        CHECK(tsc_sync(c, &e) == TS_E_ARG && strstr(e.msg, "x_out"));
        tsc_close(c);
        ts_error e2;
        CHECK(tsc_open(dev_index(), &c, &e2) == 0);
        free(y), free(y1), free(y2), free(xo), free(uo), free(xr), free(ur), free(ref), free(g), free(u), free(nw);
        free_hw(&h);
    }
    tsc_close(c);
}

/* MoE expert products by device ids vs the CPU reference on each selected
 * expert; an id out of range gives zeros; n rows = n one-row calls. */
TS_TEST(cuda, moe_linear_parity_and_row_exact) {
    OPEN(c);
    enum { E = 6, K = 2, NR = 3 };
    const int64_t rows = 96, cols = 1024;
    hw h[2][E];
    tsc_weight dw[2][E];
    ts_error e;
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < E; j++) {
            make_w(&h[t][j], TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, rows, cols);
            tsc_weight hd = desc(&h[t][j].w);
            CHECK_MSG(tsc_weight_upload(c, &hd, &dw[t][j], &e) == 0, "%s", e.msg);
        }
    int32_t ids[NR * K] = {(int32_t)(fr() * 2.9f + 3), 1, 5, -1 /* zeros */, 0, (int32_t)(fr() * 2.9f + 3)};
    const size_t nx = (size_t)NR * K * cols;
    float *x = malloc(sizeof(float) * nx), *u = malloc(sizeof(float) * nx);
    frand(x, nx, 2.0f), frand(u, nx, 1.0f);
    int32_t *did = up(c, ids, sizeof ids);
    float *dx = up(c, x, sizeof(float) * nx), *du = up(c, u, sizeof(float) * nx);
    const size_t ny = (size_t)NR * K * rows;
    float *dy[2] = {tsc_alloc(c, sizeof(float) * ny), tsc_alloc(c, sizeof(float) * ny)};
    float *dy1[2] = {tsc_alloc(c, sizeof(float) * ny), tsc_alloc(c, sizeof(float) * ny)};
    const tsc_weight *tab[2] = {dw[0], dw[1]};
    for (int mode = 0; mode < 2; mode++) {
        /* mode 0: gate+up over x rows (x shared by a row's slots); 1: down over silu(x) * u per slot */
        tsc_moe_linear(c, tab, mode ? 1 : 2, E, did, NR, K, dx, mode ? du : NULL, mode, dy);
        for (int i = 0; i < NR; i++) {
            float *yi[2] = {dy1[0] + (size_t)i * K * rows, dy1[1] + (size_t)i * K * rows};
            const size_t xo = (size_t)i * (mode ? K : 1) * cols;
            tsc_moe_linear(c, tab, mode ? 1 : 2, E, did + i * K, 1, K, dx + xo, mode ? du + xo : NULL, mode, yi);
        }
        SYNC_OK(c);
        for (int t = 0; t < (mode ? 1 : 2); t++) {
            float *y = down(c, dy[t], ny), *y1 = down(c, dy1[t], ny);
            CHECK_MSG(!memcmp(y, y1, sizeof(float) * ny), "moe mode %d table %d: 3-row call != one-row calls", mode, t);
            float worst = 0;
            for (int s = 0; s < NR * K; s++) {
                const float *xs = x + (size_t)(mode ? s : s / K) * cols;
                float *xin = malloc(sizeof(float) * cols), *ref = malloc(sizeof(float) * rows);
                for (int64_t k = 0; k < cols; k++) xin[k] = mode ? silu_ref(xs[k]) * u[(size_t)s * cols + k] : xs[k];
                if (ids[s] < 0) {
                    for (int64_t r = 0; r < rows; r++) CHECK(y[(size_t)s * rows + r] == 0.f);
                } else {
                    ts_linear_ref(&h[t][ids[s]].w, xin, ref, 1);
                    const float err = prod_err(&h[t][ids[s]].w, xin, y + (size_t)s * rows, ref, 1);
                    if (!(err <= worst)) worst = err;
                }
                free(xin), free(ref);
            }
            CHECK_MSG(worst <= LIN_TOL, "moe mode %d table %d: off by %.3g of sum m|x|", mode, t, worst);
            fprintf(stderr, "  moe mode %d table %d worst %.2g of sum m|x|\n", mode, t, worst);
            free(y), free(y1);
        }
    }
    free(x), free(u);
    for (int t = 0; t < 2; t++) {
        tsc_free(c, dy[t]), tsc_free(c, dy1[t]);
        for (int j = 0; j < E; j++) tsc_weight_free(c, &dw[t][j]), free_hw(&h[t][j]);
    }
    tsc_free(c, did), tsc_free(c, dx), tsc_free(c, du);
    CHECK(tsc_mem_used(c) == 0);
    tsc_close(c);
}
