#!/bin/bash
# session 23, device call 3 (NOT RUN: no device was lent after call 2; the next session builds, packs as s23c
# (bash bench/cuda/pack.sh s23c) and runs it): the group numerics, opt-in with TSC_Q4G=1 (q4grp.cu's k_q4g for one
# row, the tensor-core k_q4gm for 2..16 rows: a scale step per quantization group, the same bits for every row
# count; without it k_q4dp's per-chunk numerics, the same binary). Call 2 found k_q4gm exact but at ~40% of the
# copy rate (k_q4mm's loads: 32-byte pieces of 8 rows an instruction): its weights now go through shared memory by
# cp.async (512 contiguous bytes a warp instruction), item k + S - 1 copied while item k is computed; k_q4g's rows a
# warp by a wave rule (in_proj ran 1.46 waves). Tests first (linear_parity_and_row_exact's "grp" configs: 16-row and
# 3/5/6/7-row calls == one-row calls bit for bit; fused_products_dp4a's kind 2; the engine's tests with the group
# numerics on: MTP and DFlash identical to plain), then cuda_bench's products by rows and the step by rows, both
# numerics, and the engine on the 9B; the cuda_engine tests' TSC_BLAS=0 prompt chunks now keep the WY form (its
# records in a scratch of their own, backend.cu's wy_ws_of). Prediction: products at 4 rows ~1.05-1.10x one row (1.43x), the 4-row step
# ~1.15-1.2x (1.46x), 16 rows ~1.6x (4.6x), the one-row step within 2% of k_q4dp's (call 2: 3.4% slower).
# (~510 s at most: run with timeout_s 600)
PACK=.gpu/s23c/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
TSC_Q4G=1 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_grp.txt 2>&1; tl "cb 9b grp $?"
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cb 9b $?"
# k_q4g's rows a warp forced (g_rg's wave rule otherwise): the one-row products at RG = 1, 2, 4
for rg in 1 2 4; do TSC_Q4G=1 TSC_Q4G_RG=$rg $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_grp_rg$rg.txt 2>&1; tl "cb 9b grp rg$rg $?"; done
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  bj 9b_dec_g_$r "TSC_Q4G=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 9b_dec_c_$r "X=1" $S/9b --prompt 512 --gen 128 --runs 2
done
bj 9b_acc3_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_acc3_c "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_acc4_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 4 --accept 0.8,0.6,0.5,0.4
bj 9b_acc4_c "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 4 --accept 0.8,0.6,0.5,0.4
# 8-row verifies (MTP 7 at a high forced acceptance): where the tensor-core verify should gain most
bj 9b_acc7_g "TSC_Q4G=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 7 --accept 0.95,0.9,0.85,0.8,0.7,0.6,0.5
bj 9b_acc7_c "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 7 --accept 0.95,0.9,0.85,0.8,0.7,0.6,0.5
# the WY prompt GDN's own scratch (no cuBLAS workspace: TSC_BLAS=0): the WY form against the row scan, 9B pp2048
# (session 21 with cuBLAS: 24,365 against 20,705 tok/s); prediction: WY ahead by ~15%
bj 9b_pp2k_noblas_wy "TSC_BLAS=0" $S/9b --prompt 2048 --gen 16 --runs 2
bj 9b_pp2k_noblas_scan "TSC_BLAS=0 TSC_GDN_WY=0" $S/9b --prompt 2048 --gen 16 --runs 2
TSC_Q4G=1 timeout 150 $B/ts_test cuda_engine > $O/eng_grp.log 2>&1; tl "ts_test cuda_engine (grp) $?"
# ncu of the 4-row verify's products in both numerics (serialized kernels; k_q4gm against k_q4dp_as): duration,
# DRAM throughput, issue activity, occupancy, and why the warps stall, so that a loss is read in the same call
NCU="ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --csv"
TSC_Q4G=1 timeout 75 $NCU --kernel-name regex:'k_q4g' --launch-count 40 $B/cuda_bench --shape 9b --mlx --digits 1 --prof --prof-rows 4 > $O/ncu_grp4.csv 2>$O/ncu_err.log; tl "ncu grp $?"
timeout 75 $NCU --kernel-name regex:'k_q4dp' --launch-count 40 $B/cuda_bench --shape 9b --mlx --digits 1 --prof --prof-rows 4 > $O/ncu_dp4.csv 2>>$O/ncu_err.log; tl "ncu dp $?"
xz -9 $O/ncu_*.csv
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.fused_products_dp4a > $O/memcheck_fused.log 2>&1; tl "memcheck $?"
timeout 60 compute-sanitizer --tool racecheck $B/ts_test cuda.fused_products_dp4a > $O/racecheck_fused.log 2>&1; tl "racecheck $?"
device_end
