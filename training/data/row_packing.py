"""What encoder-decoder rows (``encdec_rows``) and decoder-only rows (``decoder_rows``) share: the segment layout
of a packed row and the row builder that applies an objective to a sample's segments."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..seeding import example_rng

if TYPE_CHECKING:
    from ..objectives import Objective


def lay_out(parts: Sequence[dict[str, np.ndarray]], features: Sequence[str], length: int) -> dict[str, np.ndarray]:
    """``parts`` (each equal-length arrays of ``features``) one after another in a zero-padded int32 row of
    ``length`` positions, with ``segment_ids`` 1, 2, ... and ``positions`` restarting per part."""
    row = {name: np.zeros(length, dtype=np.int32) for name in (*features, "segment_ids", "positions")}
    offset = 0
    for number, part in enumerate(parts, start=1):
        n = len(part[features[0]])
        if offset + n > length:
            raise ValueError(f"examples need more than the row's {length} positions: pack fewer per row")
        span = slice(offset, offset + n)
        for name in features:
            row[name][span] = part[name]
        row["segment_ids"][span] = number
        row["positions"][span] = np.arange(n)
        offset += n
    return row


@dataclass(frozen=True)
class ObjectiveRowBuilder:
    """Picklable ``(segments, segment_ids, epoch) -> row`` for the data loader: ``objective`` on each segment with
    ``example_rng(seed, epoch, segment_id)``, the examples packed in order into one row by :meth:`pack`."""

    objective: Objective
    inputs_length: int
    targets_length: int
    seed: int

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    def pack(self, examples: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        """One row from the (inputs, targets) examples of a sample."""
        raise NotImplementedError

    def __call__(self, segments: Sequence[np.ndarray], segment_ids: Sequence[int],
                 epoch: int) -> dict[str, np.ndarray]:
        if len(segments) != len(segment_ids):
            raise ValueError(f"got {len(segments)} segments but {len(segment_ids)} segment ids")
        return self.pack([self.objective(np.asarray(segment), example_rng(self.seed, epoch, segment_id))
                          for segment, segment_id in zip(segments, segment_ids)])
