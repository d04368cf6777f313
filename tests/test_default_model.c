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
