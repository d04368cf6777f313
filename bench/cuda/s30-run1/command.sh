#!/bin/bash
# session 30, device call 1: session 29's call (s29-run1, never run: every device start refused) on a pack of this
# session's tree: next30 = main + branch s30 (the constraint index shared a tokenizer, n-gram drafting and
# its GPU test cuda_engine.ngram_greedy_exact) merged into branch gpu-next (L2 ahead behind TSC_L2_AHEAD=MB, off by
# default), built with make -j2 BUILD=build-cuda CUDA=1 WERROR=-Werror all, bench/cuda/pack.sh next30, and
# nvcc -O3 -std=c++17 -arch=sm_90 -o .gpu/next30/l2ahead bench/cuda/l2ahead.cu beside it. The call carries .gpu/next30
# (bench/cuda/slim.sh out-all s30-run1 first: the tree and the pack must fit 64 MiB).
# What it measures is s29-run1's (read its header): cuda_bench 9B N1 1/0, the verify passes' staging per block
# (TSC_Q4DP_DIG 4/6/5), L2 ahead 8/16/32; engine decode 9B / 35B-A3B-8L / default model under the default, N1=0, L2
# ahead 16 and TS_STEP_ONE_WAIT=0 (the one wait a token against a wait after each pass; prediction 9B +1%, 35B-A3B-8L
# +3-4%, the default model +5-8%), two rounds interleaved; MTP 3 at forced 0.8/0.6/0.5; TSC_OPTIME's replay/host
# split; the GPU suite (now with cuda_engine.ngram_greedy_exact), L2 ahead's suite and memcheck; the l2ahead probe.
# (~500 s; QUICK=1 ~380 s; QUICK=2 ~150 s: the one-wait A/B and the engine tests of this session's changes)
PACK=.gpu/next30/pack.tar.xz . bench/cuda/device_env.sh
# QUICK=2: only the one-wait A/B in the engine and its GPU test (~150 s; the session's last minutes)
if [ "$QUICK" = 2 ]; then
  synth_shape 9b shapes/qwen3.5-9B.json
  synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
  for r in a b; do for v in d w3; do
    case $v in d) ev=X=0 ;; w3) ev=TS_STEP_ONE_WAIT=0 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
  done; done
  timeout 120 $B/ts_test cuda_engine.one_wait_step cuda_engine.ngram_greedy_exact cuda_engine.spec_greedy_exact_default_model > $O/t_engine_q2.log 2>&1; tl "ts_test one_wait $?"
  device_end; exit 0
fi
CB="$B/cuda_bench --shape 9b --mlx --digits 1"
for r in a b; do
  for f in 1 0; do TSC_Q4DP_N1=$f $CB > $O/cb_9b_n${f}_$r.txt 2>&1; tl "cb 9b n1=$f $?"; done
  for d in 4 6 5; do TSC_Q4DP_DIG=$d $CB > $O/cb_9b_dig${d}_$r.txt 2>&1; tl "cb 9b dig=$d $?"; done
  for m in 8 16 32; do TSC_L2_AHEAD=$m $CB > $O/cb_9b_l2_${m}_$r.txt 2>&1; tl "cb 9b l2=$m $?"; done
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for r in a b; do
  for v in d n0 l2 w3; do
    [ -n "$QUICK" ] && [ $v = n0 ] && continue
    case $v in d) ev=X=0 ;; n0) ev=TSC_Q4DP_N1=0 ;; l2) ev=TSC_L2_AHEAD=16 ;; w3) ev=TS_STEP_ONE_WAIT=0 ;; esac
    bj 9b_${v}_$r "$ev" $S/9b --prompt 512 --gen 128 --runs 2
    bj 35b8_${v}_$r "$ev" $S/35b8 --prompt 512 --gen 128 --runs 2
    bj def_${v}_$r "$ev" models/default --prompt 512 --gen 128 --runs 2
  done
done
for v in d n0 l2 w3; do
  case $v in d) ev=X=0 ;; n0) ev=TSC_Q4DP_N1=0 ;; l2) ev=TSC_L2_AHEAD=16 ;; w3) ev=TS_STEP_ONE_WAIT=0 ;; esac
  bj 9b_mtp3_$v "$ev" $S/9b --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
for v in d l2 w3; do
  case $v in d) ev=X=0 ;; l2) ev=TSC_L2_AHEAD=16 ;; w3) ev=TS_STEP_ONE_WAIT=0 ;; esac
  bj 35b8_mtp3_$v "$ev" $S/35b8 --prompt 512 --gen 256 --runs 2 --spec mtp --draft 3 --accept 0.8,0.6,0.5
done
for v in d w3; do
  case $v in d) ev=X=0 ;; w3) ev=TS_STEP_ONE_WAIT=0 ;; esac
  bj def_mtp2_$v "$ev" models/default --prompt 512 --gen 256 --runs 2 --spec mtp --draft 2
done
# (5) a decode token's time split into the graph's device time and the host's: TSC_OPTIME=1 times each replay with
# events (and serializes: its own tok/s is not the figure); ms_per_token of the runs above less the replay's time is
# what the host loop (sync, argmax launch and read-back, the next step's copies and launch) costs a token
for m in 9b 35b8 def; do
  case $m in def) md=models/default ;; *) md=$S/$m ;; esac
  TSC_OPTIME=1 $B/turbospark bench --backend cuda -m $md --json --prompt 512 --gen 128 --runs 1 > $O/e_${m}_optime.json 2> $O/e_${m}_optime.err; tl "optime $m $?"
done
# the GPU suite after the figures (a call cut short keeps the figures: they come back from $O as they are)
timeout 200 $B/ts_test cuda > $O/t_cuda.log 2>&1; tl "ts_test cuda $?"
timeout 300 $B/ts_test cuda_engine > $O/t_engine.log 2>&1; tl "ts_test cuda_engine $?"
[ -z "$QUICK" ] && TSC_L2_AHEAD=16 timeout 200 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model cuda_engine.spec_greedy_exact_fixtures cuda_engine.spec_greedy_exact_default_model cuda_engine.spec_rollback_device_state_bit_exact cuda_engine.spec_graphs_exact_and_replayed cuda_engine.one_wait_step > $O/t_engine_l2.log 2>&1; tl "ts_test cuda_engine l2 $?"
[ -z "$QUICK" ] && TSC_L2_AHEAD=16 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ts_test cuda_engine.parity_every_fixture_and_the_default_model > $O/memcheck_l2.log 2>&1; tl "memcheck l2 $?"
cp .gpu/next30/l2ahead /tmp/l2ahead && chmod +x /tmp/l2ahead && timeout 100 /tmp/l2ahead 0 > $O/l2ahead.txt 2>&1; tl "l2ahead $?"
device_end
