"""Wiring every stage shares: run folder, device and ranks, model/optimizer/schedule from config, resume."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from ..checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, resolve_checkpoint
from ..config import TrainConfigError, TrainerSettings, section, to_yaml, trainer_settings
from ..distributed import DistEnv, init_distributed, select_device
from ..models import build_model
from ..optim import build_optimizer, decay_groups
from ..schedules import build_schedule
from ..trainer import Trainer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunContext:
    """Where and how this process runs."""

    cfg: DictConfig
    settings: TrainerSettings
    env: DistEnv
    device: torch.device
    run_dir: Path


def start_run(cfg: DictConfig) -> RunContext:
    """Pick the device, join the ranks, create the run folder and record the resolved config in it."""
    settings = trainer_settings(cfg)
    try:
        device = select_device(settings.device)
    except ValueError as error:
        raise TrainConfigError(str(error)) from None
    env = init_distributed(device)
    if settings.num_threads:
        torch.set_num_threads(settings.num_threads)
    run_dir = Path(cfg.output_dir)
    if env.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(to_yaml(cfg))
    return RunContext(cfg, settings, env, device, run_dir)


def model_from_config(cfg: DictConfig, vocab_size: int) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model the ``model:`` section names, initialised from ``seed``; also returns its spec for checkpoints."""
    spec = {**section(cfg, "model"), "vocab_size": vocab_size}
    torch.manual_seed(cfg.seed)
    return _build(spec), spec


REGULARISATION_FIELDS = ("dropout", "dropout_rate")  # GPT, T5: training choices, not architecture


def run_folder(checkpoint: str) -> Path:
    """The run folder of a checkpoint file (``<run>/checkpoints/step_*.pt``) or the folder itself."""
    return resolve_checkpoint(checkpoint).parents[1]


def model_from_init(cfg: DictConfig, vocab_size: int, remedy: str) -> tuple[torch.nn.Module, dict[str, Any]]:
    """``init_from``'s model (weights and architecture, :func:`finetuning_state`'s dropout) and its spec; a one-line
    error, ending with ``remedy``, when it is not the model family of the ``model:`` section or its ids are not
    the data's ``vocab_size``."""
    state = finetuning_state(load_checkpoint(cfg.init_from), cfg)
    family, configured = state["model_spec"].get("name"), section(cfg, "model").get("name")
    if family != configured:
        raise TrainConfigError(f"init_from={cfg.init_from} is a {family} checkpoint but the config's model is "
                               f"{configured}: choose a {family} model preset so the data rows fit the model")
    checkpoint_ids = state["model_spec"].get("vocab_size")
    if checkpoint_ids != vocab_size:
        raise TrainConfigError(f"init_from={cfg.init_from} has {checkpoint_ids} ids, the data's vocabulary "
                               f"{vocab_size}: {remedy}")
    return model_from_checkpoint(state), state["model_spec"]


def initial_model(cfg: DictConfig, vocab_size: int) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The model to pre-train: ``init_from``'s (continued pre-training) when set, else a fresh one from the
    ``model:`` section; and its spec."""
    if not cfg.init_from:
        return model_from_config(cfg, vocab_size)
    return model_from_init(cfg, vocab_size, "continue pre-training on data encoded with the checkpoint's vocabulary")


def finetuning_state(state: dict[str, Any], cfg: DictConfig) -> dict[str, Any]:
    """A checkpoint to fine-tune from: its weights and architecture, with the dropout that the config's ``model:``
    section sets when it names the same model family (e.g. CS224N A5's 0.1 when fine-tuning a model pre-trained
    without dropout). Unset fields keep the checkpoint's value."""
    model_section = section(cfg, "model")
    if model_section.get("name") != state["model_spec"].get("name"):
        return state
    overrides = {name: model_section[name] for name in REGULARISATION_FIELDS if name in model_section}
    return {**state, "model_spec": {**state["model_spec"], **overrides}}


def model_from_checkpoint(state: dict[str, Any], strict: bool = True) -> torch.nn.Module:
    """The model a checkpoint's spec describes, its weights loaded (``strict=False``: new modules such as adapters
    keep their initialisation)."""
    model = _build(state["model_spec"])
    try:
        model.load_state_dict(state["model"], strict=strict)
    except RuntimeError:
        raise CheckpointError(f"the checkpoint's weights do not fit the {state['model_spec'].get('name')} model its "
                              "model_spec describes (missing or mis-shaped tensors; --debug lists them): pass a "
                              "checkpoint that `train` wrote") from None
    return model


def _build(spec: dict[str, Any]) -> torch.nn.Module:
    try:
        return build_model(**spec)
    except (TypeError, ValueError) as error:
        raise TrainConfigError(f"bad model settings {spec}: {error}") from None


def optimization_from_config(cfg: DictConfig, model: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    """Optimizer over ``model``'s trainable parameters and LR schedule, from the ``optimizer:`` and ``schedule:``
    sections (``optimizer.decay_exclude`` picks which parameters skip weight decay)."""
    optimizer_cfg, schedule_cfg = section(cfg, "optimizer"), section(cfg, "schedule")
    options = dict(optimizer_cfg.get("options", {}))
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    try:
        exclude = optimizer_cfg.get("decay_exclude")
        parameters = (decay_groups(named, float(options.pop("weight_decay", 0.0)), exclude) if exclude
                      else [p for _, p in named])
        optimizer = build_optimizer(optimizer_cfg["name"], parameters, lr=float(optimizer_cfg["lr"]), **options)
        scheduler = build_schedule(schedule_cfg["name"], optimizer, **schedule_cfg.get("options", {}))
    except (KeyError, TypeError, ValueError) as error:
        raise TrainConfigError(f"bad optimizer/schedule settings: {error}") from None
    return optimizer, scheduler


def restore(trainer: Trainer, cfg: DictConfig, data_fingerprint: str) -> None:
    """Apply ``resume=auto|never|must``: continue from the run folder's latest checkpoint when asked and present."""
    found = latest_checkpoint(trainer.run_dir)
    if cfg.resume == "must" and found is None:
        raise CheckpointError(f"resume=must but {trainer.run_dir} has no checkpoint; use resume=auto to start fresh")
    if found is None or cfg.resume == "never":
        trainer.logger.truncate_after(0)
        return
    state = load_checkpoint(found)
    if state.get("data_fingerprint") != data_fingerprint:
        raise CheckpointError(f"{found} was trained on other data or batch settings; use a new output_dir or "
                              "resume=never to start over")
    trainer.load_state_dict(state)
    if trainer.env.is_main:
        log.info("resumed from %s at step %d", found, trainer.step)
