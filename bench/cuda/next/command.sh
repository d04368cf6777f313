#!/bin/bash
# (branch gdn-wy, written in session 20 without device time left) validate and measure the WY form of the prompt
# chunks' GDN (gdn.cu k_gdnw_prep + k_gdnw_scan; TSC_GDN_WY=0 the row scan) in one call: the kernel test
# (cuda.gdn_prefill_vs_step: WY against the step in one segment and in 64-row segments), the sanitizers on it,
# cuda_engine whole (parity, the prefill tolerance test, streamed == resident), then prefill A/B interleaved.
# Prediction (bench/cuda/RESULTS.md session 20: the row scan ~0.4 ms a layer at 512 rows, ~1.65 at 2048; the WY
# form ~0.05 / ~0.2): 9B pp512 17.2K -> 22-24K tok/s, pp2048 20.2K -> 26-30K; 35B-A3B-8L pp512 42K -> 46-50K.
# The algebra and indexing were checked on the CPU by bench/cuda/next/wy_emu.c (3e-7 relative).
# Pack from the branch's build as usual (bench/cuda/pack.sh NAME, PACK= below).
PACK=.gpu/wy/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda.gdn_prefill_vs_step > $O/kern_gdn.log 2>&1; tl "gdn test $?"
timeout 100 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_prefill_vs_step > $O/memcheck_gdn.log 2>&1; tl "memcheck $?"
timeout 100 compute-sanitizer --tool racecheck $B/ts_test cuda.gdn_prefill_vs_step > $O/racecheck_gdn.log 2>&1; tl "racecheck $?"
timeout 240 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  for v in "wy X=1" "scan TSC_GDN_WY=0"; do
    set -- $v; n=$1; shift
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
  done
done
bj 9b_p8192_wy X=1 $S/9b --prompt 8192 --gen 16 --runs 1
bj 9b_p8192_scan TSC_GDN_WY=0 $S/9b --prompt 8192 --gen 16 --runs 1
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
device_end
