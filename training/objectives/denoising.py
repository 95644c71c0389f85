"""The other unsupervised objectives of the T5 paper (section 3.3, Tables 3-5), for comparison with span corruption.

Where the paper is vague each follows T5's preprocessors and gin files (``t5/models/gin/objectives``):

| name | T5 | inputs | targets |
|---|---|---|---|
| ``prefix_lm`` | ``prefix_lm`` | a prefix of uniform length in [1, L-1] | the rest |
| ``bert_style`` | ``iid_15_r10s90_f`` | 15% i.i.d. tokens: 80% mask, 10% random, 10% kept | the segment |
| ``mass_style`` | ``denoise.gin`` (``iid_15_m_f``) | 15% i.i.d. tokens -> the mask id | the segment |
| ``iid_replace_spans`` | ``iid_15_u_u`` | runs of 15% i.i.d. noise -> one sentinel each | sentinel + run, ... |
| ``iid_drop_tokens`` | ``iid_15_d_d`` | the segment without the 15% i.i.d. noise | the noise tokens |
| ``deshuffling`` | ``all_permute`` | the segment, uniformly permuted | the segment |

The mask id is ``vocab_size - 1`` (``<extra_id_0>``; T5's ``sentinel_id``). Every objective appends one EOS to
inputs and targets and checks that the segment holds only regular ids (below the ``max_sentinels`` sentinels).

Segment lengths: these objectives can emit targets as long as their inputs, and the data index packs by the
worst case that ``output_lengths`` reports, so ``segment_length`` is the longest segment whose worst case fits the
row and requires ``targets_length >= inputs_length``. T5 instead cut ``inputs_length - 1`` tokens and truncated the
rare over-long targets (its ``iid_15_d_d``/``iid_15_u_u`` configs used 104/192 targets for 512 inputs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .span_corruption import (check_row_lengths, check_tokens, check_vocabulary, drop_noise_tokens,
                              drop_nonnoise_tokens, iid_noise_mask, noise_span_to_unique_sentinel,
                              noise_token_to_sentinel, span_starts, with_eos)


def _check_density(noise_density: float) -> None:
    if not 0.0 < noise_density < 1.0:
        raise ValueError(f"noise_density must be in (0, 1), got {noise_density}")


def _check_raw_length(raw_length: int) -> None:
    if raw_length < 1:
        raise ValueError(f"raw_length must be >= 1, got {raw_length}")


def _full_target_segment_length(name: str, inputs_length: int, targets_length: int, slack: int) -> int:
    """``inputs_length - slack`` raw tokens, for objectives whose targets can be as long as their inputs."""
    check_row_lengths(inputs_length, targets_length)
    if targets_length < inputs_length:
        raise ValueError(f"{name} can produce targets as long as its inputs: targets_length ({targets_length}) must "
                         f"be >= inputs_length ({inputs_length})")
    length = inputs_length - slack
    if length < 1:
        raise ValueError(f"inputs_length {inputs_length} is too short for {name}: need >= {slack + 1}")
    return length


# ---------------------------------------------------------------------------------------------------------------------
# Pure helpers given a mask


def limit_noise_spans(noise_mask: np.ndarray, max_sentinels: int) -> np.ndarray:
    """``noise_mask`` with its last noise runs turned into non-noise so that :func:`noise_span_targets` needs at
    most ``max_sentinels`` sentinels (one per run, plus one if the mask ends with non-noise)."""
    noise_mask = np.asarray(noise_mask, dtype=bool)
    starts = np.flatnonzero(span_starts(noise_mask))
    ends_nonnoise = len(noise_mask) > 0 and not noise_mask[-1]
    if len(starts) + ends_nonnoise <= max_sentinels:
        return noise_mask
    limited = noise_mask.copy()
    limited[starts[max_sentinels - 1]:] = False  # keep max_sentinels - 1 runs; the trailing sentinel is the last
    return limited


def noise_span_targets(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Targets of "i.i.d. noise, replace spans" (paper Table 3): each noise run after the sentinel that replaced it
    in the inputs, plus one more sentinel if the segment ends with non-noise (Table 3's ``<Z>``).

    Equals T5's ``nonnoise_span_to_unique_sentinel`` whenever the mask starts with non-noise. When it starts with
    noise, T5 numbers the non-noise runs instead, so its target sentinel k follows noise run k rather than preceding
    it; here sentinel k always precedes run k, as the paper describes.
    """
    tokens, noise_mask = np.asarray(tokens), np.asarray(noise_mask, dtype=bool)
    if tokens.ndim != 1 or tokens.shape != noise_mask.shape:
        raise ValueError(f"tokens and noise_mask must be 1-D of the same length, got shapes {tokens.shape} and "
                         f"{noise_mask.shape}")
    starts = span_starts(noise_mask)
    count = int(starts.sum())
    ends_nonnoise = len(noise_mask) == 0 or not noise_mask[-1]
    out = np.empty(int(noise_mask.sum()) + count + ends_nonnoise, dtype=tokens.dtype)
    # Output slot of each noise token: its rank among noise tokens plus the sentinels up to and including its run.
    slots = np.arange(int(noise_mask.sum())) + np.cumsum(starts)[noise_mask]
    out[slots] = tokens[noise_mask]
    sentinel_slots = slots[starts[noise_mask]] - 1
    out[sentinel_slots] = vocab_size - 1 - np.arange(count)
    if ends_nonnoise:
        out[-1] = vocab_size - 1 - count
    return out


def bert_corrupt(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int, rng: np.random.Generator,
                 mask_rate: float = 0.8, random_rate: float = 0.1, first_regular_id: int = 3,
                 max_sentinels: int = 100) -> np.ndarray:
    """BERT's corruption of the noise tokens: ``mask_rate`` -> the mask id ``vocab_size - 1``, ``random_rate`` ->
    a uniform regular id in ``[first_regular_id, vocab_size - max_sentinels)``, the rest unchanged.

    Draws one uniform per token (the choice), then one random id per token (used only where chosen).
    """
    tokens, noise_mask = np.asarray(tokens), np.asarray(noise_mask, dtype=bool)
    choice = rng.random(len(tokens))
    random_ids = rng.integers(first_regular_id, vocab_size - max_sentinels, size=len(tokens))
    out = tokens.copy()
    masked = noise_mask & (choice < mask_rate)
    randomized = noise_mask & (choice >= mask_rate) & (choice < mask_rate + random_rate)
    out[masked] = vocab_size - 1
    out[randomized] = random_ids[randomized]
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Objectives


@dataclass(frozen=True)
class PrefixLM:
    """Prefix language modelling (T5 ``prefix_lm``): split the segment at a uniform point; the prefix (1 to L-1
    tokens) is the inputs, the rest the targets. A 1-token segment goes wholly to the targets (as T5).

    Draws one integer from ``rng``. Segments are ``min(inputs_length, targets_length)`` long here, so the longest
    prefix or rest plus EOS exactly fills a row (T5 cut ``inputs_length - 1``).
    """

    name: ClassVar[str] = "prefix_lm"

    vocab_size: int
    eos_id: int = 1
    max_sentinels: int = 100

    def __post_init__(self) -> None:
        check_vocabulary(self.vocab_size, self.eos_id, self.max_sentinels)

    def segment_length(self, inputs_length: int, targets_length: int) -> int:
        """``inputs_length`` raw tokens; requires ``targets_length >= inputs_length >= 2``."""
        check_row_lengths(inputs_length, targets_length)
        if inputs_length < 2:
            raise ValueError(f"inputs_length {inputs_length} is too short for {self.name}: need >= 2")
        return _full_target_segment_length(self.name, inputs_length, targets_length, slack=0)

    def output_lengths(self, raw_length: int) -> tuple[int, int]:
        """Upper bounds ``(L, L)``; ``(1, 2)`` for ``L = 1``. The two always sum to ``L + 2``."""
        _check_raw_length(raw_length)
        return (1, 2) if raw_length == 1 else (raw_length, raw_length)

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        tokens = check_tokens(tokens, self.vocab_size, self.max_sentinels)
        split = int(rng.integers(1, len(tokens))) if len(tokens) > 1 else 0
        return with_eos(tokens[:split], self.eos_id), with_eos(tokens[split:], self.eos_id)


class _WholeSegmentLengths:
    """Length plan of the objectives whose inputs and targets are each at most the whole segment plus EOS."""

    name: ClassVar[str]

    def segment_length(self, inputs_length: int, targets_length: int) -> int:
        """``inputs_length - 1`` raw tokens (T5); requires ``targets_length >= inputs_length``."""
        return _full_target_segment_length(self.name, inputs_length, targets_length, slack=1)

    def output_lengths(self, raw_length: int) -> tuple[int, int]:
        """``(L + 1, L + 1)``: exact, except for ``iid_drop_tokens``, where they are bounds that sum to ``L + 2``."""
        _check_raw_length(raw_length)
        return raw_length + 1, raw_length + 1


@dataclass(frozen=True)
class BertStyle(_WholeSegmentLengths):
    """BERT-style denoising (paper 3.3.1): ``noise_density`` i.i.d. tokens are corrupted (``mask_rate`` -> mask id
    ``vocab_size - 1``, ``random_rate`` -> random regular id, the rest kept); the targets are the whole segment.

    Defaults are BERT's 80/10/10; the paper's text and T5's ``iid_15_r10s90_f`` use 90/10 (``mask_rate=0.9``),
    and T5 drew its random ids from the whole vocabulary, sentinels included; here they are regular ids
    ``[first_regular_id, vocab_size - max_sentinels)``. Draws the mask (:func:`iid_noise_mask`) then
    :func:`bert_corrupt`.
    """

    name: ClassVar[str] = "bert_style"

    vocab_size: int
    eos_id: int = 1
    noise_density: float = 0.15
    mask_rate: float = 0.8
    random_rate: float = 0.1
    first_regular_id: int = 3
    max_sentinels: int = 100

    def __post_init__(self) -> None:
        check_vocabulary(self.vocab_size, self.eos_id, self.max_sentinels, min_sentinels=1)
        _check_density(self.noise_density)
        if self.mask_rate < 0 or self.random_rate < 0 or self.mask_rate + self.random_rate > 1:
            raise ValueError(f"mask_rate and random_rate must be >= 0 with a sum <= 1, got {self.mask_rate} and "
                             f"{self.random_rate}")
        if not 0 <= self.first_regular_id < self.vocab_size - self.max_sentinels:
            raise ValueError(f"first_regular_id must be in [0, {self.vocab_size - self.max_sentinels}), got "
                             f"{self.first_regular_id}")

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        tokens = check_tokens(tokens, self.vocab_size, self.max_sentinels)
        mask = iid_noise_mask(len(tokens), self.noise_density, rng)
        inputs = bert_corrupt(tokens, mask, self.vocab_size, rng, self.mask_rate, self.random_rate,
                              self.first_regular_id, self.max_sentinels)
        return with_eos(inputs, self.eos_id), with_eos(tokens, self.eos_id)


@dataclass(frozen=True)
class MassStyle(_WholeSegmentLengths):
    """MASS-style denoising (paper 3.3.2): ``noise_density`` i.i.d. tokens become the mask id ``vocab_size - 1``
    (no random swaps); the targets are the whole segment. Draws the mask (:func:`iid_noise_mask`) only."""

    name: ClassVar[str] = "mass_style"

    vocab_size: int
    eos_id: int = 1
    noise_density: float = 0.15
    max_sentinels: int = 100

    def __post_init__(self) -> None:
        check_vocabulary(self.vocab_size, self.eos_id, self.max_sentinels, min_sentinels=1)
        _check_density(self.noise_density)

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        tokens = check_tokens(tokens, self.vocab_size, self.max_sentinels)
        mask = iid_noise_mask(len(tokens), self.noise_density, rng)
        return with_eos(noise_token_to_sentinel(tokens, mask, self.vocab_size), self.eos_id), \
            with_eos(tokens, self.eos_id)


@dataclass(frozen=True)
class IidReplaceSpans:
    """"I.i.d. noise, replace spans" (the paper's pre-span baseline, T5 ``iid_denoising``): ``noise_density``
    i.i.d. tokens; each run of consecutive noise becomes one unique sentinel in the inputs; the targets are the
    runs, each after its sentinel, plus a final sentinel if the segment ends with non-noise (see
    :func:`noise_span_targets`).

    If a mask would need more than ``max_sentinels`` sentinels, its last runs stay in the inputs as ordinary tokens
    (:func:`limit_noise_spans`); T5 would use real ids as sentinels. Draws the mask (:func:`iid_noise_mask`) only.
    """

    name: ClassVar[str] = "iid_replace_spans"

    vocab_size: int
    eos_id: int = 1
    noise_density: float = 0.15
    max_sentinels: int = 100

    def __post_init__(self) -> None:
        check_vocabulary(self.vocab_size, self.eos_id, self.max_sentinels, min_sentinels=1)
        _check_density(self.noise_density)

    def segment_length(self, inputs_length: int, targets_length: int) -> int:
        """``inputs_length - 1`` raw tokens (T5), or ``inputs_length - 2`` when ``targets_length == inputs_length``
        (an all-noise segment gives ``L + 2`` targets); requires ``targets_length >= inputs_length``."""
        check_row_lengths(inputs_length, targets_length)
        slack = 1 if targets_length > inputs_length else 2
        return _full_target_segment_length(self.name, inputs_length, targets_length, slack=slack)

    def output_lengths(self, raw_length: int) -> tuple[int, int]:
        """Upper bounds ``(L + 1, L + 2)`` (no noise; all noise)."""
        _check_raw_length(raw_length)
        return raw_length + 1, raw_length + 2

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        tokens = check_tokens(tokens, self.vocab_size, self.max_sentinels)
        mask = limit_noise_spans(iid_noise_mask(len(tokens), self.noise_density, rng), self.max_sentinels)
        inputs = noise_span_to_unique_sentinel(tokens, mask, self.vocab_size)
        targets = noise_span_targets(tokens, mask, self.vocab_size)
        return with_eos(inputs, self.eos_id), with_eos(targets, self.eos_id)


@dataclass(frozen=True)
class IidDropTokens(_WholeSegmentLengths):
    """"I.i.d. noise, drop tokens" (paper 3.3.2, T5 ``iid_15_d_d``): the inputs are the segment without its
    ``noise_density`` i.i.d. noise tokens; the targets are those tokens in order. Draws the mask only."""

    name: ClassVar[str] = "iid_drop_tokens"

    vocab_size: int
    eos_id: int = 1
    noise_density: float = 0.15
    max_sentinels: int = 100

    def __post_init__(self) -> None:
        check_vocabulary(self.vocab_size, self.eos_id, self.max_sentinels)
        _check_density(self.noise_density)

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        tokens = check_tokens(tokens, self.vocab_size, self.max_sentinels)
        mask = iid_noise_mask(len(tokens), self.noise_density, rng)
        return with_eos(drop_noise_tokens(tokens, mask), self.eos_id), \
            with_eos(drop_nonnoise_tokens(tokens, mask), self.eos_id)


@dataclass(frozen=True)
class Deshuffling(_WholeSegmentLengths):
    """Deshuffling (paper 3.3.1, T5 ``all_permute``: every token is noise and the noise is permuted): the inputs
    are a uniform random permutation of the segment, the targets the segment. Draws one ``rng.permutation``."""

    name: ClassVar[str] = "deshuffling"

    vocab_size: int
    eos_id: int = 1
    max_sentinels: int = 100

    def __post_init__(self) -> None:
        check_vocabulary(self.vocab_size, self.eos_id, self.max_sentinels)

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        tokens = check_tokens(tokens, self.vocab_size, self.max_sentinels)
        return with_eos(tokens[rng.permutation(len(tokens))], self.eos_id), with_eos(tokens, self.eos_id)
