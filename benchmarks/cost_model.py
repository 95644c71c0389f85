"""Cost model: CPU-hours per million raw pages from our measured per-core throughput, beside the reference's figure,
and a projection of one whole dump on N distributed workers of this machine's size.

    python benchmarks/cost_model.py [--dump-pages 2.65e9 2.9e9] [--workers 10 100 1000]

The rates are rows of benchmarks/RESULTS.md, each with its date and command: the rules alone and the first version
("C4 `en` pipeline throughput", 2026-11-21, `bench_c4_pipeline.py --copies 40`), and the default `c4prep run`
(variant `en`, sentence dedup) in memory, on the DirectRunner with 2 worker processes and on Beam's DaskRunner with 2
workers, disk shuffle ("Dask, thirteenth session", 2026-11-27, two calls of `bench_runners.py --files 30 --copies 10
--runs in_memory multi_processing dask_disk --rounds 3`: perturbed copies, on which the text dedup keeps about half
of each page; the median wall of six rounds each, one day, so the three are comparable), and the task shuffle from
the eighth session's last table (not run since). The reference is the T5 README's ~335 CPU-days for C4 `en` from one
Common Crawl dump on Dataflow (WET download included). The projection scales out the Dask run. Prints Markdown tables.
"""
from __future__ import annotations

import argparse

SECONDS_PER_HOUR = 3600
HOURS_PER_DAY = 24
REFERENCE_CPU_DAYS = 335
# Pages per dump in Common Crawl's own announcements of the dumps around C4's April 2019 one (CC-MAIN-2019-18):
# August 2018 2.65 billion, February 2019 2.9 billion.
DEFAULT_DUMP_PAGES = (2.65e9, 2.9e9)
MEASURED_RATES = (  # (what was measured, raw pages/s per core)
    ("rules only, pure functions, 1 core (2026-11-21)", 2029.0),
    ("default `c4prep run`, DirectRunner in memory, 100,500 pages (2026-11-27, thirteenth session)", 1947.0),
    ("default `c4prep run`, DirectRunner multi_processing, 2 workers, 100,500 pages (thirteenth session)", 1390.0),
    ("default `c4prep run`, Beam's DaskRunner, 2 workers, task shuffle, 100,500 pages (eighth session)", 906.0),
    ("default `c4prep run`, Beam's DaskRunner, 2 workers, disk shuffle (the default), 100,500 pages (thirteenth "
     "session)", 1541.0),
    ("first version of the rules: pure-Python langdetect as TFDS, Punkt on every line, 1 core", 218.0),
)
# The distributed run the projection scales out (Beam's DaskRunner, disk shuffle): its per-core rate, the cores of
# one worker machine (this one), and the peak memory each of its 2 Dask worker processes reached in a run of 100,500
# pages (the driver reached 320 MiB; the shuffle is on disk).
DISTRIBUTED_RATE = 1541.0
CORES_PER_WORKER = 2
WORKER_PEAK_MIB = (349, 437)
DEFAULT_WORKERS = (10, 100, 1000)


def cpu_hours_per_million_pages(pages_per_second_per_core: float) -> float:
    """CPU-hours to process one million raw pages at a per-core rate."""
    return 1e6 / pages_per_second_per_core / SECONDS_PER_HOUR


def reference_cpu_hours_per_million_pages(cpu_days: float, dump_pages: float) -> float:
    """The reference's CPU-days for one dump, spread over the dump's raw pages."""
    return cpu_days * HOURS_PER_DAY / (dump_pages / 1e6)


def dump_cpu_days(cpu_hours_per_million: float, dump_pages: float) -> float:
    """CPU-days for a whole dump at a cost per million pages."""
    return cpu_hours_per_million * dump_pages / 1e6 / HOURS_PER_DAY


def cost_table(rates: tuple[tuple[str, float], ...], dump_pages: tuple[float, ...]) -> str:
    """Markdown: CPU-hours per million raw pages and CPU-days per dump, ours and the reference's."""
    low, high = min(dump_pages), max(dump_pages)
    span = f"{low / 1e9:g}-{high / 1e9:g} B pages"
    lines = ["| source | raw pages/s per core | CPU-h per million raw pages | CPU-days per dump "
             f"({span}) |", "|---|---:|---:|---:|"]
    for label, rate in rates:
        cost = cpu_hours_per_million_pages(rate)
        lines.append(f"| {label} | {rate:,.0f} | {cost:.3f} | "
                     f"{dump_cpu_days(cost, low):,.0f}-{dump_cpu_days(cost, high):,.0f} |")
    cheapest, dearest = (reference_cpu_hours_per_million_pages(REFERENCE_CPU_DAYS, pages) for pages in (high, low))
    lines.append(f"| reference: T5 README, C4 `en` on Dataflow, download included | "
                 f"{1e6 / dearest / SECONDS_PER_HOUR:,.0f}-{1e6 / cheapest / SECONDS_PER_HOUR:,.0f} (implied) "
                 f"| {cheapest:.2f}-{dearest:.2f} | {REFERENCE_CPU_DAYS} |")
    return "\n".join(lines)


def dump_hours(dump_pages: float, rate_per_core: float, workers: int, cores_per_worker: int) -> float:
    """Wall-clock hours for a dump on ``workers`` machines of ``cores_per_worker`` cores, each core at the rate."""
    return dump_pages / (rate_per_core * cores_per_worker * workers) / SECONDS_PER_HOUR


def projection_table(dump_pages: float, workers: tuple[int, ...]) -> str:
    """Markdown: one dump on N workers of this machine's size at the measured distributed rate."""
    cpu_hours = cpu_hours_per_million_pages(DISTRIBUTED_RATE) * dump_pages / 1e6
    lines = [f"One dump of {dump_pages / 1e9:g} B raw pages at {DISTRIBUTED_RATE:,.0f} raw pages/s per core "
             f"({cpu_hours:,.0f} CPU-hours, {cpu_hours / HOURS_PER_DAY:,.0f} CPU-days); workers of "
             f"{CORES_PER_WORKER} cores, each Dask worker process peaking at {max(WORKER_PEAK_MIB):,} MiB "
             "in a run of 100,500 pages (flat from 100k to 1M pages in the text dedup):", "",
             "| workers | cores | wall-clock hours | pages per worker |", "|---:|---:|---:|---:|"]
    for count in workers:
        lines.append(f"| {count:,} | {count * CORES_PER_WORKER:,} | "
                     f"{dump_hours(dump_pages, DISTRIBUTED_RATE, count, CORES_PER_WORKER):,.1f} | "
                     f"{dump_pages / count / 1e6:,.1f} M |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-pages", type=float, nargs="+", default=list(DEFAULT_DUMP_PAGES),
                        help="raw pages in one Common Crawl dump (one value or a low and a high)")
    parser.add_argument("--workers", type=int, nargs="+", default=list(DEFAULT_WORKERS),
                        help="worker machines of this size for the projection")
    args = parser.parse_args()
    print(cost_table(MEASURED_RATES, tuple(args.dump_pages)))
    print()
    print(projection_table(max(args.dump_pages), tuple(args.workers)))


if __name__ == "__main__":
    main()
