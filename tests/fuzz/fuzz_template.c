/* fuzz_template.c: Jinja template text -> parse -> render (jinja.c).
 * Input: the template text; optionally a NUL byte and a JSON object whose
 * members become the render's variables (else a fixed chat request: messages
 * with every role, tool calls, tools). Limits are lowered from the defaults
 * (10M steps, 256 MiB) so that one input stays fast; the limit code is the
 * same.
 * Properties: parse and render either succeed or fail with a message and a
 * kind; a rendered text is exactly out_len bytes; a parsed template renders
 * twice to the same bytes (rendering does not change the template). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "text/jinja.h"
#include "ts_int.h"

static const char REQ[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hi \\u00e9\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>r</think>a\",\"reasoning_content\":\"r\","
    "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1,\"y\":[1.0,\"s\",null,true]}}}]},"
    "{\"role\":\"tool\",\"content\":\"42\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"t\"}]}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}}}],"
    "\"add_generation_prompt\":true,\"enable_thinking\":false,\"bos_token\":\"\",\"eos_token\":\"<|im_end|>\"}";

static int render(const tj_template *t, const tj_vars *v, char **out, size_t *n) {
    tj_error err;
    memset(&err, 0, sizeof err);
    *out = NULL;
    if (tj_render(t, v, out, n, &err) == 0) {
        if (!*out || strlen(*out) > *n) fuzz_fail("render: out_len does not match the text");
        return 0;
    }
    if (*out) fuzz_fail("a failed render returned text");
    if (!err.msg[0]) fuzz_fail("render error without a message (kind %d)", (int)err.kind);
    return -1;
}

int fuzz_template(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    tj_options o;
    tj_options_default(&o);
    o.max_steps = 20000;
    o.max_bytes = (size_t)16 << 20;
    tj_template *t = NULL;
    tj_error err;
    memset(&err, 0, sizeof err);
    /* the template text exactly as long as it is (no NUL after it) */
    char *src = malloc(tlen ? tlen : 1);
    if (!src) fuzz_fail("out of memory");
    if (tlen) memcpy(src, data, tlen);
    int rc = tj_parse(src, tlen, &o, &t, &err);
    if (rc) {
        if (!err.msg[0] || t) fuzz_fail("parse error without a message, or a template returned");
        free(src);
        return 0;
    }
    tj_vars *v = tj_vars_new();
    if (!v) fuzz_fail("out of memory");
    const char *req = REQ;
    size_t rlen = sizeof REQ - 1;
    if (nul) req = (const char *)nul + 1, rlen = size - tlen - 1;
    if (tj_vars_set_json_members(v, req, rlen, &err) == 0) {
        char *a, *b;
        size_t na, nb;
        int ra = render(t, v, &a, &na), rb = render(t, v, &b, &nb);
        if (ra != rb || (!ra && (na != nb || memcmp(a, b, na)))) fuzz_fail("two renders differ");
        ts_free(a);
        ts_free(b);
    } else if (!err.msg[0]) {
        fuzz_fail("variables refused without a message");
    }
    tj_vars_free(v);
    tj_template_free(t);
    free(src);
    return 0;
}
