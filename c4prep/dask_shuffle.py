"""How Beam's DaskRunner groups (`GroupByKey`): Dask's task shuffle in memory, or its disk shuffle (`--dask_shuffle`).

Beam's DaskRunner turns every `GroupByKey` into a Dask bag `groupby`, and Dask picks the method from its
``dataframe.shuffle.method`` setting where the graph is built (the driver):
  - ``tasks`` (Dask's choice on a distributed cluster): the groups are built by tasks that pass the data between
    them in memory; it needs no shared storage and survives a lost worker, but every stage of the shuffle holds a
    copy of the data in the workers' memory. Line dedup of 300,000 pages on 2 workers x 2 GiB took 801 s at
    1.9 GiB a worker; a plain page shuffle of 1M pages did not finish in 600 s.
  - ``disk``: each partition appends its groups to files (`partd`) in one temporary directory and each output
    partition reads its own back, so a worker holds about one partition at a time. The same 300,000 pages took
    255 s at 0.72 GiB a worker (with `dask_workarounds` 5). A worker lost inside a disk shuffle has its partitions
    appended twice: the integrity checks then refuse the run (`run_c4.DataLossError`). Every worker must see the
    shuffle's folder (under Dask's ``temporary_directory`` if set, else the system's temporary folder): one machine,
    or a shared filesystem. `check_shared_directory` refuses the run otherwise.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from contextlib import contextmanager
from typing import Iterator

import dask
from apache_beam.options.pipeline_options import PipelineOptions

from c4prep.runner_results import RunnerSetupError

SHUFFLES = ("tasks", "disk")


class DaskShuffleOptions(PipelineOptions):
    """c4prep's Beam option for its Dask jobs: ``--dask_shuffle``."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument("--dask_shuffle", choices=SHUFFLES, default="tasks",
                            help="How the DaskRunner groups: 'tasks' (in memory) or 'disk' (bounded memory; every "
                                 "worker must share Dask's temporary directory)")


def _write_probe(folder: str | None, name: str) -> str:
    """Writes probe file `name` in `folder` (None: this worker's system temporary folder); its path."""
    path = os.path.join(folder or tempfile.gettempdir(), name)
    with open(path, "w", encoding="ascii") as probe:
        probe.write(name)
    return path


def _sees_probe(path: str) -> bool:
    try:
        with open(path, encoding="ascii") as probe:
            return probe.read() == os.path.basename(path)
    except OSError:
        return False


def _remove_probe(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def check_shared_directory(client) -> None:
    """A `RunnerSetupError` unless a file that one worker of `client`'s cluster writes where Dask's disk shuffle
    writes (Dask's ``temporary_directory`` as this process reads it, else that worker's system temporary folder) is
    seen by every worker: the shuffle's files are written by one worker and read by others."""
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise RunnerSetupError("the Dask cluster has no worker yet: start `dask worker` processes, then run again")
    folder = dask.config.get("temporary_directory", None)
    writer = workers[:1]
    try:
        path = client.run(_write_probe, folder, f"c4prep-shuffle-probe-{uuid.uuid4().hex}", workers=writer)[writer[0]]
    except OSError as error:
        raise RunnerSetupError(f"--dask_shuffle=disk: a Dask worker cannot write its shuffle files ({error}); set "
                               "Dask's temporary_directory to a writable folder every worker shares, or use "
                               "--dask_shuffle=tasks") from None
    try:
        blind = [worker for worker, sees in client.run(_sees_probe, path).items() if not sees]
    finally:
        client.run(_remove_probe, path, workers=writer)
    if blind:
        raise RunnerSetupError(f"--dask_shuffle=disk needs one folder every Dask worker shares, but {len(blind)} of "
                               f"{len(workers)} workers do not see {os.path.dirname(path)}: set Dask's "
                               "temporary_directory to a shared filesystem, or use --dask_shuffle=tasks")


@contextmanager
def dask_shuffle(client, shuffle: str) -> Iterator[None]:
    """While a Beam pipeline is translated for Dask inside this block, its `GroupByKey`s use `shuffle` (a
    `SHUFFLES` name); for ``disk``, first checks that every worker shares the shuffle's folder."""
    if shuffle == "disk":
        check_shared_directory(client)
    with dask.config.set({"dataframe.shuffle.method": shuffle}):
        yield
