"""The garbage collector set for a job in every process that runs its steps: it neither rescans the imports nor
walks the held data every few hundred allocations.

CPython's cyclic collector runs its full (oldest generation) collections every so often, and each walks every
tracked object in the process, including the hundreds of thousands that importing Beam, NLTK, langdetect and
c4prep created. Measured with the default `c4prep run` of 33,500 pages on 2 Dask workers (disk shuffle, thresholds
as CPython sets them): 33 full collections took 7.3 s of the workers' 34.6 CPU-seconds. In one process (the
DirectRunner in memory, 13,400 pages) the collector took 0.6 s of an 8.8 s run.

`settle` does two things, once per process:
- it imports the modules c4prep's steps use, collects once, and moves every object then alive to the collector's
  permanent generation (`gc.freeze`, the standard library's tool for long-lived start-up objects), so full
  collections skip them;
- it sets the collector's first threshold to `FIRST_THRESHOLD` allocations (CPython: 700), so that the young
  collections, and the full ones they lead to, come about 14 times less often. The other two thresholds, and
  CPython's rule that a full collection waits until the objects awaiting one are a quarter of those that survived
  the last, are unchanged.
`unsettle` undoes both. Where it is called:
- the driver, around the job (`settled`): on the DirectRunner in memory it runs every step itself;
- each worker process, when its first rules step is set up (`beam_c4.ApplyRules.setup`): the DirectRunner's
  `multi_processing` workers and remote runners' workers (Dataflow, Flink, Spark), until the process ends;
- each Dask worker, by a worker plugin for the job (`dask_runs`), undone at its teardown.

Reference counting frees objects as before; the collector only finds cycles, and it still finds every one, later
(a cycle among objects frozen by the driver is found once the job ends and `unsettle` thaws them).
"""
from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator
from contextlib import contextmanager

PIPELINE_MODULE = "c4prep.pipelines.run_c4"  # imports every module c4prep's steps use: Beam, NLTK, langdetect
FIRST_THRESHOLD = 10_000  # allocations between young collections during a job (CPython's default: 700)

_thresholds_before: tuple[int, int, int] | None = None  # the collector's thresholds before `settle`, while settled


def is_settled() -> bool:
    return _thresholds_before is not None


def settle(collect_first: bool = True) -> None:
    """Set this process's collector for the job (see the module docstring); nothing if it is set already.
    `collect_first=False` freezes without collecting first, for a caller that will `unsettle` (its garbage is then
    collected once thawed)."""
    global _thresholds_before
    if is_settled():
        return
    importlib.import_module(PIPELINE_MODULE)
    if collect_first:
        gc.collect()
    gc.freeze()
    _thresholds_before = gc.get_threshold()
    gc.set_threshold(FIRST_THRESHOLD, *_thresholds_before[1:])


def unsettle() -> None:
    """The collector as it was before `settle`: thresholds restored, frozen objects thawed."""
    global _thresholds_before
    if not is_settled():
        return
    gc.set_threshold(*_thresholds_before)
    gc.unfreeze()
    _thresholds_before = None


@contextmanager
def settled() -> Iterator[None]:
    """The collector set for the job while the block runs (the driver's side); left as it was found if it was
    already set."""
    if is_settled():
        yield
        return
    settle(collect_first=False)
    try:
        yield
    finally:
        unsettle()
