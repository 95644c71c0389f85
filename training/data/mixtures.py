"""Multi-task mixtures (T5 paper, section 3.5.2): mixing rates and a deterministic, resumable task sampler.

In the text-to-text framework multi-task learning is just mixing data sets, and the unsupervised objective is one
more task: a mixture can hold e.g. ``{"c4_span_corruption": 365_000_000, "squad": 88_000, ...}``. Nothing here
knows what a task is; a task is a name with a number of examples, and the sampler says which example of which task
goes at each global position.

Sampler design (all decisions are pure functions of ``(seed, i)``):

* Positions are cut into blocks of ``block_size``. Among the first ``N`` positions, the tasks ``<= t`` (in mixture
  order) get exactly ``floor(N * (r_1 + ... + r_t))`` of them, so a block's task counts and every task's count
  before a block are closed-form: any position is reached in O(block) time, without replaying the past. Inside a
  block the tasks are shuffled with ``example_rng(seed, <choices>, block)``. This is stratified sampling: each
  position is task ``t`` with probability ``r_t`` on average, and every block's mix is within one example per
  task of the rates (less variance than independent draws).
* The ``k``-th draw of a task with ``n`` examples is example ``perm_e(k mod n)`` of epoch ``e = k // n``, where
  ``perm_e`` is a random-access permutation keyed by ``(seed, task name, e)``: a Feistel network over the next
  power of four with cycle walking, so it needs no memory whatever ``n`` (C4 included) and epochs reshuffle.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from typing import Literal

import numpy as np

from ..seeding import example_rng

Strategy = Literal["equal", "examples_proportional", "temperature"]
STRATEGIES = ("equal", "examples_proportional", "temperature")
FEISTEL_ROUNDS = 6


class MixtureError(ValueError):
    """A mixture that cannot be built (one-line message saying what to fix)."""


def mixing_rates(sizes: Mapping[str, int], strategy: Strategy, size_limit: int | None = None,
                 temperature: float = 1.0) -> dict[str, float]:
    """Probability of drawing each task (summing to 1), in the order of ``sizes`` (T5 paper, section 3.5.2).

    * ``equal``: ``1 / N`` each.
    * ``examples_proportional``: ``r_m = min(e_m, K) / sum_n min(e_n, K)``, ``K = size_limit`` (no limit if None).
    * ``temperature``: those rates (with the limit ``K``; the paper uses ``K = 2**21``) raised to ``1 / T`` and
      renormalised; ``T = 1`` is examples-proportional and ``T -> inf`` tends to equal.
    """
    if not sizes:
        raise MixtureError("a mixture needs at least one task")
    _check_sizes(sizes)
    if strategy not in STRATEGIES:
        raise MixtureError(f"unknown mixing strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    if size_limit is not None and (isinstance(size_limit, bool) or size_limit < 1):
        raise MixtureError(f"size_limit must be a positive integer or None, got {size_limit!r}")
    if strategy != "temperature" and temperature != 1.0:
        raise MixtureError(f"temperature={temperature} only applies to strategy='temperature', not {strategy!r}")
    if strategy == "equal":
        if size_limit is not None:
            raise MixtureError("size_limit does not apply to strategy='equal'; drop it or use examples_proportional")
        return {task: 1.0 / len(sizes) for task in sizes}
    if not temperature > 0:  # also rejects NaN
        raise MixtureError(f"temperature must be > 0, got {temperature}")
    limit = math.inf if size_limit is None else size_limit
    capped = np.array([min(size, limit) for size in sizes.values()], dtype=np.float64)
    # (c / max c) ** (1 / T) is proportional to r ** (1 / T) and cannot overflow or underflow to all zeros.
    weights = (capped / capped.max()) ** (1.0 / temperature) if strategy == "temperature" else capped
    rates = weights / weights.sum()
    return {task: float(rate) for task, rate in zip(sizes, rates)}


class MixtureSampler:
    """Which task, and which of its examples, goes at each global position ``i`` of a mixture.

    ``rates``: non-negative task weights (normalised here), e.g. from :func:`mixing_rates`. ``sizes``: examples per
    task, needed by :meth:`example_at` only. Every answer is a pure function of ``(seed, i)``: the same whatever the
    call order, so training resumes from any position. Sequential reads are served a block at a time.
    """

    def __init__(self, rates: Mapping[str, float], seed: int, sizes: Mapping[str, int] | None = None,
                 block_size: int = 4096) -> None:
        if not rates:
            raise MixtureError("a mixture needs at least one task")
        values = np.array(list(rates.values()), dtype=np.float64)
        if not (np.all(np.isfinite(values)) and np.all(values >= 0) and values.sum() > 0):
            raise MixtureError(f"rates must be finite, non-negative and not all zero, got {dict(rates)}")
        if block_size < 1:
            raise MixtureError(f"block_size must be >= 1, got {block_size}")
        if seed < 0:
            raise MixtureError(f"seed must be non-negative, got {seed}")
        self.tasks: tuple[str, ...] = tuple(rates)
        self.rates: dict[str, float] = dict(zip(self.tasks, (values / values.sum()).tolist()))
        self.seed = int(seed)
        self.block_size = int(block_size)
        cumulative = np.minimum(np.cumsum(values / values.sum()), 1.0)
        cumulative[-1] = 1.0
        self._cumulative = cumulative
        self._sizes: np.ndarray | None = None
        if sizes is not None:
            unknown = sorted(set(sizes) ^ set(self.tasks))
            if unknown:
                raise MixtureError(f"sizes and rates name different tasks ({', '.join(unknown)}); give both the same")
            _check_sizes(sizes)
            self._sizes = np.array([int(sizes[task]) for task in self.tasks], dtype=np.int64)
        self._task_keys = [_name_key(task) for task in self.tasks]
        self._cached: tuple[int, np.ndarray, np.ndarray] | None = None

    def task_for(self, i: int) -> str:
        """Name of the task drawn at position ``i``."""
        block, offset = self._locate(i)
        tasks, _ = self._block(block)
        return self.tasks[int(tasks[offset])]

    def example_at(self, i: int) -> tuple[str, int]:
        """``(task, index of the example within that task)`` at position ``i``."""
        block, offset = self._locate(i)
        tasks, examples = self._block(block, need_examples=True)
        return self.tasks[int(tasks[offset])], int(examples[offset])

    def draws(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Task numbers (indices into :attr:`tasks`) and example indices (empty without ``sizes``) of positions
        ``start .. stop - 1``, vectorised: the fast path for sequential reads."""
        if not 0 <= start <= stop:
            raise MixtureError(f"need 0 <= start <= stop, got start={start}, stop={stop}")
        tasks, examples = [], []
        for block in range(start // self.block_size, -(-stop // self.block_size)):
            block_tasks, block_examples = self._block(block)
            first = block * self.block_size
            window = slice(max(start - first, 0), min(stop - first, self.block_size))
            tasks.append(block_tasks[window])
            if block_examples is not None:
                examples.append(block_examples[window])
        empty = np.zeros(0, dtype=np.int64)
        return (np.concatenate(tasks) if tasks else empty,
                np.concatenate(examples) if examples else empty)

    def iter_from(self, start: int = 0) -> Iterator[tuple[str, int]]:
        """``example_at(i)`` for ``i = start, start + 1, ...`` (endless)."""
        block, offset = self._locate(start)
        while True:
            tasks, examples = self._block(block, need_examples=True)
            for position in range(offset, self.block_size):
                yield self.tasks[int(tasks[position])], int(examples[position])
            block, offset = block + 1, 0

    def _locate(self, i: int) -> tuple[int, int]:
        if i < 0:
            raise MixtureError(f"position must be non-negative, got {i}")
        return divmod(int(i), self.block_size)

    def _counts_before(self, n: int) -> np.ndarray:
        """Draws of each task among the first ``n`` positions."""
        below = np.floor(np.float64(n) * self._cumulative).astype(np.int64)
        below[-1] = n
        return np.diff(below, prepend=0)

    def _block(self, block: int, need_examples: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Task numbers and (if sizes are known) example indices of the positions of ``block``."""
        if need_examples and self._sizes is None:
            raise MixtureError("example indices need the task sizes: pass sizes= to MixtureSampler")
        if self._cached is not None and self._cached[0] == block:
            return self._cached[1], self._cached[2]
        before = self._counts_before(block * self.block_size)
        counts = self._counts_before((block + 1) * self.block_size) - before
        order = example_rng(self.seed, _CHOICES_KEY, block).permutation(self.block_size)
        tasks = np.repeat(np.arange(len(self.tasks)), counts)[order]
        examples = None
        if self._sizes is not None:
            # A task's draws take its positions in increasing order, so its examples follow its epoch order.
            by_task = np.argsort(tasks, kind="stable")
            draws = np.concatenate([np.arange(b, b + c, dtype=np.int64) for b, c in zip(before, counts)])
            examples = np.empty(self.block_size, dtype=np.int64)
            examples[by_task] = self._example_indices(tasks[by_task], draws)
        self._cached = (block, tasks, examples)
        return tasks, examples

    def _example_indices(self, tasks: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Example index of the ``draws[j]``-th draw of task ``tasks[j]``: per-epoch permutations, epochs cycling."""
        assert self._sizes is not None
        result = np.empty_like(draws)
        for task in np.unique(tasks):
            size = int(self._sizes[task])
            where = np.flatnonzero(tasks == task)
            epochs, positions = np.divmod(draws[where], size)
            first = int(epochs.min())
            keys = np.stack([self._round_keys(int(task), epoch) for epoch in range(first, int(epochs.max()) + 1)])
            result[where] = permute_indices(positions, size, keys[epochs - first].T)
        return result

    def _round_keys(self, task: int, epoch: int) -> np.ndarray:
        """Feistel round keys of the example order of ``task`` in ``epoch``."""
        rng = example_rng(self.seed, _EPOCHS_KEY, self._task_keys[task], epoch)
        return rng.bit_generator.random_raw(FEISTEL_ROUNDS)


def permute_indices(positions: np.ndarray, size: int, round_keys: np.ndarray) -> np.ndarray:
    """Image of ``positions`` (in ``[0, size)``) under the bijection of ``[0, size)`` keyed by ``round_keys``: a
    balanced Feistel network on the smallest even bit width covering ``size``, with cycle walking. ``round_keys``
    (uint64) has shape ``(rounds,)``, or ``(rounds, len(positions))`` for one key set per position."""
    positions = np.asarray(positions, dtype=np.int64).reshape(-1)
    if positions.size and (positions.min() < 0 or positions.max() >= size):
        raise ValueError(f"positions must lie in [0, {size})")
    if size == 1:
        return np.zeros_like(positions)
    half = max(1, ((size - 1).bit_length() + 1) // 2)  # 4**half >= size
    mask, shift = np.uint64((1 << half) - 1), np.uint64(half)
    keys = np.asarray(round_keys, dtype=np.uint64)
    keys = np.broadcast_to(keys.reshape(keys.shape[0], -1), (keys.shape[0], positions.size))
    values = positions.astype(np.uint64)
    pending = np.arange(values.size)
    while pending.size:  # a value outside [0, size) is encrypted again until it lands inside (cycle walking)
        left, right = values[pending] >> shift, values[pending] & mask
        for key in keys[:, pending]:
            left, right = right, left ^ (_mix64(right ^ key) & mask)
        values[pending] = (left << shift) | right
        pending = pending[values[pending] >= np.uint64(size)]
    return values.astype(np.int64)


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a fast, well-mixing hash of uint64 arrays (arithmetic wraps modulo 2**64)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _check_sizes(sizes: Mapping[str, int]) -> None:
    for task, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise MixtureError(f"task {task!r} has size {size!r}; sizes must be positive integers (example counts)")


def _name_key(name: str) -> int:
    """A stable non-negative 63-bit id of a name (for ``example_rng``)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") >> 1


_CHOICES_KEY = _name_key("mixture/choices")
_EPOCHS_KEY = _name_key("mixture/epochs")
