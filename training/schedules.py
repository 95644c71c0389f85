"""Learning-rate schedules as pure step -> multiplier functions, and ``build_schedule`` wrapping them in LambdaLR.

Conventions (the same for every schedule):

- A schedule returns a **multiplier of the optimizer's base lr** (``LambdaLR`` semantics), never an lr of its
  own. ``cosine``, ``constant`` and ``linear`` peak at 1.0, so their base lr is the peak lr.
- ``inverse_sqrt`` returns T5's absolute rate ``1/sqrt(max(step, warmup_steps))`` (0.01 for the first 10^4
  steps), so **base lr 1.0 gives T5's learning rates exactly**; another base lr scales them.
- ``step`` counts optimizer updates already applied: the first update uses ``step = 0`` (``LambdaLR``'s
  ``last_epoch``; MTF's 0-based ``global_step``). Call ``scheduler.step()`` after each ``optimizer.step()``.
- A linear warm-up goes from ``warmup_start`` (default 0, so the first update has lr 0) to 1.0 over
  ``warmup_steps`` updates; nanoT5's cosine warm-up starts at ``warmup_start=0.5``.
"""
from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _warmup(step: int, warmup_steps: int, warmup_start: float) -> float | None:
    """The warm-up multiplier while ``step < warmup_steps``, else None."""
    _check(step >= 0, f"step must be >= 0, got {step}")
    _check(warmup_steps >= 0, f"warmup_steps must be >= 0, got {warmup_steps}")
    _check(0.0 <= warmup_start <= 1.0, f"warmup_start must be in [0, 1], got {warmup_start}")
    if step < warmup_steps:
        return warmup_start + (1.0 - warmup_start) * step / warmup_steps
    return None


def _decay_progress(step: int, warmup_steps: int, total_steps: int) -> float:
    """Fraction of the post-warm-up phase done at ``step``, clamped to [0, 1]."""
    _check(total_steps > warmup_steps, f"total_steps ({total_steps}) must exceed warmup_steps ({warmup_steps}): "
                                       "warm up for fewer steps, or for a fraction of the run")
    return min(1.0, max(0.0, (step - warmup_steps) / (total_steps - warmup_steps)))


def inverse_sqrt(step: int, *, warmup_steps: int = 10_000, total_steps: int | None = None,
                 linear_decay_fraction: float = 0.0) -> float:
    """T5's rate ``1/sqrt(max(step, warmup_steps))``, times MTF's linear ramp-down over the last fraction.

    With ``linear_decay_fraction > 0`` (the released T5 operative config uses 0.1) the rate is also multiplied by
    ``min(1, (total_steps - step) / (total_steps * linear_decay_fraction))``, reaching 0 at ``total_steps``.
    """
    _check(step >= 0, f"step must be >= 0, got {step}")
    _check(warmup_steps >= 1, f"warmup_steps must be >= 1 for inverse_sqrt, got {warmup_steps}")
    _check(0.0 <= linear_decay_fraction <= 1.0, f"linear_decay_fraction must be in [0, 1], got {linear_decay_fraction}")
    rate = 1.0 / math.sqrt(max(step, warmup_steps))
    if linear_decay_fraction == 0.0:
        return rate
    _check(total_steps is not None and total_steps > 0,
           f"linear_decay_fraction > 0 needs total_steps > 0, got {total_steps}")
    return rate * min(1.0, max(0.0, (total_steps - step) / (total_steps * linear_decay_fraction)))


def cosine(step: int, *, warmup_steps: int, total_steps: int, final_lr_fraction: float = 0.0,
           warmup_start: float = 0.0) -> float:
    """Linear warm-up to 1, then half a cosine down to ``final_lr_fraction`` at ``total_steps`` (held after).

    nanoT5's schedule (``LinearLR(start_factor=0.5)`` then ``CosineAnnealingLR(eta_min=final_cosine)``) is
    ``warmup_start=0.5, final_lr_fraction=final_cosine / base_lr``.
    """
    _check(0.0 <= final_lr_fraction <= 1.0, f"final_lr_fraction must be in [0, 1], got {final_lr_fraction}")
    warm = _warmup(step, warmup_steps, warmup_start)
    progress = _decay_progress(step, warmup_steps, total_steps)
    if warm is not None:
        return warm
    return final_lr_fraction + (1.0 - final_lr_fraction) * 0.5 * (1.0 + math.cos(math.pi * progress))


def constant(step: int, *, warmup_steps: int = 0, warmup_start: float = 0.0) -> float:
    """1.0, after an optional linear warm-up (T5 fine-tuning: constant lr 1e-3)."""
    warm = _warmup(step, warmup_steps, warmup_start)
    return 1.0 if warm is None else warm


def linear(step: int, *, warmup_steps: int, total_steps: int, warmup_start: float = 0.0) -> float:
    """Linear warm-up to 1, then linear decay to 0 at ``total_steps`` (held at 0 after)."""
    warm = _warmup(step, warmup_steps, warmup_start)
    progress = _decay_progress(step, warmup_steps, total_steps)
    return 1.0 - progress if warm is None else warm


def mingpt_cosine(step: int, *, warmup_steps: float, decay_steps: float, min_lr_fraction: float = 0.1,
                  periodic: bool = True) -> float:
    """minGPT's (and CS224N A5's) token-count schedule in optimizer steps: ``step / warmup_steps`` during warm-up,
    then ``max(min_lr_fraction, 0.5 * (1 + cos(pi * progress)))`` with ``progress`` going 0 -> 1 from
    ``warmup_steps`` to ``decay_steps``. minGPT does not clamp ``progress`` (``periodic=True``), so past
    ``decay_steps`` the cosine climbs back to the full rate (A5's 650-epoch pretraining is back at full rate around
    epoch 403); ``periodic=False`` holds the floor instead. Step counts may be fractional (A5 warms up over
    10,240 tokens, 0.63 of a 128 x 127-token step). minGPT sets the rate after each step, so its first step runs at
    the optimizer's full rate: step 0 gives 1.0, not the warm-up's 0."""
    _check(step >= 0, f"step must be >= 0, got {step}")
    _check(0 <= warmup_steps < decay_steps, f"need 0 <= warmup_steps < decay_steps, got {warmup_steps}, {decay_steps}")
    _check(0.0 <= min_lr_fraction <= 1.0, f"min_lr_fraction must be in [0, 1], got {min_lr_fraction}")
    if step == 0:
        return 1.0
    if step < warmup_steps:
        return step / warmup_steps
    progress = (step - warmup_steps) / (decay_steps - warmup_steps)
    if not periodic:
        progress = min(progress, 1.0)
    return max(min_lr_fraction, 0.5 * (1.0 + math.cos(math.pi * progress)))


SCHEDULES: dict[str, Callable[..., float]] = {
    "inverse_sqrt": inverse_sqrt,
    "cosine": cosine,
    "constant": constant,
    "linear": linear,
    "mingpt_cosine": mingpt_cosine,
}


def build_schedule(name: str, optimizer: torch.optim.Optimizer, **options: Any) -> LambdaLR:
    """A ``LambdaLR`` applying schedule ``name`` (one of :data:`SCHEDULES`) with ``options`` to every group."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; valid names: {', '.join(sorted(SCHEDULES))}")
    function = SCHEDULES[name]
    parameters = list(inspect.signature(function).parameters.values())[1:]  # all but `step`
    valid = [p.name for p in parameters]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown options {unknown} for schedule {name!r}; valid options: {', '.join(valid)}")
    missing = [p.name for p in parameters if p.default is inspect.Parameter.empty and p.name not in options]
    if missing:
        raise ValueError(f"schedule {name!r} needs options: {', '.join(missing)}")
    factor = functools.partial(function, **options)
    factor(0)  # raises ValueError for bad values now rather than inside LambdaLR
    return LambdaLR(optimizer, factor)
