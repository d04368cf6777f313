#!/bin/bash
# session 47, device call 2 (pack s46a, the build of 8815baf; run right after s47-run1 on the same machine).
# scripts/gpu_check.sh, the one GPU check script of issue 16 (item 8), has not run end to end since session 2,
# and has grown since (the rows of 662670c and f9f5b16 were never run). Its kernels half here, at the current
# defaults: `ts_test cuda` (every kernel against the CPU reference), the fused products with every staging mode's
# digits made once, compute-sanitizer memcheck over the whole group and racecheck over its list, cuda_bench's tables
# (the Q4T, the MLX dp4a at 8- and 24-bit x, the group numerics, the 512-row tensor-core products).
# The script wants a relative build folder (it runs ./$B/ts_test): gb -> the unpacked pack.
PACK=.gpu/s46a/pack.tar.xz . bench/cuda/device_env.sh
ln -sfn $B gb
OUT=$O/gc KERNELS=1 ENGINE=0 SANITIZE=1 timeout 560 scripts/gpu_check.sh gb > $O/gc_kernels.txt 2>&1; tl "gpu_check kernels $?"
device_end
