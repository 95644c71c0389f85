"""Benchmark: line dedup (`DedupLines`) on the DirectRunner with one line shared by every page (a hot key).

Input, built on the workers from `beam.Create(range(N))` so the driver never holds (or pickles) the pages:
page i has URL `https://site{i % 1000}.example/post/{i}` and four lines, each one Punkt sentence:

    Post {i} opens with its own sentence.
    <line 2>
    Post {i} has a second line of its own.
    Post {i} ends with a third line.

- variant `hot`: line 2 is the same on every page ("Subscribe to our newsletter for the latest updates."), so one
  line key has a fan-out of N pages;
- variant `control`: line 2 is unique to the page ("Post {i} carries a line of its own here."), same line count and
  similar sizes, so every key has a fan-out of 1.

Each (N, variant) runs in a fresh Python process (so `ru_maxrss` is that run's own peak) and reports the wall time
of `pipeline.run()` and the peak RSS from `resource.getrusage(RUSAGE_SELF)`, before (imports + graph built) and
after the run, and checks the result (every page kept; the hot line survives in exactly one page: N-1 global
duplicates). If the hot key's fan-out cost memory, `hot` would sit above `control` at the same N and the gap would
grow with N; the ownership combiner keeps one claim per key, so it does not.

    python benchmarks/bench_dedup_hot_key.py                       # N = 10,000 and 100,000, both variants
    python benchmarks/bench_dedup_hot_key.py --pages 100000 --variants hot
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

from harness import peak_rss_mib

HOT_LINE = "Subscribe to our newsletter for the latest updates."
NAMESPACE = "bench-hot-key"


def build_page(index: int, variant: str):
    from c4prep.pipelines.records import Page

    middle = HOT_LINE if variant == "hot" else f"Post {index} carries a line of its own here."
    url = f"https://site{index % 1000}.example/post/{index}"
    text = (
        f"Post {index} opens with its own sentence.\n{middle}\n"
        f"Post {index} has a second line of its own.\nPost {index} ends with a third line."
    )
    return Page(url=url, normalized_url=url.split("://", 1)[1], text=text, timestamp="2019-07-17T12:34:56Z",
                content_type="text/plain", content_length=len(text.encode("utf-8")))


def run_one(pages: int, variant: str, runner_flags: list[str]) -> dict:
    """One measured run in this process."""
    import apache_beam as beam
    from apache_beam.metrics import Metrics
    from apache_beam.options.pipeline_options import PipelineOptions

    from c4prep.runner_results import collect_counters
    from c4prep.pipelines.beam_dedup import DedupLines

    pages_out = Metrics.counter(NAMESPACE, "pages-out")
    hot_kept = Metrics.counter(NAMESPACE, "pages-out-with-hot-line")

    def count(page):
        pages_out.inc()
        if HOT_LINE in page.text:
            hot_kept.inc()

    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=DirectRunner", *runner_flags]))
    (
        pipeline
        | "Indices" >> beam.Create(range(pages), reshuffle=False)
        | "BuildPages" >> beam.Map(build_page, variant=variant)
        | "DedupLines" >> DedupLines()
        | "Count" >> beam.Map(count)
    )
    rss_before = peak_rss_mib()
    start = time.perf_counter()
    result = pipeline.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - start
    counters = {f"{namespace}/{name}": value
                for namespace, names in collect_counters(result).items() for name, value in names.items()}
    report = {
        "pages": pages,
        "variant": variant,
        "seconds": round(seconds, 2),
        "pages_per_second": round(pages / seconds),
        "peak_rss_mib_before_run": round(rss_before, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "counters": counters,
    }
    expected_hot = 1 if variant == "hot" else 0
    duplicates = counters.get("dedupe-lines/line-filtered:global_duplicate", 0)
    report["correct"] = (
        counters.get(f"{NAMESPACE}/pages-out") == pages
        and counters.get(f"{NAMESPACE}/pages-out-with-hot-line", 0) == expected_hot
        and duplicates == (pages - 1 if variant == "hot" else 0)
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[10_000, 100_000], help="page counts N to run")
    parser.add_argument("--variants", nargs="+", choices=("hot", "control"), default=["hot", "control"])
    parser.add_argument("--runner-flag", action="append", default=[],
                        help="extra DirectRunner flag, e.g. --runner-flag=--direct_running_mode=in_memory")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:  # one measured run; the parent reads the JSON line
        print(json.dumps(run_one(args.pages[0], args.variants[0], args.runner_flag)), flush=True)
        return 0

    reports = []
    for pages in args.pages:
        for variant in args.variants:
            command = [sys.executable, os.path.abspath(__file__), "--child", "--pages", str(pages),
                       "--variants", variant, *(f"--runner-flag={flag}" for flag in args.runner_flag)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.stderr.write(done.stderr[-4000:])
                return done.returncode
            report = json.loads(done.stdout.strip().splitlines()[-1])
            reports.append(report)
            print(json.dumps(report), flush=True)

    print()
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"DirectRunner {' '.join(args.runner_flag) or '(default options)'}")
    print()
    print("| N pages | variant | wall s | pages/s | peak RSS MiB (before run) | peak RSS MiB | correct |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for r in reports:
        print(f"| {r['pages']:,} | {r['variant']} | {r['seconds']} | {r['pages_per_second']:,} | "
              f"{r['peak_rss_mib_before_run']} | {r['peak_rss_mib']} | {r['correct']} |")
    return 0 if all(r["correct"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
