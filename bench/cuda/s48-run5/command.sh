#!/bin/bash
# session 48, device call 5. Pack s48e: the build of this commit and its trace turbospark (make -j2
# BUILD=build-cuda CUDA=1 WERROR=-Werror all; make -j2 BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE
# build-cuda-trace/turbospark; PACK_MAIN="turbospark ts_test" bash bench/cuda/pack.sh s48e; slim.sh out-all
# s48-run5, then the fixtures' and the bundled model's weights removed too, for room: this call runs no engine test).
# 1. U (TSC_GDN_NBU=1, a measurement): N's instances without their 64-register bound (74-76 registers, no spill,
#    against 4 bytes of spill). D alone lost 0.35-0.4% on both shapes with 8 bytes of spill; is it the spill or
#    the registers? Its bits first (cuda.gdn_nb2_same_bits under it), then the A/B, interleaved.
#    Prediction: +-0.3%; a win only if the spill sits on the step's chain.
# 2. The engine's traces at the new defaults (9B, 35B-A3B-8L), which failed in s48-run2 with an empty message:
#    backend.cu's ctx_err now carries the context's message to the stream, so a failure says what it is.
PACK=.gpu/s48e/pack.tar.xz . bench/cuda/device_env.sh
TSC_GDN_NBU=1 timeout 120 $B/ts_test cuda.gdn_nb2_same_bits cuda.gdn_digits_same_as_staging > $O/t_nbu.log 2>&1; tl "nbu tests $?"
# (ordered so that a call cut by the session's last seconds of device time still brings back whole rows)
tr() { local n=$1 m=$2; shift 2; env "$@" TSC_TRACE_FILE=$O/te_$n.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $m --prompt 512 --gen 64 --runs 1 > $O/te_$n.log 2>&1; tl "engine trace $n $?"; }
VN=(d nbu); VE=(X=0 TSC_GDN_NBU=1)
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
tr 35b8 $S/35b8 X=0
synth_shape 9b shapes/qwen3.5-9B.json
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
tr 9b $S/9b X=0
ls $O/te_*.txt > /dev/null 2>&1 && xz -T8 $O/te_*.txt
device_end
