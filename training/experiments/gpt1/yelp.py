"""Yelp short-review sentiment (Shen et al. 2017), dev and test splits: reading and balanced low-resource samples.

A folder holds ``sentiment.{dev,test}.{0,1}``: one lowercased, space-tokenized sentence a line, the label given by
the file suffix (0 negative, 1 positive).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...seeding import example_rng
from .input_transforms import FinetuneDataError

SPLITS = ("dev", "test")
LABELS = (0, 1)


def read_yelp(folder: str | Path, split: str) -> list[tuple[str, int]]:
    """``(sentence, label)`` of every line of ``split``: the label-0 file in file order, then the label-1 file."""
    if split not in SPLITS:
        raise FinetuneDataError(f"unknown Yelp split {split!r}; use one of {SPLITS} (train is not available)")
    root = Path(folder)
    if not root.is_dir():
        raise FinetuneDataError(f"{root}: no such folder; pass the folder holding sentiment.{{dev,test}}.{{0,1}}")
    examples: list[tuple[str, int]] = []
    for label in LABELS:
        path = root / f"sentiment.{split}.{label}"
        if not path.is_file():
            raise FinetuneDataError(f"{path}: no such file; the Yelp folder needs sentiment.{split}.0 and .1")
        try:
            with path.open(encoding="utf-8") as lines:
                sentences = [(line.rstrip("\r\n"), label) for line in lines]
        except UnicodeDecodeError as error:
            raise FinetuneDataError(f"{path} is not UTF-8 text (byte {error.start}); the Yelp folder needs "
                                    "sentences in UTF-8, one a line") from None
        if not sentences:
            raise FinetuneDataError(f"{path} is empty; the Yelp folder needs sentences in UTF-8, one a line")
        examples.extend(sentences)
    return examples


def balanced_sample(examples: Sequence[tuple[str, int]], per_label: int, seed: int) -> list[tuple[str, int]]:
    """``per_label`` examples of every label present, drawn without replacement, in a deterministic shuffled order.

    Label ``y``'s draw uses only ``example_rng(seed, y)``: a permutation of that label's examples (in input order)
    picks the first ``per_label``, then one uniform sort key per pick; sorting all picks by key (ties by label)
    interleaves the labels in a uniformly random order. A label's picks do not depend on the other labels.
    """
    if isinstance(per_label, bool) or not isinstance(per_label, (int, np.integer)) or per_label < 1:
        raise FinetuneDataError(f"per_label must be a positive int, got {per_label!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise FinetuneDataError(f"seed must be a non-negative int, got {seed!r}")
    by_label: dict[int, list[tuple[str, int]]] = {}
    for example in examples:
        label = example[1]
        if isinstance(label, bool) or not isinstance(label, (int, np.integer)) or label < 0:
            raise FinetuneDataError(f"labels must be non-negative ints, got {label!r} for {example[0]!r}")
        by_label.setdefault(int(label), []).append(example)
    if not by_label:
        raise FinetuneDataError("no examples to sample from")
    keyed: list[tuple[float, int, tuple[str, int]]] = []
    for label in sorted(by_label):
        pool = by_label[label]
        if len(pool) < per_label:
            raise FinetuneDataError(f"label {label} has {len(pool)} examples, fewer than per_label={per_label}; "
                                    "ask for fewer per label or use a larger split")
        rng = example_rng(seed, label)
        picks = rng.permutation(len(pool))[:per_label]
        keys = rng.random(per_label)
        keyed.extend((float(key), label, pool[int(i)]) for key, i in zip(keys, picks))
    keyed.sort(key=lambda item: (item[0], item[1]))
    return [example for _, _, example in keyed]
