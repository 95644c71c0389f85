"""Learning-rate schedules: pinned values, LambdaLR wiring, resume and parameter errors."""
from __future__ import annotations

import math

import pytest
import torch

from c4prep.training.schedules import build_schedule, constant, cosine, inverse_sqrt, linear


def _optimizer(lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def _lr_at(scheduler: torch.optim.lr_scheduler.LambdaLR, step: int) -> float:
    """The lr the scheduler sets for update ``step`` (jumping there without stepping through)."""
    scheduler.last_epoch = step - 1
    scheduler.optimizer.step()  # no gradients: a no-op that keeps torch's step-order check quiet
    scheduler.step()
    return scheduler.get_last_lr()[0]


def test_inverse_sqrt_is_t5_with_base_lr_one():
    scheduler = build_schedule("inverse_sqrt", _optimizer(1.0), warmup_steps=10_000)
    expected = {0: 0.01, 1: 0.01, 9999: 0.01, 10_000: 0.01, 40_000: 0.005}
    for step, lr in expected.items():
        assert _lr_at(scheduler, step) == pytest.approx(lr, rel=1e-12)
    assert inverse_sqrt(250_000) == pytest.approx(0.002)


def test_inverse_sqrt_linear_ramp_down():
    options = {"warmup_steps": 10_000, "total_steps": 100_000, "linear_decay_fraction": 0.1}
    assert inverse_sqrt(90_000, **options) == pytest.approx(1 / 300)
    assert inverse_sqrt(95_000, **options) == pytest.approx(0.5 / math.sqrt(95_000))
    assert inverse_sqrt(100_000, **options) == 0.0
    assert inverse_sqrt(5_000, **options) == pytest.approx(0.01)


def test_cosine_endpoints_and_nanot5_form():
    options = {"warmup_steps": 100, "total_steps": 1100, "final_lr_fraction": 0.1}
    assert cosine(0, **options) == 0.0
    assert cosine(50, **options) == pytest.approx(0.5)
    assert cosine(100, **options) == pytest.approx(1.0)
    assert cosine(600, **options) == pytest.approx(0.55)  # halfway down: (1 + 0.1) / 2
    assert cosine(1100, **options) == pytest.approx(0.1)
    assert cosine(5000, **options) == pytest.approx(0.1)
    # nanoT5: LinearLR(start_factor=0.5) warm-up then CosineAnnealingLR(eta_min=1e-5), base lr 2e-2.
    scheduler = build_schedule("cosine", _optimizer(2e-2), warmup_steps=10_000, total_steps=65_536,
                               final_lr_fraction=1e-5 / 2e-2, warmup_start=0.5)
    assert scheduler.get_last_lr()[0] == pytest.approx(1e-2)
    assert _lr_at(scheduler, 10_000) == pytest.approx(2e-2)
    assert _lr_at(scheduler, 65_536) == pytest.approx(1e-5)


def test_constant_and_linear():
    assert [constant(s) for s in (0, 1, 10**6)] == [1.0, 1.0, 1.0]
    assert [constant(s, warmup_steps=4) for s in (0, 2, 4, 9)] == [0.0, 0.5, 1.0, 1.0]
    options = {"warmup_steps": 10, "total_steps": 110}
    assert [linear(s, **options) for s in (0, 5, 10, 60, 110, 200)] == pytest.approx([0, 0.5, 1, 0.5, 0, 0])
    scheduler = build_schedule("constant", _optimizer(1e-3))
    assert _lr_at(scheduler, 12_345) == pytest.approx(1e-3)


def test_scheduler_follows_optimizer_steps_and_resumes():
    optimizer = _optimizer(1.0)
    scheduler = build_schedule("linear", optimizer, warmup_steps=2, total_steps=6)
    seen = []
    for _ in range(4):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.0, 0.5, 1.0, 0.75])
    resumed_optimizer = _optimizer(1.0)
    resumed = build_schedule("linear", resumed_optimizer, warmup_steps=2, total_steps=6)
    resumed.load_state_dict(scheduler.state_dict())
    resumed_optimizer.load_state_dict(optimizer.state_dict())
    assert resumed_optimizer.param_groups[0]["lr"] == pytest.approx(0.5)
    resumed.step()
    assert resumed.get_last_lr()[0] == pytest.approx(0.25)


def test_bad_names_and_options():
    with pytest.raises(ValueError, match="valid names: constant, cosine, inverse_sqrt, linear"):
        build_schedule("noam", _optimizer(1.0))
    with pytest.raises(ValueError, match=r"unknown options \['final_lr'\].*valid options: warmup_steps"):
        build_schedule("cosine", _optimizer(1.0), warmup_steps=1, total_steps=10, final_lr=0.0)
    with pytest.raises(ValueError, match="needs options: total_steps"):
        build_schedule("linear", _optimizer(1.0), warmup_steps=1)
    with pytest.raises(ValueError, match="must exceed warmup_steps"):
        build_schedule("cosine", _optimizer(1.0), warmup_steps=10, total_steps=10)
    with pytest.raises(ValueError, match="needs total_steps"):
        build_schedule("inverse_sqrt", _optimizer(1.0), linear_decay_fraction=0.1)
    with pytest.raises(ValueError, match="warmup_steps must be >= 1"):
        inverse_sqrt(0, warmup_steps=0)
    with pytest.raises(ValueError, match="warmup_start must be in"):
        constant(0, warmup_steps=3, warmup_start=2.0)
