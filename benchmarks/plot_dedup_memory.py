"""Figure: peak RSS of each Dask worker against the number of pages deduplicated, one line per (mode, shuffle), from
the JSON lines `bench_dedup_scale.py --runner dask` prints (one report per run; killed runs are left out).

    python benchmarks/plot_dedup_memory.py benchmarks/results/dask-disk-shuffle/*.jsonl \
        --output benchmarks/results/dask-disk-shuffle/worker_memory.png
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def read_reports(paths: list[Path]) -> list[dict]:
    """Every finished Dask run's report in `paths` (lines that start with '{' and have a worker peak)."""
    reports = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("{"):
                report = json.loads(line)
                if report.get("runner") == "dask" and report.get("worker_peak_rss_mib"):
                    reports.append(report)
    return reports


def series(reports: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """`mode, shuffle` -> sorted (pages, highest worker peak in MiB); the later report of a repeated size wins."""
    points: dict[str, dict[int, float]] = defaultdict(dict)
    for report in reports:
        label = f"{report['mode']}, {report.get('dask_shuffle', 'tasks')} shuffle"
        points[label][report["pages"]] = max(report["worker_peak_rss_mib"])
    return {label: sorted(by_pages.items()) for label, by_pages in sorted(points.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--limit-mib", type=float, default=2048, help="the workers' memory limit, drawn as a line")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for label, points in series(read_reports(args.reports)).items():
        pages, peaks = zip(*points)
        axes.plot(pages, peaks, marker="o", label=label)
    axes.axhline(args.limit_mib, color="grey", linestyle="--", label="worker memory limit")
    axes.set_xscale("log")
    axes.set_xlabel("pages deduplicated")
    axes.set_ylabel("peak RSS of a worker (MiB)")
    axes.set_ylim(0, args.limit_mib * 1.1)
    axes.set_title("Text dedup on Beam's DaskRunner, 2 workers x 2 GiB")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
