"""Deterministic global batches of a row source, split over ranks, micro-batches and loader workers.

The global batch sequence is defined first and does not depend on the number of ranks, micro-batch size or
workers: step ``s`` is batch ``s % batches_per_epoch`` of epoch ``s // batches_per_epoch``, i.e. samples
``perm[b*G:(b+1)*G]`` of that epoch's permutation. Rank ``r`` of ``W`` takes slice ``[r*G/W:(r+1)*G/W]`` and
micro-batch ``m`` its ``m``-th chunk of ``M``. Resuming at step ``s`` is O(1) and bit-exact: nothing is replayed.

Epoch boundary: with ``drop_last=True`` (default) each epoch has ``N // G`` batches and its last ``N % G`` permuted
samples are skipped (other samples each epoch, as the permutation changes); with ``drop_last=False`` it has
``ceil(N / G)`` batches and the last one is completed with the first samples of the same epoch's permutation.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .packed_batches import PackedBatch, PackedStream
from .token_index import TokenDataError


def grad_accumulation(global_batch_size: int, world_size: int, micro_batch_size: int) -> int:
    """Micro-batches per rank per step, G / (W * M); ``TokenDataError`` unless each is >= 1 and W * M divides G."""
    G, W, M = global_batch_size, world_size, micro_batch_size
    for name, value in (("global_batch_size", G), ("world_size", W), ("micro_batch_size", M)):
        if value < 1:
            raise TokenDataError(f"{name} must be >= 1, got {value}")
    if G % (W * M):
        raise TokenDataError(f"global batch {G} is not divisible by world size {W} x micro-batch {M} = {W * M}: "
                             "choose sizes with global_batch_size = world_size * micro_batch_size * grad_accum")
    return G // (W * M)


def micro_batch_span(batch: int, rank: int, micro: int, global_batch_size: int, world_size: int,
                     micro_batch_size: int) -> tuple[int, int]:
    """``(first, stop)``: the positions, counted over consecutive global batches of G examples, of micro-batch
    ``micro`` of rank ``rank`` in global batch ``batch``. Rank ``r`` of ``W`` takes the batch's ``[r*G/W,
    (r+1)*G/W)`` and micro-batch ``m`` its ``m``-th chunk of ``M``."""
    G, W, M = global_batch_size, world_size, micro_batch_size
    if not 0 <= rank < W:
        raise TokenDataError(f"rank must be in [0, {W}), got {rank}")
    if not 0 <= micro < G // (W * M):
        raise TokenDataError(f"micro-batch must be in [0, {G // (W * M)}), got {micro}")
    first = batch * G + rank * (G // W) + micro * M
    return first, first + M


@dataclass(frozen=True)
class BatchPlan:
    """Which samples every (step, rank, micro-batch) gets: G global, W ranks, M per micro-batch."""

    num_samples: int
    global_batch_size: int
    world_size: int
    micro_batch_size: int
    seed: int
    drop_last: bool = True

    def __post_init__(self) -> None:
        if self.num_samples < 1:
            raise TokenDataError(f"num_samples must be >= 1, got {self.num_samples}")
        if self.seed < 0:
            raise TokenDataError(f"seed must be >= 0, got {self.seed}")
        grad_accumulation(self.global_batch_size, self.world_size, self.micro_batch_size)
        if self.drop_last and self.num_samples < self.global_batch_size:
            raise TokenDataError(f"corpus has {self.num_samples} samples, fewer than one global batch of "
                                 f"{self.global_batch_size}; lower global_batch_size, add data, or set drop_last=False")

    @property
    def grad_accum(self) -> int:
        """Micro-batches per rank per step: G / (W * M)."""
        return grad_accumulation(self.global_batch_size, self.world_size, self.micro_batch_size)

    @property
    def batches_per_epoch(self) -> int:
        """Global batches (steps) per epoch."""
        G = self.global_batch_size
        return self.num_samples // G if self.drop_last else -(-self.num_samples // G)

    def epoch_of(self, step: int) -> int:
        """The epoch that global ``step`` belongs to."""
        return step // self.batches_per_epoch

    def epoch_permutation(self, epoch: int) -> np.ndarray:
        """Sample ids in epoch order: a permutation from ``Generator(PCG64(SeedSequence([seed, epoch])))``."""
        cached = self.__dict__.get("_permutation")
        if cached is not None and cached[0] == epoch:
            return cached[1]
        if epoch < 0:
            raise TokenDataError(f"epoch must be >= 0, got {epoch}")
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch])))
        perm = rng.permutation(self.num_samples)
        perm.setflags(write=False)
        self.__dict__["_permutation"] = (epoch, perm)  # a cache of the last epoch, not part of the plan
        return perm

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_permutation"}

    def micro_batch_samples(self, step: int, rank: int, micro: int) -> np.ndarray:
        """Sample ids of micro-batch ``micro`` of rank ``rank`` at global ``step`` (``micro_batch_size`` of them)."""
        if step < 0:
            raise TokenDataError(f"step must be >= 0, got {step}")
        epoch, batch = divmod(step, self.batches_per_epoch)
        first, stop = micro_batch_span(batch, rank, micro, self.global_batch_size, self.world_size,
                                       self.micro_batch_size)
        positions = np.arange(first, stop, dtype=np.int64) % self.num_samples  # wraps only if not drop_last
        return self.epoch_permutation(epoch)[positions]

    def global_batch(self, step: int) -> np.ndarray:
        """All G sample ids of global ``step``, in rank then micro-batch order."""
        return np.concatenate([self.micro_batch_samples(step, r, m)
                               for r in range(self.world_size) for m in range(self.grad_accum)])


def collate_rows(rows: Sequence[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Stack rows into tensors [len(rows), ...]: integer and bool arrays become int64, others keep their dtype."""
    batch = {}
    for name in rows[0]:
        stacked = np.stack([row[name] for row in rows])
        if stacked.dtype.kind in "biu":
            stacked = stacked.astype(np.int64, copy=False)
        batch[name] = torch.from_numpy(stacked)
    return batch


class MicroBatchStream(IterableDataset):
    """Collated micro-batches of one rank, in (step, micro-batch) order from ``start_step``.

    Micro-batch ``j`` (counted from ``start_step``) is step ``start_step + j // A``, micro-batch ``j % A``. Loader
    worker ``w`` of ``K`` builds the ``j`` with ``j % K == w``, so ``DataLoader(batch_size=None)``'s in-order round
    robin yields the same sequence for any ``K``. ``num_steps=None`` iterates forever. Subclasses say what
    micro-batch ``(step, micro)`` holds.
    """

    def __init__(self, grad_accum: int, world_size: int, rank: int, fingerprint: str, start_step: int = 0,
                 num_steps: int | None = None) -> None:
        super().__init__()
        if not 0 <= rank < world_size:
            raise TokenDataError(f"rank must be in [0, {world_size}), got {rank}")
        if start_step < 0 or (num_steps is not None and num_steps < 0):
            raise TokenDataError(f"start_step and num_steps must be >= 0, got {start_step}, {num_steps}")
        self.grad_accum, self.rank, self.fingerprint = grad_accum, rank, fingerprint
        self.start_step, self.num_steps = start_step, num_steps

    def micro_batch(self, step: int, micro: int) -> dict[str, torch.Tensor]:
        """The collated micro-batch ``micro`` of global ``step`` for this rank."""
        raise NotImplementedError

    def starting_at(self, step: int) -> MicroBatchStream:
        """This stream from global ``step`` on (a shallow copy; the data and settings are shared)."""
        if step < 0:
            raise TokenDataError(f"start step must be >= 0, got {step}")
        resumed = copy.copy(self)
        resumed.start_step = step
        return resumed

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        accum = self.grad_accum
        total = None if self.num_steps is None else self.num_steps * accum
        j = worker
        while total is None or j < total:
            yield self.micro_batch(self.start_step + j // accum, j % accum)
            j += workers

    def state_dict(self, next_step: int | None = None) -> dict[str, Any]:
        """``{'start_step', 'fingerprint'}`` to resume at ``next_step`` (the next global step to train; default
        ``start_step``). The fingerprint identifies the global batch sequence, so W and M may change."""
        return {"start_step": self.start_step if next_step is None else int(next_step),
                "fingerprint": self.fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state['start_step']``; refuses a state made with other data or batch settings."""
        if state.get("fingerprint") != self.fingerprint:
            raise TokenDataError("the loader state was saved with other data or batch settings (seed, global "
                                 "batch size, drop_last): resume with the same ones, or start a fresh run")
        start = int(state["start_step"])
        if start < 0:
            raise TokenDataError(f"start_step must be >= 0, got {start}")
        self.start_step = start


def make_loader(dataset: MicroBatchStream, num_workers: int) -> Iterator[dict[str, torch.Tensor]]:
    """``dataset``'s micro-batches through a DataLoader with ``num_workers`` workers, unchanged, in pinned memory with
    CUDA; each crosses from its worker as one buffer (:mod:`.packed_batches`)."""
    if num_workers < 0:
        raise TokenDataError(f"num_workers must be >= 0, got {num_workers}")
    # its own generator: one drawn from torch's global one (for the workers' base seed) would shift every dropout
    # mask after a resume, which makes the loader after restoring the checkpoint's RNG state
    loader = DataLoader(PackedStream(dataset), batch_size=None, num_workers=num_workers, persistent_workers=False,
                        pin_memory=torch.cuda.is_available(), generator=torch.Generator().manual_seed(0))
    return map(PackedBatch.unpack, loader)


def rank_micro_batches(num_items: int, rank: int, world_size: int, micro_batch_size: int,
                       make_rows: Callable[[np.ndarray], list[dict[str, np.ndarray]]],
                       order: np.ndarray | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Unshuffled micro-batches of rank ``rank``'s items ``order[rank::world_size]`` (``order``: every item id once;
    default increasing), each collated from ``make_rows(item ids)``.

    Every rank yields the same number of micro-batches, ``ceil(ceil(N / W) / M)``, so collective ops line up. Rows
    past a rank's items are padding: all-zero arrays shaped like a real row, with ``row_mask`` (bool [M]) False;
    weight losses and counts by ``row_mask``.
    """
    if world_size < 1 or micro_batch_size < 1:
        raise TokenDataError(f"world_size and micro_batch_size must be >= 1, got {world_size}, {micro_batch_size}")
    if not 0 <= rank < world_size:
        raise TokenDataError(f"rank must be in [0, {world_size}), got {rank}")
    if order is not None and len(order) != num_items:
        raise TokenDataError(f"order lists {len(order)} items, expected all {num_items}")
    items = (np.arange(num_items) if order is None else np.asarray(order))[rank::world_size]
    per_rank = -(-num_items // world_size)
    template: dict[str, np.ndarray] | None = None
    for first in range(0, per_rank, micro_batch_size):
        rows = make_rows(items[first:first + micro_batch_size])
        if template is None:
            template = rows[0] if rows else make_rows(np.zeros(1, dtype=np.int64))[0]
        real = len(rows)
        rows += [{name: np.zeros_like(value) for name, value in template.items()}
                 for _ in range(micro_batch_size - real)]
        batch = collate_rows(rows)
        batch["row_mask"] = torch.arange(micro_batch_size) < real
        yield batch
