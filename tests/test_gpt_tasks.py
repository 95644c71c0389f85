"""GPT-1 fine-tuning input transformations and rows (training/experiments/gpt1/input_transforms.py) and the Yelp reader (yelp.py)."""
from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
from c4prep.training.experiments.gpt1.input_transforms import (
    FinetuneDataError,
    FinetuneExample,
    FinetuneRows,
    SpecialTokens,
    classification_sequences,
    entailment_sequences,
    finetune_row,
    multiple_choice_sequences,
    similarity_sequences,
)
from c4prep.training.experiments.gpt1.yelp import balanced_sample, read_yelp

VOCAB = 100
SPECIAL = SpecialTokens.after(VOCAB)
S, D, E = 100, 101, 102


def _eq(actual: list[np.ndarray], expected: list[list[int]]) -> None:
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.dtype == np.int64 and got.ndim == 1
        np.testing.assert_array_equal(got, np.array(want, dtype=np.int64))


# --- special tokens ---

def test_special_tokens_after_vocab():
    assert SPECIAL == SpecialTokens(start=100, delimiter=101, extract=102)
    assert SPECIAL.size == 103
    assert SPECIAL.ids == (100, 101, 102)
    assert SpecialTokens.after(40478).size == 40481  # GPT-1: 40,478 BPE entries + 3 special tokens


@pytest.mark.parametrize("ids", [(1, 1, 2), (-1, 2, 3)])
def test_special_tokens_rejects_bad_ids(ids):
    with pytest.raises(FinetuneDataError):
        SpecialTokens(*ids)
    with pytest.raises(FinetuneDataError, match="vocab_size"):
        SpecialTokens.after(0)


# --- transformations ---

def test_classification():
    _eq(classification_sequences([5, 6, 7], SPECIAL, 16), [[S, 5, 6, 7, E]])
    _eq(classification_sequences(np.array([], dtype=np.int32), SPECIAL, 16), [[S, E]])


def test_entailment():
    _eq(entailment_sequences(np.array([1, 2], dtype=np.int32), [3, 4, 5], SPECIAL, 16), [[S, 1, 2, D, 3, 4, 5, E]])


def test_similarity_both_orders():
    _eq(similarity_sequences([1, 2], [3], SPECIAL, 16), [[S, 1, 2, D, 3, E], [S, 3, D, 1, 2, E]])


def test_multiple_choice_one_sequence_per_answer():
    got = multiple_choice_sequences([1, 2, 3], [[7], [8, 9], [10, 11, 12]], SPECIAL, 16)
    _eq(got, [[S, 1, 2, 3, D, 7, E], [S, 1, 2, 3, D, 8, 9, E], [S, 1, 2, 3, D, 10, 11, 12, E]])


def test_single_text_truncation_keeps_prefix_and_extract():
    _eq(classification_sequences(np.arange(50), SPECIAL, 8), [[S, 0, 1, 2, 3, 4, 5, E]])
    _eq(classification_sequences([9, 8], SPECIAL, 3), [[S, 9, E]])


def test_pair_truncation_follows_transform_roc():
    # max_length 10 -> each part keeps 10 // 2 - 2 = 3 tokens; total 3 + 3 + 3 = 9 <= 10.
    _eq(entailment_sequences(np.arange(20), np.arange(30, 60), SPECIAL, 10), [[S, 0, 1, 2, D, 30, 31, 32, E]])
    # A short part's unused room is not given to the long one.
    _eq(entailment_sequences([1], np.arange(30, 60), SPECIAL, 10), [[S, 1, D, 30, 31, 32, E]])
    _eq(similarity_sequences(np.arange(20), [50], SPECIAL, 11), [[S, 0, 1, 2, D, 50, E], [S, 50, D, 0, 1, 2, E]])
    _eq(multiple_choice_sequences(np.arange(9), [np.arange(10, 19), [20]], SPECIAL, 6),
        [[S, 0, D, 10, E], [S, 0, D, 20, E]])


@pytest.mark.parametrize("max_length", [6, 7, 8, 9, 64, 65, 512])
def test_long_inputs_fit_and_end_with_extract(max_length):
    long_a, long_b = np.arange(1000) % VOCAB, (np.arange(1000) * 7) % VOCAB
    outputs = (classification_sequences(long_a, SPECIAL, max_length)
               + entailment_sequences(long_a, long_b, SPECIAL, max_length)
               + similarity_sequences(long_a, long_b, SPECIAL, max_length)
               + multiple_choice_sequences(long_a, [long_b, long_a, long_b[:3]], SPECIAL, max_length))
    assert len(outputs) == 7
    for seq in outputs:
        assert len(seq) <= max_length
        assert seq[0] == S and seq[-1] == E
        assert (seq == E).sum() == 1
    for seq in outputs[1:6]:  # pairs with two long parts: 3 + 2 * (max_length // 2 - 2) tokens
        assert len(seq) == 2 * (max_length // 2) - 1
    assert len(outputs[0]) == max_length


def test_transformation_errors():
    with pytest.raises(FinetuneDataError, match="max_length >= 6"):
        entailment_sequences([1], [2], SPECIAL, 5)
    with pytest.raises(FinetuneDataError, match="max_length >= 3"):
        classification_sequences([1], SPECIAL, 2)
    with pytest.raises(FinetuneDataError, match="special token"):
        classification_sequences([1, D, 2], SPECIAL, 16)
    with pytest.raises(FinetuneDataError, match="outside"):
        classification_sequences([1, 103], SPECIAL, 16)
    with pytest.raises(FinetuneDataError, match="outside"):
        classification_sequences([-1], SPECIAL, 16)
    with pytest.raises(FinetuneDataError, match="integer"):
        classification_sequences(np.array([1.0, 2.0]), SPECIAL, 16)
    with pytest.raises(FinetuneDataError, match="1-D"):
        classification_sequences(np.ones((2, 2), dtype=np.int64), SPECIAL, 16)
    with pytest.raises(FinetuneDataError, match="answers"):
        multiple_choice_sequences([1], [], SPECIAL, 16)


# --- rows ---

def test_finetune_row_exact():
    example = FinetuneExample(tuple(similarity_sequences([1, 2], [3], SPECIAL, 8)), label=1)
    row = finetune_row(example, max_length=8, pad_id=0)
    assert set(row) == {"input_tokens", "target_tokens", "lm_weights", "extract_positions", "label"}
    np.testing.assert_array_equal(row["input_tokens"], [[S, 1, 2, D, 3, E, 0, 0], [S, 3, D, 1, 2, E, 0, 0]])
    np.testing.assert_array_equal(row["target_tokens"], [[1, 2, D, 3, E, 0, 0, 0], [3, D, 1, 2, E, 0, 0, 0]])
    np.testing.assert_array_equal(row["lm_weights"], [[1, 1, 1, 1, 1, 0, 0, 0]] * 2)
    np.testing.assert_array_equal(row["extract_positions"], [5, 5])
    assert row["input_tokens"].dtype == np.int64 and row["target_tokens"].dtype == np.int64
    assert row["lm_weights"].dtype == np.int32 and row["extract_positions"].dtype == np.int64
    assert row["label"].shape == () and row["label"].dtype == np.int64 and int(row["label"]) == 1


def test_finetune_row_ragged_sequences_and_pad_id():
    seqs = multiple_choice_sequences(np.arange(1, 6), [[7], np.arange(10, 19)], SPECIAL, 12)
    row = finetune_row(FinetuneExample(tuple(seqs), label=0), max_length=12, pad_id=99)
    lengths = [len(s) for s in seqs]
    assert lengths == [8, 11]  # each part keeps 12 // 2 - 2 = 4 tokens
    assert row["input_tokens"].shape == row["target_tokens"].shape == row["lm_weights"].shape == (2, 12)
    np.testing.assert_array_equal(row["extract_positions"], [7, 10])
    for s, n in enumerate(lengths):
        inputs, targets, weights = row["input_tokens"][s], row["target_tokens"][s], row["lm_weights"][s]
        assert inputs[row["extract_positions"][s]] == E
        assert (inputs[n:] == 99).all() and (targets[n - 1:] == 99).all()
        on = weights.astype(bool)
        assert on.sum() == n - 1 and on[:n - 1].all()
        # LM targets are the input shifted by one on every weighted position.
        np.testing.assert_array_equal(targets[on], inputs[1:][on[:-1]])
        np.testing.assert_array_equal(targets[:n - 1], seqs[s][1:])


def test_finetune_row_and_example_errors():
    example = FinetuneExample(tuple(classification_sequences(np.arange(10), SPECIAL, 12)), label=0)
    with pytest.raises(FinetuneDataError, match="max_length is 8"):
        finetune_row(example, max_length=8)
    with pytest.raises(FinetuneDataError, match="label"):
        FinetuneExample((np.array([S, E]),), label=-1)
    with pytest.raises(FinetuneDataError, match="non-empty"):
        FinetuneExample((), label=0)
    with pytest.raises(FinetuneDataError, match="empty"):
        FinetuneExample((np.array([], dtype=np.int64),), label=0)
    converted = FinetuneExample(([S, 4, E],), label=np.int32(2))
    assert converted.sequences[0].dtype == np.int64 and type(converted.label) is int


def _rows() -> FinetuneRows:
    examples = tuple(FinetuneExample(tuple(entailment_sequences(np.arange(i + 1), [50 + i], SPECIAL, 16)), i % 3)
                     for i in range(5))
    return FinetuneRows(examples, max_length=16, pad_id=0)


def test_finetune_rows_picklable_and_deterministic():
    rows = _rows()
    assert len(rows) == 5
    clone = pickle.loads(pickle.dumps(rows))
    for index in range(len(rows)):
        first, again, other_epoch, pickled = rows(index, 0), rows(index, 0), rows(index, 7), clone(index, 3)
        for name in first:
            np.testing.assert_array_equal(first[name], again[name])
            np.testing.assert_array_equal(first[name], other_epoch[name])
            np.testing.assert_array_equal(first[name], pickled[name])
        expected = finetune_row(rows.examples[index], 16)
        np.testing.assert_array_equal(first["input_tokens"], expected["input_tokens"])
        assert int(first["label"]) == index % 3
        assert first["extract_positions"][0] == index + 4  # start + (index + 1) + delim + 1 token, then extract
    with pytest.raises(IndexError):
        rows(5, 0)


def test_finetune_rows_errors():
    one = FinetuneExample(tuple(classification_sequences([1], SPECIAL, 8)), 0)
    two = FinetuneExample(tuple(similarity_sequences([1], [2], SPECIAL, 8)), 0)
    with pytest.raises(FinetuneDataError, match="same count"):
        FinetuneRows((one, two), max_length=8)
    with pytest.raises(FinetuneDataError, match="max_length is 4"):
        FinetuneRows((two,), max_length=4)
    with pytest.raises(FinetuneDataError, match="at least one"):
        FinetuneRows((), max_length=8)


# --- Yelp ---

@pytest.fixture(scope="module")
def yelp_dev(shared_data):
    return read_yelp(shared_data / "yelp_short_shen", "dev")


def test_read_yelp_dev_counts_and_order(yelp_dev, shared_data):
    counts = Counter(label for _, label in yelp_dev)
    assert counts == {0: 25278, 1: 38205}
    labels = [label for _, label in yelp_dev]
    assert labels == [0] * 25278 + [1] * 38205  # label 0 file first, each in file order
    assert yelp_dev[0] == ("ok never going back to this place again .", 0)
    first_positive = (shared_data / "yelp_short_shen" / "sentiment.dev.1").read_text().split("\n", 1)[0]
    assert yelp_dev[25278] == (first_positive, 1)
    assert all(text and not text.endswith("\n") for text, _ in yelp_dev)


def test_read_yelp_test_counts(shared_data):
    counts = Counter(label for _, label in read_yelp(str(shared_data / "yelp_short_shen"), "test"))
    assert counts == {0: 50278, 1: 76392}


def test_read_yelp_errors(shared_data, tmp_path):
    with pytest.raises(FinetuneDataError, match="split"):
        read_yelp(shared_data / "yelp_short_shen", "train")
    with pytest.raises(FinetuneDataError, match="no such folder"):
        read_yelp(tmp_path / "missing", "dev")
    (tmp_path / "sentiment.dev.0").write_text("bad .\n")
    with pytest.raises(FinetuneDataError, match=r"sentiment\.dev\.1"):
        read_yelp(tmp_path, "dev")
    (tmp_path / "sentiment.dev.1").write_bytes(b"good .\n\xff bad .\n")  # was a UnicodeDecodeError traceback
    with pytest.raises(FinetuneDataError, match=r"sentiment\.dev\.1 is not UTF-8 text \(byte 7\)"):
        read_yelp(tmp_path, "dev")
    (tmp_path / "sentiment.dev.1").write_text("")  # both empty: "no examples to sample from", naming no file
    with pytest.raises(FinetuneDataError, match=r"sentiment\.dev\.1 is empty; the Yelp folder needs sentences"):
        read_yelp(tmp_path, "dev")


def test_balanced_sample(yelp_dev):
    sample = balanced_sample(yelp_dev, per_label=500, seed=3)
    assert len(sample) == 1000
    assert Counter(label for _, label in sample) == {0: 500, 1: 500}
    pool = set(yelp_dev)
    assert all(example in pool for example in sample)
    labels = [label for _, label in sample]
    assert labels != sorted(labels) and 0 < sum(labels[:500]) < 500  # interleaved, not grouped
    assert balanced_sample(yelp_dev, per_label=500, seed=3) == sample
    other = balanced_sample(yelp_dev, per_label=500, seed=4)
    assert other != sample and set(other) != set(sample)


def test_balanced_sample_without_replacement_and_label_independence():
    examples = [(f"neg {i}", 0) for i in range(20)] + [(f"pos {i}", 1) for i in range(7)]
    sample = balanced_sample(examples, per_label=7, seed=0)
    assert len(set(sample)) == 14  # distinct texts: drawn without replacement
    assert {text for text, label in sample if label == 1} == {f"pos {i}" for i in range(7)}
    # Label 0's picks depend only on (seed, label 0), not on the other labels' pools.
    fewer_pos = balanced_sample(examples[:22], per_label=2, seed=0)
    more_pos = balanced_sample(examples, per_label=2, seed=0)
    assert [e for e in fewer_pos if e[1] == 0] == [e for e in more_pos if e[1] == 0]


def test_balanced_sample_errors():
    examples = [("a", 0), ("b", 0), ("c", 1)]
    with pytest.raises(FinetuneDataError, match="label 1 has 1 examples"):
        balanced_sample(examples, per_label=2, seed=0)
    with pytest.raises(FinetuneDataError, match="per_label"):
        balanced_sample(examples, per_label=0, seed=0)
    with pytest.raises(FinetuneDataError, match="no examples"):
        balanced_sample([], per_label=1, seed=0)
    with pytest.raises(FinetuneDataError, match="labels"):
        balanced_sample([("a", -1)], per_label=1, seed=0)
