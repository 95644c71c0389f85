"""T5 attention through FlexAttention (``model.attention_impl=flex``): the learned relative-position bias as a
``score_mod``, causality, packing segments and encoder padding as a ``block_mask``.

SDPA takes T5's bias only as a dense float mask, which keeps it off its flash kernel (its memory-efficient kernel
reads the mask whole, masked blocks included); ``flex_attention`` adds the bias inside one fused kernel and skips the
blocks the mask hides. The math is the dense path's (:mod:`.t5_attention`)
wherever a query sees at least one key. A query that sees none (a packed row's decoder padding in cross-attention,
an all-padding encoder row) gets zeros here and the mean of the values there, at positions that carry no loss.
flex_attention has no attention dropout, so ``T5Config`` refuses ``attention_impl=flex`` with ``dropout_rate > 0``.
On CUDA the kernel is ``torch.compile``'d with 64 x 64 query/key blocks (:data:`CUDA_KERNEL_OPTIONS`); elsewhere
flex_attention runs unfused, and on the CPU forward only.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch
from torch import Tensor, nn
from torch.nn.attention.flex_attention import BlockMask, and_masks, create_block_mask, flex_attention


ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
# On an H200 (torch 2.11) t5_small's heads of 64 failed to compile with PyTorch's default forward blocks (128 x 128
# for bf16 on Hopper): 240 KiB of shared memory asked, 227 KiB there. 64 x 64 is PyTorch's default for heads of 32,
# the size that compiled and trained on that H200 (tests/test_gpu*.py).
CUDA_KERNEL_OPTIONS = {"BLOCK_M": 64, "BLOCK_N": 64}


@dataclass(frozen=True)
class FlexScores:
    """What the attention layers of one stack call share in place of the dense bias: block mask and score_mod."""

    block_mask: BlockMask
    score_mod: ScoreMod | None = None

    def to(self, dtype: torch.dtype) -> FlexScores:
        """Itself: unlike the dense bias there is nothing to cast (the stack casts its bias to the compute dtype)."""
        return self

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """``softmax(q k^T + bias) v`` for [B, H, T, d_kv] heads, unscaled as T5 is."""
        if q.device.type == "cuda":
            return _compiled_flex()(q, k, v, score_mod=self.score_mod, block_mask=self.block_mask, scale=1.0,
                                    kernel_options=CUDA_KERNEL_OPTIONS)
        return flex_attention(q, k, v, score_mod=self.score_mod, block_mask=self.block_mask, scale=1.0)


@cache
def _compiled_flex() -> Callable[..., Tensor]:
    return torch.compile(flex_attention)


def relative_bias_mod(stack: nn.Module, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
    """``score + bias[b, h, q, kv]`` with ``stack``'s relative-position bias [B or 1, H, Tq, Tk] from [B or 1, T]
    positions, computed once per forward pass as the dense path computes it. Its gradient reaches the learned
    bucket table through the table lookup's backward: the kernel's backward then writes the gradient of that
    bias instead of adding every score's into the table's few (buckets x heads) entries, which a score_mod that
    bucketed the distances itself would have it do."""
    bias = stack.position_bias(query_positions, key_positions)
    if bias.shape[0] == 1:
        return lambda score, b, h, q, kv: score + bias[0, h, q, kv]
    return lambda score, b, h, q, kv: score + bias[b, h, q, kv]


def flex_scores(query_tokens: Tensor, key_tokens: Tensor, segments: tuple[Tensor, Tensor] | None, *,
                causal: bool = False, pad_id: int | None = None, score_mod: ScoreMod | None = None) -> FlexScores:
    """Query ``i`` of [B, Tq] ``query_tokens`` sees key ``j`` of [B, Tk] ``key_tokens`` if ``j <= i`` (``causal``)
    and both carry the same segment id (``segments``: query and key ids, packed rows); without segments, if key ``j``
    is not ``pad_id`` (None: no padding mask, as the decoder's causal self-attention)."""
    conditions = []
    if causal:
        conditions.append(lambda b, h, q, kv: q >= kv)
    if segments is not None:
        query_segments, key_segments = segments
        conditions.append(lambda b, h, q, kv: query_segments[b, q] == key_segments[b, kv])
    elif pad_id is not None:
        keys = key_tokens != pad_id
        conditions.append(lambda b, h, q, kv: keys[b, kv])
    per_row = segments is not None or pad_id is not None
    block_mask = create_block_mask(and_masks(*conditions), query_tokens.shape[0] if per_row else None, None,
                                   query_tokens.shape[1], key_tokens.shape[1], device=query_tokens.device)
    return FlexScores(block_mask, score_mod)


def encoder_scores(stack: nn.Module, tokens: Tensor, segments: Tensor | None, positions: Tensor,
                   pad_id: int) -> FlexScores:
    """The encoder's self-attention as the dense path masks it: within segments, else over non-padding keys."""
    return flex_scores(tokens, tokens, None if segments is None else (segments, segments), pad_id=pad_id,
                       score_mod=relative_bias_mod(stack, positions, positions))


def decoder_scores(stack: nn.Module, tokens: Tensor, encoder_tokens: Tensor, segments: Tensor | None,
                   encoder_segments: Tensor | None, positions: Tensor, pad_id: int) -> tuple[FlexScores, FlexScores]:
    """The decoder's causal self-attention (within segments) and its cross-attention (within segments, else over
    the encoder's non-padding keys; no position bias)."""
    self_scores = flex_scores(tokens, tokens, None if segments is None else (segments, segments), causal=True,
                              score_mod=relative_bias_mod(stack, positions, positions))
    cross_scores = flex_scores(tokens, encoder_tokens, None if segments is None else (segments, encoder_segments),
                               pad_id=pad_id)
    return self_scores, cross_scores
