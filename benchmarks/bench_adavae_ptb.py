"""AdaVAE on PTB: the plain LM, full fine-tuning VAE, AdaVAE and one-factor ablations, same backbone and budget.

Every variant trains ``--steps`` steps from the same self-pretrained word-level GPT (``experiment=ptb_gpt_pretrain``,
trained here first unless ``--backbone`` names a run) and is evaluated on the whole PTB test file (``stage=evaluate``:
IW-NLL with ``--iw-samples``, per-word PPL, -ELBO, KL, MI, AU). The ``lm`` variant is the backbone trained further
as a plain LM with the same budget (``experiment=adavae_ptb_lm``), scored exactly; the ``backbone`` row is the
backbone as it is. Results: ``<workdir>/results.json``, a markdown
table (mean +- std over seeds) on stdout and PNG plots of the beta/KL schedule and of the metric table.

    python benchmarks/bench_adavae_ptb.py --workdir /tmp/adavae_bench --steps 3000 --seeds 0 1 2 --iw-samples 100

``--report-only`` tabulates and plots the runs already finished in ``--workdir`` (any seeds per variant).
``--evaluations DIR`` keeps each run's evaluation (and the table and plots) in ``DIR/<run>/`` instead of the run
directory, so finished runs can be evaluated again with another ``--iw-samples`` without retraining them.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import torch
from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.data.batches import collate_rows
from c4prep.training.data.sentence_files import (
    VOCABULARY_FILE,
    SentenceRows,
    WordVocabulary,
    encode_sentences,
    read_sentences,
    word_counts,
)
from c4prep.training.metrics import seed_summary
from c4prep.training.metrics_log import read_metrics
from c4prep.training.stages.model_setup import model_from_checkpoint
from c4prep.training.batch_losses import DecoderLoss
from c4prep.training.experiments.adavae.vae_objective import cyclic_beta

PTB = Path(__file__).resolve().parents[2] / "shared" / "data" / "ptb"
QUIET = ["trainer.progress=false", "trainer.tensorboard=false", "trainer.device=cpu", "trainer.num_workers=0"]

LM = "lm"
VAE = ["experiment=adavae_ptb"]
# name -> train overrides: the plain LM, then one factor changed from "adavae" each (except ft_vae: Optimus-like)
VARIANTS: dict[str, list[str]] = {
    LM: ["experiment=adavae_ptb_lm"],
    "adavae": VAE,
    "ft_vae": [*VAE, "model.peft=full", "model.pooling=lg", "model.injection=[atm,embedding]"],
    "pooling_lg": [*VAE, "model.pooling=lg"],
    "injection_atm": [*VAE, "model.injection=[atm]"],
    "peft_prefix": [*VAE, "model.peft=prefix"],
    "peft_full": [*VAE, "model.peft=full"],
    "lambda_0.1": [*VAE, "objective.kl_rate=0.1"],
    "lambda_1.0": [*VAE, "objective.kl_rate=1.0"],
}
METRICS = ("nll", "ppl_word", "ppl_token", "neg_elbo", "kl", "reconstruction", "mi", "au", "adavae_code_ppl_word")


def train(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "c4prep.training.cli", *args, *QUIET], check=True)
    return time.perf_counter() - started


@torch.no_grad()
def lm_test_metrics(run: Path) -> dict[str, float]:
    """A GPT run's exact test log-likelihood: per-word (words + 1) and per-token PPL."""
    model = model_from_checkpoint(load_checkpoint(run)).eval()
    vocab = WordVocabulary.load(run / VOCABULARY_FILE)
    sentences = read_sentences(PTB / "test.txt")
    examples, _ = encode_sentences(sentences, vocab, max_words=64)
    words = word_counts(sentences, max_words=64)
    rows = SentenceRows.from_examples(examples, words, vocab, model.config.block_size)
    batches = (collate_rows([rows(i, 0) for i in range(first, min(first + 128, len(rows)))])
               for first in range(0, len(rows), 128))
    sums = [DecoderLoss().eval_sums(model, batch) for batch in batches]
    total = -sum(float(s["loss_sum"]) for s in sums)
    tokens = sum(int(s["targets"]) for s in sums)
    return {"nll": -total / len(rows), "ppl_word": math.exp(-total / (sum(words) + len(rows))),
            "ppl_token": math.exp(-total / tokens), "n_sentences": len(rows)}


def summarise(runs: dict[str, list[dict]]) -> dict[str, dict[str, dict[str, float]]]:
    """``seed_summary`` (mean, sample std, runs) of every metric, per variant."""
    table = {}
    for name, results in runs.items():
        table[name] = {}
        for metric in METRICS:
            values = [r[metric] for r in results if metric in r]
            if values:
                table[name][metric] = seed_summary(values)
    return table


def _cell(value: dict[str, float] | None) -> str:
    if value is None:
        return "–"
    return f"{value['mean']:.2f}" if value["runs"] == 1 else f"{value['mean']:.2f} ± {value['std']:.2f}"


def trainable_shares(parameters: dict[str, int]) -> str:
    """Trainable parameters as a share of the backbone and of the whole model (an evaluation's ``parameters``)."""
    return (f"{100 * parameters['trainable'] / parameters['backbone']:.1f}% | "
            f"{100 * parameters['trainable'] / parameters['total']:.1f}%")


def markdown(table: dict[str, dict[str, dict[str, float]]], runs: dict[str, list[dict]]) -> str:
    lines = ["| variant | runs | trainable / backbone | trainable / total | " + " | ".join(METRICS) + " |",
             "|---|---|---|---|" + "---|" * len(METRICS)]
    for name, row in table.items():
        cells = [_cell(row.get(m)) for m in METRICS]
        parameters = runs[name][0].get("parameters")
        shares = trainable_shares(parameters) if parameters else "– | –"
        lines.append(f"| {name} | {len(runs[name])} | {shares} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(workdir: Path, table: dict, schedule_run: Path, iw_samples: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [r for r in read_metrics(schedule_run / "metrics.jsonl") if r["split"] == "train"]
    steps = [r["step"] for r in records]
    total = max(steps)
    figure, left = plt.subplots(figsize=(8, 3.5))
    left.plot(range(1, total + 1), [cyclic_beta(step, total) for step in range(total)], color="tab:blue",
              label="beta (schedule)")
    left.set_xlabel("step")
    left.set_ylabel("beta")
    right = left.twinx()
    right.plot(steps, [r["metrics"]["kl"] for r in records], "o-", color="tab:red", label="KL (logged steps)")
    right.set_ylabel("KL (nats / sentence)")
    figure.legend(loc="upper right")
    left.set_title("AdaVAE on PTB: cyclic beta and the posterior KL")
    figure.tight_layout()
    figure.savefig(workdir / "adavae_kl_beta.png", dpi=120)

    names = list(table)
    figure, axes = plt.subplots(1, 4, figsize=(14, 3.5))
    for axis, metric in zip(axes, ("ppl_word", "neg_elbo", "mi", "au")):
        cells = [table[n].get(metric, {"mean": math.nan, "std": 0.0}) for n in names]
        means, errors = [c["mean"] for c in cells], [c["std"] for c in cells]
        axis.bar(range(len(names)), means, yerr=errors, color="tab:gray")
        axis.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
        axis.set_title(metric)
    figure.suptitle(f"AdaVAE on PTB: mean and std over seeds; PPL from the IW estimate with K = {iw_samples}")
    figure.tight_layout()
    figure.savefig(workdir / "adavae_metrics.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--backbone", type=Path, help="a finished ptb_gpt_pretrain run (trained here if absent)")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--iw-samples", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: tabulate the finished runs among --variants x --seeds")
    parser.add_argument("--evaluations", type=Path,
                        help="evaluate into DIR/<run>/ (default: the run directory), e.g. to add K=100 to K=10 runs")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    evaluations = args.evaluations.resolve() if args.evaluations else workdir
    threads = [f"trainer.num_threads={args.threads}"]
    backbone = args.backbone.resolve() if args.backbone else workdir / "backbone"
    if not (backbone / VOCABULARY_FILE).exists():
        elapsed = train(["experiment=ptb_gpt_pretrain", f"output_dir={backbone}", *threads])
        print(f"pretrained the backbone in {backbone} ({elapsed:.0f} s)")
    runs: dict[str, list[dict]] = {"backbone": [lm_test_metrics(backbone)]}
    seconds: dict[str, list[float]] = {}
    vae_runs: list[Path] = []
    for name in args.variants:
        for seed in args.seeds:
            run = workdir / f"{name}_seed{seed}"
            common = [*VARIANTS[name], f"seed={seed}", *threads]
            evaluation = evaluations / run.name / "evaluation.json"
            if args.report_only and not evaluation.exists():
                continue
            if not evaluation.exists():
                if not (run / "checkpoints" / f"step_{args.steps:08d}.pt").exists():
                    elapsed = train([*common, f"init_from={backbone}", f"output_dir={run}",
                                     f"trainer.max_steps={args.steps}",
                                     f"schedule.options.warmup_steps={args.steps // 6}",
                                     f"trainer.eval_every={args.steps // 4}", f"trainer.checkpoint_every={args.steps}",
                                     "trainer.log_every=10"])
                    seconds.setdefault(name, []).append(elapsed)
                if name == LM:
                    evaluation.parent.mkdir(parents=True, exist_ok=True)
                    evaluation.write_text(json.dumps(lm_test_metrics(run), indent=2) + "\n")
                else:
                    train([*common, "stage=evaluate", f"init_from={run}", f"output_dir={evaluation.parent}",
                           f"evaluate.iw_samples={args.iw_samples}"])
            result = json.loads(evaluation.read_text())
            runs.setdefault(name, []).append(result)
            if name != LM:
                vae_runs.append(run)
    if len(runs) == 1:
        raise SystemExit(f"no finished runs of {args.variants} x seeds {args.seeds} in {workdir}")
    table = summarise(runs)
    (evaluations / "results.json").write_text(json.dumps({"settings": vars(args) | {"workdir": str(workdir),
                                                      "backbone": str(backbone)},
                                                      "runs": runs, "train_seconds": seconds}, indent=2,
                                                     default=str) + "\n")
    print(markdown(table, runs))
    if vae_runs:
        samples = sorted({r["iw_samples"] for results in runs.values() for r in results if "iw_samples" in r})
        plot(evaluations, table, vae_runs[0], "/".join(map(str, samples)))


if __name__ == "__main__":
    main()
