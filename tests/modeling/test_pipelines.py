"""transformers.pipeline() with hf_heads models of every discrete family: `text-generation` (causal LM) and
`text-classification`, from the model in memory, from its saved directory, and from that directory loaded with
`trust_remote_code=True` where hf_heads is not installed. The pipelines decode with the head's inference
distribution: sampled heads their corrected posterior, sparse heads their top-k truncation.

transformers 5.23 has no translation / summarization / text2text pipelines: seq2seq models are used through
`generate()` and the tokenizer (README, model cards)."""

import pytest
import torch
from conftest import family_heads, tiny_gpt2_config
from export_check import export_job, load_without_hf_heads
from transformers import BertConfig, pipeline

from hf_heads import HeadsConfig, HeadsForCausalLM, HeadsForSequenceClassification
from hf_heads.data import build_word_tokenizer

TEXTS = [
    "in the beginning god created the heaven and the earth",
    "and the earth was without form and void and darkness was upon the face of the deep",
]
PROMPT = "in the beginning"
FAMILIES = family_heads("causal-lm", discrete=True)  # (every discrete family classifies too)
LABELS = {0: "law", 1: "poetry", 2: "history", 3: "prophecy", 4: "letter"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{(task, family): (model, directory)}: a tiny causal LM and a tiny classifier per family, saved with the
    word-level tokenizer (random weights: the pipelines must reproduce the model, not a good model)."""
    tok = build_word_tokenizer(TEXTS, add_eos=False)
    out = {}
    for name, section in FAMILIES.items():
        torch.manual_seed(0)
        assert (tok.bos_token_id, tok.eos_token_id) == (2, 3)  # the tiny configs' ids
        backbone = tiny_gpt2_config(len(tok), pad_token_id=tok.pad_token_id)
        lm = HeadsForCausalLM(HeadsConfig(backbone=backbone, head=section)).eval()
        bert = BertConfig(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            pad_token_id=tok.pad_token_id,
        )
        # fewer noise samples, and a top k of sparse-softmax that leaves labels out, than the 5 labels
        clf_section = {**section, **{key: 3 for key in ("num_samples", "k") if key in section}}
        config = HeadsConfig(
            backbone=bert, head=clf_section, id2label=LABELS, label2id={v: k for k, v in LABELS.items()}
        )
        clf = HeadsForSequenceClassification(config).eval()
        for task, model in (("text-generation", lm), ("text-classification", clf)):
            with torch.no_grad():
                model.head.bias.normal_(std=1.0)  # distinct classes
            if getattr(model.head, "context_norm_running", None) is not None:
                model.head.context_norm_running.fill_(3.0)  # a max-norm margin's g, as after training
            directory = tmp_path_factory.mktemp(f"{task}-{name}")
            model.save_pretrained(directory)
            tok.save_pretrained(directory)
            out[task, name] = (model, directory, tok)
    return out


def _generated(model, tok) -> str:
    ids = tok(PROMPT, return_tensors="pt")
    new = model.generate(**ids, max_new_tokens=5, do_sample=False)[0, ids.input_ids.shape[1] :]
    return PROMPT + tok.decode(new, skip_special_tokens=True)


def _class_scores(model, tok) -> dict[str, float]:
    inputs = tok(TEXTS[1], return_tensors="pt")
    with torch.no_grad():
        probs = torch.softmax(model(**inputs).logits.float(), dim=-1)[0]
    return {LABELS[i]: float(p) for i, p in enumerate(probs)}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pipelines_in_memory_and_from_the_saved_directory(saved, family):
    model, directory, tok = saved["text-generation", family]
    want = _generated(model, tok)
    got = pipeline("text-generation", model=model, tokenizer=tok)(PROMPT, max_new_tokens=5, do_sample=False)
    assert got[0]["generated_text"] == want
    got = pipeline("text-generation", model=str(directory))(PROMPT, max_new_tokens=5, do_sample=False)
    assert got[0]["generated_text"] == want

    model, directory, tok = saved["text-classification", family]
    want = _class_scores(model, tok)
    for pipe in (
        pipeline("text-classification", model=model, tokenizer=tok),
        pipeline("text-classification", model=str(directory)),
    ):
        scores = {r["label"]: r["score"] for r in pipe(TEXTS[1], top_k=None)}
        assert scores == pytest.approx(want, abs=1e-6)
    if "k" in FAMILIES[family]:  # sparse's truncated distribution: labels outside the top k get probability 0
        assert sorted(scores.values()).count(0.0) == len(LABELS) - model.head.options.k


@pytest.mark.slow
def test_pipelines_from_trust_remote_code_exports(saved, tmp_path):
    jobs, want = [], []
    for family in FAMILIES:
        model, directory, tok = saved["text-generation", family]
        jobs.append(
            export_job(
                directory,
                "AutoModelForCausalLM",
                text=PROMPT,
                pipeline=("text-generation", {"max_new_tokens": 5, "do_sample": False}),
            )
        )
        want.append(_generated(model, tok))
        model, directory, tok = saved["text-classification", family]
        jobs.append(
            export_job(
                directory,
                "AutoModelForSequenceClassification",
                text=TEXTS[1],
                pipeline=("text-classification", {"top_k": None}),
            )
        )
        want.append(_class_scores(model, tok))
    for job, result, expected in zip(jobs, load_without_hf_heads(jobs, tmp_path), want, strict=True):
        assert result["pipeline_module"].startswith("transformers_modules."), job["dir"]
        if isinstance(expected, str):
            assert result["pipeline"][0]["generated_text"] == expected, job["dir"]
        else:
            assert {r["label"]: r["score"] for r in result["pipeline"]} == pytest.approx(expected, abs=1e-6), job[
                "dir"
            ]
