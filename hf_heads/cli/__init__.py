"""What the run scripts (run_scripts/*.py) share, kept apart from the library they drive: `backbones` (the models a run
builds or loads offline by name), `errors` (one-line reports of bad input; `main_wrapper`), `export_base` (`python -m
hf_heads.cli.export_base MODEL_DIR OUT_DIR [--gguf FILE]`), `resume` (output directories, resumed checkpoints and
reopened models keep their head), `runs` (arguments, the train block, the end-of-run artefacts) and `seq2seq` (the
steps of the seq2seq scripts). No module of the library imports it.
"""
