"""``train experiment=adavae_ptb stage=classify init_from=<AdaVAE run>``: low-resource sentiment classification from
the AdaVAE encoder on Yelp short reviews (Shen et al. 2017; ``../shared/reference/adavae.md`` §2.5).

For every count in ``classify.per_label`` and every seed in ``classify.seeds``, ``per_label``
sentences per label are drawn from the Yelp dev files (balanced, keyed by the seed alone, so a seed's smaller sample
is a prefix-drawn subset of its larger one); every run is scored on one fixed balanced sample of the test files
(``eval_per_label`` per label, drawn with ``seed``). Two modes:

- ``feature``: the AdaVAE stays frozen; a dropout + linear classifier learns on ``features``: the posterior mean
  mu(x) (``mean``) or the pooled vector before mean/logvar (``pooled``).
- ``adapters``: the encoder adapters and the pooling train together with the classifier; everything else is frozen.

The AdaVAE runs without its own dropout (eval mode); the classifier's dropout (0.1 as upstream) is the only one.
Both modes train for a fixed number of AdamW steps whatever the count (upstream trains for a fixed number of
iterations too), walking through the sample epoch by epoch in permutations keyed by ``(seed, epoch)``; the
classifier's initialisation and dropout come from ``torch.manual_seed(seed)``. Writes ``classification.json``
(every run and the mean ± sample std of accuracy per mode and count) and prints a table. The backbone was trained
on PTB: Yelp words outside its word vocabulary become ``<unk>`` (their share of the test sample is reported), so this
measures how the PTB-trained latent transfers.
"""
from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...config_errors import TrainConfigError
from ...config_groups import TrainConfig
from ...data.row_batches import content_fingerprint
from ...data.sentence_files import SentenceDataError, SentenceVocabulary, encode_sentences
from ...metrics import seed_summary
from ...seeding import example_rng
from ...stages.run import start_run
from ..gpt1.input_transforms import FinetuneDataError
from ..gpt1.yelp import LABELS, balanced_sample, read_yelp
from .classify_settings import ClassifySettings
from .model import AdaVAE
from .trained import trained_vae

log = logging.getLogger(__name__)

CLASSIFICATION_FILE = "classification.json"
# ------------------------------------------------------------------------------------------- pure helpers
def step_batches(count: int, batch_size: int, seed: int, steps: int) -> Iterator[np.ndarray]:
    """``steps`` batches of example indices: epoch after epoch, ``0..count-1`` in the permutation keyed by
    ``(seed, epoch)`` cut into ``batch_size`` slices (an epoch's last slice may be smaller)."""
    if count < 1 or batch_size < 1:
        raise ValueError(f"need at least one example and batch_size >= 1, got {count} and {batch_size}")
    epoch = 0
    while steps > 0:
        order = example_rng(seed, epoch).permutation(count)
        for first in range(0, count, batch_size)[:steps]:
            yield order[first:first + batch_size]
        steps -= -(-count // batch_size)
        epoch += 1


def unknown_share(examples: Sequence[Sequence[int]], unk_id: int) -> float:
    """Share of the tokens (ids between BOS and EOS) of ``examples`` that are ``unk_id``."""
    tokens = [token for ids in examples for token in ids[1:-1]]
    return sum(token == unk_id for token in tokens) / len(tokens) if tokens else 0.0


def summarize_runs(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """``{mode: {per_label (as text): seed_summary of the accuracies}}`` over seeds, in order of first appearance."""
    grouped: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        grouped.setdefault(run["mode"], {}).setdefault(str(run["per_label"]), []).append(run["accuracy"])
    return {mode: {count: seed_summary(values) for count, values in counts.items()}
            for mode, counts in grouped.items()}


def summary_table(summary: dict[str, dict[str, dict[str, float]]]) -> str:
    """The summary as aligned text: one line per mode and count."""
    lines = [f"{'mode':<10}{'per_label':>10}  accuracy (mean ± std over seeds)"]
    for mode, counts in summary.items():
        for count, stats in counts.items():
            lines.append(f"{mode:<10}{count:>10}  {stats['mean']:.4f} ± {stats['std']:.4f}  ({stats['runs']} runs)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------- torch glue
def encoder_batch(examples: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
    """The encoder's view of ``[BOS] tokens [EOS]`` examples: inputs ``[B, T]`` (BOS and tokens, EOS dropped, then
    zero fill) and the mask of the real positions, built from the lengths (never from a pad id)."""
    lengths = torch.tensor([len(ids) - 1 for ids in examples])
    inputs = torch.zeros(len(examples), int(lengths.max()), dtype=torch.long)
    for row, ids in enumerate(examples):
        inputs[row, :len(ids) - 1] = torch.as_tensor(ids[:-1], dtype=torch.long)
    return inputs, torch.arange(inputs.shape[1])[None] < lengths[:, None]


def batch_features(model: AdaVAE, examples: Sequence[Sequence[int]], kind: str, device: torch.device) -> Tensor:
    """``[B, d]`` pooled encoder vectors (``pooled``) or ``[B, latent_size]`` posterior means (``mean``)."""
    inputs, mask = (tensor.to(device) for tensor in encoder_batch(examples))
    pooled = model.posterior.pool(model.encoder_states(inputs, mask), mask)
    return model.posterior.mean(pooled) if kind == "mean" else pooled


@torch.no_grad()
def sentence_features(model: AdaVAE, examples: Sequence[Sequence[int]], kind: str, batch_size: int,
                      device: torch.device) -> Tensor:
    """Features of every ``[BOS] words [EOS]`` example in order, encoded ``batch_size`` at a time."""
    return torch.cat([batch_features(model, examples[first:first + batch_size], kind, device)
                      for first in range(0, len(examples), batch_size)])


def fit_classifier(features_of: Callable[[np.ndarray], Tensor], labels: Tensor, classifier: nn.Module,
                   parameters: list[nn.Parameter], lr: float, steps: int, batch_size: int, seed: int) -> None:
    """``steps`` AdamW steps on the cross-entropy of ``classifier(features_of(indices))`` (:func:`step_batches`)."""
    optimizer = torch.optim.AdamW(parameters, lr=lr)
    classifier.train()
    for indices in step_batches(len(labels), batch_size, seed, steps):
        loss = F.cross_entropy(classifier(features_of(indices)), labels[torch.from_numpy(indices)])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    classifier.eval()


@torch.no_grad()
def correct_predictions(classifier: nn.Module, features: Tensor, labels: Tensor) -> int:
    return int((classifier(features).argmax(-1) == labels).sum())


def _classifier(width: int, dropout: float, seed: int, device: torch.device) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Dropout(dropout), nn.Linear(width, len(LABELS))).to(device)


def tuned_parameters(model: AdaVAE) -> list[nn.Parameter]:
    """What ``adapters`` mode trains in the AdaVAE: the encoder adapters and the posterior pooling."""
    if model.encoder_adapters is None:
        raise TrainConfigError(f"mode adapters needs an AdaVAE trained with peft=adapters, not {model.config.peft}; "
                               "use classify.modes=[feature]")
    return [*model.encoder_adapters.parameters(), *model.posterior.pool.parameters()]


def feature_run(train_features: Tensor, train_labels: Tensor, eval_features: Tensor, eval_labels: Tensor,
                settings: ClassifySettings, seed: int) -> int:
    """Correct test predictions of a classifier trained on frozen features."""
    classifier = _classifier(train_features.shape[1], settings.dropout, seed, train_features.device)
    fit_classifier(lambda indices: train_features[torch.from_numpy(indices)], train_labels, classifier,
                   list(classifier.parameters()), settings.feature_lr, settings.feature_steps, settings.batch_size,
                   seed)
    return correct_predictions(classifier, eval_features, eval_labels)


def adapter_run(model: AdaVAE, train_examples: Sequence[Sequence[int]], train_labels: Tensor,
                eval_examples: Sequence[Sequence[int]], eval_labels: Tensor, settings: ClassifySettings, seed: int,
                eval_batch_size: int) -> int:
    """Correct test predictions after tuning ``model``'s encoder adapters and pooling (in place) with a classifier."""
    device = train_labels.device
    tuned = tuned_parameters(model)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for parameter in tuned:
        parameter.requires_grad_(True)
    model.eval()
    width = model.posterior.mean.out_features if settings.features == "mean" else model.posterior.mean.in_features
    classifier = _classifier(width, settings.dropout, seed, device)

    def features_of(indices: np.ndarray) -> Tensor:
        return batch_features(model, [train_examples[int(i)] for i in indices], settings.features, device)

    fit_classifier(features_of, train_labels, classifier, tuned + list(classifier.parameters()), settings.adapter_lr,
                   settings.adapter_steps, settings.batch_size, seed)
    eval_features = sentence_features(model, eval_examples, settings.features, eval_batch_size, device)
    return correct_predictions(classifier, eval_features, eval_labels)


# -------------------------------------------------------------------------------------------------- stage
def _encoded(sample: list[tuple[str, int]], vocab: SentenceVocabulary, max_words: int,
             device: torch.device) -> tuple[list[list[int]], Tensor]:
    try:
        examples, _ = encode_sentences([text for text, _ in sample], vocab, max_words)
    except SentenceDataError as error:
        raise TrainConfigError(f"classify.folder: {error}") from None
    return examples, torch.tensor([label for _, label in sample], dtype=torch.long, device=device)


def run_latent_classification(cfg: TrainConfig) -> dict[str, Any]:
    settings = cfg.classify
    model, vocab, step = trained_vae(cfg)
    ctx = start_run(cfg)
    model.to(ctx.device)
    max_words, eval_batch = cfg.data.max_words, ctx.settings.micro_batch_size
    try:
        dev = read_yelp(settings.folder, "dev")
        evaluation = balanced_sample(read_yelp(settings.folder, "test"), settings.eval_per_label, cfg.seed)
        samples = {(count, seed): balanced_sample(dev, count, seed)
                   for count in settings.per_label for seed in settings.seeds}
    except FinetuneDataError as error:
        raise TrainConfigError(f"classify.folder: {error}") from None
    eval_examples, eval_labels = _encoded(evaluation, vocab, max_words, ctx.device)
    frozen_eval = (sentence_features(model, eval_examples, settings.features, eval_batch, ctx.device)
                   if "feature" in settings.modes else None)
    runs = []
    for mode in settings.modes:
        for (count, seed), sample in samples.items():
            examples, labels = _encoded(sample, vocab, max_words, ctx.device)
            if mode == "feature":
                train_features = sentence_features(model, examples, settings.features, eval_batch, ctx.device)
                correct = feature_run(train_features, labels, frozen_eval, eval_labels, settings, seed)
            else:
                correct = adapter_run(copy.deepcopy(model), examples, labels, eval_examples, eval_labels, settings,
                                      seed, eval_batch)
            runs.append({"mode": mode, "per_label": count, "seed": seed, "accuracy": correct / len(eval_labels),
                         "correct": correct, "evaluated": len(eval_labels)})
            log.info("%s per_label=%d seed=%d: accuracy %.4f", mode, count, seed, runs[-1]["accuracy"])
    summary = summarize_runs(runs)
    unk_id = getattr(vocab, "unk_id", None)  # word vocabularies have one; byte-level BPE never maps to unknown
    result = {"init_from": str(cfg.init_from), "step": step, "features": settings.features,
              "evaluation": {"folder": settings.folder, "split": "test", "per_label": settings.eval_per_label,
                             "seed": cfg.seed, "sentences": len(evaluation),
                             "fingerprint": content_fingerprint(repr(evaluation)),
                             "unknown_share": None if unk_id is None else unknown_share(eval_examples, unk_id)},
              "settings": asdict(settings),
              "runs": runs, "summary": summary}
    if ctx.env.is_main:
        (ctx.run_dir / CLASSIFICATION_FILE).write_text(json.dumps(result, indent=2) + "\n")
        print(summary_table(summary))
    return result
