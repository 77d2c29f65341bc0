"""The head-family registry: a family is its head module, its head class registered with `register("family")`, and
nothing outside hf_heads/heads dispatches on a family's name or type."""

import ast
import copy
import dataclasses
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from conftest import family_heads, tiny_gpt2_config

from hf_heads import HeadsConfig, HeadsForCausalLM
from hf_heads.components import register
from hf_heads.heads import FAMILIES, SoftmaxHead, SoftmaxHeadOptions, head_options, make_head
from hf_heads.heads.base import OutputHead
from hf_heads.heads.discrete import DiscreteHead
from hf_heads.heads.options import HeadOptions, ReferenceBatch
from hf_heads.heads.registry import READ_ONLY, FrozenList, FrozenSection, register_family
from hf_heads.losses import RowCounting
from hf_heads.training.cards import inference_note, loss_labels
from hf_heads.validation import OptionError, check_number

ROOT = Path(__file__).resolve().parents[2]
FAMILY_NAMES = tuple(FAMILIES)  # the built-in families (the toy one below is registered by its test only)


@dataclass
class TemperatureHeadOptions(SoftmaxHeadOptions):
    temperature: float = field(default=1.0, metadata={"help": "Logits are divided by it."})

    def check(self) -> None:
        super().check()
        check_number("temperature", self.temperature, exclusive_minimum=0)

    def reference(self, batch: ReferenceBatch):
        z = (batch.hidden @ batch.params["weight"].T + batch.params["bias"]) / self.temperature
        return self.reference_loss(z, batch), z


class TemperatureHead(SoftmaxHead):  # registered by the fixture below (the decorator's call, undone after)
    family = "temperature"
    options_class = TemperatureHeadOptions
    paper = "a toy family of the registry test"
    logits_note = "the logits divided by the temperature"

    def training_loss(self, hidden, labels, counting: RowCounting):
        z = self.inference_logits(hidden).flatten(0, -2)
        per_row = F.cross_entropy(z, labels.flatten().clamp_min(0), reduction="none")  # finite on ignored rows
        return counting.reduce(
            per_row, labels
        )  # ignored rows, num_items_in_batch and an all-padding batch as hf_heads'

    eval_loss = training_loss

    def inference_logits(self, hidden):
        return super().inference_logits(hidden) / self.options.temperature


@pytest.fixture
def temperature_family():
    assert register("family")(TemperatureHead) is TemperatureHead  # `@register("family")` on the class
    yield
    del FAMILIES["temperature"]


def test_a_new_family_is_one_registration_line(temperature_family, tmp_path):
    """make_head, config validation, the model (forward, save, from_pretrained) and the card text all follow the
    registry; nothing else is edited."""
    assert family_heads()["temperature"] == {"family": "temperature"}  # the suites that run every family run it
    assert TemperatureHeadOptions.contract_examples == {}  # its own (none), not the softmax family's
    with pytest.raises(ValueError, match=r"head.temperature=0 must be > 0"):
        HeadsConfig(
            backbone=tiny_gpt2_config(50, n_layer=1, n_embd=16).to_dict(),
            head={"family": "temperature", "temperature": 0},
        )
    config = HeadsConfig(
        backbone=tiny_gpt2_config(50, n_layer=1, n_embd=16).to_dict(),
        head={"family": "temperature", "temperature": 2.0},
    )
    model = HeadsForCausalLM(config).eval()
    assert type(model.head) is TemperatureHead and config.head["temperature"] == 2.0
    ids = torch.randint(0, 50, (2, 6))
    out = model(input_ids=ids, labels=ids)
    hidden = model.backbone(input_ids=ids).last_hidden_state
    plain = hidden @ model.head.weight.T + model.head.bias
    torch.testing.assert_close(out.logits, plain / 2.0)
    torch.testing.assert_close(out.loss, F.cross_entropy((plain / 2.0)[:, :-1].flatten(0, 1), ids[:, 1:].flatten()))
    model.save_pretrained(tmp_path)
    again = HeadsForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(again(input_ids=ids).logits, out.logits)
    assert "divided by the temperature" in inference_note(model)
    assert make_head(16, 50, {"family": "temperature"}).options.temperature == 1.0
    assert loss_labels(model)["eval_label"] == "eval loss (NLL of the word)"


@dataclass
class PlainHeadOptions(SoftmaxHeadOptions):
    pass


class PlainHead(DiscreteHead):  # on the discrete base, not a built-in family: it says nothing of its logits
    family = "plain"
    options_class = PlainHeadOptions


@dataclass
class CountedHeadOptions(TemperatureHeadOptions):
    needs_counts: ClassVar[bool] = True  # says nothing of which option needs them (no `counts_reason`)


class CountedHead(TemperatureHead):
    family = "counted"
    options_class = CountedHeadOptions

    def training_loss(self, hidden, labels, counting: RowCounting):
        return super().training_loss(hidden, labels, counting) + 0 * self.counts().sum()


def test_a_family_that_needs_word_counts_without_saying_why_is_named_when_they_are_missing():
    from hf_heads.cli.errors import UsageError
    from hf_heads.cli.runs import ensure_word_counts

    register("family")(CountedHead)
    try:
        head = make_head(4, 5, {"family": "counted"}).train()
        with pytest.raises(ValueError) as refused:
            head(torch.randn(2, 4), torch.tensor([0, 1]), return_logits=False)
        backbone = tiny_gpt2_config(50, n_layer=1, n_embd=16).to_dict()
        model = HeadsForCausalLM(HeadsConfig(backbone=backbone, head={"family": "counted"}))
        with pytest.raises(UsageError) as script_refused:  # a run script evaluating it without a training split
            ensure_word_counts(model, None)
    finally:
        del FAMILIES["counted"]
    assert str(refused.value) == (
        "head.family='counted' needs word counts, but this head has none: pass word_counts=... to from_base(), call "
        "head.set_word_counts(...), or train with HeadsTrainer (it counts the training set)"
    )
    assert str(script_refused.value).startswith(
        "--head counted needs word counts of the training data, and this run has no training split"
    )


def test_a_family_that_does_not_say_what_its_logits_are_is_carded_as_returning_the_model_scores():
    register("family")(PlainHead)
    try:
        config = HeadsConfig(backbone=tiny_gpt2_config(50, n_layer=1, n_embd=16).to_dict(), head={"family": "plain"})
        model = HeadsForCausalLM(config)
    finally:
        del FAMILIES["plain"]
    assert type(model.head) is PlainHead
    assert inference_note(model) == (
        "At inference the head returns the model scores, so `generate()` and evaluation work as for any transformers "
        "causal LM."
    )


def test_a_family_is_held_to_its_reference_and_one_without_a_reference_is_refused(temperature_family):
    """The toy family's loss and logits are its `reference`'s (the contract suite runs a family registered before
    it collects, tests/heads/test_contract.py); registering options that define no reference is refused."""
    head = make_head(4, 7, {"family": "temperature", "temperature": 2.0}).train()
    hidden, labels = torch.randn(5, 4), torch.tensor([1, 6, -100, 0, 3])
    params = {name: p.detach() for name, p in head.named_parameters()}
    rows, logits = head.options.reference(ReferenceBatch(hidden, labels, params, training=True))
    torch.testing.assert_close(head.loss(hidden[labels != -100], labels[labels != -100]), rows.mean())
    torch.testing.assert_close(head.logits(hidden), logits)

    @dataclass
    class NoReference(HeadOptions):
        pass

    message = (
        "head family 'bare': NoReference defines no `reference` (HeadOptions.reference: the naive dense loss and "
        "logits the contract suite compares the head with)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        register_family("bare", NoReference, TemperatureHead)
    assert "bare" not in FAMILIES


def test_a_family_written_outside_reduces_its_rows_with_the_public_helper(temperature_family):
    """The toy family reduces its per-row losses with `RowCounting.reduce`: ignored rows count 0 (their gradient too),
    "mean" divides by the labelled rows or by `num_items_in_batch` (a tensor: no host read), "none" keeps the labels'
    shape, and a batch of padding only gives 0 with a zero gradient, never NaN (a 0 / 0 of a hand-written mean)."""
    head = make_head(4, 7, {"family": "temperature", "temperature": 2.0}).train()
    hidden = torch.randn(2, 3, 4, requires_grad=True)
    labels = torch.tensor([[1, 6, -100], [0, -100, 3]])
    z = head.logits(hidden)  # (2, 3, 7)
    per_row = -torch.log_softmax(z, -1).gather(-1, labels.clamp_min(0)[..., None]).squeeze(-1) * (labels != -100)
    torch.testing.assert_close(head.loss(hidden, labels), per_row.sum() / 4)
    torch.testing.assert_close(head.loss(hidden, labels, reduction="sum"), per_row.sum())
    torch.testing.assert_close(head.loss(hidden, labels, reduction="none"), per_row)
    torch.testing.assert_close(head.loss(hidden, labels, num_items_in_batch=torch.tensor(10)), per_row.sum() / 10)
    padding = torch.full_like(labels, -100)
    loss = head.loss(hidden, padding)
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(hidden.grad, torch.zeros_like(hidden))
    with pytest.raises(ValueError, match="losses has 5 entries, labels 6: give one loss per label"):
        RowCounting().reduce(torch.zeros(5), labels)


def test_every_head_class_builds_from_its_options_a_head_section_or_nothing():
    """`OutputHead(hidden_size, num_classes, options)` takes the options object, a head section or None (the
    family's defaults), as its docstring says, for every family."""
    for name, entry in FAMILIES.items():
        section = dict(next(iter(entry.options.examples.values())))
        options = head_options({"family": name, **section})
        for given in (options, section, {"family": name, **section}):
            head = entry.head(6, 13, given)
            assert head.options == options and type(head.options) is entry.options, (name, given)
        if not entry.head.uses_embedding_table:  # (a continuous head needs its table's dimension)
            assert entry.head(6, 13).options == head_options({"family": name}), name


def test_a_head_section_without_a_family_is_refused_with_the_families_to_choose_from():
    with pytest.raises(OptionError) as info:
        head_options({"margin": "arc"})
    assert str(info.value) == f"head.family is missing; allowed: {', '.join(FAMILIES)}"
    assert info.value.name == "head.family"


def test_a_head_built_on_its_own_starts_near_the_uniform_distribution():
    """`make_head` outside a model (no `post_init` initialises it): a new head of every discrete family starts with
    small weights, as a new model's does, so its inference distribution is near uniform over the classes it keeps."""
    torch.manual_seed(0)
    hidden = torch.randn(32, 16)
    for name, entry in FAMILIES.items():
        if entry.head.uses_embedding_table:  # (its classes are the rows of the embedding table it is given)
            continue
        with torch.no_grad():
            log_probs = make_head(16, 50, {"family": name}).eval().logits(hidden).log_softmax(-1)
        kept = log_probs.isfinite()
        uniform = -kept.sum(-1, keepdim=True).log()
        assert float((log_probs - uniform)[kept].abs().max()) < 1.0, name


def test_another_class_cannot_take_a_familys_name():
    """Registering the family's own class again changes nothing; another head class under its name is refused,
    naming both classes (a same-named class of another module included: never silently the first or the last)."""
    assert register("family")(SoftmaxHead) is SoftmaxHead and FAMILIES["softmax"].head is SoftmaxHead
    impostor = type("SoftmaxHead", (SoftmaxHead,), {"family": "softmax", "options_class": SoftmaxHeadOptions,
                                                    "__module__": "users_heads"})  # fmt: skip
    with pytest.raises(ValueError, match=r"head family 'softmax' is already registered by hf_heads\.heads\.softmax\."
                                         r"SoftmaxHead; users_heads\.SoftmaxHead cannot take its name"):  # fmt: skip
        register("family")(impostor)
    with pytest.raises(ValueError, match="'softmax' is already registered"):
        register_family("softmax", SoftmaxHeadOptions, TemperatureHead)
    assert FAMILIES["softmax"].head is SoftmaxHead


def test_a_family_registers_with_the_components_decorator_and_names_its_own_family_and_options():
    """Every built-in family is a head class registered with `register("family")`, the decorator of every component
    kind, naming its family and its options class in its own body; a subclass that inherits them (it would register
    its parent again), or a class without them, is refused with both named."""
    for name, entry in FAMILIES.items():
        assert entry.head.__dict__["family"] == name and entry.head.__dict__["options_class"] is entry.options
    inherits = type("Hotter", (TemperatureHead,), {})
    with pytest.raises(TypeError, match=r"sets its own `family`.* Hotter has family=None, options_class=None"):
        register("family")(inherits)
    named = type("Named", (TemperatureHead,), {"family": "named"})
    with pytest.raises(TypeError, match=r"Named has family='named', options_class=None"):
        register("family")(named)
    not_options = type("Odd", (TemperatureHead,), {"family": "odd", "options_class": dict})
    with pytest.raises(TypeError, match=r"a HeadOptions dataclass"):
        register("family")(not_options)
    assert not {"named", "odd"} & set(FAMILIES)
    with pytest.raises(ValueError, match=r"unknown component kind 'famly'; kinds: margin, .*, kernel, family"):
        register("famly")


def test_head_options_change_on_the_model_with_the_config_in_one_step(tmp_path):
    """A head's options and `config.head` are one state: the options and the section are read-only (an edit of either
    is refused where it is made, naming the way: before, an edited `config.head` ran the old head until a check
    caught it, and an edited option could be lost on save); `model.set_head_options` validates the change (a refused
    value changes nothing), keeps the head's trained tensors where they stay, writes `config.head`, takes effect at
    once and is saved; a `config.head` replaced whole is refused at save."""
    config = HeadsConfig(
        backbone=tiny_gpt2_config(50, n_layer=1, n_embd=16).to_dict(), head={"family": "sparse", "k": 20}
    )
    model = HeadsForCausalLM(config).eval()
    options = model.head.options
    with pytest.raises(AttributeError, match=r"head options are read-only .*set_head_options\(decode_k=\.\.\.\)"):
        options.decode_k = 3
    with pytest.raises(TypeError, match=r"config.head is read-only: model.set_head_options"):
        model.config.head["decode_k"] = 3
    with pytest.raises(TypeError, match="read-only"):
        model.config.head.update(decode_k=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(OptionError, match=r"^head.k=-1 must be >= 1"):
        model.set_head_options(k=-1)
    with pytest.raises(OptionError, match=r"decodek.* is not an option of head family 'sparse'"):
        model.set_head_options(decodek=3)
    assert model.head.options is options and model.config.head["decode_k"] is None
    model.set_head_options(decode_k=3.0)
    assert model.head.options.decode_k == 3 and isinstance(model.head.options.decode_k, int)
    assert model.config.head["decode_k"] == 3 and model.config.head == model.head_section()
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the trained tensors stay
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(0))
    logits = model(input_ids=ids).logits
    assert int(torch.isfinite(logits[0, 0]).sum()) == 3  # the change took effect
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["head"]["decode_k"] == 3
    again = HeadsForCausalLM.from_pretrained(tmp_path).eval()
    assert again.head.options == model.head.options
    torch.testing.assert_close(again(input_ids=ids).logits, logits)
    model.config.head = {**model.config.head, "decode_k": 5}  # replaced whole: the head did not follow
    with pytest.raises(ValueError, match=r"config.head was replaced.*\(decode_k: head 3, config 5\)"):
        model.save_pretrained(tmp_path / "other")
    assert not (tmp_path / "other" / "config.json").exists()


def test_set_head_options_switches_the_family_from_the_current_output_layer():
    """`family=` builds the new family's head and starts it from this one's output layer (W, b; a tied W stays tied;
    the word counts), its other options at their defaults plus the changes; a family for another task, or one that
    cannot start from the head, is refused before anything changes."""
    config = HeadsConfig(backbone=tiny_gpt2_config(50, n_layer=1, n_embd=16).to_dict(), head={"family": "softmax"},
                         tie_word_embeddings=True)  # fmt: skip
    model = HeadsForCausalLM(config)
    weight = model.head.weight
    model.head.set_word_counts(torch.arange(50.0))
    model.set_head_options(family="margin", margin="arc", m=0.2)
    assert model.head.family == "margin" and model.config.head["margin"] == {"type": "arc", "m": 0.2}
    assert model.head.weight is model.get_input_embeddings().weight is weight  # still tied
    assert torch.equal(model.head.word_counts, torch.arange(50.0))
    with pytest.raises(OptionError, match=r"head.family='continuous' is not a head for HeadsForCausalLM"):
        model.set_head_options(family="continuous")
    assert model.head.family == "margin" and model.config.head["family"] == "margin"
    with pytest.raises(OptionError, match="head.family='nope' is not allowed"):
        model.set_head_options(family="nope")


def test_options_coerce_what_json_and_the_command_line_change():
    """An integral float for an int option, and an L-Softmax m of 2.0 (the `--m` flag is a float) become ints, for
    every family that has them; a fractional one, or a number for a text option, is refused with the field named."""
    from transformers import HfArgumentParser

    from hf_heads.training import HeadsTrainingArguments

    parser = HfArgumentParser(HeadsTrainingArguments)
    for family in ("margin", "sampled"):
        (args,) = parser.parse_args_into_dataclasses(
            ["--output_dir", "x", "--head", family, "--margin", "lsm", "--m", "2"]
        )
        head = args.head_config()
        assert head["margin"] == {"type": "lsm", "m": 2} and isinstance(head["margin"]["m"], int)
    head = make_head(8, 20, {"family": "sampled", "method": "mcs", "num_samples": 4.0, "noise": "uniform"})
    assert head.options.num_samples == 4 and isinstance(head.options.num_samples, int)
    with pytest.raises(ValueError, match=r"head.num_samples=4.5 must be an integer"):
        make_head(8, 20, {"family": "sampled", "method": "mcs", "num_samples": 4.5, "noise": "uniform"})
    with pytest.raises(ValueError, match=r"head.m=2.5 must be an integer"):
        make_head(8, 20, {"family": "margin", "margin": "lsm", "m": 2.5})
    with pytest.raises(ValueError, match=r"^head\.criterion=3 must be a string$"):
        make_head(8, 20, {"family": "sampled", "method": "mcs", "num_samples": 4, "noise": "uniform", "criterion": 3})


def test_every_family_gives_examples_that_build_and_its_first_is_labelled_with_its_name():
    for name, entry in FAMILIES.items():
        assert next(iter(entry.options.examples)) == name
        for label, options in entry.options.examples.items():
            options = head_options({"family": name, **options})  # valid
            assert options.family == name, label
    with pytest.raises(ValueError, match="head family 'warm': its first example is labelled with its name"):
        register_family("warm", type("Warm", (TemperatureHeadOptions,), {"examples": {"hot": {}}}), TemperatureHead)
    assert "warm" not in FAMILIES


def _dispatch_on_family(path: Path) -> list[str]:
    """Lines of `path` that compare with a family name or test a head / options class with isinstance."""
    found = []
    names = "|".join(FAMILY_NAMES)
    compare = re.compile(rf"""(==|!=|\bin)\s*\(?["']({names})["']|["']({names})["']\s*(==|!=)""")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            text = ast.unparse(node)
            if re.search(r"(Head|HeadOptions)\b", text):
                found.append(f"{path}:{node.lineno}: {text}")
        if isinstance(node, ast.Compare):
            text = ast.unparse(node)
            if compare.search(text):
                found.append(f"{path}:{node.lineno}: {text}")
    return found


def test_nothing_outside_the_heads_dispatches_on_a_family():
    """Models, trainer, cards, scripts and benchmarks ask the head (or the registry), never its family's name."""
    paths = [p for p in (ROOT / "hf_heads").rglob("*.py") if "heads" not in p.relative_to(ROOT / "hf_heads").parts]
    paths += list((ROOT / "run_scripts").glob("*.py"))
    found = [line for p in paths for line in _dispatch_on_family(p)]
    assert not found, "\n".join(found)
    assert _dispatch_on_family(ROOT / "tests" / "fixtures" / "make_legacy_checkpoints.py")  # the check can fail


def test_component_objects_are_built_once_per_options_object():
    head = make_head(8, 20, {"family": "sampled", "method": "mcs", "num_samples": 4, "noise": "uniform"})
    options = head.options
    assert options.sampler is options.sampler and options.sampler.name == "mcs"  # kept: asked at every step
    changed = dataclasses.replace(options, method="is")  # a new object (the options are read-only)
    assert changed.sampler.name == "is" and changed.component("noise").name == "uniform"
    assert options.sampler.name == "mcs"


CITATIONS = {  # what a family's model card cites (`paper`): authors, titles as published, venues
    "margin": ["Huo et al., *Investigation of Large-Margin Softmax in Neural Language Modeling*, Interspeech 2020"],
    "sampled": ["Gao et al., *On Sampling-Based Training Criteria for Neural Language Modeling*, Interspeech 2021"],
    "sparse": ["Sun et al., *Sparse-softmax: A Simpler and Faster Alternative Softmax Transformation*, 2021"],
    "continuous": [
        "Bhat, Kumar & Tsvetkov, *A Margin-based Loss with Synthetic Negative Samples for Continuous-output Machine "
        "Translation*, WNGT 2019",
        "Kumar & Tsvetkov, *Von Mises-Fisher Loss for Training Sequence to Sequence Models with Continuous Outputs*, "
        "ICLR 2019",
    ],
}


@pytest.mark.parametrize("name", list(CITATIONS))
def test_a_familys_card_cites_its_papers_as_published(name):
    paper = FAMILIES[name].head.paper
    for citation in CITATIONS[name]:
        assert citation in paper, (name, paper)


@dataclass
class ScaledHeadOptions(HeadOptions):
    def reference(self, batch: ReferenceBatch):
        z = 2 * batch.hidden
        return F.cross_entropy(z[batch.valid], batch.labels[batch.valid], reduction="none"), z


class ScaledHead(OutputHead):  # written on the base class itself: only the hooks a family must fill in
    family = "scaled"
    options_class = ScaledHeadOptions

    def training_loss(self, hidden, labels, counting: RowCounting):
        z = self.inference_logits(hidden).flatten(0, -2)
        return counting.reduce(F.cross_entropy(z, labels.flatten().clamp_min(0), reduction="none"), labels)

    def inference_logits(self, hidden):
        return 2 * hidden

    @property
    def num_classes(self) -> int:
        return 5


@dataclass
class UnfinishedHeadOptions(ScaledHeadOptions):
    pass


class UnfinishedHead(OutputHead):  # fills in none of the hooks
    family = "unfinished"
    options_class = UnfinishedHeadOptions


@pytest.fixture
def base_class_families():
    register("family")(ScaledHead)
    register("family")(UnfinishedHead)
    yield
    del FAMILIES["scaled"], FAMILIES["unfinished"]


def test_a_family_on_the_base_class_gets_the_documented_defaults(base_class_families):
    """A head that fills in only the loss, the logits and its number of classes: no diagnostics, nothing to calibrate,
    the copied logits are its inference logits, the generic loss names, no eval sums, and the hooks it has no use
    for refuse naming the family."""
    head = make_head(5, 5, {"family": "scaled"})
    hidden = torch.randn(3, 5)
    assert head.diagnostics() == {} and head.calibrate_to(hidden, torch.randn(3, 5).log_softmax(-1)) == {}
    assert torch.equal(head.copied_logits(hidden), 2 * hidden) and torch.equal(head.logits(hidden), 2 * hidden)
    assert head.loss_names() == ("training criterion", "scaled head's eval loss")
    assert head.take_eval_sums() is None
    head.record_eval_sums()
    assert head.eval_sums is None and head.take_eval_sums() is None  # it names no eval sums
    refusals = [
        (
            head.linear_form,
            "the scaled head's inference distribution is not the softmax of a linear layer (it defines no "
            "linear_form): the base architecture cannot hold it; the hf_heads model itself serves it exactly "
            "(save_pretrained / export_for_hub: it loads with trust_remote_code=True where hf_heads is not installed)",
        ),
        (
            lambda: head.start_from(torch.zeros(5, 5), None),
            "a scaled head cannot start from a checkpoint's output layer",
        ),
        (lambda: head.embed_inputs(torch.tensor([1, 2])), "a scaled head does not embed decoder inputs"),
        (lambda: head.set_word_counts(torch.ones(5)), "the scaled head uses no word counts"),
        (
            lambda: head.unnormalized_log_scores(hidden),
            "the scaled head has no unnormalised scores: its logits are not trained to be self-normalised",
        ),
    ]
    for call, message in refusals:
        with pytest.raises(ValueError) as refused:
            call()
        assert str(refused.value) == message


def test_a_family_that_fills_in_no_hook_raises_not_implemented_for_each(base_class_families):
    head = make_head(4, 5, {"family": "unfinished"})
    hidden, labels = torch.randn(3, 4), torch.tensor([0, 1, 2])
    with pytest.raises(NotImplementedError):
        head.train().loss(hidden, labels)  # the training criterion
    with pytest.raises(NotImplementedError):
        head.eval().loss(hidden, labels)  # the eval loss defaults to it
    with pytest.raises(NotImplementedError):
        head.logits(hidden)
    with pytest.raises(NotImplementedError):
        head.num_classes  # noqa: B018


def test_a_head_class_builds_only_its_own_familys_head():
    """The base classes build no head; a family's class refuses another family's section or options object, naming
    both, and `make_head` builds any family."""
    with pytest.raises(TypeError) as refused:
        OutputHead(4, 5)
    assert str(refused.value) == "OutputHead is a base class: build heads with hf_heads.heads.make_head(...)"
    with pytest.raises(TypeError, match=r"^DiscreteHead is a base class"):
        DiscreteHead(4, 5)
    with pytest.raises(ValueError) as refused:
        SoftmaxHead(4, 5, {"family": "sparse", "k": 2})
    assert str(refused.value) == (
        "head.family='sparse', but SoftmaxHead is the 'softmax' family: build other families with "
        "hf_heads.heads.make_head"
    )
    with pytest.raises(TypeError) as refused:
        SoftmaxHead(4, 5, head_options({"family": "sparse", "k": 2}))
    assert str(refused.value) == "SoftmaxHead takes SoftmaxHeadOptions, not SparseHeadOptions"
    assert type(make_head(4, 5, {"family": "sparse", "k": 2})).__name__ == "SparseHead"


def test_a_softmax_head_has_no_unnormalised_scores_to_return():
    head = make_head(4, 5, {"family": "softmax"}).eval()
    with pytest.raises(ValueError) as refused:
        head(torch.randn(3, 4), normalized=False)
    assert str(refused.value) == (
        "the softmax head has no unnormalised scores: its logits are not trained to be self-normalised"
    )


def test_options_with_an_option_named_family_are_refused_at_registration():
    @dataclass
    class FamilyFieldOptions(HeadOptions):
        family: str = "mine"

    with pytest.raises(TypeError) as refused:
        register_family("odd", FamilyFieldOptions, TemperatureHead)
    assert str(refused.value) == (
        "head family 'odd': FamilyFieldOptions has an option named 'family', the head section's key for the family: "
        "rename the option"
    )
    assert "odd" not in FAMILIES


def test_a_missing_option_error_pickles_with_its_message_and_fields():
    """Data loader workers and multiprocessing pickle errors: a missing family comes back as the same error."""
    with pytest.raises(OptionError) as refused:
        head_options({"margin": "arc"})
    again = pickle.loads(pickle.dumps(refused.value))
    assert type(again) is type(refused.value) and str(again) == str(refused.value)
    assert (again.field, again.value, again.name) == ("family", None, "head.family")


def test_a_read_only_head_section_pickles_read_only_and_copies_mutable():
    """`config.head` and the lists in it stay read-only through pickle (a config sent to another process); a copy
    (copy.copy / copy.deepcopy) is a plain dict or list, the caller's to change."""
    weights = [1.0, 2.0, 1.0, 0.5, 1.0]
    config = HeadsConfig(
        backbone=tiny_gpt2_config(5, n_layer=1, n_embd=16).to_dict(),
        head={"family": "softmax", "class_weights": weights},
    )
    section, listed = config.head, config.head["class_weights"]
    with pytest.raises(TypeError, match=f"^{re.escape(READ_ONLY)}$"):
        listed.append(3.0)
    with pytest.raises(TypeError, match=f"^{re.escape(READ_ONLY)}$"):
        listed[0] = 3.0
    assert listed == weights
    for value, kind in ((section, FrozenSection), (listed, FrozenList)):
        again = pickle.loads(pickle.dumps(value))
        assert type(again) is kind and again == value
    again = pickle.loads(pickle.dumps(section))
    assert type(again["class_weights"]) is FrozenList
    for copied in (copy.copy(section), copy.deepcopy(section)):
        assert type(copied) is dict and copied == section and type(copied["class_weights"]) is list
        copied["class_weights"].append(3.0)
    for copied in (copy.copy(listed), copy.deepcopy(listed)):
        assert type(copied) is list and copied == weights
        copied.append(3.0)
    assert config.head["class_weights"] == weights


def test_an_empty_class_weight_list_is_refused():
    with pytest.raises(OptionError) as refused:
        head_options({"family": "softmax", "class_weights": []})
    assert str(refused.value) == "head.class_weights=[] must give one number >= 0 per class"


def test_the_flat_noise_options_beside_the_noise_section():
    """`noise_smoothing` / `noise_add` (older configs) beside a unigram noise section that sets the same parameter
    otherwise are refused, naming both spellings; beside another noise, at their old defaults, they are dropped."""
    with pytest.raises(OptionError) as refused:
        head_options({"family": "sampled", "noise": {"type": "unigram", "smoothing": 0.5}, "noise_smoothing": 0.75})
    assert str(refused.value) == "head.noise_smoothing=0.75 is given twice, as noise_smoothing and noise.smoothing"
    flat = head_options({"family": "sampled", "noise": "log-uniform", "noise_smoothing": 0.75, "noise_add": 0.0})
    assert flat == head_options({"family": "sampled", "noise": "log-uniform"})


@dataclass
class LinearHeadOptions(SoftmaxHeadOptions):
    pass


class LinearHead(DiscreteHead):  # on the discrete base: its loss pass does not say it scores the inference softmax
    family = "linear"
    options_class = LinearHeadOptions

    def training_loss(self, hidden, labels, counting: RowCounting):
        z = self.inference_logits(hidden).flatten(0, -2)
        return counting.reduce(F.cross_entropy(z, labels.flatten().clamp_min(0), reduction="none"), labels)

    eval_loss = training_loss

    def inference_logits(self, hidden):
        return F.linear(hidden, self.weight, self.bias)


def test_a_discrete_family_takes_its_token_statistics_from_a_pass_of_their_own():
    """A family on the discrete base that does not declare its loss pass the inference distribution: the token
    statistics (entropy, top-1 hits) come from `statistics`, beside its own loss."""
    register("family")(LinearHead)
    try:
        head = make_head(4, 5, {"family": "linear"}).eval()
    finally:
        del FAMILIES["linear"]
    hidden, labels = torch.randn(2, 3, 4), torch.tensor([[0, 4, -100], [2, 2, 1]])
    loss, stats = head(hidden, labels, token_statistics=True)
    torch.testing.assert_close(loss, head.loss(hidden, labels))
    expected = head.statistics(hidden, labels)
    torch.testing.assert_close(stats["entropy"], expected["entropy"])
    assert torch.equal(stats["is_top1"], (head.logits(hidden).argmax(-1) == labels) & (labels != -100))


def test_statistics_without_labels_are_refused():
    head = make_head(4, 5, {"family": "softmax"}).eval()
    hidden = torch.randn(2, 3, 4)
    for flag in ("token_statistics", "statistics"):
        with pytest.raises(ValueError) as refused:
            head(hidden, **{flag: True})
        assert str(refused.value) == f"{flag}=True needs labels"
