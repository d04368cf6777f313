#!/bin/sh
# bench/kernels/run.sh [threads]: the decode kernel alone (kbench.c).
set -e
cd "$(dirname "$0")/../.."
make -s build/libturbospark.a
LIBS="-lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lreadline -lm -lpthread"
cc -O2 -std=gnu11 -Iinclude -Isrc -o build/kbench bench/kernels/kbench.c build/libturbospark.a $LIBS
build/kbench "${1:-2}"
cc -O2 -std=gnu11 -Iinclude -o build/steps bench/kernels/steps.c build/libturbospark.a $LIBS
[ -f /tmp/ts-bench/0.8B-int4/config.json ] && build/steps /tmp/ts-bench/0.8B-int4 "${1:-2}" 64
