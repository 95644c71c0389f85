"""Benchmark: training throughput (tokens/s) of our T5 against HF ``T5ForConditionalGeneration``, same config.

Both models get identical weights (ours copied into HF with ``to_hf_state_dict``), the same span-corruption batch
(T5's length plan: inputs 512, targets 114 by default; real noise masks and sentinels over random token ids,
vocabulary 32,100 ids padded to 32,128 rows, no padding, one example per row), the same precision (fp32, or bf16
autocast with fp32 weights as the trainer does), the same loss (mean token cross-entropy, ``token_cross_entropy``)
and the same optimizer step (``torch.optim.AdamW``, the trainer's default, lr 1e-4). Both are in ``train()`` mode
with dropout 0 (v1.1). HF runs with its default ``attn_implementation`` (printed; ``eager`` for T5 in transformers
4.57, which has no SDPA path for T5) and ``use_cache=False``, as a training loop calls it.

A step is forward, loss, backward, ``optimizer.step()`` and ``zero_grad``. After warm-up steps, variants are run
in interleaved rounds (ours, HF, HF, ours, ...), so load from other work on the machine hits all of them alike;
the table gives the median step time over all timed steps. Tokens/s counts encoder and decoder tokens,
``batch * (inputs_length + targets_length)``. ``--compile`` adds ``torch.compile(model)`` for both models (the
compile time of the first steps is reported separately, not in the medians), in ``--compile-mode`` (``default``,
or ``reduce-overhead`` for CUDA graphs, which take the host's launch time out of a step). ``--profile-steps N``
records N more steps of each variant under ``torch.profiler`` after the timing: kernels and kernel time per step,
and the ops with the most kernel time and with the most host time (where one model's step differs from the
other's). ``--flex`` adds our model with ``attention_impl=flex`` (FlexAttention; CUDA, dropout 0). ``--only``
builds and times some of the variants alone (e.g. ``--only "ours compiled" "ours flex compiled"``); each variant's
warm-up time (its compilation) is logged to stderr as it ends. ``--device cuda`` runs everything on the GPU with
the trainer's CUDA settings (TF32 matmuls for fp32, fused AdamW); a step's time ends with ``loss.item()``, which
waits for the step's kernels.

    python benchmarks/bench_t5_throughput.py [--size t5_small] [--batch 4] [--rounds 4] [--compile] [--flex]
                                             [--device cpu|cuda] [--quick]

Prints a JSON report and a Markdown table.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import transformers
from torch import nn
from torch.profiler import ProfilerActivity, profile

from c4prep.training.losses import token_cross_entropy
from c4prep.training.models.t5 import T5, num_parameters, t5_config
from c4prep.training.models.t5_hf import hf_config, hf_model
from c4prep.training.data.encdec_rows import make_autoregressive_inputs
from c4prep.training.objectives.lengths import random_spans_length_plan
from c4prep.training.objectives.noise import (
    nonnoise_span_to_unique_sentinel, noise_span_to_unique_sentinel, random_spans_noise_mask, with_eos)

VOCAB_SIZE = 32_100  # 32,000 SentencePiece pieces + 100 sentinels; the model pads the rows to 32,128
EOS_ID = 1
VARIANT_NAMES = ("ours", "HF", "ours flex", "ours compiled", "HF compiled", "ours flex compiled")


def span_corruption_batch(batch: int, inputs_length: int, seed: int) -> dict[str, torch.Tensor]:
    """One row per example: random ids 2..31,999 through T5's span corruption (density 0.15, mean span 3)."""
    raw_length, targets_length = random_spans_length_plan(inputs_length)
    rng = np.random.default_rng(seed)
    inputs, targets = [], []
    for _ in range(batch):
        tokens = rng.integers(2, 32_000, raw_length, dtype=np.int32)
        mask = random_spans_noise_mask(raw_length, 0.15, 3.0, rng)
        inputs.append(with_eos(noise_span_to_unique_sentinel(tokens, mask, VOCAB_SIZE), EOS_ID))
        targets.append(with_eos(nonnoise_span_to_unique_sentinel(tokens, mask, VOCAB_SIZE), EOS_ID))
    assert all(len(x) == inputs_length for x in inputs) and all(len(y) == targets_length for y in targets)
    targets_array = np.stack(targets)
    return {
        "encoder_input_tokens": torch.from_numpy(np.stack(inputs)).long(),
        "decoder_input_tokens": torch.from_numpy(make_autoregressive_inputs(targets_array)).long(),
        "decoder_target_tokens": torch.from_numpy(targets_array).long(),
        "decoder_loss_weights": torch.ones(targets_array.shape),
    }


def build_model(name: str, size: str, seed: int) -> nn.Module:
    """Variant ``name``'s own model, in train() mode (dropout 0 for v1.1): every variant starts from the same seeded
    weights (HF's and FlexAttention's copied from ours), so their first losses agree."""
    torch.manual_seed(seed)
    ours = T5(t5_config(size, VOCAB_SIZE))
    if name.startswith("HF"):
        return hf_model(ours).train()  # correct in transformers 4.x and 5.x (5.x ties a v1.1 head unless loaded so)
    if "flex" in name:
        flex = T5(dataclasses.replace(ours.config, attention_impl="flex"))
        flex.load_state_dict(ours.state_dict())
        return flex.train()
    return ours.train()


def selected_variants(args: argparse.Namespace) -> list[str]:
    """The variant names to time, in table order: FlexAttention with ``--flex``, compiled ones with ``--compile``,
    then only those named by ``--only``."""
    return [name for name in VARIANT_NAMES
            if (args.flex or "flex" not in name) and (args.compile or "compiled" not in name)
            and (not args.only or name in args.only)]


def count_parameters(size: str) -> int:
    with torch.device("meta"):
        return num_parameters(T5(t5_config(size, VOCAB_SIZE)))


def forward_ours(model: nn.Module) -> Callable[[dict], torch.Tensor]:
    return lambda batch: model(batch["encoder_input_tokens"], batch["decoder_input_tokens"])


def forward_hf(model: nn.Module) -> Callable[[dict], torch.Tensor]:
    def forward(batch: dict) -> torch.Tensor:
        tokens = batch["encoder_input_tokens"]
        return model(input_ids=tokens, attention_mask=(tokens != 0).long(),
                     decoder_input_ids=batch["decoder_input_tokens"], use_cache=False, return_dict=True).logits
    return forward


class Variant:
    """One model under test: a forward function, its optimizer and its step times."""

    def __init__(self, name: str, forward: Callable[[dict], torch.Tensor], parameters, bf16: bool,
                 device: torch.device):
        self.name, self.forward, self.bf16, self.device = name, forward, bf16, device
        self.optimizer = torch.optim.AdamW(parameters, lr=1e-4, fused=device.type == "cuda" or None)
        self.times: list[float] = []
        self.first_steps: list[float] = []
        self.losses: list[float] = []

    def step(self, batch: dict) -> float:
        start = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.forward(batch)
            total, count = token_cross_entropy(logits, batch["decoder_target_tokens"], batch["decoder_loss_weights"])
            loss = total / count
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.losses.append(loss.item())
        return time.perf_counter() - start


def profile_steps(variant: Variant, batch: dict, steps: int, top: int = 12) -> dict:
    """``steps`` more steps of ``variant`` under ``torch.profiler``: kernels and kernel milliseconds per step, and
    the ``top`` ops by their own kernel time and by their own host time."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if variant.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            variant.step(batch)
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    averages = prof.key_averages()

    def top_by(key: str) -> list[dict]:
        ops = sorted(averages, key=lambda a: getattr(a, key), reverse=True)[:top]
        return [{"op": a.key[:100], "ms": round(getattr(a, key) / 1000 / steps, 3), "calls": round(a.count / steps, 1)}
                for a in ops]
    return {"kernels_per_step": round(len(kernels) / steps, 1),
            "kernel_ms_per_step": round(sum(e.device_time for e in kernels) / 1000 / steps, 3),
            "top_ops": top_by("self_device_time_total"), "top_host_ops": top_by("self_cpu_time_total")}


def bench_precision(args: argparse.Namespace, precision: str, batch: dict) -> list[dict]:
    """The selected variants of one precision: fresh identical models, warm-up, then interleaved timed rounds."""
    bf16, device = precision == "bf16", torch.device(args.device)
    variants = []
    for name in selected_variants(args):  # each its own model and optimizer, built only when timed
        model = build_model(name, args.size, args.seed).to(device)
        timed = torch.compile(model, mode=args.compile_mode) if "compiled" in name else model
        forward = forward_hf(timed) if name.startswith("HF") else forward_ours(timed)
        variants.append(Variant(name, forward, model.parameters(), bf16, device))
    failed = []
    for variant in variants:
        try:
            for _ in range(args.warmup):
                variant.first_steps.append(variant.step(batch))
            print(f"{precision} {variant.name}: {args.warmup} warm-up steps in {sum(variant.first_steps):.1f} s",
                  file=sys.stderr, flush=True)  # logged as it happens: a run cut short still shows its compiles
        except Exception as error:  # noqa: BLE001 - e.g. a kernel that does not compile: recorded, the others run
            failed.append({"precision": precision, "model": variant.name, "error": repr(error)[:500]})
    variants = [v for v in variants if v.name not in {f["model"] for f in failed}]
    for round_index in range(args.rounds):
        order = variants if round_index % 2 == 0 else variants[::-1]
        for variant in order:
            for _ in range(args.steps_per_round):
                variant.times.append(variant.step(batch))
    tokens = batch["encoder_input_tokens"].numel() + batch["decoder_target_tokens"].numel()
    rows = []
    for variant in variants:
        median = statistics.median(variant.times)
        rows.append({"precision": precision, "model": variant.name, "median_step_s": round(median, 4),
                     "tokens_per_s": round(tokens / median, 1),
                     "min_step_s": round(min(variant.times), 4), "max_step_s": round(max(variant.times), 4),
                     "timed_steps": len(variant.times), "steps_s": [round(t, 3) for t in variant.times],
                     "warmup_steps_s": [round(t, 3) for t in variant.first_steps],
                     "first_loss": round(variant.losses[0], 6)})
        if args.profile_steps:
            rows[-1]["profile"] = profile_steps(variant, batch, args.profile_steps)
    return rows + failed


def device_name(args: argparse.Namespace) -> str:
    if args.device == "cuda":
        return f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
    return f"{platform.processor() or platform.machine()}, {args.threads} threads"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="t5_small", help="a name from c4prep.training.models.t5.SIZES")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--inputs-length", type=int, default=512, help="targets length follows T5's plan (114)")
    parser.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per variant (compiles happen here)")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved timing rounds")
    parser.add_argument("--steps-per-round", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile(model) for both")
    parser.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead"],
                        help="torch.compile's mode for both models (reduce-overhead: CUDA graphs on a GPU)")
    parser.add_argument("--flex", action="store_true", help="also time our model with attention_impl=flex")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--only", nargs="+", default=[], choices=VARIANT_NAMES, metavar="MODEL",
                        help=f"time only these variants, of: {', '.join(map(repr, VARIANT_NAMES))}")
    parser.add_argument("--json", type=str, default="", help="also write the JSON report to this file")
    parser.add_argument("--quick", action="store_true", help="batch 2, 1 warm-up, 4 rounds of 1 step (with "
                        "--compile the warm-up still includes the compilation, about a minute per model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="after the timing, profile this many steps of each variant (kernels per step, top ops)")
    args = parser.parse_args()
    if args.flex and args.device != "cuda":
        parser.error("--flex needs --device cuda (flex_attention has no backward pass on the CPU)")
    if args.quick:
        args.batch, args.warmup, args.rounds, args.steps_per_round = 2, 1, 4, 1
    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        torch.set_float32_matmul_precision("high")  # as the trainer does on CUDA (trainer.tf32)
    transformers.logging.set_verbosity_error()
    batch = {k: v.to(args.device) for k, v in
             span_corruption_batch(args.batch, args.inputs_length, args.seed).items()}
    probe = transformers.T5ForConditionalGeneration(transformers.T5Config(
        **hf_config(t5_config("t5_tiny", VOCAB_SIZE))))
    report: dict = {
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "python": platform.python_version(), "torch": torch.__version__, "device": device_name(args),
                    "transformers": transformers.__version__, "load_avg_start": os.getloadavg()},
        "setup": {"size": args.size, "batch": args.batch, "compile_mode": args.compile_mode,
                  "inputs_length": batch["encoder_input_tokens"].shape[1],
                  "targets_length": batch["decoder_target_tokens"].shape[1],
                  "tokens_per_step": batch["encoder_input_tokens"].numel() + batch["decoder_target_tokens"].numel(),
                  "parameters": count_parameters(args.size),
                  "hf_attn_implementation": probe.config._attn_implementation,
                  "optimizer": "torch.optim.AdamW(lr=1e-4), defaults", "warmup": args.warmup,
                  "rounds": args.rounds, "steps_per_round": args.steps_per_round},
        "results": [],
    }
    for precision in args.precision:
        report["results"] += bench_precision(args, precision, batch)
    report["machine"]["load_avg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))

    setup = report["setup"]
    print(f"\n{args.size}, batch {setup['batch']} x ({setup['inputs_length']} + {setup['targets_length']}) = "
          f"{setup['tokens_per_step']:,} tokens/step, {report['machine']['torch_threads']} threads, "
          f"HF attn_implementation={setup['hf_attn_implementation']}\n")
    print("| precision | model | median step s | tokens/s | vs HF eager | vs HF same mode | first loss |")
    print("|---|---|---:|---:|---:|---:|---:|")
    timed = [row for row in report["results"] if "error" not in row]
    for row in timed:
        same = {r["model"]: r["median_step_s"] for r in timed if r["precision"] == row["precision"]}
        ratios = [f"{same[hf] / row['median_step_s']:.2f}x" if hf in same else "-"
                  for hf in ("HF", "HF compiled" if "compiled" in row["model"] else "HF")]
        print(f"| {row['precision']} | {row['model']} | {row['median_step_s']:.3f} | {row['tokens_per_s']:,.0f} | "
              f"{ratios[0]} | {ratios[1]} | {row['first_loss']:.5f} |")
    for row in report["results"]:
        if "error" in row:
            print(f"\n{row['precision']} {row['model']} failed in its warm-up: {row['error']}")
    machine = report["machine"]
    print(f"\nLoad average: {machine['load_avg_start']} at start, {machine['load_avg_end']} at end.")


if __name__ == "__main__":
    main()
