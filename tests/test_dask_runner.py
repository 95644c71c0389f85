"""The C4 pipeline on Beam's DaskRunner against a real Dask cluster: a `dask scheduler` and two single-thread
`dask worker` processes on loopback. The shards and counters must equal the DirectRunner's on the same input, also
when a worker process is killed while it runs the job's tasks."""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Iterator, NamedTuple

import pyarrow as pa
import pytest

from c4prep import progress
from c4prep.manifest import read_manifest
from c4prep.pipelines.funnel import format_progress
from c4prep.pipelines.run_c4 import DataLossError, RunConfig, check_inputs, one_partition_per_file, run_c4
from c4prep.runner_results import LostWorkerError, RunnerSetupError

distributed = pytest.importorskip("distributed", reason="Dask is not installed: pip install 'apache-beam[dask]'")

from c4prep.dask_shuffle import workers_lost_since  # noqa: E402  (needs Dask)
from c4prep.dask_task_counters import sum_task_counts  # noqa: E402  (needs Dask)
from c4prep import dask_warm_up  # noqa: E402

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"
NUM_PARTS = 4
NUM_SHARDS = 4
START_TIMEOUT_S = 60


class DaskCluster(NamedTuple):
    address: str
    scheduler_file: Path


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """A `dask` command in its own process group (so that teardown also stops the nanny's worker process)."""
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _scheduler_address(scheduler_file: Path, scheduler: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if scheduler.poll() is not None:
            raise RuntimeError(f"dask scheduler exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            return json.loads(scheduler_file.read_text())["address"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            time.sleep(0.1)
    raise RuntimeError(f"dask scheduler did not start in {START_TIMEOUT_S} s")


@contextlib.contextmanager
def _local_cluster(folder: Path, workers: int) -> Iterator[DaskCluster]:
    """Scheduler on a free loopback port (port 0, address read back from its scheduler file) and ``workers``
    single-thread workers, logs and worker folders in ``folder``; all stopped at the end."""
    scheduler_file = folder / "scheduler.json"
    processes = []
    try:
        scheduler = _start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                            "--scheduler-file", str(scheduler_file)], folder / "scheduler.log")
        processes.append(scheduler)
        address = _scheduler_address(scheduler_file, scheduler, folder / "scheduler.log")
        for index in range(workers):
            processes.append(_start(["worker", address, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard",
                                     "--local-directory", str(folder / f"worker{index}")],
                                    folder / f"worker{index}.log"))
        with distributed.Client(address, timeout=START_TIMEOUT_S) as client:
            client.wait_for_workers(workers, timeout=START_TIMEOUT_S)
        yield DaskCluster(address, scheduler_file)
    finally:
        for process in reversed(processes):
            _stop(process)


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """A scheduler and two workers for the module's tests."""
    with _local_cluster(tmp_path_factory.mktemp("dask"), workers=2) as cluster:
        yield cluster


def _gzip_members(data: bytes) -> list[bytes]:
    members, start = [], 0
    while start < len(data):
        inflater = zlib.decompressobj(31)
        inflater.decompress(data[start:])
        end = len(data) - len(inflater.unused_data)
        members.append(data[start:end])
        start = end
    return members


@pytest.fixture(scope="module")
def sample_parts(tmp_path_factory, webdata) -> list[str]:
    """The real WET sample cut at record (gzip member) boundaries into 4 files, for 4 parallel Dask partitions."""
    folder = tmp_path_factory.mktemp("parts")
    members = _gzip_members((webdata / SAMPLE_NAME).read_bytes())
    paths = []
    for index in range(NUM_PARTS):
        path = folder / f"part-{index}.warc.wet.gz"
        path.write_bytes(b"".join(members[index::NUM_PARTS]))
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def path_list(tmp_path_factory, sample_parts) -> str:
    listing = tmp_path_factory.mktemp("list") / "wet.paths"
    listing.write_text("".join(f"{path}\n" for path in sample_parts))
    return str(listing)


@pytest.fixture(scope="module")
def direct_output(tmp_path_factory, path_list) -> Path:
    output = tmp_path_factory.mktemp("direct") / "en"
    run_c4(RunConfig(output=str(output), path_list=path_list, num_shards=NUM_SHARDS))
    return output


def _shard_tables(folder: Path) -> dict[str, pa.Table]:
    tables = {}
    for path in sorted(folder.glob("data-*/*.arrow")):
        with pa.memory_map(str(path)) as source:
            tables[path.name] = pa.ipc.open_stream(source).read_all()
    return tables


def _assert_same_output(output: Path, reference: Path) -> None:
    """Same shards (read with pyarrow, and byte for byte), same manifest counters, nothing else in the folder."""
    tables, expected = _shard_tables(output), _shard_tables(reference)
    assert tables.keys() == expected.keys()
    for name, table in tables.items():
        assert table.equals(expected[name]), name
    manifest, reference_manifest = read_manifest(str(output)), read_manifest(str(reference))
    for shard, reference_shard in zip(manifest.shards, reference_manifest.shards, strict=True):
        assert Path(manifest.shard_uri(str(output), shard)).read_bytes() == \
            Path(reference_manifest.shard_uri(str(reference), reference_shard)).read_bytes(), shard.name
    urls = [url for table in tables.values() for url in table.column("url").to_pylist()]
    assert len(urls) == len(set(urls)) == sum(split.num_rows for split in reference_manifest.splits.values()) > 50
    assert manifest.counters == reference_manifest.counters
    assert manifest.counters["read-input"] == {"files": NUM_PARTS, "records": 335}
    assert sorted(path.name for path in output.iterdir()) == ["README.md", manifest.data_dir, "funnel.png",
                                                              "manifest.json"]


@pytest.mark.parametrize("shuffle", ["tasks", "disk"])
def test_dask_cluster_gives_the_direct_runner_shards_and_counters(dask_cluster, path_list, direct_output, tmp_path,
                                                                   monkeypatch, shuffle):
    with distributed.Client(dask_cluster.address) as client:
        executed_before = client.run(lambda dask_worker: dask_worker.state.executed_count)
    output = tmp_path / "dask"
    monkeypatch.setattr(progress, "REMOTE_POLL_S", 0.1)
    shuffle_folders = set(Path(tempfile.gettempdir()).glob("c4prep-shuffle-*"))
    lines = io.StringIO()
    result = run_c4(RunConfig(output=str(output), path_list=path_list, num_shards=NUM_SHARDS, runner="DaskRunner"),
                    [f"--dask_client_address={dask_cluster.address}", f"--dask_shuffle={shuffle}"],
                    progress.ProgressSettings(format_progress, 0.05, lines))
    assert result.funnel.reconciled and result.funnel.pages_in == 335
    _assert_same_output(output, direct_output)
    assert set(Path(tempfile.gettempdir()).glob("c4prep-shuffle-*")) == shuffle_folders  # a disk job's is removed
    # The progress line counts the finished tasks as the scheduler reports them; the last line is the job's total.
    *live, final = lines.getvalue().splitlines()
    assert live and all(line.startswith("progress ") for line in live)
    assert final.startswith("done in ") and f"335 pages read from {NUM_PARTS} files" in final
    assert f"{result.funnel.pages_out:,} kept; dropped: split-wet-file 0" in final
    with distributed.Client(dask_cluster.address) as client:
        executed_after = client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert sum(executed_after.values()) > sum(executed_before.values())  # the cluster ran the job, not the driver


def _kill_first_worker(address: str, done: threading.Event, killed: dict, keys_of, wanted=bool) -> None:
    """SIGKILL the process of the first worker seen with a task key that `wanted` accepts, among the keys
    `keys_of(dask_worker)` lists on it (the nanny then starts a fresh worker)."""
    with distributed.Client(address) as client:
        while not done.is_set():
            seen = client.run(lambda dask_worker: (os.getpid(), keys_of(dask_worker)))
            for worker, (pid, keys) in seen.items():
                if any(map(wanted, keys)):
                    os.kill(pid, signal.SIGKILL)
                    killed.update(worker=worker, pid=pid, tasks=keys)
                    return
            time.sleep(0.02)


# What a worker runs and holds. Lambdas, so that they travel to the workers by value: the workers cannot import this
# test module, and a named function would travel as a reference to it.
_executing = lambda dask_worker: [str(task.key) for task in dask_worker.state.executing]  # noqa: E731
_held = lambda dask_worker: [str(key) for key in dask_worker.data.keys()]  # noqa: E731


def test_killed_worker_is_recovered_without_lost_or_duplicated_records(dask_cluster, sample_parts, direct_output,
                                                                       tmp_path):
    """Dask's task shuffle runs a dead worker's tasks again and the job completes exactly once. (The disk shuffle
    cannot promise it: a job's first tasks already append their groups to the shuffle's files, read and partition
    fused into one task, so a task run again may append twice; what c4prep then guarantees, a refusal or the right
    corpus, is test_a_worker_lost_inside_a_disk_shuffle_never_publishes_a_wrong_corpus.)"""
    output = tmp_path / "dask-killed"
    done, killed, started = threading.Event(), {}, time.time()
    killer = threading.Thread(target=_kill_first_worker, args=(dask_cluster.address, done, killed, _executing))
    killer.start()
    try:
        # One glob: c4prep gives each of the NUM_PARTS files its own partition (one_partition_per_file).
        glob = str(Path(sample_parts[0]).parent / "part-*.warc.wet.gz")
        result = run_c4(RunConfig(output=str(output), inputs=[glob], num_shards=NUM_SHARDS, runner="DaskRunner"),
                        [f"--dask_scheduler_file={dask_cluster.scheduler_file}", "--dask_shuffle=tasks"])
    finally:
        done.set()
        killer.join()
    assert killed, "no worker was seen running a task, so none was killed"
    assert not _process_alive(killed["pid"])
    with distributed.Client(dask_cluster.address) as client:  # what a failed disk-shuffle job is checked for
        assert workers_lost_since(client, started) == [killed["worker"]]
    # Exactly-once counters (a re-run task replaces its report) and identical shards: nothing lost or duplicated.
    assert result.funnel.reconciled and result.funnel.pages_in == 335
    _assert_same_output(output, direct_output)
    with distributed.Client(dask_cluster.address) as client:
        client.wait_for_workers(2, timeout=START_TIMEOUT_S)
        assert killed["worker"] not in client.scheduler_info()["workers"]  # the nanny's fresh worker replaced it


def _process_alive(pid: int) -> bool:
    import psutil

    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE


def test_dask_runner_needs_a_cluster_and_fixed_shards(tmp_path, webdata):
    config = RunConfig(output=str(tmp_path), inputs=[str(webdata / SAMPLE_NAME)], runner="DaskRunner")
    with pytest.raises(RunnerSetupError, match="DaskRunner needs a fixed --num-shards N"):
        run_c4(config)
    config.num_shards = 2
    with pytest.raises(RunnerSetupError, match="DaskRunner needs a running cluster: pass --dask_client_address"):
        run_c4(config)
    assert list(tmp_path.iterdir()) == []


def test_each_input_file_is_its_own_dask_partition(tmp_path):
    for name in ("b.warc.wet.gz", "a.warc.wet.gz", "sub/c.jsonl.gz"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    config = RunConfig(output=str(tmp_path / "out"), inputs=[str(tmp_path / "*.warc.wet.gz"), str(tmp_path / "sub")])
    files = check_inputs(config)
    assert files == [str(tmp_path / "a.warc.wet.gz"), str(tmp_path / "b.warc.wet.gz"), str(tmp_path / "sub/c.jsonl.gz")]
    assert one_partition_per_file(files, ["--x=1"]) == ["--x=1", "--dask_npartitions=3"]
    for given in (["--dask_npartitions=8"], ["--dask_partition_size=100"]):  # the user's choice stands
        assert one_partition_per_file(files, given) == given


def test_task_counts_sum_per_namespace():
    reports = [{"clean-page": {"passed": 2, "line-in": 5}}, {"clean-page": {"passed": 1}, "read-input": {"files": 1}}]
    assert sum_task_counts(reports) == {"clean-page": {"line-in": 5, "passed": 3}, "read-input": {"files": 1}}


def test_a_worker_lost_inside_a_disk_shuffle_never_publishes_a_wrong_corpus(dask_cluster, sample_parts,
                                                                            direct_output, tmp_path):
    """Dask's disk shuffle appends each partition's groups to shared files: a partition run again after its worker
    died appends them twice. The integrity checks see the surplus, or a step refuses a duplicate and the job fails
    after the worker's loss, and the run refuses, naming the remedy; a run that recovers (the worker died after its
    groups were read) publishes the DirectRunner's shards."""
    output = tmp_path / "dask-killed-in-shuffle"
    done, killed = threading.Event(), {}
    in_shuffle = lambda key: key.startswith("('groupby-part")  # noqa: E731  (a held shuffle partition)
    killer = threading.Thread(target=_kill_first_worker, args=(dask_cluster.address, done, killed, _held, in_shuffle))
    killer.start()
    try:
        glob = str(Path(sample_parts[0]).parent / "part-*.warc.wet.gz")
        run_c4(RunConfig(output=str(output), inputs=[glob], num_shards=NUM_SHARDS, runner="DaskRunner"),
               [f"--dask_scheduler_file={dask_cluster.scheduler_file}", "--dask_shuffle=disk"])
    except (DataLossError, LostWorkerError) as error:  # the surplus seen by the integrity checks, or by a step
        assert "--dask_shuffle=tasks recovers from it" in str(error)
        assert not output.exists()  # the folder the refused run made is gone again
    else:
        _assert_same_output(output, direct_output)
    finally:
        done.set()
        killer.join()
    assert killed, "no worker was seen holding a shuffle partition, so none was killed"


def test_a_failure_after_a_lost_worker_names_the_loss_its_cause_and_the_remedy():
    from c4prep.dask_shuffle import lost_worker_error
    from c4prep.pipelines.dedup import DuplicateUrlError

    failure = DuplicateUrlError("1 raw URLs occur on more than one page, e.g. 'https://a.example/'; run URL dedup "
                                "first\n  (the worker's traceback)")
    error = lost_worker_error(["tcp://10.0.0.2:4000"], failure)
    assert isinstance(error, LostWorkerError) and "\n" not in str(error)
    for part in ("1 worker(s) died", "tcp://10.0.0.2:4000", "DuplicateUrlError: 1 raw URLs occur", "Nothing was written",
                 "--dask_shuffle=tasks recovers from it"):
        assert part in str(error)


def test_disk_shuffle_refuses_a_folder_the_workers_cannot_write(dask_cluster, path_list, tmp_path):
    import dask

    output, not_a_folder = tmp_path / "out", tmp_path / "a-file"
    not_a_folder.write_text("")
    with dask.config.set({"temporary_directory": str(not_a_folder)}), \
            pytest.raises(RunnerSetupError, match="--dask_shuffle=disk: a Dask worker cannot write its shuffle files"):
        run_c4(RunConfig(output=str(output), path_list=path_list, num_shards=NUM_SHARDS, runner="DaskRunner"),
               [f"--dask_client_address={dask_cluster.address}", "--dask_shuffle=disk"])
    assert not output.exists()  # the staging folder, and the output folder the run made, are gone again
    assert not_a_folder.read_text() == ""


class _TwoHostClient:
    """Two workers; the second sees the first's paths under the folder `elsewhere` ("": the same filesystem)."""

    def __init__(self, elsewhere: str) -> None:
        self.elsewhere = elsewhere

    def scheduler_info(self) -> dict:
        return {"workers": {"tcp://a:1": {}, "tcp://b:1": {}}}

    def run(self, function, *args, workers=None):
        results = {}
        for worker in workers or ["tcp://a:1", "tcp://b:1"]:
            seen = args if worker == "tcp://a:1" else (self.elsewhere + args[0], *args[1:])
            results[worker] = function(*seen)
        return results


def test_disk_shuffle_refuses_workers_that_do_not_share_its_folder(tmp_path):
    import dask

    from c4prep.dask_shuffle import shared_shuffle_folder

    shared = tmp_path / "shared"
    shared.mkdir()
    with dask.config.set({"temporary_directory": str(shared)}):
        with pytest.raises(RunnerSetupError, match=r"but 1 of 2 workers do not see .*shared: set Dask's temporary_dir"):
            shared_shuffle_folder(_TwoHostClient(str(tmp_path / "other-machine")))
        assert list(shared.iterdir()) == []  # the refused job's folder is removed
        folder, maker = shared_shuffle_folder(_TwoHostClient(""))  # both see one folder: no error
    assert Path(folder).parent == shared and Path(folder).name.startswith("c4prep-shuffle-") and maker == "tcp://a:1"


def test_auto_shuffle_is_the_task_shuffle_where_workers_do_not_share_a_folder(tmp_path, caplog):
    import dask

    from c4prep.dask_shuffle import dask_shuffle

    shared = tmp_path / "shared"
    shared.mkdir()
    apart = _TwoHostClient(str(tmp_path / "other-machine"))
    with dask.config.set({"temporary_directory": str(shared)}):
        with dask_shuffle(apart, "auto") as settings:
            assert settings == {"dataframe.shuffle.method": "tasks"}
        with pytest.raises(RunnerSetupError, match="needs one folder every Dask worker shares"), \
                dask_shuffle(apart, "disk"):
            pass
    assert "--dask_shuffle=auto: Dask's task shuffle, in memory, as --dask_shuffle=disk needs one folder" in caplog.text
    assert list(shared.iterdir()) == []


def test_a_freed_shuffle_store_keeps_its_files(tmp_path):
    """partd deletes the folder of a store it named itself when the handle is freed, which Dask may do mid-shuffle;
    c4prep's stores name their folder, which outlives every handle (c4prep removes it after the job)."""
    import gc

    import partd

    from c4prep.dask_shuffle import shuffle_store

    def freed_handle_folder(open_store) -> Path:
        store = open_store()
        store.append({"group": [b"data"]})
        folder = Path(store.partd.path if hasattr(store.partd, "path") else store.partd.partd.path)
        del store
        gc.collect()
        return folder

    kept = freed_handle_folder(lambda: shuffle_store(str(tmp_path / "shuffle")))
    assert kept.is_dir() and shuffle_store(str(kept)).get("group") == [b"data"]
    assert not freed_handle_folder(lambda: partd.Python(partd.File(dir=str(tmp_path)))).exists()  # partd's own


def test_the_shuffle_store_gives_back_tuples_as_tuples(tmp_path):
    """Dask's own store (`partd.Python`) packs with msgpack where it can, which turns tuples into lists: a tuple key
    read back could not be grouped. c4prep's store pickles."""
    import partd

    from c4prep.dask_shuffle import shuffle_store

    elements = [(("example.com/a", 3), (0, b"page")), ((1, 2), (1, [("claim", 7)]))]
    for name, store in (("ours", shuffle_store(str(tmp_path / "ours"))),
                        ("dask", partd.Python(partd.File(str(tmp_path / "dask"))))):
        store.append({0: elements[:1]})
        store.append({0: elements[1:]})
        assert (store.get(0) == elements) == (name == "ours"), name


def test_disk_shuffle_writes_the_groups_dask_writes_in_one_block_and_partitions_where_its_input_is(
        dask_cluster, tmp_path, monkeypatch):
    """`partition_to_disk` writes the shuffle files Dask's own step writes, in one block per list input and without
    fsync; graphs built inside a disk-shuffle job's block group with `groupby_on_disk`, whose partitioning steps
    are fused with the steps that made their input (Dask's own graph makes them read a second task's result, the
    store, and the scheduler may move them and their input to another worker)."""
    import dask
    import dask.bag as db
    import dask.bag.core
    import partd.encode
    import partd.file
    from dask.core import get_dependencies

    from c4prep.dask_shuffle import _DASK_PARTITION, dask_shuffle, partition_to_disk, shuffle_store

    def key(item):
        return item[0]

    fsyncs = []
    monkeypatch.setattr(partd.file.os, "fsync", lambda descriptor: fsyncs.append(descriptor))
    records = [(f"window-{index % 300}".encode(), index) for index in range(5_000)]
    for case, (sequence, nelements) in enumerate(((records, 2**20), (records, 1_000), ([], 2**20),
                                                  (iter(records), 2**20))):
        theirs, ours = (str(tmp_path / f"{case}-{name}") for name in ("theirs", "ours"))
        before = len(fsyncs)
        _DASK_PARTITION(key, sequence if isinstance(sequence, list) else iter(records), 7, shuffle_store(theirs),
                        nelements)
        dask_fsyncs, blocks, appends = len(fsyncs) - before, [], partd.encode.Encode.append
        with monkeypatch.context() as patch:
            patch.setattr(partd.encode.Encode, "append", lambda store, data, **kwargs: blocks.append(data) or appends(
                store, data, **kwargs))
            partition_to_disk(key, sequence, 7, ours, nelements)
        assert [shuffle_store(ours).get(group) for group in range(7)] == [
            shuffle_store(theirs).get(group) for group in range(7)]
        assert len(blocks) == -(-len(records) // nelements) if sequence else not blocks
        assert len(fsyncs) - before == dask_fsyncs and (dask_fsyncs > 0 or not sequence)  # none of c4prep's

    with distributed.Client(dask_cluster.address) as client:
        with dask_shuffle(client, "disk") as settings, dask.config.set(settings):
            groups = db.from_sequence(range(5_000), npartitions=4).map(lambda index: records[index]).groupby(key)
            graph = dict(groups.__dask_optimize__(groups.__dask_graph__(), groups.__dask_keys__()))
            assert sorted((group, sorted(map(tuple, items))) for group, items in groups.compute()) == sorted(
                (group, sorted(item for item in records if item[0] == group)) for group in {k for k, _ in records})
    partitioning = [task for task in graph if "groupby-part" in str(task) and "from_sequence" in str(task)]
    assert len(partitioning) == 4 and all(not get_dependencies(graph, task) for task in partitioning)
    assert dask.bag.core.groupby_disk.__module__ == "dask.bag.core"


def test_a_finished_tasks_spec_is_released_while_its_result_is_held(dask_cluster):
    """Dask keeps a finished task's function and arguments (for Beam, the DoFns) as long as its result; c4prep's
    worker plugin drops them once the result is stored."""
    from c4prep.dask_workarounds import ReleaseTaskSpecs

    def specs_kept(client, future) -> list[bool]:  # on the worker that holds the result (a lambda travels by value)
        kept = client.run(lambda key, dask_worker: key in dask_worker.state.tasks
                          and dask_worker.state.tasks[key].run_spec is not None, future.key)
        holders = client.run(lambda key, dask_worker: key in dask_worker.data, future.key)
        return [kept[worker] for worker, holds in holders.items() if holds]

    with distributed.Client(dask_cluster.address) as client:
        plain = client.submit(sum, [1, 2, 3], pure=False)
        assert plain.result() == 6 and specs_kept(client, plain) == [True]
        client.register_plugin(ReleaseTaskSpecs(), name="test-release-task-specs")
        try:
            released = client.submit(sum, [1, 2, 3], pure=False)
            assert released.result() == 6 and specs_kept(client, released) == [False]
        finally:
            client.unregister_worker_plugin("test-release-task-specs")


def test_workers_collector_is_set_for_the_job_only(dask_cluster):
    """`JobCollector` has each worker import the pipeline's modules, move every object then alive out of the
    collector's reach (`gc.freeze`) and collect the young generation less often; unregistered, each worker's
    collector is as it was."""
    import gc

    from c4prep.dask_runs import JobCollector
    from c4prep.job_gc import FIRST_THRESHOLD, PIPELINE_MODULE

    def collector() -> tuple[int, tuple[int, int, int], bool]:
        import sys

        imported = PIPELINE_MODULE in sys.modules and "apache_beam" in sys.modules
        return gc.get_freeze_count(), gc.get_threshold(), imported

    with distributed.Client(dask_cluster.address) as client:
        before = list(client.run(collector).values())
        client.register_plugin(JobCollector(), name="test-job-collector")
        try:
            during = list(client.run(collector).values())
            assert len(during) == 2, during
            for (frozen, thresholds, imported), (_, old_thresholds, _) in zip(during, before):
                assert frozen > 100_000 and imported
                assert thresholds == (FIRST_THRESHOLD, *old_thresholds[1:])
        finally:
            client.unregister_worker_plugin("test-job-collector")
        assert [(frozen, thresholds) for frozen, thresholds, _ in client.run(collector).values()] == [
            (0, thresholds) for _, thresholds, _ in before]


def test_beams_wait_follows_the_jobs_futures_on_their_own_clients_loop(dask_cluster, monkeypatch):
    """Beam's `wait_until_finish` follows the job's futures with `as_completed` on the current client's event loop.
    Under another current client (as in `dask_runs`) that loop is not the futures', and the job's end is seen only
    at that loop's next timer; `waiting_on_the_jobs_client` makes the job's own client current while it waits."""
    from apache_beam.runners.dask.dask_runner import DaskRunnerResult, ddist

    from c4prep.dask_workarounds import waiting_on_the_jobs_client

    beams_as_completed, loops = ddist.as_completed, []

    def as_completed_on(futures, **kwargs):
        loops.append(distributed.default_client().loop is futures[0].client.loop)
        return beams_as_completed(futures, **kwargs)

    monkeypatch.setattr(ddist, "as_completed", as_completed_on)
    with distributed.Client(dask_cluster.address) as jobs_client:
        with distributed.Client(dask_cluster.address):  # current in this block, as c4prep's client is in a job
            futures = [jobs_client.submit(sum, [1, 2], pure=False)]
            assert DaskRunnerResult(jobs_client, futures).wait_until_finish() == "DONE"
            assert waiting_on_the_jobs_client(DaskRunnerResult(jobs_client, futures)) == "DONE"
    assert loops == [False, True]


def test_a_fresh_cluster_imports_the_job_while_the_driver_starts(tmp_path):
    """`c4prep run` on Dask first asks every worker and the scheduler to import the job's modules and goes on at
    once (a fresh worker would otherwise import them when the job reaches it, and the scheduler when the job's graph
    does, while the driver waits)."""
    # a lambda travels by value (this test module is not importable on the worker)
    has_imported_the_job = lambda modules=dask_warm_up.JOB_MODULES: all(m in sys.modules  # noqa: E731
                                                                       for m in modules)

    def imported() -> list[bool]:
        return [*client.run(has_imported_the_job).values(), client.run_on_scheduler(has_imported_the_job)]

    with _local_cluster(tmp_path, workers=1) as fresh, distributed.Client(fresh.address) as client:
        assert not any(imported())
        cluster = dask_warm_up.dask_cluster("DaskRunner", [f"--dask_client_address={fresh.address}", "--num_workers=2"])
        started = time.monotonic()
        dask_warm_up.warm_up_cluster(cluster)
        assert time.monotonic() - started < 5  # it does not wait for the imports
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(imported()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(imported()) and len(imported()) == 2


def test_fresh_workers_take_the_jobs_plugins_while_they_import_the_job(tmp_path):
    """The job's worker plugins reach a fresh worker while it still imports the job's modules (the driver no longer
    waits for a scheduler importing Beam): unpickling them imports Beam too, and two threads importing Beam at once
    failed ("partially initialized module 'apache_beam.pipeline'")."""
    from c4prep.dask_runs import JobCollector
    from c4prep.dask_workarounds import DeepSizes, ReleaseTaskSpecs

    plugins = {"test-deep-sizes": DeepSizes(), "test-release-specs": ReleaseTaskSpecs(), "test-gc": JobCollector()}
    with _local_cluster(tmp_path, workers=2) as fresh, distributed.Client(fresh.address) as client:
        dask_warm_up.warm_up_cluster({"address": fresh.address})
        for name, plugin in plugins.items():
            client.register_plugin(plugin, name=name)
        assert set(plugins) <= set(client.run(lambda dask_worker: list(dask_worker.plugins)).popitem()[1])
        for name in plugins:
            client.unregister_worker_plugin(name)


@pytest.mark.parametrize("runner, args, expected", [
    ("DaskRunner", ["--dask_client_address", "tcp://10.0.0.1:8786"], {"address": "tcp://10.0.0.1:8786"}),
    ("apache_beam.runners.dask.dask_runner.DaskRunner", ["--dask_scheduler_file=s.json"], {"scheduler_file": "s.json"}),
    ("DaskRunner", [], None),  # the run itself refuses, in one line
    ("DaskRunner", ["--dask_client_address=tcp://10.0.0.1:8786", "--dry_run=True"], None),
    ("DirectRunner", ["--dask_client_address=tcp://10.0.0.1:8786"], None),
    ("DaskRunner", ["--dask_client_address"], None),  # no value: Beam's own parsing reports it
    ("DaskRunner", ["--dask_client=tcp://10.0.0.1:8786"], None),  # not abbreviated here, as Beam does not
])
def test_only_a_dask_run_with_a_cluster_warms_its_workers(runner, args, expected):
    assert dask_warm_up.dask_cluster(runner, args) == expected


def test_an_unreachable_cluster_is_left_to_the_run():
    started = time.monotonic()
    dask_warm_up.warm_up_cluster({"address": "tcp://127.0.0.1:9"})  # the discard port: nothing listens
    assert time.monotonic() - started < 30


def test_a_scheduler_file_that_does_not_exist_is_one_line_not_a_wait(tmp_path):
    """Dask waits, silently, for a scheduler file to appear: `c4prep run` hung with nothing printed."""
    from click.testing import CliRunner

    from c4prep.cli import main

    missing = tmp_path / "scheduler.json"
    result = CliRunner().invoke(main, ["run", "--runner=DaskRunner", f"--dask_scheduler_file={missing}",
                                       "--num-shards", "2", "--output", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (f"Error: --dask_scheduler_file {missing} does not exist: start the Dask "
                                              f"scheduler with --scheduler-file {missing} first, or give "
                                              "--dask_client_address")
    assert not (tmp_path / "out").exists()
