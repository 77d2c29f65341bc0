"""Glue for the training stacks users bring: TRL (`hf_heads.integrations.trl`) and PEFT (`hf_heads.integrations.peft`).

Each module imports its library (optional extras: `pip install hf_heads[trl]`, `hf_heads[peft]`), so neither is
imported by `import hf_heads`.
"""
