"""Wiring every stage shares: run folder, device and ranks, optimizer and schedule from config, resume, and the
trainer over in-memory row sets."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from c4prep.shards import check_writable

from ..checkpoint import (
    RUN_FILES_FIELD,
    CheckpointError,
    file_sha256,
    holds_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    retire_checkpoints,
)
from ..config import settings_values, to_yaml
from ..config_errors import TrainConfigError
from ..config_groups import TrainConfig, TrainerConfig
from ..config_runs import RUN_CONFIG, recorded_settings, trained_run_folder
from ..data.batches import BatchPlan, make_loader
from ..data.char_vocabulary import VOCABULARY_FILE as CHAR_VOCABULARY_FILE
from ..data.kept_vocabulary import SHA256_FILE
from ..data.row_batches import RowBatches, length_order, row_set_eval_batches
from ..data.row_source import RowSource
from ..data.sentence_files import VOCABULARY_FILE as WORD_VOCABULARY_FILE
from ..distributed import DistEnv, init_distributed, select_device
from ..optim import build_optimizer, decay_groups
from ..resume_settings import flat_settings, resume_conflicts
from ..run_lock import hold_run_folder, missing_folders
from ..schedules import build_schedule
from ..trainer import BatchLoss, Trainer
from . import unread_settings
from .data_setup import TrainingData
from .model_setup import check_row_width_fits, differing_fields, initial_model

PACKED_ROW_MULTIPLE_FOR_GRAPHS = 8
TRAINING_STAGES = ("pretrain", "finetune")  # the stages that take backward passes
RUN_FILES = (CHAR_VOCABULARY_FILE, WORD_VOCABULARY_FILE, SHA256_FILE)  # what a run's ids mean (keep_run_files)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunContext:
    """Where and how this process runs. ``starts_over``: ``resume=never`` in a folder that holds another run's
    checkpoints, whose record (``config.yaml``, run files) is replaced only once the new run is built (`restore`),
    so that a run refused before it starts leaves the other run as it was; ``run_files`` waits there till then."""

    cfg: TrainConfig
    settings: TrainerConfig
    env: DistEnv
    device: torch.device
    run_dir: Path
    starts_over: bool = False
    run_files: dict[str, str] = field(default_factory=dict)


def start_run(cfg: TrainConfig) -> RunContext:
    """Pick the device, join the ranks, create the run folder and record the resolved config in it."""
    settings = cfg.trainer
    device = run_device(settings)
    if cfg.stage in TRAINING_STAGES and device.type != "cuda" and getattr(cfg.model, "attention_impl", None) == "flex":
        raise TrainConfigError("model.attention_impl=flex trains on CUDA only (FlexAttention has no backward pass on "
                               "the CPU): give trainer.device=cuda, or leave attention_impl at dense (the same model)")
    run_dir = check_run_folder(cfg.output_dir, cfg.stage)  # on every rank before they join: none has written yet
    env = init_distributed(device)
    torch.manual_seed(cfg.seed)  # dropout draws from it: a run from init_from's weights was seeded by nothing
    if settings.num_threads:
        torch.set_num_threads(settings.num_threads)
    resuming = cfg.resume != "never" and latest_checkpoint(run_dir) is not None
    if resuming:
        check_resumable_settings(run_dir, cfg)
    starts_over = cfg.resume == "never" and holds_checkpoints(run_dir)
    if env.is_main:
        try:
            made = missing_folders(run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            hold_run_folder(run_dir, made, (RUN_CONFIG, *RUN_FILES))
            check_writable(str(run_dir))  # a resume into a read-only folder failed writing its run files
            if not (resuming or starts_over):  # theirs is recorded once the checkpoint is loaded or retired
                record_settings(run_dir, cfg)
        except OSError as error:
            raise TrainConfigError(f"output_dir={run_dir} cannot be the run folder: {error.strerror or error} "
                                   f"({error.filename or run_dir}); give a folder that can be written") from None
    return RunContext(cfg, settings, env, device, run_dir, starts_over)


def run_device(settings: TrainerConfig) -> torch.device:
    """The device ``trainer.device`` picks for this rank; a one-line error for CUDA where there is none."""
    try:
        return select_device(settings.device)
    except ValueError as error:
        raise TrainConfigError(str(error)) from None


def check_run_folder(output_dir: str, stage: str) -> Path:
    """``output_dir`` as the run folder of ``stage``; a one-line error where it names none, holds files but no run of
    `train` (a project folder, a token dataset: the run would replace its ``config.yaml`` and write beside its files)
    or another stage's (a pre-training run into an evaluation's folder replaced its results)."""
    if not str(output_dir).strip():
        raise TrainConfigError("output_dir= names no folder: give the run's folder (a new one, or a run to resume)")
    run_dir = Path(output_dir)
    if not run_dir.is_dir() or all(entry.name.startswith(".") for entry in run_dir.iterdir()):  # .gitkeep
        return run_dir
    recorded = recorded_settings(run_dir)
    if not {"stage", "trainer"} <= recorded.keys():
        raise TrainConfigError(f"output_dir={run_dir} holds files but no run of `train` (its {RUN_CONFIG}), which "
                               "this run would write among: give a new or empty folder")
    if recorded["stage"] != stage:
        raise TrainConfigError(f"output_dir={run_dir} holds a run of stage={recorded['stage']} (its {RUN_CONFIG}): "
                               f"give stage={stage} another output_dir")
    return run_dir


def record_settings(run_dir: Path, cfg: TrainConfig) -> None:
    """The run folder's ``config.yaml``: the settings it trained with, which the stages using the run read."""
    (run_dir / RUN_CONFIG).write_text(to_yaml(cfg))


def check_resumable_settings(run_dir: Path, cfg: TrainConfig, checkpoint: tuple[Path, dict[str, Any]] | None = None
                             ) -> None:
    """A one-line error when the settings ``run_dir`` recorded (its ``config.yaml``, or those a ``checkpoint``
    file holds) differ from ``cfg`` in what a resume may not change (`resume_settings`)."""
    recorded, source = (recorded_settings(run_dir), run_dir / RUN_CONFIG) if checkpoint is None else \
        (checkpoint[1], f"as its checkpoint {checkpoint[0]} records them")
    conflicts = resume_conflicts(recorded, settings_values(cfg), unread_settings(cfg))
    if not conflicts:
        return
    key, old, new = conflicts[0]
    if key == "stage":
        raise TrainConfigError(f"output_dir={run_dir} holds a {old} run (its checkpoints and {RUN_CONFIG}): give "
                               f"the {new} stage another output_dir")
    more = f" (and {', '.join(other for other, _, _ in conflicts[1:])})" if len(conflicts) > 1 else ""
    raise TrainConfigError(f"{run_dir} holds a run with other settings, which resuming it would mix with these: "
                           f"{key} is {_setting(old)} there and {_setting(new)} now{more}; give a new output_dir, "
                           f"resume=never to start over in it, or its settings ({key}={_setting(old)}; {source})")


def _setting(value: Any) -> str:
    """A setting's value as the command line writes it (``null``, not ``None``)."""
    return "null" if value is None else repr(value)


def optimization_from_config(cfg: TrainConfig, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    """Optimizer over ``model``'s trainable parameters and LR schedule, from the ``optimizer:`` and ``schedule:``
    sections (``optimizer.decay_exclude`` picks which parameters skip weight decay)."""
    optimizer_cfg, schedule_cfg = cfg.optimizer, cfg.schedule
    options = dict(optimizer_cfg.options)
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    try:
        exclude = optimizer_cfg.decay_exclude
        parameters = (decay_groups(named, float(options.pop("weight_decay", 0.0)), exclude) if exclude
                      else [p for _, p in named])
        optimizer = build_optimizer(optimizer_cfg.name, parameters, lr=optimizer_cfg.lr, **options)
    except (KeyError, TypeError, ValueError) as error:
        raise TrainConfigError(f"bad optimizer settings: {error}") from None
    try:
        scheduler = build_schedule(schedule_cfg.name, optimizer, **schedule_cfg.options)
    except (TypeError, ValueError) as error:
        raise TrainConfigError(f"bad schedule.options: {error}") from None
    return optimizer, scheduler


def checkpoint_record(cfg: TrainConfig, model_spec: dict[str, Any], data_fingerprint: str,
                      config: dict[str, Any]) -> dict[str, Any]:
    """What a stage's checkpoints hold beside the training state: the model spec, the data's fingerprint, the
    settings the run trains with, ``config`` (what the stages that use the run read, with the stage) and the SHA-256
    of the run files its folder keeps (:func:`keep_run_files`)."""
    return {"model_spec": model_spec, "data_fingerprint": data_fingerprint, "settings": settings_values(cfg),
            "config": config | {"stage": cfg.stage}, RUN_FILES_FIELD: _kept_run_file_hashes(Path(cfg.output_dir))}


def _kept_run_file_hashes(run_dir: Path) -> dict[str, str]:
    return {name: file_sha256(run_dir / name) for name in RUN_FILES if (run_dir / name).is_file()}


def restore(trainer: Trainer, ctx: RunContext, data_fingerprint: str) -> None:
    """Apply ``resume=auto|never|must``: continue from the run folder's latest checkpoint when asked and present.
    The checkpoint's settings (:func:`checkpoint_record`) are checked as :func:`start_run` checks ``config.yaml``:
    an edited ``config.yaml`` cannot make a resume take a new ``optimizer.lr``, which it would ignore."""
    cfg = ctx.cfg
    if cfg.resume == "never":
        _start_over(trainer, ctx)
        return
    found = latest_checkpoint(trainer.run_dir)
    if cfg.resume == "must" and found is None:
        raise CheckpointError(f"resume=must but {trainer.run_dir} has no checkpoint; use resume=auto to start fresh")
    if found is None:
        trainer.logger.truncate_after(0)
        return
    state = load_checkpoint(found)
    if state["step"] > cfg.trainer.max_steps:  # it would train nothing, yet record max_steps as the run's
        raise TrainConfigError(f"{found} is at step {state['step']}, past trainer.max_steps="
                               f"{cfg.trainer.max_steps}: give trainer.max_steps={state['step']} or more to go on "
                               "from it, or a new output_dir")
    if "settings" in state:  # checkpoints written before they recorded them: config.yaml was checked
        check_resumable_settings(trainer.run_dir, cfg, (found, state["settings"]))
    if state.get("data_fingerprint") != data_fingerprint:
        raise CheckpointError(f"{found} was trained on other data or batch settings; use a new output_dir or "
                              "resume=never to start over")
    spec, trained = trainer.checkpoint_extra.get("model_spec", {}), state["model_spec"]
    changed = differing_fields(spec, trained)
    if changed:
        raise CheckpointError(f"{found} holds another model than the one configured ({changed[0]} is "
                              f"{trained.get(changed[0])!r} there and {spec.get(changed[0])!r} now); use a new "
                              "output_dir, resume=never to start over, or the run's model settings")
    try:
        trainer.load_state_dict(state)
    except CheckpointError as error:  # what a resume must match (the number of ranks), said as it is
        raise CheckpointError(f"{found}: {error}") from None
    except (KeyError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{found} does not fit this run's model or optimizer ({type(error).__name__}; "
                              "--debug shows it): use a new output_dir, or resume=never to start over") from None
    if trainer.env.is_main:
        record_settings(trainer.run_dir, cfg)
        log.info("resumed from %s at step %d", found, trainer.step)
        trained_steps = flat_settings(state.get("settings") or {}).get("trainer.max_steps")
        stretched = cfg.schedule.options.get("total_steps") == cfg.trainer.max_steps  # it follows max_steps
        if stretched and trained_steps not in (None, cfg.trainer.max_steps):
            log.info("trainer.max_steps=%d, %d when the run trained: schedule=%s now decays to step %d, the next "
                     "step at learning rate %.3g", cfg.trainer.max_steps, trained_steps, cfg.schedule.name,
                     cfg.trainer.max_steps, trainer.scheduler.get_last_lr()[0])


def _start_over(trainer: Trainer, ctx: RunContext) -> None:
    """Begin at step 0, the run built: without the metrics of a run before in the folder, and, when it
    ``starts_over`` another run's checkpoints, without them (pruning would keep their higher steps and delete this
    run's), with this run's record and run files."""
    trainer.logger.truncate_after(0)
    if not (ctx.starts_over and ctx.env.is_main):
        return
    retired = retire_checkpoints(ctx.run_dir)
    for name in RUN_FILES:  # the run before's that this one has not: they would say what its ids mean
        if name in ctx.run_files:
            (ctx.run_dir / name).write_text(ctx.run_files[name], encoding="utf-8")
        else:
            (ctx.run_dir / name).unlink(missing_ok=True)
    trainer.checkpoint_extra[RUN_FILES_FIELD] = _kept_run_file_hashes(ctx.run_dir)
    record_settings(ctx.run_dir, ctx.cfg)
    if retired:
        log.info("resume=never: removed the checkpoints of the run before in %s (%s, the newest of %d)", ctx.run_dir,
                 retired[-1].name, len(retired))


def row_set_trainer(cfg: TrainConfig, ctx: RunContext, train: RowSource, validation: RowSource | None,
                    batch_loss: BatchLoss, model: torch.nn.Module, model_spec: dict[str, Any],
                    validation_length: Callable[[dict[str, np.ndarray]], int] | None = None,
                    pack_length: int | None = None, drop_last: bool = False,
                    checkpoint_config: dict[str, Any] | None = None) -> Trainer:
    """A :class:`Trainer` over ``train`` (every item each epoch, the last batch completed from the same epoch's
    order; ``drop_last``: full batches only, as pre-training on token shards), validating on ``validation`` (in
    order of ``validation_length(row)`` when given, for tasks that cut a batch to its longest row); restored from
    the run folder when resuming. ``pack_length`` re-packs padded rows into that many positions (``data.pack:
    true``: the same losses on fewer positions). Checkpoints record ``checkpoint_config`` and the stage."""
    settings = ctx.settings
    first = train.row(0, 0) if train.size else {}
    if "input_tokens" in first:  # a decoder's rows, all of one width
        check_row_width_fits(model, pack_length or first["input_tokens"].shape[-1])
    plan = BatchPlan(train.size, settings.global_batch_size, ctx.env.world_size, settings.micro_batch_size,
                     seed=cfg.seed, drop_last=drop_last)
    # CUDA graphs are recorded once per batch shape: re-packed micro-batches then come in a few row counts
    packed_row_multiple = PACKED_ROW_MULTIPLE_FOR_GRAPHS if settings.cuda_graphs else 1
    stream = RowBatches(train, plan, ctx.env.rank, pack_length=pack_length, packed_row_multiple=packed_row_multiple)
    optimizer, scheduler = optimization_from_config(cfg, model)

    def train_batches(start_step: int):
        return iter(make_loader(stream.starting_at(start_step), settings.num_workers))

    evaluated = settings.eval_batches * settings.micro_batch_size * ctx.env.world_size or None  # 0: the whole split
    order = (length_order(validation, validation_length, evaluated) if validation is not None and validation_length
             else None)

    def validation_batches():
        return row_set_eval_batches(validation, ctx.env.rank, ctx.env.world_size, settings.micro_batch_size, order)

    extra = checkpoint_record(cfg, model_spec, stream.fingerprint, checkpoint_config or {})
    trainer = Trainer(settings, ctx.run_dir, model, batch_loss, optimizer, scheduler, train_batches, plan.grad_accum,
                      ctx.env, ctx.device, eval_batches=validation_batches if validation is not None else None,
                      checkpoint_extra=extra, rows_vary=pack_length is not None)
    restore(trainer, ctx, stream.fingerprint)
    return trainer


def fit_summary(ctx: RunContext, trainer: Trainer) -> dict[str, Any]:
    """Train to ``max_steps``; the run's summary (steps, losses, latest validation, and the seconds training took:
    the rest of a command's time is its start-up and what follows training)."""
    start, started = trainer.step, time.perf_counter()
    history = trainer.fit()
    return {"run_dir": str(ctx.run_dir), "start_step": start, "step": trainer.step,
            "losses": [s.loss for s in history], "validation": trainer.validation,
            "fit_seconds": round(time.perf_counter() - started, 3)}


def _differing_run_file(folder: Path, run_files: dict[str, str]) -> str | None:
    """The name of the first file of ``run_files`` that ``folder`` keeps with other content; None when none does."""
    for name, text in run_files.items():
        kept = folder / name
        if kept.is_file() and kept.read_text(encoding="utf-8") != text:
            return name
    return None


def check_run_files(init_from: str, run_files: dict[str, str]) -> None:
    """A one-line error when ``init_from``'s run folder keeps a file of ``run_files`` (a word or character
    vocabulary) that differs: its ids would mean other words or characters, though their number may match."""
    differing = _differing_run_file(trained_run_folder(init_from), run_files)
    if differing:
        raise TrainConfigError(f"init_from={init_from}: its {differing} differs from the one this data builds; use "
                               "the data the checkpoint was trained with")


def keep_run_files(ctx: RunContext, run_files: dict[str, str]) -> None:
    """Write the files that say what the run's ids mean into its folder (a run that ``starts_over`` another: once it
    starts); a one-line error, before any is replaced, when a run to resume there keeps other ones (its data's
    characters or words, or its vocabulary, changed)."""
    resuming = ctx.cfg.resume != "never" and latest_checkpoint(ctx.run_dir) is not None
    differing = _differing_run_file(ctx.run_dir, run_files) if resuming else None
    if differing:
        raise TrainConfigError(f"{ctx.run_dir} holds a run whose {differing} differs from the one this data builds: "
                               "resume it on the data it trained on, or give a new output_dir")
    if ctx.starts_over:
        ctx.run_files.update(run_files)
    elif ctx.env.is_main:
        for name, text in run_files.items():
            (ctx.run_dir / name).write_text(text, encoding="utf-8")


def pretrain_on_rows(cfg: TrainConfig, corpus: TrainingData) -> dict[str, Any]:
    """Pre-train a decoder (from scratch or ``init_from``'s weights) on an in-memory row corpus; the run folder
    keeps the corpus's run files (a word vocabulary)."""
    ctx = start_run(cfg)
    return fit_summary(ctx, rows_pretrain_trainer(cfg, ctx, corpus))


def rows_pretrain_trainer(cfg: TrainConfig, ctx: RunContext, corpus: TrainingData) -> Trainer:
    """`pretrain_on_rows`' trainer, wired and restored (when resuming), ready for ``fit()``."""
    if cfg.init_from:
        check_run_files(cfg.init_from, corpus.run_files)
    keep_run_files(ctx, corpus.run_files)
    model, spec = initial_model(cfg, corpus.vocab_size)
    return row_set_trainer(cfg, ctx, corpus.train, corpus.validation, corpus.batch_loss, model, spec,
                           pack_length=corpus.pack_length)
