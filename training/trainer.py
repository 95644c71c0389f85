"""The training loop every model stage shares: accumulation, clipping, autocast, DDP, checkpoints, validation.

A stage hands the trainer a model, a :class:`BatchLoss` (how to score a batch), an optimizer and schedule, and a
function that yields micro-batches from a given step. The loss of an optimizer step is the sum of token losses
over the whole global batch divided by its number of target tokens, whatever the rank count and accumulation, so
a 2-process run equals a 1-process run with the same global batch.

Speed options: ``trainer.compile`` runs the training forward passes through ``torch.compile`` (the model itself,
its checkpoints and validation stay eager): the whole model, or with ``trainer.compile_scope=blocks`` its repeated
layer, compiled once for all layers (:mod:`.compiled_blocks`); ``trainer.compile_mode`` is torch.compile's mode
(``reduce-overhead`` replays CUDA graphs, recorded once per batch shape: re-packed micro-batches then come in
multiples of 8 rows, and their row count is compiled as dynamic from the first batch). On CUDA only: TF32 matmuls
for fp32 work (``trainer.tf32``), torch's AdamW with its fused kernel (:func:`.optim.use_fused_kernel`), and batches
copied without blocking from the memory the data loader pins (``make_loader``), and ``trainer.capture_steps``: each
whole step one CUDA graph (:mod:`.step_graphs`). On the CPU every run is what it was without them.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from c4prep.interrupted import raise_if_stopped

from .checkpoint import CheckpointError, rng_state, save_checkpoint, set_rng_state
from .compiled_blocks import CompiledBlocks, mark_rows_dynamic
from .config_errors import TrainConfigError
from .config_groups import TrainerConfig
from .distributed import DistEnv, all_gather_objects, all_reduce_sum, barrier
from .metrics_log import MetricsLogger
from .optim import use_fused_kernel
from .step_graphs import Batch, CapturedSteps, prepare_optimizer, uncaptured_state


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite (training stopped before its update; ``trainer.loss_check=log``: at the next
    read of the queued losses), or an update overflowed float32; either way before any checkpoint."""


def _diverged(loss: float, step: int, lr: float, queued_after: int = 0) -> TrainingDiverged:
    """The stop at a non-finite ``loss``, with what to do; ``queued_after``: steps already queued after it."""
    queued = (f"the {queued_after} step(s) after it were queued before the check (trainer.loss_check=log): "
              if queued_after else "")
    return TrainingDiverged(f"loss is {loss} at step {step} (lr {lr:.3g}); {queued}lower the learning rate, "
                            "keep trainer.grad_clip > 0 or use trainer.precision=fp32, then resume from the last "
                            "checkpoint")


class BatchLoss(Protocol):
    """How a stage scores its batches."""

    def loss(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum of per-token losses, number of target tokens) of one micro-batch."""

    def num_targets(self, batch: Batch) -> torch.Tensor:
        """Number of target tokens of a micro-batch (known before the forward pass)."""

    def num_tokens(self, batch: Batch) -> int:
        """Tokens processed by the model for a micro-batch (for throughput)."""

    def eval_sums(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        """Summable validation statistics of a micro-batch; must include ``loss_sum`` and ``targets``."""

    # Optional: ``step_metrics``, a dict of floats the batch loss measured on its latest micro-batch, logged with train.


@dataclass
class StepStats:
    """What one optimizer step measured."""

    loss: float
    grad_norm: float
    lr: float
    tokens: int
    seconds: float
    data_seconds: float


@dataclass
class _QueuedStep:
    """A step as the host queued it: its loss and gradient norm may still be computing on the device."""

    step: int
    loss: torch.Tensor
    grad_norm: torch.Tensor
    lr: float | torch.Tensor  # a device tensor when the step was captured (its schedule fills one in place)
    tokens: int
    seconds: float
    data_seconds: float


@dataclass
class Trainer:
    settings: TrainerConfig
    run_dir: Path
    model: nn.Module
    batch_loss: BatchLoss
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    train_batches: Callable[[int], Iterator[Batch]]
    accumulation_steps: int
    env: DistEnv
    device: torch.device
    eval_batches: Callable[[], Iterable[Batch]] | None = None
    checkpoint_extra: dict[str, Any] = field(default_factory=dict)
    grad_hook: Callable[[int], None] | None = None  # called with the step after backward, before clipping
    step_hook: Callable[[int], None] | None = None  # called with the step before its first forward pass
    # Micro-batches come with varying row counts (re-packed rows): the compiled forward passes then take the row
    # count as dynamic from the first batch and compile once, not once static and again dynamic at the second shape.
    rows_vary: bool = False
    step: int = 0
    validation: dict[str, float] | None = None  # the latest validation metrics

    def __post_init__(self) -> None:
        self.model.to(self.device)
        self.ddp = DistributedDataParallel(self.model) if self.env.enabled else None
        module = self.ddp or self.model
        mode = None if self.settings.compile_mode == "default" else self.settings.compile_mode
        scope = self.settings.compile_scope if self.settings.compile else None
        self.forward_module = torch.compile(module, mode=mode) if scope == "model" else module
        self.compiled_blocks = CompiledBlocks(self.model, mode) if scope == "blocks" else None
        if self.device.type == "cuda":
            torch.set_float32_matmul_precision("high" if self.settings.tf32 else "highest")
            use_fused_kernel(self.optimizer)  # a fresh optimizer; a resumed one keeps its checkpoint's setting
        self.logger = MetricsLogger(self.run_dir, enabled=self.env.is_main, tensorboard=self.settings.tensorboard)
        self.captured_steps: CapturedSteps | None = None  # trainer.capture_steps on CUDA, from the first step on

    # ----------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        optimizer, scheduler = self.optimizer.state_dict(), self.scheduler.state_dict()
        if self.captured_steps is not None:
            optimizer, scheduler = uncaptured_state(optimizer), uncaptured_state(scheduler)
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": optimizer,
            "scheduler": scheduler,
            "rng": all_gather_objects(rng_state(), self.env),
            **self.checkpoint_extra,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where ``state`` stopped (model, optimizer, schedule, RNG, data position). The next step's
        learning rate is the schedule's as configured now: a resume that raises ``max_steps`` stretches a decaying
        schedule from here on (the checkpoint holds the old schedule's last rate, which the next step took)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        schedule = self.scheduler
        for group, base, factor in zip(self.optimizer.param_groups, schedule.base_lrs, schedule.lr_lambdas):
            group["lr"] = base * factor(schedule.last_epoch)
        schedule._last_lr = [group["lr"] for group in self.optimizer.param_groups]
        rng_states = state["rng"]
        if len(rng_states) != self.env.world_size:
            raise CheckpointError(f"checkpoint was written by {len(rng_states)} rank(s), this run has "
                                  f"{self.env.world_size}; resume with the same number of processes")
        set_rng_state(rng_states[self.env.rank])
        self.step = int(state["step"])
        self.logger.truncate_after(self.step)

    def save(self) -> Path | None:
        state = self.state_dict()  # every rank joins the RNG gather
        path = None
        if self.env.is_main:
            path = save_checkpoint(self.run_dir, self.step, state, keep=self.settings.keep_checkpoints)
        barrier(self.env)
        return path

    # ------------------------------------------------------------------------------------------ loop
    def fit(self) -> list[StepStats]:
        """Train from ``self.step`` to ``settings.max_steps``; returns the stats of the steps run."""
        settings = self.settings
        history: list[StepStats] = []
        queued: list[_QueuedStep] = []
        batches = self.train_batches(self.step)
        bar = tqdm(total=settings.max_steps, initial=self.step, unit="step", dynamic_ncols=True,
                   disable=not (settings.progress and self.env.is_main))
        interval_started = time.perf_counter()
        try:
            while self.step < settings.max_steps:
                raise_if_stopped()
                queued.append(self._train_step(batches))
                self.step += 1
                bar.update(1)
                logs = self.step % settings.log_every == 0 or self.step == settings.max_steps
                evaluates = settings.eval_every and self.step % settings.eval_every == 0
                saves = settings.checkpoint_every and self.step % settings.checkpoint_every == 0
                if logs or evaluates or saves:  # one read of the queue; trainer.loss_check=step checked each loss
                    history += self._read_queued(queued, time.perf_counter() - interval_started)
                    queued.clear()
                    interval_started = time.perf_counter()
                    stats = history[-1]
                    bar.set_postfix(loss=f"{stats.loss:.4f}", tok_s=f"{stats.tokens / stats.seconds:,.0f}")
                if logs:
                    self.logger.log(self.step, "train", {**_train_metrics(history[-1]),
                                                          **getattr(self.batch_loss, "step_metrics", {})})
                if evaluates:
                    self.evaluate()
                if saves:
                    self.save()
            if self.eval_batches is not None and (not settings.eval_every or self.step % settings.eval_every):
                self.evaluate()
            if not settings.checkpoint_every or self.step % settings.checkpoint_every:
                self.save()
        finally:
            bar.close()
            self.logger.close()
        return history

    def _read_queued(self, queued: list[_QueuedStep], seconds: float) -> list[StepStats]:
        """The queued steps' stats, their losses and gradient norms read from the device at once; stops the run at
        the first non-finite loss (``trainer.loss_check=step`` has checked each before its update). With
        ``trainer.loss_check=log`` each step is given an equal share of the ``seconds`` the queue took (the host's
        own step times do not wait for the device)."""
        on_device = [v for q in queued for v in (q.loss, q.grad_norm, q.lr) if isinstance(v, torch.Tensor)]
        values = iter(torch.stack([v.double() for v in on_device]).tolist())
        read = []
        for q in queued:
            loss, grad_norm, lr = (next(values) if isinstance(v, torch.Tensor) else v
                                   for v in (q.loss, q.grad_norm, q.lr))
            if not math.isfinite(loss):
                raise _diverged(loss, q.step, lr, queued_after=self.step - q.step)
            step_seconds = q.seconds if self.settings.loss_check == "step" else seconds / len(queued)
            read.append(StepStats(loss, grad_norm, lr, q.tokens, step_seconds, q.data_seconds))
        return read

    def _train_step(self, batches: Iterator[Batch]) -> _QueuedStep:
        if self.settings.capture_steps and self.device.type == "cuda" and self.captured_steps is None:
            self._start_capturing()
        if self.step_hook is not None:
            self.step_hook(self.step)
        started = time.perf_counter()
        micro_batches = [next(batches) for _ in range(self.accumulation_steps)]
        data_seconds = time.perf_counter() - started
        micro_batches = [{k: v.to(self.device, non_blocking=True) for k, v in b.items()} for b in micro_batches]
        lr = self.scheduler.get_last_lr()[0]  # a device tensor under captured steps: read with the queued losses
        if self.captured_steps is not None:
            loss, grad_norm = self.captured_steps(micro_batches)
        else:
            loss = self._backward(micro_batches)
            if self.settings.loss_check == "step" and not math.isfinite(value := loss.item()):
                self.optimizer.zero_grad(set_to_none=True)
                raise _diverged(value, self.step + 1, lr)
            if self.grad_hook is not None:
                self.grad_hook(self.step)
            try:
                grad_norm = self._clip_and_update()
            except RuntimeError as error:  # torch's, for a step size beyond float32 (lr 1e300)
                if "without overflow" not in str(error):
                    raise
                raise TrainingDiverged(f"the update of step {self.step + 1} (lr {lr:.3g}) is beyond float32's range; "
                                       "lower the learning rate") from None
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        tokens = sum(self.batch_loss.num_tokens(b) for b in micro_batches) * self.env.world_size
        return _QueuedStep(self.step + 1, loss, grad_norm, lr, tokens, time.perf_counter() - started, data_seconds)

    def _backward(self, micro_batches: list[Batch]) -> torch.Tensor:
        """Forward and backward passes of a step's micro-batches; the step's loss (a device tensor)."""
        targets = all_reduce_sum(
            torch.stack([self.batch_loss.num_targets(b) for b in micro_batches]).sum().double(), self.env)
        # DDP averages gradients over ranks, hence the world_size factor: the step's loss is sum / targets. A tensor,
        # so the host does not wait here for the device.
        scale = (self.env.world_size / targets.clamp(min=1)).float()
        module = self.forward_module
        self.model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        with self._running_compiled_blocks():
            for index, batch in enumerate(micro_batches):
                loss_sum += self._micro_step(module, batch, scale, last=index == len(micro_batches) - 1)
        return all_reduce_sum(loss_sum, self.env) / targets.clamp(min=1)

    def _micro_step(self, module: nn.Module, batch: Batch, scale: torch.Tensor, last: bool) -> torch.Tensor:
        """Forward and backward pass of one micro-batch (gradients synchronised across ranks at the ``last``);
        its loss sum (fp64, detached)."""
        if self.settings.compiled_cuda_graphs:  # a new step: the graphs may overwrite the last step's outputs
            torch.compiler.cudagraph_mark_step_begin()
        if self.rows_vary and self.settings.compile and self.compiled_blocks is None:  # blocks mark their own inputs
            mark_rows_dynamic(batch.values())
        with (nullcontext() if last or self.ddp is None else self.ddp.no_sync()), self._autocast():
            micro_loss, _ = self.batch_loss.loss(module, batch)
            (micro_loss * scale).backward()
        return micro_loss.detach().double()

    def _running_compiled_blocks(self):
        """Within: the repeated blocks run compiled (``trainer.compile_scope=blocks``); else nothing changes."""
        return nullcontext() if self.compiled_blocks is None else self.compiled_blocks.training(self.rows_vary)

    def _clip_and_update(self) -> torch.Tensor:
        """Clip the gradients (``trainer.grad_clip``) and take the optimizer's step; the gradient norm before
        clipping."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.grad_clip or math.inf)
        self.optimizer.step()
        return grad_norm

    def _update(self, micro_batches: list[Batch]) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole step as :class:`.step_graphs.CapturedSteps` captures it: (loss, gradient norm)."""
        loss = self._backward(micro_batches)
        return loss, self._clip_and_update()

    def _start_capturing(self) -> None:
        """From this step on, steps run through :class:`.step_graphs.CapturedSteps`; a one-line
        :class:`TrainConfigError` for a run whose steps cannot be captured."""
        if self.env.enabled:
            raise TrainConfigError("trainer.capture_steps=true runs in one process; start the run without torchrun "
                                   "or drop trainer.capture_steps")
        if not isinstance(self.optimizer, torch.optim.Adam):
            raise TrainConfigError(f"trainer.capture_steps=true needs torch's AdamW (optimizer=adamw or "
                                   f"adamw_mingpt), not {type(self.optimizer).__name__}")
        if self.step_hook is not None or self.grad_hook is not None:
            raise TrainConfigError("trainer.capture_steps=true does not apply to this stage (it changes the model "
                                   "or its gradients between steps); drop trainer.capture_steps")
        prepare_optimizer(self.optimizer, self.device)
        self.captured_steps = CapturedSteps(self._update)

    def _autocast(self):
        # A captured step must not keep autocast's cache of cast weights (PyTorch's CUDA graphs notes)
        return autocast(self.device, self.settings.precision, cache=self.captured_steps is None)

    # ------------------------------------------------------------------------------------ validation
    def evaluate(self) -> dict[str, float] | None:
        """One validation pass, logged; None when there is no validation data."""
        if self.eval_batches is None:
            return None
        metrics = evaluate_model(self.model, self.batch_loss, self.eval_batches(), self.env, self.device,
                                 self.settings.precision, self.settings.eval_batches)
        if metrics is not None:
            self.logger.log(self.step, "validation", metrics)
            self.validation = metrics
        return metrics


def autocast(device: torch.device, precision: str, cache: bool = True):
    """bf16 autocast when ``precision == "bf16"``, else a no-op context; ``cache``: autocast's cache of cast weights."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16", cache_enabled=cache)


@torch.no_grad()
def evaluate_model(model: nn.Module, batch_loss: BatchLoss, batches: Iterable[Batch], env: DistEnv,
                   device: torch.device, precision: str = "fp32", max_batches: int = 0) -> dict[str, float] | None:
    """Per-target-token averages of ``batch_loss.eval_sums`` over ``batches`` (summed over ranks); None if no targets.

    ``max_batches`` > 0 stops after that many micro-batches per rank (every rank must get the same count).
    """
    was_training = model.training
    model.eval()
    totals: dict[str, torch.Tensor] = {}
    for index, batch in enumerate(batches):
        if max_batches and index >= max_batches:
            break
        batch = {k: v.to(device) for k, v in batch.items()}
        with autocast(device, precision):
            for key, value in batch_loss.eval_sums(model, batch).items():
                totals[key] = totals.get(key, 0) + value.detach().double()
    model.train(was_training)
    names = all_gather_objects(sorted(totals), env)[0]
    summed = {n: all_reduce_sum(totals.get(n, torch.zeros((), dtype=torch.float64, device=device)), env).item()
              for n in names}
    if not summed.get("targets"):
        return None
    metrics = {"loss": summed["loss_sum"] / summed["targets"]}
    metrics.update({n: summed[n] / summed["targets"] for n in names if n not in ("loss_sum", "targets")})
    return metrics


def _train_metrics(stats: StepStats) -> dict[str, float]:
    return {"loss": stats.loss, "grad_norm": stats.grad_norm, "lr": stats.lr,
            "tokens_per_second": stats.tokens / stats.seconds, "step_seconds": stats.seconds,
            "data_fraction": stats.data_seconds / stats.seconds}
