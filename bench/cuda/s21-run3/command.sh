#!/bin/bash
# session 21, device call 3 (build of 26ccbff): the prompt passes' changes from s21-run2's ncu durations:
# the chunk MoE's routes in one launch, a chunk's attention prep in one launch (both the same bits), the WY
# GDN's kernels rewritten (register-tiled scan, the prep's right sides before its substitution). Predictions:
# WY scan ~5 us a 64-row chunk (1,235 -> ~170 us a 9B layer of 2048 rows), prep 593 -> ~100 us; with WY 9B
# pp2048 20.3K -> ~27K, pp512 17.4K -> ~21K; 35B-A3B-8L pp512 42K -> ~48K (routes -1.8 ms of 12.2, WY -1.5).
# s21-run1's figures (the row scan, before these changes) are the reference: 9B 17,430/17,388 and 20,324/20,328,
# 35B-A3B-8L 41,692/42,475 and 60,265/59,286. Then issue 19's GPU table (lost in s21-run2: tools/train/heldout.ids
# was slimmed out; restored for this call).
PACK=.gpu/s21c/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 90 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_prefill_vs_step > $O/memcheck_wy.log 2>&1; tl "memcheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  for v in "scan X=1" "wy TSC_GDN_WY=1"; do
    set -- $v; n=$1; shift
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
  done
done
bj 9b_p8192_scan X=1 $S/9b --prompt 8192 --gen 16 --runs 1
bj 9b_p8192_wy TSC_GDN_WY=1 $S/9b --prompt 8192 --gen 16 --runs 1
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv"
TSC_GDN_WY=1 timeout 100 $NCU --launch-count 3000 $B/turbospark bench --backend cuda -m $S/9b --prompt 2048 --gen 1 --runs 1 > $O/ncu9_p2048_wy.csv 2>$O/ncu_err.log; tl "ncu9 wy $?"
TSC_GDN_WY=1 timeout 80 $NCU --launch-count 3000 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 1 --runs 1 > $O/ncu35_p512_wy.csv 2>>$O/ncu_err.log; tl "ncu35 wy $?"
xz -9 $O/ncu*.csv
TS_BIN=$B/turbospark TS_RUN_ARGS="--backend cuda" TS_WINDOWS=8 TS_MODES="plain;mtp 1;mtp 2;mtp 3;mtp 4;dflash 4;dflash 8;dflash 16" \
  timeout 150 bash bench/spec/dflash.sh models/default 1 128 > $O/dflash_heldout_gpu.md 2>&1; tl "dflash heldout $?"
device_end
