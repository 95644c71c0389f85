"""What a job gives back on any runner (Beam's or the Dask one): its counters, or an error that stopped it."""
from __future__ import annotations

from collections.abc import Iterable

from c4prep.manifest import Counters


class RunnerSetupError(ValueError):
    """The runner cannot run this job as set up (the message says what to pass or install)."""


class LostWorkerError(RuntimeError):
    """A job failed after its runner lost a worker in a way that can duplicate data (the message says what to do);
    nothing was written."""


class JobInputError(RuntimeError):
    """A job stopped by a problem with its input or output (a damaged shard, a folder it cannot write), reported by
    a worker; the message is that problem's one line."""


def sum_counters(counts: Iterable[tuple[str, str, int]]) -> Counters:
    """(namespace, name, value) counts summed into counters: namespace -> name -> value, sorted."""
    counters: Counters = {}
    for namespace, name, value in counts:
        names = counters.setdefault(namespace, {})
        names[name] = names.get(name, 0) + value
    return {namespace: dict(sorted(names.items())) for namespace, names in sorted(counters.items())}


def merge_counters(*parts: Counters) -> Counters:
    """Several sets of counters (namespace -> name -> value) summed into one, sorted."""
    return sum_counters((namespace, name, value) for part in parts
                        for namespace, names in part.items() for name, value in names.items())


def collect_counters(result) -> Counters:
    """A finished Beam job's counters (from its ``PipelineResult``) summed over steps: namespace -> name -> value."""
    return sum_counters(
        (metric.key.metric.namespace, metric.key.metric.name,
         int((metric.committed if metric.committed is not None else metric.attempted) or 0))
        for metric in result.metrics().query()["counters"])
