"""T5's span corruption (``c4_v220_span_corruption``) and the noise/sentinel helpers the other objectives share.

Follows ``t5.data.preprocessors`` (``random_spans_helper``, ``random_spans_noise_mask``,
``noise_span_to_unique_sentinel``, ``nonnoise_span_to_unique_sentinel``) with two deliberate differences:

- **Rounding.** ``round(length * noise_density)`` is Python's float64 ``round`` (half to even), as in HF's
  ``run_t5_mlm_flax.py`` and nanoT5, and as T5's own length plan. T5's mask computes the product in float32, which
  rounds up where ``length * 0.15`` is x.5 (lengths 190, 350, 390, 670, ...): only short tail segments are affected.
- **Degenerate cases** raise ``ValueError`` with the reason, where TF fails with a shape error (too many spans for
  the tokens) or silently walks sentinels into the real vocabulary (more spans than sentinels).

Randomness comes only from the ``np.random.Generator`` passed in. Sentinel ``k`` (0-based) is
``vocab_size - 1 - k``, where ``vocab_size`` counts every id, sentinels included (T5's 32,100).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

# ---------------------------------------------------------------------------------------------------------------------
# Counts and the length plan


def _check_density(noise_density: float, mean_noise_span_length: float) -> None:
    if not 0.0 <= noise_density <= 1.0:
        raise ValueError(f"noise_density must be in [0, 1], got {noise_density}")
    if not mean_noise_span_length > 0:
        raise ValueError(f"mean_noise_span_length must be > 0, got {mean_noise_span_length}")


def noise_counts(length: int, noise_density: float = 0.15, mean_noise_span_length: float = 3.0) -> tuple[int, int]:
    """``(num_noise_tokens, num_noise_spans)`` of ``random_spans_noise_mask`` for ``length`` tokens.

    As T5: counts are computed at ``max(length, 2)``; noise tokens are ``round(length * noise_density)`` clamped to
    ``[1, length - 1]`` and spans ``round(noise / mean_noise_span_length)`` clamped to >= 1. ``noise_density == 0``
    gives ``(0, 0)`` (checked before the clamps). ``round`` is Python's float64 round-half-to-even (see module doc).
    """
    _check_density(noise_density, mean_noise_span_length)
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if noise_density == 0.0:
        return 0, 0
    length = max(int(length), 2)
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    return num_noise, num_spans


def random_spans_length_plan(inputs_length: int, noise_density: float = 0.15,
                             mean_noise_span_length: float = 3.0) -> tuple[int, int]:
    """T5's ``random_spans_helper`` with one sentinel per span: ``(tokens_length, targets_length)``.

    ``tokens_length`` is the most raw tokens whose encoded inputs (non-noise tokens, one sentinel per span, EOS)
    fit ``inputs_length``; ``targets_length`` is the encoded targets length (noise tokens, one sentinel per span,
    EOS) for that many tokens. 512 -> (568, 114). As upstream, the plan uses the unclamped counts, and for
    ``noise_density == 0.5`` it trims one token when the targets would exceed the inputs.
    """
    _check_density(noise_density, mean_noise_span_length)
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


# ---------------------------------------------------------------------------------------------------------------------
# Masks


def random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random composition of ``num_items`` into ``num_segments`` positive parts (int64 lengths).

    As T5's ``_random_segmentation``: shuffle ``num_segments - 1`` segment starts among the ``num_items - 1`` gaps.
    """
    if not 1 <= num_segments <= num_items:
        raise ValueError(f"cannot split {num_items} items into {num_segments} non-empty segments")
    first_in_segment = np.zeros(num_items, dtype=np.int64)
    first_in_segment[1:] = rng.permutation(np.arange(num_items - 1) < num_segments - 1)
    return np.bincount(np.cumsum(first_in_segment), minlength=num_segments)


def random_spans_noise_mask(length: int, noise_density: float, mean_noise_span_length: float,
                            rng: np.random.Generator) -> np.ndarray:
    """T5's ``random_spans_noise_mask`` (``random_roll=False``): a bool mask of ``length`` with alternating
    non-noise/noise spans, starting with non-noise and ending with noise.

    Counts come from :func:`noise_counts`; the noise and non-noise span lengths are two independent uniform random
    compositions (noise first, then non-noise, each one ``rng.permutation``), so all masks with those counts are
    equally likely. A mask of length 1 is computed at length 2 and truncated (``[False]``). ``noise_density == 0``
    gives all False without drawing. Raises ``ValueError`` where T5 fails with a shape error: more spans than
    noise or non-noise tokens (e.g. density 0.5, mean 1, length 3).
    """
    num_noise, num_spans = noise_counts(length, noise_density, mean_noise_span_length)
    if num_spans == 0:
        return np.zeros(length, dtype=bool)
    padded = max(int(length), 2)
    num_nonnoise = padded - num_noise
    if num_spans > min(num_noise, num_nonnoise):
        raise ValueError(f"random_spans_noise_mask: length {length} with noise_density {noise_density} and "
                         f"mean_noise_span_length {mean_noise_span_length} needs {num_spans} noise and {num_spans} "
                         f"non-noise spans but has only {num_noise} noise and {num_nonnoise} non-noise tokens")
    noise_lengths = random_segmentation(num_noise, num_spans, rng)
    nonnoise_lengths = random_segmentation(num_nonnoise, num_spans, rng)
    interleaved = np.stack([nonnoise_lengths, noise_lengths], axis=1).reshape(-1)
    is_noise = np.tile(np.array([False, True]), num_spans)
    return np.repeat(is_noise, interleaved)[:length]


def iid_noise_mask(length: int, noise_density: float, rng: np.random.Generator) -> np.ndarray:
    """T5's ``iid_noise_mask``: each token is noise independently with probability ``noise_density``."""
    if not 0.0 <= noise_density <= 1.0:
        raise ValueError(f"noise_density must be in [0, 1], got {noise_density}")
    return rng.random(length) < noise_density


# ---------------------------------------------------------------------------------------------------------------------
# Inputs/targets functions (pure, given a mask)


def _check_mask(tokens: np.ndarray, noise_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tokens, noise_mask = np.asarray(tokens), np.asarray(noise_mask, dtype=bool)
    if tokens.ndim != 1 or tokens.shape != noise_mask.shape:
        raise ValueError(f"tokens and noise_mask must be 1-D of the same length, got shapes {tokens.shape} and "
                         f"{noise_mask.shape}")
    return tokens, noise_mask


def span_starts(noise_mask: np.ndarray) -> np.ndarray:
    """True at the first token of each run of True in a 1-D bool mask."""
    noise_mask = np.asarray(noise_mask, dtype=bool)
    previous = np.concatenate([[False], noise_mask[:-1]])
    return noise_mask & ~previous


def num_spans(noise_mask: np.ndarray) -> int:
    """Number of runs of True in a 1-D bool mask."""
    return int(span_starts(noise_mask).sum())


def noise_span_to_unique_sentinel(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Replace each run of noise tokens with one sentinel, ``vocab_size - 1 - k`` for the k-th run (T5).

    ``[10..15]``, mask ``[T, T, F, F, T, F]``, vocab 1000 -> ``[999, 12, 13, 998, 15]``. Keeps the tokens' dtype.
    """
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    first = span_starts(noise_mask)
    subsequent = noise_mask & ~first
    sentinels = (vocab_size - np.cumsum(first)).astype(tokens.dtype)
    return np.where(first, sentinels, tokens)[~subsequent]


def nonnoise_span_to_unique_sentinel(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """:func:`noise_span_to_unique_sentinel` with the mask inverted: T5's span-corruption targets."""
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    return noise_span_to_unique_sentinel(tokens, ~noise_mask, vocab_size)


def noise_token_to_sentinel(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Replace every noise token with the single mask id ``vocab_size - 1`` (T5's ``sentinel_id``)."""
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    return np.where(noise_mask, np.asarray(vocab_size - 1, dtype=tokens.dtype), tokens)


def drop_noise_tokens(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
    """The non-noise tokens, in order."""
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    return tokens[~noise_mask]


def drop_nonnoise_tokens(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
    """The noise tokens, in order."""
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    return tokens[noise_mask]


# ---------------------------------------------------------------------------------------------------------------------
# Shared checks for the objectives


def check_vocabulary(vocab_size: int, eos_id: int, max_sentinels: int, min_sentinels: int = 0) -> None:
    """Fail fast on vocabulary parameters: sentinels are the top ``max_sentinels`` ids, EOS a regular id."""
    if max_sentinels < min_sentinels:
        raise ValueError(f"max_sentinels must be >= {min_sentinels}, got {max_sentinels}")
    if vocab_size <= max_sentinels:
        raise ValueError(f"vocab_size ({vocab_size}) must exceed max_sentinels ({max_sentinels}): vocab_size "
                         "counts every id, sentinels included (T5: 32,100)")
    if not 0 <= eos_id < vocab_size - max_sentinels:
        raise ValueError(f"eos_id must be a regular id in [0, {vocab_size - max_sentinels}), got {eos_id}")


def check_tokens(tokens: np.ndarray, vocab_size: int, max_sentinels: int) -> np.ndarray:
    """``tokens`` as a non-empty 1-D integer array of regular ids ``[0, vocab_size - max_sentinels)``."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or len(tokens) == 0 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"a segment must be a non-empty 1-D integer array, got shape {tokens.shape} and dtype "
                         f"{tokens.dtype}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size - max_sentinels:
        raise ValueError(f"segment ids must be regular ids in [0, {vocab_size - max_sentinels}) (the top "
                         f"{max_sentinels} of {vocab_size} are sentinels), got min {low} and max {high}")
    return tokens


def with_eos(ids: np.ndarray, eos_id: int) -> np.ndarray:
    """``ids`` followed by one ``eos_id``, as int32."""
    out = np.empty(len(ids) + 1, dtype=np.int32)
    out[:-1] = ids
    out[-1] = eos_id
    return out


def check_row_lengths(inputs_length: int, targets_length: int) -> None:
    """Row lengths must be positive."""
    if inputs_length < 1 or targets_length < 1:
        raise ValueError(f"inputs_length and targets_length must be >= 1, got {inputs_length} and {targets_length}")


# ---------------------------------------------------------------------------------------------------------------------
# The objective


@dataclass(frozen=True)
class SpanCorruption:
    """T5's span corruption: random spans (``noise_density``, ``mean_noise_span_length``) each replaced by a
    unique sentinel in the inputs; the targets are the spans, each after its sentinel. EOS ends both.

    ``vocab_size`` counts all ids including the ``max_sentinels`` sentinels at the top. The mask is the first and
    only draw from ``rng``: ``random_spans_noise_mask(len(tokens), noise_density, mean_noise_span_length, rng)``.
    Raises ``ValueError`` if a segment needs more spans than ``max_sentinels`` (T5 would use real ids as sentinels).
    """

    name: ClassVar[str] = "span_corruption"

    vocab_size: int
    eos_id: int = 1
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0
    max_sentinels: int = 100

    def __post_init__(self) -> None:
        check_vocabulary(self.vocab_size, self.eos_id, self.max_sentinels, min_sentinels=1)
        if not 0.0 < self.noise_density < 1.0:
            raise ValueError(f"noise_density must be in (0, 1), got {self.noise_density}")
        if not self.mean_noise_span_length >= 1.0:
            raise ValueError(f"mean_noise_span_length must be >= 1, got {self.mean_noise_span_length}")

    def segment_length(self, inputs_length: int, targets_length: int) -> int:
        """T5's plan: raw tokens per segment for ``inputs_length`` (568 for 512). Raises if the plan's targets do
        not fit ``targets_length`` (as T5) or its segments need more spans than ``max_sentinels``."""
        check_row_lengths(inputs_length, targets_length)
        tokens_length, needed = random_spans_length_plan(inputs_length, self.noise_density,
                                                         self.mean_noise_span_length)
        if targets_length < needed:
            raise ValueError(f"span corruption with inputs_length {inputs_length} gives {needed}-token targets, "
                             f"more than targets_length {targets_length}: set targets_length >= {needed}")
        if tokens_length < 1:
            raise ValueError(f"inputs_length {inputs_length} is too short for span corruption")
        spans = noise_counts(tokens_length, self.noise_density, self.mean_noise_span_length)[1]
        if spans > self.max_sentinels:
            raise ValueError(f"{tokens_length}-token segments need {spans} noise spans but there are only "
                             f"{self.max_sentinels} sentinels: lower inputs_length or raise max_sentinels")
        for n in range(1, tokens_length + 1):
            lengths = self.output_lengths(n)
            if lengths[0] > inputs_length or lengths[1] > targets_length:
                raise ValueError(f"a {n}-token segment gives (inputs, targets) = {lengths}, over the row lengths "
                                 f"({inputs_length}, {targets_length})")
        return tokens_length

    def output_lengths(self, raw_length: int) -> tuple[int, int]:
        """Exact (inputs, targets) lengths with EOS: ``(L - noise + spans + 1, noise + spans + 1)``; ``(2, 2)``
        for ``L = 1`` (the one token stays in the inputs; the targets are one sentinel)."""
        if raw_length < 1:
            raise ValueError(f"raw_length must be >= 1, got {raw_length}")
        if raw_length == 1:
            return 2, 2
        noise, spans = noise_counts(raw_length, self.noise_density, self.mean_noise_span_length)
        return raw_length - noise + spans + 1, noise + spans + 1

    def __call__(self, tokens: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)`` int32, each ending with one EOS."""
        tokens = check_tokens(tokens, self.vocab_size, self.max_sentinels)
        spans = noise_counts(len(tokens), self.noise_density, self.mean_noise_span_length)[1]
        if spans > self.max_sentinels:
            raise ValueError(f"a {len(tokens)}-token segment needs {spans} noise spans but there are only "
                             f"{self.max_sentinels} sentinels: use shorter segments (see segment_length)")
        mask = random_spans_noise_mask(len(tokens), self.noise_density, self.mean_noise_span_length, rng)
        inputs = noise_span_to_unique_sentinel(tokens, mask, self.vocab_size)
        targets = nonnoise_span_to_unique_sentinel(tokens, mask, self.vocab_size)
        return with_eos(inputs, self.eos_id), with_eos(targets, self.eos_id)
