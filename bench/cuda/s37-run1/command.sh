#!/bin/bash
# session 37, device call 1 (pack s37a of this commit's tree): a MoE layer one launch shorter (TSC_MOE_SHGU=1,
# opt-in): the bf16 router stages its input norm itself (tsc_linear_addnorm's plain form) and the shared expert's
# gate/up rows are slot k of the routed gate/up launch (q4dp_moe's srw), whose output the down reads in place.
# Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s37a;
# bench/cuda/slim.sh out-all s37-run1; carry .gpu/s37a.
# Floors and prediction (35B-A3B-8L, H200). The launch removed: the shared gate/up, 64 blocks, ~1.2 MB (0.3 us at
# the probe) in ~6 us (session 26's engine trace) plus a PDL hop (~0.7 us), on the chain of every MoE layer. Added:
# the router's staging of the norm (x and add from L2, a block sum: ~1-1.5 us on the chain, as k_q4dp's one-pass
# normed staging), 1 MB of shared rows in the routed gate/up launch (its virtual blocks 256 -> 288 over 264 slots
# at two blocks an SM: a partial second round, ~1-2 us, unless three blocks fit an SM). Net -3..-5 us a MoE layer,
# 8 a step of ~488 us: 35B-A3B-8L decode +5..+8% (2,048 -> ~2,150-2,210 tok/s on an H200); 66 graph kernels, not 74.
PACK=.gpu/s37a/pack.tar.xz . bench/cuda/device_env.sh
X1=TSC_MOE_SHGU=1
timeout 60 $B/ts_test cuda.addnorm_plain_same_bits cuda_engine.moe_shgu_one_launch_fewer_and_exact > $O/t_new.log 2>&1; tl "new tests $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.addnorm_plain_same_bits > $O/memcheck.log 2>&1; tl "memcheck $?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 $B/ts_test cuda.addnorm_plain_same_bits > $O/racecheck.log 2>&1; tl "racecheck $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d sh sh2); VE=(X=0 $X1 TSC_MOE_SHGU=2)
ab 35b8 $S/35b8 3 --prompt 512 --gen 128 --runs 2
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
env $X1 timeout 150 $B/ts_test cuda_engine > $O/t_engine_sh.log 2>&1; tl "ts_test cuda_engine under SHGU $?"
device_end
