"""Checkpoints: everything needed to continue a run exactly, written atomically.

A checkpoint is one ``torch.save`` file ``<run>/checkpoints/step_<N>.pt`` holding the model, optimizer and schedule
states, the step (which is also the data position: the loader resumes at that global batch), every rank's RNG
state and the run's config. ``latest`` names the newest complete file; it is replaced only after the file is
fully written, so a crash never leaves a half checkpoint that a resume would pick up.

A checkpoint holds only tensors and plain containers (dict, list, tuple, str, int, float, bool, None), so it loads
with ``torch.load(weights_only=True)``: loading a file from anywhere (``init_from=``) never runs code from it. Its
zip entries are checked against the CRC-32 that ``torch.save`` recorded for each before it loads, which torch does
not do: a changed byte in the weights would otherwise load. It records the SHA-256 of the run folder's files that
say what its ids mean (``run_files``: a character or word vocabulary, a SentencePiece model's hash), and loading it
refuses such a file that has changed since.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

CHECKPOINTS = "checkpoints"  # a run folder's folder of step files and `latest`
LATEST = "latest"
RUN_FILES_FIELD = "run_files"  # file name -> SHA-256, of the run folder's files that say what its ids mean
REQUIRED_FIELDS = {"step": int, "model": dict, "model_spec": dict}  # in every checkpoint of `train`; stages read them
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")
# torch's weights-only refusals of a Python object: not allowed, or of a module it blocks (os.system: posix.system)
_UNSAFE_GLOBAL = re.compile(r"(?:Unsupported global: GLOBAL|Trying to load unsupported GLOBAL) (\S+)")


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable or does not fit the run (the message says what to do)."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


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


def holds_checkpoints(run_dir: str | Path) -> bool:
    """Whether a run folder holds a step file or a ``latest`` pointer (neither is read)."""
    folder = checkpoint_dir(run_dir)
    return (folder / LATEST).is_file() or bool(_step_files(folder))


def retire_checkpoints(run_dir: str | Path) -> list[Path]:
    """Delete a run folder's checkpoints, ``latest`` first (no pointer is left naming a deleted file); the step files
    deleted, oldest first. For a run that starts over in the folder of another (``resume=never``)."""
    folder = checkpoint_dir(run_dir)
    (folder / LATEST).unlink(missing_ok=True)
    retired = sorted(_step_files(folder))
    for path in retired:
        path.unlink()
    return retired


def _step_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if _STEP_FILE.match(p.name)] if folder.is_dir() else []


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run folder, or None: the one ``latest`` names, or without ``latest`` the
    newest step file (each is complete once it has its name)."""
    folder = checkpoint_dir(run_dir)
    pointer = folder / LATEST
    if not pointer.is_file():
        return max(_step_files(folder), default=None)
    path = folder / pointer.read_text().strip()
    if not path.is_file():
        left = max(_step_files(folder), default=None)
        instead = f"delete {pointer} to resume from {left.name}, the newest checkpoint left," if left else \
            f"delete {pointer} to start over"
        raise CheckpointError(f"{pointer} names {path.name}, which does not exist: {instead} or restore the file")
    return path


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or a run folder, its ``checkpoints`` folder or its ``checkpoints/latest`` (the latest
    checkpoint)."""
    path = Path(path)
    if path.is_file() and path.name == LATEST and path.parent.name == CHECKPOINTS:
        path = path.parent.parent
    if path.is_file():
        return path
    if path.is_dir():
        found = latest_checkpoint(path)
        if found is None and path.name == CHECKPOINTS:  # a run's checkpoints folder (not a run named "checkpoints")
            found = latest_checkpoint(path.parent)
        if found is not None:
            return found
        raise CheckpointError(f"no checkpoint in {path}: train first, or pass a step_*.pt file")
    raise CheckpointError(f"checkpoint {path} does not exist: pass a step_*.pt file or a run folder")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint on the CPU, unpickling only tensors and plain containers: a :class:`CheckpointError` for a
    file that would need to run code to load, or that is not (or no longer) a checkpoint `train` wrote."""
    path = resolve_checkpoint(path)
    _check_recorded_crcs(path)
    try:
        with warnings.catch_warnings():  # torch warns about a plain pickle's protocol before refusing it
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM, errno.ENOENT, errno.EISDIR):  # the file, not its content
            raise CheckpointError(f"cannot read checkpoint {path}: {error}") from None
        raise CheckpointError(_damaged(path, error)) from None  # a cut file: the zip reader's EINVAL
    except Exception as error:  # the weights-only unpickler runs no code: whatever fails is the file's content
        unsafe = _UNSAFE_GLOBAL.search(str(error))
        if unsafe:
            raise CheckpointError(f"refused to load {path}: it is not a c4prep checkpoint, loading it would run code "
                                  f"(it calls {unsafe[1]}); pass a step_*.pt file that `train` wrote") from None
        raise CheckpointError(_damaged(path, error)) from None
    if not (isinstance(state, dict) and all(isinstance(state.get(k), kind) for k, kind in REQUIRED_FIELDS.items())):
        raise CheckpointError(f"{path} is not a c4prep checkpoint (it lacks a step, model weights or a model_spec); "
                              "pass a step_*.pt file that `train` wrote")
    named = _STEP_FILE.match(path.name)
    if named and int(named[1]) != state["step"]:
        raise CheckpointError(f"{path} holds step {state['step']}, not the step its name gives: it was renamed or "
                              "copied over; restore the file or pass the one that holds that step")
    _check_run_files(path, state.get(RUN_FILES_FIELD) or {})
    return state


def _damaged(path: Path, error: Exception) -> str:
    """What to do about a file that does not load: delete a run's checkpoint (the run resumes from an older one),
    never a file of the user's (a token shard or a text given as ``init_from``)."""
    reading = f"{type(error).__name__} while reading it"
    if _STEP_FILE.match(path.name) and path.parent.name == CHECKPOINTS:
        return (f"{path} is not a c4prep checkpoint or is damaged ({reading}): delete it, and {path.parent / LATEST} "
                "if it names it, to resume from an older one")
    return f"{path} is not a c4prep checkpoint ({reading}): pass a run folder or a step_*.pt file that `train` wrote"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_run_files(path: Path, recorded: dict[str, str]) -> None:
    """A :class:`CheckpointError` when a file of the run folder of checkpoint ``path`` is not the one whose SHA-256
    it ``recorded``: its ids would mean other characters, words or pieces. A file that is not there is left to the
    stage that reads it."""
    folder = path.parents[1] if path.parent.name == CHECKPOINTS else path.parent
    for name, sha256 in sorted(recorded.items()):
        kept = folder / name
        if kept.is_file() and file_sha256(kept) != sha256:
            raise CheckpointError(f"{kept} is not the file {path} was trained with (its SHA-256 is not the one the "
                                  "checkpoint records): restore it")


def _check_recorded_crcs(path: Path) -> None:
    """A :class:`CheckpointError` when an entry of a zip checkpoint (what ``torch.save`` writes) does not match its
    recorded CRC-32; a file that is not zip is left to ``torch.load`` to refuse."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):  # not zip (torch.load says what it is), or unreadable (it says so too)
        return
    except Exception as error:  # a zip whose directory is damaged: an entry "encrypted", an unknown method, ...
        damaged = f"directory ({type(error).__name__})"
    else:
        with archive:
            try:
                damaged = archive.testzip()
            except Exception as error:  # as above, in an entry's own header
                damaged = f"? ({type(error).__name__})"
    if damaged is not None:
        raise CheckpointError(f"{path} is damaged: its entry {damaged} does not match what was recorded when it was "
                              "written; delete it to resume from an older checkpoint")


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
