#!/bin/bash
# session 38, device call 8 (pack s38f: the build of this commit, TSC_CARVE_ALL added): s38-run7 found TSC_CARVE=50
# (one carveout, half shared memory, on the persistent products) +2.0% on the 9B and +1.8% on 35B-A3B-8L (H100),
# 25 +0.9% / +0.1%, 0 -7% / -5%. This call: the products at 50, 65, 80, and every kernel (TSC_CARVE_ALL: GDN,
# attention, staging, routing too) at 50 and 65. Prediction: the optimum between 50 and 80; every kernel at one
# carveout another +0.5-1.5% (the kernels between products also stop waiting for SMs to drain). The engine suite under
# TSC_CARVE_ALL=50 (a scheduling hint: the same bits; a test of timing-dependent faults).
PACK=.gpu/s38f/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d p50 p65 p80 a50 a65); VE=(X=0 TSC_CARVE=50 TSC_CARVE=65 TSC_CARVE=80 TSC_CARVE_ALL=50 TSC_CARVE_ALL=65)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
TSC_CARVE_ALL=50 timeout 150 $B/ts_test cuda_engine > $O/t_engine_a50.log 2>&1; tl "cuda_engine under TSC_CARVE_ALL=50 $?"
device_end
