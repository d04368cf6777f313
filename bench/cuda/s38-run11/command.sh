#!/bin/bash
# NOT RUN (written at the end of session 38 for the next session; its device time was spent). Build at HEAD: the
# normal build (make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all) and the trace build (make -j2
# BUILD=build-cuda-trace CUDA=1 EXTRA_NVCC_FLAGS=-DTSC_TRACE build-cuda-trace/cuda_bench build-cuda-trace/turbospark);
# bench/cuda/pack.sh s39a (both builds: ~39 MB, so take the fixtures' and models' safetensors out of the tree for
# this call besides slim.sh out-all s38-run11; restore with git checkout HEAD -- models tests/fixtures); carry
# .gpu/s39a. Asks for nothing new in the code:
# (1) the carveout default (s38-run9: +1.7-2.0% on H100s) against TSC_CARVE=-1 on whatever card comes (an H200 is the
#     acceptance's card; the session had none left for it);
# (2) the 9B's and 35B-A3B-8L's engine graphs traced at the defaults: did the down's 2.5 us release after the SwiGLU
#     staging close with the carveout (trace_view.py --kernels), and the GDN step's phases under B (--gdn).
PACK=.gpu/s39a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d old); VE=(X=0 TSC_CARVE=-1)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
TSC_TRACE_FILE=$O/te_9b.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b.log 2>&1; tl "trace 9b $?"
TSC_CARVE=-1 TSC_TRACE_FILE=$O/te_9b_c1.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b_c1.log 2>&1; tl "trace 9b no carveout $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "trace 35b8 $?"
xz -T8 $O/t*_*.txt; tl "xz $?"
device_end
