"""Packing into encoder-decoder rows (reference §1.6): seqio's anchors, then real span-corruption rows."""
import pickle

import numpy as np
import pytest

from c4prep.training.objectives import OBJECTIVES, make_objective
from c4prep.training.data.encdec_rows import (ROW_FEATURES, EncDecRowBuilder, first_fit_groups,
                                              make_autoregressive_inputs, pack_encdec, pack_encdec_row)
from c4prep.training.seeding import example_rng

VOCAB = 600


@pytest.fixture(scope="module")
def ids(ptb_ids) -> np.ndarray:
    return ptb_ids


def as_lists(row: dict[str, np.ndarray]) -> dict[str, list[int]]:
    return {key: value.tolist() for key, value in row.items()}


# ------------------------------------------------------------------------------------------------- seqio's anchors

def test_seqio_encdec_feature_converter_example():
    """The worked example of seqio's EncDecFeatureConverter docstring."""
    examples = [(np.array([7, 8, 5, 1]), np.array([3, 9, 1])), (np.array([8, 4, 9, 3, 1]), np.array([4, 1]))]
    assert first_fit_groups([(4, 3), (5, 2)], 10, 7) == [[0, 1]]
    row = pack_encdec_row(examples, 10, 7)
    assert sorted(row) == sorted(ROW_FEATURES) and all(value.dtype == np.int32 for value in row.values())
    assert as_lists(row) == {
        "encoder_input_tokens": [7, 8, 5, 1, 8, 4, 9, 3, 1, 0],
        "encoder_segment_ids": [1, 1, 1, 1, 2, 2, 2, 2, 2, 0],
        "encoder_positions": [0, 1, 2, 3, 0, 1, 2, 3, 4, 0],
        "decoder_target_tokens": [3, 9, 1, 4, 1, 0, 0],
        "decoder_input_tokens": [0, 3, 9, 0, 4, 0, 0],
        "decoder_loss_weights": [1, 1, 1, 1, 1, 0, 0],
        "decoder_segment_ids": [1, 1, 1, 2, 2, 0, 0],
        "decoder_positions": [0, 1, 2, 0, 1, 0, 0],
    }


def test_seqio_packed_long_sequences():
    """seqio's test_encoder_decoder_packed_long_sequences: two examples too long to share a 7/3 row."""
    examples = [(np.array([7, 8, 5, 6, 9, 4, 1]), np.array([3, 9, 1])),
                (np.array([8, 4, 9, 3, 5, 1]), np.array([4, 1]))]
    first, second = pack_encdec(examples, 7, 3)
    assert as_lists(first)["encoder_segment_ids"] == [1] * 7 and as_lists(first)["decoder_input_tokens"] == [0, 3, 9]
    assert as_lists(second) == {
        "encoder_input_tokens": [8, 4, 9, 3, 5, 1, 0],
        "encoder_segment_ids": [1, 1, 1, 1, 1, 1, 0],
        "encoder_positions": [0, 1, 2, 3, 4, 5, 0],
        "decoder_target_tokens": [4, 1, 0],
        "decoder_input_tokens": [0, 4, 0],
        "decoder_loss_weights": [1, 1, 0],
        "decoder_segment_ids": [1, 1, 0],
        "decoder_positions": [0, 1, 0],
    }


def test_first_fit_groups_greedy_in_order():
    lengths = [(5, 3), (4, 2), (2, 2), (10, 1), (1, 1), (20, 1), (1, 1), (1, 9), (1, 1)]
    assert first_fit_groups(lengths, 10, 5) == [[0, 1], [2], [3], [4], [5], [6], [7], [8]]
    assert first_fit_groups([(3, 1)] * 7, 10, 5) == [[0, 1, 2], [3, 4, 5], [6]]  # no look-back into closed groups
    assert first_fit_groups([], 10, 5) == []
    with pytest.raises(ValueError, match=">= 0"):
        first_fit_groups([(1, -1)], 10, 5)
    with pytest.raises(ValueError, match="targets_length >= 1"):
        first_fit_groups([(1, 1)], 5, 0)
    assert first_fit_groups([(0, 3), (0, 2), (0, 4)], 0, 5) == [[0, 1], [2]]  # decoder-only LM: no inputs


def test_over_long_example_is_truncated_eos_included():
    row = pack_encdec_row([(np.arange(2, 14), np.array([5, 6, 7, 1]))], 10, 3)
    assert row["encoder_input_tokens"].tolist() == list(range(2, 12))  # the EOS (and more) cut, as seqio
    assert row["decoder_target_tokens"].tolist() == [5, 6, 7]
    assert row["encoder_segment_ids"].tolist() == [1] * 10


def test_examples_that_do_not_fit_together_raise():
    with pytest.raises(ValueError, match="group them with first_fit_groups"):
        pack_encdec_row([(np.arange(2, 8), np.array([5, 1])), (np.arange(2, 8), np.array([5, 1]))], 10, 5)
    with pytest.raises(ValueError, match="at least one"):
        pack_encdec_row([], 10, 5)


def test_genuine_id_zero_target_keeps_its_loss_weight():
    row = pack_encdec_row([(np.array([4, 1]), np.array([0, 7, 1]))], 4, 5)
    assert row["decoder_loss_weights"].tolist() == [1, 1, 1, 0, 0]  # seqio's `targets != 0` would drop the first


def test_make_autoregressive_inputs():
    targets = np.array([[3, 9, 1, 4, 1, 0, 0], [5, 6, 7, 8, 1, 0, 0]])
    segments = np.array([[1, 1, 1, 2, 2, 0, 0], [1, 1, 1, 1, 1, 0, 0]])
    assert make_autoregressive_inputs(targets, segments).tolist() == [[0, 3, 9, 0, 4, 0, 0], [0, 5, 6, 7, 8, 0, 0]]
    assert make_autoregressive_inputs(targets, segments, bos_id=2)[0].tolist() == [2, 3, 9, 2, 4, 2, 0]  # as seqio
    assert make_autoregressive_inputs(np.array([3, 9, 1])).tolist() == [0, 3, 9]
    with pytest.raises(ValueError, match="shape"):
        make_autoregressive_inputs(targets, segments[:, :3])


# ---------------------------------------------------------------------------------------------- real rows

def check_row(row: dict[str, np.ndarray], examples: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """The row holds ``examples`` in order with consistent ids, positions, shifted inputs, weights and padding."""
    for side, (tokens_key, segments_key, positions_key) in enumerate((
            ("encoder_input_tokens", "encoder_segment_ids", "encoder_positions"),
            ("decoder_target_tokens", "decoder_segment_ids", "decoder_positions"))):
        segments, positions = row[segments_key], row[positions_key]
        used = int((segments > 0).sum())
        assert np.all(segments[:used] > 0) and np.all(segments[used:] == 0)  # padding only at the end
        np.testing.assert_array_equal(row[tokens_key][:used], np.concatenate([ex[side] for ex in examples]))
        assert not row[tokens_key][used:].any() and not positions[used:].any()
        for number, example in enumerate(examples, start=1):
            np.testing.assert_array_equal(positions[segments == number], np.arange(len(example[side])))
    targets, segments = row["decoder_target_tokens"], row["decoder_segment_ids"]
    starts = np.flatnonzero(np.diff(np.r_[0, segments]) != 0)
    assert not row["decoder_input_tokens"][starts].any()  # BOS 0 at each segment start (and first pad)
    inner = np.setdiff1d(np.flatnonzero(segments), starts)
    np.testing.assert_array_equal(row["decoder_input_tokens"][inner], targets[inner - 1])
    np.testing.assert_array_equal(row["decoder_loss_weights"], (segments > 0).astype(np.int32))


def test_full_568_segment_fills_a_512_114_row(ids):
    builder = EncDecRowBuilder(make_objective("span_corruption", vocab_size=VOCAB), 512, 114, seed=3)
    row = builder([ids[:568]], [0], epoch=0)
    assert row["encoder_segment_ids"].tolist() == [1] * 512 and row["decoder_segment_ids"].tolist() == [1] * 114
    assert row["encoder_input_tokens"][-1] == 1 and row["decoder_target_tokens"][-1] == 1
    check_row(row, [make_objective("span_corruption", vocab_size=VOCAB)(ids[:568], example_rng(3, 0, 0))])


def test_tail_segments_pack_into_rows(ids):
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    lengths = [37, 120, 200, 90, 15, 300, 60, 250, 8, 1, 2, 400]
    offsets = np.cumsum([0] + lengths)
    segments = [ids[offsets[k]:offsets[k + 1]] for k in range(len(lengths))]
    segment_ids = [1000 + k for k in range(len(lengths))]
    groups = first_fit_groups([objective.output_lengths(n) for n in lengths], 512, 114)
    assert 1 < len(groups) < len(lengths)  # some segments share a row
    builder = EncDecRowBuilder(objective, 512, 114, seed=5)
    for group in groups:
        row = builder([segments[k] for k in group], [segment_ids[k] for k in group], epoch=2)
        examples = [objective(segments[k], example_rng(5, 2, segment_ids[k])) for k in group]
        check_row(row, examples)  # each example is a pure function of (seed, epoch, segment id)


def test_row_builder_is_picklable_and_deterministic(ids):
    builder = EncDecRowBuilder(make_objective("span_corruption", vocab_size=VOCAB), 512, 114, seed=1)
    clone = pickle.loads(pickle.dumps(builder))
    segments, segment_ids = [ids[:100], ids[100:300]], [7, 8]
    row, again = builder(segments, segment_ids, epoch=4), clone(segments, segment_ids, epoch=4)
    assert all(np.array_equal(row[key], again[key]) for key in ROW_FEATURES)
    other_epoch = builder(segments, segment_ids, epoch=5)
    assert not np.array_equal(row["encoder_input_tokens"], other_epoch["encoder_input_tokens"])
    with pytest.raises(ValueError, match="2 segments but 1 segment ids"):
        builder(segments, [7], epoch=0)
    with pytest.raises(ValueError, match="seed"):
        EncDecRowBuilder(builder.objective, 512, 114, seed=-1)


@pytest.mark.parametrize("name", sorted(set(OBJECTIVES) - {"lm"}))  # lm rows: test_gpt_data
def test_every_objective_fills_rows_at_its_segment_length(name, ids):
    objective = make_objective(name, vocab_size=VOCAB)
    targets_length = 114 if name == "span_corruption" else 512
    length = objective.segment_length(512, targets_length)
    builder = EncDecRowBuilder(objective, 512, targets_length, seed=0)
    for k in range(5):
        segment = ids[k * length:(k + 1) * length]
        row = builder([segment], [k], epoch=0)
        check_row(row, [objective(segment, example_rng(0, 0, k))])
