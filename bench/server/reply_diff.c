/* reply_diff.c: differential and timing check of the reply parser (src/text/reply.c).
 * Random replies built from tag pieces, partial tags, whitespace, text and tool calls, pushed in random
 * splits; prints everything the parser returns, so two builds can be compared with cmp:
 *   git show OLD:src/text/reply.c > /tmp/reply_old.c; cc -std=gnu11 -O2 -Iinclude -Isrc -fvisibility=hidden \
 *     -c /tmp/reply_old.c -o /tmp/reply_old.o; cp build/libturbospark.a /tmp/libold.a; ar d /tmp/libold.a reply.o;
 *   ar r /tmp/libold.a /tmp/reply_old.o; build both (LIBS as in bench/spec/run.sh), run each with N, cmp.
 * (tests/fuzz/RESULTS.md "Fixed after the runs" for the ws_held change.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "turbospark.h"
static unsigned long long st = 88172645463325252ull;
static unsigned rnd(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (unsigned)st; }
static const char *pieces[] = {"<think>", "</think>", "<tool_call>", "</tool_call>", " ", "\n", "\n\n", "\t", "  ",
    "<", "</", "<t", "<th", "<tool", "hello", "x", "{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "\r", ">", "think>"};
static void put(const char *tag, const char *s, size_t n) { printf("%s[%zu]", tag, n); fwrite(s, 1, n, stdout); printf("|"); }
int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 20000;
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]";
    char buf[4096];
    for (int c = 0; c < N; c++) {
        size_t len = 0;
        int np = rnd() % 40;
        for (int i = 0; i < np; i++) {
            const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
            size_t k = strlen(p);
            if (len + k < sizeof buf) { memcpy(buf + len, p, k); len += k; }
        }
        ts_reply *r; ts_error err;
        if (ts_reply_new(rnd() % 2, rnd() % 2 ? tools : NULL, &r, &err)) { printf("new failed\n"); continue; }
        ts_text rs = {0}, ct = {0};
        for (size_t off = 0; off < len;) {
            size_t k = 1 + rnd() % 6; if (k > len - off) k = len - off;
            ts_reply_push(r, buf + off, k, &rs, &ct, &err); off += k;
        }
        char *calls = NULL;
        int rc = ts_reply_finish(r, &rs, &ct, &calls, &err);
        printf("%d rc %d ", c, rc); put("R", rs.s ? rs.s : "", rs.len); put("C", ct.s ? ct.s : "", ct.len);
        printf("T[%s]\n", calls ? calls : "");
        ts_chat_text_free(calls); ts_text_free(&rs); ts_text_free(&ct); ts_reply_free(r);
    }
    return 0;
}
