"""The AdaVAE training objective: reconstruction + beta * free-bits KL, and the cyclical beta schedule (§1.8, §1.9)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from .gaussian import kl_per_dimension

FREE_BITS_MODES = ("total", "dimension_mask", "dimension_hinge", "none")
RECONSTRUCTIONS = ("sentence", "token")


def free_bits_kl(kl_per_dim: Tensor, rate: float, mode: str) -> Tensor:
    """The KL term to minimise (a scalar) from per-example, per-dimension KLs ``[B, n_z]``.

    With ``K_d`` the batch mean of ``kl_per_dim[:, d]`` (every mode thresholds this batch mean, never a single
    example's KL):

    - ``total`` (default): ``max(sum_d K_d, rate * n_z)``, the paper's eq. 4 threshold on the total KL with lambda
      scaled per latent dimension as the released code's ``--fb 1`` applies it (lambda 0.5, n_z 32: 16 nats). Below
      the threshold the term is the constant ``rate * n_z`` and has zero gradient.
    - ``dimension_mask`` (Optimus-style): ``sum_d K_d * [K_d > rate]``; dimensions at or below ``rate`` contribute
      neither value nor gradient. (Optimus's code masks each example's KL_d separately; here the mask is per
      dimension of the batch mean, the free-bits-per-dimension formulation.)
    - ``dimension_hinge``: ``sum_d max(K_d, rate)``.
    - ``none``: the plain batch-mean KL ``sum_d K_d``.
    """
    if mode not in FREE_BITS_MODES:
        raise ValueError(f"unknown free-bits mode {mode!r}; choose one of {', '.join(FREE_BITS_MODES)}")
    if rate < 0:
        raise ValueError(f"the free-bits rate must be >= 0 nats, got {rate}")
    batch_mean = kl_per_dim.mean(0)
    if mode == "total":
        return batch_mean.sum().clamp(min=rate * kl_per_dim.shape[-1])
    if mode == "dimension_mask":
        return (batch_mean * (batch_mean > rate)).sum()
    if mode == "dimension_hinge":
        return batch_mean.clamp(min=rate).sum()
    return batch_mean.sum()


def cyclic_beta(step: int, total_steps: int, n_cycles: int = 4, ratio_zero: float = 0.25,
                ratio_increase: float = 0.25, beta_max: float = 1.0) -> float:
    """The KL weight at ``step``: entry ``step`` of Optimus/AdaVAE's ``frange_cycle_zero_linear(total_steps, 0,
    beta_max, n_cycles, ratio_increase, ratio_zero)``.

    Cycle ``c`` starts at step ``floor(c * P)``, ``P = total_steps / n_cycles``. At offset ``i`` into its cycle, beta is
    0 while ``i < P * ratio_zero``; from the first offset past that (where the ramp's value is still 0) it rises by
    ``beta_max / (P * ratio_increase)`` per step, and stays at ``beta_max`` once the ramp would pass it. With 4 cycles
    over 100 steps: steps 0-7 give 0, step 8 gives 0.16, step 13 0.96, steps 14-24 give 1, step 25 gives 0 again.
    AdaVAE builds the table for N iterations with ``N + 1`` entries, i.e. ``total_steps = N + 1``.
    """
    if total_steps < 1 or n_cycles < 1:
        raise ValueError(f"need total_steps >= 1 and n_cycles >= 1, got {total_steps} and {n_cycles}")
    if not 0 <= step < total_steps:
        raise ValueError(f"step {step} is outside the schedule's [0, {total_steps}) steps")
    if ratio_zero < 0 or ratio_increase <= 0 or ratio_zero + ratio_increase > 1:
        raise ValueError(f"need ratio_zero >= 0, ratio_increase > 0 and their sum <= 1, "
                         f"got {ratio_zero} and {ratio_increase}")
    if beta_max < 0:
        raise ValueError(f"beta_max must be >= 0, got {beta_max}")
    period = total_steps / n_cycles
    cycle = min(n_cycles - 1, ((step + 1) * n_cycles - 1) // total_steps)  # the last cycle starting at or before step
    offset = step - cycle * total_steps // n_cycles
    zero_steps = period * ratio_zero
    if offset < zero_steps:
        return 0.0
    ramp_step = offset - math.ceil(zero_steps)
    return min(beta_max, beta_max * ramp_step / (period * ratio_increase))


@dataclass(frozen=True)
class VAELossTerms:
    """One training step's loss and its parts (batch means; ``kl`` is the true KL, ``kl_objective`` the free-bits
    term that the loss uses)."""

    loss: Tensor
    reconstruction: Tensor
    kl: Tensor
    kl_objective: Tensor
    beta: float


def vae_loss(token_nll: Tensor, target_mask: Tensor, mean: Tensor, logvar: Tensor, beta: float, rate: float,
             mode: str = "total", reconstruction: str = "sentence") -> VAELossTerms:
    """``reconstruction + beta * free_bits_kl(KL(q(z|x) || p(z)), rate, mode)``.

    ``token_nll`` ``[B, T]`` holds each target's negative log-likelihood under the decoder (any value, even inf or nan,
    where ``target_mask`` is False). ``reconstruction="sentence"`` (default) is the ELBO's term: the batch mean of
    each sentence's summed NLL. ``"token"`` is AdaVAE's: the mean NLL over all real target tokens, which weights the
    per-sentence KL about sentence-length times more than the ELBO does (§1.8).
    """
    if reconstruction not in RECONSTRUCTIONS:
        raise ValueError(f"unknown reconstruction {reconstruction!r}; choose one of {', '.join(RECONSTRUCTIONS)}")
    real_nll = token_nll.masked_fill(~target_mask, 0.0)
    if reconstruction == "sentence":
        rec = real_nll.sum(-1).mean()
    else:
        n_targets = int(target_mask.sum())
        if n_targets == 0:
            raise ValueError("target_mask marks no real target; the token-mean reconstruction is undefined")
        rec = real_nll.sum() / n_targets
    kl = kl_per_dimension(mean, logvar)
    kl_objective = free_bits_kl(kl, rate, mode)
    return VAELossTerms(loss=rec + beta * kl_objective, reconstruction=rec, kl=kl.sum(-1).mean(),
                        kl_objective=kl_objective, beta=float(beta))
