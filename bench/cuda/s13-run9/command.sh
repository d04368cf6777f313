#!/bin/bash
# session 13, device call 9: the merged MoE slots' sums with the slot path's operations: bit-identical
# to slot by slot (engine test), the engine group, 35B-A3B prefill
PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda_engine.prefill_chunks_tensor_cores_within_bf16_tolerance > $O/prefill_test.log 2>&1; tl "prefill test rc $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for P in 512 2048; do bj 35b8_p$P X=1 $S/35b8 --prompt $P --gen 128 --runs 2; done
timeout 240 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
device_end
