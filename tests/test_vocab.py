"""Vocabulary stage: SentencePiece training on real document shards, and the Vocabulary classes."""
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import sentencepiece as spm
from click.testing import CliRunner

from c4prep.cli import main
from c4prep.manifest import build_manifest, manifest_fingerprint, read_manifest, write_manifest
from c4prep.schemas import DOCUMENT_SCHEMA
from c4prep.shards import batched, shard_name, write_shard
from c4prep.tokenization.sampling import BottomKSample, splitmix64, stream_key
from c4prep.tokenization.train_vocab import VocabConfig, mixture_sizes, train_vocabulary
from c4prep.tokenization.vocabulary import ByteVocabulary, SentencePieceVocabulary



def write_documents(folder: Path, texts: list[str], num_shards: int = 2) -> Path:
    """Texts as `train` document shards with a manifest, like `c4prep run` writes."""
    infos = []
    for index in range(num_shards):
        rows = [{"url": f"ptb://doc/{i}", "text": text, "timestamp": "", "content_type": "text/plain",
                 "content_length": len(text)} for i, text in enumerate(texts) if i % num_shards == index]
        uri = str(folder / shard_name("train", index, num_shards))
        infos.append(write_shard(uri, DOCUMENT_SCHEMA, batched(rows, DOCUMENT_SCHEMA)))
    write_manifest(str(folder), build_manifest(DOCUMENT_SCHEMA, infos, config={}, counters={}))
    return folder


def texts(folder: Path) -> list[str]:
    """Every document text of a shard folder, read with plain pyarrow."""
    found = []
    for path in sorted(folder.glob("data-*/*.arrow")):
        with pa.memory_map(str(path)) as source:
            found += pa.ipc.open_stream(source).read_all()["text"].to_pylist()
    return found


@pytest.fixture(scope="module")
def ptb_docs(tmp_path_factory, shared_data) -> Path:
    lines = (shared_data / "ptb" / "train.txt").read_text().splitlines()
    documents = ["\n".join(lines[i:i + 20]) for i in range(0, len(lines), 20)]
    return write_documents(tmp_path_factory.mktemp("ptb"), documents)


@pytest.fixture(scope="module")
def ptb_vocab(tmp_path_factory, ptb_docs) -> Path:
    output = tmp_path_factory.mktemp("ptb-vocab")
    train_vocabulary(VocabConfig(inputs=[str(ptb_docs)], output=str(output), vocab_size=2000,
                                 input_sentence_size=8000, seed=1, character_coverage=1.0))
    return output


def test_card_files_and_t5_settings(sample_vocab, sample_documents):
    card = json.loads((sample_vocab / "vocab.json").read_text())
    assert sorted(p.name for p in sample_vocab.iterdir()) == ["spm.model", "spm.vocab", "vocab.json"]
    assert card["sentences"] == {"seen": 806, "used": 805, "too_long": 1}  # one C4 line exceeds 4192 bytes
    (source,) = card["sources"]
    assert source["fingerprint"] == manifest_fingerprint(read_manifest(str(sample_documents)))
    assert source["documents"] == read_manifest(str(sample_documents)).splits["train"].num_rows
    assert card["sentencepiece_version"] == spm.__version__
    options = card["trainer_options"]
    assert (options["model_type"], options["pad_id"], options["eos_id"], options["unk_id"], options["bos_id"]) == \
        ("unigram", 0, 1, 2, -1)
    assert (options["normalization_rule_name"], options["character_coverage"]) == ("nmt_nfkc", 0.9995)
    sp = spm.SentencePieceProcessor(model_file=str(sample_vocab / "spm.model"))
    vocab_lines = (sample_vocab / "spm.vocab").read_text().splitlines()
    assert [line.split("\t")[0] for line in vocab_lines] == [sp.id_to_piece(i) for i in range(1000)]
    assert card["model"]["num_pieces"] == sp.get_piece_size() == 1000


def test_special_ids(sample_vocab, sample_documents):
    vocab = SentencePieceVocabulary(str(sample_vocab / "spm.model"))
    assert (vocab.pad_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2)
    assert vocab.base_vocab_size == 1000 and vocab.vocab_size == 1100
    sp = spm.SentencePieceProcessor(model_file=str(sample_vocab / "spm.model"))
    assert [sp.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"] and sp.bos_id() == -1
    ids = [token for text in texts(sample_documents) for token in vocab.encode(text)]
    assert 0 not in ids and 1 not in ids  # no pad, no EOS, no BOS added by encode
    assert vocab.unk_id in vocab.encode("\u4e00\u4e8c\u4e09")  # CJK is not covered by this English vocabulary


def test_round_trip_c4(sample_vocab, sample_documents):
    vocab = SentencePieceVocabulary(str(sample_vocab / "spm.model"))
    documents = texts(sample_documents)
    clean = [text for text in documents if vocab.unk_id not in vocab.encode(text)]
    assert len(clean) >= 0.8 * len(documents)
    for text in clean:
        assert vocab.decode(vocab.encode(text)) == vocab.normalize(text)
    assert vocab.encode_batch(documents, num_threads=2) == [vocab.encode(text) for text in documents]


def test_round_trip_ptb(ptb_vocab, shared_data):
    vocab = SentencePieceVocabulary(str(ptb_vocab / "spm.model"))
    # The trainer reads a literal "<unk>" as its meta piece, so PTB's only '<' and '>' are never learned.
    lines = [line for line in (shared_data / "ptb" / "valid.txt").read_text().splitlines() if "<unk>" not in line]
    encoded = [vocab.encode(line) for line in lines]
    clean = [(line, ids) for line, ids in zip(lines, encoded) if vocab.unk_id not in ids]
    assert len(clean) > 0.99 * len(lines) > 1500  # only characters absent from the 8,000 sampled lines are unknown
    for line, ids in clean:
        assert vocab.decode(ids) == line.strip()  # PTB is already normalised: the round trip is exact


def test_sentinels(sample_vocab):
    vocab = SentencePieceVocabulary(str(sample_vocab / "spm.model"), extra_ids=100)
    assert vocab.sentinel_id(0) == 1099 and vocab.sentinel_id(99) == 1000
    with pytest.raises(ValueError):
        vocab.sentinel_id(100)
    the, sat = vocab.encode("The"), vocab.encode("sat")
    # seqio's sentinels are the pieces "▁<extra_id_k>": a space before, except at the start
    assert vocab.decode(the + [vocab.sentinel_id(0)] + sat) == "The <extra_id_0> sat"
    assert vocab.decode([vocab.sentinel_id(1)] + sat + [vocab.sentinel_id(2)]) == "<extra_id_1> sat <extra_id_2>"
    assert vocab.decode(the + [vocab.eos_id] + sat) == "The"  # stops at EOS
    assert vocab.decode([vocab.pad_id] + the + [vocab.pad_id]) == "The"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([1100])


def test_literal_sentinel_text_stays_text(sample_vocab):
    vocab = SentencePieceVocabulary(str(sample_vocab / "spm.model"))
    text = "see <extra_id_0> and <extra_id_99> here"
    ids = vocab.encode(text)
    assert max(ids) < vocab.base_vocab_size
    assert vocab.sentinel_id(0) not in ids
    assert vocab.decode(ids) == text


def test_pickle_keeps_the_model(sample_vocab):
    vocab = SentencePieceVocabulary(str(sample_vocab / "spm.model"), extra_ids=7)
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy.vocab_size == 1007 and copy.encode("Hello world.") == vocab.encode("Hello world.")


def test_byte_vocabulary(sample_documents):
    vocab = ByteVocabulary()
    assert (vocab.pad_id, vocab.eos_id, vocab.unk_id, vocab.vocab_size) == (0, 1, 2, 359)
    assert vocab.encode("A") == [ord("A") + 3] and vocab.encode("é") == [0xC3 + 3, 0xA9 + 3]
    for text in texts(sample_documents):
        assert vocab.decode(vocab.encode(text)) == text
    assert vocab.sentinel_id(0) == 358 and vocab.sentinel_id(99) == 259
    assert vocab.decode(vocab.encode("a") + [358] + vocab.encode("b") + [1, 70]) == "a<extra_id_0>b"
    assert max(vocab.encode("<extra_id_0>")) < 259


def test_bottom_k_sample_is_a_pure_function_of_seed_and_stream():
    items = [f"s{i}" for i in range(5000)]
    whole = BottomKSample(300, stream_key(7, 0))
    whole.add(items)
    chunked = BottomKSample(300, stream_key(7, 0))
    for start in range(0, len(items), 37):
        chunked.add(items[start:start + 37])
    assert whole.smallest(300) == chunked.smallest(300)
    keys = splitmix64(np.arange(len(items), dtype=np.uint64) + np.uint64(stream_key(7, 0)))
    expected = sorted(sorted(range(len(items)), key=lambda i: int(keys[i]))[:300])  # the 300 smallest keys, brute force
    assert whole.smallest(300) == [(i, items[i]) for i in expected]
    assert len(chunked) == 300 and chunked.seen == 5000
    assert set(whole.smallest(100)) < set(whole.smallest(300))  # a smaller sample is a subset
    other = BottomKSample(300, stream_key(8, 0))
    other.add(items)
    assert other.smallest(300) != whole.smallest(300)
    assert all(a[0] < b[0] for a, b in zip(whole.smallest(300), whole.smallest(300)[1:]))  # stream order
    assert 2000 < sum(position for position, _ in whole.smallest(300)) / 300 < 3000  # spread over the stream


def test_training_is_deterministic_with_a_seed(sample_documents, tmp_path):
    def train(name: str, seed: int) -> bytes:
        config = VocabConfig(inputs=[str(sample_documents)], output=str(tmp_path / name), vocab_size=500,
                             input_sentence_size=400, seed=seed)
        card = train_vocabulary(config).card
        assert card["sentences"]["used"] == 400 and card["sentences"]["seen"] == 806
        return (tmp_path / name / "spm.model").read_bytes()

    first = train("a", seed=3)
    assert train("b", seed=3) == first
    assert train("c", seed=4) != first


def test_language_ratio_mixes_exactly(sample_documents, ptb_docs, tmp_path):
    config = VocabConfig(inputs=[str(sample_documents), str(ptb_docs)], output=str(tmp_path), vocab_size=500,
                         input_sentence_size=1200, language_ratio=[3, 1])
    card = train_vocabulary(config).card
    # budgets 900 and 300, but C4 has only 805 sentences: 268 units of 3:1
    assert [source["sentences_used"] for source in card["sources"]] == [804, 268]
    assert [source["ratio"] for source in card["sources"]] == [3, 1]
    assert card["sentences"]["used"] == 1072
    assert mixture_sizes([805, 181], [10, 1]) == [800, 80]
    assert mixture_sizes([1818, 181], [10, 1]) == [1810, 181]


def test_natural_mix_counts_each_input(sample_documents, ptb_docs, tmp_path):
    config = VocabConfig(inputs=[str(sample_documents), str(ptb_docs)], output=str(tmp_path), vocab_size=500,
                         input_sentence_size=2000)
    card = train_vocabulary(config).card
    used = [source["sentences_used"] for source in card["sources"]]
    assert sum(used) == card["sentences"]["used"] == 2000
    assert 0 < used[0] < 200 < used[1]  # C4 has 805 of the 42,873 sentences


def test_cli_vocab(sample_documents, tmp_path):
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(tmp_path / "v"),
                                       "--vocab-size", "800"])
    assert result.exit_code == 0, result.output
    assert "806 sentences seen (1 too long), 805 used" in result.output
    assert f"Wrote {tmp_path / 'v'}/spm.model (800 pieces)" in result.output and "Warning" not in result.output
    assert SentencePieceVocabulary(str(tmp_path / "v" / "spm.model")).base_vocab_size == 800


def test_cli_vocab_says_when_the_model_has_another_size(sample_documents, tmp_path):
    """SentencePiece's char model has one piece per character kept, whatever --vocab-size asks."""
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(tmp_path / "v"),
                                       "--model-type", "char", "--vocab-size", "300"])
    assert result.exit_code == 0, result.output
    pieces = SentencePieceVocabulary(str(tmp_path / "v" / "spm.model")).base_vocab_size
    assert pieces != 300 and result.output.strip().splitlines()[-1] == (
        f"Warning: the char model has {pieces:,} pieces, not the 300 of --vocab-size")


@pytest.mark.parametrize("args, message", [
    (["--language-ratio", "10:1"], "--language-ratio needs one positive weight per --input (1)"),
    (["--language-ratio", "ten"], "is not positive integers"),
    (["--split", "test"], "has no split 'test'"),
    (["--language-ratio", "\u00b2"], "is not positive integers"),  # "²".isdigit() is True, int("²") fails
    (["--character-coverage", "0.9"], "--character-coverage must be in [0.98, 1]"),
    (["--num-threads", "0"], "--num-threads must be in [1, 1024]"),
    (["--input", "{documents}/."], "--input {documents}/. is given twice (its sentences would count double): give each "
                                 "once, and weigh them with --language-ratio"),
])
def test_cli_vocab_errors(sample_documents, tmp_path, args, message):
    args = [arg.format(documents=sample_documents) for arg in args]
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(tmp_path), *args])
    assert result.exit_code != 0
    assert message.format(documents=sample_documents) in result.output
    assert "Traceback" not in result.output and not (tmp_path / "vocab.json").exists()


def test_cli_vocab_fails_before_sampling_on_a_ratio_larger_than_the_sample_or_a_file_as_output(sample_documents,
                                                                                               tmp_path):
    copy = shutil.copytree(sample_documents, tmp_path / "copy")
    two = ["vocab", "--input", str(sample_documents), "--input", str(copy)]
    result = CliRunner().invoke(main, [*two, "--language-ratio", "10:1", "--input-sentence-size", "5",
                                       "--output", str(tmp_path)])
    assert "--input-sentence-size 5 cannot hold the --language-ratio 10:1: give at least 11" in result.output
    (tmp_path / "afile").write_text("x")
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(tmp_path / "afile")])
    assert result.exit_code == 2 and "is a file; give a folder" in result.output and "Traceback" not in result.output


def test_cli_vocab_names_a_listed_shard_that_is_missing(sample_documents, tmp_path):
    broken = tmp_path / "docs"
    shutil.copytree(sample_documents, broken)
    manifest = read_manifest(str(broken))
    missing = manifest.shards[0].name
    Path(manifest.shard_uri(str(broken), manifest.shards[0])).unlink()
    result = CliRunner().invoke(main, ["vocab", "--input", str(broken), "--output", str(tmp_path / "v")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{missing}, listed in its folder's manifest, cannot be read" in result.output


def test_cli_vocab_too_large_suggests_a_size(sample_documents, tmp_path):
    """SentencePiece's error becomes one line naming the largest size this corpus allows."""
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(tmp_path),
                                       "--vocab-size", "32000"])
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    suggested = int(error.split("use --vocab-size ")[1].split()[0])
    assert 1000 < suggested < 32000


def test_cli_vocab_too_small_for_the_characters_names_c4preps_options(sample_documents, tmp_path):
    """SentencePiece's error named its own spelling, --character_coverage; now the smallest size that works."""
    args = ["vocab", "--input", str(sample_documents), "--output", str(tmp_path / "v"), "--vocab-size"]
    result = CliRunner().invoke(main, [*args, "5"])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1] == (
        "Error: --vocab-size 5 is too small for this corpus: its characters (at --character-coverage 0.9995) need "
        "190 pieces with pad, eos and unk; use --vocab-size 190 or more, or a lower --character-coverage")
    assert CliRunner().invoke(main, [*args, "190"]).exit_code == 0
    args[4] = str(tmp_path / "w")
    result = CliRunner().invoke(main, [*args, "5", "--character-coverage", "0.98"])  # already the lowest
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1].endswith("use --vocab-size 51 or more")


def test_cli_char_vocab_too_small_for_the_characters_is_refused_as_unigrams(sample_documents, tmp_path):
    """A char model of 20 pieces was written: SentencePiece kept the 17 commonest characters and made every other
    one unk without a word, where unigram and bpe refuse the same size."""
    args = ["vocab", "--input", str(sample_documents), "--model-type", "char", "--output"]
    result = CliRunner().invoke(main, [*args, str(tmp_path / "v"), "--vocab-size", "20"])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1] == (
        "Error: --vocab-size 20 is too small for this corpus: its characters (at --character-coverage 0.9995) need "
        "190 pieces with pad, eos and unk; use --vocab-size 190 or more, or a lower --character-coverage")
    assert not (tmp_path / "v").exists()
    assert CliRunner().invoke(main, [*args, str(tmp_path / "v"), "--vocab-size", "190"]).exit_code == 0
    assert json.loads((tmp_path / "v" / "vocab.json").read_text())["model"]["num_pieces"] == 190


@pytest.mark.parametrize("size", ["2147483647", "3000000000"])
def test_cli_vocab_size_beyond_sentencepieces_range_is_one_line(sample_documents, tmp_path, size):
    """2**31 - 1 trained without end on the sample (an overflow inside SentencePiece); 3e9 was its traceback."""
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(tmp_path / "v"),
                                       "--vocab-size", size])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1] == (
        f"Error: --vocab-size must be in [4, 1,073,741,824] (pad, eos, unk and one piece; the most SentencePiece's "
        f"32-bit trainer takes), got {size}")


def test_cli_vocab_bpe_too_large_is_one_line_without_sentencepieces_log(sample_documents, tmp_path, capfd):
    """SentencePiece's C++ log wrote two lines of its own to stderr before ours."""
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--output", str(tmp_path / "v"),
                                       "--vocab-size", "32000", "--model-type", "bpe", "--num-threads", "1"])
    assert result.exit_code == 2 and "use --vocab-size" in result.output
    assert capfd.readouterr().err == ""


def test_cli_vocab_input_without_sentences_in_a_mixture_says_to_drop_it(sample_documents, tmp_path):
    """"fewer sentences than its --language-ratio weight; lower the weights" for an input of none: no weight helps."""
    (tmp_path / "short.jsonl").write_text('{"text": "Too short.", "url": "https://example.org/", "timestamp": '
                                          '"2019-04-25T12:57:54Z"}\n')
    empty = tmp_path / "empty"
    result = CliRunner().invoke(main, ["run", "--input", str(tmp_path / "short.jsonl"), "--output", str(empty),
                                       "--allow-empty", "--no-progress"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["vocab", "--input", str(sample_documents), "--input", str(empty),
                                       "--language-ratio", "1:1", "--output", str(tmp_path / "v")])
    assert result.exit_code == 2 and result.output.strip().splitlines()[-1] == (
        f"Error: {empty} has no sentences in its train documents: drop that --input and its --language-ratio weight")


def test_cli_vocab_missing_input(tmp_path):
    """The input is checked before the output folder is made: a mistyped --input leaves no empty folder."""
    output = tmp_path / "vocab"
    result = CliRunner().invoke(main, ["vocab", "--input", str(tmp_path / "nothing"), "--output", str(output)])
    assert result.exit_code == 2
    assert "no manifest.json in" in result.output and "Traceback" not in result.output
    assert not output.exists()


def test_matches_hugging_face_t5_tokenizer(sample_vocab, sample_documents):
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) >= 5:
        pytest.skip("transformers >= 5 has no SentencePiece T5Tokenizer (its converter needs protobuf >= 7, "
                    "which apache-beam 2.77 excludes)")
    tokenizer = transformers.T5Tokenizer(vocab_file=str(sample_vocab / "spm.model"), extra_ids=100, legacy=True)
    vocab = SentencePieceVocabulary(str(sample_vocab / "spm.model"), extra_ids=100)
    assert len(tokenizer) == vocab.vocab_size
    assert tokenizer.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_99>"]) == [vocab.sentinel_id(0),
                                                                                  vocab.sentinel_id(99)]
    # HF turns literal "<unk>", "</s>" and "<extra_id_k>" into special ids; the C4 sample has none
    for text in texts(sample_documents):
        assert tokenizer.encode(text) == vocab.encode(text) + [vocab.eos_id]


def test_ctrl_c_interrupts_sentencepiece_training_at_once():
    """SentencePiece's trainer never looks at signals: Ctrl-C waited for the end of training (23 s of 36 s on a
    30,000-document corpus). The trainer runs in a worker thread, so the interrupt ends the wait while it works."""
    import os
    import signal
    import threading

    from c4prep.tokenization.train_vocab import _interruptible

    release, finished = threading.Event(), threading.Event()

    def training() -> None:  # stands for the trainer: busy, without the GIL, until released
        release.wait(60)
        finished.set()

    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        _interruptible(training)
    assert not finished.is_set()  # interrupted while the trainer was still working
    release.set()
    with pytest.raises(RuntimeError, match="refused"):  # the trainer's own errors reach the caller
        _interruptible(lambda: (_ for _ in ()).throw(RuntimeError("refused")))
