/* test_runner.c: the runner's own promises. Its tests run in name order
 * within the group, so a pair can check what one leaves for the next. */
#include "ts_test.h"

/* A switch a test leaves changed is put back by the runner (runner.c's
 * env_restore): the first test changes one on purpose (noting what the
 * caller had: unset, or a value), the second finds the caller's state again.
 * (Run alone, the second has nothing to compare and passes.) */
static int g_probe_noted, g_probe_set;
static char g_probe_was[64];

TS_TEST(runner, switches_1_left_changed) {
    const char *v = getenv("TSC_RUNNER_PROBE");
    snprintf(g_probe_was, sizeof g_probe_was, "%s", v ? v : "");
    g_probe_noted = 1, g_probe_set = v != NULL;
    setenv("TSC_RUNNER_PROBE", v && !strcmp(v, "1") ? "2" : "1", 1);
    CHECK(getenv("TSC_RUNNER_PROBE") != NULL);
}

TS_TEST(runner, switches_2_put_back) {
    if (!g_probe_noted) return;
    const char *v = getenv("TSC_RUNNER_PROBE");
    CHECK_MSG(g_probe_set ? v && !strcmp(v, g_probe_was) : v == NULL,
              "TSC_RUNNER_PROBE is %s after the test that changed it (the caller had %s)", v ? v : "unset",
              g_probe_set ? g_probe_was : "it unset");
}
