#!/bin/bash
# session 48, device call 5 (not run in session 48: its device time ran out). Pack s48e: the build of this commit and its trace turbospark (make -j2
# BUILD=build-cuda CUDA=1 WERROR=-Werror all; make -j2 BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE
# build-cuda-trace/turbospark; PACK_MAIN="turbospark ts_test" bash bench/cuda/pack.sh s48e; slim.sh out-all
# s48-run5, then the fixtures' and the bundled model's weights removed too, for room: this call runs no engine test).
# 1. U (TSC_GDN_NBU=1, a measurement): N's instances without their 64-register bound (74-76 registers, no spill,
#    against 4 bytes of spill). D alone lost 0.35-0.4% on both shapes with 8 bytes of spill; is it the spill or
#    the registers? Its bits first (cuda.gdn_nb2_same_bits under it), then the A/B, interleaved.
#    Prediction: +-0.3%; a win only if the spill sits on the step's chain.
# 3. The attention combine's footprint (TSC_ATTN_PAD=8192, a measurement like s48-run2's TSC_GDN_PAD): its
#    8,336 bytes of static shared memory are sized for 1,024 splits; its nq x rows blocks sit on a few SMs just
#    before o_proj's persistent grid. If 8 KB more costs, shrinking it (splits sized by the context) may pay.
#    Prediction: under 0.3% either way (2 of the 35B-A3B-8L's 8 layers, 8 of the 9B's 32; 16-32 blocks).
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
VN=(d apad8); VE=(X=0 TSC_ATTN_PAD=8192)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ls $O/te_*.txt > /dev/null 2>&1 && xz -T8 $O/te_*.txt
device_end
