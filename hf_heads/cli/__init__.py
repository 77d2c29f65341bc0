"""What the run scripts (run_scripts/*.py) share, kept apart from the library they drive:

- `backbones`: the models a run builds or loads offline by name (tiny backbones built from a config, packaged
  models) and how a model card names them;
- `errors`: `UsageError` and the one-line reports of bad input and of models or datasets the Hub cannot give;
  `main_wrapper`;
- `export_base`: `python -m hf_heads.cli.export_base MODEL_DIR OUT_DIR [--gguf FILE]`, a saved model as its base
  architecture (and a GGUF file);
- `resume`: output directories, resumed checkpoints and reopened hf_heads models keep their head;
- `runs`: arguments, local files, the train block and the end-of-run artefacts (`finish_run`);
- `seq2seq`: the steps of the translation, summarization and question-generation scripts.

Imports point from here down into the library, never up: no module of the library imports it.
"""
