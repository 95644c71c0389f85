"""The bad-input corpus (`bad_inputs.CASES`): each damaged file loses only its damaged records, and counts them."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import get_args

import pytest
from click.testing import CliRunner

from bad_inputs import CASES, THIS_FILE, Case, Sources, load_sources
from c4prep.cli import main
from c4prep.manifest import read_manifest
from c4prep.pipelines.funnel import READ_NAMESPACE
from c4prep.pipelines.readers import ProblemKind, ReadProblem, read_records
from c4prep.pipelines.records import RawRecord

CASES_BY_NAME = {case.name: case for case in CASES}
# Several kinds of damage in every format, read together by one `c4prep run`.
RUN_TOGETHER = [
    "content_length_7_too_large",
    "two_corrupt_members_in_a_row",
    "header_value_cut_and_glued_to_the_next_record",
    "garbage_between_records",
    "invalid_utf8_in_url",
    "warc_named_wet",
    "uncompressed_wet_named_gz",
    "zero_length_file",
    "unknown_extension",
    "jsonl_with_bom",
    "jsonl_bad_lines",
    "jsonl_gz_members_split_mid_line",
    "text_binary",
]


@pytest.fixture(scope="module")
def sources(shared_data: Path) -> Sources:
    return load_sources(shared_data)


@pytest.fixture(scope="module")
def bad_input_corpus(sources: Sources, tmp_path_factory) -> dict[str, Path]:
    """Every damaged file of the corpus, by case name."""
    folder = tmp_path_factory.mktemp("bad-inputs")
    paths = {}
    for case in CASES:
        paths[case.name] = folder / f"{case.name}{case.extension}"
        paths[case.name].write_bytes(case.build(sources))
    return paths


def expected_urls(case: Case, sources: Sources, path: Path) -> list[str]:
    return [f"file://{path}" if url == THIS_FILE else url for url in case.survivors(sources)]


def test_the_corpus_has_every_kind_of_content_problem():
    counted = {kind for case in CASES for kind in case.problems}
    assert counted <= set(get_args(ProblemKind))
    assert counted == set(get_args(ProblemKind)) - {"missing_file", "unreadable_file"}  # those two are not content
    assert len({case.name for case in CASES}) == len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_only_the_damaged_records_are_lost_and_each_is_counted(case: Case, sources, bad_input_corpus):
    path = bad_input_corpus[case.name]
    items = list(read_records(str(path), open_binary=lambda name: open(name, "rb"), modified_time=os.path.getmtime))
    records = [item for item in items if isinstance(item, RawRecord)]
    problems = [item for item in items if isinstance(item, ReadProblem)]
    assert dict(Counter(problem.kind for problem in problems)) == case.problems, [p.message for p in problems]
    assert [record.url for record in records] == expected_urls(case, sources, path)
    for record in records:  # a surviving record is the intact one, not a damaged copy
        assert record.body == sources.bodies[THIS_FILE if record.url == f"file://{path}" else record.url]
    assert all(str(path) in problem.message for problem in problems)


def test_one_run_over_many_damaged_files_counts_every_problem(sources, bad_input_corpus, tmp_path):
    cases = [CASES_BY_NAME[name] for name in RUN_TOGETHER]
    inputs = [argument for case in cases for argument in ("--input", str(bad_input_corpus[case.name]))]
    output = tmp_path / "out"
    outcome = CliRunner().invoke(main, ["run", *inputs, "--output", str(output), "--dedup", "none"])
    assert outcome.exit_code == 0, outcome.output
    assert outcome.exception is None and "Traceback" not in outcome.output
    counters = read_manifest(str(output)).counters[READ_NAMESPACE]
    problems = {name.removeprefix("problem:"): count for name, count in counters.items() if name.startswith("problem:")}
    assert problems == dict(sum((Counter(case.problems) for case in cases), Counter()))
    assert counters["files"] == len(cases)
    survivors = sum(len(expected_urls(case, sources, bad_input_corpus[case.name])) for case in cases)
    assert counters["records"] == survivors
