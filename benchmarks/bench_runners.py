"""Benchmark: the default `c4prep run` (variant `en`, sentence dedup) on one input, in memory in one process and on
distributed runners with 2 workers, each against the in-memory rate measured in the same invocation.

Input: FILES gzipped WET files of the real CC-MAIN-2019-30 sample (335 pages), COPIES URL-distinct copies per file
(`bench_c4_pipeline.replicate_sample`), so each worker reads its own files. Each copy's lines are kept, edited or
dropped as `bench_dedup_scale.py` replicates pages (the issue's setting: the text dedup keeps about half of every
page, as on a real crawl); `--exact-copies` writes exact copies instead (the input of the RESULTS tables before the
eighth session: the text dedup then keeps only the first copy's text, and the later stages see almost nothing).
Runs, in this order, repeated ROUNDS times (A B C A B C ...):
  - `in_memory`: the DirectRunner in one process (the single-process rate every other run is compared with);
  - `multi_processing`: the DirectRunner with `--direct_num_workers=WORKERS` SDK worker processes;
  - `dask`: Beam's DaskRunner against a local Dask cluster of WORKERS processes x 1 thread (`--dask-memory-limit`
    each), started by this script before the timed run and closed after it, one partition per input file.
Every run gets each file as its own `--input`.
Each run is a fresh `c4prep run` process, timed from its start to its exit (Beam start-up included). A run's rate per
core is raw pages/s divided by its workers (1 in memory): the issue's "per core". CPU seconds are the process
tree's (and the Dask workers'); peak memory is the largest process the driver waited for (`ru_maxrss`) and each
worker's `VmHWM`. Every run's shards must hold the
same rows as the in-memory run's; the script exits 1 if not.

    python benchmarks/bench_runners.py --files 30 --copies 10            # 100,500 pages
    python benchmarks/bench_runners.py --files 4 --copies 10 --runs in_memory multi_processing
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from bench_c4_pipeline import replicate_sample
from bench_dedup_scale import WorkerMemory, vm_hwm_mib
from c4prep.shard_formats import read_table

RUNS = ("in_memory", "multi_processing", "dask", "dask_disk")
# Each run starts from the environment this script started with: starting a Dask LocalCluster leaves its worker
# settings (MALLOC_TRIM_THRESHOLD_=65536, OMP_NUM_THREADS=1, ...) in this process's environment, and every later
# `c4prep run` inherited them (a multi_processing run after a Dask run: 42.9 s and 25 % less memory, against 37.4 s).
RUN_ENVIRONMENT = dict(os.environ)


def write_input(folder: Path, files: int, copies: int, perturb: bool) -> int:
    """`files` WET files of `copies` URL-distinct copies each (perturbed or exact); the raw page count."""
    return sum(replicate_sample(copies, folder / f"part-{index:03d}.warc.wet.gz", first_copy=copies * index,
                                perturb=perturb)
               for index in range(files))


def shard_rows(output: Path) -> pa.Table:
    """Every row the run published, in shard order."""
    tables = [read_table(pa.memory_map(path).read_buffer(), "arrow")
              for path in sorted(glob.glob(str(output / "data-*" / "*.arrow")))]
    return pa.concat_tables(tables)


def per_round(in_memory_walls: list[float], walls: list[float], workers: int) -> str:
    """Per core against the in-memory run of the same round, for each round: runs of one round are close in time,
    so these hold where the machine's speed drifts between rounds (the medians mix rounds)."""
    return ", ".join(f"{single / (workers * wall):.1%}" for single, wall in zip(in_memory_walls, walls))


def run_once(kind: str, inputs: list[str], output: Path, workers: int, dask_memory_limit: str) -> dict:
    """One timed `c4prep run` of `kind`; wall and CPU seconds of the whole process tree."""
    command = [sys.executable, "-m", "c4prep", "run", *(f"--input={path}" for path in inputs), "--output",
               str(output), "--num-shards", "1"]
    cluster = None
    if kind == "multi_processing":
        command += ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    elif kind in ("dask", "dask_disk"):
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               memory_limit=dask_memory_limit, dashboard_address=None)
        # one Dask partition per input file: Beam's DaskRunner makes its partitions from the `Create` of the patterns
        command += ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}",
                    f"--dask_npartitions={len(inputs)}", f"--dask_shuffle={'disk' if kind == 'dask_disk' else 'tasks'}"]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as log, WorkerMemory() as sdk_workers:
        process = subprocess.Popen(command, stdout=log, stderr=log, env=RUN_ENVIRONMENT)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        log.seek(0)
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{kind} failed:\n{log.read()[-3000:].decode(errors='replace')}")
    cpu, worker_peaks = usage.ru_utime + usage.ru_stime, list(sdk_workers.peaks.values())
    if cluster is not None:
        from distributed import Client

        with Client(cluster) as client:
            cpu += sum(client.run(lambda: sum(os.times()[:2])).values())
            worker_peaks = list(client.run(vm_hwm_mib).values())
        cluster.close()
    return {"run": kind, "workers": 1 if kind == "in_memory" else workers, "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 1), "driver_peak_mib": round(usage.ru_maxrss / 1024),
            "worker_peak_mib": sorted(round(peak) for peak in worker_peaks)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--copies", type=int, default=10, help="copies of the 335-page sample per file")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--dask-memory-limit", default="4GiB")
    parser.add_argument("--workdir", help="keep inputs and outputs here (default: a temporary folder)")
    parser.add_argument("--exact-copies", action="store_true", help="exact copies of the sample, not perturbed ones")
    args = parser.parse_args(argv)
    if "in_memory" not in args.runs:
        parser.error("--runs must include in_memory: every rate is compared with it")

    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(args.workdir or scratch)
        (workdir / "input").mkdir(parents=True, exist_ok=True)
        pages = write_input(workdir / "input", args.files, args.copies, perturb=not args.exact_copies)
        inputs = sorted(glob.glob(str(workdir / "input" / "*.warc.wet.gz")))
        reports, reference, same = [], None, True
        for round_number in range(args.rounds):
            for kind in args.runs:
                output = workdir / f"out-{kind}-{round_number}"
                report = run_once(kind, inputs, output, args.workers, args.dask_memory_limit)
                rows = shard_rows(output)
                reference = rows if reference is None else reference
                report["rows"] = rows.num_rows
                report["same_rows_as_in_memory"] = rows.equals(reference)
                same &= report["same_rows_as_in_memory"]
                reports.append(report)
                print(json.dumps(report), flush=True)

    input_kind = "exact copies" if args.exact_copies else "perturbed copies"
    print(f"\n{pages:,} raw pages ({input_kind}) in {args.files} files, {reference.num_rows:,} rows kept; "
          f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; load average at end {os.getloadavg()}\n")
    print("| run | workers | wall s, median (min-max) | CPU s | raw pages/s | per core | per core vs in memory | "
          "per round | peak MiB: driver / each worker |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    walls = {kind: [r["wall_s"] for r in reports if r["run"] == kind] for kind in args.runs}
    single = pages / statistics.median(walls["in_memory"])
    for kind in args.runs:
        runs = [r for r in reports if r["run"] == kind]
        wall = statistics.median(walls[kind])
        rate = pages / wall
        per_core = rate / runs[0]["workers"]
        print(f"| {kind} | {runs[0]['workers']} | {wall:.1f} ({min(walls[kind]):.1f}-{max(walls[kind]):.1f}) | "
              f"{statistics.median(r['cpu_s'] for r in runs):.1f} | {rate:,.0f} | {per_core:,.0f} | "
              f"{per_core / single:.0%} | {per_round(walls['in_memory'], walls[kind], runs[0]['workers'])} | "
              f"{max(r['driver_peak_mib'] for r in runs)} / "
              f"{' / '.join(map(str, runs[-1]['worker_peak_mib'])) or '-'} |")
    if not same:
        print("SHARDS DIFFER from the in-memory run's")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
