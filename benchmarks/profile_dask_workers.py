"""Where a Dask worker's time goes in the default `c4prep run`: Dask's own statistical profiler of the worker threads
(`Client.profile`, sampled every 10 ms) over one run, summed per function, inclusive and exclusive of callees.

Input as `bench_runners.py` (FILES WET files of COPIES URL-distinct copies of the real sample, perturbed unless
`--exact-copies`); a local cluster of 2 workers x 1 thread; the run goes through `run_c4`, as
`c4prep run --runner=DaskRunner` does.

    python benchmarks/profile_dask_workers.py --files 30 --copies 10 --dask-shuffle disk --top 25
"""
from __future__ import annotations

import argparse
import glob
import tempfile
from collections import Counter
from pathlib import Path

from bench_runners import write_input
from c4prep.dask_shuffle import SHUFFLES


def function_times(tree: dict) -> tuple[Counter, Counter, int]:
    """(inclusive samples, exclusive samples, total samples) per `file:line:function` of a Dask profile tree."""
    inclusive, exclusive = Counter(), Counter()

    def walk(node: dict, on_stack: frozenset) -> None:
        for child in node.get("children", {}).values():
            name = f"{child['description']['filename'].split('site-packages/')[-1]}:{child['description']['name']}"
            if name not in on_stack:  # a recursive call counts once
                inclusive[name] += child["count"]
            exclusive[name] += child["count"] - sum(grandchild["count"]
                                                    for grandchild in child.get("children", {}).values())
            walk(child, on_stack | {name})

    walk(tree, frozenset())
    return inclusive, exclusive, tree["count"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--dask-shuffle", choices=SHUFFLES, default="disk")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--exact-copies", action="store_true", help="exact copies of the sample, not perturbed ones")
    args = parser.parse_args(argv)

    from distributed import Client, LocalCluster

    from c4prep.pipelines.run_c4 import RunConfig, run_c4

    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "input").mkdir()
        pages = write_input(folder / "input", args.files, args.copies, perturb=not args.exact_copies)
        inputs = sorted(glob.glob(str(folder / "input" / "*.warc.wet.gz")))
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="4GiB",
                          dashboard_address=None) as cluster, Client(cluster) as client:
            run_c4(RunConfig(output=str(folder / "out"), inputs=inputs, num_shards=1, runner="DaskRunner"),
                   [f"--dask_client_address={cluster.scheduler_address}", f"--dask_shuffle={args.dask_shuffle}"])
            inclusive, exclusive, total = function_times(client.profile())
    print(f"{pages:,} pages, {args.files} files, --dask_shuffle={args.dask_shuffle}: {total:,} samples of the "
          "workers' threads\n")
    for title, counts in (("inclusive (with callees)", inclusive), ("exclusive (own code)", exclusive)):
        print(f"| {title} | % of samples |\n|---|---:|")
        for name, count in counts.most_common(args.top):
            print(f"| `{name}` | {100 * count / total:.1f} |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
