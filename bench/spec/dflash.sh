#!/usr/bin/env bash
# DFlash vs MTP vs plain on the bundled default model, over held-out text
# (the windows of bench/spec/default_model.sh): for each of the 16 held-out
# windows (tools/train/heldout.ids) the first 64 ids are the prompt and N
# tokens (128 by default) are generated greedily: plainly, with --spec mtp
# --draft M (M = 1..4) and with --spec dflash --block B (B = 4, 8, 16; and
# with the confidence cut --draft-p-min P: a block ends at the first draft the
# drafter gives less than P), back to back per window (the machine's speed
# drifts). Checks that every mode's
# ids equal plain greedy, sums the acceptance statistics over the windows.
#   bench/spec/dflash.sh [MODEL_DIR] [THREADS] [N] [ACT_BITS]
# Environment: TS_BIN (the binary; build/turbospark), TS_RUN_ARGS (more run
# options, e.g. "--backend cuda"), TS_WINDOWS (the first K windows only),
# TS_MODES (modes separated by ';', e.g. "plain;mtp 3;dflash 16;ngram 4"; the
# first must be plain; "ngram M N MIN": n-gram drafting, M drafts, n-grams of
# MIN..N ids).
set -euo pipefail
cd "$(dirname "$0")/../.."
M_DIR=${1:-models/default}
T=${2:-1}
N=${3:-128}
AB=${4:-}
BIN=${TS_BIN:-build/turbospark}
MODES=("plain" "mtp 1" "mtp 2" "mtp 3" "mtp 4" "dflash 4" "dflash 8" "dflash 16" "dflash 8 0.3" "dflash 16 0.3" "dflash 16 0.6")
if [ -n "${TS_MODES:-}" ]; then IFS=';' read -r -a MODES <<< "$TS_MODES"; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v '^#' tools/train/heldout.ids | cut -d, -f1-64 | head -n "${TS_WINDOWS:-16}" > "$tmp/prompts"
for i in "${!MODES[@]}"; do : > "$tmp/ids$i"; : > "$tmp/err$i"; done
while read -r p; do
  for i in "${!MODES[@]}"; do
    set -- ${MODES[$i]}
    case $1 in
      plain) args="" ;;
      mtp) args="--spec mtp --draft $2" ;;
      dflash) args="--spec dflash --block $2${3:+ --draft-p-min $3}" ;;
      ngram) args="--spec ngram --draft $2${3:+ --ngram-max $3}${4:+ --ngram-min $4}" ;;
    esac
    $BIN run -m "$M_DIR" --threads "$T" ${AB:+--act-bits $AB} ${TS_RUN_ARGS:-} --ids "$p" -n "$N" $args --print-ids >>"$tmp/ids$i" 2>>"$tmp/err$i"
  done
done < "$tmp/prompts"
echo "model $M_DIR, threads $T, activations ${AB:-default} bits, $(wc -l < "$tmp/prompts") held-out windows, prompt 64 ids, $N greedy tokens each${TS_RUN_ARGS:+, run $TS_RUN_ARGS}"
echo "| mode | output | decode tok/s (harmonic over windows) | vs plain | drafts accepted | mean accepted length (tokens/verify) | acceptance by position (P(first k accepted), mean over windows) |"
echo "|---|---|---|---|---|---|---|"
base=""
for i in "${!MODES[@]}"; do
  if cmp -s "$tmp/ids0" "$tmp/ids$i"; then same=identical; else same=DIFFERENT; fi
  awk -v mode="${MODES[$i]}" -v same="$same" -v base="$base" '
    /^\[prompt/ {
      for (i = 1; i <= NF; i++) { if ($i == "decode") r = $(i+1); if ($i == "generated") g = $(i+1) }
      gen += g - 1; t += (g - 1) / r
    }
    /^\[spec/ {
      for (i = 1; i <= NF; i++) {
        if ($i == "drafts") { split($(i-1), a, "/"); acc += a[1]; dr += a[2] }
        f = $i; sub(/;$/, "", f)
        if (f ~ /^[0-9]+:[0-9.]+$/) { split(f, b, ":"); pa[b[1]] += b[2]; np[b[1]]++; if (b[1] > K) K = b[1] }
        if ($i == "blocks,") blocks += $(i-1)
      }
    }
    END {
      rate = gen / t
      if (mode == "plain") { printf "| plain | | %.1f | 1.00 | | 1.00 | |\n", rate; print rate > "/dev/stderr"; exit }
      pos = ""
      for (k = 1; k <= K; k++) pos = pos sprintf(" %d:%.2f", k, pa[k] / np[k])
      sub(/ 0\./, " p-min 0.", mode)
      printf "| %s | %s | %.1f | %.2f | %d/%d | %.2f |%s |\n", mode, same, rate, rate / base, acc, dr, (acc + blocks) / blocks, pos
    }' "$tmp/err$i" 2>"$tmp/base"
  if [ -z "$base" ]; then base=$(cat "$tmp/base"); fi
done
