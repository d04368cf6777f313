/* test_cuda_engine.c: the whole engine on the CUDA backend against the CPU
 * backend (group cuda_engine; every test skips cleanly without a usable GPU
 * or in a build without CUDA).
 *
 * - parity: every fixture (dense and MoE; BF16 as shipped, INT8 and INT4
 *   installs made by ts_convert) and the bundled default model (an INT4
 *   install as shipped, "INT4*"): prompt
 *   logits of every row (fed in 16-row chunks: the prefill path) and 24
 *   decoded steps (teacher-forced with the CPU's greedy ids: the token path,
 *   replayed from a CUDA graph after the first step), max abs logit error and
 *   top-1 agreement; shapes the kernels do not take are reported, not failed;
 * - determinism: the same prompt and seed twice on the GPU give the same
 *   tokens (sampled, graphs replayed);
 * - JSON-constrained generation: a finished reply is one JSON object, MTP
 *   drafting under the constraint gives plain decoding's ids;
 * - log-probabilities (the device's candidates) against log_softmax of the
 *   GPU's logits, MTP drafting with them and with a logit bias bit for bit
 *   plain decoding's, a +100 bias forcing its token;
 * - perplexity of the default model on a held-out text (the README) on the
 *   GPU within 0.5% of the CPU's;
 * - the plan: `plan --backend cuda` (ts_mem_plan_dir_ex with backend "cuda") equals the device
 *   bytes the engine and a session allocate, by category, to the byte; the
 *   counted allocator returns to zero after close;
 * - errors: a bad device index names the devices there are; MTP and DFlash
 *   drafting sessions open, a DFlash drafter whose heads the kernels do not
 *   take is refused naming it, `auto` keeps the GPU for --spec mtp and
 *   --spec dflash;
 * - speculative decoding (MTP drafts, verify, lazy rollback), CUDA against
 *   CUDA, bit for bit: drafted greedy = plain greedy for M = 1..8 on every
 *   fixture the backend takes, a tiny MoE at INT4, a synthetic shape with
 *   the fused GDN kernels' heads and the default model (520 tokens), at the
 *   context limit mid-block; after a verify and a rollback (eager or lazy,
 *   chains of blocks) the device state equals one-row steps; sampled
 *   drafting repeats with its seed;
 * - DFlash drafting (block-masked attention, the target's taps on the
 *   device): drafted greedy = plain greedy for B = 2, 4, 8, 16 on the tiny
 *   fixtures with a random drafter (oracle drafts too: every rollback length)
 *   and on the default model with its trained drafter (520 tokens); the
 *   drafter's block logits against the CPU's; CUDA's drafted ids against the
 *   CPU's; sampled drafting repeats; the plan with the drafter equals the
 *   device allocations;
 * - the speculative passes as graphs (verify, after a lazy rollback, the MTP
 *   head): drafted output identical with every pass captured, with
 *   TSC_VGRAPH=0 and with TS_GRAPHS=0, M = 1..8, at the context limit
 *   mid-block; replays counted and graphs bounded per draft length; a chain
 *   of captured verifies against uncaptured ones, logits and state byte for
 *   byte.
 */
#include <cjson/cJSON.h>
#include <sys/stat.h>

#include "cuda/tsc.h"
#include "engine/engine.h"
#include "model/xstream.h"
#include "gen/spec.h"
#include "dflash_fx.h"
#include "ts_test.h"
#include "gen_oracle.h"
#include "lp_rec.h"

/* Why this tolerance: activations, accumulations, the GDN state and the
 * softmax are f32 on both backends (the CPU reference runs its quantized
 * products at 24-bit activation precision, f32-class), so the two differ by
 * reduction order only: each dot product of length n <= 2048 carries a
 * relative error of order sqrt(n) * 2^-24 (~3e-6), and the layers' norms
 * renormalise what accumulates, so logits of magnitude |L| agree to ~1e-5
 * |L| after a few layers. 2e-3 * max(1, |L|max) leaves a 100x margin over
 * that and is still 100x below what one wrong op gives (O(1) errors: a
 * dropped gate, a wrong position, a stale state). Top-1 must agree on every
 * row whose CPU top-2 gap exceeds twice the tolerance (a near-tie may flip
 * under any rounding). */
#define REL_TOL 2e-3f

/* the plan of dir for an engine on the CUDA backend */
static int plan_cuda(const char *dir, const ts_session_params *sp, ts_mem_plan *pl, ts_error *err) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cuda";
    return ts_mem_plan_dir_ex(dir, &ep, sp, pl, err);
}

static size_t dev_used(void) {
    size_t t = 0;
    for (int k = 0; k < TS_MEM_N; k++) t += ts_mem_used_in(TS_DOM_DEVICE, (ts_mem_cat)k);
    return t;
}

/* A usable GPU, or a reason to skip (into why). */
static int gpu_ok(char *why, size_t cap) {
    if (!ts_cuda_built()) { snprintf(why, cap, "built without CUDA"); return 0; }
    ts_backend *be = NULL;
    ts_backend_params bp = {0};
    ts_error err = {0};
    if (ts_cuda_backend_new(&bp, &be, &err)) { snprintf(why, cap, "%.500s", err.msg); return 0; }
    ts_backend_free(be);
    return 1;
}
#define NEED_GPU() do { char why_[600]; if (!gpu_ok(why_, sizeof why_)) SKIP("no usable CUDA device: %s", why_); } while (0)

static int open_bits(const char *dir, const char *backend, int bits, ts_engine **e, ts_error *err) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = backend;
    ep.act_bits = bits;
    return ts_engine_open(dir, &ep, e, err);
}

/* the CPU reference at f32-class activation precision (and the GPU alike) */
static int open_on(const char *dir, const char *backend, ts_engine **e, ts_error *err) {
    return open_bits(dir, backend, 24, e, err);
}

static int argmax(const float *x, int n, float *gap) {
    int b = 0, s = -1;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) s = b, b = i;
        else if (s < 0 || x[i] > x[s]) s = i;
    if (gap) *gap = s >= 0 ? x[b] - x[s] : INFINITY;
    return b;
}

static int make_install(const char *name, int bits, char *out, size_t cap) {
    char src[256];
    if (!strcmp(name, "default")) snprintf(src, sizeof src, "models/default");
    else snprintf(src, sizeof src, "tests/fixtures/%s", name);
    if (!bits) { snprintf(out, cap, "%s", src); return 0; }
    snprintf(out, cap, "%s/%s-q%d", ts_test_tmpdir(), name, bits);
    struct stat sb;
    if (stat(out, &sb) == 0) return 0;
    ts_convert_params p;
    ts_convert_params_default(&p);
    p.bits = bits;
    p.quiet = 1;
    ts_error err = {0};
    int rc = ts_convert(src, out, &p, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "convert %s: %s", name, err.msg);
    return rc;
}

typedef struct parity {
    float max_err, max_logit;
    int rows, top1_ok, top1_checked;
} parity;

static int wide_moe_model(char *dir, size_t cap);

/* Prompt rows then teacher-forced decode steps on both engines. Returns 0,
 * 1 when the GPU refuses the shape (why filled), -1 on a failure. */
static int run_parity(const char *dir, int n_prompt, int n_dec, parity *pr, char *why, size_t wcap) {
    memset(pr, 0, sizeof *pr);
    ts_error err = {0};
    ts_engine *ec = NULL, *eg = NULL;
    if (open_on(dir, "cpu", &ec, &err)) { ts_test_fail(__FILE__, __LINE__, "%s: cpu: %s", dir, err.msg); return -1; }
    if (open_on(dir, "cuda", &eg, &err)) {
        ts_engine_close(ec);
        if (err.code == TS_E_UNSUPPORTED) { snprintf(why, wcap, "%.500s", err.msg); return 1; }
        ts_test_fail(__FILE__, __LINE__, "%s: cuda: %s", dir, err.msg);
        return -1;
    }
    const int V = ts_engine_info(ec)->vocab_size;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 128;
    sp.max_rows = 16;
    ts_session *sc = NULL, *sg = NULL;
    int rc = -1;
    float *lc = malloc(sizeof(float) * (size_t)n_prompt * V), *lg = malloc(sizeof(float) * (size_t)n_prompt * V);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_prompt);
    if (ts_session_new(ec, &sp, &sc, &err) || ts_session_new(eg, &sp, &sg, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s: session: %s", dir, err.msg);
        goto out;
    }
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n_prompt; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; ids[i] = (int32_t)((r >> 33) % (uint64_t)V); }
    if (ts_session_feed(sc, ids, n_prompt, lc, NULL, &err)) { ts_test_fail(__FILE__, __LINE__, "%s: cpu feed: %s", dir, err.msg); goto out; }
    if (ts_session_feed(sg, ids, n_prompt, lg, NULL, &err)) {
        if (err.code == TS_E_UNSUPPORTED) { snprintf(why, wcap, "%.500s", err.msg); rc = 1; goto out; }
        ts_test_fail(__FILE__, __LINE__, "%s: cuda feed: %s", dir, err.msg);
        goto out;
    }
    /* the prompt's rows, then n_dec steps fed the CPU's greedy id (teacher
     * forcing: both backends see the same timeline) */
    int32_t next = 0;
    for (int step = 0; step <= n_dec; step++) {
        if (step && (ts_session_feed(sc, &next, 1, NULL, NULL, &err) || ts_session_feed(sg, &next, 1, NULL, NULL, &err))) {
            ts_test_fail(__FILE__, __LINE__, "%s: decode: %s", dir, err.msg);
            goto out;
        }
        const int nrow = step ? 1 : n_prompt;
        for (int i = 0; i < nrow; i++) {
            const float *a = step ? ts_session_logits(sc) : lc + (size_t)i * V;
            const float *b = step ? ts_session_logits(sg) : lg + (size_t)i * V;
            if (!a || !b) { ts_test_fail(__FILE__, __LINE__, "%s: no logits", dir); goto out; }
            float e = ts_test_max_abs(a, b, (size_t)V), gap;
            for (int v = 0; v < V; v++) pr->max_logit = fmaxf(pr->max_logit, fabsf(a[v]));
            if (!(e <= pr->max_err)) pr->max_err = isnan(e) ? INFINITY : e;
            int ta = argmax(a, V, &gap), tb = argmax(b, V, NULL);
            pr->rows++;
            if (gap > 2 * REL_TOL * fmaxf(1.0f, pr->max_logit)) {
                pr->top1_checked++;
                pr->top1_ok += ta == tb;
            }
            next = ta;
        }
    }
    rc = 0;
out:
    free(lc), free(lg), free(ids);
    ts_session_free(sc);
    ts_session_free(sg);
    ts_engine_close(ec);
    ts_engine_close(eg);
    return rc;
}

/* Where a failing install parts: the residual stream after the embedding
 * and after every layer (ts_state.dbg_layers), CPU vs GPU, for a 5-row
 * chunk (the prefill path) and for 5 tokens fed one at a time (the token
 * path; the last step's rows printed). */
static void layer_diag_n(const char *dir, int n, int modes) {
    ts_error err = {0};
    ts_engine *ec = NULL, *eg = NULL;
    if (open_on(dir, "cpu", &ec, &err) || open_on(dir, "cuda", &eg, &err)) { ts_engine_close(ec); return; }
    const ts_config *c = &ec->model.cfg;
    const int H = c->H, L = c->n_layers;
    int32_t ids[256];
    for (int i = 0; i < n && i < 256; i++) ids[i] = (int32_t)((1 + 7 * i + 13 * i * i) % c->vocab);
    for (int mode = 0; mode < modes; mode++) {
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.n_ctx = n + 64;
        sp.max_rows = n > 16 ? n : 16;
        ts_session *sc = NULL, *sg = NULL;
        if (ts_session_new(ec, &sp, &sc, &err) || ts_session_new(eg, &sp, &sg, &err)) break;
        const int rows = mode ? 1 : n;
        float *dc = calloc((size_t)(L + 1) * rows * H, sizeof(float)), *dg = calloc((size_t)(L + 1) * rows * H, sizeof(float));
        sc->st.dbg_layers = dc, sg->st.dbg_layers = dg;
        for (int i = 0; i < (mode ? n : 1); i++) {
            ts_session_feed(sc, mode ? ids + i : ids, rows, NULL, NULL, &err);
            ts_session_feed(sg, mode ? ids + i : ids, rows, NULL, NULL, &err);
        }
        fprintf(stderr, "  diag %s (%s, %d rows):", dir, mode ? "token path, last token" : "one chunk", n);
        for (int l = 0; l <= L; l++)
            fprintf(stderr, " %s%s %.2g", l ? (c->layer_full[l - 1] ? "A" : "G") : "emb", l ? "" : "",
                    ts_test_max_abs(dc + (size_t)l * rows * H, dg + (size_t)l * rows * H, (size_t)rows * H));
        if (rows > 16) { /* where in the chunk: the last layer's rows, 16 at a time */
            fprintf(stderr, "\n    last layer, rows by 16:");
            for (int r0 = 0; r0 < rows; r0 += 16)
                fprintf(stderr, " %.2g", ts_test_max_abs(dc + ((size_t)L * rows + r0) * H, dg + ((size_t)L * rows + r0) * H,
                                                         (size_t)(rows - r0 < 16 ? rows - r0 : 16) * H));
        }
        fprintf(stderr, "\n");
        sc->st.dbg_layers = sg->st.dbg_layers = NULL;
        free(dc), free(dg);
        ts_session_free(sc);
        ts_session_free(sg);
    }
    ts_engine_close(ec);
    ts_engine_close(eg);
}

static void layer_diag(const char *dir) { layer_diag_n(dir, 5, 2); }

/* One install's parity line, its layers' diagnosis when out of tolerance,
 * and the two checks; 1 when a check failed (the caller returns). */
static int parity_report(const char *name, const char *bn, const char *dir, const parity *pr) {
    const float tol = REL_TOL * fmaxf(1.0f, pr->max_logit);
    fprintf(stderr, "  %-13s %-5s %8d %10.3g %9.3g %d/%d%s\n", name, bn, pr->rows, pr->max_err, pr->max_logit,
            pr->top1_ok, pr->top1_checked, pr->max_err <= tol && pr->top1_ok == pr->top1_checked ? "" : "  <- FAIL");
    if (pr->max_err > tol || pr->top1_ok != pr->top1_checked) layer_diag(dir);
    if (!(pr->max_err <= tol)) {
        ts_test_fail(__FILE__, __LINE__, "%s %s: max abs logit error %.3g > %.3g", name, bn, pr->max_err, tol);
        return 1;
    }
    if (pr->top1_ok != pr->top1_checked) {
        ts_test_fail(__FILE__, __LINE__, "%s %s: top-1 agrees on %d of %d rows", name, bn, pr->top1_ok, pr->top1_checked);
        return 1;
    }
    return 0;
}

TS_TEST(cuda_engine, parity_every_fixture_and_the_default_model) {
    NEED_GPU();
    static const char *const FIX[] = {"tiny-dense", "tiny-moe", "alt-dense", "alt-moe", "alt-moe-tied", "default"};
    static const int BITS[] = {0, 8, 4};
    int ran = 0, refused = 0;
    /* TS_CUDA_ENGINE_QUICK=1 (under the sanitizers): one MoE fixture at
     * INT4 and the default model; 2: tiny-moe INT4 and alt-dense bf16 (the
     * general GDN, MoE and plain-product kernels), shorter runs; 3: the wide
     * synthetic MoE alone (the routed kernels at the released widths) */
    const int quick = getenv("TS_CUDA_ENGINE_QUICK") && atoi(getenv("TS_CUDA_ENGINE_QUICK"));
    fprintf(stderr, "  %-13s %-5s %8s %10s %9s %s\n", "model", "bits", "rows", "max|err|", "|logit|", "top-1 (checked)");
    for (size_t f = 0; f < sizeof FIX / sizeof FIX[0]; f++)
        for (int b = 0; b < 3; b++) {
            char dir[512], why[600] = "";
            if (quick == 3) continue; /* the wide MoE alone (below) */
            if (quick == 1 && !((f == 1 && b == 2) || (f == 5 && b == 0))) continue;
            if (quick == 2 && !((f == 1 && b == 2) || (f == 2 && b == 0))) continue;
            if (f == 5 && b) continue; /* the default model ships INT4: convert takes checkpoints, not installs */
            if (make_install(FIX[f], BITS[b], dir, sizeof dir)) return;
            parity pr;
            /* quick 2 (racecheck, slow per launch): a shorter timeline */
            int rc = quick == 2 ? run_parity(dir, 20, 3, &pr, why, sizeof why) : run_parity(dir, 40, 24, &pr, why, sizeof why);
            if (rc < 0) return;
            const char *bn = BITS[b] == 0 ? (f == 5 ? "INT4*" : "bf16") : BITS[b] == 8 ? "INT8" : "INT4"; /* *: as shipped */
            if (rc == 1) {
                fprintf(stderr, "  %-13s %-5s refused by the CUDA backend: %s\n", FIX[f], bn, why);
                refused++;
                continue;
            }
            ran++;
            if (parity_report(FIX[f], bn, dir, &pr)) return;
        }
    /* the 35B-A3B's MoE widths (wide_moe_model): the routed experts' kernels
     * at the released shapes' splits, prompt rows 16 a pass */
    if (!quick || quick == 3) {
        char dir[512], why[600] = "";
        if (wide_moe_model(dir, sizeof dir)) return;
        parity pr;
        const int rc = run_parity(dir, 40, 24, &pr, why, sizeof why);
        if (rc < 0) return;
        CHECK_MSG(rc == 0, "wide-moe INT4 refused by the CUDA backend: %s", why);
        ran++;
        if (parity_report("wide-moe", "INT4", dir, &pr)) return;
    }
    fprintf(stderr, "  %d installs compared, %d refused by the CUDA backend (shapes named above)\n", ran, refused);
    /* the default model and the tiny fixtures have shapes the kernels take */
    CHECK_MSG(ran >= (quick == 3 ? 1 : quick ? 2 : 8), "only %d installs ran on the GPU", ran);
}

/* Prompt chunks through the tensor-core products (q4gemm.cu: chunks of more
 * than 16 rows on 4-bit installs) against the CPU (16-row chunks, 24-bit
 * activations), every prompt row's logits. Why this tolerance: those
 * products round x to bf16 (2^-9 relative per element; the weights stay
 * exact), finer than the per-group int8 activations the engine runs by
 * default (half a step of max/127 per element). So the bound is what the
 * CPU's own default precision moves the same logits by (e8: 8-bit against
 * 24-bit activations, same prompt), with a 25% margin, and at least
 * 3e-2 * max(1, |L|max) (~10x what bf16 rounding gives a well-conditioned
 * model, far below a wrong op's O(|L|)). The random tiny fixtures amplify
 * activation rounding by orders of magnitude (tiny-dense INT4: e8 = 3.7 on
 * logits of 7.8), so there the bound is loose and the default model (trained
 * weights) is the sharp case. Top-1 must agree where the CPU's top-2 gap
 * exceeds twice the bound. The same prompt with TSC_GEMM=0 (the row
 * kernels) must give other bits (the chunks did take the tensor-core path)
 * and stay within REL_TOL of the CPU. Where cuBLAS is found the chunks'
 * products take it (weights and x rounded to bf16, blas.cu), and the same
 * prompt with TSC_BLAS=0 (q4gemm.cu's kernel, exact weights) must give other
 * bits within the same bound. Chunks 7 (the row kernels for every
 * op), 64 and 150 (one chunk, not a multiple of the 64-row tile). */
#define BF16_TOL 3e-2f

static int prompt_logits(ts_engine *e, const int32_t *ids, int n, int chunk, float *lg, ts_error *err) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.max_rows = chunk;
    ts_session *s = NULL;
    int rc = ts_session_new(e, &sp, &s, err);
    if (!rc) rc = ts_session_feed(s, ids, n, lg, NULL, err);
    ts_session_free(s);
    return rc;
}

TS_TEST(cuda_engine, prefill_chunks_tensor_cores_within_bf16_tolerance) {
    NEED_GPU();
    static const char *const FIX[] = {"tiny-dense", "tiny-moe", "default"};
    const int n = 150;
    int ran = 0;
    for (size_t f = 0; f < sizeof FIX / sizeof FIX[0]; f++) {
        char dir[512];
        if (make_install(FIX[f], f == 2 ? 0 : 4, dir, sizeof dir)) return;
        ts_error err = {0};
        ts_engine *ec = NULL, *eg = NULL, *e8 = NULL;
        if (open_on(dir, "cpu", &ec, &err) || open_on(dir, "cuda", &eg, &err) || open_bits(dir, "cpu", 8, &e8, &err)) {
            ts_test_fail(__FILE__, __LINE__, "%s: %s", dir, err.msg);
            ts_engine_close(ec);
            ts_engine_close(eg);
            return;
        }
        const int V = ts_engine_info(ec)->vocab_size;
        float *lc = malloc(sizeof(float) * (size_t)n * V), *lg = malloc(sizeof(float) * (size_t)n * V),
              *lr = malloc(sizeof(float) * (size_t)n * V);
        int32_t ids[150];
        uint64_t r = 0x51ed270b9f4a7c15ull + f;
        for (int i = 0; i < n; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; ids[i] = (int32_t)((r >> 33) % (uint64_t)V); }
        int ok = !prompt_logits(ec, ids, n, 16, lc, &err) && !prompt_logits(e8, ids, n, 16, lr, &err);
        CHECK_MSG(ok, "%s: cpu: %s", dir, err.msg);
        const float ecpu8 = ok ? ts_test_max_abs(lc, lr, (size_t)n * V) : 0.f; /* the CPU's own 8-bit activations */
        ts_engine_close(e8);
        static const int CH[] = {7, 64, 150};
        for (int k = 0; ok && k < 3; k++) {
            if (prompt_logits(eg, ids, n, CH[k], lg, &err)) { ts_test_fail(__FILE__, __LINE__, "%s: cuda: %s", dir, err.msg); break; }
            float emax = 0, lmax = 0;
            for (size_t i = 0; i < (size_t)n * V; i++) lmax = fmaxf(lmax, fabsf(lc[i]));
            const float tol = fmaxf(BF16_TOL * fmaxf(1.0f, lmax), 1.25f * ecpu8);
            int checked = 0, agree = 0;
            for (int i = 0; i < n; i++) {
                const float *a = lc + (size_t)i * V, *b = lg + (size_t)i * V;
                const float e = ts_test_max_abs(a, b, (size_t)V);
                emax = isnan(e) ? INFINITY : fmaxf(emax, e);
                float gap;
                const int ta = argmax(a, V, &gap), tb = argmax(b, V, NULL);
                if (gap > 2 * tol) checked++, agree += ta == tb;
            }
            int differs = -1;
            float erow = -1; /* the row kernels on the same chunks against the CPU (REL_TOL: f32-class) */
            if (CH[k] > 16) { /* the row kernels for the same chunks: other bits */
                setenv("TSC_GEMM", "0", 1);
                int rc = prompt_logits(eg, ids, n, CH[k], lr, &err);
                unsetenv("TSC_GEMM");
                CHECK_MSG(!rc, "%s: cuda, TSC_GEMM=0: %s", dir, err.msg);
                differs = !rc && memcmp(lr, lg, sizeof(float) * (size_t)n * V) != 0;
                erow = rc ? INFINITY : ts_test_max_abs(lc, lr, (size_t)n * V);
                CHECK_MSG(erow <= REL_TOL * fmaxf(1.0f, lmax), "%s chunk %d, row kernels: max abs logit error %.3g > %.3g",
                          FIX[f], CH[k], erow, REL_TOL * fmaxf(1.0f, lmax));
            }
            float eq4 = -1; /* with cuBLAS found: q4gemm.cu's kernel instead (TSC_BLAS=0), within the same bound */
            if (CH[k] > 16 && tsc_blas_ready()) {
                setenv("TSC_BLAS", "0", 1);
                int rc = prompt_logits(eg, ids, n, CH[k], lr, &err);
                unsetenv("TSC_BLAS");
                CHECK_MSG(!rc, "%s: cuda, TSC_BLAS=0: %s", dir, err.msg);
                eq4 = rc ? INFINITY : ts_test_max_abs(lc, lr, (size_t)n * V);
                CHECK_MSG(eq4 <= tol, "%s chunk %d, TSC_BLAS=0 (q4gemm.cu): max abs logit error %.3g > %.3g", FIX[f], CH[k],
                          eq4, tol);
                CHECK_MSG(rc || memcmp(lr, lg, sizeof(float) * (size_t)n * V) != 0,
                          "%s chunk %d: the same bits with TSC_BLAS=0: the chunk did not take cuBLAS", FIX[f], CH[k]);
            }
            fprintf(stderr, "  %-10s chunk %3d: max|err| %.3g (|logit| %.3g, CPU 8-bit %.3g, tol %.3g), top-1 %d/%d%s; "
                    "row kernels %.3g; q4gemm.cu %.3g (%s)\n", FIX[f], CH[k], emax, lmax, ecpu8, tol, agree, checked,
                    differs == 1 ? ", tensor-core path (differs from the row kernels)" : "", erow, eq4,
                    tsc_blas_ready() ? "the chunks on cuBLAS" : "no cuBLAS");
            if (CH[k] > 16 && f == 1) { /* the MoE chunk with its slots merged against slot by slot: the same
                                         * products per element and the same sums, so the same bits (a
                                         * tolerance would not do: on this random MoE a last-bit change
                                         * can flip a near-tied routing and move logits by O(1)) */
                setenv("TSC_MOE_MERGED", "0", 1);
                int rc = prompt_logits(eg, ids, n, CH[k], lr, &err);
                unsetenv("TSC_MOE_MERGED");
                const int same = !rc && !memcmp(lr, lg, sizeof(float) * (size_t)n * V);
                fprintf(stderr, "  %-10s chunk %3d: experts' slots merged against slot by slot: %s\n", FIX[f], CH[k],
                        same ? "bit-identical" : "DIFFER");
                CHECK_MSG(same, "%s chunk %d: merged slots differ from slot by slot (max %.3g)", FIX[f], CH[k],
                          rc ? INFINITY : ts_test_max_abs(lr, lg, (size_t)n * V));
            }
            if (!(emax <= tol) || !(erow <= REL_TOL * fmaxf(1.0f, lmax))) {
                layer_diag_n(dir, CH[k], 1);
                setenv("TSC_GEMM", "0", 1);
                layer_diag_n(dir, CH[k], 1);
                unsetenv("TSC_GEMM");
            }
            CHECK_MSG(emax <= tol, "%s chunk %d: max abs logit error %.3g > %.3g", FIX[f], CH[k], emax, tol);
            CHECK_MSG(agree == checked, "%s chunk %d: top-1 agrees on %d of %d rows", FIX[f], CH[k], agree, checked);
            CHECK_MSG(differs != 0, "%s chunk %d: the same bits as the row kernels: the chunk did not take the tensor-core "
                      "products", FIX[f], CH[k]);
        }
        ran++;
        free(lc), free(lg), free(lr);
        ts_engine_close(ec);
        ts_engine_close(eg);
    }
    CHECK(ran == 3);
}

typedef struct sink { int32_t *o; int n; } sink;
static int sink_cb(void *user, int32_t id) {
    sink *u = user;
    u->o[u->n++] = id;
    return 0;
}

static int gen_ids(ts_engine *e, const int32_t *prompt, int n, int32_t *out, int k, float temp, ts_error *err) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    ts_session *s = NULL;
    int rc = ts_session_new(e, &sp, &s, err);
    if (rc) return rc;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = k;
    gp.temperature = temp;
    gp.top_k = 40;
    gp.seed = 1234;
    sink u = {out, 0};
    ts_gen_stats st;
    rc = ts_generate(s, prompt, n, &gp, sink_cb, &u, &st, err);
    ts_session_free(s);
    return rc ? rc : u.n;
}

TS_TEST(cuda_engine, determinism_same_prompt_and_seed) {
    NEED_GPU();
    ts_error err = {0};
    ts_engine *eg = NULL, *ec = NULL;
    CHECK_MSG(!open_on("models/default", "cuda", &eg, &err), "%s", err.msg);
    const int32_t prompt[] = {1, 20, 300, 4000, 55, 6, 777, 8};
    int32_t a[48], b[48], g1[48], gc[48];
    int na = gen_ids(eg, prompt, 8, a, 48, 0.8f, &err), nb = gen_ids(eg, prompt, 8, b, 48, 0.8f, &err);
    CHECK_MSG(na == 48 && nb == 48, "sampled generation on the GPU: %s", err.msg);
    CHECK_MSG(!memcmp(a, b, sizeof a), "two GPU runs with the same prompt and seed differ");
    /* greedy: the GPU's ids equal the CPU's on the default model (top-2 gaps
     * of a trained model are wide) */
    int ng = gen_ids(eg, prompt, 8, g1, 48, 0.0f, &err);
    CHECK_MSG(!open_on("models/default", "cpu", &ec, &err), "%s", err.msg);
    int nc = gen_ids(ec, prompt, 8, gc, 48, 0.0f, &err);
    int same = 0;
    while (same < 48 && g1[same] == gc[same]) same++;
    fprintf(stderr, "  sampled x2: identical 48 tokens; greedy GPU vs CPU: first %d of 48 tokens equal\n", same);
    CHECK(ng == 48 && nc == 48);
    CHECK_MSG(same >= 16, "greedy GPU and CPU ids part after %d tokens", same);
    ts_engine_close(eg);
    ts_engine_close(ec);
}

/* Sampled generation on the GPU with the device's candidates (topn, the
 * default on a device) and without them (TS_SAMPLE_TOPN=0: the row read
 * back): the same tokens, twice over, for every configuration; and the
 * candidates decided every step where the rule says they must (top_k <=
 * 256, greedy with penalties) and none where they cannot (the full
 * distribution). */
static int gen_cfg(ts_engine *e, const char *mode, const ts_gen_params *gp, int32_t *out, long *dec) {
    if (mode) setenv("TS_SAMPLE_TOPN", mode, 1);
    else unsetenv("TS_SAMPLE_TOPN");
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    ts_session *s = NULL;
    ts_error err = {0};
    long a0, d0, a1, d1;
    ts_gen_topn_stats(&a0, &d0);
    int n = -1;
    if (!ts_session_new(e, &sp, &s, &err)) {
        const int32_t prompt[] = {1, 20, 300, 4000, 55, 6, 777, 8};
        sink u = {out, 0};
        if (!ts_generate(s, prompt, 8, gp, sink_cb, &u, NULL, &err)) n = u.n;
        else fprintf(stderr, "  generate: %s\n", err.msg);
    }
    ts_session_free(s);
    unsetenv("TS_SAMPLE_TOPN");
    ts_gen_topn_stats(&a1, &d1);
    *dec = d1 - d0;
    return n;
}

TS_TEST(cuda_engine, sampled_topn_same_tokens_as_the_row) {
    NEED_GPU();
    ts_error err = {0};
    ts_engine *eg = NULL;
    CHECK_MSG(!open_on("models/default", "cuda", &eg, &err), "%s", err.msg);
    struct { float temp, top_p, min_p, rep, pres, freq; int top_k, expect; } cf[] = {
        {0.8f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 40, 1},  /* top-k: every step from the candidates */
        {0.7f, 0.95f, 0.0f, 1.3f, 0.4f, 0.1f, 20, 1}, /* Qwen's shape, with every penalty */
        {0.0f, 1.0f, 0.0f, 1.2f, 0.0f, 0.0f, 0, 1},   /* greedy with a repetition penalty: N = 1 */
        {1.0f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0, -1},  /* top-p alone: when the max is kept alone */
        {1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},   /* the full distribution: the row every step */
        {1.0f, 1.0f, 0.2f, 1.0f, 0.0f, 0.0f, 0, -1},  /* min-p: when it cuts inside the candidates */
    };
    const int K = 48;
    for (size_t i = 0; i < sizeof cf / sizeof *cf; i++) {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = K;
        gp.temperature = cf[i].temp, gp.top_p = cf[i].top_p, gp.min_p = cf[i].min_p, gp.top_k = cf[i].top_k;
        gp.repeat_penalty = cf[i].rep, gp.presence_penalty = cf[i].pres, gp.frequency_penalty = cf[i].freq;
        gp.seed = 4321 + i;
        int32_t a[64], b[64], r[64];
        long da, db, dr;
        const int na = gen_cfg(eg, NULL, &gp, a, &da), nb = gen_cfg(eg, NULL, &gp, b, &db),
                  nr = gen_cfg(eg, "0", &gp, r, &dr);
        fprintf(stderr, "  config %zu: %d / %d / %d tokens, %ld and %ld steps decided by the candidates\n", i, na, nb,
                nr, da, db);
        CHECK_MSG(na == K && nb == K && nr == K, "config %zu: %d, %d, %d tokens", i, na, nb, nr);
        CHECK_MSG(!memcmp(a, b, sizeof(int32_t) * K), "config %zu: two runs with candidates differ", i);
        CHECK_MSG(!memcmp(a, r, sizeof(int32_t) * K), "config %zu: candidates and the row read back differ", i);
        CHECK_MSG(dr == 0, "config %zu: TS_SAMPLE_TOPN=0 still used candidates", i);
        if (cf[i].expect == 1) CHECK_MSG(da == K, "config %zu: %ld of %d steps decided", i, da, K);
        if (cf[i].expect == 0) CHECK_MSG(da == 0, "config %zu: %ld of %d steps decided", i, da, K);
    }
    ts_engine_close(eg);
}

/* Log-probabilities and the logit bias on the GPU (the device's topn: 16 +
 * 8N bytes a row read back): the values against log_softmax of the logits
 * a GPU session computes for the same ids (within 2e-5: the device sums
 * its exponentials in its own order), greedy and sampled; MTP drafting
 * (1..3) gives plain decoding's tokens and log-probabilities bit for bit,
 * with and without a bias; +100 forces a token at every greedy step. */
TS_TEST(cuda_engine, logprobs_and_logit_bias) {
    NEED_GPU();
    ts_error err = {0};
    ts_engine *eg = NULL;
    CHECK_MSG(!open_on("models/default", "cuda", &eg, &err), "%s", err.msg);
    static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
    const int T = (int)(sizeof pr / sizeof pr[0]);
    static lp_rec ref, got;
    for (int mode = 0; mode < 2; mode++) {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 32;
        gp.top_logprobs = mode ? TS_TOP_LOGPROBS_MAX : 5;
        if (mode) gp.temperature = 0.9f, gp.top_k = 40, gp.seed = 3;
        CHECK(lp_gen(eg, pr, T, &gp, 0, 0, &ref) == 0);
        int top_bad = 0;
        const double worst = lp_check(eg, pr, T, &ref, gp.top_logprobs, &top_bad);
        fprintf(stderr, "  %s: %d tokens, largest error %.2g, top lists %d wrong\n", mode ? "sampled, top 20" : "greedy, top 5",
                ref.n, worst, top_bad);
        CHECK_MSG(ref.n == 32 && !ref.order_bad, "%d entries, %d out of order", ref.n, ref.order_bad);
        CHECK_MSG(worst < 2e-5 && top_bad == 0, "GPU log-probabilities off log_softmax by %.3g, %d top lists wrong", worst,
                  top_bad);
    }
    const int32_t bid[2] = {11, 257};
    const float bv[2] = {2.5f, -1.5f};
    for (int biased = 0; biased < 2; biased++) {
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 120;
        gp.top_logprobs = 4;
        if (biased) gp.bias_ids = bid, gp.bias = bv, gp.n_bias = 2;
        CHECK(lp_gen(eg, pr, T, &gp, 0, 0, &ref) == 0);
        for (int M = 1; M <= 3; M++) {
            CHECK(lp_gen(eg, pr, T, &gp, M, 0, &got) == 0);
            CHECK_MSG(lp_same(&ref, &got) && !got.order_bad, "GPU MTP %d%s: tokens or log-probabilities differ from plain",
                      M, biased ? " with a bias" : "");
        }
    }
    int32_t forced = 4321;
    float up = 100.0f;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 8;
    gp.bias_ids = &forced, gp.bias = &up, gp.n_bias = 1;
    CHECK(lp_gen(eg, pr, T, &gp, 0, 0, &got) == 0);
    int all = got.ids.n == 8;
    for (int k = 0; k < got.ids.n; k++) all = all && got.ids.ids[k] == forced;
    CHECK_MSG(all, "a +100 bias did not force token %d at every GPU step", forced);
    ts_engine_close(eg);
}

/* ts_session_score on the GPU (the feed's rows read back, ranked on the
 * host): against log_softmax of the GPU's own plain-feed rows, leaving the
 * plain feed's state (lp_score_check: exact paths, 2e-5), and the CPU's
 * scores of the same text within twice the parity tolerance (a log-
 * probability is a logit less log Z: two logits' errors) at |logit| 30. */
TS_TEST(cuda_engine, score_matches_feed_and_cpu) {
    NEED_GPU();
    static const char *const dirs[] = {"models/default", "tests/fixtures/tiny-dense"};
    static ts_logprob og[(LP_SCORE_N - 1) * (1 + LP_SCORE_TOP)], oc[(LP_SCORE_N - 1) * (1 + LP_SCORE_TOP)];
    for (int d = 0; d < 2; d++) {
        ts_error err = {0};
        ts_engine *eg = NULL, *ec = NULL;
        CHECK_MSG(!open_on(dirs[d], "cuda", &eg, &err) && !open_on(dirs[d], "cpu", &ec, &err), "%s", err.msg);
        int bad = 0, bad_c = 0;
        const double worst = lp_score_check(eg, 5, (uint64_t)d + 1, og, &bad);
        lp_score_check(ec, 5, (uint64_t)d + 1, oc, &bad_c);
        double vs_cpu = 0;
        for (int i = 0; i < LP_SCORE_N - 1; i++) {
            const ts_logprob *g = og + (size_t)i * (1 + LP_SCORE_TOP), *c = oc + (size_t)i * (1 + LP_SCORE_TOP);
            bad += g[0].id != c[0].id;
            vs_cpu = fmax(vs_cpu, fabs((double)g[0].logprob - c[0].logprob));
        }
        fprintf(stderr, "  %-26s GPU scores: largest error %.2g against its rows, %.2g against the CPU's, %d wrong\n",
                dirs[d], worst, vs_cpu, bad);
        CHECK_MSG(worst < 2e-5 && bad == 0 && bad_c == 0, "%s: GPU scores off by %.3g, %d wrong", dirs[d], worst, bad);
        CHECK_MSG(vs_cpu < 2 * REL_TOL * 30, "%s: GPU scores %.3g off the CPU's", dirs[d], vs_cpu);
        ts_engine_close(eg);
        ts_engine_close(ec);
    }
}

/* Plain greedy decoding with one wait a token (ts_session_step: the pass,
 * the last hidden's copy and the argmax queued, the id read once) against
 * feed + argmax (three waits): the same ids and session state on the GPU,
 * dense and MoE (gen_oracle.h's one_wait_same). */
TS_TEST(cuda_engine, one_wait_step) {
    NEED_GPU();
    static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
    const char *dirs[] = {"models/default", "tests/fixtures/tiny-moe"};
    for (int d = 0; d < 2; d++) {
        ts_error err = {0};
        ts_engine *eg = NULL;
        CHECK_MSG(!open_on(dirs[d], "cuda", &eg, &err), "%s", err.msg);
        int32_t p[9];
        for (int i = 0; i < 9; i++) p[i] = pr[i] % ts_engine_info(eg)->vocab_size;
        CHECK_MSG(one_wait_same(eg, p, 9) == 0, "%s", dirs[d]);
        ts_engine_close(eg);
    }
}

/* Run-ahead greedy decoding on the GPU (gen/generate.c's ahead_loop: the
 * argmax's id fed to the next step on the device, the step past a stop
 * undone by flipping the GDN pairs back) against plain decoding (ahead =
 * -1): gen_oracle.h's ahead_same, every way a generation ends, with and
 * without a drafter's buffers, dense and MoE; and a CUDA session runs ahead
 * by default (auto), unless TS_AHEAD=0. */
TS_TEST(cuda_engine, ahead_exact) {
    NEED_GPU();
    static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
    const char *dirs[] = {"models/default", "tests/fixtures/tiny-moe", "tests/fixtures/tiny-dense"};
    for (int d = 0; d < 3; d++) {
        ts_error err = {0};
        ts_engine *eg = NULL;
        CHECK_MSG(!open_on(dirs[d], "cuda", &eg, &err), "%s", err.msg);
        if (!eg) continue;
        int32_t p[9];
        for (int i = 0; i < 9; i++) p[i] = pr[i] % ts_engine_info(eg)->vocab_size;
        CHECK_MSG(ahead_same(eg, p, 9, NULL) == 0, "%s", dirs[d]);
        ts_session *s = NULL;
        CHECK(ts_session_new(eg, NULL, &s, &err) == 0);
        const char *env = getenv("TS_AHEAD");
        CHECK_MSG(s && !!s->ahead_rows == !(env && !strcmp(env, "0")), "%s: a default session's run-ahead buffers: %d",
                  dirs[d], s ? !!s->ahead_rows : -1);
        ts_session_free(s);
        ts_engine_close(eg);
    }
}

/* MTP drafts chained on the device (mtp_draft.c's mtp_propose_chain: a
 * CUDA session runs ahead by default) against one draft at a time: the
 * same drafts (gen_oracle.h's mtp_chain_same; test_ahead.c's twin). */
TS_TEST(cuda_engine, mtp_chain_same_drafts) {
    NEED_GPU();
    ts_error err = {0};
    ts_engine *e = NULL;
    CHECK_MSG(!open_on("models/default", "cuda", &e, &err), "%s", err.msg);
    if (!e) return;
    CHECK(mtp_chain_same(e) == 0);
    ts_engine_close(e);
}

/* JSON-constrained generation on the GPU (the masked row read back): a
 * reply that ends by its stop id is one JSON object, and MTP drafting (1..3)
 * gives plain decoding's ids under the constraint, greedy. */
TS_TEST(cuda_engine, json_constraint) {
    NEED_GPU();
    ts_error err = {0};
    ts_engine *eg = NULL;
    ts_tokenizer *tok = NULL;
    ts_constraint *c = NULL;
    CHECK_MSG(!open_on("models/default", "cuda", &eg, &err), "%s", err.msg);
    CHECK(!ts_tokenizer_load("models/default", &tok, &err) && !ts_constraint_json(tok, 1, &c, &err));
    int32_t stop[8];
    const int n_stop = ts_chat_stop_ids("models/default", stop, 8, &err);
    ts_tokens pr = {0};
    const char *text = "Describe a cat as a JSON object:";
    CHECK(!ts_tokenizer_encode(tok, text, strlen(text), &pr, &err));
    static lp_rec ref, got;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 160;
    gp.stop_ids = stop, gp.n_stop = n_stop;
    gp.constraint = c;
    CHECK(lp_gen(eg, pr.ids, pr.n, &gp, 0, 0, &ref) == 0);
    const int ended = ref.ids.n < 160;
    ts_text out = {0};
    CHECK(!ts_tokenizer_decode(tok, ref.ids.ids, ref.ids.n - ended, &out, &err));
    cJSON *j = ended ? cJSON_Parse(out.s ? out.s : "") : NULL;
    fprintf(stderr, "  GPU, JSON constraint: %d tokens%s: %.80s\n", ref.ids.n, ended ? " and a stop" : "", out.s ? out.s : "");
    CHECK_MSG(!ended || cJSON_IsObject(j), "the finished reply '%s' is not one JSON object", out.s ? out.s : "");
    cJSON_Delete(j);
    ts_text_free(&out);
    for (int M = 1; M <= 3; M++) {
        CHECK(lp_gen(eg, pr.ids, pr.n, &gp, M, 0, &got) == 0);
        CHECK_MSG(got.ids.n == ref.ids.n && !memcmp(got.ids.ids, ref.ids.ids, sizeof(int32_t) * (size_t)ref.ids.n),
                  "GPU MTP %d under the constraint differs from plain", M);
    }
    ts_tokens_free(&pr);
    ts_constraint_free(c);
    ts_tokenizer_free(tok);
    ts_engine_close(eg);
}

/* mean NLL per token of ids[1..n) given the prefix, fed in one pass */
static double nll(ts_engine *e, const int32_t *ids, int n, ts_error *err) {
    const int V = ts_engine_info(e)->vocab_size;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n + 8;
    ts_session *s = NULL;
    if (ts_session_new(e, &sp, &s, err)) return -1;
    float *lg = malloc(sizeof(float) * (size_t)n * V);
    double tot = -1;
    if (lg && !ts_session_feed(s, ids, n, lg, NULL, err)) {
        tot = 0;
        for (int i = 0; i + 1 < n; i++) {
            const float *x = lg + (size_t)i * V;
            float mx = x[0];
            for (int v = 1; v < V; v++) mx = fmaxf(mx, x[v]);
            double se = 0;
            for (int v = 0; v < V; v++) se += exp((double)x[v] - mx);
            tot += log(se) + mx - x[ids[i + 1]];
        }
        tot /= n - 1;
    }
    free(lg);
    ts_session_free(s);
    return tot;
}

TS_TEST(cuda_engine, perplexity_default_model_within_half_a_percent) {
    NEED_GPU();
    ts_error err = {0};
    ts_tokenizer *tk = NULL;
    CHECK_MSG(!ts_tokenizer_load("models/default/tokenizer.json", &tk, &err), "%s", err.msg);
    FILE *f = fopen("README.md", "rb");
    CHECK_MSG(f, "README.md not found (run from the repository root)");
    char *txt = malloc(1 << 16);
    size_t len = fread(txt, 1, (1 << 16) - 1, f);
    fclose(f);
    ts_tokens tv = {0};
    int rc = ts_tokenizer_encode(tk, txt, len, &tv, &err);
    free(txt);
    CHECK_MSG(!rc, "%s", err.msg);
    const int n = tv.n < 512 ? tv.n : 512;
    ts_engine *eg = NULL, *ec = NULL;
    CHECK_MSG(!open_on("models/default", "cuda", &eg, &err), "%s", err.msg);
    CHECK_MSG(!open_on("models/default", "cpu", &ec, &err), "%s", err.msg);
    double ng = nll(eg, tv.ids, n, &err), nc = nll(ec, tv.ids, n, &err);
    const double pg = exp(ng), pc = exp(nc), rel = fabs(pg - pc) / pc;
    fprintf(stderr, "  default model, %d README tokens: perplexity cpu %.4f, cuda %.4f (%.4f%% apart)\n", n, pc, pg,
            100 * rel);
    CHECK_MSG(ng > 0 && nc > 0, "perplexity failed: %s", err.msg);
    CHECK_MSG(rel <= 0.005, "GPU perplexity %.4f vs CPU %.4f: %.3f%% apart (> 0.5%%)", pg, pc, 100 * rel);
    ts_tokens_free(&tv);
    ts_tokenizer_free(tk);
    ts_engine_close(eg);
    ts_engine_close(ec);
}

/* B > 0: a DFlash session of blocks of B rows, the engine with the drafter
 * ddir (NULL: dir/dflash) */
/* cache > 0: with --expert-cache of that many bytes (device slots) */
static void plan_case_x(const char *dir, int spec_ctx, int B, const char *ddir, uint64_t cache) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = spec_ctx;
    sp.dflash_block = B;
    ts_mem_plan *pl = malloc(sizeof *pl);
    ts_error err = {0};
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cuda";
    ep.act_bits = 24;
    ep.dflash = B > 0;
    ep.drafter_dir = ddir;
    ep.expert_cache = cache;
    CHECK_MSG(!ts_mem_plan_dir_ex(dir, &ep, &sp, pl, &err), "plan: %s", err.msg);
    size_t before[TS_MEM_N];
    for (int k = 0; k < TS_MEM_N; k++) before[k] = ts_mem_used_in(TS_DOM_DEVICE, (ts_mem_cat)k);
    const size_t d0 = dev_used();
    ts_engine *e = NULL;
    ts_session *s = NULL;
    CHECK_MSG(!ts_engine_open(dir, &ep, &e, &err), "%s", err.msg);
    CHECK_MSG(!ts_session_new(e, &sp, &s, &err), "%s", err.msg);
    int bad = 0;
    for (int k = 0; k < TS_MEM_N; k++) {
        size_t got = ts_mem_used_in(TS_DOM_DEVICE, (ts_mem_cat)k) - before[k];
        if (got != pl->bytes[TS_DOM_DEVICE][k]) {
            fprintf(stderr, "  %s: device %s: plan %llu, allocated %zu\n", dir, ts_mem_cat_name((ts_mem_cat)k),
                    (unsigned long long)pl->bytes[TS_DOM_DEVICE][k], got);
            bad++;
        }
    }
    size_t ours = 0, fr = 0, tot = 0;
    ts_engine_device_mem(e, &ours, &fr, &tot);
    fprintf(stderr, "  %s%s%s: plan --backend cuda %llu device bytes == allocated %zu; driver and others hold %.1f MB\n", dir,
            B ? " --spec dflash" : "", cache ? " --expert-cache" : "", (unsigned long long)pl->dom_bytes[TS_DOM_DEVICE], dev_used() - d0,
            tot > fr + ours ? (tot - fr - ours) / 1e6 : 0.0);
    /* a decode step allocates nothing on the device (the staging of host reads is pinned host memory) */
    int32_t id = 1;
    CHECK_MSG(!ts_session_feed(s, &id, 1, NULL, NULL, &err), "%s", err.msg);
    CHECK_MSG(dev_used() - d0 == pl->dom_bytes[TS_DOM_DEVICE], "a feed changed the device bytes");
    ts_session_free(s);
    ts_engine_close(e);
    free(pl);
    CHECK_MSG(!bad, "%s: the plan and the device allocations differ in %d categories", dir, bad);
    CHECK_MSG(dev_used() == d0, "device bytes after close: %zu, before open: %zu", dev_used(), d0);
    CHECK_MSG(ts_mem_used_in(TS_DOM_PINNED, TS_MEM_SCRATCH) == 0, "pinned staging left after close");
}
static void plan_case_df(const char *dir, int spec_ctx, int B, const char *ddir) { plan_case_x(dir, spec_ctx, B, ddir, 0); }
static void plan_case(const char *dir, int spec_ctx) { plan_case_df(dir, spec_ctx, 0, NULL); }

TS_TEST(cuda_engine, plan_equals_device_allocations_and_close_returns_all) {
    NEED_GPU();
    plan_case("models/default", 1024);
    char dir[512];
    if (make_install("tiny-moe", 4, dir, sizeof dir)) return;
    plan_case(dir, 200);
    /* expert streaming: the device slots one block of the cache's category */
    plan_case_x(dir, 200, 0, NULL, 1 << 20);
    /* with the DFlash drafter: its weights and buffers on the device too */
    struct stat sb;
    if (!stat("models/default/dflash/config.json", &sb)) plan_case_df("models/default", 1024, 16, NULL);
    char dd[512];
    const char *d = ts_test_dflash_drafter("tiny-dense", "df-cuda-plan");
    CHECK(d);
    snprintf(dd, sizeof dd, "%s", d);
    plan_case_df("tests/fixtures/tiny-dense", 300, 8, dd);
}

TS_TEST(cuda_engine, errors_are_clear) {
    NEED_GPU();
    ts_error err = {0};
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cuda";
    ep.device = 99;
    ts_engine *e = NULL;
    const size_t d0 = dev_used();
    int rc = ts_engine_open("models/default", &ep, &e, &err);
    fprintf(stderr, "  --device 99: %s\n", err.msg);
    CHECK_MSG(rc == TS_E_ARG && strstr(err.msg, "--device 99") && strstr(err.msg, "CUDA device"), "got: %s", err.msg);
    ep.backend = "gpu";
    ep.device = 0;
    rc = ts_engine_open("models/default", &ep, &e, &err);
    CHECK_MSG(rc == TS_E_ARG && strstr(err.msg, "auto, cpu or cuda"), "got: %s", err.msg);
    /* MTP and DFlash drafting sessions open on CUDA */
    ep.backend = "cuda";
    CHECK_MSG(!ts_engine_open("models/default", &ep, &e, &err), "%s", err.msg);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.spec_draft = 2;
    ts_session *s = NULL;
    rc = ts_session_new(e, &sp, &s, &err);
    ts_session_free(s);
    ts_engine_close(e);
    CHECK_MSG(rc == 0, "an MTP drafting session on CUDA: %s", err.msg);
    struct stat sb;
    const int have_df = !stat("models/default/dflash/config.json", &sb);
    if (have_df) {
        ep.dflash = 1;
        CHECK_MSG(!ts_engine_open("models/default", &ep, &e, &err), "a DFlash engine on CUDA: %s", err.msg);
        sp.spec_draft = 0;
        sp.dflash_block = 8;
        rc = ts_session_new(e, &sp, &s, &err);
        ts_session_free(s);
        ts_engine_close(e);
        CHECK_MSG(rc == 0, "a DFlash drafting session on CUDA: %s", err.msg);
        ep.dflash = 0;
    }
    /* a drafter whose attention the kernels do not take: refused before
     * any upload, the drafter and the shape named */
    const char *dd = ts_test_dflash_drafter("tiny-dense", "df-cuda-d40");
    CHECK(dd);
    char out[4096];
    CHECK(ts_test_sh(out, sizeof out, "sed -i 's/\"head_dim\": 32/\"head_dim\": 40/' %s/config.json", dd) == 0);
    ep.dflash = 1;
    ep.drafter_dir = dd;
    rc = ts_engine_open("tests/fixtures/tiny-dense", &ep, &e, &err);
    fprintf(stderr, "  a drafter of head dim 40 on CUDA: %s\n", err.msg);
    CHECK_MSG(rc == TS_E_UNSUPPORTED && strstr(err.msg, "DFlash drafter") && strstr(err.msg, "head dim 40"),
              "drafter head dim 40 on CUDA: %s", err.msg);
    ep.dflash = 0;
    ep.drafter_dir = NULL;
    CHECK_MSG(dev_used() == d0, "device bytes not returned after the failures");
    /* no device at all: the CLI in a process that sees none */
    rc = ts_test_sh(out, sizeof out, "CUDA_VISIBLE_DEVICES= %s run -m models/default --backend cuda -p hi -n 2 2>&1",
                    ts_test_bin());
    fprintf(stderr, "  no device, --backend cuda: %s", out);
    CHECK_MSG(rc != 0 && strstr(out, "no CUDA device"), "got: %s", out);
    rc = ts_test_sh(out, sizeof out, "CUDA_VISIBLE_DEVICES= %s run -m models/default -p hi -n 2 2>&1", ts_test_bin());
    CHECK_MSG(rc == 0 && strstr(out, "running on the CPU"), "auto without a device: %s", out);
    /* auto keeps the GPU for MTP drafting: it tries CUDA first (and says why
     * it falls back when there is none) */
    rc = ts_test_sh(out, sizeof out, "CUDA_VISIBLE_DEVICES= %s run -m models/default --spec mtp --draft 2 -p hi -n 4 2>&1",
                    ts_test_bin());
    CHECK_MSG(rc == 0 && strstr(out, "running on the CPU"), "auto --spec mtp without a device: %s", out);
    rc = ts_test_sh(out, sizeof out, "%s run -m models/default --spec mtp --draft 3 -p 'Once upon a time' -n 24 2>&1",
                    ts_test_bin());
    fprintf(stderr, "  auto --spec mtp with a device: %s", out);
    CHECK_MSG(rc == 0 && strstr(out, "cuda:0") && strstr(out, "mean accepted length"), "auto --spec mtp: %s", out);
    /* and for DFlash drafting, which runs there too now */
    if (have_df) {
        rc = ts_test_sh(out, sizeof out, "CUDA_VISIBLE_DEVICES= %s run -m models/default --spec dflash --block 4 -p hi -n 4 2>&1",
                        ts_test_bin());
        CHECK_MSG(rc == 0 && strstr(out, "running on the CPU"), "auto --spec dflash without a device: %s", out);
        rc = ts_test_sh(out, sizeof out, "%s run -m models/default --spec dflash --block 8 -p 'Once upon a time' -n 24 2>&1",
                        ts_test_bin());
        fprintf(stderr, "  auto --spec dflash with a device: %s", out);
        CHECK_MSG(rc == 0 && strstr(out, "cuda:0") && strstr(out, "mean accepted length"), "auto --spec dflash: %s", out);
    }
}

/* The shape check and the device plan need a CUDA build, not a device (a
 * plan-only backend opens none): they run on any machine of a CUDA build. */
TS_TEST(cuda_engine, shapes_refused_before_upload_and_plan_without_device) {
    if (!ts_cuda_built()) SKIP("built without CUDA");
    ts_backend *be = NULL;
    ts_backend_params bp = {0};
    bp.plan_only = 1;
    ts_error err = {0};
    CHECK_MSG(!ts_cuda_backend_new(&bp, &be, &err), "%s", err.msg);
    /* 9B-like: fused GDN heads, D 256; the default model's 64/64 GDN heads */
    CHECK(!ts_cuda_backend_shapes(be, 256, 16, 4, 64, 128, 128, 4, 16, 32, 0, 0, &err));
    CHECK(!ts_cuda_backend_shapes(be, 128, 4, 2, 64, 64, 64, 4, 4, 8, 256, 8, &err));
    int rc = ts_cuda_backend_shapes(be, 40, 4, 4, 10, 48, 24, 4, 1, 3, 6, 1, &err);
    CHECK_MSG(rc == TS_E_UNSUPPORTED && strstr(err.msg, "head dim 40"), "D 40: %s", err.msg);
    rc = ts_cuda_backend_shapes(be, 128, 4, 2, 64, 256, 64, 4, 4, 8, 0, 0, &err);
    CHECK_MSG(rc == TS_E_UNSUPPORTED && strstr(err.msg, "GDN"), "dk 256: %s", err.msg);
    rc = ts_cuda_backend_shapes(be, 128, 4, 2, 64, 64, 64, 4, 4, 8, 64, 40, &err);
    CHECK_MSG(rc == TS_E_UNSUPPORTED && strstr(err.msg, "MoE"), "top-k 40: %s", err.msg);
    ts_backend_free(be);
    /* the device plan of the default model: weights, caches and scratch on the device */
    ts_mem_plan *pl = malloc(sizeof *pl);
    ts_session_params sp;
    ts_session_params_default(&sp);
    CHECK_MSG(!plan_cuda("models/default", &sp, pl, &err), "%s", err.msg);
    CHECK(pl->bytes[TS_DOM_DEVICE][TS_MEM_WEIGHTS] > 0 && pl->bytes[TS_DOM_DEVICE][TS_MEM_KV] > 0);
    CHECK(pl->bytes[TS_DOM_HOST][TS_MEM_KV] == 0 && pl->bytes[TS_DOM_HOST][TS_MEM_WEIGHTS] == 0);
    fprintf(stderr, "  plan --backend cuda, default model: %llu device bytes, %llu host\n",
            (unsigned long long)pl->dom_bytes[TS_DOM_DEVICE], (unsigned long long)pl->dom_bytes[TS_DOM_HOST]);
    free(pl);
}

/* ---- speculative decoding on the GPU (MTP drafts, verify, lazy rollback) ----
 * Every comparison below is CUDA against CUDA, byte for byte: drafted
 * greedy output against plain greedy output, and the device state after a
 * verify and a rollback against the state after one-row steps. That is the
 * exactness the row-exact ops promise (backend.h): a verify row has the bits
 * of a decode row, a replayed row those of the decode row it replaces. */

/* An INT4 install of random weights of the shape json, written once per
 * run as <tmp>/<name>-q4 (its path into dir): 0, or the error (the test
 * fails). */
static int synth_once(const char *name, const char *json, char *dir, size_t cap) {
    char shape[600];
    snprintf(shape, sizeof shape, "%s/%s.json", ts_test_tmpdir(), name);
    snprintf(dir, cap, "%s/%s-q4", ts_test_tmpdir(), name);
    struct stat sb;
    if (stat(dir, &sb) == 0) return 0;
    FILE *f = fopen(shape, "w");
    if (!f) { ts_test_fail(__FILE__, __LINE__, "cannot write %s", shape); return -1; }
    fputs(json, f);
    fclose(f);
    ts_convert_params p;
    ts_convert_params_default(&p);
    p.bits = 4;
    p.quiet = 1;
    ts_error err = {0};
    int rc = ts_synth(shape, dir, &p, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "synth %s: %s", shape, err.msg);
    return rc;
}

/* A small synthetic checkpoint whose GDN heads take the fused kernels of
 * gdn.cu (dk = dv = 128, 4 taps; no fixture has them): random INT4 weights,
 * an MTP head, 4 layers (3 GDN, 1 attention). */
static int fused_model(char *dir, size_t cap) {
    return synth_once(
        "fused-gdn",
        "{\"model_type\": \"qwen3_5\", \"vocab_size\": 2048, \"hidden_size\": 256, \"num_hidden_layers\": 4,\n"
        " \"layer_types\": [\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\"],\n"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 128,\n"
        " \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 128,\n"
        " \"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4, \"rms_norm_eps\": 1e-06,\n"
        " \"max_position_embeddings\": 4096,\n"
        " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000.0, \"partial_rotary_factor\": 0.25},\n"
        " \"mtp_num_hidden_layers\": 1, \"tie_word_embeddings\": true, \"eos_token_id\": 2047,\n"
        " \"intermediate_size\": 512}\n",
        dir, cap);
}

/* A small synthetic MoE checkpoint with the 35B-A3B's layer widths (hidden
 * 2048, experts of 512, 8 of them a token, a shared expert of 512, a bf16
 * router): the routed experts' dp4a kernels at the splits and unrolls the
 * released shapes take (several 1024-column steps a row, KS > 1), which no
 * fixture reaches (tiny-moe's rows are one step). Random INT4 weights, 16
 * experts, 2 layers (GDN, attention), an MTP head. */
static int wide_moe_model(char *dir, size_t cap) {
    return synth_once(
        "wide-moe",
        "{\"model_type\": \"qwen3_5_moe\", \"vocab_size\": 2048, \"hidden_size\": 2048, \"num_hidden_layers\": 2,\n"
        " \"layer_types\": [\"linear_attention\", \"full_attention\"],\n"
        " \"num_attention_heads\": 16, \"num_key_value_heads\": 2, \"head_dim\": 256,\n"
        " \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 32, \"linear_key_head_dim\": 128,\n"
        " \"linear_value_head_dim\": 128, \"linear_conv_kernel_dim\": 4, \"rms_norm_eps\": 1e-06,\n"
        " \"max_position_embeddings\": 4096,\n"
        " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000.0, \"partial_rotary_factor\": 0.25},\n"
        " \"mtp_num_hidden_layers\": 1, \"tie_word_embeddings\": false, \"eos_token_id\": 2047,\n"
        " \"num_experts\": 16, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 512,\n"
        " \"shared_expert_intermediate_size\": 512}\n",
        dir, cap);
}

/* The models the speculative tests run: name, directory. */
typedef struct spec_model { const char *name; char dir[512]; } spec_model;

/* The fixtures with an MTP head (all of them), the tiny MoE at INT4, the
 * fused-kernel shape; the default model when with_default. Returns how many. */
static int spec_models(spec_model *o, int with_default) {
    static const char *const FX[] = {"tiny-dense", "tiny-moe", "alt-dense", "alt-moe", "alt-moe-tied"};
    int n = 0;
    for (size_t i = 0; i < sizeof FX / sizeof FX[0]; i++, n++) {
        o[n].name = FX[i];
        snprintf(o[n].dir, sizeof o[n].dir, "tests/fixtures/%s", FX[i]);
    }
    o[n].name = "tiny-moe INT4";
    if (make_install("tiny-moe", 4, o[n].dir, sizeof o[n].dir)) return -1;
    n++;
    o[n].name = "fused-gdn INT4";
    if (fused_model(o[n].dir, sizeof o[n].dir)) return -1;
    n++;
    o[n].name = "wide-moe INT4";
    if (wide_moe_model(o[n].dir, sizeof o[n].dir)) return -1;
    n++;
    if (with_default) {
        o[n].name = "default";
        snprintf(o[n].dir, sizeof o[n].dir, "models/default");
        n++;
    }
    return n;
}

/* An engine on CUDA; NULL and a note when the backend refuses the shape. */
static ts_engine *spec_open(const spec_model *m) {
    ts_engine *e = NULL;
    ts_error err = {0};
    if (open_on(m->dir, "cuda", &e, &err)) {
        if (err.code == TS_E_UNSUPPORTED) fprintf(stderr, "  %-15s refused by the CUDA backend: %s\n", m->name, err.msg);
        else ts_test_fail(__FILE__, __LINE__, "%s: %s", m->name, err.msg);
        return NULL;
    }
    if (!e->model.has_mtp) {
        fprintf(stderr, "  %-15s has no MTP head\n", m->name);
        ts_engine_close(e);
        return NULL;
    }
    return e;
}


static const int32_t SPROMPT[] = {11, 5, 301, 42, 7, 99, 250, 3, 18, 64, 120, 9};
#define T_SPROMPT ((int)(sizeof SPROMPT / sizeof SPROMPT[0]))

/* a holds exactly n ids, the first n of b's */
static int same_ids(const collect *a, const collect *b, int n) {
    return a->n == n && b->n >= n && !memcmp(a->ids, b->ids, sizeof(int32_t) * (size_t)n);
}

/* Drafted greedy equals plain greedy on the GPU, M = 1..8, on every
 * fixture the backend takes, a tiny MoE at INT4 and the fused-kernel shape:
 * 240 tokens with oracle drafts (the plain output with an eighth of the
 * drafts corrupted: every acceptance length and rollback occurs), and the
 * model's own MTP drafts (240 tokens at M = 1, 40 otherwise: the random
 * heads are nearly always rejected). */
TS_TEST(cuda_engine, spec_greedy_exact_fixtures) {
    NEED_GPU();
    spec_model ms[10];
    const int nm = spec_models(ms, 0);
    CHECK(nm > 0);
    const int N = 240;
    int ran = 0, keep_seen[TS_SPEC_MAX_DRAFT] = {0};
    for (int k = 0; k < nm; k++) {
        ts_engine *e = spec_open(&ms[k]);
        if (!e) continue;
        static collect ref, got;
        ts_gen_stats st;
        CHECK(oracle_generate(e, SPROMPT, T_SPROMPT, 1024, N, 0, NULL, &ref, &st) == 0);
        const int n = ref.n; /* a random model may stop at its eos */
        CHECK_MSG(n >= 16, "%s: plain run gave %d tokens", ms[k].name, n);
        int acc = 0, blocks = 0;
        for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
            oracle o = {ref.ids, ref.n, T_SPROMPT, 12345u + M, 0};
            CHECK(oracle_generate(e, SPROMPT, T_SPROMPT, 1024, N, M, &o, &got, &st) == 0);
            CHECK_MSG(same_ids(&got, &ref, n), "%s M=%d (oracle drafts): %d tokens differ from plain greedy's %d",
                      ms[k].name, M, got.n, n);
            CHECK_MSG(st.n_accepted > 0 && st.n_accepted < st.n_drafted, "%s M=%d: accepted %d of %d", ms[k].name, M,
                      st.n_accepted, st.n_drafted);
            acc += st.n_accepted;
            blocks += st.n_blocks;
            for (int j = 0; j < M; j++) keep_seen[j] += st.accepted_at[j];
            const int n2 = M == 1 ? N : 40;
            CHECK(oracle_generate(e, SPROMPT, T_SPROMPT, 1024, n2, M, NULL, &got, &st) == 0);
            CHECK_MSG(same_ids(&got, &ref, n2 < n ? n2 : n), "%s M=%d (MTP drafts): output differs from plain greedy",
                      ms[k].name, M);
            CHECK(st.n_drafted > 0);
        }
        fprintf(stderr, "  %-15s 16 drafted runs identical to plain greedy (%d tokens); oracle: %d drafts accepted over "
                "%d blocks\n", ms[k].name, n, acc, blocks);
        ran++;
        ts_engine_close(e);
    }
    for (int j = 0; j < TS_SPEC_MAX_DRAFT; j++) CHECK_MSG(keep_seen[j] > 0, "draft position %d never accepted", j + 1);
    /* the tiny fixtures and the fused shape have shapes the kernels take */
    CHECK_MSG(ran >= 4, "only %d models ran on the GPU", ran);
}

/* The context ends inside a block (and, separately, the token budget):
 * drafted output equals plain greedy, which stops when the context is full. */
TS_TEST(cuda_engine, spec_context_limit_mid_block) {
    NEED_GPU();
    spec_model ms[10];
    const int nm = spec_models(ms, 1);
    CHECK(nm > 0);
    int ran = 0;
    for (int k = 0; k < nm; k++) {
        /* tiny-moe (bf16 and INT4), the fused shape and the default model */
        if (strcmp(ms[k].name, "tiny-moe") && strcmp(ms[k].name, "tiny-moe INT4") && strcmp(ms[k].name, "fused-gdn INT4") &&
            strcmp(ms[k].name, "default"))
            continue;
        ts_engine *e = spec_open(&ms[k]);
        if (!e) continue;
        static collect ref, got;
        ts_gen_stats st;
        for (int extra = 29; extra <= 31; extra++) {
            const int n_ctx = T_SPROMPT + extra;
            CHECK(oracle_generate(e, SPROMPT, T_SPROMPT, n_ctx, 1000, 0, NULL, &ref, &st) == 0);
            if (ref.n != extra + 1) { /* stopped at the eos before the limit: nothing to test at this length */
                fprintf(stderr, "  %s: plain run stopped after %d tokens in a context of %d\n", ms[k].name, ref.n, n_ctx);
                continue;
            }
            for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
                oracle o = {ref.ids, ref.n, T_SPROMPT, 777u + M, 0};
                CHECK(oracle_generate(e, SPROMPT, T_SPROMPT, n_ctx, 1000, M, &o, &got, &st) == 0);
                CHECK_MSG(same_ids(&got, &ref, ref.n), "%s ctx %d M=%d (oracle): %d tokens, plain %d", ms[k].name, n_ctx,
                          M, got.n, ref.n);
                CHECK(oracle_generate(e, SPROMPT, T_SPROMPT, n_ctx, 1000, M, NULL, &got, &st) == 0);
                CHECK_MSG(same_ids(&got, &ref, ref.n), "%s ctx %d M=%d (MTP): %d tokens, plain %d", ms[k].name, n_ctx, M,
                          got.n, ref.n);
            }
        }
        CHECK(oracle_generate(e, SPROMPT, T_SPROMPT, 512, 23, 0, NULL, &ref, &st) == 0);
        for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
            oracle o = {ref.ids, ref.n, T_SPROMPT, 99u + M, 0};
            CHECK(oracle_generate(e, SPROMPT, T_SPROMPT, 512, 23, M, &o, &got, &st) == 0);
            CHECK_MSG(same_ids(&got, &ref, ref.n), "%s budget 23, M=%d", ms[k].name, M);
        }
        fprintf(stderr, "  %-15s contexts of %d..%d tokens and a budget of 23: drafted = plain, M = 1..8\n", ms[k].name,
                T_SPROMPT + 29, T_SPROMPT + 31);
        ran++;
        ts_engine_close(e);
    }
    CHECK_MSG(ran >= 3, "only %d models ran on the GPU", ran);
}

/* The bundled model with its trained MTP head on text: drafted greedy equals
 * plain greedy, 520 tokens at M = 3 and with oracle drafts at M = 5, 200
 * tokens at every other M; acceptance and speed printed (not asserted). */
TS_TEST(cuda_engine, spec_greedy_exact_default_model) {
    NEED_GPU();
    ts_error err = {0};
    ts_tokenizer *tk = NULL;
    CHECK_MSG(!ts_tokenizer_load("models/default/tokenizer.json", &tk, &err), "%s", err.msg);
    static const char TXT[] = "The history of the city begins with a small settlement on the river, where traders from "
                              "the north met farmers from the valley. Over the next centuries";
    ts_tokens tv = {0};
    CHECK_MSG(!ts_tokenizer_encode(tk, TXT, strlen(TXT), &tv, &err), "%s", err.msg);
    ts_tokenizer_free(tk);
    ts_engine *e = NULL;
    CHECK_MSG(!open_on("models/default", "cuda", &e, &err), "%s", err.msg);
    static collect ref, got;
    ts_gen_stats st;
    const int N = 520;
    CHECK(oracle_generate(e, tv.ids, tv.n, 2048, N, 0, NULL, &ref, &st) == 0);
    const int n = ref.n;
    const double plain_tps = st.t_decode > 0 ? (st.n_gen - 1) / st.t_decode : 0;
    fprintf(stderr, "  default model, %d prompt tokens: plain greedy %d tokens, %.0f tok/s\n", tv.n, n, plain_tps);
    CHECK_MSG(n >= 200, "plain run gave %d tokens", n);
    for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
        const int nm = M == 3 ? N : 200;
        CHECK(oracle_generate(e, tv.ids, tv.n, 2048, nm, M, NULL, &got, &st) == 0);
        const int want = nm < n ? nm : n;
        const double tps = st.t_decode > 0 ? (st.n_gen - 1) / st.t_decode : 0;
        fprintf(stderr, "  --draft %d: %d tokens, %d/%d drafts accepted (%.2f tokens/verify), %.0f tok/s\n", M, got.n,
                st.n_accepted, st.n_drafted, st.n_blocks ? (double)(st.n_accepted + st.n_blocks) / st.n_blocks : 0, tps);
        CHECK_MSG(same_ids(&got, &ref, want), "default model M=%d (MTP drafts): output differs from plain greedy", M);
        CHECK_MSG(st.n_accepted > 0, "default model M=%d: no draft accepted (a trained head)", M);
    }
    oracle o = {ref.ids, ref.n, tv.n, 4242u, 0};
    CHECK(oracle_generate(e, tv.ids, tv.n, 2048, N, 5, &o, &got, &st) == 0);
    CHECK_MSG(same_ids(&got, &ref, n), "default model M=5 (oracle drafts): output differs from plain greedy");
    ts_tokens_free(&tv);
    ts_engine_close(e);
}

/* n-gram (prompt lookup) drafting on the GPU: its drafts come from the
 * host (gen/ngram_draft.c) and are verified by the device's verify pass and
 * lazy rollback, so greedy output must equal plain greedy bit for bit. The
 * default model copies a repeated passage (real acceptance); tiny-moe gets
 * a planted history (gen params ngram_ctx: the plain continuation with
 * about one id in 8 wrong), so drafts are accepted and rejected at every
 * length on an MoE model too. */
static int ngram_run(ts_engine *e, const int32_t *pr, int T, int M, int nmin, int nmax, const int32_t *hist, int nh,
                     int N, collect *c, ts_gen_stats *st) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 2048;
    sp.ngram_draft = M;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err)) { ts_test_fail(__FILE__, __LINE__, "session: %s", err.msg); return -1; }
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = N;
    gp.spec_draft = M;
    gp.spec_ngram = M ? nmax : 0;
    gp.ngram_min = nmin;
    gp.ngram_ctx = hist, gp.n_ngram_ctx = nh;
    c->n = 0;
    memset(st, 0, sizeof *st);
    const int rc = ts_generate(s, pr, T, &gp, on_tok, c, st, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "generate (n-gram M %d): %s", M, err.msg);
    ts_session_free(s);
    return rc;
}

TS_TEST(cuda_engine, ngram_greedy_exact) {
    NEED_GPU();
    ts_error err = {0};
    static const char PASSAGE[] =
        "The old mill stood by the river, and every morning the miller opened the gate to let the water turn the wheel. "
        "The children of the village came to watch the stones grind the grain into flour. ";
    char text[1024];
    snprintf(text, sizeof text, "%s%sThe old mill stood", PASSAGE, PASSAGE);
    ts_tokenizer *tk = NULL;
    CHECK_MSG(!ts_tokenizer_load("models/default/tokenizer.json", &tk, &err), "%s", err.msg);
    ts_tokens tv = {0};
    CHECK_MSG(!ts_tokenizer_encode(tk, text, strlen(text), &tv, &err), "%s", err.msg);
    ts_tokenizer_free(tk);
    static collect ref, got;
    static int32_t hist[400];
    ts_gen_stats st;
    for (int d = 0; d < 2; d++) {
        const char *dir = d ? "tests/fixtures/tiny-moe" : "models/default";
        ts_engine *e = NULL;
        CHECK_MSG(!open_on(dir, "cuda", &e, &err), "%s: %s", dir, err.msg);
        if (!e) continue;
        const int N = d ? 300 : 200;
        int32_t fpr[32];
        for (int i = 0; i < 29; i++) fpr[i] = (int32_t)((i % 12) * 37 + 5); /* 12 ids twice and 5 again */
        const int32_t *pr = d ? fpr : tv.ids;
        const int T = d ? 29 : tv.n;
        CHECK(ngram_run(e, pr, T, 0, 0, 0, NULL, 0, N, &ref, &st) == 0 && ref.n == N);
        long acc = 0, drafted = 0;
        for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
            uint64_t seed = 77u * (uint64_t)M + 1;
            for (int i = 0; i < N; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                hist[i] = (seed >> 33) % 8 == 0 ? (ref.ids[i] + 1) % 7 : ref.ids[i];
            }
            CHECK(ngram_run(e, pr, T, M, d ? 2 : 0, 4, d ? hist : NULL, d ? N : 0, N, &got, &st) == 0);
            CHECK_MSG(got.n == N && same_ids(&got, &ref, N), "%s M=%d (n-gram drafts): output differs from plain greedy",
                      dir, M);
            CHECK_MSG(st.n_accepted > 0 && (!d || st.n_accepted < st.n_drafted), "%s M=%d: %d of %d drafts accepted", dir,
                      M, st.n_accepted, st.n_drafted);
            acc += st.n_accepted, drafted += st.n_drafted;
        }
        fprintf(stderr, "  %s: M 1..8 identical to plain greedy (%d tokens), %ld of %ld n-gram drafts accepted\n", dir, N,
                acc, drafted);
        ts_engine_close(e);
    }
    ts_tokens_free(&tv);
}

/* The first layer whose device state differs between a and b (KV rows below
 * pos for attention layers, the live conv and recurrent state for GDN
 * layers, read back byte for byte; a pending lazy rollback must have been
 * applied), n_layers if the positions or pending rows differ or a read
 * failed, -1 if all equal. */
static int dev_state_diff(ts_session *a, ts_session *b) {
    const ts_model *m = &a->e->model;
    const ts_config *c = &m->cfg;
    if (a->pos != b->pos || a->st.gdn_pend || b->st.gdn_pend) return c->n_layers;
    const size_t nkv = (size_t)a->pos * m->kvdim, nconv = (size_t)(c->conv_k - 1) * m->C;
    const size_t nS = (size_t)c->Hv * c->dk * c->dv;
    size_t big = nkv > nconv ? nkv : nconv;
    if (nS > big) big = nS;
    float *x = calloc(big + 1, sizeof(float)), *y = calloc(big + 1, sizeof(float));
    int diff = -1;
    for (int L = 0; L < c->n_layers && diff < 0 && x && y; L++) {
        const float *pa[2], *pb[2];
        size_t cnt[2];
        if (c->layer_full[L]) {
            pa[0] = a->st.kv[L].k, pa[1] = a->st.kv[L].v, pb[0] = b->st.kv[L].k, pb[1] = b->st.kv[L].v;
            cnt[0] = cnt[1] = nkv;
        } else {
            float *ca, *Sa, *cb, *Sb; /* the live buffers of each pair (parities may differ) */
            ts_gdn_live(&a->st, L, &ca, &Sa);
            ts_gdn_live(&b->st, L, &cb, &Sb);
            pa[0] = ca, pa[1] = Sa, pb[0] = cb, pb[1] = Sb;
            cnt[0] = nconv, cnt[1] = nS;
        }
        for (int i = 0; i < 2 && diff < 0; i++) {
            if (!cnt[i]) continue;
            x[0] = 1, y[0] = 2; /* an unread buffer differs */
            ts_be_read(a->st.s, x, pa[i], cnt[i]);
            ts_be_read(b->st.s, y, pb[i], cnt[i]);
            if (ts_be_sync(a->st.s, NULL) || ts_be_sync(b->st.s, NULL)) diff = c->n_layers;
            else if (memcmp(x, y, sizeof(float) * cnt[i])) diff = L;
        }
    }
    if (!x || !y) diff = c->n_layers;
    free(x), free(y);
    return diff;
}

/* The last logits (or hidden) of a and b equal: host copies through each
 * stream's staging (one stream each, so neither read overwrites the other). */
static int same_last(ts_session *a, ts_session *b, int hidden) {
    const int n = hidden ? a->e->model.cfg.H : a->e->model.cfg.vocab;
    const float *x = hidden ? ts_session_hidden(a) : ts_session_logits(a);
    const float *y = hidden ? ts_session_hidden(b) : ts_session_logits(b);
    return x && y && !memcmp(x, y, sizeof(float) * (size_t)n);
}

/* After a verify of M+1 rows and a rollback to C kept rows (materialized),
 * the device state (GDN conv and recurrent state, KV rows) equals the state
 * after C one-row steps, byte for byte; so do the last logits and hidden,
 * and the next step. Before the verify every session decodes one row, so a
 * decode graph exists and the later steps replay it with other parities. */
TS_TEST(cuda_engine, spec_rollback_device_state_bit_exact) {
    NEED_GPU();
    spec_model ms[10];
    const int nm = spec_models(ms, 1);
    CHECK(nm > 0);
    int ran = 0;
    for (int k = 0; k < nm; k++) {
        if (strcmp(ms[k].name, "tiny-dense") && strcmp(ms[k].name, "tiny-moe INT4") && strcmp(ms[k].name, "fused-gdn INT4") &&
            strcmp(ms[k].name, "default"))
            continue;
        ts_engine *e = spec_open(&ms[k]);
        if (!e) continue;
        const int M = 6;
        const int32_t blk[] = {17, 4, 250, 33, 8, 101, 2}, pre = 21, nx = 5;
        for (int C = 1; C <= M + 1; C++) {
            ts_session *a = oracle_session(e, 256, M), *b = oracle_session(e, 256, 0);
            CHECK(a && b);
            ts_error err = {0};
            CHECK(ts_session_feed(a, SPROMPT, T_SPROMPT, NULL, NULL, &err) == 0);
            CHECK(ts_session_feed(b, SPROMPT, T_SPROMPT, NULL, NULL, &err) == 0);
            CHECK(ts_session_feed(a, &pre, 1, NULL, NULL, &err) == 0);
            CHECK(ts_session_feed(b, &pre, 1, NULL, NULL, &err) == 0);
            CHECK_MSG(ts_spec_verify(a, blk, M + 1, &err) == 0, "%s", err.msg);
            ts_spec_rollback(a, C);
            ts_spec_materialize(a); /* the rollback is lazy: apply it to read the raw state */
            for (int i = 0; i < C; i++) CHECK(ts_session_feed(b, &blk[i], 1, NULL, NULL, &err) == 0);
            CHECK_MSG(a->pos == b->pos, "pos %d vs %d", a->pos, b->pos);
            const int L = dev_state_diff(a, b);
            CHECK_MSG(L < 0, "%s C=%d: layer %d state differs after rollback", ms[k].name, C, L);
            CHECK_MSG(same_last(a, b, 0), "%s C=%d: last logits differ", ms[k].name, C);
            CHECK_MSG(same_last(a, b, 1), "%s C=%d: last hidden differs", ms[k].name, C);
            CHECK(ts_session_feed(a, &nx, 1, NULL, NULL, &err) == 0);
            CHECK(ts_session_feed(b, &nx, 1, NULL, NULL, &err) == 0);
            CHECK_MSG(same_last(a, b, 0), "%s C=%d: the next step's logits differ", ms[k].name, C);
            CHECK_MSG(dev_state_diff(a, b) < 0, "%s C=%d: state differs after the next step", ms[k].name, C);
            ts_session_free(a);
            ts_session_free(b);
        }
        fprintf(stderr, "  %-15s verify of 7 rows, rollback to 1..7 rows: device state == one-row steps\n", ms[k].name);
        ran++;
        ts_engine_close(e);
    }
    CHECK_MSG(ran >= 3, "only %d models ran on the GPU", ran);
}

/* The lazy forms: after a rollback to C rows, decode rows (the first one
 * replays the pending rows inside its pass, the second replays the decode
 * graph with the parities the rollback left) against the eager rollback and
 * one-row decoding; then a chain of 40 verify blocks of random sizes, each
 * rolled back lazily before the next (verifies that start from pending
 * rows, one-row blocks, second rollbacks of a block, decode rows in
 * between), every verified row's logits against one-row decoding, and the
 * final states. */
TS_TEST(cuda_engine, spec_lazy_rollback_decode_and_chain) {
    NEED_GPU();
    spec_model ms[10];
    const int nm = spec_models(ms, 1);
    CHECK(nm > 0);
    int ran = 0;
    for (int k = 0; k < nm; k++) {
        if (strcmp(ms[k].name, "tiny-dense") && strcmp(ms[k].name, "fused-gdn INT4") && strcmp(ms[k].name, "default"))
            continue;
        ts_engine *e = spec_open(&ms[k]);
        if (!e) continue;
        const int V = e->model.cfg.vocab, M = 6;
        const int32_t blk[] = {17, 4, 250, 33, 8, 101, 2}, nx[] = {5, 77, 12}, pre = 21;
        ts_error err = {0};
        for (int C = 1; C <= M + 1; C++) {
            ts_session *a = oracle_session(e, 256, M), *ea = oracle_session(e, 256, M), *b = oracle_session(e, 256, 0);
            CHECK(a && ea && b);
            ts_session *all[3] = {a, ea, b};
            for (int i = 0; i < 3; i++) {
                CHECK(ts_session_feed(all[i], SPROMPT, T_SPROMPT, NULL, NULL, &err) == 0);
                CHECK(ts_session_feed(all[i], &pre, 1, NULL, NULL, &err) == 0); /* captures the decode graph */
            }
            CHECK(ts_spec_verify(a, blk, M + 1, &err) == 0 && ts_spec_verify(ea, blk, M + 1, &err) == 0);
            ts_spec_rollback(a, C);
            ts_spec_rollback(ea, C);
            CHECK_MSG(a->st.gdn_pend == (C <= M ? C : 0), "C=%d: %d rows pending", C, a->st.gdn_pend);
            ts_spec_materialize(ea);
            for (int i = 0; i < C; i++) CHECK(ts_session_feed(b, &blk[i], 1, NULL, NULL, &err) == 0);
            for (int i = 0; i < 3; i++) {
                for (int j = 0; j < 3; j++) CHECK(ts_session_feed(all[j], &nx[i], 1, NULL, NULL, &err) == 0);
                CHECK_MSG(same_last(a, b, 0) && same_last(ea, b, 0), "%s C=%d: logits of decode row %d differ",
                          ms[k].name, C, i);
            }
            CHECK_MSG(a->st.gdn_pend == 0, "the decode row left %d rows pending", a->st.gdn_pend);
            CHECK_MSG(dev_state_diff(a, b) < 0 && dev_state_diff(ea, b) < 0, "%s C=%d: state differs after decoding",
                      ms[k].name, C);
            for (int i = 0; i < 3; i++) ts_session_free(all[i]);
        }
        /* the chain */
        ts_session *a = oracle_session(e, 512, M), *ea = oracle_session(e, 512, M), *b = oracle_session(e, 512, 0);
        CHECK(a && ea && b);
        CHECK(ts_session_feed(a, SPROMPT, T_SPROMPT, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(ea, SPROMPT, T_SPROMPT, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(b, SPROMPT, T_SPROMPT, NULL, NULL, &err) == 0);
        float *row = malloc(sizeof(float) * (size_t)V), *erow = malloc(sizeof(float) * (size_t)V);
        CHECK(row && erow);
        uint64_t lcg = 2024;
        int lazy_verifies = 0, decodes = 0, bad = 0;
        for (int blkno = 0; blkno < 40 && !bad; blkno++) {
            int32_t bb[TS_SPEC_MAX_DRAFT + 1];
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            const int n = 1 + (int)((lcg >> 33) % (M + 1)); /* 1..M+1 rows */
            for (int j = 0; j < n; j++) {
                lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
                bb[j] = (int32_t)((lcg >> 33) % (uint64_t)V);
            }
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            const int keep = 1 + (int)((lcg >> 33) % (uint64_t)n);
            lazy_verifies += a->st.gdn_pend > 0 && n > 1;
            CHECK(ts_spec_verify(a, bb, n, &err) == 0 && ts_spec_verify(ea, bb, n, &err) == 0);
            CHECK(a->st.gdn_pend == 0);
            for (int j = 0; j < keep && !bad; j++) {
                CHECK(ts_session_feed(b, &bb[j], 1, NULL, NULL, &err) == 0);
                const float *ra = ts_be_host(a->st.s, a->vlogits + (size_t)j * V, (size_t)V);
                CHECK(ra);
                memcpy(row, ra, sizeof(float) * (size_t)V);
                const float *re = ts_be_host(ea->st.s, ea->vlogits + (size_t)j * V, (size_t)V);
                CHECK(re);
                memcpy(erow, re, sizeof(float) * (size_t)V);
                const float *rb = ts_session_logits(b);
                CHECK(rb);
                if (memcmp(row, rb, sizeof(float) * V) || memcmp(erow, rb, sizeof(float) * V)) {
                    ts_test_fail(__FILE__, __LINE__, "%s block %d (%d rows): logits of row %d differ", ms[k].name, blkno,
                                 n, j);
                    bad = 1;
                }
            }
            if (keep > 1 && (lcg >> 40) % 4 == 0) ts_spec_rollback(a, keep + (n > keep)); /* further first, then to keep */
            ts_spec_rollback(a, keep);
            ts_spec_rollback(ea, keep);
            ts_spec_materialize(ea);
            CHECK_MSG(same_last(a, b, 0), "%s block %d: last logits after the rollback differ", ms[k].name, blkno);
            if ((lcg >> 44) % 3 == 0) { /* a decode row (a: with the rollback pending) */
                const int32_t t = (int32_t)((lcg >> 20) % (uint64_t)V);
                CHECK(ts_session_feed(a, &t, 1, NULL, NULL, &err) == 0 && ts_session_feed(ea, &t, 1, NULL, NULL, &err) == 0 &&
                      ts_session_feed(b, &t, 1, NULL, NULL, &err) == 0);
                CHECK_MSG(same_last(a, b, 0) && same_last(ea, b, 0), "%s block %d: the decode row's logits differ",
                          ms[k].name, blkno);
                decodes++;
            }
        }
        free(row), free(erow);
        CHECK_MSG(!bad, "%s: the chain parted", ms[k].name);
        CHECK_MSG(lazy_verifies >= 8, "only %d verify blocks started from a pending rollback", lazy_verifies);
        ts_spec_materialize(a);
        CHECK_MSG(dev_state_diff(a, b) < 0 && dev_state_diff(ea, b) < 0, "%s: state differs at the end of the chain",
                  ms[k].name);
        fprintf(stderr, "  %-15s lazy rollbacks then decode rows, C = 1..7; chain of 40 blocks (%d verified from pending "
                "rows, %d decode rows between): logits and device state identical\n", ms[k].name, lazy_verifies, decodes);
        ts_session_free(a);
        ts_session_free(ea);
        ts_session_free(b);
        ran++;
        ts_engine_close(e);
    }
    CHECK_MSG(ran >= 2, "only %d models ran on the GPU", ran);
}

/* Speculative sampling runs on the GPU (the verify rows read back through
 * the staging, the acceptance test's scratch in host memory): the same seed
 * twice gives the same tokens. (The distribution test, chi-square, is the
 * CPU's spec.sampling_matches_target; issue 17's GPU twin is not here.) */
TS_TEST(cuda_engine, spec_sampling_repeats) {
    NEED_GPU();
    ts_error err = {0};
    ts_engine *e = NULL;
    CHECK_MSG(!open_on("models/default", "cuda", &e, &err), "%s", err.msg);
    static collect c1, c2;
    collect *cs[2] = {&c1, &c2};
    ts_gen_stats st[2];
    for (int r = 0; r < 2; r++) {
        ts_session *s = oracle_session(e, 512, 3);
        CHECK(s);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 64;
        gp.spec_draft = 3;
        gp.temperature = 0.8f;
        gp.top_k = 40;
        gp.seed = 99;
        cs[r]->n = 0;
        CHECK_MSG(ts_generate(s, SPROMPT, T_SPROMPT, &gp, on_tok, cs[r], &st[r], &err) == 0, "%s", err.msg);
        ts_session_free(s);
    }
    fprintf(stderr, "  sampled with --draft 3 twice: %d and %d tokens, %d/%d drafts accepted\n", c1.n, c2.n,
            st[0].n_accepted, st[0].n_drafted);
    CHECK(c1.n == 64 && c2.n == 64 && !memcmp(c1.ids, c2.ids, sizeof(int32_t) * 64));
    CHECK(st[0].n_blocks > 0);
    ts_engine_close(e);
}

/* ---- speculative passes as graphs (verify M+1, after a lazy rollback, the
 * MTP head's catch-up and draft steps) ----
 * The three settings of a drafted generation: every pass captured (the
 * default), the speculative passes uncaptured (TSC_VGRAPH=0: the same ops
 * run from the host) and no graphs at all (TS_GRAPHS=0). Each must give
 * plain greedy's tokens; the graph statistics of the session must show the
 * speculative passes replayed, and a bounded number of graphs. */

/* a greedy generation like oracle_generate's, with the session's graph
 * statistics read before it is freed */
static int vg_generate(ts_engine *e, const int32_t *prompt, int T, int n_ctx, int n_pred, int M, oracle *orc,
                       collect *c, ts_gen_stats *st, int *graphs, long *replays) {
    ts_session *s = oracle_session(e, n_ctx, M);
    if (!s) return -1;
    if (orc) ts_session_override_drafts(s, oracle_drafts, orc);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = n_pred;
    gp.spec_draft = M;
    c->n = 0;
    ts_error err = {0};
    int rc = ts_generate(s, prompt, T, &gp, on_tok, c, st, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "generate (draft %d): %s", M, err.msg);
    ts_session_graph_stats(s, graphs, replays, NULL, NULL);
    ts_session_free(s);
    return rc;
}

enum { VG_ON, VG_OFF, VG_NONE };
static const char *const VG_NAME[] = {"graphs", "TSC_VGRAPH=0", "TS_GRAPHS=0"};
static void vg_set(int mode) {
    unsetenv("TSC_VGRAPH");
    unsetenv("TS_GRAPHS");
    if (mode == VG_OFF) setenv("TSC_VGRAPH", "0", 1);
    if (mode == VG_NONE) setenv("TS_GRAPHS", "0", 1);
}

/* The most graphs one drafted generation at M may capture (qwen35.c's keys):
 * decode and a one-row verify, each with and without a rollback pending
 * (4); verify blocks of 2..M+1 rows, with and without (2M); the MTP head's
 * catch-up over 1..M+1 rows and its draft step from each of those rows'
 * hidden (2M + 2). */
#define VG_CAP(M) (4 * (M) + 6)

TS_TEST(cuda_engine, spec_graphs_exact_and_replayed) {
    NEED_GPU();
    spec_model ms[10];
    const int nm = spec_models(ms, 1);
    CHECK(nm > 0);
    int ran = 0;
    for (int k = 0; k < nm; k++) {
        /* one fixture of each kind of layer stack, the fused shape, the default model */
        if (strcmp(ms[k].name, "tiny-dense") && strcmp(ms[k].name, "tiny-moe INT4") && strcmp(ms[k].name, "fused-gdn INT4") &&
            strcmp(ms[k].name, "default"))
            continue;
        ts_engine *e = spec_open(&ms[k]);
        if (!e) continue;
        static collect ref, got;
        ts_gen_stats st;
        int graphs;
        long replays;
        const int N = 160;
        vg_set(VG_ON);
        CHECK(vg_generate(e, SPROMPT, T_SPROMPT, 1024, N, 0, NULL, &ref, &st, &graphs, &replays) == 0);
        const int n = ref.n;
        CHECK_MSG(n >= 16, "%s: plain run gave %d tokens", ms[k].name, n);
        for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++) {
            long rep[3] = {0};
            for (int mode = VG_ON; mode <= VG_NONE; mode++) {
                vg_set(mode);
                /* oracle drafts: every acceptance length, so verify blocks
                 * start with every count of pending rows */
                oracle o = {ref.ids, ref.n, T_SPROMPT, 555u + M, 0};
                CHECK(vg_generate(e, SPROMPT, T_SPROMPT, 1024, N, M, &o, &got, &st, &graphs, &replays) == 0);
                CHECK_MSG(same_ids(&got, &ref, n), "%s M=%d %s (oracle drafts): %d tokens differ from plain greedy's %d",
                          ms[k].name, M, VG_NAME[mode], got.n, n);
                CHECK_MSG(graphs <= VG_CAP(M), "%s M=%d %s: %d graphs (at most %d)", ms[k].name, M, VG_NAME[mode],
                          graphs, VG_CAP(M));
                rep[mode] = replays;
                if (mode == VG_ON) {
                    /* a verify and at least one MTP pass a block, each replayed */
                    CHECK_MSG(replays + 2 >= 2L * st.n_blocks, "%s M=%d: %ld replays over %d blocks", ms[k].name, M,
                              replays, st.n_blocks);
                    CHECK_MSG(st.n_accepted > 0 && st.n_accepted < st.n_drafted, "%s M=%d: accepted %d of %d",
                              ms[k].name, M, st.n_accepted, st.n_drafted);
                }
                /* the model's own drafts (a random head is mostly rejected) */
                CHECK(vg_generate(e, SPROMPT, T_SPROMPT, 1024, 40, M, NULL, &got, &st, &graphs, &replays) == 0);
                CHECK_MSG(same_ids(&got, &ref, 40 < n ? 40 : n), "%s M=%d %s (MTP drafts): output differs from plain "
                          "greedy", ms[k].name, M, VG_NAME[mode]);
            }
            CHECK_MSG(rep[VG_NONE] == 0, "%s M=%d: %ld replays with TS_GRAPHS=0", ms[k].name, M, rep[VG_NONE]);
            CHECK_MSG(rep[VG_ON] > rep[VG_OFF], "%s M=%d: %ld replays with the speculative graphs, %ld without",
                      ms[k].name, M, rep[VG_ON], rep[VG_OFF]);
            if (M == 1 || M == TS_SPEC_MAX_DRAFT)
                fprintf(stderr, "  %-15s M=%d: replays %ld (graphs) / %ld (TSC_VGRAPH=0) / 0; identical output\n",
                        ms[k].name, M, rep[VG_ON], rep[VG_OFF]);
        }
        /* the context ends inside a block: the clipped blocks (other verify
         * keys) and the last one-row pass, in all three settings */
        const int n_ctx = T_SPROMPT + 30;
        vg_set(VG_ON);
        CHECK(vg_generate(e, SPROMPT, T_SPROMPT, n_ctx, 1000, 0, NULL, &ref, &st, &graphs, &replays) == 0);
        if (ref.n == 31) {
            for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M++)
                for (int mode = VG_ON; mode <= VG_NONE; mode++) {
                    vg_set(mode);
                    oracle o = {ref.ids, ref.n, T_SPROMPT, 31u + M, 0};
                    CHECK(vg_generate(e, SPROMPT, T_SPROMPT, n_ctx, 1000, M, &o, &got, &st, &graphs, &replays) == 0);
                    CHECK_MSG(same_ids(&got, &ref, ref.n), "%s ctx %d M=%d %s (oracle): %d tokens, plain %d", ms[k].name,
                              n_ctx, M, VG_NAME[mode], got.n, ref.n);
                    CHECK(vg_generate(e, SPROMPT, T_SPROMPT, n_ctx, 1000, M, NULL, &got, &st, &graphs, &replays) == 0);
                    CHECK_MSG(same_ids(&got, &ref, ref.n), "%s ctx %d M=%d %s (MTP): %d tokens, plain %d", ms[k].name,
                              n_ctx, M, VG_NAME[mode], got.n, ref.n);
                }
        } else {
            fprintf(stderr, "  %s: plain run stopped after %d tokens in a context of %d\n", ms[k].name, ref.n, n_ctx);
        }
        vg_set(VG_ON);
        ran++;
        ts_engine_close(e);
    }
    CHECK_MSG(ran >= 3, "only %d models ran on the GPU", ran);
}

/* One session, many blocks: a verify graph captured early replays after
 * any number of parity flips and rollbacks (the chain of the lazy test,
 * with graphs on against TSC_VGRAPH=0: the verified rows' logits and the
 * final device state byte for byte). */
TS_TEST(cuda_engine, spec_verify_graph_chain) {
    NEED_GPU();
    spec_model ms[10];
    const int nm = spec_models(ms, 1);
    CHECK(nm > 0);
    int ran = 0;
    for (int k = 0; k < nm; k++) {
        if (strcmp(ms[k].name, "tiny-dense") && strcmp(ms[k].name, "fused-gdn INT4") && strcmp(ms[k].name, "default"))
            continue;
        ts_engine *e = spec_open(&ms[k]);
        if (!e) continue;
        const int V = e->model.cfg.vocab, M = 4;
        ts_error err = {0};
        vg_set(VG_ON);
        ts_session *a = oracle_session(e, 512, M), *b = oracle_session(e, 512, M);
        CHECK(a && b);
        CHECK(ts_session_feed(a, SPROMPT, T_SPROMPT, NULL, NULL, &err) == 0);
        CHECK(ts_session_feed(b, SPROMPT, T_SPROMPT, NULL, NULL, &err) == 0);
        float *row = malloc(sizeof(float) * (size_t)V);
        CHECK(row);
        uint64_t lcg = 77;
        int bad = 0;
        long r0 = 0, r1 = 0;
        ts_session_graph_stats(a, NULL, &r0, NULL, NULL);
        for (int blkno = 0; blkno < 60 && !bad; blkno++) {
            int32_t bb[TS_SPEC_MAX_DRAFT + 1];
            for (int j = 0; j <= M; j++) {
                lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
                bb[j] = (int32_t)((lcg >> 33) % (uint64_t)V);
            }
            const int keep = 1 + (int)((lcg >> 20) % (uint64_t)(M + 1));
            vg_set(VG_ON);
            CHECK(ts_spec_verify(a, bb, M + 1, &err) == 0);
            vg_set(VG_OFF);
            CHECK(ts_spec_verify(b, bb, M + 1, &err) == 0);
            for (int j = 0; j <= M && !bad; j++) {
                const float *ra = ts_be_host(a->st.s, a->vlogits + (size_t)j * V, (size_t)V);
                CHECK(ra);
                memcpy(row, ra, sizeof(float) * (size_t)V);
                const float *rb = ts_be_host(b->st.s, b->vlogits + (size_t)j * V, (size_t)V);
                CHECK(rb);
                if (memcmp(row, rb, sizeof(float) * (size_t)V)) {
                    ts_test_fail(__FILE__, __LINE__, "%s block %d: row %d's logits differ (graph vs uncaptured)",
                                 ms[k].name, blkno, j);
                    bad = 1;
                }
            }
            ts_spec_rollback(a, keep);
            ts_spec_rollback(b, keep);
        }
        ts_session_graph_stats(a, NULL, &r1, NULL, NULL);
        vg_set(VG_ON);
        CHECK_MSG(r1 - r0 >= 60, "%s: %ld replays over 60 verify blocks", ms[k].name, r1 - r0);
        ts_spec_materialize(a);
        ts_spec_materialize(b);
        CHECK_MSG(dev_state_diff(a, b) < 0, "%s: state differs after the chain (graph vs uncaptured)", ms[k].name);
        free(row);
        fprintf(stderr, "  %-15s 60 verify blocks of %d rows, lazy rollbacks between: graphs == uncaptured, %ld replays\n",
                ms[k].name, M + 1, r1 - r0);
        ts_session_free(a);
        ts_session_free(b);
        ran++;
        ts_engine_close(e);
    }
    CHECK_MSG(ran >= 2, "only %d models ran on the GPU", ran);
}

/* ---- DFlash drafting on the GPU (block-masked attention, taps, verify) ----
 * As for MTP, CUDA against CUDA byte for byte: greedy output drafting DFlash
 * blocks of B = 2, 4, 8, 16 rows equals plain greedy output, on fixtures with
 * a randomly initialised drafter (tests/dflash_fx.h; with oracle drafts too,
 * so that every rollback length occurs) and on the bundled model with its
 * trained drafter. A plain session's stream is narrower than a drafting
 * one's (the drafter's fc reads n_taps * H columns), so these also catch a
 * target op whose rounding follows the stream's width (backend.cu:
 * ATT_SMALL). The drafter's forward is checked against the CPU's within the
 * parity tolerance (REL_TOL: a wrong op there would only lower acceptance,
 * which no exactness test sees), and CUDA's drafted ids against the CPU's
 * as determinism_same_prompt_and_seed compares plain greedy. */

/* An engine on `backend` with the DFlash drafter ddir (NULL: dir/dflash);
 * NULL and a note when the CUDA backend refuses the shape. */
static ts_engine *df_open(const char *name, const char *dir, const char *ddir, const char *backend) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = backend;
    ep.act_bits = 24;
    ep.dflash = 1;
    ep.drafter_dir = ddir;
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(dir, &ep, &e, &err)) {
        if (err.code == TS_E_UNSUPPORTED) fprintf(stderr, "  %-15s refused by the CUDA backend: %s\n", name, err.msg);
        else ts_test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
        return NULL;
    }
    return e;
}

/* Greedy (or sampled, temp > 0) generation drafting DFlash blocks of B rows
 * (0: plain, in a session without the drafter's buffers) into c; oracle
 * drafts when orc is given. 0 or the error, which fails the test. */
static int df_generate(ts_engine *e, const int32_t *prompt, int T, int n_ctx, int n_pred, int B, oracle *orc, collect *c,
                       ts_gen_stats *st, float temp, uint64_t seed) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.dflash_block = B;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err)) {
        ts_test_fail(__FILE__, __LINE__, "session (DFlash block %d): %s", B, err.msg);
        return -1;
    }
    if (orc) ts_session_override_drafts(s, oracle_drafts, orc);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = n_pred;
    gp.dflash_block = B;
    gp.temperature = temp;
    gp.top_k = temp > 0 ? 40 : gp.top_k;
    gp.seed = seed;
    c->n = 0;
    int rc = ts_generate(s, prompt, T, &gp, on_tok, c, st, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "generate (DFlash block %d): %s", B, err.msg);
    ts_session_free(s);
    return rc;
}

static const int DF_BLOCKS[] = {2, 4, 8, 16};

/* Drafted greedy equals plain greedy on the GPU for B = 2, 4, 8, 16 on the
 * tiny fixtures (BF16 as shipped, the MoE at INT4 too) with a random
 * drafter: 520 tokens with oracle drafts (every acceptance length occurs,
 * checked over all models) and with the drafter's own drafts. */
TS_TEST(cuda_engine, dflash_greedy_exact_fixtures) {
    NEED_GPU();
    struct { const char *name, *fx; char dir[512]; } ms[3] = {{"tiny-dense", "tiny-dense", ""}, {"tiny-moe", "tiny-moe", ""},
                                                            {"tiny-moe INT4", "tiny-moe", ""}};
    snprintf(ms[0].dir, sizeof ms[0].dir, "tests/fixtures/tiny-dense");
    snprintf(ms[1].dir, sizeof ms[1].dir, "tests/fixtures/tiny-moe");
    if (make_install("tiny-moe", 4, ms[2].dir, sizeof ms[2].dir)) return;
    const int N = 520;
    int ran = 0, seen[TS_DFLASH_MAX_BLOCK] = {0};
    for (int k = 0; k < 3; k++) {
        char ddir[512];
        const char *dd = ts_test_dflash_drafter(ms[k].fx, k ? "df-cuda-moe" : "df-cuda-dense");
        CHECK(dd);
        snprintf(ddir, sizeof ddir, "%s", dd); /* (a static buffer) */
        ts_engine *e = df_open(ms[k].name, ms[k].dir, ddir, "cuda");
        if (!e) continue;
        static collect ref, got;
        ts_gen_stats st;
        CHECK(df_generate(e, SPROMPT, T_SPROMPT, 1024, N, 0, NULL, &ref, &st, 0, 0) == 0);
        const int n = ref.n; /* a random model may stop at its eos */
        CHECK_MSG(n >= 16, "%s: plain run gave %d tokens", ms[k].name, n);
        int own = 0;
        for (int b = 0; b < 4; b++) {
            const int B = DF_BLOCKS[b];
            /* two oracle seeds a block size and model: a draft is corrupted
             * with probability 1/8, so a 16-row block keeps exactly 14
             * drafts in ~2% of blocks. The oracle's corruptions depend on
             * its seed only (not on the model), so with the same seeds for
             * every model the three models' blocks were the same two
             * samples, and neither seed gave a block of 14 (two H200 runs
             * failed here); with the model in the seed the six samples give
             * 3 such blocks at 520 tokens (the schedule simulated offline). */
            for (int rep = 0; rep < 2; rep++) {
                oracle o = {ref.ids, ref.n, T_SPROMPT, 4321u + B + 7919u * rep + 104729u * k, 0};
                memset(&st, 0, sizeof st);
                CHECK(df_generate(e, SPROMPT, T_SPROMPT, 1024, N, B, &o, &got, &st, 0, 0) == 0);
                CHECK_MSG(same_ids(&got, &ref, n), "%s B=%d (oracle drafts): %d tokens differ from plain greedy's %d",
                          ms[k].name, B, got.n, n);
                CHECK_MSG(st.n_accepted > 0 && st.n_accepted < st.n_drafted, "%s B=%d: accepted %d of %d", ms[k].name,
                          B, st.n_accepted, st.n_drafted);
                /* blocks that kept exactly j + 1 drafts */
                for (int j = 0; j < B - 1; j++) seen[j] += st.accepted_at[j] - (j + 1 < B - 1 ? st.accepted_at[j + 1] : 0);
            }
            memset(&st, 0, sizeof st);
            CHECK(df_generate(e, SPROMPT, T_SPROMPT, 1024, N, B, NULL, &got, &st, 0, 0) == 0);
            CHECK_MSG(same_ids(&got, &ref, n), "%s B=%d (the random drafter's drafts): output differs from plain greedy",
                      ms[k].name, B);
            CHECK(st.n_drafted > 0 && st.n_blocks > 0);
            own += st.n_accepted;
        }
        fprintf(stderr, "  %-15s DFlash B = 2, 4, 8, 16 identical to plain greedy (%d tokens; oracle and random-drafter "
                "drafts; the random drafter's accepted: %d)\n", ms[k].name, n, own);
        ran++;
        ts_engine_close(e);
    }
    for (int j = 0; j < TS_DFLASH_MAX_BLOCK - 1; j++) CHECK_MSG(seen[j] > 0, "no block kept exactly %d drafts", j + 1);
    CHECK_MSG(ran >= 2, "only %d models ran on the GPU", ran);
}

/* The drafter's block logits after the same prompt on both backends:
 * ts_session_feed builds its context (the target's taps, fc, the context
 * K/V of every draft layer), then one block of 16 rows [last, mask x 15].
 * Exact mode on both (no low-precision draft products), the CPU at f32-class
 * activation precision. Fills *err_max, *lmax, the top-1 agreement. */
static int df_block_logits(ts_engine *e, const int32_t *prompt, int T, float *out, ts_error *err) {
    enum { B = 16 };
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 512;
    sp.dflash_block = B;
    ts_session *s = NULL;
    int rc = ts_session_new(e, &sp, &s, err);
    if (rc) return rc;
    s->draft_lowp = 0;
    const ts_dflash *df = e->dflash;
    rc = ts_session_feed(s, prompt, T - 1, NULL, NULL, err);
    int32_t ids[B];
    ids[0] = prompt[T - 1];
    for (int i = 1; i < B; i++) ids[i] = df->cfg.mask_id;
    const int V = e->model.cfg.vocab;
    if (!rc) rc = ts_dflash_block(df, &s->df, &e->model, s->st.s, ids, B, s->pos, s->vlogits, 0, TS_MODE_EXACT);
    if (!rc) ts_be_read(s->st.s, out, s->vlogits, (size_t)(B - 1) * V);
    if (!rc) rc = ts_be_sync(s->st.s, err);
    else ts_fail(err, rc, "DFlash block: %s", s->st.s->msg);
    ts_session_free(s);
    return rc;
}

TS_TEST(cuda_engine, dflash_drafter_parity_with_cpu) {
    NEED_GPU();
    struct stat sb;
    char ddir[512];
    const char *dd = ts_test_dflash_drafter("tiny-dense", "df-cuda-par");
    CHECK(dd);
    snprintf(ddir, sizeof ddir, "%s", dd);
    struct { const char *name, *dir, *ddir; } ms[2] = {{"tiny-dense", "tests/fixtures/tiny-dense", ddir},
                                                      {"default", "models/default", NULL}};
    const int nm = stat("models/default/dflash/config.json", &sb) ? 1 : 2;
    /* ids below 2048: in every vocabulary here */
    static const int32_t pr[] = {1279, 355, 260, 1155, 1094, 1373, 11, 344, 257, 88, 41, 9, 300, 17, 5, 64, 2};
    const int T = (int)(sizeof pr / sizeof pr[0]);
    for (int k = 0; k < nm; k++) {
        ts_engine *eg = df_open(ms[k].name, ms[k].dir, ms[k].ddir, "cuda");
        CHECK(eg);
        ts_engine *ec = df_open(ms[k].name, ms[k].dir, ms[k].ddir, "cpu");
        CHECK(ec);
        const int V = eg->model.cfg.vocab, R = 15;
        float *g = malloc(sizeof(float) * (size_t)R * V), *c = malloc(sizeof(float) * (size_t)R * V);
        ts_error err = {0};
        CHECK_MSG(!df_block_logits(eg, pr, T, g, &err), "%s on CUDA: %s", ms[k].name, err.msg);
        CHECK_MSG(!df_block_logits(ec, pr, T, c, &err), "%s on the CPU: %s", ms[k].name, err.msg);
        float lmax = 0, emax = 0;
        for (size_t i = 0; i < (size_t)R * V; i++) lmax = fmaxf(lmax, fabsf(c[i]));
        emax = ts_test_max_abs(g, c, (size_t)R * V);
        const float tol = REL_TOL * fmaxf(1.0f, lmax);
        int ok = 0, checked = 0;
        for (int r = 0; r < R; r++) {
            float gap;
            const int tc = argmax(c + (size_t)r * V, V, &gap), tg = argmax(g + (size_t)r * V, V, NULL);
            if (gap > 2 * tol) { checked++; ok += tc == tg; }
        }
        fprintf(stderr, "  %-10s DFlash block of 16 after %d tokens, CUDA vs CPU: max |err| %.3g (|L| max %.3g), top-1 "
                "%d/%d\n", ms[k].name, T - 1, emax, lmax, ok, checked);
        CHECK_MSG(emax <= tol, "%s: the drafter's logits differ by %.3g (tolerance %.3g)", ms[k].name, emax, tol);
        CHECK_MSG(ok == checked, "%s: top-1 differs on %d of %d rows", ms[k].name, checked - ok, checked);
        free(g);
        free(c);
        ts_engine_close(eg);
        ts_engine_close(ec);
    }
}

/* The bundled model with its trained drafter on text: drafted greedy equals
 * plain greedy for 520 tokens at B = 2, 4, 8, 16, with drafts accepted
 * (acceptance and speed printed, not asserted); the GPU's drafted ids equal
 * the CPU's drafted ids over their first 16 of 48 at least (the criterion of
 * determinism_same_prompt_and_seed for plain greedy: the two backends round
 * differently, so a near-tie may part them later). */
TS_TEST(cuda_engine, dflash_greedy_exact_default_model) {
    NEED_GPU();
    struct stat sb;
    if (stat("models/default/dflash/config.json", &sb)) SKIP("models/default/dflash is not there (no trained drafter)");
    ts_error err = {0};
    ts_tokenizer *tk = NULL;
    CHECK_MSG(!ts_tokenizer_load("models/default/tokenizer.json", &tk, &err), "%s", err.msg);
    static const char TXT[] = "The history of the city begins with a small settlement on the river, where traders from "
                              "the north met farmers from the valley. Over the next centuries";
    ts_tokens tv = {0};
    CHECK_MSG(!ts_tokenizer_encode(tk, TXT, strlen(TXT), &tv, &err), "%s", err.msg);
    ts_tokenizer_free(tk);
    ts_engine *e = df_open("default", "models/default", NULL, "cuda");
    CHECK(e);
    static collect ref, got;
    ts_gen_stats st;
    const int N = 520;
    CHECK(df_generate(e, tv.ids, tv.n, 2048, N, 0, NULL, &ref, &st, 0, 0) == 0);
    const int n = ref.n;
    const double plain_tps = st.t_decode > 0 ? (st.n_gen - 1) / st.t_decode : 0;
    fprintf(stderr, "  default model, %d prompt tokens: plain greedy %d tokens, %.0f tok/s\n", tv.n, n, plain_tps);
    CHECK_MSG(n >= 200, "plain run gave %d tokens", n);
    for (int b = 0; b < 4; b++) {
        const int B = DF_BLOCKS[b];
        memset(&st, 0, sizeof st);
        CHECK(df_generate(e, tv.ids, tv.n, 2048, N, B, NULL, &got, &st, 0, 0) == 0);
        const double tps = st.t_decode > 0 ? (st.n_gen - 1) / st.t_decode : 0;
        fprintf(stderr, "  --spec dflash --block %-2d: %d tokens, %d/%d drafts accepted (%.2f tokens/verify), %.0f tok/s\n", B,
                got.n, st.n_accepted, st.n_drafted, st.n_blocks ? (double)(st.n_accepted + st.n_blocks) / st.n_blocks : 0,
                tps);
        CHECK_MSG(same_ids(&got, &ref, n), "default model B=%d (DFlash drafts): output differs from plain greedy", B);
        CHECK_MSG(st.n_accepted > 0, "default model B=%d: no draft accepted (a trained drafter)", B);
    }
    oracle o = {ref.ids, ref.n, tv.n, 777u, 0};
    CHECK(df_generate(e, tv.ids, tv.n, 2048, N, 16, &o, &got, &st, 0, 0) == 0);
    CHECK_MSG(same_ids(&got, &ref, n), "default model B=16 (oracle drafts): output differs from plain greedy");
    /* the CPU's drafted ids */
    static collect gpu48, cpu48;
    CHECK(df_generate(e, tv.ids, tv.n, 512, 48, 8, NULL, &gpu48, &st, 0, 0) == 0);
    ts_engine *ec = df_open("default", "models/default", NULL, "cpu");
    CHECK(ec);
    CHECK(df_generate(ec, tv.ids, tv.n, 512, 48, 8, NULL, &cpu48, &st, 0, 0) == 0);
    int same = 0;
    while (same < 48 && same < gpu48.n && same < cpu48.n && gpu48.ids[same] == cpu48.ids[same]) same++;
    fprintf(stderr, "  --spec dflash --block 8, GPU vs CPU: first %d of 48 tokens equal\n", same);
    CHECK(gpu48.n == 48 && cpu48.n == 48);
    CHECK_MSG(same >= 16, "DFlash-drafted greedy ids of the GPU and the CPU part after %d tokens", same);
    ts_engine_close(ec);
    ts_tokens_free(&tv);
    ts_engine_close(e);
}

/* Speculative sampling with DFlash drafts on the GPU (the drafts drawn from
 * rows read through the staging): the same seed twice gives the same
 * tokens, with drafts made. (The distribution test is the CPU's
 * dflash.sampling_matches_target.) */
TS_TEST(cuda_engine, dflash_sampling_repeats) {
    NEED_GPU();
    struct stat sb;
    if (stat("models/default/dflash/config.json", &sb)) SKIP("models/default/dflash is not there (no trained drafter)");
    ts_engine *e = df_open("default", "models/default", NULL, "cuda");
    CHECK(e);
    static collect c1, c2;
    ts_gen_stats s1, s2;
    CHECK(df_generate(e, SPROMPT, T_SPROMPT, 512, 64, 4, NULL, &c1, &s1, 0.8f, 99) == 0);
    CHECK(df_generate(e, SPROMPT, T_SPROMPT, 512, 64, 4, NULL, &c2, &s2, 0.8f, 99) == 0);
    fprintf(stderr, "  sampled with --spec dflash --block 4 twice: %d and %d tokens, %d/%d drafts accepted\n", c1.n, c2.n,
            s1.n_accepted, s1.n_drafted);
    CHECK(c1.n == 64 && c2.n == 64 && !memcmp(c1.ids, c2.ids, sizeof(int32_t) * 64));
    CHECK(s1.n_blocks > 0 && s1.n_drafted > 0);
    ts_engine_close(e);
}

/* ---- expert streaming on the device (issue 18) ---- */

/* The claim: with the routed experts read on demand into a few device slots
 * (--expert-cache on CUDA: host staging, then a copy into the slot; the MoE
 * kernels index the slot pool as they index a layer's resident experts),
 * every prompt logit and every greedy id (plain and MTP drafting) equal the
 * fully resident GPU engine's, bit for bit. Prompts are fed in chunks of 1,
 * 16 and 40 rows: the row kernels, and the prompt-chunk (tensor-core) MoE
 * over slots, which with a few slots also runs group by group (more
 * distinct experts than slots: the pass's form is kept). The cache must be
 * exercised (misses, evictions, hits). */
static uint64_t g_xs_host; /* --expert-host-cache of xs_open */
static int g_xs_excl;      /* the host tier expected exclusive (expert_host_tier_identical_to_resident) */

static int xs_open(const char *dir, uint64_t cache, const char *policy, ts_engine **e, ts_error *err) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cuda";
    ep.expert_cache = cache;
    ep.expert_policy = policy;
    ep.expert_host_cache = cache ? g_xs_host : 0;
    return ts_engine_open(dir, &ep, e, err);
}

/* The expert cache's bytes (device slots; host staging, tables and the
 * host tier) as the plan says and as the engine allocates them. */
static void xs_plan_check(const char *dir, uint64_t cache, const char *policy) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cuda";
    ep.expert_cache = cache;
    ep.expert_policy = policy;
    ep.expert_host_cache = g_xs_host;
    ts_session_params sp;
    ts_session_params_default(&sp);
    ts_mem_plan *pl = malloc(sizeof *pl);
    ts_error err = {0};
    CHECK_MSG(!ts_mem_plan_dir_ex(dir, &ep, &sp, pl, &err), "plan: %s", err.msg);
    const size_t h0 = ts_mem_used_in(TS_DOM_HOST, TS_MEM_EXPERT_CACHE), d0 = ts_mem_used_in(TS_DOM_DEVICE, TS_MEM_EXPERT_CACHE);
    ts_engine *e = NULL;
    CHECK_MSG(!ts_engine_open(dir, &ep, &e, &err), "%s", err.msg);
    if (e) {
        const size_t h = ts_mem_used_in(TS_DOM_HOST, TS_MEM_EXPERT_CACHE) - h0, d = ts_mem_used_in(TS_DOM_DEVICE, TS_MEM_EXPERT_CACHE) - d0;
        CHECK_MSG(h == pl->bytes[TS_DOM_HOST][TS_MEM_EXPERT_CACHE] && d == pl->bytes[TS_DOM_DEVICE][TS_MEM_EXPERT_CACHE],
                  "%s: expert cache host %zu / device %zu bytes allocated, plan %llu / %llu", dir, h, d,
                  (unsigned long long)pl->bytes[TS_DOM_HOST][TS_MEM_EXPERT_CACHE],
                  (unsigned long long)pl->bytes[TS_DOM_DEVICE][TS_MEM_EXPERT_CACHE]);
        ts_engine_close(e);
    }
    CHECK(ts_mem_used_in(TS_DOM_HOST, TS_MEM_EXPERT_CACHE) == h0 && ts_mem_used_in(TS_DOM_DEVICE, TS_MEM_EXPERT_CACHE) == d0);
    free(pl);
}

typedef struct xs_out {
    float *logits;
    int32_t ids[32];
    int n_ids;
} xs_out;

static int xs_collect(void *user, int32_t id) {
    xs_out *o = user;
    if (o->n_ids < 32) o->ids[o->n_ids++] = id;
    return 0;
}

static int xs_run(ts_engine *e, const int32_t *prompt, int np, int chunk, int n, int spec, xs_out *o, ts_error *err) {
    const ts_model_info *in = ts_engine_info(e);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = np + n + 16;
    sp.max_rows = chunk;
    sp.spec_draft = spec ? 3 : 0;
    ts_session *s = NULL;
    int rc = ts_session_new(e, &sp, &s, err);
    if (rc) return rc;
    o->logits = malloc(sizeof(float) * (size_t)np * in->vocab_size);
    rc = ts_session_feed(s, prompt, np, o->logits, NULL, err);
    if (!rc) {
        ts_session_reset(s);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = n;
        gp.temperature = 0;
        gp.spec_draft = spec ? 3 : 0;
        o->n_ids = 0;
        rc = ts_generate(s, prompt, np, &gp, xs_collect, o, NULL, err);
    }
    ts_session_free(s);
    return rc;
}

static void xs_identical(const char *dir, int extra_slots) {
    ts_error err = {0};
    ts_engine *er = NULL, *ec = NULL;
    CHECK_MSG(xs_open(dir, 0, NULL, &er, &err) == 0, "%s: %s", dir, err.msg);
    if (ts_test_failed()) return;
    /* the slot size from a large cache, then a cache of top-k + extra slots */
    CHECK_MSG(xs_open(dir, 1ull << 30, NULL, &ec, &err) == 0, "%s: %s", dir, err.msg);
    if (ts_test_failed()) { ts_engine_close(er); return; }
    ts_expert_stats x;
    ts_engine_expert_stats(ec, &x);
    ts_engine_close(ec);
    ec = NULL;
    const ts_model_info *in = ts_engine_info(er);
    const int slots = in->n_experts_per_tok + extra_slots;
    enum { NP = 40, NG = 24 };
    int32_t prompt[NP];
    uint64_t rs = 0x2545f4914f6cdd1dull ^ (uint64_t)slots;
    for (int i = 0; i < NP; i++) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((rs >> 33) % (uint64_t)in->vocab_size);
    }
    const char *pol[2] = {"lfru", "lru"};
    xs_plan_check(dir, x.slot_bytes * (uint64_t)slots, NULL);
    for (int p = 0; p < 2 && !ts_test_failed(); p++) {
        CHECK_MSG(xs_open(dir, x.slot_bytes * (uint64_t)slots, pol[p], &ec, &err) == 0, "%s: %s", dir, err.msg);
        if (ts_test_failed()) break;
        ts_expert_stats x0;
        ts_engine_expert_stats(ec, &x0);
        CHECK_MSG(x0.enabled && x0.n_slots == slots && x0.prepared, "%d slots (wanted %d), prepared %d", x0.n_slots, slots, x0.prepared);
        static const int chunks[3] = {1, 16, NP};
        for (int spec = 0; spec <= (in->has_mtp ? 1 : 0); spec++)
            for (int ci = 0; ci < 3 && !ts_test_failed(); ci++) {
                xs_out a = {0}, b = {0};
                CHECK_MSG(xs_run(er, prompt, NP, chunks[ci], NG, spec, &a, &err) == 0, "%s", err.msg);
                CHECK_MSG(xs_run(ec, prompt, NP, chunks[ci], NG, spec, &b, &err) == 0, "%s", err.msg);
                if (!ts_test_failed()) {
                    size_t diff = 0;
                    for (size_t i = 0; i < (size_t)NP * in->vocab_size; i++) diff += memcmp(&a.logits[i], &b.logits[i], 4) != 0;
                    CHECK_MSG(!diff, "%s %s chunk %d: %zu prompt logits differ with %d device slots", dir, pol[p], chunks[ci], diff, slots);
                    CHECK_MSG(a.n_ids == NG && b.n_ids == NG && !memcmp(a.ids, b.ids, sizeof a.ids),
                              "%s %s chunk %d spec %d: greedy ids differ with %d device slots", dir, pol[p], chunks[ci], spec, slots);
                }
                free(a.logits);
                free(b.logits);
            }
        ts_expert_stats xe;
        ts_engine_expert_stats(ec, &xe);
        fprintf(stderr, "  %s --expert-cache %d slots (%s) on cuda: %llu hits, %llu misses, %llu evictions, %.1f MB read", dir,
                slots, pol[p], (unsigned long long)xe.hits, (unsigned long long)xe.misses, (unsigned long long)xe.evictions,
                xe.bytes_read / 1e6);
        if (g_xs_host)
            fprintf(stderr, "; host tier %d slots (%s, %llu victims kept): %llu hits, %llu misses, %.1f MB read", xe.host_slots,
                    xe.host_exclusive ? "exclusive" : "inclusive", (unsigned long long)xe.host_writebacks,
                    (unsigned long long)xe.host_hits, (unsigned long long)xe.host_misses, xe.host_bytes_read / 1e6);
        fprintf(stderr, "\n");
        CHECK_MSG(xe.misses > 0 && xe.evictions > 0 && xe.hits > 0, "the cache was not exercised");
        /* a host tier serves every device miss: the device tier reads nothing itself */
        if (g_xs_host)
            CHECK_MSG(xe.host_slots > 0 && xe.host_misses > 0 && xe.host_hits > 0 && xe.bytes_read == 0 && xe.host_bytes_read > 0 &&
                          xe.host_exclusive == g_xs_excl && (!g_xs_excl || xe.host_writebacks > 0),
                      "the host tier was not exercised (exclusive %d, wanted %d; %llu victims kept)", xe.host_exclusive, g_xs_excl,
                      (unsigned long long)xe.host_writebacks);
        ts_engine_close(ec);
        ec = NULL;
    }
    ts_engine_close(er);
}

TS_TEST(cuda_engine, expert_cache_identical_to_resident) {
    NEED_GPU();
    char dir[512];
    if (make_install("tiny-moe", 4, dir, sizeof dir)) return;
    xs_identical(dir, 1);
    if (make_install("tiny-moe", 8, dir, sizeof dir)) return;
    xs_identical(dir, 3);
    /* the 35B-A3B's widths: the routed kernels' real splits and the shared
     * expert as the down's last slot, from the slot pool */
    if (wide_moe_model(dir, sizeof dir)) return;
    xs_identical(dir, 2);
    struct stat sb;
    if (!stat("models/moe/config.json", &sb)) xs_identical("models/moe", 2);
}

/* The same with a pinned host tier between the files and the device slots
 * (--expert-host-cache): a few device slots over a host tier that holds
 * about half of the experts, so both tiers miss and evict. */
TS_TEST(cuda_engine, expert_host_tier_identical_to_resident) {
    NEED_GPU();
    char dir[512];
    if (make_install("tiny-moe", 4, dir, sizeof dir)) return;
    /* tiny-moe INT4: 9 map layers x 8 experts in 32 KiB slots: 36 of them
     * (+ the pool's alignment page); models/moe: 4 x 32 in 16 KiB: 64 */
    g_xs_host = 36 * 32768 + 4096;
    /* half the experts: exclusive by default (device victims copied back
     * into it, so every copy runs both ways); then forced inclusive */
    g_xs_excl = 1;
    xs_identical(dir, 1);
    setenv("TS_XC_EXCLUSIVE", "0", 1);
    g_xs_excl = 0;
    xs_identical(dir, 1);
    unsetenv("TS_XC_EXCLUSIVE");
    struct stat sb;
    g_xs_host = 64 * 16384 + 4096;
    g_xs_excl = 1;
    if (!stat("models/moe/config.json", &sb)) xs_identical("models/moe", 2);
    g_xs_host = 0;
}

/* Errors on the device: a cache below one layer's top-k names the need; a
 * read that fails mid-generation fails the session cleanly with the file
 * named, and the next generation works once the file reads again; close
 * returns every device byte. */
TS_TEST(cuda_engine, expert_cache_errors) {
    NEED_GPU();
    char dir[512];
    if (make_install("tiny-moe", 4, dir, sizeof dir)) return;
    ts_error err = {0};
    ts_engine *e = NULL;
    const size_t d0 = dev_used();
    CHECK_MSG(xs_open(dir, 4096, NULL, &e, &err) == TS_E_ARG && strstr(err.msg, "--expert-cache") && strstr(err.msg, "top-"),
              "a tiny cache: %s", err.msg);
    CHECK(!e && dev_used() == d0);
    /* the resident ids, then a read error inside a generation with 3 slots */
    ts_engine *er = NULL;
    CHECK_MSG(xs_open(dir, 0, NULL, &er, &err) == 0, "%s", err.msg);
    if (ts_test_failed()) return;
    const int32_t prompt[6] = {3, 14, 15, 92, 65, 35};
    xs_out ref = {0}, got = {0};
    CHECK_MSG(xs_run(er, prompt, 6, 6, 16, 0, &ref, &err) == 0, "%s", err.msg);
    ts_engine_close(er);
    CHECK_MSG(xs_open(dir, 1 << 30, NULL, &e, &err) == 0, "%s", err.msg);
    if (ts_test_failed()) { free(ref.logits); return; }
    ts_expert_stats x;
    ts_engine_expert_stats(e, &x);
    ts_engine_close(e);
    e = NULL;
    CHECK_MSG(xs_open(dir, x.slot_bytes * 3, NULL, &e, &err) == 0, "%s", err.msg);
    if (ts_test_failed()) { free(ref.logits); return; }
    ts_xc *c = ts_xstream_cache(e->model.xs);
    ts_xc_fail_read_after(c, 40); /* well inside the generation */
    int rc = xs_run(e, prompt, 6, 6, 16, 0, &got, &err);
    CHECK_MSG(rc == TS_E_IO && strstr(err.msg, "expert cache: reading layer"), "rc %d: %s", rc, err.msg);
    CHECK(ts_xc_pinned(c) == 0);
    free(got.logits);
    memset(&got, 0, sizeof got);
    CHECK_MSG(xs_run(e, prompt, 6, 6, 16, 0, &got, &err) == 0, "after the error: %s", err.msg);
    CHECK_MSG(got.n_ids == 16 && !memcmp(got.ids, ref.ids, sizeof ref.ids), "ids after a read error differ from the resident run");
    free(ref.logits);
    free(got.logits);
    ts_engine_close(e);
    CHECK_MSG(dev_used() == d0, "device bytes after close: %zu, before: %zu", dev_used(), d0);
}

/* The MoE layer's short form (backend.cu's moe_shgu_on, the default: the
 * router stages its input norm, the shared expert's gate/up rows ride the
 * routed gate/up launch) on the 35B-A3B's MoE widths, where it is taken:
 * the decode graph runs one kernel fewer a MoE layer than with
 * TSC_MOE_SHGU=0 (so the form did run); the logits against the CPU within
 * the parity tolerance; greedy output with planted drafts (every acceptance
 * length, lazy rollbacks) identical to plain greedy, M = 1..4, at its gate/up's
 * U = 1 (the default) and U = 2 (TSC_MOE_SHGU=1: the same bits, the same
 * tokens). */
static int form_kernels(const char *dir, const char *name, const char *env, collect *c) { /* env: name's value, NULL unset */
    char *keep = ts_env_push(name, env);
    ts_engine *e = NULL;
    ts_error err = {0};
    int gk = -1;
    if (open_bits(dir, "cuda", 8, &e, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s: cuda: %s", dir, err.msg);
    } else {
        ts_session *s = oracle_session(e, 256, 0);
        if (s) {
            ts_gen_params gp;
            ts_gen_params_default(&gp);
            gp.n_predict = 24;
            const int32_t prompt[5] = {11, 7, 300, 1500, 42};
            c->n = 0;
            if (ts_generate(s, prompt, 5, &gp, on_tok, c, NULL, &err)) ts_test_fail(__FILE__, __LINE__, "generate: %s", err.msg);
            int graphs = 0;
            ts_session_graph_stats(s, &graphs, NULL, &gk, NULL);
            ts_session_free(s);
        }
        ts_engine_close(e);
    }
    ts_env_pop(name, keep);
    return gk;
}
static int shgu_kernels(const char *dir, const char *env, collect *c) { return form_kernels(dir, "TSC_MOE_SHGU", env, c); }

/* greedy with planted drafts, M = 1..4, against plain greedy (a failure fails the test) */
static void shgu_spec_exact(const char *dir, const char *form) {
    ts_engine *e = NULL;
    ts_error err = {0};
    if (open_bits(dir, "cuda", 8, &e, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s: %s", dir, err.msg);
        return;
    }
    const int32_t prompt[6] = {3, 14, 15, 92, 65, 35};
    collect ref, got;
    ts_gen_stats st;
    if (!oracle_generate(e, prompt, 6, 256, 40, 0, NULL, &ref, &st))
        for (int M = 1; M <= 4; M++) {
            oracle orc = {ref.ids, ref.n, 6, 0x1234567ull + (uint64_t)M, 0};
            if (oracle_generate(e, prompt, 6, 256, 40, M, &orc, &got, &st)) break;
            CHECK_MSG(got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * ref.n),
                      "draft %d (%s): output differs from plain greedy", M, form);
        }
    ts_engine_close(e);
}

TS_TEST(cuda_engine, moe_shgu_one_launch_fewer_and_exact) {
    NEED_GPU();
    char dir[512];
    if (wide_moe_model(dir, sizeof dir)) return;
    collect c0, c1, c2;
    /* counted without the down's digits launch (moe_dig_on): the short
     * form's down takes it (its shared hidden rows lie beside the routed
     * ones) and the other form's does not, which would hide the launch
     * this form saves (s43-run3: 24 kernels both ways) */
    char *dig = ts_env_push("TSC_MOE_DIG", "0");
    const int k0 = shgu_kernels(dir, "0", &c0), k1 = shgu_kernels(dir, NULL, &c1), k2 = shgu_kernels(dir, "1", &c2);
    ts_env_pop("TSC_MOE_DIG", dig);
    fprintf(stderr, "  wide-moe INT4 decode graph (TSC_MOE_DIG=0): %d kernels with TSC_MOE_SHGU=0, %d by default, %d at U = 2\n",
            k0, k1, k2);
    CHECK_MSG(k0 > 0 && k1 == k0 - 2 && k2 == k1, "decode graph kernels %d -> %d, %d (2 MoE layers)", k0, k1, k2);
    CHECK_MSG(c1.n == c2.n && !memcmp(c1.ids, c2.ids, sizeof(int32_t) * c1.n), "U = 2 changed the tokens");
    parity pr;
    char why[600] = "";
    const int rc = run_parity(dir, 40, 24, &pr, why, sizeof why);
    CHECK_MSG(rc == 0, "wide-moe INT4: %s", why);
    if (rc == 0) parity_report("wide-moe short", "INT4", dir, &pr);
    shgu_spec_exact(dir, "default");
    char *shgu = ts_env_push("TSC_MOE_SHGU", "1");
    shgu_spec_exact(dir, "TSC_MOE_SHGU=1");
    ts_env_pop("TSC_MOE_SHGU", shgu);
}

/* One run of the wide MoE's prompt (passes of chunk rows), 24 greedy tokens
 * (spec: with MTP drafting) under the environment as it stands, into o;
 * form names the run in failures. Returns 0 when it ran, and the vocabulary
 * (V) for the logits. */
static int form_run(const char *dir, const char *form, const int32_t *prompt, int np, int chunk, int spec, xs_out *o, int *V) {
    ts_error err = {0};
    ts_engine *e = NULL;
    int rc = -1;
    EXPECT_MSG(xs_open(dir, 0, NULL, &e, &err) == 0, "%s: %s", form, err.msg);
    if (e) {
        rc = xs_run(e, prompt, np, chunk, 24, spec, o, &err);
        EXPECT_MSG(rc == 0, "%s chunk %d spec %d: %s", form, chunk, spec, err.msg);
        *V = ts_engine_info(e)->vocab_size;
        ts_engine_close(e);
    }
    return rc;
}

/* form_run's prompt logits and greedy ids the same bits as ref's (made by
 * the form named against). Checks that go on (EXPECT_MSG): a switch set by
 * the caller must be put back whatever fails. */
static void form_same(const char *dir, const char *form, const char *against, const xs_out *ref, int np,
                      const int32_t *prompt, int chunk, int spec) {
    xs_out o = {0};
    int V = 0;
    if (form_run(dir, form, prompt, np, chunk, spec, &o, &V) == 0 && ref->logits) {
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)np * V; i++) diff += memcmp(&o.logits[i], &ref->logits[i], 4) != 0;
        EXPECT_MSG(!diff, "%s chunk %d: %zu prompt logits differ from %s", form, chunk, diff, against);
        EXPECT_MSG(o.n_ids == ref->n_ids && !memcmp(o.ids, ref->ids, sizeof o.ids), "%s chunk %d spec %d: greedy ids differ",
                   form, chunk, spec);
    }
    free(o.logits);
}

/* The routed down's digits made once by a launch of their own (q4dp.cu's
 * moe_dig_on) and the gate/up's made by the route launch (backend.cu's
 * moe_gudig_on, misc.cu's k_moe_route_dg: no launch more), both defaults,
 * on the wide MoE, against the in-block staging of both (TSC_MOE_DIG=0
 * TSC_MOE_GUDIG=0): the decode graph runs one kernel more a MoE layer (so
 * the down's form did run); TSC_MOE_GUDIG=2 fails wherever a pass holds its
 * rows and the form is not taken, so its runs prove the form ran (decode
 * rows; a prompt's last 2-row pass and a 4-row verify at 5-row passes); and
 * prompt logits (passes of 1 and 5 rows) and greedy tokens with and without
 * MTP drafting are the in-block staging's bit for bit, each form alone and
 * both. Checks that go on (EXPECT_MSG): a switch set here must be put back
 * whatever fails. */
static void dig_same(const char *dir, const char *name, const char *val, const xs_out *ref, int np, const int32_t *prompt,
                     int chunk, int spec) {
    char *keep = ts_env_push("TSC_MOE_DIG", NULL), *keep2 = ts_env_push("TSC_MOE_GUDIG", NULL);
    if (name) setenv(name, val, 1);
    form_same(dir, name ? name : "the defaults", "in-block staging", ref, np, prompt, chunk, spec);
    ts_env_pop("TSC_MOE_GUDIG", keep2);
    ts_env_pop("TSC_MOE_DIG", keep);
}

TS_TEST(cuda_engine, moe_down_digits_once_same_bits) {
    NEED_GPU();
    char dir[512];
    if (wide_moe_model(dir, sizeof dir)) return;
    collect c0, c1, c2;
    char *gk = ts_env_push("TSC_MOE_GUDIG", "0");
    const int k0 = form_kernels(dir, "TSC_MOE_DIG", "0", &c0);
    ts_env_pop("TSC_MOE_GUDIG", gk);
    const int k1 = form_kernels(dir, "TSC_MOE_DIG", NULL, &c1);
    const int k2 = form_kernels(dir, "TSC_MOE_GUDIG", "2", &c2);
    fprintf(stderr, "  wide-moe INT4 decode graph: %d kernels with both digits forms off, %d by default, %d with TSC_MOE_GUDIG=2\n",
            k0, k1, k2);
    CHECK_MSG(k0 > 0 && k1 == k0 + 2 && k2 == k1, "decode graph kernels %d -> %d, %d (2 MoE layers)", k0, k1, k2);
    CHECK_MSG(c0.n == c1.n && !memcmp(c0.ids, c1.ids, sizeof(int32_t) * c0.n), "the digits forms changed the tokens");
    CHECK_MSG(c0.n == c2.n && !memcmp(c0.ids, c2.ids, sizeof(int32_t) * c0.n), "the route's digits changed the tokens");
    /* 22 prompt rows: at 5-row passes the last pass holds 2 rows, which the
     * route launch's digits serve (a 5-row pass's scratch holds 4) */
    enum { NP = 22 };
    int32_t prompt[NP];
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((i * 1103 + 17) % 2047);
    static const int chunks[2] = {1, 5};
    for (int ci = 0; ci < 2 && !ts_test_failed(); ci++)
        for (int spec = 0; spec <= 1 && !ts_test_failed(); spec++) {
            xs_out ref = {0};
            int V = 0;
            char *keep = ts_env_push("TSC_MOE_DIG", "0"), *keep2 = ts_env_push("TSC_MOE_GUDIG", "0");
            form_run(dir, "in-block staging", prompt, NP, chunks[ci], spec, &ref, &V);
            ts_env_pop("TSC_MOE_GUDIG", keep2);
            ts_env_pop("TSC_MOE_DIG", keep);
            if (!ts_test_failed()) dig_same(dir, NULL, NULL, &ref, NP, prompt, chunks[ci], spec);
            if (!ts_test_failed()) dig_same(dir, "TSC_MOE_GUDIG", "0", &ref, NP, prompt, chunks[ci], spec);
            if (!ts_test_failed()) dig_same(dir, "TSC_MOE_GUDIG", "2", &ref, NP, prompt, chunks[ci], spec);
            free(ref.logits);
        }
}
