"""Text-to-text data: reading TSV/JSONL pairs (real CS224N birth-place QA), task prefixes, encoding, row building."""
import gzip
import io
import json
import logging
import pickle
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from c4prep.tokenization.vocabulary import ByteVocabulary, SentencePieceVocabulary
from c4prep.training.data.encdec_rows import pack_encdec, pack_encdec_row
from c4prep.training.data.mixture_batches import PairRows
from c4prep.training.data.text_files import TextFileError
from c4prep.training.data.text_to_text import TextPair, encode_pairs, load_text_pairs, read_text_pairs

LOGGER_NAME = "c4prep.training.data.text_to_text"


@pytest.fixture(scope="module")
def birth_tsv(shared_data) -> Path:
    return shared_data / "cs224n_a5" / "birth_places_train.tsv"


@pytest.fixture(scope="module")
def birth_rows(birth_tsv) -> list[tuple[str, str]]:
    """The file's rows split by hand: `Where was <Name> born?<TAB><Place>`, 2000 of them."""
    return [tuple(line.split("\t")) for line in birth_tsv.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def birth_vocab(tmp_path_factory, birth_rows) -> SentencePieceVocabulary:
    """A small SentencePiece model with T5's ids, trained on the questions and answers."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter([text for row in birth_rows for text in row]),
                                   model_writer=model, vocab_size=400, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   character_coverage=1.0, num_threads=1, minloglevel=2)
    return SentencePieceVocabulary(model.getvalue())


def write_jsonl(path: Path, rows, opener=open) -> Path:
    with opener(path, "wt", encoding="utf-8") as out:
        for question, answer in rows:
            out.write(json.dumps({"input": question, "target": answer, "id": len(question)}, ensure_ascii=False))
            out.write("\n")
    return path


def test_reads_the_real_tsv(birth_tsv, birth_rows):
    pairs = read_text_pairs(str(birth_tsv))
    assert len(pairs) == len(birth_rows) == 2000
    assert pairs[0] == TextPair("Where was Khatchig Mouradian born?", "Lebanon")
    assert [(pair.input, pair.target) for pair in pairs] == birth_rows


def test_task_prefix_is_prepended_verbatim(birth_tsv):
    pairs = read_text_pairs(str(birth_tsv), task_prefix="birthplace question: ")
    assert pairs[1] == TextPair("birthplace question: Where was Jacob Henry Studer born?", "Columbus")
    assert all(pair.input.startswith("birthplace question: Where was ") for pair in pairs)


def test_jsonl_and_gzip_give_the_same_pairs(birth_tsv, birth_rows, tmp_path):
    expected = read_text_pairs(str(birth_tsv))
    assert any(not pair.input.isascii() for pair in expected)  # names with accents survive every format
    jsonl = write_jsonl(tmp_path / "birth.jsonl", birth_rows)
    jsonl_gz = write_jsonl(tmp_path / "birth.JSONL.GZ", birth_rows, opener=gzip.open)
    tsv_gz = tmp_path / "birth.tsv.gz"
    tsv_gz.write_bytes(gzip.compress(birth_tsv.read_bytes()))
    for path in (jsonl, jsonl_gz, tsv_gz):
        assert read_text_pairs(str(path)) == expected, path


def test_tsv_header_and_windows_line_ends(birth_rows, tmp_path):
    path = tmp_path / "with_header.tsv"
    path.write_bytes(("input\ttarget\r\n" + "".join(f"{q}\t{a}\r\n" for q, a in birth_rows[:5])).encode())
    read = load_text_pairs(str(path))
    assert [(pair.input, pair.target) for pair in read.pairs] == birth_rows[:5]
    assert read.malformed == 0


@pytest.mark.parametrize("start", [b"\xef\xbb\xbf", b"\n \n"])
def test_a_header_after_a_byte_order_mark_or_blank_lines_is_a_header(birth_rows, tmp_path, start):
    """Both headers were trained and scored as the example 'input' -> 'target'."""
    path = tmp_path / "with_header.tsv"
    path.write_bytes(start + ("input\ttarget\n" + "".join(f"{q}\t{a}\n" for q, a in birth_rows[:3])).encode())
    read = load_text_pairs(str(path))
    assert [(pair.input, pair.target) for pair in read.pairs] == birth_rows[:3] and read.malformed == 0


def test_a_jsonl_file_with_a_byte_order_mark_keeps_its_first_row(birth_rows, tmp_path):
    """Its first row was lost as 'invalid JSON (Unexpected UTF-8 BOM)'."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + write_jsonl(tmp_path / "plain.jsonl", birth_rows[:2]).read_bytes())
    assert [(pair.input, pair.target) for pair in load_text_pairs(str(path)).pairs] == birth_rows[:2]


def test_malformed_tsv_rows_are_counted_logged_and_skipped(birth_rows, tmp_path, caplog):
    good = [f"{q}\t{a}\n".encode() for q, a in birth_rows[:4]]
    lines = [good[0], b"no tab here\n", good[1], b"\n", b"a\tb\tc\n", good[2], b"bad utf-8 \xff\tx\n", good[3]]
    path = tmp_path / "dirty.tsv"
    path.write_bytes(b"".join(lines))
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        read = load_text_pairs(str(path))
    assert [(pair.input, pair.target) for pair in read.pairs] == birth_rows[:4]
    assert read.malformed_lines == (2, 5, 7)  # the blank line 4 is not a row
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3
    assert messages[0].startswith(f"{path}:2: skipped malformed row: expected 2 tab-separated fields")
    assert messages[1].startswith(f"{path}:5: ") and "got 3" in messages[1]
    assert messages[2] == f"{path}:7: skipped malformed row: invalid UTF-8"


def test_malformed_jsonl_rows_are_counted_and_skipped(birth_rows, tmp_path, caplog):
    q, a = birth_rows[0]
    lines = [json.dumps({"input": q, "target": a}), json.dumps({"input": q}), "{not json", "[1, 2]",
             json.dumps({"input": q, "target": 3}), json.dumps({"question": q, "answer": a})]
    path = tmp_path / "dirty.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        read = load_text_pairs(str(path), task_prefix="q: ")
    assert read.pairs == (TextPair("q: " + q, a),)
    assert read.malformed_lines == (2, 3, 4, 5, 6)
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].endswith(":2: skipped malformed row: missing key(s) 'target'")
    assert "invalid JSON" in messages[1] and "expected a JSON object, got list" in messages[2]
    assert "must be strings" in messages[3] and "missing key(s) 'input', 'target'" in messages[4]


def test_rows_with_an_empty_side_are_malformed(birth_rows, tmp_path, caplog):
    """An empty target trained the model to answer EOS, without a word."""
    q, a = birth_rows[0]
    path = tmp_path / "blanks.tsv"
    path.write_text(f"{q}\t{a}\n{q}\t\n\t{a}\n \t x\n\t\n")  # the last, two empty fields, went unseen
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        read = load_text_pairs(str(path))
    assert read.pairs == (TextPair(q, a),) and read.malformed_lines == (2, 3, 4, 5)
    messages = [record.getMessage() for record in caplog.records]
    assert [m.rsplit(": ", 1)[1] for m in messages] == ["empty target", "empty input", "empty input",
                                                        "empty input and target"]
    jsonl = tmp_path / "blanks.jsonl"
    jsonl.write_text(json.dumps({"input": q, "target": a}) + "\n" + json.dumps({"input": q, "target": " "}) + "\n")
    assert load_text_pairs(str(jsonl)).malformed_lines == (2,)


def test_many_malformed_rows_are_summed_up(tmp_path, caplog):
    path = tmp_path / "mostly_bad.tsv"
    path.write_text("bad\n" * 30 + "question\tanswer\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        read = load_text_pairs(str(path))
    assert read.malformed == 30 and read.pairs == (TextPair("question", "answer"),)
    assert len(caplog.records) == 21
    assert "skipped 30 malformed rows in all" in caplog.records[-1].getMessage()


@pytest.mark.parametrize("name, content, message", [
    ("empty.tsv", b"", "no valid rows (0 malformed); expected input<TAB>target lines"),
    ("only_bad.tsv", b"one column\nanother\n", "no valid rows (2 malformed)"),
    ("header_only.tsv", b"input\ttarget\n", "no valid rows (0 malformed)"),
    ("wrong_keys.jsonl", b'{"question": "q", "answer": "a"}\n', 'expected JSON lines with "input" and "target"'),
    ("pairs.csv", b"q,a\n", "unknown extension; use .tsv or .jsonl (optionally .gz)"),
    ("not_gzip.tsv.gz", b"q\ta\n", "corrupt or truncated gzip"),
    ("truncated.tsv.gz", gzip.compress(b"q\ta\n" * 1000)[:-30], "corrupt or truncated gzip"),
])
def test_unusable_files_raise_one_line_errors(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TextFileError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        read_text_pairs(str(path))
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)


def test_missing_file(tmp_path):
    with pytest.raises(TextFileError, match=r"nope\.tsv: no such file; check the path"):
        read_text_pairs(str(tmp_path / "nope.tsv"))


def test_encode_pairs_appends_eos_and_counts_truncation(birth_tsv):
    pairs = read_text_pairs(str(birth_tsv))[:200]
    vocab = ByteVocabulary()
    encoded = encode_pairs(pairs, vocab, inputs_length=40, targets_length=8)
    long_inputs = sum(len(pair.input.encode()) + 1 > 40 for pair in pairs)
    long_targets = sum(len(pair.target.encode()) + 1 > 8 for pair in pairs)
    assert 0 < long_inputs < 200 and 0 < long_targets < 200  # the real data has both cases
    assert (encoded.truncated_inputs, encoded.truncated_targets) == (long_inputs, long_targets)
    either = sum(len(p.input.encode()) + 1 > 40 or len(p.target.encode()) + 1 > 8 for p in pairs)
    assert encoded.truncated == either
    for pair, (inputs, targets) in zip(pairs, encoded.examples):
        assert inputs.dtype == targets.dtype == np.int32
        assert inputs[-1] == targets[-1] == vocab.eos_id
        assert len(inputs) == min(len(pair.input.encode()) + 1, 40)
        assert vocab.decode(targets) == pair.target[:7] if len(pair.target) > 7 else pair.target
        assert pair.input.encode().startswith(vocab.decode(inputs).encode())


def test_encode_pairs_with_sentencepiece_round_trips(birth_tsv, birth_vocab):
    pairs = read_text_pairs(str(birth_tsv), task_prefix="question: ")[:300]
    encoded = encode_pairs(pairs, birth_vocab, inputs_length=64, targets_length=16)
    assert encoded.truncated == 0
    for pair, (inputs, targets) in zip(pairs, encoded.examples):
        assert list(inputs[:-1]) == birth_vocab.encode(pair.input) and inputs[-1] == birth_vocab.eos_id
        assert birth_vocab.decode(targets) == pair.target


def test_encode_pairs_edge_cases():
    vocab = ByteVocabulary()
    encoded = encode_pairs([TextPair("", "x")], vocab, inputs_length=1, targets_length=1)
    assert [list(ids) for ids in encoded.examples[0]] == [[vocab.eos_id], [vocab.eos_id]]
    assert (encoded.truncated_inputs, encoded.truncated_targets, encoded.truncated) == (0, 1, 1)
    assert encode_pairs([], vocab, 4, 4).examples == []
    with pytest.raises(ValueError, match="targets_length must be >= 1"):
        encode_pairs([TextPair("a", "b")], vocab, inputs_length=4, targets_length=0)


def test_pair_rows_pickle_for_loader_workers(birth_tsv, birth_vocab):
    encoded = encode_pairs(read_text_pairs(str(birth_tsv))[:10], birth_vocab, 64, 16).examples
    rows = PairRows(encoded, inputs_length=64, targets_length=16)
    clone = pickle.loads(pickle.dumps(rows))
    assert (clone.inputs_length, clone.targets_length, clone.size) == (64, 16, 10)
    assert clone.fingerprint == rows.fingerprint
    assert all(np.array_equal(clone.row(3, 0)[key], value) for key, value in rows.row(3, 0).items())


def test_encoded_pairs_pack_with_pack_encdec_row(birth_tsv, birth_vocab):
    pairs = read_text_pairs(str(birth_tsv), task_prefix="question: ")[:100]
    encoded = encode_pairs(pairs, birth_vocab, 64, 16).examples
    rows = pack_encdec(encoded, 64, 16)
    assert 1 < len(rows) < 100  # several short QA pairs share a row
    for row in rows:
        assert all(isinstance(value, np.ndarray) and value.dtype == np.int32 for value in row.values())
        assert len(row["encoder_input_tokens"]) == 64 and len(row["decoder_target_tokens"]) == 16
    # Every pair comes back, in order, from the packed segments.
    unpacked = []
    for row in rows:
        for segment in range(1, row["encoder_segment_ids"].max() + 1):
            unpacked.append((row["encoder_input_tokens"][row["encoder_segment_ids"] == segment].tolist(),
                             row["decoder_target_tokens"][row["decoder_segment_ids"] == segment].tolist()))
    assert unpacked == [(inputs.tolist(), targets.tolist()) for inputs, targets in encoded]
    assert birth_vocab.decode(unpacked[0][1]) == pairs[0].target == "Lebanon"
    single = [pack_encdec_row([example], 64, 16) for example in encoded]
    assert len(single) == 100 and all(row["encoder_segment_ids"].max() == 1 for row in single)
