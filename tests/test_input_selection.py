"""What `c4prep run` reads is checked before the job starts: a path list that is not one, an input or output no
filesystem reads, options that would be ignored, a variant file that is not YAML. Each is one line with exit 2, and
the output folder is left alone; a listed path that does not exist is a counted input problem."""
import gzip
import hashlib
import io
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from c4prep.cli import main
from c4prep.manifest import read_listed_shard, read_manifest
from c4prep.pipelines.list_files import NotUtf8Text, list_sha256

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"


def _refusal(tmp_path: Path, *args: str) -> str:
    """The one error line of `c4prep ARGS`; fails unless it exited 2 without a traceback and left `out` alone."""
    result = CliRunner().invoke(main, [*args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and (result.exception is None or isinstance(result.exception, SystemExit))
    assert not (tmp_path / "out").exists()
    return result.output.strip().splitlines()[-1]


@pytest.fixture
def lists(tmp_path, webdata) -> Path:
    """Files a user might give as --input-list by mistake, and one good list, in `tmp_path`."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "not-gzip.txt.gz").write_text("crawl-data/a.warc.wet.gz\n")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "cc.paths").write_text("crawl-data/CC-MAIN-2019-30/a.warc.wet.gz\n")
    (tmp_path / "good.paths").write_text(f"{SAMPLE_NAME}\n")
    (tmp_path / "cut.paths.gz").write_bytes(gzip.compress(f"{SAMPLE_NAME}\n{SAMPLE_NAME}\n".encode())[:-12])
    shutil.copy(webdata / SAMPLE_NAME, tmp_path / SAMPLE_NAME)
    return tmp_path


@pytest.mark.parametrize("args, line", [
    (["--input-list", "folder"], "Error: --input-list {d}/folder is a folder: give a file with one input path per "
                                 "line (or the folder as --input)"),
    (["--input-list", "not-gzip.txt.gz"], "Error: cannot read --input-list {d}/not-gzip.txt.gz (Not a gzipped file "
                                          "(b'cr')): give a text file of input paths, one per line (gzipped when its "
                                          "name ends in .gz)"),
    (["--input-list", "cut.paths.gz"], "Error: cannot read --input-list {d}/cut.paths.gz (Compressed file ended "
                                       "before the end-of-stream marker was reached): give a text file of input "
                                       "paths, one per line (gzipped when its name ends in .gz)"),  # read to its cut
    (["--input-list", "binary.txt"], "Error: --input-list {d}/binary.txt is not a text file of input paths, one per "
                                     "line"),
    (["--input-list", "blank.txt"], "Error: --input-list {d}/blank.txt names no path: give one input path per line"),
    (["--input-list", SAMPLE_NAME], "Error: the first path that --input-list {d}/" + SAMPLE_NAME + " names does not "
                                    "exist: 'WARC/1.0'; is it a list of input paths, one per line?"),
    (["--input-list", "cc.paths", "--input-prefix", "/nowhere/"],
     "Error: the first path that --input-list {d}/cc.paths names (with --input-prefix '/nowhere/') does not exist: "
     "'/nowhere/crawl-data/CC-MAIN-2019-30/a.warc.wet.gz'; is it a list of input paths, one per line?"),
    (["--input-list", "good.paths", "--input", SAMPLE_NAME],
     "Error: give --input or --input-list, not both: a run reads either its patterns or its list"),
    (["--input", SAMPLE_NAME, "--input-prefix", "s3://commoncrawl/"],
     "Error: --input-prefix goes before each path of --input-list: give --input-list FILE too, or drop "
     "--input-prefix"),
])
def test_an_input_selection_that_cannot_be_read_is_one_line(lists, args, line):
    args = [f"{lists}/{arg}" if (lists / arg).exists() else arg for arg in args]
    assert _refusal(lists, "run", *args, "--output", str(lists / "out")) == line.format(d=lists)


def test_a_path_of_no_filesystem_is_one_line_naming_it(lists):
    line = _refusal(lists, "run", "--input-list", str(lists / "cc.paths"), "--input-prefix",
                    "https://data.commoncrawl.org/", "--output", str(lists / "out"))
    assert line.startswith(f"Error: a path of --input-list {lists}/cc.paths: https://data.commoncrawl.org/crawl-data/"
                           "CC-MAIN-2019-30/a.warc.wet.gz: no Beam filesystem here reads https:// paths (Beam has no "
                           "HTTP filesystem: Common Crawl's files are also at s3://commoncrawl/); it reads local paths "
                           "and ")
    line = _refusal(lists, "run", "--input", "foo://bucket/a.wet", "--output", str(lists / "out"))
    assert line.startswith("Error: --input foo://bucket/a.wet: no Beam filesystem here reads foo:// paths;")


@pytest.mark.parametrize("command", [["run"], ["vocab", "--input", "{d}"], ["tokenize", "--input", "{d}"]])
@pytest.mark.parametrize("output", ["s3a://bucket/c4", "https://example.org/c4"])
def test_an_output_of_no_filesystem_is_one_line(tmp_path, command, output):
    (tmp_path / "manifest.json").write_text("{}")  # the input of vocab and tokenize is looked at before their output
    scheme = output.split("://")[0]
    line = _refusal(tmp_path, *(arg.format(d=tmp_path) for arg in command), "--output", output)
    if command[0] == "run":
        assert line == (f"Error: {output}: no filesystem reads {scheme}:// paths; use a local path, s3://, gs://, "
                        "hdfs:// or abfs://")
    else:  # its input is looked at first
        assert line.startswith(f"Error: {tmp_path}") and "Traceback" not in line


def test_an_input_folder_of_no_filesystem_is_one_line(tmp_path):
    for command in ("vocab", "tokenize"):
        assert _refusal(tmp_path, command, "--input", "foo://bucket/c4", "--output", str(tmp_path / command)) == \
            "Error: foo://bucket/c4/manifest.json: no filesystem reads foo:// paths; use a local path, s3://, gs://, " \
            "hdfs:// or abfs://"


@pytest.mark.parametrize("text, line", [
    (b"name: mine\nclean: [\n", "Error: variant '{v}' is not valid YAML (line 3): expected the node content, but "
                                "found '<stream end>'"),
    (b"\xff\xfename: mine\n", "Error: variant file {v} is not UTF-8 text: give a YAML file"),
    (b"name: mine\nrealnews_domains: {d}/domains.json\n",
     "Error: variant '{v}': realnews_domains: {d}/domains.json is not a JSON object of domain -> true or a list of "
     "allowed subdomains (grover's domain_to_allowed_subdomains.json)"),
    (b"name: mine\nrealnews_domains: {d}/urls.txt\n",
     "Error: variant '{v}': realnews_domains: {d}/urls.txt is not JSON (Expecting value: line 1 column 1 (char 0))"),
    (b"name: mine\nwebtext_urls: [{d}/urls.txt]\n",
     "Error: variant '{v}' does not filter by URL, so it would ignore --webtext-urls: use --variant webtextlike (or "
     "webtext_filter: true in a variant file)"),
    (b"name: en\ndedup: 3\n", "Error: variant '{v}': dedup must be one of lines, sentences, none, not '3'"),  # not 'en'
    (b"name: mine\nbadword: true\n", "Error: variant '{v}': Key 'badword' not in 'CorpusVariant' (did you mean "
                                      "badwords?)"),
])
def test_a_variant_file_that_cannot_be_used_is_one_line(tmp_path, text, line):
    (tmp_path / "domains.json").write_text('["example.com"]')
    (tmp_path / "urls.txt").write_text("https://example.org/\n")
    variant = tmp_path / "mine.yaml"
    variant.write_bytes(text.replace(b"{d}", str(tmp_path).encode()))
    assert _refusal(tmp_path, "run", "--variant", str(variant), "--output", str(tmp_path / "out")) == \
        line.format(v=variant, d=tmp_path)


def test_webtext_url_lists_must_exist_and_need_the_webtext_variant(tmp_path):
    urls = tmp_path / "urls.txt"
    urls.write_text("https://example.org/\n")
    assert _refusal(tmp_path, "run", "--variant", "webtextlike", "--webtext-urls", str(urls), "--webtext-urls",
                    str(tmp_path / "typo.txt"), "--output", str(tmp_path / "out")) == \
        f"Error: --webtext-urls {tmp_path}/typo.txt does not exist: give a file of URLs, one per line"
    assert _refusal(tmp_path, "run", "--webtext-urls", str(urls), "--output", str(tmp_path / "out")) == \
        ("Error: variant 'en' does not filter by URL, so it would ignore --webtext-urls: use --variant webtextlike "
         "(or webtext_filter: true in a variant file)")


def _urls(folder: Path) -> list[str]:
    manifest = read_manifest(str(folder))
    return sorted(row["url"] for shard in manifest.shards
                  for row in read_listed_shard(str(folder), manifest, shard).to_pylist())


def test_a_url_list_saved_with_a_byte_order_mark_or_crlf_keeps_the_same_pages(sample_documents, webdata, tmp_path):
    """A list starting with a UTF-8 BOM (as Windows tools save one) lost its first URL: one page fewer, silently."""

    def webtextlike(url_list: Path) -> list[str]:
        output = tmp_path / f"out-{url_list.name}"
        result = CliRunner().invoke(main, ["run", "--input", str(webdata / SAMPLE_NAME), "--variant", "webtextlike",
                                           "--webtext-urls", str(url_list), "--output", str(output), "--no-progress"])
        assert result.exit_code == 0, result.output
        return _urls(output)

    (tmp_path / "plain.txt").write_text("\n".join(_urls(sample_documents)))
    kept = webtextlike(tmp_path / "plain.txt")
    windows = b"\xef\xbb\xbf" + "\r\n".join(kept[::-1]).encode()  # a page the list keeps on its first line
    (tmp_path / "windows.txt").write_bytes(windows)
    (tmp_path / "windows.txt.gz").write_bytes(gzip.compress(windows))
    assert webtextlike(tmp_path / "windows.txt") == webtextlike(tmp_path / "windows.txt.gz") == kept
    assert len(kept) > 50


def test_a_damaged_or_cut_compressed_url_list_is_one_line(tmp_path):
    """A cut gzip list was read up to the cut, its other URLs' pages silently dropped (71 of 84 on the sample); a
    damaged one or plain text named .gz was a zlib traceback, exit 1."""
    listed = gzip.compress("".join(f"https://example.org/{n}\n" for n in range(2000)).encode())
    (tmp_path / "cut.txt.gz").write_bytes(listed[:len(listed) // 2])
    (tmp_path / "plain.txt.gz").write_text("https://example.org/\n")
    run = ("run", "--variant", "webtextlike", "--output", str(tmp_path / "out"), "--webtext-urls")
    assert _refusal(tmp_path, *run, str(tmp_path / "cut.txt.gz")) == (
        f"Error: cannot read --webtext-urls {tmp_path}/cut.txt.gz (Compressed file ended before the end-of-stream "
        "marker was reached): give a text file of URLs, one per line (gzipped when its name ends in .gz)")
    assert _refusal(tmp_path, *run, str(tmp_path / "plain.txt.gz")) == (
        f"Error: cannot read --webtext-urls {tmp_path}/plain.txt.gz (Not a gzipped file (b'ht')): give a text file of "
        "URLs, one per line (gzipped when its name ends in .gz)")


def test_a_url_list_that_is_a_folder_not_utf8_text_or_blank_is_one_line(tmp_path):
    """The job failed on them: a Beam traceback (exit 1) for a list not in UTF-8, `[Errno 21]` alone for a folder."""
    urls = tmp_path / "urls.txt"
    urls.write_bytes("https://example.org/\nhttps://example.org/café\n".encode("latin-1"))
    (tmp_path / "lists").mkdir()
    run = ("run", "--variant", "webtextlike", "--output", str(tmp_path / "out"), "--webtext-urls")
    assert _refusal(tmp_path, *run, str(urls)) == (f"Error: --webtext-urls {urls} is not UTF-8 text (line 2, byte 44): "
                                                   "give a UTF-8 text file of URLs, one per line")
    assert _refusal(tmp_path, *run, str(tmp_path / "lists")) == \
        f"Error: --webtext-urls {tmp_path / 'lists'} is a folder: give a file of URLs, one per line"
    (tmp_path / "blank.txt").write_bytes(b"\xef\xbb\xbf\r\n  \n")  # ran the job to say it kept no page, "check --input"
    assert _refusal(tmp_path, *run, str(tmp_path / "blank.txt")) == \
        f"Error: --webtext-urls {tmp_path / 'blank.txt'} names no URL: give a file of URLs, one per line"


def test_a_listed_path_that_does_not_exist_is_a_counted_input_problem(tmp_path, webdata):
    """Only the first listed path is checked up front (a list may name tens of thousands on a remote store)."""
    listing = tmp_path / "wet.paths.gz"
    listing.write_bytes(gzip.compress(f"{webdata / SAMPLE_NAME}\n{tmp_path / 'gone.warc.wet.gz'}\n".encode()))
    result = CliRunner().invoke(main, ["run", "--input-list", str(listing), "--output", str(tmp_path / "out"),
                                       "--num-shards", "1", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert read_manifest(str(tmp_path / "out")).counters["read-input"] == {
        "files": 2, "records": 335, "problem:missing_file": 1}
    assert result.output.strip().splitlines()[-1] == (
        "Warning: skipped bad input (1 missing_file) among 2 input files; each is logged above and counted under "
        "'read-input' in the manifest")


@pytest.mark.parametrize("second", ["{sample}", "{folder}/*.warc.wet.gz", "{folder}", "list"])
def test_a_file_given_twice_is_read_once(tmp_path, webdata, monkeypatch, second):
    """A file that a glob or a folder matches besides its own path was read twice ('pages in' 670 of 335 pages);
    so was a path a list names twice."""
    (tmp_path / "in").mkdir()
    shutil.copy(webdata / SAMPLE_NAME, tmp_path / "in" / SAMPLE_NAME)
    monkeypatch.chdir(tmp_path / "in")
    if second == "list":
        (tmp_path / "paths.txt").write_text(f"{tmp_path / 'in' / SAMPLE_NAME}\n" * 2)
        inputs = ["--input-list", str(tmp_path / "paths.txt")]
    else:
        inputs = ["--input", SAMPLE_NAME, "--input", second.format(sample=SAMPLE_NAME, folder=tmp_path / "in")]
    result = CliRunner().invoke(main, ["run", *inputs, "--output", str(tmp_path / "out"), "--num-shards", "1",
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert read_manifest(str(tmp_path / "out")).counters["read-input"] == {"files": 1, "records": 335}


@pytest.mark.parametrize("data", [
    "https://example.org/\nhttps://example.org/café\n".encode(),
    "https://example.org/\nhttps://example.org/café\n".encode("latin-1"),  # é alone: not UTF-8
    "https://a.org/€\nhttps://b.org/\n".encode()[:-18],  # cut inside the €: not UTF-8 at its end
    "ok\n\nhttps://b.org/€€".encode() + b"\xed\xa0\x80\n",  # a surrogate half
])
def test_url_lists_are_hashed_and_checked_a_chunk_at_a_time(data):
    """The whole list was read into memory (the real OpenWebText lists hold millions of URLs); read in chunks of
    any size, a multi-byte character cut by a chunk is whole again, and a byte that is not UTF-8 is placed as in
    the whole list."""
    try:
        data.decode("utf-8")
        expected = hashlib.sha256(data).hexdigest()
    except UnicodeDecodeError as error:
        expected = (data.count(b"\n", 0, error.start) + 1, error.start)
    for chunk_size in (1, 2, 3, 5, 1 << 20):
        try:
            found = list_sha256(io.BytesIO(data), chunk_size).sha256
        except NotUtf8Text as error:
            found = (error.line, error.byte)
        assert found == expected, chunk_size


def test_an_input_list_saved_with_a_byte_order_mark_reads_its_first_path(lists):
    """Its first path was '\ufeff/...', which does not exist: the run was refused."""
    (lists / "windows.paths").write_bytes(b"\xef\xbb\xbf" + f"{lists / SAMPLE_NAME}\r\n".encode())
    result = CliRunner().invoke(main, ["run", "--input-list", str(lists / "windows.paths"), "--output",
                                       str(lists / "out"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert read_manifest(str(lists / "out")).splits["train"].num_rows > 50
