#!/bin/bash
# session 31, device call 2: run-ahead greedy decoding (gen/generate.c's ahead_loop; the CUDA side: backend.cu's
# cu_argmax_ahead / cu_ahead_read, cu_gdn's pairs without a tape). Pack s31a: branch ahead at its commit (main +
# run-ahead), make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, bench/cuda/pack.sh s31a. Carry .gpu/s31a
# (bench/cuda/slim.sh out-all s31-run2 first).
# Prediction (session 30's TSC_OPTIME split, H100): run-ahead takes the host's part of a token off the device's
# timeline: 9B +2.5-3% (62-75 us of ~2.38 ms), 35B-A3B-8L +6-8% (34-46 us of ~0.58 ms), default model +11-13%
# (29-33 us of ~0.26 ms); MTP and n-gram runs unchanged (their loops do not run ahead).
# (1) engine decode, three variants interleaved, three rounds: d = default (run-ahead on: auto for CUDA), a0 =
#     TS_AHEAD=0 (session 29's one wait a token), w3 = TS_AHEAD=0 TS_STEP_ONE_WAIT=0 (a wait after each pass)
# (2) TSC_OPTIME's replay/host split with run-ahead; 9B MTP 3 forced and default-model MTP 2 (regression: the GDN
#     op's pair path changed) (3) the GPU tests: cuda_engine.ahead_exact first, then the cuda and cuda_engine
#     groups, then memcheck on ahead_exact's default-model part (time-boxed)
PACK=.gpu/s31a/pack.tar.xz . bench/cuda/device_env.sh
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b c; do
  for v in d a0 w3; do
    case $v in d) ev=X=0 ;; a0) ev=TS_AHEAD=0 ;; w3) ev="TS_AHEAD=0 TS_STEP_ONE_WAIT=0" ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
  done
done
for v in d a0; do
  case $v in d) ev=X=0 ;; a0) ev=TS_AHEAD=0 ;; esac
  bj def512_${v} "$ev" models/default --prompt 64 --gen 512 --runs 3
done
bj 9b_mtp3_d X=0 $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
bj def_mtp2_d X=0 models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
for m in 9b 35b8 def; do
  case $m in def) md=models/default ;; *) md=$S/$m ;; esac
  TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $md --json --prompt 512 --gen 128 --runs 1 > $O/e_${m}_optime.json 2> $O/e_${m}_optime.err; tl "optime $m $?"
done
timeout 150 $B/ts_test cuda_engine.ahead_exact > $O/t_ahead.log 2>&1; tl "ts_test ahead_exact $?"
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.ahead_exact > $O/memcheck_ahead.log 2>&1; tl "memcheck ahead $?"
device_end
