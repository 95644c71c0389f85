"""GPU tier, training (marker ``gpu``: skipped without CUDA; benchmarks/gpu_suite.sh runs it): bf16 tracks fp32 on
short A5, T5, AdaVAE and GPT-1 classification runs, FlexAttention trains as the dense path does, ``trainer.compile``
(A5, the whole model or its repeated block; T5 under CUDA graphs), whole steps captured as CUDA graphs
(``trainer.capture_steps``), the loader's pinned micro-batches and the CUDA trainer options
(``trainer.loss_check=log`` under CUDA graphs among them), resume, and torchrun.

The A5 cases place issue #23's divergence: c4prep's attention (written out for dropout in bf16 on CUDA), SDPA as
PyTorch picks (memory-efficient for the packed rows' mask), its math backend, and flash or memory-efficient alone on
unpacked rows. On an H200 only the memory-efficient kernel diverged (marked xfail, strict).
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from c4prep.manifest import build_manifest, write_manifest
from c4prep.shards import shard_name, write_shard
from c4prep.tokenization.token_shards import token_batch, token_schema
from c4prep.training.checkpoint import load_checkpoint
from c4prep.training.config import load_config
from c4prep.training.data.batches import make_loader
from c4prep.training.metrics_log import read_metrics
from c4prep.training.models import gpt_attention
from c4prep.training.stages import run_stage
from test_packed_batches import WorkerStream
from test_trainer_speed import gpt_trainer

pytestmark = pytest.mark.gpu
QUIET = ["trainer.device=cuda", "trainer.tensorboard=false", "trainer.progress=false"]
BACKENDS = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
# The handout recipe's first 1,150 steps (50 epochs; the cosine runs over its token budget, so shortening max_steps
# keeps the schedule). Issue #23's bf16 run was at 2.79 there, fp32 at 2.18. Tolerances from two runs of the tier on
# an H200 (thirteenth session): fp32 references of one configuration, each in its own process, ended at 2.135-2.280;
# bf16 runs that train ended 0.07 below to 0.12 above their reference with gradient norms 0.8-1.6x; the diverging
# kernel ended 0.54-1.01 above with gradient norms 16-1,360x.
A5_STEPS, A5_TAIL, A5_TOLERANCE, A5_GRAD_NORM_RATIO = 1150, 115, 0.25, 4.0
A5_CASES = {  # id: (model.attention, SDPA backends in bf16 (None: PyTorch's choice), data.pack, force SDPA)
    "vanilla-recipe": ("causal", None, True, False),  # c4prep's choice: written out (dropout in bf16 on CUDA)
    "vanilla-fused": ("causal", None, True, True),  # the issue's run: memory-efficient for the packed rows' mask
    "vanilla-math": ("causal", "math", True, True),
    "vanilla-flash-unpacked": ("causal", "flash", False, True),
    "vanilla-efficient-unpacked": ("causal", "efficient", False, True),
    "synthesizer": ("synthesizer", None, True, False),
}
# Measured on an H200 (torch 2.11+cu130): bf16 tails 2.85 and 2.72 against fp32 2.28 and 2.21, gradient norms 52 and 40
# against 0.15, although each call of the kernel passes tests/test_gpu.py. Strict: when PyTorch fixes the kernel these
# cases pass, the suite fails, and writes_attention_out can hand dropout back to SDPA.
EFFICIENT_DROPOUT_DIVERGES = pytest.mark.xfail(
    strict=True, reason="SDPA's memory-efficient kernel with dropout 0.1 diverges A5 training in bf16")
T5_STEPS, T5_TAIL, T5_TOLERANCE = 400, 50, 0.05
# AdaVAE and GPT-1 classification: not yet run on a GPU, so the bound is relative and wide (10 % of fp32's tail) next
# to the divergence it is there to catch; the first run on a GPU records the real gaps (record_property).
OTHER_STEPS, OTHER_TAIL, OTHER_TOLERANCE = 300, 30, 0.10


def train(overrides: list[str], backend: str | None = None) -> tuple[list[float], list[float]]:
    """An in-process `train` run: (loss of every step, logged gradient norms)."""
    cfg = load_config([*overrides, *QUIET])
    with sdpa_kernel([BACKENDS[backend]]) if backend else nullcontext():
        losses = run_stage(cfg)["losses"]
    records = read_metrics(Path(cfg.output_dir) / "metrics.jsonl")
    return losses, [r["metrics"]["grad_norm"] for r in records if r["split"] == "train"]


def tail(losses: list[float], count: int) -> float:
    return sum(losses[-count:]) / count


def a5(shared_data: Path, run_dir: Path, *overrides: str) -> list[str]:
    return ["experiment=cs224n_a5_pretrain", f"data.corpus={shared_data / 'cs224n_a5' / 'wiki.txt'}",
            f"output_dir={run_dir}", "trainer.checkpoint_every=0", *overrides]


@pytest.fixture(scope="module")
def a5_fp32(shared_data, tmp_path_factory):
    """fp32 reference curve per attention, computed once."""
    curves: dict[str, tuple[list[float], list[float]]] = {}

    def reference(attention: str):
        if attention not in curves:
            run_dir = tmp_path_factory.mktemp("a5") / f"{attention}_fp32"
            curves[attention] = train(a5(shared_data, run_dir, f"model.attention={attention}",
                                         f"trainer.max_steps={A5_STEPS}", "trainer.precision=fp32"))
        return curves[attention]
    return reference


@pytest.mark.parametrize("case", [pytest.param(case, marks=EFFICIENT_DROPOUT_DIVERGES) if "fused" in case or
                                  "efficient" in case else case for case in A5_CASES])
def test_a5_bf16_tracks_fp32(case, a5_fp32, shared_data, tmp_path, monkeypatch, record_property):
    attention, backend, pack, force_sdpa = A5_CASES[case]
    if force_sdpa:
        monkeypatch.setattr(gpt_attention, "writes_attention_out", lambda q, dropout_p: False)
    fp32, fp32_norms = a5_fp32(attention)
    bf16, bf16_norms = train(a5(shared_data, tmp_path, f"model.attention={attention}", f"trainer.max_steps={A5_STEPS}",
                                "trainer.precision=bf16", f"data.pack={str(pack).lower()}"), backend)
    assert_bf16_tracks_fp32((bf16, bf16_norms), (fp32, fp32_norms), A5_TAIL, A5_TOLERANCE, record_property, case)


def assert_bf16_tracks_fp32(bf16_run: tuple[list[float], list[float]], fp32_run: tuple[list[float], list[float]],
                            count: int, within: float, record_property, label: str = "") -> None:
    """bf16's mean loss over the last ``count`` steps within ``within`` of fp32's, and its last gradient norm at most
    A5_GRAD_NORM_RATIO times fp32's (A5's divergence: 24-47 % above in loss, 16-1,364x in gradient norm)."""
    (bf16, bf16_norms), (fp32, fp32_norms) = bf16_run, fp32_run
    tails = [tail(bf16, count), tail(fp32, count)]
    record_property("tails_bf16_fp32", [round(value, 4) for value in tails])
    record_property("grad_norms_bf16_fp32", [bf16_norms[-1], fp32_norms[-1]])
    message = (f"{label}: bf16 {tails[0]:.4f} vs fp32 {tails[1]:.4f}; "
               f"last grad norms {bf16_norms[-1]:.3g} vs {fp32_norms[-1]:.3g}")
    assert abs(tails[0] - tails[1]) <= within, message
    assert bf16_norms[-1] <= A5_GRAD_NORM_RATIO * fp32_norms[-1], message


@pytest.fixture(scope="module")
def ptb_tokens(ptb_vocab, shared_data, tmp_path_factory) -> Path:
    """Token shards of PTB train (each line a document, EOS appended) in the 600-id T5-style vocabulary."""
    lines = (shared_data / "ptb" / "train.txt").read_text().splitlines()
    folder = tmp_path_factory.mktemp("ptb_tokens")
    schema = token_schema(ptb_vocab.vocab_size)
    ids = [np.asarray(a) for a in ptb_vocab.encode_arrays(lines, add_eos=True)]
    info = write_shard(str(folder / shard_name("train", 0, 1)), schema,
                       [token_batch(schema, ids, [f"ptb://{i}" for i in range(len(ids))])])
    write_manifest(str(folder), build_manifest(schema, [info], config={}, counters={},
                                               extra={"vocabulary": {"vocab_size": ptb_vocab.vocab_size}}))
    return folder


def t5(tokens: Path, run_dir: Path, *overrides: str) -> list[str]:
    """t5_sample's narrow T5 v1.1 and Adafactor recipe on the PTB tokens (later overrides win)."""
    return ["experiment=t5_sample", f"data.tokens={tokens}", "data.validation_split=null", f"output_dir={run_dir}",
            "trainer.eval_every=0", "trainer.checkpoint_every=0", f"trainer.max_steps={T5_STEPS}", *overrides]


ADAMW_3E3 = ["optimizer=adamw", "optimizer.lr=3e-3", "schedule=constant", "~schedule.options.linear_decay_fraction",
             "schedule.options.warmup_steps=50"]


@pytest.mark.parametrize("optimizer", [[], ADAMW_3E3], ids=["adafactor-t5-sample", "adamw-3e-3"])
def test_t5_bf16_tracks_fp32_with_dropout(optimizer, ptb_tokens, tmp_path, record_property):
    """T5 with dropout 0.1 at t5_sample's Adafactor rate (0.058) and a high AdamW rate: bf16 on the written-out
    attention (dropout in bf16 on CUDA, ``writes_attention_out``) against fp32 on SDPA's memory-efficient kernel,
    which takes the float position bias."""
    curves = {precision: train(t5(ptb_tokens, tmp_path / precision, "model.dropout_rate=0.1",
                                  f"trainer.precision={precision}", *optimizer))[0] for precision in ("fp32", "bf16")}
    record_property("tails", {name: round(tail(curve, T5_TAIL), 4) for name, curve in curves.items()})
    assert abs(tail(curves["bf16"], T5_TAIL) - tail(curves["fp32"], T5_TAIL)) <= T5_TOLERANCE


def test_t5_flex_trains_as_dense(ptb_tokens, tmp_path, record_property):
    curves = {impl: train(t5(ptb_tokens, tmp_path / impl, "trainer.precision=bf16", "trainer.max_steps=200",
                             f"+model.attention_impl={impl}"))[0] for impl in ("dense", "flex")}
    # flex adds the bias in fp32 inside its kernel, dense rounds it to bf16: as far apart as bf16 and fp32 may be
    # (H200: 3.458 flex vs 3.485 dense).
    assert_same_t5_curve(curves, "flex", "dense", record_property)


def assert_same_t5_curve(curves: dict[str, list[float]], name: str, reference: str, record_property) -> None:
    """``curves[name]`` starts where ``curves[reference]`` starts and ends within T5_TOLERANCE of it."""
    record_property("tails", {key: round(tail(curve, T5_TAIL), 4) for key, curve in curves.items()})
    assert curves[name][0] == pytest.approx(curves[reference][0], abs=1e-2)
    assert abs(tail(curves[name], T5_TAIL) - tail(curves[reference], T5_TAIL)) <= T5_TOLERANCE


@pytest.fixture(scope="module")
def ptb_backbone(tmp_path_factory) -> Path:
    """A word-level GPT (gpt_nano) on PTB with dropout 0.1, 200 steps in fp32: the AdaVAE stage's backbone."""
    run_dir = tmp_path_factory.mktemp("ptb_gpt") / "lm"
    train(["experiment=ptb_gpt_pretrain", "+model.dropout=0.1", "trainer.max_steps=200", "trainer.eval_every=0",
           "trainer.checkpoint_every=0", f"output_dir={run_dir}"])
    return run_dir


def test_adavae_bf16_tracks_fp32(ptb_backbone, tmp_path, record_property):
    """AdaVAE (adapters, Latent Attention, latent injection into the backbone's attention; dropout 0.1 from the
    backbone) trains in bf16 as in fp32: the issue asked that no other model path share A5's divergence."""
    runs = {precision: train(["experiment=adavae_ptb", f"init_from={ptb_backbone}", f"trainer.precision={precision}",
                              f"trainer.max_steps={OTHER_STEPS}", "trainer.eval_every=0", "trainer.checkpoint_every=0",
                              f"output_dir={tmp_path / precision}"]) for precision in ("fp32", "bf16")}
    assert_other_path_tracks(runs, record_property, "adavae")


def test_gpt1_classification_bf16_tracks_fp32(ptb_vocab, tmp_path, record_property):
    """GPT-1 fine-tuning on Yelp (classifier head, auxiliary LM loss; dropout 0.1 throughout), from a fresh gpt_nano
    (the path, not the accuracy, is what is checked), in bf16 as in fp32."""
    vocab = tmp_path / "ptb.model"
    vocab.write_bytes(ptb_vocab.model_proto)
    runs = {precision: train(["stage=finetune", "data=yelp_sentiment", f"data.vocab={vocab}", "model=gpt_nano",
                              "+model.dropout=0.1", "optimizer=adamw", "optimizer.lr=1e-3", "schedule=constant",
                              "trainer.global_batch_size=32", "trainer.micro_batch_size=32",
                              f"trainer.max_steps={OTHER_STEPS}", "trainer.eval_every=0", "trainer.checkpoint_every=0",
                              f"trainer.precision={precision}", f"output_dir={tmp_path / precision}"])
            for precision in ("fp32", "bf16")}
    assert_other_path_tracks(runs, record_property, "gpt1-classification")


def assert_other_path_tracks(runs: dict[str, tuple[list[float], list[float]]], record_property, label: str) -> None:
    """:func:`assert_bf16_tracks_fp32` over OTHER_TAIL steps, within OTHER_TOLERANCE of fp32's tail (relative)."""
    within = OTHER_TOLERANCE * tail(runs["fp32"][0], OTHER_TAIL)
    assert_bf16_tracks_fp32(runs["bf16"], runs["fp32"], OTHER_TAIL, within, record_property, label)


@pytest.mark.parametrize("scope", ["model", "blocks"])
def test_compiled_a5_trains_as_eager(scope, shared_data, tmp_path, record_property):
    """trainer.compile=true (bf16), the whole model or its repeated block (``trainer.compile_scope``): compiled
    dropout draws other random numbers, so the curves agree on average."""
    compiled = ["trainer.compile=true", f"trainer.compile_scope={scope}"]
    curves = {mode: train(a5(shared_data, tmp_path / mode, "trainer.max_steps=230", "trainer.precision=bf16",
                             *(compiled if mode == "compiled" else [])))[0] for mode in ("eager", "compiled")}
    record_property("tails", {name: round(tail(curve, A5_TAIL), 4) for name, curve in curves.items()})
    assert abs(tail(curves["compiled"], A5_TAIL) - tail(curves["eager"], A5_TAIL)) <= A5_TOLERANCE


def test_t5_under_cuda_graphs_trains_as_eager(ptb_tokens, tmp_path, record_property):
    """T5 pretraining with trainer.compile_mode=reduce-overhead (where bench_t5_throughput.py measured both T5 models
    at their kernel time): its span-corruption rows have one shape, so one graph is recorded; no dropout (v1.1)."""
    curves = {mode: train(t5(ptb_tokens, tmp_path / mode, "trainer.precision=bf16", "trainer.max_steps=200",
                             *(["trainer.compile=true", "trainer.compile_mode=reduce-overhead"] if mode == "graphs"
                               else [])))[0] for mode in ("eager", "graphs")}
    assert_same_t5_curve(curves, "graphs", "eager", record_property)


def test_losses_read_at_log_steps_under_cuda_graphs(shared_data, tmp_path):
    """trainer.loss_check=log with CUDA graphs on re-packed rows: the queued losses, read after later steps replayed
    the graphs, are the losses read every step (no dropout, so both runs draw nothing; atomics allow rounding)."""
    common = ["trainer.max_steps=30", "trainer.log_every=10", "trainer.precision=bf16", "+model.dropout=0.0",
              "trainer.compile=true", "trainer.compile_mode=reduce-overhead"]
    every_step, _ = train(a5(shared_data, tmp_path / "step", *common))
    at_logs, _ = train(a5(shared_data, tmp_path / "log", *common, "trainer.loss_check=log"))
    assert at_logs == pytest.approx(every_step, rel=1e-3)


CAPTURED = ["trainer.capture_steps=true", "trainer.loss_check=log"]


@pytest.mark.parametrize("compiled", [[], ["trainer.compile=true"],
                                      ["trainer.compile=true", "trainer.compile_scope=blocks"]],
                         ids=["eager-kernels", "compiled", "compiled-blocks"])
def test_a5_captured_steps_train_as_uncaptured(compiled, shared_data, tmp_path):
    """trainer.capture_steps=true: each whole step (forward, loss, backward, clipping, fused AdamW) one CUDA graph.
    Padded rows (one shape: step 1 warms up, step 2 is captured, the rest replay) without dropout: the losses of the
    same run uncaptured, up to rounding."""
    common = ["trainer.max_steps=40", "trainer.log_every=10", "trainer.precision=bf16", "+model.dropout=0.0",
              "data.pack=false", "trainer.loss_check=log", *compiled]
    plain, _ = train(a5(shared_data, tmp_path / "plain", *common))
    captured, _ = train(a5(shared_data, tmp_path / "captured", *common, "trainer.capture_steps=true"))
    assert captured == pytest.approx(plain, rel=1e-3)


def test_a5_captured_steps_on_repacked_rows_train_as_eager(shared_data, tmp_path, record_property):
    """Re-packed rows (micro-batches of a multiple of 8 rows: one graph per row count) with dropout 0.1 in bf16: the
    curve of eager training (whose rows are packed without the multiple of 8, so the batches differ a little)."""
    common = ["trainer.max_steps=230", "trainer.precision=bf16"]
    curves = {mode: train(a5(shared_data, tmp_path / mode, *common, *(CAPTURED if mode == "captured" else [])))[0]
              for mode in ("eager", "captured")}
    record_property("tails", {name: round(tail(curve, A5_TAIL), 4) for name, curve in curves.items()})
    assert abs(tail(curves["captured"], A5_TAIL) - tail(curves["eager"], A5_TAIL)) <= A5_TOLERANCE


def test_captured_steps_resume(shared_data, tmp_path):
    """A captured run's checkpoint holds what an uncaptured run's holds (float learning rate, capturable off) and
    the run resumed from it, captured again, continues as the straight run (fp32, no dropout)."""
    common = ["trainer.precision=fp32", "+model.dropout=0.0", "trainer.checkpoint_every=5", *CAPTURED]
    straight, _ = train(a5(shared_data, tmp_path / "straight", "trainer.max_steps=10", *common))
    train(a5(shared_data, tmp_path / "resumed", "trainer.max_steps=5", *common))
    group = load_checkpoint(tmp_path / "resumed")["optimizer"]["param_groups"][0]
    assert isinstance(group["lr"], float) and group["capturable"] is False
    resumed, _ = train(a5(shared_data, tmp_path / "resumed", "trainer.max_steps=10", "resume=must", *common))
    assert resumed == pytest.approx(straight[5:], rel=1e-4)


def test_loader_pins_each_micro_batch_as_one_buffer():
    """With CUDA the loader's pinning thread pins a worker's micro-batch buffer (``PackedBatch.pin_memory``): every
    tensor of a batch is a pinned view of it, equal to the stream's."""
    received = list(make_loader(WorkerStream(), 2))
    for batch, expected in zip(received, WorkerStream(), strict=True):
        assert all(tensor.is_pinned() for tensor in batch.values())
        assert len({tensor.untyped_storage().data_ptr() for tensor in batch.values()}) == 1
        assert all(torch.equal(batch[name], expected[name]) for name in expected)


@pytest.mark.parametrize("tf32", [True, False])
def test_cuda_trainer_options(tmp_path, tf32):
    """The CPU test's tiny GPT run on CUDA: TF32 as set, AdamW fused."""
    trainer = gpt_trainer(tmp_path, f"trainer.tf32={tf32}".lower(), device="cuda")
    assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")
    assert all(group["fused"] is True for group in trainer.optimizer.param_groups)
    assert all(math.isfinite(s.loss) for s in trainer.fit())


def test_resume_on_cuda_continues_the_run(shared_data, tmp_path):
    """fp32 with dropout: the CUDA generator state, fused AdamW's state and the data position come back."""
    common = ["trainer.precision=fp32", "trainer.checkpoint_every=5"]
    straight, _ = train(a5(shared_data, tmp_path / "straight", "trainer.max_steps=10", *common))
    train(a5(shared_data, tmp_path / "resumed", "trainer.max_steps=5", *common))
    resumed, _ = train(a5(shared_data, tmp_path / "resumed", "trainer.max_steps=10", "resume=must", *common))
    assert resumed == pytest.approx(straight[5:], rel=1e-4)
    assert load_checkpoint(tmp_path / "resumed")["optimizer"]["param_groups"][0]["fused"] is True


@pytest.mark.parametrize("processes", [1, 2])
def test_torchrun_on_cuda(processes, shared_data, tmp_path):
    """torchrun: one process (a world of one on this rank's GPU) or two (DDP over NCCL, needs 2 GPUs); the same
    global batch gives the same losses as an in-process run."""
    if torch.cuda.device_count() < processes:
        pytest.skip(f"needs {processes} GPUs")
    common = ["trainer.max_steps=5", "trainer.precision=fp32", "+model.dropout=0.0"]
    single, _ = train(a5(shared_data, tmp_path / "single", *common))
    overrides = [*a5(shared_data, tmp_path / "torchrun", *common, f"trainer.micro_batch_size={128 // processes}"),
                 *QUIET]
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc_per_node={processes}", "-m", "c4prep.training.cli", *overrides],
                            env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    launched = [r["metrics"]["loss"] for r in read_metrics(tmp_path / "torchrun" / "metrics.jsonl")
                if r["split"] == "train"]
    logged = [single[r["step"] - 1] for r in read_metrics(tmp_path / "single" / "metrics.jsonl")
              if r["split"] == "train"]
    assert launched == pytest.approx(logged, rel=1e-4)
