"""METEOR's WordNet: the Debian `wordnet-base` dict directory becomes an NLTK WordNet reader, and the
variant used is recorded; without any WordNet, METEOR falls back to exact + stem matching."""

from __future__ import annotations

import pytest
from nltk.translate.meteor_score import meteor_score

from metrics.wordnet import LEXICOGRAPHER_FILES, NoSynonyms, find_wordnet_dict, lexnames_text, meteor_wordnet


def test_lexnames_lists_the_45_wordnet_3_lexicographer_files() -> None:
    lines = lexnames_text().splitlines()
    assert len(lines) == len(LEXICOGRAPHER_FILES) == 45
    assert lines[0] == "00\tadj.all\t3" and lines[3] == "03\tnoun.Tops\t1"
    assert lines[29] == "29\tverb.body\t2" and lines[44] == "44\tadj.ppl\t3"
    assert lines[2] == "02\tadv.all\t4"


@pytest.mark.skipif(
    find_wordnet_dict() is None, reason="no WordNet dict directory (apt-get install wordnet-base)"
)
def test_dict_directory_reader_gives_synonyms_to_meteor() -> None:
    wn, variant = meteor_wordnet()
    assert wn is not None and "wordnet" in variant
    assert wn.synsets("dog")[0].lexname() == "noun.animal"  # lexnames file generated correctly
    assert "large" in {lemma.name() for s in wn.synsets("big") for lemma in s.lemmas()}
    # nltk METEOR: P = R = 1 with one chunk of 3 matches -> (1 - 0.5 * (1/3) ** 3) * 1. (NLTK looks up
    # synonyms after replacing unmatched words by their Porter stems, so the pair must survive stemming:
    # "car" / "auto" do, "big" / "large" do not.)
    with_syn = meteor_score([["a", "auto", "room"]], ["a", "car", "room"], wordnet=wn)
    assert with_syn == pytest.approx(1 - 0.5 * (1 / 3) ** 3)
    # exact + stem only: 2 matches in 2 chunks; P = R = 2/3, penalty 0.5 * (2/2) ** 3
    exact = meteor_score([["a", "auto", "room"]], ["a", "car", "room"], wordnet=NoSynonyms())
    assert exact == pytest.approx((1 - 0.5) * (2 / 3))
