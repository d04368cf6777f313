#!/bin/bash
# session 26, device call 2 (pack s26a: the tree after the losses of sessions 24-25 were removed, commit in
# RESULTS): the whole GPU test suite (ts_test cuda, cuda_engine) on the final sources, then the figures of record
# (cuda_bench 9B and 35B-A3B-8L; engine decode 9B / 35B-A3B-8L / default model, two runs each; MTP 3 at forced
# acceptance 0.8/0.6/0.5 on both). Every remaining kernel's machine code is aac592a's (text_cmp), so the figures
# should equal s26-run1's default rows. (~220 s)
PACK=.gpu/s26a/pack.tar.xz . bench/cuda/device_env.sh
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
$B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_9b.txt 2>&1; tl "cb 9b $?"
$B/cuda_bench --shape 35b8 --mlx --digits 1 > $O/cb_35b8.txt 2>&1; tl "cb 35b8 $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  bj 9b_dec_$r "X=1" $S/9b --prompt 512 --gen 128 --runs 2
  bj 35b8_dec_$r "X=1" $S/35b8 --prompt 512 --gen 128 --runs 2
  bj def_dec_$r "X=1" models/default --prompt 512 --gen 128 --runs 2
done
bj 9b_mtp3 "X=1" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj 35b8_mtp3 "X=1" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
device_end
