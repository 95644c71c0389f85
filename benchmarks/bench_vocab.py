"""Benchmark: `c4prep vocab` overhead over plain SentencePiece, and tokenization throughput in tokens/s.

(a) Vocabulary training on real text: PTB train (one document per 20 lines) and the C4 sample's document shards.
    `train_vocabulary` (read shards, sample, train, write files) against `SentencePieceTrainer.train` called
    directly on the same sampled sentences with the same options (target: overhead <= 10%).
(b) Tokenization with 2 cores on PTB train replicated COPIES times as document shards (~1.25M tokens per copy
    with the 8,000-piece PTB vocabulary): the pure batch-encode rate (also on the C4 sample with its own
    vocabulary), and `c4prep tokenize` end to end on the DirectRunner (in_memory with 2 encode threads, and
    multi_processing with 2 workers) (target: >= 3M tokens/s). CPU seconds are reported next to wall time, so
    that a machine shared with other work can still be read.

    python benchmarks/bench_vocab.py [--copies 18] [--repeats 3] [--ptb-vocab-size 8000]

Prints a JSON report and a Markdown summary.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import sentencepiece as spm

from c4prep.pipelines.run_c4 import RunConfig, bundled_sample, run_c4
from c4prep.shards import read_shard
from c4prep.tokenization.run_tokenize import TokenizeConfig, run_tokenize
from c4prep.tokenization.train_vocab import (
    VocabConfig,
    document_manifests,
    sample_sentences,
    train_vocabulary,
    trainer_options,
)
from c4prep.tokenization.vocabulary import SentencePieceVocabulary
from document_shards import write_document_shards
from harness import cpu_seconds

PTB_TRAIN = Path(__file__).resolve().parents[2] / "shared" / "data" / "ptb" / "train.txt"
LINES_PER_DOCUMENT = 20
T = TypeVar("T")


def timed(function: Callable[[], T]) -> tuple[T, float, float]:
    """``(result, wall seconds, CPU seconds)`` of calling ``function``."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = function()
    return result, time.perf_counter() - wall, cpu_seconds() - cpu


def write_ptb_documents(output: Path, copies: int, num_shards: int) -> int:
    """PTB train, `copies` times, as `train` document shards (20 lines per document); returns the document count."""
    lines = PTB_TRAIN.read_text(encoding="utf-8").splitlines()
    texts = ["\n".join(lines[i:i + LINES_PER_DOCUMENT]) for i in range(0, len(lines), LINES_PER_DOCUMENT)]
    return write_document_shards({"train": texts * copies}, output, num_shards, "ptb://train",
                                 {"ptb_copies": copies})


def bench_training(name: str, documents: Path, workdir: Path, vocab_size: int, repeats: int) -> dict:
    """Median seconds of `train_vocabulary` and of SentencePiece alone on the same sentences."""
    config = VocabConfig(inputs=[str(documents)], output=str(workdir / f"vocab-{name}"), vocab_size=vocab_size)
    sentences, _ = sample_sentences(config, document_manifests(config))
    options = trainer_options(config)

    def direct() -> None:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=io.BytesIO(), minloglevel=1,
                                       **options)

    runs: dict[str, list[float]] = {key: [] for key in ("ours", "ours_cpu", "direct", "direct_cpu", "sampling")}
    for _ in range(repeats):  # alternate, so load changes on the machine hit both sides alike
        result, wall, cpu = timed(lambda: train_vocabulary(config))
        runs["ours"].append(wall)
        runs["ours_cpu"].append(cpu)
        runs["sampling"].append(result.seconds_sampling)
        _, wall, cpu = timed(direct)
        runs["direct"].append(wall)
        runs["direct_cpu"].append(cpu)
    median = {key: statistics.median(values) for key, values in runs.items()}
    return {
        "corpus": name, "vocab_size": vocab_size, "num_threads": config.num_threads,
        "sentences_used": len(sentences),
        "c4prep_vocab_s": round(median["ours"], 3), "sentencepiece_direct_s": round(median["direct"], 3),
        "c4prep_sampling_s": round(median["sampling"], 3),
        "overhead_pct": round(100 * (median["ours"] / median["direct"] - 1), 1),
        "c4prep_vocab_cpu_s": round(median["ours_cpu"], 3),
        "sentencepiece_direct_cpu_s": round(median["direct_cpu"], 3),
        "overhead_cpu_pct": round(100 * (median["ours_cpu"] / median["direct_cpu"] - 1), 1),
        "runs_c4prep_s": [round(t, 3) for t in runs["ours"]], "runs_direct_s": [round(t, 3) for t in runs["direct"]],
    }


def rates(tokens: int, wall: float, cpu: float) -> dict:
    return {"tokens": tokens, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "tokens_per_s": round(tokens / wall), "tokens_per_cpu_s": round(tokens / cpu)}


def document_texts(documents: Path) -> list[str]:
    return [text for path in sorted(documents.glob("data-*/*.arrow")) for text in read_shard(str(path))["text"].to_pylist()]


def bench_encode(corpus: str, texts: list[str], model: Path, threads: int) -> dict:
    """Pure batch-encode rate (the pipeline's call, EOS included), texts already in memory, 1024 per call."""
    vocab = SentencePieceVocabulary(str(model))

    def encode_all() -> int:
        return sum(len(ids) for i in range(0, len(texts), 1024)
                   for ids in vocab.encode_arrays(texts[i:i + 1024], num_threads=threads, add_eos=True))

    tokens, wall, cpu = timed(encode_all)
    return {"corpus": corpus, "threads": threads, **rates(tokens, wall, cpu)}


def bench_tokenize(documents: Path, vocab: Path, output: Path, beam_args: list[str], threads: int) -> dict:
    """`c4prep tokenize` end to end (pipeline start, read, encode, write, commit)."""
    config = TokenizeConfig(input=str(documents), vocab=str(vocab), output=str(output), num_threads=threads)
    result, wall, cpu = timed(lambda: run_tokenize(config, beam_args))
    tokens = sum(result.counters["tokenize"][f"tokens:{split}"] for split in result.manifest.splits)
    return {"beam_args": beam_args, "encode_threads": threads, **rates(tokens, wall, cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=18, help="PTB train copies for throughput (~1.25M tokens each)")
    parser.add_argument("--repeats", type=int, default=3, help="training runs per side (median reported)")
    parser.add_argument("--ptb-vocab-size", type=int, default=8000, help="PTB allows at most 8,581 pieces")
    parser.add_argument("--c4-vocab-size", type=int, default=2000)
    args = parser.parse_args()
    report: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "sentencepiece": spm.__version__, "load_avg_start": os.getloadavg()}}
    with tempfile.TemporaryDirectory(prefix="bench-vocab-") as tmp:
        work = Path(tmp)
        ptb_once = work / "ptb-1"
        write_ptb_documents(ptb_once, copies=1, num_shards=1)
        c4 = work / "c4"
        run_c4(RunConfig(output=str(c4), inputs=[bundled_sample()]))
        report["training"] = [bench_training("ptb-train", ptb_once, work, args.ptb_vocab_size, args.repeats),
                              bench_training("c4-sample", c4, work, args.c4_vocab_size, args.repeats)]
        ptb_many = work / f"ptb-{args.copies}"
        report["documents"] = write_ptb_documents(ptb_many, copies=args.copies, num_shards=4)
        model = work / "vocab-ptb-train" / "spm.model"
        ptb_texts, c4_texts = document_texts(ptb_many), document_texts(c4) * 40
        report["encode"] = [
            *(bench_encode(f"PTB train x{args.copies}", ptb_texts, model, threads) for threads in (1, 2)),
            *(bench_encode("C4 sample x40", c4_texts, work / "vocab-c4-sample" / "spm.model", threads)
              for threads in (1, 2)),
        ]
        report["tokenize"] = [
            bench_tokenize(ptb_many, model.parent, work / "tokens-a", [], threads=2),
            bench_tokenize(ptb_many, model.parent, work / "tokens-b",
                           ["--direct_running_mode=multi_processing", "--direct_num_workers=2"], threads=1),
        ]
    report["machine"]["load_avg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    print("\n| measure | result |\n|---|---|")
    for row in report["training"]:
        print(f"| vocab training, {row['corpus']}, {row['vocab_size']:,} pieces, {row['sentences_used']:,} sentences "
              f"| c4prep {row['c4prep_vocab_s']:.2f} s vs SentencePiece {row['sentencepiece_direct_s']:.2f} s: "
              f"{row['overhead_pct']:+.1f}% wall, {row['overhead_cpu_pct']:+.1f}% CPU (target <= 10%) |")
    for row in report["encode"]:
        print(f"| pure batch encode, {row['corpus']}, {row['threads']} thread(s), {row['tokens']:,} tokens "
              f"| {row['tokens_per_s']:,} tokens/s ({row['tokens_per_cpu_s']:,} per CPU-second) |")
    for row in report["tokenize"]:
        mode = " ".join(row["beam_args"]) or "DirectRunner in_memory"
        print(f"| `c4prep tokenize` end to end, {mode}, {row['encode_threads']} encode thread(s) "
              f"| {row['tokens_per_s']:,} tokens/s in {row['seconds']:.1f} s ({row['tokens_per_cpu_s']:,} per "
              "CPU-second; target >= 3M tokens/s) |")
    machine = report["machine"]
    print(f"\nLoad average: {machine['load_avg_start']} at start, {machine['load_avg_end']} at end.")


if __name__ == "__main__":
    main()
