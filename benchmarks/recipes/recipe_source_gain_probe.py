"""usage: python benchmarks/recipes/recipe_source_gain_probe.py RUN_DIR [N]

How much do the decoder's predictions depend on the source? Teacher-forced loss on validation pairs with the
right source vs. with the sources shuffled across the batch (the 'source gain' in nats/token), and the mean
|logit difference| between two different sources for the same target prefix."""

import sys

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq

from hf_heads.data import load_translation

d = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 128
tok = AutoTokenizer.from_pretrained(d)
model = AutoModelForSeq2SeqLM.from_pretrained(d).eval()
val = load_translation("bible-es-en")["validation"].select(range(n))
src = [r["es"] for r in val["translation"]]
tgt = [r["en"] for r in val["translation"]]
col = DataCollatorForSeq2Seq(tok, model=model, label_pad_token_id=-100)


def loss(sources):
    feats = []
    for s, t in zip(sources, tgt, strict=False):
        e = tok(s, max_length=128, truncation=True)
        e["labels"] = tok(text_target=t, max_length=64, truncation=True)["input_ids"]
        feats.append(dict(e))
    b = col(feats)
    with torch.no_grad():
        out = model(**b)
    lp = out.logits.float().log_softmax(-1)
    lab = b["labels"]
    m = lab != -100
    nll = -lp.gather(-1, lab.clamp(min=0)[..., None])[..., 0][m].mean().item()
    return nll, out.logits, m


g = torch.Generator().manual_seed(0)
perm = torch.randperm(n, generator=g).tolist()
l_true, lg_true, m = loss(src)
l_shuf, lg_shuf, _ = loss([src[i] for i in perm])
diff = (lg_true - lg_shuf).abs()[m].mean().item()
scale = lg_true[m].std().item()
print(
    f"PROBE {d}: nll(true src)={l_true:.3f} ppl={torch.tensor(l_true).exp():.1f}  nll(shuffled src)={l_shuf:.3f}  "
    f"source gain={l_shuf - l_true:.3f} nats/token  mean|dlogit|={diff:.3f} (logit std {scale:.2f})"
)
enc = tok(src[:3], return_tensors="pt", padding=True)
with torch.no_grad():
    gen = model.generate(**enc, max_new_tokens=40, num_beams=1)
for s, t, p in zip(src[:3], tgt[:3], tok.batch_decode(gen, skip_special_tokens=True), strict=False):
    print("  SRC", s[:90], "\n  REF", t[:90], "\n  HYP", p.strip()[:90])
