"""The stage table: which function runs ``train stage=<name>`` for a model family or data kind.

A row is ``(stage, route) -> "module:function"``: the route is the model family when the model has stages of its
own (``adavae``), else the ``data.kind``. For the stages that use a trained run (evaluate, generate, classify) both
are the run's (``config_runs``), so ``train stage=generate init_from=<run>`` finds the row of what the run trained
on. A combination the table does not list is refused with one line that names what it does run. Stage modules
never import each other; what they share lives in ``run``, ``model_setup`` and ``data_setup``.
"""
from __future__ import annotations

from dataclasses import asdict
from importlib import import_module
from typing import Any

from ..config import load_config
from ..config_errors import TrainConfigError
from ..config_groups import TrainConfig
from ..config_runs import RUN_STAGES

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
DECODING = ("generate.max_tokens", "generate.greedy", "generate.temperature", "generate.top_k")
# The settings of the stage-specific sections (`SECTIONS`) that each function reads (``section.*``: all of them): any
# other of them set away from its default would do nothing, and is refused rather than recorded as if it were used.
SECTION_SETTINGS: dict[str, tuple[str, ...]] = {
    "stages.finetune:run_finetune": ("finetune.adapter_dim", "finetune.unfreeze_every"),
    "experiments.adavae.stages:run_adavae_evaluate": ("evaluate.iw_samples", "evaluate.iw_chunk"),
    "stages.generate:run_generate": ("generate.prompts", "generate.prompts_file", "generate.num_samples",
                                     *DECODING),
    "experiments.adavae.stages:run_adavae_generate": ("generate.sentences", "generate.interpolation_steps",
                                                      "generate.analogy_degree", "generate.prior_samples",
                                                      *DECODING),
    "experiments.adavae.latent_classification:run_latent_classification": ("classify.*",),
}
SECTIONS = ("finetune", "evaluate", "generate", "classify")
EVAL_BATCHES_READER = "stages.evaluate:run_evaluate"  # the evaluation that trainer.eval_batches limits
# The training stages that read the `objective:` section (a text-to-text fine-tune for data.unsupervised_tokens only)
OBJECTIVE_READERS = {"stages.pretrain:run_token_pretrain": "stage=pretrain with data.kind=tokens",
                     "stages.finetune:run_finetune": "stage=finetune with data.kind=text_to_text and "
                                                     "data.unsupervised_tokens",
                     "experiments.adavae.stages:run_adavae_train": "stage=finetune with model=adavae"}
CAUSAL_LM_ROUTES = frozenset({"char_text", "sentences"})  # GPT language models of their own data: objective=lm


def stage_route(cfg: TrainConfig) -> str:
    """The table's second key for this config: the model family when it has its own stages, else ``data.kind``."""
    return cfg.model.name if cfg.model.name in MODEL_ROUTES else cfg.data.kind


def stage_function(stage: str, route: str):
    """The function the table lists for ``(stage, route)``; a one-line error naming the valid choices otherwise."""
    target = STAGE_TABLE.get((stage, route))
    if target is None:
        stages = [s for s, r in STAGE_TABLE if r == route]
        routes = [r for s, r in STAGE_TABLE if s == stage]
        what = _route_name(route)
        runs = f"stage={'|'.join(stages)}" if stages else "no stage"
        raise TrainConfigError(f"stage={stage} does not run with {what} ({what} runs {runs}; stage={stage} runs "
                               f"with {', '.join(routes) or 'nothing'})")
    module, function = target.split(":")
    return getattr(import_module(f"{__package__.rsplit('.', 1)[0]}.{module}"), function)


def run_stage(cfg: TrainConfig) -> dict[str, Any]:
    """Run ``cfg.stage`` for this config's model family or data kind and return its summary."""
    function = stage_function(cfg.stage, stage_route(cfg))
    bundled = load_config([])  # train.yaml's values, which both checks compare against: composed once
    check_section_settings(cfg, bundled)
    check_objective_read(cfg, bundled)
    check_z_loss_read(cfg)
    check_eval_batches_read(cfg)
    return function(cfg)


def check_section_settings(cfg: TrainConfig, bundled: TrainConfig) -> None:
    """A one-line error for a setting of `SECTIONS` changed from train.yaml's value (``bundled``: no preset sets
    these sections) that this stage does not read (``finetune.adapter_dim`` of a GPT fine-tune), naming the stages
    that do."""
    route = stage_route(cfg)
    reads = SECTION_SETTINGS.get(STAGE_TABLE[cfg.stage, route], ())
    for section in SECTIONS:
        values, defaults = asdict(getattr(cfg, section)), asdict(getattr(bundled, section))
        for name, value in values.items():
            key = f"{section}.{name}"
            if _reads(reads, key) or value == defaults[name]:
                continue
            raise TrainConfigError(f"{key}={value!r} does nothing for stage={cfg.stage} with {_route_name(route)}; "
                                   f"it is read by {_readers(key)}: remove it")


def check_objective_read(cfg: TrainConfig, bundled: TrainConfig) -> None:
    """A one-line error for an objective other than train.yaml's (``bundled``) on a training stage that trains
    without one (``objective=prefix_lm`` for a character GPT): it did nothing, and the run's ``config.yaml`` recorded
    it as used. The stages that use a trained run take its objective."""
    if cfg.stage in RUN_STAGES or reads_objective(cfg):
        return
    target = STAGE_TABLE[cfg.stage, stage_route(cfg)]
    values, unset = asdict(cfg.objective), asdict(bundled.objective)
    if values["name"] == "lm" and stage_route(cfg) in CAUSAL_LM_ROUTES:  # what they train, so it may be said
        unset = asdict(load_config(["objective=lm"]).objective)
    changed = [name for name in values if values[name] != unset.get(name)]
    if not changed:
        return
    setting = f"objective={cfg.objective.name}" if "name" in changed else f"objective.{changed[0]}=" \
        f"{values[changed[0]]!r}"
    without = " without data.unsupervised_tokens" if target == "stages.finetune:run_finetune" else ""
    raise TrainConfigError(f"{setting} does nothing for stage={cfg.stage} with {_route_name(stage_route(cfg))}"
                           f"{without}; the objective is read by {'; '.join(OBJECTIVE_READERS.values())}: remove it")


def reads_objective(cfg: TrainConfig) -> bool:
    """Whether this training stage reads the ``objective:`` section (`OBJECTIVE_READERS`)."""
    target = STAGE_TABLE.get((cfg.stage, stage_route(cfg)))
    return target in OBJECTIVE_READERS and (target != "stages.finetune:run_finetune" or cfg.data.unsupervised_tokens)


def unread_settings(cfg: TrainConfig) -> tuple[str, ...]:
    """The settings this training stage does not read (prefixes): a resume does not compare them, so a run recorded
    with an objective or ``z_loss`` it ignored (before they were refused) resumes with or without them."""
    return (*(("objective.",) if not reads_objective(cfg) else ()), *(("z_loss",) if cfg.model.name != "t5" else ()))


def check_z_loss_read(cfg: TrainConfig) -> None:
    """A one-line error for ``z_loss`` on a training stage of another model than T5, whose loss alone adds it."""
    if cfg.z_loss and cfg.stage not in RUN_STAGES and cfg.model.name != "t5":
        raise TrainConfigError(f"z_loss={cfg.z_loss} does nothing for model.name={cfg.model.name}; it is T5's "
                               "auxiliary loss (model=t5_*): remove it")


def check_eval_batches_read(cfg: TrainConfig) -> None:
    """A one-line error for ``trainer.eval_batches`` on an evaluation that scores all of its data (AdaVAE's test
    sentences, A5's questions); with ``init_from`` it is 0 (all) unless the command line sets it (``config_runs``)."""
    if not (cfg.stage == "evaluate" and cfg.init_from and cfg.trainer.eval_batches):
        return
    route = stage_route(cfg)
    if STAGE_TABLE[cfg.stage, route] != EVAL_BATCHES_READER:
        raise TrainConfigError(f"trainer.eval_batches={cfg.trainer.eval_batches} does nothing for stage=evaluate with "
                               f"{_route_name(route)}, which scores all of its data; it limits stage=evaluate with "
                               "data.kind=tokens: remove it")


def _reads(reads: tuple[str, ...], key: str) -> bool:
    return key in reads or f"{key.partition('.')[0]}.*" in reads


def _route_name(route: str) -> str:
    return f"model={route}" if route in MODEL_ROUTES else f"data.kind={route}"


def _readers(key: str) -> str:
    """The stages (with their data kinds or models) that read setting ``key``, as one phrase."""
    routes: dict[str, list[str]] = {}
    for (stage, route), target in STAGE_TABLE.items():
        if _reads(SECTION_SETTINGS.get(target, ()), key):
            routes.setdefault(stage, []).append(route)
    phrases = []
    for stage, names in routes.items():
        kinds = [name for name in names if name not in MODEL_ROUTES]
        models = [name for name in names if name in MODEL_ROUTES]
        wheres = ([f"data.kind={'|'.join(kinds)}"] if kinds else []) + ([f"model={'|'.join(models)}"] if models else [])
        phrases.append(f"stage={stage} with {' or '.join(wheres)}")
    return "; ".join(phrases)
