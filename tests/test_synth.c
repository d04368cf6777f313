/* test_synth.c: `turbospark synth` and `turbospark bench` (black box + API).
 *
 * A tiny dense and a tiny MoE shape are synthesised at 4 and 8 bits (and
 * bf16), opened, and run: finite logits, the expected quantization, the
 * decode-bytes count (MoE: only top-k experts). Inconsistent shape files fail
 * with a message naming the problem and leave no output. bench --json runs on
 * a synthesised model and reports the fields the bench records use.
 */
#include <math.h>

#include "engine/engine.h"
#include "ts_test.h"

static int open_run(const char *dir, int *bits, uint64_t *dbytes, uint64_t *wbytes) {
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(dir, NULL, &e, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); return -1; }
    ts_session *s = NULL;
    if (ts_session_new(e, NULL, &s, &err)) { ts_test_fail(__FILE__, __LINE__, "%s", err.msg); ts_engine_close(e); return -1; }
    int32_t ids[5] = {1, 2, 3, 400, 511};
    int rc = ts_session_feed(s, ids, 5, NULL, NULL, &err);
    if (!rc) rc = ts_session_feed(s, ids, 1, NULL, NULL, &err);
    const float *lg = ts_session_logits(s);
    int finite = 1;
    for (int v = 0; !rc && v < ts_engine_info(e)->vocab_size; v++) finite &= isfinite(lg[v]) != 0;
    if (rc) ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
    else if (!finite) ts_test_fail(__FILE__, __LINE__, "%s: non-finite logits", dir);
    *bits = ts_engine_info(e)->quant_bits;
    *dbytes = ts_engine_decode_bytes(e);
    *wbytes = ts_engine_info(e)->weight_bytes;
    ts_session_free(s);
    ts_engine_close(e);
    return rc || !finite ? -1 : 0;
}

TS_TEST(synth, tiny_shapes_run) {
    const char *shapes[] = {"tiny-shape", "tiny-moe-shape"};
    for (int si = 0; si < 2; si++)
        for (int bits = 4; bits <= 16; bits += 4) {
            if (bits == 12) continue;
            char dir[512], out[4096];
            snprintf(dir, sizeof dir, "%s/synth-%s-%d", ts_test_tmpdir(), shapes[si], bits);
            int rc = ts_test_sh(out, sizeof out, "%s synth --shape tests/fixtures/quant/%s.json --out %s --bits %d --quiet",
                                ts_test_bin(), shapes[si], dir, bits);
            CHECK_MSG(rc == 0, "%s", out);
            int qb;
            uint64_t db, wb;
            if (open_run(dir, &qb, &db, &wb)) return;
            CHECK(qb == (bits == 16 ? 0 : bits));
            if (si == 1) {
                /* MoE: routed experts counted for top-2 of 8, so decode reads less than all weights */
                CHECK_MSG(db < wb, "decode bytes %llu vs weights %llu", (unsigned long long)db, (unsigned long long)wb);
            }
        }
}

TS_TEST(synth, bad_shapes) {
    char out[4096];
    struct { const char *file, *msg; } cases[] = {
        {"bad-layers", "layer_types has 3 entries"},
        {"bad-group", "not a multiple of group 64"},
        {"bad-heads", "not a multiple of num_key_value_heads"},
    };
    for (int i = 0; i < 3; i++) {
        int rc = ts_test_sh(out, sizeof out, "%s synth --shape tests/fixtures/quant/%s.json --out %s/synthbad%d --quiet",
                            ts_test_bin(), cases[i].file, ts_test_tmpdir(), i);
        CHECK_MSG(rc != 0 && strstr(out, cases[i].msg), "%s: %s", cases[i].file, out);
    }
    int rc = ts_test_sh(out, sizeof out, "%s synth --shape tests/fixtures/quant/tiny-shape.json --out %s/synthbad9 --bits 3",
                        ts_test_bin(), ts_test_tmpdir());
    CHECK_MSG(rc != 0 && strstr(out, "--bits 3"), "%s", out);
    rc = ts_test_sh(out, sizeof out, "ls -d %s/synthbad* 2>/dev/null | wc -l", ts_test_tmpdir());
    CHECK_MSG(atoi(out) == 0, "output left behind: %s", out);
}

TS_TEST(synth, bench_json) {
    char dir[512], out[8192];
    snprintf(dir, sizeof dir, "%s/bench-moe", ts_test_tmpdir());
    int rc = ts_test_sh(out, sizeof out, "%s synth --shape tests/fixtures/quant/tiny-moe-shape.json --out %s --quiet && "
                        "%s bench -m %s --prompt 16 --gen 8 --runs 2 --json --bw-mib 16", ts_test_bin(), dir, ts_test_bin(), dir);
    CHECK_MSG(rc == 0, "%s", out);
    const char *keys[] = {"\"prefill_tok_s\"", "\"decode_tok_s\"", "\"weight_bytes_per_token\"", "\"decode_gb_s\"",
                          "\"bandwidth_gb_s\"", "\"pct_of_bandwidth\""};
    for (int i = 0; i < 6; i++) CHECK_MSG(strstr(out, keys[i]), "bench --json lacks %s: %s", keys[i], out);
    double d = 0;
    const char *p = strstr(out, "\"decode_tok_s\":");
    if (p) d = atof(p + 15);
    CHECK_MSG(d > 0, "decode tok/s %g", d);
}

/* bench --spec mtp: plain and drafted outputs compared (identical), the
 * statistics fields present; bad draft lengths refused with the range. */
TS_TEST(synth, bench_spec) {
    char out[8192];
    int rc = ts_test_sh(out, sizeof out, "%s bench -m tests/fixtures/tiny-dense --prompt 8 --gen 24 --runs 2 --json --bw-mib 16 "
                        "--spec mtp --draft 3", ts_test_bin());
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_MSG(strstr(out, "\"identical\": true"), "%s", out);
    const char *keys[] = {"\"speedup\"", "\"mean_accepted_length\"", "\"accept_by_position\"", "\"ms_verify_per_block\"",
                          "\"ms_rollback_per_block\""};
    for (int i = 0; i < 5; i++) CHECK_MSG(strstr(out, keys[i]), "bench --spec --json lacks %s: %s", keys[i], out);
    rc = ts_test_sh(out, sizeof out, "%s bench -m tests/fixtures/tiny-dense --spec mtp --draft 9 2>&1", ts_test_bin());
    CHECK_MSG(rc != 0 && strstr(out, "1..8"), "%s", out);
    rc = ts_test_sh(out, sizeof out, "%s bench -m tests/fixtures/tiny-dense --spec eagle --draft 2 2>&1", ts_test_bin());
    CHECK_MSG(rc != 0 && strstr(out, "use 'mtp', 'dflash' or 'ngram'"), "%s", out);
}
