"""The CS224N A5 handout recipe on one CUDA GPU, timed (a step of benchmarks/gpu_suite.sh).

For each variant (vanilla and synthesizer attention; bf16 and fp32, each eager and with CUDA graphs on padded rows:
``trainer.compile=true trainer.compile_mode=reduce-overhead data.pack=false``; bf16 with CUDA graphs on re-packed rows
(``-graphs-packed``: about half the positions, in micro-batches of a multiple of 8 rows), and so in fp32 with TF32
matmuls, and so with the losses read at log steps only (``-queued``: ``trainer.loss_check=log``, the host queues
steps ahead of the GPU); bf16 compiled without graphs; bf16 on re-packed rows with each whole step captured as one
CUDA graph (``-captured-packed``: ``trainer.capture_steps=true``, the forward, loss, backward, clipping and AdamW in
one launch), with eager kernels or compiled ones, the whole model or its repeated block compiled once for all
layers: ``-blocks-``, ``trainer.compile_scope=blocks``) the real ``train`` command runs, as a subprocess, fresh
(``resume=never``), with 4 data-loader processes, and with torch.compile's caches (Inductor's, and Triton's inside
it) empty at the start of each variant's run, as on a user's first run: compiling is part of the recipe's time
(``--warm-cache`` keeps the machine's caches, e.g. to see what they save).
The compile options apply to pretraining alone: fine-tuning has 80 steps, too few to repay compiling them.

1. pretraining: ``experiment=cs224n_a5_pretrain`` (650 epochs of span-corrupted wiki.txt, batch 128, lr 6e-3,
   dropout 0.1), then
2. fine-tuning: ``experiment=cs224n_a5_finetune init_from=<pretraining run>`` (10 epochs of birth_places_train.tsv),
   which ends with greedy answers to birth_dev.tsv and their accuracy.

Writes ``<out>/a5_recipe.json`` (per variant: dev accuracy, wall seconds of each phase (with the seconds its training
and the answers took inside it: the rest is start-up and exit) and of the whole recipe,
final pretraining loss and gradient norm, exit codes; the GPU, torch and CUDA versions) and the pretraining curves
(loss and gradient norm per logged step): ``<out>/a5_pretrain_curves.png`` when matplotlib is installed (the
``bench`` extra), else ``<out>/a5_pretrain_curves.csv``. A variant that fails is recorded and the next one runs.

    python benchmarks/gpu_a5_recipe.py [--out benchmarks/results/gpu/a5] [--variants vanilla-bf16 ...] [--seeds 0 1 ...]
                                       [--concurrent] [--warm-cache]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from c4prep.training.metrics_log import read_metrics

COMPILED = ["trainer.compile=true"]
# Data loader processes: one left the seventh session's vanilla run waiting for data 24 % of a step (a re-packed
# micro-batch takes 3.4 ms to build on the 2-core CI machine); the batches do not depend on the worker count.
LOADER_WORKERS = 4
# Launch-bound steps: CUDA graphs replay a step's kernels in one launch, recorded once per batch shape: padded rows
# (one shape), or re-packed rows in micro-batches of a multiple of 8 rows (a few shapes, half the positions).
GRAPHS_PACKED = ["trainer.compile=true", "trainer.compile_mode=reduce-overhead"]
GRAPHS = [*GRAPHS_PACKED, "data.pack=false"]
# Host-bound steps even under compiled graphs (a bf16 step 7.35 ms on an H200): the whole step as one graph
CAPTURED = ["trainer.capture_steps=true", "trainer.loss_check=log"]
VARIANTS = {  # name: (model.attention, trainer.precision, further overrides of both phases)
    "vanilla-bf16": ("causal", "bf16", []), "vanilla-fp32": ("causal", "fp32", []),
    "vanilla-bf16-compiled": ("causal", "bf16", COMPILED), "vanilla-bf16-graphs": ("causal", "bf16", GRAPHS),
    "synthesizer-bf16": ("synthesizer", "bf16", []), "synthesizer-fp32": ("synthesizer", "fp32", []),
    "synthesizer-bf16-compiled": ("synthesizer", "bf16", COMPILED),
    "synthesizer-bf16-graphs": ("synthesizer", "bf16", GRAPHS),
    "vanilla-fp32-graphs": ("causal", "fp32", GRAPHS), "synthesizer-fp32-graphs": ("synthesizer", "fp32", GRAPHS),
    "vanilla-bf16-graphs-packed": ("causal", "bf16", GRAPHS_PACKED),
    "synthesizer-bf16-graphs-packed": ("synthesizer", "bf16", GRAPHS_PACKED),
    "vanilla-fp32-tf32-graphs-packed": ("causal", "fp32", [*GRAPHS_PACKED, "trainer.tf32=true"]),
    "synthesizer-fp32-tf32-graphs-packed": ("synthesizer", "fp32", [*GRAPHS_PACKED, "trainer.tf32=true"]),
    "vanilla-bf16-graphs-packed-queued": ("causal", "bf16", [*GRAPHS_PACKED, "trainer.loss_check=log"]),
    "vanilla-bf16-captured-packed": ("causal", "bf16", CAPTURED),
    "vanilla-bf16-compiled-captured-packed": ("causal", "bf16", [*COMPILED, *CAPTURED]),
    "vanilla-bf16-blocks-captured-packed": ("causal", "bf16", [*COMPILED, "trainer.compile_scope=blocks", *CAPTURED]),
    # rows re-packed into 128 positions, not 127: the attention's batched products then have leading dimensions of a
    # multiple of 8 (at 127 the saved profiles show cuBLAS's align1 kernels)
    "vanilla-bf16-compiled-captured-packed128": ("causal", "bf16", [*COMPILED, *CAPTURED, "data.pack_length=128"]),
}


def phase_overrides(name: str) -> tuple[list[str], list[str]]:
    """Variant ``name``'s overrides of the pretraining and of the fine-tuning phase."""
    attention, precision, overrides = VARIANTS[name]
    common = [f"model.attention={attention}", f"trainer.precision={precision}"]
    return [*common, *overrides], common


def train(*overrides: str, compile_cache: str | None = None) -> dict[str, Any]:
    """One `train` subprocess on the GPU (torch.compile's cache in ``compile_cache`` if given): exit code, wall
    seconds, its JSON summary (empty on failure), and when it started (epoch seconds, as the metrics' ``time``)."""
    caches = {"TORCHINDUCTOR_CACHE_DIR": compile_cache, "TRITON_CACHE_DIR": os.path.join(compile_cache, "triton")} \
        if compile_cache else {}
    env = {**os.environ, **caches}
    started, started_at = time.perf_counter(), time.time()
    result = subprocess.run([sys.executable, "-m", "c4prep.training.cli", *overrides, "trainer.device=cuda",
                             f"trainer.num_workers={LOADER_WORKERS}",
                             "trainer.progress=false", "trainer.tensorboard=false", "resume=never"],
                            capture_output=True, text=True, env=env)
    lines = result.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if result.returncode == 0 and lines else {}
    return {"returncode": result.returncode, "seconds": round(time.perf_counter() - started, 1), "summary": summary,
            "started_at": started_at, "stderr_tail": result.stderr[-1500:] if result.returncode else ""}


def run_variant(out: Path, name: str, seed: int = 0, warm_cache: bool = False) -> dict[str, Any]:
    """Pretraining then fine-tuning and answers, both phases with ``seed`` (the config's: model init, data order,
    masks, dropout), with torch.compile's caches empty at the start unless ``warm_cache``; runs of a seed other than
    0 are labelled with it."""
    with nullcontext() if warm_cache else tempfile.TemporaryDirectory(prefix="a5_compile_cache_") as compile_cache:
        return _run_variant(out, name, seed, compile_cache)


def _run_variant(out: Path, name: str, seed: int, compile_cache: str | None) -> dict[str, Any]:
    attention, precision, overrides = VARIANTS[name]
    pretrain_overrides, finetune_overrides = phase_overrides(name)
    label = name if seed == 0 else f"{name}-seed{seed}"
    pre_dir, ft_dir = out / f"{label}_pretrain", out / f"{label}_finetune"
    pretrain = train("experiment=cs224n_a5_pretrain", f"output_dir={pre_dir}", *pretrain_overrides, f"seed={seed}",
                     compile_cache=compile_cache)
    row: dict[str, Any] = {"variant": name, "seed": seed, "label": label, "attention": attention,
                           "precision": precision, "overrides": overrides,
                           "compile_cache": "the machine's" if compile_cache is None else "empty at the start",
                           "pretrain": {k: pretrain[k] for k in ("returncode", "seconds", "stderr_tail")}}
    row["pretrain"]["fit_seconds"] = pretrain["summary"].get("fit_seconds")  # the rest: start-up and exit
    logged = [r for r in read_metrics(pre_dir / "metrics.jsonl") if r["split"] == "train"] \
        if (pre_dir / "metrics.jsonl").is_file() else []
    if logged:  # start-up (process, data, compilation, graph recording) ends with the first logged step
        row["pretrain"]["first_log_after_s"] = round(logged[0]["time"] - pretrain["started_at"], 1)
        row["pretrain"]["first_logged_step"] = logged[0]["step"]
        row["final_pretrain_loss"] = logged[-1]["metrics"]["loss"]
        row["final_grad_norm"] = logged[-1]["metrics"]["grad_norm"]
    if pretrain["returncode"] == 0:
        finetune = train("experiment=cs224n_a5_finetune", f"init_from={pre_dir}", f"output_dir={ft_dir}",
                         *finetune_overrides, f"seed={seed}", compile_cache=compile_cache)
        row["finetune"] = {k: finetune[k] for k in ("returncode", "seconds", "stderr_tail")}
        evaluation = finetune["summary"].get("evaluation") or {}
        row["finetune"].update(fit_seconds=finetune["summary"].get("fit_seconds"),
                               answers_seconds=evaluation.get("seconds"))
        row.update(dev_accuracy=evaluation.get("accuracy"), dev_correct=evaluation.get("correct"),
                   dev_total=evaluation.get("total"), whole_recipe_seconds=round(pretrain["seconds"]
                                                                               + finetune["seconds"], 1))
    row["curve"] = [{"step": r["step"], "loss": r["metrics"]["loss"], "grad_norm": r["metrics"]["grad_norm"]}
                    for r in logged]
    return row


def write_curves(out: Path, rows: list[dict[str, Any]]) -> Path:
    """Loss and gradient norm against step, every variant: a PNG with matplotlib, else a CSV."""
    try:
        import matplotlib
    except ImportError:
        path = out / "a5_pretrain_curves.csv"
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["variant", "step", "loss", "grad_norm"])
            writer.writerows([row["label"], p["step"], p["loss"], p["grad_norm"]] for row in rows
                             for p in row["curve"])
        return path
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_axis, norm_axis) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    for row in rows:
        steps = [p["step"] for p in row["curve"]]
        dev = row.get("dev_accuracy")
        label = row["label"] + (f" (dev {dev:.1%})" if dev is not None else " (no dev answers)")
        loss_axis.plot(steps, [p["loss"] for p in row["curve"]], label=label)
        norm_axis.plot(steps, [p["grad_norm"] for p in row["curve"]], label=row["label"])
    loss_axis.set(ylabel="pretraining loss", title=f"CS224N A5 handout recipe, {torch.cuda.get_device_name()}")
    norm_axis.set(xlabel="optimizer step", ylabel="gradient norm (before clipping)", yscale="log")
    loss_axis.legend(fontsize=8)
    path = out / "a5_pretrain_curves.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gpu/a5"))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0],
                        help="run every variant with each seed (the spread of dev accuracy between runs)")
    parser.add_argument("--concurrent", action="store_true",
                        help="run the variants at once on the one GPU: accuracies as alone, wall times not")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep the machine's torch.compile caches (default: each run starts with them empty)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [(name, seed) for name in args.variants for seed in args.seeds]
    with ThreadPoolExecutor(len(runs) if args.concurrent else 1) as pool:
        rows = []
        for row in pool.map(lambda run: run_variant(args.out, *run, warm_cache=args.warm_cache), runs):
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "concurrent": args.concurrent, "variants": rows, "curves": str(write_curves(args.out, rows))}
    (args.out / "a5_recipe.json").write_text(json.dumps(report, indent=2))
    sys.exit(1 if any(r["pretrain"]["returncode"] or r.get("finetune", {}).get("returncode") for r in rows) else 0)


if __name__ == "__main__":
    main()
