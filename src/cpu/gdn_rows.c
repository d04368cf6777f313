/* gdn_rows.c: the GDN delta-rule step over several rows of one head
 * (kernels.h, "GDN: one head over several rows"): dispatch and the plain
 * form.
 *
 * Owns: ts_gdn_step_rows. Does not own: the one-row step ts_gdn_step and its
 * kernels (linear*.c), whose results this must reproduce bit for bit: the
 * dispatch condition below is ts_gdn_step's (linear.c), the plain
 * form simply calls ts_gdn_step per row, and the AVX-512 form
 * (gdn_rows_avx512.c) performs ts_avx512_gdn_step's operations per
 * element in the same order. tests/test_spec.c (spec.gdn_step_rows) checks
 * the equality against ts_gdn_step in every kernel mode the machine has, so
 * a change to the one-row kernel that is not mirrored here fails there.
 *
 * Why it exists: a lazy rollback's pending rows and a verify block advance
 * each head over several rows in a row (qwen35.c, gdn_heads). The one-row
 * kernel passes over the head's state twice per row (decay + prediction,
 * then update + output) and stores it both times; over several rows the
 * update pass of row t can also form row t+1's prediction, so each row
 * costs one pass and one store.
 */
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"

void ts_gdn_step_rows(float *S, const float *S_in, const float *const *k, const float *const *v,
                      const float *const *q, const float *decay, const float *beta, float *const *o, int n, int dk,
                      int dv) {
    if (n <= 0) {
        if (S_in != S) memcpy(S, S_in, sizeof(float) * (size_t)dk * dv);
        return;
    }
    if (ts_kmode() >= TS_KMODE_AVX512 && dv % 16 == 0) {
        ts_avx512_gdn_step_rows(S, S_in, k, v, q, decay, beta, o, n, dk, dv);
        return;
    }
    if (S_in != S) memcpy(S, S_in, sizeof(float) * (size_t)dk * dv);
    for (int t = 0; t < n; t++) ts_gdn_step(S, k[t], v[t], q[t], decay[t], beta[t], o ? o[t] : NULL, dk, dv);
}
