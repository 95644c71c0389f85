"""Streaming sentence sampling for vocabulary training: document shards -> lines -> a seeded uniform sample.

The sample of a stream is the ``k`` sentences with the smallest keys ``splitmix64(stream_key + position)``, where
``position`` counts the stream's sentences from 0 and ``stream_key`` derives from the seed. That is a uniform sample
without replacement (bottom-k sampling, equivalent to reservoir sampling) that depends only on the seed and the
sequence of sentences, and the ``n < k`` smallest of it is again a uniform sample, which lets mixtures shrink a
stream's share exactly. Memory holds at most ``2k`` sentences, never the corpus.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from c4prep.manifest import Manifest, read_listed_shard

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64 output for each uint64 counter value (a bijective 64-bit mix)."""
    z = values * _GAMMA + _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def stream_key(seed: int, stream: int) -> int:
    """64-bit key of sample stream ``stream`` under ``seed``."""
    digest = hashlib.blake2b(f"c4prep-vocab-sample:{seed}:{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@dataclass
class LineStats:
    """What was read: documents, their non-empty lines, and those skipped as longer than the trainer accepts."""

    documents: int = 0
    sentences: int = 0
    too_long: int = 0


def document_lines(input_uri: str, manifest: Manifest, splits: Iterable[str], max_bytes: int,
                   stats: LineStats, batch_documents: int = 1024) -> Iterator[list[str]]:
    """Non-empty stripped lines of the ``text`` of every document of ``splits``, in manifest order, in batches.

    Lines over ``max_bytes`` UTF-8 bytes (which SentencePiece would skip) are left out and counted in
    ``stats.too_long``; ``stats.sentences`` counts every non-empty line.
    """
    wanted = set(splits)
    for shard in manifest.shards:
        if shard.split not in wanted:
            continue
        table = read_listed_shard(input_uri, manifest, shard)
        for batch in table.select(["text"]).to_batches(max_chunksize=batch_documents):
            lines = []
            for text in batch.column(0).to_pylist():
                stats.documents += 1
                for line in text.split("\n"):
                    line = line.strip()
                    if not line:
                        continue
                    stats.sentences += 1
                    if len(line) > max_bytes or (4 * len(line) > max_bytes and len(line.encode()) > max_bytes):
                        stats.too_long += 1
                        continue
                    lines.append(line)
            yield lines


class BottomKSample:
    """The ``k`` items of a stream with the smallest position keys (see the module docstring).

    Items are buffered with their positions and keys (numpy chunks, joined only when needed) and cut back to the
    ``k`` smallest keys (one ``argpartition``) whenever the buffer reaches ``2k``, so memory holds at most ``2k``
    items and the work per item is vectorised. Keys never tie: splitmix64 is a bijection and positions are distinct.
    """

    def __init__(self, k: int, key: int) -> None:
        if k < 1:
            raise ValueError(f"sample size must be >= 1, got {k}")
        self.k = k
        self.seen = 0
        self._key = np.uint64(key)
        self._items: list[str] = []
        self._position_chunks: list[np.ndarray] = []
        self._key_chunks: list[np.ndarray] = []

    def add(self, items: list[str]) -> None:
        """Offer the next items of the stream."""
        positions = np.arange(self.seen, self.seen + len(items), dtype=np.uint64)
        self._items.extend(items)
        self._position_chunks.append(positions)
        self._key_chunks.append(splitmix64(positions + self._key))
        self.seen += len(items)
        if len(self._items) >= 2 * self.k:
            self._keep(self._smallest_indices(self.k))

    def __len__(self) -> int:
        return min(self.k, len(self._items))

    def _buffer(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions and keys of the buffered items, joined into one chunk each."""
        if len(self._key_chunks) != 1:
            self._position_chunks = [np.concatenate([np.empty(0, np.uint64), *self._position_chunks])]
            self._key_chunks = [np.concatenate([np.empty(0, np.uint64), *self._key_chunks])]
        return self._position_chunks[0], self._key_chunks[0]

    def _smallest_indices(self, n: int) -> np.ndarray:
        """Buffer indices of the ``n`` smallest keys, in stream order."""
        _, keys = self._buffer()
        if n >= len(keys):
            return np.arange(len(keys))
        return np.sort(np.argpartition(keys, n - 1)[:n])

    def _keep(self, indices: np.ndarray) -> None:
        positions, keys = self._buffer()
        self._items = [self._items[i] for i in indices]
        self._position_chunks, self._key_chunks = [positions[indices]], [keys[indices]]

    def smallest(self, n: int) -> list[tuple[int, str]]:
        """``(position, item)`` of the ``n`` items of the sample with the smallest keys, in stream order."""
        indices = self._smallest_indices(min(n, len(self)))
        positions, _ = self._buffer()
        return list(zip(positions[indices].tolist(), (self._items[i] for i in indices)))
