/* test_dflash.c: DFlash block drafting (src/model/dflash.c, src/gen/dflash_draft.c).
 *
 * - a test-time generator of random DFlash drafters (release layout:
 *   config.json with dflash_config, one safetensors file) for any target;
 * - the block-mask attention op against a direct computation;
 * - exactness: greedy output with --spec dflash, B = 2, 4, 8, 16, is the
 *   same ids as plain greedy over 520 tokens on tiny-dense and tiny-moe,
 *   with the random drafter's own drafts and with oracle drafts (the plain
 *   output, an eighth corrupted) so that every rollback length occurs; on
 *   the bundled model with its shipped drafter when it exists (600 tokens);
 * - speculative sampling with DFlash drafts: the first two emitted tokens
 *   follow the target's joint distribution (chi-square over top-k cells);
 * - the plan counts the drafter's bytes exactly, and nothing when off;
 * - bad input: no drafter, hidden size and vocabulary mismatches, missing
 *   tensors, block sizes out of range.
 */
#include <math.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "gen/spec.h"
#include "dflash_fx.h"
#include "loader/st_writer.h"
#include "ts_test.h"
#include "gen_oracle.h"

/* ---- the random drafter ---- */

typedef struct df_spec {
    int H, layers, nq, nkv, D, I, vocab, n_taps, taps[4], mask, target_layers, block;
    uint64_t seed;
    const char *drop;   /* a tensor left out (NULL: none) */
    int bad_H, bad_vocab; /* config lies (0: truthful) */
} df_spec;

static uint64_t lcg_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}
static float unif(uint64_t *s) { return (float)((double)lcg_next(s) / 9007199254740992.0) * 2.0f - 1.0f; }

static int fill_rand(void *ctx, const ts_stw_tensor *t, int idx, void *buf, ts_error *err) {
    (void)err;
    uint64_t s = ((const df_spec *)ctx)->seed * 1000003u + (uint64_t)idx * 7919u + 1;
    float *f = buf;
    const size_t n = t->nbytes / 4;
    if (t->n_dims == 1) { /* norms: around 1 */
        for (size_t i = 0; i < n; i++) f[i] = 1.0f + 0.2f * unif(&s);
    } else {              /* matrices: uniform with variance 1/cols (scaled for a lively block) */
        const float a = 1.7f / sqrtf((float)t->shape[1]);
        for (size_t i = 0; i < n; i++) f[i] = a * unif(&s);
    }
    return 0;
}

static void add_t(ts_stw_tensor *t, int *n, const df_spec *d, const char *name, int64_t r, int64_t c) {
    if (d->drop && !strcmp(d->drop, name)) return;
    ts_stw_tensor *x = &t[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dtype = TS_DTYPE_F32;
    x->n_dims = c ? 2 : 1;
    x->shape[0] = r;
    x->shape[1] = c;
}

/* Write a random drafter into dir (created). Returns 0. */
static int make_drafter(const char *dir, const df_spec *d) {
    char out[1024];
    if (ts_test_sh(out, sizeof out, "rm -rf %s && mkdir -p %s", dir, dir)) return -1;
    ts_stw_tensor t[64];
    int n = 0;
    char nm[128];
    add_t(t, &n, d, "fc.weight", d->H, (int64_t)d->n_taps * d->H);
    add_t(t, &n, d, "hidden_norm.weight", d->H, 0);
    add_t(t, &n, d, "norm.weight", d->H, 0);
    for (int l = 0; l < d->layers; l++) {
        const int qd = d->nq * d->D, kd = d->nkv * d->D;
#define L(fmt, r, c) (snprintf(nm, sizeof nm, "layers.%d." fmt, l), add_t(t, &n, d, nm, r, c))
        L("input_layernorm.weight", d->H, 0);
        L("post_attention_layernorm.weight", d->H, 0);
        L("self_attn.q_proj.weight", qd, d->H);
        L("self_attn.k_proj.weight", kd, d->H);
        L("self_attn.v_proj.weight", kd, d->H);
        L("self_attn.o_proj.weight", d->H, qd);
        L("self_attn.q_norm.weight", d->D, 0);
        L("self_attn.k_norm.weight", d->D, 0);
        L("mlp.gate_proj.weight", d->I, d->H);
        L("mlp.up_proj.weight", d->I, d->H);
        L("mlp.down_proj.weight", d->H, d->I);
#undef L
    }
    for (int i = 0; i < n; i++) t[i].nbytes = (size_t)4 * t[i].shape[0] * (t[i].n_dims == 2 ? t[i].shape[1] : 1);
    int ns = ts_stw_plan(t, n, (size_t)1 << 30);
    ts_error err = {0};
    if (ts_stw_write(dir, t, n, ns, fill_rand, NULL, (void *)d, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
        return -1;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"architectures\": [\"DFlashDraftModel\"], \"model_type\": \"qwen3\", \"hidden_size\": %d,\n"
               " \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,\n"
               " \"intermediate_size\": %d, \"vocab_size\": %d, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000,\n"
               " \"num_target_layers\": %d, \"block_size\": %d, \"dflash_config\": {\"mask_token_id\": %d, \"target_layer_ids\": [",
            d->bad_H ? d->bad_H : d->H, d->layers, d->nq, d->nkv, d->D, d->I, d->bad_vocab ? d->bad_vocab : d->vocab,
            d->target_layers, d->block, d->mask);
    for (int i = 0; i < d->n_taps; i++) fprintf(f, "%s%d", i ? ", " : "", d->taps[i]);
    fprintf(f, "]}}\n");
    fclose(f);
    return 0;
}

/* A drafter for the fixture `fx` in tmp/NAME (2 layers, 3 taps). */
static const char *fx_drafter(const char *fx, const char *name, df_spec *d) {
    static char dir[512];
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/%s", fx);
    ts_config c;
    ts_error err = {0};
    if (ts_config_load(path, &c, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return NULL; }
    df_spec base = {c.H, 2, 4, 2, 32, 2 * c.H, c.vocab, 3, {1, c.n_layers / 2, c.n_layers - 3, 0}, c.vocab - 1,
                    c.n_layers, 16, 77, NULL, 0, 0};
    if (d) {
        if (!d->H) { df_spec keep = *d; *d = base; d->drop = keep.drop; d->bad_H = keep.bad_H; d->bad_vocab = keep.bad_vocab; }
    } else {
        d = &base;
    }
    snprintf(dir, sizeof dir, "%s/%s", ts_test_tmpdir(), name);
    if (make_drafter(dir, d)) return NULL;
    return dir;
}

const char *ts_test_dflash_drafter(const char *fx, const char *name) { return fx_drafter(fx, name, NULL); }

static ts_engine *open_with(const char *fx, const char *ddir) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", fx);
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.dflash = 1;
    ep.drafter_dir = ddir;
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(dir, &ep, &e, &err)) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return e;
}

/* ---- generation helpers ---- */

/* B = 0: plain greedy (or sampling with gp's temperature). */
static int gen(ts_engine *e, const int32_t *prompt, int T, int n_pred, int B, oracle *orc, collect *c, ts_gen_stats *st) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 1024;
    sp.dflash_block = B;
    ts_session *s = NULL;
    ts_error err = {0};
    if (ts_session_new(e, &sp, &s, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return -1; }
    if (orc) ts_session_override_drafts(s, oracle_drafts, orc);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = n_pred;
    gp.dflash_block = B;
    c->n = 0;
    int rc = ts_generate(s, prompt, T, &gp, on_tok, c, st, &err);
    if (rc) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ts_session_free(s);
    return rc;
}

static const int32_t PROMPT[] = {11, 5, 301, 42, 7, 99, 250, 3, 18, 64, 120, 9};
#define T_PROMPT ((int)(sizeof PROMPT / sizeof PROMPT[0]))

/* ---- tests ---- */

/* The block-mask attention: context rows only append; every block row
 * attends to all cache rows [0, pos + n), computed here directly (norm,
 * RoPE, softmax in double). */
TS_TEST(dflash, block_mask_attention) {
    enum { NQ = 4, NKV = 2, D = 16, POS = 5, NC = 3, NB = 4, N = NC + NB, CTX = 32, ROT = 8 };
    const int kvd = NKV * D;
    static float q[NB * NQ * D], q0[NB * NQ * D], k[N * NKV * D], v[N * NKV * D], k0[N * NKV * D];
    static float kc[CTX * NKV * D], vc[CTX * NKV * D], att[NQ * CTX], out[NB * NQ * D];
    float qn[D], kn[D];
    uint64_t s = 9;
    for (int i = 0; i < NB * NQ * D; i++) q0[i] = q[i] = unif(&s);
    for (int i = 0; i < N * kvd; i++) { k0[i] = k[i] = unif(&s); v[i] = unif(&s); }
    for (int i = 0; i < POS * kvd; i++) { kc[i] = unif(&s); vc[i] = unif(&s); }
    for (int d = 0; d < D; d++) { qn[d] = 1.0f + 0.1f * unif(&s); kn[d] = 1.0f + 0.1f * unif(&s); }
    ts_backend *be = NULL;
    ts_error err = {0};
    CHECK(ts_cpu_backend_new(NULL, &be, &err) == 0);
    ts_stream *st = NULL;
    CHECK(be->ops->stream_new(be, N, 64, 0, &st) == 0);
    st->step.pos = POS;
    ts_attn_args a = {q, k, v, qn, kn, kc, vc, att, CTX, 1, out, N, NQ, NKV, D, ROT, 0, 1e4, 1e-6f, TS_MASK_BLOCK, NC, 1, 0, NULL};
    be->ops->attn(st, TS_MODE_EXACT, &a);
    CHECK(ts_be_sync(st, &err) == 0);
    /* the reference */
    double worst = 0;
    for (int r = 0; r < N; r++)
        for (int h = 0; h < NKV; h++) {
            /* key row r of head h: normed, rotated at POS + r, must be in the cache */
            double ss = 0;
            const float *kr = k0 + (size_t)r * kvd + h * D;
            for (int d = 0; d < D; d++) ss += (double)kr[d] * kr[d];
            float sc = (float)(1.0 / sqrt(ss / D + 1e-6));
            float x[D];
            for (int d = 0; d < D; d++) x[d] = kr[d] * sc * kn[d];
            for (int j = 0; j < ROT / 2; j++) {
                double ang = (POS + r) * pow(1e4, -2.0 * j / ROT);
                float x0 = x[j], x1 = x[j + ROT / 2];
                x[j] = (float)(x0 * cos(ang) - x1 * sin(ang));
                x[j + ROT / 2] = (float)(x1 * cos(ang) + x0 * sin(ang));
            }
            for (int d = 0; d < D; d++) worst = fmax(worst, fabs(x[d] - kc[(size_t)(POS + r) * kvd + h * D + d]));
        }
    CHECK_MSG(worst < 1e-4, "cached keys differ from normed, rotated keys by %g", worst);
    worst = 0;
    for (int j = 0; j < NB; j++)
        for (int h = 0; h < NQ; h++) {
            const float *qr = q0 + ((size_t)j * NQ + h) * D;
            double ss = 0;
            for (int d = 0; d < D; d++) ss += (double)qr[d] * qr[d];
            float sc = (float)(1.0 / sqrt(ss / D + 1e-6)), x[D];
            for (int d = 0; d < D; d++) x[d] = qr[d] * sc * qn[d];
            for (int i = 0; i < ROT / 2; i++) {
                double ang = (POS + NC + j) * pow(1e4, -2.0 * i / ROT);
                float x0 = x[i], x1 = x[i + ROT / 2];
                x[i] = (float)(x0 * cos(ang) - x1 * sin(ang));
                x[i + ROT / 2] = (float)(x1 * cos(ang) + x0 * sin(ang));
            }
            const int kh = h / (NQ / NKV), T = POS + N; /* every row sees the whole block */
            double sco[CTX], mx = -1e30, sum = 0;
            for (int t = 0; t < T; t++) {
                double dot = 0;
                for (int d = 0; d < D; d++) dot += (double)x[d] * kc[(size_t)t * kvd + kh * D + d];
                sco[t] = dot / sqrt((double)D);
                mx = fmax(mx, sco[t]);
            }
            for (int t = 0; t < T; t++) sum += (sco[t] = exp(sco[t] - mx));
            for (int d = 0; d < D; d++) {
                double o = 0;
                for (int t = 0; t < T; t++) o += sco[t] / sum * vc[(size_t)t * kvd + kh * D + d];
                worst = fmax(worst, fabs(o - out[(size_t)j * NQ * D + h * D + d]));
            }
        }
    CHECK_MSG(worst < 1e-4, "block attention differs from the direct computation by %g", worst);
    be->ops->stream_free(st);
    ts_backend_free(be);
}

TS_TEST(dflash, greedy_exact) {
    static const char *fx[] = {"tiny-dense", "tiny-moe"};
    static const int Bs[] = {2, 4, 8, 16};
    const int N = 520;
    for (int f = 0; f < 2; f++) {
        const char *dd = fx_drafter(fx[f], "df-rand", NULL);
        CHECK(dd);
        ts_engine *e = open_with(fx[f], dd);
        CHECK(e);
        static collect ref, got;
        ts_gen_stats st;
        CHECK(gen(e, PROMPT, T_PROMPT, N, 0, NULL, &ref, &st) == 0);
        CHECK(ref.n == N);
        int seen[TS_DFLASH_MAX_BLOCK] = {0}, own_acc = 0;
        for (int b = 0; b < 4; b++) {
            const int B = Bs[b];
            oracle o = {ref.ids, ref.n, T_PROMPT, 999u + B, 0};
            memset(&st, 0, sizeof st);
            CHECK(gen(e, PROMPT, T_PROMPT, N, B, &o, &got, &st) == 0);
            CHECK_MSG(got.n == N && !memcmp(got.ids, ref.ids, sizeof(int32_t) * N),
                      "%s B=%d (oracle drafts): output differs from plain greedy", fx[f], B);
            CHECK_MSG(st.n_accepted > 0 && st.n_accepted < st.n_drafted, "%s B=%d: accepted %d of %d", fx[f], B,
                      st.n_accepted, st.n_drafted);
            /* rollback lengths: keep = accepted + 1; count how many blocks ended after j accepted */
            for (int j = 0; j < B - 1; j++) seen[j] += st.accepted_at[j] - (j + 1 < B - 1 ? st.accepted_at[j + 1] : 0);
            memset(&st, 0, sizeof st);
            CHECK(gen(e, PROMPT, T_PROMPT, N, B, NULL, &got, &st) == 0);
            CHECK_MSG(got.n == N && !memcmp(got.ids, ref.ids, sizeof(int32_t) * N),
                      "%s B=%d (random drafter's drafts): output differs from plain greedy", fx[f], B);
            CHECK(st.n_drafted > 0 && st.n_blocks > 0);
            own_acc += st.n_accepted;
        }
        for (int j = 0; j < TS_DFLASH_MAX_BLOCK - 1; j++)
            CHECK_MSG(seen[j] > 0, "%s: no block kept exactly %d drafts", fx[f], j + 1);
        fprintf(stderr, "  %-10s B = 2, 4, 8, 16 identical to plain greedy (oracle and random-drafter drafts; the "
                        "random drafter's accepted: %d)\n", fx[f], own_acc);
        ts_engine_close(e);
    }
}

/* Speculative sampling through the whole DFlash path: the first two emitted
 * tokens (t1 from the prompt's logits, t2 from the first verify block, whose
 * three drafts come from the random drafter) over
 * 3000 seeded runs, against p(t1) p(t2 | t1) computed from the target's
 * logits with the same sampler pipeline (top-k 3: 9 cells). Pearson's
 * chi-square with 8 dof, threshold 26.12 (the 0.999 quantile). The random
 * drafter's distribution is checked to be far from the target's, so most
 * drafts are rejected and the residual path is exercised. */
TS_TEST(dflash, sampling_matches_target) {
    const char *dd = fx_drafter("tiny-dense", "df-rand-s", NULL);
    CHECK(dd);
    ts_engine *e = open_with("tiny-dense", dd);
    CHECK(e);
    const int V = ts_engine_info(e)->vocab_size, N = 3000, TOPK = 3;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 128;
    sp.dflash_block = 4;
    ts_session *s = NULL;
    ts_error err = {0};
    CHECK(ts_session_new(e, &sp, &s, &err) == 0);
    ts_sampler_params smp_p;
    ts_sampler_params_default(&smp_p);
    smp_p.temperature = 1.0f;
    smp_p.top_k = TOPK;
    ts_sampler *smp = NULL;
    CHECK(ts_sampler_new(V, &smp_p, &smp, &err) == 0);
    float *p = malloc(sizeof(float) * V), *p2 = malloc(sizeof(float) * V);
    /* the exact joint over the top-k cells */
    CHECK(ts_session_feed(s, PROMPT, T_PROMPT, NULL, NULL, &err) == 0);
    CHECK(ts_sampler_probs(smp, ts_session_logits(s), p, &err) == 0);
    int32_t c1[3];
    int n1 = 0;
    for (int i = 0; i < V && n1 < TOPK; i++)
        if (p[i] > 0) c1[n1++] = i;
    double expect[3][3];
    int32_t c2[3][3];
    for (int a = 0; a < n1; a++) {
        ts_session_reset(s);
        int32_t pr[T_PROMPT + 1];
        memcpy(pr, PROMPT, sizeof PROMPT);
        pr[T_PROMPT] = c1[a];
        CHECK(ts_session_feed(s, pr, T_PROMPT + 1, NULL, NULL, &err) == 0);
        CHECK(ts_sampler_probs(smp, ts_session_logits(s), p2, &err) == 0);
        int k = 0;
        for (int i = 0; i < V && k < TOPK; i++)
            if (p2[i] > 0) { c2[a][k] = i; expect[a][k] = (double)p[c1[a]] * p2[i]; k++; }
    }
    long cnt[3][3] = {{0}};
    long other = 0, drafted = 0, accepted = 0;
    for (int t = 0; t < N; t++) {
        ts_session_reset(s);
        ts_gen_params gp;
        ts_gen_params_default(&gp);
        gp.n_predict = 5; /* room for drafts after t1; only t1, t2 are tallied */
        gp.temperature = 1.0f;
        gp.top_k = TOPK;
        gp.seed = 1000 + (uint64_t)t;
        gp.dflash_block = 4;
        collect c = {{0}, 0};
        ts_gen_stats st;
        CHECK(ts_generate(s, PROMPT, T_PROMPT, &gp, on_tok, &c, &st, &err) == 0);
        drafted += st.n_drafted;
        accepted += st.n_accepted;
        int hit = 0;
        for (int a = 0; a < n1 && !hit; a++)
            for (int k = 0; k < TOPK && !hit; k++)
                if (c.ids[0] == c1[a] && c.ids[1] == c2[a][k]) { cnt[a][k]++; hit = 1; }
        other += !hit;
    }
    double chi = 0;
    for (int a = 0; a < n1; a++)
        for (int k = 0; k < TOPK; k++) {
            double ex = expect[a][k] * N;
            chi += (cnt[a][k] - ex) * (cnt[a][k] - ex) / ex;
        }
    fprintf(stderr, "  DFlash sampling: (t1, t2) vs the target's joint: chi2 = %.2f (8 dof, threshold 26.12); "
                    "drafts accepted %ld of %ld\n", chi, accepted, drafted);
    CHECK_MSG(other == 0, "%ld runs emitted a pair outside the top-k cells", other);
    CHECK_MSG(chi < 26.12, "chi-square %.2f over the 0.999 quantile", chi);
    CHECK_MSG(drafted > 0 && accepted < drafted, "drafts: %ld accepted of %ld", accepted, drafted);
    free(p);
    free(p2);
    ts_sampler_free(smp);
    ts_session_free(s);
    ts_engine_close(e);
}

/* The memory plan with DFlash equals the allocations, byte for byte, and a
 * session without it allocates nothing of the drafter's. */
TS_TEST(dflash, plan_exact) {
    const char *dd = fx_drafter("tiny-dense", "df-plan", NULL);
    CHECK(dd);
    for (int B = 0; B <= 16; B += 8) {
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.n_ctx = 300;
        sp.dflash_block = B;
        ts_mem_plan pl;
        ts_error err = {0};
        size_t before[TS_MEM_N];
        for (int k = 0; k < TS_MEM_N; k++) before[k] = ts_mem_used_in(TS_DOM_HOST, (ts_mem_cat)k);
        ts_engine_params pe;
        ts_engine_params_default(&pe);
        pe.drafter_dir = B ? dd : NULL;
        CHECK_MSG(ts_mem_plan_dir_ex("tests/fixtures/tiny-dense", &pe, &sp, &pl, &err) == 0, "%s", err.msg);
        ts_engine_params ep;
        ts_engine_params_default(&ep);
        ep.dflash = B > 0;
        ep.drafter_dir = dd;
        ts_engine *e = NULL;
        CHECK_MSG(ts_engine_open("tests/fixtures/tiny-dense", &ep, &e, &err) == 0, "%s", err.msg);
        ts_session *s = NULL;
        CHECK_MSG(ts_session_new(e, &sp, &s, &err) == 0, "%s", err.msg);
        for (int k = 0; k < TS_MEM_N; k++) {
            size_t got = ts_mem_used_in(TS_DOM_HOST, (ts_mem_cat)k) - before[k];
            CHECK_MSG(got == pl.bytes[TS_DOM_HOST][k], "B=%d category %d: allocated %zu, planned %llu", B, k, got,
                      (unsigned long long)pl.bytes[TS_DOM_HOST][k]);
        }
        if (!B) CHECK(pl.drafter_bytes == 0);
        else CHECK(pl.drafter_bytes > 0 && pl.dflash_block == B);
        ts_session_free(s);
        ts_engine_close(e);
    }
}

/* Greedy with the bundled model's shipped drafter (models/default/dflash):
 * 600 tokens from a prompt of the tokenizer's text, identical to plain. */
TS_TEST(dflash, default_model) {
    struct stat sb;
    if (stat("models/default/dflash/config.json", &sb)) {
        fprintf(stderr, "  SKIP: models/default/dflash is not there (no trained drafter shipped)\n");
        return;
    }
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.dflash = 1;
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK_MSG(ts_engine_open("models/default", &ep, &e, &err) == 0, "%s", err.msg);
    static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
    const int T = (int)(sizeof pr / sizeof pr[0]), N = 600;
    static collect ref, got;
    ts_gen_stats st;
    CHECK(gen(e, pr, T, N, 0, NULL, &ref, &st) == 0);
    static const int Bs[] = {2, 4, 8, 16};
    for (int b = 0; b < 4; b++) {
        memset(&st, 0, sizeof st);
        CHECK(gen(e, pr, T, N, Bs[b], NULL, &got, &st) == 0);
        int same = got.n == ref.n && !memcmp(got.ids, ref.ids, sizeof(int32_t) * (size_t)ref.n);
        CHECK_MSG(same, "default model B=%d: output differs from plain greedy", Bs[b]);
        fprintf(stderr, "  default model B=%-2d: %d tokens identical; mean accepted length %.2f\n", Bs[b], got.n,
                (double)(st.n_accepted + st.n_blocks) / st.n_blocks);
    }
    ts_engine_close(e);
}

TS_TEST(dflash, bad_input) {
    char out[8192];
    const char *bin = ts_test_bin();
    ts_error err = {0};
    ts_engine *e = NULL;
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.dflash = 1;
    /* no drafter: the fixture has no dflash/ */
    CHECK(ts_engine_open("tests/fixtures/tiny-dense", &ep, &e, &err) != 0);
    CHECK_MSG(strstr(err.msg, "no DFlash drafter") && strstr(err.msg, "dflash/config.json"), "%s", err.msg);
    int rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --spec dflash", bin);
    CHECK_MSG(rc != 0 && strstr(out, "no DFlash drafter"), "no drafter: rc %d, %s", rc, out);
    /* hidden size, vocabulary */
    df_spec d = {0};
    d.bad_H = 96;
    const char *dd = fx_drafter("tiny-dense", "df-badH", &d);
    ep.drafter_dir = dd;
    CHECK(ts_engine_open("tests/fixtures/tiny-dense", &ep, &e, &err) != 0);
    CHECK_MSG(strstr(err.msg, "hidden size 96 does not match the target's 128"), "%s", err.msg);
    memset(&d, 0, sizeof d);
    d.bad_vocab = 1000;
    dd = fx_drafter("tiny-dense", "df-badV", &d);
    ep.drafter_dir = dd;
    CHECK(ts_engine_open("tests/fixtures/tiny-dense", &ep, &e, &err) != 0);
    CHECK_MSG(strstr(err.msg, "vocabulary of 1000 ids does not match"), "%s", err.msg);
    /* a missing tensor */
    memset(&d, 0, sizeof d);
    d.drop = "layers.1.mlp.up_proj.weight";
    dd = fx_drafter("tiny-dense", "df-missing", &d);
    ep.drafter_dir = dd;
    CHECK(ts_engine_open("tests/fixtures/tiny-dense", &ep, &e, &err) != 0);
    CHECK_MSG(strstr(err.msg, "missing tensor 'layers.1.mlp.up_proj.weight'"), "%s", err.msg);
    /* block sizes */
    dd = fx_drafter("tiny-dense", "df-ok", NULL);
    rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --spec dflash --drafter %s --block 1",
                    bin, dd);
    CHECK_MSG(rc != 0 && strstr(out, "--block 1 is outside 2..16"), "block 1: %s", out);
    rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --spec dflash --drafter %s --block 17",
                    bin, dd);
    CHECK_MSG(rc != 0 && strstr(out, "--block 17 is outside 2..16"), "block 17: %s", out);
    rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2 -n 4 --block 4", bin);
    CHECK_MSG(rc != 0 && strstr(out, "need --spec dflash"), "block without dflash: %s", out);
    ep.drafter_dir = dd;
    CHECK_MSG(ts_engine_open("tests/fixtures/tiny-dense", &ep, &e, &err) == 0, "%s", err.msg);
    ts_session_params sp;
    ts_session_params_default(&sp);
    ts_session *s = NULL;
    sp.dflash_block = 17;
    CHECK(ts_session_new(e, &sp, &s, &err) == TS_E_ARG && strstr(err.msg, "outside 2..16"));
    sp.dflash_block = 4;
    CHECK(ts_session_new(e, &sp, &s, &err) == 0);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 4;
    gp.dflash_block = 8;
    CHECK(ts_generate(s, PROMPT, T_PROMPT, &gp, NULL, NULL, NULL, &err) == TS_E_ARG && strstr(err.msg, "dflash_block"));
    gp.dflash_block = 1;
    CHECK(ts_generate(s, PROMPT, T_PROMPT, &gp, NULL, NULL, NULL, &err) == TS_E_ARG);
    ts_session_free(s);
    ts_engine_close(e);
    /* an engine without a drafter refuses DFlash sessions */
    ts_engine_params_default(&ep);
    CHECK(ts_engine_open("tests/fixtures/tiny-dense", &ep, &e, &err) == 0);
    sp.dflash_block = 4;
    CHECK(ts_session_new(e, &sp, &s, &err) == TS_E_UNSUPPORTED && strstr(err.msg, "DFlash drafter"));
    ts_engine_close(e);
    /* the CLI prints the statistics */
    rc = ts_test_sh(out, sizeof out, "%s run -m tests/fixtures/tiny-dense --ids 1,2,3 -n 20 --spec dflash --drafter %s --block 4",
                    bin, dd);
    CHECK_MSG(rc == 0 && strstr(out, "spec dflash --block 4") && strstr(out, "mean accepted length"), "stats: %s", out);
    rc = ts_test_sh(out, sizeof out, "%s bench -m tests/fixtures/tiny-dense --spec dflash --drafter %s --block 4 --runs 1 "
                    "--gen 24 --prompt 16 --bw-mib 8", bin, dd);
    CHECK_MSG(rc == 0 && strstr(out, "dflash --block 4") && strstr(out, "output identical"), "bench: %s", out);
    rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense --spec dflash --drafter %s --block 8", bin, dd);
    CHECK_MSG(rc == 0 && strstr(out, "DFlash: context K/V cache") && strstr(out, "blocks of 8 rows"), "plan: %s", out);
    rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense --spec dflash --drafter %s --block 99", bin, dd);
    CHECK_MSG(rc != 0 && strstr(out, "--block 99 is outside 2..16"), "plan block 99: %s", out);
}

/* Parity with the training code (tools/train/dflash_train.py): its
 * check.safetensors holds, for two sequences, the ids up to an anchor a, the
 * target's taps of positions [0, a) as transformers computed them, and the
 * trained drafter's logits of the block [ids[a], mask x 15] (fp32 over the
 * exported bf16 weights). The engine drafts the same block twice: from the
 * file's taps (the drafter alone: logits within 1e-3 of their scale), and from
 * its own taps after feeding ids[0..a) (the whole chain: taps close,
 * argmax of the drafts mostly equal). Runs when TS_DFLASH_CHECK names the
 * file (TS_DFLASH_MODEL: the target, default models/default; TS_DFLASH_DIR:
 * the bf16 drafter); otherwise SKIP. */
TS_TEST(dflash, torch_parity) {
    const char *chk = getenv("TS_DFLASH_CHECK"), *mdir = getenv("TS_DFLASH_MODEL"), *ddir = getenv("TS_DFLASH_DIR");
    if (!chk || !*chk || !ddir) {
        fprintf(stderr, "  SKIP: TS_DFLASH_CHECK / TS_DFLASH_DIR not set (a check file of dflash_train.py)\n");
        return;
    }
    if (!mdir) mdir = "models/default";
    ts_st_set *cf = NULL;
    ts_error err = {0};
    CHECK_MSG(ts_st_open_file(chk, &cf, &err) == 0, "%s", err.msg);
    const ts_st_tensor *tid = ts_st_find(cf, "ids"), *tan = ts_st_find(cf, "anchor"), *tlg = ts_st_find(cf, "logits"),
                       *ttp = ts_st_find(cf, "taps");
    CHECK(tid && tan && tlg && ttp);
    const int nseq = (int)tid->shape[0], a = ((const int32_t *)tan->data)[0], V = (int)tlg->shape[2];
    const int nrow = (int)tlg->shape[1], W = (int)ttp->shape[2];
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.dflash = 1;
    ep.drafter_dir = ddir;
    ep.act_bits = 24;
    ts_engine *e = NULL;
    CHECK_MSG(ts_engine_open(mdir, &ep, &e, &err) == 0, "%s", err.msg);
    const ts_dflash *df = e->dflash;
    CHECK(V == e->model.cfg.vocab && W == df->cfg.n_taps * df->cfg.H && nrow == TS_DFLASH_MAX_BLOCK - 1);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.dflash_block = TS_DFLASH_MAX_BLOCK;
    ts_session *s = NULL;
    CHECK_MSG(ts_session_new(e, &sp, &s, &err) == 0, "%s", err.msg);
    ts_stream *bs = s->st.s;
    int32_t blk[TS_DFLASH_MAX_BLOCK];
    float *lg = malloc(sizeof(float) * (size_t)nrow * V);
    double worst_rel = 0, tap_rel = 0;
    int agree_file = 0, agree_own = 0;
    for (int r = 0; r < nseq; r++) {
        const int32_t *ids = (const int32_t *)tid->data + (size_t)r * (a + 1);
        const float *ref = (const float *)tlg->data + (size_t)r * nrow * V;
        const float *taps = (const float *)ttp->data + (size_t)r * a * W;
        blk[0] = ids[a];
        for (int i = 1; i < TS_DFLASH_MAX_BLOCK; i++) blk[i] = df->cfg.mask_id;
        for (int pass = 0; pass < 2; pass++) {
            ts_session_reset(s);
            if (pass == 0) {
                bs->be->ops->write(bs, tv_f32(s->df_taps, a, W), taps);
            } else {
                s->st.n_taps = df->cfg.n_taps;
                s->st.tap_layer = df->cfg.taps;
                s->st.tap_out = s->df_taps;
                CHECK(ts_session_feed(s, ids, a, NULL, NULL, &err) == 0);
                s->st.n_taps = 0;
                const float *mine = ts_be_host(bs, s->df_taps, (size_t)a * W);
                double num = 0, den = 0;
                for (size_t i = 0; i < (size_t)a * W; i++) {
                    num += (double)(mine[i] - taps[i]) * (mine[i] - taps[i]);
                    den += (double)taps[i] * taps[i];
                }
                tap_rel = fmax(tap_rel, sqrt(num / den));
            }
            CHECK(ts_dflash_context(df, &s->df, bs, s->df_taps, a, 0, TS_MODE_EXACT) == 0);
            CHECK(ts_dflash_block(df, &s->df, &e->model, bs, blk, TS_DFLASH_MAX_BLOCK, a, s->vlogits, 0, TS_MODE_EXACT) == 0);
            memcpy(lg, ts_be_host(bs, s->vlogits, (size_t)nrow * V), sizeof(float) * (size_t)nrow * V);
            for (int j = 0; j < nrow; j++) {
                const float *x = lg + (size_t)j * V, *y = ref + (size_t)j * V;
                int ax = 0, ay = 0;
                double mx = 0, d = 0;
                for (int i = 0; i < V; i++) {
                    if (x[i] > x[ax]) ax = i;
                    if (y[i] > y[ay]) ay = i;
                    mx = fmax(mx, fabs(y[i]));
                    d = fmax(d, fabs(x[i] - y[i]));
                }
                if (pass == 0) { worst_rel = fmax(worst_rel, d / mx); agree_file += ax == ay; }
                else agree_own += ax == ay;
            }
        }
    }
    fprintf(stderr, "  torch parity (%d blocks): from the file's taps: max |dlogit| / max|logit| = %.2e, argmax %d/%d; "
                    "engine taps vs transformers' %.2e (rms rel), drafts from them: argmax %d/%d\n",
            nseq, worst_rel, agree_file, nseq * nrow, tap_rel, agree_own, nseq * nrow);
    CHECK_MSG(worst_rel < 1e-3, "the drafter's logits differ from the training code's by %.2e of their scale", worst_rel);
    CHECK(agree_file >= nseq * nrow - 1);
    CHECK_MSG(tap_rel < 2e-2, "the engine's taps differ from transformers' hidden states by %.2e", tap_rel);
    CHECK(agree_own >= nseq * nrow * 3 / 4);
    free(lg);
    ts_session_free(s);
    ts_engine_close(e);
    ts_st_close(cf);
}

/* The drafts of a generation equal the drafts of a fresh session that feeds
 * the same ids up to the block and drafts once: the drafter's context cache,
 * built incrementally from prompt chunks and kept verify rows, holds what one
 * pass over the whole prefix would. Recorded through the draft override
 * (ts_session_override_drafts, which leaves the drafts as they are). */
typedef struct { int pos[64], n[64], k; int32_t d[64][16]; } rec_drafts;
static void record_drafts(void *user, int pos, int m, int32_t *d) {
    rec_drafts *r = user;
    if (r->k >= 64) return;
    r->pos[r->k] = pos;
    r->n[r->k] = m;
    memcpy(r->d[r->k], d, sizeof(int32_t) * (size_t)m);
    r->k++;
}

/* hist > 0: the first hist prompt ids are fed with ts_session_feed before
 * ts_generate drafts from the rest (chat's and the server's way). */
static void incremental_check(const char *mdir, const char *ddir, const int32_t *prompt, int T, int hist) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.dflash = 1;
    ep.drafter_dir = ddir;
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK_MSG(ts_engine_open(mdir, &ep, &e, &err) == 0, "%s", err.msg);
    const int B = 8;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 512;
    sp.dflash_block = B;
    ts_session *s = NULL;
    CHECK(ts_session_new(e, &sp, &s, &err) == 0);
    static rec_drafts rec;
    memset(&rec, 0, sizeof rec);
    ts_session_override_drafts(s, record_drafts, &rec);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = 120;
    gp.dflash_block = B;
    static collect c;
    c.n = 0;
    ts_gen_stats st;
    if (hist) CHECK(ts_session_feed(s, prompt, hist, NULL, NULL, &err) == 0);
    CHECK(ts_generate(s, prompt + hist, T - hist, &gp, on_tok, &c, &st, &err) == 0);
    int32_t all[1024];
    memcpy(all, prompt, sizeof(int32_t) * (size_t)T);
    memcpy(all + T, c.ids, sizeof(int32_t) * (size_t)c.n);
    const ts_dflash *df = e->dflash;
    int same = 0, total = 0, blocks = 0;
    for (int b = 0; b < rec.k && blocks < 12; b += 3, blocks++) {
        const int p = rec.pos[b], m = rec.n[b];
        ts_session_reset(s);
        s->st.n_taps = df->cfg.n_taps;
        s->st.tap_layer = df->cfg.taps;
        s->st.tap_out = s->df_taps;
        for (int off = 0, k; off < p; off += k) { /* the same prefill cuts as generation */
            k = ts_session_chunk(s, p - off);
            CHECK(ts_session_feed(s, all + off, k, NULL, NULL, &err) == 0);
            CHECK(ts_dflash_context(df, &s->df, s->st.s, s->df_taps, k, off, TS_MODE_DRAFT) == 0);
        }
        s->st.n_taps = 0;
        int32_t ids[16];
        ids[0] = all[p];
        for (int i = 1; i <= m; i++) ids[i] = df->cfg.mask_id;
        CHECK(ts_dflash_block(df, &s->df, &e->model, s->st.s, ids, m + 1, p, s->vlogits, 0, TS_MODE_DRAFT) == 0);
        int32_t d[16];
        s->st.s->be->ops->argmax(s->st.s, tv_f32(s->vlogits, m, e->model.cfg.vocab), e->model.cfg.vocab, d, NULL);
        for (int j = 0; j < m; j++) { same += d[j] == rec.d[b][j]; total++; }
    }
    fprintf(stderr, "  %s%s: drafts of the generation vs a fresh pass over the prefix: %d/%d equal over %d blocks\n",
            mdir, hist ? " (history fed first)" : "", same, total, blocks);
    CHECK_MSG(same >= total * 9 / 10, "incremental context differs from a fresh one: %d/%d drafts equal", same, total);
    ts_session_free(s);
    ts_engine_close(e);
}

TS_TEST(dflash, incremental_context) {
    const char *dd = fx_drafter("tiny-dense", "df-inc", NULL);
    CHECK(dd);
    incremental_check("tests/fixtures/tiny-dense", dd, PROMPT, T_PROMPT, 0);
    incremental_check("tests/fixtures/tiny-dense", dd, PROMPT, T_PROMPT, 9);
    struct stat sb;
    if (!stat("models/default/dflash/config.json", &sb)) {
        static const int32_t pr[] = {1279, 355, 260, 2155, 1094, 4373, 11, 344, 257};
        incremental_check("models/default", "models/default/dflash", pr, 9, 0);
        incremental_check("models/default", "models/default/dflash", pr, 9, 6);
    }
}

/* A development aid (runs only when TS_DFLASH_DUMP names an output file):
 * the engine's taps of the ids in TS_DFLASH_DUMP_IDS (comma-separated),
 * raw f32 [n, n_taps*H], for checking the training code on long contexts. */
TS_TEST(dflash, dump_taps) {
    const char *outp = getenv("TS_DFLASH_DUMP"), *idp = getenv("TS_DFLASH_DUMP_IDS");
    if (!outp || !idp) {
        fprintf(stderr, "  SKIP: TS_DFLASH_DUMP / TS_DFLASH_DUMP_IDS not set\n");
        return;
    }
    static int32_t ids[4096];
    int n = 0;
    for (const char *p = idp; *p && n < 4096;) {
        ids[n++] = (int32_t)strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.dflash = 1;
    ep.act_bits = 24;
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK_MSG(ts_engine_open("models/default", &ep, &e, &err) == 0, "%s", err.msg);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 4096;
    sp.dflash_block = 16;
    ts_session *s = NULL;
    CHECK(ts_session_new(e, &sp, &s, &err) == 0);
    const ts_dflash *df = e->dflash;
    const int W = df->cfg.n_taps * df->cfg.H;
    FILE *f = fopen(outp, "wb");
    CHECK(f);
    s->st.n_taps = df->cfg.n_taps;
    s->st.tap_layer = df->cfg.taps;
    s->st.tap_out = s->df_taps;
    for (int off = 0, k; off < n; off += k) {
        k = ts_session_chunk(s, n - off);
        CHECK(ts_session_feed(s, ids + off, k, NULL, NULL, &err) == 0);
        fwrite(ts_be_host(s->st.s, s->df_taps, (size_t)k * W), sizeof(float), (size_t)k * W, f);
    }
    fclose(f);
    ts_session_free(s);
    ts_engine_close(e);
}
