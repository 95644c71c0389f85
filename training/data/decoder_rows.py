"""Decoder-only rows: (inputs, targets) examples laid out as one sequence for a GPT.

An example becomes ``sequence = inputs + targets``; the model reads ``sequence[:-1]`` and predicts
``sequence[1:]``, with loss only where the predicted token is a target (every token for ``lm``, whose inputs are
empty). ``prefix_mask`` marks the input positions: the model lets them attend to each other bidirectionally (the T5
paper's prefix LM, Figure 3). Examples are packed one after another (``segment_ids`` 1, 2, ..., ``positions``
restarting per example, 0 on padding) into rows of ``inputs_length + targets_length - 1`` positions.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .row_packing import ObjectiveRowBuilder, lay_out


def decoder_row_length(inputs_length: int, targets_length: int) -> int:
    """Model positions of a row holding up to ``inputs_length`` input and ``targets_length`` target tokens."""
    return inputs_length + targets_length - 1


def pack_decoder_row(examples: Sequence[tuple[np.ndarray, np.ndarray]], length: int) -> dict[str, np.ndarray]:
    """One row of ``length`` positions from ``examples`` (the module doc's layout); ``ValueError`` if they do not
    fit together. A 1-token example predicts nothing and is left out."""
    if not examples:
        raise ValueError("a row needs at least one example")
    parts = []
    for inputs, targets in examples:
        sequence = np.concatenate([np.asarray(inputs), np.asarray(targets)])
        n = len(sequence) - 1
        if n >= 1:
            parts.append({"input_tokens": sequence[:-1], "target_tokens": sequence[1:],
                          "loss_weights": np.arange(1, n + 1) >= len(inputs),
                          "prefix_mask": np.arange(n) < len(inputs)})
    return lay_out(parts, ("input_tokens", "target_tokens", "loss_weights", "prefix_mask"), length)


@dataclass(frozen=True)
class DecoderRowBuilder(ObjectiveRowBuilder):
    """:class:`ObjectiveRowBuilder` packing a sample's examples into one decoder row of :attr:`length` positions."""

    def __post_init__(self) -> None:
        if self.inputs_length < 0 or self.targets_length < 1 or self.length < 1:
            raise ValueError(f"bad row lengths {self.inputs_length}/{self.targets_length}: need inputs >= 0, "
                             "targets >= 1 and at least one position")
        super().__post_init__()

    @property
    def length(self) -> int:
        return decoder_row_length(self.inputs_length, self.targets_length)

    def pack(self, examples: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        return pack_decoder_row(examples, self.length)


def first_fit_decreasing(sizes: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(order, bins, offsets, numbers)``: the items by decreasing size (ties keep their order), each put into the
    first bin of ``capacity`` with room for it, at the bin's next free offset, as the bin's item 1, 2, ..."""
    order = np.argsort(-sizes, kind="stable")
    filled: list[int] = []  # per bin: positions taken, items
    members: list[int] = []
    placed = []
    for size in sizes[order].tolist():
        slot = next((b for b, used in enumerate(filled) if used + size <= capacity), len(filled))
        if slot == len(filled):
            filled.append(0)
            members.append(0)
        members[slot] += 1
        placed.append((slot, filled[slot], members[slot]))
        filled[slot] += size
    return order, *np.array(placed, dtype=np.int64).reshape(-1, 3).T


def pack_padded_rows(rows: Sequence[dict[str, np.ndarray]], length: int) -> list[dict[str, np.ndarray]]:
    """Re-pack fixed-length decoder rows without their padding: each row's used part (up to its last weighted
    target) goes, largest first, into the first of the new ``length``-position rows with room
    (:func:`first_fit_decreasing`), with ``segment_ids`` and restarting ``positions`` (the layout of
    :func:`.row_packing.lay_out`). Causal attention within a segment makes this compute the same losses as the
    padded rows on fewer positions; rows with no weighted target are dropped."""
    features = ("input_tokens", "target_tokens", "loss_weights")
    stacked = {name: np.stack([row[name] for row in rows]) for name in features}
    weighted = stacked["loss_weights"] != 0
    width = weighted.shape[1]
    used = np.where(weighted.any(axis=1), width - np.argmax(weighted[:, ::-1], axis=1), 0)
    if (used > length).any():
        raise ValueError(f"a row uses more than {length} positions: raise the packed row length")
    kept = np.flatnonzero(used)
    order, bins, offsets, numbers = first_fit_decreasing(used[kept], length)
    items = kept[order]
    sizes = used[items]
    within = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)  # 0 .. size-1 for each item
    source = np.repeat(items * width, sizes) + within
    target = np.repeat(bins * length + offsets, sizes) + within
    count = int(bins.max()) + 1 if len(bins) else 0
    packed = {name: np.zeros((count, length), dtype=np.int32) for name in (*features, "segment_ids", "positions")}
    for name in features:
        packed[name].reshape(-1)[target] = stacked[name].reshape(-1)[source]
    packed["segment_ids"].reshape(-1)[target] = np.repeat(numbers, sizes)
    packed["positions"].reshape(-1)[target] = within
    return [{name: array[b] for name, array in packed.items()} for b in range(count)]
