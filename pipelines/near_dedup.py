"""MinHash near-duplicate document removal (`--near-dedup`): an extra stage beyond C4, as plain functions.

C4 itself only removes exact duplicate lines; web crawls are full of pages that are *almost* the same (mirrors,
syndicated articles, templated pages with one changed sentence). This stage removes them with the usual recipe
(datatrove, NeMo Curator, the GPT-3/Gopher/FineWeb lineage), built on `datasketch`:

1. Shingles: word 5-grams of the lowercased, whitespace-normalised text (`shingles`).
2. Signature: a `num_perm`-value MinHash of the shingle set (`minhash`); the fraction of equal values between two
   signatures estimates the Jaccard similarity of the shingle sets (`estimated_jaccard`).
3. LSH banding: the signature is cut into `bands` bands of `rows` values; documents sharing any band key
   (`band_keys`) are *candidate pairs*.
4. Verification: a candidate pair is a near duplicate only if its estimated Jaccard is >= `threshold`. Banding is
   tuned for recall (see `default_band_params`), so verification is what removes LSH false positives.
5. Survivors: connected components over verified pairs; each component keeps its smallest `doc_key` and every
   other member is dropped (`survivor_labels`).

Survivor rule and why. Documents are totally ordered by `doc_key = (md5_hex(url), url)`, which is unrelated to
input order, worker count or runner, so the kept document never depends on how the job ran (datatrove's Rust
cluster stage keeps an arbitrary member, datatrove #106). Connected components are the usual definition of a
near-duplicate cluster (datatrove's union-find, NeMo's cuGraph WCC): after dedup no two kept documents are joined
by a chain of verified near-duplicate pairs. The price is transitivity: in a chain A~B~C where A and C are not
similar, only A survives. In Beam the components need iterations; they are computed by synchronous min-label
propagation (every node takes the smallest label among itself and its neighbours, round after round), which this
module also runs in memory, with the same rounds, so that `near_dedup_reference` and the Beam transform agree
exactly, counters included. Rounds needed grow with the longest shortest path from a component's smallest member;
`max_rounds` caps them and a run that has not converged by then fails with `NearDedupNotConvergedError` rather
than silently keeping duplicates.

Huge buckets: a band shared by thousands of documents (templated pages) would give millions of pairs. A bucket
with more than `max_bucket_size` members only pairs each member with the bucket's smallest `doc_key` (linear,
and enough to link exact copies into one component); smaller buckets pair every two members. The rule is the
same in memory and in Beam; `oversized-buckets` counts where it applied.

Empty texts have no shingles, no band keys and are never near duplicates of anything.
"""
from __future__ import annotations

import functools
import hashlib
import struct
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence

import numpy as np

if TYPE_CHECKING:  # datasketch is imported where it is used: with SciPy it takes 0.17 s, which runs without
    from datasketch import LeanMinHash, MinHash  # --near-dedup would pay at every process's start

from .c4_rules import md5_hex
from .records import Page

NAMESPACE = "near-dedup"
# Every counter the stage reports (reference and Beam), in a fixed order; absent Beam counters read as 0.
COUNTERS = (
    "passed",
    "filtered:near_duplicate",
    "clusters",
    "candidate-pairs",
    "verified-pairs",
    "oversized-buckets",
    "propagation-rounds",
)

# datasketch 2.x's default permutation scheme, pinned so signatures never change under a library default change.
MINHASH_SCHEME = "affine32"
# Weights handed to datasketch's `_optimal_param` when bands/rows are not given: recall first. Every candidate
# pair is verified against the full signature, so a false-positive candidate costs one comparison of `num_perm`
# integers, while a false-negative candidate is a duplicate that stays in the corpus. With 128 permutations and
# threshold 0.8 this gives 16 bands x 8 rows: P(candidate) = 0.95 at Jaccard 0.8, 0.994 at 0.85, 0.06 at 0.5. The
# balanced weights (0.5, 0.5) of `MinHashLSH` give 9 x 13 there, which makes a pair at Jaccard 0.8 a candidate
# with probability 0.40 only (0.69 at 0.85): too low for a dedup stage.
FALSE_POSITIVE_WEIGHT = 0.05
FALSE_NEGATIVE_WEIGHT = 0.95

DocKey = tuple[str, str]  # (md5_hex(url), url): total order of documents, independent of input order


class NearDedupNotConvergedError(RuntimeError):
    """Label propagation still changed labels in its last allowed round."""


@dataclass(frozen=True)
class NearDedupConfig:
    """Parameters of the near-dedup stage: a corpus variant's `near_dedup_params`, whose loading checks their types
    (`variants.load_variant`); construction checks their values. Defaults and why:

    - `ngram=5`: word 5-grams (on lowercased, whitespace-normalised text) are the common choice for web-document
      near-dedup (datatrove, FineWeb, Gopher); shorter n-grams make unrelated pages on one topic look alike,
      longer ones make a single edited word remove too many shingles.
    - `num_perm=128`: standard error of the Jaccard estimate is sqrt(J(1-J)/128) = 0.035 at J = 0.8, at 512 bytes
      per signature.
    - `threshold=0.8`: estimated Jaccard of the 5-gram sets at or above which two documents are near duplicates
      (the value most pipelines use; ~0.75-0.85 across peers).
    - `bands`/`rows`: LSH banding; both None = `default_band_params(threshold, num_perm)` (recall-weighted
      datasketch optimum, 16 x 8 at the defaults), or both given with bands * rows <= num_perm.
    - `seed=1`: seed of the MinHash permutations (datasketch's default). Signatures are only comparable under the
      same seed, num_perm and scheme.
    - `max_bucket_size=100`: above this many members a bucket pairs each member with its smallest doc only
      (instead of all pairs, 4,950 at 100 members).
    - `max_rounds=16`: cap on label-propagation rounds (each is one shuffle of the near-duplicate graph in Beam);
      the last round must change nothing, else `NearDedupNotConvergedError`.
    """

    ngram: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    bands: int | None = None
    rows: int | None = None
    seed: int = 1
    max_bucket_size: int = 100
    max_rounds: int = 16

    def __post_init__(self) -> None:
        if self.ngram < 1:
            raise ValueError(f"ngram must be an integer >= 1, got {self.ngram!r}")
        if not 1 <= self.num_perm <= 65_536:
            raise ValueError(f"num_perm must be an integer in [1, 65536], got {self.num_perm!r}")
        if not 0.0 < self.threshold <= 1.0:  # NaN included
            raise ValueError(f"threshold must be a number in (0, 1], got {self.threshold!r}")
        if (self.bands is None) != (self.rows is None):
            raise ValueError(f"give both bands and rows or neither, got bands={self.bands!r} rows={self.rows!r}")
        if self.bands is not None:
            if self.bands < 1 or self.rows < 1:
                raise ValueError(f"bands and rows must be integers >= 1, got bands={self.bands!r} rows={self.rows!r}")
            if self.bands * self.rows > self.num_perm:
                raise ValueError(
                    f"bands * rows must be <= num_perm: {self.bands} * {self.rows} > {self.num_perm}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be an integer in [0, 2**32), got {self.seed!r}")
        if self.max_bucket_size < 2:
            raise ValueError(f"max_bucket_size must be an integer >= 2, got {self.max_bucket_size!r}")
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be an integer >= 1, got {self.max_rounds!r}")

    @property
    def band_params(self) -> tuple[int, int]:
        """(bands, rows) in effect."""
        if self.bands is not None:
            return self.bands, self.rows
        return default_band_params(self.threshold, self.num_perm)


@functools.lru_cache(maxsize=None)
def default_band_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) minimising the recall-weighted LSH error for `threshold` (datasketch's own routine)."""
    from datasketch.lsh import _optimal_param

    bands, rows = _optimal_param(threshold, num_perm, FALSE_POSITIVE_WEIGHT, FALSE_NEGATIVE_WEIGHT)
    return int(bands), int(rows)


def candidate_probability(similarity: float, bands: int, rows: int) -> float:
    """Probability that two documents of Jaccard `similarity` share at least one band key."""
    return 1.0 - (1.0 - similarity**rows) ** bands


# --------------------------------------------------------------------------------------------------- signatures


def shingles(text: str, ngram: int) -> set[bytes]:
    """Word `ngram`-grams of the lowercased text, words split on any whitespace, joined by one space (UTF-8).

    A text with fewer than `ngram` words is one shingle (all its words); an empty text has none.
    """
    words = text.lower().split()
    if len(words) <= ngram:
        return {" ".join(words).encode("utf-8")} if words else set()
    return {" ".join(words[i:i + ngram]).encode("utf-8") for i in range(len(words) - ngram + 1)}


@functools.lru_cache(maxsize=8)
def _permutations(num_perm: int, seed: int) -> np.ndarray:
    # Built once per process: datasketch draws them from a seeded RandomState on every MinHash otherwise.
    from datasketch import MinHash

    permutations = MinHash(num_perm=num_perm, seed=seed, scheme=MINHASH_SCHEME).permutations
    permutations.setflags(write=False)
    return permutations


def minhash(text: str, config: NearDedupConfig) -> LeanMinHash:
    """MinHash signature of the text's shingle set (datasketch, SHA-1 32-bit shingle hash, `affine32` scheme)."""
    from datasketch import LeanMinHash, MinHash

    sketch = MinHash(num_perm=config.num_perm, seed=config.seed, scheme=MINHASH_SCHEME,
                     permutations=_permutations(config.num_perm, config.seed))
    sketch.update_batch(shingles(text, config.ngram))
    return LeanMinHash(sketch)


def signature(sketch: MinHash) -> bytes:
    """The compact wire form of a signature: its hash values as little-endian uint32 (4 * num_perm bytes)."""
    return np.asarray(sketch.hashvalues, dtype="<u4").tobytes()


def from_signature(data: bytes, config: NearDedupConfig) -> LeanMinHash:
    """The MinHash a `signature` came from."""
    from datasketch import LeanMinHash

    return LeanMinHash(seed=config.seed, hashvalues=np.frombuffer(data, dtype="<u4"), scheme=MINHASH_SCHEME)


def estimated_jaccard(a: MinHash, b: MinHash) -> float:
    """Fraction of equal signature values: datasketch's unbiased estimate of the shingle sets' Jaccard."""
    return a.jaccard(b)


def signature_jaccard(a: bytes, b: bytes) -> float:
    """`estimated_jaccard` on two `signature`s, without building MinHash objects (same formula, same float)."""
    x = np.frombuffer(a, dtype="<u4")
    y = np.frombuffer(b, dtype="<u4")
    if len(x) != len(y):
        raise ValueError(f"signatures of different lengths: {len(x)} and {len(y)}")
    return float(np.count_nonzero(x == y)) / float(len(x))


def band_keys(sketch: MinHash, config: NearDedupConfig) -> list[bytes]:
    """One 12-byte key per band: the band index (4 bytes, big-endian) + blake2b-64 of the band's hash values.

    An empty signature (text without shingles) has no keys. Two documents share a key only if the same band of
    their signatures is equal (up to a 2**-64 digest collision, which verification would catch anyway).
    """
    if sketch.is_empty():
        return []
    bands, rows = config.band_params
    values = np.asarray(sketch.hashvalues, dtype="<u4")
    keys = []
    for band in range(bands):
        digest = hashlib.blake2b(values[band * rows:(band + 1) * rows].tobytes(), digest_size=8).digest()
        keys.append(struct.pack(">I", band) + digest)
    return keys


def doc_key(page: Page) -> DocKey:
    """The order that decides which document of a cluster survives (smallest wins)."""
    return (md5_hex(page.url), page.url)


# ------------------------------------------------------------------------------------------ pairs and clusters


class BucketPairs(NamedTuple):
    """What one LSH bucket yields: candidate pairs (smaller key first) with their verification, and whether the
    bucket was over `max_bucket_size` (pairs with its smallest member only)."""

    pairs: list[tuple[tuple[DocKey, DocKey], bool]]
    oversized: bool


def bucket_pairs(members: Iterable[tuple[DocKey, bytes]], config: NearDedupConfig) -> BucketPairs:
    """Candidate pairs of one bucket of (doc_key, signature) members, each verified against the threshold.

    Up to `max_bucket_size` members: every two members; above: each member with the smallest one. The result
    depends only on the set of members, never on their order.
    """
    members = sorted(members)
    oversized = len(members) > config.max_bucket_size
    if oversized:
        candidates = ((members[0], other) for other in members[1:])
    else:
        candidates = combinations(members, 2)
    pairs = [
        ((a_key, b_key), signature_jaccard(a_sig, b_sig) >= config.threshold)
        for (a_key, a_sig), (b_key, b_sig) in candidates
        if a_key != b_key
    ]
    return BucketPairs(pairs, oversized)


class NodeState(NamedTuple):
    """A document in the near-duplicate graph during label propagation."""

    label: DocKey  # smallest doc_key seen so far in its component
    neighbours: tuple[DocKey, ...]  # documents it has a verified near-duplicate pair with (sorted)
    last_changed: int  # round in which `label` last decreased (0 = initial)


def initial_state(node: DocKey, neighbours: Iterable[DocKey]) -> NodeState:
    return NodeState(node, tuple(sorted(set(neighbours))), 0)


def outgoing_label(state: NodeState, round_index: int) -> DocKey | None:
    """The label a node sends its neighbours in `round_index` (1-based): only when it changed in the previous
    round, since neighbours already took every older value into account."""
    return state.label if state.last_changed == round_index - 1 else None


def propagate(state: NodeState, incoming: Iterable[DocKey], round_index: int) -> NodeState:
    """One synchronous min-label step of one node."""
    best = min(incoming, default=state.label)
    if best < state.label:
        return NodeState(best, state.neighbours, round_index)
    return state


def check_converged(rounds: int, max_rounds: int) -> None:
    """Fail when the last allowed round still changed a label (the components may be incomplete)."""
    if rounds >= max_rounds:
        raise NearDedupNotConvergedError(
            f"near-dedup label propagation still changed labels in round {rounds} of max_rounds={max_rounds}: "
            "some chain of near-duplicate documents is too long for the cap; raise NearDedupConfig.max_rounds")


def survivor_labels(edges: Iterable[tuple[DocKey, DocKey]], max_rounds: int) -> tuple[dict[DocKey, DocKey], int]:
    """Component label (smallest doc_key) of every document with a verified pair, and the rounds that changed a
    label, by the same synchronous min-label propagation the Beam transform runs."""
    adjacency: dict[DocKey, set[DocKey]] = defaultdict(set)
    for a, b in edges:
        adjacency[a].add(b)
        adjacency[b].add(a)
    states = {node: initial_state(node, neighbours) for node, neighbours in adjacency.items()}
    rounds = 0
    for round_index in range(1, max_rounds + 1):
        incoming: dict[DocKey, list[DocKey]] = defaultdict(list)
        for state in states.values():
            label = outgoing_label(state, round_index)
            if label is not None:
                for neighbour in state.neighbours:
                    incoming[neighbour].append(label)
        changed = False
        for node, labels in incoming.items():
            new_state = propagate(states[node], labels, round_index)
            if new_state is not states[node]:
                states[node] = new_state
                changed = True
        if not changed:
            break
        rounds = round_index
    check_converged(rounds, max_rounds)
    return {node: state.label for node, state in states.items()}, rounds


# ------------------------------------------------------------------------------------------------- reference


class NearDuplicates(NamedTuple):
    """Outcome of near-dedup on a set of pages: component label of each clustered document, and counters."""

    labels: dict[DocKey, DocKey]
    counters: dict[str, int]

    def is_dropped(self, key: DocKey) -> bool:
        return self.labels.get(key, key) != key


def _keyed_pages(pages: Iterable[Page]) -> dict[DocKey, Page]:
    keyed: dict[DocKey, Page] = {}
    for page in pages:
        key = doc_key(page)
        if key in keyed:
            raise ValueError(f"near-dedup needs unique URLs (run URL dedup first); seen twice: {page.url!r}")
        keyed[key] = page
    return keyed


def find_near_duplicates(pages: Sequence[Page] | Iterable[Page], config: NearDedupConfig) -> NearDuplicates:
    """In-memory near-dedup decision: the Beam transform's shuffles as dictionaries."""
    keyed = _keyed_pages(pages)
    buckets: dict[bytes, list[tuple[DocKey, bytes]]] = defaultdict(list)
    for key, page in keyed.items():
        sketch = minhash(page.text, config)
        wire = signature(sketch)
        for band_key in band_keys(sketch, config):
            buckets[band_key].append((key, wire))
    candidates: dict[tuple[DocKey, DocKey], bool] = {}
    oversized = 0
    for members in buckets.values():
        if len(members) < 2:
            continue
        result = bucket_pairs(members, config)
        oversized += result.oversized
        candidates.update(result.pairs)
    edges = [pair for pair, verified in candidates.items() if verified]
    labels, rounds = survivor_labels(edges, config.max_rounds)
    clusters = sum(1 for node, label in labels.items() if node == label)
    dropped = len(labels) - clusters
    counters = {
        "passed": len(keyed) - dropped,
        "filtered:near_duplicate": dropped,
        "clusters": clusters,
        "candidate-pairs": len(candidates),
        "verified-pairs": len(edges),
        "oversized-buckets": oversized,
        "propagation-rounds": rounds,
    }
    return NearDuplicates(labels, counters)


def near_dedup_reference(pages: Iterable[Page], config: NearDedupConfig = NearDedupConfig()
                         ) -> tuple[list[Page], dict[str, int]]:
    """Kept pages (sorted by doc_key, whatever the input order) and the stage's counters."""
    pages = list(pages)
    found = find_near_duplicates(pages, config)
    kept = sorted((page for page in pages if not found.is_dropped(doc_key(page))), key=doc_key)
    return kept, found.counters
