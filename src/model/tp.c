/* tp.c: the ranks of tensor parallelism in one process (tp.h says why the
 * design is N narrower models).
 *
 * Owns: the host collective, the rank threads, the session-buffer
 * translation.
 * Threads: ts_tp_run hands one job to the ranks' threads (rank 0 runs it on
 * the caller's) and waits for all; a job is a whole pass (or a copy), so the
 * threads meet once a pass plus the collectives inside it.
 */
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/tp.h"

/* ---- the host collective ---- */

/* A barrier that can be aborted (pthread's cannot): the watchdog of a pass
 * (ts_tp_run) aborts it when a rank has not arrived in time, and every
 * collective after that fails at once. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, count, aborted;
    unsigned gen;
} tbar;

static int tbar_init(tbar *b, int n) {
    memset(b, 0, sizeof *b);
    b->n = n;
    if (pthread_mutex_init(&b->mu, NULL)) return -1;
    if (pthread_cond_init(&b->cv, NULL)) { pthread_mutex_destroy(&b->mu); return -1; }
    return 0;
}
static void tbar_destroy(tbar *b) {
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
}
/* 0 when every rank arrived, -1 when aborted */
static int tbar_wait(tbar *b) {
    pthread_mutex_lock(&b->mu);
    int ok = !b->aborted;
    if (ok) {
        const unsigned g = b->gen;
        if (++b->count == b->n) {
            b->count = 0;
            b->gen++;
            pthread_cond_broadcast(&b->cv);
        } else {
            while (b->gen == g && !b->aborted) pthread_cond_wait(&b->cv, &b->mu);
            ok = b->gen != g;
        }
    }
    pthread_mutex_unlock(&b->mu);
    return ok ? 0 : -1;
}
static void tbar_abort(tbar *b) {
    pthread_mutex_lock(&b->mu);
    b->aborted = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void stopped(ts_stream *s) {
    ts_be_fail(s, TS_E_IO, "tensor parallelism: the ranks did not all reach a collective in time (TS_TP_TIMEOUT_S): "
                           "a rank is stuck or has failed; this engine's ranks are stopped");
}

typedef struct {
    float *buf;
    size_t cap; /* floats */
} hslot;

typedef struct {
    int n;
    tbar bar;
    hslot s[TS_TP_MAX];
    float *tmp[TS_TP_MAX];
    size_t tcap[TS_TP_MAX];
    int fail[TS_TP_MAX];
} hostcomm;

static int grow(float **p, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    float *q = ts_alloc(n * sizeof(float), TS_MEM_SCRATCH);
    if (!q) return TS_E_NOMEM;
    ts_free(*p);
    *p = q;
    *cap = n;
    return 0;
}

/* After the first barrier: whether any rank failed to stage its part (then
 * every rank skips the data and marks its stream). */
static int any_fail(hostcomm *h, ts_stream *s) {
    for (int q = 0; q < h->n; q++)
        if (h->fail[q]) {
            ts_be_fail(s, TS_E_NOMEM, "tensor parallelism: out of host memory for a collective");
            return 1;
        }
    return 0;
}

static void host_allreduce(ts_comm *c, int rank, ts_stream *s, float *x, size_t count) {
    hostcomm *h = c->impl;
    hslot *me = &h->s[rank];
    h->fail[rank] = grow(&me->buf, &me->cap, count) || grow(&h->tmp[rank], &h->tcap[rank], count);
    if (!h->fail[rank]) ts_be_read(s, me->buf, x, count);
    if (tbar_wait(&h->bar)) { stopped(s); return; }
    if (!any_fail(h, s)) {
        /* one order for every rank and every element: rank 0 + 1 + ... */
        float *t = h->tmp[rank];
        memcpy(t, h->s[0].buf, count * sizeof(float));
        for (int q = 1; q < h->n; q++) {
            const float *p = h->s[q].buf;
            for (size_t i = 0; i < count; i++) t[i] += p[i];
        }
        s->be->ops->write(s, tv_f32(x, 1, (int64_t)count), t); /* (a write has read t when it returns) */
    }
    if (tbar_wait(&h->bar)) stopped(s); /* no rank restages before all have summed */
}

static void host_gather_cols(ts_comm *c, int rank, ts_stream *s, const float *src, int64_t rows, const int64_t *lo,
                             const int64_t *cols, float *dst, int64_t ld_dst) {
    hostcomm *h = c->impl;
    hslot *me = &h->s[rank];
    const int64_t nc = cols[rank];
    h->fail[rank] = grow(&me->buf, &me->cap, (size_t)(rows * nc));
    if (!h->fail[rank] && rows * nc > 0) ts_be_read(s, me->buf, src, (size_t)(rows * nc));
    if (tbar_wait(&h->bar)) { stopped(s); return; }
    if (!any_fail(h, s) && rank == 0) {
        for (int q = 0; q < h->n; q++) {
            if (rows * cols[q] <= 0) continue;
            s->be->ops->write(s, (ts_view){dst + lo[q], TS_DTYPE_F32, rows, cols[q], ld_dst}, h->s[q].buf);
        }
    }
    if (tbar_wait(&h->bar)) stopped(s);
}

static void host_abort(ts_comm *c) { tbar_abort(&((hostcomm *)c->impl)->bar); }

static void host_destroy(ts_comm *c) {
    if (!c) return;
    hostcomm *h = c->impl;
    if (h) {
        tbar_destroy(&h->bar);
        for (int q = 0; q < h->n; q++) { ts_free(h->s[q].buf); ts_free(h->tmp[q]); }
        ts_free(h);
    }
    ts_free(c);
}

ts_comm *ts_comm_host_new(int n) {
    if (n < 1 || n > TS_TP_MAX) return NULL;
    ts_comm *c = ts_alloc(sizeof *c, TS_MEM_MISC);
    hostcomm *h = ts_alloc(sizeof *h, TS_MEM_MISC);
    if (!c || !h || tbar_init(&h->bar, n)) {
        ts_free(c);
        ts_free(h);
        return NULL;
    }
    h->n = n;
    c->n = n;
    c->name = "host";
    c->capturable = 0;
    c->allreduce = host_allreduce;
    c->gather_cols = host_gather_cols;
    c->reserve = NULL;
    c->abort = host_abort;
    c->destroy = host_destroy;
    c->impl = h;
    return c;
}

/* ---- ranks and their threads ---- */

typedef struct { struct ts_tp *tp; int rank; } tp_thread; /* a rank thread's argument */

struct ts_tp {
    int n;
    ts_comm *comm;
    const ts_model *m[TS_TP_MAX];
    pthread_t th[TS_TP_MAX];
    tp_thread targ[TS_TP_MAX];
    int started;             /* threads running (ranks 1..started) */
    pthread_mutex_t run_mu;  /* one job at a time: sessions of an engine share the ranks */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned gen;            /* job generation: a thread runs each once */
    int pending, quit;
    ts_tp_fn fn;
    void *arg;
    int rc[TS_TP_MAX];
    /* the watchdog: a pass running longer than timeout_s aborts the
     * collectives (a rank stuck in one would otherwise hold the others
     * forever) */
    pthread_t dog;
    pthread_cond_t dog_cv;   /* on CLOCK_MONOTONIC: the watchdog sleeps on it, to a pass's deadline or until one starts */
    int dog_started, running, aborted;
    double timeout_s, started_at;
    int stall_rank;          /* tests: TS_TP_TEST_STALL=rank:seconds, that rank sleeps before its passes */
    double stall_s;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *watchdog(void *p) {
    ts_tp *tp = p;
    pthread_mutex_lock(&tp->mu);
    while (!tp->quit) {
        if (!tp->running || tp->aborted || !tp->comm || !tp->comm->abort) { /* idle until a pass starts */
            pthread_cond_wait(&tp->dog_cv, &tp->mu);
            continue;
        }
        const double due = tp->started_at + tp->timeout_s;
        if (now_s() < due) {
            struct timespec t = {(time_t)due, (long)((due - (double)(time_t)due) * 1e9)};
            pthread_cond_timedwait(&tp->dog_cv, &tp->mu, &t);
            continue;
        }
        tp->aborted = 1;
        ts_comm *c = tp->comm;
        pthread_mutex_unlock(&tp->mu);
        fprintf(stderr, "turbospark: tensor parallelism: a pass has run %.0f s (TS_TP_TIMEOUT_S): stopping the "
                        "collectives\n", tp->timeout_s);
        c->abort(c);
        pthread_mutex_lock(&tp->mu);
    }
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}

static void *rank_main(void *p) {
    const tp_thread *a = p;
    ts_tp *tp = a->tp;
    const int rank = a->rank;
    unsigned seen = 0;
    pthread_mutex_lock(&tp->mu);
    for (;;) {
        while (!tp->quit && tp->gen == seen) pthread_cond_wait(&tp->go, &tp->mu);
        if (tp->quit) break;
        seen = tp->gen;
        ts_tp_fn fn = tp->fn;
        void *arg = tp->arg;
        pthread_mutex_unlock(&tp->mu);
        if (rank == tp->stall_rank && tp->stall_s > 0) { /* tests: a rank late for its pass */
            struct timespec d = {(time_t)tp->stall_s, (long)((tp->stall_s - (double)(time_t)tp->stall_s) * 1e9)};
            nanosleep(&d, NULL);
        }
        const int rc = fn(arg, rank);
        pthread_mutex_lock(&tp->mu);
        tp->rc[rank] = rc;
        if (--tp->pending == 0) pthread_cond_signal(&tp->done);
    }
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}

ts_tp *ts_tp_new(int n, ts_comm *comm) {
    if (n < 1 || n > TS_TP_MAX || (comm && comm->n != n)) return NULL;
    ts_tp *tp = ts_alloc(sizeof *tp, TS_MEM_MISC);
    if (!tp) return NULL;
    tp->n = n;
    tp->comm = comm;
    const char *to = getenv("TS_TP_TIMEOUT_S"), *st = getenv("TS_TP_TEST_STALL");
    tp->timeout_s = to && atof(to) > 0 ? atof(to) : 300;
    tp->stall_rank = -1;
    if (st && *st) {
        int r = -1;
        double sec = 0;
        if (sscanf(st, "%d:%lf", &r, &sec) == 2) tp->stall_rank = r, tp->stall_s = sec;
    }
    pthread_mutex_init(&tp->run_mu, NULL);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->go, NULL);
    pthread_cond_init(&tp->done, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* now_s's clock: deadlines immune to clock changes */
    pthread_cond_init(&tp->dog_cv, &ca);
    pthread_condattr_destroy(&ca);
    for (int r = 1; r < tp->n; r++) {
        tp->targ[r] = (tp_thread){tp, r};
        if (pthread_create(&tp->th[r], NULL, rank_main, &tp->targ[r])) break;
        tp->started = r;
    }
    if (tp->started == TS_MAX(tp->n - 1, 0) && !pthread_create(&tp->dog, NULL, watchdog, tp)) tp->dog_started = 1;
    if (tp->started != TS_MAX(tp->n - 1, 0) || !tp->dog_started) {
        ts_tp_free(tp);
        return NULL;
    }
    return tp;
}

void ts_tp_free(ts_tp *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->quit = 1;
    pthread_cond_broadcast(&tp->go);
    pthread_cond_broadcast(&tp->dog_cv);
    pthread_mutex_unlock(&tp->mu);
    for (int r = 1; r <= tp->started; r++) pthread_join(tp->th[r], NULL);
    if (tp->dog_started) pthread_join(tp->dog, NULL);
    pthread_mutex_destroy(&tp->run_mu);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->go);
    pthread_cond_destroy(&tp->done);
    pthread_cond_destroy(&tp->dog_cv);
    if (tp->comm) tp->comm->destroy(tp->comm);
    ts_free(tp);
}

int ts_tp_n(const ts_tp *tp) { return tp->n; }
ts_comm *ts_tp_comm(const ts_tp *tp) { return tp->comm; }
void ts_tp_set_comm(ts_tp *tp, ts_comm *comm) {
    if (tp->comm) tp->comm->destroy(tp->comm);
    tp->comm = comm;
}
void ts_tp_set_model(ts_tp *tp, int r, const ts_model *m) { tp->m[r] = m; }
const ts_model *ts_tp_model(const ts_tp *tp, int r) { return tp->m[r]; }

int ts_tp_run(ts_tp *tp, ts_tp_fn fn, void *arg) {
    pthread_mutex_lock(&tp->run_mu);
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->arg = arg;
    tp->pending = tp->n - 1;
    tp->gen++;
    tp->running = 1;
    tp->started_at = now_s();
    pthread_cond_broadcast(&tp->go);
    pthread_cond_signal(&tp->dog_cv);
    pthread_mutex_unlock(&tp->mu);
    int rc = fn(arg, 0);
    pthread_mutex_lock(&tp->mu);
    while (tp->pending) pthread_cond_wait(&tp->done, &tp->mu);
    tp->running = 0;
    for (int r = 1; r < tp->n && !rc; r++) rc = tp->rc[r];
    pthread_mutex_unlock(&tp->mu);
    pthread_mutex_unlock(&tp->run_mu);
    return rc;
}

/* ---- sessions across ranks ---- */

void ts_state_register(ts_state *st, void *p, size_t bytes) {
    if (!p || st->n_xb < 0) return;
    if (st->n_xb == st->cap_xb) {
        int cap = st->cap_xb ? 2 * st->cap_xb : 64;
        ts_xbuf *x = ts_alloc(sizeof *x * (size_t)cap, TS_MEM_MISC);
        if (!x) { st->n_xb = -1; return; } /* session creation then refuses the ranks (session.c) */
        if (st->xb) memcpy(x, st->xb, sizeof *x * (size_t)st->n_xb);
        ts_free(st->xb);
        st->xb = x;
        st->cap_xb = cap;
    }
    st->xb[st->n_xb++] = (ts_xbuf){p, bytes};
}

void *ts_tp_xlate(const ts_state *st0, const ts_state *str, const void *p) {
    if (!p || st0 == str) return (void *)p;
    const char *c = p;
    for (int i = 0; i < st0->n_xb && i < str->n_xb; i++) {
        const char *b = st0->xb[i].p;
        if (c >= b && c < b + st0->xb[i].bytes) return (char *)str->xb[i].p + (c - b);
    }
    return (void *)p;
}

void ts_tp_sync_control(ts_state *st0) {
    for (int r = 1; r < TS_TP_MAX; r++) {
        ts_state *o = st0->tp_peer[r];
        if (!o) continue;
        o->tape_on = st0->tape_on;
        o->gdn_pend = st0->gdn_pend;
        o->tape_half = st0->tape_half;
        o->par_S = st0->par_S;
        o->par_conv = st0->par_conv;
        o->logits_host = st0->logits_host; /* the head's branch (rank 0 alone writes the rows) */
    }
}

typedef struct {
    const ts_model *m;
    ts_state *st;
    float *dst;
    const float *src;
    size_t n;
    float v;
    int fill;
} cjob;

static int cjob_run(void *a, int rank) {
    cjob *j = a;
    ts_state *st = rank ? j->st->tp_peer[rank] : j->st;
    float *dst = ts_tp_xlate(j->st, st, j->dst);
    ts_stream *s = st->s;
    unsigned o = rank ? s->be->ops->enter(s) : 0;
    if (j->fill) ts_be_fill(s, dst, j->n, j->v);
    else ts_be_copy(s, dst, ts_tp_xlate(j->st, st, j->src), j->n);
    int rc = rank ? ts_be_sync(s, NULL) : 0;
    if (rank) s->be->ops->leave(s, o);
    return rc;
}

void ts_state_copy(const ts_model *m, ts_state *st, float *dst, const float *src, size_t n) {
    if (!m->tp || m->tp_rank) { ts_be_copy(st->s, dst, src, n); return; }
    cjob j = {m, st, dst, src, n, 0, 0};
    int rc = ts_tp_run(m->tp, cjob_run, &j);
    if (rc) ts_be_fail(st->s, rc, "tensor parallelism: a copy on another rank failed");
}

void ts_state_fill(const ts_model *m, ts_state *st, float *dst, size_t n, float v) {
    if (!m->tp || m->tp_rank) { ts_be_fill(st->s, dst, n, v); return; }
    cjob j = {m, st, dst, NULL, n, v, 1};
    int rc = ts_tp_run(m->tp, cjob_run, &j);
    if (rc) ts_be_fail(st->s, rc, "tensor parallelism: a fill on another rank failed");
}
