"""The funnel report: pages and lines in, dropped per rule, out, built from the pipeline's counters."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from c4prep.beam_runs import INTEGRITY_NAMESPACE
from c4prep.manifest import Counters
from c4prep.progress import format_elapsed


READ_NAMESPACE = "read-input"
WRITE_NAMESPACE = "write-shards"

# Page stages in pipeline order: (counter namespace, what the stage checks). Stages a run did not include have
# no counters and are left out of the report.
PAGE_STAGES = (
    ("split-wet-file", "record validation (url, content, timestamp)"),
    ("too-long-filter", "page length <= 190,000 chars"),
    ("realnews-domain-filter", "RealNews domains"),
    ("duplicate-url-filter", "URL dedup (newest timestamp wins)"),
    ("webtextlike-filter", "URL in the WebText URL lists"),
    ("clean-page", "C4 line and page heuristics"),
    ("dedupe-sentences", "three-sentence-span dedup (T5 paper)"),
    ("dedupe-lines", "line dedup (released C4)"),
    ("english-filter", "langdetect English >= 0.99"),
    ("badwords-filter", "bad-words list"),
    ("near-dedup", "MinHash near-duplicate removal"),
)


def is_page_drop(name: str) -> bool:
    """Counters that count dropped pages (not lines, not per-language detail)."""
    return (name == "filtered" or name.startswith("filtered:")) and not name.startswith("filtered:ignored_language-")


@dataclass
class FunnelStage:
    namespace: str
    description: str
    pages_in: int
    pages_out: int
    dropped: dict[str, int]


@dataclass
class Funnel:
    """Where every page and line went. `reconciled` is True when nothing went missing: `losses` is empty (pages
    passed by one stage = pages the next got, pages in = pages out + pages dropped, every integrity check equal)."""

    input_files: int
    input_problems: dict[str, int]
    pages_in: int
    pages_out: int
    pages_out_by_split: dict[str, int]
    stages: list[FunnelStage]
    lines: dict[str, int] = field(default_factory=dict)
    losses: list[str] = field(default_factory=list)

    @property
    def reconciled(self) -> bool:
        return not self.losses

    def to_dict(self) -> dict:
        return {**asdict(self), "reconciled": self.reconciled}


def build_funnel(counters: Counters) -> Funnel:
    """Assemble the funnel from counters and check that every page is accounted for."""
    stages = []
    for namespace, description in PAGE_STAGES:
        values = counters.get(namespace)
        if not values:
            continue
        dropped = {name: n for name, n in sorted(values.items()) if is_page_drop(name)}
        passed = values.get("passed", 0)
        stages.append(FunnelStage(namespace, description, passed + sum(dropped.values()), passed, dropped))
    written = counters.get(WRITE_NAMESPACE, {})
    by_split = {name.split(":", 1)[1]: n for name, n in sorted(written.items()) if name.startswith("examples:")}
    read = counters.get(READ_NAMESPACE, {})
    pages_in, pages_out = stages[0].pages_in if stages else 0, sum(by_split.values())
    return Funnel(
        input_files=read.get("files", 0),
        input_problems={name.split(":", 1)[1]: n for name, n in sorted(read.items()) if name.startswith("problem:")},
        pages_in=pages_in,
        pages_out=pages_out,
        pages_out_by_split=by_split,
        stages=stages,
        lines=_line_funnel(counters.get("clean-page", {}), written),
        losses=page_losses(stages, pages_in, pages_out) + integrity_errors(counters),
    )


def page_losses(stages: list[FunnelStage], pages_in: int, pages_out: int) -> list[str]:
    """One message per place where the page counts do not add up."""
    losses = [f"pages: {before.namespace} passed {before.pages_out:,}, {after.namespace} got {after.pages_in:,}"
              for before, after in zip(stages, stages[1:]) if before.pages_out != after.pages_in]
    dropped = sum(sum(stage.dropped.values()) for stage in stages)
    if pages_in != pages_out + dropped:
        losses.append(f"pages: {pages_in:,} in, but {pages_out:,} written + {dropped:,} dropped")
    return losses


def integrity_errors(counters: Counters) -> list[str]:
    """One message per `<check>:sent` / `<check>:received` pair of `INTEGRITY_NAMESPACE` that differs."""
    values = counters.get(INTEGRITY_NAMESPACE, {})
    errors = []
    for check in sorted({name.rsplit(":", 1)[0] for name in values}):
        sent, received = values.get(f"{check}:sent", 0), values.get(f"{check}:received", 0)
        if sent != received:
            errors.append(f"{check}: {sent:,} sent, {received:,} received")
    return errors


def _line_funnel(clean_counters: dict[str, int], written: dict[str, int]) -> dict[str, int]:
    if "line-in" not in clean_counters:
        return {}
    lines = {"in (at cleaning)": clean_counters["line-in"]}
    for name, n in sorted(clean_counters.items()):
        if name.startswith("line-filtered:"):
            lines[f"dropped: {name.split(':', 1)[1]}"] = n
    kept_by_cleaning = clean_counters.get("line-passed", 0)
    lines_out = written.get("lines", 0)
    lines["dropped after cleaning: by text dedup, or with a later-removed page"] = kept_by_cleaning - lines_out
    lines["out"] = lines_out
    return lines


def format_funnel(funnel: Funnel) -> str:
    """The funnel as a plain-text table for the terminal."""
    rows = [("input files", funnel.input_files)]
    rows += [(f"  input problem: {kind} (skipped)", n) for kind, n in funnel.input_problems.items()]
    rows.append(("pages in", funnel.pages_in))
    for stage in funnel.stages:
        rows.append((f"  {stage.namespace}: {stage.description}", -sum(stage.dropped.values())))
        rows += [(f"      {name}", -n) for name, n in stage.dropped.items()]
    rows.append(("pages out", funnel.pages_out))
    rows += [(f"  {split}", n) for split, n in funnel.pages_out_by_split.items()]
    if funnel.lines:
        rows.append(("lines", None))
        rows += [(f"  {name}", n) for name, n in funnel.lines.items()]
    width = max(len(label) for label, _ in rows)
    text = "\n".join(f"{label:<{width}}  {'' if n is None else f'{n:>10,}'}" for label, n in rows)
    status = "reconciled" if funnel.reconciled else "NOT RECONCILED: counters do not add up"
    losses = "".join(f"\n  missing: {loss}" for loss in funnel.losses)
    return f"{text}\npages in = pages out + dropped: {status}{losses}"


def input_problem_counts(funnel: Funnel) -> str:
    """The input problems by kind, e.g. "2 corrupt_gzip, 1 format_mismatch"; "" when there was none."""
    return ", ".join(f"{count:,} {kind}" for kind, count in funnel.input_problems.items())


def input_files_text(funnel: Funnel) -> str:
    """"1 input file", "2 input files", ..."""
    return f"{funnel.input_files:,} input file{'' if funnel.input_files == 1 else 's'}"


def format_input_problems(funnel: Funnel) -> str:
    """One line on the input a run skipped as damaged or unreadable, by kind; "" when there was none."""
    if not funnel.input_problems:
        return ""
    return (f"skipped bad input ({input_problem_counts(funnel)}) among {input_files_text(funnel)}; each is "
            "logged above and counted under 'read-input' in the manifest")


def _stage_drops(funnel: Funnel) -> dict[str, int]:
    """Pages dropped so far by each page stage that has counters, in pipeline order."""
    return {stage.namespace: sum(stage.dropped.values()) for stage in funnel.stages}


def _kept(funnel: Funnel, pages_read: int, done: bool) -> int:
    return funnel.pages_out if done else pages_read - sum(_stage_drops(funnel).values())


def format_progress(counters: Counters, elapsed_s: float, done: bool = False) -> str:
    """One progress line of a C4 run from its counters so far: pages read, kept so far (read and not dropped yet; at
    the end, written), the read rate and what each stage reached so far dropped, e.g. ``progress 0:01:05: 12,345
    pages read from 3 files (189.9 pages/s), 4,321 kept so far; dropped: too-long-filter 2, clean-page 7,002``.
    ``done``: the run's final line ("done in ...", from its final counters)."""
    if not counters:
        return f"progress {format_elapsed(elapsed_s)}: running, no counters reported yet"
    funnel = build_funnel(counters)
    pages, files = counters.get(READ_NAMESPACE, {}).get("records", 0), funnel.input_files
    rate = pages / elapsed_s if elapsed_s > 0 else 0.0
    line = (f"{'done in' if done else 'progress'} {format_elapsed(elapsed_s)}: {pages:,} pages read from {files:,} "
            f"file{'' if files == 1 else 's'} ({rate:,.1f} pages/s), {_kept(funnel, pages, done):,} kept"
            f"{'' if done else ' so far'}")
    drops = ", ".join(f"{namespace} {count:,}" for namespace, count in _stage_drops(funnel).items())
    return f"{line}; dropped: {drops}" if drops else line
