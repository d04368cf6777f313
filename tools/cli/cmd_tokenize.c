/* cmd_tokenize.c: `turbospark tokenize`, text to ids (and ids to text) for
 * scripts and tests.
 *
 *   turbospark tokenize -t TOKENIZER (-p TEXT | -f FILE | --jsonl FILE)
 *   turbospark tokenize -t TOKENIZER --decode 1,2,3
 *
 * TOKENIZER is a tokenizer.json or a model directory holding one (-m is an
 * alias). Ids are printed comma-separated on one line. With --jsonl every
 * input line is a JSON object with a "text" field, and every output line
 * holds that text's ids (an empty text gives an empty line). --decode prints
 * the decoded bytes exactly, with no newline added. -f - reads stdin.
 * Owns only argument handling and I/O; the tokenizer is the library's.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: turbospark tokenize -t TOKENIZER (-p TEXT | -f FILE | --jsonl FILE)\n"
            "       turbospark tokenize -t TOKENIZER --decode 1,2,3\n"
            "  -t, -m PATH     tokenizer.json, or a model directory that holds one\n"
            "  -p TEXT         encode TEXT\n"
            "  -f FILE         encode the whole file (- for stdin)\n"
            "  --jsonl FILE    one JSON object with a \"text\" field per line; one line of ids each\n"
            "  --decode IDS    print the text of comma-separated ids (bytes exactly, no newline)\n");
}


static int print_ids(ts_tokenizer *t, const char *text, size_t len, const char *what) {
    ts_tokens v = {0};
    ts_error err;
    if (ts_tokenizer_encode(t, text, len, &v, &err)) {
        fprintf(stderr, "turbospark tokenize: %s: %s\n", what, err.msg);
        return 1;
    }
    for (int i = 0; i < v.n; i++) printf(i ? ",%d" : "%d", v.ids[i]);
    putchar('\n');
    ts_tokens_free(&v);
    return 0;
}

/* cJSON strings are NUL-terminated, so a text holding U+0000 would be cut
 * short. After cJSON has validated the line, the top-level "text" literal is
 * decoded again here from the raw bytes, with its true length. */
static const char *jstr_skip(const char *p, const char *e) {
    for (p++; p < e && *p != '"'; p++)
        if (*p == '\\') p++;
    return p < e ? p + 1 : NULL;
}

static const char *jvalue_skip(const char *p, const char *e) {
    int depth = 0;
    while (p < e) {
        if (*p == '"') {
            if (!(p = jstr_skip(p, e))) return NULL;
            if (!depth) return p;
            continue;
        }
        if (*p == '{' || *p == '[') depth++;
        else if (*p == '}' || *p == ']') {
            if (depth == 0) return p;
            if (--depth == 0) return p + 1;
        } else if (*p == ',' && !depth) return p;
        p++;
    }
    return p;
}

/* Decode the literal at p into out (room for e - p bytes); returns length. */
static size_t jstr_decode(const char *p, const char *e, char *out) {
    size_t o = 0;
    for (p++; p < e && *p != '"'; p++) {
        if (*p != '\\') {
            out[o++] = *p;
            continue;
        }
        char c = *++p;
        unsigned cp = (unsigned char)c;
        if (c == 'n') cp = '\n';
        else if (c == 't') cp = '\t';
        else if (c == 'r') cp = '\r';
        else if (c == 'b') cp = '\b';
        else if (c == 'f') cp = '\f';
        else if (c == 'u') {
            cp = (unsigned)strtoul((char[5]){p[1], p[2], p[3], p[4], 0}, NULL, 16);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p + 6 < e && p[1] == '\\' && p[2] == 'u') {
                unsigned lo = (unsigned)strtoul((char[5]){p[3], p[4], p[5], p[6], 0}, NULL, 16);
                if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00), p += 6;
            }
        }
        if (cp < 0x80) out[o++] = (char)cp;
        else if (cp < 0x800) out[o++] = (char)(0xC0 | cp >> 6), out[o++] = (char)(0x80 | (cp & 63));
        else if (cp < 0x10000)
            out[o++] = (char)(0xE0 | cp >> 12), out[o++] = (char)(0x80 | ((cp >> 6) & 63)),
            out[o++] = (char)(0x80 | (cp & 63));
        else
            out[o++] = (char)(0xF0 | cp >> 18), out[o++] = (char)(0x80 | ((cp >> 12) & 63)),
            out[o++] = (char)(0x80 | ((cp >> 6) & 63)), out[o++] = (char)(0x80 | (cp & 63));
    }
    return o;
}

/* The raw "text" value of a (valid) JSON object line, or NULL. */
static const char *raw_text_field(const char *p, const char *e) {
    while (p < e && *p != '{') p++;
    for (p++; p < e;) {
        while (p < e && (*p == ' ' || *p == '\t' || *p == ',' || *p == '\r')) p++;
        if (p >= e || *p != '"') return NULL;
        const char *k = p, *ke = jstr_skip(p, e);
        if (!ke) return NULL;
        p = ke;
        while (p < e && (*p == ' ' || *p == '\t' || *p == ':')) p++;
        if (ke - k == 6 && !memcmp(k, "\"text\"", 6)) return p;
        if (!(p = jvalue_skip(p, e))) return NULL;
    }
    return NULL;
}

static int run_jsonl(ts_tokenizer *t, const char *path) {
    size_t len;
    char *buf = cli_read_file_len(path, &len);
    if (!buf) {
        fprintf(stderr, "turbospark tokenize: cannot read %s\n", path);
        return 1;
    }
    int rc = 0, line = 0;
    char *p = buf, *end = buf + len;
    while (p < end && !rc) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        line++;
        cJSON *o = cJSON_ParseWithLength(p, (size_t)(le - p));
        const cJSON *tx = o ? cJSON_GetObjectItemCaseSensitive(o, "text") : NULL;
        if (!cJSON_IsString(tx)) {
            fprintf(stderr, "turbospark tokenize: %s:%d: not a JSON object with a string \"text\" field\n", path, line);
            rc = 1;
        } else {
            char what[64];
            snprintf(what, sizeof what, "line %d", line);
            const char *raw = raw_text_field(p, le);
            char *dec = raw && *raw == '"' ? malloc((size_t)(le - raw) + 1) : NULL;
            if (dec) {
                rc = print_ids(t, dec, jstr_decode(raw, le, dec), what);
                free(dec);
            } else {
                rc = print_ids(t, tx->valuestring, strlen(tx->valuestring), what);
            }
        }
        cJSON_Delete(o);
        p = le + 1;
        /* a final newline does not start another record */
    }
    free(buf);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *tok = NULL, *text = NULL, *file = NULL, *jsonl = NULL, *decode = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "-m") || !strcmp(a, "--tokenizer")) && has) {
            tok = argv[++i];
        } else if (!strcmp(a, "-p") && has) {
            text = argv[++i];
        } else if (!strcmp(a, "-f") && has) {
            file = argv[++i];
        } else if (!strcmp(a, "--jsonl") && has) {
            jsonl = argv[++i];
        } else if (!strcmp(a, "--decode") && has) {
            decode = argv[++i];
        } else {
            fprintf(stderr, "turbospark tokenize: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!tok) tok = cli_default_model();
    if (!tok || (!!text + !!file + !!jsonl + !!decode) != 1) {
        usage(stderr);
        return 2;
    }
    ts_tokenizer *t;
    ts_error err;
    if (ts_tokenizer_load(tok, &t, &err)) {
        fprintf(stderr, "turbospark tokenize: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (text) {
        rc = print_ids(t, text, strlen(text), "-p");
    } else if (file) {
        size_t len;
        char *buf = cli_read_file_len(file, &len);
        if (!buf) {
            fprintf(stderr, "turbospark tokenize: cannot read %s\n", file);
            rc = 1;
        } else {
            rc = print_ids(t, buf, len, file);
            free(buf);
        }
    } else if (jsonl) {
        rc = run_jsonl(t, jsonl);
    } else {
        int *ids;
        int n = cli_parse_ids(decode, &ids);
        if (n < 0) {
            fprintf(stderr, "turbospark tokenize: --decode: '%s' is not a comma-separated list of ids\n", decode);
            rc = 2;
        } else {
            ts_text out = {0};
            int32_t *v = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
            for (int i = 0; v && i < n; i++) v[i] = ids[i];
            if (!v || ts_tokenizer_decode(t, v, n, &out, &err)) {
                fprintf(stderr, "turbospark tokenize: --decode: %s\n", v ? err.msg : "out of memory");
                rc = 1;
            } else if (out.len) {
                fwrite(out.s, 1, out.len, stdout);
            }
            free(v);
            free(ids);
            ts_text_free(&out);
        }
    }
    ts_tokenizer_free(t);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}
