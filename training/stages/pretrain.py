"""``train stage=pretrain data=c4_tokens``: an objective (T5 span corruption by default) over the token shards of
``c4prep tokenize``.

token shards -> segment index -> deterministic global batches -> objective + packing (per sample, seeded by
(seed, epoch, segment id)) -> model -> trainer. With ``model=gpt_*`` the rows are decoder-only
(``data.decoder_rows``; ``objective=lm`` for GPT pre-training). ``init_from`` continues pre-training from a
checkpoint's weights (fresh optimizer and schedule). Sentence files (``data=ptb``) train a GPT on in-memory rows
(:func:`run_sentence_pretrain`).
"""
from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from ..config_groups import TrainConfig
from ..data.batches import BatchPlan, make_loader
from ..data.row_batches import RowBatches, row_set_eval_batches
from ..trainer import Trainer
from .data_setup import pretrain_data, sentence_corpus
from .model_setup import check_rows_fit, initial_model
from .run import RunContext, fit_summary, optimization_from_config, pretrain_on_rows, restore, start_run

log = logging.getLogger(__name__)


def build_pretrain_trainer(cfg: TrainConfig, ctx: RunContext) -> Trainer:
    """Everything wired and restored (when resuming), ready for ``fit()``."""
    data = pretrain_data(cfg.data, cfg.objective, cfg.seed, cfg.model.name == "gpt", cfg.z_loss)
    settings = ctx.settings
    plan = BatchPlan(data.train.size, settings.global_batch_size, ctx.env.world_size,
                     settings.micro_batch_size, seed=cfg.seed)
    model, model_spec = initial_model(cfg, data.vocab_size)
    check_rows_fit(model, data.row_builder)
    optimizer, scheduler = optimization_from_config(cfg, model)
    stream = RowBatches(data.train, plan, ctx.env.rank)

    def train_batches(start_step: int):
        return iter(make_loader(stream.starting_at(start_step), settings.num_workers))

    def validation_batches():
        return row_set_eval_batches(data.validation, ctx.env.rank, ctx.env.world_size, settings.micro_batch_size)

    extra: dict[str, Any] = {"model_spec": model_spec, "data_fingerprint": stream.fingerprint,
                             "config": asdict(cfg.objective) | {"stage": cfg.stage}}
    trainer = Trainer(settings, ctx.run_dir, model, data.batch_loss, optimizer, scheduler, train_batches, plan.grad_accum,
                      ctx.env, ctx.device,
                      eval_batches=validation_batches if data.validation is not None else None,
                      checkpoint_extra=extra)
    restore(trainer, cfg, stream.fingerprint)
    return trainer


def run_token_pretrain(cfg: TrainConfig) -> dict[str, Any]:
    """Train on token shards, from scratch or from ``init_from``'s weights; returns a summary (steps, last loss,
    validation metrics)."""
    ctx = start_run(cfg)
    return fit_summary(ctx, build_pretrain_trainer(cfg, ctx))


def run_sentence_pretrain(cfg: TrainConfig) -> dict[str, Any]:
    """Train a GPT language model on sentence files (``data=ptb``)."""
    return pretrain_on_rows(cfg, sentence_corpus(cfg))
