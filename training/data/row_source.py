"""What every batch stream reads: a :class:`RowSource`, and the fingerprint of a global batch sequence over one."""
from __future__ import annotations

import hashlib
from typing import Protocol

import numpy as np


class RowSource(Protocol):
    """``size`` items, item ``i`` of epoch ``epoch`` built on demand by ``row(i, epoch)``; ``fingerprint`` names the
    data and every setting the rows depend on. Token-shard samples (``token_rows.TokenSampleRows``), text pairs
    (``mixture_batches.PairRows``) and in-memory row sets (``row_batches.RowSet``) are row sources."""

    @property
    def size(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def row(self, i: int, epoch: int) -> dict[str, np.ndarray]: ...


def stream_fingerprint(*parts: object) -> str:
    """SHA-256 of ``parts`` joined by tabs: names a global batch sequence (its sources' fingerprints and the batch
    settings it depends on) so that a checkpoint's loader state is resumed only on the same one."""
    return hashlib.sha256("\t".join(map(str, parts)).encode()).hexdigest()
