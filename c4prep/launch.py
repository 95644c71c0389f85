"""The console scripts ``c4prep`` and ``train``: each imports its command line first, which takes a second or two
(torch, Beam); Ctrl-C or SIGTERM in that time is one line and exit 130 or 143, as the commands answer them once they
run."""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from c4prep.interrupted import stop_exit_code, stop_on_signals, stopped_by, stopped_line, training_stopped_line


def _main_of(module: str, stopped: Callable[[int | None], str]) -> Any:
    """``module``'s ``main``, imported; ``stopped(signal)`` on stderr and exit 128 + signal if Ctrl-C or SIGTERM
    comes while it imports."""
    stop_on_signals()
    try:
        return importlib.import_module(module).main
    except KeyboardInterrupt:
        print(stopped(stopped_by()), file=sys.stderr)
        sys.exit(stop_exit_code(stopped_by()))


def c4prep() -> Any:
    return _main_of("c4prep.cli", stopped_line)()


def train() -> Any:
    return _main_of("c4prep.training.cli", training_stopped_line)()
