/* cmd_logits.c: `turbospark logits [-m DIR] --ids 1,2,3 -o FILE [--head main|mtp] [engine options]`
 *
 * Writes raw little-endian f32 logits: [n_ids, vocab] for the main head; for
 * --head mtp, row i is the MTP head for (token ids[i+1], main final hidden at
 * i, position i), so n_ids - 1 rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

#define LOGITS_OPTS (CLI_OPT_ENGINE | CLI_OPT_CHUNK)

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark logits [-m DIR] --ids 1,2,3 -o FILE [--head main|mtp] [options]\n"
               "  --ids 1,2,3         the token ids, fed from position 0\n"
               "  -o FILE             where the raw little-endian f32 logits go: [n, vocab] (main head),\n"
               "                      [n - 1, vocab] (MTP head: row i for token i+1 with hidden i)\n"
               "  --head main|mtp     which head (default main)\n");
    cli_engine_help(f, LOGITS_OPTS);
}

int cmd_logits(int argc, char **argv) {
    const char *ids_s = NULL, *outp = NULL, *head = "main";
    cli_engine eo;
    cli_engine_init(&eo, "logits", LOGITS_OPTS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        int sr = cli_engine_parse(argc, argv, &i, &eo);
        if (sr < 0) return 2;
        if (sr > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--ids") && more) ids_s = argv[++i];
        else if (!strcmp(a, "-o") && more) outp = argv[++i];
        else if (!strcmp(a, "--head") && more) head = argv[++i];
        else {
            fprintf(stderr, "turbospark logits: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    int mtp = !strcmp(head, "mtp");
    if (!mtp && strcmp(head, "main")) { fprintf(stderr, "turbospark logits: --head must be main or mtp, not '%s'\n", head); return 2; }
    if (!ids_s || !outp) { fprintf(stderr, "turbospark logits: --ids and -o are required\n"); return 2; }
    if (cli_engine_check(&eo)) return 2;
    const char *model = eo.model;
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    cli_engine_apply(&eo, &ep, NULL, NULL);
    int *ids = NULL;
    int n = cli_parse_ids(ids_s, &ids);
    if (n <= 0) { fprintf(stderr, "turbospark logits: --ids '%s' is not a list of token ids\n", ids_s); free(ids); return 2; }
    if (mtp && n < 2) { fprintf(stderr, "turbospark logits: --head mtp needs at least 2 ids\n"); free(ids); return 2; }
    ts_error err = {0};
    ts_engine *e = NULL;
    if (ts_engine_open(model, &ep, &e, &err)) { fprintf(stderr, "turbospark logits: %s\n", err.msg); free(ids); return 1; }
    const ts_model_info *info = ts_engine_info(e);
    int V = info->vocab_size, H = info->hidden_size;
    ts_session_params sp;
    ts_session_params_default(&sp);
    cli_engine_apply(&eo, NULL, &sp, NULL);
    sp.n_ctx = n;
    sp.mtp = mtp;
    ts_session *s = NULL;
    int32_t *tok = malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) tok[i] = ids[i];
    float *lg = malloc(sizeof(float) * (size_t)n * V);
    float *hid = mtp ? malloc(sizeof(float) * (size_t)n * H) : NULL;
    int rows = mtp ? n - 1 : n;
    int rc = ts_session_new(e, &sp, &s, &err);
    if (!rc) rc = ts_session_feed(s, tok, n, mtp ? NULL : lg, hid, &err);
    if (!rc && mtp) rc = ts_session_mtp(s, tok + 1, hid, n - 1, 0, NULL, lg, &err);
    if (!rc) {
        FILE *f = fopen(outp, "wb");
        if (!f || fwrite(lg, sizeof(float) * V, rows, f) != (size_t)rows) {
            fprintf(stderr, "turbospark logits: cannot write %s\n", outp);
            rc = 1;
        }
        if (f && fclose(f) != 0) rc = 1;
    } else {
        fprintf(stderr, "turbospark logits: %s\n", err.msg);
    }
    free(lg); free(hid); free(tok); free(ids);
    ts_session_free(s);
    ts_engine_close(e);
    return rc ? 1 : 0;
}
