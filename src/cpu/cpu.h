/* cpu.h: internals of the CPU backend shared by its files.
 *
 * Owns: the kernel modes, the thread pool interface (threads.c), the
 * per-ISA row kernels (linear_{generic,avx2,avx512}.c) and the driver that
 * splits a product into row ranges over the pool (matmul.c).
 * Does not own: the contract (kernels.h), the reference (linear_ref.c).
 */
#ifndef TS_CPU_H
#define TS_CPU_H

#include "kernels.h"

enum { TS_KMODE_REF = 0, TS_KMODE_GENERIC, TS_KMODE_AVX2, TS_KMODE_AVX512 };
int ts_kmode(void);

/* y = x W^T over the current mode; prefill may use differently-rounded
 * multi-row kernels. */
void ts_cpu_linear(int mode, const ts_weight *w, const float *x, float *y, int n, int prefill);

/* ---- thread pool ---- */
/* Run fn(ctx, t, nt) on nt = ts_pool_threads() threads (t = 0 is the caller)
 * and wait for all. Not reentrant: one parallel region at a time. */
typedef void (*ts_pool_fn)(void *ctx, int t, int nt);
void ts_pool_run(ts_pool_fn fn, void *ctx);
int ts_pool_threads(void);

#endif
