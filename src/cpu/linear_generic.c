/* linear_generic.c: portable C row kernels (any dtype, any group size).
 *
 * Each weight row is dequantized to f32 once into wbuf, exactly as the
 * reference does (scale * q + bias in f32), and dotted with every x row in
 * column order: the same numbers as linear_ref.c, bit for bit, whatever the
 * row split. This is the fallback for shapes the SIMD kernels do not take
 * (f16 weights, groups that are not a multiple of 64) and for CPUs without
 * AVX-512.
 */
#include "cpu/cpu.h"

void ts_generic_rows(const ts_weight *w, const float *x, int n, float *y, int64_t r0, int64_t r1, float *wbuf) {
    const int64_t cols = w->cols;
    for (int64_t r = r0; r < r1; r++) {
        ts_weight_row(w, r, wbuf);
        for (int i = 0; i < n; i++) {
            const float *xi = x + (int64_t)i * cols;
            float acc = 0.f;
            for (int64_t c = 0; c < cols; c++) acc += wbuf[c] * xi[c];
            y[(int64_t)i * w->rows + r] = acc;
        }
    }
}
