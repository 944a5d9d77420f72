"""Find a WordNet database for METEOR's synonym matching, offline, and say which one was used.

Order: (1) NLTK's own `wordnet` corpus when it is installed in an NLTK data directory; (2) a WordNet 3.0
database directory as the Debian package `wordnet-base` installs it (`/usr/share/wordnet`, or the
directory in `$AOD_BENCH_WORDNET_DIR` / `$WNSEARCHDIR`). That package has the data, index and
exception files NLTK reads but not `lexnames`, the list of the 45 lexicographer files; we supply that
list, whose numbers and names are fixed by WordNet 3.0 and documented in its lexnames(5WN) man page.
(3) Nothing: METEOR then matches exact words and Porter stems only.

`meteor_wordnet()` returns (reader or None, variant string); the variant goes into the cell info and
docs/metrics.md explains the three variants.
"""

from __future__ import annotations

import io
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

# WordNet 3.0 lexicographer files, numbered 00..44 in this order (lexnames(5WN)).
LEXICOGRAPHER_FILES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
# Syntactic category numbers of lexnames(5WN): 1 noun, 2 verb, 3 adjective, 4 adverb.
_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
REQUIRED_FILES = tuple(
    f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")
)

VARIANT_NLTK = "exact+stem+wordnet(nltk_data)"
VARIANT_DEBIAN = "exact+stem+wordnet(wordnet-3.0 dict, generated lexnames)"
VARIANT_NONE = "exact+stem"


def lexnames_text() -> str:
    """The `lexnames` file: index, name and syntactic category, tab separated, one file a line."""
    return "".join(
        f"{i:02d}\t{name}\t{_CATEGORY[name.split('.')[0]]}\n" for i, name in enumerate(LEXICOGRAPHER_FILES)
    )


def _candidate_dirs() -> list[Path]:
    dirs = [os.environ.get("AOD_BENCH_WORDNET_DIR"), os.environ.get("WNSEARCHDIR"), "/usr/share/wordnet"]
    return [Path(d) for d in dirs if d]


def find_wordnet_dict() -> Path | None:
    """A directory with the WordNet 3.0 database files NLTK needs (lexnames may be missing)."""
    for d in _candidate_dirs():
        if all((d / f).is_file() for f in REQUIRED_FILES):
            return d
    return None


def _nltk_wordnet() -> Any | None:
    import nltk

    for resource in ("corpora/wordnet", "corpora/wordnet.zip"):
        try:
            nltk.data.find(resource)
        except LookupError:
            continue
        from nltk.corpus import wordnet

        wordnet.ensure_loaded()
        return wordnet
    return None


def _dict_reader(root: Path) -> Any:
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class DictDirWordNet(WordNetCorpusReader):
        """WordNetCorpusReader over a plain WordNet dict directory, with `lexnames` supplied in memory."""

        def open(self, fileid: str) -> Any:  # noqa: A003 - NLTK's method name
            if fileid == "lexnames" and not (root / "lexnames").is_file():
                return io.StringIO(lexnames_text())
            return super().open(fileid)

        def map_wn(self, version: str = "wordnet") -> None:
            # The mapping to NLTK's packaged WordNet only matters for the multilingual OMW data.
            return None

    # NLTK only opens corpus files below directories it trusts; the dict directory is one we chose.
    if str(root) not in [str(p) for p in nltk.data.path]:
        nltk.data.path.append(str(root))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available": expected
        return DictDirWordNet(str(root), None)


@lru_cache(maxsize=1)
def meteor_wordnet() -> tuple[Any | None, str]:
    """(WordNet reader for nltk's meteor_score, variant) — loaded once per process."""
    try:
        wn = _nltk_wordnet()
        if wn is not None:
            return wn, VARIANT_NLTK
    except (LookupError, OSError):
        pass
    root = find_wordnet_dict()
    if root is not None:
        try:
            return _dict_reader(root), VARIANT_DEBIAN
        except (OSError, ValueError, AssertionError):
            pass
    return None, VARIANT_NONE


class NoSynonyms:
    """Stands in for WordNet when none is available: every word has no synsets (exact + stem only)."""

    def synsets(self, word: str, *args: Any, **kwargs: Any) -> list[Any]:
        return []
