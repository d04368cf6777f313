/* kernels_gdn.h: ISA forms behind ts_gdn_step_rows (kernels.h); internal to
 * kernels_gdn.c and kernels_gdn_avx512.c. */
#ifndef TS_KERNELS_GDN_H
#define TS_KERNELS_GDN_H

/* dv % 16 == 0; the arguments of ts_gdn_step_rows, n >= 1. */
void ts_avx512_gdn_step_rows(float *S, const float *S_in, const float *const *k, const float *const *v,
                             const float *const *q, const float *decay, const float *beta, float *const *o, int n,
                             int dk, int dv);

#endif
