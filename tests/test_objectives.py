"""The registry and the other T5-paper objectives (Table 3) on real PTB token ids."""
import pickle
from collections import Counter

import numpy as np
import pytest

from c4prep.training.objectives import OBJECTIVES, Objective, make_objective
from c4prep.training.objectives.noise import (bert_corrupt, drop_noise_tokens, drop_nonnoise_tokens, iid_noise_mask,
                                              limit_noise_spans, noise_span_targets, noise_span_to_unique_sentinel,
                                              noise_token_to_sentinel, nonnoise_span_to_unique_sentinel,
                                              permute_noise_tokens, random_prefix_noise_mask)
from c4prep.training.seeding import example_rng

EOS = 1
VOCAB = 600  # 500 SentencePiece pieces + 100 sentinels
MASK = VOCAB - 1
FIRST_SENTINEL = VOCAB - 100


@pytest.fixture(scope="module")
def ids(ptb_vocab, ptb_ids) -> np.ndarray:
    assert ptb_vocab.vocab_size == VOCAB
    return ptb_ids


def chunks(ids: np.ndarray, length: int, count: int) -> list[np.ndarray]:
    return [ids[k * length:(k + 1) * length] for k in range(count)]


# Paper Table 3, with one id per word and the mask that corrupts "for inviting" and "last".
WORDS = "Thank you for inviting me to your party last week .".split()
TABLE = {word: 3 + k for k, word in enumerate(WORDS)}
TOKENS = np.array([TABLE[word] for word in WORDS])
TABLE3_MASK = np.array([word in {"for", "inviting", "last"} for word in WORDS])
NAMES = {v: k for k, v in TABLE.items()} | {99: "<X>", 98: "<Y>", 97: "<Z>"}


def words(ids: np.ndarray) -> str:
    return " ".join(NAMES[t] for t in ids.tolist())


# -------------------------------------------------------------------------------------------------------- registry

TABLE3 = sorted(set(OBJECTIVES) - {"lm"})  # the encoder-decoder objectives; "lm" is decoder-only (test_gpt_data)


def test_registry_builds_every_objective():
    assert sorted(OBJECTIVES) == ["bert_style", "deshuffling", "iid_drop_tokens", "iid_replace_spans", "lm",
                                  "mass_style", "prefix_lm", "span_corruption"]
    assert make_objective("lm", vocab_size=VOCAB).output_lengths(65) == (0, 65)
    for name in TABLE3:
        objective = make_objective(name, vocab_size=VOCAB, eos_id=EOS)
        assert isinstance(objective, Objective) and objective.name == name
        assert pickle.loads(pickle.dumps(objective)) == objective
    assert make_objective("span_corruption", vocab_size=VOCAB, noise_density=0.3).noise_density == 0.3


def test_registry_errors_are_one_line():
    with pytest.raises(ValueError, match="unknown objective 'bert'; valid names: bert_style, deshuffling, "
                                         "iid_drop_tokens, iid_replace_spans, lm, mass_style, prefix_lm, span_corruption"):
        make_objective("bert", vocab_size=VOCAB)
    with pytest.raises(ValueError, match="no parameter 'noise_density'; valid parameters: vocab_size"):
        make_objective("deshuffling", vocab_size=VOCAB, noise_density=0.1)
    with pytest.raises(ValueError, match="needs vocab_size"):
        make_objective("prefix_lm")


def test_parameters_an_objective_does_not_take_stay_neutral():
    assert make_objective("deshuffling", vocab_size=VOCAB).noise_density is None
    lm = make_objective("lm", vocab_size=VOCAB)
    assert lm.max_sentinels == 0 and lm.eos_id is None
    inputs, targets = lm(np.array([VOCAB - 1, 5]), example_rng(0))  # no sentinels: every id is regular
    assert inputs.tolist() == [] and targets.tolist() == [VOCAB - 1, 5] and targets.dtype == np.int32


# One example of each objective for a 20-token segment and example_rng(0): a change to any mask, inputs or targets
# function, or to the order of the draws, shows here.
PINNED = {
    "bert_style": ([3, 599, 599, 599, 7, 8, 9, 10, 11, 12, 13, 599, 15, 599, 17, 599, 19, 20, 21, 22, 1],
                   [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 1]),
    "deshuffling": ([7, 22, 9, 5, 16, 19, 6, 14, 13, 11, 3, 15, 10, 8, 21, 20, 17, 12, 4, 18, 1],
                    [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 1]),
    "iid_drop_tokens": ([3, 7, 8, 9, 10, 11, 12, 13, 15, 17, 19, 20, 22, 1],
                        [4, 5, 6, 14, 16, 18, 21, 1]),
    "iid_replace_spans": ([3, 599, 7, 8, 9, 10, 11, 12, 13, 598, 15, 597, 17, 596, 19, 20, 595, 22, 1],
                          [599, 4, 5, 6, 598, 14, 597, 16, 596, 18, 595, 21, 594, 1]),
    "lm": ([],
           [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]),
    "mass_style": ([3, 599, 599, 599, 7, 8, 9, 10, 11, 12, 13, 599, 15, 599, 17, 599, 19, 20, 599, 22, 1],
                   [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 1]),
    "prefix_lm": ([3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 1],
                  [20, 21, 22, 1]),
    "span_corruption": ([3, 4, 5, 6, 7, 599, 12, 13, 14, 15, 16, 17, 18, 19, 20, 598, 1],
                        [599, 8, 9, 10, 11, 598, 21, 22, 1]),
}


def test_examples_are_pinned():
    assert sorted(PINNED) == sorted(OBJECTIVES)
    for name, expected in PINNED.items():
        params = {} if name in ("prefix_lm", "deshuffling", "lm") else {"noise_density": 0.3}
        inputs, targets = make_objective(name, vocab_size=VOCAB, **params)(np.arange(3, 23), example_rng(0))
        assert (inputs.tolist(), targets.tolist()) == expected, name


# ------------------------------------------------------------------------------------------- paper Table 3, by mask

def test_table3_rows_given_the_mask():
    assert words(noise_token_to_sentinel(TOKENS, TABLE3_MASK, 100)).replace("<X>", "<M>") == \
        "Thank you <M> <M> me to your party <M> week ."
    assert words(noise_span_to_unique_sentinel(TOKENS, TABLE3_MASK, 100)) == "Thank you <X> me to your party <Y> week ."
    assert words(noise_span_targets(TOKENS, TABLE3_MASK, 100)) == "<X> for inviting <Y> last <Z>"
    assert words(drop_noise_tokens(TOKENS, TABLE3_MASK)) == "Thank you me to your party week ."
    assert words(drop_nonnoise_tokens(TOKENS, TABLE3_MASK)) == "for inviting last"


def test_noise_span_targets_match_t5_when_starting_with_non_noise_and_stay_aligned_otherwise():
    rng = example_rng(3)
    for _ in range(300):
        mask = rng.random(30) < 0.3
        targets = noise_span_targets(np.arange(3, 33), mask, 100)
        if not mask[0]:
            np.testing.assert_array_equal(targets, nonnoise_span_to_unique_sentinel(np.arange(3, 33), mask, 100))
    starts_with_noise = np.array([True, True, False, True, False])
    assert noise_span_targets(np.arange(3, 8), starts_with_noise, 100).tolist() == [99, 3, 4, 98, 6, 97]
    assert noise_span_to_unique_sentinel(np.arange(3, 8), starts_with_noise, 100).tolist() == [99, 5, 98, 7]


def test_limit_noise_spans_caps_the_sentinels():
    mask = np.array([False, True, False, True, False, True, False])  # 3 runs + trailing sentinel = 4
    assert limit_noise_spans(mask, 4).tolist() == mask.tolist()
    assert limit_noise_spans(mask, 3).tolist() == [False, True, False, True, False, False, False]
    assert limit_noise_spans(mask[:-1], 3).tolist() == mask[:-1].tolist()  # ends with noise: 3 sentinels


def reconstruct_replace_spans(inputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The segment from iid_replace_spans inputs and targets (a last, empty target span is the trailing sentinel)."""
    spans: dict[int, list[int]] = {}
    for token in targets[:-1].tolist():
        if token >= FIRST_SENTINEL:
            spans[token] = current = []
        else:
            current.append(token)
    out: list[int] = []
    for token in inputs[:-1].tolist():
        out.extend(spans.pop(token) if token >= FIRST_SENTINEL else [token])
    assert list(spans.values()) in ([], [[]])
    return np.array(out)


# ---------------------------------------------------------------------------------------- every objective, real data

@pytest.mark.parametrize("name", TABLE3)
def test_outputs_are_int32_with_one_trailing_eos_within_bounds(name, ids):
    objective = make_objective(name, vocab_size=VOCAB)
    targets_length = 114 if name == "span_corruption" else 512
    full = objective.segment_length(512, targets_length)
    for n in range(1, full + 1):  # the data index packs by these bounds: every length must fit the row
        assert objective.output_lengths(n)[0] <= 512 and objective.output_lengths(n)[1] <= targets_length
    offset = 0
    for length in (1, 2, 5, 33, 100, 257, full):
        segment = ids[offset:offset + length]
        offset += length
        for k in range(5):
            inputs, targets = objective(segment, example_rng(1, 0, k))
            assert inputs.dtype == targets.dtype == np.int32
            assert inputs[-1] == targets[-1] == EOS
            bound = objective.output_lengths(length)
            assert len(inputs) <= bound[0] and len(targets) <= bound[1]
            if name in ("span_corruption", "bert_style", "mass_style", "deshuffling"):
                assert (len(inputs), len(targets)) == bound  # exact lengths
            again = objective(segment, example_rng(1, 0, k))
            assert np.array_equal(inputs, again[0]) and np.array_equal(targets, again[1])


@pytest.mark.parametrize("name", sorted(set(TABLE3) - {"span_corruption"}))
def test_full_target_objectives_need_targets_as_long_as_inputs(name):
    objective = make_objective(name, vocab_size=VOCAB)
    with pytest.raises(ValueError, match=r"targets_length \(114\) must be >= inputs_length \(512\)"):
        objective.segment_length(512, 114)
    with pytest.raises(ValueError, match="too short"):
        objective.segment_length(1, 10)
    with pytest.raises(ValueError, match="regular ids"):
        objective(np.array([4, VOCAB - 3]), example_rng(0))


def test_segment_lengths_at_512():
    expected = {"prefix_lm": 512, "bert_style": 511, "mass_style": 511, "iid_drop_tokens": 511,
                "iid_replace_spans": 510, "deshuffling": 511}
    for name, length in expected.items():
        assert make_objective(name, vocab_size=VOCAB).segment_length(512, 512) == length
    assert make_objective("iid_replace_spans", vocab_size=VOCAB).segment_length(512, 513) == 511


def test_prefix_lm_splits_uniformly_inside_the_segment(ids):
    objective = make_objective("prefix_lm", vocab_size=VOCAB)
    segment = ids[:11]
    splits = Counter()
    for k in range(2000):
        inputs, targets = objective(segment, example_rng(2, k))
        np.testing.assert_array_equal(np.r_[inputs[:-1], targets[:-1]], segment)
        splits[len(inputs) - 1] += 1
    assert sorted(splits) == list(range(1, 11))  # a prefix of 1 .. L-1 tokens
    assert max(splits.values()) < 1.4 * min(splits.values())
    inputs, targets = objective(ids[:1], example_rng(0))
    assert inputs.tolist() == [EOS] and targets.tolist() == [ids[0], EOS]  # as T5: a 1-token segment is all target


def test_bert_style_rates_on_real_data(ids):
    objective = make_objective("bert_style", vocab_size=VOCAB)
    masked = randomized = total = 0
    for k, segment in enumerate(chunks(ids, 511, 150)):
        inputs, targets = objective(segment, example_rng(4, k))
        np.testing.assert_array_equal(targets[:-1], segment)  # the targets are the original text
        changed = inputs[:-1] != segment
        masked += int((inputs[:-1] == MASK).sum())
        randomized += int((changed & (inputs[:-1] != MASK)).sum())
        assert np.all((inputs[:-1][changed] == MASK) | ((inputs[:-1][changed] >= 3) & (inputs[:-1][changed] < 500)))
        total += len(segment)
    assert abs(masked / total - 0.15 * 0.8) < 0.006
    assert abs(randomized / total - 0.15 * 0.1) < 0.003  # a random id equal to the original counts as kept


def test_bert_style_is_mask_then_corruption(ids):
    # the paper's and T5's 90/10
    objective = make_objective("bert_style", vocab_size=VOCAB, mask_rate=0.9, random_rate=0.1)
    segment = ids[:300]
    rng = example_rng(5, 1)
    mask = iid_noise_mask(300, 0.15, rng)
    expected = bert_corrupt(segment, mask, VOCAB, rng, 0.9, 0.1)
    inputs, _ = objective(segment, example_rng(5, 1))
    np.testing.assert_array_equal(inputs[:-1], expected)
    assert not np.any(inputs[:-1][~mask] != segment[~mask])  # only noise positions change
    with pytest.raises(ValueError, match="sum <= 1"):
        make_objective("bert_style", vocab_size=VOCAB, mask_rate=0.95, random_rate=0.1)


def test_mass_style_masks_only(ids):
    objective = make_objective("mass_style", vocab_size=VOCAB)
    masked = total = 0
    for k, segment in enumerate(chunks(ids, 511, 100)):
        inputs, targets = objective(segment, example_rng(6, k))
        np.testing.assert_array_equal(targets[:-1], segment)
        changed = inputs[:-1] != segment
        assert np.all(inputs[:-1][changed] == MASK)
        masked += int(changed.sum())
        total += len(segment)
    assert abs(masked / total - 0.15) < 0.006


def test_iid_replace_spans_reconstructs_with_aligned_sentinels(ids):
    objective = make_objective("iid_replace_spans", vocab_size=VOCAB)
    noise = total = 0
    for k, segment in enumerate(chunks(ids, 510, 60)):
        inputs, targets = objective(segment, example_rng(7, k))
        mask = iid_noise_mask(510, 0.15, example_rng(7, k))  # the objective's only draw
        np.testing.assert_array_equal(inputs[:-1], noise_span_to_unique_sentinel(segment, mask, VOCAB))
        np.testing.assert_array_equal(targets[:-1], noise_span_targets(segment, mask, VOCAB))
        np.testing.assert_array_equal(reconstruct_replace_spans(inputs, targets), segment)
        sentinels = targets[targets >= FIRST_SENTINEL]
        assert sentinels.tolist() == list(range(VOCAB - 1, VOCAB - 1 - len(sentinels), -1))
        noise += int(mask.sum())
        total += len(segment)
    assert abs(noise / total - 0.15) < 0.01


def test_iid_replace_spans_never_runs_out_of_sentinels(ids):
    objective = make_objective("iid_replace_spans", vocab_size=VOCAB, noise_density=0.5, max_sentinels=5)
    for k in range(50):
        segment = ids[k * 200:(k + 1) * 200]
        inputs, targets = objective(segment, example_rng(8, k))
        assert set(targets[targets >= VOCAB - 5].tolist()) == set(range(VOCAB - 5, VOCAB))  # all 5, no more
        assert targets[targets >= FIRST_SENTINEL].min() >= VOCAB - 5
        np.testing.assert_array_equal(reconstruct_replace_spans(inputs, targets), segment)


def test_iid_drop_tokens_splits_the_segment(ids):
    objective = make_objective("iid_drop_tokens", vocab_size=VOCAB)
    for k, segment in enumerate(chunks(ids, 511, 40)):
        inputs, targets = objective(segment, example_rng(9, k))
        mask = iid_noise_mask(511, 0.15, example_rng(9, k))
        np.testing.assert_array_equal(inputs[:-1], segment[~mask])
        np.testing.assert_array_equal(targets[:-1], segment[mask])
        assert len(inputs) + len(targets) == 511 + 2


def test_prefix_lm_is_a_random_prefix_mask_then_both_sides(ids):
    segment = ids[:40]
    inputs, targets = make_objective("prefix_lm", vocab_size=VOCAB)(segment, example_rng(12))
    mask = random_prefix_noise_mask(40, example_rng(12))  # the objective's only draw
    assert not mask[0] and mask[-1] and mask.tolist() == sorted(mask.tolist())  # a prefix, then noise
    np.testing.assert_array_equal(inputs[:-1], drop_noise_tokens(segment, mask))
    np.testing.assert_array_equal(targets[:-1], drop_nonnoise_tokens(segment, mask))
    assert random_prefix_noise_mask(1, example_rng(0)).tolist() == [True]


def test_permute_noise_tokens_moves_only_noise(ids):
    segment, mask = ids[:30], np.arange(30) % 3 == 0
    shuffled = permute_noise_tokens(segment, mask, example_rng(13))
    np.testing.assert_array_equal(shuffled[~mask], segment[~mask])
    assert Counter(shuffled[mask].tolist()) == Counter(segment[mask].tolist())
    inputs, _ = make_objective("deshuffling", vocab_size=VOCAB)(segment, example_rng(14))  # all tokens are noise
    np.testing.assert_array_equal(inputs[:-1], permute_noise_tokens(segment, np.ones(30, bool), example_rng(14)))


def test_deshuffling_permutes_the_segment(ids):
    objective = make_objective("deshuffling", vocab_size=VOCAB)
    segment = ids[:511]
    inputs, targets = objective(segment, example_rng(10))
    np.testing.assert_array_equal(targets[:-1], segment)
    assert Counter(inputs[:-1].tolist()) == Counter(segment.tolist())
    assert (inputs[:-1] != segment).mean() > 0.5
    assert not np.array_equal(inputs, objective(segment, example_rng(11))[0])
