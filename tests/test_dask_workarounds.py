"""Beam's DaskRunner as c4prep runs it (`c4prep.dask_workarounds`): ParDo tasks release the outputs Beam keeps in their
arguments and keep what `finish_bundle` emits, combiners are lifted, and Dask sizes Beam's elements and pages deeply
enough to spill them."""
import sys

import pytest

pytest.importorskip("distributed", reason="Dask is not installed: pip install 'apache-beam[dask]'")

import apache_beam as beam  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.runners.dask import transform_evaluator  # noqa: E402
from apache_beam.runners.dask.dask_runner import DaskRunner  # noqa: E402
from apache_beam.runners.dask.overrides import dask_overrides  # noqa: E402
from apache_beam.transforms.combiners import LiftedCombinePerKey, _PartialGroupByKeyCombiningValues  # noqa: E402
from apache_beam.transforms.window import FixedWindows, GlobalWindow  # noqa: E402
from apache_beam.utils.windowed_value import WindowedValue  # noqa: E402
from dask.sizeof import sizeof  # noqa: E402

from c4prep.beam_runs import job_pipeline  # noqa: E402
from c4prep.dask_workarounds import (  # noqa: E402
    DeepSizes,
    GroupByKeyInTheGlobalWindow,
    LiftCombiners,
    ReleasingPreCombine,
    apply_dofn_releasing_outputs,
    object_size,
    releasing_bundle_outputs,
    windowed_in_the_global_window,
    windowed_value_size,
)
from c4prep.pipelines.records import Page  # noqa: E402

PAGE_TEXT = "A sentence that makes the page large. " * 2_000


def _page() -> Page:
    return Page(url="https://example.com/a", normalized_url="example.com/a", text=PAGE_TEXT,
                timestamp="2019-07-16T00:00:00Z", content_type="text/plain", content_length=len(PAGE_TEXT))


class _EmitPerBundle(beam.DoFn):
    """Emits the sum of its bundle's numbers from `finish_bundle` (as Beam's combiner lifting does)."""

    def start_bundle(self):
        self.total = 0

    def process(self, number):
        self.total += number
        return []

    def finish_bundle(self):
        yield WindowedValue(self.total, 0, (GlobalWindow(),))


def _doubled(numbers):
    return numbers | beam.Map(lambda number: number * 2)


def _translated_bag(transforms=_doubled, overrides=(), labels: list | None = None):
    """A two-partition job over Create(range(10)) translated for Dask as Beam's DaskRunner does (no cluster);
    `labels` receives the full label of every transform of the translated job."""
    with job_pipeline(PipelineOptions()) as pipeline:
        _ = transforms(pipeline | beam.Create(range(10)))
        pipeline.replace_all([*overrides, *dask_overrides()])
        visitor = DaskRunner.to_dask_bag_visitor({"npartitions": 2})
        pipeline.visit(visitor)
    if labels is not None:
        labels.extend(node.full_label for node in visitor.bags)
    return list(visitor.bags.values())[-1]


def _bundle_receivers(bag, function) -> list:
    """The `tagged_receivers` argument of every task of `bag`'s graph that calls `function`."""
    tasks = [task for task in dict(bag.__dask_graph__()).values() if getattr(task, "func", None) is function]
    assert tasks, f"no task calls {function.__name__}"
    return [arg.value for task in tasks for arg in task.args
            if isinstance(getattr(arg, "value", None), transform_evaluator.OneReceiver)]


def test_beams_pardo_tasks_keep_their_outputs_in_their_arguments():
    """The upstream behaviour the workaround exists for (if this fails, Beam changed: revisit the workaround). The
    partitions' tasks share one receiver in a single process, so the second partition also returns the first's
    outputs; on a cluster each task gets its own copy and only the memory is lost."""
    bag = _translated_bag()
    outputs = bag.compute(scheduler="sync")
    assert len(outputs) == 15 and set(outputs) == {2 * number for number in range(10)}
    receivers = _bundle_receivers(bag, transform_evaluator.apply_dofn_to_bundle)
    assert {len(receiver.values) for receiver in receivers} == {10}


def test_released_pardo_tasks_give_the_same_outputs_and_keep_none():
    with releasing_bundle_outputs():
        bag = _translated_bag()
    assert transform_evaluator.apply_dofn_to_bundle is not apply_dofn_releasing_outputs  # restored after the block
    assert sorted(bag.compute(scheduler="sync")) == [2 * number for number in range(10)]
    receivers = _bundle_receivers(bag, apply_dofn_releasing_outputs)
    assert len(receivers) == 2 and all(receiver.values == [] for receiver in receivers)


def test_outputs_of_finish_bundle_are_kept():
    """Beam's bundle function collects the outputs before calling `finish_bundle`, so what it emits was lost."""
    per_bundle = lambda numbers: numbers | beam.ParDo(_EmitPerBundle())  # noqa: E731
    assert sum(_translated_bag(per_bundle).compute(scheduler="sync")) < sum(range(10))
    with releasing_bundle_outputs():
        bag = _translated_bag(per_bundle)
    assert sum(bag.compute(scheduler="sync")) == sum(range(10))


def _by_parity(numbers):
    return numbers | beam.Map(lambda number: (number % 2, number))


def _sum_per_parity(numbers):
    return _by_parity(numbers) | beam.CombinePerKey(sum)


def _beams_lifted_sum_per_parity(numbers):
    return _by_parity(numbers) | LiftedCombinePerKey(sum, (), {})


def _pre_combine_tables(bag) -> list[dict]:
    """The table of accumulators of each pre-combining DoFn among the arguments of `bag`'s bundle tasks."""
    return [arg.value[0].do_fn._cache for task in dict(bag.__dask_graph__()).values()
            if getattr(task, "func", None) is apply_dofn_releasing_outputs for arg in task.args
            if isinstance(getattr(arg, "value", None), list)
            and isinstance(arg.value[0].do_fn, _PartialGroupByKeyCombiningValues)]


def test_combiners_are_lifted_with_the_same_result():
    plain_labels, lifted_labels = [], []
    with releasing_bundle_outputs():
        plain = _translated_bag(_sum_per_parity, labels=plain_labels)
        lifted = _translated_bag(_sum_per_parity, [LiftCombiners()], lifted_labels)
    assert sorted(plain.compute(scheduler="sync")) == sorted(lifted.compute(scheduler="sync")) == [(0, 20), (1, 25)]
    pre_combine = ReleasingPreCombine.__name__
    assert any(pre_combine in label for label in lifted_labels)
    assert not any(pre_combine in label for label in plain_labels)


def _grouped_by_parity(numbers):
    return _by_parity(numbers) | beam.GroupByKey()


def test_a_shuffle_in_the_global_window_carries_no_windows():
    """Beam pairs each value with its window before the shuffle (`ReifyWindows`) and takes it out after; in the
    global window c4prep shuffles the values alone, into the same groups. In other windows Beam's expansion stays."""
    beams_labels, our_labels, windowed_labels = [], [], []
    with releasing_bundle_outputs():
        beams = _translated_bag(_grouped_by_parity, labels=beams_labels)
        ours = _translated_bag(_grouped_by_parity, [GroupByKeyInTheGlobalWindow()], our_labels)
        _translated_bag(lambda numbers: _grouped_by_parity(numbers | beam.WindowInto(FixedWindows(5))),
                        [GroupByKeyInTheGlobalWindow()], windowed_labels)

    def groups(bag):
        return sorted((key, sorted(values)) for key, values in bag.compute(scheduler="sync"))
    assert groups(ours) == groups(beams) == [(0, [0, 2, 4, 6, 8]), (1, [1, 3, 5, 7, 9])]
    reified = ["ReifyWindows" in " ".join(labels) for labels in (beams_labels, our_labels, windowed_labels)]
    assert reified == [True, False, True]


def test_the_pre_combined_table_is_released_after_its_bundle():
    """Beam's pre-combining DoFn keeps its last bundle's table, which the task (DoFn included) keeps alive on a Dask
    worker; c4prep's empties it once emitted."""
    with releasing_bundle_outputs():
        beams = _translated_bag(_beams_lifted_sum_per_parity)
        ours = _translated_bag(_sum_per_parity, [LiftCombiners()])
    assert sorted(beams.compute(scheduler="sync")) == sorted(ours.compute(scheduler="sync")) == [(0, 20), (1, 25)]
    assert [len(table) for table in _pre_combine_tables(beams)] == [2, 2]  # one task per partition, both keys left
    assert [len(table) for table in _pre_combine_tables(ours)] == [0, 0]


def test_a_page_and_its_windowed_value_are_sized_with_their_text():
    page = _page()
    assert sizeof(page) < 1_000  # Dask's own estimate: the object without its fields
    assert object_size(page) >= sys.getsizeof(PAGE_TEXT) > 70_000
    element = WindowedValue(("https://example.com/a", page), 0, (GlobalWindow(),))
    plugin = DeepSizes()
    plugin.setup(worker=None)
    try:
        assert sizeof(element) == windowed_value_size(element) >= object_size(page)
        assert sizeof([element] * 20) >= 20 * object_size(page)  # Dask samples a list's items with these sizes
        assert sizeof(3.5) == sys.getsizeof(3.5)  # any other object: Dask's default
    finally:
        plugin.teardown(worker=None)
    assert sizeof(page) < 1_000 and sizeof(element) < 1_000  # Dask's estimates are back after the job


def test_plain_elements_share_one_global_window_as_beam_would_give():
    """`windowed_in_the_global_window` equals Beam's `get_windowed_value` on every kind of element; a plain element
    gets the shared tuple holding Beam's own (singleton) global window."""
    from apache_beam.pvalue import TaggedOutput
    from apache_beam.transforms.window import GlobalWindows, TimestampedValue

    beam_version = transform_evaluator.get_windowed_value
    elements = [("key", b"\x00" * 16), "text", TaggedOutput("tag", 7), WindowedValue(3, 5, (GlobalWindow(),)),
                TimestampedValue("late", 42)]
    for window_fn in (GlobalWindows(), FixedWindows(10)):
        for element in elements:
            assert windowed_in_the_global_window(element, window_fn) == beam_version(element, window_fn), element
    first, second = (windowed_in_the_global_window(element, GlobalWindows()) for element in elements[:2])
    assert first.windows is second.windows and first.windows[0] is GlobalWindow()
    with releasing_bundle_outputs():
        assert transform_evaluator.get_windowed_value is windowed_in_the_global_window
    assert transform_evaluator.get_windowed_value is beam_version  # restored after the block
