/* cmd_run.c: `turbospark run`: generate from a prompt (ids for now).
 *
 *   turbospark run [-m DIR] (--ids 1,2,3 | -p TEXT) [-n N] [--temp T] [--seed S]
 *                  [--ctx N] [--chunk N] [--spec mtp --draft M] [--threads N] [--print-ids] [-v]
 *
 * Prints generated ids (comma-separated, one line) with --print-ids, and one
 * line of statistics on stderr at the end (with --spec, a second line:
 * acceptance per draft position, mean accepted length, draft/verify/rollback
 * time).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

static void usage(void) {
    fprintf(stderr,
            "usage: turbospark run [-m DIR] (--ids 1,2,3 | -p TEXT) [-n N] [--temp T] [--seed S]\n"
            "                      [--ctx N] [--chunk N] [--spec mtp --draft M] [--threads N] [--print-ids] [-v]\n");
}

typedef struct {
    int print_ids;
    int n;
} run_out;

static int on_token(void *user, int32_t id) {
    run_out *o = user;
    if (o->print_ids) {
        printf("%s%d", o->n ? "," : "", id);
        fflush(stdout);
    }
    o->n++;
    return 0;
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL, *prompt = NULL;
    const char *spec = NULL;
    int n_predict = 64, n_ctx = 0, threads = 0, print_ids = 0, verbose = 0, draft = -1, chunk = 0;
    ts_gen_params gp;
    ts_gen_params_default(&gp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
#define ARG(name) (!strcmp(a, name) && more)
        if (ARG("-m") || ARG("--model")) model = argv[++i];
        else if (ARG("--ids")) ids_s = argv[++i];
        else if (ARG("-p") || ARG("--prompt")) prompt = argv[++i];
        else if (ARG("-n")) n_predict = atoi(argv[++i]);
        else if (ARG("--ctx")) n_ctx = atoi(argv[++i]);
        else if (ARG("--chunk")) chunk = atoi(argv[++i]);
        else if (ARG("--spec")) spec = argv[++i];
        else if (ARG("--draft")) draft = atoi(argv[++i]);
        else if (ARG("--threads")) threads = atoi(argv[++i]);
        else if (ARG("--temp")) gp.temperature = (float)atof(argv[++i]);
        else if (ARG("--seed")) gp.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--print-ids")) print_ids = 1;
        else if (!strcmp(a, "-v")) verbose = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else { fprintf(stderr, "turbospark run: unknown or incomplete argument '%s'\n", a); usage(); return 2; }
#undef ARG
    }
    if (n_predict < 0) { fprintf(stderr, "turbospark run: -n must be >= 0\n"); return 2; }
    if (spec && strcmp(spec, "mtp")) {
        fprintf(stderr, "turbospark run: --spec '%s' is not supported (only 'mtp')\n", spec);
        return 2;
    }
    if (draft != -1 && !spec) { fprintf(stderr, "turbospark run: --draft needs --spec mtp\n"); return 2; }
    if (spec && draft == -1) draft = 3;
    if (spec && (draft < 1 || draft > TS_SPEC_MAX_DRAFT)) {
        fprintf(stderr, "turbospark run: --draft %d is outside 1..%d\n", draft, TS_SPEC_MAX_DRAFT);
        return 2;
    }
    if (chunk < 0) { fprintf(stderr, "turbospark run: --chunk must be >= 1\n"); return 2; }
    if (!model) model = cli_default_model();
    if (!model) { fprintf(stderr, "turbospark run: no model: pass -m DIR\n"); return 2; }
    if (!ids_s && !prompt) ids_s = "1";
    if (prompt) {
        fprintf(stderr, "turbospark run: -p needs the tokenizer, which this build lacks: pass --ids\n");
        return 2;
    }
    int *ids = NULL;
    int n_ids = cli_parse_ids(ids_s, &ids);
    if (n_ids <= 0) { fprintf(stderr, "turbospark run: --ids '%s' is not a list of token ids\n", ids_s); free(ids); return 2; }

    ts_error err = {0};
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.n_threads = threads;
    ep.verbose = verbose;
    ts_engine *e = NULL;
    if (ts_engine_open(model, &ep, &e, &err)) {
        fprintf(stderr, "turbospark run: %s\n", err.msg);
        free(ids);
        return 1;
    }
    const ts_model_info *info = ts_engine_info(e);
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.max_rows = chunk;
    if (spec) {
        if (!info->has_mtp) {
            fprintf(stderr, "turbospark run: --spec mtp: %s has no MTP head (no mtp.* tensors)\n", model);
            free(ids);
            ts_engine_close(e);
            return 1;
        }
        sp.spec_draft = draft;
        gp.spec_draft = draft;
    }
    ts_session *s = NULL;
    int rc = ts_session_new(e, &sp, &s, &err);
    int32_t *prompt_ids = malloc(sizeof(int32_t) * n_ids);
    for (int i = 0; i < n_ids; i++) prompt_ids[i] = ids[i];
    gp.n_predict = n_predict;
    gp.stop_ids = info->eos_ids;
    gp.n_stop = info->n_eos;
    run_out out = {print_ids, 0};
    ts_gen_stats stats;
    if (!rc && n_predict > 0) rc = ts_generate(s, prompt_ids, n_ids, &gp, on_token, &out, &stats, &err);
    if (print_ids) printf("\n");
    if (rc) {
        fprintf(stderr, "turbospark run: %s\n", err.msg);
    } else if (n_predict > 0) {
        fprintf(stderr, "prompt %d tokens, generated %d tokens; prefill %.1f tok/s, decode %.1f tok/s\n",
                stats.n_prompt, stats.n_gen, stats.n_prompt / (stats.t_prefill > 0 ? stats.t_prefill : 1e-9),
                stats.n_gen > 1 ? (stats.n_gen - 1) / (stats.t_decode > 0 ? stats.t_decode : 1e-9) : 0.0);
        if (spec && stats.n_blocks > 0) {
            fprintf(stderr, "spec mtp --draft %d: %d blocks, %d/%d drafts accepted, mean accepted length %.2f tokens/verify; acceptance by position:",
                    draft, stats.n_blocks, stats.n_accepted, stats.n_drafted,
                    (double)(stats.n_accepted + stats.n_blocks) / stats.n_blocks);
            for (int j = 0; j < draft; j++)
                fprintf(stderr, " %d:%.2f", j + 1, stats.drafted_at[j] ? (double)stats.accepted_at[j] / stats.drafted_at[j] : 0.0);
            fprintf(stderr, "; draft %.1f ms, verify %.1f ms, rollback %.2f ms (%.2f ms/verify)\n", stats.t_draft * 1e3,
                    stats.t_verify * 1e3, stats.t_rollback * 1e3, stats.t_verify * 1e3 / stats.n_blocks);
        }
    }
    free(prompt_ids);
    free(ids);
    ts_session_free(s);
    ts_engine_close(e);
    return rc ? 1 : 0;
}
