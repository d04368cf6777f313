#!/bin/bash
# session 38, device call 4 (pack s38c: the normal and the trace build of this commit; the GDN hoist and the route
# network now the defaults): (1) the trace build's new GDN phase records (k_gdn_fused: release, conv + norms, scan,
# each cluster barrier, end; "G" lines) in the engine's 9B and 35B-A3B-8L graphs, to see where its 6-8.6 us go;
# (2) the 9B's down after the SwiGLU staging, released 2.5 us after that launch ends (s38-run1; not the down's L2
# prefetch: TSC_Q4DP_NPF=1 changed nothing in s38-run3): traced and timed with TSC_Q4DP_DX=0 (the digits copied
# into every block instead of read where they lie) to see whether the DX form is what waits. No prediction.
PACK=.gpu/s38c/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_TRACE_FILE=$O/te_9b.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b.log 2>&1; tl "trace 9b $?"
TSC_Q4DP_DX=0 TSC_TRACE_FILE=$O/te_9b_dx0.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b_dx0.log 2>&1; tl "trace 9b dx0 $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "trace 35b8 $?"
VN=(d dx0); VE=(X=0 TSC_Q4DP_DX=0)
ab 9b $S/9b 2 --prompt 512 --gen 128 --runs 2
bj 35b8_d_a X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
xz -T8 $O/t*_*.txt; tl "xz $?"
device_end
