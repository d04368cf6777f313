/* ts_test.h: a small test harness (one runner, named groups).
 *
 *   TS_TEST(group, name) { ... CHECK(cond); CHECK_MSG(cond, "fmt", ...); }
 *
 * Tests register themselves at load time (a constructor per test), so a new
 * test file needs no edit elsewhere. A failed CHECK records the failure and
 * returns from the test. The runner prints one line per failure and ends with
 * "N passed, N failed" (CI reads that line).
 *
 * Paths: tests run from the repository root; fixtures live in tests/fixtures.
 * TS_BIN names the CLI binary for black-box tests (default build/turbospark).
 */
#ifndef TS_TEST_H
#define TS_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "turbospark.h"

typedef void (*ts_test_fn)(void);
void ts_test_register(const char *group, const char *name, ts_test_fn fn);
void ts_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int ts_test_failed(void);
/* The CLI binary path for black-box tests. */
const char *ts_test_bin(void);
/* Run a shell command; capture stdout+stderr (truncated to cap) into out.
 * Returns the exit status (or -1). */
int ts_test_sh(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A scratch directory unique to this run (created on first use). */
const char *ts_test_tmpdir(void);
/* Mark the running test skipped (a requirement the machine lacks, e.g. a
 * CUDA device): the runner prints "[ SKIP ] group.name: why" and counts it
 * neither passed nor failed. Use SKIP(...) to skip and return. */
void ts_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define SKIP(...) do { ts_test_skip(__VA_ARGS__); return; } while (0)
/* max_i |a[i] - b[i]| (the helper three test files had each kept a copy of). */
float ts_test_max_abs(const float *a, const float *b, size_t n);

#define TS_TEST(group, name)                                                  \
    static void ts_test_##group##_##name(void);                               \
    __attribute__((constructor)) static void ts_test_reg_##group##_##name(void) { \
        ts_test_register(#group, #name, ts_test_##group##_##name);            \
    }                                                                         \
    static void ts_test_##group##_##name(void)

/* dir's engine on the CPU backend, or NULL (the test failed, naming why) */
static inline ts_engine *ts_test_open_cpu(const char *dir) {
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    ep.backend = "cpu";
    ts_engine *e = NULL;
    ts_error err = {0};
    if (ts_engine_open(dir, &ep, &e, &err)) ts_test_fail(__FILE__, __LINE__, "%s: %s", dir, err.msg);
    return e;
}

/* An environment variable set to val (NULL: unset) while a test runs, and
 * given back the value it had (its copy, or NULL when it was unset, which
 * ts_env_pop frees): a test leaves a caller's switches as it found them,
 * and one whose expectations assume a switch's default pushes NULL.
 * (s43-run3: a test that unset TSC_MOE_DIG ran the tests after it without
 * the form the whole group was run under.) */
static inline char *ts_env_push(const char *name, const char *val) {
    const char *v = getenv(name);
    char *keep = v ? strdup(v) : NULL;
    if (val) setenv(name, val, 1);
    else unsetenv(name);
    return keep;
}
static inline void ts_env_pop(const char *name, char *keep) {
    if (keep) setenv(name, keep, 1);
    else unsetenv(name);
    free(keep);
}

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) { ts_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); return; } \
    } while (0)

#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) { ts_test_fail(__FILE__, __LINE__, __VA_ARGS__); return; } \
    } while (0)

/* CHECK_MSG that records the failure and goes on: for code that must reach
 * its cleanup (an environment switch put back, an engine closed), where a
 * return would leave the switch set for every test after it (s43-run4: one
 * failure in a test that set TSC_MOE_GUDIG=2 failed four tests after it). */
#define EXPECT_MSG(cond, ...)                                                 \
    do {                                                                      \
        if (!(cond)) ts_test_fail(__FILE__, __LINE__, __VA_ARGS__);           \
    } while (0)

#endif
