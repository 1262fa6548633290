"""A Hugging Face causal language model as a user workload, built from a config object with
random weights: nothing is downloaded. `size` is the sequence length.

    pip install -e '.[hf]'
    python experiments/run.py -m workload=custom workload._target_=examples.hf_causal_lm:make_causal_lm \
        size=128,512 train=false,true

Settings: layers, hidden, heads, vocab (a small Llama-style model by default), batch. In training
steps the loss is the model's own next-token cross-entropy (labels = the input ids).
"""

from __future__ import annotations

import torch

from experiments.seam import Workload


def make_causal_lm(*, size: int, dtype: torch.dtype, device: torch.device, layers: int = 2,
                   hidden: int = 256, heads: int = 4, vocab: int = 1024, batch: int = 1) -> Workload:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max(size, 128),
    )
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
    model.config.use_cache = False  # one forward over the whole sequence, no KV cache
    ids = torch.randint(0, vocab, (batch, size), device=device)
    return Workload(model, (ids,), loss=lambda out: _next_token_loss(out.logits, ids))


def _next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
