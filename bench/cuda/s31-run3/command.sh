#!/bin/bash
# session 31, device call 3: the run-ahead step as one graph launch. s31-run2 (H200) measured run-ahead at +0..0.3%
# on the 9B, +0.8-3% on 35B-A3B-8L and +3-4% on the default model, short of the prediction: the host's part was
# hidden, but a token's device timeline still held six operations outside the graph (the record's copy, the
# embedding, the hidden's copy, two argmax kernels, the id's copy: TSC_OPTIME's replay 1.992 ms against 2.017 a 9B
# token, 0.228 against 0.2455 on the default model). Now the run-ahead pass's graph holds its embedding (the id is
# the device's; the backend writes the step record into the graph's pinned record at each launch), its final norm
# straight into its hidden row, and its argmax and the ticket's copy; a token is one launch and an event.
# Pack s31b: branch ahead at this commit, make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, with s31a's
# turbospark (s31-run2's binary) as build-cuda-ref/turbospark, bench/cuda/pack.sh s31b. Carry .gpu/s31b
# (bench/cuda/slim.sh out-all s31-run3 first).
# Prediction: 9B ~ +1% over s31a (2.017 -> ~1.995 ms), 35B-A3B-8L +3-4% (0.517 -> ~0.497), default +5-7%
# (0.2455 -> ~0.23).
PACK=.gpu/s31b/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bjr() { local n=$1 ev=$2 m=$3; shift 3; env $ev $B/turbospark_ref bench --backend cuda -m "$m" --json "$@" > "$O/e_$n.json" 2>>"$O/e_err.log"; tl "e_$n rc $?"; }
for r in a b c; do
  for v in d r a0; do
    case $v in d) ev=X=0 ;; r) ev=X=0 ;; a0) ev=TS_AHEAD=0 ;; esac
    f=bj; [ $v = r ] && f=bjr
    $f 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    $f 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
    $f def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
  done
done
for v in d r a0; do
  case $v in d) ev=X=0 ;; r) ev=X=0 ;; a0) ev=TS_AHEAD=0 ;; esac
  f=bj; [ $v = r ] && f=bjr
  $f def512_${v} "$ev" models/default --prompt 64 --gen 512 --runs 3
done
for m in 9b 35b8 def; do
  case $m in def) md=models/default ;; *) md=$S/$m ;; esac
  TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $md --json --prompt 512 --gen 128 --runs 1 > $O/e_${m}_optime.json 2> $O/e_${m}_optime.err; tl "optime $m $?"
done
timeout 150 $B/ts_test cuda_engine.ahead_exact > $O/t_ahead.log 2>&1; tl "ts_test ahead_exact $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.ahead_exact > $O/memcheck_ahead.log 2>&1; tl "memcheck ahead $?"
device_end
