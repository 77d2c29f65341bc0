"""Short training runs of the script's model (same tokenizer, model, collator, AdamW + linear warm-up/decay as the
HF Trainer) that log the teacher-forced loss with the right source vs shuffled sources ('source gain') on 128
validation pairs.

usage: python benchmarks/recipes/recipe_source_gain_ab.py NAME lr warmup total_steps steps batch \
    [key=value backbone overrides] [beta2=..] [vocab=..]"""

import math
import random
import sys
import time

import torch

sys.path.insert(0, "run_scripts")
from transformers import DataCollatorForSeq2Seq, get_linear_schedule_with_warmup, set_seed

from hf_heads import HeadsConfig, HeadsForSeq2SeqLM
from hf_heads.cli.backbones import tiny_backbone_config
from hf_heads.data import build_word_tokenizer, load_translation

torch.set_num_threads(1)
name, lr, warm, total, steps, bs = (
    sys.argv[1],
    float(sys.argv[2]),
    int(sys.argv[3]),
    int(sys.argv[4]),
    int(sys.argv[5]),
    int(sys.argv[6]),
)
over = dict(a.split("=") for a in sys.argv[7:])
beta2 = float(over.pop("beta2", 0.999))
vocab = int(over.pop("vocab", 10000))
set_seed(42)
ds = load_translation("bible-es-en")
tr = ds["train"]["translation"]
tok = build_word_tokenizer([t[k] for t in tr for k in ("es", "en")], vocab_size=vocab, add_eos=True)
bb = tiny_backbone_config("tiny-bart", tok)
for k, v in over.items():
    setattr(bb, k, type(getattr(bb, k))(float(v)) if getattr(bb, k, None) is not None else int(v))
model = HeadsForSeq2SeqLM(HeadsConfig(backbone=bb, head={"family": "softmax"}))
col = DataCollatorForSeq2Seq(tok, model=model, label_pad_token_id=-100)


def feats(pairs):
    out = []
    for s, t in pairs:
        e = dict(tok(s, max_length=128, truncation=True))
        e["labels"] = tok(text_target=t, max_length=64, truncation=True)["input_ids"]
        out.append(e)
    return out


train = [(t["es"], t["en"]) for t in tr]
random.Random(0).shuffle(train)
val = [(t["es"], t["en"]) for t in ds["validation"]["translation"][:128]]
perm = list(range(len(val)))
random.Random(1).shuffle(perm)
vb_true = col(feats(val))
vb_shuf = col(feats([(val[perm[i]][0], val[i][1]) for i in range(len(val))]))


def nll(b):
    model.eval()
    with torch.no_grad():
        lg = model(**b).logits.float().log_softmax(-1)
    model.train()
    lab = b["labels"]
    m = lab != -100
    return -lg.gather(-1, lab.clamp(min=0)[..., None])[..., 0][m].mean().item()


opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, beta2), weight_decay=0.0)
sch = get_linear_schedule_with_warmup(opt, warm, total)
print(
    name,
    "params",
    model.num_parameters(),
    "lr",
    lr,
    "warm",
    warm,
    "total",
    total,
    "bs",
    bs,
    over,
    "beta2",
    beta2,
    flush=True,
)
t0 = time.time()
run = 0.0
for step in range(1, steps + 1):
    i = (step - 1) * bs % len(train)
    b = col(feats(train[i : i + bs]))
    loss = model(**b).loss
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
    opt.step()
    sch.step()
    opt.zero_grad()
    run = 0.9 * run + 0.1 * loss.item() if step > 1 else loss.item()
    if step % 50 == 0 or step == steps:
        a, s = nll(vb_true), nll(vb_shuf)
        print(
            f"{name} step {step} {time.time() - t0:.0f}s train {run:.3f} gnorm {gn:.2f} | val nll {a:.3f} "
            f"(ppl {math.exp(a):.1f}) shuffled-src {s:.3f} source gain {s - a:.3f}",
            flush=True,
        )
