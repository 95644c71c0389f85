"""T5's attention: relative position buckets, multi-head attention without biases or scaling, and the masks.

Masks are additive -1e9 (MTF) rather than HF's finfo.min: identical wherever a query sees at least one key, and finite
in bf16 where it sees none (decoder padding in packed rows), so no NaN reaches the loss or the gradients.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layer_cache import LayerCache
from .plain_attention import plain_attention, writes_attention_out

if TYPE_CHECKING:
    from .t5 import T5Config
    from .t5_flex import FlexScores

MASK_VALUE = -1e9  # MTF's additive mask; finite in fp32 and bf16, so fully masked padding rows stay finite


def relative_position_bucket(relative_position: Tensor, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> Tensor:
    """Bucket of ``key_position - query_position``: half the buckets exact, half log-spaced up to ``max_distance``.

    Bidirectional (encoder): 16 buckets per direction, positive offsets get +16. Causal (decoder): all 32 buckets
    for offsets <= 0; positive offsets map to bucket 0.
    """
    if bidirectional:
        num_buckets //= 2
        offset = (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        offset = torch.zeros_like(relative_position)
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    log_ratio = torch.log(distance.float().clamp(min=max_exact) / max_exact) / math.log(max_distance / max_exact)
    log_bucket = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return offset + torch.where(distance < max_exact, distance, log_bucket)


class Attention(nn.Module):
    """Multi-head attention without biases and without 1/sqrt(d_kv) scaling (folded into the q init).

    On CPU it is written out (:func:`.plain_attention.plain_attention`) rather than calling SDPA: with a mask that
    needs a gradient (the learned position bias) SDPA takes its unfused math path, which on CPU adds a guard for
    fully masked rows and, under bf16 autocast, upcasts to fp32; the plain form is the same math with fewer, bf16
    kernels. On CUDA it is written out for dropout in bf16/fp16 (:func:`.plain_attention.writes_attention_out`:
    SDPA would take its memory-efficient kernel, whose dropout diverged GPT training in bf16) and SDPA otherwise,
    where the memory-efficient kernel takes the learned bias (contiguous, :meth:`.t5.Stack.position_bias`).
    With ``attention_impl=flex`` the bias is a :class:`.t5_flex.FlexScores`.

    The projections keep T5's four weights (``q``, ``k``, ``v``, ``o``, as checkpoints and Hugging Face name them),
    but self-attention computes q, k and v in one product with their weights stacked, and cross-attention k and v in
    one: the same values in fewer, larger matrix products (eager on CUDA, each product is a kernel launch forward and
    two backward, and the gradients into the input are summed by the product, not by separate additions).
    """

    def __init__(self, config: T5Config):
        super().__init__()
        inner = config.num_heads * config.d_kv
        self.q = nn.Linear(config.d_model, inner, bias=False)
        self.k = nn.Linear(config.d_model, inner, bias=False)
        self.v = nn.Linear(config.d_model, inner, bias=False)
        self.o = nn.Linear(inner, config.d_model, bias=False)
        nn.init.normal_(self.q.weight, std=(config.d_model * config.d_kv) ** -0.5)
        nn.init.normal_(self.k.weight, std=config.d_model ** -0.5)
        nn.init.normal_(self.v.weight, std=config.d_model ** -0.5)
        nn.init.normal_(self.o.weight, std=inner ** -0.5)
        self.num_heads, self.d_kv, self.dropout = config.num_heads, config.d_kv, config.dropout_rate

    def forward(self, x: Tensor, memory: Tensor, bias: Tensor | FlexScores, cache: LayerCache | None = None,
                positions: Tensor | None = None) -> Tensor:
        """``x`` [B, Tq, d] attends to ``memory`` [B, Tk, d]; ``bias`` [B or 1, H or 1, Tq, Tk] is additive.
        While generating (``cache``), self-attention stores its keys and values at ``positions``
        (:meth:`.layer_cache.LayerCache.store`) and attends to every column of the cache, which ``bias`` then covers;
        cross-attention projects ``memory`` once and reuses it."""
        b, tq, _ = x.shape
        if memory is x:
            q, k, v = self._projections(x, self.q, self.k, self.v)
            if cache is not None:
                k, v = cache.store(positions, k, v)
        else:
            (q,) = self._projections(x, self.q)
            if cache is not None and cache.tensors:
                k, v = cache.tensors
            else:
                k, v = self._projections(memory, self.k, self.v)
                if cache is not None:
                    cache.store(None, k, v)
        dropout = self.dropout if self.training else 0.0
        if not isinstance(bias, Tensor):
            y = bias.attend(q, k, v)
        elif q.device.type == "cpu" or writes_attention_out(q, dropout):
            y = plain_attention(q, k, v, bias.to(q.dtype), dropout)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=1.0, dropout_p=dropout)
        return self.o(y.transpose(1, 2).reshape(b, tq, self.num_heads * self.d_kv))

    def _projections(self, x: Tensor, *linears: nn.Linear) -> tuple[Tensor, ...]:
        """``x`` [B, T, d] through ``linears`` in one product, each result as heads [B, H, T, d_kv]."""
        weight = linears[0].weight if len(linears) == 1 else torch.cat([linear.weight for linear in linears])
        heads = F.linear(x, weight).unflatten(-1, (len(linears), self.num_heads, self.d_kv))
        return heads.permute(2, 0, 3, 1, 4).unbind(0)


def same_segment(query_segments: Tensor, key_segments: Tensor) -> Tensor:
    """[B, 1, Tq, Tk] bool: query and key share a segment id."""
    return query_segments[:, None, :, None] == key_segments[:, None, None, :]


def with_mask(bias: Tensor, visible: Tensor) -> Tensor:
    """``bias`` where visible, ``MASK_VALUE`` elsewhere (the two broadcast against each other)."""
    return torch.where(visible, bias, MASK_VALUE)
