#!/bin/bash
# session 48, device call 4. Pack s48d: the build of this commit (make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror
# all; PACK_MAIN="turbospark ts_test cuda_bench" bash bench/cuda/pack.sh s48d; slim.sh out-all s48-run4).
# The new default, N with D (k_gdn_fused: one cluster barrier fewer, per-row shared arrays sized by the launch;
# s48-run3's winner, whose machine code this build keeps: text_cmp against that build, 41 kernels the same, the
# 12 it measured and lost with gone), checked and measured as the default:
# 1. the GPU kernel group (every op against the CPU reference) and the engine's parity and drafting tests;
# 2. the acceptance card at the new defaults (card: 9B and 35B-A3B-8L two rounds, cuda_bench's 9B, MTP 3 at
#    forced acceptance), then the A/B against the previous default (TSC_GDN_NB2=0), interleaved, and the 40-layer
#    35B-A3B under both.
PACK=.gpu/s48d/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 150 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model > $O/t_engine.log 2>&1; tl "engine $?"
card
VN=(old new); VE=(TSC_GDN_NB2=0 X=0)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
