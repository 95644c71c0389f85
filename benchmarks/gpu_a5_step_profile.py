"""Where an optimizer step of the CS224N A5 pretraining goes on one CUDA GPU: host, device, waits (#23).

Builds the real trainer of ``train experiment=cs224n_a5_pretrain``, as the recipe benchmark's ``--variant`` trains it
(``benchmarks/gpu_a5_recipe.py``: attention, precision, speed options, loader workers), with any further
``key=value`` overrides after it, runs ``--warmup`` steps (compilation and CUDA-graph recording happen there and are
timed apart), times ``--steps`` steps, then records ``--profile-steps`` steps with ``torch.profiler``. Prints one JSON
line:

- ``step_ms``: wall time of a step (median over the timed steps, the device synchronised at both ends of each);
- ``device_busy_ms``: kernel time per profiled step (sum of the GPU's kernel durations), and its share of the wall;
- ``host_wait_ms``: host time per step blocked on the device (the ``aten::_local_scalar_dense`` of ``.item()``);
- ``launches``: kernel launches and CUDA-graph replays per step;
- ``data_fraction``: share of the step spent waiting for the data loader;
- the ops with the most host time per step (``top_host``) and with the most kernel time (``top_device``);
- ``projected_pretraining_s``: the warm-up's seconds plus the recipe's other steps at the median step time, a
  projection (not a measurement) that ``--fastest-of`` ranks variants by: compiling costs seconds once, a step
  costs them 14,950 times.

    python benchmarks/gpu_a5_step_profile.py [--variant vanilla-bf16] [--device cuda] [--warmup 30] [--steps 200]
                                             [--profile-steps 20] [overrides ...]
    python benchmarks/gpu_a5_step_profile.py --fastest-of REPORT ...   # the lowest projected_pretraining_s
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from c4prep.training.config import load_config
from c4prep.training.experiments.cs224n_a5.stages import char_corruption_corpus
from c4prep.training.stages.run import rows_pretrain_trainer, start_run
from gpu_a5_recipe import LOADER_WORKERS, VARIANTS, phase_overrides

BASE = ["experiment=cs224n_a5_pretrain", "trainer.checkpoint_every=0", "trainer.progress=false",
        "trainer.tensorboard=false", "resume=never"]
HOST_WAIT_OPS = ("aten::_local_scalar_dense",)
LAUNCH_OPS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def a5_trainer(overrides: list[str], output_dir: str, device: str):
    cfg = load_config([*BASE, f"trainer.device={device}", f"output_dir={output_dir}", *overrides])
    corpus = char_corruption_corpus(cfg)
    return rows_pretrain_trainer(cfg, start_run(cfg), corpus)


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_steps(trainer, batches, steps: int) -> list[float]:
    seconds = []
    for _ in range(steps):
        synchronize()
        started = time.perf_counter()
        trainer._train_step(batches)
        trainer.step += 1
        synchronize()
        seconds.append(time.perf_counter() - started)
    return seconds


def per_step_table(averages, key: str, steps: int, top: int) -> list[dict[str, float | str]]:
    rows = sorted(averages, key=lambda a: getattr(a, key), reverse=True)[:top]
    return [{"op": a.key[:80], "ms": round(getattr(a, key) / 1000 / steps, 3), "calls": round(a.count / steps, 1)}
            for a in rows]


def fastest_variant(reports: list[Path]) -> str | None:
    """Of these reports (this script's output; a failed run's may be empty or missing), the variant with the lowest
    ``projected_pretraining_s``; None if no report has one."""
    projected = {}
    for path in reports:
        lines = path.read_text().splitlines() if path.is_file() else []
        try:
            report = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:  # cut off mid-line
            report = None
        if report:
            projected[report["variant"]] = report["projected_pretraining_s"]
    return min(projected, key=projected.get) if projected else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--profile-steps", type=int, default=20)
    parser.add_argument("--variant", default="vanilla-bf16", choices=list(VARIANTS),
                        help="the recipe variant whose pretraining is profiled")
    parser.add_argument("--output-dir", default="/tmp/a5_step_profile")
    parser.add_argument("--device", default="cuda", help="cpu: a smoke test of the script")
    parser.add_argument("--fastest-of", nargs="+", type=Path, metavar="REPORT",
                        help="print the variant of these reports with the lowest projected pretraining time "
                             "(nothing if none ran)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.fastest_of:
        print(fastest_variant(args.fastest_of) or "")
        return
    overrides = [*phase_overrides(args.variant)[0], f"trainer.num_workers={LOADER_WORKERS}", *args.overrides]
    trainer = a5_trainer(overrides, args.output_dir, args.device)
    batches = trainer.train_batches(0)
    warmup = sum(timed_steps(trainer, batches, args.warmup))
    seconds = timed_steps(trainer, batches, args.steps)
    data_seconds = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        started = time.perf_counter()
        for _ in range(args.profile_steps):
            data_seconds.append(trainer._train_step(batches).data_seconds)
            trainer.step += 1
        synchronize()
        profiled = time.perf_counter() - started
    n = args.profile_steps
    averages = prof.key_averages()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    device_busy = sum(e.device_time for e in kernels) / 1000 / n
    step_ms = statistics.median(seconds) * 1000
    print(json.dumps({
        "variant": args.variant, "overrides": overrides,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__, "warmup_steps": args.warmup, "warmup_s": round(warmup, 1),
        "step_ms": round(step_ms, 3), "step_ms_min": round(min(seconds) * 1000, 3),
        "projected_pretraining_s": round(warmup + step_ms / 1000 * (trainer.settings.max_steps - args.warmup), 1),
        "profiled_step_ms": round(profiled * 1000 / n, 3),
        "device_busy_ms": round(device_busy, 3), "device_busy_share": round(device_busy / (profiled * 1000 / n), 3),
        "host_wait_ms": round(sum(a.cpu_time_total for a in averages if a.key in HOST_WAIT_OPS) / 1000 / n, 3),
        "launches": round(sum(a.count for a in averages if a.key in LAUNCH_OPS) / n, 1),
        "kernels": round(len(kernels) / n, 1),
        "data_fraction": round(statistics.mean(data_seconds) / (profiled / n), 3),
        "top_host": per_step_table(averages, "self_cpu_time_total", n, 15),
        "top_device": per_step_table(averages, "self_device_time_total", n, 10),
    }), flush=True)


if __name__ == "__main__":
    main()
