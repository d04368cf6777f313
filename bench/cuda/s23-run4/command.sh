#!/bin/bash
# session 23, device call 4: k_q4gm's instructions cut (call 3's ncu: DRAM 36%, ~1.45 M warp instructions an SM for the
# head at 4 rows, as many as k_q4dp_as's): each thread's copies from sources set once a virtual block (no per-copy row
# clamps, 64-bit products or divisions), the scales' type a template (a scale: its word, a shift, a conversion), the
# fragments' and scale words' offsets precomputed per warp slot. Prediction: the head at 4 rows 330 -> ~170-190 us,
# the products at 4 rows ~1.15-1.25x one row (1.92x in call 3), the 4-row step ~1.25-1.3x. Tests first, then the A/B.
# (~300 s)
PACK=.gpu/s23d/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
TSC_Q4G=1 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_grp.txt 2>&1; tl "cb 9b grp $?"
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cb 9b $?"
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_dec_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 128 --runs 2
bj 9b_dec_c "X=1" $S/9b --prompt 512 --gen 128 --runs 2
for d in 3 7; do
  acc=$([ $d = 3 ] && echo 0.8,0.6,0.5 || echo 0.95,0.9,0.85,0.8,0.7,0.6,0.5)
  bj 9b_acc${d}_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
  bj 9b_acc${d}_c "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft $d --accept $acc
done
NCU="ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats --csv"
TSC_Q4G=1 timeout 60 $NCU --kernel-name regex:'k_q4gm' --launch-count 14 $B/cuda_bench --shape 9b --mlx --digits 1 --prof --prof-rows 4 > $O/ncu_grp4.csv 2>$O/ncu_err.log; tl "ncu grp $?"
xz -9 $O/ncu_*.csv
TSC_Q4G=1 timeout 150 $B/ts_test cuda_engine > $O/eng_grp.log 2>&1; tl "ts_test cuda_engine (grp) $?"
device_end
