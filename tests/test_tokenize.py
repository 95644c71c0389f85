"""`c4prep tokenize`: token shards from the real C4 sample's document shards (DirectRunner)."""
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from c4prep.cli import main
from c4prep.manifest import manifest_fingerprint, read_manifest
from c4prep.shards import read_shard
from c4prep.tokenization.token_shards import token_batch, token_schema
from c4prep.tokenization.train_vocab import VocabError, locate_vocabulary
from c4prep.tokenization.vocabulary import SentencePieceVocabulary


def digests(folder: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.glob("data-*/*.arrow"))}


@pytest.fixture(scope="module")
def tokens(sample_tokens) -> Path:
    return sample_tokens


def test_token_shards_mirror_the_document_shards(sample_documents, tokens):
    source, manifest = read_manifest(str(sample_documents)), read_manifest(str(tokens))
    assert [s.name for s in manifest.shards] == [s.name for s in source.shards]  # same layout: 3 train shards
    assert [s.num_rows for s in manifest.shards] == [s.num_rows for s in source.shards]
    assert manifest.splits.keys() == source.splits.keys() and manifest.splits["validation"].num_shards == 0
    assert sorted(p.name for p in tokens.iterdir()) == ["README.md", manifest.data_dir, "manifest.json"]
    assert sorted(p.name for p in (tokens / manifest.data_dir).iterdir()) == [s.name for s in source.shards]


def test_token_shards_equal_direct_encoding(sample_documents, tokens, sample_vocab):
    vocab = SentencePieceVocabulary(str(sample_vocab / "spm.model"))
    manifest, documents = read_manifest(str(tokens)), read_manifest(str(sample_documents))
    for shard, document_shard in zip(manifest.shards, documents.shards, strict=True):
        with pa.memory_map(manifest.shard_uri(str(tokens), shard)) as source:  # plain pyarrow, no c4prep code
            table = pa.ipc.open_stream(source).read_all()
        assert table.schema.field("ids").type == pa.list_(pa.uint16())
        assert table.schema.field("length").type == pa.int32() and table.schema.field("url").type == pa.string()
        docs = read_shard(documents.shard_uri(str(sample_documents), document_shard))
        assert table["url"].to_pylist() == docs["url"].to_pylist()  # same rows, same order
        expected = [vocab.encode(text) + [vocab.eos_id] for text in docs["text"].to_pylist()]
        assert table["ids"].to_pylist() == expected
        assert table["length"].to_pylist() == [len(ids) for ids in expected]


def test_token_shards_open_with_datasets_from_file(tokens):
    """`datasets.Dataset.from_file` (IPC stream format only) opens a token shard: the ids as `uint16` lists, the rows
    of c4prep's reader."""
    datasets = pytest.importorskip("datasets")
    manifest = read_manifest(str(tokens))
    for shard in manifest.shards:
        path = manifest.shard_uri(str(tokens), shard)
        loaded = datasets.Dataset.from_file(path)
        assert loaded.num_rows == shard.num_rows > 0
        assert loaded.features.arrow_schema.field("ids").type == pa.list_(pa.uint16())
        assert loaded.to_list() == read_shard(path).to_pylist()


def test_manifest_links_source_and_vocabulary(sample_documents, tokens, sample_vocab):
    manifest = read_manifest(str(tokens))
    card = json.loads((sample_vocab / "vocab.json").read_text())
    assert manifest.extra["source"]["fingerprint"] == manifest_fingerprint(read_manifest(str(sample_documents)))
    vocabulary = manifest.extra["vocabulary"]
    assert vocabulary["model_sha256"] == card["model"]["sha256"] == \
        hashlib.sha256((sample_vocab / "spm.model").read_bytes()).hexdigest()
    assert vocabulary["card"] == card and vocabulary["vocab_size"] == 1100
    assert manifest.schema().metadata[b"vocab_sha256"].decode() == card["model"]["sha256"]
    lengths = sum(sum(read_shard(manifest.shard_uri(str(tokens), s))["length"].to_pylist()) for s in manifest.shards)
    counters = manifest.counters["tokenize"]
    assert counters["tokens:train"] + counters.get("tokens:validation", 0) == lengths > 50_000
    assert counters["documents:train"] == manifest.splits["train"].num_rows


def test_multi_processing_cli_gives_identical_shards(sample_documents, sample_vocab, tokens, tmp_path):
    output = tmp_path / "mp"
    result = CliRunner().invoke(main, ["tokenize", "--input", str(sample_documents), "--vocab",
                                       str(sample_vocab / "spm.model"), "--output", str(output),
                                       "--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert result.exit_code == 0, result.output
    assert "tokens/s" in result.output
    assert digests(output) == digests(tokens)


def test_wide_vocabularies_use_uint32():
    assert token_schema(65_536).field("ids").type == pa.list_(pa.uint16())
    schema = token_schema(65_537)
    assert schema.field("ids").type == pa.list_(pa.uint32())
    ids = [np.array(row, dtype=np.int32) for row in ([70_000, 1], [], [5, 65_536, 1])]
    batch = token_batch(schema, ids, ["a", "b", "c"])
    assert batch.column(0).to_pylist() == [[70_000, 1], [], [5, 65_536, 1]]
    assert batch.column(1).to_numpy().tolist() == [2, 0, 3] and batch.column(1).type == pa.int32()
    assert np.array_equal(batch.column(0).values.to_numpy(), [70_000, 1, 5, 65_536, 1])


@pytest.mark.parametrize("case, message", [
    ("no-input", "no manifest.json in"),
    ("no-vocab", "vocabulary not found"),
    ("vocab-without-card", "no vocab.json in"),
    ("output-is-input", "is the input folder"),
    ("output-is-a-file", "is a file; give a folder"),
    ("vocab-not-a-model", "not a SentencePiece model"),
    ("card-of-another-model", "is not the model its vocab.json describes"),
    ("negative-extra-ids", "--extra-ids must be >= 0"),
    ("too-many-extra-ids", "--extra-ids 5,000,000,000 with the 1,000 pieces of {vocab} make more ids than token "
                           "shards can number (4,294,967,296); T5 uses --extra-ids 100"),
])
def test_cli_errors(sample_documents, sample_vocab, tmp_path, case, message):
    args = {"--input": str(sample_documents), "--vocab": str(sample_vocab), "--output": str(tmp_path / "out")}
    if case == "no-input":
        args["--input"] = str(tmp_path / "nothing")
    elif case == "no-vocab":
        args["--vocab"] = str(tmp_path / "nothing")
    elif case == "vocab-without-card":
        args["--vocab"] = str(tmp_path)
    elif case == "output-is-a-file":
        args["--output"] = str(tmp_path / "afile")
        (tmp_path / "afile").write_text("x")
    elif case == "vocab-not-a-model":
        args["--vocab"] = str(tmp_path / "notes.model")
        (tmp_path / "notes.model").write_text("not a model")
    elif case == "card-of-another-model":
        args["--vocab"] = str(tmp_path / "vocab")
        shutil.copytree(sample_vocab, tmp_path / "vocab")
        card = json.loads((tmp_path / "vocab" / "vocab.json").read_text())
        card["model"]["sha256"] = "0" * 64
        (tmp_path / "vocab" / "vocab.json").write_text(json.dumps(card))
    elif case == "negative-extra-ids":
        args["--extra-ids"] = "-1"
    elif case == "too-many-extra-ids":
        args["--extra-ids"] = "5000000000"
    else:
        args["--output"] = str(sample_documents)
    result = CliRunner().invoke(main, ["tokenize", *[part for pair in args.items() for part in pair]])
    assert result.exit_code == 2
    assert message.format(vocab=sample_vocab) in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_a_model_file_beside_another_models_card_is_used_without_that_card(sample_vocab, tmp_path):
    shutil.copy(sample_vocab / "spm.model", tmp_path / "backup.model")
    card = json.loads((sample_vocab / "vocab.json").read_text())
    (tmp_path / "vocab.json").write_text(json.dumps({**card, "model": {**card["model"], "sha256": "0" * 64}}))
    model = (sample_vocab / "spm.model").read_bytes()
    assert locate_vocabulary(str(tmp_path / "backup.model")) == (str(tmp_path / "backup.model"), model, None)
    (tmp_path / "vocab.json").write_text(json.dumps(card))
    assert locate_vocabulary(str(tmp_path / "backup.model")) == (str(tmp_path / "backup.model"), model, card)
    (tmp_path / "vocab.json").write_text("{")
    with pytest.raises(VocabError, match="is not a c4prep vocabulary card"):
        locate_vocabulary(str(tmp_path / "backup.model"))


def test_a_vocabularys_own_model_changed_since_its_card_is_refused_as_a_file_too(sample_vocab, tmp_path):
    """`--vocab VOCAB/spm.model` used a changed model that `--vocab VOCAB` refuses."""
    folder = Path(shutil.copytree(sample_vocab, tmp_path / "vocab"))
    model = (folder / "spm.model").read_bytes()
    (folder / "spm.model").write_bytes(model.replace("▁the".encode(), "▁Xhe".encode(), 1))
    for given in (folder, folder / "spm.model"):
        with pytest.raises(VocabError, match="spm.model is not the model its vocab.json describes"):
            locate_vocabulary(str(given))


def test_manifest_names_the_vocabulary_by_an_absolute_path(sample_documents, sample_vocab, tmp_path, monkeypatch):
    """A vocabulary typed as a relative path loads from another working folder (`train stage=generate`, `c4prep
    export` failed there); a URI stays as it was given."""
    from c4prep.training.stages.data_setup import token_vocabulary

    shutil.copytree(sample_vocab, tmp_path / "vocab")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["tokenize", "--input", str(sample_documents), "--vocab", "vocab",
                                       "--output", "tokens"])
    assert result.exit_code == 0, result.output
    assert read_manifest("tokens").extra["vocabulary"]["model"] == str(tmp_path / "vocab" / "spm.model")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert token_vocabulary(str(tmp_path / "tokens")).model_proto == (sample_vocab / "spm.model").read_bytes()
    uri = f"file://{sample_vocab}/spm.model"
    assert locate_vocabulary(uri)[0] == uri
