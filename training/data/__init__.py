"""Training data: row sources (token-shard samples, text pairs, in-memory row sets), the encoder-decoder and
decoder-only rows they build, and deterministic distributed batches of them."""
from .batches import BatchPlan, collate_rows, make_loader
from .row_source import RowSource
from .token_index import (SampleIndex, TokenDataError, build_sample_index, close_shards, read_segment)
from .token_rows import RowBuilder, TokenBatches, TokenSampleRows, eval_batches

__all__ = ["BatchPlan", "RowBuilder", "RowSource", "SampleIndex", "TokenBatches", "TokenDataError",
           "TokenSampleRows", "build_sample_index", "close_shards", "collate_rows", "eval_batches", "make_loader",
           "read_segment"]
