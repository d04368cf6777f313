#!/bin/bash
# Session 50, call 2 (pack s50c: the build of 355d3aa, CD and TSC_MOE_CL opt-in (removed again at 1f8cbac), turbospark and the trace build's turbospark_trace: make -j2
# BUILD=build-cuda CUDA=1 WERROR=-Werror all; make -j2 BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE
# build-cuda-trace/turbospark; PACK_MAIN="turbospark ts_test" bash bench/cuda/pack.sh s50c; the tree without its fixtures and
# bundled model: nothing here reads them). Why CD lost 3.1% in s50-run1 (prediction +2-3%):
# 1. TSC_MOE_CL=4: the default gate/up kernel and grid launched in clusters of 4 and nothing else changed. If the
#    cluster launch itself costs the ~4 us a layer, CL=4 loses about as much as CD with a launch more a layer.
# 2. Engine traces (TSC_TRACE_FILE) of the 35B-A3B-8L under d, CL=4 and CD: when the gate/up's blocks start (their
#    early column: residency before the release), their spread, and the tail.
# U is the default in this build (no switch left).
PACK=.gpu/s50c/pack.tar.xz . bench/cuda/device_env.sh
timeout 120 $B/ts_test cuda_engine.moe_cluster_digits_same_bits > $O/t_cd.log 2>&1; tl "cd and cl4 test $?"
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d cl4 cd); VE=(X=0 TSC_MOE_CL=4 TSC_MOE_CD=1)
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
tr() { local n=$1 m=$2; shift 2; env "$@" TSC_TRACE_FILE=$O/te_$n.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $m --prompt 512 --gen 64 --runs 1 > $O/te_$n.log 2>&1; local rc=$?; tl "engine trace $n $rc"; return $rc; }
tr 35b8_d $S/35b8 X=0
tr 35b8_cl4 $S/35b8 TSC_MOE_CL=4
tr 35b8_cd $S/35b8 TSC_MOE_CD=1
ls $O/te_*.txt > /dev/null 2>&1 && xz -T8 $O/te_*.txt
device_end
