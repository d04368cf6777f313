#!/bin/bash
# slim.sh out|out-all [KEEP]|in: take out of the working tree what a device call does not
# need (at most 64 MiB travels: the fixtures' reference logits, the tokenizer
# archives, tools/train but its held-out windows, the fuzz corpora, models/moe),
# and put it back.
# Everything it removes is tracked and unmodified, so "in" restores it from
# git (HEAD): no copy is held anywhere (a hold in /tmp was lost once with its
# machine). "out" refuses when any of those paths has uncommitted changes.
set -euo pipefail
# tools/train/heldout.ids stays: bench/spec/dflash.sh reads its windows (s21-run2 lost its table without it)
P="tests/fixtures/*/reference.safetensors tests/fixtures/tokenizer/*.xz tools/train :(exclude)tools/train/heldout.ids tests/fuzz models/moe"
# out-all: also what only a build needs (the sources: the call carries built binaries), the text fixtures and the
# other benches' folders, for a pack that no longer fits beside the tree (session 24: 14.7 MB of binaries)
P2="src tools/cli tools/server tests/fixtures/chat tests/fixtures/server bench/experts bench/spec bench/cuda/RESULTS.md"
case "${1:-}" in
out|out-all)
  [ "$1" = out-all ] && P="$P $P2"
  # shellcheck disable=SC2086
  if ! git diff --quiet HEAD -- $P || [ -n "$(git ls-files --others --exclude-standard -- $P)" ]; then
    echo "slim.sh: uncommitted changes under the paths it would remove; commit them first" >&2; exit 1
  fi
  # shellcheck disable=SC2086
  git ls-files -z -- $P | xargs -0 rm -f
  # out-all KEEP: the earlier calls' record folders too, all but bench/cuda/KEEP (the call's own command.sh)
  if [ "$1" = out-all ] && [ -n "${2:-}" ]; then
    git ls-files -z bench/cuda | grep -zE "run[^/]*/" | grep -zv "^bench/cuda/$2/" | xargs -0 -r rm -f
  fi
  # what stays (tracked files; the carried pack comes on top, 64 MiB in all)
  git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {printf "%d bytes tracked stay\n", s}' ;;
in)
  # shellcheck disable=SC2086
  git ls-files -z -d -- $P $P2 bench/cuda | xargs -0 -r git checkout HEAD --
  git status --short ;;
*) echo "usage: bench/cuda/slim.sh out | out-all [KEEP: the call's bench/cuda folder] | in" >&2; exit 2 ;;
esac
