#!/bin/bash
# session 21, device call 2 (the build of 4aa95b4: gpu-next2 with the WY form opt-in, merged into main as is):
# (1) where a prompt pass's time goes: ncu's duration of every kernel of a 9B 2048-token prompt (row scan, and
# TSC_GDN_WY=1) and of a 35B-A3B-8L 512-token prompt, one kernel at a time with cold caches (an upper bound of
# each; their sum against the pass's own time says how much the chain adds); (2) issue 19's GPU table again
# (the held-out windows of bench/spec/dflash.sh: plain, MTP 1-4, DFlash 4/8/16) now that the drafter's block rows
# and a verify's rows attend in one launch pair.
PACK=.gpu/s21b/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv"
timeout 110 $NCU --launch-count 3000 $B/turbospark bench --backend cuda -m $S/9b --prompt 2048 --gen 1 --runs 1 > $O/ncu9_p2048_scan.csv 2>$O/ncu_err.log; tl "ncu9 scan $?"
TSC_GDN_WY=1 timeout 110 $NCU --launch-count 3000 $B/turbospark bench --backend cuda -m $S/9b --prompt 2048 --gen 1 --runs 1 > $O/ncu9_p2048_wy.csv 2>>$O/ncu_err.log; tl "ncu9 wy $?"
timeout 90 $NCU --launch-count 3000 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 1 --runs 1 > $O/ncu35_p512.csv 2>>$O/ncu_err.log; tl "ncu35 $?"
xz -9 $O/ncu*.csv
TS_BIN=$B/turbospark TS_RUN_ARGS="--backend cuda" TS_WINDOWS=8 TS_MODES="plain;mtp 1;mtp 2;mtp 3;mtp 4;dflash 4;dflash 8;dflash 16" \
  timeout 200 bash bench/spec/dflash.sh models/default 1 128 > $O/dflash_heldout_gpu.md 2>&1; tl "dflash heldout $?"
device_end
