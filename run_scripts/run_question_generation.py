#!/usr/bin/env python
"""Train / fine-tune an answer-aware question-generation model (answer → question) with any hf_heads head.

    accelerate launch run_scripts/run_question_generation.py --output_dir out/qg \\
        --dataset_name faq --model_name_or_path minilm --head sparse --k 20 --head_label_smoothing 0.1 \\
        --do_train --do_eval --do_predict --predict_with_generate

Bundled corpus: `faq` (503 English FAQ answer/question pairs). Or a Hub dataset / local .csv/.json files
with `--source_column` / `--target_column`. BLEU-1..4 (as the sparse-softmax paper's table 3) and ROUGE
come from the evaluate modules shipped in hf_heads when `--predict_with_generate` is on.
"""

from hf_heads.cli.errors import main_wrapper
from hf_heads.cli.seq2seq import Seq2SeqTask, main
from hf_heads.data import QUESTION_GENERATION_CORPORA, load_question_generation

TASK = Seq2SeqTask(
    name="text2text-generation",
    title="Question generation",
    corpora=QUESTION_GENERATION_CORPORA,
    load=load_question_generation,
    source_column="answer",
    target_column="question",
    metrics=("bleu", "rouge"),
)

if __name__ == "__main__":
    main_wrapper(lambda: main(TASK))
