/* threads.c: the kernel thread pools and the thread's kernel context.
 *
 * Owns: ts_pool, n-1 worker threads (the caller is thread 0), started on
 * first use and joined by ts_pool_free. Each engine's CPU backend owns one
 * pool (cpu/backend.c), so two engines of one process run on thread counts
 * of their own; direct kernel calls outside any engine (the kernel tests)
 * use a default pool made on first use. The sessions of one engine share
 * its pool: a region is one at a time per pool (the pool's mutex), while
 * products small enough for the caller alone never take it. A parallel region is a set of
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
 * Kernel mode: the calling thread's (ts_kmode: the backend sets it on entry,
 * ts_cpu_enter), and a region's chunks run under the caller's mode on every
 * worker, like the MXCSR.
 * Invariant: one region at a time per pool (pool->run_mu).
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu/cpu.h"

#define MAX_THREADS 64
#define SPIN 20000
#define GEN_SHIFT 40
#define N_SHIFT 20
#define FIELD ((1ull << 20) - 1)

typedef struct worker_arg {
    struct ts_pool *p;
    int slot;
} worker_arg;

/* Control blocks (this struct, the backend's, a stream's) come from calloc:
 * a few hundred bytes, like the threads' stacks, outside the memory plan,
 * which counts buffers. */
struct ts_pool {
    int want, nt;
    worker_arg args[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    pthread_mutex_t mu;      /* sleepers, quit */
    pthread_cond_t cv;
    pthread_mutex_t run_mu;  /* one region at a time (sessions of one engine share the pool) */
    ts_pool_fn fn;
    void *ctx;
    uint64_t word;           /* gen << 40 | n_chunks << 20 | next chunk (atomic) */
    int left;                /* chunks not yet finished (atomic) */
    int sleepers;            /* under mu */
    int quit;                /* under mu: ts_pool_free */
    unsigned csr;            /* the caller's MXCSR for the current region */
    int kmode;               /* the caller's kernel mode for the current region */
};

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

/* ---- the thread's kernel mode ----
 * -1: none set; ts_kmode then gives the process default (linear.c). */
static __thread int t_kmode = -1;
int ts_kmode_thread(void) { return t_kmode; }
int ts_kmode_swap(int mode) {
    int old = t_kmode;
    t_kmode = mode;
    return old;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Claim and run chunks of generation gen until none are left. */
static void work(ts_pool *p, uint64_t gen) {
    for (;;) {
        uint64_t v = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE);
        if ((v >> GEN_SHIFT) != gen) return;
        uint64_t n = (v >> N_SHIFT) & FIELD, i = v & FIELD;
        if (i >= n) return;
        if (!__atomic_compare_exchange_n(&p->word, &v, v + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        /* chunk i of this generation is ours: the region cannot end before
         * we finish it, so fn, ctx, csr and kmode are this region's */
        if ((get_csr() ^ p->csr) & ~0x3fu) set_csr(p->csr); /* modes differ (bits 0-5 are sticky flags) */
        t_kmode = p->kmode;
        p->fn(p->ctx, (int)i, (int)n);
        __atomic_fetch_sub(&p->left, 1, __ATOMIC_ACQ_REL);
    }
}

static __thread int t_slot;
int ts_pool_slot(void) { return t_slot; }


static void *worker(void *arg) {
    ts_pool *p = ((worker_arg *)arg)->p;
    t_slot = ((worker_arg *)arg)->slot;
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen;
        int spins = 0;
        while ((gen = __atomic_load_n(&p->word, __ATOMIC_ACQUIRE) >> GEN_SHIFT) == seen) {
            if (++spins < SPIN) { cpu_relax(); continue; }
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while ((__atomic_load_n(&p->word, __ATOMIC_ACQUIRE) >> GEN_SHIFT) == seen && !p->quit)
                pthread_cond_wait(&p->cv, &p->mu);
            p->sleepers--;
            int quit = p->quit;
            pthread_mutex_unlock(&p->mu);
            if (quit) return NULL;
        }
        seen = gen;
        work(p, gen);
    }
    return NULL;
}

static int planned(int want) {
    int n = want > 0 ? want : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

ts_pool *ts_pool_new(int n_threads) {
    ts_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->want = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_mutex_init(&p->run_mu, NULL);
    return p;
}

static void start(ts_pool *p) {
    int n = planned(p->want);
    for (int t = 1; t < n; t++) {
        worker_arg *a = &p->args[t];
        a->p = p;
        a->slot = t;
        if (pthread_create(&p->th[t], NULL, worker, a) != 0) { n = t; break; } /* fewer threads is still correct */
    }
    __atomic_store_n(&p->nt, n, __ATOMIC_RELEASE); /* read without the lock by ts_pool_threads */
}

void ts_pool_free(ts_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    /* a spinning worker sees quit once it sleeps: wake it by a new
     * generation with no chunks, which it claims nothing of */
    uint64_t gen = ((__atomic_load_n(&p->word, __ATOMIC_ACQUIRE) >> GEN_SHIFT) + 1) & ((1ull << 24) - 1);
    __atomic_store_n(&p->word, (gen ? gen : 1) << GEN_SHIFT, __ATOMIC_RELEASE);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->nt; t++) pthread_join(p->th[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->run_mu);
    free(p);
}

int ts_pool_threads_planned(const ts_pool *p) {
    int nt = __atomic_load_n(&p->nt, __ATOMIC_ACQUIRE);
    return nt ? nt : planned(p->want);
}

int ts_pool_threads(ts_pool *p) {
    int nt = __atomic_load_n(&p->nt, __ATOMIC_ACQUIRE);
    if (!nt) { /* first use: start the workers once (sessions of one engine may race here) */
        pthread_mutex_lock(&p->run_mu);
        if (!p->nt) start(p);
        nt = p->nt;
        pthread_mutex_unlock(&p->run_mu);
    }
    return nt;
}

/* The pool for kernel calls made outside any engine (tests, tools). */
static ts_pool *g_default;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;
static void make_default(void) { g_default = ts_pool_new(0); }
ts_pool *ts_pool_default(void) {
    pthread_once(&g_default_once, make_default);
    return g_default;
}

void ts_pool_run(ts_pool *p, ts_pool_fn fn, void *ctx, int n_chunks) {
    int nt = ts_pool_threads(p);
    if (nt == 1 || n_chunks <= 1) {
        for (int i = 0; i < n_chunks; i++) fn(ctx, i, n_chunks);
        return;
    }
    if ((uint64_t)n_chunks > FIELD) n_chunks = (int)FIELD; /* callers keep chunk counts small */
    pthread_mutex_lock(&p->run_mu);
    p->fn = fn;
    p->ctx = ctx;
    p->csr = get_csr();
    p->kmode = t_kmode;
    __atomic_store_n(&p->left, n_chunks, __ATOMIC_RELEASE);
    uint64_t gen = ((__atomic_load_n(&p->word, __ATOMIC_ACQUIRE) >> GEN_SHIFT) + 1) & ((1ull << 24) - 1);
    if (!gen) gen = 1; /* workers start with seen = 0 */
    __atomic_store_n(&p->word, gen << GEN_SHIFT | (uint64_t)n_chunks << N_SHIFT, __ATOMIC_RELEASE);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers) pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    work(p, gen);
    int spins = 0;
    while (__atomic_load_n(&p->left, __ATOMIC_ACQUIRE) > 0)
        if (++spins < SPIN) cpu_relax();
        else sched_yield();
    pthread_mutex_unlock(&p->run_mu);
}
