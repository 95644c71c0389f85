"""Encoder-decoder rows: seqio's ``trim_and_pack_dataset`` plus ``EncDecFeatureConverter``, in numpy.

A row packs one or more (inputs, targets) examples, in order, into ``inputs_length``/``targets_length`` slots:

- ``encoder_input_tokens``/``decoder_target_tokens``: the examples' ids one after another, then 0 (padding);
- ``*_segment_ids``: 1, 2, ... per example, 0 on padding; ``*_positions``: 0, 1, ... restarting per example, 0 on
  padding;
- ``decoder_input_tokens``: the targets shifted right by one within each example, 0 (BOS) at each example's start;
- ``decoder_loss_weights``: 1 on real target positions, 0 on padding.

All arrays are int32. As seqio, an example longer than the row is truncated (its EOS may be cut). Unlike seqio, which
weights ``targets != 0``, the loss weights come from the segment ids, so a genuine id-0 target still counts.
The model must keep attention within a segment (encoder, decoder and cross attention).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..objectives.lengths import check_row_lengths
from .row_packing import ObjectiveRowBuilder, lay_out

ROW_FEATURES = ("encoder_input_tokens", "encoder_segment_ids", "encoder_positions", "decoder_target_tokens",
                "decoder_input_tokens", "decoder_segment_ids", "decoder_positions", "decoder_loss_weights")


def first_fit_groups(lengths: Sequence[tuple[int, int]], inputs_length: int, targets_length: int) -> list[list[int]]:
    """Indices of examples grouped greedily in order (seqio's packing): example ``i`` joins the current group if
    the group's summed (inputs, targets) lengths stay within the limits, else it starts a new group. An example
    over the limits forms a group of its own (and is truncated when packed)."""
    if inputs_length < 0 or targets_length < 1:
        raise ValueError("inputs_length must be >= 0 and targets_length >= 1, "
                         f"got {inputs_length} and {targets_length}")
    groups: list[list[int]] = []
    used_inputs = used_targets = 0
    for index, (n_inputs, n_targets) in enumerate(lengths):
        if n_inputs < 0 or n_targets < 0:
            raise ValueError(f"lengths must be >= 0, got {(n_inputs, n_targets)} for example {index}")
        if groups and used_inputs + n_inputs <= inputs_length and used_targets + n_targets <= targets_length:
            groups[-1].append(index)
            used_inputs += n_inputs
            used_targets += n_targets
        else:
            groups.append([index])
            used_inputs, used_targets = n_inputs, n_targets
    return groups


def make_autoregressive_inputs(targets: np.ndarray, segment_ids: np.ndarray | None = None,
                               bos_id: int = 0) -> np.ndarray:
    """Decoder inputs (seqio): ``targets`` shifted right by one along the last axis, with ``bos_id`` first and, given
    ``segment_ids``, at every position whose segment id differs from the previous position's (packed segments)."""
    targets = np.asarray(targets)
    shifted = np.empty_like(targets)
    shifted[..., 0] = bos_id
    shifted[..., 1:] = targets[..., :-1]
    if segment_ids is None:
        return shifted
    segment_ids = np.asarray(segment_ids)
    if segment_ids.shape != targets.shape:
        raise ValueError(f"segment_ids shape {segment_ids.shape} differs from targets shape {targets.shape}")
    previous = np.zeros_like(segment_ids)
    previous[..., 1:] = segment_ids[..., :-1]
    return np.where(segment_ids != previous, np.asarray(bos_id, dtype=targets.dtype), shifted)


def pack_encdec_row(examples: Sequence[tuple[np.ndarray, np.ndarray]], inputs_length: int,
                    targets_length: int) -> dict[str, np.ndarray]:
    """One packed, padded row (see the module doc) from ``examples`` = [(inputs, targets), ...].

    Each feature of each example is first cut to the row length (seqio's trim); examples that then still do not
    fit together raise ``ValueError`` (group them with :func:`first_fit_groups`).
    """
    check_row_lengths(inputs_length, targets_length)
    if len(examples) == 0:
        raise ValueError("a row needs at least one example")
    inputs, targets = [], []
    for index, (example_inputs, example_targets) in enumerate(examples):
        example_inputs, example_targets = np.asarray(example_inputs), np.asarray(example_targets)
        if example_inputs.ndim != 1 or example_targets.ndim != 1:
            raise ValueError(f"example {index}: inputs and targets must be 1-D, got shapes {example_inputs.shape} "
                             f"and {example_targets.shape}")
        inputs.append(example_inputs[:inputs_length])
        targets.append(example_targets[:targets_length])
    used_inputs, used_targets = sum(map(len, inputs)), sum(map(len, targets))
    if used_inputs > inputs_length or used_targets > targets_length:
        raise ValueError(f"{len(examples)} examples need {used_inputs} input and {used_targets} target slots, over "
                         f"the row's {inputs_length}/{targets_length}: group them with first_fit_groups")
    encoder = lay_out([{"tokens": array} for array in inputs], ("tokens",), inputs_length)
    decoder = lay_out([{"tokens": array} for array in targets], ("tokens",), targets_length)
    return {
        "encoder_input_tokens": encoder["tokens"],
        "encoder_segment_ids": encoder["segment_ids"],
        "encoder_positions": encoder["positions"],
        "decoder_target_tokens": decoder["tokens"],
        "decoder_input_tokens": make_autoregressive_inputs(decoder["tokens"], decoder["segment_ids"], bos_id=0),
        "decoder_segment_ids": decoder["segment_ids"],
        "decoder_positions": decoder["positions"],
        "decoder_loss_weights": (decoder["segment_ids"] > 0).astype(np.int32),
    }


def pack_encdec(examples: Sequence[tuple[np.ndarray, np.ndarray]], inputs_length: int,
                targets_length: int) -> list[dict[str, np.ndarray]]:
    """All ``examples`` packed in order into rows: :func:`first_fit_groups` then :func:`pack_encdec_row`."""
    lengths = [(len(example_inputs), len(example_targets)) for example_inputs, example_targets in examples]
    return [pack_encdec_row([examples[index] for index in group], inputs_length, targets_length)
            for group in first_fit_groups(lengths, inputs_length, targets_length)]


@dataclass(frozen=True)
class EncDecRowBuilder(ObjectiveRowBuilder):
    """:class:`ObjectiveRowBuilder` packing a sample's examples, in order, into one encoder-decoder row."""

    def __post_init__(self) -> None:
        check_row_lengths(self.inputs_length, self.targets_length)
        super().__post_init__()

    def pack(self, examples: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        return pack_encdec_row(examples, self.inputs_length, self.targets_length)
