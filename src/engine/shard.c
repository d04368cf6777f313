/* shard.c: the tensor- and expert-parallel split and its per-rank bytes
 * (shard.h says what is split how, and what is not built).
 *
 * Owns: ts_shard_make (the spans of every rank, and the refusals),
 * ts_shard_piece_of (one tensor's piece, from its name), the per-rank sums.
 * Does not own: the tensor list (synth.c plans it, safetensors.c reads it),
 * the state sizes (plan.c's ts_sess_plan_make), any device or collective.
 *
 * Invariants (tests/test_shard.c): for every tensor the ranks' spans cover
 * the split axis exactly, overlapping only where a head is replicated
 * (kv_rep, gk_rep ranks each) or the tensor is whole everywhere; a column
 * piece of a quantized matrix starts and ends on a group; the bytes of a
 * piece are exact; N = 1 is the single-GPU plan.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/plan.h"
#include "engine/shard.h"

/* Part r of `units` in n balanced parts (the first units % n one larger). */
static ts_span split_even(int64_t units, int n, int r) {
    int64_t base = units / n, rem = units % n;
    ts_span s = {r * base + TS_MIN((int64_t)r, rem), base + (r < rem)};
    return s;
}

/* Heads split in contiguous blocks, or, with fewer heads than ranks, each
 * head held by n / heads consecutive ranks. */
static int split_heads(const char *what, int heads, int n, int r, ts_span *out, int *rep, ts_error *err) {
    if (heads >= n) {
        if (heads % n)
            return ts_fail(err, TS_E_UNSUPPORTED, "%s: %d heads do not split evenly over %d GPUs", what, heads, n);
        *rep = 1;
        *out = (ts_span){(int64_t)r * (heads / n), heads / n};
    } else {
        if (n % heads)
            return ts_fail(err, TS_E_UNSUPPORTED,
                           "%s: %d heads cannot be replicated evenly over %d GPUs (the GPU count must be a multiple)",
                           what, heads, n);
        *rep = n / heads;
        *out = (ts_span){r / *rep, 1};
    }
    return 0;
}

/* A group-aligned split of a width into n pieces. */
static int split_width(const char *what, int64_t width, int align, int n, int r, ts_span *out, ts_error *err) {
    if (n == 1) return *out = (ts_span){0, width}, 0; /* one GPU: the whole, whatever its width */
    if (width % align)
        return ts_fail(err, TS_E_UNSUPPORTED, "%s: width %lld is not a multiple of the group %d", what, (long long)width,
                       align);
    if (width / align < n)
        return ts_fail(err, TS_E_UNSUPPORTED, "%s: width %lld has %lld groups of %d, fewer than the %d GPUs", what,
                       (long long)width, (long long)(width / align), align, n);
    ts_span u = split_even(width / align, n, r);
    *out = (ts_span){u.lo * align, u.n * align};
    return 0;
}

static int in_span(ts_span s, int64_t i) { return i >= s.lo && i < s.lo + s.n; }

int ts_shard_make(const ts_config *c, int n, ts_shard *sh, ts_error *err) {
    return ts_shard_make_opts(c, n, 0, sh, err);
}

int ts_shard_make_opts(const ts_config *c, int n, int moe_tp, ts_shard *sh, ts_error *err) {
    memset(sh, 0, sizeof *sh);
    sh->moe_tp = moe_tp;
    if (n < 1 || n > TS_SHARD_MAX_GPUS)
        return ts_fail(err, TS_E_ARG, "%d GPUs: tensor parallelism splits over 1 to %d", n, TS_SHARD_MAX_GPUS);
    if (c->nq <= 0 || c->nkv <= 0 || c->nq % c->nkv)
        return ts_fail(err, TS_E_UNSUPPORTED, "full attention: %d query heads are not groups of %d KV heads", c->nq, c->nkv);
    if (c->Hk <= 0 || c->Hv <= 0 || c->Hv % c->Hk)
        return ts_fail(err, TS_E_UNSUPPORTED, "GDN: %d value heads are not groups of %d key heads", c->Hv, c->Hk);
    sh->n = n;
    sh->c = *c;
    sh->align = c->q_bits ? c->q_group : TS_SHARD_BF16_ALIGN;
    const int rq = c->nq / c->nkv, rv = c->Hv / c->Hk;
    /* query and value heads are never replicated: their outputs meet in a
     * row-parallel product whose all-reduce would count a copy twice */
    if (c->nq % n)
        return ts_fail(err, TS_E_UNSUPPORTED, "full attention: %d query heads do not split evenly over %d GPUs", c->nq, n);
    if (c->Hv % n)
        return ts_fail(err, TS_E_UNSUPPORTED, "GDN: %d value heads do not split evenly over %d GPUs", c->Hv, n);
    int rc;
    for (int r = 0; r < n; r++) {
        ts_shard_rank *k = &sh->r[r];
        k->q = (ts_span){(int64_t)r * (c->nq / n), c->nq / n};
        if ((rc = split_heads("full attention KV", c->nkv, n, r, &k->kv, &sh->kv_rep, err))) return rc;
        k->gv = (ts_span){(int64_t)r * (c->Hv / n), c->Hv / n};
        if ((rc = split_heads("GDN key", c->Hk, n, r, &k->gk, &sh->gk_rep, err))) return rc;
        /* the kernels read a rank's own heads only: each query (value) head
         * of the rank must find its KV (key) head on the same rank */
        for (int64_t j = k->q.lo; j < k->q.lo + k->q.n; j++)
            if (!in_span(k->kv, j / rq))
                return ts_fail(err, TS_E_UNSUPPORTED, "full attention: query head %lld of GPU %d reads KV head %lld held elsewhere",
                               (long long)j, r, (long long)(j / rq));
        for (int64_t h = k->gv.lo; h < k->gv.lo + k->gv.n; h++)
            if (!in_span(k->gk, h / rv))
                return ts_fail(err, TS_E_UNSUPPORTED, "GDN: value head %lld of GPU %d reads key head %lld held elsewhere",
                               (long long)h, r, (long long)(h / rv));
        /* row-parallel products (o_proj, out_proj) split their columns: a
         * quantization group must not straddle two GPUs */
        if (c->q_bits) {
            int64_t oc = k->q.n * c->head_dim, gc = k->gv.n * c->dv;
            if (oc % c->q_group || gc % c->q_group)
                return ts_fail(err, TS_E_UNSUPPORTED,
                               "%s: %lld columns per GPU (%d GPUs) are not a multiple of the group %d",
                               oc % c->q_group ? "full attention o_proj" : "GDN out_proj",
                               (long long)(oc % c->q_group ? oc : gc), n, c->q_group);
        }
        if (!c->is_moe) {
            if ((rc = split_width("dense FFN intermediate", c->I, sh->align, n, r, &k->ffn, err))) return rc;
        } else {
            if ((rc = split_width("shared expert intermediate", c->Is, sh->align, n, r, &k->shx, err))) return rc;
            if (moe_tp) {
                if ((rc = split_width("expert intermediate", c->Im, sh->align, n, r, &k->im, err))) return rc;
                k->exp = (ts_span){0, c->E};
            } else if (c->E % n)
                return ts_fail(err, TS_E_UNSUPPORTED, "MoE: %d experts do not split into %d equal contiguous blocks", c->E, n);
            else
                k->exp = (ts_span){(int64_t)r * (c->E / n), c->E / n};
        }
        if (c->vocab < n) return ts_fail(err, TS_E_UNSUPPORTED, "head: %d vocabulary rows for %d GPUs", c->vocab, n);
        k->vocab = split_even(c->vocab, n, r);
    }
    return 0;
}

/* ---- one tensor ---- */

enum {
    R_SKIP, R_REPL, R_VOCAB, R_Q, R_KV, R_O, R_QKV, R_Z, R_GHEAD, R_GOUT,
    R_FFN_ROWS, R_FFN_COLS, R_SH_ROWS, R_SH_COLS, R_EXPERT, R_EXPERTS_FUSED,
    /* moe_tp: an expert's gate/up rows, its down columns; the fused [E, ...] forms */
    R_EXP_ROWS, R_EXP_COLS, R_FUSED_GU, R_FUSED_DOWN,
};

/* The role of a tensor from its name; *expert for R_EXPERT. */
static int role_of(const ts_shard *sh, const char *name, int *role, int *expert, ts_error *err) {
    char base[256];
    if (!strncmp(name, "model.visual.", 13)) return *role = R_SKIP, 0;
    snprintf(base, sizeof base, "%s", name);
    size_t L = strlen(base);
    static const char *suffix[] = {".weight", ".scales", ".biases"};
    for (int i = 0; i < 3; i++) {
        size_t s = strlen(suffix[i]);
        if (L > s && !strcmp(base + L - s, suffix[i])) { base[L - s] = 0; break; }
    }
    const char *rest = base;
    static const char *prefix[] = {"model.language_model.", "model."};
    for (int i = 0; i < 2; i++)
        if (!strncmp(rest, prefix[i], strlen(prefix[i]))) { rest += strlen(prefix[i]); break; }
    if (!strcmp(rest, "embed_tokens") || !strcmp(rest, "lm_head")) return *role = R_VOCAB, 0;
    static const char *top_repl[] = {"norm", "mtp.norm", "mtp.fc", "mtp.pre_fc_norm_embedding", "mtp.pre_fc_norm_hidden"};
    for (size_t i = 0; i < sizeof top_repl / sizeof *top_repl; i++)
        if (!strcmp(rest, top_repl[i])) return *role = R_REPL, 0;
    if (!strncmp(rest, "mtp.", 4)) rest += 4;
    if (strncmp(rest, "layers.", 7)) goto unknown;
    char *end;
    strtol(rest + 7, &end, 10);
    if (end == rest + 7 || *end != '.') goto unknown;
    rest = end + 1;
    /* routed experts first: they are nearly all of a MoE install's tensors */
    if (!strncmp(rest, "mlp.experts.", 12) && rest[12] >= '0' && rest[12] <= '9') {
        long e = strtol(rest + 12, &end, 10);
        if (sh->c.is_moe && *end == '.' && e < sh->c.E &&
            (!strcmp(end, ".gate_proj") || !strcmp(end, ".up_proj") || !strcmp(end, ".down_proj"))) {
            *expert = (int)e;
            if (sh->moe_tp) return *role = strcmp(end, ".down_proj") ? R_EXP_ROWS : R_EXP_COLS, 0;
            return *role = R_EXPERT, 0;
        }
        goto unknown;
    }
    static const struct { const char *s; int role; int moe; } t[] = {
        {"input_layernorm", R_REPL, -1}, {"post_attention_layernorm", R_REPL, -1},
        {"self_attn.q_norm", R_REPL, -1}, {"self_attn.k_norm", R_REPL, -1}, {"linear_attn.norm", R_REPL, -1},
        {"self_attn.q_proj", R_Q, -1}, {"self_attn.k_proj", R_KV, -1}, {"self_attn.v_proj", R_KV, -1},
        {"self_attn.o_proj", R_O, -1},
        {"linear_attn.in_proj_qkv", R_QKV, -1}, {"linear_attn.conv1d", R_QKV, -1},
        {"linear_attn.in_proj_z", R_Z, -1}, {"linear_attn.in_proj_a", R_GHEAD, -1},
        {"linear_attn.in_proj_b", R_GHEAD, -1}, {"linear_attn.A_log", R_GHEAD, -1},
        {"linear_attn.dt_bias", R_GHEAD, -1}, {"linear_attn.out_proj", R_GOUT, -1},
        {"mlp.gate_proj", R_FFN_ROWS, 0}, {"mlp.up_proj", R_FFN_ROWS, 0}, {"mlp.down_proj", R_FFN_COLS, 0},
        {"mlp.gate", R_REPL, 1}, {"mlp.shared_expert_gate", R_REPL, 1},
        {"mlp.shared_expert.gate_proj", R_SH_ROWS, 1}, {"mlp.shared_expert.up_proj", R_SH_ROWS, 1},
        {"mlp.shared_expert.down_proj", R_SH_COLS, 1},
        {"mlp.experts.gate_up_proj", R_EXPERTS_FUSED, 1}, {"mlp.experts.down_proj", R_EXPERTS_FUSED, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (!strcmp(rest, t[i].s)) {
            if (t[i].moe >= 0 && t[i].moe != sh->c.is_moe) goto unknown;
            *role = t[i].role;
            if (*role == R_EXPERTS_FUSED && sh->moe_tp) *role = strstr(rest, "gate_up") ? R_FUSED_GU : R_FUSED_DOWN;
            return 0;
        }
unknown:
    return ts_fail(err, TS_E_MODEL, "tensor '%s': no tensor-parallel rule for it (a %s model)", name,
                   sh->c.is_moe ? "MoE" : "dense");
}

/* The spans of rank r for a role (no bytes). */
static void spans_of(const ts_shard *sh, int role, int expert, int r, ts_shard_piece *p) {
    const ts_config *c = &sh->c;
    const ts_shard_rank *k = &sh->r[r];
    const int64_t D = c->head_dim, Kd = (int64_t)c->Hk * c->dk, Vd = (int64_t)c->Hv * c->dv;
    memset(p, 0, sizeof *p);
    p->n_span = 1;
#define ROWS(ext, lo_, n_) (p->kind = TS_SPLIT_ROWS, p->extent = (ext), p->span[0] = (ts_span){(lo_), (n_)})
#define COLS(ext, lo_, n_) (p->kind = TS_SPLIT_COLS, p->dim = -1, p->extent = (ext), p->span[0] = (ts_span){(lo_), (n_)})
    switch (role) {
    case R_SKIP: p->kind = TS_SPLIT_SKIP; p->n_span = 0; break;
    case R_REPL: p->kind = TS_SPLIT_REPL; p->n_span = 0; break;
    case R_VOCAB: ROWS(c->vocab, k->vocab.lo, k->vocab.n); break;
    case R_Q: ROWS(2 * c->nq * D, k->q.lo * 2 * D, k->q.n * 2 * D); break; /* per head [query | gate] */
    case R_KV: ROWS(c->nkv * D, k->kv.lo * D, k->kv.n * D); break;
    case R_O: COLS(c->nq * D, k->q.lo * D, k->q.n * D); break;
    case R_QKV: /* channels [q: Kd | k: Kd | v: Vd], key-head-major within each */
        p->kind = TS_SPLIT_ROWS;
        p->extent = 2 * Kd + Vd;
        p->n_span = 3;
        p->span[0] = (ts_span){k->gk.lo * c->dk, k->gk.n * c->dk};
        p->span[1] = (ts_span){Kd + k->gk.lo * c->dk, k->gk.n * c->dk};
        p->span[2] = (ts_span){2 * Kd + k->gv.lo * c->dv, k->gv.n * c->dv};
        break;
    case R_Z: ROWS(Vd, k->gv.lo * c->dv, k->gv.n * c->dv); break;
    case R_GHEAD: ROWS(c->Hv, k->gv.lo, k->gv.n); break;
    case R_GOUT: COLS(Vd, k->gv.lo * c->dv, k->gv.n * c->dv); break;
    case R_FFN_ROWS: ROWS(c->I, k->ffn.lo, k->ffn.n); break;
    case R_FFN_COLS: COLS(c->I, k->ffn.lo, k->ffn.n); break;
    case R_SH_ROWS: ROWS(c->Is, k->shx.lo, k->shx.n); break;
    case R_SH_COLS: COLS(c->Is, k->shx.lo, k->shx.n); break;
    case R_EXPERT:
        p->kind = TS_SPLIT_EXPERT;
        p->extent = 1;
        p->span[0] = (ts_span){0, in_span(k->exp, expert)};
        break;
    case R_EXPERTS_FUSED: ROWS(c->E, k->exp.lo, k->exp.n); break; /* [E, ...]: dim 0 is the expert */
    case R_EXP_ROWS: ROWS(c->Im, k->im.lo, k->im.n); break;
    case R_EXP_COLS: COLS(c->Im, k->im.lo, k->im.n); break;
    case R_FUSED_GU: /* [E, 2*Im, H], gate rows then up rows: the rank's rows of each */
        ROWS(2 * (int64_t)c->Im, k->im.lo, k->im.n);
        p->dim = 1;
        p->n_span = 2;
        p->span[1] = (ts_span){c->Im + k->im.lo, k->im.n};
        break;
    case R_FUSED_DOWN: COLS(c->Im, k->im.lo, k->im.n); break; /* [E, H, Im] */
    }
#undef ROWS
#undef COLS
}

static int cmp_span(const void *a, const void *b) {
    const ts_span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Length of (the spans of p) intersected with (the union of the spans of
 * the ranks below r). */
static int64_t overlap_below(const ts_shard *sh, int role, int expert, int r, const ts_shard_piece *p) {
    ts_span cut[3 * TS_SHARD_MAX_GPUS * 3];
    int nc = 0;
    for (int q = 0; q < r; q++) {
        ts_shard_piece o;
        spans_of(sh, role, expert, q, &o);
        for (int i = 0; i < p->n_span; i++)
            for (int j = 0; j < o.n_span; j++) {
                int64_t lo = TS_MAX(p->span[i].lo, o.span[j].lo);
                int64_t hi = TS_MIN(p->span[i].lo + p->span[i].n, o.span[j].lo + o.span[j].n);
                if (hi > lo) cut[nc++] = (ts_span){lo, hi - lo};
            }
    }
    qsort(cut, nc, sizeof *cut, cmp_span);
    int64_t len = 0, end = INT64_MIN;
    for (int i = 0; i < nc; i++) {
        int64_t lo = TS_MAX(cut[i].lo, end), hi = cut[i].lo + cut[i].n;
        if (hi > lo) len += hi - lo;
        end = TS_MAX(end, hi);
    }
    return len;
}

/* Rank `rank`'s piece of a tensor of known role. */
static int piece_of_role(const ts_shard *sh, const char *name, int role, int expert, uint64_t nbytes, int rank,
                         ts_shard_piece *out, ts_error *err) {
    spans_of(sh, role, expert, rank, out);
    if (out->kind == TS_SPLIT_SKIP) return 0;
    if (out->kind == TS_SPLIT_REPL) {
        out->bytes = nbytes;
        out->dup_bytes = rank ? nbytes : 0;
        return 0;
    }
    if (out->kind == TS_SPLIT_EXPERT) { /* whole, on its one owner */
        out->bytes = out->span[0].n ? nbytes : 0;
        return 0;
    }
    int64_t len = 0;
    for (int i = 0; i < out->n_span; i++) {
        const ts_span s = out->span[i];
        /* a column piece of an MLX matrix is whole groups (scales, biases)
         * and whole u32 words of codes */
        if (out->kind == TS_SPLIT_COLS && sh->c.q_bits && (s.lo % sh->c.q_group || s.n % sh->c.q_group))
            return ts_fail(err, TS_E_UNSUPPORTED, "tensor '%s': GPU %d's columns [%lld, %lld) straddle groups of %d", name,
                           rank, (long long)s.lo, (long long)(s.lo + s.n), sh->c.q_group);
        len += s.n;
    }
    const uint64_t whole = nbytes * (uint64_t)len;
    if (whole % (uint64_t)out->extent)
        return ts_fail(err, TS_E_MODEL, "tensor '%s' (%llu bytes): GPU %d's %lld of %lld is not a whole number of bytes",
                       name, (unsigned long long)nbytes, rank, (long long)len, (long long)out->extent);
    out->bytes = whole / (uint64_t)out->extent;
    /* replicated heads: exact too, as each head is a whole number of rows */
    out->dup_bytes = nbytes * (uint64_t)overlap_below(sh, role, expert, rank, out) / (uint64_t)out->extent;
    return 0;
}

int ts_shard_piece_of(const ts_shard *sh, const char *name, uint64_t nbytes, int rank, ts_shard_piece *out,
                      ts_error *err) {
    memset(out, 0, sizeof *out);
    if (rank < 0 || rank >= sh->n) return ts_fail(err, TS_E_ARG, "rank %d of %d GPUs", rank, sh->n);
    int role, expert = 0, rc;
    if ((rc = role_of(sh, name, &role, &expert, err))) return rc;
    return piece_of_role(sh, name, role, expert, nbytes, rank, out, err);
}

void ts_shard_local_config(const ts_shard *sh, int r, ts_config *out) {
    const ts_shard_rank *k = &sh->r[r];
    *out = sh->c;
    out->nq = (int)k->q.n;
    out->nkv = (int)k->kv.n;
    out->Hk = (int)k->gk.n;
    out->Hv = (int)k->gv.n;
    if (!sh->c.is_moe) out->I = (int)k->ffn.n;
    else {
        out->Is = (int)k->shx.n;
        if (sh->moe_tp) out->Im = (int)k->im.n;
    }
    /* the head's rows are the rank's; the embedding stays whole (a row
     * gather per token: splitting it would cost a collective a token to save
     * (V / N) * H of memory a rank) */
    out->tied = 0;
    out->head_lo = (int)k->vocab.lo;
    out->head_rows = (int)k->vocab.n;
}

/* ---- sums ---- */

static int add_tensor(const ts_shard *sh, const char *name, uint64_t nbytes, ts_shard_bytes *out, ts_error *err) {
    int counted = 0, role, expert = 0, rc;
    if ((rc = role_of(sh, name, &role, &expert, err))) return rc; /* once: a 397B install has 276k tensors */
    for (int r = 0; r < sh->n; r++) {
        ts_shard_piece p;
        if ((rc = piece_of_role(sh, name, role, expert, nbytes, r, &p, err))) return rc;
        if (p.kind == TS_SPLIT_SKIP) continue;
        counted = 1;
        out->weights[r] += p.bytes;
        out->dup[r] += p.dup_bytes;
    }
    if (counted) out->total += nbytes;
    return 0;
}

static void clear_weights(const ts_shard *sh, ts_shard_bytes *out) {
    out->n = sh->n;
    out->total = 0;
    memset(out->weights, 0, sizeof out->weights);
    memset(out->dup, 0, sizeof out->dup);
}

int ts_shard_weights_planned(const ts_shard *sh, const ts_stw_tensor *t, int n, ts_shard_bytes *out, ts_error *err) {
    clear_weights(sh, out);
    for (int i = 0; i < n; i++) {
        int rc = add_tensor(sh, t[i].name, t[i].nbytes, out, err);
        if (rc) return rc;
    }
    return 0;
}

int ts_shard_weights_set(const ts_shard *sh, const ts_st_set *st, ts_shard_bytes *out, ts_error *err) {
    clear_weights(sh, out);
    for (int i = 0; i < st->n_tensors; i++) {
        int rc = add_tensor(sh, st->tensors[i].name, st->tensors[i].nbytes, out, err);
        if (rc) return rc;
    }
    return 0;
}

int ts_shard_state(const ts_shard *sh, int n_ctx, ts_shard_bytes *out, ts_error *err) {
    const ts_config *c = &sh->c;
    ts_session_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = n_ctx;
    ts_sess_plan s;
    int rc = ts_sess_plan_make(c, 0, &p, &s, err);
    if (rc) return rc;
    out->n = sh->n;
    out->n_ctx = s.p.n_ctx;
    const uint64_t F = sizeof(float), C = 2 * (uint64_t)c->Hk * c->dk + (uint64_t)c->Hv * c->dv;
    for (int r = 0; r < sh->n; r++) {
        const ts_shard_rank *k = &sh->r[r];
        /* the plan's buffers hold every head; a rank's hold its own, and a
         * head is a whole slice of each (exact divisions) */
        const uint64_t Cr = 2 * (uint64_t)k->gk.n * c->dk + (uint64_t)k->gv.n * c->dv;
        out->kv[r] = F * 2 * s.n_full * (s.kv_layer / c->nkv * k->kv.n);
        out->gdn[r] = F * s.n_gdn * (s.gdn_conv / C * Cr + s.gdn_S / c->Hv * k->gv.n);
    }
    return 0;
}
