#!/bin/bash
# session 15, device call 1 (prepared in session 14 as s14-run2): expert streaming with the pinned host tier (--expert-host-cache): its
# tests, then the 8-layer 35B-A3B cut, 2- and 4-layer cuts of the 397B-A17B shape (no MTP layer) and
# the whole 35B-A3B shape: resident against device caches of 25% / 55% of the experts over a host
# tier of all (or half) of them, and over the disk alone (O_DIRECT)
PACK=.gpu/s15/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda_engine.expert_host_tier_identical_to_resident cuda_engine.expert_cache_identical_to_resident \
  cuda_engine.expert_cache_errors cuda_engine.plan_equals_device_allocations_and_close_returns_all > $O/xs_tests.log 2>&1; tl "xs tests rc $?"
timeout 150 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
G="--prompt 512 --gen 64 --runs 2"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_xc25_h100 X=1 $S/35b8 $G --expert-cache 972M --expert-host-cache 4G
bj 35b8_xc25_h100_io8 TS_XC_IO=8 $S/35b8 $G --expert-cache 972M --expert-host-cache 4G
rm -rf $S/35b8
df -h /tmp > $O/df.txt; free -g >> $O/df.txt
for n in 2 4; do synth_shape x397_$n bench/experts/shape-397B-A17B-${n}layers.json; done
du -sh $S/* >> $O/df.txt
bj x397_2_res X=1 $S/x397_2 $G
bj x397_4_res X=1 $S/x397_4 $G
# 2 layers: 1024 experts of 6.75 MiB; 55% = 563 slots
bj x397_2_xc55_h100 X=1 $S/x397_2 $G --expert-cache 3801M --expert-host-cache 7G
# 4 layers: 2048 experts; 55% = 1126 slots, 25% = 512; host tier: all (14G) or half (1024 slots, 6920M)
bj x397_4_xc55_h100 X=1 $S/x397_4 $G --expert-cache 7601M --expert-host-cache 14G
bj x397_4_xc55_h100_io8 TS_XC_IO=8 $S/x397_4 $G --expert-cache 7601M --expert-host-cache 14G
bj x397_4_xc25_h100 X=1 $S/x397_4 $G --expert-cache 3456M --expert-host-cache 14G
bj x397_4_xc55_h50 X=1 $S/x397_4 $G --expert-cache 7601M --expert-host-cache 6920M
bj x397_4_xc55_disk X=1 $S/x397_4 --prompt 4 --gen 16 --runs 1 --expert-cache 7601M
TS_XC_IO=8 timeout 60 $B/turbospark run --backend cuda -m $S/x397_4 --ids 1,2,3,4 -n 32 -v --expert-cache 7601M --expert-host-cache 14G > $O/run_x397_4.txt 2>&1; tl "run x397_4 $?"
rm -rf $S/x397_2 $S/x397_4
if [ $(( $(date +%s) - T0 )) -lt 300 ]; then
  synth_shape 35b shapes/qwen3.5-35B-A3B.json
  bj 35b_res X=1 $S/35b $G
  # 41 map layers x 256 experts of 1.6875 MiB: 25% = 2624 slots; host tier all of them
  bj 35b_xc25_h100 TS_XC_IO=8 $S/35b $G --expert-cache 4428M --expert-host-cache 18G
  bj 35b_xc25_buf "TS_XC_IO=8 TS_XC_DIRECT=0" $S/35b $G --expert-cache 4428M
fi
device_end
