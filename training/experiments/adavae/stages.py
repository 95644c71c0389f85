"""AdaVAE stages (``model=adavae objective=vae data=ptb``):

- ``stage=finetune init_from=<GPT run>``: wrap the pre-trained GPT (``train stage=pretrain experiment=
  ptb_gpt_pretrain``; its run folder holds ``word_vocabulary.json``) in the VAE and train it: cyclic beta, free
  bits, the decoder side joining at ``objective.phase_two_fraction`` of the steps. The run keeps the vocabulary.
  ``init_from=<local Hugging Face GPT-2 directory>`` (its ``config.json``, weights and tokenizer files) takes the
  same path with that GPT-2 and its tokenizer (``data/gpt2_tokenizer.py``), which the run copies into
  ``gpt2_tokenizer/``. Sentences needing more than the backbone's ``block_size`` positions are refused.
- ``stage=evaluate init_from=<AdaVAE run>``: IW log-likelihood (``evaluate.iw_samples``), per-token and per-word
  PPL, -ELBO, KL, reconstruction, MI and AU on every sentence of ``data.test`` -> ``evaluation.json``.
- ``stage=generate init_from=<AdaVAE run>``: sentences decoded from prior samples, from interpolations between
  two test sentences and from an analogy -> printed and ``generation.json``.
"""
from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from ...checkpoint import CheckpointError, load_checkpoint
from ...config_errors import TrainConfigError
from ...distributed import launched_world_size
from ...config_data import SentencesData
from ...config_groups import TrainConfig, model_settings
from ...data.row_batches import row_set_eval_batches, row_set_length_batches
from ...data.sentence_files import (
    VOCABULARY_FILE,
    SentenceDataError,
    SentenceVocabulary,
    WordVocabulary,
    read_sentences,
)
from ...models.gpt import GPT
from ...models.gpt_hf import gpt_from_hf_directory
from ...stages.data_setup import sentence_row_set
from ...stages.model_setup import model_from_checkpoint
from ...stages.run import RunContext, fit_summary, keep_run_files, row_set_trainer, start_run
from .estimators import evaluate_vae
from .gpt2_tokenizer import TOKENIZER_DIR, GPT2TokenizerVocabulary
from .model import AdaVAE, AdaVAEConfig
from .trained import run_vocabulary, trained_vae
from .vae_loss import VAESchedule, VAELoss, sentence_length, sentence_view

log = logging.getLogger(__name__)

EVALUATION_FILE = "evaluation.json"
GENERATION_FILE = "generation.json"


def _backbone(cfg: TrainConfig) -> tuple[GPT, SentenceVocabulary]:
    """The GPT to wrap and its vocabulary: a local Hugging Face GPT-2 directory (``config.json``, tokenizer files
    beside the weights) or a c4prep GPT run."""
    if not cfg.init_from:
        raise CheckpointError("model=adavae needs init_from=<pre-trained GPT run folder or checkpoint, or a local "
                              "Hugging Face GPT-2 directory>: train one with `train stage=pretrain "
                              "experiment=ptb_gpt_pretrain`")
    init_from = str(cfg.init_from)
    if (Path(init_from) / "config.json").is_file():
        try:
            backbone, vocab = gpt_from_hf_directory(init_from), GPT2TokenizerVocabulary.load(init_from)
        except (ImportError, OSError, ValueError) as error:
            raise TrainConfigError(f"init_from={init_from}: {error}") from None
    else:
        state = load_checkpoint(init_from)
        family = state["model_spec"].get("name")
        if family != "gpt":
            raise TrainConfigError(f"init_from={init_from} is not a GPT (its model is {family}): AdaVAE wraps a "
                                   "pre-trained GPT; give a GPT run (`train stage=pretrain "
                                   "experiment=ptb_gpt_pretrain`) or a local Hugging Face GPT-2 directory")
        backbone, vocab = model_from_checkpoint(state), run_vocabulary(init_from)
    if vocab.vocab_size > backbone.config.vocab_size:
        raise TrainConfigError(f"init_from={init_from}: the vocabulary has {vocab.vocab_size} ids, more than the "
                               f"GPT's {backbone.config.vocab_size}; pair the GPT with its own vocabulary")
    return backbone, vocab


def _settings(cfg: TrainConfig) -> tuple[dict[str, Any], AdaVAEConfig]:
    """The ``model:`` settings (for the checkpoint's spec) and the config they make."""
    settings = {k: v for k, v in model_settings(cfg.model).items() if k != "name"}
    try:
        return settings, AdaVAEConfig(**settings)
    except (TypeError, ValueError) as error:
        raise TrainConfigError(f"bad model settings for adavae: {error}") from None


def _vae_loss(cfg: TrainConfig) -> VAELoss:
    objective = cfg.objective
    return VAELoss(rate=objective.kl_rate, free_bits=objective.free_bits, reconstruction=objective.reconstruction)


def _keep_tokenizer(ctx: RunContext, vocab: SentenceVocabulary) -> None:
    """Once the run is restored or starts over (a refused run changes no file): the run folder keeps a copy of a
    GPT-2 backbone's tokenizer, and no other run's (the stages read it before a word vocabulary, which the run keeps
    as a run file: its checkpoints record its SHA-256, a resume on another is refused)."""
    if not ctx.env.is_main:
        return
    if isinstance(vocab, WordVocabulary):
        shutil.rmtree(ctx.run_dir / TOKENIZER_DIR, ignore_errors=True)
    else:
        vocab.save(ctx.run_dir)


def run_adavae_train(cfg: TrainConfig) -> dict[str, Any]:
    objective, data = cfg.objective, cfg.data
    if launched_world_size() > 1:  # DDP takes the parameters that train at the start, and its decoder side joins later
        raise TrainConfigError("AdaVAE trains in one process (its decoder side joins mid-run, which data-parallel "
                               "training does not follow): run `train` without torchrun")
    if data.pack:  # a packed row holds several sentences: vae_loss reads one sentence (and its words) a row
        raise TrainConfigError("data.pack=true puts several sentences in a row, where AdaVAE encodes one sentence a "
                               "row: leave data.pack=false (experiment=adavae_ptb's)")
    settings, config = _settings(cfg)
    ctx = start_run(cfg)
    backbone, vocab = _backbone(cfg)
    torch.manual_seed(cfg.seed)
    try:
        model = AdaVAE(backbone, config)
    except ValueError as error:
        raise TrainConfigError(f"bad model settings for adavae: {error}") from None
    backbone_spec = {k: v for k, v in asdict(backbone.config).items() if k != "vocab_size"}
    spec = {"name": "adavae", "vocab_size": backbone.config.vocab_size, "backbone": backbone_spec, **settings}
    positions = backbone.config.block_size
    train = sentence_row_set(data, "train", vocab, positions=positions)
    validation = sentence_row_set(data, "validation", vocab, positions=positions) if data.validation else None
    vae_loss = _vae_loss(cfg)
    if isinstance(vocab, WordVocabulary):
        keep_run_files(ctx, {VOCABULARY_FILE: vocab.to_json() + "\n"})
    # the optimizer holds every phase's parameters; validation batches sentences of similar length
    trainer = row_set_trainer(cfg, ctx, train, validation, vae_loss, model, spec, validation_length=sentence_length)
    _keep_tokenizer(ctx, vocab)
    total = ctx.settings.max_steps
    trainer.step_hook = VAESchedule(vae_loss, model, total, int(total * objective.phase_two_fraction),
                                    objective.cycles, objective.ratio_zero, objective.ratio_increase,
                                    objective.beta_max)
    if ctx.env.is_main:
        log.info("AdaVAE parameters: %s", model.parameter_report())
    return {**fit_summary(ctx, trainer), "parameters": model.parameter_report()}


def run_adavae_evaluate(cfg: TrainConfig) -> dict[str, Any]:
    settings, data = cfg.evaluate, cfg.data
    model, vocab, step = trained_vae(cfg)
    ctx = start_run(cfg)
    model.to(ctx.device)
    rows = sentence_row_set(data, "test", vocab, positions=model.backbone.config.block_size)
    batches = (sentence_view({k: v.to(ctx.device) for k, v in batch.items()})
               for batch in row_set_length_batches(rows, ctx.settings.micro_batch_size, sentence_length))
    generator = torch.Generator().manual_seed(cfg.seed)
    metrics = evaluate_vae(model, batches, settings.iw_samples, settings.iw_chunk, generator)
    result = {"step": step, "test": data.test, "iw_samples": settings.iw_samples, **metrics,
              "parameters": model.parameter_report()}
    if ctx.env.is_main:
        (ctx.run_dir / EVALUATION_FILE).write_text(json.dumps(result, indent=2) + "\n")
    return result


def run_adavae_generate(cfg: TrainConfig) -> dict[str, Any]:
    generation = cfg.generate
    data = cfg.data
    model, vocab, _ = trained_vae(cfg)
    positions = model.backbone.config.block_size
    if generation.max_tokens >= positions:
        raise TrainConfigError(f"generate.max_tokens={generation.max_tokens} is more than this AdaVAE can write: its "
                               f"backbone's {positions} positions hold BOS and at most {positions - 1} tokens; lower "
                               "it")
    try:
        sentences = read_sentences(data.test)
    except SentenceDataError as error:
        raise TrainConfigError(f"data.test: {error}") from None
    picks = list(generation.sentences)
    if len(picks) != 3 or max(picks) >= len(sentences):
        raise TrainConfigError(f"generate.sentences must be 3 line numbers of data.test (A, B, C of the "
                               f"analogy; A -> B is interpolated), got {picks}")
    a, b, c = (sentences[i] for i in picks)
    ctx = start_run(cfg)
    model.to(ctx.device)
    means = _posterior_means(model, vocab, data, [a, b, c], ctx.device)
    steps = generation.interpolation_steps
    weights = torch.linspace(0, 1, steps + 2, device=ctx.device)[:, None]
    interpolation = means[0] + weights * (means[1] - means[0])
    analogy = (means[2] + generation.analogy_degree * (means[1] - means[0]))[None]
    generator = torch.Generator(device=ctx.device).manual_seed(cfg.seed)
    prior = torch.randn(generation.prior_samples, means.shape[1], generator=generator, device=ctx.device)

    def decode(z: torch.Tensor) -> list[str]:
        ids = model.generate(z, vocab.bos_id, vocab.eos_id, generation.max_tokens, greedy=generation.greedy,
                             top_k=generation.top_k, temperature=generation.temperature, generator=generator)
        return [vocab.decode(row) for row in ids]

    result = {"sentences": {"a": a, "b": b, "c": c}, "interpolation": decode(interpolation),
              "analogy": decode(analogy)[0], "prior": decode(prior)}
    if ctx.env.is_main:
        (ctx.run_dir / GENERATION_FILE).write_text(json.dumps(result, indent=2) + "\n")
        print(_report(result))
    return result


@torch.no_grad()
def _posterior_means(model: AdaVAE, vocab: SentenceVocabulary, data: SentencesData, sentences: list[str],
                     device: torch.device) -> torch.Tensor:
    """Posterior means of ``sentences`` of ``data.test``, laid out (and masked) as the evaluation rows are."""
    rows = sentence_row_set(data, "test", vocab, sentences, model.backbone.config.block_size)
    view = sentence_view({k: v.to(device) for k, v in next(row_set_eval_batches(rows, 0, 1, len(sentences))).items()})
    mean, _ = model.encode(view.inputs, view.input_mask)
    return mean


def _report(result: dict[str, Any]) -> str:
    lines = ["interpolation (A -> B):", *(f"  {s}" for s in result["interpolation"]),
             "analogy (C + B - A):", f"  {result['analogy']}", "prior samples:", *(f"  {s}" for s in result["prior"])]
    return "\n".join([f"A: {result['sentences']['a']}", f"B: {result['sentences']['b']}",
                      f"C: {result['sentences']['c']}", *lines])
