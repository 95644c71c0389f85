"""Text dedup (`pipelines/dedup.py`, `pipelines/beam_dedup.py`) against ../shared/reference/c4.md §9a and §9c.

The pure per-page functions are checked on small hand-made pages (the TFDS worked example, window shapes, the
repeated-window quirk); the Beam transforms are checked equal to the in-memory references — same pages, same
texts, same counters — on real pages (the cleaned CC-MAIN-2019-30 WET sample and the first 500 released C4
documents) with planted duplicates, on the in_memory and multi_processing DirectRunner, and with one hot line
shared by 5,000 pages.
"""
from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from dataclasses import asdict, replace
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from c4prep.beam_runs import INTEGRITY_NAMESPACE, job_pipeline
from c4prep.pipelines import c4_rules, claim_blocks
from c4prep.pipelines.beam_dedup import DedupLines, DedupSentences, SmallestClaims, dedup_transform
from c4prep.pipelines.c4_rules import md5_digest, md5_hex, normalize_url
from c4prep.pipelines.dedup import (
    DEDUP_MODES,
    DuplicateUrlError,
    claim_occurrence,
    claim_page,
    dedup_lines_reference,
    dedup_sentences_reference,
    line_claims,
    line_key,
    line_windows,
    make_claim,
    remove_unowned_lines,
    remove_unowned_sentences,
    sentence_claims,
    sentences_by_line,
    smaller_claim,
    span_key,
    window_keys,
    window_spans,
)
from c4prep.pipelines.funnel import integrity_errors
from c4prep.pipelines.readers import read_records
from c4prep.pipelines.records import Page, RawRecord
from c4prep.pipelines.sentences import split_sentences

WET_SAMPLE = "CC-MAIN-2019-30-sample-a.warc.wet.gz"
C4_SAMPLE = "c4-en-train-00000-first500.jsonl"
TIMESTAMP = "2019-07-17T12:34:56Z"


# ------------------------------------------------------------------------------------------------ helpers


def make_page(url: str, text: str) -> Page:
    return Page(
        url=url,
        normalized_url=normalize_url(url),
        text=text,
        timestamp=TIMESTAMP,
        content_type="text/plain",
        content_length=len(text.encode("utf-8")),
    )


def by_url(pages) -> dict[str, Page]:
    result = {page.url: page for page in pages}
    assert len(result) == len(pages)
    return result


# Lambdas, so that cloudpickle ships them by value to multi_processing workers (which cannot import this module).
page_to_json = lambda page: json.dumps(asdict(page))  # noqa: E731
page_from_json = lambda row: Page(**json.loads(row))  # noqa: E731


def run_beam(tmp_path: Path, jobs: dict[str, tuple[list[Page], beam.PTransform]], flags=()):
    """Run every `label: (pages, transform)` in ONE DirectRunner pipeline; returns the output pages and the
    counters of each label (`{label: {namespace/name: value}}`, from `result.metrics().query()`).

    Input pages go through a JSON Lines file rather than `beam.Create`, which would pickle (and bz2) every page
    into the job graph several times."""
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner", *flags]))
    for label, (pages, transform) in jobs.items():
        source = tmp_path / f"{label}-input.jsonl"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("".join(page_to_json(page) + "\n" for page in pages), encoding="utf-8")
        (
            pipeline
            | f"read-{label}" >> beam.io.ReadFromText(str(source))
            | f"parse-{label}" >> beam.Map(page_from_json)
            | label >> transform
            | f"json-{label}" >> beam.Map(page_to_json)
            | f"write-{label}" >> beam.io.WriteToText(str(tmp_path / label / "part"))
        )
    result = pipeline.run()
    result.wait_until_finish()
    outputs = {}
    for label in jobs:
        paths = sorted((tmp_path / label).glob("part*"))
        outputs[label] = [page_from_json(row) for path in paths for row in path.read_text("utf-8").splitlines()]
    counters: dict[str, Counter] = defaultdict(Counter)
    integrity: dict[str, Counter] = defaultdict(Counter)
    for metric in result.metrics().query()["counters"]:
        label = metric.key.step.split("/")[0]
        value = metric.committed if metric.committed is not None else metric.attempted
        if value and metric.key.metric.namespace == INTEGRITY_NAMESPACE:
            integrity[label][metric.key.metric.name] += int(value)
        elif value:
            counters[label][f"{metric.key.metric.namespace}/{metric.key.metric.name}"] += int(value)
    for label in jobs:  # every dedup run here counts its claims and owners, and nothing is lost between steps
        assert integrity[label] and not integrity_errors({INTEGRITY_NAMESPACE: integrity[label]}), integrity[label]
    return outputs, {label: dict(counters[label]) for label in jobs}


def namespaced(namespace: str, counters: dict[str, int]) -> dict[str, int]:
    return {f"{namespace}/{name}": value for name, value in counters.items()}


def assert_same(beam_pages: list[Page], reference_pages: list[Page]) -> None:
    assert len(beam_pages) == len(reference_pages)
    assert by_url(beam_pages) == by_url(reference_pages)


def assert_lines_reconcile(counters: dict[str, int], pages_in: list[Page]) -> None:
    line_filtered = sum(value for name, value in counters.items() if name.startswith("line-filtered:"))
    assert counters["line-in"] == sum(len(page.text.split("\n")) for page in pages_in)
    assert counters["line-in"] == counters.get("line-passed", 0) + line_filtered
    page_filtered = sum(value for name, value in counters.items() if name.startswith("filtered:"))
    assert counters.get("passed", 0) + page_filtered == len(pages_in)


def assert_sentences_reconcile(counters: dict[str, int], pages_in: list[Page]) -> None:
    assert counters["sentence-in"] == sum(len(s) for page in pages_in for s in sentences_by_line(page))
    assert counters["sentence-in"] == (
        counters.get("sentence-passed", 0)
        + counters.get("sentence-filtered:duplicate", 0)
        + counters.get("sentence-filtered:page_dropped", 0)
    )
    page_filtered = sum(value for name, value in counters.items() if name.startswith("filtered:"))
    assert counters.get("passed", 0) + page_filtered == len(pages_in)


def url_with_md5_below(prefix: str, bound: str) -> str:
    """A URL `prefix<i>` whose md5 hex sorts below `bound` (deterministic search)."""
    for index in range(1_000_000):
        url = f"{prefix}{index}"
        if md5_hex(url) < bound:
            return url
    raise AssertionError("no URL found")


# ------------------------------------------------------------------------------------------------ worked example (§9a)

# Own texts with the shape of TFDS's `test_remove_duplicate_text`: the line "This is a duplicated line." in four
# pages with different capitalisation (and a trailing space, which the key strips).
WORKED_EXAMPLE = {
    "url/1-0": (
        "This is a duplicated line.\n"
        "A line that only this first page has.\n"
        "This page hashes first, so its copy of the line stays.\n"
        "This line repeats inside the page.\n"
        "A sentence sits between the two repeats.\n"
        "This line REPEATS inside the page.\n"
        "this is a DUPLICATED line."
    ),
    "url/2-1": "Only the second page has this line.\nTHIS IS A DUPLICATED LINE.",
    "url/3-4": (
        "The third page has a line of its own.\n"
        "This is a duplicated line.\n"
        "Its copy goes away here. Yet the page stays, as three sentences remain."
    ),
    "url/4-4": (
        "The fourth page has a line of its own.\n"
        "this is a duplicated LINE. \n"
        "Its copy goes away, and the page goes too."
    ),
}
WORKED_EXAMPLE_OUT = {
    "url/1-0": (
        "This is a duplicated line.\n"
        "A line that only this first page has.\n"
        "This page hashes first, so its copy of the line stays.\n"
        "This line repeats inside the page.\n"
        "A sentence sits between the two repeats."
    ),
    "url/3-4": (
        "The third page has a line of its own.\n"
        "Its copy goes away here. Yet the page stays, as three sentences remain."
    ),
}
WORKED_LINES_COUNTERS = {
    "line-in": 15,
    "line-filtered:global_duplicate": 3,
    "line-filtered:local_duplicate": 2,
    "line-filtered:page_dropped": 3,
    "line-passed": 7,
    "passed": 2,
    "filtered:too_few_sentences": 2,
}
WORKED_SENTENCES_COUNTERS = {
    "sentence-in": 16,
    "sentence-filtered:duplicate": 5,
    "sentence-filtered:page_dropped": 3,
    "sentence-passed": 8,
    "passed": 2,
    "filtered:too_few_sentences": 2,
}
# TFDS 1.x: both in-page repeats of the keeper page are sent back to it, so both lines vanish from every page.
WORKED_QUIRK_OUT = {
    "url/1-0": (
        "A line that only this first page has.\n"
        "This page hashes first, so its copy of the line stays.\n"
        "A sentence sits between the two repeats."
    ),
    "url/3-4": WORKED_EXAMPLE_OUT["url/3-4"],
}


def worked_pages() -> list[Page]:
    return [make_page(url, text) for url, text in WORKED_EXAMPLE.items()]


def test_worked_example_md5_prefixes():
    prefixes = {url: md5_hex(url)[:6] for url in WORKED_EXAMPLE}
    assert prefixes == {"url/1-0": "0ce17f", "url/2-1": "460f65", "url/3-4": "a1e092", "url/4-4": "f4a0b3"}
    keys = {line_key(line) for text in WORKED_EXAMPLE.values() for line in text.split("\n") if "duplicated" in line}
    assert {key.hex() for key in keys} == {md5_hex("this is a duplicated line.")}  # keys are md5 digests


def test_worked_example_reference_both_modes():
    pages, counters = dedup_lines_reference(worked_pages())
    assert {page.url: page.text for page in pages} == WORKED_EXAMPLE_OUT
    assert counters == WORKED_LINES_COUNTERS
    # Every line of the example is a sentence line, so the paper's mode gives the same pages.
    pages, counters = dedup_sentences_reference(worked_pages())
    assert {page.url: page.text for page in pages} == WORKED_EXAMPLE_OUT
    assert counters == WORKED_SENTENCES_COUNTERS
    pages, _ = dedup_sentences_reference(worked_pages(), tfds_1x_quirk=True)
    assert {page.url: page.text for page in pages} == WORKED_QUIRK_OUT
    # Everything else of a surviving page is kept as is.
    assert all(page == replace(make_page(page.url, WORKED_EXAMPLE[page.url]), text=page.text) for page in pages)


def test_worked_example_beam(tmp_path):
    pages = worked_pages()
    outputs, counters = run_beam(
        tmp_path,
        {
            "lines": (pages, DedupLines()),
            "sentences": (pages, DedupSentences()),
            "quirk": (pages, DedupSentences(tfds_1x_quirk=True)),
            "lines0": (pages, DedupLines(min_num_sentences=0)),
        },
    )
    assert {page.url: page.text for page in outputs["lines"]} == WORKED_EXAMPLE_OUT
    assert counters["lines"] == namespaced("dedupe-lines", WORKED_LINES_COUNTERS)
    assert {page.url: page.text for page in outputs["sentences"]} == WORKED_EXAMPLE_OUT
    assert counters["sentences"] == namespaced("dedupe-sentences", WORKED_SENTENCES_COUNTERS)
    assert {page.url: page.text for page in outputs["quirk"]} == WORKED_QUIRK_OUT
    # min_num_sentences=0 (TFDS `clean=False`): only empty pages are dropped, none is here.
    assert {page.url for page in outputs["lines0"]} == set(WORKED_EXAMPLE)
    assert by_url(outputs["lines0"])["url/2-1"].text == "Only the second page has this line."


# ------------------------------------------------------------------------------------------------ per-page functions


def test_line_key_strips_and_lowers_unicode():
    assert line_key("  Ça VA très BIEN.\t") == line_key("ça va très bien.")
    assert line_key("ça va très bien.").hex() == md5_hex("ça va très bien.")
    assert line_key("STRASSE.") != line_key("straße.")  # str.lower, not casefold
    assert line_key("ΣΟΦΊΑ.").hex() == md5_hex("ΣΟΦΊΑ.".lower())


def test_remove_unowned_lines_counters_and_empty_page():
    page = make_page("http://a.example/", "One line here.\n\nOne LINE here.")
    keys = [line_key(line) for line in page.text.split("\n")]
    outcome = remove_unowned_lines(page, {keys[0]: 0, keys[1]: 1}, min_num_sentences=0)
    assert outcome.page.text == "One line here.\n"  # original lines kept, the empty line too (TFDS split("\n"))
    assert outcome.counters == {"line-in": 3, "line-filtered:local_duplicate": 1, "line-passed": 2, "passed": 1}
    outcome = remove_unowned_lines(page, {keys[1]: 1}, min_num_sentences=0)
    assert outcome.page is None  # only "" is left: filtered:empty
    assert outcome.counters == {
        "line-in": 3, "line-filtered:global_duplicate": 2, "line-filtered:page_dropped": 1, "filtered:empty": 1}
    # The page check runs Punkt on the joined text: one line holding three sentences is enough.
    page = make_page("http://b.example/", "First one. Second one. Third one.\nNot mine.")
    outcome = remove_unowned_lines(page, {line_key("First one. Second one. Third one."): 0})
    assert outcome.page.text == "First one. Second one. Third one."


def test_sentence_windows_shapes_and_end_marks():
    assert list(line_windows(["A.", "B.", "C.", "D.", "E."])) == [(0, 3), (1, 3), (2, 3)]
    assert list(line_windows(["A.", "B."])) == [(0, 2)]  # fewer than 3 sentences: ONE window of all of them
    assert list(line_windows(["A."])) == [(0, 1)]
    assert list(line_windows([])) == []
    sentences = split_sentences("Another sentence. . . ? ? ! ! !")
    assert sentences == ["Another sentence.", ".", ".", "?", "?", "!", "!", "!"]
    assert list(line_windows(sentences)) == [(0, 3)]  # windows of bare end marks only are skipped
    assert list(line_windows(["!", '"'])) == []
    page = make_page("http://w.example/", "Alpha one. Beta two. Gamma three. Delta four.\nEpsilon five. Zeta six.")
    lines = sentences_by_line(page)
    assert window_spans(lines) == [(0, 0, 3), (0, 1, 3), (1, 0, 2)]
    assert window_keys(lines)[0].hex() == md5_hex("alpha one.\x00beta two.\x00gamma three.")
    claims = sentence_claims(page)
    assert [(claim_page(claim), claim_occurrence(claim)) for _, claim in claims] == [
        (md5_digest(page.url), 0), (md5_digest(page.url), 1), (md5_digest(page.url), 2)]


def test_only_same_shape_windows_match():
    # A 2-sentence line is one window; it does not match the first two sentences of a 3-sentence line.
    low, high = sorted(["http://shape.example/a", "http://shape.example/b"], key=md5_hex)
    pages = [
        make_page(low, "First one here. Second one here.\nLow page line one.\nLow page line two."),
        make_page(high, "First one here. Second one here. Third one here.\nHigh page line."),
    ]
    out, counters = dedup_sentences_reference(pages)
    assert by_url(out) == by_url(pages)
    assert "sentence-filtered:duplicate" not in counters


def test_overlapping_windows_remove_the_union_and_respace():
    low, high = sorted(["http://overlap.example/a", "http://overlap.example/b"], key=md5_hex)
    pages = [
        make_page(low, "Bee two. Cee three. Dee four.\nLow one.\nLow two."),
        # The high page keeps (a, b, c) but loses (b, c, d) to the low page: only "Aye one." is left of the line.
        make_page(high, "Aye one.  Bee two. Cee three.   Dee four.\nHigh one  with   spaces. High two.\nHigh three."),
    ]
    out, counters = dedup_sentences_reference(pages)
    assert by_url(out)[high].text == "Aye one.\nHigh one  with   spaces. High two.\nHigh three."
    assert by_url(out)[low].text == pages[0].text
    assert counters["sentence-filtered:duplicate"] == 3


def test_keeper_keeps_one_copy_of_a_repeated_window_unless_quirk():
    page = make_page("http://repeat.example/", "Say it once. Say it twice. Say it thrice.\nOther line.\n"
                     "say it ONCE. Say it twice. Say it thrice.\nLast line here.")
    owned = dict(sentence_claims(page))
    owned = {key: claim_occurrence(claim) for key, claim in owned.items()}
    fixed = remove_unowned_sentences(page, owned.values())
    assert fixed.page.text == "Say it once. Say it twice. Say it thrice.\nOther line.\nLast line here."
    assert fixed.counters["sentence-filtered:duplicate"] == 3
    quirk = remove_unowned_sentences(page, owned.values(), tfds_1x_quirk=True)
    assert quirk.page is None  # both copies vanish; 2 sentences are left
    assert quirk.counters == {"sentence-in": 8, "sentence-filtered:duplicate": 6,
                              "sentence-filtered:page_dropped": 2, "filtered:too_few_sentences": 1}


def test_sentences_given_lines_equal_split_inside():
    # Beam splits each page once and hands the sentences to both per-page functions; the result must not change.
    page = make_page("http://given.example/", "Say it once. Say it twice. Say it thrice.\nOther line.\n"
                     "say it ONCE. Say it twice. Say it thrice.\nLast line here.")
    lines = sentences_by_line(page)
    claims = sentence_claims(page)
    assert sentence_claims(page, lines) == claims
    owned = {key: claim_occurrence(claim) for key, claim in claims}
    for quirk in (False, True):
        assert remove_unowned_sentences(page, owned.values(), tfds_1x_quirk=quirk, lines=lines) == (
            remove_unowned_sentences(page, owned.values(), tfds_1x_quirk=quirk)
        )


def test_beam_sentences_split_each_line_once(tmp_path, monkeypatch):
    from c4prep.pipelines import dedup

    calls: Counter[str] = Counter()

    def counting_split(text: str) -> list[str]:
        calls[text] += 1
        return split_sentences(text)

    monkeypatch.setattr(dedup, "split_sentences", counting_split)
    pages = worked_pages()
    outputs, _ = run_beam(tmp_path, {"sentences": (pages, DedupSentences())})
    assert {page.url: page.text for page in outputs["sentences"]} == WORKED_EXAMPLE_OUT
    assert sum(calls.values()) == sum(len(page.text.splitlines()) for page in pages)


def _claims_block(claims: list[tuple[bytes, int]]) -> np.ndarray:
    """The block of a bundle's `(key, claim)` pairs, one row each, as `_EmitClaims` packs them."""
    return claim_blocks.claims_block([claim_page(claim) for _, claim in claims], [1] * len(claims),
                                     [key for key, _ in claims], [claim_occurrence(claim) for _, claim in claims])


def test_claims_and_combiner_are_order_free():
    """Claim blocks, split over buckets and combined in any grouping and order, give every key its smallest claim
    and its claim count."""
    rng = random.Random(7)
    keys = [md5_digest(f"key{i}") for i in range(40)]
    claims = [(rng.choice(keys), make_claim(md5_digest(f"u{rng.randrange(60)}"), rng.randrange(5))) for _ in range(600)]
    expected = {key: (min(c for k, c in claims if k == key), sum(k == key for k, _ in claims))
                for key in {key for key, _ in claims}}
    combiner = SmallestClaims()
    for _ in range(10):
        rng.shuffle(claims)
        cuts = sorted(rng.sample(range(1, len(claims)), 5))
        bundles = [claims[a:b] for a, b in zip([0, *cuts], [*cuts, len(claims)])]
        by_bucket = {}
        for bundle in bundles:
            for bucket, block in claim_blocks.by_bucket(claim_blocks.smallest_claims([_claims_block(bundle)]), 3):
                by_bucket.setdefault(bucket, []).append(block)
        combined = {}
        for bucket, blocks in by_bucket.items():
            accumulators = [combiner.add_input(combiner.create_accumulator(), block) for block in blocks]
            merged = combiner.merge_accumulators([combiner.compact(accumulators[0]), *accumulators[1:]])
            winners = combiner.extract_output(merged)
            for (page, key, occurrence), count in zip(claim_blocks.owners(winners), winners["claims"].tolist()):
                assert int.from_bytes(key[:8], "big") % 3 == bucket
                combined[key] = (make_claim(page, occurrence), count)
        assert combined == expected
    assert len(combiner.extract_output(combiner.create_accumulator())) == 0
    assert smaller_claim(None, None) is None
    page = make_page("http://c.example/", "A line.\nB line.\na LINE.")
    assert [(key, claim_page(claim), claim_occurrence(claim)) for key, claim in line_claims(page)] == [
        (line_key("A line."), md5_digest(page.url), 0), (line_key("B line."), md5_digest(page.url), 1)]


def test_a_claim_block_keeps_every_digest_byte_and_orders_claims_as_ints():
    """Keys and page ids with zero bytes at either end survive the block, and rows order as the claims do."""
    keys = [b"\0" * 15 + b"\1", b"\xff" * 16, b"\1" + b"\0" * 15]
    pages = [b"\0" * 16, b"\xff" * 16, b"\x80" + b"\0" * 14 + b"\7"]
    block = claim_blocks.claims_block(pages, [1, 1, 1], keys, [0, 2**32 - 1, 7])
    assert list(claim_blocks.owners(block)) == list(zip(pages, keys, [0, 2**32 - 1, 7]))
    assert block["claims"].tolist() == [1, 1, 1]
    same_key = claim_blocks.claims_block([pages[2]], [2], [keys[0], keys[0]], [3, 4])
    rival = claim_blocks.claims_block([pages[2], pages[1]], [1, 1], [keys[0], keys[0]], [1, 0])
    winners = claim_blocks.smallest_claims([block, same_key, rival])
    assert [(key, occurrence) for _, key, occurrence in claim_blocks.owners(winners)] == [
        (keys[0], 0), (keys[2], 7), (keys[1], 2**32 - 1)]  # key order; keys[0] keeps the all-zero page's claim
    assert winners["claims"].tolist() == [5, 1, 1]


def test_claims_order_as_tfds_ranks_pages():
    """A claim orders by the page's md5 as TFDS compares its hex, then by occurrence; it unpacks to both."""
    urls = [f"http://site{i}.example/page" for i in range(50)]
    claims = {url: make_claim(md5_digest(url), occurrence) for url, occurrence in zip(urls, [7, 0, 3] * 17)}
    assert sorted(claims, key=claims.get) == sorted(urls, key=lambda url: (md5_hex(url), claim_occurrence(claims[url])))
    same_page = make_claim(md5_digest(urls[0]), 2), make_claim(md5_digest(urls[0]), 9)
    assert smaller_claim(*same_page) == same_page[0] and smaller_claim(same_page[1], None) == same_page[1]
    with pytest.raises(ValueError, match="does not fit"):
        make_claim(md5_digest(urls[0]), 1 << 32)


def test_duplicate_raw_urls_are_rejected(tmp_path):
    pages = [make_page("http://same.example/", "One. Two. Three."), make_page("http://same.example/", "Four.")]
    with pytest.raises(DuplicateUrlError):
        dedup_lines_reference(pages)
    with pytest.raises(DuplicateUrlError):
        dedup_sentences_reference(pages)
    with pytest.raises(Exception, match="occur on more than one page"):
        run_beam(tmp_path, {"dup": (pages, DedupLines())})


def test_two_urls_with_one_md5_are_rejected(monkeypatch):
    """A page's md5 is its identity: two raw URLs sharing one (a collision, planted) are refused, not merged."""
    from c4prep.pipelines import dedup as dedup_module

    monkeypatch.setattr(dedup_module, "md5_digest", lambda text: b"\0" * 16)
    with pytest.raises(DuplicateUrlError, match="have the same md5"):
        dedup_module.check_one_page_per_id(["http://a.example/", "http://b.example/"])


def test_modes_and_transform_factory():
    assert DEDUP_MODES == ("lines", "sentences", "none")
    assert isinstance(dedup_transform("lines"), DedupLines)
    assert isinstance(dedup_transform("sentences"), DedupSentences)
    assert dedup_transform("none") is None
    with pytest.raises(ValueError):
        dedup_transform("paragraphs")


def test_ownership_step_is_a_liftable_combine_not_a_group():
    """The line -> owner step must be a CombinePerKey (liftable), never a GroupByKey of all URLs of a line."""
    with job_pipeline(PipelineOptions()) as pipeline:
        pages = pipeline | beam.Create([make_page("http://x.example/", "A. B. C.")], reshuffle=False)
        _ = pages | "Dedup" >> DedupLines()
        proto = pipeline.to_runner_api()
    urns = {t.unique_name: t.spec.urn for t in proto.components.transforms.values()}
    assert urns["Dedup/SmallestClaimPerKey"] == "beam:transform:combine_per_key:v1"
    groups = [name for name, urn in urns.items() if urn == "beam:transform:group_by_key:v1"]
    # The only grouping is the join by page id (and the runner-API expansion of the combine itself).
    assert all(name.startswith(("Dedup/JoinById/", "Dedup/SmallestClaimPerKey/")) for name in groups), groups


# ------------------------------------------------------------------------------------------------ real pages


def cleaned_pages(path: Path) -> list[Page]:
    pages = []
    for record in read_records(str(path), open_binary=lambda p: open(p, "rb")):
        assert isinstance(record, RawRecord)
        page = c4_rules.parse_record(record).page
        page = page and c4_rules.clean_page(page).page
        if page is not None:
            pages.append(page)
    return pages



def test_window_keys_are_the_defined_key_of_every_window_on_real_pages(webdata):
    """`window_keys` lowers each line once and `line_windows` skips the end-mark scan of lines without bare end
    marks: every window of every real page still has the shape of the plain rule (every run of 3 sentences, or one
    window of a shorter line, unless all bare end marks) and `window_key`'s key."""
    pages = cleaned_pages(webdata / WET_SAMPLE) + cleaned_pages(webdata / C4_SAMPLE)
    checked = 0
    for page in pages:
        lines = sentences_by_line(page)
        plain = [(line, start, width) for line, sentences in enumerate(lines) if sentences
                 for width in [min(3, len(sentences))] for start in range(len(sentences) - width + 1)
                 if not all(sentence in c4_rules.END_MARKS for sentence in sentences[start : start + width])]
        assert window_spans(lines) == plain
        assert list(window_keys(lines)) == [span_key(lines, span) for span in plain]
        checked += len(plain)
    assert checked > 10_000

class Planted:
    """Real cleaned pages with planted duplicates, and what was planted."""

    def __init__(self, webdata: Path) -> None:
        rng = random.Random(2019)
        pages = cleaned_pages(webdata / WET_SAMPLE) + cleaned_pages(webdata / C4_SAMPLE)
        assert len(pages) > 600 and len({page.url for page in pages}) == len(pages)
        texts = {page.url: page.text.split("\n") for page in pages}
        urls = [page.url for page in pages]
        cases = (str.upper, str.lower, str.title, str.swapcase, lambda s: s)

        def long_lines(url):
            return [line for line in texts[url] if len(line.split()) >= 8]

        # Whole lines copied into 1-3 other pages, with case changes.
        self.copied_lines: list[str] = []
        for donor in rng.sample(urls, 60):
            candidates = long_lines(donor)
            if not candidates:
                continue
            line = rng.choice(candidates)
            self.copied_lines.append(line)
            for recipient in rng.sample(urls, rng.randint(1, 3)):
                lines = texts[recipient]
                lines.insert(rng.randrange(len(lines) + 1), rng.choice(cases)(line))
        # Runs of consecutive lines (paragraphs) copied into another page.
        for donor in rng.sample(urls, 20):
            lines = texts[donor]
            start = rng.randrange(len(lines))
            paragraph = [rng.choice(cases)(line) for line in lines[start : start + rng.randint(2, 4)]]
            recipient = texts[rng.choice(urls)]
            at = rng.randrange(len(recipient) + 1)
            recipient[at:at] = paragraph
        # Repeats inside one page.
        for url in rng.sample(urls, 20):
            lines = texts[url]
            repeat = rng.choice(cases)(rng.choice(lines))
            lines.insert(rng.randrange(len(lines) + 1), repeat)
        # A line owned by a page that dedup itself drops: a one-sentence page whose URL hashes below every other.
        donor = next(url for url in urls if len(texts[url]) >= 12)
        self.orphan = next(  # one sentence whatever its case: a single end mark, at the end
            line for line in long_lines(donor) if sum(line.count(mark) for mark in ".?!") == 1 and line[-1] in ".?!")
        self.orphan_carriers = [donor] + rng.sample([url for url in urls if url != donor], 2)
        for url in self.orphan_carriers[1:]:
            texts[url].insert(1, self.orphan.upper())
        orphan_owner = url_with_md5_below("http://orphan-owner.example/", min(md5_hex(url) for url in urls))
        self.orphan_owner = orphan_owner
        self.pages = [replace(page, text="\n".join(texts[page.url])) for page in pages]
        self.pages.append(make_page(orphan_owner, self.orphan.lower()))


@pytest.fixture(scope="module")
def planted(webdata) -> Planted:
    return Planted(webdata)


@pytest.fixture(scope="module")
def references(planted):
    return {"lines": dedup_lines_reference(planted.pages), "sentences": dedup_sentences_reference(planted.pages)}


@pytest.fixture(scope="module")
def beam_real(planted, tmp_path_factory):
    """Both transforms on the planted pages in a shuffled order (the references see the original order)."""
    shuffled = list(planted.pages)
    random.Random(1).shuffle(shuffled)
    return run_beam(
        tmp_path_factory.mktemp("beam_real"),
        {"lines": (shuffled, DedupLines()), "sentences": (shuffled, DedupSentences())},
    )


@pytest.mark.parametrize("mode", ["lines", "sentences"])
def test_beam_equals_reference_on_real_pages(mode, planted, references, beam_real):
    outputs, counters = beam_real
    reference_pages, reference_counters = references[mode]
    namespace = {"lines": "dedupe-lines", "sentences": "dedupe-sentences"}[mode]
    assert_same(outputs[mode], reference_pages)
    assert counters[mode] == namespaced(namespace, reference_counters)
    # The planted duplicates did something, in every counter that matters.
    if mode == "lines":
        assert_lines_reconcile(reference_counters, planted.pages)
        for name in ("line-filtered:global_duplicate", "line-filtered:local_duplicate", "filtered:too_few_sentences"):
            assert reference_counters[name] > 0, name
    else:
        assert_sentences_reconcile(reference_counters, planted.pages)
        assert reference_counters["sentence-filtered:duplicate"] > 100
        assert reference_counters["filtered:too_few_sentences"] > 0


@pytest.mark.parametrize("mode", ["lines", "sentences"])
def test_reference_is_order_independent(mode, planted):
    """Shuffled input, same output (Beam is checked on shuffled input against the reference above)."""
    reference = {"lines": dedup_lines_reference, "sentences": dedup_sentences_reference}[mode]
    pages = planted.pages[:150] + planted.pages[-1:] + worked_pages()
    expected, expected_counters = reference(pages)
    shuffled = list(pages)
    random.Random(3).shuffle(shuffled)
    for order in (shuffled, pages[::-1]):
        out, counters = reference(order)
        assert by_url(out) == by_url(expected)
        assert counters == expected_counters


def test_lines_owner_is_smallest_url_md5(planted, references):
    """Brute force: each line key that survives lives in exactly one page, once, and that page is the input page
    with the smallest md5(url) among those holding the key; every such owner that survives keeps its line."""
    carriers: dict[str, set[str]] = defaultdict(set)
    for page in planted.pages:
        for line in page.text.split("\n"):
            carriers[line_key(line)].add(page.url)
    owner = {key: min(urls, key=lambda url: (md5_hex(url), url)) for key, urls in carriers.items()}
    out = by_url(references["lines"][0])
    seen: Counter[str] = Counter()
    for url, page in out.items():
        for line in page.text.split("\n"):
            key = line_key(line)
            seen[key] += 1
            assert owner[key] == url
    assert set(seen.values()) == {1}
    assert {key for key, url in owner.items() if url in out} == set(seen)
    multi = [key for key, urls in carriers.items() if len(urls) > 1]
    assert len(multi) > 50  # the planted copies made real cross-page duplicates


def test_text_owned_by_a_dropped_page_vanishes_everywhere(planted, references):
    assert planted.orphan_owner not in {page.url for pages, _ in references.values() for page in pages}
    assert md5_hex(planted.orphan_owner) < min(md5_hex(url) for url in planted.orphan_carriers)
    for mode, (pages, _) in references.items():
        out = by_url(pages)
        survivors = [url for url in planted.orphan_carriers if url in out]
        assert survivors, mode  # some carrier survived, yet without the line
        for page in pages:
            assert planted.orphan.lower() not in page.text.lower(), (mode, page.url)
    lines_out = by_url(references["lines"][0])
    assert all(line_key(planted.orphan) not in {line_key(line) for line in lines_out[url].text.split("\n")}
               for url in planted.orphan_carriers if url in lines_out)


def test_sentences_copied_lines_survive_only_in_their_keeper(planted, references):
    """A planted line survives (re-spaced) at most in one page: the smallest-md5(url) page carrying it."""
    out = by_url(references["sentences"][0])
    copies: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for page in planted.pages:
        for other in page.text.split("\n"):
            copies[other.strip().lower()].append((page.url, other))
    found = checked = 0
    for line in planted.copied_lines:
        target = [sentence.lower() for sentence in split_sentences(line)]
        carriers, consistent = set(), True
        for url, other in copies[line.strip().lower()]:
            carriers.add(url)
            consistent &= [sentence.lower() for sentence in split_sentences(other)] == target
        if not consistent:  # a case change made Punkt split a copy differently: not the same windows
            continue
        checked += 1
        keeper = min(carriers, key=lambda url: (md5_hex(url), url))
        needle = " ".join(target)
        hits = [url for url, page in out.items() if any(x.lower() == needle for x in page.text.split("\n"))]
        assert set(hits) <= {keeper}, line
        found += bool(hits)
    assert checked > 40 and found > checked // 2


def test_multi_processing_runner_equals_in_memory(planted, tmp_path):
    pages = planted.pages[:20] + planted.pages[-1:] + worked_pages()
    jobs = {"lines": (pages, DedupLines()), "sentences": (pages, DedupSentences())}
    in_memory = run_beam(tmp_path / "in_memory", jobs, ["--direct_running_mode=in_memory"])
    multi = run_beam(
        tmp_path / "multi", jobs, ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    for mode in jobs:
        assert_same(multi[0][mode], in_memory[0][mode])
        assert multi[1][mode] == in_memory[1][mode]
    assert_same(in_memory[0]["lines"], dedup_lines_reference(pages)[0])
    assert_same(in_memory[0]["sentences"], dedup_sentences_reference(pages)[0])


# ------------------------------------------------------------------------------------------------ hot key


HOT_LINE = "Subscribe to our newsletter for the latest updates."


def hot_key_page(index: int) -> Page:
    """Page `index` of the hot-key corpus: three lines of its own and the shared hot line."""
    return make_page(
        f"https://site{index % 97}.example/post/{index}",
        f"Post {index} opens with its own sentence.\n{HOT_LINE}\n"
        f"Post {index} has a second line of its own.\nPost {index} ends with a third line.",
    )


class _HotKeyPages(beam.PTransform):
    """The hot-key pages built on the workers (a `Create` of 5,000 pages would pickle them into the graph)."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    def expand(self, pbegin):
        return pbegin | beam.Create(range(self.count), reshuffle=False) | beam.Map(hot_key_page)


def test_hot_line_shared_by_5000_pages(tmp_path):
    count = 5000
    pages = [hot_key_page(index) for index in range(count)]
    owner = min(pages, key=lambda page: (md5_hex(page.url), page.url)).url
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner"]))
    (
        pipeline
        | _HotKeyPages(count)
        | "lines" >> DedupLines()
        | beam.Map(lambda page: json.dumps(asdict(page)))
        | beam.io.WriteToText(str(tmp_path / "part"))
    )
    result = pipeline.run()
    result.wait_until_finish()
    rows = [row for path in sorted(tmp_path.glob("part*")) for row in path.read_text("utf-8").splitlines()]
    out = by_url([Page(**json.loads(row)) for row in rows])
    assert len(out) == count  # every page keeps its three own lines
    assert [url for url, page in out.items() if HOT_LINE in page.text] == [owner]
    assert out[owner].text == by_url(pages)[owner].text
    counters = {m.key.metric.name: m.committed for m in result.metrics().query()["counters"]
                if m.key.metric.namespace == "dedupe-lines"}
    assert counters == {"line-in": 4 * count, "line-filtered:global_duplicate": count - 1,
                        "line-passed": 3 * count + 1, "passed": count}
    reference, reference_counters = dedup_lines_reference(pages)
    assert_same(list(out.values()), reference)
    assert counters == reference_counters


def test_md5_digests_order_pages_as_tfds_hex_does():
    """Dedup ships 16-byte digests; TFDS compares hex strings. Both give the same order, so the same owners."""
    urls = [f"http://order.example/{i}" for i in range(2000)]
    assert sorted(urls, key=md5_digest) == sorted(urls, key=md5_hex)
