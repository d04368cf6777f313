#!/usr/bin/env bash
# One GPU call that trains the default model's DFlash drafter (issue 19) and packs what comes back.
# Run from the repository root on the GPU machine (torch + transformers there, no network):
#   OUT=$OUT bash tools/train/dflash_device.sh
# Reads: models/default (the INT4 install, dequantized as the frozen target), tools/train/{dflash_train.py,
# train.py, distill_mtp.py, st_io.py, tokenizer/, dflash_prompts.u16.xz, dflash_val.u16.xz} (all tracked).
# Writes: $OUT/dftrain.tgz = drafter/{config.json,model.safetensors} (bf16, HF layout), check.safetensors,
# metrics.csv, log.txt, report.json. Wall: about 210 s (the training stops at --deadline 195 s after start).
set -uo pipefail
: "${OUT:?set OUT}"
DEADLINE=${DEADLINE:-195}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo "dflash_device: $(date -u +%T) start; deadline ${DEADLINE} s"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
mkdir -p "$W/run"
rc=0
python3 tools/train/dflash_train.py --install models/default \
    --prompts tools/train/dflash_prompts.u16.xz --val-prompts tools/train/dflash_val.u16.xz \
    --out "$W/run" --smoke-first --deadline "$DEADLINE" --budget-gen 55 --budget-train 150 \
    --gen-batch 1024 "$@" 2>&1 | tee "$W/run/stdout.txt" || rc=$?
echo "dflash_device: $(date -u +%T) trainer exit $rc"
# pack whatever exists, even after a failure (the log says why)
(cd "$W/run" && tar czf "$OUT/dftrain.tgz" --ignore-failed-read drafter check.safetensors metrics.csv log.txt report.json stdout.txt) || true
ls -l "$OUT"
exit "$rc"
