"""Workarounds for faults of Beam 2.77's DaskRunner, applied around every c4prep Dask job (`dask_runs`).

1. **Bundle outputs released.** Beam 2.77's DaskRunner runs a ParDo on a partition as
   ``apply_dofn_to_bundle(items, ..., tagged_receivers)``: the DoFn's outputs are appended to a list inside
   ``tagged_receivers``, an argument of the Dask task, and the task returns a copy of that list. The task's
   arguments stay on the worker after the task has finished, so every partition's whole output stayed alive twice,
   out of Dask's sight. Measured with line dedup of 100,000 pages on 2 workers with a 2 GiB limit: the workers
   paused at 80 % with no result left in Dask's memory and about 2 million Beam ``WindowedValue`` objects still
   reachable from finished tasks' arguments, and the job never finished. `releasing_bundle_outputs` has the graph
   call `apply_dofn_releasing_outputs` instead, which empties that list before and after the bundle. A task that
   finds the list already filled also starts empty: where a ParDo's tasks share one argument object (Dask's
   in-process schedulers), Beam's version returned every earlier partition's outputs again.
2. **Sizes Dask can spill by.** Dask spills a worker's results to disk by their `dask.sizeof` estimate, which is
   shallow for objects it does not know: a Beam ``WindowedValue`` or a `Page` counted as about 100 bytes whatever
   their text, so Dask saw under a tenth of the memory it held and never spilled. `DeepSizes` (a worker plugin)
   counts a ``WindowedValue`` with its value and a dataclass instance with its fields.
3. **What `finish_bundle` emits is kept.** Beam's `apply_dofn_to_bundle` collects the outputs before it calls
   `finish_bundle`, so whatever a DoFn emitted there was lost; `apply_dofn_releasing_outputs` runs the same steps
   (setup, start, process each element, finish, teardown) and collects after them.
4. **Combiners lifted.** Beam's DirectRunner replaces every `CombinePerKey` with `LiftedCombinePerKey` (each bundle
   combines per key, in `finish_bundle`, before the shuffle); its DaskRunner does not, so every value crossed the
   shuffle. `LiftCombiners` applies that same replacement (it needs 3), with 5.
5. **The pre-combined table released.** Beam's pre-combining DoFn keeps its bundle's table of accumulators (one
   entry per key) after `finish_bundle`: a runner reuses the DoFn and the next `start_bundle` replaces the table.
   On Dask each task unpickles its own DoFn, and the worker keeps the task, DoFn included, as long as its result is
   held, which in a disk shuffle (`dask_shuffle`) is until the whole shuffle is done. Line dedup of 1M pages on 2
   workers held 1.5 million tuples a worker while Dask held 11 MiB of results; of 300,000 pages it peaked at
   0.93-0.98 GiB a worker with Beam's DoFn and 0.72 GiB with `ReleasingPreCombine`, which empties the table once
   it has emitted it.
6. **Finished tasks' specs released.** A Dask worker keeps a finished task's spec (its function and arguments; for
   a Beam ParDo the DoFn with its signature, and a fused chain of steps one of each) for as long as it holds the
   task's result. In a disk shuffle the first stage's results (tiny) are held until the whole shuffle is done, so
   every partition's chain of specs stayed alive: at 1M pages in 1,000 partitions each worker held about 860 such
   tasks with 19,500 DoFn signatures, 1.3 GiB of memory for 10 MiB of results. `ReleaseTaskSpecs` (a worker plugin)
   drops a task's spec once its result is stored; a task computed again gets its spec anew from the scheduler.
7. **One global window for all elements.** Before every ParDo, Beam's DaskRunner wraps each element with
   ``get_windowed_value``, which calls ``GlobalWindow()`` each time: the class is a singleton, but its constructor
   reads the window's end timestamp from a proto on every call (1.1 s of about 51 worker CPU-seconds on 33,500
   pages). `windowed_in_the_global_window` wraps plain elements with one shared ``(GlobalWindow(),)``, the same
   object Beam's call returns, and leaves every other element to Beam's function.
8. **The job's end seen at once.** `DaskRunnerResult.wait_until_finish` follows its futures with
   ``distributed.as_completed``, which runs on the event loop of the *current* client, not of the client that owns
   the futures. `dask_runs` holds a client of its own, which is current inside its ``with`` block, so the futures'
   events fired on one loop while the waiter slept on the other, and it woke only when a timer of its own loop
   fired (the client's periodic calls, every 2 and 5 s). On 33,500 pages `wait_until_finish` returned 0.9-2.7 s
   after the scheduler had the job's last result, and wall times came in two modes 5 s apart.
   `waiting_on_the_jobs_client` makes Beam's own client current while it waits: it returns when the last task
   ends.
9. **No windows carried through a shuffle in the global window.** Beam's DaskRunner expands every `GroupByKey` into
   a ParDo that pairs each value with its timestamp and window (``ReifyWindows``, run by Beam's per-window invoker),
   the shuffle of those ``WindowedValue`` pairs, and a step that takes the values out of them again. In the global
   window nothing reads them: `GroupByKeyInTheGlobalWindow` shuffles the values themselves, into the same groups.
"""
from __future__ import annotations

import dataclasses
import sys
from contextlib import AbstractContextManager

from apache_beam.pipeline import PTransformOverride
from apache_beam.runners.common import DoFnInvoker
from apache_beam.runners.dask import transform_evaluator
from apache_beam.runners.dask.overrides import _GroupByKeyOnly
from apache_beam.pvalue import TaggedOutput
from apache_beam.transforms import core
from apache_beam.transforms.combiners import LiftedCombinePerKey, _FinishCombine, _PartialGroupByKeyCombiningValues
from apache_beam.transforms.window import GlobalWindow, TimestampedValue
from apache_beam.utils.windowed_value import WindowedValue
from dask.sizeof import sizeof
from distributed.diagnostics.plugin import WorkerPlugin

from c4prep.patches import replaced

_BEAM_GET_WINDOWED_VALUE = transform_evaluator.get_windowed_value
_GLOBAL_WINDOWS = (GlobalWindow(),)
WINDOWING_BYTES = 100  # a WindowedValue's timestamp and its tuple of the global window


def apply_dofn_releasing_outputs(items, invoker_args, invoker_kwargs, tagged_receivers) -> list:
    """Beam's `apply_dofn_to_bundle` with its outputs released when it returns, and with what `finish_bundle`
    emits among them (Beam's collects the outputs before calling `finish_bundle`, so those were lost)."""
    tagged_receivers.values.clear()
    invoker = DoFnInvoker.create_invoker(*invoker_args, **invoker_kwargs)
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(item)
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    outputs = [windowed.value for windowed in tagged_receivers.values]
    tagged_receivers.values.clear()
    return outputs


class ReleasingPreCombine(_PartialGroupByKeyCombiningValues):
    """Beam's pre-combining DoFn, its table of accumulators emptied once `finish_bundle` has emitted it."""

    def finish_bundle(self):
        yield from super().finish_bundle()
        self._cache, self._cached_windowed_side_inputs = {}, {}


class ReleasingLiftedCombinePerKey(LiftedCombinePerKey):
    """Beam's `LiftedCombinePerKey` with `ReleasingPreCombine` as its pre-combining step."""

    def expand(self, pcoll):
        return (pcoll
                | core.ParDo(ReleasingPreCombine(self._combine_fn), **self._side_inputs)
                | core.GroupByKey()
                | core.ParDo(_FinishCombine(self._combine_fn), **self._side_inputs))


class LiftCombiners(PTransformOverride):
    """Beam's own combiner lifting (each bundle combines per key before the shuffle), which Beam's DirectRunner
    applies and its DaskRunner does not: there every value of a `CombinePerKey` crossed the shuffle. Only for the
    global window, as the DirectRunner's; with `ReleasingLiftedCombinePerKey` (see 5)."""

    def matches(self, applied_ptransform) -> bool:
        return (isinstance(applied_ptransform.transform, core.CombinePerKey)
                and applied_ptransform.inputs[0].windowing.is_default())

    def get_replacement_transform_for_applied_ptransform(self, applied_ptransform):
        transform = applied_ptransform.transform
        return ReleasingLiftedCombinePerKey(transform.fn, transform.args, transform.kwargs)


class GroupByKeyInTheGlobalWindow(PTransformOverride):
    """A `GroupByKey` in the global window as Beam's DaskRunner's shuffle alone, without its windows (see 9);
    applied before Beam's own replacement, which then finds none left."""

    def matches(self, applied_ptransform) -> bool:
        return (type(applied_ptransform.transform) is core.GroupByKey
                and applied_ptransform.inputs[0].windowing.is_default())

    def get_replacement_transform_for_applied_ptransform(self, applied_ptransform):
        return _GroupByKeyOnly()


def windowed_in_the_global_window(item, window_fn) -> WindowedValue:
    """Beam's `get_windowed_value`, with one shared global window for plain elements (see 7)."""
    if isinstance(item, (TaggedOutput, WindowedValue, TimestampedValue)):
        return _BEAM_GET_WINDOWED_VALUE(item, window_fn)
    return WindowedValue(item, 0, _GLOBAL_WINDOWS)


def waiting_on_the_jobs_client(result) -> str:
    """Beam's ``result.wait_until_finish()``, with the client that owns the job's futures current (8)."""
    with result.client.as_current():
        return result.wait_until_finish()


def releasing_bundle_outputs() -> AbstractContextManager[None]:
    """While a Beam pipeline is translated for Dask inside this block, its ParDo tasks run c4prep's bundle function
    (`apply_dofn_releasing_outputs`: outputs released after the task, `finish_bundle` outputs kept) on elements
    wrapped by `windowed_in_the_global_window`."""
    return replaced((transform_evaluator, "apply_dofn_to_bundle", apply_dofn_releasing_outputs),
                    (transform_evaluator, "get_windowed_value", windowed_in_the_global_window))


def windowed_value_size(value: WindowedValue) -> int:
    return sys.getsizeof(value) + WINDOWING_BYTES + sizeof(value.value)


def object_size(obj: object) -> int:
    """A dataclass instance with its fields (`Page`: its texts); any other object as `sys.getsizeof` (Dask's
    default)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sys.getsizeof(obj) + sum(sizeof(getattr(obj, field.name)) for field in dataclasses.fields(obj))
    return sys.getsizeof(obj)


class ReleaseTaskSpecs(WorkerPlugin):
    """Drops each task's spec on this worker once its result is in memory (see 6)."""

    def setup(self, worker) -> None:
        self.worker = worker

    def transition(self, key, start: str, finish: str, **kwargs) -> None:
        if finish == "memory" and (task := self.worker.state.tasks.get(key)) is not None:
            task.run_spec = None


class DeepSizes(WorkerPlugin):
    """Registers `windowed_value_size` and `object_size` with `dask.sizeof` on each worker for the job; teardown
    puts Dask's own estimates back. `dask.sizeof` caches the function it found for each class it has sized, so the
    classes cached to the replaced function are dropped from its table each time (they are looked up again)."""

    def setup(self, worker) -> None:
        self.previous = {kind: sizeof.dispatch(kind) for kind in (WindowedValue, object)}
        _replace_sizes({WindowedValue: windowed_value_size, object: object_size})

    def teardown(self, worker) -> None:
        _replace_sizes(self.previous)


def _replace_sizes(functions: dict[type, object]) -> None:
    replaced = {sizeof.dispatch(kind) for kind in functions}
    for kind in [kind for kind, function in sizeof._lookup.items() if function in replaced]:
        del sizeof._lookup[kind]
    for kind, function in functions.items():
        sizeof.register(kind, function)
