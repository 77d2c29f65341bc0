"""Model cards and plots written at the end of training (Hub `model-index` metadata, PNG curves)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

PAPERS = {
    "softmax": "plain softmax cross-entropy (baseline)",
    "margin": "Huo et al., *Investigation of Large-Margin Softmax in Neural Language Modeling*, Interspeech 2020",
    "sampled": "Gao et al., *On Sampling-Based Training Criteria for Neural Language Modeling*, Interspeech 2021",
    "sparse": "Sun et al., *Sparse-softmax: A Simpler and Faster Alternative Softmax Transformation*, 2021 "
    "(softmax over the top-k logits)",
    "continuous": "Bhat, Kumar & Tsvetkov, *A Margin-based Loss with Synthetic Negative Samples for Continuous-output "
    "Machine Translation*, WNGT 2019 (and Kumar & Tsvetkov, *Von Mises-Fisher Loss for Training Sequence to "
    "Sequence Models with Continuous Outputs*, ICLR 2019)",
}
TASKS = {
    "HeadsForCausalLM": ("text-generation", "Causal language modeling", "AutoModelForCausalLM"),
    "HeadsForSeq2SeqLM": ("text2text-generation", "Sequence-to-sequence generation", "AutoModelForSeq2SeqLM"),
    "HeadsForSequenceClassification": ("text-classification", "Sequence classification",
                                       "AutoModelForSequenceClassification"),
}  # fmt: skip
TEMPLATE = Path(__file__).with_name("model_card_template.md")
HUB_IDS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}  # packaged models and their Hub ids
BUILT_FROM_CONFIG = ("tiny-gpt2", "tiny-llama", "tiny-bart", "tiny-t5", "tiny-marian", "tiny-bert")


def plot_loss_curves(log_history: list[dict], path: str | Path, title: str) -> Path:
    """Training and evaluation loss against the step, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(e["step"], e["loss"]) for e in log_history if "loss" in e and "step" in e]
    evals = [(e["step"], e["eval_loss"]) for e in log_history if "eval_loss" in e]
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    if train:
        ax.plot(*zip(*train, strict=False), label="train loss (training criterion)")
    if evals:
        ax.plot(*zip(*evals, strict=False), marker="o", label="eval loss (NLL, no margin)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


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
) -> Path:
    """Fill `model_card_template.md` and write `README.md` into `output_dir`."""
    output_dir = Path(output_dir)
    cls = type(model).__name__
    task_type, task_name, auto_class = TASKS[cls]
    if task is not None:  # e.g. ("translation", "Translation es→en") for a seq2seq model
        task_type, task_name = task
    head = dict(model.config.head)
    family = head["family"]
    name = repo_id or output_dir.name
    results = []
    for prefix, split in (("eval_", "validation"), ("predict_", "test")):
        values = [
            {
                "type": key.removeprefix(prefix),
                "value": round(float(value), 4),
                "name": f"{split} {key.removeprefix(prefix)}",
            }
            for key, value in sorted(metrics.items())
            if key.startswith(prefix)
            and isinstance(value, int | float)
            and not key.endswith(("runtime", "per_second"))
        ]
        if values:
            data = {"name": dataset, "type": dataset, "split": split}
            results.append({"task": {"type": task_type, "name": task_name}, "dataset": data, "metrics": values})
    meta = {
        "library_name": "transformers",
        "tags": ["hf_heads", f"head-{family}", task_type],
        "datasets": [dataset],
        "model-index": [
            {
                "name": name,
                "results": results,
            }
        ],
    }
    base_model = HUB_IDS.get(base_model, base_model)
    if base_model and not Path(base_model).exists() and base_model not in BUILT_FROM_CONFIG:
        meta["base_model"] = base_model
    hyper = {
        k: getattr(training_args, k)
        for k in (
            "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
            "num_train_epochs", "warmup_steps", "weight_decay", "lr_scheduler_type", "seed",
        )
        if hasattr(training_args, k)
    }  # fmt: skip
    text = TEMPLATE.read_text(encoding="utf-8").format(
        metadata=yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).strip(),
        name=name,
        task_name=task_name,
        base_model=f"{base_model} (built from a config, random initialisation)"
        if base_model in BUILT_FROM_CONFIG
        else base_model or "built from a config (random initialisation)",
        family=family,
        paper=PAPERS.get(family, family),
        head_json=json.dumps(head, indent=2),
        dataset=dataset,
        metrics_table="\n".join(
            f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in sorted(metrics.items())
        ),
        hyper_table="\n".join(f"| {k} | {v} |" for k, v in hyper.items()),
        auto_class=auto_class,
        repo=name,
        plots="\n\n".join(f"![{Path(p).stem}]({Path(p).name})" for p in plots or []),
    )
    path = output_dir / "README.md"
    path.write_text(text, encoding="utf-8")
    return path
