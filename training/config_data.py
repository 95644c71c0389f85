"""Typed ``data:`` settings, one structured config per ``data.kind`` (see ``config_groups``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from .config_errors import TrainConfigError, require_at_least, require_choice
from .experiments.gpt1.input_transforms import FinetuneDataError
from .experiments.gpt1.task_files import TASKS, column_names


@dataclass
class TokensData:
    """``data=c4_tokens``: token shards of ``c4prep tokenize``."""

    kind: str
    tokens: str
    train_split: str = "train"
    validation_split: Optional[str] = "validation"
    concat_documents: int = 128
    document_eos: Optional[str] = None  # drop | keep each document's EOS; None: drop unless objective=lm

    def __post_init__(self) -> None:
        if self.document_eos is not None:
            require_choice("data.document_eos", self.document_eos, ("drop", "keep"))


@dataclass
class BirthPlacesData:
    """``data=cs224n_a5_birth_places``."""

    kind: str
    corpus: str
    train: str
    evaluate: Optional[str]  # null: answer no questions
    predictions: Optional[str] = None
    block_size: int = 128
    max_new_chars: int = 32
    pack: bool = True
    pack_length: int = 127


@dataclass
class CharCorruptionData:
    """``data=cs224n_a5_wiki``."""

    kind: str
    corpus: str
    block_size: int = 128
    pack: bool = True
    pack_length: int = 127


@dataclass
class SentencesData:
    """``data=ptb``: sentence files, one sentence per line."""

    kind: str
    train: str
    validation: Optional[str] = None
    test: Optional[str] = None
    max_words: int = 64
    pack: bool = True
    pack_length: int = 65


@dataclass
class TaskFiles:
    """One text-to-text task: training and validation files (TSV/JSONL) and the input prefix."""

    train: Optional[str] = None
    validation: Optional[str] = None
    prefix: str = ""


@dataclass
class MixingConfig:
    """How the tasks are mixed (T5 3.5.2)."""

    strategy: str = "examples_proportional"
    size_limit: Optional[int] = None
    temperature: float = 1.0


@dataclass
class TextToTextData:
    """``data=text_to_text``: fine-tuning tasks mixed at T5's rates."""

    kind: str
    vocab: str
    inputs_length: int = 512
    targets_length: int = 128
    tasks: dict[str, TaskFiles] = field(default_factory=dict)
    mixing: MixingConfig = field(default_factory=MixingConfig)
    unsupervised_tokens: Optional[str] = None

    def __post_init__(self) -> None:
        require_at_least(self, "data.", ("inputs_length", "targets_length"), 1)  # room for EOS


@dataclass
class CharTextData:
    """``data=tiny_shakespeare``: one text file, next-character windows."""

    kind: str
    text: str
    block_size: int = 64
    validation_fraction: float = 0.1


@dataclass
class GPT1HeadData:
    """What every GPT-1 fine-tuning data config sets: the vocabulary, the sequence length and the head."""

    kind: str = MISSING
    vocab: str = MISSING
    max_length: int = 64
    lm_weight: float = 0.5
    classifier_dropout: float = 0.1

    def __post_init__(self) -> None:
        require_at_least(self, "data.", ("max_length",), 1)
        require_at_least(self, "data.", ("lm_weight",), 0)
        if not 0 <= self.classifier_dropout < 1:
            raise TrainConfigError(f"data.classifier_dropout must be in [0, 1), got {self.classifier_dropout}")


@dataclass
class ClassificationData(GPT1HeadData):
    """``data=yelp_sentiment``: GPT-1 sentence classification."""

    folder: str = MISSING
    train_per_label: int = 500
    eval_per_label: int = 1000


@dataclass
class GPT1TaskData(GPT1HeadData):
    """``data=gpt1_entailment|gpt1_similarity|gpt1_multiple_choice|gpt1_classification``: GPT-1 fine-tuning on TSV or
    JSONL task files (``experiments/gpt1/task_files.py``)."""

    task: str = MISSING
    train: Optional[str] = None
    validation: Optional[str] = None
    labels: Optional[list[str]] = None
    columns: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choice("data.task", self.task, TASKS)
        try:
            column_names(self.task, self.columns)
        except FinetuneDataError as error:
            raise TrainConfigError(f"data.{error}") from None


DATA_SCHEMAS: dict[str, type] = {
    "tokens": TokensData, "birth_places": BirthPlacesData, "char_corruption": CharCorruptionData,
    "sentences": SentencesData, "text_to_text": TextToTextData, "char_text": CharTextData,
    "classification": ClassificationData, "gpt1_task": GPT1TaskData,
}
