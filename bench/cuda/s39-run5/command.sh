#!/bin/bash
# NOT RUN (session 39 had no device time left for it; the trace build must be rebuilt at the commit it is run from).
# session 39, device call 5 (pack s39e: the trace build of 44d2afc: the kernels of the defaults after s39-run3, EA
# and R1 on; this call's tree lacks models/ and the fixtures' safetensors, for the trace binaries' room): the 9B's
# and 35B-A3B-8L's engine graphs traced at the defaults (bench/cuda/trace_view.py --kernels / --gdn), for where a
# step's time goes now: the attention's three kernels after EA and R1, the FFN down's release after the SwiGLU
# staging with the carveout (2.5 us in s38-run4, before it), the GDN step's phases.
PACK=.gpu/s39e/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
TSC_TRACE_FILE=$O/te_9b.txt $B/turbospark_trace bench --backend cuda -m $S/9b --prompt 512 --gen 64 --runs 1 > $O/te_9b.log 2>&1; tl "trace 9b $?"
TSC_TRACE_FILE=$O/te_35b8.txt $B/turbospark_trace bench --backend cuda -m $S/35b8 --prompt 512 --gen 64 --runs 1 > $O/te_35b8.log 2>&1; tl "trace 35b8 $?"
xz -T8 $O/te_*.txt; tl "xz $?"
device_end
