# The training ids the MoE run carries to the GPU machine (issue 18 item 6): the device call takes at
# most 64 MiB of tree, so instead of the whole 9.3M-token train.bin, 732 windows of 4096 tokens at evenly
# spaced offsets (2,998,272 tokens, every source of the corpus represented), xz-compressed (2.75 MB).
# Usage: /usr/bin/python3 tools/train/moe_slice.py TRAIN.bin OUT.bin   then   xz -9e -T1 OUT.bin
import sys
import numpy as np

ids = np.fromfile(sys.argv[1], dtype=np.uint16)
C, target = 4096, 3_000_000
starts = np.linspace(0, len(ids) - C, target // C).astype(np.int64)
np.concatenate([ids[s:s + C] for s in starts]).tofile(sys.argv[2])
