#!/bin/bash
# session 47, device call 4 (pack s46a, the build of 8815baf). scripts/gpu_check.sh as mended after s47-run2/3
# (the spec and DFlash rows read the JSON's last line; sanitizer runs under time limits, a cut run reported as
# CUT), without the sanitizers (s47-run2/3 ran them): the rows s47-run2's racecheck left unrun when the call's
# limit cut it (cuda_bench's tables: the Q4T, the MLX dp4a at 8- and 24-bit x, the 9B step at 2..16 rows, the
# group numerics, the 512-row tensor-core products), and the engine half again, whose spec and DFlash rows were
# unreadable in s47-run3.
PACK=.gpu/s46a/pack.tar.xz . bench/cuda/device_env.sh
ln -sfn $B gb
OUT=$O/gc SANITIZE=0 BENCH_RUNS=2 SHAPES="qwen3.5-0.8B" SYN=$S timeout 500 scripts/gpu_check.sh gb > $O/gc_all.txt 2>&1; tl "gpu_check $?"
device_end
