#!/bin/bash
# session 13, device call 2: why a 64-row prompt chunk of tiny-dense INT4 is off
# (per-layer diagnosis, the row kernels on the same chunks), where prefill's time goes (TSC_OPTIME)
PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda_engine.prefill_chunks_tensor_cores_within_bf16_tolerance > $O/prefill_test.log 2>&1; tl "prefill test rc $?"
synth_shape 9b shapes/qwen3.5-9B.json
for P in 512 2048; do TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/9b --prompt $P --gen 4 --runs 1 > $O/optime_9b_p$P.txt 2>&1; tl "optime $P $?"; done
TSC_OPTIME=1 TSC_GEMM=0 $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 4 --runs 1 > $O/optime_9b_p512_rows.txt 2>&1; tl "optime rows $?"
device_end
