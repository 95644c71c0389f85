"""MetricsLogger: JSONL/CSV content, TensorBoard scalars, resume truncation, disabled ranks."""
from __future__ import annotations

import csv
import time

import pytest

from c4prep.training.config_errors import TrainConfigError
from c4prep.training.metrics_log import JSONL_NAME, MetricsLogger, read_metrics


def _csv_rows(directory) -> list[dict[str, str]]:
    with (directory / "metrics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def _scalars(directory, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory / "tensorboard"))
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def test_jsonl_and_csv_records(tmp_path):
    started = time.time()
    with MetricsLogger(tmp_path, tensorboard=False) as logger:
        logger.log(10, "train", {"loss": 2.5, "lr": 0.01})
        logger.log(10, "validation", {"loss": 2.75, "accuracy": 0.5})
        logger.log(20, "train", {"loss": 2.25, "lr": 0.01})
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["split"], r["metrics"]) for r in records] == [
        (10, "train", {"loss": 2.5, "lr": 0.01}),
        (10, "validation", {"loss": 2.75, "accuracy": 0.5}),
        (20, "train", {"loss": 2.25, "lr": 0.01}),
    ]
    assert all(started <= r["time"] <= time.time() for r in records)
    assert read_metrics(tmp_path) == records
    rows = _csv_rows(tmp_path)
    assert list(rows[0]) == ["step", "split", "time", "loss", "lr", "accuracy"]
    assert [(r["step"], r["split"], r["loss"], r["lr"], r["accuracy"]) for r in rows] == [
        ("10", "train", "2.5", "0.01", ""),
        ("10", "validation", "2.75", "", "0.5"),
        ("20", "train", "2.25", "0.01", ""),
    ]
    assert not (tmp_path / "tensorboard").exists()


def test_tensorboard_scalars(tmp_path):
    with MetricsLogger(tmp_path) as logger:
        for step in (1, 2, 3):
            logger.log(step, "train", {"loss": 1.0 / step})
        logger.log(3, "validation", {"loss": 0.75})
    assert _scalars(tmp_path, "train/loss") == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    assert _scalars(tmp_path, "validation/loss") == [(3, 0.75)]


def test_resume_truncates_later_steps(tmp_path):
    with MetricsLogger(tmp_path) as logger:
        for step in range(1, 6):
            logger.log(step, "train", {"loss": float(step)})
        logger.log(4, "validation", {"loss": 9.0})
    with MetricsLogger(tmp_path) as resumed:  # the run crashed after step 5; its checkpoint is at step 3
        resumed.truncate_after(3)
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
        resumed.log(4, "train", {"loss": 40.0})
        resumed.log(5, "train", {"loss": 50.0})
        resumed.close()
        resumed.log(6, "train", {"loss": 60.0})  # reopening after close keeps the resumed steps
    records = read_metrics(tmp_path)
    assert [(r["step"], r["split"], r["metrics"]["loss"]) for r in records] == [
        (1, "train", 1.0), (2, "train", 2.0), (3, "train", 3.0), (4, "train", 40.0), (5, "train", 50.0),
        (6, "train", 60.0)]
    assert [(r["step"], r["loss"]) for r in _csv_rows(tmp_path)] == [
        ("1", "1.0"), ("2", "2.0"), ("3", "3.0"), ("4", "40.0"), ("5", "50.0"), ("6", "60.0")]
    assert list(_csv_rows(tmp_path)[0]) == ["step", "split", "time", "loss"]
    assert _scalars(tmp_path, "train/loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0), (6, 60.0)]
    assert _scalars(tmp_path, "validation/loss") == []  # hidden by the purge marker though never re-logged


def test_torn_last_line_is_dropped(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as logger:
        logger.log(1, "train", {"loss": 1.0})
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 2, "spl')  # killed mid-write
    assert [r["step"] for r in read_metrics(tmp_path)] == [1]
    with MetricsLogger(tmp_path, tensorboard=False) as logger:
        logger.log(2, "train", {"loss": 2.0})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    assert [r["step"] for r in _csv_rows(tmp_path)] == ["1", "2"]


def test_disabled_logger_touches_nothing(tmp_path):
    directory = tmp_path / "run"
    with MetricsLogger(directory, enabled=False) as logger:
        logger.log(1, "train", {"loss": 1.0})
        logger.truncate_after(0)
    assert not directory.exists()


def test_bad_parameters(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    with pytest.raises(ValueError, match="step must be a non-negative int"):
        logger.log(-1, "train", {"loss": 1.0})
    with pytest.raises(ValueError, match="split must be a non-empty string"):
        logger.log(1, "", {"loss": 1.0})
    with pytest.raises(ValueError, match=r"metric names \['time'\] clash"):
        logger.log(1, "train", {"time": 1.0})
    with pytest.raises(ValueError, match="step must be >= 0"):
        logger.truncate_after(-1)


@pytest.mark.parametrize("damage, problem", [(b"not json {\n", "line 2 is not a JSON record"),
                                             (b"\xff\xfe\x00\x01\n", "line 2 is not a JSON record"),
                                             (b"[1, 2]\n", "line 2 is not a JSON object")])
def test_a_changed_metrics_file_is_one_error_naming_the_line(tmp_path, damage, problem):
    path = tmp_path / JSONL_NAME
    path.write_bytes(b'{"step": 1, "split": "train", "loss": 2.0}\n' + damage + b'{"step": 2, "split": "train"}\n')
    with pytest.raises(TrainConfigError, match=f"{path} {problem}"):
        read_metrics(path)
