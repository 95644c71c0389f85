"""Benchmark: quality (precision/recall on planted near-duplicates) and speed of MinHash near-dedup.

Input: the 500 released C4 `en` documents (`webdata/c4-en-train-00000-first500.jsonl`) plus one planted variant of
each document of 150-1,200 words, made by perturbation to a controlled exact 5-gram Jaccard with its original
(`plant_near_duplicates`). Ground truth is exact: the Jaccard of the 5-gram sets of every pair of documents that
shares a shingle, connected components over pairs >= threshold, smallest doc_key kept (the stage's own survivor
rule, without MinHash or LSH).

    python benchmarks/bench_near_dedup.py [--thresholds 0.7 0.8 0.9] [--copies 5] [--skip-beam]

Speed is measured on COPIES disjoint copies of the planted set (copy k appends `~k` to every word and `#copy=k` to
every URL, so copies share no shingle and each repeats the planted duplicate structure).

Prints a JSON report and a Markdown summary. The test suite imports the planted-set and scoring helpers.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from itertools import combinations
from pathlib import Path
from typing import Iterable

from c4prep.pipelines import near_dedup
from c4prep.pipelines.c4_rules import normalize_url
from c4prep.pipelines.near_dedup import DocKey, NearDedupConfig, doc_key, shingles
from c4prep.pipelines.records import Page

WEBDATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "webdata"
C4_SAMPLE = "c4-en-train-00000-first500.jsonl"

# Controlled exact-Jaccard levels of the word-edit variants (the variant's Jaccard lands in [level - TOLERANCE,
# level]); 0.75 and below are meant to survive a 0.8 threshold, 0.85 and above to be removed.
EDIT_LEVELS = (0.95, 0.9, 0.85, 0.75, 0.7, 0.6, 0.5)
TOLERANCE = 0.02
KINDS = ("case-whitespace", "boilerplate", "sentence") + tuple(f"edit@{level}" for level in EDIT_LEVELS)
BOILERPLATE = (
    "Share this article on Facebook, Twitter or by email.",
    "All rights reserved. Copyright 2019.",
    "Click here to subscribe to our newsletter!",
)


def load_c4_pages(path: Path) -> list[Page]:
    """The released C4 documents as `Page`s (already cleaned by C4)."""
    pages = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            pages.append(Page(url=record["url"], normalized_url=normalize_url(record["url"]), text=record["text"],
                              timestamp=record["timestamp"], content_type="text/plain",
                              content_length=len(record["text"].encode("utf-8"))))
    return pages


def exact_jaccard(a: set, b: set) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@dataclass(frozen=True)
class Planted:
    base: Page
    variant: Page
    kind: str
    jaccard: float  # exact 5-gram Jaccard between base and variant


def _text(lines: list[list[str]]) -> str:
    return "\n".join(" ".join(words) for words in lines if words)


def _cosmetic(text: str, rng: random.Random) -> str:
    """Random case changes and extra whitespace: invisible to the shingling."""
    words = []
    for line in text.split("\n"):
        out = []
        for word in line.split(" "):
            roll = rng.random()
            out.append(word.upper() if roll < 0.1 else word.capitalize() if roll < 0.2 else word)
        words.append(("  " if rng.random() < 0.3 else " ").join(out) + (" \t" if rng.random() < 0.3 else ""))
    return "\n\n".join(words) if rng.random() < 0.5 else "\n".join(words)


def edit_to_level(base_text: str, level: float, vocabulary: list[str], ngram: int,
                   rng: random.Random) -> tuple[str, float] | None:
    """Random word deletions, insertions, replacements and sentence (line) deletions until the exact Jaccard with
    the base is in [level - TOLERANCE, level]; an edit that would overshoot is rejected."""
    base = shingles(base_text, ngram)
    lines = [line.split() for line in base_text.split("\n") if line.split()]
    score = 1.0
    for _ in range(5000):
        if score <= level:
            return _text(lines), score
        trial = [list(words) for words in lines]
        # One edit moves the Jaccard of an n-word text by up to ~10/n: take bigger steps while far from the level.
        steps = max(1, int((score - level) * sum(map(len, trial)) / 20))
        for _ in range(steps):
            i = rng.randrange(len(trial))
            op = rng.random()
            if op < 0.05 and len(trial) > 1:
                del trial[i]
                continue
            j = rng.randrange(len(trial[i]))
            if op < 0.4:
                trial[i][j] = rng.choice(vocabulary)
            elif op < 0.7 and len(trial[i]) > 1:
                del trial[i][j]
            else:
                trial[i].insert(j, rng.choice(vocabulary))
        candidate = exact_jaccard(base, shingles(_text(trial), ngram))
        if candidate >= level - TOLERANCE:
            lines, score = [words for words in trial if words], candidate
    return None


def plant_near_duplicates(pages: list[Page], ngram: int = 5, seed: int = 0, min_words: int = 150,
                          max_words: int = 1200, kinds: tuple[str, ...] = KINDS) -> list[Planted]:
    """One variant of each page of `min_words`..`max_words` words, kinds assigned in turn (seeded, reproducible).

    - case-whitespace: random upper/capitalised words, doubled spaces, blank lines (Jaccard 1.0);
    - boilerplate: one short boilerplate line appended;
    - sentence: the shortest line of >= 5 words deleted (one sentence in most C4 lines);
    - edit@L: word edits and line deletions down to exact Jaccard in [L - 0.02, L].
    Half of the non-cosmetic variants also get the cosmetic changes. Variant URL = base URL + `#near-dup-<kind>`.
    """
    rng = random.Random(seed)
    vocabulary = sorted({word for page in pages for word in page.text.split()})
    bases = [page for page in pages if min_words <= len(page.text.split()) <= max_words]
    planted = []
    for index, base in enumerate(bases):
        kind = kinds[index % len(kinds)]
        if kind == "case-whitespace":
            text = _cosmetic(base.text, rng)
        elif kind == "boilerplate":
            text = base.text + "\n" + rng.choice(BOILERPLATE)
        elif kind == "sentence":
            lines = base.text.split("\n")
            long_enough = [i for i, line in enumerate(lines) if len(line.split()) >= 5]
            if len(lines) < 2 or not long_enough:
                continue
            drop = min(long_enough, key=lambda i: (len(lines[i].split()), i))
            text = "\n".join(line for i, line in enumerate(lines) if i != drop)
        else:
            edited = edit_to_level(base.text, float(kind.split("@")[1]), vocabulary, ngram, rng)
            if edited is None:
                continue
            text = edited[0]
        if kind != "case-whitespace" and rng.random() < 0.5:
            text = _cosmetic(text, rng)
        url = f"{base.url}#near-dup-{kind}"
        variant = replace(base, url=url, normalized_url=normalize_url(url), text=text,
                          content_length=len(text.encode("utf-8")))
        score = exact_jaccard(shingles(base.text, ngram), shingles(text, ngram))
        planted.append(Planted(base, variant, kind, score))
    return planted


def planted_corpus(webdata: Path = WEBDATA, seed: int = 0) -> tuple[list[Page], list[Planted]]:
    """The 500 C4 documents + their planted variants, and the planted pairs."""
    originals = load_c4_pages(webdata / C4_SAMPLE)
    planted = plant_near_duplicates(originals, seed=seed)
    return originals + [item.variant for item in planted], planted


# ------------------------------------------------------------------------------------------------ ground truth


def exact_pair_jaccards(pages: Iterable[Page], ngram: int = 5) -> dict[tuple[DocKey, DocKey], float]:
    """Exact shingle-set Jaccard of every pair of pages that shares at least one shingle (inverted index)."""
    sets = {doc_key(page): shingles(page.text, ngram) for page in pages}
    postings: dict[bytes, list[DocKey]] = defaultdict(list)
    for key in sorted(sets):
        for shingle in sets[key]:
            postings[shingle].append(key)
    shared: dict[tuple[DocKey, DocKey], int] = defaultdict(int)
    for keys in postings.values():
        for pair in combinations(keys, 2):
            shared[pair] += 1
    return {(a, b): n / (len(sets[a]) + len(sets[b]) - n) for (a, b), n in shared.items()}


def exact_labels(jaccards: dict[tuple[DocKey, DocKey], float], threshold: float) -> dict[DocKey, DocKey]:
    """Ground-truth component labels (smallest doc_key) over pairs with exact Jaccard >= threshold."""
    parent: dict[DocKey, DocKey] = {}

    def find(node: DocKey) -> DocKey:
        root = node
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[node] != root:
            parent[node], node = root, parent[node]
        return root

    for (a, b), value in jaccards.items():
        if value >= threshold:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    return {node: find(node) for node in parent}


def score(pages: list[Page], planted: list[Planted], predicted: dict[DocKey, DocKey],
          truth: dict[DocKey, DocKey], threshold: float) -> dict:
    """Precision/recall of the removed documents against the exact ground truth, and per planted kind the share
    of (original, variant) pairs the stage merged into one cluster."""
    keys = [doc_key(page) for page in pages]
    removed = {key for key in keys if predicted.get(key, key) != key}
    true_removed = {key for key in keys if truth.get(key, key) != key}
    hit = len(removed & true_removed)

    def label(key: DocKey) -> DocKey:
        return predicted.get(key, key)

    by_kind: dict[str, dict] = {}
    for item in planted:
        base, variant = doc_key(item.base), doc_key(item.variant)
        merged = label(base) == label(variant)
        entry = by_kind.setdefault(item.kind, {"pairs": 0, "merged": 0, "jaccard_min": 1.0, "jaccard_max": 0.0})
        entry["pairs"] += 1
        entry["merged"] += merged
        entry["jaccard_min"] = round(min(entry["jaccard_min"], item.jaccard), 4)
        entry["jaccard_max"] = round(max(entry["jaccard_max"], item.jaccard), 4)
    above = [item for item in planted if item.jaccard >= threshold]
    far_below = [item for item in planted if item.jaccard < threshold - 0.1]

    def merged_share(items: list[Planted]) -> float | None:
        if not items:
            return None
        return sum(label(doc_key(i.base)) == label(doc_key(i.variant)) for i in items) / len(items)

    return {
        "threshold": threshold,
        "documents": len(pages),
        "removed": len(removed),
        "true_removed": len(true_removed),
        "precision": hit / len(removed) if removed else 1.0,
        "recall": hit / len(true_removed) if true_removed else 1.0,
        "planted_pairs_at_or_above_threshold_merged": merged_share(above),
        "planted_pairs_far_below_threshold_merged": merged_share(far_below),
        "by_kind": by_kind,
    }


def evaluate(pages: list[Page], planted: list[Planted], config: NearDedupConfig,
             jaccards: dict | None = None) -> dict:
    """Run the reference near-dedup and score it against the exact ground truth."""
    jaccards = exact_pair_jaccards(pages, config.ngram) if jaccards is None else jaccards
    found = near_dedup.find_near_duplicates(pages, config)
    result = score(pages, planted, found.labels, exact_labels(jaccards, config.threshold), config.threshold)
    result["bands_rows"] = list(config.band_params)
    result["counters"] = found.counters
    return result


# ----------------------------------------------------------------------------------------------------- speed


def disjoint_copies(pages: list[Page], copies: int) -> list[Page]:
    """`copies` copies of the pages sharing no shingle with each other (copy 0 = the pages themselves)."""
    out = list(pages)
    for k in range(1, copies):
        for page in pages:
            url = f"{page.url}#copy={k}"
            text = re.sub(r"\S+", lambda match: f"{match.group(0)}~{k}", page.text)
            out.append(replace(page, url=url, normalized_url=normalize_url(url), text=text,
                               content_length=len(text.encode("utf-8"))))
    return out


def time_reference(pages: list[Page], config: NearDedupConfig, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        near_dedup.near_dedup_reference(pages, config)
        best = min(best, time.perf_counter() - start)
    return best


def time_signatures(pages: list[Page], config: NearDedupConfig, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for page in pages:
            near_dedup.band_keys(near_dedup.minhash(page.text, config), config)
        best = min(best, time.perf_counter() - start)
    return best


def run_beam(pages: list[Page], config: NearDedupConfig, options: list[str]):
    """Kept pages (sorted by doc_key), counters and wall seconds of the Beam transform on the DirectRunner.

    Input and output go through JSON Lines files, so that output comes back from any running mode
    (multi_processing included); the seconds include pipeline construction and those two files.
    """
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from c4prep.pipelines.beam_near_dedup import NearDedup, near_dedup_counters

    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "pages.jsonl")  # not beam.Create: it pickles and bz2s the data into the graph
        with open(source, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(asdict(page), sort_keys=True) + "\n" for page in pages)
        start = time.perf_counter()
        pipeline = beam.Pipeline(options=PipelineOptions(options))
        _ = (pipeline
             | beam.io.ReadFromText(source)
             | beam.Map(lambda line: Page(**json.loads(line)))
             | NearDedup(config)
             | beam.Map(lambda page: json.dumps(asdict(page), sort_keys=True))
             | beam.io.WriteToText(os.path.join(folder, "kept"), file_name_suffix=".jsonl"))
        result = pipeline.run()
        result.wait_until_finish()
        seconds = time.perf_counter() - start
        kept = [Page(**json.loads(line)) for path in sorted(Path(folder).glob("kept*.jsonl"))
                for line in path.read_text(encoding="utf-8").splitlines()]
    return sorted(kept, key=doc_key), near_dedup_counters(result), seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.7, 0.8, 0.9])
    parser.add_argument("--copies", type=int, default=5, help="disjoint copies of the planted set for speed")
    parser.add_argument("--skip-beam", action="store_true")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    pages, planted = planted_corpus()
    build_seconds = time.perf_counter() - start
    jaccards = exact_pair_jaccards(pages)
    report: dict = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "corpus": {"documents": len(pages), "originals": len(pages) - len(planted), "planted": len(planted),
                   "build_seconds": round(build_seconds, 2)},
        "quality": [],
        "speed": {},
    }
    for threshold in args.thresholds:
        for label, config in (("recall-weighted default", NearDedupConfig(threshold=threshold)),
                              ("datasketch balanced (0.5, 0.5)", NearDedupConfig(
                                  threshold=threshold,
                                  **dict(zip(("bands", "rows"), _balanced(threshold, 128)))))):
            result = evaluate(pages, planted, config, jaccards)
            result["banding"] = label
            report["quality"].append(result)

    config = NearDedupConfig()
    speed_pages = disjoint_copies(pages, args.copies)
    report["speed"]["documents"] = len(speed_pages)
    signatures = time_signatures(speed_pages, config)
    reference = time_reference(speed_pages, config)
    report["speed"]["signatures only (shingles + MinHash + band keys), 1 core"] = round(
        len(speed_pages) / signatures, 1)
    report["speed"]["reference (near_dedup_reference), 1 core"] = round(len(speed_pages) / reference, 1)
    if not args.skip_beam:
        expected, expected_counters = near_dedup.near_dedup_reference(speed_pages, config)
        report["speed"]["counters"] = expected_counters
        for label, options in (("Beam DirectRunner in_memory, 1 worker", ["--direct_num_workers=1"]),
                               ("Beam DirectRunner multi_processing, 2 workers (total)",
                                ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])):
            kept, counters, seconds = run_beam(speed_pages, config, options)
            report["speed"][label] = {"seconds": round(seconds, 2), "docs_per_s": round(len(speed_pages) / seconds, 1),
                                      "equals_reference": kept == expected and counters == expected_counters}
    print(json.dumps(report, indent=2))
    print(markdown(report))
    return report


def _balanced(threshold: float, num_perm: int) -> tuple[int, int]:
    from datasketch.lsh import _optimal_param

    return tuple(int(v) for v in _optimal_param(threshold, num_perm, 0.5, 0.5))


def markdown(report: dict) -> str:
    corpus = report["corpus"]
    lines = [
        f"Planted set: {corpus['originals']} released C4 docs + {corpus['planted']} planted variants "
        f"= {corpus['documents']} docs.",
        "",
        "| threshold | banding | bands x rows | removed | true removed | precision | recall "
        "| planted pairs >= t merged | planted pairs < t-0.1 merged |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for q in report["quality"]:
        above = q["planted_pairs_at_or_above_threshold_merged"]
        below = q["planted_pairs_far_below_threshold_merged"]
        lines.append(
            f"| {q['threshold']} | {q['banding']} | {q['bands_rows'][0]} x {q['bands_rows'][1]} | {q['removed']} "
            f"| {q['true_removed']} | {q['precision']:.3f} | {q['recall']:.3f} "
            f"| {'-' if above is None else f'{above:.3f}'} | {'-' if below is None else f'{below:.3f}'} |")
    lines += ["", "| kind (threshold 0.8, default banding) | pairs | exact Jaccard | merged |", "|---|---:|---|---:|"]
    default_08 = next((q for q in report["quality"] if q["threshold"] == 0.8 and q["banding"].startswith("recall")),
                      None)
    if default_08:
        for kind, entry in default_08["by_kind"].items():
            lines.append(f"| {kind} | {entry['pairs']} | {entry['jaccard_min']:.3f}-{entry['jaccard_max']:.3f} "
                         f"| {entry['merged']} |")
    speed = report["speed"]
    lines += ["", f"| path ({speed['documents']} docs, max_rounds 16) | docs/s |", "|---|---:|"]
    for label, value in speed.items():
        if isinstance(value, dict) and "seconds" in value:
            lines.append(f"| {label} ({value['seconds']} s wall incl. startup, equals reference: "
                         f"{value['equals_reference']}) | {value['docs_per_s']} |")
        elif isinstance(value, float):
            lines.append(f"| {label} | {value} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
