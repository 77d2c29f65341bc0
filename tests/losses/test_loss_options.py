"""The peers' loss options as head options: the z-loss and class weights of the softmax, sparse and margin families
(their kernels and float64 gradchecks: tests/losses/test_kernels.py; the z-loss in the family contract:
tests/heads/test_contract.py): what a head computes with them against `F.cross_entropy(weight=...)` and λ·lse², the
eval loss without them, 'balanced' weights from the word counts, the flags, save / load, and every refusal."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import chunked
from transformers import HfArgumentParser

from hf_heads.heads import make_head
from hf_heads.losses import BinaryCrossEntropy
from hf_heads.training import HeadsTrainingArguments

H, V = 6, 9


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 5, H, generator=g)
    labels = torch.randint(0, V, (2, 5), generator=g)
    labels[0, 1] = -100
    return hidden, labels


WEIGHTS = [0.5, 2.0, 1.0, 0.0, 3.0, 1.5, 0.25, 1.0, 2.5]


@pytest.mark.parametrize(
    "family", [{"family": "softmax"}, {"family": "sparse", "k": V}, {"family": "margin"}], ids=lambda f: f["family"]
)
def test_class_weights_and_z_loss_of_a_head_are_torchs_weighted_cross_entropy_plus_lambda_lse_squared(family):
    """Training: Σ a[y]·CE / Σ a[y] + λ·mean lse² (the Trainer's `num_items_in_batch` divides both sums instead);
    eval: the plain NLL. (sparse with k = V and margin without margin or norms are plain softmax here.)"""
    torch.manual_seed(0)
    head = make_head(H, V, {**family, "z_loss": 0.05, "class_weights": WEIGHTS})
    hidden, labels = _batch()
    z = F.linear(hidden, head.weight, head.bias).reshape(-1, V)
    y = labels.reshape(-1)
    keep = y != -100
    lse = z[keep].logsumexp(1)
    a = torch.tensor(WEIGHTS)
    ce = F.cross_entropy(z, y, weight=a)  # torch's normalisation
    head.train()
    torch.testing.assert_close(head.loss(hidden, labels), ce + 0.05 * lse.square().mean())
    rows = F.cross_entropy(z, y, weight=a, reduction="none")[keep]
    torch.testing.assert_close(
        head.loss(hidden, labels, num_items_in_batch=7), (rows.sum() + 0.05 * lse.square().sum()) / 7
    )
    head.eval()
    torch.testing.assert_close(head.loss(hidden, labels), F.cross_entropy(z, y))
    assert not head.training_loss_is_eval_loss and not head.training_loss_is_nll


@pytest.mark.parametrize(
    "family",
    [{"family": "softmax"}, {"family": "sparse", "k": 4}, {"family": "margin", "margin": "arc", "m": 0.3}],
    ids=lambda f: f["family"],
)
def test_the_confidence_penalty_subtracts_beta_times_the_mean_entropy_of_the_training_softmax(family):
    """Training: CE − β·H̄, H the entropy of each labelled token's training softmax (sparse: over its top k; margin:
    over the margin logits) averaged as the loss (the Trainer's `num_items_in_batch` divides its sum too), with the
    naive gradient (float64); eval: the plain eval loss; the head's flags and names say so."""
    torch.manual_seed(0)
    beta = 0.3
    head = make_head(H, V, {**family, "confidence_penalty": beta, "chunk_size": 3}).double().train()
    plain = make_head(H, V, {**family, "chunk_size": 3}).double().train()
    plain.load_state_dict(head.state_dict())
    hidden, labels = _batch()
    hidden = hidden.double().requires_grad_()
    keep = labels != -100
    z = F.linear(hidden, head.weight, head.bias)  # (2, 5, V)
    if family["family"] == "margin":  # arc: the target's logit ‖w‖‖h‖ cos(θ + m)
        norms = head.weight.norm(dim=1) * hidden.norm(dim=-1, keepdim=True)
        cos = (z - head.bias) / norms
        y = labels.clamp_min(0)[..., None]
        target = (cos.gather(-1, y).clamp(-1, 1).acos() + 0.3).cos() * norms.gather(-1, y) + head.bias[y]
        z = z.scatter(-1, y, target)
    support = z.topk(4, dim=-1).values if family["family"] == "sparse" else z
    logp = support.log_softmax(-1)
    entropy = -(logp.exp() * logp).sum(-1)[keep]  # (labelled tokens,)
    want = plain.loss(hidden, labels) - beta * entropy.mean()
    got = head.loss(hidden, labels)
    torch.testing.assert_close(got, want)
    for g, e in zip(torch.autograd.grad(got, hidden), torch.autograd.grad(want, hidden), strict=True):
        torch.testing.assert_close(g, e)
    items = torch.tensor(7)
    torch.testing.assert_close(
        head.loss(hidden, labels, num_items_in_batch=items),
        plain.loss(hidden, labels, num_items_in_batch=items) - beta * entropy.sum() / 7,
    )
    rows = head.loss(hidden, labels, reduction="none")
    torch.testing.assert_close(rows[keep], plain.loss(hidden, labels, reduction="none")[keep] - beta * entropy)
    head.eval()
    plain.eval()
    torch.testing.assert_close(head.loss(hidden, labels), plain.loss(hidden, labels))
    assert "confidence penalty 0.3" in head.loss_names()[0]
    assert not head.training_loss_is_eval_loss and not head.training_loss_is_nll


def test_balanced_class_weights_come_from_the_word_counts_and_need_them():
    """'balanced' as scikit-learn's: n / (C · count_c) over the C classes seen, 0 for a class never seen; a head
    without counts says which option needs them (the Trainer counts the training set when `needs_counts`)."""
    head = make_head(H, V, {"family": "softmax", "class_weights": "balanced"})
    assert head.needs_counts
    head.train()
    with pytest.raises(ValueError, match=r"head.class_weights='balanced' needs word counts"):
        head.loss(*_batch())
    counts = torch.tensor([4.0, 1.0, 0.0, 2.0, 1.0, 0.0, 8.0, 1.0, 1.0])
    head.set_word_counts(counts)
    seen = counts > 0
    want = torch.where(seen, counts.sum() / (seen.sum() * counts), 0.0)
    torch.testing.assert_close(head.class_weight(), want)
    head.set_word_counts(counts + 1)  # new counts: new weights
    torch.testing.assert_close(head.class_weight(), (counts + 1).sum() / (V * (counts + 1)))


def test_return_z_loss_gives_the_z_loss_term_and_each_rows_log_sum_exp():
    hidden, labels = _batch()
    w, b = torch.randn(V, H), torch.randn(V)
    out = chunked(hidden, w, b, labels, z_loss=0.1, return_z_loss=True)
    z = F.linear(hidden, w, b)
    lse = torch.where(labels != -100, z.logsumexp(-1), 0.0)
    torch.testing.assert_close(out.lse, lse)  # the labels' shape, 0 on the ignored row
    torch.testing.assert_close(out.z_loss, 0.1 * lse.square().sum() / (labels != -100).sum())
    torch.testing.assert_close(out.loss, F.cross_entropy(z.reshape(-1, V), labels.reshape(-1)) + out.z_loss)
    rows = chunked(hidden, w, b, labels, z_loss=0.1, reduction="none", return_z_loss=True)
    torch.testing.assert_close(rows.z_loss, 0.1 * lse.square())
    assert rows.loss.shape == labels.shape


def test_the_flags_set_both_options_and_a_saved_model_keeps_them(tmp_path):
    from conftest import tiny_gpt2_config

    from hf_heads import HeadsConfig, HeadsForCausalLM

    parser = HfArgumentParser(HeadsTrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(
        ["--output_dir", "x", "--head", "margin", "--margin", "arc", "--z_loss", "1e-4", "--class_weights", "balanced",
         "--confidence_penalty", "0.1"]
    )  # fmt: skip
    head = args.head_config()
    assert (head["family"], head["margin"]["type"], head["z_loss"], head["class_weights"]) == (
        "margin", "arc", 1e-4, "balanced"
    )  # fmt: skip
    assert head["confidence_penalty"] == 0.1
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", "x", "--class_weights", "[1, 0.5, 2]"])
    head = args.head_config()
    assert head["class_weights"] == [1, 0.5, 2]
    config = tiny_gpt2_config()
    weights = [1.0] * config.vocab_size
    weights[3] = 4.0
    head = {"family": "sparse", "k": 8, "class_weights": weights, "z_loss": 0.01}
    model = HeadsForCausalLM(HeadsConfig(backbone=config.to_dict(), head=head))
    model.save_pretrained(tmp_path)
    again = HeadsForCausalLM.from_pretrained(tmp_path)
    assert again.head.options.class_weights == weights and again.head.options.z_loss == 0.01


@pytest.mark.parametrize(
    "head, message",
    [
        ({"family": "softmax", "class_weights": [1.0] * V, "label_smoothing": 0.1},
         "head.class_weights='a list of 9 numbers' cannot be combined with label_smoothing=0.1"),
        ({"family": "softmax", "class_weights": [1.0] * 4}, "head.class_weights='a list of 4 numbers' must give one "
         "weight per class: 9"),
        ({"family": "softmax", "class_weights": [1.0, -1.0]}, r"head.class_weights=-1.0 must be >= 0"),
        ({"family": "softmax", "class_weights": "inverse"}, "allowed: 'balanced' or a list"),
        ({"family": "softmax", "class_weights": "[1, 2"}, "is not a JSON list"),
        ({"family": "softmax", "z_loss": -0.1}, r"head.z_loss=-0.1 must be >= 0"),
        ({"family": "softmax", "label_smoothing": -0.1}, r"head.label_smoothing=-0.1 must be >= 0"),
        ({"family": "sparse", "k": 3, "label_smoothing": 1.0}, r"head.label_smoothing=1.0 must be < 1"),
        ({"family": "sampled", "method": "full", "z_loss": 0.1}, "head.z_loss=0.1 is for the softmax, sparse and "
         "margin families"),
        ({"family": "sampled", "method": "full", "class_weights": "balanced"}, "head.class_weights='balanced' is for"),
        ({"family": "softmax", "confidence_penalty": -0.1}, r"head.confidence_penalty=-0.1 must be >= 0"),
        ({"family": "sampled", "method": "full", "confidence_penalty": 0.1}, "head.confidence_penalty=0.1 is for the"),
        ({"family": "margin", "context_norm": "max-norm", "context_norm_momentum": 1.5},
         r"^head.context_norm_momentum=1.5 must be <= 1$"),
    ],
    ids=["smoothing", "length", "negative", "unknown", "bad-json", "negative-z", "negative-smoothing",
         "full-smoothing", "sampled-z", "sampled-weights", "negative-penalty", "sampled-penalty", "momentum-above-1"],
)  # fmt: skip
def test_bad_loss_options_are_refused_with_the_field_and_what_is_allowed(head, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        make_head(H, V, head)


def test_the_functional_loss_refuses_bad_class_weights_and_options_outside_cross_entropy():
    hidden, labels = _batch()
    w = torch.randn(V, H)
    with pytest.raises(ValueError, match=r"class_weight=\(4,\) must be a tensor of shape \(9,\)"):
        chunked(hidden, w, None, labels, class_weight=torch.ones(4))
    with pytest.raises(ValueError, match=r"class_weight=nan every weight must be finite and >= 0"):
        chunked(hidden, w, None, labels, class_weight=torch.full((V,), float("nan")))
    with pytest.raises(ValueError, match="cannot be combined with label_smoothing=0.1"):
        chunked(hidden, w, None, labels, class_weight=torch.ones(V), label_smoothing=0.1)
    with pytest.raises(TypeError, match="z_loss"):  # a cross-entropy option: no field of the BCE criterion
        BinaryCrossEntropy(z_loss=0.1)
    out = chunked(hidden, w, None, labels, class_weight=torch.zeros(V))  # Σ a[y] = 0: loss 0
    assert out == 0


@pytest.mark.parametrize(
    "family",
    [{"family": "softmax", "z_loss": 0.1}, {"family": "sparse", "k": 3}, {"family": "margin", "margin": "arc"}],
    ids=lambda f: f["family"],
)
def test_a_recording_head_counts_the_labels_its_training_pass_predicts(family):
    """`record_accuracy(top_k=(3,))`: each training pass adds [labels predicted, labels among the 3 most likely,
    labels counted] — the argmax of the logits without the margin and the label's rank, from the same pass as the
    loss — and evaluation adds nothing; `take_accuracy` hands them over and starts again; a sampled head (no full
    softmax in training) records nothing."""
    torch.manual_seed(0)
    head = make_head(H, V, family)
    hidden, labels = _batch()
    z = F.linear(hidden, head.weight, head.bias)
    if family["family"] == "margin":  # no norms, no scale: cos θ · ‖w‖‖h‖ + b, the margin only on the target
        z = head.logits(hidden).float()
    labels[1, :3] = z[1, :3].argmax(-1)  # some rows predicted right
    labels[1, 3:5] = z[1, 3:5].topk(2, dim=-1).indices[:, 1]  # some second
    keep = labels != -100
    top3 = (z.topk(3, dim=-1).indices == labels.clamp_min(0)[..., None]).any(-1)
    want = [((z.argmax(-1) == labels) & keep).sum(), (top3 & keep).sum(), keep.sum()]
    want = torch.tensor([float(x) for x in want], dtype=torch.float64)
    assert 0 < want[0] < want[1] < want[2]  # the case tells the two counts apart
    head.record_accuracy(top_k=(3,))
    head.train()
    head.loss(hidden, labels)
    head.loss(hidden, labels, reduction="none")
    head.eval()
    head.loss(hidden, labels)
    torch.testing.assert_close(head.take_accuracy(), 2 * want)
    assert head.take_accuracy().tolist() == [0.0, 0.0, 0.0]
    head.record_accuracy()  # top-1 only: the argmax, no ranks asked of the kernel
    head.train()
    head.loss(hidden, labels)
    torch.testing.assert_close(head.take_accuracy(), want[[0, 2]])
    sampled = make_head(H, V, {"family": "sampled", "method": "full"})
    sampled.record_accuracy()
    assert sampled.take_accuracy() is None
