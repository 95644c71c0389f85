"""Evaluation of a text VAE on a whole set (§2.1-2.4): importance-weighted log-likelihood and perplexity, -ELBO, KL,
mutual information I_q(x; z) and active units, plus the sign-flipped "AdaVAE-code" estimate (report-only).

Conventions: log-likelihoods in nats per sentence; q(z|x) = N(mean, diag exp(logvar)); p(z) = N(0, I).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ...seeding import example_rng
from .gaussian import LOG_2PI, kl_per_dimension, log_normal_diag, log_standard_normal, sample_from_noise

# Entries of the [rows, N] float64 block of log q(z_i|x_n) that mutual_information builds at once (32 MiB).
MI_BLOCK_ELEMENTS = 1 << 22


def _check_samples(log_px_given_z: Tensor, z: Tensor, mean: Tensor, logvar: Tensor) -> None:
    n, k = log_px_given_z.shape
    if z.shape != (n, k, mean.shape[-1]) or mean.shape != logvar.shape or mean.shape[0] != n:
        raise ValueError(f"expected log p(x|z) [N, K], z [N, K, n_z], mean/logvar [N, n_z]; got "
                         f"{tuple(log_px_given_z.shape)}, {tuple(z.shape)}, {tuple(mean.shape)}, {tuple(logvar.shape)}")


def _log_mean_exp(log_terms: Tensor) -> Tensor:
    return torch.logsumexp(log_terms, dim=-1) - math.log(log_terms.shape[-1])


def iw_log_likelihood(log_px_given_z: Tensor, z: Tensor, mean: Tensor, logvar: Tensor) -> Tensor:
    """Importance-weighted log p(x) ``[N]``: ``logsumexp_k[log p(x|z_k) + log p(z_k) - log q(z_k|x)] - log K``,
    with z_k ~ q(z|x). A lower bound in expectation that equals the ELBO for K = 1 and tends to log p(x) as K grows."""
    _check_samples(log_px_given_z, z, mean, logvar)
    log_q = log_normal_diag(z, mean.unsqueeze(1), logvar.unsqueeze(1))
    return _log_mean_exp(log_px_given_z + log_standard_normal(z) - log_q)


def adavae_code_log_likelihood(log_px_given_z: Tensor, z: Tensor, mean: Tensor, logvar: Tensor) -> Tensor:
    """NOT a likelihood estimate: the released AdaVAE code's ``logsumexp_k[log p(x|z_k) - log p(z_k) +
    log q(z_k|x)] - log K`` (prior and posterior signs flipped, §2.4). Its K = 1 expectation is
    ``E_q log p(x|z) + KL``, i.e. 2 KL above the ELBO, and it does not converge to log p(x). Report-only: it exists
    to show that AdaVAE's published PTB perplexity is an artefact; never use it for selection or headline numbers."""
    _check_samples(log_px_given_z, z, mean, logvar)
    log_q = log_normal_diag(z, mean.unsqueeze(1), logvar.unsqueeze(1))
    return _log_mean_exp(log_px_given_z - log_standard_normal(z) + log_q)


def mutual_information(mean: Tensor, logvar: Tensor, z: Tensor) -> float:
    """I_q(x; z) as Optimus's ``calc_mi``: ``(1/N) sum_i E_q(z|x_i)[log q(z|x_i)] - (1/N) sum_i log q_agg(z_i)``.

    ``z`` ``[N, n_z]`` holds one sample z_i ~ q(z|x_i) per example. The first term is analytic,
    ``-(n_z/2) log 2pi - (1/2) sum_d (1 + logvar_d)``; the aggregate posterior ``q_agg(z) = (1/N) sum_n q(z|x_n)``
    runs over ALL N examples. The N x N matrix of log q(z_i|x_n) is built in float64 row blocks from the expanded
    square (two matrix products): about a second for N = 3,761, n_z = 32 on 2 CPU cores. Lies in about [0, log N];
    it can be slightly negative from sampling noise."""
    if not mean.shape == logvar.shape == z.shape or mean.dim() != 2:
        raise ValueError(f"expected mean, logvar and z of one shape [N, n_z], got "
                         f"{tuple(mean.shape)}, {tuple(logvar.shape)}, {tuple(z.shape)}")
    n, n_z = mean.shape
    mean, logvar, z = mean.double(), logvar.double(), z.double()
    neg_entropy = (-0.5 * n_z * LOG_2PI - 0.5 * (1.0 + logvar).sum(-1)).mean()
    precision = torch.exp(-logvar)
    # -2 log q(z|x_n) = z^2 . precision_n - 2 z . (mean_n * precision_n) + [mean_n^2 . precision_n + sum logvar_n + c]
    offset = (mean.pow(2) * precision + logvar).sum(-1) + n_z * LOG_2PI
    rows = max(1, MI_BLOCK_ELEMENTS // n)
    log_aggregate = torch.cat([
        torch.logsumexp(-0.5 * (block.pow(2) @ precision.T - 2.0 * block @ (mean * precision).T + offset), dim=-1)
        for block in z.split(rows)
    ]) - math.log(n)
    return float(neg_entropy - log_aggregate.mean())


def active_units(means: Tensor, threshold: float = 0.01) -> tuple[int, Tensor]:
    """(number of active units, per-dimension variances): dimension d is active when the unbiased (N - 1) variance
    of the posterior means over the set, Var_x(mean_d(x)), is >= ``threshold``."""
    if means.dim() != 2 or means.shape[0] < 2:
        raise ValueError(f"active units need posterior means [N >= 2, n_z], got {tuple(means.shape)}")
    variances = means.double().var(dim=0, correction=1)
    return int((variances >= threshold).sum()), variances


def perplexity(total_log_likelihood: float, total_count: int) -> float:
    """``exp(-total_log_likelihood / total_count)``: per token or per word, by what ``total_count`` counts."""
    if total_count <= 0:
        raise ValueError(f"perplexity needs a positive token/word count, got {total_count}")
    return math.exp(-total_log_likelihood / total_count)


class VAEEvaluationSums:
    """Per-sentence evaluation values, fed batch by batch; ``result()`` turns the whole set into the metric dict.

    Everything is kept per sentence (float64, CPU) and reduced once at the end in sentence-index order, so the
    numbers depend neither on where the batch boundaries fall nor on the order of the batches; MI's aggregate
    posterior and AU's variance need every sentence anyway.
    """

    _FIELDS = ("iw_ll", "adavae_code_ll", "reconstruction", "kl", "mean", "logvar", "z_one", "n_tokens", "n_words",
               "sentence_ids")

    def __init__(self) -> None:
        self._parts: dict[str, list[Tensor]] = {name: [] for name in self._FIELDS}

    def add(self, iw_ll: Tensor, adavae_code_ll: Tensor, reconstruction: Tensor, kl: Tensor, mean: Tensor,
            logvar: Tensor, z_one: Tensor, n_tokens: Tensor, n_words: Tensor, sentence_ids: Tensor) -> None:
        """One batch of B sentences: IW and AdaVAE-code log-likelihoods ``[B]``, reconstruction = mean over the K
        samples of log p(x|z_k) ``[B]``, KL ``[B]``, posterior mean/logvar and one sample z ``[B, n_z]``, predicted
        target tokens incl. EOS ``[B]``, words ``[B]`` and the sentences' indices in the set ``[B]``."""
        values = dict(iw_ll=iw_ll, adavae_code_ll=adavae_code_ll, reconstruction=reconstruction, kl=kl, mean=mean,
                      logvar=logvar, z_one=z_one, n_tokens=n_tokens, n_words=n_words, sentence_ids=sentence_ids)
        size = iw_ll.shape[0]
        for name, value in values.items():
            if value.shape[0] != size:
                raise ValueError(f"{name} has {value.shape[0]} rows, iw_ll has {size}; pass one row per sentence")
            self._parts[name].append(value.detach().to("cpu", torch.float64))

    def result(self) -> dict[str, Any]:
        """nll (-mean IW log-likelihood, nats/sentence), ppl_token (per predicted token incl. EOS), ppl_word (per
        word + 1 for EOS), neg_elbo (= kl + reconstruction), kl, reconstruction (-mean log p(x|z), nats/sentence),
        mi, au, adavae_code_ppl_word (report-only, see ``adavae_code_log_likelihood``), n_sentences, n_tokens,
        n_words."""
        if not self._parts["iw_ll"]:
            raise ValueError("no sentences were evaluated; the evaluation set is empty")
        order = torch.cat(self._parts["sentence_ids"]).argsort(stable=True)
        v = {name: torch.cat(parts)[order] for name, parts in self._parts.items()}
        n_sentences = v["iw_ll"].shape[0]
        n_tokens = int(v["n_tokens"].sum())
        n_words = int(v["n_words"].sum())
        total_ll = float(v["iw_ll"].sum())
        kl = float(v["kl"].mean())
        reconstruction = -float(v["reconstruction"].mean())
        return {
            "nll": -total_ll / n_sentences,
            "ppl_token": perplexity(total_ll, n_tokens),
            "ppl_word": perplexity(total_ll, n_words + n_sentences),
            "neg_elbo": kl + reconstruction,
            "kl": kl,
            "reconstruction": reconstruction,
            "mi": mutual_information(v["mean"], v["logvar"], v["z_one"]),
            "au": active_units(v["mean"])[0],
            "adavae_code_ppl_word": perplexity(float(v["adavae_code_ll"].sum()), n_words + n_sentences),
            "n_sentences": n_sentences,
            "n_tokens": n_tokens,
            "n_words": n_words,
        }


def sentence_noise(seed: int, sentence_index: int, n_samples: int, n_z: int) -> Tensor:
    """The standard-normal noise ``[n_samples, n_z]`` (float64) for one sentence: keyed by (seed, index) alone."""
    return torch.from_numpy(example_rng(seed, sentence_index).standard_normal((n_samples, n_z)))


@torch.no_grad()
def evaluate_vae(model: Any, batches: Any, n_samples: int, chunk: int, generator: torch.Generator) -> dict[str, Any]:
    """Evaluate ``model`` on every sentence of ``batches`` in their order (§2.1-2.3); ``VAEEvaluationSums.result()``.

    ``model.encode(inputs, input_mask) -> (mean, logvar)`` and ``model.sentence_log_likelihood(inputs, targets,
    target_mask, z) -> [B]`` (summed log p(target tokens | z)); each batch has ``inputs``, ``targets``,
    ``target_mask``, ``input_mask``, ``n_words`` and ``sentence_ids`` (each sentence's index in the set). For each
    sentence, K = ``n_samples`` samples z_k ~ q(z|x) are scored ``chunk`` at a time, with the batch rows repeated
    per sample so one decoder call scores B * chunk rows. The first sample also serves MI. The noise of sentence i
    depends only on (one seed drawn from ``generator``, i), and the sums are taken in index order, so the numbers do
    not change with the batch size, the order of the batches, the chunk size or the device.
    """
    if n_samples < 1 or chunk < 1:
        raise ValueError(f"need n_samples >= 1 and chunk >= 1, got {n_samples} and {chunk}")
    if getattr(model, "training", False):
        raise ValueError("evaluate_vae needs model.eval(): dropout would make the estimates random")
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator, device=generator.device))
    sums = VAEEvaluationSums()
    for batch in batches:
        if batch.sentence_ids is None:
            raise ValueError("evaluate_vae needs each batch's sentence_ids: they key the sentences' noise")
        mean, logvar = model.encode(batch.inputs, batch.input_mask)
        n_z = mean.shape[1]
        eps = torch.stack([sentence_noise(seed, int(index), n_samples, n_z) for index in batch.sentence_ids])
        z = sample_from_noise(mean.unsqueeze(1), logvar.unsqueeze(1), eps)  # [B, K, n_z]
        log_px_given_z = torch.cat([
            _score_chunk(model, batch, z[:, start:start + chunk]) for start in range(0, n_samples, chunk)
        ], dim=1)
        log_px_given_z, z64, mean64, logvar64 = (t.double() for t in (log_px_given_z, z, mean, logvar))
        sums.add(iw_ll=iw_log_likelihood(log_px_given_z, z64, mean64, logvar64),
                 adavae_code_ll=adavae_code_log_likelihood(log_px_given_z, z64, mean64, logvar64),
                 reconstruction=log_px_given_z.mean(1), kl=kl_per_dimension(mean64, logvar64).sum(-1),
                 mean=mean, logvar=logvar, z_one=z[:, 0], n_tokens=batch.target_mask.sum(-1),
                 n_words=batch.n_words, sentence_ids=batch.sentence_ids)
    return sums.result()


def _score_chunk(model: Any, batch: Any, z: Tensor) -> Tensor:
    """log p(x|z) ``[B, c]`` for the c samples per sentence in ``z`` ``[B, c, n_z]``, in one decoder call."""
    size, count, n_z = z.shape
    # Row b * count + j is sentence b with its sample j.
    rows = [t.repeat_interleave(count, dim=0) for t in (batch.inputs, batch.targets, batch.target_mask)]
    return model.sentence_log_likelihood(*rows, z.reshape(size * count, n_z)).reshape(size, count)
