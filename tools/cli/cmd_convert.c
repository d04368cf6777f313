/* cmd_convert.c: `turbospark convert SRC DST [--bits 4|8] [--group 32|64|128] [--quiet]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark convert SRC DST [--bits 4|8] [--group 32|64|128] [--quiet]\n"
               "  Quantize the checkpoint directory SRC into a new install DST (MLX layout).\n"
               "  --bits   4 (default) or 8\n"
               "  --group  values per scale/bias; default 64, halved automatically until it divides\n"
               "           every row (an explicit --group that does not divide a row is an error)\n"
               "  --quiet  no progress bar or summary\n");
}

int cmd_convert(int argc, char **argv) {
    ts_convert_params p;
    ts_convert_params_default(&p);
    const char *pos[2] = {0};
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if ((!strcmp(a, "--bits") || !strcmp(a, "--group")) && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i]) { fprintf(stderr, "turbospark convert: %s '%s' is not a number\n", a, argv[i]); return 2; }
            if (!strcmp(a, "--bits")) p.bits = (int)v;
            else p.group = (int)v;
        } else if (!strcmp(a, "--quiet")) {
            p.quiet = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "turbospark convert: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (np < 2) {
            pos[np++] = a;
        } else {
            fprintf(stderr, "turbospark convert: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (np != 2) { usage(stderr); return 2; }
    ts_error err = {0};
    if (ts_convert(pos[0], pos[1], &p, &err)) {
        fprintf(stderr, "turbospark convert: %s\n", err.msg);
        return 1;
    }
    return 0;
}
