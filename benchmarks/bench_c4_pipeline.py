"""Benchmark: raw pages/s per core of the C4 `en` pipeline, end to end and split by stage.

Input: the real CC-MAIN-2019-30 WET sample (335 pages) replicated COPIES times into one WET file; copy k gets
`#copy=k` appended to every URL, so URL dedup keeps every copy and each copy does all the work again.

    python benchmarks/bench_c4_pipeline.py [--copies 10] [--skip-reference-langdetect]

Prints a JSON report and a Markdown summary (paste into benchmarks/RESULTS.md).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from warcio.warcwriter import WARCWriter

from bench_dedup_scale import perturbed
from c4prep.pipelines import c4_rules
from c4prep.pipelines.beam_c4 import document_row, row_order_key
from c4prep.pipelines.readers import read_records
from c4prep.pipelines.records import RawRecord
from c4prep.pipelines.run_c4 import bundled_sample
from c4prep.schemas import DOCUMENT_SCHEMA
from c4prep.shards import batched, write_shard


def local_open(path: str):
    return open(path, "rb")


def replicate_sample(copies: int, destination: Path, first_copy: int = 0, perturb: bool = False) -> int:
    """Write `copies` URL-distinct copies of the sample (numbered from `first_copy`, so that several files hold
    distinct copies) as one gzipped WET file; returns the page count. Copies are exact, or with `perturb` each
    page's lines are kept, edited or dropped as `bench_dedup_scale.perturbed` does (the page's number in the whole
    replicated corpus picks them), so that the text dedup keeps about half of every copy instead of one copy."""
    records = [r for r in read_records(bundled_sample(), open_binary=local_open) if isinstance(r, RawRecord)]
    with open(destination, "wb") as handle:
        writer = WARCWriter(handle, gzip=True)
        for copy in range(first_copy, first_copy + copies):
            for number, record in enumerate(records):
                headers = [("WARC-Target-URI", f"{record.url}#copy={copy}"), ("WARC-Date", record.timestamp),
                           ("Content-Type", "text/plain")]
                body = perturbed(record.body, copy * len(records) + number) if perturb else record.body
                payload = body.encode("utf-8")
                writer.write_record(writer.create_warc_record(
                    f"{record.url}#copy={copy}", "conversion", payload=io.BytesIO(payload),
                    length=len(payload), warc_headers_dict=dict(headers)))
    return copies * len(records)


def time_stages(path: Path, workdir: Path) -> dict[str, float]:
    """Seconds per stage, running the pure functions in sequence on one core (no Beam)."""
    seconds: dict[str, float] = defaultdict(float)
    clock = time.perf_counter
    start = clock()
    records = [r for r in read_records(str(path), open_binary=local_open) if isinstance(r, RawRecord)]
    seconds["read (gunzip + WARC parse)"] = clock() - start
    c4_rules.check_english(c4_rules.parse_record(records[0]).page)  # load language profiles outside timing
    c4_rules.split_sentences("Warm up Punkt.")
    pages = []
    for record in records:
        start = clock()
        page = c4_rules.parse_record(record).page
        seconds["parse + validate"] += clock() - start
        start = clock()
        page = c4_rules.check_length(page).page
        seconds["length filter"] += clock() - start
        pages.append(page)
    start = clock()
    by_url: dict[str, list] = defaultdict(list)
    for page in pages:
        by_url[page.normalized_url].append(page)
    pages = [c4_rules.select_newest_page(group) for group in by_url.values()]
    seconds["URL dedup"] = clock() - start
    survivors = []
    for page in pages:
        for stage, rule in (("clean_page (incl. Punkt)", c4_rules.clean_page),
                            ("langdetect", c4_rules.check_english),
                            ("bad words", c4_rules.check_badwords)):
            start = clock()
            page = rule(page).page
            seconds[stage] += clock() - start
            if page is None:
                break
        else:
            survivors.append(page)
    start = clock()
    rows = sorted((document_row(page) for page in survivors), key=row_order_key)
    for page in survivors:
        c4_rules.split_for_url(page.normalized_url)
    write_shard(str(workdir / "bench-00000-of-00001.arrow"), DOCUMENT_SCHEMA, batched(rows, DOCUMENT_SCHEMA))
    seconds["split + sort + Arrow write"] = clock() - start
    return dict(seconds)


def _probabilities(engine, text: str) -> list[tuple[str, float]] | str:
    try:
        return [(language.lang, language.prob) for language in engine.detect_langs(text)]
    except engine.LangDetectException as error:
        return str(error)


def time_reference_langdetect(path: Path) -> dict[str, float]:
    """langdetect (pure Python, as TFDS) vs the langdetect-rs engine on the pages that reach language id."""
    import langdetect
    import langdetect_rs

    records = [r for r in read_records(str(path), open_binary=local_open) if isinstance(r, RawRecord)]
    texts = []
    for record in records[:1000]:
        page = c4_rules.clean_page(c4_rules.parse_record(record).page).page
        if page is not None:
            texts.append(page.text)
    timings = {}
    for name, engine in (("langdetect", langdetect), ("langdetect_rs", langdetect_rs)):
        engine.DetectorFactory.seed = 0
        engine.detect_langs("warm up the profiles")
        start = time.perf_counter()
        results = [_probabilities(engine, text) for text in texts]
        timings[name] = time.perf_counter() - start
        timings[f"{name}_results"] = results
    identical = timings.pop("langdetect_results") == timings.pop("langdetect_rs_results")
    return {"pages": len(texts), **timings, "identical": identical}


def time_end_to_end(path: Path, workdir: Path, beam_args: list[str]) -> float:
    """Wall seconds of `c4prep run` (a fresh process, Beam start-up included)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "c4prep", "run", "--input", str(path), "--output",
                    str(workdir / f"out-{len(beam_args)}"), *beam_args], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--skip-reference-langdetect", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        wet = workdir / "replicated.warc.wet.gz"
        num_pages = replicate_sample(args.copies, wet)
        stages = time_stages(wet, workdir)
        runs = {
            "DirectRunner in_memory, 1 worker": ([], 1),
            "DirectRunner multi_processing, 2 workers":
                (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], 2),
        }
        end_to_end = {}
        for name, (beam_args, cores) in runs.items():
            wall = time_end_to_end(wet, workdir, beam_args)
            end_to_end[name] = {"wall_s": wall, "cores": cores, "pages_per_s": num_pages / wall,
                                "pages_per_s_per_core": num_pages / wall / cores}
        reference = None if args.skip_reference_langdetect else time_reference_langdetect(wet)
    total = sum(stages.values())
    report = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}", "raw_pages": num_pages,
        "stages_s": stages, "rules_only_pages_per_s_one_core": num_pages / total,
        "end_to_end": end_to_end, "langdetect_reference": reference,
    }
    print(json.dumps(report, indent=2))
    print("\n| stage | seconds | share |\n|---|---:|---:|")
    for stage, value in sorted(stages.items(), key=lambda item: -item[1]):
        print(f"| {stage} | {value:.3f} | {value / total:.1%} |")
    print(f"| **all stages, one core** | {total:.3f} | {num_pages / total:.0f} raw pages/s |")
    for name, run in end_to_end.items():
        print(f"\n{name}: {run['wall_s']:.2f} s wall, {run['pages_per_s']:.0f} pages/s, "
              f"{run['pages_per_s_per_core']:.0f} pages/s/core")
    if reference:
        ratio = reference["langdetect"] / reference["langdetect_rs"]
        print(f"\nlangdetect on {reference['pages']} cleaned pages: {reference['langdetect']:.2f} s; langdetect-rs "
              f"{reference['langdetect_rs']:.3f} s ({ratio:.1f}x); identical results: {reference['identical']}")


if __name__ == "__main__":
    main()
