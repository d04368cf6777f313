#!/bin/sh
# compare.sh: bit-identity of this tree against a build of the commit before
# the backend refactor (default ../base beside the repository: `git worktree add ../base cde7cb6 && make -C ../base -j2`).
# For every fixture model in tests/fixtures/ and models/default, at 8 and 24
# bit activations, bench/contract/dump.c (public API only) is built against
# both libraries and writes prefill logits and hiddens (one chunk; chunks of
# 5), MTP head logits, token-by-token logits and hiddens, greedy and sampled
# ids with --spec mtp --draft 0..8, and ids after a checkpoint restore; the
# two files must be equal byte for byte (cmp). Then the CLI: `turbospark
# logits` (main and --head mtp) and `run --print-ids` with and without
# --spec mtp --draft 1..8, outputs compared with cmp.
# usage: bench/contract/compare.sh [BASE_DIR]   (run from the repository root)
set -e
BASE=${1:-../base}
NEW=$(pwd)
T=$(mktemp -d)
LIBS="-lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lreadline -lm -lpthread"
cc -O2 -I"$BASE/include" bench/contract/dump.c "$BASE/build/libturbospark.a" $LIBS -o "$T/dump_old"
cc -O2 -I"$NEW/include" bench/contract/dump.c "$NEW/build/libturbospark.a" $LIBS -o "$T/dump_new"
fail=0
check() { if cmp -s "$1" "$2"; then echo "same   $3"; else echo "DIFFER $3"; fail=1; fi; }
MODELS="tests/fixtures/tiny-dense tests/fixtures/tiny-moe tests/fixtures/alt-dense tests/fixtures/alt-moe tests/fixtures/alt-moe-tied models/default"
for m in $MODELS; do
  for ab in 8 24; do
    "$T/dump_old" "$m" $ab "$T/old.bin"
    "$T/dump_new" "$m" $ab "$T/new.bin"
    check "$T/old.bin" "$T/new.bin" "dump $m act_bits=$ab ($(wc -c <"$T/new.bin") bytes)"
  done
done
IDS=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
for m in $MODELS; do
  for head in main mtp; do
    "$BASE/build/turbospark" logits -m "$m" --ids $IDS -o "$T/lo.f32" --head $head 2>/dev/null || continue
    build/turbospark logits -m "$m" --ids $IDS -o "$T/ln.f32" --head $head
    check "$T/lo.f32" "$T/ln.f32" "logits $m --head $head"
  done
done
for d in 0 1 2 3 4 5 6 7 8; do
  spec=""; [ $d -gt 0 ] && spec="--spec mtp --draft $d"
  "$BASE/build/turbospark" run -m models/default -p "Once upon a time" -n 64 --print-ids $spec >"$T/ro.txt" 2>/dev/null
  build/turbospark run -m models/default -p "Once upon a time" -n 64 --print-ids $spec >"$T/rn.txt" 2>/dev/null
  check "$T/ro.txt" "$T/rn.txt" "run models/default --print-ids ${spec:-(plain)}"
done
rm -rf "$T"
[ $fail = 0 ] && echo "compare: all identical" || { echo "compare: DIFFERENCES"; exit 1; }
