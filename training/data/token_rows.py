"""Token-shard samples as a row source: sample ``i`` of a :class:`SampleIndex` becomes one row by a row builder
(``encdec_rows.EncDecRowBuilder`` or ``decoder_rows.DecoderRowBuilder``), batched like every row source."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .batches import BatchPlan
from .row_batches import RowBatches, row_set_eval_batches
from .token_index import SampleIndex, TokenDataError, read_segment

RowBuilder = Callable[[Sequence[np.ndarray], Sequence[int], int], dict[str, np.ndarray]]
"""``row_builder(segments, segment_ids, epoch)``: one row (name -> array) from a sample's segments."""


@dataclass(frozen=True)
class TokenSampleRows:
    """The samples of ``index``, each made a row by ``row_builder`` from its segments (a row source)."""

    index: SampleIndex
    row_builder: RowBuilder

    @property
    def size(self) -> int:
        return self.index.num_samples

    @property
    def fingerprint(self) -> str:
        return self.index.fingerprint

    def row(self, i: int, epoch: int) -> dict[str, np.ndarray]:
        segment_ids = self.index.sample_segments(int(i)).tolist()
        return self.row_builder([read_segment(self.index, j) for j in segment_ids], segment_ids, epoch)


class TokenBatches(RowBatches):
    """:class:`RowBatches` of the samples of ``index`` following ``plan`` (built for ``index.num_samples``)."""

    def __init__(self, index: SampleIndex, plan: BatchPlan, rank: int, row_builder: RowBuilder,
                 start_step: int = 0, num_steps: int | None = None) -> None:
        if plan.num_samples != index.num_samples:
            raise TokenDataError(f"the batch plan has {plan.num_samples} samples but the index has "
                                 f"{index.num_samples}: build the plan with num_samples=index.num_samples")
        super().__init__(TokenSampleRows(index, row_builder), plan, rank, start_step, num_steps)


def eval_batches(index: SampleIndex, rank: int, world_size: int, micro_batch_size: int,
                 row_builder: RowBuilder) -> Iterator[dict[str, torch.Tensor]]:
    """Unshuffled evaluation micro-batches of the samples of ``index`` (epoch 0), padded like
    :func:`~c4prep.training.data.batches.rank_micro_batches`."""
    return row_set_eval_batches(TokenSampleRows(index, row_builder), rank, world_size, micro_batch_size)
