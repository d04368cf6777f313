#!/bin/bash
# session 38, device call 7 (pack s38e, as call 6: the final tree's kernels; the commits after it change host code of
# no kernel it runs but a trace-only record): TSC_CARVE=P (ctx.cu, no build needed): one preferred shared-memory
# carveout for every persistent product kernel. Why: s38-run4's traces put the 9B's down's blocks on their SMs only
# after the SwiGLU staging launch had ended, and with the DX form (no dynamic shared memory) its release 1.2 us later
# than with the copied digits (TSC_Q4DP_DX=0): a kernel whose carveout differs from its neighbour's waits for the SM
# to drain. Session 17 measured 100 (all shared memory) a loss; this call, smaller shares. No prediction of size.
PACK=.gpu/s38e/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
VN=(d c0 c25 c50); VE=(X=0 TSC_CARVE=0 TSC_CARVE=25 TSC_CARVE=50)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
ab 35b8 $S/35b8 2 --prompt 512 --gen 128 --runs 2
device_end
