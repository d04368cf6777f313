#!/bin/bash
# session 21, device call 5 (build of 31f6671, the session's final tree): the tests with the WY form as the
# default, racecheck on the WY kernels, the final figures (9B, 35B-A3B-8L, 40-layer 35B-A3B, 0.8B, default model),
# the A/B of the one-row SwiGLU staging under 2048 columns (TSC_Q4DP_DIG=4: the digits made once as before),
# cuda_bench's rows, and issue 19's GPU table on the final build.
PACK=.gpu/s21e/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 80 compute-sanitizer --tool racecheck $B/ts_test cuda.gdn_prefill_vs_step > $O/racecheck_wy.log 2>&1; tl "racecheck $?"
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cb $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b; do
  bj 9b_p512_$r X=1 $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_p2048_$r X=1 $S/9b --prompt 2048 --gen 16 --runs 2
  bj 35b8_p512_$r X=1 $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_p512_dig4_$r TSC_Q4DP_DIG=4 $S/35b8 --prompt 512 --gen 128 --runs 2
  bj 35b8_p2048_$r X=1 $S/35b8 --prompt 2048 --gen 16 --runs 2
  bj 08b_p512_$r X=1 $S/08b --prompt 512 --gen 128 --runs 2
  bj def_p512_$r X=1 models/default --prompt 512 --gen 128 --runs 2
  bj def_p512_dig4_$r TSC_Q4DP_DIG=4 models/default --prompt 512 --gen 128 --runs 2
done
bj 9b_p8192 X=1 $S/9b --prompt 8192 --gen 16 --runs 1
bj 9b_mtp3 X=1 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
TS_BIN=$B/turbospark TS_RUN_ARGS="--backend cuda" TS_WINDOWS=8 TS_MODES="plain;mtp 1;mtp 2;mtp 3;dflash 4;dflash 8;dflash 16" \
  timeout 120 bash bench/spec/dflash.sh models/default 1 128 > $O/dflash_heldout_gpu.md 2>&1; tl "dflash heldout $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_p512 X=1 $S/35b --prompt 512 --gen 64 --runs 1
bj 35b_p2048 X=1 $S/35b --prompt 2048 --gen 16 --runs 1
device_end
