"""Beam's DaskRunner with c4prep's job counters (`dask_task_counters`), workarounds (`dask_workarounds`) and shuffle
(`dask_shuffle`)."""
from __future__ import annotations

import time
import uuid
from functools import partial

import dask
import distributed
from apache_beam.runners.dask.dask_runner import DaskOptions
from distributed.diagnostics.plugin import WorkerPlugin

from c4prep import job_gc
from c4prep.dask_shuffle import (SHUFFLE_METHOD, DaskShuffleOptions, dask_shuffle, lost_worker_error,
                                 workers_lost_since)
from c4prep.dask_task_counters import WORKER_PLUGIN, CollectTaskCounters, ReportTaskCounters, finished_task_counts
from c4prep.dask_workarounds import (DeepSizes, GroupByKeyInTheGlobalWindow, LiftCombiners, ReleaseTaskSpecs,
                                     releasing_bundle_outputs, waiting_on_the_jobs_client)
from c4prep.manifest import Counters
from c4prep.progress import ProgressSettings, Throttled, watching
from c4prep.runner_results import RunnerSetupError

SIZES_PLUGIN = "c4prep-deep-sizes"
SPECS_PLUGIN = "c4prep-release-task-specs"
GC_PLUGIN = "c4prep-job-collector"


class JobCollector(WorkerPlugin):
    """Each worker's garbage collector set for the job (`job_gc.settle`), and as it was after (`job_gc.unsettle`)."""

    def setup(self, worker) -> None:
        job_gc.settle()

    def teardown(self, worker) -> None:
        job_gc.unsettle()


def run_on_dask(pipeline, options, progress: ProgressSettings | None = None) -> Counters:
    """Run the job on the Dask cluster named by the options and return its counters, each task counted once.

    The job runs with c4prep's workarounds for Beam's DaskRunner (`dask_workarounds`): combiners lifted, no
    windows through shuffles in the global window, bundle outputs released and `finish_bundle` outputs kept,
    elements sized for spilling, finished tasks' specs released, the job's end seen at once, and the workers'
    garbage collector set for the job (`job_gc`). Its `GroupByKey`s shuffle as ``--dask_shuffle`` says
    (`dask_shuffle`); a disk-shuffle job that fails after the scheduler lost a worker running or holding its tasks
    raises `LostWorkerError`. With ``progress``, the progress line counts the tasks that have finished so far
    (asked from the scheduler at most every `REMOTE_POLL_S` seconds): a task is a whole partition of a stage, so
    the numbers move in steps."""
    client_options = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
    for bag_option in ("npartitions", "partition_size"):  # as Beam's DaskRunner builds its own client
        client_options.pop(bag_option, None)
    if not client_options.get("address") and not client_options.get("scheduler_file"):
        raise RunnerSetupError("DaskRunner needs a running cluster: pass --dask_client_address=tcp://HOST:8786 or "
                               "--dask_scheduler_file=FILE (start one with `dask scheduler` and `dask worker`)")
    collector = f"c4prep-collect-task-counters-{uuid.uuid4().hex}"
    with distributed.Client(**client_options) as client:
        started = client.run_on_scheduler(time.time)  # the clock the scheduler stamps its events with
        client.register_plugin(CollectTaskCounters(), name=collector)
        worker_plugins = {WORKER_PLUGIN: ReportTaskCounters(), SIZES_PLUGIN: DeepSizes(),
                          SPECS_PLUGIN: ReleaseTaskSpecs(), GC_PLUGIN: JobCollector()}
        for name, plugin in worker_plugins.items():
            client.register_plugin(plugin, name=name)
        finished_tasks = partial(finished_task_counts, client, collector)
        try:
            with watching(progress) as watch, \
                    dask_shuffle(client, options.view_as(DaskShuffleOptions).dask_shuffle) as graph_settings:
                pipeline.replace_all([LiftCombiners(), GroupByKeyInTheGlobalWindow()])
                with releasing_bundle_outputs(), dask.config.set(graph_settings):
                    result = pipeline.run()
                watch.add_source(Throttled(finished_tasks))
                try:
                    waiting_on_the_jobs_client(result)
                except Exception as failure:
                    lost = workers_lost_since(client, started) if graph_settings[SHUFFLE_METHOD] == "disk" else []
                    if lost:
                        raise lost_worker_error(lost, failure) from failure
                    raise
                finally:
                    result.client.close()
                counters = finished_tasks()
                watch.finish(counters)
            return counters
        finally:
            for name in worker_plugins:
                client.unregister_worker_plugin(name)
            client.unregister_scheduler_plugin(collector)
