/* fuzz_chat.c: a chat request's JSON -> the prompt text, through the
 * shipped templates (tests/fixtures/chat/templates: Qwen3, Qwen3.5, Qwen3.6)
 * and ts_chat_render_json, the path a server request takes.
 * Input byte 0 picks the template; the rest is the request body.
 * Properties: an error with a message or a NUL-terminated text of out_len
 * bytes; malformed JSON is TS_E_FORMAT or TS_E_ARG, never a render. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "turbospark.h"

static const char *const FILES[] = {
    "tests/fixtures/chat/templates/qwen3.5.jinja",
    "tests/fixtures/chat/templates/qwen3.jinja",
    "tests/fixtures/chat/templates/qwen3.6.jinja",
    "tests/fixtures/chat/templates/qwen3.5-small.jinja",
};
#define N_TPL (int)(sizeof FILES / sizeof FILES[0])

static ts_chat_template *tpl(int i) {
    static ts_chat_template *t[N_TPL];
    if (!t[i]) {
        size_t n;
        char *text = fuzz_read_fixture(FILES[i], &n);
        ts_error err = {0};
        if (ts_chat_template_parse(text, n, &t[i], &err)) fuzz_fail("%s: %s", FILES[i], err.msg);
        free(text);
    }
    return t[i];
}

int fuzz_chat(const uint8_t *data, size_t size) {
    if (!size) return 0;
    ts_chat_template *t = tpl(data[0] % N_TPL);
    char *out = NULL;
    size_t n = 0;
    ts_error err = {0};
    /* the body without a NUL after it, as the server hands it over */
    char *body = malloc(size - 1 ? size - 1 : 1);
    if (!body) fuzz_fail("out of memory");
    if (size > 1) memcpy(body, data + 1, size - 1);
    int rc = ts_chat_render_json(t, body, size - 1, &out, &n, &err);
    if (rc) {
        if (out || !err.msg[0]) fuzz_fail("error %d without a message, or with text", rc);
    } else if (!out || out[n] || strlen(out) > n) {
        fuzz_fail("rendered text is not out_len bytes");
    }
    ts_chat_text_free(out);
    free(body);
    return 0;
}
