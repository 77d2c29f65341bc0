"""A package of components written outside hf_heads, as a user writes them in a package of their own
(docs/contributing.md, "Four toy extensions"): a margin with two parameters (`margins`), a word norm with one
(`word_norms`), a batch context norm other than max-norm (`context_norms`), a sampling method with one (`sampling`),
a continuous-output loss with one (`continuous`) and a chunk kernel (`kernels`).
Importing a module registers its component; a config records the module, so a saved model imports it again on
loading, or carries a copy of it for trust_remote_code.

tests/losses/test_components_contract.py runs every registered component, these included, through its kind's
contract, and tests/heads/test_contract.py runs them in the families' head cases;
tests/project/test_toy_components.py trains each through the run script's flags (the continuous loss in a seq2seq
model built in the test), saves, and reloads it."""
