/* cmd_synth.c: `turbospark synth --shape SHAPE.json --out DIR [--bits 4|8|16] [--group 64] [--seed S] [--quiet]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark synth --shape SHAPE.json --out DIR [--bits 4|8|16] [--group 64] [--seed S] [--quiet]\n"
               "  Write a random-weight checkpoint of the shape (shapes/*.json) in the release layout.\n"
               "  --shape FILE  a shape file: config.json-like text-config fields (shapes/*.json)\n"
               "  --out DIR     the new checkpoint directory (must not exist)\n"
               "  --bits B      4 (default) or 8: quantized install; 16: bf16 checkpoint\n"
               "  --group G     values per scale/bias of a quantized install (default 64, halved until it\n"
               "                divides every row)\n"
               "  --seed S      random seed (default: a fixed one, so the same command gives the same bytes)\n"
               "  --quiet       no progress bar or summary\n");
}

int cmd_synth(int argc, char **argv) {
    ts_convert_params p;
    ts_convert_params_default(&p);
    const char *shape = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--quiet")) { p.quiet = 1; continue; }
        if (i + 1 >= argc) { fprintf(stderr, "turbospark synth: '%s' needs a value or is unknown\n", a); usage(stderr); return 2; }
        const char *v = argv[++i];
        char *end;
        if (!strcmp(a, "--shape")) shape = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--bits") || !strcmp(a, "--group") || !strcmp(a, "--seed")) {
            unsigned long long x = strtoull(v, &end, 10);
            if (*end || end == v) { fprintf(stderr, "turbospark synth: %s '%s' is not a number\n", a, v); return 2; }
            if (!strcmp(a, "--bits")) p.bits = (int)x;
            else if (!strcmp(a, "--group")) p.group = (int)x;
            else p.seed = x;
        } else { fprintf(stderr, "turbospark synth: unknown option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!shape || !out) { usage(stderr); return 2; }
    ts_error err = {0};
    if (ts_synth(shape, out, &p, &err)) { fprintf(stderr, "turbospark synth: %s\n", err.msg); return 1; }
    return 0;
}
