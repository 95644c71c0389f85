"""The one error type of a bad ``train`` setting (its message is one line saying what to fix)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TrainConfigError(ValueError):
    """A bad override or setting; the message says what to fix."""


def require_at_least(settings: Any, prefix: str, names: Sequence[str], minimum: float) -> None:
    """A :class:`TrainConfigError` naming the first of ``settings``' fields ``names`` below ``minimum``."""
    for name in names:
        value = getattr(settings, name)
        if value < minimum:
            raise TrainConfigError(f"{prefix}{name} must be >= {minimum}, got {value}")


def require_choice(key: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise TrainConfigError(f"{key}={value!r} is not valid; choose one of: {', '.join(choices)}")
