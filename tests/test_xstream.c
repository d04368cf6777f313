/* test_xstream.c: expert streaming through the forward (--expert-cache,
 * src/model/xstream.h). Group `xstream`.
 *
 * The claim under test is "identical output": with the routed experts read
 * on demand into a cache of a few slots, every logit of a prompt feed and
 * every greedy id (plain and with MTP drafting) equal the fully resident
 * engine's, bit for bit, on a bf16 synth of the tiny MoE shape (the slots
 * hold file bytes; the fixtures as released fuse their experts), on the MoE
 * fixtures converted to INT4 and INT8 (on AVX-512 the slots hold the
 * kernels' repacked copies; with --kernels avx2 the file bytes), with prompt
 * chunks that need more distinct experts than there are slots (the rows are
 * then cut into groups). The cache must actually be exercised: misses and
 * evictions are checked to be nonzero.
 * Errors: a cache below one layer's top-k, a dense model, an install with
 * fused experts, a read error and a truncated file in the middle of a
 * generation (the session fails cleanly, then works again once the file
 * reads), and no memory left behind after close.
 */
#include <errno.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/xstream.h"
#include "cpu/cpu.h" /* the repacking, for its vector/scalar check */
#include "ts_test.h"

static size_t used_total(void) {
    size_t t = 0;
    for (int k = 0; k < TS_MEM_N; k++) t += ts_mem_used((ts_mem_cat)k);
    return t;
}

/* fixture converted to bits (4, 8), or bits 16: a bf16 synth of the tiny
 * MoE shape (the fixtures as released have fused experts) */
static const char *convert_once(const char *fixture, int bits) {
    static char dirs[6][256];
    static int made[6];
    int slot = bits == 16 ? 4 : (strcmp(fixture, "tiny-moe") ? 2 : 0) + (bits == 8);
    char *d = dirs[slot];
    if (made[slot]) return made[slot] > 0 ? d : NULL;
    snprintf(d, 256, "%s/xs-%s-%d", ts_test_tmpdir(), fixture, bits);
    char out[4096];
    int rc = bits == 16 ? ts_test_sh(out, sizeof out, "%s synth --shape tests/fixtures/quant/tiny-moe-shape.json --out %s --bits 16 --quiet",
                                     ts_test_bin(), d)
                        : ts_test_sh(out, sizeof out, "%s convert tests/fixtures/%s %s --bits %d --quiet", ts_test_bin(), fixture, d, bits);
    made[slot] = rc == 0 ? 1 : -1;
    if (rc) ts_test_fail(__FILE__, __LINE__, "making %s: %s", d, out);
    return rc ? NULL : d;
}

static int open_engine(const char *dir, uint64_t cache, const char *kernels, const char *policy, ts_engine **e, ts_error *err) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.n_threads = 2;
    ep.kernels = kernels;
    ep.expert_cache = cache;
    ep.expert_policy = policy;
    return ts_engine_open(dir, &ep, e, err);
}

/* The smallest cache that opens with `slots` slots: grow from the slot size
 * until the engine opens, then add slots. */
static uint64_t cache_for(const char *dir, const char *kernels, int slots) {
    ts_engine *e = NULL;
    ts_error err = {0};
    if (open_engine(dir, 1ull << 30, kernels, NULL, &e, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s: %s", dir, err.msg);
        return 0;
    }
    ts_expert_stats x;
    ts_engine_expert_stats(e, &x);
    const int topk = ts_engine_info(e)->n_experts_per_tok;
    ts_engine_close(e);
    uint64_t b = x.slot_bytes * (uint64_t)topk;
    for (int i = 0; i < 4096; i++, b += x.slot_bytes / 8) {
        if (open_engine(dir, b, kernels, NULL, &e, &err) == 0) {
            ts_engine_expert_stats(e, &x);
            ts_engine_close(e);
            return b + (uint64_t)(slots - x.n_slots) * x.slot_bytes;
        }
    }
    ts_test_fail(__FILE__, __LINE__, "%s: no cache size opened", dir);
    return 0;
}

typedef struct run_out {
    float *logits;   /* [n_prompt, vocab] of the feed */
    int32_t ids[64];
    int n_ids;
    ts_expert_stats xs;
} run_out;

static int collect(void *user, int32_t id) {
    run_out *o = user;
    if (o->n_ids < 64) o->ids[o->n_ids++] = id;
    return 0;
}

/* Feed the prompt in chunks of `chunk` rows (logits of every row), then a
 * greedy generation of n tokens from a fresh timeline (spec: MTP drafting of
 * 3 per block). */
static int run_once(ts_engine *e, const int32_t *prompt, int np, int chunk, int n, int spec, run_out *o, ts_error *err) {
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
        rc = ts_generate(s, prompt, np, &gp, collect, o, NULL, err);
    }
    ts_engine_expert_stats(e, &o->xs);
    ts_session_free(s);
    return rc;
}

static void check_identical(const char *dir, const char *kernels, int slots) {
    if (!dir) return;
    uint64_t cache = cache_for(dir, kernels, slots);
    if (!cache) return;
    ts_error err = {0};
    ts_engine *er = NULL, *ec = NULL;
    CHECK_MSG(open_engine(dir, 0, kernels, NULL, &er, &err) == 0, "%s", err.msg);
    if (ts_test_failed()) return;
    const ts_model_info *in = ts_engine_info(er);
    int32_t prompt[24];
    uint64_t rs = 0x9e3779b97f4a7c15ull ^ (uint64_t)slots;
    for (int i = 0; i < 24; i++) { rs = rs * 6364136223846793005ull + 1442695040888963407ull; prompt[i] = (int32_t)((rs >> 33) % (uint64_t)in->vocab_size); }
    const char *policies[2] = {"lfru", "lru"};
    for (int pol = 0; pol < 2; pol++) {
        CHECK_MSG(open_engine(dir, cache, kernels, policies[pol], &ec, &err) == 0, "%s", err.msg);
        if (ts_test_failed()) break;
        ts_expert_stats x0;
        ts_engine_expert_stats(ec, &x0);
        CHECK_MSG(x0.enabled && x0.n_slots == slots, "%d slots, wanted %d", x0.n_slots, slots);
        for (int spec = 0; spec <= (in->has_mtp ? 1 : 0); spec++)
            for (int chunk = 1; chunk <= 16; chunk *= 4) {
                run_out a = {0}, b = {0};
                CHECK_MSG(run_once(er, prompt, 24, chunk, 24, spec, &a, &err) == 0, "%s", err.msg);
                CHECK_MSG(run_once(ec, prompt, 24, chunk, 24, spec, &b, &err) == 0, "%s", err.msg);
                if (!ts_test_failed()) {
                    CHECK_MSG(!memcmp(a.logits, b.logits, sizeof(float) * 24 * (size_t)in->vocab_size),
                              "%s kernels %s policy %s chunk %d: prompt logits differ with a %d-slot cache", dir,
                              kernels ? kernels : "auto", policies[pol], chunk, slots);
                    CHECK_MSG(a.n_ids == 24 && b.n_ids == 24 && !memcmp(a.ids, b.ids, sizeof a.ids),
                              "%s kernels %s policy %s chunk %d spec %d: greedy ids differ", dir, kernels ? kernels : "auto",
                              policies[pol], chunk, spec);
                }
                free(a.logits);
                free(b.logits);
            }
        ts_expert_stats x;
        ts_engine_expert_stats(ec, &x);
        CHECK_MSG(x.misses > 0 && x.evictions > 0 && x.hits > 0, "the cache was not exercised: %llu hits, %llu misses, %llu evictions",
                  (unsigned long long)x.hits, (unsigned long long)x.misses, (unsigned long long)x.evictions);
        CHECK(x.bytes_read >= x.misses * 1024);
        ts_engine_close(ec);
        ec = NULL;
    }
    ts_engine_close(er);
}

TS_TEST(xstream, identical_tiny_moe) {
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    check_identical(convert_once("tiny-moe", 16), NULL, 3);     /* bf16: file bytes in the slots */
    check_identical(convert_once("tiny-moe", 4), NULL, 3);      /* INT4: repacked on AVX-512 */
    check_identical(convert_once("tiny-moe", 4), "avx2", 2);    /* INT4 read in place from the slots */
    check_identical(convert_once("tiny-moe", 8), NULL, 4);
    CHECK_MSG(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0, "%zu bytes of expert cache left", ts_mem_used(TS_MEM_EXPERT_CACHE) - used0);
}

TS_TEST(xstream, identical_alt_moe) {
    /* alt-moe as released has fused experts: only its converts stream */
    check_identical(convert_once("alt-moe", 4), NULL, 5);
    check_identical(convert_once("alt-moe", 8), NULL, 6);
    check_identical(convert_once("alt-moe", 4), "generic", 4);
}

TS_TEST(xstream, option_errors) {
    const char *q4 = convert_once("tiny-moe", 4);
    if (!q4) return;
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE), all0 = used_total();
    ts_error err = {0};
    ts_engine *e = NULL;
    /* smaller than one layer's top-k */
    CHECK(open_engine(q4, 4096, NULL, NULL, &e, &err) == TS_E_ARG && !e);
    CHECK_MSG(strstr(err.msg, "--expert-cache") && strstr(err.msg, "top-2"), "%s", err.msg);
    /* a dense model */
    CHECK(open_engine("tests/fixtures/tiny-dense", 1 << 20, NULL, NULL, &e, &err) == TS_E_ARG && !e);
    CHECK_MSG(strstr(err.msg, "no routed experts"), "%s", err.msg);
    /* fused experts (the fixture as released): the tensor and the remedy named */
    CHECK(open_engine("tests/fixtures/alt-moe", 1 << 20, NULL, NULL, &e, &err) == TS_E_MODEL && !e);
    CHECK_MSG(strstr(err.msg, "gate_up_proj") && strstr(err.msg, "convert"), "%s", err.msg);
    /* an unknown policy */
    CHECK(open_engine(q4, 1 << 20, NULL, "mru", &e, &err) == TS_E_ARG && !e);
    CHECK_MSG(strstr(err.msg, "mru"), "%s", err.msg);
    /* a host tier on the CPU backend (its cache is host memory already) */
    {
        ts_engine_params ep;
        ts_engine_params_default(&ep);
        ep.expert_cache = 1 << 20;
        ep.expert_host_cache = 1 << 20;
        CHECK(ts_engine_open(q4, &ep, &e, &err) == TS_E_ARG && !e);
        CHECK_MSG(strstr(err.msg, "--expert-host-cache") && strstr(err.msg, "cpu"), "%s", err.msg);
    }
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
    CHECK_MSG(used_total() == all0, "%zu bytes left after failed opens", used_total() - all0);
    /* without the option nothing is allocated for a cache */
    CHECK(open_engine(q4, 0, NULL, NULL, &e, &err) == 0);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
    ts_expert_stats x;
    ts_engine_expert_stats(e, &x);
    CHECK(!x.enabled);
    ts_engine_close(e);
}

/* Greedy ids of a generation on e from a reset timeline, in one session per
 * engine kept across calls (chunk 4 rows): a failed generation must leave
 * that same session usable. gen_close before the engine goes. */
static ts_session *g_sess;
static ts_engine *g_sess_e;

static void gen_close(void) {
    ts_session_free(g_sess);
    g_sess = NULL;
    g_sess_e = NULL;
}

static int gen_ids(ts_engine *e, int32_t *ids, int n, ts_error *err) {
    int32_t prompt[6] = {11, 22, 33, 44, 55, 66};
    run_out o = {0};
    if (g_sess_e != e) {
        gen_close();
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.n_ctx = 64;
        sp.max_rows = 4;
        int rc = ts_session_new(e, &sp, &g_sess, err);
        if (rc) return rc;
        g_sess_e = e;
    }
    ts_session_reset(g_sess);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = n;
    gp.temperature = 0;
    int rc = ts_generate(g_sess, prompt, 6, &gp, collect, &o, NULL, err);
    memcpy(ids, o.ids, sizeof(int32_t) * (size_t)n);
    return rc;
}

/* A read error in the middle of a generation: the generation fails with an
 * I/O error naming the expert, the cache holds no half-read slot, and the
 * same session, reset, generates the resident ids (reads working again). */
TS_TEST(xstream, read_error_mid_generation) {
    const char *q4 = convert_once("tiny-moe", 4);
    if (!q4) return;
    uint64_t cache = cache_for(q4, NULL, 3);
    if (!cache) return;
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    ts_error err = {0};
    ts_engine *er = NULL, *ec = NULL;
    int32_t ref[16], got[16];
    CHECK(open_engine(q4, 0, NULL, NULL, &er, &err) == 0);
    CHECK(gen_ids(er, ref, 16, &err) == 0);
    gen_close();
    ts_engine_close(er);
    CHECK_MSG(open_engine(q4, cache, NULL, NULL, &ec, &err) == 0, "%s", err.msg);
    if (ts_test_failed()) return;
    ts_xc *c = ts_xstream_cache(ec->model.xs);
    ts_xc_fail_read_after(c, 40); /* well inside the generation: ~2 reads per layer and token */
    int rc = gen_ids(ec, got, 16, &err);
    CHECK_MSG(rc == TS_E_IO && strstr(err.msg, "expert cache: reading layer") && strstr(err.msg, "Input/output error"), "rc %d: %s",
              rc, err.msg);
    CHECK(ts_xc_pinned(c) == 0);
    ts_expert_stats x;
    ts_engine_expert_stats(ec, &x);
    CHECK(x.read_errors == 1 && x.misses > 0);
    memset(got, 0, sizeof got);
    CHECK_MSG(gen_ids(ec, got, 16, &err) == 0, "%s", err.msg);
    CHECK(!memcmp(ref, got, sizeof ref));
    gen_close();
    ts_engine_close(ec);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
}

/* A shard truncated under a running engine: the file at the install's path
 * is replaced by a copy cut in the middle of a routed expert (the engine's
 * mapping keeps the whole old file, as a process that mapped it would: a
 * real truncation in place would fault on the router weights the forward
 * reads from the mapping, which lie next to the experts). Reads past the new
 * end fail with the file named and "truncated"; once the whole file is back,
 * the same engine generates the resident ids. */
TS_TEST(xstream, truncated_file_mid_generation) {
    const char *q4 = convert_once("tiny-moe", 4);
    if (!q4) return;
    char dir[300], out[2048];
    snprintf(dir, sizeof dir, "%s/xs-trunc", ts_test_tmpdir());
    CHECK(ts_test_sh(out, sizeof out, "rm -rf %s && cp -r %s %s", dir, q4, dir) == 0);
    uint64_t cache = cache_for(dir, NULL, 3);
    if (!cache) return;
    ts_error err = {0};
    ts_engine *er = NULL, *ec = NULL;
    int32_t ref[16], got[16];
    CHECK(open_engine(dir, 0, NULL, NULL, &er, &err) == 0);
    CHECK(gen_ids(er, ref, 16, &err) == 0);
    gen_close();
    ts_engine_close(er);
    CHECK_MSG(open_engine(dir, cache, NULL, NULL, &ec, &err) == 0, "%s", err.msg);
    if (ts_test_failed()) return;
    ts_xc *c = ts_xstream_cache(ec->model.xs);
    const ts_st_set *st = ec->st;
    char name[128];
    snprintf(name, sizeof name, "model.language_model.layers.%d.mlp.experts.0.gate_proj.weight", ec->model.cfg.n_layers / 2);
    const ts_st_tensor *t = ts_st_find(st, name);
    CHECK_MSG(t != NULL, "no %s", name);
    if (!t) { ts_engine_close(ec); return; }
    const char *path = st->files[t->file].path;
    uint64_t cut = (uint64_t)((const uint8_t *)t->data - (const uint8_t *)st->files[t->file].map) + t->nbytes / 2;
    CHECK(ts_test_sh(out, sizeof out, "mv %s %s.whole && head -c %llu %s.whole > %s", path, path, (unsigned long long)cut, path,
                     path) == 0);
    CHECK_MSG(ts_xc_reopen_files(c, &err) == 0, "%s", err.msg);
    int rc = gen_ids(ec, got, 16, &err);
    CHECK_MSG(rc == TS_E_IO && strstr(err.msg, "truncated") && strstr(err.msg, "expert cache"), "rc %d: %s", rc, err.msg);
    CHECK(ts_xc_pinned(c) == 0);
    CHECK(ts_test_sh(out, sizeof out, "mv %s.whole %s", path, path) == 0);
    CHECK_MSG(ts_xc_reopen_files(c, &err) == 0, "%s", err.msg);
    memset(got, 0, sizeof got);
    CHECK_MSG(gen_ids(ec, got, 16, &err) == 0, "%s", err.msg);
    CHECK(!memcmp(ref, got, sizeof ref));
    gen_close();
    ts_engine_close(ec);
}

/* The plan counts what the engine allocates for the cache, and the routing
 * buffers of a session, to the byte. */
TS_TEST(xstream, plan_matches_allocation) {
    const char *q4 = convert_once("alt-moe", 4);
    if (!q4) return;
    uint64_t cache = cache_for(q4, NULL, 7);
    if (!cache) return;
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.expert_cache = cache;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 128;
    sp.max_rows = 8;
    sp.spec_draft = 2;
    ts_mem_plan *pl = malloc(sizeof *pl);
    ts_error err = {0};
    CHECK_MSG(ts_mem_plan_dir_ex(q4, &ep, &sp, pl, &err) == 0, "%s", err.msg);
    size_t before[TS_MEM_N];
    for (int k = 0; k < TS_MEM_N; k++) before[k] = ts_mem_used_in(TS_DOM_HOST, (ts_mem_cat)k);
    ts_engine *e = NULL;
    ts_session *s = NULL;
    CHECK_MSG(ts_engine_open(q4, &ep, &e, &err) == 0, "%s", err.msg);
    CHECK_MSG(e && ts_session_new(e, &sp, &s, &err) == 0, "%s", err.msg);
    if (!ts_test_failed()) {
        for (int k = 0; k < TS_MEM_N; k++) {
            size_t got = ts_mem_used_in(TS_DOM_HOST, (ts_mem_cat)k) - before[k];
            CHECK_MSG(got == pl->bytes[TS_DOM_HOST][k], "category %s: allocated %zu, planned %llu", ts_mem_cat_name((ts_mem_cat)k),
                      got, (unsigned long long)pl->bytes[TS_DOM_HOST][k]);
        }
        ts_expert_stats x;
        ts_engine_expert_stats(e, &x);
        CHECK(pl->expert_slots == x.n_slots && pl->expert_slot_bytes == x.slot_bytes && x.n_slots == 7);
        CHECK(pl->expert_file_bytes > 0 && pl->mapped_kept_bytes + pl->expert_file_bytes <= pl->mapped_bytes);
    }
    ts_session_free(s);
    ts_engine_close(e);
    free(pl);
}

/* The plan of a shape (no checkpoint) with --expert-cache equals the plan of
 * the install synth writes for it, byte for byte. */
TS_TEST(xstream, shape_plan_equals_install_plan) {
    char dir[300], out[2048];
    snprintf(dir, sizeof dir, "%s/xs-shape4", ts_test_tmpdir());
    const char *shape = "tests/fixtures/quant/tiny-moe-shape.json";
    CHECK(ts_test_sh(out, sizeof out, "rm -rf %s && %s synth --shape %s --out %s --bits 4 --quiet", dir, ts_test_bin(), shape, dir) == 0);
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.expert_cache = 1 << 20;
    ts_mem_plan *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    ts_error err = {0};
    CHECK_MSG(ts_mem_plan_shape_ex(shape, 4, 0, dir, &ep, NULL, a, &err) == 0, "%s", err.msg);
    CHECK_MSG(ts_mem_plan_dir_ex(dir, &ep, NULL, b, &err) == 0, "%s", err.msg);
    CHECK(a->expert_slots > 0 && a->expert_slots == b->expert_slots && a->expert_slot_bytes == b->expert_slot_bytes);
    CHECK(a->total_bytes == b->total_bytes && a->mapped_kept_bytes == b->mapped_kept_bytes &&
          a->expert_file_bytes == b->expert_file_bytes && !memcmp(a->bytes, b->bytes, sizeof a->bytes));
    free(a);
    free(b);
}

/* The vector repacking (cpu/pack_avx512.c, what streamed experts and the
 * load use) writes the scalar loop's bytes, padding rows included, for
 * both bit widths, both scale widths and row counts off the 16-row grid. */
TS_TEST(xstream, pack_vector_equals_scalar) {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw")) SKIP("no AVX-512 on this CPU");
    static const struct { int64_t rows, cols; int bits, group; ts_dtype sd; } cases[] = {
        {48, 256, 4, 64, TS_DTYPE_BF16}, {37, 128, 4, 64, TS_DTYPE_F32}, {16, 512, 8, 128, TS_DTYPE_BF16},
        {5, 64, 8, 64, TS_DTYPE_F32},    {1, 192, 4, 64, TS_DTYPE_BF16}, {1040, 1024, 4, 64, TS_DTYPE_BF16}};
    uint64_t rs = 42;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        ts_weight w = {0};
        w.dtype = TS_DTYPE_U32;
        w.rows = cases[ci].rows;
        w.cols = cases[ci].cols;
        w.bits = cases[ci].bits;
        w.group = cases[ci].group;
        w.sdtype = cases[ci].sd;
        size_t nd = (size_t)w.rows * (size_t)w.cols * (size_t)w.bits / 8, ss = w.sdtype == TS_DTYPE_F32 ? 4 : 2;
        size_t ns = (size_t)w.rows * (size_t)(w.cols / w.group) * ss;
        /* exact-size buffers: a read past their end shows under a checker */
        uint8_t *d = malloc(nd), *sc = malloc(ns), *bi = malloc(ns);
        for (size_t i = 0; i < nd; i++) { rs = rs * 6364136223846793005ull + 1442695040888963407ull; d[i] = (uint8_t)(rs >> 56); }
        for (size_t i = 0; i < ns; i++) { rs = rs * 6364136223846793005ull + 1442695040888963407ull; sc[i] = (uint8_t)(rs >> 56); bi[i] = (uint8_t)(rs >> 48); }
        w.data = d;
        w.scales = sc;
        w.biases = bi;
        size_t sz = (size_t)((w.rows + 15) / 16) * (size_t)(w.cols / w.group) * ts_pack_record_bytes(w.bits, w.group, w.sdtype) + 64;
        uint8_t *a = malloc(sz), *b = malloc(sz);
        memset(a, 0xAA, sz);
        memset(b, 0x55, sz);
        ts_weight wa = w, wb = w;
        ts_pack_force_scalar(1);
        ts_weight_pack_on(NULL, &wa, a);
        ts_pack_force_scalar(0);
        ts_weight_pack_on(NULL, &wb, b);
        size_t used = sz - 64;
        CHECK_MSG(!memcmp(wa.packed, wb.packed, used), "case %zu: vector repacking differs from the scalar loop", ci);
        free(d), free(sc), free(bi), free(a), free(b);
    }
}

/* ---- the trained MoE (models/moe, tools/train/RESULTS-moe.md) ---- */

#define MOE_BF16_PPL 106.0588 /* transformers, bf16 weights, fp32 compute (report.json) */

static char g_sh[1 << 16];

static double moe_ppl(const char *extra) {
    int rc = ts_test_sh(g_sh, sizeof g_sh, "%s perplexity -m models/moe -f tools/train/heldout.ids --json %s 2>/dev/null",
                        ts_test_bin(), extra);
    const char *p = strstr(g_sh, "\"ppl\": ");
    if (rc || !p) ts_test_fail(__FILE__, __LINE__, "perplexity %s: %s", extra, g_sh);
    return rc || !p ? 0 : atof(p + 7);
}

/* Held-out perplexity of the shipped INT4 install within 3% of the bf16
 * checkpoint's, and the same number, to every printed digit, through a
 * 10-slot expert cache (10% of the main stack's experts) under either policy. */
TS_TEST(xstream, trained_moe_perplexity) {
    double p = moe_ppl(""), c1 = moe_ppl("--expert-cache 186752"), c2 = moe_ppl("--expert-cache 186752 --expert-policy lru");
    fprintf(stderr, "  trained MoE held-out perplexity %.4f (bf16 %.4f: %+.2f%%); with a 10-slot cache %.6f / %.6f\n", p,
            MOE_BF16_PPL, 100.0 * (p / MOE_BF16_PPL - 1), c1, c2);
    CHECK_MSG(p > 1 && p <= MOE_BF16_PPL * 1.03, "perplexity %.4f", p);
    CHECK_MSG(c1 == p && c2 == p, "the cache changes perplexity: %.6f / %.6f vs %.6f", c1, c2, p);
}

/* Greedy ids and prompt logits through a few slots equal the resident run
 * on the trained model too (its routing is far from uniform: hits and
 * evictions both happen), with and without MTP drafting. */
TS_TEST(xstream, identical_trained_moe) {
    check_identical("models/moe", NULL, 5);
    check_identical("models/moe", "avx2", 6);
}

/* The commands: --expert-cache parsed by the shared option parser (bad
 * sizes refused with the text named), bench --json and plan --json carry
 * the cache, run -v reports it. */
TS_TEST(xstream, cli_reports_the_cache) {
    CHECK(ts_test_sh(g_sh, sizeof g_sh, "%s bench -m models/moe --prompt 4 --gen 8 --runs 1 --expert-cache 400K --json 2>&1",
                     ts_test_bin()) == 0);
    CHECK_MSG(strstr(g_sh, "\"expert_cache\": {\"slots\": ") && strstr(g_sh, "\"hit_rate\": ") && strstr(g_sh, "\"layer_hit_rate\": ["),
              "%s", g_sh);
    CHECK(ts_test_sh(g_sh, sizeof g_sh, "%s plan -m models/moe --expert-cache 400K --json 2>&1", ts_test_bin()) == 0);
    CHECK_MSG(strstr(g_sh, "\"expert_cache\": {\"slots\": ") && strstr(g_sh, "\"expert_cache\": ") , "%s", g_sh);
    CHECK(ts_test_sh(g_sh, sizeof g_sh, "%s run -m models/moe --ids 1,2,3 -n 4 -v --expert-cache 1M --expert-policy lru 2>&1",
                     ts_test_bin()) == 0);
    CHECK_MSG(strstr(g_sh, "[expert cache: ") && strstr(g_sh, "hit rate by layer"), "%s", g_sh);
    CHECK(ts_test_sh(g_sh, sizeof g_sh, "%s run -m models/moe --ids 1 -n 1 --expert-cache 12Q 2>&1", ts_test_bin()) != 0);
    CHECK_MSG(strstr(g_sh, "--expert-cache") && strstr(g_sh, "12Q"), "%s", g_sh);
    CHECK(ts_test_sh(g_sh, sizeof g_sh, "%s run -m models/moe --ids 1 -n 1 --expert-cache 1M --expert-policy mru 2>&1", ts_test_bin()) != 0);
    CHECK_MSG(strstr(g_sh, "mru"), "%s", g_sh);
}

/* Next-layer prediction (TS_XC_PREFETCH=1): reads started while a layer
 * computes only change what the cache holds, never a bit of the output;
 * predictions are made and some of them are used. */
TS_TEST(xstream, prefetch_identical) {
    setenv("TS_XC_PREFETCH", "1", 1);
    check_identical("models/moe", NULL, 6);
    check_identical(convert_once("tiny-moe", 4), NULL, 3);
    uint64_t cache = cache_for("models/moe", NULL, 12);
    ts_engine *e = NULL;
    ts_error err = {0};
    CHECK_MSG(cache && open_engine("models/moe", cache, NULL, NULL, &e, &err) == 0, "%s", err.msg);
    if (e) {
        int32_t ids[16];
        CHECK_MSG(gen_ids(e, ids, 16, &err) == 0, "%s", err.msg);
        gen_close();
        ts_expert_stats x;
        ts_engine_expert_stats(e, &x);
        CHECK_MSG(x.prefetched > 0 && x.prefetch_used > 0 && x.prefetch_used <= x.prefetched, "prefetched %llu, used %llu",
                  (unsigned long long)x.prefetched, (unsigned long long)x.prefetch_used);
        ts_engine_close(e);
    }
    unsetenv("TS_XC_PREFETCH");
}
