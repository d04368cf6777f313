#!/bin/bash
# session 15, device call 3: the exclusive host tier by exchange (a device victim takes the host slot
# of the miss that evicts it, through a device scratch slot per I/O thread) and the plan fixed for
# the byte runs: the engine group (host-tier identity exclusive and inclusive), then the 2- / 4-layer
# 397B-A17B cuts with device 55% + host 47-50% and the full 35B-A3B with device 25% + host the rest
PACK=.gpu/s15/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
G="--prompt 512 --gen 64 --runs 2"
for n in 2 4; do synth_shape x397_$n bench/experts/shape-397B-A17B-${n}layers.json; done
# host slot stride 7081984 (+ one alignment page)
bj x397_2_res X=1 $S/x397_2 $G
bj x397_4_res X=1 $S/x397_4 $G
bj x397_2_xc55_hx50 X=1 $S/x397_2 $G --expert-cache 3801M --expert-host-cache $((512*7081984+4096))
bj x397_4_xc55_hx47 X=1 $S/x397_4 $G --expert-cache 7601M --expert-host-cache $((963*7081984+4096))
bj x397_4_xc55_hx47_io8 TS_XC_IO=8 $S/x397_4 $G --expert-cache 7601M --expert-host-cache $((963*7081984+4096))
bj x397_4_xc55_hi47 TS_XC_EXCLUSIVE=0 $S/x397_4 $G --expert-cache 7601M --expert-host-cache $((963*7081984+4096))
bj x397_4_xc25_hx75 X=1 $S/x397_4 $G --expert-cache 3456M --expert-host-cache $((1536*7081984+4096))
timeout 60 $B/turbospark run --backend cuda -m $S/x397_4 --ids 1,2,3,4 -n 32 -v --expert-cache 7601M --expert-host-cache $((963*7081984+4096)) > $O/run_x397_4.txt 2>&1; tl "run x397_4 $?"
timeout 30 $B/turbospark plan --backend cuda -m $S/x397_4 --expert-cache 7601M --expert-host-cache $((963*7081984+4096)) > $O/plan_x397_4.txt 2>&1; tl "plan x397_4 $?"
rm -rf $S/x397_2 $S/x397_4
if [ $(( $(date +%s) - T0 )) -lt 300 ]; then
  synth_shape 35b shapes/qwen3.5-35B-A3B.json
  # 41 map layers x 256 experts (host stride 1773568): 25% = 2624 device slots, the other 7872 in host
  bj 35b_xc25_hx TS_XC_IO=8 $S/35b $G --expert-cache 4428M --expert-host-cache $((7872*1773568+4096))
fi
device_end
