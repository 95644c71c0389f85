"""Dedup claims packed into numpy blocks, so that a shuffle carries a few large elements instead of one per key.

A block holds rows of `(key, claim, claims)`: a dedup key (16-byte md5), a claim on it (`dedup.Claim`: the claiming
page's md5 and the key's first occurrence in that page) and how many claims the row stands for. The 16-byte digests
are split into two uint64 read big-endian, so numpy orders them as the bytes (and a claim as `dedup.smaller_claim`
does). Keys are spread over buckets by their first 8 bytes; `smallest_claims` keeps one row per key, the smallest
claim with the counts summed, in any grouping and order of blocks (associative and commutative, like
`dedup.smaller_claim`).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from .dedup import Key, PageId

CLAIM_BLOCK = np.dtype([("key_hi", np.uint64), ("key_lo", np.uint64), ("page_hi", np.uint64),
                        ("page_lo", np.uint64), ("occurrence", np.uint32), ("claims", np.uint64)])
_DIGEST_HALVES = np.dtype(">u8")  # a 16-byte digest as two big-endian uint64


def claims_block(pages: Sequence[PageId], claims_per_page: Sequence[int], keys: Sequence[Key],
                 occurrences: Sequence[int]) -> np.ndarray:
    """The block of several pages' claims, one row each (a count of 1): page `i` claims the next
    `claims_per_page[i]` keys of `keys`, each at its occurrence in `occurrences`."""
    block = np.empty(len(keys), dtype=CLAIM_BLOCK)
    if not keys:
        return block
    key_halves = np.frombuffer(b"".join(keys), dtype=_DIGEST_HALVES).reshape(-1, 2)
    page_halves = np.frombuffer(b"".join(pages), dtype=_DIGEST_HALVES).reshape(-1, 2)
    page_halves = np.repeat(page_halves, np.asarray(claims_per_page, dtype=np.int64), axis=0)
    block["key_hi"], block["key_lo"] = key_halves[:, 0], key_halves[:, 1]
    block["page_hi"], block["page_lo"] = page_halves[:, 0], page_halves[:, 1]
    block["occurrence"] = occurrences
    block["claims"] = 1
    return block


def by_bucket(block: np.ndarray, buckets: int) -> Iterator[tuple[int, np.ndarray]]:
    """`(bucket, rows of the block in it)` for each bucket with rows; a key's bucket is its first 8 bytes modulo
    `buckets`."""
    bucket = block["key_hi"] % np.uint64(buckets)
    order = np.argsort(bucket, kind="stable")
    sorted_buckets = bucket[order]
    starts = np.flatnonzero(np.r_[True, sorted_buckets[1:] != sorted_buckets[:-1]])
    for start, end in zip(starts, [*starts[1:], len(order)]):
        yield int(sorted_buckets[start]), block[order[start:end]]


def smallest_claims(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """One row per key of `blocks`: its smallest claim (page md5, then occurrence), with the claims of all its rows
    summed; rows in key order."""
    rows = np.concatenate(blocks) if len(blocks) != 1 else blocks[0]
    if len(rows) == 0:
        return rows
    rows = rows[np.lexsort((rows["occurrence"], rows["page_lo"], rows["page_hi"], rows["key_lo"], rows["key_hi"]))]
    first = np.r_[True, (rows["key_hi"][1:] != rows["key_hi"][:-1]) | (rows["key_lo"][1:] != rows["key_lo"][:-1])]
    starts = np.flatnonzero(first)
    winners = rows[starts]
    winners["claims"] = np.add.reduceat(rows["claims"], starts)
    return winners


def _digests(high: np.ndarray, low: np.ndarray) -> list[bytes]:
    raw = np.stack([high, low], axis=1).astype(_DIGEST_HALVES).tobytes()
    return [raw[start:start + 16] for start in range(0, len(raw), 16)]


def owners(block: np.ndarray) -> Iterator[tuple[PageId, Key, int]]:
    """`(owner page id, key, occurrence)` of each row of a block of winning claims."""
    return zip(_digests(block["page_hi"], block["page_lo"]), _digests(block["key_hi"], block["key_lo"]),
               block["occurrence"].tolist())
