"""The stage table: which function runs ``train stage=<name>`` for a model family or data kind.

A row is ``(stage, route) -> "module:function"``: the route is the model family when the model has stages of its
own (``adavae``), else the ``data.kind``. For the stages that use a trained run (evaluate, generate, classify) both
are the run's (``config_runs``), so ``train stage=generate init_from=<run>`` finds the row of what the run trained
on. A combination the table does not list is refused with one line that names what it does run. Stage modules
never import each other; what they share lives in ``run``, ``model_setup`` and ``data_setup``.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

from ..config_errors import TrainConfigError
from ..config_groups import TrainConfig

STAGE_TABLE: dict[tuple[str, str], str] = {
    ("pretrain", "tokens"): "stages.pretrain:run_token_pretrain",
    ("pretrain", "sentences"): "stages.pretrain:run_sentence_pretrain",
    ("pretrain", "char_text"): "experiments.shakespeare.stages:run_char_pretrain",
    ("pretrain", "char_corruption"): "experiments.cs224n_a5.stages:run_a5_pretrain",
    ("finetune", "text_to_text"): "stages.finetune:run_finetune",
    ("finetune", "birth_places"): "experiments.cs224n_a5.stages:run_a5_finetune",
    ("finetune", "classification"): "experiments.gpt1.stages:run_classification",
    ("finetune", "gpt1_task"): "experiments.gpt1.stages:run_task_finetune",
    ("evaluate", "tokens"): "stages.evaluate:run_evaluate",
    ("evaluate", "birth_places"): "experiments.cs224n_a5.stages:run_a5_evaluate",
    ("generate", "tokens"): "stages.generate:run_generate",
    ("generate", "text_to_text"): "stages.generate:run_generate",
    ("generate", "char_text"): "stages.generate:run_generate",
    ("generate", "sentences"): "stages.generate:run_generate",
    ("generate", "char_corruption"): "stages.generate:run_generate",
    ("generate", "birth_places"): "stages.generate:run_generate",
    ("finetune", "adavae"): "experiments.adavae.stages:run_adavae_train",
    ("evaluate", "adavae"): "experiments.adavae.stages:run_adavae_evaluate",
    ("generate", "adavae"): "experiments.adavae.stages:run_adavae_generate",
    ("classify", "adavae"): "experiments.adavae.latent_classification:run_latent_classification",
}
MODEL_ROUTES = frozenset({"adavae"})  # model families whose stages do not depend on data.kind


def stage_route(cfg: TrainConfig) -> str:
    """The table's second key for this config: the model family when it has its own stages, else ``data.kind``."""
    return cfg.model.name if cfg.model.name in MODEL_ROUTES else cfg.data.kind


def stage_function(stage: str, route: str):
    """The function the table lists for ``(stage, route)``; a one-line error naming the valid choices otherwise."""
    target = STAGE_TABLE.get((stage, route))
    if target is None:
        stages = [s for s, r in STAGE_TABLE if r == route]
        routes = [r for s, r in STAGE_TABLE if s == stage]
        what = f"model={route}" if route in MODEL_ROUTES else f"data.kind={route}"
        runs = f"stage={'|'.join(stages)}" if stages else "no stage"
        raise TrainConfigError(f"stage={stage} does not run with {what} ({what} runs {runs}; stage={stage} runs "
                               f"with {', '.join(routes) or 'nothing'})")
    module, function = target.split(":")
    return getattr(import_module(f"{__package__.rsplit('.', 1)[0]}.{module}"), function)


def run_stage(cfg: TrainConfig) -> dict[str, Any]:
    """Run ``cfg.stage`` for this config's model family or data kind and return its summary."""
    return stage_function(cfg.stage, stage_route(cfg))(cfg)
