"""Span corruption (reference §1.1-1.7) on real PTB token ids: counts, masks, sentinels, lengths, anchors."""
from collections import Counter

import numpy as np
import pytest

from c4prep.training.objectives import Objective, make_objective
from c4prep.training.objectives.lengths import random_spans_length_plan
from c4prep.training.objectives.noise import (noise_counts, noise_span_to_unique_sentinel,
                                              nonnoise_span_to_unique_sentinel, random_segmentation,
                                              random_spans_noise_mask)
from c4prep.training.seeding import example_rng

EOS = 1
VOCAB = 600  # 500 SentencePiece pieces + 100 sentinels


@pytest.fixture(scope="module")
def vocab(ptb_vocab):
    return ptb_vocab


@pytest.fixture(scope="module")
def ids(ptb_ids) -> np.ndarray:
    return ptb_ids


def runs(mask: np.ndarray) -> list[tuple[bool, int]]:
    """(value, length) of each run of equal values."""
    edges = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    return [(bool(part[0]), len(part)) for part in np.split(mask, edges)]


def reconstruct(inputs: np.ndarray, targets: np.ndarray, vocab_size: int = VOCAB) -> np.ndarray:
    """The original segment from span-corruption inputs and targets (both ending with EOS)."""
    assert inputs[-1] == EOS and targets[-1] == EOS
    first_sentinel = vocab_size - 100
    spans: dict[int, list[int]] = {}
    for token in targets[:-1].tolist():
        if token >= first_sentinel:
            spans[vocab_size - 1 - token] = current = []
        else:
            current.append(token)
    out: list[int] = []
    for token in inputs[:-1].tolist():
        out.extend(spans.pop(vocab_size - 1 - token) if token >= first_sentinel else [token])
    assert not spans, "every target sentinel pairs with an input sentinel"
    return np.array(out)


def segments(ids: np.ndarray, length: int, count: int) -> list[np.ndarray]:
    return [ids[k * length:(k + 1) * length] for k in range(count)]


# ----------------------------------------------------------------------------------------------- counts and the plan

@pytest.mark.parametrize("inputs_length, density, mean, expected", [
    (512, 0.15, 3.0, (568, 114)), (64, 0.15, 3.0, (70, 14)), (100, 0.15, 3.0, (110, 22)),
    (128, 0.15, 3.0, (141, 29)), (256, 0.15, 3.0, (284, 58)), (1024, 0.15, 3.0, (1137, 229)),
    (2048, 0.15, 3.0, (2274, 456)), (512, 0.5, 3.0, (766, 512)),  # the density-0.5 hack
    (64, 0.2, 2.0, (70, 22)), (64, 0.2, 1.0, (63, 27)),  # upstream test values
])
def test_length_plan_matches_t5(inputs_length, density, mean, expected):
    assert random_spans_length_plan(inputs_length, density, mean) == expected


@pytest.mark.parametrize("length, density, mean, expected", [
    (568, 0.15, 3.0, (85, 28)),   # round(85.2), round(28.33)
    (10, 0.15, 3.0, (2, 1)),      # 1.5 rounds half to even -> 2
    (30, 0.15, 3.0, (4, 1)),      # 4.5 rounds half to even -> 4
    (190, 0.15, 3.0, (28, 9)),    # float64 convention; T5's float32 mask gives 29 here
    (2010, 0.15, 3.0, (302, 101)),
    (1, 0.15, 3.0, (1, 1)), (0, 0.15, 3.0, (1, 1)),  # computed at length 2
    (10, 0.01, 3.0, (1, 1)),      # clamped up to one noise token and one span
    (5, 1.0, 3.0, (4, 1)),        # clamped down to length - 1
    (100, 0.0, 3.0, (0, 0)),      # density 0 is checked before the clamps
    (64, 0.2, 1.0, (13, 13)),
])
def test_noise_counts_round_and_clamp(length, density, mean, expected):
    assert noise_counts(length, density, mean) == expected


def test_mask_follows_counts_and_alternates_for_every_length():
    for length in range(1, 701):
        mask = random_spans_noise_mask(length, 0.15, 3.0, example_rng(3, length))
        noise, spans = noise_counts(length, 0.15, 3.0)
        assert mask.dtype == bool and mask.shape == (length,)
        if length == 1:
            assert mask.tolist() == [False]
            continue
        parts = runs(mask)
        assert not mask[0] and mask[-1]  # starts non-noise, ends noise
        assert len(parts) == 2 * spans  # spans alternate; every run is >= 1 long, none merged
        assert [value for value, _ in parts] == [False, True] * spans
        assert int(mask.sum()) == noise  # the density is a deterministic function of the length


def test_short_masks_are_rng_free():
    for length in range(2, 31):
        noise = noise_counts(length, 0.15, 3.0)[0]
        expected = [False] * (length - noise) + [True] * noise
        for seed in range(3):
            assert random_spans_noise_mask(length, 0.15, 3.0, example_rng(seed, length)).tolist() == expected


def test_masks_are_uniform_over_compositions():
    """L=40: 6 noise tokens in 2 spans, 34 others in 2 runs: 5 x 33 = 165 equally likely masks (chi-square)."""
    draws, cells = 16_500, 165
    rng = example_rng(11)
    counts = Counter(random_spans_noise_mask(40, 0.15, 3.0, rng).tobytes() for _ in range(draws))
    assert len(counts) == cells
    expected = draws / cells
    chi2 = sum((observed - expected) ** 2 / expected for observed in counts.values())
    dof = cells - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof), chi2  # mean 164, sd 18: a generous bound


def test_random_segmentation_is_a_composition():
    for k in range(50):
        parts = random_segmentation(20, 1 + k % 20, example_rng(5, k))
        assert parts.sum() == 20 and len(parts) == 1 + k % 20 and parts.min() >= 1
    with pytest.raises(ValueError, match="non-empty segments"):
        random_segmentation(3, 4, example_rng(0))


def test_degenerate_masks_raise_clearly():
    for length in (3, 7, 11):  # density 0.5, mean 1: more spans than non-noise tokens (TF fails with a shape error)
        with pytest.raises(ValueError, match="non-noise tokens"):
            random_spans_noise_mask(length, 0.5, 1.0, example_rng(0))
    with pytest.raises(ValueError, match="noise_density"):
        random_spans_noise_mask(10, 1.5, 3.0, example_rng(0))
    with pytest.raises(ValueError, match="mean_noise_span_length"):
        noise_counts(10, 0.15, 0.0)
    assert not random_spans_noise_mask(50, 0.0, 3.0, example_rng(0)).any()


# ------------------------------------------------------------------------------------------------ sentinels, anchors

def test_upstream_sentinel_anchor():
    tokens, mask = np.arange(10, 16), np.array([True, True, False, False, True, False])
    assert noise_span_to_unique_sentinel(tokens, mask, 1000).tolist() == [999, 12, 13, 998, 15]
    assert nonnoise_span_to_unique_sentinel(tokens, mask, 1000).tolist() == [10, 11, 999, 14, 998]


def test_upstream_test_denoise_anchor_given_its_mask():
    tokens = np.array([3, 2, 20, 4, 3, 2, 8, 13, 2, 3, 2, 23, 7, 19, 22, 3, 2, 7, 2])
    mask = np.zeros(len(tokens), dtype=bool)
    mask[8] = mask[14:19] = True
    assert noise_span_to_unique_sentinel(tokens, mask, 26).tolist() == [3, 2, 20, 4, 3, 2, 8, 13, 25, 3, 2, 23, 7,
                                                                        19, 24]
    assert nonnoise_span_to_unique_sentinel(tokens, mask, 26).tolist() == [25, 2, 24, 22, 3, 2, 7, 2]


def test_paper_table3_random_spans_row():
    words = "Thank you for inviting me to your party last week .".split()
    table = {word: 3 + k for k, word in enumerate(words)} | {"<X>": 99, "<Y>": 98, "<Z>": 97}
    names = {v: k for k, v in table.items()}
    mask = np.array([word in {"for", "inviting", "me", "your", "party", "last"} for word in words])
    tokens = np.array([table[word] for word in words])
    assert [names[t] for t in noise_span_to_unique_sentinel(tokens, mask, 100)] == "Thank you <X> to <Y> week .".split()
    assert [names[t] for t in nonnoise_span_to_unique_sentinel(tokens, mask, 100)] == \
        "<X> for inviting me <Y> your party last <Z>".split()


# --------------------------------------------------------------------------------------------- the objective, real data

def test_full_segments_give_exact_512_114(ids):
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    assert isinstance(objective, Objective) and objective.name == "span_corruption"
    assert objective.segment_length(512, 114) == 568
    for k, segment in enumerate(segments(ids, 568, 60)):
        inputs, targets = objective(segment, example_rng(0, 0, k))
        assert (len(inputs), len(targets)) == (512, 114) == objective.output_lengths(568)
        assert inputs.dtype == targets.dtype == np.int32
        np.testing.assert_array_equal(reconstruct(inputs, targets), segment)


def test_inputs_targets_reconstruct_and_sentinels_decrease(ids):
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    offset = 0
    for length in (2, 3, 31, 57, 190, 350, 500, 1000):
        segment = ids[offset:offset + length]
        offset += length
        inputs, targets = objective(segment, example_rng(1, 0, length))
        np.testing.assert_array_equal(reconstruct(inputs, targets), segment)
        for side in (inputs, targets):
            sentinels = side[side >= VOCAB - 100]
            # k-th sentinel is vocab-1-k: decreasing from <extra_id_0> (HF #14282 had them increasing past it)
            assert sentinels.tolist() == list(range(VOCAB - 1, VOCAB - 1 - len(sentinels), -1))
        assert (inputs[:-1] >= VOCAB - 100).sum() == noise_counts(length, 0.15, 3.0)[1]
        # every original token appears exactly once across inputs and targets, sentinels and EOS aside
        regular = np.concatenate([inputs[:-1], targets[:-1]])
        assert Counter(regular[regular < VOCAB - 100].tolist()) == Counter(segment.tolist())


def test_output_lengths_are_exact_for_every_length(ids):
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    for length in range(1, 601):
        inputs, targets = objective(ids[length:2 * length], example_rng(2, length))
        assert (len(inputs), len(targets)) == objective.output_lengths(length)
        assert inputs[-1] == targets[-1] == EOS
    assert objective(ids[:1], example_rng(0))[0].tolist() == [ids[0], EOS]  # one token: no noise


def test_single_trailing_eos_with_document_eos_inside(ids):
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    segment = ids[:568]
    assert (segment == EOS).sum() > 5  # real documents end inside the segment
    inputs, targets = objective(segment, example_rng(4, 0, 9))
    mask = random_spans_noise_mask(568, 0.15, 3.0, example_rng(4, 0, 9))  # the objective's only draw
    np.testing.assert_array_equal(inputs, np.r_[noise_span_to_unique_sentinel(segment, mask, VOCAB), EOS])
    np.testing.assert_array_equal(targets, np.r_[nonnoise_span_to_unique_sentinel(segment, mask, VOCAB), EOS])


def test_deterministic_per_seed_and_id(ids):
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    segment = ids[1000:1568]
    first = objective(segment, example_rng(7, 2, 123))
    again = objective(segment, example_rng(7, 2, 123))
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    others = {objective(segment, example_rng(7, 2, k))[0].tobytes() for k in range(5)}
    assert len(others) == 5  # different example ids draw different masks


def test_token_id_zero_is_preserved(ids):
    """HF #15443/#12755: filtering `> 0` deleted genuine id-0 tokens (C4's literal `<pad>`)."""
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    segment = ids[2000:2568].copy()
    segment[::37] = 0
    for k in range(20):
        inputs, targets = objective(segment, example_rng(0, 1, k))
        assert (len(inputs), len(targets)) == (512, 114)
        np.testing.assert_array_equal(reconstruct(inputs, targets), segment)


def hf_documented(input_ids: np.ndarray, mask: np.ndarray, tokenizer_length: int, eos: int) -> np.ndarray:
    """HF run_t5_mlm_flax as the reference §1.5 describes it: `create_sentinel_ids` (span starts -> len - k for
    k = 1, 2, ...; continuations -1; others 0) then `filter_input_ids` (sentinel where non-zero, keep >= 0, + EOS)."""
    starts = mask & ~np.r_[False, mask[:-1]]
    sentinel_ids = np.where(starts, tokenizer_length - np.cumsum(starts), 0) - (mask & ~starts)
    merged = np.where(sentinel_ids != 0, sentinel_ids, input_ids)
    return np.r_[merged[merged >= 0], eos]


def test_matches_hf_collator_behaviour_given_the_same_mask(ids):
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    for k in range(200):
        length = 568 if k % 2 else 40 + 7 * k
        segment = ids[k * 300:k * 300 + length].copy()
        segment[k % 13::53] = 0  # genuine id-0 tokens
        mask = random_spans_noise_mask(length, 0.15, 3.0, example_rng(9, k))
        inputs, targets = objective(segment, example_rng(9, k))
        np.testing.assert_array_equal(inputs, hf_documented(segment, mask, VOCAB, EOS))
        np.testing.assert_array_equal(targets, hf_documented(segment, ~mask, VOCAB, EOS))


def test_sentinels_are_the_vocabulary_extra_ids(vocab, ids):
    """Sentinel k is the vocabulary's `<extra_id_k>` (test_vocab ties those ids to HF's T5Tokenizer)."""
    assert vocab.vocab_size == VOCAB
    inputs, targets = make_objective("span_corruption", vocab_size=vocab.vocab_size)(ids[:568], example_rng(0, 0, 0))
    for side in (inputs, targets):
        sentinels = side[side >= VOCAB - 100].tolist()
        assert sentinels == [vocab.sentinel_id(k) for k in range(len(sentinels))]
    text = vocab.decode(inputs[inputs != EOS])  # decode stops at the first (document) EOS
    where = [text.index(f"<extra_id_{k}>") for k in range(28)]
    assert where == sorted(where)


# ------------------------------------------------------------------------------------------------ limits and checks

def test_segment_length_checks_targets_and_sentinels():
    objective = make_objective("span_corruption", vocab_size=32100)
    assert objective.segment_length(512, 114) == 568
    assert objective.segment_length(1024, 229) == 1137
    with pytest.raises(ValueError, match="targets_length >= 114"):
        objective.segment_length(512, 113)
    with pytest.raises(ValueError, match="114 noise spans but there are only 100 sentinels"):
        objective.segment_length(2048, 456)  # 2274-token segments need 114 spans
    assert all(objective.output_lengths(n) <= (512, 114) for n in range(1, 569))


@pytest.mark.parametrize("density, mean, short", [(0.5, 1.0, 3), (0.75, 2.0, 4)])
def test_settings_that_cannot_mask_a_short_segment_are_refused_by_the_plan(ids, density, mean, short):
    """They passed the plan and stopped the data loader at the first short last segment of a document (row 115 of
    the sample's token shards), with a traceback, mid-run."""
    objective = make_objective("span_corruption", vocab_size=VOCAB, noise_density=density,
                               mean_noise_span_length=mean)
    with pytest.raises(ValueError, match=f"a {short}-token segment needs .* cannot mask it; lower noise_density"):
        objective.segment_length(32, 256)
    with pytest.raises(ValueError, match="needs .* non-noise spans but has only"):
        objective(ids[:short], example_rng(0))  # what the loader met


def test_more_spans_than_sentinels_raise(ids):
    with pytest.raises(ValueError, match="101 noise spans"):
        make_objective("span_corruption", vocab_size=VOCAB)(ids[:2010], example_rng(0))
    small = make_objective("span_corruption", vocab_size=VOCAB, max_sentinels=5)
    small(ids[:100], example_rng(0))  # 15 noise tokens, 5 spans: fits
    with pytest.raises(ValueError, match="only 5 sentinels"):
        small(ids[:120], example_rng(0))


@pytest.mark.parametrize("params, message", [
    ({"vocab_size": 100}, "must exceed max_sentinels"),
    ({"vocab_size": VOCAB, "eos_id": 550}, "eos_id"),
    ({"vocab_size": VOCAB, "noise_density": 0.0}, "noise_density"),
    ({"vocab_size": VOCAB, "noise_density": 1.0}, "noise_density"),
    ({"vocab_size": VOCAB, "mean_noise_span_length": 0.5}, "mean_noise_span_length"),
    ({"vocab_size": VOCAB, "max_sentinels": 0}, "max_sentinels"),
])
def test_bad_parameters_raise(params, message):
    with pytest.raises(ValueError, match=message):
        make_objective("span_corruption", **params)


def test_bad_segments_raise():
    objective = make_objective("span_corruption", vocab_size=VOCAB)
    with pytest.raises(ValueError, match="regular ids"):
        objective(np.array([5, 6, VOCAB - 1]), example_rng(0))  # a sentinel id in the raw segment
    with pytest.raises(ValueError, match="non-empty 1-D integer"):
        objective(np.array([], dtype=np.int32), example_rng(0))
    with pytest.raises(ValueError, match="non-empty 1-D integer"):
        objective(np.ones((2, 3), dtype=np.int32), example_rng(0))
    with pytest.raises(ValueError, match="non-empty 1-D integer"):
        objective(np.ones(5, dtype=np.float32), example_rng(0))
