#!/bin/bash
# session 47, device call 3 (pack s46a, the build of 8815baf; after s47-run2 on the same machine if it stays warm).
# scripts/gpu_check.sh's engine half at the current defaults: the group cuda_engine, drafting exact under the
# group numerics, the commands on --backend cuda (run, sampled run, chat, perplexity, logits against the CPU's,
# MTP and DFlash drafting = plain, device sampling candidates = the row read back, serve), bench --json on the
# default model (plain, MTP 1..4, graphs on / off, DFlash 4 / 8 / 16) and the 0.8B shape (decode, prefill 2048 on
# cuBLAS and on q4gemm.cu, MTP 3 at forced acceptance, a 4096-token context), memcheck and racecheck on the
# engine's quick set and memcheck on the wide synthetic MoE. The 9B and the 35B-A3B-8L are s47-run1's.
# (Run with the limit cut from 570 to 455 s by a sed in the call itself, to leave device time after it.)
PACK=.gpu/s46a/pack.tar.xz . bench/cuda/device_env.sh
ln -sfn $B gb
OUT=$O/gc KERNELS=0 ENGINE=1 SANITIZE=1 SAN_TIMEOUT=70 BENCH_RUNS=2 SHAPES="qwen3.5-0.8B" SYN=$S \
  timeout 455 scripts/gpu_check.sh gb > $O/gc_engine.txt 2>&1; tl "gpu_check engine $?"
device_end
