"""Optimizers: T5's Adafactor (Mesh TensorFlow semantics), torch's AdamW, and nanoT5's RMS-scaled AdamW.

``build_optimizer(name, params, lr, **options)`` is the entry point. The ``lr`` it takes is the base learning
rate that an ``LambdaLR`` schedule (:mod:`training.schedules`) multiplies.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim.optimizer import ParamsT


def _rms(tensor: torch.Tensor) -> torch.Tensor:
    """Root mean square of all entries (a 0-d tensor, so no host synchronisation)."""
    return torch.linalg.vector_norm(tensor) / math.sqrt(tensor.numel())


class Adafactor(torch.optim.Optimizer):
    """Adafactor as T5 pretrained with it (``mesh_tensorflow/optimize.py::AdafactorOptimizer``).

    Per parameter ``p`` with gradient ``g``, at its ``t``-th update (``t = 1, 2, ...``):

    - ``beta2 = 1 - t ** decay_rate`` (MTF writes ``1 - (global_step + 1) ** -0.8`` with a 0-based global step,
      which is the same number; HF and torch use the same 1-based ``t``). The first update therefore keeps no
      history: ``v = g**2 + eps1``.
    - Second moment of ``g**2 + eps1``: factored into a row and a column mean over the two largest dims when both
      are ``>= min_dim_size_to_factor`` (MTF's rule, default 128), full-size otherwise (vectors, small tables
      such as T5's ``[32, n_heads]`` relative-position bias). ``v_hat = row * col / mean(row)``.
    - ``u = g / sqrt(v_hat)``, then ``u /= max(1, RMS(u) / clipping_threshold)`` (update clipping).
    - The step is ``lr * max(eps2, RMS(p))`` when ``multiply_by_parameter_scale`` (else ``lr``), with ``RMS(p)``
      taken before the update; with ``beta1 > 0`` the scaled step is averaged with momentum like MTF.

    Up to float rounding this equals ``transformers.optimization.Adafactor(scale_parameter=True,
    relative_step=False, warmup_init=False, clip_threshold=1.0, decay_rate=-0.8, beta1=None,
    eps=(1e-30, 1e-3))`` except that HF factors every tensor with 2 or more dims (over its last two);
    ``min_dim_size_to_factor=1`` reproduces that for matrices. ``lr`` is used as given (no built-in relative
    step): T5's ``min(0.01, 1/sqrt(t))`` comes from the ``inverse_sqrt`` schedule with base lr 1.0.

    Why not ``torch.optim.Adafactor`` (read in torch 2.13): it does scale by ``max(eps2, RMS(p))`` and clip the
    update, but (1) its step size is ``min(lr, 1/sqrt(t))``, so ``lr`` is only a cap and any schedule above
    ``1/sqrt(t)`` (constant 1e-3 fine-tuning after 10^6 steps, cosine from 2e-2) is silently cut; (2) ``eps1``
    is not added to ``g**2`` but clamps the variance estimate afterwards (default machine epsilon), which
    changes updates for tiny gradients; (3) it factors every tensor with 2 or more dims (no 128 rule); (4) it
    has no momentum option.

    State (``step`` as an int, accumulators in the parameter's dtype as torch's own optimizers keep them)
    round-trips exactly through ``state_dict``/``load_state_dict``; arithmetic runs in float32. The step count
    is kept per parameter (MTF's is global), which is the same when every parameter gets a gradient each step.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        *,
        beta1: float = 0.0,
        decay_rate: float = -0.8,
        eps1: float = 1e-30,
        eps2: float = 1e-3,
        clipping_threshold: float | None = 1.0,
        multiply_by_parameter_scale: bool = True,
        factored: bool = True,
        min_dim_size_to_factor: int = 128,
    ) -> None:
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0 <= beta1 < 1:
            raise ValueError(f"beta1 must be in [0, 1), got {beta1}")
        if decay_rate > 0:
            raise ValueError(f"decay_rate must be <= 0 (beta2 = 1 - t**decay_rate), got {decay_rate}")
        if eps1 < 0 or eps2 < 0:
            raise ValueError(f"eps1 and eps2 must be >= 0, got {eps1} and {eps2}")
        if clipping_threshold is not None and clipping_threshold <= 0:
            raise ValueError(f"clipping_threshold must be > 0 or None, got {clipping_threshold}")
        if min_dim_size_to_factor < 1:
            raise ValueError(f"min_dim_size_to_factor must be >= 1, got {min_dim_size_to_factor}")
        defaults = {"lr": lr, "beta1": beta1, "decay_rate": decay_rate, "eps1": eps1, "eps2": eps2,
                    "clipping_threshold": clipping_threshold,
                    "multiply_by_parameter_scale": multiply_by_parameter_scale, "factored": factored,
                    "min_dim_size_to_factor": min_dim_size_to_factor}
        super().__init__(params, defaults)

    @staticmethod
    def factored_dims(shape: torch.Size, min_dim_size_to_factor: int = 128) -> tuple[int, int] | None:
        """(largest, second-largest) dim indices to factor over, or None when the tensor is kept unfactored."""
        if len(shape) < 2:
            return None
        largest, second = sorted(range(len(shape)), key=lambda dim: -shape[dim])[:2]
        return (largest, second) if shape[second] >= min_dim_size_to_factor else None

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Apply one update to every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, group)
        return loss

    def _update(self, p: torch.Tensor, group: dict[str, Any]) -> None:
        if p.grad.is_sparse:
            raise RuntimeError("Adafactor does not support sparse gradients")
        grad = p.grad.float()
        state = self.state[p]
        dims = self.factored_dims(p.shape, group["min_dim_size_to_factor"]) if group["factored"] else None
        if not state:
            state["step"] = 0
            if dims is None:
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            else:
                state["exp_avg_sq_row"] = p.new_zeros(_reduced_shape(p.shape, dims[1]))
                state["exp_avg_sq_col"] = p.new_zeros(_reduced_shape(p.shape, dims[0]))
            if group["beta1"] > 0:
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        beta2 = 1.0 - state["step"] ** group["decay_rate"]
        grad_sq = grad.square().add_(group["eps1"])
        if dims is None:
            exp_avg_sq = state["exp_avg_sq"]
            exp_avg_sq.mul_(beta2).add_(grad_sq, alpha=1.0 - beta2)
            update = exp_avg_sq.float().rsqrt().mul_(grad)
        else:
            largest, second = dims
            row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
            row.mul_(beta2).add_(grad_sq.mean(dim=second, keepdim=True), alpha=1.0 - beta2)
            col.mul_(beta2).add_(grad_sq.mean(dim=largest, keepdim=True), alpha=1.0 - beta2)
            row32, col32 = row.float(), col.float()
            row_factor = (row32 / row32.mean(dim=largest, keepdim=True)).rsqrt_()
            update = torch.mul(row_factor, col32.rsqrt()).mul_(grad)
        if group["clipping_threshold"] is not None:
            update.div_((_rms(update) / group["clipping_threshold"]).clamp_(min=1.0))
        p32 = p.float()
        if group["multiply_by_parameter_scale"]:
            update.mul_(_rms(p32).clamp_(min=group["eps2"]) * group["lr"])
        else:
            update.mul_(group["lr"])
        if group["beta1"] > 0:
            exp_avg = state["exp_avg"]
            exp_avg.mul_(group["beta1"]).add_(update, alpha=1.0 - group["beta1"])
            update = exp_avg.float()
        if p32 is p:
            p.sub_(update)
        else:
            p.copy_(p32.sub_(update))


def _reduced_shape(shape: torch.Size, dim: int) -> list[int]:
    """``shape`` with ``dim`` reduced to 1 (keepdim shape of an accumulator)."""
    reduced = list(shape)
    reduced[dim] = 1
    return reduced


class AdamWScale(torch.optim.Optimizer):
    """nanoT5's ``AdamWScale``: Adam whose step is multiplied by ``max(1e-3, RMS(p))``, like Adafactor.

    Per parameter, at update ``t``: ``m, v`` are Adam's moments; the step is
    ``lr * sqrt(1 - beta2**t) / (1 - beta1**t) * max(1e-3, RMS(p)) * m / (sqrt(v) + eps)`` (HF-style ``eps``
    added to the uncorrected ``sqrt(v)``, default 1e-6); decoupled weight decay ``p -= lr * weight_decay * p``
    is applied after the step, as nanoT5 does. nanoT5 found this stable where plain AdamW diverged for T5.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float,
        *,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        min_scale: float = 1e-3,
    ) -> None:
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if eps < 0 or weight_decay < 0 or min_scale < 0:
            raise ValueError(f"eps, weight_decay and min_scale must be >= 0, got {eps}, {weight_decay}, {min_scale}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "min_scale": min_scale}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """Apply one update to every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamWScale does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(p.grad, alpha=1.0 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1.0 - beta2)
                correction = math.sqrt(1.0 - beta2 ** state["step"]) / (1.0 - beta1 ** state["step"])
                scale = _rms(p.float()).clamp_(min=group["min_scale"]) * (group["lr"] * correction)
                p.sub_(exp_avg / (exp_avg_sq.sqrt() + group["eps"]) * scale)
                if group["weight_decay"] > 0:
                    p.mul_(1.0 - group["lr"] * group["weight_decay"])
        return loss


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adafactor": Adafactor,
    "adamw": torch.optim.AdamW,
    "adamw_scale": AdamWScale,
}


def decay_groups(named_parameters: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float,
                 exclude: str) -> list[dict[str, Any]]:
    """Parameter groups with and without weight decay. ``exclude``: ``"vectors"`` spares every parameter of fewer
    than 2 dimensions (biases, norms; GPT-1 and nanoGPT), ``"bias"`` only those whose name contains "bias"
    (minGPT/CS224N A5, which thereby decays layer-norm weights and embeddings), ``"none"`` spares nothing."""
    if exclude not in ("vectors", "bias", "none"):
        raise ValueError(f"decay exclusion must be vectors, bias or none, got {exclude!r}")
    decayed, spared = [], []
    for name, parameter in named_parameters:
        if exclude == "vectors":
            spare = parameter.dim() < 2
        else:
            spare = exclude == "bias" and "bias" in name
        (spared if spare else decayed).append(parameter)
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": spared, "weight_decay": 0.0}]


def use_fused_kernel(optimizer: torch.optim.Optimizer) -> bool:
    """Switch a fresh torch Adam/AdamW to its fused kernel (one launch updates every parameter); True if it did.

    Left alone: other optimizers, one that already holds state (its step counters live where the unfused kernel
    put them), and one whose options chose ``fused``, ``foreach``, ``capturable`` or ``differentiable``.
    """
    groups = optimizer.param_groups
    if (not isinstance(optimizer, torch.optim.Adam) or optimizer.state
            or any(g["fused"] is not None or g["foreach"] or g["capturable"] or g["differentiable"] for g in groups)):
        return False
    for group in groups:
        group["fused"] = True
    return True


def build_optimizer(name: str, params: ParamsT, lr: float, **options: Any) -> torch.optim.Optimizer:
    """The optimizer ``name`` (one of :data:`OPTIMIZERS`) over ``params`` with base learning rate ``lr``.

    ``options`` go to the optimizer's constructor: e.g. ``min_dim_size_to_factor`` for ``adafactor``,
    ``weight_decay``/``betas`` for ``adamw`` (:class:`torch.optim.AdamW`) and ``adamw_scale``.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid names: {', '.join(sorted(OPTIMIZERS))}")
    return OPTIMIZERS[name](params, lr=lr, **options)
