#!/usr/bin/python3
# Trains the byte-level BPE tokenizer of the bundled default model and writes it in the Hugging Face
# release layout: tokenizer.json, tokenizer_config.json (with the chat template), generation_config.json.
#
# Owns: the pre-tokenizer piece counts, the merge learning, the vocabulary order, the added tokens.
# Does not: encode the corpus (tokenize.js does that with the reference tokenizers library, which also
# proves the file loads there), or define the model.
# Invariants:
#  - The pre-tokenizer is exactly Qwen3.5's (model-spec.md 5.2): NFC, Split(regex, Isolated), ByteLevel
#    (no prefix space, no regex), ByteLevel decoder; the structure is copied from
#    shared/tokenizer/qwen35-regex/tokenizer.json. Python's `regex` module matches the reference
#    (Oniguruma) pieces on the shared goldens (tokenizer/README.md).
#  - Vocabulary: ids 0..255 are the 256 byte symbols in the GPT-2 byte-to-unicode order (the order the
#    Qwen vocabularies use), then one id per merge, in merge order; so every merge result is in the vocab
#    and the file is valid for any BPE implementation. Added tokens follow the BPE vocabulary in the
#    Qwen3.5 order (model-spec.md 5.2, ids 248044.. there, BASE.. here).
#  - Merge choice: highest pair count; ties broken by the smaller (left, right) symbol strings, so the
#    result depends only on the corpus.
#  - Pieces are learned per document as a whole (newline runs such as "\n\n" are real pieces), unlike a
#    trainer that reads a file line by line.
# Usage: /usr/bin/python3 tools/train/bpe_train.py CORPUS_DIR OUT_DIR [--merges N]
import collections, heapq, json, os, sys, time, unicodedata
import regex  # Debian python3-regex

QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen3.5 added tokens in id order (model-spec.md 5.2); `special` as in the Qwen3 tokenizer.json
# (tool/fim/think tags are added but not special). The TTS names follow the most common spelling.
ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
    ("<|audio_start|>", True), ("<|audio_end|>", True), ("<tts_pad>", True), ("<tts_text_bos>", True),
    ("<tts_text_eod>", True), ("<tts_text_bos_single>", True), ("<|audio_pad|>", True),
]
VOCAB_PADDED = 12288      # embedding rows (config vocab_size); rows past the last added token are unused
N_MERGES = VOCAB_PADDED - 64 - 256   # BPE vocab = 12224, added tokens 12224..12256


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map, in its canonical order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


def count_pieces(corpus_dir):
    pat = regex.compile(QWEN35_REGEX)
    counts = collections.Counter()
    n = 0
    for line in open(os.path.join(corpus_dir, "train.jsonl"), encoding="utf-8"):
        text = unicodedata.normalize("NFC", json.loads(line)["text"])
        counts.update(pat.findall(text))
        n += 1
    return counts, n


def train(counts, n_merges, log=print):
    b2u = bytes_to_unicode()
    byte_sym = {b: i for i, (b, _) in enumerate(b2u)}
    syms = [c for _, c in b2u]                       # id -> symbol string (byte-level chars)
    words, freq = [], []
    for piece, c in counts.items():
        words.append([byte_sym[b] for b in piece.encode("utf-8")])
        freq.append(c)
    pair_count = collections.defaultdict(int)
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        f = freq[wi]
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += f
            where[(a, b)].add(wi)
    heap = [(-c, syms[a], syms[b], a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    t0 = time.time()
    while len(merges) < n_merges and heap:
        negc, _, _, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -negc or -negc <= 0:
            continue                                  # stale entry
        new = len(syms)
        syms.append(syms[a] + syms[b])
        merges.append((a, b))
        changed = set()
        for wi in list(where[(a, b)]):
            w = words[wi]
            f = freq[wi]
            i, out = 0, []
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                changed.add(p)
            for p in zip(out, out[1:]):
                pair_count[p] += f
                where[p].add(wi)
                changed.add(p)
            words[wi] = out
        del where[(a, b)]
        pair_count.pop((a, b), None)
        for p in changed:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, syms[p[0]], syms[p[1]], p[0], p[1]))
            elif p in pair_count:
                del pair_count[p]
        if len(merges) % 2000 == 0:
            log(f"  {len(merges)} merges, last {syms[new]!r} count {-negc}, {time.time()-t0:.0f} s")
    return syms, merges


def write(out_dir, syms, merges, template_path):
    os.makedirs(out_dir, exist_ok=True)
    base = len(syms)
    vocab = {s: i for i, s in enumerate(syms)}
    assert len(vocab) == base, "duplicate symbol in vocabulary"
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    added = [{"id": base + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": sp} for i, (c, sp) in enumerate(ADDED)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_REGEX}, "behavior": "Isolated", "invert": False}, bl]},
        "post_processor": dict(bl), "decoder": dict(bl),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[syms[a], syms[b]] for a, b in merges]},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    ids = {c: base + i for i, (c, _) in enumerate(ADDED)}
    cfg = {
        "add_bos_token": False, "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special")} for a in added},
        "additional_special_tokens": [c for c, sp in ADDED if sp and c not in ("<|endoftext|>",)],
        "bos_token": None, "chat_template": open(template_path, encoding="utf-8").read(),
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 4096, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    gen = {"bos_token_id": None, "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
           "pad_token_id": ids["<|endoftext|>"], "do_sample": True, "temperature": 0.7, "top_k": 20,
           "top_p": 0.8, "repetition_penalty": 1.0}
    with open(os.path.join(out_dir, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2)
    return ids


def main():
    args = sys.argv[1:]
    n_merges = N_MERGES
    if "--merges" in args:
        k = args.index("--merges")
        n_merges = int(args[k + 1])
        del args[k:k + 2]
    corpus_dir, out_dir = args[0], args[1]
    here = os.path.dirname(os.path.abspath(__file__))
    t0 = time.time()
    counts, n_docs = count_pieces(corpus_dir)
    print(f"{n_docs} documents, {sum(counts.values())} pieces, {len(counts)} distinct, {time.time()-t0:.0f} s")
    syms, merges = train(counts, n_merges)
    ids = write(out_dir, syms, merges, os.path.join(here, "chat_template.jinja"))
    print(f"BPE vocab {len(syms)} ({len(merges)} merges), added tokens {min(ids.values())}..{max(ids.values())}, "
          f"padded vocab {VOCAB_PADDED}; {time.time()-t0:.0f} s")


if __name__ == "__main__":
    main()
