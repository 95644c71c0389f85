"""Benchmark: what checking a big gzip member before reading it costs `c4prep run`.

The gzip reader passes on a member's bytes only once its CRC has checked out; a member that decompresses to more
than `MAX_HELD_BYTES` (32 MiB), such as a released C4 `.json.gz` (one member), is checked first by decompressing it
in a second read of the file. This script writes the real 500 released-C4 documents repeated to `--mib` MiB (each copy
with its own URLs) as one gzip member, then times whole `run_c4` jobs (DirectRunner in memory, `en` variant) on it, alternating: as shipped,
and with the member held in memory until its CRC instead of checked first (no bound on memory: what the check
saves). It also times the bare decompression pass that the check adds.

    python benchmarks/bench_gzip_member_check.py [--mib 50] [--rounds 3]

Prints one JSON line: median seconds of each, their ratio, and the decompression pass.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
import zlib
from pathlib import Path

from c4prep.pipelines import gzip_members
from c4prep.pipelines.run_c4 import RunConfig, run_c4

RELEASED_C4 = Path(__file__).resolve().parents[2] / "shared" / "data" / "webdata" / "c4-en-train-00000-first500.jsonl"
UNBOUNDED = 1 << 62


def write_one_member(path: Path, mib: int) -> int:
    """The released C4 sample repeated to about `mib` MiB, each copy's URLs made its own (so that URL dedup keeps
    them and every page goes through the rules), gzipped as one member; returns the document count."""
    documents = [json.loads(line) for line in RELEASED_C4.read_text(encoding="utf-8").splitlines()]
    copies = mib * 2**20 // RELEASED_C4.stat().st_size + 1
    text = "".join(json.dumps({**document, "url": f"{document['url']}?copy={copy}"}) + "\n"
                   for copy in range(copies) for document in documents)
    path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0))
    return copies * len(documents)


def decompression_seconds(path: Path) -> float:
    """One streaming decompression pass over the file, output discarded, as the check does."""
    data, started = path.read_bytes(), time.perf_counter()
    member, offset = zlib.decompressobj(16 + zlib.MAX_WBITS), 0
    while not member.eof:
        piece = member.unconsumed_tail or data[offset:offset + 65536]
        offset += 0 if member.unconsumed_tail else 65536
        member.decompress(piece, 65536)
    return time.perf_counter() - started


def run_seconds(path: Path, output: Path, max_held: int) -> float:
    """Wall seconds of one whole `run_c4` on `path`, gzip members held up to `max_held` bytes."""
    defaults = gzip_members.GzipSource.__init__.__defaults__
    gzip_members.GzipSource.__init__.__defaults__ = (max_held,)
    try:
        started = time.perf_counter()
        run_c4(RunConfig(output=str(output), inputs=[str(path)], num_shards=1))
        return time.perf_counter() - started
    finally:
        gzip_members.GzipSource.__init__.__defaults__ = defaults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=50, help="decompressed size of the one-member input")
    parser.add_argument("--rounds", type=int, default=3, help="alternating pairs of runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        path = Path(workdir) / "one-member.jsonl.gz"
        documents = write_one_member(path, args.mib)
        checked, held = [], []
        for round_ in range(args.rounds):
            checked.append(run_seconds(path, Path(workdir) / f"checked-{round_}", gzip_members.MAX_HELD_BYTES))
            held.append(run_seconds(path, Path(workdir) / f"held-{round_}", UNBOUNDED))
        print(json.dumps({
            "input_mib": args.mib, "documents": documents, "rounds": args.rounds,
            "checked_first_s": round(statistics.median(checked), 2), "held_s": round(statistics.median(held), 2),
            "ratio_per_round": [round(c / h, 3) for c, h in zip(checked, held)],
            "decompression_pass_s": round(min(decompression_seconds(path) for _ in range(3)), 2),
        }))


if __name__ == "__main__":
    main()
