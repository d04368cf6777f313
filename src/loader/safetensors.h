/* safetensors.h: read-only access to safetensors files through mmap.
 *
 * Format (https://huggingface.co/docs/safetensors):
 *
 *   | offset      | size | field                                            |
 *   |-------------|------|--------------------------------------------------|
 *   | 0           | 8    | N = header length, u64 little-endian             |
 *   | 8           | N    | JSON: {"name": {"dtype", "shape", "data_offsets": [b, e]}, |
 *   |             |      |        "__metadata__": {...}}                     |
 *   | 8 + N       | ...  | data; tensor bytes at [8+N+b, 8+N+e)             |
 *
 * Every header is validated before any tensor is handed out: dtype known,
 * shape non-negative, e - b == numel * dtype size, ranges inside the file and
 * not overlapping. Writers pad the header so data is aligned; a file that
 * does not gets its misaligned tensors copied to aligned memory. A tensor set spans one file or the shards named by
 * model.safetensors.index.json. Tensor data stays in the mapping (borrowed
 * pointers, valid until ts_st_close).
 */
#ifndef TS_SAFETENSORS_H
#define TS_SAFETENSORS_H

#include "ts_int.h"

#define TS_ST_MAX_DIMS 8

typedef struct ts_st_tensor {
    char *name;
    ts_dtype dtype;
    int n_dims;
    int64_t shape[TS_ST_MAX_DIMS];
    const void *data;   /* borrowed, in the mapping */
    size_t nbytes;
    size_t off;         /* data offset within the file's data section */
    int file;           /* index into the set's files */
    int used;           /* set by the binder; unused tensors are reported */
    void *owned;        /* heap copy when the mapped data is misaligned for its dtype */
} ts_st_tensor;

typedef struct ts_st_file {
    char *path;
    void *map;
    size_t size;
} ts_st_file;

typedef struct ts_st_set {
    ts_st_file *files;
    int n_files;
    ts_st_tensor *tensors;
    int n_tensors, cap_tensors;
    int *hash;          /* open addressing over tensor names, -1 = empty */
    int hash_cap;
} ts_st_set;

/* Open `dir`/model.safetensors.index.json (all shards it names) or, without
 * an index, every *.safetensors file whose name starts with "model". */
int ts_st_open_dir(const char *dir, ts_st_set **out, ts_error *err);
/* Open one file into a new set (tests, tools). */
int ts_st_open_file(const char *path, ts_st_set **out, ts_error *err);
/* The same validation over a file's bytes held in memory (tests, fuzzing):
 * the set borrows buf, which must outlive it; name appears in errors. */
int ts_st_open_mem(const void *buf, size_t size, const char *name, ts_st_set **out, ts_error *err);
/* The set ts_st_open_dir builds from the install ts_stw_write writes of t[n]
 * (assigned by ts_stw_plan) into dir, without any file: the same files,
 * names, shapes, dtypes and offsets, and the same allocations, but no
 * mappings (tensor data NULL). For the memory plan of an install that does
 * not exist (a released size, before downloading it). */
struct ts_stw_tensor;
int ts_st_open_planned(const char *dir, const struct ts_stw_tensor *t, int n, int n_shards, ts_st_set **out,
                       ts_error *err);
void ts_st_close(ts_st_set *s);
const ts_st_tensor *ts_st_find(const ts_st_set *s, const char *name);
/* Drop this process's pages of [p, p + n) when the range lies in one of the
 * set's file mappings (heap copies are left alone). Later reads fault them
 * back in from the file, so what the bytes read as never changes; pages the
 * range only partly covers are kept. For data that has been copied elsewhere
 * (the repacked quantized matrices): the process stops holding it twice. */
void ts_st_release(const ts_st_set *s, const void *p, size_t n);
ts_st_tensor *ts_st_find_mut(ts_st_set *s, const char *name);
int64_t ts_st_numel(const ts_st_tensor *t);
/* "[a, b, c]" into buf. */
const char *ts_st_shape_str(const ts_st_tensor *t, char *buf, size_t cap);
ts_dtype ts_dtype_from_name(const char *s); /* TS_DTYPE_N if unknown */

#endif
