"""Vocabulary parallelism over 2 gloo CPU processes: a head whose W (and bias) is a DTensor sharded on its rows
(`Shard(0)` on a 1-D mesh: `hf_heads.losses.vocab_parallel.shard_vocabulary`, which registers them with
`distribute_tensor` exactly as torch's `ColwiseParallel` shards an LM head's `nn.Linear` for transformers' "colwise"
plan; that style itself only takes `nn.Linear` / `nn.Embedding` modules) gives the loss and the gradients of one
process with the whole W, for the softmax, margin (arc + log-unigram + max-norm), sparse and sampled heads, with the
loss options (the confidence penalty's differentiable entropy included), in training and in evaluation; so does a
tiny Llama `HeadsForCausalLM` with its head sharded.

V = 37 classes over 2 processes (19 + 18 rows: the offsets matter); the same hidden states and labels on both
(tensor parallelism); some labels ignored. Each process compares its loss, d hidden and the gathered d W, d b
(`grad.full_tensor()`) with the one-process head, and the `record_accuracy` counts (top 1 from the predictions, top
2 and 5 from the targets' ranks); refusals are checked in the workers too (a word norm that reads other rows, hidden
states that differ between processes, a tied model, an unknown reduction).

Run as a script (`python tests/losses/test_vocab_parallel.py RANK WORLD INIT_FILE OUT_JSON`) it is one of the workers.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import torch
from conftest import chunked
from gloo import diff, finish, run_workers, worst_over_ranks

WORLD = 2
RTOL = 1e-5
TIMEOUT = 240
V, H, N = 37, 16, 24
HEADS = {
    "softmax": {"family": "softmax"},
    "softmax smoothing z-loss": {"family": "softmax", "label_smoothing": 0.1, "z_loss": 1e-3},
    "softmax class weights z-loss": {"family": "softmax", "class_weights": "balanced", "z_loss": 1e-3},
    "softmax soft-cap": {"family": "softmax", "logit_softcap": 3.0, "logit_multiplier": 0.5},
    "margin arc log-unigram max-norm": {
        "family": "margin", "margin": "arc", "m": 0.2, "word_norm": "log-unigram", "context_norm": "max-norm",
    },
    "margin cos scale": {"family": "margin", "margin": "cos", "m": 0.1, "scale": 8.0, "z_loss": 1e-3},
    "sparse k=5": {"family": "sparse", "k": 5},
    "sparse k=5 smoothing": {"family": "sparse", "k": 5, "label_smoothing": 0.1},
    # the entropy of each row's softmax over its support, differentiable (the penalty subtracts β·H from the loss)
    "softmax confidence penalty": {"family": "softmax", "confidence_penalty": 0.3, "logit_softcap": 3.0},
    "margin arc confidence penalty": {"family": "margin", "margin": "arc", "m": 0.2, "confidence_penalty": 0.3},
    "sparse k=5 confidence penalty": {"family": "sparse", "k": 5, "confidence_penalty": 0.3},
    "sampled ce is unigram": {
        "family": "sampled", "criterion": "ce", "method": "is", "num_samples": 8, "noise": "unigram", "noise_add": 1.0,
    },
    "sampled bce nce arc": {
        "family": "sampled", "criterion": "bce", "method": "nce", "num_samples": 8, "noise": "log-uniform",
        "margin": "arc", "m": 0.2, "remove_accidental_hits": True,
    },
    "sampled mse full": {"family": "sampled", "criterion": "mse", "method": "full"},
    "sampled bce full log-unigram": {
        "family": "sampled", "criterion": "bce", "method": "full", "word_norm": "log-unigram",
    },
}  # fmt: skip
EVERY_REDUCTION = ("softmax class weights z-loss", "margin cos scale", "sampled ce is unigram")
REFUSED = ("word norm uniform", "hidden differs", "tied model", "reduction avg")
TOP_K = (2, 5)  # the same-pass top-k accuracy counts: the targets' ranks


def test_two_processes_with_a_vocabulary_sharded_head_match_one_process(tmp_path):
    result = run_workers(__file__, WORLD, tmp_path, TIMEOUT)
    others = {"causal LM", "exact ties", "lse alone", "float64 gradcheck"}
    assert set(result) == set(HEADS) | {f"refused: {name}" for name in REFUSED} | others
    for name, checks in result.items():
        if name.startswith("refused"):
            assert checks == "refused", f"{name}: {checks}"
            continue
        if name not in others:
            assert {"train loss", "train grad hidden", "train grad weight", "eval loss"} <= set(checks)
            assert "accuracy" in checks or name.startswith("sampled")
        for what, (abs_diff, rel_diff) in checks.items():
            print(f"{name:34s} {what:24s} max abs {abs_diff:.3g}  rel {rel_diff:.3g}")
            assert rel_diff <= RTOL, f"{name}: {what} differs (max abs {abs_diff}, rel {rel_diff})"


# ------------------------------------------------------------------------------------------------- worker


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=gen) * 2
    labels = torch.randint(0, V, (N,), generator=gen)
    labels[::5] = -100
    return hidden, labels


def _run(head, hidden, labels, train: bool, seed: int = 0, **counting):
    head.train(train)
    torch.manual_seed(seed)  # the sampled heads' noise samples
    h = hidden.clone().requires_grad_(train)
    loss, _ = head(h, labels, return_logits=False, **counting)
    if train:
        loss.sum().backward()
    return loss.detach(), h.grad


def _check(options: dict, mesh, counts, rank: int) -> dict[str, list[float]]:
    """One head, sharded and not. The sharded head's processes draw their noise samples with different seeds, the
    reference with the first process's: the samples are the first process's draw, broadcast."""
    import copy

    from hf_heads.heads import make_head
    from hf_heads.losses.vocab_parallel import shard_vocabulary

    torch.manual_seed(0)
    ref = make_head(H, V, {**options, "bias": True})
    if ref.needs_counts:
        ref.set_word_counts(counts)
    with torch.no_grad():
        ref.bias.normal_()
    tp = shard_vocabulary(copy.deepcopy(ref), mesh)
    hidden, labels = _inputs()
    checks = {}
    for head in (ref, tp):
        head.record_accuracy(top_k=TOP_K)
    # every head with "mean" and "none"; those of EVERY_REDUCTION with `num_items_in_batch` and "sum" too
    full = any(options is HEADS[name] for name in EVERY_REDUCTION)
    variants = [{}, {"reduction": "none"}] + ([{"num_items_in_batch": 30}, {"reduction": "sum"}] if full else [])
    for counting in variants:
        tag = "" if not counting else f" {next(iter(counting.values()))}"
        ref.zero_grad(), tp.zero_grad()
        want, want_h = _run(ref, hidden, labels, True, **counting)
        got, got_h = _run(tp, hidden, labels, True, seed=rank, **counting)
        assert float(ref.weight.grad.abs().sum()) > 0 and float(want_h.abs().sum()) > 0, (options, counting)
        checks[f"train loss{tag}"] = diff(got, want)
        checks[f"train grad hidden{tag}"] = diff(got_h, want_h)
        checks[f"train grad weight{tag}"] = diff(tp.weight.grad.full_tensor(), ref.weight.grad)
        checks[f"train grad bias{tag}"] = diff(tp.bias.grad.full_tensor(), ref.bias.grad)
        with torch.no_grad():
            checks[f"eval loss{tag}"] = diff(
                _run(tp, hidden, labels, False, **counting)[0], _run(ref, hidden, labels, False, **counting)[0]
            )
    if ref.same_pass_accuracy:
        checks["accuracy"] = diff(tp.take_accuracy(), ref.take_accuracy())
    tp.eval(), ref.eval()
    with torch.no_grad():  # over every class at once: from the gathered W
        checks["inference logits"] = diff(tp.logits(hidden), ref.logits(hidden))
        got, want = tp.statistics(hidden, labels), ref.statistics(hidden, labels)
        for key, value in want.items():
            checks[f"statistics {key}"] = diff(got[key], value)
        got, want = tp.diagnostics(), ref.diagnostics()
        checks["diagnostics"] = diff(torch.tensor([got[k] for k in want]), torch.tensor(list(want.values())))
    if options.get("context_norm") == "max-norm":
        checks["running max-norm"] = diff(tp.context_norm_running, ref.context_norm_running)
    return checks


def _ties(mesh) -> dict[str, list[float]]:
    """Predictions and target ranks where logits tie exactly across the processes: W and h small integers (every
    product exact, whatever the order of a matmul's sums), rows 30 and 20 of W (on the second process) copies of rows
    15 and 4 (on the first), labels among them. The lowest class id wins a tie, as in `torch.argmax`."""
    from torch.distributed.tensor import Shard, distribute_tensor

    from hf_heads.validation import OptionError

    gen = torch.Generator().manual_seed(5)
    w = torch.randint(-2, 3, (V, H), generator=gen).float()
    w[30], w[20] = w[15], w[4]
    h = torch.randint(-2, 3, (N, H), generator=gen).float()
    y = torch.randint(0, V, (N,), generator=gen)
    y[:4] = torch.tensor([15, 30, 4, 20])
    kw = dict(reduction="none", return_predictions=True, return_target_rank=True)
    want = chunked(h, w, None, y, **kw)
    got = chunked(h, distribute_tensor(w, mesh, [Shard(0)]), None, y, **kw)
    assert int((want.target_rank[:4] > 0).sum()) > 0  # the copies' labels have their originals ahead
    try:  # its loss runs in eager PyTorch per process: a kernel named for it is refused, not ignored
        chunked(h, distribute_tensor(w, mesh, [Shard(0)]), None, y, kernel="compiled")
        raise AssertionError("a chunk kernel named for a vocabulary-sharded weight was accepted")
    except OptionError as error:
        assert "kernel='compiled' is not used with a vocabulary-sharded weight" in str(error), error
    return {"predictions": diff(got.predictions, want.predictions), "ranks": diff(got.target_rank, want.target_rank)}


def _lse_alone(mesh) -> dict[str, list[float]]:
    """Each row's logsumexp asked for without the z-loss (`returns=("lse",)`): a `LossResult`, its loss and lse those
    of one process with the whole W."""
    from torch.distributed.tensor import Shard, distribute_tensor

    from hf_heads.losses import LossResult, output_loss

    hidden, labels = _inputs()
    w = torch.randn(V, H, generator=torch.Generator().manual_seed(7))
    want = output_loss(hidden, w, None, labels, returns=("lse",))
    got = output_loss(hidden, distribute_tensor(w, mesh, [Shard(0)]), None, labels, returns=("lse",))
    assert isinstance(got, LossResult) and got.lse is not None, got
    return {"loss": diff(got.loss, want.loss), "lse": diff(got.lse, want.lse)}


def _refused(options: dict, mesh, counts, rank: int, differs: bool, **counting) -> str:
    from hf_heads.heads import make_head
    from hf_heads.losses.vocab_parallel import shard_vocabulary
    from hf_heads.validation import OptionError

    head = make_head(H, V, options)
    if head.needs_counts:
        head.set_word_counts(counts)
    shard_vocabulary(head, mesh).train()
    hidden, labels = _inputs(seed=rank if differs else 0)
    try:
        head(hidden, labels, return_logits=False, **counting)
    except (OptionError, ValueError) as error:
        print(f"refused {options}: {error}")
        return "refused"
    return "accepted"


def _model(mesh) -> dict[str, list[float]]:
    """A tiny Llama `HeadsForCausalLM` (margin arc head, untied) with its head sharded by `shard_vocabulary`: the
    training loss and every gradient, the eval loss and logits, and greedy `generate` equal the unsharded model's."""
    import copy

    from conftest import tiny_llama_config

    from hf_heads import HeadsConfig, HeadsForCausalLM
    from hf_heads.losses.vocab_parallel import shard_vocabulary

    torch.manual_seed(0)
    head = {"family": "margin", "margin": "arc", "m": 0.2}
    ref = HeadsForCausalLM(HeadsConfig(backbone=tiny_llama_config().to_dict(), head=head)).train()
    model = shard_vocabulary(copy.deepcopy(ref), mesh)
    ids = torch.randint(4, 61, (2, 9), generator=torch.Generator().manual_seed(3))
    checks = {"loss": diff(model(ids, labels=ids).loss, ref(ids, labels=ids).loss)}
    model(ids, labels=ids).loss.backward()
    ref(ids, labels=ids).loss.backward()
    want = dict(ref.named_parameters())
    for name, param in model.named_parameters():
        grad = param.grad.full_tensor() if hasattr(param.grad, "full_tensor") else param.grad
        checks[f"grad {name}"] = diff(grad, want[name].grad)
    model.eval(), ref.eval()
    with torch.no_grad():
        checks["eval loss"] = diff(model(ids, labels=ids).loss, ref(ids, labels=ids).loss)
        checks["eval logits"] = diff(model(ids).logits, ref(ids).logits)
    greedy = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)
    differing = float((model.generate(ids[:, :5], **greedy) != ref.generate(ids[:, :5], **greedy)).sum())
    checks["generate (tokens differing)"] = [differing, differing]
    return checks


def _gradcheck(mesh) -> dict[str, list[float]]:
    """float64 gradcheck of the sharded cross-entropy in the inputs every process holds whole, the hidden states and
    a replaced target logit (a margin's), for the gradient computed in the forward pass ("mean", "sum") and for the
    recomputed one ("none"), with a column scale (a word norm's), top-k, label smoothing, soft-cap, z-loss, class
    weights and a logit multiplier; [0, 0] where it passes, [1, 1] where it does not. (The gradients of W, b and the
    column scale are each process's rows: they are checked against one process in `_check`.) And the same losses
    without a gradient (the chunks run once and are reduced apart) against one process with the whole W, and an
    unknown reduction refused."""
    from torch.distributed.tensor import Shard, distribute_tensor

    from hf_heads.validation import OptionError

    gen = torch.Generator().manual_seed(9)
    n = 7
    w = distribute_tensor(torch.randn(V, H, generator=gen, dtype=torch.float64) * 0.3, mesh, [Shard(0)])  # p ~ 1/V
    h = torch.randn(n, H, generator=gen, dtype=torch.float64, requires_grad=True)
    t = torch.randn(n, generator=gen, dtype=torch.float64, requires_grad=True)
    s = torch.rand(V, generator=gen, dtype=torch.float64) + 0.5
    b = torch.randn(V, generator=gen, dtype=torch.float64)
    y = torch.randint(0, V, (n,), generator=gen)
    y[2] = -100
    weights = torch.rand(V, generator=gen, dtype=torch.float64) + 0.2
    settings = {
        "plain": {},
        "top-k smoothing soft-cap": {"top_k": 5, "label_smoothing": 0.1, "softcap": 3.0},
        "z-loss class weights": {"z_loss": 0.1, "class_weight": weights},
        "logit multiplier": {"logit_multiplier": 0.5},  # s·(h wᵀ + b): the bias scaled too
    }
    checks = {}
    for name, options in settings.items():
        for reduction in ("mean", "sum", "none"):

            def loss(h_, t_, reduction=reduction, options=options):
                out = chunked(
                    h_, w, b, y, target_logit=t_, column_scale=s, reduction=reduction, chunk_size=3, **options
                )
                return out if reduction != "none" else (out * torch.arange(1.0, n + 1, dtype=out.dtype)).sum()

            torch.manual_seed(0)  # fast mode's random directions: the same on every process
            passed = torch.autograd.gradcheck(loss, (h, t), fast_mode=True, raise_exception=False)
            checks[f"gradcheck {name} {reduction}"] = [0.0, 0.0] if passed else [1.0, 1.0]
            whole = chunked(h, w.full_tensor(), b, y, target_logit=t, column_scale=s, reduction=reduction, **options)
            with torch.no_grad():  # without a gradient the chunks run once, reduced apart (`reduce_sharded`)
                got = chunked(h, w, b, y, target_logit=t, column_scale=s, reduction=reduction, chunk_size=3, **options)
            checks[f"no gradient {name} {reduction}"] = diff(got, whole)
    try:  # the loss functions check the reduction themselves (a head's RowCounting checks it before them)
        chunked(h, w, b, y, reduction="avg")
        refused = False
    except OptionError as error:
        refused = "reduction='avg'" in str(error)
    checks["unknown reduction refused"] = [0.0, 0.0] if refused else [1.0, 1.0]
    return checks


def _tied(mesh) -> str:
    from conftest import tiny_llama_config

    from hf_heads import HeadsConfig, HeadsForCausalLM
    from hf_heads.losses.vocab_parallel import shard_vocabulary
    from hf_heads.validation import OptionError

    backbone = tiny_llama_config(tie_word_embeddings=True).to_dict()
    model = HeadsForCausalLM(HeadsConfig(backbone=backbone, tie_word_embeddings=True))
    try:
        shard_vocabulary(model, mesh)
    except OptionError as error:
        print(f"refused a tied model: {error}")
        return "refused"
    return "accepted"


def _worker(rank: int, world: int, init_file: str, out_file: str) -> None:
    import torch.distributed as dist
    from accelerate.parallelism_config import ParallelismConfig

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=timedelta(seconds=120)
    )
    # the "tp" mesh accelerate's `Accelerator(parallelism_config=ParallelismConfig(tp_size=2))` builds (docs)
    mesh = ParallelismConfig(tp_size=world).build_device_mesh("cpu")["tp"]
    counts = (torch.arange(V, dtype=torch.float32) * 7) % 11  # word counts (some zero)
    results = {}
    for name, options in HEADS.items():
        results[name] = worst_over_ranks(_check(options, mesh, counts, rank))
    refusals = {
        "word norm uniform": {"family": "margin", "margin": "arc", "m": 0.2, "word_norm": "uniform"},
        "hidden differs": {"family": "softmax"},
    }
    for name, options in refusals.items():
        results[f"refused: {name}"] = _refused(options, mesh, counts, rank, differs=name == "hidden differs")
    results["refused: reduction avg"] = _refused({"family": "margin"}, mesh, counts, rank, False, reduction="avg")
    results["causal LM"] = worst_over_ranks(_model(mesh))
    results["exact ties"] = worst_over_ranks(_ties(mesh))
    results["lse alone"] = worst_over_ranks(_lse_alone(mesh))
    results["float64 gradcheck"] = worst_over_ranks(_gradcheck(mesh))
    results["refused: tied model"] = _tied(mesh)
    finish(results, rank, out_file)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
