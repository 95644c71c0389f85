"""The objectives by name, each a composition of T5's noise functions (``t5.data.preprocessors.denoise``).

| name | T5 | mask | inputs | targets |
|---|---|---|---|---|
| ``span_corruption`` | ``c4_v220_span_corruption`` | random spans | sentinel per noise span | sentinel per other span |
| ``prefix_lm`` | ``prefix_lm`` | noise after a uniform prefix | the prefix | the rest |
| ``bert_style`` | ``iid_15_r10s90_f`` | i.i.d. | 80% mask id, 10% random id, 10% kept | the segment |
| ``mass_style`` | ``denoise.gin`` (``iid_15_m_f``) | i.i.d. | the mask id | the segment |
| ``iid_replace_spans`` | ``iid_15_u_u`` | i.i.d. | a sentinel per noise run | sentinel + run, ... |
| ``iid_drop_tokens`` | ``iid_15_d_d`` | i.i.d. | the non-noise tokens | the noise tokens |
| ``deshuffling`` | ``all_permute`` | all noise | the noise permuted | the segment |
| ``lm`` | (GPT) | all noise | nothing | the segment |

Every objective but ``lm`` appends one EOS to inputs and targets, and ``lm`` adds none. The token shards end every
document with EOS: by default the pretraining data leaves those out for the objectives that append EOS (T5, which
tokenizes without EOS) and keeps them for ``lm``, where they separate documents (``data.document_eos``).

Deliberate differences from T5: ``bert_style`` defaults to BERT's 80/10/10 (the paper and T5 use 90/10:
``mask_rate=0.9``) and draws its random ids from the regular ids ``[first_regular_id, vocab_size -
max_sentinels)``, not the whole vocabulary; where T5 would run out of sentinels and use real ids,
``span_corruption`` raises and ``iid_replace_spans`` leaves the last noise runs in the inputs.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .denoise import Composition, Denoise
from .lengths import NextTokenLengths, PrefixLengths, RandomSpansLengths, WholeSegmentLengths
from .noise import (bert_corrupt, drop_noise_tokens, drop_nonnoise_tokens, iid_noise_mask, limit_noise_spans,
                    noise_counts, noise_span_targets, noise_span_to_unique_sentinel, noise_token_to_sentinel,
                    nonnoise_span_to_unique_sentinel, permute_noise_tokens, random_prefix_noise_mask,
                    random_spans_noise_mask)

if TYPE_CHECKING:
    from . import Objective

# ---------------------------------------------------------------------------------------------------------------------
# Masks: (objective, length, rng) -> noise mask


def random_spans(objective: Denoise, length: int, rng: np.random.Generator) -> np.ndarray:
    """:func:`random_spans_noise_mask`; raises if the segment needs more spans than there are sentinels."""
    spans = noise_counts(length, objective.noise_density, objective.mean_noise_span_length)[1]
    if spans > objective.max_sentinels:
        raise ValueError(f"a {length}-token segment needs {spans} noise spans but there are only "
                         f"{objective.max_sentinels} sentinels: use shorter segments (see segment_length)")
    return random_spans_noise_mask(length, objective.noise_density, objective.mean_noise_span_length, rng)


def iid(objective: Denoise, length: int, rng: np.random.Generator) -> np.ndarray:
    return iid_noise_mask(length, objective.noise_density, rng)


def iid_within_sentinels(objective: Denoise, length: int, rng: np.random.Generator) -> np.ndarray:
    """:func:`iid_noise_mask` cut by :func:`limit_noise_spans` to the runs that ``max_sentinels`` can number."""
    return limit_noise_spans(iid_noise_mask(length, objective.noise_density, rng), objective.max_sentinels)


def random_prefix(objective: Denoise, length: int, rng: np.random.Generator) -> np.ndarray:
    return random_prefix_noise_mask(length, rng)


def all_noise(objective: Denoise, length: int, rng: np.random.Generator) -> np.ndarray:
    return np.ones(length, dtype=bool)


# ---------------------------------------------------------------------------------------------------------------------
# Inputs and targets: (objective, tokens, noise_mask, rng) -> ids


@dataclass(frozen=True)
class NoiseStep:
    """An inputs or targets step made of a pure noise function ``fn(tokens, noise_mask)``, or
    ``fn(tokens, noise_mask, vocab_size)`` when it numbers sentinels (picklable for loader workers)."""

    fn: Callable[..., np.ndarray]
    numbers_sentinels: bool = False

    def __call__(self, objective: Denoise, tokens: np.ndarray, noise_mask: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
        if self.numbers_sentinels:
            return self.fn(tokens, noise_mask, objective.vocab_size)
        return self.fn(tokens, noise_mask)


sentinel_per_noise_span = NoiseStep(noise_span_to_unique_sentinel, numbers_sentinels=True)
sentinel_per_nonnoise_span = NoiseStep(nonnoise_span_to_unique_sentinel, numbers_sentinels=True)
noise_spans_after_sentinels = NoiseStep(noise_span_targets, numbers_sentinels=True)
mask_id_per_noise_token = NoiseStep(noise_token_to_sentinel, numbers_sentinels=True)
nonnoise_tokens = NoiseStep(drop_noise_tokens)
noise_tokens = NoiseStep(drop_nonnoise_tokens)


def bert_corruption(objective: Denoise, tokens: np.ndarray, noise_mask: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    return bert_corrupt(tokens, noise_mask, objective.vocab_size, rng, objective.mask_rate, objective.random_rate,
                        objective.first_regular_id, objective.max_sentinels)


def noise_permuted(objective: Denoise, tokens: np.ndarray, noise_mask: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    return permute_noise_tokens(tokens, noise_mask, rng)


def all_tokens(objective: Denoise, tokens: np.ndarray, noise_mask: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    return tokens


# ---------------------------------------------------------------------------------------------------------------------
# The table

DEFAULTS: dict[str, Any] = {"eos_id": 1, "noise_density": 0.15, "mean_noise_span_length": 3.0, "mask_rate": 0.8,
                            "random_rate": 0.1, "first_regular_id": 3, "max_sentinels": 100}
"""Every objective that takes a parameter has the same default; ``vocab_size`` has none."""

_VOCABULARY = ("vocab_size", "eos_id")
_IID_PARAMETERS = (*_VOCABULARY, "noise_density", "max_sentinels")

# Each row: name, mask, inputs, targets, length rule, the parameters make_objective accepts (in this order).
OBJECTIVES: dict[str, Composition] = {composition.name: composition for composition in (
    Composition("span_corruption", random_spans, sentinel_per_noise_span, sentinel_per_nonnoise_span,
                RandomSpansLengths(), (*_VOCABULARY, "noise_density", "mean_noise_span_length", "max_sentinels"),
                min_sentinels=1),
    Composition("prefix_lm", random_prefix, nonnoise_tokens, noise_tokens, PrefixLengths(),
                (*_VOCABULARY, "max_sentinels")),
    Composition("bert_style", iid, bert_corruption, all_tokens, WholeSegmentLengths(),
                (*_VOCABULARY, "noise_density", "mask_rate", "random_rate", "first_regular_id", "max_sentinels"),
                min_sentinels=1),
    Composition("mass_style", iid, mask_id_per_noise_token, all_tokens, WholeSegmentLengths(), _IID_PARAMETERS,
                min_sentinels=1),
    Composition("iid_replace_spans", iid_within_sentinels, sentinel_per_noise_span, noise_spans_after_sentinels,
                WholeSegmentLengths(targets_extra=2), _IID_PARAMETERS, min_sentinels=2),  # 1: no noise run left
    Composition("iid_drop_tokens", iid, nonnoise_tokens, noise_tokens, WholeSegmentLengths(), _IID_PARAMETERS),
    Composition("deshuffling", all_noise, noise_permuted, all_tokens, WholeSegmentLengths(),
                (*_VOCABULARY, "max_sentinels")),
    Composition("lm", all_noise, nonnoise_tokens, noise_tokens, NextTokenLengths(), ("vocab_size",),
                append_eos=False),
)}


def make_objective(name: str, **params: Any) -> Objective:
    """The objective ``name`` built with ``params`` (e.g. ``vocab_size=32100``); ``ValueError`` on an unknown name
    or parameter."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; valid names: {', '.join(sorted(OBJECTIVES))}")
    composition = OBJECTIVES[name]
    unknown = sorted(set(params) - set(composition.parameters))
    if unknown:
        raise ValueError(f"objective {name!r} has no parameter {', '.join(map(repr, unknown))}; valid parameters: "
                         f"{', '.join(composition.parameters)}")
    missing = [parameter for parameter in composition.parameters if parameter not in params | DEFAULTS]
    if missing:
        raise ValueError(f"objective {name!r} needs {', '.join(missing)}")
    defaults = {parameter: DEFAULTS[parameter] for parameter in composition.parameters if parameter in DEFAULTS}
    return Denoise(composition, **(defaults | params))
