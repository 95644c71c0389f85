"""What an export reads from a trained run: the checkpoint, the run folder's ``config.yaml`` and ``metrics.jsonl``,
the vocabulary the run's data was encoded with, and the data's lineage.

Where the vocabulary is, by ``data.kind``: token shards name it in their manifest (the ``.model`` file, checked by
SHA-256); text-to-text data names it (``data.vocab``); a PTB run keeps ``word_vocabulary.json``; a character run
keeps ``char_vocabulary.json`` (a run older than that: its text, ``data.text`` or ``data.corpus``, is re-read).
``vocab=`` (``c4prep export --vocab``) points at a moved SentencePiece vocabulary, which must be the model whose
SHA-256 the run folder keeps (``vocabulary.sha256``).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from c4prep.manifest import Manifest, ManifestError, manifest_fingerprint, read_manifest
from c4prep.tokenization.train_vocab import locate_vocabulary
from c4prep.tokenization.vocabulary import SentencePieceVocabulary

from ..checkpoint import RUN_FILES_FIELD, load_checkpoint, resolve_checkpoint
from ..config_groups import MODEL_SCHEMAS
from ..config_runs import REGULARISATION_FIELDS, RUN_CONFIG, recorded_settings, trained_run_folder
from ..data.char_vocabulary import (
    VOCABULARY_FILE as CHAR_VOCABULARY_FILE,
    CharVocabError,
    CharVocabulary,
    kept_char_vocabulary,
)
from ..data.kept_vocabulary import VocabularyMismatchError, check_kept_sha256
from ..data.sentence_files import VOCABULARY_FILE, SentenceDataError, WordVocabulary
from ..metrics_log import JSONL_NAME, read_metrics
from ..stages.data_setup import CHAR_TEXT_KEYS, OWN_VOCABULARY_KINDS, T5_EXTRA_IDS, trained_on_shards
from ..stages.model_setup import differing_fields, shown_setting


class ExportError(ValueError):
    """A run that cannot be exported as asked (one line saying why and what to do)."""


@dataclass(frozen=True)
class TrainedRun:
    """A checkpoint with its run folder's config (``{}`` when absent) and metrics records."""

    checkpoint: Path
    state: dict[str, Any]
    folder: Path
    config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def spec(self) -> dict[str, Any]:
        return self.state["model_spec"]

    @property
    def family(self) -> str:
        return str(self.spec.get("name"))

    @property
    def data(self) -> dict[str, Any]:
        return self.config.get("data") or {}


def read_run(source: str | Path) -> TrainedRun:
    """The checkpoint ``source`` names (a run folder: its latest) and what its run folder holds."""
    checkpoint = resolve_checkpoint(source)
    state = load_checkpoint(checkpoint)
    folder = trained_run_folder(checkpoint)
    metrics_file = folder / JSONL_NAME
    run = TrainedRun(checkpoint, state, folder, recorded_settings(folder),
                     read_metrics(metrics_file) if metrics_file.is_file() else [])
    check_recorded_model(run)
    return run


def check_recorded_model(run: TrainedRun) -> None:
    """An :class:`ExportError` when the model settings of the run's ``config.yaml`` contradict the checkpoint's
    spec (another run's checkpoint, an edited config), compared as the stages do (``check_model_settings``): within
    the family, dropout aside, over the fields a ``model:`` section sets (not the ids, adapters, AdaVAE's backbone)."""
    recorded, schema = run.config.get("model") or {}, MODEL_SCHEMAS.get(run.family)
    if schema is None or not recorded.get("name"):  # an AdaVAE (config.yaml: its backbone), or no config.yaml
        return
    if recorded["name"] != run.family:
        raise ExportError(f"{run.checkpoint} holds a {run.family} model, the run's {RUN_CONFIG} a {recorded['name']} "
                          f"one: export a checkpoint that this run wrote, with the {RUN_CONFIG} it trained with")
    settable = {item.name for item in fields(schema)}
    spec = {key: value for key, value in run.spec.items() if key in settable}
    differing = differing_fields(recorded, spec, ignored=REGULARISATION_FIELDS)
    if differing:
        key = differing[0]
        raise ExportError(f"{run.checkpoint} holds a model with {key}={shown_setting(spec, key)}, the run's "
                          f"{RUN_CONFIG} gives {shown_setting(recorded, key)}: export a checkpoint that this run "
                          f"wrote, with the {RUN_CONFIG} it trained with")


def run_vocabulary(run: TrainedRun, vocab: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The run's vocabulary (SentencePiece, word or character) and its lineage for the model card; an
    :class:`ExportError` when it cannot be found or does not have the model's ids."""
    kind = run.data.get("kind")
    if vocab is not None and kind in OWN_VOCABULARY_KINDS:
        raise ExportError(f"{run.checkpoint} was trained on data.kind={kind}, whose ids are its own characters or "
                          "words, not SentencePiece pieces: export it without --vocab")
    if vocab is not None or kind in ("tokens", "text_to_text"):
        found, lineage = _sentencepiece(run, vocab)
    elif kind == "sentences":
        try:
            found, lineage = WordVocabulary.load(run.folder / VOCABULARY_FILE), {}
        except SentenceDataError as error:
            raise ExportError(str(error)) from None
    elif kind in CHAR_TEXT_KEYS and (kept := _kept_characters(run)) is not None:
        kept_file = run.folder / CHAR_VOCABULARY_FILE
        found, lineage = kept, {"characters": {"path": str(kept_file), "sha256": _sha256(kept_file.read_bytes())}}
    elif kind in CHAR_TEXT_KEYS:
        path = run.data[CHAR_TEXT_KEYS[kind]]
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ExportError(f"cannot read data.{CHAR_TEXT_KEYS[kind]}={path}, whose characters are the run's "
                              f"vocabulary ({error.strerror})") from None
        found, lineage = CharVocabulary.from_text(text), {"text": {"path": path, "sha256": _sha256(text.encode())}}
    else:
        where = f"data.kind={kind}" if kind else f"no config.yaml in {run.folder}"
        raise ExportError(f"cannot tell the vocabulary of {run.checkpoint} ({where}): pass --vocab=<SentencePiece "
                          "vocabulary folder or .model file>")
    if found.vocab_size != run.spec.get("vocab_size"):
        raise ExportError(f"the vocabulary has {found.vocab_size} ids but the model {run.spec.get('vocab_size')}: "
                          "it is not the run's vocabulary (pass the right one with --vocab)")
    return found, lineage


def _kept_characters(run: TrainedRun) -> CharVocabulary | None:
    try:
        return kept_char_vocabulary(run.folder)
    except CharVocabError as error:
        raise ExportError(str(error)) from None


def _sentencepiece(run: TrainedRun, vocab: str | None) -> tuple[SentencePieceVocabulary, dict[str, Any]]:
    """The SentencePiece vocabulary of token shards (their manifest's, checked by SHA-256) or of ``data.vocab``."""
    tokens, lineage, extra_ids, expected, recorded = run.data.get("tokens"), {}, T5_EXTRA_IDS, None, None
    manifest = _token_manifest(tokens, vocab) if run.data.get("kind") == "tokens" and tokens else None
    made_again = manifest is not None and not trained_on_shards(run.state, manifest_fingerprint(manifest))
    if made_again and vocab is not None:  # --vocab: the run folder's record checks it, the card names no shards
        manifest, made_again = None, False
    if manifest is not None:
        named = manifest.extra.get("vocabulary", {})
        recorded = named.get("model")
        vocab, extra_ids, expected = vocab or recorded, named.get("extra_ids", T5_EXTRA_IDS), named.get("model_sha256")
        lineage["tokens"] = {"uri": tokens, "fingerprint": manifest_fingerprint(manifest),
                             "source": manifest.extra.get("source")}
    vocab = vocab or run.data.get("vocab")
    if not vocab:
        raise ExportError("the run's data names no vocabulary: pass --vocab=<vocabulary folder or .model file>")
    try:
        uri, proto, card = locate_vocabulary(vocab)
        if manifest is None and run.data.get("kind") == "tokens":  # the shards' record of --extra-ids is gone
            extra_ids = _extra_ids_of_model(run, SentencePieceVocabulary(proto, extra_ids=0).vocab_size)
        found = SentencePieceVocabulary(proto, extra_ids=extra_ids)
    except ValueError as error:
        raise ExportError(f"vocabulary {vocab}: {error} (pass --vocab=<vocabulary folder or .model file>)") from None
    sha256 = found.model_sha256
    if expected and sha256 != expected:
        raise ExportError(f"{uri} is not the vocabulary the token shards {tokens} were made with: they name "
                          f"{recorded} of SHA-256 {expected[:12]}..., this one's is {sha256[:12]}...; pass that "
                          "one (or a copy) with --vocab")
    try:
        check_kept_sha256(run.folder, sha256, str(run.checkpoint), f"the vocabulary {uri}",
                          lambda: run.state.get(RUN_FILES_FIELD) or {})
    except VocabularyMismatchError as error:
        raise ExportError(str(error)) from None
    if made_again:  # after the vocabulary's checks: they say more
        raise ExportError(f"data.tokens={tokens} holds other token shards than {run.checkpoint} was trained on (made "
                          "again since): the model card would name them; pass --vocab=<the vocabulary folder or "
                          ".model file the run used> to export without naming its shards")
    lineage["vocabulary"] = {"uri": uri, "sha256": sha256, "sources": (card or {}).get("sources", [])}
    return found, lineage


def _extra_ids_of_model(run: TrainedRun, base_ids: int) -> int:
    """The sentinel ids of a run on token shards whose manifest is gone: the model's ids beyond the vocabulary's
    (`tokenize --extra-ids`; its SHA-256, which the run folder keeps, says it is the run's); 100, T5's, where the
    model has fewer (the size check then says it is not the run's vocabulary)."""
    beyond = int(run.spec.get("vocab_size") or 0) - base_ids
    return beyond if beyond >= 0 else T5_EXTRA_IDS


def _token_manifest(tokens: str, vocab: str | None) -> Manifest | None:
    """The manifest of the run's token shards, which names their vocabulary; None where ``--vocab`` names it and
    the shards are gone (moved, deleted after training): the run folder's record of its SHA-256 checks it then."""
    try:
        return read_manifest(tokens)
    except ManifestError as error:
        if vocab is not None:
            return None
        raise ExportError(f"data.tokens={tokens}, the run's token shards, which name its vocabulary: {error}; or "
                          "pass --vocab=<the vocabulary folder or .model file they were made with>") from None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
