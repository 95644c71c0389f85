"""Token-shard samples as a row source: sample ``i`` of a :class:`SampleIndex` becomes one row by a row builder
(``encdec_rows.EncDecRowBuilder`` or ``decoder_rows.DecoderRowBuilder``), batched like every row source."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .token_index import SampleIndex, read_segment

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
