"""`torch.compile` of a training step (forward + backward) gives the eager loss and gradients for every discrete
family: AOT autograd tracing in the default suite (margin), the inductor backend for every family (slow)."""

import pytest
import torch
from conftest import family_heads, tiny_llama_config

from hf_heads import HeadsConfig, HeadsForCausalLM

FAMILIES = family_heads("causal-lm", discrete=True, variants=True, counts=False)


def _step(model, ids):
    torch.manual_seed(1)  # the sampled head draws its samples from the global generator
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach()


def _check(family: str, backend: str) -> None:
    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=FAMILIES[family]))
    ids = torch.randint(4, 61, (2, 8), generator=torch.Generator().manual_seed(0))
    eager = _step(model, ids)
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    compiled = _step(torch.compile(model, backend=backend), ids)
    torch.testing.assert_close(compiled, eager)
    for name, p in model.named_parameters():
        if name in grads:
            torch.testing.assert_close(p.grad, grads[name], msg=name)


def test_compiled_training_step_margin_aot_eager():
    _check("margin-max-norm", "aot_eager")


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_compiled_training_step_inductor(family):
    _check(family, "inductor")
