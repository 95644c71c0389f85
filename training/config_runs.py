"""The settings of a trained run for the stages that use one (``evaluate``, ``generate``, ``classify``).

Such a stage scores or samples ``init_from``'s model on the data and objective it was trained with: ``model``,
``objective``, ``data`` and ``z_loss`` come from the run folder's ``config.yaml`` (written when it trained; for a
checkpoint file copied out of its run, from the settings the checkpoint records), and what the command line sets
wins: ``data=<option>`` replaces the whole section, ``objective.inputs_length=64`` that one key. A preset
(``experiment=``) does not override them: it describes how a run trains. The stage writes into
``<run folder>/<stage>`` unless the command line gives ``output_dir``.

A stage that trains from ``init_from`` takes only the run's ``model`` section (:func:`with_run_model`): the
checkpoint fixes the architecture, and the model settings that contradict it are refused (``model_setup``).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from .checkpoint import CHECKPOINTS, CheckpointError, load_checkpoint, resolve_checkpoint
from .config_errors import TrainConfigError

RUN_STAGES = ("evaluate", "generate", "classify")
RUN_SETTINGS = ("model", "objective", "data", "z_loss")
RUN_CONFIG = "config.yaml"
REGULARISATION_FIELDS = ("dropout", "dropout_rate")  # GPT, T5: training choices, not architecture


def absolute_path(path: str | None) -> str | None:
    """A local ``path`` made absolute (against the working folder); None, empty and URLs (``gs://``) as they are."""
    return os.path.abspath(path) if path and "://" not in path else path


def trained_run_folder(init_from: str) -> Path:
    """The run folder of ``init_from``: the folder itself, or the run of a ``<run>/checkpoints/step_*.pt`` file
    (the folder of any other checkpoint file). A missing checkpoint is a one-line :class:`CheckpointError`."""
    checkpoint = resolve_checkpoint(init_from)
    return checkpoint.parents[1] if checkpoint.parent.name == CHECKPOINTS else checkpoint.parent


def _given(overrides: Sequence[str]) -> set[str]:
    """The keys and groups that ``overrides`` set."""
    return {override.key_or_group for override in _parsed(overrides)}


def _parsed(overrides: Sequence[str]) -> list[Override]:
    """``overrides`` as Hydra parses them; none where they do not parse (composing them then says why)."""
    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:  # composing them says what is wrong
        return []


def run_section_keys(overrides: Sequence[str]) -> dict[str, tuple[str, Any]]:
    """The overrides of keys inside the run's sections (``data.test=FILE``) for a stage that uses a trained run,
    as ``{override: (key, value)}``: composed with the default groups they may name keys those lack (``data.test``
    is not a ``c4_tokens`` setting), so they are set on the run's sections instead (:func:`with_run_settings`).
    Empty for other stages, and for a section whose group the overrides choose (``data=ptb``)."""
    parsed = _parsed(overrides)
    settings = {override.key_or_group: override.value() for override in parsed}
    if settings.get("stage") not in RUN_STAGES or not settings.get("init_from"):
        return {}
    return {override.input_line: (override.key_or_group, override.value()) for override in parsed
            if not override.is_delete() and override.key_or_group.partition(".")[0] in RUN_SETTINGS
            and "." in override.key_or_group and override.key_or_group.partition(".")[0] not in settings}


def recorded_settings(folder: Path) -> dict[str, Any]:
    """The settings a run folder's ``config.yaml`` recorded when the run trained; empty where it has none; a
    :class:`TrainConfigError` when it is not a YAML mapping of settings (a tag that would build a Python object
    included: OmegaConf loads YAML safely)."""
    saved = folder / RUN_CONFIG
    if not saved.is_file():
        return {}
    try:
        settings = OmegaConf.to_container(OmegaConf.load(saved))
    except (yaml.YAMLError, UnicodeDecodeError, OmegaConfBaseException) as error:
        problem = " ".join(str(error).split())
        raise TrainConfigError(f"{saved} cannot be read as the run's settings ({problem[:200]}): restore it, or "
                               "give a new output_dir") from None
    if not isinstance(settings, dict):
        raise TrainConfigError(f"{saved} holds no settings (not a YAML mapping): restore it, or give a new output_dir")
    return settings


def trained_settings(init_from: str, folder: Path) -> dict[str, Any]:
    """The settings ``init_from``'s run trained with: its ``folder``'s ``config.yaml``, or for a checkpoint file
    with none beside it (copied out of its run) those the checkpoint records; empty where neither has them."""
    return recorded_settings(folder) or load_checkpoint(init_from).get("settings") or {}


def _with_saved(cfg: DictConfig, run: dict[str, Any], names: Sequence[str], given: set[str]) -> DictConfig:
    """``cfg`` with the sections ``names`` of a run's recorded settings where ``given`` sets none (keys it sets
    inside a section win)."""
    for name in names:
        if name in given or name not in run:
            continue
        value = OmegaConf.create({name: run[name]})
        for key in sorted(k for k in given if k.startswith(f"{name}.")):
            OmegaConf.update(value, key, OmegaConf.select(cfg, key), merge=False)
        cfg[name] = value[name]
    return cfg


def with_run_settings(cfg: DictConfig, overrides: Sequence[str],
                      held: dict[str, tuple[str, Any]] | None = None) -> DictConfig:
    """``cfg`` (composed from ``overrides`` but ``held``, :func:`run_section_keys`) with the trained run's settings
    where ``overrides`` set none, the ``held`` keys set on them, ``output_dir`` in the run folder and an evaluation of
    the whole split (``trainer.eval_batches=0``) unless they set them."""
    folder, given = trained_run_folder(cfg.init_from), _given(overrides)
    if "output_dir" not in given:
        cfg.output_dir = str(folder / cfg.stage)
    if cfg.stage == "evaluate" and "trainer.eval_batches" not in given:
        cfg.trainer.eval_batches = 0  # the whole split: train.yaml's and a preset's limit a training run's validation
    cfg = _with_saved(cfg, trained_settings(cfg.init_from, folder), RUN_SETTINGS, given)
    with open_dict(cfg):
        for key, value in (held or {}).values():
            OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def with_run_model(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """A stage that trains from ``init_from`` (fine-tuning, continued pre-training) a model of the run's family: the
    run's ``model`` section, as the checkpoint fixes the architecture, with the dropout the config sets (a preset's,
    such as A5 fine-tuning's 0.1) and the ``model.*`` keys that ``overrides`` set; the config's own when
    ``overrides`` choose a model preset (``model=...``), which the stage then holds to the checkpoint, or when an
    ``experiment=`` preset's model is of another family (AdaVAE around a GPT run; a mismatch the stage refuses).
    The run folder so records the model it trains, not train.yaml's default (a T5 for a GPT-1 fine-tune)."""
    given = _given(overrides)
    if "model" in given:
        return cfg
    try:
        folder = trained_run_folder(cfg.init_from)
    except CheckpointError:  # not a checkpoint of `train` (AdaVAE's Hugging Face GPT-2 folder): the stage reads it
        return cfg
    run = trained_settings(cfg.init_from, folder)
    same_family = (run.get("model") or {}).get("name") == cfg.model.get("name")
    if not same_family and "experiment" in given:  # a preset's model around the run's (AdaVAE around a GPT)
        return cfg
    dropout = {name: cfg.model[name] for name in REGULARISATION_FIELDS if same_family and
               cfg.model.get(name) is not None}
    cfg = _with_saved(cfg, run, ("model",), given)
    with open_dict(cfg.model):
        cfg.model.update(dropout)
    return cfg
