#!/usr/bin/env python3
"""trace_view.py [--kernels | --gdn] FILE [FILE...]: where a decode step's dp4a products spend
their time, from cuda_bench --trace (FILE or FILE.xz; a build with -DTSC_TRACE; q4dp.cu's
trace_at records, per block of every k_q4dp launch, the global timer at its
entry, when its PDL wait returns, once x is staged, and at its end).

Per launch, in step order (times in us):
  gap    first wait release - previous product's last block end (includes
         the GDN / attention kernels between two products)
  early  how long before that release the launch's first block was resident
  stage  median block: staging done - wait released (norm, digits, syncs)
  stream median block: end - staged (the weights and the dot products)
  tail   last block end - median block end
  GB/s   the launch's weight bytes over (last end - first release)
and the step's totals of each column, so that the fixed costs of the chain
(gap + stage + tail) can be weighed against the streaming itself."""
import glob
import lzma
import os
import re
import statistics
import sys


def load(path):
    launches, blocks, head = [], {}, ""
    with (lzma.open(path, 'rt') if path.endswith('.xz') else open(path)) as f:
        for line in f:
            p = line.split()
            if not p:
                continue
            if p[0] == "#":
                head = line.strip()
            elif p[0] == "L":
                d = dict(zip(p[2::2], p[3::2]))
                launches.append({k: int(v) for k, v in d.items()})
                blocks[int(p[1])] = []
            elif p[0] == "B":
                blocks[int(p[1])].append(tuple(int(x) for x in p[3:8]))
    return head, launches, blocks


def view(path):
    head, launches, blocks = load(path)
    print(f"== {path}: {head}")
    print(f"{'#':>3} {'rows':>6} {'cols':>6} {'xm':>2} {'grid':>4} {'MB':>6} {'gap':>6} {'early':>6} {'stage':>6} "
          f"{'stream':>7} {'tail':>6} {'span':>7} {'GB/s':>6}")
    tot = {"gap": 0.0, "stage": 0.0, "stream": 0.0, "tail": 0.0, "span": 0.0}
    prev_end, first, last = None, None, None
    for i, m in enumerate(launches):
        b = blocks.get(i, [])
        if not b:
            continue
        ent = [x[1] for x in b]
        rel = [x[2] for x in b]
        stg = [x[3] for x in b]
        end = [x[4] for x in b]
        r0, e_max = min(rel), max(end)
        stage = statistics.median([s - r for r, s in zip(rel, stg)]) / 1e3
        stream = statistics.median([e - s for s, e in zip(stg, end)]) / 1e3
        tail = (e_max - statistics.median(end)) / 1e3
        early = (r0 - min(ent)) / 1e3
        gap = (r0 - prev_end) / 1e3 if prev_end is not None else 0.0
        span = (e_max - r0) / 1e3
        mb = m["rows"] * m["cols"] * 0.5625 / 1e6
        gbs = mb * 1e6 / (span * 1e-6) / 1e9 if span > 0 else 0
        print(f"{i:>3} {m['rows']:>6} {m['cols']:>6} {m['xm']:>2} {m['grid']:>4} {mb:>6.1f} {gap:>6.2f} {early:>6.2f} "
              f"{stage:>6.2f} {stream:>7.2f} {tail:>6.2f} {span:>7.2f} {gbs:>6.0f}")
        for k, v in (("gap", gap), ("stage", stage), ("stream", stream), ("tail", tail), ("span", span)):
            tot[k] += v
        prev_end = e_max
        first = r0 if first is None else first
        last = e_max
    print(f"totals (us): " + ", ".join(f"{k} {v:.1f}" for k, v in tot.items()) +
          f"; first release to last end {((last - first) / 1e3) if first else 0:.1f}")


_SRC = {}


def name_of(tag):
    """the kernel (or device function) whose TSC_ENTRY is at unit:line, read from src/cuda beside this script's
    repository: the working tree's, so read a trace with the tree of the commit it was made from (a line that has
    moved since names another function; the tag itself when the source is not there)"""
    f, _, ln = tag.partition(":")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "cuda", f)
    if path not in _SRC:
        try:
            _SRC[path] = open(path).read().splitlines()
        except OSError:
            _SRC[path] = None
    lines = _SRC[path]
    if not lines or not ln.isdigit():
        return tag
    if "ENTRY" not in lines[min(int(ln), len(lines)) - 1]:
        # the entry is in a header the unit includes (__BASE_FILE__ names the unit): the one with an entry there
        for h in sorted(glob.glob(os.path.join(os.path.dirname(path), "*.cuh"))):
            if h not in _SRC:
                _SRC[h] = open(h).read().splitlines()
            if len(_SRC[h]) >= int(ln) and "TSC_ENTRY(" in _SRC[h][int(ln) - 1]:
                lines = _SRC[h]
                break
    for i in range(min(int(ln), len(lines)) - 1, -1, -1):
        if "__global__" in lines[i] or re.match(r"^\S.*__device__", lines[i]):
            text = " ".join(lines[i:i + 3]).split("__global__")[-1].split("__device__")[-1]
            names = [n for n in re.findall(r"(\w+)\s*\(", text) if not n.startswith("__")]
            return f"{names[0]}@{ln}" if names else tag
    return tag


def kernels(path, gap_us=20.0):
    """--kernels: every kernel's launches in the last replay of the trace, from the K lines (common.cuh's
    TSC_ENTRY ring: a block's entry, PDL release and end, its unit and source line). Replays are told apart
    by a pause of gap_us with no block running; a launch starts where the source line changes or a block's
    release comes after every block of the current launch has ended (a dependent launch waits for its
    predecessor to complete). Per launch: the unit:line, blocks, release and end relative to the replay's
    first release, its span (last end - first release), the gap from the previous launch's end to its
    release, how long before its release its first block was resident, its median block's end after the release
    and the tail (span - that median: the time the launch waits on its slowest blocks; session 41 read the
    products' tails this way, ~12% of gate/up's span, and found per-SM rates that do not persist across launches)."""
    recs = []
    with (lzma.open(path, 'rt') if path.endswith('.xz') else open(path)) as f:
        for line in f:
            p = line.split()
            if p and p[0] == "K":
                recs.append((name_of(p[1].split("/")[-1] + ":" + p[2]), int(p[3]), int(p[5]), int(p[6]), int(p[7])))
    if not recs:
        print(f"== {path}: no K lines (a trace build older than session 19, or nothing ran)")
        return
    recs.sort(key=lambda r: (r[3] or r[2]))
    # the last replay: after the last pause in which nothing ran
    start, hi = 0, 0
    for i, r in enumerate(recs):
        t = r[3] or r[2]
        if i and t - hi > gap_us * 1e3:
            start = i
        hi = max(hi, r[4])
    recs = recs[start:]
    launches = []
    for r in recs:
        rel = r[3] or r[2]
        if launches and launches[-1]["tag"] == r[0] and rel <= launches[-1]["end"]:
            L = launches[-1]
        else:
            L = {"tag": r[0], "n": 0, "rel": rel, "end": 0, "ent": r[2], "ends": []}
            launches.append(L)
        L["ends"].append(r[4])
        L["n"] += 1
        L["rel"] = min(L["rel"], rel)
        L["end"] = max(L["end"], r[4])
        L["ent"] = min(L["ent"], r[2])
    t0 = launches[0]["rel"]
    print(f"== {path}: {len(launches)} launches in the last replay, {(max(L['end'] for L in launches) - t0) / 1e3:.1f} us")
    print(f"{'#':>4} {'kernel':<28} {'blocks':>6} {'release':>9} {'end':>9} {'span':>7} {'gap':>6} {'early':>6} "
          f"{'median':>7} {'tail':>6}")
    by = {}
    prev = None
    for i, L in enumerate(launches):
        gap = (L["rel"] - prev) / 1e3 if prev is not None else 0.0
        span = (L["end"] - L["rel"]) / 1e3
        med = (statistics.median(L["ends"]) - L["rel"]) / 1e3
        print(f"{i:>4} {L['tag']:<28} {L['n']:>6} {(L['rel'] - t0) / 1e3:>9.2f} {(L['end'] - t0) / 1e3:>9.2f} "
              f"{span:>7.2f} {gap:>6.2f} {(L['rel'] - L['ent']) / 1e3:>6.2f} {med:>7.2f} {span - med:>6.2f}")
        a = by.setdefault(L["tag"], [0, 0.0, 0.0, 0.0])
        a[0] += 1
        a[1] += span
        a[2] += gap
        a[3] += span - med
        prev = L["end"]
    print("per kernel (launches, total span us, total gap before it us, total tail us):")
    for k, (n, sp, g, tl) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"  {k:<28} {n:>4} {sp:>9.1f} {g:>9.1f} {tl:>9.1f}")


def gdn(path, gap_us=5.0):
    """--gdn: k_gdn_fused's phases (gdn.cu's G lines: a block's global timer at its PDL release, after the conv
    and norms, after the scan, after the first and second cluster barriers, at its end), over the launches of
    the last replay (launches told apart by a pause of gap_us between two blocks' releases; the last replay's
    are the last as many as the first replay has): each phase's 10th, 50th and 90th percentile over the blocks,
    in us, and the median spread of a launch's releases."""
    recs = []
    with (lzma.open(path, 'rt') if path.endswith('.xz') else open(path)) as f:
        for line in f:
            p = line.split()
            if p and p[0] == "G":
                recs.append([int(x) for x in p[3:9]])
    if not recs:
        print(f"== {path}: no G lines (a trace build older than session 38)")
        return
    recs.sort(key=lambda r: r[0])
    launches, cur = [], []
    for r in recs:
        if cur and r[0] - cur[-1][0] > gap_us * 1e3:
            launches.append(cur)
            cur = []
        cur.append(r)
    launches.append(cur)
    # (k_gdn_fused's B, the default since session 38, stores o and the state after the second barrier: the last
    # two phases are then the rows' outputs + barrier 2 and the digits + the stores + barrier 3)
    names = ["conv + norms", "scan", "cluster barrier 1", "o (+ state) + barrier 2", "digits (+ stores), barrier 3"]
    ph = [[] for _ in names]
    spread = []
    for L in launches[-min(len(launches), 64):]:
        for r in L:
            for i in range(len(names)):
                ph[i].append((r[i + 1] - r[i]) / 1e3)
        spread.append((max(r[0] for r in L) - min(r[0] for r in L)) / 1e3)
    print(f"== {path}: {len(launches)} launches of k_gdn_fused, the last {min(len(launches), 64)} read")
    for n, v in zip(names, ph):
        v.sort()
        print(f"  {n:<26} p10 {v[len(v) // 10]:6.2f}  median {v[len(v) // 2]:6.2f}  p90 {v[9 * len(v) // 10]:6.2f}")
    print(f"  releases of a launch spread over {statistics.median(spread):.2f} us (median)")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--kernels":
        for p in args[1:]:
            kernels(p)
    elif args and args[0] == "--gdn":
        for p in args[1:]:
            gdn(p)
    else:
        for p in args:
            view(p)
