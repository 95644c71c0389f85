"""Token shards: one row per document with its ids (EOS appended), their count, and the document's URL."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

UINT16_LIMIT = 1 << 16
UINT32_LIMIT = 1 << 32  # the most ids a token shard can number


def token_schema(vocab_size: int, metadata: Mapping[str, str] | None = None) -> pa.Schema:
    """``ids: list<uint16>`` (``list<uint32>`` above 65,536 ids), ``length: int32``, ``url: string``."""
    id_type = pa.uint16() if vocab_size <= UINT16_LIMIT else pa.uint32()
    return pa.schema(
        [
            pa.field("ids", pa.list_(id_type), nullable=False),
            pa.field("length", pa.int32(), nullable=False),
            pa.field("url", pa.string(), nullable=False),
        ],
        metadata={"description": "Token ids of one document each, EOS appended; url links to the document.",
                  **(metadata or {})},
    )


def token_batch(schema: pa.Schema, ids: Sequence[np.ndarray], urls: Sequence[str]) -> pa.RecordBatch:
    """A record batch of ``schema`` from per-document id arrays (EOS already appended) and URLs."""
    lengths = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    dtype = np.uint16 if schema.field("ids").type.value_type == pa.uint16() else np.uint32
    values = np.concatenate(ids).astype(dtype, copy=False) if len(ids) else np.empty(0, dtype)
    columns = [pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)), pa.array(lengths),
               pa.array(urls, type=pa.string())]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
