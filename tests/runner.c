/* runner.c: the test runner.
 *
 *   ts_test [--list] [GROUP | GROUP.NAME]...
 *
 * With no arguments every test runs. Each failure prints file:line and a
 * message; the last line is "N passed, N failed".
 */
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ts_test.h"
#include "cpu/kernels.h"

typedef struct { const char *group, *name; ts_test_fn fn; } test_entry;
static test_entry g_tests[1024];
static int g_n_tests;
static int g_cur_failed;

void ts_test_register(const char *group, const char *name, ts_test_fn fn) {
    if (g_n_tests < (int)(sizeof g_tests / sizeof g_tests[0]))
        g_tests[g_n_tests++] = (test_entry){group, name, fn};
}

void ts_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    g_cur_failed = 1;
}

int ts_test_failed(void) { return g_cur_failed; }

static char g_cur_skip[256];

void ts_test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_cur_skip, sizeof g_cur_skip, fmt, ap);
    va_end(ap);
    if (!g_cur_skip[0]) snprintf(g_cur_skip, sizeof g_cur_skip, "skipped");
}

const char *ts_test_bin(void) {
    const char *b = getenv("TS_BIN");
    return b && *b ? b : "build/turbospark";
}

const char *ts_test_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/ts_test.%d", (int)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

int ts_test_sh(char *out, size_t cap, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[8300];
    snprintf(full, sizeof full, "( %s ) 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t n = 0;
    if (out && cap) out[0] = 0;
    char buf[4096];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, p)) > 0) {
        if (out && n + 1 < cap) {
            size_t c = r < cap - 1 - n ? r : cap - 1 - n;
            memcpy(out + n, buf, c);
            n += c;
            out[n] = 0;
        }
    }
    int st = pclose(p);
    if (st == -1) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int cmp_entry(const void *a, const void *b) {
    const test_entry *x = a, *y = b;
    int c = strcmp(x->group, y->group);
    return c ? c : strcmp(x->name, y->name);
}

static int selected(const test_entry *t, int argc, char **argv) {
    int any = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        any = 1;
        char full[256];
        snprintf(full, sizeof full, "%s.%s", t->group, t->name);
        if (!strcmp(argv[i], t->group) || !strcmp(argv[i], full)) return 1;
    }
    return !any;
}

int main(int argc, char **argv) {
    qsort(g_tests, g_n_tests, sizeof g_tests[0], cmp_entry);
    /* the engine's floating-point mode (what ts_generate and ts_session_feed
     * run under), so that tests calling internals directly compare like
     * with like */
    ts_fp_begin();
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--list")) {
            for (int t = 0; t < g_n_tests; t++) printf("%s.%s\n", g_tests[t].group, g_tests[t].name);
            return 0;
        }
    int passed = 0, failed = 0, skipped = 0;
    for (int t = 0; t < g_n_tests; t++) {
        if (!selected(&g_tests[t], argc, argv)) continue;
        g_cur_failed = 0;
        g_cur_skip[0] = 0;
        fprintf(stderr, "[ RUN  ] %s.%s\n", g_tests[t].group, g_tests[t].name);
        g_tests[t].fn();
        if (g_cur_skip[0] && !g_cur_failed) {
            skipped++;
            fprintf(stderr, "[ SKIP ] %s.%s: %s\n", g_tests[t].group, g_tests[t].name, g_cur_skip);
        } else if (g_cur_failed) {
            failed++;
            fprintf(stderr, "[ FAIL ] %s.%s\n", g_tests[t].group, g_tests[t].name);
        } else {
            passed++;
        }
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/ts_test.%d", (int)getpid());
    if (system(cmd) != 0) { /* best effort */ }
    if (skipped) printf("%d skipped (counted neither passed nor failed)\n", skipped);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

float ts_test_max_abs(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}
