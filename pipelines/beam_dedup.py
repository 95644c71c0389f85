"""Apache Beam glue for text dedup: wires the pure functions of `dedup.py` (modes `lines` and `sentences`).

Shape of both transforms (the per-page functions are the ones the in-memory references use):

    pages ─ Map(-> (page id, page)) ─┬─ ParDo(claim blocks) ─ CombinePerKey(bucket: smallest claims) ─ ParDo(...) ─┐
                                     └────────────────────────────────────────────── Flatten, GroupByKey(id) ┴─ ...

(`ParDo(...)`: -> (owner id, [payload, ...]); `...`: ParDo(remove).) `DedupSentences` pairs each page with its
Punkt sentences per line in the step that keys it by id (`KeyById`): both branches use that pair, so every page is
split once, not once for its claims and again for its removal (Punkt is most of this mode's cost), and the sentences
travel through the join in place of the page's text. Its owners send back only the occurrence numbers (the window
keys are not needed by the removal); mode `lines` sends `(key, occurrence)`.

Few, large elements: a page makes about 20 span keys, nearly all of them unique on a real crawl. The claims travel
as numpy blocks, one per key bucket and bundle (`claim_blocks`), and the owners as one list per page and bundle, so
the claim shuffle carries bundles x buckets elements and the owner join about one per page, not one per key.

Integrity: the claims sent to the combiner and received out of it, and the owners sent to the join and received
by the pages, are counted in `INTEGRITY_NAMESPACE`; `run_c4` fails the run when a pair differs (a DirectRunner with
20 worker processes silently lost whole worker shares of the owner join in 6 of 9 runs of 100k pages).

The combiner keeps ONE claim per key (and a count) and is associative and commutative, so Beam lifts it before
the shuffle: each bundle pre-combines its claims and a key shared by millions of pages never has the list of its
pages materialised on one worker (the failure of TFDS 2.2's GroupByKey, tensorflow/datasets#1473, fixed by PR #2201).
A page's id is the md5 of its raw URL (`dedup.page_id`): claims and owners carry those 16 bytes, never the URL, and
the join is by id; an id with more than one page raises `dedup.DuplicateUrlError` (see `dedup.py`).
"""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Callable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from c4prep.beam_runs import INTEGRITY_NAMESPACE, CounterCache

from . import claim_blocks, dedup, page_codec
from .c4_rules import MIN_NUM_SENTENCES, Outcome
from .page_codec import SplitPage
from .records import Page


class SmallestClaims(beam.CombineFn):
    """Per key bucket, the smallest claim of each key and the number of claims it was chosen from (for the integrity
    check), as one block (`claim_blocks.smallest_claims`). Inputs are claim blocks (`_EmitClaims` pre-combines each
    bundle's claims); the accumulator is a list of blocks, reduced to one when Beam compacts, merges or extracts it."""

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, block):
        accumulator.append(block)
        return accumulator

    def merge_accumulators(self, accumulators):
        return [claim_blocks.smallest_claims([block for accumulator in accumulators for block in accumulator])]

    def compact(self, accumulator):
        return [claim_blocks.smallest_claims(accumulator)] if len(accumulator) > 1 else accumulator

    def extract_output(self, accumulator):
        return claim_blocks.smallest_claims(accumulator) if accumulator else np.empty(0, claim_blocks.CLAIM_BLOCK)


BUNDLE_CLAIMS = 200_000  # claims `_EmitClaims` holds before it emits them (bounds a worker's memory)
BUNDLE_OWNERS = 1_000_000  # owned keys `_ToOwner` holds before it emits its table (bounds a worker's memory)
DEFAULT_CLAIM_BUCKETS = 256
# What `finish_bundle` emits, in Beam's global window: one tuple for all (`GlobalWindows.windowed_value` builds the
# window again for every element, reading its end from a proto each time).
_GLOBAL_WINDOWS = (GlobalWindow(),)


def claim_buckets(input_files: int) -> int:
    """Key buckets of the claims for an input of `input_files` files: 16 a file, at least 256 and at most 65,536.
    A bucket's claims meet on one worker, so buckets grow with the input (a full dump of 56,000 WET files: about
    900,000 keys a bucket, 40 MB); blocks stay large where a bundle's keys outnumber the buckets."""
    return min(65_536, max(DEFAULT_CLAIM_BUCKETS, 16 * input_files))


class _EmitClaims(beam.DoFn):
    """Pages keyed by id (`_OwnershipDedup.key_by_id`) -> `(bucket, claim block)` per key bucket of the
    bundle's pages, their claims counted as sent to the combiner. A page's claims (its id and the first occurrence
    of each of its keys) are held in flat lists; when the bundle ends, or earlier once `BUNDLE_CLAIMS` are held,
    they become one numpy block (`claim_blocks`), pre-combined to one row per key (the smallest claim, the claims
    counted), and split by bucket. So one row per key and bundle crosses the engine, not one per claim."""

    def __init__(self, first_claims: Callable[[Any], tuple[dedup.PageId, dict[dedup.Key, int]]], check: str,
                 buckets: int) -> None:
        self.first_claims, self.check, self.buckets = first_claims, check, buckets

    def setup(self) -> None:
        self.integrity = CounterCache(INTEGRITY_NAMESPACE)

    def start_bundle(self) -> None:
        self._hold_none()

    def _hold_none(self) -> None:
        self.pages: list[dedup.PageId] = []
        self.claims_per_page: list[int] = []
        self.keys: list[dedup.Key] = []
        self.occurrences: list[int] = []

    def process(self, page):
        identity, firsts = self.first_claims(page)  # a keyed page
        self.integrity.inc(f"{self.check}/claims:sent", len(firsts))
        self.pages.append(identity)
        self.claims_per_page.append(len(firsts))
        self.keys.extend(firsts)
        self.occurrences.extend(firsts.values())
        if len(self.keys) >= BUNDLE_CLAIMS:
            yield from self._emit_claims()

    def finish_bundle(self):
        for keyed in self._emit_claims():
            yield WindowedValue(keyed, MIN_TIMESTAMP, _GLOBAL_WINDOWS)

    def _emit_claims(self) -> Iterator[tuple[int, np.ndarray]]:
        block = claim_blocks.claims_block(self.pages, self.claims_per_page, self.keys, self.occurrences)
        self._hold_none()
        return claim_blocks.by_bucket(claim_blocks.smallest_claims([block]), self.buckets) if len(block) else iter(())


def _key_and_occurrence(key: dedup.Key, occurrence: int) -> tuple[dedup.Key, int]:
    return key, occurrence


def _occurrence_only(key: dedup.Key, occurrence: int) -> int:
    return occurrence


class _ToOwner(beam.DoFn):
    """`(bucket, block of winning claims)` -> `(owner page id, [what the owner's removal needs of each key])`,
    counting the claims received and the owners sent to the join. A bundle's owners are gathered per page as they
    come and sent as one list per page when the bundle ends, or earlier once `BUNDLE_OWNERS` are held: a page owns
    about 20 span keys, which reach it in one element per bundle instead of one each."""

    def __init__(self, check: str, payload: Callable[[dedup.Key, int], Any]) -> None:
        self.check, self.payload = check, payload

    def setup(self) -> None:
        self.integrity = CounterCache(INTEGRITY_NAMESPACE)

    def start_bundle(self) -> None:
        self.table: dict[dedup.PageId, list] = {}
        self.held = 0

    def process(self, bucket_winners):
        _, winners = bucket_winners
        self.integrity.inc(f"{self.check}/claims:received", int(winners["claims"].sum()))
        self.integrity.inc(f"{self.check}/owners:sent", len(winners))
        table, payload = self.table, self.payload
        for page, key, occurrence in claim_blocks.owners(winners):
            table.setdefault(page, []).append(payload(key, occurrence))
        self.held += len(winners)
        if self.held >= BUNDLE_OWNERS:
            yield from self._emit_table()

    def finish_bundle(self):
        for keyed in self._emit_table():
            yield WindowedValue(keyed, MIN_TIMESTAMP, _GLOBAL_WINDOWS)

    def _emit_table(self) -> Iterator[tuple[dedup.PageId, tuple[int, list]]]:
        table, self.table, self.held = self.table, {}, 0
        return ((page, (_OWNED, payloads)) for page, payloads in table.items())


# Tags of the two inputs of the join by page id: a page (or split page), and a list of what its owned keys send.
_PAGE, _OWNED = 0, 1


def _key_by_id(page: Page) -> tuple[dedup.PageId, tuple[int, Page]]:
    return dedup.page_id(page), (_PAGE, page)


def _key_split_page_by_id(page: Page) -> tuple[dedup.PageId, tuple[int, SplitPage]]:
    """A page keyed by id with its Punkt sentences per line, split once for both the claims and the removal. From
    here on the text travels as its sentences only (the page's `text` is emptied, so a runner that holds each step's
    output, as Beam's DaskRunner does, holds it once): neither per-page function reads it when it has the
    sentences, and the join then carries each page's text once instead of twice."""
    return dedup.page_id(page), (_PAGE, (replace(page, text=""), dedup.sentences_by_line(page)))


def _encoded(keyed, encode: Callable[[Any], bytes]) -> tuple[dedup.PageId, tuple[int, bytes]]:
    identity, (tag, value) = keyed
    return identity, (tag, encode(value))


class _JoinById(beam.PTransform):
    """Tagged `(page id, (tag, value))` elements of both inputs -> `(page id, [(tag, value), ...])`: what
    CoGroupByKey does, without its steps that tag every element and regroup every key's values into a dict (steps
    of their own, one pass over the data each, on runners that do not fuse, as Beam's DaskRunner)."""

    def expand(self, tagged_inputs):
        return tagged_inputs | "Flatten" >> beam.Flatten() | "GroupByKey" >> beam.GroupByKey()


def _split_page_first_claims(keyed) -> tuple[dedup.PageId, dict[dedup.Key, int]]:
    identity, (_, (_, lines)) = keyed
    return identity, dedup.first_occurrences(dedup.window_keys(lines))


def _line_first_claims(keyed) -> tuple[dedup.PageId, dict[dedup.Key, int]]:
    identity, (_, page) = keyed
    return identity, dedup.first_occurrences(dedup.line_keys(page))


def _remove_unowned_split(split: SplitPage, owned: list[int], **options) -> Outcome:
    page, lines = split
    return dedup.remove_unowned_sentences(page, owned, lines=lines, **options)


def _remove_unowned_lines(page: Page, owned: list[tuple[dedup.Key, int]], **options) -> Outcome:
    return dedup.remove_unowned_lines(page, dict(owned), **options)


class _RemoveUnowned(beam.DoFn):
    """Joined `(page id, [(_PAGE, page), (_OWNED, [payload, ...]), ...])` -> the page after the removal rule (the
    joined page is what `key_by_id` keyed (a split page for the sentence dedup), a payload what `owned_payload` sends;
    the owned payloads come in one list per bundle of `_ToOwner`)."""

    def __init__(self, remove: Callable[..., Outcome], decode: Callable[[bytes], Any], namespace: str) -> None:
        self.remove, self.decode, self.namespace = remove, decode, namespace

    def setup(self) -> None:
        self.counters = CounterCache(self.namespace)
        self.integrity = CounterCache(INTEGRITY_NAMESPACE)

    def process(self, joined) -> Iterator[Page]:
        _, tagged = joined
        pages, owned = [], []
        for tag, value in tagged:
            if tag == _PAGE:
                pages.append(value)
            else:
                owned.extend(value)
        self.integrity.inc(f"{self.namespace}/owners:received", len(owned))
        if not pages:  # only reachable if a claim came from elsewhere: nothing to emit
            return
        pages = [self.decode(page) for page in pages]
        if len(pages) > 1:  # one raw URL twice, or two with one md5: this says which, and raises
            dedup.check_one_page_per_id((page if isinstance(page, Page) else page[0]).url for page in pages)
        outcome = self.remove(pages[0], owned)
        self.counters.inc_all(outcome.counters)
        if outcome.page is not None:
            yield outcome.page


class _OwnershipDedup(beam.PTransform):
    """Claims -> smallest claim per key (combiner) -> back to the owner page -> per-page removal."""

    # The step that keys each page by id for the join: page -> (page id, (_PAGE, value)); the claims read the keyed
    # page and the remover gets the value. A subclass may pair the page with what both need (its Punkt sentences).
    key_by_id: Callable[[Page], tuple[dedup.PageId, tuple[int, Any]]] = _key_by_id
    # Set by subclasses: a keyed page -> its page id and the first occurrence of each of its keys.
    first_claims: Callable[[Any], tuple[dedup.PageId, dict[dedup.Key, int]]]
    namespace: str
    # What an owned key sends back to its page, from (key, occurrence): only what the remover reads.
    owned_payload: Callable[[dedup.Key, int], Any] = _key_and_occurrence
    # What the join carries of a keyed value, and how the remover gets the value back (`page_codec`).
    encode: Callable[[Any], bytes] = page_codec.encode_page
    decode: Callable[[bytes], Any] = page_codec.decode_page

    def __init__(self, min_num_sentences: int = MIN_NUM_SENTENCES, buckets: int = DEFAULT_CLAIM_BUCKETS) -> None:
        super().__init__()
        if buckets < 1:
            raise ValueError(f"claim buckets must be >= 1, got {buckets}")
        self.min_num_sentences, self.buckets = min_num_sentences, buckets

    def remover(self) -> Callable[[Any, list], Outcome]:
        """The per-page removal function of what `key_by_id` keyed and the payloads of its owned keys, picklable (a
        partial of a module-level function)."""
        raise NotImplementedError

    def expand(self, pages):
        keyed_pages = pages | "KeyById" >> beam.Map(type(self).key_by_id)
        owned = (
            keyed_pages
            | "EmitClaims" >> beam.ParDo(_EmitClaims(type(self).first_claims, self.namespace, self.buckets))
            | "SmallestClaimPerKey" >> beam.CombinePerKey(SmallestClaims())
            | "ToOwner" >> beam.ParDo(_ToOwner(self.namespace, type(self).owned_payload))
        )
        encoded_pages = keyed_pages | "EncodePages" >> beam.Map(functools.partial(_encoded, encode=type(self).encode))
        return (
            (encoded_pages, owned)
            | "JoinById" >> _JoinById()
            | "RemoveUnowned" >> beam.ParDo(_RemoveUnowned(self.remover(), type(self).decode, self.namespace))
        )


class DedupLines(_OwnershipDedup):
    """Released-C4 line dedup (TFDS 3.1.0, `dedup.remove_unowned_lines`): PCollection[Page] -> PCollection[Page]."""

    first_claims = staticmethod(_line_first_claims)
    namespace = dedup.LINES_NAMESPACE

    def remover(self):
        return functools.partial(_remove_unowned_lines, min_num_sentences=self.min_num_sentences)


class DedupSentences(_OwnershipDedup):
    """The paper's three-sentence-span dedup (TFDS 1.x, `dedup.remove_unowned_sentences`), with c4prep's fix of
    the repeated-window quirk unless `tfds_1x_quirk=True`: PCollection[Page] -> PCollection[Page]."""

    # Punkt is this mode's cost: each page is split once and its sentences travel with it to the removal.
    first_claims = staticmethod(_split_page_first_claims)
    namespace = dedup.SENTENCES_NAMESPACE
    key_by_id = staticmethod(_key_split_page_by_id)
    owned_payload = staticmethod(_occurrence_only)  # the removal keeps windows by occurrence number
    encode = staticmethod(page_codec.encode_split_page)
    decode = staticmethod(page_codec.decode_split_page)

    def __init__(self, min_num_sentences: int = MIN_NUM_SENTENCES, tfds_1x_quirk: bool = False,
                 buckets: int = DEFAULT_CLAIM_BUCKETS) -> None:
        super().__init__(min_num_sentences, buckets)
        self.tfds_1x_quirk = tfds_1x_quirk

    def remover(self):
        return functools.partial(
            _remove_unowned_split,
            min_num_sentences=self.min_num_sentences,
            tfds_1x_quirk=self.tfds_1x_quirk,
        )


def dedup_transform(mode: str, min_num_sentences: int = MIN_NUM_SENTENCES,
                    buckets: int = DEFAULT_CLAIM_BUCKETS) -> beam.PTransform | None:
    """The transform of a `dedup.DEDUP_MODES` mode, its claims in `buckets` key buckets; None for `none` (skip the
    stage)."""
    if mode == "lines":
        return DedupLines(min_num_sentences, buckets=buckets)
    if mode == "sentences":
        return DedupSentences(min_num_sentences, buckets=buckets)
    if mode == "none":
        return None
    raise ValueError(f"unknown dedup mode {mode!r}; expected one of {dedup.DEDUP_MODES}")
