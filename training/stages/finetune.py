"""``train stage=finetune data=text_to_text``: text-to-text fine-tuning of a (pre-trained) encoder-decoder.

One or more tasks from TSV/JSONL files, mixed at T5's rates (equal, examples-proportional with limit K,
temperature-scaled; optionally with the unsupervised span-corruption task), starting from ``init_from``. The
paper's adapter layers (``finetune.adapter_dim``) and gradual unfreezing (``finetune.unfreeze_every``) are options.
After training, each task's validation file is scored: loss and token accuracy (teacher forcing) and exact match of
greedy decodes.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from c4prep.tokenization.vocabulary import SentencePieceVocabulary
from torch import nn

from ..batch_losses import EncDecLoss
from ..config_errors import TrainConfigError
from ..config_data import TextToTextData, TokensData
from ..config_groups import TrainConfig
from ..data.batches import collate_rows, make_loader, rank_micro_batches
from ..data.kept_vocabulary import sha256_run_files
from ..data.mixture_batches import MixtureBatches, PairRows
from ..data.mixtures import MixtureError, MixtureSampler, mixing_rates
from ..data.row_source import RowSource
from ..data.text_files import TextFileError
from ..data.text_to_text import encode_pairs, load_text_pairs
from ..distributed import DistEnv, gather_in_item_order, rank_share
from ..metrics import exact_match
from ..models.t5 import T5
from ..trainer import Trainer, evaluate_model
from .data_setup import load_vocabulary, pretrain_data
from .model_setup import model_from_checkpoint, model_from_config, model_from_init
from .run import RunContext, checkpoint_record, keep_run_files, optimization_from_config, restore, start_run

log = logging.getLogger(__name__)
UNSUPERVISED = "c4_span_corruption"


@dataclass(frozen=True)
class TaskData:
    """One task's encoded training rows and its validation pairs (texts kept for exact match)."""

    train: PairRows
    validation: PairRows | None
    validation_targets: list[str]


def load_tasks(data: TextToTextData, vocab: SentencePieceVocabulary) -> dict[str, TaskData]:
    """Read and encode every task of ``data.tasks`` (name -> {train, validation, prefix})."""
    lengths = data.inputs_length, data.targets_length
    tasks = {}
    for name, files in data.tasks.items():
        if not files.train:
            raise TrainConfigError(f"task {name!r} has no training file: set data.tasks.{name}.train=<file.tsv|jsonl>")
        prefix = files.prefix
        try:
            train = encode_pairs(load_text_pairs(files.train, prefix).pairs, vocab, *lengths)
            validation = load_text_pairs(files.validation, prefix).pairs if files.validation else ()
        except TextFileError as error:
            raise TrainConfigError(f"task {name!r}: {error}") from None
        checked = encode_pairs(validation, vocab, *lengths) if validation else None
        for split, encoded in (("training", train), ("validation", checked)):
            if encoded is not None and encoded.truncated:
                log.warning("task %s: %d of %d %s examples truncated to %d/%d tokens", name, encoded.truncated,
                            len(encoded.examples), split, *lengths)
        tasks[name] = TaskData(PairRows(train.examples, *lengths),
                               PairRows(checked.examples, *lengths) if checked else None,
                               [p.target for p in validation])
    if not tasks:
        raise TrainConfigError("no fine-tuning tasks: set data=text_to_text data.tasks.<name>.train=<file>")
    return tasks


def mixture_sources(cfg: TrainConfig, tasks: dict[str, TaskData], vocab: SentencePieceVocabulary
                    ) -> dict[str, RowSource]:
    """Each task's rows, plus the token shards' span-corruption samples when ``data.unsupervised_tokens`` is set
    (tokenized with the tasks' ``vocab``)."""
    sources: dict[str, RowSource] = {name: task.train for name, task in tasks.items()}
    data = cfg.data
    if data.unsupervised_tokens:
        tokens = TokensData(kind="tokens", tokens=data.unsupervised_tokens, validation_split=None)
        objective = replace(cfg.objective, inputs_length=data.inputs_length, targets_length=data.targets_length)
        unsupervised = pretrain_data(tokens, objective, cfg.seed, cfg.model.name == "gpt", cfg.z_loss,
                                     "data.unsupervised_tokens")
        if unsupervised.model_sha256 not in (None, vocab.model_sha256) or unsupervised.vocab_size != vocab.vocab_size:
            raise TrainConfigError(f"data.unsupervised_tokens={data.unsupervised_tokens} was tokenized with another "
                                   f"vocabulary than data.vocab={data.vocab}: use token shards of data.vocab")
        sources[UNSUPERVISED] = unsupervised.train
    return sources


@dataclass
class GradualUnfreezing:
    """T5 §3.5.1: train only the top group at first, thawing one more group (block pair) every ``every`` steps.

    Frozen groups still get gradients (so DDP's buckets stay fixed); they are dropped before the optimizer step.
    """

    groups: list[list[nn.Parameter]]
    every: int

    def __call__(self, step: int) -> None:
        for group in self.groups[1 + step // self.every:]:
            for parameter in group:
                parameter.grad = None


def prepare_model(cfg: TrainConfig, vocab_size: int) -> tuple[nn.Module, dict[str, Any]]:
    """The model to fine-tune: ``init_from``'s weights (or a fresh one), with adapters when asked."""
    adapter_dim = cfg.finetune.adapter_dim
    if not cfg.init_from:
        log.warning("no init_from: fine-tuning a randomly initialised model")
        model, spec = model_from_config(cfg, vocab_size)
    else:
        model, spec = model_from_init(cfg, vocab_size, "fine-tune with the pre-training vocabulary (data.vocab)")
    if adapter_dim:
        if not isinstance(model, T5):
            raise TrainConfigError("finetune.adapter_dim needs a T5 model")
        spec = {**spec, "adapter_dim": adapter_dim}
        weights = model.state_dict()
        torch.manual_seed(cfg.seed)
        model = model_from_checkpoint({"model_spec": spec, "model": weights}, strict=False)
        model.freeze_all_but_adapters()
    return model, spec


def run_finetune(cfg: TrainConfig) -> dict[str, Any]:
    if cfg.model.name != "t5":
        source = f" (init_from={cfg.init_from}'s)" if cfg.init_from else ""
        raise TrainConfigError(f"data=text_to_text fine-tunes a T5 model, not the {cfg.model.name} model{source}: "
                               "fine-tune a T5 run, or a GPT one with a GPT data= option (train --help)")
    data = cfg.data
    vocab = load_vocabulary(data.vocab, cfg.init_from)
    tasks = load_tasks(data, vocab)
    model, spec = prepare_model(cfg, vocab.vocab_size)
    sources = mixture_sources(cfg, tasks, vocab)
    ctx = start_run(cfg)  # after the data's and the model's checks: a refused run leaves no run folder behind
    keep_run_files(ctx, sha256_run_files(vocab.model_sha256))
    mixing = data.mixing
    try:
        rates = mixing_rates({name: source.size for name, source in sources.items()}, mixing.strategy,
                             size_limit=mixing.size_limit, temperature=mixing.temperature)
    except MixtureError as error:
        raise TrainConfigError(f"bad data.mixing: {error}") from None
    sampler = MixtureSampler(rates, seed=cfg.seed, sizes={n: s.size for n, s in sources.items()})
    settings = ctx.settings
    stream = MixtureBatches(sources, sampler, settings.global_batch_size, ctx.env.world_size,
                            settings.micro_batch_size, ctx.env.rank)
    optimizer, scheduler = optimization_from_config(cfg, model)

    def train_batches(start_step: int):
        return iter(make_loader(stream.starting_at(start_step), settings.num_workers))

    validation = [task.validation for task in tasks.values() if task.validation is not None]

    def validation_batches():
        rows = [rows.row(i, 0) for rows in validation for i in range(rows.size)]
        return _rank_batches(rows, ctx.env, settings.micro_batch_size)

    unfreeze = cfg.finetune.unfreeze_every
    trainer = Trainer(settings, ctx.run_dir, model, EncDecLoss(z_loss=cfg.z_loss), optimizer, scheduler,
                      train_batches, stream.grad_accum, ctx.env, ctx.device,
                      eval_batches=validation_batches if validation else None,
                      checkpoint_extra=checkpoint_record(cfg, spec, stream.fingerprint, {"mixing_rates": rates}),
                      grad_hook=GradualUnfreezing(model.unfreezing_groups(), unfreeze) if unfreeze else None)
    restore(trainer, ctx, stream.fingerprint)
    start = trainer.step
    history = trainer.fit()
    scores = {name: score_task(model, task, vocab, ctx, data.targets_length)
              for name, task in tasks.items() if task.validation is not None}
    return {"run_dir": str(ctx.run_dir), "start_step": start, "step": trainer.step, "mixing_rates": rates,
            "losses": [s.loss for s in history], "validation": scores}


def _rank_batches(rows: list[dict[str, np.ndarray]], env: DistEnv, micro_batch_size: int):
    """This rank's share of ``rows`` in padded micro-batches (:func:`rank_micro_batches`)."""
    return rank_micro_batches(len(rows), env.rank, env.world_size, micro_batch_size,
                              lambda items: [rows[i] for i in items])


@torch.no_grad()
def score_task(model: nn.Module, task: TaskData, vocab: SentencePieceVocabulary, ctx: RunContext,
               max_length: int) -> dict[str, float]:
    """Teacher-forced loss/token accuracy and greedy-decode exact match of one task's validation pairs."""
    rows = [task.validation.row(i, 0) for i in range(task.validation.size)]
    batch_size = ctx.settings.micro_batch_size
    metrics = evaluate_model(model, EncDecLoss(), _rank_batches(rows, ctx.env, batch_size), ctx.env, ctx.device,
                             ctx.settings.precision) or {}
    model.eval()
    predictions = []
    mine = rank_share(len(rows), ctx.env)
    for first in range(0, len(mine), batch_size):
        inputs = collate_rows([rows[i] for i in mine[first:first + batch_size]])["encoder_input_tokens"]
        decoded = model.generate(inputs.to(ctx.device), max_length=max_length).cpu().tolist()
        predictions += [vocab.decode(ids) for ids in decoded]
    ordered = gather_in_item_order(mine, predictions, ctx.env)
    metrics["exact_match"] = exact_match([p.strip() for p in ordered], [t.strip() for t in task.validation_targets])
    return metrics
