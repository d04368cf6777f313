/* ts_int.h: internal umbrella for every module of the library.
 *
 * Owns: the error helpers, the counted allocator (the one entry point all
 * library allocations go through: the memory plan is checked against its
 * counters), dtypes and their scalar conversions, small file helpers.
 * Does not own: anything model- or backend-specific.
 */
#ifndef TS_INT_H
#define TS_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "turbospark.h"

#define TS_INTERNAL __attribute__((visibility("hidden")))
#define TS_UNUSED(x) ((void)(x))
#define TS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TS_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- errors ---- */

/* Fill err (may be NULL) and return code. printf-style message. */
int ts_fail(ts_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix an existing message: "context: <old message>". */
int ts_fail_prefix(ts_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- counted allocator ----
 * Every buffer the engine owns comes from here, tagged with a category. The
 * memory plan (`turbospark plan`) predicts these counters; tests compare the
 * two to the byte. Weights read through mmap are not heap allocations and are
 * accounted separately by the loader. The categories and domains are the
 * public ones (turbospark.h: ts_mem_cat, ts_mem_domain); ts_alloc is host
 * memory. */

void *ts_alloc(size_t bytes, ts_mem_cat cat);      /* zeroed, 64-byte aligned */
void ts_free(void *p);                              /* NULL ok */
char *ts_strdup(const char *s, ts_mem_cat cat);
size_t ts_mem_used(ts_mem_cat cat);                 /* bytes live now, all domains */
size_t ts_mem_used_in(ts_mem_domain dom, ts_mem_cat cat); /* bytes live now in one domain */
size_t ts_mem_total(void);
/* Count memory that a backend allocates outside ts_alloc (device buffers,
 * pinned host staging): +bytes when allocated, -bytes when freed. */
void ts_mem_account(ts_mem_domain dom, ts_mem_cat cat, int64_t delta);
/* Fault injection for tests: fail the n-th allocation from now (0 = off). */
void ts_mem_fail_after(long n);

/* ---- dtypes ---- */
typedef enum {
    TS_DTYPE_F32 = 0,
    TS_DTYPE_F16,
    TS_DTYPE_BF16,
    TS_DTYPE_U32,   /* packed quantized weights (MLX layout) */
    TS_DTYPE_I32,
    TS_DTYPE_I64,
    TS_DTYPE_U8,
    TS_DTYPE_I8,
    TS_DTYPE_F64,
    TS_DTYPE_BOOL,
    TS_DTYPE_N
} ts_dtype;

size_t ts_dtype_size(ts_dtype t);
const char *ts_dtype_name(ts_dtype t);

static inline float ts_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
/* Round to nearest even, NaN kept a NaN. */
static inline uint16_t ts_f32_to_bf16(float f) {
    union { uint32_t u; float f; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
    uint32_t r = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + r) >> 16);
}
float ts_f16_to_f32(uint16_t h);
uint16_t ts_f32_to_f16(float f);

/* ---- files ---- */
/* Read a whole file into a NUL-terminated heap buffer (TS_MEM_MISC). */
int ts_read_file(const char *path, char **out, size_t *len, ts_error *err);
int ts_file_exists(const char *path);
/* Join dir and name into buf; returns buf. */
char *ts_path_join(char *buf, size_t cap, const char *dir, const char *name);

/* ---- time ---- */
double ts_now(void); /* seconds, monotonic */

#endif
