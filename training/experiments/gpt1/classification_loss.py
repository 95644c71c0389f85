"""GPT-1 fine-tuning loss (section 3.2), the :class:`~c4prep.training.trainer.BatchLoss` of ``GPTClassifier`` rows."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...losses import token_losses


@dataclass(frozen=True)
class ClassificationLoss:
    """GPT-1 fine-tuning (section 3.2): ``L3 = L2 + lm_weight * L1`` per example, i.e. the classifier's
    cross-entropy plus the auxiliary LM loss (the mean next-token loss over the example's transformed input).
    Rows come from ``input_transforms.FinetuneRows``; an optimizer step averages over examples."""

    lm_weight: float = 0.5

    def _example_losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        class_logits, lm_logits = model(batch["input_tokens"], batch["extract_positions"])
        classifier = torch.nn.functional.cross_entropy(class_logits.float(), batch["label"], reduction="none")
        if not self.lm_weight:
            return classifier, class_logits
        weights = batch["lm_weights"].float()
        lm_sums = (token_losses(lm_logits, batch["target_tokens"]) * weights).sum(dim=(1, 2))
        lm = lm_sums / weights.sum(dim=(1, 2)).clamp(min=torch.finfo(torch.float32).tiny)  # mean per example
        return classifier + self.lm_weight * lm, class_logits

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        losses, _ = self._example_losses(model, batch)
        weights = _row_weights(batch)
        return (losses * weights).sum(), weights.sum()

    def num_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return _row_weights(batch).sum()

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return batch["input_tokens"].numel()

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        losses, class_logits = self._example_losses(model, batch)
        weights = _row_weights(batch)
        correct = (class_logits.argmax(-1) == batch["label"]).float() * weights
        return {"loss_sum": (losses * weights).sum(), "targets": weights.sum(), "accuracy": correct.sum()}


def _row_weights(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """1 per real example (0 for the padding rows of evaluation batches)."""
    mask = batch.get("row_mask")
    return torch.ones(len(batch["label"]), device=batch["label"].device) if mask is None else mask.float()
