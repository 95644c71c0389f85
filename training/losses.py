"""Token-level cross-entropy with MTF's optional z-loss, always computed in fp32."""
from __future__ import annotations

import torch
from torch import Tensor


def token_cross_entropy(logits: Tensor, targets: Tensor, weights: Tensor,
                        z_loss: float = 0.0) -> tuple[Tensor, Tensor]:
    """(sum of weighted per-token losses, sum of weights) for logits [..., V], targets and weights [...].

    The per-token loss is ``logsumexp(logits) - logits[target]`` plus ``z_loss * logsumexp(logits)**2`` (MTF's
    z-loss, 1e-4 in T5 pretraining). Works in fp32 even under bf16 autocast. Targets with weight 0 must still be
    valid ids (seqio pads them with 0).
    """
    weights = weights.float()
    return (token_losses(logits, targets, z_loss) * weights).sum(), weights.sum()


def token_losses(logits: Tensor, targets: Tensor, z_loss: float = 0.0) -> Tensor:
    """Per-token fp32 losses [...] (see :func:`token_cross_entropy`), even under bf16 autocast."""
    with torch.autocast(device_type=logits.device.type, enabled=False):
        logits = logits.float()
        log_z = torch.logsumexp(logits, dim=-1)
        losses = log_z - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return losses + z_loss * log_z.square() if z_loss else losses  # without it: three kernels fewer each way


def mean_token_loss(logits: Tensor, targets: Tensor, weights: Tensor, z_loss: float = 0.0) -> Tensor:
    """Weighted mean of the per-token losses (0 when every weight is 0)."""
    total, count = token_cross_entropy(logits, targets, weights, z_loss)
    return total / count.clamp(min=torch.finfo(torch.float32).tiny)
