"""Pre-training objectives: a segment of raw token ids -> (inputs, targets), and their packing into rows.

An objective is a frozen, picklable dataclass following :class:`Objective`; ``make_objective(name, **params)``
builds one by name. Every random decision uses the ``np.random.Generator`` passed in (build it with
``training.seeding.example_rng(seed, epoch, segment_id)``), so an example depends only on its ids.
Rows: ``training.objectives.packing`` (``EncDecRowBuilder`` for the data loader).
"""
from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from .denoising import BertStyle, Deshuffling, IidDropTokens, IidReplaceSpans, MassStyle, PrefixLM
from .registry import OBJECTIVES, make_objective
from .span_corruption import SpanCorruption


@runtime_checkable
class Objective(Protocol):
    """What the data index and row builder need from an objective."""

    name: ClassVar[str]

    def segment_length(self, inputs_length: int, targets_length: int) -> int:
        """Raw tokens per segment for rows of ``inputs_length``/``targets_length``; ``ValueError`` if none fit."""
        ...

    def output_lengths(self, raw_length: int) -> tuple[int, int]:
        """(inputs, targets) lengths, EOS included, of a ``raw_length``-token segment: exact, or an upper bound
        for objectives with random lengths."""
        ...

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)`` int32 arrays, each ending with exactly one EOS."""
        ...


__all__ = ["OBJECTIVES", "BertStyle", "Deshuffling", "IidDropTokens", "IidReplaceSpans", "MassStyle", "Objective",
           "PrefixLM", "SpanCorruption", "make_objective"]
