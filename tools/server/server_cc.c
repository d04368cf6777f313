/* server_cc.c: the server's cache of compiled schema constraints
 * (response_format json_schema, forced tool calls).
 *
 * Owns: a small LRU table of constraints keyed by what built them (the
 * kind, the wrap's literals, the schema text, byte for byte), their
 * reference counts, the hit / miss / build-time counters (/metrics). Does
 * not own: the schema text (server_req.c, server_tools.c build it),
 * applying a constraint (server_gen.c).
 *
 * Why: a constraint walks the tokenizer's index (built once a tokenizer
 * and shared by every constraint over it: gen/constraint.c) and fills its
 * own cache of token masks as generations walk the grammar; a client that
 * sends the same tools or schema with every request (the usual case) then
 * compiles nothing again. A miss builds outside the lock (two threads missing
 * on one key both build; the second to finish takes the first's and frees
 * its own). Entries are reference counted: a job holds its constraint
 * (srv_cc_release when the job is freed) however long it waits, so
 * eviction only drops the table's reference and the last holder frees it.
 *
 * Bounded at SRV_CC_CAP entries. Memory per entry: the compiled schema and
 * the masks it caches (19 KB each at Qwen3's 151,669 ids, at most
 * TS_CONSTRAINT_CACHE_BYTES, allocated as states are met: a tool call
 * meets a few hundred). The index (~16 MB there) is the tokenizer's, once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

struct srv_cc_ent {
    char *key;           /* kind, wrap, schema: see cc_key */
    size_t key_len;
    ts_constraint *c;    /* owned */
    int refs;            /* the table's (while listed) + each holder's; atomic */
    uint64_t tick;       /* last use (under s->cc_mu) */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The key: the kind, the wrap's three literals and repeat flag, the schema,
 * NUL-separated (none of them holds a NUL: C strings and a schema text that
 * json_schema.c refuses \u0000 in). */
static char *cc_key(int kind, const char *schema, size_t len, const ts_constraint_wrap *w, size_t *out_len) {
    const char *pre = w && w->prefix ? w->prefix : "", *suf = w && w->suffix ? w->suffix : "",
               *sep = w && w->sep ? w->sep : "";
    const size_t n = 8 + strlen(pre) + strlen(suf) + strlen(sep) + len;
    char *k = malloc(n + 1);
    if (!k) return NULL;
    int o = snprintf(k, n + 1, "%d%c%d%c%s%c%s%c%s%c", kind, 0, w ? w->repeat : -1, 0, pre, 0, suf, 0, sep, 0);
    memcpy(k + o, schema, len);
    *out_len = (size_t)o + len;
    return k;
}

static int cc_nomem(ts_error *err) {
    err->code = TS_E_NOMEM;
    snprintf(err->msg, sizeof err->msg, "out of memory for a compiled constraint");
    return TS_E_NOMEM;
}

static void ent_free(srv_cc_ent *e) {
    ts_constraint_free(e->c);
    free(e->key);
    free(e);
}

void srv_cc_release(srv_cc_ent *e) {
    if (e && __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0) ent_free(e);
}

const ts_constraint *srv_cc_constraint(const srv_cc_ent *e) { return e ? e->c : NULL; }

/* The listed entry of key k, or -1 (under cc_mu). */
static int cc_find(const srv *s, const char *k, size_t n) {
    for (int i = 0; i < s->cc_n; i++)
        if (s->cc[i]->key_len == n && !memcmp(s->cc[i]->key, k, n)) return i;
    return -1;
}

/* e, listed and held (under cc_mu). */
static srv_cc_ent *cc_take(srv *s, int i) {
    srv_cc_ent *e = s->cc[i];
    e->tick = ++s->cc_tick;
    __atomic_add_fetch(&e->refs, 1, __ATOMIC_ACQ_REL);
    return e;
}

int srv_cc_get(srv *s, int kind, const char *schema, size_t len, const ts_constraint_wrap *w, srv_cc_ent **out,
               ts_error *err) {
    *out = NULL;
    size_t kn = 0;
    char *k = cc_key(kind, schema, len, w, &kn);
    if (!k) return cc_nomem(err);
    pthread_mutex_lock(&s->cc_mu);
    int i = cc_find(s, k, kn);
    if (i >= 0) {
        *out = cc_take(s, i);
        s->cc_hits++;
        pthread_mutex_unlock(&s->cc_mu);
        free(k);
        if (s->verbose) fprintf(stderr, "turbospark serve: constraint cache hit (%s, %zu bytes of schema)\n",
                                w ? "tool call" : "json_schema", len);
        return 0;
    }
    s->cc_misses++;
    pthread_mutex_unlock(&s->cc_mu);

    const double t0 = now_s();
    ts_constraint *c = NULL;
    int rc = w ? ts_constraint_json_schema_wrap(s->tok, schema, len, w, &c, err)
               : ts_constraint_json_schema(s->tok, schema, len, &c, err);
    const double dt = now_s() - t0;
    srv_cc_ent *e = rc ? NULL : calloc(1, sizeof *e);
    if (!rc && !e) {
        ts_constraint_free(c);
        rc = cc_nomem(err);
    }
    if (rc) { /* failures are not cached: a bad schema is refused in microseconds, before any indexing */
        free(k);
        return rc;
    }
    e->key = k, e->key_len = kn, e->c = c, e->refs = 1; /* the holder's */
    pthread_mutex_lock(&s->cc_mu);
    s->cc_build_s += dt;
    if ((i = cc_find(s, k, kn)) >= 0) { /* another thread built it meanwhile: theirs */
        *out = cc_take(s, i);
        pthread_mutex_unlock(&s->cc_mu);
        ent_free(e);
        return 0;
    }
    if (s->cc_n == SRV_CC_CAP) { /* out goes the least recently used (its holders keep it alive) */
        int lru = 0;
        for (int j = 1; j < s->cc_n; j++)
            if (s->cc[j]->tick < s->cc[lru]->tick) lru = j;
        srv_cc_release(s->cc[lru]);
        s->cc[lru] = s->cc[--s->cc_n];
    }
    e->refs++; /* the table's */
    e->tick = ++s->cc_tick;
    s->cc[s->cc_n++] = e;
    pthread_mutex_unlock(&s->cc_mu);
    *out = e;
    if (s->verbose) fprintf(stderr, "turbospark serve: constraint cache miss (%s, %zu bytes of schema): built in %.1f ms\n",
                            w ? "tool call" : "json_schema", len, dt * 1e3);
    return 0;
}

void srv_cc_init(srv *s) { pthread_mutex_init(&s->cc_mu, NULL); }

void srv_cc_free(srv *s) {
    pthread_mutex_lock(&s->cc_mu);
    for (int i = 0; i < s->cc_n; i++) srv_cc_release(s->cc[i]);
    s->cc_n = 0;
    pthread_mutex_unlock(&s->cc_mu);
    pthread_mutex_destroy(&s->cc_mu);
}
