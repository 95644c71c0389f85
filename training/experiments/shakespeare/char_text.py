"""Character-level language modelling on one text file (nanoGPT's shakespeare_char): windows of ``block_size``.

The text is split into its first ``1 - validation_fraction`` and the rest (nanoGPT's 90/10). Training item ``i`` is
the window at offset ``i`` (every offset, so a permutation of the items is nanoGPT's random offsets drawn without
replacement); validation items are disjoint windows covering the whole split, so validation loss is measured on
all of it rather than on a few random batches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...data.char_vocabulary import CharVocabulary


class CharTextError(ValueError):
    """Text too short for the windows asked for, or bad split settings."""


@dataclass(frozen=True)
class CharWindows:
    """Next-character windows over ``ids``: item ``i`` reads ``ids[i*stride : i*stride + block_size + 1]``."""

    ids: np.ndarray
    block_size: int
    stride: int

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.stride < 1:
            raise CharTextError(f"block_size and stride must be >= 1, got {self.block_size}, {self.stride}")
        if len(self.ids) < self.block_size + 1:
            raise CharTextError(f"{len(self.ids)} characters cannot fill one window of {self.block_size} + 1")

    def __len__(self) -> int:
        return (len(self.ids) - self.block_size - 1) // self.stride + 1

    def __call__(self, item: int, epoch: int) -> dict[str, np.ndarray]:
        """``input_tokens``/``target_tokens`` (the window shifted by one) and ``loss_weights``; ``epoch`` unused."""
        if not 0 <= item < len(self):
            raise IndexError(f"window {item} out of range [0, {len(self)})")
        window = self.ids[item * self.stride:item * self.stride + self.block_size + 1].astype(np.int64)
        return {"input_tokens": window[:-1], "target_tokens": window[1:],
                "loss_weights": np.ones(self.block_size, dtype=np.int32)}


def char_text_splits(text: str, block_size: int, validation_fraction: float = 0.1
                     ) -> tuple[CharWindows, CharWindows | None, CharVocabulary]:
    """Training windows (every offset), validation windows (disjoint; None for fraction 0) and the vocabulary of
    the whole text."""
    if not 0.0 <= validation_fraction < 1.0:
        raise CharTextError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    vocab = CharVocabulary.from_text(text)
    ids = vocab.encode(text).astype(np.uint16 if vocab.vocab_size <= 1 << 16 else np.int64)
    cut = int(len(ids) * (1.0 - validation_fraction))
    validation = CharWindows(ids[cut:], block_size, stride=block_size) if validation_fraction else None
    return CharWindows(ids[:cut], block_size, stride=1), validation, vocab
