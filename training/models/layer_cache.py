"""What an attention layer keeps while a model generates (its key/value cache): the tensors it computed for the
tokens so far (GPT; T5's decoder), or for the encoder's states once (T5's cross-attention), so that each further
token runs through the model alone instead of with its whole context again."""
from __future__ import annotations

import torch
from torch import Tensor


class LayerCache:
    """One attention layer's cached tensors (keys and values; the synthesizer's values), each
    ``[B, n_head, length, head_dim]``, zeros until written. A window of tokens (the prompts) fills columns
    ``0..T-1``; each step writes row ``b``'s one new token at column ``positions[b, 0]``."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.tensors: tuple[Tensor, ...] = ()

    def store(self, positions: Tensor | None, *tensors: Tensor) -> tuple[Tensor, ...]:
        """Keep ``tensors`` ``[B, n_head, T, head_dim]``: a window from column 0 (``positions`` None), returned as
        given; or one token a row at ``positions`` ``[B, 1]``, returning every column (the caller masks the columns
        past each row's token)."""
        if not self.tensors:
            self.tensors = tuple(t.new_zeros(*t.shape[:2], self.length, t.shape[3]) for t in tensors)
        if positions is None:
            for cached, window in zip(self.tensors, tensors):
                cached[:, :, :window.shape[2]] = window
            return tensors
        rows = torch.arange(positions.shape[0], device=positions.device)
        for cached, token in zip(self.tensors, tensors):
            cached[rows, :, positions[:, 0]] = token[:, :, 0]
        return self.tensors
