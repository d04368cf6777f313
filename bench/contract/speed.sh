#!/bin/sh
# bench/contract/speed.sh OLD_TREE NEW_TREE [ROUNDS]: CPU speed of two builds, interleaved.
#
# The backend-contract refactor must leave CPU speed unchanged (issue 15: within 3%). This machine
# is noisy (the same step drifts by tens of percent within minutes), so the two builds run in
# alternating rounds, each round: OLD then NEW, then NEW then OLD in the next (order rotated), and
# the medians and spreads are compared. Per round and build:
#   decode and pp128 tok/s   `turbospark bench --prompt 128 --gen 64 --runs 3 --json`
#   verify(4)/decode          bench/spec/spec_bench, minimum of 8 repetitions, draft 3
# on the Qwen3.5-0.8B-shaped INT4 install from `synth` (made under $MODEL if missing).
# Each tree must hold build/turbospark and build/spec_bench (bench/spec/run.sh builds the latter).
set -e
OLD=$1 NEW=$2 ROUNDS=${3:-5}
MODEL=${MODEL:-/tmp/ts-bench/0.8B-int4}
[ -f "$MODEL/config.json" ] || "$NEW/build/turbospark" synth --shape "$NEW/shapes/qwen3.5-0.8B.json" --out "$MODEL" --bits 4 --quiet
OUTF=${OUTF:-/tmp/contract-speed.txt}
: > "$OUTF"
one() { # tree label
    j=$("$1/build/turbospark" bench -m "$MODEL" --threads 2 --prompt 128 --gen 64 --runs 3 --json | tr -d '\n ')
    dec=$(echo "$j" | sed -n 's/.*"decode_tok_s":\([0-9.]*\).*/\1/p')
    pp=$(echo "$j" | sed -n 's/.*"prefill_tok_s":\([0-9.]*\).*/\1/p')
    vr=$("$1/build/spec_bench" "$MODEL" 8 3 2 32 | sed -n 's/^verify [0-9]* rows *[0-9.]* ms *= *\([0-9.]*\) x decode.*/\1/p' | head -1)
    echo "$2 decode $dec pp128 $pp verify_ratio $vr load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$OUTF"
}
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then one "$OLD" old; one "$NEW" new; else one "$NEW" new; one "$OLD" old; fi
done
python3 - "$OUTF" <<'EOF'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for key in ("decode", "pp128", "verify_ratio"):
    line = []
    med = {}
    for b in ("old", "new"):
        v = [float(r[r.index(key) + 1]) for r in rows if r[0] == b and r[r.index(key) + 1]]
        med[b] = st.median(v) if v else float("nan")
        line.append(f"{b} median {med[b]:.3f} [{min(v):.3f}-{max(v):.3f}] n={len(v)}" if v else f"{b} -")
    print(f"{key:13s} " + "; ".join(line) + f"; new/old {med['new'] / med['old']:.3f}")
EOF
