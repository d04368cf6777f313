#!/bin/bash
# session 20, device call 4: the plain product kernel over a chunk's rows in one launch (tsc_linear_many: the chunk
# MoE's bf16 router and shared-expert gate, 128 launches a layer at 2048 rows before; row-exact, so the streamed
# MoE still equals the resident one), with cuBLAS for the other prompt products: the tests (ts_test cuda with
# linear_many_same_bits, cuda_engine whole), memcheck + racecheck on the new test, then prefill A/B (cuBLAS vs
# TSC_BLAS=0) on the 35B-A3B 8-layer cut, the 9B and the 0.8B, and the whole 40-layer 35B-A3B.
PACK=.gpu/s20c/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 240 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.linear_many_same_bits > $O/memcheck_many.log 2>&1; tl "memcheck many $?"
timeout 60 compute-sanitizer --tool racecheck $B/ts_test cuda.linear_many_same_bits > $O/racecheck_many.log 2>&1; tl "racecheck many $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b; do
  for v in "blas X=1" "q4gemm TSC_BLAS=0"; do
    set -- $v; n=$1; shift
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 08b_p512_${n}_$r "$*" $S/08b --prompt 512 --gen 16 --runs 2
  done
done
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 2048 --gen 4 --runs 1 > $O/optime_35b8_p2048.txt 2>&1
synth_shape 35b shapes/qwen3.5-35B-A3B.json
bj 35b_p512 X=1 $S/35b --prompt 512 --gen 128 --runs 2
bj 35b_p2048 X=1 $S/35b --prompt 2048 --gen 16 --runs 1
df -h /tmp > $O/df.txt
device_end
