/* fuzz_reply.c: a generated reply -> reasoning, content, tool calls.
 * Input byte 0: bit 0 think_open; bits 1-2 the tools schema (none, a fixed
 * one with typed parameters, the input's own: the bytes up to the first NUL,
 * an invalid one); bits 3-7 seed the cut points. The rest is the reply.
 * Properties: the parser's documented invariant, the same split however the
 * text was cut (one push, one byte per push, pieces of 1-16 bytes); tool
 * calls, when returned, are a JSON array of {"name": string, "arguments":
 * string}. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "turbospark.h"

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"i\":{\"type\":\"integer\"},\"n\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},"
    "\"o\":{\"type\":\"object\"},\"a\":{\"type\":\"array\"},\"s\":{\"type\":\"string\"},"
    "\"u\":{\"type\":[\"integer\",\"null\"]},\"z\":{\"type\":\"null\"}}}}},"
    "{\"name\":\"g\",\"parameters\":{\"properties\":{\"x\":{\"type\":\"number\"}}}}]";

typedef struct {
    ts_text reasoning, content;
    char *calls;
} split;

/* cut: 0 one push, 1 a byte per push, else pieces from an LCG seeded by cut */
static void run(int think, const char *tools, const char *s, size_t n, unsigned cut, split *o) {
    memset(o, 0, sizeof *o);
    ts_reply *r = NULL;
    ts_error err = {0};
    if (ts_reply_new(think, tools, &r, &err)) fuzz_fail("reply_new: %s", err.msg);
    uint32_t x = cut * 2654435761u + 1;
    for (size_t i = 0; i < n || (i == 0 && n == 0);) {
        size_t k = n - i;
        if (cut == 1) k = n ? 1 : 0;
        else if (cut > 1) {
            x = x * 1103515245u + 12345u;
            k = 1 + (x >> 16) % 16;
            if (k > n - i) k = n - i;
        }
        if (ts_reply_push(r, s + i, k, &o->reasoning, &o->content, &err)) fuzz_fail("push: %s", err.msg);
        i += k;
        if (!k) break;
    }
    if (ts_reply_finish(r, &o->reasoning, &o->content, &o->calls, &err)) fuzz_fail("finish: %s", err.msg);
    ts_reply_free(r);
}

static int same_text(const ts_text *a, const ts_text *b) {
    return a->len == b->len && (!a->len || !memcmp(a->s, b->s, a->len));
}

static void check_calls(const char *calls) {
    if (!calls) return;
    cJSON *j = cJSON_Parse(calls);
    if (!cJSON_IsArray(j) || !cJSON_GetArraySize(j)) fuzz_fail("tool_calls is not a non-empty JSON array: %s", calls);
    const cJSON *c;
    cJSON_ArrayForEach(c, j) {
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "name")) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "arguments")))
            fuzz_fail("a tool call without string name and arguments: %s", calls);
    }
    cJSON_Delete(j);
}

int fuzz_reply(const uint8_t *data, size_t size) {
    if (!size) return 0;
    int think = data[0] & 1, tmode = (data[0] >> 1) & 3;
    unsigned seed = data[0] >> 3;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    char *own = NULL;
    const char *tools = tmode == 0 ? NULL : tmode == 1 ? TOOLS : tmode == 3 ? "[{\"function\":" : NULL;
    if (tmode == 2) {
        const char *nul = memchr(s, 0, n);
        size_t k = nul ? (size_t)(nul - s) : n;
        own = fuzz_strndup((const uint8_t *)s, k);
        tools = own;
        s += nul ? k + 1 : k;
        n -= nul ? k + 1 : k;
    }
    split a, b, c;
    run(think, tools, s, n, 0, &a);
    run(think, tools, s, n, 1, &b);
    run(think, tools, s, n, 2 + seed, &c);
    check_calls(a.calls);
    const split *other[2] = {&b, &c};
    for (int i = 0; i < 2; i++) {
        const split *o = other[i];
        if (!same_text(&a.reasoning, &o->reasoning) || !same_text(&a.content, &o->content) ||
            !!a.calls != !!o->calls || (a.calls && strcmp(a.calls, o->calls)))
            fuzz_fail("the split depends on the cut (%s): reasoning %zu/%zu bytes, content %zu/%zu, calls %s/%s",
                      i ? "pieces" : "bytes", a.reasoning.len, o->reasoning.len, a.content.len, o->content.len,
                      a.calls ? "yes" : "no", o->calls ? "yes" : "no");
    }
    split *all[3] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        ts_text_free(&all[i]->reasoning);
        ts_text_free(&all[i]->content);
        ts_chat_text_free(all[i]->calls);
    }
    free(own);
    return 0;
}
