"""The three transformers classes titan's Hugging Face interop is checked against, each with a tiny
config, and what the reference scripts share about them.

The configs exercise what titan must carry over: grouped-query attention, a non-default
rms_norm_eps and an intermediate_size of its own; Llama 3.1 RoPE scaling with factors other than
the defaults (so that low, middle and high frequencies are each treated differently at head_dim
16); Qwen 3's QK-norm with a head_dim that is not hidden_size / num_attention_heads, tied
embeddings (dense) and 4 experts of which 2 per token, renormalised (MoE). transformers 5 writes
them to config.json in its own spelling (rope_parameters, num_local_experts, dtype).
"""
import torch
import transformers
from transformers.core_model_loading import revert_weight_conversion

LLAMA3 = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, rms_norm_eps=1e-6,
              tie_word_embeddings=False,
              rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0,
                               "low_freq_factor": 1.0, "high_freq_factor": 2.0,
                               "original_max_position_embeddings": 64})
QWEN3 = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=24, vocab_size=256, max_position_embeddings=128,
             rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
             tie_word_embeddings=True)
QWEN3_MOE = dict(QWEN3, tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
                 moe_intermediate_size=32, norm_topk_prob=True, router_aux_loss_coef=0.01)
FAMILIES = {"llama3": (transformers.LlamaForCausalLM, LLAMA3),
            "qwen3": (transformers.Qwen3ForCausalLM, QWEN3),
            "qwen3_moe": (transformers.Qwen3MoeForCausalLM, QWEN3_MOE)}


def new_model(family, **overrides):
    """The family's model with transformers' own initialisation (from torch's global generator)."""
    cls, config = FAMILIES[family]
    return cls(cls.config_class(**dict(config, **overrides), attn_implementation="eager")).eval()


def from_pretrained(family, folder, dtype=torch.float32):
    """The folder's model as transformers loads it, computing in `dtype` whatever it stores."""
    cls, _ = FAMILIES[family]
    return cls.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()


def tokens(family):
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(0, FAMILIES[family][1]["vocab_size"], (2, 24), generator=gen)


def randomize(model):
    """Random weights everywhere, norms included: inits that leave norms at one would hide a
    swapped norm, and small weights would hide RoPE's layout."""
    gen = torch.Generator().manual_seed(42)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.2 * noise if name.endswith("norm.weight") else 0.08 * noise)


def as_saved(model, tensors):
    """`tensors` (by the model's parameter names, e.g. its gradients) under the names and layouts
    save_pretrained writes: transformers 5 fuses a Qwen 3 MoE layer's experts in memory
    (experts.gate_up_proj) and splits them again per expert on saving."""
    return {name: t.detach().contiguous() for name, t in revert_weight_conversion(model, tensors).items()}
