"""Apache Beam glue for MinHash near-dedup: the shuffles around the pure functions of `near_dedup`.

    pages -> (band_key, (doc_key, signature))          one element per LSH band of each page
          -> GroupByKey                                 one LSH bucket
          -> verified candidate pairs                   `bucket_pairs` (all pairs, or star when oversized)
          -> both ends -> GroupByKey per document       a pair found in several bands counts once, at its
                                                        smaller end; verified neighbours = adjacency
          -> max_rounds x [messages -> GroupByKey -> `propagate`]   min-label propagation (unrolled: Beam graphs
                                                                     are static; converged rounds send nothing)
          -> (doc_key, label) of non-survivors
          -> CoGroupByKey with the pages keyed by doc_key -> keep or drop, with counters

Every decision is a function of sets of elements (sorted members, minima), so the output and counters are the
same on any runner and worker count, and equal `near_dedup.near_dedup_reference`.
"""
from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

from c4prep.beam_runs import CounterCache

from . import near_dedup
from .near_dedup import NAMESPACE, NearDedupConfig, NodeState
from .records import Page


def _band_entries(page: Page, config: NearDedupConfig):
    sketch = near_dedup.minhash(page.text, config)
    entry = (near_dedup.doc_key(page), near_dedup.signature(sketch))
    for band_key in near_dedup.band_keys(sketch, config):
        yield band_key, entry


class _BucketPairs(beam.DoFn):
    def __init__(self, config: NearDedupConfig) -> None:
        self.config = config

    def setup(self) -> None:
        self.counters = CounterCache(NAMESPACE)

    def process(self, bucket) -> Iterator:
        _, members = bucket
        members = list(members)
        if len(members) < 2:
            return
        result = near_dedup.bucket_pairs(members, self.config)
        if result.oversized:
            self.counters.inc("oversized-buckets")
        yield from result.pairs


class _NodeNeighbours(beam.DoFn):
    """All candidate pairs of one document (each seen once per shared band): counts every distinct pair once, at
    its smaller end, and starts label propagation for documents with at least one verified pair."""

    def setup(self) -> None:
        self.counters = CounterCache(NAMESPACE)

    def process(self, node_pairs) -> Iterator:
        node, pairs = node_pairs
        verified_by_neighbour = dict(pairs)  # a pair's verification never differs between bands
        self.counters.inc("candidate-pairs", sum(1 for other in verified_by_neighbour if node < other))
        neighbours = [other for other, verified in verified_by_neighbour.items() if verified]
        self.counters.inc("verified-pairs", sum(1 for other in neighbours if node < other))
        if neighbours:
            yield node, near_dedup.initial_state(node, neighbours)


def _both_ends(pair_verified):
    (a, b), verified = pair_verified
    return [(a, (b, verified)), (b, (a, verified))]


_STATE, _LABEL = 0, 1  # message kinds of a propagation round


def _round_messages(node_state, round_index: int):
    node, state = node_state
    yield node, (_STATE, tuple(state))
    label = near_dedup.outgoing_label(state, round_index)
    if label is not None:
        for neighbour in state.neighbours:
            yield neighbour, (_LABEL, label)


def _round_update(node_messages, round_index: int):
    node, messages = node_messages
    state = None
    incoming = []
    for kind, value in messages:
        if kind == _STATE:
            state = NodeState(*value)
        else:
            incoming.append(value)
    return node, near_dedup.propagate(state, incoming, round_index)


def _max_or_zero(values) -> int:
    return max(values, default=0)


class _CheckRounds(beam.DoFn):
    def __init__(self, max_rounds: int) -> None:
        self.max_rounds = max_rounds

    def setup(self) -> None:
        self.counters = CounterCache(NAMESPACE)

    def process(self, rounds: int) -> Iterator:
        if rounds:  # Beam's DaskRunner gives no rounds at all for an empty graph: absent is 0 on every runner
            self.counters.inc("propagation-rounds", rounds)
        near_dedup.check_converged(rounds, self.max_rounds)
        return iter(())


class _Decide(beam.DoFn):
    """Counts clusters (one per component: its smallest member) and emits the members to drop."""

    def setup(self) -> None:
        self.counters = CounterCache(NAMESPACE)

    def process(self, node_state) -> Iterator:
        node, state = node_state
        if state.label == node:
            self.counters.inc("clusters")
        else:
            yield node, state.label


class _KeepOrDrop(beam.DoFn):
    def setup(self) -> None:
        self.counters = CounterCache(NAMESPACE)

    def process(self, joined) -> Iterator[Page]:
        key, groups = joined
        pages = list(groups["page"])
        if len(pages) > 1:
            raise ValueError(f"near-dedup needs unique URLs (run URL dedup first); seen twice: {key[1]!r}")
        if not pages:
            return
        if any(True for _ in groups["drop"]):
            self.counters.inc("filtered:near_duplicate")
        else:
            self.counters.inc("passed")
            yield pages[0]


class NearDedup(beam.PTransform):
    """PCollection[Page] -> PCollection[Page] without MinHash near duplicates (counters in `near-dedup`).

    Pages must have unique URLs (the C4 pipeline's URL dedup guarantees it); a repeated URL fails the job.
    """

    def __init__(self, config: NearDedupConfig = NearDedupConfig()) -> None:
        super().__init__()
        self.config = config

    def expand(self, pages):
        config = self.config
        state = (
            pages
            | "BandEntries" >> beam.FlatMap(_band_entries, config)
            | "GroupBuckets" >> beam.GroupByKey()
            | "BucketPairs" >> beam.ParDo(_BucketPairs(config))
            | "BothEnds" >> beam.FlatMap(_both_ends)
            | "GroupByDocument" >> beam.GroupByKey()
            | "InitialLabels" >> beam.ParDo(_NodeNeighbours())
        )
        for round_index in range(1, config.max_rounds + 1):
            state = (
                state
                | f"Round{round_index}Messages" >> beam.FlatMap(_round_messages, round_index)
                | f"Round{round_index}Group" >> beam.GroupByKey()
                | f"Round{round_index}Labels" >> beam.Map(_round_update, round_index)
            )
        _ = (
            state
            | "LastChange" >> beam.Map(lambda node_state: node_state[1].last_changed)
            | "Rounds" >> beam.CombineGlobally(_max_or_zero)
            | "CheckConverged" >> beam.ParDo(_CheckRounds(config.max_rounds))
        )
        drops = state | "Decide" >> beam.ParDo(_Decide())
        keyed_pages = pages | "KeyByDoc" >> beam.Map(lambda page: (near_dedup.doc_key(page), page))
        return (
            {"page": keyed_pages, "drop": drops}
            | "JoinDecisions" >> beam.CoGroupByKey()
            | "KeepOrDrop" >> beam.ParDo(_KeepOrDrop())
        )


def near_dedup_counters(result) -> dict[str, int]:
    """The stage's counters from a finished pipeline result, every name present (0 when never bumped)."""
    counters = dict.fromkeys(near_dedup.COUNTERS, 0)
    for metric in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        value = metric.committed if metric.committed is not None else metric.attempted
        name = metric.key.metric.name
        counters[name] = counters.get(name, 0) + int(value or 0)
    return counters
