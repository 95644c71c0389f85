"""`c4prep` refuses what would lose or replace data, in one line with exit status 2: unknown options, runs that
keep no page, damaged shards; a folder as --input means its files; --debug shows the traceback."""
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from c4prep.cli import main
from c4prep.manifest import read_manifest
from c4prep import launch
from c4prep.interrupted import INTERRUPTED, INTERRUPTED_EXIT_CODE, TRAINING_STOPPED, stopped_line

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _one_line_error(result) -> str:
    """The error line of a refused command; fails unless it exited 2 with no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.output.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def published(tmp_path_factory, webdata) -> Path:
    """A published corpus that refused runs must leave exactly as it is."""
    output = tmp_path_factory.mktemp("published") / "en"
    result = _invoke("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(output), "--num-shards", "2")
    assert result.exit_code == 0, result.output
    return output


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("command", ["run", "tokenize"])
def test_a_typo_in_an_option_is_refused_with_a_suggestion(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default output folder would be created here
    line = _one_line_error(_invoke(command, "--outptu", str(tmp_path / "out")))
    assert line == (f"Error: unknown option --outptu (did you mean --output?): neither `c4prep {command}` nor the "
                    f"Beam runner knows it, so nothing ran; see `c4prep {command} --help`")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option, line", [
    ("--direct_num_workers=two", "Error: argument --direct_num_workers: invalid int value: 'two'"),
    ("--dask_shuffle=memory", "Error: argument --dask_shuffle: invalid choice: 'memory' (choose from 'auto', 'tasks', 'disk')"),
])
def test_a_value_beam_refuses_is_one_line(option, line, tmp_path):
    assert _one_line_error(_invoke("run", option, "--output", str(tmp_path / "out"))) == \
        f"{line}; nothing ran, see `c4prep run --help`"
    assert list(tmp_path.iterdir()) == []


def test_beam_options_still_pass(webdata, tmp_path):
    result = _invoke("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(tmp_path / "out"),
                     "--num-shards", "1", "--direct_num_workers=1", "--experiments", "some_experiment")
    assert result.exit_code == 0, result.output


def test_a_positional_argument_is_refused(tmp_path):
    line = _one_line_error(_invoke("run", "stray", "--output", str(tmp_path / "out")))
    assert "unexpected argument 'stray'" in line


def test_a_wrong_type_in_a_variant_file_is_refused_before_anything_runs(tmp_path):
    variant = tmp_path / "mine.yaml"
    variant.write_text("name: mine\nnear_dedup: true\nnear_dedup_params:\n  ngram: 2.5\n")
    line = _one_line_error(_invoke("run", "--variant", str(variant), "--output", str(tmp_path / "out")))
    assert line == (f"Error: variant {str(variant)!r}: near_dedup_params.ngram: Value '2.5' of type 'float' could "
                    "not be converted to Integer")
    assert not (tmp_path / "out").exists()


def test_a_run_that_keeps_no_page_leaves_the_published_corpus(published, tmp_path):
    before = _snapshot(published)
    empty = tmp_path / "inputs"
    empty.mkdir()
    (empty / "nothing.warc.wet.gz").write_bytes(b"")
    (empty / "notes.md").write_text("not an input")
    line = _one_line_error(_invoke("run", "--input", str(empty), "--output", str(published), "--num-shards", "2",
                                   "--allow-other-settings"))
    assert line.startswith("Error: the run read no valid record from 2 input files (bad input: 1 empty_file, "
                           "1 unknown_format;")
    assert f"{published} is unchanged" in line and "--allow-empty" in line
    assert _snapshot(published) == before


def test_a_refused_run_leaves_no_new_folder(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    line = _one_line_error(_invoke("run", "--input", str(tmp_path / "empty.jsonl"), "--output",
                                   str(tmp_path / "new" / "out")))
    assert line.startswith("Error: the run read no valid record")
    assert not (tmp_path / "new").exists()  # nor the parent it made


def _refusal(output: Path, made: str, asked: str) -> str:
    return (f"Error: {output} holds a corpus made with {made}; this run asks for {asked}, so it left {output} "
            "unchanged: give another --output, or pass --allow-other-settings to replace it")


@pytest.mark.parametrize("change, made, asked", [
    (("--variant", "realnewslike"), "--variant en", "--variant realnewslike"),
    (("--dedup", "lines"), "--dedup sentences", "--dedup lines"),
    (("--format", "parquet"), "--format arrow", "--format parquet"),
    (("--num-shards", "auto"), "--num-shards 2", "--num-shards auto"),
    (("--near-dedup",), "--no-near-dedup", "--near-dedup"),
])
def test_a_run_with_other_settings_does_not_replace_the_corpus(published, webdata, tmp_path, change, made, asked):
    """`--variant realnewslike` into the folder of the `en` corpus replaced it with another, smaller one (and the
    vocabulary and token shards made from it no longer matched it)."""
    output = shutil.copytree(published, tmp_path / "en")
    before = _snapshot(output)
    run = ("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(output), "--num-shards", "2")
    assert _one_line_error(_invoke(*run, *change)) == _refusal(output, made, asked)
    assert _snapshot(output) == before


def test_a_run_of_other_input_does_not_replace_the_corpus_and_the_same_input_from_elsewhere_does(
        published, webdata, tmp_path, monkeypatch):
    """A mistyped --input (another crawl file) would replace the corpus; the same file given relative to another
    working folder is the same input; --allow-other-settings replaces the corpus."""
    output = shutil.copytree(published, tmp_path / "en")
    before = _snapshot(output)
    other = shutil.copy(webdata / SAMPLE_NAME, tmp_path / "other.warc.wet.gz")
    run_other = ("run", "--input", str(other), "--output", str(output), "--num-shards", "2", "--no-progress")
    assert _one_line_error(_invoke(*run_other)) == _refusal(output, f"--input {webdata / SAMPLE_NAME}",
                                                            f"--input {other}")
    assert _snapshot(output) == before
    monkeypatch.chdir(webdata)
    assert _invoke("run", "--input", SAMPLE_NAME, "--output", str(output), "--num-shards", "2").exit_code == 0
    assert _invoke(*run_other, "--allow-other-settings").exit_code == 0
    assert read_manifest(str(output)).config["inputs"] == [str(other)]


def test_an_edited_input_list_is_other_input_and_the_same_list_moved_is_not(webdata, tmp_path):
    """An --input-list was compared by its path alone: an edited list (a line cut by mistake) replaced the corpus."""
    listing, output = tmp_path / "wet.paths", tmp_path / "en"
    listing.write_text(f"{webdata / SAMPLE_NAME}\n")
    run = ("run", "--output", str(output), "--num-shards", "2", "--no-progress")
    assert _invoke(*run, "--input-list", str(listing)).exit_code == 0
    before = _snapshot(output)
    listing.write_text(f"{webdata / SAMPLE_NAME}\n{tmp_path / 'more.warc.wet.gz'}\n")
    line = _one_line_error(_invoke(*run, "--input-list", str(listing)))
    assert line.startswith(f"Error: {output} holds a corpus made with --input-list {listing} (SHA-256 of its paths ")
    assert _snapshot(output) == before
    moved = tmp_path / "lists" / "wet.paths"
    moved.parent.mkdir()
    moved.write_text(f"{webdata / SAMPLE_NAME}\n")
    result = _invoke(*run, "--input-list", str(moved))
    assert result.exit_code == 0, result.output


def test_an_input_list_of_relative_paths_names_other_files_from_another_folder(webdata, tmp_path, monkeypatch):
    """Its paths' text was hashed: the same list run from another folder read other files and replaced the corpus."""
    listing, output = tmp_path / "wet.paths", tmp_path / "en"
    listing.write_text(f"{SAMPLE_NAME}\n")
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        shutil.copy(webdata / SAMPLE_NAME, tmp_path / folder / SAMPLE_NAME)
    run = ("run", "--input-list", str(listing), "--output", str(output), "--num-shards", "2", "--no-progress")
    monkeypatch.chdir(tmp_path / "first")
    assert _invoke(*run).exit_code == 0
    monkeypatch.chdir(tmp_path / "second")
    assert _one_line_error(_invoke(*run)).startswith(f"Error: {output} holds a corpus made with --input-list {listing}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _recorded_before_hashes(output: Path, field: str, **variant: str) -> None:
    """Make ``output``'s manifest as a run made before it recorded ``field`` (a list's hash) wrote it, the variant's
    paths as given (``variant``)."""
    manifest = json.loads((output / "manifest.json").read_text())
    del manifest["config"][field]
    manifest["config"]["variant"].update(variant)
    (output / "manifest.json").write_text(json.dumps(manifest))


def test_an_edited_url_list_is_another_setting_and_the_same_list_named_otherwise_is_not(webdata, tmp_path,
                                                                                        monkeypatch):
    """--webtext-urls was compared by the paths given: an edited list at the same path replaced the corpus, and the
    same list by its absolute path was refused. A corpus made before the lists were recorded by hash: by path."""
    urls, output = tmp_path / "urls.txt", tmp_path / "webtext"
    urls.write_text("https://example.org/\n")
    monkeypatch.chdir(tmp_path)
    run = ("run", "--input", str(webdata / SAMPLE_NAME), "--variant", "webtextlike", "--output", str(output),
           "--num-shards", "2", "--allow-empty", "--no-progress", "--webtext-urls")
    assert _invoke(*run, "urls.txt").exit_code == 0
    result = _invoke(*run, str(urls))
    assert result.exit_code == 0, result.output
    before, made = _snapshot(output), f"--webtext-urls {urls} (SHA-256 {_sha256(urls)})"
    urls.write_text("https://example.org/\nhttps://example.com/\n")
    edited = f"--webtext-urls urls.txt (SHA-256 {_sha256(urls)})"
    assert _one_line_error(_invoke(*run, "urls.txt")) == _refusal(output, made, edited)
    assert _snapshot(output) == before
    _recorded_before_hashes(output, "webtext_urls_sha256")
    assert _one_line_error(_invoke(*run, "urls.txt")) == _refusal(output, f"--webtext-urls {urls}", edited)
    result = _invoke(*run, str(urls))
    assert result.exit_code == 0, result.output


def test_an_edited_realnews_domain_map_is_another_setting_and_the_same_map_moved_is_not(webdata, tmp_path,
                                                                                        monkeypatch):
    """A variant's realnews_domains file was compared by the path the variant named: the map edited in place
    replaced the corpus (24 documents by 11), and the same map at another path was refused. The manifest records
    the map's absolute path and SHA-256; a corpus made before, its path as given, compared by its current content."""
    domains, output = tmp_path / "domains.json", tmp_path / "news"
    domains.write_text('{"stackexchange.com": true, "wordpress.com": true, "blogspot.com": true}')
    (tmp_path / "news.yaml").write_text("name: news\nrealnews_domains: domains.json\n")
    monkeypatch.chdir(tmp_path)
    run = ("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(output), "--num-shards", "2",
           "--no-progress", "--variant")
    assert _invoke(*run, "news.yaml").exit_code == 0
    config = json.loads((output / "manifest.json").read_text())["config"]
    assert config["variant"]["realnews_domains"] == str(domains)
    assert config["realnews_domains_sha256"] == hashlib.sha256(domains.read_bytes()).hexdigest()
    before, made = _snapshot(output), f"the variant's realnews_domains {domains} (SHA-256 {_sha256(domains)})"
    domains.write_text('{"stackexchange.com": true}')
    edited = f"the variant's realnews_domains {domains} (SHA-256 {_sha256(domains)})"
    assert _one_line_error(_invoke(*run, "news.yaml")) == _refusal(output, made, edited)
    assert _snapshot(output) == before
    _recorded_before_hashes(output, "realnews_domains_sha256", realnews_domains="domains.json")
    moved = tmp_path / "maps" / "domains.json"
    moved.parent.mkdir()
    shutil.copy(domains, moved)
    (tmp_path / "moved.yaml").write_text(f"name: news\nrealnews_domains: {moved}\n")
    result = _invoke(*run, "moved.yaml")
    assert result.exit_code == 2  # recorded before hashes, by its path: another path is another map
    result = _invoke(*run, "news.yaml")
    assert result.exit_code == 0, result.output
    result = _invoke(*run, "moved.yaml")
    assert result.exit_code == 0, result.output


def _recorded_inputs(output: Path, inputs: list[str]) -> None:
    """Make ``output``'s manifest record ``inputs``, as an earlier run or install did."""
    manifest = json.loads((output / "manifest.json").read_text())
    manifest["config"]["inputs"] = inputs
    (output / "manifest.json").write_text(json.dumps(manifest))


def test_the_same_input_named_otherwise_replaces_the_corpus(published, webdata, tmp_path, monkeypatch):
    """Refused at first: a corpus whose manifest recorded a relative --input (before they were recorded absolute);
    the bundled sample of another install (a new venv, the Docker image); the file through a link, or given twice."""
    run = ("run", "--output", str(tmp_path / "en"), "--num-shards", "2", "--no-progress")
    output = shutil.copytree(published, tmp_path / "en")
    _recorded_inputs(output, [f"../data/{SAMPLE_NAME}"])
    assert _invoke(*run, "--input", str(webdata / SAMPLE_NAME)).exit_code == 0
    _recorded_inputs(output, [f"/elsewhere/site-packages/c4prep/pipelines/data/sample/{SAMPLE_NAME}"])
    result = _invoke(*run)  # no --input: the bundled sample of this install
    assert result.exit_code == 0, result.output
    (tmp_path / "link").symlink_to(webdata)
    _invoke(*run, "--input", str(webdata / SAMPLE_NAME), "--allow-other-settings")
    for inputs in ([str(tmp_path / "link" / SAMPLE_NAME)], [str(webdata / SAMPLE_NAME)] * 2):
        result = _invoke(*run, *(arg for path in inputs for arg in ("--input", path)))
        assert result.exit_code == 0, result.output


def test_a_corpus_whose_manifest_does_not_read_is_not_replaced(published, webdata, tmp_path):
    """A damaged manifest.json: the next run, with other settings, replaced the output and deleted its data folder."""
    output = shutil.copytree(published, tmp_path / "en")
    (output / "manifest.json").write_text("not json")
    before = _snapshot(output)
    run = ("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(output), "--format", "parquet")
    assert _one_line_error(_invoke(*run)) == (
        f"Error: {output}/manifest.json does not read, so this run cannot tell what it would replace and left {output} "
        "unchanged: restore the manifest, give another --output, or pass --allow-other-settings to replace it")
    assert _snapshot(output) == before
    assert _invoke(*run, "--allow-other-settings").exit_code == 0


def test_an_output_inside_the_input_and_empty_paths_are_one_line(webdata, tmp_path, monkeypatch):
    """The second run read its own output as input (263 warnings, then --allow-damaged took its old corpus in); then
    the first run was accepted and the same command refused, and a run into a sibling output read the first one's
    corpus as new pages. An empty --output was a traceback, an empty --input read the working folder."""
    crawl = tmp_path / "crawl"
    crawl.mkdir()
    shutil.copy(webdata / SAMPLE_NAME, crawl)
    monkeypatch.chdir(tmp_path)
    for pattern, named in ((str(crawl), crawl), (f"{crawl}/**", f"{crawl}/**"), ("crawl/", crawl)):
        assert _one_line_error(_invoke("run", "--input", pattern, "--output", str(crawl / "out"), "--format",
                                       "jsonl.gz")) == (
            f"Error: --output {crawl / 'out'} is inside the input: --input {named} would read this run's output in "
            "the next run; give an --output outside the input folders")
        assert not (crawl / "out").exists()
    shutil.copytree(crawl, tmp_path / "published")  # as if published by a run before the check
    (tmp_path / "published" / "out").mkdir()
    (tmp_path / "published" / "out" / "README.md").write_text("a corpus card")
    assert _one_line_error(_invoke("run", "--input", str(tmp_path / "published"), "--output",
                                   str(tmp_path / "published" / "out"))) == (
        f"Error: --output {tmp_path / 'published' / 'out'} is inside the input: the run would read its own output "
        f"({tmp_path / 'published' / 'out' / 'README.md'}); give an --output outside the input folders")
    assert _invoke("run", "--input", f"{crawl}/*.gz", "--output", str(crawl / "out"), "--no-progress").exit_code == 0
    monkeypatch.chdir(crawl)
    assert _one_line_error(_invoke("run", "--output", "")) == (
        "Error: --output '' names no folder: give one (default c4prep_data/c4/en)")
    assert _one_line_error(_invoke("run", "--input", "", "--output", str(tmp_path / "x"))) == (
        "Error: --input '' names no file (an unset shell variable?): give a file, glob or folder")
    assert _one_line_error(_invoke("tokenize", "--output", "")) == (
        "Error: --output '' names no folder: give one (default c4prep_data/tokens)")


@pytest.mark.parametrize("command", ["run", "tokenize"])
def test_a_folder_of_the_users_is_not_an_output(sample_documents, sample_vocab, tmp_path, monkeypatch, command):
    """`--output .` in a project folder replaced its README.md with the dataset card, exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("# My project\n")
    args = {"run": ["run"], "tokenize": ["tokenize", "--input", str(sample_documents), "--vocab", str(sample_vocab)]}
    assert _one_line_error(_invoke(*args[command], "--output", ".")) == (
        f"Error: the output . holds README.md but no manifest.json: it is not a c4prep output, and `c4prep {command}` "
        "would replace that file: give another --output (a new or empty folder)")
    assert (tmp_path / "README.md").read_text() == "# My project\n"


def test_a_run_that_skipped_more_bad_input_does_not_replace_the_output(published, webdata, tmp_path):
    """The sample cut after its 20th gzip member (a download cut short) would replace the corpus of the whole
    sample with 10 documents; refused, unless --allow-damaged. Another run with as much bad input replaces it."""
    output = tmp_path / "en"
    shutil.copytree(published, output)
    before = _snapshot(output)
    data = (webdata / SAMPLE_NAME).read_bytes()
    ends = _member_ends(data, 20)
    cut = tmp_path / "cut.warc.wet.gz"
    cut.write_bytes(data[: ends[-1] + 50])
    run_cut = ("run", "--input", str(cut), "--output", str(output), "--num-shards", "2", "--allow-other-settings")
    line = _one_line_error(_invoke(*run_cut))
    assert line.startswith("Error: the run skipped bad input (1 corrupt_gzip; the log above names each) and read "
                           f"20 pages, where the run that made {output} skipped none and read 335: it kept 10 "
                           f"documents, the output holds 84, so it did not replace it: {output} is unchanged.")
    assert "--allow-damaged" in line
    assert _snapshot(output) == before
    assert _invoke(*run_cut, "--allow-damaged").exit_code == 0
    assert _invoke(*run_cut).exit_code == 0
    assert sum(split.num_rows for split in read_manifest(str(output)).splits.values()) == 10
    cut_more = tmp_path / "cut-more.warc.wet.gz"  # the same one problem, fewer pages: still worse
    cut_more.write_bytes(data[: ends[9] + 50])
    line = _one_line_error(_invoke("run", "--input", str(cut_more), "--output", str(output), "--num-shards", "2",
                                   "--allow-other-settings"))
    assert "skipped bad input (1 corrupt_gzip; the log above names each) and read 10 pages, where the run that " \
           f"made {output} skipped 1 and read 20:" in line


def _member_ends(data: bytes, count: int) -> list[int]:
    """The offsets where the first ``count`` gzip members of ``data`` end."""
    ends, offset = [], 0
    while len(ends) < count:
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        member.decompress(data[offset:])
        offset = len(data) - len(member.unused_data)
        ends.append(offset)
    return ends


def test_a_run_that_read_fewer_pages_from_the_same_input_does_not_replace_the_output(webdata, tmp_path):
    """A file of the --input folder cut exactly between two gzip members reads as intact: the run read 20 of the 335
    pages with no bad input and replaced the corpus. Refused now, unless --allow-damaged; a run of other input
    (--allow-other-settings) may read fewer pages."""
    crawl, output = tmp_path / "crawl", tmp_path / "en"
    crawl.mkdir()
    data = (webdata / SAMPLE_NAME).read_bytes()
    (crawl / SAMPLE_NAME).write_bytes(data)
    run = ("run", "--input", str(crawl), "--output", str(output), "--num-shards", "2")
    assert _invoke(*run).exit_code == 0
    before = _snapshot(output)
    (crawl / SAMPLE_NAME).write_bytes(data[: _member_ends(data, 20)[-1]])
    line = _one_line_error(_invoke(*run))
    assert line == (f"Error: the run found no bad input but read 20 pages, where the run that made {output} from the "
                    f"same input read 335: it kept 10 documents, the output holds 84, so it did not replace it: "
                    f"{output} is unchanged. Restore the input (input files: 1 now, 1 then; a file gone or cut short?), "
                    "give another --output, or pass --allow-damaged to publish over it")
    assert _snapshot(output) == before
    assert _invoke(*run, "--allow-damaged").exit_code == 0
    assert sum(split.num_rows for split in read_manifest(str(output)).splits.values()) == 10
    (crawl / SAMPLE_NAME).write_bytes(data)
    assert _invoke(*run).exit_code == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / SAMPLE_NAME).write_bytes(data[: _member_ends(data, 20)[-1]])
    assert _invoke("run", "--input", str(other), "--output", str(output), "--num-shards", "2",
                   "--allow-other-settings").exit_code == 0


def test_allow_empty_publishes_an_empty_corpus(tmp_path, monkeypatch):
    (tmp_path / "empty.jsonl").write_text("")
    result = _invoke("run", "--input", str(tmp_path / "empty.jsonl"), "--output", str(tmp_path / "out"),
                     "--allow-empty")
    assert result.exit_code == 0, result.output
    assert sum(split.num_rows for split in read_manifest(str(tmp_path / "out")).splits.values()) == 0
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    with pytest.raises(datasets.exceptions.DataFilesNotFoundError):  # not manifest.json loaded as the data
        datasets.load_dataset(str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"))


def test_a_folder_as_input_means_every_file_below_it(webdata, tmp_path):
    inputs = tmp_path / "crawl" / "part"
    inputs.mkdir(parents=True)
    shutil.copy(webdata / SAMPLE_NAME, inputs / SAMPLE_NAME)
    (inputs / "README").write_text("a file of no input format")
    result = _invoke("run", "--input", str(tmp_path / "crawl"), "--output", str(tmp_path / "out"),
                     "--num-shards", "1")
    assert result.exit_code == 0, result.output
    counters = read_manifest(str(tmp_path / "out")).counters["read-input"]
    assert counters == {"files": 2, "records": 335, "problem:unknown_format": 1}
    assert result.output.strip().splitlines()[-1] == (
        "Warning: skipped bad input (1 unknown_format) among 2 input files; each is logged above and counted under "
        "'read-input' in the manifest")


def _damaged_copy(folder: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of a shard folder with 4 bytes of its first shard's text changed (same size, still valid Arrow)."""
    copy = tmp_path / "damaged"
    shutil.copytree(folder, copy)
    manifest = read_manifest(str(copy))
    shard = next(shard for shard in manifest.shards if shard.num_rows)
    path = Path(manifest.shard_uri(str(copy), shard))
    data = bytearray(path.read_bytes())
    position = data.index(b" the ")
    data[position:position + 4] = b" THE"
    path.write_bytes(bytes(data))
    return copy, str(path)


def test_vocab_and_tokenize_refuse_a_damaged_document_shard(sample_documents, sample_vocab, tmp_path):
    damaged, path = _damaged_copy(sample_documents, tmp_path)
    expected = f"Error: {path} does not match its recorded SHA-256 (same size, other bytes)"
    line = _one_line_error(_invoke("vocab", "--input", str(damaged), "--output", str(tmp_path / "vocab"),
                                   "--vocab-size", "600"))
    assert line.startswith(expected)
    line = _one_line_error(_invoke("tokenize", "--input", str(damaged), "--vocab", str(sample_vocab),
                                   "--output", str(tmp_path / "tokens")))
    assert line.startswith(expected) and "while running" not in line
    assert not (tmp_path / "tokens" / "manifest.json").exists()


def test_debug_shows_the_traceback(sample_documents, sample_vocab, tmp_path):
    damaged, _ = _damaged_copy(sample_documents, tmp_path)
    result = _invoke("--debug", "vocab", "--input", str(damaged), "--output", str(tmp_path / "vocab"),
                     "--vocab-size", "600")
    assert result.exit_code != 0 and type(result.exception).__name__ == "ManifestError"


def test_an_output_that_becomes_unwritable_is_one_line(webdata, tmp_path, monkeypatch):
    """A worker that cannot write its shard (the folder turned read-only mid-run) stops the job with one line."""
    def refuse(uri, schema, batches):
        raise PermissionError(13, "Permission denied", uri)

    monkeypatch.setattr("c4prep.pipelines.beam_c4.write_shard", refuse)
    line = _one_line_error(_invoke("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(tmp_path / "out"),
                                   "--num-shards", "1"))
    assert line.startswith("Error: [Errno 13] Permission denied: ") and "train-00000-of-00001.arrow" in line
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("args,expected", [
    (["vocab", "--bogus"], "Error: No such option '--bogus'. (see `c4prep vocab --help`)"),
    (["vocab", "--vocab-size", "many"],
     "Error: Invalid value for '--vocab-size': 'many' is not a valid integer. (see `c4prep vocab --help`)"),
    (["tokenise"], "Error: No such command 'tokenise'. Did you mean 'tokenize'? (see `c4prep --help`)"),
    (["run", "--input"], "Error: Option '--input' requires an argument. (see `c4prep run --help`)"),  # was c4prep's
])
def test_click_usage_errors_are_one_line(args, expected):
    """Click's own usage errors too: one line on stderr and exit 2, no usage block (run as a user runs it)."""
    done = _c4prep(*args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", expected + "\n")


def _c4prep(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The `c4prep` console script run as a user runs it, in its own process."""
    return subprocess.run([str(Path(sys.executable).parent / "c4prep"), *args], capture_output=True, text=True,
                          env=env, cwd=cwd)


@pytest.fixture
def without_beams_gcp_extra(tmp_path) -> dict[str, str]:
    """The environment of a process without Beam's ``gcp`` extra, as after `pip install c4prep`: `import apache_beam`
    then logs a warning about BigQuery's client on the root logger. The tests' own environment has the extra, so a
    package that fails to import stands in for the missing google-apitools."""
    shadow = tmp_path / "without_gcp_extra"
    (shadow / "apitools").mkdir(parents=True)
    (shadow / "apitools" / "__init__.py").write_text("raise ImportError('google-apitools is not installed')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))}



@pytest.mark.parametrize("command", ["run", "tokenize"])
def test_one_line_also_where_beams_gcp_extra_is_not_installed(command, without_beams_gcp_extra, tmp_path):
    done = _c4prep(command, "--outptu", str(tmp_path / "out"), env=without_beams_gcp_extra, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", (
        f"Error: unknown option --outptu (did you mean --output?): neither `c4prep {command}` nor the Beam runner "
        f"knows it, so nothing ran; see `c4prep {command} --help`\n"))


def test_worker_processes_keep_their_logs_off_the_terminal(without_beams_gcp_extra, webdata, tmp_path):
    """Beam's SDK worker processes (``multi_processing``) without the ``gcp`` extra: their start-up and bundle logs
    go to the runner, not to the terminal (about 40 lines before `c4prep.sdk_worker` started them); c4prep's own
    warning about a damaged input reaches it, as in memory (it was kept off with Beam's logs)."""
    damaged = bytearray((webdata / SAMPLE_NAME).read_bytes())
    middle = len(damaged) // 2
    damaged[middle : middle + 4] = bytes(byte ^ 0xFF for byte in damaged[middle : middle + 4])
    path = tmp_path / "damaged.warc.wet.gz"
    path.write_bytes(bytes(damaged))
    done = _c4prep("run", "--input", str(path), "--output", str(tmp_path / "out"), "--num-shards",
                   "1", "--no-progress", "--direct_running_mode=multi_processing", "--direct_num_workers=2",
                   env=without_beams_gcp_extra, cwd=tmp_path)
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        f"WARNING c4prep.pipelines.beam_c4: skipped bad input: {path}: the gzip member at byte 295282 is damaged "
        "(Error -3 while decompressing data: incorrect data check); what it held is skipped.",
        "Warning: skipped bad input (1 corrupt_gzip) among 1 input file; each is logged above and counted under "
        "'read-input' in the manifest"]
    assert "84 documents" in done.stdout


def test_a_worker_processes_failure_is_one_line(sample_documents, sample_vocab, tmp_path):
    """A damaged shard found by a ``multi_processing`` worker: the one line alone (Beam's worker printed the
    traceback to its stderr too, 66 lines, before `c4prep.sdk_worker` started it)."""
    damaged, path = _damaged_copy(sample_documents, tmp_path)
    done = _c4prep("tokenize", "--input", str(damaged), "--vocab", str(sample_vocab), "--output",
                   str(tmp_path / "tokens"), "--direct_running_mode=multi_processing", "--direct_num_workers=2",
                   cwd=tmp_path)
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr
    assert done.stderr.startswith(f"Error: {path} does not match its recorded SHA-256 (same size, other bytes)")


def _wait_for_workers(runner: subprocess.Popen, count: int) -> list[int]:
    """Until ``count`` `c4prep.sdk_worker` processes of ``runner`` have run for a second (their imports are done), or
    ``runner`` has ended; their process ids."""
    workers: list[int] = []
    while runner.poll() is None:
        workers = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _is_worker_of(int(pid), runner.pid)]
        if len(workers) >= count and all(_age_s(pid) > 1.0 for pid in workers):
            break
        time.sleep(0.05)
    return workers


def _running(processes: list[int], within_s: float) -> list[int]:
    """Those of ``processes`` still running (not ended, nor a zombie) after up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        running = [pid for pid in processes if _state(pid) not in ("", "Z")]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _is_worker_of(pid: int, runner: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return int(stat.rsplit(")", 1)[1].split()[1]) == runner and b"c4prep.sdk_worker" in command


def _age_s(pid: int) -> float:
    started_ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    return uptime_s - started_ticks / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("mode, stop, to_group", [("in_memory", signal.SIGINT, True),
                                                   ("multi_processing", signal.SIGINT, True),
                                                   ("multi_processing", signal.SIGTERM, False)])
def test_a_stop_is_one_line_and_leaves_the_published_corpus(published, webdata, tmp_path, mode, stop, to_group):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) once the job runs: exit 130 with one line
    after the progress lines, however Beam wrapped the interrupt (a RuntimeError naming its step: 140 to 200 lines of
    traceback before, and a KeyboardInterrupt traceback from each worker process); the published corpus unchanged.
    SIGTERM to the runner alone (`kill`, a scheduler's preemption) likewise, exit 143: it ended the runner silently,
    and its orphaned workers printed about 90 lines of gRPC tracebacks."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for copy in range(8):  # long enough a job to be stopped while it runs
        shutil.copy(webdata / SAMPLE_NAME, inputs / f"{copy}-{SAMPLE_NAME}")
    output = shutil.copytree(published, tmp_path / "en")
    before = _snapshot(output)
    command = [str(Path(sys.executable).parent / "c4prep"), "run", "--input", str(inputs), "--output", str(output),
               "--num-shards", "2", "--allow-other-settings", "--progress-interval", "0.2",
               f"--direct_running_mode={mode}", "--direct_num_workers=2"]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                          start_new_session=True) as job:
        first = job.stderr.readline()
        assert first.startswith("progress "), first  # the job runs
        if mode == "multi_processing":  # past its workers' first lines: one interrupted before its handler prints
            workers = _wait_for_workers(job, 2)  # a traceback (a known gap, in the README)
        if to_group:
            os.killpg(job.pid, stop)
        else:
            job.send_signal(stop)
        rest = job.stderr.read()
        assert job.wait(timeout=60) == 128 + stop
    lines = [line for line in rest.splitlines() if line and not line.startswith("progress ")]
    assert lines == [stopped_line(stop)], rest
    if mode == "multi_processing":
        assert _running(workers, within_s=10) == []
    assert _snapshot(output) == before
    assert _c4prep("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(output), "--num-shards", "2",
                   "--no-progress", cwd=tmp_path).returncode == 0  # the next run cleans up and publishes


def test_ctrl_c_to_the_runner_while_its_workers_start_stops_it(webdata, tmp_path):
    """SIGINT to the runner alone (`kill -INT`) while its `multi_processing` workers started: the runner waited for
    ever for a worker that never connected (3 of 10 tries, 10 minutes, printing progress lines). The runner now
    passes the interrupt to its workers; one interrupted in its first moments may print a traceback (a known gap)."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for copy in range(8):
        shutil.copy(webdata / SAMPLE_NAME, inputs / f"{copy}-{SAMPLE_NAME}")
    command = [str(Path(sys.executable).parent / "c4prep"), "run", "--input", str(inputs), "--output",
               str(tmp_path / "out"), "--num-shards", "2", "--progress-interval", "0.2",
               "--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                           start_new_session=True)
    try:
        while job.poll() is None and not (workers := [int(pid) for pid in os.listdir("/proc")
                                                      if pid.isdigit() and _is_worker_of(int(pid), job.pid)]):
            time.sleep(0.01)
        job.send_signal(signal.SIGINT)
        _, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:  # it hung: end it and its workers
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 130, err
    assert err.strip().splitlines()[-1] == INTERRUPTED
    assert _running(workers, within_s=10) == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command, held", [
    (["run"], "tokens"), (["run"], "vocab"), (["tokenize", "--input", "{documents}", "--vocab", "{vocab}"], "documents"),
    (["vocab", "--input", "{documents}", "--vocab-size", "600"], "tokens"),
])
def test_an_output_holding_another_commands_output_is_refused(sample_documents, sample_vocab, sample_tokens, tmp_path,
                                                              command, held):
    """A mistyped --output (the token folder for `run`'s) would replace hours of another stage's work."""
    folders = {"documents": sample_documents, "vocab": sample_vocab, "tokens": sample_tokens}
    output = shutil.copytree(folders[held], tmp_path / held)
    before = _snapshot(output)
    args = [arg.format(documents=sample_documents, vocab=sample_vocab) for arg in command]
    line = _one_line_error(_invoke(*args, "--output", str(output)))
    kinds = {"documents": ("documents", "c4prep run"), "tokens": ("token shards", "c4prep tokenize"),
             "vocab": ("a vocabulary", "c4prep vocab")}
    what, writer = kinds[held]
    assert line == (f"Error: the output {output} holds {what} (from `{writer}`), which `c4prep {command[0]}` would "
                    "replace: give another --output, or remove that folder first")
    assert _snapshot(output) == before


@pytest.mark.parametrize("name", ["manifest.json", "README.md", "funnel.png"])
def test_a_folder_where_the_run_writes_a_file_is_refused_before_the_job(tmp_path, name):
    """It failed with an IsADirectoryError traceback at the publish, after the whole job had run."""
    (tmp_path / "out" / name).mkdir(parents=True)
    line = _one_line_error(_invoke("run", "--output", str(tmp_path / "out")))
    assert line == f"Error: the output {tmp_path / 'out'} has a folder named {name}, where the command writes a " \
                   "file: move it away"


@pytest.mark.parametrize("script, line", [(launch.c4prep, INTERRUPTED),
                                          (launch.train, f"train: interrupted: {TRAINING_STOPPED}")])
def test_ctrl_c_while_a_console_script_imports_is_one_line(script, line, monkeypatch, capsys):
    """The console scripts import their command line (a second or two: torch, Beam) before its handlers are in
    place; Ctrl-C then printed a traceback of the import."""
    def interrupted_import(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch.importlib, "import_module", interrupted_import)
    with pytest.raises(SystemExit) as stopped:
        script()
    assert stopped.value.code == INTERRUPTED_EXIT_CODE
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize("command", [["run"], ["vocab", "--input", "{documents}", "--vocab-size", "600"],
                                     ["tokenize", "--input", "{documents}", "--vocab", "{vocab}"]])
def test_an_unreachable_gcs_output_is_one_line_soon(sample_documents, sample_vocab, tmp_path, monkeypatch, command):
    """Without network or credentials, Arrow retried the first GCS request for 15 minutes, the command silent
    (`vocab --output gs://...`: 13 minutes). The first contact with a bucket now has a bound (here 1 s)."""
    from c4prep import shards

    monkeypatch.setattr(shards, "GCS_FIRST_CONTACT_S", 1)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)  # no credentials anywhere
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    args = [arg.format(documents=sample_documents, vocab=sample_vocab) for arg in command]
    line = _one_line_error(_invoke(*args, "--output", "gs://c4prep-no-such-bucket/out"))
    assert line.startswith("Error: gs://c4prep-no-such-bucket/out: cannot be reached in 1 s of retries ("), line
    assert line.endswith("check the network and the Google Cloud credentials (GOOGLE_APPLICATION_CREDENTIALS, "
                         "`gcloud auth application-default login`)")


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", "100000", "\u00b2"])
def test_a_shard_count_out_of_range_is_refused_before_the_job(tmp_path, value):
    """--num-shards 100000 ran the whole job, then failed writing the first shard: a 111-line traceback, exit 1."""
    assert _one_line_error(_invoke("run", "--num-shards", value, "--output", str(tmp_path / "out"))) == (
        f"Error: --num-shards {value!r} is neither 'auto' nor an integer from 1 to 99,999 (five digits in shard names)")
    assert not (tmp_path / "out").exists()


def test_ctrl_c_that_reaches_click_is_the_one_line_alone(tmp_path, monkeypatch):
    """An interrupt that reached click as a KeyboardInterrupt (before Beam wrapped it) came after an empty line,
    click's own."""
    from c4prep.pipelines import run_c4

    def interrupted(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(run_c4, "run_c4", interrupted)
    result = _invoke("run", "--output", str(tmp_path / "out"))
    assert result.exit_code == INTERRUPTED_EXIT_CODE
    assert result.stderr == INTERRUPTED + "\n"


@pytest.mark.parametrize("command", [["run", "--input", "{webdata}", "--num-shards", "2"],
                                     ["vocab", "--input", "{documents}", "--vocab-size", "600"],
                                     ["tokenize", "--input", "{documents}", "--vocab", "{vocab}"]])
def test_an_output_another_command_is_writing_is_refused(published, webdata, sample_documents, sample_vocab,
                                                         tmp_path, command):
    """Two runs into one output both passed the settings check and the last to publish won (a corpus of other
    settings replaced without --allow-other-settings), or one's start-up clean-up deleted the other's staging
    folder. Here the other command is a lock held on the folder, as a running command holds it."""
    output = shutil.copytree(published, tmp_path / "out") if command[0] == "run" else tmp_path / "out"
    output.mkdir(exist_ok=True)
    before = _snapshot(output)
    args = [arg.format(webdata=webdata / SAMPLE_NAME, documents=sample_documents, vocab=sample_vocab)
            for arg in command]
    held = os.open(output, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert _one_line_error(_invoke(*args, "--output", str(output))) == (
            f"Error: another c4prep command is writing {output}: wait for it to end, or give another output")
    finally:
        os.close(held)
    assert _snapshot(output) == before
    assert _invoke(*args, "--output", str(output)).exit_code == 0


def test_an_output_on_a_filesystem_without_locks_is_written_with_a_warning(sample_documents, tmp_path, monkeypatch,
                                                                           caplog):
    """Some network mounts refuse flock (ENOLCK): it was a traceback, for every command writing there."""
    def no_locks(descriptor: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    output = tmp_path / "vocab"
    assert _invoke("vocab", "--input", str(sample_documents), "--vocab-size", "600", "--output",
                   str(output)).exit_code == 0
    assert f"{output} cannot be locked (No locks available)" in caplog.text
