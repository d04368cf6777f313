#!/bin/bash
# session 21, device call 1: branch gpu-next2 validated and measured (its bench/cuda/next/command.sh, see there
# for the predictions: gdn-wy prompt GDN, gdn-defer, a verify's attention rows in one launch pair). Main's build
# (*_ref) and the trace build do not fit the 64 MiB beside the tree (pack 16.5-21 MB, tree 50.5): gdn-defer (no
# switch) is measured against session 19-20's cuda_bench figures (2.018-2.022 ms a step, 1.474-1.477x at 4 rows),
# the attention rows against TSC_ATTN_ROWS=0, gdn-wy against TSC_GDN_WY=0. Then ncu's kernel durations of the
# 35B-A3B-8L's and the 9B's decode (one kernel at a time, so without PDL overlap: what each kernel costs alone).
# Before: make -j2 BUILD=build-cuda CUDA=1 all (branch), bench/cuda/pack.sh s21a.
PACK=.gpu/s21a/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 200 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
G3="cuda.gdn_prefill_vs_step cuda.gdn_fused_same_bits cuda.gdn_step_parity_and_row_exact cuda.attn_same_pos_rows cuda.block_mask_attention_vs_cpu_backend"
timeout 100 compute-sanitizer --tool memcheck $B/ts_test $G3 > $O/memcheck_gdn.log 2>&1; tl "memcheck $?"
timeout 80 compute-sanitizer --tool racecheck $B/ts_test $G3 > $O/racecheck_gdn.log 2>&1; tl "racecheck $?"
for r in 1 2; do
  $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_new_$r.txt 2>&1; tl "cb new $r $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  for v in "wy X=1" "scan TSC_GDN_WY=0"; do
    set -- $v; n=$1; shift
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
  done
  bj 9b_mtp3_new_$r X=1 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
  bj 9b_mtp3_rows1_$r TSC_ATTN_ROWS=0 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
  bj def_df16_new_$r X=1 models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block 16
  bj def_df16_rows1_$r TSC_ATTN_ROWS=0 models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block 16
done
bj 9b_p8192_wy X=1 $S/9b --prompt 8192 --gen 16 --runs 1
bj 9b_p8192_scan TSC_GDN_WY=0 $S/9b --prompt 8192 --gen 16 --runs 1
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv"
timeout 100 $NCU --launch-count 700 $B/turbospark bench --backend cuda -m $S/35b8 --prompt 1 --gen 3 --runs 1 > $O/ncu35.csv 2>$O/ncu35.err; tl "ncu35 $?"
timeout 120 $NCU --launch-count 1200 $B/turbospark bench --backend cuda -m $S/9b --prompt 1 --gen 3 --runs 1 > $O/ncu9.csv 2>$O/ncu9.err; tl "ncu9 $?"
xz -9 $O/ncu*.csv
device_end
