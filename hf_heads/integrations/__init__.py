"""Glue for the PEFT adapters users bring (`hf_heads.integrations.peft`; the TRL trainer is
`hf_heads.training.trl`, beside `HeadsTrainer`).

The module imports its library (optional extra: `pip install hf_heads[peft]`), so it is not imported by
`import hf_heads`.
"""
