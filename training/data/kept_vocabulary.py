"""What a SentencePiece run's ids mean: the SHA-256 of its model, kept in the run folder as ``vocabulary.sha256``.

The stages that use a run (evaluate, generate, fine-tune, continued pre-training, export) compare it with the
model they would read: the same path may hold another model of the same size (`c4prep vocab
--allow-other-settings`), whose ids are other pieces.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

SHA256_FILE = "vocabulary.sha256"


class VocabularyMismatchError(ValueError):
    """A vocabulary other than the one a run was trained with (one-line message)."""


def sha256_run_files(model_sha256: str | None) -> dict[str, str]:
    """The run file that records ``model_sha256`` (none for token shards whose manifest predates recording it)."""
    return {SHA256_FILE: model_sha256 + "\n"} if model_sha256 else {}


def kept_sha256(run_folder: Path) -> str | None:
    """The SHA-256 a run folder keeps; None for one without (a character or word run, or an older run)."""
    kept = run_folder / SHA256_FILE
    return kept.read_text(encoding="utf-8").strip() if kept.is_file() else None


def _file_sha256(model_sha256: str) -> str:
    """The SHA-256 of the run file that records ``model_sha256`` (what a checkpoint records of it)."""
    return hashlib.sha256(sha256_run_files(model_sha256)[SHA256_FILE].encode("utf-8")).hexdigest()


def check_kept_sha256(run_folder: Path, model_sha256: str | None, run: str, read: str,
                      checkpoint_run_files: Callable[[], dict[str, str]]) -> None:
    """A :class:`VocabularyMismatchError` when ``run_folder`` (shown as ``run``) keeps a SHA-256 other than
    ``model_sha256``, the model of what the stage reads (shown as ``read``); where the folder lacks the file (a
    checkpoint copied alone), when the run file hashes of its checkpoint (``checkpoint_run_files``) name another."""
    if model_sha256 is None:
        return
    kept = kept_sha256(run_folder)
    if kept is None:
        recorded = checkpoint_run_files().get(SHA256_FILE)
        if recorded is None or recorded == _file_sha256(model_sha256):
            return
        raise VocabularyMismatchError(
            f"{run} was trained on the ids of another SentencePiece model than {read}'s (of SHA-256 "
            f"{model_sha256[:12]}...), as its checkpoint records, whose ids are other pieces: use the vocabulary and "
            "token shards the run was trained with")
    if kept != model_sha256:
        raise VocabularyMismatchError(
            f"{run} was trained on the ids of the SentencePiece model of SHA-256 {kept[:12]}..., but {read} is "
            f"another model's (SHA-256 {model_sha256[:12]}...), whose ids are other pieces: use the vocabulary and "
            "token shards the run was trained with")
