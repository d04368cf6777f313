#!/usr/bin/python3
# Builds the prompts the DFlash drafter's training data grows from (issue 19): windows of the
# training split of the default model's corpus, tokenized with its tokenizer.
#
# Owns: which sources (the four small Debian packages of CORPUS.md: bible-kjv-text with bible-kjv,
# jargon-text, dict-devil, fortunes; the larger ones are not needed for prompts), the train/held-out
# split (corpus.py's own rule: documents whose hash falls in the held-out 3 % are skipped, so no
# prompt comes from a held-out document, and tools/train/heldout.ids is never read), the windows
# and the output file. Does not: generate continuations or train (dflash_train.py, GPU machine).
# Invariants: deterministic for the installed package versions (sorted sources, seeded offsets).
# Output: OUT (default build/dflash/prompts.u16.xz): xz of little-endian uint16 ids, N rows of P.
# Usage: /usr/bin/python3 tools/train/dflash_prompts.py [--out FILE] [--n N] [--len P] [--turbospark BIN]
import argparse, hashlib, json, lzma, os, random, struct, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402  (the sources and the split rule)

SOURCES = ("kjv", "jargon", "devil", "fortunes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build/dflash/prompts.u16.xz")
    ap.add_argument("--n", type=int, default=16384, help="prompts")
    ap.add_argument("--len", type=int, default=32, help="tokens per prompt")
    ap.add_argument("--turbospark", default="build/turbospark")
    ap.add_argument("--seed", type=int, default=19)
    a = ap.parse_args()
    docs = []
    for name, fn, pkg, lic, cap, kind in corpus.MIX:
        if name not in SOURCES:
            continue
        n_tr = n_ho = 0
        for did, text in fn():
            text = corpus.clean(text)
            if len(text.encode("utf-8")) < 200:
                continue
            h = int(hashlib.sha256(f"{name}/{did}".encode()).hexdigest()[:8], 16) % 100
            if h < corpus.HELDOUT_PERCENT:
                n_ho += 1
                continue
            docs.append((name, did, text))
            n_tr += 1
        print(f"{name:10s} {corpus.pkg_version(pkg):24s} train docs {n_tr:6d} (held-out docs skipped: {n_ho})", flush=True)
    with tempfile.TemporaryDirectory() as td:
        jl = os.path.join(td, "docs.jsonl")
        with open(jl, "w", encoding="utf-8") as f:
            for _, _, text in docs:
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        r = subprocess.run([a.turbospark, "tokenize", "-t", os.path.join(HERE, "tokenizer"), "--jsonl", jl],
                           capture_output=True, text=True, check=True)
    ids = [[int(x) for x in line.split(",")] if line else [] for line in r.stdout.split("\n")[: len(docs)]]
    P = a.len
    rng = random.Random(a.seed)
    pool = [d for d in ids if len(d) >= P]
    # every document's start once (titles, first lines), then random windows until N
    rows = [d[:P] for d in pool]
    rng.shuffle(rows)
    while len(rows) < a.n:
        d = pool[rng.randrange(len(pool))]
        o = rng.randrange(len(d) - P + 1)
        rows.append(d[o:o + P])
    rows = rows[: a.n]
    rng.shuffle(rows)
    blob = b"".join(struct.pack(f"<{P}H", *r) for r in rows)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with lzma.open(a.out, "wb", preset=9) as f:
        f.write(blob)
    print(f"{len(rows)} prompts of {P} tokens from {len(pool)} documents -> {a.out} "
          f"({os.path.getsize(a.out)} bytes, sha256 {hashlib.sha256(open(a.out, 'rb').read()).hexdigest()[:16]})")


if __name__ == "__main__":
    main()
