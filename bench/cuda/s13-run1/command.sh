#!/bin/bash
# session 13, device call 1: the prompt chunks' tensor-core products (q4gemm.cu)
# and session 12's host-side q4dp refactor (6223e03) on the GPU
PACK=.gpu/s13/pack.tar.xz . bench/cuda/device_env.sh
timeout 150 $B/ts_test cuda > $O/kern_tests.log 2>&1; tl "kern tests rc $?"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/ts_test cuda.gemm_prefill_products > $O/memcheck_gemm.log 2>&1; tl "memcheck gemm $?"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/ts_test cuda.gemm_prefill_products > $O/racecheck_gemm.log 2>&1; tl "racecheck gemm $?"
for N in 512 2048; do $B/cuda_bench --shape 9b --mlx --gemm $N > $O/cb9_gemm$N.txt 2>&1; tl "cb9 gemm $N $?"; done
$B/cuda_bench --shape 9b --mlx --digits 1 --quick > $O/cb9.txt 2>&1; tl "cb9 $?"
# torch's bf16 product on the same shapes (cuBLAS): the anchor for the kernel's TFLOP/s
python3 - > $O/torch_mm.txt 2>&1 <<'PY'
import torch
for M in (512, 2048):
    for name, N, K in (("gdn in_proj", 8192 + 4096 + 64, 4096), ("out_proj", 4096, 4096), ("gate+up", 2 * 12288, 4096), ("down", 4096, 12288)):
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        for _ in range(3): a @ b.T
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(); s.record()
        for _ in range(20): a @ b.T
        e.record(); torch.cuda.synchronize(); ms = s.elapsed_time(e) / 20
        print(f"{name:12s} M {M:5d} N {N:6d} K {K:6d}: {ms:.3f} ms {2*M*N*K/ms/1e9:.1f} TFLOP/s")
PY
tl "torch mm $?"
synth_shape 9b shapes/qwen3.5-9B.json
synth_shape 35b8 bench/cuda/shape-35B-A3B-8L.json
for P in 512 2048; do
  bj 9b_p$P X=1 $S/9b --prompt $P --gen 32 --runs 2
  bj 9b_p${P}_rows TSC_GEMM=0 $S/9b --prompt $P --gen 32 --runs 2
done
bj 9b_dec X=1 $S/9b --prompt 512 --gen 128 --runs 3
bj 35b8_p512 X=1 $S/35b8 --prompt 512 --gen 32 --runs 2
bj 35b8_p512_rows TSC_GEMM=0 $S/35b8 --prompt 512 --gen 32 --runs 2
bj def X=1 models/default --prompt 512 --gen 128 --runs 2
timeout 200 $B/ts_test cuda_engine > $O/engine_tests.log 2>&1; tl "engine tests rc $?"
device_end
