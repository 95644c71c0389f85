"""T5's noise masks and the inputs/targets functions that apply them (``t5.data.preprocessors``), plus the checks
every objective shares.

A mask is a 1-D bool array, True on noise tokens; an inputs/targets function maps ``(tokens, noise_mask, ...)`` to
ids. Sentinel ``k`` (0-based) is ``vocab_size - 1 - k``, where ``vocab_size`` counts every id, sentinels included
(T5's 32,100); the single mask id is sentinel 0. Randomness comes only from the ``np.random.Generator`` passed in.
Degenerate cases raise ``ValueError`` with the reason, where TF fails with a shape error (too many spans for the
tokens) or silently walks sentinels into the real vocabulary (more spans than sentinels).
"""
from __future__ import annotations

import numpy as np

# ---------------------------------------------------------------------------------------------------------------------
# Masks and their counts


def check_noise_density(noise_density: float, mean_noise_span_length: float | None = None) -> None:
    """``noise_density`` must be in [0, 1] and ``mean_noise_span_length``, if given, > 0."""
    if not 0.0 <= noise_density <= 1.0:
        raise ValueError(f"noise_density must be in [0, 1], got {noise_density}")
    if mean_noise_span_length is not None and not mean_noise_span_length > 0:
        raise ValueError(f"mean_noise_span_length must be > 0, got {mean_noise_span_length}")


def noise_counts(length: int, noise_density: float = 0.15, mean_noise_span_length: float = 3.0) -> tuple[int, int]:
    """``(num_noise_tokens, num_noise_spans)`` of :func:`random_spans_noise_mask` for ``length`` tokens.

    As T5: counts are computed at ``max(length, 2)``; noise tokens are ``round(length * noise_density)`` clamped to
    ``[1, length - 1]`` and spans ``round(noise / mean_noise_span_length)`` clamped to >= 1. ``noise_density == 0``
    gives ``(0, 0)`` (checked before the clamps). ``round`` is Python's float64 round-half-to-even, as HF's
    ``run_t5_mlm_flax.py``, nanoT5 and T5's own length plan; T5's mask computes the product in float32, which rounds
    up where ``length * 0.15`` is x.5 (lengths 190, 350, 390, 670, ...): only short tail segments are affected.
    """
    check_noise_density(noise_density, mean_noise_span_length)
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    if noise_density == 0.0:
        return 0, 0
    length = max(int(length), 2)
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    return num_noise, num_spans


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
    equally likely. A mask of length 1 is computed at length 2 and truncated (``[False]``).
    ``noise_density == 0`` gives all False without drawing. Raises ``ValueError`` where T5 fails with a shape error:
    more spans than noise or non-noise tokens (e.g. density 0.5, mean 1, length 3).
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
    check_noise_density(noise_density)
    return rng.random(length) < noise_density


def random_prefix_noise_mask(length: int, rng: np.random.Generator) -> np.ndarray:
    """T5's ``random_prefix_noise_mask``: non-noise for a uniform prefix of 1 to ``length - 1`` tokens, noise after.
    A 1-token mask is all noise, without drawing."""
    split = int(rng.integers(1, length)) if length > 1 else 0
    return np.arange(length) >= split


def span_starts(noise_mask: np.ndarray) -> np.ndarray:
    """True at the first token of each run of True in a 1-D bool mask."""
    noise_mask = np.asarray(noise_mask, dtype=bool)
    previous = np.concatenate([[False], noise_mask[:-1]])
    return noise_mask & ~previous


def num_spans(noise_mask: np.ndarray) -> int:
    """Number of runs of True in a 1-D bool mask."""
    return int(span_starts(noise_mask).sum())


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


# ---------------------------------------------------------------------------------------------------------------------
# Inputs/targets functions (pure, given a mask; each keeps the tokens' dtype)


def _check_mask(tokens: np.ndarray, noise_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tokens, noise_mask = np.asarray(tokens), np.asarray(noise_mask, dtype=bool)
    if tokens.ndim != 1 or tokens.shape != noise_mask.shape:
        raise ValueError(f"tokens and noise_mask must be 1-D of the same length, got shapes {tokens.shape} and "
                         f"{noise_mask.shape}")
    return tokens, noise_mask


def noise_span_to_unique_sentinel(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Replace each run of noise tokens with one sentinel, ``vocab_size - 1 - k`` for the k-th run (T5).

    ``[10..15]``, mask ``[T, T, F, F, T, F]``, vocab 1000 -> ``[999, 12, 13, 998, 15]``.
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


def noise_span_targets(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Targets of "i.i.d. noise, replace spans" (paper Table 3): each noise run after the sentinel that replaced it
    in the inputs, plus one more sentinel if the segment ends with non-noise (Table 3's ``<Z>``).

    Equals T5's ``nonnoise_span_to_unique_sentinel`` whenever the mask starts with non-noise. When it starts with
    noise, T5 numbers the non-noise runs instead, so its target sentinel k follows noise run k rather than preceding
    it; here sentinel k always precedes run k, as the paper describes.
    """
    tokens, noise_mask = _check_mask(tokens, noise_mask)
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


def noise_token_to_sentinel(tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Replace every noise token with the single mask id ``vocab_size - 1`` (T5's ``sentinel_id``)."""
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    return np.where(noise_mask, np.asarray(vocab_size - 1, dtype=tokens.dtype), tokens)


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


def permute_noise_tokens(tokens: np.ndarray, noise_mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """T5's ``permute_noise_tokens``: the noise tokens uniformly shuffled among the noise positions (one
    ``rng.permutation``), the others in place."""
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    out = tokens.copy()
    out[noise_mask] = tokens[noise_mask][rng.permutation(int(noise_mask.sum()))]
    return out


def drop_noise_tokens(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
    """The non-noise tokens, in order."""
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    return tokens[~noise_mask]


def drop_nonnoise_tokens(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
    """The noise tokens, in order."""
    tokens, noise_mask = _check_mask(tokens, noise_mask)
    return tokens[noise_mask]


# ---------------------------------------------------------------------------------------------------------------------
# Shared checks and the EOS step


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
