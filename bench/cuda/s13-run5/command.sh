#!/bin/bash
# session 13, device call 5: the chunk attention kernel (tsc_attn_prefill), the prefill test with the
# tolerance measured against the CPU's own 8-bit activations, prefill speed and where it goes
PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.attn_prefill_vs_row_kernels cuda.gemm_prefill_products > $O/kern_tests.log 2>&1; tl "kern tests $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda.attn_prefill_vs_row_kernels > $O/memcheck_attn.log 2>&1; tl "memcheck attn $?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/ts_test cuda.attn_prefill_vs_row_kernels > $O/racecheck_attn.log 2>&1; tl "racecheck attn $?"
timeout 200 $B/ts_test cuda_engine.prefill_chunks_tensor_cores_within_bf16_tolerance > $O/prefill_test.log 2>&1; tl "prefill test rc $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for P in 512 2048; do TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/9b --prompt $P --gen 4 --runs 1 > $O/optime_9b_p$P.txt 2>&1; tl "optime $P $?"; done
for P in 512 2048; do bj 9b_p$P X=1 $S/9b --prompt $P --gen 32 --runs 2; done
bj 9b_p512_noattn TSC_ATTN_PREFILL=0 $S/9b --prompt 512 --gen 32 --runs 2
bj 35b8_p512 X=1 $S/35b8 --prompt 512 --gen 32 --runs 2
bj 35b8_p2048 X=1 $S/35b8 --prompt 2048 --gen 32 --runs 2
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 512 --gen 4 --runs 1 > $O/optime_35b8_p512.txt 2>&1; tl "optime 35b8 $?"
device_end
