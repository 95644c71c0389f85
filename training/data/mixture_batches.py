"""Micro-batches drawn from a multi-task mixture (T5 §3.5.2): global example ``i`` is ``sampler.example_at(i)``.

Step ``s`` holds global examples ``[s*G, (s+1)*G)``; rank ``r`` takes its contiguous ``G/W`` of them and micro-batch
``m`` its ``m``-th chunk of ``M``, so the global batch sequence does not depend on W, M or loader workers and a
resume at step ``s`` needs no replay. Each task is a :class:`~c4prep.training.data.row_source.RowSource`: text-to-text
pairs (:class:`PairRows`), or the unsupervised span-corruption samples of the token shards
(:class:`~c4prep.training.data.token_rows.TokenSampleRows`). Every row is built at epoch 0: a task's example drawn
again gets the same row (the same mask).
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .batches import MicroBatchStream, collate_rows, grad_accumulation, micro_batch_span
from .encdec_rows import pack_encdec_row
from .mixtures import MixtureSampler
from .row_source import RowSource, stream_fingerprint
from .token_index import TokenDataError


@dataclass(frozen=True)
class PairRows:
    """Encoded (inputs, targets) pairs, one padded encoder-decoder row each (the same every epoch)."""

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

    def row(self, i: int, epoch: int) -> dict[str, np.ndarray]:
        return pack_encdec_row([self.examples[i]], self.inputs_length, self.targets_length)


class MixtureBatches(MicroBatchStream):
    """This rank's micro-batches of a mixture of ``sources`` sampled at ``sampler``'s rates."""

    def __init__(self, sources: Mapping[str, RowSource], sampler: MixtureSampler, global_batch_size: int,
                 world_size: int, micro_batch_size: int, rank: int, start_step: int = 0,
                 num_steps: int | None = None) -> None:
        grad_accum = grad_accumulation(global_batch_size, world_size, micro_batch_size)
        if list(sampler.tasks) != list(sources):
            raise TokenDataError(f"sampler tasks {list(sampler.tasks)} differ from sources {list(sources)}")
        fingerprint = stream_fingerprint(global_batch_size, repr(sorted(sampler.rates.items())),
                                         *(f"{name}:{source.fingerprint}" for name, source in sources.items()))
        super().__init__(grad_accum, world_size, rank, fingerprint, start_step, num_steps)
        self.sources, self.sampler = dict(sources), sampler
        self.names = list(sources)
        self.global_batch_size, self.world_size, self.micro_batch_size = global_batch_size, world_size, micro_batch_size

    def micro_batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        first, stop = micro_batch_span(step, self.rank, micro, self.global_batch_size, self.world_size,
                                       self.micro_batch_size)
        tasks, examples = self.sampler.draws(first, stop)
        rows = [self.sources[self.names[task]].row(int(example), 0) for task, example in zip(tasks, examples)]
        batch = collate_rows(rows)
        batch["task"] = torch.as_tensor(np.asarray(tasks, dtype=np.int64))
        return batch
