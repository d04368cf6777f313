/* tok_bench.c: turbospark's side of the tokenizer benchmark (bench.js drives it).
 *
 *   tok_bench TOKENIZER DOCDIR
 *
 * Loads the tokenizer and every DOCDIR/*.txt (sorted), then obeys commands on
 * stdin, one per line, answering one line on stdout each:
 *   pass   encode all documents once, one after another, single thread;
 *          answers "WALL_SECONDS CPU_SECONDS TOKENS"
 *   ids    answers the ids of all documents, comma-separated, documents
 *          separated by ';' (for the identical-ids check)
 * Only the encode calls are timed, as bench.js times only HF's encode calls.
 * Uses only the public header.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "turbospark.h"

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: tok_bench TOKENIZER DOCDIR\n");
        return 2;
    }
    ts_tokenizer *t;
    ts_error err;
    if (ts_tokenizer_load(argv[1], &t, &err)) {
        fprintf(stderr, "tok_bench: %s\n", err.msg);
        return 1;
    }
    DIR *d = opendir(argv[2]);
    if (!d) {
        fprintf(stderr, "tok_bench: cannot open %s\n", argv[2]);
        return 1;
    }
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".txt")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp);
    char *text[256];
    size_t len[256];
    for (int i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", argv[2], names[i]);
        FILE *f = fopen(p, "rb");
        if (!f) return 1;
        fseek(f, 0, SEEK_END);
        len[i] = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        text[i] = malloc(len[i] + 1);
        if (fread(text[i], 1, len[i], f) != len[i]) return 1;
        fclose(f);
    }
    char cmd[64];
    while (fgets(cmd, sizeof cmd, stdin)) {
        if (!strncmp(cmd, "pass", 4)) {
            long tokens = 0;
            double w = 0, c = 0;
            for (int i = 0; i < n; i++) {
                ts_tokens v = {0};
                double w0 = wall(), c0 = cpu();
                if (ts_tokenizer_encode(t, text[i], len[i], &v, &err)) {
                    fprintf(stderr, "tok_bench: %s: %s\n", names[i], err.msg);
                    return 1;
                }
                w += wall() - w0;
                c += cpu() - c0;
                tokens += v.n;
                ts_tokens_free(&v);
            }
            printf("%.6f %.6f %ld\n", w, c, tokens);
        } else if (!strncmp(cmd, "ids", 3)) {
            for (int i = 0; i < n; i++) {
                ts_tokens v = {0};
                if (ts_tokenizer_encode(t, text[i], len[i], &v, &err)) return 1;
                for (int k = 0; k < v.n; k++) printf(k ? ",%d" : "%d", v.ids[k]);
                putchar(i + 1 < n ? ';' : '\n');
                ts_tokens_free(&v);
            }
        } else {
            break;
        }
        fflush(stdout);
    }
    for (int i = 0; i < n; i++) free(text[i]), free(names[i]);
    ts_tokenizer_free(t);
    return 0;
}
