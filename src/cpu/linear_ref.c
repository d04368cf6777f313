/* linear_ref.c: the reference matrix products and weight accessors.
 *
 * Plain loops, f32 accumulation in column order: the oracle that every fast
 * kernel (SIMD, threaded, quantized) is compared against. Quantized weights
 * follow the MLX convention: value j of a row sits in u32 word j*bits/32 at
 * bit offset (j*bits)%32, and w = scale * q + bias per group of `group` cols.
 */
#include <math.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"

static inline float sget(ts_dtype t, const void *p, int64_t i) {
    switch (t) {
    case TS_DTYPE_F32: return ((const float *)p)[i];
    case TS_DTYPE_F16: return ts_f16_to_f32(((const uint16_t *)p)[i]);
    case TS_DTYPE_BF16: return ts_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.f;
    }
}

float ts_weight_get(const ts_weight *w, int64_t r, int64_t c) {
    if (w->dtype != TS_DTYPE_U32) return sget(w->dtype, w->data, r * w->cols + c);
    int64_t per_word = 32 / w->bits;
    const uint32_t *row = (const uint32_t *)w->data + r * (w->cols / per_word);
    uint32_t q = (row[c / per_word] >> ((c % per_word) * w->bits)) & ((1u << w->bits) - 1);
    int64_t gi = r * (w->cols / w->group) + c / w->group;
    return sget(w->sdtype, w->scales, gi) * (float)q + sget(w->sdtype, w->biases, gi);
}

void ts_weight_row(const ts_weight *w, int64_t r, float *out) {
    if (w->dtype == TS_DTYPE_BF16) {
        const uint16_t *p = (const uint16_t *)w->data + r * w->cols;
        for (int64_t c = 0; c < w->cols; c++) out[c] = ts_bf16_to_f32(p[c]);
        return;
    }
    if (w->dtype == TS_DTYPE_U32 && w->group > 0 && 32 % w->bits == 0 && w->cols % w->group == 0) {
        /* ts_weight_get's arithmetic (scale * q + bias, the same operations
         * per element, so the same bits) with the group's scale and bias
         * read once: the embedding gather of a prompt chunk runs this per row */
        const int bits = w->bits, per_word = 32 / bits;
        const uint32_t mask = (1u << bits) - 1;
        const uint32_t *row = (const uint32_t *)w->data + r * (w->cols / per_word);
        const int64_t ng = w->cols / w->group;
        for (int64_t g = 0; g < ng; g++) {
            const float s = sget(w->sdtype, w->scales, r * ng + g), b = sget(w->sdtype, w->biases, r * ng + g);
            for (int64_t c = g * w->group; c < (g + 1) * w->group; c++)
                out[c] = s * (float)((row[c / per_word] >> ((c % per_word) * bits)) & mask) + b;
        }
        return;
    }
    for (int64_t c = 0; c < w->cols; c++) out[c] = ts_weight_get(w, r, c);
}

void ts_weight_part_bytes(const ts_weight *w, size_t *data, size_t *scales) {
    if (w->dtype != TS_DTYPE_U32) {
        *data = (size_t)(w->rows * w->cols) * ts_dtype_size(w->dtype);
        *scales = 0;
        return;
    }
    *data = (size_t)(w->rows * w->cols) * (size_t)w->bits / 8;
    *scales = (size_t)(w->rows * (w->cols / (w->group ? w->group : 1))) * ts_dtype_size(w->sdtype);
}

size_t ts_weight_bytes(const ts_weight *w) {
    size_t q, s;
    ts_weight_part_bytes(w, &q, &s);
    return q + 2 * s;
}

void ts_linear_ref(const ts_weight *w, const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (int64_t)i * w->cols;
        float *yi = y + (int64_t)i * w->rows;
        for (int64_t r = 0; r < w->rows; r++) {
            float acc = 0.f;
            if (w->dtype == TS_DTYPE_BF16) {
                const uint16_t *p = (const uint16_t *)w->data + r * w->cols;
                for (int64_t c = 0; c < w->cols; c++) acc += ts_bf16_to_f32(p[c]) * xi[c];
            } else if (w->dtype == TS_DTYPE_F32) {
                const float *p = (const float *)w->data + r * w->cols;
                for (int64_t c = 0; c < w->cols; c++) acc += p[c] * xi[c];
            } else {
                for (int64_t c = 0; c < w->cols; c++) acc += ts_weight_get(w, r, c) * xi[c];
            }
            yi[r] = acc;
        }
    }
}

void ts_gdn_step_ref(float *S, const float *k, const float *v, const float *q, float decay, float beta, float *o,
                     int dk, int dv) {
    /* decay, then predict p = S^T k with the decayed state */
    float p[dv > 0 ? dv : 1];
    for (int j = 0; j < dv; j++) p[j] = 0.f;
    for (int i = 0; i < dk; i++) {
        float *Si = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) {
            Si[j] *= decay;
            p[j] += Si[j] * k[i];
        }
    }
    /* delta = beta (v - p); S += k delta^T; read o = S^T q after the update */
    for (int j = 0; j < dv; j++) p[j] = beta * (v[j] - p[j]);
    if (o) for (int j = 0; j < dv; j++) o[j] = 0.f;
    for (int i = 0; i < dk; i++) {
        float *Si = S + (size_t)i * dv;
        for (int j = 0; j < dv; j++) {
            Si[j] += k[i] * p[j];
            if (o) o[j] += Si[j] * q[i];
        }
    }
}

/* The reference attention's softmax step: att[t] = e^(att[t] - mx) in t
 * order, returns 1 / their sum (summed in double). (The AVX-512 kernels use
 * their own with a vector exponential: linear_avx512.c.) */
static float softmax_exp(float *att, int T, float mx) {
    double sum = 0;
    for (int t = 0; t < T; t++) {
        att[t] = expf(att[t] - mx);
        sum += att[t];
    }
    return (float)(1.0 / sum);
}

void ts_attn_row_ref(const float *q, const float *K, const float *V, int64_t stride, int T, int D, float scale,
                     float *att, float *o) {
    float mx = -INFINITY;
    for (int t = 0; t < T; t++) {
        const float *k = K + (int64_t)t * stride;
        float s = 0.f;
        for (int d = 0; d < D; d++) s += q[d] * k[d];
        s *= scale;
        att[t] = s;
        if (s > mx) mx = s;
    }
    float inv = softmax_exp(att, T, mx);
    for (int d = 0; d < D; d++) o[d] = 0.f;
    for (int t = 0; t < T; t++) {
        const float *v = V + (int64_t)t * stride;
        float p = att[t] * inv;
        for (int d = 0; d < D; d++) o[d] += p * v[d];
    }
}
