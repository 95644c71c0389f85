"""The one error type of a bad ``train`` setting (its message is one line saying what to fix)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TrainConfigError(ValueError):
    """A bad override or setting; the message says what to fix."""


def require_choice(key: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise TrainConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(choices)}")
