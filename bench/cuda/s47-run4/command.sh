#!/bin/bash
# session 47, device call 4 (pack s46a, the build of 8815baf). scripts/gpu_check.sh as mended after s47-run2/3
# (the spec and DFlash rows read the JSON's last line; sanitizer runs under time limits, a cut run reported as
# CUT), without the sanitizers (s47-run2/3 ran them): the rows s47-run2's racecheck left unrun when the call's
# limit cut it (cuda_bench's tables: the Q4T, the MLX dp4a at 8- and 24-bit x, the 9B step at 2..16 rows, the
# group numerics, the 512-row tensor-core products), and the engine half again, whose spec and DFlash rows were
# unreadable in s47-run3. Cut down before it ran (435 s of device time left, ~270 s of them a fresh start's):
# the kernels' half only, 130 s (the table is written row by row, so a cut run still returns what it reached).
PACK=.gpu/s46a/pack.tar.xz . bench/cuda/device_env.sh
ln -sfn $B gb
OUT=$O/gc SANITIZE=0 KERNELS=1 ENGINE=0 timeout 130 scripts/gpu_check.sh gb > $O/gc_all.txt 2>&1; tl "gpu_check $?"
device_end
