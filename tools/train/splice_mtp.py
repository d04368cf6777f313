# Replaces the MTP layer of a quantized install with new bf16 MTP weights (issue 6), on the development
# machine, without touching one byte of the main model.
#
# Why: distill_mtp.py retrains only the MTP layer. Re-converting a whole checkpoint rebuilt from the
# install's dequantized values would re-quantize the main model too (bf16 rounding of scale*q+bias can
# move a value across a rounding boundary), so the shipped main model would change and every number
# measured of it (perplexity, logits, tests) would have to be measured again. Instead the new MTP
# tensors alone are quantized by `turbospark convert` itself (the same code that made the install), and
# their bytes are written over the old ones at the same offsets: shapes, dtypes and sizes are equal.
#
# How: a throw-away checkpoint holds the release config, every main-model tensor as zeros of its release
# shape/dtype (convert quantizes each tensor on its own, so the main tensors' values do not affect the
# MTP tensors' bytes; zeros are free to write) and the new mtp.* tensors. `turbospark convert --bits B
# --group G` turns it into an install; its mtp.* tensors are copied into a copy of the old install file.
# The result is checked: same header, every byte outside the mtp.* tensors identical to the old file.
#
# Owns: that splice and its checks. Does not: train (distill_mtp.py), quantize (turbospark convert).
# Pure Python (no numpy: the development machine has none).
# Usage: python3 splice_mtp.py --install models/default --mtp NEW/mtp.safetensors --turbospark build/turbospark
#        [--out DIR (default: the install itself, replaced atomically)] [--bits 4 --group 64]
import argparse, json, os, shutil, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from st_io import read_header, tensor_bytes, write_safetensors  # noqa: E402

TORCH_TO_ST = {"torch.bfloat16": "BF16", "torch.float16": "F16", "torch.float32": "F32"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--install", required=True)
    ap.add_argument("--mtp", required=True, help="safetensors with the new bf16 mtp.* tensors")
    ap.add_argument("--turbospark", required=True, help="the turbospark binary (its convert)")
    ap.add_argument("--release", default=os.path.join(HERE, "release"), help="config.json + keys.txt")
    ap.add_argument("--out", help="output install folder (default: replace the install's file)")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group", type=int, default=64)
    args = ap.parse_args()

    shards = [f for f in os.listdir(args.install) if f.endswith(".safetensors")]
    if len(shards) != 1:
        raise SystemExit(f"{args.install}: expected one safetensors file, found {len(shards)}")
    old = os.path.join(args.install, shards[0])
    on, ohdr = read_header(old)

    mn, mhdr = read_header(args.mtp)
    new_mtp = {k: (v["dtype"], v["shape"], tensor_bytes(args.mtp, mn, mhdr, k))
               for k, v in mhdr.items() if k != "__metadata__"}
    if not new_mtp or any(not k.startswith("mtp.") for k in new_mtp):
        raise SystemExit(f"{args.mtp}: expected only mtp.* tensors")

    tensors = []
    with open(os.path.join(args.release, "keys.txt")) as f:
        for line in f:
            name, shape, dt = line.rstrip("\n").split("\t")
            if name.startswith("model.visual."):
                continue  # convert drops the vision tower
            shape, dt = json.loads(shape), TORCH_TO_ST[dt]
            if name.startswith("mtp."):
                if name not in new_mtp:
                    raise SystemExit(f"{args.mtp}: missing {name}")
                ndt, nshape, data = new_mtp.pop(name)
                if (ndt, nshape) != (dt, shape):
                    raise SystemExit(f"{name}: {ndt} {nshape} in {args.mtp}, release has {dt} {shape}")
                tensors.append((name, dt, shape, data))
            else:
                tensors.append((name, dt, shape, None))
    if new_mtp:
        raise SystemExit(f"{args.mtp}: tensors not in the release layout: {sorted(new_mtp)}")

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
        os.makedirs(src)
        shutil.copy(os.path.join(args.release, "config.json"), src)
        write_safetensors(os.path.join(src, "model.safetensors"), tensors)
        subprocess.run([args.turbospark, "convert", src, dst, "--bits", str(args.bits),
                        "--group", str(args.group), "--quiet"], check=True)
        conv = [f for f in os.listdir(dst) if f.endswith(".safetensors")]
        if len(conv) != 1:
            raise SystemExit(f"convert wrote {len(conv)} safetensors files")
        cpath = os.path.join(dst, conv[0])
        cn, chdr = read_header(cpath)

        with open(old, "rb") as f:
            before = f.read()
        body = bytearray(before)
        spliced = 0
        for k, v in ohdr.items():
            if not k.startswith("mtp."):
                continue
            c = chdr.get(k)
            if c is None or c["dtype"] != v["dtype"] or c["shape"] != v["shape"]:
                raise SystemExit(f"{k}: convert wrote {c}, the install has {v} (other --bits/--group?)")
            a, b = v["data_offsets"]
            data = tensor_bytes(cpath, cn, chdr, k)
            body[8 + on + a:8 + on + b] = data
            spliced += 1
        if spliced != sum(1 for k in chdr if k.startswith("mtp.")):
            raise SystemExit("convert wrote mtp tensors the install does not have")

    # Checks: header untouched; every byte outside the mtp.* ranges identical.
    if before[:8 + on] != bytes(body[:8 + on]):
        raise SystemExit("internal error: header changed")
    ranges = sorted(tuple(v["data_offsets"]) for k, v in ohdr.items() if k.startswith("mtp."))
    pos, changed = 8 + on, 0
    for a, b in ranges:
        if before[pos:8 + on + a] != bytes(body[pos:8 + on + a]):
            raise SystemExit("internal error: a main-model byte changed")
        changed += sum(1 for x, y in zip(before[8 + on + a:8 + on + b], body[8 + on + a:8 + on + b]) if x != y)
        pos = 8 + on + b
    if before[pos:] != bytes(body[pos:]):
        raise SystemExit("internal error: a byte after the mtp tensors changed")

    if args.out:
        if os.path.abspath(args.out) != os.path.abspath(args.install):
            shutil.copytree(args.install, args.out, dirs_exist_ok=True)
        target = os.path.join(args.out, shards[0])
    else:
        target = old
    with open(target + ".tmp", "wb") as f:
        f.write(body)
    os.replace(target + ".tmp", target)
    print(f"{target}: {spliced} mtp tensors replaced, {changed} of "
          f"{sum(b - a for a, b in ranges)} mtp bytes changed, main model identical")


if __name__ == "__main__":
    main()
