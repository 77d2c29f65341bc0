"""Mutants of the task models, save / reload and the Hub export, generation and continuous decoding, scoring; the PEFT
and TRL glue. The selections are shared by groups of mutants (each selection runs once unmutated before its mutants):
a run's cost is mostly the interpreter's start and the test modules it imports, so a group keeps to the modules its
mutants need (the trainer's imports only where the killing test needs them), quick tests first."""

from __future__ import annotations

from mutants import Mutant, m, selection

CAUSAL = "tests/modeling/test_causal_lm.py"
TASKS = "tests/modeling/test_tasks.py"
SCORING = "tests/scoring/test_scoring.py"
READ = "tests/modeling/test_config_read_through.py"
ARCH = "tests/modeling/test_architectures.py::test_from_base_returns_the_checkpoints_distribution"

COMPONENTS_SAVED = selection(
    "tests/project/test_toy_components.py::test_toy_components_train_from_flags_save_reload_and_load_without_hf_heads"
)
COMPONENTS_SCRIPT = selection(
    "tests/project/test_components.py::test_a_component_defined_in_a_script_is_refused_for_the_hub_and_explained_on_load"
)
# causal LM, its fused per-token output, the generation cache, statistics without a loss
LM = selection(
    f"{CAUSAL}::test_fused_lm_head_gives_the_per_token_quantities_of_the_logits",
    f"{CAUSAL}::test_a_training_forward_moves_the_running_max_norm_once[True]",
    f"{CAUSAL}::test_a_generation_cache_given_under_two_names_is_refused",
    f"{CAUSAL}::test_softmax_head_reproduces_base_model",
    f"{SCORING}::test_scoring_never_builds_batch_logits_and_restores_train_mode",
    "tests/heads/test_warm_start.py::test_norm_scaled_margin_head_gain_is_fitted_saved_and_reloaded",
)
# TRL's entropy and top-1 hit from the loss pass
SAME_PASS = selection(
    f"{CAUSAL}::test_the_same_pass_top1_of_a_tie_goes_to_the_lowest_index_and_its_unused_entropy_costs_no_"
    "backward_term",
    f"{CAUSAL}::test_fused_lm_head_takes_entropy_and_top1_from_the_loss_pass_where_it_scores_the_inference_"
    "distribution",
)
# sequence classification, seq2seq, the config
TASK_MODELS = selection(
    f"{TASKS}::test_classification_last_token_pooling_ignores_padding_side",
    f"{TASKS}::test_seq2seq_loss_is_reference_cross_entropy_and_cache_is_consistent",
    f"{SCORING}::test_alone_equals_batched_whatever_the_padding_side[bert2bert]",
    f"{TASKS}::test_classification_from_base_keeps_its_pooling_and_mean_pools_the_unpadded_tokens",
)
# from_base of real architectures: output transforms, biases, the parity check
ARCHITECTURES = selection(
    "tests/modeling/test_architectures.py::test_an_unknown_output_transform_is_refused_not_wrapped",
    f"{ARCH}[causal_lm-opt-project-out]",
    f"{ARCH}[causal_lm-phi]",
    f"{ARCH}[causal_lm-granite]",
    f"{ARCH}[encoder_classification-bert]",
    f"{ARCH}[seq2seq-bart]",
)
# scores, n-best rescoring, the command line
SCORES = selection(
    f"{SCORING}::test_causal_scores_equal_log_softmax_of_model_logits",
    f"{SCORING}::test_sampled_normalize_false_is_the_corrected_score_without_renormalisation",
    f"{SCORING}::test_a_text_that_fills_the_context_exactly_is_scored",
    f"{SCORING}::test_rescore_nbest_combines_and_reranks",
    f"{SCORING}::test_cli_score_writes_the_sentence_log_probs",
    f"{SCORING}::test_cli_score_bad_input_one_line_and_exit_2",
    f"{SCORING}::test_cli_rescore_end_to_end_and_missing_field",
)
# saved directories and the code saved with them, statistics under the trainer, the PEFT and TRL glue
SAVED = selection(
    "tests/training/test_cards.py::test_code_modules_follow_the_imports",
    "tests/integrations/test_peft.py::test_lora_on_the_head_alone_adapts_no_backbone_module",
    "tests/training/test_cards.py::test_save_pretrained_push_to_hub_pushes_the_code",
    "tests/project/test_reliability.py::test_checkpoint_missing_word_counts_or_embedding_table_is_refused",
    "tests/heads/test_contract.py::test_save_and_from_pretrained_give_the_same_model[causal-lm-llama-sparse-smoothed-decode-3]",
    "tests/training/test_eval_without_logits.py::test_eval_accuracy_at_k_without_logits[head0]",
)

# the export to the base architecture: each family on Llama, the bias of BART, the tie of GPT-2, the refusals
BASE_EXPORT = selection(
    "tests/modeling/test_base_export.py::test_seq2seq_folds_into_bart_with_its_final_logits_bias",
    "tests/modeling/test_base_export.py::test_causal_lm_folds_into_gpt2_tied_only_where_w_is_the_embedding",
    "tests/modeling/test_base_export.py::test_a_distribution_no_linear_layer_gives_is_refused_naming_why",
    "tests/modeling/test_base_export.py::test_a_model_built_from_a_config_folds_the_architectures_scale",
)

# fmt: off
MUTANTS: list[Mutant] = [
    # ---------------------------------------------------------------- base.py: the shared model plumbing
    m("from-pretrained-checks-head-weight-only", "modeling/base.py",
      'missing = sorted(k for k in info.get("missing_keys", ()) if k.startswith("head."))',
      'missing = sorted(k for k in info.get("missing_keys", ()) if k.startswith("head.weight"))', SAVED,
      "a checkpoint without the head's word counts / embedding table loads with them uninitialised"),
    m("scoring-forward-computes-the-loss", "modeling/base.py",
      "self._loss_skipped = enabled and not loss", "self._loss_skipped = False", LM,
      "statistics_recorded(loss=False) still computes the training loss in every scoring forward"),
    m("statistics-mask-every-position", "modeling/base.py", 'stats | {"mask": labels != -100}',
      'stats | {"mask": torch.ones_like(labels, dtype=torch.bool)}', SAVED,
      "the recorded statistics' mask keeps the ignored positions (rank 0 there): accuracy@k counts them as hits"),
    m("from-base-in-training-mode", "modeling/base.py",
      "        return model.train(source.training if isinstance(source, PreTrainedModel) else False)",
      "        return model",
      selection("tests/modeling/test_tasks.py::"
                "test_from_pretrained_of_a_base_checkpoint_is_in_evaluation_mode_as_transformers_gives_it"),
      "from_pretrained of a base checkpoint gives a model with dropout on and a forward that returns no logits"),
    m("generation-config-of-the-checkpoint-dropped", "modeling/base.py",
      "            self.generation_config = copy.deepcopy(lm.generation_config)", "            pass",
      selection("tests/modeling/test_tasks.py::"
                "test_from_pretrained_of_a_base_checkpoint_generates_with_its_generation_config"),
      "generate() of a wrapped summarization checkpoint loses its beams, penalties and lengths"),
    m("multi-label-classifier-wrapped", "modeling/classification.py",
      "        check_problem_type(checkpoint.config.problem_type, "
      'f"{name!r} is a classifier with config.problem_type")\n',
      "", selection("tests/modeling/test_config_read_through.py::"
                    "test_a_classifier_of_another_problem_type_is_refused_every_way_it_arrives"),
      "a fine-tuned multi-label classifier is wrapped as a softmax over its labels"),
    m("float-labels-reach-the-loss", "modeling/inputs.py",
      "    if labels is not None and (labels.is_floating_point() or labels.is_complex() "
      "or labels.dtype == torch.bool):",
      "    if False:", selection("tests/modeling/test_config_read_through.py::"
                              "test_a_classifier_of_another_problem_type_is_refused_every_way_it_arrives"),
      "float labels end in an IndexError inside the loss instead of an error naming their dtype"),
    m("pair-generates-to-the-decoders-eos", "modeling/seq2seq.py",
      "            setattr(model.generation_config, name, value)  # generate() ends where training does",
      "            pass  # generate() ends where training does",
      selection("tests/modeling/test_tasks.py::"
                "test_bert2bert_warm_start_starts_and_ends_with_the_ids_given_else_the_decoder_configs"),
      "a BERT2BERT pair given eos_token_id=6 trains with 6 and generates up to its decoder config's EOS"),
    m("scoring-pads-with-minus-one", "scoring/scores.py", "        if isinstance(value, int) and 0 <= value < size:",
      "        if value is not None:",
      selection("tests/modeling/test_special_token_ids.py::"
                "test_causal_scores_with_another_pad_id_are_the_transformers_model_log_probs"),
      "scoring a batch of a model whose config pads with -1 fails, naming a tokenizer larger than the model"),
    m("text-or-object-parameter-refuses-objects", "components.py",
      '    elif "dict" in kinds and isinstance(value, dict):\n        return value\n', "",
      selection("tests/project/test_components.py::"
                "test_a_component_parameter_that_may_be_text_or_an_object_takes_an_object_from_a_config_or_a_command_line"),
      "a str | dict component parameter refuses a dict from a config or a command line"),
    m("word-counts-follow-bf16", "heads/discrete.py",
      "        if self.word_counts.dtype != COUNTS_DTYPE:", "        if False:",
      selection("tests/modeling/test_causal_lm.py::test_word_counts_stay_exact_in_a_bf16_model"),
      "a bf16 model rounds its word counts (12345 becomes 12352): norms, ranks and noise read other counts"),
    # ---------------------------------------------------------------- causal_lm.py
    m("causal-labels-shifted-backwards", "modeling/causal_lm.py",
      "F.pad(labels, (0, 1), value=-100)[:, 1:]", "F.pad(labels, (1, 0), value=-100)[:, :-1]", LM,
      "labels shifted the wrong way: position t is trained on token t − 1"),
    m("causal-fused-drops-num-items", "modeling/causal_lm.py",
      "return token_loss_output(self.head, hidden, shift_labels, num_items_in_batch)",
      "return token_loss_output(self.head, hidden, shift_labels)", LM,
      "the fused_lm_head path drops num_items_in_batch (accumulated TRL micro-batches divide by their own count)"),
    m("warm-start-gain-not-in-config", "modeling/causal_lm.py",
      "        self._write_head_config()  # the fitted gain (an option of the head) into config.head\n"
      "        lm.train(",
      "        lm.train(", LM,
      "the calibrated warm_start_gain never reaches model.config.head: the saved model is not the calibrated one"),
    m("causal-from-base-drops-bias", "modeling/causal_lm.py",
      'model.head.start_from(None if tied else out.weight, getattr(out, "bias", None))',
      "model.head.start_from(None if tied else out.weight, None)", ARCHITECTURES,
      "from_base leaves out the bias of an LM head that has one (Phi, GPT-J)"),
    # ---------------------------------------------------------------- fused.py: TRL's per-token output
    m("fused-top1-at-ignored-positions", "heads/base.py",
      'is_top1 = (stats["rank"] == 0) & (labels.to(stats["rank"].device) != ignore_index)',
      'is_top1 = stats["rank"] == 0',
      SAME_PASS,
      "is_top1 true at ignored positions (rank 0 there): TRL's mean_token_accuracy counts them as hits"),
    m("fused-loss-divides-by-every-position", "modeling/fused.py",
      "divisor = mask.sum().clamp(min=1) if num_items_in_batch is None",
      "divisor = mask.numel() if num_items_in_batch is None", LM,
      "the fused output's loss divides by every position, ignored ones included"),
    m("fused-statistics-second-loss", "heads/base.py",
      "stats = self.statistics(hidden.detach(), labels, ignore_index=ignore_index)",
      "_, stats = self(hidden.detach(), labels, statistics=True, ignore_index=ignore_index)", LM,
      "the fused output's statistics compute a second training loss: a max-norm head's running ‖h‖ moves twice"),
    # ---------------------------------------------------------------- modeling/compat.py
    m("two-caches-accepted", "modeling/compat.py", "if len({id(value) for value in caches.values()}) > 1:",
      "if len({id(value) for value in caches.values()}) > 2:", LM,
      "a cache under `cache` and another under `past_key_values`: one is silently ignored"),
    # ---------------------------------------------------------------- classification.py
    m("last-token-pooling-right-padding-only", "modeling/classification.py",
      "last = mask.shape[1] - 1 - mask.flip(1).long().argmax(dim=1)", "last = mask.long().sum(dim=1) - 1",
      TASK_MODELS, "last-token pooling counts tokens (right padding only): a left-padded row pools a pad"),
    m("mean-pooling-over-padding", "modeling/classification.py",
      "weights = mask.to(hidden.dtype).unsqueeze(-1)",
      "weights = torch.ones_like(mask, dtype=hidden.dtype)[..., None]", TASK_MODELS,
      "mean pooling averages the padding too"),
    m("clf-from-base-drops-pooling", "modeling/classification.py", "            pooling=pooling,\n", "", TASK_MODELS,
      "HeadsForSequenceClassification.from_base ignores pooling= (a bare backbone gets 'auto')"),
    m("clf-from-classifier-drops-bias", "modeling/classification.py",
      "model.head.start_from(projection.weight, projection.bias)", "model.head.start_from(projection.weight, None)",
      ARCHITECTURES, "from_base of a fine-tuned classifier leaves out its final projection's bias"),
    # ---------------------------------------------------------------- seq2seq.py
    m("decoder-inputs-keep-ignore-index", "modeling/seq2seq.py",
      "return shifted.masked_fill(shifted == -100, pad_token_id)", "return shifted", TASK_MODELS,
      "decoder inputs built from labels keep -100 instead of the pad id"),
    m("bert2bert-cross-attention-unmasked", "modeling/seq2seq.py",
      "            encoder_attention_mask=attention_mask,\n", "", TASK_MODELS,
      "the BERT2BERT decoder's cross-attention reads the source's padding"),
    m("final-logits-bias-ignored", "modeling/seq2seq.py", 'bias = getattr(lm, "final_logits_bias", None)',
      "bias = None", ARCHITECTURES, "from_base of BART / Marian / Pegasus leaves out final_logits_bias"),
    # ---------------------------------------------------------------- configuration.py
    m("token-id-from-decoder-only", "modeling/configuration.py", "value = getattr(self.backbone, name, None)",
      "value = getattr(self.backbone.get_text_config(decoder=True), name, None)", TASK_MODELS,
      "special ids read from the decoder config only: BERT2BERT's decoder_start_token_id (top level) is lost"),
    m("hidden-size-ignores-projection", "modeling/configuration.py",
      'return getattr(text, "word_embed_proj_dim", None) or text.hidden_size', "return text.hidden_size",
      ARCHITECTURES, "the head is sized by hidden_size, not by OPT's projected word_embed_proj_dim"),
    # ---------------------------------------------------------------- parity.py
    m("granite-scaling-multiplies", "modeling/parity.py",
      'scale /= float(getattr(text, "logits_scaling", 1.0) or 1.0)',
      'scale *= float(getattr(text, "logits_scaling", 1.0) or 1.0)', ARCHITECTURES,
      "Granite's logits_scaling multiplies instead of dividing"),
    m("parity-compares-checkpoint-with-itself", "modeling/parity.py",
      "b = torch.log_softmax(wrapped.double(), dim=-1)", "b = torch.log_softmax(original.double(), dim=-1)",
      ARCHITECTURES, "the parity check compares the checkpoint's distribution with itself: nothing is ever refused"),
    # ---------------------------------------------------------------- export.py
    m("auto-map-without-config", "modeling/export.py",
      '        "AutoConfig": f"{flat_name(CONFIG_MODULE)}.HeadsConfig",\n', "", SAVED,
      "auto_map has no AutoConfig entry: the export does not load without hf_heads"),
    m("export-copies-top-modules-only", "modeling/export.py", "            todo += imported\n", "", SAVED,
      "the exported code holds the model and config modules, not the modules they import"),
    m("push-to-hub-drops-options", "modeling/export.py", "model.push_to_hub(repo_id, **hub)",
      "model.push_to_hub(repo_id)", SAVED, "save_pretrained(push_to_hub=True) drops commit_message, private, ..."),
    # ---------------------------------------------------------------- scoring
    m("context-limit-counts-the-last-token", "scoring/scores.py", "_check_length(len(seq) - 1, limit,",
      "_check_length(len(seq), limit,", SCORES,
      "a causal text that fits the context exactly is refused (the last token is never fed)"),
    m("scoring-ignores-normalize", "scoring/scores.py",
      "with model.statistics_recorded(normalized=normalize, loss=False, chunk_size=chunk_size)",
      "with model.statistics_recorded(loss=False, chunk_size=chunk_size)", SCORES,
      "normalize=False returns the renormalised scores"),
    m("padded-targets-scored", "scoring/scores.py", "targets, _ = _padded([e.targets for e in batch], -100, device)",
      "targets, _ = _padded([e.targets for e in batch], pad, device)", SCORES,
      "targets padded with the pad id: padding positions are scored"),
    m("word-bonus-sign", "scoring/rescore.py", "return score + lm + length_penalty * num_words",
      "return score + lm - length_penalty * num_words", SCORES,
      "the length penalty favours shorter hypotheses instead of longer ones"),
    m("zero-lm-weight-times-minus-inf", "scoring/rescore.py",
      "lm = lm_weight * lm_score if lm_weight else 0.0", "lm = lm_weight * lm_score", SCORES,
      "lm_weight=0 with a -inf LM score gives nan, not the first-pass score"),
    m("cli-no-eos-ignored", "scoring/__main__.py",
      "dict(normalize=args.normalize, batch_size=args.batch_size, add_bos=args.add_bos, add_eos=args.add_eos)",
      "dict(normalize=args.normalize, batch_size=args.batch_size, add_bos=args.add_bos)", SCORES,
      "the CLI drops --no_eos"),
    m("cli-line-numbers-from-zero", "scoring/__main__.py", 'where=lambda i: f"--input {args.input} line {i + 1}"',
      'where=lambda i: f"--input {args.input} line {i}"', SCORES, "an error names the line before the bad one"),
    m("cli-rescore-drops-length-penalty", "scoring/__main__.py",
      "lm_weight=args.lm_weight, length_penalty=args.length_penalty", "lm_weight=args.lm_weight", SCORES,
      "rescore ignores --length_penalty"),
    # ---------------------------------------------------------------- integrations
    m("head-lora-gets-backbone-targets", "integrations/peft.py",
      'is not None or getattr(peft_config, "target_parameters", None):', "is not None:", SAVED,
      "LoRA on the head alone (target_parameters) also adapts the backbone's default modules"),
    # ---------------------------------------------------------------- config read-through, EncoderDecoderModel, ids
    m("config-set-keeps-a-copy", "modeling/configuration.py", "        setattr(backbone, key, value)\n",
      "        super().__setattr__(key, value)\n",
      selection(f"{READ}::test_setting_a_read_through_value_sets_the_backbone_and_round_trips"),
      "model.config.pad_token_id = ... is stored on the HeadsConfig: the backbone keeps its old value"),
    m("config-pair-length-limit-larger", "modeling/configuration.py", "return min(values)", "return max(values)",
      selection(f"{READ}::test_from_base_wraps_an_encoder_decoder_model_checkpoint"),
      "an encoder-decoder pair reports the larger position limit of its two halves"),
    m("config-generation-params-read-through", "modeling/configuration.py",
      "for k, v in self.__dict__.items()", "for k, v in {n: getattr(self, n, None) for n in params}.items()",
      selection(f"{READ}::test_generation_parameters_go_to_the_generation_config"),
      "BART's forced_eos_token_id, read through, is taken for a generation parameter set on the model config"),
    m("encoder-decoder-model-head-untied", "modeling/seq2seq.py",
      "tied = matrix and out.weight is decoder.get_input_embeddings().weight", "tied = False",
      selection(f"{READ}::test_from_base_wraps_an_encoder_decoder_model_checkpoint"),
      "BERT2BERT's decoder ties its output layer to its input embeddings; the wrapped head is a separate copy"),
    m("ids-negative-labels-pass", "modeling/inputs.py", "if low >= 0 and high < size:", "if high < size:",
      selection(f"{READ}::test_ids_outside_the_vocabulary_are_refused_with_the_fix"),
      "a label of -3 (neither a class nor -100) reaches the head"),
    m("ids-never-checked-on-cpu", "modeling/inputs.py", 'if device.type == "cpu":\n        return True',
      'if device.type == "cpu":\n        return False',
      selection(f"{READ}::test_ids_outside_the_vocabulary_are_refused_with_the_fix"),
      "ids outside the vocabulary reach torch's IndexError again"),
    m("classifier-ignores-config-labels", "modeling/classification.py",
      "        return None, id2label, label2id, problem\n", "        return num_labels, None, None, problem\n",
      selection(f"{READ}::test_classifier_reads_its_labels_from_config"),
      "from_base(name, config=AutoConfig...(num_labels=5)) ignores the config's labels"),
    m("calibrate-false-still-pending", "modeling/base.py",
      "        if not calibrate:\n            self.head.warm_start_pending",
      "        if False:\n            self.head.warm_start_pending",
      selection("tests/modeling/test_architectures.py::test_from_base_returns_the_checkpoints_distribution[seq2seq-bart]"),
      "from_base(..., calibrate=False) of a seq2seq model or classifier still refuses to train the copied head"),
    # ---------------------------------------------------------------- components from the user's own modules
    m("head-option-change-unvalidated", "modeling/base.py",
      "        options = head_options(section)  # an OptionError names head.<option>\n",
      "        options = family(section['family']).options.__new__(family(section['family']).options)\n"
      "        options.__dict__.update({k: v for k, v in section.items() if k != 'family'})\n",
      ["tests/heads/test_registry.py"], "set_head_options keeps a change unvalidated (k = -1 on a sparse head)"),
    m("head-options-read-write", "heads/options.py", "        if self.__dict__.get(\"_built\"):\n            raise",
      "        if False:\n            raise", ["tests/heads/test_registry.py"],
      "a head option is assigned on the live head: the head and config.head part ways silently"),
    m("head-options-not-in-config", "modeling/base.py",
      "            self.head.options = options  # the same tensors: the head keeps its trained ones\n",
      "            self.head.options = options  # the same tensors: the head keeps its trained ones\n"
      "            return\n", ["tests/heads/test_registry.py"],
      "set_head_options changes the head but not config.head: the saved model is not the one in memory"),
    m("head-option-component-module-not-recorded", "modeling/base.py",
      "        self.config.components = component_modules(section) or None\n", "",
      ["tests/project/test_components.py"],
      "a user's component set on the live head is saved without its module (a fresh process cannot load it)"),
    m("replaced-head-config-saved-silently", "modeling/base.py",
      "        if config == head:\n            return\n        keys = sorted(k for k in {*config, *head}",
      "        return\n        keys = sorted(k for k in {*config, *head}", ["tests/heads/test_registry.py"],
      "a config.head replaced after the head was built is saved, and the reloaded model is not the one in memory"),
    m("components-not-imported-on-load", "heads/registry.py", "            importlib.import_module(module)\n",
      "            pass\n", COMPONENTS_SAVED,
      "loading a config whose margin comes from the user's module does not import it: the head is refused"),
    m("components-copy-not-imported", "modeling/export.py",
      'f"from .{flat_name(module)} import {COPIED_FROM} as _component_{i}  # noqa: E402, F401\\n"', '""',
      COMPONENTS_SAVED, "the saved copy of the user's module is never imported: trust_remote_code refuses the head"),
    m("components-margin-not-recorded", "heads/registry.py",
      "            found[f.name] = type(options.component(f.name))\n", "            pass\n",
      COMPONENTS_SAVED, "a margin from the user's module is not recorded in the config, nor saved with the model"),
    m("components-script-carried", "modeling/export.py", '        if module == "__main__":\n            raise',
      '        if False:\n            raise', COMPONENTS_SCRIPT,
      "a component defined in a script (__main__) is saved as if it could travel"),
    m("export-every-family", "modeling/export.py", "                source = _only_family(source, family_module)\n",
      "                pass\n",
      selection("tests/project/test_components.py::test_a_saved_directory_carries_the_code_of_its_task_and_family_only"),
      "every saved directory carries every task's and family's modules again"),
    # ---------------------------------------------------------------- the export to the base architecture, GGUF
    m("base-export-final-logits-bias-zero", "modeling/base_export.py",
      '            return {"final_logits_bias": row.to(device=self._device(), dtype=dtype)}',
      '            return {"final_logits_bias": torch.zeros_like(row).to(device=self._device(), dtype=dtype)}',
      BASE_EXPORT, "the exported BART / Marian model's final_logits_bias is zero, not the head's b'"),
    m("base-export-always-tied", "modeling/base_export.py", "        keep_tie = (\n            tied\n            and",
      "        keep_tie = tied or (\n            tied\n            and", BASE_EXPORT,
      "a norm-scaled output layer stays tied to the input embeddings (the export loses the scaled rows)"),
    m("base-export-bias-dropped-silently", "modeling/base_export.py",
      "            if not finite or not bool((bias == bias.reshape(-1)[0]).all()):",
      "            if False:", BASE_EXPORT,
      "a bias the architecture has no place for is dropped instead of refused"),
    m("base-export-multiplier-not-folded", "modeling/base_export.py",
      '        if head["logit_multiplier"] == base["logit_multiplier"]:', "        if True:", BASE_EXPORT,
      "a head without the architecture's logit scale is exported with the architecture's scale on top"),
    m("gguf-key-permuted-with-query-heads", "modeling/gguf_export.py",
      "            array = permute_for_ggml(array, config.num_key_value_heads)",
      "            array = permute_for_ggml(array, config.num_attention_heads)",
      selection("tests/modeling/test_gguf_export.py"),
      "the key projection of a grouped-query model is permuted wrongly"),
    m("run-export-base-dir-ignored", "cli/runs.py", "    if run_args.export_base_dir:", "    if False:",
      selection("tests/modeling/test_base_export.py::test_a_run_script_writes_the_export_to_the_base_architecture"),
      "--export_base_dir is accepted and nothing is written"),
    # ---------------------------------------------------------------- TRL's statistics from the loss pass
    m("same-pass-statistics-off", "heads/softmax.py", "        return self.top_k(False) is None\n",
      "        return False\n", SAME_PASS,
      "a softmax head makes a second pass over W for TRL's entropy and top-1 hits"),
    m("same-pass-statistics-margin-training", "heads/margin.py", "        return not self.training\n",
      "        return True\n", SAME_PASS,
      "a training margin head reports the entropy and argmax of its margin logits as the inference distribution's"),
    m("same-pass-entropy-weights-materialized", "losses/fused_linear.py",
      "        ctx.set_materialize_grads(False)", "        pass", SAME_PASS,
      "an entropy asked for without its gradient still adds zero-weighted entropy terms to the recomputing backward"),
    m("same-pass-top1-ignored-rows", "heads/discrete.py",
      '        hit = (out.predictions == target) & (target != counting.ignore_index)\n',
      "        hit = out.predictions == target\n", SAME_PASS,
      "ignored positions count as top-1 hits in TRL's mean_token_accuracy"),
    m("same-pass-entropy-not-detached", "heads/discrete.py", '"entropy": out.entropy.detach()',
      '"entropy": out.entropy', SAME_PASS, "TRL's entropy carries a gradient into the model"),
    m("flat-config-decoder-view-read", "modeling/configuration.py",
      "        return getattr(text, name, None) if nested else None\n", "        return getattr(text, name, None)\n",
      selection(f"{TASKS}::test_seq2seq_training_without_a_decoder_start_token_is_refused_naming_the_backbone_field"),
      "an unset decoder start token of a BART config reads as the class default 2 and shifts the labels silently"),
    m("config-override-refused-by-class-traceback", "cli/seq2seq.py",
      "        except (ValueError, TypeError, StrictDataclassError) as err:"
      "  # the config class's own check of the field\n",
      "        except (ValueError, TypeError) as err:  # the config class's own check of the field\n",
      selection("tests/cli/test_run_tasks.py::test_task_scripts_bad_input_is_one_line_and_exit_2"),
      "--config_overrides that the config class refuses when set ends in a traceback"),
    m("refused-export-written-in-place", "modeling/base_export.py",
      "        staged = Path(tmp)  # written and checked here: a refused export leaves `directory` as it was\n",
      "        staged = directory\n        directory.mkdir(exist_ok=True)\n",
      selection("tests/modeling/test_base_export.py::test_an_export_that_loads_back_otherwise_than_it_was_saved_is_refused"),
      "a refused export leaves its weights, config and card in the directory"),
    m("counts-refusal-names-no-option", "heads/discrete.py",
      "                f\"head.{self.options.counts_reason() or f'family={self.family!r}'}"
      " needs word counts, but this head \"\n",
      "                f\"head.{self.options.counts_reason()} needs word counts, but this head \"\n",
      selection("tests/heads/test_registry.py::test_a_family_that_needs_word_counts_without_saying_why_is_named_when_they_are_missing"),
      "a family that needs word counts without naming the option is refused as 'head. needs word counts'"),
    m("head-tail-probe-empty-accepted", "data/tokenization.py",
      "        if not bare:\n            continue\n", "",
      selection("tests/data/test_data.py::test_head_tail_truncation_finds_the_specials_of_a_tokenizer_that_cannot_encode_the_usual_probe"),
      "head+tail truncation takes every special for a suffix when the probe encodes to nothing"),
    m("zero3-backbone-partitioned-in-a-direct-build", "modeling/zero3.py",
      "    with built_whole():\n        return auto_class.from_config(config)",
      "    return auto_class.from_config(config)",
      selection("tests/integrations/test_deepspeed.py::test_a_model_built_directly_under_a_zero3_config_builds_its_backbone_whole"),
      "a model built directly under a ZeRO-3 config partitions its backbone and fails in its own init"),
]
# fmt: on
