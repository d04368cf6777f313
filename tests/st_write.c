/* st_write.c: see st_write.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_write.h"
#include "ts_test.h"

int st_write_set(const ts_st_set *in, const char *path, st_rename_fn rename, void *user) {
    size_t cap = 1 << 20, len = 0;
    char *hdr = malloc(cap);
    len += snprintf(hdr + len, cap - len, "{");
    size_t off = 0;
    int first = 1;
    const char **names = calloc(in->n_tensors, sizeof *names);
    char (*bufs)[512] = calloc(in->n_tensors, 512);
    for (int i = 0; i < in->n_tensors; i++) {
        const ts_st_tensor *t = &in->tensors[i];
        names[i] = rename ? rename(t->name, bufs[i], 512, user) : t->name;
        if (!names[i]) continue;
        if (cap - len < 4096) { cap *= 2; hdr = realloc(hdr, cap); }
        len += snprintf(hdr + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", first ? "" : ",", names[i],
                        ts_dtype_name(t->dtype));
        for (int d = 0; d < t->n_dims; d++) len += snprintf(hdr + len, cap - len, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        len += snprintf(hdr + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off, off + t->nbytes);
        off += t->nbytes;
        first = 0;
    }
    len += snprintf(hdr + len, cap - len, "}");
    FILE *f = fopen(path, "wb");
    int rc = f ? 0 : -1;
    if (f) {
        uint64_t n = len;
        unsigned char b[8];
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
        fwrite(b, 1, 8, f);
        fwrite(hdr, 1, len, f);
        for (int i = 0; i < in->n_tensors; i++)
            if (names[i]) fwrite(in->tensors[i].data, 1, in->tensors[i].nbytes, f);
        rc = fclose(f);
    }
    free(hdr);
    free(names);
    free(bufs);
    return rc;
}

int st_copy_configs(const char *src, const char *dst) {
    char out[256];
    return ts_test_sh(out, sizeof out, "mkdir -p '%s' && cp '%s/config.json' '%s/' && "
                      "(cp '%s'/tokenizer* '%s'/generation_config.json '%s/' 2>/dev/null; true)",
                      dst, src, dst, src, src, dst);
}
