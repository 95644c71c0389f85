"""The console scripts ``c4prep`` and ``train``: each imports its command line first, which takes a second or two
(torch, Beam); Ctrl-C in that time is one line and exit 130, as the commands answer it once they run."""
from __future__ import annotations

import importlib
import sys
from typing import Any

from c4prep.interrupted import INTERRUPTED, INTERRUPTED_EXIT_CODE, TRAINING_INTERRUPTED


def _main_of(module: str, interrupted: str) -> Any:
    """``module``'s ``main``, imported; ``interrupted`` on stderr and exit 130 if Ctrl-C comes while it imports."""
    try:
        return importlib.import_module(module).main
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        sys.exit(INTERRUPTED_EXIT_CODE)


def c4prep() -> Any:
    return _main_of("c4prep.cli", INTERRUPTED)()


def train() -> Any:
    return _main_of("c4prep.training.cli", f"train: interrupted: {TRAINING_INTERRUPTED}")()
