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

# titan's hf family (one model read from config.json), one fixture per model_type, each with the
# keys that mark its variant at values other than the defaults: windows (8) shorter than the
# sequences (24 and 32 tokens), biases and soft-caps on, head_dim other than hidden / heads.
BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=128, rms_norm_eps=1e-5,
            bos_token_id=1, eos_token_id=2, pad_token_id=None)
HF_DECODERS = {
    "llama": (transformers.LlamaForCausalLM,
              dict(BASE, attention_bias=True, mlp_bias=True, head_dim=24, tie_word_embeddings=True,
                   rope_parameters={"rope_type": "yarn", "rope_theta": 5000.0, "factor": 4.0,
                                    "original_max_position_embeddings": 16, "beta_fast": 16.0,
                                    "beta_slow": 2.0})),
    "mistral": (transformers.MistralForCausalLM, dict(BASE, sliding_window=8, head_dim=24)),
    "qwen2": (transformers.Qwen2ForCausalLM,
              dict(BASE, num_hidden_layers=3, use_sliding_window=True, sliding_window=8, max_window_layers=1,
                   rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})),
    "qwen3": (transformers.Qwen3ForCausalLM,
              dict(BASE, head_dim=24, attention_bias=True, use_sliding_window=True, sliding_window=8,
                   max_window_layers=1)),
    "gemma": (transformers.GemmaForCausalLM, dict(BASE, head_dim=24)),
    "gemma2": (transformers.Gemma2ForCausalLM,
               dict(BASE, head_dim=16, sliding_window=8, query_pre_attn_scalar=24,
                    attn_logit_softcapping=5.0, final_logit_softcapping=10.0)),
    "gemma3_text": (transformers.Gemma3ForCausalLM,
                    dict(BASE, head_dim=16, sliding_window=8, query_pre_attn_scalar=24,
                         layer_types=["sliding_attention", "full_attention"],
                         rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 100000.0,
                                                             "factor": 8.0},
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}})),
    "phi3": (transformers.Phi3ForCausalLM,
             dict(BASE, sliding_window=12,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
    "olmo2": (transformers.Olmo2ForCausalLM, dict(BASE)),
    "gpt_neox": (transformers.GPTNeoXForCausalLM,
                 dict(BASE, num_key_value_heads=4, layer_norm_eps=1e-5, use_parallel_residual=True,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
    "granite": (transformers.GraniteForCausalLM,
                dict(BASE, embedding_multiplier=2.0, attention_multiplier=0.2, residual_multiplier=0.5,
                     logits_scaling=4.0)),
    "mixtral": (transformers.MixtralForCausalLM,
                dict(BASE, sliding_window=8, num_local_experts=4, num_experts_per_tok=2,
                     output_router_logits=True, router_aux_loss_coef=0.01)),
}
FAMILIES.update({"hf_" + name: entry for name, entry in HF_DECODERS.items()})


def new_model(family, **overrides):
    """The family's model with transformers' own initialisation (from torch's global generator)."""
    cls, config = FAMILIES[family]
    return cls(cls.config_class(**dict(config, **overrides), attn_implementation="eager")).eval()


def from_pretrained(family, folder, dtype=torch.float32):
    """The folder's model as transformers loads it, computing in `dtype` whatever it stores."""
    cls, _ = FAMILIES[family]
    return cls.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()


def final_norm(model):
    return model.gpt_neox.final_layer_norm if hasattr(model, "gpt_neox") else model.model.norm


def scale_logits(model, factor):
    """Multiplies the logits by `factor` through the final norm's scale (Gemma's is 1 + weight)."""
    norm = final_norm(model)
    with torch.no_grad():
        if "Gemma" in type(norm).__name__:
            norm.weight.copy_(factor * (1 + norm.weight) - 1)
        else:
            norm.weight.mul_(factor)
            if getattr(norm, "bias", None) is not None:
                norm.bias.mul_(factor)


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
