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


def pack_padded_rows(rows: Sequence[dict[str, np.ndarray]], length: int) -> list[dict[str, np.ndarray]]:
    """Re-pack fixed-length decoder rows without their padding: each row's used part (up to its last weighted
    target) goes, largest first, into the first of the new ``length``-position rows with room (first-fit
    decreasing), with ``segment_ids`` and restarting ``positions``. Causal attention within a segment makes this
    compute the same losses as the padded rows on fewer positions; rows with no weighted target are dropped."""
    features = ("input_tokens", "target_tokens", "loss_weights")
    parts = []
    for row in rows:
        weighted = np.flatnonzero(row["loss_weights"])
        if len(weighted):
            parts.append({name: row[name][:weighted[-1] + 1] for name in features})
    if any(len(part["input_tokens"]) > length for part in parts):
        raise ValueError(f"a row uses more than {length} positions: raise the packed row length")
    bins: list[list[dict[str, np.ndarray]]] = []
    room: list[int] = []
    for part in sorted(parts, key=lambda p: -len(p["input_tokens"])):  # stable: ties keep their order
        size = len(part["input_tokens"])
        slot = next((b for b, free in enumerate(room) if free >= size), None)
        if slot is None:
            bins.append([])
            room.append(length)
            slot = len(bins) - 1
        bins[slot].append(part)
        room[slot] -= size
    return [lay_out(members, features, length) for members in bins]
