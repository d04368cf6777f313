#!/bin/bash
# session 31, device call 5: the GDN kernel (gdn.cu's k_gdn_fused) reads the step record's choice of buffers (sel,
# the parities) before its PDL wait, not after it: the record was written before the pass began, and its loads'
# latency preceded the state's loads in every pass that uses the pairs (verify, a run-ahead step, a drafting
# session's decode). s31-run4 (H100) put the 9B's one-launch run-ahead token ~40 us above the old in-place graph,
# ~30 us more than the default model's for the same six small operations: ~1 us a GDN layer (24).
# Prediction: 9B run-ahead decode -15..-25 us a token (+0.6-1%), 35B-A3B-8L -4..-6 us (+0.7-1%), 9B MTP 3 verify
# -10..-25 us a block. Pack s31d: branch ahead at this commit, with s31c's turbospark (call 4's binary) as
# build-cuda-ref/turbospark; make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, bench/cuda/pack.sh s31d.
# Carry .gpu/s31d (bench/cuda/slim.sh out-all s31-run5 first).
PACK=.gpu/s31d/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bjr() { local n=$1 ev=$2 m=$3; shift 3; env $ev $B/turbospark_ref bench --backend cuda -m "$m" --json "$@" > "$O/e_$n.json" 2>>"$O/e_err.log"; tl "e_$n rc $?"; }
for r in a b c; do
  for v in d r; do
    f=bj; [ $v = r ] && f=bjr
    $f 9b_${v}_$r X=0 $S/9b --prompt 512 --gen 128 --runs 2
    $f 35b8_${v}_$r X=0 $S/35b8 --prompt 512 --gen 128 --runs 2
    $f def_${v}_$r X=0 models/default --prompt 512 --gen 128 --runs 2
  done
done
for r in a b; do
  for v in d r; do
    f=bj; [ $v = r ] && f=bjr
    $f 9b_mtp3_${v}_$r X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    $f 35b8_mtp3_${v}_$r X=0 $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
  done
done
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.spec_rollback_device_state_bit_exact cuda_engine.ahead_exact > $O/memcheck.log 2>&1; tl "memcheck $?"
device_end
