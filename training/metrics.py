"""Evaluation metrics for text-to-text models: exact match of decoded strings and teacher-forced token accuracy.

Arrays may be numpy arrays, torch tensors (any device) or nested sequences. With nothing to score (no examples,
or zero total weight) the metrics raise :class:`MetricError` rather than return a misleading 0 or NaN; aggregate
over batches with :func:`token_accuracy_counts` and divide once at the end.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

PAD_ID = 0


class MetricError(ValueError):
    """Inputs a metric cannot score (one-line message saying what was wrong)."""


def exact_match(predictions: Sequence[str], targets: Sequence[str]) -> float:
    """Fraction of predictions equal to their target string (no normalisation: T5's sequence accuracy)."""
    if len(predictions) != len(targets):
        raise MetricError(f"exact_match got {len(predictions)} predictions but {len(targets)} targets")
    if not targets:
        raise MetricError("exact_match got no examples to score")
    return sum(prediction == target for prediction, target in zip(predictions, targets)) / len(targets)


def token_accuracy_counts(pred_ids: Any, target_ids: Any, weights: Any = None,
                          pad_id: int = PAD_ID) -> tuple[float, float]:
    """``(weighted correct, total weight)`` over target positions; ``weights`` defaults to ``target_ids != pad_id``
    (pass the packed rows' decoder loss weights to score exactly what the loss trains)."""
    predicted, target = _as_numpy(pred_ids), _as_numpy(target_ids)
    if predicted.shape != target.shape:
        raise MetricError(f"pred_ids has shape {predicted.shape} but target_ids has {target.shape}; "
                          "pass argmax ids, not logits")
    weight = (target != pad_id) if weights is None else _as_numpy(weights)
    if weight.shape != target.shape:
        raise MetricError(f"weights has shape {weight.shape} but target_ids has {target.shape}")
    weight = weight.astype(np.float64)
    if np.any(weight < 0):
        raise MetricError("weights must be non-negative")
    return float(np.sum(weight * (predicted == target))), float(np.sum(weight))


def token_accuracy(pred_ids: Any, target_ids: Any, weights: Any = None, pad_id: int = PAD_ID) -> float:
    """Weighted fraction of target positions predicted correctly, over non-pad positions by default."""
    correct, total = token_accuracy_counts(pred_ids, target_ids, weights, pad_id)
    if total == 0:
        raise MetricError("token_accuracy got no target positions to score (all padding or zero weight)")
    return correct / total


def _as_numpy(array: Any) -> np.ndarray:
    """A numpy view of a numpy array, a torch tensor (detached, moved to the CPU) or nested sequences."""
    if hasattr(array, "detach"):  # torch, without importing it
        array = array.detach().cpu()
        if str(array.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            array = array.float()
        array = array.numpy()
    return np.asarray(array)


def seed_summary(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (0 for one run) and number of runs of a metric over seeds."""
    if not values:
        raise MetricError("no values to summarise")
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "runs": len(values)}
