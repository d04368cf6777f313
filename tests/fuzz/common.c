/* common.c: what the harnesses share: the target table, failure
 * reporting, fixture reading (see fuzz.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

const fuzz_target fuzz_targets[] = {
    {"server", fuzz_server},         {"chat", fuzz_chat},
    {"template", fuzz_template},     {"tokenizer", fuzz_tokenizer},
    {"tokenizer_json", fuzz_tokenizer_json}, {"safetensors", fuzz_safetensors},
    {"config", fuzz_config},         {"reply", fuzz_reply},
    {"dflash_config", fuzz_dflash_config}, {"size", fuzz_size},
    {"json_fsm", fuzz_json_fsm},     {"json_schema", fuzz_json_schema},
};
const int fuzz_n_targets = (int)(sizeof fuzz_targets / sizeof fuzz_targets[0]);

const char *fuzz_current;

void fuzz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz: property failed%s%s: ", fuzz_current ? " on " : "", fuzz_current ? fuzz_current : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

char *fuzz_read_fixture(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fuzz_fail("cannot open fixture %s (run from the repository root)", path);
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) fuzz_fail("out of memory reading %s", path);
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        cap *= 2;
        b = realloc(b, cap);
    }
    fclose(f);
    b[n] = 0;
    if (len) *len = n;
    return b;
}

char *fuzz_strndup(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) fuzz_fail("out of memory");
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}
