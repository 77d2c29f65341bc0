"""The triage of the survivors of `make mutate-sample` (tests/mutate_sample.py, docs/results/mutation_sample.md).

A survivor passed the tests that run its lines: each is named here by its key (path:hash of the replacement, as the
report prints it) with ("test", node ids of the tests that now kill it) or ("equivalent", a one-line reason no test
can tell it from the original).
"""

from __future__ import annotations

TRIAGE: dict[str, tuple[str, str]] = {
    "hf_heads/cli/seq2seq.py:2697ae57ae": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_question_generation_minilm_bert2bert",
    ),
    "hf_heads/modeling/inputs.py:ca38941eac": (
        "test",
        "tests/integrations/test_peft.py::test_generate_with_lora_on_the_head_keeps_the_heads_beam_refusal",
    ),
    "hf_heads/scoring/scores.py:4b00eb7d8b": (
        "test",
        "tests/scoring/test_scoring.py::test_chunk_size_one_is_accepted_and_scores_as_the_default",
    ),
    "hf_heads/training/trainer.py:f3628efb6f": (
        "test",
        "tests/training/test_own_script.py::test_a_continuous_head_from_flags_takes_its_counts_and_output_vocabulary_from_the_training_set",
    ),
    "hf_heads/cli/seq2seq.py:1f4f232bf7": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_translation_sparse_end_to_end_under_accelerate",
    ),
    "hf_heads/__init__.py:8a87d1aa35": (
        "test",
        "tests/project/test_lazy_imports.py::test_version_is_the_installed_distributions",
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
        "tests/cli/test_cli_guards.py::test_built_in_causal_backbones_have_a_512_token_context "
        "tests/cli/test_cli_guards.py::test_each_setting_of_a_built_in_backbone_reaches_its_config[tiny-gpt2]",
    ),
    "hf_heads/data/corpora.py:327aa25fa3": (
        "test",
        "tests/data/test_data.py::test_unknown_corpus_names_listed",
    ),
    "hf_heads/data/corpora.py:c288977256": (
        "test",
        "tests/data/test_data.py::test_wordnet_lexname_labels_are_wordnets_lexicographer_files",
    ),
    "hf_heads/data/corpora.py:079866c0a6": (
        "test",
        "tests/data/test_data.py::test_a_corpus_built_into_an_empty_cache_is_returned_then_reloaded",
    ),
    "hf_heads/modeling/seq2seq.py:8589f7ca5c": (
        "test",
        "tests/modeling/test_tasks.py::test_seq2seq_from_base_of_an_encoder_decoder_model_builds_the_head_asked_for",
    ),
    "hf_heads/data/corpora.py:a64ecc5ce1": (
        "test",
        "tests/data/test_data.py::test_ding_pairs_are_german_and_english_sentences",
    ),
    "hf_heads/heads/softmax.py:5e72fcad62": (
        "test",
        "tests/training/test_own_script.py::test_head_flags_help_says_what_each_option_does",
    ),
    "hf_heads/scoring/__main__.py:fae2bd80df": (
        "test",
        "tests/scoring/test_scoring.py::test_cli_help_lists_each_command_with_what_it_does",
    ),
    "hf_heads/cli/seq2seq.py:8952595326": (
        "test",
        "tests/cli/test_cli_guards.py::test_a_seq2seq_script_refuses_one_column_flag_without_the_other",
    ),
    "hf_heads/data/corpora.py:a076ff5c84": (
        "test",
        "tests/data/test_data.py::test_split_helper_shuffles_before_holding_rows_out",
    ),
    "hf_heads/metrics/modules/recall.py:fd63322cae": (
        "test",
        "tests/metrics/test_metrics.py::test_zero_division[recall] "
        "tests/metrics/test_metrics.py::test_multilabel_configuration[recall]",
    ),
    "hf_heads/training/plots.py:d4c51f4b7b": (
        "test",
        "tests/training/test_cards.py::test_speed_vs_perplexity_figure_is_a_720_by_480_png_with_a_point_per_run",
    ),
    "hf_heads/data/tokenization.py:996e2ea177": (
        "test",
        "tests/data/test_data.py::test_word_counts_tokenizes_batch_size_texts_at_a_time",
    ),
    "hf_heads/metrics/modules/perplexity.py:3b77f9b05f": (
        "test",
        "tests/metrics/test_metrics.py::test_perplexity_device_names_the_torch_device",
    ),
    "hf_heads/scoring/__main__.py:9db2c821f6": (
        "test",
        "tests/scoring/test_scoring.py::test_cli_rescore_names_the_line_and_hypothesis_of_a_text_it_cannot_score",
    ),
    "hf_heads/cli/seq2seq.py:6e1c99967c": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_translation_sparse_end_to_end_under_accelerate",
    ),
    "hf_heads/modeling/base.py:2871e890b2": (
        "test",
        "tests/modeling/test_refusals.py::test_a_family_on_a_model_of_another_task_is_refused_naming_the_model_classes_it_serves",
    ),
    "hf_heads/cli/backbones.py:7a9a9f35ab": (
        "test",
        "tests/modeling/test_special_token_ids.py::test_a_tiny_backbone_takes_the_tokenizers_special_ids",
    ),
    "hf_heads/heads/continuous.py:73033bf306": (
        "equivalent",
        "Tensor.copy_ copies across devices itself: moving the mask to the buffer's device first changes no value",
    ),
    "hf_heads/integrations/peft.py:d03d8bb736": (
        "test",
        "tests/integrations/test_peft.py::test_add_adapter_activates_each_new_adapter_and_refuses_a_taken_name",
    ),
    "hf_heads/scoring/__init__.py:08e1ed0a8c": (
        "test",
        "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists",
    ),
    "hf_heads/training/trainer.py:115e9b6faf": (
        "test",
        "tests/training/test_eval_without_logits.py::test_prediction_step_passes_ignore_keys_on",
    ),
    "hf_heads/scoring/__main__.py:7e50d52c08": (
        "test",
        "tests/scoring/test_scoring.py::test_cli_rescore_names_the_line_and_hypothesis_of_a_text_it_cannot_score",
    ),
    "hf_heads/cli/seq2seq.py:96253d2d76": (
        "test",
        "tests/cli/test_cli_guards.py::test_every_run_script_argument_has_its_help",
    ),
    "hf_heads/data/corpora.py:ba8d218d2d": (
        "test",
        "tests/data/test_data.py::test_wordnet_hypernyms_label_is_the_direct_hypernym",
    ),
    "hf_heads/integrations/peft.py:0957e399c0": (
        "test",
        "tests/integrations/test_peft.py::test_an_adapter_config_without_target_parameters_gets_the_backbones_default_targets",
    ),
    "hf_heads/losses/parts.py:96d98f5830": (
        "test",
        "tests/losses/test_entry.py::test_the_extras_of_returns_equal_their_dense_forms",
    ),
    "hf_heads/metrics/modules/bleu.py:8948272b63": (
        "equivalent",
        "a datasets.Value's id is metadata that evaluate never reads (the features and scores are the same)",
    ),
    "hf_heads/training/cards.py:4bf0bba615": (
        "test",
        "tests/training/test_cards.py::test_card_metadata_names_each_model_classes_task",
    ),
    "hf_heads/integrations/peft.py:c4b3cb7c06": (
        "test",
        "tests/integrations/test_peft.py::test_add_adapter_activates_each_new_adapter_and_refuses_a_taken_name",
    ),
}
