#!/bin/sh
# bench/prefill/run.sh [MODEL] [RUNS] [PROMPT]: prefill alone (pp.c), then a
# perf profile of it: CPU milliseconds per prefill by function (cpu-clock
# samples of 1 ms, divided by RUNS; model load and the untimed session
# resets are in the profile too: pack_blocks, memset).
set -e
M=${1:-/tmp/ts-bench/0.8B-int4}
R=${2:-5}
P=${3:-128}
make -j2 build/libturbospark.a >/dev/null
cc -O2 -Iinclude -o build/pp bench/prefill/pp.c build/libturbospark.a \
   -lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lreadline -lm -lpthread
build/pp "$M" "$R" "$P"
if command -v perf >/dev/null; then
    perf record -q -e cpu-clock -c 1000000 -o build/pp.perf build/pp "$M" "$R" "$P" >/dev/null 2>&1
    perf report -i build/pp.perf --no-children -n --sort sym 2>/dev/null | grep -E '^ +[0-9]' |
        awk -v r="$R" '{ printf "%7.0f ms  %s\n", $2 / r, $NF }' | head -25
fi
