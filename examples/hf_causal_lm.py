"""A Hugging Face causal language model as a user workload, built from a config object with
random weights: nothing is downloaded. `size` is the sequence length.

    pip install -e '.[hf]'
    python experiments/run.py -m workload=custom workload._target_=examples.hf_causal_lm:make_causal_lm \
        size=128,512 train=false,true

Settings: layers, hidden, heads, vocab (a small Llama-style model by default), batch. The model is
called as transformers' models are, with keyword inputs: `model(input_ids=..., attention_mask=...,
labels=...)`; in training steps the loss is the model's own (`.loss`: next-token cross-entropy,
labels = the input ids). The token ids stay int64 whatever the grid's dtype.
"""

from __future__ import annotations

import torch

from experiments.seam import Workload

try:  # at import, so that a sweep without transformers is refused before any job starts
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as exc:
    raise ImportError("examples.hf_causal_lm needs transformers: pip install -e '.[hf]'") from exc


def make_causal_lm(*, size: int, dtype: torch.dtype, device: torch.device, layers: int = 2,
                   hidden: int = 256, heads: int = 4, vocab: int = 1024, batch: int = 1) -> Workload:
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max(size, 128),
        use_cache=False,  # one forward over the whole sequence, no KV cache
    )
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype)
    ids = torch.randint(0, vocab, (batch, size), device=device)
    return Workload(model, kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
