"""Dask's workers and scheduler import the job's modules while the driver still imports its own (`warm_up_cluster`).

A fresh Dask worker imports Beam and c4prep's pipeline modules when c4prep's worker plugins or the job's first task
reach it, about 2 s on a 2-core machine, while the driver waits and every core but the importing ones idles; a
fresh scheduler imports them when the job's graph reaches it (it unpickles every task), 2.4 s between the job's
submission and its first task. The driver's own imports, before it can build the job, take about as long. Asked
first thing, the cluster imports beside the driver. This module imports nothing heavy itself, so that the `run`
command can call it before Beam.

Each process imports in its event loop's thread, where it also unpickles what the driver sends next (plugins,
the graph): an import in a worker's task thread raced the plugins' own import of Beam, and two threads importing
Beam at once failed with "partially initialized module 'apache_beam.pipeline'". What comes next waits until the
import is done.
"""
from __future__ import annotations

import argparse
import importlib
import os

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DASK_ALIAS = "DaskRunner"  # the short name c4prep accepts for it (Beam knows only the class path)
JOB_MODULES = ("c4prep.dask_runs", "c4prep.pipelines.run_c4")  # what the job's plugins and graph import
CONNECT_TIMEOUT_S = 2  # a cluster that answers later is warmed by the job itself


def is_dask_runner(runner: str) -> bool:
    """Whether ``--runner`` names Beam's DaskRunner (by its alias or its class path)."""
    return runner in (DASK_ALIAS, DASK_RUNNER)


def dask_cluster(runner: str, beam_args: list[str]) -> dict[str, str] | None:
    """How a DaskRunner job reaches its cluster (``--dask_client_address`` or ``--dask_scheduler_file``, as
    `distributed.Client` keywords); None for other runners, when neither is given, and for a dry run (Beam takes
    any ``--dry_run`` value as one)."""
    if not is_dask_runner(runner):
        return None
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--dask_client_address", dest="address")
    parser.add_argument("--dask_scheduler_file", dest="scheduler_file")
    parser.add_argument("--dry_run")
    try:
        known, _ = parser.parse_known_args(beam_args)
    except argparse.ArgumentError:  # e.g. an option without its value: Beam's own parsing says what is wrong
        return None
    if known.dry_run:
        return None
    given = {key: value for key, value in (("address", known.address), ("scheduler_file", known.scheduler_file))
             if value}
    return given or None


def warm_up_cluster(cluster: dict[str, str]) -> None:
    """Every worker of ``cluster`` and its scheduler start importing the job's modules; nothing waits for it. A
    cluster that cannot be reached is left to the run itself, which says so in one line."""
    import distributed

    scheduler_file = cluster.get("scheduler_file")
    if scheduler_file and not os.path.isfile(scheduler_file):  # Dask would wait for it to appear: the run says so
        return
    try:
        client = distributed.Client(**cluster, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError):
        return
    with client:
        client.run(import_job_modules, wait=False)
        client.run_on_scheduler(import_job_modules, wait=False)


async def import_job_modules() -> None:
    """Imports the job's modules; a coroutine, so that Dask runs it in the process's event loop without waiting."""
    for module in JOB_MODULES:
        importlib.import_module(module)
