"""A micro-batch as one buffer on its way from a loader worker to the training process.

A worker hands each tensor of a micro-batch to the training process as its own shared-memory segment (a file
descriptor sent over a socket, then mapped). The A5 recipe's re-packed micro-batch, five int64 features, took a
median 1.8-1.9 ms to receive that way on this project's 2-vCPU machine, and 0.9-1.1 ms as one buffer
(``benchmarks/bench_a5_loader.py``). With CUDA the receiving is done by the loader's pinning thread, which shares the
interpreter with a training loop of 7 ms steps. So a worker packs every tensor of a micro-batch into one byte buffer
(:class:`PackedBatch`): one hand-over, one pinned copy. The training process unpacks it into views of that buffer:
the same values, dtypes and shapes.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import IterableDataset

ALIGNMENT = 64  # bytes: each tensor starts at a multiple, which every element size divides
Layout = tuple[tuple[str, torch.dtype, tuple[int, ...], int], ...]  # (name, dtype, shape, byte offset) per tensor


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * dtype.itemsize


@dataclass(frozen=True)
class PackedBatch:
    """A micro-batch's tensors laid out one after another in ``buffer`` (uint8), as ``layout`` says."""

    layout: Layout
    buffer: torch.Tensor

    @classmethod
    def of(cls, batch: dict[str, torch.Tensor]) -> PackedBatch:
        """``batch``'s tensors copied into one new buffer, in order, each from an ``ALIGNMENT``-byte boundary."""
        layout, end = [], 0
        for name, tensor in batch.items():
            layout.append((name, tensor.dtype, tuple(tensor.shape), end))
            end += -(-_nbytes(tensor.dtype, tuple(tensor.shape)) // ALIGNMENT) * ALIGNMENT
        packed = cls(tuple(layout), torch.empty(end, dtype=torch.uint8))
        for tensor, view in zip(batch.values(), packed.unpack().values(), strict=True):
            view.copy_(tensor)
        return packed

    def unpack(self) -> dict[str, torch.Tensor]:
        """The micro-batch: a view of the buffer for each tensor."""
        return {name: self.buffer[start:start + _nbytes(dtype, shape)].view(dtype).view(shape)
                for name, dtype, shape, start in self.layout}

    def pin_memory(self) -> PackedBatch:
        """Called by the DataLoader's pinning thread: the buffer pinned in one copy."""
        return PackedBatch(self.layout, self.buffer.pin_memory())


class PackedStream(IterableDataset):
    """``stream``'s micro-batches, each as a :class:`PackedBatch` (built in the loader worker that iterates it)."""

    def __init__(self, stream: IterableDataset) -> None:
        super().__init__()
        self.stream = stream

    def __iter__(self) -> Iterator[PackedBatch]:
        return map(PackedBatch.of, self.stream)
