"""Text deduplication across pages, two modes, as pure functions (see ../shared/reference/c4.md §9, §14, §15).

- `lines` — released C4 (TFDS 2.3.1+/3.x, §9a): the unit is the whole line, keyed by the md5 of the stripped,
  lowercased line; one page owns each line; every other copy, and every later copy inside the owner page, is
  removed. Namespace `dedupe-lines`.
- `sentences` — the T5 paper (TFDS 1.x, §9c): the unit is a window of up to three consecutive Punkt sentences
  inside one line; one occurrence of each window is kept and every sentence covered by another occurrence is
  removed. Namespace `dedupe-sentences`.
- `none` — no text dedup (the driver skips the stage).

Both modes have the same two-phase shape, and the in-memory references below and the Beam transforms in
`beam_dedup.py` share every per-page function; they differ only in how the smallest claim per key is found:

1. each page states its *claims*: `(key, claim)`, one per distinct key of the page, the claim packing the page's id
   (the md5 of its raw URL) and `occurrence`, the position of the key's first occurrence in the page, into one integer
   (`line_claims`, `sentence_claims`);
2. the owner of a key is its smallest claim (`smaller_claim`, an associative and commutative choice: a dict in
   memory, a combiner in Beam, so a hot key never materialises the list of all its pages);
3. each page gets back, by its id, the keys it owns with the occurrence to keep (`{key: occurrence}`), and a per-page
   function removes everything else (`remove_unowned_lines`, `remove_unowned_sentences`).

Ownership is decided over ALL pages entering dedup, before any page is dropped (in this step or later), so text
whose owner page is dropped vanishes from the corpus (TFDS behaviour, §9a).

Ties: the owner is the page whose raw `url` has the smallest md5 (TFDS 3.1.0 compares the hex: "hash before
comparison to avoid biasing by domain"), then the smallest occurrence, so the choice never depends on input order.
Pages must have distinct raw URLs — URL dedup upstream keeps one page per normalised URL, and equal raw URLs
normalise equally — so two pages with the same raw URL are an upstream bug and raise `DuplicateUrlError` (in the
reference and in Beam, where TFDS asserted the same) rather than silently letting both copies keep the text they
"own". Two distinct raw URLs with one md5 (never seen; TFDS would then fall back to the URL) raise it too: a page's
md5 is its identity in the shuffles, which carry 16 bytes per claim and owner instead of the URL.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from typing import Collection, Container, Iterable, Iterator, Mapping

from .c4_rules import END_MARKS, MIN_NUM_SENTENCES, Outcome, md5_digest
from .records import Page
from .sentences import split_sentences

DEDUP_MODES = ("lines", "sentences", "none")
LINES_NAMESPACE = "dedupe-lines"
SENTENCES_NAMESPACE = "dedupe-sentences"
WINDOW_SIZE = 3  # sentences per window in `sentences` mode (TFDS 1.x `max_window_size`)
_END_MARK_SET = frozenset(END_MARKS)

# A claim is one integer, `md5(raw URL) << 32 | occurrence of the key in that page`: integers compare as (md5,
# occurrence), and an md5 read as a big-endian integer orders as its hex spelling (TFDS compares hex). One Python int
# is a fifth of the memory of the (md5, URL, occurrence) tuple it replaces, in every claim the shuffle carries.
Claim = int
PageId = bytes  # md5 digest of a page's raw URL: who owns a key, and how owners find their page
Key = bytes  # md5 digest of a line (mode `lines`) or of a window of sentences (mode `sentences`)
OCCURRENCE_BITS = 32


class DuplicateUrlError(ValueError):
    """Two pages with the same raw URL reached text dedup (URL dedup must run before it)."""


# ------------------------------------------------------------------------------------------------ ownership


def page_id(page: Page) -> PageId:
    """A page's identity in dedup: the md5 of its raw URL. Pages compete for a key by it, smallest first."""
    return md5_digest(page.url)


def make_claim(page: PageId, occurrence: int) -> Claim:
    if not 0 <= occurrence < 1 << OCCURRENCE_BITS:
        raise ValueError(f"occurrence {occurrence} does not fit a claim's {OCCURRENCE_BITS} bits")
    return int.from_bytes(page, "big") << OCCURRENCE_BITS | occurrence


def smaller_claim(first: Claim | None, second: Claim | None) -> Claim | None:
    """The winning claim of two (`None` = no claim yet). Associative and commutative, hence combiner-safe."""
    if first is None:
        return second
    if second is None:
        return first
    return first if first <= second else second


def claim_page(claim: Claim) -> PageId:
    return (claim >> OCCURRENCE_BITS).to_bytes(16, "big")


def claim_occurrence(claim: Claim) -> int:
    return claim & ((1 << OCCURRENCE_BITS) - 1)


def owned_by_page(owners: Mapping[Key, Claim]) -> dict[PageId, dict[Key, int]]:
    """Invert `key -> winning claim` into `page id -> {key: occurrence to keep}`."""
    owned: dict[PageId, dict[Key, int]] = defaultdict(dict)
    for key, claim in owners.items():
        owned[claim_page(claim)][key] = claim_occurrence(claim)
    return dict(owned)


def first_occurrences(keys: Iterable[Key]) -> dict[Key, int]:
    """Each distinct key with its first occurrence (position in `keys`): what a page claims."""
    firsts: dict[Key, int] = {}
    for occurrence, key in enumerate(keys):
        firsts.setdefault(key, occurrence)
    return firsts


def _first_claims(page: Page, keys: Iterable[Key]) -> list[tuple[Key, Claim]]:
    identity = page_id(page)
    return [(key, make_claim(identity, occurrence)) for key, occurrence in first_occurrences(keys).items()]


def _nonzero(counters: Counter) -> dict[str, int]:
    return {name: value for name, value in counters.items() if value}


def check_one_page_per_id(urls: Iterable[str]) -> None:
    """Raise `DuplicateUrlError` if a raw URL, or the md5 of two distinct raw URLs, occurs more than once."""
    by_id: dict[PageId, set[str]] = defaultdict(set)
    counts = Counter()
    for url in urls:
        counts[url] += 1
        by_id[md5_digest(url)].add(url)
    repeated = sorted(url for url, count in counts.items() if count > 1)
    if repeated:
        raise DuplicateUrlError(f"{len(repeated)} raw URLs occur on more than one page, e.g. {repeated[0]!r}; run "
                                "URL dedup first")
    colliding = next((sorted(same) for same in by_id.values() if len(same) > 1), None)
    if colliding:
        raise DuplicateUrlError(f"the raw URLs {colliding[0]!r} and {colliding[1]!r} have the same md5, which "
                                "text dedup uses as a page's identity")


def _reference(pages: Iterable[Page], claims, remove) -> tuple[list[Page], dict[str, int]]:
    pages = list(pages)
    check_one_page_per_id(page.url for page in pages)
    owners: dict[Key, Claim] = {}
    for page in pages:
        for key, claim in claims(page):
            owners[key] = smaller_claim(owners.get(key), claim)
    owned = owned_by_page(owners)
    kept: list[Page] = []
    counters: Counter[str] = Counter()
    for page in pages:
        outcome = remove(page, owned.get(page_id(page), {}))
        counters.update(outcome.counters)
        if outcome.page is not None:
            kept.append(outcome.page)
    return kept, _nonzero(counters)


# ------------------------------------------------------------------------------------------------ mode `lines`


def page_lines(page: Page) -> list[str]:
    """The lines line dedup works on: `text.split("\\n")` as TFDS 3.x (clean_page uses `splitlines()`, §14.10)."""
    return page.text.split("\n")


def line_key(line: str) -> Key:
    """md5 of the stripped, `str.lower()`-ed line (TFDS 2.3.1+; 2.3.0 lowered bytes, ASCII only)."""
    return md5_digest(line.strip().lower())


def line_keys(page: Page) -> list[Key]:
    """The key of every line of the page, in order."""
    return [line_key(line) for line in page_lines(page)]


def line_claims(page: Page) -> list[tuple[Key, Claim]]:
    """One claim per distinct line key of the page; the occurrence is the index of its first line."""
    return _first_claims(page, line_keys(page))


def remove_unowned_lines(
    page: Page, owned: Container[Key], min_num_sentences: int = MIN_NUM_SENTENCES
) -> Outcome:
    """TFDS 3.1.0's per-page step of line dedup, given the line keys this page owns (a set, or the `{key: first
    line index}` that ownership yields: the owner always keeps the first occurrence of its line).

    A line whose key the page does not own is dropped (`line-filtered:global_duplicate`), a later repeat of an
    owned key is dropped (`line-filtered:local_duplicate`), other lines are kept with their original text. The
    page is dropped when the kept lines join to "" (`filtered:empty`) or, with `min_num_sentences`, when Punkt
    finds fewer sentences in the joined text (`filtered:too_few_sentences`; counted on the whole text, not per
    line as in clean_page).

    Counters reconcile as in `clean_page`: `line-in` = `line-passed` + every `line-filtered:*`, where
    `line-filtered:page_dropped` counts the kept lines of dropped pages and `line-passed` counts lines of
    surviving pages only (TFDS bumps `line-passed` before the page checks, so its count includes them).
    """
    lines = page_lines(page)
    counters: Counter[str] = Counter({"line-in": len(lines)})
    kept: list[str] = []
    seen: set[Key] = set()
    for line in lines:
        key = line_key(line)
        if key not in owned:
            counters["line-filtered:global_duplicate"] += 1
        elif key in seen:
            counters["line-filtered:local_duplicate"] += 1
        else:
            kept.append(line)
            seen.add(key)
    text = "\n".join(kept)
    if not text:
        reason = "empty"
    elif min_num_sentences and len(split_sentences(text)) < min_num_sentences:
        reason = "too_few_sentences"
    else:
        counters["line-passed"] += len(kept)
        counters["passed"] += 1
        return Outcome(replace(page, text=text), _nonzero(counters))
    counters[f"filtered:{reason}"] += 1
    counters["line-filtered:page_dropped"] += len(kept)
    return Outcome(None, _nonzero(counters))


def dedup_lines_reference(
    pages: Iterable[Page], min_num_sentences: int = MIN_NUM_SENTENCES
) -> tuple[list[Page], dict[str, int]]:
    """Line dedup of a whole corpus in memory: the surviving pages (input order) and the summed counters."""
    return _reference(
        pages, line_claims, lambda page, owned: remove_unowned_lines(page, owned, min_num_sentences)
    )


# ------------------------------------------------------------------------------------------------ mode `sentences`

# Differences from TFDS 1.x, all deliberate: pages compete with their raw URL (1.x used its PCollection key, the
# normalised URL) like mode `lines` and TFDS 3.1.0; a window repeated inside its keeper page keeps its first copy
# (see `remove_unowned_sentences`; `tfds_1x_quirk=True` restores 1.x); a page left without sentences is dropped
# as `filtered:empty` even with `min_num_sentences=0`; counters use this project's names (1.x:
# `emitted-sentences-duplicate`, `filtered-sentence-duplicate`, `filtered-doc-toofewsentences`).


def sentences_by_line(page: Page) -> list[list[str]]:
    """Punkt sentences of each line of `text.splitlines()` (original case), as TFDS 1.x."""
    return [split_sentences(line) for line in page.text.splitlines()]


def window_key(sentences: Iterable[str]) -> Key:
    """md5 of the lowercased sentences joined by NUL (the TFDS 1.x key is the lowercased tuple itself; a NUL
    inside a sentence could make two tuples share a key, which web text after WET parsing does not have).
    Sentences are not stripped: Punkt keeps a line's leading whitespace in its first sentence, as in TFDS, and
    clean_page has stripped every line before dedup anyway."""
    return _lowered_window_key([sentence.lower() for sentence in sentences])


def _lowered_window_key(lowered: list[str]) -> Key:
    return md5_digest("\x00".join(lowered))


def line_windows(sentences: list[str], size: int = WINDOW_SIZE) -> Iterator[tuple[int, int]]:
    """`(start, size)` of each window of a line: every run of `size` sentences, or ONE window of all the
    sentences when the line has fewer. Windows made only of bare end marks (".", "?", "!", '"') are skipped, as is
    the empty window of a sentence-free line."""
    if not sentences:
        return
    width = min(size, len(sentences))
    bare = None if _END_MARK_SET.isdisjoint(sentences) else [sentence in _END_MARK_SET for sentence in sentences]
    for start in range(len(sentences) - width + 1):
        if bare is None or not all(bare[start : start + width]):
            yield start, width


def window_spans(lines: list[list[str]], size: int = WINDOW_SIZE) -> list[tuple[int, int, int]]:
    """`(line, start, size)` of every window occurrence of a page (from `sentences_by_line`), in page order: its
    position in this list is the occurrence number that claims and ownership refer to."""
    return [(line, start, width)
            for line, sentences in enumerate(lines) for start, width in line_windows(sentences, size)]


def span_key(lines: list[list[str]], span: tuple[int, int, int]) -> Key:
    """The key of the window at `span` = `(line, start, size)` of `lines`."""
    line, start, size = span
    return window_key(lines[line][start : start + size])


def window_keys(lines: list[list[str]], size: int = WINDOW_SIZE) -> list[Key]:
    """The `window_key` of every window occurrence of a page, in occurrence order (see `window_spans`); each line
    is lowercased once, not once per window, and a line of at most `size` sentences, none a bare end mark, is its
    one window."""
    keys = []
    for sentences in lines:
        lowered = [sentence.lower() for sentence in sentences]
        if len(sentences) <= size and _END_MARK_SET.isdisjoint(sentences):
            if sentences:
                keys.append(_lowered_window_key(lowered))
        else:
            keys += [_lowered_window_key(lowered[start : start + width])
                     for start, width in line_windows(sentences, size)]
    return keys


def sentence_claims(page: Page, lines: list[list[str]] | None = None) -> list[tuple[Key, Claim]]:
    """One claim per distinct window key of the page; the occurrence is that of its first window. `lines` is the
    page's `sentences_by_line` when the caller has it already (Punkt is the cost of this mode: split once)."""
    if lines is None:
        lines = sentences_by_line(page)
    return _first_claims(page, window_keys(lines))


def remove_unowned_sentences(
    page: Page,
    kept: Collection[int],
    min_num_sentences: int = MIN_NUM_SENTENCES,
    tfds_1x_quirk: bool = False,
    lines: list[list[str]] | None = None,
) -> Outcome:
    """The per-page step of the paper's span dedup, given the window occurrences this page keeps (`kept`: the
    occurrence of each claim the page won, i.e. the first occurrence of each window key it owns). An occurrence
    number identifies its window, so the keys are not hashed a second time (only `tfds_1x_quirk` needs them).

    Every window occurrence the page does not keep marks the sentences it covers; marked sentences are removed
    (`sentence-filtered:duplicate`), a line left without sentences disappears, and the surviving sentences of a line
    are re-joined with single spaces — TFDS 1.x lost the original intra-line spacing and c4prep keeps that
    behaviour, so every page of this mode is re-spaced even when nothing was removed. The page is dropped when no
    sentence is left (`filtered:empty`) or fewer than `min_num_sentences` are (`filtered:too_few_sentences`,
    counted as the sum over lines, as TFDS 1.x).

    The keeper page keeps exactly ONE copy of a window: its first occurrence (c4prep's deliberate fix). TFDS 1.x
    skipped one entry per key in a list holding one entry per occurrence, so a window repeated inside its keeper
    page was sent back to the keeper and vanished from the whole corpus; `tfds_1x_quirk=True` reproduces that (a
    window is kept only if it occurs exactly once in its keeper page). As in TFDS, keeping an occurrence does not
    protect its sentences from an overlapping window the page does not keep.

    Counters reconcile: `sentence-in` = `sentence-passed` + `sentence-filtered:duplicate` +
    `sentence-filtered:page_dropped` (sentences left in dropped pages); pages: `passed` + `filtered:*` = pages in.

    `lines`: the page's `sentences_by_line` when the caller has it already (it is computed from `page.text`
    otherwise); `page.text` is not read when it is given.
    """
    if lines is None:
        lines = sentences_by_line(page)
    kept = set(kept)
    spans = window_spans(lines)
    if tfds_1x_quirk:
        keys = [span_key(lines, span) for span in spans]
        repeats = Counter(keys)
        kept = {occurrence for occurrence in kept if repeats[keys[occurrence]] == 1}
    removed: dict[int, set[int]] = {}  # line -> its removed sentences, for lines that lose any
    for occurrence, (line, start, size) in enumerate(spans):
        if occurrence not in kept:
            removed.setdefault(line, set()).update(range(start, start + size))
    new_lines: list[str] = []
    remaining = 0
    for line, sentences in enumerate(lines):
        gone = removed.get(line)
        if gone:
            sentences = [sentence for index, sentence in enumerate(sentences) if index not in gone]
        if sentences:
            new_lines.append(" ".join(sentences))
            remaining += len(sentences)
    counters: Counter[str] = Counter({"sentence-in": sum(len(sentences) for sentences in lines),
                                      "sentence-filtered:duplicate": sum(len(gone) for gone in removed.values())})
    if remaining == 0:
        reason = "empty"
    elif remaining < min_num_sentences:
        reason = "too_few_sentences"
    else:
        counters["sentence-passed"] += remaining
        counters["passed"] += 1
        return Outcome(replace(page, text="\n".join(new_lines)), _nonzero(counters))
    counters[f"filtered:{reason}"] += 1
    counters["sentence-filtered:page_dropped"] += remaining
    return Outcome(None, _nonzero(counters))


def dedup_sentences_reference(
    pages: Iterable[Page], min_num_sentences: int = MIN_NUM_SENTENCES, tfds_1x_quirk: bool = False
) -> tuple[list[Page], dict[str, int]]:
    """Three-sentence-span dedup of a whole corpus in memory: surviving pages (input order) and summed counters."""
    return _reference(
        pages,
        sentence_claims,
        lambda page, owned: remove_unowned_sentences(page, owned.values(), min_num_sentences, tfds_1x_quirk),
    )
