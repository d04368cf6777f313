#!/bin/bash
# session 47, device call 4 (pack s46a, the build of 8815baf). The rows of scripts/gpu_check.sh's kernels half
# that s47-run2 never reached (its racecheck ran until the call's limit) and that have never run since they were
# written (662670c, f9f5b16: the group numerics' row, the 512-row tensor-core products), run directly with
# cuda_bench rather than through the script: 435 s of device time were left, ~270 s of them a fresh start's, and
# the script's kernels half first reruns `ts_test cuda` (~70 s), which s47-run2 has.
PACK=.gpu/s46a/pack.tar.xz . bench/cuda/device_env.sh
timeout 40 $B/cuda_bench --shape 9b --mlx --digits 3 > $O/cb_9b_d3.txt 2>&1; tl "cb 9b d3 $?"
TSC_Q4G=1 timeout 40 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_q4g.txt 2>&1; tl "cb 9b q4g $?"
timeout 40 $B/cuda_bench --shape 9b --mlx --gemm 512 > $O/cb_9b_gemm512.txt 2>&1; tl "cb 9b gemm512 $?"
timeout 60 $B/cuda_bench --quick > $O/cb_quick.txt 2>&1; tl "cb quick $?"
device_end
