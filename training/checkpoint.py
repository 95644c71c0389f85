"""Checkpoints: everything needed to continue a run exactly, written atomically.

A checkpoint is one ``torch.save`` file ``<run>/checkpoints/step_<N>.pt`` holding the model, optimizer and schedule
states, the step (which is also the data position: the loader resumes at that global batch), every rank's RNG
state and the run's config. ``latest`` names the newest complete file; it is replaced only after the file is
fully written, so a crash never leaves a half checkpoint that a resume would pick up.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

LATEST = "latest"
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or does not fit the run (the message says what to do)."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(run_dir: str | Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as step ``step``, point ``latest`` at it, keep the newest ``keep`` files."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:08d}.pt"
    partial = path.with_suffix(".pt.partial")
    torch.save(state, partial)
    os.replace(partial, path)
    pointer = folder / f"{LATEST}.partial"
    pointer.write_text(path.name + "\n")
    os.replace(pointer, folder / LATEST)
    for old in sorted(_step_files(folder))[:-keep]:
        old.unlink()
    return path


def _step_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if _STEP_FILE.match(p.name)] if folder.is_dir() else []


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run folder, or None."""
    pointer = checkpoint_dir(run_dir) / LATEST
    if not pointer.is_file():
        return None
    path = checkpoint_dir(run_dir) / pointer.read_text().strip()
    if not path.is_file():
        raise CheckpointError(f"{pointer} names {path.name}, which does not exist; delete {pointer} or restore the file")
    return path


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or a run folder (its latest checkpoint)."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        found = latest_checkpoint(path)
        if found is not None:
            return found
        raise CheckpointError(f"no checkpoint in {path}: train first, or pass a step_*.pt file")
    raise CheckpointError(f"checkpoint {path} does not exist: pass a step_*.pt file or a run folder")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint on the CPU (trusted files written by :func:`save_checkpoint`)."""
    path = resolve_checkpoint(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as error:
        raise CheckpointError(f"cannot read checkpoint {path}: {error}; delete it to resume from an older one") from None


def rng_state() -> dict[str, Any]:
    """This process's torch RNG state (CPU and, when present, CUDA)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
