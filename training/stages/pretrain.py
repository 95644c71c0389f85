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

import torch

from ..config_groups import TrainConfig
from ..data.kept_vocabulary import sha256_run_files
from ..trainer import Trainer
from .data_setup import TOKENS_FINGERPRINT_FIELD, TrainingData, check_run_vocabulary, pretrain_data, sentence_corpus
from .model_setup import check_rows_fit, initial_model
from .run import RunContext, fit_summary, keep_run_files, pretrain_on_rows, row_set_trainer, start_run

log = logging.getLogger(__name__)


def build_pretrain_trainer(cfg: TrainConfig, ctx: RunContext, data: TrainingData, model: torch.nn.Module,
                           model_spec: dict[str, Any]) -> Trainer:
    """Everything wired and restored (when resuming), ready for ``fit()``; checkpoints record the objective and
    which token shards the run trains on (what an export's model card and ``stage=evaluate`` check)."""
    record = asdict(cfg.objective) | {TOKENS_FINGERPRINT_FIELD: data.tokens_fingerprint}
    return row_set_trainer(cfg, ctx, data.train, data.validation, data.batch_loss, model, model_spec, drop_last=True,
                           checkpoint_config=record)


def run_token_pretrain(cfg: TrainConfig) -> dict[str, Any]:
    """Train on token shards, from scratch or from ``init_from``'s weights; returns a summary (steps, last loss,
    validation metrics)."""
    data = pretrain_data(cfg.data, cfg.objective, cfg.seed, cfg.model.name == "gpt", cfg.z_loss)
    if cfg.init_from:
        check_run_vocabulary(cfg.init_from, data.model_sha256, f"data.tokens={cfg.data.tokens}")
    model, model_spec = initial_model(cfg, data.vocab_size)
    check_rows_fit(model, data.row_builder)
    ctx = start_run(cfg)  # after the data's and the model's checks: a refused run leaves no run folder behind
    keep_run_files(ctx, sha256_run_files(data.model_sha256))
    return fit_summary(ctx, build_pretrain_trainer(cfg, ctx, data, model, model_spec))


def run_sentence_pretrain(cfg: TrainConfig) -> dict[str, Any]:
    """Train a GPT language model on sentence files (``data=ptb``)."""
    return pretrain_on_rows(cfg, sentence_corpus(cfg))
