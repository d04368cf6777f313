#!/usr/bin/env python3
"""text_cmp.py [--rename REGEX=REPL ...] OLD.cubin NEW.cubin [SUBSTRING]: compare the kernels' machine
code (the ELF .text sections of two cubins, names with the anonymous
namespace's per-file hash normalized), to show that a refactor changed no
kernel. Make the cubins with nvcc -cubin (the Makefile's flags, -arch=sm_90)
from the old and new source; there is no disassembler on the build host, so
this is how a change is shown to leave the code alone. Prints one line a
kernel that differs or is new, then a count; exit 1 when any differs.
--rename applies re.sub(REGEX, REPL) to the new cubin's names first: a
kernel given another template argument with a default keeps its code but
not its mangled name (session 25: k_q4dp_as's SW, compared with
--rename '(k_q4dp_asI(?:Li\d+E){3})Lb0E=\1')."""
import re
import subprocess
import sys


def sections(path):
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
    data = open(path, "rb").read()
    secs = {}
    for line in out.splitlines():
        m = re.search(r"\]\s+(\.text\.\S+)\s+PROGBITS\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            name = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_[A-Za-z0-9_]+?_[0-9a-f]{8}", "ANON", m.group(1))
            off, size = int(m.group(2), 16), int(m.group(3), 16)
            secs[name] = data[off:off + size]
    return secs


def main():
    args, renames = sys.argv[1:], []
    while len(args) >= 2 and args[0] == "--rename":
        pat, _, repl = args[1].partition("=")
        renames.append((pat, repl))
        args = args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    old, new = sections(args[0]), sections(args[1])
    for pat, repl in renames:
        new = {re.sub(pat, repl, k): v for k, v in new.items()}
    sub = args[2] if len(args) > 2 else ""
    same = diff = added = 0
    for k in sorted(set(old) | set(new)):
        if sub not in k:
            continue
        if k not in new:
            print("gone ", k)
            diff += 1
        elif k not in old:
            added += 1
        elif old[k] == new[k]:
            same += 1
        else:
            print("DIFF ", k, len(old[k]), len(new[k]))
            diff += 1
    print(f"{same} same, {diff} differ or gone, {added} new")
    sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
