/* st_write.h: a minimal safetensors writer for tests (renames, drops and
 * corrupts tensors of a fixture to build bad or alternative checkpoints). */
#ifndef TS_TEST_ST_WRITE_H
#define TS_TEST_ST_WRITE_H

#include "loader/safetensors.h"

/* Rewrite every tensor of `in` into one file `path`. `rename` maps an old
 * name to a new one (return NULL to drop the tensor); NULL keeps names. */
typedef const char *(*st_rename_fn)(const char *name, char *buf, size_t cap, void *user);
int st_write_set(const ts_st_set *in, const char *path, st_rename_fn rename, void *user);
/* Copy a fixture directory's config files (not the weights) to dst. */
int st_copy_configs(const char *src, const char *dst);

#endif
