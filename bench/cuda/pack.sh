#!/bin/bash
# pack.sh NAME: the CUDA build's binaries and the shared libraries they link
# beyond the C and C++ runtimes (the GPU host lacks this project's Debian
# packages), stripped of debug info, as .gpu/NAME/pack.tar.xz for a device
# call (xz -9e dedupes the three binaries' identical fatbins: ~9 MB). The
# call carries .gpu/NAME (ignored by git: .git/info/exclude) and its
# command.sh sources bench/cuda/device_env.sh with PACK=.gpu/NAME/pack.tar.xz.
# Run from the repository root after make -j2 BUILD=build-cuda CUDA=1 all.
set -euo pipefail
name=${1:?usage: bench/cuda/pack.sh NAME}
# a binary older than a source it is built from is a stale build (session 19: a
# make cut short by `| head` left call 2 running the previous call's binaries).
# Each binary against its own sources: a changed test is not a stale turbospark
# (session 22 touched the binaries to pass a coarser check, and packed a stale
# ts_test once).
newest_of() { git ls-files -z "$@" | xargs -0 stat -c '%Y %n' 2>/dev/null | sort -n | tail -1; }
check() { # binary, then the paths it is built from
  local f=$1 newest; shift; newest=$(newest_of "$@")
  if [ "$(stat -c %Y "$f")" -lt "${newest%% *}" ]; then
    echo "pack.sh: $f is older than ${newest#* } (a stale build: run make -j2 BUILD=build-cuda CUDA=1 all)" >&2; exit 1
  fi
}
check build-cuda/turbospark src include tools Makefile
check build-cuda/ts_test src include tools tests Makefile
check build-cuda/cuda_bench src include bench/cuda/cuda_bench.c Makefile
tmp=$(mktemp -d); b=$tmp/b
mkdir -p "$b/lib"
# PACK_MAIN="turbospark": the normal build's binaries to take (default all three). A call whose tree is slimmed of
# the fixtures carries only what it runs (session 44: the trace build beside ts_test made 72 MB of 64 MiB)
bins=""
for f in ${PACK_MAIN:-turbospark ts_test cuda_bench}; do cp "build-cuda/$f" "$b/"; bins="$bins $b/$f"; done
# the trace build's cuda_bench too, when made (make BUILD=build-cuda-trace CUDA=1
# EXTRA_NVCC_FLAGS=-DTSC_TRACE build-cuda-trace/cuda_bench): cuda_bench --trace
if [ -x build-cuda-trace/cuda_bench ]; then cp build-cuda-trace/cuda_bench "$b/cuda_bench_trace"; bins="$bins $b/cuda_bench_trace"; fi
# and its turbospark (the engine's own graph: TSC_TRACE_FILE, backend.cu's trace_this_replay)
if [ -x build-cuda-trace/turbospark ]; then cp build-cuda-trace/turbospark "$b/turbospark_trace"; bins="$bins $b/turbospark_trace"; fi
# a reference build for an A/B in one call (another commit's tree built with
# make BUILD=build-cuda-ref CUDA=1 all, e.g. main beside a branch): its
# turbospark and cuda_bench as turbospark_ref and cuda_bench_ref
for f in turbospark cuda_bench; do
  if [ -x build-cuda-ref/$f ]; then cp build-cuda-ref/$f "$b/${f}_ref"; bins="$bins $b/${f}_ref"; fi
done
for f in $bins; do
  ldd "$f" | awk '/=>/ {print $3}' | { grep -Ev 'libc\.so|libm\.so|ld-linux|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so' || true; } |
    xargs -r -I{} cp -L {} "$b/lib/"
done
strip -g $bins
mkdir -p ".gpu/$name"
tar -C "$tmp" -cf - b | xz -9e -T1 > ".gpu/$name/pack.tar.xz"
rm -rf "$tmp"
# the exclude file of the repository (a worktree's .git is a file: its common dir holds info/)
ex="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '.gpu/' "$ex" 2>/dev/null || echo '.gpu/' >> "$ex"
ls -la ".gpu/$name/pack.tar.xz"
