"""Agreement between two C4 page-cleaning implementations, and the cause of each disagreement.

Pure functions over decisions already taken, so they know neither implementation: `bench_datatrove_peer.py` runs
c4prep's rules and datatrove's filters and hands the verdicts here. "Ours" is the C4 reference behaviour; "peer" is
the implementation under comparison.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from c4prep.pipelines.c4_rules import END_MARKS, MIN_NUM_SENTENCES, MIN_WORDS_PER_LINE

KEPT = "kept"


@dataclass(frozen=True)
class Verdict:
    """One implementation's decision on one page: `reason` is `kept` or the rule that dropped the page.

    `lines` are the lines the line rules keep with the sentence minimum switched off (None when a page rule such as
    lorem ipsum or the curly bracket dropped the page) and `sentences` their sentence count by that side's splitter;
    they explain the decision. `text` is the cleaned text of a kept page.
    """

    reason: str
    text: str | None
    lines: tuple[str, ...] | None
    sentences: int

    @property
    def kept(self) -> bool:
        return self.reason == KEPT


def line_multiset_difference(ours: Sequence[str], peer: Sequence[str]) -> tuple[Counter[str], Counter[str]]:
    """Lines (with multiplicity) only ours keeps, and lines only the peer keeps."""
    ours_count, peer_count = Counter(ours), Counter(peer)
    return ours_count - peer_count, peer_count - ours_count


def peer_only_line_cause(line: str, peer_min_words: int) -> str:
    """Why the peer keeps a line C4's rules drop (line as cleaned: stripped, citations removed)."""
    if not line.endswith(END_MARKS) and line.endswith("'"):
        return "end mark ' accepted (C4 accepts only . ? ! \")"
    words = len(line.split())
    if words < MIN_WORDS_PER_LINE:
        if words >= peer_min_words:
            return f"min_words_per_line {peer_min_words} (C4: {MIN_WORDS_PER_LINE})"
        return "words counted before citation removal"
    return "other line rule"


def disagreement_causes(
    ours: Verdict, peer: Verdict, peer_min_words: int, peer_min_sentences: int
) -> dict[str, str | None]:
    """The causes of a disagreement on one page (different decision, or different text of a page both keep), each
    with a line that shows it (None for page-level causes).

    When the line rules alone keep different lines, each differing line is classified. When the decisions differ,
    the sentence minimum is checked too: the peer's minimum may not be C4's 3, or, over identical lines, the two
    sentence splitters may count on different sides of 3.
    """
    causes: dict[str, str | None] = {}
    if ours.lines != peer.lines:
        if ours.lines is None or peer.lines is None:
            dropper, side = ("c4prep", ours) if ours.lines is None else ("peer", peer)
            return {f"page rule {side.reason} hit a line only {dropper}'s line rules keep": None}
        only_ours, only_peer = line_multiset_difference(ours.lines, peer.lines)
        for line in sorted(only_peer):
            causes.setdefault(peer_only_line_cause(line, peer_min_words), line)
        if only_ours:
            causes["line kept by c4prep only"] = min(only_ours)
    if ours.reason != peer.reason:
        peer_enough_for_c4 = peer.sentences >= MIN_NUM_SENTENCES
        if peer_enough_for_c4 != (peer.sentences >= peer_min_sentences):
            causes[f"min_num_sentences {peer_min_sentences} (C4: {MIN_NUM_SENTENCES})"] = None
        elif ours.lines == peer.lines and (ours.sentences >= MIN_NUM_SENTENCES) != peer_enough_for_c4:
            causes["sentence count: Punkt vs spaCy sentencizer"] = None
    return causes or {"other (same lines and sentence decision)": None}


def page_agreement(ours: Mapping[str, Verdict], peer: Mapping[str, Verdict]) -> dict[str, float | int]:
    """Page-level agreement over the same pages: kept by both / one / neither, and line agreement on pages both keep.

    Lines are compared as multisets per page (both sides keep a subsequence of the same cleaned lines).
    """
    if ours.keys() != peer.keys():
        raise ValueError("both sides must judge the same pages")
    counts = Counter()
    for key, our_verdict in ours.items():
        peer_verdict = peer[key]
        counts[(our_verdict.kept, peer_verdict.kept)] += 1
        if our_verdict.kept and peer_verdict.kept:
            our_lines, peer_lines = our_verdict.text.split("\n"), peer_verdict.text.split("\n")
            only_ours, only_peer = line_multiset_difference(our_lines, peer_lines)
            counts["lines_only_ours"] += sum(only_ours.values())
            counts["lines_only_peer"] += sum(only_peer.values())
            counts["lines_both"] += len(our_lines) - sum(only_ours.values())
            counts["identical_text"] += our_verdict.text == peer_verdict.text
    pages = len(ours)
    both, ours_only, peer_only = counts[(True, True)], counts[(True, False)], counts[(False, True)]
    lines_union = counts["lines_both"] + counts["lines_only_ours"] + counts["lines_only_peer"]
    return {
        "pages": pages,
        "kept_by_both": both,
        "kept_by_ours_only": ours_only,
        "kept_by_peer_only": peer_only,
        "dropped_by_both": counts[(False, False)],
        "kept_by_ours": both + ours_only,
        "kept_by_peer": both + peer_only,
        "decision_agreement": (pages - ours_only - peer_only) / pages if pages else 1.0,
        "kept_jaccard": both / (both + ours_only + peer_only) if both + ours_only + peer_only else 1.0,
        "identical_text_of_kept_by_both": counts["identical_text"] / both if both else 1.0,
        "lines_in_both": counts["lines_both"],
        "lines_only_ours": counts["lines_only_ours"],
        "lines_only_peer": counts["lines_only_peer"],
        "line_jaccard_of_kept_by_both": counts["lines_both"] / lines_union if lines_union else 1.0,
    }


def disagreement_report(
    ours: Mapping[str, Verdict],
    peer: Mapping[str, Verdict],
    peer_min_words: int,
    peer_min_sentences: int,
    examples_per_cause: int = 3,
) -> list[dict]:
    """Every cause of disagreement with its page count (pages can have several causes) and concrete examples.

    Sorted by page count, most frequent first. An example names the page, both decisions and sentence counts, and the
    line that shows the cause (or, for a sentence-count cause, the start of the page's kept lines).
    """
    pages_by_cause: dict[str, list[dict]] = {}
    for key in sorted(ours):
        our_verdict, peer_verdict = ours[key], peer[key]
        if our_verdict.reason == peer_verdict.reason and our_verdict.text == peer_verdict.text:
            continue
        causes = disagreement_causes(our_verdict, peer_verdict, peer_min_words, peer_min_sentences)
        for cause, line in causes.items():
            pages_by_cause.setdefault(cause, []).append(_example(key, our_verdict, peer_verdict, line))
    report = [
        {"cause": cause, "pages": len(examples), "examples": examples[:examples_per_cause]}
        for cause, examples in pages_by_cause.items()
    ]
    return sorted(report, key=lambda entry: (-entry["pages"], entry["cause"]))


def _example(key: str, ours: Verdict, peer: Verdict, line: str | None, max_chars: int = 240) -> dict:
    """One page of a cause: both decisions and sentence counts, and the differing line or else the page's lines."""
    example = {
        "page": key,
        "c4prep": ours.reason,
        "peer": peer.reason,
        "punkt_sentences": ours.sentences,
        "peer_sentences": peer.sentences,
    }
    if line is not None:
        example["line"] = line[:max_chars]
    elif ours.lines is not None:
        example["lines"] = "\n".join(ours.lines)[:max_chars]
    return example


def drop_reasons(verdicts: Mapping[str, Verdict]) -> dict[str, int]:
    """Pages per decision (`kept` or the dropping rule), most frequent first."""
    return dict(Counter(verdict.reason for verdict in verdicts.values()).most_common())
