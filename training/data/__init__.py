"""Training data: row sources (token-shard samples, text pairs, in-memory row sets), the encoder-decoder and
decoder-only rows they build, and deterministic distributed batches of them."""
from .batches import BatchPlan, collate_rows, make_loader
from .row_source import RowSource
from .token_index import (SampleIndex, TokenDataError, build_sample_index, close_shards, read_segment)
from .row_batches import RowBatches, row_set_eval_batches
from .token_rows import RowBuilder, TokenSampleRows

__all__ = ["BatchPlan", "RowBatches", "RowBuilder", "RowSource", "SampleIndex", "TokenDataError", "TokenSampleRows",
           "build_sample_index", "close_shards", "collate_rows", "make_loader", "read_segment",
           "row_set_eval_batches"]
