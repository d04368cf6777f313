/* test_experts.c: the expert map, --expert-cache sizes, the slot cache and
 * its eviction (src/model/experts.h). Group `experts`.
 *
 * Installs: tests/fixtures/tiny-moe and alt-moe converted to INT4 (and INT8)
 * by the CLI, a bf16 synth of the tiny MoE shape, and hand-written files for
 * the layouts the map must refuse. Correctness of a slot is checked against
 * the loader's own view of the tensors (the mmap'd bytes each tensor name
 * resolves to), so an offset error in the map or the read shows as a
 * mismatch. Hit counts are checked against a plain O(n) reference of each
 * policy, so an eviction bug shows as a different hit count.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "model/experts.h"
#include "cpu/kernels.h" /* ts_linear_ref: the reference product */
#include "ts_test.h"

/* ---- helpers ---- */

/* Convert a fixture once per run; returns the install directory. */
static const char *install(const char *fixture, int bits) {
    static char dirs[8][256];
    static int made[8];
    int slot = (strcmp(fixture, "tiny-moe") ? 2 : 0) + (bits == 8) + (bits == 16 ? 4 : 0);
    char *d = dirs[slot];
    if (made[slot]) return made[slot] > 0 ? d : NULL;
    snprintf(d, 256, "%s/xinst-%s-%d", ts_test_tmpdir(), fixture, bits);
    char out[4096];
    int rc;
    if (bits == 16)
        rc = ts_test_sh(out, sizeof out, "%s synth --shape tests/fixtures/quant/tiny-moe-shape.json --out %s --bits 16 --quiet",
                        ts_test_bin(), d);
    else
        rc = ts_test_sh(out, sizeof out, "%s convert tests/fixtures/%s %s --bits %d --quiet", ts_test_bin(), fixture, d, bits);
    made[slot] = rc == 0 ? 1 : -1;
    if (rc) ts_test_fail(__FILE__, __LINE__, "making %s: %s", d, out);
    return rc ? NULL : d;
}

typedef struct inst {
    ts_st_set *st;
    ts_config cfg;
    ts_expert_map *map;
} inst;

static int inst_open(inst *x, const char *dir) {
    memset(x, 0, sizeof *x);
    ts_error err = {0};
    if (!dir) return -1;
    if (ts_config_load(dir, &x->cfg, &err) || ts_st_open_dir(dir, &x->st, &err) ||
        ts_expert_map_build(x->st, &x->cfg, &x->map, &err)) {
        ts_test_fail(__FILE__, __LINE__, "%s: %s", dir, err.msg);
        return -1;
    }
    return 0;
}

static void inst_close(inst *x) {
    ts_expert_map_free(x->map);
    ts_st_close(x->st);
}

/* The mapped file bytes of map index ix (what a slot must hold). */
static const uint8_t *file_bytes(const inst *x, size_t ix) {
    return (const uint8_t *)x->st->files[x->map->file[ix]].map + x->map->off[ix];
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

/* ---- sizes ---- */

TS_TEST(experts, parse_size) {
    static const struct { const char *s; uint64_t v; } good[] = {
        {"1", 1}, {"4096", 4096}, {"64K", 65536}, {"64k", 65536}, {"64KB", 65536}, {"64KiB", 65536},
        {"512M", 512ull << 20}, {"3G", 3ull << 30}, {"2T", 2ull << 40}, {"1.5G", 3ull << 29},
        {"0.5K", 512}, {"1.25M", 1310720}, {"10B", 10}, {"18446744073709551615", UINT64_MAX},
        {"16777215T", 16777215ull << 40},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 7;
        ts_error err = {0};
        int rc = ts_parse_size(good[i].s, &v, &err);
        CHECK_MSG(rc == 0, "'%s': %s", good[i].s, err.msg);
        CHECK_MSG(v == good[i].v, "'%s' -> %llu, expected %llu", good[i].s, (unsigned long long)v, (unsigned long long)good[i].v);
    }
    static const char *bad[] = {"", "0", "0K", "-1", "K", "1X", "1.5", "1.", ".5G", "1 G", "1GG", "1Gi", "18446744073709551616",
                                "16777216T", "1e9", " 1", "1KiBB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 7;
        ts_error err = {0};
        int rc = ts_parse_size(bad[i], &v, &err);
        CHECK_MSG(rc == TS_E_ARG, "'%s' accepted (%llu)", bad[i], (unsigned long long)v);
        CHECK_MSG(v == 7, "'%s': output changed on error", bad[i]);
        char q[64];
        snprintf(q, sizeof q, "'%s'", bad[i]);
        CHECK_MSG(strstr(err.msg, q) != NULL, "'%s': message does not quote the text: %s", bad[i], err.msg);
    }
    CHECK(ts_parse_size(NULL, &(uint64_t){0}, NULL) == TS_E_ARG);
}

/* The contract's edges (include/turbospark.h) that the fuzz harness's reference shares
 * with the parser and so cannot judge: values, rounding, the zero and 2^64 limits. */
TS_TEST(experts, parse_size_edges) {
    static const struct { const char *s; uint64_t v; } good[] = {
        {"1.5G", 1610612736}, {"1.5GiB", 1610612736}, {"1.5g", 1610612736},
        /* a fraction of T: fnum * 2^40 wrapped 64 bits before (fuzz: size/regress-T-fraction-wrap) */
        {"0.999999999T", 1099511626676}, {"15.999999999999T", 17592186043316},
        {"16777215.999999999T", 18446744073709550516ull},
        {"0.0005K", 1},  /* 0.512 bytes rounds to 1 */
        {"0.0015K", 2},  /* 1.536 */
        {"1.0000000009K", 1024}, /* digits past the 9th do not count */
        {"007K", 7168},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 0;
        ts_error err = {0};
        CHECK_MSG(ts_parse_size(good[i].s, &v, &err) == 0, "'%s': %s", good[i].s, err.msg);
        CHECK_MSG(v == good[i].v, "'%s' -> %llu, expected %llu", good[i].s, (unsigned long long)v, (unsigned long long)good[i].v);
    }
    /* 2^64 and past it in every form; zero, also after rounding; signs */
    static const char *bad[] = {"18446744073709551616", "99999999999999999999999", "16777216T", "16777216.0T",
                                "17179869184G", "18014398509481984K", "0", "0.0G", "0.0004K", "-1", "-1G", "+1G", "-0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 7;
        ts_error err = {0};
        CHECK_MSG(ts_parse_size(bad[i], &v, &err) == TS_E_ARG && v == 7, "'%s' accepted (%llu)", bad[i], (unsigned long long)v);
        CHECK_MSG(err.msg[0], "'%s': no message", bad[i]);
    }
}

/* ---- the map ---- */

/* Every (layer, expert) range: parts tile it exactly, each part's bytes are
 * the bytes the loader resolves the tensor's name to, and no two experts'
 * ranges overlap. */
static void check_map(const char *dir, int want_parts) {
    inst x;
    if (inst_open(&x, dir)) return;
    const ts_expert_map *m = x.map;
    CHECK_MSG(m->n_main == x.cfg.n_layers && m->n_layers == x.cfg.n_layers + 1, "%s: %d layers (main %d), config %d + MTP", dir,
              m->n_layers, m->n_main, x.cfg.n_layers);
    CHECK(m->E == x.cfg.E && m->topk == x.cfg.topk && m->n_parts == want_parts);
    uint64_t sum = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const ts_xmap_part *lp = m->parts + (size_t)l * TS_XMAP_MAX_PARTS;
        uint64_t acc = 0;
        for (int j = 0; j < m->n_parts; j++) {
            CHECK_MSG(lp[j].off == acc, "layer %d part %d at %llu, expected %llu", l, j, (unsigned long long)lp[j].off,
                      (unsigned long long)acc);
            acc += lp[j].nbytes;
        }
        for (int e = 0; e < m->E; e++) {
            size_t ix = ts_xmap_idx(m, l, e);
            CHECK(m->bytes[ix] == acc && m->bytes[ix] <= m->expert_bytes);
            sum += m->bytes[ix];
            for (int j = 0; j < m->n_parts; j++) {
                char n[300];
                if (l < m->n_main) {
                    snprintf(n, sizeof n, "model.language_model.layers.%d.mlp.experts.%d.%s", l, e, lp[j].suffix);
                    if (!ts_st_find(x.st, n)) snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s", l, e, lp[j].suffix);
                } else {
                    snprintf(n, sizeof n, "mtp.layers.0.mlp.experts.%d.%s", e, lp[j].suffix);
                }
                const ts_st_tensor *t = ts_st_find(x.st, n);
                CHECK_MSG(t, "no tensor %s", n);
                CHECK(t->nbytes == lp[j].nbytes);
                CHECK_MSG(!memcmp(file_bytes(&x, ix) + lp[j].off, t->data, t->nbytes), "%s: bytes differ from the map's range", n);
            }
            /* no overlap with any other expert of the same file */
            for (size_t o = 0; o < ix; o++)
                if (m->file[o] == m->file[ix])
                    CHECK_MSG(m->off[o] + m->bytes[o] <= m->off[ix] || m->off[ix] + m->bytes[ix] <= m->off[o], "experts %zu and %zu overlap",
                              o, ix);
        }
    }
    CHECK(sum > 0);
    inst_close(&x);
}

TS_TEST(experts, map_int4_int8_bf16) {
    check_map(install("tiny-moe", 4), 9);
    if (ts_test_failed()) return;
    check_map(install("alt-moe", 4), 9);
    if (ts_test_failed()) return;
    check_map(install("tiny-moe", 8), 9);
    if (ts_test_failed()) return;
    check_map(install("tiny-moe", 16), 3);
}

/* A checkpoint with fused experts (the fixture as released) is refused with
 * the fused tensor's name. */
TS_TEST(experts, map_refuses_fused) {
    ts_config cfg;
    ts_st_set *st = NULL;
    ts_expert_map *m = NULL;
    ts_error err = {0};
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    CHECK(ts_config_load("tests/fixtures/tiny-moe", &cfg, &err) == 0);
    CHECK(ts_st_open_dir("tests/fixtures/tiny-moe", &st, &err) == 0);
    int rc = ts_expert_map_build(st, &cfg, &m, &err);
    CHECK_MSG(rc == TS_E_MODEL && !m, "rc %d", rc);
    CHECK_MSG(strstr(err.msg, "'model.language_model.layers.0.mlp.experts.gate_up_proj'") && strstr(err.msg, "fused") &&
                  strstr(err.msg, "convert"),
              "%s", err.msg);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
    /* a dense model has no experts to stream */
    ts_config dense;
    CHECK(ts_config_load("tests/fixtures/tiny-dense", &dense, &err) == 0);
    CHECK(ts_expert_map_build(st, &dense, &m, &err) == TS_E_MODEL && strstr(err.msg, "no routed experts"));
    ts_st_close(st);
}

/* Hand-written one-layer, two-expert bf16 installs: [8, 4] gate/up and [4, 8]
 * down per expert, in a given tensor order. */
static const char *XN[6] = {"model.layers.0.mlp.experts.0.gate_proj.weight", "model.layers.0.mlp.experts.0.up_proj.weight",
                            "model.layers.0.mlp.experts.0.down_proj.weight", "model.layers.0.mlp.experts.1.gate_proj.weight",
                            "model.layers.0.mlp.experts.1.up_proj.weight", "model.layers.0.mlp.experts.1.down_proj.weight"};

static int write_st(const char *path, const int *order, int n, int gap_after) {
    char hdr[4096];
    size_t o = 0, off = 0;
    o += snprintf(hdr + o, sizeof hdr - o, "{");
    for (int i = 0; i < n; i++) {
        const int down = order[i] % 3 == 2;
        o += snprintf(hdr + o, sizeof hdr - o, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}", i ? "," : "",
                      XN[order[i]], down ? 4 : 8, down ? 8 : 4, off, off + 64);
        off += 64 + (i == gap_after ? 64 : 0);
    }
    o += snprintf(hdr + o, sizeof hdr - o, "}");
    while ((8 + o) % 8) hdr[o++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t hl = o;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, o, f);
    for (size_t b = 0; b < off; b++) fputc((int)(b * 7 % 251), f);
    return fclose(f);
}

static int map_of(const char *path, ts_expert_map **m, ts_error *err) {
    ts_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.model_type, sizeof cfg.model_type, "qwen3_5_moe");
    cfg.is_moe = 1;
    cfg.E = 2;
    cfg.topk = 1;
    cfg.n_layers = 1;
    ts_st_set *st = NULL;
    int rc = ts_st_open_file(path, &st, err);
    if (!rc) rc = ts_expert_map_build(st, &cfg, m, err);
    ts_st_close(st);
    return rc;
}

TS_TEST(experts, map_refuses_split_experts) {
    char p[300];
    ts_error err = {0};
    ts_expert_map *m = NULL;
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    /* contiguous, and in a different part order than gate/up/down: accepted,
     * parts sorted by offset */
    snprintf(p, sizeof p, "%s/xok.safetensors", ts_test_tmpdir());
    const int ok[6] = {2, 0, 1, 5, 3, 4};
    CHECK(write_st(p, ok, 6, -1) == 0);
    CHECK_MSG(map_of(p, &m, &err) == 0, "%s", err.msg);
    CHECK(m->n_parts == 3 && m->expert_bytes == 192 && m->bytes[1] == 192 && m->off[1] == m->off[0] + 192);
    CHECK(!strcmp(m->parts[0].suffix, "down_proj.weight") && m->parts[1].off == 64);
    ts_expert_map_free(m);
    m = NULL;
    /* interleaved experts: expert 0's gate and up are separated by expert 1's gate */
    const int inter[6] = {0, 3, 1, 4, 2, 5};
    CHECK(write_st(p, inter, 6, -1) == 0);
    CHECK(map_of(p, &m, &err) == TS_E_MODEL && !m);
    CHECK_MSG(strstr(err.msg, "not one contiguous range") && strstr(err.msg, "'model.layers.0.mlp.experts.0.up_proj.weight'"), "%s",
              err.msg);
    /* a hole inside expert 1 (64 unused bytes after its gate) */
    const int seq[6] = {0, 1, 2, 3, 4, 5};
    CHECK(write_st(p, seq, 6, 3) == 0);
    CHECK(map_of(p, &m, &err) == TS_E_MODEL);
    CHECK_MSG(strstr(err.msg, "'model.layers.0.mlp.experts.1.up_proj.weight'") && strstr(err.msg, "expert 1"), "%s", err.msg);
    /* expert 1 laid out differently from expert 0 */
    const int diff[6] = {0, 1, 2, 4, 3, 5};
    CHECK(write_st(p, diff, 6, -1) == 0);
    CHECK(map_of(p, &m, &err) == TS_E_MODEL);
    CHECK_MSG(strstr(err.msg, "laid out differently") && strstr(err.msg, "experts.1."), "%s", err.msg);
    /* a missing expert tensor */
    CHECK(write_st(p, seq, 5, -1) == 0);
    CHECK(map_of(p, &m, &err) == TS_E_MODEL);
    CHECK_MSG(strstr(err.msg, "missing tensor 'model.layers.0.mlp.experts.1.down_proj.weight'"), "%s", err.msg);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
}

/* ---- the cache ---- */

/* Reference policies: the same keys as experts.c, but evicting by a linear
 * scan for the smallest (key, map index) among unpinned resident experts. */
typedef struct refc {
    int n_slots, n_res, policy;
    size_t *res;    /* resident map indexes */
    double *key;
    float *cnt;
    uint64_t *tl, clock;
    double h;
} refc;

static int ref_ensure(refc *r, const ts_expert_map *m, int layer, const int32_t *ids, int n, uint64_t *hits) {
    int E = m->E;
    int mult[512] = {0}, seen[512] = {0}, order[512], nu = 0;
    for (int i = 0; i < n; i++) {
        if (!seen[ids[i]]) { seen[ids[i]] = 1; order[nu++] = ids[i]; }
        mult[ids[i]]++;
    }
    r->clock++;
    int pinned[512];
    int npin = 0;
    for (int u = 0; u < nu; u++) {
        size_t ix = (size_t)layer * E + order[u];
        double k = (double)r->clock;
        if (r->policy == TS_XC_LFRU) {
            double v = (double)r->cnt[ix] * exp2(-(double)(r->clock - r->tl[ix]) / r->h) + mult[order[u]];
            r->cnt[ix] = (float)v;
            r->tl[ix] = r->clock;
            k = (double)r->clock / r->h + log2((double)r->cnt[ix]);
        }
        int at = -1;
        for (int s = 0; s < r->n_res; s++) if (r->res[s] == ix) at = s;
        if (at >= 0) { (*hits)++; r->key[at] = k; pinned[npin++] = at; continue; }
        if (r->n_res < r->n_slots) at = r->n_res++;
        else {
            for (int s = 0; s < r->n_res; s++) {
                int p = 0;
                for (int q = 0; q < npin; q++) p |= pinned[q] == s;
                if (p) continue;
                if (at < 0 || r->key[s] < r->key[at] || (r->key[s] == r->key[at] && r->res[s] < r->res[at])) at = s;
            }
        }
        r->res[at] = ix;
        r->key[at] = k;
        pinned[npin++] = at;
    }
    return nu;
}

/* Hits of the misses-after-hits order: the reference above pins a hit before
 * later misses of the same batch run, which is what experts.c does only if it
 * handles hits first; so the reference processes hits first too. */
static int ref_ensure2(refc *r, const ts_expert_map *m, int layer, const int32_t *ids, int n, uint64_t *hits) {
    /* reorder: ids already resident first (stable), then the rest */
    int32_t buf[4096];
    int nb = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            size_t ix = (size_t)layer * m->E + ids[i];
            int res = 0;
            for (int s = 0; s < r->n_res; s++) res |= r->res[s] == ix;
            if (res == (pass == 0)) buf[nb++] = ids[i];
        }
    return ref_ensure(r, m, layer, buf, nb, hits);
}

/* Random batches of rows (1..rows_max rows of top-k distinct ids, with a bias
 * toward low ids so that there are hits) through a cache of n_slots slots:
 * every returned slot holds its expert's bytes, pins are dropped by unpin,
 * and hits equal the reference policy's. */
static void cache_run(const inst *x, int policy, int n_slots, int direct, int n_io, int rows_max, int iters, uint64_t seed) {
    const ts_expert_map *m = x->map;
    ts_xc_params p;
    ts_xc_params_default(&p);
    p.policy = policy;
    p.direct = direct;
    p.n_io = n_io;
    p.halflife = 3;
    p.cache_bytes = (uint64_t)n_slots * ts_xc_slot_stride(m) + 100;
    ts_xc *c = NULL;
    ts_error err = {0};
    CHECK_MSG(ts_xc_open(m, &p, &c, &err) == 0, "%s", err.msg);
    int ns = ts_xc_n_slots(c);
    CHECK(ns == n_slots);
    refc r = {ns, 0, policy, calloc(ns, sizeof(size_t)), calloc(ns, sizeof(double)), calloc((size_t)m->n_layers * m->E, sizeof(float)),
              calloc((size_t)m->n_layers * m->E, sizeof(uint64_t)), 0, p.halflife * m->n_layers};
    uint64_t ref_hits = 0, distinct = 0;
    int32_t ids[256], slots[256];
    for (int it = 0; it < iters && !ts_test_failed(); it++) {
        int layer = (int)(rng_next(&seed) % m->n_layers);
        int rows = 1 + (int)(rng_next(&seed) % rows_max), n = 0;
        for (int rw = 0; rw < rows; rw++)
            for (int k = 0; k < m->topk; k++) {
                int e;
                for (;;) {
                    uint64_t v = rng_next(&seed);
                    e = (int)((v % 3 ? v % (m->E / 2 + 1) : v % m->E));
                    int dup = 0;
                    for (int q = n - k; q < n; q++) dup |= ids[q] == e;
                    if (!dup) break;
                }
                ids[n++] = e;
            }
        uint64_t misses0 = ts_xc_get_stats(c)->misses;
        int rc = ts_xc_ensure(c, layer, ids, n, slots, &err);
        int nu = ref_ensure2(&r, m, layer, ids, n, &ref_hits);
        distinct += (uint64_t)nu;
        CHECK_MSG(rc == 0, "ensure: %s", err.msg);
        CHECK(ts_xc_pinned(c) == nu);
        {
            /* the filled slots are exactly this call's misses */
            const int32_t *fl;
            int nf = ts_xc_last_filled(c, &fl);
            CHECK((uint64_t)nf == ts_xc_get_stats(c)->misses - misses0);
            for (int q = 0; q < nf; q++) {
                int fl_l, fl_e, in = 0;
                ts_xc_slot_owner(c, fl[q], &fl_l, &fl_e);
                for (int i = 0; i < n; i++) in |= ids[i] == fl_e;
                CHECK(fl_l == layer && in);
            }
        }
        for (int i = 0; i < n; i++) {
            int l2, e2;
            CHECK(slots[i] >= 0 && slots[i] < ns);
            ts_xc_slot_owner(c, slots[i], &l2, &e2);
            CHECK_MSG(l2 == layer && e2 == ids[i], "slot %d holds (%d, %d), wanted (%d, %d)", slots[i], l2, e2, layer, ids[i]);
            size_t ix = ts_xmap_idx(m, layer, ids[i]);
            CHECK_MSG(!memcmp(ts_xc_slot_data(c, slots[i]), file_bytes(x, ix), m->bytes[ix]),
                      "policy %d iter %d: slot %d bytes differ from layer %d expert %d's range", policy, it, slots[i], layer, ids[i]);
            for (int j = 0; j < i; j++) CHECK((slots[j] == slots[i]) == (ids[j] == ids[i]));
        }
        ts_xc_unpin(c, layer);
        CHECK(ts_xc_pinned(c) == 0);
    }
    const ts_xc_stats *s = ts_xc_get_stats(c);
    CHECK(s->hits + s->misses == distinct && s->ensures == (uint64_t)iters);
    CHECK_MSG(s->hits == ref_hits, "policy %s, %d slots: %llu hits, the reference policy %llu", ts_xc_policy_name(policy), ns,
              (unsigned long long)s->hits, (unsigned long long)ref_hits);
    uint64_t lh = 0, lm = 0;
    for (int l = 0; l < s->n_layers; l++) lh += s->layer[l].hits, lm += s->layer[l].misses;
    CHECK(lh == s->hits && lm == s->misses);
    CHECK(s->bytes_read >= s->misses * 1 && s->reads >= s->misses);
    /* buffered reads return exactly the experts' bytes (all experts of these shapes are one size) */
    if (!s->direct_active) CHECK_MSG(s->bytes_read == s->misses * m->bytes[0], "%llu bytes read for %llu misses of %llu",
                                     (unsigned long long)s->bytes_read, (unsigned long long)s->misses, (unsigned long long)m->bytes[0]);
    fprintf(stderr, "  %-4s %3d slots%s io %d: %llu hits / %llu (ref %llu), %llu evictions, %llu bytes read\n", ts_xc_policy_name(policy),
            ns, direct ? (s->direct_active ? " direct" : " direct(off)") : "", n_io, (unsigned long long)s->hits,
            (unsigned long long)distinct, (unsigned long long)ref_hits, (unsigned long long)s->evictions,
            (unsigned long long)s->bytes_read);
    free(r.res); free(r.key); free(r.cnt); free(r.tl);
    ts_xc_close(c);
}

TS_TEST(experts, cache_bytes_and_policies) {
    inst x;
    if (inst_open(&x, install("tiny-moe", 4))) return;
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    int total = x.map->n_layers * x.map->E;
    const int sizes[3] = {8 * 2, 12, total / 2};
    for (int pol = 0; pol < TS_XC_POLICY_N && !ts_test_failed(); pol++)
        for (int si = 0; si < 3 && !ts_test_failed(); si++)
            cache_run(&x, pol, sizes[si], si == 1, si == 2 ? 1 : 4, si == 1 ? 4 : 6, 400, 12345u + (uint64_t)si * 7 + pol);
    /* the whole model resident: after a warm-up every access hits */
    if (!ts_test_failed()) cache_run(&x, TS_XC_LRU, total, 0, 8, 6, 300, 99);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
    inst_close(&x);
    /* bf16 experts (3 parts) and the other fixture */
    if (ts_test_failed() || inst_open(&x, install("tiny-moe", 16))) return;
    cache_run(&x, TS_XC_LFRU, 10, 1, 2, 3, 200, 5);
    inst_close(&x);
    if (ts_test_failed() || inst_open(&x, install("alt-moe", 4))) return;
    cache_run(&x, TS_XC_LRU, x.map->topk * 3, 0, 3, 3, 200, 6);
    inst_close(&x);
}

/* A hot expert recurring among one-off ones: LFRU keeps it, LRU does not.
 * (A policy that ignores frequency fails this.) */
TS_TEST(experts, lfru_keeps_hot_expert) {
    ts_expert_map *m = NULL;
    ts_error err = {0};
    CHECK(ts_expert_map_synthetic(1, 64, 2, 1000, &m, &err) == 0);
    uint64_t hits[2] = {0, 0};
    for (int pol = 0; pol < 2; pol++) {
        ts_xc_params p;
        ts_xc_params_default(&p);
        p.policy = pol;
        p.dry = 1;
        p.halflife = 50;
        p.cache_bytes = 4 * ts_xc_slot_stride(m);
        ts_xc *c = NULL;
        CHECK_MSG(ts_xc_open(m, &p, &c, &err) == 0, "%s", err.msg);
        int cold = 1;
        for (int t = 0; t < 600; t++) {
            /* hot expert 0 every third step, otherwise a pair of new cold experts */
            int32_t ids[2];
            if (t % 3 == 0) { ids[0] = 0; ids[1] = cold; cold = cold % 63 + 1; }
            else { ids[0] = cold; cold = cold % 63 + 1; ids[1] = cold; cold = cold % 63 + 1; }
            CHECK(ts_xc_ensure(c, 0, ids, 2, NULL, &err) == 0);
            ts_xc_unpin(c, 0);
        }
        hits[pol] = ts_xc_get_stats(c)->hits;
        ts_xc_close(c);
    }
    fprintf(stderr, "  hot expert: lru %llu hits, lfru %llu hits\n", (unsigned long long)hits[0], (unsigned long long)hits[1]);
    CHECK_MSG(hits[1] >= 190 && hits[0] < 20, "lru %llu, lfru %llu", (unsigned long long)hits[0], (unsigned long long)hits[1]);
    ts_expert_map_free(m);
}

TS_TEST(experts, capacity_errors) {
    inst x;
    if (inst_open(&x, install("tiny-moe", 4))) return;
    const ts_expert_map *m = x.map;
    ts_xc_params p;
    ts_xc_params_default(&p);
    ts_error err = {0};
    ts_xc *c = NULL;
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    /* one slot short of the top-k */
    p.cache_bytes = (uint64_t)m->topk * ts_xc_slot_stride(m) - 1;
    CHECK(ts_xc_open(m, &p, &c, &err) == TS_E_ARG && !c);
    CHECK_MSG(strstr(err.msg, "--expert-cache") && strstr(err.msg, "top-2"), "%s", err.msg);
    CHECK(ts_xc_plan_bytes(m, &p) == 0);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
    /* the map's own bytes, as it reports them */
    {
        ts_expert_map *m2 = NULL;
        size_t u1 = ts_mem_used(TS_MEM_EXPERT_CACHE);
        CHECK(ts_expert_map_build(x.st, &x.cfg, &m2, &err) == 0);
        CHECK_MSG(ts_mem_used(TS_MEM_EXPERT_CACHE) - u1 == ts_expert_map_bytes(m2), "map allocated %zu, reports %llu",
                  ts_mem_used(TS_MEM_EXPERT_CACHE) - u1, (unsigned long long)ts_expert_map_bytes(m2));
        ts_expert_map_free(m2);
    }
    /* exactly the top-k: opens, and the allocator rises by the plan's bytes */
    p.cache_bytes += 1;
    CHECK_MSG(ts_xc_open(m, &p, &c, &err) == 0, "%s", err.msg);
    CHECK_MSG(ts_mem_used(TS_MEM_EXPERT_CACHE) - used0 == ts_xc_plan_bytes(m, &p), "allocated %zu, plan %llu",
              ts_mem_used(TS_MEM_EXPERT_CACHE) - used0, (unsigned long long)ts_xc_plan_bytes(m, &p));
    /* a batch of two rows routing to three distinct experts does not fit two slots */
    int32_t ids[4] = {1, 2, 2, 3}, slots[4] = {-5, -5, -5, -5};
    CHECK(ts_xc_ensure(c, 0, ids, 4, slots, &err) == TS_E_ARG);
    CHECK_MSG(strstr(err.msg, "3 distinct") && strstr(err.msg, "layer 0"), "%s", err.msg);
    CHECK(ts_xc_pinned(c) == 0 && slots[0] == -5);
    /* pins add up: two experts of layer 1 pinned leave no room for layer 2 */
    CHECK(ts_xc_ensure(c, 1, ids, 2, slots, &err) == 0);
    CHECK(ts_xc_ensure(c, 2, ids, 1, slots, &err) == TS_E_ARG && strstr(err.msg, "2 slots already pinned"));
    ts_xc_unpin(c, 1);
    CHECK(ts_xc_ensure(c, 2, ids, 1, slots, &err) == 0);
    ts_xc_unpin(c, 2);
    /* bad ids and layers */
    int32_t bad = 8;
    CHECK(ts_xc_ensure(c, 0, &bad, 1, slots, &err) == TS_E_ARG && strstr(err.msg, "expert id 8"));
    bad = -1;
    CHECK(ts_xc_ensure(c, 0, &bad, 1, slots, &err) == TS_E_ARG);
    CHECK(ts_xc_ensure(c, m->n_layers, ids, 1, slots, &err) == TS_E_ARG && strstr(err.msg, "layer 9"));
    CHECK(ts_xc_pinned(c) == 0);
    ts_xc_close(c);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
    inst_close(&x);
}

/* Table invariants after an error: every pinned count zero, every resident
 * slot holds its expert's bytes. */
static void check_consistent(const inst *x, ts_xc *c) {
    CHECK(ts_xc_pinned(c) == 0);
    for (int s = 0; s < ts_xc_n_slots(c); s++) {
        int l, e;
        ts_xc_slot_owner(c, s, &l, &e);
        if (l < 0) continue;
        size_t ix = ts_xmap_idx(x->map, l, e);
        CHECK_MSG(!memcmp(ts_xc_slot_data(c, s), file_bytes(x, ix), x->map->bytes[ix]), "slot %d (layer %d expert %d) corrupt", s, l, e);
    }
}

TS_TEST(experts, read_errors) {
    inst x;
    if (inst_open(&x, install("tiny-moe", 4))) return;
    const ts_expert_map *m = x.map;
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    ts_xc_params p;
    ts_xc_params_default(&p);
    p.cache_bytes = 6 * ts_xc_slot_stride(m);
    ts_xc *c = NULL;
    ts_error err = {0};
    CHECK(ts_xc_open(m, &p, &c, &err) == 0);
    int32_t a[2] = {0, 1}, b[4] = {0, 2, 3, 4}, slots[4];
    CHECK(ts_xc_ensure(c, 3, a, 2, slots, &err) == 0);
    ts_xc_unpin(c, 3);
    /* the second read of the next batch fails: a hit (0) and three misses */
    ts_xc_fail_read_after(c, 2);
    CHECK(ts_xc_ensure(c, 3, b, 4, slots, &err) == TS_E_IO);
    CHECK_MSG(strstr(err.msg, "reading layer 3 expert") && strstr(err.msg, ".safetensors") && strstr(err.msg, "Input/output error"), "%s",
              err.msg);
    check_consistent(&x, c);
    if (ts_test_failed()) return;
    const ts_xc_stats *s = ts_xc_get_stats(c);
    CHECK(s->read_errors == 1 && s->ensures == 1);
    /* expert 0 stays resident (a hit of the failed call), the failed misses do not */
    int resident = 0;
    for (int q = 0; q < ts_xc_n_slots(c); q++) {
        int l, e;
        ts_xc_slot_owner(c, q, &l, &e);
        resident += l == 3;
        CHECK(!(l == 3 && e >= 2));
    }
    CHECK(resident == 2);
    /* the same batch again succeeds, with the right bytes */
    CHECK_MSG(ts_xc_ensure(c, 3, b, 4, slots, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 4; i++) CHECK(!memcmp(ts_xc_slot_data(c, slots[i]), file_bytes(&x, ts_xmap_idx(m, 3, b[i])), m->bytes[0]));
    ts_xc_unpin(c, 3);
    ts_xc_close(c);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
    inst_close(&x);
}

/* A shard truncated while the cache is open (mid-generation): the experts
 * past the cut fail with a message naming the file, the others still load. */
TS_TEST(experts, truncated_file) {
    const char *src = install("tiny-moe", 4);
    if (!src) return;
    char dir[300], out[2048];
    snprintf(dir, sizeof dir, "%s/xtrunc", ts_test_tmpdir());
    CHECK(ts_test_sh(out, sizeof out, "rm -rf %s && cp -r %s %s", dir, src, dir) == 0);
    inst x;
    if (inst_open(&x, dir)) return;
    const ts_expert_map *m = x.map;
    /* cut the file of the last main layer's expert 5 in the middle of it */
    size_t ix = ts_xmap_idx(m, m->n_main - 1, 5);
    const char *path = m->paths[m->file[ix]];
    uint64_t cut = m->off[ix] + m->bytes[ix] / 2;
    /* experts wholly before the cut, in that file */
    ts_xc_params p;
    ts_xc_params_default(&p);
    p.cache_bytes = 4 * ts_xc_slot_stride(m);
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    for (int direct = 0; direct < 2; direct++) {
        ts_xc *c = NULL;
        ts_error err = {0};
        p.direct = direct;
        CHECK(ts_xc_open(m, &p, &c, &err) == 0);
        if (direct == 0) CHECK_MSG(truncate(path, (off_t)cut) == 0, "truncate %s: %s", path, strerror(errno));
        int32_t ids[2] = {4, 5}, slots[2];
        CHECK(ts_xc_ensure(c, m->n_main - 1, ids, 2, slots, &err) == TS_E_IO);
        CHECK_MSG(strstr(err.msg, path) && strstr(err.msg, "truncated") && strstr(err.msg, "expert 5"), "%s", err.msg);
        check_consistent(&x, c);
        if (ts_test_failed()) return;
        /* an expert before the cut in the same file still loads */
        int found = -1;
        for (int l = 0; l < m->n_main && found < 0; l++)
            for (int e = 0; e < m->E; e++) {
                size_t q = ts_xmap_idx(m, l, e);
                if (m->file[q] == m->file[ix] && m->off[q] + m->bytes[q] + 4096 < cut) { found = (int)q; break; }
            }
        CHECK(found >= 0);
        int32_t one = found % m->E;
        CHECK_MSG(ts_xc_ensure(c, found / m->E, &one, 1, slots, &err) == 0, "%s", err.msg);
        CHECK(!memcmp(ts_xc_slot_data(c, slots[0]), file_bytes(&x, (size_t)found), m->bytes[found]));
        ts_xc_close(c);
    }
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0);
    /* the map's st is mapped over a now-shorter file: close without touching it */
    ts_expert_map_free(x.map);
    ts_st_close(x.st);
}

/* Allocation failure at every allocation of map building and cache opening:
 * a clean TS_E_NOMEM, and the category's counter back where it was. */
TS_TEST(experts, alloc_faults_leak_nothing) {
    const char *dir = install("tiny-moe", 4);
    if (!dir) return;
    ts_config cfg;
    ts_st_set *st = NULL;
    ts_error err = {0};
    CHECK(ts_config_load(dir, &cfg, &err) == 0 && ts_st_open_dir(dir, &st, &err) == 0);
    size_t used0 = ts_mem_used(TS_MEM_EXPERT_CACHE);
    int succeeded = 0, failures = 0;
    for (long n = 1; n < 200 && !succeeded; n++) {
        ts_expert_map *m = NULL;
        ts_xc *c = NULL;
        ts_mem_fail_after(n);
        int rc = ts_expert_map_build(st, &cfg, &m, &err);
        if (rc == 0) {
            ts_xc_params p;
            ts_xc_params_default(&p);
            p.cache_bytes = 10 * ts_xc_slot_stride(m);
            rc = ts_xc_open(m, &p, &c, &err);
            if (rc == 0) {
                int32_t ids[2] = {1, 2};
                rc = ts_xc_ensure(c, 0, ids, 2, NULL, &err);
            }
        }
        ts_mem_fail_after(0);
        if (rc == 0) succeeded = 1;
        else {
            failures++;
            CHECK_MSG(rc == TS_E_NOMEM && strstr(err.msg, "out of memory"), "fault %ld: rc %d: %s", n, rc, err.msg);
            CHECK(!c);
        }
        ts_xc_close(c);
        ts_expert_map_free(m);
        CHECK_MSG(ts_mem_used(TS_MEM_EXPERT_CACHE) == used0, "fault %ld: %zu bytes left", n,
                  ts_mem_used(TS_MEM_EXPERT_CACHE) - used0);
    }
    CHECK(succeeded && failures >= 8);
    ts_st_close(st);
}

/* Dry mode (the simulator) makes the same decisions as the real cache. */
TS_TEST(experts, dry_matches_real) {
    inst x;
    if (inst_open(&x, install("tiny-moe", 4))) return;
    ts_expert_map *syn = NULL;
    ts_error err = {0};
    CHECK(ts_expert_map_synthetic(x.map->n_layers, x.map->E, x.map->topk, x.map->expert_bytes, &syn, &err) == 0);
    CHECK(ts_xc_slot_stride(syn) == ts_xc_slot_stride(x.map));
    for (int pol = 0; pol < 2; pol++) {
        ts_xc *a = NULL, *b = NULL;
        ts_xc_params p;
        ts_xc_params_default(&p);
        p.policy = pol;
        p.cache_bytes = 20 * ts_xc_slot_stride(syn);
        CHECK(ts_xc_open(x.map, &p, &a, &err) == 0);
        p.dry = 1;
        CHECK(ts_xc_open(syn, &p, &b, &err) == 0);
        CHECK(ts_xc_slot_data(b, 0) == NULL);
        uint64_t seed = 77;
        for (int it = 0; it < 300; it++) {
            int32_t ids[6], sa[6], sb[6];
            int layer = (int)(rng_next(&seed) % x.map->n_layers);
            for (int i = 0; i < 6; i++) ids[i] = (int32_t)(rng_next(&seed) % (uint64_t)x.map->E);
            CHECK(ts_xc_ensure(a, layer, ids, 6, sa, &err) == 0 && ts_xc_ensure(b, layer, ids, 6, sb, &err) == 0);
            for (int i = 0; i < 6; i++) CHECK(sa[i] == sb[i]);
            ts_xc_unpin(a, layer);
            ts_xc_unpin(b, layer);
        }
        CHECK(ts_xc_get_stats(a)->hits == ts_xc_get_stats(b)->hits && ts_xc_get_stats(b)->bytes_read == 0);
        ts_xc_close(a);
        ts_xc_close(b);
    }
    ts_expert_map_free(syn);
    inst_close(&x);
}

/* Views onto a slot compute what the engine's bound expert weights compute,
 * bit for bit (reference kernel on both), for every expert of every layer
 * that one slot cycles through. */
#include "engine/engine.h"

TS_TEST(experts, slot_views_match_bound_weights) {
    const char *dirs[2] = {install("tiny-moe", 4), install("tiny-moe", 16)};
    for (int d = 0; d < 2; d++) {
        inst x;
        if (inst_open(&x, dirs[d])) return;
        ts_engine *e = NULL;
        ts_error err = {0};
        CHECK_MSG(ts_engine_open(dirs[d], NULL, &e, &err) == 0, "%s", err.msg);
        const ts_model *mo = &e->model;
        ts_xc_params p;
        ts_xc_params_default(&p);
        p.cache_bytes = (uint64_t)x.map->topk * ts_xc_slot_stride(x.map);
        ts_xc *c = NULL;
        CHECK(ts_xc_open(x.map, &p, &c, &err) == 0);
        int H = x.cfg.H, Im = x.cfg.Im;
        float *in = malloc(sizeof(float) * (H > Im ? H : Im)), *y0 = malloc(sizeof(float) * (H > Im ? H : Im)),
              *y1 = malloc(sizeof(float) * (H > Im ? H : Im));
        uint64_t seed = 3;
        for (int i = 0; i < (H > Im ? H : Im); i++) in[i] = (float)((int)(rng_next(&seed) % 2001) - 1000) / 1000.f;
        for (int l = 0; l < x.map->n_layers && !ts_test_failed(); l++) {
            const ts_ffn_w *f = l < x.map->n_main ? &mo->layers[l].ffn : &mo->mtp.layer.ffn;
            for (int ex = 0; ex < x.map->E; ex++) {
                int32_t id = ex, slot;
                CHECK(ts_xc_ensure(c, l, &id, 1, &slot, &err) == 0);
                ts_weight w[3];
                CHECK_MSG(ts_expert_views(x.map, &x.cfg, l, ts_xc_slot_data(c, slot), w, &err) == 0, "%s", err.msg);
                const ts_weight *b[3] = {&f->e_gate[ex], &f->e_up[ex], &f->e_down[ex]};
                for (int j = 0; j < 3; j++) {
                    CHECK(w[j].rows == b[j]->rows && w[j].cols == b[j]->cols && w[j].dtype == b[j]->dtype && w[j].bits == b[j]->bits);
                    ts_weight bw = *b[j];
                    bw.packed = NULL;
                    ts_linear_ref(&w[j], in, y0, 1);
                    ts_linear_ref(&bw, in, y1, 1);
                    CHECK_MSG(!memcmp(y0, y1, sizeof(float) * w[j].rows), "%s layer %d expert %d part %d: slot view differs", dirs[d], l, ex, j);
                }
                ts_xc_unpin(c, l);
            }
        }
        free(in); free(y0); free(y1);
        ts_xc_close(c);
        ts_engine_close(e);
        inst_close(&x);
    }
}

/* Caller-owned slots (a device backend's, model/xstream.c): the cache
 * writes them only through prepare, never faults them in or zeroes them,
 * counts none of their bytes, and cuts the budget into slots alone. The
 * pool here is host memory with a sentinel, so a stray write shows. */
typedef struct cs_user {
    const uint8_t *pool;
    size_t pool_bytes, slot_bytes;
    int calls, outside;
} cs_user;

static int cs_prepare(void *user, int layer, int expert, const uint8_t *src, uint8_t *dst) {
    cs_user *u = user;
    (void)layer, (void)expert;
    if (dst < u->pool || dst + u->slot_bytes > u->pool + u->pool_bytes) u->outside++;
    else memcpy(dst, src, u->slot_bytes);
    __atomic_add_fetch(&u->calls, 1, __ATOMIC_RELAXED);
    return 0;
}

TS_TEST(experts, caller_slots_written_only_by_prepare) {
    inst x;
    if (inst_open(&x, install("tiny-moe", 4))) return;
    const ts_expert_map *m = x.map;
    ts_xc_params p;
    ts_xc_params_default(&p);
    p.slot_bytes = m->expert_bytes;
    p.prepare = cs_prepare;
    p.caller_slots = 1;
    const uint64_t stride = (m->expert_bytes + 63) & ~(uint64_t)63;
    const int want = m->topk + 1;
    p.cache_bytes = stride * (uint64_t)want + stride / 2; /* no staging taken from it */
    uint64_t slots = 1, staging = 0, tables = 0;
    int ns = 0;
    uint64_t total = ts_xc_plan_parts(m, &p, &slots, &staging, &tables, &ns);
    CHECK_MSG(ns == want && slots == 0 && staging > 0 && total == staging + tables, "%d slots (wanted %d), slots %llu bytes", ns, want,
              (unsigned long long)slots);
    ts_error err = {0};
    ts_xc *c = NULL;
    CHECK_MSG(ts_xc_open(m, &p, &c, &err) == TS_E_ARG && strstr(err.msg, "pool"), "no pool: %s", err.msg);
    cs_user u = {0};
    u.pool_bytes = (size_t)ns * stride;
    u.slot_bytes = m->expert_bytes;
    uint8_t *pool = malloc(u.pool_bytes);
    memset(pool, 0xA5, u.pool_bytes);
    u.pool = pool;
    p.pool = pool;
    p.prepare_user = &u;
    const size_t before = ts_mem_used(TS_MEM_EXPERT_CACHE);
    CHECK_MSG(ts_xc_open(m, &p, &c, &err) == 0, "%s", err.msg);
    if (ts_test_failed()) { free(pool); inst_close(&x); return; }
    CHECK_MSG(ts_mem_used(TS_MEM_EXPERT_CACHE) - before == staging + tables, "the cache counted %zu bytes, plan %llu",
              ts_mem_used(TS_MEM_EXPERT_CACHE) - before, (unsigned long long)(staging + tables));
    CHECK(ts_xc_n_slots(c) == ns);
    /* nothing written at open */
    int clean = 1;
    for (size_t i = 0; i < u.pool_bytes; i++) clean &= pool[i] == 0xA5;
    CHECK_MSG(clean, "the pool was written at open");
    /* one layer's top-k, then every expert of every layer one at a time */
    int32_t ids[64], sl[64];
    for (int j = 0; j < m->topk; j++) ids[j] = j;
    CHECK(ts_xc_ensure(c, 0, ids, m->topk, sl, &err) == 0);
    int used[64] = {0};
    for (int j = 0; j < m->topk; j++) used[sl[j]] = 1;
    for (int s = 0; s < ns; s++)
        if (!used[s]) {
            int ok = 1;
            for (size_t i = 0; i < stride; i++) ok &= pool[(size_t)s * stride + i] == 0xA5;
            CHECK_MSG(ok, "slot %d was written without a read", s);
        }
    ts_xc_unpin(c, 0);
    int reads = 0;
    for (int l = 0; l < m->n_layers && !ts_test_failed(); l++)
        for (int e = 0; e < m->E; e++) {
            int32_t id = e, s;
            CHECK(ts_xc_ensure(c, l, &id, 1, &s, &err) == 0);
            const uint8_t *d = ts_xc_slot_data(c, s);
            CHECK_MSG(d == pool + (size_t)s * stride, "slot %d at %p, pool %p", s, (const void *)d, (const void *)pool);
            CHECK_MSG(!memcmp(d, file_bytes(&x, ts_xmap_idx(m, l, e)), m->bytes[ts_xmap_idx(m, l, e)]), "layer %d expert %d: slot bytes", l, e);
            ts_xc_unpin(c, l);
            reads++;
        }
    const ts_xc_stats *st = ts_xc_get_stats(c);
    CHECK_MSG(u.outside == 0 && (uint64_t)u.calls == st->misses, "%d prepares outside the pool, %d calls for %llu misses", u.outside,
              u.calls, (unsigned long long)st->misses);
    CHECK(st->evictions > 0 && reads > ns);
    ts_xc_close(c);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == before);
    free(pool);
    inst_close(&x);
}

/* Two tiers as model/xstream.c runs an exclusive host tier in front of
 * device slots, with host memory for both: a "device" cache of caller
 * slots filled from the host tier (source), whose victims take the host
 * slot of the miss they make room for (victim: ts_xc_rename; exchange: the
 * bytes swapped through a scratch buffer per I/O thread), and whose misses
 * are dropped from the host tier once taken when no victim took their slot
 * (forget). Asserted: every slot the device tier hands out holds the
 * expert's file bytes, and every host slot too (victims kept and read back
 * many times over); the tiers never both hold an expert; with room in the
 * two together for every expert, the tiers hold all of them after the
 * first pass and later passes read nothing from the files; a failed
 * exchange fails that ensure, the renamed slots are dropped, and the next
 * ensures work. */
typedef struct x2_user {
    ts_xc *dev, *host;
    const ts_expert_map *m;
    uint64_t bytes;
    uint8_t *tmp[4];
    int32_t claims[256];
    int n_claims, fail_exchange, bad_worker;
} x2_user;

static int x2_source(void *user, int layer, int expert, const uint8_t **bytes) {
    x2_user *u = user;
    int s = ts_xc_lookup(u->host, layer, expert);
    if (s < 0) return ENOENT;
    *bytes = ts_xc_slot_data(u->host, s);
    return 0;
}
static int x2_prepare(void *user, int layer, int expert, const uint8_t *src, uint8_t *dst) {
    x2_user *u = user;
    (void)layer, (void)expert;
    memcpy(dst, src, u->bytes);
    return 0;
}
static uint8_t *x2_victim(void *user, int ol, int oe, int layer, int e, const uint8_t **src) {
    x2_user *u = user;
    int h = ts_xc_lookup(u->host, layer, e);
    if (h < 0 || ts_xc_lookup(u->host, ol, oe) >= 0) return NULL;
    *src = ts_xc_slot_data(u->host, h);
    uint8_t *d = ts_xc_rename(u->host, layer, e, ol, oe);
    if (d && u->n_claims < 256) u->claims[u->n_claims++] = (int32_t)ts_xmap_idx(u->m, ol, oe);
    return d;
}
static int x2_exchange(void *user, int worker, int old_layer, int layer, uint8_t *slot, const uint8_t *src, uint8_t *dst) {
    x2_user *u = user;
    (void)old_layer, (void)layer;
    if (worker < 0 || worker >= 4) { u->bad_worker = 1; return EINVAL; }
    if (u->fail_exchange) return EIO;
    memcpy(u->tmp[worker], slot, u->bytes);
    memcpy(slot, src, u->bytes);
    memcpy(dst, u->tmp[worker], u->bytes); /* dst may overlap src: src is read already */
    return 0;
}

/* One group through both tiers, as ts_xstream_moe does it. */
static int x2_group(x2_user *u, int layer, const int32_t *ids, int n, int32_t *slots, ts_error *err) {
    int32_t miss[64];
    int nh = 0;
    for (int i = 0; i < n; i++)
        if (ts_xc_lookup(u->dev, layer, ids[i]) < 0) miss[nh++] = ids[i];
    int rc = nh ? ts_xc_ensure(u->host, layer, miss, nh, NULL, err) : 0;
    u->n_claims = 0;
    if (!rc) rc = ts_xc_ensure(u->dev, layer, ids, n, slots, err);
    ts_xc_unpin_all(u->host);
    const int E = u->m->E;
    if (rc) {
        for (int i = 0; i < u->n_claims; i++) ts_xc_forget(u->host, u->claims[i] / E, u->claims[i] % E);
        return rc;
    }
    const int32_t *fs;
    int nf = ts_xc_last_filled(u->dev, &fs);
    for (int i = 0; i < nf; i++) {
        int l, e;
        ts_xc_slot_owner(u->dev, fs[i], &l, &e);
        ts_xc_forget(u->host, l, e); /* -1 when a victim took its slot */
    }
    return 0;
}

TS_TEST(experts, exclusive_tiers_cover_both) {
    inst x;
    if (inst_open(&x, install("tiny-moe", 4))) return;
    const ts_expert_map *m = x.map;
    const int total = m->n_layers * m->E, k = m->topk;
    ts_error err = {0};
    x2_user u = {.m = m, .bytes = m->expert_bytes};
    for (int i = 0; i < 4; i++) u.tmp[i] = malloc(m->expert_bytes);
    /* the device tier: k + 2 caller slots, 4 I/O threads */
    ts_xc_params dp;
    ts_xc_params_default(&dp);
    dp.n_io = 4;
    dp.slot_bytes = m->expert_bytes;
    dp.prepare = x2_prepare;
    dp.source = x2_source;
    dp.victim = x2_victim;
    dp.exchange = x2_exchange;
    dp.caller_slots = 1;
    dp.prepare_user = &u;
    const uint64_t dstride = (m->expert_bytes + 63) & ~(uint64_t)63;
    const int nd = k + 2;
    dp.cache_bytes = dstride * (uint64_t)nd;
    uint8_t *pool = malloc((size_t)nd * dstride);
    dp.pool = pool;
    ts_xc_params bad = dp;
    bad.exchange = NULL;
    CHECK_MSG(ts_xc_open(m, &bad, &u.dev, &err) == TS_E_ARG && strstr(err.msg, "exchange"), "a victim hook alone: %s", err.msg);
    /* the host tier: exactly the experts the device cannot hold */
    ts_xc_params hp;
    ts_xc_params_default(&hp);
    const int nh = total - nd;
    hp.cache_bytes = ts_xc_slot_stride(m) * (uint64_t)nh;
    const size_t before = ts_mem_used(TS_MEM_EXPERT_CACHE);
    CHECK_MSG(ts_xc_open(m, &dp, &u.dev, &err) == 0 && ts_xc_open(m, &hp, &u.host, &err) == 0, "%s", err.msg);
    if (ts_test_failed()) goto out;
    CHECK(ts_xc_n_slots(u.dev) == nd && ts_xc_n_slots(u.host) == nh);
    uint64_t rng = 0x2545F4914F6CDD1DULL;
    int32_t ids[64], sl[64];
    uint64_t host_misses_after_warm = 0;
    int failed_once = 0, lost = 0;
    for (int pass = 0; pass < 3 && !ts_test_failed(); pass++) {
        if (pass == 1) host_misses_after_warm = ts_xc_get_stats(u.host)->misses;
        for (int t = 0; t < 4 * total && !ts_test_failed(); t++) {
            int layer;
            if (pass == 0) { /* every expert once, k at a time */
                if (t * k >= total) break;
                layer = (t * k / m->E) % m->n_layers;
                for (int j = 0; j < k; j++) ids[j] = (t * k + j) % m->E;
            } else {
                layer = (int)(rng % (uint64_t)m->n_layers);
                for (int j = 0; j < k; j++) {
                    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
                    int e = (int)((rng >> 33) % (uint64_t)m->E), dup = 0;
                    for (int q = 0; q < j; q++) dup |= ids[q] == e;
                    ids[j] = dup ? -1 : e;
                }
                int n = 0;
                for (int j = 0; j < k; j++) if (ids[j] >= 0) ids[n++] = ids[j];
                for (int j = n; j < k; j++) ids[j] = ids[0];
            }
            /* pass 2: failing exchanges until one group fails */
            u.fail_exchange = pass == 2 && !failed_once;
            int rc = x2_group(&u, layer, ids, k, sl, &err);
            if (u.fail_exchange && rc) {
                failed_once = 1;
                CHECK_MSG(rc == TS_E_IO && strstr(err.msg, "expert cache"), "a failed exchange: %d %s", rc, err.msg);
                u.fail_exchange = 0;
                lost = -1; /* measured below */
                continue;
            }
            u.fail_exchange = 0;
            CHECK_MSG(rc == 0, "pass %d step %d: %s", pass, t, err.msg);
            for (int j = 0; j < k && !rc; j++) {
                size_t ix = ts_xmap_idx(m, layer, ids[j]);
                CHECK_MSG(!memcmp(ts_xc_slot_data(u.dev, sl[j]), file_bytes(&x, ix), m->bytes[ix]),
                          "pass %d step %d: layer %d expert %d: device slot bytes", pass, t, layer, ids[j]);
            }
            ts_xc_unpin(u.dev, layer);
            int both = 0, held = 0, wrong = 0;
            for (int l = 0; l < m->n_layers; l++)
                for (int e = 0; e < m->E; e++) {
                    int a = ts_xc_lookup(u.dev, l, e) >= 0, hs = ts_xc_lookup(u.host, l, e);
                    both += a && hs >= 0;
                    held += a || hs >= 0;
                    size_t ix = ts_xmap_idx(m, l, e);
                    if (hs >= 0 && memcmp(ts_xc_slot_data(u.host, hs), file_bytes(&x, ix), m->bytes[ix])) wrong++;
                }
            CHECK_MSG(both == 0 && wrong == 0, "pass %d step %d: %d experts in both tiers, %d host slots with wrong bytes", pass, t, both, wrong);
            if (lost < 0) lost = total - held;
            if (pass > 0) CHECK_MSG(held >= total - (lost > 0 ? lost : 0), "pass %d step %d: the tiers hold %d of %d experts", pass, t, held, total);
        }
    }
    const ts_xc_stats *ds = ts_xc_get_stats(u.dev), *hs = ts_xc_get_stats(u.host);
    CHECK_MSG(ds->victims_saved > (uint64_t)total && hs->renames >= ds->victims_saved && !u.bad_worker,
              "%llu victims kept, %llu renames, bad worker index %d", (unsigned long long)ds->victims_saved,
              (unsigned long long)hs->renames, u.bad_worker);
    /* after the warm pass every expert is in one tier or the other: the files are read again only for what the failed group lost */
    CHECK_MSG(hs->misses - host_misses_after_warm <= (uint64_t)(lost > 0 ? lost : 0), "%llu host misses after the warm pass (%d lost)",
              (unsigned long long)(hs->misses - host_misses_after_warm), lost);
    /* a failed group loses at most its misses and their victims (each renamed host slot is dropped) */
    CHECK_MSG(failed_once && lost > 0 && lost <= 2 * k, "the failing exchange: ran %d, lost %d (top-%d)", failed_once, lost, k);
out:
    ts_xc_close(u.dev);
    ts_xc_close(u.host);
    CHECK(ts_mem_used(TS_MEM_EXPERT_CACHE) == before);
    free(pool);
    for (int i = 0; i < 4; i++) free(u.tmp[i]);
    inst_close(&x);
}
