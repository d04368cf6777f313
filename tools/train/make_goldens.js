// Writes tests/fixtures/train/: expected ids of the default model's tokenizer (tools/train/tokenizer) for a
// few held-out texts, computed with the reference Hugging Face tokenizers library (npm `tokenizers`
// 0.23.2), so the engine's tokenizer is tested on this vocabulary too (12K vocab, our merges, added
// tokens at 12224.., a chat rendering).
//
// Owns: the choice of golden texts (the first ~6 KB, cut at a paragraph end, of the first held-out
// document of each of six sources, plus one chat-style text) and the file format: NN-name.txt (UTF-8,
// verbatim) and NN-name.ids (one decimal id per line).
// Does not: test anything (tests/test_train.c does).
// Usage: NODE_PATH=.../node_modules node tools/train/make_goldens.js CORPUS_DIR OUT_DIR
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

(async () => {
  const [corpus, out] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(path.join(__dirname, 'tokenizer', 'tokenizer.json'));
  fs.mkdirSync(out, { recursive: true });
  const want = ['austen', 'brown', 'kjv', 'jargon', 'pydoc', 'pysrc'];
  const seen = {};
  const texts = [];
  for (const l of fs.readFileSync(path.join(corpus, 'heldout.jsonl'), 'utf8').split('\n')) {
    if (!l) continue;
    const d = JSON.parse(l);
    if (!want.includes(d.src) || seen[d.src]) continue;
    seen[d.src] = true;
    let t = d.text;
    if (t.length > 6000) {
      const cut = t.lastIndexOf('\n\n', 6000);
      t = t.slice(0, cut > 1000 ? cut + 1 : 6000);
    }
    texts.push([d.src, t]);
  }
  texts.sort((a, b) => want.indexOf(a[0]) - want.indexOf(b[0]));
  texts.push(['chat', '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n' +
    "What's the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n" +
    'Paris.<|im_end|>\n<|endoftext|>\u00e9t\u00e9 cafe\u0301 \u00bd 2026-11-30\tdone\r\n']);
  let i = 0;
  for (const [name, t] of texts) {
    const base = path.join(out, `${String(i).padStart(2, '0')}-${name}`);
    const enc = await tok.encode(t, null, { addSpecialTokens: false });
    fs.writeFileSync(base + '.txt', t);
    fs.writeFileSync(base + '.ids', enc.getIds().join('\n') + '\n');
    console.log(base, Buffer.byteLength(t), 'bytes', enc.getIds().length, 'ids');
    i++;
  }
})();
