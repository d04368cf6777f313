/* threads.c: the persistent kernel thread pool.
 *
 * Owns: n-1 worker threads (the caller is thread 0), started on first use
 * and kept for the life of the process. A parallel region costs two atomic
 * handshakes, not a thread start: decode issues ~200 matrix products per
 * token, so per-region overhead must stay at the microsecond level. Workers
 * spin briefly (a region usually follows within microseconds), then sleep
 * on a condition variable so an idle engine does not burn a core.
 * Does not own: how work is split (the caller's fn decides from t and nt).
 * Invariant: one region at a time (matmul.c serialises callers).
 */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "cpu/cpu.h"

#define MAX_THREADS 64
#define SPIN 20000

static int g_want = 0;          /* requested (0 = all cores) */
static int g_nt = 0;            /* running, incl. the caller; 0 = not started */
static pthread_t g_th[MAX_THREADS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static ts_pool_fn g_fn;
static void *g_ctx;
static unsigned long g_gen;     /* bumped per region (atomic) */
static int g_pending;           /* workers not yet done with the region (atomic) */
static int g_sleepers;          /* workers waiting on g_cv (under g_mu) */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    unsigned long seen = 0;
    for (;;) {
        unsigned long g;
        int spins = 0;
        while ((g = __atomic_load_n(&g_gen, __ATOMIC_ACQUIRE)) == seen) {
            if (++spins < SPIN) { cpu_relax(); continue; }
            pthread_mutex_lock(&g_mu);
            g_sleepers++;
            while (__atomic_load_n(&g_gen, __ATOMIC_ACQUIRE) == seen) pthread_cond_wait(&g_cv, &g_mu);
            g_sleepers--;
            pthread_mutex_unlock(&g_mu);
        }
        seen = g;
        g_fn(g_ctx, t, g_nt);
        __atomic_fetch_sub(&g_pending, 1, __ATOMIC_ACQ_REL);
    }
    return NULL;
}

static void start(void) {
    int n = g_want > 0 ? g_want : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    int ok = 1;
    for (int t = 1; t < n; t++)
        if (pthread_create(&g_th[t], NULL, worker, (void *)(intptr_t)t) != 0) { n = t; ok = 0; break; }
    (void)ok; /* fewer threads than asked is still correct */
    g_nt = n;
}

void ts_kernels_set_threads(int n) {
    /* Only before the pool starts: changing a running pool would need a join. */
    if (!g_nt) g_want = n;
}

int ts_pool_threads(void) {
    if (!g_nt) start();
    return g_nt;
}

void ts_pool_run(ts_pool_fn fn, void *ctx) {
    int nt = ts_pool_threads();
    if (nt == 1) { fn(ctx, 0, 1); return; }
    g_fn = fn;
    g_ctx = ctx;
    __atomic_store_n(&g_pending, nt - 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&g_gen, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&g_mu);
    if (g_sleepers) pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    fn(ctx, 0, nt);
    int spins = 0;
    while (__atomic_load_n(&g_pending, __ATOMIC_ACQUIRE) > 0)
        if (++spins < SPIN) cpu_relax();
        else sched_yield();
}
