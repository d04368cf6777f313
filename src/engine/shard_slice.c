/* shard_slice.c: a rank's slices of an install, as a tensor set in memory
 * (the split of shard.c applied to the bytes), for tensor parallelism
 * (model/tp.h): the rank's model binds from it as from any install.
 *
 * Owns: copying each tensor's piece (rows, columns of packed codes and of
 * their scales, the three channel ranges of GDN's qkv, the gate and up rows
 * of fused experts) into one safetensors image, and opening it through the
 * same validation as a file (ts_st_open_mem).
 * Memory: the image is host memory the size of the rank's weights (the
 * replicated tensors once each). The CPU reads its weights in place from
 * it; on a device the engine frees it once the rank's weights are uploaded
 * (engine.c, open_tp).
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/shard.h"
#include "loader/st_writer.h"

typedef struct {
    const ts_st_tensor *t; /* the source */
    char name[256];
    ts_shard_piece p;      /* the piece (REPL: whole) */
    int n_dims;
    int64_t shape[TS_ST_MAX_DIMS];
    size_t nbytes, off;
} slice;

/* Copy the spans of dimension d of t into dst (contiguous). */
static void copy_spans(const ts_st_tensor *t, const ts_shard_piece *p, int d, void *dst) {
    const size_t es = ts_dtype_size(t->dtype);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= t->shape[i];
    for (int i = d + 1; i < t->n_dims; i++) inner *= t->shape[i];
    const int64_t A = t->shape[d];
    const size_t row = (size_t)inner * es;
    char *o = dst;
    for (int64_t a = 0; a < outer; a++) {
        const char *base = (const char *)t->data + (size_t)a * (size_t)A * row;
        for (int i = 0; i < p->n_span; i++) {
            /* the span in the stored units of dimension d (packed codes,
             * groups of scales: exact, the split is group-aligned) */
            const int64_t lo = p->span[i].lo * A / p->extent, n = p->span[i].n * A / p->extent;
            memcpy(o, base + (size_t)lo * row, (size_t)n * row);
            o += (size_t)n * row;
        }
    }
}

/* "lm_head" + the suffix of an embedding tensor's name */
static void head_name(const char *emb, char *out, size_t cap) {
    const char *suf = strrchr(emb, '.');
    snprintf(out, cap, "lm_head%s", suf ? suf : ".weight");
}

static int is_embed(const char *name) { return strstr(name, "embed_tokens.") != NULL && !strstr(name, "mtp."); }
static int is_head(const char *name) { return !strncmp(name, "lm_head.", 8); }

/* The rank's slices (*sl, *n), its data bytes and the image's header
 * (*hdr, *hl: the JSON, unpadded); the caller frees sl and hdr. */
static int plan_slices(const ts_shard *sh, int r, const ts_st_set *full, slice **sl_out, int *n_out, size_t *data_out,
                       char **hdr_out, size_t *hl_out, ts_error *err) {
    const int tied = sh->c.tied;
    slice *sl = ts_alloc(sizeof(slice) * ((size_t)full->n_tensors * 2 + 1), TS_MEM_MISC);
    if (!sl) return ts_fail(err, TS_E_NOMEM, "out of memory");
    int n = 0, rc = 0;
    const ts_span voc = sh->r[r].vocab;
    for (int i = 0; i < full->n_tensors && !rc; i++) {
        const ts_st_tensor *t = &full->tensors[i];
        ts_shard_piece p;
        if ((rc = ts_shard_piece_of(sh, t->name, t->nbytes, r, &p, err))) break;
        if (p.kind == TS_SPLIT_SKIP) continue;
        if (p.kind == TS_SPLIT_EXPERT) {
            rc = ts_fail(err, TS_E_UNSUPPORTED, "tensor '%s': whole experts over ranks are not built (moe_tp)", t->name);
            break;
        }
        const int emb = is_embed(t->name), head = is_head(t->name);
        /* the embedding whole; the head's rows (of the embedding when tied) */
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1 && !(emb && tied)) break;
            slice *s = &sl[n++];
            s->t = t;
            s->p = p;
            s->n_dims = t->n_dims;
            memcpy(s->shape, t->shape, sizeof s->shape);
            snprintf(s->name, sizeof s->name, "%s", t->name);
            if (pass == 0 && !emb && !head) continue; /* the shard's piece */
            if (pass == 0 && emb) { /* the embedding whole */
                s->p.kind = TS_SPLIT_REPL;
                continue;
            }
            /* an untied head, or the tied head's rows of the embedding */
            if (emb) head_name(t->name, s->name, sizeof s->name);
            s->p.kind = TS_SPLIT_ROWS;
            s->p.dim = 0;
            s->p.n_span = 1;
            s->p.extent = sh->c.vocab;
            s->p.span[0] = voc;
        }
    }
    size_t data = 0;
    for (int i = 0; i < n && !rc; i++) {
        slice *s = &sl[i];
        if (s->p.kind != TS_SPLIT_REPL) {
            const int d = s->p.dim < 0 ? s->n_dims - 1 : s->p.dim;
            int64_t len = 0;
            for (int k = 0; k < s->p.n_span; k++) len += s->p.span[k].n;
            if (d >= s->n_dims || s->shape[d] * len % s->p.extent) {
                rc = ts_fail(err, TS_E_MODEL, "tensor '%s': its shape does not split as the config says", s->name);
                break;
            }
            s->shape[d] = s->shape[d] * len / s->p.extent;
        }
        s->nbytes = ts_dtype_size(s->t->dtype);
        for (int k = 0; k < s->n_dims; k++) s->nbytes *= (size_t)s->shape[k];
        s->off = data;
        data += (s->nbytes + 63) & ~(size_t)63;
    }
    /* the header: {"name": {"dtype", "shape", "data_offsets"}, ...}, sized
     * for its longest form: the name, the fixed text, 20 digits and a comma
     * a dimension, two offsets of 20 digits */
    size_t hcap = 64, hl = 0;
    for (int i = 0; i < n; i++) hcap += strlen(sl[i].name) + 64 + 21 * (size_t)sl[i].n_dims + 48;
    char *hdr = rc ? NULL : ts_alloc(hcap, TS_MEM_MISC);
    if (!rc && !hdr) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    if (!rc) {
        hl += (size_t)snprintf(hdr + hl, hcap - hl, "{");
        for (int i = 0; i < n; i++) {
            const slice *s = &sl[i];
            hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", s->name,
                                   ts_dtype_name(s->t->dtype));
            for (int k = 0; k < s->n_dims; k++)
                hl += (size_t)snprintf(hdr + hl, hcap - hl, "%s%lld", k ? "," : "", (long long)s->shape[k]);
            hl += (size_t)snprintf(hdr + hl, hcap - hl, "],\"data_offsets\":[%zu,%zu]}", s->off, s->off + s->nbytes);
        }
        hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    }
    if (rc) {
        ts_free(hdr);
        ts_free(sl);
        return rc;
    }
    *sl_out = sl, *n_out = n, *data_out = data, *hdr_out = hdr, *hl_out = hl;
    return 0;
}

/* the image: 8 bytes of header length, the header padded with spaces so
 * that the data starts 64-aligned, the data */
static size_t header_pad(size_t hl) { return ((8 + hl + 63) & ~(size_t)63) - 8; }

int ts_shard_slice_list(const ts_shard *sh, int r, const ts_st_set *full, ts_stw_tensor **out, int *n_out,
                        uint64_t *image_bytes, ts_error *err) {
    slice *sl;
    int n;
    size_t data, hl;
    char *hdr;
    *out = NULL;
    int rc = plan_slices(sh, r, full, &sl, &n, &data, &hdr, &hl, err);
    if (rc) return rc;
    ts_stw_tensor *t = ts_alloc(sizeof *t * (size_t)(n ? n : 1), TS_MEM_MISC);
    if (!t) rc = ts_fail(err, TS_E_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        const size_t L = strlen(sl[i].name);
        if (L >= sizeof t[i].name) { /* the planned list's names are shorter than a file's may be */
            rc = ts_fail(err, TS_E_MODEL, "tensor '%.60s...': a name of %zu bytes is too long to plan (%zu at most)",
                         sl[i].name, L, sizeof t[i].name - 1);
            break;
        }
        memcpy(t[i].name, sl[i].name, L + 1);
        t[i].dtype = sl[i].t->dtype;
        t[i].n_dims = sl[i].n_dims;
        if (sl[i].n_dims > 4) rc = ts_fail(err, TS_E_MODEL, "tensor '%s': more than 4 dimensions", sl[i].name);
        for (int k = 0; k < sl[i].n_dims && k < 4; k++) t[i].shape[k] = sl[i].shape[k];
        t[i].nbytes = sl[i].nbytes;
    }
    *image_bytes = 8 + header_pad(hl) + data;
    ts_free(hdr);
    ts_free(sl);
    if (rc) ts_free(t);
    else *out = t, *n_out = n;
    return rc;
}

int ts_shard_slice(const ts_shard *sh, int r, const ts_st_set *full, void **img, ts_st_set **out, ts_error *err) {
    *img = NULL;
    *out = NULL;
    slice *sl;
    int n;
    size_t data, hl;
    char *hdr;
    int rc = plan_slices(sh, r, full, &sl, &n, &data, &hdr, &hl, err);
    if (rc) return rc;
    const size_t hpad = header_pad(hl);
    char *buf = ts_alloc(8 + hpad + data, TS_MEM_WEIGHTS);
    if (!buf) rc = ts_fail(err, TS_E_NOMEM, "out of memory for GPU %d's %.2f GB of weights", r, (double)data / 1e9);
    if (!rc) {
        const uint64_t L = hpad;
        memcpy(buf, &L, 8);
        memcpy(buf + 8, hdr, hl);
        memset(buf + 8 + hl, ' ', hpad - hl);
        char *d0 = buf + 8 + hpad;
        for (int i = 0; i < n; i++) {
            const slice *s = &sl[i];
            if (s->p.kind == TS_SPLIT_REPL) memcpy(d0 + s->off, s->t->data, s->nbytes);
            else copy_spans(s->t, &s->p, s->p.dim < 0 ? s->t->n_dims - 1 : s->p.dim, d0 + s->off);
        }
        char what[64];
        snprintf(what, sizeof what, "GPU %d's slices", r);
        rc = ts_st_open_mem(buf, 8 + hpad + data, what, out, err);
    }
    ts_free(hdr);
    ts_free(sl);
    if (rc) ts_free(buf);
    else *img = buf;
    return rc;
}

