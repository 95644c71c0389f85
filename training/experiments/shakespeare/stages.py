"""tiny-shakespeare (``experiment=shakespeare_char``, ``data.kind=char_text``): ``stage=pretrain`` of a character GPT
on next-character windows of one text file."""
from __future__ import annotations

from typing import Any

from ...config_errors import TrainConfigError
from ...config_groups import TrainConfig
from ...data.char_vocabulary import VOCABULARY_FILE, CharVocabError
from ...data.row_batches import RowSet, content_fingerprint
from ...stages.data_setup import TrainingData, read_text
from ...stages.run import pretrain_on_rows
from .char_text import CharTextError, char_text_splits


def char_text_corpus(cfg: TrainConfig) -> TrainingData:
    data = cfg.data
    text = read_text(data.text, "text")
    block_size, fraction = data.block_size, data.validation_fraction
    try:
        train, validation, vocab = char_text_splits(text, block_size, fraction)
    except (CharTextError, CharVocabError) as error:
        raise TrainConfigError(f"{data.text}: {error}") from None
    key = content_fingerprint(text, block_size=block_size, validation_fraction=fraction)
    return TrainingData(RowSet(train, len(train), key),
                        RowSet(validation, len(validation), key) if validation is not None else None, vocab.vocab_size,
                        run_files={VOCABULARY_FILE: vocab.to_json()})


def run_char_pretrain(cfg: TrainConfig) -> dict[str, Any]:
    return pretrain_on_rows(cfg, char_text_corpus(cfg))
