/* quant.h: the quantized weight format (MLX affine convention) and the
 * producers of quantized installs (convert.c, synth.c).
 *
 * Format, per [rows, cols] matrix, per group of `group` consecutive columns:
 *   w ~= scale * q + bias,  q in [0, 2^bits), scale and bias in the source's
 *   float dtype (bf16 for released checkpoints).
 *   q of column j of a row sits in u32 word j*bits/32 of that row, at bit
 *   offset (j*bits) % 32 (so for 4 bits, byte b of a row holds columns 2b in
 *   its low nibble and 2b+1 in its high nibble).
 *   Tensors: X.weight U32 [rows, cols*bits/32], X.scales and X.biases
 *   [rows, cols/group]; config.json carries "quantization": {group_size, bits}.
 *
 * The quantizer: scale = (max - min) / (2^bits - 1) and bias = min, both
 * rounded to the storage dtype first, then q = round((w - bias) / scale)
 * clamped, so the stored triple is self-consistent. (MLX's own quantizer
 * differs in rounding details; the layout is the same, which is what loading
 * MLX checkpoints needs.)
 */
#ifndef TS_QUANT_H
#define TS_QUANT_H

#include "loader/config.h"

/* Quantize one row of cols f32 values. q: cols*bits/32 words; scales and
 * biases: cols/group values of sdtype (F32, F16 or BF16). */
void ts_quant_row(const float *w, int64_t cols, int bits, int group, ts_dtype sdtype, uint32_t *q, void *scales,
                  void *biases);
/* The inverse: cols f32 values, exactly scale*q + bias in f32 as the
 * reference kernel computes them. */
void ts_dequant_row(const uint32_t *q, const void *scales, const void *biases, int64_t cols, int bits, int group,
                    ts_dtype sdtype, float *out);

/* Scalar <-> storage dtype helpers. */
float ts_quant_sget(ts_dtype t, const void *p, int64_t i);
void ts_quant_sset(ts_dtype t, void *p, int64_t i, float v);

/* ---- install writing shared by convert.c and synth.c ---- */
/* Create "<dst>.partial-<pid>" next to dst (dst must not exist); *tmp gets its path. */
int ts_install_begin(const char *dst, char *tmp, size_t cap, ts_error *err);
/* Rename tmp to dst. */
int ts_install_commit(const char *tmp, const char *dst, ts_error *err);
/* Remove tmp and everything in it (after a failure). */
void ts_install_abort(const char *tmp);
/* Write dst_dir/config.json: src_json with "quantization" (and MLX's
 * duplicate "quantization_config") set to {group_size, bits}; bits 0 = none. */
int ts_write_config_quant(const char *src_json, const char *dst_dir, int bits, int group, ts_error *err);
/* The tensors ts_synth writes for a shape at bits 4, 8 or 16 (bf16) and
 * group (0: 64), in write order with nbytes, shards and offsets assigned
 * (ts_stw_plan), and the config its install's config.json parses to
 * (the shape with the quantization). *t is the caller's (ts_free). */
struct ts_stw_tensor;
int ts_synth_plan(const char *shape_path, int bits, int group, ts_config *cfg, struct ts_stw_tensor **t, int *n,
                  int *n_shards, ts_error *err);
/* A progress bar on stderr: "label [#####     ]  45%  123 / 456 MB". */
void ts_install_progress(const char *label, size_t done, size_t total);

#endif
