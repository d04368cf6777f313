/* test_cli.c: black-box tests of the turbospark command line (design.md's
 * contract): run --print-ids, logits (main and MTP head) against the
 * transformers references, and clear errors with non-zero exits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loader/safetensors.h"
#include "ts_test.h"

static char g_out[1 << 16];

static int ids_string(const ts_st_set *ref, const char *name, char *buf, size_t cap, int n) {
    const ts_st_tensor *t = ts_st_find(ref, name);
    const int32_t *v = t->data;
    if (n <= 0 || n > t->shape[0]) n = (int)t->shape[0];
    size_t o = 0;
    for (int i = 0; i < n && o < cap; i++) o += snprintf(buf + o, cap - o, "%s%d", i ? "," : "", v[i]);
    return n;
}

TS_TEST(cli, run_greedy_ids_match_reference) {
    const char *fx[] = {"tiny-dense", "tiny-moe"};
    for (int k = 0; k < 2; k++) {
        char path[256], prompt[8192], greedy[4096];
        snprintf(path, sizeof path, "tests/fixtures/%s/reference.safetensors", fx[k]);
        ts_st_set *ref = NULL;
        ts_error err;
        CHECK(ts_st_open_file(path, &ref, &err) == 0);
        ids_string(ref, "prompt_ids", prompt, sizeof prompt, 0);
        int n = ids_string(ref, "greedy_ids", greedy, sizeof greedy, 0);
        ts_st_close(ref);
        int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m tests/fixtures/%s --ids %s -n %d --print-ids 2>/dev/null",
                            ts_test_bin(), fx[k], prompt, n);
        CHECK_MSG(rc == 0, "exit %d: %s", rc, g_out);
        char *nl = strchr(g_out, '\n');
        if (nl) *nl = 0;
        CHECK_MSG(!strcmp(g_out, greedy), "%s: got %s\nwant %s", fx[k], g_out, greedy);
    }
}

static float file_vs_ref(const char *file, const ts_st_set *ref, const char *name, size_t rows, size_t V) {
    FILE *f = fopen(file, "rb");
    if (!f) return INFINITY;
    float *buf = malloc(sizeof(float) * rows * V);
    size_t got = fread(buf, sizeof(float) * V, rows, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    float m = got == rows && !extra ? 0 : INFINITY;
    const float *r = ts_st_find(ref, name)->data;
    for (size_t i = 0; i < rows * V && m < INFINITY; i++) m = fmaxf(m, fabsf(buf[i] - r[i]));
    free(buf);
    return m;
}

TS_TEST(cli, logits_main_and_mtp) {
    ts_st_set *ref = NULL;
    ts_error err;
    CHECK(ts_st_open_file("tests/fixtures/tiny-moe/reference.safetensors", &ref, &err) == 0);
    char prompt[8192], file[512];
    int T = ids_string(ref, "prompt_ids", prompt, sizeof prompt, 0);
    snprintf(file, sizeof file, "%s/logits.bin", ts_test_tmpdir());
    int rc = ts_test_sh(g_out, sizeof g_out, "%s logits -m tests/fixtures/tiny-moe --ids %s -o %s", ts_test_bin(), prompt, file);
    CHECK_MSG(rc == 0, "%s", g_out);
    float e = file_vs_ref(file, ref, "prompt_logits", T, 2048);
    CHECK_MSG(e < 1e-3f, "main logits err %g", e);
    rc = ts_test_sh(g_out, sizeof g_out, "%s logits -m tests/fixtures/tiny-moe --ids %s -o %s --head mtp", ts_test_bin(), prompt, file);
    CHECK_MSG(rc == 0, "%s", g_out);
    e = file_vs_ref(file, ref, "mtp_logits", T - 1, 2048);
    CHECK_MSG(e < 1e-3f, "mtp logits err %g", e);
    ts_st_close(ref);
}

TS_TEST(cli, errors_are_clear) {
    const char *bin = ts_test_bin();
    struct { const char *args; const char *want; } cases[] = {
        {"run -m tests/fixtures/tiny-dense --ids 1,2,5000 -n 2", "token id 5000"},
        {"run -m tests/fixtures/tiny-dense --ids 1,x,3 -n 2", "not a list of token ids"},
        {"run -m tests/fixtures/nope --ids 1 -n 2", "nope/config.json"},
        {"run -m tests/fixtures/tiny-dense --ids 1,2,3,4,5 --ctx 4 -n 2", "context limit of 4"},
        {"run -m tests/fixtures/tiny-dense --bogus", "unknown or incomplete argument '--bogus'"},
        {"logits -m tests/fixtures/tiny-dense --ids 1,2 -o /dev/null --head side", "--head must be main or mtp"},
        {"logits -m tests/fixtures/tiny-dense --ids 1,2 -o /nonexistent-dir/x.bin", "cannot write /nonexistent-dir/x.bin"},
        {"frobnicate", "unknown command 'frobnicate'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = ts_test_sh(g_out, sizeof g_out, "%s %s", bin, cases[i].args);
        CHECK_MSG(rc != 0 && rc < 128, "'%s' exited %d", cases[i].args, rc);
        CHECK_MSG(strstr(g_out, cases[i].want), "'%s' printed: %s", cases[i].args, g_out);
    }
}

TS_TEST(cli, verbose_reports_unused_tensors) {
    int rc = ts_test_sh(g_out, sizeof g_out, "%s run -m tests/fixtures/tiny-dense --ids 1 -n 1 -v", ts_test_bin());
    CHECK_MSG(rc == 0, "%s", g_out);
    CHECK_MSG(strstr(g_out, "0 unused"), "%s", g_out);
}

/* Seeded sampling through the CLI: the same seed repeats, other seeds differ. */
TS_TEST(cli, seeded_sampling_repeats) {
    char a[4096], b[4096], c[4096];
    const char *fmt = "%s run -m tests/fixtures/tiny-dense --ids 5,6,7 -n 24 --temp 1.0 --top-p 0.95 --seed %d 2>/dev/null";
    CHECK(ts_test_sh(a, sizeof a, fmt, ts_test_bin(), 7) == 0);
    CHECK(ts_test_sh(b, sizeof b, fmt, ts_test_bin(), 7) == 0);
    CHECK(ts_test_sh(c, sizeof c, fmt, ts_test_bin(), 8) == 0);
    CHECK_MSG(!strcmp(a, b), "same seed differs: %s vs %s", a, b);
    CHECK_MSG(strcmp(a, c), "seeds 7 and 8 gave the same 24 tokens: %s", a);
    CHECK(strchr(a, ','));
}
