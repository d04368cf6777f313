/* test_tokenizer.c: the tokenizer against Hugging Face goldens (group
 * `tokenizer`).
 *
 * Fixtures (tests/fixtures/tokenizer, see its README): both tokenizer.json
 * files, 314 short cases and 30 documents, all from HF `tokenizers` 0.23.2.
 * They are xz-compressed and unpacked once per run into the test tmpdir.
 * Every golden test counts mismatches over the whole set and requires zero,
 * printing the first few so a failure says what broke.
 *
 * cases.jsonl holds strings with U+0000, which cJSON's NUL-terminated strings
 * cannot carry, so the fields are read with the small JSON scanner below.
 */
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "text/tokenizer.h"
#include "ts_int.h"
#include "ts_test.h"

#define FIX "tests/fixtures/tokenizer"

/* ---- fixtures ---- */

static const char *unpacked(void) {
    static char dir[512];
    static int done;
    if (!done) {
        done = 1;
        snprintf(dir, sizeof dir, "%s/tokenizer", ts_test_tmpdir());
        char out[4096];
        int rc = ts_test_sh(out, sizeof out,
                            "mkdir -p %s && xz -dc " FIX "/qwen3.tokenizer.json.xz > %s/qwen3.json && "
                            "xz -dc " FIX "/qwen35-regex.tokenizer.json.xz > %s/qwen35.json && "
                            "xz -dc " FIX "/cases.jsonl.xz > %s/cases.jsonl && "
                            "xz -dc " FIX "/docs.tar.xz | tar -xf - -C %s",
                            dir, dir, dir, dir, dir);
        if (rc != 0) {
            fprintf(stderr, "  cannot unpack tokenizer fixtures: %s\n", out);
            dir[0] = 0;
        }
    }
    return dir[0] ? dir : NULL;
}

/* 0: qwen3, 1: qwen3.5 regex. Loaded once, kept for the whole run. */
static ts_tokenizer *tok(int which) {
    static ts_tokenizer *t[2];
    static int tried[2];
    if (!tried[which]) {
        tried[which] = 1;
        const char *d = unpacked();
        if (!d) return NULL;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", d, which ? "qwen35.json" : "qwen3.json");
        ts_error err;
        if (ts_tokenizer_load(path, &t[which], &err)) fprintf(stderr, "  load %s: %s\n", path, err.msg);
    }
    return t[which];
}

/* ---- a minimal JSON scanner (NUL-safe strings) ---- */

static const char *jws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        *v <<= 4;
        if (c >= '0' && c <= '9') *v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') *v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') *v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    return 0;
}

/* Decode the string literal at p (pointing at '"') into out (may be NULL);
 * returns the pointer after the closing quote, or NULL. */
static const char *jstr(const char *p, const char *e, char *out, size_t *n) {
    size_t o = 0;
    if (p >= e || *p != '"') return NULL;
    p++;
    while (p < e && *p != '"') {
        if (*p != '\\') {
            if (out) out[o] = *p;
            o++, p++;
            continue;
        }
        if (++p >= e) return NULL;
        char c = *p++;
        unsigned cp;
        switch (c) {
        case 'n': cp = '\n'; break;
        case 't': cp = '\t'; break;
        case 'r': cp = '\r'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'u':
            if (e - p < 4 || hex4(p, &cp)) return NULL;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && e - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                unsigned lo;
                if (hex4(p + 2, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            break;
        default: cp = (unsigned char)c; break;
        }
        char b[4];
        int k;
        if (cp < 0x80) b[0] = (char)cp, k = 1;
        else if (cp < 0x800) b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 63)), k = 2;
        else if (cp < 0x10000)
            b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 63)), b[2] = (char)(0x80 | (cp & 63)), k = 3;
        else
            b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 63)),
            b[2] = (char)(0x80 | ((cp >> 6) & 63)), b[3] = (char)(0x80 | (cp & 63)), k = 4;
        if (out) memcpy(out + o, b, (size_t)k);
        o += (size_t)k;
    }
    if (p >= e) return NULL;
    if (n) *n = o;
    return p + 1;
}

static const char *jskip(const char *p, const char *e) {
    p = jws(p, e);
    if (p >= e) return NULL;
    if (*p == '"') return jstr(p, e, NULL, NULL);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < e) {
            if (*p == '"') {
                p = jstr(p, e, NULL, NULL);
                if (!p) return NULL;
                continue;
            }
            if (*p == '{' || *p == '[') depth++;
            if (*p == '}' || *p == ']') {
                if (--depth == 0) return p + 1;
            }
            p++;
        }
        return NULL;
    }
    while (p < e && *p != ',' && *p != '}' && *p != ']') p++;
    return p;
}

/* The raw value of top-level key in the object at line; NULL if absent. */
static const char *jfield(const char *p, const char *e, const char *key) {
    p = jws(p, e);
    if (p >= e || *p != '{') return NULL;
    p++;
    char k[64];
    for (;;) {
        p = jws(p, e);
        if (p >= e || *p == '}') return NULL;
        size_t kn;
        const char *q = jstr(p, e, NULL, &kn);
        if (!q) return NULL;
        int match = kn < sizeof k && jstr(p, e, k, NULL) && kn == strlen(key) && !memcmp(k, key, kn);
        p = jws(q, e);
        if (p >= e || *p != ':') return NULL;
        p = jws(p + 1, e);
        if (match) return p;
        p = jskip(p, e);
        if (!p) return NULL;
        p = jws(p, e);
        if (p < e && *p == ',') p++;
    }
}

/* A string field into a malloc'd buffer. */
static char *jget_str(const char *line, const char *e, const char *key, size_t *n) {
    const char *v = jfield(line, e, key);
    if (!v) return NULL;
    size_t len;
    if (!jstr(v, e, NULL, &len)) return NULL;
    char *s = malloc(len + 1);
    jstr(v, e, s, NULL);
    s[len] = 0;
    *n = len;
    return s;
}

/* An array of ints into a malloc'd buffer; returns count or -1. */
static int jget_ids(const char *line, const char *e, const char *key, int32_t **ids) {
    const char *p = jfield(line, e, key);
    if (!p || *p != '[') return -1;
    int cap = 64, n = 0;
    int32_t *v = malloc(sizeof(int32_t) * (size_t)cap);
    p++;
    for (;;) {
        p = jws(p, e);
        if (p < e && *p == ']') break;
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) {
            free(v);
            return -1;
        }
        if (n == cap) v = realloc(v, sizeof(int32_t) * (size_t)(cap *= 2));
        v[n++] = (int32_t)x;
        p = jws(end, e);
        if (p < e && *p == ',') p++;
    }
    *ids = v;
    return n;
}

/* ---- the cases ---- */

typedef struct {
    char id[16];
    char *text;
    size_t text_n;
    char *decoded;
    size_t decoded_n;
    int32_t *ids[2];
    int n_ids[2];
    const char *pieces_raw[2]; /* into the line buffer */
    const char *line_end;
} tcase;

static tcase *g_cases;
static int g_n_cases;
static char *g_cases_buf;

static int load_cases(void) {
    if (g_cases) return g_n_cases;
    const char *d = unpacked();
    if (!d) return -1;
    char path[600];
    snprintf(path, sizeof path, "%s/cases.jsonl", d);
    size_t len;
    ts_error err;
    if (ts_read_file(path, &g_cases_buf, &len, &err)) return -1;
    int n = 0;
    for (size_t i = 0; i < len; i++) n += g_cases_buf[i] == '\n';
    g_cases = calloc((size_t)n + 1, sizeof(tcase));
    char *p = g_cases_buf, *end = g_cases_buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        if (le > p) {
            tcase *c = &g_cases[g_n_cases];
            size_t k;
            char *id = jget_str(p, le, "id", &k);
            snprintf(c->id, sizeof c->id, "%s", id ? id : "?");
            free(id);
            c->text = jget_str(p, le, "text", &c->text_n);
            c->decoded = jget_str(p, le, "decoded", &c->decoded_n);
            c->n_ids[0] = jget_ids(p, le, "ids_qwen3", &c->ids[0]);
            c->n_ids[1] = jget_ids(p, le, "ids_qwen35regex", &c->ids[1]);
            c->pieces_raw[0] = jfield(p, le, "pieces_qwen3");
            c->pieces_raw[1] = jfield(p, le, "pieces_qwen35regex");
            c->line_end = le;
            if (!c->text || !c->decoded || c->n_ids[0] < 0 || c->n_ids[1] < 0 || !c->pieces_raw[0] ||
                !c->pieces_raw[1]) {
                fprintf(stderr, "  cases.jsonl: bad line %d\n", g_n_cases + 1);
                return -1;
            }
            g_n_cases++;
        }
        p = le + 1;
    }
    return g_n_cases;
}

static void print_ids(const char *label, const int32_t *v, int n) {
    fprintf(stderr, "    %s (%d):", label, n);
    for (int i = 0; i < n && i < 24; i++) fprintf(stderr, " %d", v[i]);
    fprintf(stderr, n > 24 ? " ...\n" : "\n");
}

static void check_case_ids(int which) {
    ts_tokenizer *t = tok(which);
    CHECK(t != NULL);
    CHECK(load_cases() == 314);
    int bad = 0;
    ts_tokens v = {0};
    for (int i = 0; i < g_n_cases; i++) {
        tcase *c = &g_cases[i];
        v.n = 0;
        ts_error err;
        int rc = ts_tokenizer_encode(t, c->text, c->text_n, &v, &err);
        if (rc || v.n != c->n_ids[which] || memcmp(v.ids, c->ids[which], sizeof(int32_t) * (size_t)v.n)) {
            if (++bad <= 5) {
                fprintf(stderr, "  mismatch %s: %s\n", c->id, rc ? err.msg : "");
                print_ids("got", v.ids, v.n);
                print_ids("expected", c->ids[which], c->n_ids[which]);
            }
        }
    }
    ts_tokens_free(&v);
    fprintf(stderr, "  %s: %d/%d cases match\n", which ? "qwen35regex" : "qwen3", g_n_cases - bad, g_n_cases);
    CHECK_MSG(bad == 0, "%d of %d cases mismatch", bad, g_n_cases);
}

TS_TEST(tokenizer, cases_qwen3) { check_case_ids(0); }
TS_TEST(tokenizer, cases_qwen35regex) { check_case_ids(1); }

/* Pieces: compare the pre-tokenizer's output with pieces_* one by one. */
typedef struct {
    const char *p, *e; /* cursor in the golden JSON array */
    int idx, bad;
    char *buf;
} piece_cmp;

static void on_piece(void *ud, const char *s, size_t n, int added_id) {
    piece_cmp *pc = ud;
    if (pc->bad) return;
    pc->p = jws(pc->p, pc->e);
    if (pc->p < pc->e && *pc->p == ',') pc->p = jws(pc->p + 1, pc->e);
    size_t en;
    const char *q = (pc->p < pc->e && *pc->p == '"') ? jstr(pc->p, pc->e, pc->buf, &en) : NULL;
    if (!q || en != n || memcmp(pc->buf, s, n)) {
        pc->bad = pc->idx + 1;
        return;
    }
    pc->p = q;
    pc->idx++;
}

static void check_case_pieces(int which) {
    ts_tokenizer *t = tok(which);
    CHECK(t != NULL);
    CHECK(load_cases() == 314);
    int bad = 0;
    for (int i = 0; i < g_n_cases; i++) {
        tcase *c = &g_cases[i];
        piece_cmp pc = {c->pieces_raw[which] + 1, c->line_end, 0, 0, malloc((size_t)(c->line_end - c->pieces_raw[which]) + 1)};
        ts_error err;
        int rc = ts_tok_pretokenize(t, c->text, c->text_n, on_piece, &pc, &err);
        pc.p = jws(pc.p, pc.e);
        int end_ok = pc.p < pc.e && *pc.p == ']';
        if (rc || pc.bad || !end_ok) {
            if (++bad <= 5)
                fprintf(stderr, "  pieces mismatch %s at piece %d%s %s\n", c->id, pc.bad ? pc.bad - 1 : pc.idx,
                        end_ok ? "" : " (count differs)", rc ? err.msg : "");
        }
        free(pc.buf);
    }
    CHECK_MSG(bad == 0, "%d of %d cases have different pieces", bad, g_n_cases);
}

TS_TEST(tokenizer, pieces_qwen3) { check_case_pieces(0); }
TS_TEST(tokenizer, pieces_qwen35regex) { check_case_pieces(1); }

/* decode(ids) == decoded (the NFC text), whole and streamed token by token. */
TS_TEST(tokenizer, decode_roundtrip) {
    CHECK(load_cases() == 314);
    for (int which = 0; which < 2; which++) {
        ts_tokenizer *t = tok(which);
        CHECK(t != NULL);
        ts_detok *d;
        ts_error err;
        CHECK(ts_detok_new(t, &d, &err) == 0);
        int bad = 0, held = 0;
        ts_text whole = {0}, streamed = {0};
        for (int i = 0; i < g_n_cases; i++) {
            tcase *c = &g_cases[i];
            whole.len = 0;
            streamed.len = 0;
            int ok = ts_tokenizer_decode(t, c->ids[which], c->n_ids[which], &whole, &err) == 0 &&
                     whole.len == c->decoded_n && !memcmp(whole.s, c->decoded, c->decoded_n);
            ts_detok_reset(d);
            for (int k = 0; k < c->n_ids[which] && ok; k++) {
                const char *s;
                size_t n;
                ok = ts_detok_push(d, c->ids[which][k], &s, &n, &err) == 0;
                /* every chunk is whole characters */
                ok = ok && ts_utf8_check(s, n) == n;
                size_t tl;
                ts_tokenizer_token_bytes(t, c->ids[which][k], &tl);
                if (n < tl) held++;
                if (ok && n) {
                    char *ns = realloc(streamed.s, streamed.len + n + 1);
                    streamed.s = ns;
                    memcpy(streamed.s + streamed.len, s, n);
                    streamed.len += n;
                }
            }
            const char *s;
            size_t n;
            ts_detok_flush(d, &s, &n);
            ok = ok && n == 0 && streamed.len == c->decoded_n &&
                 (!streamed.len || !memcmp(streamed.s, c->decoded, streamed.len));
            if (!ok && ++bad <= 5) fprintf(stderr, "  decode mismatch %s\n", c->id);
        }
        ts_text_free(&whole);
        free(streamed.s);
        ts_detok_free(d);
        CHECK_MSG(bad == 0, "%d cases do not round-trip", bad);
        /* the streaming path must actually have held partial characters */
        CHECK_MSG(held > 50, "only %d tokens ended inside a character", held);
    }
}

/* The streaming decoder on hand-made sequences: a 4-byte emoji split over
 * byte tokens, a stray continuation byte, and a truncated tail at flush. */
TS_TEST(tokenizer, detok_stream) {
    ts_tokenizer *t = tok(0);
    CHECK(t != NULL);
    /* byte-level tokens for single bytes: look them up via their strings */
    ts_tokens v = {0};
    ts_error err;
    /* U+1F600 = F0 9F 98 80; encode gives some split; use single-byte ids */
    const uint8_t emoji[4] = {0xF0, 0x9F, 0x98, 0x80};
    int32_t ids[4];
    for (int i = 0; i < 4; i++) {
        /* the byte-level alphabet: bytes >= 0xA1 except 0xAD map to themselves */
        char s[4];
        unsigned cp = emoji[i] >= 0xA1 && emoji[i] != 0xAD ? emoji[i] : 0;
        if (!cp) {
            /* 0x80..0xA0 map to U+0100 + (index among unprintables) */
            int n = 0;
            for (int b = 0; b < 256; b++) {
                int pr = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
                if (b == emoji[i]) break;
                if (!pr) n++;
            }
            cp = 256u + (unsigned)n;
        }
        s[0] = (char)(0xC0 | cp >> 6), s[1] = (char)(0x80 | (cp & 63)), s[2] = 0;
        ids[i] = ts_tokenizer_token_id(t, s);
        CHECK_MSG(ids[i] >= 0, "no token for byte %02x", emoji[i]);
        size_t n;
        const char *b = ts_tokenizer_token_bytes(t, ids[i], &n);
        CHECK(n == 1 && (uint8_t)b[0] == emoji[i]);
    }
    ts_detok *d;
    CHECK(ts_detok_new(t, &d, &err) == 0);
    const char *s;
    size_t n;
    for (int i = 0; i < 3; i++) {
        CHECK(ts_detok_push(d, ids[i], &s, &n, &err) == 0);
        CHECK_MSG(n == 0, "byte %d of 4 emitted %zu bytes", i, n);
    }
    CHECK(ts_detok_push(d, ids[3], &s, &n, &err) == 0);
    CHECK(n == 4 && !memcmp(s, emoji, 4));
    /* a continuation byte on its own can never complete: U+FFFD at once */
    CHECK(ts_detok_push(d, ids[3], &s, &n, &err) == 0);
    CHECK(n == 3 && !memcmp(s, "\xEF\xBF\xBD", 3));
    /* a lead byte then end of stream: held, then U+FFFD at flush */
    CHECK(ts_detok_push(d, ids[0], &s, &n, &err) == 0 && n == 0);
    ts_detok_flush(d, &s, &n);
    CHECK(n == 3 && !memcmp(s, "\xEF\xBF\xBD", 3));
    /* a lead byte followed by ASCII: U+FFFD then the ASCII */
    CHECK(ts_detok_push(d, ids[0], &s, &n, &err) == 0 && n == 0);
    int32_t a = ts_tokenizer_token_id(t, "a");
    CHECK(ts_detok_push(d, a, &s, &n, &err) == 0);
    CHECK(n == 4 && !memcmp(s, "\xEF\xBF\xBD" "a", 4));
    /* an id outside the vocabulary is an error, not a crash */
    CHECK(ts_detok_push(d, 1 << 30, &s, &n, &err) == TS_E_ARG);
    CHECK(strstr(err.msg, "1073741824") != NULL);
    ts_detok_free(d);
    ts_tokens_free(&v);
}

/* ---- documents ---- */

static int parse_id_lines(const char *s, size_t n, int32_t **out) {
    int cnt = 0;
    for (size_t i = 0; i < n; i++) cnt += s[i] == '\n';
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(cnt + 1));
    int k = 0;
    const char *p = s, *e = s + n;
    while (p < e) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p) break;
        v[k++] = (int32_t)x;
        p = end;
        while (p < e && (*p == '\n' || *p == '\r')) p++;
    }
    *out = v;
    return k;
}

static void check_docs(int which) {
    ts_tokenizer *t = tok(which);
    CHECK(t != NULL);
    const char *d = unpacked();
    char cmd[1024], list[8192];
    snprintf(cmd, sizeof cmd, "ls %s/docs/*.txt", d);
    CHECK(ts_test_sh(list, sizeof list, "%s", cmd) == 0);
    int n_docs = 0, bad = 0;
    size_t bytes = 0;
    long tokens = 0;
    double secs = 0;
    ts_tokens v = {0};
    ts_text dec = {0};
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char *text, *ids_s;
        size_t tn, in;
        ts_error err;
        CHECK_MSG(ts_read_file(line, &text, &tn, &err) == 0, "%s", err.msg);
        char idp[600];
        snprintf(idp, sizeof idp, "%.*s.%s.ids", (int)(strlen(line) - 4), line, which ? "qwen35regex" : "qwen3");
        CHECK_MSG(ts_read_file(idp, &ids_s, &in, &err) == 0, "%s", err.msg);
        int32_t *exp;
        int n_exp = parse_id_lines(ids_s, in, &exp);
        v.n = 0;
        double t0 = ts_now();
        int rc = ts_tokenizer_encode(t, text, tn, &v, &err);
        secs += ts_now() - t0;
        int i = 0;
        while (i < v.n && i < n_exp && v.ids[i] == exp[i]) i++;
        if (rc || v.n != n_exp || i != n_exp) {
            bad++;
            fprintf(stderr, "  %s: %s first difference at token %d (got %d tokens, expected %d)\n", line,
                    rc ? err.msg : "", i, v.n, n_exp);
        }
        /* no document changes under NFC: decode gives the text back */
        dec.len = 0;
        if (!rc && (ts_tokenizer_decode(t, v.ids, v.n, &dec, &err) || dec.len != tn || memcmp(dec.s, text, tn))) {
            bad++;
            fprintf(stderr, "  %s: decode does not give the text back\n", line);
        }
        bytes += tn;
        tokens += n_exp;
        n_docs++;
        free(exp);
        ts_free(text);
        ts_free(ids_s);
    }
    ts_tokens_free(&v);
    ts_text_free(&dec);
    fprintf(stderr, "  %s: %d docs, %zu bytes, %ld tokens, %.1f MB/s (first pass, cold cache)\n",
            which ? "qwen35regex" : "qwen3", n_docs, bytes, tokens, bytes / 1e6 / secs);
    CHECK(n_docs == 30);
    CHECK(bytes == 1036974);
    CHECK(tokens == (which ? 257981 : 260868));
    CHECK_MSG(bad == 0, "%d document mismatches", bad);
}

TS_TEST(tokenizer, docs_qwen3) { check_docs(0); }
TS_TEST(tokenizer, docs_qwen35regex) { check_docs(1); }

/* ---- behaviour ---- */

TS_TEST(tokenizer, lookups) {
    ts_tokenizer *t = tok(1);
    CHECK(t != NULL);
    CHECK(ts_tokenizer_vocab_size(t) == 151669);
    CHECK(ts_tokenizer_token_id(t, "<|im_end|>") == 151645);
    CHECK(ts_tokenizer_token_id(t, "<|endoftext|>") == 151643);
    CHECK(ts_tokenizer_token_id(t, "<think>") == 151667);
    CHECK(ts_tokenizer_token_id(t, "Hello") == 9707);
    CHECK(ts_tokenizer_token_id(t, "Ġworld") == 1879);
    CHECK(ts_tokenizer_token_id(t, "no such token here") == -1);
    CHECK(ts_tokenizer_is_special(t, 151645) == 1);
    CHECK(ts_tokenizer_is_special(t, 151667) == 0); /* <think> is added, not special */
    CHECK(ts_tokenizer_is_special(t, 9707) == 0);
    size_t n;
    const char *b = ts_tokenizer_token_bytes(t, 1879, &n);
    CHECK(b && n == 6 && !memcmp(b, " world", 6));
    b = ts_tokenizer_token_bytes(t, 151645, &n);
    CHECK(b && n == 10 && !memcmp(b, "<|im_end|>", 10));
    CHECK(ts_tokenizer_token_bytes(t, 151669, &n) == NULL);
    CHECK(ts_tokenizer_token_bytes(t, -1, &n) == NULL);
    /* encode appends */
    ts_tokens v = {0};
    ts_error err;
    CHECK(ts_tokenizer_encode(t, "Hello", 5, &v, &err) == 0);
    CHECK(ts_tokenizer_encode(t, " world", 6, &v, &err) == 0);
    CHECK(v.n == 2 && v.ids[0] == 9707 && v.ids[1] == 1879);
    ts_tokens_free(&v);
}

static void count_piece(void *ud, const char *s, size_t n, int id) {
    (void)s, (void)n, (void)id;
    ++*(int *)ud;
}

/* The pre-tokenizer's \s is Oniguruma's: U+0085 (NEL) and U+180E are not
 * whitespace, unlike PCRE2's UCP \s. "!" + NEL is therefore one
 * punctuation piece (PCRE2's own \s would cut it in two), and so is
 * "!" + U+180E. U+3000 is whitespace in both. */
TS_TEST(tokenizer, oniguruma_whitespace) {
    ts_tokenizer *t = tok(0);
    CHECK(t != NULL);
    CHECK(strstr(ts_tok_regex(t), "\\s") == NULL && strstr(ts_tok_regex(t), "\\S") == NULL);
    struct { const char *text; int n_pieces; } cases[] = {
        {"!\xC2\x85", 1},
        {"!\xE1\xA0\x8E", 1},
        {"x\xE3\x80\x80\xE3\x80\x80y", 3}, /* "x", U+3000, U+3000 "y"... */
        {"a\x1c\x1d b", 3},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int count = 0;
        ts_error err;
        CHECK(ts_tok_pretokenize(t, cases[i].text, strlen(cases[i].text), count_piece, &count, &err) == 0);
        CHECK_MSG(count == cases[i].n_pieces, "case %u: %d pieces, expected %d", i, count, cases[i].n_pieces);
    }
}


TS_TEST(tokenizer, bad_utf8) {
    ts_tokenizer *t = tok(0);
    CHECK(t != NULL);
    const char *bad[] = {"abc\xff", "\xc0\x80", "\xed\xa0\x80", "ok \xe2\x82", "\xf4\x90\x80\x80", "\x80"};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_tokens v = {0};
        ts_error err = {0};
        int rc = ts_tokenizer_encode(t, bad[i], strlen(bad[i]), &v, &err);
        CHECK_MSG(rc == TS_E_ARG, "case %u: rc %d", i, rc);
        CHECK_MSG(strstr(err.msg, "UTF-8") != NULL, "case %u: message '%s'", i, err.msg);
        CHECK(v.n == 0);
        ts_tokens_free(&v);
    }
    /* the offset is reported */
    ts_tokens v = {0};
    ts_error err;
    CHECK(ts_tokenizer_encode(t, "abc\xff", 4, &v, &err) == TS_E_ARG);
    CHECK(strstr(err.msg, "offset 3") != NULL);
    /* a failed encode leaves earlier ids in place */
    CHECK(ts_tokenizer_encode(t, "Hello", 5, &v, &err) == 0);
    CHECK(ts_tokenizer_encode(t, "x\xff", 2, &v, &err) == TS_E_ARG && v.n == 1);
    ts_tokens_free(&v);
}

TS_TEST(tokenizer, decode_out_of_range) {
    ts_tokenizer *t = tok(0);
    CHECK(t != NULL);
    ts_text s = {0};
    ts_error err;
    int32_t ids[] = {9707, 151669};
    CHECK(ts_tokenizer_decode(t, ids, 2, &s, &err) == TS_E_ARG);
    CHECK(strstr(err.msg, "151669") != NULL && strstr(err.msg, "position 1") != NULL);
    CHECK(s.len == 0);
    int32_t neg[] = {-5};
    CHECK(ts_tokenizer_decode(t, neg, 1, &s, &err) == TS_E_ARG);
    ts_text_free(&s);
}

/* A 200,000-letter piece and 100,000 spaces: BPE and the regex must stay
 * near-linear (a quadratic BPE takes minutes here). */
TS_TEST(tokenizer, long_pieces) {
    ts_tokenizer *t = tok(0);
    CHECK(t != NULL);
    size_t n = 200000;
    char *s = malloc(n + 1);
    const char *fill[] = {"a", " ", "\xC3\xA9"};
    for (int f = 0; f < 3; f++) {
        size_t k = strlen(fill[f]), len = 0;
        while (len + k <= n) memcpy(s + len, fill[f], k), len += k;
        ts_tokens v = {0};
        ts_error err;
        double t0 = ts_now();
        CHECK(ts_tokenizer_encode(t, s, len, &v, &err) == 0);
        double dt = ts_now() - t0;
        CHECK_MSG(dt < 2.0, "fill %d: %.2f s", f, dt);
        ts_text d = {0};
        CHECK(ts_tokenizer_decode(t, v.ids, v.n, &d, &err) == 0);
        CHECK(d.len == len && !memcmp(d.s, s, len));
        CHECK(v.n > 0 && (size_t)v.n < len);
        ts_text_free(&d);
        ts_tokens_free(&v);
    }
    free(s);
}

/* ---- malformed and alternative tokenizer.json files ---- */

static const char *write_tmp(const char *name, const char *content) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", ts_test_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    fputs(content, f);
    fclose(f);
    return path;
}

/* A tiny byte-level tokenizer: the 256 byte tokens plus a few merges. */
static char *tiny_json(const char *merges, const char *extra) {
    size_t cap = 1 << 16;
    char *s = malloc(cap);
    size_t o = (size_t)snprintf(s, cap, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int pr = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        unsigned cp = pr ? (unsigned)b : 256u + (unsigned)n++;
        char u[8];
        if (cp < 0x80) {
            if (cp == '"' || cp == '\\') snprintf(u, sizeof u, "\\%c", cp);
            else snprintf(u, sizeof u, "%c", cp);
        } else {
            u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), u[2] = 0;
        }
        o += (size_t)snprintf(s + o, cap - o, "%s\"%s\": %d", b ? ", " : "", u, b);
    }
    o += (size_t)snprintf(s + o, cap - o,
                          ", \"ab\": 256, \"abc\": 257, \"\xC4\xA0" "a\": 258}, \"merges\": %s}, "
                          "\"normalizer\": {\"type\": \"NFC\"}, "
                          "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}, "
                          "\"decoder\": {\"type\": \"ByteLevel\"}%s}",
                          merges, extra);
    return s;
}

static int encode_with(const char *path, const char *text, int32_t *out, int cap, ts_error *err) {
    ts_tokenizer *t;
    int rc = ts_tokenizer_load(path, &t, err);
    if (rc) return rc;
    ts_tokens v = {0};
    rc = ts_tokenizer_encode(t, text, strlen(text), &v, err);
    int n = rc ? rc : v.n;
    for (int i = 0; !rc && i < v.n && i < cap; i++) out[i] = v.ids[i];
    ts_tokens_free(&v);
    ts_tokenizer_free(t);
    return n;
}

TS_TEST(tokenizer, merges_both_forms) {
    char *pair = tiny_json("[[\"a\", \"b\"], [\"ab\", \"c\"], [\"\xC4\xA0\", \"a\"]]", "");
    char *legacy = tiny_json("[\"a b\", \"ab c\", \"\xC4\xA0 a\"]", "");
    int32_t x[16], y[16];
    ts_error err;
    int nx = encode_with(write_tmp("pair.json", pair), "abc ab abd", x, 16, &err);
    CHECK_MSG(nx > 0, "%s", err.msg);
    int ny = encode_with(write_tmp("legacy.json", legacy), "abc ab abd", y, 16, &err);
    CHECK_MSG(ny > 0, "%s", err.msg);
    /* "abc" | " ab" | " abd": (a,b) outranks (Ġ,a), so Ġ stays alone */
    int32_t exp[] = {257, ' ', 256, ' ', 256, 'd'};
    CHECK(nx == 6 && !memcmp(x, exp, sizeof exp));
    CHECK(ny == nx && !memcmp(x, y, sizeof exp));
    free(pair);
    free(legacy);
}

TS_TEST(tokenizer, added_tokens_tiny) {
    /* a special token, a non-special one, and one that is a prefix of another
     * (leftmost-longest must pick the longer) */
    char *j = tiny_json("[[\"a\", \"b\"]]",
                        ", \"added_tokens\": ["
                        "{\"id\": 300, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
                        "{\"id\": 301, \"content\": \"<s>x\", \"special\": false, \"normalized\": false},"
                        "{\"id\": 302, \"content\": \"\xC3\x85\", \"special\": false, \"normalized\": true}]");
    const char *p = write_tmp("added.json", j);
    ts_tokenizer *t;
    ts_error err;
    CHECK_MSG(ts_tokenizer_load(p, &t, &err) == 0, "%s", err.msg);
    CHECK(ts_tokenizer_vocab_size(t) == 303);
    ts_tokens v = {0};
    CHECK(ts_tokenizer_encode(t, "ab<s>xab<s>", 11, &v, &err) == 0);
    int32_t exp[] = {256, 301, 256, 300};
    CHECK(v.n == 4 && !memcmp(v.ids, exp, sizeof exp));
    /* a normalized added token matches after NFC: A + U+030A composes to U+00C5 */
    v.n = 0;
    CHECK(ts_tokenizer_encode(t, "A\xCC\x8A", 3, &v, &err) == 0);
    CHECK_MSG(v.n == 1 && v.ids[0] == 302, "n=%d id=%d", v.n, v.n ? v.ids[0] : -1);
    ts_tokens_free(&v);
    ts_tokenizer_free(t);
    free(j);
}

TS_TEST(tokenizer, malformed_files) {
    struct { const char *name, *json, *expect; int code; } cases[] = {
        {"trunc.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", "invalid JSON", TS_E_FORMAT},
        {"nomodel.json", "{\"version\": \"1.0\"}", "\"model\"", TS_E_FORMAT},
        {"novocab.json", "{\"model\": {\"type\": \"BPE\", \"merges\": []}}", "model.vocab", TS_E_FORMAT},
        {"badid.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}", "model.vocab[\"a\"]",
         TS_E_FORMAT},
        {"badmerge.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
         "merged token", TS_E_FORMAT},
        {"badmerge2.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "\"a b\"",
         TS_E_FORMAT},
        {"wordpiece.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece", TS_E_UNSUPPORTED},
        {"norm.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"Lowercase\"}}",
         "Lowercase", TS_E_UNSUPPORTED},
        {"regex.json",
         "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
         "\"pattern\": {\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
         "regex", TS_E_FORMAT},
        {"added.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 1}]}",
         "added_tokens[0].content", TS_E_FORMAT},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = write_tmp(cases[i].name, cases[i].json);
        ts_tokenizer *t = (ts_tokenizer *)1;
        ts_error err = {0};
        int rc = ts_tokenizer_load(p, &t, &err);
        CHECK_MSG(rc == cases[i].code, "%s: rc %d (%s)", cases[i].name, rc, err.msg);
        CHECK(t == NULL);
        CHECK_MSG(strstr(err.msg, cases[i].expect) && strstr(err.msg, cases[i].name), "%s: message '%s'",
                  cases[i].name, err.msg);
    }
    ts_tokenizer *t;
    ts_error err;
    CHECK(ts_tokenizer_load("/nonexistent/tokenizer.json", &t, &err) == TS_E_IO);
}

/* Allocation failure anywhere in load or encode is a clean error. */
TS_TEST(tokenizer, alloc_failure) {
    char *j = tiny_json("[[\"a\", \"b\"], [\"ab\", \"c\"]]", "");
    const char *p = write_tmp("oom.json", j);
    size_t before = ts_mem_total();
    int failures = 0;
    for (long k = 1; k < 200; k++) {
        ts_tokenizer *t = NULL;
        ts_error err;
        ts_mem_fail_after(k);
        int rc = ts_tokenizer_load(p, &t, &err);
        if (!rc) {
            ts_tokens v = {0};
            rc = ts_tokenizer_encode(t, "abc abc abcd", 12, &v, &err);
            ts_tokens_free(&v);
            ts_tokenizer_free(t);
        }
        ts_mem_fail_after(0);
        if (rc) {
            failures++;
            CHECK_MSG(rc == TS_E_NOMEM || rc == TS_E_IO, "k=%ld rc=%d %s", k, rc, err.msg);
        }
        CHECK_MSG(ts_mem_total() == before, "k=%ld: %zu bytes leaked", k, ts_mem_total() - before);
    }
    CHECK(failures > 10);
    free(j);
}

/* Two threads encoding with one tokenizer get the same ids as one thread. */
typedef struct { ts_tokenizer *t; int ok; } thr_arg;
static void *thr_main(void *a) {
    thr_arg *x = a;
    x->ok = 1;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < g_n_cases; i++) {
            ts_tokens v = {0};
            ts_error err;
            tcase *c = &g_cases[i];
            if (ts_tokenizer_encode(x->t, c->text, c->text_n, &v, &err) || v.n != c->n_ids[0] ||
                memcmp(v.ids, c->ids[0], sizeof(int32_t) * (size_t)v.n))
                x->ok = 0;
            ts_tokens_free(&v);
        }
    return NULL;
}

TS_TEST(tokenizer, threads) {
    ts_tokenizer *t = tok(0);
    CHECK(t != NULL);
    CHECK(load_cases() == 314);
    pthread_t th[2];
    thr_arg a[2] = {{t, 0}, {t, 0}};
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, thr_main, &a[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(a[0].ok && a[1].ok);
}

/* ---- the CLI ---- */

TS_TEST(tokenizer, cli) {
    const char *d = unpacked();
    CHECK(d != NULL);
    char out[8192];
    const char *bin = ts_test_bin();
    CHECK(ts_test_sh(out, sizeof out, "%s tokenize -t %s/qwen3.json -p 'Hello world'", bin, d) == 0);
    CHECK_MSG(!strcmp(out, "9707,1879\n"), "got '%s'", out);
    /* a directory holding tokenizer.json */
    CHECK(ts_test_sh(out, sizeof out, "mkdir -p %s/m && cp %s/qwen3.json %s/m/tokenizer.json && "
                     "%s tokenize -t %s/m -p '<|im_start|>user'", d, d, d, bin, d) == 0);
    CHECK_MSG(!strcmp(out, "151644,872\n"), "got '%s'", out);
    CHECK(ts_test_sh(out, sizeof out, "%s tokenize -t %s/qwen3.json --decode 151644,872,198,9707", bin, d) == 0);
    CHECK_MSG(!strcmp(out, "<|im_start|>user\nHello"), "got '%s'", out);
    /* --jsonl: one line of ids per record, NUL and empty texts included */
    CHECK(ts_test_sh(out, sizeof out,
                     "printf '%%s\\n' '{\"text\": \"Hello world\"}' '{\"id\": 1, \"text\": \"\"}' "
                     "'{\"text\": \"NUL\\u0000inside\"}' > %s/in.jsonl && %s tokenize -t %s/qwen3.json --jsonl %s/in.jsonl",
                     d, bin, d, d) == 0);
    CHECK_MSG(!strcmp(out, "9707,1879\n\n45,1094,188,41350\n"), "got '%s'", out);
    /* -f: a whole file */
    CHECK(ts_test_sh(out, sizeof out, "printf 'Hello world' > %s/in.txt && %s tokenize -t %s/qwen3.json -f %s/in.txt",
                     d, bin, d, d) == 0);
    CHECK_MSG(!strcmp(out, "9707,1879\n"), "got '%s'", out);
    /* errors: non-zero exit and a message */
    CHECK(ts_test_sh(out, sizeof out, "%s tokenize -t %s/qwen3.json --decode 1,999999", bin, d) != 0);
    CHECK(strstr(out, "999999") != NULL);
    CHECK(ts_test_sh(out, sizeof out, "printf 'a\\377b' > %s/bad.txt && %s tokenize -t %s/qwen3.json -f %s/bad.txt",
                     d, bin, d, d) != 0);
    CHECK(strstr(out, "UTF-8") != NULL);
    CHECK(ts_test_sh(out, sizeof out, "%s tokenize -t %s/nope.json -p x", bin, d) != 0);
    CHECK(strstr(out, "nope.json") != NULL);
}
