"""CS224N A5: ``stage=pretrain`` on span-corrupted wiki documents (``data=cs224n_a5_wiki``); birth-place QA
(``data=cs224n_a5_birth_places``) with ``stage=finetune`` and ``stage=evaluate``.

Finetune trains a GPT (from ``init_from``, or from scratch for the handout's "no pretraining" run) on
``question⁇place⁇`` rows; both stages then answer every question of ``data.evaluate`` by greedy decoding
(``data.max_new_chars`` characters after ``question⁇``, the prediction is the text up to the next ⁇), write the
predictions one per line to ``data.predictions`` and report exact-match accuracy when the file has gold places.
The vocabulary is always the pretraining corpus's (``data.corpus``), as in the starter.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch
from ...batch_losses import DecoderLoss
from ...checkpoint import CHECKPOINTS, CheckpointError, load_checkpoint
from ...config_errors import TrainConfigError
from ...config_groups import TrainConfig
from ...config_runs import RUN_CONFIG, trained_run_folder
from ...data.char_vocabulary import VOCABULARY_FILE, CharVocabError, CharVocabulary, kept_char_vocabulary
from ...data.row_batches import RowSet, content_fingerprint
from ...distributed import gather_in_item_order, rank_share
from ...metrics_log import CSV_NAME, JSONL_NAME
from ...models.gpt import GPT
from ...stages.data_setup import TrainingData
from ...stages.model_setup import check_model_settings, init_state, model_from_checkpoint, model_from_config
from ...stages.run import (
    RUN_FILES,
    RunContext,
    check_run_files,
    fit_summary,
    keep_run_files,
    pretrain_on_rows,
    row_set_trainer,
    start_run,
)
from ...trainer import autocast
from .birth_places import (
    BirthPlaceRows,
    BirthPlacesError,
    prediction_from_completion,
    prompt_ids,
    read_birth_places,
    score_places,
    write_predictions,
)
from .char_corruption import CharCorruptionError, CharCorruptionRows, load_char_corpus

log = logging.getLogger(__name__)


def corpus_vocabulary(cfg: TrainConfig) -> CharVocabulary:
    try:
        return load_char_corpus(cfg.data.corpus)[1]
    except (CharCorruptionError, CharVocabError) as error:
        raise TrainConfigError(f"data.corpus: {error}") from None


def _read_pairs(path: str, key: str) -> list[tuple[str, str | None]]:
    try:
        return read_birth_places(path)
    except BirthPlacesError as error:
        raise TrainConfigError(f"data.{key}: {error}") from None


def char_corruption_corpus(cfg: TrainConfig) -> TrainingData:
    data = cfg.data
    block_size = data.block_size
    try:
        documents, vocab = load_char_corpus(data.corpus)
        rows = CharCorruptionRows(documents, vocab, block_size, seed=cfg.seed)
    except (CharCorruptionError, CharVocabError) as error:
        raise TrainConfigError(f"data.corpus: {error}") from None
    key = content_fingerprint("\n".join(documents), block_size=block_size, seed=cfg.seed, kind="char_corruption")
    return TrainingData(RowSet(rows, len(rows), key), None, vocab.vocab_size, run_files=_run_files(vocab),
                        pack_length=data.pack_length if data.pack else None)


def _run_files(vocab: CharVocabulary) -> dict[str, str]:
    """What the run folder keeps: the characters its ids mean, which a run continuing from it must share."""
    return {VOCABULARY_FILE: vocab.to_json()}


def run_a5_pretrain(cfg: TrainConfig) -> dict[str, Any]:
    """Pre-train on span-corrupted wiki documents (``data=cs224n_a5_wiki``)."""
    return pretrain_on_rows(cfg, char_corruption_corpus(cfg))


def run_a5_finetune(cfg: TrainConfig) -> dict[str, Any]:
    data = cfg.data
    vocab = corpus_vocabulary(cfg)
    if cfg.init_from:
        check_run_files(cfg.init_from, _run_files(vocab))
    pairs = _read_pairs(data.train, "train")
    try:
        rows = BirthPlaceRows(tuple(pairs), vocab, data.block_size)
    except (BirthPlacesError, CharVocabError) as error:
        raise TrainConfigError(f"{data.train}: {error}") from None
    questions = _questions(cfg)
    remedy = (f"give a run pre-trained on the characters of data.corpus={data.corpus} "
              "(experiment=cs224n_a5_pretrain), or set data.corpus to its corpus")
    pretrained = init_state(cfg, vocab.vocab_size, remedy) if cfg.init_from else None
    ctx = start_run(cfg)  # after the checks: a refused run leaves no run folder; the model is built once seeded
    keep_run_files(ctx, _run_files(vocab))
    if pretrained is not None:
        model, spec = model_from_checkpoint(pretrained), pretrained["model_spec"]
    else:
        log.info("no init_from: fine-tuning a randomly initialised model (the handout's no-pretraining run)")
        model, spec = model_from_config(cfg, vocab.vocab_size)
    key = content_fingerprint(repr(pairs), block_size=data.block_size, kind="birth_places")
    trainer = row_set_trainer(cfg, ctx, RowSet(rows, len(rows), key), None, DecoderLoss(), model, spec,
                              pack_length=data.pack_length if data.pack else None)
    summary = fit_summary(ctx, trainer)
    summary["evaluation"] = answer_questions(cfg, ctx, model, vocab, questions)
    return summary


def run_a5_evaluate(cfg: TrainConfig) -> dict[str, Any]:
    if not cfg.init_from:
        raise CheckpointError("stage=evaluate needs init_from=<checkpoint file or run folder>")
    state = load_checkpoint(cfg.init_from)
    check_model_settings(cfg, state["model_spec"])
    vocab, questions = _run_characters(cfg), _questions(cfg)
    ctx = start_run(cfg)
    keep_run_files(ctx, _run_files(vocab))
    model = model_from_checkpoint(state).to(ctx.device)
    return {"run_dir": str(ctx.run_dir), "checkpoint_step": int(state["step"]),
            "evaluation": answer_questions(cfg, ctx, model, vocab, questions)}


def _run_characters(cfg: TrainConfig) -> CharVocabulary:
    """The characters ``init_from``'s ids mean: those its run folder keeps (checked against ``data.corpus`` where
    that file is still there), else (a run trained before folders kept them) those of ``data.corpus``."""
    try:
        kept = kept_char_vocabulary(trained_run_folder(cfg.init_from))
    except CharVocabError as error:
        raise TrainConfigError(str(error)) from None
    if kept is None:
        return corpus_vocabulary(cfg)
    if Path(cfg.data.corpus).is_file():
        check_run_files(cfg.init_from, _run_files(corpus_vocabulary(cfg)))
    return kept


def _questions(cfg: TrainConfig) -> list[tuple[str, str | None]] | None:
    """The questions (and gold places) of ``data.evaluate``, read (and where the answers go checked) before
    training; None when it is not set."""
    if not cfg.data.evaluate:
        return None
    questions = _read_pairs(cfg.data.evaluate, "evaluate")
    _check_predictions_file(cfg)
    return questions


def _check_predictions_file(cfg: TrainConfig) -> None:
    """A one-line error when ``data.predictions`` names a folder, a file this stage reads or a file of a run's
    record (its ``config.yaml``, metrics, run files, checkpoints): the answers would replace it. An earlier
    predictions file is replaced, as the handout's script does."""
    data = cfg.data
    target = Path(data.predictions) if data.predictions else None
    if target is None or not target.exists():
        return
    if target.is_dir():
        raise TrainConfigError(f"data.predictions={target} is a folder: give the file to write the answers to")
    for setting in ("evaluate", "train", "corpus"):
        read = getattr(data, setting)
        if read and Path(read).exists() and target.samefile(read):
            raise TrainConfigError(f"data.predictions={target} is the file data.{setting} reads, which the answers "
                                   "would replace: give another file")
    if target.name in (RUN_CONFIG, JSONL_NAME, CSV_NAME, *RUN_FILES) or target.parent.name == CHECKPOINTS:
        raise TrainConfigError(f"data.predictions={target} is a file a training run keeps, which the answers would "
                               "replace: give another file (the default is <output_dir>/predictions.txt)")


@torch.no_grad()
def answer_questions(cfg: TrainConfig, ctx: RunContext, model: torch.nn.Module, vocab: CharVocabulary,
                     pairs: list[tuple[str, str | None]] | None) -> dict[str, Any]:
    """Greedy answers to the questions of ``data.evaluate`` (``pairs``; this rank's share, gathered), written to
    ``data.predictions``; accuracy when the file has gold places."""
    data = cfg.data
    if pairs is None:
        return {}
    if not isinstance(model, GPT):
        raise TrainConfigError("birth-place evaluation needs a GPT model")
    mine = rank_share(len(pairs), ctx.env)
    model.eval()
    started, answers = time.perf_counter(), []
    batch = ctx.settings.micro_batch_size
    for first in range(0, len(mine), batch):
        prompts = [torch.from_numpy(prompt_ids(pairs[i][0], vocab)) for i in mine[first:first + batch]]
        with autocast(ctx.device, ctx.settings.precision):
            completions = model.generate(prompts, data.max_new_chars)
        answers += [prediction_from_completion(vocab.decode(ids.cpu().numpy())) for ids in completions]
    predictions = [answer.replace("\n", " ") for answer in gather_in_item_order(mine, answers, ctx.env)]
    total, correct = score_places([place for _, place in pairs], predictions)
    output = Path(data.predictions or ctx.run_dir / "predictions.txt")
    if ctx.env.is_main:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_predictions(output, predictions)
        message = (f"Correct: {correct} out of {total}: {100 * correct / total:.1f}%" if total
                   else "No gold birth places provided")
        log.info("%s (%s); predictions in %s", message, data.evaluate, output)
    result: dict[str, Any] = {"file": data.evaluate, "predictions": str(output), "questions": len(pairs),
                              "seconds": round(time.perf_counter() - started, 3)}
    if total:
        result.update(correct=correct, total=total, accuracy=correct / total)
    return result
