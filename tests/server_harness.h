/* server_harness.h: a `turbospark serve` process and a minimal HTTP/1.1
 * client over loopback, for the black-box server tests (test_server.c,
 * test_determinism.c).
 *
 * The server: fork + exec of ts_test_bin() with --port 0, its output in a log
 * file of the test's tmpdir, the port read from that log;
 * PR_SET_PDEATHSIG, so it cannot outlive the runner. The client: a fresh
 * connection per request, Connection: close (the body runs to EOF),
 * chunked bodies decoded, a 30 s receive and send timeout on every socket so
 * no loop can hang.
 */
#ifndef TS_SERVER_HARNESS_H
#define TS_SERVER_HARNESS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;      /* 0 once stopped (or never started) */
    int port;
    char log[512];  /* the server's stdout and stderr */
} server;

/* Start `turbospark serve -m model --port 0 args...` (args: NULL-terminated,
 * at most 24; NULL for none) and wait up to 30 s for its port. 0, or -1 (it
 * exited or never listened; it is killed then). */
int server_spawn(server *s, const char *model, const char *const *args);
/* SIGTERM, then wait up to 20 s (SIGKILL after). The exit status, or -1
 * when it had to be killed or was not running. */
int server_stop(server *s);

void test_msleep(int ms);

typedef struct {
    int status;
    int retry_after; /* the Retry-After header's value, -1 when absent */
    char *body;      /* decoded (chunked) body, NUL-terminated, malloc'd */
    size_t len;
} resp;

void resp_free(resp *r);

/* A connected socket to 127.0.0.1:port with the timeouts set, or -1. */
int http_connect(int port);
int http_send_all(int fd, const char *p, size_t n);
/* Send a request; body may be NULL. extra: more header lines ("K: V\r\n"). */
int http_send_request(int fd, const char *method, const char *path, const char *extra, const char *body, size_t blen);
/* Read to EOF and parse status line, headers and (chunked) body into r
 * (free with resp_free, also after an error). 0, or -1. */
int http_read_response(int fd, resp *r);
/* One request over a fresh connection. 0, or -1 (no connection, or no
 * parseable response). */
int http_request(int port, const char *method, const char *path, const char *extra, const char *body, resp *r);
/* POST a JSON body; the parsed JSON (owned; NULL if the body is not JSON),
 * the HTTP status in *status (-1 when there was no response). */
cJSON *http_post(int port, const char *path, const char *body, int *status);

/* A JSON member by a dotted path ("choices.0.message.content": digits index
 * arrays), NULL when absent; its string (NULL unless a string) and integer
 * (-1 unless a number). */
const cJSON *path_get(const cJSON *j, const char *path);
const char *str_at(const cJSON *j, const char *path);
int int_at(const cJSON *j, const char *path);

#endif
