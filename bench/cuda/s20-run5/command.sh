#!/bin/bash
# session 20, device call 5: prompt-chunk attention through cuBLAS (tsc_attn_blas: TF32 S = QK^T per KV head's
# query heads, causal softmax in place, O = PV, the gate; TSC_ATTN_BLAS=0 the f32 flash kernel): its test (in
# cuda.attn_prefill_vs_row_kernels), memcheck, cuda_engine whole, then prefill A/B interleaved.
PACK=.gpu/s20d/pack.tar.xz . bench/cuda/device_env.sh
timeout 100 $B/ts_test cuda.attn_prefill_vs_row_kernels cuda.blas_prefill_products > $O/kern.log 2>&1; tl "ts_test attn $?"
timeout 240 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 90 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_prefill_vs_row_kernels > $O/memcheck_attn.log 2>&1; tl "memcheck attn $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  for v in "ablas X=1" "aflash TSC_ATTN_BLAS=0"; do
    set -- $v; n=$1; shift
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
  done
done
bj 9b_p8192_ablas X=1 $S/9b --prompt 8192 --gen 16 --runs 1
bj 9b_p8192_aflash TSC_ATTN_BLAS=0 $S/9b --prompt 8192 --gen 16 --runs 1
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/9b --prompt 2048 --gen 4 --runs 1 > $O/optime_9b_p2048.txt 2>&1
tl optime
device_end
