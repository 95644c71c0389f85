"""Model families: T5 (encoder-decoder) and GPT (decoder-only); built by name with :func:`build_model`."""
from .registry import MODELS, build_model

__all__ = ["MODELS", "build_model"]
