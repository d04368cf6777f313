/* kernels.h: the compute contract the model code calls.
 *
 * Model code (src/model/) sees only this header, never src/cpu/ directly.
 * Weights are described by ts_weight: a logical [rows, cols] matrix (out x in,
 * as PyTorch's nn.Linear stores it) in F32, F16 or BF16, or quantized in the
 * MLX convention (U32-packed values, per-group scales and biases along cols).
 * Activations are f32.
 *
 * The one rule every implementation keeps: ts_linear computes each output row
 * exactly as a one-row call would (same reduction order, bit for bit), for any
 * n. Speculative verification runs M+1 rows through ts_linear and must
 * reproduce one-token decode exactly. ts_linear_prefill may round differently
 * (it is used for prompt chunks only).
 */
#ifndef TS_KERNELS_H
#define TS_KERNELS_H

#include "ts_int.h"

typedef struct ts_weight {
    ts_dtype dtype;       /* F32, F16, BF16; U32 = packed quantized */
    int bits, group;      /* quantized: 4 or 8 bits; group size along cols */
    int64_t rows, cols;   /* logical shape [rows (out), cols (in)] */
    const void *data;     /* [rows, cols] elements, or [rows, cols*bits/32] u32 */
    const void *scales;   /* quantized: [rows, cols/group] of sdtype */
    const void *biases;   /* quantized: [rows, cols/group] of sdtype */
    ts_dtype sdtype;      /* F32, F16 or BF16 */
} ts_weight;

/* y[n, rows] = x[n, cols] . W^T  (row-exact: see above) */
void ts_linear(const ts_weight *w, const float *x, float *y, int n);
/* Same product; may use faster, differently-rounded kernels. */
void ts_linear_prefill(const ts_weight *w, const float *x, float *y, int n);
/* The plain reference every fast kernel is tested against. */
void ts_linear_ref(const ts_weight *w, const float *x, float *y, int n);
/* Row r of W as f32 (embedding gather). */
void ts_weight_row(const ts_weight *w, int64_t r, float *out);
/* Bytes the weight occupies (data + scales + biases). */
size_t ts_weight_bytes(const ts_weight *w);
/* Element (r, c) as f32 (slow; tests and tools). */
float ts_weight_get(const ts_weight *w, int64_t r, int64_t c);

/* Thread count for kernels (0 = all cores). Safe to call before any kernel. */
void ts_kernels_set_threads(int n);

#endif
