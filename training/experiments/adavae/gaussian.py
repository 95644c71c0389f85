"""Diagonal-Gaussian posteriors q(z|x) = N(mean, diag exp(logvar)) and the standard-normal prior p(z) = N(0, I).

Every density is summed over the last (latent) dimension and broadcasts over the leading ones.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

LOG_2PI = math.log(2.0 * math.pi)


def reparameterize(mean: Tensor, logvar: Tensor, n_samples: int | None = None,
                   generator: torch.Generator | None = None) -> Tensor:
    """z = mean + eps * exp(logvar / 2), eps ~ N(0, I): ``[B, n_z]``, or ``[B, n_samples, n_z]`` when given.

    The noise is drawn on the generator's device (CPU by default) and moved to ``mean``'s, so a CPU generator gives
    the same z on every device. (Upstream AdaVAE used ``logvar`` as the std in its multi-sample path; this is the
    correct std everywhere.)
    """
    if n_samples is not None:
        if n_samples < 1:
            raise ValueError(f"n_samples must be >= 1, got {n_samples}")
        mean, logvar = mean.unsqueeze(-2), logvar.unsqueeze(-2)
        shape = (*mean.shape[:-2], n_samples, mean.shape[-1])
    else:
        shape = tuple(mean.shape)
    device = generator.device if generator is not None else mean.device
    return sample_from_noise(mean, logvar, torch.randn(shape, generator=generator, dtype=mean.dtype, device=device))


def sample_from_noise(mean: Tensor, logvar: Tensor, eps: Tensor) -> Tensor:
    """``mean + eps * exp(logvar / 2)`` (broadcasting), with ``eps`` moved to ``mean``'s device and dtype."""
    return mean + eps.to(mean.device, mean.dtype) * torch.exp(0.5 * logvar)


def kl_per_dimension(mean: Tensor, logvar: Tensor) -> Tensor:
    """KL(q(z_d|x) || N(0, 1)) per dimension, ``0.5 * (mean^2 + exp(logvar) - logvar - 1)``, shape of ``mean``."""
    return 0.5 * (mean.pow(2) + logvar.exp() - logvar - 1.0)


def log_normal_diag(z: Tensor, mean: Tensor, logvar: Tensor) -> Tensor:
    """log N(z; mean, diag exp(logvar)) summed over the last dim (z ``[N, K, n_z]`` with mean ``[N, 1, n_z]``)."""
    return -0.5 * ((z - mean).pow(2) * torch.exp(-logvar) + logvar + LOG_2PI).sum(-1)


def log_standard_normal(z: Tensor) -> Tensor:
    """log N(z; 0, I), summed over the last dimension."""
    return -0.5 * (z.pow(2) + LOG_2PI).sum(-1)
