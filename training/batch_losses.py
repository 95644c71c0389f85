"""How batches are scored: the :class:`~c4prep.training.trainer.BatchLoss` of each model family and stage."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .losses import token_cross_entropy

ENCDEC_MODEL_INPUTS = ("encoder_input_tokens", "decoder_input_tokens", "encoder_segment_ids",
                       "decoder_segment_ids", "encoder_positions", "decoder_positions")


def token_eval_sums(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """Summable validation statistics of token predictions: loss sum, target count, correct argmax count."""
    loss_sum, count = token_cross_entropy(logits, targets, weights)
    correct = ((logits.argmax(-1) == targets) * weights).sum()
    return {"loss_sum": loss_sum, "targets": count, "token_accuracy": correct}


@dataclass(frozen=True)
class EncDecLoss:
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
        return token_eval_sums(logits, batch["decoder_target_tokens"], batch["decoder_loss_weights"])


def _decoder_inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Model inputs of a decoder row; packing and prefix features only when a row uses them (else the fused
    causal attention path runs). Off the CPU they go whenever the batch has them: looking would make the host wait
    for the device at every micro-batch, and they give the same attention."""
    tokens = batch["input_tokens"]
    on_cpu = tokens.device.type == "cpu"
    inputs = {"input_tokens": tokens}
    if "segment_ids" in batch and (not on_cpu or bool((batch["segment_ids"] > 1).any())):
        inputs.update(segment_ids=batch["segment_ids"], positions=batch["positions"])
    if "prefix_mask" in batch and (not on_cpu or bool(batch["prefix_mask"].any())):
        inputs["prefix_mask"] = batch["prefix_mask"]
    return inputs


@dataclass(frozen=True)
class DecoderLoss:
    """Decoder-only rows (``data.decoder_rows``): next-token cross-entropy where ``loss_weights`` is set."""

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return token_cross_entropy(model(**_decoder_inputs(batch)), batch["target_tokens"], batch["loss_weights"])

    def num_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["loss_weights"].sum()

    def num_tokens(self, batch: dict[str, torch.Tensor]) -> int:
        return batch["input_tokens"].numel()

    def eval_sums(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return token_eval_sums(model(**_decoder_inputs(batch)), batch["target_tokens"], batch["loss_weights"])
