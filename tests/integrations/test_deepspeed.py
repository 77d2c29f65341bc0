"""DeepSpeed ZeRO-2 and ZeRO-3 over 2 gloo CPU processes (DS_ACCELERATOR=cpu): every discrete head family's loss
and full gradients equal one process on the same global batch, and the eval loss and logits too.

Under ZeRO-3 every parameter is partitioned (`stage3_param_persistence_threshold: 0`, so even this tiny model's
are): a parameter is an empty (0,) tensor except while the module that owns it runs. The models call the head as a
module (`self.head(hidden, labels)`), so DeepSpeed gathers W and b before the head's forward and again before its
backward (hf_heads.modeling.zero3's docstring), one gathered W at a time. ZeRO-2 partitions the gradients and the
optimizer state only.

What equals what is test_fsdp.py's argument: each rank r computes l_r = model(**shard_r, num_items_in_batch=N).loss
over the N target tokens of the global batch and backpropagates world_size * l_r (DeepSpeed averages the gradients
over the ranks), so the all-reduced loss is the one-process loss and `safe_get_full_grad` the one-process gradient.
Heads whose loss depends on the batch (max-norm's g) are compared with one process running the two shards in turn.

Through the Trainer (`HeadsTrainingArguments(deepspeed=...)`, ZeRO-3 with 16-bit weights gathered on save): two
processes train a margin head with word norms (its diagnostics gather W outside the forward) for 2 steps; the logged
losses and the saved checkpoint, reloaded as an ordinary hf_heads model, equal one process without DeepSpeed on the
same batches. On a machine without an accelerator, accelerate's state counts one process per DeepSpeed rank (its
DeepSpeed path takes the world size from an accelerator backend: accelerate.state.PartialState), so every rank reads
the same batches: DeepSpeed still partitions W over the two ranks and averages their (equal) gradients, and the
reference is one process on one rank's batches. The global-batch equality is the engine-level test's.

Run as a script (`python tests/integrations/test_deepspeed.py RANK WORLD INIT_FILE OUT_JSON [trainer]`) it is one
of the worker processes.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from conftest import family_heads
from gloo import diff, finish, run_workers, worst_over_ranks
from test_fsdp import _batch, _reference_loss, _shards  # the same global batch, split and reference

from hf_heads.heads import head_options

FAMILIES = {
    label: (head, "per-shard" if head_options(head).loss_depends_on_batch else "global")
    for label, head in family_heads("causal-lm", discrete=True).items()
}
STAGES = (2, 3)
WORLD = 2
RTOL = 1e-5
TIMEOUT = 420


def test_deepspeed_zero_two_processes_match_one_process(tmp_path, monkeypatch):
    pytest.importorskip("deepspeed")
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    result = run_workers(__file__, WORLD, tmp_path, TIMEOUT)
    assert set(result) == {f"zero-{stage} {name}" for stage in STAGES for name in FAMILIES}
    for name, checks in result.items():
        assert "grad head.weight" in checks and "loss" in checks, name
        for what, (abs_diff, rel_diff) in checks.items():
            print(f"{name:28s} {what:40s} max abs {abs_diff:.3g}  rel {rel_diff:.3g}")
            if what == "head partitioned":
                assert abs_diff == (1.0 if name.startswith("zero-3") else 0.0), name
            else:
                assert rel_diff <= RTOL, f"{name}: {what} differs under DeepSpeed (max abs {abs_diff}, rel {rel_diff})"


TRAINER_HEAD = {"family": "margin", "margin": "arc", "m": 0.2, "word_norm": "log-unigram"}


def _trainer_args(out: Path, deepspeed: dict | None, batch: int):
    from hf_heads import HeadsTrainingArguments

    return HeadsTrainingArguments(
        output_dir=str(out), per_device_train_batch_size=batch, max_steps=2, learning_rate=1e-3, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, seed=0, deepspeed=deepspeed,
        use_cpu=deepspeed is None,
    )  # fmt: skip


def _trainer(out: Path, deepspeed: dict | None, batch: int):
    from conftest import tiny_llama_config
    from datasets import Dataset

    from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsTrainer

    torch.manual_seed(0)
    model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=TRAINER_HEAD))
    ids = torch.randint(4, 61, (8, 12), generator=torch.Generator().manual_seed(3)).tolist()
    data = Dataset.from_dict({"input_ids": ids, "labels": ids})
    return HeadsTrainer(model=model, args=_trainer_args(out, deepspeed, batch), train_dataset=data)


def test_the_trainers_deepspeed_zero3_run_saves_an_ordinary_checkpoint(tmp_path, monkeypatch):
    pytest.importorskip("deepspeed")
    from hf_heads import HeadsForCausalLM

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    result = run_workers(__file__, WORLD, tmp_path, TIMEOUT, extra=["trainer"])
    one = _trainer(tmp_path / "one", None, batch=2)  # each rank's batches (module docstring)
    one.train()
    want = [entry["loss"] for entry in one.state.log_history if "loss" in entry]
    assert result["losses"] == pytest.approx(want, rel=1e-5)
    assert any(key.startswith("head/") for key in result["logged"])  # the diagnostics ran on the gathered W
    saved = HeadsForCausalLM.from_pretrained(tmp_path / "zero3")
    assert saved.config.head == one.model.config.head
    trained = dict(one.model.named_parameters())
    for name, param in saved.named_parameters():  # AdamW's g / (√v + ε) turns the rounding of a gradient entry near 0
        # (ZeRO-3 sums it in another order) into a few 1e-6 of this lr=1e-3 step; a lost or misscaled gradient: ~1e-3
        torch.testing.assert_close(param, trained[name], rtol=1e-4, atol=5e-5, msg=name)


def test_a_model_built_directly_under_a_zero3_config_builds_its_backbone_whole(monkeypatch):
    """`HeadsForCausalLM(config)` while a ZeRO-3 config is active (what the Trainer's `deepspeed=` arguments set up,
    as for transformers' own task classes called directly) builds its backbone whole; built through
    `AutoModel.from_config` alone it would be partitioned and the model's init would index a (0,) embedding."""
    pytest.importorskip("deepspeed")
    from conftest import tiny_llama_config
    from transformers.integrations import HfDeepSpeedConfig

    from hf_heads import HeadsConfig, HeadsForCausalLM

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    active = HfDeepSpeedConfig({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})
    try:
        model = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head={"family": "softmax"}))
    finally:
        del active
    assert model.backbone.embed_tokens.weight.shape == (61, 32)


# ------------------------------------------------------------------------------------------------- worker


def _trainer_worker(rank: int, world: int, out_file: str) -> None:
    """One process of the Trainer's ZeRO-3 run: DeepSpeed sets up the process group itself (env://)."""
    import json

    config = {
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                              "stage3_gather_16bit_weights_on_model_save": True},
    }  # fmt: skip
    out = Path(out_file).parent
    trainer = _trainer(out / "zero3-run", config, batch=2)
    trainer.train()
    trainer.save_model(str(out / "zero3"))
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    from hf_heads.modeling.zero3 import is_partitioned

    assert is_partitioned(trainer.model.head.weight)  # W lived in two partitions
    if rank == 0:
        Path(out_file).write_text(json.dumps({"losses": [e["loss"] for e in logged], "logged": sorted(logged[0])}))


def _config(stage: int) -> dict:
    zero = {"stage": stage}
    if stage == 3:
        zero.update(stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=0, stage3_max_live_parameters=0)
    return {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": zero}


def _check(ref, engine, batch: dict, rank: int, world: int, reference: str) -> dict[str, list[float]]:
    import torch.distributed as dist
    from deepspeed.utils import safe_get_full_grad

    from hf_heads.modeling.zero3 import is_partitioned

    model = engine.module
    shard = _shards(batch, world)[rank]
    targets = int((batch["labels"][:, 1:] != -100).sum())
    checks = {"head partitioned": [float(is_partitioned(model.head.weight)), 0.0]}
    ref.eval(), engine.eval()
    with torch.no_grad():
        inputs = {k: shard[k] for k in ("input_ids", "attention_mask")}
        checks["eval logits"] = diff(engine(**inputs).logits, ref(**inputs).logits)
        torch.manual_seed(1234)
        got = engine(**shard, num_items_in_batch=targets).loss.detach().clone()
        dist.all_reduce(got)
        checks["eval loss"] = diff(got, _reference_loss(ref, batch, targets, reference, world, backward=False))
    ref.train(), engine.train()
    want = _reference_loss(ref, batch, targets, reference, world, backward=True)
    torch.manual_seed(1234)
    loss = engine(**shard, num_items_in_batch=targets).loss
    engine.backward(loss * world)  # DeepSpeed averages the gradients over the ranks
    got = loss.detach().clone()
    dist.all_reduce(got)
    checks["loss"] = diff(got, want)
    ref_params = dict(ref.named_parameters())
    for name, param in model.named_parameters():
        full = safe_get_full_grad(param)  # a collective under ZeRO-3: every rank calls it
        if ref_params[name].grad is not None:
            checks[f"grad {name}"] = diff(full, ref_params[name].grad)
    return checks


def _worker(rank: int, world: int, init_file: str, out_file: str) -> None:
    import copy

    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import deepspeed
    from conftest import tiny_llama_config

    from hf_heads import HeadsConfig, HeadsForCausalLM

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=timedelta(seconds=180)
    )
    deepspeed.init_distributed(dist_backend="gloo")  # takes the process group already there
    batch = _batch()
    counts = torch.arange(61, dtype=torch.float32) % 7
    results = {}
    for stage in STAGES:
        for name, (head, reference) in FAMILIES.items():
            torch.manual_seed(0)
            ref = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head))
            if ref.head_needs_counts():
                ref.set_word_counts(counts)
            model = copy.deepcopy(ref)
            optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)  # the Trainer's optimizer
            engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=_config(stage))
            results[f"zero-{stage} {name}"] = worst_over_ranks(_check(ref, engine, batch, rank, world, reference))
            engine.destroy()
    finish(results, rank, out_file)


if __name__ == "__main__":
    if sys.argv[5:] == ["trainer"]:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        os.environ.update(
            RANK=sys.argv[1], WORLD_SIZE=sys.argv[2], LOCAL_RANK=sys.argv[1], LOCAL_WORLD_SIZE=sys.argv[2]
        )
        _trainer_worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[4])
    else:
        _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
