"""Reference cases for the global MoE load-balancing loss ([moe] load_balance_loss = "global"):
transformers' own load_balancing_loss_func, f32.

moe_aux_global: three layers' routers (weights [experts, dim], each fed its own tokens) through
load_balancing_loss_func, which pools the router logits of all layers; the loss and its gradient
with respect to each router's weights. Routers scaled up so that the load is far from even.

moe_aux_global_qwen3: a tiny Qwen3MoeForCausalLM (random weights, norms included) called with
output_router_logits=True; its aux_loss, router_aux_loss_coef, and the gradient of
router_aux_loss_coef * aux_loss (what the model adds to its loss) with respect to every
parameter (zero for those it does not reach: the last layer's experts, the final norm and
lm_head). Weights are stored by titan's names: experts stacked as w1/w3 (HF's gate_up_proj
halves) and w2 (down_proj).
"""
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func


def _global(layers, tokens, dim, experts, top_k):
    def case(gen):
        xs = [torch.randn(tokens, dim, generator=gen) for _ in range(layers)]
        ws = [(torch.randn(experts, dim, generator=gen) * 0.7).requires_grad_() for _ in range(layers)]
        loss = load_balancing_loss_func(tuple(x @ w.T for x, w in zip(xs, ws)), experts, top_k)
        cot = torch.tensor(0.75)
        loss.backward(cot)
        tensors = {"out.loss": loss, "cot.loss": cot}
        for i, (x, w) in enumerate(zip(xs, ws)):
            tensors.update({f"in.x{i}": x, f"in.w{i}": w, f"grad.w{i}": w.grad})
        return tensors, {"layers": layers, "experts": experts, "top_k": top_k}
    return case


QWEN3_MOE = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8, vocab_size=64, max_position_embeddings=64,
                 rms_norm_eps=1e-6, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.02,
                 tie_word_embeddings=False)

TITAN_NAMES = [("model.embed_tokens.", "tok_embeddings."), ("model.norm.", "norm."), ("lm_head.", "output."),
               ("self_attn.q_proj.", "attention.wq."), ("self_attn.k_proj.", "attention.wk."),
               ("self_attn.v_proj.", "attention.wv."), ("self_attn.o_proj.", "attention.wo."),
               ("self_attn.q_norm.", "attention.q_norm."), ("self_attn.k_norm.", "attention.k_norm."),
               ("input_layernorm.", "attention_norm."), ("post_attention_layernorm.", "ffn_norm."),
               ("mlp.gate.", "moe.router.gate."), ("model.layers.", "layers.")]


def _titan(name, t, hidden):
    """(titan name, tensor) pairs for HF parameter `name`."""
    if name.endswith("mlp.experts.gate_up_proj"):
        prefix = name.replace("model.", "", 1).replace("mlp.experts.gate_up_proj", "moe.experts.")
        return [(prefix + "w1", t[:, :hidden]), (prefix + "w3", t[:, hidden:])]
    if name.endswith("mlp.experts.down_proj"):
        return [(name.replace("model.", "", 1).replace("mlp.experts.down_proj", "moe.experts.w2"), t)]
    for theirs, ours in TITAN_NAMES:
        name = name.replace(theirs, ours)
    return [(name, t)]


def _qwen3(gen):
    config = Qwen3MoeConfig(**QWEN3_MOE)
    model = Qwen3MoeForCausalLM(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            scale = 0.5 if name.endswith("mlp.gate.weight") else 0.08
            p.copy_(1 + 0.2 * noise if name.endswith("norm.weight") else scale * noise)
    tokens = torch.randint(0, config.vocab_size, (2, 11), generator=gen)
    out = model(input_ids=tokens, output_router_logits=True)
    (config.router_aux_loss_coef * out.aux_loss).backward()
    hidden = config.moe_intermediate_size
    tensors = {"in.tokens": tokens, "out.aux_loss": out.aux_loss.detach()}
    for name, p in model.named_parameters():
        tensors.update({"in." + n: t for n, t in _titan(name, p.detach(), hidden)})
        grad = torch.zeros_like(p) if p.grad is None else p.grad  # None: the loss does not reach p
        tensors.update({"grad." + n: t for n, t in _titan(name, grad, hidden)})
    metadata = {k: int(v) if isinstance(v, bool) else v for k, v in QWEN3_MOE.items() if not isinstance(v, list)}
    metadata["rope_theta"] = config.rope_parameters["rope_theta"]
    return tensors, metadata


CASES = {
    "moe_aux_global": _global(layers=3, tokens=37, dim=16, experts=8, top_k=2),
    "moe_aux_global_top3": _global(layers=2, tokens=20, dim=8, experts=5, top_k=3),
    "moe_aux_global_qwen3": _qwen3,
}
