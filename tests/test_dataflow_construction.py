"""The pipeline must construct for DataflowRunner (it cannot run here: no Google Cloud access)."""
import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, SetupOptions
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

from c4prep.beam_runs import pipeline_options
from c4prep.pipelines.run_c4 import RunConfig, build_c4_pipeline

GCP_ARGS = ["--project=my-project", "--region=us-central1", "--temp_location=gs://my-bucket/tmp"]


def dataflow_config() -> RunConfig:
    return RunConfig(output="gs://my-bucket/c4/en", path_list="gs://my-bucket/wet.paths.gz",
                     path_prefix="s3://commoncrawl/", runner="DataflowRunner")


def test_dataflow_options_ship_the_package():
    options = pipeline_options("DataflowRunner", GCP_ARGS)
    assert options.view_as(SetupOptions).setup_file.endswith("setup.py")
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("my-project", "us-central1", "gs://my-bucket/tmp")


def test_explicit_container_image_is_respected():
    options = pipeline_options("DataflowRunner", GCP_ARGS + ["--sdk_container_image=example/c4prep-worker:1"])
    assert options.view_as(SetupOptions).setup_file is None


def test_pipeline_constructs_for_dataflow_with_a_small_graph():
    pipeline = beam.Pipeline(options=pipeline_options("DataflowRunner", GCP_ARGS))
    assert isinstance(pipeline.runner, DataflowRunner)
    build_c4_pipeline(pipeline, dataflow_config(), "gs://my-bucket/c4/en/.staging-test")
    graph = pipeline.to_runner_api()
    labels = {transform.unique_name for transform in graph.components.transforms.values()}
    assert {"ReadInput/ReadPathList/Read", "DedupUrls/NewestPerUrl", "CleanPage", "WriteShards/GroupShards"} <= labels
    # The WET path list is read on the workers, never inlined: the job graph stays small however many files.
    assert len(graph.SerializeToString()) < 200_000
