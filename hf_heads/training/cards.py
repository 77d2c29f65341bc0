"""Model cards and plots written at the end of training (Hub `model-index` metadata, PNG curves). A card says what
holds for its model: losses named by what they are, only standard metrics in `model-index` (never a loss), every score
on sacreBLEU's 0-100 scale, `trust_remote_code=True` only where the directory carries the code.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import yaml

TASKS = {
    "HeadsForCausalLM": ("text-generation", "Causal language modeling", "AutoModelForCausalLM"),
    "HeadsForSeq2SeqLM": ("text2text-generation", "Sequence-to-sequence generation", "AutoModelForSeq2SeqLM"),
    "HeadsForSequenceClassification": (
        "text-classification",
        "Sequence classification",
        "AutoModelForSequenceClassification",
    ),
}
TEMPLATE = Path(__file__).with_name("model_card_template.md")
# Scores with a standard meaning, by their name without the split prefix; `scale` turns them into 0-100
# (sacreBLEU's BLEU already is; rouge-score's ROUGE and scikit-learn's accuracy / F1 are fractions).
STANDARD_SCORES = {
    r"bleu": ("bleu", "BLEU", 1.0),
    r"bleu_(\d)": ("bleu", "BLEU-{0}", 1.0),
    r"rouge(1|2|L|Lsum)": ("rouge", "ROUGE-{0}", 100.0),
    r"accuracy": ("accuracy", "accuracy", 100.0),
    r"f1_(macro|micro)": ("f1", "{0}-F1", 100.0),
}
# other fractions shown on the 0-100 scale in the card's score table (not in model-index: not standard)
OTHER_SCORES = (r"accuracy@\d+", r"majority_class_accuracy", r"target_token_coverage")
SPLITS = (("eval_", "validation"), ("predict_", "test"))


def _is_lm(model) -> bool:
    return type(model).__name__ != "HeadsForSequenceClassification"


def loss_labels(model) -> dict[str, str]:
    """`train_label`, `eval_label` (legends and card) and `ylabel` of `model`'s losses, as its head names them."""
    unit = "token" if _is_lm(model) else "example"
    train, evaluation = model.head.loss_names("word" if unit == "token" else "class")
    ylabel = f"loss (nats / {unit})" if model.head.loss_in_nats else f"loss / {unit}"
    return {"train_label": f"train loss ({train})", "eval_label": f"eval loss ({evaluation})", "ylabel": ylabel}


def plot_loss_curves(
    log_history: list[dict],
    path: str | Path,
    title: str,
    *,
    model=None,
    train_label: str | None = None,
    eval_label: str | None = None,
    ylabel: str | None = None,
) -> Path:
    """Training and evaluation loss against the step, saved as PNG, each curve labelled by what it is
    (`loss_labels`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = loss_labels(model) if model is not None else {}
    train_label = train_label or labels.get("train_label", "train loss (training criterion)")
    eval_label = eval_label or labels.get("eval_label", "eval loss")
    ylabel = ylabel or labels.get("ylabel", "loss")
    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e and "step" in e]
    evals = [(e["step"], e["eval_loss"]) for e in log_history if "eval_loss" in e and "step" in e]
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=120)
    for points, label, style in ((train, train_label, "-"), (evals, eval_label, "--")):
        if points:
            steps, values = zip(*points, strict=True)
            ax.plot(steps, values, style, marker="o" if len(points) == 1 or style == "--" else None, ms=4, label=label)
    if not (train or evals):
        title = f"{title}: no loss logged (run shorter than logging_steps?)"
        ax.text(0.5, 0.5, "no loss logged", ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if train or evals:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def _standard_score(name: str) -> tuple[str, str, float] | None:
    """(model-index type, display name, factor to 0-100) of a standard score, else None."""
    for pattern, (kind, display, factor) in STANDARD_SCORES.items():
        match = re.fullmatch(pattern, name)
        if match:
            return kind, display.format(*match.groups()), factor
    return None


def _score_factor(name: str) -> float | None:
    """Factor that puts a score on the 0-100 scale (None: not a score)."""
    standard = _standard_score(name)
    if standard:
        return standard[2]
    return 100.0 if any(re.fullmatch(pattern, name) for pattern in OTHER_SCORES) else None


def _strip_split(key: str) -> str:
    return next((key.removeprefix(prefix) for prefix, _ in SPLITS if key.startswith(prefix)), key)


def model_index_results(model, metrics: dict, dataset: str, task_type: str, task_name: str) -> list[dict]:
    """`model-index` results per split: only metrics with a standard meaning (perplexity where the eval loss is a
    language model's NLL; accuracy, F1, BLEU, ROUGE on 0-100), never a loss."""
    perplexity = _is_lm(model) and bool(getattr(getattr(model, "head", None), "eval_loss_is_nll", False))
    results = []
    for prefix, split in SPLITS:
        values = []
        for key, value in sorted(metrics.items()):
            if not key.startswith(prefix) or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            name = key.removeprefix(prefix)
            if name == "perplexity" and perplexity and math.isfinite(value):
                values.append({"type": "perplexity", "value": round(float(value), 4), "name": f"{split} perplexity"})
            elif standard := _standard_score(name):
                kind, display, factor = standard
                values.append(
                    {"type": kind, "value": round(float(value) * factor, 4), "name": f"{split} {display} (0-100)"}
                )
        if values:
            data = {"name": dataset, "type": dataset, "split": split}
            results.append({"task": {"type": task_type, "name": task_name}, "dataset": data, "metrics": values})
    return results


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _row(*cells) -> str:
    """A markdown table row (a `|` inside a cell is escaped)."""
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"


def metrics_tables(model, metrics: dict) -> str:
    """Two markdown tables: scores on one 0-100 scale, then losses and measurements (each loss described)."""
    labels = loss_labels(model)
    unit = "token" if _is_lm(model) else "example"
    scores, others = [], []
    for key, value in sorted(metrics.items()):
        name = _strip_split(key)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        factor = _score_factor(name) if number else None
        if factor is not None:
            scores.append(_row(key, _fmt(round(float(value) * factor, 2))))
        elif key == "train_loss":
            others.append(_row(key, _fmt(value), f"{labels['train_label'].removeprefix('train ')}, mean"))
        else:  # a split's loss and perplexity described (the test split's: `predict_`); a key without a split: not
            split = "test" if key.startswith("predict_") else "eval"
            what = {"loss": labels["eval_label"].removeprefix("eval "), "perplexity": f"exp({split} NLL per {unit})"}
            others.append(_row(key, _fmt(value), what.get(name, "") if key != name else ""))
    out = []
    if scores:
        out += [
            "Scores on a 0-100 scale (BLEU as sacreBLEU reports it; ROUGE, accuracy and F1 multiplied by 100):",
            "",
            "| metric | value (0-100) |",
            "|---|---:|",
            *scores,
            "",
        ]
    out += ["| metric | value | what it is |", "|---|---:|---|", *others]
    return "\n".join(out)


def how_to_load(auto_class: str, repo: str, with_code: bool) -> str:
    """The card's loading instructions: `trust_remote_code=True` only where the directory carries the code."""
    lines = [
        "With hf_heads installed (`pip install hf_heads`; `import hf_heads` registers the classes):",
        "",
        "```python",
        "import hf_heads",
        f"from transformers import {auto_class}",
        "",
        f'model = {auto_class}.from_pretrained("{repo}")',
        "```",
        "",
    ]
    if with_code:
        lines += [
            "Without hf_heads: the repository carries the model code (`hf_heads_*.py`, `auto_map` in",
            "`config.json`):",
            "",
            "```python",
            f"from transformers import {auto_class}",
            "",
            f'model = {auto_class}.from_pretrained("{repo}", trust_remote_code=True)',
            "```",
            "",
            'Without either, transformers refuses with "contains custom code which must be executed": pass',
            "`trust_remote_code=True`, or install and `import hf_heads` first.",
        ]
    else:
        lines += [
            "This directory does not carry the model code, so hf_heads is needed: without `import hf_heads`,",
            'transformers answers "model type `hf_heads` but Transformers does not recognize this architecture"',
            "and suggests upgrading transformers, which does not help. Saved again with hf_heads",
            "(`model.save_pretrained(dir)`, or `model.export_for_hub(dir, tokenizer)`), the directory gets the",
            "code and loads without hf_heads too.",
        ]
    return "\n".join(lines)


def how_to_use(cls: str, repo: str, auto_class: str) -> str:
    """A usage example that works with transformers 5 for the model's task."""
    load = [
        "from transformers import AutoTokenizer  # `model` loaded as above",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{repo}")',
    ]
    if cls == "HeadsForSeq2SeqLM":
        intro = (
            "transformers 5 has no translation / summarization / text2text-generation pipeline: tokenize, call "
            "`generate()` (greedy or beam search over the head's scores) and decode."
        )
        code = [
            *load,
            'batch = tokenizer(["the source text"], return_tensors="pt")',
            "output_ids = model.generate(**batch, num_beams=4, max_new_tokens=64)",
            "print(tokenizer.batch_decode(output_ids, skip_special_tokens=True))",
        ]
    elif cls == "HeadsForCausalLM":
        intro = "`generate()` and the `text-generation` pipeline work as for any causal LM."
        code = [
            *load,
            'batch = tokenizer(["In the beginning"], return_tensors="pt")',
            "output_ids = model.generate(**batch, max_new_tokens=20, do_sample=False)",
            "print(tokenizer.batch_decode(output_ids, skip_special_tokens=True))",
        ]
    else:
        intro = "The `text-classification` pipeline works, or take the argmax of the logits:"
        code = [
            *load,
            "import torch",
            "",
            'batch = tokenizer(["a text to classify"], return_tensors="pt")',
            "with torch.no_grad():",
            "    label = model(**batch).logits.argmax(-1).item()",
            "print(model.config.id2label[label])",
        ]
    return "\n".join([intro, "", "```python", *code, "```"])


def inference_note(model) -> str:
    """What the head returns at inference, for this model's family and task."""
    use = {
        "HeadsForCausalLM": "`generate()` and evaluation work as for any transformers causal LM",
        "HeadsForSeq2SeqLM": "`generate()` (greedy and beam search) and evaluation work as for any "
        "transformers encoder-decoder",
        "HeadsForSequenceClassification": "the logits are the class scores",
    }
    return f"At inference the head returns {model.head.logits_note}, so {use[type(model).__name__]}."


def write_model_card(
    output_dir: str | Path,
    *,
    model,
    dataset: str,
    task: tuple[str, str] | None = None,
    metrics: dict,
    training_args,
    base_model: str | None = None,
    plots: list[str] | None = None,
    repo_id: str | None = None,
    built_from_config: bool = False,
) -> Path:
    """Fill `model_card_template.md` and write `README.md` into `output_dir`. `base_model`: the Hub id (into the card's
    metadata) or directory the model started from, or with `built_from_config=True` a backbone built from a config."""
    from hf_heads.modeling.export import has_code

    output_dir = Path(output_dir)
    cls = type(model).__name__
    task_type, task_name, auto_class = TASKS[cls]
    if task is not None:  # e.g. ("translation", "Translation es→en") for a seq2seq model
        task_type, task_name = task
    head = dict(model.config.head)
    family = head["family"]
    name = repo_id or output_dir.name
    meta = {
        "library_name": "transformers",
        "pipeline_tag": task_type,  # the Hub's task filter and widget: it cannot infer it from hf_heads' classes
        "tags": ["hf_heads", f"head-{family}", task_type],
        "datasets": [dataset],
        "model-index": [
            {
                "name": name,
                "results": model_index_results(model, metrics, dataset, task_type, task_name),
            }
        ],
    }
    if base_model and not Path(base_model).exists() and not built_from_config:
        meta["base_model"] = base_model
    hyper = {
        k: getattr(training_args, k)
        for k in (
            "learning_rate",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "max_steps",
            "num_train_epochs",
            "warmup_steps",
            "weight_decay",
            "lr_scheduler_type",
            "seed",
            "logging_steps",
        )
        if hasattr(training_args, k)
    }
    text = TEMPLATE.read_text(encoding="utf-8").format(
        metadata=yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).strip(),
        name=name,
        task_name=task_name,
        base_model=f"{base_model} (built from a config, random initialisation)"
        if base_model and built_from_config
        else base_model or "built from a config (random initialisation)",
        family=family,
        paper=model.head.paper,
        inference=inference_note(model),
        head_json=json.dumps(head, indent=2),
        dataset=dataset,
        metrics_tables=metrics_tables(model, metrics),
        hyper_table="\n".join(f"| {k} | {getattr(v, 'value', v)} |" for k, v in hyper.items()),
        how_to_load=how_to_load(auto_class, name, has_code(output_dir)),
        how_to_use=how_to_use(cls, name, auto_class),
        plots="\n\n".join(f"![{Path(p).stem}]({Path(p).name})" for p in plots or []),
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / "README.md"
    path.write_text(text, encoding="utf-8")
    return path
