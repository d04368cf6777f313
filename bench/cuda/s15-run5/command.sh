#!/bin/bash
# session 15, device call 5: a layer's device copies from the host tier enqueued on the session's stream
# by the caller's thread (TS_XC_INLINE=1, the default now) against the I/O threads (TS_XC_INLINE=0): the
# host-tier identity test both ways, then the 8-layer and full 35B-A3B at 25% device slots over a host
# tier of all experts, the full 35B with the exclusive tier, and the 397B-A17B 4-layer cut at 55% + 47%
PACK=.gpu/s15/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda_engine.expert_host_tier_identical_to_resident > $O/xs_inline.log 2>&1; tl "xs inline rc $?"
TS_XC_INLINE=0 timeout 100 $B/ts_test cuda_engine.expert_host_tier_identical_to_resident > $O/xs_threads.log 2>&1; tl "xs threads rc $?"
G="--prompt 512 --gen 64 --runs 2"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bj 35b8_xc25_h100_inline X=1 $S/35b8 $G --expert-cache 972M --expert-host-cache 4G
bj 35b8_xc25_h100_threads TS_XC_INLINE=0 $S/35b8 $G --expert-cache 972M --expert-host-cache 4G
rm -rf $S/35b8
synth_shape x397_4 bench/experts/shape-397B-A17B-4layers.json
bj x397_4_xc55_hx47_inline X=1 $S/x397_4 $G --expert-cache 7601M --expert-host-cache $((963*7081984+4096))
bj x397_4_xc55_hx47_threads TS_XC_INLINE=0 $S/x397_4 $G --expert-cache 7601M --expert-host-cache $((963*7081984+4096))
rm -rf $S/x397_4
if [ $(( $(date +%s) - T0 )) -lt 150 ]; then
  synth_shape 35b shapes/qwen3.5-35B-A3B.json
  bj 35b_xc25_h100_inline X=1 $S/35b $G --expert-cache 4428M --expert-host-cache 18G
  bj 35b_xc25_h100_threads "TS_XC_INLINE=0 TS_XC_IO=8" $S/35b $G --expert-cache 4428M --expert-host-cache 18G
  bj 35b_xc25_hx_inline X=1 $S/35b $G --expert-cache 4428M --expert-host-cache $((7872*1773568+4096))
fi
device_end
