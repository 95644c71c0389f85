"""Shared Beam plumbing for every stage that runs a Beam job: options, counters, shard stats from staging."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions

from c4prep.manifest import Counters
from c4prep.shards import ShardInfo, atomic_output, join_uri

REMOTE_RUNNERS = ("DataflowRunner", "PortableRunner", "FlinkRunner", "SparkRunner", "PrismRunner")
INFO_SUFFIX = ".info.json"


class RunnerSetupError(ValueError):
    """The runner cannot get the c4prep package onto its workers (the message says what to pass)."""


def pipeline_options(runner: str, beam_args: list[str]) -> PipelineOptions:
    """Beam options: the runner plus every pass-through flag; remote runners get the package shipped."""
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


class CounterCache:
    """Beam counters of one namespace, created once per worker."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._counters: dict = {}

    def inc(self, name: str, value: int = 1) -> None:
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = Metrics.counter(self.namespace, name)
        counter.inc(value)


def collect_counters(result) -> Counters:
    """A finished job's counters summed over steps: namespace -> name -> value."""
    counters: Counters = {}
    for metric in result.metrics().query()["counters"]:
        value = metric.committed if metric.committed is not None else metric.attempted
        names = counters.setdefault(metric.key.metric.namespace, {})
        names[metric.key.metric.name] = names.get(metric.key.metric.name, 0) + int(value or 0)
    return {namespace: dict(sorted(names.items())) for namespace, names in sorted(counters.items())}


def write_info_file(directory: str, info: ShardInfo) -> None:
    """Record a written shard's stats next to it so the driver can build the manifest without reading shards."""
    with atomic_output(join_uri(directory, info.name + INFO_SUFFIX)) as stream:
        stream.write(json.dumps(asdict(info), sort_keys=True).encode("utf-8"))


def read_shard_infos(staging_dir: str) -> list[ShardInfo]:
    """Stats of the shards the workers wrote into `staging_dir`, from their info files."""
    infos = []
    for metadata in FileSystems.match([join_uri(staging_dir, "*" + INFO_SUFFIX)])[0].metadata_list:
        with FileSystems.open(metadata.path) as handle:
            infos.append(ShardInfo(**json.loads(handle.read())))
    return infos
