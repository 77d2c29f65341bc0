"""What K the sampled head needs on a known-answer task: copy a random sequence of 6 words out of 36 (vocabulary 40
with 4 special ids, labels = the sequence then EOS) with a BART of d_model 64, 2 encoder + 2 decoder layers, 4 heads,
FFN 256, no dropout, init_std d_model ** -0.5; batch 64, AdamW, 400 steps, uniform noise. Scored by greedy
`generate()` token accuracy on 256 held-out sequences, and on them the teacher-forced accuracy and eval NLL of the
inference distribution (the corrected posterior for the sampled head), and the first step (checked every 25) at which
the teacher-forced accuracy reaches 95%.

Sections (`--parts`):

- `k`: the sampled head (hf_heads) with CE-IS and BCE-NCE over K, the learning rate and init seeds, softmax beside;
- `criteria`: every sampled criterion x method at K = 8 and K = 32 (lr 3e-3, seed 0);
- `draw`: a reference written from the sampling paper's equations (eqs. 7-22, the CE criteria with the target among
  the candidates; no hf_heads code in its loss, correction or decoding; the backbone and the initial weights are the
  head's), first checked against the head on one batch with the same samples (loss, gradients, eval NLL), then
  trained with its K samples shared by the batch (the paper's sec. 4.1, as the head) or drawn for every position;
- `spread`: one draw's gradient against the mean gradient over draws, at the initial weights, for shared and
  per-position samples (both estimators have the same mean: each position's samples have the same distribution).

    python benchmarks/reproduce/sampled_copy_k.py --out docs/results/sampled_copy_k.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import BartConfig  # noqa: E402

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM  # noqa: E402

V, LEN, D_MODEL, LAYERS, BATCH, STEPS = 40, 6, 64, 2, 64, 400
CRITERIA = ("ce-mcs", "ce-is", "ce-cps", "ce-nce", "bce-mcs", "bce-is", "bce-cps", "bce-nce")


def backbone() -> BartConfig:
    return BartConfig(
        vocab_size=V, pad_token_id=1, eos_token_id=3, bos_token_id=2, decoder_start_token_id=3,
        forced_eos_token_id=None, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=4 * D_MODEL, decoder_ffn_dim=4 * D_MODEL,
        max_position_embeddings=64, d_model=D_MODEL, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        init_std=D_MODEL**-0.5,
    )  # fmt: skip


def head_of(criterion: str, k: int | None) -> dict:
    if criterion == "softmax":
        return {"family": "softmax"}
    c, m = criterion.split("-")
    return {"family": "sampled", "criterion": c, "method": m, "num_samples": k, "noise": "uniform"}


def copy_batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(4, V, (n, LEN), generator=g)
    return x, torch.cat([x, torch.full((n, 1), 3)], 1)


def new_model(criterion: str, k: int | None, seed: int) -> HeadsForSeq2SeqLM:
    torch.manual_seed(seed)
    return HeadsForSeq2SeqLM(HeadsConfig(backbone=backbone(), head=head_of(criterion, k)))


HELD_OUT = copy_batch(256, torch.Generator().manual_seed(123))


# ---------------------------------------------------------------------------------------------- the reference


class Reference(torch.nn.Module):
    """The model's backbone with its own output layer (W, b copied from the head) and the criteria, their posterior
    corrections and greedy decoding written from the paper's equations; `draw`: "shared" (one draw of K classes for
    the batch) or "position" (K classes drawn for every position)."""

    def __init__(self, model: HeadsForSeq2SeqLM, criterion: str, k: int, draw: str) -> None:
        super().__init__()
        self.bb, self.criterion, self.k, self.draw = model.backbone, criterion, k, draw
        self.W = torch.nn.Parameter(model.head.weight.detach().clone())
        self.b = torch.nn.Parameter(model.head.bias.detach().clone())
        self.D = torch.full((V,), 1.0 / V, dtype=torch.float64)  # uniform noise

    def hidden(self, x, y):
        start = torch.full((y.shape[0], 1), 3)
        dec = torch.cat([start, y[:, :-1]], 1)
        return self.bb(input_ids=x, attention_mask=torch.ones_like(x), decoder_input_ids=dec).last_hidden_state

    def samples(self, n: int) -> torch.Tensor:  # (n, K)
        if self.draw == "shared":
            return torch.multinomial(self.D.float(), self.k, replacement=True)[None].expand(n, self.k)
        return torch.multinomial(self.D.float().expand(n, V), self.k, replacement=True)

    def loss(self, h, y, samples):
        """−F / N of the criterion (eqs. 7-21) over positions h (N, H) with targets y (N,) and samples (N, K)."""
        s = (h @ self.W.T + self.b).double()  # (N, V)
        st, sk = s.gather(1, y[:, None])[:, 0], s.gather(1, samples)  # (N,), (N, K)
        kd_t, kd_k = self.k * self.D[y], self.k * self.D[samples]  # K·D(c)
        alpha = V / self.k
        c, m = self.criterion.split("-")
        if c == "ce":  # the target among the candidates, with a sample's weight
            weight = {"mcs": 1.0, "is": None, "cps": alpha, "nce": 1.0}[m]
            if m == "nce":  # eq. 21: σ(z), z = log(q / (K·D)), q = exp(s)
                u_t, u_k = torch.sigmoid(st - kd_t.log()), torch.sigmoid(sk - kd_k.log())
                return (torch.log(torch.exp(u_t) + torch.exp(u_k).sum(1)) - u_t).mean()
            if weight is None:  # eq. 13
                den = torch.exp(st) / kd_t + (torch.exp(sk) / kd_k).sum(1)
            else:  # eqs. 9, 17
                den = weight * (torch.exp(st) + torch.exp(sk).sum(1))
            return (torch.log(den) - st).mean()
        if m == "nce":  # eq. 19, q = exp(s)
            q_t, q_k = torch.exp(st), torch.exp(sk)
            return -(torch.log(q_t / (q_t + kd_t)) + torch.log(1 - q_k / (q_k + kd_k)).sum(1)).mean()
        neg_weight = {"mcs": torch.ones_like(kd_k), "is": 1 / kd_k, "cps": torch.full_like(kd_k, alpha)}[m]
        q_t, q_k = torch.sigmoid(st), torch.sigmoid(sk)  # eqs. 7, 11, 15
        return -(torch.log(q_t) + (neg_weight * torch.log(1 - q_k)).sum(1)).mean()

    def log_posterior(self, h):
        """log p(c|x) renormalised over V from the optimum of each criterion (eqs. 8-22)."""
        s = (h @ self.W.T + self.b).double()
        c, m = self.criterion.split("-")
        D, k = self.D, self.k
        if c == "ce":
            p = {"mcs": s + D.log(), "is": s, "cps": s + D.log(), "nce": torch.sigmoid(s - (k * D).log()) + D.log()}
            return p[m].log_softmax(-1)  # eqs. 10, 14, 18, 22
        if m == "nce":
            return s.log_softmax(-1)  # eq. 20: q = exp(s) = p
        q = torch.sigmoid(s)  # eqs. 8, 12, 16: q = (1 + c / p)^-1, p = c·q / (1 − q)
        const = {"mcs": k * D, "is": torch.ones_like(D), "cps": (V / k) * k * D}[m]
        return (const * q / (1 - q)).log().log_softmax(-1)

    def step_loss(self, x, y):
        h = self.hidden(x, y).reshape(-1, self.W.shape[1])
        return self.loss(h, y.reshape(-1), self.samples(h.shape[0]))

    @torch.no_grad()
    def scores(self):
        x, y = HELD_OUT
        lp = self.log_posterior(self.hidden(x, y).reshape(-1, self.W.shape[1]))
        yy = y.reshape(-1)
        return float(-lp.gather(1, yy[:, None]).mean()), float((lp.argmax(-1) == yy).float().mean())

    @torch.no_grad()
    def greedy(self) -> float:
        x, _ = HELD_OUT
        enc = self.bb.encoder(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state
        dec = torch.full((x.shape[0], 1), 3)
        for _ in range(LEN):
            h = self.bb.decoder(input_ids=dec, encoder_hidden_states=enc).last_hidden_state[:, -1]
            dec = torch.cat([dec, self.log_posterior(h).argmax(-1)[:, None]], 1)
        return float((dec[:, 1:] == x).float().mean())


def check_reference(criterion: str, k: int) -> dict:
    """The head's loss and gradients on one batch against the reference with the same samples, and its eval NLL."""
    import hf_heads.losses.sampled as sampled

    model = new_model(criterion, k, 0)
    ref = Reference(model, criterion, k, "shared")
    x, y = copy_batch(BATCH, torch.Generator().manual_seed(5))
    drawn, draw = [], sampled.draw_samples
    sampled.draw_samples = lambda *a, **kw: drawn.append(draw(*a, **kw)) or drawn[-1]
    try:
        model.train()
        loss = model(input_ids=x, attention_mask=torch.ones_like(x), labels=y).loss
    finally:
        sampled.draw_samples = draw
    head_w = torch.autograd.grad(loss, [model.head.weight, model.head.bias])
    h = ref.hidden(x, y).reshape(-1, D_MODEL)
    ref_loss = ref.loss(h, y.reshape(-1), drawn[0][None].expand(h.shape[0], k))
    ref_w = torch.autograd.grad(ref_loss, [ref.W, ref.b])
    model.eval()
    with torch.no_grad():
        nll = float(model(input_ids=x, attention_mask=torch.ones_like(x), labels=y).loss)
        lp = ref.log_posterior(ref.hidden(x, y).reshape(-1, D_MODEL))
    return {
        "loss": abs(float(loss.detach()) - float(ref_loss.detach())),
        "grad": max(float((a - b).abs().max()) for a, b in zip(head_w, ref_w, strict=True)),
        "nll": abs(nll - float(-lp.gather(1, y.reshape(-1, 1)).mean())),
    }


# ---------------------------------------------------------------------------------------------- training


@torch.no_grad()
def head_scores(model) -> tuple[float, float]:
    x, y = HELD_OUT
    model.eval()
    out = model(input_ids=x, attention_mask=torch.ones_like(x), labels=y)
    model.train()
    return float(out.loss), float((out.logits.argmax(-1) == y).float().mean())


@torch.no_grad()
def head_greedy(model) -> float:
    x, _ = HELD_OUT
    model.eval()
    out = model.generate(
        input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=LEN + 1, min_new_tokens=LEN + 1, do_sample=False
    )
    return float((out[:, 1 : LEN + 1] == x).float().mean())


def train(criterion: str, k: int | None, lr: float, seed: int, draw: str | None = None) -> dict:
    """One run: the head (draw None) or the reference with `draw`."""
    model = new_model(criterion, k, seed)
    net = model if draw is None else Reference(model, criterion, k, draw)
    opt = torch.optim.AdamW(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(1)
    torch.manual_seed(seed + 1000)  # the samples' draws
    reached, start = None, time.time()
    net.train()
    for step in range(1, STEPS + 1):
        x, y = copy_batch(BATCH, g)
        if draw is None:
            loss = model(input_ids=x, attention_mask=torch.ones_like(x), labels=y).loss
        else:
            loss = net.step_loss(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if reached is None and step % 25 == 0:
            _, tf = head_scores(model) if draw is None else net.scores()
            reached = step if tf >= 0.95 else None
    nll, tf = head_scores(model) if draw is None else net.scores()
    greedy = head_greedy(model) if draw is None else net.greedy()
    return {"greedy": greedy, "tf": tf, "nll": nll, "reached": reached, "s": time.time() - start}


def spread(criterion: str, k: int, draws: int = 100) -> dict:
    """At the initial weights (seed 0), one training batch: the rms deviation of one draw's gradient (all parameters)
    from the mean gradient over 2 x `draws` draws, relative to the mean's norm, and the mean cosine with it."""
    model = new_model(criterion, k, 0)
    x, y = copy_batch(BATCH, torch.Generator().manual_seed(1))
    grads = {}
    torch.manual_seed(7)
    for draw in ("shared", "position"):
        ref = Reference(model, criterion, k, draw)
        params = list(ref.parameters())
        grads[draw] = torch.stack(
            [torch.cat([g.flatten() for g in torch.autograd.grad(ref.step_loss(x, y), params)]) for _ in range(draws)]
        )
    mean = torch.cat(list(grads.values())).mean(0)
    out = {}
    for draw, g in grads.items():
        dev = float((g - mean).norm(dim=1).pow(2).mean().sqrt())
        cos = float(torch.nn.functional.cosine_similarity(g, mean[None], dim=1).mean())
        out[draw] = (dev / float(mean.norm()), cos)
    return out


# ---------------------------------------------------------------------------------------------- the report


def cell(r: dict) -> str:
    reached = "—" if r["reached"] is None else str(r["reached"])
    return f"{100 * r['greedy']:.1f} | {100 * r['tf']:.1f} | {r['nll']:.3f} | {reached}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--parts", nargs="+", default=["k", "criteria", "draw", "spread"])
    p.add_argument("--ks", type=int, nargs="+", default=[8, 16, 24, 32])
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-3])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default=None, help="markdown file (rows are appended as they finish)")
    a = p.parse_args()
    torch.set_num_threads(1)
    lines: list[str] = []

    def emit(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)
        if a.out:
            with open(a.out, "w") as f:
                f.write("\n".join(lines) + "\n")

    emit("# What K the sampled head needs: copy at a BART-like scale")
    emit()
    emit(f"Command: `python benchmarks/reproduce/sampled_copy_k.py {' '.join(sys.argv[1:])}` "
         f"(torch {torch.__version__}, one thread). Task and model: the script's docstring. Columns: greedy "
         "`generate()` token accuracy %, teacher-forced accuracy %, eval NLL over the 7 label positions (uniform over "
         "V: ln 40 = 3.69; the EOS position learnt and the words at chance: 6/7 · ln 36 = 3.07), first step "
         "(every 25) with teacher-forced accuracy >= 95% (— : not within 400 steps).")  # fmt: skip
    header = "| greedy % | teacher-forced % | eval NLL | step to 95% |"
    if "k" in a.parts:
        emit()
        emit("## K, learning rate and init seed (the head)")
        emit()
        emit("| criterion | K | lr | seed " + header)
        emit("|---|---:|---:|---:|---:|---:|---:|---:|")
        for lr in a.lrs:
            for seed in a.seeds:
                emit(f"| softmax | — | {lr:g} | {seed} | {cell(train('softmax', None, lr, seed))} |")
            for criterion in ("ce-is", "bce-nce"):
                for k in a.ks:
                    for seed in a.seeds:
                        emit(f"| {criterion} | {k} | {lr:g} | {seed} | {cell(train(criterion, k, lr, seed))} |")
    if "criteria" in a.parts:
        emit()
        emit("## Every criterion, K = 8 and 32 (the head, lr 3e-3, seed 0)")
        emit()
        emit("| criterion | K " + header)
        emit("|---|---:|---:|---:|---:|---:|")
        for criterion in CRITERIA:
            for k in (8, 32):
                emit(f"| {criterion} | {k} | {cell(train(criterion, k, 3e-3, 0))} |")
    if "draw" in a.parts:
        emit()
        emit("## The reference from the paper's equations: samples shared by the batch or drawn per position")
        emit()
        emit("One batch, same samples, the head against the reference (K = 8): largest difference of the loss, of "
             "the output layer's gradients, of the eval NLL.")  # fmt: skip
        emit()
        emit("| criterion | loss | gradient | eval NLL |")
        emit("|---|---:|---:|---:|")
        for criterion in CRITERIA:
            d = check_reference(criterion, 8)
            emit(f"| {criterion} | {d['loss']:.1e} | {d['grad']:.1e} | {d['nll']:.1e} |")
        emit()
        emit("Training (K = 8, lr 3e-3):")
        emit()
        emit("| criterion | samples | seed " + header)
        emit("|---|---|---:|---:|---:|---:|---:|")
        for criterion in ("ce-is", "bce-nce"):
            for draw in ("shared", "position"):
                for seed in a.seeds:
                    emit(f"| {criterion} | {draw} | {seed} | {cell(train(criterion, 8, 3e-3, seed, draw))} |")
    if "spread" in a.parts:
        emit()
        emit("## One draw's gradient against the mean gradient (initial weights, one batch of 64 x 7 positions)")
        emit()
        emit("rms deviation of one draw's gradient from the mean over 200 draws, as a multiple of the mean's norm, "
             "and the mean cosine with it; sqrt((V − 1) / K): the relative spread of a class's count among K "
             "uniform samples.")  # fmt: skip
        emit()
        emit("| criterion | K | sqrt((V−1)/K) | shared: deviation | cosine | per position: deviation | cosine |")
        emit("|---|---:|---:|---:|---:|---:|---:|")
        for criterion in ("ce-is", "bce-nce"):
            for k in a.ks:
                s = spread(criterion, k)
                emit(f"| {criterion} | {k} | {math.sqrt((V - 1) / k):.2f} | {s['shared'][0]:.2f} | "
                     f"{s['shared'][1]:.2f} | {s['position'][0]:.2f} | {s['position'][1]:.2f} |")  # fmt: skip
    print(json.dumps({"done": a.parts}))


if __name__ == "__main__":
    main()
