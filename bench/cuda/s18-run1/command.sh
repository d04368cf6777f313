#!/bin/bash
# session 18, device call 1: tensor parallelism (issue 21) on the one-GPU kind. Ranks sharing the GPU (host
# collectives: NCCL takes one rank a device) against one GPU, NCCL with one rank (bit-identical to one GPU), the
# GPU test groups on the new tree, memcheck on the ranks; the cost of the tensor-parallel path on one GPU (9B,
# 35B-A3B-8L, default model): plain vs NCCL one rank vs host one rank vs 2 ranks on the one device.
PACK=.gpu/s18a/pack.tar.xz . bench/cuda/device_env.sh
# NCCL: the loader's, else PyTorch's wheel's
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2'; then
  L=$(python3 -c 'import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],"lib","libnccl.so.2"))' 2>/dev/null)
  [ -f "$L" ] || L=$(find /usr /opt -name 'libnccl.so.2' 2>/dev/null | head -1)
  export TS_NCCL_LIB=$L
fi
tl "TS_NCCL_LIB=${TS_NCCL_LIB:-(loader path)}"
timeout 200 $B/ts_test tp > $O/tp.log 2>&1; tl "ts_test tp $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
G="--prompt 512 --gen 128 --runs 2"
for r in 1 2; do
  bj 9b_$r X=1 $S/9b $G
  bj 9b_nccl1_$r TS_TP_FORCE=1 $S/9b $G --gpus 1
  bj 9b_host1_$r "TS_TP_FORCE=1 TS_TP_COMM=host" $S/9b $G --gpus 1
done
bj 9b_one2 TS_TP_ONE_DEVICE=1 $S/9b $G --gpus 2
bj 9b_mtp3 X=1 $S/9b $G --spec mtp --draft 3
bj 9b_nccl1_mtp3 TS_TP_FORCE=1 $S/9b $G --gpus 1 --spec mtp --draft 3
bj 35b8 X=1 $S/35b8 $G
bj 35b8_nccl1 TS_TP_FORCE=1 $S/35b8 $G --gpus 1
bj 35b8_one2 TS_TP_ONE_DEVICE=1 $S/35b8 $G --gpus 2
bj def X=1 models/default $G
bj def_nccl1 TS_TP_FORCE=1 models/default $G --gpus 1
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 120 compute-sanitizer --tool memcheck $B/ts_test tp.cuda_ranks_on_one_device > $O/memcheck.log 2>&1; tl "memcheck $?"
device_end
