/* wrap_be.h: the scaffolding of a test backend that wraps an engine's CPU
 * backend (test_poison.c's poisoned addresses, test_graphs.c's graph
 * capture and replay). What both need and neither changes: the backend and
 * stream that hold the inner ones, the step record carried into the inner
 * stream before an op and its error carried back after, the ops that only
 * forward (workspace and weight sizes, weight preparation, enter / leave),
 * a stream's allocation, and the install on an engine. Each wrapper embeds
 * wrap_be / wrap_stream as its struct's first member and fills the ops it
 * changes. */
#ifndef TS_TEST_WRAP_BE_H
#define TS_TEST_WRAP_BE_H

#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

typedef struct wrap_be {
    ts_backend base;
    ts_backend *in;     /* the engine's own backend */
    ts_backend_ops ops; /* the wrapper's ops (base.ops points here) */
} wrap_be;

typedef struct wrap_stream {
    ts_stream base;
    ts_stream *in;
} wrap_stream;

#define WRAP_IN(s) (((wrap_stream *)(s))->in)
#define WRAP_INOPS(s) (WRAP_IN(s)->be->ops)

static inline ts_backend *wrap_inner(ts_backend *be) { return ((wrap_be *)be)->in; }

/* before every op: the step record travels to the inner stream (a graph's
 * launch gives its own); after: the inner stream's error comes back */
static inline ts_stream *wrap_enter_op(ts_stream *s) {
    ts_stream *in = WRAP_IN(s);
    in->step = s->step;
    return in;
}
static inline void wrap_leave_op(ts_stream *s) {
    ts_stream *in = WRAP_IN(s);
    if (in->err && !s->err) {
        s->err = in->err;
        memcpy(s->msg, in->msg, sizeof s->msg);
        in->err = 0;
    }
}

/* A stream of `bytes` (the wrapper's struct, wrap_stream first), zeroed,
 * over an inner stream of the same shape. */
static inline int wrap_stream_new(ts_backend *be, size_t bytes, int rows, int64_t cols, int group, ts_stream **out) {
    ts_backend *in = wrap_inner(be);
    wrap_stream *p = calloc(1, bytes);
    if (!p) return TS_E_NOMEM;
    int rc = in->ops->stream_new(in, rows, cols, group, &p->in);
    if (rc) {
        free(p);
        return rc;
    }
    p->base.be = be;
    *out = &p->base;
    return 0;
}
/* the inner stream (the wrapper frees its own struct after) */
static inline void wrap_stream_free_inner(ts_stream *s) { WRAP_IN(s)->be->ops->stream_free(WRAP_IN(s)); }

static inline size_t wrap_ws(ts_backend *be, int r, int64_t c, int g) {
    return wrap_inner(be)->ops->workspace_bytes(wrap_inner(be), r, c, g);
}
static inline unsigned wrap_enter(ts_stream *s) { return WRAP_INOPS(s)->enter(WRAP_IN(s)); }
static inline void wrap_leave(ts_stream *s, unsigned o) { WRAP_INOPS(s)->leave(WRAP_IN(s), o); }
static inline size_t wrap_wbytes(ts_backend *be, const ts_weight *w) {
    return wrap_inner(be)->ops->weight_bytes(wrap_inner(be), w);
}
static inline void wrap_wprep(ts_backend *be, ts_weight *w, void *dst) {
    wrap_inner(be)->ops->weight_prepare(wrap_inner(be), w, dst);
}
static inline void wrap_destroy(ts_backend *be) {
    ts_backend_free(wrap_inner(be));
    free(be->impl);
}

/* p (allocated by the caller, its ops filled but the forwarding ones) in
 * place of e's backend, on the device domain (the host reads it through
 * host_rows, as a GPU's): sessions created afterwards run on it; the engine
 * frees it, and the inner backend, at close. */
static inline void wrap_install(ts_engine *e, wrap_be *p, const char *name) {
    p->in = e->be;
    p->ops.workspace_bytes = wrap_ws;
    p->ops.enter = wrap_enter;
    p->ops.leave = wrap_leave;
    p->ops.weight_bytes = wrap_wbytes;
    p->ops.weight_prepare = wrap_wprep;
    p->base.ops = &p->ops;
    p->base.name = name;
    p->base.dom = TS_DOM_DEVICE;
    p->base.impl = p;
    p->base.destroy = wrap_destroy;
    e->be = &p->base;
}

#endif
