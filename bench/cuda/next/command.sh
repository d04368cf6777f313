#!/bin/bash
# (branch gpu-next2 = gdn-wy + gdn-defer + attention rows, written in session 20; run in session 21 as bench/cuda/s21-run1, results there)
# One call that validates and measures both:
#  - gdn-wy: the prompt chunks' GDN in the WY form (TSC_GDN_WY=0 the row scan). Prediction: 9B pp512 17.2K ->
#    22-24K tok/s, pp2048 20.2K -> 26-30K; 35B-A3B-8L pp512 42K -> 46-50K. Algebra checked on the CPU by
#    bench/cuda/next/wy_emu.c (3e-7 relative to the recurrence in double).
#  - gdn-defer: the GDN step's gated norm after all rows (one cluster barrier a layer instead of one a row; the
#    same bits). No switch: the A/B is against main's build, packed as *_ref. Prediction: cuda_bench's 4-row
#    verify 1.474x -> ~1.43x a step, 16 rows 4.63x -> ~4.4x; one row unchanged.
#  - attention rows (no branch of its own): a verify's rows attend in one launch pair (cu_attn; the engine ran one
#    row a call: its partials area held one row; now RB rows of the small area, 64 MB a stream of several rows),
#    the same bits a row; TSC_ATTN_ROWS=0 the old loop. cuda_bench always ran the rows at once, so its 1.474x
#    does not show the engine's loop: the engine's MTP-3-rejected block (3.95 ms) is the measure. Prediction:
#    ~0.3 ms less a 4-row verify on the 9B (8 layers x 3 x ~13 us), 9B MTP 3 rejected 253 -> ~275 tok/s.
#    The DFlash drafter's block rows too (tsc_attn_args.same_pos: every row as the row at pos + n - 1; test
#    cuda.attn_same_pos_rows), so TSC_ATTN_ROWS=0 on the default model's --spec dflash covers both.
# Before the call: make -j2 BUILD=build-cuda CUDA=1 all on this branch; main's tree built into build-cuda-ref
# (git worktree add /tmp/mainwt main && make -C /tmp/mainwt -j2 BUILD=$PWD/build-cuda-ref CUDA=1 all, or a
# checkout of main built there), then bench/cuda/pack.sh next2 (it packs build-cuda-ref's turbospark and
# cuda_bench as turbospark_ref and cuda_bench_ref).
PACK=.gpu/next2/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern.log 2>&1; tl "ts_test cuda $?"
timeout 240 $B/ts_test cuda_engine > $O/eng.log 2>&1; tl "ts_test cuda_engine $?"
G3="cuda.gdn_prefill_vs_step cuda.gdn_fused_same_bits cuda.gdn_step_parity_and_row_exact cuda.attn_same_pos_rows cuda.block_mask_attention_vs_cpu_backend"
timeout 120 compute-sanitizer --tool memcheck $B/ts_test $G3 > $O/memcheck_gdn.log 2>&1; tl "memcheck $?"
timeout 120 compute-sanitizer --tool racecheck $B/ts_test $G3 > $O/racecheck_gdn.log 2>&1; tl "racecheck $?"
for r in 1 2; do
  $B/cuda_bench --shape 9b --mlx --digits 1 > $O/cb_new_$r.txt 2>&1; tl "cb new $r $?"
  $B/cuda_bench_ref --shape 9b --mlx --digits 1 > $O/cb_ref_$r.txt 2>&1; tl "cb ref $r $?"
done
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
bref() { local n=$1 m=$2; shift 2; $B/turbospark_ref bench --backend cuda -m "$m" --json "$@" > "$O/e_$n.json" 2>>"$O/e_err.log"; tl "e_$n rc $?"; }
for r in a b; do
  for v in "wy X=1" "scan TSC_GDN_WY=0"; do
    set -- $v; n=$1; shift
    bj 9b_p512_${n}_$r "$*" $S/9b --prompt 512 --gen 16 --runs 2
    bj 9b_p2048_${n}_$r "$*" $S/9b --prompt 2048 --gen 16 --runs 2
    bj 35b8_p512_${n}_$r "$*" $S/35b8 --prompt 512 --gen 16 --runs 2
    bj 35b8_p2048_${n}_$r "$*" $S/35b8 --prompt 2048 --gen 16 --runs 2
  done
  bj 9b_mtp3_new_$r X=1 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
  bj 9b_mtp3_rows1_$r TSC_ATTN_ROWS=0 $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
  bref 9b_mtp3_ref_$r $S/9b --prompt 512 --gen 128 --runs 2 --spec mtp --draft 3
  bj def_df16_new_$r X=1 models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block 16
  bj def_df16_rows1_$r TSC_ATTN_ROWS=0 models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block 16
  bref def_df16_ref_$r models/default --prompt 512 --gen 256 --runs 2 --spec dflash --block 16
done
bj 9b_p8192_wy X=1 $S/9b --prompt 8192 --gen 16 --runs 1
bj 9b_p8192_scan TSC_GDN_WY=0 $S/9b --prompt 8192 --gen 16 --runs 1
device_end
