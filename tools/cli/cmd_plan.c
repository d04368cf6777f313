/* cmd_plan.c: `turbospark plan`: the memory plan of a model and session
 * parameters, printed before anything is loaded.
 *
 *   turbospark plan [-m DIR] [--ctx N] [--chunk N] [--spec mtp --draft M] [--checkpoint]
 *
 * Reads config.json and the safetensors headers only (ts_mem_plan_dir); the
 * engine then allocates exactly the heap bytes listed (tests/test_plan.c).
 * Mapped weights are read in place through mmap and are not heap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

#define PLAN_OPTS (CLI_OPT_MODEL | CLI_OPT_CTX | CLI_OPT_CHUNK | CLI_OPT_SPEC)

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark plan [-m DIR] [--ctx N] [--chunk N] [--spec mtp [--draft M]] [--checkpoint]\n"
               "  the heap bytes the engine and one session will allocate, by category, and the weights\n"
               "  mapped in place, from config.json and the safetensors headers only (nothing is loaded)\n"
               "  --checkpoint        count a session checkpoint (what chat's and the server's sessions hold)\n");
    cli_engine_help(f, PLAN_OPTS);
}

static const char *human(uint64_t b, char *buf, size_t cap) {
    if (b >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024) snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else snprintf(buf, cap, "%llu B", (unsigned long long)b);
    return buf;
}

int cmd_plan(int argc, char **argv) {
    int checkpoint = 0;
    cli_engine eo;
    cli_engine_init(&eo, "plan", PLAN_OPTS);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int sr = cli_engine_parse(argc, argv, &i, &eo);
        if (sr < 0) return 2;
        if (sr > 0) continue;
        if (!strcmp(a, "--checkpoint")) checkpoint = 1; /* what chat's sessions hold */
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { fprintf(stderr, "turbospark plan: unknown or incomplete argument '%s'\n", a); usage(stderr); return 2; }
    }
    if (cli_engine_check(&eo)) return 2;
    const char *model = eo.model;
    ts_session_params sp;
    ts_session_params_default(&sp);
    cli_engine_apply(&eo, NULL, &sp, NULL);
    sp.checkpoint = checkpoint;
    ts_mem_plan pl;
    ts_error err = {0};
    if (ts_mem_plan_dir(model, &sp, &pl, &err)) { fprintf(stderr, "turbospark plan: %s\n", err.msg); return 1; }
    char h[32];
    printf("memory plan for %s: context %d, chunk %d rows, %s\n", model, pl.n_ctx, pl.max_rows,
           pl.spec_draft ? "speculative decoding: mtp" : "no speculative decoding");
    if (pl.spec_draft) printf("  (draft %d tokens per block, verify %d rows)\n", pl.spec_draft, pl.spec_draft + 1);
    printf("\n%-8s %-13s %-58s %6s %14s %12s\n", "owner", "category", "allocation", "count", "bytes", "");
    for (int pass = 1; pass >= 0; pass--)
        for (int i = 0; i < pl.n_items; i++) {
            const ts_mem_plan_item *it = &pl.items[i];
            if (it->engine != pass) continue;
            printf("%-8s %-13s %-58s %6llu %14llu %12s%s\n", it->engine ? "engine" : "session", ts_mem_cat_label(it->cat),
                   it->name, (unsigned long long)it->count, (unsigned long long)it->bytes, human(it->bytes, h, sizeof h),
                   it->drafter ? "  [drafter]" : "");
        }
    printf("\nheap by category:\n");
    for (int c = 0; c < TS_MEMCAT_N; c++)
        printf("  %-13s %14llu %12s\n", ts_mem_cat_label(c), (unsigned long long)pl.cat_bytes[c],
               human(pl.cat_bytes[c], h, sizeof h));
    printf("  %-13s %14llu %12s\n", "engine", (unsigned long long)pl.engine_bytes, human(pl.engine_bytes, h, sizeof h));
    printf("  %-13s %14llu %12s\n", "session", (unsigned long long)pl.session_bytes, human(pl.session_bytes, h, sizeof h));
    printf("  %-13s %14llu %12s\n", "drafter", (unsigned long long)pl.drafter_bytes, human(pl.drafter_bytes, h, sizeof h));
    printf("  %-13s %14llu %12s\n", "total heap", (unsigned long long)pl.total_bytes, human(pl.total_bytes, h, sizeof h));
    printf("weights mapped (mmap, not heap): %llu bytes (%s)\n", (unsigned long long)pl.mapped_bytes,
           human(pl.mapped_bytes, h, sizeof h));
    return 0;
}
