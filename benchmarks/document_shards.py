"""Benchmark helper: plain texts -> a committed folder of document shards (the `c4prep run` output format), so the
vocabulary, tokenize and training stages can run on corpora that are not web crawl (PTB, Yelp reviews)."""
from __future__ import annotations

from pathlib import Path

from c4prep.manifest import build_manifest, commit_output, new_staging_uri
from c4prep.schemas import DOCUMENT_SCHEMA
from c4prep.shards import batched, join_uri, shard_name, write_shard


def write_document_shards(splits: dict[str, list[str]], output: Path, num_shards: int, url_prefix: str,
                          config: dict) -> int:
    """Write ``{split: texts}`` as ``num_shards`` shards per split with URLs ``<url_prefix>/<split>/<i>``; returns
    the document count."""
    staging = new_staging_uri(str(output))
    infos = []
    for split, texts in splits.items():
        rows = [{"url": f"{url_prefix}/{split}/{i}", "text": text, "timestamp": "", "content_type": "text/plain",
                 "content_length": len(text.encode())} for i, text in enumerate(texts)]
        for index in range(num_shards):
            part = rows[index * len(rows) // num_shards:(index + 1) * len(rows) // num_shards]
            uri = join_uri(staging, shard_name(split, index, num_shards))
            infos.append(write_shard(uri, DOCUMENT_SCHEMA, batched(part, DOCUMENT_SCHEMA)))
    commit_output(str(output), staging, build_manifest(DOCUMENT_SCHEMA, infos, config=config, counters={}))
    return sum(len(texts) for texts in splits.values())
