"""Job counters of a c4prep job on Beam's DaskRunner, which collects no metrics: c4prep counts per Dask task.

A `CounterCache` created inside a Dask task (see `task_counter_recorder`) adds its counts to the task's entry in
this worker process. When the task's result is stored, `ReportTaskCounters` (a worker plugin) sends the entry to
`CollectTaskCounters` (a scheduler plugin), which keeps one report per task key. A task that the engine runs again,
because a worker died before its result was used, reports the same key and counts again, and its report replaces
the first, so every task counts exactly once. A task that fails or dies while running reports nothing.
Run one c4prep job at a time per cluster: the worker plugin is shared by name.

The scheduler imports this module to run its plugin, so it imports neither Beam nor c4prep's pipelines (a fresh
scheduler importing `dask_runs` held the job's start for 2.4 s).
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Iterable

import distributed
from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

from c4prep.manifest import Counters
from c4prep.runner_results import merge_counters

TOPIC = "c4prep-task-counters"
WORKER_PLUGIN = "c4prep-report-task-counters"
RUNNING_STATES = ("executing", "long-running")

TaskCounts = dict[str, dict[str, int]]  # namespace -> name -> value

_TASK_COUNTS: dict[object, TaskCounts] = {}  # this worker process: task key (as Dask keys it) -> its counts so far


def task_counter_recorder() -> Callable[[str, str, int], None] | None:
    """Inside a Dask task of a job that collects counters: a function recording one counter bump; else None."""
    try:
        worker = distributed.get_worker()
    except ValueError:
        return None
    return partial(_record, worker) if WORKER_PLUGIN in worker.plugins else None


def _record(worker: distributed.Worker, namespace: str, name: str, value: int) -> None:
    counts = _TASK_COUNTS.setdefault(worker.get_current_task(), {}).setdefault(namespace, {})
    counts[name] = counts.get(name, 0) + value


class ReportTaskCounters(WorkerPlugin):
    """Sends the counts of each task that finished on this worker to the scheduler; drops a failed task's counts."""

    def setup(self, worker: distributed.Worker) -> None:
        self.worker = worker

    def transition(self, key, start: str, finish: str, **kwargs) -> None:
        if start not in RUNNING_STATES or finish in RUNNING_STATES:  # a task reading a side input secedes first
            return
        counts = _TASK_COUNTS.pop(key, None)
        if counts and finish == "memory":
            self.worker.log_event(TOPIC, {"key": str(key), "counts": counts})


class CollectTaskCounters(SchedulerPlugin):
    """Keeps the latest report of each task key; a task run again replaces its earlier report."""

    def __init__(self) -> None:
        self.by_task: dict[str, TaskCounts] = {}

    def log_event(self, topic: str, msg) -> None:
        if topic == TOPIC:
            self.by_task[msg["key"]] = msg["counts"]


def _task_reports(dask_scheduler, name: str) -> list[TaskCounts]:
    return list(dask_scheduler.plugins[name].by_task.values())


def sum_task_counts(reports: Iterable[TaskCounts]) -> Counters:
    """Per-task counts summed into job counters: namespace -> name -> value, sorted."""
    return merge_counters(*reports)


def finished_task_counts(client: distributed.Client, collector: str) -> Counters:
    """The job counters of the tasks finished so far, from the scheduler plugin registered as `collector`."""
    return sum_task_counts(client.run_on_scheduler(_task_reports, name=collector))
