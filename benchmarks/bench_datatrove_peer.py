"""Benchmark: c4prep's C4-en page rules vs datatrove's C4 filters on the same real pages (issue #8).

Both sides judge identical pages, parsed once from the real inputs by c4prep's reader and TFDS's WET text rules
(`parse_record`; pages over 190,000 characters dropped as C4 does before cleaning), in one process pinned to one
core, interleaved round by round. Reported: pages/s per core (wall clock; CPU time alongside), the agreement of the
kept pages and of their lines, and every cause of disagreement with examples.

datatrove is a benchmark-only dependency: never in the main venv or setup.py. One-time setup, then the run:

    python3.11 -m venv /work/peer-venv && /work/peer-venv/bin/pip install -e . datatrove==0.10.1 spacy==3.8.18
    /work/peer-venv/bin/python benchmarks/bench_datatrove_peer.py [--rounds 5] [--min-seconds 2] [--profile]

The rule sets compared, c4prep vs datatrove 0.10.x (the part of C4 `en` both implement, in TFDS order):
- line and page rules with >= 3 sentences: `c4_rules.clean_page` (NLTK Punkt English) vs
  `C4QualityFilter(min_num_sentences=3, min_words_per_line=5)` (spaCy sentencizer);
- LDNOOBW en @25e679f over the whole cleaned page: `c4_rules.check_badwords` vs `C4BadWordsFilter()`, fed the same
  vendored list file;
- langdetect en >= 0.99 (`c4_rules.check_english`): no datatrove equivalent runs offline (`LanguageFilter` needs
  the fastText lid.176 model, a download), so it is left out of both sides.

Without language id, non-English pages reach both rule sets alike. datatrove's defaults (5 sentences, 3 words per
line) are judged too, for agreement and speed. datatrove's own differences that no option changes: `'` counts as an
end mark, the word minimum counts words before citation removal, sentences come from spaCy's sentencizer and are
counted on every kept line. datatrove's blocks are called through `filter()` (no executor, no stats files), its
cheapest path. Nothing is downloaded: datatrove's bad-words download is answered with c4prep's vendored copy of the
same pinned list, and any other asset request fails.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable

from c4prep.pipelines import c4_rules
from c4prep.pipelines.readers import read_records
from c4prep.pipelines.records import Page, RawRecord
from c4prep.pipelines.sentences import split_sentences
from peer_agreement import KEPT, Verdict, disagreement_report, drop_reasons, page_agreement

WEBDATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "webdata"
DEFAULT_INPUTS = (WEBDATA / "CC-MAIN-2019-30-sample-a.warc.wet.gz", WEBDATA / "c4-en-train-00000-first500.jsonl")
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "out" / "datatrove_peer.json"
C4_SETTINGS = {"min_num_sentences": c4_rules.MIN_NUM_SENTENCES, "min_words_per_line": c4_rules.MIN_WORDS_PER_LINE}
DATATROVE_DEFAULTS = {"min_num_sentences": 5, "min_words_per_line": 3}  # C4QualityFilter() as shipped
OURS = "c4prep"
RATES = ("pages_per_s", "pages_per_cpu_s")  # by wall clock, by the timing thread's CPU time
PEERS = {"datatrove (C4 settings)": C4_SETTINGS, "datatrove (defaults)": DATATROVE_DEFAULTS}
DATATROVE_REASONS = {
    "lorem_ipsum": "filtered:loremipsum",
    "curly_bracket": "filtered:squigglybracket",
    "too_few_sentences": "filtered:too_few_sentences",
    "document_removed_with_badwords": "badwords",
}


@dataclass(frozen=True)
class Side:
    """One implementation under timing: `prepare` builds a pass's input (untimed), `judge` handles one item."""

    prepare: Callable[[list[Page]], list]
    judge: Callable[[object], object]


def pin_to_one_core() -> int:
    """Pin this process to its lowest allowed CPU (before any thread starts) and return it."""
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    return core


def local_open(path: str):
    return open(path, "rb")


def load_pages(path: Path) -> tuple[list[Page], int]:
    """The pages C4 would clean: parsed and validated as TFDS does, over-long pages dropped; and the raw count."""
    records = [r for r in read_records(str(path), open_binary=local_open) if isinstance(r, RawRecord)]
    pages = []
    for record in records:
        page = c4_rules.parse_record(record).page
        if page is not None and c4_rules.check_length(page).page is not None:
            pages.append(page)
    return pages, len(records)


def our_decision(page: Page) -> tuple[str, str | None]:
    """c4prep's C4 decision on one page: clean, then bad words on the cleaned text."""
    outcome = c4_rules.clean_page(page)
    if outcome.page is None:
        return next(name for name in outcome.counters if name.startswith("filtered:")), None
    if c4_rules.check_badwords(outcome.page).page is None:
        return "badwords", None
    return KEPT, outcome.page.text


def three_sentences(line: str) -> list[str]:
    """A splitter that reports 3 sentences per line: switches `clean_page`'s sentence minimum off for kept lines."""
    return [line] * c4_rules.MIN_NUM_SENTENCES


def our_unchecked_lines(page: Page) -> tuple[str, ...] | None:
    """The lines c4prep's line rules keep without the sentence minimum; None when a page rule drops the page."""
    outcome = c4_rules.clean_page(page, sentence_splitter=three_sentences)
    if outcome.page is not None:
        return tuple(outcome.page.text.split("\n"))
    return () if "filtered:too_few_sentences" in outcome.counters else None  # no line survived


def our_verdict(page: Page) -> Verdict:
    reason, text = our_decision(page)
    lines = our_unchecked_lines(page)
    sentences = sum(len(split_sentences(line)) for line in lines or ())
    return Verdict(reason, text, lines, sentences)


def offline_badwords(vendored_list: Path):
    """A stand-in for datatrove's asset download: the pinned LDNOOBW en URL maps to the vendored file, nothing else."""
    from datatrove.pipeline.filters import c4_filters

    def cached_asset(remote_path: str, **_ignored) -> str:
        if remote_path != c4_filters._EN_BADWORDS_URL:
            raise RuntimeError(f"datatrove asked for {remote_path}: this benchmark runs offline")
        return str(vendored_list)

    c4_filters.cached_asset_path_or_download = cached_asset


class Datatrove:
    """datatrove's C4QualityFilter + C4BadWordsFilter with the given quality settings, called block by block."""

    def __init__(self, settings: dict[str, int]) -> None:
        from datatrove.data import Document
        from datatrove.pipeline.filters import C4BadWordsFilter, C4QualityFilter

        self.settings = settings
        self.quality = C4QualityFilter(**settings)
        self.unchecked_quality = C4QualityFilter(**{**settings, "min_num_sentences": -1})
        self.badwords = C4BadWordsFilter()
        self._document = Document

    def documents(self, pages: list[Page]) -> list:
        return [self._document(text=page.text, id=page.url) for page in pages]

    def decide(self, document) -> tuple[str, str | None]:
        """The filters' decision; mutates `document.text` into the cleaned text, as datatrove does."""
        for block in (self.quality, self.badwords):
            result = block.filter(document)
            if result is not True:
                return DATATROVE_REASONS[result[1]], None
        return KEPT, document.text

    def verdict(self, page: Page) -> Verdict:
        from datatrove.utils.text import split_into_sentences

        reason, text = self.decide(self.documents([page])[0])
        unchecked = self.documents([page])[0]
        result = self.unchecked_quality.filter(unchecked)
        lines = None if result is not True else tuple(unchecked.text.split("\n")) if unchecked.text else ()
        sentences = sum(len(split_into_sentences(line)) for line in lines or ())
        return Verdict(reason, text, lines, sentences)

    def side(self) -> Side:
        return Side(prepare=self.documents, judge=self.decide)


def time_pass_until(side: Side, pages: list[Page], min_seconds: float) -> dict[str, float]:
    """Judge all pages pass after pass until `min_seconds` of wall time; pages/s by wall clock and by CPU time."""
    from datatrove.utils.text import split_into_parts

    judged, wall, cpu = 0, 0.0, 0.0
    while wall < min_seconds:
        items = side.prepare(pages)
        split_into_parts.cache_clear()  # datatrove memoises its last 5 splits; start each pass cold
        wall_start, cpu_start = time.perf_counter(), time.thread_time()
        for item in items:
            side.judge(item)
        wall += time.perf_counter() - wall_start
        cpu += time.thread_time() - cpu_start
        judged += len(items)
    return {"pages": judged, "wall_s": wall, "cpu_s": cpu, "pages_per_s": judged / wall,
            "pages_per_cpu_s": judged / cpu}


def summarise(values: Iterable[float]) -> dict[str, float]:
    """Median, extremes and spread ((max - min) / median) over the rounds."""
    values = sorted(values)
    median = statistics.median(values)
    return {"median": median, "min": values[0], "max": values[-1], "spread": (values[-1] - values[0]) / median}


def time_sides(sides: dict[str, Side], pages: list[Page], rounds: int, min_seconds: float) -> dict[str, dict]:
    """Interleaved timing: every round runs every side once, in the same order.

    Each side's rates are summarised over the rounds; c4prep's speed-up over a peer is taken round by round (the
    two ran back to back under the same load), then summarised.
    """
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for side in sides.values():  # warm-up: load Punkt, spaCy, regexes outside the timing
        for item in side.prepare(pages[:20]):
            side.judge(item)
    for _ in range(rounds):
        for name, side in sides.items():
            runs[name].append(time_pass_until(side, pages, min_seconds))
    report = {}
    for name, side_runs in runs.items():
        report[name] = {metric: summarise(run[metric] for run in side_runs) for metric in RATES}
        if name != OURS:
            report[name]["c4prep_speedup"] = {
                metric: summarise(ours[metric] / peer[metric] for ours, peer in zip(runs[OURS], side_runs))
                for metric in RATES
            }
        report[name]["rounds"] = side_runs
    return report


def profile_ours(pages: list[Page], top: int = 15) -> str:
    """cProfile of c4prep's side over one pass, top functions by own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for page in pages:
        our_decision(page)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def compare(path: Path, peers: dict[str, Datatrove], rounds: int, min_seconds: float, profile: bool) -> dict:
    pages, raw_records = load_pages(path)
    ours = {page.url: our_verdict(page) for page in pages}
    agreement = {}
    for name, peer in peers.items():
        theirs = {page.url: peer.verdict(page) for page in pages}
        agreement[name] = {
            "settings": peer.settings,
            "pages": page_agreement(ours, theirs),
            "decisions": drop_reasons(theirs),
            "disagreements": disagreement_report(
                ours, theirs, peer.settings["min_words_per_line"], peer.settings["min_num_sentences"]),
        }
    sides = {OURS: Side(prepare=list, judge=our_decision), **{name: peer.side() for name, peer in peers.items()}}
    report = {
        "input": path.name,
        "raw_records": raw_records,
        "pages": len(pages),
        "c4prep_decisions": drop_reasons(ours),
        "agreement": agreement,
        "timing": time_sides(sides, pages, rounds, min_seconds),
    }
    if profile:
        report["c4prep_profile"] = profile_ours(pages)
    return report


def environment(core: int) -> dict:
    from importlib.metadata import version

    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "?")
    return {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": model,
        "cpus": os.cpu_count(),
        "pinned_core": core,
        "load_average": os.getloadavg(),
        "python": platform.python_version(),
        "versions": {name: version(name) for name in ("datatrove", "spacy", "nltk", "c4prep")},
    }


def _range(summary: dict[str, float], spec: str, unit: str = "") -> str:
    return f"{summary['median']:{spec}}{unit} ({summary['min']:{spec}}-{summary['max']:{spec}})"


def print_tables(report: dict) -> None:
    for result in report["inputs"]:
        timing = result["timing"]
        print(f"\n### {result['input']}: {result['pages']} pages ({result['raw_records']} records)\n")
        print("| side | pages/s per core, median (min-max) | pages/CPU-s, median | c4prep speed-up, wall "
              "(min-max) | c4prep speed-up, CPU |")
        print("|---|---:|---:|---:|---:|")
        for name, side in timing.items():
            rate, cpu = side["pages_per_s"], side["pages_per_cpu_s"]
            speedup = side.get("c4prep_speedup")
            wall_ratio = _range(speedup["pages_per_s"], ".1f", "x") if speedup else "-"
            cpu_ratio = f"{speedup['pages_per_cpu_s']['median']:.1f}x" if speedup else "-"
            print(f"| {name} | {_range(rate, ',.0f')} | {cpu['median']:,.0f} | {wall_ratio} | {cpu_ratio} |")
        print(f"\nc4prep decisions: {result['c4prep_decisions']}")
        for name, peer in result["agreement"].items():
            pages = peer["pages"]
            print(f"\n{name} {peer['settings']}: decisions {peer['decisions']}")
            print(f"- same decision on {pages['decision_agreement']:.1%} of pages; kept by both {pages['kept_by_both']}"
                  f", c4prep only {pages['kept_by_ours_only']}, datatrove only {pages['kept_by_peer_only']}, "
                  f"neither {pages['dropped_by_both']}")
            print(f"- pages kept by both: identical text {pages['identical_text_of_kept_by_both']:.1%}, line "
                  f"Jaccard {pages['line_jaccard_of_kept_by_both']:.4f} ({pages['lines_in_both']} shared, "
                  f"{pages['lines_only_ours']} c4prep only, {pages['lines_only_peer']} datatrove only)")
            for entry in peer["disagreements"]:
                print(f"  - {entry['pages']} pages: {entry['cause']}")
        if "c4prep_profile" in result:
            print(f"\nc4prep profile, one pass:\n{result['c4prep_profile']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, action="append", help="WET or C4 JSONL file (repeatable); default: "
                        "the CC-MAIN-2019-30 WET sample and the 500 released C4 documents")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds per side (default 5)")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="wall seconds per side and round (default 2)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=f"JSON report (default {DEFAULT_OUTPUT})")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of c4prep's side")
    args = parser.parse_args()
    inputs = args.input or list(DEFAULT_INPUTS)
    missing = [str(path) for path in inputs if not path.is_file()]
    if missing:
        parser.error(f"input not found: {', '.join(missing)} (the real samples live in ../shared/data/webdata/)")
    core = pin_to_one_core()
    try:
        import datatrove  # noqa: F401
    except ImportError:
        parser.error("datatrove is not installed in this interpreter: use the peer venv (see this script's docstring)")
    with resources.as_file(resources.files("c4prep.pipelines").joinpath("data/badwords/en.txt")) as badwords:
        offline_badwords(badwords)
        peers = {name: Datatrove(settings) for name, settings in PEERS.items()}
        results = [compare(path, peers, args.rounds, args.min_seconds, args.profile) for path in inputs]
    report = {"environment": environment(core), "inputs": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    print(json.dumps(report["environment"]))
    print_tables(report)
    print(f"\nFull report: {args.output}")


if __name__ == "__main__":
    main()
