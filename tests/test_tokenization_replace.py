"""`c4prep vocab` and `c4prep tokenize` never replace an output made with other settings (unless
--allow-other-settings), and re-create one made with the same settings (real sample documents)."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from c4prep.cli import main
from c4prep.manifest import build_manifest, manifest_fingerprint, read_listed_shard, read_manifest, write_manifest
from c4prep.shards import shard_name, write_shard
from c4prep.tokenization.train_vocab import VocabConfig, train_vocabulary


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def shard_digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.glob("data-*/*"))}


def last_line(result) -> str:
    return result.output.strip().splitlines()[-1]


def refusal(output: Path, held: str, old: str, new: str) -> str:
    return (f"Error: {output} holds {held} made with {old}; this run asks for {new}, so it left {output} unchanged: "
            "give another --output, or pass --allow-other-settings to replace it")


def fingerprinted(folder: Path) -> str:
    return f"{folder} (fingerprint {manifest_fingerprint(read_manifest(str(folder)))[:12]})"


def hashed(model: Path) -> str:
    return f"{model} (SHA-256 {hashlib.sha256(model.read_bytes()).hexdigest()[:12]})"


@pytest.fixture(scope="module")
def other_vocab(sample_documents, tmp_path_factory) -> Path:
    """An 800-piece vocabulary of the sample documents."""
    output = tmp_path_factory.mktemp("other-vocab")
    train_vocabulary(VocabConfig(inputs=[str(sample_documents)], output=str(output), vocab_size=800))
    return output


@pytest.fixture(scope="module")
def one_shard_documents(sample_documents, tmp_path_factory) -> Path:
    """The sample's train documents in one shard: the same text as `sample_documents`, another fingerprint."""
    manifest = read_manifest(str(sample_documents))
    tables = [read_listed_shard(str(sample_documents), manifest, shard) for shard in manifest.shards]
    folder = tmp_path_factory.mktemp("one-shard")
    info = write_shard(str(folder / shard_name("train", 0, 1)), manifest.schema(),
                       [batch for table in tables for batch in table.to_batches()])
    write_manifest(str(folder), build_manifest(manifest.schema(), [info], config={}, counters={}))
    return folder


@pytest.mark.parametrize("change", ["--format", "--extra-ids", "--input", "--vocab"])
def test_tokenize_refuses_to_replace_token_shards_made_with_other_settings(change, sample_documents, sample_vocab,
                                                                          sample_tokens, one_shard_documents,
                                                                          other_vocab, tmp_path):
    """A training run reads the token shards: other shards in their place broke it (`--format parquet` deleted the
    Arrow shards it was using)."""
    output = shutil.copytree(sample_tokens, tmp_path / "tokens")
    before = snapshot(output)
    args = {"--input": str(sample_documents), "--vocab": str(sample_vocab), "--output": str(output)}
    old, new = {
        "--format": ("--format arrow", "--format parquet"),
        "--extra-ids": ("--extra-ids 100", "--extra-ids 50"),
        "--input": (f"--input {fingerprinted(sample_documents)}", f"--input {fingerprinted(one_shard_documents)}"),
        "--vocab": (f"--vocab {hashed(sample_vocab / 'spm.model')}", f"--vocab {hashed(other_vocab / 'spm.model')}"),
    }[change]
    args[change] = new.split(" ")[1]
    result = CliRunner().invoke(main, ["tokenize", *[part for pair in args.items() for part in pair]])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert last_line(result) == refusal(output, "token shards", old, new)
    assert snapshot(output) == before

    result = CliRunner().invoke(main, ["tokenize", *[part for pair in args.items() for part in pair],
                                       "--allow-other-settings"])
    assert result.exit_code == 0, result.output
    assert snapshot(output) != before


def test_tokenize_with_the_same_settings_recreates_a_deleted_shard(sample_documents, sample_vocab, sample_tokens,
                                                                   tmp_path, monkeypatch):
    """The same input and vocabulary, named by other paths (a relative folder, the .model file), are the same
    settings: the run goes on and gives the same shards."""
    output = shutil.copytree(sample_tokens, tmp_path / "tokens")
    expected = shard_digests(output)
    next(output.glob("data-*/*")).unlink()
    shutil.copytree(sample_documents, tmp_path / "documents")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["tokenize", "--input", "documents", "--vocab", str(sample_vocab / "spm.model"),
                                       "--output", "tokens"])
    assert result.exit_code == 0, result.output
    assert shard_digests(output) == expected


@pytest.mark.parametrize("change", ["--vocab-size", "--num-threads", "--input"])
def test_vocab_refuses_to_replace_a_vocabulary_made_with_other_settings(change, sample_documents, sample_vocab,
                                                                        one_shard_documents, tmp_path):
    """Token shards name their vocabulary by SHA-256: another model in its place leaves them unverifiable."""
    output = shutil.copytree(sample_vocab, tmp_path / "vocab")
    before = snapshot(output)
    args = {"--input": str(sample_documents), "--output": str(output), "--vocab-size": "1000"}
    old, new = {
        "--vocab-size": ("--vocab-size 1000", "--vocab-size 800"),
        "--num-threads": ("--num-threads 16", "--num-threads 2"),
        "--input": (f"--input {fingerprinted(sample_documents)}", f"--input {fingerprinted(one_shard_documents)}"),
    }[change]
    args[change] = new.split(" ")[1]
    result = CliRunner().invoke(main, ["vocab", *[part for pair in args.items() for part in pair]])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert last_line(result) == refusal(output, "a vocabulary", old, new)
    assert snapshot(output) == before

    result = CliRunner().invoke(main, ["vocab", *[part for pair in args.items() for part in pair],
                                       "--allow-other-settings"])
    assert result.exit_code == 0, result.output
    config = json.loads((output / "vocab.json").read_text())["config"]
    assert {"--vocab-size": config["vocab_size"] == 800, "--num-threads": config["num_threads"] == 2,
            "--input": config["inputs"] == [str(one_shard_documents)]}[change]


def test_vocab_with_the_same_settings_gives_the_same_model(sample_documents, sample_vocab, tmp_path):
    output = shutil.copytree(sample_vocab, tmp_path / "vocab")
    model = (output / "spm.model").read_bytes()
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(output),
                                       "--vocab-size", "1000"])
    assert result.exit_code == 0, result.output
    assert (output / "spm.model").read_bytes() == model


@pytest.mark.parametrize("card", [
    '{"!": 0, "hello": 1}\n',  # a GPT-2 tokenizer's vocab.json (beside its merges.txt)
    "truncated {",  # c4prep's card, damaged
])
def test_vocab_refuses_a_folder_whose_vocab_json_is_not_its_card(card, sample_documents, sample_vocab, tmp_path):
    """Another tool's vocab.json was replaced silently; a damaged card let other settings replace an intact model."""
    output = shutil.copytree(sample_vocab, tmp_path / "vocab")
    (output / "vocab.json").write_text(card)
    before = snapshot(output)
    args = ["vocab", "--input", str(sample_documents), "--output", str(output), "--vocab-size", "800"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert last_line(result) == (
        f"Error: {output}/vocab.json is not a c4prep vocabulary card (damaged, or another tool's), so this run cannot "
        f"tell what it would replace and left {output} unchanged: restore it, give another --output, or pass "
        "--allow-other-settings to replace it")
    assert snapshot(output) == before
    assert CliRunner().invoke(main, [*args, "--allow-other-settings"]).exit_code == 0


class _FullDisk:
    """A filesystem that is full once ``room["files"]`` more files were opened for writing (shared by every
    wrapper of the run)."""

    def __init__(self, fs, room: dict[str, int]) -> None:
        self.fs, self.room = fs, room

    def open_output_stream(self, path, *args, **kwargs):
        self.room["files"] -= 1
        if self.room["files"] < 0:
            raise OSError(28, "No space left on device")
        return self.fs.open_output_stream(path, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.fs, name)


@pytest.mark.parametrize("room", [1, 2, 3])  # the write probe, the model, the vocab: then the card would not fit
def test_a_vocab_run_that_cannot_write_leaves_the_vocabulary_as_it_was(room, sample_documents, sample_vocab,
                                                                       tmp_path, monkeypatch):
    """A full disk (or a kill) while the vocabulary was written left spm.model and no card: the vocabulary was lost
    and neither `vocab` nor `tokenize` would take the folder again."""
    import c4prep.shards

    output = shutil.copytree(sample_vocab, tmp_path / "vocab")
    before = snapshot(output)
    resolve, left = c4prep.shards.resolve_uri, {"files": room}
    monkeypatch.setattr(c4prep.shards, "resolve_uri", lambda uri: (_FullDisk(resolve(uri)[0], left), resolve(uri)[1]))
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(output),
                                       "--vocab-size", "1000", "--seed", "0"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert last_line(result) == f"Error: cannot write the vocabulary to {output}: [Errno 28] No space left on device"
    assert snapshot(output) == before
