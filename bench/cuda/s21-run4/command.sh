#!/bin/bash
# session 21, device call 4 (build of 03c5659): (1) the MoE decode's shared expert gate/up first with the pending
# norm staged and the bf16 gate row in the router's launch (2 kernels fewer an MoE layer; prediction 35B-A3B-8L
# decode 1,520-1,566 -> ~1,650 tok/s; no switch: s21-run1/3's figures are the reference); (2) the WY prep in
# place (two blocks an SM) and the WY loads unrolled (prediction: prep 593 -> ~250 us, scan 577 -> ~450 us a 9B
# layer of 2048 rows); (3) the engine tests with the WY form on (TSC_GDN_WY=1), to make it the default.
PACK=.gpu/s21d/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
TSC_GDN_WY=1 timeout 200 $B/ts_test cuda_engine > $O/eng_wy.log 2>&1; tl "ts_test cuda_engine WY $?"
timeout 90 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_prefill_vs_step > $O/memcheck_wy.log 2>&1; tl "memcheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  bj 35b8_dec_$r X=1 $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 9b_dec_$r X=1 $S/9b --prompt 512 --gen 128 --runs 2
  for v in "scan X=1" "wy TSC_GDN_WY=1"; do
    set -- $v; n=$1; shift
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
  done
done
bj 35b8_mtp3 X=1 $S/35b8 --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv"
TSC_GDN_WY=1 timeout 100 $NCU --launch-count 3000 $B/turbospark bench --backend cuda -m $S/9b --prompt 2048 --gen 1 --runs 1 > $O/ncu9_p2048_wy.csv 2>$O/ncu_err.log; tl "ncu9 wy $?"
timeout 60 $NCU --launch-count 500 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 1 --gen 3 --runs 1 > $O/ncu35_dec.csv 2>>$O/ncu_err.log; tl "ncu35 dec $?"
xz -9 $O/ncu*.csv
device_end
