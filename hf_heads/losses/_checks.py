"""The argument checks' former home: they live in `hf_heads.validation` (kept importable here, and so are objects
pickled with this module path)."""

from hf_heads.validation import OptionError, check_choice, check_number

__all__ = ["OptionError", "check_choice", "check_number"]
