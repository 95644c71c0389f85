"""``train stage=pretrain``: an objective (T5 span corruption by default) over the token shards of ``c4prep tokenize``.

token shards -> segment index -> deterministic global batches -> objective + packing (per sample, seeded by
(seed, epoch, segment id)) -> model -> trainer. With ``model=gpt_*`` the rows are decoder-only
(``objectives.decoder_rows``; ``objective=lm`` for GPT pre-training). Character corpora (``data=char_text``,
``data=cs224n_a5_wiki``) and sentence files (``data=ptb``) train a GPT on in-memory rows instead
(``stages.row_corpora``). ``init_from`` continues pre-training from a checkpoint's weights (fresh optimizer and
schedule).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from c4prep.manifest import Manifest, ManifestError, read_manifest

from ..config import TrainConfigError, section
from ..data.batches import BatchPlan, RowBuilder, TokenBatches, eval_batches, make_loader
from ..data.token_index import SampleIndex, TokenDataError, build_sample_index
from ..models.gpt import GPT
from ..objectives import make_objective
from ..objectives.decoder_rows import DecoderRowBuilder
from ..objectives.packing import EncDecRowBuilder
from ..tasks import DecoderTask, EncDecTask
from ..trainer import Task, Trainer
from .common import RunContext, initial_model, optimization_from_config, restore, run_folder, start_run
from .row_corpora import ROW_CORPORA
from .row_training import fit_summary, row_set_trainer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PretrainData:
    """The corpus side of pre-training: indices of both splits and how a sample becomes a row."""

    train: SampleIndex
    validation: SampleIndex | None
    row_builder: RowBuilder
    vocab_size: int
    task: Task


def token_manifest(tokens_dir: str) -> Manifest:
    try:
        return read_manifest(tokens_dir)
    except ManifestError as error:
        raise TokenDataError(f"{error}; run `c4prep tokenize` first or set data.tokens=<token folder>") from None


def vocabulary_size(manifest: Manifest, tokens_dir: str) -> int:
    """Ids of the vocabulary the token shards were made with (sentinels included), from their manifest."""
    vocabulary = manifest.extra.get("vocabulary", {})
    if "vocab_size" not in vocabulary:
        raise TokenDataError(f"{tokens_dir}/manifest.json names no vocabulary; re-run `c4prep tokenize`")
    return int(vocabulary["vocab_size"])


def pretrain_data(cfg: DictConfig, decoder_only: bool | None = None) -> PretrainData:
    """Build the objective and the sample indices the config asks for; rows for a decoder-only model when
    ``decoder_only`` (default: when the ``model:`` section names a GPT)."""
    data, objective_cfg = section(cfg, "data"), section(cfg, "objective")
    manifest = token_manifest(data["tokens"])
    vocab_size = vocabulary_size(manifest, data["tokens"])
    inputs_length, targets_length = int(objective_cfg["inputs_length"]), int(objective_cfg["targets_length"])
    try:
        objective = make_objective(objective_cfg["name"], vocab_size=vocab_size, **objective_cfg.get("params", {}))
        segment_length = objective.segment_length(inputs_length, targets_length)
    except ValueError as error:
        raise TrainConfigError(f"bad objective settings: {error}") from None

    def index(split: str) -> SampleIndex:
        return build_sample_index(data["tokens"], split, segment_length, objective.output_lengths, inputs_length,
                                  targets_length, concat_documents=int(data["concat_documents"]))

    split = data.get("validation_split")
    has_validation = bool(split) and manifest.splits.get(split) is not None and manifest.splits[split].num_rows > 0
    if split and not has_validation:
        log.warning("no validation: split %r of %s has no documents", split, data["tokens"])
    validation = index(split) if has_validation else None
    if decoder_only is None:
        decoder_only = section(cfg, "model").get("name") == "gpt"
    if decoder_only:
        row_builder: RowBuilder = DecoderRowBuilder(objective, inputs_length, targets_length, seed=int(cfg.seed))
        task: Task = DecoderTask()
    else:
        row_builder = EncDecRowBuilder(objective, inputs_length, targets_length, seed=int(cfg.seed))
        task = EncDecTask(z_loss=float(cfg.z_loss))
    return PretrainData(index(data["train_split"]), validation, row_builder, vocab_size, task)


def check_rows_fit(model: torch.nn.Module, row_builder: RowBuilder) -> None:
    """A GPT must have positions for every decoder row position."""
    if isinstance(model, GPT) and isinstance(row_builder, DecoderRowBuilder) and row_builder.length > model.max_length:
        raise TrainConfigError(f"decoder rows of {row_builder.length} positions exceed the model's {model.max_length}:"
                               f" set objective.targets_length={model.max_length + 1} (objective=lm) or raise "
                               "model.block_size")


def build_pretrain_trainer(cfg: DictConfig, ctx: RunContext) -> Trainer:
    """Everything wired and restored (when resuming), ready for ``fit()``."""
    data = pretrain_data(cfg)
    settings = ctx.settings
    plan = BatchPlan(data.train.num_samples, settings.global_batch_size, ctx.env.world_size,
                     settings.micro_batch_size, seed=int(cfg.seed))
    model, model_spec = initial_model(cfg, data.vocab_size)
    check_rows_fit(model, data.row_builder)
    optimizer, scheduler = optimization_from_config(cfg, model)
    stream = TokenBatches(data.train, plan, ctx.env.rank, data.row_builder)

    def train_batches(start_step: int):
        return iter(make_loader(stream.starting_at(start_step), settings.num_workers))

    def validation_batches():
        return eval_batches(data.validation, ctx.env.rank, ctx.env.world_size, settings.micro_batch_size,
                            data.row_builder)

    extra: dict[str, Any] = {"model_spec": model_spec, "data_fingerprint": stream.fingerprint,
                             "config": section(cfg, "objective") | {"stage": cfg.stage}}
    trainer = Trainer(settings, ctx.run_dir, model, data.task, optimizer, scheduler, train_batches, plan.grad_accum,
                      ctx.env, ctx.device,
                      eval_batches=validation_batches if data.validation is not None else None,
                      checkpoint_extra=extra)
    restore(trainer, cfg, stream.fingerprint)
    return trainer


def check_same_run_files(init_from: str, run_files: dict[str, str]) -> None:
    """Continued pre-training must encode the data as the checkpoint's run did: a run file (the word vocabulary)
    that ``init_from``'s run folder also keeps must be identical."""
    folder = run_folder(init_from)
    for name, text in run_files.items():
        kept = folder / name
        if kept.is_file() and kept.read_text(encoding="utf-8") != text:
            raise TrainConfigError(f"init_from={init_from}: its {name} differs from the one this data config builds; "
                                   "use the data settings (data.train, data.max_words) the checkpoint was trained with")


def run_pretrain(cfg: DictConfig) -> dict[str, Any]:
    """Train, from scratch or from ``init_from``'s weights; returns a summary (steps, last loss, validation
    metrics)."""
    kind = cfg.data.get("kind")
    if kind in ROW_CORPORA:
        ctx = start_run(cfg)
        corpus = ROW_CORPORA[kind](cfg)
        if cfg.init_from:
            check_same_run_files(cfg.init_from, corpus.run_files)
        if ctx.env.is_main:
            for name, text in corpus.run_files.items():
                (ctx.run_dir / name).write_text(text, encoding="utf-8")
        model, spec = initial_model(cfg, corpus.vocab_size)
        trainer = row_set_trainer(cfg, ctx, corpus.train, corpus.validation, DecoderTask(), model, spec)
        return fit_summary(ctx, trainer)
    if kind != "tokens":
        raise TrainConfigError(f"stage=pretrain reads token shards (data=c4_tokens), a character corpus "
                               f"(data=tiny_shakespeare|cs224n_a5_wiki) or sentences (data=ptb), "
                               f"not data.kind={kind!r}")
    ctx = start_run(cfg)
    return fit_summary(ctx, build_pretrain_trainer(cfg, ctx))
