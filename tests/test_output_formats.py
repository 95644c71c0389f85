"""`--format arrow|parquet|jsonl.gz` on real runs of the WET sample: the same rows in the same order, the same bytes
on every run, hashes checked by the readers, no shard for a split without rows, `datasets.load_dataset(FOLDER)`
through the dataset card, and the card's content."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from c4prep.cli import main
from c4prep.dataset_card import _size_category
from c4prep.manifest import SplitInfo, manifest_fingerprint, read_listed_shard, read_manifest
from c4prep.schemas import DOCUMENT_SCHEMA
from c4prep.tokenization.train_vocab import VocabConfig, train_vocabulary

SAMPLE_NAME = "CC-MAIN-2019-30-sample-a.warc.wet.gz"
OTHER_FORMATS = ("parquet", "jsonl.gz")


def _invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def _tables(folder: Path) -> dict[str, list[dict]]:
    """The rows of every listed shard, checked against the manifest, by shard name without its suffix."""
    manifest = read_manifest(str(folder))
    return {shard.name.split(".")[0]: read_listed_shard(str(folder), manifest, shard).to_pylist()
            for shard in manifest.shards}


def _digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.glob("data-*/*"))}


@pytest.fixture(scope="module")
def documents(tmp_path_factory, webdata, sample_documents) -> dict[str, Path]:
    """The sample's corpus (3 shards per split) in every format: Arrow from conftest, the others from the CLI."""
    folders = {"arrow": sample_documents}
    for shard_format in OTHER_FORMATS:
        folders[shard_format] = tmp_path_factory.mktemp(shard_format) / "en"
        result = _invoke("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(folders[shard_format]),
                         "--num-shards", "3", "--format", shard_format)
        assert result.exit_code == 0, result.output
    return folders


@pytest.fixture(scope="module")
def tokens(tmp_path_factory, documents, sample_tokens, sample_vocab) -> dict[str, Path]:
    """Token shards of the Arrow corpus in every format (Arrow from conftest, the others from the CLI)."""
    folders = {"arrow": sample_tokens}
    for shard_format in OTHER_FORMATS:
        folders[shard_format] = tmp_path_factory.mktemp("tokens") / shard_format
        result = _invoke("tokenize", "--input", str(documents["arrow"]), "--vocab", str(sample_vocab),
                         "--output", str(folders[shard_format]), "--format", shard_format)
        assert result.exit_code == 0, result.output
    return folders


@pytest.mark.parametrize("shard_format", OTHER_FORMATS)
def test_document_shards_hold_the_arrow_rows_in_the_same_order(documents, shard_format):
    arrow, other = read_manifest(str(documents["arrow"])), read_manifest(str(documents[shard_format]))
    assert other.shard_format == shard_format and other.format_version == 4
    assert [s.name for s in other.shards] == [s.name.replace(".arrow", f".{shard_format}") for s in arrow.shards]
    assert other.splits.keys() == arrow.splits.keys() and other.schema() == DOCUMENT_SCHEMA
    assert [s.num_rows for s in other.shards] == [s.num_rows for s in arrow.shards]
    assert _tables(documents[shard_format]) == _tables(documents["arrow"])
    assert other.counters == arrow.counters and other.extra == arrow.extra


@pytest.mark.parametrize("shard_format", OTHER_FORMATS)
def test_the_same_run_gives_the_same_bytes(documents, webdata, tmp_path, shard_format):
    again = tmp_path / "again"
    result = _invoke("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(again), "--num-shards", "3",
                     "--format", shard_format)
    assert result.exit_code == 0, result.output
    assert _digests(again) == _digests(documents[shard_format]) and len(_digests(again)) == 3


@pytest.mark.parametrize("shard_format", ["arrow", *OTHER_FORMATS])
def test_a_split_without_rows_is_listed_with_no_shard(documents, tokens, shard_format):
    for folder in (documents[shard_format], tokens[shard_format]):
        manifest = read_manifest(str(folder))
        assert manifest.splits["validation"] == SplitInfo(0, 0, 0)  # 0.1 % of URLs: none of the sample's pages
        assert manifest.splits["train"].num_shards == 3
        assert sorted(path.name for path in (folder / manifest.data_dir).iterdir()) == [s.name for s in manifest.shards]


@pytest.mark.parametrize("shard_format", OTHER_FORMATS)
def test_token_shards_hold_the_arrow_rows_and_train_refuses_them(tokens, shard_format):
    from c4prep.training.data import TokenDataError
    from c4prep.training.stages.data_setup import token_manifest

    assert _tables(tokens[shard_format]) == _tables(tokens["arrow"])
    assert read_manifest(str(tokens[shard_format])).schema() == read_manifest(str(tokens["arrow"])).schema()
    with pytest.raises(TokenDataError, match="train reads Arrow token shards: re-run tokenize with --format arrow"):
        token_manifest(str(tokens[shard_format]))


def test_vocab_and_tokenize_read_documents_of_every_format(documents, tokens, sample_vocab, tmp_path):
    """The vocabulary and the token shards made from Parquet and JSON Lines documents are those made from Arrow."""
    vocab = tmp_path / "vocab"
    train_vocabulary(VocabConfig(inputs=[str(documents["parquet"])], output=str(vocab), vocab_size=1000))
    assert (vocab / "spm.model").read_bytes() == (sample_vocab / "spm.model").read_bytes()
    result = _invoke("tokenize", "--input", str(documents["jsonl.gz"]), "--vocab", str(sample_vocab),
                     "--output", str(tmp_path / "tokens"))
    assert result.exit_code == 0, result.output
    assert _digests(tmp_path / "tokens") == _digests(tokens["arrow"])


def test_vocab_and_tokenize_refuse_a_flipped_byte_in_a_parquet_shard(documents, sample_vocab, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(documents["parquet"], damaged)
    manifest = read_manifest(str(damaged))
    path = Path(manifest.shard_uri(str(damaged), manifest.shards[1]))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(data))
    expected = f"Error: {path} does not match its recorded SHA-256 (same size, other bytes)"
    for args in (["vocab", "--output", str(tmp_path / "vocab"), "--vocab-size", "600"],
                 ["tokenize", "--vocab", str(sample_vocab), "--output", str(tmp_path / "tokens")]):
        result = _invoke(*args, "--input", str(damaged))
        assert result.exit_code == 2 and result.output.strip().splitlines()[-1].startswith(expected), result.output
    assert not (tmp_path / "tokens" / "manifest.json").exists()


@pytest.mark.parametrize("command", ["run", "tokenize"])
def test_an_unknown_format_is_one_line(command, tmp_path):
    result = _invoke(command, "--format", "csv", "--output", str(tmp_path / "out"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("Error: Invalid value for '--format': 'csv' is not one of 'arrow', 'parquet', 'jsonl.gz'.")
    assert line.endswith(f" {command} --help`)")
    assert not (tmp_path / "out").exists()


def _card(folder: Path) -> tuple[dict, str]:
    _, header, body = (folder / "README.md").read_text(encoding="utf-8").split("---\n", 2)
    return yaml.safe_load(header), body


def test_the_dataset_card_describes_the_corpus(documents):
    folder = documents["parquet"]
    manifest = read_manifest(str(folder))
    header, body = _card(folder)
    assert header["license"] == "odc-by" and header["language"] == ["en"]
    assert header["task_categories"] == ["text-generation"] and header["size_categories"] == ["n<1K"]
    assert header["configs"] == [{"config_name": "default", "data_files": [
        {"split": "train", "path": [f"{manifest.data_dir}/{shard.name}" for shard in manifest.shards]}]}]
    funnel = manifest.extra["funnel"]
    train = manifest.splits["train"]
    for text in ["# C4 en (c4prep)", manifest.config["variant"]["description"], "rules of TFDS c4 3.1.0",
                 "from 1 input file(s)", "- `dedup`: `\"sentences\"`", f"{funnel['pages_in']:,} pages in",
                 "| `english-filter` | langdetect English >= 0.99 |", f"| train | {train.num_rows:,} | 3 |",
                 "| validation | 0 | 0 | 0 |", "Parquet, zstd-compressed", "| `text` | `string` |",
                 "Common Crawl terms of use", "ODC-BY 1.0", "LDNOOBW"]:
        assert text in body, text


def test_the_token_card_names_the_corpus_and_the_vocabulary(documents, tokens):
    manifest = read_manifest(str(tokens["jsonl.gz"]))
    header, body = _card(tokens["jsonl.gz"])
    assert header["configs"][0]["data_files"][0]["path"] == [f"{manifest.data_dir}/{s.name}" for s in manifest.shards]
    vocabulary = manifest.extra["vocabulary"]
    for text in [manifest_fingerprint(read_manifest(str(documents["arrow"]))), vocabulary["model_sha256"],
                 "1,100 ids (100 sentinels)", "JSON Lines, gzip-compressed", "| `ids` | `list<item: uint16>` |",
                 "JSON Lines carry no types: readers infer them"]:
        assert text in body, text


@pytest.mark.parametrize("shard_format", ["arrow", *OTHER_FORMATS])
def test_load_dataset_reads_the_folder(documents, tokens, tmp_path, monkeypatch, shard_format):
    """`datasets.load_dataset(FOLDER)` finds the splits through the card: train only, as the manifest lists it."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    for folder in (documents[shard_format], tokens[shard_format]):
        loaded = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "cache"))
        assert list(loaded) == ["train"]
        rows = [row for name, table in _tables(folder).items() if name.startswith("train-") for row in table]
        assert loaded["train"].num_rows == len(rows) > 50
        assert loaded["train"]["url"] == [row["url"] for row in rows]  # the manifest's order


@pytest.mark.parametrize("shard_format", OTHER_FORMATS)
def test_load_dataset_reads_a_folder_with_empty_shards(webdata, tmp_path, monkeypatch, shard_format):
    """A split of fewer rows than shards keeps its empty shards; datasets 5 failed on an empty Parquet or JSON
    Lines file listed before another (IndexError), so the card lists the files that hold rows."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "en"
    result = _invoke("run", "--input", str(webdata / SAMPLE_NAME), "--output", str(folder), "--num-shards", "100",
                     "--format", shard_format, "--no-progress")
    assert result.exit_code == 0, result.output
    manifest = read_manifest(str(folder))
    listed = _card(folder)[0]["configs"][0]["data_files"][0]["path"]
    assert listed == [f"{manifest.data_dir}/{shard.name}" for shard in manifest.shards if shard.num_rows]
    assert 0 < len(listed) < manifest.splits["train"].num_shards == 100
    loaded = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "cache"))
    rows = [row for table in _tables(folder).values() for row in table]
    assert loaded["train"]["url"] == [row["url"] for row in rows]


@pytest.mark.parametrize("rows,category", [(999, "n<1K"), (999_999_999, "100M<n<1B"), (1_000_000_000, "1B<n<10B"),
                                           (156_000_000_000, "100B<n<1T"), (10**12, "n>1T")])
def test_the_size_category_is_one_the_hub_knows(rows, category):
    """A corpus of a billion rows or more was tagged `n>1B`, which is not one of the Hub's categories."""
    datasets = pytest.importorskip("datasets")
    known = json.loads((Path(datasets.__file__).parent / "utils/resources/size_categories.json").read_text())
    assert _size_category(rows) == category and category in known
