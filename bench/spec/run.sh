#!/bin/sh
# bench/spec/run.sh MODEL_DIR [reps] [draft M] [threads] [prompt tokens] [act bits]: verify/rollback cost vs a decode step.
# Builds the library (make), then bench/spec/spec_bench against build/libturbospark.a.
# Without a model: synthesizes a Qwen3.5-0.8B-shaped INT4 checkpoint into /tmp/q08b first.
set -e
cd "$(dirname "$0")/../.."
make -s build/libturbospark.a
LIBS="-lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lreadline -lm -lpthread"
cc -O2 -std=gnu11 -Iinclude -Isrc -o build/spec_bench bench/spec/spec_bench.c build/libturbospark.a $LIBS
MODEL=${1:-/tmp/q08b}
if [ ! -f "$MODEL/config.json" ]; then
    cc -O2 -o build/synth08b bench/spec/synth08b.c
    build/synth08b "$MODEL"
fi
build/spec_bench "$MODEL" "${2:-5}" "${3:-3}" "${4:-0}" "${5:-32}" "${6:-0}"
