"""Spanish–English Bible, verse-aligned, from the SWORD modules of Debian's `sword-text-web` (World English
Bible, 2015) and `sword-text-sparv` (Reina-Valera 1909), both public domain. The aligned verses are bundled with
hf_heads (`bundled/bible_es_en.tsv.xz`); this module only rebuilds that file:

    apt-get install sword-text-web sword-text-sparv && pip install pysword
    python -m hf_heads.data.bible hf_heads/data/bundled/bible_es_en.tsv.xz

The two versifications differ, so verses are paired by (book, chapter, verse) inside each chapter both modules have.
Footnotes are removed before the markup, because pysword's `clean=True` glues the words around them together.
"""

from __future__ import annotations

import lzma
import re
import sys
from pathlib import Path

WEB_PATH = "/usr/share/sword/modules/texts/ztext/engWEB2015eb/"
RV_PATH = "/usr/share/sword/modules/texts/ztext/spaRV1909eb/"
INSTALL_HINT = "apt-get install sword-text-web sword-text-sparv && pip install pysword"

_NOTE = re.compile(r"<note\b.*?</note>", re.S)
_TAG = re.compile(r"<[^>]+>")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?’”)\]])")
_SPACE = re.compile(r"\s+")


def clean_osis(text: str) -> str:
    """Strip OSIS markup from one verse: footnotes first, then tags, then tidy spacing."""
    text = _NOTE.sub(" ", text)
    text = _TAG.sub("", text)
    text = _SPACE.sub(" ", text).strip()
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


def _open(path: str, versification: str):
    try:
        from pysword.bible import SwordBible
    except ImportError as err:  # pragma: no cover - exercised only without pysword
        raise ImportError(f"reading the SWORD Bible modules needs pysword: {INSTALL_HINT}") from err
    if not Path(path).is_dir():
        raise FileNotFoundError(f"SWORD module not found at {path}: {INSTALL_HINT}")
    return SwordBible(path, "ztext", versification, "utf-8", "OSIS")


def extract_verses() -> list[tuple[str, int, int, str, str]]:
    """Records (book, chapter, verse, english, spanish) of every WEB verse in canonical order ('' where RV1909 has
    none)."""
    web, rv = _open(WEB_PATH, "nrsva"), _open(RV_PATH, "kjv")
    rv_books = {b.osis_name: b for part in rv.get_structure().get_books().values() for b in part}
    verses: list[tuple[str, int, int, str, str]] = []
    for part in web.get_structure().get_books().values():
        for book in part:
            other = rv_books.get(book.osis_name)
            for chapter in range(1, book.num_chapters + 1):
                n_en = book.chapter_lengths[chapter - 1]
                n_es = other.chapter_lengths[chapter - 1] if other and chapter <= other.num_chapters else 0
                for verse in range(1, n_en + 1):
                    en = clean_osis(web.get(books=[book.osis_name], chapters=[chapter], verses=[verse], clean=False))
                    es = ""
                    if verse <= n_es:
                        es = clean_osis(
                            rv.get(books=[book.osis_name], chapters=[chapter], verses=[verse], clean=False)
                        )
                    if en:
                        verses.append((book.osis_name, chapter, verse, en, es))
    return verses


def write_tsv(verses: list[tuple[str, int, int, str, str]], out: Path) -> None:
    with lzma.open(out, "wt", encoding="utf-8", preset=9) as f:
        f.write("book\tchapter\tverse\ten\tes\n")
        for book, chapter, verse, en, es in verses:
            f.write(f"{book}\t{chapter}\t{verse}\t{en.replace(chr(9), ' ')}\t{es.replace(chr(9), ' ')}\n")


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "bundled" / "bible_es_en.tsv.xz")
    verses = extract_verses()
    write_tsv(verses, target)
    print(f"wrote {len(verses)} verses to {target}")
