"""The C4 `en` rules as plain, deterministic functions (TFDS c4 3.1.0 semantics).

Every rule takes a record or page and returns an `Outcome`: the page to pass on (or `None` when the rule drops it)
and the counters the rule bumps, named as TFDS names them within the rule's namespace (`NAMESPACES`). The Beam glue
only wires these functions and turns counters into Beam metrics; see `../shared/reference/c4.md` for the source of
every constant and regex.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import Callable, Iterable, Mapping, NamedTuple

from .records import Page, RawRecord, SourceFormat
from .sentences import split_sentences
from .word_trie import trie_regex

MAX_PAGE_LENGTH = 190_000  # characters of parsed text (TFDS `1.9e5`)
MIN_WORDS_PER_LINE = 5
MIN_NUM_SENTENCES = 3
MAX_WORD_LENGTH = 1000
END_MARKS = (".", "?", "!", '"')  # ASCII double quote only, as TFDS
ELLIPSIS = "..."
POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
CITATION_RE = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
WET_METADATA_PREFIXES = ("WARC", "CONTENT-", "Content-")
MIN_ENGLISH_PROBABILITY = 0.99
LANGDETECT_SEED = 0
VALIDATION_BUCKETS = 1000  # md5(normalized url) % 1000 == 0 -> validation (0.1%)

_SCHEME_RE = re.compile(r"https?:\/\/(www\.)?")
_TRACKING_QUERY_RE = re.compile(r"\?(utm_|ref|feed).*")
_NEWLINES_RE = re.compile(r"\r\n|\r|\n")

# Counter namespace of each rule, as in TFDS 3.1.0.
NAMESPACES = {
    "parse_record": "split-wet-file",
    "check_length": "too-long-filter",
    "check_realnews_domain": "realnews-domain-filter",
    "join_webtext_urls": "webtextlike-filter",
    "clean_page": "clean-page",
    "check_english": "english-filter",
    "check_badwords": "badwords-filter",
}


class Outcome(NamedTuple):
    """What a rule decided: the page to pass on (None = dropped) and the counters it bumps."""

    page: Page | None
    counters: dict[str, int]


def _passed(page: Page) -> Outcome:
    return Outcome(page, {"passed": 1})


def _dropped(counter: str) -> Outcome:
    return Outcome(None, {counter: 1})


def _package_data(name: str) -> str:
    return resources.files(__package__).joinpath("data", name).read_text(encoding="utf-8")


def md5_hex(text: str) -> str:
    """Hex md5 of the UTF-8 bytes of `text` (TFDS hashes URLs, lines and texts this way)."""
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def md5_digest(text: str) -> bytes:
    """The 16-byte md5 of the UTF-8 bytes of `text`: `md5_hex` in half the bytes, in the same order (bytes compare
    as their hex spellings do), for the keys and ranks that dedup ships through its shuffles."""
    return hashlib.md5(text.encode("utf-8")).digest()


def normalize_url(url: str) -> str:
    """C4's URL normalisation: drop every `http(s)://(www.)`, a `?utm_/ref/feed...` tail, trailing slashes."""
    url = _SCHEME_RE.sub("", url)
    url = _TRACKING_QUERY_RE.sub("", url)
    return url.rstrip("/")


def wet_text(body: str) -> str:
    """The page text TFDS's WET parser builds from a record body.

    Lines are stripped, empty lines skipped, and lines starting with `WARC`, `CONTENT-` or `Content-` are taken
    for metadata and dropped even inside the body (a TFDS quirk kept for fidelity). Newlines are universal, as
    TFDS reads the file in text mode.
    """
    lines = (line.strip() for line in _NEWLINES_RE.split(body))
    return "\n".join(line for line in lines if line and not line.startswith(WET_METADATA_PREFIXES))


def parse_record(record: RawRecord) -> Outcome:
    """Validate a raw record into a `Page`: it needs a URL, some text and a timestamp, checked in that order."""
    text = wet_text(record.body) if record.source_format is SourceFormat.WET else record.body
    if not record.url:
        return _dropped("filtered:no_url")
    if not text:
        return _dropped("filtered:no_content")
    if not record.timestamp:
        return _dropped("filtered:no_timestamp")
    page = Page(
        url=record.url,
        normalized_url=normalize_url(record.url),
        text=text,
        timestamp=record.timestamp,
        content_type=record.content_type or "text/plain",
        content_length=record.content_length
        if record.content_length is not None
        else len(record.body.encode("utf-8")),
    )
    return _passed(page)


def check_length(page: Page) -> Outcome:
    """Drop pages whose text exceeds 190,000 characters."""
    return _dropped("filtered") if len(page.text) > MAX_PAGE_LENGTH else _passed(page)


def page_recency_key(page: Page) -> tuple:
    """Order among pages sharing a normalised URL: the greatest key is kept.

    Newest `WARC-Date` first (TFDS 3.1.0, by :func:`timestamp_order`); ties, which TFDS leaves to chance, go to the
    greatest md5 of the text (the TFDS 3.0.x rule) and then to the remaining fields, so the choice never depends on
    input order.
    """
    return (timestamp_order(page.timestamp), page.timestamp, md5_hex(page.text), page.url, page.content_type,
            page.content_length)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def timestamp_order(timestamp: str) -> tuple[bool, int | str]:
    """A timestamp as URL dedup orders it: an ISO-8601 time by the instant it names, in microseconds (fractional
    seconds and UTC offsets count; one without an offset is UTC), where comparing the text put ``...54Z`` after
    ``...54.5Z``; after every such time, a timestamp that names none (a JSON Lines input's ``"yesterday"``), as text.
    TFDS compares the text, the same order for Common Crawl's whole-second UTC ``WARC-Date``."""
    try:
        instant = datetime.fromisoformat(timestamp)
    except ValueError:
        return (False, timestamp)
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=timezone.utc)
    return (True, (instant - _EPOCH) // _MICROSECOND)


def select_newest_page(pages: Iterable[Page]) -> Page:
    """The page URL dedup keeps among pages with the same normalised URL."""
    return max(pages, key=page_recency_key)


def load_realnews_domains(path: str | None = None) -> dict[str, bool | list[str]]:
    """The RealNews domain map (grover @ 38f7184, vendored): registered domain -> True or allowed subdomains.
    A ``ValueError`` saying what is wrong when the file at ``path`` is not such a map in JSON."""
    if path is None:
        return json.loads(_package_data("realnews/domain_to_allowed_subdomains.json"))
    try:
        with open(path, encoding="utf-8") as handle:
            domains = json.load(handle)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not JSON ({error})") from None
    if not isinstance(domains, dict) or not all(
            value is True or (isinstance(value, list) and all(isinstance(name, str) for name in value))
            for value in domains.values()):
        raise ValueError(f"{path} is not a JSON object of domain -> true or a list of allowed subdomains "
                         "(grover's domain_to_allowed_subdomains.json)")
    return domains


@functools.cache
def _domain_extractor():
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)  # bundled suffix list: never the network


def check_realnews_domain(page: Page, allowed: Mapping[str, bool | list[str]]) -> Outcome:
    """Keep pages from a RealNews domain (TFDS 3.1.0: matched on the normalised URL, so `www.` is gone).

    The registered domain (tldextract, bundled suffix list) must be a key; a list value also requires the
    subdomain to be exactly one of its strings.
    """
    parts = _domain_extractor()(page.normalized_url)
    subdomains = allowed.get(f"{parts.domain}.{parts.suffix}")
    if subdomains is None:
        return _dropped("filtered:bad_domain")
    if subdomains is not True and parts.subdomain not in subdomains:
        return _dropped("filtered:bad_subdomain")
    return _passed(page)


def join_webtext_urls(pages: list[Page], num_listed_urls: int) -> Outcome:
    """WebText-like join of one normalised URL: keep its page iff the URL is listed (counts as in TFDS)."""
    if not pages:
        return _dropped("missing-page")  # a listed URL with no crawled page
    if not num_listed_urls:
        return _dropped("filtered")
    return _passed(select_newest_page(pages))


def _has_too_long_word(line: str) -> bool:
    return len(line) > MAX_WORD_LENGTH and any(len(word) > MAX_WORD_LENGTH for word in line.split())


def has_enough_sentences(lines: list[str], sentence_splitter: Callable[[str], list[str]] = split_sentences) -> bool:
    """Whether the lines hold >= MIN_NUM_SENTENCES Punkt sentences in total.

    Every kept line is non-empty, so it holds at least one sentence: Punkt only needs to run when fewer lines
    than the minimum survive. The decision equals summing Punkt counts over every line, as TFDS does.
    """
    if len(lines) >= MIN_NUM_SENTENCES:
        return True
    return sum(len(sentence_splitter(line)) for line in lines) >= MIN_NUM_SENTENCES


def clean_page(page: Page, sentence_splitter: Callable[[str], list[str]] = split_sentences) -> Outcome:
    """C4's line and page heuristics, in TFDS order.

    Per line: strip; drop lines with a >1000-char word; remove citation markers; drop lines without an end mark
    (or ending in "..."); drop lines of < 5 words; drop the page on "lorem ipsum"; drop lines with "javascript";
    drop the page on "{"; drop lines with a policy phrase. The page needs >= 3 Punkt sentences over kept lines.

    Line counters reconcile: `line-in` = `line-passed` + every `line-filtered:*`, where
    `line-filtered:page_dropped` counts the lines of pages a page rule removed and `line-passed` counts lines
    in surviving pages only.
    """
    lines = page.text.splitlines()
    counters: Counter[str] = Counter({"line-in": len(lines)})
    kept: list[str] = []

    def drop_page(reason: str, lines_left: int) -> Outcome:
        counters[f"filtered:{reason}"] += 1
        if lines_left:
            counters["line-filtered:page_dropped"] += lines_left
        return Outcome(None, dict(counters))

    for index, line in enumerate(lines):
        line = line.strip()
        if _has_too_long_word(line):
            counters["line-filtered:too_long_word"] += 1
            continue
        line = CITATION_RE.sub("", line)
        if not line.endswith(END_MARKS) or line.endswith(ELLIPSIS):
            counters["line-filtered:no_endmark"] += 1
            continue
        if len(line.split()) < MIN_WORDS_PER_LINE:
            counters["line-filtered:too_short"] += 1
            continue
        lowered = line.lower()
        if "lorem ipsum" in lowered:
            return drop_page("loremipsum", len(kept) + len(lines) - index)
        if "javascript" in lowered:
            counters["line-filtered:javascript"] += 1
            continue
        if "{" in line:
            return drop_page("squigglybracket", len(kept) + len(lines) - index)
        if any(phrase in lowered for phrase in POLICY_SUBSTRINGS):
            counters["line-filtered:policy"] += 1
            continue
        kept.append(line)
    if not has_enough_sentences(kept, sentence_splitter):
        return drop_page("too_few_sentences", len(kept))
    counters["line-passed"] += len(kept)
    counters["passed"] += 1
    return Outcome(replace(page, text="\n".join(kept).strip()), dict(counters))


def langdetect_engine():
    """The langdetect implementation: `langdetect_rs` (a Rust port with bit-identical results, ~30x faster,
    checked against `langdetect` in the tests) when installed, else the original pure-Python `langdetect`."""
    try:
        import langdetect_rs as engine
    except ImportError:
        import langdetect as engine
    return engine


@functools.cache
def _language_detector_factory():
    engine = langdetect_engine()
    factory = engine.DetectorFactory()
    factory.load_profile(engine.PROFILES_DIRECTORY)
    factory.set_seed(LANGDETECT_SEED)
    return factory


def detect_languages(text: str) -> list:
    """langdetect's language probabilities for `text`, seeded (seed 0) so that every call is reproducible."""
    detector = _language_detector_factory().create()
    detector.append(text)
    return detector.get_probabilities()


def check_english(page: Page) -> Outcome:
    """Keep pages langdetect calls English with probability >= 0.99."""
    try:
        predictions = detect_languages(page.text)
    except langdetect_engine().LangDetectException:
        return _dropped("filtered:langdetect_exception")
    if not predictions:
        return _dropped("filtered:no_predictions")
    best = predictions[0]
    if best.prob < MIN_ENGLISH_PROBABILITY:
        return _dropped("filtered:low_confidence")
    if best.lang != "en":
        return Outcome(None, {"filtered:ignored_language": 1, f"filtered:ignored_language-{best.lang}": 1})
    return _passed(page)


def load_badwords(path: str | None = None) -> frozenset[str]:
    """The bad-words list: stripped, non-empty lines of `path`, or of the vendored LDNOOBW English list."""
    if path is None:
        text = _package_data("badwords/en.txt")
    else:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    return frozenset(word for word in (line.strip() for line in text.splitlines()) if word)


def badwords_pattern(words: Iterable[str]) -> re.Pattern[str]:
    """TFDS 3.1.0's bad-words regex: any escaped word, delimited by non-word characters or the text's ends.

    TFDS writes `(?:\\W|^)(w1|w2|...)(?:\\W|$)` with the words in one flat alternation; here the group is the same
    alternation as a prefix tree (`word_trie.trie_regex`), which the engine walks along one path per position
    instead of retrying all 377 words. Every branch of the tree is still followed by the same `(?:\\W|$)`, and the
    tree tries the words in the flat list's sorted order, so a search gives the same verdict, span and group on
    any text (tested against the flat form on every real page).
    An empty list gives a pattern that never matches (an empty alternation would match every separator).
    """
    alternation = trie_regex(words)
    if not alternation:
        return re.compile(r"(?!)")
    return re.compile(rf"(?:\W|^)({alternation})(?:\W|$)")


@functools.cache
def default_badwords_pattern() -> re.Pattern[str]:
    """The compiled pattern of the vendored C4 list (LDNOOBW English @ 25e679f)."""
    return badwords_pattern(load_badwords())


def check_badwords(page: Page, pattern: re.Pattern[str] | None = None) -> Outcome:
    """Drop pages whose lowercased text contains a listed word (C4 `en` drops every such page)."""
    pattern = pattern or default_badwords_pattern()
    return _dropped("filtered") if pattern.search(page.text.lower()) else _passed(page)


def split_for_url(normalized_url: str) -> str:
    """`validation` for 0.1% of URLs (md5 of the normalised URL divisible by 1000), `train` otherwise."""
    return "validation" if int(md5_hex(normalized_url), 16) % VALIDATION_BUCKETS == 0 else "train"
