#!/bin/bash
# session 15, device call 2: expert slots filled by byte runs (one copy an expert on these installs,
# slot_copy) and the exclusive host tier (device victims copied back into it): the host-tier tests
# (exclusive and inclusive), the engine group, then 8-layer / full 35B-A3B and 2- / 4-layer 397B-A17B
# cuts against session 15 call 1 (bench/cuda/s15-run1, same shapes and flags)
PACK=.gpu/s15/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda_engine.expert_host_tier_identical_to_resident cuda_engine.expert_cache_identical_to_resident \
  cuda_engine.expert_cache_errors > $O/xs_tests.log 2>&1; tl "xs tests rc $?"
timeout 150 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
G="--prompt 512 --gen 64 --runs 2"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_res X=1 $S/35b8 $G
bj 35b8_xc25_h100 X=1 $S/35b8 $G --expert-cache 972M --expert-host-cache 4G
rm -rf $S/35b8
for n in 2 4; do synth_shape x397_$n bench/experts/shape-397B-A17B-${n}layers.json; done
# 6.75 MiB experts: host slot stride 7081984 (+ one alignment page); the full 397B on this machine would
# have ~57% of its experts in device slots and ~46% in host memory: 55% / 47% here
bj x397_2_res X=1 $S/x397_2 $G
bj x397_4_res X=1 $S/x397_4 $G
bj x397_2_xc55_hx47 X=1 $S/x397_2 $G --expert-cache 3801M --expert-host-cache $((482*7081984+4096))
bj x397_4_xc55_hx47 X=1 $S/x397_4 $G --expert-cache 7601M --expert-host-cache $((963*7081984+4096))
bj x397_4_xc55_hx47_io8 TS_XC_IO=8 $S/x397_4 $G --expert-cache 7601M --expert-host-cache $((963*7081984+4096))
bj x397_4_xc55_hi47 TS_XC_EXCLUSIVE=0 $S/x397_4 $G --expert-cache 7601M --expert-host-cache $((963*7081984+4096))
bj x397_4_xc55_h100 X=1 $S/x397_4 $G --expert-cache 7601M --expert-host-cache 14G
timeout 60 $B/turbospark run --backend cuda -m $S/x397_4 --ids 1,2,3,4 -n 32 -v --expert-cache 7601M --expert-host-cache $((963*7081984+4096)) > $O/run_x397_4.txt 2>&1; tl "run x397_4 $?"
rm -rf $S/x397_2 $S/x397_4
if [ $(( $(date +%s) - T0 )) -lt 330 ]; then
  synth_shape 35b shapes/qwen3.5-35B-A3B.json
  bj 35b_res X=1 $S/35b $G
  # 41 map layers x 256 experts of 1.6875 MiB (host stride 1773568): 25% = 2624 device slots
  bj 35b_xc25_h100 TS_XC_IO=8 $S/35b $G --expert-cache 4428M --expert-host-cache 18G
  bj 35b_xc25_hx TS_XC_IO=8 $S/35b $G --expert-cache 4428M --expert-host-cache $((7880*1773568+4096))
fi
device_end
