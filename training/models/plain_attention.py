"""Attention written out (matmul, add a bias, softmax, dropout, matmul), where SDPA is slow or wrong.

- bf16 on CPU (speed): there ``scaled_dot_product_attention`` is slower than the same math as plain kernels: its
  fused kernel with a mask, and its unfused path (which upcasts to fp32 and guards fully masked rows), measured 2.8x
  and 1.5x slower forward + backward at CS224N A5's shapes (18 x 8 heads x 127 x 32) on this project's 2-vCPU AMD
  EPYC (avx512_bf16, no AMX). In fp32 the fused kernel is the fastest.
- dropout in bf16 or fp16 on CUDA (correctness, issue #23): with dropout, SDPA's fused kernels trained the A5 model
  into divergence in bf16 (see ``tests/test_gpu.py`` for what was found about them); written out, it trains as fp32.
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


def writes_attention_out(q: Tensor, dropout_p: float) -> bool:
    """Whether attention on ``q`` (its device and dtype) with ``dropout_p`` is written out rather than fused: bf16 on
    CPU, and dropout in bf16/fp16 on CUDA."""
    reduced = q.dtype in (torch.bfloat16, torch.float16)
    return (q.device.type == "cpu" and q.dtype == torch.bfloat16) or (q.device.type == "cuda" and reduced
                                                                       and dropout_p > 0)


def additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """The bool "may attend" mask ``allowed`` as an additive bias: 0 where allowed, -inf elsewhere."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))
