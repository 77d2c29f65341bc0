"""Former home of the run scripts' support, which now is the package `hf_heads.cli` (`backbones`, `errors`, `resume`,
`runs`). Importing this module re-exports its names with a FutureWarning; it will be removed in 0.3."""

from hf_heads.compat import moved_module

globals().update(moved_module("hf_heads.training.runs"))
