#!/bin/bash
# session 41, device call 1 (pack s41a: the normal build of this commit, and as turbospark_ref / cuda_bench_ref the
# build of 2601fa9, the commit before it; repacked with a 192 MiB xz dictionary, cuda_bench_ref left out).
# (1) Q (TSC_Q4DP_DYN=1, q4dp.cu "Virtual blocks by a queue"): k_q4dp's virtual blocks past the grid's first claimed
# from a device counter, so that faster blocks take more. s40-run3's trace: gate/up's equal blocks end 19.9 / 21.5 /
# 24.4 us (p10 / median / last), in_proj's 10.5 / 11.6 / 14.0. Exact by construction (which block computes a virtual
# block changes nothing in it): the new test cuda.q4dp_queue_same_bits (queue on against off bit for bit; counters
# back at 0; a queue left claimed is seen to skip), the fused-product tests under it, memcheck and racecheck, the
# engine's GPU suite under it. Prediction: 9B +2-4% (gate/up and in_proj tails about halved), 35B-A3B-8L +1-2%.
# QK2: the queue with KS = 2 forced (virtual blocks half as long: a finer queue; changes the rows' bits, a
# measurement). M: the previous commit's binary (the queue's code off: its cost when off).
# (2) figures of record at the defaults on this card (s40-run5, not run then): 0.8B, 40-layer 35B-A3B, 9B MTP 3, 9B at
# 4,096 (the default model stays behind: the pack, with the reference binary, and the tree exceed 64 MiB with it).
PACK=.gpu/s41a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
timeout 150 $B/ts_test cuda.q4dp_queue_same_bits cuda.fused_products_dp4a cuda.addnorm_plain_same_bits > $O/t_q.log 2>&1; tl "queue tests $?"
TSC_Q4DP_DYN=1 timeout 150 $B/ts_test cuda.fused_products_dp4a cuda.addnorm_plain_same_bits cuda.graph_replay_same_bits > $O/t_q_dyn.log 2>&1; tl "fused tests under Q $?"
bjr() { local n=$1 bin=$2 ev=$3 m=$4; shift 4; env $ev $B/$bin bench --backend cuda -m "$m" --json "$@" > "$O/e_$n.json" 2>>"$O/e_err.log"; tl "e_$n rc $?"; }
abr() { # NAME MODEL ROUNDS [args]: variants d q qk2 m interleaved
  local n=$1 m=$2 k=$3 r; shift 3
  for r in $(printf '%s\n' a b c d | head -n "$k"); do
    bjr ${n}_d_$r turbospark X=0 $m "$@"
    bjr ${n}_q_$r turbospark TSC_Q4DP_DYN=1 $m "$@"
    bjr ${n}_qk2_$r turbospark "TSC_Q4DP_DYN=1 TSC_Q4DP_KS=2" $m "$@"
    bjr ${n}_m_$r turbospark_ref X=0 $m "$@"
  done
}
abr 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
abr 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
for v in d q; do
  ev=X=0; [ $v = q ] && ev=TSC_Q4DP_DYN=1
  env $ev timeout 60 $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b_$v.txt 2>&1; tl "cb 9b $v $?"
done
TSC_Q4DP_DYN=1 timeout 150 compute-sanitizer --tool memcheck $B/ts_test cuda.q4dp_queue_same_bits > $O/cs_q_mem.log 2>&1; tl "memcheck q $?"
TSC_Q4DP_DYN=1 timeout 120 compute-sanitizer --tool racecheck $B/turbospark bench --backend cuda -m $S/9b --prompt 16 --gen 4 --runs 1 > $O/cs_q_race.log 2>&1; tl "racecheck 9b q $?"
TSC_Q4DP_DYN=1 timeout 200 $B/ts_test cuda_engine > $O/t_engine_q.log 2>&1; tl "cuda_engine under Q $?"
VN=(d q); VE=(X=0 TSC_Q4DP_DYN=1)
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
ab 9b_4k $S/9b 1 --prompt 4096 --gen 128 --runs 2
synth_shape 08b shapes/qwen3.5-0.8B.json
ab 08b $S/08b 1 --prompt 512 --gen 128 --runs 2
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
