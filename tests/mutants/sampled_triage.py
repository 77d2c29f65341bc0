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
    "hf_heads/cli/seq2seq.py:d2816f63d6": (
        "test",
        "tests/cli/test_cli_guards.py::test_a_misspelt_seq2seq_model_offline_is_one_line_offering_the_built_in_models",
    ),
    "hf_heads/cli/seq2seq.py:cb9cf54ec0": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_question_generation_minilm_bert2bert",
    ),
    "hf_heads/cli/seq2seq.py:7ee20bbebd": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_translation_continuous_reports_its_target_coverage_in_one_step",
    ),
    "hf_heads/cli/seq2seq.py:98eee14277": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_question_generation_minilm_bert2bert",
    ),
    "hf_heads/training/tables.py:4a778d78ec": (
        "test",
        "tests/training/test_own_script.py::test_a_continuous_head_from_flags_takes_its_counts_and_output_vocabulary_from_the_training_set",
    ),
    "hf_heads/training/trainer.py:33261debcf": (
        "test",
        "tests/cli/test_run_clm.py::test_trainer_counts_words_and_resume_reproduces_the_run[margin]",
    ),
    "hf_heads/training/cards.py:a2552fc3a2": (
        "test",
        "tests/training/test_cards.py::test_the_cards_code_runs_as_written[classifier]",
    ),
    "hf_heads/training/cards.py:0d4a488ee2": (
        "test",
        "tests/training/test_cards.py::test_the_longest_loss_labels_fit_inside_the_plot",
    ),
    "hf_heads/scoring/rescore.py:04e00938e9": (
        "test",
        "tests/scoring/test_scoring.py::test_rescore_nbest_refuses_an_nbest_that_is_not_a_list_of_records[str] "
        "tests/scoring/test_scoring.py::test_rescore_nbest_refuses_an_nbest_that_is_not_a_list_of_records[None] "
        "tests/scoring/test_scoring.py::test_rescore_nbest_refuses_an_nbest_that_is_not_a_list_of_records[iterator]",
    ),
    "hf_heads/scoring/rescore.py:c8a001027b": (
        "equivalent",
        "the line above already refuses lm_scores of another row count than nbest's: zip's strict=True never fires",
    ),
    "hf_heads/scoring/scores.py:ccf18135dd": (
        "test",
        "tests/scoring/test_scoring.py::test_seq2seq_sources_are_required_and_aligned",
    ),
    "hf_heads/metrics/modules/recall.py:978ed995ee": (
        "test",
        "tests/metrics/test_metrics.py::test_f1_precision_recall_match_sklearn[recall-kwargs8-False] "
        "tests/metrics/test_metrics.py::test_f1_precision_recall_match_sklearn[recall-kwargs9-False]",
    ),
    "hf_heads/metrics/modules/recall.py:873ab5b838": (
        "test",
        "tests/metrics/test_metrics.py::test_f1_precision_recall_match_sklearn[recall-kwargs3-False] "
        "tests/metrics/test_metrics.py::test_classification_modules_reproduce_evaluate_examples "
        "tests/metrics/test_metrics.py::test_multilabel_configuration[recall]",
    ),
    "hf_heads/metrics/modules/sacrebleu.py:a512cd5fae": (
        "test",
        "tests/metrics/test_metrics.py::test_sacrebleu_evaluate_example_and_errors",
    ),
    "hf_heads/data/corpora.py:c2371d942e": (
        "test",
        "tests/data/test_data.py::test_each_wordnet_lexname_label_names_its_synsets_part_of_speech",
    ),
    "hf_heads/data/corpora.py:53ae4373c4": ("test", "tests/data/test_data.py::test_unknown_corpus_names_listed"),
    "hf_heads/modeling/base.py:93684ae66a": (
        "test",
        "tests/modeling/test_causal_lm.py::test_from_base_of_an_hf_heads_model_is_refused_saying_how_to_load_it",
    ),
    "hf_heads/modeling/classification.py:dfce06d37e": (
        "test",
        "tests/modeling/test_pretrained.py::test_minilm_classifier_keeps_its_classifier_and_labels",
    ),
    "hf_heads/modeling/causal_lm.py:7d411620b6": (
        "test",
        "tests/heads/test_warm_start.py::test_the_default_probe_samples_the_checkpoints_whole_distribution",
    ),
    "hf_heads/modeling/parity.py:8dcc04c0db": (
        "equivalent",
        "transformers' HyperCLOVAXConfig always defines logits_scaling (default 1.0): getattr's default is never read",
    ),
    "hf_heads/heads/continuous.py:177231aa13": (
        "equivalent",
        "contract_examples' names are only the contract suite's pytest ids: no library code or output reads them",
    ),
    "hf_heads/heads/sampled.py:f5070840e5": (
        "test",
        "tests/heads/test_sampled_head.py::test_num_samples_help_gives_the_rule_for_k_and_points_at_its_section_of_the_guide",
    ),
    "hf_heads/losses/_triton_program.py:90a31f46c6": (
        "test",
        "tests/losses/test_kernels.py::test_every_kernel_equals_the_naive_reference_and_passes_gradcheck[triton-mse-target-softcap]",
    ),
    "hf_heads/losses/continuous.py:a0b2bbf799": (
        "test",
        "tests/losses/test_continuous_losses.py::test_the_prediction_sets_the_precision_whatever_the_targets_dtype[vmf_nll]",
    ),
    "hf_heads/components.py:02e89f9a19": (
        "test",
        "tests/heads/test_continuous_head.py::test_a_bad_loss_is_refused_the_same_beside_flat_options[nested-parameter-of-a-loss-without-any]",
    ),
    "hf_heads/losses/chunks.py:8f0eedc188": (
        "test",
        "tests/losses/test_kernels.py::test_kernel_choice_by_name_environment_and_device",
    ),
    "hf_heads/losses/continuous.py:15261587bb": (
        "test",
        "tests/losses/test_continuous_losses.py::test_softmax_losses_keep_a_float64_prediction_in_float64_against_a_float32_table[cosine_softmax_loss] "  # noqa: E501
        "tests/losses/test_continuous_losses.py::test_softmax_losses_keep_a_float64_prediction_in_float64_against_a_float32_table[in_batch_softmax_loss]",
    ),
    "hf_heads/losses/parts.py:396e9d70bf": (
        "test",
        "tests/losses/test_entry.py::test_the_parts_are_checked_by_type_and_returns_by_name",
    ),
    "hf_heads/components.py:848e4f9de8": (
        "test",
        "tests/project/test_components.py::test_a_component_written_on_a_command_line_takes_the_text_after_a_parameters_first_equals_sign_as_its_value",
    ),
    "hf_heads/components.py:8081078ac6": (
        "test",
        "tests/losses/test_properties.py::test_every_head_option_error_names_the_field[softmax-bias-yes] "
        "tests/losses/test_properties.py::test_every_head_option_error_names_the_field[softmax-bias-1] "
        "tests/losses/test_properties.py::test_every_head_option_error_names_the_field[continuous-learn_logit_scale-yes]",
    ),
    "hf_heads/heads/continuous.py:2fdc763d19": (
        "test",
        "tests/heads/test_continuous_head.py::test_center_embeddings_help_says_what_it_subtracts_and_names_each_choice",
    ),
    "hf_heads/heads/softmax.py:7b7f4db93a": (
        "test",
        "tests/cli/test_cli_guards.py::test_every_run_script_argument_has_its_help",
    ),
    "hf_heads/modeling/classification.py:26d9488ab1": (
        "test",
        "tests/modeling/test_tasks.py::test_classification_last_token_pooling_ignores_padding_side",
    ),
    "hf_heads/modeling/inputs.py:034ca441a9": (
        "test",
        "tests/modeling/test_config_read_through.py::test_a_forward_on_the_meta_device_gives_the_output_shapes",
    ),
    "hf_heads/modeling/seq2seq.py:34b121fea1": (
        "test",
        "tests/modeling/test_tasks.py::test_seq2seq_refuses_an_encoder_decoder_pair_whose_decoder_is_not_a_cross_attending_decoder[is_decoder] "  # noqa: E501
        "tests/modeling/test_tasks.py::test_seq2seq_refuses_an_encoder_decoder_pair_whose_decoder_is_not_a_cross_attending_decoder[add_cross_attention]",
    ),
    "hf_heads/modeling/causal_lm.py:6642293f77": (
        "test",
        "tests/modeling/test_causal_lm.py::test_counts_required_and_checked[gpt2] "
        "tests/modeling/test_causal_lm.py::test_counts_required_and_checked[llama]",
    ),
    "hf_heads/integrations/peft.py:a658d8117e": (
        "equivalent",
        "hf_heads models inherit PeftAdapterMixin's class attribute _hf_peft_config_loaded=False: getattr's default is never read",  # noqa: E501
    ),
    "hf_heads/integrations/peft.py:cbf862e204": (
        "test",
        "tests/integrations/test_peft.py::test_add_adapter_refuses_a_config_that_is_not_a_peft_config_naming_its_type",
    ),
    "hf_heads/data/embeddings.py:da43c05b94": (
        "test",
        "tests/heads/test_continuous_head.py::test_table_files_npz_and_word2vec_text",
    ),
    "hf_heads/training/plots.py:efe9aa6ceb": (
        "test",
        "tests/training/test_cards.py::test_word_vector_figure_puts_the_most_frequent_word_at_angle_0_radius_1",
    ),
    "hf_heads/training/plots.py:fc5843a8f4": (
        "test",
        "tests/training/test_cards.py::test_word_vector_figure_of_a_vocabulary_of_a_dozen_words",
    ),
    "hf_heads/training/__init__.py:629bc40c1d": (
        "test",
        "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists[hf_heads.training]",
    ),
    "hf_heads/training/trainer.py:121ea22a23": (
        "test",
        "tests/training/test_own_script.py::test_a_continuous_head_from_flags_needs_the_tokenizer",
    ),
    "hf_heads/scoring/scores.py:e8709fb2cc": (
        "test",
        "tests/scoring/test_scoring.py::test_seq2seq_backbone_without_a_pad_token_id_is_scored",
    ),
    "hf_heads/cli/seq2seq.py:7bf6cf540d": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_summarization_tiny_t5_head_tail",
    ),
    "hf_heads/modeling/gguf_export.py:a0be261835": (
        "equivalent",
        "check_llama only gets past its model_type check with a LlamaConfig, which in transformers>=5.23 always "
        "has rope_parameters (a class attribute, default None), so getattr without a default never raises and "
        "returns the same value",
    ),
    "hf_heads/modeling/seq2seq.py:4616819675": (
        "test",
        "tests/modeling/test_tasks.py::test_seq2seq_source_given_as_inputs_embeds_gives_the_logits_and_loss_of_its_input_ids",
    ),
    "hf_heads/heads/continuous.py:bc7a75d1ce": (
        "test",
        "tests/heads/test_continuous_head.py::test_the_heads_label_names_its_table_unless_it_is_the_packaged_glove",
    ),
    "hf_heads/heads/continuous.py:ded6bbe722": (
        "test",
        "tests/heads/test_contract.py::test_mixed_precision_trains_evaluates_and_generates[continuous-bf16-model-cpu] "
        "tests/heads/test_contract.py::test_mixed_precision_trains_evaluates_and_generates[continuous-vmf-regularised-bf16-model-cpu]",
    ),
    "hf_heads/modeling/base.py:fc7a476ad8": (
        "equivalent",
        "the index tensor's device is unobservable: indexing accepts a CPU index tensor on any device, and the "
        "same 256 evenly spaced labelled rows are picked (at most one extra host-to-device copy)",
    ),
    "hf_heads/training/tables.py:478e2f6cd2": (
        "test",
        "tests/training/test_own_script.py::test_a_continuous_head_from_flags_that_reads_the_training_targets_needs_a_training_set[frequency]",
    ),
    "hf_heads/metrics/modules/perplexity.py:21e818cc70": (
        "equivalent",
        "evaluate.MetricInfo's module_type defaults to 'metric': the loaded module's info.module_type is 'metric' "
        "either way",
    ),
    "hf_heads/metrics/modules/perplexity.py:86f5cbe759": (
        "test",
        "tests/metrics/test_metrics.py::test_perplexity_refuses_texts_too_short_to_score",
    ),
    "hf_heads/metrics/modules/bleu.py:d6ef44c809": (
        "test",
        "tests/metrics/test_metrics.py::test_bleu_matches_evaluate_example_and_keys",
    ),
    "hf_heads/metrics/__init__.py:8677122855": (
        "test",
        "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists[hf_heads.metrics]",
    ),
    "hf_heads/data/corpora.py:08bf0c36ae": (
        "test",
        "tests/data/test_data.py::test_unknown_corpus_names_listed "
        "tests/data/test_data.py::test_corpus_sizes_and_splits[load_lm_text-bible-web-total8-held_out8-columns8]",
    ),
    "hf_heads/cli/seq2seq.py:f897d261de": (
        "test",
        "tests/cli/test_cli_guards.py::test_tokenizing_the_splits_shows_a_progress_bar_naming_each_step",
    ),
    "hf_heads/losses/fused_linear.py:b84c5123c2": (
        "test",
        "tests/losses/test_entry.py::test_the_ranks_are_capped_at_top_k_only_when_top_k_rank_is_asked_for_without_rank",
    ),
    "hf_heads/losses/triton_kernel.py:3edc951e7e": (
        "equivalent",
        "params[1] (the cap) is read only under the SOFTCAP constexpr, i.e. softcap is not None, and every path "
        "refuses softcap <= 0 (check_transform / Scorer), so the `or 1.0` fallback value is never read",
    ),
    "hf_heads/scoring/scores.py:b70c1cc441": (
        "test",
        "tests/scoring/test_scoring.py::test_scoring_shows_a_progress_bar_only_when_asked",
    ),
    "hf_heads/validation.py:8b85ed172c": (
        "equivalent",
        "float() parses case-insensitively: float('-INF') == float('-inf')",
    ),
    "hf_heads/components.py:579729669a": (
        "test",
        "tests/heads/test_registry.py::test_options_coerce_what_json_and_the_command_line_change",
    ),
    "hf_heads/scoring/rescore.py:d955d8d45e": (
        "test",
        "tests/scoring/test_scoring.py::test_rescore_nbest_bad_records_name_the_index_and_field",
    ),
    "hf_heads/scoring/__main__.py:a4653baa70": (
        "equivalent",
        "token_log_probs always returns exactly one row per text (its result list is sized len(texts) up front), "
        "so strict=True on zip(texts, rows) can never raise",
    ),
    "hf_heads/cli/seq2seq.py:9af76e9385": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_translation_continuous_reports_its_target_coverage_in_one_step",
    ),
    "hf_heads/cli/seq2seq.py:c02337ded8": (
        "equivalent",
        "the predictions come from trainer.predict(tokenized['test']), which has exactly the rows of raw['test'] "
        "(map without filtering; gather_for_metrics trims padding), so the three zipped sequences always have the "
        "same length",
    ),
    "hf_heads/training/cards.py:2524cdc23f": (
        "equivalent",
        "Python looks up codec names without regard to case: 'UTF-8' and 'utf-8' are the same codec",
    ),
    "hf_heads/metrics/modules/accuracy.py:7272756b32": (
        "test",
        "tests/metrics/test_metrics.py::test_classification_modules_link_to_the_scikit_learn_function_they_compute[accuracy]",
    ),
    "hf_heads/metrics/modules/bleu.py:4b643b3265": (
        "equivalent",
        "a datasets.Value's id is metadata that evaluate never reads (features repr, format errors and scores are "
        "the same)",
    ),
    "hf_heads/metrics/modules/perplexity.py:043a6b5ecc": (
        "test",
        "tests/metrics/test_metrics.py::test_every_module_loads_by_path_with_evaluate",
    ),
    "hf_heads/data/corpora.py:b839a3838d": (
        "equivalent",
        "np.load returns a fresh writeable float32 array: copying it gives the same values, dtype and flags (only "
        "a transient extra copy)",
    ),
    "hf_heads/data/tokenization.py:b448df73fc": (
        "test",
        "tests/data/test_data.py::test_head_tail_truncation_refuses_a_tokenizer_whose_specials_rewrite_the_text",
    ),
    "hf_heads/data/tokenization.py:cb724e70ff": (
        "test",
        "tests/training/test_training_guards.py::test_label_counts_of_a_dataset_longer_than_one_batch",
    ),
    "hf_heads/components.py:e88e83fc96": (
        "test",
        "tests/losses/test_components_contract.py::test_a_misspelled_component_kind_is_refused_naming_every_kind",
    ),
    "hf_heads/heads/registry.py:b6939e6a8f": (
        "equivalent",
        "no component class has __module__ == 'hf_heads': hf_heads/__init__.py defines no classes and export "
        "refuses to copy the top-level package, so only the 'hf_heads.' and 'hf_heads_' tests ever match",
    ),
    "hf_heads/__init__.py:3c0cc98cdd": (
        "test",
        "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists[hf_heads]",
    ),
    "hf_heads/heads/base.py:859af58007": (
        "test",
        "tests/heads/test_sparse_passes.py::test_the_evaluation_sums_are_kept_on_the_heads_device",
    ),
    "hf_heads/heads/softmax.py:e65ce0dd9e": (
        "equivalent",
        "top_k(True) and top_k(False) are both None (softmax) or both ints (sparse: k and decode_k, which defaults "
        "to k), and no other class overrides top_k, so 'is None' gives the same answer for either",
    ),
    "hf_heads/modeling/base.py:7f9e6b579f": (
        "test",
        "tests/modeling/test_causal_lm.py::test_from_pretrained_naming_neither_a_checkpoint_nor_a_config_fails_as_a_transformers_model_does",
    ),
    "hf_heads/modeling/base.py:fbbbcdc357": (
        "test",
        "tests/modeling/test_legacy_checkpoints.py::test_a_trained_model_continues_with_another_head_only_when_asked",
    ),
    "hf_heads/modeling/seq2seq.py:a5c554a66d": (
        "test",
        "tests/modeling/test_config_read_through.py::test_decoder_stem_is_validated",
    ),
    "hf_heads/components.py:e5a927e237": (
        "test",
        "tests/project/test_components.py::test_a_component_missing_a_parameter_without_default_is_refused_naming_the_field_and_the_parameter",
    ),
    "hf_heads/training/trainer.py:6c04fb091b": (
        "equivalent",
        "record_accuracy sizes accuracy_sums as len(top_k)+2 and sets accuracy_top_k at the same time, so "
        "correct[1:] always has exactly one entry per k and strict= never decides anything",
    ),
    "hf_heads/cli/seq2seq.py:a43df0852c": (
        "test",
        "tests/cli/test_run_tasks.py::test_seq2seq_evaluation_of_a_built_in_backbone_without_a_training_split",
    ),
    "hf_heads/cli/errors.py:dcd4ed3b88": (
        "test",
        "tests/cli/test_run_clm.py::test_main_wrapper_turns_a_hub_oserror_into_one_line",
    ),
    "hf_heads/cli/backbones.py:337dee1c42": (
        "test",
        "tests/cli/test_cli_guards.py::test_built_in_encoder_decoder_backbones_"
        "initialise_at_the_scale_of_d_model[tiny-bart] "
        "tests/cli/test_cli_guards.py::test_built_in_encoder_decoder_backbones_"
        "initialise_at_the_scale_of_d_model[tiny-marian]",
    ),
    "hf_heads/data/tokenization.py:7b6e34820d": (
        "test",
        "tests/data/test_data.py::test_head_tail_truncation_fits_text_down_to_one_token_after_the_specials",
    ),
    "hf_heads/metrics/modules/recall.py:7cbc4100e6": (
        "test",
        "tests/metrics/test_metrics.py::test_multilabel_configuration[recall]",
    ),
    "hf_heads/heads/margin.py:82b3137ffd": (
        "test",
        "tests/training/test_own_script.py::test_head_flags_help_says_what_each_option_does",
    ),
    "hf_heads/losses/fused_linear.py:ac8a595c7e": (
        "test",
        "tests/losses/test_vocab_parallel.py::test_two_processes_with_a_vocabulary_sharded_head_match_one_process",
    ),
    "hf_heads/heads/discrete.py:986203e393": (
        "test",
        "tests/heads/test_registry.py::test_a_head_built_on_its_own_starts_near_the_uniform_distribution",
    ),
    "hf_heads/heads/continuous.py:7c6fcdddab": (
        "test",
        "tests/heads/test_continuous_head.py::test_cosine_softmax_decoding_logits_are_its_training_logits[targets]",
    ),
    "hf_heads/data/tokenization.py:49802c84f2": (
        "test",
        "tests/data/test_data.py::test_frequency_rank_ranks_an_accelerators_counts_there",
    ),
    "hf_heads/metrics/modules/perplexity.py:c5ae1ef397": (
        "test",
        "tests/metrics/test_metrics.py::test_perplexity_argument_errors "
        "tests/metrics/test_metrics.py::test_perplexity_device_names_the_torch_device[gpu-cuda]",
    ),
    "hf_heads/cli/runs.py:68a7a8f36e": (
        "test",
        "tests/cli/test_run_tasks.py::test_run_translation_sparse_end_to_end_under_accelerate",
    ),
    "hf_heads/metrics/modules/f1.py:d98c6c8d3c": (
        "test",
        "tests/metrics/test_metrics.py::test_f1_precision_recall_match_sklearn[f1-kwargs8-False] "
        "tests/metrics/test_metrics.py::test_f1_precision_recall_match_sklearn[f1-kwargs9-False]",
    ),
    "hf_heads/metrics/modules/f1.py:14c2e380c3": (
        "test",
        "tests/metrics/test_metrics.py::test_every_module_cites_the_work_it_computes[f1]",
    ),
    "hf_heads/data/embeddings.py:968dccd23e": (
        "test",
        "tests/data/test_data.py::test_word2vec_table_trains_for_its_epochs",
    ),
    "hf_heads/data/bible.py:a74ac86090": (
        "test",
        "tests/data/test_data.py::test_bible_rebuild_compresses_as_the_bundled_file",
    ),
    "hf_heads/metrics/modules/rouge.py:34f73ff9c6": (
        "equivalent",
        "a datasets.Value's id is metadata that evaluate never reads (features repr, format errors and "
        "scores are the same)",
    ),
    "hf_heads/modeling/export.py:a0a0210b6b": (
        "equivalent",
        "node.module is None only for a relative `from . import x`; '' and 'XXXX' are both not hf_heads, and "
        "the level check skips that node anyway",
    ),
    "hf_heads/scoring/scores.py:e11136b95b": (
        "equivalent",
        "only an id inside the vocabulary pads the batch, and padded positions are masked and never scored, "
        "so which valid id pads changes no score",
    ),
    "hf_heads/modeling/causal_lm.py:8700cbd5b3": (
        "equivalent",
        "generate() applies a None keyword as it does 0.0, and None turns the eta warper off just as 0.0 "
        "does (eta_cutoff=None and 0.0 sample the same sequences under a config with eta_cutoff=0.9)",
    ),
    "hf_heads/modeling/seq2seq.py:620bab6986": (
        "test",
        "tests/modeling/test_tasks.py::test_bert2bert_warm_start_starts_and_ends_with_the_ids_given_else_the_"
        "decoder_configs",
    ),
    "hf_heads/training/cards.py:a454830a7f": (
        "equivalent",
        "model_index_results is only called from write_model_card, whose models are hf_heads models that "
        "always have .head (it reads model.config.head first), so the None default is never used",
    ),
    "hf_heads/modeling/fused.py:769bb4a399": (
        "test",
        "tests/modeling/test_causal_lm.py::test_a_forward_installed_by_accelerates_hooks_runs",
    ),
    "hf_heads/__init__.py:18638aff08": (
        "test",
        "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists[hf_heads]",
    ),
    "hf_heads/losses/continuous.py:d539ad1829": (
        "test",
        "tests/losses/test_continuous_losses.py::test_bad_input[no-negatives]",
    ),
    "hf_heads/heads/softmax.py:9221bfeb65": (
        "test",
        "tests/project/test_docs.py::test_the_committed_options_tables_are_the_generated_ones",
    ),
    "hf_heads/components.py:6ef4344097": (
        "test",
        "tests/project/test_components.py::test_a_component_parameter_that_may_be_text_or_an_object_takes_an_"
        "object_from_a_config_or_a_command_line",
    ),
    "hf_heads/heads/sparse.py:64aba5ae61": (
        "equivalent",
        "renames only the second example label of the sparse family, used only as a test-suite parametrize "
        "id; the example's options are unchanged and no API, doc, help text or saved file shows the label",
    ),
    "hf_heads/heads/continuous.py:d8848878bb": (
        "test",
        "tests/heads/test_continuous_head.py::test_a_losss_parameters_are_its_own_and_the_flat_options_are_re"
        "ad_into_them",
    ),
    "hf_heads/losses/kernels.py:3acc512ade": (
        "test",
        "tests/losses/test_kernels.py::test_a_kernels_pass_with_gradients_writes_the_row_statistics_its_pass_"
        "without_writes[compiled-target-logit-softcap-smoothing]",
    ),
    "hf_heads/metrics/builders.py:59250eddd6": (
        "test",
        "tests/metrics/test_metrics.py::test_classification_builder_reports_accuracy_and_macro_micro_f1",
    ),
    "hf_heads/metrics/modules/sacrebleu.py:caa384db35": (
        "equivalent",
        "datasets 5.2 turns Sequence(..., id=...) into a List and drops the id (the references feature's id "
        "is None either way): features repr, to_dict, format errors and scores are identical",
    ),
    "hf_heads/metrics/modules/sacrebleu.py:b40e52eb82": (
        "test",
        "tests/metrics/test_metrics.py::test_text_generation_modules_link_to_their_code_and_the_metrics_descr"
        "iption[sacrebleu]",
    ),
    "hf_heads/metrics/modules/f1.py:283e740f53": (
        "test",
        "tests/metrics/test_metrics.py::test_multilabel_configuration[f1]",
    ),
    "hf_heads/metrics/modules/rouge.py:79d404c200": (
        "test",
        "tests/metrics/test_metrics.py::test_every_module_cites_the_work_it_computes[rouge]",
    ),
    "hf_heads/training/arguments.py:db6f5b2722": (
        "test",
        "tests/project/test_toy_components.py::test_head_options_set_what_has_no_flag_and_errors_name_them",
    ),
    "hf_heads/training/cards.py:07ec8d8fde": (
        "test",
        "tests/training/test_cards.py::test_card_is_written_in_utf_8_whatever_the_locale",
    ),
    "hf_heads/training/trainer.py:ea65b8fc70": (
        "test",
        "tests/training/test_own_script.py::test_an_uncalibrated_warm_start_refuses_to_train_and_names_the_line",
    ),
    "hf_heads/training/tables.py:dca07e365d": (
        "test",
        "tests/training/test_own_script.py::test_a_continuous_table_of_another_dimension_than_the_heads_embed"
        "ding_dim_is_refused_naming_both",
    ),
    "hf_heads/data/embeddings.py:dbefa611b6": (
        "equivalent",
        "Python looks up codec names without regard to case: 'UTF-8' and 'utf-8' are the same codec (the file"
        " object's encoding name is never read)",
    ),
    "hf_heads/integrations/peft.py:514dd5e7ee": (
        "equivalent",
        "getattr's default is never read (hf_heads models inherit PeftAdapterMixin's _hf_peft_config_loaded=F"
        "alse), and False and None are both falsy in this `and` condition",
    ),
    "hf_heads/cli/seq2seq.py:aa0abc1c0e": (
        "test",
        "tests/cli/test_cli_guards.py::test_a_language_not_in_the_translation_column_names_its_flag_and_the_l"
        "anguages_there[target_lang]",
    ),
    "hf_heads/heads/continuous.py:4bef588251": (
        "test",
        "tests/heads/test_continuous_head.py::test_a_frequency_centred_heads_loss_and_logits_are_its_familys_"
        "reference",
    ),
    "hf_heads/heads/softmax.py:7724ade82e": (
        "test",
        "tests/project/test_docs.py::test_the_committed_options_tables_are_the_generated_ones",
    ),
    "hf_heads/metrics/modules/bleu.py:61f494fdd5": (
        "equivalent",
        "datasets 5.x turns Sequence into List(Value('string')); the id is unused metadata (same repr, same t"
        "o_dict and saved info, same validation and encoding)",
    ),
    "hf_heads/metrics/modules/bleu.py:4be330c985": (
        "test",
        "tests/metrics/test_metrics.py::test_bleu_smoothing_adds_one_to_every_order",
    ),
    "hf_heads/metrics/builders.py:3af29c5f52": (
        "equivalent",
        "sequence-classification logits are (batch, num_labels), where axis=1 is axis=-1; 1-D or 3-D logits a"
        "lready raise with the original code (TypeError / evaluate format ValueError)",
    ),
    "hf_heads/metrics/modules/recall.py:2762ad22c3": (
        "test",
        "tests/metrics/test_metrics.py::test_f1_precision_recall_match_sklearn[recall-kwargs0-True] tests/met"
        "rics/test_metrics.py::test_zero_division[recall]",
    ),
    "hf_heads/scoring/scores.py:765e524fb3": (
        "test",
        "tests/scoring/test_scoring.py::test_a_text_that_tokenizes_to_nothing_is_refused_quoting_its_first_40"
        "_characters",
    ),
    "hf_heads/modeling/classification.py:75b6cf1744": (
        "test",
        "tests/modeling/test_tasks.py::test_classification_returns_the_backbones_hidden_states_and_attentions"
        "_when_asked",
    ),
    "hf_heads/modeling/classification.py:1f00ccc83a": (
        "test",
        "tests/modeling/test_tasks.py::test_classification_dropout_defaults_to_the_backbones_classifier_then_"
        "hidden_dropout",
    ),
    "hf_heads/modeling/bodies.py:0eb406656c": (
        "test",
        "tests/modeling/test_base_export.py::test_another_auto_class_of_a_model_with_a_tensor_it_lacks_is_ref"
        "used_naming_both_classes_and_the_tensor",
    ),
    "hf_heads/modeling/base_export.py:f92d38d097": (
        "test",
        "tests/modeling/test_base_export.py::test_to_base_of_a_saved_model_keeps_the_path_it_was_loaded_from",
    ),
    "hf_heads/training/plots.py:c5471b9536": (
        "test",
        "tests/training/test_cards.py::test_word_vector_figure_draws_the_words_50_leading_principal_components",
    ),
    "hf_heads/training/cards.py:559768b457": (
        "test",
        "tests/training/test_cards.py::test_card_lists_a_score_that_is_no_number_as_it_is_outside_the_scores_table",
    ),
    "hf_heads/heads/discrete.py:9aa569f494": (
        "test",
        "tests/modeling/test_causal_lm.py::test_counts_required_and_checked[gpt2] tests/modeling/test_causal_"
        "lm.py::test_counts_required_and_checked[llama]",
    ),
    "hf_heads/heads/continuous.py:a96b99c038": (
        "test",
        "tests/heads/test_continuous_head.py::test_diagnostics_are_empty_after_a_training_batch_without_targets",
    ),
    "hf_heads/heads/registry.py:ec2d26b58a": (
        "test",
        "tests/heads/test_registry.py::test_a_head_section_without_a_family_is_refused_with_the_families_to_c"
        "hoose_from",
    ),
    "hf_heads/cli/seq2seq.py:796b7ed831": (
        "test",
        "tests/cli/test_cli_guards.py::test_a_seq2seq_script_refuses_a_column_the_data_lacks_and_lists_the_columns",
    ),
    "hf_heads/components.py:9bf74014bb": (
        "test",
        "tests/project/test_components.py::test_a_component_written_on_a_command_line_takes_the_text_after_a_"
        "parameters_first_equals_sign_as_its_value",
    ),
    "hf_heads/__init__.py:888df8389d": (
        "test",
        "tests/project/test_lazy_imports.py::test_every_name_in_a_modules_all_exists[hf_heads]",
    ),
    "hf_heads/metrics/modules/precision.py:c0776e9628": (
        "test",
        "tests/metrics/test_metrics.py::test_multilabel_configuration[precision] tests/metrics/test_metri"
        "c_cards.py::test_every_metric_modules_information_is_the_committed_record",
    ),
    "hf_heads/metrics/modules/perplexity.py:f4aad0fcda": (
        "test",
        "tests/metrics/test_metrics.py::test_perplexity_refuses_a_start_token_the_tokenizer_does_not_have",
    ),
    "hf_heads/metrics/modules/perplexity.py:3a87561e8c": (
        "test",
        "tests/metrics/test_metrics.py::test_perplexity_device_names_the_torch_device[gpu-cuda]",
    ),
    "hf_heads/metrics/modules/perplexity.py:2d9cc2688b": (
        "test",
        "tests/metrics/test_metrics.py::test_perplexity_refuses_texts_too_short_to_score",
    ),
    "hf_heads/metrics/builders.py:44c146bb61": (
        "test",
        "tests/metrics/test_metrics.py::test_generation_builder_reads_the_generated_ids_first_in_a_tuple_of_outputs",
    ),
    "hf_heads/metrics/modules/recall.py:14c2e380c3": (
        "test",
        "tests/metrics/test_metrics.py::test_every_module_cites_the_work_it_computes[recall] tests/metric"
        "s/test_metric_cards.py::test_every_metric_modules_information_is_the_committed_record",
    ),
    "hf_heads/modeling/gguf_export.py:9aa006c6cd": (
        "equivalent",
        "the default only applies where the config has no name_or_path; an empty text and None are both f"
        "alse, so the or takes path.stem either way",
    ),
    "hf_heads/modeling/base_export.py:e451ccb439": (
        "equivalent",
        "on a CPU, the suite's only device, the probe ids are made on the CPU, so to(None) and to(the mod"
        "el's device) are one tensor; gpu_check's to_base rows run it on a GPU",
    ),
    "hf_heads/modeling/base_export.py:0146a6ea16": (
        "test",
        "tests/modeling/test_base_export.py::test_a_classifier_that_pools_otherwise_is_refused_naming_the"
        "_pooling[distribution-differs]",
    ),
    "hf_heads/modeling/base_export.py:9635cd1796": (
        "test",
        "tests/modeling/test_base_export.py::test_a_wrapped_classifier_whose_stem_computes_otherwise_is_r"
        "efused_naming_the_checkpoint_classifier",
    ),
    "hf_heads/modeling/base.py:de5e84901a": (
        "test",
        "tests/training/test_own_script.py::test_head_flags_come_from_the_training_arguments_alone",
    ),
    "hf_heads/modeling/base.py:3fe2ad1be9": (
        "test",
        "tests/modeling/test_causal_lm.py::test_a_model_takes_flash_attention_sdpa_and_flex_attention_as_"
        "its_backbones_do",
    ),
    "hf_heads/modeling/classification.py:83656cdb8a": (
        "test",
        "tests/modeling/test_config_read_through.py::test_a_classifier_of_another_problem_type_is_refused"
        "_every_way_it_arrives",
    ),
    "hf_heads/heads/base.py:a0149ee078": (
        "test",
        "tests/heads/test_registry.py::test_a_family_that_does_not_say_what_its_logits_are_is_carded_as_r"
        "eturning_the_model_scores",
    ),
    "hf_heads/heads/continuous.py:c64e4f91fc": (
        "test",
        "tests/training/test_cards.py::test_card_says_what_the_head_returns_at_inference[continuous] test"
        "s/heads/test_api_record.py::test_the_built_in_options_and_their_defaults_are_the_committed_recor"
        "d",
    ),
    "hf_heads/heads/continuous.py:ac549a9189": (
        "test",
        "tests/heads/test_continuous_head.py::test_a_losss_parameters_are_its_own_and_the_flat_options_ar"
        "e_read_into_them",
    ),
    "hf_heads/training/cards.py:d7bd39eacf": (
        "test",
        "tests/training/test_cards.py::test_card_describes_the_train_loss_by_its_criterion_and_only_a_spl"
        "its_metrics_by_the_eval_loss tests/training/test_card_text.py::test_a_model_card_is_word_for_wor"
        "d_the_committed_one[causal-lm-margin]",
    ),
    "hf_heads/training/cards.py:3cb35873f9": (
        "test",
        "tests/training/test_cards.py::test_card_describes_the_train_loss_by_its_criterion_and_only_a_spl"
        "its_metrics_by_the_eval_loss",
    ),
    "hf_heads/training/cards.py:801cb56e1e": (
        "test",
        "tests/training/test_cards.py::test_model_index_lists_only_standard_metrics",
    ),
    "hf_heads/training/cards.py:eeff283037": (
        "test",
        "tests/training/test_card_text.py::test_a_model_card_is_word_for_word_the_committed_one[seq2seq-continuous]",
    ),
    "hf_heads/training/trainer.py:2ae8b5ac89": (
        "test",
        "tests/training/test_own_script.py::test_a_model_the_trainer_builds_again_for_training_takes_the_"
        "head_the_flags_name tests/training/test_own_script.py::test_a_trainer_given_model_init_trains_th"
        "e_model_it_builds_with_the_flags_head_prepared",
    ),
    "hf_heads/training/trainer.py:3575762472": (
        "test",
        "tests/training/test_own_script.py::test_a_continuous_head_from_flags_takes_its_counts_and_output"
        "_vocabulary_from_the_training_set",
    ),
    "hf_heads/heads/softmax.py:9059b45aa8": (
        "test",
        "tests/losses/test_loss_options.py::test_bad_loss_options_are_refused_with_the_field_and_what_is_"
        "allowed[negative-smoothing]",
    ),
    "hf_heads/heads/softmax.py:e109f46551": (
        "test",
        "tests/losses/test_loss_options.py::test_bad_loss_options_are_refused_with_the_field_and_what_is_"
        "allowed[negative-z]",
    ),
    "hf_heads/cli/seq2seq.py:b300e19dd1": (
        "test",
        "tests/cli/test_cli_guards.py::test_word_vocab_size_keeps_the_most_frequent_words_of_a_built_in_b"
        "ackbones_tokenizer",
    ),
    "hf_heads/cli/seq2seq.py:96408c140c": (
        "test",
        "tests/cli/test_cli_guards.py::test_a_seq2seq_script_refuses_a_column_the_data_lacks_and_lists_th"
        "e_columns[source]",
    ),
    "hf_heads/cli/seq2seq.py:3c0766b121": (
        "test",
        "tests/cli/test_run_tasks.py::test_config_overrides_parse_as_the_field_type",
    ),
    "hf_heads/cli/export_base.py:81c02f3f98": (
        "test",
        "tests/modeling/test_base_export.py::test_the_export_command_refuses_a_model_that_is_not_an_hf_heads_model",
    ),
    "hf_heads/cli/backbones.py:d9006df904": (
        "test",
        "tests/cli/test_cli_guards.py::test_built_in_encoder_decoder_backbones_have_a_decoder_as_wide_as_"
        "the_encoder[tiny-bart] tests/cli/test_cli_guards.py::test_built_in_encoder_decoder_backbones_hav"
        "e_a_decoder_as_wide_as_the_encoder[tiny-marian]",
    ),
    "hf_heads/scoring/__main__.py:3fe11b0dca": (
        "equivalent",
        "argparse gives an optional argument without a default the value None: the parsed --device and it"
        "s help are the same",
    ),
    "hf_heads/scoring/__main__.py:adc2d0b628": (
        "test",
        "tests/scoring/test_scoring.py::test_cli_score_bad_input_one_line_and_exit_2",
    ),
    "hf_heads/modeling/export.py:5b66dc8693": (
        "test",
        "tests/training/test_cards.py::test_save_pretrained_push_to_hub_pushes_the_code",
    ),
    "hf_heads/modeling/base.py:1e3e6cec97": (
        "equivalent",
        "OutputHead.forward reads compute_loss only as not compute_loss and no head overrides forward: No"
        "ne acts as False",
    ),
    "hf_heads/modeling/causal_lm.py:17277a2188": (
        "test",
        "tests/heads/test_warm_start.py::test_the_default_probe_samples_the_checkpoints_whole_distribution",
    ),
    "hf_heads/modeling/configuration.py:d9b937be4b": (
        "test",
        "tests/modeling/test_config_read_through.py::test_an_encoder_decoder_pairs_length_limit_is_the_sm"
        "aller_of_its_sides[encoder-shorter]",
    ),
    "hf_heads/modeling/export.py:b985c00352": (
        "test",
        "tests/heads/test_contract.py::test_save_and_from_pretrained_give_the_same_model[classification-b"
        "ert-softmax-z-loss-penalty]",
    ),
    "hf_heads/modeling/classification.py:59d5ec0d21": (
        "test",
        "tests/modeling/test_config_read_through.py::test_a_classifier_of_another_problem_type_is_refused"
        "_every_way_it_arrives",
    ),
    "hf_heads/components.py:4d8e811493": (
        "equivalent",
        "every kind of KINDS has its base class set when hf_heads is imported, so the base always has a _"
        "_name__ and the fallback is never read",
    ),
    "hf_heads/heads/sampled.py:66cf148b52": (
        "test",
        "tests/heads/test_sampled_head.py::test_the_self_normalization_diagnostic_measures_the_scores_bef"
        "ore_any_renormalisation",
    ),
    "hf_heads/heads/registry.py:fd19147042": (
        "test",
        "tests/heads/test_registry.py::test_a_family_is_held_to_its_reference_and_one_without_a_reference_is_refused",
    ),
    "hf_heads/heads/margin.py:8c8a4ef039": (
        "test",
        "tests/losses/test_loss_options.py::test_bad_loss_options_are_refused_with_the_field_and_what_is_"
        "allowed[momentum-above-1]",
    ),
    "hf_heads/training/arguments.py:4bb4a2e224": (
        "test",
        "tests/training/test_cards.py::test_fp16_on_cpu_warns_and_trains_in_float32",
    ),
    "hf_heads/training/trainer.py:45f17b53d8": (
        "test",
        "tests/training/test_training_guards.py::test_a_trainer_given_no_arguments_evaluates_with_the_tra"
        "nsformers_defaults",
    ),
    "hf_heads/training/arguments.py:2fa94653ff": (
        "test",
        "tests/training/test_cards.py::test_an_unknown_family_or_component_points_to_head_modules_and_an_"
        "unknown_fixed_choice_does_not",
    ),
    "hf_heads/training/plots.py:031961f873": (
        "test",
        "tests/training/test_cards.py::test_word_vector_figure_puts_the_most_frequent_word_at_angle_0_radius_1",
    ),
    "hf_heads/metrics/modules/perplexity.py:ff0dd4a155": (
        "test",
        "tests/metrics/test_metrics.py::test_perplexity_argument_errors tests/metrics/test_metrics.py::te"
        "st_perplexity_device_names_the_torch_device[gpu-cuda]",
    ),
    "hf_heads/losses/continuous_losses.py:2bb7917b2e": (
        "test",
        "tests/heads/test_api_record.py::test_the_built_in_options_and_their_defaults_are_the_committed_record",
    ),
    "hf_heads/cli/runs.py:7b4c3d18a2": (
        "test",
        "tests/cli/test_cli_guards.py::test_start_run_keeps_a_saved_models_head_and_takes_other_hea"
        "d_flags_only_with_change_head",
    ),
    "hf_heads/cli/seq2seq.py:f9eb57d7f2": (
        "equivalent",
        "transformers reads truncation=None with a max_length as longest_first, which is what truncation=True means",
    ),
    "hf_heads/cli/errors.py:cb8994715c": (
        "test",
        "tests/cli/test_cli_guards.py::test_a_model_the_hub_cannot_give_says_whether_offline_mode_i"
        "s_the_reason[online]",
    ),
    "hf_heads/scoring/scores.py:3a9f2d6710": (
        "equivalent",
        "on a CPU-only machine the model's device is the only device, so device=None places the sou"
        "rce ids alike; benchmarks/gpu/gpu_check.py check_scoring tells them apart on CUDA",
    ),
    "hf_heads/scoring/rescore.py:c2807f9317": (
        "equivalent",
        "_aligned refuses an lm_scores row whose length differs from the record's hypotheses first,"
        " so strict never fires",
    ),
    "hf_heads/scoring/__main__.py:578cda36a0": (
        "equivalent",
        "the config passed is the one from_pretrained reads from the same path, unchanged",
    ),
    "hf_heads/data/tokenization.py:e9a2ce5f97": (
        "test",
        "tests/data/test_data.py::test_head_tail_truncation_of_a_lowercase_character_tokenizer_keep"
        "s_cls_first_and_sep_last",
    ),
    "hf_heads/modeling/base.py:31911ff97b": (
        "equivalent",
        "generate is only given a GenerationConfig, which always has num_beams; a None generation c"
        "onfig fails in transformers' generate either way",
    ),
    "hf_heads/modeling/parity.py:51680f8472": (
        "test",
        "tests/modeling/test_architectures.py::test_from_base_returns_the_checkpoints_distribution[causal_lm-cohere]",
    ),
    "hf_heads/modeling/configuration.py:3bf0af2ebd": (
        "test",
        "tests/modeling/test_config_read_through.py::test_tie_word_embeddings_defaults_to_false_and"
        "_config_json_says_so",
    ),
    "hf_heads/heads/options.py:67f902e58e": (
        "equivalent",
        "__post_init__ already built each component from the same value with the option's name as i"
        "ts field, so the rebuild cannot refuse",
    ),
    "hf_heads/heads/sampled.py:fce5942f94": (
        "test",
        "tests/cli/test_argument_record.py::test_every_flag_of_the_run_scripts_is_the_committed_record",
    ),
    "hf_heads/training/arguments.py:b9e11e07b2": (
        "test",
        "tests/project/test_toy_components.py::test_a_refused_head_flag_says_how_to_give_what_was_meant",
    ),
    "hf_heads/training/trainer.py:8b7b830447": (
        "test",
        "tests/training/test_eval_without_logits.py::test_prediction_step_passes_ignore_keys_on",
    ),
    "hf_heads/integrations/peft.py:9a183e0026": (
        "equivalent",
        "every hf_heads model inherits PeftAdapterMixin's _hf_peft_config_loaded=False, so getattr "
        "never needs its default",
    ),
    "hf_heads/losses/fused_linear.py:c66abd2217": (
        "test",
        "tests/losses/test_kernels.py::test_on_an_accelerator_an_ignored_rows_prediction_is_ignore_"
        "index_and_its_rank_minus_one[mean] tests/losses/test_kernels.py::test_on_an_accelerator_an"
        "_ignored_rows_prediction_is_ignore_index_and_its_rank_minus_one[none]",
    ),
    "hf_heads/metrics/modules/perplexity.py:10ac404414": (
        "test",
        "tests/metrics/test_metrics.py::test_perplexity_refuses_texts_too_short_to_score",
    ),
    "hf_heads/data/corpora.py:3fd09cec49": (
        "test",
        "tests/data/test_data.py::test_a_corpus_another_process_cached_first_is_loaded_from_its_copy",
    ),
    "hf_heads/modeling/base_export.py:a69416c91f": (
        "test",
        "tests/modeling/test_base_export.py::test_a_classifier_whose_base_class_computes_with_a_den"
        "se_layer_the_model_lacks_is_refused_naming_its_tensors",
    ),
    "hf_heads/modeling/base_export.py:d97ccb36f6": (
        "test",
        "tests/modeling/test_base_export.py::test_a_model_whose_log_probabilities_are_all_nan_expor"
        "ts_to_a_base_model_that_gives_the_same",
    ),
    "hf_heads/modeling/gguf_export.py:4e43bd7df5": (
        "test",
        "tests/modeling/test_gguf_export.py::test_gguf_of_a_llama_whose_config_leaves_head_dim_unse"
        "t_takes_hidden_over_heads",
    ),
    "hf_heads/cli/seq2seq.py:296c4b14ba": (
        "test",
        "tests/cli/test_cli_guards.py::test_a_trained_continuous_head_centred_by_frequency_evaluate"
        "s_without_a_training_split",
    ),
    "hf_heads/scoring/scores.py:31c88bdd0c": (
        "test",
        "tests/scoring/test_scoring.py::test_normalize_false_refused_where_scores_are_not_self_norm"
        "alised[softmax] tests/scoring/test_scoring.py::test_normalize_false_refused_where_scores_a"
        "re_not_self_normalised[margin] tests/scoring/test_scoring.py::test_normalize_false_refused"
        "_where_scores_are_not_self_normalised[sparse] tests/scoring/test_scoring.py::test_normaliz"
        "e_false_refused_where_scores_are_not_self_normalised[continuous]",
    ),
    "hf_heads/scoring/scores.py:b5fc4973ae": (
        "test",
        "tests/scoring/test_scoring.py::test_normalize_false_refused_where_scores_are_not_self_norm"
        "alised[softmax] tests/scoring/test_scoring.py::test_normalize_false_refused_where_scores_a"
        "re_not_self_normalised[margin] tests/scoring/test_scoring.py::test_normalize_false_refused"
        "_where_scores_are_not_self_normalised[sparse] tests/scoring/test_scoring.py::test_normaliz"
        "e_false_refused_where_scores_are_not_self_normalised[continuous]",
    ),
}
