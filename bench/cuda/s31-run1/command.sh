#!/bin/bash
# session 31, device call 1 (nvidia-h200 named): session 30's pack next30 (main at 9ae64c9's kernels: no kernel
# changed since session 27; gpu-next's L2 ahead off by default) for H200 figures of record of the default path:
# QUICK=2 of s30-run1 (engine bench 9B / 35B-A3B-8L / default model, one wait a token (default) against a wait after
# each pass, two rounds interleaved, and the engine tests one_wait_step, ngram_greedy_exact, spec_greedy_exact).
# Run from the repository root after bench/cuda/slim.sh out-all s30-run1, carrying .gpu/next30.
QUICK=2 bash bench/cuda/s30-run1/command.sh
