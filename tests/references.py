"""Naive references of the margin and sampled losses, written from the papers' equations on dense tensors (float64
in the tests): the loss tests and the contract suite (tests/heads/test_contract.py) check the library against these."""

from __future__ import annotations

import math

import torch


def reference_margin_logits(
    h, W, b, y, margin="none", m=0.0, scale=None, word_norm="no-mod", context_norm="no-mod", counts=None,
    gain=1.0, multiplier=1.0, context_norm_value=None,
):  # fmt: skip
    """Eqs. 5-14 of the margin paper written out literally: l(c, i) = g(i) f(c) φ_c(cos θ) + b_c with θ from acos,
    φ = cos except for the target class when y is given (cos θ − m, cos(θ + m), or L-Softmax's ψ(θ) = (−1)^k cos(mθ)
    − 2k with its k), f and g by their definitions. max-norm's g is `context_norm_value` when given, else the batch's
    max ‖h‖; `gain` multiplies g, a checkpoint's output `multiplier` every logit (bias included); `b` may be None."""
    V = W.shape[0]
    hn, wn = h.norm(dim=1), W.norm(dim=1)
    cos = (h @ W.T) / (hn[:, None] * wn[None, :])
    if scale is not None:
        g, f = torch.full_like(hn, scale), torch.ones_like(wn)
    else:
        if context_norm == "no-mod":
            g = hn
        else:
            g = hn.max() if context_norm_value is None else torch.as_tensor(context_norm_value, dtype=h.dtype)
            g = g.expand_as(hn)
        if word_norm == "no-mod":
            f = wn
        else:
            c = counts.to(h.dtype)
            amax, amin = int(c.argmax()), int(c.argmin())
            rank = torch.empty(V, dtype=h.dtype)
            rank[torch.sort(c, descending=True, stable=True).indices] = torch.arange(V, dtype=h.dtype)
            if word_norm == "uniform":
                f = wn[amax].expand(V)
            elif word_norm == "log-rank":
                v = (torch.exp(wn[amax]) - torch.exp(wn[amin])) / V  # eq. 11
                f = torch.log(torch.exp(wn[amax]) - v * rank)
            elif word_norm == "unigram":
                u = (wn[amax] - wn[amin]) / c.max()  # eq. 12
                f = wn[amin] + u * c
            elif word_norm == "log-unigram":
                f = torch.log(c.clamp_min(1))
            else:
                raise ValueError(f"the paper's references here know its word norms, not word_norm={word_norm!r}")
    g = g * gain
    logits = g[:, None] * f[None, :] * cos
    if y is not None and margin != "none":
        rows = torch.arange(h.shape[0])
        cy = cos[rows, y]
        theta = torch.acos(cy.clamp(-1, 1))
        if margin == "cos":
            phi = cy - m
        elif margin == "arc":
            phi = torch.where(theta + m <= math.pi, torch.cos(theta + m), -2 - torch.cos(theta + m))
        elif margin == "lsm":
            k = torch.clamp(torch.floor(theta * m / math.pi), max=m - 1)
            phi = (-1) ** k * torch.cos(m * theta) - 2 * k
        else:  # a registered margin's reference is its own phi (tests/losses/test_components_contract.py)
            raise ValueError(f"the paper's references here know cos, arc and lsm, not margin={margin!r}")
        logits = logits.index_put((rows, y), g * f[y] * phi)
    if b is not None:
        logits = logits + b
    return logits * multiplier


def reference_sampled_rows(s, t, y, samples, noise, criterion="ce", method="full", remove_accidental_hits=False):
    """Per-row criteria of the sampling paper (eqs. 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21; the table of
    hf_heads.losses.sampled), one row and one sample at a time: s (n, V) plain scores, t (n,) the target's score
    (with the margin, if any), `samples` the K samples every row shares, `noise` D (V,). With
    `remove_accidental_hits` a sample equal to the row's target is left out (K and the corrections unchanged)."""
    num_classes = s.shape[1]
    rows = []
    for i in range(s.shape[0]):
        yi, ti = int(y[i]), t[i]
        if method == "full":
            others = s[i, [c for c in range(num_classes) if c != yi]]
            if criterion == "ce":
                rows.append(torch.logsumexp(torch.cat([ti[None], others]), 0) - ti)
            elif criterion == "bce":  # eq. 3
                rows.append(-torch.log(torch.sigmoid(ti)) - torch.log(1 - torch.sigmoid(others)).sum())
            else:  # mse, eq. 1
                rows.append((torch.sigmoid(ti) - 1) ** 2 + torch.sigmoid(others).pow(2).sum())
            continue
        K = len(samples)
        kept = [int(c) for c in samples if not (remove_accidental_hits and int(c) == yi)]
        sk, log_kd, log_kd_y = s[i, kept], torch.log(K * noise[kept]), math.log(K * float(noise[yi]))
        if criterion == "ce":  # the target among the candidates, with a sample's transform (eqs. 9, 13, 17, 21)
            numerator = ti
            if method == "mcs":
                first, cands = ti, sk
            elif method == "is":
                first, cands = ti - log_kd_y, sk - log_kd
            elif method == "cps":
                alpha = math.log(num_classes / K)
                first, cands = ti + alpha, sk + alpha
            else:
                first, cands = torch.sigmoid(ti - log_kd_y), torch.sigmoid(sk - log_kd)
                numerator = first
            rows.append(torch.logsumexp(torch.cat([first[None], cands]), 0) - numerator)
        else:  # bce, eqs. 7, 11, 15, 19
            if method == "nce":
                rows.append(-torch.log(torch.sigmoid(ti - log_kd_y)) - torch.log(1 - torch.sigmoid(sk - log_kd)).sum())
                continue
            negatives = torch.log(1 - torch.sigmoid(sk))
            weight = {"mcs": 1.0, "is": 1.0 / (K * noise[kept]), "cps": num_classes / K}[method]
            rows.append(-torch.log(torch.sigmoid(ti)) - (weight * negatives).sum())
    return torch.stack(rows)
