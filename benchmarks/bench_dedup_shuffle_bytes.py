"""Benchmark: bytes per element of what text dedup shuffles, as Beam encodes it (its pickle-based fallback coder).

Claims `(key, (claim, count))` go to the ownership combiner and owners `(page, payload)` back to the pages. Until
2026-11-26 a claim was the tuple `(md5(URL), URL, occurrence)` and owners went back keyed by the raw URL; now a
claim is one integer and owners go back by the URL's md5 (`dedup.make_claim`, `dedup.page_id`). Both forms are
encoded here for the claims of the same pages (both modes' claims; `bench_dedup_scale.py`'s replicated real pages).

    python benchmarks/bench_dedup_shuffle_bytes.py [--pages 10000]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from apache_beam.coders import registry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dedup_scale import scale_page  # noqa: E402

from c4prep.pipelines import dedup  # noqa: E402
from c4prep.pipelines.c4_rules import md5_digest  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10_000)
    args = parser.parse_args()
    coder = registry.get_coder(object)
    totals = dict.fromkeys(["claims, URL tuple", "claims, one int", "owners by URL", "owners by md5"], 0)
    count = 0
    for page in map(scale_page, range(args.pages)):
        for key, claim in [*dedup.line_claims(page), *dedup.sentence_claims(page)]:
            occurrence = dedup.claim_occurrence(claim)
            totals["claims, URL tuple"] += len(coder.encode((key, ((md5_digest(page.url), page.url, occurrence), 1))))
            totals["claims, one int"] += len(coder.encode((key, (claim, 1))))
            totals["owners by URL"] += len(coder.encode((page.url, occurrence)))
            totals["owners by md5"] += len(coder.encode((dedup.claim_page(claim), occurrence)))
            count += 1
    print(f"{count:,} claims of {args.pages:,} pages, bytes per encoded element:")
    for name, total in totals.items():
        print(f"  {name:18} {total / count:6.1f}")


if __name__ == "__main__":
    main()
