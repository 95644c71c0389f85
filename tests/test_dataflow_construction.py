"""Cluster runners without a cluster: the job builds and validates for DataflowRunner (Beam's dry run, no contact
with Google), its job graph stays small however many WET files the path list names, and the worker dependencies
ship with it; the Flink and Spark portable invocations build too."""
import base64
import gzip
import json
import os
import socket

import pytest
from apache_beam.options.pipeline_options import GoogleCloudOptions, SetupOptions
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
from click.testing import CliRunner

from c4prep.beam_runs import dry_run, job_pipeline, pipeline_options
from c4prep.cli import main
from c4prep.pipelines.run_c4 import RunConfig, build_c4_pipeline

# --dry_run also stops Beam from checking the bucket's soft-delete policy (a GCS call) while it validates options.
GCP_ARGS = ["--project=my-project", "--region=us-central1", "--temp_location=gs://my-bucket/tmp", "--dry_run=True"]
MAX_JOB_GRAPH_BYTES = 200_000
NUM_LISTED_FILES = 100_000


def dataflow_config() -> RunConfig:
    return RunConfig(output="gs://my-bucket/c4/en", path_list="gs://my-bucket/wet.paths.gz",
                     path_prefix="s3://commoncrawl/", runner="DataflowRunner")


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(sock, address):
        raise AssertionError(f"network access attempted: {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@pytest.fixture(scope="module")
def long_path_list(tmp_path_factory) -> str:
    """A wet.paths.gz-like list of 100,000 WET files (the real CC-MAIN-2019-18 list has 56,000)."""
    path = tmp_path_factory.mktemp("list") / "wet.paths.gz"
    with gzip.open(path, "wt") as handle:
        for index in range(NUM_LISTED_FILES):
            handle.write(f"crawl-data/CC-MAIN-2019-18/segments/1555578517558.8/wet/CC-MAIN-{index:08d}.warc.wet.gz\n")
    return str(path)


def test_dataflow_options_ship_the_package():
    options = pipeline_options("DataflowRunner", GCP_ARGS)
    assert options.view_as(SetupOptions).setup_file.endswith("setup.py")
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("my-project", "us-central1", "gs://my-bucket/tmp")


def test_explicit_container_image_is_respected():
    options = pipeline_options("DataflowRunner", GCP_ARGS + ["--sdk_container_image=example/c4prep-worker:1"])
    assert options.view_as(SetupOptions).setup_file is None


def test_pipeline_constructs_for_dataflow_with_a_small_graph(no_network):
    with job_pipeline(pipeline_options("DataflowRunner", GCP_ARGS)) as pipeline:
        assert isinstance(pipeline.runner, DataflowRunner)
        build_c4_pipeline(pipeline, dataflow_config(), "gs://my-bucket/c4/en/.staging-test")
        graph = pipeline.to_runner_api()
    labels = {transform.unique_name for transform in graph.components.transforms.values()}
    assert {"ReadInput/ReadPathList/ReadAllFiles", "DedupUrls/NewestPerUrl", "DedupUrls/CountDuplicates",
            "WriteShards/GroupShards"} <= labels
    # The WET path list is read on the workers, never inlined: the job graph stays small however many files.
    assert len(graph.SerializeToString()) < MAX_JOB_GRAPH_BYTES


def _dry_run(args: list[str]):
    return CliRunner().invoke(main, ["run", *args, "--dry_run=True"])


def _dataflow_dry_run(tmp_path, long_path_list, extra_args: list[str]) -> dict:
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient",
                        reason="DataflowRunner needs the Google Cloud libraries: pip install 'c4prep[gcp]'")
    job_file = tmp_path / "job.json"
    outcome = _dry_run(["--runner=DataflowRunner", *GCP_ARGS[:3], f"--input-list={long_path_list}",
                        "--input-prefix=s3://commoncrawl/", "--output=gs://my-bucket/c4/en", "--num-shards=1024",
                        f"--dataflow_job_file={job_file}", *extra_args])
    assert outcome.exit_code == 0, outcome.output
    assert "the job was built and validated; nothing ran" in outcome.output
    text = job_file.read_text()
    assert len(text.encode("utf-8")) < MAX_JOB_GRAPH_BYTES
    assert "CC-MAIN-00000001.warc.wet.gz" not in text  # no per-file Create: the list is read by the workers
    return json.loads(text)


def _environments(graph: dict) -> list[dict]:
    return list(graph["components"]["environments"].values())


def _staged_names(environment: dict) -> list[str]:
    """The files a worker environment ships with (the c4prep sdist is `workflow.tar.gz`)."""
    return [beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(base64.b64decode(d["rolePayload"])).staged_name
            for d in environment.get("dependencies", [])]


def _container_image(environment: dict) -> str:
    return beam_runner_api_pb2.DockerPayload.FromString(base64.b64decode(environment["payload"])).container_image


def test_dataflow_dry_run_writes_a_small_job_graph_offline_with_the_package(tmp_path, long_path_list, no_network,
                                                                            capfd):
    graph = _dataflow_dry_run(tmp_path, long_path_list, [])
    labels = {transform["uniqueName"] for transform in graph["components"]["transforms"].values()}
    assert {"ReadInput/ReadPathList/ReadAllFiles", "DedupText", "WriteShards/WriteShard"} <= labels
    (environment,) = _environments(graph)
    assert "workflow.tar.gz" in _staged_names(environment)  # c4prep's setup.py, built into an sdist for workers
    # ... by `python -m build` (a dependency): Beam falls back to `setup.py sdist` after the child process's "No
    # module named build" on stderr, and that fallback fails where setuptools is missing, as in Python 3.12+ venvs
    assert "No module named" not in capfd.readouterr().err
    assert _container_image(environment).endswith("beam_python3.11_sdk:2.77.0")  # Dataflow's stock SDK image


def test_dataflow_dry_run_with_a_custom_container_ships_no_package(tmp_path, long_path_list, no_network):
    graph = _dataflow_dry_run(tmp_path, long_path_list, ["--sdk_container_image=example.org/c4prep-worker:1"])
    (environment,) = _environments(graph)
    assert "workflow.tar.gz" not in _staged_names(environment)
    assert _container_image(environment) == "example.org/c4prep-worker:1"


def test_dataflow_rejects_invalid_options_in_one_line(no_network):
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient",
                        reason="DataflowRunner needs the Google Cloud libraries: pip install 'c4prep[gcp]'")
    outcome = _dry_run(["--runner=DataflowRunner", "--project=p", "--region=us-central1",
                        "--temp_location=gs://my-bucket/tmp"])
    assert outcome.exit_code == 2
    assert outcome.output.strip().splitlines()[-1] == (
        "Error: Pipeline has validations errors: Invalid Project ID (p). Please make sure you specified the Project "
        "ID, not project description.")


@pytest.mark.parametrize("runner_args", [
    ["--runner=FlinkRunner", "--flink_master=flink-jobmanager:8081"],
    ["--runner=SparkRunner", "--spark_master_url=spark://spark-master:7077"],
    ["--runner=PortableRunner", "--job_endpoint=job-server:8099"],
])
def test_portable_runner_invocations_build_the_job(tmp_path, long_path_list, runner_args, no_network):
    job_file = tmp_path / "job.json"
    outcome = _dry_run([*runner_args, "--environment_type=DOCKER",
                        "--environment_config=example.org/c4prep-worker:1", f"--input-list={long_path_list}",
                        "--output=s3://my-bucket/c4/en", "--num-shards=1024", f"--dataflow_job_file={job_file}"])
    assert outcome.exit_code == 0, outcome.output
    assert len(job_file.read_bytes()) < MAX_JOB_GRAPH_BYTES
    (environment,) = _environments(json.loads(job_file.read_text()))
    assert _container_image(environment) == "example.org/c4prep-worker:1"


@pytest.mark.parametrize("runner_args", [["--runner=DirectRunner"],
                                         ["--runner=PortableRunner", "--job_endpoint=job-server:8099"]])
def test_a_dry_run_leaves_no_temporary_folder(runner_args, no_network):
    """Beam makes a local temporary folder for every pipeline and removes it only when the pipeline runs."""
    import apache_beam as beam

    options = pipeline_options(runner_args[0].split("=")[1], runner_args[1:])
    with job_pipeline(options) as pipeline:
        _ = pipeline | beam.Create([1, 2]) | beam.Map(lambda number: number + 1)
        assert os.path.isdir(pipeline.local_tempdir)
        assert dry_run(pipeline, options).components.transforms
    assert not os.path.exists(pipeline.local_tempdir)


def test_a_refusal_before_the_run_leaves_no_temporary_folder(no_network):
    options = pipeline_options("DirectRunner", [])
    with pytest.raises(RuntimeError, match="refused"):
        with job_pipeline(options) as pipeline:
            raise RuntimeError("refused before the run")
    assert not os.path.exists(pipeline.local_tempdir)
