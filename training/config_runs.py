"""The settings of a trained run for the stages that use one (``evaluate``, ``generate``, ``classify``).

Such a stage scores or samples ``init_from``'s model on the data and objective it was trained with: ``model``,
``objective``, ``data`` and ``z_loss`` come from the run folder's ``config.yaml`` (written when it trained), and
what the command line sets wins: ``data=<option>`` replaces the whole section, ``objective.inputs_length=64``
that one key. A preset (``experiment=``) does not override them: it describes how a run trains. The stage
writes into ``<run folder>/<stage>`` unless the command line gives ``output_dir``.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from .checkpoint import resolve_checkpoint

RUN_STAGES = ("evaluate", "generate", "classify")
RUN_SETTINGS = ("model", "objective", "data", "z_loss")
RUN_CONFIG = "config.yaml"


def trained_run_folder(init_from: str) -> Path:
    """The run folder of ``init_from``: the folder itself, or the run of a ``<run>/checkpoints/step_*.pt`` file
    (the folder of any other checkpoint file). A missing checkpoint is a one-line :class:`CheckpointError`."""
    checkpoint = resolve_checkpoint(init_from)
    return checkpoint.parents[1] if checkpoint.parent.name == "checkpoints" else checkpoint.parent


def with_run_settings(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """``cfg`` (composed from ``overrides``) with the trained run's settings where ``overrides`` set none, and
    ``output_dir`` in the run folder unless they set it."""
    folder = trained_run_folder(cfg.init_from)
    given = {override.key_or_group for override in OverridesParser.create().parse_overrides(list(overrides))}
    if "output_dir" not in given:
        cfg.output_dir = str(folder / cfg.stage)
    saved = folder / RUN_CONFIG
    if not saved.is_file():
        return cfg
    run = OmegaConf.load(saved)
    for name in RUN_SETTINGS:
        if name in given or name not in run:
            continue
        value = run[name]
        for key in sorted(k for k in given if k.startswith(f"{name}.")):
            OmegaConf.update(value, key[len(name) + 1:], OmegaConf.select(cfg, key), merge=False)
        cfg[name] = value
    return cfg
