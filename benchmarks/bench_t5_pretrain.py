"""Benchmark: a short T5 span-corruption pre-training run on C4 tokens made from the real web samples: the loss
curve (PNG) and the share of step time spent waiting for data (target < 3%).

Every step is the real command line, run as a subprocess in a work folder:

1. `c4prep run` (C4 `en`) over the WET files in `../shared/data/webdata/` (the CC-MAIN-2019-30 sample and the
   whirlwind page), the Dolma JSONL there and the released C4 documents JSONL (first 500 of `en` train shard 0).
   The last HELDOUT of the 500 C4 documents are kept out and go through their own `c4prep run`: C4's
   `md5(url) % 1000 == 0` validation split of ~600 pages is almost surely empty, and then a held-out set is the
   only way to see generalisation.
2. `c4prep vocab` on the training corpus, `c4prep tokenize` of both corpora with that vocabulary.
3. `train stage=pretrain experiment=t5_sample` (configs/experiment/t5_sample.yaml) with `trainer.num_workers=1`
   (the default), logging every step and checkpointing every CHECKPOINT_EVERY steps; the run's own validation
   uses the `validation` split when it has documents. Then `train stage=evaluate` on the held-out tokens for each
   checkpoint, and a shorter run with `trainer.num_workers=0` for comparison.
4. Reads `<run>/metrics.jsonl`, plots the loss curve and the per-step data-loading share to
   benchmarks/t5_pretrain_loss.png, prints a JSON report and a Markdown summary.

`data_fraction` (logged by the trainer each step) is the time spent in `next(loader)` for the step's micro-batches
divided by the step's wall time; the time-weighted share is sum(data seconds) / sum(step seconds).

Training processes run with OMP_NUM_THREADS=1 (`--torch-threads`): on a 2-vCPU VM shared with other work, two
intra-op threads made a step vary from 0.3 s to 5 s (OpenMP barriers waiting on a descheduled vCPU), one thread
gives a steady ~0.5 s, and the loader worker gets the other core.

    python benchmarks/bench_t5_pretrain.py [--quick] [--workdir DIR] [--vocab-size 8000] [--steps N]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WEBDATA = HERE.parents[1] / "shared" / "data" / "webdata"
C4_JSONL = WEBDATA / "c4-en-train-00000-first500.jsonl"
DOLMA_JSONL = WEBDATA / "dolma_cc_en_head-0174.jsonl.gz"
DEFAULT_PLOT = HERE / "t5_pretrain_loss.png"
EXPERIMENT = "t5_sample"

FULL = {"steps": 600, "checkpoint_every": 100, "w0_steps": 60}
QUICK = {"steps": 60, "checkpoint_every": 30, "w0_steps": 20}


# ------------------------------------------------------------------------------------------------ commands
def run_command(name: str, args: list[str], logs: Path, env: dict[str, str] | None = None) -> float:
    """Run ``python -m <args>``; its output goes to ``logs/<name>.log``. Returns wall seconds; exits on failure."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(args)}", flush=True)
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as handle:
        result = subprocess.run([sys.executable, "-m", *args], check=False, stdout=handle,
                                stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
        sys.exit(f"{name} failed (exit {result.returncode}); last lines of {log}:\n" + "\n".join(tail))
    return seconds


def split_c4_jsonl(destination: Path, heldout: int) -> tuple[Path, Path | None, int]:
    """The C4 JSONL as two files: all but the last ``heldout`` lines (training) and those lines (held out)."""
    lines = C4_JSONL.read_text(encoding="utf-8").splitlines(keepends=True)
    if not 0 <= heldout < len(lines):
        sys.exit(f"--heldout-docs must be in [0, {len(lines)})")
    destination.mkdir(parents=True, exist_ok=True)
    train = destination / "c4-train.jsonl"
    train.write_text("".join(lines[:len(lines) - heldout]), encoding="utf-8")
    held = None
    if heldout:
        held = destination / "c4-heldout.jsonl"
        held.write_text("".join(lines[len(lines) - heldout:]), encoding="utf-8")
    return train, held, len(lines)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------ corpus
def build_corpus(work: Path, vocab_size: int, heldout: int) -> dict[str, Any]:
    """c4prep run / vocab / tokenize through the CLI; returns paths, sizes and wall seconds."""
    logs = work / "logs"
    c4_train, c4_heldout, c4_total = split_c4_jsonl(work / "inputs", heldout)
    wet = sorted(str(p) for p in WEBDATA.glob("*.wet.gz"))
    inputs = [*wet, str(DOLMA_JSONL), str(c4_train)]
    seconds = {}
    corpus, vocab, tokens = work / "c4", work / "vocab", work / "tokens"
    seconds["c4prep run"] = run_command(
        "c4prep-run", ["c4prep", "run", *[a for p in inputs for a in ("--input", p)], "--output", str(corpus)], logs)
    seconds["c4prep vocab"] = run_command(
        "c4prep-vocab", ["c4prep", "vocab", "--input", str(corpus), "--output", str(vocab),
                         "--vocab-size", str(vocab_size)], logs)
    seconds["c4prep tokenize"] = run_command(
        "c4prep-tokenize", ["c4prep", "tokenize", "--input", str(corpus), "--vocab", str(vocab),
                            "--output", str(tokens)], logs)
    heldout_tokens = None
    if c4_heldout is not None:
        heldout_corpus, heldout_tokens = work / "c4-heldout", work / "tokens-heldout"
        seconds["c4prep run (held out)"] = run_command(
            "c4prep-run-heldout", ["c4prep", "run", "--input", str(c4_heldout), "--output", str(heldout_corpus)],
            logs)
        seconds["c4prep tokenize (held out)"] = run_command(
            "c4prep-tokenize-heldout", ["c4prep", "tokenize", "--input", str(heldout_corpus), "--vocab", str(vocab),
                                        "--output", str(heldout_tokens)], logs)
    documents = read_json(corpus / "manifest.json")
    token_manifest = read_json(tokens / "manifest.json")
    card = read_json(vocab / "vocab.json")
    info: dict[str, Any] = {
        "inputs": [*wet, str(DOLMA_JSONL), f"{C4_JSONL} (first {c4_total - heldout} of {c4_total} lines)"],
        "documents": {split: s["num_rows"] for split, s in documents["splits"].items()},
        "document_bytes": {split: s["num_bytes"] for split, s in documents["splits"].items()},
        "tokens": {k.split(":", 1)[1]: v for k, v in token_manifest["counters"]["tokenize"].items()
                   if k.startswith("tokens:")},
        "unk_tokens": {k.split(":", 1)[1]: v for k, v in token_manifest["counters"]["tokenize"].items()
                       if k.startswith("unk_tokens:")},
        "vocab_pieces": card["model"]["num_pieces"],
        "vocab_ids_with_sentinels": token_manifest["extra"]["vocabulary"]["vocab_size"],
        "vocab_sentences_used": card.get("sentences"),
        "paths": {"corpus": str(corpus), "vocab": str(vocab), "tokens": str(tokens),
                  "heldout_tokens": str(heldout_tokens) if heldout_tokens else None},
        "seconds": seconds,
    }
    if heldout_tokens is not None:
        held_manifest = read_json(heldout_tokens / "manifest.json")
        info["heldout"] = {"c4_documents_in": heldout,
                           "documents": held_manifest["splits"]["train"]["num_rows"],
                           "tokens": held_manifest["counters"]["tokenize"].get("tokens:train", 0)}
    return info


def sample_counts(tokens: Path, overrides: list[str]) -> dict[str, Any]:
    """Samples (packed rows) the pretrain stage builds from the token shards, with the experiment's settings."""
    from dataclasses import asdict

    from c4prep.training.config import load_config
    from c4prep.training.config_groups import model_settings
    from c4prep.training.stages.data_setup import pretrain_data

    cfg = load_config([f"experiment={EXPERIMENT}", f"data.tokens={tokens}", *overrides])
    data = pretrain_data(cfg.data, cfg.objective, cfg.seed, cfg.model.name == "gpt", cfg.z_loss)
    out = {"train_samples": data.train.num_samples, "train_segments": data.train.num_segments,
           "train_tokens_in_segments": data.train.num_tokens,
           "validation_samples": data.validation.num_samples if data.validation is not None else 0,
           "global_batch_size": cfg.trainer.global_batch_size,
           "inputs_length": cfg.objective.inputs_length, "targets_length": cfg.objective.targets_length,
           "model": model_settings(cfg.model), "optimizer": asdict(cfg.optimizer), "schedule": asdict(cfg.schedule)}
    out["steps_per_epoch"] = out["train_samples"] // out["global_batch_size"]
    return out


# ------------------------------------------------------------------------------------------------ training
def train(name: str, work: Path, tokens: Path, overrides: list[str], threads: int) -> tuple[Path, float]:
    """``train stage=pretrain experiment=t5_sample`` into ``work/runs/name`` (a fresh folder)."""
    run_dir = work / "runs" / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    args = ["c4prep.training.cli", "stage=pretrain", f"experiment={EXPERIMENT}", f"data.tokens={tokens}",
            f"output_dir={run_dir}", "resume=never", "trainer.device=cpu", "trainer.progress=false", *overrides]
    seconds = run_command(f"train-{name}", args, work / "logs", env=thread_env(threads))
    return run_dir, seconds


def thread_env(threads: int) -> dict[str, str]:
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def evaluate_checkpoints(work: Path, run_dir: Path, heldout_tokens: Path, threads: int) -> tuple[list[dict], float]:
    """``train stage=evaluate`` of every checkpoint of ``run_dir`` on the held-out tokens (their `train` split)."""
    out = work / "runs" / "heldout-eval"
    if out.exists():
        shutil.rmtree(out)
    seconds = 0.0
    for checkpoint in sorted((run_dir / "checkpoints").glob("step_*.pt")):
        seconds += run_command(
            f"evaluate-{checkpoint.stem}",
            ["c4prep.training.cli", "stage=evaluate", f"experiment={EXPERIMENT}", f"init_from={checkpoint}",
             f"data.tokens={heldout_tokens}", "data.validation_split=train", f"output_dir={out}",
             "trainer.device=cpu", "trainer.progress=false"],
            work / "logs", env=thread_env(threads))
    records = read_metrics(out) if (out / "metrics.jsonl").exists() else []
    return [{"step": r["step"], **r["metrics"]} for r in records], seconds


def summarize_run(records: list[dict[str, Any]], wall: float, first_steps: int | None = None) -> dict[str, Any]:
    """Figures of one run's train records (optionally only its first ``first_steps`` steps)."""
    train_rows = [r for r in records if r["split"] == "train"]
    if first_steps is not None:
        train_rows = [r for r in train_rows if r["step"] <= first_steps]
    metrics = [r["metrics"] for r in train_rows]
    loss = [m["loss"] for m in metrics]
    fraction = [m["data_fraction"] for m in metrics]
    step_seconds = [m["step_seconds"] for m in metrics]
    tokens = [m["tokens_per_second"] * m["step_seconds"] for m in metrics]
    data_seconds = [f * s for f, s in zip(fraction, step_seconds)]
    tail = loss[-20:]
    return {
        "steps": len(metrics), "last_step": train_rows[-1]["step"] if train_rows else 0,
        "tokens_seen": round(sum(tokens)),
        "loss_first": loss[0], "loss_last": loss[-1], "loss_last20_mean": statistics.fmean(tail),
        "loss_min": min(loss),
        "tokens_per_s_median": statistics.median(m["tokens_per_second"] for m in metrics),
        "step_seconds_median": statistics.median(step_seconds),
        "step_seconds_sum": sum(step_seconds), "run_wall_s": wall,
        "data_fraction_median": statistics.median(fraction),
        "data_fraction_mean": statistics.fmean(fraction),
        "data_fraction_mean_after_step1": statistics.fmean(fraction[1:]) if len(fraction) > 1 else None,
        "data_fraction_max": max(fraction),
        "data_fraction_step1": fraction[0],
        "data_share_time_weighted": sum(data_seconds) / sum(step_seconds),
        "data_ms_median": 1000 * statistics.median(data_seconds),
        "data_ms_median_after_step1": 1000 * statistics.median(data_seconds[1:]) if len(metrics) > 1 else None,
        "validation": [{"step": r["step"], **r["metrics"]} for r in records if r["split"] == "validation"],
    }


# ------------------------------------------------------------------------------------------------ plot
def moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot(path: Path, main: list[dict], w0: list[dict], heldout: list[dict], info: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    train_rows = [r for r in main if r["split"] == "train"]
    steps = [r["step"] for r in train_rows]
    loss = [r["metrics"]["loss"] for r in train_rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 8.5), height_ratios=[3, 2], sharex=True)
    top.plot(steps, loss, color="tab:blue", alpha=0.3, linewidth=0.8, label="train loss (each step)")
    window = 20 if len(loss) >= 100 else 5
    smooth = moving_average(loss, window)
    top.plot(steps, smooth, color="tab:blue", linewidth=2,
             label=f"train loss, moving mean of {window} steps (last {smooth[-1]:.2f})")
    validation = [r for r in main if r["split"] == "validation"]
    if validation:
        top.plot([r["step"] for r in validation], [r["metrics"]["loss"] for r in validation], "s-",
                 color="tab:green", label="validation split loss")
    if heldout:
        top.plot([r["step"] for r in heldout], [r["loss"] for r in heldout], "o-", color="tab:red",
                 markersize=6, label=f"held-out loss ({info['heldout_documents']} C4 documents, "
                                     f"{info['heldout_tokens']:,} tokens; last {heldout[-1]['loss']:.2f})")
    per_epoch = info["steps_per_epoch"]
    for epoch_end in range(per_epoch, steps[-1] + 1, per_epoch):
        top.axvline(epoch_end, color="grey", linestyle=":", linewidth=0.8)
    if per_epoch <= steps[-1]:
        top.text(per_epoch, top.get_ylim()[1], " epoch ends", va="top", ha="left", fontsize=8, color="grey")
    top.set_ylabel("cross-entropy per target token (nats)")
    top.set_title(f"T5 span corruption on C4 tokens from the web samples: {info['model_label']}\n"
                  f"{info['corpus_label']}", fontsize=10)
    top.grid(True, alpha=0.3)
    top.legend(loc="upper right", fontsize=8)

    for records, label, color in ((main, "num_workers=1", "tab:blue"), (w0, "num_workers=0", "tab:orange")):
        rows = [r for r in records if r["split"] == "train"]
        bottom.plot([r["step"] for r in rows], [100 * r["metrics"]["data_fraction"] for r in rows],
                    color=color, linewidth=0.8, marker=".", markersize=3,
                    label=f"{label}: median "
                          f"{100 * statistics.median(r['metrics']['data_fraction'] for r in rows):.2f}%")
    bottom.axhline(3.0, color="tab:red", linestyle="--", linewidth=1, label="target 3%")
    bottom.set_yscale("log")
    bottom.yaxis.set_major_locator(ticker.FixedLocator([0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 20, 50, 100]))
    bottom.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}%"))
    bottom.yaxis.set_minor_formatter(ticker.NullFormatter())
    bottom.set_ylabel("data loading share of step (%)")
    bottom.set_xlabel(f"optimizer step ({info['global_batch_size']} sequences of {info['inputs_length']} input + "
                      f"{info['targets_length']} target tokens)")
    bottom.grid(True, which="both", alpha=0.3)
    bottom.legend(loc="upper right", fontsize=8)
    bottom.set_title("time waiting for the loader / step time (trainer metric data_fraction), CPU", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"short runs {QUICK} instead of {FULL}")
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a temporary folder)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--heldout-docs", type=int, default=50,
                        help="last C4 JSONL documents kept out of training for a held-out loss (0: none)")
    parser.add_argument("--steps", type=int, help="optimizer steps of the num_workers=1 run")
    parser.add_argument("--w0-steps", type=int, help="steps of the num_workers=0 comparison run")
    parser.add_argument("--checkpoint-every", type=int, help="checkpoint (and held-out evaluation) interval")
    parser.add_argument("--torch-threads", type=int, default=1, help="OMP_NUM_THREADS of the train processes")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("overrides", nargs="*", help="extra train overrides, e.g. optimizer=adamw")
    args = parser.parse_args()
    mode = dict(QUICK if args.quick else FULL)
    for key in ("steps", "w0_steps", "checkpoint_every"):
        if getattr(args, key) is not None:
            mode[key] = getattr(args, key)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        corpus = build_corpus(work, args.vocab_size, args.heldout_docs)
        tokens = Path(corpus["paths"]["tokens"])
        heldout_tokens = corpus["paths"]["heldout_tokens"]
        samples = sample_counts(tokens, args.overrides)

        common = ["trainer.log_every=1", f"trainer.checkpoint_every={mode['checkpoint_every']}",
                  f"trainer.eval_every={mode['checkpoint_every']}", "trainer.keep_checkpoints=1000",
                  *args.overrides]
        main_dir, main_wall = train("workers1", work, tokens, [f"trainer.max_steps={mode['steps']}",
                                                               "trainer.num_workers=1", *common], args.torch_threads)
        heldout, heldout_seconds = ([], 0.0)
        if heldout_tokens:
            heldout, heldout_seconds = evaluate_checkpoints(work, main_dir, Path(heldout_tokens), args.torch_threads)
        # Same schedule as the main run (its total_steps), so the first w0_steps steps should match it exactly.
        same_schedule = ([f"schedule.options.total_steps={mode['steps']}"]
                         if "total_steps" in samples["schedule"].get("options", {}) else [])
        w0_dir, w0_wall = train("workers0", work, tokens, [f"trainer.max_steps={mode['w0_steps']}",
                                                           "trainer.num_workers=0", *common, *same_schedule],
                                args.torch_threads)
        main_records, w0_records = read_metrics(main_dir), read_metrics(w0_dir)
        summary = {
            "workers1": summarize_run(main_records, main_wall),
            "workers1_first_steps": summarize_run(main_records, main_wall, first_steps=mode["w0_steps"]),
            "workers0": summarize_run(w0_records, w0_wall),
        }
        w1_losses = [r["metrics"]["loss"] for r in main_records if r["split"] == "train"]
        w0_losses = [r["metrics"]["loss"] for r in w0_records if r["split"] == "train"]
        summary["workers0_vs_workers1_max_abs_loss_diff"] = max(abs(a - b) for a, b in zip(w0_losses, w1_losses))
        held_docs = corpus.get("heldout", {}).get("documents", 0)
        model = samples["model"]
        plot_info = {
            **samples, "heldout_documents": held_docs, "heldout_tokens": corpus.get("heldout", {}).get("tokens", 0),
            "model_label": (f"d_model {model.get('d_model')}, {model.get('num_layers')}+"
                            f"{model.get('num_decoder_layers')} layers, {model.get('num_heads')} heads, d_ff "
                            f"{model.get('d_ff')}, {samples['optimizer']['name']} + {samples['schedule']['name']}"),
            "corpus_label": (f"{corpus['documents']['train']:,} documents, {corpus['tokens']['train']:,} tokens, "
                             f"{samples['train_samples']:,} samples ({samples['steps_per_epoch']} steps per epoch), "
                             f"{corpus['vocab_pieces']:,}-piece SentencePiece vocabulary"),
        }
        plot(args.plot, main_records, w0_records, heldout, plot_info)
        if args.workdir is None:
            work_note = "temporary (removed)"
        else:
            work_note = str(work)

    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                   f"Python {platform.python_version()}",
        "mode": "quick" if args.quick else "full", "settings": mode, "torch_threads": args.torch_threads,
        "overrides": args.overrides, "workdir": work_note, "corpus": corpus, "samples": samples,
        "runs": summary, "heldout_eval": heldout, "heldout_eval_seconds": heldout_seconds,
        "plot": str(args.plot), "total_wall_s": time.perf_counter() - started,
    }
    print(json.dumps(report, indent=2, default=str))
    print_markdown(report)


def print_markdown(report: dict[str, Any]) -> None:
    corpus, samples, runs = report["corpus"], report["samples"], report["runs"]
    main_run, w0, w1_first = runs["workers1"], runs["workers0"], runs["workers1_first_steps"]
    print("\n| corpus | documents | tokens | samples |\n|---|---:|---:|---:|")
    print(f"| train | {corpus['documents']['train']:,} | {corpus['tokens']['train']:,} | "
          f"{samples['train_samples']:,} |")
    print(f"| validation (md5 split) | {corpus['documents']['validation']:,} | "
          f"{corpus['tokens'].get('validation', 0):,} | {samples['validation_samples']:,} |")
    if "heldout" in corpus:
        print(f"| held out (last {corpus['heldout']['c4_documents_in']} C4 docs) | {corpus['heldout']['documents']:,} "
              f"| {corpus['heldout']['tokens']:,} | - |")
    print("\n| run | steps | tokens seen | loss first -> last (mean of last 20) | median tokens/s | "
          "data share median | mean | time-weighted | data wait median |\n|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for name, run in (("num_workers=1", main_run), (f"num_workers=1, first {w1_first['steps']} steps", w1_first),
                      ("num_workers=0", w0)):
        print(f"| {name} | {run['steps']} | {run['tokens_seen']:,} | {run['loss_first']:.3f} -> "
              f"{run['loss_last']:.3f} ({run['loss_last20_mean']:.3f}) | {run['tokens_per_s_median']:,.0f} | "
              f"{run['data_fraction_median']:.3%} | {run['data_fraction_mean']:.3%} | "
              f"{run['data_share_time_weighted']:.3%} | {run['data_ms_median']:.1f} ms |")
    print(f"\nnum_workers=0 vs the first {w0['steps']} steps of num_workers=1: max |loss difference| "
          f"{runs['workers0_vs_workers1_max_abs_loss_diff']:.3g}")
    if report["heldout_eval"]:
        print("\nheld-out loss by checkpoint: " + ", ".join(f"step {r['step']}: {r['loss']:.3f}"
                                                          for r in report["heldout_eval"]))
    if main_run["validation"]:
        print("validation split loss: " + ", ".join(f"step {r['step']}: {r['loss']:.3f}"
                                                    for r in main_run["validation"]))
    else:
        print("validation split: empty, no in-run validation")
    print(f"\nwall: {report['total_wall_s']:.0f} s in all; corpus "
          f"{sum(corpus['seconds'].values()):.0f} s; train run {main_run['run_wall_s']:.0f} s "
          f"(sum of step times {main_run['step_seconds_sum']:.0f} s); plot {report['plot']}")


if __name__ == "__main__":
    main()
