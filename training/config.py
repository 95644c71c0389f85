"""Training configuration: Hydra composition over ``configs/``, typed and validated once.

``load_config(["stage=pretrain", "model=t5_tiny"])`` composes ``configs/train.yaml`` with the overrides the way
``train`` does and returns a :class:`~c4prep.training.config_groups.TrainConfig`: every group merged with the
structured config its option selects (``config_groups``). Every user mistake (unknown key, unknown group option,
wrong type, bad value) becomes a :class:`TrainConfigError` whose message is one line saying what to fix.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .config_errors import TrainConfigError, require_choice
from .config_groups import DEFAULT_OBJECTIVE_SCHEMA, GROUP_SCHEMAS, RESUME_MODES, TrainConfig, model_settings
from .config_runs import RUN_STAGES, absolute_path, run_section_keys, with_run_model, with_run_settings

DATA_PATHS = ("tokens", "vocab", "train", "validation", "test", "corpus", "text", "evaluate", "predictions", "folder",
              "unsupervised_tokens")  # data settings that name a file or folder (TokensData's splits are names)
STAGES = ("pretrain", "finetune", "evaluate", "generate", "classify")
TYPE_NAMES = {"Integer": "int", "Float": "float", "Boolean": "bool", "String": "str"}  # OmegaConf's names


def config_dir() -> Path:
    """The bundled ``configs/`` folder (inside the installed package)."""
    return Path(str(resources.files("c4prep.configs")))


def _compose(overrides: Sequence[str]) -> DictConfig:
    """``train.yaml`` composed with ``overrides``, unresolved."""
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3", job_name="train"):
        return compose(config_name="train", overrides=list(overrides))


def _one_line(error: Exception, overrides: Sequence[str]) -> str:
    """Hydra's or OmegaConf's error as one line, with the options or the closest setting where that helps."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    options = [line for line in lines[1:] if not line.startswith(("Config search path", "provider="))]
    text = lines[0] if lines else type(error).__name__
    removed = re.match(r"Interpolation key '([^']+)' not found", text)
    if text.startswith("Ambiguous value"):
        text += (": write a list as [a,b] and a string with commas quoted ('a,b'); train runs no sweeps: run it once "
                 "per value, each with its own output_dir")
    elif removed and f"~{removed.group(1)}" in overrides:
        text = (f"~{removed.group(1)} removes a setting that others use: set it with {removed.group(1)}=VALUE "
                "instead")
    if "Available options" in " ".join(options):
        text += " (available: " + ", ".join(o for o in options if "Available options" not in o) + ")"
    elif len(lines) > 1 and lines[1].startswith("To append"):
        unknown = re.match(r"Could not override '([^']+)'", text)
        hint = _unknown_key_hint(unknown.group(1), overrides) if unknown else None
        text = text.rstrip(".") + (hint or f"; {lines[1][0].lower()}{lines[1][1:]} (or check the key's spelling)")
    return text


def _unknown_key_hint(key: str, overrides: Sequence[str]) -> str | None:
    """What to do about ``key``, which the config that the other ``overrides`` compose does not hold: ``+key=``
    where its section's schema has it (a preset leaves it unset); else the setting beside it whose name is closest;
    else the settings the section has. None if the other overrides do not compose either."""
    parent, _, name = key.rpartition(".")
    others = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    try:
        cfg = _compose(others)
    except (HydraException, OmegaConfBaseException):
        return None
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return None
    schema = _section_schema(cfg, parent)
    fields = [field.name for field in dataclasses.fields(schema)] if schema else []
    if name in fields:
        return f"; this config leaves it unset: +{key}=VALUE sets it"
    present = [str(k) for k in node.keys()]
    close = difflib.get_close_matches(name, present + fields, n=1)
    if close:
        unset = "" if close[0] in present else "+"  # a field the config leaves unset is set with +
        return f" (did you mean {unset}{parent + '.' if parent else ''}{close[0]}?)"
    if fields:
        return f"; {parent or 'the config'} has no setting {name} here (its settings: {', '.join(fields)})"
    return None


def _section_schema(cfg: DictConfig, parent: str) -> type | None:
    """The structured config of the section ``parent`` (``""``: the top level) as ``cfg`` selects it."""
    top, _, rest = parent.partition(".")
    section: Any = TrainConfig
    if top in GROUP_SCHEMAS:
        selector, schemas = GROUP_SCHEMAS[top]
        section = schemas.get(OmegaConf.select(cfg, f"{top}.{selector}"),
                              DEFAULT_OBJECTIVE_SCHEMA if top == "objective" else None)
    else:
        rest = parent
    for part in filter(None, rest.split(".")):
        section = typing.get_type_hints(section).get(part) if dataclasses.is_dataclass(section) else None
    return section if dataclasses.is_dataclass(section) else None


def _max_steps_fraction(fraction: float, *, _root_: DictConfig) -> int | None:
    """``${max_steps_fraction:0.05}``: that fraction of ``trainer.max_steps``, rounded (a preset's warm-up that
    shortens with the run); None where ``trainer.max_steps`` is no whole number, which the type check then names
    (``trainer.max_steps=abc`` failed here, in a TypeError naming neither)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"max_steps_fraction must be in [0, 1], got {fraction}")
    steps = _root_.trainer.max_steps
    return round(fraction * steps) if isinstance(steps, int) else None


OmegaConf.register_new_resolver("max_steps_fraction", _max_steps_fraction, replace=True)


def _options(group: str) -> str:
    """The options of a config group, as a message lists them."""
    return ", ".join(sorted(path.stem for path in (config_dir() / group).glob("*.yaml")))


def _check_override_forms(overrides: Sequence[str]) -> None:
    """One line for an override Hydra cannot apply and would answer with a traceback (``=3``, ``model=null``,
    ``~model``) or a parser's riddle (``trainer``, the ``trainer.max_steps`` of ``trainer.max_steps = 3``)."""
    for override in overrides:
        key, equals, value = override.partition("=")
        name = key.lstrip("+~")
        if not name:
            raise TrainConfigError(f"override {override!r} names no setting: write key=value (e.g. "
                                   "trainer.max_steps=100)")
        if not equals and not key.startswith("~"):
            raise TrainConfigError(f"override {override!r} has no '=': write key=value, with no spaces around '='")
        group = name.split(".")[0]
        if name in GROUP_SCHEMAS or name in ("optimizer", "schedule"):
            if key.startswith("~") or value == "null":
                raise TrainConfigError(f"{override} leaves the run without a {name}, which every run needs: choose "
                                       f"one with {name}=<option> ({_options(name)})")
            if value.startswith("["):
                raise TrainConfigError(f"{override} picks several; a run has one {name}: choose one "
                                       f"({_options(name)})")
        if group in ("model", "data") and name == f"{group}.{GROUP_SCHEMAS[group][0]}":
            raise TrainConfigError(f"{name} follows the {group}=<option> a run picks: pick the {group} there "
                                   f"({_options(group)})")
        if name == "experiment" and value == "null":
            raise TrainConfigError("experiment=null: no preset is the default; leave the override out")


def load_config(overrides: Sequence[str] = ()) -> TrainConfig:
    """Compose ``train.yaml`` with Hydra-style ``key=value`` / ``group=option`` overrides, then type and validate.
    A stage that uses a trained run (``config_runs.RUN_STAGES``) starts from ``init_from``'s run settings."""
    _check_override_forms(overrides)
    hydra_setting = next((o for o in overrides if o.lstrip("+~").startswith(("hydra.", "hydra/", "hydra="))), None)
    if hydra_setting is not None:  # compose() accepts and ignores them
        raise TrainConfigError(f"{hydra_setting} does nothing: train composes its settings without running a Hydra "
                               "app (the run's folder is output_dir=): remove it")
    held = run_section_keys(overrides)
    try:
        cfg = _compose([override for override in overrides if override not in held])
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as error:
        raise TrainConfigError(f"bad override: {_one_line(error, overrides)}") from None
    if cfg.init_from is not None and not str(cfg.init_from).strip():  # `init_from=$RUN` with RUN unset
        raise TrainConfigError("init_from= names no checkpoint: give a checkpoint file or run folder, or leave "
                               "init_from out to start from scratch")
    if cfg.init_from:
        cfg = with_run_settings(cfg, overrides, held) if cfg.stage in RUN_STAGES else with_run_model(cfg, overrides)
    return with_absolute_paths(typed_config(cfg))


def with_absolute_paths(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with the local files and folders it reads (``init_from``, the data's) as absolute paths, so that
    the run folder's ``config.yaml`` names them for the stages and exports that read it from any working folder."""
    cfg.init_from = absolute_path(cfg.init_from)
    data = cfg.data
    for name in DATA_PATHS:
        if hasattr(data, name):
            setattr(data, name, _path_setting(f"data.{name}", getattr(data, name)))
    for task, files in getattr(data, "tasks", {}).items():
        files.train = _path_setting(f"data.tasks.{task}.train", files.train)
        files.validation = _path_setting(f"data.tasks.{task}.validation", files.validation)
    cfg.generate.prompts_file = _path_setting("generate.prompts_file", cfg.generate.prompts_file)
    return cfg


def _path_setting(key: str, path: str | None) -> str | None:
    """A path setting made absolute; a one-line error for one that names nothing (``data.evaluate=$FILE`` with FILE
    unset would otherwise mean "none", silently)."""
    if isinstance(path, str) and not path.strip():
        raise TrainConfigError(f"{key}= names no file or folder: give one, or leave {key} out")
    return absolute_path(path)


def typed_config(cfg: DictConfig) -> TrainConfig:
    """``cfg`` merged with its schemas: each group with the one its ``name``/``kind`` selects."""
    _require_finite(OmegaConf.to_container(cfg), "")
    groups = {}
    for group, (key, schemas) in GROUP_SCHEMAS.items():
        choice = cfg[group].get(key)
        schema = schemas.get(choice, DEFAULT_OBJECTIVE_SCHEMA if group == "objective" else None)
        if schema is None:
            raise TrainConfigError(f"{group}.{key}={choice!r} is not valid; choose one of: {', '.join(schemas)}")
        groups[group] = _structured(schema, cfg[group], prefix=f"{group}.")
    rest = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in groups])
    typed = _structured(TrainConfig, OmegaConf.merge(rest, {group: None for group in groups}), prefix="")
    for group, value in groups.items():
        setattr(typed, group, value)
    require_choice("stage", typed.stage, STAGES)
    require_choice("resume", typed.resume, RESUME_MODES)
    return typed


def _require_finite(values: Any, key: str) -> None:
    """A one-line error for the first NaN or infinity among ``values``: no setting takes one, and a range check
    lets NaN through (every comparison with it is false): ``trainer.grad_clip=nan`` trained until the loss was NaN,
    then advised a lower learning rate."""
    if isinstance(values, float) and not math.isfinite(values):
        raise TrainConfigError(f"{key} must be a finite number, got {values}")
    items = values.items() if isinstance(values, dict) else enumerate(values) if isinstance(values, list) else ()
    for name, value in items:
        _require_finite(value, f"{key}.{name}" if key and isinstance(name, str) else f"{key}[{name}]" if key else name)


def _structured(schema: type, values: DictConfig, prefix: str) -> Any:
    """``values`` as an instance of ``schema``; a wrong type, unknown or missing key is one line."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))
    except OmegaConfBaseException as error:
        key = f"{prefix}{error.full_key}" if getattr(error, "full_key", None) else prefix.rstrip(".")
        message = str(error).splitlines()[0]
        wrong_type = re.match(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", message)
        if wrong_type:
            value, expected = wrong_type.groups()
            raise TrainConfigError(f"{key}={value!r} must be of type {TYPE_NAMES.get(expected, expected)}") from None
        unknown = re.match(r"Key '(\w+)' not in '\w+'", message)
        close = _closest_field(schema, getattr(error, "full_key", None) or "", unknown.group(1)) if unknown else None
        hint = f" (did you mean {prefix}{close}?)" if close else ""
        raise TrainConfigError(f"bad setting {key}: {message}{hint}" if key else f"bad setting: {message}") from None


def _closest_field(schema: type, full_key: str, name: str) -> str | None:
    """The field beside ``full_key`` in ``schema`` whose name is most like ``name`` (as ``parent.field``)."""
    parent = full_key.rpartition(".")[0]
    section: Any = schema
    for part in filter(None, parent.split(".")):
        section = typing.get_type_hints(section).get(part)
        if not dataclasses.is_dataclass(section):
            return None
    close = difflib.get_close_matches(name, [field.name for field in dataclasses.fields(section)], n=1)
    return f"{parent}.{close[0]}".lstrip(".") if close else None


def settings_values(cfg: TrainConfig) -> dict[str, Any]:
    """The typed configuration as plain values, as the run folder's ``config.yaml`` records them; the model lists
    the fields it sets."""
    values = OmegaConf.to_container(OmegaConf.structured(cfg))
    values["model"] = model_settings(cfg.model)
    return values


def to_yaml(cfg: TrainConfig) -> str:
    """The typed configuration as YAML (the run folder's ``config.yaml``)."""
    return OmegaConf.to_yaml(settings_values(cfg))
