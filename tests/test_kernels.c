/* test_kernels.c: every fast CPU kernel against the reference (linear_ref.c).
 *
 * For each dtype (F32, BF16, F16, INT4 and INT8 at groups 32/64/128, scales
 * in bf16 and f32) and each mode the CPU supports (generic, avx512), and both
 * entry points (ts_linear, ts_linear_prefill):
 * - parity with ts_linear_ref: |y - y_ref| <= tol * sum_c |w_rc x_c| (an
 *   error bound relative to the magnitude of the products, so it does not
 *   depend on cancellation). tol: 1e-6 for generic (same arithmetic), 1e-5
 *   for the int16-activation VNNI decode path (x carries 2^-16 of its group's
 *   max), 1e-5 for f32 FMA paths;
 *   the opt-in avx512-q8 mode (int8 activations) is held to 3e-2 (the test x
 *   has 8x outliers, so a group max is ~8x a typical element);
 * - row-exactness of ts_linear: n rows at once equal n one-row calls, bit
 *   for bit, for n = 1..9 and row counts that split unevenly over threads.
 */
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "quant/quant.h"
#include "ts_test.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float fr(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

typedef struct { ts_weight w; void *d, *s, *b, *p; } wbox;

static void make_w(wbox *o, ts_dtype dt, int bits, int group, ts_dtype sdt, int64_t rows, int64_t cols) {
    memset(o, 0, sizeof *o);
    o->w.rows = rows; o->w.cols = cols;
    float *row = malloc(sizeof(float) * cols);
    if (dt == TS_DTYPE_U32) {
        o->d = malloc((size_t)rows * cols * bits / 8);
        o->s = malloc((size_t)rows * (cols / group) * 4);
        o->b = malloc((size_t)rows * (cols / group) * 4);
        size_t es = ts_dtype_size(sdt);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < cols; c++) row[c] = fr() * 0.05f;
            ts_quant_row(row, cols, bits, group, sdt, (uint32_t *)o->d + r * (cols * bits / 32),
                         (char *)o->s + r * (cols / group) * es, (char *)o->b + r * (cols / group) * es);
        }
        o->w.dtype = TS_DTYPE_U32; o->w.bits = bits; o->w.group = group; o->w.sdtype = sdt;
        o->w.scales = o->s; o->w.biases = o->b;
    } else {
        o->d = malloc((size_t)rows * cols * ts_dtype_size(dt));
        for (int64_t i = 0; i < rows * cols; i++) ts_quant_sset(dt, o->d, i, fr() * 0.05f);
        o->w.dtype = dt;
    }
    o->w.data = o->d;
    free(row);
}

static void free_w(wbox *o) { free(o->d); free(o->s); free(o->b); free(o->p); }

/* Repack for the current mode (cpu/pack.c); 0 when the mode has no packing. */
static int pack_w(wbox *o) {
    size_t sz = ts_weight_pack_size(o->w.rows, o->w.cols, o->w.bits, o->w.group, o->w.sdtype);
    if (!sz) return 0;
    o->p = malloc(sz);
    ts_weight_pack(&o->w, o->p);
    return 1;
}

/* The largest |y - yr| over the n x rows, each relative to sum_c |w_rc x_c|
 * (the parity measure the file's header describes). */
static float worst_rel_err(const ts_weight *w, const float *x, const float *y, const float *yr, int n) {
    const int64_t rows = w->rows, cols = w->cols;
    float *row = malloc(sizeof(float) * cols), worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        ts_weight_row(w, r, row);
        for (int i = 0; i < n; i++) {
            double mag = 0;
            for (int64_t c = 0; c < cols; c++) mag += fabs((double)row[c] * x[i * cols + c]);
            float e = fabsf(y[i * rows + r] - yr[i * rows + r]) / (float)(mag + 1e-30);
            if (!(e <= worst)) worst = e;
        }
    }
    free(row);
    return worst;
}

/* Run the AMX tests only where AMX exists: 1 with avx512 selected, or 0
 * (skipped, mode restored). */
static int amx_or_skip(const char *orig) {
    if (ts_kernels_select("avx512") == 0 && ts_amx_available() && ts_pack_enabled()) return 1;
    fprintf(stderr, "  (AMX not available here: skipped)\n");
    ts_kernels_select(orig);
    return 0;
}

static int check_one(const ts_weight *w, int n, float tol, const char *what) {
    const int64_t rows = w->rows, cols = w->cols;
    float *x = malloc(sizeof(float) * n * cols), *y = malloc(sizeof(float) * n * rows);
    float *yr = malloc(sizeof(float) * n * rows), *y1 = malloc(sizeof(float) * rows);
    for (int64_t i = 0; i < n * cols; i++) x[i] = fr() * (i % 97 == 0 ? 8.0f : 1.0f);
    ts_linear_ref(w, x, yr, n);
    int fails = 0;
    for (int pf = 0; pf < 2 && !fails; pf++) {
        (pf ? ts_linear_prefill : ts_linear)(w, x, y, n);
        float worst = worst_rel_err(w, x, y, yr, n);
        if (!(worst <= tol)) {
            ts_test_fail(__FILE__, __LINE__, "%s %s n=%d: relative error %g > %g", what, pf ? "prefill" : "linear", n, worst, tol);
            fails++;
        }
        if (!pf) /* row-exact: each row as a one-row call */
            for (int i = 0; i < n && !fails; i++) {
                ts_linear(w, x + i * cols, y1, 1);
                if (memcmp(y1, y + i * rows, sizeof(float) * rows)) {
                    ts_test_fail(__FILE__, __LINE__, "%s: ts_linear row %d of %d differs from a one-row call", what, i, n);
                    fails++;
                }
            }
    }
    free(x); free(y); free(yr); free(y1);
    return fails;
}

TS_TEST(kernels, parity_and_row_exact) {
    const char *modes[] = {"generic", "avx2", "avx512", "avx512-q8"};
    const char *orig = ts_kernels_name();
    for (int mi = 0; mi < 4; mi++) {
        if (ts_kernels_select(modes[mi]) != 0) { fprintf(stderr, "  (mode %s not supported here)\n", modes[mi]); continue; }
        struct { ts_dtype dt; int bits, group; ts_dtype sdt; float tol; } cases[] = {
            {TS_DTYPE_F32, 0, 0, 0, 1e-5f}, {TS_DTYPE_BF16, 0, 0, 0, 1e-5f}, {TS_DTYPE_F16, 0, 0, 0, 1e-5f},
            {TS_DTYPE_U32, 4, 64, TS_DTYPE_BF16, 1e-5f}, {TS_DTYPE_U32, 4, 128, TS_DTYPE_F32, 1e-5f},
            {TS_DTYPE_U32, 4, 32, TS_DTYPE_BF16, 1e-5f}, {TS_DTYPE_U32, 8, 64, TS_DTYPE_BF16, 1e-5f},
            {TS_DTYPE_U32, 8, 128, TS_DTYPE_F16, 1e-5f}, {TS_DTYPE_U32, 4, 16, TS_DTYPE_BF16, 1e-5f},
        };
        int64_t shapes[][2] = {{37, 256}, {300, 1024}, {1000, 384}};
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
            for (int si = 0; si < 3; si++) {
                if (cases[ci].dt != TS_DTYPE_U32 && si == 2) continue;
                wbox b;
                make_w(&b, cases[ci].dt, cases[ci].bits, cases[ci].group, cases[ci].sdt, shapes[si][0], shapes[si][1]);
                char what[128];
                snprintf(what, sizeof what, "%s %s%d g%d [%lld, %lld]", modes[mi], ts_dtype_name(cases[ci].dt), cases[ci].bits,
                         cases[ci].group, (long long)shapes[si][0], (long long)shapes[si][1]);
                float tol = mi == 0 ? 1e-6f : cases[ci].tol;
                /* int8 activations: each x within 2^-8 of its group's max */
                if (mi == 3 && cases[ci].dt == TS_DTYPE_U32 && cases[ci].bits == 4 && cases[ci].group >= 64) tol = 3e-2f;
                int bad = 0;
                for (int n = 1; n <= 9 && !bad; n += (n < 5 ? 1 : 4)) bad = check_one(&b.w, n, tol, what);
                /* the same weight repacked (P16, activations in three int8 digits: 2^-23) */
                if (!bad && cases[ci].dt == TS_DTYPE_U32 && pack_w(&b)) {
                    strncat(what, " packed", sizeof what - strlen(what) - 1);
                    for (int64_t r = 0; r < b.w.rows && !bad; r++)
                        for (int64_t c = 0; c < b.w.cols && !bad; c++)
                            if (ts_packed_get(&b.w, r, c) != ts_weight_get(&b.w, r, c)) {
                                ts_test_fail(__FILE__, __LINE__, "%s: element (%lld, %lld) %g != %g", what, (long long)r,
                                             (long long)c, ts_packed_get(&b.w, r, c), ts_weight_get(&b.w, r, c));
                                bad = 1;
                            }
                    for (int n = 1; n <= 9 && !bad; n += (n < 5 ? 1 : 4)) bad = check_one(&b.w, n, 2e-6f, what);
                    /* the lower activation precisions (--act-bits 16 and 8):
                     * x within 2^-16 / 2^-8 of its group's max (the test x
                     * has 8x outliers), rows still exact */
                    const float dtol[] = {0, 3e-2f, 3e-4f};
                    for (int d = 2; d >= 1 && !bad; d--) {
                        b.w.act_digits = d;
                        char wd[160];
                        snprintf(wd, sizeof wd, "%s, %d-bit activations", what, 8 * d);
                        for (int n = 1; n <= 9 && !bad; n += (n < 5 ? 1 : 4)) bad = check_one(&b.w, n, dtol[d], wd);
                    }
                }
                free_w(&b);
                if (bad) { ts_kernels_select(orig); return; }
            }
    }
    ts_kernels_select(orig);
}

/* The AMX kernel (linear_p16_amx.c) gives the VNNI kernel's bits exactly:
 * INT4/INT8, groups 16 to 256, bf16/f16/f32 scales, 1 to 16 x rows (tiles
 * of 5 and the shifted last tile), every activation precision (3, 2 and 1
 * digits) and drafting (one digit) products, and a fused region of several
 * weights. Decode may run on one kernel and
 * verify on the other, so anything short of memcmp equality would break
 * speculative decoding's bit-identity. Skipped where AMX is not available. */
TS_TEST(kernels, amx_matches_vnni) {
    const char *orig = ts_kernels_name();
    if (!amx_or_skip(orig)) return;
    struct { int bits, group; ts_dtype sdt; int64_t rows, cols; } cases[] = {
        {4, 64, TS_DTYPE_BF16, 300, 1024}, {4, 128, TS_DTYPE_F32, 37, 256}, {4, 32, TS_DTYPE_F16, 64, 96},
        {4, 16, TS_DTYPE_BF16, 33, 48},    {8, 64, TS_DTYPE_BF16, 100, 320}, {8, 256, TS_DTYPE_F32, 17, 512},
        {8, 32, TS_DTYPE_BF16, 50, 64},    {4, 256, TS_DTYPE_BF16, 20, 768},
    };
    const int ns[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 16};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        wbox b[2];
        for (int k = 0; k < 2; k++) {
            make_w(&b[k], TS_DTYPE_U32, cases[ci].bits, cases[ci].group, cases[ci].sdt, cases[ci].rows + 16 * k,
                   cases[ci].cols);
            CHECK(pack_w(&b[k]));
        }
        const int64_t cols = cases[ci].cols, rows = cases[ci].rows;
        float *x = malloc(sizeof(float) * 16 * cols);
        for (int64_t i = 0; i < 16 * cols; i++) x[i] = fr() * (i % 53 == 0 ? 30.0f : 1.0f);
        size_t ny = (size_t)16 * (rows + 16);
        float *y[2][2];
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 2; k++) y[a][k] = calloc(ny, sizeof(float));
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0] * 3; ni++)
            for (int mode = 0; mode < 3; mode++) { /* ts_linear, ts_linear_draft, ts_linear_many */
                int n = ns[ni % (sizeof ns / sizeof ns[0])], nd = 3 - (int)(ni / (sizeof ns / sizeof ns[0]));
                b[0].w.act_digits = b[1].w.act_digits = nd;
                for (int a = 0; a < 2; a++) { /* a = 0: VNNI, 1: AMX */
                    ts_amx_min_rows(a ? 1 : 1000);
                    const ts_weight *wl[2] = {&b[0].w, &b[1].w};
                    for (int k = 0; k < 2; k++) memset(y[a][k], 0xAB, ny * sizeof(float));
                    if (mode == 0) ts_linear(wl[0], x, y[a][0], n);
                    else if (mode == 1) ts_linear_draft(wl[0], x, y[a][0], n);
                    else ts_linear_many(wl, 2, x, y[a], n, 0);
                }
                for (int k = 0; k < (mode == 2 ? 2 : 1); k++) {
                    size_t cnt = (size_t)n * (size_t)(rows + 16 * k);
                    if (memcmp(y[0][k], y[1][k], cnt * sizeof(float))) {
                        size_t e = 0;
                        while (e < cnt && !memcmp(&y[0][k][e], &y[1][k][e], sizeof(float))) e++;
                        ts_test_fail(__FILE__, __LINE__, "INT%d g%d [%lld, %lld] n=%d digits %d mode %d: AMX %g != VNNI %g at %zu",
                                     cases[ci].bits, cases[ci].group, (long long)rows, (long long)cols, n, nd, mode,
                                     y[1][k][e], y[0][k][e], e);
                        ni = sizeof ns / sizeof ns[0] * 3 - 1;
                        mode = 3;
                        break;
                    }
                }
            }
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 2; k++) free(y[a][k]);
        free(x);
        free_w(&b[0]);
        free_w(&b[1]);
    }
    ts_amx_min_rows(-1);
    ts_kernels_select(orig);
}

/* The AMX passes (two x tiles by two row blocks) compute each row the same
 * way whatever the pairing: a fused region (whose chunks split and pair the
 * blocks differently) equals separate products, bit for bit; and a prompt
 * chunk is within 2e-6 (relative to sum |w x|) of ts_linear (the same
 * arithmetic since both kernels share p16_step: in fact equal). */
TS_TEST(kernels, amx_prefill_pairing) {
    const char *orig = ts_kernels_name();
    if (!amx_or_skip(orig)) return;
    const int64_t rows[3] = {400, 80, 33}, cols = 512;
    wbox b[3];
    for (int k = 0; k < 3; k++) {
        make_w(&b[k], TS_DTYPE_U32, k == 2 ? 8 : 4, 64, TS_DTYPE_BF16, rows[k], cols);
        CHECK(pack_w(&b[k]));
    }
    const int n = 23;
    float *x = malloc(sizeof(float) * n * cols);
    for (int64_t i = 0; i < n * cols; i++) x[i] = fr();
    float *ya[3], *yb[3], *ye = malloc(sizeof(float) * n * 400);
    for (int k = 0; k < 3; k++) { ya[k] = malloc(sizeof(float) * n * rows[k]); yb[k] = malloc(sizeof(float) * n * rows[k]); }
    const ts_weight *wl[3] = {&b[0].w, &b[1].w, &b[2].w};
    ts_linear_many(wl, 2, x, ya, n, 1 /* TS_LIN_PREFILL */);
    for (int k = 0; k < 3; k++) ts_linear_prefill(wl[k], x, yb[k], n);
    for (int k = 0; k < 2; k++)
        CHECK_MSG(!memcmp(ya[k], yb[k], sizeof(float) * n * rows[k]), "weight %d: fused region differs from its own product", k);
    for (int k = 0; k < 3; k++) {
        ts_linear(wl[k], x, ye, n);
        float worst = worst_rel_err(wl[k], x, yb[k], ye, n);
        CHECK_MSG(worst <= 2e-6f, "weight %d: prefill vs exact relative error %g", k, worst);
    }
    for (int k = 0; k < 3; k++) { free(ya[k]); free(yb[k]); free_w(&b[k]); }
    free(ye);
    free(x);
    ts_kernels_select(orig);
}

/* The reference stays callable, and selection reports unknown names. */
TS_TEST(kernels, select) {
    const char *orig = ts_kernels_name();
    CHECK(ts_kernels_select("ref") == 0 && !strcmp(ts_kernels_name(), "ref"));
    CHECK(ts_kernels_select("nonsense") == TS_E_ARG);
    CHECK(ts_kernels_select("auto") == 0);
    CHECK(ts_kernels_select(orig) == 0);
}

/* The vectorised delta-rule step against the reference: state and output
 * within 1e-5 relative to their magnitude (only FMA rounding differs). */
TS_TEST(kernels, gdn_step_parity) {
    const int dk = 128, dv = 128;
    float *S0 = malloc(sizeof(float) * dk * dv), *S1 = malloc(sizeof(float) * dk * dv);
    float k[128], q[128], v[128], o0[128], o1[128];
    for (int i = 0; i < dk * dv; i++) S0[i] = S1[i] = fr() * 0.5f;
    for (int i = 0; i < 128; i++) { k[i] = fr() * 0.1f; q[i] = fr() * 0.1f; v[i] = fr(); }
    const char *orig = ts_kernels_name();
    for (int step = 0; step < 4; step++) {
        ts_gdn_step_ref(S0, k, v, q, 0.9f, 0.7f, o0, dk, dv);
        if (ts_kernels_select("avx512") != 0) { fprintf(stderr, "  (no avx512: reference only)\n"); break; }
        ts_gdn_step(S1, k, v, q, 0.9f, 0.7f, o1, dk, dv);
        ts_kernels_select(orig);
        float es = 0, eo = 0, ms = 0, mo = 0;
        for (int i = 0; i < dk * dv; i++) { es = fmaxf(es, fabsf(S0[i] - S1[i])); ms = fmaxf(ms, fabsf(S0[i])); }
        for (int j = 0; j < dv; j++) { eo = fmaxf(eo, fabsf(o0[j] - o1[j])); mo = fmaxf(mo, fabsf(o0[j])); }
        CHECK_MSG(es <= 1e-5f * ms && eo <= 1e-5f * mo, "step %d: state err %g (max %g), output err %g (max %g)", step, es, ms, eo, mo);
    }
    ts_kernels_select(orig);
    free(S0); free(S1);
}

/* One query row's attention against the reference, for head sizes with and
 * without a 16-multiple and contexts from 1 to 300: outputs within 1e-5 of
 * the largest |V| (only the summation order differs). */
TS_TEST(kernels, attn_row_parity) {
    const char *orig = ts_kernels_name();
    if (ts_kernels_select("avx512") != 0) { fprintf(stderr, "  (no avx512 here)\n"); return; }
    int Ds[] = {16, 64, 128, 256, 24};
    int Ts[] = {1, 2, 17, 300};
    for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++)
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            int D = Ds[di], T = Ts[ti];
            int64_t stride = 2 * D + 16; /* rows interleaved with another head, as in the cache */
            float *q = malloc(sizeof(float) * D), *K = malloc(sizeof(float) * stride * T), *V = malloc(sizeof(float) * stride * T);
            float *att = malloc(sizeof(float) * T), *o = malloc(sizeof(float) * D), *o2 = malloc(sizeof(float) * D);
            for (int d = 0; d < D; d++) q[d] = fr();
            for (int64_t i = 0; i < stride * T; i++) { K[i] = fr() * 2.0f; V[i] = fr(); }
            ts_attn_row(q, K, V, stride, T, D, 0.125f, att, o);
            ts_attn_row_ref(q, K, V, stride, T, D, 0.125f, att, o2);
            float worst = 0;
            for (int d = 0; d < D; d++) worst = fmaxf(worst, fabsf(o[d] - o2[d]));
            CHECK_MSG(worst <= 1e-5f, "D %d T %d: max error %g", D, T, worst);
            free(q); free(K); free(V); free(att); free(o); free(o2);
        }
    ts_kernels_select(orig);
}

/* The token path's attention over several queries (ts_attn_rows: the query
 * heads of a KV head, the rows of a verify block) gives every (row, head)
 * exactly ts_attn_row's bits for its own causal length (decode and verify
 * rows depend on it): 1 to 8 heads (groups of 4 and the remainders), 1 to 9
 * rows, head sizes with and without a 16-multiple, lengths around the 1, 2
 * and 4 keys a step takes and across the 128-key blocks; and 40 rows x 32
 * heads, past what one SIMD call takes (TS_ATTN_MAX_Q). */
TS_TEST(kernels, attn_rows_match_row) {
    const char *orig = ts_kernels_name();
    const char *modes[] = {"generic", "avx512"};
    for (int mi = 0; mi < 2; mi++) {
        if (ts_kernels_select(modes[mi]) != 0) continue;
        int Ds[] = {16, 64, 256, 24};
        int T0s[] = {1, 3, 5, 127, 300};
        int ns[] = {1, 2, 4, 9, 40};
        for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++)
            for (size_t ti = 0; ti < sizeof T0s / sizeof T0s[0]; ti++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                    for (int g = 1; g <= 32; g += (g < 5 ? 1 : g < 8 ? 3 : 24)) {
                        /* 40 rows x 32 heads: more queries than one SIMD call takes */
                        if ((ns[ni] == 40) != (g == 32) || (g == 32 && (Ds[di] != 16 || T0s[ti] != 3))) continue;
                        const int D = Ds[di], T0 = T0s[ti], n = ns[ni], T = T0 + n - 1;
                        const int64_t stride = 2 * D + 16;
                        const size_t qh = (size_t)2 * D + 8, qr = qh * g + 4, ah = (size_t)T + 3, ar = ah * g;
                        const size_t oh = (size_t)D + 16, orow = oh * g + 16;
                        float *q = malloc(sizeof(float) * qr * n), *K = malloc(sizeof(float) * stride * T);
                        float *V = malloc(sizeof(float) * stride * T), *att = malloc(sizeof(float) * ar * n);
                        float *o = calloc(orow * n, sizeof(float)), *o1 = malloc(sizeof(float) * D);
                        float *a1 = malloc(sizeof(float) * T);
                        for (size_t i = 0; i < qr * n; i++) q[i] = fr();
                        for (int64_t i = 0; i < stride * T; i++) { K[i] = fr() * 2.0f; V[i] = fr(); }
                        const ts_attn_q a = {q, qr, qh, att, ar, ah, o, orow, oh, n, g, T0};
                        ts_attn_rows(&a, K, V, stride, D, 0.0625f);
                        for (int i = 0; i < n; i++)
                            for (int j = 0; j < g; j++) {
                                ts_attn_row(q + i * qr + j * qh, K, V, stride, T0 + i, D, 0.0625f, a1, o1);
                                CHECK_MSG(!memcmp(o1, o + i * orow + j * oh, sizeof(float) * D),
                                          "%s D %d T0 %d n %d g %d: row %d head %d differs", modes[mi], D, T0, n, g,
                                          i, j);
                            }
                        free(q); free(K); free(V); free(att); free(o); free(o1); free(a1);
                    }
    }
    ts_kernels_select(orig);
}

/* The token path's GDN conv row (ts_conv_row) gives the same bits in every
 * kernel mode (multiplies and adds in tap order, no fused multiply-add), and
 * they are the sum over the [K, C] weights' taps: taps 1 to 9, channel
 * counts around 16. */
TS_TEST(kernels, conv_row_same_in_every_mode) {
    const char *orig = ts_kernels_name();
    if (ts_kernels_select("avx512") != 0) { fprintf(stderr, "  (no avx512 here)\n"); ts_kernels_select(orig); return; }
    const int Cs[] = {1, 16, 37, 6144};
    for (int K = 1; K <= 9; K++)
        for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
            const int C = Cs[ci];
            float *w = malloc(sizeof(float) * C * K), *xs = malloc(sizeof(float) * C * K);
            float *y0 = malloc(sizeof(float) * C), *y1 = malloc(sizeof(float) * C);
            const float *x[9];
            for (int i = 0; i < C * K; i++) { w[i] = fr(); xs[i] = fr() * 3.0f; }
            for (int t = 0; t < K; t++) x[t] = xs + (size_t)t * C;
            ts_kernels_select("generic");
            ts_conv_row(x, w, K, y0, C);
            ts_kernels_select("avx512");
            ts_conv_row(x, w, K, y1, C);
            CHECK_MSG(!memcmp(y0, y1, sizeof(float) * C), "K %d C %d: avx512 differs from generic", K, C);
            const int c = C - 1; /* the last channel: tap t's weight at w[t * C + c] */
            float want = 0.f;
            for (int t = 0; t < K; t++) {
                volatile float p = w[(size_t)t * C + c] * x[t][c]; /* no FMA contraction */
                want = want + p;
            }
            CHECK_MSG(!memcmp(&want, &y1[c], sizeof want), "K %d C %d: %g, the taps sum to %g", K, C, y1[c], want);
            free(w); free(xs); free(y0); free(y1);
        }
    ts_kernels_select(orig);
}

/* ts_argmax equals the scalar first-maximum loop, with ties, NaNs, -inf and
 * lengths around the vector width. */
TS_TEST(kernels, argmax_matches_scalar) {
    const char *orig = ts_kernels_name();
    const char *modes[] = {"generic", "avx512"};
    float x[1000];
    for (int mi = 0; mi < 2; mi++) {
        if (ts_kernels_select(modes[mi]) != 0) continue;
        for (int trial = 0; trial < 400; trial++) {
            int n = 1 + trial % 67 + (trial % 5 == 0 ? 900 : 0);
            for (int i = 0; i < n; i++) x[i] = (float)((int)(fr() * 6.0f)); /* few values: many ties */
            if (trial % 3 == 0) x[(trial * 7) % n] = NAN;
            if (trial % 4 == 0) x[0] = -INFINITY;
            if (trial % 11 == 0) x[0] = NAN;
            int b = 0;
            for (int i = 1; i < n; i++)
                if (x[i] > x[b]) b = i;
            int got = ts_argmax(x, n);
            CHECK_MSG(got == b, "%s n %d trial %d: %d != %d", modes[mi], n, trial, got, b);
        }
    }
    ts_kernels_select(orig);
}

/* The vectorised SiLU against libm's expf over [-100, 100]: within 4e-7
 * relative (+1e-25 absolute: below x = -87, e^x is clamped and silu ~ 0), and silu * u the same. */
TS_TEST(kernels, silu_accuracy) {
    const char *orig = ts_kernels_name();
    if (ts_kernels_select("avx512") != 0) return;
    enum { N = 20011 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) { x[i] = -100.0f + 200.0f * (float)i / (N - 1); u[i] = fr(); }
    ts_silu(y, x, N);
    float worst = 0;
    for (int i = 0; i < N; i++) {
        double ref = (double)x[i] / (1.0 + exp(-(double)x[i]));
        double e = fabs(y[i] - ref) / (fabs(ref) + 1e-25);
        if (e > worst) worst = (float)e;
    }
    CHECK_MSG(worst <= 4e-7f, "silu relative error %g", worst);
    fprintf(stderr, "  silu: worst relative error %.3g\n", worst);
    memcpy(y, x, sizeof(float) * N);
    ts_silu_mul(y, u, N);
    worst = 0;
    for (int i = 0; i < N; i++) {
        double ref = (double)x[i] / (1.0 + exp(-(double)x[i])) * u[i];
        double e = fabs(y[i] - ref) / (fabs(ref) + 1e-25);
        if (e > worst) worst = (float)e;
    }
    CHECK_MSG(worst <= 6e-7f, "silu * u relative error %g", worst);
    free(x); free(y); free(u);
    ts_kernels_select(orig);
}

/* ts_sum_exp (the drafter's confidence) in every kernel mode against a
 * double sum, over lengths with vector tails, a spread of values below the
 * subtracted maximum, and -inf entries (a drafting vocabulary's cut). */
TS_TEST(kernels, sum_exp) {
    const char *orig = ts_kernels_name();
    const char *modes[] = {"ref", "avx2", "avx512"};
    enum { N = 12301 };
    float *x = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        const float r = fr();
        x[i] = i % 97 == 5 ? -INFINITY : -30.0f * r * r; /* e^0 .. e^-30 */
    }
    x[17] = 0.0f;
    for (int mi = 0; mi < 3; mi++) {
        if (ts_kernels_select(modes[mi]) != 0) continue;
        const int lens[] = {1, 15, 16, 17, 100, N};
        for (int li = 0; li < 6; li++) {
            const int n = lens[li];
            double ref = 0;
            for (int i = 0; i < n; i++) ref += exp((double)x[i] - 0.25);
            const float got = ts_sum_exp(x, n, 0.25f);
            /* f32 sums of up to 12K terms: a few ulp per term at worst */
            CHECK_MSG(fabs(got - ref) <= 1e-5 * ref, "%s n=%d: %.9g vs %.9g", modes[mi], n, (double)got, ref);
        }
    }
    free(x);
    ts_kernels_select(orig);
}

/* Every chunk of a pool region runs under the caller's floating-point mode
 * (threads.c): with denormals flushed and without, whichever thread claims
 * it. A product computed by a worker must not differ from the caller's. */
static void csr_chunk(void *ctx, int chunk, int n) {
    unsigned m = 0;
#if defined(__x86_64__)
    __asm__ volatile("stmxcsr %0" : "=m"(m));
#endif
    ((unsigned *)ctx)[chunk] = m;
    volatile double spin = 0; /* long enough for the workers to claim some */
    for (int i = 0; i < 20000; i++) spin += i;
    (void)n;
}

TS_TEST(kernels, pool_follows_caller_fp_mode) {
    enum { N = 64 };
    unsigned seen[N];
    const unsigned old = ts_fp_begin(); /* ts_fp_end(m) sets mode m */
#if defined(__x86_64__)
    CHECK_MSG((ts_fp_begin() & 0x8040u) == 0x8040u, "ts_fp_begin did not set FTZ and DAZ");
#endif
    const unsigned modes[2] = {old & ~0x8040u, old | 0x8040u}; /* denormals kept, flushed */
    for (int round = 0; round < 4; round++) {
        const unsigned want = modes[round % 2];
        ts_fp_end(want);
        memset(seen, 0, sizeof seen);
        ts_pool_run(ts_pool_default(), csr_chunk, seen, N);
        for (int i = 0; i < N; i++) /* the mode bits; bits 0-5 are sticky exception flags */
            CHECK_MSG(!((seen[i] ^ want) & ~0x3fu), "round %d chunk %d: mxcsr %#x, caller %#x", round, i, seen[i], want);
    }
    ts_fp_end(old);
}
