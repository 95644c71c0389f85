"""Stateless random streams: every random decision derives from (seed, ids...), never from global RNG state.

A mask drawn for example 1234 of epoch 3 is the same whatever the worker count, rank or resume point, because
its generator is built from ``(seed, epoch, 1234)`` alone.
"""
from __future__ import annotations

import numpy as np


def example_rng(seed: int, *ids: int) -> np.random.Generator:
    """A numpy generator keyed by ``seed`` and the given non-negative ids (e.g. epoch and example id)."""
    key = (int(seed), *map(int, ids))
    if any(part < 0 for part in key):
        raise ValueError(f"seed and ids must be non-negative, got {key}")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))
