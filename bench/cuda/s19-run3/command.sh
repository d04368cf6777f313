#!/bin/bash
# session 19, device call 3: (1) is today's slower 9B step (2.26 ms against session 17's 2.04) this machine or the
# code? session 17's last binaries (.gpu/s17f, built after 43ce111) against this tree's, interleaved, with the
# clocks sampled while they run; (2) where the step's time between products goes, inside the graph: cuda_bench's
# CB_ATTN=1 (attention prep only) / 2 (split + combine only) / 3 (no attention), CB_GDN=1 (no GDN step), each
# against the whole step (the left-out kernels' cost), with the split's two forms (TSC_ATTN_KV=1, 2).
# The carried tree has no tests/fixtures (no test runs here; 64 MiB).
PACK=.gpu/s19c/pack.tar.xz . bench/cuda/device_env.sh
B17=/tmp/b17
nvidia-smi -q -d CLOCK,PERFORMANCE,POWER > $O/smi_q.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 200 > $O/smi_watch.csv 2>&1 &
W=$!
cbx() { local n=$1 bin=$2; shift 2; env "$@" $bin --shape 9b --mlx --digits 1 > $O/cb_$n.txt 2>&1; tl "cb $n $?"; }
for r in 1 2 3; do cbx s17_$r $B17/cuda_bench X=1; cbx now_$r $B/cuda_bench X=1; done
synth_shape 9b shapes/qwen3.5-9B.json
for r in a b; do
  $B17/turbospark bench --backend cuda -m $S/9b --prompt 512 --gen 128 --runs 2 --json > $O/e_9b_s17_$r.json 2>>$O/e_err.log; tl "e s17 $r $?"
  bj 9b_now_$r X=1 $S/9b --prompt 512 --gen 128 --runs 2
done
kill $W
for r in 1 2; do
  cbx full_$r $B/cuda_bench X=1
  cbx prep_$r $B/cuda_bench CB_ATTN=1
  cbx sc_$r $B/cuda_bench CB_ATTN=2
  cbx noattn_$r $B/cuda_bench CB_ATTN=3
  cbx nogdn_$r $B/cuda_bench CB_GDN=1
  cbx none_$r $B/cuda_bench CB_ATTN=3 CB_GDN=1
  cbx lk_$r $B/cuda_bench TSC_ATTN_KV=2
  cbx lksc_$r $B/cuda_bench TSC_ATTN_KV=2 CB_ATTN=2
done
device_end
