/* test_prefill_kernels.c: the prefill-only kernels (kernels.h "prefill
 * kernels" block, src/cpu/prefill*.c) against their references.
 *
 * - delta_chunk: ts_delta_chunk (AVX-512 when available) and the reference
 *   both against L steps of the token recurrence ts_gdn_step_ref, on shapes
 *   with tails (dk, dv, L not multiples of 16), more than 64 rows (split
 *   into chunks of 64) and strided rows, from a
 *   random and from a zero start state (the AVX-512 version skips S0 then).
 * - attn_chunk: multi-row causal attention against the reference, with a
 *   cache prefix (pos > 0) and row counts across the tile sizes.
 * - conv_and_norm: conv + SiLU and residual + RMSNorm against the plain C.
 * - weight_row_quantized: the embedding gather bit for bit.
 * - parallel: every item of ts_parallel_for runs exactly once.
 */
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "ts_test.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (2.0 / 16777216.0) - 1.0);
}

static float rel_err(const float *a, const float *b, size_t n) {
    float e = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= e)) e = d;
        if (fabsf(b[i]) > mx) mx = fabsf(b[i]);
    }
    return mx > 0 ? e / mx : e;
}

static void l2n(float *x, int d, float s) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss + 1e-6)) * s;
    for (int i = 0; i < d; i++) x[i] *= r;
}

/* One chunk of L rows through `mode` ("ref" = ts_delta_chunk_ref, else the
 * dispatching ts_delta_chunk under that kernel mode) vs the recurrence. */
static int check_chunk(const char *mode, int L, int dk, int dv, int zero) {
    const size_t ld = (size_t)2 * dk + dv + 5, ldo = (size_t)dv + 3, ldg = 3;
    float *x = malloc(sizeof(float) * L * ld), *g = malloc(sizeof(float) * L * ldg), *be = malloc(sizeof(float) * L * ldg);
    float *S0 = malloc(sizeof(float) * dk * dv), *S1 = malloc(sizeof(float) * dk * dv);
    float *o0 = malloc(sizeof(float) * L * ldo), *o1 = malloc(sizeof(float) * L * ldo);
    float *ws = malloc(sizeof(float) * ts_delta_chunk_ws(TS_MIN(L, 64), dk, dv));
    for (size_t i = 0; i < (size_t)L * ld; i++) x[i] = frand();
    for (int t = 0; t < L; t++) {
        l2n(x + t * ld, dk, 1.0f / sqrtf((float)dk));
        l2n(x + t * ld + dk, dk, 1.0f);
        g[t * ldg] = -0.5f * (frand() + 1.0f) - (t % 9 == 0 ? 3.0f : 0.0f); /* some strong decays */
        be[t * ldg] = 0.5f * (frand() + 1.0f);
    }
    for (int i = 0; i < dk * dv; i++) S0[i] = S1[i] = zero ? 0.f : frand() * 0.3f;
    for (size_t i = 0; i < (size_t)L * ldo; i++) o0[i] = o1[i] = 0.f;
    for (int t = 0; t < L; t++)
        ts_gdn_step_ref(S0, x + t * ld + dk, x + t * ld + 2 * dk, x + t * ld, expf(g[t * ldg]), be[t * ldg], o0 + t * ldo, dk,
                        dv);
    const char *orig = ts_kernels_name();
    int bad = 0;
    if (!strcmp(mode, "ref") && L > 64) { /* the reference takes one chunk: the generic dispatch splits */
        ts_kernels_select("generic");
        ts_delta_chunk(S1, x, x + dk, x + 2 * dk, ld, g, be, ldg, o1, ldo, L, dk, dv, ws);
        ts_kernels_select(orig);
    } else if (!strcmp(mode, "ref")) {
        ts_delta_chunk_ref(S1, x, x + dk, x + 2 * dk, ld, g, be, ldg, o1, ldo, L, dk, dv, ws);
    } else {
        ts_kernels_select(mode);
        ts_delta_chunk(S1, x, x + dk, x + 2 * dk, ld, g, be, ldg, o1, ldo, L, dk, dv, ws);
        ts_kernels_select(orig);
    }
    float es = rel_err(S1, S0, (size_t)dk * dv), eo = rel_err(o1, o0, (size_t)L * ldo);
    if (!(es < 2e-5f && eo < 2e-5f)) {
        ts_test_fail(__FILE__, __LINE__, "%s L %d dk %d dv %d%s: state rel err %g, output rel err %g", mode, L, dk, dv,
                     zero ? " (zero start state)" : "", es, eo);
        bad = 1;
    }
    free(x); free(g); free(be); free(S0); free(S1); free(o0); free(o1); free(ws);
    return bad;
}

TS_TEST(prefill_kernels, delta_chunk) {
    static const int shapes[][3] = {{64, 128, 128}, {37, 48, 24}, {1, 32, 64}, {7, 16, 16}, {64, 64, 32}, {50, 128, 80},
                                    {150, 32, 48}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int zero = 0; zero < 2; zero++) {
            if (check_chunk("ref", shapes[i][0], shapes[i][1], shapes[i][2], zero)) return;
            if (ts_kernels_select("avx512") == 0) {
                ts_kernels_select("auto");
                if (check_chunk("avx512", shapes[i][0], shapes[i][1], shapes[i][2], zero)) return;
            }
        }
}

static int check_attn(int n, int pos, int D) {
    const int T = pos + n;
    const size_t ldq = (size_t)2 * D + 1, ldkv = (size_t)D + 7, ldo = (size_t)D + 2;
    float *q = malloc(sizeof(float) * n * ldq), *k = malloc(sizeof(float) * T * ldkv), *v = malloc(sizeof(float) * T * ldkv);
    float *o0 = calloc((size_t)n * ldo, sizeof(float)), *o1 = calloc((size_t)n * ldo, sizeof(float));
    for (size_t i = 0; i < (size_t)n * ldq; i++) q[i] = frand() * 2.0f;
    for (size_t i = 0; i < (size_t)T * ldkv; i++) { k[i] = frand() * 2.0f; v[i] = frand(); }
    const float scale = 1.0f / sqrtf((float)D);
    ts_attn_chunk_ref(q, ldq, k, v, ldkv, o0, ldo, n, pos, D, scale);
    /* the reference itself against a plain two-pass softmax on one row */
    int bad = 0;
    {
        int i = n - 1;
        double *p = malloc(sizeof(double) * T), mx = -1e300, sum = 0;
        for (int t = 0; t <= pos + i; t++) {
            double s = 0;
            for (int d = 0; d < D; d++) s += (double)q[i * ldq + d] * k[t * ldkv + d];
            p[t] = s * scale;
            if (p[t] > mx) mx = p[t];
        }
        for (int t = 0; t <= pos + i; t++) { p[t] = exp(p[t] - mx); sum += p[t]; }
        float e = 0;
        for (int d = 0; d < D; d++) {
            double acc = 0;
            for (int t = 0; t <= pos + i; t++) acc += p[t] / sum * v[t * ldkv + d];
            e = fmaxf(e, fabsf((float)acc - o0[i * ldo + d]));
        }
        free(p);
        if (!(e < 1e-5f)) { ts_test_fail(__FILE__, __LINE__, "reference n %d pos %d D %d: err %g", n, pos, D, e); bad = 1; }
    }
    const char *orig = ts_kernels_name();
    if (!bad && ts_kernels_select("avx512") == 0) {
        ts_attn_chunk(q, ldq, k, v, ldkv, o1, ldo, n, pos, D, scale);
        ts_kernels_select(orig);
        float e = rel_err(o1, o0, (size_t)n * ldo);
        if (!(e < 1e-5f)) { ts_test_fail(__FILE__, __LINE__, "avx512 n %d pos %d D %d: rel err %g", n, pos, D, e); bad = 1; }
        /* the padding between rows is not written */
        for (int i = 0; i < n && !bad; i++)
            for (size_t d = (size_t)D; d < ldo; d++)
                if (o1[i * ldo + d] != 0.f) { ts_test_fail(__FILE__, __LINE__, "avx512 wrote past D"); bad = 1; break; }
    }
    free(q); free(k); free(v); free(o0); free(o1);
    return bad;
}

TS_TEST(prefill_kernels, attn_chunk) {
    static const int cases[][3] = {{1, 0, 32}, {7, 0, 64}, {64, 0, 256}, {100, 37, 40}, {130, 70, 128}, {3, 200, 256}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (check_attn(cases[i][0], cases[i][1], cases[i][2])) return;
}

static void count_item(void *ctx, int i, int n) {
    int *c = ctx;
    (void)n;
    __atomic_fetch_add(&c[i], 1, __ATOMIC_RELAXED);
}

TS_TEST(prefill_kernels, parallel) {
    int c[37] = {0};
    ts_parallel_for(37, count_item, c);
    for (int i = 0; i < 37; i++) CHECK_MSG(c[i] == 1, "item %d ran %d times", i, c[i]);
}

/* ts_weight_row of quantized weights (the embedding gather) reproduces
 * ts_weight_get bit for bit: decode reads embeddings through it too. */
TS_TEST(prefill_kernels, weight_row_quantized) {
    const int64_t rows = 5, cols = 256;
    const ts_dtype sdts[] = {TS_DTYPE_BF16, TS_DTYPE_F16, TS_DTYPE_F32};
    for (int bits = 4; bits <= 8; bits += 4)
        for (int group = 32; group <= 128; group *= 2)
            for (int si = 0; si < 3; si++) {
                const int64_t ng = cols / group, words = rows * cols * bits / 32;
                uint32_t *q = malloc(sizeof(uint32_t) * (size_t)words);
                float *sf = malloc(sizeof(float) * (size_t)(rows * ng) * 2);
                uint16_t *sh = malloc(sizeof(uint16_t) * (size_t)(rows * ng) * 2);
                for (int64_t i = 0; i < words; i++) {
                    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
                    q[i] = (uint32_t)(g_rng >> 32);
                }
                for (int64_t i = 0; i < rows * ng * 2; i++) {
                    sf[i] = frand() * 0.1f;
                    sh[i] = sdts[si] == TS_DTYPE_BF16 ? ts_f32_to_bf16(sf[i]) : (uint16_t)(0x2000u + (unsigned)(i * 37 % 0x3000));
                }
                ts_weight w = {0};
                w.dtype = TS_DTYPE_U32;
                w.bits = bits;
                w.group = group;
                w.rows = rows;
                w.cols = cols;
                w.data = q;
                w.sdtype = sdts[si];
                w.scales = sdts[si] == TS_DTYPE_F32 ? (const void *)sf : (const void *)sh;
                w.biases = sdts[si] == TS_DTYPE_F32 ? (const void *)(sf + rows * ng) : (const void *)(sh + rows * ng);
                float out[256];
                int bad = 0;
                for (int64_t r = 0; r < rows && !bad; r++) {
                    ts_weight_row(&w, r, out);
                    for (int64_t c = 0; c < cols; c++) {
                        float e = ts_weight_get(&w, r, c);
                        if (memcmp(&e, &out[c], sizeof e)) {
                            ts_test_fail(__FILE__, __LINE__, "bits %d group %d sdtype %d: (%lld, %lld) %g vs %g", bits, group,
                                         si, (long long)r, (long long)c, out[c], e);
                            bad = 1;
                            break;
                        }
                    }
                }
                free(q); free(sf); free(sh);
                if (bad) return;
            }
}

/* Conv + SiLU and residual + RMSNorm: AVX-512 against the plain C, with
 * channel tails, rows that reach into the conv state, strided rows. */
TS_TEST(prefill_kernels, conv_and_norm) {
    const char *orig = ts_kernels_name();
    const int n = 9, nc = 200, ld = 211;
    for (int K = 1; K <= 4; K += 3) {
        float *x = malloc(sizeof(float) * n * ld), *st = malloc(sizeof(float) * 3 * ld), *w = malloc(sizeof(float) * nc * K);
        float *o0 = calloc((size_t)n * ld, sizeof(float)), *o1 = calloc((size_t)n * ld, sizeof(float));
        for (int i = 0; i < n * ld; i++) x[i] = frand() * 3.0f;
        for (int i = 0; i < 3 * ld; i++) st[i] = frand() * 3.0f;
        for (int i = 0; i < nc * K; i++) w[i] = frand();
        CHECK(ts_kernels_select("generic") == 0);
        /* weights [K, nc] (tap-major), read from channel 0 */
        ts_conv_silu(x, ld, st, ld, w, nc, K, o0, ld, n, nc);
        int have = ts_kernels_select("avx512") == 0;
        if (have) ts_conv_silu(x, ld, st, ld, w, nc, K, o1, ld, n, nc);
        ts_kernels_select(orig);
        if (have) {
            float e = rel_err(o1, o0, (size_t)n * ld);
            CHECK_MSG(e < 1e-6f, "conv K %d: rel err %g", K, e);
            int pad = 0;
            for (int i = 0; i < n; i++)
                for (int c = nc; c < ld; c++) pad |= o1[i * ld + c] != 0.f;
            CHECK_MSG(!pad, "conv K %d wrote past nc", K);
        }
        /* the plain C against a direct sum: row 0 reads the state */
        float acc = 0.f;
        for (int t = 0; t < K; t++) acc += w[t * nc + 5] * (t == K - 1 ? x[5] : st[(t + 3 - (K - 1)) * ld + 5]);
        float want = acc / (1.0f + expf(-acc));
        CHECK_MSG(fabsf(o0[5] - want) <= 1e-6f * fabsf(want) + 1e-7f, "conv K %d row 0: %g vs %g", K, o0[5], want);
        free(x); free(st); free(w); free(o0); free(o1);
    }
    {
        const int dim = 77, rows = 5;
        float x0[5 * 77], x1[5 * 77], a[5 * 77], wn[77], y0[5 * 77], y1[5 * 77];
        for (int i = 0; i < rows * dim; i++) { x0[i] = x1[i] = frand() * 2.0f; a[i] = frand(); }
        for (int i = 0; i < dim; i++) wn[i] = 1.0f + 0.5f * frand();
        CHECK(ts_kernels_select("generic") == 0);
        ts_add_rmsnorm(x0, a, wn, y0, rows, dim, 1e-6f);
        int have = ts_kernels_select("avx512") == 0;
        if (have) ts_add_rmsnorm(x1, a, wn, y1, rows, dim, 1e-6f);
        ts_kernels_select(orig);
        if (have) {
            CHECK_MSG(rel_err(x1, x0, (size_t)rows * dim) == 0.f, "residual add differs");
            float e = rel_err(y1, y0, (size_t)rows * dim);
            CHECK_MSG(e < 1e-6f, "rmsnorm rel err %g", e);
        }
    }
}
