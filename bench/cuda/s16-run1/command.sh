#!/bin/bash
# session 16, device call 1: where the 9B decode step's products spend their time (cuda_bench --trace,
# a -DTSC_TRACE build: per block of every dp4a launch, entry / PDL release / staged / end), and two
# switches against the chain's fixed costs: TSC_Q4DP_BPS=1 (one block an SM, room for the next launch's
# block) and TSC_Q4DP_PRE=1 (its first weights loaded to registers before the PDL wait); TSC_CARVE
# one shared-memory carveout for all persistent kernels; for the verify's rows TSC_Q4DP_UROWS=2 (U = 2 rounds
# for several rows) and TSC_Q4DP_ROWS=8 (8 rows a pass). Then the engine with the best of them.
PACK=.gpu/s16/pack.tar.xz . bench/cuda/device_env.sh
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2; do
  cb base_$r X=1
  cb bps1_$r TSC_Q4DP_BPS=1
  cb bps1_pre_$r TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1
  cb bps1_pre_c100_$r TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 TSC_CARVE=100
  cb bps1_pre_c50_$r TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 TSC_CARVE=50
  cb pre_$r TSC_Q4DP_PRE=1
  cb bps1_pre_u1_$r TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 TSC_Q4DP_U=1
  cb bps1_pre_ur2_$r TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 TSC_Q4DP_UROWS=2
  cb bps1_pre_ur2_r8_$r TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 TSC_Q4DP_UROWS=2 TSC_Q4DP_ROWS=8
  cb r8_$r TSC_Q4DP_ROWS=8
done
for v in "base X=1" "bps1_pre TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1" "bps1_pre_c100 TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 TSC_CARVE=100" "bps1 TSC_Q4DP_BPS=1"; do
  set -- $v; n=$1; shift
  env "$@" $B/cuda_bench_trace --shape 9b --mlx --digits 1 --trace $O/trace_$n.txt > $O/cbt_$n.txt 2>&1; tl "trace $n $?"
done
$B/cuda_bench --shape 35b8 --mlx --digits 1 > $O/cb35_base.txt 2>&1; tl "cb35 base $?"
TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 $B/cuda_bench --shape 35b8 --mlx --digits 1 > $O/cb35_bps1_pre.txt 2>&1; tl "cb35 bps1 pre $?"
TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 timeout 120 $B/ts_test cuda > $O/kern_bps1_pre.log 2>&1; tl "ts_test cuda bps1 pre $?"
TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 TSC_Q4DP_UROWS=2 TSC_Q4DP_ROWS=8 timeout 120 $B/ts_test cuda > $O/kern_ur2_r8.log 2>&1; tl "ts_test cuda ur2 r8 $?"
synth_shape 9b shapes/qwen3.5-9B.json
G="--prompt 512 --gen 128 --runs 2"
bj 9b X=1 $S/9b $G
bj 9b_bps1_pre "TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1" $S/9b $G
bj 9b_bps1_pre_c100 "TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 TSC_CARVE=100" $S/9b $G
bj 9b_b X=1 $S/9b $G
TSC_Q4DP_BPS=1 TSC_Q4DP_PRE=1 timeout 150 $B/ts_test cuda_engine > $O/eng_bps1_pre.log 2>&1; tl "ts_test cuda_engine bps1 pre $?"
device_end
