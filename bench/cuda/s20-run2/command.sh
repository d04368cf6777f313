#!/bin/bash
# session 20, device call 2: branch gpu-next (attention pieces sized by each row's length, TSC_ATTN_FIXED=1 the
# old fixed split) merged with this session's cuBLAS prompt products (src/cuda/blas.cu; TSC_BLAS=0 the tensor-core
# kernel of q4gemm.cu): the tests (ts_test cuda with the new blas_prefill_products and attn_pieces_by_row_length,
# cuda_engine with TSC_BLAS=0 against cuBLAS), memcheck on the new tests, then interleaved A/Bs: decode at serving
# contexts (new vs fixed pieces), prefill 512 / 2048 (cuBLAS with 128 / 32 MiB pieces vs q4gemm.cu), and DFlash
# against MTP on the default model's held-out windows on the GPU (the new drafter, s20-run1).
PACK=.gpu/s20/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 240 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.attn_pieces_by_row_length > $O/memcheck_attn.log 2>&1; tl "memcheck attn $?"
timeout 90 compute-sanitizer --tool memcheck $B/ts_test cuda.blas_prefill_products > $O/memcheck_blas.log 2>&1; tl "memcheck blas $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for v in "new X=1" "fixed TSC_ATTN_FIXED=1"; do
  set -- $v; n=$1; shift
  bj 9b_${n}_ctx4k "$*" $S/9b --prompt 512 --gen 128 --runs 2 --ctx 4096
  bj 9b_${n}_ctx32k "$*" $S/9b --prompt 512 --gen 128 --runs 2 --ctx 32768
  bj 9b_${n}_p8k "$*" $S/9b --prompt 8192 --gen 128 --runs 1
done
bj 9b_new_ctx648 X=1 $S/9b --prompt 512 --gen 128 --runs 2
bj 9b_new_ctx128k X=1 $S/9b --prompt 512 --gen 128 --runs 1 --ctx 131072
for r in a b; do
  for v in "blas128 X=1" "blas32 TSC_BLAS_MB=32" "q4gemm TSC_BLAS=0"; do
    set -- $v; n=$1; shift
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
  done
  bj def_p512_blas_$r X=1 models/default --prompt 512 --gen 16 --runs 2
  bj def_p512_q4gemm_$r TSC_BLAS=0 models/default --prompt 512 --gen 16 --runs 2
done
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/9b --prompt 2048 --gen 4 --runs 1 > $O/optime_9b_p2048_blas.txt 2>&1
TSC_OPTIME=1 TSC_BLAS=0 $B/turbospark bench --backend cuda -m $S/9b --prompt 2048 --gen 4 --runs 1 > $O/optime_9b_p2048_q4gemm.txt 2>&1
tl "optime"
TS_BIN=$B/turbospark TS_RUN_ARGS="--backend cuda" TS_WINDOWS=8 TS_MODES="plain;mtp 3;mtp 4;dflash 4;dflash 8;dflash 16" \
  timeout 200 bash bench/spec/dflash.sh models/default 1 128 > $O/dflash_heldout_gpu.md 2>&1; tl "dflash heldout $?"
device_end
