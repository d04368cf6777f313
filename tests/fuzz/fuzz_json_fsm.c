/* fuzz_json_fsm.c: the byte-level JSON recognizer (src/text/json_fsm.c)
 * behind JSON-constrained generation.
 * Input: a candidate JSON text (any bytes).
 * Properties: feeding the bytes one at a time and at once agree; the
 * verdict (complete text or not) is cJSON's (cJSON_ParseWithLengthOpts,
 * require_null_terminated) except where a named difference between cJSON
 * and RFC 8259 is present (fuzz_json_rfc_diff: the RFC wins); the longest
 * live prefix completes (fuzz_json_complete) to a text the recognizer
 * calls complete and, when it has none of those constructs, cJSON accepts;
 * an object_only state accepts a subset of the texts. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "text/json_fsm.h"
#include "text/tokenizer.h"

/* ---- where cJSON departs from RFC 8259 ----
 * A lax scan of the text (strings with escapes, everything else) that
 * names the constructs cJSON reads differently from the RFC (fuzz.h). */

static int rfc_number(const char *p, size_t n) {
    size_t i = 0;
    if (i < n && p[i] == '-') i++;
    if (i < n && p[i] == '0') i++;
    else if (i < n && p[i] >= '1' && p[i] <= '9')
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
    else return 0;
    if (i < n && p[i] == '.') {
        if (++i >= n || !(p[i] >= '0' && p[i] <= '9')) return 0;
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++;
        if (i >= n || !(p[i] >= '0' && p[i] <= '9')) return 0;
        while (i < n && p[i] >= '0' && p[i] <= '9') i++;
    }
    return i == n;
}

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

int fuzz_json_rfc_diff(const char *d, size_t n) {
    int f = 0, depth = 0, maxd = 0, run = 0;
    if (ts_utf8_check(d, n) != n) f |= D_UTF8;
    if (n >= 3 && !memcmp(d, "\xEF\xBB\xBF", 3)) f |= D_BOM;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)d[i];
        if (c == '"') {
            for (i++; i < n && d[i] != '"'; i++) {
                if ((unsigned char)d[i] < 0x20) f |= D_CTRL_STR;
                if (d[i] == '\\' && i + 1 < n) {
                    if (d[i + 1] == 'u') {
                        int u = 0, ok = i + 5 < n;
                        for (int k = 0; k < 4 && ok; k++) ok &= hexv(d[i + 2 + k]) >= 0, u = u * 16 + hexv(d[i + 2 + k]);
                        if (!ok) f |= D_HEX;
                        /* a high surrogate followed by \u of a low one is a pair */
                        if (ok && u >= 0xD800 && u <= 0xDBFF && i + 11 < n && d[i + 6] == '\\' && d[i + 7] == 'u') {
                            int v = 0;
                            for (int k = 0; k < 4; k++) v = v * 16 + (hexv(d[i + 8 + k]) < 0 ? 99 : hexv(d[i + 8 + k]));
                            if (v >= 0xDC00 && v <= 0xDFFF) {
                                i += 11;
                                continue;
                            }
                        }
                        if (ok && u >= 0xD800 && u <= 0xDFFF) f |= D_SURROGATE;
                    }
                    i++;
                }
            }
            continue;
        }
        if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r') f |= D_CTRL_WS;
        run = c == ' ' || c == '\t' || c == '\n' || c == '\r' ? run + 1 : 0;
        if (run > TS_JSON_MAX_WS) f |= D_WS_RUN;
        if (c == '[' || c == '{') maxd = (++depth > maxd ? depth : maxd);
        if (c == ']' || c == '}') depth--;
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            while (j < n && strchr("0123456789+-.eE", d[j]) && d[j]) j++;
            if (!rfc_number(d + i, j - i)) f |= D_NUMBER;
            i = j - 1;
        }
    }
    if (maxd >= 1000) f |= D_DEPTH;
    return f;
}


size_t fuzz_json_complete(const void *stp, uint8_t *out, size_t cap) {
    /* the first byte of a fixed preference list the recognizer takes, until
     * the text is complete: the list closes strings, values and containers
     * first; a literal's letters, hex digits, UTF-8 continuation bytes and
     * the object start of an object_only text come after */
    static const uint8_t pref[] = {'"', ':', '}', ']', '0', 'r', 'u', 'e', 'a', 'l', 's', 0x80, 0x90, 0xA0, '{'};
    ts_jfsm st = *(const ts_jfsm *)stp;
    size_t n = 0;
    while (!ts_jfsm_complete(&st)) {
        size_t k = 0;
        for (; k < sizeof pref; k++) {
            ts_jfsm t = st;
            if (ts_jfsm_feed(&t, pref[k])) {
                st = t;
                break;
            }
        }
        if (k == sizeof pref || n == cap) return (size_t)-1;
        out[n++] = pref[k];
    }
    return n;
}

static int cjson_ok(const char *z, size_t n) {
    cJSON *j = cJSON_ParseWithLengthOpts(z, n + 1, NULL, 1);
    cJSON_Delete(j);
    return j != NULL;
}

int fuzz_json_fsm(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    /* no NUL bytes: cJSON would stop at one */
    char *z = malloc(size + 8 * TS_JSON_MAX_DEPTH + 64);
    size_t n = 0;
    for (size_t i = 0; i < size; i++) z[n++] = data[i] ? (char)data[i] : ' ';
    z[n] = 0;
    ts_jfsm a, b;
    ts_jfsm_init(&a, 0);
    int ok = 1;
    size_t live = 0;
    for (; live < n; live++) {
        ts_jfsm t = a;
        if (!ts_jfsm_feed(&t, (uint8_t)z[live])) {
            ok = 0;
            break;
        }
        a = t;
    }
    ts_jfsm_init(&b, 0);
    const int whole = ts_jfsm_feed_bytes(&b, z, n);
    if (whole != ok) fuzz_fail("byte at a time %d, all at once %d", ok, whole);
    const int ours = ok && ts_jfsm_complete(&a), cj = cjson_ok(z, n), f = fuzz_json_rfc_diff(z, n);
    if (ours != cj) {
        const int allowed =
            ours ? (D_SURROGATE | D_DEPTH) : (D_CTRL_WS | D_CTRL_STR | D_UTF8 | D_NUMBER | D_BOM | D_HEX | D_WS_RUN);
        if (!(f & allowed)) fuzz_fail("recognizer %d, cJSON %d, and no named difference (flags %d)", ours, cj, f);
    }
    ts_jfsm o;
    ts_jfsm_init(&o, 1);
    if (ts_jfsm_feed_bytes(&o, z, n) && ts_jfsm_complete(&o) && !ours) fuzz_fail("object_only accepts what any-value refuses");
    /* the longest live prefix completes */
    const size_t k = fuzz_json_complete(&a, (uint8_t *)z + live, 8 * TS_JSON_MAX_DEPTH + 63);
    if (k == (size_t)-1) fuzz_fail("the live prefix of %zu bytes does not complete", live);
    z[live + k] = 0;
    ts_jfsm c;
    ts_jfsm_init(&c, 0);
    if (!ts_jfsm_feed_bytes(&c, z, live + k) || !ts_jfsm_complete(&c)) fuzz_fail("the completion is refused");
    if (!fuzz_json_rfc_diff(z, live + k) && !cjson_ok(z, live + k))
        fuzz_fail("the live prefix of %zu bytes completed: cJSON refuses it", live);
    free(z);
    return 0;
}
