"""Cost model: CPU-hours per million raw pages from our measured per-core throughput, beside the reference's figure.

    python benchmarks/cost_model.py [--dump-pages 2.65e9 2.9e9]

The rates are the rows of benchmarks/RESULTS.md ("C4 `en` pipeline throughput", measured 2026-11-21 on the 2-vCPU
CI VM with `python benchmarks/bench_c4_pipeline.py --copies 40`). The reference is the T5 README's ~335 CPU-days
for C4 `en` from one Common Crawl dump on Dataflow (WET download included). Prints a Markdown table.
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
    ("rules only, pure functions, 1 core (RESULTS: stage table)", 2029.0),
    ("`c4prep run`, DirectRunner in_memory, 1 worker, 13,400 pages", 1211.0),
    ("`c4prep run`, DirectRunner multi_processing, 2 workers, 13,400 pages", 436.0),
    ("first version of the rules: pure-Python langdetect as TFDS, Punkt on every line, 1 core", 218.0),
)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-pages", type=float, nargs="+", default=list(DEFAULT_DUMP_PAGES),
                        help="raw pages in one Common Crawl dump (one value or a low and a high)")
    args = parser.parse_args()
    print(cost_table(MEASURED_RATES, tuple(args.dump_pages)))


if __name__ == "__main__":
    main()
