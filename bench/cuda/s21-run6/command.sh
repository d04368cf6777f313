#!/bin/bash
# session 21, device call 6 (the last 334 s of device time): the WY prep's pair products in 4 x 4 register
# tiles and its substitution in registers (from call 4's ncu: the prep was bound by shared-memory bandwidth,
# 358 us a 9B layer of 2048 rows; prediction ~60-100 us, 9B pp2048 23.7K -> ~26K, 35B-A3B-8L pp512 50.8K ->
# ~54K); the tests first (the kernel changed), then the A/B against the row scan (TSC_GDN_WY=0), then ncu.
PACK=.gpu/s21f/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 100 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for v in "wy X=1" "scan TSC_GDN_WY=0"; do
  set -- $v; n=$1; shift
  bj 9b_p512_${n} "$*" $S/9b --prompt 512 --gen 16 --runs 2
  bj 9b_p2048_${n} "$*" $S/9b --prompt 2048 --gen 16 --runs 2
  bj 35b8_p512_${n} "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
  bj 35b8_p2048_${n} "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
done
timeout 40 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 3000 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 1 --runs 1 > $O/ncu35_p512_wy.csv 2>$O/ncu_err.log; tl "ncu35 $?"
xz -9 $O/ncu*.csv
device_end
