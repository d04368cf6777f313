/* server_harness.c: see server_harness.h. */
#define _GNU_SOURCE /* strcasestr */
#include "server_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ts_test.h"

void test_msleep(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int server_spawn(server *s, const char *model, const char *const *args) {
    memset(s, 0, sizeof *s);
    if (!model) return -1;
    static int seq; /* one log per server of the run */
    snprintf(s->log, sizeof s->log, "%s/server%d.log", ts_test_tmpdir(), seq++);
    const char *argv[32];
    int n = 0;
    argv[n++] = ts_test_bin();
    argv[n++] = "serve";
    argv[n++] = "-m";
    argv[n++] = model;
    argv[n++] = "--port";
    argv[n++] = "0";
    for (int i = 0; args && args[i] && n < 30; i++) argv[n++] = args[i];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    static const char key[] = "listening on http://127.0.0.1:";
    for (int i = 0; i < 600; i++) { /* up to 30 s (sanitizer builds load slowly) */
        FILE *f = fopen(s->log, "r");
        if (f) {
            char line[1024];
            while (fgets(line, sizeof line, f)) {
                const char *p = strstr(line, key);
                if (p) s->port = atoi(p + strlen(key));
            }
            fclose(f);
        }
        if (s->port) return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) { s->pid = 0; return -1; }
        test_msleep(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    s->pid = 0;
    return -1;
}

int server_stop(server *s) {
    if (!s->pid) return -1;
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 400; i++) {
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            s->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        test_msleep(50);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
    return -1;
}

void resp_free(resp *r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

int http_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) { close(fd); return -1; }
    return fd;
}

int http_send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int http_send_request(int fd, const char *method, const char *path, const char *extra, const char *body, size_t blen) {
    char head[2048];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s%s", method, path,
                     extra ? extra : "", body ? "Content-Type: application/json\r\n" : "");
    if (body) n += snprintf(head + n, sizeof head - n, "Content-Length: %zu\r\n", blen);
    n += snprintf(head + n, sizeof head - n, "\r\n");
    if (http_send_all(fd, head, (size_t)n)) return -1;
    return body && blen ? http_send_all(fd, body, blen) : 0;
}

int http_read_response(int fd, resp *r) {
    memset(r, 0, sizeof *r);
    size_t cap = 1 << 16, n = 0;
    char *raw = malloc(cap);
    if (!raw) return -1;
    for (;;) {
        if (n + 4096 > cap) {
            char *r2 = realloc(raw, cap *= 2);
            if (!r2) { free(raw); return -1; }
            raw = r2;
        }
        ssize_t k = recv(fd, raw + n, cap - n - 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    raw[n] = 0;
    char *hend = strstr(raw, "\r\n\r\n");
    if (!hend || sscanf(raw, "HTTP/1.%*d %d", &r->status) != 1) { free(raw); return -1; }
    *hend = 0;
    int chunked = strcasestr(raw, "transfer-encoding: chunked") != NULL;
    const char *ra = strcasestr(raw, "\r\nretry-after:");
    r->retry_after = ra ? atoi(ra + 14) : -1;
    char *b = hend + 4, *end = raw + n;
    r->body = malloc((size_t)(end - b) + 1);
    if (!r->body) { free(raw); return -1; }
    if (!chunked) {
        r->len = (size_t)(end - b);
        memcpy(r->body, b, r->len);
    } else {
        while (b < end) {
            size_t sz = strtoul(b, NULL, 16);
            char *nl = strstr(b, "\r\n");
            if (!nl || sz == 0) break;
            b = nl + 2;
            if (b + sz > end) sz = (size_t)(end - b);
            memcpy(r->body + r->len, b, sz);
            r->len += sz;
            b += sz + 2;
        }
    }
    r->body[r->len] = 0;
    free(raw);
    return 0;
}

int http_request(int port, const char *method, const char *path, const char *extra, const char *body, resp *r) {
    memset(r, 0, sizeof *r);
    int fd = http_connect(port);
    if (fd < 0) return -1;
    int rc = http_send_request(fd, method, path, extra, body, body ? strlen(body) : 0);
    if (!rc) rc = http_read_response(fd, r);
    close(fd);
    return rc;
}

cJSON *http_post(int port, const char *path, const char *body, int *status) {
    resp r;
    *status = -1;
    if (http_request(port, "POST", path, NULL, body, &r)) return NULL;
    *status = r.status;
    cJSON *j = cJSON_Parse(r.body);
    resp_free(&r);
    return j;
}

const cJSON *path_get(const cJSON *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ".", &save); tok && j; tok = strtok_r(NULL, ".", &save))
        j = (*tok >= '0' && *tok <= '9') ? cJSON_GetArrayItem(j, atoi(tok)) : cJSON_GetObjectItemCaseSensitive(j, tok);
    return j;
}

const char *str_at(const cJSON *j, const char *path) {
    const cJSON *v = path_get(j, path);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int int_at(const cJSON *j, const char *path) {
    const cJSON *v = path_get(j, path);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}
