#!/bin/bash
# session 13, device call 6: the chunk GDN kernels (tsc_gdn_prefill) with the chunk attention and the
# tensor-core products: every GPU test, the sanitizers on the new kernels, prefill and decode speed
PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.gdn_prefill_vs_step > $O/gdn_test.log 2>&1; tl "gdn test $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda.gdn_prefill_vs_step cuda.gemm_prefill_products > $O/memcheck_new.log 2>&1; tl "memcheck $?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/ts_test cuda.gdn_prefill_vs_step > $O/racecheck_gdn.log 2>&1; tl "racecheck $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 08 shapes/qwen3.5-0.8B.json
for P in 512 2048; do TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/9b --prompt $P --gen 4 --runs 1 > $O/optime_9b_p$P.txt 2>&1; tl "optime $P $?"; done
for P in 512 2048; do bj 9b_p$P X=1 $S/9b --prompt $P --gen 128 --runs 2; done
bj 9b_p512_nogdn TSC_GDN_PREFILL=0 $S/9b --prompt 512 --gen 32 --runs 2
for P in 512 2048; do bj 35b8_p$P X=1 $S/35b8 --prompt $P --gen 128 --runs 2; done
bj 08_p512 X=1 $S/08 --prompt 512 --gen 128 --runs 2
bj def_p512 X=1 models/default --prompt 512 --gen 128 --runs 2
timeout 150 $B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
timeout 240 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
device_end
