#!/bin/bash
# session 31, device call 4: (a) the run-ahead step's small copies as kernels on mapped pinned memory (k_rec_in reads
# the step record, k_id_out writes the id's ticket) instead of copy operations: s31-run3 (H100) put a one-launch
# run-ahead 9B token at 2.3625 ms against the old graph's 2.321 ms replay (session 30), ~40 us for six small
# operations; TSC_AHEAD_COPY=1 keeps the copies (the A/B). Prediction: -5..-15 us a token (9B +0.3-0.6%, default
# model +2-5%). (b) MTP drafts chained on the device (mtp_draft.c's mtp_propose_chain; issue 17's "no host round trip
# per draft"), used where the session runs ahead (TS_AHEAD=0: one draft at a time, as before). Prediction: 9B MTP 3
# forced +0.5-1.5%, default MTP 2 +2-4%.
# Pack s31c: branch ahead at this commit (make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all; bench/cuda/pack.sh
# s31c). Carry .gpu/s31c (bench/cuda/slim.sh out-all s31-run4 first).
PACK=.gpu/s31c/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b c; do
  for v in d c1 a0; do
    case $v in d) ev=X=0 ;; c1) ev=TSC_AHEAD_COPY=1 ;; a0) ev=TS_AHEAD=0 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
  done
done
for r in a b; do
  for v in d a0; do
    case $v in d) ev=X=0 ;; a0) ev=TS_AHEAD=0 ;; esac
    bj 9b_mtp3_${v}_$r "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    bj 35b8_mtp3_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
    bj def_mtp2_${v}_$r "$ev" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
    bj def_mtp4_${v}_$r "$ev" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 4
  done
done
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m models/default --json --prompt 512 --gen 128 --runs 1 > $O/e_def_optime.json 2> $O/e_def_optime.err; tl "optime def $?"
TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $S/9b --json --prompt 512 --gen 128 --runs 1 > $O/e_9b_optime.json 2> $O/e_9b_optime.err; tl "optime 9b $?"
timeout 200 $B/ts_test cuda_engine.ahead_exact cuda_engine.mtp_chain_same_drafts > $O/t_ahead.log 2>&1; tl "ts_test ahead $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.mtp_chain_same_drafts cuda_engine.ahead_exact > $O/memcheck_ahead.log 2>&1; tl "memcheck ahead $?"
device_end
