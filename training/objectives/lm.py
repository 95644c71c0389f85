"""Causal language modelling (GPT pre-training): a segment is all targets, there are no inputs.

With a decoder-only model the segment's ``n`` tokens give ``n - 1`` next-token predictions (see
``objectives.decoder_rows``); the token shards already end every document with EOS, so none is added.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .span_corruption import check_tokens


@dataclass(frozen=True)
class LanguageModeling:
    name: ClassVar[str] = "lm"

    vocab_size: int

    def segment_length(self, inputs_length: int, targets_length: int) -> int:
        """``targets_length`` raw tokens (one more than the model's positions); ``inputs_length`` must be 0."""
        if inputs_length != 0 or targets_length < 2:
            raise ValueError(f"{self.name} needs inputs_length 0 and targets_length >= 2 (block_size + 1), got "
                             f"{inputs_length} and {targets_length}")
        return targets_length

    def output_lengths(self, raw_length: int) -> tuple[int, int]:
        return 0, raw_length

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        tokens = check_tokens(tokens, self.vocab_size, max_sentinels=0)
        return np.zeros(0, dtype=np.int32), tokens.astype(np.int32)
