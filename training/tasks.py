"""How batches are scored: the :class:`~c4prep.training.trainer.Task` of each model family."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .losses import token_cross_entropy

ENCDEC_MODEL_INPUTS = ("encoder_input_tokens", "decoder_input_tokens", "encoder_segment_ids",
                       "decoder_segment_ids", "encoder_positions", "decoder_positions")


@dataclass(frozen=True)
class EncDecTask:
    """Encoder-decoder text-to-text batches (seqio feature names): token cross-entropy on the targets."""

    z_loss: float = 0.0

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model(**{k: batch[k] for k in ENCDEC_MODEL_INPUTS if k in batch})
        return token_cross_entropy(logits, batch["decoder_target_tokens"], batch["decoder_loss_weights"],
                                   z_loss=self.z_loss)

    def num_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["decoder_loss_weights"].sum()

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return batch["encoder_input_tokens"].numel() + batch["decoder_target_tokens"].numel()

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        logits = model(**{k: batch[k] for k in ENCDEC_MODEL_INPUTS if k in batch})
        weights = batch["decoder_loss_weights"]
        loss_sum, targets = token_cross_entropy(logits, batch["decoder_target_tokens"], weights)
        correct = ((logits.argmax(-1) == batch["decoder_target_tokens"]) * weights).sum()
        return {"loss_sum": loss_sum, "targets": targets, "token_accuracy": correct}
