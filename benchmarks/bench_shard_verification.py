"""Benchmark: what checking every input shard's size and SHA-256 costs `c4prep tokenize` (target: < 5%).

`tokenize` reads each document shard once; the check hashes the same memory map the table is parsed from. This
script times `run_tokenize` on PTB train replicated as document shards, with the check (as shipped) or with
`c4prep.shards.check_bytes` replaced by a no-op (``--no-verify``), and reports the bare hashing time of the input.
Compare the two whole processes side by side with farm-bench:

    python benchmarks/bench_shard_verification.py prepare --workdir /tmp/verify-bench [--copies 8]
    farm-bench -n 5 --timeout 900 \\
        --vs 'python benchmarks/bench_shard_verification.py tokenize --workdir /tmp/verify-bench --no-verify' \\
        -- python benchmarks/bench_shard_verification.py tokenize --workdir /tmp/verify-bench

Each `tokenize` run prints one JSON line: wall seconds of `run_tokenize`, input bytes, hashing seconds.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from c4prep import shards
from c4prep.manifest import read_manifest
from c4prep.tokenization.run_tokenize import TokenizeConfig, run_tokenize
from c4prep.tokenization.train_vocab import VocabConfig, train_vocabulary
from document_shards import write_document_shards

PTB_TRAIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "ptb" / "train.txt"


def prepare(workdir: Path, copies: int) -> None:
    """PTB train, `copies` times, as 4 document shards (20 lines a document), and an 8,000-piece vocabulary."""
    lines = PTB_TRAIN.read_text(encoding="utf-8").splitlines()
    texts = ["\n".join(lines[i:i + 20]) for i in range(0, len(lines), 20)]
    write_document_shards({"train": texts * copies}, workdir / "documents", 4, "ptb://train", {"ptb_copies": copies})
    train_vocabulary(VocabConfig(inputs=[str(workdir / "documents")], output=str(workdir / "vocab"),
                                 vocab_size=8000))


def hashing_seconds(documents: Path) -> tuple[int, float]:
    """(input bytes, seconds to check every listed shard's bytes against its manifest entry)."""
    manifest = read_manifest(str(documents))
    started = time.perf_counter()
    for shard in manifest.shards:
        uri = manifest.shard_uri(str(documents), shard)
        shards.check_bytes(uri, shards.shard_bytes(uri), shard.num_bytes, shard.sha256)
    return sum(shard.num_bytes for shard in manifest.shards), time.perf_counter() - started


def tokenize(workdir: Path, verify: bool) -> dict:
    if not verify:
        shards.check_bytes = lambda *args: None
    started = time.perf_counter()
    run_tokenize(TokenizeConfig(input=str(workdir / "documents"), vocab=str(workdir / "vocab"),
                                output=str(workdir / ("tokens" if verify else "tokens-unverified"))))
    seconds = time.perf_counter() - started
    input_bytes, hashing = hashing_seconds(workdir / "documents") if verify else (None, None)
    return {"verify": verify, "tokenize_seconds": round(seconds, 3), "input_bytes": input_bytes,
            "hashing_seconds": None if hashing is None else round(hashing, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["prepare", "tokenize"])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=8, help="PTB train copies (about 5 MB of text each)")
    parser.add_argument("--no-verify", action="store_true", help="skip the size and SHA-256 check (baseline)")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(args.workdir, args.copies)
    else:
        print(json.dumps(tokenize(args.workdir, verify=not args.no_verify)))


if __name__ == "__main__":
    main()
