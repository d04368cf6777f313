#!/bin/bash
# session 19, device call 4: the GDN step in one kernel (k_gdn_fused, TSC_GDN_FUSED=1) and the attention split's
# lane-a-key scores (TSC_ATTN_KV=2), alone and together, against the defaults: tests first (bit-identical to prep +
# scan, engine forms, the new attention form against the CPU reference), then cuda_bench and the engine,
# interleaved; cuda_engine with both on; memcheck and racecheck on the fused kernel.
PACK=.gpu/s19d/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
cb() { local n=$1; shift; env "$@" $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2 3; do cb def_$r X=1; cb fu_$r TSC_GDN_FUSED=1; cb lk_$r TSC_ATTN_KV=2; cb fulk_$r TSC_GDN_FUSED=1 TSC_ATTN_KV=2; cb nogdn_$r CB_GDN=1; done
cb 08_def X=1; cb 08_fulk TSC_GDN_FUSED=1 TSC_ATTN_KV=2
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
G="--prompt 512 --gen 128 --runs 2"
FL="TSC_GDN_FUSED=1 TSC_ATTN_KV=2"
for r in a b; do
  bj 9b_def_$r X=1 $S/9b $G
  bj 9b_fu_$r TSC_GDN_FUSED=1 $S/9b $G
  bj 9b_lk_$r TSC_ATTN_KV=2 $S/9b $G
  bj 9b_fulk_$r "$FL" $S/9b $G
  bj 35b8_def_$r X=1 $S/35b8 $G
  bj 35b8_fulk_$r "$FL" $S/35b8 $G
  bj def_def_$r X=1 models/default $G
  bj def_fulk_$r "$FL" models/default $G
done
bj 9b_mtp3_def X=1 $S/9b $G --spec mtp --draft 3
bj 9b_mtp3_fulk "$FL" $S/9b $G --spec mtp --draft 3
bj def_mtp3_def X=1 models/default $G --spec mtp --draft 3
bj def_mtp3_fulk "$FL" models/default $G --spec mtp --draft 3
bj 9b_p4k_def X=1 $S/9b --prompt 4096 --gen 128 --runs 1
bj 9b_p4k_fulk "$FL" $S/9b --prompt 4096 --gen 128 --runs 1
env $FL timeout 200 $B/ts_test cuda_engine > $O/eng_fulk.log 2>&1; tl "ts_test cuda_engine fulk $?"
timeout 60 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_fused_same_bits > $O/memcheck_gdn.log 2>&1; tl "memcheck $?"
timeout 120 compute-sanitizer --tool racecheck $B/ts_test cuda.gdn_fused_same_bits > $O/racecheck_gdn.log 2>&1; tl "racecheck $?"
device_end
