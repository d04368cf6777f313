#!/bin/bash
# session 48, device call 3. Pack s48c: the build of this commit (make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror
# all; PACK_MAIN="turbospark ts_test" bash bench/cuda/pack.sh s48c; slim.sh out-all s48-run3).
# Why: s48-run2 (H100) padded k_gdn_fused's launch with unused dynamic shared memory: +8 KB cost the 35B-A3B-8L
# 1.2% (2,263.4 -> 2,235.3 tok/s) and +16 KB 1.6%, the 9B 0.1% and 1.0%; N (+8 KB with one barrier fewer) was
# again 9B +0.5%, 35B-A3B-8L -0.3%. So the step's footprint weighs on the launches beside it.
# 1. k_gdn_fused's D (TSC_GDN_DSM=1): the per-row shared arrays sized by the launch's rows, 24,960 -> ~3.6 KB
#    a block for one row (33,088 -> ~4 KB with N), 64 registers (4-8 bytes of spill). Its tests first
#    (cuda.gdn_dsm_same_bits: D, D without digits, D with N, each against the default form bit for bit), memcheck
#    and racecheck on them, the engine's parity and drafting under D and under D + N.
#    Floors: nothing in bytes or operations changes. Prediction: 35B-A3B-8L +0.5..2%, 9B +0..0.5%; with N on top,
#    N's +0.8% on the 9B without its loss on the 35B-A3B-8L.
# 2. The A/B, interleaved: d, D, N, D + N; MTP 3 at forced acceptance; the 40-layer 35B-A3B under d and D + N.
PACK=.gpu/s48c/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda.gdn_dsm_same_bits cuda.gdn_nb2_same_bits cuda.gdn_fused_same_bits cuda.gdn_digits_same_as_staging cuda.gdn_step_engine_forms > $O/t_dsm.log 2>&1; tl "dsm tests $?"
for f in 0 1; do
  TSC_GDN_DSM=1 TSC_GDN_NB2=$f timeout 150 $B/ts_test cuda_engine.spec_greedy_exact_fixtures cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_default_model > $O/t_engine_dsm_nb$f.log 2>&1; tl "engine dsm nb2=$f $?"
done
VN=(d dsm nb2 dsmnb2); VE=(X=0 TSC_GDN_DSM=1 TSC_GDN_NB2=1 "TSC_GDN_DSM=1 TSC_GDN_NB2=1")
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
ab 35b8 $S/35b8 3 --prompt 512 --gen 128 --runs 2
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
card_mtp
timeout 150 compute-sanitizer --tool memcheck $B/ts_test cuda.gdn_dsm_same_bits > $O/cs_mem_dsm.log 2>&1; tl "memcheck dsm $?"
timeout 200 compute-sanitizer --tool racecheck $B/ts_test cuda.gdn_dsm_same_bits > $O/cs_race_dsm.log 2>&1; tl "racecheck dsm $?"
VN=(d dsmnb2); VE=(X=0 "TSC_GDN_DSM=1 TSC_GDN_NB2=1")
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 1 --prompt 512 --gen 128 --runs 2
device_end
