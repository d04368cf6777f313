/* fuzz_tokenizer.c: encode, decode and streaming decode with the test
 * tokenizer (tests/fixtures/server/tokenizer.json: Qwen's regex, NFC, added
 * tokens).
 * Input byte 0 picks the mode; the rest is the payload.
 *   even: payload is text. Invalid UTF-8 must be an error; otherwise every id
 *         is in the vocabulary, decode(encode(x)) is a fixed point of
 *         decode(encode(.)) (the text after NFC), and the streaming decoder
 *         gives exactly the decoded bytes.
 *   odd:  payload is little-endian int32 ids, any values. decode fails
 *         exactly when an id has no token; the streaming decoder's output is
 *         always valid UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "text/tokenizer.h"

static ts_tokenizer *tok(void) {
    static ts_tokenizer *t;
    if (!t) {
        ts_error err = {0};
        if (ts_tokenizer_load("tests/fixtures/server/tokenizer.json", &t, &err))
            fuzz_fail("cannot load the test tokenizer: %s", err.msg);
    }
    return t;
}

static void text_append(ts_text *o, const char *p, size_t n) {
    if (o->len + n + 1 > o->cap) {
        o->cap = (o->len + n + 1) * 2;
        o->s = realloc(o->s, o->cap);
        if (!o->s) fuzz_fail("out of memory");
    }
    if (n) memcpy(o->s + o->len, p, n);
    o->len += n;
    o->s[o->len] = 0;
}

/* Our own buffers (realloc'd here, so freed with free, not ts_text_free). */
static void text_done(ts_text *o) { free(o->s); }

/* The streaming decoder over ids: all its output, concatenated. */
static void stream(ts_tokenizer *t, const int32_t *ids, int n, ts_text *out) {
    ts_detok *d = NULL;
    ts_error err = {0};
    if (ts_detok_new(t, &d, &err)) fuzz_fail("detok_new: %s", err.msg);
    for (int i = 0; i < n; i++) {
        const char *p;
        size_t len;
        if (ts_detok_push(d, ids[i], &p, &len, &err)) continue; /* an id with no token: an error, skipped */
        text_append(out, p, len);
    }
    const char *p;
    size_t len;
    ts_detok_flush(d, &p, &len);
    text_append(out, p, len);
    ts_detok_free(d);
}

int fuzz_tokenizer(const uint8_t *data, size_t size) {
    if (!size) return 0;
    ts_tokenizer *t = tok();
    int nv = ts_tokenizer_vocab_size(t);
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    ts_error err = {0};
    if (!(data[0] & 1)) {
        ts_tokens a = {0}, b = {0};
        int rc = ts_tokenizer_encode(t, s, n, &a, &err);
        int valid = ts_utf8_check(s, n) == n;
        if (!valid) {
            if (!rc || !err.msg[0]) fuzz_fail("invalid UTF-8 encoded without an error");
            ts_tokens_free(&a);
            return 0;
        }
        if (rc) fuzz_fail("valid UTF-8 refused: %s", err.msg);
        for (int i = 0; i < a.n; i++)
            if (a.ids[i] < 0 || a.ids[i] >= nv) fuzz_fail("id %d outside [0, %d)", a.ids[i], nv);
        ts_text da = {0}, db = {0}, st = {0};
        if (ts_tokenizer_decode(t, a.ids, a.n, &da, &err)) fuzz_fail("decode: %s", err.msg);
        if (ts_tokenizer_encode(t, da.s ? da.s : "", da.len, &b, &err)) fuzz_fail("re-encode: %s", err.msg);
        if (ts_tokenizer_decode(t, b.ids, b.n, &db, &err)) fuzz_fail("decode 2: %s", err.msg);
        if (da.len != db.len || (da.len && memcmp(da.s, db.s, da.len)))
            fuzz_fail("decode(encode(x)) is not a fixed point (%zu vs %zu bytes)", da.len, db.len);
        stream(t, a.ids, a.n, &st);
        if (st.len != da.len || (da.len && memcmp(st.s, da.s, da.len)))
            fuzz_fail("streaming decode differs from decode (%zu vs %zu bytes)", st.len, da.len);
        ts_text_free(&da);
        ts_text_free(&db);
        text_done(&st);
        ts_tokens_free(&a);
        ts_tokens_free(&b);
    } else {
        int m = (int)(n / 4);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(m ? m : 1));
        int all_ok = 1;
        for (int i = 0; i < m; i++) {
            uint32_t v = (uint32_t)data[1 + 4 * i] | (uint32_t)data[2 + 4 * i] << 8 | (uint32_t)data[3 + 4 * i] << 16 |
                         (uint32_t)data[4 + 4 * i] << 24;
            /* mostly ids near the vocabulary, sometimes anything */
            ids[i] = (v >> 31) ? (int32_t)v : (int32_t)(v % (uint32_t)(nv + 8));
            if (!ts_tokenizer_token_bytes(t, ids[i], &(size_t){0})) all_ok = 0;
        }
        ts_text d = {0}, st = {0};
        int rc = ts_tokenizer_decode(t, ids, m, &d, &err);
        if ((rc == 0) != all_ok) fuzz_fail("decode returned %d, ids all valid: %d", rc, all_ok);
        if (rc && d.len) fuzz_fail("failed decode changed its output");
        stream(t, ids, m, &st);
        if (ts_utf8_check(st.s ? st.s : "", st.len) != st.len) fuzz_fail("streaming decode gave invalid UTF-8");
        ts_text_free(&d);
        text_done(&st);
        free(ids);
    }
    return 0;
}
