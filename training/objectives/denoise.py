"""An objective as T5's ``denoise``: a noise mask, an inputs function and a targets function, then EOS, with a
length rule; :class:`Denoise` binds such a :class:`Composition` to its parameters (frozen and picklable: rows are
built in DataLoader worker processes)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .noise import check_tokens, check_vocabulary, with_eos

MaskStep = Callable[["Denoise", int, np.random.Generator], np.ndarray]
"""``(objective, length, rng) -> noise mask``."""
TokensStep = Callable[["Denoise", np.ndarray, np.ndarray, np.random.Generator], np.ndarray]
"""``(objective, tokens, noise_mask, rng) -> ids``."""


class LengthRule(Protocol):
    """The ``segment_length``/``output_lengths`` of the ``Objective`` protocol, given the objective."""

    def segment_length(self, objective: Denoise, inputs_length: int, targets_length: int) -> int: ...

    def output_lengths(self, objective: Denoise, raw_length: int) -> tuple[int, int]: ...


@dataclass(frozen=True)
class Composition:
    """How objective ``name`` turns a segment into an example: ``mask`` draws the noise mask, then ``inputs`` and
    ``targets`` apply it (in that order, on the same ``rng``); with ``append_eos`` each side then ends with one
    ``eos_id``. ``parameters`` are the names ``make_objective`` accepts; ``min_sentinels`` the fewest sentinels the
    steps need."""

    name: str
    mask: MaskStep
    inputs: TokensStep
    targets: TokensStep
    lengths: LengthRule
    parameters: tuple[str, ...]
    min_sentinels: int = 0
    append_eos: bool = True


@dataclass(frozen=True)
class Denoise:
    """An objective (``training.objectives.Objective``): ``composition`` with its parameters.

    The top ``max_sentinels`` ids are sentinels and never occur in a segment. A parameter the composition does not
    take keeps the neutral default here (None; no sentinels); ``make_objective`` fills in the others' defaults.
    """

    composition: Composition
    vocab_size: int
    eos_id: int | None = None
    noise_density: float | None = None
    mean_noise_span_length: float | None = None
    mask_rate: float | None = None
    random_rate: float | None = None
    first_regular_id: int | None = None
    max_sentinels: int = 0

    def __post_init__(self) -> None:
        if self.composition.append_eos:
            check_vocabulary(self.vocab_size, self.eos_id, self.max_sentinels, self.composition.min_sentinels)
        if self.noise_density is not None and not 0.0 < self.noise_density < 1.0:
            raise ValueError(f"noise_density must be in (0, 1), got {self.noise_density}")
        if self.mean_noise_span_length is not None and not self.mean_noise_span_length >= 1.0:
            raise ValueError(f"mean_noise_span_length must be >= 1, got {self.mean_noise_span_length}")
        if self.mask_rate is not None and (self.mask_rate < 0 or self.random_rate < 0
                                           or self.mask_rate + self.random_rate > 1):
            raise ValueError(f"mask_rate and random_rate must be >= 0 with a sum <= 1, got {self.mask_rate} and "
                             f"{self.random_rate}")
        if self.first_regular_id is not None and not 0 <= self.first_regular_id < self.vocab_size - self.max_sentinels:
            raise ValueError(f"first_regular_id must be in [0, {self.vocab_size - self.max_sentinels}), got "
                             f"{self.first_regular_id}")

    @property
    def name(self) -> str:
        return self.composition.name

    def segment_length(self, inputs_length: int, targets_length: int) -> int:
        return self.composition.lengths.segment_length(self, inputs_length, targets_length)

    def output_lengths(self, raw_length: int) -> tuple[int, int]:
        return self.composition.lengths.output_lengths(self, raw_length)

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        steps = self.composition
        tokens = check_tokens(tokens, self.vocab_size, self.max_sentinels)
        noise_mask = steps.mask(self, len(tokens), rng)
        inputs = steps.inputs(self, tokens, noise_mask, rng)
        targets = steps.targets(self, tokens, noise_mask, rng)
        if steps.append_eos:
            return with_eos(inputs, self.eos_id), with_eos(targets, self.eos_id)
        return inputs.astype(np.int32), targets.astype(np.int32)
