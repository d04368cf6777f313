/* st_writer.h: write a tensor set as sharded safetensors files.
 *
 * Owns: the output side of the safetensors format (see safetensors.h for the
 * layout): the shard split, each shard's JSON header, the data streamed after
 * it, and model.safetensors.index.json naming the shard of every tensor.
 * Does not own: what the bytes are (a caller callback fills each tensor), the
 * temporary directory and its rename (convert.c), reading (safetensors.c).
 *
 * Invariants: tensors are written in the order given, contiguously (the
 * format allows no holes); a shard breaks only between tensors of different
 * `unit` (so a unit, e.g. one expert of one layer, is one contiguous byte
 * range of one file); every write is checked, and the first failure (a full
 * disk, a callback error) stops the writer with a message naming the file.
 */
#ifndef TS_ST_WRITER_H
#define TS_ST_WRITER_H

#include "ts_int.h"

typedef struct ts_stw_tensor {
    char name[200];
    ts_dtype dtype;
    int n_dims;
    int64_t shape[4];
    size_t nbytes;      /* filled by ts_stw_plan from dtype and shape */
    int64_t unit;       /* tensors of one unit never straddle shards */
    /* set by ts_stw_plan */
    int shard;
    size_t off;         /* data offset within its shard's data section */
} ts_stw_tensor;

/* Fill tensor `idx`'s bytes (t->nbytes) into buf. Return 0 or a TS_E_* code
 * (with err filled). */
typedef int (*ts_stw_fill_fn)(void *ctx, const ts_stw_tensor *t, int idx, void *buf, ts_error *err);
/* Called after every tensor with the bytes written so far and the total. */
typedef void (*ts_stw_progress_fn)(void *ctx, size_t done, size_t total);

/* Assign shards (at most shard_max bytes of data each, unless one unit is
 * larger) and offsets. Returns the number of shards. */
int ts_stw_plan(ts_stw_tensor *t, int n, size_t shard_max);
/* The file name of shard i (0-based) of n: "model-0000{i+1}-of-0000{n}.safetensors". */
void ts_stw_shard_name(char *buf, size_t cap, int i, int n);
/* Write the shards and the index into the existing directory `dir`. */
int ts_stw_write(const char *dir, ts_stw_tensor *t, int n, int n_shards, ts_stw_fill_fn fill,
                 ts_stw_progress_fn progress, void *ctx, ts_error *err);

#endif
