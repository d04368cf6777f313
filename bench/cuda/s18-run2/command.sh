#!/bin/bash
# session 18, device call 2: the ranks sharing one GPU again after the fix of the head's branch (call 1's hang),
# memcheck and racecheck on them, and NCCL one rank once more; the CLI with --gpus on the GPU.
PACK=.gpu/s18b/pack.tar.xz . bench/cuda/device_env.sh
timeout 240 $B/ts_test tp > $O/tp.log 2>&1; tl "ts_test tp $?"
timeout 200 compute-sanitizer --tool memcheck $B/ts_test tp.cuda_ranks_on_one_device > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 200 compute-sanitizer --tool racecheck $B/ts_test tp.cuda_ranks_on_one_device > $O/racecheck.log 2>&1; tl "racecheck $?"
for g in 1 2 4; do
  TS_TP_ONE_DEVICE=1 timeout 60 $B/turbospark run -m models/default --backend cuda --gpus $g -n 64 --temp 0 -p "The history of the city" > $O/run_g$g.txt 2>&1; tl "run --gpus $g $?"
done
TS_TP_ONE_DEVICE=1 timeout 60 $B/turbospark run -m models/default --backend cuda --gpus 2 -n 64 --temp 0 -p "The history of the city" --spec mtp --draft 3 > $O/run_g2_mtp3.txt 2>&1; tl "run --gpus 2 mtp3 $?"
timeout 30 $B/turbospark run -m models/default --backend cuda --gpus 2 -n 4 --ids 1 > $O/run_nccl2_one_gpu.txt 2>&1; tl "run --gpus 2 without TS_TP_ONE_DEVICE (one GPU: expect a clear refusal) $?"
device_end
