/* safetensors.c: mmap'd safetensors files and sharded sets (see safetensors.h).
 *
 * Validation happens once, at open: after that the model binder can trust
 * every (pointer, nbytes) pair. Overlap is checked per file by sorting the
 * data ranges; a lying header is reported with the tensor's name.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader/safetensors.h"
#include "loader/st_writer.h"

#define ST_MAX_HEADER (256u << 20) /* a header over 256 MiB is not a real checkpoint */

ts_dtype ts_dtype_from_name(const char *s) {
    static const struct { const char *n; ts_dtype t; } map[] = {
        {"F32", TS_DTYPE_F32}, {"F16", TS_DTYPE_F16}, {"BF16", TS_DTYPE_BF16},
        {"U32", TS_DTYPE_U32}, {"I32", TS_DTYPE_I32}, {"I64", TS_DTYPE_I64},
        {"U8", TS_DTYPE_U8},   {"I8", TS_DTYPE_I8},   {"F64", TS_DTYPE_F64},
        {"BOOL", TS_DTYPE_BOOL},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(s, map[i].n)) return map[i].t;
    return TS_DTYPE_N;
}

int64_t ts_st_numel(const ts_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
    return n;
}

const char *ts_st_shape_str(const ts_st_tensor *t, char *buf, size_t cap) {
    size_t o = 0;
    o += snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < t->n_dims && o < cap; i++)
        o += snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int index_rebuild(ts_st_set *s) {
    int cap = 64;
    while (cap < 2 * s->n_tensors) cap *= 2;
    int *h = ts_alloc(sizeof(int) * cap, TS_MEM_MISC);
    if (!h) return -1;
    for (int i = 0; i < cap; i++) h[i] = -1;
    for (int i = 0; i < s->n_tensors; i++) {
        uint64_t k = hash_str(s->tensors[i].name) & (uint64_t)(cap - 1);
        while (h[k] >= 0) k = (k + 1) & (uint64_t)(cap - 1);
        h[k] = i;
    }
    ts_free(s->hash);
    s->hash = h;
    s->hash_cap = cap;
    return 0;
}

/* Index the last pushed tensor; grow (rebuild) at half load. */
static int index_add(ts_st_set *s) {
    if (!s->hash || 2 * s->n_tensors > s->hash_cap) return index_rebuild(s);
    int i = s->n_tensors - 1;
    uint64_t k = hash_str(s->tensors[i].name) & (uint64_t)(s->hash_cap - 1);
    while (s->hash[k] >= 0) k = (k + 1) & (uint64_t)(s->hash_cap - 1);
    s->hash[k] = i;
    return 0;
}

ts_st_tensor *ts_st_find_mut(ts_st_set *s, const char *name) {
    if (!s || !s->hash) return NULL;
    uint64_t k = hash_str(name) & (uint64_t)(s->hash_cap - 1);
    while (s->hash[k] >= 0) {
        ts_st_tensor *t = &s->tensors[s->hash[k]];
        if (!strcmp(t->name, name)) return t;
        k = (k + 1) & (uint64_t)(s->hash_cap - 1);
    }
    return NULL;
}

const ts_st_tensor *ts_st_find(const ts_st_set *s, const char *name) {
    return ts_st_find_mut((ts_st_set *)s, name);
}

void ts_st_release(const ts_st_set *s, const void *p, size_t n) {
    const uintptr_t a = (uintptr_t)p, b = a + n;
    for (int i = 0; i < s->n_files; i++) {
        const uintptr_t m0 = (uintptr_t)s->files[i].map, m1 = m0 + s->files[i].size;
        if (!s->files[i].map || a < m0 || b > m1) continue;
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        const uintptr_t lo = (a + pg - 1) & ~(pg - 1), hi = b & ~(pg - 1);
        if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: failure changes nothing */
        return;
    }
}

void ts_st_close(ts_st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) {
        if (s->files[i].map && s->files[i].map != MAP_FAILED) munmap(s->files[i].map, s->files[i].size);
        ts_free(s->files[i].path);
    }
    for (int i = 0; i < s->n_tensors; i++) {
        ts_free(s->tensors[i].name);
        ts_free(s->tensors[i].owned);
    }
    ts_free(s->files);
    ts_free(s->tensors);
    ts_free(s->hash);
    ts_free(s);
}

typedef struct { size_t b, e; int idx; } range;

static int cmp_range(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->b < y->b ? -1 : x->b > y->b ? 1 : 0;
}

static int push_tensor(ts_st_set *s, ts_st_tensor *t) {
    if (s->n_tensors == s->cap_tensors) {
        int nc = s->cap_tensors ? 2 * s->cap_tensors : 256;
        ts_st_tensor *nt = ts_alloc(sizeof *nt * nc, TS_MEM_MISC);
        if (!nt) return -1;
        if (s->n_tensors) memcpy(nt, s->tensors, sizeof *nt * s->n_tensors);
        ts_free(s->tensors);
        s->tensors = nt;
        s->cap_tensors = nc;
    }
    s->tensors[s->n_tensors++] = *t;
    return 0;
}

static int parse_file(ts_st_set *s, int fi, const unsigned char *p, size_t size, const char *path, ts_error *err);

/* Map one file and append its tensors to the set. */
static int add_file(ts_st_set *s, const char *path, ts_error *err) {
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(s->files[i].path, path)) return 0;
    ts_st_file *nf = ts_alloc(sizeof *nf * (s->n_files + 1), TS_MEM_MISC);
    if (!nf) return ts_fail(err, TS_E_NOMEM, "out of memory opening %s", path);
    if (s->n_files) memcpy(nf, s->files, sizeof *nf * s->n_files);
    ts_free(s->files);
    s->files = nf;
    int fi = s->n_files++;
    ts_st_file *f = &s->files[fi];
    memset(f, 0, sizeof *f);
    f->path = ts_strdup(path, TS_MEM_MISC);
    if (!f->path) return ts_fail(err, TS_E_NOMEM, "out of memory");

    int fd = open(path, O_RDONLY);
    if (fd < 0) return ts_fail(err, TS_E_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return ts_fail(err, TS_E_IO, "cannot stat %s", path); }
    f->size = (size_t)st.st_size;
    if (f->size < 8) {
        close(fd);
        return ts_fail(err, TS_E_FORMAT, "%s: truncated: %zu bytes, shorter than the 8-byte header length", path, f->size);
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) { f->map = NULL; return ts_fail(err, TS_E_IO, "cannot mmap %s: %s", path, strerror(errno)); }
    return parse_file(s, fi, f->map, f->size, path, err);
}

/* Validate one file's header (the file's bytes p[0, size)) and append its
 * tensors to the set as file fi. Pure: no I/O, so tests and the fuzzer feed
 * it bytes directly (ts_st_open_mem). */
static int parse_file(ts_st_set *s, int fi, const unsigned char *p, size_t size, const char *path, ts_error *err) {
    if (size < 8)
        return ts_fail(err, TS_E_FORMAT, "%s: truncated: %zu bytes, shorter than the 8-byte header length", path, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > size - 8 || hlen > ST_MAX_HEADER)
        return ts_fail(err, TS_E_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes): truncated or not a safetensors file",
                       path, (unsigned long long)hlen, size);
    size_t data_off = 8 + (size_t)hlen;
    size_t data_size = size - data_off;
    cJSON *root = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ts_fail(err, TS_E_FORMAT, "%s: the safetensors header is not a JSON object", path);
    }
    int first = s->n_tensors;
    int rc = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!strcmp(it->string, "__metadata__")) continue;
        const char *nm = it->string;
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2) {
            rc = ts_fail(err, TS_E_FORMAT, "%s: tensor '%s': header entry lacks dtype, shape or data_offsets", path, nm);
            break;
        }
        ts_st_tensor t;
        memset(&t, 0, sizeof t);
        t.dtype = ts_dtype_from_name(dt->valuestring);
        if (t.dtype == TS_DTYPE_N) {
            rc = ts_fail(err, TS_E_FORMAT, "%s: tensor '%s': unknown dtype '%s'", path, nm, dt->valuestring);
            break;
        }
        t.n_dims = cJSON_GetArraySize(sh);
        if (t.n_dims > TS_ST_MAX_DIMS) {
            rc = ts_fail(err, TS_E_FORMAT, "%s: tensor '%s': %d dimensions (at most %d)", path, nm, t.n_dims, TS_ST_MAX_DIMS);
            break;
        }
        /* Every number is range-checked before a cast or a product: dims
         * and offsets integral in [0, 2^53], the product of the non-zero dims
         * at most 2^62 (so ts_st_numel's running product cannot overflow
         * even when a later dim is 0). */
        int bad = 0;
        uint64_t numel = 1, nz = 1;
        for (int d = 0; d < t.n_dims && !bad; d++) {
            cJSON *v = cJSON_GetArrayItem(sh, d);
            if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0) ||
                v->valuedouble != floor(v->valuedouble)) {
                bad = 1;
                break;
            }
            uint64_t x = (uint64_t)v->valuedouble;
            if (x && nz > (UINT64_C(1) << 62) / x) bad = 1;
            else {
                if (x) nz *= x;
                numel *= x;
                t.shape[d] = (int64_t)x;
            }
        }
        const cJSON *ob = cJSON_GetArrayItem(of, 0), *oe = cJSON_GetArrayItem(of, 1);
        double b = cJSON_IsNumber(ob) ? ob->valuedouble : -1, e = cJSON_IsNumber(oe) ? oe->valuedouble : -1;
        if (bad || !(b >= 0 && b <= 9007199254740992.0) || !(e >= b && e <= 9007199254740992.0) || b != floor(b) ||
            e != floor(e)) {
            rc = ts_fail(err, TS_E_FORMAT, "%s: tensor '%s': malformed shape or data_offsets", path, nm);
            break;
        }
        if (e > (double)data_size) {
            rc = ts_fail(err, TS_E_FORMAT, "%s: tensor '%s': data_offsets [%.0f, %.0f] run past the end of the data (%zu bytes): file truncated or header lying",
                         path, nm, b, e, data_size);
            break;
        }
        /* e - b <= data_size here, so a product beyond it is a mismatch */
        uint64_t span = (uint64_t)e - (uint64_t)b, dsz = ts_dtype_size(t.dtype);
        if (numel > span / (dsz ? dsz : 1) || numel * dsz != span) {
            rc = ts_fail(err, TS_E_FORMAT, "%s: tensor '%s': data_offsets span %llu bytes but shape and dtype %s need %.0f",
                         path, nm, (unsigned long long)span, ts_dtype_name(t.dtype), (double)numel * (double)dsz);
            break;
        }
        t.off = (size_t)b;
        t.data = p + data_off + (size_t)b;
        t.nbytes = (size_t)(e - b);
        if ((uintptr_t)t.data % ts_dtype_size(t.dtype)) {
            /* unaligned for its dtype (an unpadded header): typed reads of it
             * would be undefined behaviour, so take an aligned copy */
            t.owned = ts_alloc(t.nbytes ? t.nbytes : 1, TS_MEM_WEIGHTS);
            if (!t.owned) { rc = ts_fail(err, TS_E_NOMEM, "out of memory reading %s", path); break; }
            memcpy(t.owned, t.data, t.nbytes);
            t.data = t.owned;
        }
        t.file = fi;
        if (ts_st_find(s, nm)) {
            ts_free(t.owned);
            rc = ts_fail(err, TS_E_FORMAT, "%s: tensor '%s' appears twice in the set", path, nm);
            break;
        }
        t.name = ts_strdup(nm, TS_MEM_MISC);
        if (!t.name || push_tensor(s, &t) != 0) {
            ts_free(t.name);
            ts_free(t.owned);
            rc = ts_fail(err, TS_E_NOMEM, "out of memory reading %s", path);
            break;
        }
        /* from here the set owns t's name and copy */
        if (index_add(s) != 0) { rc = ts_fail(err, TS_E_NOMEM, "out of memory reading %s", path); break; }
    }
    cJSON_Delete(root);
    if (rc) return rc;

    /* Overlap: sort this file's ranges; each must start at or after the
     * previous one's end. Empty tensors never overlap. */
    int n = s->n_tensors - first;
    if (n > 1) {
        range *r = ts_alloc(sizeof *r * n, TS_MEM_MISC);
        if (!r) return ts_fail(err, TS_E_NOMEM, "out of memory");
        for (int i = 0; i < n; i++) {
            ts_st_tensor *t = &s->tensors[first + i];
            r[i].b = t->off;
            r[i].e = r[i].b + t->nbytes;
            r[i].idx = first + i;
        }
        qsort(r, n, sizeof *r, cmp_range);
        for (int i = 1; i < n; i++) {
            if (r[i].b == r[i].e || r[i - 1].b == r[i - 1].e) continue;
            if (r[i].b < r[i - 1].e) {
                rc = ts_fail(err, TS_E_FORMAT, "%s: tensors '%s' and '%s' have overlapping data ranges", path,
                             s->tensors[r[i - 1].idx].name, s->tensors[r[i].idx].name);
                break;
            }
        }
        ts_free(r);
    }
    return rc;
}

static ts_st_set *set_new(void) { return ts_alloc(sizeof(ts_st_set), TS_MEM_MISC); }

int ts_st_open_file(const char *path, ts_st_set **out, ts_error *err) {
    *out = NULL;
    ts_st_set *s = set_new();
    if (!s) return ts_fail(err, TS_E_NOMEM, "out of memory");
    int rc = add_file(s, path, err);
    if (rc == 0 && !s->hash) rc = index_rebuild(s) ? ts_fail(err, TS_E_NOMEM, "out of memory") : 0;
    if (rc) { ts_st_close(s); return rc; }
    *out = s;
    return 0;
}

int ts_st_open_mem(const void *buf, size_t size, const char *name, ts_st_set **out, ts_error *err) {
    *out = NULL;
    ts_st_set *s = set_new();
    if (!s) return ts_fail(err, TS_E_NOMEM, "out of memory");
    int rc = 0;
    s->files = ts_alloc(sizeof *s->files, TS_MEM_MISC);
    if (!s->files || !(s->files[0].path = ts_strdup(name, TS_MEM_MISC))) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    if (!rc) {
        s->n_files = 1;
        s->files[0].map = NULL; /* borrowed: ts_st_close leaves it alone */
        s->files[0].size = size;
        rc = parse_file(s, 0, buf, size, name, err);
    }
    if (rc == 0 && !s->hash) rc = index_rebuild(s) ? ts_fail(err, TS_E_NOMEM, "out of memory") : 0;
    if (rc) { ts_st_close(s); return rc; }
    *out = s;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int ts_st_open_dir(const char *dir, ts_st_set **out, ts_error *err) {
    *out = NULL;
    char path[4096];
    ts_st_set *s = set_new();
    if (!s) return ts_fail(err, TS_E_NOMEM, "out of memory");
    int rc = 0;
    ts_path_join(path, sizeof path, dir, "model.safetensors.index.json");
    if (ts_file_exists(path)) {
        char *txt = NULL;
        size_t len;
        rc = ts_read_file(path, &txt, &len, err);
        if (rc) { ts_st_close(s); return rc; }
        cJSON *root = cJSON_ParseWithLength(txt, len);
        ts_free(txt);
        cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
        if (!cJSON_IsObject(wm)) {
            cJSON_Delete(root);
            ts_st_close(s);
            return ts_fail(err, TS_E_FORMAT, "%s: not JSON with a \"weight_map\" object", path);
        }
        cJSON *it;
        cJSON_ArrayForEach(it, wm) {
            if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) {
                rc = ts_fail(err, TS_E_FORMAT, "%s: weight_map entry '%s' is not a shard file name", path, it->string);
                break;
            }
            char sp[4096];
            ts_path_join(sp, sizeof sp, dir, it->valuestring);
            if ((rc = add_file(s, sp, err)) != 0) break;
        }
        if (rc == 0 && !s->hash && index_rebuild(s)) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
        /* Every tensor the index names must be in the shard it names. */
        if (rc == 0) {
            cJSON_ArrayForEach(it, wm) {
                const ts_st_tensor *t = ts_st_find(s, it->string);
                char sp[4096];
                ts_path_join(sp, sizeof sp, dir, it->valuestring);
                if (!t || strcmp(s->files[t->file].path, sp)) {
                    rc = ts_fail(err, TS_E_FORMAT, "%s names tensor '%s' in %s, but that shard does not hold it",
                                 path, it->string, it->valuestring);
                    break;
                }
            }
        }
        cJSON_Delete(root);
    } else {
        /* No index: model.safetensors, or every model*.safetensors in name order. */
        DIR *d = opendir(dir);
        if (!d) { ts_st_close(s); return ts_fail(err, TS_E_IO, "cannot open model directory %s: %s", dir, strerror(errno)); }
        char *names[256];
        int nn = 0;
        struct dirent *de;
        while ((de = readdir(d)) && nn < 256) {
            size_t l = strlen(de->d_name);
            if (l > 12 && !strncmp(de->d_name, "model", 5) && !strcmp(de->d_name + l - 12, ".safetensors"))
                names[nn++] = ts_strdup(de->d_name, TS_MEM_MISC);
        }
        closedir(d);
        qsort(names, nn, sizeof names[0], cmp_str);
        if (nn == 0) rc = ts_fail(err, TS_E_IO, "%s: no model.safetensors and no model.safetensors.index.json", dir);
        for (int i = 0; i < nn; i++) {
            if (rc == 0) rc = add_file(s, ts_path_join(path, sizeof path, dir, names[i]), err);
            ts_free(names[i]);
        }
        if (rc == 0 && !s->hash && index_rebuild(s)) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    if (rc) { ts_st_close(s); return rc; }
    *out = s;
    return 0;
}

/* Mirrors ts_st_open_dir over an index (shards in the order the index names
 * them, which ts_stw_write makes the tensor order; each shard's tensors in
 * header order, which is the tensor order too) through the same push_tensor
 * and index_add, so the index's allocations are the ones the real open
 * makes. Data sections start 8-aligned (the writer pads the header), so a
 * tensor is misaligned for its dtype exactly when its offset is; such a
 * tensor gets the same (zeroed) heap copy the real open would take. */
int ts_st_open_planned(const char *dir, const ts_stw_tensor *t, int n, int n_shards, ts_st_set **out, ts_error *err) {
    *out = NULL;
    ts_st_set *s = set_new();
    if (!s) return ts_fail(err, TS_E_NOMEM, "out of memory");
    int rc = 0;
    char name[64], path[4096];
    /* ts_stw_plan assigns shards in tensor order, so each shard is one run
     * of the list: one pass, a new file where the shard changes */
    for (int i = 0; i < n && !rc; i++) {
        if (t[i].shard < s->n_files - 1 || t[i].shard > s->n_files || t[i].shard >= n_shards) {
            rc = ts_fail(err, TS_E_ARG, "tensor '%s': shard %d out of order", t[i].name, t[i].shard);
            break;
        }
        if (t[i].shard == s->n_files) {
            ts_stw_shard_name(name, sizeof name, t[i].shard, n_shards);
            ts_path_join(path, sizeof path, dir, name);
            ts_st_file *nf = ts_alloc(sizeof *nf * (s->n_files + 1), TS_MEM_MISC);
            if (!nf) { rc = ts_fail(err, TS_E_NOMEM, "out of memory"); break; }
            if (s->n_files) memcpy(nf, s->files, sizeof *nf * s->n_files);
            ts_free(s->files);
            s->files = nf;
            ts_st_file *f = &s->files[s->n_files++];
            memset(f, 0, sizeof *f);
            if (!(f->path = ts_strdup(path, TS_MEM_MISC))) { rc = ts_fail(err, TS_E_NOMEM, "out of memory"); break; }
        }
        ts_st_tensor x;
        memset(&x, 0, sizeof x);
        x.dtype = t[i].dtype;
        x.n_dims = t[i].n_dims;
        for (int d = 0; d < t[i].n_dims; d++) x.shape[d] = t[i].shape[d];
        x.nbytes = t[i].nbytes;
        x.off = t[i].off;
        x.file = s->n_files - 1;
        if (x.off % ts_dtype_size(x.dtype) && !(x.data = x.owned = ts_alloc(x.nbytes ? x.nbytes : 1, TS_MEM_WEIGHTS))) {
            rc = ts_fail(err, TS_E_NOMEM, "out of memory");
            break;
        }
        if (ts_st_find(s, t[i].name)) {
            ts_free(x.owned);
            rc = ts_fail(err, TS_E_FORMAT, "tensor '%s' appears twice in the set", t[i].name);
            break;
        }
        x.name = ts_strdup(t[i].name, TS_MEM_MISC);
        if (!x.name || push_tensor(s, &x) != 0) {
            ts_free(x.name);
            ts_free(x.owned);
            rc = ts_fail(err, TS_E_NOMEM, "out of memory");
            break;
        }
        if (index_add(s) != 0) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    }
    /* ts_stw_plan makes no empty shard; a list that claims one is not its */
    if (rc == 0 && s->n_files != n_shards) rc = ts_fail(err, TS_E_ARG, "%d shards planned, %d hold tensors", n_shards, s->n_files);
    if (rc == 0 && !s->hash && index_rebuild(s)) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    if (rc) { ts_st_close(s); return rc; }
    *out = s;
    return 0;
}
