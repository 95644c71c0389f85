"""One `train` at a time in a run folder: an advisory lock (``flock``) that the main rank holds on the folder it
writes from the moment it creates or opens it until the command ends. Two runs into one ``output_dir`` both exited 0
with their ``metrics.jsonl`` rows interleaved and the checkpoints and ``config.yaml`` of whichever wrote last. A run
refused before it wrote more than its record leaves no folder it made."""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .config_errors import TrainConfigError


@dataclass(frozen=True)
class _Held:
    descriptor: int
    record_files: frozenset[str]  # what this run wrote into a folder it made, and may remove again; empty otherwise


_held: dict[Path, _Held] = {}  # the run folders this process holds


def hold_run_folder(run_dir: Path, made_with: Iterable[str] = ()) -> None:
    """Lock ``run_dir`` (an existing folder) for this process, once; a one-line error while another process holds
    it. ``made_with``: where this run made the folder, the names of the record files it writes first."""
    key = run_dir.resolve()
    if key in _held:
        return
    folder = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(folder)
        raise TrainConfigError(f"another `train` is writing output_dir={run_dir}: wait for it to end, or give another "
                               "output_dir") from None
    _held[key] = _Held(folder, frozenset(made_with))


def release_run_folders(refused: bool = False) -> None:
    """Let other processes write the run folders this one held (at the end of the command); a ``refused`` run
    first removes a folder it made that holds nothing but its record."""
    while _held:
        folder, held = _held.popitem()
        if refused and held.record_files and {entry.name for entry in folder.iterdir()} <= held.record_files:
            for name in held.record_files:
                (folder / name).unlink(missing_ok=True)
            folder.rmdir()
        os.close(held.descriptor)
