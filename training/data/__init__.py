"""Token-shard loading: the sample index (segments packed into rows) and deterministic distributed batches."""
from .batches import (BatchPlan, RowBuilder, TokenBatches, build_rows, collate_rows, eval_batches,
                      make_loader)
from .token_index import (SampleIndex, TokenDataError, build_sample_index, close_shards, read_segment)

__all__ = ["BatchPlan", "RowBuilder", "SampleIndex", "TokenBatches", "TokenDataError", "build_rows",
           "build_sample_index", "close_shards", "collate_rows", "eval_batches", "make_loader", "read_segment"]
