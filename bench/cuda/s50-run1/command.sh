#!/bin/bash
# Prepared in session 49, not run (no device time left). Pack s50a: the build of this commit (make -j2
# BUILD=build-cuda CUDA=1 WERROR=-Werror all; PACK_MAIN="turbospark ts_test" bash bench/cuda/pack.sh s50a;
# slim.sh out-all s50-run1). ~120 s of command.
# U (TSC_GDN_NBU=1: k_gdn_fused's N instances without their 64-register bound) was the fastest form on both shapes
# in s49-run1 (35B-A3B-8L +0.4%, 9B +0.2% against the neutral forms), but its bit tests were cut from that call.
# 1. U's bits: the N tests and the engine's parity and drafting tests under it.
# 2. The A/B again, three rounds, the order of the forms alternated (s49-run1 always ran the default first), and MTP 3
#    at forced acceptance under both. If U holds (+0.2% or more on both shapes, bits the same), flip it to the
#    default in gdn.cu (the bound dropped from N's instances; text_cmp against this build's U instances).
PACK=.gpu/s50a/pack.tar.xz . bench/cuda/device_env.sh
TSC_GDN_NBU=1 timeout 120 $B/ts_test cuda.gdn_nb2_same_bits cuda.gdn_digits_same_as_staging cuda.gdn_fused_same_bits > $O/t_nbu.log 2>&1; tl "nbu tests $?"
TSC_GDN_NBU=1 timeout 150 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model > $O/t_engine_nbu.log 2>&1; tl "engine under nbu $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
VN=(d nbu); VE=(X=0 TSC_GDN_NBU=1)
ab 35b8 $S/35b8 1 --prompt 512 --gen 128 --runs 2
ab 9b $S/9b 1 --prompt 512 --gen 128 --runs 2
VN=(nbu d); VE=(TSC_GDN_NBU=1 X=0)
ab 35b8r $S/35b8 2 --prompt 512 --gen 128 --runs 2
ab 9br $S/9b 2 --prompt 512 --gen 128 --runs 2
VN=(d nbu); VE=(X=0 TSC_GDN_NBU=1)
card_mtp
device_end
