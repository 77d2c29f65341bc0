"""Names that moved between the transformers releases hf_heads supports (the range in `pyproject.toml`).

transformers 5.24 renamed the generation cache from `past_key_values` (and `cache_params`) to `cache`. hf_heads models
accept the cache under any of these names and hand it to the backbone, and return it, under the name of the installed
release, so no call of hf_heads' own triggers the deprecation warning.
"""

from __future__ import annotations

import dataclasses
import inspect

from transformers.modeling_outputs import CausalLMOutputWithPast

# "cache" on transformers >= 5.24, "past_key_values" before
CACHE = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"
CACHE_NAMES = ("cache", "past_key_values", "cache_params")


def take_cache(kwargs: dict):
    """Remove the generation cache from `kwargs`, whichever of `CACHE_NAMES` it came under, and return it (None when
    none was given). Two different caches are refused: one of them would be silently ignored."""
    given = {name: kwargs.pop(name) for name in CACHE_NAMES if name in kwargs}
    caches = {name: value for name, value in given.items() if value is not None}
    if len({id(value) for value in caches.values()}) > 1:
        raise ValueError(f"a generation cache was given twice ({', '.join(caches)}): pass `{CACHE}` only")
    return next(iter(caches.values()), None)


def cache_kwargs(cache) -> dict:
    """`{CACHE: cache}`: the keyword under which the installed transformers takes (and returns) the cache."""
    return {CACHE: cache}


def cache_of(outputs):
    """The cache a backbone returned (None when it returned none), read under the installed release's name."""
    return getattr(outputs, CACHE, None)


def takes_cache(module) -> bool:
    """Whether `module.forward` takes a generation cache at all (old architectures such as openai-gpt take none)."""
    return any(name in inspect.signature(module.forward).parameters for name in CACHE_NAMES)
