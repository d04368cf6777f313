#!/bin/bash
# (branch gpu-next, written in session 19 without a GPU) validate and measure the attention pieces sized by each
# row's length against the fixed split (TSC_ATTN_FIXED=1), in one call: the tests first (the new
# cuda.attn_pieces_by_row_length, every attention test, cuda_engine: MTP / DFlash identical to plain, parity,
# perplexity), then the 9B engine in serving contexts of 648 (the bench's own) to 131072 tokens and after an
# 8192-token prompt, interleaved; and a trace of every kernel of the 9B step (build-cuda-trace: make
# BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE build-cuda-trace/cuda_bench, then pack.sh takes it).
# Pack from the branch's build as usual (bench/cuda/pack.sh NAME, PACK= below).
PACK=.gpu/next/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_pieces_by_row_length > $O/memcheck_attn.log 2>&1; tl "memcheck $?"
# the step's timeline of every kernel (the trace build's K lines: common.cuh TSC_ENTRY), the products' own trace too
$B/cuda_bench_trace --shape 9b --mlx --digits 1 --trace $O/trace_all.txt > $O/cbt_all.txt 2>&1; tl "trace $?"
python3 bench/cuda/trace_view.py --kernels $O/trace_all.txt > $O/trace_kernels.txt 2>&1; xz -9 $O/trace_all.txt
synth_shape 9b shapes/qwen3.5-9B.json
for v in "new X=1" "fixed TSC_ATTN_FIXED=1"; do
  set -- $v; n=$1; shift
  bj 9b_${n}_ctx648 "$*" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_${n}_ctx4k "$*" $S/9b --prompt 512 --gen 128 --runs 2 --ctx 4096
  bj 9b_${n}_ctx32k "$*" $S/9b --prompt 512 --gen 128 --runs 2 --ctx 32768
  bj 9b_${n}_ctx128k "$*" $S/9b --prompt 512 --gen 128 --runs 1 --ctx 131072
  bj 9b_${n}_p8k "$*" $S/9b --prompt 8192 --gen 128 --runs 1
  bj 9b_${n}_mtp3_ctx32k "$*" $S/9b --prompt 512 --gen 128 --runs 1 --ctx 32768 --spec mtp --draft 3
done
device_end
