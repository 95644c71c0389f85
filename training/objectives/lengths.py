"""Length rules: how many raw tokens make a segment for given row lengths, and how long its (inputs, targets) are.

A rule's ``segment_length(objective, inputs_length, targets_length)`` and ``output_lengths(objective, raw_length)``
read the objective's parameters (``name``, ``noise_density``, ...). The objectives whose targets can be as long as
their inputs require ``targets_length >= inputs_length``, and the data index packs by the worst case that
``output_lengths`` reports, so their segments are the longest whose worst case fits the row. T5 instead cut
``inputs_length - 1`` tokens and truncated the rare over-long targets (its ``iid_15_d_d``/``iid_15_u_u`` configs
used 104/192 targets for 512 inputs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .noise import check_noise_density, noise_counts

if TYPE_CHECKING:
    from .denoise import Denoise


def check_row_lengths(inputs_length: int, targets_length: int) -> None:
    """Row lengths must be positive."""
    if inputs_length < 1 or targets_length < 1:
        raise ValueError(f"inputs_length and targets_length must be >= 1, got {inputs_length} and {targets_length}")


def check_raw_length(raw_length: int) -> None:
    """A segment has at least one token."""
    if raw_length < 1:
        raise ValueError(f"raw_length must be >= 1, got {raw_length}")


def random_spans_length_plan(inputs_length: int, noise_density: float = 0.15,
                             mean_noise_span_length: float = 3.0) -> tuple[int, int]:
    """T5's ``random_spans_helper`` with one sentinel per span: ``(tokens_length, targets_length)``.

    ``tokens_length`` is the most raw tokens whose encoded inputs (non-noise tokens, one sentinel per span, EOS)
    fit ``inputs_length``; ``targets_length`` is the encoded targets length (noise tokens, one sentinel per span,
    EOS) for that many tokens. 512 -> (568, 114). As upstream, the plan uses the unclamped counts, and for
    ``noise_density == 0.5`` it trims one token when the targets would exceed the inputs.
    """
    check_noise_density(noise_density, mean_noise_span_length)
    if noise_density >= 1.0:
        raise ValueError(f"noise_density must be < 1 for a length plan, got {noise_density}")
    if inputs_length < 1:
        raise ValueError(f"inputs_length must be >= 1, got {inputs_length}")

    def encoded(tokens_length: int) -> tuple[int, int]:
        noise = round(tokens_length * noise_density)
        spans = round(noise / mean_noise_span_length)
        return tokens_length - noise + spans + 1, noise + spans + 1

    tokens_length = inputs_length - 1
    while encoded(tokens_length + 1)[0] <= inputs_length:
        tokens_length += 1
    targets_length = encoded(tokens_length)[1]
    if noise_density == 0.5 and targets_length > inputs_length:
        tokens_length -= 1
        targets_length -= 1
    return tokens_length, targets_length


class TooFewSentinelsError(ValueError):
    """Segments that need more noise spans than there are sentinel ids."""


@dataclass(frozen=True)
class RandomSpansLengths:
    """Span corruption: T5's plan, one sentinel per span in the inputs and in the targets."""

    def segment_length(self, objective: Denoise, inputs_length: int, targets_length: int) -> int:
        """T5's plan: raw tokens per segment for ``inputs_length`` (568 for 512). Raises if the plan's targets do
        not fit ``targets_length`` (as T5) or its segments need more spans than ``max_sentinels``."""
        check_row_lengths(inputs_length, targets_length)
        tokens_length, needed = random_spans_length_plan(inputs_length, objective.noise_density,
                                                         objective.mean_noise_span_length)
        if targets_length < needed:
            raise ValueError(f"span corruption with inputs_length {inputs_length} gives {needed}-token targets, "
                             f"more than targets_length {targets_length}: set targets_length >= {needed}")
        if tokens_length < 1:
            raise ValueError(f"inputs_length {inputs_length} is too short for span corruption")
        spans = noise_counts(tokens_length, objective.noise_density, objective.mean_noise_span_length)[1]
        if spans > objective.max_sentinels:
            raise TooFewSentinelsError(f"{tokens_length}-token segments need {spans} noise spans but there are only "
                             f"{objective.max_sentinels} sentinels: lower inputs_length or raise max_sentinels")
        for n in range(1, tokens_length + 1):  # every length, as the last segment of a document may have any
            lengths = self.output_lengths(objective, n)
            if lengths[0] > inputs_length or lengths[1] > targets_length:
                raise ValueError(f"a {n}-token segment gives (inputs, targets) = {lengths}, over the row lengths "
                                 f"({inputs_length}, {targets_length})")
            noise, spans = noise_counts(n, objective.noise_density, objective.mean_noise_span_length)
            if spans > min(noise, max(n, 2) - noise):  # random_spans_noise_mask could not draw its mask
                raise ValueError(f"a {n}-token segment needs {spans} noise spans and as many others, but has {noise} "
                                 f"noise and {max(n, 2) - noise} other tokens: noise_density {objective.noise_density} "
                                 f"with mean_noise_span_length {objective.mean_noise_span_length} cannot mask it; "
                                 "lower noise_density or raise mean_noise_span_length")
        return tokens_length

    def output_lengths(self, objective: Denoise, raw_length: int) -> tuple[int, int]:
        """Exact (inputs, targets) lengths with EOS: ``(L - noise + spans + 1, noise + spans + 1)``; ``(2, 2)``
        for ``L = 1`` (the one token stays in the inputs; the targets are one sentinel)."""
        check_raw_length(raw_length)
        if raw_length == 1:
            return 2, 2
        noise, spans = noise_counts(raw_length, objective.noise_density, objective.mean_noise_span_length)
        return raw_length - noise + spans + 1, noise + spans + 1


def _require_full_targets(name: str, inputs_length: int, targets_length: int) -> None:
    if targets_length < inputs_length:
        raise ValueError(f"{name} can produce targets as long as its inputs: targets_length ({targets_length}) must "
                         f"be >= inputs_length ({inputs_length})")


@dataclass(frozen=True)
class PrefixLengths:
    """Prefix LM: a prefix of 1 to L-1 tokens and the rest, each plus EOS. Segments are ``min(inputs_length,
    targets_length)`` long, so the longest prefix or rest exactly fills a row (T5 cut ``inputs_length - 1``)."""

    def segment_length(self, objective: Denoise, inputs_length: int, targets_length: int) -> int:
        """``inputs_length`` raw tokens; requires ``targets_length >= inputs_length >= 2``."""
        check_row_lengths(inputs_length, targets_length)
        if inputs_length < 2:
            raise ValueError(f"inputs_length {inputs_length} is too short for {objective.name}: need >= 2")
        _require_full_targets(objective.name, inputs_length, targets_length)
        return inputs_length

    def output_lengths(self, objective: Denoise, raw_length: int) -> tuple[int, int]:
        """Upper bounds ``(L, L)``; ``(1, 2)`` for ``L = 1``. The two always sum to ``L + 2``."""
        check_raw_length(raw_length)
        return (1, 2) if raw_length == 1 else (raw_length, raw_length)


@dataclass(frozen=True)
class WholeSegmentLengths:
    """Inputs of at most ``L + 1`` and targets of at most ``L + targets_extra`` tokens, EOS included."""

    targets_extra: int = 1

    def segment_length(self, objective: Denoise, inputs_length: int, targets_length: int) -> int:
        """The longest segment whose bounds fit the row: ``inputs_length - 1`` (T5), or less when
        ``targets_length`` is short of ``inputs_length - 1 + targets_extra``; requires
        ``targets_length >= inputs_length``."""
        check_row_lengths(inputs_length, targets_length)
        _require_full_targets(objective.name, inputs_length, targets_length)
        length = min(inputs_length - 1, targets_length - self.targets_extra)
        if length < 1:
            raise ValueError(f"inputs_length {inputs_length} is too short for {objective.name}: need >= "
                             f"{inputs_length - length + 1}")
        return length

    def output_lengths(self, objective: Denoise, raw_length: int) -> tuple[int, int]:
        """``(L + 1, L + targets_extra)``: exact for the objectives that keep every token on both sides; bounds that
        sum to ``L + 2`` for ``iid_drop_tokens``; no noise / all noise for ``iid_replace_spans`` (extra 2)."""
        check_raw_length(raw_length)
        return raw_length + 1, raw_length + self.targets_extra


@dataclass(frozen=True)
class NextTokenLengths:
    """Causal language modelling: the segment is all targets, no inputs, no EOS added."""

    def segment_length(self, objective: Denoise, inputs_length: int, targets_length: int) -> int:
        """``targets_length`` raw tokens (one more than the model's positions); ``inputs_length`` must be 0."""
        if inputs_length != 0 or targets_length < 2:
            raise ValueError(f"{objective.name} needs inputs_length 0 and targets_length >= 2 (block_size + 1), got "
                             f"{inputs_length} and {targets_length}")
        return targets_length

    def output_lengths(self, objective: Denoise, raw_length: int) -> tuple[int, int]:
        return 0, raw_length
