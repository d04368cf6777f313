#!/bin/bash
# session 44, device call 2 (pack s44d: PACK_MAIN=turbospark bash bench/cuda/pack.sh s44d, the normal turbospark and
# the trace build's, SASS only: make BUILD=build-cuda-trace CUDA=1 CUDA_ARCH="compute_90 -code=sm_90"
# EXTRA_NVCC_FLAGS=-DTSC_TRACE build-cuda-trace/turbospark; the tree slimmed of models/ and tests/fixtures/ as well,
# which this call does not read): where a decode step's time goes at the session's defaults, the engine's own graph
# traced (backend.cu's trace_this_replay; read with bench/cuda/trace_view.py --kernels): the 35B-A3B-8L with and
# without the router's early weights (TSC_LIN_PRE=1) and the 9B. No prediction: measurements (the trace build runs
# ~3-5% slower than the shipped one); the normal build's figures beside them.
PACK=.gpu/s44d/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
synth_shape 9b shapes/qwen3.5-9B.json
tr() { local n=$1 m=$2; shift 2; env "$@" TSC_TRACE_FILE=$O/te_$n.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $m --prompt 512 --gen 64 --runs 1 > $O/te_$n.log 2>&1; tl "engine trace $n $?"; }
tr 35b8 $S/35b8 X=0
tr 35b8_lp $S/35b8 TSC_LIN_PRE=1
tr 35b8_g0 $S/35b8 TSC_MOE_GUDIG=0
tr 9b $S/9b X=0
xz -T8 $O/te_*.txt
VN=(d lp); VE=(X=0 TSC_LIN_PRE=1)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
device_end
