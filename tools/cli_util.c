/* cli_util.c: small helpers shared by the subcommands. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

int cli_parse_ids(const char *s, int **ids) {
    *ids = NULL;
    int cap = 16, n = 0;
    int *v = malloc(sizeof(int) * cap);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > 0x7fffffff) { free(v); return -1; }
        if (n == cap) {
            int *nv = realloc(v, sizeof(int) * (cap *= 2));
            if (!nv) { free(v); return -1; }
            v = nv;
        }
        v[n++] = (int)x;
        p = end;
        if (*p && *p != ',' && *p != ' ') { free(v); return -1; }
    }
    *ids = v;
    return n;
}

const char *cli_default_model(void) {
    /* The bundled install, relative to the working directory or to the
     * TURBOSPARK_MODEL environment variable. */
    const char *env = getenv("TURBOSPARK_MODEL");
    if (env && *env) return env;
    static const char *candidates[] = {"models/default", "tests/fixtures/tiny-dense", NULL};
    struct stat st;
    for (int i = 0; candidates[i]; i++)
        if (stat(candidates[i], &st) == 0 && S_ISDIR(st.st_mode)) return candidates[i];
    return NULL;
}
