"""Stages run by ``train stage=<name>``."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from ..config import TrainConfigError


def run_stage(cfg: DictConfig) -> dict[str, Any]:
    """Run ``cfg.stage`` and return its summary."""
    runner: Callable[[DictConfig], dict[str, Any]]
    kind = cfg.data.get("kind")
    if cfg.model.get("name") == "adavae":
        from . import adavae, latent_classification
        runners = {"finetune": adavae.run_adavae_train, "evaluate": adavae.run_adavae_evaluate,
                   "generate": adavae.run_adavae_generate, "classify": latent_classification.run_latent_classification}
        if cfg.stage not in runners:
            raise TrainConfigError(f"model=adavae runs stage={'|'.join(runners)}, not {cfg.stage!r}")
        return runners[cfg.stage](cfg)
    if cfg.stage == "pretrain":
        from .pretrain import run_pretrain as runner
    elif cfg.stage == "finetune" and kind == "birth_places":
        from .cs224n_a5 import run_a5_finetune as runner
    elif cfg.stage == "finetune" and kind == "classification":
        from .classify import run_classification as runner
    elif cfg.stage == "finetune":
        from .finetune import run_finetune as runner
    elif kind == "birth_places":
        from .cs224n_a5 import run_a5_evaluate as runner
    else:
        from .evaluate import run_evaluate as runner
    return runner(cfg)
