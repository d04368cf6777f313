/* plan.h: the memory plan: every buffer a session allocates, sized from the
 * config and the session parameters alone.
 *
 * Owns: the sizes (in elements, f32 today; bytes and domains are the public
 * plan's, plan.c) of every session buffer. session.c allocates
 * exactly these and nothing else, so `turbospark plan` (plan.c) and the
 * allocator's counters agree to the byte by construction; tests/test_plan.c
 * checks that they do.
 * Does not own: the allocation itself (session.c), the engine's heap
 * (predicted in plan.c next to this, from the same config).
 *
 * Invariant: with spec_draft == ngram_draft == dflash_block == 0 every
 * drafter field (MTP beyond the optional head cache, tape, snapshots, verify
 * logits) is 0; with ngram_draft alone the MTP fields are 0 too.
 */
#ifndef TS_PLAN_H
#define TS_PLAN_H

#include "backend.h" /* TS_DELTA_CHUNK, TS_DELTA_SLOTS */
#include "loader/config.h"
#include "model/dflash.h"

#define TS_MTP_SLACK 16  /* MTP rows beyond the context: the head may draft past the target */

typedef struct ts_sess_plan {
    ts_session_params p;  /* normalised: defaults filled in */
    int R;                /* scratch rows: max(max_rows, Rv) */
    int Rv;               /* verify rows (the longest block's drafts + 1), 0 without drafting */
    int mtp;              /* MTP head cache allocated */
    int mtp_ctx;          /* MTP cache rows */
    int att_len;          /* attention score buffer (n_ctx, or mtp_ctx) */
    int att_rows;         /* rows of a token-path pass whose scores it holds at once (Rv with drafting, else 1) */
    int n_full, n_gdn;
    /* sizes in floats */
    size_t kv_layer;      /* one K (or V) buffer of one full layer: n_ctx * nkv * D */
    size_t gdn_conv, gdn_S;
    size_t x, u, t, big0, big1, big2, small, att, rowtmp, moe_acc, hidden, logits, last_hidden;
    size_t pf_conv, pf_gate, pf_chunk; /* chunked prefill (0 when max_rows == 1) */
    size_t mtp_kv;        /* one of K / V of the MTP cache */
    size_t mtp_hid;       /* drafter: MTP input/output hiddens [R, H] */
    size_t tape_qkv, tape_ab, snap_conv, snap_S; /* drafter, per GDN layer (tape_ab: each of a, b) */
    size_t tape_prep;     /* drafter, per GDN layer: prepared rows, two halves [2, Rv, C] */
    size_t gdn_rows;      /* drafter: prepared GDN rows of a pass that is not a verify [Rv, C] */
    size_t vlogits, dprobs; /* drafter: verify logits [Rv, V], draft distributions [Mq, V] + a scratch row
                               (Mq: MTP's or DFlash's drafts; n-gram drafts keep none) */
    size_t ckpt;          /* checkpoint: n_gdn * (gdn_conv + gdn_S), 0 without */
    int ahead;            /* run-ahead decoding (p.ahead resolved: ts_ahead_resolve) */
    size_t pair_conv, pair_S; /* run-ahead without drafting, per GDN layer: the pairs' second buffers
                                 (a drafting session's snapshots serve instead: 0) */
    size_t ahead_rows;    /* run-ahead: two steps' logits and hidden [2, V + H] */
    /* DFlash (p.dflash_block > 0), else 0: the drafter's per-layer K/V cache
     * (each of K, V of one layer), the target's taps, its scratch */
    int df_layers, df_ctx;
    size_t df_kv, df_taps, df_feat, df_x, df_q, df_k, df_ffn, df_att;
    int64_t df_cols;      /* the drafter's widest product input (workspace) */
} ts_sess_plan;

/* Whether a session runs greedy decoding ahead: sp->ahead (1 on, -1 off,
 * 0 auto; auto is on for a device backend with the ops, TS_AHEAD=0/1
 * overriding it) on backend be, off with expert streaming (xs) or tensor
 * parallelism (tp), which wait on the host inside a pass, resolved in place
 * to 1 or -1 (never 0: a plan made again from a session's parameters,
 * device_room's, must not resolve auto a second time); an error where it is
 * asked for and cannot be. Session creation and the plan both call it
 * before ts_sess_plan_make_df. */
int ts_ahead_resolve(const ts_backend *be, int xs, int tp, ts_session_params *sp, ts_error *err);

/* The widest input (columns) of any matrix product the model runs. */
int64_t ts_plan_max_cols(const ts_config *c, int has_mtp);

/* The workspace a session's stream of `rows` rows reserves on backend be:
 * the backend's own answer (workspace_bytes), what stream_new allocates. */
size_t ts_plan_workspace(ts_backend *be, const ts_config *c, int has_mtp, int rows);

/* The widest product input of a session's stream (the target's, or the
 * DFlash drafter's when that is wider): what stream_new is asked for. */
int64_t ts_plan_stream_cols(const ts_config *c, int has_mtp, const ts_sess_plan *s);

/* Validate and normalise session parameters and size every buffer. */
int ts_sess_plan_make(const ts_config *c, int has_mtp, const ts_session_params *p, ts_sess_plan *out,
                      ts_error *err);
/* The same with the engine's DFlash drafter config (NULL: none, and
 * p->dflash_block > 0 is then an error). */
int ts_sess_plan_make_df(const ts_config *c, int has_mtp, const ts_dflash_cfg *dc, const ts_session_params *p,
                         ts_sess_plan *out, ts_error *err);

#endif
