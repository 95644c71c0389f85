"""The AdaVAE stage's VAE math: Gaussian helpers, free bits, the cyclical beta, the loss and the evaluation estimators.

The estimators are checked on a linear-Gaussian model, where log p(x) and the exact posterior are known in closed form:
p(z) = N(0, I), p(x|z) = N(Wz + b, s^2 I), so p(x) = N(b, WW^T + s^2 I). W has orthogonal columns (norms c_j), which
makes the exact posterior diagonal: var_j = 1 / (1 + c_j^2 / s^2), mean = var * W^T (x - b) / s^2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch.distributions import MultivariateNormal, Normal, kl_divergence

from c4prep.training.experiments.adavae import estimators
from c4prep.training.experiments.adavae.estimators import (
    VAEEvaluationSums,
    active_units,
    adavae_code_log_likelihood,
    evaluate_vae,
    iw_log_likelihood,
    mutual_information,
    perplexity,
)
from c4prep.training.experiments.adavae.gaussian import kl_per_dimension, log_normal_diag, log_standard_normal, reparameterize
from c4prep.training.experiments.adavae.vae_objective import FREE_BITS_MODES, cyclic_beta, free_bits_kl, vae_loss

F64 = torch.float64


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class LinearGaussian:
    """p(z) = N(0, I), p(x|z) = N(Wz + b, s^2 I) with orthogonal columns of W (column norms ``scales``)."""

    def __init__(self, n_x: int = 6, scales: tuple[float, ...] = (2.0, 1.0, 0.5), noise_std: float = 0.7,
                 seed: int = 0) -> None:
        g = _generator(seed)
        basis, _ = torch.linalg.qr(torch.randn(n_x, len(scales), generator=g, dtype=F64))
        self.scales = torch.tensor(scales, dtype=F64)
        self.weight = basis * self.scales
        self.bias = torch.randn(n_x, generator=g, dtype=F64)
        self.noise_std = noise_std

    def sample_x(self, n: int, seed: int) -> torch.Tensor:
        g = _generator(seed)
        z = torch.randn(n, self.weight.shape[1], generator=g, dtype=F64)
        return z @ self.weight.T + self.bias + self.noise_std * torch.randn(n, self.weight.shape[0], generator=g,
                                                                              dtype=F64)

    def log_px_given_z(self, x: torch.Tensor, z: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """log p(x|z), x ``[..., n_x]`` against z ``[..., n_z]`` (broadcast), over the dims in ``mask``."""
        log_density = Normal(z @ self.weight.T + self.bias, self.noise_std).log_prob(x)
        return (log_density if mask is None else log_density * mask).sum(-1)

    def log_marginal(self, x: torch.Tensor) -> torch.Tensor:
        covariance = self.weight @ self.weight.T + self.noise_std ** 2 * torch.eye(self.weight.shape[0], dtype=F64)
        return MultivariateNormal(self.bias, covariance).log_prob(x)

    def exact_posterior(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        variance = 1.0 / (1.0 + self.scales ** 2 / self.noise_std ** 2)
        mean = variance * ((x - self.bias) @ self.weight) / self.noise_std ** 2
        return mean, variance.log().expand_as(mean)

    def elbo(self, x: torch.Tensor, mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
        """Closed-form E_q[log p(x|z)] - KL(q || p)."""
        s2, n_x = self.noise_std ** 2, x.shape[-1]
        residual = (x - self.bias - mean @ self.weight.T).pow(2).sum(-1)
        spread = (self.scales ** 2 * logvar.exp()).sum(-1)  # E_q |W (z - mean)|^2
        expected_rec = -0.5 * n_x * math.log(2 * math.pi * s2) - (residual + spread) / (2 * s2)
        return expected_rec - kl_per_dimension(mean, logvar).sum(-1)

    def samples(self, mean: torch.Tensor, logvar: torch.Tensor, k: int, seed: int) -> torch.Tensor:
        return reparameterize(mean, logvar, n_samples=k, generator=_generator(seed))


# ------------------------------------------------------------------------------------------------ Gaussian helpers
def test_reparameterize_shapes_statistics_and_determinism():
    mean = torch.tensor([[0.0, 2.0, -1.0], [1.0, 0.0, 3.0]], dtype=F64)
    logvar = torch.tensor([[0.0, -2.0, 1.0], [0.5, -0.5, 0.0]], dtype=F64)
    assert reparameterize(mean, logvar).shape == (2, 3)
    z = reparameterize(mean, logvar, n_samples=40_000, generator=_generator(1))
    assert z.shape == (2, 40_000, 3)
    std = torch.exp(0.5 * logvar)
    assert torch.all((z.mean(1) - mean).abs() < 5 * std / math.sqrt(40_000))  # std, not logvar, is the scale
    assert torch.allclose(z.var(1), logvar.exp(), rtol=0.03)
    assert torch.equal(z, reparameterize(mean, logvar, n_samples=40_000, generator=_generator(1)))
    assert not torch.equal(z, reparameterize(mean, logvar, n_samples=40_000, generator=_generator(2)))
    with pytest.raises(ValueError, match="n_samples"):
        reparameterize(mean, logvar, n_samples=0)


def test_kl_and_log_densities_match_torch_distributions():
    g = _generator(3)
    mean, logvar = torch.randn(4, 5, generator=g, dtype=F64), torch.randn(4, 5, generator=g, dtype=F64)
    posterior, prior = Normal(mean, torch.exp(0.5 * logvar)), Normal(0.0, 1.0)
    assert torch.allclose(kl_per_dimension(mean, logvar), kl_divergence(posterior, Normal(0.0, torch.ones_like(mean))))
    z = torch.randn(4, 7, 5, generator=g, dtype=F64)
    expected_q = Normal(mean[:, None], torch.exp(0.5 * logvar[:, None])).log_prob(z).sum(-1)
    assert torch.allclose(log_normal_diag(z, mean[:, None], logvar[:, None]), expected_q)
    assert torch.allclose(log_standard_normal(z), prior.log_prob(z).sum(-1))


# ------------------------------------------------------------------------------------------------ training objective
def test_free_bits_values_per_mode():
    kl = torch.tensor([[0.1, 0.9, 0.0], [0.3, 0.5, 0.2]])  # batch means per dim: 0.2, 0.7, 0.1; total 1.0
    assert free_bits_kl(kl, 0.5, "total").item() == pytest.approx(1.5)  # max(1.0, 0.5 * 3)
    assert free_bits_kl(kl, 0.3, "total").item() == pytest.approx(1.0)  # max(1.0, 0.9)
    assert free_bits_kl(kl, 0.15, "dimension_mask").item() == pytest.approx(0.9)  # 0.2 + 0.7; 0.1 is dropped
    assert free_bits_kl(kl, 0.15, "dimension_hinge").item() == pytest.approx(0.2 + 0.7 + 0.15)
    assert free_bits_kl(kl, 5.0, "none").item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="total, dimension_mask, dimension_hinge, none"):
        free_bits_kl(kl, 0.5, "fb1")
    with pytest.raises(ValueError, match=">= 0"):
        free_bits_kl(kl, -0.1, "total")


@pytest.mark.parametrize("mode", FREE_BITS_MODES)
def test_free_bits_gradients(mode):
    mean = torch.tensor([[0.3, 1.5], [0.2, 1.0]], requires_grad=True)  # dim 0: KL ~0.03, dim 1: ~0.8
    free_bits_kl(kl_per_dimension(mean, torch.zeros_like(mean)), 0.5, mode).backward()
    grad_dim0, grad_dim1 = mean.grad[:, 0].abs().sum().item(), mean.grad[:, 1].abs().sum().item()
    if mode == "total":  # batch KL ~0.83 is below 0.5 * 2 = 1: constant term, no gradient at all
        assert grad_dim0 == 0 and grad_dim1 == 0
    elif mode in ("dimension_mask", "dimension_hinge"):  # only the dimension above the rate is pushed
        assert grad_dim0 == 0 and grad_dim1 > 0
    else:
        assert grad_dim0 > 0 and grad_dim1 > 0
    above = torch.tensor([[2.0, 1.5]], requires_grad=True)
    free_bits_kl(kl_per_dimension(above, torch.zeros_like(above)), 0.5, "total").backward()
    assert torch.allclose(above.grad, above.detach())  # d/dmu of mu^2 / 2 once the threshold is passed


def _frange_cycle_zero_linear_table(n_iter, stop, n_cycle, ratio_increase, ratio_zero):
    """Oracle: the reference table filled as the Optimus/AdaVAE utility does (per cycle, a running ramp value)."""
    table = [stop] * n_iter
    period = n_iter / n_cycle
    increment = stop / (period * ratio_increase)
    for cycle in range(n_cycle):
        value, offset = 0.0, 0
        while value <= stop and int(offset + cycle * period) < n_iter:
            if offset < period * ratio_zero:
                table[int(offset + cycle * period)] = 0.0
            else:
                table[int(offset + cycle * period)] = value
                value += increment
            offset += 1
    return table


def test_cyclic_beta_exact_values_four_cycles():
    betas = [cyclic_beta(step, 100) for step in range(100)]
    assert betas[:8] == [0.0] * 8  # offsets 0-6 are the zero phase (< 6.25); offset 7 starts the ramp at 0
    assert betas[8] == pytest.approx(0.16) and betas[13] == pytest.approx(0.96)
    assert betas[14:25] == [1.0] * 11
    for start in (25, 50, 75):  # every period restarts at 0 and repeats the first
        assert betas[start:start + 25] == pytest.approx(betas[:25])
    assert betas[99] == 1.0
    # AdaVAE: N = 22,000 iterations, a table of N + 1 entries, periods of 5,500.25 steps
    assert [cyclic_beta(s, 22_001) for s in (0, 1375, 5499, 5500, 11_000, 16_500, 22_000)] == [0, 0, 1, 0, 0, 0, 1]
    assert cyclic_beta(1377, 22_001) == pytest.approx(1 / 1375.0625)
    assert cyclic_beta(30, 100, beta_max=0.5) == pytest.approx(0.0) and cyclic_beta(40, 100, beta_max=0.5) == 0.5


@pytest.mark.parametrize("n_iter, n_cycle, ratio_increase, ratio_zero, stop", [
    (100, 4, 0.25, 0.25, 1.0), (22_001, 4, 0.25, 0.25, 1.0), (1_003, 4, 0.25, 0.25, 1.0), (997, 3, 0.3, 0.2, 0.5),
    (500, 1, 0.25, 0.5, 1.0), (50, 7, 0.5, 0.5, 1.0), (10, 4, 0.25, 0.25, 1.0),
])
def test_cyclic_beta_reproduces_reference_table(n_iter, n_cycle, ratio_increase, ratio_zero, stop):
    table = _frange_cycle_zero_linear_table(n_iter, stop, n_cycle, ratio_increase, ratio_zero)
    ours = [cyclic_beta(s, n_iter, n_cycle, ratio_zero, ratio_increase, stop) for s in range(n_iter)]
    assert ours == pytest.approx(table, abs=1e-12)


def test_cyclic_beta_rejects_bad_settings():
    for kwargs, message in [(dict(step=100, total_steps=100), "outside"), (dict(step=-1, total_steps=100), "outside"),
                            (dict(step=0, total_steps=100, ratio_increase=0.0), "ratio_increase > 0"),
                            (dict(step=0, total_steps=100, ratio_zero=0.8), "sum <= 1"),
                            (dict(step=0, total_steps=0), "total_steps >= 1")]:
        with pytest.raises(ValueError, match=message):
            cyclic_beta(**kwargs)


def test_vae_loss_hand_computed_both_reconstructions():
    token_nll = torch.tensor([[1.0, 2.0, float("nan")], [3.0, float("inf"), 7.0]], requires_grad=True)
    target_mask = torch.tensor([[True, True, False], [True, False, False]])
    mean, logvar = torch.tensor([[1.0, 0.0], [0.0, 0.0]]), torch.zeros(2, 2)  # KL per sentence: 0.5, 0; mean 0.25
    sentence = vae_loss(token_nll, target_mask, mean, logvar, beta=0.5, rate=0.1)  # threshold 0.2 < 0.25
    assert sentence.reconstruction.item() == pytest.approx(3.0)  # (1 + 2 + 3) / 2 sentences
    assert sentence.kl.item() == pytest.approx(0.25) and sentence.kl_objective.item() == pytest.approx(0.25)
    assert sentence.loss.item() == pytest.approx(3.125) and sentence.beta == 0.5
    sentence.loss.backward()
    assert torch.equal(token_nll.grad, torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.0, 0.0]]))  # pads: zero, not nan
    token = vae_loss(token_nll, target_mask, mean, logvar, beta=0.5, rate=0.5, reconstruction="token")  # KL < 1.0
    assert token.reconstruction.item() == pytest.approx(2.0)  # (1 + 2 + 3) / 3 tokens
    assert token.kl.item() == pytest.approx(0.25) and token.kl_objective.item() == pytest.approx(1.0)
    assert token.loss.item() == pytest.approx(2.5)
    with pytest.raises(ValueError, match="sentence, token"):
        vae_loss(token_nll, target_mask, mean, logvar, beta=1.0, rate=0.5, reconstruction="word")
    with pytest.raises(ValueError, match="total, dimension_mask"):
        vae_loss(token_nll, target_mask, mean, logvar, beta=1.0, rate=0.5, mode="fb2")


# ------------------------------------------------------------------------------------------------ IW estimator
def test_iw_estimate_is_exact_with_the_true_posterior():
    model = LinearGaussian()
    x = model.sample_x(20, seed=4)
    mean, logvar = model.exact_posterior(x)
    for k in (1, 5, 50):
        z = model.samples(mean, logvar, k, seed=k)
        estimate = iw_log_likelihood(model.log_px_given_z(x[:, None], z), z, mean, logvar)
        assert torch.allclose(estimate, model.log_marginal(x), atol=1e-10, rtol=0)


def test_iw_estimate_with_a_mismatched_posterior_bounds_and_converges():
    model, repeats = LinearGaussian(), 100
    x = model.sample_x(6, seed=5)
    exact_mean, exact_logvar = model.exact_posterior(x)
    mean, logvar = exact_mean + 0.4, exact_logvar + 0.8  # shifted and too wide
    log_px, elbo = model.log_marginal(x), model.elbo(x, mean, logvar)
    assert torch.all(elbo < log_px - 0.1)  # a visibly loose bound
    gaps = {}
    for k in (1, 10, 100, 1000):
        z = model.samples(mean.repeat(repeats, 1), logvar.repeat(repeats, 1), k, seed=k)
        x_rep = x.repeat(repeats, 1)
        draws = iw_log_likelihood(model.log_px_given_z(x_rep[:, None], z), z, mean.repeat(repeats, 1),
                                  logvar.repeat(repeats, 1)).view(repeats, -1)  # [repeat, x]
        estimate = draws.mean(0)
        gaps[k] = (log_px - estimate).mean().item()
        if k == 1:  # K = 1 is the ELBO in expectation: within 4 standard errors of it
            assert torch.all((estimate - elbo).abs() < 4 * draws.std(0) / math.sqrt(repeats))
        else:  # NLL <= -ELBO
            assert torch.all(estimate > elbo)
    assert gaps[1] > gaps[10] > gaps[100] > gaps[1000] > 0
    assert gaps[1000] < 0.02 < 0.5 < gaps[1]


def test_adavae_code_variant_does_not_estimate_the_likelihood():
    model = LinearGaussian()
    x = model.sample_x(100, seed=6)
    mean, logvar = model.exact_posterior(x)
    log_px, kl = model.log_marginal(x), kl_per_dimension(mean, logvar).sum(-1)
    z1 = model.samples(mean, logvar, 2000, seed=7)  # 2000 draws of the K = 1 estimate, per x
    k1 = adavae_code_log_likelihood(model.log_px_given_z(x[:, None, None], z1[:, :, None]).view(100 * 2000, 1),
                                    z1.reshape(-1, 1, 3), mean.repeat_interleave(2000, 0),
                                    logvar.repeat_interleave(2000, 0)).view(100, 2000)
    # Exact posterior: each term is log p(x) + 2 (log q - log p), so E[K = 1] = log p(x) + 2 KL (4 standard errors)
    assert torch.all((k1.mean(1) - log_px - 2 * kl).abs() < 4 * k1.std(1) / math.sqrt(2000))
    z = model.samples(mean, logvar, 1000, seed=8)
    flipped = adavae_code_log_likelihood(model.log_px_given_z(x[:, None], z), z, mean, logvar)
    assert torch.all(flipped - log_px > kl)  # more K only makes it larger: it never approaches log p(x)
    assert (flipped - log_px).mean() > 2 * kl.mean()


# ------------------------------------------------------------------------------------------------ MI, AU, PPL
def test_mutual_information_on_constructed_posteriors(monkeypatch):
    g = _generator(9)
    n, n_z = 1000, 2
    same_mean, same_logvar = torch.zeros(n, n_z).add(0.3), torch.full((n, n_z), -0.5)
    z = reparameterize(same_mean, same_logvar, generator=g)
    assert abs(mutual_information(same_mean, same_logvar, z)) < 0.1  # q(z|x) ignores x: no information
    grid = torch.stack(torch.meshgrid(torch.arange(40.0), torch.arange(25.0), indexing="ij"), -1).reshape(n, n_z)
    apart_mean, narrow = (grid - grid.mean(0)).double(), torch.full((n, n_z), -12.0, dtype=F64)  # 400 std apart
    z = reparameterize(apart_mean, narrow, generator=g)
    full = mutual_information(apart_mean, narrow, z)
    # z identifies x among the N, so q_agg(z_i) = q(z_i|x_i) / N: MI = log N + (E_q log q - log q(z_i|x_i)) averaged
    noise = (-Normal(apart_mean, torch.exp(0.5 * narrow)).entropy() - Normal(apart_mean, torch.exp(0.5 * narrow))
             .log_prob(z)).sum(-1).mean().item()
    assert full == pytest.approx(math.log(n) + noise, abs=1e-7) and full == pytest.approx(math.log(n), abs=0.1)
    monkeypatch.setattr(estimators, "MI_BLOCK_ELEMENTS", 3 * n)  # blocks of 3 rows: same value
    assert mutual_information(apart_mean, narrow, z) == pytest.approx(full, abs=1e-9)
    small_mean, small_logvar = torch.randn(5, 2, generator=g, dtype=F64), torch.randn(5, 2, generator=g, dtype=F64)
    z = reparameterize(small_mean, small_logvar, generator=g)
    posterior = Normal(small_mean, torch.exp(0.5 * small_logvar))
    log_q_all = posterior.log_prob(z[:, None]).sum(-1)  # [i, n] = log q(z_i | x_n)
    brute = -posterior.entropy().sum(-1).mean() - (torch.logsumexp(log_q_all, 1) - math.log(5)).mean()
    assert mutual_information(small_mean, small_logvar, z) == pytest.approx(brute.item(), abs=1e-12)


def test_active_units_threshold_on_unbiased_variance():
    g = _generator(10)
    noise = torch.randn(500, 4, generator=g, dtype=F64)
    noise = (noise - noise.mean(0)) / noise.std(0)  # unit unbiased variance per column
    means = noise * torch.tensor([1.0, 0.2, 0.05, 0.0], dtype=F64)  # variances 1, 0.04, 0.0025, 0
    count, variances = active_units(means)
    assert count == 2
    assert torch.allclose(variances, torch.tensor([1.0, 0.04, 0.0025, 0.0], dtype=F64))
    assert active_units(means, threshold=float(variances[2]))[0] == 3  # >= counts the boundary
    pair = torch.tensor([[0.0], [0.2]])
    assert active_units(pair)[1].item() == pytest.approx(0.02)  # (N - 1) denominator: 0.02, not 0.01
    with pytest.raises(ValueError, match="N >= 2"):
        active_units(pair[:1])


def test_perplexity():
    assert perplexity(-10.0, 5) == pytest.approx(math.e ** 2)
    with pytest.raises(ValueError, match="positive"):
        perplexity(-10.0, 0)


# ------------------------------------------------------------------------------------------------ evaluate_vae
@dataclass
class FakeBatch:
    inputs: torch.Tensor
    targets: torch.Tensor
    target_mask: torch.Tensor
    input_mask: torch.Tensor
    n_words: torch.Tensor
    sentence_ids: torch.Tensor


class FakeLinearGaussianVAE:
    """The evaluation interface over the linear-Gaussian model: a 'sentence' is x, its 'tokens' are x's coordinates."""

    training = False

    def __init__(self, model: LinearGaussian, posterior_shift: float = 0.0) -> None:
        self.model, self.shift = model, posterior_shift

    def encode(self, inputs, input_mask):
        mean, logvar = self.model.exact_posterior(inputs)
        return mean + self.shift, logvar + self.shift

    def sentence_log_likelihood(self, inputs, targets, target_mask, z):
        return self.model.log_px_given_z(targets, z, target_mask)


def _batches(x: torch.Tensor, mask: torch.Tensor, n_words: torch.Tensor, size: int) -> list[FakeBatch]:
    return [FakeBatch(x[i:i + size], x[i:i + size], mask[i:i + size], mask[i:i + size], n_words[i:i + size],
                      torch.arange(i, min(i + size, x.shape[0])))
            for i in range(0, x.shape[0], size)]


def test_evaluate_vae_values_on_the_exact_model():
    model = LinearGaussian()
    x = model.sample_x(40, seed=11)
    mask = torch.ones_like(x, dtype=torch.bool)
    n_words = torch.arange(40) % 4 + 3
    result = evaluate_vae(FakeLinearGaussianVAE(model), _batches(x, mask, n_words, 16), n_samples=64, chunk=10,
                          generator=_generator(0))
    log_px = model.log_marginal(x)
    mean, logvar = model.exact_posterior(x)
    kl = kl_per_dimension(mean, logvar).sum(-1).mean().item()
    assert result["n_sentences"] == 40 and result["n_tokens"] == 40 * 6 and result["n_words"] == int(n_words.sum())
    assert result["nll"] == pytest.approx(-log_px.mean().item(), abs=1e-9)  # exact posterior: exact for any K
    assert result["ppl_token"] == pytest.approx(math.exp(-log_px.sum().item() / 240), rel=1e-9)
    assert result["ppl_word"] == pytest.approx(math.exp(-log_px.sum().item() / (int(n_words.sum()) + 40)), rel=1e-9)
    assert result["kl"] == pytest.approx(kl, rel=1e-12)
    assert result["neg_elbo"] == pytest.approx(result["kl"] + result["reconstruction"])
    assert result["neg_elbo"] == pytest.approx(result["nll"], abs=0.15)  # tight bound, up to Monte-Carlo noise
    assert result["au"] == active_units(mean)[0] == 3
    assert 0 < result["mi"] < math.log(40)
    assert result["adavae_code_ppl_word"] < result["ppl_word"] / math.exp(kl * 40 / (int(n_words.sum()) + 40))


def test_evaluate_vae_is_deterministic_and_independent_of_batching():
    model = LinearGaussian()
    x = model.sample_x(23, seed=12)
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[::3, 4:] = False  # shorter 'sentences': fewer scored tokens
    n_words = torch.full((23,), 5)
    vae = FakeLinearGaussianVAE(model, posterior_shift=0.3)  # a posterior that is not exact: the noise matters

    def run(size: int, chunk: int, seed: int) -> dict:
        batches = _batches(x, mask, n_words, size)
        return evaluate_vae(vae, batches, n_samples=12, chunk=chunk, generator=_generator(seed))

    reference = run(23, 12, seed=0)
    assert reference == run(23, 12, seed=0)
    assert reference["nll"] != run(23, 12, seed=1)["nll"]
    assert reference["n_tokens"] == int(mask.sum())
    assert reference["ppl_token"] == pytest.approx(math.exp(reference["nll"] * 23 / int(mask.sum())))
    for size, chunk in ((5, 5), (1, 12), (7, 1)):
        other = run(size, chunk, seed=0)
        assert other.keys() == reference.keys()
        for key, value in reference.items():
            assert other[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key
    # batches in another order (as length-sorted evaluation makes them): the very same numbers
    shuffled = evaluate_vae(vae, _batches(x, mask, n_words, 5)[::-1], n_samples=12, chunk=5, generator=_generator(0))
    assert shuffled == run(5, 5, seed=0)


def test_evaluate_vae_needs_sentence_ids():
    model = LinearGaussian()
    x = model.sample_x(3, seed=13)
    batch = _batches(x, torch.ones_like(x, dtype=torch.bool), torch.ones(3), 3)[0]
    batch.sentence_ids = None
    with pytest.raises(ValueError, match="sentence_ids"):
        evaluate_vae(FakeLinearGaussianVAE(model), [batch], n_samples=2, chunk=2, generator=_generator(0))


def test_evaluate_vae_refuses_a_model_in_training_mode():
    vae = FakeLinearGaussianVAE(LinearGaussian())
    vae.training = True
    x = torch.zeros(2, 6, dtype=F64)
    batches = _batches(x, torch.ones_like(x, dtype=torch.bool), torch.ones(2), 2)
    with pytest.raises(ValueError, match="model.eval"):
        evaluate_vae(vae, batches, n_samples=2, chunk=2, generator=_generator(0))


def test_evaluation_sums_reject_mismatched_rows():
    sums = VAEEvaluationSums()
    one = torch.zeros(3)
    with pytest.raises(ValueError, match="one row per sentence"):
        sums.add(one, one, one, one, torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(2, 2), one, one, one)
