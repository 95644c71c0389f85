"""The next token from a step's logits: greedy, or sampled (from the ``top_k`` most likely); GPT, T5 and AdaVAE
share it."""
from __future__ import annotations

import torch
from torch import Tensor


def next_token(logits: Tensor, top_k: int | None, greedy: bool, generator: torch.Generator | None) -> Tensor:
    """One id per row of ``logits`` [B, vocab]: the argmax when ``greedy``, else a draw from the softmax restricted
    to the ``top_k`` largest logits (all of them when None)."""
    if greedy:
        return logits.argmax(-1)
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)
