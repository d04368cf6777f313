/* test_plan.c: the memory plan (src/engine/plan.c) against the allocator's counters.
 *
 * For both tiny fixtures, with and without drafting, several contexts and
 * chunk sizes: ts_mem_plan_dir's bytes per category equal, to the byte, what
 * ts_engine_open + ts_session_new make ts_mem_used() count; the plan itself
 * leaves nothing allocated; with drafting the total grows by exactly the
 * plan's drafter part, and without it the drafter categories (spec, mtp) are
 * empty. The CLI prints the same totals.
 */
#include <unistd.h>

#include "engine/engine.h"
#include "cpu/kernels.h"
#include "ts_test.h"

typedef struct { int ctx, chunk, draft, checkpoint; } cfg;

static int check_one(const char *dir, cfg c, ts_mem_plan *out) {
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = c.ctx;
    sp.max_rows = c.chunk;
    sp.spec_draft = c.draft;
    sp.checkpoint = c.checkpoint;
    /* the kernels' workspace is shared by a process's sessions: measure this
     * session's reservation from an empty one */
    ts_kernels_release();
    size_t before[TS_MEM_N];
    for (int k = 0; k < TS_MEM_N; k++) before[k] = ts_mem_used((ts_mem_cat)k);
    ts_error err = {0};
    if (ts_mem_plan_dir(dir, &sp, out, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return -1; }
    for (int k = 0; k < TS_MEM_N; k++)
        if (ts_mem_used((ts_mem_cat)k) != before[k]) {
            ts_test_fail(__FILE__, __LINE__, "the plan left %s bytes allocated", ts_mem_cat_name((ts_mem_cat)k));
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
    uint64_t sum = 0;
    for (int k = 0; k < TS_MEM_N; k++) {
        size_t got = ts_mem_used((ts_mem_cat)k) - before[k];
        sum += out->cat_bytes[k];
        if (got != out->cat_bytes[k]) {
            ts_test_fail(__FILE__, __LINE__, "%s ctx %d chunk %d draft %d: %s: plan %llu bytes, allocated %zu", dir, c.ctx,
                         c.chunk, c.draft, ts_mem_cat_name((ts_mem_cat)k), (unsigned long long)out->cat_bytes[k], got);
            bad = 1;
        }
    }
    if (sum != out->total_bytes || out->engine_bytes + out->session_bytes != out->total_bytes) {
        ts_test_fail(__FILE__, __LINE__, "plan totals do not add up");
        bad = 1;
    }
    ts_session_free(s);
    ts_engine_close(e);
    ts_kernels_release();
    for (int k = 0; k < TS_MEM_N; k++)
        if (ts_mem_used((ts_mem_cat)k) != before[k]) {
            ts_test_fail(__FILE__, __LINE__, "%s bytes left after closing", ts_mem_cat_name((ts_mem_cat)k));
            bad = 1;
        }
    return bad ? -1 : 0;
}

TS_TEST(plan, equals_allocations) {
    static const char *fx[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe"};
    static const cfg cfgs[] = {{0, 0, 0, 0}, {300, 7, 0, 0}, {1000, 1, 0, 0}, {512, 64, 0, 0}};
    for (int f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
            ts_mem_plan off, on;
            cfg c = cfgs[i];
            c.draft = 0;
            CHECK(check_one(fx[f], c, &off) == 0);
            CHECK_MSG(off.drafter_bytes == 0 && off.cat_bytes[TS_MEMCAT_SPEC] == 0 && off.cat_bytes[TS_MEMCAT_MTP] == 0,
                      "without drafting: drafter %llu, spec %llu, mtp %llu bytes", (unsigned long long)off.drafter_bytes,
                      (unsigned long long)off.cat_bytes[TS_MEMCAT_SPEC], (unsigned long long)off.cat_bytes[TS_MEMCAT_MTP]);
            for (int M = 1; M <= TS_SPEC_MAX_DRAFT; M += 3) {
                c.draft = M;
                CHECK(check_one(fx[f], c, &on) == 0);
                CHECK_MSG(on.total_bytes - off.total_bytes == on.drafter_bytes,
                          "%s ctx %d chunk %d draft %d: drafting adds %llu bytes, the plan's drafter part is %llu", fx[f],
                          c.ctx, c.chunk, M, (unsigned long long)(on.total_bytes - off.total_bytes),
                          (unsigned long long)on.drafter_bytes);
                CHECK(on.cat_bytes[TS_MEMCAT_SPEC] > 0 && on.cat_bytes[TS_MEMCAT_MTP] > 0);
                CHECK(on.engine_bytes == off.engine_bytes);
            }
            /* a checkpoint adds exactly one copy of the GDN states (the
             * whole GDN category without it) */
            c.draft = 0;
            c.checkpoint = 1;
            CHECK(check_one(fx[f], c, &on) == 0);
            CHECK_MSG(off.cat_bytes[TS_MEMCAT_GDN] > 0 && on.cat_bytes[TS_MEMCAT_GDN] == 2 * off.cat_bytes[TS_MEMCAT_GDN] &&
                          on.total_bytes - off.total_bytes == off.cat_bytes[TS_MEMCAT_GDN] && on.drafter_bytes == 0,
                      "%s: checkpoint adds %llu bytes, GDN states %llu", fx[f],
                      (unsigned long long)(on.total_bytes - off.total_bytes),
                      (unsigned long long)off.cat_bytes[TS_MEMCAT_GDN]);
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
    snprintf(want, sizeof want, "%-13s %14llu", "total heap", (unsigned long long)pl.total_bytes);
    CHECK_MSG(strstr(out, want) && strstr(out, "[drafter]") && strstr(out, "kv_cache"), "%s", out);
    rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense", ts_test_bin());
    CHECK_MSG(rc == 0 && !strstr(out, "[drafter]"), "%s", out);
    rc = ts_test_sh(out, sizeof out, "%s plan -m tests/fixtures/tiny-dense --spec mtp --draft 0", ts_test_bin());
    CHECK_MSG(rc != 0 && strstr(out, "outside 1..8"), "%s", out);
    rc = ts_test_sh(out, sizeof out, "%s plan -m /nonexistent", ts_test_bin());
    CHECK_MSG(rc != 0 && strstr(out, "/nonexistent"), "%s", out);
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
    cfg c0 = {300, 7, 0, 0}, c3 = {300, 7, 3, 0};
    CHECK(check_one(dir, c0, &pl) == 0);
    CHECK(check_one(dir, c3, &pl) == 0);
    ts_kernels_release();
    token_loop(dir, 256, 2, 30, 5, 200, 20);
    ts_kernels_release();
}
