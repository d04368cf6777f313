#!/bin/bash
# bench/experts/stream.sh INSTALL BUDGET ROUNDS GEN CONFIG...: decode an install larger than RAM under
# a memory cap, with --expert-cache at several sizes against plain mmap, interleaved.
#
#   INSTALL  e.g. a synth of bench/experts/shape-122B-A10B-20layers.json (28.5 GB, INT4)
#   BUDGET   the memory cap in bytes for the whole process, page cache included (e.g. 12G)
#   ROUNDS   rounds; every round runs every config once, in a rotated order
#   GEN      tokens to decode per run (after a 4-token prompt)
#   CONFIG   "mmap" (no cache: every weight read in place through the mapping, TS_PACK=0, since the
#            load-time repacked copy of every matrix would not fit), "mmap-packed" (no cache, default
#            packing: only works when the install fits), or a cache size such as "8G", optionally
#            ":lru" (eviction policy), ":nopack" (TS_PACK=0: the plain kernels, as mmap uses) or ":buffered"
#            (the cache's reads through the page cache instead of O_DIRECT: TS_XC_DIRECT=0)
#            or ":prefetch" (next-layer prediction: TS_XC_PREFETCH=1)
#
# The cap: a cgroup-v1 memory controller child of this shell's own cgroup, memory.limit_in_bytes =
# BUDGET; it charges the process's anonymous memory and the page cache it faults in (the mapping), so
# plain mmap is held to the same budget as the cache. The install's pages are dropped from the page
# cache before every run (posix_fadvise DONTNEED per file), so each run starts cold.
# Output: one line per run (tok/s, MB read per token, hit rate, peak RSS, the cgroup's peak usage),
# then medians per config. Needs root for the cgroup.
set -e
cd "$(dirname "$0")/../.."
INSTALL=$1; BUDGET=$2; ROUNDS=$3; GEN=$4; shift 4
CFGS=("$@")
BIN=${BIN:-build/turbospark}
PARENT=/sys/fs/cgroup/memory$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)
CG=$PARENT/tsbench.$$
mkdir "$CG"
trap 'rmdir "$CG" 2>/dev/null || true' EXIT
bytes=$(python3 -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(float(s[:-1])*m[s[-1]]) if s[-1] in m else int(s))" "$BUDGET")
echo "$bytes" > "$CG/memory.limit_in_bytes"
drop() { python3 - "$INSTALL" <<'EOF'
import os, sys, glob
for f in glob.glob(os.path.join(sys.argv[1], "*.safetensors")):
    fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
EOF
}
OUT=$(mktemp -d)
n=${#CFGS[@]}
for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < n; k++)); do
        c=${CFGS[$(((k + r) % n))]}
        size=${c%%:*}; opt=""; [ "$c" != "$size" ] && opt=${c#*:}
        args=(); envs=()
        case $size in
            mmap) envs+=(TS_PACK=0) ;;
            mmap-packed) ;;
            *) args+=(--expert-cache "$size") ;;
        esac
        [ "$opt" = lru ] && args+=(--expert-policy lru)
        [ "$opt" = nopack ] && envs+=(TS_PACK=0)
        [ "$opt" = buffered ] && envs+=(TS_XC_DIRECT=0)
        [ "$opt" = prefetch ] && envs+=(TS_XC_PREFETCH=1)
        drop
        echo 0 > "$CG/memory.max_usage_in_bytes" 2>/dev/null || true
        log=$OUT/run.$r.$k
        # the shell joins the cgroup, then execs the run: everything it maps or allocates is charged
        set +e
        env "${envs[@]}" bash -c "echo \$\$ > $CG/cgroup.procs; exec /usr/bin/time -v $BIN run -m $INSTALL --ids 1,2,3,4 -n $GEN --print-ids -v ${args[*]}" > "$log" 2>&1
        rc=$?
        set -e
        peak=$(cat "$CG/memory.max_usage_in_bytes")
        tok=$(grep -o 'decode [0-9.]* tok/s' "$log" | grep -o '[0-9.]*' || echo 0)
        rss=$(grep 'Maximum resident' "$log" | grep -o '[0-9]*$' || echo 0)
        hit=$(grep -o 'hit rate [0-9.]*%' "$log" | head -1 | grep -o '[0-9.]*' || echo -)
        mbt=$(grep -o '[0-9.]* MB/token' "$log" | grep -o '^[0-9.]*' || echo -)
        ids=$(grep -m1 '^[0-9][0-9,]*$' "$log" | md5sum | cut -c1-8)
        printf "round %d %-12s rc %d decode %6s tok/s  hit %5s%%  %7s MB/token  peak RSS %6.2f GiB  cgroup peak %6.2f GiB  ids %s\n" \
            "$r" "$c" "$rc" "$tok" "$hit" "$mbt" "$(echo "$rss / 1048576" | bc -l)" "$(echo "$peak / 1073741824" | bc -l)" "$ids"
        echo "$c $tok $hit $mbt $rss $peak" >> "$OUT/all"
        [ $rc -ne 0 ] && tail -3 "$log"
    done
done
echo "medians over $ROUNDS rounds (budget $BUDGET, $GEN tokens):"
python3 - "$OUT/all" <<'EOF'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    c, tok, hit, mbt, rss, peak = line.split()
    rows.setdefault(c, []).append((float(tok), hit, mbt, int(rss), int(peak)))
for c, v in rows.items():
    f = lambda i: st.median([x[i] for x in v])
    hits = [float(x[1]) for x in v if x[1] != '-']
    mbts = [float(x[2]) for x in v if x[2] != '-']
    print("  %-12s decode %.3f tok/s (min %.3f max %.3f)  hit %s  MB/token %s  peak RSS %.2f GiB  cgroup peak %.2f GiB" % (
        c, f(0), min(x[0] for x in v), max(x[0] for x in v),
        "%.1f%%" % st.median(hits) if hits else "-", "%.0f" % st.median(mbts) if mbts else "-",
        max(x[3] for x in v) / 1048576, max(x[4] for x in v) / 1073741824))
EOF
rm -rf "$OUT"
