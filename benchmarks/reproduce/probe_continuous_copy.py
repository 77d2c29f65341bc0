#!/usr/bin/env python
"""Why the continuous heads did not learn with the plain GloVe table: the copy-task probes quoted in
docs/results/seq2seq_recipes/README.md ("Continuous output").

    python benchmarks/reproduce/probe_continuous_copy.py --loss vmf                # the head's vMF loss, plain table
    python benchmarks/reproduce/probe_continuous_copy.py --loss cosine             # 1 - cos(û, u), plain table
    python benchmarks/reproduce/probe_continuous_copy.py --loss mse                # ||û - u||² to the unit target
    python benchmarks/reproduce/probe_continuous_copy.py --loss cosine --table mean-centred
    python benchmarks/reproduce/probe_continuous_copy.py --loss cosine --table random
    python benchmarks/reproduce/probe_continuous_copy.py --loss cosine --freeze_bias # projection bias held at 0
    python benchmarks/reproduce/probe_continuous_copy.py \
        --recipe_model outputs/recipe_translation_continuous-vmf/seed42
        # the translation recipe's table (a run of recipe_seq2seq.py with the plain table): the count-weighted
        # mean of its unit rows over the training targets

The task and model are the known-answer copy task of tests/heads/test_learning.py (copy a random sequence of the
table's words; tiny BART from scratch, no dropout, Adam, batch 64, seed 0) and its table: the real GloVe 6B-50d rows
of the most frequent English words. Accuracy is greedy `generate()` through the head's nearest-neighbour decoding,
as in the test. `vmf` is the head's own loss (the papers' vMF NLLvMF); `cosine` and `mse`
are not hf_heads losses, computed here from the head's prediction û = head.predict(h) to separate the table's
geometry from the loss: `mean-centred` subtracts the GloVe rows' unweighted mean before the head normalises them
(close to, not the same as, `center_embeddings="mean"`, which centres the unit rows); `random` replaces the table by
Gaussian rows. The first line printed is the table's geometry: the mean cosine
between two different rows (GloVe: the frequent words share a direction).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "heads")]  # the helpers and tests/heads/test_learning.py

from conftest import tiny_enc_dec_config  # noqa: E402
from test_learning import S2S_V, _s2s_batch, glove_subtable, s2s_accuracy  # noqa: E402

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM  # noqa: E402


def probe_loss(model: HeadsForSeq2SeqLM, x: torch.Tensor, y: torch.Tensor, loss: str) -> tuple[torch.Tensor, float]:
    """The batch loss, the head's own (vmf) or cosine / mse on û = head.predict(decoder state), and the mean ‖û‖."""
    mask = torch.ones_like(x)
    if loss == "vmf":
        value = model(input_ids=x, attention_mask=mask, labels=y).loss
        return value, model.head.diagnostics()["head/pred_norm_mean"]
    head = model.head
    decoder_ids = model.prepare_decoder_input_ids_from_labels(y)  # (B, T), as the model's forward builds them
    if head.embeds_decoder_inputs:  # tied decoder inputs: the table's rows, as the model's forward embeds them
        inputs = {"decoder_inputs_embeds": head.embed_inputs(decoder_ids)}
    else:
        inputs = {"decoder_input_ids": decoder_ids}
    hidden = model.backbone(input_ids=x, attention_mask=mask, **inputs).last_hidden_state  # (B, T, H)
    pred = head.predict(hidden)  # (B, T, d)
    target = head.embeddings[y]  # (B, T, d) unit rows
    if loss == "cosine":
        value = (1 - F.cosine_similarity(pred, target, dim=-1)).mean()
    else:
        value = ((pred - target) ** 2).sum(-1).mean()
    return value, pred.detach().norm(dim=-1).mean().item()


def recipe_geometry(folder: str) -> None:
    """Norm of the mean unit row, weighted by the es→en training targets' counts (as `label_counts` counts them:
    the script's labels, 64 tokens at most) and unweighted over the first 20 rows: 1 = one shared direction."""
    from transformers import AutoTokenizer

    from hf_heads.data import load_translation

    model = HeadsForSeq2SeqLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    rows = model.head.embeddings.double()  # (V, d) unit rows
    targets = [pair["en"] for pair in load_translation("bible-es-en")["train"]["translation"]]
    ids = [i for seq in tok(text_target=targets, max_length=64, truncation=True)["input_ids"] for i in seq]
    counts = torch.bincount(torch.tensor(ids), minlength=len(rows)).double()  # (V,)
    weighted = (counts[:, None] * rows).sum(0) / counts.sum()
    print(f"{folder}: {len(targets)} training targets, {len(ids)} label tokens")
    print(f"norm of the count-weighted mean unit row: {weighted.norm():.3f}")
    print(f"norm of the mean of the first 20 unit rows: {rows[:20].mean(0).norm():.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loss", choices=("vmf", "cosine", "mse"))
    ap.add_argument("--table", choices=("plain", "mean-centred", "random"), default="plain")
    ap.add_argument("--freeze_bias", action="store_true", help="Hold the projection's bias at its initial 0.")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--recipe_model", default=None, help="A saved continuous translation model: its table's geometry.")
    args = ap.parse_args()
    if args.recipe_model is not None:
        return recipe_geometry(args.recipe_model)
    if args.loss is None:
        ap.error("give --loss (a copy probe) or --recipe_model (a table's geometry)")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    head = {"family": "continuous", "loss": "vmf", "embedding_dim": 50}
    backbone = tiny_enc_dec_config("bart", vocab_size=S2S_V, no_dropout=True)
    model = HeadsForSeq2SeqLM(HeadsConfig(backbone=backbone, head=head))
    table = glove_subtable()[1]  # (V, 50)
    if args.table == "mean-centred":
        table = table - table.mean(0)
    elif args.table == "random":
        table = torch.randn(table.shape, generator=torch.Generator().manual_seed(0))
    model.head.set_embedding_table(table)  # stored as unit rows
    rows = model.head.embeddings
    pairs = rows.shape[0] * (rows.shape[0] - 1)
    print(
        f"table {args.table}: mean cosine between two different rows {((rows @ rows.T).sum() - len(rows)) / pairs:.3f}"
    )
    if args.freeze_bias:
        model.head.proj.bias.requires_grad_(False)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    g = torch.Generator().manual_seed(1)
    model.train()
    for step in range(args.steps):
        x, y = _s2s_batch("copy", 64, g)
        loss, norm = probe_loss(model, x, y, args.loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:4d} loss {loss.item():.4f} mean ‖û‖ {norm:.2f}")
    model.eval()
    token_acc, seq_acc = s2s_accuracy(model, "copy")
    print(
        f"loss={args.loss} table={args.table} freeze_bias={args.freeze_bias} steps={args.steps}: "
        f"greedy copy accuracy {100 * token_acc:.1f} % of tokens, {100 * seq_acc:.1f} % of sequences"
    )


if __name__ == "__main__":
    main()
