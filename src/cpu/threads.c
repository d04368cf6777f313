/* threads.c: placeholder pool (serial) until the persistent pool lands. */
#include "cpu/cpu.h"

void ts_kernels_set_threads(int n) { (void)n; }
int ts_pool_threads(void) { return 1; }
void ts_pool_run(ts_pool_fn fn, void *ctx) { fn(ctx, 0, 1); }
