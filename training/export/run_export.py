"""Export a trained run: the model as a Hugging Face folder (T5, GPT-2-shaped GPT) with its tokenizer, or an
AdaVAE's tuned modules; a model card beside them. The folder appears whole or not at all (written next to it and
renamed); an export removes what killed exports into the same folder left beside it."""
from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

from ..stages.model_setup import model_from_checkpoint
from .adavae import backbone_source, write_adavae
from .hf_folders import hf_layout, write_hf_model
from .hf_tokenizers import write_tokenizer
from .model_card import model_card
from .run_source import ExportError, TrainedRun, read_run, run_vocabulary

log = logging.getLogger(__name__)


def export_run(source: str | Path, output: str | Path, vocab: str | None = None) -> dict[str, Any]:
    """Export the checkpoint ``source`` names (a run folder: its latest) into the new or empty folder ``output``;
    ``vocab``: the SentencePiece vocabulary, when the run's data no longer names where it is."""
    if "://" in str(output):
        raise ExportError(f"{output}: export writes a local folder; export there, then copy it (e.g. gsutil cp -r, "
                          "aws s3 cp --recursive)")
    run, output = read_run(source), Path(output)
    if output.exists() and not (output.is_dir() and not any(output.iterdir())):
        raise ExportError(f"{output} already exists and is not an empty folder: choose a new output folder")
    model = model_from_checkpoint(run.state).eval()
    destination = Path(os.path.realpath(output))  # OUT a link: its folder (the export cannot be renamed onto a link)
    _remove_unfinished_exports(destination)
    staging = _staging_folder(destination, uuid.uuid4().hex[:8])
    try:
        staging.mkdir(parents=True)
    except OSError as error:
        raise ExportError(f"cannot write {output}: {error.strerror} ({error.filename}); give a folder that can be "
                          "written") from None
    try:
        architecture, lineage = _write_model(run, model, vocab, staging)
        files = sorted(p.name for p in staging.iterdir()) + ["README.md"]
        parameters = sum(p.numel() for p in model.parameters())
        (staging / "README.md").write_text(model_card(run, architecture, files, lineage, parameters),
                                           encoding="utf-8")
        try:
            os.replace(staging, destination)
        except OSError as error:
            raise ExportError(f"cannot write {output}: {error.strerror} ({destination}); give a new or empty "
                              "folder") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"output": str(output), "architecture": architecture, "step": run.state["step"], "files": files}


def _staging_folder(output: Path, tag: str) -> Path:
    """The hidden folder beside ``output`` that an export writes and then renames to ``output``."""
    return output.parent / f".{output.name}.partial-{tag}"


def _remove_unfinished_exports(output: Path) -> None:
    """Remove the staging folders that earlier exports into ``output`` left behind (killed before renaming)."""
    pattern = re.compile(re.escape(_staging_folder(output, "").name) + "[0-9a-f]{8}")
    for leftover in sorted(output.parent.glob(".*.partial-*")):
        if pattern.fullmatch(leftover.name) and leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
            log.warning("removed %s, left by an export into %s that did not finish", leftover, output)


def _write_model(run: TrainedRun, model: Any, vocab: str | None, folder: Path) -> tuple[str, dict[str, Any]]:
    """Write the model files (and tokenizer) into ``folder``; the architecture written and the data lineage."""
    if run.family == "adavae":
        backbone = backbone_source(run.config.get("init_from"), model)
        config = write_adavae(model, run.spec, backbone, folder)
        return "AdaVAE", {"backbone": {"source": backbone, **config["backbone"]}}
    objective = run.state.get("config", {}).get("name")  # what a GPT pre-trained on token shards was trained on
    if run.family == "gpt" and objective not in (None, "lm"):
        raise ExportError(f"cannot export {run.checkpoint} to Hugging Face: it was trained with objective={objective}, "
                          "whose inputs attend to each other both ways (a prefix LM), and GPT2LMHeadModel attends "
                          "causally only, so it would score and generate otherwise; export a GPT trained with "
                          "objective=lm")
    try:
        hf_layout(model)
    except ValueError as error:
        raise ExportError(f"cannot export {run.checkpoint} (model {run.family}) to Hugging Face: {error}") from None
    vocabulary, lineage = run_vocabulary(run, vocab)
    max_length = getattr(model.config, "block_size", None)
    token_ids = write_tokenizer(vocabulary, folder, run.family, max_length)
    return write_hf_model(model, run.spec, folder, token_ids), lineage
