#!/bin/bash
# session 23, device call 5: k_q4gm at 3 blocks an SM (TSC_Q4GM_MINB=3: a 2-slot ring, registers capped at 80 by the
# launch bounds, 24 warps an SM against 16; call 4's ncu: 6.95 cycles an issued instruction, latency-bound at 0.54
# IPC a scheduler), the same bits (the row-exact tests run under it). Prediction: the head at 4 rows 216 -> ~170 us
# if the latency is what limits it, worse if the cap's spills or the shallower ring cost more. Also k_q4gm's SASS for
# the next session (no disassembler on the build host). (~150 s)
PACK=.gpu/s23e/pack.tar.xz . bench/cuda/device_env.sh
TSC_Q4GM_MINB=3 timeout 120 $B/ts_test cuda.linear_parity_and_row_exact cuda.fused_products_dp4a > $O/kern_minb3.log 2>&1; tl "ts_test (minb 3) $?"
for r in a b; do
  TSC_Q4G=1 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_grp_$r.txt 2>&1; tl "cb grp $?"
  TSC_Q4G=1 TSC_Q4GM_MINB=3 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_grp_minb3_$r.txt 2>&1; tl "cb grp minb3 $?"
done
cuobjdump -sass $B/cuda_bench > /tmp/all.sass 2>$O/sass_err.log
awk '/Function : .*k_q4gmILi2ELi1ELi4ELi0ELi1E/{on=1} /Function :/{if (on && !/k_q4gmILi2ELi1ELi4ELi0ELi1E/) on=0} on' /tmp/all.sass > $O/k_q4gm_2_1_4_bf16.sass
(cd $O && wc -l k_q4gm_2_1_4_bf16.sass) >> $O/sass_err.log; xz -9 $O/*.sass; tl "sass $?"
device_end
