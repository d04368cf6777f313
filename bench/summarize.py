#!/usr/bin/env python3
"""bench/summarize.py: medians over the JSON lines bench/run.sh appends.
usage: bench/summarize.py /tmp/ts-bench/results.jsonl"""
import json, sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    r = json.loads(line)
    key = (r["model"].rstrip("/").split("/")[-1], r["kernels"], r["threads"])
    rows.setdefault(key, []).append(r)
print("| model | kernels | threads | runs | prefill pp128 tok/s (median, best) | decode tg64 tok/s (median, best) | MB/token | decode GB/s (median) | measured read GB/s (median) | % of bandwidth (median, best) | load avg |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for key in sorted(rows):
    rs = rows[key]
    med = lambda f: st.median([r[f] for r in rs])
    best = lambda f: max(r[f] for r in rs)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {len(rs)} | {med('prefill_tok_s'):.1f}, {best('prefill_tok_s'):.1f} | "
          f"{med('decode_tok_s'):.1f}, {best('decode_tok_s'):.1f} | {rs[0]['weight_bytes_per_token']/1e6:.1f} | "
          f"{med('decode_gb_s'):.1f} | {med('bandwidth_gb_s'):.1f} | {med('pct_of_bandwidth'):.0f}%, {best('pct_of_bandwidth'):.0f}% | "
          f"{min(r['loadavg'] for r in rs):.1f}-{max(r['loadavg'] for r in rs):.1f} |")
