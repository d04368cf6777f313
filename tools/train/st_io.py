# Pure-Python safetensors reading and writing for the training tools (no numpy, no torch: the
# development machine has neither, the GPU machine's scripts use it too).
#
# Owns: the header (8-byte little-endian length, JSON), one tensor's bytes, and writing a file from
# raw bytes. Does not: interpret dtypes (callers do: distill_mtp.py with numpy, splice_mtp.py as bytes).
import json, struct

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "U32": 4}


def read_header(path):
    """(header length, header dict) of a safetensors file; data starts at 8 + length."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    return n, hdr


def tensor_bytes(path, n, hdr, name):
    """The raw bytes of tensor `name` (n, hdr: read_header's answer for path)."""
    a, b = hdr[name]["data_offsets"]
    with open(path, "rb") as f:
        f.seek(8 + n + a)
        return f.read(b - a)


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype, shape, bytes-or-None), in file order; None = zeros of the
    tensor's size (left as a hole in the file)."""
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, data in tensors:
        size = DTYPE_BYTES[dt]
        for s in shape:
            size *= s
        if data is not None and len(data) != size:
            raise SystemExit(f"{name}: {len(data)} bytes for shape {shape} {dt}")
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + size]}
        off += size
    blob = json.dumps(hdr, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, dt, shape, data in tensors:
            a, b = hdr[name]["data_offsets"]
            if data is None:
                f.seek(b - a, 1)  # a hole reads back as zeros
            else:
                f.write(data)
        f.truncate()
