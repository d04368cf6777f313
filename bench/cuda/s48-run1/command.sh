#!/bin/bash
# session 48, device call 1 (written in session 47, not yet run). Pack: the build of 9133f0f or later (src/ as of
# that commit): make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; PACK_MAIN="turbospark ts_test cuda_bench"
# bash bench/cuda/pack.sh s48a; bash bench/cuda/slim.sh out-all s48-run1; carry .gpu/s48a.
# 1. k_gdn_fused's N (TSC_GDN_NB2=1, gdn.cu's gdn_out_nb): with out_proj's digits, one cluster barrier fewer, the
#    same bits. Its tests first (cuda.gdn_nb2_same_bits against two barriers; gdn_digits_same_as_staging under both
#    forms), memcheck and racecheck on them, the engine's parity and drafting tests under it.
#    Why (s44-run2's trace of the 9B on an H100, bench/cuda/trace_view.py --gdn): of the step's ~5.6 us a block,
#    "o + barrier 2" 1.12 us and "digits + barrier 3" 1.12; the 35B-A3B-8L 0.96 and 1.15.
#    Floors: nothing new in bytes (a row's gb - 1 remote loads of 4 bytes a lane, (gb - 1) x 32 more silu(z)).
#    Prediction: -0.5..-1 us a GDN layer: the 9B +0.5..1% (24 GDN layers), the 35B-A3B-8L +0.3..0.8% (6 of 8).
# 2. The A/B, interleaved, two rounds each; MTP 3 at forced acceptance on both (one-row drafting passes take N).
# 3. If the card is an H200: this is also the acceptance card at the current defaults (the "d" rows), which no
#    H200 has measured since GUDIG and LIN_PRE; the 40-layer 35B-A3B last.
PACK=.gpu/s48a/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda.gdn_nb2_same_bits cuda.gdn_digits_same_as_staging cuda.gdn_fused_same_bits > $O/t_nb2.log 2>&1; tl "nb2 tests $?"
timeout 150 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_nb2_same_bits > $O/cs_mem_nb2.log 2>&1; tl "memcheck nb2 $?"
timeout 200 compute-sanitizer --tool racecheck $B/ts_test cuda.gdn_nb2_same_bits > $O/cs_race_nb2.log 2>&1; tl "racecheck nb2 $?"
TSC_GDN_NB2=1 timeout 120 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model > $O/t_engine_nb2.log 2>&1; tl "engine nb2 $?"
VN=(d nb2); VE=(X=0 TSC_GDN_NB2=1)
card_decode
card_mtp
abcb 9b 1 --shape 9b --mlx --digits 1
VN=(d); VE=(X=0)
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
