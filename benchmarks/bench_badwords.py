"""Benchmark (#22): the bad-words rule with TFDS's flat 377-word alternation against the prefix-tree regex.

Input: every page of the real samples in ../shared/data/webdata, as `parse_record` passes them on: the uncleaned
CC-MAIN-2019-30 WET sample (335 pages, many languages) and the first 500 documents of released C4 `en`. Each repeat
runs `check_badwords` (lowercasing included, as the pipeline calls it) over all pages of one sample with each
pattern, alternating flat and trie; the report gives the min and median seconds per pass, pages/s at the min, and
flat/trie. It first asserts that both patterns give every page the same verdict.

    python benchmarks/bench_badwords.py [--repeats 9]
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import time
from pathlib import Path

from c4prep.pipelines.c4_rules import check_badwords, default_badwords_pattern, load_badwords, parse_record
from c4prep.pipelines.readers import read_records
from c4prep.pipelines.records import Page

WEBDATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "webdata"
SAMPLES = ("CC-MAIN-2019-30-sample-a.warc.wet.gz", "c4-en-train-00000-first500.jsonl")


def flat_pattern(words) -> re.Pattern[str]:
    """The pattern before #22 (TFDS 3.1.0's form): one alternation of the escaped words in sorted order."""
    return re.compile(rf"(?:\W|^)({'|'.join(re.escape(word) for word in sorted(words))})(?:\W|$)")


def read_pages(path: Path) -> list[Page]:
    return [parse_record(record).page for record in read_records(str(path), open_binary=lambda name: open(name, "rb"))]


def one_pass(pages: list[Page], pattern: re.Pattern[str]) -> float:
    started = time.perf_counter()
    for page in pages:
        check_badwords(page, pattern=pattern)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    patterns = {"flat": flat_pattern(load_badwords()), "trie": default_badwords_pattern()}
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} "
          f"at start, {args.repeats} repeats")
    print("| sample | pages | dropped | flat s/pass min (median) | trie s/pass min (median) | flat pages/s | "
          "trie pages/s | flat/trie (min, median) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name in SAMPLES:
        pages = read_pages(WEBDATA / name)
        verdicts = {kind: [check_badwords(page, pattern=pattern) for page in pages]
                    for kind, pattern in patterns.items()}
        assert verdicts["flat"] == verdicts["trie"], f"verdicts differ on {name}"
        dropped = sum(outcome.page is None for outcome in verdicts["trie"])
        times: dict[str, list[float]] = {kind: [] for kind in patterns}
        for _ in range(args.repeats):
            for kind, pattern in patterns.items():
                times[kind].append(one_pass(pages, pattern))
        best = {kind: min(values) for kind, values in times.items()}
        median = {kind: statistics.median(values) for kind, values in times.items()}
        print(f"| {name} | {len(pages)} | {dropped} | {best['flat']:.4f} ({median['flat']:.4f}) | "
              f"{best['trie']:.4f} ({median['trie']:.4f}) | {len(pages) / best['flat']:,.0f} | "
              f"{len(pages) / best['trie']:,.0f} | {best['flat'] / best['trie']:.2f}x, "
              f"{median['flat'] / median['trie']:.2f}x |")
    print(f"load average {os.getloadavg()[0]:.2f} at end; verdicts identical on every page")


if __name__ == "__main__":
    main()
