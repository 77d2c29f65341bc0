"""Names that moved keep working from their old paths until 0.3, each with a FutureWarning that names the new one."""

import importlib
import sys

import pytest
from conftest import tiny_gpt2_config


def _import_fresh(name: str, monkeypatch):
    """Import `name` as a first import would (its module-level warning fires again)."""
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_integrations_trl_reexports_the_trainer_beside_heads_trainer(monkeypatch):
    pytest.importorskip("trl")
    from hf_heads.training import trl

    with pytest.warns(FutureWarning, match=r"integrations\.trl moved to hf_heads\.training\.trl .*removed in 0\.3"):
        old = _import_fresh("hf_heads.integrations.trl", monkeypatch)
    assert old.HeadsSFTTrainer is trl.HeadsSFTTrainer and old.check_sft_options is trl.check_sft_options


def test_training_runs_reexports_the_cli_package(monkeypatch):
    from hf_heads.cli import backbones, errors, resume, runs

    with pytest.warns(FutureWarning, match=r"training\.runs moved to the package hf_heads\.cli .*removed in 0\.3"):
        old = _import_fresh("hf_heads.training.runs", monkeypatch)
    for name in old.__all__:
        new = next(getattr(m, name) for m in (backbones, errors, resume, runs) if hasattr(m, name))
        assert getattr(old, name) is new, name


def test_card_tables_moved_to_the_cli_package():
    from hf_heads.cli import backbones
    from hf_heads.training import cards

    for name in ("HUB_IDS", "BUILT_FROM_CONFIG"):
        with pytest.warns(
            FutureWarning, match=rf"cards\.{name} is deprecated .*0\.3; use hf_heads\.cli\.backbones\.{name}"
        ):
            assert getattr(cards, name) is getattr(backbones, name)
    with pytest.raises(AttributeError, match="has no attribute 'NO_SUCH_TABLE'"):
        cards.NO_SUCH_TABLE  # noqa: B018


@pytest.mark.parametrize("name", ["tiny-gpt2", "minilm"])
def test_write_model_card_still_reads_a_run_script_model_name(name, tmp_path):
    """`base_model="tiny-gpt2"` (or `"minilm"`) without `built_from_config` writes the card the run scripts write for
    that name (`hf_heads.cli.backbones.card_base_model`), with a FutureWarning."""

    from hf_heads import HeadsConfig, HeadsForCausalLM
    from hf_heads.cli.backbones import card_base_model
    from hf_heads.training import HeadsTrainingArguments, write_model_card

    backbone = tiny_gpt2_config(50, n_layer=1, n_embd=16).to_dict()
    model = HeadsForCausalLM(HeadsConfig(backbone=backbone, head={"family": "softmax"}))
    args = HeadsTrainingArguments(output_dir=str(tmp_path / "args"), report_to="none")
    card = dict(model=model, dataset="d", metrics={}, training_args=args)
    with pytest.warns(FutureWarning, match="names a run script's model"):
        old = write_model_card(tmp_path / "old", base_model=name, repo_id="r", **card).read_text()
    new = write_model_card(tmp_path / "new", repo_id="r", **card_base_model(name), **card).read_text()
    assert old == new
    assert ("sentence-transformers/all-MiniLM-L6-v2" in new) == (name == "minilm")
    assert ("built from a config" in new) == (name == "tiny-gpt2")


def test_deprecated_heads_names_still_work_and_warn():
    import hf_heads.heads as heads

    with pytest.warns(
        FutureWarning, match=r"HEAD_FAMILIES is deprecated.*0\.3; use hf_heads\.heads\.FAMILIES"
    ) as caught:
        families = heads.HEAD_FAMILIES
    assert caught[0].filename == __file__  # the warning names the line that used the old name
    assert families == {name: entry.options for name, entry in heads.FAMILIES.items()}
    assert families["margin"] is heads.MarginHeadOptions
    with pytest.warns(FutureWarning, match=r"option_help is deprecated.*0\.3"):
        option_help = heads.option_help
    assert option_help("sparse")["k"].endswith("(default: 20)")
    assert "HEAD_FAMILIES" not in heads.__all__ and "option_help" not in heads.__all__
    with pytest.raises(AttributeError, match="has no attribute 'NO_SUCH_NAME'"):
        heads.NO_SUCH_NAME  # noqa: B018


def test_a_loss_hook_of_the_keyword_form_is_adapted_and_warns():
    """A family whose hooks take `(hidden, labels, **rows)` (before `LossRows`) still trains: the hook gets the rows
    as keywords, with a FutureWarning naming it when the class is defined; a hook of the current form is left as
    it is."""
    import torch
    import torch.nn.functional as F

    from hf_heads.heads import SoftmaxHead
    from hf_heads.losses import LossRows

    with pytest.warns(FutureWarning, match=r"OldHead\.training_loss\(hidden, labels, \*\*rows\) is deprecated"):

        class OldHead(SoftmaxHead):
            def training_loss(self, hidden, labels, **rows):
                self.seen = rows
                return F.cross_entropy(hidden @ self.weight.T, labels, reduction=rows["reduction"])

    class NewHead(SoftmaxHead):
        def training_loss(self, hidden, labels, rows: LossRows):
            return super().training_loss(hidden, labels, rows)

    assert NewHead.training_loss is NewHead.__dict__["training_loss"]
    head = OldHead(3, 5).train()
    hidden, labels = torch.randn(4, 3), torch.tensor([0, 4, 2, 1])
    out = head.loss(hidden, labels, num_items_in_batch=7, reduction="sum")
    assert head.seen == {"num_items_in_batch": 7, "ignore_index": -100, "reduction": "sum"}
    torch.testing.assert_close(out, F.cross_entropy(hidden @ head.weight.T, labels, reduction="sum"))
