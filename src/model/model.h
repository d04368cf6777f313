/* model.h: the Qwen3.5 model in memory: weights bound to the config, and the
 * per-session state the forward pass reads and writes.
 *
 * Owns: the layout of every weight and state buffer (shape comments below),
 * the binding of checkpoint tensors to it (load.c), the forward and the MTP
 * head's forward (qwen35.c), as sequences of backend ops.
 * Does not own: the files (loader/), the computation (the backend:
 * backend.h; model code computes addresses of activation, state and logit
 * memory but never dereferences them), the public API (engine/).
 *
 * Notation (model-spec.md): H hidden, nq/nkv attention heads of size D,
 * Hk/Hv GDN key/value heads of dk/dv, Kd = Hk*dk, Vd = Hv*dv,
 * C = 2*Kd + Vd (conv channels), K = conv kernel width, V vocab.
 */
#ifndef TS_MODEL_H
#define TS_MODEL_H

#include "backend.h"
#include "loader/config.h"
#include "loader/safetensors.h"

/* A full-attention block (main stack or MTP). */
typedef struct ts_attn_w {
    ts_weight q_proj;   /* [2*nq*D, H]: per head [query D | gate D] interleaved */
    ts_weight k_proj;   /* [nkv*D, H] */
    ts_weight v_proj;   /* [nkv*D, H] */
    ts_weight o_proj;   /* [H, nq*D] */
    float *q_norm;      /* [D] f32, holds 1 + w */
    float *k_norm;      /* [D] f32, holds 1 + w */
} ts_attn_w;

/* A Gated DeltaNet block. */
typedef struct ts_gdn_w {
    ts_weight in_qkv;   /* [C, H]: q (Kd) | k (Kd) | v (Vd), head-major */
    ts_weight in_z;     /* [Vd, H] */
    ts_weight in_b;     /* [Hv, H] */
    ts_weight in_a;     /* [Hv, H] */
    ts_weight out_proj; /* [H, Vd] */
    float *conv;        /* [K, C] f32 (the file's [C, K] transposed at bind):
                           conv[(K-1)*C + c] multiplies the current token */
    float *neg_A;       /* [Hv] f32: -exp(A_log) */
    float *dt_bias;     /* [Hv] f32 */
    float *norm;        /* [dv] f32: plain weight of the gated RMSNorm (not 1 + w) */
} ts_gdn_w;

/* FFN: dense SwiGLU, or MoE with a sigmoid-gated shared expert. */
typedef struct ts_ffn_w {
    int moe;
    ts_weight gate, up, down;       /* dense: [I, H], [I, H], [H, I] */
    ts_weight router;               /* [E, H] */
    ts_weight *e_gate, *e_up;       /* E entries, [Im, H] (views into fused tensors) */
    ts_weight *e_down;              /* E entries, [H, Im] */
    ts_weight s_gate, s_up, s_down; /* shared expert: [Is, H], [Is, H], [H, Is] */
    ts_weight s_gate_w;             /* [1, H]: the shared expert's scalar gate */
} ts_ffn_w;

typedef struct ts_layer_w {
    int full;           /* 1 = full attention, 0 = GDN */
    float *in_norm;     /* [H] f32, 1 + w */
    float *post_norm;   /* [H] f32, 1 + w */
    ts_attn_w attn;
    ts_gdn_w gdn;
    ts_ffn_w ffn;
} ts_layer_w;

typedef struct ts_mtp_w {
    float *pre_norm_emb;  /* [H] f32, 1 + w */
    float *pre_norm_hid;  /* [H] f32, 1 + w */
    ts_weight fc;         /* [H, 2H]: cols [0, H) act on the embedding, [H, 2H) on the hidden */
    ts_layer_w layer;     /* a full-attention decoder layer */
    float *norm;          /* [H] f32, 1 + w */
} ts_mtp_w;

typedef struct ts_model {
    ts_config cfg;
    ts_weight embed;      /* [V, H] */
    ts_weight head;       /* [V, H] (= embed when tied) */
    float *final_norm;    /* [H] f32, 1 + w */
    ts_layer_w *layers;   /* n_layers */
    int has_mtp;
    ts_mtp_w mtp;
    uint64_t weight_bytes;  /* bytes of the bound matrices (what decode reads, experts counted whole) */
    void *packed_arena;     /* every matrix's repacked copy (cpu/pack.c), or NULL */
    uint64_t packed_bytes;
    ts_backend *dev_be;     /* the backend holding the f32 vectors and the arena when the host
                               cannot address its memory (CUDA), else NULL (host heap) */
    struct ts_tp *tp;       /* tensor parallelism (model/tp.h): the ranks this model is one of, or NULL */
    int tp_rank;            /* this model's rank (0: the one the engine and sessions see) */
    struct ts_xstream *xs;  /* routed experts streamed through the expert cache (model/xstream.h,
                               the engine's: --expert-cache), or NULL: all resident */
    /* derived sizes */
    int D, Kd, Vd, C, qdim, kvdim, max_ffn;
} ts_model;

/* Bind the tensors of `st` to the model described by `cfg`, checking each
 * one's presence, shape and dtype. Marks bound tensors used. */
int ts_model_bind(ts_model *m, const ts_config *cfg, ts_st_set *st, ts_backend *be, ts_error *err);
/* The same, with stream_experts = 1: the routed experts are bound as
 * descriptors only (the forward reads them through m->xs): they are not
 * prepared (packed) and their bytes in the files are never touched. */
int ts_model_bind_opts(ts_model *m, const ts_config *cfg, ts_st_set *st, ts_backend *be, int stream_experts, ts_error *err);
/* Every allocation the binder keeps, as it is made: a label, where, how
 * many bytes; backend 1: sized by the backend's layout (the packed copies),
 * not by the checkpoint alone. */
typedef void (*ts_bind_sink)(void *user, const char *what, ts_mem_cat cat, ts_mem_domain dom, int backend,
                             uint64_t bytes);
/* ts_model_bind as a dry run, for the memory plan: the same checks and the
 * same allocations, reported to sink, with no tensor data read and no
 * weights packed (the packed arena, sized by be, is reported, not made); frees what it
 * made and clears the set's used marks. *has_mtp (may be NULL): whether the
 * checkpoint carries the MTP head; *dropped (may be NULL): the file bytes of
 * the packed matrices, which the process lets go of once they are copied. */
int ts_model_size(const ts_config *cfg, ts_st_set *st, ts_backend *be, ts_bind_sink sink, void *user, int *has_mtp,
                  uint64_t *dropped, ts_error *err);
/* ts_model_size of ts_model_bind_opts. */
int ts_model_size_opts(const ts_config *cfg, ts_st_set *st, ts_backend *be, int stream_experts, ts_bind_sink sink, void *user,
                       int *has_mtp, uint64_t *dropped, ts_error *err);
/* The activation precision of every product (backend.h, ts_act_digits);
 * nonzero only when out of memory for the walk. */
int ts_model_set_act_digits(ts_model *m, int digits);
void ts_model_free(ts_model *m);

/* ---- per-session state ---- */

typedef struct ts_kv {
    float *k;   /* [n_ctx, nkv, D] post-norm, post-RoPE keys */
    float *v;   /* [n_ctx, nkv, D] */
} ts_kv;

/* Buffer 0 of each GDN state pair (buffer 1 is the tape's snapshot, when
 * there is a tape); which one is live is ts_state's parity (ts_gdn_live). */
typedef struct ts_gdn_state {
    float *conv;  /* [K-1, C]: the last K-1 pre-conv inputs, oldest first */
    float *S;     /* [Hv, dk, dv] recurrent state */
} ts_gdn_state;

/* Scratch for up to R rows at once. */
typedef struct ts_scratch {
    int R;
    float *x;       /* [R, H] residual stream */
    float *u;       /* [R, H] normed input of the current block */
    float *t;       /* [R, H] block output */
    float *big0;    /* [R, max(2*nq*D, C, 2*H)] */
    float *big1;    /* [R, F] */
    float *big2;    /* [R, max(F, nq*D)] */
    int F;          /* big1's row: max(Vd, nkv*D, ffn, MoE: topk*Im) (plan.c) */
    float *small;   /* [R, 2*Hv + E] */
    float *att;     /* [att_rows, nq, att_len] attention scores, a row per (row, query head) */
    int att_len;    /* its row length (n_ctx, or the MTP cache's rows) */
    int att_rows;   /* rows of a token-path pass scored at once */
    float *rowtmp;  /* [C] conv output of one GDN row */
    float *moe_acc; /* [2*H]: routed sum, then one expert's output */
    float *hidden;  /* [R, H] final-normed hidden states */
    float *logits;  /* [V] */
    /* chunked prefill (NULL when rows come one at a time) */
    float *pf_conv;  /* [max_rows, C] conv + SiLU outputs */
    float *pf_gate;  /* [2, max_rows, Hv] log-decay g, then beta */
    float *pf_chunk; /* [slots, ts_delta_chunk_ws] delta-rule workspace per work item, see cpu/gdn.c */
    /* expert streaming (model->xs), else NULL: a pass's routing, host memory */
    int32_t *route_ids; /* [R, topk] */
    float *route_w;     /* [R, topk] */
} ts_scratch;

/* Speculative verification, per GDN layer (NULL buffers for full layers and
 * when the session has no drafting): the tape of what each verified row's
 * state advance consumed, and the state at the start of the verify block.
 * Rollback is lazy (spec.c): it only records how many taped rows the state
 * keeps (ts_state.gdn_pend); the next pass over the layer starts from the
 * snapshot and advances those rows first. The snapshot and live buffers
 * trade places by parity (ts_state par_S, par_conv: one bit for all layers,
 * so a captured device graph stays valid across blocks); the pointers never
 * move, so each buffer is freed by its owner. */
typedef struct ts_gdn_tape {
    float *qkv;       /* [Rv, C] pre-conv qkv projections, one per verified row */
    float *a, *b;     /* [Rv, Hv] raw decay / beta projections */
    float *prep;      /* [2, Rv, C] the rows' prepared q|k|v (post conv, SiLU, norms):
                         two halves, the last verify's (ts_state.tape_half) and the
                         one the next verify writes while the first is still pending */
    float *snap_conv; /* [K-1, C] buffer 1 of the conv pair (the block-start snapshot while buffer 0 is live) */
    float *snap_S;    /* [Hv, dk, dv] buffer 1 of the recurrent pair */
} ts_gdn_tape;

/* A captured pass as the model keyed it (qwen35.c, pass_key): its kind and
 * rows, and what the graph baked in that the caller chooses (the logits
 * rows; the MTP head's hidden input and output, its head rows; the mode).
 * Passes of one kind and rows with other such arguments get another
 * variant of the key, so a key never replays someone else's pass. */
#define TS_GSIG_MAX 64
typedef struct ts_gsig {
    uint8_t kind, var;
    uint16_t rows;
    int head_rows, mode;
    const void *p[3];
} ts_gsig;

typedef struct ts_xbuf { void *p; size_t bytes; } ts_xbuf;

typedef struct ts_state {
    ts_stream *s;         /* the session's backend stream: every op goes through it */
    int n_ctx;
    ts_kv *kv;            /* n_layers entries (NULL buffers for GDN layers) */
    ts_gdn_state *gdn;    /* n_layers entries (NULL buffers for full layers) */
    size_t gdn_conv_n, gdn_S_n; /* floats of one GDN layer's conv and recurrent state (the plan's sizes) */
    ts_kv mtp_kv;         /* [n_ctx + draft slack] */
    int mtp_ctx;
    ts_scratch sc;
    ts_gdn_tape *tape;    /* n_layers entries, NULL without drafting */
    int tape_rows;        /* Rv: rows a verify block may have (M + 1) */
    int tape_on;          /* ts_forward records the GDN tape (verify only) */
    int ahead_on;         /* ts_forward is a run-ahead step (gen/generate.c): one row whose GDN
                             state goes into the other buffers of the pairs (TS_REC_SWAP), so that
                             flipping the parities back undoes it; its final hidden goes to
                             ahead_hid and its logits to the caller's row alone (not sc.hidden,
                             sc.logits, which keep the last kept step's), and the pass ends with
                             argmax_ahead into ticket ahead_k (inside its graph) */
    float *ahead_hid;
    int ahead_k;
    /* the id slot argmax_ahead returned for each ticket (a backend's slot of
     * a ticket is fixed), which the next step embeds: a replayed graph runs
     * no host code of its argmax, so the caller reads ticket ahead_k's slot
     * here (it was captured, so argmax_ahead ran for that ticket before;
     * session 32: a pointer kept from the last pass run on the host handed
     * a replayed step's successor the other ticket's slot) */
    const int32_t *ahead_slot[TS_AHEAD_TICKETS];
    /* Lazy rollback: when gdn_pend > 0, the GDN conv and recurrent state of
     * every GDN layer is NOT in gdn[L]: it is tape[L]'s snapshot advanced by
     * the first gdn_pend taped rows. The next ts_forward applies them in the
     * same per-head pass that advances its own rows (and clears gdn_pend);
     * anything else that reads the state calls ts_gdn_materialize first. */
    int gdn_pend;
    int tape_half;        /* the half of each tape's prep holding the last verify's rows */
    int par_S, par_conv;  /* live = buffer par of each GDN pair (0: ts_gdn_state, 1: the tape's) */
    float *gdn_rows;      /* [Rv, C] prepared rows of a GDN pass that is not a verify
                             (a decode row after a rollback); NULL without drafting */
    /* hidden-state taps (a drafter's, e.g. DFlash's; none for MTP): after
     * layer tap_layer[t] the forward copies the residual stream of the pass's
     * rows to columns [t*H, (t+1)*H) of tap_out [R, n_taps*H] (backend
     * memory): row i is the concatenation of its position's taps, the input
     * of DFlash's fc as it is */
    int n_taps;
    const int *tap_layer;
    float *tap_out;
    int defer_sync;       /* 1: ts_forward returns without waiting for the stream (its errors stay
                             sticky there for the caller's next sync: session.c's ts_session_step,
                             which queues the argmax behind the pass and waits once) */
    int logits_host;      /* ts_forward's logits rows are host memory on a backend whose memory the
                             host cannot address (ts_session_feed on CUDA): they are read back */
    float *dbg_layers;    /* tests: if set (host memory), ts_forward reads the residual
                             stream back after the embedding and after each layer, [L+1, n, H] */
    ts_gsig gsig[TS_GSIG_MAX]; /* the graph keys handed out (a control block, outside the plan) */
    int n_gsig;
    /* tensor parallelism (model/tp.h), else NULL / 0: the other ranks'
     * states of this session (rank 0's state only), the backend buffers in
     * allocation order (every rank's: ts_tp_xlate), and the rank's head rows
     * of a pass [R, head rows] */
    struct ts_state *tp_peer[TS_TP_MAX];
    ts_xbuf *xb;
    int n_xb, cap_xb;
    float *tp_logits;
} ts_state;

/* The live conv and recurrent buffers of GDN layer L (pointers only). */
static inline void ts_gdn_live(const ts_state *st, int L, float **conv, float **S) {
    *conv = st->par_conv ? st->tape[L].snap_conv : st->gdn[L].conv;
    *S = st->par_S ? st->tape[L].snap_S : st->gdn[L].S;
}

/* Run rows ids[0..n) (host ids) at positions pos..pos+n-1 through the main
 * model (n <= sc.R). Writes final-normed hidden states to sc.hidden[0..n),
 * and logits of every row to `logits` [n, V] if not NULL (backend memory,
 * or host memory on a backend the host can address); the last row's logits
 * always to sc.logits. `prefill` allows the faster, differently-rounded
 * prompt-chunk ops (TS_MODE_PREFILL). Returns the stream's first error. */
int ts_forward(const ts_model *m, ts_state *st, const int32_t *ids, int n, int pos, float *logits, int prefill);

/* MTP rows r = 0..n-1 (n <= sc.R): token toks[r] (host), main final-normed
 * hidden h[r] [H], position pos + r (its K/V land in mtp_kv[pos + r]). Writes the
 * MTP output hiddens (post mtp.norm) to h_out [n, H] (may alias h) and, if
 * not NULL, logits [n, V]; the last row's logits always to sc.logits.
 * draft 1: drafting precision (TS_MODE_DRAFT); 0: exact (ts_session_mtp).
 * head_rows > 0: only the logits of ids [0, head_rows) are computed (a
 * drafting vocabulary, gen params draft_vocab); the rest of sc.logits is
 * stale. 0: the whole vocabulary; < 0: no logits at all (filling the
 * head's cache over rows whose drafts are not wanted). Returns the
 * stream's first error. */
int ts_mtp_forward(const ts_model *m, ts_state *st, const int32_t *toks, const float *h, int n, int pos,
                   float *h_out, float *logits, int draft, int head_rows);

/* Apply a lazy rollback's pending rows (ts_state.gdn_pend) to every GDN
 * layer's conv and recurrent state, eagerly, and clear gdn_pend. Afterwards
 * the live buffers hold the state, bit-identical to an eager rollback. No-op
 * when nothing is pending. Call before reading or overwriting the GDN state
 * other than through ts_forward. */
void ts_gdn_materialize(const ts_model *m, ts_state *st);

#endif
