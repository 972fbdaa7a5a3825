"""The one tokenizer behind BM25: our persisted index and the rank-bm25 reference both use it.

Rule (docs/FORMAT.md section 11): Unicode NFC, ``str.lower()``, then every ``\\w+`` match.
No stemming and no stopword list: BM25's idf already discounts very common words (and
rank-bm25's epsilon floor keeps them from going negative), and a stopword list would have to be
measured on LoCoMo before it could be trusted to help; questions such as "when did she ..."
lean on short function words less than on names and dates, which the regex keeps.
Tokens are non-empty and never contain a newline, which the vocabulary file relies on.
"""
from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Split `text` into lowercase word tokens.

    Parameters
    ----------
    text : str
        Any Unicode text.

    Returns
    -------
    list of str
        The ``\\w+`` runs of the NFC-normalised, lowercased text, in order, with repetition.
    """
    return _WORD.findall(unicodedata.normalize("NFC", text).lower())
