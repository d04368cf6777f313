/* st_writer.c: sharded safetensors output (see st_writer.h).
 *
 * A shard is written as: 8-byte header length, the JSON header padded with
 * spaces to a multiple of 8 (so tensor data starts 8-byte aligned, as the
 * reference writer does), then every tensor's bytes back to back. Shards are
 * named model-0000i-of-0000N.safetensors like the released checkpoints.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "loader/st_writer.h"

int ts_stw_plan(ts_stw_tensor *t, int n, size_t shard_max) {
    int shard = 0;
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < t[i].n_dims; d++) numel *= t[i].shape[d];
        t[i].nbytes = (size_t)numel * ts_dtype_size(t[i].dtype);
        /* bytes of the unit that starts here (a break is only allowed at a unit start) */
        int unit_start = i == 0 || t[i].unit != t[i - 1].unit;
        if (unit_start && used > 0) {
            size_t ub = 0;
            for (int j = i; j < n && t[j].unit == t[i].unit; j++) {
                int64_t ne = 1;
                for (int d = 0; d < t[j].n_dims; d++) ne *= t[j].shape[d];
                ub += (size_t)ne * ts_dtype_size(t[j].dtype);
            }
            if (used + ub > shard_max) { shard++; used = 0; }
        }
        t[i].shard = shard;
        t[i].off = used;
        used += t[i].nbytes;
    }
    return n ? shard + 1 : 0;
}

void ts_stw_shard_name(char *buf, size_t cap, int i, int n) {
    snprintf(buf, cap, "model-%05d-of-%05d.safetensors", i + 1, n);
}

static char *shard_header(const ts_stw_tensor *t, int n, int shard, ts_error *err) {
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    for (int i = 0; i < n; i++) {
        if (t[i].shard != shard) continue;
        cJSON *o = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(o, "dtype", ts_dtype_name(t[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t[i].n_dims; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *off = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)t[i].off));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(t[i].off + t[i].nbytes)));
    }
    char *s = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!s) ts_fail(err, TS_E_NOMEM, "out of memory building a safetensors header");
    return s;
}

static int wfail(ts_error *err, const char *path) {
    return ts_fail(err, TS_E_IO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
}

int ts_stw_write(const char *dir, ts_stw_tensor *t, int n, int n_shards, ts_stw_fill_fn fill,
                 ts_stw_progress_fn progress, void *ctx, ts_error *err) {
    size_t total = 0, done = 0, maxb = 0;
    for (int i = 0; i < n; i++) { total += t[i].nbytes; maxb = TS_MAX(maxb, t[i].nbytes); }
    void *buf = ts_alloc(maxb ? maxb : 1, TS_MEM_MISC);
    if (!buf) return ts_fail(err, TS_E_NOMEM, "out of memory (a %zu-byte tensor buffer)", maxb);
    int rc = 0;
    char name[64], path[4096];
    for (int s = 0; s < n_shards && !rc; s++) {
        ts_stw_shard_name(name, sizeof name, s, n_shards);
        ts_path_join(path, sizeof path, dir, name);
        char *hdr = shard_header(t, n, s, err);
        if (!hdr) { rc = TS_E_NOMEM; break; }
        size_t hl = strlen(hdr), pad = (8 - (8 + hl) % 8) % 8;
        errno = 0;
        FILE *f = fopen(path, "wb");
        if (!f) { free(hdr); rc = ts_fail(err, TS_E_IO, "%s: cannot create: %s", path, strerror(errno)); break; }
        uint64_t L = hl + pad;
        unsigned char lb[8];
        for (int k = 0; k < 8; k++) lb[k] = (unsigned char)(L >> (8 * k));
        int ok = fwrite(lb, 1, 8, f) == 8 && fwrite(hdr, 1, hl, f) == hl;
        for (size_t k = 0; ok && k < pad; k++) ok = fputc(' ', f) != EOF;
        free(hdr);
        if (!ok) rc = wfail(err, path);
        for (int i = 0; i < n && !rc; i++) {
            if (t[i].shard != s) continue;
            rc = fill(ctx, &t[i], i, buf, err);
            if (!rc && t[i].nbytes && fwrite(buf, 1, t[i].nbytes, f) != t[i].nbytes) rc = wfail(err, path);
            done += t[i].nbytes;
            if (!rc && progress) progress(ctx, done, total);
        }
        errno = 0;
        if (fflush(f) != 0 && !rc) rc = wfail(err, path);
        if (fclose(f) != 0 && !rc) rc = wfail(err, path);
    }
    ts_free(buf);
    if (rc) return rc;
    /* the index: total_size and the shard of every tensor */
    cJSON *ix = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(ix, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON *wm = cJSON_AddObjectToObject(ix, "weight_map");
    for (int i = 0; i < n; i++) {
        ts_stw_shard_name(name, sizeof name, t[i].shard, n_shards);
        cJSON_AddStringToObject(wm, t[i].name, name);
    }
    char *js = cJSON_Print(ix);
    cJSON_Delete(ix);
    if (!js) return ts_fail(err, TS_E_NOMEM, "out of memory building the index");
    ts_path_join(path, sizeof path, dir, "model.safetensors.index.json");
    errno = 0;
    FILE *f = fopen(path, "wb");
    size_t jl = strlen(js);
    if (!f) rc = ts_fail(err, TS_E_IO, "%s: cannot create: %s", path, strerror(errno));
    else {
        if (fwrite(js, 1, jl, f) != jl) rc = wfail(err, path);
        if (fclose(f) != 0 && !rc) rc = wfail(err, path);
    }
    free(js);
    return rc;
}
