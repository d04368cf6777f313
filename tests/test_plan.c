/* test_plan.c: the memory plan (src/engine/plan.c) against the allocator's counters.
 *
 * For both tiny fixtures and a quantized MoE, with and without drafting (MTP,
 * n-gram: the verify buffers alone, and both),
 * several contexts and chunk sizes: ts_mem_plan_dir's bytes per domain and
 * category equal, to the byte, what ts_engine_open + ts_session_new make
 * ts_mem_used_in() count; the plan itself leaves nothing allocated; an
 * option that is off (drafting, the MTP cache, the checkpoint, chunked
 * prefill) adds no byte and no line. For a shape (no checkpoint),
 * ts_mem_plan_shape equals ts_mem_plan_dir of the install `synth` writes
 * for it, item by item; the planned tensor index equals the one opened from
 * written shards. The released shapes' totals are frozen in
 * tests/plan_shapes.txt. The CLI prints the same totals, and its --help
 * lists its options.
 */
#include <unistd.h>

#include "engine/engine.h"
#include "cpu/kernels.h"
#include "loader/safetensors.h"
#include "loader/st_writer.h"
#include "ts_test.h"

/* Tests whose arithmetic assumes the default buffers run with TS_AHEAD set
 * aside (ts_env_push): run-ahead is off on the CPU unless TS_AHEAD=1
 * forces it, and its buffers are checked where they are asked for (ahead =
 * 1 in a session's parameters; tests/test_ahead.c), so the suite passes
 * under TS_AHEAD=1 too. */

typedef struct { int ctx, chunk, draft, checkpoint, mtp, ngram, ahead; } cfg;

static void params(cfg c, ts_session_params *sp) {
    ts_session_params_default(sp);
    sp->n_ctx = c.ctx;
    sp->max_rows = c.chunk;
    sp->spec_draft = c.draft;
    sp->checkpoint = c.checkpoint;
    sp->mtp = c.mtp;
    sp->ngram_draft = c.ngram;
    sp->ahead = c.ahead;
}

static int check_one(const char *dir, cfg c, ts_mem_plan *out) {
    ts_session_params sp;
    params(c, &sp);
    /* the kernels' workspace is shared by a process's sessions: measure this
     * session's reservation from an empty one */
    ts_kernels_release();
    size_t before[TS_DOM_N][TS_MEM_N];
    for (int d = 0; d < TS_DOM_N; d++)
        for (int k = 0; k < TS_MEM_N; k++) before[d][k] = ts_mem_used_in((ts_mem_domain)d, (ts_mem_cat)k);
    ts_error err = {0};
    if (ts_mem_plan_dir(dir, &sp, out, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return -1; }
    for (int d = 0; d < TS_DOM_N; d++)
        for (int k = 0; k < TS_MEM_N; k++)
            if (ts_mem_used_in((ts_mem_domain)d, (ts_mem_cat)k) != before[d][k]) {
                ts_test_fail(__FILE__, __LINE__, "the plan left %s %s bytes allocated", ts_mem_domain_name((ts_mem_domain)d),
                             ts_mem_cat_name((ts_mem_cat)k));
                return -1;
            }
    ts_engine *e = NULL;
    ts_session *s = NULL;
    if (ts_engine_open(dir, NULL, &e, &err) || ts_session_new(e, &sp, &s, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
        ts_engine_close(e);
        return -1;
    }
    int bad = 0;
    uint64_t sum = 0, dsum = 0;
    for (int d = 0; d < TS_DOM_N; d++) {
        uint64_t in_dom = 0;
        for (int k = 0; k < TS_MEM_N; k++) {
            size_t got = ts_mem_used_in((ts_mem_domain)d, (ts_mem_cat)k) - before[d][k];
            sum += out->bytes[d][k];
            in_dom += out->bytes[d][k];
            if (got != out->bytes[d][k]) {
                ts_test_fail(__FILE__, __LINE__, "%s ctx %d chunk %d draft %d: %s %s: plan %llu bytes, allocated %zu", dir,
                             c.ctx, c.chunk, c.draft, ts_mem_domain_name((ts_mem_domain)d),
                             ts_mem_cat_name((ts_mem_cat)k), (unsigned long long)out->bytes[d][k], got);
                bad = 1;
            }
        }
        if (in_dom != out->dom_bytes[d]) bad = 1;
        dsum += out->dom_bytes[d];
    }
    uint64_t csum = 0, isum = 0;
    for (int k = 0; k < TS_MEM_N; k++) csum += out->cat_bytes[k];
    for (int i = 0; i < out->n_items; i++) isum += out->items[i].bytes;
    if (sum != out->total_bytes || dsum != sum || csum != sum || isum != sum ||
        out->engine_bytes + out->session_bytes != out->total_bytes) {
        ts_test_fail(__FILE__, __LINE__, "plan totals do not add up");
        bad = 1;
    }
    ts_session_free(s);
    ts_engine_close(e);
    ts_kernels_release();
    for (int d = 0; d < TS_DOM_N; d++)
        for (int k = 0; k < TS_MEM_N; k++)
            if (ts_mem_used_in((ts_mem_domain)d, (ts_mem_cat)k) != before[d][k]) {
                ts_test_fail(__FILE__, __LINE__, "%s bytes left after closing", ts_mem_cat_name((ts_mem_cat)k));
                bad = 1;
            }
    return bad ? -1 : 0;
}

static void equals_allocations_body(void);
TS_TEST(plan, equals_allocations) {
    char *keep = ts_env_push("TS_AHEAD", NULL);
    equals_allocations_body();
    ts_env_pop("TS_AHEAD", keep);
}
static void equals_allocations_body(void) {
    static const char *fx[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe"};
    static const cfg cfgs[] = {{0, 0, 0, 0, 0, 0, 0}, {300, 7, 0, 0, 0, 0, 0}, {1000, 1, 0, 0, 0, 0, 0}, {512, 64, 0, 0, 0, 0, 0}};
    for (int f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
            ts_mem_plan off, on;
            cfg c = cfgs[i];
            c.draft = 0;
            CHECK(check_one(fx[f], c, &off) == 0);
            CHECK_MSG(off.drafter_bytes == 0 && off.cat_bytes[TS_MEM_SPEC] == 0 && off.cat_bytes[TS_MEM_MTP] == 0,
                      "without drafting: drafter %llu, spec %llu, mtp %llu bytes", (unsigned long long)off.drafter_bytes,
                      (unsigned long long)off.cat_bytes[TS_MEM_SPEC], (unsigned long long)off.cat_bytes[TS_MEM_MTP]);
            for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M += 3) {
                c.draft = M;
                CHECK(check_one(fx[f], c, &on) == 0);
                CHECK_MSG(on.total_bytes - off.total_bytes == on.drafter_bytes,
                          "%s ctx %d chunk %d draft %d: drafting adds %llu bytes, the plan's drafter part is %llu", fx[f],
                          c.ctx, c.chunk, M, (unsigned long long)(on.total_bytes - off.total_bytes),
                          (unsigned long long)on.drafter_bytes);
                CHECK(on.cat_bytes[TS_MEM_SPEC] > 0 && on.cat_bytes[TS_MEM_MTP] > 0);
                CHECK(on.engine_bytes == off.engine_bytes);
            }
            /* n-gram drafting: the verify buffers alone. Against MTP of the
             * same M: no MTP byte, one row of distributions instead of M + 1
             * (the target's: a point-mass draft keeps none), the verify
             * rows' scores over the context alone, every other item the
             * same; both at once: the allocations still equal the plan */
            for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M += 3) {
                static ts_mem_plan mtp;
                c.draft = M;
                CHECK(check_one(fx[f], c, &mtp) == 0);
                c.draft = 0;
                c.ngram = M;
                CHECK(check_one(fx[f], c, &on) == 0);
                CHECK_MSG(on.total_bytes - off.total_bytes == on.drafter_bytes && on.cat_bytes[TS_MEM_MTP] == 0 &&
                              on.cat_bytes[TS_MEM_SPEC] > 0 && on.ngram_draft == M && on.spec_draft == 0,
                          "%s ngram %d: adds %llu bytes, drafter part %llu, mtp %llu", fx[f], M,
                          (unsigned long long)(on.total_bytes - off.total_bytes), (unsigned long long)on.drafter_bytes,
                          (unsigned long long)on.cat_bytes[TS_MEM_MTP]);
                /* the lines MTP has and n-gram drafting lacks: its cache, its
                 * hiddens, its attention rows past the context */
                CHECK_MSG(on.n_items == mtp.n_items - 3, "%s ngram %d: %d lines, MTP's %d", fx[f], M, on.n_items, mtp.n_items);
                for (int k = 0, j = 0; k < on.n_items; k++, j++) {
                    while (j < mtp.n_items && strcmp(on.items[k].name, mtp.items[j].name)) {
                        CHECK_MSG(strstr(mtp.items[j].name, "MTP"), "%s ngram %d lacks '%s'", fx[f], M, mtp.items[j].name);
                        j++;
                    }
                    CHECK(j < mtp.n_items);
                    /* (attention rows: MTP's are longer, by its rows past the context) */
                    const int dist = !strncmp(on.items[k].name, "draft distributions", 19),
                              att = !strncmp(on.items[k].name, "attention scores: the verify", 28);
                    CHECK_MSG(dist ? on.items[k].bytes * (uint64_t)(M + 1) == mtp.items[j].bytes
                              : att ? on.items[k].bytes < mtp.items[j].bytes
                                    : on.items[k].bytes == mtp.items[j].bytes,
                              "%s ngram %d: '%s' %llu bytes, MTP's %llu", fx[f], M, on.items[k].name,
                              (unsigned long long)on.items[k].bytes, (unsigned long long)mtp.items[j].bytes);
                }
                c.draft = 3; /* with MTP drafting too */
                CHECK(check_one(fx[f], c, &on) == 0);
                c.ngram = 0;
            }
            /* a checkpoint adds exactly one copy of the GDN states (the
             * whole GDN category without it) */
            c.draft = 0;
            c.checkpoint = 1;
            CHECK(check_one(fx[f], c, &on) == 0);
            CHECK_MSG(off.cat_bytes[TS_MEM_GDN] > 0 && on.cat_bytes[TS_MEM_GDN] == 2 * off.cat_bytes[TS_MEM_GDN] &&
                          on.total_bytes - off.total_bytes == off.cat_bytes[TS_MEM_GDN] && on.drafter_bytes == 0,
                      "%s: checkpoint adds %llu bytes, GDN states %llu", fx[f],
                      (unsigned long long)(on.total_bytes - off.total_bytes),
                      (unsigned long long)off.cat_bytes[TS_MEM_GDN]);
            /* run-ahead (session params ahead = 1; auto is off on the CPU):
             * the pairs' second buffers (the GDN states once more), two rows
             * of logits and hidden, the pairs' descriptors; no drafter byte.
             * With drafting, the rows alone (the snapshots are the pairs) */
            c.checkpoint = 0;
            c.ahead = 1;
            CHECK(check_one(fx[f], c, &on) == 0);
            ts_engine *e = NULL;
            ts_error err = {0};
            CHECK(ts_engine_open(fx[f], NULL, &e, &err) == 0);
            const uint64_t rows = e ? sizeof(float) * 2 * (uint64_t)(e->model.cfg.vocab + e->model.cfg.H) : 0,
                           desc = e ? sizeof(ts_gdn_tape) * (uint64_t)e->model.cfg.n_layers : 0;
            ts_engine_close(e);
            CHECK_MSG(on.ahead == 1 && on.drafter_bytes == 0 && on.cat_bytes[TS_MEM_GDN] == 2 * off.cat_bytes[TS_MEM_GDN] &&
                          on.total_bytes - off.total_bytes == off.cat_bytes[TS_MEM_GDN] + rows + desc,
                      "%s: run-ahead adds %llu bytes (GDN states %llu, rows %llu, descriptors %llu)", fx[f],
                      (unsigned long long)(on.total_bytes - off.total_bytes),
                      (unsigned long long)off.cat_bytes[TS_MEM_GDN], (unsigned long long)rows, (unsigned long long)desc);
            static ts_mem_plan ng;
            c.ahead = 0;
            c.ngram = 4;
            CHECK(check_one(fx[f], c, &ng) == 0);
            c.ahead = 1;
            CHECK(check_one(fx[f], c, &on) == 0);
            CHECK_MSG(on.total_bytes - ng.total_bytes == rows && on.drafter_bytes == ng.drafter_bytes,
                      "%s: run-ahead beside n-gram drafting adds %llu bytes, rows %llu", fx[f],
                      (unsigned long long)(on.total_bytes - ng.total_bytes), (unsigned long long)rows);
            c.ngram = 0;
            c.draft = 3;
            CHECK(check_one(fx[f], c, &on) == 0);
            c.draft = 0;
            c.ahead = 0;
        }
}

TS_TEST(plan, cli) {
    char out[16384];
    int rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense --ctx 256 --spec mtp --draft 4", ts_test_bin());
    CHECK_MSG(rc == 0, "%s", out);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = 256;
    sp.spec_draft = 4;
    ts_mem_plan pl;
    ts_error err = {0};
    ts_kernels_release(); /* a fresh process, as the CLI is, has reserved no kernel workspace yet */
    CHECK(ts_mem_plan_dir("tests/fixtures/tiny-dense", &sp, &pl, &err) == 0);
    char want[64];
    snprintf(want, sizeof want, "%-13s %16llu", "total heap", (unsigned long long)pl.total_bytes);
    CHECK_MSG(strstr(out, want) && strstr(out, "  [drafter]") && strstr(out, "kv_cache") &&
                  strstr(out, "nothing in device or pinned memory"), "%s", out);
    rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense --ctx 256 --spec mtp --draft 4 --json", ts_test_bin());
    snprintf(want, sizeof want, "\"total_bytes\": %llu,", (unsigned long long)pl.total_bytes);
    CHECK_MSG(rc == 0 && out[0] == '{' && strstr(out, want) && strstr(out, "\"pinned\": {\"total\": 0"), "%s", out);
    rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense", ts_test_bin());
    CHECK_MSG(rc == 0 && !strstr(out, "  [drafter]"), "%s", out);
    /* --spec ngram: the session's n-gram buffers (default 4 drafts) */
    sp.spec_draft = 0;
    sp.ngram_draft = 4;
    CHECK(ts_mem_plan_dir("tests/fixtures/tiny-dense", &sp, &pl, &err) == 0);
    rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense --ctx 256 --spec ngram --json", ts_test_bin());
    snprintf(want, sizeof want, "\"total_bytes\": %llu,", (unsigned long long)pl.total_bytes);
    CHECK_MSG(rc == 0 && strstr(out, want) && strstr(out, "\"ngram_draft\": 4"), "%s", out);
    rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense --spec ngram --draft 2", ts_test_bin());
    CHECK_MSG(rc == 0 && strstr(out, "speculative decoding: ngram") && strstr(out, "verify 3 rows") && !strstr(out, "MTP KV"),
              "%s", out);
    static const struct { const char *args, *msg; } bad[] = {
        {"-m tests/fixtures/tiny-dense --spec mtp --draft 0", "outside 1..8"},
        {"-m tests/fixtures/tiny-dense --spec ngram --draft 9", "outside 1..8"},
        {"-m tests/fixtures/tiny-dense --spec eagle", "use 'mtp', 'dflash' or 'ngram'"},
        {"-m /nonexistent", "/nonexistent"},
        {"--shape /nonexistent.json", "/nonexistent.json"},
        {"--shape tests/fixtures/quant/tiny-shape.json --bits 5", "--bits 5"},
        {"-m tests/fixtures/tiny-dense --bits 8", "go with --shape"},
        {"-m tests/fixtures/tiny-dense --install x", "go with --shape"},
        {"-m tests/fixtures/tiny-dense --shape tests/fixtures/quant/tiny-shape.json", "not both"},
        {"--shape tests/fixtures/quant/bad-heads.json", "bad-heads.json"},
        {"--ctx x", "bad value 'x' for --ctx"},
        {"--frobnicate", "unknown argument"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = ts_test_sh(out, sizeof out, "%s plan %s", ts_test_bin(), bad[i].args);
        CHECK_MSG(rc != 0 && strstr(out, bad[i].msg), "plan %s: rc %d: %s", bad[i].args, rc, out);
    }
    /* --help lists every option */
    rc = ts_test_sh(out, sizeof out, "%s plan --help", ts_test_bin());
    static const char *opts[] = {"-m, --model", "--shape", "--bits", "--group", "--install", "--ctx", "--chunk", "--spec",
                                 "--draft", "--checkpoint", "--json"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) CHECK_MSG(rc == 0 && strstr(out, opts[i]), "%s missing: %s", opts[i], out);
}

/* On a fresh session of dir (n_ctx, drafting M): a prompt of P ids in one
 * feed, `steps` one-token feeds, then a speculative generation of n_pred
 * tokens after 5 more ids; nothing may be allocated after session creation.
 * Ids are taken modulo vmod (within every vocabulary used). */
static void token_loop(const char *dir, int n_ctx, int M, int P, int steps, int vmod, int n_pred) {
    ts_error err = {0};
    ts_engine *e = NULL;
    ts_session *s = NULL;
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.spec_draft = M;
    CHECK_MSG(ts_engine_open(dir, NULL, &e, &err) == 0 && ts_session_new(e, &sp, &s, &err) == 0, "%s", err.msg);
    size_t before = ts_mem_total();
    int32_t ids[160];
    for (int i = 0; i < P + steps + 5; i++) ids[i] = (i * 37 + 11) % vmod;
    CHECK_MSG(ts_session_feed(s, ids, P, NULL, NULL, &err) == 0, "%s", err.msg);
    for (int i = P; i < P + steps; i++) CHECK(ts_session_feed(s, ids + i, 1, NULL, NULL, &err) == 0);
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    gp.n_predict = n_pred;
    gp.spec_draft = M;
    CHECK_MSG(ts_generate(s, ids + P + steps, 5, &gp, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK_MSG(ts_mem_total() == before, "%s: the token loop allocated %lld bytes", dir,
              (long long)ts_mem_total() - (long long)before);
    ts_session_free(s);
    ts_engine_close(e);
}

/* After session creation the token loop allocates nothing: prefill chunks,
 * one-token decode and speculative blocks run in what the session (and its
 * reservation of the kernels' workspace) already holds. Checked on a bf16
 * fixture and on the INT4 default model (the quantized kernels' buffers). */
TS_TEST(plan, token_loop_allocates_nothing) {
    static const char *dirs[] = {"tests/fixtures/tiny-dense", "models/default"};
    for (int d = 0; d < 2; d++) {
        ts_kernels_release();
        token_loop(dirs[d], 512, 3, 130, 10, 1000, 40);
    }
    ts_kernels_release();
}

/* Quantized MoE (tiny-moe converted to INT4): the plan still equals the
 * allocations (the packed copy of every expert included), and the token loop
 * (MoE experts batched per region) allocates nothing. */
TS_TEST(plan, quantized_moe) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/plan-moe-q4", ts_test_tmpdir());
    ts_convert_params p;
    ts_convert_params_default(&p);
    p.bits = 4;
    p.quiet = 1;
    ts_error err = {0};
    if (access(dir, F_OK) != 0) CHECK_MSG(ts_convert("tests/fixtures/tiny-moe", dir, &p, &err) == 0, "%s", err.msg);
    ts_mem_plan pl;
    cfg c0 = {300, 7, 0, 0, 0, 0, 0}, c3 = {300, 7, 3, 0, 0, 0, 0};
    CHECK(check_one(dir, c0, &pl) == 0);
    CHECK(check_one(dir, c3, &pl) == 0);
    ts_kernels_release();
    token_loop(dir, 256, 2, 30, 5, 200, 20);
    ts_kernels_release();
}

/* ---- plans without a checkpoint ---- */

/* ts_mem_plan_shape equals ts_mem_plan_dir of the install synth writes for
 * the shape, byte for byte (every item and total), and that equals the
 * allocations (check_one), for a dense and a MoE shape at every width. */
TS_TEST(plan, shape_equals_synth) {
    static const char *shapes[] = {"tiny-shape", "tiny-moe-shape"};
    static const cfg cfgs[] = {{300, 7, 0, 0, 0, 0, 0}, {300, 7, 3, 1, 0, 0, 0}};
    for (int si = 0; si < 2; si++)
        for (int bits = 4; bits <= 16; bits += 4) {
            if (bits == 12) continue;
            char shape[256], dir[512];
            snprintf(shape, sizeof shape, "tests/fixtures/quant/%s.json", shapes[si]);
            snprintf(dir, sizeof dir, "%s/plan-synth-%s-%d", ts_test_tmpdir(), shapes[si], bits);
            ts_convert_params p;
            ts_convert_params_default(&p);
            p.bits = bits;
            p.quiet = 1;
            ts_error err = {0};
            if (access(dir, F_OK) != 0) CHECK_MSG(ts_synth(shape, dir, &p, &err) == 0, "%s", err.msg);
            for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
                ts_session_params sp;
                params(cfgs[i], &sp);
                static ts_mem_plan a, b;
                ts_kernels_release();
                CHECK_MSG(ts_mem_plan_shape(shape, bits, 0, dir, &sp, &a, &err) == 0, "%s", err.msg);
                CHECK_MSG(ts_mem_plan_dir(dir, &sp, &b, &err) == 0, "%s", err.msg);
                CHECK(a.n_items == b.n_items && a.n_items > 10);
                for (int k = 0; k < a.n_items; k++)
                    CHECK_MSG(!strcmp(a.items[k].name, b.items[k].name) && a.items[k].bytes == b.items[k].bytes &&
                                  a.items[k].count == b.items[k].count,
                              "%s %d bits: '%s' %llu bytes (shape) vs '%s' %llu (install)", shape, bits, a.items[k].name,
                              (unsigned long long)a.items[k].bytes, b.items[k].name, (unsigned long long)b.items[k].bytes);
                CHECK_MSG(memcmp(&a, &b, sizeof a) == 0 && a.mapped_bytes > 0, "%s %d bits: plans differ", shape, bits);
                CHECK(check_one(dir, cfgs[i], &b) == 0);
            }
            /* the CLI: the same JSON from --shape (opened from dir) and -m dir, but for the source named */
            static char o1[1 << 16], o2[1 << 16];
            int r1 = ts_test_sh(o1, sizeof o1, "%s plan --shape %s --bits %d --install %s --ctx 300 --spec mtp --json",
                                ts_test_bin(), shape, bits, dir);
            int r2 = ts_test_sh(o2, sizeof o2, "%s plan -m %s --ctx 300 --spec mtp --json", ts_test_bin(), dir);
            const char *j1 = strstr(o1, "\"n_ctx\""), *j2 = strstr(o2, "\"n_ctx\"");
            CHECK_MSG(r1 == 0 && r2 == 0 && j1 && j2 && !strcmp(j1, j2), "plan --shape:\n%s\nplan -m:\n%s", o1, o2);
        }
}

/* The planned index (no files) is the one ts_st_open_dir builds from the
 * shards ts_stw_write writes: same files, tensors, offsets, copies of the
 * misaligned ones, and heap bytes. Many shards, and f32 tensors after odd
 * bf16 ones (misaligned: the reader copies them). */
static int zero_fill(void *ctx, const ts_stw_tensor *t, int idx, void *buf, ts_error *err) {
    (void)ctx; (void)idx; (void)err;
    memset(buf, 0, t->nbytes);
    return 0;
}

TS_TEST(plan, planned_index_equals_written) {
    enum { N = 700 };
    static ts_stw_tensor t[N];
    memset(t, 0, sizeof t);
    for (int i = 0; i < N; i++) {
        snprintf(t[i].name, sizeof t[i].name, "model.layers.%d.some_tensor_%d.weight", i / 3, i);
        t[i].dtype = i % 2 ? TS_DTYPE_F32 : TS_DTYPE_BF16;
        t[i].n_dims = 2;
        t[i].shape[0] = 1 + i % 3;
        t[i].shape[1] = 3 + i % 5;
        t[i].unit = i / 2;
    }
    int ns = ts_stw_plan(t, N, 4000);
    CHECK(ns > 3);
    char dir[512], cmd[1100];
    snprintf(dir, sizeof dir, "%s/plan-index", ts_test_tmpdir());
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(cmd) == 0);
    ts_error err = {0};
    CHECK_MSG(ts_stw_write(dir, t, N, ns, zero_fill, NULL, NULL, &err) == 0, "%s", err.msg);
    size_t m0[TS_MEM_N], m1[TS_MEM_N], m2[TS_MEM_N];
    for (int k = 0; k < TS_MEM_N; k++) m0[k] = ts_mem_used((ts_mem_cat)k);
    ts_st_set *a = NULL, *b = NULL;
    CHECK_MSG(ts_st_open_dir(dir, &a, &err) == 0, "%s", err.msg);
    for (int k = 0; k < TS_MEM_N; k++) m1[k] = ts_mem_used((ts_mem_cat)k);
    CHECK_MSG(ts_st_open_planned(dir, t, N, ns, &b, &err) == 0, "%s", err.msg);
    for (int k = 0; k < TS_MEM_N; k++) m2[k] = ts_mem_used((ts_mem_cat)k);
    int bad = a->n_files != b->n_files || a->n_tensors != b->n_tensors || a->hash_cap != b->hash_cap;
    for (int k = 0; k < TS_MEM_N; k++) bad |= m1[k] - m0[k] != m2[k] - m1[k];
    for (int i = 0; !bad && i < a->n_files; i++) bad |= strcmp(a->files[i].path, b->files[i].path) != 0;
    int owned = 0;
    for (int i = 0; !bad && i < a->n_tensors; i++) {
        const ts_st_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        bad |= strcmp(x->name, y->name) || x->dtype != y->dtype || x->n_dims != y->n_dims || x->nbytes != y->nbytes ||
               x->off != y->off || x->file != y->file || !x->owned != !y->owned ||
               memcmp(x->shape, y->shape, sizeof x->shape);
        owned += x->owned != NULL;
    }
    ts_st_close(a);
    ts_st_close(b);
    CHECK_MSG(!bad, "the planned index differs from the one read from %s", dir);
    CHECK_MSG(owned > 0, "no misaligned tensor was exercised");
}

/* An option that is off adds no byte and no line; turned on, it adds its
 * own lines and changes no other (drafting's extra rows are lines of their
 * own), and the allocations still equal the plan. */
static int has_item(const ts_mem_plan *p, const char *prefix) {
    for (int i = 0; i < p->n_items; i++)
        if (!strncmp(p->items[i].name, prefix, strlen(prefix))) return 1;
    return 0;
}

static void off_subset_of_on(const ts_mem_plan *off, const ts_mem_plan *on, const char *what) {
    for (int i = 0; i < off->n_items; i++) {
        int found = 0;
        for (int j = 0; j < on->n_items; j++)
            if (!strcmp(off->items[i].name, on->items[j].name) && off->items[i].engine == on->items[j].engine) {
                found = 1;
                CHECK_MSG(off->items[i].bytes == on->items[j].bytes, "%s changes '%s': %llu -> %llu bytes", what,
                          off->items[i].name, (unsigned long long)off->items[i].bytes,
                          (unsigned long long)on->items[j].bytes);
            }
        CHECK_MSG(found, "%s drops '%s'", what, off->items[i].name);
    }
}

static void options_off_add_nothing_body(void);
TS_TEST(plan, options_off_add_nothing) {
    char *keep = ts_env_push("TS_AHEAD", NULL);
    options_off_add_nothing_body();
    ts_env_pop("TS_AHEAD", keep);
}
static void options_off_add_nothing_body(void) {
    static const char *fx[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe"};
    for (int f = 0; f < 2; f++) {
        static ts_mem_plan off, on;
        cfg c = {300, 7, 0, 0, 0, 0, 0};
        CHECK(check_one(fx[f], c, &off) == 0);
        CHECK(off.drafter_bytes == 0 && off.cat_bytes[TS_MEM_MTP] == 0 && off.cat_bytes[TS_MEM_SPEC] == 0 &&
              off.cat_bytes[TS_MEM_EXPERT_CACHE] == 0);
        CHECK(!has_item(&off, "checkpoint") && !has_item(&off, "MTP") && !has_item(&off, "verify"));
        for (int i = 0; i < off.n_items; i++) CHECK(!off.items[i].drafter && off.items[i].bytes > 0);
        for (int d = 1; d < TS_DOM_N; d++) CHECK(off.dom_bytes[d] == 0); /* the CPU backend: host only */
        cfg m = c;
        m.mtp = 1; /* the MTP head's cache alone */
        CHECK(check_one(fx[f], m, &on) == 0);
        CHECK(on.cat_bytes[TS_MEM_MTP] > 0 && on.drafter_bytes == 0 && has_item(&on, "MTP KV cache"));
        off_subset_of_on(&off, &on, "mtp");
        cfg k = c;
        k.checkpoint = 1;
        CHECK(check_one(fx[f], k, &on) == 0);
        CHECK(has_item(&on, "checkpoint") && on.n_items == off.n_items + 1);
        off_subset_of_on(&off, &on, "checkpoint");
        cfg s = c;
        s.draft = 3;
        CHECK(check_one(fx[f], s, &on) == 0);
        off_subset_of_on(&off, &on, "drafting");
        uint64_t added = 0;
        for (int j = 0; j < on.n_items; j++) added += on.items[j].drafter ? on.items[j].bytes : 0;
        CHECK(added == on.drafter_bytes && on.total_bytes - off.total_bytes == added);
        cfg g = c; /* n-gram drafting: the verify lines, no MTP line */
        g.ngram = 3;
        CHECK(check_one(fx[f], g, &on) == 0);
        off_subset_of_on(&off, &on, "n-gram drafting");
        added = 0;
        for (int j = 0; j < on.n_items; j++) added += on.items[j].drafter ? on.items[j].bytes : 0;
        CHECK(added == on.drafter_bytes && on.total_bytes - off.total_bytes == added && has_item(&on, "verify") &&
              !has_item(&on, "MTP") && on.cat_bytes[TS_MEM_MTP] == 0);
        /* one row per pass: no chunked-prefill buffers */
        cfg r = c;
        r.chunk = 1;
        CHECK(check_one(fx[f], r, &on) == 0);
        CHECK(has_item(&off, "chunked prefill") && !has_item(&on, "chunked prefill"));
    }
}

/* ---- the frozen table: every released shape's plan ----
 * tests/plan_shapes.txt holds, for every shape file in shapes/ at INT4 (group 64,
 * chunk 64 rows) x three contexts x drafting off / MTP with 3 drafts, the
 * install's bytes and the heap bytes by category. A change of any size
 * fails this test until the table is regenerated on purpose:
 *   TS_PLAN_FREEZE=1 build/ts_test plan     (then review `git diff tests/plan_shapes.txt`)
 * Left out, because they are not the model's: misc (descriptor structs and
 * the tensor index, which change with any struct) and the [backend] lines
 * (packed copies, workspace: the machine's kernel mode and thread count). */
#include <dirent.h>

#define FROZEN "tests/plan_shapes.txt"
static const int frozen_ctx[] = {4096, 32768, 262144};
static const int frozen_draft[] = {0, 3};

static int frozen_line(const char *shape, int ctx, int draft, char *buf, size_t cap) {
    char path[512];
    snprintf(path, sizeof path, "shapes/%s.json", shape);
    cfg c = {ctx, 64, draft, 0, 0, 0, 0};
    ts_session_params sp;
    params(c, &sp);
    static ts_mem_plan pl;
    ts_error err = {0};
    if (ts_mem_plan_shape(path, 4, 64, NULL, &sp, &pl, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
        return -1;
    }
    uint64_t cat[TS_MEM_N] = {0}, total = 0;
    for (int i = 0; i < pl.n_items; i++)
        if (!pl.items[i].backend && pl.items[i].cat != TS_MEM_MISC) cat[pl.items[i].cat] += pl.items[i].bytes;
    for (int k = 0; k < TS_MEM_N; k++) total += cat[k];
    snprintf(buf, cap, "%-20s %6d %5d %12llu %10llu %11llu %10llu %10llu %9llu %9llu %11llu", shape, ctx, draft,
             (unsigned long long)pl.mapped_bytes, (unsigned long long)cat[TS_MEM_WEIGHTS],
             (unsigned long long)cat[TS_MEM_KV], (unsigned long long)cat[TS_MEM_GDN],
             (unsigned long long)cat[TS_MEM_MTP], (unsigned long long)cat[TS_MEM_SPEC],
             (unsigned long long)cat[TS_MEM_SCRATCH], (unsigned long long)total);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void frozen_shapes_body(void);
TS_TEST(plan, frozen_shapes) {
    char *keep = ts_env_push("TS_AHEAD", NULL);
    frozen_shapes_body();
    ts_env_pop("TS_AHEAD", keep);
}
static void frozen_shapes_body(void) {
    char *names[64];
    int n = 0;
    DIR *d = opendir("shapes");
    CHECK_MSG(d, "no shapes/ directory");
    struct dirent *de;
    while ((de = readdir(d)) && n < 64) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json")) names[n++] = strndup(de->d_name, l - 5);
    }
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_names);
    CHECK(n >= 8);
    /* the table as the code computes it now */
    size_t cap = 256 * (size_t)n * 6 + 4096, len = 0;
    char *now = malloc(cap), line[256];
    now[0] = 0;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++)
        for (size_t ci = 0; ci < sizeof frozen_ctx / sizeof frozen_ctx[0] && !bad; ci++)
            for (size_t di = 0; di < sizeof frozen_draft / sizeof frozen_draft[0] && !bad; di++) {
                bad = frozen_line(names[i], frozen_ctx[ci], frozen_draft[di], line, sizeof line);
                len += (size_t)snprintf(now + len, cap - len, "%s\n", line);
            }
    for (int i = 0; i < n; i++) free(names[i]);
    if (bad) { free(now); return; }
    static const char *hdr =
        "# Frozen memory plans of the released shapes (tests/test_plan.c, plan.frozen_shapes): every shapes/*.json\n"
        "# at INT4 (group 64), chunk 64 rows, by context and drafts (0: off, 3: MTP drafting 3 per block).\n"
        "# file: the install's bytes (what synth/convert write); then heap bytes by category, and their total.\n"
        "# Not frozen: misc (descriptors, tensor index) and the [backend] lines (packed copies, kernel workspace),\n"
        "# which depend on struct layouts and on the machine, not on the model.\n"
        "# A size that changes fails the test. To accept a change deliberately, regenerate and review the diff:\n"
        "#   TS_PLAN_FREEZE=1 build/ts_test plan && git diff tests/plan_shapes.txt\n"
        "#shape                 ctx draft         file    weights    kv_cache  gdn_state        mtp      spec   scratch       total\n";
    const char *fz = getenv("TS_PLAN_FREEZE");
    if (fz && *fz && strcmp(fz, "0")) {
        FILE *f = fopen(FROZEN, "w");
        CHECK_MSG(f && fputs(hdr, f) >= 0 && fputs(now, f) >= 0 && fclose(f) == 0, "cannot write %s", FROZEN);
        fprintf(stderr, "plan.frozen_shapes: wrote %s\n", FROZEN);
        free(now);
        return;
    }
    FILE *f = fopen(FROZEN, "r");
    if (!f) { free(now); CHECK_MSG(0, "%s is missing (TS_PLAN_FREEZE=1 build/ts_test plan writes it)", FROZEN); }
    /* compare line by line, comments skipped */
    const char *p = now;
    int lineno = 0, mism = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        size_t fl = strcspn(line, "\n");
        if (!*p || fl != l || strncmp(line, p, l)) {
            ts_test_fail(__FILE__, __LINE__, "%s:%d: frozen\n    %.*s\n  but the plan is now\n    %.*s", FROZEN, lineno,
                         (int)fl, line, (int)l, *p ? p : "(no line)");
            if (++mism >= 5) break;
        }
        p = e ? e + 1 : p + l;
    }
    fclose(f);
    if (!mism && *p) ts_test_fail(__FILE__, __LINE__, "%s lacks lines, first: %.*s", FROZEN, (int)strcspn(p, "\n"), p);
    free(now);
}

/* The allocator's counters per domain: ts_alloc counts host memory; a
 * backend's own allocations (device, pinned) are counted with
 * ts_mem_account and show in their domain and in the all-domain sums. */
TS_TEST(plan, counters_per_domain) {
    size_t h0 = ts_mem_used_in(TS_DOM_HOST, TS_MEM_KV), d0 = ts_mem_used_in(TS_DOM_DEVICE, TS_MEM_KV);
    size_t p0 = ts_mem_used_in(TS_DOM_PINNED, TS_MEM_KV), all0 = ts_mem_used(TS_MEM_KV), t0 = ts_mem_total();
    void *p = ts_alloc(1000, TS_MEM_KV);
    CHECK(p && ts_mem_used_in(TS_DOM_HOST, TS_MEM_KV) == h0 + 1000 && ts_mem_used_in(TS_DOM_DEVICE, TS_MEM_KV) == d0);
    ts_mem_account(TS_DOM_DEVICE, TS_MEM_KV, 4096);
    ts_mem_account(TS_DOM_PINNED, TS_MEM_KV, 64);
    CHECK(ts_mem_used_in(TS_DOM_DEVICE, TS_MEM_KV) == d0 + 4096 && ts_mem_used_in(TS_DOM_PINNED, TS_MEM_KV) == p0 + 64);
    CHECK(ts_mem_used(TS_MEM_KV) == all0 + 1000 + 4096 + 64 && ts_mem_total() == t0 + 1000 + 4096 + 64);
    ts_mem_account(TS_DOM_DEVICE, TS_MEM_KV, -4096);
    ts_mem_account(TS_DOM_PINNED, TS_MEM_KV, -64);
    ts_free(p);
    CHECK(ts_mem_used(TS_MEM_KV) == all0 && ts_mem_total() == t0 && ts_mem_used_in(TS_DOM_DEVICE, TS_MEM_KV) == d0);
    CHECK(!strcmp(ts_mem_domain_name(TS_DOM_PINNED), "pinned") && !strcmp(ts_mem_cat_name(TS_MEM_KV), "kv_cache"));
}

/* What convert writes is what the plan of the shape says: a checkpoint's
 * own config.json read as a shape file plans the install `convert` makes of
 * it, byte for byte (the fixtures carry the released dtypes: f32 A_log and
 * gated norm, bf16 conv and dt_bias, as synth writes them). */
TS_TEST(plan, shape_equals_convert) {
    static const char *fx[] = {"tiny-dense", "tiny-moe"};
    for (int f = 0; f < 2; f++)
        for (int bits = 4; bits <= 8; bits += 4) {
            char src[256], shape[300], dir[512];
            snprintf(src, sizeof src, "tests/fixtures/%s", fx[f]);
            snprintf(shape, sizeof shape, "%s/config.json", src);
            snprintf(dir, sizeof dir, "%s/plan-convert-%s-%d", ts_test_tmpdir(), fx[f], bits);
            ts_convert_params p;
            ts_convert_params_default(&p);
            p.bits = bits;
            p.quiet = 1;
            ts_error err = {0};
            if (access(dir, F_OK) != 0) CHECK_MSG(ts_convert(src, dir, &p, &err) == 0, "%s", err.msg);
            ts_session_params sp;
            params((cfg){300, 7, 2, 0, 0, 0, 0}, &sp);
            static ts_mem_plan a, b;
            ts_kernels_release();
            CHECK_MSG(ts_mem_plan_shape(shape, bits, 0, dir, &sp, &a, &err) == 0, "%s", err.msg);
            CHECK_MSG(ts_mem_plan_dir(dir, &sp, &b, &err) == 0, "%s", err.msg);
            CHECK_MSG(a.mapped_bytes == b.mapped_bytes && a.mapped_kept_bytes == b.mapped_kept_bytes,
                      "%s %d bits: install %llu bytes, planned %llu", fx[f], bits, (unsigned long long)b.mapped_bytes,
                      (unsigned long long)a.mapped_bytes);
            CHECK_MSG(memcmp(&a, &b, sizeof a) == 0, "%s %d bits: plans differ", fx[f], bits);
        }
}
