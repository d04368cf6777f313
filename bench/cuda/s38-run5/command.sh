#!/bin/bash
# session 38, device call 5 (pack s38d: the normal build of this commit): k_gdn_fused's B (TSC_GDN_BAR=1): its
# global stores (the state, o) after the cluster barriers instead of before them, the last barrier split into a
# relaxed arrive and a wait before leaving. s38-run4's phase records (H100, one row): release -> conv + norms 1.95 us,
# scan 0.64, first cluster barrier 0.8-1.2, o + state stores + second barrier 1.44-1.6, digits + third barrier 1.15;
# 6.2-6.6 us a block. Prediction: the last two phases -0.5..-1 us a GDN layer, 9B +1-1.3%, 35B-A3B-8L +0.6-1.2%.
# Tests: the GDN tests and the engine suite under B, memcheck and racecheck on the fused test under B.
PACK=.gpu/s38d/pack.tar.xz . bench/cuda/device_env.sh
GT="cuda.gdn_step_parity_and_row_exact cuda.gdn_digits_same_as_staging cuda.gdn_step_engine_forms cuda.gdn_fused_same_bits"
TSC_GDN_BAR=1 timeout 120 $B/ts_test $GT > $O/t_gdn_b.log 2>&1; tl "gdn tests under B $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d bar); VE=(X=0 TSC_GDN_BAR=1)
ab 9b $S/9b 3 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
ab 9b_mtp3 $S/9b 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
TSC_GDN_BAR=1 timeout 150 $B/ts_test cuda_engine > $O/t_engine_b.log 2>&1; tl "cuda_engine under B $?"
TSC_GDN_BAR=1 timeout 80 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_fused_same_bits > $O/cs_gdn_mem.log 2>&1; tl "memcheck gdn B $?"
TSC_GDN_BAR=1 timeout 80 compute-sanitizer --tool racecheck $B/ts_test cuda.gdn_fused_same_bits > $O/cs_gdn_race.log 2>&1; tl "racecheck gdn B $?"
device_end
