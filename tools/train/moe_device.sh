#!/bin/bash
# One device call (issue 18 item 6): smoke run, real run, INT4 convert; results tarred into $OUT.
set -u
T0=$(date +%s)
G=$(cd "$(dirname "$0")" && pwd)
R=$(cd "$G/../.." && pwd)
export LD_LIBRARY_PATH=$G/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=$(mktemp -d)
mkdir -p "$W/py" "$W/data"
cp "$R/tools/train/train.py" "$G/train_moe.py" "$G/mtp_ref.py" "$W/py/"
xz -dc "$G/train-slice.bin.xz" > "$W/data/train.bin"
cp "$G/heldout.bin" "$W/data/heldout.bin"
cp "$R/tools/train/heldout.ids" "$W/data/heldout.ids"
TOK=$R/tools/train/tokenizer
ls -la "$W/data" "$TOK" > "$OUT/setup.txt" 2>&1
nvidia-smi --query-gpu=name,memory.used --format=csv >> "$OUT/setup.txt" 2>&1
echo "== smoke $(( $(date +%s) - T0 )) s" > "$OUT/log.txt"
timeout 40 python3 "$W/py/train_moe.py" --data "$W/data" --tok "$TOK" --out "$W/smoke" --meta "$W/smoke-meta" --smoke \
    --steps 6 --batch 16 --evals 1 --eval-windows 8 --warmup 2 --prompts "The" --sample-tokens 8 >> "$OUT/log.txt" 2>&1
echo "== smoke rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
timeout 112 python3 "$W/py/train_moe.py" --data "$W/data" --tok "$TOK" --out "$W/moe-bf16" --meta "$W/meta" \
    --budget 48 --evals 4 --eval-windows 64 --warmup 50 \
    --prompts "It is a truth universally acknowledged, that" "The Python interpreter" --sample-tokens 40 >> "$OUT/log.txt" 2>&1
echo "== real rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
"$G/turbospark" convert "$W/moe-bf16" "$W/moe-int4" --bits 4 --quiet >> "$OUT/log.txt" 2>&1
echo "== convert rc $? at $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
du -sb "$W/moe-int4" "$W/moe-bf16" >> "$OUT/log.txt" 2>&1
tar -C "$W" -cJf "$OUT/moe-int4.tar.xz" moe-int4 meta smoke-meta 2>> "$OUT/log.txt"
tar -C "$W" -cJf "$OUT/moe-bf16.tar.xz" moe-bf16 2>> "$OUT/log.txt"
echo "== done at $(( $(date +%s) - T0 )) s" >> "$OUT/log.txt"
