"""End-to-end runs of the C4 pipeline on the real Common Crawl sample (DirectRunner)."""
import gzip
import hashlib
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from c4prep.beam_runs import INTEGRITY_NAMESPACE, run_to_completion
from c4prep.cli import main
from c4prep.manifest import SplitInfo, read_listed_shard, read_manifest
from c4prep.pipelines import c4_rules
from c4prep.pipelines.funnel import build_funnel, format_funnel, integrity_errors
from c4prep.pipelines.run_c4 import DataLossError, RunConfig, bundled_sample, run_c4
from c4prep.schemas import DOCUMENT_SCHEMA

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"


def read_arrow(path) -> pa.Table:
    """One Arrow shard (an IPC stream), read with plain pyarrow, no c4prep code."""
    with pa.memory_map(str(path)) as source:
        return pa.ipc.open_stream(source).read_all()


def arrow_table(folder: Path) -> pa.Table:
    """All shards of an output, read with plain pyarrow."""
    return pa.concat_tables(read_arrow(path) for path in sorted(folder.glob("data-*/*.arrow")))


def file_digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.glob("data-*/*.arrow"))}


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory, webdata):
    output = tmp_path_factory.mktemp("c4") / "en"
    result = run_c4(RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=4))
    return output, result


def test_bundled_sample_is_the_real_wet_sample(webdata):
    assert Path(bundled_sample()).read_bytes() == (webdata / SAMPLE_NAME).read_bytes()


def test_shards_manifest_and_schema(sample_run):
    output, result = sample_run
    manifest = read_manifest(str(output))
    names = sorted(path.name for path in output.iterdir())
    expected_shards = [f"train-0000{i}-of-00004.arrow" for i in range(4)]  # the sample has no validation page
    assert names == ["README.md", manifest.data_dir, "funnel.png", "manifest.json"]  # no staging or temp files left
    assert manifest.splits["validation"] == SplitInfo(0, 0, 0)  # listed, with no (0-row) shard
    assert sorted(path.name for path in (output / manifest.data_dir).iterdir()) == expected_shards
    assert [shard.name for shard in manifest.shards] == expected_shards
    assert manifest.schema() == DOCUMENT_SCHEMA
    for shard in manifest.shards:
        path = output / manifest.data_dir / shard.name
        assert path.stat().st_size == shard.num_bytes
        assert hashlib.sha256(path.read_bytes()).hexdigest() == shard.sha256
        table = read_arrow(path)  # plain pyarrow, no c4prep code
        assert table.num_rows == shard.num_rows
        assert table.schema.equals(DOCUMENT_SCHEMA)
    table = arrow_table(output)
    assert table.num_rows == manifest.splits["train"].num_rows + manifest.splits["validation"].num_rows
    assert table.num_rows == result.funnel.pages_out > 50
    assert len(set(table.column("url").to_pylist())) == table.num_rows


def test_arrow_shards_open_with_datasets_from_file(sample_run):
    """Every Arrow shard of a real run (an IPC stream) opens with `datasets.Dataset.from_file`, which reads only the
    stream format, with the rows, order and types of c4prep's own checked reader."""
    datasets = pytest.importorskip("datasets")
    output, _ = sample_run
    manifest = read_manifest(str(output))
    for shard in manifest.shards:
        loaded = datasets.Dataset.from_file(manifest.shard_uri(str(output), shard))
        ours = read_listed_shard(str(output), manifest, shard)
        assert loaded.num_rows == ours.num_rows == shard.num_rows > 0
        assert loaded.to_list() == ours.to_pylist()
        assert [field.type for field in loaded.features.arrow_schema] == [field.type for field in DOCUMENT_SCHEMA]


def test_counters_reconcile(sample_run):
    _, result = sample_run
    funnel = result.funnel
    counters = read_manifest(str(sample_run[0])).counters
    assert funnel.reconciled
    assert funnel.pages_in == 335  # every record of the sample entered the funnel
    assert counters["split-wet-file"]["passed"] == 335
    dropped = sum(sum(stage.dropped.values()) for stage in funnel.stages)
    assert funnel.pages_in == funnel.pages_out + dropped
    clean = counters["clean-page"]
    line_drops = sum(n for name, n in clean.items() if name.startswith("line-filtered:"))
    assert clean["line-in"] == clean["line-passed"] + line_drops
    assert funnel.lines["out"] == sum(text.count("\n") + 1 for text in _all_texts(sample_run[0]))


def _keep_even(number: int) -> c4_rules.Outcome:
    return c4_rules.Outcome(number if number % 2 == 0 else None, {"passed" if number % 2 == 0 else "filtered:odd": 1})


def _keep_small(number: int) -> c4_rules.Outcome:
    return c4_rules.Outcome(number if number < 5 else None, {"passed" if number < 5 else "filtered:large": 1})


def test_rules_in_one_step_count_as_separate_steps():
    """`ApplyRules` runs rules in order in one step; a dropped element never reaches the later rules, so each rule
    counts what it would count as a step of its own."""
    import apache_beam as beam

    from c4prep.pipelines.beam_c4 import ApplyRules

    pipeline = beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions(["--runner=DirectRunner"]))
    _ = (pipeline | beam.Create(list(range(10)))
         | beam.ParDo(ApplyRules([(_keep_even, "even"), (_keep_small, "small")])))
    counters = run_to_completion(pipeline, pipeline.options)
    assert counters["even"] == {"passed": 5, "filtered:odd": 5}
    assert counters["small"] == {"passed": 3, "filtered:large": 2}  # 0, 2, 4 kept of the 5 even numbers


def test_integrity_counters_are_in_the_manifest_and_match(sample_run):
    counters = read_manifest(str(sample_run[0])).counters[INTEGRITY_NAMESPACE]
    assert counters["dedupe-sentences/claims:sent"] == counters["dedupe-sentences/claims:received"] > 1000
    assert counters["dedupe-sentences/owners:sent"] == counters["dedupe-sentences/owners:received"] > 1000
    assert not sample_run[1].funnel.losses


def test_integrity_errors_name_every_unequal_pair():
    counters = {INTEGRITY_NAMESPACE: {"d/claims:sent": 13, "d/claims:received": 13, "d/owners:sent": 360_582,
                                      "d/owners:received": 324_524, "e/rows:sent": 2}}
    assert integrity_errors(counters) == ["d/owners: 360,582 sent, 324,524 received", "e/rows: 2 sent, 0 received"]
    assert integrity_errors({}) == []


def test_funnel_losses_name_each_page_gap():
    counters = {"split-wet-file": {"passed": 10}, "clean-page": {"passed": 7, "filtered:empty": 2},
                "write-shards": {"examples:train": 7}}
    funnel = build_funnel(counters)
    assert funnel.losses == ["pages: split-wet-file passed 10, clean-page got 9",
                             "pages: 10 in, but 7 written + 2 dropped"]
    assert not funnel.reconciled and "missing: pages: 10 in" in format_funnel(funnel)
    counters["clean-page"]["filtered:empty"] = 3
    assert build_funnel(counters).losses == [] and build_funnel(counters).reconciled


def test_a_run_whose_runner_loses_data_writes_nothing(tmp_path, webdata, monkeypatch):
    """A lost worker share (simulated: a third of the owners never reach their pages) fails the run, names the
    check, and leaves the previous output untouched."""
    output = tmp_path / "out"
    run_c4(RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=1))
    before = file_digests(output)

    def losing(pipeline, options, progress=None):
        counters = run_to_completion(pipeline, options, progress)
        owners = counters[INTEGRITY_NAMESPACE]["dedupe-sentences/owners:received"]
        counters[INTEGRITY_NAMESPACE]["dedupe-sentences/owners:received"] = owners - owners // 3
        return counters

    monkeypatch.setattr("c4prep.pipelines.run_c4.run_to_completion", losing)
    with pytest.raises(DataLossError, match="dedupe-sentences/owners: .* sent, .* received.*nothing was written"):
        run_c4(RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=2,
                         allow_other_settings=True))
    assert file_digests(output) == before

    def losing_pages(pipeline, options, progress=None):  # the english filter misses 2 pages the dedup passed
        counters = run_to_completion(pipeline, options, progress)
        counters["english-filter"]["passed"] -= 2
        return counters

    monkeypatch.setattr("c4prep.pipelines.run_c4.run_to_completion", losing_pages)
    with pytest.raises(DataLossError, match="pages: dedupe-sentences passed .*, english-filter got .*nothing"):
        run_c4(RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=2,
                         allow_other_settings=True))
    assert file_digests(output) == before
    data_dir = read_manifest(str(output)).data_dir
    assert sorted(path.name for path in output.iterdir()) == ["README.md", data_dir, "funnel.png",
                                                              "manifest.json"]  # no staging


def _all_texts(output: Path) -> list[str]:
    return arrow_table(output).column("text").to_pylist()


def test_output_documents_obey_the_rules(sample_run):
    output, _ = sample_run
    manifest = read_manifest(str(output))
    for shard in manifest.shards:
        for row in read_arrow(manifest.shard_uri(str(output), shard)).to_pylist():
            page = c4_rules.Page(row["url"], c4_rules.normalize_url(row["url"]), row["text"], row["timestamp"],
                                 row["content_type"], row["content_length"])
            assert c4_rules.clean_page(page).page == page  # cleaning is idempotent on its own output
            assert c4_rules.check_badwords(page).page == page
            assert c4_rules.split_for_url(page.normalized_url) == shard.split


def test_multi_processing_gives_identical_shards(sample_run, tmp_path, webdata):
    output = tmp_path / "mp"
    config = RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=4)
    run_c4(config, ["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert file_digests(output) == file_digests(sample_run[0])
    assert (output / "funnel.png").read_bytes() == (sample_run[0] / "funnel.png").read_bytes()


def test_shuffled_duplicated_input_gives_identical_shards(sample_run, tmp_path, webdata):
    """The same pages split over two files, one of them twice: URL dedup makes the output identical."""
    copies = tmp_path / "in"
    copies.mkdir()
    for name in ("a", "b"):
        shutil.copy(webdata / SAMPLE_NAME, copies / f"{name}.warc.wet.gz")
    output = tmp_path / "dup"
    result = run_c4(RunConfig(output=str(output), inputs=[str(copies / "*.warc.wet.gz")], num_shards=4))
    assert file_digests(output) == file_digests(sample_run[0])
    assert result.funnel.pages_in == 670
    assert read_manifest(str(output)).counters["duplicate-url-filter"]["filtered"] == 335


def test_rerun_replaces_previous_output(tmp_path, webdata):
    output = tmp_path / "out"
    run_c4(RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=3))
    (output / ".staging-20260101T000000Z-0123abcd").mkdir()  # what a crashed run leaves behind
    run_c4(RunConfig(output=str(output), inputs=[str(webdata / SAMPLE_NAME)], num_shards=None,
                     allow_other_settings=True))
    data_dir = read_manifest(str(output)).data_dir
    assert sorted(path.name for path in output.iterdir()) == ["README.md", data_dir, "funnel.png", "manifest.json"]
    assert sorted(path.name for path in (output / data_dir).iterdir()) == ["train-00000-of-00001.arrow"]


def test_bad_input_is_counted_and_skipped(sample_run, tmp_path, webdata):
    good = (webdata / SAMPLE_NAME).read_bytes()
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "good.warc.wet.gz").write_bytes(good)
    (inputs / "truncated.warc.wet.gz").write_bytes(good[: len(good) // 3])
    (inputs / "empty.warc.wet.gz").write_bytes(b"")
    (inputs / "garbage.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00 this is not gzip")
    (inputs / "bad.jsonl").write_bytes(b'{"text": "x", "url": "u", "timestamp": "t"}\n{oops\n\xff\xfe\n')
    output = tmp_path / "out"
    result = run_c4(RunConfig(output=str(output), inputs=[str(inputs / "*")], num_shards=4))
    problems = result.funnel.input_problems
    assert result.funnel.input_files == 5
    assert problems["empty_file"] == 1
    assert problems["invalid_json"] == 1 and problems["invalid_utf8"] == 1
    assert problems.get("corrupt_gzip", 0) + problems.get("truncated_record", 0) == 2
    assert result.funnel.reconciled
    # Nothing valid is lost: the truncated copy only repeats pages of the good file, so the output is identical.
    assert file_digests(output) == file_digests(sample_run[0])


def test_cli_runs_and_reports(tmp_path, webdata):
    output = tmp_path / "cli"
    outcome = CliRunner().invoke(main, ["run", "--input", str(webdata / SAMPLE_NAME), "--output", str(output)])
    assert outcome.exit_code == 0, outcome.output
    assert "reconciled" in outcome.output and "pages out" in outcome.output
    assert (output / "manifest.json").is_file()


def test_cli_missing_input_is_one_clear_line(tmp_path):
    outcome = CliRunner().invoke(main, ["run", "--input", str(tmp_path / "nope*.wet.gz"), "--output", str(tmp_path)])
    assert outcome.exit_code == 2
    assert "Traceback" not in outcome.output
    assert outcome.output.strip().splitlines()[-1] == (
        f"Error: input not found: '{tmp_path / 'nope*.wet.gz'}' matches no file; check the path or glob (a folder "
        "of a remote filesystem ends in '/')")


def test_cli_rejects_bad_shard_count(tmp_path):
    outcome = CliRunner().invoke(main, ["run", "--num-shards", "many", "--output", str(tmp_path)])
    assert outcome.exit_code == 2 and "--num-shards" in outcome.output


def test_input_list_like_wet_paths(tmp_path, webdata, sample_run):
    listing = tmp_path / "wet.paths.gz"
    with gzip.open(listing, "wt") as handle:
        handle.write(f"{SAMPLE_NAME}\n\n")
    output = tmp_path / "listed"
    run_c4(RunConfig(output=str(output), path_list=str(listing), path_prefix=f"{webdata}/", num_shards=4))
    assert file_digests(output) == file_digests(sample_run[0])


def test_cli_output_that_is_a_file_is_one_clear_line_before_any_work(tmp_path, webdata):
    (tmp_path / "afile").write_text("x")
    outcome = CliRunner().invoke(main, ["run", "--input", str(webdata / SAMPLE_NAME), "--output",
                                        str(tmp_path / "afile")])
    assert outcome.exit_code != 0 and "Traceback" not in outcome.output
    assert outcome.output.strip().splitlines()[-1] == f"Error: the output {tmp_path / 'afile'} is a file; give a folder"
