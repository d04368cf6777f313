// Encodes the corpus with the trained tokenizer through the reference Hugging Face tokenizers library
// (npm `tokenizers`, the Rust code transformers uses), into the flat uint16 id files the trainer reads.
//
// Owns: train.bin / heldout.bin (little-endian uint16, documents in corpus order, each followed by
// <|endoftext|>), and the round-trip check decode(encode(doc)) == doc on every held-out document.
// Does not: train the tokenizer (bpe_train.py) or build the corpus (corpus.py).
// Invariant: every id < 65536 (the vocabulary is 12288), so uint16 is lossless.
// Usage: node tools/train/tokenize.js CORPUS_DIR TOKENIZER_DIR OUT_DIR   (NODE_PATH must reach `tokenizers`)
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

async function encodeFile(tok, eot, src, dst, check) {
  const lines = fs.readFileSync(src, 'utf8').split('\n').filter((l) => l.length);
  const chunks = [];
  let n = 0, bad = 0, bytes = 0;
  const bySrc = {};
  for (const l of lines) {
    const d = JSON.parse(l);
    const enc = await tok.encode(d.text, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    ids.push(eot);
    chunks.push(Uint16Array.from(ids));
    n += ids.length;
    bytes += Buffer.byteLength(d.text, 'utf8');
    const s = (bySrc[d.src] = bySrc[d.src] || { docs: 0, tokens: 0, bytes: 0 });
    s.docs++; s.tokens += ids.length; s.bytes += Buffer.byteLength(d.text, 'utf8');
    if (check) {
      const back = await tok.decode(enc.getIds(), false);
      if (back !== d.text.normalize('NFC')) bad++;
    }
  }
  const all = new Uint16Array(n);
  let o = 0;
  for (const c of chunks) { all.set(c, o); o += c.length; }
  fs.writeFileSync(dst, Buffer.from(all.buffer));
  return { docs: lines.length, tokens: n, bytes, bytes_per_token: +(bytes / n).toFixed(3), roundtrip_failures: check ? bad : null, by_source: bySrc };
}

(async () => {
  const [corpus, tokdir, out] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(path.join(tokdir, 'tokenizer.json'));
  const eot = JSON.parse(fs.readFileSync(path.join(tokdir, 'tokenizer.json'), 'utf8'))
    .added_tokens.find((t) => t.content === '<|endoftext|>').id;
  fs.mkdirSync(out, { recursive: true });
  const stats = {
    eot,
    train: await encodeFile(tok, eot, path.join(corpus, 'train.jsonl'), path.join(out, 'train.bin'), false),
    heldout: await encodeFile(tok, eot, path.join(corpus, 'heldout.jsonl'), path.join(out, 'heldout.bin'), true),
  };
  fs.writeFileSync(path.join(out, 'stats.json'), JSON.stringify(stats, null, 1));
  console.log(JSON.stringify({ train: { tokens: stats.train.tokens, bpt: stats.train.bytes_per_token },
    heldout: { tokens: stats.heldout.tokens, bpt: stats.heldout.bytes_per_token,
      roundtrip_failures: stats.heldout.roundtrip_failures } }));
  if (stats.heldout.roundtrip_failures) process.exit(1);
})();
