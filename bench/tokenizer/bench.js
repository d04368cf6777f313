#!/usr/bin/env node
// bench.js: encode throughput of turbospark's tokenizer vs Hugging Face tokenizers (npm `tokenizers`,
// Rust through napi) on the 1 MB document set, in one run, pass by pass interleaved.
//
//   RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node bench.js TOK_BENCH TOKDIR DOCDIR [PASSES]
//
// TOKDIR holds qwen3.json and qwen35.json; TOK_BENCH is the compiled tok_bench.c (a child process that
// encodes one pass per "pass" command). For each tokenizer: one cold pass each (reported apart), then a
// check that both give identical ids for every document, then PASSES timed passes of each, alternating
// which goes first. Each side times only its encode calls; documents are encoded one after another,
// whole (the HF side awaits each encode, as shared/tokenizer/tools/bench.js did for the anchor).
// Prints a JSON report; run.sh wraps it.
"use strict";
const fs = require("fs"), path = require("path"), os = require("os"), cp = require("child_process");
const { Tokenizer } = require("tokenizers");
const [BIN, TOKDIR, DOCDIR, PASSES_S] = process.argv.slice(2);
const PASSES = +(PASSES_S || 7);
const files = fs.readdirSync(DOCDIR).filter((f) => f.endsWith(".txt")).sort();
const texts = files.map((f) => fs.readFileSync(path.join(DOCDIR, f), "utf8"));
const bytes = texts.reduce((s, t) => s + Buffer.byteLength(t, "utf8"), 0);
const med = (a) => { const s = a.slice().sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };

function child(tokfile) {
  const p = cp.spawn(BIN, [tokfile, DOCDIR], { stdio: ["pipe", "pipe", "inherit"] });
  let buf = "", waiters = [];
  p.stdout.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0 && waiters.length) { const line = buf.slice(0, i); buf = buf.slice(i + 1); waiters.shift()(line); }
  });
  return {
    ask(cmd) { return new Promise((res) => { waiters.push(res); p.stdin.write(cmd + "\n"); }); },
    end() { p.stdin.end(); },
  };
}

async function hfPass(tok) {
  const c0 = process.cpuUsage();
  let sec = 0, n = 0;
  for (const t of texts) {
    const t0 = process.hrtime.bigint();
    const enc = await tok.encode(t, null, { addSpecialTokens: false });
    sec += Number(process.hrtime.bigint() - t0) / 1e9;
    n += enc.getIds().length;
  }
  const c = process.cpuUsage(c0);
  return { wall: sec, cpu: (c.user + c.system) / 1e6, tokens: n };
}

async function tsPass(ch) {
  const [w, c, n] = (await ch.ask("pass")).split(" ").map(Number);
  return { wall: w, cpu: c, tokens: n };
}

(async () => {
  const res = { hf_package: "tokenizers@" + require("tokenizers/package.json").version, node: process.version,
    cpu: os.cpus()[0].model, cpus: os.cpus().length, loadavg_before: os.loadavg(), documents: files.length, bytes,
    passes: PASSES, env: { RAYON_NUM_THREADS: process.env.RAYON_NUM_THREADS || null,
      TOKENIZERS_PARALLELISM: process.env.TOKENIZERS_PARALLELISM || null }, results: {} };
  for (const [key, f] of [["qwen3", "qwen3.json"], ["qwen35regex", "qwen35.json"]]) {
    const file = path.join(TOKDIR, f);
    const hf = Tokenizer.fromFile(file), ch = child(file);
    const coldTs = await tsPass(ch), coldHf = await hfPass(hf);
    // identical ids, document by document
    const ours = (await ch.ask("ids")).split(";");
    let mismatched = 0;
    for (let i = 0; i < texts.length; i++) {
      const ids = (await hf.encode(texts[i], null, { addSpecialTokens: false })).getIds().join(",");
      if (ids !== ours[i]) mismatched++;
    }
    const ts = [], hfr = [];
    for (let r = 0; r < PASSES; r++) {
      if (r % 2 === 0) { ts.push(await tsPass(ch)); hfr.push(await hfPass(hf)); }
      else { hfr.push(await hfPass(hf)); ts.push(await tsPass(ch)); }
    }
    ch.end();
    const mbs = (a, k) => a.map((x) => bytes / 1e6 / x[k]);
    const r = {
      documents_with_different_ids: mismatched,
      tokens: { turbospark: ts[0].tokens, hf: hfr[0].tokens },
      turbospark: { median_mb_per_s: +med(mbs(ts, "wall")).toFixed(3), best_mb_per_s: +Math.max(...mbs(ts, "wall")).toFixed(3),
        median_mb_per_cpu_s: +med(mbs(ts, "cpu")).toFixed(3), cold_pass_mb_per_s: +(bytes / 1e6 / coldTs.wall).toFixed(3) },
      hf: { median_mb_per_s: +med(mbs(hfr, "wall")).toFixed(3), best_mb_per_s: +Math.max(...mbs(hfr, "wall")).toFixed(3),
        median_mb_per_cpu_s: +med(mbs(hfr, "cpu")).toFixed(3), cold_pass_mb_per_s: +(bytes / 1e6 / coldHf.wall).toFixed(3) },
    };
    r.ratio_median_wall = +(r.turbospark.median_mb_per_s / r.hf.median_mb_per_s).toFixed(2);
    r.ratio_median_cpu = +(r.turbospark.median_mb_per_cpu_s / r.hf.median_mb_per_cpu_s).toFixed(2);
    r.ratio_cold = +(r.turbospark.cold_pass_mb_per_s / r.hf.cold_pass_mb_per_s).toFixed(2);
    res.results[key] = r;
    process.stderr.write(`${key}: turbospark ${r.turbospark.median_mb_per_s} MB/s, HF ${r.hf.median_mb_per_s} MB/s, ` +
      `ratio ${r.ratio_median_wall}x (cold pass ${r.ratio_cold}x), documents with different ids: ${mismatched}\n`);
  }
  res.loadavg_after = os.loadavg();
  console.log(JSON.stringify(res, null, 1));
})();
