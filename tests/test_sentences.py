"""Punkt English sentence splitting as TFDS C4 counts sentences (../shared/reference/c4.md §10)."""
from __future__ import annotations

import json

import pytest
from nltk.tokenize.punkt import PunktSentenceTokenizer

from c4prep.pipelines.readers import read_records
from c4prep.pipelines.sentences import english_parameters, punkt_english, split_sentences


@pytest.mark.parametrize("text, expected", [
    # The three reference examples of c4.md §10 (verified there with NLTK 3.10.4 and the NLTK English parameters).
    ("This line has enough words and ends in punctuation, Dr. Roberts!",
     ["This line has enough words and ends in punctuation, Dr. Roberts!"]),
    ("This line looks like it has three sentences...but it's actually just 1.",
     ["This line looks like it has three sentences...but it's actually just 1."]),
    ("Another sentence. . . ? ? ! ! !", ["Another sentence.", ".", ".", "?", "?", "!", "!", "!"]),
])
def test_reference_examples(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("", []),
    ("No end mark at all", ["No end mark at all"]),
    ("Mr. Smith went to Washington. He met Mrs. Jones at 5 p.m. on Jan. 3rd. Then they left.",
     ["Mr. Smith went to Washington.", "He met Mrs. Jones at 5 p.m. on Jan. 3rd.", "Then they left."]),
    # T31's reference page: a quoted line holds three sentences, the quote stays attached.
    ('"Open Access. Powered by Scholars. Published by Universities."',
     ['"Open Access.', "Powered by Scholars.", 'Published by Universities."']),
    ("Adam Roberts has a cookie policy: always eat them.", ["Adam Roberts has a cookie policy: always eat them."]),
])
def test_abbreviations_and_quotes(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize("line, expected", [
    # Real lines of released C4 `en` (train shard 0, first documents).
    ("Beginners BBQ Class Taking Place in Missoula!", ["Beginners BBQ Class Taking Place in Missoula!"]),
    ("Do you want to get better at making delicious BBQ? You will have the opportunity, put this on your calendar "
     "now. Thursday, September 22nd join World Class BBQ Champion, Tony Balay from Lonestar Smoke Rangers. He will "
     "be teaching a beginner level class for everyone who wants to get better with their culinary skills.",
     ["Do you want to get better at making delicious BBQ?",
      "You will have the opportunity, put this on your calendar now.",
      "Thursday, September 22nd join World Class BBQ Champion, Tony Balay from Lonestar Smoke Rangers.",
      "He will be teaching a beginner level class for everyone who wants to get better with their culinary skills."]),
    ("Discussion in 'Mac OS X Lion (10.7)' started by axboi87, Jan 20, 2012.",
     ["Discussion in 'Mac OS X Lion (10.7)' started by axboi87, Jan 20, 2012."]),
    ("I've got a 500gb internal drive and a 240gb SSD.", ["I've got a 500gb internal drive and a 240gb SSD."]),
    ("Foil plaid lycra and spandex shortall with metallic slinky insets. Attached metallic elastic belt with O-ring. "
     "Headband included. Great hip hop or jazz dance costume. Made in the USA.",
     ["Foil plaid lycra and spandex shortall with metallic slinky insets.", "Attached metallic elastic belt with O-ring.",
      "Headband included.", "Great hip hop or jazz dance costume.", "Made in the USA."]),
])
def test_real_c4_lines(line, expected):
    assert split_sentences(line) == expected


def test_real_c4_lines_come_from_the_released_sample(webdata):
    with (webdata / "c4-en-train-00000-first500.jsonl").open(encoding="utf-8") as handle:
        docs = [json.loads(line) for line, _ in zip(handle, range(3))]
    lines = [line for doc in docs for line in doc["text"].split("\n")]
    assert "Beginners BBQ Class Taking Place in Missoula!" in lines
    assert "I've got a 500gb internal drive and a 240gb SSD." in lines
    # Every line of a released C4 document holds at least one sentence; the first page counts 1 + 4 + 1 + 2 = 8.
    assert all(split_sentences(line) for line in lines)
    assert sum(len(split_sentences(line)) for line in docs[0]["text"].split("\n")) == 8


def test_tokenizer_is_nltk_punkt_with_the_english_parameters():
    tokenizer = punkt_english()
    assert isinstance(tokenizer, PunktSentenceTokenizer)
    assert punkt_english() is tokenizer  # built once per process
    params = tokenizer._params
    assert len(params.abbrev_types) == 156
    assert {"dr", "mr", "mrs", "p.m", "jan", "u.s", "st", "vs"} <= params.abbrev_types
    assert params.sent_starters and params.collocations and params.ortho_context


def test_splitting_is_stateless():
    text = "Dr. Roberts arrived. He sat down. The talk began."
    first = split_sentences(text)
    assert first == ["Dr. Roberts arrived.", "He sat down.", "The talk began."]
    assert [split_sentences(text) for _ in range(3)] == [first] * 3


def _stock_punkt() -> PunktSentenceTokenizer:
    """NLTK's tokenizer exactly as shipped (patterns behind `nltk.redos`), with the same English parameters."""
    return PunktSentenceTokenizer(english_parameters())


def test_unwrapped_patterns_split_every_real_line_as_stock_nltk(webdata):
    """The unwrapped patterns (sentences.py) change speed only: every line of the real WET sample (raw, before any
    cleaning) and of the released C4 sample splits exactly as stock NLTK splits it."""
    records = read_records(str(webdata / "CC-MAIN-2019-30-sample-a.warc.wet.gz"), open_binary=lambda p: open(p, "rb"))
    texts = [record.body for record in records]
    with (webdata / "c4-en-train-00000-first500.jsonl").open(encoding="utf-8") as handle:
        texts += [json.loads(line)["text"] for line in handle]
    lines = [line for text in texts for line in text.splitlines()]
    assert len(lines) > 24_000
    stock = _stock_punkt()
    differing = [line for line in lines if split_sentences(line) != stock.tokenize(line)]
    assert differing == []


def test_whole_real_texts_split_as_stock_nltk(webdata):
    """Texts of several lines (line dedup's page check splits the joined page): a candidate's context may then span
    a line break, which `EnglishPunkt.text_contains_sentbreak` annotates as NLTK does (paragraph and line starts)."""
    records = read_records(str(webdata / "CC-MAIN-2019-30-sample-a.warc.wet.gz"), open_binary=lambda p: open(p, "rb"))
    texts = [record.body for record in records]
    with (webdata / "c4-en-train-00000-first500.jsonl").open(encoding="utf-8") as handle:
        texts += [json.loads(line)["text"] for line in handle]
    texts += [text.replace("\n", "\n\n") for text in texts[:100]]  # blank lines: paragraph starts
    stock = _stock_punkt()
    assert [text for text in texts if split_sentences(text) != stock.tokenize(text)] == []


@pytest.mark.parametrize("line", [
    "a." * 4000, "." * 8000, "! " * 4000, "x" * 8000 + ". Next", "-" * 8000, "." + " " * 8000 + "a",
    "Mr. " * 2000, "1.2.3.4." * 1000, '"(' * 2000 + ". ok", "\u201cQuote.\u201d " * 800,
])
def test_unwrapped_patterns_agree_with_stock_nltk_on_hostile_lines(line):
    """Long runs of end marks, abbreviations and punctuation: the shapes that make regexes backtrack. Stock NLTK
    splits them within its 5 s time limit, and the unwrapped patterns split them identically."""
    assert split_sentences(line) == _stock_punkt().tokenize(line)


@pytest.mark.parametrize("line", [
    "Dr. Roberts met Mr. Smith in the U.S. on Jan. 5. They talked.",  # abbreviations, a number before a capital
    "See e.g. the notes. Also cf. Fig. 3. Done.", "The non-inc. firm left. It closed.",  # hyphenated abbreviation
    "J. S. Bach wrote it. A. Then b. then.", "In 1990. The year. In 3. the list.",  # initials, numbers
    "Numbers: 1.5. 2,000. -3. .5. Next one.", "Call 555-1234. Now. Or 12a. Then.",
    "He said no. and left. She agreed... Then? Yes! No?! Fine.",  # lowercase after a period, ellipsis, marks
    "It is İSTANBUL. Next. ΟΔΟΣ. Επόμενη. ǅ. Title case.", "Ends with a period.", "No end mark at all",
    "Wait.. what. Odd... Stop . Space before the period . Next.", "x. y. Z. ##number##. Next.",
    "\u0661\u0662. Arabic-Indic digits. \uff11. Fullwidth one. \u00bd. A half.",  # non-ASCII number starts
    "The co. Ltd. deal. The inc. was. Vs. them.", "Quote.\u201d Next. (Paren.) Then.",
    "B. Smith met J. Walter and I. Magnin. In 1987. Cooper rose.",  # collocations
])
def test_common_word_shortcut_splits_as_stock_nltk(line):
    """`EnglishPunkt.breaks_whatever_follows` settles most words ending in a period without NLTK's tokens; every
    case it must leave to NLTK (abbreviations, initials, numbers, ellipses, collocations, non-ASCII starts) splits
    as stock NLTK splits it, alone and inside a longer text."""
    stock = _stock_punkt()
    assert split_sentences(line) == stock.tokenize(line)
    text = f"Start here. {line} And end here."
    assert split_sentences(text) == stock.tokenize(text)


def test_stdlib_period_context_matches_as_regex_on_every_character():
    """`UntimedLanguageVars.period_context_stdlib` (stdlib `re`) finds the candidates NLTK's pattern (`regex`) finds,
    with the same groups, around every character but the four that only `re` counts as whitespace, which make
    `_end_candidates` keep to `regex`."""
    import sys

    from c4prep.pipelines.sentences import _STDLIB_SPACE_ONLY, UntimedLanguageVars

    stdlib, reference = UntimedLanguageVars.period_context_stdlib, UntimedLanguageVars._period_context

    def found(pattern, text):
        return [(match.span(), match.span("after_tok"), match.span("next_tok")) for match in pattern.finditer(text)]

    differing = [character for character in map(chr, range(sys.maxunicode + 1))
                 for text in (f"a.{character}b", f"a? {character}")
                 if found(stdlib, text) != found(reference, text)]
    assert sorted(set(differing)) == sorted(_STDLIB_SPACE_ONLY)
    text = "One.\x1c Two. Three"
    assert split_sentences(text) == _stock_punkt().tokenize(text)
