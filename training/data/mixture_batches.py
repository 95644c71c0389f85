"""Micro-batches drawn from a multi-task mixture (T5 §3.5.2): global example ``i`` is ``sampler.example_at(i)``.

Step ``s`` holds global examples ``[s*G, (s+1)*G)``; rank ``r`` takes its contiguous ``G/W`` of them and micro-batch
``m`` its ``m``-th chunk of ``M``, so the global batch sequence does not depend on W, M or loader workers and a
resume at step ``s`` needs no replay. Each task is a :class:`RowSource`: text-to-text pairs, or the unsupervised
span-corruption samples of the token shards.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from ..objectives.packing import pack_encdec_row
from .batches import MicroBatchStream, RowBuilder, build_rows, collate_rows
from .mixtures import MixtureSampler
from .token_index import SampleIndex, TokenDataError


class RowSource(Protocol):
    """One task of a mixture: ``size`` examples, each turned into a row on demand."""

    size: int
    fingerprint: str

    def row(self, example: int) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class PairRows:
    """Encoded (inputs, targets) pairs, one padded row each."""

    examples: Sequence[tuple[np.ndarray, np.ndarray]]
    inputs_length: int
    targets_length: int

    @property
    def size(self) -> int:
        return len(self.examples)

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(f"{self.inputs_length},{self.targets_length}".encode())
        for inputs, targets in self.examples:
            digest.update(inputs.tobytes() + b"|" + targets.tobytes() + b"\n")
        return digest.hexdigest()

    def row(self, example: int) -> dict[str, np.ndarray]:
        return pack_encdec_row([self.examples[example]], self.inputs_length, self.targets_length)


@dataclass(frozen=True)
class TokenSampleRows:
    """Unsupervised samples of a token-shard index (masks keyed by epoch 0: a repeat draws the same mask)."""

    index: SampleIndex
    row_builder: RowBuilder

    @property
    def size(self) -> int:
        return self.index.num_samples

    @property
    def fingerprint(self) -> str:
        return self.index.fingerprint

    def row(self, example: int) -> dict[str, np.ndarray]:
        return build_rows(self.index, [example], self.row_builder, epoch=0)[0]


class MixtureBatches(MicroBatchStream):
    """This rank's micro-batches of a mixture of ``sources`` sampled at ``sampler``'s rates."""

    def __init__(self, sources: Mapping[str, RowSource], sampler: MixtureSampler, global_batch_size: int,
                 world_size: int, micro_batch_size: int, rank: int, start_step: int = 0,
                 num_steps: int | None = None) -> None:
        if global_batch_size % (world_size * micro_batch_size):
            raise TokenDataError(f"global batch {global_batch_size} is not divisible by world size {world_size} x "
                                 f"micro-batch {micro_batch_size}")
        if list(sampler.tasks) != list(sources):
            raise TokenDataError(f"sampler tasks {list(sampler.tasks)} differ from sources {list(sources)}")
        key = "\t".join([str(global_batch_size), repr(sorted(sampler.rates.items()))]
                        + [f"{name}:{source.fingerprint}" for name, source in sources.items()])
        super().__init__(global_batch_size // (world_size * micro_batch_size), world_size, rank,
                         hashlib.sha256(key.encode()).hexdigest(), start_step, num_steps)
        self.sources, self.sampler = dict(sources), sampler
        self.names = list(sources)
        self.global_batch_size, self.world_size, self.micro_batch_size = global_batch_size, world_size, micro_batch_size

    def micro_batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        first = (step * self.global_batch_size + self.rank * (self.global_batch_size // self.world_size)
                 + micro * self.micro_batch_size)
        tasks, examples = self.sampler.draws(first, first + self.micro_batch_size)
        rows = [self.sources[self.names[task]].row(int(example)) for task, example in zip(tasks, examples)]
        batch = collate_rows(rows)
        batch["task"] = torch.as_tensor(np.asarray(tasks, dtype=np.int64))
        return batch
