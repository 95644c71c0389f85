"""The trainer's :class:`~c4prep.training.trainer.BatchLoss` for AdaVAE, and the per-step schedule of beta and phases.

Batches are decoder rows of whole sentences (``input_tokens`` = BOS w_1..w_n, ``target_tokens`` = w_1..w_n EOS,
``loss_weights`` marking those n + 1 positions; ``data.sentences.SentenceRows``). The trainer divides the summed
loss by ``num_targets``, here the number of sentences, so a step's loss is the per-sentence mean.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor, nn

from .gaussian import kl_per_dimension
from .vae_objective import cyclic_beta, vae_loss


def sentence_view(batch: dict[str, Tensor]) -> SimpleNamespace:
    """The real sentences of a batch of rows (evaluation padding rows dropped), cut to the longest one:
    ``inputs``, ``targets``, ``target_mask``, ``input_mask`` (the same n + 1 positions), ``n_words`` (the rows'
    whitespace word counts, which per-word PPL divides by whatever the tokenizer) and ``sentence_ids`` (the rows'
    ``item`` indices, None when the batch has none)."""
    mask = batch["loss_weights"].bool()
    real = mask.any(-1)
    if "row_mask" in batch:
        real &= batch["row_mask"].bool()
    mask = mask[real]
    width = max(int(mask.sum(-1).max()), 1) if mask.shape[0] else 1
    mask = mask[:, :width]
    return SimpleNamespace(inputs=batch["input_tokens"][real, :width], targets=batch["target_tokens"][real, :width],
                           target_mask=mask, input_mask=mask, n_words=batch["n_words"][real],
                           sentence_ids=batch["item"][real] if "item" in batch else None)


def sentence_length(row: dict[str, np.ndarray]) -> int:
    """A sentence row's real positions (n + 1): what :func:`sentence_view` keeps of it. Batching rows in this order
    keeps the cut batches nearly free of padding (PTB in file order: 2.2 positions per real one)."""
    return int(row["loss_weights"].sum())


@dataclass
class VAELoss:
    """reconstruction + beta * free-bits KL (``objective.vae_loss``); ``beta`` is set by :class:`VAESchedule`."""

    rate: float = 0.5
    free_bits: str = "total"
    reconstruction: str = "sentence"
    beta: float = 1.0
    step_metrics: dict[str, float] = field(default_factory=dict)  # of the latest micro-batch, logged with train

    def loss(self, model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        view = sentence_view(batch)
        token_nll, mean, logvar = model(view.inputs, view.input_mask, view.targets)
        terms = vae_loss(token_nll, view.target_mask, mean, logvar, self.beta, self.rate, self.free_bits,
                         self.reconstruction)
        sentences = torch.tensor(view.inputs.shape[0], device=mean.device)
        self.step_metrics = {"beta": self.beta, "kl": terms.kl.item(), "reconstruction": terms.reconstruction.item()}
        entropy = getattr(model, "module", model).pooling_entropy()  # the trainer may pass a DDP wrapper
        if entropy is not None:
            self.step_metrics["attention_entropy"] = entropy
        return terms.loss * sentences, sentences

    def num_targets(self, batch: dict[str, Tensor]) -> Tensor:
        return batch["loss_weights"].bool().any(-1).sum()

    def num_tokens(self, batch: dict[str, Tensor]) -> int:
        return int(batch["loss_weights"].sum())

    def eval_sums(self, model: nn.Module, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One-sample -ELBO, KL and reconstruction, summed over sentences (``targets`` = sentences)."""
        view = sentence_view(batch)
        if not view.inputs.shape[0]:
            zero = torch.zeros((), device=view.inputs.device)
            return {"loss_sum": zero, "targets": zero, "kl": zero, "reconstruction": zero}
        token_nll, mean, logvar = model(view.inputs, view.input_mask, view.targets)
        reconstruction = token_nll.masked_fill(~view.target_mask, 0.0).sum(-1)
        kl = kl_per_dimension(mean.float(), logvar.float()).sum(-1)
        return {"loss_sum": (reconstruction + kl).sum(), "targets": torch.tensor(len(kl), device=kl.device),
                "kl": kl.sum(), "reconstruction": reconstruction.sum()}


@dataclass
class VAESchedule:
    """Before each optimizer step: beta from the cyclic annealing schedule, and the training phase (decoder side
    joins at ``phase_two_step``; 0 = from the start)."""

    vae_loss: VAELoss
    model: nn.Module
    total_steps: int
    phase_two_step: int
    cycles: int = 4
    ratio_zero: float = 0.25
    ratio_increase: float = 0.25
    beta_max: float = 1.0

    def __call__(self, step: int) -> None:
        self.vae_loss.beta = cyclic_beta(step, self.total_steps, self.cycles, self.ratio_zero, self.ratio_increase,
                                     self.beta_max)
        phase = 2 if step >= self.phase_two_step else 1
        if phase != self.model.phase:
            self.model.set_phase(phase)
