"""The garbage collector set for a job (`c4prep.job_gc`): in the driver around the job, in a worker process from
its first rules step, and as it was afterwards."""
from __future__ import annotations

import gc
import subprocess
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from c4prep import job_gc
from c4prep.beam_runs import job_pipeline, run_to_completion


def _collector() -> tuple[tuple[int, int, int], int]:
    return gc.get_threshold(), gc.get_freeze_count()


def test_the_driver_sets_the_collector_for_the_block_and_back():
    before = _collector()
    assert not job_gc.is_settled()
    with job_gc.settled():
        thresholds, frozen = _collector()
        assert thresholds == (job_gc.FIRST_THRESHOLD, *before[0][1:]) and frozen > 100_000
        assert job_gc.PIPELINE_MODULE in sys.modules
        with job_gc.settled():  # already set: left as found
            pass
        assert _collector() == (thresholds, frozen)
    assert _collector() == before and not job_gc.is_settled()


def test_an_in_memory_job_runs_its_steps_with_the_collector_set():
    """The DirectRunner runs every step in the driver, inside `run_to_completion`'s settled block."""
    before = _collector()

    def record(element):
        beam.metrics.Metrics.counter("test-job-gc", f"first-threshold-{gc.get_threshold()[0]}").inc()
        return element

    with job_pipeline(PipelineOptions(["--runner=DirectRunner"])) as pipeline:
        _ = pipeline | beam.Create([1, 2, 3]) | beam.Map(record)
        counters = run_to_completion(pipeline, pipeline.options)
    assert counters["test-job-gc"] == {f"first-threshold-{job_gc.FIRST_THRESHOLD}": 3}
    assert _collector() == before


def test_a_worker_process_sets_its_collector_at_its_first_rules_step():
    """A worker process (e.g. a `multi_processing` SDK worker) is never settled by a driver: the first rules step it
    sets up settles it, and a second leaves it as it is."""
    script = (
        "import gc\n"
        "from c4prep.pipelines.beam_c4 import ApplyRules\n"
        "before = gc.get_threshold()\n"
        "ApplyRules([]).setup()\n"
        "settled = gc.get_threshold(), gc.get_freeze_count()\n"
        "ApplyRules([]).setup()\n"
        "again = gc.get_threshold(), gc.get_freeze_count()\n"
        "print(before[0], settled[0][0], settled[1] > 100_000, again == settled)\n"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert output.split() == ["700", str(job_gc.FIRST_THRESHOLD), "True", "True"]
