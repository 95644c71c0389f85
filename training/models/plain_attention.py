"""Attention written out (matmul, add a bias, softmax, dropout, matmul), for bf16 on CPU.

On CPU, ``scaled_dot_product_attention`` in bf16 is slower than the same math as plain kernels: its fused kernel
with a mask, and its unfused path (which upcasts to fp32 and guards fully masked rows), measured 2.8x and 1.5x
slower forward + backward at CS224N A5's shapes (18 x 8 heads x 127 x 32) on this project's 2-vCPU AMD EPYC
(avx512_bf16, no AMX). In fp32 the fused kernel is the fastest, so callers use this only for bf16 on CPU.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def plain_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, dropout_p: float = 0.0) -> Tensor:
    """``dropout(softmax(q k^T + bias)) v`` for ``q`` [B, H, Tq, d], ``k``/``v`` [B, H, Tk, d] and an additive
    ``bias`` broadcastable to [B, H, Tq, Tk] (any scaling of the scores is the caller's, folded into ``q``)."""
    weights = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) + bias, dim=-1)
    return torch.matmul(F.dropout(weights, dropout_p, training=dropout_p > 0), v)


def additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """The bool "may attend" mask ``allowed`` as an additive bias: 0 where allowed, -inf elsewhere."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))
