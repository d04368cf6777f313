#!/bin/bash
# session 18, device call 3: tensor parallelism's plan per GPU against the device's counted bytes (ranks sharing the
# GPU, NCCL one rank), the ranks' tests after the rank's host image is freed once uploaded, memcheck on NCCL one rank.
PACK=.gpu/s18c/pack.tar.xz . bench/cuda/device_env.sh
timeout 240 $B/ts_test tp > $O/tp.log 2>&1; tl "ts_test tp $?"
timeout 200 compute-sanitizer --tool memcheck $B/ts_test tp.cuda_nccl_one_rank > $O/memcheck_nccl.log 2>&1; tl "memcheck nccl one rank $?"
synth_shape 9b shapes/qwen3.5-9B.json
for g in 1 2; do
  TS_TP_ONE_DEVICE=1 timeout 60 $B/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 128 --runs 1 --gpus $g --json > $O/e_9b_one$g.json 2>>$O/e_err.log; tl "bench 9b --gpus $g (one device) $?"
done
device_end
