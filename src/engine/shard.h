/* shard.h: how a model splits over N GPUs (tensor and expert parallelism),
 * and what each GPU then holds, in bytes. Arithmetic only (issue 21).
 *
 * Owns: the split of every tensor of a Qwen3.5 install over N ranks
 * (ts_shard_make, ts_shard_piece_of), the refusal of shapes that cannot be
 * split the way the kernels need, the per-rank bytes of the weights, the
 * KV cache and the GDN state (ts_shard_weights_*, ts_shard_state), a rank's
 * model config (ts_shard_local_config) and, in shard_slice.c, a rank's
 * slices of the install (ts_shard_slice, ts_shard_slice_list).
 * Does not own: the runtime built on it (model/tp.h: the ranks, two sums a
 * layer, the head's rows gathered into rank 0's logits, the host
 * collectives; cuda/comm.cu: NCCL), the exact plan of a rank (plan.c,
 * ts_mem_plan_rank, which binds the rank's slices dry).
 * Two differences between the byte sums here (the first plan of issue 21)
 * and what the runtime holds: the runtime keeps the embedding whole on
 * every rank (a row gather a token; splitting it would cost a collective to
 * save (V / N) * H of memory) and splits the routed experts by columns
 * (moe_tp, model/tp.h says why) rather than placing whole experts; the
 * whole-expert split below stays for expert parallelism (not built: an
 * all-to-all for prefill and verify rows, or broadcast + the FFN's sum for
 * a decode row, to be measured on several GPUs). The head's argmax is not
 * distributed either: each rank's rows of the logits are gathered.
 *
 * The split (rank r of N, contiguous blocks everywhere):
 *   full attention  query heads [r*nq/N, (r+1)*nq/N) (nq % N == 0); KV heads
 *                   [r*nkv/N, ...) when nkv >= N (nkv % N == 0), else the one
 *                   KV head r / (N/nkv), replicated on N/nkv ranks (N % nkv
 *                   == 0): query head j reads KV head j / (nq/nkv), and a
 *                   rank's query heads then all read that one head.
 *                   q_proj rows are per head [q | gate] (2*D), so a head range
 *                   is one row range; o_proj is split by columns.
 *   Gated DeltaNet  value heads [r*Hv/N, ...) (Hv % N == 0) with the key
 *                   heads they read (value head h reads key head h / (Hv/Hk)),
 *                   split or replicated like the KV heads above. in_proj_qkv
 *                   and conv1d rows are three ranges (q, k of the key heads,
 *                   v of the value heads); z, a, b, A_log, dt_bias by value
 *                   head; out_proj by columns.
 *   FFN             dense I and shared-expert Is: gate/up rows and down_proj
 *                   columns in N pieces, each a multiple of `align` (the
 *                   quantization group, TS_SHARD_BF16_ALIGN for BF16) so a
 *                   group never straddles ranks; balanced (the first ranks
 *                   one piece of `align` more) when align*N does not divide.
 *   experts         contiguous blocks [r*E/N, (r+1)*E/N) (E % N == 0), not
 *                   round-robin: a layer's experts are consecutive units of
 *                   the install (synth/convert write them so), so a rank's
 *                   experts are one byte range per layer (one read, one
 *                   mapping, one expert-cache range), and the owner of
 *                   expert e is e / (E/N) with no table. Round-robin would
 *                   only help if routing favoured neighbouring ids, which
 *                   nothing suggests (to be measured on real routing).
 *   vocab           embedding and head rows in N balanced ranges (tied or
 *                   not: the same ranges).
 *   replicated      every norm, the router, the shared-expert gate, the MTP
 *                   fc (its output is needed whole on every rank).
 *
 * Bytes: a piece's bytes are the tensor's bytes (as stored: the same bytes
 * the single-GPU plan maps) times its share of the split axis, and that must
 * be exact (a refusal otherwise); the MLX layout's weight, scales and biases
 * of a matrix split the same way. KV and GDN state come from
 * ts_sess_plan_make (plan.h), scaled by the rank's heads, so N = 1 is the
 * single-GPU plan by construction. Not here: activations, the backend
 * workspace, the MTP cache, drafting buffers per rank.
 */
#ifndef TS_SHARD_H
#define TS_SHARD_H

#include "loader/config.h"
#include "loader/safetensors.h"
#include "loader/st_writer.h"

#define TS_SHARD_MAX_GPUS 8
/* BF16 has no group; pieces of 8 values keep each piece's rows 16-byte
 * vectors (an assumption about the future kernels, not a measured need) */
#define TS_SHARD_BF16_ALIGN 8

typedef struct ts_span { int64_t lo, n; } ts_span; /* [lo, lo + n) */

/* What rank r holds (in heads, columns, experts or rows of the whole). */
typedef struct ts_shard_rank {
    ts_span q;      /* full-attention query heads */
    ts_span kv;     /* full-attention KV heads (n == 1, shared with other ranks, when nkv < N) */
    ts_span gv;     /* GDN value heads */
    ts_span gk;     /* GDN key heads (replicated like kv when Hk < N) */
    ts_span ffn;    /* dense FFN intermediate columns (0 for MoE) */
    ts_span shx;    /* shared-expert intermediate columns (0 for dense) */
    ts_span exp;    /* routed experts (0 for dense; all of them with moe_tp) */
    ts_span im;     /* moe_tp: each expert's intermediate columns (0 otherwise) */
    ts_span vocab;  /* embedding / head rows */
} ts_shard_rank;

typedef struct ts_shard {
    int n;          /* GPUs, 1..TS_SHARD_MAX_GPUS */
    int align;      /* FFN piece alignment: q_group, or TS_SHARD_BF16_ALIGN */
    int kv_rep;     /* ranks holding each KV head (1, or N / nkv) */
    int gk_rep;     /* ranks holding each GDN key head (1, or N / Hk) */
    int moe_tp;     /* routed experts split like the dense FFN (each expert's
                       intermediate over the ranks) instead of whole experts
                       over the ranks: the runtime's split (model/tp.h says why) */
    ts_config c;    /* the config split (a copy) */
    ts_shard_rank r[TS_SHARD_MAX_GPUS];
} ts_shard;

/* Split config c over n GPUs. Refuses (TS_E_UNSUPPORTED, naming the
 * dimension and the numbers) a shape the split above cannot serve, and
 * n outside 1..TS_SHARD_MAX_GPUS (TS_E_ARG). */
int ts_shard_make(const ts_config *c, int n, ts_shard *sh, ts_error *err);
/* The same with moe_tp = 1: every routed expert split by its intermediate
 * (gate/up rows, down columns, group-aligned) over all ranks. */
int ts_shard_make_opts(const ts_config *c, int n, int moe_tp, ts_shard *sh, ts_error *err);
/* Rank r's model as a narrower Qwen3.5 of its own: the config whose head
 * counts and widths are the rank's pieces (what binding the rank's slices
 * needs): nq, nkv, Hk, Hv, I, Is, Im, and head_rows / head_lo for its vocab
 * rows of an untied head (the embedding stays whole). */
void ts_shard_local_config(const ts_shard *sh, int r, ts_config *out);

typedef enum {
    TS_SPLIT_REPL = 0, /* whole on every rank */
    TS_SPLIT_ROWS,     /* spans of dim 0 */
    TS_SPLIT_COLS,     /* spans of the logical columns (dim 1; packed for INT4/INT8) */
    TS_SPLIT_EXPERT,   /* whole on the expert's owner: extent 1, span {0, 1} there, {0, 0} elsewhere */
    TS_SPLIT_SKIP,     /* not part of the language model (vision tower): on no rank, not counted */
} ts_split_kind;

/* Rank `rank`'s piece of one tensor. */
typedef struct ts_shard_piece {
    ts_split_kind kind;
    int64_t extent;      /* whole length of the split axis (0 for REPL, SKIP) */
    int n_span;          /* 1, or 3 for GDN qkv rows (q, k, v), 2 for fused gate_up rows (moe_tp) */
    int dim;             /* the tensor dimension the spans cut: ROWS 0 (1 for the [E, ...]
                            stacked experts of moe_tp), COLS -1 = the last */
    ts_span span[3];
    uint64_t bytes;      /* this rank's bytes of the tensor */
    uint64_t dup_bytes;  /* of those, bytes a lower rank holds too (replication) */
} ts_shard_piece;

/* The piece of tensor `name` (`nbytes` as stored) on `rank`. Unknown names
 * are refused (TS_E_MODEL): a tensor with no rule must not be dropped. */
int ts_shard_piece_of(const ts_shard *sh, const char *name, uint64_t nbytes, int rank, ts_shard_piece *out,
                      ts_error *err);

typedef struct ts_shard_bytes {
    int n;                                  /* ranks */
    uint64_t total;                         /* every counted tensor once (= the plan's mapped_bytes) */
    uint64_t weights[TS_SHARD_MAX_GPUS];    /* each rank's weight bytes */
    uint64_t dup[TS_SHARD_MAX_GPUS];        /* of those, also held by a lower rank: sum(weights - dup) == total */
    int n_ctx;                              /* the context the state below is for (0: not computed) */
    uint64_t kv[TS_SHARD_MAX_GPUS];         /* KV cache (K and V of the full-attention layers) */
    uint64_t gdn[TS_SHARD_MAX_GPUS];        /* GDN conv + recurrent state */
} ts_shard_bytes;

/* Per-rank weight bytes of a planned tensor list (ts_synth_plan) or of an
 * opened tensor set; fills n, total, weights, dup (the state fields are left
 * as they are). */
int ts_shard_weights_planned(const ts_shard *sh, const ts_stw_tensor *t, int n, ts_shard_bytes *out, ts_error *err);
int ts_shard_weights_set(const ts_shard *sh, const ts_st_set *st, ts_shard_bytes *out, ts_error *err);

/* Per-rank KV cache and GDN state for a context of n_ctx tokens (0: the
 * session default), as ts_sess_plan_make sizes them; fills n_ctx, kv, gdn. */
int ts_shard_state(const ts_shard *sh, int n_ctx, ts_shard_bytes *out, ts_error *err);

/* Rank r's slices of the tensors of `full` as one safetensors image in
 * memory (*img, freed with ts_free) opened as a set (*out): each tensor's
 * piece, except that the embedding stays whole and the head's rows (of the
 * embedding when tied) become "lm_head" (ts_shard_local_config's model).
 * Whole experts over ranks (moe_tp = 0) are not cut here. Refusals name
 * the tensor. */
int ts_shard_slice(const ts_shard *sh, int r, const ts_st_set *full, void **img, ts_st_set **out, ts_error *err);
/* The same slices as a tensor list (names, dtypes, shapes, bytes: no data
 * read), for the memory plan of a rank (ts_st_open_planned), and the bytes
 * of the image ts_shard_slice would allocate. */
int ts_shard_slice_list(const ts_shard *sh, int r, const ts_st_set *full, ts_stw_tensor **out, int *n,
                        uint64_t *image_bytes, ts_error *err);

#endif
