"""How Beam's DaskRunner groups (`GroupByKey`): Dask's task shuffle in memory, or its disk shuffle (`--dask_shuffle`;
the default, ``auto``, is the disk shuffle where every worker shares its folder, else the task shuffle).

Beam's DaskRunner turns every `GroupByKey` into a Dask bag `groupby`, and Dask picks the method from its
``dataframe.shuffle.method`` setting where the graph is built (the driver):
  - ``tasks`` (Dask's choice on a distributed cluster): the groups are built by tasks that pass the data between
    them in memory; it needs no shared storage and survives a lost worker, but every stage of the shuffle holds a
    copy of the data in the workers' memory. Line dedup of 300,000 pages on 2 workers x 2 GiB took 801 s at
    1.9 GiB a worker; a plain page shuffle of 1M pages did not finish in 600 s.
  - ``disk``: each partition appends its groups to files (`partd`) in one temporary directory and each output
    partition reads its own back, so a worker holds about one partition at a time. The same 300,000 pages took
    280 s at 396 MiB a worker (with `dask_workarounds` 5 and 6), and 1M pages 485 MiB. A worker lost inside a
    disk shuffle has its partitions appended twice: the integrity checks then refuse the run
    (`run_c4.DataLossError`), or, where the duplicate stops a step first, the run names the lost workers
    (`lost_worker_error`). Every worker must see the shuffle's folder (under Dask's ``temporary_directory`` if
    set, else the system's temporary folder): one machine, or a shared filesystem. `shared_shuffle_folder` refuses
    the run otherwise. Each job shuffles in a folder of its own, which c4prep removes when the job ends. c4prep
    builds the disk shuffle's graph itself (`groupby_on_disk`: Dask's steps, each opening the store from its folder,
    so that the partitioning runs where its input was made), and appends each input partition's groups in one
    block, without ``fsync`` (`partition_to_disk`).
"""
from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from functools import partial
from itertools import chain
from typing import Iterator

import dask
import dask.bag.chunk
import dask.bag.core
import partd
from apache_beam.options.pipeline_options import PipelineOptions
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph
from dask.utils import funcname

from c4prep.patches import replaced
from c4prep.runner_results import LostWorkerError, RunnerSetupError

LOGGER = logging.getLogger(__name__)
SHUFFLES = ("auto", "tasks", "disk")
SHUFFLE_METHOD = "dataframe.shuffle.method"  # the Dask setting that picks a bag groupby's shuffle
_DASK_PARTITION = dask.bag.core.partition
_DASK_COLLECT = dask.bag.core.collect


class DaskShuffleOptions(PipelineOptions):
    """c4prep's Beam option for its Dask jobs: ``--dask_shuffle``."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument("--dask_shuffle", choices=SHUFFLES, default="auto",
                            help="How the DaskRunner groups: 'tasks' (in memory), 'disk' (bounded memory; every "
                                 "worker must share Dask's temporary directory) or 'auto' (disk where every worker "
                                 "shares it, else tasks)")


def _make_folder(base: str | None, name: str) -> str:
    """Creates folder `name` (with a probe file of that name) under `base` (None: this worker's system temporary
    folder); its path."""
    folder = os.path.join(base or tempfile.gettempdir(), name)
    os.makedirs(folder)
    with open(os.path.join(folder, name), "w", encoding="ascii") as probe:
        probe.write(name)
    return folder


def _sees_probe(folder: str) -> bool:
    name = os.path.basename(folder)
    try:
        with open(os.path.join(folder, name), encoding="ascii") as probe:
            return probe.read() == name
    except OSError:
        return False


def _remove_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


class _AppendsWithoutSync:
    """A shuffle's `partd` store whose appends skip ``fsync`` (see `partition_to_disk`)."""

    def __init__(self, store) -> None:
        self.store = store

    def append(self, data, **kwargs) -> None:
        self.store.append(data, **{**kwargs, "fsync": False})


def shuffle_store(path: str):
    """The `partd` store of one disk shuffle, in folder `path`, stacked as Dask stacks it (groups compressed with
    Snappy where python-snappy is installed), but always pickled. Dask's `partd.Python` tries msgpack first, which
    gives tuples back as lists: it fell back to pickle only because Beam's elements carried their windows
    (`dask_workarounds` 9); without them a tuple key came back from the disk as a list, which cannot be grouped.
    Every handle names its folder, so none deletes it when freed."""
    files = partd.File(path)
    return partd.Encode(_pickled, pickle.loads, _concatenated, partd.Snappy(files) if hasattr(partd, "Snappy")
                        else files)


def _pickled(elements: list) -> bytes:
    return pickle.dumps(elements, protocol=pickle.HIGHEST_PROTOCOL)


def _concatenated(lists: list[list]) -> list:
    return list(chain.from_iterable(lists))


def partition_to_disk(grouper, sequence, npartitions: int, path: str, nelements: int = 2**20) -> None:
    """Dask's disk-shuffle step for one input partition (`dask.bag.core.partition`: append its groups to the
    shuffle's files), with the store opened from its folder, in one block when the input is a list, and without
    ``fsync``.

    - Dask cuts its blocks with toolz's `partition_all`, which zips `nelements` references to one iterator: 23 ms a
      call at Dask's 2**20 whatever the input's size, about 5 % of the workers' CPU at 100,500 pages in 30
      partitions. The blocks, and so the files, are the same.
    - Dask fsyncs every file it appends to, inside `partd`'s one lock for the whole shuffle: a million fsyncs per
      `GroupByKey` at 1M pages in 1,000 partitions, during which the other worker waits for the lock. The files are
      temporary: readers on the same machine see the appended bytes at once, a network filesystem at ``close``, and
      a machine that crashes loses the job whether or not they reached its disk."""
    if isinstance(sequence, list):
        nelements = max(1, min(nelements, len(sequence)))
    _DASK_PARTITION(grouper, sequence, npartitions, _AppendsWithoutSync(shuffle_store(path)), nelements)


def collect_from_disk(grouper, group: int, path: str, barrier_token) -> list:
    """Dask's disk-shuffle step for one output partition (`dask.bag.core.collect`), the store opened from its
    folder."""
    return _DASK_COLLECT(grouper, group, shuffle_store(path), barrier_token)


def groupby_on_disk(bag, grouper, npartitions=None, blocksize=2**20, *, folder: str):
    """`dask.bag.core.groupby_disk` (the same steps, files and groups) with the shuffle's store opened by each task
    from its folder under `folder`, where Dask makes the store once, as a task of its own, and passes it to every
    step.

    A step that reads two tasks' results (its input partition and the store) is not fused with the task that made
    its input, and the scheduler may run it on another worker than the one holding that input: 63 partitions (105
    MiB) crossed between the 2 workers of one 100,500-page run, 20.8 s of transfers, while the partition's owner
    was busy and the receiver waited. With the folder as a plain argument, each partitioning step has one input and
    runs fused with the steps that made it, where its data is."""
    npartitions = npartitions or bag.npartitions
    token = tokenize(bag, grouper, npartitions, blocksize)
    path = os.path.join(folder, f"partd-{token}")
    part, barrier, collect = (f"groupby-part-{funcname(grouper)}-{token}", f"groupby-barrier-{token}",
                              f"groupby-collect-{token}")
    parts = {(part, index): (partition_to_disk, grouper, (bag.name, index), npartitions, path, blocksize)
             for index in range(bag.npartitions)}
    collects = {(collect, group): (collect_from_disk, grouper, group, path, barrier) for group in range(npartitions)}
    graph = {**parts, barrier: (dask.bag.chunk.barrier, *parts), **collects}
    return type(bag)(HighLevelGraph.from_collections(collect, graph, dependencies=[bag]), collect, npartitions)


def workers_lost_since(client, started: float) -> list[str]:
    """The workers `client`'s scheduler removed since `started` (its own `time.time()`) while they ran or held tasks:
    each of those tasks runs again, and in a disk shuffle a partitioning task run again appends its groups twice."""
    return sorted({event["worker"] for stamp, event in client.get_events("all")
                   if stamp >= started and event.get("action") == "remove-worker"
                   and (event.get("processing-tasks") or event.get("lost-computed-tasks"))})


def lost_worker_error(lost: list[str], failure: BaseException) -> LostWorkerError:
    """What a disk-shuffle job that failed with `failure` after losing the workers `lost` is reported as: the
    duplicated groups can stop a step before the integrity checks see them (the text dedup's join refuses a page id
    seen twice, as if URL dedup had not run)."""
    cause = (str(failure).strip().splitlines() or [""])[0][:300]
    return LostWorkerError(f"the Dask job failed after {len(lost)} worker(s) died while running or holding its tasks "
                           f"({', '.join(lost)}); with the disk shuffle a task run again appends its groups twice, "
                           f"which is the likely cause of the failure ({type(failure).__name__}: {cause}). Nothing "
                           "was written: run again (--dask_shuffle=tasks recovers from it)")


class FolderNotShared(RunnerSetupError):
    """The workers cannot share a disk shuffle's folder (the message says why and what to set)."""


def shared_shuffle_folder(client) -> tuple[str, str]:
    """A new folder for one job's disk shuffle, made by one worker of `client`'s cluster under Dask's
    ``temporary_directory`` (as this process reads it) or that worker's system temporary folder: `(its path, the
    worker that made it)`. A `RunnerSetupError` unless every worker sees it (the shuffle's files are written by one
    worker and read by others)."""
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise RunnerSetupError("the Dask cluster has no worker yet: start `dask worker` processes, then run again")
    maker = workers[0]
    base = dask.config.get("temporary_directory", None)
    try:
        folder = client.run(_make_folder, base, f"c4prep-shuffle-{uuid.uuid4().hex}", workers=[maker])[maker]
    except OSError as error:
        raise FolderNotShared(f"--dask_shuffle=disk: a Dask worker cannot write its shuffle files ({error}); set "
                               "Dask's temporary_directory to a writable folder every worker shares, or use "
                               "--dask_shuffle=tasks") from None
    blind = [worker for worker, sees in client.run(_sees_probe, folder).items() if not sees]
    if blind:
        client.run(_remove_folder, folder, workers=[maker])
        raise FolderNotShared(f"--dask_shuffle=disk needs one folder every Dask worker shares, but {len(blind)} of "
                               f"{len(workers)} workers do not see {os.path.dirname(folder)}: set Dask's "
                               "temporary_directory to a shared filesystem, or use --dask_shuffle=tasks")
    return folder, maker


@contextmanager
def dask_shuffle(client, shuffle: str) -> Iterator[dict]:
    """For one job on `client`'s cluster: yields the Dask settings to build its graph with, so that its
    `GroupByKey`s use `shuffle` (a `SHUFFLES` name; ``auto`` is ``disk`` where every worker shares the folder, else
    ``tasks``, said in the log). For ``disk``, the job gets its own shuffle folder, checked to be shared
    (`shared_shuffle_folder`) and removed after the block, and graphs built in the block group with
    `groupby_on_disk` in it."""
    folder = None
    if shuffle != "tasks":
        try:
            folder, _ = shared_shuffle_folder(client)
        except FolderNotShared as refusal:
            if shuffle == "disk":
                raise
            LOGGER.warning("--dask_shuffle=auto: Dask's task shuffle, in memory, as %s", refusal)
    if folder is None:
        yield {SHUFFLE_METHOD: "tasks"}
        return
    try:
        with replaced((dask.bag.core, "groupby_disk", partial(groupby_on_disk, folder=folder))):
            yield {SHUFFLE_METHOD: "disk"}
    finally:
        client.run(_remove_folder, folder)  # every worker sees it; the one that made it may have died since
