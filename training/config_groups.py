"""Typed configuration: one structured config (dataclass) per config group option, validated once.

Hydra composes ``configs/train.yaml``; :func:`typed_config` then merges every group with its schema (picked by
``model.name``, ``objective.name`` and ``data.kind``), so a wrong type, an unknown key or a missing value is refused
before anything runs, and stages read typed attributes (``cfg.data.block_size``), never raw dicts.
Model schemas are derived from the models' own config dataclasses: a field left unset (``None``) keeps the size's
value.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from .config_data import DATA_SCHEMAS
from .config_errors import TrainConfigError, require_at_least, require_choice
from .experiments.adavae.classify_settings import ClassifySettings
from .experiments.adavae.model import AdaVAEConfig
from .models.gpt import GPTConfig
from .models.t5 import T5Config

PRECISIONS = ("fp32", "bf16")
COMPILE_SCOPES = ("model", "blocks")  # what torch.compile compiles: the whole model, or its repeated layer once
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's
LOSS_CHECKS = ("step", "log")  # when the host reads the loss: before each update, or at log/eval/checkpoint steps
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the compile modes that replay CUDA graphs
DEVICES = ("auto", "cpu", "cuda")
RESUME_MODES = ("auto", "never", "must")


@dataclass
class TrainerConfig:
    """``trainer:``: steps, batch sizes, precision, device and logging of every stage that trains."""

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
    compile: bool = False  # torch.compile the training forward passes
    compile_mode: str = "default"  # torch.compile's mode; reduce-overhead replays CUDA graphs (static shapes)
    compile_scope: str = "model"  # model: the whole forward pass; blocks: the repeated layer, compiled once for all
    tf32: bool = False  # CUDA only: TF32 tensor cores for fp32 matmuls
    loss_check: str = "step"  # step: each loss read before its update; log: read at log/eval/checkpoint steps
    capture_steps: bool = False  # CUDA only: each whole step (forward to optimizer) replayed as one CUDA graph

    def __post_init__(self) -> None:
        require_choice("trainer.precision", self.precision, PRECISIONS)
        require_choice("trainer.device", self.device, DEVICES)
        require_choice("trainer.compile_mode", self.compile_mode, COMPILE_MODES)
        require_choice("trainer.loss_check", self.loss_check, LOSS_CHECKS)
        require_choice("trainer.compile_scope", self.compile_scope, COMPILE_SCOPES)
        for name, default in (("compile_mode", "default"), ("compile_scope", "model")):
            if getattr(self, name) != default and not self.compile:
                raise TrainConfigError(f"trainer.{name}={getattr(self, name)} needs trainer.compile=true")
        if self.capture_steps and self.loss_check != "log":
            raise TrainConfigError("trainer.capture_steps=true needs trainer.loss_check=log (a captured step updates "
                                   "the model before its loss can be read)")
        if self.capture_steps and self.compiled_cuda_graphs:
            raise TrainConfigError(f"trainer.capture_steps=true captures the whole step itself; use it with "
                                   f"trainer.compile_mode=default, not {self.compile_mode}")
        for name in ("max_steps", "global_batch_size", "micro_batch_size", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise TrainConfigError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("num_workers", "num_threads", "eval_every", "eval_batches", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise TrainConfigError(f"trainer.{name} must be >= 0, got {getattr(self, name)}")
        if self.grad_clip < 0:
            raise TrainConfigError(f"trainer.grad_clip must be >= 0 (0 disables clipping), got {self.grad_clip}")

    @property
    def compiled_cuda_graphs(self) -> bool:
        """Whether the compiled forward passes replay CUDA graphs (torch.compile's graph modes, on CUDA)."""
        return self.compile and self.compile_mode in CUDA_GRAPH_MODES

    @property
    def cuda_graphs(self) -> bool:
        """Whether training replays CUDA graphs recorded once per batch shape (compiled or whole captured steps)."""
        return self.compiled_cuda_graphs or self.capture_steps


# ------------------------------------------------------------------------------------------------- model
def _schema_type(annotation: Any) -> Any:
    """The OmegaConf-representable form of a model config field's type (unions of scalars become ``Any``)."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return str
    if origin is tuple:
        return list[typing.get_args(annotation)[0]]
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return Optional[_schema_type(args[0])] if len(args) == 1 else Any
    return annotation


def _model_schema(family: str, config_cls: type, size: str | None, skip: tuple[str, ...]) -> type:
    """``model:`` schema of ``family``: ``name``, a ``size`` (when the family has sizes) and every field of
    ``config_cls`` but ``skip``; with a size the fields are optional overrides (``None``: the size's value),
    without one they keep the config class's defaults."""
    hints = typing.get_type_hints(config_cls)
    specs: list[tuple[str, Any, Any]] = [("name", str, field(default=family))]
    if size is not None:
        specs.append(("size", str, field(default=size)))
    for item in dataclasses.fields(config_cls):
        if item.name in skip:
            continue
        kind = _schema_type(hints[item.name])
        if size is not None:
            specs.append((item.name, Optional[kind], field(default=None)))
        elif isinstance(item.default, tuple):
            specs.append((item.name, kind, field(default_factory=lambda value=item.default: list(value))))
        else:
            specs.append((item.name, kind, field(default=item.default)))
    return dataclasses.make_dataclass(f"{family.upper()}ModelConfig", specs)


MODEL_SCHEMAS: dict[str, type] = {
    "t5": _model_schema("t5", T5Config, "t5_small", skip=("vocab_size", "adapter_dim", "pad_id", "eos_id",
                                                          "decoder_start_id")),
    "gpt": _model_schema("gpt", GPTConfig, "gpt_tiny", skip=("vocab_size",)),
    "adavae": _model_schema("adavae", AdaVAEConfig, None, skip=()),
}


def model_settings(model: Any) -> dict[str, Any]:
    """The fields of a ``model:`` config that are set (``None`` keeps the size's value): the model's spec."""
    return {name: value for name, value in dataclasses.asdict(model).items() if value is not None}


# --------------------------------------------------------------------------------------------- objective
@dataclass
class TokenObjectiveConfig:
    """``objective:`` over token shards (span_corruption, the Table-3 objectives, lm)."""

    name: str
    inputs_length: int
    targets_length: int
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class VAEObjectiveConfig:
    """``objective=vae``: AdaVAE's loss and its per-step schedule."""

    name: str = "vae"
    kl_rate: float = 0.5
    free_bits: str = "total"
    reconstruction: str = "sentence"
    cycles: int = 4
    ratio_zero: float = 0.25
    ratio_increase: float = 0.25
    beta_max: float = 1.0
    phase_two_fraction: float = 0.1667


# ------------------------------------------------------------------------------------ optimizer, schedule
@dataclass
class OptimizerConfig:
    name: str
    lr: float
    decay_exclude: Optional[str] = None  # bias | vectors: parameters without weight decay
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScheduleConfig:
    name: str
    options: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------- stage settings
@dataclass
class FinetuneConfig:
    """``finetune:`` (T5 3.5.1)."""

    adapter_dim: int = 0
    unfreeze_every: int = 0

    def __post_init__(self) -> None:
        require_at_least(self, "finetune.", ("adapter_dim", "unfreeze_every"), 0)


@dataclass
class EvaluateConfig:
    """``evaluate:`` (model=adavae): importance samples per sentence and how many are scored at a time."""

    iw_samples: int = 100
    iw_chunk: int = 20

    def __post_init__(self) -> None:
        require_at_least(self, "evaluate.", ("iw_samples", "iw_chunk"), 1)


@dataclass
class GenerateConfig:
    """``generate:``: samples from a GPT or T5 run's prompts; for AdaVAE, sentences from prior samples,
    interpolations and an analogy. Decoding (all models): at most ``max_tokens`` per sample, greedy or drawn at
    ``temperature`` from the ``top_k`` most likely (None: all) with ``seed``."""

    prompts: list[str] = field(default_factory=list)  # GPT/T5: texts to continue (GPT) or answer (T5)
    prompts_file: Optional[str] = None  # GPT/T5: more prompts, one a line
    num_samples: int = 1  # GPT/T5: samples per prompt
    sentences: list[int] = field(default_factory=lambda: [0, 1, 2])  # AdaVAE: lines of data.test
    interpolation_steps: int = 10
    analogy_degree: float = 1.0
    prior_samples: int = 5
    max_tokens: int = 30
    greedy: bool = False
    temperature: float = 1.0
    top_k: Optional[int] = 100

    def __post_init__(self) -> None:
        for name in ("num_samples", "max_tokens"):
            if getattr(self, name) < 1:
                raise TrainConfigError(f"generate.{name} must be >= 1, got {getattr(self, name)}")
        if self.temperature <= 0:
            raise TrainConfigError(f"generate.temperature must be > 0 (generate.greedy=true for the argmax), got "
                                   f"{self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise TrainConfigError(f"generate.top_k must be >= 1 or null (every id), got {self.top_k}")
        defaults = {item.name: item.default for item in dataclasses.fields(self)}
        sampling = [name for name in ("temperature", "top_k") if getattr(self, name) != defaults[name]]
        if self.greedy and sampling:
            raise TrainConfigError(f"generate.{sampling[0]}={getattr(self, sampling[0])!r} does nothing with "
                                   "generate.greedy=true (it takes the most likely id; nothing is drawn): remove one "
                                   "of them")


@dataclass
class TrainConfig:
    """The whole ``train`` configuration, typed. Groups hold the schema their option selects."""

    stage: str
    seed: int
    output_dir: str
    init_from: Optional[str]
    z_loss: float
    resume: str
    finetune: FinetuneConfig
    evaluate: EvaluateConfig
    generate: GenerateConfig
    classify: ClassifySettings
    trainer: TrainerConfig
    model: Any
    objective: Any
    data: Any
    optimizer: OptimizerConfig
    schedule: ScheduleConfig

    def __post_init__(self) -> None:
        require_at_least(self, "", ("seed", "z_loss"), 0)


GROUP_SCHEMAS: dict[str, tuple[str, dict[str, type]]] = {  # group -> (key that picks the schema, schemas)
    "model": ("name", MODEL_SCHEMAS),
    "objective": ("name", {"vae": VAEObjectiveConfig}),
    "data": ("kind", DATA_SCHEMAS),
}
DEFAULT_OBJECTIVE_SCHEMA = TokenObjectiveConfig
