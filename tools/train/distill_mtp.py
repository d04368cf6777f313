# Fine-tunes the MTP layer of the bundled default model by self-distillation, on the GPU machine (issue 6).
#
# Why: greedy drafting accepts a draft when it equals the main model's own argmax, but train.py taught
# the MTP layer the corpus's next-next token (CE against x[i+2]). Here the main model is frozen (its
# INT4 install is the teacher, exactly as turbospark runs it) and the MTP layer learns the main model's
# distribution for that position: KL(p_main(x[i+2] | x[..i+1]) || q_mtp(row i)). The main model's bits
# do not move, so everything measured of it (perplexity, logits, tests) stays as it is.
#
# Owns: dequantizing an INT4/INT8 install (MLX layout) into the transformers model, the distillation
# loop, choosing the MTP weights with the best held-out agreement, and writing them as
# --meta/mtp.safetensors (bf16, 6 MB: what splice_mtp.py puts into the install) and, with --out, a
# full bf16 checkpoint (main: the install's dequantized values; mtp: the new layer) for inspection.
# Continuing a distillation: pass the spliced install as --install (its MTP layer is the start).
# Does not: build the corpus (corpus.sh / tokenize.js), quantize or splice (splice_mtp.py, on the
# development machine), or define the model (train.py: CONFIG, MTP module, checkpoint writer).
# Invariants: seeded (--seed); the step count comes from --steps; held-out = the first windows of
# heldout.bin (as train.py), never tools/train/heldout.ids (the turbospark measurements' windows).
# Usage (GPU machine): python3 distill_mtp.py --install DIR --data DIR --tok DIR --meta DIR [--out DIR]
import argparse, csv, json, math, os, sys, time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train as T  # noqa: E402  (the model definition and checkpoint writer)
import st_io  # noqa: E402  (the safetensors header and bytes, shared with splice_mtp.py)


def read_safetensors(path):
    """name -> numpy array (U32, BF16 as float32, F32, F16 as float32), without a bf16-capable numpy."""
    n, hdr = st_io.read_header(path)
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        raw, dt = st_io.tensor_bytes(path, n, hdr, k), v["dtype"]
        if dt == "U32":
            arr = np.frombuffer(raw, dtype=np.uint32)
        elif dt == "BF16":
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            arr = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        elif dt == "F32":
            arr = np.frombuffer(raw, dtype=np.float32)
        else:
            raise ValueError(f"{path}: {k}: dtype {dt} not handled")
        out[k] = arr.reshape(v["shape"])
    return out


def dequantize_install(d, bits):
    """The install's tensors as float32, quantized matrices expanded (w = scale * q + bias per group;
    value c of a row at bits [bits*c, bits*c + bits) of the row's u32 stream, as ts_dequant_row)."""
    raw = {}
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            raw.update(read_safetensors(os.path.join(d, fn)))
    out = {}
    per = 32 // bits
    for k, v in raw.items():
        if k.endswith(".scales") or k.endswith(".biases"):
            continue
        base = k[: -len(".weight")] if k.endswith(".weight") else None
        if v.dtype == np.uint32 and base and base + ".scales" in raw:
            s, b = raw[base + ".scales"], raw[base + ".biases"]
            rows, words = v.shape
            cols = words * per
            q = np.stack([(v >> (bits * j)) & ((1 << bits) - 1) for j in range(per)], axis=-1).reshape(rows, cols)
            g = cols // s.shape[1]
            out[k] = q.astype(np.float32) * np.repeat(s, g, axis=1) + np.repeat(b, g, axis=1)
        else:
            out[k] = v.astype(np.float32)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--install", required=True, help="the shipped INT4 install (models/default)")
    ap.add_argument("--bits", type=int, default=4, help="its weight bits (4 or 8)")
    ap.add_argument("--data", required=True, help="folder with train.bin, heldout.bin (tokenize.js)")
    ap.add_argument("--tok", required=True, help="tokenizer folder")
    ap.add_argument("--out", help="also write the whole bf16 checkpoint here (for inspection; 61 MB)")
    ap.add_argument("--meta", required=True, help="folder for log, metrics.csv, report.json")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=300, help="schedule length")
    ap.add_argument("--budget", type=float, default=0, help="stop after this many training seconds (0: none)")
    ap.add_argument("--evals", type=int, default=10)
    ap.add_argument("--eval-windows", type=int, default=128)
    ap.add_argument("--hard", type=float, default=0.0, help="weight of a CE term on the teacher's argmax")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    os.makedirs(args.meta, exist_ok=True)
    torch.manual_seed(args.seed)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True

    tok_ids = {t["content"]: t["id"] for t in json.load(open(os.path.join(args.tok, "tokenizer.json")))["added_tokens"]}
    cfg, model = T.build_model(tok_ids)
    T.force_fp32_delta_rule(model)
    lm = model.model.language_model
    mtp = T.MTP(lm, cfg.text_config)

    t0 = time.time()
    sd = dequantize_install(args.install, args.bits)
    main_sd = {k: torch.from_numpy(v) for k, v in sd.items() if not k.startswith("mtp.")}
    mtp_sd = {}
    for k, v in sd.items():
        if k.startswith("mtp."):
            n = k[len("mtp."):]
            n = n.replace("layers.0.", "layer.", 1) if n.startswith("layers.0.") else n
            mtp_sd[n] = torch.from_numpy(v)
    missing, unexpected = model.load_state_dict(main_sd, strict=False)
    missing = [k for k in missing if "visual" not in k and k != "lm_head.weight"]
    assert not missing and not unexpected, (missing, unexpected)
    mtp.load_state_dict(mtp_sd, strict=True)
    model.tie_weights()
    assert torch.equal(model.lm_head.weight, lm.embed_tokens.weight)
    T.log(f"install {args.install}: {len(sd)} tensors dequantized in {time.time()-t0:.1f} s")
    model.to(dev).eval()
    mtp.to(dev)
    for p in model.parameters():
        p.requires_grad_(False)

    train_ids = T.load_ids(os.path.join(args.data, "train.bin"))
    held = T.heldout_windows(T.load_ids(os.path.join(args.data, "heldout.bin")), args.seq, args.eval_windows)
    gen = torch.Generator().manual_seed(args.seed)

    def batch():
        off = torch.randint(0, len(train_ids) - args.seq - 1, (args.batch,), generator=gen)
        return torch.stack([train_ids[o:o + args.seq] for o in off.tolist()]).to(dev, non_blocking=True)

    def teacher(x):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            h = lm(input_ids=x, use_cache=False).last_hidden_state
            t = model.lm_head(h[:, 1:-1]).float()   # position i+1's prediction of x[i+2], rows 0..T-3
        return h, t

    def student(x, h):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ho = mtp(lm, x[:, 1:-1], h[:, :-2])
            return model.lm_head(ho).float()

    @torch.no_grad()
    def evaluate():
        mtp.eval()
        agree = kl = 0.0
        n = 0
        for i in range(0, len(held), 32):
            x = held[i:i + 32].to(dev)
            h, t = teacher(x)
            s = student(x, h)
            agree += (s.argmax(-1) == t.argmax(-1)).float().mean().item() * x.shape[0]
            kl += F.kl_div(F.log_softmax(s, -1), F.log_softmax(t, -1), log_target=True,
                           reduction="batchmean").item() / s.shape[1] * x.shape[0]
            n += x.shape[0]
        mtp.train()
        return agree / n, kl / n

    opt = torch.optim.AdamW(mtp.parameters(), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    mf = open(os.path.join(args.meta, "metrics.csv"), "w", newline="")
    cw = csv.writer(mf)
    cw.writerow(["step", "seconds", "lr", "train_kl", "heldout_agree", "heldout_kl"])
    a0, k0 = evaluate()
    T.log(f"step 0: held-out agreement with the main argmax {a0:.4f}, KL {k0:.4f}")
    cw.writerow([0, 0, 0, "", f"{a0:.4f}", f"{k0:.4f}"])
    best = (a0, 0, {k: v.detach().clone() for k, v in mtp.state_dict().items()})
    every = max(1, args.steps // args.evals)
    t0 = time.time()
    acc, accn = 0.0, 0
    mtp.train()
    for step in range(1, args.steps + 1):
        p = min(1.0, max(0, step - args.warmup) / max(1, args.steps - args.warmup))
        lr = args.lr * min(1.0, step / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch()
        h, t = teacher(x)
        s = student(x, h)
        lt = F.log_softmax(t, -1)
        loss = F.kl_div(F.log_softmax(s, -1).reshape(-1, s.shape[-1]), lt.reshape(-1, s.shape[-1]),
                        log_target=True, reduction="batchmean")
        if args.hard > 0:
            loss = loss + args.hard * F.cross_entropy(s.reshape(-1, s.shape[-1]), t.argmax(-1).reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        acc += loss.item()
        accn += 1
        if step % every == 0 or step == args.steps:
            a, k = evaluate()
            el = time.time() - t0
            T.log(f"step {step}/{args.steps} {el:.0f}s lr {lr:.2e} train {acc/accn:.4f} | held-out agreement {a:.4f} "
                  f"KL {k:.4f} | {step*args.batch*args.seq/el/1e3:.0f}K tok/s")
            cw.writerow([step, f"{el:.1f}", f"{lr:.3e}", f"{acc/accn:.4f}", f"{a:.4f}", f"{k:.4f}"])
            mf.flush()
            acc, accn = 0.0, 0
            if a > best[0]:
                best = (a, step, {kk: v.detach().clone() for kk, v in mtp.state_dict().items()})
        if args.budget and time.time() - t0 > args.budget:
            T.log(f"time budget reached at step {step}")
            break
    mf.close()
    mtp.load_state_dict(best[2])
    T.log(f"best held-out agreement {best[0]:.4f} at step {best[1]} (start {a0:.4f})")
    nsh, tot = T.write_checkpoint(model, mtp, args.out, args.tok) if args.out else (None, None)
    # the MTP tensors alone (bf16, one small file): all splice_mtp.py needs from this machine
    from safetensors.torch import save_file
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in T.export_mtp(mtp).items()},
              os.path.join(args.meta, "mtp.safetensors"), metadata={"format": "pt"})
    report = dict(install=args.install, steps=args.steps, steps_run=step, best_step=best[1], agree_start=a0, agree_best=best[0],
                  kl_start=k0, lr=args.lr, batch=args.batch, seq=args.seq, hard=args.hard, seed=args.seed,
                  train_seconds=time.time() - t0, tokens_seen=step * args.batch * args.seq,
                  shards=nsh, checkpoint_bytes=tot, torch=torch.__version__)
    with open(os.path.join(args.meta, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    T.log(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
