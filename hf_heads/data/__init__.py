"""Real corpora (bundled or read from installed registry packages), word-level tokenizers and
word counts. See `corpora` for the list of corpora and their licences."""

from hf_heads.data.corpora import (
    CLASSIFICATION_CORPORA,
    LM_CORPORA,
    QUESTION_GENERATION_CORPORA,
    SUMMARIZATION_CORPORA,
    TRANSLATION_CORPORA,
    cache_dir,
    load_classification,
    load_glove,
    load_lm_text,
    load_question_generation,
    load_summarization,
    load_translation,
    split_dataset,
)
from hf_heads.data.embeddings import (
    EMBEDDING_TABLES,
    embedding_table,
    load_word_vectors,
    map_uncovered,
    save_table,
    train_word2vec_table,
)
from hf_heads.data.models import minilm_path, smollm2_path
from hf_heads.data.tokenization import (
    SPECIAL_TOKENS,
    build_word_tokenizer,
    frequency_rank,
    is_word_tokenizer,
    label_counts,
    word_counts,
)

__all__ = [
    "EMBEDDING_TABLES",
    "embedding_table",
    "map_uncovered",
    "load_word_vectors",
    "save_table",
    "train_word2vec_table",
    "CLASSIFICATION_CORPORA",
    "LM_CORPORA",
    "QUESTION_GENERATION_CORPORA",
    "SPECIAL_TOKENS",
    "SUMMARIZATION_CORPORA",
    "TRANSLATION_CORPORA",
    "build_word_tokenizer",
    "cache_dir",
    "frequency_rank",
    "is_word_tokenizer",
    "load_classification",
    "load_glove",
    "load_lm_text",
    "load_question_generation",
    "load_summarization",
    "load_translation",
    "minilm_path",
    "smollm2_path",
    "split_dataset",
    "label_counts",
    "word_counts",
]
