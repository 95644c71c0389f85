"""Batches of a :class:`~c4prep.training.data.row_source.RowSource` on the shared plan, and in-memory row sets.

A :class:`RowSet` (character corpora, QA pairs, classification examples) is ``size`` items built by the picklable
``rows(item, epoch) -> row``. :class:`RowBatches` serves any row source following a
:class:`~c4prep.training.data.batches.BatchPlan` (per-(seed, epoch) permutation, sliced over ranks, micro-batches
and loader workers): the same determinism and O(1) resume for token shards and in-memory rows.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .batches import BatchPlan, MicroBatchStream, collate_rows, rank_micro_batches
from .decoder_rows import pack_padded_rows
from .row_source import RowSource, stream_fingerprint
from .token_index import TokenDataError


def content_fingerprint(text: str, **settings: Any) -> str:
    """A :class:`RowSet` fingerprint: the data's text and the settings its rows depend on."""
    return hashlib.sha256((repr(sorted(settings.items())) + "\n" + text).encode()).hexdigest()


@dataclass(frozen=True)
class RowSet:
    """``size`` items built on demand by the picklable ``rows(item, epoch)``; ``fingerprint`` names the data."""

    rows: Callable[[int, int], dict[str, np.ndarray]]
    size: int
    fingerprint: str

    def row(self, i: int, epoch: int) -> dict[str, np.ndarray]:
        return self.rows(i, epoch)


def with_empty_rows(rows: list[dict[str, np.ndarray]], multiple: int) -> list[dict[str, np.ndarray]]:
    """``rows`` followed by all-zero rows of the same shape (no segment, no weighted target) up to a multiple of
    ``multiple`` rows: they add nothing to a loss, and re-packed micro-batches then come in a few shapes only."""
    empty = {name: np.zeros_like(array) for name, array in rows[0].items()}
    return rows + [empty] * (-len(rows) % multiple)


class RowBatches(MicroBatchStream):
    """This rank's micro-batches of ``source`` following ``plan``; with ``pack_length`` the padded decoder rows of a
    micro-batch are re-packed without their padding (:func:`pack_padded_rows`: fewer, fuller rows), and completed
    with empty rows to a multiple of ``packed_row_multiple`` rows (:func:`with_empty_rows`). The fingerprint covers
    the source, seed, G and drop_last (not W, M, workers or the packing)."""

    def __init__(self, source: RowSource, plan: BatchPlan, rank: int, start_step: int = 0,
                 num_steps: int | None = None, pack_length: int | None = None, packed_row_multiple: int = 1) -> None:
        if plan.num_samples != source.size:
            raise TokenDataError(f"the batch plan has {plan.num_samples} samples but the source has {source.size}: "
                                 "build the plan with num_samples=source.size")
        fingerprint = stream_fingerprint(source.fingerprint, plan.seed, plan.global_batch_size, plan.drop_last)
        super().__init__(plan.grad_accum, plan.world_size, rank, fingerprint, start_step, num_steps)
        self.source, self.plan = source, plan
        self.pack_length, self.packed_row_multiple = pack_length, packed_row_multiple

    def micro_batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        epoch = self.plan.epoch_of(step)
        items = self.plan.micro_batch_samples(step, self.rank, micro)
        rows = [self.source.row(int(item), epoch) for item in items]
        if self.pack_length:
            rows = with_empty_rows(pack_padded_rows(rows, self.pack_length), self.packed_row_multiple)
        return collate_rows(rows)


def row_set_eval_batches(source: RowSource, rank: int, world_size: int, micro_batch_size: int,
                         order: np.ndarray | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Unshuffled evaluation micro-batches of every item (epoch 0) in ``order`` (default: item order), dealt to the
    ranks and padded with ``row_mask`` like :func:`~c4prep.training.data.batches.rank_micro_batches`."""
    return rank_micro_batches(source.size, rank, world_size, micro_batch_size,
                              lambda items: [source.row(int(item), 0) for item in items], order)


def length_order(source: RowSource, length: Callable[[dict[str, np.ndarray]], int],
                 evaluated: int | None = None) -> np.ndarray:
    """Every item of ``source``, the first ``evaluated`` (all when None) sorted by ``length(row)`` at epoch 0, ties
    in item order, then the rest in item order: batches cut from it hold rows of similar length, so a consumer that
    cuts a batch to its longest row computes little padding, and a validation pass limited to ``evaluated`` items
    scores the same items as in item order, not the shortest."""
    count = source.size if evaluated is None else min(evaluated, source.size)
    first = np.argsort([length(source.row(item, 0)) for item in range(count)], kind="stable")
    return np.concatenate([first, np.arange(count, source.size)])


def row_set_length_batches(source: RowSource, micro_batch_size: int,
                           length: Callable[[dict[str, np.ndarray]], int]) -> Iterator[dict[str, torch.Tensor]]:
    """Evaluation micro-batches of every item (epoch 0) in :func:`length_order`, each row built once; ``item`` holds
    each row's item index."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    rows = [source.row(item, 0) for item in range(source.size)]
    order = np.argsort([length(row) for row in rows], kind="stable")
    for start in range(0, len(order), micro_batch_size):
        items = order[start:start + micro_batch_size]
        yield {**collate_rows([rows[item] for item in items]), "item": torch.from_numpy(items)}
