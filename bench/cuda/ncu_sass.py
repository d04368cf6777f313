#!/usr/bin/env python3
"""ncu_sass.py SASS_CSV[.xz] [DETAILS_CSV[.xz]]: read a kernel's time off ncu's source page, the way session 40
read the attention split (bench/cuda/RESULTS.md, s40-run3).

Input: `ncu -i REP --page source --csv --print-source sass` (one section a profiled kernel, each starting with a
"Kernel Name" line), made with the SourceCounters section (warp stall sampling); optionally the same report's
`--page details --csv`, for each kernel's grid and block (then instructions are also given per warp). Without
DETAILS_CSV the script looks for the SASS file's name with _sass replaced by _details.

Per kernel: executed warp instructions (and per warp), the stall reasons summed over the samples, the opcodes by
executed count, the straight runs of instructions executed equally often (a loop body, an unrolled staging: where
the instructions go) and the instructions with the most samples (where the warps wait). A kernel whose time is
its instruction chain shows many instructions a warp with 'wait', 'short_sb' and 'selected' on top; one that waits
on memory or barriers shows few, with 'long_sb', 'barrier' or 'membar' on top."""
import collections
import csv
import lzma
import os
import re
import sys


def read_text(path):
    return (lzma.open(path, 'rt') if path.endswith('.xz') else open(path)).read()


def sections(text):
    """(kernel name, rows with the header first) for each kernel of a source page"""
    out, cur = [], None
    for line in text.split('\n'):
        if line.startswith('"Kernel Name"'):
            cur = [line, []]
            out.append(cur)
        elif cur is not None and line:
            cur[1].append(line)
    return [(next(csv.reader([k]))[1], list(csv.reader(rows))) for k, rows in out]


def launch_warps(details_path):
    """kernel name -> warps of its first profiled launch (grid x block / 32), from a details page"""
    warps = {}
    if not details_path or not os.path.exists(details_path):
        return warps
    rows = list(csv.reader(read_text(details_path).split('\n')))
    hdr = rows[0]
    ki, bi, gi = hdr.index('Kernel Name'), hdr.index('Block Size'), hdr.index('Grid Size')
    for r in rows[1:]:
        if len(r) <= max(ki, bi, gi) or r[ki] == 'Kernel Name' or norm(r[ki]) in warps:
            continue
        try:  # "(256, 1, 1)", "(17, 4, 1)"
            b = [int(v) for v in r[bi].strip('()').split(',')]
            g = [int(v) for v in r[gi].strip('()').split(',')]
        except ValueError:
            continue
        warps[norm(r[ki])] = b[0] * b[1] * b[2] * g[0] * g[1] * g[2] / 32
    return warps


def norm(name):
    """a kernel's name as both pages agree on it: the source page writes template arguments as (bool)0, (int)2,
    the details page as 0, 2"""
    return re.sub(r"\((?:bool|int|unsigned int|long|char)\)", "", name).strip()


def as_int(s):
    try:
        return int(s.replace(',', ''))
    except ValueError:
        return 0


def report(name, rows, warps):
    hdr, data = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    H = {h: i for i, h in enumerate(hdr)}
    ex = [as_int(r[H['Instructions Executed']]) for r in data]
    smp = [as_int(r[H['Warp Stall Sampling (All Samples)']]) for r in data]
    stall_cols = [h for h in hdr if h.startswith('stall_') and '(Not' not in h]
    total, samples = sum(ex), sum(smp)
    nw = warps.get(norm(name), 0)
    print(f"== {name[:120]}")
    print(f"   {len(data)} instructions in the code, {total} executed" +
          (f", {total / nw:.0f} a warp ({nw:.0f} warps)" if nw else "") + f"; {samples} stall samples")
    st = collections.Counter()
    for r in data:
        for h in stall_cols:
            st[h] += as_int(r[H[h]])
    print("   stalls: " + ", ".join(f"{h[6:]} {100 * n / max(samples, 1):.0f}%" for h, n in st.most_common(8)))
    ops = collections.Counter()
    for r, n in zip(data, ex):
        src = r[H['Source']].split()
        if src:
            ops[(src[1] if src[0].startswith('@') and len(src) > 1 else src[0]).split('.')[0]] += n
    per = nw or 1
    print("   opcodes" + (" a warp" if nw else "") + ": " +
          ", ".join(f"{o} {n / per:.0f}" for o, n in ops.most_common(12)))
    runs, start = [], 0
    for i in range(1, len(data) + 1):
        if i == len(data) or ex[i] != ex[start]:
            runs.append((sum(ex[start:i]), i - start, ex[start], sum(smp[start:i]), data[start][H['Address']]))
            start = i
    print("   straight runs by executed instructions (count x times executed):")
    for tot, cnt, each, sm, addr in sorted(runs, reverse=True)[:10]:
        print(f"     {addr}  {cnt:4d} x {each:7d} = {tot:9d}" + (f" ({tot / nw:6.0f} a warp)" if nw else "") +
              f", {sm} samples")
    print("   most sampled:")
    for r, sm in sorted(zip(data, smp), key=lambda x: -x[1])[:10]:
        why = sorted(((as_int(r[H[h]]), h[6:]) for h in stall_cols), reverse=True)[:2]
        print(f"     {sm:5d} {r[H['Source']][:56]:56s} " + ", ".join(f"{w} {n}" for n, w in why if n))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sass = sys.argv[1]
    det = sys.argv[2] if len(sys.argv) > 2 else sass.replace('_sass', '_details')
    warps = launch_warps(det)
    done = set()
    for name, rows in sections(read_text(sass)):
        if name in done or not rows:
            continue  # (ncu prints a kernel's source once a profiled launch; the first is enough)
        done.add(name)
        report(name, rows, warps)


if __name__ == '__main__':
    main()
