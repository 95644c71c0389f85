"""Metrics: exact match (on the real CS224N birth-place dev answers) and token accuracy (numpy and torch)."""
import numpy as np
import pytest
import torch

from c4prep.training.metrics import MetricError, exact_match, seed_summary, token_accuracy, token_accuracy_counts


def test_exact_match_london_baseline(shared_data):
    # The CS224N data card: always answering "London" scores 25/500 = 5.0 % on the dev set.
    rows = (shared_data / "cs224n_a5" / "birth_dev.tsv").read_text(encoding="utf-8").splitlines()
    targets = [row.split("\t")[1] for row in rows]
    assert exact_match(["London"] * len(targets), targets) == 25 / 500
    assert exact_match(targets, targets) == 1.0


def test_exact_match_is_exact():
    assert exact_match(["Paris", "paris", "Paris ", "Rome"], ["Paris", "Paris", "Paris", "Rome"]) == 0.5


def test_exact_match_errors():
    with pytest.raises(MetricError, match="exact_match got no examples to score"):
        exact_match([], [])
    with pytest.raises(MetricError, match="exact_match got 2 predictions but 1 targets"):
        exact_match(["a", "b"], ["a"])


TARGETS = [[5, 6, 1, 0], [7, 1, 0, 0]]
PREDICTIONS = [[5, 9, 1, 3], [7, 1, 4, 0]]  # one wrong real token; the pad positions never count


def test_token_accuracy_skips_padding():
    assert token_accuracy(np.array(PREDICTIONS), np.array(TARGETS)) == 4 / 5
    assert token_accuracy_counts(PREDICTIONS, TARGETS) == (4.0, 5.0)
    assert token_accuracy(np.array(TARGETS), np.array(TARGETS)) == 1.0


def test_token_accuracy_with_weights():
    weights = np.array([[1, 1, 0, 0], [1, 1, 0, 0]])  # e.g. loss weights that skip EOS of the first row
    assert token_accuracy(PREDICTIONS, TARGETS, weights) == 3 / 4
    assert token_accuracy(PREDICTIONS, TARGETS, [[0.5, 2.0, 1, 0], [1, 1, 0, 0]]) == pytest.approx(3.5 / 5.5)


def test_token_accuracy_accepts_torch_tensors():
    predictions, targets = torch.tensor(PREDICTIONS), torch.tensor(TARGETS)
    assert token_accuracy(predictions, targets) == 4 / 5
    weights = (targets != 0).to(torch.bfloat16)
    assert token_accuracy(predictions, targets, weights) == 4 / 5


def test_token_accuracy_counts_aggregate_over_batches():
    batches = [(PREDICTIONS, TARGETS), ([[3, 1]], [[4, 1]])]
    correct, total = map(sum, zip(*(token_accuracy_counts(p, t) for p, t in batches)))
    assert correct / total == 5 / 7  # not the mean of the batch accuracies (0.8 and 0.5)


def test_token_accuracy_errors():
    with pytest.raises(MetricError, match="no target positions to score"):
        token_accuracy([[0, 0]], [[0, 0]])
    with pytest.raises(MetricError, match="no target positions to score"):
        token_accuracy(np.zeros((0, 4), np.int32), np.zeros((0, 4), np.int32))
    with pytest.raises(MetricError, match=r"pred_ids has shape \(2, 4, 9\) but target_ids has \(2, 4\); pass argmax"):
        token_accuracy(np.zeros((2, 4, 9)), np.array(TARGETS))
    with pytest.raises(MetricError, match=r"weights has shape \(2,\) but target_ids has \(2, 4\)"):
        token_accuracy(PREDICTIONS, TARGETS, [1, 1])
    with pytest.raises(MetricError, match="weights must be non-negative"):
        token_accuracy(PREDICTIONS, TARGETS, -np.ones((2, 4)))


def test_seed_summary():
    assert seed_summary([0.5, 0.7, 0.9]) == pytest.approx({"mean": 0.7, "std": 0.2, "runs": 3})
    assert seed_summary([0.6]) == {"mean": 0.6, "std": 0.0, "runs": 1}
    with pytest.raises(MetricError, match="no values"):
        seed_summary([])
