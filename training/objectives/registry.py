"""Objectives by name."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .denoising import (
    BertStyle,
    Deshuffling,
    IidDropTokens,
    IidReplaceSpans,
    MassStyle,
    PrefixLM,
)
from .lm import LanguageModeling
from .span_corruption import SpanCorruption

if TYPE_CHECKING:
    from . import Objective

OBJECTIVES: dict[str, type] = {cls.name: cls for cls in (
    SpanCorruption, PrefixLM, BertStyle, MassStyle, IidReplaceSpans, IidDropTokens, Deshuffling, LanguageModeling)}


def make_objective(name: str, **params: Any) -> Objective:
    """The objective ``name`` built with ``params`` (e.g. ``vocab_size=32100``); ``ValueError`` on an unknown name
    or parameter."""
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; valid names: {', '.join(sorted(OBJECTIVES))}")
    cls = OBJECTIVES[name]
    fields = [field.name for field in dataclasses.fields(cls)]
    unknown = sorted(set(params) - set(fields))
    if unknown:
        raise ValueError(f"objective {name!r} has no parameter {', '.join(map(repr, unknown))}; valid parameters: "
                         f"{', '.join(fields)}")
    missing = [field.name for field in dataclasses.fields(cls) if field.name not in params
               and field.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"objective {name!r} needs {', '.join(missing)}")
    return cls(**params)
