"""`c4prep vocab`: train a SentencePiece model on sentences sampled from document shards, as T5 did.

Writes ``spm.model``, ``spm.vocab`` and last ``vocab.json`` (the card: settings, sentence counts, source
fingerprints, versions, the model's SHA-256). A folder is a complete vocabulary exactly when it has a card that
describes its model.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow.fs as pafs
import sentencepiece as spm

from c4prep import __version__
from c4prep.manifest import (
    VOCABULARY,
    VOCABULARY_CARD,
    Manifest,
    manifest_fingerprint,
    output_folder,
    read_manifest,
)
from c4prep.output_settings import ALLOW_FLAG, Content, OtherSettingsError, Settings, check_same_settings
from c4prep.shards import absolute_input, check_writable, join_uri, resolve_uri, write_files_together

from .sampling import BottomKSample, LineStats, document_lines, stream_key
from .vocabulary import EOS_ID, PAD_ID, UNK_ID

MODEL_NAME = "spm.model"
VOCAB_NAME = "spm.vocab"
CARD_NAME = VOCABULARY_CARD
CARD_FORMAT = "c4prep-vocabulary"
MODEL_TYPES = ("unigram", "bpe", "char", "word")

MIN_CHARACTER_COVERAGE = 0.98
MAX_VOCAB_SIZE = 1 << 30  # 2**31 - 1 ran without end on 84 documents (32-bit overflow); 2**30 is refused at once
_TOO_BIG = re.compile(r"Vocabulary size (?:is )?too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


class VocabError(ValueError):
    """A user mistake or an input that cannot give the requested vocabulary (one-line message)."""


@dataclass
class VocabConfig:
    """Everything that decides the trained model (recorded in the card)."""

    inputs: list[str]
    output: str
    vocab_size: int = 32_000
    model_type: str = "unigram"
    input_sentence_size: int = 1_000_000
    seed: int = 0
    language_ratio: list[int] | None = None  # one weight per input, e.g. [10, 1, 1, 1]; None: natural mix
    splits: list[str] = field(default_factory=lambda: ["train"])
    character_coverage: float = 0.9995
    normalization_rule_name: str = "nmt_nfkc"
    max_sentence_length: int = 4192
    num_threads: int = 16  # SentencePiece's default; the model depends on it, so it is not the machine's count
    allow_other_settings: bool = False  # replace a vocabulary made with other settings (otherwise refused)

    def __post_init__(self) -> None:
        self.splits = list(dict.fromkeys(self.splits))  # a split given twice is read once


@dataclass
class VocabResult:
    card: dict[str, Any]
    seconds_sampling: float
    seconds_training: float


def trainer_options(config: VocabConfig) -> dict[str, Any]:
    """SentencePiece trainer flags: T5's (unigram, pad 0, eos 1, unk 2, no BOS) plus the config's."""
    return {
        "model_type": config.model_type,
        "vocab_size": config.vocab_size,
        "pad_id": PAD_ID,
        "eos_id": EOS_ID,
        "unk_id": UNK_ID,
        "bos_id": -1,
        "character_coverage": config.character_coverage,
        "normalization_rule_name": config.normalization_rule_name,
        "max_sentence_length": config.max_sentence_length,
        "input_sentence_size": 0,  # c4prep samples; the trainer takes every sentence it is given
        "num_threads": config.num_threads,
    }


def check_config(config: VocabConfig) -> None:
    """Fail fast, with one line, on settings that cannot work."""
    if not config.inputs:
        raise VocabError("no input given: pass --input DOCUMENT_SHARDS_DIR (repeatable)")
    same = [absolute_input(uri) for uri in config.inputs]  # relative, absolute or linked: one folder
    twice = next((uri for i, uri in enumerate(config.inputs) if same[i] in same[:i]), None)
    if twice is not None:
        raise VocabError(f"--input {twice} is given twice (its sentences would count double): give each once, and "
                         "weigh them with --language-ratio")
    if not config.output.strip():
        raise VocabError(f"--output {config.output!r} names no folder: give one")
    if config.model_type not in MODEL_TYPES:
        raise VocabError(f"unknown model type {config.model_type!r}: use one of {', '.join(MODEL_TYPES)}")
    if not 4 <= config.vocab_size <= MAX_VOCAB_SIZE:
        raise VocabError(f"--vocab-size must be in [4, {MAX_VOCAB_SIZE:,}] (pad, eos, unk and one piece; the most "
                         f"SentencePiece's 32-bit trainer takes), got {config.vocab_size}")
    if config.input_sentence_size < 1:
        raise VocabError(f"--input-sentence-size must be >= 1, got {config.input_sentence_size}")
    if not MIN_CHARACTER_COVERAGE <= config.character_coverage <= 1.0:
        raise VocabError(f"--character-coverage must be in [{MIN_CHARACTER_COVERAGE}, 1] (SentencePiece's range), "
                         f"got {config.character_coverage}")
    if not 1 <= config.num_threads <= 1024:
        raise VocabError(f"--num-threads must be in [1, 1024], got {config.num_threads}")
    if config.max_sentence_length < 10:
        raise VocabError(f"max_sentence_length must be >= 10 bytes, got {config.max_sentence_length}")
    ratio = config.language_ratio
    if ratio is not None and (len(ratio) != len(config.inputs) or min(ratio) < 1):
        raise VocabError(f"--language-ratio needs one positive weight per --input ({len(config.inputs)}), "
                         f"got {':'.join(map(str, ratio))}")
    if ratio is not None and config.input_sentence_size < sum(ratio):
        raise VocabError(f"--input-sentence-size {config.input_sentence_size} cannot hold the --language-ratio "
                         f"{':'.join(map(str, ratio))}: give at least {sum(ratio)}")


def mixture_sizes(kept: Sequence[int], ratio: Sequence[int]) -> list[int]:
    """The most sentences to take from each stream, given ``kept`` available, with counts exactly in ``ratio``."""
    unit = min(n // weight for n, weight in zip(kept, ratio))
    return [unit * weight for weight in ratio]


def document_manifests(config: VocabConfig) -> list[Manifest]:
    """The manifests of the inputs, each holding documents and the splits to read; a :class:`VocabError` if not."""
    return [_document_manifest(uri, config.splits) for uri in config.inputs]


def _document_manifest(uri: str, splits: Sequence[str]) -> Manifest:
    manifest = read_manifest(uri)
    if "text" not in manifest.schema().names:
        raise VocabError(f"{uri} holds no documents (its shards have no 'text' column)")
    missing = [split for split in splits if split not in manifest.splits]
    if missing:
        raise VocabError(f"{uri} has no split {missing[0]!r} (it has: {', '.join(manifest.splits)})")
    return manifest


def sample_sentences(config: VocabConfig, manifests: Sequence[Manifest]) -> tuple[list[str], list[dict[str, Any]]]:
    """The training sentences (inputs in order, each in stream order) and per-input statistics, from the inputs'
    ``manifests`` (:func:`document_manifests`).

    Without a ratio all inputs form one stream (a natural mix); with one, each input is its own stream and the
    counts taken follow the ratio exactly.
    """
    ratio = config.language_ratio
    if ratio:
        samples = [BottomKSample(max(1, config.input_sentence_size * weight // sum(ratio)), stream_key(config.seed, i))
                   for i, weight in enumerate(ratio)]
    else:
        samples = [BottomKSample(config.input_sentence_size, stream_key(config.seed, 0))] * len(config.inputs)
    stats = [LineStats() for _ in config.inputs]
    starts = []
    for uri, manifest, sample, stat in zip(config.inputs, manifests, samples, stats):
        starts.append(sample.seen)
        for lines in document_lines(uri, manifest, config.splits, config.max_sentence_length, stat):
            sample.add(lines)
    if not any(len(sample) for sample in samples):
        raise VocabError(f"no sentences in the {'/'.join(config.splits)} documents of {', '.join(config.inputs)}")
    if ratio:
        sizes = mixture_sizes([len(sample) for sample in samples], ratio)
        if not sizes[0]:
            short, found = next((uri, len(sample)) for uri, sample, weight in zip(config.inputs, samples, ratio)
                                if len(sample) < weight)
            if not found:  # no weight lets it into the mixture
                raise VocabError(f"{short} has no sentences in its {'/'.join(config.splits)} documents: drop that "
                                 "--input and its --language-ratio weight")
            raise VocabError(f"{short} has fewer sentences than its --language-ratio weight; lower the weights")
        chosen = [sample.smallest(n) for sample, n in zip(samples, sizes)]
    else:
        mixed = samples[0].smallest(len(samples[0]))
        bounds = [*starts, samples[0].seen]
        chosen = [[entry for entry in mixed if low <= entry[0] < high] for low, high in zip(bounds, bounds[1:])]
    sources = [{
        "uri": uri,
        "fingerprint": manifest_fingerprint(manifest),
        "splits": list(config.splits),
        "ratio": ratio[i] if ratio else None,
        "documents": stat.documents,
        "sentences_seen": stat.sentences,
        "sentences_too_long": stat.too_long,
        "sentences_used": len(chosen[i]),
    } for i, (uri, manifest, stat) in enumerate(zip(config.inputs, manifests, stats))]
    return [line for entries in chosen for _, line in entries], sources


def _interruptible(work: Callable[[], None]) -> None:
    """Run ``work`` in a daemon thread while this one waits: SentencePiece's trainer releases the GIL but never looks
    at signals, so Ctrl-C waited for the end of training; now it interrupts the wait at once (and the process
    exits without waiting for the trainer)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # re-raised in the waiting thread
            failure.append(error)

    worker = threading.Thread(target=run, name="sentencepiece-trainer", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if failure:
        raise failure[0]


def train_model(sentences: Sequence[str], options: dict[str, Any]) -> bytes:
    """Serialised SentencePiece model trained on ``sentences``; :class:`VocabError` if the corpus is too small for
    the vocabulary size, or the size too small for the corpus's characters."""
    model = _trained(sentences, options)
    if options["model_type"] == "char" and _num_pieces(model) == options["vocab_size"]:
        needed = _char_pieces_needed(sentences, options)  # SentencePiece keeps the most frequent characters silently
        if needed > options["vocab_size"]:
            raise VocabError(_too_small_message(options, needed))
    return model


def _trained(sentences: Sequence[str], options: dict[str, Any]) -> bytes:
    model = io.BytesIO()
    try:
        _interruptible(lambda: spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model,
                                                              minloglevel=2, **options))
    except RuntimeError as error:
        too_big = _TOO_BIG.search(str(error))
        if too_big:
            raise VocabError(f"the corpus is too small for --vocab-size {too_big[1]}: {len(sentences):,} "
                             f"sentence{'s' if len(sentences) != 1 else ''} "
                             f"give at most {too_big[2]} pieces; use --vocab-size {too_big[2]} or less, or more "
                             "input") from None
        too_small = _TOO_SMALL.search(str(error))
        if too_small:
            raise VocabError(_too_small_message(options, int(too_small[2]))) from None
        raise VocabError(f"SentencePiece training failed: {str(error).strip().splitlines()[-1]}") from None
    return model.getvalue()


def _num_pieces(model_proto: bytes) -> int:
    return spm.SentencePieceProcessor(model_proto=model_proto).get_piece_size()


def _char_pieces_needed(sentences: Sequence[str], options: dict[str, Any]) -> int:
    """The pieces of a char model that keeps every character at the options' coverage (with pad, eos and unk): the
    size SentencePiece stops at when ``vocab_size`` leaves room."""
    size = options["vocab_size"]
    while True:
        size = min(2 * size, MAX_VOCAB_SIZE)
        pieces = _num_pieces(_trained(sentences, {**options, "vocab_size": size}))
        if pieces < size or size == MAX_VOCAB_SIZE:
            return pieces


def _too_small_message(options: dict[str, Any], needed: int) -> str:
    lower = ", or a lower --character-coverage" if options["character_coverage"] > MIN_CHARACTER_COVERAGE else ""
    return (f"--vocab-size {options['vocab_size']} is too small for this corpus: its characters (at "
            f"--character-coverage {options['character_coverage']}) need {needed} pieces with pad, eos and unk; "
            f"use --vocab-size {needed} or more{lower}")


def vocab_file_text(sp: spm.SentencePieceProcessor) -> str:
    """``spm.vocab`` as ``spm_train`` writes it: one ``piece<TAB>score`` line per id."""
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))


def _settings(config: Mapping[str, Any], sources: Sequence[Mapping[str, Any]]) -> Settings:
    """What decides a model, from a card's ``config`` and ``sources`` (a written card, or this run's), in the order of
    `c4prep vocab --help`; the two settings without an option last, by their :class:`VocabConfig` names."""
    ratio = config.get("language_ratio")
    return [("--input", [Content(source["uri"], "fingerprint", source["fingerprint"]) for source in sources]),
            ("--vocab-size", config.get("vocab_size")),
            ("--model-type", config.get("model_type")),
            ("--input-sentence-size", config.get("input_sentence_size")),
            ("--seed", config.get("seed")),
            ("--language-ratio", ":".join(map(str, ratio)) if ratio else "none"),
            ("--split", config.get("splits")),
            ("--character-coverage", config.get("character_coverage")),
            ("--num-threads", config.get("num_threads")),
            ("normalization_rule_name", config.get("normalization_rule_name")),
            ("max_sentence_length", config.get("max_sentence_length"))]


def _check_replaceable(config: VocabConfig, manifests: Sequence[Manifest]) -> None:
    """An :class:`~c4prep.output_settings.OtherSettingsError` when ``config.output`` holds a vocabulary made with other
    settings or inputs than this run's (``manifests``: its inputs'), unless ``config.allow_other_settings``."""
    if config.allow_other_settings:
        return
    try:
        card = read_card(join_uri(config.output, CARD_NAME))
    except VocabError:  # a damaged card beside a good model, or another tool's vocab.json (a GPT-2 tokenizer's)
        raise OtherSettingsError(
            f"{join_uri(config.output, CARD_NAME)} is not a c4prep vocabulary card (damaged, or another tool's), so "
            f"this run cannot tell what it would replace and left {config.output} unchanged: restore it, give another "
            f"--output, or pass {ALLOW_FLAG} to replace it") from None
    if card is None:
        return
    sources = [{"uri": uri, "fingerprint": manifest_fingerprint(manifest)}
               for uri, manifest in zip(config.inputs, manifests)]
    check_same_settings(config.output, VOCABULARY, _settings(card.get("config", {}), card.get("sources", [])),
                        _settings(asdict(config), sources))


def train_vocabulary(config: VocabConfig) -> VocabResult:
    """Sample, train, and write ``spm.model``, ``spm.vocab`` and the card (last) into ``config.output`` (unless it
    holds a vocabulary made with other settings)."""
    check_config(config)
    manifests = document_manifests(config)  # the inputs are checked before the output folder is made
    with output_folder(config.output, VOCABULARY, files=[MODEL_NAME, VOCAB_NAME, CARD_NAME]):
        _check_replaceable(config, manifests)
        try:
            check_writable(config.output)  # found before training, which may take hours, not after
        except OSError as error:
            raise VocabError(f"cannot write the vocabulary to {config.output}: {error}") from None
        started = time.monotonic()
        sentences, sources = sample_sentences(config, manifests)
        sampled = time.monotonic()
        options = trainer_options(config)
        model_proto = train_model(sentences, options)
        trained = time.monotonic()
    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    card = {
        "format": CARD_FORMAT,
        "format_version": 1,
        "package_version": __version__,
        "sentencepiece_version": spm.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {"file": MODEL_NAME, "sha256": hashlib.sha256(model_proto).hexdigest(),
                  "num_pieces": processor.get_piece_size()},
        "special_ids": {"pad": PAD_ID, "eos": EOS_ID, "unk": UNK_ID, "bos": -1},
        "config": asdict(config),
        "trainer_options": options,
        "sentences": {"seen": sum(s["sentences_seen"] for s in sources), "used": len(sentences),
                      "too_long": sum(s["sentences_too_long"] for s in sources)},
        "sources": sources,
    }
    try:
        write_vocabulary(config.output, model_proto, vocab_file_text(processor), card)
    except OSError as error:
        raise VocabError(f"cannot write the vocabulary to {config.output}: {error}") from None
    return VocabResult(card, sampled - started, trained - sampled)


def write_vocabulary(output: str, model_proto: bytes, vocab_text: str, card: dict[str, Any]) -> None:
    """Replace the vocabulary in ``output``: model, vocab and card are written aside, then moved into place with the
    card last; a write that fails (a full disk) leaves the vocabulary as it was."""
    write_files_together(output, {MODEL_NAME: model_proto, VOCAB_NAME: vocab_text.encode("utf-8"),
                                  CARD_NAME: (json.dumps(card, indent=2, ensure_ascii=False) + "\n").encode("utf-8")})


def read_card(uri: str) -> dict[str, Any] | None:
    """The vocabulary card at ``uri``; None where there is no file; a :class:`VocabError` for a file that is not a
    c4prep vocabulary card."""
    fs, path = resolve_uri(uri)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as stream:
        text = stream.read().decode("utf-8", errors="replace")
    try:
        card = json.loads(text)
    except json.JSONDecodeError:
        card = None
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise VocabError(f"{uri} is not a c4prep vocabulary card; re-run `c4prep vocab`")
    return card


def locate_vocabulary(vocab: str) -> tuple[str, bytes, dict[str, Any] | None]:
    """``(model URI, model bytes, card or None)`` for a vocabulary folder (card required) or a ``.model`` file (card
    optional: the ``vocab.json`` beside it when it describes this very file, by SHA-256; the folder's own model,
    ``spm.model`` beside a card, is checked as the folder is). A local model path is made absolute, so that a
    manifest recording it names the file from any working folder."""
    fs, path = resolve_uri(vocab)
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.Directory:
        folder, model_uri, required = vocab, join_uri(vocab, MODEL_NAME), True
    elif kind == pafs.FileType.File:
        folder, model_uri, required = (vocab.rsplit("/", 1)[0] if "/" in vocab else "."), vocab, False
    else:
        raise VocabError(f"vocabulary not found: {vocab} is neither a folder made by `c4prep vocab` nor a .model file")
    card = read_card(join_uri(folder, CARD_NAME))
    required = required or (card is not None and model_uri.rsplit("/", 1)[-1] == MODEL_NAME)  # the card's own model
    if required and card is None:
        raise VocabError(f"no {CARD_NAME} in {vocab}: the vocabulary is missing or its run did not finish; "
                         "run `c4prep vocab`")
    if "://" not in model_uri:
        model_uri = os.path.abspath(model_uri)
    model_fs, model_path = resolve_uri(model_uri)
    try:
        with model_fs.open_input_stream(model_path) as stream:
            model_proto = stream.read()
    except OSError as error:
        raise VocabError(f"cannot read {model_uri}: {error}") from None
    if card is not None and card.get("model", {}).get("sha256") != hashlib.sha256(model_proto).hexdigest():
        if required:
            raise VocabError(f"{model_uri} is not the model its {CARD_NAME} describes (SHA-256 differs); re-run "
                             "`c4prep vocab`")
        return model_uri, model_proto, None  # a .model file beside another model's card
    return model_uri, model_proto, card
