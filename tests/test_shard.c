/* test_shard.c: the tensor-parallel split (src/engine/shard.c), model-free.
 *
 * shard.shapes_partition: for every shapes/<name>.json at INT4 (group 64) and
 * N = 1, 2, 4, 8 (and BF16, INT8 for the dense shapes; BF16 at N = 1, 8 for
 * MoE), every tensor's pieces cover its split axis exactly, each index held
 * by as many ranks as the test expects from the architecture (1; N/nkv for
 * k/v_proj rows when nkv < N; N/Hk for the q, k channels of GDN when Hk < N;
 * N for the few replicated tensors), column pieces of quantized matrices
 * start and end on groups, a routed expert lives on exactly one rank, and the
 * pieces' bytes follow those counts. Routed experts of layers past the first
 * differ only in the layer number of their names: their bytes are summed,
 * not checked one by one (that would cost seconds). Per rank: weights - dup
 * sums to the install, ranks are balanced, KV / GDN state is recomputed here
 * from the config; N = 1 equals the frozen single-GPU plan
 * (tests/plan_shapes.txt) at each of its contexts.
 * shard.one_gpu_is_the_plan: the same against the live ts_mem_plan_shape.
 * shard.fixtures: the HF-named fixtures (fused experts, vision tower, tied
 * head) against ts_mem_plan_dir. shard.kv_replication, shard.worked_spans
 * (the 27B at N = 8 by hand, an uneven FFN split, expert blocks of the 397B)
 * and shard.refusals (each by what its message names).
 */
#include <dirent.h>

#include "engine/engine.h"
#include "engine/shard.h"
#include "loader/st_writer.h"
#include "quant/quant.h"
#include "ts_test.h"

/* Tests whose arithmetic assumes the default buffers run with TS_AHEAD set
 * aside (ts_env_push): run-ahead is off on the CPU unless TS_AHEAD=1
 * forces it, and its buffers are checked where they are asked for (ahead =
 * 1 in a session's parameters; tests/test_ahead.c), so the suite passes
 * under TS_AHEAD=1 too. */

static const int gpus[] = {1, 2, 4, 8};

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* shapes/<name>.json, sorted; returns the count (names malloc'ed). */
static int list_shapes(char **names, int cap) {
    int n = 0;
    DIR *d = opendir("shapes");
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < cap) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json")) names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_names);
    return n;
}

/* A shape's config as synth would install it at `bits` (group 64),
 * without building its tensor list. */
static int shape_config(const char *path, int bits, ts_config *c) {
    char *txt = NULL;
    ts_error err = {0};
    int rc = ts_read_file(path, &txt, NULL, &err);
    if (!rc) rc = ts_config_parse(txt, NULL, path, c, &err);
    ts_free(txt);
    if (rc) {
        ts_test_fail(__FILE__, __LINE__, "%s: %s", path, err.msg);
        return -1;
    }
    c->q_bits = bits == 16 ? 0 : bits;
    c->q_group = c->q_bits ? 64 : 0;
    return 0;
}

/* Routed experts of layers past the first differ from layer 0's only by the
 * layer index in their name; checking them all would cost seconds. Their
 * bytes still enter the sums (ts_shard_weights_planned). */
static int sampled_out(const char *name) {
    return strstr(name, "mlp.experts.") && !strstr(name, "layers.0.");
}

/* The draft-0 lines of tests/plan_shapes.txt (the single-GPU plan of every
 * shape at INT4, group 64, frozen and kept equal to the live plan by
 * plan.frozen_shapes): install bytes, KV cache, GDN state by context. */
typedef struct { char shape[64]; int ctx; unsigned long long file, kv, gdn; int seen; } frozen;

static int read_frozen(frozen *f, int cap) {
    FILE *fp = fopen("tests/plan_shapes.txt", "r");
    if (!fp) return 0;
    char line[512];
    int n = 0, draft;
    unsigned long long w;
    while (n < cap && fgets(line, sizeof line, fp)) {
        if (line[0] == '#') continue;
        if (sscanf(line, "%63s %d %d %llu %llu %llu %llu", f[n].shape, &f[n].ctx, &draft, &f[n].file, &w, &f[n].kv,
                   &f[n].gdn) == 7 && draft == 0)
            f[n].seen = 0, n++;
    }
    fclose(fp);
    return n;
}

/* How many ranks the test expects to hold index i of the split axis of a
 * tensor: from the architecture, not from shard.c. `what`: 1 for k/v_proj,
 * 2 for GDN qkv channels (conv1d too), 0 otherwise (tensor_what). */
static int tensor_what(const char *name) {
    if (strstr(name, "self_attn.k_proj") || strstr(name, "self_attn.v_proj")) return 1;
    if (strstr(name, "in_proj_qkv") || strstr(name, "conv1d")) return 2;
    return 0;
}
static int expected_cover(const ts_config *c, int N, int what, int64_t i) {
    if (what == 1) return c->nkv < N ? N / c->nkv : 1;
    if (what == 2 && i < 2 * (int64_t)c->Hk * c->dk) return c->Hk < N ? N / c->Hk : 1;
    return 1;
}

/* Check one tensor's pieces over all N ranks; adds to the byte sums. */
static int check_tensor(const ts_shard *sh, const char *name, uint64_t nbytes, uint64_t *sum_bytes, uint64_t *sum_dup) {
    const ts_config *c = &sh->c;
    const int N = sh->n;
    ts_error err = {0};
    ts_shard_piece p[TS_SHARD_MAX_GPUS];
    memset(p, 0, sizeof p);
    for (int r = 0; r < N; r++) {
        if (ts_shard_piece_of(sh, name, nbytes, r, &p[r], &err)) {
            ts_test_fail(__FILE__, __LINE__, "N=%d %s: %s", N, name, err.msg);
            return -1;
        }
        if (p[r].kind != p[0].kind || p[r].extent != p[0].extent) {
            ts_test_fail(__FILE__, __LINE__, "N=%d %s: ranks disagree on the split", N, name);
            return -1;
        }
    }
    uint64_t b = 0, d = 0;
    for (int r = 0; r < N; r++) b += p[r].bytes, d += p[r].dup_bytes;
    *sum_bytes += b;
    *sum_dup += d;
    switch (p[0].kind) {
    case TS_SPLIT_SKIP:
        if (strncmp(name, "model.visual.", 13) || b) {
            ts_test_fail(__FILE__, __LINE__, "%s skipped (or skipped with bytes)", name);
            return -1;
        }
        return 0;
    case TS_SPLIT_REPL:
        if (b != (uint64_t)N * nbytes || d != (uint64_t)(N - 1) * nbytes) {
            ts_test_fail(__FILE__, __LINE__, "N=%d replicated %s: %llu bytes, %llu dup", N, name, (unsigned long long)b,
                         (unsigned long long)d);
            return -1;
        }
        /* only norms, routers, the shared-expert gate and the MTP fc are whole everywhere */
        if (!strstr(name, "norm") && !strstr(name, "mlp.gate.") && !strstr(name, "shared_expert_gate") &&
            !strstr(name, "mtp.fc")) {
            ts_test_fail(__FILE__, __LINE__, "%s is replicated", name);
            return -1;
        }
        return 0;
    case TS_SPLIT_EXPERT: {
        int owners = 0;
        for (int r = 0; r < N; r++) owners += p[r].span[0].n == 1 && p[r].bytes == nbytes;
        if (owners != 1 || b != nbytes || d) {
            ts_test_fail(__FILE__, __LINE__, "N=%d %s: %d owners, %llu bytes", N, name, owners, (unsigned long long)b);
            return -1;
        }
        return 0;
    }
    default: break;
    }
    const int64_t ext = p[0].extent;
    if (ext <= 0) {
        ts_test_fail(__FILE__, __LINE__, "%s: extent %lld", name, (long long)ext);
        return -1;
    }
    /* coverage as a sweep over the span ends (plus 0, ext and the q/k | v
     * boundary of GDN channels, where the expected count may change): each
     * segment between two points is held by `cur` ranks */
    typedef struct { int64_t at; int d; } ev;
    ev e[3 * TS_SHARD_MAX_GPUS * 2 + 3];
    int ne = 0;
    const int what = tensor_what(name);
    e[ne++] = (ev){0, 0};
    e[ne++] = (ev){ext, 0};
    if (what == 2) e[ne++] = (ev){2 * (int64_t)c->Hk * c->dk, 0};
    for (int r = 0; r < N; r++)
        for (int s = 0; s < p[r].n_span; s++) {
            const ts_span sp = p[r].span[s];
            if (sp.lo < 0 || sp.n < 0 || sp.lo + sp.n > ext) {
                ts_test_fail(__FILE__, __LINE__, "%s rank %d: span [%lld, +%lld) outside %lld", name, r, (long long)sp.lo,
                             (long long)sp.n, (long long)ext);
                return -1;
            }
            if (p[r].kind == TS_SPLIT_COLS && c->q_bits && (sp.lo % c->q_group || sp.n % c->q_group)) {
                ts_test_fail(__FILE__, __LINE__, "%s rank %d: columns [%lld, +%lld) straddle groups of %d", name, r,
                             (long long)sp.lo, (long long)sp.n, c->q_group);
                return -1;
            }
            e[ne++] = (ev){sp.lo, +1};
            e[ne++] = (ev){sp.lo + sp.n, -1};
        }
    for (int i = 1; i < ne; i++) /* insertion sort: a few dozen points */
        for (int j = i; j > 0 && e[j - 1].at > e[j].at; j--) {
            ev x = e[j]; e[j] = e[j - 1]; e[j - 1] = x;
        }
    uint64_t held = 0;
    int cur = 0;
    for (int i = 0; i < ne; i++) {
        if (i && e[i].at > e[i - 1].at) {
            const int64_t at = e[i - 1].at;
            const int want = expected_cover(c, N, what, at);
            if (cur != want) {
                ts_test_fail(__FILE__, __LINE__, "N=%d %s: [%lld, %lld) of %lld held by %d ranks, expected %d", N, name,
                             (long long)at, (long long)e[i].at, (long long)ext, cur, want);
                return -1;
            }
            held += (uint64_t)cur * (uint64_t)(e[i].at - at);
        }
        cur += e[i].d;
    }
    /* the pieces' bytes are the tensor's bytes in proportion to what they hold */
    if (b * (uint64_t)ext != nbytes * held || d * (uint64_t)ext != nbytes * (held - (uint64_t)ext)) {
        ts_test_fail(__FILE__, __LINE__, "N=%d %s: %llu bytes (%llu dup) for %llu of %lld held, tensor %llu", N, name,
                     (unsigned long long)b, (unsigned long long)d, (unsigned long long)held, (long long)ext,
                     (unsigned long long)nbytes);
        return -1;
    }
    /* each rank's share of a split axis is its own spans, no more */
    for (int r = 0; r < N; r++) {
        int64_t len = 0;
        for (int s = 0; s < p[r].n_span; s++) len += p[r].span[s].n;
        if (p[r].bytes * (uint64_t)ext != nbytes * (uint64_t)len) {
            ts_test_fail(__FILE__, __LINE__, "%s rank %d: %llu bytes for %lld of %lld", name, r,
                         (unsigned long long)p[r].bytes, (long long)len, (long long)ext);
            return -1;
        }
    }
    return 0;
}

/* KV and GDN bytes of rank r from the config alone (f32 state, as session.c allocates). */
static void state_by_hand(const ts_config *c, const ts_shard_rank *k, int n_ctx, uint64_t *kv, uint64_t *gdn) {
    uint64_t nf = 0, ng = 0;
    for (int i = 0; i < c->n_layers; i++) c->layer_full[i] ? nf++ : ng++;
    *kv = 4ull * 2 * nf * (uint64_t)n_ctx * (uint64_t)k->kv.n * (uint64_t)c->head_dim;
    uint64_t ch = 2 * (uint64_t)k->gk.n * c->dk + (uint64_t)k->gv.n * c->dv;
    *gdn = 4ull * ng * ((uint64_t)(c->conv_k - 1) * ch + (uint64_t)k->gv.n * c->dk * c->dv);
}

/* Every tensor of every released shape at every width and GPU count. */
TS_TEST(shard, shapes_partition) {
    char *names[64];
    int ns = list_shapes(names, 64);
    CHECK_MSG(ns >= 8, "%d shapes under shapes/", ns);
    static const int bits[] = {4, 8, 16};
    static frozen fz[128];
    const int nfz = read_frozen(fz, 128);
    CHECK_MSG(nfz >= 3 * ns, "tests/plan_shapes.txt: %d lines of draft 0 for %d shapes", nfz, ns);
    int bad = 0;
    for (int si = 0; si < ns && !bad; si++)
        for (size_t bi = 0; bi < sizeof bits / sizeof *bits && !bad; bi++) {
            char path[512];
            snprintf(path, sizeof path, "shapes/%s", names[si]);
            ts_config c;
            ts_stw_tensor *t = NULL;
            int n = 0, nsh = 0;
            ts_error err = {0};
            if (shape_config(path, bits[bi], &c)) {
                bad = 1;
                break;
            }
            if (c.is_moe && bits[bi] == 8) continue;
            if (ts_synth_plan(path, bits[bi], 64, &c, &t, &n, &nsh, &err)) {
                ts_test_fail(__FILE__, __LINE__, "%s: %s", path, err.msg);
                bad = 1;
                break;
            }
            uint64_t install = 0;
            for (int i = 0; i < n; i++) install += t[i].nbytes;
            for (size_t gi = 0; gi < sizeof gpus / sizeof *gpus && !bad; gi++) {
                const int N = gpus[gi];
                /* time (< 2 s for the group): a MoE shape at BF16 splits as
                 * at INT4, so it runs its ends only, 1 and 8 (and INT8 not
                 * at all: the dense shapes check its byte rules) */
                if (c.is_moe && bits[bi] != 4 && N != 1 && N != 8) continue;
                ts_shard sh;
                if (ts_shard_make(&c, N, &sh, &err)) {
                    ts_test_fail(__FILE__, __LINE__, "%s bits %d N=%d: %s", path, bits[bi], N, err.msg);
                    bad = 1;
                    break;
                }
                uint64_t sb = 0, sd = 0;
                uint64_t skipped = 0;
                for (int i = 0; i < n && !bad; i++) {
                    if (sampled_out(t[i].name)) {
                        skipped += t[i].nbytes;
                        continue;
                    }
                    bad = check_tensor(&sh, t[i].name, t[i].nbytes, &sb, &sd);
                }
                if (bad) break;
                sb += skipped; /* a routed expert is on one rank, whole */
                ts_shard_bytes by;
                if (ts_shard_weights_planned(&sh, t, n, &by, &err)) {
                    ts_test_fail(__FILE__, __LINE__, "%s: %s", path, err.msg);
                    bad = 1;
                    break;
                }
                uint64_t w = 0, d = 0, lo = UINT64_MAX, hi = 0;
                for (int r = 0; r < N; r++) {
                    w += by.weights[r], d += by.dup[r];
                    lo = TS_MIN(lo, by.weights[r]);
                    hi = TS_MAX(hi, by.weights[r]);
                }
                if (by.n != N || by.total != install || w != sb || d != sd || w - d != install || (N == 1 && d)) {
                    ts_test_fail(__FILE__, __LINE__, "%s bits %d N=%d: total %llu of %llu, ranks %llu - dup %llu", path,
                                 bits[bi], N, (unsigned long long)by.total, (unsigned long long)install,
                                 (unsigned long long)w, (unsigned long long)d);
                    bad = 1;
                    break;
                }
                /* balance: no rank holds more than a few percent over the
                 * mean (the replicated parts are small) */
                if (N > 1 && (double)hi > 1.05 * (double)w / N) {
                    ts_test_fail(__FILE__, __LINE__, "%s bits %d N=%d: ranks from %llu to %llu bytes", path, bits[bi], N,
                                 (unsigned long long)lo, (unsigned long long)hi);
                    bad = 1;
                    break;
                }
                /* one GPU is the single-GPU plan (frozen), every context */
                for (int i = 0; i < nfz && N == 1 && bits[bi] == 4 && !bad; i++) {
                    size_t l = strlen(fz[i].shape);
                    if (strncmp(names[si], fz[i].shape, l) || strcmp(names[si] + l, ".json")) continue;
                    ts_shard_bytes st;
                    if (ts_shard_state(&sh, fz[i].ctx, &st, &err) || by.weights[0] != fz[i].file || st.kv[0] != fz[i].kv ||
                        st.gdn[0] != fz[i].gdn) {
                        ts_test_fail(__FILE__, __LINE__, "%s ctx %d, one GPU: install %llu, kv %llu, gdn %llu; plan %llu, %llu, %llu",
                                     path, fz[i].ctx, (unsigned long long)by.weights[0], (unsigned long long)st.kv[0],
                                     (unsigned long long)st.gdn[0], fz[i].file, fz[i].kv, fz[i].gdn);
                        bad = 1;
                    }
                    fz[i].seen = 1;
                }
                /* state per rank at two contexts, against the config */
                static const int ctxs[] = {4096, 32768};
                for (int ci = 0; ci < 2 && !bad; ci++) {
                    if (ts_shard_state(&sh, ctxs[ci], &by, &err)) {
                        ts_test_fail(__FILE__, __LINE__, "%s: %s", path, err.msg);
                        bad = 1;
                        break;
                    }
                    for (int r = 0; r < N && !bad; r++) {
                        uint64_t kv, gdn;
                        state_by_hand(&c, &sh.r[r], ctxs[ci], &kv, &gdn);
                        if (by.n_ctx != ctxs[ci] || by.kv[r] != kv || by.gdn[r] != gdn) {
                            ts_test_fail(__FILE__, __LINE__, "%s N=%d ctx %d rank %d: kv %llu (want %llu), gdn %llu (want %llu)",
                                         path, N, ctxs[ci], r, (unsigned long long)by.kv[r], (unsigned long long)kv,
                                         (unsigned long long)by.gdn[r], (unsigned long long)gdn);
                            bad = 1;
                        }
                    }
                }
            }
            ts_free(t);
        }
    for (int i = 0; i < ns; i++) free(names[i]);
    for (int i = 0; i < nfz && !bad; i++) CHECK_MSG(fz[i].seen, "plan_shapes.txt: %s not compared", fz[i].shape);
}

/* Replicated KV heads: rank r holds KV head r / (N / nkv), every head is on
 * N / nkv ranks, a rank's query heads all read a head it holds, and the
 * per-rank KV bytes follow. */
TS_TEST(shard, kv_replication) {
    char *names[64];
    int ns = list_shapes(names, 64), seen_rep = 0, bad = 0;
    CHECK(ns >= 8);
    for (int si = 0; si < ns && !bad; si++) {
        char path[512];
        snprintf(path, sizeof path, "shapes/%s", names[si]);
        ts_config c;
        ts_error err = {0};
        if (shape_config(path, 4, &c)) break;
        ts_shard one;
        ts_shard_bytes b1;
        if (ts_shard_make(&c, 1, &one, &err) || ts_shard_state(&one, 8192, &b1, &err)) {
            ts_test_fail(__FILE__, __LINE__, "%s", err.msg);
            break;
        }
        for (size_t gi = 1; gi < sizeof gpus / sizeof *gpus && !bad; gi++) {
            const int N = gpus[gi];
            ts_shard sh;
            ts_shard_bytes by;
            if (ts_shard_make(&c, N, &sh, &err) || ts_shard_state(&sh, 8192, &by, &err)) {
                ts_test_fail(__FILE__, __LINE__, "%s N=%d: %s", path, N, err.msg);
                bad = 1;
                break;
            }
            const int rep = c.nkv < N ? N / c.nkv : 1, g = c.nq / c.nkv;
            int held[64] = {0};
            uint64_t kv_sum = 0;
            for (int r = 0; r < N; r++) {
                const ts_shard_rank *k = &sh.r[r];
                if (rep > 1 && (k->kv.n != 1 || k->kv.lo != r / rep)) bad = 1;
                if (rep == 1 && (k->kv.n != c.nkv / N || k->kv.lo != (int64_t)r * (c.nkv / N))) bad = 1;
                for (int64_t j = k->q.lo; j < k->q.lo + k->q.n; j++)
                    if (j / g < k->kv.lo || j / g >= k->kv.lo + k->kv.n) bad = 1;
                for (int64_t h = k->kv.lo; h < k->kv.lo + k->kv.n; h++) held[h]++;
                /* a rank's KV cache is its heads' share of the whole */
                if (by.kv[r] * (uint64_t)c.nkv != b1.kv[0] * (uint64_t)k->kv.n) bad = 1;
                kv_sum += by.kv[r];
                if (bad) {
                    ts_test_fail(__FILE__, __LINE__, "%s N=%d rank %d: KV heads [%lld, +%lld), query heads [%lld, +%lld)",
                                 path, N, r, (long long)k->kv.lo, (long long)k->kv.n, (long long)k->q.lo, (long long)k->q.n);
                    break;
                }
            }
            for (int h = 0; h < c.nkv && !bad; h++)
                if (held[h] != rep) {
                    ts_test_fail(__FILE__, __LINE__, "%s N=%d: KV head %d on %d ranks, expected %d", path, N, h, held[h], rep);
                    bad = 1;
                }
            if (!bad && (sh.kv_rep != rep || kv_sum != b1.kv[0] * (uint64_t)rep)) {
                ts_test_fail(__FILE__, __LINE__, "%s N=%d: kv_rep %d, KV sum %llu of %llu x %d", path, N, sh.kv_rep,
                             (unsigned long long)kv_sum, (unsigned long long)b1.kv[0], rep);
                bad = 1;
            }
            seen_rep += rep > 1;
        }
    }
    for (int i = 0; i < ns; i++) free(names[i]);
    if (!bad) CHECK_MSG(seen_rep > 0, "no shape replicated its KV heads"); /* every shape has nkv <= 4 < 8 */
}

/* N = 1 is the live single-GPU plan (ts_mem_plan_shape) too, not only its
 * frozen lines: the install's bytes, the KV cache and the GDN state, for a
 * dense and a MoE shape (every shape against the frozen plan is in
 * shard.shapes_partition; planning the large ones live costs seconds). */
static void one_gpu_is_the_plan_body(void);
TS_TEST(shard, one_gpu_is_the_plan) {
    char *keep = ts_env_push("TS_AHEAD", NULL);
    one_gpu_is_the_plan_body();
    ts_env_pop("TS_AHEAD", keep);
}
static void one_gpu_is_the_plan_body(void) {
    static const char *shapes[] = {"shapes/qwen3.5-0.8B.json", "shapes/qwen3.5-35B-A3B.json"};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const char *path = shapes[si];
        ts_session_params sp;
        ts_session_params_default(&sp);
        sp.n_ctx = 8192;
        ts_mem_plan pl;
        ts_error err = {0};
        ts_config c;
        ts_stw_tensor *t = NULL;
        int n = 0, nsh = 0;
        CHECK_MSG(ts_mem_plan_shape(path, 4, 64, NULL, &sp, &pl, &err) == 0, "%s: %s", path, err.msg);
        CHECK_MSG(ts_synth_plan(path, 4, 64, &c, &t, &n, &nsh, &err) == 0, "%s: %s", path, err.msg);
        ts_shard sh;
        ts_shard_bytes by;
        int rc = ts_shard_make(&c, 1, &sh, &err);
        if (!rc) rc = ts_shard_weights_planned(&sh, t, n, &by, &err);
        if (!rc) rc = ts_shard_state(&sh, sp.n_ctx, &by, &err);
        ts_free(t);
        CHECK_MSG(rc == 0, "%s: %s", path, err.msg);
        uint64_t kv = 0, gdn = 0;
        for (int d = 0; d < TS_DOM_N; d++) kv += pl.bytes[d][TS_MEM_KV], gdn += pl.bytes[d][TS_MEM_GDN];
        CHECK_MSG(by.weights[0] == pl.mapped_bytes && by.total == pl.mapped_bytes && !by.dup[0] && by.kv[0] == kv &&
                      by.gdn[0] == gdn && kv && gdn,
                  "%s: weights %llu (plan %llu), kv %llu (%llu), gdn %llu (%llu)", path,
                  (unsigned long long)by.weights[0], (unsigned long long)pl.mapped_bytes, (unsigned long long)by.kv[0],
                  (unsigned long long)kv, (unsigned long long)by.gdn[0], (unsigned long long)gdn);
    }
}

/* The HF-named fixtures (fused experts, the vision tower, tied and untied):
 * every tensor has a rule, N = 1 maps what the plan maps, and every GPU
 * count they split over partitions them. */
TS_TEST(shard, fixtures) {
    static const char *dirs[] = {"tests/fixtures/tiny-dense", "tests/fixtures/tiny-moe", "tests/fixtures/alt-dense",
                                 "tests/fixtures/alt-moe", "tests/fixtures/alt-moe-tied"};
    int bad = 0, multi = 0;
    for (size_t di = 0; di < sizeof dirs / sizeof *dirs && !bad; di++) {
        ts_error err = {0};
        ts_config c;
        ts_st_set *st = NULL;
        ts_mem_plan pl;
        if (ts_config_load(dirs[di], &c, &err) || ts_mem_plan_dir(dirs[di], NULL, &pl, &err) ||
            ts_st_open_dir(dirs[di], &st, &err)) {
            ts_test_fail(__FILE__, __LINE__, "%s: %s", dirs[di], err.msg);
            ts_st_close(st);
            break;
        }
        for (size_t gi = 0; gi < sizeof gpus / sizeof *gpus && !bad; gi++) {
            ts_shard sh;
            if (ts_shard_make(&c, gpus[gi], &sh, &err)) {
                if (gpus[gi] == 1) {
                    ts_test_fail(__FILE__, __LINE__, "%s N=1: %s", dirs[di], err.msg);
                    bad = 1;
                }
                continue; /* tiny shapes need not split over many GPUs */
            }
            uint64_t sb = 0, sd = 0;
            for (int i = 0; i < st->n_tensors && !bad; i++)
                bad = check_tensor(&sh, st->tensors[i].name, st->tensors[i].nbytes, &sb, &sd);
            ts_shard_bytes by;
            if (!bad && ts_shard_weights_set(&sh, st, &by, &err)) {
                ts_test_fail(__FILE__, __LINE__, "%s: %s", dirs[di], err.msg);
                bad = 1;
            }
            uint64_t w = 0, d = 0;
            for (int r = 0; !bad && r < sh.n; r++) w += by.weights[r], d += by.dup[r];
            if (!bad && (by.total != pl.mapped_bytes || w - d != by.total || w != sb)) {
                ts_test_fail(__FILE__, __LINE__, "%s N=%d: total %llu, plan maps %llu, ranks %llu - %llu", dirs[di], sh.n,
                             (unsigned long long)by.total, (unsigned long long)pl.mapped_bytes, (unsigned long long)w,
                             (unsigned long long)d);
                bad = 1;
            }
            multi += sh.n > 1;
        }
        ts_st_close(st);
    }
    if (!bad) CHECK_MSG(multi >= 5, "only %d fixture splits over several GPUs", multi);
}

/* Worked by hand: the 27B (nq 24, nkv 4, Hk 16, Hv 48, I 17408, V 248320)
 * over 8 GPUs, rank 5; and a dense width that does not split evenly. */
TS_TEST(shard, worked_spans) {
    ts_config c;
    ts_error err = {0};
    CHECK(shape_config("shapes/qwen3.5-27B.json", 4, &c) == 0);
    ts_shard sh;
    CHECK_MSG(ts_shard_make(&c, 8, &sh, &err) == 0, "%s", err.msg);
    const ts_shard_rank *k = &sh.r[5];
    CHECK(k->q.lo == 15 && k->q.n == 3);         /* 24 / 8 query heads */
    CHECK(sh.kv_rep == 2 && k->kv.lo == 2 && k->kv.n == 1); /* heads 15..17 read 15/6 = 2 */
    CHECK(k->gv.lo == 30 && k->gv.n == 6);       /* 48 / 8 value heads */
    CHECK(sh.gk_rep == 1 && k->gk.lo == 10 && k->gk.n == 2); /* value heads 30..35 read 10, 11 */
    CHECK(k->ffn.lo == 10880 && k->ffn.n == 2176); /* 272 groups / 8 = 34 each */
    CHECK(k->vocab.lo == 155200 && k->vocab.n == 31040);
    ts_shard_piece p;
    CHECK(ts_shard_piece_of(&sh, "model.language_model.layers.0.linear_attn.in_proj_qkv.weight", 1000, 5, &p, &err) == 0);
    /* Kd = 16 * 128 = 2048: q rows [1280, 1536), k rows [3328, 3584), v rows [4096 + 3840, +768) */
    CHECK(p.kind == TS_SPLIT_ROWS && p.n_span == 3 && p.extent == 2 * 2048 + 6144);
    CHECK(p.span[0].lo == 1280 && p.span[0].n == 256 && p.span[1].lo == 3328 && p.span[1].n == 256);
    CHECK(p.span[2].lo == 4096 + 3840 && p.span[2].n == 768);
    CHECK(ts_shard_piece_of(&sh, "model.language_model.layers.3.self_attn.q_proj.scales", 24 * 512 * 10, 5, &p, &err) == 0);
    CHECK(p.span[0].lo == 15 * 512 && p.span[0].n == 3 * 512 && p.bytes == 3 * 512 * 10); /* [query | gate] per head */
    CHECK(ts_shard_piece_of(&sh, "model.language_model.layers.3.self_attn.k_proj.weight", 4 * 256 * 8, 5, &p, &err) == 0);
    CHECK(p.span[0].lo == 512 && p.span[0].n == 256 && p.bytes == 256 * 8 && p.dup_bytes == 256 * 8); /* rank 4 has it too */
    CHECK(ts_shard_piece_of(&sh, "model.language_model.layers.3.self_attn.k_proj.weight", 4 * 256 * 8, 4, &p, &err) == 0);
    CHECK(p.dup_bytes == 0);

    /* uneven: 10 groups of 64 over 4 GPUs are 3, 3, 2, 2 */
    ts_config u = c;
    u.I = 640;
    CHECK_MSG(ts_shard_make(&u, 4, &sh, &err) == 0, "%s", err.msg);
    static const int64_t lo[] = {0, 192, 384, 512}, len[] = {192, 192, 128, 128};
    for (int r = 0; r < 4; r++) CHECK(sh.r[r].ffn.lo == lo[r] && sh.r[r].ffn.n == len[r]);
    /* MoE: contiguous expert blocks */
    CHECK(shape_config("shapes/qwen3.5-397B-A17B.json", 4, &c) == 0);
    CHECK_MSG(ts_shard_make(&c, 8, &sh, &err) == 0, "%s", err.msg);
    for (int r = 0; r < 8; r++) CHECK(sh.r[r].exp.lo == 64 * r && sh.r[r].exp.n == 64 && sh.r[r].shx.n == 128);
    CHECK(ts_shard_piece_of(&sh, "model.language_model.layers.7.mlp.experts.200.down_proj.weight", 77, 3, &p, &err) == 0);
    CHECK(p.kind == TS_SPLIT_EXPERT && p.bytes == 77); /* 200 / 64 = 3 */
    CHECK(ts_shard_piece_of(&sh, "model.language_model.layers.7.mlp.experts.200.down_proj.weight", 77, 4, &p, &err) == 0);
    CHECK(p.bytes == 0);
}

/* Expect a refusal whose message names `want`. */
static int refused(const ts_config *c, int N, int code, const char *want) {
    ts_shard sh;
    ts_error err = {0};
    int rc = ts_shard_make(c, N, &sh, &err);
    if (rc != code || !strstr(err.msg, want)) {
        ts_test_fail(__FILE__, __LINE__, "N=%d: rc %d (want %d), message '%s' (want '%s')", N, rc, code, err.msg, want);
        return 0;
    }
    return 1;
}

TS_TEST(shard, refusals) {
    ts_config d, m, c;
    ts_error err = {0};
    CHECK(shape_config("shapes/qwen3.5-27B.json", 4, &d) == 0);
    CHECK(shape_config("shapes/qwen3.5-35B-A3B.json", 4, &m) == 0);
    CHECK(refused(&d, 0, TS_E_ARG, "0 GPUs"));
    CHECK(refused(&d, 9, TS_E_ARG, "9 GPUs"));
    CHECK(refused(&d, -1, TS_E_ARG, "1 to 8"));
    CHECK(refused(&d, 5, TS_E_UNSUPPORTED, "24 query heads"));                   /* 24 % 5 */
    CHECK(refused(&d, 3, TS_E_UNSUPPORTED, "full attention KV: 4 heads"));       /* 4 % 3 */
    CHECK(refused(&d, 6, TS_E_UNSUPPORTED, "KV: 4 heads cannot be replicated")); /* 6 % 4 */
    c = d; c.Hv = 36; c.Hk = 12; c.nkv = 2; /* attention splits over 8, GDN does not */
    CHECK(refused(&c, 8, TS_E_UNSUPPORTED, "GDN: 36 value heads"));
    c = d; c.Hv = 48; c.Hk = 6; c.nq = 24; c.nkv = 4;
    CHECK(refused(&c, 4, TS_E_UNSUPPORTED, "GDN key: 6 heads"));
    c = d; c.Hv = 40; c.Hk = 5; c.nkv = 2;
    CHECK(refused(&c, 8, TS_E_UNSUPPORTED, "GDN key: 5 heads cannot be replicated"));
    c = d; c.nq = 6; c.nkv = 4;
    CHECK(refused(&c, 1, TS_E_UNSUPPORTED, "not groups of 4 KV heads"));
    c = d; c.I = 17408 + 32;
    CHECK(refused(&c, 2, TS_E_UNSUPPORTED, "dense FFN intermediate: width 17440 is not a multiple of the group 64"));
    c = d; c.I = 192;
    CHECK(refused(&c, 4, TS_E_UNSUPPORTED, "3 groups of 64, fewer than the 4 GPUs"));
    /* one GPU holds any width */
    c = d; c.I = 17408 + 32;
    { ts_shard sh; CHECK_MSG(ts_shard_make(&c, 1, &sh, &err) == 0, "%s", err.msg); }
    c = d; c.q_group = 1024; /* o_proj: 3 heads x 256 = 768 columns per GPU */
    CHECK(refused(&c, 8, TS_E_UNSUPPORTED, "o_proj: 768 columns per GPU"));
    c = d; c.q_group = 256; c.nq = 16; c.Hv = 8; c.Hk = 8; c.nkv = 2; /* out_proj: 1 head x 128 */
    CHECK(refused(&c, 8, TS_E_UNSUPPORTED, "GDN out_proj: 128 columns per GPU"));
    c = m; c.E = 250;
    CHECK(refused(&c, 4, TS_E_UNSUPPORTED, "250 experts"));
    c = m; c.q_group = 128; /* Is 512 is 4 groups of 128 */
    CHECK(refused(&c, 8, TS_E_UNSUPPORTED, "shared expert intermediate: width 512 has 4 groups of 128"));
    c = d; c.vocab = 3;
    CHECK(refused(&c, 4, TS_E_UNSUPPORTED, "3 vocabulary rows"));

    /* a tensor without a rule, or of the other FFN kind, is refused by name */
    ts_shard sh;
    ts_shard_piece p;
    CHECK_MSG(ts_shard_make(&m, 2, &sh, &err) == 0, "%s", err.msg);
    static const char *bad[] = {"model.language_model.layers.0.mlp.gate_proj.weight",       /* dense in MoE */
                                "model.language_model.layers.0.mlp.experts.256.up_proj.weight", /* E = 256 */
                                "model.language_model.layers.0.self_attn.rotary.weight",
                                "model.language_model.layers.x.input_layernorm.weight", "lm_head.bias", "something"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = ts_shard_piece_of(&sh, bad[i], 64, 0, &p, &err);
        CHECK_MSG(rc == TS_E_MODEL && strstr(err.msg, bad[i]) && strstr(err.msg, "no tensor-parallel rule"),
                  "%s: rc %d, '%s'", bad[i], rc, err.msg);
    }
    CHECK(ts_shard_piece_of(&sh, "lm_head.weight", 64, 2, &p, &err) == TS_E_ARG);
    /* bytes that do not divide by the split are refused, not rounded */
    int rc = ts_shard_piece_of(&sh, "lm_head.weight", 248320 + 1, 1, &p, &err);
    CHECK_MSG(rc == TS_E_MODEL && strstr(err.msg, "not a whole number of bytes"), "rc %d '%s'", rc, err.msg);
}

/* moe_tp (the runtime's split, model/tp.h): every routed expert's gate/up
 * rows and down columns over all ranks, group-aligned, covering each once;
 * the bytes of a layer's experts sum to the install's. Layer 0 of each
 * released MoE shape at INT4 (the layers repeat). */
TS_TEST(shard, moe_tp_partition) {
    char *names[64];
    int ns = list_shapes(names, 64), moe = 0;
    for (int si = 0; si < ns; si++) {
        char path[512];
        snprintf(path, sizeof path, "shapes/%s", names[si]);
        ts_config c;
        ts_stw_tensor *t = NULL;
        int n = 0, nsh = 0;
        ts_error err = {0};
        CHECK(shape_config(path, 4, &c) == 0);
        if (!c.is_moe) continue;
        moe++;
        CHECK_MSG(ts_synth_plan(path, 4, 64, &c, &t, &n, &nsh, &err) == 0, "%s: %s", path, err.msg);
        for (int N = 2; N <= 8; N *= 2) {
            ts_shard sh;
            CHECK_MSG(ts_shard_make_opts(&c, N, 1, &sh, &err) == 0, "%s N=%d: %s", path, N, err.msg);
            uint64_t sb = 0, sd = 0, install = 0;
            for (int i = 0; i < n; i++) {
                if (!strstr(t[i].name, "layers.0.mlp.experts.")) continue;
                install += t[i].nbytes;
                CHECK(check_tensor(&sh, t[i].name, t[i].nbytes, &sb, &sd) == 0);
            }
            CHECK_MSG(install > 0 && sb == install && sd == 0, "%s N=%d: experts %llu bytes, ranks hold %llu", path, N,
                      (unsigned long long)install, (unsigned long long)sb);
        }
        ts_free(t);
    }
    for (int i = 0; i < ns; i++) free(names[i]);
    CHECK(moe >= 2);
}
