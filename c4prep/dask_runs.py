"""Beam's DaskRunner with job counters: Beam's DaskRunner collects no metrics, so c4prep counts per Dask task.

A `CounterCache` created inside a Dask task (see `task_counter_recorder`) adds its counts to the task's entry in
this worker process. When the task's result is stored, `ReportTaskCounters` (a worker plugin) sends the entry to
`CollectTaskCounters` (a scheduler plugin), which keeps one report per task key. A task that the engine runs again,
because a worker died before its result was used, reports the same key and counts again, and its report replaces
the first, so every task counts exactly once. A task that fails or dies while running reports nothing.
Run one c4prep job at a time per cluster: the worker plugin is shared by name.
"""
from __future__ import annotations

import uuid
from functools import partial
from typing import Callable, Iterable

import dask
import distributed
from apache_beam.runners.dask.dask_runner import DaskOptions
from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

from c4prep import job_gc
from c4prep.dask_shuffle import DaskShuffleOptions, dask_shuffle
from c4prep.dask_workarounds import (DeepSizes, LiftCombiners, ReleaseTaskSpecs, releasing_bundle_outputs,
                                     waiting_on_the_jobs_client)
from c4prep.manifest import Counters
from c4prep.progress import ProgressSettings, Throttled, watching
from c4prep.runner_results import RunnerSetupError, merge_counters

TOPIC = "c4prep-task-counters"
WORKER_PLUGIN = "c4prep-report-task-counters"
SIZES_PLUGIN = "c4prep-deep-sizes"
SPECS_PLUGIN = "c4prep-release-task-specs"
GC_PLUGIN = "c4prep-job-collector"
RUNNING_STATES = ("executing", "long-running")

TaskCounts = dict[str, dict[str, int]]  # namespace -> name -> value

_TASK_COUNTS: dict[str, TaskCounts] = {}  # this worker process: task key -> its counts so far


def task_counter_recorder() -> Callable[[str, str, int], None] | None:
    """Inside a Dask task of a job that collects counters: a function recording one counter bump; else None."""
    try:
        worker = distributed.get_worker()
    except ValueError:
        return None
    return partial(_record, worker) if WORKER_PLUGIN in worker.plugins else None


def _record(worker: distributed.Worker, namespace: str, name: str, value: int) -> None:
    counts = _TASK_COUNTS.setdefault(str(worker.get_current_task()), {}).setdefault(namespace, {})
    counts[name] = counts.get(name, 0) + value


class JobCollector(WorkerPlugin):
    """Each worker's garbage collector set for the job (`job_gc.settle`), and as it was after (`job_gc.unsettle`)."""

    def setup(self, worker) -> None:
        job_gc.settle()

    def teardown(self, worker) -> None:
        job_gc.unsettle()


class ReportTaskCounters(WorkerPlugin):
    """Sends the counts of each task that finished on this worker to the scheduler; drops a failed task's counts."""

    def setup(self, worker: distributed.Worker) -> None:
        self.worker = worker

    def transition(self, key, start: str, finish: str, **kwargs) -> None:
        if start not in RUNNING_STATES or finish in RUNNING_STATES:  # a task reading a side input secedes first
            return
        counts = _TASK_COUNTS.pop(str(key), None)
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


def _finished_task_counts(client: distributed.Client, collector: str) -> Counters:
    return sum_task_counts(client.run_on_scheduler(_task_reports, name=collector))


def sum_task_counts(reports: Iterable[TaskCounts]) -> Counters:
    """Per-task counts summed into job counters: namespace -> name -> value, sorted."""
    return merge_counters(*reports)


def run_on_dask(pipeline, options, progress: ProgressSettings | None = None) -> Counters:
    """Run the job on the Dask cluster named by the options and return its counters, each task counted once.

    The job runs with c4prep's workarounds for Beam's DaskRunner (`dask_workarounds`): combiners lifted, bundle
    outputs released and `finish_bundle` outputs kept, elements sized for spilling, finished tasks' specs released,
    the job's end seen at once, and the workers' garbage collector set for the job (`job_gc`). Its `GroupByKey`s
    shuffle as ``--dask_shuffle`` says (`dask_shuffle`). With ``progress``, the progress line counts the tasks that
    have finished so far (asked from the scheduler at most every `REMOTE_POLL_S` seconds): a task is a whole
    partition of a stage, so the numbers move in steps."""
    client_options = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
    for bag_option in ("npartitions", "partition_size"):  # as Beam's DaskRunner builds its own client
        client_options.pop(bag_option, None)
    if not client_options.get("address") and not client_options.get("scheduler_file"):
        raise RunnerSetupError("DaskRunner needs a running cluster: pass --dask_client_address=tcp://HOST:8786 or "
                               "--dask_scheduler_file=FILE (start one with `dask scheduler` and `dask worker`)")
    collector = f"c4prep-collect-task-counters-{uuid.uuid4().hex}"
    with distributed.Client(**client_options) as client:
        client.register_plugin(CollectTaskCounters(), name=collector)
        worker_plugins = {WORKER_PLUGIN: ReportTaskCounters(), SIZES_PLUGIN: DeepSizes(),
                          SPECS_PLUGIN: ReleaseTaskSpecs(), GC_PLUGIN: JobCollector()}
        for name, plugin in worker_plugins.items():
            client.register_plugin(plugin, name=name)
        finished_tasks = partial(_finished_task_counts, client, collector)
        try:
            with watching(progress) as watch, \
                    dask_shuffle(client, options.view_as(DaskShuffleOptions).dask_shuffle) as graph_settings:
                pipeline.replace_all([LiftCombiners()])
                with releasing_bundle_outputs(), dask.config.set(graph_settings):
                    result = pipeline.run()
                watch.add_source(Throttled(finished_tasks))
                try:
                    waiting_on_the_jobs_client(result)
                finally:
                    result.client.close()
                counters = finished_tasks()
                watch.finish(counters)
            return counters
        finally:
            for name in worker_plugins:
                client.unregister_worker_plugin(name)
            client.unregister_scheduler_plugin(collector)
