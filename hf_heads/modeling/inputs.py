"""The models' check of their token ids and labels: an id outside the vocabulary is refused with a `ValueError` that
names the tensor, the id, the size it must stay below and the fix, instead of torch's `IndexError` (CPU) or a
device-side assert (CUDA) deep inside the embedding or the head. On CPU every forward checks; on an accelerator, where
reading the result back stalls the device's queue, only the first forward of each mode does. Inside `torch.compile`
tracing nothing is checked.
"""

from __future__ import annotations

import torch
from torch import nn

FIX = (
    "hf_heads models cannot be resized, so resize the base model before wrapping it: "
    "base = AutoModelFor….from_pretrained(name); base.resize_token_embeddings(len(tokenizer)); "
    "model = {cls}.from_base(base, ...) (or use the tokenizer the checkpoint was trained with)"
)


def embedding_size(module: nn.Module | None) -> int | None:
    """The number of rows of an input embedding module (None when it is not an embedding table)."""
    size = getattr(module, "num_embeddings", None)
    return size if isinstance(size, int) else None


def input_embeddings(module: nn.Module) -> nn.Module | None:
    """`module.get_input_embeddings()`, or None for a module without one."""
    get = getattr(module, "get_input_embeddings", None)
    try:
        return get() if get is not None else None
    except NotImplementedError:
        return None


def unwrapped_head(head: nn.Module | None) -> nn.Module | None:
    """A model's head, also when PEFT wrapped it (`target_parameters=["head.weight"]` puts a wrapper whose
    `get_base_layer()` is the head in its place)."""
    return head.get_base_layer() if hasattr(head, "get_base_layer") else head


def model_head(model: nn.Module) -> nn.Module | None:
    """`model.head` (`unwrapped_head`); None for a model without one."""
    return unwrapped_head(getattr(model, "head", None))


def head_classes(head: nn.Module) -> int:
    """The number of classes of a model's head (`unwrapped_head`)."""
    return unwrapped_head(head).num_classes


def _this_forward_checks(model: nn.Module, device: torch.device) -> bool:
    """Whether this forward checks (see the module docstring)."""
    if torch.compiler.is_compiling() or device.type == "meta":
        return False
    if device.type == "cpu":
        return True
    seen = model.__dict__.setdefault("_ids_checked", set())  # modes already checked on an accelerator
    if model.training in seen:
        return False
    seen.add(model.training)
    return True


def check_token_ids(
    model: nn.Module,
    ids: dict[str, tuple[torch.Tensor | None, int | None]],
    labels: torch.Tensor | None = None,
    num_classes: int | None = None,
    classifier: bool = False,
) -> None:
    """Refuse token ids outside their embedding (`ids`: {input name: (ids or None, rows or None)}) and labels outside 0
    <= label < `num_classes` other than -100; `classifier`: the error speaks of num_labels."""
    if labels is not None and (labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool):
        what = "class ids" if classifier else "token ids"
        raise ValueError(f"labels has dtype {labels.dtype}; allowed: an integer dtype holding {what} (-100: ignored)")
    named = [(name, t, size) for name, (t, size) in ids.items() if t is not None and size is not None]
    if labels is not None and num_classes is not None:
        named.append(("labels", labels, num_classes))
    named = [(name, t, size) for name, t, size in named if t.numel() and not t.is_floating_point()]
    if not named or not _this_forward_checks(model, named[0][1].device):
        return
    bounds = []  # (min, max) of each tensor, labels without -100: read back together (one synchronisation)
    for name, t, _ in named:
        t = t.to(named[0][1].device)
        if name == "labels":
            kept = t != -100
            t_min = torch.where(kept, t, torch.iinfo(t.dtype).max).min()
            t_max = torch.where(kept, t, -1).max()
        else:
            t_min, t_max = t.min(), t.max()
        bounds += [t_min, t_max]
    values = torch.stack(bounds).tolist()
    for k, (name, _, size) in enumerate(named):
        low, high = values[2 * k], values[2 * k + 1]
        if low >= 0 and high < size:  # every label ignored: low is the dtype's max, high is -1
            continue
        bad = high if high >= size else low
        if name == "labels" and classifier:
            raise ValueError(
                f"labels holds {bad}, but the classifier has num_labels={size} (allowed: 0 <= label < {size}, or -100 "
                "to ignore an example): map the dataset's labels with config.label2id, or build the model for the "
                "dataset's labels (from_base(..., id2label=...) or from_base(..., config=config))"
            )
        what = "the head's vocabulary has" if name == "labels" else "the model's embeddings have"
        ignore = ", or -100 to ignore a position" if name == "labels" else ""
        raise ValueError(
            f"{name} holds token id {bad}, but {what} {size} ids (allowed: 0 <= id < {size}{ignore}). Is the "
            f"tokenizer larger than the model's vocabulary (len(tokenizer) > vocab_size={size})? "
            + FIX.format(cls=type(model).__name__)
        )
