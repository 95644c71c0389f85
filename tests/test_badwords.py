"""The prefix-tree bad-words regex (#22) against TFDS 3.1.0's flat alternation, kept here as the reference.

`badwords_pattern` writes the word group as a prefix tree (`word_trie.trie_regex`). Its claim is stronger than "same
verdict": at every position it tries the words in the flat list's order, so `finditer` yields the same spans and
groups. Checked on every page of the real samples in ../shared/data/webdata (parsed, uncleaned text), with the C4 list
and with every other LDNOOBW list, on hand-made edge cases, on each listed word in several contexts, and on seeded
random texts built from the words' pieces.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from c4prep.pipelines.c4_rules import (
    Outcome,
    badwords_pattern,
    check_badwords,
    default_badwords_pattern,
    load_badwords,
    parse_record,
)
from c4prep.pipelines.readers import read_records
from c4prep.pipelines.records import Page, RawRecord
from c4prep.pipelines.word_trie import trie_regex

REAL_SAMPLES = {  # file -> pages the C4 list drops
    "CC-MAIN-2019-30-sample-a.warc.wet.gz": 21,
    "c4-en-train-00000-first500.jsonl": 0,
    "dolma_cc_en_head-0174.jsonl.gz": 1,
    "whirlwind.warc.wet.gz": 0,
}


def flat_pattern(words) -> re.Pattern[str]:
    """TFDS 3.1.0's form: one alternation of the escaped words in sorted order (the builder before #22)."""
    alternation = "|".join(re.escape(word) for word in sorted(words))
    return re.compile(rf"(?:\W|^)({alternation})(?:\W|$)") if alternation else re.compile(r"(?!)")


def all_matches(pattern: re.Pattern[str], text: str) -> list[tuple[tuple[int, int], str]]:
    return [(match.span(), match.group(1)) for match in pattern.finditer(text)]


def make_page(text: str) -> Page:
    return Page(url="http://example.com/", normalized_url="example.com/", text=text,
                timestamp="2019-04-24T09:23:58Z", content_type="text/plain", content_length=len(text.encode()))


@pytest.fixture(scope="module")
def flat_c4() -> re.Pattern[str]:
    return flat_pattern(load_badwords())


@pytest.fixture(scope="module")
def real_pages(webdata: Path) -> dict[str, list[Page]]:
    """Every page of each real sample, as `parse_record` passes it on."""
    pages = {}
    for name in REAL_SAMPLES:
        records = list(read_records(str(webdata / name), open_binary=lambda path: open(path, "rb")))
        assert all(isinstance(record, RawRecord) for record in records)
        pages[name] = [parse_record(record).page for record in records]
        assert all(pages[name])
    return pages


# ------------------------------------------------------------------------------------------------ the trie itself


@pytest.mark.parametrize("words, expected", [
    (["ass", "asshole", "anal"], r"a(?:nal|ss(?:|hole))"),
    (["bastard", "bastardo"], r"bastard(?:|o)"),
    (["c++", "c#", "c"], r"c(?:|\#|\+\+)"),  # end of word first, then by code point
    (["ab", "ab", "b c"], r"(?:ab|b\ c)"),  # duplicates merge
    (["🖕"], "🖕"),
    ([], ""),
])
def test_trie_regex_factors_common_prefixes(words, expected):
    assert trie_regex(words) == expected


def test_default_pattern_is_the_trie_of_the_c4_list():
    words = load_badwords()
    pattern = default_badwords_pattern()
    assert pattern.pattern == rf"(?:\W|^)({trie_regex(words)})(?:\W|$)"
    assert len(pattern.pattern) < len(flat_pattern(words).pattern)
    assert pattern.groups == 1


# ------------------------------------------------------------------------------------------------ real pages


@pytest.mark.parametrize("name", REAL_SAMPLES)
def test_same_verdicts_and_matches_on_every_real_page(name, real_pages, flat_c4):
    dropped = 0
    for page in real_pages[name]:
        verdict = check_badwords(page)
        assert verdict == check_badwords(page, pattern=flat_c4), page.url
        assert all_matches(default_badwords_pattern(), page.text.lower()) == all_matches(flat_c4, page.text.lower())
        dropped += verdict.page is None
    assert dropped == REAL_SAMPLES[name]


def test_every_ldnoobw_list_matches_as_its_flat_form_on_the_real_wet_sample(shared_data, real_pages):
    # 29 lists, with non-ASCII words (ru, ja, zh, th, hi, ...) and multi-word entries; the uncleaned WET sample is in
    # many languages, so most lists find something.
    texts = [page.text.lower() for page in real_pages["CC-MAIN-2019-30-sample-a.warc.wet.gz"]]
    lists = sorted((shared_data / "badwords").glob("*.txt"))
    found = 0
    for path in lists:
        words = load_badwords(str(path))
        trie, flat = badwords_pattern(words), flat_pattern(words)
        for text in texts:
            matches = all_matches(trie, text)
            assert matches == all_matches(flat, text), (path.name, text[:80])
            found += len(matches)
    assert len(lists) == 29 and found > 100


# ------------------------------------------------------------------------------------------------ crafted cases


@pytest.mark.parametrize("text, dropped", [
    ("ass", True),  # the whole text
    ("Ass at the start.", True),
    ("ends with the word ass", True),
    ("ends with the word ass.", True),
    ("\nass\n", True),
    ("assistance, cutlass, bass, sassy", False),  # inside longer words
    ("asshole and assmunch", True),  # a word and its extensions
    ("asses", False),  # "ass" + "es" is not listed
    ("bastardo!", True),
    ("bastardos", False),
    ("a blonde on blonde action film", True),  # multi-word entry whose tail is another entry
    ("blonde action", True),
    ("blonde  action", False),  # the space is literal
    ("blonde\naction", False),
    ("BARELY LEGAL", True),  # check_badwords lowercases
    ("barely legally", False),
    ("2 girls 1 cup", True),  # digits
    ("12 girls 1 cup", False),
    ("2g1c.", True),
    ("the g-spot", True),  # punctuation inside an entry
    ("g-spots", False),
    ("s&m", True),
    ("s&ms", False),
    ("(ass)", True),  # punctuation around
    ("'ass'", True),
    ("ass_ass", False),  # "_" is a word character
    ("2ass ass2", False),  # digits too
    ("éass assé", False),  # non-ASCII letters too
    ("ÉASS", False),  # lowercased: "éass"
    ("«ass»", True),  # non-ASCII punctuation is not
    ("ass…", True),
    ("“ass”", True),
    ("日本ass", False),  # CJK characters are word characters
    ("日本 ass", True),
    ("🖕", True),  # an entry that is itself a non-word character
    ("x🖕y", False),  # still needs a separator or a text end on each side
    ("🖕🖕", True),  # the second one is the separator after the first
    ("x 🖕 y", True),
    ("", False),
])
def test_crafted_edge_cases(text, dropped, flat_c4):
    page = make_page(text)
    expected = Outcome(None, {"filtered": 1}) if dropped else Outcome(page, {"passed": 1})
    assert check_badwords(page, pattern=flat_c4) == check_badwords(page) == expected
    assert all_matches(default_badwords_pattern(), text.lower()) == all_matches(flat_c4, text.lower())


@pytest.mark.parametrize("context", [
    "{w}", " {w} ", "x {w}", "{w} x", "x{w} x", "x {w}x", "({w})", "é{w} x", "x {w}é", "{w}_", "-{w}-",
    "{w} {w}", "{w}{w}", "{w}s", "{w}\n{w}",
])
def test_each_listed_word_in_context(context, flat_c4):
    trie = default_badwords_pattern()
    for word in sorted(load_badwords()):
        for text in (context.format(w=word), context.format(w=word[:-1]), context.format(w=word[1:])):
            assert all_matches(trie, text) == all_matches(flat_c4, text), text


@pytest.mark.parametrize("words", [
    {"ass"},
    {"a", "ab", "abc", "abd", "b"},  # every word a prefix of another
    {"a.b", "c++", "13.", "(x)", "[y]", "a|b", "\\"},  # regex metacharacters
    {"Alpha", "beta gamma"},  # upper case never matches lowercased text, in both forms
    {"", "x"},  # an empty entry matches between two separators, in both forms
    {"страница", "сайт", "日本", "ñu"},
])
def test_custom_lists(words):
    trie, flat = badwords_pattern(words), flat_pattern(words)
    for text in ["ab abc abd abe a b", "x a.b c++ 13. (x) [y] a|b \\ y", "alpha Alpha beta gamma", "x  y", "x",
                 "сайт страницы ñu ñus 日本 日本語", "", "ass", "assistance ass."]:
        assert all_matches(trie, text) == all_matches(flat, text), (words, text)


def test_seeded_random_texts(flat_c4):
    """4,000 texts stitched from listed words, their prefixes and suffixes, and separators or word characters."""
    rng = random.Random(22)
    words = sorted(load_badwords())
    joints = [" ", "  ", "\n", ".", ",", "-", "_", "'", "é", "1", "x", "", "«", "🖕"]
    trie = default_badwords_pattern()
    found = 0
    for _ in range(4000):
        pieces = []
        for _ in range(rng.randint(1, 6)):
            word = rng.choice(words)
            cut = rng.randint(0, len(word))
            pieces.append(rng.choice([word, word, word[:cut], word[cut:]]))
            pieces.append(rng.choice(joints))
        text = "".join(pieces)[: rng.randint(1, 80)]
        matches = all_matches(trie, text)
        assert matches == all_matches(flat_c4, text), text
        found += bool(matches)
    assert 1000 < found < 3900  # both outcomes are common
