/* test_default_model.c: the bundled default model (models/default, an INT4
 * install of the model trained by tools/train/).
 *
 * Quality: held-out perplexity by the protocol of tools/train/heldout_eval.py
 * within 5% of the bf16 checkpoint's under transformers (46.0492, recorded in
 * tools/train/RESULTS.md), at 8- and 24-bit activations. Speculation: greedy output with the trained MTP
 * head drafting is identical to plain greedy, and the head's first-position
 * acceptance on held-out text is at least 60% (the target).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ts_test.h"
#include "turbospark.h"

#define BF16_PPL 46.0492

static char g_out[1 << 16];

/* 0 when the command fails (reported) */
static double heldout_ppl(int act_bits) {
    int rc = ts_test_sh(g_out, sizeof g_out, "%s perplexity -m models/default -f tools/train/heldout.ids --json --act-bits %d",
                        ts_test_bin(), act_bits);
    const char *p = strstr(g_out, "\"ppl\": ");
    if (rc || !p) ts_test_fail(__FILE__, __LINE__, "perplexity --act-bits %d: %s", act_bits, g_out);
    return rc || !p ? 0 : atof(p + 7);
}

/* At the default 8-bit activations and at 24 bits (f32-class): within 5%
 * of bf16, and the two within 0.1% of each other (the activation rounding
 * must stay far below the INT4 weights' own error, ~3%). */
TS_TEST(default_model, heldout_perplexity_within_5_percent) {
    double p8 = heldout_ppl(8), p24 = heldout_ppl(24);
    fprintf(stderr, "  default model held-out perplexity %.4f at 8-bit activations, %.4f at 24 (bf16 %.4f: +%.2f%%, +%.2f%%)\n",
            p8, p24, BF16_PPL, 100.0 * (p8 / BF16_PPL - 1), 100.0 * (p24 / BF16_PPL - 1));
    CHECK_MSG(p8 > 1 && p8 <= BF16_PPL * 1.05 && p24 > 1 && p24 <= BF16_PPL * 1.05, "perplexity %.4f / %.4f", p8, p24);
    CHECK_MSG(fabs(p8 / p24 - 1) < 1e-3, "8-bit activations move perplexity %.4f -> %.4f", p24, p8);
}

TS_TEST(default_model, mtp_drafting_exact_and_accepted) {
    char plain[8192], spec[8192], prompt[4096];
    FILE *f = fopen("tools/train/heldout.ids", "r");
    CHECK(f);
    char *line = malloc(1 << 16);
    int got = 0;
    while (fgets(line, 1 << 16, f))
        if (line[0] != '#') { got = 1; break; }
    fclose(f);
    CHECK(got);
    /* the first 48 ids of the first held-out window */
    int n = 0;
    size_t o = 0;
    for (char *q = line; *q && n < 48; n++) {
        long id = strtol(q, &q, 10);
        o += snprintf(prompt + o, sizeof prompt - o, "%s%ld", n ? "," : "", id);
        if (*q == ',') q++;
    }
    free(line);
    CHECK(ts_test_sh(plain, sizeof plain, "%s run -m models/default --ids %s -n 96 --print-ids 2>/dev/null", ts_test_bin(), prompt) == 0);
    int rc = ts_test_sh(spec, sizeof spec, "%s run -m models/default --ids %s -n 96 --print-ids --spec mtp --draft 2 2>&1",
                        ts_test_bin(), prompt);
    CHECK_MSG(rc == 0, "%s", spec);
    CHECK_MSG(!strncmp(plain, spec, strlen(plain)), "drafting changed the output:\n%s\nvs\n%s", plain, spec);
    const char *a = strstr(spec, "acceptance by position: 1:");
    CHECK_MSG(a, "%s", spec);
    double acc1 = atof(a + strlen("acceptance by position: 1:"));
    fprintf(stderr, "  default model MTP first-position acceptance %.2f\n", acc1);
    CHECK_MSG(acc1 >= 0.60, "first-position acceptance %.2f", acc1);
}

/* perplexity --text (llama.cpp's protocol): a text of the repo (README.md's
 * first 12 KB) in windows of 128 ids, each scored on its second half,
 * against the same figure computed here from ts_session_feed's rows with
 * log_softmax in double: the tokens, the window count, the count scored,
 * the perplexity (1e-6 relative) and its standard error (1e-4); and the
 * refusals (a window longer than the text, --mtp with --text, both inputs). */
TS_TEST(default_model, text_perplexity_llama_protocol) {
    enum { W = 128, BYTES = 12000 };
    char path[512];
    snprintf(path, sizeof path, "%s/ppl.txt", ts_test_tmpdir());
    FILE *f = fopen("README.md", "rb"), *g = fopen(path, "wb");
    CHECK(f && g);
    static char buf[BYTES];
    const size_t nb = fread(buf, 1, BYTES, f);
    size_t cut = nb;
    while (cut > 0 && ((unsigned char)buf[cut - 1] & 0xC0) == 0x80) cut--; /* whole characters */
    if (cut > 0 && (unsigned char)buf[cut - 1] >= 0xC0) cut--;
    fwrite(buf, 1, cut, g);
    fclose(f), fclose(g);
    int rc = ts_test_sh(g_out, sizeof g_out, "%s perplexity -m models/default --text %s --window %d --json", ts_test_bin(),
                        path, W);
    const char *p = strstr(g_out, "\"ppl\": "), *q = strstr(g_out, "\"ppl_stderr\": "), *k = strstr(g_out, "\"tokens\": ");
    const char *sc = strstr(g_out, "\"tokens_scored\": ");
    CHECK_MSG(!rc && p && q && k && sc, "perplexity --text: %s", g_out);
    /* the reference */
    ts_tokenizer *tok = NULL;
    ts_tokens t = {0};
    ts_error err = {0};
    CHECK(!ts_tokenizer_load("models/default", &tok, &err) && !ts_tokenizer_encode(tok, buf, cut, &t, &err));
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cpu";
    ts_engine *e = NULL;
    CHECK_MSG(!ts_engine_open("models/default", &ep, &e, &err), "%s", err.msg);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = W;
    ts_session *s = NULL;
    CHECK(!ts_session_new(e, &sp, &s, &err));
    const int V = ts_engine_info(e)->vocab_size, windows = t.n / W;
    float *lg = malloc(sizeof(float) * (size_t)W * V);
    double sum = 0, sum2 = 0;
    long n = 0;
    for (int w = 0; w < windows; w++) {
        ts_session_reset(s);
        CHECK(!ts_session_feed(s, t.ids + (size_t)w * W, W, lg, NULL, &err));
        for (int i = W / 2; i < W - 1; i++) {
            const float *row = lg + (size_t)i * V;
            double m = -INFINITY, z = 0;
            for (int j = 0; j < V; j++) m = row[j] > m ? row[j] : m;
            for (int j = 0; j < V; j++) z += exp((double)row[j] - m);
            const double v = -((double)row[t.ids[(size_t)w * W + i + 1]] - m - log(z));
            sum += v, sum2 += v * v, n++;
        }
    }
    const double mean = sum / (double)n, ppl = exp(mean), se = ppl * sqrt((sum2 / (double)n - mean * mean) / (double)(n - 1));
    fprintf(stderr, "  %d tokens, %d windows of %d: perplexity %.4f +/- %.4f (reference %.4f +/- %.4f)\n", t.n, windows, W,
            atof(p + 7), atof(q + 14), ppl, se);
    CHECK_MSG(atoi(k + 10) == t.n && atol(sc + 17) == n && windows >= 3, "tokens %d / %d, scored %ld / %ld", atoi(k + 10),
              t.n, atol(sc + 17), n);
    CHECK_MSG(fabs(atof(p + 7) / ppl - 1) < 1e-6 && fabs(atof(q + 14) / se - 1) < 1e-4, "perplexity %s", g_out);
    free(lg);
    ts_session_free(s);
    ts_engine_close(e);
    ts_tokens_free(&t);
    ts_tokenizer_free(tok);
    static const char *const bad[][2] = {
        {"--window 100000", "less than one window"},
        {"--mtp", "--mtp takes"},
        {"-f tools/train/heldout.ids", "one of -f"},
    };
    for (int i = 0; i < 3; i++) {
        rc = ts_test_sh(g_out, sizeof g_out, "%s perplexity -m models/default --text %s %s 2>&1", ts_test_bin(), path, bad[i][0]);
        CHECK_MSG(rc && strstr(g_out, bad[i][1]), "%s: %d, %s", bad[i][0], rc, g_out);
    }
}
