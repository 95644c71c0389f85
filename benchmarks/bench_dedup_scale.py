"""Benchmark: text dedup (`DedupLines`, `DedupSentences`) at 10k, 100k and 1M pages with 2 worker processes, on
the DirectRunner or on Dask: wall time, and peak memory of the driver process and of each worker process.

Pages are the 500 released C4 documents (`../shared/data/webdata/c4-en-train-00000-first500.jsonl`), replicated
and perturbed. Page i copies document ``i % 500`` as replica ``r = i // 500`` with URL ``<url>?replica=<r>``;
each line of the document is, by a hash of ``(i, line number)``:
  - kept verbatim (50%): the same line in every replica of that document, a duplicate for dedup to remove;
  - edited (40%): every 7th word, from a hashed offset, becomes a token unique to the page, so every sentence of
    the line is new;
  - dropped (10%).
The pages are built on the workers from ``Create`` over chunk starts, so the driver never holds them, and the
output is counted and discarded (no writer), so the figures are the dedup's own.

Memory: with ``--direct_running_mode=multi_processing`` the runner process holds the shuffled data (the role of
Dataflow's shuffle service) and the SDK workers run the DoFns and the combiner on bundles. The SDK workers' peak
RSS (``VmHWM``, polled every 0.2 s) is the per-worker memory; the runner's is reported beside it.

With ``--runner dask`` the job runs on Beam's DaskRunner against a local Dask cluster of 2 worker processes
with one thread each and ``--dask-memory-limit`` each, through `c4prep.dask_runs` (c4prep's workarounds applied).
Every Dask partition holds one chunk of 1,000 pages (``--dask_npartitions`` = chunks), and the shuffles keep that
partition count, so no task sees more than a chunk's share of the data; Dask spills held results to disk past
60-70% of the limit (the role of Dataflow's shuffle service). Each worker's peak RSS (``VmHWM``) is read from the
worker at the end.

Mode ``shuffle`` keys the pages by URL and groups them (``GroupByKey``) without any dedup: the shuffle every
ownership dedup needs to join its decisions back to the pages, so its memory is the runner's own cost. The dedup
modes' memory above it is what the dedup adds.

Mode ``lines-in-place-packed`` is line dedup with the page text kept in place (`lines_in_place_packed`): only
hashes and ids cross its two shuffles, packed into numpy blocks (the claims per key bucket, then each key's owner to
the chunk its page came from), and each chunk's pages are built again to apply their owners. Same pages out and
counters as ``lines``. (Its unpacked sibling ``lines-in-place``, measured in the fourth session, sent one element per
key to the combiner `DedupLines` then had; it went when `DedupLines` began sending claim blocks itself.)

``--pages-per-worker K`` scales the DirectRunner out with the data instead (weak scaling): ``ceil(N / K)`` SDK worker
processes, so every worker's bundle holds about K pages whatever N, as a distributed runner's autoscaling keeps
each worker's share bounded. A transform that kept state growing with the corpus on a worker (a global side input,
a hot key's list of pages) would show here as worker memory growing with N.

Each (N, mode) runs in a fresh process. The dedup's integrity counters (claims and owners sent and received
between steps, `c4prep.beam_runs.INTEGRITY_NAMESPACE`) are checked after every run: a runner that lost data is
named in a ``RUNNER LOST DATA`` line and the benchmark exits with 1. ``--check`` also runs the in-memory reference
on the same pages and compares counters (only for small N: the reference holds every page).

    python benchmarks/bench_dedup_scale.py                                  # 10k and 100k, lines and sentences
    python benchmarks/bench_dedup_scale.py --pages 1000000 --modes lines
    python benchmarks/bench_dedup_scale.py --pages 10000 --check
    python benchmarks/bench_dedup_scale.py --pages 10000 50000 100000 --pages-per-worker 5000
    python benchmarks/bench_dedup_scale.py --runner dask --pages 10000 100000 1000000 --modes shuffle lines
    python benchmarks/bench_dedup_scale.py --runner dask --pages 100000 300000 --modes lines sentences \
        --dask-memory-limit 2GiB --dask-memory-fractions 0.5 0.9 0.95 --run-timeout 900

``--dask-memory-fractions`` sets Dask's worker thresholds (target, spill, pause; Dask's defaults are 0.6, 0.7,
0.8 of the limit) and ``--run-timeout`` kills a run that has not finished, so a stall is reported, not waited for.
``--dask-shuffle disk`` runs the job with ``--dask_shuffle=disk`` (`c4prep.dask_shuffle`; default: Dask's task
shuffle) and ``--dask-partitions P`` puts the chunk starts in P partitions instead of one per chunk.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

from harness import cpu_seconds, peak_rss_mib

C4_DOCUMENTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "webdata" / "c4-en-train-00000-first500.jsonl"
CHUNK = 1000
KEEP, EDIT = 0.5, 0.4  # the rest of the lines is dropped
EDIT_EVERY = 7
NAMESPACE = "bench-dedup-scale"


_POOL: list[tuple[str, str, str]] = []


def documents() -> list[tuple[str, str, str]]:
    """``(url, text, timestamp)`` of the released C4 documents, read once per process (a plain global: functions
    of this script reach the Beam workers pickled by value, which an ``lru_cache`` wrapper cannot be)."""
    if not _POOL:
        rows = [json.loads(line) for line in C4_DOCUMENTS.read_text(encoding="utf-8").splitlines()]
        _POOL.extend((row["url"], row["text"], row["timestamp"]) for row in rows)
    return _POOL


def unit_hash(*parts: object) -> float:
    """A deterministic number in [0, 1) for ``parts``."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def edited(line: str, index: int, number: int) -> str:
    """``line`` with every ``EDIT_EVERY``-th word, from a hashed offset, replaced by a token unique to the page."""
    words = line.split(" ")
    offset = int(unit_hash("offset", index, number) * EDIT_EVERY)
    for position in range(offset, len(words), EDIT_EVERY):
        words[position] = f"w{index}x{position}"
    return " ".join(words)


def perturbed(text: str, index: int) -> str:
    """``text`` as page ``index`` of a replicated corpus has it: each line kept verbatim, edited or dropped by a hash
    of ``(index, line number)`` (see the module docstring)."""
    lines = []
    for number, line in enumerate(text.split("\n")):
        draw = unit_hash(index, number)
        if draw < KEEP:
            lines.append(line)
        elif draw < KEEP + EDIT:
            lines.append(edited(line, index, number))
    return "\n".join(lines)


def scale_page(index: int):
    """Page ``index`` of the scaled corpus (see the module docstring)."""
    from c4prep.pipelines.records import Page

    pool = documents()
    url, text, timestamp = pool[index % len(pool)]
    page_text = perturbed(text, index)
    page_url = f"{url}?replica={index // len(pool)}"
    return Page(url=page_url, normalized_url=re.sub(r"^https?://", "", page_url), text=page_text,
                timestamp=timestamp, content_type="text/plain", content_length=len(page_text.encode("utf-8")))


def chunk_pages(start: int, pages: int):
    for index in range(start, min(start + CHUNK, pages)):
        yield scale_page(index)


def vm_hwm_mib(pid: int | str = "self") -> float:
    """Peak RSS (``VmHWM``) of process ``pid`` (this one by default) in MiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


class WorkerMemory:
    """Peak RSS (VmHWM, MiB) of each Beam SDK worker process under this one, polled in a thread."""

    def __init__(self, interval: float = 0.2) -> None:
        self.peaks: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(interval,), daemon=True)

    @staticmethod
    def _sdk_workers() -> list[int]:
        """Descendant Python processes running a Beam SDK worker (each sits under a ``/bin/sh -c`` launcher)."""
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                        parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        descendants, frontier = set(), {os.getpid()}
        while frontier:
            frontier = {pid for pid, parent in parents.items() if parent in frontier} - descendants
            descendants |= frontier
        workers = []
        for pid in descendants:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    argv = cmdline.read().split(b"\0")
                if b"python" in os.path.basename(argv[0]) and any(arg.endswith(b"sdk_worker_main") for arg in argv):
                    workers.append(pid)
            except OSError:
                continue
        return workers

    def _poll(self, interval: float) -> None:
        while not self._stop.wait(interval):
            for pid in self._sdk_workers():
                try:
                    peak = vm_hwm_mib(pid)
                except (OSError, StopIteration):  # the worker exited between listing and reading
                    continue
                self.peaks[pid] = max(self.peaks.get(pid, 0.0), peak)

    def __enter__(self) -> "WorkerMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def count_pages():
    """Counts the pages that reach it (``pages-out``) and emits nothing."""
    import apache_beam as beam

    from c4prep.beam_runs import CounterCache

    class CountPages(beam.DoFn):
        def setup(self) -> None:
            self.counters = CounterCache(NAMESPACE)

        def process(self, page):
            self.counters.inc("pages-out")
            return ()

    return beam.ParDo(CountPages())


def shuffle_only():
    """Pages keyed by URL through a ``GroupByKey`` and back out: the runner's shuffle alone."""
    import apache_beam as beam

    return (beam.Map(lambda page: (page.url, page)) | beam.GroupByKey()
            | beam.FlatMap(lambda url_pages: url_pages[1]))


def apply_owners(pages: int, owned_rows):
    """ParDo: `(chunk start, owner groups)` -> the chunk's pages built again, each after `dedup.remove_unowned_lines`
    with the keys it owns (counters in namespace `dedupe-lines`). `owned_rows(groups)` yields `(page id, key,
    occurrence)` rows."""
    import apache_beam as beam

    from c4prep.beam_runs import CounterCache
    from c4prep.pipelines import dedup

    class ApplyOwners(beam.DoFn):
        def setup(self) -> None:
            self.counters = CounterCache(dedup.LINES_NAMESPACE)

        def process(self, chunk_groups):
            start, groups = chunk_groups
            owned: dict[bytes, dict[bytes, int]] = {}
            for page_id, key, occurrence in owned_rows(groups):
                owned.setdefault(page_id, {})[key] = occurrence
            for page in chunk_pages(start, pages):
                outcome = dedup.remove_unowned_lines(page, owned.get(dedup.page_id(page), {}))
                for name, value in outcome.counters.items():
                    self.counters.inc(name, value)
                if outcome.page is not None:
                    yield outcome.page

    return beam.ParDo(ApplyOwners())


BUCKETS = 64  # key buckets of lines-in-place-packed: its claim shuffle carries chunks x BUCKETS blocks


def _as_words(digests: list[bytes]):
    """16-byte digests as an [n, 2] array of their big-endian 64-bit halves (which order as the digests do)."""
    import numpy as np

    return np.frombuffer(b"".join(digests), dtype=">u8").reshape(-1, 2).astype(np.uint64)


def _digest(words) -> bytes:
    return int(words[0]).to_bytes(8, "big") + int(words[1]).to_bytes(8, "big")


def _first_per_key(keys, pages, occurrences, chunks):
    """Rows sorted by (key, page, occurrence), the first of each key kept: the smallest claim per key."""
    import numpy as np

    order = np.lexsort((occurrences, pages[:, 1], pages[:, 0], keys[:, 1], keys[:, 0]))
    keys, pages, occurrences, chunks = keys[order], pages[order], occurrences[order], chunks[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = (keys[1:] != keys[:-1]).any(axis=1)
    return keys[first], pages[first], occurrences[first], chunks[first]


def lines_in_place_packed(pages: int):
    """Line dedup with the text kept in place and claims and owners packed into numpy blocks: each chunk sends one
    block of its smallest claims per key bucket, each bucket keeps the smallest claim per key and sends one block of
    owners per chunk, and each chunk's pages are built again and their owned lines applied."""
    import apache_beam as beam
    import numpy as np

    from c4prep.pipelines import dedup

    def claim_blocks(start: int):
        keys, page_ids, occurrences = [], [], []
        for page in chunk_pages(start, pages):
            for key, claim in dedup.line_claims(page):
                keys.append(key)
                page_ids.append(dedup.claim_page(claim))
                occurrences.append(dedup.claim_occurrence(claim))
        if not keys:
            return
        block = _first_per_key(_as_words(keys), _as_words(page_ids), np.array(occurrences, dtype=np.uint32),
                               np.full(len(keys), start, dtype=np.uint32))
        buckets = block[0][:, 1] % BUCKETS
        for bucket in np.unique(buckets):
            chosen = buckets == bucket
            yield int(bucket), tuple(column[chosen] for column in block)

    def owner_blocks(bucket_blocks):
        _, blocks = bucket_blocks
        keys, page_ids, occurrences, chunks = _first_per_key(*(np.concatenate(column) for column in zip(*blocks)))
        for chunk in np.unique(chunks):
            chosen = chunks == chunk
            yield int(chunk), (keys[chosen], page_ids[chosen], occurrences[chosen])

    def owner_rows(blocks):
        for keys, page_ids, occurrences in blocks:
            for key, page_id, occurrence in zip(keys, page_ids, occurrences):
                yield _digest(page_id), _digest(key), int(occurrence)

    return (beam.FlatMap(claim_blocks) | "ClaimsByBucket" >> beam.GroupByKey()
            | "OwnerBlocks" >> beam.FlatMap(owner_blocks) | "OwnersByChunk" >> beam.GroupByKey()
            | "ApplyOwners" >> apply_owners(pages, owner_rows))


def run_one(pages: int, mode: str, workers: int, check: bool, runner: str, dask_memory_limit: str,
            dask_memory_fractions: list[float] | None = None, dask_partitions: int | None = None,
            dask_shuffle: str = "tasks") -> dict:
    """One measured run in this process."""
    import apache_beam as beam

    from c4prep.beam_runs import job_pipeline, pipeline_options, run_to_completion
    from c4prep.pipelines import dedup
    from c4prep.pipelines.beam_dedup import DedupLines, DedupSentences
    from c4prep.pipelines.funnel import integrity_errors

    transform, namespace = {"lines": (DedupLines, dedup.LINES_NAMESPACE),
                            "sentences": (DedupSentences, dedup.SENTENCES_NAMESPACE),
                            "shuffle": (shuffle_only, NAMESPACE),
                            "lines-in-place-packed": (lambda: lines_in_place_packed(pages),
                                                      dedup.LINES_NAMESPACE)}[mode]
    cluster, partitions = None, dask_partitions or -(-pages // CHUNK)
    if runner == "dask":
        import dask
        from distributed import LocalCluster

        if dask_memory_fractions:  # the worker processes inherit this process's Dask configuration
            dask.config.set({f"distributed.worker.memory.{name}": fraction
                             for name, fraction in zip(("target", "spill", "pause"), dask_memory_fractions)})
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               memory_limit=dask_memory_limit, dashboard_address=None)
        options = pipeline_options("DaskRunner", [f"--dask_client_address={cluster.scheduler_address}",
                                                  f"--dask_npartitions={partitions}",
                                                  f"--dask_shuffle={dask_shuffle}"])
    else:
        options = pipeline_options("DirectRunner", ["--direct_running_mode=multi_processing",
                                                    f"--direct_num_workers={workers}"])
    with job_pipeline(options) as pipeline:
        starts = pipeline | "ChunkStarts" >> beam.Create(range(0, pages, CHUNK), reshuffle=False)
        if not mode.startswith("lines-in-place"):  # those build their pages from the chunk starts themselves, twice
            starts = starts | "BuildPages" >> beam.FlatMap(chunk_pages, pages=pages)
        _ = starts | "Dedup" >> transform() | "Count" >> count_pages()
        cpu = cpu_seconds()
        start = time.perf_counter()
        with WorkerMemory() if cluster is None else nullcontext() as memory:
            collected = run_to_completion(pipeline, options)
        seconds = time.perf_counter() - start
    if cluster is not None:
        from distributed import Client

        with Client(cluster) as client:
            worker_peaks = list(client.run(vm_hwm_mib).values())
        cluster.close()
    else:
        worker_peaks = list(memory.peaks.values())
    counters = {**collected.get(namespace, {}), **collected.get(NAMESPACE, {})}
    report = {
        "pages": pages, "mode": mode, "runner": runner, "workers": workers,
        **({"dask_memory_limit": dask_memory_limit, "dask_memory_fractions": dask_memory_fractions,
            "dask_partitions": partitions, "dask_shuffle": dask_shuffle}
           if runner == "dask" else {}),
        "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds() - cpu, 1),
        "pages_per_second": round(pages / seconds),
        "runner_peak_rss_mib": round(peak_rss_mib(), 1),
        "worker_peak_rss_mib": sorted(round(peak, 1) for peak in worker_peaks),
        "counters": counters,
        "integrity_errors": integrity_errors(collected),
    }
    if check and mode != "shuffle":
        reference = dedup.dedup_sentences_reference if mode == "sentences" else dedup.dedup_lines_reference
        kept, expected = reference(scale_page(i) for i in range(pages))
        beam_counters = {name: value for name, value in counters.items() if name != "pages-out"}
        report["matches_reference"] = beam_counters == expected and counters.get("pages-out") == len(kept)
    return report


def worker_memory(peaks: list[float]) -> str:
    """Every worker's peak for two or fewer, else min / median / max."""
    if len(peaks) <= 2:
        return " / ".join(map(str, peaks))
    return f"{min(peaks)} / {round(statistics.median(peaks), 1)} / {max(peaks)} (min / median / max)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--modes", nargs="+", choices=("lines", "sentences", "shuffle", "lines-in-place-packed"),
                        default=["lines", "sentences", "shuffle"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pages-per-worker", type=int,
                        help="DirectRunner: ceil(N / this) workers for N pages instead of --workers (weak scaling)")
    parser.add_argument("--check", action="store_true", help="compare counters with the in-memory reference")
    parser.add_argument("--runner", choices=("direct", "dask"), default="direct")
    parser.add_argument("--dask-memory-limit", default="1.5GiB", help="per Dask worker (it spills past 60-70%%)")
    parser.add_argument("--dask-memory-fractions", type=float, nargs=3, metavar=("TARGET", "SPILL", "PAUSE"),
                        help="Dask's worker memory thresholds (default 0.6 0.7 0.8 of the limit)")
    parser.add_argument("--dask-partitions", type=int,
                        help="Dask partitions of the chunk starts (default one per chunk of 1,000 pages)")
    # c4prep.dask_shuffle.SHUFFLES, not imported: that module needs Dask, which a DirectRunner run does not
    parser.add_argument("--dask-shuffle", choices=("tasks", "disk"), default="tasks",
                        help="how Dask groups (Beam's GroupByKey): in memory between tasks, or through local disk")
    parser.add_argument("--run-timeout", type=float, help="seconds; a run still going then is killed and reported")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        print(json.dumps(run_one(args.pages[0], args.modes[0], args.workers, args.check, args.runner,
                                 args.dask_memory_limit, args.dask_memory_fractions, args.dask_partitions,
                                 args.dask_shuffle)), flush=True)
        return 0

    if args.pages_per_worker is not None and (args.runner != "direct" or args.pages_per_worker < 1):
        parser.error("--pages-per-worker needs --runner direct and a positive count")
    reports = []
    for pages in args.pages:
        workers = -(-pages // args.pages_per_worker) if args.pages_per_worker else args.workers
        for mode in args.modes:
            command = [sys.executable, os.path.abspath(__file__), "--child", "--pages", str(pages), "--modes", mode,
                       "--workers", str(workers), "--runner", args.runner,
                       "--dask-memory-limit", args.dask_memory_limit, *(["--check"] if args.check else []),
                       *(["--dask-partitions", str(args.dask_partitions)] if args.dask_partitions else []),
                       "--dask-shuffle", args.dask_shuffle,
                       *(["--dask-memory-fractions", *map(str, args.dask_memory_fractions)]
                         if args.dask_memory_fractions else [])]
            try:
                done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=args.run_timeout)
            except subprocess.TimeoutExpired:
                reports.append({"pages": pages, "mode": mode, "workers": workers, "killed_after_s": args.run_timeout})
                print(json.dumps(reports[-1]), flush=True)
                continue
            if done.returncode:
                sys.stderr.write(done.stderr[-4000:])
                return done.returncode
            reports.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(reports[-1]), flush=True)

    direct_workers = (f"ceil(N / {args.pages_per_worker}) workers" if args.pages_per_worker
                      else f"{args.workers} workers")
    fractions = (f", memory target/spill/pause {'/'.join(map(str, args.dask_memory_fractions))}"
                 if args.dask_memory_fractions else "")
    engine = (f"DaskRunner, local cluster, {args.workers} workers x 1 thread, {args.dask_memory_limit} each{fractions}"
              if args.runner == "dask" else f"DirectRunner multi_processing, {direct_workers}")
    print(f"\nMachine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; {engine}; "
          f"load average at end {os.getloadavg()}\n")
    print("| N pages | mode | workers | wall s | CPU s | pages/s | runner peak RSS MiB | worker peak RSS MiB | "
          "pages out |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|")
    for r in reports:
        if "killed_after_s" in r:
            print(f"| {r['pages']:,} | {r['mode']} | {r['workers']} | "
                  f"killed after {r['killed_after_s']:g} s, unfinished | | | | | |")
            continue
        print(f"| {r['pages']:,} | {r['mode']} | {r['workers']} | {r['seconds']} | {r['cpu_seconds']} | "
              f"{r['pages_per_second']:,} | {r['runner_peak_rss_mib']} | {worker_memory(r['worker_peak_rss_mib'])} | "
              f"{r['counters'].get('pages-out', 0):,} |")
    for r in reports:
        for error in r.get("integrity_errors", []):
            print(f"RUNNER LOST DATA at {r['pages']:,} pages, {r['mode']}, {r['workers']} workers: {error}")
    finished = all("killed_after_s" not in r for r in reports)
    return 0 if finished and all(r.get("matches_reference", True) and not r["integrity_errors"] for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
