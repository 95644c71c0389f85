"""A list of literal words as one prefix-tree (trie) regular expression.

`trie_regex(["ass", "asshole", "anal"])` is `a(?:nal|ss(?:|hole))`: the words' common prefixes are written once, so
at each position the regex engine follows one path of the tree instead of retrying every word in turn.
"""
from __future__ import annotations

import re
from typing import Iterable

_Node = dict[str, "_Node"]
_END = ""  # child key marking "a word ends here"; "" sorts before every character


def trie_regex(words: Iterable[str]) -> str:
    """Regex source (no capturing group) for the alternation `"|".join(map(re.escape, sorted(set(words))))`.

    Each node becomes `(?:b1|b2|...)`: the end-of-word branch (empty) first, then one branch per next character in
    code-point order; a node with a single branch needs no group.
    Why a search with it, followed by anything (here the boundary `(?:\\W|$)`), finds exactly what the flat form
    finds: `re` tries alternatives left to right and backtracks into them when what follows fails. So at each
    position the flat form succeeds with the first word, in sorted order, that matches there and lets the suffix
    match after it. In the tree the suffix follows the whole group, so a failing suffix backtracks into the tree and
    the next word is tried, as in the flat list; and the walk (end of word first, then children by code point) meets
    the words in `sorted()` order, since a word sorts before its extensions. Both stop at the same word at the same
    position: same verdict, span and groups for `search` and `finditer`.
    An empty `words` gives "" (as the flat alternation does): callers decide what an empty list means.
    """
    root: _Node = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[_END] = {}
    return _node_regex(root)


def _node_regex(node: _Node) -> str:
    branches = [re.escape(char) + _node_regex(child) for char, child in sorted(node.items())]
    if len(branches) <= 1:
        return "".join(branches)
    return f"(?:{'|'.join(branches)})"
