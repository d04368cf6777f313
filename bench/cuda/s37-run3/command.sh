#!/bin/bash
# session 37, device call 3 (pack s37c of this commit's tree): the final tree. The route tail of call 2 is removed
# (a loss on that H100: 1,928 against 1,961 tok/s with the route kernel); the MoE short form stays the default
# (the router stages the norm, the shared gate/up in the routed launch at U = 1). Asked for on an H200 (the
# acceptance's card). Build: make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh s37c;
# bench/cuda/slim.sh out-all s37-run3; carry .gpu/s37c.
# Prediction: as call 1's "sh2" column on an H200 (35B-A3B-8L 2,144 against 2,048), call 2's "rk" on an H100
# (1,961 against 1,883); the 40-layer 35B-A3B +3-5% (40 MoE layers of the same kind); the 9B and the default model
# unchanged (no MoE layer).
PACK=.gpu/s37c/pack.tar.xz . bench/cuda/device_env.sh
timeout 60 $B/ts_test cuda.addnorm_plain_same_bits cuda_engine.moe_shgu_one_launch_fewer_and_exact > $O/t_new.log 2>&1; tl "new tests $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
VN=(d old); VE=(X=0 TSC_MOE_SHGU=0)
ab 35b8 $S/35b8 3 --prompt 512 --gen 128 --runs 2
ab 35b8_mtp3 $S/35b8 1 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 9b_d_a X=0 $S/9b --prompt 512 --gen 128 --runs 2
bj def_d_a X=0 models/default --prompt 512 --gen 128 --runs 2
timeout 150 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
synth_shape 35b shapes/qwen3.5-35B-A3B.json
ab 35b $S/35b 2 --prompt 512 --gen 128 --runs 2
device_end
