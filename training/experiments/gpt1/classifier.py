"""GPT-1 discriminative fine-tuning head (section 3.3): a linear layer on the final hidden state of the extract token.

A batch holds ``S`` sequences per example (``input_tokens`` [B, S, T], ``extract_positions`` [B, S]):

- ``reduce="sum"``: the S extract states are summed, then ``Linear(d, num_classes)`` (classification and entailment
  with S=1; similarity with both orders, S=2);
- ``reduce="choices"``: ``Linear(d, 1)`` scores each sequence and the S scores are the logits (multiple choice).

The backbone's LM logits are returned too, for the auxiliary LM loss.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ...models.gpt import GPT


class GPTClassifier(nn.Module):
    def __init__(self, backbone: GPT, num_classes: int, reduce: str = "sum", dropout: float = 0.1) -> None:
        super().__init__()
        if reduce not in ("sum", "choices"):
            raise ValueError(f"reduce must be sum or choices, got {reduce!r}")
        if reduce == "sum" and num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        self.backbone, self.reduce = backbone, reduce
        self.drop = nn.Dropout(dropout)
        self.classifier = nn.Linear(backbone.config.n_embd, num_classes if reduce == "sum" else 1)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, input_tokens: Tensor, extract_positions: Tensor) -> tuple[Tensor, Tensor]:
        """(class logits [B, C] (C = S for choices), LM logits [B, S, T, V])."""
        B, S, T = input_tokens.shape
        hidden = self.backbone.hidden_states(input_tokens.reshape(B * S, T))
        lm_logits = self.backbone.head(hidden).view(B, S, T, -1)
        extract = hidden[torch.arange(B * S, device=hidden.device), extract_positions.reshape(-1)].view(B, S, -1)
        if self.reduce == "sum":
            return self.classifier(self.drop(extract.sum(dim=1))), lm_logits
        return self.classifier(self.drop(extract)).squeeze(-1), lm_logits
