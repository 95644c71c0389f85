"""Apache Beam glue for the C4 pipeline: each transform wires one pure function from `c4_rules`.

Nothing here decides anything about a page; rules return outcomes and counters, and these transforms turn the
counters into Beam metrics (namespace and name as in TFDS) so that the driver can build the funnel.
"""
from __future__ import annotations

import functools
import hashlib
import logging
from typing import Any, Callable, Iterable, Iterator, Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes

from c4prep import job_gc
from c4prep.beam_runs import CounterCache
from c4prep.schemas import DOCUMENT_SCHEMA
from c4prep.shards import batched, join_uri, num_shards_for, shard_name, write_shard
from c4prep.staged_output import write_info_file

from . import c4_rules, page_codec
from .funnel import READ_NAMESPACE, WRITE_NAMESPACE
from .list_files import list_item
from .readers import ReadProblem, read_records
from .records import Page, RawRecord

LOGGER = logging.getLogger(__name__)
SPLITS = ("train", "validation")


class ReadInputFiles(beam.PTransform):
    """File patterns (or a file listing paths) -> `RawRecord`s; unreadable input is counted and skipped.

    Patterns are expanded and the path list is read on the workers (`MatchAll`, `ReadAllFromText`, which every
    runner supports, Dask included), and the paths reshuffled, so a listing of tens of thousands of WET files never
    becomes a huge `Create` in the job graph. A listed path is read as it is, not matched: one that does not exist
    is a `missing_file` input problem. Where a path ``may_repeat`` (a file two patterns match, a path a list names
    twice), they are spread by a grouping that keeps each path once instead, so each file is read once.
    """

    def __init__(self, patterns: list[str], path_list: str | None = None, path_prefix: str = "",
                 may_repeat: bool = True) -> None:
        super().__init__()
        self.patterns = patterns
        self.path_list = path_list
        self.path_prefix = path_prefix
        self.may_repeat = may_repeat

    def expand(self, pbegin):
        if self.path_list:
            prefix = self.path_prefix
            paths = (
                pbegin
                | "PathList" >> beam.Create([self.path_list])
                | "ReadPathList" >> beam.io.ReadAllFromText(compression_type=CompressionTypes.AUTO)
                | "ListedPaths" >> beam.Map(list_item)
                | "SkipBlankPaths" >> beam.Filter(bool)
                | "PrefixPaths" >> beam.Map(lambda path: prefix + path)
            )
        else:
            paths = (
                pbegin
                | "Patterns" >> beam.Create(self.patterns)
                | "Match" >> fileio.MatchAll(fileio.EmptyMatchTreatment.ALLOW)
                | "Paths" >> beam.Map(lambda metadata: metadata.path)
            )
        return (
            paths
            | "SpreadFiles" >> (beam.Distinct() if self.may_repeat else beam.Reshuffle())
            | "ReadRecords" >> beam.ParDo(_ReadFile())
        )


class _ReadFile(beam.DoFn):
    def setup(self) -> None:
        self.counters = CounterCache(READ_NAMESPACE)

    def process(self, path: str) -> Iterator[RawRecord]:
        self.counters.inc("files")
        for item in read_records(path):
            if isinstance(item, ReadProblem):
                self.counters.inc(f"problem:{item.kind}")
                LOGGER.warning("skipped bad input: %s", item.message)
            else:
                self.counters.inc("records")
                yield item


RuleStep = tuple[Callable[[Any], c4_rules.Outcome], str]  # a rule on one argument, and its counter namespace


class ApplyRules(beam.DoFn):
    """Run rules in order on each element: pass on what the last keeps, bump the counters each names under its
    namespace. A rule that drops the element ends its run, so later rules count only what reached them, as if each
    rule were its own step; one step instead of several spares a runner its per-step work on every element."""

    def __init__(self, steps: Sequence[RuleStep]) -> None:
        self.steps = list(steps)

    def setup(self) -> None:
        job_gc.settle()  # a worker process's first rules step sets its collector for the job (nothing in the driver)
        self.counters = {namespace: CounterCache(namespace) for _, namespace in self.steps}

    def process(self, element) -> Iterator[Page]:
        for rule, namespace in self.steps:
            outcome = rule(element)
            self.counters[namespace].inc_all(outcome.counters)
            if outcome.page is None:
                return
            element = outcome.page
        yield element


def apply_rules(*rules: Callable[..., c4_rules.Outcome]) -> beam.ParDo:
    """One ParDo running `rules` in order (`ApplyRules`), each a `c4_rules` rule or a `functools.partial` of one
    (fixed keyword arguments), under its TFDS counter namespace."""
    return beam.ParDo(ApplyRules([(rule, c4_rules.NAMESPACES[getattr(rule, "func", rule).__name__])
                                  for rule in rules]))


class _Newest(beam.CombineFn):
    """Of `(recency key, payload)` inputs sharing a normalised URL, the payload with the greatest key (the page
    `c4_rules.select_newest_page` keeps) and how many inputs there were (associative, order-free)."""

    def create_accumulator(self):
        return (None, 0)

    def add_input(self, accumulator, keyed_payload):
        return self.merge_accumulators([accumulator, (keyed_payload, 1)])

    def merge_accumulators(self, accumulators):
        candidates = [keyed for keyed, _ in accumulators if keyed is not None]
        best = max(candidates, key=lambda keyed: keyed[0]) if candidates else None
        return (best, sum(count for _, count in accumulators))

    def extract_output(self, accumulator):
        return accumulator


class _CountUrlDuplicates(beam.DoFn):
    """The winner of each URL, its duplicates counted; with `cleaned`, the winner's payload is its cleaning outcome:
    its counters are counted under clean_page's namespace and its page passed on if kept."""

    def __init__(self, cleaned: bool) -> None:
        self.cleaned = cleaned

    def setup(self) -> None:
        self.counters = CounterCache("duplicate-url-filter")
        self.cleaning = CounterCache(c4_rules.NAMESPACES["clean_page"])

    def process(self, keyed_best):
        _, ((_, payload), count) = keyed_best
        self.counters.inc("passed")
        if count > 1:
            self.counters.inc("filtered", count - 1)
        if not self.cleaned:
            yield page_codec.decode_page(payload)
            return
        outcome = page_codec.decode_outcome(payload)
        self.cleaning.inc_all(outcome.counters)
        if outcome.page is not None:
            yield outcome.page


class DedupUrls(beam.PTransform):
    """One page per normalised URL: the newest, with a deterministic tie-break (see `page_recency_key`).

    With `clean=True` it is `DedupUrls | clean_page` in one shuffle: each page is cleaned before the shuffle, where
    it was read, and the shuffle carries the raw page's recency key with the cleaning outcome (no text at all for a
    page that cleaning drops, cleaned text for the others) instead of the raw page. The winner is still chosen on
    the raw page, and only the winner's cleaning counters are counted, so the pages and counters are those of
    cleaning after the dedup; the cost is cleaning the losers of the URL dedup too.
    """

    def __init__(self, clean: bool = False) -> None:
        super().__init__()
        self.clean = clean

    def expand(self, pages):
        payload = _encoded_cleaning if self.clean else page_codec.encode_page
        return (
            pages
            | "KeyByUrl" >> beam.Map(functools.partial(_keyed_by_url, payload=payload))
            | "NewestPerUrl" >> beam.CombinePerKey(_Newest())
            | "CountDuplicates" >> beam.ParDo(_CountUrlDuplicates(cleaned=self.clean))
        )


def _keyed_by_url(page: Page, payload: Callable[[Page], bytes]) -> tuple[str, tuple[tuple, bytes]]:
    return page.normalized_url, (c4_rules.page_recency_key(page), payload(page))


def _encoded_cleaning(page: Page) -> bytes:
    return page_codec.encode_outcome(c4_rules.clean_page(page))


class JoinWebtextUrls(beam.PTransform):
    """Keep pages whose normalised URL appears in the URL list files (one URL per line), as TFDS webtextlike."""

    def __init__(self, url_files: list[str]) -> None:
        super().__init__()
        self.url_files = url_files

    def expand(self, pages):
        listed = (
            pages.pipeline
            | "UrlFiles" >> beam.Create(self.url_files)
            | "ReadUrls" >> beam.io.ReadAllFromText()
            | "ListedUrls" >> beam.Map(list_item)
            | "SkipBlankUrls" >> beam.Filter(bool)
            | "NormalizeUrls" >> beam.Map(lambda url: (c4_rules.normalize_url(url), 1))
            | "CountListings" >> beam.CombinePerKey(sum)
        )
        keyed_pages = pages | "KeyByUrl" >> beam.Map(lambda page: (page.normalized_url, page))
        return (
            {"pages": keyed_pages, "listed": listed}
            | "JoinOnUrl" >> beam.CoGroupByKey()
            | "KeepListed" >> beam.ParDo(ApplyRules([(_join_listed, c4_rules.NAMESPACES["join_webtext_urls"])]))
        )


def _join_listed(url_and_groups) -> c4_rules.Outcome:
    _, groups = url_and_groups
    return c4_rules.join_webtext_urls(list(groups["pages"]), sum(groups["listed"]))


def document_row(page: Page) -> dict:
    """The output record of a page, in `DOCUMENT_SCHEMA` order."""
    return {
        "url": page.url,
        "text": page.text,
        "timestamp": page.timestamp,
        "content_type": page.content_type,
        "content_length": page.content_length,
    }


def url_digest(url: str) -> str:
    """sha256 hex of a URL: places rows in shards, unrelated to the md5 that picks the split."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def row_order_key(row: dict) -> tuple:
    """Total order of rows inside a shard, independent of how the runner delivered them."""
    return (url_digest(row["url"]), row["url"], row["timestamp"], row["text"])


def shard_index(url: str, num_shards: int) -> int:
    """Shard of a document."""
    return int(url_digest(url), 16) % num_shards


def _row_bytes(row: dict) -> int:
    return sum(len(row[name].encode("utf-8")) for name in ("url", "text", "timestamp", "content_type")) + 8


class WriteDocumentShards(beam.PTransform):
    """Pages -> `<split>-NNNNN-of-MMMMM.<format suffix>` shards plus a `<shard>.info.json` each, in `staging_dir`.

    `num_shards` is a fixed count per split, or None for the TFDS rule on each split's size. Rows are assigned
    to shards by URL hash and sorted inside a shard, so the bytes never depend on the runner or worker count.
    Empty shards are not produced here; the driver fills them in (`complete_empty_shards`).
    """

    def __init__(self, staging_dir: str, num_shards: int | None, shard_format: str) -> None:
        super().__init__()
        self.staging_dir = staging_dir
        self.num_shards = num_shards
        self.shard_format = shard_format

    def expand(self, pages):
        if self.num_shards is None:
            rows = pages | "ToRow" >> beam.Map(_split_row)
            shard_counts = (
                rows
                | "RowSize" >> beam.Map(lambda split_row: (split_row[0], (_row_bytes(split_row[1]), 1)))
                | "SplitSize" >> beam.CombinePerKey(_sum_pairs)
                | "ShardCount" >> beam.MapTuple(lambda split, size: (split, num_shards_for(*size)))
            )
            keyed = rows | "AssignShard" >> beam.Map(_assign_shard, counts=beam.pvalue.AsDict(shard_counts))
        else:  # the counts as a plain argument, not a side input: Beam's DaskRunner computes a side input inside
            # every task; the page becomes its row in the same step
            counts = {split: self.num_shards for split in SPLITS}
            keyed = pages | "AssignShard" >> beam.Map(lambda page: _assign_shard(_split_row(page), counts))
        return (keyed | "GroupShards" >> beam.GroupByKey()
                | "WriteShard" >> beam.ParDo(_WriteShard(self.staging_dir, self.shard_format)))


def _split_row(page: Page) -> tuple[str, dict]:
    return c4_rules.split_for_url(page.normalized_url), document_row(page)


def _assign_shard(split_row: tuple[str, dict], counts: dict[str, int]) -> tuple[tuple[str, int, int], dict]:
    split, row = split_row
    count = counts[split]
    return (split, shard_index(row["url"], count), count), row


def _sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    total_bytes = total_rows = 0
    for size, rows in pairs:
        total_bytes += size
        total_rows += rows
    return total_bytes, total_rows


class _WriteShard(beam.DoFn):
    def __init__(self, staging_dir: str, shard_format: str) -> None:
        self.staging_dir = staging_dir
        self.shard_format = shard_format

    def setup(self) -> None:
        self.counters = CounterCache(WRITE_NAMESPACE)

    def process(self, shard_rows) -> Iterator[dict]:
        (split, index, count), rows = shard_rows
        rows = sorted(rows, key=row_order_key)
        uri = join_uri(self.staging_dir, shard_name(split, index, count, self.shard_format))
        info = write_shard(uri, DOCUMENT_SCHEMA, batched(rows, DOCUMENT_SCHEMA))
        write_info_file(self.staging_dir, info)
        self.counters.inc(f"examples:{split}", len(rows))
        self.counters.inc("lines", sum(row["text"].count("\n") + 1 for row in rows))
        yield {"name": info.name, "num_rows": info.num_rows}
