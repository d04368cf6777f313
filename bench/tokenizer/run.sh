#!/usr/bin/env bash
# run.sh: build and run the tokenizer benchmark (turbospark vs Hugging Face tokenizers), see RESULTS.md.
#   bench/tokenizer/run.sh [PASSES]        (from the repository root; default 7 passes)
# Installs npm `tokenizers` into bench/tokenizer/node_modules (git-ignored) on first use, builds
# build/libturbospark.a and build/tok_bench, unpacks the fixtures into a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=bench/tokenizer
[ -d $B/node_modules/tokenizers ] || (cd $B && npm install --no-audit --no-fund >&2)
make -s build/libturbospark.a
cc -O2 -std=gnu11 -Iinclude -o build/tok_bench $B/tok_bench.c build/libturbospark.a \
   -lcjson -lpcre2-8 -lutf8proc -lpthread -lm
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
F=tests/fixtures/tokenizer
xz -dc $F/qwen3.tokenizer.json.xz > "$TMP/qwen3.json"
xz -dc $F/qwen35-regex.tokenizer.json.xz > "$TMP/qwen35.json"
xz -dc $F/docs.tar.xz | tar -xf - -C "$TMP"
RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node $B/bench.js build/tok_bench "$TMP" "$TMP/docs" "${1:-7}"
