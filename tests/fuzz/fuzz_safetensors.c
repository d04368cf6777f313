/* fuzz_safetensors.c: a safetensors file's bytes -> a tensor set
 * (ts_st_open_mem: the validation ts_st_open_file runs after mmap).
 * Property: an error with a message, or a set in which every tensor's
 * (data, nbytes) lies inside the input, nbytes = numel * dtype size, and
 * every name finds its own tensor. Touching the first and last byte of each
 * tensor lets ASan check the bounds. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "loader/safetensors.h"

int fuzz_safetensors(const uint8_t *data, size_t size) {
    ts_st_set *s = NULL;
    ts_error err = {0};
    int rc = ts_st_open_mem(data, size, "fuzz.safetensors", &s, &err);
    if (rc) {
        if (!err.msg[0] || s) fuzz_fail("error %d without a message, or a set returned", rc);
        return 0;
    }
    volatile uint8_t sink = 0;
    for (int i = 0; i < s->n_tensors; i++) {
        const ts_st_tensor *t = &s->tensors[i];
        if (ts_st_find(s, t->name) != t) fuzz_fail("tensor '%s' not found by name", t->name);
        int64_t n = ts_st_numel(t);
        if (n < 0 || (uint64_t)n * ts_dtype_size(t->dtype) != t->nbytes) fuzz_fail("tensor '%s': size", t->name);
        const uint8_t *p = t->data;
        if (!t->owned && (p < data + 8 || p + t->nbytes > data + size)) fuzz_fail("tensor '%s' outside the file", t->name);
        if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
        char buf[256];
        ts_st_shape_str(t, buf, sizeof buf);
    }
    (void)sink;
    ts_st_close(s);
    return 0;
}
