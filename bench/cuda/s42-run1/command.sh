#!/bin/bash
# session 42, device call 1, as it ran (on an NVIDIA H100 80GB HBM3; no pack: after nine refused starts the call was
# cut to the probe alone). .gpu/s42a/ringfloor: bench/cuda/ringfloor.cu of 560e669 (the forms up to seg-both-dps
# 10x16), built here with nvcc -O3 -std=c++17 -arch=sm_90 -o .gpu/s42a/ringfloor bench/cuda/ringfloor.cu; the call
# carried .gpu/s42a. (This file's first form, committed before the call, also ran the acceptance card at the defaults
# when the card is an H200, from a pack; it never started.)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $OUT/smi.txt 2>&1
timeout 120 .gpu/s42a/ringfloor > $OUT/ringfloor.txt 2>&1; echo "rc $?" >> $OUT/ringfloor.txt
