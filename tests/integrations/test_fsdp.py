"""FSDP2 (`torch.distributed.fsdp.fully_shard`) over 2 gloo CPU processes: with every decoder layer, the head and the
root model each sharded, the loss and the full gradients equal one unsharded process on the same global batch, for
every discrete head family; eval logits and greedy `generate` equal the unsharded model's.

The models call the head as a module (`self.head(hidden, labels, ...)`, hf_heads.heads.base.OutputHead.forward), so
FSDP's pre-forward hook unshards the head's weight before the loss runs (before that change, `head.loss(...)` met the
sharded DTensor weight: "aten.index.Tensor got mixed torch.Tensor and DTensor" in the margin scorer).

What equals what. The global batch has N target tokens (labels != -100 after the shift), split unevenly between the
two ranks (padding). Each rank r computes l_r = model(**shard_r, num_items_in_batch=N).loss = sum_r / N and
backpropagates world_size * l_r (what the transformers Trainer does with `average_tokens_across_devices`), because
FSDP2 averages the gradients over the ranks in its reduce-scatter. Then
- all_reduce_sum(l_r) = sum / N = the one-process loss on the whole batch (with the same `num_items_in_batch=N`,
  or without it: the mean over the N targets), and
- the gathered gradient (`param.grad.full_tensor()`) = mean_r grad(world_size * l_r) = grad(sum / N) = the
  one-process gradient.
Sampled heads draw their K noise samples (shared by all positions) from the default torch generator: every rank and
the one-process reference are reseeded right before each forward with labels, so they draw the same samples.
The eval loss (eval mode, labels given: the head runs twice in one forward, loss then logits) is compared the same
way, without backward.

A max-norm head (context_norm="max-norm") takes g = max ‖h‖ over the rows of its batch in training: under data
parallelism each rank uses the maximum of its own shard (no cross-rank reduction, like BatchNorm without sync), so
its reference is one process that runs the two shards one after the other (sum of the two shard losses, each over
num_items_in_batch=N, and the accumulated gradients), not the whole batch at once; the same holds for its eval loss
here, since no running max-norm is set before the first training step. (On this batch the whole-batch loss differs
from the per-shard one by only ~2e-6 relative, so the choice of reference is about semantics, not tolerance.)

Run as a script (`python tests/integrations/test_fsdp.py RANK WORLD INIT_FILE OUT_JSON`) it is one of the worker
processes.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import torch
from conftest import family_heads
from gloo import diff, finish, run_workers, worst_over_ranks

from hf_heads.heads import head_options

# every family's examples (tests/conftest.py family_heads), each compared with the one-process loss of the global
# batch, or of each process's shard where the loss depends on the batch (max-norm's g = max ‖h‖ over each rank's own
# rows: module docstring); the margin's log-unigram example gets the word counts set below
FAMILIES = {
    label: (head, "per-shard" if head_options(head).loss_depends_on_batch else "global")
    for label, head in family_heads("causal-lm", discrete=True, variants=True).items()
}
# A checkpoint with tied embeddings (head.weight is the input embedding's tensor), sharded by accelerate's own FSDP2
# preparation (`accelerate.utils.fsdp_utils.fsdp2_prepare_model`, the code `Accelerator.prepare` runs under
# `distributed_type: FSDP`, which accelerate does not enable on CPU) with docs/fsdp.md's config for tied checkpoints.
TIED = {
    "tied softmax (accelerate)": ({"family": "softmax"}, "global"),
    "tied margin-arc (accelerate)": ({"family": "margin", "margin": "arc", "m": 0.2}, "global"),
}
WORLD = 2
RTOL = 1e-5  # max |fsdp - reference| / max |reference|, per tensor
TIMEOUT = 240


def test_fsdp2_two_processes_match_one_process(tmp_path):
    result = run_workers(__file__, WORLD, tmp_path, TIMEOUT)
    assert set(result) == set(FAMILIES) | set(TIED)
    for name, checks in result.items():
        for what, (abs_diff, rel_diff) in checks.items():
            print(f"{name:24s} {what:40s} max abs {abs_diff:.3g}  rel {rel_diff:.3g}")
            if what.startswith("generate"):
                assert abs_diff == 0, f"{name}: greedy generate differs under FSDP2"
            else:
                assert rel_diff <= RTOL, f"{name}: {what} differs under FSDP2 (max abs {abs_diff}, rel {rel_diff})"
        # a tied head's weight is listed once, as the embedding it is
        weight = "grad backbone.embed_tokens.weight" if name in TIED else "grad head.weight"
        assert any(what.startswith(weight) for what in checks), name


# ------------------------------------------------------------------------------------------------- worker


def _batch():
    """The fixed global batch: 4 right-padded sequences, split 2 + 2 over the ranks with 20 + 14 targets."""
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(4, 61, (4, 12), generator=gen)
    lengths = torch.tensor([12, 10, 9, 7])
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, 1)  # pad_token_id
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _shards(batch: dict, world: int) -> list[dict]:
    return [{k: v[r * 2 : r * 2 + 2] for k, v in batch.items()} for r in range(world)]


def _reference_loss(ref, batch: dict, targets: int, reference: str, world: int, backward: bool) -> torch.Tensor:
    """The one-process loss of the global batch ("per-shard" heads: of its shards, one after the other)."""
    total = 0.0
    for part in [batch] if reference == "global" else _shards(batch, world):
        torch.manual_seed(1234)  # the sampled head's noise samples
        loss = ref(**part, num_items_in_batch=targets).loss
        if backward:
            loss.backward()
        total = total + loss.detach()
    return total


def _sharded_loss(model, shard: dict, targets: int, world: int, backward: bool):
    """(all_reduce_sum over the ranks of this rank's loss, this rank's logits) (module docstring)."""
    import torch.distributed as dist

    torch.manual_seed(1234)
    out = model(**shard, num_items_in_batch=targets)
    if backward:
        (out.loss * world).backward()  # FSDP2 averages the gradients over the ranks
    total = out.loss.detach().clone()
    dist.all_reduce(total)
    return total, out.logits


def _check_family(ref, model, batch: dict, rank: int, world: int, reference: str) -> dict[str, list[float]]:
    """The checks of one head family on this rank: eval logits, eval loss, greedy generation, training loss and
    gradients of the sharded `model` against the unsharded `ref`."""
    shard = _shards(batch, world)[rank]
    targets = int((batch["labels"][:, 1:] != -100).sum())  # N: the global number of target tokens
    checks = {}
    # eval mode: logits of this rank's shard; loss and logits together (the head runs twice in one forward);
    # greedy generation (the same prompts on both ranks: every rank must run the same number of forwards, so the new
    # tokens are forced with min_new_tokens)
    ref.eval(), model.eval()
    with torch.no_grad():
        inputs = {k: shard[k] for k in ("input_ids", "attention_mask")}
        want = ref(**inputs).logits
        checks["eval logits"] = diff(model(**inputs).logits, want)
        eval_loss, eval_logits = _sharded_loss(model, shard, targets, world, backward=False)
        checks["eval loss"] = diff(eval_loss, _reference_loss(ref, batch, targets, reference, world, backward=False))
        checks["eval logits with labels"] = diff(eval_logits, want)
    prompt = batch["input_ids"][:2, :5]
    gen = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=1)
    want_ids, got_ids = ref.generate(prompt, **gen), model.generate(prompt, **gen)
    checks["generate (tokens differing)"] = [float((got_ids != want_ids).sum()), 0.0]
    # one training forward/backward
    ref.train(), model.train()
    ref_loss = _reference_loss(ref, batch, targets, reference, world, backward=True)
    checks["loss"] = diff(_sharded_loss(model, shard, targets, world, backward=True)[0], ref_loss)
    ref_params = dict(ref.named_parameters())
    for name, param in model.named_parameters():
        want = ref_params[name].grad
        got = param.grad.full_tensor() if param.grad is not None else None  # an all-gather: every rank calls it
        assert (want is None) == (got is None), f"{name} has a gradient in one run only"
        if want is not None:
            checks[f"grad {name}"] = diff(got, want)
    return checks


def _accelerate_fsdp2(model, mesh):
    """`model` prepared by accelerate's FSDP2 code path, with docs/fsdp.md's plugin settings for a tied checkpoint
    (auto-wrap of the decoder layers only: accelerate puts the tied embedding and the head, which
    `get_output_embeddings()` returns, into one FSDP group)."""
    from types import SimpleNamespace

    from accelerate import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["LlamaDecoderLayer"],
        reshard_after_forward=True,
        state_dict_type="FULL_STATE_DICT",
    )
    accelerator = SimpleNamespace(  # the attributes fsdp2_prepare_model reads from an Accelerator
        state=SimpleNamespace(fsdp_plugin=plugin),
        torch_device_mesh=mesh,
        parallelism_config=SimpleNamespace(fsdp_dim_names=mesh.mesh_dim_names),
        mixed_precision="no",
        is_main_process=mesh.get_rank() == 0,
        device=torch.device("cpu"),
    )
    return fsdp2_prepare_model(accelerator, model)


def _worker(rank: int, world: int, init_file: str, out_file: str) -> None:
    import copy

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import tiny_llama_config

    from hf_heads import HeadsConfig, HeadsForCausalLM

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=timedelta(seconds=120)
    )
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    batch = _batch()
    counts = torch.arange(61, dtype=torch.float32) % 7  # word counts for log-unigram (some zero)
    results = {}
    for name, (head, reference) in FAMILIES.items():
        torch.manual_seed(0)  # the same weights in every process
        ref = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
        if ref.head_needs_counts():
            ref.set_word_counts(counts)
        model = copy.deepcopy(ref)
        for layer in model.backbone.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model.head, mesh=mesh)
        fully_shard(model, mesh=mesh)
        results[name] = worst_over_ranks(_check_family(ref, model, batch, rank, world, reference))
    for name, (head, reference) in TIED.items():
        torch.manual_seed(0)
        backbone = tiny_llama_config(tie_word_embeddings=True).to_dict()
        ref = HeadsForCausalLM(HeadsConfig(backbone=backbone, head=head, tie_word_embeddings=True))
        assert ref.head.weight is ref.get_input_embeddings().weight
        model = _accelerate_fsdp2(copy.deepcopy(ref), mesh)
        results[name] = worst_over_ranks(_check_family(ref, model, batch, rank, world, reference))
    finish(results, rank, out_file)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
