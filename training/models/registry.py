"""Models by config name: ``model: {name: t5, size: t5_small, dropout_rate: 0.1}`` -> a module."""
from __future__ import annotations

from typing import Any

from torch import nn

from .t5 import T5, t5_config


def _t5(vocab_size: int, size: str = "t5_small", **overrides: Any) -> nn.Module:
    return T5(t5_config(size, vocab_size, **overrides))


MODELS = {"t5": _t5}


def build_model(name: str, vocab_size: int, **settings: Any) -> nn.Module:
    """The model family ``name`` for ``vocab_size`` ids; ``settings`` pick its size and override its fields."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(sorted(MODELS))}")
    return MODELS[name](vocab_size, **settings)
