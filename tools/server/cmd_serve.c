/* cmd_serve.c: `turbospark serve`: an OpenAI-compatible HTTP server.
 *
 *   turbospark serve [-m DIR] [--host 127.0.0.1] [--port 8080]
 *                    [--parallel N] [--queue N] [--max-tokens-limit N]
 *                    [--api-key KEY] [--max-idle N] [--drain-timeout S] [-v]
 *                    [engine options: cli.h, cli_engine]
 *
 * Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
 * GET /v1/models/{id}, GET /health, GET /metrics (Prometheus text),
 * POST /tokenize, POST /detokenize (vLLM's utility routes).
 *
 * Owns: options, startup and orderly shutdown (SIGINT/SIGTERM: the drain),
 * the HTTP layer on libmicrohttpd (one thread per connection): admission
 * from the headers (an overloaded server answers 503 + Retry-After without
 * parsing the body), body accumulation with a size limit, auth, routing,
 * OpenAI-style errors, streaming responses (server-sent events), disconnect
 * detection, the idle-connection limit, metrics.
 * Does not own: request validation (server_req.c), the session pool and the
 * token loop (server_gen.c).
 *
 * Disconnects: a connection thread waiting on its job (the whole reply, or
 * the next SSE chunk) wakes every 50 ms and peeks at its socket; a closed
 * peer cancels the job, which stops at its next token. A job still queued is
 * dropped when a worker reaches it. A streamed job's response (its 200 and
 * headers) starts only once a worker runs it.
 *
 * Errors never take the server down: every bad request ends in a JSON error
 * ({"error": {"message", "type", "param", "code"}}) on its own connection.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server.h"

enum { R_NONE, R_CHAT, R_COMPLETIONS, R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_TOKENIZE, R_DETOKENIZE, R_TOKINFO };

typedef struct conn {
    srv *s;
    int fd;
    char *body;
    size_t len, cap;
    int too_big, responded;
    int route;          /* from the headers */
    int admitted;       /* holds a queue reservation (srv_admit) not yet spent */
    int refused;        /* refused at the headers: the body is read and dropped, then 503 */
    job *j;
} conn;

static time_t g_started;

/* ---- idle connections ---------------------------------------------------------------
 *
 * A connection is "serving" from the moment its request is complete (the
 * final handler call) until the response is done; before that (no request
 * yet, headers or a body still arriving) and between keep-alive requests it
 * is idle. At most --max-idle connections may be idle: when a new
 * connection would exceed it, the one idle longest is shut down
 * (shutdown(2) on its socket: its own thread then sees the end and closes
 * it, so the fd stays MHD's). A serving connection is never chosen, so idle
 * or slow clients, however many, cannot lock out clients being served, and
 * a new client is never refused for them. libmicrohttpd's own limit is set
 * above max_idle + the queue + the sessions, so it is not what refuses.
 *
 * Safety: entries live under g_idle.mu; MHD reports a connection closed
 * (NOTIFY_CLOSED, which removes the entry) before it closes the socket, so
 * an fd in the list is always the connection's own. */
typedef struct cnode {
    struct cnode *prev, *next;
    int fd, serving;
} cnode;

static struct {
    pthread_mutex_t mu;
    cnode head; /* sentinel: head.next is the oldest idle (or serving) entry */
    int n_idle, max_idle;
    uint64_t evicted;
} g_idle = {PTHREAD_MUTEX_INITIALIZER, {NULL, NULL, -1, 0}, 0, 256, 0};

static void cn_unlink(cnode *n) {
    n->prev->next = n->next;
    n->next->prev = n->prev;
}

static void cn_append(cnode *n) { /* newest at the tail */
    n->prev = g_idle.head.prev;
    n->next = &g_idle.head;
    g_idle.head.prev->next = n;
    g_idle.head.prev = n;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code) {
    (void)cls;
    pthread_mutex_lock(&g_idle.mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        cnode *n = calloc(1, sizeof *n);
        if (n) {
            const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
            n->fd = ci ? ci->connect_fd : -1;
            cn_append(n);
            g_idle.n_idle++;
            /* over the limit: the oldest idle connection goes */
            for (cnode *o = g_idle.head.next; g_idle.n_idle > g_idle.max_idle && o != &g_idle.head; o = o->next)
                if (!o->serving && o != n && o->fd >= 0) {
                    shutdown(o->fd, SHUT_RDWR);
                    o->fd = -1; /* once */
                    o->serving = 1; /* no longer counted as idle: it is closing */
                    g_idle.n_idle--;
                    g_idle.evicted++;
                    break;
                }
        }
        *socket_ctx = n;
    } else if (*socket_ctx) {
        cnode *n = *socket_ctx;
        if (!n->serving) g_idle.n_idle--;
        cn_unlink(n);
        free(n);
        *socket_ctx = NULL;
    }
    pthread_mutex_unlock(&g_idle.mu);
}

static cnode *conn_node(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The request is complete: this connection is serving until its response ends. */
static void conn_serving(struct MHD_Connection *c) {
    cnode *n = conn_node(c);
    if (!n) return;
    pthread_mutex_lock(&g_idle.mu);
    if (!n->serving) {
        n->serving = 1;
        g_idle.n_idle--;
    }
    pthread_mutex_unlock(&g_idle.mu);
}

/* The response is done: idle again, and the newest idle (keep-alive). */
static void conn_idle(struct MHD_Connection *c) {
    cnode *n = conn_node(c);
    if (!n) return;
    pthread_mutex_lock(&g_idle.mu);
    if (n->serving && n->fd >= 0) {
        n->serving = 0;
        g_idle.n_idle++;
        cn_unlink(n);
        cn_append(n);
    }
    pthread_mutex_unlock(&g_idle.mu);
}

#define SERVE_OPTS (CLI_OPT_ALL)

static void usage(FILE *f) {
    fprintf(f,
            "usage: turbospark serve [-m DIR] [options]\n"
            "  --host H               address to listen on (default 127.0.0.1)\n"
            "  --port P               port (default 8080; 0 picks a free one)\n"
            "  --parallel N           sessions, i.e. requests generated at once (default 1)\n"
            "  --queue N              requests that may wait for a session (default 16); beyond: 503\n"
            "  --max-tokens-limit N   largest max_tokens a request may ask for (default: the context)\n"
            "  --api-key KEY          require 'Authorization: Bearer KEY' on /v1/\n"
            "  --max-idle N           connections that may sit idle (no complete request; default 256);\n"
            "                         beyond, the one idle longest is closed (never one being served)\n"
            "  --drain-timeout S      on SIGTERM/SIGINT: queued requests get 503 at once, running ones\n"
            "                         may finish for S seconds (default 10), then end with an error\n"
            "  -v                     log every request on stderr\n"
            "engine options (per session; with --spec mtp every generation drafts with the MTP head,\n"
            "with --spec ngram by lookup in the request's ids, as in run: output unchanged, sampled\n"
            "requests keep their distribution):\n");
    cli_engine_help(f, SERVE_OPTS);
}

/* ---- responses ----------------------------------------------------------------- */

/* Retry-After on a 503: the seconds a refused client should wait. One
 * second: a queued request of the bundled model takes well under that,
 * and clients (the openai packages among them) honour the header. */
#define SRV_RETRY_AFTER "1"
#define SRV_REFUSE_PAUSE_MS 50
/* Connections beyond --max-idle, the queue and the sessions that may be
 * open at once: refusals waiting out their pause, GETs. libmicrohttpd's
 * limit is the sum, so idle connections alone never reach it. */
#define SRV_CONN_SLACK 1024

static enum MHD_Result send_body(struct MHD_Connection *c, int status, const char *type, const char *body,
                                 size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, SRV_RETRY_AFTER);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, cJSON *obj) {
    char *p = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!p) return MHD_NO;
    enum MHD_Result ok = send_body(c, status, "application/json", p, strlen(p));
    free(p);
    return ok;
}

static enum MHD_Result send_err(conn *cc, struct MHD_Connection *c, const srv_err *e) {
    srv *s = cc->s;
    pthread_mutex_lock(&s->mu);
    s->m_errors++;
    pthread_mutex_unlock(&s->mu);
    cc->responded = 1;
    cJSON *o = cJSON_CreateObject(), *eo = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(eo, "message", e->msg);
    cJSON_AddStringToObject(eo, "type", e->type ? e->type : "invalid_request_error");
    if (e->param) cJSON_AddStringToObject(eo, "param", e->param);
    else cJSON_AddNullToObject(eo, "param");
    if (e->code) cJSON_AddStringToObject(eo, "code", e->code);
    else cJSON_AddNullToObject(eo, "code");
    return send_json(c, e->status, o);
}

static enum MHD_Result send_error(conn *cc, struct MHD_Connection *c, int status, const char *code,
                                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error(conn *cc, struct MHD_Connection *c, int status, const char *code,
                                  const char *fmt, ...) {
    srv_err e = {status, status >= 500 ? "server_error" : "invalid_request_error", NULL, code, {0}, {0}};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    return send_err(cc, c, &e);
}

/* ---- disconnects ------------------------------------------------------------------ */

/* 1 when the client has closed its side (or the socket failed). */
static int peer_gone(int fd) {
    if (fd < 0) return 0;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return 1;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0;
}

static void wait_tick(job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* The SSE body: hands out the job's bytes as the worker produces them. */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    conn *cc = cls;
    job *j = cc->j;
    (void)pos;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out.len > j->sent) {
            size_t n = j->out.len - j->sent;
            if (n > max) n = max;
            memcpy(buf, j->out.s + j->sent, n);
            j->sent += n;
            if (j->sent == j->out.len) j->sent = j->out.len = 0;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->state == JOB_DONE) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        wait_tick(j);
        if (peer_gone(cc->fd)) {
            __atomic_store_n(&j->cancelled, 1, __ATOMIC_RELAXED); /* the worker reads it unlocked, atomically */
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* ---- routes --------------------------------------------------------------------------- */

static enum MHD_Result overloaded(conn *cc, struct MHD_Connection *c) {
    srv *s = cc->s;
    pthread_mutex_lock(&s->mu);
    const int draining = s->draining || s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (draining) return send_error(cc, c, 503, "server_shutting_down", "the server is shutting down; retry later");
    /* A short pause before the 503: a client that retries at once without
     * honouring Retry-After then costs at most SRV_REFUSE_PAUSE_MS worth of
     * refusals per connection (a sleeping thread, no CPU) instead of
     * thousands a second of connection setup that the sessions pay for
     * (bench/server/RESULTS.md). */
    struct timespec ts = {0, SRV_REFUSE_PAUSE_MS * 1000000L};
    nanosleep(&ts, NULL);
    return send_error(cc, c, 503, "server_overloaded",
                      "the server is busy (%d sessions busy, %d requests queued); retry after %s s", s->parallel,
                      s->queue_cap, SRV_RETRY_AFTER);
}

/* Wait while j is queued; 0 when it left the queue, -1 when the client
 * went away (the job is cancelled). */
static int wait_queued(conn *cc, job *j) {
    pthread_mutex_lock(&j->mu);
    while (j->state == JOB_QUEUED) {
        wait_tick(j);
        if (j->state == JOB_QUEUED && peer_gone(cc->fd)) {
            __atomic_store_n(&j->cancelled, 1, __ATOMIC_RELAXED); /* the worker reads it unlocked, atomically */
            pthread_mutex_unlock(&j->mu);
            return -1;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

static enum MHD_Result do_generate(conn *cc, struct MHD_Connection *c, int route) {
    srv *s = cc->s;
    srv_err e = {0};
    /* admitted at the headers (on_request): the queue has room for it */
    job *j = route == R_CHAT ? srv_parse_chat(s, cc->body ? cc->body : "", cc->len, &e)
                             : srv_parse_completion(s, cc->body ? cc->body : "", cc->len, &e);
    cc->admitted = 0;
    if (!j) {
        srv_unadmit(s);
        return send_err(cc, c, &e);
    }
    if (srv_submit(s, j)) { /* draining since the headers */
        srv_job_unref(j);
        return overloaded(cc, c);
    }
    cc->j = j;
    cc->responded = 1;
    pthread_mutex_lock(&s->mu);
    s->n_answering++;
    pthread_mutex_unlock(&s->mu);
    if (j->stream) {
        /* Headers only once a worker runs it: a job answered while queued
         * (the drain at shutdown) gets a real status, not a 200 stream
         * holding only [DONE]. */
        if (wait_queued(cc, j)) return MHD_NO;
        if (j->state == JOB_DONE && j->err_status) {
            srv_err ge = {j->err_status, j->err_status >= 500 ? "server_error" : "invalid_request_error", NULL,
                          j->err_status == 503 ? "server_shutting_down" : NULL, {0}, {0}};
            snprintf(ge.msg, sizeof ge.msg, "%s", j->err_msg);
            return send_err(cc, c, &ge);
        }
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, cc, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ok;
    }
    pthread_mutex_lock(&j->mu);
    while (j->state != JOB_DONE) {
        wait_tick(j);
        if (j->state != JOB_DONE && peer_gone(cc->fd)) {
            __atomic_store_n(&j->cancelled, 1, __ATOMIC_RELAXED); /* the worker reads it unlocked, atomically */
            pthread_mutex_unlock(&j->mu);
            return MHD_NO; /* nobody to answer: close */
        }
    }
    pthread_mutex_unlock(&j->mu);
    if (j->err_status) {
        srv_err ge = {j->err_status, j->err_status >= 500 ? "server_error" : "invalid_request_error", NULL,
                      j->err_status == 503 ? "server_shutting_down" : NULL, {0}, {0}};
        snprintf(ge.msg, sizeof ge.msg, "%s", j->err_msg);
        return send_err(cc, c, &ge);
    }
    char *body = srv_job_response(s, j);
    if (!body) return send_error(cc, c, 500, NULL, "out of memory");
    enum MHD_Result ok = send_body(c, 200, "application/json", body, strlen(body));
    free(body);
    return ok;
}

static cJSON *model_obj(const srv *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)g_started);
    cJSON_AddStringToObject(m, "owned_by", "turbospark");
    cJSON_AddNumberToObject(m, "max_model_len", s->n_ctx);
    return m;
}

static enum MHD_Result do_models(conn *cc, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_obj(cc->s));
    return send_json(c, 200, o);
}

/* GET /v1/models/{id}: the model object, or 404 model_not_found. */
static enum MHD_Result do_model(conn *cc, struct MHD_Connection *c, const char *id) {
    if (strcmp(id, cc->s->model_id)) {
        srv_err e = {404, "invalid_request_error", "model", "model_not_found", {0}, {0}};
        snprintf(e.msg, sizeof e.msg, "the model '%.200s' does not exist; this server serves '%s'", id, cc->s->model_id);
        return send_err(cc, c, &e);
    }
    return send_json(c, 200, model_obj(cc->s));
}

/* The expert cache's counters (--expert-cache), appended at buf + n; nothing
 * without a cache. Returns the new length. */
static int expert_metrics(const ts_engine *e, char *buf, size_t cap, int n) {
    ts_expert_stats x;
    ts_engine_expert_stats(e, &x);
    if (!x.enabled || n < 0 || (size_t)n >= cap) return n;
    uint64_t req = x.hits + x.misses;
    n += snprintf(buf + n, cap - (size_t)n,
                  "# HELP turbospark_expert_cache_slots Routed experts the expert cache holds.\n"
                  "# TYPE turbospark_expert_cache_slots gauge\nturbospark_expert_cache_slots %d\n"
                  "# HELP turbospark_expert_cache_hits_total Routed experts found in the cache (distinct per layer pass).\n"
                  "# TYPE turbospark_expert_cache_hits_total counter\nturbospark_expert_cache_hits_total %llu\n"
                  "# HELP turbospark_expert_cache_misses_total Routed experts read from the install.\n"
                  "# TYPE turbospark_expert_cache_misses_total counter\nturbospark_expert_cache_misses_total %llu\n"
                  "# HELP turbospark_expert_cache_hit_rate Hits over requests since start.\n"
                  "# TYPE turbospark_expert_cache_hit_rate gauge\nturbospark_expert_cache_hit_rate %.4f\n"
                  "# HELP turbospark_expert_cache_evictions_total Experts evicted from the cache.\n"
                  "# TYPE turbospark_expert_cache_evictions_total counter\nturbospark_expert_cache_evictions_total %llu\n"
                  "# HELP turbospark_expert_cache_read_bytes_total Bytes read from the install for experts.\n"
                  "# TYPE turbospark_expert_cache_read_bytes_total counter\nturbospark_expert_cache_read_bytes_total %llu\n"
                  "# HELP turbospark_expert_cache_read_errors_total Expert reads that failed.\n"
                  "# TYPE turbospark_expert_cache_read_errors_total counter\nturbospark_expert_cache_read_errors_total %llu\n"
                  "# HELP turbospark_expert_cache_io_wait_seconds_total Time the forward waited for expert reads.\n"
                  "# TYPE turbospark_expert_cache_io_wait_seconds_total counter\nturbospark_expert_cache_io_wait_seconds_total %.6f\n"
                  "# HELP turbospark_expert_cache_layer_hits_total Hits by MoE layer (the MTP layer last).\n"
                  "# TYPE turbospark_expert_cache_layer_hits_total counter\n",
                  x.n_slots, (unsigned long long)x.hits, (unsigned long long)x.misses, req ? (double)x.hits / req : 0.0,
                  (unsigned long long)x.evictions, (unsigned long long)x.bytes_read, (unsigned long long)x.read_errors,
                  x.io_wait_s);
    for (int pass = 0; pass < 2; pass++) {
        if (pass && n > 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n,
                          "# HELP turbospark_expert_cache_layer_misses_total Misses by MoE layer.\n"
                          "# TYPE turbospark_expert_cache_layer_misses_total counter\n");
        for (int L = 0; L < x.n_layers && n > 0 && (size_t)n < cap; L++) {
            uint64_t h = 0, m = 0;
            ts_engine_expert_layer(e, L, &h, &m);
            n += snprintf(buf + n, cap - (size_t)n, "turbospark_expert_cache_layer_%s_total{layer=\"%d\"} %llu\n",
                          pass ? "misses" : "hits", L, (unsigned long long)(pass ? m : h));
        }
    }
    if (x.host_slots && n > 0 && (size_t)n < cap) { /* --expert-host-cache */
        uint64_t hr = x.host_hits + x.host_misses;
        n += snprintf(buf + n, cap - (size_t)n,
                      "# HELP turbospark_expert_host_tier_slots Routed experts the pinned host tier holds.\n"
                      "# TYPE turbospark_expert_host_tier_slots gauge\nturbospark_expert_host_tier_slots %d\n"
                      "# HELP turbospark_expert_host_tier_hits_total Device misses served from the host tier.\n"
                      "# TYPE turbospark_expert_host_tier_hits_total counter\nturbospark_expert_host_tier_hits_total %llu\n"
                      "# HELP turbospark_expert_host_tier_misses_total Device misses the host tier read from the install.\n"
                      "# TYPE turbospark_expert_host_tier_misses_total counter\nturbospark_expert_host_tier_misses_total %llu\n"
                      "# HELP turbospark_expert_host_tier_hit_rate Host tier hits over its requests since start.\n"
                      "# TYPE turbospark_expert_host_tier_hit_rate gauge\nturbospark_expert_host_tier_hit_rate %.4f\n"
                      "# HELP turbospark_expert_host_tier_read_bytes_total Bytes the host tier read from the install.\n"
                      "# TYPE turbospark_expert_host_tier_read_bytes_total counter\nturbospark_expert_host_tier_read_bytes_total %llu\n"
                      "# HELP turbospark_expert_host_tier_writebacks_total Device victims kept in the host tier (exclusive tier).\n"
                      "# TYPE turbospark_expert_host_tier_writebacks_total counter\nturbospark_expert_host_tier_writebacks_total %llu\n",
                      x.host_slots, (unsigned long long)x.host_hits, (unsigned long long)x.host_misses,
                      hr ? (double)x.host_hits / hr : 0.0, (unsigned long long)x.host_bytes_read,
                      (unsigned long long)x.host_writebacks);
    }
    return n;
}

static enum MHD_Result do_metrics(conn *cc, struct MHD_Connection *c) {
    srv *s = cc->s;
    char buf[32768];
    pthread_mutex_lock(&s->mu);
    double pf = s->m_prefill_s > 0 ? (double)s->m_prefill_tokens / s->m_prefill_s : 0;
    double dc = s->m_decode_s > 0 ? (double)s->m_decode_tokens / s->m_decode_s : 0;
    int n = snprintf(buf, sizeof buf,
        "# HELP turbospark_requests_total HTTP requests received.\n"
        "# TYPE turbospark_requests_total counter\nturbospark_requests_total %llu\n"
        "# HELP turbospark_request_errors_total Requests answered with an error status.\n"
        "# TYPE turbospark_request_errors_total counter\nturbospark_request_errors_total %llu\n"
        "# HELP turbospark_requests_rejected_total Requests refused because the queue was full.\n"
        "# TYPE turbospark_requests_rejected_total counter\nturbospark_requests_rejected_total %llu\n"
        "# HELP turbospark_generations_total Generations run (completed or cancelled).\n"
        "# TYPE turbospark_generations_total counter\nturbospark_generations_total %llu\n"
        "# HELP turbospark_prompt_tokens_total Prompt tokens of all generations.\n"
        "# TYPE turbospark_prompt_tokens_total counter\nturbospark_prompt_tokens_total %llu\n"
        "# HELP turbospark_prompt_tokens_cached_total Prompt tokens reused from a session instead of prefilled.\n"
        "# TYPE turbospark_prompt_tokens_cached_total counter\nturbospark_prompt_tokens_cached_total %llu\n"
        "# HELP turbospark_tokens_generated_total Tokens generated.\n"
        "# TYPE turbospark_tokens_generated_total counter\nturbospark_tokens_generated_total %llu\n"
        "# HELP turbospark_prefill_tokens_per_second Prefill speed over all generations.\n"
        "# TYPE turbospark_prefill_tokens_per_second gauge\nturbospark_prefill_tokens_per_second %.3f\n"
        "# HELP turbospark_decode_tokens_per_second Decode speed over all generations.\n"
        "# TYPE turbospark_decode_tokens_per_second gauge\nturbospark_decode_tokens_per_second %.3f\n"
        "# HELP turbospark_queue_depth Requests waiting for a session.\n"
        "# TYPE turbospark_queue_depth gauge\nturbospark_queue_depth %d\n"
        "# HELP turbospark_sessions_busy Sessions generating now.\n"
        "# TYPE turbospark_sessions_busy gauge\nturbospark_sessions_busy %d\n"
        "# HELP turbospark_sessions Sessions in the pool.\n"
        "# TYPE turbospark_sessions gauge\nturbospark_sessions %d\n"
        "# HELP turbospark_draft_tokens_total Drafts verified, MTP, DFlash or n-gram (0 without --spec).\n"
        "# TYPE turbospark_draft_tokens_total counter\nturbospark_draft_tokens_total %llu\n"
        "# HELP turbospark_draft_tokens_accepted_total Drafts accepted.\n"
        "# TYPE turbospark_draft_tokens_accepted_total counter\nturbospark_draft_tokens_accepted_total %llu\n"
        "# HELP turbospark_verify_blocks_total Verify passes of drafted generations.\n"
        "# TYPE turbospark_verify_blocks_total counter\nturbospark_verify_blocks_total %llu\n"
        "# HELP turbospark_prompts_helped_total Prompts of a completion's list run by another idle session.\n"
        "# TYPE turbospark_prompts_helped_total counter\nturbospark_prompts_helped_total %llu\n",
        (unsigned long long)s->m_requests, (unsigned long long)s->m_errors, (unsigned long long)s->m_rejected,
        (unsigned long long)s->m_generations, (unsigned long long)s->m_prompt_tokens,
        (unsigned long long)s->m_cached_tokens, (unsigned long long)s->m_gen_tokens, pf, dc,
        s->q_len, s->n_busy, s->parallel, (unsigned long long)s->m_drafted, (unsigned long long)s->m_accepted,
        (unsigned long long)s->m_verify_blocks, (unsigned long long)s->m_helped);
    /* drafting detail (MTP or DFlash): mean accepted length, by position, times */
    if (n > 0 && (size_t)n < sizeof buf)
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "# HELP turbospark_spec_mean_accepted_length Tokens emitted per verify pass (accepted drafts + 1).\n"
                      "# TYPE turbospark_spec_mean_accepted_length gauge\nturbospark_spec_mean_accepted_length %.4f\n"
                      "# HELP turbospark_spec_seconds_total Drafting, verify and rollback time.\n"
                      "# TYPE turbospark_spec_seconds_total counter\n"
                      "turbospark_spec_seconds_total{phase=\"draft\"} %.6f\n"
                      "turbospark_spec_seconds_total{phase=\"verify\"} %.6f\n"
                      "turbospark_spec_seconds_total{phase=\"rollback\"} %.6f\n"
                      "# HELP turbospark_draft_position_total Drafts verified at each block position (1-based).\n"
                      "# TYPE turbospark_draft_position_total counter\n",
                      s->m_verify_blocks ? (double)(s->m_accepted + s->m_verify_blocks) / (double)s->m_verify_blocks : 0.0,
                      s->m_draft_s, s->m_verify_s, s->m_rollback_s);
    for (int f = 0; f < 2; f++) {
        if (f && n > 0 && (size_t)n < sizeof buf)
            n += snprintf(buf + n, sizeof buf - (size_t)n,
                          "# HELP turbospark_draft_position_accepted_total Blocks whose drafts were accepted through "
                          "that position.\n# TYPE turbospark_draft_position_accepted_total counter\n");
        for (int k = 0; k < 16 && n > 0 && (size_t)n < sizeof buf; k++)
            if (s->m_drafted_at[k])
                n += snprintf(buf + n, sizeof buf - (size_t)n, "turbospark_draft_position%s_total{position=\"%d\"} %llu\n",
                              f ? "_accepted" : "", k + 1,
                              (unsigned long long)(f ? s->m_accepted_at[k] : s->m_drafted_at[k]));
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&g_idle.mu);
    if (n > 0 && (size_t)n < sizeof buf)
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "# HELP turbospark_connections_idle Connections without a complete request (limit --max-idle).\n"
                      "# TYPE turbospark_connections_idle gauge\nturbospark_connections_idle %d\n"
                      "# HELP turbospark_idle_connections_closed_total Idle connections closed to stay under --max-idle.\n"
                      "# TYPE turbospark_idle_connections_closed_total counter\nturbospark_idle_connections_closed_total %llu\n",
                      g_idle.n_idle, (unsigned long long)g_idle.evicted);
    pthread_mutex_unlock(&g_idle.mu);
    pthread_mutex_lock(&s->cc_mu);
    if (n > 0 && (size_t)n < sizeof buf)
        n += snprintf(buf + n, sizeof buf - (size_t)n,
                      "# HELP turbospark_constraint_cache_hits_total Schema constraints (json_schema, forced tool calls) "
                      "found compiled in the cache.\n"
                      "# TYPE turbospark_constraint_cache_hits_total counter\nturbospark_constraint_cache_hits_total %llu\n"
                      "# HELP turbospark_constraint_cache_misses_total Schema constraints compiled (not in the cache).\n"
                      "# TYPE turbospark_constraint_cache_misses_total counter\nturbospark_constraint_cache_misses_total %llu\n"
                      "# HELP turbospark_constraint_build_seconds_total Time spent compiling the misses.\n"
                      "# TYPE turbospark_constraint_build_seconds_total counter\nturbospark_constraint_build_seconds_total %.6f\n"
                      "# HELP turbospark_constraint_cache_entries Compiled constraints the cache holds (at most %d).\n"
                      "# TYPE turbospark_constraint_cache_entries gauge\nturbospark_constraint_cache_entries %d\n",
                      (unsigned long long)s->cc_hits, (unsigned long long)s->cc_misses, s->cc_build_s, SRV_CC_CAP, s->cc_n);
    pthread_mutex_unlock(&s->cc_mu);
    n = expert_metrics(s->e, buf, sizeof buf, n);
    if (n < 0 || (size_t)n >= sizeof buf) n = (int)strlen(buf); /* the text is bounded (layers: a few hundred) */
    return send_body(c, 200, "text/plain; version=0.0.4", buf, (size_t)n);
}

/* POST /tokenize, /detokenize (server_req.c): no session, no queue. */
static enum MHD_Result do_tokens(conn *cc, struct MHD_Connection *c, int route) {
    srv_err e;
    memset(&e, 0, sizeof e);
    char *body = route == R_TOKENIZE ? srv_tokenize(cc->s, cc->body ? cc->body : "", cc->len, &e)
                                     : srv_detokenize(cc->s, cc->body ? cc->body : "", cc->len, &e);
    if (!body) return send_err(cc, c, &e);
    enum MHD_Result ok = send_body(c, 200, "application/json", body, strlen(body));
    free(body);
    return ok;
}

static int route_of(const char *url, const char **method_needed) {
    static const struct { const char *path, *method; int route; } routes[] = {
        {"/v1/chat/completions", "POST", R_CHAT}, {"/v1/completions", "POST", R_COMPLETIONS},
        {"/v1/models", "GET", R_MODELS},          {"/health", "GET", R_HEALTH},
        {"/metrics", "GET", R_METRICS},          {"/tokenize", "POST", R_TOKENIZE},
        {"/detokenize", "POST", R_DETOKENIZE},    {"/tokenizer_info", "GET", R_TOKINFO},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) {
            *method_needed = routes[i].method;
            return routes[i].route;
        }
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *method_needed = "GET";
        return R_MODEL;
    }
    return R_NONE;
}

static int auth_ok(srv *s, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned diff = a != b;
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned char)(h[i] ^ s->api_key[i]);
    return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **ctx) {
    srv *s = cls;
    conn *cc = *ctx;
    (void)version;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        cc->s = s;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        cc->fd = ci ? ci->connect_fd : -1;
        *ctx = cc;
        pthread_mutex_lock(&s->mu);
        s->m_requests++;
        pthread_mutex_unlock(&s->mu);
        if (s->verbose) fprintf(stderr, "turbospark serve: %s %s\n", method, url);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > SRV_MAX_BODY) {
            cc->too_big = 1;
            return send_error(cc, c, 413, "request_too_large", "the request body is %s bytes; the limit is %u",
                              cl, SRV_MAX_BODY);
        }
        /* Overload is decided here, from the headers: a refused request
         * costs no JSON parse, no template render, no tokenization. Its
         * body is read and dropped (answering before it is read would make
         * the close reset the connection under the client's reply). */
        const char *want = NULL;
        cc->route = route_of(url, &want);
        if ((cc->route == R_CHAT || cc->route == R_COMPLETIONS) && !strcmp(method, want) &&
            !(s->api_key && !auth_ok(s, c))) {
            if (srv_admit(s) == 0) cc->admitted = 1;
            else cc->refused = 1;
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (cc->refused) { /* dropped unread */
            *upload_size = 0;
            return MHD_YES;
        }
        if (!cc->too_big && cc->len + *upload_size > SRV_MAX_BODY) {
            cc->too_big = 1;
            free(cc->body);
            cc->body = NULL;
            cc->len = cc->cap = 0;
        }
        if (!cc->too_big) {
            if (cc->len + *upload_size + 1 > cc->cap) {
                size_t cap = cc->cap ? cc->cap : 4096;
                while (cap < cc->len + *upload_size + 1) cap *= 2;
                char *p = realloc(cc->body, cap);
                if (!p) return MHD_NO;
                cc->body = p;
                cc->cap = cap;
            }
            memcpy(cc->body + cc->len, upload, *upload_size);
            cc->len += *upload_size;
            cc->body[cc->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (cc->responded) return MHD_YES;
    conn_serving(c);
    if (cc->refused) return overloaded(cc, c);
    if (cc->too_big)
        return send_error(cc, c, 413, "request_too_large", "the request body exceeds the limit of %u bytes",
                          SRV_MAX_BODY);

    const char *want = NULL;
    int route = route_of(url, &want);
    if (route == R_NONE) return send_error(cc, c, 404, "not_found", "no route %s %s", method, url);
    if (strcmp(method, want))
        return send_error(cc, c, 405, "method_not_allowed", "%s is not allowed on %s; use %s", method, url, want);
    if (s->api_key && (!strncmp(url, "/v1/", 4) || route == R_TOKENIZE || route == R_DETOKENIZE || route == R_TOKINFO) &&
        !auth_ok(s, c))
        return send_error(cc, c, 401, "invalid_api_key", "missing or incorrect API key (Authorization: Bearer KEY)");
    cc->responded = 1;
    switch (route) {
    case R_HEALTH: return send_body(c, 200, "application/json", "{\"status\":\"ok\"}", 15);
    case R_METRICS: return do_metrics(cc, c);
    case R_MODELS: return do_models(cc, c);
    case R_MODEL: return do_model(cc, c, url + 11);
    case R_TOKENIZE:
    case R_DETOKENIZE: return do_tokens(cc, c, route);
    case R_TOKINFO: return send_body(c, 200, "application/json", s->tok_info, strlen(s->tok_info));
    default: return do_generate(cc, c, route);
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **ctx, enum MHD_RequestTerminationCode toe) {
    conn *cc = *ctx;
    (void)cls, (void)toe;
    conn_idle(c);
    if (!cc) return;
    if (cc->admitted) srv_unadmit(cc->s); /* left (or was refused) before its body was parsed */
    if (cc->j) {
        srv_job_cancel(cc->j); /* no-op for a finished job */
        srv_job_unref(cc->j);
        pthread_mutex_lock(&cc->s->mu);
        cc->s->n_answering--;
        pthread_mutex_unlock(&cc->s->mu);
    }
    free(cc->body);
    free(cc);
    *ctx = NULL;
}

static void log_access(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    vfprintf(stderr, fmt, ap);
}

/* ---- main ------------------------------------------------------------------------------- */

static int parse_int(const char *s, int lo, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    *out = (int)v;
    return end != s && *end == 0 && v >= lo && v <= (1L << 30);
}

int cmd_serve(int argc, char **argv) {
    const char *host = "127.0.0.1", *api_key = NULL;
    int port = 8080, parallel = 1, queue = 16, max_tokens_limit = 0, verbose = 0;
    cli_engine eo;
    cli_engine_init(&eo, "serve", SERVE_OPTS);
    double drain_s = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc, ok = 1;
        int sr = cli_engine_parse(argc, argv, &i, &eo);
        if (sr < 0) return 2;
        if (sr > 0) continue;
#define ARG(name) (!strcmp(a, name) && more)
        if (ARG("--host")) host = argv[++i];
        else if (ARG("--port")) ok = parse_int(argv[++i], 0, &port) && port <= 65535;
        else if (ARG("--parallel")) ok = parse_int(argv[++i], 1, &parallel) && parallel <= 256;
        else if (ARG("--queue")) ok = parse_int(argv[++i], 0, &queue) && queue <= 65536;
        else if (ARG("--max-tokens-limit")) ok = parse_int(argv[++i], 1, &max_tokens_limit);
        else if (ARG("--api-key")) api_key = argv[++i];
        else if (ARG("--max-idle")) ok = parse_int(argv[++i], 1, &g_idle.max_idle) && g_idle.max_idle <= 4096;
        else if (ARG("--drain-timeout")) {
            char *end;
            drain_s = strtod(argv[++i], &end);
            ok = end != argv[i] && !*end && drain_s >= 0 && drain_s <= 3600;
        }
        else if (!strcmp(a, "-v")) verbose = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { fprintf(stderr, "turbospark serve: unknown or incomplete argument '%s'\n", a); usage(stderr); return 2; }
        if (!ok) { fprintf(stderr, "turbospark serve: bad value '%s' for %s\n", argv[i], a); return 2; }
#undef ARG
    }
    if (cli_engine_check(&eo)) return 2;
    const char *model = eo.model;
    if (api_key && !*api_key) { fprintf(stderr, "turbospark serve: --api-key is empty\n"); return 2; }

    /* Resolve the address before loading anything. */
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int gai = getaddrinfo(host, NULL, &hints, &ai);
    if (gai || !ai) {
        fprintf(stderr, "turbospark serve: --host '%s': %s\n", host, gai_strerror(gai));
        return 2;
    }
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    int ipv6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (ipv6) ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)port);

    srv S;
    memset(&S, 0, sizeof S);
    srv *s = &S;
    s->model_dir = model;
    s->n_ctx = eo.n_ctx;
    s->chunk = eo.chunk;
    s->parallel = parallel;
    s->queue_cap = queue;
    s->api_key = api_key;
    s->verbose = verbose;
    s->spec = eo.spec;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->tpl_mu, NULL);
    pthread_mutex_init(&s->json_mu, NULL);
    srv_cc_init(s);
    {
        size_t n = strlen(model);
        while (n > 1 && model[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && model[b - 1] != '/') b--;
        snprintf(s->model_id, sizeof s->model_id, "%.*s", (int)(n - b), model + b);
    }

    /* Everything the server starts inherits these: only the main thread takes
     * SIGINT/SIGTERM (sigwait below); a closed socket is an error return, not
     * a signal. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    ts_error err = {0};
    int rc = 0;
    ts_engine_params ep;
    ts_engine_params_default(&ep);
    cli_engine_apply(&eo, &ep, NULL, NULL);
    struct MHD_Daemon *d = NULL;
    if ((rc = ts_engine_open(model, &ep, &s->e, &err))) goto out;
    if (eo.spec.on && !eo.spec.dflash && !eo.spec.ngram && !ts_engine_info(s->e)->has_mtp) {
        rc = TS_E_UNSUPPORTED;
        snprintf(err.msg, sizeof err.msg, "--spec mtp: %s has no MTP head (no mtp.* tensors)", model);
        goto out;
    }
    {
        /* the engine accepts any context it can allocate, but positions past
         * the model's trained length give garbage, not an error */
        const int max_pos = ts_engine_info(s->e)->max_position_embeddings;
        if (max_pos > 0 && eo.n_ctx > max_pos) {
            rc = TS_E_ARG;
            snprintf(err.msg, sizeof err.msg,
                     "--ctx %d is above the model's limit of %d tokens (max_position_embeddings of %s/config.json)",
                     eo.n_ctx, max_pos, model);
            goto out;
        }
    }
    if ((rc = ts_tokenizer_load(model, &s->tok, &err))) {
        fprintf(stderr, "turbospark serve: the server needs a tokenizer: ");
        goto out;
    }
    if (ts_chat_template_load(model, &s->tpl, &err)) {
        fprintf(stderr, "turbospark serve: no chat template (%s): /v1/chat/completions will refuse requests\n", err.msg);
        s->tpl = NULL;
    }
    s->n_vocab = ts_engine_info(s->e)->vocab_size;
    s->n_stop_ids = cli_stop_ids(s->e, s->tok, s->stop_ids, 16);
    s->think_end = ts_tokenizer_token_id(s->tok, "</think>");
    if ((rc = srv_pool_start(s, &err))) goto out;
    if (!(s->tok_info = srv_tokenizer_info(s, model))) { /* after the pool: model_max_length is the session's context */
        rc = TS_E_NOMEM;
        snprintf(err.msg, sizeof err.msg, "out of memory");
        goto out;
    }
    s->max_tokens_limit = max_tokens_limit ? max_tokens_limit : s->n_ctx;

    g_idle.head.next = g_idle.head.prev = &g_idle.head;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     (ipv6 ? MHD_USE_IPv6 : 0) | (verbose ? MHD_USE_ERROR_LOG : 0);
    g_started = time(NULL); /* before the daemon: its threads read it (/v1/models) */
    d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, s,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                         MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)(g_idle.max_idle + s->ring_cap + SRV_CONN_SLACK),
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300,
                         MHD_OPTION_EXTERNAL_LOGGER, log_access, NULL,
                         MHD_OPTION_END);
    if (!d) {
        snprintf(err.msg, sizeof err.msg, "cannot listen on %s:%d: %s", host, port,
                 errno ? strerror(errno) : "libmicrohttpd failed to start");
        rc = TS_E_IO;
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (di) port = di->port;
    char drafting[64] = "";
    if (s->spec.on && s->spec.dflash) snprintf(drafting, sizeof drafting, ", drafting dflash block %d", s->spec.block);
    else if (s->spec.on && s->spec.ngram)
        snprintf(drafting, sizeof drafting, ", drafting ngram %d (n-grams %d..%d)", s->spec.draft, s->spec.ngram_min,
                 s->spec.ngram_max);
    else if (s->spec.on) snprintf(drafting, sizeof drafting, ", drafting mtp %d", s->spec.draft);
    fprintf(stderr, "turbospark serve: listening on http://%s:%d (model %s, ctx %d, parallel %d, queue %d%s)\n",
            host, port, s->model_id, s->n_ctx, s->parallel, s->queue_cap, drafting);
    fflush(stderr);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "turbospark serve: %s, draining (up to %g s), then shutting down\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", drain_s);
    fflush(stderr);
    /* The drain: new requests and the queued ones get 503, running ones
     * finish (up to --drain-timeout). Then the workers: stopping what still
     * runs lets the connection threads that wait on it finish, so stopping
     * the daemon (which joins them) cannot hang. */
    srv_pool_drain(s, drain_s);
    srv_pool_stop(s);
    /* Every job is finished now, but a connection thread may not yet have
     * sent its last bytes (the error chunk of a stream cut at the drain
     * timeout, or a reply's body): stopping the daemon now would close the
     * socket under it. Give them a bounded grace to flush. */
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&s->mu);
        const int left = s->n_answering;
        pthread_mutex_unlock(&s->mu);
        if (!left) break;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(d);
    d = NULL;
out:
    if (rc) fprintf(stderr, "turbospark serve: %s\n", err.msg);
    if (d) MHD_stop_daemon(d);
    srv_pool_stop(s);
    ts_constraint_free(s->json);
    srv_cc_free(s);
    ts_chat_template_free(s->tpl);
    ts_tokenizer_free(s->tok);
    free(s->tok_info);
    ts_engine_close(s->e);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->tpl_mu);
    pthread_mutex_destroy(&s->json_mu);
    return rc == TS_E_ARG ? 2 : rc ? 1 : 0;
}
