"""Shared Beam plumbing for every stage that runs a Beam job: options, runs to completion, counters."""
from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import (
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
)
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
from apache_beam.runners.portability.portable_runner import PortableRunner
from apache_beam.runners.runner import PipelineRunner
from apache_beam.transforms.environments import Environment

from c4prep import job_gc
from c4prep.dask_warm_up import DASK_ALIAS, DASK_RUNNER, dask_cluster, is_dask_runner
from c4prep.manifest import Counters
from c4prep.progress import ProgressSettings, Throttled, live_tally, watching
from c4prep.runner_results import JobInputError, RunnerSetupError, collect_counters

REMOTE_RUNNERS = ("DataflowRunner", "PortableRunner", "FlinkRunner", "SparkRunner", "PrismRunner")
OFFLINE_DIRECT_RUNNER = "c4prep.beam_runs.OfflineDirectRunner"
RUNNER_ALIASES = {
    DASK_ALIAS: DASK_RUNNER,  # Beam knows its DaskRunner only by the full class path
    "DirectRunner": OFFLINE_DIRECT_RUNNER,  # never Beam's Prism download
}


class OfflineDirectRunner(PipelineRunner):
    """Beam's DirectRunner for batch jobs, minus its first attempt to run on Prism.

    Beam 2.77's DirectRunner first tries its Prism runner, which downloads a Go binary from the network and runs
    it, and falls back to the FnApiRunner when that fails. c4prep never reaches the network at run time, so it runs
    the FnApiRunner (in memory or ``--direct_running_mode=multi_processing``) directly, set up as the DirectRunner
    sets it up, with its stage inputs streamed to the workers (`fn_runner_workarounds`) and its worker processes
    started through `c4prep.sdk_worker`.
    """

    def run_pipeline(self, pipeline, options):
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle

        from c4prep.fn_runner_workarounds import streaming_stage_inputs
        from c4prep.sdk_worker import workers_started_here

        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        with streaming_stage_inputs(), workers_started_here():
            return fn_runner.FnApiRunner(provision_info=provision).run_pipeline(pipeline, options)


def pipeline_options(runner: str, beam_args: list[str]) -> PipelineOptions:
    """Beam options: the runner plus every pass-through flag; remote runners get the package shipped."""
    scheduler_file = (dask_cluster(runner, beam_args) or {}).get("scheduler_file")
    if scheduler_file and not Path(scheduler_file).is_file():  # Dask would wait for it to appear, saying nothing
        raise RunnerSetupError(f"--dask_scheduler_file {scheduler_file} does not exist: start the Dask scheduler "
                               f"with --scheduler-file {scheduler_file} first, or give --dask_client_address")
    runner = RUNNER_ALIASES.get(runner, runner)
    options = PipelineOptions(["--runner", runner, *beam_args])
    setup = options.view_as(SetupOptions)
    if runner in REMOTE_RUNNERS and not setup.setup_file and not options.get_all_options().get("sdk_container_image"):
        setup_file = Path(__file__).resolve().parents[1] / "setup.py"
        if not setup_file.is_file():
            raise RunnerSetupError(f"{runner} workers need the c4prep package: pass --setup_file PATH/TO/setup.py "
                                   "(from a c4prep checkout) or --sdk_container_image (see docker/)")
        setup.setup_file = str(setup_file)
    options.view_as(StandardOptions).runner = runner
    return options


def beam_option_parser() -> argparse.ArgumentParser:
    """A parser of every option Beam defines (its own and its runners'), built the way Beam builds it."""
    try:  # the DaskRunner defines its options in its own module, c4prep its own in `dask_shuffle`
        import apache_beam.runners.dask.dask_runner  # noqa: F401

        import c4prep.dask_shuffle  # noqa: F401
    except ImportError:
        pass
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    for options_class in {str(cls): cls for cls in PipelineOptions.__subclasses__()}.values():
        options_class._add_argparse_args(parser)  # Beam's extension point for option classes
    return parser


def split_beam_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(arguments Beam does not know, every option string Beam knows); an `argparse.ArgumentError` for a value Beam
    refuses (e.g. an invalid choice)."""
    parser = beam_option_parser()
    _, unknown = parser.parse_known_args(list(args))
    return unknown, [option for action in parser._actions for option in action.option_strings]


# Errors a worker raises for a problem with the data or the storage rather than a bug, as Beam relays them: the
# in-memory runner re-raises the exception itself, the multi-process and remote runners pass its traceback as text.
_WORKER_USER_ERROR_NAMES = ("ManifestError", "TokenizeError", "OutputFolderError", "PermissionError",
                            "FileNotFoundError", "IsADirectoryError", "NotADirectoryError", "OSError")
_WORKER_USER_ERROR_LINE = re.compile(
    rf"^(?:c4prep\.[\w.]+\.)?(?:{'|'.join(_WORKER_USER_ERROR_NAMES)}): (.+)$", re.MULTILINE)
_BEAM_STEP_SUFFIX = re.compile(r"( \[while running '[^']*'\])+$")


def job_input_error(error: BaseException) -> JobInputError | None:
    """The one-line :class:`JobInputError` inside a failed job's exception, or None for a real bug."""
    if type(error).__name__ in _WORKER_USER_ERROR_NAMES:
        message = str(error)
    else:
        found = _WORKER_USER_ERROR_LINE.findall(str(error))
        if not found:
            return None
        message = found[-1]
    return JobInputError(_BEAM_STEP_SUFFIX.sub("", message.strip()))


def run_to_completion(pipeline: beam.Pipeline, options: PipelineOptions,
                      progress: ProgressSettings | None = None) -> Counters:
    """Run the job, wait for it to finish and return its counters, on any runner (DaskRunner included).

    With ``progress``, a progress line on stderr while it runs and a final one from its counters (what each runner
    can show: `c4prep.progress`). A job that a worker stopped because of its input or output raises
    :class:`JobInputError`."""
    try:
        return _run_and_collect(pipeline, options, progress)
    except Exception as error:
        found = job_input_error(error)
        if found is None:
            raise
        raise found from error


@contextmanager
def job_pipeline(options: PipelineOptions) -> Iterator[beam.Pipeline]:
    """A pipeline for the options, for the length of the block; a runner that cannot load or rejects the options
    stops with one line. Its local temporary folder is removed when the block ends: Beam removes it only when the
    pipeline runs, and a dry run or a refusal before the run (a missing cluster, say) would leave it behind."""
    pipeline = _new_pipeline(options)
    try:
        yield pipeline
    finally:
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)


def _new_pipeline(options: PipelineOptions) -> beam.Pipeline:
    runner = options.view_as(StandardOptions).runner
    try:
        pipeline = beam.Pipeline(options=options)
    except ImportError as error:  # e.g. DaskRunner without Dask
        hint = ": pip install 'c4prep[dask]'" if is_dask_runner(runner) else ""
        raise RunnerSetupError(f"{runner} cannot load ({error}){hint}") from None
    except ValueError as error:  # Beam's option validation, e.g. an invalid Dataflow project id
        raise RunnerSetupError(" ".join(str(error).split())) from None
    if isinstance(pipeline.runner, DataflowRunner):
        try:  # DataflowRunner imports the Google Cloud client libraries only when the job is submitted
            import apache_beam.runners.dataflow.internal.apiclient  # noqa: F401
        except ImportError as error:
            raise RunnerSetupError(f"DataflowRunner needs the Google Cloud libraries ({error}): "
                                   "pip install 'c4prep[gcp]'") from None
    return pipeline


def is_dry_run(options: PipelineOptions) -> bool:
    """Beam's --dry_run (as Beam reads it): build and validate the job, run nothing."""
    return bool(options.view_as(TestOptions).dry_run)


def dry_run(pipeline: beam.Pipeline, options: PipelineOptions) -> beam_runner_api_pb2.Pipeline:
    """The job graph the runner would execute (Beam runner API proto), built and validated without running it.

    DataflowRunner goes through Beam's own dry run: option checks, Dataflow's graph rewrites and the packaging of
    the worker dependencies, all without contacting Google. Portable runners (Flink, Spark) get the graph they
    would submit to their job server, with the worker environment and packaged dependencies; others the plain graph.
    """
    if isinstance(pipeline.runner, DataflowRunner):
        return pipeline.run().job.proto_pipeline
    if isinstance(pipeline.runner, PortableRunner):
        return pipeline.to_runner_api(default_environment=Environment.from_options(options.view_as(PortableOptions)))
    return pipeline.to_runner_api()


def _run_and_collect(pipeline: beam.Pipeline, options: PipelineOptions,
                     progress: ProgressSettings | None = None) -> Counters:
    if is_dask_runner(options.view_as(StandardOptions).runner):
        from c4prep.dask_runs import run_on_dask

        return run_on_dask(pipeline, options, progress)
    with watching(progress) as watch, job_gc.settled():
        result = pipeline.run()  # the DirectRunner runs the whole job here; remote runners return once it started
        if isinstance(pipeline.runner, DataflowRunner):  # its metrics are live while the job runs
            watch.add_source(Throttled(lambda: collect_counters(result)))
        result.wait_until_finish()
        counters = collect_counters(result)
        watch.finish(counters)
    return counters


def _dask_task_recorder():
    """Inside a Dask task of a c4prep job: where counter bumps go (Beam's DaskRunner drops Beam metrics)."""
    if "distributed" not in sys.modules:  # not in a Dask worker: skip the import
        return None
    from c4prep.dask_task_counters import task_counter_recorder

    return task_counter_recorder()


INTEGRITY_NAMESPACE = "integrity"
"""Counters in pairs ``<check>:sent`` / ``<check>:received`` that must be equal after a run: what one step emitted
and the next one got. A difference is data the runner lost (or duplicated) between them."""


class CounterCache:
    """Counters of one namespace: Beam metrics, or the Dask task's counts under the DaskRunner
    (`dask_task_counters`); while a job is watched, each bump also goes to this process's live tally
    (`c4prep.progress`). Create it in the DoFn's ``setup``, in the process that counts."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._counters: dict = {}
        self._task_recorder = _dask_task_recorder()
        self._live = live_tally() if self._task_recorder is None else None

    def inc(self, name: str, value: int = 1) -> None:
        if self._task_recorder is not None:
            self._task_recorder(self.namespace, name, value)
            return
        if self._live is not None:
            self._live.add(self.namespace, name, value)
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = Metrics.counter(self.namespace, name)
        counter.inc(value)

    def inc_all(self, counts: Mapping[str, int]) -> None:
        """Bump each named counter by its value (a rule's `Outcome.counters`)."""
        for name, value in counts.items():
            self.inc(name, value)
