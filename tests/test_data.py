"""The real corpora load offline with the documented sizes, deterministic splits and clear errors."""

import pytest
import torch

from hf_heads import data
from hf_heads.data import corpora


@pytest.mark.parametrize(
    "loader, name, total, columns",
    [
        (data.load_translation, "bible-es-en", (31000, 31100), ["translation"]),
        (data.load_translation, "ding-de-en", (11830, 11830), ["translation"]),
        (data.load_summarization, "bbc-news", (2225, 2225), ["document", "summary", "category"]),
        (data.load_question_generation, "faq", (503, 503), ["id", "answer", "question", "category"]),
        (data.load_classification, "wordnet-lexnames", (117659, 117659), ["text", "label"]),
        (data.load_classification, "wordnet-hypernyms", (20529, 20529), ["text", "label"]),
        (data.load_classification, "bbc-news", (2225, 2225), ["text", "label"]),
        (data.load_classification, "bible-books", (31000, 31200), ["text", "label"]),
        (data.load_lm_text, "bible-web", (37457, 37457), ["text"]),
    ],
)
def test_corpus_sizes_and_splits(loader, name, total, columns):
    dsd = loader(name)
    assert set(dsd) == {"train", "validation", "test"}
    n = sum(len(split) for split in dsd.values())
    assert total[0] <= n <= total[1]
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


def test_glove():
    words, matrix = data.load_glove("6B-50d")
    assert matrix.shape == (400000, 50) and str(matrix.dtype) == "float32"
    assert words[:3] == ["the", ",", "."]


def test_unknown_corpus_names_listed():
    with pytest.raises(ValueError, match="bible-es-en, ding-de-en"):
        data.load_translation("wmt14")
    with pytest.raises(ValueError, match="name='cnn'"):
        data.load_summarization("cnn")
    with pytest.raises(ValueError, match="lang='fr'"):
        data.load_question_generation("faq", lang="fr")


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
