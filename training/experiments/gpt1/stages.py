"""GPT-1 discriminative fine-tuning (section 3.3) of a GPT, with the auxiliary LM loss (``data.lm_weight``, GPT-1's
lambda = 0.5; 0 turns it off):

- ``train stage=finetune data=yelp_sentiment``: sentence classification; ``data.train_per_label`` sentences per
  label from the Yelp dev split, validated on a fixed ``data.eval_per_label`` per label from the test split;
- ``train stage=finetune data=gpt1_entailment|gpt1_similarity|gpt1_multiple_choice|gpt1_classification``: the task
  files ``data.train`` and ``data.validation`` (``task_files.py``).

The pre-trained GPT (``init_from``; a fresh one from ``model:`` otherwise, the "no pre-training" baseline) gets the
start/delimiter/extract embeddings appended to its vocabulary and a linear classifier on the extract token's final
state (summed over a similarity pair's two orders; one score per answer for multiple choice). Validation is scored
for loss and accuracy.
"""
from __future__ import annotations

import logging
from typing import Any

import torch
from ...checkpoint import load_checkpoint
from ...config_errors import TrainConfigError
from ...config_groups import TrainConfig, model_settings
from ...data.kept_vocabulary import sha256_run_files
from ...data.row_batches import RowSet, content_fingerprint
from ...models import build_model
from ...models.gpt import GPT
from ...stages.data_setup import load_vocabulary
from ...stages.model_setup import check_model_settings, finetuning_state, model_from_checkpoint
from ...stages.run import fit_summary, keep_run_files, row_set_trainer, start_run
from .classification_loss import ClassificationLoss
from .classifier import GPTClassifier
from .input_transforms import FinetuneDataError, SpecialTokens
from .task_files import TaskExample, class_count, missing_classes, read_task_file, task_rows
from .yelp import balanced_sample, read_yelp

log = logging.getLogger(__name__)


def classifier_model(cfg: TrainConfig, vocab_size: int, num_classes: int,
                     reduce: str = "sum") -> tuple[GPTClassifier, dict[str, Any]]:
    """``init_from``'s GPT (or a fresh one) with ``vocab_size`` ids and a classifier head, whatever they draw drawn
    from ``seed`` (the new embedding rows, the head); and its spec."""
    if cfg.model.name != "gpt":
        source = f" (init_from={cfg.init_from} is a {_family(cfg.init_from)} run)" if cfg.init_from else ""
        raise TrainConfigError(f"data.kind={cfg.data.kind} fine-tunes a GPT, not the {cfg.model.name} model the "
                               f"config names{source}: choose a GPT model preset (model=gpt_*) or a GPT run")
    dropout = cfg.data.classifier_dropout
    torch.manual_seed(cfg.seed)
    if cfg.init_from:
        state = finetuning_state(load_checkpoint(cfg.init_from), cfg)
        check_model_settings(cfg, state["model_spec"])
        backbone_spec = dict(state["model_spec"])
        family = backbone_spec.pop("name")
        if family != "gpt":
            raise TrainConfigError(f"init_from={cfg.init_from} holds a {family} model, not a GPT language model: "
                                   "fine-tune from a GPT pre-training run (stage=pretrain with a model=gpt_* preset)")
        backbone = model_from_checkpoint(state)
        if not isinstance(backbone, GPT) or backbone.config.vocab_size > vocab_size:
            raise TrainConfigError(f"{cfg.init_from} has {backbone_spec['vocab_size']} ids, more than data.vocab's "
                                   f"{vocab_size - 3} + 3 special tokens: fine-tune with the pre-training vocabulary")
        model = GPTClassifier(backbone.resized(vocab_size), num_classes, reduce, dropout=dropout)
    else:
        log.warning("no init_from: fine-tuning a randomly initialised GPT (the no-pre-training baseline)")
        backbone_spec = {k: v for k, v in model_settings(cfg.model).items() if k != "name"}
        model = build_model("gpt_classifier", vocab_size, num_classes=num_classes, reduce=reduce,
                            classifier_dropout=dropout, **backbone_spec)
    spec = {**backbone_spec, "name": "gpt_classifier", "vocab_size": vocab_size, "num_classes": num_classes,
            "reduce": reduce, "classifier_dropout": dropout}
    return model, spec


def _family(init_from: str) -> str:
    return load_checkpoint(init_from)["model_spec"].get("name", "unknown")


def run_classification(cfg: TrainConfig) -> dict[str, Any]:
    """``data=yelp_sentiment``: balanced samples of the Yelp dev (training) and test (validation) splits."""
    data = cfg.data
    try:
        train = balanced_sample(read_yelp(data.folder, "dev"), data.train_per_label, cfg.seed)
        evaluation = balanced_sample(read_yelp(data.folder, "test"), data.eval_per_label, cfg.seed)
    except FinetuneDataError as error:
        raise TrainConfigError(f"data.folder={data.folder}: {error}") from None
    return _finetune(cfg, "classification", _sentences(train), _sentences(evaluation), num_classes=2)


def _sentences(sentences: list[tuple[str, int]]) -> list[TaskExample]:
    return [TaskExample((text,), label) for text, label in sentences]


def run_task_finetune(cfg: TrainConfig) -> dict[str, Any]:
    """``data.kind=gpt1_task``: ``data.task`` examples from ``data.train`` and (when set) ``data.validation``."""
    data = cfg.data
    if not data.train:
        raise TrainConfigError(f"data.train is not set: pass data.train=<file> ({data.task} examples, .tsv or .jsonl)")
    splits = {}
    for key in ("train", "validation"):
        path = getattr(data, key)
        try:
            splits[key] = read_task_file(path, data.task, data.labels, data.columns) if path else None
        except FinetuneDataError as error:
            raise TrainConfigError(f"data.{key}: {error}") from None
    train, validation = splits["train"], splits["validation"]
    num_classes = class_count(data.task, train + (validation or []), data.labels)
    missing = missing_classes(data.task, train, num_classes)
    if missing:
        present = ",".join(map(str, sorted({example.label for example in train})))
        log.warning("data.train has no example of class %s of 0..%d: integer labels are class indices from 0 (for "
                    "other values, list them in order in data.labels, e.g. data.labels=[%s])",
                    ", ".join(map(str, missing)), num_classes - 1, present)
    return _finetune(cfg, data.task, train, validation, num_classes)


def _finetune(cfg: TrainConfig, task: str, train: list[TaskExample], validation: list[TaskExample] | None,
              num_classes: int) -> dict[str, Any]:
    """Fine-tune a GPT classifier on ``task`` examples (validating on ``validation`` when given)."""
    data = cfg.data
    vocab = load_vocabulary(data.vocab, cfg.init_from)
    special = SpecialTokens.after(vocab.vocab_size)
    try:
        rows = [task_rows(task, examples, vocab, special, data.max_length) if examples is not None else None
                for examples in (train, validation)]
    except FinetuneDataError as error:
        raise TrainConfigError(f"data.max_length={data.max_length}: {error}") from None
    for split, split_rows in zip(("training", "validation"), rows):
        if split_rows is not None and split_rows.truncated:
            log.warning("%d of %d %s examples had a text cut to fit data.max_length=%d", split_rows.truncated,
                        len(split_rows), split, data.max_length)
    ctx = start_run(cfg)
    keep_run_files(ctx, sha256_run_files(vocab.model_sha256))
    model, spec = classifier_model(cfg, special.size, num_classes, "choices" if task == "multiple_choice" else "sum")
    if data.max_length > model.backbone.max_length:
        raise TrainConfigError(f"data.max_length={data.max_length} exceeds the model's {model.backbone.max_length} "
                               "positions: lower data.max_length or raise model.block_size")
    key = _fingerprint(task, train, data.max_length, special.size)
    train_set, eval_set = (RowSet(r, len(r), key + suffix) if r is not None else None
                           for r, suffix in zip(rows, ("", "-eval")))
    trainer = row_set_trainer(cfg, ctx, train_set, eval_set, ClassificationLoss(lm_weight=data.lm_weight), model, spec)
    return fit_summary(ctx, trainer)


def _fingerprint(task: str, train: list[TaskExample], max_length: int, vocab_size: int) -> str:
    """The training rows' fingerprint; sentence classification keeps the form runs were resumed with before the
    other tasks existed (the ``(text, label)`` pairs)."""
    if task == "classification":
        return content_fingerprint(repr([(e.texts[0], e.label) for e in train]), max_length=max_length,
                                   vocab_size=vocab_size)
    return content_fingerprint(repr(train), task=task, max_length=max_length, vocab_size=vocab_size)

