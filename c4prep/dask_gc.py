"""Dask workers whose garbage collector neither rescans their imports nor walks their held results every few
thousand allocations.

A Dask worker holds its tasks' results as Python objects, so CPython's cyclic collector runs its full (oldest
generation) collections often, and each walks every tracked object in the process, including the hundreds of
thousands that importing Beam, NLTK, Dask and c4prep created. Measured with the default `c4prep run` of 33,500
pages on 2 workers (disk shuffle, thresholds as CPython sets them): 33 full collections took 7.3 s of the workers'
34.6 CPU-seconds, against 1.0 s for the whole in-memory run of the same pages.

`JobCollector` (a worker plugin) does two things for the job, and undoes both at teardown:
- it imports the modules c4prep's tasks use, collects once, and moves every object then alive to the collector's
  permanent generation (`gc.freeze`, the standard library's tool for long-lived start-up objects), so full
  collections skip them;
- it sets the collector's first threshold to `FIRST_THRESHOLD` allocations (CPython: 700), so that the young
  collections, and the full ones they lead to, come about 14 times less often. The other two thresholds, and
  CPython's rule that a full collection waits until the objects awaiting one are a quarter of those that survived
  the last, are unchanged.

Reference counting frees objects as before; the collector only finds cycles, and it still finds every one, later.
Measured on 100,500 pages (2 workers, disk shuffle): full collections took 19.5-20.3 s of the workers' 87.5-88.7
CPU-seconds without the plugin, 11.0-11.8 s with the freeze alone (see benchmarks/RESULTS.md for the figures with
both).
"""
from __future__ import annotations

import gc
import importlib

from distributed.diagnostics.plugin import WorkerPlugin

PIPELINE_MODULE = "c4prep.pipelines.run_c4"  # imports every module c4prep's tasks use: Beam, NLTK, langdetect
FIRST_THRESHOLD = 10_000  # allocations between young collections during a job (CPython's default: 700)


class JobCollector(WorkerPlugin):
    """The collector's settings for a job on this worker (see the module docstring)."""

    def setup(self, worker) -> None:
        importlib.import_module(PIPELINE_MODULE)
        gc.collect()
        gc.freeze()
        self.thresholds = gc.get_threshold()
        gc.set_threshold(FIRST_THRESHOLD, *self.thresholds[1:])

    def teardown(self, worker) -> None:
        gc.set_threshold(*self.thresholds)
        gc.unfreeze()
