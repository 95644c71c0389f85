"""``train stage=finetune data=yelp_sentiment``: GPT-1 discriminative fine-tuning (section 3.3) of a GPT on sentence
classification, with the auxiliary LM loss (``data.lm_weight``, GPT-1's lambda = 0.5; 0 turns it off).

The pre-trained GPT (``init_from``; a fresh one from ``model:`` otherwise, the "no pre-training" baseline) gets the
start/delimiter/extract embeddings appended to its vocabulary and a linear classifier on the extract token's final
state. Training examples are ``data.train_per_label`` sentences per label from the Yelp dev split; validation is a
fixed ``data.eval_per_label`` per label from the test split, scored for loss and accuracy.
"""
from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig

from ...checkpoint import load_checkpoint
from ...config import TrainConfigError, section
from ...data.row_batches import RowSet, content_fingerprint
from ...models import build_model
from ...models.gpt import GPT
from ...stages.data_setup import load_vocabulary
from ...stages.model_setup import finetuning_state, model_from_checkpoint
from ...stages.run import fit_summary, row_set_trainer, start_run
from ...batch_losses import ClassificationLoss
from .classifier import GPTClassifier
from .input_transforms import FinetuneDataError, FinetuneExample, FinetuneRows, SpecialTokens, classification_sequences
from .yelp import balanced_sample, read_yelp

log = logging.getLogger(__name__)


def _examples(sentences: list[tuple[str, int]], vocab, special: SpecialTokens,
              max_length: int) -> tuple[FinetuneExample, ...]:
    return tuple(FinetuneExample(tuple(classification_sequences(vocab.encode(text), special, max_length)), label)
                 for text, label in sentences)


def classifier_model(cfg: DictConfig, vocab_size: int, num_classes: int) -> tuple[GPTClassifier, dict[str, Any]]:
    """``init_from``'s GPT (or a fresh one) with ``vocab_size`` ids and a classifier head; and its spec."""
    dropout = float(section(cfg, "data").get("classifier_dropout", 0.1))
    if cfg.init_from:
        state = finetuning_state(load_checkpoint(cfg.init_from), cfg)
        backbone_spec = dict(state["model_spec"])
        if backbone_spec.pop("name") != "gpt":
            raise TrainConfigError(f"{cfg.init_from} is not a GPT checkpoint")
        backbone = model_from_checkpoint(state)
        if not isinstance(backbone, GPT) or backbone.config.vocab_size > vocab_size:
            raise TrainConfigError(f"{cfg.init_from} has {backbone_spec['vocab_size']} ids, more than data.vocab's "
                                   f"{vocab_size - 3} + 3 special tokens: fine-tune with the pre-training vocabulary")
        model = GPTClassifier(backbone.resized(vocab_size), num_classes, dropout=dropout)
    else:
        log.warning("no init_from: fine-tuning a randomly initialised GPT (the no-pre-training baseline)")
        backbone_spec = {k: v for k, v in section(cfg, "model").items() if k != "name"}
        model = build_model("gpt_classifier", vocab_size, num_classes=num_classes, classifier_dropout=dropout,
                            **backbone_spec)
    spec = {**backbone_spec, "name": "gpt_classifier", "vocab_size": vocab_size, "num_classes": num_classes,
            "classifier_dropout": dropout}
    return model, spec


def run_classification(cfg: DictConfig) -> dict[str, Any]:
    data = section(cfg, "data")
    ctx = start_run(cfg)
    vocab = load_vocabulary(data["vocab"])
    special = SpecialTokens.after(vocab.vocab_size)
    max_length, seed = int(data["max_length"]), int(cfg.seed)
    try:
        train = balanced_sample(read_yelp(data["folder"], "dev"), int(data["train_per_label"]), seed)
        evaluation = balanced_sample(read_yelp(data["folder"], "test"), int(data["eval_per_label"]), seed)
        train_rows = FinetuneRows(_examples(train, vocab, special, max_length), max_length, vocab.pad_id)
        eval_rows = FinetuneRows(_examples(evaluation, vocab, special, max_length), max_length, vocab.pad_id)
    except FinetuneDataError as error:
        raise TrainConfigError(f"data.folder={data['folder']}: {error}") from None
    model, spec = classifier_model(cfg, special.size, num_classes=2)
    key = content_fingerprint(repr(train), max_length=max_length, vocab_size=special.size)
    trainer = row_set_trainer(cfg, ctx, RowSet(train_rows, len(train_rows), key),
                              RowSet(eval_rows, len(eval_rows), key + "-eval"),
                              ClassificationLoss(lm_weight=float(data["lm_weight"])), model, spec)
    return fit_summary(ctx, trainer)
