/* loadgen.c: a small bounded load generator for `turbospark serve` (issue 20,
 * item 5: goodput under overload).
 *
 *   cc -O2 -o build/loadgen bench/server/loadgen.c -lpthread
 *   build/loadgen --port P --conns 40 --seconds 10 [--max-tokens 16]
 *                 [--retry-ms M | --honour-retry-after] [--chat] [--pad BYTES]
 *                 [--server-pid PID]
 *
 * Owns: N client threads, each looping for the duration: connect to
 * 127.0.0.1 (only: there is no host option), one POST with Connection:
 * close, read the whole reply, classify it. After a 503 a client waits the
 * reply's Retry-After (--honour-retry-after, what the openai packages do)
 * or a fixed --retry-ms (0: retry at once, a hostile client). At the end it
 * waits for the server to go idle and reads /metrics to prove no session or
 * queue slot leaked.
 *
 * --pad BYTES puts that much text before the question (the cost of parsing
 * a long history); --server-pid reads the server's CPU time from /proc.
 *
 * Prints one line: goodput (200s completed inside the window per second),
 * statuses, 503s without Retry-After, p50/p99 latency of the 200s, and the
 * server's busy sessions / queue depth after the run. Exits 1 when a 503
 * lacked Retry-After, a status other than 200/503 came back, or the server
 * did not return to idle.
 *
 * Bounded: at most 1024 connections, 120 s, loopback only; every socket has
 * a 60 s timeout.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int g_port, g_conns = 8, g_max_tokens = 16, g_retry_ms = -1, g_chat, g_pad, g_server_pid;
static double g_seconds = 10, g_t0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct {
    long ok, r503, r503_no_retry, other, neterr;
    double *lat;
    long n_lat, cap_lat;
} stats;

/* One request; returns the status (-1 network error); *retry_after the
 * header's seconds (-1 absent). */
static int request(const char *path, const char *body, int *retry_after, char *buf, size_t cap) {
    *retry_after = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) { close(fd); return -1; }
    char head[512];
    int hn = body ? snprintf(head, sizeof head,
                             "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: "
                             "application/json\r\nContent-Length: %zu\r\n\r\n", path, strlen(body))
                  : snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
    if (send(fd, head, (size_t)hn, MSG_NOSIGNAL) != hn || (body && send(fd, body, strlen(body), MSG_NOSIGNAL) < 0)) {
        close(fd);
        return -1;
    }
    size_t n = 0;
    for (;;) {
        ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
        if (n + 1 >= cap) break;
    }
    close(fd);
    buf[n] = 0;
    int status = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) return -1;
    char *h = strcasestr(buf, "\r\nRetry-After:");
    char *hend = strstr(buf, "\r\n\r\n");
    if (h && (!hend || h < hend)) *retry_after = atoi(h + 14);
    return status;
}

static void *client(void *arg) {
    stats *st = arg;
    /* --pad N: N bytes of words before the question (a long history costs
     * the server a long render and tokenization per request it parses) */
    char *pad = malloc((size_t)g_pad + 1), *body = malloc((size_t)g_pad + 512), *buf = malloc(1 << 20);
    static const char words[] = "the cat sat on a warm mat and looked at the bird ";
    for (int i = 0; i < g_pad; i++) pad[i] = words[i % (sizeof words - 1)];
    pad[g_pad] = 0;
    if (g_chat)
        snprintf(body, (size_t)g_pad + 512,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"%sTell me a story about a cat.\"}],\"max_tokens\":%d,"
                 "\"temperature\":0,\"chat_template_kwargs\":{\"enable_thinking\":false}}", pad, g_max_tokens);
    else
        snprintf(body, (size_t)g_pad + 512, "{\"prompt\":\"%sOnce upon a time\",\"max_tokens\":%d,\"temperature\":0}", pad,
                 g_max_tokens);
    const char *path = g_chat ? "/v1/chat/completions" : "/v1/completions";
    while (now() - g_t0 < g_seconds) {
        double t = now();
        int ra;
        int status = request(path, body, &ra, buf, 1 << 20);
        double done = now();
        if (status == 200) {
            if (done - g_t0 > g_seconds) break; /* finished outside the window: not counted */
            st->ok++;
            if (st->n_lat == st->cap_lat) st->lat = realloc(st->lat, sizeof(double) * (size_t)(st->cap_lat = st->cap_lat ? 2 * st->cap_lat : 256));
            st->lat[st->n_lat++] = done - t;
        } else if (status == 503) {
            st->r503++;
            if (ra < 0) st->r503_no_retry++;
            int wait = g_retry_ms >= 0 ? g_retry_ms : (ra > 0 ? ra * 1000 : 1000);
            if (wait) sleep_ms(wait);
        } else if (status < 0) {
            st->neterr++;
            sleep_ms(10);
        } else {
            st->other++;
        }
    }
    free(buf);
    free(body);
    free(pad);
    return NULL;
}

/* The server's CPU seconds (user + system) from /proc, or -1. */
static double server_cpu(void) {
    if (!g_server_pid) return -1;
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", g_server_pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    const char *p = strrchr(line, ')'); /* fields after the command name */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long metric(const char *name) {
    static char buf[1 << 16];
    int ra;
    if (request("/metrics", NULL, &ra, buf, sizeof buf) != 200) return -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(buf, key);
    return p ? atol(p + strlen(key)) : -1;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--port") && more) g_port = atoi(argv[++i]);
        else if (!strcmp(a, "--conns") && more) g_conns = atoi(argv[++i]);
        else if (!strcmp(a, "--seconds") && more) g_seconds = atof(argv[++i]);
        else if (!strcmp(a, "--max-tokens") && more) g_max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--retry-ms") && more) g_retry_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--honour-retry-after")) g_retry_ms = -1;
        else if (!strcmp(a, "--chat")) g_chat = 1;
        else if (!strcmp(a, "--pad") && more) g_pad = atoi(argv[++i]);
        else if (!strcmp(a, "--server-pid") && more) g_server_pid = atoi(argv[++i]);
        else { fprintf(stderr, "loadgen: bad argument '%s' (see the comment at the top of loadgen.c)\n", a); return 2; }
    }
    if (g_port <= 0 || g_port > 65535 || g_conns < 1 || g_conns > 1024 || g_seconds <= 0 || g_seconds > 120 ||
        g_max_tokens < 1 || g_max_tokens > 4096 || g_pad < 0 || g_pad > (1 << 20)) {
        fprintf(stderr, "loadgen: need --port, 1..1024 connections, 0..120 s, 1..4096 tokens, --pad up to 1 MiB\n");
        return 2;
    }
    stats *st = calloc((size_t)g_conns, sizeof *st);
    pthread_t *th = calloc((size_t)g_conns, sizeof *th);
    const double cpu0 = server_cpu();
    g_t0 = now();
    for (int i = 0; i < g_conns; i++) pthread_create(&th[i], NULL, client, &st[i]);
    for (int i = 0; i < g_conns; i++) pthread_join(th[i], NULL);
    const double cpu = cpu0 >= 0 && server_cpu() >= 0 ? server_cpu() - cpu0 : -1;
    stats t = {0};
    double *lat = NULL;
    for (int i = 0; i < g_conns; i++) {
        t.ok += st[i].ok, t.r503 += st[i].r503, t.r503_no_retry += st[i].r503_no_retry;
        t.other += st[i].other, t.neterr += st[i].neterr;
        lat = realloc(lat, sizeof(double) * (size_t)(t.n_lat + st[i].n_lat + 1));
        memcpy(lat + t.n_lat, st[i].lat, sizeof(double) * (size_t)st[i].n_lat);
        t.n_lat += st[i].n_lat;
        free(st[i].lat);
    }
    qsort(lat, (size_t)t.n_lat, sizeof *lat, cmp_d);
    double p50 = t.n_lat ? lat[t.n_lat / 2] : 0, p99 = t.n_lat ? lat[(t.n_lat * 99) / 100] : 0;
    long busy = -1, depth = -1;
    for (int i = 0; i < 100; i++) { /* the server goes idle once the last replies are written */
        busy = metric("turbospark_sessions_busy");
        depth = metric("turbospark_queue_depth");
        if (busy == 0 && depth == 0) break;
        sleep_ms(100);
    }
    printf("conns %d seconds %g max_tokens %d retry %s: goodput %.2f req/s (%ld ok), 503 %ld (%ld without Retry-After), "
           "other %ld, network errors %ld, latency p50 %.3f s p99 %.3f s; server CPU %.2f s; after: sessions busy %ld, "
           "queue depth %ld\n",
           g_conns, g_seconds, g_max_tokens, g_retry_ms < 0 ? "Retry-After" : (g_retry_ms ? "fixed" : "immediate"),
           t.ok / g_seconds, t.ok, t.r503, t.r503_no_retry, t.other, t.neterr, p50, p99, cpu, busy, depth);
    free(lat);
    free(st);
    free(th);
    return t.r503_no_retry || t.other || busy != 0 || depth != 0 ? 1 : 0;
}
