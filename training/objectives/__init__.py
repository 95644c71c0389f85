"""Pre-training objectives: a segment of raw token ids -> (inputs, targets).

Each objective is a composition of T5's noise functions (``noise``): a mask, an inputs and a targets function, EOS,
and a length rule (``lengths``), bound to its parameters in a frozen, picklable ``denoise.Denoise``;
``make_objective(name, **params)`` builds one by name (``registry.OBJECTIVES``). Every random decision uses the
``np.random.Generator`` passed in (build it with ``training.seeding.example_rng(seed, epoch, segment_id)``), so an
example depends only on its ids. Rows: ``training.data.encdec_rows`` and ``training.data.decoder_rows``.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .registry import OBJECTIVES, make_objective


@runtime_checkable
class Objective(Protocol):
    """What the data index and row builders need from an objective."""

    @property
    def name(self) -> str: ...

    def segment_length(self, inputs_length: int, targets_length: int) -> int:
        """Raw tokens per segment for rows of ``inputs_length``/``targets_length``; ``ValueError`` if none fit."""
        ...

    def output_lengths(self, raw_length: int) -> tuple[int, int]:
        """(inputs, targets) lengths, EOS included, of a ``raw_length``-token segment: exact, or an upper bound
        for objectives with random lengths."""
        ...

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)`` int32 arrays, each ending with exactly one EOS (``lm``: no inputs, no EOS added)."""
        ...


__all__ = ["OBJECTIVES", "Objective", "make_objective"]
