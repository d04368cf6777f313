/* util.c: errors, the counted allocator, dtype helpers, file helpers.
 *
 * The allocator keeps a small header in front of each block (size and
 * category) so that ts_free can decrement the right counter. Blocks are
 * 64-byte aligned for SIMD loads.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "ts_int.h"

/* ---- errors ---- */

int ts_fail(ts_error *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int ts_fail_prefix(ts_error *err, const char *fmt, ...) {
    if (!err) return TS_E_ARG;
    char old[sizeof err->msg];
    memcpy(old, err->msg, sizeof old);
    char pre[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    /* the prefix, then as much of the old message as fits (truncation is
     * meant: written in two steps so that no build warns about it) */
    int k = snprintf(err->msg, sizeof err->msg, "%s: ", pre);
    if (k > 0 && (size_t)k < sizeof err->msg) {
        const size_t n = strnlen(old, sizeof err->msg - (size_t)k - 1);
        memcpy(err->msg + k, old, n);
        err->msg[(size_t)k + n] = 0;
    }
    return err->code;
}

/* ---- allocator ---- */

#define TS_ALIGN 64
typedef struct {
    size_t bytes;
    int cat;
    int mapped; /* 1: an anonymous mapping of its own (large blocks) */
    uint32_t magic;
} blk_hdr;
#define TS_HDR TS_ALIGN /* header padded to keep the payload aligned */
#define TS_MAGIC 0x7511a10cu
#define TS_BIG_BLOCK ((size_t)4 << 20)

static size_t g_used[TS_DOM_N][TS_MEM_N]; /* ts_alloc counts host; backends count the rest (ts_mem_account) */
static long g_fail_after; /* fault injection countdown, 0 = off */

void ts_mem_fail_after(long n) { g_fail_after = n; }

void *ts_alloc(size_t bytes, ts_mem_cat cat) {
    if (g_fail_after > 0 && --g_fail_after == 0) return NULL;
    if (bytes > SIZE_MAX - 2 * TS_ALIGN) return NULL;
    void *raw = NULL;
    int mapped = 0;
    if (bytes >= TS_BIG_BLOCK) {
        /* Large blocks (weights repacked at load, KV caches, GDN states): a
         * mapping of their own comes zeroed by the kernel, page by page as
         * it is first touched (by the threads that fill it, not one memset),
         * and may use transparent huge pages: fewer TLB misses, and the
         * hardware prefetchers are not stopped at every 4 KiB boundary. */
        raw = mmap(NULL, TS_HDR + bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
        madvise(raw, TS_HDR + bytes, MADV_HUGEPAGE);
#endif
        mapped = 1;
    } else {
        if (posix_memalign(&raw, TS_ALIGN, TS_HDR + bytes) != 0) return NULL;
        memset(raw, 0, TS_HDR + bytes);
    }
    blk_hdr *h = raw;
    h->mapped = mapped;
    h->bytes = bytes;
    h->cat = cat;
    h->magic = TS_MAGIC;
    __atomic_add_fetch(&g_used[TS_DOM_HOST][cat], bytes, __ATOMIC_RELAXED);
    return (char *)raw + TS_HDR;
}

void ts_free(void *p) {
    if (!p) return;
    blk_hdr *h = (blk_hdr *)((char *)p - TS_HDR);
    if (h->magic != TS_MAGIC) abort(); /* broken invariant: not ours */
    h->magic = 0;
    __atomic_sub_fetch(&g_used[TS_DOM_HOST][h->cat], h->bytes, __ATOMIC_RELAXED);
    if (h->mapped) munmap(h, TS_HDR + h->bytes);
    else free(h);
}

char *ts_strdup(const char *s, ts_mem_cat cat) {
    size_t n = strlen(s);
    char *d = ts_alloc(n + 1, cat);
    if (d) memcpy(d, s, n + 1);
    return d;
}

size_t ts_mem_used_in(ts_mem_domain dom, ts_mem_cat cat) {
    if ((unsigned)dom >= TS_DOM_N || (unsigned)cat >= TS_MEM_N) return 0;
    return __atomic_load_n(&g_used[dom][cat], __ATOMIC_RELAXED);
}

size_t ts_mem_used(ts_mem_cat cat) {
    size_t t = 0;
    for (int d = 0; d < TS_DOM_N; d++) t += ts_mem_used_in((ts_mem_domain)d, cat);
    return t;
}

void ts_mem_account(ts_mem_domain dom, ts_mem_cat cat, int64_t delta) {
    if ((unsigned)dom >= TS_DOM_N || (unsigned)cat >= TS_MEM_N) return;
    __atomic_add_fetch(&g_used[dom][cat], (size_t)delta, __ATOMIC_RELAXED); /* two's complement: a negative delta subtracts */
}

size_t ts_mem_total(void) {
    size_t t = 0;
    for (int i = 0; i < TS_MEM_N; i++) t += ts_mem_used((ts_mem_cat)i);
    return t;
}

const char *ts_mem_cat_name(ts_mem_cat cat) {
    static const char *names[TS_MEM_N] = {"misc", "weights", "kv_cache", "gdn_state", "mtp",
                                          "spec", "scratch", "expert_cache"};
    return (unsigned)cat < TS_MEM_N ? names[cat] : "?";
}

const char *ts_mem_domain_name(ts_mem_domain dom) {
    static const char *names[TS_DOM_N] = {"host", "device", "pinned"};
    return (unsigned)dom < TS_DOM_N ? names[dom] : "?";
}

/* ---- dtypes ---- */

size_t ts_dtype_size(ts_dtype t) {
    switch (t) {
    case TS_DTYPE_F32: case TS_DTYPE_U32: case TS_DTYPE_I32: return 4;
    case TS_DTYPE_F16: case TS_DTYPE_BF16: return 2;
    case TS_DTYPE_I64: case TS_DTYPE_F64: return 8;
    case TS_DTYPE_U8: case TS_DTYPE_I8: case TS_DTYPE_BOOL: return 1;
    default: return 0;
    }
}

const char *ts_dtype_name(ts_dtype t) {
    static const char *n[TS_DTYPE_N] = {"F32", "F16", "BF16", "U32", "I32", "I64", "U8", "I8", "F64", "BOOL"};
    return (unsigned)t < TS_DTYPE_N ? n[t] : "?";
}

float ts_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    union { uint32_t u; float f; } v;
    if (exp == 0) {
        if (man == 0) {
            v.u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            man &= 0x3ff;
            v.u = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        v.u = sign | 0x7f800000u | (man << 13);
    } else {
        v.u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return v.f;
}

uint16_t ts_f32_to_f16(float f) {
    union { uint32_t u; float f; } v;
    v.f = f;
    uint32_t sign = (v.u >> 16) & 0x8000;
    int32_t exp = (int32_t)((v.u >> 23) & 0xff) - 127 + 15;
    uint32_t man = v.u & 0x7fffff;
    if (((v.u >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = 1u << (shift - 1);
        uint32_t r = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

/* ---- files ---- */

int ts_read_file(const char *path, char **out, size_t *len, ts_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ts_fail(err, TS_E_IO, "cannot open %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return ts_fail(err, TS_E_IO, "cannot seek %s", path); }
    long n = ftell(f);
    if (n < 0) { fclose(f); return ts_fail(err, TS_E_IO, "cannot size %s", path); }
    rewind(f);
    char *buf = ts_alloc((size_t)n + 1, TS_MEM_MISC);
    if (!buf) { fclose(f); return ts_fail(err, TS_E_NOMEM, "out of memory reading %s (%ld bytes)", path, n); }
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        ts_free(buf);
        return ts_fail(err, TS_E_IO, "short read on %s", path);
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    if (len) *len = (size_t)n;
    return 0;
}

int ts_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

char *ts_path_join(char *buf, size_t cap, const char *dir, const char *name) {
    size_t dl = strlen(dir);
    if (dl && dir[dl - 1] == '/')
        snprintf(buf, cap, "%s%s", dir, name);
    else
        snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

double ts_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
