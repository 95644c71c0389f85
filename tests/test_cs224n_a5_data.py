"""CS224N 2021 A5 data layer on the real data: char vocabulary, span corruption, birth-place rows and scoring."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from c4prep.training.experiments.cs224n_a5.birth_places import (
    BirthPlaceRows,
    BirthPlacesError,
    london_baseline,
    name_example,
    prediction_from_completion,
    prompt_ids,
    read_birth_places,
    score_places,
    write_predictions,
)
from c4prep.training.experiments.cs224n_a5.char_corruption import (
    MASK_CHAR,
    PAD_CHAR,
    CharCorruptionError,
    CharCorruptionRows,
    CharVocabError,
    CharVocabulary,
    corrupt_ids,
    load_char_corpus,
)
from c4prep.training.seeding import example_rng

BLOCK = 128
MAX_KEPT = 112  # int(128 * 7 / 8)
DRAWS = 2000


@pytest.fixture(scope="module")
def a5(shared_data: Path) -> Path:
    return shared_data / "cs224n_a5"


@pytest.fixture(scope="module")
def rows(a5: Path) -> CharCorruptionRows:
    return CharCorruptionRows.from_file(a5 / "wiki.txt", block_size=BLOCK, seed=0)


@pytest.fixture(scope="module")
def vocab(rows: CharCorruptionRows) -> CharVocabulary:
    return rows.vocab


def split_corrupted(text: str) -> tuple[str, str, str, int]:
    """(prefix, suffix, masked, pad count) of ``prefix⁇suffix⁇masked□…``; asserts pads only at the end."""
    body = text.rstrip(PAD_CHAR)
    assert PAD_CHAR not in body
    pieces = body.split(MASK_CHAR)
    assert len(pieces) == 3, text
    return pieces[0], pieces[1], pieces[2], len(text) - len(body)


def corrupt(document: str, block_size: int, rng: np.random.Generator, vocab: CharVocabulary) -> str:
    """The corrupted string of ``document`` (:func:`corrupt_ids` on its ids)."""
    return vocab.decode(corrupt_ids(vocab.encode(document), block_size, rng, vocab))


def corrupted_string(row: dict[str, np.ndarray], vocab: CharVocabulary) -> str:
    """The whole block-size string of a row: x plus the last target."""
    return vocab.decode(row["input_tokens"]) + vocab.decode(row["target_tokens"][-1:])


# --- vocabulary and corpus --------------------------------------------------------------------------------------


def test_wiki_vocabulary_and_documents(a5, rows, vocab):
    text = (a5 / "wiki.txt").read_text(encoding="utf-8")
    assert vocab.vocab_size == 256
    assert (vocab.pad_id, vocab.mask_id) == (0, 1)
    assert vocab.chars[:2] == (PAD_CHAR, MASK_CHAR)
    assert list(vocab.chars[2:]) == sorted(set(text)) and "\n" in vocab.chars
    assert len(rows) == 2938 and rows.documents[-1] == "" and rows.documents[0].startswith("Khatchig Mouradian. ")
    ids = vocab.encode(text[:5000])
    assert ids.dtype == np.int64 and vocab.decode(ids) == text[:5000]
    assert vocab.encode(PAD_CHAR + MASK_CHAR).tolist() == [0, 1]


def test_vocabulary_errors_and_pickling(vocab):
    with pytest.raises(CharVocabError, match="reserved"):
        CharVocabulary.from_text("abc" + MASK_CHAR)
    with pytest.raises(CharVocabError, match="'€'"):
        CharVocabulary.from_text("abc").encode("a€b")
    with pytest.raises(CharVocabError, match="out of range"):
        vocab.decode([5, 256])
    with pytest.raises(CharVocabError, match="out of range"):
        vocab.decode([-1])
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy == vocab and copy.encode("Lebanon").tolist() == vocab.encode("Lebanon").tolist()


def test_missing_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(CharCorruptionError, match="not found.*wiki.txt"):
        load_char_corpus(tmp_path / "wiki.txt")


# --- span corruption --------------------------------------------------------------------------------------------


def test_corrupted_rows_layout_over_many_draws(rows, vocab):
    kept, masked, starts = [], [], []
    for draw in range(DRAWS):
        index = draw * 7 % (len(rows) - 1)  # real non-empty documents; the empty one is tested below
        row = rows(index, epoch=draw // 100)
        x, y, weights = row["input_tokens"], row["target_tokens"], row["loss_weights"]
        assert x.shape == y.shape == weights.shape == (BLOCK - 1,)
        assert x.dtype == y.dtype == np.int64 and weights.dtype == np.int32
        assert np.array_equal(x[1:], y[:-1])
        text = corrupted_string(row, vocab)
        prefix, suffix, span, pads = split_corrupted(text)
        document = rows.documents[index]
        length = len(prefix) + len(span) + len(suffix)
        assert prefix + span + suffix == document[:length]
        assert 4 <= length <= MAX_KEPT and length + 2 + pads == BLOCK
        assert np.array_equal(weights, (y != vocab.pad_id).astype(np.int32))
        assert weights.sum() == length + 1  # every target of prefix⁇suffix⁇masked after the first character
        if len(document) >= MAX_KEPT:
            kept.append(length)
        masked.append((len(span), length))
        starts.append(len(prefix) / max(1, length - len(span)))
    assert set(kept) == set(range(4, MAX_KEPT + 1))  # every truncation length drawn on long documents
    spans, lengths = np.array(masked).T
    assert abs(spans.mean() - lengths.mean() / 4) < 0.5, (spans.mean(), lengths.mean() / 4)
    assert spans.std() > 5 and (spans < lengths / 4).any() and (spans > lengths / 4).any()
    assert 0.45 < np.mean(starts) < 0.55 and min(starts) == 0 and max(starts) == 1


def test_truncation_keeps_short_documents_whole(rows, vocab):
    document = min(filter(None, rows.documents), key=len)  # 38 characters: kept whole whenever L >= 38
    assert len(document) == 38
    lengths = []
    for draw in range(400):
        prefix, suffix, span, _ = split_corrupted(corrupt(document, BLOCK, example_rng(1, draw), vocab))
        lengths.append(len(prefix) + len(suffix) + len(span))
    assert max(lengths) == len(document) and min(lengths) == 4
    whole = np.mean([length == len(document) for length in lengths])
    assert abs(whole - (MAX_KEPT - 38 + 1) / (MAX_KEPT - 4 + 1)) < 0.08  # P(L >= 38) = 75/109


@pytest.mark.parametrize("document", ["", "a", "ab", "abc", "abcd", "abcde"])
def test_empty_and_tiny_documents(document, vocab):
    seen = set()
    for draw in range(200):
        text = corrupt(document, BLOCK, example_rng(2, draw), vocab)
        assert len(text) == BLOCK
        prefix, suffix, span, pads = split_corrupted(text)
        kept = prefix + span + suffix
        assert kept == document[:len(kept)] and len(kept) >= min(4, len(document)) and pads == BLOCK - len(kept) - 2
        if len(document) >= 4:
            assert len(span) >= 1
        seen.add(text)
    if document:
        assert len(seen) > 1
    else:
        assert seen == {MASK_CHAR * 2 + PAD_CHAR * (BLOCK - 2)}


def test_empty_document_row(rows):
    row = rows(len(rows) - 1, epoch=0)
    assert row["input_tokens"].tolist() == [1, 1] + [0] * (BLOCK - 3)
    assert row["target_tokens"].tolist() == [1] + [0] * (BLOCK - 2)
    assert row["loss_weights"].tolist() == [1] + [0] * (BLOCK - 2)


def test_block_size_limits(rows, vocab):
    assert len(corrupt(rows.documents[0], 9, example_rng(0, 0), vocab)) == 9
    with pytest.raises(CharCorruptionError, match="at least 9"):
        corrupt(rows.documents[0], 8, example_rng(0, 0), vocab)
    with pytest.raises(CharCorruptionError, match="at least 9"):
        CharCorruptionRows(rows.documents, rows.vocab, block_size=8)
    with pytest.raises(IndexError):
        rows(len(rows), epoch=0)


@pytest.mark.parametrize("bad", [PAD_CHAR, MASK_CHAR, "\u20ac"])
def test_a_bad_character_anywhere_fails_before_any_row(rows, vocab, bad):
    documents = (*rows.documents[:5], rows.documents[5] + bad)  # past any truncation: a row would never read it
    with pytest.raises(CharVocabError, match="PAD|not in the vocabulary"):
        CharCorruptionRows(documents, vocab)


def test_rows_are_deterministic_and_change_per_epoch(a5, rows):
    again = pickle.loads(pickle.dumps(CharCorruptionRows.from_file(a5 / "wiki.txt")))
    for index in (0, 17, 2936):
        first, second = rows(index, 3), again(index, 3)
        assert all(np.array_equal(first[key], second[key]) for key in first)
    same_across_epochs = sum(np.array_equal(rows(index, 0)["input_tokens"], rows(index, 1)["input_tokens"])
                             for index in range(100))
    assert same_across_epochs <= 2
    other_seed = CharCorruptionRows(rows.documents, rows.vocab, seed=1)
    assert sum(np.array_equal(rows(index, 0)["input_tokens"], other_seed(index, 0)["input_tokens"])
               for index in range(100)) <= 2


# --- birth places -----------------------------------------------------------------------------------------------


def test_read_birth_place_files(a5):
    train = read_birth_places(a5 / "birth_places_train.tsv")
    dev = read_birth_places(a5 / "birth_dev.tsv")
    test = read_birth_places(a5 / "birth_test_inputs.tsv")
    assert (len(train), len(dev), len(test)) == (2000, 500, 437)
    assert train[0] == ("Where was Khatchig Mouradian born?", "Lebanon")
    assert all(place for _, place in train + dev) and all(place is None for _, place in test)
    assert all(question.startswith("Where was ") and question.endswith(" born?") for question, _ in train + test)
    assert [sum(not q.isascii() for q, _ in pairs) for pairs in (train, dev, test)] == [124, 17, 22]


def test_read_birth_places_errors(tmp_path):
    with pytest.raises(BirthPlacesError, match="not found"):
        read_birth_places(tmp_path / "missing.tsv")
    bad = tmp_path / "bad.tsv"
    bad.write_text("Where was A born?\tParis\nWhere was B born?\n", encoding="utf-8")
    with pytest.raises(BirthPlacesError, match=r"bad\.tsv:2: expected 'question<TAB>place'"):
        read_birth_places(bad)
    bad.write_text("Where was A born?\nWhere was B born?\tRome\n", encoding="utf-8")
    with pytest.raises(BirthPlacesError, match=r"bad\.tsv:2: expected 'question'"):
        read_birth_places(bad)
    bad.write_text("", encoding="utf-8")
    with pytest.raises(BirthPlacesError, match="no questions"):
        read_birth_places(bad)


def test_name_example_first_training_line(a5, vocab):
    question, place = read_birth_places(a5 / "birth_places_train.tsv")[0]
    row = BirthPlaceRows.from_file(a5 / "birth_places_train.tsv", vocab)(0, epoch=5)
    x, y, weights = row["input_tokens"], row["target_tokens"], row["loss_weights"]
    assert x.shape == y.shape == (BLOCK - 1,) and x.dtype == y.dtype == np.int64
    text = f"{question}⁇{place}⁇"
    assert vocab.decode(x) == text + PAD_CHAR * (BLOCK - 1 - len(text))
    assert vocab.decode(x).startswith("Where was Khatchig Mouradian born?⁇Lebanon⁇□")
    target = PAD_CHAR * (len(question) - 1) + "⁇Lebanon⁇"
    assert vocab.decode(y) == target + PAD_CHAR * (BLOCK - 1 - len(target))
    assert np.flatnonzero(weights).tolist() == list(range(len(question) - 1, len(target)))
    assert np.array_equal(y[len(question) - 1:], vocab.encode(vocab.decode(x)[len(question):] + PAD_CHAR))


def test_name_example_drops_non_ascii_but_prompts_keep_it(a5, vocab):
    question, place = read_birth_places(a5 / "birth_places_train.tsv")[15]
    assert (question, place) == ("Where was Naïma Azough born?", "Morocco")
    x, y = name_example(question, place, vocab)
    assert vocab.decode(x).startswith("Where was Nama Azough born?⁇Morocco⁇□")
    assert vocab.decode(y).rstrip(PAD_CHAR) == PAD_CHAR * (len("Where was Nama Azough born?") - 1) + "⁇Morocco⁇"
    assert vocab.decode(prompt_ids(question, vocab)) == question + MASK_CHAR


def test_birth_place_rows_validation(a5, vocab):
    rows = BirthPlaceRows.from_file(a5 / "birth_places_train.tsv", vocab)
    assert len(rows) == 2000 and pickle.loads(pickle.dumps(rows)) == rows
    assert all(rows(index, 0)["loss_weights"].sum() == len(rows.pairs[index][1]) + 2 for index in range(0, 2000, 97))
    with pytest.raises(BirthPlacesError, match="needs a labeled file"):
        BirthPlaceRows.from_file(a5 / "birth_test_inputs.tsv", vocab)
    with pytest.raises(BirthPlacesError, match="more than block_size 30"):
        BirthPlaceRows(rows.pairs[:1], vocab, block_size=30)
    with pytest.raises(IndexError):
        rows(2000, 0)


def test_london_baseline_on_dev(a5):
    dev = read_birth_places(a5 / "birth_dev.tsv")
    gold = [place for _, place in dev]
    assert score_places(gold, london_baseline([q for q, _ in dev])) == (500, 25)
    assert score_places(gold, ["london"] * 500) == (500, 0)  # case-sensitive
    test = read_birth_places(a5 / "birth_test_inputs.tsv")
    assert score_places([place for _, place in test], london_baseline([q for q, _ in test])) == (0, 0)
    with pytest.raises(BirthPlacesError, match="499 predictions for 500"):
        score_places(gold, ["London"] * 499)
    with pytest.raises(BirthPlacesError, match="some questions have a gold place"):
        score_places(["Paris", None], ["Paris", "Rome"])


@pytest.mark.parametrize("completion, prediction", [
    ("Lebanon⁇□□□", "Lebanon"),
    ("New York City⁇Where was", "New York City"),
    ("Paris", "Paris"),
    ("Par□□", "Par□□"),
    ("⁇Rome⁇", ""),
])
def test_prediction_from_completion(completion, prediction):
    assert prediction_from_completion(completion) == prediction
    starter = ("Where was Khatchig Mouradian born?" + MASK_CHAR + completion).split(MASK_CHAR)[1]
    assert starter == prediction


def test_write_predictions_round_trip(tmp_path):
    path = tmp_path / "dev.predictions"
    path.write_text("old\n", encoding="utf-8")
    predictions = ["London", "São Paulo", "Par□□", ""]
    write_predictions(path, predictions)
    assert path.read_bytes() == "London\nSão Paulo\nPar□□\n\n".encode()
    assert path.read_text(encoding="utf-8").split("\n")[:-1] == predictions
    with pytest.raises(BirthPlacesError, match="prediction 2 contains a line break"):
        write_predictions(path, ["Rome", "New\nYork"])
    assert path.read_text(encoding="utf-8").split("\n")[:-1] == predictions
    assert sorted(item.name for item in tmp_path.iterdir()) == ["dev.predictions"]
