/* dflash.h: the DFlash block drafter (z-lab's DFlash, "Block Diffusion for
 * Flash Speculative Decoding", arXiv 2602.06036; issue 19): its config,
 * weights, per-session state and its two passes.
 *
 * Owns: the drafter's config (its config.json as released: a Qwen3-style
 * "DFlashDraftModel" with dflash_config.{mask_token_id, target_layer_ids}),
 * the binding of its safetensors (fc, hidden_norm, norm, layers.N.*) with
 * the checks against the target, and its forward as backend ops.
 * Does not own: drafting policy (gen/dflash_draft.c), the taps (the target's
 * forward copies them: qwen35.c), the buffers (session.c, sized by plan.c).
 *
 * The architecture. A few Qwen3 decoder layers at the target's width, no
 * embedding or head of their own (the target's are used). The target's
 * residual stream after each tapped layer (hidden_states[l + 1] in
 * transformers' numbering) is concatenated per position, [n_taps * H],
 * projected by fc to H and RMS-normed (hidden_norm): the context feature.
 * Each draft layer projects it with its own k_proj / v_proj (k_norm, RoPE at
 * the context position) into its KV cache; those context rows are all the
 * drafter keeps between blocks. A block is [the last emitted token, mask x
 * (B-1)] at positions pos..pos+B-1, embedded with the target's table (the
 * mask token is dflash_config.mask_token_id); its queries, keys and values
 * come from the block's own hidden states, and every block row attends to
 * the whole context and the whole block (no causal mask: TS_MASK_BLOCK).
 * After the layers, norm and the target's head: block row i (i >= 1) is the
 * draft of the token at position pos + i. The block's K/V rows land past
 * the context in the cache and are overwritten by the next context rows.
 *
 * Norms are Qwen3's (x * w, w stored as is), not Qwen3.5's (1 + w); the
 * attention has no output gate; RoPE is rotate-half over
 * partial_rotary_factor * head_dim dims with the drafter's rope_theta.
 */
#ifndef TS_DFLASH_H
#define TS_DFLASH_H

#include "model/model.h"

#define TS_DFLASH_MAX_TAPS 16
#define TS_DFLASH_MAX_LAYERS 64

typedef struct ts_dflash_cfg {
    int H, n_layers, nq, nkv, D, I, vocab;
    int rot;                /* rotary dims */
    double theta;
    float eps;
    int block;              /* block_size it was trained for */
    int mask_id;            /* the mask token (an id of the target's vocabulary) */
    int n_taps;
    int taps[TS_DFLASH_MAX_TAPS]; /* target layers read (0-based; the output of layer taps[t]) */
    int n_target_layers;
    int q_bits, q_group;    /* a quantized install (MLX layout), 0 = none */
} ts_dflash_cfg;

typedef struct ts_dflash_layer {
    float *in_norm, *post_norm;  /* [H] f32, w */
    ts_weight q_proj;            /* [nq*D, H] */
    ts_weight k_proj, v_proj;    /* [nkv*D, H] */
    ts_weight o_proj;            /* [H, nq*D] */
    float *q_norm, *k_norm;      /* [D] f32, w */
    ts_weight gate, up, down;    /* [I, H], [I, H], [H, I] */
} ts_dflash_layer;

typedef struct ts_dflash {
    ts_dflash_cfg cfg;
    char *dir;
    ts_st_set *st;
    ts_weight fc;                /* [H, n_taps*H]: column block t acts on tap t */
    float *hidden_norm;          /* [H] f32, w */
    float *norm;                 /* [H] f32, w */
    ts_dflash_layer *layers;     /* n_layers */
    void *packed_arena;          /* the matrices' backend-prepared copies, or NULL */
    uint64_t packed_bytes, weight_bytes;
    ts_backend *dev_be;          /* a backend the host cannot address (CUDA): its memory holds the
                                    f32 vectors and the arena (as load.c does for the target); NULL: host */
} ts_dflash;

/* Parse dir/config.json and check it against the target (hidden size,
 * vocabulary, tapped layers): errors name the file and the field. target
 * NULL: the drafter alone (convert). */
int ts_dflash_config_load(const char *dir, const ts_config *target, ts_dflash_cfg *c, ts_error *err);
/* The same over config text in memory; what names it in errors (the fuzz harness). */
int ts_dflash_config_parse(const char *txt, const char *what, const ts_config *target, ts_dflash_cfg *c, ts_error *err);
/* Where the drafter of the checkpoint in dir lives, into out: drafter_dir
 * when given (a released drafter is its own repository: z-lab's
 * Qwen3-8B-DFlash-b16 beside Qwen/Qwen3-8B), else dir/dflash (the bundled
 * default model carries its trained one there). */
void ts_dflash_dir(const char *dir, const char *drafter_dir, char *out, size_t cap);
/* 1 when dir/config.json declares a DFlashDraftModel. */
int ts_dflash_is_dir(const char *dir);
/* Open and bind the drafter of dir for the target (NULL: unchecked; its
 * weights prepared by be, NULL: not prepared). dry: the memory plan's run: the same checks and allocations reported
 * to sink, nothing read, freed again before returning (*out stays NULL). */
int ts_dflash_open(const char *dir, const ts_config *target, ts_backend *be, int dry, ts_bind_sink sink, void *user,
                   ts_dflash **out, ts_error *err);
void ts_dflash_free(ts_dflash *d);
int ts_dflash_set_act_digits(ts_dflash *d, int digits);
/* The widest input of its products (the stream's workspace). */
int64_t ts_dflash_max_cols(const ts_dflash_cfg *c);

/* Per-session state (session.c allocates it from the plan). */
typedef struct ts_dflash_state {
    int B;                  /* block rows the buffers hold */
    int ctx;                /* rows of each layer's cache (n_ctx + TS_DFLASH_MAX_BLOCK) */
    int R;                  /* context rows of one pass at most (the target's scratch rows) */
    ts_kv *kv;              /* n_layers: K/V [ctx, nkv*D] (post-norm, post-RoPE keys) */
    float *feat;            /* [R, H] context features */
    float *x, *u, *t;       /* [B, H] */
    float *q, *o;           /* [B, nq*D] */
    float *k, *v;           /* [R, nkv*D] */
    float *g, *up;          /* [B, I] */
    float *att;             /* [nq, ctx] scores */
    /* the block passes captured as graphs (a backend with the hooks),
     * one per shape: rows, mode, head rows, logits planes (dflash.c) */
    struct { const float *logits; int n, head_rows, mode; } gsig[16];
    int n_gsig;
} ts_dflash_state;

/* Context rows: taps [n, n_taps*H] (the target's tap buffer, rows of
 * positions pos..pos+n-1, n <= R) -> features -> every layer's K/V at those
 * positions. */
int ts_dflash_context(const ts_dflash *d, ts_dflash_state *ds, ts_stream *s, const float *taps, int n, int pos,
                      ts_mode md);
/* The block ids[0..n) (n <= B) at positions pos..: one pass through the
 * draft layers; logits of block rows 1..n-1 into logits [n-1, V] (head rows
 * [0, head_rows) computed when 0 < head_rows < V). The embedding and head
 * are the target m's. */
int ts_dflash_block(const ts_dflash *d, ts_dflash_state *ds, const ts_model *m, ts_stream *s, const int32_t *ids,
                    int n, int pos, float *logits, int head_rows, ts_mode md);

#endif
