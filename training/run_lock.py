"""One `train` at a time in a run folder: an advisory lock (``flock``) that the main rank holds on the folder it
writes from the moment it creates or opens it until the command ends. Two runs into one ``output_dir`` both exited 0
with their ``metrics.jsonl`` rows interleaved and the checkpoints and ``config.yaml`` of whichever wrote last. A run
refused before it wrote more than its record leaves no folder it made."""
from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from c4prep.folder_lock import FolderBusy, lock_folder

from .config_errors import TrainConfigError


@dataclass(frozen=True)
class _Held:
    descriptor: int
    record_files: frozenset[str]  # what this run wrote into a folder it made, and may remove again; empty otherwise
    made_parents: tuple[Path, ...]  # the folders it made above that one, nearest first


_held: dict[Path, _Held] = {}  # the run folders this process holds


def missing_folders(run_dir: Path) -> list[Path]:
    """``run_dir`` and each of its parents that does not exist, ``run_dir`` first."""
    folders = [run_dir.absolute()]
    folders += folders[0].parents
    return [folder for folder in folders if not folder.exists()]


def hold_run_folder(run_dir: Path, made: Sequence[Path] = (), made_with: Iterable[str] = ()) -> None:
    """Lock ``run_dir`` (an existing folder) for this process, once; a one-line error while another process holds
    it. ``made``: the folders this run made for it (:func:`missing_folders`); ``made_with``: the names of the record
    files it writes first into the run folder."""
    key = run_dir.resolve()
    if key in _held:
        return
    try:
        folder = lock_folder(key, f"output_dir={run_dir}", "`train`")
    except FolderBusy:
        raise TrainConfigError(f"another `train` is writing output_dir={run_dir}: wait for it to end, or give another "
                               "output_dir") from None
    _held[key] = _Held(folder, frozenset(made_with) if made else frozenset(), tuple(made[1:]))


def release_run_folders(refused: bool = False) -> None:
    """Let other processes write the run folders this one held (at the end of the command); a ``refused`` run
    first removes a folder it made that holds nothing but its record, and the folders it made above it while they
    are empty."""
    while _held:
        folder, held = _held.popitem()
        if refused and held.record_files and {entry.name for entry in folder.iterdir()} <= held.record_files:
            for name in held.record_files:
                (folder / name).unlink(missing_ok=True)
            for made in (folder, *held.made_parents):
                if any(made.iterdir()):
                    break
                made.rmdir()
        os.close(held.descriptor)
