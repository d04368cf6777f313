/* threads.c: the persistent kernel thread pool.
 *
 * Owns: n-1 worker threads (the caller is thread 0), started on first use
 * and kept for the life of the process. A parallel region is a set of
 * chunks claimed dynamically: one atomic word packs (region generation,
 * chunk count, next chunk), and every participant, the caller included,
 * claims chunks with a compare-and-swap until none are left. So a worker that
 * is late (descheduled on a busy machine: the usual case on a shared 2-core
 * box) costs nothing: the caller simply does the work; and a worker that
 * wakes after its region ended sees a new generation and claims nothing.
 * The caller waits only for chunks already claimed. Workers spin briefly
 * (regions follow each other within microseconds in decode), then sleep on a
 * condition variable so an idle engine burns no core.
 * Floating-point mode: a region's chunks run under the caller's MXCSR (the
 * workers copy it), so a result never depends on which thread computed it,
 * whatever mode the caller chose (ts_fp_begin).
 * Invariant: one region at a time (matmul.c serialises callers).
 */
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "cpu/cpu.h"

#define MAX_THREADS 64
#define SPIN 20000
#define GEN_SHIFT 40
#define N_SHIFT 20
#define FIELD ((1ull << 20) - 1)

static int g_want = 0;
static int g_nt = 0;
static pthread_t g_th[MAX_THREADS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static ts_pool_fn g_fn;
static void *g_ctx;
static uint64_t g_word;      /* gen << 40 | n_chunks << 20 | next chunk (atomic) */
static int g_left;           /* chunks not yet finished (atomic) */
static int g_sleepers;       /* under g_mu */
static unsigned g_csr;       /* the caller's MXCSR for the current region */

static inline unsigned get_csr(void) {
    unsigned m = 0;
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("stmxcsr %0" : "=m"(m));
#endif
    return m;
}

static inline void set_csr(unsigned m) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("ldmxcsr %0" : : "m"(m));
#else
    (void)m;
#endif
}

/* Flush denormals (FTZ | DAZ in MXCSR). Why: the GDN decay products e^(G_t -
 * G_s) and long-decayed state entries fall into the denormal range, and on
 * Intel cores every f32 operation that reads or produces one takes a
 * microcode assist: a 0.8B-shaped prefill ran 27% slower on this Xeon (no
 * cost on AMD). Values below 1.2e-38 count as zero: far below any tolerance. */
unsigned ts_fp_begin(void) {
    unsigned old = get_csr();
#if defined(__x86_64__) || defined(__i386__)
    set_csr(old | 0x8040u);
#endif
    return old;
}

void ts_fp_end(unsigned old) { set_csr(old); }

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claim and run chunks of generation gen until none are left. */
static void work(uint64_t gen) {
    for (;;) {
        uint64_t v = __atomic_load_n(&g_word, __ATOMIC_ACQUIRE);
        if ((v >> GEN_SHIFT) != gen) return;
        uint64_t n = (v >> N_SHIFT) & FIELD, i = v & FIELD;
        if (i >= n) return;
        if (!__atomic_compare_exchange_n(&g_word, &v, v + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        /* chunk i of this generation is ours: the region cannot end before
         * we finish it, so g_fn, g_ctx and g_csr are this region's */
        if ((get_csr() ^ g_csr) & ~0x3fu) set_csr(g_csr); /* modes differ (bits 0-5 are sticky flags) */
        g_fn(g_ctx, (int)i, (int)n);
        __atomic_fetch_sub(&g_left, 1, __ATOMIC_ACQ_REL);
    }
}

static __thread int t_slot;
int ts_pool_slot(void) { return t_slot; }

static void *worker(void *arg) {
    t_slot = (int)(intptr_t)arg;
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen;
        int spins = 0;
        while ((gen = __atomic_load_n(&g_word, __ATOMIC_ACQUIRE) >> GEN_SHIFT) == seen) {
            if (++spins < SPIN) { cpu_relax(); continue; }
            pthread_mutex_lock(&g_mu);
            g_sleepers++;
            while ((__atomic_load_n(&g_word, __ATOMIC_ACQUIRE) >> GEN_SHIFT) == seen) pthread_cond_wait(&g_cv, &g_mu);
            g_sleepers--;
            pthread_mutex_unlock(&g_mu);
        }
        seen = gen;
        work(gen);
    }
    return NULL;
}

static void start(void) {
    int n = g_want > 0 ? g_want : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    for (int t = 1; t < n; t++)
        if (pthread_create(&g_th[t], NULL, worker, (void *)(intptr_t)t) != 0) { n = t; break; } /* fewer threads is still correct */
    g_nt = n;
}

void ts_kernels_set_threads(int n) {
    /* Only before the pool starts: changing a running pool would need a join. */
    if (!g_nt) g_want = n;
}

int ts_pool_threads_planned(void) {
    if (g_nt) return g_nt;
    int n = g_want > 0 ? g_want : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

int ts_pool_threads(void) {
    if (!g_nt) start();
    return g_nt;
}

int ts_kernels_threads(void) { return ts_pool_threads(); }

void ts_pool_run(ts_pool_fn fn, void *ctx, int n_chunks) {
    int nt = ts_pool_threads();
    if (nt == 1 || n_chunks <= 1) {
        for (int i = 0; i < n_chunks; i++) fn(ctx, i, n_chunks);
        return;
    }
    if ((uint64_t)n_chunks > FIELD) n_chunks = (int)FIELD; /* callers keep chunk counts small */
    g_fn = fn;
    g_ctx = ctx;
    g_csr = get_csr();
    __atomic_store_n(&g_left, n_chunks, __ATOMIC_RELEASE);
    uint64_t gen = ((__atomic_load_n(&g_word, __ATOMIC_ACQUIRE) >> GEN_SHIFT) + 1) & ((1ull << 24) - 1);
    if (!gen) gen = 1; /* workers start with seen = 0 */
    __atomic_store_n(&g_word, gen << GEN_SHIFT | (uint64_t)n_chunks << N_SHIFT, __ATOMIC_RELEASE);
    pthread_mutex_lock(&g_mu);
    if (g_sleepers) pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    work(gen);
    int spins = 0;
    while (__atomic_load_n(&g_left, __ATOMIC_ACQUIRE) > 0)
        if (++spins < SPIN) cpu_relax();
        else sched_yield();
}
