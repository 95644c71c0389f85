"""Models by config name (``model: {name: t5, size: t5_small}``; also ``gpt``, ``adavae``) -> a module."""
from __future__ import annotations

from typing import Any

from torch import nn

from .gpt import GPT, GPTConfig, gpt_config
from .t5 import T5, t5_config


def _t5(vocab_size: int, size: str = "t5_small", **overrides: Any) -> nn.Module:
    return T5(t5_config(size, vocab_size, **overrides))


def _gpt(vocab_size: int, size: str = "gpt_tiny", **overrides: Any) -> nn.Module:
    return GPT(gpt_config(size, vocab_size, **overrides))


def _gpt_classifier(vocab_size: int, num_classes: int, reduce: str = "sum", classifier_dropout: float = 0.1,
                    size: str = "gpt_tiny", **overrides: Any) -> nn.Module:
    from ..experiments.gpt1.classifier import GPTClassifier  # experiments build on the core models, not around

    return GPTClassifier(GPT(gpt_config(size, vocab_size, **overrides)), num_classes, reduce, classifier_dropout)


def _adavae(vocab_size: int, backbone: dict[str, Any], **settings: Any) -> nn.Module:
    """``backbone``: the GPTConfig fields of the pretrained GPT the VAE wraps (its weights come from a checkpoint)."""
    from ..experiments.adavae.model import AdaVAE, AdaVAEConfig  # experiments build on the core models

    return AdaVAE(GPT(GPTConfig(vocab_size=vocab_size, **backbone)), AdaVAEConfig(**settings))


MODELS = {"t5": _t5, "gpt": _gpt, "gpt_classifier": _gpt_classifier, "adavae": _adavae}


def build_model(name: str, vocab_size: int, **settings: Any) -> nn.Module:
    """The model family ``name`` for ``vocab_size`` ids; ``settings`` pick its size and override its fields."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(sorted(MODELS))}")
    return MODELS[name](vocab_size, **settings)
