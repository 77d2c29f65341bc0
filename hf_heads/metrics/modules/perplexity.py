"""Perplexity, as the Hub's `evaluate.load("perplexity")` computes it, or from NLLs the trainer already has (an
`evaluate` module shipped with hf_heads: loads offline).

Default configuration: evaluate's arguments, keys and computation, but `model_id` may be an hf_heads checkpoint (its
inference distribution is scored) and evaluate's `assert` checks raise ValueError. Configuration `"nll"`: `predictions`
are summed NLLs (nats) per sequence, `references` their token counts; it also returns `perplexity` = exp(sum NLL / sum
tokens), the token-weighted corpus perplexity, and `nll_per_token`.
"""

import math

import datasets
import evaluate
import numpy as np

_CITATION = """\
@article{jelinek1977perplexity,
    title={Perplexity{\\textemdash}a measure of the difficulty of speech recognition tasks},
    author={Jelinek, Fred and Mercer, Robert L and Bahl, Lalit R and Baker, James K},
    journal={The Journal of the Acoustical Society of America},
    volume={62},
    number={S1},
    pages={S63--S63},
    year={1977},
}
"""

_DESCRIPTION = """\
Perplexity (PPL) is one of the most common metrics for evaluating language models. It is defined as the
exponentiated average negative log-likelihood of a sequence, calculated with exponent base `e`.
"""

_KWARGS_DESCRIPTION = """
Args (default configuration, as evaluate's `perplexity`):
    model_id (str): causal language model used for calculating perplexity (a local directory or a cached Hub id;
        hf_heads checkpoints included).
    predictions (list of str): input text, each separate text snippet is one list entry.
    batch_size (int): the batch size to run texts through the model. Defaults to 16.
    add_start_token (bool): whether to add the start token to the texts, so the perplexity can include the
        probability of the first word. Defaults to True; refused for a tokenizer without a BOS token (pass False).
    device (str): device to run on ("gpu", "cpu" or "cuda"), defaults to 'cuda' when available.
    max_length (int): texts are truncated to this many tokens (BOS included). Defaults to None (no truncation).
Args (configuration "nll"):
    predictions (list of float): summed negative log-likelihood (nats) of each sequence.
    references (list of int): number of scored tokens of each sequence (each > 0).
Returns:
    perplexities: the perplexity of each text / sequence,
    mean_perplexity: their (unweighted) mean,
    perplexity, nll_per_token: configuration "nll" only: exp(sum NLL / sum tokens) and sum NLL / sum tokens.
Examples:
    >>> perplexity = evaluate.load(hf_heads.metrics.path("perplexity"), module_type="metric")
    >>> results = perplexity.compute(model_id="path/to/causal-lm", predictions=["lorem ipsum", "Happy Birthday!"])
    >>> print(list(results.keys()))
    ['perplexities', 'mean_perplexity']
    >>> nll = evaluate.load(hf_heads.metrics.path("perplexity"), "nll")
    >>> nll.compute(predictions=[2.0, 4.0], references=[2, 2])["perplexity"] == math.exp(1.5)
    True
"""

_DEVICES = ("gpu", "cpu", "cuda")
_MAX_LOG = 700.0  # exp overflows float64 past ~709.78


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Perplexity(evaluate.Metric):
    def _info(self):
        if self.config_name == "nll":
            features = datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("int64")}
            )
        else:
            features = datasets.Features({"predictions": datasets.Value("string")})
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=features,
            reference_urls=["https://huggingface.co/docs/transformers/perplexity"],
        )

    def _compute(
        self,
        predictions,
        model_id=None,
        batch_size: int = 16,
        add_start_token: bool = True,
        device=None,
        max_length=None,
        references=None,
    ):
        if self.config_name == "nll":
            return _from_nll(predictions, references)
        if model_id is None:
            raise ValueError("model_id=None is not allowed; pass a causal LM directory or cached Hub id")
        return _from_model(predictions, model_id, batch_size, add_start_token, device, max_length)


def _from_nll(nlls, counts) -> dict:
    ppls = []
    for i, (nll, count) in enumerate(zip(nlls, counts, strict=True)):
        if count <= 0:
            raise ValueError(f"references[{i}]={count!r} is not allowed; allowed: token counts > 0")
        ppls.append(math.exp(min(nll / count, _MAX_LOG)))
    nll_per_token = sum(nlls) / sum(counts)
    return {
        "perplexities": ppls,
        "mean_perplexity": np.mean(ppls),
        "perplexity": math.exp(min(nll_per_token, _MAX_LOG)),
        "nll_per_token": nll_per_token,
    }


def _from_model(predictions, model_id, batch_size, add_start_token, device, max_length) -> dict:
    # As huggingface/evaluate metrics/perplexity/perplexity.py, statement for statement.
    import torch
    from torch.nn import CrossEntropyLoss
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig

    model_type = PretrainedConfig.get_config_dict(model_id)[0].get("model_type")
    if model_type == "hf_heads" and model_type not in CONFIG_MAPPING:
        raise ValueError(
            f"model_id={model_id!r} is an hf_heads checkpoint, and hf_heads is not imported; allowed: import hf_heads "
            "first (it registers its model classes with AutoModelForCausalLM), or a base transformers checkpoint"
        )

    if device is not None:
        if device not in _DEVICES:
            raise ValueError(f"device={device!r} is not allowed; allowed: {', '.join(map(repr, _DEVICES))}")
        if device == "gpu":
            device = "cuda"
    else:
        device = "cuda" if torch.cuda.is_available() else "cpu"

    model = AutoModelForCausalLM.from_pretrained(model_id)
    model = model.to(device)

    tokenizer = AutoTokenizer.from_pretrained(model_id)

    # if batch_size > 1 (which generally leads to padding being required), and
    # if there is not an already assigned pad_token, assign an existing
    # special token to also be the padding token
    if tokenizer.pad_token is None and batch_size > 1:
        existing_special_tokens = list(tokenizer.special_tokens_map_extended.values())
        # check that the model already has at least one special token defined
        if len(existing_special_tokens) == 0:
            raise ValueError(
                f"batch_size={batch_size} is not allowed for a tokenizer without special tokens; allowed: 1"
            )
        # assign one of the special tokens to also be the pad token
        tokenizer.add_special_tokens({"pad_token": existing_special_tokens[0]})

    # a start token the tokenizer lacks would leave each text's first token unscored (huggingface/evaluate fails here)
    if add_start_token and tokenizer.bos_token_id is None:
        raise ValueError("add_start_token=True is not allowed for a tokenizer without a BOS token; allowed: False")
    if add_start_token and max_length:
        # leave room for <BOS> token to be added:
        max_tokenized_len = max_length - 1
    else:
        max_tokenized_len = max_length

    encodings = tokenizer(
        predictions,
        add_special_tokens=False,
        padding=True,
        truncation=True if max_tokenized_len else False,
        max_length=max_tokenized_len,
        return_tensors="pt",
        return_attention_mask=True,
    ).to(device)

    encoded_texts = encodings["input_ids"]
    attn_masks = encodings["attention_mask"]

    # check that each input is long enough:
    if add_start_token:
        if not torch.all(torch.ge(attn_masks.sum(1), 1)):
            raise ValueError("predictions: each input text must be at least one token long")
    elif not torch.all(torch.ge(attn_masks.sum(1), 2)):
        raise ValueError(
            "predictions: with add_start_token=False each input text must be at least two tokens long; "
            "run with add_start_token=True for one-token texts, and remove empty texts"
        )

    ppls = []
    loss_fct = CrossEntropyLoss(reduction="none")

    for start_index in evaluate.logging.tqdm(range(0, len(encoded_texts), batch_size)):
        end_index = min(start_index + batch_size, len(encoded_texts))
        encoded_batch = encoded_texts[start_index:end_index]
        attn_mask = attn_masks[start_index:end_index]

        if add_start_token:
            bos_tokens_tensor = torch.tensor([[tokenizer.bos_token_id]] * encoded_batch.size(dim=0)).to(device)
            encoded_batch = torch.cat([bos_tokens_tensor, encoded_batch], dim=1)
            attn_mask = torch.cat(
                [torch.ones(bos_tokens_tensor.size(), dtype=torch.int64).to(device), attn_mask], dim=1
            )

        labels = encoded_batch

        with torch.no_grad():
            out_logits = model(encoded_batch, attention_mask=attn_mask).logits

        shift_logits = out_logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        shift_attention_mask_batch = attn_mask[..., 1:].contiguous()

        perplexity_batch = torch.exp(
            (loss_fct(shift_logits.transpose(1, 2), shift_labels) * shift_attention_mask_batch).sum(1)
            / shift_attention_mask_batch.sum(1)
        )

        ppls += perplexity_batch.tolist()

    return {"perplexities": ppls, "mean_perplexity": np.mean(ppls)}
