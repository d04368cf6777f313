# Trains the bundled default model (issue 6): a small Qwen3.5 (`qwen3_5`) with one MTP layer, with the
# transformers implementation, on the GPU machine, and saves it in the release layout.
#
# Owns: the model shape (CONFIG), the MTP module used in training, the joint loss, the optimizer and
# schedule, the held-out evaluation during training, the checkpoint writer, and the post-training
# checks (reload with transformers, perplexity on tools/train/heldout.ids, MTP agreement with the
# shared reference, samples).
# Does not: build the corpus or tokenizer (corpus.py, bpe_train.py, tokenize.js), convert or ship
# (turbospark convert, later).
# Invariants:
#  - Main model = transformers' Qwen3_5ForConditionalGeneration (text tower trained, a tiny untrained
#    vision tower kept only so config.json and tensor names are exactly the release layout, as in
#    shared/tools/make_fixtures.py).
#  - MTP (model-spec.md section 4, shared/tools/mtp_ref.py): row i gets (token x[i+1], final-normed hidden
#    h[i], position i) and predicts x[i+2]: e = norm_e(embed(x[i+1])), hh = norm_h(h[i]),
#    y = fc([e, hh]), one full-attention decoder layer causal over the rows, mtp.norm, shared lm_head.
#    The MTP loss gradient flows into the main model (joint training, weight MTP_W).
#  - Checkpoint: model.language_model.*, model.visual.*, mtp.* (layer 0 as mtp.layers.0.*, dense MLP
#    names), no lm_head.weight (tied), A_log and linear_attn.norm.weight F32, all else BF16, shards of at
#    most SHARD_BYTES plus model.safetensors.index.json (the device tool returns files <= 16 MiB).
#  - Seeded: torch / data sampling use --seed. The step count is fixed after a timed calibration
#    (or given with --steps), recorded in the log, so a rerun with --steps N repeats the schedule.
#  - Deterministic GDN numerics: the gated delta rule core runs in fp32 even under bf16 autocast
#    (autocast would otherwise run its chunked matmuls in bf16, unlike inference).
# Usage (GPU machine): python3 train.py --data DIR --out DIR [--budget SECONDS | --steps N] [--smoke]
import argparse, csv, json, math, os, sys, time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers
from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration
from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
from safetensors.torch import save_file, load_file

HERE = os.path.dirname(os.path.abspath(__file__))

VOCAB = 12288        # padded embedding rows; tokenizer ids < 12257 (bpe_train.py)
TEXT = dict(
    vocab_size=VOCAB, hidden_size=512, intermediate_size=1024, num_hidden_layers=8,
    layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
    num_attention_heads=4, num_key_value_heads=2, head_dim=128,
    linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_conv_kernel_dim=4, full_attention_interval=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
    max_position_embeddings=4096, initializer_range=0.02, attention_dropout=0.0,
    rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                         mrope_section=[11, 11, 10], mrope_interleaved=True),
)
VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
              temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=64)
SHARD_BYTES = 15 * 1024 * 1024
F32_KEYS = ("linear_attn.A_log", "linear_attn.norm.weight")


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------ model

def build_model(tok_ids):
    t = dict(TEXT, eos_token_id=tok_ids["<|endoftext|>"], pad_token_id=tok_ids["<|endoftext|>"],
             bos_token_id=None)
    cfg = Qwen3_5Config(text_config=t, vision_config=dict(VISION, out_hidden_size=t["hidden_size"]),
                        tie_word_embeddings=True,
                        image_token_id=tok_ids["<|image_pad|>"], video_token_id=tok_ids["<|video_pad|>"],
                        vision_start_token_id=tok_ids["<|vision_start|>"],
                        vision_end_token_id=tok_ids["<|vision_end|>"])
    model = Qwen3_5ForConditionalGeneration(cfg)
    model.tie_weights()
    return cfg, model


class MTP(nn.Module):
    """The Qwen3.5 MTP layer (same structure and parameter names as shared/tools/mtp_ref.py MTP)."""

    def __init__(self, lm, tc):
        super().__init__()
        H = tc.hidden_size
        full = tc.layer_types.index("full_attention")
        self.layer = type(lm.layers[full])(tc, full)
        Norm = type(lm.norm)
        self.pre_fc_norm_embedding = Norm(H, eps=tc.rms_norm_eps)
        self.pre_fc_norm_hidden = Norm(H, eps=tc.rms_norm_eps)
        self.norm = Norm(H, eps=tc.rms_norm_eps)
        self.fc = nn.Linear(2 * H, H, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=tc.initializer_range)

    def forward(self, lm, next_tokens, hiddens):
        """next_tokens [B, R] (x[i+1]), hiddens [B, R, H] (final-normed h[i]); returns h_out [B, R, H].
        Causal attention over the R rows, positions 0..R-1 (attention_mask None = causal in sdpa)."""
        B, R = next_tokens.shape
        e = self.pre_fc_norm_embedding(lm.embed_tokens(next_tokens))
        hh = self.pre_fc_norm_hidden(hiddens)
        y = self.fc(torch.cat([e, hh], dim=-1))
        pos = torch.arange(R, device=y.device).view(1, 1, R).expand(3, B, R)
        pe = lm.rotary_emb(y, pos)
        # sdpa / flash treat a missing mask as causal; eager would attend to every row, so give it one.
        mask = None
        if self.layer.self_attn.config._attn_implementation not in ("sdpa", "flash_attention_2", "flash_attention_3"):
            mask = torch.full((R, R), float("-inf"), device=y.device).triu(1).view(1, 1, R, R)
        o = self.layer(y, position_embeddings=pe, attention_mask=mask, position_ids=pos[0])
        o = o[0] if isinstance(o, tuple) else o
        return self.norm(o)


def fp32_core(fn):
    def wrapped(*a, **k):
        with torch.autocast("cuda", enabled=False):
            return fn(*a, **k)
    wrapped.__wrapped__ = fn
    return wrapped


def force_fp32_delta_rule(model):
    """Run the gated-delta-rule core in fp32 under autocast, wherever this transformers version looks
    it up (module global, or an attribute of each GatedDeltaNet)."""
    n = 0
    for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
        if hasattr(mq, name):
            setattr(mq, name, fp32_core(getattr(mq, name)))
            n += 1
    for m in model.modules():
        for attr in ("chunk_gated_delta_rule", "recurrent_gated_delta_rule"):
            if hasattr(m, attr) and callable(getattr(m, attr)):
                setattr(m, attr, fp32_core(getattr(m, attr)))
                n += 1
    return n


def losses(model, mtp, x, with_acc=False):
    """x [B, T] ids. Main loss: CE(h[i] -> x[i+1]). MTP loss: CE(row i -> x[i+2]), rows 0..T-3."""
    lm = model.model.language_model
    h = lm(input_ids=x, use_cache=False).last_hidden_state          # final-normed [B, T, H]
    logits = model.lm_head(h[:, :-1])
    main = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    ho = mtp(lm, x[:, 1:-1], h[:, :-2])                               # rows 0..T-3
    mlog = model.lm_head(ho)
    mloss = F.cross_entropy(mlog.float().reshape(-1, mlog.shape[-1]), x[:, 2:].reshape(-1))
    if not with_acc:
        return main, mloss, None
    with torch.no_grad():
        main_arg = logits.argmax(-1)                                   # [B, T-1]: prediction of x[i+1]
        mtp_arg = mlog.argmax(-1)                                      # [B, T-2]: prediction of x[i+2]
        acc = dict(
            main_top1=(main_arg == x[:, 1:]).float().mean().item(),
            mtp_top1=(mtp_arg == x[:, 2:]).float().mean().item(),
            # greedy speculative acceptance of the first draft: the draft for position i+2 equals the
            # main model's own greedy choice there (teacher-forced on held-out text)
            mtp_agree=(mtp_arg == main_arg[:, 1:]).float().mean().item(),
        )
    return main, mloss, acc


# ------------------------------------------------------------------------------------------ data

def load_ids(path):
    return torch.from_numpy(np.fromfile(path, dtype=np.uint16).astype(np.int64))


def heldout_windows(ids, T, max_windows):
    n = min(max_windows, (len(ids) - 1) // T)
    return ids[: n * T].view(n, T)


@torch.no_grad()
def evaluate(model, mtp, windows, bs, dev):
    model.eval(); mtp.eval()
    tot = dict(loss=0.0, mtp_loss=0.0, main_top1=0.0, mtp_top1=0.0, mtp_agree=0.0)
    n = 0
    for i in range(0, len(windows), bs):
        x = windows[i:i + bs].to(dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            main, ml, acc = losses(model, mtp, x, with_acc=True)
        w = x.shape[0]
        tot["loss"] += main.item() * w
        tot["mtp_loss"] += ml.item() * w
        for k in acc:
            tot[k] += acc[k] * w
        n += w
    model.train(); mtp.train()
    return {k: v / n for k, v in tot.items()}


# ------------------------------------------------------------------------------------------ saving

def export_mtp(mtp):
    sd = {}
    for k, v in mtp.state_dict().items():
        name = "mtp." + (k.replace("layer.", "layers.0.", 1) if k.startswith("layer.") else k)
        sd[name] = v.detach().float().contiguous()
    return sd


def write_checkpoint(model, mtp, out, tok_dir):
    os.makedirs(out, exist_ok=True)
    for fn in os.listdir(out):
        if fn.startswith("model"):
            os.remove(os.path.join(out, fn))
    sd = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight":       # tied
            continue
        sd[k] = v.detach().float().contiguous()
    sd.update(export_mtp(mtp))
    sd = {k: (v if k.endswith(F32_KEYS) else v.to(torch.bfloat16)) for k, v in sd.items()}
    shards, cur, size = [], [], 0
    for k in sorted(sd):
        b = sd[k].numel() * sd[k].element_size()
        if cur and size + b > SHARD_BYTES:
            shards.append(cur)
            cur, size = [], 0
        cur.append(k)
        size += b
    shards.append(cur)
    wm, total = {}, 0
    for i, ks in enumerate(shards):
        fn = f"model-{i+1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: sd[k] for k in ks}, os.path.join(out, fn), metadata={"format": "pt"})
        for k in ks:
            wm[k] = fn
            total += sd[k].numel() * sd[k].element_size()
    with open(os.path.join(out, "keys.txt"), "w") as f:
        for k in sorted(sd):
            f.write(f"{k}\t{list(sd[k].shape)}\t{sd[k].dtype}\n")
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}, f, indent=2)
    cfg = json.loads(model.config.to_json_string())
    cfg["architectures"] = ["Qwen3_5ForConditionalGeneration"]
    cfg["text_config"]["mtp_num_hidden_layers"] = 1
    cfg["text_config"]["mtp_use_dedicated_embeddings"] = False
    cfg["text_config"]["mamba_ssm_dtype"] = "float32"
    cfg.pop("_attn_implementation", None)
    cfg["text_config"].pop("_attn_implementation", None)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    for fn in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        src = os.path.join(tok_dir, fn)
        if os.path.exists(src):
            with open(src, "rb") as a, open(os.path.join(out, fn), "wb") as b:
                b.write(a.read())
    return len(shards), total


# ------------------------------------------------------------------------------------------ checks

@torch.no_grad()
def window_nll(model, ids_rows, dev, dtype):
    """Sum of -log p(x[t+1] | x[0..t]) over each window (each window from an empty state)."""
    nll, n = 0.0, 0
    for row in ids_rows:
        x = torch.tensor(row, device=dev).view(1, -1)
        logits = model(input_ids=x, use_cache=False).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1)
        nll -= lp.gather(1, x[0, 1:].view(-1, 1)).sum().item()
        n += x.shape[1] - 1
    return nll, n


def read_heldout_ids(path):
    rows = []
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            rows.append([int(v) for v in line.split(",")])
    return rows


@torch.no_grad()
def post_checks(out, model, mtp, tok_dir, dev, args, report):
    """Reload the written checkpoint with transformers and measure what RESULTS.md reports."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m32 = Qwen3_5ForConditionalGeneration.from_pretrained(out, dtype=torch.float32).to(dev).eval()
    mbf = Qwen3_5ForConditionalGeneration.from_pretrained(out, dtype=torch.bfloat16).to(dev).eval()
    report["reload_tied"] = bool(m32.lm_head.weight.data_ptr() == m32.model.language_model.embed_tokens.weight.data_ptr())
    rows = read_heldout_ids(args.heldout_ids)
    for name, m, dt in (("fp32_compute", m32, torch.float32), ("bf16_compute", mbf, torch.bfloat16)):
        nll, n = window_nll(m, rows, dev, dt)
        report[f"ppl_heldout_ids_{name}"] = math.exp(nll / n)
        report["ppl_heldout_ids_tokens"] = n
    # Whole held-out split, 512-token windows, bf16 weights fp32 compute.
    ho = load_ids(os.path.join(args.data, "heldout.bin"))
    W = heldout_windows(ho, args.seq, 10_000)
    nll, n = 0.0, 0
    for i in range(0, len(W), 32):
        x = W[i:i + 32].to(dev)
        lg = m32(input_ids=x, use_cache=False).logits[:, :-1].float()
        nll += F.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
        n += x[:, 1:].numel()
    report["ppl_heldout_all_fp32_compute"] = math.exp(nll / n)
    report["heldout_all_tokens_scored"] = n

    # MTP: rebuild from the saved mtp.* tensors with the shared reference class and check that it
    # reproduces this script's MTP (names, order of concat, causal rows, positions).
    sys.path.insert(0, HERE)
    try:
        import mtp_ref
        # The reference builds its causal mask on the CPU (it ran there); build it on this device.
        mtp_ref._causal = lambda R: torch.full((R, R), float("-inf"), device=dev).triu(1).view(1, 1, R, R)
        lm = m32.model.language_model
        tc = m32.config.text_config
        ref = mtp_ref.MTP(lm, tc).float().to(dev).eval()
        sd = {}
        for fn in sorted(os.listdir(out)):
            if fn.startswith("model-") and fn.endswith(".safetensors"):
                sd.update({k: v for k, v in load_file(os.path.join(out, fn)).items() if k.startswith("mtp.")})
        ref_sd = {("layer." + k[len("mtp.layers.0."):]) if k.startswith("mtp.layers.0.") else k[len("mtp."):]:
                  v.float() for k, v in sd.items()}
        missing = ref.load_state_dict(ref_sd, strict=True)
        x = torch.tensor(rows[0], device=dev)
        hid = lm(input_ids=x.view(1, -1), use_cache=False).last_hidden_state[0]
        L = x.shape[0]
        _, ref_logits = ref.rows(lm, m32.lm_head, x[1:], hid[:L - 1], torch.arange(L - 1, device=dev))
        mine = MTP(lm, tc).float().to(dev).eval()
        mine.load_state_dict(ref_sd, strict=True)
        my_logits = m32.lm_head(mine(lm, x[1:].view(1, -1), hid[:L - 1].view(1, L - 1, -1)))[0]
        report["mtp_ref_max_abs_diff"] = (ref_logits - my_logits).abs().max().item()
        # Teacher-forced MTP on heldout.ids with the reloaded checkpoint (fp32 compute).
        agree = top1 = cnt = 0
        for row in rows:
            x = torch.tensor(row, device=dev)
            L = x.shape[0]
            hid = lm(input_ids=x.view(1, -1), use_cache=False).last_hidden_state[0]
            main_arg = m32.lm_head(hid).argmax(-1)                # predicts x[i+1]
            _, lg = ref.rows(lm, m32.lm_head, x[1:L - 1], hid[:L - 2], torch.arange(L - 2, device=dev))
            d = lg.argmax(-1)                                      # predicts x[i+2]
            top1 += (d == x[2:]).sum().item()
            agree += (d == main_arg[1:L - 1]).sum().item()
            cnt += L - 2
        report["mtp_heldout_ids_top1"] = top1 / cnt
        report["mtp_heldout_ids_agree_main_greedy"] = agree / cnt
    except Exception as e:  # recorded, not fatal: the checkpoint is already written
        report["mtp_ref_error"] = repr(e)

    # Tokenizer files load in transformers; samples.
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(out)
        report["autotokenizer"] = type(tok).__name__
        report["chat_template_render"] = tok.apply_chat_template(
            [{"role": "user", "content": "Hello"}], tokenize=False, add_generation_prompt=True)
        samples = []
        eos = [tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")]
        for p in args.prompts:
            ids = tok(p, return_tensors="pt").input_ids.to(dev)
            g = m32.generate(ids, max_new_tokens=args.sample_tokens, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos[0])
            s = dict(prompt=p, greedy=tok.decode(g[0, ids.shape[1]:], skip_special_tokens=False))
            torch.manual_seed(args.seed)
            g = m32.generate(ids, max_new_tokens=args.sample_tokens, do_sample=True, temperature=0.8,
                             top_p=0.95, top_k=0, eos_token_id=eos, pad_token_id=eos[0])
            s["sampled_t0.8_p0.95_seed%d" % args.seed] = tok.decode(g[0, ids.shape[1]:], skip_special_tokens=False)
            samples.append(s)
        with open(os.path.join(args.meta, "samples.json"), "w") as f:
            json.dump(samples, f, indent=1, ensure_ascii=False)
    except Exception as e:
        report["samples_error"] = repr(e)


# ------------------------------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(HERE))
    ap.add_argument("--tok", default=None, help="tokenizer folder (default: --data)")
    ap.add_argument("--out", required=True, help="checkpoint folder")
    ap.add_argument("--meta", required=True, help="folder for log, metrics.csv, report.json, samples.json")
    ap.add_argument("--heldout-ids", default=None)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--budget", type=float, default=540.0, help="training seconds (calibrated into a step count)")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (overrides --budget)")
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--evals", type=int, default=12, help="held-out evaluations over the run")
    ap.add_argument("--eval-windows", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--sample-tokens", type=int, default=80)
    ap.add_argument("--prompts", nargs="*", default=[
        "It is a truth universally acknowledged, that",
        "The quick brown fox",
        "In the beginning",
        "The Python interpreter",
        "When the committee met on Tuesday,",
        "def fibonacci(n):",
    ])
    args = ap.parse_args()
    args.tok = args.tok or args.data
    args.heldout_ids = args.heldout_ids or os.path.join(args.data, "heldout.ids")
    os.makedirs(args.meta, exist_ok=True)

    dev = "cuda"
    log("transformers", transformers.__version__, "torch", torch.__version__,
        "gpu", torch.cuda.get_device_name(0), "fla", getattr(mq, "is_flash_linear_attention_available", lambda: "?")())
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    tokj = json.load(open(os.path.join(args.tok, "tokenizer.json")))
    tok_ids = {a["content"]: a["id"] for a in tokj["added_tokens"]}
    assert max(tok_ids.values()) < VOCAB
    cfg, model = build_model(tok_ids)
    model.to(dev)
    lm = model.model.language_model
    mtp = MTP(lm, model.config.text_config).to(dev)
    nwrap = force_fp32_delta_rule(model)
    n_main = sum(p.numel() for n, p in model.named_parameters() if "visual" not in n)
    n_vis = sum(p.numel() for n, p in model.named_parameters() if "visual" in n)
    n_mtp = sum(p.numel() for p in mtp.parameters())
    n_emb = lm.embed_tokens.weight.numel()
    log(f"params: main {n_main/1e6:.2f}M (embedding {n_emb/1e6:.2f}M, tied), mtp {n_mtp/1e6:.2f}M, "
        f"vision (untrained, layout only) {n_vis/1e3:.1f}K; fp32 delta-rule wrappers {nwrap}; "
        f"attn impl {model.config._attn_implementation}")

    train_ids = load_ids(os.path.join(args.data, "train.bin"))
    held = heldout_windows(load_ids(os.path.join(args.data, "heldout.bin")), args.seq, args.eval_windows)
    log(f"train tokens {len(train_ids)}, held-out eval windows {len(held)} x {args.seq}")
    gen = torch.Generator().manual_seed(args.seed)

    params = [p for n, p in model.named_parameters() if "visual" not in n] + list(mtp.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    def batch():
        off = torch.randint(0, len(train_ids) - args.seq - 1, (args.batch,), generator=gen)
        return torch.stack([train_ids[o:o + args.seq] for o in off.tolist()]).to(dev, non_blocking=True)

    def lr_at(step, total):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))

    rows = []
    mf = open(os.path.join(args.meta, "metrics.csv"), "w", newline="")
    cw = csv.writer(mf)
    cw.writerow(["step", "tokens", "seconds", "lr", "train_loss", "train_mtp_loss",
                 "heldout_loss", "heldout_ppl", "heldout_mtp_loss", "heldout_main_top1", "heldout_mtp_top1",
                 "heldout_mtp_agree_main"])

    t_eval0 = time.time()
    ev = evaluate(model, mtp, held, 32, dev)
    t_eval = time.time() - t_eval0
    log(f"step 0 eval {ev} ({t_eval:.1f} s)")
    cw.writerow([0, 0, 0, 0, "", "", f"{ev['loss']:.4f}", f"{math.exp(ev['loss']):.2f}", f"{ev['mtp_loss']:.4f}",
                 f"{ev['main_top1']:.4f}", f"{ev['mtp_top1']:.4f}", f"{ev['mtp_agree']:.4f}"])

    total = args.steps if args.steps else 10 ** 9
    calib = 5 if args.smoke else 40
    t0 = time.time()
    step = 0
    acc_l = acc_m = 0.0
    acc_n = 0
    t_train = 0.0
    while step < total:
        if step == calib and not args.steps:
            torch.cuda.synchronize()
            per = (time.time() - t_cal) / (calib - 3)
            n_evals = args.evals
            remaining = args.budget - (time.time() - t0) - n_evals * t_eval
            total = max(calib + 1, calib + int(remaining / per))
            log(f"calibration: {per*1000:.1f} ms/step, {args.batch*args.seq/per/1e3:.0f}K tok/s "
                f"-> total steps {total} (rerun with --steps {total})")
        if step == 3:
            torch.cuda.synchronize()
            t_cal = time.time()
        eval_every = (args.eval_every or max(1, total // args.evals)) if total < 10 ** 9 else 10 ** 9
        lr = lr_at(step, total if total < 10 ** 9 else 10 ** 6)
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            main, ml, _ = losses(model, mtp, x)
            loss = main + args.mtp_weight * ml
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        acc_l += main.item() if step % 10 == 0 else 0.0
        acc_m += ml.item() if step % 10 == 0 else 0.0
        acc_n += 1 if step % 10 == 0 else 0
        if step % eval_every == 0 or step == total:
            ev = evaluate(model, mtp, held, 32, dev)
            el = time.time() - t0
            tl, tm = acc_l / max(1, acc_n), acc_m / max(1, acc_n)
            acc_l = acc_m = 0.0
            acc_n = 0
            log(f"step {step}/{total} {el:.0f}s lr {lr:.2e} train {tl:.3f} mtp {tm:.3f} | held-out {ev['loss']:.3f} "
                f"ppl {math.exp(ev['loss']):.1f} mtp {ev['mtp_loss']:.3f} top1 {ev['main_top1']:.3f} "
                f"mtp_top1 {ev['mtp_top1']:.3f} mtp_agree {ev['mtp_agree']:.3f} | "
                f"{step*args.batch*args.seq/el/1e3:.0f}K tok/s, {torch.cuda.max_memory_allocated()/2**30:.1f} GiB")
            cw.writerow([step, step * args.batch * args.seq, f"{el:.1f}", f"{lr:.3e}", f"{tl:.4f}", f"{tm:.4f}",
                         f"{ev['loss']:.4f}", f"{math.exp(ev['loss']):.2f}", f"{ev['mtp_loss']:.4f}",
                         f"{ev['main_top1']:.4f}", f"{ev['mtp_top1']:.4f}", f"{ev['mtp_agree']:.4f}"])
            mf.flush()
        if not args.steps and time.time() - t0 > args.budget * 1.08:
            log(f"time budget exceeded at step {step}; stopping")
            break
    torch.cuda.synchronize()
    t_train = time.time() - t0
    mf.close()
    report = dict(transformers=transformers.__version__, torch=torch.__version__, steps=step, planned_steps=total,
                  train_seconds=t_train, tokens_seen=step * args.batch * args.seq, batch=args.batch, seq=args.seq,
                  lr=args.lr, mtp_weight=args.mtp_weight, seed=args.seed, params_main=n_main, params_mtp=n_mtp,
                  params_embedding=n_emb, params_vision=n_vis, final_eval=ev, train_tokens=len(train_ids))
    nsh, tot = write_checkpoint(model, mtp, args.out, args.tok)
    report["shards"], report["checkpoint_bytes"] = nsh, tot
    log(f"saved {nsh} shards, {tot/1e6:.1f} MB")
    post_checks(args.out, model, mtp, args.tok, dev, args, report)
    with open(os.path.join(args.meta, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    log(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
