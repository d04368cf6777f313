/* fuzz_size.c: ts_parse_size (the --expert-cache SIZE text).
 * Input: the text (up to a NUL byte).
 * Property: against an independent reading of the contract in
 * include/turbospark.h, in 128-bit arithmetic: digits, an optional fraction
 * (its first 9 digits count), an optional K/M/G/T (powers of 1024) with B or
 * iB, or a plain B; a fraction needs a suffix; the value rounded to the
 * nearest byte must lie in [1, 2^64). Accepted exactly then and with that
 * value; otherwise TS_E_ARG with a message and the output untouched. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "turbospark.h"

typedef unsigned __int128 u128;

/* 1 and *v when the text is a size, 0 otherwise. */
static int reference(const char *s, uint64_t *v) {
    const char *p = s;
    u128 whole = 0;
    int nd = 0, big = 0;
    for (; *p >= '0' && *p <= '9'; p++, nd++) {
        whole = whole * 10 + (unsigned)(*p - '0');
        if (whole > (u128)UINT64_MAX) big = 1, whole = (u128)UINT64_MAX + 1;
    }
    if (!nd) return 0;
    u128 fnum = 0, fden = 1;
    int nf = -1;
    if (*p == '.') {
        p++;
        for (nf = 0; *p >= '0' && *p <= '9'; p++, nf++)
            if (nf < 9) fnum = fnum * 10 + (unsigned)(*p - '0'), fden *= 10;
        if (!nf) return 0;
    }
    const char *suf = "KMGT", *q = *p ? strchr(suf, *p >= 'a' ? *p - 32 : *p) : NULL;
    u128 mult = 1;
    if (q && *p) mult = (u128)1 << (10 * (q - suf + 1)), p++;
    if (mult > 1 && !strcmp(p, "iB")) p += 2;
    else if (!strcmp(p, "B")) p++;
    if (*p || (nf >= 0 && mult == 1) || big) return 0;
    u128 x = whole * mult + (fnum * mult + fden / 2) / fden;
    if (x == 0 || x > (u128)UINT64_MAX) return 0;
    *v = (uint64_t)x;
    return 1;
}

int fuzz_size(const uint8_t *data, size_t size) {
    char *s = fuzz_strndup(data, size); /* stops at an embedded NUL as a C string does */
    uint64_t v = 0x5a5a5a5a5a5a5a5aull, want = 0;
    ts_error err = {0};
    int rc = ts_parse_size(s, &v, &err), ok = reference(s, &want);
    if (rc && rc != TS_E_ARG) fuzz_fail("error %d (not TS_E_ARG)", rc);
    if (rc && !err.msg[0]) fuzz_fail("error without a message");
    if (rc && v != 0x5a5a5a5a5a5a5a5aull) fuzz_fail("output changed on error");
    if ((rc == 0) != ok) fuzz_fail("'%.100s': parser %s, the contract %s", s, rc ? "refused" : "accepted", ok ? "accepts" : "refuses");
    if (ok && v != want) fuzz_fail("'%.100s' -> %llu, expected %llu", s, (unsigned long long)v, (unsigned long long)want);
    free(s);
    return 0;
}
