"""Run metrics: ``metrics.jsonl`` (the record of truth), ``metrics.csv`` (a spreadsheet view) and TensorBoard.

Layout in the logger's directory:

- ``metrics.jsonl``: one JSON object per :meth:`MetricsLogger.log` call,
  ``{"step": 100, "split": "train", "time": <unix seconds>, "metrics": {"loss": 2.5, ...}}``.
- ``metrics.csv``: the same records, one row each, columns ``step, split, time`` then every metric name in
  first-seen order across all splits (a cell is empty where a record lacks that metric). The CSV is derived
  from the JSONL: rows are appended while the column set is unchanged, and when a record brings a new metric
  name (a few times per run: the first train record, the first validation record) the CSV is rewritten whole.
- ``tensorboard/``: event files with one scalar per metric, tagged ``<split>/<name>``, when ``tensorboard``
  is installed.

Resuming: open a logger on the same directory (it appends), then call :meth:`MetricsLogger.truncate_after` with
the checkpoint's step. That drops JSONL/CSV records of later steps and makes TensorBoard hide its later events
(``SummaryWriter(purge_step=...)``), so a resumed run leaves no duplicate steps.
"""
from __future__ import annotations

import csv
import importlib.util
import io
import json
import numbers
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from .config_errors import TrainConfigError

JSONL_NAME = "metrics.jsonl"
CSV_NAME = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"
FIXED_COLUMNS = ("step", "split", "time")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file (or of the one in a logger directory), in file order.

    A final line without its newline is the remains of an interrupted write and is ignored. A file that is not
    UTF-8 JSON records is a :class:`TrainConfigError` naming the line.
    """
    path = Path(path)
    if path.is_dir():
        path = path / JSONL_NAME
    records = []
    for number, line in enumerate(path.read_bytes().split(b"\n")[:-1], start=1):
        try:
            record = json.loads(line) if line else None
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            raise TrainConfigError(f"{path} line {number} is not a JSON record ({error}): the run's metrics were "
                                   "changed since it wrote them; delete that line, or the file") from None
        if record is not None and not isinstance(record, dict):
            raise TrainConfigError(f"{path} line {number} is not a JSON object: delete that line, or the file")
        if record is not None:
            records.append(record)
    return records


class MetricsLogger:
    """Writes metrics records of one run; a no-op (touching no files) when ``enabled`` is False (ranks > 0)."""

    def __init__(self, directory: str | Path, *, enabled: bool = True, tensorboard: bool = True) -> None:
        self.directory = Path(directory)
        self.enabled = enabled
        self.jsonl_path = self.directory / JSONL_NAME
        self.csv_path = self.directory / CSV_NAME
        self._columns: list[str] = []
        self._writer: Any = None  # torch.utils.tensorboard.SummaryWriter, opened on first use
        self._purge_step: int | None = None
        self._tensorboard = enabled and tensorboard
        if self._tensorboard and importlib.util.find_spec("tensorboard") is None:
            warnings.warn("tensorboard is not installed; metrics go to metrics.jsonl and metrics.csv only")
            self._tensorboard = False
        if enabled:
            self.directory.mkdir(parents=True, exist_ok=True)
            if self.jsonl_path.exists():  # resuming: drop a torn last line and rebuild the CSV view
                self._rewrite(read_metrics(self.jsonl_path))

    def log(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Append one record: the ``metrics`` of ``split`` (e.g. "train", "validation") at optimizer ``step``."""
        if not isinstance(step, numbers.Integral) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        if not isinstance(split, str) or not split:
            raise ValueError(f"split must be a non-empty string, got {split!r}")
        clashes = sorted(set(metrics) & set(FIXED_COLUMNS))
        if clashes:
            raise ValueError(f"metric names {clashes} clash with the record fields {', '.join(FIXED_COLUMNS)}")
        if not self.enabled:
            return
        record = {"step": int(step), "split": split, "time": time.time(),
                  "metrics": {str(name): float(value) for name, value in metrics.items()}}
        with self.jsonl_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.csv_path.exists() and set(record["metrics"]) <= set(self._columns):
            with self.csv_path.open("a", encoding="utf-8", newline="") as handle:
                self._csv_writer(handle).writerow(_row(record))
        else:
            self._write_csv(read_metrics(self.jsonl_path))
        writer = self._tensorboard_writer()
        if writer is not None:
            for name, value in record["metrics"].items():
                writer.add_scalar(f"{split}/{name}", value, record["step"], walltime=record["time"])
            writer.flush()

    def truncate_after(self, step: int) -> None:
        """Drop every record with a step greater than ``step`` (call on resume from the checkpoint at ``step``)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if not self.enabled:
            return
        if self.jsonl_path.exists():
            self._rewrite([r for r in read_metrics(self.jsonl_path) if r["step"] <= step])
        if self._tensorboard:
            self.close()
            self._purge_step = step + 1
            self._tensorboard_writer()  # writes the purge marker now, even if nothing is logged afterwards

    def close(self) -> None:
        """Flush and close the TensorBoard writer (JSONL/CSV are closed after every write). Logging may go on."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _tensorboard_writer(self) -> Any:
        if self._writer is None and self._tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step makes TensorBoard hide earlier-written events at steps >= purge_step; only the first
            # writer after truncate_after carries it, so a later reopen does not hide the resumed run's steps.
            self._writer = SummaryWriter(log_dir=str(self.directory / TENSORBOARD_DIR), purge_step=self._purge_step)
            self._purge_step = None
        return self._writer

    def _csv_writer(self, handle: io.TextIOBase) -> csv.DictWriter:
        return csv.DictWriter(handle, fieldnames=[*FIXED_COLUMNS, *self._columns], restval="")

    def _write_csv(self, records: list[dict[str, Any]]) -> None:
        self._columns = list(dict.fromkeys(name for record in records for name in record["metrics"]))
        buffer = io.StringIO(newline="")
        writer = self._csv_writer(buffer)
        writer.writeheader()
        writer.writerows(_row(record) for record in records)
        _replace(self.csv_path, buffer.getvalue())

    def _rewrite(self, records: list[dict[str, Any]]) -> None:
        _replace(self.jsonl_path, "".join(json.dumps(record) + "\n" for record in records))
        self._write_csv(records)


def _row(record: Mapping[str, Any]) -> dict[str, Any]:
    return {"step": record["step"], "split": record["split"], "time": record["time"], **record["metrics"]}


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file, then rename)."""
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    os.replace(temporary, path)
