"""The greedy generation reference: transformers' generate (do_sample=False, over its KV cache) on
the model it is given, which hf_reference.py saves as generate/ with the final norm scaled so that
each chosen token leads the runner-up by far more than rounding could move it.

Writes, under the family's folder, generate.safetensors: "in.prompt" [PROMPT], "out.tokens"
[NEW] and "out.top2_gap" [NEW] (the lead of each chosen token's logit over the runner-up's).
"""
import os

import torch

from hf_families import tokens
from make_reference import write_safetensors

PROMPT = 8
NEW = 16


def generate(family, model, root):
    prompt = tokens(family)[0, :PROMPT]
    # No eos: generate's eos_token_id (Llama's 2) would end the run early on that token.
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(prompt[None], do_sample=False, max_new_tokens=NEW, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
    top2 = torch.stack([step[0].topk(2).values for step in out.logits])
    write_safetensors(os.path.join(root, "generate.safetensors"),
                      {"in.prompt": prompt, "out.tokens": out.sequences[0, PROMPT:],
                       "out.top2_gap": top2[:, 0] - top2[:, 1]}, {})
