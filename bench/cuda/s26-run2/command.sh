#!/bin/bash
# session 26, device call 2 (pack s26a: the tree after the losses of sessions 24-25 were removed, commit in
# RESULTS): the whole GPU test suite (ts_test cuda, cuda_engine) on the final sources, then the figures of record
# (cuda_bench 9B and 35B-A3B-8L; engine decode 9B / 35B-A3B-8L / default model, two runs each; MTP 3 at forced
# acceptance 0.8/0.6/0.5 on both). Every remaining kernel's machine code is aac592a's (text_cmp), so the figures
# should equal s26-run1's default rows. Then syncfloor (s26-run3 has it too, for a call that cannot carry both). (~250 s)
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
# syncfloor (bench/cuda/syncfloor.cu, built on the host with nvcc -O3 -std=c++17 -arch=sm_90, carried beside the
# pack): the products' bytes as a chain of plain reads under each ordering, at 2, 1 and 4 blocks an SM
cp .gpu/s26a/syncfloor /tmp/syncfloor && chmod +x /tmp/syncfloor
for b in 2 1 4; do timeout 60 /tmp/syncfloor 0 $b > $O/syncfloor_$b.txt 2>&1; tl "syncfloor $b $?"; done
device_end
