#!/usr/bin/env bash
# MTP speculative decoding on the bundled default model, over held-out text.
# For each of the 16 held-out windows (tools/train/heldout.ids): the first 64
# ids are the prompt, N tokens (128 by default) are generated greedily,
# plainly and with --spec mtp --draft M (M = 1..4). Checks the ids are
# identical, sums the acceptance statistics and times (from run's stderr)
# over all windows.
#   bench/spec/default_model.sh [MODEL_DIR] [THREADS] [DRAFT_VOCAB (a count, or all; default automatic)] [N] [ACT_BITS]
set -euo pipefail
cd "$(dirname "$0")/../.."
M_DIR=${1:-models/default}
T=${2:-2}
DV=${3:-}
N=${4:-128}
AB=${5:-} # activation bits: the engine's default when not given
BIN=build/turbospark
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^#' tools/train/heldout.ids | cut -d, -f1-64 > "$tmp/prompts"
for M in 0 1 2 3 4; do : > "$tmp/ids$M"; : > "$tmp/err$M"; done
# per window, plain and every draft length back to back: the machine's speed
# drifts over minutes, and each ratio should compare runs made together
while read -r p; do
  for M in 0 1 2 3 4; do
    args=""; [ "$M" -gt 0 ] && args="--spec mtp --draft $M${DV:+ --draft-vocab $DV}"
    $BIN run -m "$M_DIR" --threads "$T" ${AB:+--act-bits $AB} --ids "$p" -n "$N" $args --print-ids >>"$tmp/ids$M" 2>>"$tmp/err$M"
  done
done < "$tmp/prompts"
echo "model $M_DIR, threads $T, activations ${AB:-default} bits, drafting vocabulary ${DV:-automatic}, 16 held-out windows, prompt 64 ids, $N greedy tokens each"
for M in 1 2 3 4; do
  if cmp -s "$tmp/ids0" "$tmp/ids$M"; then same=identical; else same=DIFFERENT; fi
  echo "draft $M: output $same to plain greedy"
done
for M in 0 1 2 3 4; do
  awk -v M="$M" '
    /^\[prompt/ {
      for (i = 1; i <= NF; i++) { if ($i == "decode") r = $(i+1); if ($i == "generated") g = $(i+1) }
      gen += g - 1; t += (g - 1) / r   # decode rate: the tokens after the first
    }
    /^\[spec/ {
      for (i = 1; i <= NF; i++) {
        if ($i == "drafts") { split($(i-1), a, "/"); acc += a[1]; dr += a[2] }
        f = $i; sub(/;$/, "", f)
        if (f ~ /^[0-9]+:[0-9.]+$/) { split(f, b, ":"); pa[b[1]] += b[2]; np[b[1]]++ }
        if ($i == "blocks,") blocks += $(i-1)
      }
    }
    END {
      line = sprintf("draft %d: decode %.1f tok/s (harmonic over windows)", M, gen / t);
      if (M > 0) {
        line = line sprintf(", %d/%d drafts accepted, mean accepted length %.2f tokens/verify, by position (mean over windows):", acc, dr, (acc + blocks) / blocks);
        for (k = 1; k <= M; k++) line = line sprintf(" %d:%.2f", k, pa[k] / np[k]);
      }
      print line
    }' "$tmp/err$M"
done
