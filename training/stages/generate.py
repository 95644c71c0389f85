"""``train stage=generate init_from=<run>``: samples from a trained GPT or T5, as nanoGPT's ``sample.py``.

The prompts are ``generate.prompts`` then the lines of ``generate.prompts_file``; each gets ``generate.num_samples``
samples of at most ``generate.max_tokens`` tokens, greedy or drawn at ``generate.temperature`` from the ``top_k``
most likely, with ``seed`` (the same settings give the same samples). A GPT continues its prompt; a T5 answers it
(the prompt plus EOS is its encoder input, and ``<extra_id_k>`` in a prompt is sentinel k, so a span-corruption
model fills the spans). Prompts and samples are written in the run's vocabulary (:func:`run_vocabulary`). The
samples are printed and written to ``<output_dir>/generations.jsonl``, one ``{"prompt", "sample", "completion"}``
object a line.
"""
from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from c4prep.tokenization.vocabulary import SentencePieceVocabulary

from ..checkpoint import CheckpointError, load_checkpoint
from ..config_errors import TrainConfigError
from ..config_groups import GenerateConfig, TrainConfig
from ..config_runs import trained_run_folder
from ..data.char_vocabulary import CharVocabError, CharVocabulary, kept_char_vocabulary
from ..data.sentence_files import SentenceDataError, WordVocabulary
from ..data.token_index import TokenDataError
from ..models.gpt import GPT
from ..trainer import autocast
from .data_setup import CHAR_TEXT_KEYS, check_run_vocabulary, load_vocabulary, read_text, token_vocabulary
from .model_setup import check_model_settings, model_from_checkpoint
from .run import RunContext, run_device, start_run

GENERATIONS_FILE = "generations.jsonl"
SENTINEL = re.compile(r"<extra_id_(\d+)>")


@dataclass(frozen=True)
class PromptVocabulary:
    """A run's vocabulary as generation uses it: ``encode`` a prompt, ``decode`` ids (up to the end of text), the
    ids a GPT prompt starts with (BOS) and a T5 input ends with (EOS)."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    vocab_size: int
    start: tuple[int, ...] = ()
    end: tuple[int, ...] = ()


def run_vocabulary(cfg: TrainConfig) -> PromptVocabulary:
    """The vocabulary ``init_from``'s run encoded its data with: the SentencePiece model of its token shards
    (``data.kind=tokens``) or of ``data.vocab`` (``text_to_text``), the characters of ``data.text`` /
    ``data.corpus`` (character data), else the run folder's ``word_vocabulary.json`` (``sentences``)."""
    data = cfg.data
    if data.kind == "tokens":
        try:
            vocab = token_vocabulary(data.tokens)
        except TokenDataError as error:  # shards deleted or moved: their vocabulary alone does
            raise TrainConfigError(f"{error}; or give the vocabulary they were tokenized with: data=text_to_text "
                                   "data.vocab=<vocabulary folder>") from None
        check_run_vocabulary(cfg.init_from, vocab.model_sha256, f"data.tokens={data.tokens}")
        return piece_vocabulary(vocab)
    if data.kind == "text_to_text":
        return piece_vocabulary(load_vocabulary(data.vocab, cfg.init_from))
    if data.kind in CHAR_TEXT_KEYS:
        chars = _char_vocabulary(cfg)
        return PromptVocabulary(lambda text: chars.encode(text).tolist(), chars.decode, chars.vocab_size)
    try:
        words = WordVocabulary.load(trained_run_folder(cfg.init_from))
    except SentenceDataError as error:
        raise TrainConfigError(str(error)) from None
    return PromptVocabulary(words.encode, words.decode, words.vocab_size, start=(words.bos_id,))


def _char_vocabulary(cfg: TrainConfig) -> CharVocabulary:
    """The characters the run's ids mean: those its folder keeps, or for a run trained before folders kept them,
    those of its recorded ``data.text`` / ``data.corpus``."""
    try:
        kept = kept_char_vocabulary(trained_run_folder(cfg.init_from))
    except CharVocabError as error:
        raise TrainConfigError(str(error)) from None
    if kept is not None:
        return kept
    key = CHAR_TEXT_KEYS[cfg.data.kind]
    return CharVocabulary.from_text(read_text(getattr(cfg.data, key), key))


def piece_vocabulary(vocab: SentencePieceVocabulary) -> PromptVocabulary:
    """A SentencePiece vocabulary for prompts: ``<extra_id_k>`` in a prompt is sentinel k."""

    def encode(text: str) -> list[int]:
        ids: list[int] = []
        for index, part in enumerate(SENTINEL.split(text)):
            if index % 2:  # the k of <extra_id_k>
                ids.append(vocab.sentinel_id(int(part)))
            elif part.strip():
                ids += vocab.encode(part)
        return ids

    return PromptVocabulary(encode, vocab.decode, vocab.vocab_size, end=(vocab.eos_id,))


def read_prompts(settings: GenerateConfig) -> list[str]:
    """``generate.prompts``, then the non-empty lines of ``generate.prompts_file``."""
    prompts = list(settings.prompts)
    if settings.prompts_file:
        try:
            text = Path(settings.prompts_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise TrainConfigError(f"generate.prompts_file={settings.prompts_file} is not a readable UTF-8 file "
                                   f"({type(error).__name__})") from None
        prompts += [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise TrainConfigError("stage=generate needs prompts: 'generate.prompts=[\"first\", \"second\"]' or "
                               "generate.prompts_file=<file, one prompt a line>")
    return prompts


def run_generate(cfg: TrainConfig) -> dict[str, Any]:
    if not cfg.init_from:
        raise CheckpointError("stage=generate needs init_from=<checkpoint file or run folder>")
    state = load_checkpoint(cfg.init_from)
    check_model_settings(cfg, state["model_spec"])
    family, ids = state["model_spec"].get("name"), state["model_spec"].get("vocab_size")
    if family not in ("gpt", "t5"):
        raise TrainConfigError(f"stage=generate samples GPT and T5 models; init_from={cfg.init_from} is {family}")
    vocab = run_vocabulary(cfg)
    if ids != vocab.vocab_size:
        raise TrainConfigError(f"init_from={cfg.init_from} has {ids} ids but its run's vocabulary {vocab.vocab_size}:"
                               " set data.* to the data the checkpoint was trained on")
    prompts = read_prompts(cfg.generate)
    encoded = [_encode(vocab, prompt, family) for prompt in prompts]
    jobs = [(index, sample) for index in range(len(prompts)) for sample in range(cfg.generate.num_samples)]
    model = model_from_checkpoint(state).eval()
    longest = len(vocab.start) + max(map(len, encoded))
    check_generation_fits(model, min(len(jobs), cfg.trainer.micro_batch_size), longest, cfg.generate.max_tokens,
                          run_device(cfg.trainer))
    ctx = start_run(cfg)
    model = model.to(ctx.device)
    generator = torch.Generator(device=ctx.device).manual_seed(cfg.seed)
    records = []
    for first in range(0, len(jobs), ctx.settings.micro_batch_size):
        batch = jobs[first:first + ctx.settings.micro_batch_size]
        completions = _complete(model, [encoded[index] for index, _ in batch], vocab, cfg.generate, generator, ctx)
        records += [{"prompt": prompts[index], "sample": sample, "completion": completion}
                    for (index, sample), completion in zip(batch, completions)]
    path = ctx.run_dir / GENERATIONS_FILE
    if ctx.env.is_main:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        separator = "" if family == "gpt" else "\n-> "
        print("\n---------------\n".join(f"{r['prompt']}{separator}{r['completion']}" for r in records))
    return {"run_dir": str(ctx.run_dir), "checkpoint_step": int(state["step"]), "generations": str(path),
            "samples": len(records)}


def check_generation_fits(model: torch.nn.Module, rows: int, prompt_length: int, max_tokens: int,
                          device: torch.device) -> None:
    """A one-line error where what generation allocates up front for ``max_tokens`` (``generation_bytes``: batches
    of ``rows`` prompts of at most ``prompt_length`` ids) exceeds the device's memory, saying how many could fit."""
    if isinstance(model, GPT):
        need = partial(model.generation_bytes, rows, prompt_length)
        held = (f"the ids of {rows} prompt(s) and continuation(s), 8 bytes each (a GPT has no length limit of its own: "
                "it crops its context)")
    else:
        need = model.generation_bytes
        held = (f"T5's decoder position biases for every pair of its positions ({model.config.num_heads} heads x "
                "max_tokens^2 float32)")
    capacity = device_memory(device)
    if need(max_tokens) <= capacity:
        return
    fitting = bisect.bisect_right(range(1, max_tokens + 1), capacity, key=need)
    raise TrainConfigError(f"generate.max_tokens={max_tokens} needs {need(max_tokens) / 2 ** 30:,.1f} GiB up front for "
                           f"{held}, more than the {capacity / 2 ** 30:,.1f} GiB of memory of the {device} (at most "
                           f"{fitting:,} tokens could fit): lower it")


def device_memory(device: torch.device) -> int:
    """The memory of ``device``: its GPU's, or the machine's physical memory."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _encode(vocab: PromptVocabulary, prompt: str, family: str) -> list[int]:
    try:
        ids = vocab.encode(prompt)
    except ValueError as error:  # a character or word the vocabulary lacks, a sentinel beyond its extra ids
        raise TrainConfigError(f"generate.prompts: {prompt!r}: {error}") from None
    if family == "gpt" and not vocab.start + tuple(ids):
        raise TrainConfigError("generate.prompts: an empty prompt leaves the GPT nothing to continue; give it text")
    return ids


@torch.no_grad()
def _complete(model: torch.nn.Module, prompts: list[list[int]], vocab: PromptVocabulary, settings: GenerateConfig,
              generator: torch.Generator, ctx: RunContext) -> list[str]:
    """The text each prompt's sample adds: a GPT's continuation, or a T5's answer."""
    options = dict(temperature=settings.temperature, top_k=settings.top_k, greedy=settings.greedy,
                   generator=generator)
    if isinstance(model, GPT):
        rows = [torch.tensor(vocab.start + tuple(ids)) for ids in prompts]
        with autocast(ctx.device, ctx.settings.precision):
            samples = model.generate(rows, settings.max_tokens, **options)
        return [_continuation(vocab, ids, sample.tolist()) for ids, sample in zip(prompts, samples)]
    rows = [ids + list(vocab.end) for ids in prompts]
    width = max(map(len, rows))
    inputs = torch.tensor([row + [model.config.pad_id] * (width - len(row)) for row in rows], device=ctx.device)
    with autocast(ctx.device, ctx.settings.precision):
        samples = model.generate(inputs, settings.max_tokens, **options)
    return [vocab.decode(sample.tolist()) for sample in samples]


def _continuation(vocab: PromptVocabulary, prompt: list[int], sample: list[int]) -> str:
    """The text ``sample`` adds after ``prompt`` (decoded together, so a word boundary between them keeps its
    space)."""
    return vocab.decode(prompt + sample)[len(vocab.decode(prompt)):]
