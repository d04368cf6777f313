/* cmd_plan.c: `turbospark plan`: the memory plan of a model, or of a released
 * size without any checkpoint, and session parameters, printed before
 * anything is loaded.
 *
 *   turbospark plan (-m DIR | --shape FILE [--bits 4|8|16] [--group G] [--install DIR]) [--ctx N] [--chunk N]
 *                   [--spec mtp|ngram --draft M] [--checkpoint] [--json]
 *
 * -m reads config.json and the safetensors headers only (ts_mem_plan_dir);
 * --shape reads a shape file (one of shapes/) and plans the install `synth`
 * (or `convert` of the real checkpoint) writes for it (ts_mem_plan_shape).
 * The engine then allocates exactly the bytes listed (tests/test_plan.c).
 * Mapped weights are read in place through mmap and are not heap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: turbospark plan (-m DIR | --shape FILE [--bits 4|8|16] [--group G] [--install DIR])\n"
            "                       [--ctx N] [--chunk N]"
" [--spec mtp|ngram --draft M] [--checkpoint] [--backend cpu|cuda]\n"
            "                       [--expert-cache SIZE [--expert-policy P] [--expert-host-cache SIZE]] [--json]\n"
            "  Print every allocation the engine and one session will make, by owner, memory domain\n"
            "  and category, with totals, without loading any weights.\n"
            "  -m, --model DIR     an install (reads config.json and the safetensors headers only;\n"
            "                      default: the bundled model)\n"
            "  --shape FILE        a released size (shapes/*.json), no checkpoint needed: the install\n"
            "                      that `synth --shape FILE` or `convert` of the real checkpoint writes\n"
            "  --bits 4|8|16       with --shape: INT4 (default), INT8 or bf16 weights\n"
            "  --group G           with --shape: quantization group (default 64)\n"
            "  --install DIR       with --shape: where the install will be opened from (the path is\n"
            "                      part of the tensor index's bytes; default 'model')\n"
            "  --ctx N             context length in tokens (default 4096, or the model's maximum if less)\n"
            "  --chunk N           prefill rows per pass (default 64)\n"
            "  --spec mtp          speculative decoding with the MTP head ...\n"
            "  --spec ngram        n-gram (prompt lookup) drafting: the verify buffers alone (no MTP\n"
            "                      head needed) ...\n"
            "  --draft M           ... drafting M tokens per block (1..%d, default 3; n-gram 4)\n"
            "  --spec dflash       speculative decoding with the DFlash drafter (DIR/dflash, or\n"
            "  --drafter DIR       its directory) ... --block B rows per block (2..16, default 16)\n"
            "  --checkpoint        a checkpoint copy of the GDN states (what chat's sessions hold)\n"
            "  --backend cpu|cuda  the engine of that backend (default cpu): cuda puts the weights and\n"
            "                      the session's buffers in device memory (needs a CUDA build; no GPU)\n"
            "  --expert-cache SIZE MoE expert streaming: the cache, its staging and tables as the engine\n"
            "                      allocates them, the routed experts left in the files\n"
            "  --expert-policy P   its eviction policy (lfru, lru; sizes do not depend on it)\n"
            "  --expert-host-cache SIZE  with --backend cuda: the pinned host tier in front of the files\n"
            "  --gpus N            tensor parallelism: one plan for each of the N GPUs (the device\n"
            "                      bytes of each GPU exact, host bookkeeping not itemized)\n"
            "  --json              the plan as one JSON object (an array of one a GPU with --gpus)\n",
            TS_SPEC_MAX_DRAFT);
}

static const char *human(uint64_t b, char *buf, size_t cap) {
    if (b >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024) snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else snprintf(buf, cap, "%llu B", (unsigned long long)b);
    return buf;
}

/* A JSON string body: our labels and paths, with quotes, backslashes and
 * control characters escaped. */
static void jstr(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static void print_json(const ts_mem_plan *pl, const char *source, int bits) {
    printf("{\"source\": ");
    jstr(source);
    if (bits) printf(", \"bits\": %d", bits);
    printf(", \"n_ctx\": %d, \"max_rows\": %d, \"spec_draft\": %d", pl->n_ctx, pl->max_rows, pl->spec_draft);
    if (pl->ngram_draft) printf(", \"ngram_draft\": %d", pl->ngram_draft);
    printf(", \"ahead\": %d", pl->ahead);
    if (pl->expert_slots)
        printf(", \"expert_cache\": {\"slots\": %d, \"slot_bytes\": %llu, \"io_threads\": %d, \"file_bytes\": %llu}",
               pl->expert_slots, (unsigned long long)pl->expert_slot_bytes, pl->expert_io_threads,
               (unsigned long long)pl->expert_file_bytes);
    printf(", \"mapped_bytes\": %llu, \"mapped_kept_bytes\": %llu, \"total_bytes\": %llu, \"engine_bytes\": %llu, \"session_bytes\": %llu"
           ", \"drafter_bytes\": %llu",
           (unsigned long long)pl->mapped_bytes, (unsigned long long)pl->mapped_kept_bytes,
           (unsigned long long)pl->total_bytes,
           (unsigned long long)pl->engine_bytes, (unsigned long long)pl->session_bytes,
           (unsigned long long)pl->drafter_bytes);
    printf(", \"domains\": {");
    for (int d = 0; d < TS_DOM_N; d++) {
        printf("%s\"%s\": {\"total\": %llu", d ? ", " : "", ts_mem_domain_name((ts_mem_domain)d),
               (unsigned long long)pl->dom_bytes[d]);
        for (int c = 0; c < TS_MEM_N; c++)
            printf(", \"%s\": %llu", ts_mem_cat_name((ts_mem_cat)c), (unsigned long long)pl->bytes[d][c]);
        printf("}");
    }
    printf("}, \"items\": [");
    for (int i = 0; i < pl->n_items; i++) {
        const ts_mem_plan_item *it = &pl->items[i];
        printf("%s{\"name\": ", i ? ", " : "");
        jstr(it->name);
        printf(", \"owner\": \"%s\", \"domain\": \"%s\", \"category\": \"%s\", \"count\": %llu, \"bytes\": %llu"
               ", \"drafter\": %s, \"backend\": %s}",
               it->engine ? "engine" : "session", ts_mem_domain_name(it->dom), ts_mem_cat_name(it->cat),
               (unsigned long long)it->count, (unsigned long long)it->bytes, it->drafter ? "true" : "false",
               it->backend ? "true" : "false");
    }
    printf("]}\n");
}

static void print_table(const ts_mem_plan *pl, const char *source, int bits) {
    char h[32], h2[32], h3[32];
    printf("memory plan for %s", source);
    if (bits) printf(" (%s)", bits == 16 ? "bf16" : bits == 8 ? "INT8" : "INT4");
    printf(": context %d, chunk %d rows, %s\n", pl->n_ctx, pl->max_rows,
           pl->spec_draft ? "speculative decoding: mtp" : pl->dflash_block ? "speculative decoding: dflash"
           : pl->ngram_draft ? "speculative decoding: ngram" : "no speculative decoding");
    if (pl->spec_draft) printf("  (draft %d tokens per block, verify %d rows)\n", pl->spec_draft, pl->spec_draft + 1);
    if (pl->ngram_draft) printf("  (n-gram: draft %d tokens per block, verify %d rows; no MTP buffers)\n", pl->ngram_draft,
                                pl->ngram_draft + 1);
    if (pl->dflash_block) printf("  (DFlash: blocks of %d rows, %d drafts, verify %d rows)\n", pl->dflash_block,
                                 pl->dflash_block - 1, pl->dflash_block);
    if (pl->ahead) printf("  (greedy decoding runs ahead: the GDN state pairs and two rows of logits; TS_AHEAD=0: off)\n");
    printf("\n%-8s %-7s %-13s %-58s %6s %16s %11s\n", "owner", "domain", "category", "allocation", "count", "bytes", "");
    for (int pass = 1; pass >= 0; pass--)
        for (int i = 0; i < pl->n_items; i++) {
            const ts_mem_plan_item *it = &pl->items[i];
            if (it->engine != pass) continue;
            printf("%-8s %-7s %-13s %-58s %6llu %16llu %11s%s%s\n", it->engine ? "engine" : "session",
                   ts_mem_domain_name(it->dom), ts_mem_cat_name(it->cat), it->name, (unsigned long long)it->count,
                   (unsigned long long)it->bytes, human(it->bytes, h, sizeof h), it->drafter ? "  [drafter]" : "",
                   it->backend ? "  [backend]" : "");
        }
    /* a column per domain that holds anything (host always) */
    int shown[TS_DOM_N], n_shown = 0;
    for (int d = 0; d < TS_DOM_N; d++) {
        shown[d] = d == TS_DOM_HOST || pl->dom_bytes[d];
        n_shown += shown[d];
    }
    printf("\n%-13s", "by category");
    for (int d = 0; d < TS_DOM_N; d++)
        if (shown[d]) printf(" %16s %11s", ts_mem_domain_name((ts_mem_domain)d), "");
    printf("\n");
    for (int c = 0; c < TS_MEM_N; c++) {
        printf("  %-11s", ts_mem_cat_name((ts_mem_cat)c));
        for (int d = 0; d < TS_DOM_N; d++)
            if (shown[d]) printf(" %16llu %11s", (unsigned long long)pl->bytes[d][c], human(pl->bytes[d][c], h, sizeof h));
        printf("\n");
    }
    printf("  %-11s", "total");
    for (int d = 0; d < TS_DOM_N; d++)
        if (shown[d]) printf(" %16llu %11s", (unsigned long long)pl->dom_bytes[d], human(pl->dom_bytes[d], h, sizeof h));
    printf("\n");
    if (n_shown < TS_DOM_N) {
        printf("  (nothing in");
        for (int d = 0, k = 0; d < TS_DOM_N; d++)
            if (!shown[d]) printf("%s %s", k++ ? " or" : "", ts_mem_domain_name((ts_mem_domain)d));
        printf(" memory: the CPU backend allocates host memory only)\n");
    }
    printf("\n");
    printf("  %-13s %16llu %11s   (engine %s, session %s)\n", "total heap", (unsigned long long)pl->total_bytes,
           human(pl->total_bytes, h, sizeof h), human(pl->engine_bytes, h2, sizeof h2),
           human(pl->session_bytes, h3, sizeof h3));
    printf("  %-13s %16llu %11s   (what drafting adds)\n", "drafter", (unsigned long long)pl->drafter_bytes,
           human(pl->drafter_bytes, h, sizeof h));
    printf("  %-13s %16llu %11s   (the install's size; mmap, read in place, not heap)\n", "weights file",
           (unsigned long long)pl->mapped_bytes, human(pl->mapped_bytes, h, sizeof h));
    printf("  %-13s %16llu %11s   (the part not repacked into the heap stays mapped)\n", "file mapped",
           (unsigned long long)pl->mapped_kept_bytes, human(pl->mapped_kept_bytes, h, sizeof h));
    if (pl->expert_slots) {
        printf("  %-13s %16llu %11s   (read on demand into %d slots of %s, %d reads in flight; never mapped in)\n",
               "experts file", (unsigned long long)pl->expert_file_bytes, human(pl->expert_file_bytes, h, sizeof h),
               pl->expert_slots, human(pl->expert_slot_bytes, h2, sizeof h2), pl->expert_io_threads);
    }
    uint64_t host = pl->dom_bytes[TS_DOM_HOST] + pl->mapped_kept_bytes;
    printf("host memory in use: %s (heap + file mapped)", human(host, h, sizeof h));
    if (pl->dom_bytes[TS_DOM_DEVICE]) printf(", device memory: %s", human(pl->dom_bytes[TS_DOM_DEVICE], h, sizeof h));
    printf("\n");
    printf("[backend]: sized by this machine's kernels (packed layout, threads); [drafter]: only with --spec\n");
}

int cmd_plan(int argc, char **argv) {
    const char *model = NULL, *shape = NULL, *spec = NULL, *install = NULL, *drafter = NULL, *backend = "cpu";
    int block = -1;
    const char *xpolicy = NULL;
    uint64_t xcache = 0, xhost = 0;
    int n_ctx = 0, chunk = 0, draft = -1, checkpoint = 0, json = 0, bits = 0, group = 0, gpus = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--checkpoint")) { checkpoint = 1; continue; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        int num = !strcmp(a, "--ctx") || !strcmp(a, "--chunk") || !strcmp(a, "--draft") || !strcmp(a, "--bits") ||
                  !strcmp(a, "--group") || !strcmp(a, "--block") || !strcmp(a, "--gpus");
        int str = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--shape") || !strcmp(a, "--spec") ||
                  !strcmp(a, "--install") || !strcmp(a, "--drafter") || !strcmp(a, "--backend") ||
                  !strcmp(a, "--expert-cache") || !strcmp(a, "--expert-policy") || !strcmp(a, "--expert-host-cache");
        if (!num && !str) {
            fprintf(stderr, "turbospark plan: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) { fprintf(stderr, "turbospark plan: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        if (str) {
            if (!strcmp(a, "--shape")) shape = v;
            else if (!strcmp(a, "--spec")) spec = v;
            else if (!strcmp(a, "--install")) install = v;
            else if (!strcmp(a, "--drafter")) drafter = v;
            else if (!strcmp(a, "--backend")) backend = v;
            else if (!strcmp(a, "--expert-policy")) xpolicy = v;
            else if (!strcmp(a, "--expert-cache")) { if (!cli_parse_size("plan", v, &xcache)) return 2; }
            else if (!strcmp(a, "--expert-host-cache")) { if (!cli_parse_size("plan", v, &xhost)) return 2; }
            else model = v;
            continue;
        }
        int x;
        if (!cli_parse_count(v, &x)) { fprintf(stderr, "turbospark plan: bad value '%s' for %s (a count)\n", v, a); return 2; }
        if (!strcmp(a, "--ctx")) n_ctx = x;
        else if (!strcmp(a, "--chunk")) chunk = x;
        else if (!strcmp(a, "--draft")) draft = x;
        else if (!strcmp(a, "--block")) block = x;
        else if (!strcmp(a, "--gpus")) gpus = x;
        else if (!strcmp(a, "--bits")) bits = x;
        else group = x;
    }
    if (spec && strcmp(spec, "mtp") && strcmp(spec, "dflash") && strcmp(spec, "ngram")) {
        fprintf(stderr, "turbospark plan: --spec '%s' is not supported (use 'mtp', 'dflash' or 'ngram')\n", spec);
        return 2;
    }
    const int dflash = spec && !strcmp(spec, "dflash"), ngram = spec && !strcmp(spec, "ngram");
    if ((block != -1 || drafter) && !dflash) { fprintf(stderr, "turbospark plan: --block and --drafter need --spec dflash\n"); return 2; }
    if (dflash && shape) { fprintf(stderr, "turbospark plan: --spec dflash needs -m DIR (the drafter's files)\n"); return 2; }
    if (dflash && block == -1) block = TS_DFLASH_MAX_BLOCK;
    if (dflash && (block < 2 || block > TS_DFLASH_MAX_BLOCK)) {
        fprintf(stderr, "turbospark plan: --block %d is outside 2..%d\n", block, TS_DFLASH_MAX_BLOCK);
        return 2;
    }
    if (dflash && draft != -1) { fprintf(stderr, "turbospark plan: --draft is MTP's; DFlash takes --block\n"); return 2; }
    if (dflash) spec = NULL; /* the MTP checks below do not apply */
    if (draft != -1 && !spec) { fprintf(stderr, "turbospark plan: --draft needs --spec mtp (or ngram)\n"); return 2; }
    if (spec && draft == -1) draft = ngram ? CLI_NGRAM_DRAFT : 3;
    if (spec && (draft < 1 || draft > TS_SPEC_MAX_DRAFT)) {
        fprintf(stderr, "turbospark plan: --draft %d is outside 1..%d\n", draft, TS_SPEC_MAX_DRAFT);
        return 2;
    }
    if (model && shape) { fprintf(stderr, "turbospark plan: give -m DIR or --shape FILE, not both\n"); return 2; }
    if ((bits || group || install) && !shape) {
        fprintf(stderr, "turbospark plan: --bits, --group and --install go with --shape (an install has its own)\n");
        return 2;
    }
    if (shape && !bits) bits = 4;
    if (!model && !shape) model = cli_default_model();
    if (!model && !shape) { fprintf(stderr, "turbospark plan: no model: pass -m DIR or --shape FILE\n"); return 2; }
    ts_session_params sp;
    ts_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.max_rows = chunk;
    sp.spec_draft = spec && !ngram ? draft : 0;
    sp.ngram_draft = ngram ? draft : 0;
    sp.dflash_block = dflash ? block : 0;
    sp.checkpoint = checkpoint;
    ts_mem_plan *pl = malloc(sizeof *pl);
    if (!pl) { fprintf(stderr, "turbospark plan: out of memory\n"); return 1; }
    ts_error err = {0};
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda")) {
        fprintf(stderr, "turbospark plan: --backend '%s': plans are made for cpu or cuda\n", backend);
        free(pl);
        return 2;
    }
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = backend;
    ep.drafter_dir = drafter;
    ep.expert_cache = xcache;
    ep.expert_host_cache = xhost;
    ep.expert_policy = xpolicy;
    if (gpus > 1) { /* tensor parallelism: one plan a GPU */
        ep.gpus = gpus;
        if (json) printf("[");
        for (int r = 0; r < gpus; r++) {
            if (shape ? ts_mem_plan_shape_rank(shape, bits, group, install, &ep, &sp, r, pl, &err)
                      : ts_mem_plan_rank(model, &ep, &sp, r, pl, &err)) {
                fprintf(stderr, "turbospark plan: %s\n", err.msg);
                free(pl);
                return 1;
            }
            char src[4200];
            snprintf(src, sizeof src, "%s, GPU %d of %d (tensor parallelism)", shape ? shape : model, r, gpus);
            if (json) { if (r) printf(","); print_json(pl, src, shape ? bits : 0); }
            else { if (r) printf("\n"); print_table(pl, src, shape ? bits : 0); }
        }
        if (json) printf("]\n");
        free(pl);
        return 0;
    }
    int rc = shape ? ts_mem_plan_shape_ex(shape, bits, group, install, &ep, &sp, pl, &err)
                   : ts_mem_plan_dir_ex(model, &ep, &sp, pl, &err);
    if (rc) {
        fprintf(stderr, "turbospark plan: %s\n", err.msg);
        free(pl);
        return 1;
    }
    if (json) print_json(pl, shape ? shape : model, shape ? bits : 0);
    else print_table(pl, shape ? shape : model, shape ? bits : 0);
    free(pl);
    return 0;
}
