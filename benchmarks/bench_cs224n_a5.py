"""Benchmark: CS224N assignment 5 (birth-place QA, dev accuracy) on this machine, with a measured pretraining budget.

Every run is the real `train` command (configs/experiment/cs224n_a5_*.yaml) as a subprocess:

1. London baseline on birth_dev.tsv (predict "London" for every question).
2. No pretraining: fine-tune a fresh model for the handout's 75 epochs (600 steps of 256), answer dev.
3. For each attention (vanilla, synthesizer): pretrain for E epochs of span-corrupted wiki.txt (2,938 documents,
   ceil(2,938 / batch) steps per epoch; the minGPT cosine decays over the whole budget instead of the reference's
   unclamped 650-epoch cycle), checkpointing every C epochs; fine-tune each checkpoint for the handout's 10 epochs
   (80 steps of 256) and answer dev, which gives dev accuracy against pretraining epochs. The final model also
   answers birth_test_inputs.tsv. The handout pretrains with batch 128, lr 6e-3 and dropout 0.1;
   ``--pretrain-batch``, ``--pretrain-lr`` and ``--pretrain-dropout`` change that, and ``--finetune-dropout`` the
   fine-tune's dropout (the handout's 0.1; the rest of the fine-tune keeps the handout's settings).

Runs use bf16 autocast and re-packed rows (data.pack). Run folders are kept in --workdir; a finished run is reused
(resume=auto finds its last checkpoint), so an interrupted benchmark continues where it stopped.

    python benchmarks/bench_cs224n_a5.py [--workdir DIR] [--vanilla-epochs 100] [--synthesizer-epochs 20]
                                         [--checkpoint-epochs 20] [--skip-nopretrain] [--pretrain-batch 128]
                                         [--pretrain-lr 6e-3] [--pretrain-dropout 0.1] [--finetune-dropout 0.1]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

from harness import run_module

HERE = Path(__file__).resolve().parent
A5_DATA = HERE.parents[1] / "shared" / "data" / "cs224n_a5"
WIKI_DOCUMENTS = 2_938
FINETUNE_STEPS = 80       # 10 epochs of 2,000 examples, 256 per step
NOPRETRAIN_STEPS = 600    # 75 epochs


def train(*overrides: str) -> tuple[float, dict[str, Any]]:
    """Run `train` with ``overrides`` in bf16 on 2 CPU threads; (wall seconds, the JSON summary it prints last)."""
    seconds, stdout = run_module("c4prep.training.cli", *overrides, "trainer.device=cpu", "trainer.precision=bf16",
                                 "trainer.num_threads=2", "trainer.progress=false")
    return seconds, json.loads(stdout.strip().splitlines()[-1])


def london_baseline() -> float:
    from c4prep.training.experiments.cs224n_a5.birth_places import london_baseline as london
    from c4prep.training.experiments.cs224n_a5.birth_places import read_birth_places, score_places

    pairs = read_birth_places(A5_DATA / "birth_dev.tsv")
    total, correct = score_places([p for _, p in pairs], london([q for q, _ in pairs]))
    return correct / total


def finetune(workdir: Path, name: str, *overrides: str) -> dict[str, Any]:
    seconds, summary = train("experiment=cs224n_a5_finetune", f"output_dir={workdir / name}", *overrides)
    evaluation = summary["evaluation"]
    return {"run": name, "seconds": round(seconds, 1), "dev_accuracy": evaluation["accuracy"],
            "correct": evaluation["correct"], "total": evaluation["total"]}


def pretrain_and_finetune(workdir: Path, attention: str, epochs: int, checkpoint_epochs: int,
                          recipe: argparse.Namespace) -> dict[str, Any]:
    steps_per_epoch = -(-WIKI_DOCUMENTS // recipe.pretrain_batch)  # the last batch completed
    steps = epochs * steps_per_epoch
    run = workdir / f"{attention}_pre"
    train("experiment=cs224n_a5_pretrain", f"model.attention={attention}",
          f"trainer.max_steps={steps}", f"schedule.options.decay_steps={steps}", "schedule.options.periodic=false",
          f"trainer.checkpoint_every={checkpoint_epochs * steps_per_epoch}", "trainer.keep_checkpoints=100",
          f"trainer.global_batch_size={recipe.pretrain_batch}", f"trainer.micro_batch_size={recipe.pretrain_batch}",
          f"optimizer.lr={recipe.pretrain_lr}", f"+model.dropout={recipe.pretrain_dropout}", f"output_dir={run}")
    curve = []
    for epoch in range(checkpoint_epochs, epochs + 1, checkpoint_epochs):
        checkpoint = run / "checkpoints" / f"step_{epoch * steps_per_epoch:08d}.pt"
        result = finetune(workdir, f"{attention}_ft_e{epoch}", f"init_from={checkpoint}",
                          f"model.attention={attention}", f"model.dropout={recipe.finetune_dropout}")
        curve.append({"pretrain_epochs": epoch, **result})
        print(json.dumps(curve[-1]), flush=True)
    final = workdir / f"{attention}_ft_e{epochs}"
    train("experiment=cs224n_a5_finetune", "stage=evaluate", f"init_from={final}",
          f"data.evaluate={A5_DATA / 'birth_test_inputs.tsv'}", f"data.predictions={final / 'test.predictions'}",
          f"output_dir={workdir / f'{attention}_test'}")
    seconds, step_seconds, loss = pretrain_timing(run)
    return {"attention": attention, "pretrain_epochs": epochs, "pretrain_steps": steps,
            "pretrain_batch": recipe.pretrain_batch, "pretrain_lr": recipe.pretrain_lr,
            "pretrain_dropout": recipe.pretrain_dropout, "finetune_dropout": recipe.finetune_dropout,
            "pretrain_seconds": round(seconds, 1), "median_logged_step_seconds": round(step_seconds, 3),
            "final_pretrain_loss": loss, "curve": curve,
            "whole_recipe_seconds": round(seconds + curve[-1]["seconds"], 1)}


def pretrain_timing(run: Path) -> tuple[float, float, float]:
    """(training wall seconds, median logged step seconds, last logged loss) from the run's metrics: the logged
    timestamps span the run, so a run reused from an earlier invocation reports its real duration."""
    from c4prep.training.metrics_log import read_metrics

    records = [r for r in read_metrics(run / "metrics.jsonl") if r["split"] == "train"]
    steps = sorted(r["metrics"]["step_seconds"] for r in records)
    first = records[0]
    seconds = records[-1]["time"] - first["time"] + first["step"] * first["metrics"]["step_seconds"]
    return seconds, steps[len(steps) // 2], records[-1]["metrics"]["loss"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("a5_runs"))
    parser.add_argument("--vanilla-epochs", type=int, default=100)
    parser.add_argument("--synthesizer-epochs", type=int, default=20)
    parser.add_argument("--checkpoint-epochs", type=int, default=20)
    parser.add_argument("--skip-nopretrain", action="store_true")
    parser.add_argument("--pretrain-batch", type=int, default=128, help="handout: 128")
    parser.add_argument("--pretrain-lr", type=float, default=6e-3, help="handout: 6e-3")
    parser.add_argument("--pretrain-dropout", type=float, default=0.1, help="handout: 0.1")
    parser.add_argument("--finetune-dropout", type=float, default=0.1, help="handout: 0.1")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
                              "london_dev_accuracy": london_baseline()}
    if not args.skip_nopretrain:
        report["no_pretraining"] = finetune(args.workdir, "nopretrain", f"trainer.max_steps={NOPRETRAIN_STEPS}")
    report["vanilla"] = pretrain_and_finetune(args.workdir, "causal", args.vanilla_epochs, args.checkpoint_epochs,
                                              args)
    if args.synthesizer_epochs:
        report["synthesizer"] = pretrain_and_finetune(args.workdir, "synthesizer", args.synthesizer_epochs,
                                                      args.checkpoint_epochs, args)
    (args.workdir / "report.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
