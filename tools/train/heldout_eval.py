#!/usr/bin/python3
# Held-out perplexity and MTP agreement of the bundled default model, by one fixed protocol, so that
# the bf16 checkpoint under transformers (train.py post_checks) and the shipped install under turbospark
# are compared on exactly the same numbers.
#
# Protocol (shared by both sides):
#  - Data: tools/train/heldout.ids: 16 windows of 512 token ids, one window per line (comma-separated),
#    `#` lines are comments. Each window is the first 512 tokens of a distinct held-out document (never
#    seen in training), picked round-robin across the corpus sources (corpus.py, CORPUS.md).
#  - Each window is scored on its own from an empty state (no carry-over between windows), with no
#    BOS/EOS added: context length 512, stride 512 (non-overlapping windows).
#  - Scored tokens: positions 1..511 of each window (the first token has no context): 16 x 511 = 8176.
#  - Perplexity = exp(sum of -log softmax(logits)[next id] / number of scored tokens), log-softmax in
#    float64 over the full logit row (all vocab_size rows, including unused padded ids).
#  - MTP (teacher-forced): row i of `turbospark logits --head mtp` (token ids[i+1], main hidden i,
#    position i) predicts ids[i+2]; rows 0..509 of each window are scored. Reported: top-1 accuracy
#    against the text, and agreement with the main head's greedy choice at the same position (argmax
#    of main row i+1), which is the first-position acceptance rate of greedy MTP drafting on this text.
#
# Owns: making heldout.ids (`make`), scoring turbospark logits files (`score`).
# Does not: run turbospark or transformers (the caller produces the logits files; train.py computes the
#   transformers numbers with the same protocol in post_checks()).
# Usage:
#   heldout_eval.py make CORPUS_DIR BIN_DIR OUT_IDS            # rebuild heldout.ids (deterministic)
#   heldout_eval.py score IDS VOCAB MAIN_DIR [MTP_DIR]
#       MAIN_DIR/wNN.f32 = `turbospark logits -m DIR --ids <window NN> -o MAIN_DIR/wNN.f32`
#       MTP_DIR/wNN.f32  = the same with `--head mtp` (511 rows per window)
#   Example loop (bash):
#     i=0; grep -v '^#' tools/train/heldout.ids | while read w; do
#       build/turbospark logits -m DIR --ids "$w" -o /tmp/ho/w$(printf %02d $i).f32
#       build/turbospark logits -m DIR --ids "$w" --head mtp -o /tmp/ho_mtp/w$(printf %02d $i).f32
#       i=$((i+1)); done
#     tools/train/heldout_eval.py score tools/train/heldout.ids 12288 /tmp/ho /tmp/ho_mtp
import json, math, os, sys

import numpy as np

WINDOWS = 16
CTX = 512


def read_ids(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            rows.append([int(v) for v in line.split(",")])
    return rows


def make(corpus_dir, bin_dir, out):
    docs = [json.loads(l) for l in open(os.path.join(corpus_dir, "heldout.jsonl"), encoding="utf-8")]
    ids = np.fromfile(os.path.join(bin_dir, "heldout.bin"), dtype=np.uint16)
    eot = json.load(open(os.path.join(bin_dir, "stats.json")))["eot"]
    ends = np.flatnonzero(ids == eot)
    assert len(ends) == len(docs), (len(ends), len(docs))
    start, by_src = 0, {}
    for d, e in zip(docs, ends):
        toks = ids[start:e]
        start = e + 1
        if len(toks) >= CTX:
            by_src.setdefault(d["src"], []).append((d["id"], toks[:CTX]))
    order = [s for s in dict.fromkeys(d["src"] for d in docs) if s in by_src]
    picked, k = [], 0
    while len(picked) < WINDOWS:
        progressed = False
        for s in order:
            if k < len(by_src[s]) and len(picked) < WINDOWS:
                picked.append((s,) + by_src[s][k])
                progressed = True
        k += 1
        assert progressed, "not enough held-out documents of 512 tokens"
    with open(out, "w") as f:
        f.write(f"# Held-out windows for perplexity / MTP measurement (protocol: tools/train/heldout_eval.py).\n"
                f"# {WINDOWS} windows x {CTX} ids, tokenizer tools/train/tokenizer/tokenizer.json; each window is "
                f"the first {CTX} tokens of one held-out document.\n")
        for s, did, toks in picked:
            f.write(f"# {s}/{did}\n")
            f.write(",".join(str(int(t)) for t in toks) + "\n")
    print(f"wrote {out}: " + ", ".join(f"{s}/{d}" for s, d, _ in picked))


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def score(ids_path, vocab, main_dir, mtp_dir=None):
    rows = read_ids(ids_path)
    nll, n, top1, agree, cnt = 0.0, 0, 0, 0, 0
    for k, w in enumerate(rows):
        w = np.array(w)
        L = len(w)
        lg = np.fromfile(os.path.join(main_dir, f"w{k:02d}.f32"), dtype="<f4").reshape(L, vocab)
        lp = log_softmax(lg[:-1])
        nll -= lp[np.arange(L - 1), w[1:]].sum()
        n += L - 1
        if mtp_dir:
            ml = np.fromfile(os.path.join(mtp_dir, f"w{k:02d}.f32"), dtype="<f4").reshape(L - 1, vocab)
            d = ml[: L - 2].argmax(1)                      # row i predicts w[i+2]
            top1 += int((d == w[2:]).sum())
            agree += int((d == lg[1:L - 1].argmax(1)).sum())
            cnt += L - 2
    out = {"tokens_scored": n, "ppl": math.exp(nll / n)}
    if mtp_dir:
        out.update(mtp_top1=top1 / cnt, mtp_agree_main_greedy=agree / cnt, mtp_rows=cnt)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) >= 5 and sys.argv[1] == "score":
        score(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
    else:
        sys.exit(__doc__ or "see the header of this file")
