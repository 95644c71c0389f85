"""Self-attention layers of the decoder-only GPT: causal dot-product and the CS224N A5 synthesizer.

Both take ``(x, mask)`` where ``mask`` is None (plain causal attention over positions ``0..T-1``) or a bool
``[B, 1, T, T]`` "may attend" matrix from :func:`attention_mask` (packed segments, prefix-LM). The synthesizer also
takes the per-token ``positions`` that index its learned score columns. Dot-product attention also takes
``extra_kv``: keys and values attended before the tokens' own (prefix tuning, AdaVAE's latent slots), which ``mask``
then covers in its first columns (:func:`prepend_visible_keys`). While generating, both keep what they computed
in a :class:`.layer_cache.LayerCache` (``cache``), and a window's ``positions`` are then each row's one new token's.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layer_cache import LayerCache
from .plain_attention import additive_mask, plain_attention, writes_attention_out


def attention_mask(length: int, segment_ids: Tensor | None = None, prefix_mask: Tensor | None = None,
                   device: torch.device | None = None) -> Tensor | None:
    """Bool ``[B, 1, T, T]``: query ``i`` may see key ``j`` if ``j <= i``, or both lie in the prefix
    (``prefix_mask`` [B, T], the T5 paper's Figure 3 prefix LM), and both are in the same segment (``segment_ids``
    [B, T] of packed rows). None when neither is given: plain causal attention."""
    if segment_ids is None and prefix_mask is None:
        return None
    allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()[None]
    if prefix_mask is not None:
        prefix = prefix_mask.bool()
        allowed = allowed | (prefix[:, :, None] & prefix[:, None, :])
    if segment_ids is not None:
        allowed = allowed & (segment_ids[:, :, None] == segment_ids[:, None, :])
    return allowed[:, None]


def prepend_visible_keys(allowed: Tensor, count: int) -> Tensor:
    """The bool mask ``allowed`` [..., T] with ``count`` always-visible key columns in front (for ``extra_kv``)."""
    if not count:
        return allowed
    visible = torch.ones(*allowed.shape[:-1], count, dtype=torch.bool, device=allowed.device)
    return torch.cat([visible, allowed], dim=-1)


class CausalSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention, causal by default: fused ``scaled_dot_product_attention``, or
    :func:`.plain_attention.plain_attention` where :func:`.plain_attention.writes_attention_out` says (bf16 on CPU,
    dropout in bf16/fp16 on CUDA)."""

    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool = True) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd {n_embd} is not divisible by n_head {n_head}")
        self.n_head, self.dropout = n_head, dropout
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None, positions: Tensor | None = None,
                extra_kv: tuple[Tensor, Tensor] | None = None, cache: LayerCache | None = None) -> Tensor:
        """``extra_kv``: keys and values ``[B, n_head, S, head_dim]`` prepended to the tokens' own; ``mask``
        ``[B or 1, 1, T or 1, S + T]`` is then required (``positions`` is the synthesizer's and the cache's)."""
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.qkv(x).split(C, dim=2))
        if cache is not None:
            k, v = cache.store(positions, k, v)
        if extra_kv is not None:
            if mask is None:
                raise ValueError("extra_kv needs a mask over its keys and the tokens' (see prepend_visible_keys)")
            k, v = torch.cat([extra_kv[0], k], dim=2), torch.cat([extra_kv[1], v], dim=2)
        dropout = self.dropout if self.training else 0.0
        if writes_attention_out(q, dropout):
            allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() if mask is None else mask
            y = plain_attention(q * (C // self.n_head) ** -0.5, k, v, additive_mask(allowed, q.dtype), dropout)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, dropout_p=dropout)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, T, C)))


class SynthesizerAttention(nn.Module):
    """Dense synthesizer attention as CS224N A5 specifies it (handout eq. 11, the starter's parameters).

    Head ``i`` scores ``ReLU(x A_i + b_1) B + b_2`` for every key position, with no query-key interaction and no
    1/sqrt(d) scaling; ``B`` [d/h, max_length] and ``b_2`` [max_length] are shared by all heads (the starter's
    ``w2``/``b2``), so sequences are at most ``max_length`` long (``block_size - 1`` = 127 in A5). Causal masking,
    softmax and per-head values ``x V_i`` then work as in dot-product attention.
    """

    def __init__(self, n_embd: int, n_head: int, max_length: int, dropout: float) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd {n_embd} is not divisible by n_head {n_head}")
        self.n_head, self.max_length = n_head, max_length
        self.w1 = nn.Linear(n_embd, n_embd)
        self.w2 = nn.Parameter(torch.empty(n_embd // n_head, max_length).uniform_(-0.001, 0.001))
        self.b2 = nn.Parameter(torch.zeros(max_length))
        self.value = nn.Linear(n_embd, n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None, positions: Tensor | None = None,
                extra_kv: tuple[Tensor, Tensor] | None = None, cache: LayerCache | None = None) -> Tensor:
        B, T, C = x.shape
        if extra_kv is not None:
            raise ValueError("synthesizer attention scores token positions only: it takes no extra_kv")
        if T > self.max_length:
            raise ValueError(f"synthesizer attention takes at most {self.max_length} positions, got {T}")
        hidden = F.relu(self.w1(x)).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        values = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if cache is not None:
            (values,) = cache.store(positions, values)
        keys = values.shape[2]
        if positions is None or cache is not None:  # key j's column is j
            scores = hidden @ self.w2[:, :keys] + self.b2[:keys]  # [B, h, T, keys]
        else:  # packed rows: key j's column is its position within its segment
            scores = torch.einsum("bhid,bdj->bhij", hidden, self.w2[:, positions].transpose(0, 1)) \
                + self.b2[positions][:, None, None, :]
        if mask is None:
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        attention = self.attn_drop(scores.masked_fill(~mask, float("-inf")).softmax(dim=-1))
        y = (attention @ values).transpose(1, 2).reshape(B, T, C)
        return self.resid_drop(self.proj(y))
