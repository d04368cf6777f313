#!/bin/bash
# slim.sh out|in: take out of the working tree what a device call does not
# need (at most 64 MiB travels: the fixtures' reference logits, the tokenizer
# archives, tools/train but its held-out windows, the fuzz corpora, models/moe),
# and put it back.
# Everything it removes is tracked and unmodified, so "in" restores it from
# git (HEAD): no copy is held anywhere (a hold in /tmp was lost once with its
# machine). "out" refuses when any of those paths has uncommitted changes.
set -euo pipefail
# tools/train/heldout.ids stays: bench/spec/dflash.sh reads its windows (s21-run2 lost its table without it)
P="tests/fixtures/*/reference.safetensors tests/fixtures/tokenizer/*.xz tools/train :(exclude)tools/train/heldout.ids tests/fuzz models/moe"
case "${1:-}" in
out)
  # shellcheck disable=SC2086
  if ! git diff --quiet HEAD -- $P || [ -n "$(git ls-files --others --exclude-standard -- $P)" ]; then
    echo "slim.sh: uncommitted changes under the paths it would remove; commit them first" >&2; exit 1
  fi
  # shellcheck disable=SC2086
  git ls-files -z -- $P | xargs -0 rm -f
  { git ls-files -z | xargs -0 du -cb 2>/dev/null || true; } | tail -1 ;;
in)
  # shellcheck disable=SC2086
  git ls-files -z -d -- $P | xargs -0 -r git checkout HEAD --
  git status --short ;;
*) echo "usage: bench/cuda/slim.sh out|in" >&2; exit 2 ;;
esac
