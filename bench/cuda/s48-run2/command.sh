#!/bin/bash
# session 48, device call 2. Pack s48b: the build of this commit (make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror
# all) and its trace turbospark (make BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE
# build-cuda-trace/turbospark); PACK_MAIN=turbospark bash bench/cuda/pack.sh s48b; slim.sh out-all s48-run2.
# Why: s48-run1 (H100) measured k_gdn_fused's N (TSC_GDN_NB2=1) at 9B +0.8% (469.1 -> 472.9 tok/s) but
# 35B-A3B-8L -0.4% (2,264.4 -> 2,254.9), both two rounds, d first in each. The GDN step is the same kernel on
# both shapes (Hk 16, Hv 32, 128 x 128 heads, group 64), so the 35B-A3B-8L's loss is in its neighbours.
# N has 8 KB more static shared memory (33,088 against 24,960 bytes a block; ptxas), which decides how many
# of the next launch's blocks fit beside it while it runs.
# 1. The engine's trace of both shapes under both forms (trace_view.py --kernels / --gdn): which launch pays.
# 2. The A/B again, order reversed (N first), with the default padded to N's footprint (TSC_GDN_PAD=8128: no
#    code path changes, only the launch's dynamic shared memory) and to 16 KB more: if the pad alone costs
#    the 35B-A3B-8L what N does, the footprint is the cause and N's silu(z) buffer must shrink.
PACK=.gpu/s48b/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
tr() { local n=$1 m=$2; shift 2; env "$@" TSC_TRACE_FILE=$O/te_$n.txt timeout 60 $B/turbospark_trace bench --backend cuda -m $m --prompt 512 --gen 64 --runs 1 > $O/te_$n.log 2>&1; tl "engine trace $n $?"; }
tr 35b8_d $S/35b8 X=0
tr 35b8_nb2 $S/35b8 TSC_GDN_NB2=1
tr 9b_d $S/9b X=0
tr 9b_nb2 $S/9b TSC_GDN_NB2=1
xz -T8 $O/te_*.txt
VN=(nb2 d pad8 pad16); VE=(TSC_GDN_NB2=1 X=0 TSC_GDN_PAD=8128 TSC_GDN_PAD=16384)
ab 35b8 $S/35b8 3 --prompt 512 --gen 128 --runs 2
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
device_end
