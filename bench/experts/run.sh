#!/bin/sh
# bench/experts/run.sh [all|sim|read]: the expert cache's policy simulation and read-path measurement.
#   sim:  routing traces of the MoE fixtures (trace_model) and a synthetic Zipf trace through sim
#   read: a 35B-A3B-shaped INT4 synth install cut to 4 layers (/tmp/x35b4, ~2.9 GB) read through ts_xc_ensure
# Results are recorded by hand in bench/experts/RESULTS.md.
set -e
cd "$(dirname "$0")/../.."
make -s build/libturbospark.a build/turbospark
LIBS="-lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lreadline -lm -lpthread"
CF="-O2 -g -std=gnu11 -Wall -Wextra -Iinclude -Isrc"
cc $CF -o build/trace_model bench/experts/trace_model.c build/libturbospark.a $LIBS
cc $CF -o build/xsim bench/experts/sim.c build/libturbospark.a $LIBS
cc $CF -o build/xreadbench bench/experts/readbench.c build/libturbospark.a $LIBS
what=${1:-all}
if [ "$what" = all ] || [ "$what" = sim ]; then
    build/trace_model tests/fixtures/tiny-moe /tmp/tiny-moe.trace 8 256 1
    build/trace_model tests/fixtures/alt-moe /tmp/alt-moe.trace 8 256 2
    build/xsim /tmp/tiny-moe.trace
    build/xsim /tmp/alt-moe.trace
    build/xsim --zipf
    build/xsim --zipf --rows 4
    build/xsim --zipf --reuse 0 --halflife 32,128,512
    build/xsim --zipf --reuse 0 --skew 0.8 --halflife 32,128,512
fi
if [ "$what" = all ] || [ "$what" = read ]; then
    [ -f /tmp/x35b4/config.json ] || build/turbospark synth --shape bench/experts/shape-35B-A3B-4layers.json --out /tmp/x35b4 --quiet
    build/xreadbench /tmp/x35b4 32 256 3
fi
