"""Settings of AdaVAE's ``stage=classify`` (Yelp-short sentiment from the encoder), the ``classify:`` section."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...config_errors import TrainConfigError

MODES = ("feature", "adapters")
FEATURES = ("mean", "pooled")


@dataclass
class ClassifySettings:
    """``classify:`` (``stage=classify model=adavae``)."""

    folder: str = ""
    per_label: list[int] = field(default_factory=lambda: [5, 50, 500])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    eval_per_label: int = 1000
    modes: list[str] = field(default_factory=lambda: list(MODES))
    features: str = "mean"
    dropout: float = 0.1
    batch_size: int = 32
    feature_lr: float = 1e-3
    feature_steps: int = 1000
    adapter_lr: float = 1e-3
    adapter_steps: int = 300

    def __post_init__(self) -> None:
        if not self.per_label or any(n < 1 for n in self.per_label):
            raise TrainConfigError(f"classify.per_label must be a non-empty list of positive ints, got "
                                   f"{self.per_label}")
        if not self.seeds or any(s < 0 for s in self.seeds):
            raise TrainConfigError(f"classify.seeds must be a non-empty list of non-negative ints, got {self.seeds}")
        if not self.modes or set(self.modes) - set(MODES):
            raise TrainConfigError(f"classify.modes must be a non-empty subset of {list(MODES)}, got {self.modes}")
        if self.features not in FEATURES:
            raise TrainConfigError(f"classify.features must be one of {list(FEATURES)}, got {self.features!r}")
        for name in ("eval_per_label", "batch_size", "feature_steps", "adapter_steps"):
            if getattr(self, name) < 1:
                raise TrainConfigError(f"classify.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.dropout < 1 or self.feature_lr <= 0 or self.adapter_lr <= 0:
            raise TrainConfigError("classify.dropout must be in [0, 1) and the learning rates > 0")

