"""Progress of a running job: live counter tallies and a progress line on stderr.

Every counter bump of a c4prep job goes through `c4prep.beam_runs.CounterCache`, which also adds it to this
process's :class:`LiveTally` while a job is watched. What reaches the driver's progress line depends on where the
job's code runs:

- DirectRunner ``in_memory`` (the default) and ``multi_threading``: the workers are threads of the driver, so the
  line shows every bump as it happens.
- DirectRunner ``multi_processing``: each worker process inherits :data:`SPOOL_ENV`, the path of a folder where a
  thread of it writes its tally every second (:class:`LiveTally` with a spool); the driver sums those files.
- DaskRunner and DataflowRunner: the caller adds a source (:meth:`ProgressWatch.add_source`): the counts of the Dask
  tasks that have finished, or the Dataflow service's counters.
- Portable runners (Flink, Spark, Prism): Beam's portable result keeps the first counters it is asked for as the
  final ones, so nobody asks before the end; the line says how long the job has been running and that no counter
  has been reported yet, unless the SDK workers are threads of the driver (``--environment_type=LOOPBACK``), whose
  bumps reach the driver's tally as on the DirectRunner (untested: the tests start no Flink or Spark).

On a terminal the line is redrawn in place every second; otherwise one line is logged every ``interval_s``
seconds. The caller prints the final line from the job's real counters (:meth:`ProgressWatch.finish`).
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from c4prep.manifest import Counters
from c4prep.runner_results import merge_counters, sum_counters

LOGGER = logging.getLogger(__name__)

SPOOL_ENV = "C4PREP_LIVE_COUNTERS_DIR"
"""Set while a job is watched: the folder where worker processes started by the driver write their tallies."""
SPOOL_PERIOD_S = 1.0  # a worker process writes its tally this often (when it changed)
TERMINAL_PERIOD_S = 1.0  # a terminal's line is redrawn this often
REMOTE_POLL_S = 10.0  # a source that asks a service (Dask scheduler, Dataflow) is asked at most this often
DEFAULT_INTERVAL_S = 30.0

LineFormatter = Callable[[Counters, float, bool], str]
"""(counters so far, seconds since the job started, whether the job is done) -> one progress line."""
CounterSource = Callable[[], Counters]


def format_elapsed(seconds: float) -> str:
    """Seconds as H:MM:SS, e.g. 3725.2 -> '1:02:05'."""
    whole = int(max(seconds, 0.0))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def check_interval(seconds: float) -> float:
    """A valid progress interval (finite, >= 0; 0 turns progress off), or ValueError saying what is wrong."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"the progress interval must be a number of seconds >= 0 (0 turns it off), not {seconds}")
    return seconds


@dataclass(frozen=True)
class ProgressSettings:
    """How a job reports progress: its line format and, without a terminal, the seconds between lines."""

    format_line: LineFormatter
    interval_s: float = DEFAULT_INTERVAL_S
    stream: TextIO | None = None  # None: sys.stderr as it is when the job starts

    def __post_init__(self) -> None:
        check_interval(self.interval_s)


class LiveTally:
    """This process's counter bumps so far; with a spool folder, a thread also writes them there every second."""

    def __init__(self, spool_dir: str | None = None) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._changed = False
        self.pid = os.getpid()
        if spool_dir:
            spool = Path(spool_dir, f"{self.pid}-{uuid.uuid4().hex[:8]}.json")
            threading.Thread(target=self._write_spool, args=(spool,), name="c4prep-live-counters", daemon=True).start()

    def add(self, namespace: str, name: str, value: int) -> None:
        key = (namespace, name)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + value
            self._changed = True

    def counters(self) -> Counters:
        with self._lock:
            counts = list(self._counts.items())
            self._changed = False
        return sum_counters((namespace, name, value) for (namespace, name), value in counts)

    def _write_spool(self, spool: Path) -> None:
        temporary = spool.with_name(f".{spool.name}.tmp")
        while True:
            time.sleep(SPOOL_PERIOD_S)
            if not self._changed:
                continue
            try:
                temporary.write_text(json.dumps(self.counters()), encoding="utf-8")
                os.replace(temporary, spool)
            except OSError:  # the watch is over and removed the folder: nobody reads this tally any more
                return


_DRIVER_TALLY: LiveTally | None = None  # set while this process watches a job
_WORKER_TALLY: LiveTally | None = None  # in a worker process started under SPOOL_ENV


def live_tally() -> LiveTally | None:
    """Where this process's counter bumps go while a job is watched; None when nobody watches."""
    global _WORKER_TALLY
    if _DRIVER_TALLY is not None and _DRIVER_TALLY.pid == os.getpid():
        return _DRIVER_TALLY
    spool_dir = os.environ.get(SPOOL_ENV)
    if not spool_dir:
        return None
    if _WORKER_TALLY is None or _WORKER_TALLY.pid != os.getpid():
        _WORKER_TALLY = LiveTally(spool_dir)
    return _WORKER_TALLY


def read_spool(spool_dir: str) -> Counters:
    """The sum of the tallies that worker processes wrote to ``spool_dir``."""
    tallies = []
    for path in Path(spool_dir).glob("*.json"):
        try:
            tallies.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return merge_counters(*tallies)


class Throttled:
    """A counter source asked at most every ``period_s`` seconds; in between, and after a failure, its last answer."""

    def __init__(self, source: CounterSource, period_s: float | None = None) -> None:
        self._source, self._period_s = source, REMOTE_POLL_S if period_s is None else period_s
        self._last: Counters = {}
        self._next = 0.0

    def __call__(self) -> Counters:
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + self._period_s
            try:
                self._last = self._source()
            except Exception as error:  # a service that cannot answer now: keep showing what it said before
                LOGGER.debug("progress: counter source failed: %s", error)
        return self._last


class ProgressWatch:
    """Writes the progress line from a thread while a job runs; see the module docstring."""

    def __init__(self, settings: ProgressSettings, sources: list[CounterSource]) -> None:
        self._format_line = settings.format_line
        self._stream = settings.stream or sys.stderr
        self._terminal = _is_terminal(self._stream)
        self._period_s = min(TERMINAL_PERIOD_S, settings.interval_s) if self._terminal else settings.interval_s
        self._sources = list(sources)
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._line_open = False  # a terminal line was drawn and not ended yet
        self._thread = threading.Thread(target=self._run, name="c4prep-progress", daemon=True)

    def add_source(self, source: CounterSource) -> None:
        """Also count what ``source`` reports (e.g. a remote runner's counters)."""
        self._sources = [*self._sources, source]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the line; on a terminal, end a line left open (e.g. before an error message)."""
        self._halt()
        if self._line_open:
            self._line_open = False
            self._write("\n")

    def finish(self, counters: Counters) -> None:
        """Stop, then write the final line from the job's counters (on a terminal, over the open line)."""
        self._halt()
        self._line_open = False
        line = self._format_line(counters, time.monotonic() - self._started, True)
        self._write(f"\r{line}\x1b[K\n" if self._terminal else f"{line}\n")

    def _halt(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def snapshot(self) -> Counters:
        return merge_counters(*(source() for source in self._sources))

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            try:
                line = self._format_line(self.snapshot(), time.monotonic() - self._started, False)
            except Exception as error:  # a progress line must never stop the job
                LOGGER.debug("progress: no line: %s", error)
                continue
            if self._terminal:
                width = shutil.get_terminal_size().columns
                self._write(f"\r{line[:max(width - 1, 1)]}\x1b[K")
                self._line_open = True
            else:
                self._write(f"{line}\n")

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: the job goes on without its line
            pass


class _NoWatch:
    """What :func:`watching` gives when progress is off."""

    def add_source(self, source: CounterSource) -> None:
        pass

    def finish(self, counters: Counters) -> None:
        pass


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def watching(settings: ProgressSettings | None) -> Iterator[ProgressWatch | _NoWatch]:
    """Watch the job run inside the block: live tallies of this process and of the worker processes it starts
    (:data:`SPOOL_ENV`), and the progress line. Settings None or an interval of 0: no watch, no cost."""
    if settings is None or settings.interval_s == 0:
        yield _NoWatch()
        return
    global _DRIVER_TALLY
    spool_dir = tempfile.mkdtemp(prefix="c4prep-progress-")
    tally, previous_env = LiveTally(), os.environ.get(SPOOL_ENV)
    watch = ProgressWatch(settings, [tally.counters, lambda: read_spool(spool_dir)])
    _DRIVER_TALLY, os.environ[SPOOL_ENV] = tally, spool_dir
    try:
        watch.start()
        yield watch
    finally:
        watch.stop()
        _DRIVER_TALLY = None
        if previous_env is None:
            os.environ.pop(SPOOL_ENV, None)
        else:
            os.environ[SPOOL_ENV] = previous_env
        shutil.rmtree(spool_dir, ignore_errors=True)
