#!/usr/bin/env python
"""Train / fine-tune a translation model with any hf_heads head (the transformers `run_translation.py` shape).

    accelerate launch run_scripts/run_translation.py --output_dir out/es-en \\
        --dataset_name bible-es-en --model_name_or_path tiny-bart \\
        --head sparse --k 20 --head_label_smoothing 0.1 \\
        --do_train --do_eval --predict_with_generate --generation_num_beams 5 --max_steps 2000

Bundled corpora: `bible-es-en` (Spanish → English Bible), `ding-de-en` (German → English sentences of
the Ding dictionary); or a Hub dataset / local .csv/.json files with a `translation` column
(`--source_lang es --target_lang en`) or plain `--source_column` / `--target_column`. BLEU (sacrebleu,
plus BLEU-1..4) comes from the evaluate module shipped in hf_heads when `--predict_with_generate` is on.
"""

from hf_heads.cli.errors import main_wrapper
from hf_heads.cli.seq2seq import Seq2SeqTask, main
from hf_heads.data import TRANSLATION_CORPORA, load_translation

TASK = Seq2SeqTask(
    name="translation",
    title="Translation",
    corpora=TRANSLATION_CORPORA,
    load=load_translation,
    source_column=None,
    target_column=None,
    metrics=("bleu",),
)

if __name__ == "__main__":
    main_wrapper(lambda: main(TASK))
