"""The triage of the survivors of `make mutate-sample` (tests/mutate_sample.py, docs/results/mutation_sample.md).

A survivor passed the tests that run its lines: each is named here by its key (path:hash of the replacement, as the
report prints it) with ("test", node ids of the tests that now kill it) or ("equivalent", a one-line reason no test
can tell it from the original).
"""

from __future__ import annotations

TRIAGE: dict[str, tuple[str, str]] = {
    "hf_heads/cli/seq2seq.py:2697ae57ae": (
        "test",
        "tests/test_run_tasks.py::test_run_question_generation_minilm_bert2bert",
    ),
    "hf_heads/modeling/inputs.py:ca38941eac": (
        "test",
        "tests/test_peft.py::test_generate_with_lora_on_the_head_keeps_the_heads_beam_refusal",
    ),
    "hf_heads/scoring/scores.py:4b00eb7d8b": (
        "test",
        "tests/test_scoring.py::test_chunk_size_one_is_accepted_and_scores_as_the_default",
    ),
    "hf_heads/training/trainer.py:f3628efb6f": (
        "test",
        "tests/test_own_script.py::test_a_continuous_head_from_flags_takes_its_counts_and_output_vocabulary_from_the_training_set",
    ),
    "hf_heads/cli/seq2seq.py:1f4f232bf7": (
        "test",
        "tests/test_run_tasks.py::test_run_translation_sparse_end_to_end_under_accelerate",
    ),
    "hf_heads/__init__.py:8a87d1aa35": (
        "test",
        "tests/test_lazy_imports.py::test_version_is_the_installed_distributions",
    ),
    "hf_heads/metrics/modules/sacrebleu.py:8948272b63": (
        "equivalent",
        "a datasets.Value's id is metadata that evaluate never reads (format, encoding and compute ignore it)",
    ),
    "hf_heads/modeling/gguf_export.py:cedc0b2524": (
        "equivalent",
        "export_gguf takes Llama only, whose state dict ends with lm_head.weight: break and continue skip nothing",
    ),
    "hf_heads/cli/backbones.py:49e57ca847": (
        "test",
        "tests/test_cli_guards.py::test_built_in_causal_backbones_have_a_512_token_context "
        "tests/test_cli_guards.py::test_each_setting_of_a_built_in_backbone_reaches_its_config[tiny-gpt2]",
    ),
    "hf_heads/data/corpora.py:327aa25fa3": (
        "test",
        "tests/test_data.py::test_unknown_corpus_names_listed",
    ),
    "hf_heads/data/corpora.py:c288977256": (
        "test",
        "tests/test_data.py::test_wordnet_lexname_labels_are_wordnets_lexicographer_files",
    ),
    "hf_heads/data/corpora.py:079866c0a6": (
        "test",
        "tests/test_data.py::test_a_corpus_built_into_an_empty_cache_is_returned_then_reloaded",
    ),
    "hf_heads/modeling/seq2seq.py:8589f7ca5c": (
        "test",
        "tests/test_modeling_tasks.py::test_seq2seq_from_base_of_an_encoder_decoder_model_builds_the_head_asked_for",
    ),
    "hf_heads/data/corpora.py:a64ecc5ce1": (
        "test",
        "tests/test_data.py::test_ding_pairs_are_german_and_english_sentences",
    ),
    "hf_heads/heads/softmax.py:5e72fcad62": (
        "test",
        "tests/test_own_script.py::test_head_flags_help_says_what_each_option_does",
    ),
    "hf_heads/scoring/__main__.py:fae2bd80df": (
        "test",
        "tests/test_scoring.py::test_cli_help_lists_each_command_with_what_it_does",
    ),
    "hf_heads/cli/seq2seq.py:8952595326": (
        "test",
        "tests/test_cli_guards.py::test_a_seq2seq_script_refuses_one_column_flag_without_the_other",
    ),
    "hf_heads/data/corpora.py:a076ff5c84": (
        "test",
        "tests/test_data.py::test_split_helper_shuffles_before_holding_rows_out",
    ),
    "hf_heads/metrics/modules/recall.py:fd63322cae": (
        "test",
        "tests/test_metrics.py::test_zero_division[recall] "
        "tests/test_metrics.py::test_multilabel_configuration[recall]",
    ),
    "hf_heads/training/plots.py:d4c51f4b7b": (
        "test",
        "tests/test_cards.py::test_speed_vs_perplexity_figure_is_a_720_by_480_png_with_a_point_per_run",
    ),
}
