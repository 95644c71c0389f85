"""Training configuration: Hydra composition over ``configs/`` plus typed, validated sections.

``load_config(["stage=pretrain", "model=t5_tiny"])`` composes ``configs/train.yaml`` with the overrides the way
``train`` does. Every user mistake (unknown key, unknown group option, wrong type, bad value) becomes a
:class:`TrainConfigError` whose message is one line saying what to fix.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

STAGES = ("pretrain", "finetune", "evaluate", "generate", "classify")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
RESUME_MODES = ("auto", "never", "must")


class TrainConfigError(ValueError):
    """A bad override or setting; the message says what to fix."""


def config_dir() -> Path:
    """The bundled ``configs/`` folder (inside the installed package)."""
    return Path(str(resources.files("c4prep.configs")))


def _one_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    options = [line for line in lines[1:] if not line.startswith(("Config search path", "provider="))]
    text = lines[0] if lines else type(error).__name__
    if "Available options" in " ".join(options):
        text += " (available: " + ", ".join(o for o in options if "Available options" not in o) + ")"
    elif len(lines) > 1 and lines[1].startswith("To append"):
        text = text.rstrip(".") + f"; {lines[1][0].lower()}{lines[1][1:]} (or check the key's spelling)"
    return text


def load_config(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose ``train.yaml`` with Hydra-style ``key=value`` / ``group=option`` overrides, then validate."""
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3", job_name="train"):
            cfg = compose(config_name="train", overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as error:
        raise TrainConfigError(f"bad override: {_one_line(error)}") from None
    trainer_settings(cfg)  # validates the trainer section
    _require_choice("stage", cfg.stage, STAGES)
    _require_choice("resume", cfg.resume, RESUME_MODES)
    return cfg


def _require_choice(key: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise TrainConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(choices)}")


@dataclass(frozen=True)
class TrainerSettings:
    """The ``trainer:`` section, typed."""

    max_steps: int
    global_batch_size: int
    micro_batch_size: int
    grad_clip: float
    precision: str
    device: str
    num_workers: int
    num_threads: int
    log_every: int
    eval_every: int
    eval_batches: int
    checkpoint_every: int
    keep_checkpoints: int
    tensorboard: bool
    progress: bool

    def __post_init__(self) -> None:
        _require_choice("trainer.precision", self.precision, PRECISIONS)
        _require_choice("trainer.device", self.device, DEVICES)
        for name in ("max_steps", "global_batch_size", "micro_batch_size", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise TrainConfigError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("num_workers", "num_threads", "eval_every", "eval_batches", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise TrainConfigError(f"trainer.{name} must be >= 0, got {getattr(self, name)}")
        if self.grad_clip < 0:
            raise TrainConfigError(f"trainer.grad_clip must be >= 0 (0 disables clipping), got {self.grad_clip}")


def trainer_settings(cfg: DictConfig) -> TrainerSettings:
    """Typed view of ``cfg.trainer``; wrong types and unknown keys raise :class:`TrainConfigError`."""
    section = OmegaConf.to_container(cfg.trainer)
    expected = {f.name: f.type for f in fields(TrainerSettings)}
    unknown = sorted(set(section) - set(expected))
    if unknown:
        raise TrainConfigError(f"unknown trainer setting(s): {', '.join(unknown)}; valid: {', '.join(expected)}")
    values = {}
    for name, type_name in expected.items():
        if name not in section:
            raise TrainConfigError(f"trainer.{name} is missing from the config")
        values[name] = _typed(f"trainer.{name}", section[name], type_name)
    return TrainerSettings(**values)


def _typed(key: str, value: Any, type_name: str) -> Any:
    """Check a scalar against a dataclass field's annotation (given as a string: ``from __future__``)."""
    if type_name == "bool":
        if isinstance(value, bool):
            return value
    elif type_name == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif type_name == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif type_name == "str":
        if isinstance(value, str):
            return value
    raise TrainConfigError(f"{key}={value!r} must be of type {type_name}")


def section(cfg: DictConfig, key: str) -> dict[str, Any]:
    """A config section as a plain dict (``{}`` when absent)."""
    node = cfg.get(key)
    return {} if node is None else dict(OmegaConf.to_container(node))


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)
