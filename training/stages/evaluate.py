"""``train stage=evaluate init_from=<checkpoint or run folder>``: validation metrics of a trained model.

Scores the split ``data.validation_split`` of the run's token shards with the run's objective (``config_runs``: what
the command line sets wins; the same seed gives the same masks, so numbers are comparable across checkpoints), all of
it unless the command line sets ``trainer.eval_batches`` (micro-batches per rank), and writes them under the split's
name to ``<output_dir>/metrics.jsonl``, by default ``<run>/evaluate/metrics.jsonl``. Token shards made again in the
run's folder since it trained are refused (the run's checkpoints record which it trained on).
"""
from __future__ import annotations

from typing import Any

from c4prep.manifest import read_manifest

from ..checkpoint import CheckpointError, load_checkpoint
from ..config_errors import TrainConfigError
from ..config_groups import TrainConfig
from ..config_runs import absolute_path, recorded_settings, trained_run_folder
from ..data.row_batches import row_set_eval_batches
from ..data.token_index import TokenDataError
from ..metrics_log import MetricsLogger
from ..trainer import evaluate_model
from .data_setup import check_run_vocabulary, pretrain_data, trained_on_shards
from .model_setup import check_model_settings, check_rows_fit, model_from_checkpoint
from .run import check_run_folder, start_run


def run_evaluate(cfg: TrainConfig) -> dict[str, Any]:
    if not cfg.init_from:
        raise CheckpointError("stage=evaluate needs init_from=<checkpoint file or run folder>")
    check_run_folder(cfg.output_dir, cfg.stage)  # what start_run checks first, before the run's data is checked
    state = load_checkpoint(cfg.init_from)
    check_model_settings(cfg, state["model_spec"])
    data = pretrain_data(cfg.data, cfg.objective, cfg.seed, state["model_spec"].get("name") == "gpt", cfg.z_loss)
    check_run_vocabulary(cfg.init_from, data.model_sha256, f"data.tokens={cfg.data.tokens}")
    _check_trained_shards(cfg, state, data.tokens_fingerprint)
    if state["model_spec"].get("vocab_size") != data.vocab_size:
        raise TrainConfigError(f"init_from={cfg.init_from} has {state['model_spec'].get('vocab_size')} ids but "
                               f"{cfg.data.tokens} was encoded with {data.vocab_size}: evaluate on token shards "
                               "encoded with the checkpoint's vocabulary")
    model = model_from_checkpoint(state)
    check_rows_fit(model, data.row_builder)
    if data.validation is None:
        raise TokenDataError(_no_split_message(cfg.data.tokens, cfg.data.validation_split))
    ctx = start_run(cfg)  # checked first: a refused evaluate leaves the record of the last one (config.yaml) as it was
    model = model.to(ctx.device)
    batches = row_set_eval_batches(data.validation, ctx.env.rank, ctx.env.world_size, ctx.settings.micro_batch_size)
    metrics = evaluate_model(model, data.batch_loss, batches, ctx.env, ctx.device, ctx.settings.precision,
                             ctx.settings.eval_batches)
    split = cfg.data.validation_split
    with MetricsLogger(ctx.run_dir, enabled=ctx.env.is_main, tensorboard=False) as logger:
        logger.log(int(state["step"]), split, metrics or {})
    return {"run_dir": str(ctx.run_dir), "checkpoint_step": int(state["step"]), "split": split, "validation": metrics}


def _no_split_message(tokens: str, split: str | None) -> str:
    splits = read_manifest(tokens).splits
    held = ", ".join(name for name, info in splits.items() if info.num_rows) or "none"
    if split is None:
        return f"data.validation_split=null leaves nothing to evaluate: set it to a split of {tokens} ({held})"
    what = "has no documents" if split in splits else "does not exist"
    return (f"split {split!r} of {tokens} {what} to evaluate: set data.validation_split to a split with documents "
            f"({held})")


def _check_trained_shards(cfg: TrainConfig, state: dict[str, Any], fingerprint: str | None) -> None:
    """A one-line error when ``data.tokens`` is the folder ``init_from`` trained on but holds other token shards
    now (tokenized again since): its split would be scored as the run's. Other folders are scored as asked."""
    if trained_on_shards(state, fingerprint):
        return
    recorded = (recorded_settings(trained_run_folder(cfg.init_from)).get("data") or {}).get("tokens")
    if absolute_path(recorded) != absolute_path(cfg.data.tokens):
        return
    raise TrainConfigError(f"data.tokens={cfg.data.tokens} holds other token shards than init_from={cfg.init_from} "
                           "was trained on (made again since): its split is not the run's; to score the model on "
                           "them, copy them to another folder and give data.tokens=<that folder>")
