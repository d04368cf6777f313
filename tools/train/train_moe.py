# Trains the small MoE model (issue 18 item 6): train.py's recipe (corpus, tokenizer, joint MTP loss,
# optimizer, schedule, checkpoint layout, post-training checks) on a `qwen3_5_moe` shape, so that the
# expert cache has a model whose routing has real locality (random-weight routers route almost
# uniformly: bench/experts/RESULTS.md).
#
# Owns: the MoE shape (TEXT below), a load-balancing loss on the routers (Switch-style: E * sum_e f_e P_e
# per MoE layer, f_e the fraction of rows routing to e among their top-k, P_e the mean router
# probability; without it a short run may collapse onto a few experts, which would flatter any cache),
# and the MoE class names in the checkpoint. Everything else is train.py's, imported and reused.
# Usage (GPU machine): python3 train_moe.py [train.py's options] [--aux-weight W]
import json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train as T  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration  # noqa: E402
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as mqm  # noqa: E402

# hidden 192, 3 layers (GDN, GDN, full attention), 32 routed experts of 32 (top-4) + a shared expert of 64,
# one MTP layer (also MoE): 3.9 MB as an INT4 install (the repository budget for a shipped model)
T.TEXT = dict(
    vocab_size=T.VOCAB, hidden_size=192, num_hidden_layers=3,
    layer_types=["linear_attention", "linear_attention", "full_attention"],
    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    linear_num_key_heads=4, linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=64,
    linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
    max_position_embeddings=4096, initializer_range=0.02, attention_dropout=0.0,
    num_experts=32, num_experts_per_tok=4, moe_intermediate_size=32, shared_expert_intermediate_size=64,
    output_router_logits=False, router_aux_loss_coef=0.0,
    rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                         mrope_section=[11, 11, 10], mrope_interleaved=True),
)
T.Qwen3_5Config = Qwen3_5MoeConfig
T.Qwen3_5ForConditionalGeneration = Qwen3_5MoeForConditionalGeneration
T.mq = mqm  # the fp32 delta-rule wrappers look the core functions up here

AUX = {"weight": 0.01, "inputs": [], "gates": []}


def capture(mod, args, kwargs):
    h = args[0] if args else kwargs.get("hidden_states")
    if isinstance(h, torch.Tensor):
        AUX["inputs"].append((mod, h))
    return None


def hook_routers(model, mtp):
    """Capture each router's input rows (the hidden states it scores) on every forward."""
    gates = []
    for root in (model.model.language_model, mtp):
        for name, m in root.named_modules():
            if name.endswith("mlp.gate") and isinstance(getattr(m, "weight", None), torch.Tensor):
                gates.append(m)
                m.register_forward_pre_hook(capture, with_kwargs=True)
    AUX["gates"] = gates
    return len(gates)


def balance_loss():
    tot, n = 0.0, 0
    for mod, h in AUX["inputs"]:
        x = h.reshape(-1, h.shape[-1]).float()
        p = torch.softmax(F.linear(x, mod.weight.float()), dim=-1)       # [N, E]
        E = p.shape[-1]
        k = T.TEXT["num_experts_per_tok"]
        top = p.topk(k, dim=-1).indices
        f = torch.zeros(E, device=p.device).scatter_add_(0, top.reshape(-1), torch.ones(top.numel(), device=p.device))
        f = f / top.numel()
        tot = tot + E * (f.detach() * p.mean(0)).sum()
        n += 1
    AUX["inputs"].clear()
    return tot / max(1, n)


_losses = T.losses


def losses(model, mtp, x, with_acc=False):
    AUX["inputs"].clear()
    main, ml, acc = _losses(model, mtp, x, with_acc)
    if model.training and AUX["weight"] > 0 and AUX["gates"]:
        main = main + AUX["weight"] * balance_loss()
    AUX["inputs"].clear()
    return main, ml, acc


T.losses = losses

_write = T.write_checkpoint


def write_checkpoint(model, mtp, out, tok_dir):
    r = _write(model, mtp, out, tok_dir)
    p = os.path.join(out, "config.json")
    cfg = json.load(open(p))
    cfg["architectures"] = ["Qwen3_5MoeForConditionalGeneration"]
    with open(p, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    return r


T.write_checkpoint = write_checkpoint

_MTP = T.MTP


class MTP(_MTP):
    """train.py's MTP layer; its decoder layer is the MoE one (type of the stack's full layer). Built
    outside a PreTrainedModel, so nothing runs _init_weights on it: train.py initialises its nn.Linear
    weights, and here every other matrix too (the experts' 3-D tensors and the router, which the module
    may create uninitialised)."""

    def __init__(self, lm, tc):
        super().__init__(lm, tc)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    torch.nn.init.normal_(p, std=tc.initializer_range)


T.MTP = MTP

_force = T.force_fp32_delta_rule


def force_fp32_delta_rule(model):
    n = _force(model)
    # the MTP module exists by now (train.py builds it before this call): hook every router once
    if not AUX["gates"]:
        mtp = [m for m in FORCE_MTP]
        if mtp:
            T.log(f"load-balancing loss on {hook_routers(model, mtp[0])} routers, weight {AUX['weight']}")
    return n


FORCE_MTP = []
_MTP_init = MTP.__init__


def _mtp_init(self, lm, tc):
    _MTP_init(self, lm, tc)
    FORCE_MTP.append(self)


MTP.__init__ = _mtp_init
T.force_fp32_delta_rule = force_fp32_delta_rule

if __name__ == "__main__":
    if "--aux-weight" in sys.argv:
        i = sys.argv.index("--aux-weight")
        AUX["weight"] = float(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    T.main()
