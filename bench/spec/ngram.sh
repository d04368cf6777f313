#!/usr/bin/env bash
# N-gram (prompt lookup) drafting against MTP and plain decoding on the
# bundled default model, with `turbospark bench` (each run times plain and
# drafted greedy generation interleaved in one process, checks the ids are
# identical, and prints the acceptance). Four prompts:
#   normal:  the first 64 ids of the first held-out window
#            (tools/train/heldout.ids: text not seen in training);
#   passage: that window's first 96 ids twice, then its first 16 again (a
#            passage given in the prompt, being repeated);
#   list:    three lines of the same structure, "Item N: ...", and "Item 4:";
#   code:    three small Python functions of one shape and a fourth's header.
# (list and code are written here, tokenized with the model's tokenizer.)
# Modes: ngram --draft 4, ngram --draft 8, mtp --draft 2, one process each,
# interleaved over ROUNDS rounds (the machine's speed drifts from minute to
# minute); the summary takes, per prompt and mode, the median over rounds of
# each run's own medians.
#   bench/spec/ngram.sh [MODEL_DIR] [ROUNDS] [GEN] [RUNS]
# Environment: TS_BIN (the binary; build/turbospark), TS_MODES (modes
# separated by ';', default "ngram 4;ngram 8;mtp 2"; "ngram M N MIN" sets the
# n-gram sizes).
set -euo pipefail
cd "$(dirname "$0")/../.."
M_DIR=${1:-models/default}
ROUNDS=${2:-5}
GEN=${3:-128}
RUNS=${4:-7}
BIN=${TS_BIN:-build/turbospark}
MODES=("ngram 4" "ngram 8" "mtp 2")
if [ -n "${TS_MODES:-}" ]; then IFS=';' read -r -a MODES <<< "$TS_MODES"; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
w=$(grep -v '^#' tools/train/heldout.ids | head -n 1)
echo "$w" | cut -d, -f1-64 > "$tmp/normal.ids"
p96=$(echo "$w" | cut -d, -f1-96)
echo "$p96,$p96,$(echo "$w" | cut -d, -f1-16)" > "$tmp/passage.ids"
$BIN tokenize -m "$M_DIR" -p "Item 1: the red box is on the table.
Item 2: the red box is on the table.
Item 3: the red box is on the table.
Item 4:" > "$tmp/list.ids"
$BIN tokenize -m "$M_DIR" -p "def add(a, b):
    return a + b

def sub(a, b):
    return a - b

def mul(a, b):
    return a * b

def div(a, b):" > "$tmp/code.ids"
PROMPTS=(normal passage list code)
: > "$tmp/all.jsonl"
for r in $(seq "$ROUNDS"); do
  for prompt in "${PROMPTS[@]}"; do
    for i in "${!MODES[@]}"; do
      set -- ${MODES[$i]}
      case $1 in
        ngram) args="--spec ngram --draft $2${3:+ --ngram-max $3}${4:+ --ngram-min $4}" ;;
        mtp) args="--spec mtp --draft $2" ;;
      esac
      $BIN bench -m "$M_DIR" --ids-file "$tmp/$prompt.ids" --prompt 1000 --gen "$GEN" --runs "$RUNS" --bw-mib 64 \
        $args --json 2>/dev/null | grep '"spec"' | sed "s/^{/{\"prompt\": \"$prompt\", \"mode\": \"${MODES[$i]}\", \"round\": $r, /" \
        >> "$tmp/all.jsonl"
    done
  done
done
echo "model $M_DIR, $(nproc) cores, $ROUNDS rounds, $GEN greedy tokens, bench --runs $RUNS (interleaved plain/drafted medians each)"
python3 - "$tmp/all.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| prompt | mode | plain tok/s | drafted tok/s | speedup | identical | drafts/verify | mean accepted length | acceptance by position |")
print("|---|---|---|---|---|---|---|---|---|")
for prompt in ("normal", "passage", "list", "code"):
    for mode in dict.fromkeys(r["mode"] for r in rows):
        rs = [r for r in rows if r["prompt"] == prompt and r["mode"] == mode]
        if not rs: continue
        med = lambda k: statistics.median(r[k] for r in rs)
        acc = " ".join("%d:%s" % (j + 1, "-" if a is None else "%.2f" % a) for j, a in enumerate(rs[0]["accept_by_position"]))
        print("| %s | %s | %.0f | %.0f | %.2fx (%.2f-%.2f) | %s | %.2f | %.2f | %s |" % (
            prompt, mode, med("plain_tok_s"), med("spec_tok_s"), med("speedup"), min(r["speedup"] for r in rs),
            max(r["speedup"] for r in rs), "yes" if all(r["identical"] for r in rs) else "NO",
            rs[0]["drafts_per_block"], rs[0]["mean_accepted_length"], acc))
EOF
