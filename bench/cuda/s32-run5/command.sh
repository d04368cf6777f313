#!/bin/bash
# NOT RUN: the session's device budget ran out (149 s left, no start allowed) before this call; the two paths it
# would have combined were each measured in s32-run4 (decode with the GDN digits, verify without: TSC_GDN_DIG=0).
# session 32, device call 5 (the budget's last ~180 s): the GDN digits for one-row passes only (s32-run4's verify
# lost 1.5% with them on every row count). Pack s32e = the tree to merge. The engine's exactness tests that cover
# the change, then the 9B's MTP 3 at forced acceptance and plain decode against TSC_GDN_DIG=0, one round.
# Prediction: verify back at s32-run4's TSC_GDN_DIG=0 figure (~3.22 ms a block), decode at its default (+1.2%).
PACK=.gpu/s32e/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
bj 9b_mtp3_d X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_mtp3_g0 TSC_GDN_DIG=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
timeout 60 $B/ts_test cuda_engine.ahead_exact cuda_engine.spec_greedy_exact_default_model cuda_engine.spec_greedy_exact_fixtures > $O/t_engine.log 2>&1; tl "engine tests $?"
device_end
