#!/bin/bash
# session 37, device call 4 (pack s37d of this commit's tree): a verify pass's router stages its rows' norms at once
# (linear.cu's norm_stage_rows1: every row's loads in flight, the NR sums of squares through one barrier; the same
# bits; TSC_NORM_ROWS1=0 the row-at-a-time staging of calls 1-3).
# Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s37d;
# bench/cuda/slim.sh out-all s37-run4; carry .gpu/s37d.
# Floors and prediction: a 4-row router launch's staging was 4 x (an L2 round trip ~0.6-1 us + a block sum ~0.3
# us) in turn, now ~1 of each: -2.5..-4 us a MoE layer of a 4-row verify, 8 a 35B-A3B-8L pass: verify 0.957 ms
# (call 3, H100) -> ~0.93-0.94, MTP 3 at forced acceptance +1-2%; one-row decode untouched (NR = 1 keeps its path).
PACK=.gpu/s37d/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.addnorm_plain_same_bits > $O/t_new.log 2>&1; tl "norm test $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda.addnorm_plain_same_bits > $O/memcheck.log 2>&1; tl "memcheck $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d r0); VE=(X=0 TSC_NORM_ROWS1=0)
ab 35b8_mtp3 $S/35b8 2 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
device_end
