#!/bin/bash
# session 13, device call 7: a chunk's MoE through the grouped tensor-core products (moe_chunk), the
# grouped kernel test, every GPU test (the workspace layout grew: the plan test), prefill speed
PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.gemm_prefill_products > $O/gemm_test.log 2>&1; tl "gemm test $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda.gemm_prefill_products > $O/memcheck_gemm.log 2>&1; tl "memcheck $?"
timeout 200 $B/ts_test cuda_engine.prefill_chunks_tensor_cores_within_bf16_tolerance > $O/prefill_test.log 2>&1; tl "prefill test rc $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 4 --runs 1 > $O/optime_35b8_p512.txt 2>&1; tl "optime 35b8 $?"
for P in 512 2048; do bj 35b8_p$P X=1 $S/35b8 --prompt $P --gen 128 --runs 2; done
bj 35b8_p512_old TSC_MOE_CHUNK=0 $S/35b8 --prompt 512 --gen 32 --runs 2
bj 9b_p512 X=1 $S/9b --prompt 512 --gen 128 --runs 2
timeout 150 $B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
timeout 240 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
if [ $(( $(date +%s) - T0 )) -lt 300 ]; then
  synth_shape 35b shapes/qwen3.5-35B-A3B.json
  bj 35b_p512 X=1 $S/35b --prompt 512 --gen 64 --runs 1
fi
device_end
