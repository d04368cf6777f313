#!/bin/bash
# session 20, device call 3: the chunk MoE's router and shared expert back on q4gemm.cu (row-invariant; s20-run2's
# expert-cache tests differed with cuBLAS there): cuda_engine whole, then the MoE shapes' prefill with cuBLAS
# against TSC_BLAS=0, interleaved, and the 0.8B shape.
PACK=.gpu/s20b/pack.tar.xz . bench/cuda/device_env.sh
timeout 240 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08b shapes/qwen3.5-0.8B.json
for r in a b; do
  for v in "blas X=1" "q4gemm TSC_BLAS=0"; do
    set -- $v; n=$1; shift
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
    bj 08b_p512_${n}_$r "$*" $S/08b --prompt 512 --gen 16 --runs 2
    bj 08b_p2048_${n}_$r "$*" $S/08b --prompt 2048 --gen 16 --runs 2
  done
done
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 4 --runs 1 > $O/optime_35b8_p512_blas.txt 2>&1
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 2048 --gen 4 --runs 1 > $O/optime_35b8_p2048_blas.txt 2>&1
tl optime
device_end
