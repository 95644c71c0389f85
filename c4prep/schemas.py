"""Arrow schemas of the data c4prep writes."""
import pyarrow as pa

DOCUMENT_SCHEMA = pa.schema(
    [
        pa.field("url", pa.string(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("timestamp", pa.string(), nullable=False),
        pa.field("content_type", pa.string(), nullable=False),
        pa.field("content_length", pa.int64(), nullable=False),
    ],
    metadata={"description": "C4-style documents: raw URL, cleaned text, WARC-Date, WET content type and length."},
)
