"""Optimizers: our Adafactor against HF's, MTF's factoring rule, exact resume, nanoT5's AdamWScale."""
from __future__ import annotations

import io

import pytest
import torch

from c4prep.training.optim import Adafactor, AdamWScale, build_optimizer

HF_SHAPES = [(256, 128), (128, 256), (2, 256, 128), (64,), (128,)]


def _params(shapes, seed: int = 0, zero_last: bool = False) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(shape, generator=gen) * 0.05) for shape in shapes]
    if zero_last:
        params[-1].data.zero_()  # a zero-initialised vector exercises the eps2 parameter-scale floor
    return params


def _set_grads(params, step: int) -> None:
    """Deterministic gradients for a step; step 3 is 100x larger so update clipping engages."""
    gen = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen) * (100.0 if step == 3 else 1.0)).to(p.dtype)


def _hf_adafactor(params, lr: float, beta1: float | None):
    from transformers.optimization import Adafactor as HFAdafactor

    return HFAdafactor(params, lr=lr, scale_parameter=True, relative_step=False, warmup_init=False,
                       clip_threshold=1.0, decay_rate=-0.8, beta1=beta1, eps=(1e-30, 1e-3))


@pytest.mark.parametrize("beta1", [0.0, 0.9])
def test_adafactor_matches_transformers_step_by_step(beta1):
    ours, theirs = _params(HF_SHAPES, zero_last=True), _params(HF_SHAPES, zero_last=True)
    opt = Adafactor(ours, lr=0.01, beta1=beta1)
    ref = _hf_adafactor(theirs, lr=0.01, beta1=beta1 or None)
    for step in range(6):
        _set_grads(ours, step)
        _set_grads(theirs, step)
        opt.step()
        ref.step()
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a.data, b.data, rtol=1e-5, atol=1e-7)
    assert all("exp_avg_sq_row" in opt.state[p] for p in ours[:3])
    assert all("exp_avg_sq" in opt.state[p] for p in ours[3:])


def test_adafactor_first_step_and_parameter_scale_floor():
    p = torch.nn.Parameter(torch.zeros(64))
    grad = torch.randn(64, generator=torch.Generator().manual_seed(3))
    p.grad = grad.clone()
    Adafactor([p], lr=0.5).step()
    # beta2 is 0 at t=1, so u = g/sqrt(g^2 + 1e-30) = sign(g); RMS(p) = 0 is floored at eps2 = 1e-3.
    torch.testing.assert_close(p.data, -0.5 * 1e-3 * grad.sign())


def test_adafactor_clips_update_rms():
    p = torch.nn.Parameter(torch.full((64,), 2.0))
    opt = Adafactor([p], lr=0.1)
    grad = torch.randn(64, generator=torch.Generator().manual_seed(4))
    p.grad = grad.clone()
    opt.step()
    before = p.data.clone()
    p.grad = grad * 100  # v = 0.43 g^2 + 0.57 (100 g)^2, so |u| = 100/sqrt(5743) > 1 everywhere: clipped to RMS 1
    opt.step()
    delta = before - p.data
    torch.testing.assert_close(delta.square().mean().sqrt(), 0.1 * before.square().mean().sqrt())


def test_mtf_factoring_rule():
    assert Adafactor.factored_dims(torch.Size([256, 128])) == (0, 1)
    assert Adafactor.factored_dims(torch.Size([128, 512])) == (1, 0)
    assert Adafactor.factored_dims(torch.Size([2, 256, 128])) == (1, 2)
    assert Adafactor.factored_dims(torch.Size([32, 8])) is None  # T5's [32, n_heads] relative-bias table
    assert Adafactor.factored_dims(torch.Size([4096, 127])) is None
    assert Adafactor.factored_dims(torch.Size([64])) is None
    assert Adafactor.factored_dims(torch.Size([32, 8]), min_dim_size_to_factor=1) == (0, 1)

    ours, hf_rule, theirs = (_params([(32, 8)]) for _ in range(3))
    opt, opt_hf_rule = Adafactor(ours, lr=0.01), Adafactor(hf_rule, lr=0.01, min_dim_size_to_factor=1)
    ref = _hf_adafactor(theirs, lr=0.01, beta1=None)
    for step in range(3):
        for params, optimizer in ((ours, opt), (hf_rule, opt_hf_rule), (theirs, ref)):
            _set_grads(params, step)
            optimizer.step()
    assert opt.state[ours[0]]["exp_avg_sq"].shape == (32, 8)
    assert not torch.allclose(ours[0].data, theirs[0].data, rtol=1e-4, atol=0)  # HF factors it; MTF does not
    torch.testing.assert_close(hf_rule[0].data, theirs[0].data, rtol=1e-5, atol=1e-7)


def test_adafactor_bfloat16_params_follow_float32():
    full, half = _params([(256, 128)]), _params([(256, 128)])
    half[0].data = half[0].data.bfloat16()
    for params in (full, half):
        _set_grads(params, 0)
        Adafactor(params, lr=0.01).step()
    assert half[0].dtype == torch.bfloat16
    torch.testing.assert_close(half[0].data.float(), full[0].data, rtol=1e-2, atol=1e-3)


@pytest.mark.parametrize("name,options", [("adafactor", {}), ("adafactor", {"beta1": 0.9}),
                                          ("adamw_scale", {"weight_decay": 0.1}), ("adamw", {})])
def test_resume_is_bitwise_exact(name, options):
    shapes = [(256, 128), (32, 8), (64,)]
    total, split = 6, 3
    straight = _params(shapes)
    opt = build_optimizer(name, straight, lr=0.01, **options)
    for step in range(total):
        _set_grads(straight, step)
        opt.step()

    first = _params(shapes)
    opt = build_optimizer(name, first, lr=0.01, **options)
    for step in range(split):
        _set_grads(first, step)
        opt.step()
    buffer = io.BytesIO()
    torch.save({"params": [p.detach().clone() for p in first], "optimizer": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    resumed = [torch.nn.Parameter(t) for t in saved["params"]]
    opt = build_optimizer(name, resumed, lr=0.01, **options)
    opt.load_state_dict(saved["optimizer"])
    for step in range(split, total):
        _set_grads(resumed, step)
        opt.step()
    for a, b in zip(straight, resumed):
        assert torch.equal(a.data, b.data)


def test_adamw_scale_is_adamw_with_rms_scaled_lr():
    ours, theirs = _params([(64, 32)]), _params([(64, 32)])
    opt = AdamWScale(ours, lr=0.02, eps=0.0)
    ref = torch.optim.AdamW(theirs, lr=0.02, eps=0.0, weight_decay=0.0)
    for step in range(5):
        _set_grads(ours, step)
        _set_grads(theirs, step)
        # With eps=0, scaling the step by max(1e-3, RMS(p)) equals AdamW with that factor in its lr.
        ref.param_groups[0]["lr"] = 0.02 * max(1e-3, theirs[0].data.square().mean().sqrt().item())
        opt.step()
        ref.step()
        torch.testing.assert_close(ours[0].data, theirs[0].data, rtol=1e-5, atol=1e-7)


def test_adamw_scale_weight_decay_and_floor():
    p = torch.nn.Parameter(torch.ones(8))
    p.grad = torch.zeros(8)
    AdamWScale([p], lr=0.5, weight_decay=0.1).step()  # zero gradient: only the decoupled decay acts
    torch.testing.assert_close(p.data, torch.full((8,), 0.95))
    q = torch.nn.Parameter(torch.zeros(4))
    q.grad = torch.tensor([1.0, -2.0, 3.0, -4.0])
    AdamWScale([q], lr=0.5, eps=0.0).step()  # first Adam step is sign(g); RMS 0 floored at 1e-3
    torch.testing.assert_close(q.data, -0.5e-3 * q.grad.sign())


def test_build_optimizer_names_and_errors():
    p = [torch.nn.Parameter(torch.zeros(3))]
    assert isinstance(build_optimizer("adafactor", p, lr=1.0), Adafactor)
    assert isinstance(build_optimizer("adamw_scale", p, lr=1e-2), AdamWScale)
    adamw = build_optimizer("adamw", p, lr=1e-3, weight_decay=0.05)
    assert isinstance(adamw, torch.optim.AdamW) and adamw.param_groups[0]["weight_decay"] == 0.05
    with pytest.raises(ValueError, match="valid names: adafactor, adamw, adamw_scale"):
        build_optimizer("sgd", p, lr=1.0)
    with pytest.raises(ValueError, match="beta1 must be in"):
        build_optimizer("adafactor", p, lr=1.0, beta1=1.0)
    with pytest.raises(ValueError, match="decay_rate must be <= 0"):
        build_optimizer("adafactor", p, lr=1.0, decay_rate=0.8)
    with pytest.raises(ValueError, match="lr must be >= 0"):
        build_optimizer("adamw_scale", p, lr=-1.0)
