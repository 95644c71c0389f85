"""Wiring shared by the stages that train on in-memory row sets (character corpora, QA pairs, classification)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from ..config import section
from ..data.batches import BatchPlan, make_loader
from ..data.row_batches import RowBatches, RowSet, length_order, row_set_eval_batches
from ..trainer import Task, Trainer
from .common import RunContext, optimization_from_config, restore


def row_set_trainer(cfg: DictConfig, ctx: RunContext, train: RowSet, validation: RowSet | None, task: Task,
                    model: torch.nn.Module, model_spec: dict[str, Any],
                    validation_length: Callable[[dict[str, np.ndarray]], int] | None = None) -> Trainer:
    """A :class:`Trainer` over ``train`` (every item each epoch: the last batch is completed from the same epoch's
    order), validating on ``validation`` (in order of ``validation_length(row)`` when given, for tasks that cut a
    batch to its longest row); restored from the run folder when resuming. ``data.pack: true`` re-packs padded rows
    into ``data.pack_length`` positions (the same losses on fewer positions)."""
    settings = ctx.settings
    plan = BatchPlan(train.size, settings.global_batch_size, ctx.env.world_size, settings.micro_batch_size,
                     seed=int(cfg.seed), drop_last=False)
    data = section(cfg, "data")
    pack_length = int(data["pack_length"]) if data.get("pack") else None
    stream = RowBatches(train, plan, ctx.env.rank, pack_length=pack_length)
    optimizer, scheduler = optimization_from_config(cfg, model)

    def train_batches(start_step: int):
        return iter(make_loader(stream.starting_at(start_step), settings.num_workers))

    order = length_order(validation, validation_length) if validation is not None and validation_length else None

    def validation_batches():
        return row_set_eval_batches(validation, ctx.env.rank, ctx.env.world_size, settings.micro_batch_size, order)

    extra = {"model_spec": model_spec, "data_fingerprint": stream.fingerprint, "config": {"stage": cfg.stage}}
    trainer = Trainer(settings, ctx.run_dir, model, task, optimizer, scheduler, train_batches, plan.grad_accum,
                      ctx.env, ctx.device, eval_batches=validation_batches if validation is not None else None,
                      checkpoint_extra=extra)
    restore(trainer, cfg, stream.fingerprint)
    return trainer


def fit_summary(ctx: RunContext, trainer: Trainer) -> dict[str, Any]:
    """Train to ``max_steps``; the run's summary (steps, losses, latest validation)."""
    start = trainer.step
    history = trainer.fit()
    return {"run_dir": str(ctx.run_dir), "start_step": start, "step": trainer.step,
            "losses": [s.loss for s in history], "validation": trainer.validation}
